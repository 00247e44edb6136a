"""The study report: figures (PNG) and one self-contained index.html, from a study store.

from depthlab.report import write_report, write_run_report, write_runs_report
path = write_report("runs/depthlab.sqlite", "runs/report")   # -> "runs/report/index.html"
path = write_run_report("runs/mine")   # one run folder (train --out, or a watcher's out) -> runs/mine/report/index.html
path = write_runs_report(["runs/a", "runs/b"], "runs/compare")   # several run folders overlaid on one page

Every figure is a function returning a matplotlib Figure (``outcome_map(data)``, ...; the list is
``depthlab.report.figures.FIGURES``); ``render`` saves them. In a notebook, ``depthlab.open(db)``
(:mod:`depthlab.report.view`) opens a store and its studies.

A report folder is rewritten only if it is empty or an earlier report (it holds ``MARKER``);
:func:`check_report_dir` is that rule, checked before a study runs and again when the report is written.
"""

from __future__ import annotations

import os

from depthlab.errors import InputError, option
from depthlab.paths import check_path_type, existing_ancestor, replace_file, safe_name
from depthlab.report.data import StudyData, load
from depthlab.report.figures import FIGURES, save_figures
from depthlab.report.html import page
from depthlab.report.layer_plots import bottom_vs_top, layer_profiles
from depthlab.report.plots import loss_curves, outcome_map
from depthlab.report.run_page import load_run, render_run
from depthlab.report.runs import render_runs
from depthlab.report.summary import summary_table

MARKER = ".depthlab-report"  # a folder holding this file is a depthlab report and may be rewritten
FIGURE_FILES = tuple(spec.file for spec in FIGURES)  # what a study report may have written before


def default_report_dir(db: str, study_name: str) -> str:
    """``<folder of the store>/report/<study name>``."""
    return os.path.join(os.path.dirname(db) or ".", "report", safe_name(study_name, keep="-_."))


class ReportFolderError(InputError):
    """A report folder that cannot be (re)written; the command line names the flag that chose it."""


def with_flag(message: str, flag: str) -> str:
    """A refused default report folder's line, ending on the flag that chooses another one."""
    if message.endswith("choose another report folder"):
        return f"{message} with {flag}"
    return f"{message}; choose another report folder with {flag}"


def check_report_dir(out_dir: str, figure_files: tuple[str, ...] = FIGURE_FILES) -> None:
    """Refuse (ReportFolderError, an InputError) a report folder that cannot be (re)written: a file, a
    non-empty folder that is not an earlier depthlab report, one holding a folder where the report
    writes a file (its marker, index.html or ``figure_files``), or a place where no folder can be made.
    Creates nothing."""
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise ReportFolderError(
            f"report folder {out_dir} exists and is not a folder; choose another report folder"
        )
    try:
        used = os.path.isdir(out_dir) and os.listdir(out_dir)
    except OSError as e:
        raise ReportFolderError(f"cannot read the report folder {out_dir}: {e.strerror}") from None
    if used and not os.path.exists(os.path.join(out_dir, MARKER)):
        raise ReportFolderError(
            f"report folder {out_dir} exists and is not a depthlab report folder; choose another report folder"
        )
    for name in (MARKER, "index.html", *figure_files) if used else ():
        if os.path.isdir(os.path.join(out_dir, name)):
            raise ReportFolderError(
                f"report folder {out_dir} holds a folder {name} where the report writes a file; "
                "choose another report folder"
            )
    parent = existing_ancestor(out_dir)  # the nearest existing folder is where the report's folders go
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
        raise ReportFolderError(f"cannot write the report to {out_dir} ({parent} is not a writable folder)")


def _prepare(out_dir: str, figure_files: tuple[str, ...] = FIGURE_FILES) -> None:
    """Create ``out_dir``, or reuse it if it is empty or an earlier report; refuse anything else."""
    check_report_dir(out_dir, figure_files)
    try:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, MARKER), "w") as f:
            f.write("written by depthlab report; the folder is rewritten by the next report\n")
    except OSError as e:
        raise ReportFolderError(f"cannot write the report to {out_dir}: {e.strerror}") from None
    for name in figure_files:  # a figure the new report does not draw must not linger from the old one
        path = os.path.join(out_dir, name)
        if os.path.exists(path):
            os.remove(path)


def render(data: StudyData, out_dir: str) -> str:
    """Write the figures and index.html for ``data`` into ``out_dir``; returns the index.html path."""
    _prepare(out_dir)
    figures = save_figures(data, out_dir)
    path = os.path.join(out_dir, "index.html")
    replace_file(path, page(data, figures), option("out"))  # a reader never sees half a page
    return path


def write_report(db: str, out_dir: str, study: str | int | None = None) -> str:
    """Read study ``study`` (id, name, or None = the latest) from ``db`` and render it; returns index.html's path."""
    check_path_type(db, "db", "the study store's path")
    check_path_type(out_dir, "out_dir", "the report folder's path")
    return render(load(db, study), out_dir)


def write_run_report(folder: str, out_dir: str | None = None) -> str:
    """The page of one run folder (depthlab.report.run_page) in ``out_dir`` (default ``folder/report``);
    returns index.html's path."""
    check_path_type(folder, "folder", "a run folder's path")
    check_path_type(out_dir, "out_dir", "the report folder's path", none_ok=True)
    out_dir = os.path.join(folder, "report") if out_dir is None else out_dir
    return render_run(load_run(folder), folder, out_dir, _prepare)


def write_runs_report(folders: list[str], out_dir: str | None = None) -> str:
    """One page overlaying several run folders (depthlab.report.runs) in ``out_dir`` (default
    ``runs-report`` beside the first folder); returns index.html's path."""
    if not isinstance(folders, (list, tuple)):
        raise TypeError(
            f"folders must be a list of run folders' paths, not {type(folders).__name__} (one folder's page: "
            "write_run_report)"
        )
    if not folders:
        raise InputError("folders: an empty list names no run; give one run folder or more")
    for f in folders:
        check_path_type(f, "folders", "a list of run folders' paths")
    check_path_type(out_dir, "out_dir", "the report folder's path", none_ok=True)
    first = os.path.abspath(folders[0])
    out_dir = os.path.join(os.path.dirname(first), "runs-report") if out_dir is None else out_dir
    return render_runs(folders, out_dir, _prepare)


__all__ = [
    "FIGURES",
    "MARKER",
    "StudyData",
    "bottom_vs_top",
    "check_report_dir",
    "default_report_dir",
    "layer_profiles",
    "load",
    "loss_curves",
    "outcome_map",
    "render",
    "summary_table",
    "write_report",
    "write_run_report",
    "write_runs_report",
]

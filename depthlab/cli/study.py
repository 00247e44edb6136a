"""depthlab study: run a grid of training runs into the SQLite store (resumable), then write the report."""

from __future__ import annotations

import os
import signal

from depthlab.errors import InputError
from depthlab.study.executors import EXECUTORS, available_cores
from depthlab.study.store import DEFAULT_DB


def default_workers() -> int:
    """One single-threaded worker per core, at most 4 (tiny models gain little from more threads)."""
    return max(1, min(available_cores(), 4))


def default_report_dir(db: str, study_name: str) -> str:
    """``<folder of the store>/report/<study name>``."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in study_name)
    return os.path.join(os.path.dirname(db) or ".", "report", safe)


def add_parser(sub) -> None:
    p = sub.add_parser(
        "study",
        help="run a grid of training runs (resumable) and write its report",
        description="Expand a grid (a preset or a YAML file) into runs, skip those the store already "
        "holds, run the rest on a local process pool or Ray, store every result in SQLite, then write "
        "the HTML report and print an outcome table. Re-running the same command resumes. Each finished "
        "run's curves are also written as TensorBoard events under <db folder>/tensorboard/<study name>/"
        "<run>/ (see them all with: tensorboard --logdir <db folder>/tensorboard).",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument("--preset", help="default (the main job), smoke (tests), full (long); default: default")
    src.add_argument("--grid", metavar="FILE.yaml", help="a grid file: model/train base config and axes")
    p.add_argument(
        "--db", default=DEFAULT_DB, help=f"the study store (default {DEFAULT_DB}); any other file is refused"
    )
    p.add_argument(
        "--workers",
        type=int,
        default=default_workers(),
        help=f"runs at once; each gets cores/workers torch threads (default {default_workers()})",
    )
    p.add_argument("--executor", default="local", help=f"{'|'.join(EXECUTORS)} (default local)")
    p.add_argument("--ray-address", help="an existing Ray cluster (default: start a local Ray)")
    p.add_argument("--report", metavar="DIR", help="report folder (default <db folder>/report/<study name>)")
    p.add_argument("--no-report", action="store_true", help="do not write the report at the end")
    p.add_argument(
        "--dry-run", action="store_true", help="list the runs and what the store holds; run nothing"
    )
    p.add_argument("--fields", action="store_true", help="list the fields a grid may set, and exit")
    p.set_defaults(run=run)


def load_study(args):
    """The StudyConfig named by --grid or --preset (default preset: default), validated."""
    from depthlab.study import StudyConfig, preset

    if args.grid:
        return StudyConfig.from_yaml(args.grid)
    return preset(args.preset or "default")


def run(args) -> int:
    from depthlab.study.grid import field_help

    if args.fields:
        print(field_help())
        return 0
    study = load_study(args)  # a bad grid stops here, before the store is touched
    if args.dry_run:
        return dry_run(study, args.db)
    report_dir = None if args.no_report else (args.report or default_report_dir(args.db, study.name))
    if report_dir is not None:
        check_report_dir(report_dir)  # refused now, not after every run has been run and stored
    from depthlab.study import run_study

    previous = signal.signal(signal.SIGTERM, _interrupted)  # `kill PID`, a scheduler: stop as Ctrl-C does
    try:
        res = run_study(
            study, db=args.db, workers=args.workers, executor=args.executor, ray_address=args.ray_address
        )
    finally:
        signal.signal(signal.SIGTERM, previous)
    done = ", ".join(f"{n} {k}" for k, n in sorted(res.outcomes.items())) or "nothing new"
    print(f"\nstudy {study.name!r}: ran {res.ran} of {res.total} runs in {res.seconds:.0f} s ({done})")
    if res.elsewhere:
        print(f"{res.elsewhere} runs were left to another depthlab process running this study")
    if res.events_dir:
        print(
            f"TensorBoard events: {res.events_dir} (tensorboard --logdir {os.path.dirname(res.events_dir)})"
        )
    print_summary(args.db, res.study_id, report_dir)
    return 1 if res.failed else 0


def _interrupted(signum, frame):
    """SIGTERM handler: raise KeyboardInterrupt, so the driver stops its workers and puts its unfinished
    runs back in the queue (a rerun resumes them) instead of dying with them marked running."""
    raise KeyboardInterrupt


def check_report_dir(out_dir: str) -> None:
    """Refuse (InputError naming --report) a report folder that the report at the end would refuse: a
    file, a non-empty folder that is not an earlier depthlab report (no marker file), or a place where
    no folder can be made. Creates nothing."""
    from depthlab.report import MARKER

    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise InputError(f"report folder {out_dir} exists and is not a folder; choose another --report")
    try:
        used = os.path.isdir(out_dir) and os.listdir(out_dir)
    except OSError as e:
        raise InputError(
            f"cannot read the report folder {out_dir}: {e.strerror}; choose another --report"
        ) from None
    if used and not os.path.exists(os.path.join(out_dir, MARKER)):
        raise InputError(
            f"report folder {out_dir} exists and is not a depthlab report folder; "
            "choose another --report (or --no-report)"
        )
    parent = os.path.abspath(out_dir)
    while not os.path.exists(parent):  # the nearest existing folder is where the report's folders go
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(
            f"cannot write the report to {out_dir} ({parent} is not a writable folder); choose another --report"
        )


def print_summary(db: str, study: str | int, report_dir: str | None) -> None:
    """Write the report of ``study`` (id or name) unless ``report_dir`` is None, then print where it is
    and the outcome table."""
    from depthlab.report import load, render, summary_table

    data = load(db, study)
    if report_dir is not None:
        print(f"report: {render(data, report_dir)}")
    print(f"\noutcome per cell (final validation loss), store {db}:\n")
    print(summary_table(data))


def dry_run(study, db: str) -> int:
    """Print every run with what the store already knows about it."""
    from depthlab.study import Store
    from depthlab.study.store import check_sqlite_header

    check_sqlite_header(db)  # a folder or a non-SQLite file is refused here as the real run refuses it
    known = {}
    if os.path.isfile(db) and os.path.getsize(db) > 0:  # an empty file would become a new store
        with Store(db, create=False) as s:
            known = {
                r["config_hash"]: r["status"] for r in s.conn.execute("SELECT config_hash, status FROM runs")
            }
    runs = study.expand()
    for i, r in enumerate(runs, 1):
        print(f"{i:>4}  {r.hash}  {known.get(r.hash, 'new'):8}  {r.label}")
    todo = sum(known.get(r.hash) != "done" for r in runs)
    print(f"study {study.name!r}: {len(runs)} runs, {todo} to run")
    return 0

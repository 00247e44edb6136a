"""The run page's header (lr, steps, final loss, outcome) and ``report --run A B`` overlaying runs."""

from __future__ import annotations

import re

import pytest
from watched import watched_run

from depthlab.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")


def _watched(folder, lr: float, steps: int = 12):
    return watched_run(lr, steps, every=3, out=str(folder))


def _cells(html: str) -> list[str]:
    return [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", html, re.S)]


def test_the_run_page_header_says_lr_steps_final_loss_and_outcome(tmp_path, capsys):
    w = _watched(tmp_path / "sane", 3e-3)
    assert main(["report", "--run", str(tmp_path / "sane")]) == 0
    cells = _cells((tmp_path / "sane" / "report" / "index.html").read_text())
    facts = dict(zip(cells[0::2], cells[1::2]))
    assert facts["learning rate"] == "0.003" and facts["steps"].startswith("12 ")
    assert facts["final loss"] == f"{w.records[-1]['loss']:.4g} (training)"
    assert facts["outcome"].startswith(w.outcome()["outcome"])


def test_a_run_that_stopped_short_says_how_far_it_got_of_its_budget(tmp_path):
    from depthlab.report.run_page import run_facts

    recs = [{"step": 1, "loss": 5.5, "lr": 1.0}, {"step": 2, "loss": float("nan"), "lr": 1.0}]
    diverged = {"records": recs, "summary": None, "result": {"outcome": "diverged", "step": 2},
                "config": {"model": {}, "train": {"steps": 100}}}  # fmt: skip
    assert run_facts(diverged)["steps"] == "2 of 100"
    finished = {**diverged, "records": [{**recs[0], "step": 100}]}
    assert run_facts(finished)["steps"] == "100"
    assert run_facts({**diverged, "config": None})["steps"] == "2"  # a watched loop: no budget known


def test_report_run_overlays_several_runs(tmp_path, capsys):
    a, b = _watched(tmp_path / "sane", 3e-3), _watched(tmp_path / "hot", 0.5)
    out = tmp_path / "both"
    assert main(["report", "--run", str(tmp_path / "sane"), str(tmp_path / "hot"), "--out", str(out)]) == 0
    html = (out / "index.html").read_text()
    assert "overlay_plot.png" in html and (out / "overlay_plot.png").stat().st_size > 10_000
    cells = _cells(html)
    row = cells.index("hot")
    assert cells[row + 1] == "0.5" and cells[row + 4].startswith(b.outcome()["outcome"])
    assert cells[cells.index("sane") + 4].startswith(a.outcome()["outcome"])
    assert main(["report", "--run", str(tmp_path / "sane"), str(tmp_path / "nothing")]) == 2
    assert "nothing" in capsys.readouterr().err


def test_the_run_report_writers_refuse_in_the_callers_words(tmp_path, capsys):
    """From Python the refusals name the argument (folder, folders, out_dir) before any work; the command
    line names --run, as before."""
    from depthlab import InputError
    from depthlab.report import write_report, write_run_report, write_runs_report

    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match=r"^folder .*empty: no metrics\.jsonl"):
        write_run_report(str(tmp_path / "empty"))
    with pytest.raises(InputError, match=r"^folder: an empty path"):
        write_run_report("")
    with pytest.raises(TypeError, match=r"^folder must be a run folder's path .*not NoneType"):
        write_run_report(None)
    with pytest.raises(TypeError, match=r"^folders must be a list of run folders' paths, not str"):
        write_runs_report(str(tmp_path / "empty"))  # not read as a list of one-letter folders
    with pytest.raises(InputError, match=r"^folders: an empty list names no run"):
        write_runs_report([])
    (tmp_path / "empty2").mkdir()
    with pytest.raises(InputError, match=r"^folders .*empty2?: no metrics\.jsonl"):
        write_runs_report([str(tmp_path / "empty"), str(tmp_path / "empty2")])
    with pytest.raises(InputError, match=r"^folders: an empty path"):
        write_runs_report(["", str(tmp_path / "empty")])
    with pytest.raises(InputError, match=r"^folders holds the folder .* twice"):
        write_runs_report([str(tmp_path / "empty"), str(tmp_path / "empty")])
    with pytest.raises(TypeError, match=r"^out_dir must be the report folder's path .*not int"):
        write_report(str(tmp_path / "s.sqlite"), 5)
    assert main(["report", "--run", str(tmp_path / "empty")]) == 2
    assert "error: --run " in capsys.readouterr().err
    assert main(["report", "--run", str(tmp_path / "empty"), str(tmp_path / "empty")]) == 2
    assert "error: --run names the folder" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "empty2"]  # nothing written


def test_a_metrics_file_cut_short_by_a_kill_is_read_to_its_last_whole_line_and_said_once(tmp_path, capsys):
    """A run killed while it wrote metrics.jsonl leaves its last line cut short: the page is drawn from the
    whole lines, and one line on stderr says what was left out. A line that is no record (a JSON list, an
    object without its step, layers that are no rows) is skipped and said the same way, never a crash (exit 1)."""
    _watched(tmp_path / "run", 3e-3)
    metrics = tmp_path / "run" / "metrics.jsonl"
    whole = metrics.read_text().splitlines(keepends=True)
    metrics.write_text("".join(whole) + whole[-1][:40])  # the next record, cut short
    assert main(["report", "--run", str(tmp_path / "run")]) == 0
    out, err = capsys.readouterr()
    assert err == (f"--run {tmp_path / 'run'}: metrics.jsonl: its last line is cut short (the run stopped while "
                   f"writing it); the page shows its {len(whole)} complete records\n")  # fmt: skip
    assert (tmp_path / "run" / "report" / "index.html").is_file()
    metrics.write_text(
        whole[0] + "[1, 2]\n" + '{"loss": 3.0}\n' + '{"step": 4, "layers": 5}\n' + "".join(whole[1:])
    )
    assert main(["report", "--run", str(tmp_path / "run")]) == 0
    assert capsys.readouterr().err.endswith(
        f"metrics.jsonl: lines 2, 3, 4 are no record, skipped; the page shows its {len(whole)} complete records\n"
    )
    metrics.write_text(whole[0][:30])  # killed while writing its first record: nothing to draw
    assert main(["report", "--run", str(tmp_path / "run"), str(tmp_path / "run")]) == 2
    assert main(["report", "--run", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and err.endswith("metrics.jsonl holds no record yet: its last line is cut short "
                                                 "(the run stopped while writing it)\n")  # fmt: skip

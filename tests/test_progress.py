"""Progress lines: drawn with a time estimate on a terminal, nothing anywhere else; probe --compare uses it."""

from __future__ import annotations

import io

import pytest

from depthlab import progress
from depthlab.progress import Progress, say


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_the_line_says_done_elapsed_and_left(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0])
    tty = _Tty()
    bar = Progress(4, "reproduce x", unit="run", expected_s=20.0, stream=tty)
    assert tty.getvalue().endswith("reproduce x: 0/4 runs, 0 s elapsed, about 20 s left")
    now[0] = 10.0
    bar.advance(expected_s=5.0)  # 10 s for what the cost model expected in 5: twice as slow
    assert tty.getvalue().endswith("1/4 runs, 10 s elapsed, about 30 s left")
    say("  a run's line", stream=tty)
    assert "\r\033[K  a run's line\n\r\033[Kreproduce x: 1/4" in tty.getvalue()
    bar.close()
    assert tty.getvalue().endswith("\r\033[K") and progress._ACTIVE == []


def test_without_expected_times_the_mean_time_per_item_is_used(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0])
    bar = Progress(4, "probe --compare", unit="probe", stream=_Tty())
    now[0] = 30.0
    bar.advance()
    assert bar.line() == "probe --compare: 1/4 probes, 30 s elapsed, about 2 min left"  # 3 x 30 s
    bar.close()


def test_nothing_is_drawn_when_not_a_terminal(capsys):
    out = io.StringIO()
    with Progress(3, "study", stream=out) as bar:
        bar.advance()
        say("plain line")
    assert out.getvalue() == "" and capsys.readouterr().err == "plain line\n"


@pytest.mark.usefixtures("one_thread")
def test_probe_compare_draws_its_progress_on_a_terminal(monkeypatch):
    from depthlab import ModelConfig
    from depthlab.probe.compare import compare

    tty = _Tty()
    monkeypatch.setattr(progress.sys, "stderr", tty)
    tiny = dict(n_layers=2, d_model=16, n_heads=2, max_len=64)
    runs = compare([("pre", ModelConfig(**tiny, wrap="pre")), ("post", ModelConfig(**tiny, wrap="post"))])
    assert len(runs.runs) == 2 and "probe --compare: 1/2 probes" in tty.getvalue()


def test_a_reproduction_announces_its_runs_then_counts_them_down(monkeypatch):
    from depthlab_lab.reproduce import lm_runs

    tty = _Tty()
    monkeypatch.setattr(progress.sys, "stderr", tty)
    monkeypatch.setattr(lm_runs.cost, "announce", lambda name, planned, done, where: 30.0)
    lm_runs.announce("demo", [({"n_layers": 2}, {"steps": 5}), ({"n_layers": 3}, {"steps": 5})], [0])
    (bar,) = lm_runs._PROGRESS
    assert bar.total == 2 and "reproduce demo: 0/2 runs" in tty.getvalue()
    m, t = lm_runs.configs({"n_layers": 2}, {"steps": 5, "seed": 0})
    lm_runs._advance(m, t)
    lm_runs._advance(m, t)
    assert lm_runs._PROGRESS == [] and "reproduce demo: 2/2 runs" in tty.getvalue()


def test_a_duration_is_said_in_a_unit_a_person_reads():
    from depthlab.progress import duration

    assert [duration(s) for s in (45, 7 * 60, 1.5 * 3600, 12 * 86400)] == [
        "45 s",
        "7 min",
        "1.5 h",
        "12 days",
    ]
    assert duration(2740 * 365.25 * 86400) == "2,740 years"
    assert duration(1.379e21 * 3600) == "1.6e+17 years"  # 1e23 steps: no 20-digit count of hours
    year = 365.25 * 86400  # at each edge, the rounded count never names the next unit's first value
    assert [duration(x) for x in (71.9 * 3600, 72 * 3600, 729.4 * 86400, 2.74 * year, 9.96 * year)] == [
        "71.9 h", "3 days", "729 days", "2.7 years", "10 years"]  # fmt: skip
    assert duration(9999.6 * year) == "1.0e+04 years" and duration(float("inf")) == "unknown"

"""Progress with a time estimate for long commands: a line redrawn on a terminal, plain lines in logs.

    bar = Progress(40, "reproduce lr-sensitivity", unit="run", expected_s=600.0)
    for run in runs:
        ...
        bar.advance(expected_s=20.0)    # one more done (its expected seconds, when a cost model knows them)
        say("  a line of output")       # printed above the bar, which is then redrawn
    bar.close()

On a terminal (the stream is a tty) one line is rewritten in place:
``reproduce lr-sensitivity: 12/40 runs, 3.1 min elapsed, about 7 min left``. Anywhere else (a pipe, a
file, a notebook, CI) nothing is drawn and :func:`say` prints plainly, so logs hold only the output;
with ``plain=True`` the same line is also printed, as a line of its own, each time another tenth of the
items is done (a log of a long ``depthlab train`` or ``coord`` says how far it is and how long is left).

The estimate: with expected times, the expected time still to go scaled by how long the done part took
against its expectation (a machine twice as slow as the cost model is told so after the first item);
without, the mean time per done item times the items left. Where the items are jobs of very different
cost, several at a time (a study's runs, longest first), :class:`TimeLeft` gives the estimate: the
count of done items is then no measure of the time, and the bar reads the clock instead.
"""

from __future__ import annotations

import math
import sys
import time

_ACTIVE: list[Progress] = []  # the bar drawn now (innermost last), for say()


def duration(seconds: float) -> str:
    """'45 s', '7 min', '1.5 h', '12 days', '2.7 years', '2,740 years', '4.4e+16 years' (hours up to 72,
    days up to two years; each count below where its rounding would reach the next unit's)."""
    if not math.isfinite(seconds):
        return "unknown"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 71.95 * 3600:
        return f"{seconds / 3600:.1f} h"
    days, years = seconds / 86400, seconds / (365.25 * 86400)
    if days < 729.5:
        return f"{days:.0f} days"
    if years < 9.95:
        return f"{years:.1f} years"
    return f"{years:,.0f} years" if years < 9999.5 else f"{years:.1e} years"


class TimeLeft:
    """The time left of jobs of known expected cost, ``workers`` at a time, from the times measured so far.

        clock = TimeLeft({"a": 60.0, "b": 10.0, "c": 10.0}, workers=2)   # a cost model's seconds per job
        clock.total_s()                    # before anything runs: 60 s (a runs alone while b and c run)
        clock.started("a"); clock.finished("a", 90.0)                      # a measured time
        clock.left_s()                     # b and c at the speed measured on a: 15 s

    Before any job has finished each job takes its expected seconds; afterwards each is scaled by the
    speed measured so far (the finished jobs' measured seconds over their expected seconds, summed), so
    a machine twice as slow as the cost model is told so after the first job. ``known`` adds jobs measured
    before (a resumed study's runs) to that speed without counting them as jobs. The wall time of the
    jobs left: their work spread over the workers, but never less than the longest single job (a job
    runs on one worker), and a running job counts only what is left of it. It is ordering-aware: when
    the slowest jobs go first, half the jobs done is far more than half the time, and this says so.
    ``depthlab study`` (each run's cost from :mod:`depthlab.train.cost`), ``coord`` and ``train`` use it;
    any list of jobs with expected seconds can (a reproduction's runs, a calibration's fits).
    """

    def __init__(self, expected: dict, workers: int = 1, known: list[tuple[float, float]] = ()):
        self.expected, self.workers = dict(expected), max(1, workers)
        self.running: dict = {}  # key -> its start (time.monotonic())
        self.done: set = set()
        self.seen_expected = sum(e for e, _ in known)  # the finished jobs' expected seconds, summed
        self.seen_measured = sum(m for _, m in known)

    def speed(self) -> float:
        """Measured over expected seconds of the finished jobs (1 before any)."""
        return self.seen_measured / self.seen_expected if self.seen_expected > 0 else 1.0

    def started(self, key) -> None:
        self.running[key] = time.monotonic()

    def finished(self, key, seconds: float | None = None) -> None:
        """Job ``key`` ended after ``seconds`` (default: since :meth:`started`). A job stopped early by
        design (a diverged run) should be given the seconds its whole length would have taken."""
        start = self.running.pop(key, None)
        if seconds is None:
            seconds = time.monotonic() - start if start is not None else self.expected[key]
        self.done.add(key)
        self.seen_expected += self.expected[key]
        self.seen_measured += seconds

    def skip(self, key) -> None:
        """Job ``key`` will not be measured here (it failed, or another process ran it): out of the time
        left, the measured speed as it was."""
        self.running.pop(key, None)
        self.done.add(key)

    def left_s(self) -> float:
        """The expected wall seconds until every job has finished."""
        now, speed = time.monotonic(), self.speed()
        left = [
            max(0.0, e * speed - (now - self.running[k])) if k in self.running else e * speed
            for k, e in self.expected.items()
            if k not in self.done
        ]
        return max(sum(left) / self.workers, max(left)) if left else 0.0

    total_s = left_s  # before anything has started, the time left is the whole


class Progress:
    """``total`` items of ``unit`` for ``what``; ``expected_s`` their expected seconds in all (or None);
    ``clock`` a :class:`TimeLeft` that gives the time left instead; ``plain``: off a terminal, print the
    line at each tenth of the items."""

    def __init__(
        self,
        total: int,
        what: str,
        unit: str = "item",
        expected_s: float | None = None,
        stream=None,
        clock: TimeLeft | None = None,
        plain: bool = False,
    ):
        self.total, self.what, self.unit, self.expected, self.clock = total, what, unit, expected_s, clock
        self.stream = stream or sys.stderr
        self.done, self.done_expected, self.start = 0, 0.0, time.monotonic()
        self.shown = bool(getattr(self.stream, "isatty", lambda: False)()) and total > 0
        self.plain = plain and not self.shown and total > 0
        if self.shown:
            _ACTIVE.append(self)
            self._draw()

    def advance(self, n: int = 1, expected_s: float | None = None) -> None:
        """``n`` more items done (``expected_s``: their expected seconds)."""
        tenth = self.done * 10 // max(self.total, 1)
        self.done += n
        self.done_expected += expected_s or 0.0
        if self.shown:
            self._draw()
        elif self.plain and self.done * 10 // max(self.total, 1) > tenth:
            print(self.line(), file=self.stream, flush=True)

    def left_s(self) -> float | None:
        """The estimated seconds still to go (None before the first item is done)."""
        if self.clock is not None:
            return self.clock.left_s()
        elapsed = time.monotonic() - self.start
        if self.done == 0:
            return self.expected
        if self.expected and self.done_expected > 0:
            return max(0.0, self.expected - self.done_expected) * elapsed / self.done_expected
        return elapsed / self.done * max(0, self.total - self.done)

    def line(self) -> str:
        """The progress line (without the terminal's control characters)."""
        elapsed = time.monotonic() - self.start
        left = self.left_s()
        units = self.unit if self.total == 1 else f"{self.unit}s"
        tail = "" if left is None else f", about {duration(left)} left"
        return f"{self.what}: {self.done}/{self.total} {units}, {duration(elapsed)} elapsed{tail}"

    def _draw(self) -> None:
        self.stream.write("\r\033[K" + self.line())
        self.stream.flush()

    def clear(self) -> None:
        if self.shown:
            self.stream.write("\r\033[K")
            self.stream.flush()

    def close(self) -> None:
        """Erase the line (the command's own output says what was done)."""
        if self.shown:
            self.clear()
            _ACTIVE.remove(self)
            self.shown = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def say(message: str, stream=None) -> None:
    """Print ``message`` on its own line (stderr by default), above the progress bar if one is drawn."""
    bar = _ACTIVE[-1] if _ACTIVE else None
    if bar is not None:
        bar.clear()
    print(message, file=stream or sys.stderr, flush=True)
    if bar is not None:
        bar._draw()

"""Progress with a time estimate for long commands, drawn on a terminal only.

    bar = Progress(40, "reproduce lr-sensitivity", unit="run", expected_s=600.0)
    for run in runs:
        ...
        bar.advance(expected_s=20.0)    # one more done (its expected seconds, when a cost model knows them)
        say("  a line of output")       # printed above the bar, which is then redrawn
    bar.close()

On a terminal (the stream is a tty) one line is rewritten in place:
``reproduce lr-sensitivity: 12/40 runs, 3.1 min elapsed, about 7 min left``. Anywhere else (a pipe, a
file, a notebook, CI) nothing is drawn and :func:`say` prints plainly, so logs hold only the output.

The estimate: with expected times, the expected time still to go scaled by how long the done part took
against its expectation (a machine twice as slow as the cost model is told so after the first item);
without, the mean time per done item times the items left.
"""

from __future__ import annotations

import sys
import time

_ACTIVE: list[Progress] = []  # the bar drawn now (innermost last), for say()


def duration(seconds: float) -> str:
    """'45 s', '7 min', '1.5 h'."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


class Progress:
    """``total`` items of ``unit`` for ``what``; ``expected_s`` their expected seconds in all (or None)."""

    def __init__(
        self, total: int, what: str, unit: str = "item", expected_s: float | None = None, stream=None
    ):
        self.total, self.what, self.unit, self.expected = total, what, unit, expected_s
        self.stream = stream or sys.stderr
        self.done, self.done_expected, self.start = 0, 0.0, time.monotonic()
        self.shown = bool(getattr(self.stream, "isatty", lambda: False)()) and total > 0
        if self.shown:
            _ACTIVE.append(self)
            self._draw()

    def advance(self, n: int = 1, expected_s: float | None = None) -> None:
        """``n`` more items done (``expected_s``: their expected seconds)."""
        self.done += n
        self.done_expected += expected_s or 0.0
        if self.shown:
            self._draw()

    def left_s(self) -> float | None:
        """The estimated seconds still to go (None before the first item is done)."""
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

"""The two commands the lab adds to ``depthlab``: ``reproduce`` and ``calibrate``; and how the lab's own
``python -m`` commands refuse bad input (:func:`one_line`)."""

from __future__ import annotations

import sys
from collections.abc import Callable

from depthlab.errors import InputError
from depthlab.paths import printable


def one_line(prog: str, run: Callable[[], int]) -> int:
    """``run()``'s exit code; bad input (an InputError) is one line on stderr and exit 2, as the depthlab
    command says it."""
    try:
        return run()
    except InputError as e:
        sys.stderr.write(f"{prog}: error: {printable(e)}\n")
        return 2

"""The options of ``depthlab.watch`` (and of its Hugging Face and Lightning callbacks), checked whole
before a hook is attached, a folder made or a tracker started.

A wrong type is a ConfigError naming the option, its value and what it takes (one line), never an
exception from deep inside the first training step: ``every=True`` is not 1, ``unigram_loss=nan``
would make every outcome "trained", ``steps=-3`` would read a trend over no steps, ``out=""`` would
write into the current folder, ``echo=5`` would fail at the first warning.
"""

from __future__ import annotations

import math
import os

from torch import nn

from depthlab.errors import ConfigError
from depthlab.paths import check_path
from depthlab.watch.rules import Thresholds
from depthlab.watch.trackers import check_trackers

FLAGS = ("attention", "loss_from_output", "measure", "outcome")
# the keyword options of depthlab.watch beyond model, optimizer, every, out and trackers
WATCH_OPTIONS = ("blocks", "sublayers", "logits", "when", "attention", "thresholds", "unigram_loss", "steps",
                 "detectors", "loss_from_output", "on_record", "echo")  # fmt: skip
CALLABLES = ("when", "logits", "on_record")


def check_every(every, none_ok: bool = False) -> None:
    """``every``: an int >= 1 (a bool is not a count); None too where ``none_ok`` (the default interval)."""
    if every is None and none_ok:
        return
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise ConfigError("every", every, "an integer >= 1 (log every that many steps)")


def check_options(every=10, out=None, *, detectors=(), **options) -> tuple:
    """Check :func:`depthlab.watch.watch`'s options (module docstring); returns ``detectors`` as a tuple
    of names (one name alone is one detector, not its letters). ConfigError for the first bad one."""
    check_every(every)
    if out is not None:
        if not isinstance(out, (str, os.PathLike)):
            raise ConfigError("out", out, "a folder's path (str or pathlib.Path), or None")
        check_path(out, "out")
    for name in FLAGS:
        if name in options and not isinstance(options[name], bool):
            raise ConfigError(name, options[name], "True or False")
    for name in CALLABLES:
        if options.get(name) is not None and not callable(options[name]):
            raise ConfigError(name, options[name], "a function, or None")
    _check_numbers(options.get("unigram_loss"), options.get("steps"))
    thresholds = options.get("thresholds")
    if thresholds is not None and not isinstance(thresholds, Thresholds):
        raise ConfigError("thresholds", thresholds, "a depthlab.watch.Thresholds, or None")
    blocks = options.get("blocks")
    if blocks is not None:
        seq = isinstance(blocks, (list, tuple, nn.ModuleList))
        if not seq or not all(isinstance(b, nn.Module) for b in blocks):
            raise ConfigError("blocks", blocks, "a list (or nn.ModuleList) of the stack's block modules")
    echo = options.get("echo")
    if echo is not None and not callable(getattr(echo, "write", None)):
        raise ConfigError("echo", echo, "a stream with write() (sys.stderr), or None for silence")
    if isinstance(detectors, str):
        detectors = (detectors,)
    if not isinstance(detectors, (list, tuple)) or not all(isinstance(d, str) for d in detectors):
        raise ConfigError("detectors", detectors, "a list of detector names")
    return tuple(detectors)


def _check_numbers(unigram_loss, steps) -> None:
    if unigram_loss is not None:
        ok = isinstance(unigram_loss, (int, float)) and not isinstance(unigram_loss, bool)
        if not ok or not math.isfinite(unigram_loss) or unigram_loss <= 0:
            raise ConfigError(
                "unigram_loss", unigram_loss, "a finite loss > 0 (nats), or None to estimate it"
            )
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise ConfigError("steps", steps, "the planned number of updates, an integer >= 1, or None")


def check_callback(every, out, trackers, options: dict, none_ok: bool = False) -> None:
    """A framework callback's arguments, checked when it is made: ``every`` (None allowed where
    ``none_ok``: the framework's logging interval), ``out``, ``trackers`` (names and types; nothing is
    started) and ``options``, which must be :func:`depthlab.watch.watch`'s."""
    unknown = sorted(set(options) - set(WATCH_OPTIONS))
    if unknown:
        raise ConfigError(
            unknown[0], options[unknown[0]], f"an option of depthlab.watch: {', '.join(WATCH_OPTIONS)}"
        )
    check_every(every, none_ok)
    check_options(1 if every is None else every, out, **options)
    check_trackers(trackers, out)

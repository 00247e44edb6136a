"""Where a watcher writes when given ``out=DIR``: the files ``depthlab train --out`` writes, minus the
checkpoints.

    DIR/metrics.jsonl          one record per logged step (:mod:`depthlab.watch.keys`)
    DIR/events.out.tfevents.*  TensorBoard scalars under depthlab train's tags (:mod:`depthlab.watch.events`)
    DIR/watch.json             what was watched (stack path, layers, every, steps, the last lr and loss),
                               the blind spots, every warning, the unigram loss estimate and the outcome
                               so far; rewritten at each logged step, so a killed loop leaves it

A DIR that already holds a run's files is refused (nothing stored is overwritten): choose another.
"""

from __future__ import annotations

import json
from pathlib import Path

from depthlab.errors import InputError
from depthlab.jsonable import finite_or_none
from depthlab.paths import check_folder, make_folder, replace_file
from depthlab.watch.events import Events
from depthlab.watch.outcome import outcome_line

METRICS, SUMMARY = "metrics.jsonl", "watch.json"


def append_jsonl(path: Path, record: dict) -> None:
    """Append ``record`` as one line of strict JSON (a non-finite number becomes null)."""
    with open(path, "a") as f:
        f.write(json.dumps(finite_or_none(record)) + "\n")


def write_json(path: Path, obj: dict) -> None:
    """Write ``obj`` as strict JSON through a temporary file (a reader never sees half of it)."""
    replace_file(path, json.dumps(finite_or_none(obj), indent=2) + "\n", "out")


class WatchOutput:
    """The out folder of one watched loop (rank 0 only)."""

    def __init__(self, path: str):
        self.path = Path(path)
        check_folder(self.path, "out")
        taken = [n for n in ("config.json", METRICS, SUMMARY) if (self.path / n).exists()]
        taken += [p.name for p in self.path.glob("events.out.tfevents.*")]
        if taken:
            raise InputError(f"out {path} already holds a run ({taken[0]}); choose another folder")
        make_folder(str(self.path), "out", path)
        self.events = Events(str(self.path))

    def write(self, record: dict, summary: dict) -> None:
        append_jsonl(self.path / METRICS, record)
        self.events.log(record)
        write_json(self.path / SUMMARY, summary)

    def close(self, summary: dict, outcome: dict | None = None) -> None:
        """Write the final summary; the outcome also as TensorBoard text (``depthlab/outcome``)."""
        write_json(self.path / SUMMARY, summary)
        if outcome is not None:
            self.events.text("depthlab/outcome", outcome_line(outcome), summary.get("steps") or 0)
        self.events.close()

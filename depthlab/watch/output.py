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


def closing_line(outcome: dict, summary: dict) -> str:
    """What the watcher prints at close: "outcome: stalled at step 40: <why, with its numbers>", "outcome:
    trained (last logged loss 2.411, unigram level 3.147)", or "no outcome: <why>" without a label."""
    if not outcome.get("outcome") or outcome.get("reason"):
        return ("outcome: " if outcome.get("outcome") else "") + outcome_line(outcome)
    loss, U = summary.get("final_loss"), summary.get("unigram_loss")
    figures = [
        f"last logged loss {loss:.3f}" if loss is not None else "",
        f"unigram level {U:.3f}" if U else "",
    ]
    shown = ", ".join(f for f in figures if f)
    return f"outcome: {outcome_line(outcome)}" + (f" ({shown})" if shown else "")


def append_jsonl(path: Path, record: dict) -> None:
    """Append ``record`` as one line of strict JSON (a non-finite number becomes null)."""
    with open(path, "a") as f:
        f.write(json.dumps(finite_or_none(record)) + "\n")


def write_json(path: Path, obj: dict) -> None:
    """Write ``obj`` as strict JSON through a temporary file (a reader never sees half of it)."""
    replace_file(path, json.dumps(finite_or_none(obj), indent=2) + "\n", "out")


def check_out(path, flag: str = "out") -> None:
    """Refuse (InputError naming ``flag``) an out folder that cannot be made or already holds a run's
    files; makes nothing. A script checks its ``--out`` with it before any work."""
    folder = Path(path)
    check_folder(folder, flag)
    taken = [n for n in ("config.json", METRICS, SUMMARY) if (folder / n).exists()]
    taken += [p.name for p in folder.glob("events.out.tfevents.*")]
    if taken:
        raise InputError(f"{flag} {path} already holds a run ({taken[0]}); choose another folder")


class WatchOutput:
    """The out folder of one watched loop (rank 0 only)."""

    def __init__(self, path: str):
        self.path = Path(path)
        check_out(path)
        self.made = not self.path.exists()  # discard() removes only a folder this made
        make_folder(str(self.path), "out", path)
        self.events = Events(str(self.path))

    def write(self, record: dict, summary: dict) -> None:
        append_jsonl(self.path / METRICS, record)
        self.events.log(record)
        write_json(self.path / SUMMARY, summary)

    def discard(self) -> None:
        """Undo the folder's opening (a tracker could not start): its event file, and the folder if
        it is left empty (nothing else was written yet)."""
        self.events.close()
        for p in self.path.glob("events.out.tfevents.*"):
            p.unlink(missing_ok=True)
        if self.made:
            try:
                self.path.rmdir()
            except OSError:  # something else was put there meanwhile: keep it
                pass

    def close(self, summary: dict, outcome: dict | None = None) -> None:
        """Write the final summary; the outcome also as TensorBoard text (``depthlab/outcome``)."""
        write_json(self.path / SUMMARY, summary)
        if outcome is not None:
            self.events.text("depthlab/outcome", outcome_line(outcome), summary.get("steps") or 0)
        self.events.close()

"""TensorBoard event files for every study run, written by the driver as each run finishes.

Layout: ``<folder of the store>/tensorboard/<study name>/<run label>-<8 hex of the run hash>/``, so
``tensorboard --logdir runs/tensorboard`` shows every run of every study stored in ``runs/``, and
``--logdir runs/tensorboard/<study>`` one study. The scalars are those of ``depthlab train --out``
(:mod:`depthlab.watch.events`): train/loss, val/loss, ..., one curve per stream for each telemetry key.

The driver writes them, not the workers: a Ray worker may run on another machine, while the store's
folder is the driver's, and the payload already brings each run's metric records back. Writing events
never fails a run: on the first failure (a full disk, no tensorboard package) one warning goes to
stderr and the study goes on without events.
"""

from __future__ import annotations

import glob
import os
import sys

from depthlab.study.grid import RunSpec
from depthlab.watch.events import write_records

EVENTS_GLOB = "events.out.tfevents.*"
LABEL_CHARS = 80  # a run folder name stays well under any filesystem's 255-byte limit


def safe_name(text: str, keep: str = "-_.=+,", limit: int = LABEL_CHARS) -> str:
    """``text`` as one folder name: characters other than letters, digits and ``keep`` become ``_``,
    at most ``limit`` of them; never empty, ``.`` or ``..``."""
    safe = "".join(c if c.isalnum() or c in keep else "_" for c in text)[:limit]
    return "_" if set(safe) <= {"."} else safe


def study_events_root(db: str, study: str) -> str:
    """``<folder of the store>/tensorboard/<study name>``: one study's event folders."""
    return os.path.join(os.path.dirname(db) or ".", "tensorboard", safe_name(study, keep="-_."))


def run_events_dir(db: str, study: str, spec: RunSpec) -> str:
    """One run's event folder: its axis label made safe for a file name, then 8 hex of its hash (so two
    runs whose labels look alike never share a folder)."""
    return os.path.join(study_events_root(db, study), f"{safe_name(spec.label)}-{spec.hash[:8]}")


def final_scalars(payload: dict) -> dict:
    """The end-of-run numbers that the metric records do not carry: val/bpb, val/accuracy."""
    res = payload.get("result") or {}
    named = {"val/bpb": res.get("val_bpb"), "val/accuracy": res.get("accuracy")}
    return {k: v for k, v in named.items() if v is not None}


class StudyEvents:
    """Writes each finished run's curves under :func:`study_events_root`; ``err`` gets the one warning."""

    def __init__(self, db: str, study: str, err=None):
        self.db, self.study, self.err = db, study, err
        self.root = study_events_root(db, study)
        self.written = 0
        self.broken = False

    def write(self, spec: RunSpec, payload: dict) -> str | None:
        """Write ``payload["metrics"]`` into the run's folder; returns the folder, or None when the run
        logged nothing (a crash) or events cannot be written. A run written again (re-run after a
        failure or a kill) gets a new event file whose purge step hides the older file's curves."""
        records = payload.get("metrics") or []
        if self.broken or not records:
            return None
        out_dir = run_events_dir(self.db, self.study, spec)
        try:
            os.makedirs(out_dir, exist_ok=True)
            again = bool(glob.glob(os.path.join(glob.escape(out_dir), EVENTS_GLOB)))
            write_records(out_dir, records, final_scalars(payload), purge_step=0 if again else None)
        except Exception as e:  # events are a convenience: the run is stored whatever happens here
            self.broken = True
            why = " ".join(f"{type(e).__name__}: {e}".split())
            print(
                f"warning: cannot write TensorBoard events to {out_dir} ({why}); "
                "the study goes on without them",
                file=self.err or sys.stderr,
                flush=True,
            )
            return None
        self.written += 1
        return out_dir

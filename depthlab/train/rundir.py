"""The run folder (``--out DIR``): what a run writes, and the rule that nothing stored is overwritten.

    DIR/config.json      {"model": ModelConfig, "train": TrainConfig, "data": data info, "world_size": N}
    DIR/metrics.jsonl    one JSON object per logged step (the records given to ``on_log``)
    DIR/result.json      the outcome (RunResult.to_dict())
    DIR/events.out.tfevents.*   TensorBoard scalars (depthlab.watch.events)
    DIR/checkpoints/step-NNNNNN.pt   state_dict checkpoints (depthlab.train.checkpoint)

An existing, non-empty DIR is refused unless ``resume`` (continue it) or ``force`` (delete the files
above and start over; other files in DIR are left alone); ``resume`` of a DIR without config.json
(missing, empty, or not a run) is refused too. Files are strict JSON: a non-finite number
(the loss of a diverged run) is written as null.
"""

from __future__ import annotations

import json
import math
import platform
import sys
from pathlib import Path

import torch

from depthlab.config import ModelConfig, TrainConfig
from depthlab.errors import InputError
from depthlab.jsonable import finite_or_none
from depthlab.paths import check_folder
from depthlab.train import checkpoint
from depthlab.train.result import RunResult
from depthlab.version import __version__
from depthlab.watch.events import Events

CONFIG, METRICS, RESULT = "config.json", "metrics.jsonl", "result.json"
EVENTS_GLOB = "events.out.tfevents.*"


class RunDir:
    """One run's folder. ``check`` is read-only (every process may call it); the rest is rank 0's."""

    def __init__(self, path: str):
        self.path = Path(path)

    def own_files(self) -> list[Path]:
        """The files a run writes: its JSON files, its checkpoints (step-N.pt only: anything else in
        checkpoints/ is the user's) and its TensorBoard event files."""
        fixed = [self.path / n for n in (CONFIG, METRICS, RESULT)]
        ckpts = checkpoint.checkpoint_paths(str(self.path)) + checkpoint.checksum_paths(str(self.path))
        return [p for p in fixed if p.is_file()] + ckpts + sorted(self.path.glob(EVENTS_GLOB))

    def check(self, resume: bool, force: bool) -> None:
        """Refuse a folder that holds anything, unless resuming or forcing; refuse to resume nothing."""
        where = check_folder(self.path, "--out")
        if resume and force:
            raise InputError("--resume and --force contradict each other: continue the run, or start over")
        if resume and not (self.path / CONFIG).is_file():
            # a typo in the folder name must not start a fresh run unnoticed; every run writes CONFIG first
            if where != self.path.absolute():
                why = "no such folder"
            else:
                why = f"no {CONFIG}" if any(self.path.iterdir()) else "the folder is empty"
            raise InputError(f"--resume: nothing to resume in {self.path} ({why})")
        if force and (self.path / CONFIG).is_file() and not self._is_run_config():
            raise InputError(
                f"--force: {self.path / CONFIG} is not a depthlab run's config; it is not replaced "
                "(choose another --out)"
            )
        if self.path.is_dir() and any(self.path.iterdir()) and not (resume or force):
            raise InputError(
                f"--out {self.path} already exists and is not empty; --resume continues that run, "
                "--force deletes its results and starts over"
            )

    def make(self) -> None:
        """Create the folder; a path that cannot be one is the user's input (InputError), a full disk is not."""
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except (FileNotFoundError, FileExistsError, NotADirectoryError, PermissionError) as e:
            raise InputError(f"--out {self.path}: cannot create the folder: {e.strerror}") from None

    def _is_run_config(self) -> bool:
        """Whether DIR/config.json is one that a depthlab run wrote (model and train sections)."""
        try:
            stored = self.read_json(CONFIG)
        except InputError:  # not even JSON
            return False
        return isinstance(stored, dict) and isinstance(stored.get("model"), dict) and "train" in stored

    def clear(self) -> None:
        """Delete the files a run writes (``--force``); checkpoints/ goes too if nothing else is in it."""
        for p in self.own_files():
            p.unlink()
        folder = self.path / checkpoint.SUBDIR
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()

    def write_json(self, name: str, obj: dict) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        tmp = self.path / f".{name}.tmp"
        tmp.write_text(json.dumps(finite_or_none(obj), indent=2) + "\n")
        tmp.replace(self.path / name)

    def read_json(self, name: str) -> dict | None:
        p = self.path / name
        if not p.exists():
            return None
        try:
            return json.loads(p.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise InputError(f"cannot read {p}: {e}") from None

    def read_metrics(self, upto_step: float = math.inf) -> list[dict]:
        """The metrics records of steps <= ``upto_step`` (lines cut short by a kill are skipped)."""
        p = self.path / METRICS
        kept = []
        if p.exists():
            for line in p.read_text().splitlines():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if record.get("step", math.inf) <= upto_step:
                    kept.append(record)
        return kept

    def write_metrics(self, records: list[dict]) -> None:
        """Replace metrics.jsonl by ``records`` (a resumed run re-logs the steps after its checkpoint)."""
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / METRICS).write_text("".join(json.dumps(finite_or_none(r)) + "\n" for r in records))

    def append_metrics(self, record: dict) -> None:
        with open(self.path / METRICS, "a") as f:
            f.write(json.dumps(finite_or_none(record)) + "\n")


class RunOutput:
    """What a Trainer writes into its run folder: config, metrics, events, checkpoints, result.

    Every process reads (the checks, the checkpoint to resume from); only rank 0 writes.
    """

    def __init__(self, out_dir: str, trainer):
        self.dir, self.trainer, self.events = RunDir(out_dir), trainer, None
        self.main = trainer.dist.is_main

    def config(self) -> dict:
        t = self.trainer
        return {
            "model": t.model_cfg.to_dict(),
            "train": t.cfg.to_dict(),
            "data": t.task.data_info,
            "world_size": t.dist.world,
            "versions": {
                "depthlab": __version__,
                "torch": torch.__version__,
                "python": platform.python_version(),
            },
        }

    def open(self, resume: bool, force: bool):
        """Prepare the folder; on resume load the last checkpoint. Returns the stored RunResult when the run
        in the folder has already finished (nothing to do), else None."""
        d, t = self.dir, self.trainer
        d.check(resume, force)
        if resume:
            stored = d.read_json(CONFIG) or {}
            if stored:
                self.same_run(stored)
            result = d.read_json(RESULT)
            if result is not None:
                return RunResult.from_dict(result, d.read_metrics(), stored.get("data"))
            checkpoint.newest_intact(str(d.path), t.load_state_dict, self.note)
        t.metrics = d.read_metrics(upto_step=t.step) if resume else []
        t.dist.barrier()  # everyone has read before rank 0 writes
        if self.main:
            d.make()
            if force:
                d.clear()
            d.write_json(CONFIG, self.config())
            d.write_metrics(t.metrics)
            # on resume, drop the killed run's events after the checkpoint (all of them if there was none)
            self.events = Events(str(d.path), purge_step=t.step + 1 if resume else None)
        return None

    def same_run(self, stored: dict) -> None:
        """Refuse to resume a run with other settings or other data (a stored config written before a
        field was renamed, added or grouped is read as today's configs read it; fields compare by their
        flat names, so a difference names the one option, ``model.d_head``)."""
        mine = self.config()
        flat = {"model": self.trainer.model_cfg.flat_dict(), "train": self.trainer.cfg.flat_dict()}
        diffs = []
        for side, cls in (("model", ModelConfig), ("train", TrainConfig)):
            theirs = _normalised(cls, stored.get(side) or {})
            diffs += [
                f"{side}.{k} {theirs.get(k)!r} -> {v!r}" for k, v in flat[side].items() if theirs.get(k) != v
            ]
        if diffs:
            raise InputError(
                f"--resume: {self.dir.path} was started with other settings ({'; '.join(diffs[:4])}); "
                "pass the same flags, or --force to start over"
            )
        old_hash = stored.get("data", {}).get("sha256")
        if old_hash is not None and old_hash != mine["data"].get("sha256"):
            raise InputError(f"--resume: the data changed since {self.dir.path} was started (sha256 differs)")

    def note(self, line: str) -> None:
        """A line on stderr, from rank 0 (every rank reads the same checkpoints)."""
        if self.main:
            print(line, file=sys.stderr, flush=True)

    def log(self, record: dict, val: dict | None) -> None:
        self.dir.append_metrics(record)
        if self.events is not None:
            extra = {f"val/{k}": v for k, v in (val or {}).items() if k != "loss" and v is not None}
            self.events.log(record, extra)

    def checkpoint(self, step: int, state: dict) -> None:
        if self.main:
            checkpoint.save(str(self.dir.path), step, state)

    def write_result(self, result) -> None:
        if self.main:
            self.dir.write_json(RESULT, result.to_dict())

    def close(self) -> None:
        if self.events is not None:
            self.events.close()
            self.events = None


def _normalised(cls, stored: dict) -> dict:
    """A stored config section by today's flat field names (renamed fields under their new names, added
    fields at their defaults, grouped ones flat); the raw section when it does not even load (then
    every field differs)."""
    try:
        return cls.from_dict(stored).flat_dict()
    except (ValueError, TypeError):
        return stored

"""The run folder (``--out DIR``): what a run writes, and the rule that nothing stored is overwritten.

    DIR/config.json      {"model": ModelConfig, "train": TrainConfig, "data": data info, "world_size": N}
    DIR/metrics.jsonl    one JSON object per logged step (the records given to ``on_log``)
    DIR/result.json      the outcome (RunResult.to_dict())
    DIR/events.out.tfevents.*   TensorBoard scalars (depthlab.watch.events)
    DIR/checkpoints/step-NNNNNN.pt   state_dict checkpoints (depthlab.train.checkpoint)

An existing, non-empty DIR is refused unless ``resume`` (continue it) or ``force`` (delete the files
above, and a watched loop's watch.json, and start over; other files in DIR are left alone); ``resume`` of a DIR without config.json
(missing, empty, or not a run) is refused too, and so is a folder whose run files are not regular files
(a FIFO would block the read forever) or hold JSON of another shape. Files are strict JSON: a non-finite number
(the loss of a diverged run) is written as null.
"""

from __future__ import annotations

import json
import math
import os
import platform
import sys
from pathlib import Path

import torch

from depthlab.config import ModelConfig, TrainConfig
from depthlab.errors import InputError, option
from depthlab.jsonable import finite_or_none
from depthlab.paths import check_folder, check_input_file, check_path, printable, replace_file
from depthlab.train import checkpoint
from depthlab.train.run_result import RESULT_KEYS, RunResult
from depthlab.version import __version__
from depthlab.watch.events import Events
from depthlab.watch.output import SUMMARY as WATCH_SUMMARY

CONFIG, METRICS, RESULT = "config.json", "metrics.jsonl", "result.json"
EVENTS_GLOB = "events.out.tfevents.*"


class RunDir:
    """One run's folder. ``check`` is read-only (every process may call it); the rest is rank 0's."""

    def __init__(self, path: str):
        check_path(path, option("out"))  # before Path(''), which is the current folder
        self.path = Path(path)

    def own_files(self) -> list[Path]:
        """The files a run writes: its JSON files, its checkpoints (step-N.pt only: anything else in
        checkpoints/ is the user's) and its TensorBoard event files; and a watched loop's watch.json
        (depthlab.watch's, beside the same metrics.jsonl), which a run page would read as this run's."""
        fixed = [self.path / n for n in (CONFIG, METRICS, RESULT, WATCH_SUMMARY)]
        ckpts = checkpoint.checkpoint_paths(str(self.path)) + checkpoint.checksum_paths(str(self.path))
        return [p for p in fixed if p.is_file()] + ckpts + sorted(self.path.glob(EVENTS_GLOB))

    def check(self, resume: bool, force: bool) -> None:
        """Refuse a folder that holds anything, unless resuming or forcing; refuse to resume nothing;
        refuse a folder whose run files are not regular files (a FIFO would block the read forever)."""
        where = check_folder(self.path, option("out"))
        if resume and force:
            raise InputError(
                f"{option('resume')} and {option('force')} contradict each other: continue the run, or start over"
            )
        self.check_regular()
        if resume and not (self.path / CONFIG).is_file():
            # a typo in the folder name must not start a fresh run unnoticed; every run writes CONFIG first
            if where != self.path.absolute():
                why = "no such folder"
            else:
                why = f"no {CONFIG}" if any(self.path.iterdir()) else "the folder is empty"
            raise InputError(f"{option('resume')}: nothing to resume in {self.path} ({why})")
        if force and (self.path / CONFIG).is_file() and not self._is_run_config():
            raise InputError(
                f"{option('force')}: {self.path / CONFIG} is not a depthlab run's config; it is not replaced "
                f"(choose another {option('out')})"
            )
        if self.path.is_dir() and any(self.path.iterdir()) and not (resume or force):
            raise InputError(
                f"{option('out')} {self.path} already exists and is not empty; {option('resume')} continues that run, "
                f"{option('force')} deletes its results and starts over"
            )

    def check_regular(self) -> None:
        """InputError unless each file a run reads or replaces here is a regular file or absent, and
        checkpoints/ a folder: nothing is opened before this check."""
        folder = self.path / checkpoint.SUBDIR
        if os.path.lexists(folder) and not folder.is_dir():
            raise InputError(
                f"{option('out')} {printable(folder)} is not a folder: a run keeps its checkpoints there; move it away"
            )
        names = [self.path / n for n in (CONFIG, METRICS, RESULT)] + sorted(self.path.glob(EVENTS_GLOB))
        if folder.is_dir():
            names += [p for p in folder.iterdir() if checkpoint.is_checkpoint_name(p.name)]
        for p in names:
            check_input_file(p, f"{option('out')}: the run file", missing_ok=True)

    def make(self) -> None:
        """Create the folder; a path that cannot be one is the user's input (InputError), a full disk is not."""
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except (FileNotFoundError, FileExistsError, NotADirectoryError, PermissionError) as e:
            raise InputError(f"{option('out')} {self.path}: cannot create the folder: {e.strerror}") from None

    def _is_run_config(self) -> bool:
        """Whether DIR/config.json is one that a depthlab run wrote (model and train sections)."""
        try:
            return is_run_config(self.read_json(CONFIG))
        except InputError:  # not even a JSON object
            return False

    def clear(self) -> None:
        """Delete the files a run writes (``force``), all or none: each is first renamed aside in its own
        folder (so a checkpoints/ on another disk is no obstacle), and where one cannot be (a file its
        owner locked), every one renamed goes back and nothing is deleted (InputError); checkpoints/
        goes too if nothing else is in it."""
        moved: list[tuple[Path, Path]] = []
        for p in self.own_files():
            aside = p.with_name(f".depthlab-force-{os.getpid()}-{p.name}")
            try:
                os.rename(p, aside)
            except OSError as e:
                for back, there in reversed(moved):
                    os.rename(there, back)
                raise InputError(
                    f"{option('force')}: {printable(p)} cannot be removed ({e.strerror}); nothing was removed"
                ) from None
            moved.append((p, aside))
        for _, there in moved:
            there.unlink()
        folder = self.path / checkpoint.SUBDIR
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()

    def write_json(self, name: str, obj: dict) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        replace_file(self.path / name, json.dumps(finite_or_none(obj), indent=2) + "\n", option("out"))

    def read_json(self, name: str) -> dict | None:
        """The JSON object in DIR/``name`` (None when there is none); InputError when it is not a
        regular file, not JSON, or not a JSON object."""
        p = self.path / name
        if not check_input_file(p, f"{option('out')}: the run file", missing_ok=True):
            return None
        try:
            value = json.loads(p.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise InputError(f"cannot read {printable(p)}: {e}") from None
        if not isinstance(value, dict):
            raise InputError(
                f"{printable(p)} holds a JSON {type(value).__name__}, not a run's object; {option('force')} starts over"
            )
        return value

    def read_metrics(self, upto_step: float = math.inf) -> list[dict]:
        """The metrics records of steps <= ``upto_step`` (lines cut short by a kill are skipped)."""
        p = self.path / METRICS
        kept = []
        if check_input_file(p, f"{option('out')}: the run file", missing_ok=True):
            for line in p.read_text(errors="replace").splitlines():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue
                step = record.get("step", math.inf) if isinstance(record, dict) else None
                if isinstance(step, (int, float)) and step <= upto_step:  # a line of another shape is skipped
                    kept.append(record)
        return kept

    def write_metrics(self, records: list[dict]) -> None:
        """Replace metrics.jsonl by ``records`` (a resumed run re-logs the steps after its checkpoint)."""
        self.path.mkdir(parents=True, exist_ok=True)
        text = "".join(json.dumps(finite_or_none(r)) + "\n" for r in records)
        replace_file(self.path / METRICS, text, option("out"))

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
            if not is_run_config(stored):  # the same-settings check needs both sections
                raise InputError(
                    f"{option('resume')}: {printable(d.path / CONFIG)} is not a depthlab run's config (no model and "
                    f"train sections); it is not replaced: choose another {option('out')}"
                )
            self.same_run(stored)
            result = d.read_json(RESULT)
            if result is not None:
                return _stored_result(d, result, stored)
            if checkpoint.newest_intact(str(d.path), t.load_state_dict, self.note) is None:
                self.note(
                    f"{option('resume')}: {printable(d.path)} holds no checkpoint yet (the run stopped before its first, "
                    f"due at step {min(t.cfg.checkpoint_every, t.cfg.steps)}); it starts over from step 0"
                )
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
                f"{option('resume')}: {self.dir.path} was started with other settings ({'; '.join(diffs[:4])}); "
                f"pass the same settings, or {option('force')} to start over"
            )
        data = stored.get("data")
        old_hash = data.get("sha256") if isinstance(data, dict) else None
        if old_hash is not None and old_hash != mine["data"].get("sha256"):
            raise InputError(
                f"{option('resume')}: the data changed since {self.dir.path} was started (sha256 differs)"
            )

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


def is_run_config(stored) -> bool:
    """Whether ``stored`` is a config.json that a depthlab run wrote: model and train objects."""
    return isinstance(stored, dict) and all(isinstance(stored.get(k), dict) for k in ("model", "train"))


def _stored_result(d: RunDir, result: dict, stored: dict) -> RunResult:
    """The finished run's RunResult from its result.json; InputError when that has another shape."""
    data = stored.get("data") if isinstance(stored.get("data"), dict) else None
    for key in RESULT_KEYS:
        value = result.get(key)
        kinds = (str,) if key in ("outcome", "reason") else (int, float)
        if value is not None and (not isinstance(value, kinds) or isinstance(value, bool)):
            raise InputError(
                f"{option('resume')}: {printable(d.path / RESULT)} is not a run's result ({key} is {value!r}); "
                f"{option('force')} starts the run over"
            )
    if not isinstance(result.get("outcome"), str):
        raise InputError(
            f"{option('resume')}: {printable(d.path / RESULT)} names no outcome; {option('force')} starts the run over"
        )
    return RunResult.from_dict(result, d.read_metrics(), data)


def _normalised(cls, stored: dict) -> dict:
    """A stored config section by today's flat field names (renamed fields under their new names, added
    fields at their defaults, grouped ones flat); the raw section when it does not even load (then
    every field differs)."""
    try:
        return cls.from_dict(stored).flat_dict()
    except (ValueError, TypeError):
        return stored

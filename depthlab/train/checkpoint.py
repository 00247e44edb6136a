"""Checkpoints: plain state_dict files that load with ``torch.load(..., weights_only=True)``.

A checkpoint holds only tensors, numbers, strings, lists and dicts: the model's, optimizer's and
scheduler's state_dicts, the RNG states, the step (which is also the data position: batches are a
function of the step), the outcome monitor's state and the running totals. No pickled objects, so a
checkpoint from elsewhere cannot run code when loaded.

Files: ``DIR/checkpoints/step-000050.pt`` and, beside it, ``step-000050.pt.sha256`` (the SHA-256 of its
bytes, as ``sha256sum`` writes it); the last ``KEEP`` are kept. Each is written to a temporary file,
flushed to disk and renamed into place, its checksum first, so a run killed while saving leaves the
previous checkpoint intact. A resumed run loads the newest checkpoint whose bytes match their checksum
and which loads (:func:`newest_intact`): a checkpoint cut short, overwritten or flipped by a single byte
is said on stderr and passed over, never trained on.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

from depthlab.errors import InputError, option
from depthlab.paths import disk_full, free_bytes, replace_file

SUBDIR = "checkpoints"
KEEP = 2
SUM = ".sha256"
_NAME = re.compile(r"^step-(\d+)\.pt$")
_SUM_NAME = re.compile(r"^step-(\d+)\.pt\.sha256$")


def is_checkpoint_name(name: str) -> bool:
    """Whether ``name`` is one a run gives a checkpoint or its checksum file."""
    return bool(_NAME.match(name) or _SUM_NAME.match(name))


class DamagedCheckpoint(Exception):
    """A checkpoint that must not be resumed from; ``reason`` says why."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def checkpoint_paths(out_dir: str) -> list[Path]:
    """The checkpoints of a run folder, oldest first."""
    folder = Path(out_dir) / SUBDIR
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := _NAME.match(p.name))]
    return [p for _, p in sorted(found)]


def checksum_paths(out_dir: str) -> list[Path]:
    """The checksum files of a run folder (also any whose checkpoint is gone)."""
    folder = Path(out_dir) / SUBDIR
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if _SUM_NAME.match(p.name))


def sum_path(path: Path) -> Path:
    return path.with_name(path.name + SUM)


def save(out_dir: str, step: int, state: dict) -> Path:
    """Write ``state`` as the checkpoint of ``step`` with its checksum (each atomically, the checksum
    first) and drop all but the newest KEEP. The temporary file has a name ``mkstemp`` made (no user
    file is ever overwritten) and is removed whatever happens; a full disk is one InputError naming the
    checkpoint and the space it needs."""
    folder = Path(out_dir) / SUBDIR
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"step-{step:06d}.pt"
    need = state_bytes(state)
    free = free_bytes(folder)
    if free is not None and free < need:
        raise disk_full(path, need)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    tmp = Path(name)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        replace_file(sum_path(path), f"{file_sha256(tmp)}  {path.name}\n", option("out"))
        os.replace(tmp, path)
    except (OSError, RuntimeError) as e:  # torch reports a failed write as a RuntimeError
        free = free_bytes(folder)
        if (isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT)) or (
            free is not None and free < need
        ):
            raise disk_full(path, need) from None
        raise
    finally:
        tmp.unlink(missing_ok=True)
    for old in checkpoint_paths(out_dir)[:-KEEP]:
        old.unlink(missing_ok=True)
        sum_path(old).unlink(missing_ok=True)
    return path


def state_bytes(state) -> int:
    """About how many bytes ``state`` takes saved: its tensors' bytes, plus a little for their structure."""
    if isinstance(state, torch.Tensor):
        return state.numel() * state.element_size()
    if isinstance(state, dict):
        return sum(state_bytes(v) for v in state.values()) + 256
    if isinstance(state, (list, tuple)):
        return sum(state_bytes(v) for v in state) + 64
    return 64 if state is not None else 0


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def load(path: str | Path) -> dict:
    """A checkpoint's state, on the CPU, loaded without unpickling arbitrary objects (unverified: see
    :func:`load_verified`)."""
    return torch.load(path, map_location="cpu", weights_only=True)


def load_verified(path: Path) -> dict:
    """The state of the checkpoint at ``path`` once its bytes match the checksum beside it;
    DamagedCheckpoint (with the reason) otherwise, or when it does not load."""
    for p in (path, sum_path(path)):  # a FIFO would block the read forever
        if os.path.lexists(p) and not p.is_file():
            raise DamagedCheckpoint(f"{p.name} is not a regular file")
    try:
        recorded = sum_path(path).read_text().split()
    except FileNotFoundError:
        raise DamagedCheckpoint(f"no {SUM} checksum beside it") from None
    except (OSError, UnicodeDecodeError):
        raise DamagedCheckpoint(f"its {SUM} file cannot be read") from None
    if not recorded or not re.fullmatch(r"[0-9a-f]{64}", recorded[0]):
        raise DamagedCheckpoint(f"its {SUM} file holds no checksum")
    try:
        if file_sha256(path) != recorded[0]:
            raise DamagedCheckpoint("its bytes do not match their checksum")
        return load(path)
    except DamagedCheckpoint:
        raise
    except Exception as e:  # OSError, or torch's reader on a file that checksums but does not load
        raise DamagedCheckpoint(f"it does not load: {type(e).__name__}") from None


def newest_intact(out_dir: str, use: Callable[[dict], None], note: Callable[[str], None]) -> Path | None:
    """Give ``use`` the state of the newest checkpoint of ``out_dir`` that is intact and that ``use``
    accepts (an exception from it means the state does not fit the run); returns its path, or None
    when the folder holds no checkpoint. Each checkpoint passed over is said to ``note``; when every
    one is, one InputError names them all (resuming would train on garbage or start over unasked)."""
    paths, passed = checkpoint_paths(out_dir), []
    for path in reversed(paths):
        try:
            state = load_verified(path)
            try:
                use(state)
            except (KeyError, ValueError, RuntimeError, TypeError) as e:
                why = " ".join(str(e).split())[:80]
                raise DamagedCheckpoint(f"it does not fit this run: {why}") from None
        except DamagedCheckpoint as e:
            passed.append((path, e.reason))
            continue
        for damaged, reason in passed:
            note(f"checkpoint {damaged} is damaged ({reason}); it is passed over")
        return path
    if paths:
        raise InputError(
            f"{option('resume')}: none of the {len(paths)} checkpoints in {Path(out_dir) / SUBDIR} is intact "
            f"({'; '.join(f'{p.name}: {why}' for p, why in passed)}); {option('force')} starts the run over"
        )
    return None


def rng_state() -> dict:
    """The torch RNG states (CPU, and every CUDA device if any) as tensors."""
    state = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])

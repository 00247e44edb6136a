"""The atlas of measured runs: every run depthlab trained to calibrate the doctor or to reproduce a claim,
and the held-out runs of advise's grids once they were scored, in one compact table shipped with the library, with a user's own study stores beside it.

Each row is one training run: its configuration (wrapping, norm, skips, parametrization, depth, width,
heads, lr, warmup, steps, batch), its outcome (trained, undertrained, stalled, diverged), the step it
left the unigram plateau, its final validation loss, and the probe's quantities at init (the update
gain G, so that the step size at lr is G lr; the relative update per unit lr; the share of blocks that
renormalise the stream). ``atlas.csv.gz`` beside this file is written by the lab from the committed run
records (``lab/depthlab_lab/calibrate/atlas_build.py``); a verdict of ``depthlab advise`` rests only on
runs it can show from here. :func:`from_run` reads a stored run the same way, so a team's own study
stores become evidence too (``depthlab advise --atlas my.sqlite``: :mod:`depthlab.advise.evidence`).

    from depthlab.doctor.atlas import Atlas
    atlas = Atlas.load()                 # the runs depthlab measured
    atlas.to_pandas()                    # one row per run (needs pandas)
"""

from __future__ import annotations

import csv
import gzip
import io
import math
from dataclasses import dataclass, fields
from pathlib import Path

from depthlab.config import ModelConfig
from depthlab.doctor.recipe import recipe_of
from depthlab.frames import to_frame

ATLAS_PATH = Path(__file__).resolve().with_name("atlas.csv.gz")
RENORMALISING = ("post", "deepnorm", "admin", "mix")  # blocks that renormalise the stream, by name
UNKNOWN = "?"  # an unknown recipe (an atlas row written before recipes), as the CSV file holds it


def renormalises(wrap: str, n_layers: int) -> bool:
    """Whether some block of the stack renormalises the stream, by the wrapping's layer plan (for a run
    no probe measured): every block of post-LN, DeepNorm and Admin; Mix-LN's bottom floor(mix_ratio L),
    none at 2 or 3 layers under the default ratio."""
    if wrap == "mix":
        return math.floor(ModelConfig.mix_ratio * n_layers) >= 1
    return wrap in RENORMALISING


@dataclass(frozen=True)
class MeasuredRun:
    """One measured run (see the module docstring). ``source``: the study it ran in (or the store it
    was read from); ``residual``: the sublayers whose skip is on ("attn,cross,ffn" for a full block);
    ``update_gain`` and ``relative_update_per_lr`` are None where the run was not probed; ``recipe``:
    what else its configuration sets (:mod:`depthlab.doctor.recipe`)."""

    source: str
    wrap: str
    norm: str
    residual: str
    param: str
    n_layers: int
    d_model: int
    n_heads: int
    lr: float
    warmup: int
    steps: int
    batch_size: int
    seq_len: int
    seed: int
    outcome: str
    escape_step: int | None
    val_loss: float | None
    unigram_loss: float | None
    update_gain: float | None
    relative_update_per_lr: float | None
    renormalised_share: float | None
    config_hash: str
    # what the configuration sets that the columns above do not hold (depthlab.doctor.recipe: "" for a run
    # at every default); None in an atlas written before recipes were recorded: unknown, and no bar
    recipe: str | None = None

    @property
    def trained(self) -> bool:
        """Whether the run ended below the unigram band (the outcome "trained")."""
        return self.outcome == "trained"

    @property
    def family(self) -> str:
        """ "renormalising", "gated" (ReZero) or "free": how the doctor's limit judges this stack (by the
        probe's renormalised share, else by :func:`renormalises`)."""
        share = self.renormalised_share
        if (share is not None and share > 0) or (share is None and renormalises(self.wrap, self.n_layers)):
            return "renormalising"
        return "gated" if self.wrap == "rezero" else "free"

    def setting(self) -> tuple:
        """The run's configuration less its seed: runs of one setting differ by their seed alone."""
        return (self.wrap, self.norm, self.residual, self.param, self.n_layers, self.d_model, self.n_heads,
                self.lr, self.warmup, self.steps, self.batch_size, self.seq_len, self.recipe)  # fmt: skip

    def shape(self, recipe: bool = True) -> str:
        """'post 24L d128' (with the skips, parametrization and, with ``recipe``, the recipe where they
        differ from a full sp block at depthlab's defaults: 'pre 24L d32 final_norm=off')."""
        extra = "" if {"attn", "ffn"} <= set(self.residual.split(",")) else f" skips={self.residual}"
        extra += "" if self.param == "sp" else f" {self.param}"
        extra += f" {self.recipe.replace(', ', ' ')}" if recipe and self.recipe else ""
        return f"{self.wrap} {self.n_layers}L d{self.d_model}{extra}"


COLUMNS = tuple(f.name for f in fields(MeasuredRun))
INTS = ("n_layers", "d_model", "n_heads", "warmup", "steps", "batch_size", "seq_len", "seed", "escape_step")
FLOATS = ("lr", "val_loss", "unigram_loss", "update_gain", "relative_update_per_lr", "renormalised_share")


def _value(name: str, text: str | None):
    if name == "recipe":  # "" is a run at every default; no such column, or "?", is not known
        return None if text in (None, UNKNOWN) else text
    if text == "":
        return None if name in INTS or name in FLOATS else ""
    if name in INTS:
        return int(text)
    if name in FLOATS:
        v = float(text)
        return v if math.isfinite(v) else None
    return text


@dataclass(frozen=True)
class Atlas:
    """Measured runs (:class:`MeasuredRun`), in the order they were read."""

    runs: tuple[MeasuredRun, ...]

    @classmethod
    def load(cls, path: str | Path = ATLAS_PATH) -> Atlas:
        """The atlas file at ``path`` (default: the one shipped with depthlab)."""
        with gzip.open(path, "rt", encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f))
        return cls(tuple(MeasuredRun(**{k: _value(k, r.get(k)) for k in COLUMNS}) for r in rows))

    def __add__(self, other: Atlas) -> Atlas:
        return Atlas(self.runs + other.runs)

    def __len__(self) -> int:
        return len(self.runs)

    def __repr__(self) -> str:  # one line: the runs themselves are in .runs and .to_pandas()
        wraps = sorted({r.wrap for r in self.runs})
        return f"<Atlas: {len(self.runs):,} measured runs of {len(wraps)} wrappings ({', '.join(wraps)})>"

    def seed_split(self, run: MeasuredRun) -> tuple[MeasuredRun, ...]:
        """The runs of ``run``'s setting (itself included, by seed) where they went both ways: the same
        configuration, trained at one seed and failed at another; () where they agree or ``run`` has no
        twin. Runs of one setting that share a seed differ in something the atlas does not record (a
        size or detail the recipe leaves out, say), so such a setting is no evidence of the seed and gives ()."""
        twins = sorted((r for r in self.runs if r.setting() == run.setting()), key=lambda r: r.seed)
        if len({r.seed for r in twins}) < len(twins) or len({r.trained for r in twins}) < 2:
            return ()
        return tuple(twins)

    def to_csv(self) -> str:
        """The atlas as CSV text (the shipped file's format, before gzip)."""
        out = io.StringIO()
        w = csv.DictWriter(out, COLUMNS, lineterminator="\n")
        w.writeheader()
        for r in self.runs:
            w.writerow({k: _cell(k, getattr(r, k)) for k in COLUMNS})
        return out.getvalue()

    def to_pandas(self):
        """A DataFrame with a row per run and the columns of :class:`MeasuredRun` (pandas is an optional
        extra: without it, ModuleNotFoundError saying how to install it)."""
        return to_frame(({k: getattr(r, k) for k in COLUMNS} for r in self.runs), COLUMNS)


def _cell(name: str, v) -> str:
    """A field's CSV text: "" for None, but an unknown recipe is "?" ("" is a run at every default)."""
    if v is None:
        return UNKNOWN if name == "recipe" else ""
    return _text(v)


def _text(v) -> str:
    return repr(v) if isinstance(v, float) else str(v)


def from_run(source: str, run: dict, probe: dict | None) -> MeasuredRun:
    """A measured run from a stored run (``Store.runs`` row: its config, outcome, losses) and its probe
    JSON (None where it was not probed)."""
    model, train = run["config"]["model"], run["config"]["train"]
    pr = (probe or {}).get("config", {}).get("probe", {})
    stack = (probe or {}).get("config", {}).get("stack", {})
    lr = float(train["lr"])
    rho = pr.get("relative_update")
    return MeasuredRun(
        source=source,
        wrap=model.get("wrap", "pre"),
        norm=model.get("norm", "layernorm"),
        residual=",".join(model.get("residual", ("attn", "ffn"))),
        param=model.get("param", "sp"),
        n_layers=int(model["n_layers"]),
        d_model=int(model["d_model"]),
        n_heads=int(model["n_heads"]),
        lr=lr,
        warmup=int(train.get("warmup", 0)),
        steps=int(train["steps"]),
        batch_size=int(train["batch_size"]),
        seq_len=int(train["seq_len"]),
        seed=int(train.get("seed", 0)),
        outcome=run["outcome"],
        escape_step=run.get("escape_step"),
        val_loss=_finite(run.get("val_loss")),
        unigram_loss=_finite(run.get("unigram_loss")),
        update_gain=_finite(pr.get("update_gain")),
        relative_update_per_lr=None if rho is None or not lr else _finite(rho / lr),
        renormalised_share=stack.get("renormalised_share"),
        config_hash=run.get("config_hash", ""),
        recipe=recipe_of(run["config"]),
    )


def _finite(v) -> float | None:
    return None if v is None or not isinstance(v, (int, float)) or not math.isfinite(v) else float(v)

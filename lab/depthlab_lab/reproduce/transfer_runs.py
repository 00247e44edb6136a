"""The learning-rate transfer claims' runs: a registered grid as a study in a store, and what it shows.

A claim of lr transfer (across depth or width) sweeps the learning rate at several sizes for one wrapping
under a few parametrizations, with several seeds, in the tiny regime of the transfer presets
(:mod:`depthlab.study.presets`: d_model 32, 4 heads, 16 x 32 bytes per step, Adam with beta2 0.98, a
cosine schedule after 10 warmup steps). The grid is a study in a SQLite store, so an interrupted
reproduction resumes and a run already done is reused; the numbers are :mod:`depthlab.study.transfer`'s
(the best lr per size with its interval, the edge flag, the slope, the penalty), the same code
``depthlab transfer`` runs. Deciding them is the claim module's (its code is pinned); this module only
trains and tabulates.
"""

from __future__ import annotations

import os
import tempfile

from depthlab.paths import save_figure
from depthlab.report.data import load
from depthlab.report.transfer_plots import best_lr_figure, loss_vs_lr_figure
from depthlab.study.executors import default_workers
from depthlab.study.grid import StudyConfig
from depthlab.study.runner import plan, run_study
from depthlab.study.sensitivity import Curve, curves
from depthlab.study.store import DEFAULT_DB
from depthlab.study.transfer import Transfer, transfers
from depthlab.train.regimes import TINY_LM_MODEL, TINY_LM_TRAIN
from depthlab_lab.reproduce import cost

SIZE_FIELD = {"depth": "n_layers", "width": "d_model"}


def study(name: str, axis: str, regime: dict, what: str) -> StudyConfig:
    """The registered grid of ``regime`` as a study called ``name``: ``regime["wrap"]`` under each of
    ``regime["params"]`` (a depth rule based at the smallest depth, a width rule at the smallest
    width), at each of ``regime["sizes"]`` on ``axis``, each lr of ``regime["lrs"]`` and seed."""
    base_key = "base_depth" if axis == "depth" else "base_width"
    scaled = {"depth": ("depth_mup", "completep"), "width": ("mup", "depth_mup", "completep")}[axis]
    params = [
        {"param": p, base_key: min(regime["sizes"])} if p in scaled else {"param": p}
        for p in regime["params"]
    ]
    model = {**TINY_LM_MODEL, **{k: regime[k] for k in ("d_model", "n_layers", "n_heads") if k in regime}}
    train = {**TINY_LM_TRAIN, "steps": regime["steps"], "schedule": "cosine", "warmup": regime["warmup"]}
    axes = {
        "wrapping": [{"wrap": regime["wrap"]}],
        "parametrization": params,
        SIZE_FIELD[axis]: regime["sizes"],
        "lr": regime["lrs"],
        "seed": regime["seeds"],
    }
    return StudyConfig.from_dict(
        {"name": name, "description": what, "model": model, "train": train, "axes": axes}
    )


def store(name: str, registered: bool, out_dir: str | None) -> str:
    """The registered regime's store is the default one (its study, named after the claim, is resumed
    and reused there); any other (the quick smoke version) writes a store of its own, ``name``.sqlite in
    ``out_dir`` (or a new temporary folder)."""
    if registered:
        return DEFAULT_DB
    folder = out_dir or tempfile.mkdtemp(prefix=f"depthlab-{name}-")
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, f"{name}.sqlite")


def run(claim: str, grid: StudyConfig, db: str) -> list[dict]:
    """Run (or resume) ``grid`` in ``db``, printing the expected time of what is left first; returns
    the study's runs with their metrics."""
    done = {(spec.model, spec.train): status == "done" for spec, status in plan(grid, db)}
    cost.announce(claim, list(done), lambda m, t: done[(m, t)], where=f"in {db}")
    print(f"{claim}: study {grid.name!r} in {db} (already-done runs are reused)", flush=True)
    run_study(grid, db=db, workers=default_workers(), tensorboard=False)
    return load(db, grid.name).runs


def by_param(curve_list: list[Curve]) -> dict[str, list[Curve]]:
    """The curves of each parametrization (a curve's setting names its ``param``)."""
    out: dict[str, list[Curve]] = {}
    for c in curve_list:
        out.setdefault(str(c.key.get("param", "sp")), []).append(c)
    return out


def size_curves(runs: list[dict], axis: str) -> list[Curve]:
    """The learning-rate curves of ``runs`` at each size on ``axis``."""
    return curves(runs, SIZE_FIELD[axis])


def _lr(v: tuple[float, float, float]) -> str:
    return f"{v[0]:.3g} [{v[1]:.3g}, {v[2]:.3g}]"


def table(result: list[Transfer], axis: str) -> dict:
    """The per-size table of ``result``: best lr with its interval (EDGE at the sweep's edge) and the
    penalty of the smallest size's lr, per setting; then the slope."""
    rows = []
    for t in result:
        for r in t.rows:
            pen = "(the proxy)" if r is t.rows[0] else "-"
            if r.penalty is not None:
                pen = f"{r.penalty[0]:+.3f} [{r.penalty[1]:+.3f}, {r.penalty[2]:+.3f}]"
            rows.append([t.setting, str(r.size), _lr(r.best_lr) + (" EDGE" if r.at_edge else ""), pen])
        if t.slope is not None:
            rows.append([t.setting, "slope", f"{t.slope[0]:+.2f} [{t.slope[1]:+.2f}, {t.slope[2]:+.2f}]", ""])
    return {
        "title": f"best lr per {axis} (95% interval over seeds) and the penalty of the smallest {axis}'s lr (nats)",
        "columns": ["setting", axis, "best lr [95%]", f"penalty at the smallest {axis}'s lr"],
        "rows": rows,
    }


def summary(runs: list[dict], axis: str) -> tuple[list[Transfer], dict]:
    """(the transfers of ``runs`` across ``axis``, their table)."""
    result = transfers(runs, axis)
    return result, table(result, axis)


def plots(name: str, result: list[Transfer], runs: list[dict], axis: str, out_dir: str | None) -> list[str]:
    """The best lr against the size and the loss against lr per size, saved in ``out_dir`` (none without it)."""
    if out_dir is None or not result:
        return []
    return [
        save_figure(best_lr_figure(result), os.path.join(out_dir, f"{name}-best-lr.png")),
        save_figure(loss_vs_lr_figure(runs, axis), os.path.join(out_dir, f"{name}-loss-vs-lr.png")),
    ]

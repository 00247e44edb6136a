"""advise's answer at another depth or width: which parametrization to use and the lr at the target,
read from a learning-rate transfer study run at the user's own width (or depth), with its interval and
the measured penalty of keeping the proxy's lr. It says what ``depthlab transfer`` says: the study's
width, depths and budget, and each slope's :func:`~depthlab.study.transfer.reading` (a best lr at the
sweep's edge makes it a bound, not an estimate, and such a setting is never recommended)."""

from __future__ import annotations

from depthlab.config import ModelConfig, TrainConfig
from depthlab.report.data import load
from depthlab.study.transfer import Transfer, reading, runs_at, study_shape, transfers
from depthlab.study.transfer_text import (
    budget_text,
    mismatch,
    no_base_text,
    no_curves,
    preset_command,
    shape_line,
    slope_text,
    target_text,
)
from depthlab.words import plural


def _worst_penalty(t: Transfer) -> float:
    pens = [r.penalty[0] for r in t.rows if r.penalty is not None]
    return max(pens) if pens else 0.0


def recommend(results: list[Transfer]) -> Transfer | None:
    """The setting to use among those whose slope is an estimate: one whose best lr transfers (its
    interval inside the flat band), the smallest worst penalty among those; else the smallest |slope|.
    None when no slope is an estimate (none fitted, or each a bound from a best lr at the sweep's edge)."""
    flat = [t for t in results if reading(t) == "flat"]
    if flat:
        return min(flat, key=_worst_penalty)
    moving = [t for t in results if reading(t) in ("moves", "not decided")]
    return min(moving, key=lambda t: abs(t.slope[0])) if moving else None


def _wrap(run: dict, default: str) -> str:
    return (run.get("config") or {}).get("model", {}).get("wrap", default)


def own_runs(runs: list[dict], wrap: str) -> tuple[list[dict], list[str]]:
    """(the runs to answer from, the other wrappings they are): the study's runs of ``wrap`` and [];
    or, where it holds none, all its runs and their wrappings."""
    mine = [r for r in runs if _wrap(r, wrap) == wrap]
    if mine:
        return mine, []
    return runs, sorted({_wrap(r, wrap) for r in runs})


def _budget_line(shape: dict, train: TrainConfig | None) -> list[str]:
    """One line when the user's budget is not the study's (the best lr moves with it), else none."""
    if train is None:
        return []
    budget = {"steps": [train.steps], "batch_size": [train.batch_size], "seq_len": [train.seq_len]}
    if all(shape[k] == v for k, v in budget.items()):
        return []
    return [f"  your run is {train.steps:,} steps of {train.batch_size} x {train.seq_len}, the study's "
            f"{budget_text(shape)}: the best lr can move with the steps and the batch, so these lrs are for "
            f"the study's budget"]  # fmt: skip


def _setting_line(t: Transfer, use: bool) -> str:
    """'  use pre: fitted lr at depth 32 0.0187 [0.0093, 0.0375]; slope ...; proxy lr costs ... at depth 8'."""
    last = next((r for r in reversed(t.rows) if r.penalty is not None), None)
    pen = ""
    if last is not None:
        m, lo, hi = last.penalty
        cost = f"{m:+.2f}" if lo == hi else f"{m:+.2f} [{lo:+.2f}, {hi:+.2f}]"
        pen = f"; proxy lr costs {cost} nats at {t.axis} {last.size}"
    lr = "unknown" if reading(t) == "unknown" else target_text(t)  # the slope's text says why
    unscaled = f" [{no_base_text(t)}]" if t.no_base else ""
    return (f"  {'use' if use else '   '} {t.setting}{unscaled}: fitted lr at {t.axis} {t.target} {lr}; "
            f"slope {slope_text(t)}{pen}")  # fmt: skip


def _answer(
    name: str, shape: dict, results: list[Transfer], wrap: str, others: list[str]
) -> tuple[list[str], Transfer | None]:
    """(the lines from the head on, the recommended setting) of a study that can answer."""
    best = None if others else recommend(results)
    lines = [f"transfer to {results[0].axis} {results[0].target} ({shape_line(name, shape)}; "
             f"{plural(len(results), 'setting')}):"]  # fmt: skip
    if others:
        lines.append(f"  the study holds no run of {wrap}: these are {', '.join(others)}'s settings, for "
                     f"reference only (another wrapping's best lr need not be {wrap}'s); none is recommended")  # fmt: skip
    elif best is None:
        lines.append("  none is recommended: no setting's slope is an estimate (see each line)")
    lines += [_setting_line(t, t is best) for t in sorted(results, key=lambda t: t is not best)]
    return lines, best


def transfer_advice(
    model: ModelConfig,
    axis: str,
    target: int,
    db: str | None,
    study: str | None = None,
    train: TrainConfig | None = None,
) -> dict:
    """{"lines": the screen's lines, "study", "shape", "recommended": setting or None, "settings": [...],
    "other_wraps": the wrappings answered from where the study holds none of the user's} for a question
    at ``target`` depth (``axis`` "depth") or width; ``train`` (the user's run) adds a line when its
    budget is not the study's. Without a store, or where the study cannot answer, the one line that
    says why and how to get one."""
    fixed = "width" if axis == "depth" else "depth"
    mine = model.d_model if axis == "depth" else model.n_layers
    head = f"transfer to {axis} {target}"
    if db is None:
        how = preset_command(axis, mine)
        return {"lines": [f"{head}: no transfer study given; run one at your {fixed} ({how}), "
                          f"then add --transfer runs/depthlab.sqlite"]}  # fmt: skip
    data = load(db, study, flag="--transfer")
    name = data.study["name"]
    shape = study_shape([r for r in data.runs if r.get("status") == "done"] or data.runs)
    why = mismatch(axis, shape, model.d_model, model.n_layers)
    if why:
        return {"lines": [f"{head}: {why}"], "study": name}
    runs, others = own_runs(runs_at(data.runs, axis, model.d_model, model.n_layers), model.wrap)
    results = transfers(runs, axis, target)
    if not results:
        return {"lines": [f"{head}: {no_curves(name, axis)}"], "study": name}
    lines, best = _answer(name, shape, results, model.wrap, others)
    lines[1:1] = _budget_line(shape, train)
    return {"lines": lines, "study": name, "shape": shape, "recommended": best.setting if best else None,
            "settings": [t.to_dict() for t in results], "other_wraps": others}  # fmt: skip

"""advise's answer at another depth or width: which parametrization to use and the lr at the target,
read from a learning-rate transfer study run at the user's own width (or depth), with its interval and
the measured penalty of keeping the proxy's lr."""

from __future__ import annotations

from depthlab.config import ModelConfig
from depthlab.report.data import load
from depthlab.study.transfer import Transfer, mismatch, study_shape, transfers


def _range(v: tuple[float, float, float], signed: bool = False) -> str:
    f = "+.2f" if signed else ".3g"
    m, lo, hi = v
    return f"{m:{f}}" if lo == hi else f"{m:{f}} [{lo:{f}}, {hi:{f}}]"


def _flat(t: Transfer) -> bool:
    """Whether the best lr's slope interval holds 0: the proxy's best lr holds at the target."""
    return t.slope is not None and t.slope[1] <= 0 <= t.slope[2]


def _worst_penalty(t: Transfer) -> float:
    pens = [r.penalty[0] for r in t.rows if r.penalty is not None]
    return max(pens) if pens else 0.0


def recommend(results: list[Transfer]) -> Transfer | None:
    """The setting to use: one whose best lr transfers (slope interval holding 0), the smallest worst
    penalty among those; else the smallest |slope|. None without a fitted slope."""
    fitted = [t for t in results if t.slope is not None]
    if not fitted:
        return None
    flat = [t for t in fitted if _flat(t)]
    if flat:
        return min(flat, key=_worst_penalty)
    return min(fitted, key=lambda t: abs(t.slope[0]))


def transfer_advice(
    model: ModelConfig, axis: str, target: int, db: str | None, study: str | None = None
) -> dict:
    """{"lines": the screen's lines, "recommended": setting, "settings": [...]} for a question at
    ``target`` depth (``axis`` "depth") or width; without a store, the one line that says how to get one."""
    fixed = "width" if axis == "depth" else "depth"
    mine = model.d_model if axis == "depth" else model.n_layers
    if db is None:
        how = f"depthlab study --preset {axis}-transfer-quick --{fixed} {mine}"
        return {"lines": [f"transfer to {axis} {target}: no transfer study given; run one at your {fixed} ({how}), "
                          f"then add --transfer runs/depthlab.sqlite"]}  # fmt: skip
    data = load(db, study)
    shape = study_shape([r for r in data.runs if r.get("status") == "done"] or data.runs)
    why = mismatch(
        axis, shape, model.d_model if axis == "depth" else None, model.n_layers if axis == "width" else None
    )
    if why:
        return {"lines": [f"transfer to {axis} {target}: {why}"], "study": data.study["name"]}
    mine_runs = [
        r for r in data.runs if (r.get("config") or {}).get("model", {}).get("wrap", model.wrap) == model.wrap
    ]
    results = transfers(mine_runs or data.runs, axis, target)
    best = recommend(results)
    lines = [
        f"transfer to {axis} {target} (study {data.study['name']} at your {fixed}, {len(results)} settings):"
    ]
    for t in sorted(results, key=lambda t: t is not best):
        tag = "use" if t is best else "   "
        slope = (
            "no slope"
            if t.slope is None
            else f"slope {_range(t.slope, True)}" + (" (flat)" if _flat(t) else "")
        )
        lr = "-" if t.target_lr is None else _range(t.target_lr)
        pens = [r.penalty for r in t.rows if r.penalty is not None]
        pen = f"; proxy lr costs {_range(pens[-1], True)} nats at {axis} {t.rows[-1].size}" if pens else ""
        lines.append(f"  {tag} {t.setting}: lr at {axis} {target} {lr}; {slope}{pen}")
    return {"lines": lines, "study": data.study["name"], "recommended": best.setting if best else None,
            "settings": [t.to_dict() for t in results]}  # fmt: skip

"""The doctor's calibration record: where its learning-rate and trainability verdicts were calibrated, and how often they were right there.

The record is ``calibration.json`` next to this file. Its "range" holds, per quantity, the smallest and
largest value the calibration runs covered (width d_model, depth n_layers, lr, warmup, and the relative
update of :mod:`depthlab.probe.update_size`); its "agreement" holds, per verdict key ("code:level", or
"prediction:fails" / "prediction:trains" where only the prediction's count is known), how many
calibration runs got that verdict and how many of them went the way it said. :func:`outside` names the
quantities of a configuration that fall outside the range (its verdict is then an extrapolation) and
:func:`evidence` writes the count as a sentence. ``depthlab reproduce doctor`` rewrites the record from
the tuning grid's store (:mod:`depthlab_lab.calibrate.calibration`).
"""

from __future__ import annotations

import functools
import json
import os

RECORD_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "calibration.json")
RANGE_KEYS = (("d_model", "widths"), ("n_layers", "depths"), ("lr", "lrs"), ("warmup", "warmups"))
DIGITS = 4  # the decimals the record stores a fitted limit and its band with


@functools.cache
def load_record(path: str = RECORD_PATH) -> dict:
    """The calibration record as a dict (read once per path)."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _fmt(v) -> str:
    return f"{v:g}" if float(v).is_integer() else f"{v:.3g}"


def range_text(record: dict) -> str:
    """'widths 32-64, depths 2-16, lrs 0.001-0.05, warmups 0-40 (where)': the calibrated range."""
    rng = record["range"]
    parts = [f"{name} {_fmt(rng[k][0])}-{_fmt(rng[k][1])}" for k, name in RANGE_KEYS if k in rng]
    return ", ".join(parts) + (f" ({record['where']})" if record.get("where") else "")


def outside(record: dict, values: dict, word: str = "calibrated") -> list[str]:
    """One phrase per quantity of ``values`` (keys as in the record's range; None = unknown, not judged)
    that lies outside the calibrated range, e.g. 'width 512 is above the calibrated widths 32-64'
    (``word`` names the range: "calibrated", "fitted")."""
    rng, out = record["range"], []
    names = dict(RANGE_KEYS) | {"relative_update": "relative updates", "step_size": "step sizes"}
    for key, value in values.items():
        if value is None or key not in rng:
            continue
        lo, hi = rng[key]
        if lo <= value <= hi:
            continue
        side = "above" if value > hi else "below"
        label = names.get(key, key)
        out.append(f"{label.rstrip('s')} {_fmt(value)} is {side} the {word} {label} {_fmt(lo)}-{_fmt(hi)}")
    return out


def evidence(record: dict, key: str) -> str | None:
    """'on the calibration grid, 26 of 29 runs predicted to fail stalled or diverged' for a verdict key
    (None when the record has no count for it)."""
    a = record.get("agreement", {}).get(key)
    if not a or not a.get("runs"):
        return None
    return f"on the calibration grid, {a['agreed']} of {a['runs']} runs {a['what']}"

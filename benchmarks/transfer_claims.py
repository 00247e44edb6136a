"""Writes the compact record of the registered transfer claims' runs (docs/transfer-claims.json).

    depthlab reproduce coord-depth       --json DIR/coord-depth.json
    depthlab reproduce lr-transfer-depth --json DIR/lr-transfer-depth.json
    depthlab reproduce width-transfer    --json DIR/width-transfer.json
    python benchmarks/transfer_claims.py --json-dir DIR [--db runs/depthlab.sqlite] [--out docs/transfer-claims.json]

Per claim: its registration commit, regime and every check's result and rule; for coord-depth each
setting's per-seed slopes at the last step (every module) and the last stream's seed-mean activation
per depth; for the two learning-rate claims the best lr per size and every training run's final
validation loss, read from the study store, from which each slope can be derived again.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

from depthlab.report.data import load
from depthlab_lab.reproduce import REGISTRATIONS

# The studies the learning-rate claims' registered regimes run in the store (their names in the claims).
STUDIES = {
    "lr-transfer-depth": ("lr-transfer-depth", "n_layers"),
    "width-transfer": ("width-transfer-claim", "d_model"),
}
ABOUT = (
    "the registered transfer claims' runs: per claim its registration commit, regime and checks (each "
    "seed's value and the rule), plus per setting the coordinate check's per-seed slopes at the last step, "
    "or each training run's final validation loss"
)


def _r(v, digits: int = 4):
    return float(f"{v:.{digits}g}") if isinstance(v, (int, float)) and math.isfinite(v) else None


def _checks(d: dict, values: bool) -> list[dict]:
    out = []
    for c in d["checks"]:
        e = {"claim": c["claim"], "result": c["result"], "counted": c["counted"]}
        if values and "interval" in c:
            e["values"] = [_r(v) for v in c["interval"]["values"]]
        if "bounds" in c:
            e["bounds"] = [c["bounds"]["at_least"], c["bounds"]["at_most"]]
        if "edge" in c["measured"]:
            e["note"] = c["measured"].split("; ")[-1]
        out.append(e)
    return out


def coord_record(d: dict, commit: str) -> dict:
    """coord-depth's part: its checks (their values are the slopes below) and per-seed slopes."""
    slopes = d["slopes"]
    return {
        "commit": commit,
        "regime": d["regime"],
        "seconds": d["seconds"],
        "checks": _checks(d, values=False),
        "slope_last_per_seed": {s: {m: [_r(v, 3) for v in q["slope_last"]] for m, q in mods.items()}
                                for s, mods in slopes.items()},
        "stream_mean_per_depth_last_step": {s: {m: [_r(v, 3) for v in q["mean_last"]] for m, q in mods.items()
                                                if m.startswith("stream@L")} for s, mods in slopes.items()},
    }  # fmt: skip


def lr_record(d: dict, commit: str, runs: list[dict], size: str) -> dict:
    """A learning-rate claim's part: its checks, the best lr per size and every run's final loss."""
    rows = sorted(
        [r["config"]["model"]["param"], r["config"]["model"][size], r["config"]["train"]["lr"],
         r["config"]["train"]["seed"], _r(r.get("val_loss"), 5), r.get("outcome")]
        for r in runs
    )  # fmt: skip
    best = [
        {"setting": t["setting"], "rows": [[x["size"], [_r(v) for v in x["best_lr"]], x["at_edge"]] for x in t["rows"]],
         "slope": [_r(v) for v in t["slope"]] if t["slope"] else None}
        for t in d["transfers"]
    ]  # fmt: skip
    return {"commit": commit, "regime": d["regime"], "checks": _checks(d, values=True), "best_lr": best,
            "runs_columns": ["param", size, "lr", "seed", "val_loss", "outcome"], "runs": rows}  # fmt: skip


CLAIMS = ("coord-depth", *STUDIES)


def build(json_dir: str, db: str, names: tuple[str, ...] = CLAIMS) -> dict:
    """The record of claims ``names`` from their --json files in ``json_dir`` and the study store ``db``."""
    claims = {}
    for name in names:
        with open(os.path.join(json_dir, f"{name}.json"), encoding="utf-8") as f:
            d = json.load(f)
        commit = REGISTRATIONS[name].commit
        if name == "coord-depth":
            claims[name] = coord_record(d, commit)
        else:
            study, size = STUDIES[name]
            claims[name] = lr_record(d, commit, load(db, study).runs, size)
    return {"about": ABOUT, "claims": claims}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json-dir", required=True, help="the folder of the three claims' --json files")
    p.add_argument("--db", default=os.path.join("runs", "depthlab.sqlite"), help="the study store")
    p.add_argument("--out", default=os.path.join("docs", "transfer-claims.json"), help="the record to write")
    p.add_argument(
        "--claims",
        default=",".join(CLAIMS),
        help="which claims, comma-separated (default all three; a rerun of one claim gets its own record)",
    )
    args = p.parse_args(argv)
    names = tuple(n for n in args.claims.split(",") if n)
    unknown = [n for n in names if n not in CLAIMS]
    if unknown or not names:
        print(f"transfer_claims: --claims {args.claims!r}: choose from {', '.join(CLAIMS)}", file=sys.stderr)
        return 2
    try:
        record = build(args.json_dir, args.db, names)
    except (OSError, KeyError, ValueError) as e:
        print(f"transfer_claims: {e}", file=sys.stderr)
        return 2
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(json.dumps(record, separators=(",", ":")) + "\n")
    print(f"wrote {args.out} ({os.path.getsize(args.out):,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A compact record of every run and check behind a reproductions document, and the results regenerated
from it.

``depthlab reproduce all`` writes it beside the document (docs/reproductions-record.json): per claim,
its registration's commit, every training run (a hash of its configuration, its seed, its outcome, its
final losses, the commit it was trained at and whether this sitting loaded it from the run cache) and every check (the result, the result under a revised rule, the values the check read
and the rule it applied: the bounds and the interval's scale). :func:`regenerate` decides every check
that has its values again from the record alone, so a reader can audit each result without rerunning.
A check decided on something other than values over seeds (a yes/no per seed, a deterministic
comparison) is recorded with its result and counted as not recomputable.
"""

from __future__ import annotations

import hashlib
import json
import math

from depthlab.intervals import INCONCLUSIVE, decide, log_interval, mean_interval
from depthlab_lab.reproduce.shares import share_interval

# what revised_unless_control appends to a check's measurement when the compared runs did not train
CONTROL_FAILED = " (inconclusive under the revised rule)"

VERSION = 1


def _hash(config: dict) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _run(d: dict) -> dict:
    config = d.get("config", {})
    return {
        "label": d.get("label"),
        "config_hash": _hash(config),
        "seed": config.get("train", {}).get("seed"),
        "outcome": d.get("outcome"),
        "val_loss": d.get("val_loss"),
        "final_train_loss": d.get("final_train_loss"),
        "unigram_loss": d.get("unigram_loss"),
        "commit": d.get("commit"),
        "loaded": d.get("loaded"),
    }


def _check(c: dict) -> dict:
    keep = (
        "claim",
        "result",
        "revised",
        "revision",
        "counted",
        "revised_sanity",
        "bounds",
        "revised_bounds",
        "p",
    )
    out = {k: c[k] for k in keep if k in c}
    if "interval" in c:
        out["values"] = c["interval"]["values"]
    if "revised_values" in c:
        out["revised_values"] = c["revised_values"]
    control = _failed_control(c.get("measured", ""))
    if control and c.get("revised") == INCONCLUSIVE:
        out["revised_control"] = control
    return out


def _failed_control(measured: str) -> str:
    """The control a revised rule found failed (:func:`~depthlab_lab.reproduce.reproduction.revised_unless_control`
    appends it to what was measured): under that rule the check is inconclusive whatever its interval."""
    head, sep, _ = measured.rpartition(CONTROL_FAILED)
    return head.rpartition("; ")[2] if sep else ""


def build(parts, registrations: dict) -> dict:
    """The record of ``parts`` (Reproductions): JSON-able, {"version", "claims": {name: {...}}}."""
    claims = {}
    for p in parts:
        d = p.to_dict()
        reg = registrations.get(p.name)
        claims[p.name] = {
            "commit": reg.commit if reg else None,
            "runs": [_run(r) for r in d.get("runs", []) if isinstance(r, dict)],
            "checks": [_check(c) for c in d["checks"]],
        }
    return {"version": VERSION, "claims": claims}


def decide_again(values: list, bounds: dict) -> str:
    """A check's result from its recorded values and rule, as :func:`seeded_check` decides it (or, for
    the "share" scale, :func:`depthlab_lab.reproduce.shares.share_check`: values 0/1 per seed)."""
    if bounds.get("scale") == "share":
        interval = share_interval([v == 1 for v in values]) if values else None
        return (
            decide(interval, at_least=bounds.get("at_least"), at_most=bounds.get("at_most"))
            if interval
            else INCONCLUSIVE
        )
    if len(values) < 2 or not all(isinstance(v, (int, float)) and math.isfinite(v) for v in values):
        return INCONCLUSIVE
    if bounds.get("scale") == "log":
        if not all(v > 0 for v in values):
            return INCONCLUSIVE
        interval = log_interval(values)
    else:
        interval = mean_interval(values)
    return decide(interval, at_least=bounds.get("at_least"), at_most=bounds.get("at_most"))


def regenerate(record: dict) -> tuple[int, int, list[str]]:
    """(recomputed, not recomputable, problems): every recorded check with values decided again from the
    record; a problem names a check whose recorded result (or revised result) the record does not give."""
    done, other, problems = 0, 0, []
    for name, claim in record["claims"].items():
        for c in claim["checks"]:
            if "values" not in c or "bounds" not in c:
                other += 1
                continue
            done += 1
            again = decide_again(c["values"], c["bounds"])
            if again != c["result"]:
                problems.append(f"{name}: {c['claim']}: recorded {c['result']}, the record gives {again}")
            if "revised_bounds" in c and c.get("revised"):
                again = (
                    INCONCLUSIVE  # a side of the comparison did not train: no verdict under that rule
                    if c.get("revised_control")
                    else decide_again(c.get("revised_values", c["values"]), c["revised_bounds"])
                )
                if again != c["revised"]:
                    problems.append(f"{name}: {c['claim']}: revised {c['revised']}, the record gives {again}")
    return done, other, problems


def write(record: dict, path: str) -> None:
    """Write ``record`` to ``path`` as compact JSON (what cannot be written as JSON becomes null)."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(record, sort_keys=True, separators=(",", ":"), default=_none) + "\n")


def _none(v):
    return None

"""The opening tables of docs/transfer.md: what transfers under which parametrization, from the
registered claims' committed run records.

For each parametrization and axis, whether the best learning rate transfers, the slope of log best lr
against log size with its 95% interval over seeds, the penalty of the proxy's lr at the largest size,
and the evidence (registered or not measured), with a link to the section. The slope and the penalty
are computed again here, by :func:`depthlab.study.transfer.transfers` (the code ``depthlab transfer``
runs), from each training run's final validation loss as the records keep it
(``docs/transfer-claims.json``; for width, the fresh-seed run under the corrected muP rule,
``docs/transfer-claims-width-rerun.json``); lab/tests/test_transfer_table.py checks that the slopes are
the records' own. "Transfers" reads the slope's interval against the claims' registered band (+-0.25,
the sweep's resolution): inside it, yes; wholly outside, no; across its edge, not decided.

The second table is the registered depth coordinate check (coord-depth): per parametrization, pre-LN's
last stream's slope against depth after 10 Adam steps, and its checks over the nine wrappings.
"""

from __future__ import annotations

import json
from pathlib import Path

from depthlab.intervals import AGREE, INCONCLUSIVE, MISMATCH, mean_interval
from depthlab.study.transfer import Transfer, transfers
from depthlab_lab import REPOSITORY
from depthlab_lab.reproduce import REGISTRATIONS

DOCS = REPOSITORY / "docs"
# Which record holds each axis's registered runs, the claim, and the section of docs/transfer.md.
RUNS = {
    "width": (
        "transfer-claims-width-rerun.json",
        "width-transfer",
        "#width-transfer-mups-width-transfer-sp-against-mup",
    ),
    "depth": (
        "transfer-claims.json",
        "lr-transfer-depth",
        "#lr-transfer-depth-the-best-learning-rate-across-depth-sp-against-completep",
    ),
}
# The exploratory presets' sections (seeds 0-2, before the registrations): linked, their numbers not
# repeated (no run record keeps their runs).
EXPLORATORY = {"width": "#measured-width-transfer-quick", "depth": "#measured-depth-transfer-quick"}
COORD = "#coord-depth-the-depth-coordinate-check-of-every-wrapping"
# The rows that have no registered measurement, and why.
NOT_MEASURED = (
    ("depth_mup", "depth", "not measured; its coordinate check is below", COORD),
    ("mup", "depth", "does not apply: muP has no depth rule", "#the-parametrizations"),
    ("depth_mup, completep", "width", "not measured; they scale width as muP does", "#the-parametrizations"),
)


def record_runs(claim: dict) -> list[dict]:
    """A record's training runs as a study's run dicts (config, axes, final loss, outcome): what
    :func:`depthlab.study.transfer.transfers` reads."""
    columns = claim["runs_columns"]
    size = columns[1]
    out = []
    for row in claim["runs"]:
        r = dict(zip(columns, row, strict=True))
        out.append(
            {
                "config": {"model": {size: r[size]}, "train": {"lr": r["lr"], "seed": r["seed"]}},
                "axes": {"wrap": "pre", "param": r["param"]},
                "val_loss": r["val_loss"],
                "outcome": r["outcome"],
            }
        )
    return out


def measured(axis: str, docs: Path = DOCS) -> tuple[str, list[Transfer]]:
    """(the claim, its transfers per parametrization) of ``axis``'s registered record."""
    record, name, _ = RUNS[axis]
    claim = json.loads((docs / record).read_text(encoding="utf-8"))["claims"][name]
    return name, transfers(record_runs(claim), axis)


def verdict(slope: tuple[float, float, float], band: float) -> str:
    """Whether the best lr transfers, from the slope's interval against the registered band."""
    _, low, high = slope
    if -band <= low and high <= band:
        return "yes"
    if high < -band:
        return "no: it falls with size"
    if low > band:
        return "no: it rises with size"
    return f"not decided: the interval reaches past +-{band:g}"


def _size(axis: str, size: int) -> str:
    return f"d_model {size}" if axis == "width" else f"{size} layers"


def _penalty(t: Transfer, axis: str) -> str:
    last = t.rows[-1]
    if last.penalty is None:
        return "-"
    m, lo, hi = last.penalty
    at = _size(axis, last.size)
    return f"0 at {at}" if m == lo == hi == 0 else f"{m:+.2f} [{lo:+.2f}, {hi:+.2f}] at {at}"


def transfer_rows(docs: Path = DOCS) -> list[str]:
    """The table of what transfers: a row per parametrization and axis (see the module docstring)."""
    lines = [
        "| parametrization | across | does the best lr transfer? | slope of log best lr [95%] "
        "| penalty of the proxy's lr (nats) | evidence | section |",
        "|---|---|---|---|---|---|---|",
    ]
    for axis in ("width", "depth"):
        name, result = measured(axis, docs)
        reg = REGISTRATIONS[name]
        seeds = reg.regimes["small"]["seeds"]
        for t in sorted(result, key=lambda t: t.setting != "pre param=sp"):
            param = t.setting.split("param=")[-1]
            edge = "; a best lr at the sweep's edge" if t.censored else ""
            lines.append(
                f"| {param} | {axis} | {verdict(t.slope, reg.expectation['band'])}{edge} "
                f"| {t.slope[0]:+.2f} [{t.slope[1]:+.2f}, {t.slope[2]:+.2f}] | {_penalty(t, axis)} "
                f"| registered ({name}, seeds {seeds[0]}-{seeds[-1]}, pre-LN); exploratory: "
                f"[seeds 0-2]({EXPLORATORY[axis]}) | [{name}]({RUNS[axis][2]}) |"
            )
    for param, axis, why, link in NOT_MEASURED:
        lines.append(f"| {param} | {axis} | {why} | - | - | - | [section]({link}) |")
    return lines


def coord_rows(docs: Path = DOCS) -> list[str]:
    """The registered depth coordinate check: per parametrization, pre-LN's last stream (rms) slope
    with its interval and result, and the counted checks over every wrapping."""
    claim = json.loads((docs / "transfer-claims.json").read_text(encoding="utf-8"))["claims"]["coord-depth"]
    lines = [
        "| parametrization | pre-LN's last stream against depth [95%] | its check | checks over the nine wrappings |",
        "|---|---|---|---|",
    ]
    for param in claim["regime"]["params"]:
        values = claim["slope_last_per_seed"][f"pre {param}"]["stream@L rms"]
        i = mean_interval(values)
        check = next(
            c for c in claim["checks"] if c["claim"].startswith(f"pre, {param}: slope of log stream@L rms")
        )
        mine = [c["result"] for c in claim["checks"] if f", {param}:" in c["claim"] and c["counted"]]
        tally = ", ".join(f"{mine.count(r)} {r}" for r in (AGREE, MISMATCH, INCONCLUSIVE) if mine.count(r))
        expected = "grows" if check["bounds"][1] is None else "flat"
        lines.append(
            f"| {param} | {i.mean:+.2f} [{i.low:+.2f}, {i.high:+.2f}] | {expected}: {check['result']} "
            f"| {tally} |"
        )
    return lines


def table() -> str:
    """The generated block of docs/transfer.md: both tables."""
    lines = [
        *transfer_rows(),
        "",
        "Does each layer's update keep its scale as the stack deepens (the registered coordinate check, "
        "width 32, 10 Adam steps, five seeds)?",
        "",
        *coord_rows(),
    ]
    return "\n".join(lines) + "\n"

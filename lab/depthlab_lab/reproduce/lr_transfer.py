"""Learning-rate transfer across one axis, depth or width: the one implementation of two claims.

``lr-transfer-depth`` (Dey et al. 2025, CompleteP) and ``width-transfer`` (Yang et al. 2021, muP) were
the same function with "depth" and "width" swapped: train a registered grid (:mod:`transfer_runs`),
then per parametrization decide the per-seed slope of log best lr against log size on its registered
expectation. Both claim modules now call :func:`reproduce`; each keeps its registration, its name and
its history. The merge was recorded as a revision of each claim's pinned code: what each check says
(its claim, stated bounds, measured text and result) is the same as before on any curves
(lab/tests/test_transfer_claims.py compares the two on the committed runs).

An expectation per parametrization is "near 0" (the interval inside [-band, band]), "negative" (the
interval below 0), or a number t (the interval inside [t - band, t + band]). A best lr at the sweep's
edge at some size makes the slope a bound, not an estimate: that check is inconclusive.
"""

from __future__ import annotations

from depthlab.intervals import INCONCLUSIVE
from depthlab.study.sensitivity import best_lr_slope
from depthlab_lab.reproduce import transfer_runs
from depthlab_lab.reproduce.registration import Registration
from depthlab_lab.reproduce.reproduction import Check, Reproduction, resolve, seeded_check

# The best lr's slope over sizes (a formula of the study package) decides the checks: each claim module
# names it, so that it is pinned with the claim, with what it calls.
DECIDED_ELSEWHERE = (
    *(
        f"depthlab.study.sensitivity:{q}"
        for q in ("best_lr_slope", "seed_best", "_refine", "mean_interval", "Point.capped", "Curve.seeds")
    ),
    "depthlab.fit:loglog_slope",
)
# How a check names its sizes on each axis: the span ("2 to 16 layers"), the span without curves, and
# the sizes where a best lr sat at the sweep's edge. A width curve holds its d_model in ``Curve.depth``.
WORDS = {
    "depth": ("{} to {} layers", "? to ? layers", "{} layers"),
    "width": ("d_model {} to {}", "no width", "d_model {}"),
}
MERGED = (
    "lr-transfer-depth and width-transfer were one function with 'depth' and 'width' swapped; both now "
    "call depthlab_lab.reproduce.lr_transfer, which states, measures and decides each check as the "
    "claim's own code did (the same text and result on any curves)"
)
MERGED_KNOWN = (
    "yes: both claims' results were published; the merged code decides their recorded runs as the old "
    "code did (lab/tests/test_transfer_claims.py), so no result changes"
)


def reproduce(
    name: str,
    axis: str,
    registration: Registration,
    quick_changes: dict,
    study_name: str,
    what: str,
    source: str,
    quick: bool = False,
    out_dir: str | None = None,
    scale: str = "small",
) -> Reproduction:
    """Claim ``name``: its registered grid across ``axis`` trained in the study ``study_name`` (with
    "-quick" for the smoke version ``quick_changes``), one check per parametrization, the table of
    best lrs and penalties, and the figures."""
    regime = resolve(registration, scale, quick, quick_changes)
    study = study_name + ("-quick" if quick else "")
    grid = transfer_runs.study(study, axis, regime, what)
    runs = transfer_runs.run(name, grid, transfer_runs.store(study, not quick, out_dir))
    curve_list = transfer_runs.size_curves(runs, axis)
    checks = slope_checks(axis, transfer_runs.by_param(curve_list), regime, registration.expectation)
    result, table = transfer_runs.summary(runs, axis)
    data = {
        "scale": scale,
        "regime": regime,
        "tables": [table],
        "transfers": [t.to_dict() for t in result],
    }
    plots = transfer_runs.plots(name, result, runs, axis, out_dir)
    return Reproduction(name, data, checks, plots, source=source)


def slope_checks(axis: str, by: dict, regime: dict, e: dict) -> list[Check]:
    """One :func:`slope_check` per registered parametrization, in the regime's order."""
    return [slope_check(axis, param, by.get(param, []), e) for param in regime["params"]]


def slope_check(axis: str, param: str, cs: list, e: dict) -> Check:
    """The per-seed slopes of ``param``'s curves across ``axis`` decided against its registered
    expectation and band."""
    at_least, at_most, stated = _bounds(e["slope"][param], e["band"])
    per_seed = next(iter(best_lr_slope(cs, per_seed=True).values()), [])
    span, none, edge = WORDS[axis]
    sizes = sorted({c.depth for c in cs})
    check = seeded_check(
        f"pre-LN, {param}: slope of log best lr against log {axis} "
        f"({span.format(sizes[0], sizes[-1]) if sizes else none})",
        stated,
        per_seed,
        at_least=at_least,
        at_most=at_most,
        fmt="+.2f",
    )
    edges = [c.depth for c in cs if c.best()["at_edge"]]
    if edges and e["edge_is_inconclusive"]:
        check.result = INCONCLUSIVE
        check.measured += (
            f"; the best lr is at the sweep's edge at {edge.format(edges)} (the slope is a bound)"
        )
    return check


def _bounds(expected, band: float) -> tuple[float | None, float | None, str]:
    """(at least, at most, as stated) of an expectation: "near 0", "negative" or a target slope."""
    if expected == "near 0":
        return -band, band, f"near 0: slope in [{-band:+g}, {band:+g}]"
    if expected == "negative":
        return None, 0.0, "negative: slope < 0"
    return (
        expected - band,
        expected + band,
        f"{expected:+g}: slope in [{expected - band:+g}, {expected + band:+g}]",
    )

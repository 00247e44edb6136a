"""The checks that are not counted, listed: a check that holds by construction, holds without training,
repeats a measurement already counted, or was known before registration is a sanity check, and its
reason is a named constant of its claim module (NAME_SANITY, or a key of BY_CONSTRUCTION). This test
lists them all, so a new one cannot slip in unnoticed; each use of a reason is pinned with the check's
code (lab/tests/registered_code.json), so moving a check to or from sanity needs a revision too."""

from __future__ import annotations

import ast
from pathlib import Path

from depthlab.intervals import AGREE, MISMATCH
from depthlab_lab.reproduce.claims import init_scaling, jacobian, skip_ablation
from depthlab_lab.reproduce.lm_runs import Run
from depthlab_lab.reproduce.reproduction import Check, counts, sanity_under_revision

CLAIMS = Path(__file__).resolve().parents[2] / "lab" / "depthlab_lab" / "reproduce" / "claims"

SANITY = {
    "collapse": {"INIT_SANITY"},  # every init-phase check, the DeepNorm share at init included
    "coord_depth": {
        "NORMED_SANITY"
    },  # LayerNorm outputs: post-LN's stream, sandwich's and reorder's sublayers
    "depth": {"POST_SANITY"},
    "final_norm": {"FAR_SANITY", "GROWTH_SANITY"},
    "init_scaling": {
        "BY_CONSTRUCTION[post_rms]",
        "BY_CONSTRUCTION[pre_rms]",
        "BY_CONSTRUCTION[post_grows]",
        "BY_CONSTRUCTION[pre_context]",
    },
    "jacobian": {
        "ISOMETRY_SANITY",
        "NOTEBOOK_SANITY",
    },  # the reconstruction's checks: added with results known
    "no_norm": {"EXPLODES_SANITY"},
    "redundancy": {"ANGLE_SANITY"},
    "skip_ablation": {"CURVE_SANITY", "FALLS_SANITY", "FED_SANITY"},  # CURVE: added with results known
    "hc_gain": {"INIT_SANITY", "BOUND_SANITY"},  # named after its runs, as a recorded revision
}


def _reasons(tree: ast.Module) -> set[str]:
    out = set()
    for node in tree.body:
        if not isinstance(node, ast.Assign):
            continue
        for t in node.targets:
            if isinstance(t, ast.Name) and t.id.endswith("_SANITY"):
                out.add(t.id)
            if isinstance(t, ast.Name) and t.id == "BY_CONSTRUCTION" and isinstance(node.value, ast.Dict):
                out |= {f"BY_CONSTRUCTION[{k.value}]" for k in node.value.keys}
    return out


def test_every_sanity_reason_is_listed():
    found = {}
    for path in sorted(CLAIMS.glob("*.py")):
        reasons = _reasons(ast.parse(path.read_text()))
        if reasons:
            found[path.stem] = reasons
    assert found == SANITY, "a sanity reason was added or removed: list it here (and record a revision)"


def test_no_sanity_reason_is_typed_in_place():
    """A reason given as a literal string would escape the list above."""
    for path in sorted(CLAIMS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                for k in node.keywords:
                    if k.arg == "sanity" and isinstance(k.value, ast.Constant):
                        assert k.value.value == "", f"{path.name}: a sanity reason typed in place"


# The claims whose checks a revision made with results known moved to sanity (TO_SANITY): those checks
# count, with their result, under the first registration and are sanity checks under the revised rules.
# (A check *added* with results known is no such case: it was not in the first registration, so it is
# a sanity check under both, as skip-ablation's curve checks and init-scaling's post "grows" are.)
MOVED = {"collapse", "final_norm", "init_scaling", "no_norm", "redundancy"}


def _moves(tree: ast.Module) -> int:
    return sum(
        isinstance(n, ast.Call) and getattr(n.func, "id", "") == "sanity_under_revision"
        for n in ast.walk(tree)
    )


def test_every_check_moved_to_sanity_with_results_known_is_listed():
    found = {p.stem for p in sorted(CLAIMS.glob("*.py")) if _moves(ast.parse(p.read_text()))}
    assert found == MOVED


def test_a_check_moved_to_sanity_counts_under_the_first_registration():
    checks = [Check("a", "", "", AGREE), sanity_under_revision(Check("b", "", "", MISMATCH), "a reason")]
    assert counts(checks) == {AGREE: 1, MISMATCH: 1, "inconclusive": 0, "sanity": 0}
    assert counts(checks, "revised") == {AGREE: 1, MISMATCH: 0, "inconclusive": 0, "sanity": 1}
    assert checks[1].counted and not checks[1].counted_under("revised")
    assert sanity_under_revision(Check("c", "", "", AGREE), "").counted_under("revised")


def test_checks_added_with_results_known_are_sanity_under_both():
    runs = [Run("r", {"n_layers": 48, "vocab_size": 256}, {}, "stalled", None, 3.1, 3.1, 3.1, 0.0)] * 3
    shape = [{"falls": 0.1 + 0.01 * i, "progress": 0.2} for i in range(3)]  # fell too little, no stall
    checks = skip_ablation._checks_without_skip(runs, [{"max": 1e-4}] * 3, shape, bottom=20)
    checks += skip_ablation._checks_with_skip(runs, [{"orders": 3.0, "min": 1.0}] * 3, bottom=20)
    added = [c for c in checks if any(w in c.claim for w in ("falls first", "then stalls", "arrives intact"))]
    assert len(added) == 3 and all(c.result == MISMATCH for c in added)
    assert not any(c.counted or c.counted_under("revised") for c in added)
    values = {w: [1e-3, 2e-3, 3e-3] for w in ("post", "pre", "rezero")}
    rebuilt = jacobian._checks(values, 8, jacobian.RECONSTRUCTION, 1e-2, 10.0, jacobian.NOTEBOOK_SANITY)
    assert rebuilt and all(c.sanity and c.claim.startswith("depthlab's reconstruction") for c in rebuilt)
    assert all(c.counted for c in jacobian._checks(values, 8, "depthlab", 1e-2, 10.0)[:2])


def test_init_scalings_pre_rms_counts_as_first_registered():
    grids = [([], {"pre": {"final_rms": 0.5 + 0.01 * s}}) for s in range(3)]
    check = init_scaling._slope_check(grids, "c", "pre", "final_rms", "pre_final_rms", "pre_rms")
    assert check.counted and check.revised_sanity == init_scaling.BY_CONSTRUCTION["pre_rms"]

"""The checks that are not counted, listed: a check that holds by construction, holds without training,
repeats a measurement already counted, or was known before registration is a sanity check, and its
reason is a named constant of its claim module (NAME_SANITY, or a key of BY_CONSTRUCTION). This test
lists them all, so a new one cannot slip in unnoticed; each use of a reason is pinned with the check's
code (tests/registered_code.json), so moving a check to or from sanity needs a revision too."""

from __future__ import annotations

import ast
from pathlib import Path

CLAIMS = Path(__file__).parent.parent / "depthlab" / "reproduce" / "claims"

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
    "jacobian": {"ISOMETRY_SANITY"},
    "no_norm": {"EXPLODES_SANITY"},
    "redundancy": {"ANGLE_SANITY"},
    "skip_ablation": {"FALLS_SANITY", "FED_SANITY"},
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

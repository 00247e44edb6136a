"""``depthlab reproduce init-scaling --quick``: the JSON shape, fitted slopes and computed checks."""

from __future__ import annotations

import json
import math

from depthlab.cli import main
from depthlab.fit import loglog_slope
from depthlab_lab.reproduce.claims.init_scaling import QUICK_DEPTHS, STACKS


def test_loglog_slope():
    xs = [6, 12, 24, 48]
    assert math.isclose(loglog_slope(xs, [3 * x**-0.5 for x in xs]), -0.5)
    assert loglog_slope(xs, [0.0, 0.0, 1.0, None]) is None


def test_quick_json_and_plot(tmp_path, capsys, one_thread):
    out = tmp_path / "scaling.json"
    assert main(["reproduce", "init-scaling", "--quick", "--json", str(out), "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    d = json.loads(out.read_text())
    assert d["depths"] == list(QUICK_DEPTHS)
    labels = [label for label, *_ in STACKS]
    assert len(d["rows"]) == len(labels) * len(QUICK_DEPTHS)
    assert set(d["slopes"]) == set(labels)
    assert set(d["rows"][0]) == {"stack", "L", "last_grad", "first_grad", "final_rms", "ctx_ratio"}
    assert any(c["claim"].startswith("post-LN last-layer gradient vs L") for c in d["checks"])
    # the slopes behind the checks, recomputed from the rows
    pre = [r["last_grad"] for r in d["rows"] if r["stack"] == "pre"]
    assert math.isclose(loglog_slope(QUICK_DEPTHS, pre), d["slopes"]["pre"]["last_grad"])
    # one seed (quick): no interval, so every counted check is inconclusive; the value is shown per seed
    counted = [c for c in d["checks"] if c["counted"]]
    assert counted and all(c["result"] == "inconclusive" for c in counted)
    assert f"{d['slopes']['post']['last_grad']:+.2f}" in counted[0]["measured"]
    # sanity under the first registration: two held by construction and post-LN's "grows" (its flat slope
    # again, added with results known); pre-LN's rms slope was first registered as counted and is a sanity
    # check only under the rules revised with results known
    assert sum(not c["counted"] for c in d["checks"]) == 3
    assert sum(bool(c.get("revised_sanity")) for c in d["checks"]) == 1
    assert (tmp_path / "init-scaling" / "init_scaling.png").stat().st_size > 10_000
    assert "last_grad" in text and "slope" in text

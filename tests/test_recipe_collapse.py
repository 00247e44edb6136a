"""depthlab reproduce recipe / collapse: the measurements, the verdict logic, and tiny end-to-end runs.

The real reproductions train 24- to 384-layer models; here the same code runs on 2- to 8-layer models
for a few steps (module constants monkeypatched), and the pieces are checked against hand computations.
"""

from __future__ import annotations

import json
import math
import os

import pytest
import torch

from depthlab.config import ModelConfig
from depthlab.model import build_model
from depthlab.reproduce import collapse, lm_runs, load_all, recipe
from depthlab.train.schedules import lr_factor


@pytest.fixture(autouse=True)
def _threads(one_thread):
    yield


# -- collapse: the measurements ------------------------------------------------------------------
def test_cumulative_share_on_orthogonal_writes():
    """x_0 = e1 and layer l writes e_(l+1): every write owns exactly 1/(L+1) of x_L, C(l) = (l+1)/(L+1)."""
    L, d = 4, 8
    eye = torch.eye(d)
    states = [eye[0].reshape(1, 1, d)]
    for l in range(L):
        states.append(states[-1] + eye[l + 1].reshape(1, 1, d))
    cum = collapse.cumulative_share(states)
    assert cum == pytest.approx([(l + 1) / (L + 1) for l in range(L + 1)])
    shares = collapse.quarter_shares(cum)
    assert shares == pytest.approx({"embedding": 0.2, "first_quarter": 0.2, "last_quarter": 0.2})


def test_cumulative_share_of_a_normalised_stream_is_the_cosine():
    """With ||x_l|| equal at every l (DeepNorm), C(l) = cos(x_l, x_L), so a share is second order."""
    g = torch.Generator().manual_seed(0)
    states = [torch.nn.functional.normalize(torch.randn(2, 3, 16, generator=g), dim=-1) for _ in range(5)]
    cum = collapse.cumulative_share(states)
    for x, c in zip(states, cum):
        cos = torch.nn.functional.cosine_similarity(x, states[-1], dim=-1).mean()
        assert c == pytest.approx(float(cos), abs=1e-6)


def test_loglog_slope():
    assert collapse.layer_slope([l**-0.5 for l in range(1, 97)]) == pytest.approx(-0.5)
    assert collapse.layer_slope([3.0] * 40) == pytest.approx(0.0, abs=1e-12)
    assert math.isnan(collapse.layer_slope([1.0]))


def test_profile_matches_a_hand_computation():
    torch.manual_seed(0)
    model = build_model(ModelConfig(n_layers=8, d_model=16, n_heads=2, max_len=16))
    tokens = torch.randint(0, 256, (2, 12))
    p = collapse.profile(model, tokens)
    with torch.no_grad():
        _, states = model.eval()(tokens, return_states=True)
    l = 5  # layer 5 turns x_4 into x_5
    hand = float((states[l] - states[l - 1]).norm() / states[l - 1].norm())
    assert p["update_ratio"][l - 1] == pytest.approx(hand, rel=1e-5)
    assert len(p["update_ratio"]) == len(p["angular_distance"]) == 8
    assert len(p["cumulative_share"]) == 9 and p["cumulative_share"][-1] == pytest.approx(1.0)
    assert p["update_slope"] == pytest.approx(collapse.layer_slope(p["update_ratio"]))


def test_short_training_lowers_the_loss():
    torch.manual_seed(0)
    mcfg = ModelConfig(n_layers=2, d_model=16, n_heads=2, max_len=64)
    run = collapse.short_training(build_model(mcfg), mcfg, steps=20)
    assert run["finite"] and run["last_loss"] < run["first_loss"] - 0.2


def _fake(pre_slope: float, dn_slope: float, pre_last: list[float], dn_last: list[float]) -> dict:
    """A collapse data dict with the given slopes (every depth) and last-quarter shares per depth."""
    depths = [48, 192, 384]
    runs = {}
    for wrap, slope, last in (("pre", pre_slope, pre_last), ("deepnorm", dn_slope, dn_last)):
        rows = {}
        for L, s in zip(depths, last):
            phase = {"update_slope": slope, "shares": {"first_quarter": 0.25, "last_quarter": s}}
            rows[str(L)] = {"init": phase, "trained": phase}
        runs[wrap] = rows
    return {"depths": depths, "runs": runs}


def test_collapse_verdicts_follow_the_measurements():
    good = collapse._checks(_fake(-0.5, 0.02, [0.3, 0.2, 0.1], [0.05, 0.05, 0.06]))
    assert len(good) == 8 and all(c.ok for c in good)
    bad = collapse._checks(_fake(-0.1, -0.4, [0.2, 0.25, 0.3], [0.05, 0.01, 0.2]))
    assert len(bad) == 8 and not any(c.ok for c in bad)
    # falling, but still above the first quarter's share at the deepest L: the claim is not met
    mixed = collapse._checks(_fake(-0.5, 0.0, [0.4, 0.35, 0.3], [0.05, 0.05, 0.05]))
    assert [c.ok for c in mixed if "pre-LN last quarter" in c.claim] == [False, False]


def test_collapse_end_to_end_tiny(monkeypatch, tmp_path):
    monkeypatch.setattr(collapse, "DEPTHS_QUICK", (4, 8))
    monkeypatch.setattr(collapse, "STEPS_QUICK", 2)
    monkeypatch.setattr(collapse, "CHECKPOINT_FROM", 8)  # the checkpointed path runs too
    monkeypatch.setattr(collapse, "MODEL", {**collapse.MODEL, "d_model": 16, "n_heads": 2})
    result = load_all()["collapse"](quick=True, out_dir=str(tmp_path))
    assert result.data["depths"] == [4, 8] and len(result.checks) == 8
    assert os.path.getsize(result.plots[0]) > 10_000
    json.dumps(result.to_dict())  # JSON-able
    pre = result.data["runs"]["pre"]["8"]
    assert pre["run"]["steps"] == 2 and pre["trained"]["update_ratio"] != pre["init"]["update_ratio"]
    assert result.checks[0].ok == all(
        result.data["runs"]["pre"][L]["init"]["update_slope"] <= collapse.DECAY for L in ("4", "8")
    )


# -- recipe ---------------------------------------------------------------------------------------
def test_noam_peak_equals_the_regime_lr():
    """The train package's noam factor at t = w, times NOAM_LR, is the linear-warmup runs' rate."""
    d, w = lm_runs.TINY_MODEL["d_model"], recipe.WARMUP
    peak = recipe.NOAM_LR * lr_factor("noam", w, w, 150, d, 0.1)
    assert peak == pytest.approx(recipe.LR)
    assert recipe.NOAM_LR * lr_factor("noam", 4 * w, w, 150, d, 0.1) == pytest.approx(peak / 2)


def test_majority():
    assert recipe.majority(["trained", "stalled", "trained"])
    assert not recipe.majority(["trained", "stalled", "diverged"])
    assert not recipe.majority(["trained", "stalled"])  # a tie is not a majority
    assert recipe.majority(["trained"])


class _Run:
    def __init__(self, outcome):
        self.outcome, self.val_loss, self.unigram_loss = outcome, 3.0, 3.1

    def to_dict(self):
        return {"outcome": self.outcome}


def test_recipe_failure_counts_only_when_the_full_recipe_trains():
    no_warmup = recipe.SETTINGS[0]
    assert not no_warmup.expect_trains
    _, check = recipe._verdict(no_warmup, [_Run("stalled")], control_trained=True)
    assert check.ok
    _, check = recipe._verdict(no_warmup, [_Run("stalled")], control_trained=False)
    assert not check.ok and "inconclusive" in check.measured
    row, check = recipe._verdict(no_warmup, [_Run("trained"), _Run("stalled"), _Run("trained")], True)
    assert row["measured"] == "trained" and not check.ok and "2/3 trained" in check.measured


def test_recipe_states_the_seed_claim_before_running():
    expected = {s.label: s.expect_trains for s in recipe.SETTINGS}
    post = {k: v for k, v in expected.items() if k.startswith("post")}
    assert sum(post.values()) == 2  # only warmup + beta2 0.98 (linear or Noam) train, per seed 000
    assert all(v for k, v in expected.items() if k.startswith("pre"))


@pytest.mark.parametrize("quick", [True, False])
def test_recipe_end_to_end_tiny(monkeypatch, tmp_path, quick):
    monkeypatch.setattr(recipe, "N_LAYERS", 2)
    monkeypatch.setattr(lm_runs, "TINY_TRAIN", {**lm_runs.TINY_TRAIN, "steps": 4, "log_every": 2})
    monkeypatch.setattr(recipe, "SETTINGS", (*recipe.SETTINGS[:2], recipe.SETTINGS[-1]))
    monkeypatch.setattr(recipe, "WARMUP", 2)
    lm_runs.clear_cache()
    try:
        result = recipe.reproduce_recipe(quick=quick, out_dir=str(tmp_path))
    finally:
        lm_runs.clear_cache()
    assert result.data["seeds"] == ([0] if quick else [0, 1, 2])
    assert len(result.checks) == 3 and os.path.exists(result.plots[0])
    for check, row in zip(result.checks, result.data["settings"], strict=True):
        assert len(row["runs"]) == len(result.data["seeds"])
        agrees = row["measured"] == row["expected"]
        inconclusive = row["expected"] == "fails" and not result.data["control_trained"]
        assert check.ok == (agrees and not inconclusive)
        outcomes = [r["outcome"] for r in row["runs"]]
        assert row["measured"] == ("trained" if recipe.majority(outcomes) else "fails")
    json.dumps(result.to_dict())


def test_registered():
    reg = load_all()
    assert {"recipe", "collapse"} <= set(reg)

"""The registered transfer claims: coord-depth, lr-transfer-depth, width-transfer.

Each claim's decision is tested on inputs built by hand (activations that follow a chosen power of the
depth, learning-rate curves whose minimum sits at a chosen lr), so every result (agree, MISMATCH,
inconclusive, sanity) is exercised without training; then each claim's ``--quick`` smoke version runs
end to end through the CLI, shrunk to seconds.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from depthlab.cli import main
from depthlab.intervals import AGREE, INCONCLUSIVE, MISMATCH
from depthlab.probe.coord import CoordResult, CoordSpec
from depthlab.report.data import load
from depthlab.study.sensitivity import Curve, Point
from depthlab_lab.reproduce import REGISTRATIONS, lr_transfer, run_record
from depthlab_lab.reproduce.claims import coord_depth, lr_transfer_depth, width_transfer

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import transfer_claims  # noqa: E402  (benchmarks/transfer_claims.py: the record's builder)

pytestmark = pytest.mark.usefixtures("one_thread")

DEPTHS = (2, 4, 8, 16)
SEEDS = (0, 1, 2)
NOISE = (1.0, 1.02, 0.98)  # a seed's factor at the deepest depth: the seeds' slopes differ a little


def _table(power: float) -> list:
    """[depth][seed][step] of a quantity ~ depth^power (one step), each seed slightly different."""
    return [[[d**power * (1 + (f - 1) * i / 3)] for f in NOISE] for i, d in enumerate(DEPTHS)]


def _result(wrap: str, param: str, stream: float, sublayer: float) -> CoordResult:
    spec = CoordSpec("depth", DEPTHS, 32, (wrap,), (param,), steps=1, seeds=SEEDS)
    result = CoordResult(spec)
    modules = {"embedding": _table(0.0), "attn": _table(sublayer), "ffn": _table(sublayer)}
    modules.update({m: _table(stream) for m in ("stream@L/4", "stream@L/2", "stream@L", "logits")})
    result.values[(wrap, param)] = modules
    result.rms[(wrap, param)] = {m: _table(stream) for m in ("stream@L/4", "stream@L/2", "stream@L")}
    return result


def _results(wrap: str, param: str, stream: float, sublayer: float) -> list[tuple[str, str, bool]]:
    return [
        (c.claim, c.result, c.counted)
        for c in coord_depth._checks(_result(wrap, param, stream, sublayer), wrap, param)
    ]


def test_coord_depth_decides_each_kind_as_registered():
    # pre-LN: the stream and both sublayers are checked under completep, and all four agree when flat
    checks = _results("pre", "completep", 0.02, -0.03)
    assert [r for _, r, _ in checks] == [AGREE] * 4 and all(counted for *_, counted in checks)
    assert _results("pre", "completep", 0.6, 0.0)[0][1] == MISMATCH  # a growing stream is not flat
    # under sp only the stream has an expectation (grows); a flat stream is a MISMATCH
    assert [r for _, r, _ in _results("parallel", "sp", 1.0, 0.0)] == [AGREE, AGREE]
    assert [r for _, r, _ in _results("parallel", "sp", 0.0, 0.0)] == [MISMATCH, MISMATCH]
    # depth_mup: the stream flat, the sublayers shrink
    assert [r for _, r, _ in _results("parallel_shared", "depth_mup", 0.0, -0.5)] == [AGREE] * 4
    assert [r for _, r, _ in _results("pre", "depth_mup", 0.0, 0.0)][2:] == [MISMATCH, MISMATCH]
    # sandwich: the stream counted, its sublayers (LayerNorm outputs) sanity; post: only sanity
    sandwich = _results("sandwich", "completep", 0.0, 0.0)
    assert [counted for *_, counted in sandwich] == [True, True, False, False]
    assert all(not counted for *_, counted in _results("post", "sp", 0.0, 0.5))
    # no theory: in the table, no check
    assert _results("rezero", "completep", 0.0, 0.0) == [] and _results("mix", "sp", 1.0, 0.0) == []


def test_coord_depth_slopes_are_the_power_and_a_missing_seed_is_inconclusive():
    result = _result("pre", "completep", 0.5, 0.0)
    slopes = coord_depth.seed_slopes(result, "pre", "completep", "stream@L", False, 1)
    assert slopes[0] == pytest.approx(0.5) and len(slopes) == 3
    result.values[("pre", "completep")]["attn"][0][1][0] = 0.0  # seed 1 has no positive value at depth 2
    slopes = coord_depth.seed_slopes(result, "pre", "completep", "attn", False, 1)
    assert math.isfinite(slopes[1]) and len(slopes) == 3  # from the depths that have one
    result.values[("pre", "completep")]["attn"] = [[[0.0], [1.0], [1.0]] for _ in DEPTHS]
    slopes = coord_depth.seed_slopes(result, "pre", "completep", "attn", False, 1)
    assert math.isnan(slopes[0])
    check = next(c for c in coord_depth._checks(result, "pre", "completep") if "attn" in c.claim)
    assert check.result == INCONCLUSIVE
    assert coord_depth._table(result)["rows"][0][:2] == ["pre", "completep"]


LRS = [1e-3, 3e-3, 1e-2, 3e-2, 1e-1]


def _curve(size: int, best: dict[int, float], param: str) -> Curve:
    """A curve whose seed s has its minimum at lr ``best[s]`` (loss quadratic in log10 lr: the parabola
    refinement recovers it exactly)."""
    points = []
    for lr in LRS:
        loss = {s: 2.5 + (math.log10(lr) - math.log10(b)) ** 2 for s, b in best.items()}
        points.append(Point(lr, loss, {s: "trained" for s in best}))
    return Curve({"wrap": "pre", "param": param}, size, points, math.log(256))


def _curves(sizes, slope: float, param: str, at=1e-2, jitter=(1.0, 1.05, 0.95)) -> list[Curve]:
    """Curves whose best lr is ``at`` x (size / sizes[0])^slope, each seed's slope a little different."""
    out = []
    for size in sizes:
        ratio = size / sizes[0]
        out.append(_curve(size, {s: at * ratio ** (slope * j) for s, j in enumerate(jitter)}, param))
    return out


def test_lr_transfer_depth_decides_on_the_slope_over_seeds():
    e = REGISTRATIONS["lr-transfer-depth"].expectation

    def check(param, cs, e):
        return lr_transfer.slope_check("depth", param, cs, e)

    assert check("completep", _curves(DEPTHS, 0.0, "completep"), e).result == AGREE
    assert check("completep", _curves(DEPTHS, -0.6, "completep"), e).result == MISMATCH
    assert check("sp", _curves(DEPTHS, -0.3, "sp"), e).result == AGREE
    assert check("sp", _curves(DEPTHS, 0.3, "sp"), e).result == MISMATCH
    wide = _curves(DEPTHS, -0.1, "sp", jitter=(1.0, -2.0, 3.0))
    assert check("sp", wide, e).result == INCONCLUSIVE  # the seeds disagree: the interval straddles 0
    edge = check("sp", _curves(DEPTHS, -2.0, "sp"), e)  # 1e-2 / 64 at 16 layers: below the sweep
    assert edge.result == INCONCLUSIVE and "edge" in edge.measured
    assert check("sp", [], e).result == INCONCLUSIVE  # no curve: no seed gives a value


def test_width_transfer_decides_on_the_slope_over_seeds():
    e = REGISTRATIONS["width-transfer"].expectation

    def check(param, cs, e):
        return lr_transfer.slope_check("width", param, cs, e)

    widths = (32, 64, 128)
    assert check("sp", _curves(widths, -1.0, "sp", at=4e-2), e).result == AGREE
    assert check("mup", _curves(widths, 0.0, "mup"), e).result == AGREE
    assert check("mup", _curves(widths, -0.6, "mup", at=4e-2), e).result == MISMATCH
    assert check("sp", _curves(widths, 0.0, "sp"), e).result == MISMATCH
    assert "d_model 32 to 128" in check("mup", _curves(widths, 0.0, "mup"), e).claim
    edge = check("sp", _curves(widths, -3.0, "sp", at=4e-2), e)  # below the sweep at width 128
    assert edge.result == INCONCLUSIVE and "at the sweep's edge at d_model [" in edge.measured
    assert check("sp", [], e).claim.endswith("(no width)") and check("sp", [], e).result == INCONCLUSIVE


RECORDS = ("transfer-claims.json", "transfer-claims-width-rerun.json")


def _recorded_curves(claim: dict) -> dict[str, list[Curve]]:
    """Per parametrization, the learning-rate curves of a record's runs (each run's final validation
    loss and outcome; a diverged run counts as ln V, as a run without logged metrics does in the study)."""
    size = claim["runs_columns"][1]
    points: dict[tuple, dict[float, Point]] = {}
    for row in claim["runs"]:
        r = dict(zip(claim["runs_columns"], row, strict=True))
        point = points.setdefault((r["param"], r[size]), {}).setdefault(r["lr"], Point(r["lr"]))
        point.loss[r["seed"]] = r["val_loss"]
        point.outcome[r["seed"]] = r["outcome"]
    out: dict[str, list[Curve]] = {}
    for (param, at), by_lr in sorted(points.items()):
        curve = Curve({"wrap": "pre", "param": param}, at, [by_lr[lr] for lr in sorted(by_lr)], math.log(256))
        out.setdefault(param, []).append(curve)
    return out


@pytest.mark.parametrize("record", RECORDS)
def test_the_merged_code_decides_the_recorded_runs_as_recorded(record):
    """Both claims call one implementation now (a recorded revision of each): on the committed runs of
    each claim its checks say what was recorded, claim by claim, seed by seed, result by result."""
    claims = json.loads((Path(__file__).resolve().parents[2] / "docs" / record).read_text())["claims"]
    for name, axis in (("lr-transfer-depth", "depth"), ("width-transfer", "width")):
        if name not in claims:
            continue
        reg = REGISTRATIONS[name]
        checks = lr_transfer.slope_checks(
            axis, _recorded_curves(claims[name]), reg.regimes["small"], reg.expectation
        )
        recorded = claims[name]["checks"]
        assert [c.claim for c in checks] == [c["claim"] for c in recorded]
        assert [c.result for c in checks] == [c["result"] for c in recorded]
        for c, r in zip(checks, recorded, strict=True):
            assert c.interval.values == pytest.approx(r["values"], abs=2e-3)
            assert [c.bounds["at_least"], c.bounds["at_most"]] == r["bounds"]


def test_both_claim_names_stay_registered_with_their_history():
    for name, module in (("lr-transfer-depth", lr_transfer_depth), ("width-transfer", width_transfer)):
        reg = REGISTRATIONS[name]
        assert reg is module.REGISTRATION and reg.commit.startswith("f7731fe")
        merged = [r for r in reg.revisions if r.reason == lr_transfer.MERGED]
        assert {r.key for r in merged} >= {"code._checks", "code._slope_check"}
        assert all(r.results_known == lr_transfer.MERGED_KNOWN for r in merged)
        assert module.DECIDED_ELSEWHERE == lr_transfer.DECIDED_ELSEWHERE


QUICKER = {
    "coord-depth": (coord_depth, {"wraps": ["pre", "post"], "depths": [1, 2], "width": 16, "heads": 2,
                                  "steps": 2, "seeds": [0, 1]}),
    "lr-transfer-depth": (lr_transfer_depth, {"sizes": [1, 2], "lrs": [1e-3, 3e-2, 1.0], "steps": 4,
                                              "warmup": 1, "seeds": [0, 1]}),
    "width-transfer": (width_transfer, {"sizes": [8, 16], "n_layers": 1, "lrs": [1e-3, 3e-2, 1.0], "steps": 4,
                                        "warmup": 1, "seeds": [0, 1]}),
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(QUICKER))
def test_quick_smoke_runs_end_to_end(name, tmp_path, monkeypatch, capsys):
    module, quick = QUICKER[name]
    monkeypatch.setattr(module, "QUICK", {**module.QUICK, **quick})
    out = tmp_path / "json"
    assert main(["reproduce", name, "--quick", "--out", str(tmp_path), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(name) and "agree" in printed
    data = json.loads(out.read_text())
    assert data["scale"] == "small" and data["checks"] and data["tables"]
    assert all(c["result"] in (AGREE, MISMATCH, INCONCLUSIVE) for c in data["checks"])
    assert list((tmp_path / name).glob("*.png")), "the claim draws its figures"
    # the compact record of docs/transfer-claims.json is built from the same JSON (and the store's runs)
    if name == "coord-depth":
        part = transfer_claims.coord_record(data, "c0ffee")
        assert set(part["slope_last_per_seed"]) == {"pre sp", "pre depth_mup", "pre completep", "post sp",
                                                    "post depth_mup", "post completep"}  # fmt: skip
    else:
        (db,) = (tmp_path / name).glob("*.sqlite")
        study, size = transfer_claims.STUDIES[name]
        part = transfer_claims.lr_record(data, "c0ffee", load(str(db), f"{study}-quick").runs, size)
        assert len(part["runs"]) == 2 * len(quick["sizes"]) * len(quick["lrs"]) * len(quick["seeds"])
    assert len(part["checks"]) == len(data["checks"]) and json.dumps(part)


def test_registered_regimes_are_the_ones_described():
    """What the registrations say they run: every wrapping with a depth rule, the transfer presets'
    tiny regime, fresh seeds for the regimes whose earlier seeds' results were known."""
    coord = REGISTRATIONS["coord-depth"].regimes["small"]
    assert set(coord["wraps"]) == set(REGISTRATIONS["coord-depth"].expectation["kind"])
    assert {"deepnorm", "admin", "layerscale"}.isdisjoint(coord["wraps"])  # they refuse depth rules
    depth, width = (REGISTRATIONS[n].regimes["small"] for n in ("lr-transfer-depth", "width-transfer"))
    assert depth["seeds"] == width["seeds"] == [3, 4, 5]
    assert width["sizes"] == [32, 64, 128] and width["n_layers"] == 4 and width["steps"] == 100
    assert depth["sizes"] == [2, 4, 8, 16] and depth["lrs"] == width["lrs"]


def test_the_documented_record_decides_as_recorded():
    """docs/transfer-claims.json: each claim's commit and regime are the registration's, and every
    check's result follows again from the values the record holds and the rule it records."""
    record = json.loads((Path(__file__).resolve().parents[2] / "docs" / "transfer-claims.json").read_text())
    assert set(record["claims"]) == {"coord-depth", "lr-transfer-depth", "width-transfer"}
    for name, claim in record["claims"].items():
        reg = REGISTRATIONS[name]
        assert claim["commit"] == reg.commit and claim["regime"] == reg.regimes["small"]
        for c in claim["checks"]:
            if name == "coord-depth":
                setting, rest = c["claim"].split(": slope of log ")
                quantity = rest.split(" against")[0].replace(" mean |x|", "")
                values = claim["slope_last_per_seed"][setting.replace(", ", " ")][quantity]
            else:
                values = c["values"]
            low, high = c["bounds"]
            again = run_record.decide_again(values, {"at_least": low, "at_most": high, "scale": "linear"})
            assert again == c["result"] or ("note" in c and c["result"] == INCONCLUSIVE), c["claim"]
    runs = record["claims"]["lr-transfer-depth"]["runs"]
    assert len(runs) == 2 * 4 * 5 * 3 and all(r[4] is not None for r in runs)

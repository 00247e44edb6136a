"""The residual-topology claims (hc-gain, topology-stream, value-residual): each decision on rows built to
agree and to fail, the fits they read, the runs' record (resumed, never trained twice) and the page
written from it alone; the committed record holds only runs of the registered regimes, none started
before their registration's commit, and the committed page is the one the record gives."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from depthlab.intervals import AGREE, INCONCLUSIVE, MISMATCH, RESULTS
from depthlab_lab.docgen import reproductions_topologies as page_mod
from depthlab_lab.reproduce import REGISTRATIONS, lm_runs, run_cache, topology_record
from depthlab_lab.reproduce.claims import hc_gain, topology_stream, value_residual
from depthlab_lab.reproduce.ladder_run import commit_time
from depthlab_lab.reproduce.reproduction import counts, run_claim
from depthlab_lab.reproduce.topology_runs import slope

ROOT = Path(__file__).resolve().parents[2]
UNIGRAM = 3.4
NAMES = ("hc-gain", "topology-stream", "value-residual")


def _row(design, depth, width, seed, loss=2.5, outcome=None, **more) -> dict:
    trained = loss / UNIGRAM - 1 < -0.05
    return {
        "design": design,
        "depth": depth,
        "width": width,
        "seed": seed,
        "outcome": outcome or ("trained" if trained else "stalled"),
        "val_loss": loss,
        "final_train_loss": loss,
        "unigram_loss": UNIGRAM,
        "vocab_size": 256,
        **more,
    }


def test_slope_is_least_squares_over_finite_pairs():
    assert slope([1, 2, 3], [2, 4, 6]) == pytest.approx(2.0)
    assert slope([1, 2, 3, 4], [1, math.nan, 3, None]) == pytest.approx(1.0)
    assert math.isnan(slope([1], [1])) and math.isnan(slope([2, 2], [1, 3]))


# ---- hc-gain ------------------------------------------------------------------------------------------

HC = {**hc_gain.SMALL, "seeds": [0, 1, 2]}


def _gains(top: float, steps: int = 300, back: float | None = None) -> list:
    """A gain that grows geometrically from 1 at step 1 to ``top`` at ``steps`` (jittered per call)."""
    points = [1] + list(range(10, steps + 1, 10))
    return [[s, top ** ((s - 1) / (steps - 1)), (back or top) ** ((s - 1) / (steps - 1))] for s in points]


def _hc_rows(
    hc_top=lambda d, s: 10 ** (d / 12) * (1 + 0.1 * s), mhc_top=1.0, hc_loss=2.6, mhc_loss=2.5, grow=0.01
):
    rows = []
    for s in HC["seeds"]:
        for w in HC["widths"]:
            for d in HC["depths"]:
                rows.append(_row("hc", d, w, s, hc_loss + grow * d + 0.003 * s, gains=_gains(hc_top(d, s))))
                mhc = _gains(1.0, back=mhc_top)
                for g in mhc:
                    g[1] = 1.0
                rows.append(_row("mhc", d, w, s, mhc_loss + 0.002 * s, gains=mhc))
    return rows


def _by(checks, text):
    return [c for c in checks if c.claim.startswith(text) or f" {text}" in c.claim]


def test_hc_gain_agrees_on_growing_hc_and_bounded_mhc():
    checks = hc_gain.decide(_hc_rows(), HC)
    assert all(c.result == AGREE for c in checks), [
        (c.claim, c.measured) for c in checks if c.result != AGREE
    ]
    n = counts(checks)
    assert n["agree"] == 6 * len(HC["widths"]) and n["sanity"] == 2


def test_hc_gain_fails_each_way():
    flat = hc_gain.decide(_hc_rows(hc_top=lambda d, s: 1.5 + 0.01 * s), HC)
    assert {c.result for c in _by(flat, "HC's top composite gain")} == {MISMATCH}
    shrinking = hc_gain.decide(_hc_rows(hc_top=lambda d, s: 1000 / d * (1 + 0.1 * s)), HC)
    assert {c.result for c in _by(shrinking, "HC's gain grows with depth")} == {MISMATCH}
    unbounded = hc_gain.decide(_hc_rows(mhc_top=50.0), HC)
    assert {c.result for c in _by(unbounded, "mHC's top composite gain")} == {MISMATCH}
    cheaper = hc_gain.decide(_hc_rows(hc_loss=2.3, grow=-0.005), HC)
    assert {c.result for c in _by(cheaper, "the loss cost")} == {MISMATCH}
    stalled = hc_gain.decide(_hc_rows(hc_loss=3.4, mhc_loss=3.3, grow=0.0), HC)
    assert {c.result for c in _by(stalled, "the loss cost")} == {INCONCLUSIVE}
    broken_init = _hc_rows()
    broken_init[0]["gains"][0][1] = 1.5
    init = _by(hc_gain.decide(broken_init, HC), "top composite gain at init")[0]
    assert init.result == MISMATCH and not init.counted


def test_hc_gain_with_a_seed_missing_decides_on_the_others():
    rows = [r for r in _hc_rows() if not (r["seed"] == 2 and r["design"] == "hc" and r["depth"] == 48)]
    checks = hc_gain.decide(rows, HC)
    first = _by(checks, "HC's top composite gain")[0]
    assert first.interval.n == 2 and first.result in RESULTS


# ---- topology-stream ----------------------------------------------------------------------------------

TS = {**topology_stream.SMALL}


def _profile(depth: int, exponent: float) -> list[float]:
    return [1.0] + [float(layer) ** exponent for layer in range(1, depth + 1)]


def _stream_rows(design_exp=0.1, pre_exp=0.8, init_exp=0.5, loss=2.5, jitter=0.02):
    rows = []
    for s in TS["seeds"]:
        for w in TS["widths"]:
            for d in TS["depths"]:
                for design in ["pre", *TS["designs"]]:
                    e = (pre_exp if design == "pre" else design_exp) + jitter * s
                    rows.append(
                        _row(design, d, w, s, loss, rms=_profile(d, e), rms_init=_profile(d, init_exp))
                    )
    return rows


def test_topology_stream_agrees_when_the_designs_grow_less_than_half_pre_ln():
    checks = topology_stream.decide(_stream_rows(), TS)
    counted = [c for c in checks if c.counted]
    assert len(counted) == 2 * len(TS["widths"]) * 2 and all(c.result == AGREE for c in counted)
    sanity = [c for c in checks if not c.counted]
    assert len(sanity) == 2 and all(c.result == MISMATCH for c in sanity)  # at init the designs are pre-LN


def test_topology_stream_mismatch_and_untrained():
    same = topology_stream.decide(_stream_rows(design_exp=0.8), TS)
    assert {c.result for c in same if c.counted} == {MISMATCH}
    stalled = topology_stream.decide(_stream_rows(loss=3.39), TS)
    assert {c.result for c in stalled if c.counted} == {INCONCLUSIVE}


def test_the_growth_exponents_are_log_log_slopes():
    rows = [_row("pre", d, 32, 0, rms=[2.0] + [2.0 * d**0.5] * d, rms_init=[1.0] * (d + 1)) for d in (6, 48)]
    assert topology_stream.exponent_across(rows) == pytest.approx(0.5)
    one = _row("pre", 8, 32, 0, rms=_profile(8, 0.7), rms_init=[])
    assert topology_stream.exponent_within(one) == pytest.approx(0.7)


# ---- value-residual -----------------------------------------------------------------------------------

VR = {**value_residual.SMALL}


def _curve(end: float, at: int, steps: int = 600, every: int = 20, start: float = 3.4) -> list:
    """A validation curve falling linearly from ``start`` to ``end`` at update ``at``, flat after it."""
    return [[s, start + (end - start) * min(s, at) / at] for s in range(every, steps + 1, every)]


def test_reached_interpolates_and_bounds_a_run_that_never_reaches():
    curve = [[20, 3.0], [40, 2.6], [60, 2.4]]
    assert value_residual.reached(curve, 2.5, 600, 20) == pytest.approx(50.0)
    assert value_residual.reached(curve, 2.6, 600, 20) == 40.0
    assert value_residual.reached(curve, 1.0, 600, 20) == 620.0
    assert value_residual.reached([[20, None], [40, 2.0]], 2.5, 600, 20) == 40.0


def _vres_rows(at=400, end=2.5, pre_end=2.5, pre_loss=2.5, pre_at=600):
    rows = []
    for s in VR["seeds"]:
        for d, w in VR["cells"]:
            rows.append(_row("pre", d, w, s, pre_loss, val=_curve(pre_end, pre_at)))
            for design in VR["designs"]:
                rows.append(_row(design, d, w, s, end, val=_curve(end, at + 10 * s)))
    return rows


def test_value_residual_agrees_when_the_target_is_reached_early():
    checks = value_residual.decide(_vres_rows(), VR)
    assert len(checks) == 2 * len(VR["cells"])
    assert all(c.result == AGREE for c in checks), [c.measured for c in checks]


def test_value_residual_fails_when_slower_or_never_and_needs_a_trained_baseline():
    later = value_residual.decide(_vres_rows(at=500, pre_at=400), VR)
    assert {c.result for c in later} == {MISMATCH}
    never = value_residual.decide(_vres_rows(end=2.7), VR)
    assert {c.result for c in never} == {MISMATCH}
    stalled = value_residual.decide(_vres_rows(pre_loss=3.39, pre_end=3.39, end=3.39), VR)
    assert {c.result for c in stalled} == {INCONCLUSIVE}


# ---- the claims' code paths, the record and the page --------------------------------------------------

TINY = {
    "hc-gain": {"depths": [2, 3], "widths": [16], "steps": 12, "warmup": 2, "seeds": [0, 1]},
    "topology-stream": {"depths": [2, 3], "widths": [16], "steps": 12, "warmup": 2, "seeds": [0, 1]},
    "value-residual": {"cells": [[2, 16]], "steps": 12, "warmup": 2, "eval_every": 4, "seeds": [0, 1]},
}
MODULES = {"hc-gain": hc_gain, "topology-stream": topology_stream, "value-residual": value_residual}


@pytest.fixture
def shrunk(monkeypatch, one_thread):
    for k, v in {"eval_batches": 1, "batch_size": 4, "seq_len": 16}.items():
        monkeypatch.setitem(lm_runs.TINY_TRAIN, k, v)
    monkeypatch.setitem(lm_runs.TINY_MODEL, "n_heads", 2)
    yield monkeypatch


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_claim_quick_smoke(shrunk, name, tmp_path):
    shrunk.setattr(MODULES[name], "QUICK", TINY[name])
    result = run_claim(name, quick=True, out_dir=str(tmp_path / name))
    assert result.name == name and result.checks and result.source and result.plots
    assert all(c.result in RESULTS and c.measured and c.stated for c in result.checks)
    assert sum(counts(result.checks).values()) == len(result.checks)
    assert len(result.data["rows"]) == len(
        topology_record.planned(name, {**REGISTRATIONS[name].regime("small"), **TINY[name]})
    )


@pytest.mark.slow
def test_the_record_resumes_and_each_row_is_the_claims_row(shrunk, tmp_path):
    regimes = {n: {**REGISTRATIONS[n].regime("small"), **TINY[n]} for n in NAMES}
    record, cache = str(tmp_path / "runs.json"), str(tmp_path / "cache")
    finished = []
    topology_record.run_claims(list(NAMES), record, cache, regimes=regimes, after_claim=finished.append)
    first = topology_record.read_record(record)
    assert finished == list(NAMES)
    for name in NAMES:
        rows = first["claims"][name]
        assert len(rows) == len(topology_record.planned(name, regimes[name]))
        assert all(
            r["threads"] == 1 and not r["loaded"] and r["finished_at"] >= r["started_at"] for r in rows
        )
        checks = MODULES[name].decide(rows, regimes[name])
        assert checks and all(c.result in RESULTS for c in checks)
    json.loads(Path(record).read_text())  # strict JSON, one row a line
    lines = [ln for ln in Path(record).read_text().splitlines() if ln.startswith("   {")]
    assert len(lines) == sum(len(v) for v in first["claims"].values())
    assert all(json.loads(ln.rstrip(",")) for ln in lines)
    # a second sitting trains nothing: every run is in the record
    again = topology_record.run_claims(
        list(NAMES), record, cache, regimes=regimes, after_claim=finished.append
    )
    assert again == first and finished == list(NAMES)
    # a run dropped from the record is loaded from the run cache, not trained, and gives the same row
    dropped = first["claims"]["topology-stream"].pop(0)
    topology_record.write_topology_record(record, first)
    run_cache.reset_tally()
    topology_record.run_claims(["topology-stream"], record, cache, regimes=regimes)
    back = topology_record.read_record(record)["claims"]["topology-stream"][-1]
    assert back["loaded"] and run_cache.TALLY.loaded == 1 and run_cache.TALLY.trained == 0
    meta = set(topology_record.META)
    assert {k: v for k, v in back.items() if k not in meta} == {
        k: v for k, v in dropped.items() if k not in meta
    }


def _synthetic_record(complete: set[str]) -> dict:
    """Rows for every planned run of the registered regimes (``complete`` claims in full, the others
    missing their last seed), their values built to agree."""
    made = {
        "hc-gain": {(r["design"], r["depth"], r["width"], r["seed"]): r for r in _hc_rows()},
        "topology-stream": {(r["design"], r["depth"], r["width"], r["seed"]): r for r in _stream_rows()},
        "value-residual": {(r["design"], r["depth"], r["width"], r["seed"]): r for r in _vres_rows()},
    }
    record = {"claims": {}}
    for name in NAMES:
        rows = []
        for p in topology_record.planned(name):
            if name not in complete and p.seed == max(REGISTRATIONS[name].regime("small")["seeds"]):
                continue
            row = dict(made[name][(p.design, p.depth, p.width, p.seed)])
            rows.append({**row, "key": p.key, "seconds": 1.0, "started_at": 4e9, "finished_at": 4e9 + 1})
        record["claims"][name] = rows
    return record


def test_the_page_decides_complete_claims_and_says_how_many_runs_the_others_have():
    text = page_mod.page(_synthetic_record({"hc-gain"}))
    assert text.startswith(page_mod.TITLE) and page_mod.MARKER in text
    total = sum(len(topology_record.planned(n)) for n in NAMES)
    done = sum(len(topology_record.planned(n)) for n in NAMES) - sum(
        len(topology_record.planned(n)) // 3 for n in ("topology-stream", "value-residual")
    )
    assert f"Runs recorded: **{done} of {total}**" in text
    hc = text.split("## hc-gain")[1].split("## topology-stream")[0]
    assert "**Result:** 12 of 12 agree; 2 sanity checks not counted." in hc
    vres = text.split("## value-residual")[1]
    assert "**Result:** pending: 30 of 45 runs recorded" in vres and "| claim | expected |" not in vres
    assert "updates to pre-LN's final loss" in vres  # the recorded cells are shown all the same


def test_the_page_is_not_written_over_a_file_it_did_not_write(tmp_path):
    doc = tmp_path / "page.md"
    doc.write_text("# Something else\n")
    with pytest.raises(ValueError):
        page_mod.write_page(str(tmp_path / "none.json"), str(doc))
    doc.unlink()
    page_mod.write_page(str(tmp_path / "none.json"), str(doc))
    assert "Runs recorded: **0 of" in doc.read_text()


def test_the_committed_record_holds_registered_runs_started_after_their_registration():
    record = topology_record.read_record(str(ROOT / topology_record.RECORD))
    for name, rows in record["claims"].items():
        plan = {p.key for p in topology_record.planned(name)}
        assert all(r["key"] in plan for r in rows), f"{name}: a recorded run is no run of its regime"
        assert len({r["key"] for r in rows}) == len(rows), f"{name}: a run recorded twice"
        registered = commit_time(REGISTRATIONS[name].commit)
        if rows:
            assert REGISTRATIONS[name].commit, (
                f"{name}: runs recorded before the registration names its commit"
            )
        if registered is not None:
            assert all(r["started_at"] >= registered for r in rows), (
                f"{name}: a run started before registration"
            )


def test_the_committed_page_is_the_one_the_record_gives():
    record = topology_record.read_record(str(ROOT / topology_record.RECORD))
    committed = (ROOT / topology_record.PAGE).read_text(encoding="utf-8")
    assert committed == page_mod.page(record), f"regenerate it: {page_mod.RERENDER}"


def test_the_registered_regimes_stay_on_the_cpu_ladder():
    """Widths 32 to 128, depths up to 48, three seeds or more, one scale (no GPU regime)."""
    for name in NAMES:
        reg = REGISTRATIONS[name]
        assert set(reg.regimes) == {"small"} and reg.commit and "Cost" in reg.notes, name
        runs = topology_record.planned(name)
        assert runs and all(32 <= p.width <= 128 and p.depth <= 48 for p in runs), name
        assert len(reg.regime("small")["seeds"]) >= 3 and len({p.key for p in runs}) == len(runs), name


def test_the_plan_counts_recorded_runs_and_prices_the_rest(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(topology_record, "_best_step", lambda design, width, layers: 0.001 * layers)
    record = str(tmp_path / "runs.json")
    p = topology_record.planned("value-residual")[0]
    topology_record.write_topology_record(
        record, {"claims": {"value-residual": [{"key": p.key, "seconds": 60.0}]}}
    )
    total = topology_record.plan(["value-residual"], record)
    text = capsys.readouterr().out
    assert "value-residual     45 runs,    1 recorded (1 min of training),   44 left" in text
    left = topology_record.planned("value-residual")[1:]
    assert total == pytest.approx(sum(topology_record.expected_seconds(q, {}) for q in left))
    step = 0.001 * p.depth  # a 2- and an 8-layer step of 2 and 8 ms: 1 ms a layer, nothing fixed
    evals = p.train["steps"] // p.train["eval_every"] + 1
    assert topology_record.expected_seconds(p, {}) == pytest.approx(
        topology_record.ALLOWANCE * step * p.train["steps"] + evals * 8 * step / 3
    )


def test_a_claims_record_is_committed_alone_with_the_page_rendered_from_it(tmp_path):
    """What ``run --commit`` does after each claim: the page rendered in a fresh process from the record,
    both committed, and nothing else that is staged."""
    import subprocess

    def git(*args):
        return subprocess.run(["git", *args], cwd=tmp_path, capture_output=True, text=True, check=True).stdout

    git("init", "-q")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    record, page, other = tmp_path / "runs.json", tmp_path / "page.md", tmp_path / "other.txt"
    topology_record.write_topology_record(str(record), {"claims": {}})
    other.write_text("a\n")
    git("add", ".")
    git("commit", "-q", "-m", "start")
    rows = _synthetic_record({"hc-gain"})["claims"]["hc-gain"]
    topology_record.write_topology_record(str(record), {"claims": {"hc-gain": rows}})
    other.write_text("b\n")
    git("add", "other.txt")
    assert topology_record.commit_record("hc-gain", str(record), str(page), root=tmp_path)
    assert git("show", "--name-only", "--format=", "HEAD").split() == ["page.md", "runs.json"]
    assert git("diff", "--cached", "--name-only").split() == ["other.txt"]  # still staged, not committed
    assert page.read_text() == page_mod.page(topology_record.read_record(str(record)))
    assert "12 of 12 agree" in page.read_text() and "36 of 153 runs recorded" in git(
        "log", "-1", "--format=%s"
    )


def test_render_refuses_a_missing_or_broken_record_and_a_foreign_page_in_one_line(tmp_path, capsys):
    doc, record = tmp_path / "page.md", str(ROOT / topology_record.RECORD)
    broken = tmp_path / "broken.json"
    broken.write_text('{"claims": ')
    foreign = tmp_path / "other.md"
    foreign.write_text("# Something else\n")
    cases = [
        (str(tmp_path / "none.json"), doc),  # a mistyped record: never an empty page
        (str(broken), doc),
        (record, foreign),
        (record, tmp_path),  # a folder as the page
    ]
    for rec, page in cases:
        assert topology_record.main(["render", "--record", rec, "--doc", str(page)]) == 2, (rec, page)
        err = capsys.readouterr().err
        assert err.startswith("python -m depthlab_lab.reproduce.topology_record: error:"), err
        assert err.count("\n") == 1 and "Traceback" not in err, err
    assert not doc.exists() and foreign.read_text() == "# Something else\n"
    assert topology_record.main(["render", "--record", record, "--doc", str(doc)]) == 0
    assert doc.read_text(encoding="utf-8") == (ROOT / topology_record.PAGE).read_text(encoding="utf-8")

"""benchmarks/gpu.py --all: the prepared ten-minute run on one GPU, exercised on the CPU by its --dry-run
(every part at toy size), its refusals of bad input, and the held-out set at real width it trains (the
registration committed before any GPU run, and how it is scored)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from depthlab_lab.calibrate import heldout_width as hw

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.usefixtures("one_thread")


def _gpu_py(args: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
    """benchmarks/gpu.py with ``args`` on the CPU (no CUDA device visible), one thread."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'lab'}", "CUDA_VISIBLE_DEVICES": "",
           "OMP_NUM_THREADS": "1", "DEPTHLAB_BENCH_THREADS": "1"}  # fmt: skip
    return subprocess.run(
        [sys.executable, "gpu.py", *args],
        cwd=ROOT / "benchmarks",
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def dry(tmp_path_factory):
    """One dry run of the whole suite (every part, toy sizes, the CPU), shared by the tests below."""
    out = tmp_path_factory.mktemp("gpu-dry")
    done = _gpu_py(["--all", "--dry-run", "--out", str(out), "--work", str(out / "work")])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    record = json.loads((out / "gpu-record.json").read_text())
    return done.stdout, record, out


def test_the_dry_run_prints_the_plan_with_each_parts_expected_time_on_an_h200(dry):
    stdout, record, _ = dry
    lines = stdout.splitlines()
    assert lines[0].startswith("# plan on one H200")
    assert any(ln.startswith("speed (alone): expected about") for ln in lines)
    assert any(ln.startswith("doctor and topologies: expected about") for ln in lines)
    whole = next(ln for ln in lines if ln.startswith("whole: expected about"))
    assert float(whole.split("about ")[1].split(" min")[0]) <= 9.0  # within the budget by its own estimate
    how = next(ln for ln in lines if ln.startswith("how estimated:"))
    assert "assumed" in how and "None of these was measured on a GPU" in how
    assert record["plan"] == lines[: len(record["plan"])]


def test_the_preflight_trains_and_probes_a_tiny_model_of_each_kind_first(dry):
    _, record, _ = dry
    assert record["preflight"] == {w: {"train": "ok", "probe": "ok"} for w in ("pre", "hc")}
    assert "telemetry_off" not in record


def test_the_dry_run_exercises_the_speed_part(dry):
    _, record, _ = dry
    groups = [g for g in record["speed"]["groups"] if "error" not in g]
    assert not [g for g in record["speed"]["groups"] if "error" in g]
    eager = {(g["shape"], k) for g in groups if not g["compiled"] for k in g["models"]}
    for shape in ("d768x12", "d2048x24", "d512x96"):
        for m in ("nanogpt", "depthlab-pre", "depthlab-post", "depthlab-sandwich", "depthlab-deepnorm",
                  "depthlab-hc", "depthlab-mhc"):  # fmt: skip
            assert (shape, m) in eager
    compiled = {k for g in groups if g["compiled"] for k in g["models"]}
    assert {"nanogpt+compile", "depthlab-pre+compile", "depthlab-mhc+compile"} <= compiled
    for g in groups:  # the reference is in every group, at ratio 1
        ref = "nanogpt+compile" if g["compiled"] else "nanogpt"
        assert g["models"][ref]["ratio_to_reference"] == 1.0
    # as on the GPU: the models under bf16 autocast, the compiled blocks through AOTAutograd
    assert record["speed"]["autocast"] == "bfloat16" and record["speed"]["compile_backend"] == "aot_eager"


def test_the_dry_run_exercises_the_doctor_part_under_the_registration(dry):
    _, record, out = dry
    doc = record["doctor"]
    registered = hw.load_registration()["runs"]
    assert doc["registered"] == len(registered) and not doc.get("error")
    finished = [r for r in doc["runs"] if r.get("outcome")]
    assert len(finished) + len(doc["not_run"]) + sum("error" in r for r in doc["runs"]) == len(registered)
    assert len(finished) >= len(registered) // 2, doc["not_run"][:2]
    assert doc["score"]["runs"] == len(finished)
    # runs start in the registered order: the finished ones are a prefix of it (two at a time)
    order = [r["config_hash"] for r in registered]
    assert {r["config_hash"] for r in doc["runs"]} == set(order[: len(doc["runs"])])
    # every run's probe on the device was written before its result
    probes = [json.loads(x) for x in (out / "heldout-probes.jsonl").read_text().splitlines()]
    runs = [json.loads(x) for x in (out / "heldout-runs.jsonl").read_text().splitlines()]
    assert {p["config_hash"] for p in probes} >= {r["config_hash"] for r in runs}
    assert all("p_trains" in p["gpu_probe"] for p in probes), probes[0]
    assert doc["corpus"]["bytes"] > 1_000_000 and doc["passes_per_run"] < 1


def test_the_dry_run_exercises_the_topologies_part(dry):
    _, record, _ = dry
    topo = record["topologies"]
    assert set(topo["runs"]) == {"hc", "mhc"}
    for w, run in topo["runs"].items():
        assert "error" not in run, run.get("error")
        gains = run["init_probe"]["composite_gain"]
        assert gains[0] is None and all(abs(g - 1) < 1e-3 for g in gains[1:]), (w, gains)  # identity at init
        logged = [s for s in run["steps"] if s.get("topology")]
        assert logged and logged[-1]["step"] == topo["steps"]


def test_the_topology_runs_write_their_probe_and_logged_steps_as_they_come(dry):
    _, record, out = dry
    rows = [json.loads(x) for x in (out / "topologies-steps.jsonl").read_text().splitlines()]
    for w, run in record["topologies"]["runs"].items():
        mine = [r for r in rows if r["wrap"] == w]
        assert mine[0]["init_probe"] == run["init_probe"]
        assert [{k: v for k, v in r.items() if k != "wrap"} for r in mine[1:]] == run["steps"]


def _suite():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_suite

    return gpu_suite


def test_a_run_cut_short_keeps_its_markdown_with_what_each_part_had(tmp_path):
    """The command's time limit can end the run at any moment: the Markdown is rewritten with the record
    (after every group, run and part), from a part left half-done or failed too."""
    gs = _suite()
    ctx = gs.Ctx(out=tmp_path, work=tmp_path, device="cpu", dry=True, parts=gs.PARTS, workers=2, budget=540)
    row = {"step_ms": 10.0, "tokens_per_s": 6400.0, "tflops": 0.1, "mfu": None, "ratio_to_reference": 1.0,
           "first_step_s": 0.1, "params": 1000, "steps_timed": 4}  # fmt: skip
    steps = tmp_path / "topologies-steps.jsonl"
    steps.write_text(json.dumps({"wrap": "mhc", "init_probe": {"composite_gain": [None, 1.0]}}) + "\n"
                     + json.dumps({"wrap": "mhc", "step": 5, "loss": 5.0, "val_loss": 5.1,
                                   "topology": {"composite_gain": [None, 1.02], "composite_gain_back": [None, 1.01]}})
                     + "\n")  # fmt: skip
    ctx.record.update(
        machine=gs.machine("cpu"),
        speed={"seq": 32, "batch": 2, "compile_backend": "aot_eager", "skipped": [],
               "groups": [{"shape": "d2048x24", "compiled": False, "peak_gib": None,
                           "models": {"nanogpt": row, "depthlab-pre": row}}]},  # no goals: the part had not ended
        doctor={"error": "Traceback (most recent call last):\n  ...\nKeyError: 'runs'"},
        topologies={"config": {**gs.TOPO, **gs.DRY["topo"]}, "steps": 10, "cut": "time ran out",
                    "runs": {"mhc": gs.topology_partial(steps, "mhc")}},
    )  # fmt: skip
    ctx.save()
    md = (tmp_path / "gpu-results.md").read_text()
    assert "| d2048x24 | depthlab-pre | 6,400 |" in md and "goals: not read yet" in md
    assert "Failed: KeyError: 'runs'" in md
    assert (
        "| mhc | step 5 | 1.02, -, -, -, -, - | 1.01 | 5 | 5.1 |" in md
        and "| mhc | end: cut |" in md
        and "Cut: time ran out." in md
    )
    assert json.loads((tmp_path / "gpu-record.json").read_text())["doctor"]["error"].endswith("'runs'")


def test_the_topologies_run_when_the_doctor_part_fails_before_its_runs(tmp_path, monkeypatch):
    gs = _suite()

    def broken(ctx, before_runs=None):
        raise KeyError("runs")

    monkeypatch.setattr(gs, "doctor_part", broken)
    code = gs.run_all(str(tmp_path / "o"), ("doctor", "topologies"), True, 2, 540.0, str(tmp_path / "w"))
    record = json.loads((tmp_path / "o" / "gpu-record.json").read_text())
    assert code == 1 and "KeyError" in record["doctor"]["error"]
    assert set(record["topologies"]["runs"]) == {"hc", "mhc"}
    assert all(run["outcome"] != "cut" and run["steps"] for run in record["topologies"]["runs"].values())


def test_worker_threads_share_the_cores_this_process_may_use_not_the_machines(monkeypatch):
    gs = _suite()
    monkeypatch.setattr(os, "cpu_count", lambda: 224)  # a container's host, of which 16 cores are ours
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    assert [gs.worker_threads(n) for n in (8, 10, 32)] == [2, 1, 1]


def test_the_dry_run_writes_the_markdown_sections(dry):
    _, _, out = dry
    md = (out / "gpu-results.md").read_text()
    for heading in ("## gpu", "## depthlab advise at real width", "## Topologies at depth"):
        assert heading in md
    assert "a dry run on the CPU at toy sizes: no figure here is a result" in md


@pytest.mark.parametrize(
    "args, says",
    [
        (["--all", "--parts", "speed,nope"], "--parts"),
        (["--all", "--budget", "5"], "--budget 5"),
        (["--all", "--workers", "0"], "--workers 0"),
        (["--all", "--reproduce"], "cannot be combined"),
        (["--parts", "speed"], "go with --all"),
        (["--shape", "12x3"], "--shape"),
        (["--all", "--budget", "nan"], "--budget"),
    ],
)
def test_bad_input_is_one_line_on_stderr_and_exit_2(args, says):
    done = _gpu_py(args, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "Traceback" not in done.stderr, done.stderr


def test_an_out_that_is_a_file_is_refused(tmp_path):
    f = tmp_path / "x"
    f.write_text("")
    done = _gpu_py(["--all", "--dry-run", "--out", str(f)], timeout=120)
    assert (
        done.returncode == 2
        and done.stderr.strip() == f"gpu.py: error: --out {f}: exists and is not a folder"
    )


def test_without_a_gpu_all_prints_its_plan_and_measures_nothing(tmp_path):
    done = _gpu_py(["--all", "--out", str(tmp_path / "o")], timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("# plan on one H200") and "No GPU" in done.stdout
    assert not (tmp_path / "o").exists()


# -- the registration ---------------------------------------------------------------------------------
def test_the_registration_is_the_grid_in_its_order_with_every_prediction_frozen():
    reg = hw.load_registration()
    specs = hw.specs()
    assert [r["config_hash"] for r in reg["runs"]] == [s.hash for s in specs]
    assert len(specs) == 24 and reg["within_2x_of_limit"] == 24
    for r in reg["runs"]:
        assert 0 <= r["p_trains"] <= 1 and r["advise"] in ("trains", "fails")
        assert set(r["lookups"]) == {"wrapping x lr", "wrapping x width x lr x warmup", "nearest runs"}
        assert r["probe_seconds"] > 0
    assert set(reg["rules"]) >= {"outcome", "advise", "lookups", "accuracy", "brier", "where", "order",
                                 "gpu probe"}  # fmt: skip
    for s in specs:
        assert s.model.d_model in (1024, 2048) and 12 <= s.model.n_layers <= 48
        assert s.train.steps == 1000 and s.train.bf16 and s.train.warmup in (0, 300)


def test_every_prefix_of_four_points_holds_every_wrapping_and_each_wrapping_every_shape():
    pts = hw.points()
    for i in range(0, len(pts), 4):
        assert {p[0] for p in pts[i : i + 4]} == set(hw.WRAPS)
    for w in hw.WRAPS:
        assert {(d, n) for x, d, n, _ in pts if x == w} == set(hw.SHAPES)
    for shape in hw.SHAPES:
        assert sorted(wu for _, d, n, wu in pts if (d, n) == shape) == [0, 0, 300, 300]


def test_the_score_counts_by_hand():
    reg = [
        {"config_hash": "a", "p_trains": 0.9, "advise": "trains", "lookups": {"wrapping x lr": "trains"}},
        {"config_hash": "b", "p_trains": 0.2, "advise": "fails", "lookups": {"wrapping x lr": "trains"}},
        {"config_hash": "c", "p_trains": 0.7, "advise": "trains", "lookups": {"wrapping x lr": "fails"}},
        {"config_hash": "d", "p_trains": 0.4, "advise": "fails", "lookups": {"wrapping x lr": "fails"}},
    ]
    s = hw.score(reg, {"a": "trained", "b": "diverged", "c": "stalled"})  # d did not run
    assert s["runs"] == 3 and s["registered"] == 4
    assert s["predictors"]["advise"]["hits"] == 2  # a, b right; c wrong
    assert s["predictors"]["wrapping x lr"]["hits"] == 2  # a, c right
    assert s["predictors"]["always 'trains'"]["hits"] == 1
    assert s["brier"]["advise"] == pytest.approx((0.1**2 + 0.2**2 + 0.7**2) / 3)
    assert s["brier"]["wrapping x lr"] == pytest.approx(1 / 3)
    assert s["passes"] == {"accuracy": False, "brier": True}
    assert hw.score(reg, {})["runs"] == 0 and hw.format_score(hw.score(reg, {}))[0].startswith("0 of 4")

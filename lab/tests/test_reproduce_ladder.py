"""The scale ladder: registered (values and effect code pinned, its commit checked against the history)
before any of its runs, resumable from its study store, its effect-vs-width page rendered from a built
store, its cost printed, and bad input refused with one line.
"""

from __future__ import annotations

import inspect
import io
import json
import math
from pathlib import Path

import pytest

from depthlab.cli import main
from depthlab.intervals import AGREE, MISMATCH, mean_interval
from depthlab.study import Store
from depthlab_lab.docgen.ladder_doc import busy_seconds, cost_lines, summary_lines, sweep_line, write_ladder
from depthlab_lab.reproduce import ladder_effects, ladder_run
from depthlab_lab.reproduce.check_code import module_pins
from depthlab_lab.reproduce.ladder import COMMITS, LADDER, REGISTRATIONS, STEP_RULE, Effect, steps_at
from depthlab_lab.reproduce.ladder_effects import AWAY, FLAT, TOWARD, Measured, final_loss, trend
from depthlab_lab.reproduce.registration import unrevised_changes
from lab.tests.git_history import commits_of, git, show_followed

ROOT = Path(__file__).resolve().parents[2]
PINS_PATH = "lab/tests/registered_ladder.json"
PINS = json.loads((ROOT / PINS_PATH).read_text())

pytestmark = pytest.mark.usefixtures("one_thread")


def _code() -> dict:
    src = inspect.getsource(ladder_effects)
    roots = ("measure", "trend", "measure_capped")  # measure_capped: the revised column, since 2026-12-01
    return {k: v for root in roots for k, v in module_pins(src, root).items()}


def test_every_ladder_claim_is_pinned_and_changes_only_through_revisions():
    assert set(PINS) - {"_code", "_base"} == set(LADDER) == set(REGISTRATIONS)
    for name, reg in REGISTRATIONS.items():
        first = {**PINS[name]["values"], **{f"code.{k}": v for k, v in PINS["_code"].items()}}
        assert unrevised_changes(first, reg, _code()) == [], name


def test_a_changed_bound_or_effect_code_fails_the_pin():
    reg = REGISTRATIONS["depth"]
    first = {**PINS["depth"]["values"], **{f"code.{k}": v for k, v in PINS["_code"].items()}}
    src = inspect.getsource(ladder_effects)
    mutated = {
        **module_pins(
            src.replace("final_loss(x) - final_loss(y)", "final_loss(x) - final_loss(y) / 2"), "measure"
        )
    }
    assert unrevised_changes(first, reg, {**_code(), **mutated})
    weaker = [
        dict(e, at_least=-0.5) if e["name"] == "post 24L: fails" else e for e in reg.expectation["effects"]
    ]
    changed = type(reg)(reg.commit, {**reg.expectation, "effects": weaker}, reg.regimes)
    assert unrevised_changes(first, changed, _code())


def test_the_ladder_registration_is_the_commit_that_first_recorded_it():
    if git("rev-parse", "--is-shallow-repository").strip() == "true":
        pytest.fail("a shallow clone: the ladder's commit needs the full history")
    history = [(c, json.loads(src)) for c in commits_of(PINS_PATH) if (src := show_followed(c, PINS_PATH))]
    for name, reg in REGISTRATIONS.items():
        first = next((c for c, p in history if p.get(name, {}).get("values") == PINS[name]["values"]), None)
        assert first is not None and reg.commit == COMMITS[name] == first, name
        assert "ladder" in show_followed(first, "lab/depthlab_lab/reproduce/ladder.py")


def test_a_run_stored_before_the_registration_is_named():
    registered = ladder_run.commit_time()
    assert registered is not None, "the ladder's commit is not in this repository's history"
    assert all(ladder_run.commit_time(c) for c in COMMITS.values()), COMMITS
    runs = [{"id": 1, "started_at": registered + 60}, {"id": 2, "started_at": registered - 60}]
    assert [r["id"] for r in ladder_run.runs_before(runs, registered)] == [2]


def test_the_step_rule_is_the_registered_one():
    assert [steps_at(150, w) for w in (32, 64, 128)] == [150, 212, 300]
    assert "sqrt" in STEP_RULE
    depth = REGISTRATIONS["depth"].regimes
    assert depth["d128"]["settings"]["pre 24L"]["train"]["steps"] == 300
    assert "post 24L, lr/3" in depth["d32"]["settings"] and "post 24L, lr/3" not in depth["d64"]["settings"]


def test_fails_claims_sweep_three_learning_rates_at_the_first_rung():
    for name in ("depth", "recipe", "skip-ablation", "original-shape"):
        claim = LADDER[name]
        assert claim.lr_sweep and all(claim.settings[label][1]["lr"] > 0 for label in claim.lr_sweep)
        bases = {label.rsplit(", lr", 1)[0] for label in claim.lr_sweep}
        for base in bases:
            lrs = {claim.settings[label][1]["lr"] for label in claim.settings if label.startswith(base)}
            assert len(lrs) >= 3, (name, base)


def test_a_diverged_run_counts_as_ln_v_and_the_trend_reads_the_bounds():
    run = {"outcome": "diverged", "val_loss": 3.2, "config": {"model": {"vocab_size": 256}}}
    assert final_loss(run) == pytest.approx(math.log(256))
    low, high = (
        Measured(w, v, mean_interval(v), "") for w, v in ((32, (0.0, 0.1, 0.2)), (128, (1.0, 1.1, 1.2)))
    )
    assert trend(Effect("e", "gap", "a", "b", at_least=0.5), [low, high]) == TOWARD
    assert trend(Effect("e", "gap", "a", "b", at_most=0.5), [low, high]) == AWAY
    assert trend(Effect("e", "gap", "a", "b", at_most=0.5), [low, low]) == FLAT


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A quick ladder of one cheap claim, run twice into one store: (store, first output, second output)."""
    db = str(tmp_path_factory.mktemp("ladder") / "ladder.sqlite")
    outs = []
    for _ in range(2):
        buf = io.StringIO()
        ladder_run.run_ladder(db, ["batchnorm"], quick=True, workers=1, out=buf)
        outs.append(buf.getvalue())
    return db, outs


def test_the_ladder_resumes_and_skips_every_stored_run(built):
    _, (first, second) = built
    assert "0 already done, 4 to run" in first and "about" in first
    studies = [ln for ln in second.splitlines() if ln.startswith("study ")]
    assert len(studies) == 2 and all("4 already done, 0 to run" in ln for ln in studies), second
    assert "ladder batchnorm: 8 runs (8 already in the store)" in second


def test_the_effect_table_renders_from_a_built_store(built, tmp_path):
    db, _ = built
    doc = tmp_path / "ladder.md"
    effects = write_ladder(db, str(doc), ["batchnorm"], quick=True, run=False)
    text = doc.read_text()
    assert "| effect | holds when | d 16 | d 32 | with width |" in text
    row = next(ln for ln in text.splitlines() if ln.startswith("| (val - train) of BatchNorm"))
    assert row.count("[") == 2 and "not run yet" not in row
    assert "8 runs stored, 0 of them started before their claim's registration commit" in text
    with Store(db, create=False) as store:
        seconds = sum(r["seconds"] for s in store.studies() for r in store.runs(s["id"]))
    cost_row = next(ln for ln in text.splitlines() if ln.startswith("| batchnorm |"))
    assert cost_row.startswith("| batchnorm | 8 | ") and f"| {seconds / 60:.0f} min |" in cost_row
    measured = effects["batchnorm"][0]["measured"]
    assert [m.width for m in measured] == [16, 32] and all(m.interval and m.interval.n == 2 for m in measured)
    with Store(db, create=False) as store:
        assert not ladder_run.runs_before(
            [r for s in store.studies() for r in store.runs(s["id"])], ladder_run.commit_time()
        )


def test_the_page_gives_the_expected_cost_only_of_what_is_left(built, tmp_path):
    db, _ = built
    done, partial = tmp_path / "done.md", tmp_path / "partial.md"
    write_ladder(db, str(done), ["batchnorm"], quick=True, run=False)
    assert "Nothing left to run: every run of the plan is stored." in done.read_text()
    assert "Expected cost of what is not yet stored" not in done.read_text()
    write_ladder(db, str(partial), ["batchnorm", "dyt"], quick=True, run=False)
    text = partial.read_text()
    assert "Nothing left to run" not in text and "Expected cost of what is not yet stored" in text
    assert "ladder dyt: " in text and "(0 already in the store)" in text
    assert "ladder batchnorm: 8 runs (8 already in the store)" in text


def test_busy_wall_time_is_the_union_of_the_runs_intervals():
    # two overlapping runs, a gap (a pause between sittings, not counted), a run inside another
    assert busy_seconds([(10.0, 14.0), (0.0, 2.0), (1.0, 3.0), (11.0, 12.0)]) == 7.0
    assert busy_seconds([]) == 0.0
    assert cost_lines({"a": (0, 0.0, 0.0)}) == []
    table = cost_lines({"a": (3, 600.0, 300.0), "b": (2, 7200.0, 3600.0)})
    assert "| a | 3 | 10 min | 5 min |" in table and "| b | 2 | 2.0 h | 60 min |" in table
    assert table[-1] == "| all | 5 | 2.2 h | 65 min |"


def test_the_summary_counts_trends_and_results_at_the_narrowest_and_widest_width():
    grows = Effect("grows", "gap", "a", "b", at_least=0.5)
    low, high = (0.0, 0.1, 0.2), (1.0, 1.1, 1.2)
    rows = {
        "c1": [
            {"effect": grows, "measured": [Measured(32, low, mean_interval(low), "inconclusive"),
                                           Measured(128, high, mean_interval(high), AGREE)],
             "trend": TOWARD},
            {"effect": Effect("sweep", "nats", "a", at_least=-0.05, first_rung_only=True),
             "measured": [Measured(32, low, mean_interval(low), AGREE)], "trend": "not measured at two widths"},
        ],
        "c2": [
            {"effect": Effect("shrinks", "gap", "a", "b", at_most=0.5),
             "measured": [Measured(32, low, mean_interval(low), AGREE),
                          Measured(128, high, mean_interval(high), AGREE)],
             "trend": AWAY},
        ],
    }  # fmt: skip
    text = "\n".join(summary_lines(rows))
    assert "Of the 3 effects, 2, in 2 claims, are measured at two widths or more" in text
    assert "1 moved toward the claim's side of its bound, 1 away from it, 0 not beyond" in text
    assert "narrowest width: 1 agree, 0 MISMATCH, 1 inconclusive; at the widest: 2 agree, 0 MISMATCH" in text
    assert "- c1, grows: inconclusive at d 32, agree at d 128 (toward the claim)" in text
    assert "- c2, shrinks: agree at d 32, agree at d 128 (away from the claim)" in text
    assert summary_lines({"c": [rows["c1"][1]]}) == []


def test_the_plan_prints_each_claims_cost_and_runs_nothing(tmp_path, capsys):
    db = tmp_path / "plan.sqlite"
    assert main(["reproduce", "ladder", "--plan", "--claims", "dyt,batchnorm", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "ladder dyt: 18 runs (0 already in the store), about" in out
    assert "ladder: 36 runs, 0 already done; expected about" in out and "with" in out
    assert not db.exists()


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--claims", "nope"], "--claims"),
        (["--claims", "depth,warmup,model-update"], "model-update"),
        (["--db", "FOLDER"], "folder"),
        (["--db", "TEXT"], "SQLite"),
        (["--json", "-"], "ladder"),
        (["--doc", "TEXT_MD"], "not a ladder page"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, needle):
    (tmp_path / "text.sqlite").write_text("not a store")
    (tmp_path / "notes.md").write_text("# my notes\n")
    paths = {
        "FOLDER": str(tmp_path),
        "TEXT": str(tmp_path / "text.sqlite"),
        "TEXT_MD": str(tmp_path / "notes.md"),
    }
    argv = [paths.get(a, a) for a in argv]
    plan = [] if "--doc" in argv else ["--plan"]
    code = main(["reproduce", "ladder", *plan, "--db", str(tmp_path / "l.sqlite"), *argv])
    out, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert needle.lower() in err.lower() and out == ""


def test_ladder_flags_are_refused_elsewhere(capsys):
    assert main(["reproduce", "depth", "--db", "x.sqlite"]) == 2
    assert "--db applies to 'doctor' and 'ladder' only" in capsys.readouterr().err
    assert main(["reproduce", "depth", "--claims", "depth"]) == 2
    assert "--claims applies to 'ladder' only" in capsys.readouterr().err


def test_the_results_are_decided_against_the_registered_bounds():
    values = (0.3, 0.31, 0.29)
    m = ladder_effects.measure(Effect("e", "nats", "a", at_least=0.0), 32, _runs(values), [0, 1, 2])
    assert m.result == AGREE
    m = ladder_effects.measure(Effect("e", "nats", "a", at_most=0.0), 32, _runs(values), [0, 1, 2])
    assert m.result == MISMATCH


def _runs(nats) -> dict:
    cfg = {"model": {"vocab_size": 256}, "train": {}}
    return {
        "a": {
            s: {"outcome": "trained", "val_loss": 3.0 + v, "unigram_loss": 3.0, "config": cfg}
            for s, v in enumerate(nats)
        }
    }


def test_the_lr_sweep_says_fails_at_every_lr_only_when_every_lr_agrees():
    claim = LADDER["depth"]
    stalled, trained = (0.5, 0.6, 0.55), (-0.5, -0.6, -0.55)

    def rows(sweep_values):
        out = []
        for e in claim.effects:
            values = sweep_values if e.a == "post 24L, lr x3" else stalled
            m = Measured(32, values, mean_interval(values), "")
            m = Measured(
                32,
                values,
                m.interval,
                ladder_effects.decide(m.interval, at_least=e.at_least, at_most=e.at_most),
            )
            out.append({"effect": e, "measured": [m], "trend": ""})
        return out

    assert "post 24L fails at every lr tried: yes" in sweep_line("depth", rows(stalled), 32)
    line = sweep_line("depth", rows(trained), 32)
    assert "post 24L fails at every lr tried: no" in line and "lr x3 MISMATCH" in line
    assert sweep_line("dyt", [], 32) is None


def test_the_regime_under_the_ladder_is_the_one_it_was_registered_on():
    """The ladder's settings override the small regime; that regime, as it was when the ladder was
    registered, is pinned too: a change to it changes every ladder run."""
    from_pin = PINS["_base"]
    assert from_pin == {"model": dict(ladder_run.TINY_MODEL), "train": dict(ladder_run.TINY_TRAIN)}


def test_every_training_claim_is_on_the_ladder_or_says_why_not():
    from depthlab_lab.reproduce import REGISTRATIONS as CLAIMS
    from depthlab_lab.reproduce.ladder import LEFT_OUT

    training = {n for n, r in CLAIMS.items() if "small" in r.regimes and "large" in r.regimes}
    assert not set(LADDER) & set(LEFT_OUT)
    assert training <= set(LADDER) | set(LEFT_OUT), training - set(LADDER) - set(LEFT_OUT)
    later = {
        "post-fails",
        "lr-reference",
        "stream-trained",
        "model-update-stream",
        "batchnorm-same",
        "original-peak",
    }
    assert all("registered after the ladder" in LEFT_OUT[n] for n in later)

"""``depthlab reproduce all`` across sittings: its plan (nothing trained, stored runs counted), the scale
ladder's tables inside its document (from a tiny synthetic store), and the flags that go with them."""

from __future__ import annotations

import json
import math

import pytest

from depthlab.cli import main
from depthlab.study import Store
from depthlab.train import loop
from depthlab.train.run_result import RunResult
from depthlab_lab.docgen import reproductions as all_mod
from depthlab_lab.docgen import reproductions_text
from depthlab_lab.docgen.reproductions_ladder import ladder_blocks
from depthlab_lab.reproduce import REPRODUCTIONS, dry_run, lm_runs, run_cache
from depthlab_lab.reproduce.ladder_run import rungs
from depthlab_lab.reproduce.reproduction import Check, Reproduction
from depthlab_lab.reproduce.topology_record import OWN_PAGE

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def no_training(monkeypatch):
    """Any training run fails the test: the plan must not start one."""

    def refuse(*args, **kwargs):
        raise AssertionError("the plan started a training run")

    monkeypatch.setattr(loop.Trainer, "__init__", refuse)


def _store(root: str, mcfg, tcfg) -> None:
    """Put a run of (mcfg, tcfg) in the cache folder ``root`` without training it."""
    result = RunResult("trained", None, None, 2.0, 2.1, None, 3.0, None, 1.0)
    run_cache.save(
        run_cache.path_of(root, run_cache.run_key(mcfg, tcfg)), run_cache.Trained(result, 1.0, "c", False)
    )


def test_the_plan_counts_stored_runs_and_trains_nothing(tmp_path, no_training):
    root = str(tmp_path / "cache")
    before = dry_run.claim_plan("no-norm", "small", True, root)
    assert before.runs > 1 and before.stored == 0 and before.seconds > 0
    runs, stopped = dry_run.planned_runs("no-norm", "small", True)
    assert stopped in ("train", "build_model") and len(runs) == before.runs  # no-norm probes at init first
    _store(root, runs[0].model, runs[0].train)
    after = dry_run.claim_plan("no-norm", "small", True, root)
    assert after.stored == 1 and after.runs == before.runs and after.seconds < before.seconds
    assert dry_run.planned_runs("init-scaling", "small", True) == ([], "build_model")


def test_reproduce_all_plan_prints_every_claim_and_the_total(tmp_path, capsys, no_training):
    out = tmp_path / "out"
    assert main(["reproduce", "all", "--plan", "--quick", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    lines = {ln.split()[0]: ln for ln in text.splitlines() if ln.strip()}
    assert set(REPRODUCTIONS) - OWN_PAGE <= set(lines), text
    assert not OWN_PAGE & set(lines), "a claim with its own page runs only when named"
    assert "no training runs (measures models at init)" in lines["init-scaling"]
    assert "coordinate checks" in lines["coord-depth"]
    assert lines["all"].split()[1].isdigit() and "trained once" in lines["all"]
    assert f"the run cache {out / 'cache'}" in text
    assert not out.exists()  # a plan writes nothing


def _synthetic_ladder(db: str, claim: str, width: int, dyt_loss: float) -> None:
    """The first rung of ``claim`` stored as if run: every run trained, LayerNorm at 2.0 nats, DyT at
    ``dyt_loss`` plus a little per seed, unigram 3.0; the wider rungs not stored."""
    rung = next(r for r in rungs([claim]) if r.width == width)
    with Store(db) as s:
        specs = rung.study.expand()
        sid = s.add_study(rung.study.name, rung.study.to_dict(), rung.study.config_hash(), specs)
        for spec, run in zip(specs, s.runs(sid)):
            loss = dyt_loss if spec.model.norm == "dyt" else 2.0
            loss += 0.001 * spec.train.seed
            result = {"outcome": "trained", "val_loss": loss, "final_train_loss": loss, "unigram_loss": 3.0}
            s.finish(run["id"], {"result": result})


def test_the_document_shows_each_ladder_claims_table_from_the_store(tmp_path):
    db, doc = str(tmp_path / "ladder.sqlite"), str(tmp_path / "docs" / "reproductions.md")
    width = min(r.width for r in rungs(["dyt"]))
    _synthetic_ladder(db, "dyt", width, dyt_loss=2.3)
    blocks = ladder_blocks(db, ["seeds", "dyt", "no-norm"], doc, page=str(tmp_path / "docs" / "ladder.md"))
    assert set(blocks) == {"dyt", "no-norm"}  # seeds is not on the ladder
    text = "\n".join(blocks["dyt"])
    assert "[the ladder page](ladder.md#dyt)" in text
    row = next(ln for ln in blocks["dyt"] if ln.startswith("| DyT - LayerNorm at 6L (close)"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "in [-0.1, +0.1]" and cells[2].startswith("+0.300 [") and cells[2].endswith("MISMATCH")
    assert cells[3] == "not run yet" and cells[-1] == "not measured at two widths"
    assert all("not run yet" in c for c in "\n".join(blocks["no-norm"]).split("|")[-4:-2])


def test_without_a_store_the_ladder_reads_not_run(tmp_path):
    blocks = ladder_blocks(str(tmp_path / "none.sqlite"), ["dyt"], str(tmp_path / "r.md"))
    assert blocks["dyt"][0].startswith("**On the scale ladder:** not run")
    assert not (tmp_path / "none.sqlite").exists()


def test_a_section_holds_its_ladder_lines_and_the_header_its_cache_counts():
    part = Reproduction("dyt", {}, [Check("x", "y", "z", True)], source="s")
    lines = reproductions_text.section(
        part, REPRODUCTIONS["dyt"], [], 1.0, False, "small", ["LADDER-TABLE", ""]
    )
    assert "LADDER-TABLE" in lines
    line = reproductions_text.runs_line({"folder": "c", "trained": 3, "loaded": 40})
    assert "3 trained in this sitting, 40 loaded from the run cache `c`" in line
    assert "no run cache" in reproductions_text.runs_line(None)


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["depth", "--plan"], "--plan applies to 'all' and 'ladder' only"),
        (["depth", "--ladder-db", "x.sqlite"], "--ladder-db applies to 'all' only"),
        (["ladder", "--cache", "c"], "--cache applies to the reproductions and 'all'"),
        (["all", "--plan", "--json", "-"], "--plan prints a plan"),
        (["all", "--cache", "FILE"], "--cache"),
        (["all", "--ladder-db", "FILE", "--doc", "DOC"], "--ladder-db"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(tmp_path, capsys, argv, needle, no_training):
    (tmp_path / "file").write_text("not a folder, not a store")
    paths = {"FILE": str(tmp_path / "file"), "DOC": str(tmp_path / "r.md")}
    code = main(["reproduce", *[paths.get(a, a) for a in argv]])
    out, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert needle in err


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["seeds", "--out", ""], "--out: an empty path"),  # was the default runs/reproduce
        (["seeds", "--cache", ""], "--cache: an empty path"),
        (["seeds", "--claims", ""], "--claims applies to 'ladder' only"),
        (["all", "--doc", ""], "--doc: an empty path"),  # was the default page, rewritten
        (["all", "--render", "--doc", ""], "--doc: an empty path"),
        (["all", "--ladder-db", ""], "--ladder-db: an empty path"),
        (["all", "--parts", " "], "--parts: an empty path"),
        (["doctor", "--db", ""], "--db: an empty path"),
        (["doctor", "--scale-db", ""], "--scale-db: an empty path"),
        (["ladder", "--claims", ""], "--claims='' is not allowed: one or more of"),  # was every claim
        (["ladder", "--claims", ","], "--claims=',' is not allowed"),
    ],
)
def test_an_empty_value_is_refused_not_read_as_the_default(tmp_path, monkeypatch, capsys, argv, needle):
    """'' names nothing: it is refused before any work, never taken as the flag left out."""
    from depthlab_lab.cli import reproduce

    def work(*args, **kwargs):
        raise AssertionError("the command started its work")

    for name in ("run_all", "render_all", "print_all_plan", "run_claim", "write_ladder", "write_doctor_doc"):
        monkeypatch.setattr(reproduce, name, work)
    monkeypatch.chdir(tmp_path)
    code = main(["reproduce", *argv])
    out, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and needle in err, err
    assert list(tmp_path.iterdir()) == []


def test_a_cached_file_holds_what_it_was_saved_with(tmp_path):
    mcfg, tcfg = lm_runs.configs({"n_layers": 2}, {"steps": 2})
    _store(str(tmp_path), mcfg, tcfg)
    got = run_cache.load(run_cache.path_of(str(tmp_path), run_cache.run_key(mcfg, tcfg)), mcfg)
    assert (
        got.loaded
        and got.commit == "c"
        and got.result.model is None
        and math.isclose(got.result.val_loss, 2.1)
    )


def test_a_killed_reproduce_all_resumes_where_it_stopped(tmp_path, monkeypatch):
    """The first sitting is killed after one of two runs; the second loads that one and trains the
    other, and its document and record say so."""
    calls = {"sittings": 0}

    def claim(quick=False, out_dir=None, scale="small"):
        calls["sittings"] += 1
        first = lm_runs.train_run("a", {"n_layers": 2}, {"steps": 2, "seed": 0}, quiet=True)
        if calls["sittings"] == 1:
            raise KeyboardInterrupt  # the sitting is cut here
        second = lm_runs.train_run("b", {"n_layers": 2}, {"steps": 2, "seed": 1}, quiet=True)
        check = Check("runs", "two", "two", True)
        return Reproduction("fake", {"runs": [first.to_dict(), second.to_dict()]}, [check], source="s")

    monkeypatch.setitem(REPRODUCTIONS, "fake", claim)
    cache, doc = str(tmp_path / "cache"), tmp_path / "reproductions.md"
    run_cache.use(cache)
    try:
        lm_runs.clear_cache()
        with pytest.raises(KeyboardInterrupt):
            all_mod.run_all(quick=True, doc=str(doc), names=["fake"], ladder_db=str(tmp_path / "l.sqlite"))
        lm_runs.clear_cache()  # a new process: nothing in memory
        all_mod.run_all(quick=True, doc=str(doc), names=["fake"], ladder_db=str(tmp_path / "l.sqlite"))
    finally:
        run_cache.use(None)
        lm_runs.clear_cache()
    text = doc.read_text()
    assert f"- training runs: 1 trained in this sitting, 1 loaded from the run cache `{cache}`" in text
    runs = json.loads((tmp_path / "reproductions-record.json").read_text())["claims"]["fake"]["runs"]
    assert [r["loaded"] for r in runs] == [True, False]
    assert all(r["commit"] == run_cache.current_commit() for r in runs)


def test_a_claim_run_twice_loads_its_runs_from_the_default_cache_under_out(tmp_path, capsys):
    out = tmp_path / "out"
    for sitting in ("trained", "loaded"):
        lm_runs.clear_cache()  # each command as its own process would start
        assert (
            main(
                [
                    "reproduce",
                    "no-norm",
                    "--quick",
                    "--out",
                    str(out),
                    "--json",
                    str(tmp_path / f"{sitting}.json"),
                ]
            )
            == 0
        )
        err = capsys.readouterr().err
        assert ("(loaded from the run cache)" in err) == (sitting == "loaded"), err
        assert run_cache.folder() is None  # the command's cache ends with it
    assert len(list((out / "cache").glob("*.pt"))) == 2
    first, second = (json.loads((tmp_path / f"{s}.json").read_text()) for s in ("trained", "loaded"))
    assert [r["loaded"] for r in second["runs"]] == [True, True]
    for r in first["runs"] + second["runs"]:
        r.pop("loaded")
    assert first == second
    lm_runs.clear_cache()

"""The scale ladder's run record (depthlab_lab.reproduce.ladder_record; `depthlab reproduce ladder --restore`):
written beside the page, and a store restored from it gives the ladder the same effects, intervals,
results, trends and registration counts as the store it was written from; a stored run is never
replaced, start times survive, and a record the ladder no longer produces is refused before the store
is touched. The original store is built without training: every quick rung's runs finished through
Store.finish with synthetic losses, logged steps and telemetry."""

from __future__ import annotations

import json
import math
import random

import pytest

from depthlab.cli import main
from depthlab.report import load
from depthlab.study import Store
from depthlab.study.schema import LAYER_COLUMNS
from depthlab_lab.docgen.ladder_doc import stored_runs, write_ladder
from depthlab_lab.reproduce.ladder import COMMITS
from depthlab_lab.reproduce.ladder_effects import ladder_effects
from depthlab_lab.reproduce.ladder_record import record_path, restore_ladder
from depthlab_lab.reproduce.ladder_run import commit_time, rungs
from depthlab_lab.restore import HOST, restore

pytestmark = pytest.mark.usefixtures("one_thread")

# every effect kind: slope (telemetry), sensitivity growth (step-1 loss), train gap, nats, gap
NAMES = ["collapse", "lr-sensitivity", "batchnorm", "depth", "warmup"]
OUTCOMES = ("trained", "trained", "trained", "undertrained", "stalled", "diverged")


def _payload(spec) -> dict:
    """A finished run's synthetic payload, fixed by its hash: a result, four logged steps and telemetry
    for every stream at each."""
    rng = random.Random(spec.hash)
    val = rng.uniform(2.0, 6.5)  # some above ln 256 (5.55): the revised rows
    steps = (1, 4, 8, 12)
    metrics = [
        {
            "step": s,
            "loss": rng.uniform(2.0, 6.0),
            "lr": 1e-3,
            "grad_norm": rng.random(),
            "layers": [
                {"index": i, **{k: rng.uniform(0.01, 2.0) for k in LAYER_COLUMNS}}
                for i in range(spec.model.n_layers + 1)
            ],
        }
        for s in steps
    ]
    result = {
        "outcome": rng.choice(OUTCOMES),
        "val_loss": val,
        "final_train_loss": val - rng.uniform(-0.2, 0.4),
        "unigram_loss": rng.uniform(3.0, 3.3),
        "escape_step": rng.choice((None, 4, 8)),
    }
    return {"result": result, "metrics": metrics, "host": "test", "seconds": rng.uniform(1, 100)}


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    """(store, its rungs): every quick rung of NAMES, each run finished but one a warmup rung (queued),
    a rung's first run started before its claim's registration commit."""
    db = str(tmp_path_factory.mktemp("ladder") / "ladder.sqlite")
    todo = rungs(NAMES, quick=True)
    registered = commit_time(COMMITS["depth"]) or 1.8e9
    with Store(db) as store:
        for r in todo:
            specs = r.study.expand()
            sid = store.add_study(r.study.name, r.study.to_dict(), r.study.config_hash(specs), specs)
            for k, (spec, run) in enumerate(zip(specs, store.runs(sid))):
                if (k == 1 and r.claim == "warmup") or run["status"] == "done":
                    continue  # the second run of each warmup rung left queued
                store.finish(run["id"], _payload(spec))
                start = registered + (-3600 if k == 0 else 600 + k)
                with store.transaction() as c:
                    c.execute(
                        "UPDATE runs SET started_at = ?, finished_at = ? WHERE id = ?",
                        (start, start + 60, run["id"]),
                    )
    return db, todo


@pytest.fixture(scope="module")
def recorded(original, tmp_path_factory):
    """(page, record) written from the original store."""
    db, _ = original
    doc = tmp_path_factory.mktemp("docs") / "reproductions-ladder.md"
    write_ladder(db, str(doc), NAMES, quick=True, run=False)
    return doc, record_path(str(doc))


def _same(a, b) -> bool:
    return a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b))


def _assert_equal_effects(x: dict, y: dict) -> None:
    assert list(x) == list(y)
    for claim in x:
        for a, b in zip(x[claim], y[claim], strict=True):
            assert a["effect"] == b["effect"] and a["trend"] == b["trend"], claim
            assert a["capped_trend"] == b["capped_trend"], claim
            for key in ("measured", "capped"):
                for m, n in zip(a[key], b[key], strict=True):
                    assert m.width == n.width and m.result == n.result and m.interval == n.interval, claim
                    assert all(_same(u, v) for u, v in zip(m.values, n.values, strict=True)), claim


def test_a_store_restored_from_the_record_gives_the_same_effects_and_page(original, recorded, tmp_path):
    db, todo = original
    doc, record = recorded
    again = str(tmp_path / "restored.sqlite")
    done = restore_ladder(record, again, NAMES, quick=True)
    assert set(done) == {r.study.name for r in todo}
    first, restored = ladder_effects(db, todo), ladder_effects(again, todo)
    measured = [m for rows in first.values() for row in rows for m in row["measured"]]
    assert sum(m.interval is not None for m in measured) >= 4  # the comparison compares numbers
    assert any(row["effect"].kind == "slope" and row["measured"][0].interval for row in first["collapse"])
    assert first["lr-sensitivity"][0]["measured"][0].interval is not None
    _assert_equal_effects(first, restored)
    assert stored_runs(again, todo) == stored_runs(db, todo) and stored_runs(db, todo)[1] > 0
    page = tmp_path / "reproductions-ladder.md"
    write_ladder(again, str(page), NAMES, quick=True, run=False)
    assert page.read_text().replace(str(tmp_path), "") == doc.read_text().replace(str(doc.parent), "")
    assert f"`depthlab reproduce ladder --restore {record}` writes those runs back" in doc.read_text()


def test_restored_runs_read_back_as_stored_with_their_times_and_kept_telemetry(original, recorded, tmp_path):
    db, todo = original
    again = str(tmp_path / "restored.sqlite")
    restore_ladder(recorded[1], again, NAMES, quick=True)
    for r in (x for x in todo if x.claim in ("collapse", "batchnorm")):
        before = {x["config_hash"]: x for x in load(db, r.study.name).runs}
        for run in load(again, r.study.name).runs:
            was = before[run["config_hash"]]
            assert run["status"] == was["status"], run["config_hash"]
            if run["status"] != "done":
                continue
            for k in ("outcome", "val_loss", "final_train_loss", "unigram_loss", "started_at", "finished_at"):
                assert run[k] == was[k], k
            assert run["host"] == HOST and run["probe"] is None  # the ladder takes no probe
            step1 = [dict(m, run_id=None) for m in was["metrics"] if m["step"] == 1]
            assert [dict(m, run_id=None) for m in run["metrics"]] == step1
            if r.claim == "collapse":  # the last step's update ratio per stream, the rest not kept
                last = max(x["step"] for x in was["layers"])
                want = [
                    (x["step"], x["layer"], x["update_ratio"]) for x in was["layers"] if x["step"] == last
                ]
                assert [(x["step"], x["layer"], x["update_ratio"]) for x in run["layers"]] == want
                assert all(x["grad_norm"] is None for x in run["layers"])
            else:
                assert run["layers"] == []


def test_the_record_is_compact_and_keeps_what_a_store_not_restored_first_lacks(original, recorded, tmp_path):
    db, _ = original
    record = json.loads(open(recorded[1]).read())["studies"]
    rows = [row for rs in record.values() for row in rs]
    assert len(open(recorded[1]).read()) / len(rows) < 1000
    assert all("layers" not in row for name, rs in record.items() if "collapse" not in name for row in rs)
    # a page written from a store holding one rung only keeps the other rungs' recorded runs
    doc = tmp_path / "reproductions-ladder.md"
    record_path_ = record_path(str(doc))
    open(record_path_, "w").write(open(recorded[1]).read())
    partial = str(tmp_path / "partial.sqlite")
    restore_ladder(record_path_, partial, ["batchnorm"], quick=True)
    write_ladder(partial, str(doc), ["batchnorm"], quick=True, run=False)
    assert json.loads(open(record_path_).read())["studies"] == record


def test_a_stored_run_is_never_replaced(recorded, tmp_path):
    record = json.loads(open(recorded[1]).read())
    again = str(tmp_path / "restored.sqlite")
    name = "ladder-quick-batchnorm-d16"
    first = restore_ladder(recorded[1], again, ["batchnorm"], quick=True)
    changed = tmp_path / "changed.json"
    rows = [dict(row, val_loss=9.0, outcome="diverged") for row in record["studies"][name]]
    changed.write_text(json.dumps({"studies": {name: rows}}))
    assert restore_ladder(str(changed), again, ["batchnorm"], quick=True) == {name: (0, first[name][0])}
    kept = {r["config_hash"]: r["val_loss"] for r in load(again, name).runs}
    assert all(
        kept[row["config_hash"]] == orig["val_loss"] for row, orig in zip(rows, record["studies"][name])
    )


def test_restore_takes_a_study_built_in_code_without_probing(original, recorded, tmp_path):
    _, todo = original
    study = todo[0].study
    again = str(tmp_path / "s.sqlite")
    n = len(json.loads(open(recorded[1]).read())["studies"][study.name])
    assert restore(recorded[1], again, [study], probe=False) == {study.name: (n, 0)}
    with Store(again, create=False) as store:
        assert store.conn.execute("SELECT COUNT(*) FROM probes").fetchone()[0] == 0


def _bad(tmp_path, recorded, what: str) -> str:
    path = tmp_path / "bad.json"
    record = json.loads(open(recorded[1]).read())
    name = "ladder-quick-batchnorm-d16"
    if what == "text":
        path.write_text("not json")
    elif what == "list":
        path.write_text("[1, 2]")
    elif what == "hash":
        record["studies"][name][0]["config_hash"] = "0000000000000000"
        path.write_text(json.dumps(record))
    elif what == "study":
        record["studies"]["ladder-quick-nope-d16"] = record["studies"][name]
        path.write_text(json.dumps(record))
    elif what == "layers":
        record["studies"][name][0]["layers"] = [{"step": "last", "layer": 0}]
        path.write_text(json.dumps(record))
    elif what in ("huge step", "string loss", "twice", "swapped"):
        rows = record["studies"][name]
        if what == "huge step":  # on the last row of the last study: nothing before it may be written
            last = list(record["studies"])[-1]
            record["studies"][last][-1]["layers"] = [{"step": 2**70, "layer": 0, "update_ratio": 0.1}]
        elif what == "string loss":
            rows[-1]["val_loss"] = "abc"
        elif what == "twice":
            rows.append(dict(rows[0]))
        else:  # two rows of different settings swap their hashes
            other = next(r for r in rows if r["setting"] != rows[0]["setting"])
            rows[0]["config_hash"], other["config_hash"] = other["config_hash"], rows[0]["config_hash"]
        path.write_text(json.dumps(record))
    elif what == "doctor":
        return "docs/doctor-runs.json"
    else:
        return str(tmp_path / "none.json")
    return str(path)


@pytest.mark.parametrize(
    "what, needle",
    [
        ("missing", "no such run record"),
        ("text", "not JSON"),
        ("list", "not a run record"),
        ("hash", "not in the study ladder-quick-batchnorm-d16 as it stands"),
        ("study", "is none of the quick ladder's studies"),
        ("layers", "whole-number step"),
        ("huge step", "the step 1180591620717411303424, beyond a stored step"),
        ("string loss", "val_loss is 'abc', not a number"),
        ("twice", "is recorded 2 times"),
        ("swapped", "but its config_hash names a run of another setting"),
        ("doctor", "holds none of the quick ladder's studies"),
    ],
)
def test_the_cli_refuses_a_bad_record_in_one_line_and_writes_nothing(
    tmp_path, recorded, capsys, what, needle
):
    db = tmp_path / "l.sqlite"
    argv = [
        "reproduce",
        "ladder",
        "--quick",
        "--plan",
        "--db",
        str(db),
        "--restore",
        _bad(tmp_path, recorded, what),
    ]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and needle in err and "Traceback" not in err, err
    assert out == "" and not db.exists()


def test_the_cli_restores_one_line_a_study_before_the_plan(tmp_path, recorded, capsys):
    db = tmp_path / "l.sqlite"
    argv = ["reproduce", "ladder", "--quick", "--plan", "--claims", "batchnorm", "--db", str(db)]
    assert main([*argv, "--restore", recorded[1]]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"ladder-quick-batchnorm-d16: 4 runs restored from {recorded[1]}, 0 already stored"
    assert out[1].startswith("ladder-quick-batchnorm-d32: 4 runs restored")
    assert "ladder batchnorm: 8 runs (8 already in the store)" in out[2]


def test_a_bad_row_of_a_rung_not_restored_is_refused_too(tmp_path, recorded, capsys):
    """The whole record is checked, not only the rungs --claims names."""
    record = json.loads(open(recorded[1]).read())
    name = next(n for n in record["studies"] if "collapse" in n)
    record["studies"][name][0]["val_loss"] = True
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(record))
    db = tmp_path / "l.sqlite"
    argv = ["reproduce", "ladder", "--quick", "--plan", "--claims", "batchnorm", "--db", str(db)]
    assert main([*argv, "--restore", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"of {name}: val_loss is true, not a number" in err, err
    assert not db.exists()

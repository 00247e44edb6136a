"""The escape step: the first logged step from which the loss stays below the unigram band, computed,
stored (a version-5 column, filled for the runs of older stores), shown and printed."""

from __future__ import annotations

import math
import shutil
import sqlite3
from pathlib import Path

from test_study_fakes import fake_study, fake_task

from depthlab.study import schema
from depthlab.study.store import Store
from depthlab.train.run_result import RunResult
from depthlab.watch.outcome import STALL_MARGIN, Monitor, escape_step

FIXTURE = Path(__file__).parent / "fixtures" / "legacy_store"
U = 3.0
BELOW = (1 - STALL_MARGIN) * U - 0.01


def test_the_escape_is_the_first_step_below_the_band_for_good():
    plateau = [(10, 5.5), (20, U), (30, U * 1.01), (40, BELOW), (50, U), (60, BELOW), (70, 2.5), (80, 2.4)]
    assert escape_step(plateau, U) == 60  # the dip at 40 came back up to the plateau
    assert escape_step(plateau[:5], U) is None  # it ends on the plateau
    assert escape_step([(10, BELOW), (20, math.nan)], U) is None
    assert escape_step([(10, BELOW)], None) is None
    assert escape_step([(0, 2.0), (10, 1.5)], U) == 0


def test_the_monitor_and_the_result_line_give_it():
    m = Monitor(steps=30, unigram_loss=U)
    for step, loss in ((10, U), (20, BELOW), (30, 2.0)):
        m.update(step, loss, 1.0)
        m.log(step, loss)
    assert m.escape() == 20
    r = RunResult("trained", None, None, 2.0, 2.1, None, U, None, 100.0, escape_step=m.escape())
    assert r.summary().endswith("training loss below the unigram band from step 20")
    assert RunResult.from_dict({"outcome": "stalled", "unigram_loss": U}).escape_step is None
    assert (
        "never stayed below the unigram band"
        in RunResult.from_dict({"outcome": "stalled", "unigram_loss": U}).summary()
    )


def test_a_legacy_store_migrates_and_gets_the_escape_steps_of_its_runs(tmp_path):
    shutil.copytree(FIXTURE, tmp_path / "legacy")
    path = str(tmp_path / "legacy" / "store.sqlite")
    old = sqlite3.connect(path)
    before = old.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    # the fixture's tiny runs never left the plateau: give one a unigram level above its losses, so
    # that the migration has an escape to find (on the copy only)
    target = old.execute("SELECT MIN(run_id) FROM metrics").fetchone()[0]
    old.execute("UPDATE runs SET unigram_loss = 100.0 WHERE id = ?", (target,))
    old.commit()
    old.close()
    with Store(path) as s:
        assert s.version == schema.SCHEMA_VERSION == 5
        rows = s.conn.execute("SELECT id, unigram_loss, escape_step FROM runs").fetchall()
        assert len(rows) == before
        for rid, unigram, step in rows:
            logged = [(m["step"], m["loss"]) for m in s.metrics(rid)]
            assert step == escape_step(logged, unigram)
        assert dict((r, st) for r, _, st in rows)[target] == s.metrics(target)[0]["step"]
        sid = s.studies()[0]["id"]
        assert all("escape_step" in r for r in s.runs(sid))


def test_a_finished_run_stores_its_escape_step(tmp_path):
    study = fake_study(depths=(2,))
    with Store(str(tmp_path / "s.sqlite")) as s:
        specs = study.expand()
        sid = s.add_study(study.name, study.to_dict(), study.config_hash(), specs)
        run = s.runs(sid)[0]
        payload = fake_task(specs[0])
        payload["result"] = dict(payload["result"], escape_step=40)
        s.finish(run["id"], payload)
        assert s.runs(sid)[0]["escape_step"] == 40

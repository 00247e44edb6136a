"""TensorBoard events for every study run: written by the driver beside the store, never failing a run."""

from __future__ import annotations

import glob
import io
import os
import time

import pytest
from test_study_fakes import fake_records, fake_study, fake_task

from depthlab.study import Store, run_study
from depthlab.study.tensorboard import StudyEvents, run_events_dir, safe_name, study_events_root


def _scalars(folder: str) -> dict[str, list[tuple[int, float]]]:
    """What TensorBoard shows for a run folder: tag -> [(step, value), ...] (purged events dropped)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(folder)
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_every_finished_run_gets_its_curves_beside_the_store(tmp_path):
    db = str(tmp_path / "runs" / "s.sqlite")
    study = fake_study(depths=(2,), warmups=(0, 5))
    res = run_study(study, db=db, workers=1, task=fake_task, progress=False, out=io.StringIO())
    root = os.path.join(str(tmp_path), "runs", "tensorboard", "fake")
    assert res.events_dir == root == study_events_root(db, "fake")
    specs = study.expand()
    assert sorted(os.listdir(root)) == sorted(os.path.basename(run_events_dir(db, "fake", s)) for s in specs)
    for spec in specs:
        folder = run_events_dir(db, "fake", spec)
        assert os.path.basename(folder) == f"{safe_name(spec.label)}-{spec.hash[:8]}"
        tags = _scalars(folder)
        records = fake_records(spec)
        assert [step for step, _ in tags["train/loss"]] == [r["step"] for r in records]
        assert [v for _, v in tags["train/loss"]] == pytest.approx([r["loss"] for r in records], rel=1e-6)
        assert len(tags["stream_grad/layer_00"]) == len(records) and "stream_grad/layer_02" in tags
        bpb = fake_task(spec)["result"]["val_bpb"]
        assert tags["val/bpb"] == [(records[-1]["step"], pytest.approx(bpb, rel=1e-6))]
    again = run_study(study, db=db, workers=1, task=fake_task, progress=False, out=io.StringIO())
    assert again.ran == 0 and again.events_dir is None  # done runs are not written again


def test_labels_become_safe_folder_names():
    assert safe_name("wrap=pre residual=ffn+cross n_layers=2") == "wrap=pre_residual=ffn+cross_n_layers=2"
    assert safe_name("a/b\\c:d*e") == "a_b_c_d_e" and safe_name("..") == "_" and safe_name("") == "_"
    assert len(safe_name("x" * 500)) == 80
    assert study_events_root("s.sqlite", "../up") == os.path.join(".", "tensorboard", ".._up")


def test_a_run_written_again_shows_each_step_once(tmp_path):
    db = str(tmp_path / "s.sqlite")
    spec = fake_study(depths=(2,), warmups=(0,)).expand()[0]
    payload = fake_task(spec)
    events = StudyEvents(db, "fake")
    folder = events.write(spec, payload)
    payload["metrics"] = [{**r, "loss": r["loss"] + 1.0} for r in payload["metrics"]]
    second = int(time.time())  # event files are named by the second: the rewrite's must sort after
    while int(time.time()) == second:
        time.sleep(0.05)
    assert events.write(spec, payload) == folder and events.written == 2
    assert len(glob.glob(os.path.join(folder, "events.out.tfevents.*"))) == 2  # nothing deleted
    losses = _scalars(folder)["train/loss"]
    records = payload["metrics"]
    assert [s for s, _ in losses] == [r["step"] for r in records]  # the first file's steps are purged
    assert [v for _, v in losses] == pytest.approx([r["loss"] for r in records], rel=1e-6)


def test_a_failure_to_write_events_warns_once_and_fails_no_run(tmp_path, monkeypatch, capsys):
    import depthlab.study.tensorboard

    def broken(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(depthlab.study.tensorboard, "write_records", broken)
    db, study = str(tmp_path / "s.sqlite"), fake_study(depths=(2,))
    res = run_study(study, db=db, workers=1, task=fake_task, progress=False, out=io.StringIO())
    assert (res.ran, res.failed, res.events_dir) == (4, 0, None)
    err = capsys.readouterr().err
    assert err.count("warning: cannot write TensorBoard events") == 1 and "No space left" in err
    with Store(db) as s:
        assert {r["status"] for r in s.runs(res.study_id)} == {"done"}


def test_a_crashed_run_writes_no_events(tmp_path):
    events = StudyEvents(str(tmp_path / "s.sqlite"), "fake")
    spec = fake_study(depths=(2,), warmups=(0,)).expand()[0]
    assert events.write(spec, {"error": "Traceback ...\nRuntimeError: boom"}) is None
    assert not os.path.exists(events.root)

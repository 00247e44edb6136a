"""The watcher's label at close: the README's own example ends with an outcome printed; a loop that gives
no loss is named once as a blind spot and gets "no outcome" with the reason, printed and sent to
trackers as text (never None); the watch options and the framework callbacks' arguments are checked
whole when they are given, before any hook, folder or tracker."""

from __future__ import annotations

import contextlib
import inspect
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from watched import TINY, watched_run

import depthlab
from depthlab import ModelConfig, build_model
from depthlab.watch.trackers import Tracker, outcome_fields

pytestmark = pytest.mark.usefixtures("one_thread")
README = Path(__file__).resolve().parents[1] / "README.md"
LABEL = r"depthlab\.watch: outcome: (trained|undertrained|stalled|diverged)\b"


def test_the_readme_example_ends_with_an_outcome_printed_at_close(tmp_path):
    code = re.search(r"```python\n(.*?)```", README.read_text(), re.S).group(1)
    assert "depthlab.watch(" in code
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert re.match(LABEL, last), proc.stderr[-2000:]
    summary = json.loads((tmp_path / "runs" / "mine" / "watch.json").read_text())
    assert summary["outcome"]["outcome"] in last and "loss" not in {
        g["instrument"] for g in summary["blind_spots"]
    }


class Recorder(Tracker):
    """A tracker that keeps what it is sent."""

    def __init__(self):
        self.outcomes = []

    def log(self, step, values):
        pass

    def warn(self, warning):
        pass

    def summary(self, outcome):
        self.outcomes.append(outcome_fields(outcome))


def _no_loss_loop(echo, tracker, steps=6):
    """A loop with an optimizer whose model returns logits and that never calls watcher.step(loss)."""
    torch.manual_seed(0)
    model = build_model(ModelConfig(**TINY))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with depthlab.watch(model, opt, every=2, echo=echo, trackers=[tracker]) as w:
        for t in range(steps):
            x = torch.randint(0, 256, (4, 16), generator=torch.Generator().manual_seed(t))
            F.cross_entropy(model(x)[:, :-1].flatten(0, 1), x[:, 1:].flatten()).backward()
            opt.step()
            opt.zero_grad()
    return w


def test_a_loop_without_a_loss_is_one_blind_spot_and_no_outcome_with_its_reason():
    echo, tracker = io.StringIO(), Recorder()
    w = _no_loss_loop(echo, tracker)
    lines = echo.getvalue().splitlines()
    gaps = [line for line in lines if "blind spot: no loss seen" in line]
    assert len(gaps) == 1 and "watcher.step(loss)" in gaps[0]
    assert [g["instrument"] for g in w.gaps] == ["loss"]
    assert (
        lines[-1].startswith("depthlab.watch: no outcome: no loss was seen")
        and "watcher.step(loss)" in lines[-1]
    )
    (fields,) = tracker.outcomes
    assert (
        fields["depthlab/outcome"] == "no outcome" and "no loss was seen" in fields["depthlab/outcome_reason"]
    )
    assert "None" not in fields.values() and None not in fields.values()


def test_a_labelled_run_sends_its_label_and_no_empty_fields():
    tracker = Recorder()
    w = watched_run(1e-3, 4, every=2, trackers=[tracker])
    (fields,) = tracker.outcomes
    assert fields["depthlab/outcome"] == w.outcome()["outcome"] and "None" not in fields.values()
    assert outcome_fields({"outcome": "trained", "reason": None, "step": None}) == {
        "depthlab/outcome": "trained"
    }


def test_mlflow_gets_text_for_a_run_without_a_loss(tmp_path, monkeypatch):
    mlflow = pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    mlflow.set_tracking_uri(f"file:{tmp_path / 'mlruns'}")
    try:
        with mlflow.start_run() as run:
            _no_loss_loop(None, "mlflow")
        tags = mlflow.MlflowClient().get_run(run.info.run_id).data.tags
        ours = {k: v for k, v in tags.items() if k.startswith("depthlab/outcome")}
        assert (
            ours["depthlab/outcome"] == "no outcome" and "no loss was seen" in ours["depthlab/outcome_reason"]
        )
        assert "None" not in ours.values()
    finally:
        mlflow.set_tracking_uri(None)


@pytest.mark.parametrize(
    "options",
    [
        dict(every=True),
        dict(every=0),
        dict(unigram_loss=float("nan")),
        dict(unigram_loss="3.1"),
        dict(steps=-3),
        dict(steps=2.5),
        dict(out=""),
        dict(out=5),
        dict(echo=5),
        dict(when=5),
        dict(thresholds={}),
        dict(attention="no"),
        dict(blocks=5),
        dict(detectors=["nope"]),
    ],
)
def test_bad_watch_options_are_one_line_value_errors_before_anything(tmp_path, monkeypatch, options):
    monkeypatch.chdir(tmp_path)
    model = build_model(ModelConfig(**TINY))
    with pytest.raises(ValueError) as e:
        depthlab.watch(model, None, **options)
    assert "\n" not in str(e.value) and list(tmp_path.iterdir()) == []
    assert not model._forward_pre_hooks  # nothing attached


def test_a_detector_named_alone_is_one_detector():
    w = watched_run(1e-3, 2, detectors="loss-above-initial")
    assert [type(d).__name__ for d in w.detectors.detectors] and len(w.detectors.detectors) == 1


def test_a_tracker_that_cannot_start_is_one_line_and_leaves_no_out_folder(tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb")

    def no_login(**kwargs):
        raise wandb.errors.UsageError("No API key configured. Use `wandb login` to log in.")

    monkeypatch.setattr(wandb, "init", no_login)
    monkeypatch.setattr(wandb, "run", None)
    out = tmp_path / "w"
    for trackers in ("wandb", ["wandb"]):
        with pytest.raises(depthlab.InputError, match="wandb could not start a run.*wandb login"):
            depthlab.watch(build_model(ModelConfig(**TINY)), None, out=str(out), trackers=trackers, echo=None)
        assert not out.exists()


@pytest.mark.parametrize("framework", ["hf_trainer", "lightning"])
@pytest.mark.parametrize(
    "kwargs", [dict(every=0), dict(every=True), dict(out=""), dict(evry=3), dict(trackers=["x"])]
)
def test_callbacks_check_their_arguments_when_made(framework, kwargs):
    module = pytest.importorskip(f"depthlab.integrations.{framework}")
    with pytest.raises(ValueError):
        module.DepthlabCallback(**kwargs)


def test_the_lightning_callback_checks_its_model_when_made():
    module = pytest.importorskip("depthlab.integrations.lightning")
    with pytest.raises(depthlab.ConfigError, match=r"^model=3 is not allowed: the torch.nn.Module to watch"):
        module.DepthlabCallback(model=3)


def test_the_default_echo_is_stderr_as_it_is_when_a_line_is_printed():
    """The lines go to sys.stderr as it is when they are printed, not as it was when depthlab was
    imported: a stream redirected afterwards (contextlib.redirect_stderr, pytest's capsys) receives them."""
    default = inspect.signature(depthlab.watch).parameters["echo"].default
    buf = io.StringIO()
    with contextlib.redirect_stderr(buf):
        watched_run(steps=3, every=1, echo=default)
    assert re.search(LABEL, buf.getvalue()), buf.getvalue()
    assert repr(default) == "sys.stderr"

"""Experiment trackers: a watched run's numbers in wandb, MLflow or TensorBoard, under stable names.

    depthlab.watch(model, opt, trackers=["wandb", "mlflow"])          # their active runs, else new ones
    depthlab.watch(model, opt, trackers=[wandb.init(...), writer])    # objects you made

At each logged step every tracker gets the record's numbers as scalars at that step:
``depthlab/loss``, ``depthlab/lr``, ``depthlab/grad_norm``, ``depthlab/logit_lse``, ``depthlab/warnings``
(the count so far) and, per stream i and key of :data:`depthlab.watch.keys.LAYER_KEYS`,
``depthlab/layer_{i:02d}/{key}`` (``layer_00`` is the stream entering layer 1; its ``grad_norm`` is the
gradient reaching the stream). Each warning is text (wandb: the run summary's ``depthlab/warnings``;
MLflow: a tag ``depthlab/warning/{code}``; TensorBoard: text under ``depthlab/warnings``); the outcome
goes in the summary (wandb summary, MLflow tags, TensorBoard text ``depthlab/outcome``). A tracker the
watcher started (a name with no active run) is finished at close; one it was handed is left open.

wandb and MLflow are imported only when named (``pip install 'depthlab[trackers]'``). With no tracker
the watcher does nothing more than before.
"""

from __future__ import annotations

import importlib.util
import math
import time

from depthlab.errors import ConfigError, InputError
from depthlab.watch.keys import LAYER_KEYS
from depthlab.watch.outcome import outcome_line

TRACKER_NAMES = ("wandb", "mlflow", "tensorboard")
HEADLINE = ("loss", "lr", "grad_norm", "logit_lse", "val_loss", "tokens_per_s")


def scalars(record: dict, n_warnings: int) -> dict[str, float]:
    """The record's finite numbers under their tracker names (module docstring)."""
    out = {f"depthlab/{k}": record.get(k) for k in HEADLINE}
    out["depthlab/warnings"] = n_warnings
    for row in record.get("layers") or []:
        for key in LAYER_KEYS:
            out[f"depthlab/layer_{row['index']:02d}/{key}"] = row.get(key)
    return {k: float(v) for k, v in out.items() if isinstance(v, (int, float)) and math.isfinite(v)}


class Tracker:
    """What the watcher calls; each subclass writes to one kind of tracker."""

    def log(self, step: int, values: dict[str, float]) -> None:
        raise NotImplementedError

    def warn(self, warning: dict) -> None:
        raise NotImplementedError

    def summary(self, outcome: dict) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Finish what the watcher started (nothing for a handed-in run)."""


class WandbTracker(Tracker):
    """A wandb run; the x axis of ``depthlab/*`` is ``depthlab/step`` (wandb's own step stays the
    loop's, so the Trainer's logging is never out of order)."""

    def __init__(self, run, owned: bool = False):
        self.run, self.owned, self.messages = run, owned, []
        run.define_metric("depthlab/step")
        run.define_metric("depthlab/*", step_metric="depthlab/step")

    def log(self, step, values):
        self.run.log({**values, "depthlab/step": step})

    def warn(self, warning):
        self.messages.append(warning["message"])
        self.run.summary["depthlab/warnings"] = "\n".join(self.messages)

    def summary(self, outcome):
        self.run.summary.update(outcome_fields(outcome))

    def close(self):
        if self.owned:
            self.run.finish()


class MLflowTracker(Tracker):
    """An MLflow run, written through a client (the active run stays the user's business)."""

    def __init__(self, client, run_id: str, owned: bool = False):
        self.client, self.run_id, self.owned = client, run_id, owned

    def log(self, step, values):
        from mlflow.entities import Metric  # imported here: mlflow is an optional extra

        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, step) for k, v in values.items()]
        for i in range(0, len(metrics), 1000):  # MLflow takes at most 1000 metrics a batch
            self.client.log_batch(self.run_id, metrics=metrics[i : i + 1000])

    def warn(self, warning):
        self.client.set_tag(self.run_id, f"depthlab/warning/{warning['code']}", warning["message"][:5000])

    def summary(self, outcome):
        for key, text in outcome_fields(outcome).items():
            self.client.set_tag(self.run_id, key, text)

    def close(self):
        if self.owned:
            self.client.set_terminated(self.run_id)


class TensorBoardTracker(Tracker):
    """A ``SummaryWriter`` (torch's or tensorboardX's)."""

    def __init__(self, writer):
        self.writer = writer

    def log(self, step, values):
        for k, v in values.items():
            self.writer.add_scalar(k, v, step)
        self.writer.flush()

    def warn(self, warning):
        self.writer.add_text("depthlab/warnings", warning["message"], warning["step"])

    def summary(self, outcome):
        self.writer.add_text("depthlab/outcome", outcome_line(outcome))
        self.writer.flush()


class LoggerTracker(Tracker):
    """Any Lightning logger: scalars by ``log_metrics``, text by ``log_hyperparams`` (their one way to
    hold a string)."""

    def __init__(self, logger):
        self.logger = logger

    def log(self, step, values):
        self.logger.log_metrics(values, step=step)

    def warn(self, warning):
        self.logger.log_hyperparams({f"depthlab/warning/{warning['code']}": warning["message"]})

    def summary(self, outcome):
        self.logger.log_hyperparams(outcome_fields(outcome))


def outcome_fields(outcome: dict) -> dict[str, str]:
    """The outcome as a tracker's summary holds it, text a person reads and never "None":
    ``depthlab/outcome`` (the label, or "no outcome"), ``depthlab/outcome_reason`` (why, where there is
    a reason; for a run with no label always) and ``depthlab/outcome_step`` (where there is a step)."""
    out = {"depthlab/outcome": outcome.get("outcome") or "no outcome"}
    if outcome.get("reason"):
        out["depthlab/outcome_reason"] = str(outcome["reason"])
    if outcome.get("step") is not None:
        out["depthlab/outcome_step"] = str(outcome["step"])
    return out


def make_tracker(spec, out: str | None, attach_only: bool = False) -> Tracker | None:
    """The Tracker for a name or an object (module docstring); None for "tensorboard" when the watcher
    already writes TensorBoard events to ``out``, and, with ``attach_only``, for a name with no active
    run. Raises ConfigError (one line) for anything else."""
    if spec == "tensorboard":
        if out is None:
            raise ConfigError(
                "trackers", spec, "TensorBoard events go to out=DIR: give out, or a SummaryWriter"
            )
        return None
    if spec == "wandb":
        import wandb  # imported here: wandb is an optional extra

        if wandb.run is None and attach_only:
            return None
        if wandb.run is not None:
            return WandbTracker(wandb.run, False)
        run = _started("wandb", lambda: wandb.init(dir=out), "run wandb login, or set WANDB_MODE=offline")
        return WandbTracker(run, True)
    if spec == "mlflow":
        import mlflow  # imported here: mlflow is an optional extra

        active = mlflow.active_run()
        if active is None and attach_only:
            return None
        if active is not None:
            return MLflowTracker(mlflow.MlflowClient(), active.info.run_id, False)
        run = _started("mlflow", mlflow.start_run, "set MLFLOW_TRACKING_URI, or start a run yourself")
        return MLflowTracker(mlflow.MlflowClient(), run.info.run_id, True)
    return tracker_of(spec)


def _started(name: str, start, way: str):
    """``start()``'s run; InputError in one line when the tracker cannot start one (no login, no
    server), before the first training step rather than as the library's own exception."""
    try:
        return start()
    except Exception as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise InputError(f"trackers: {name} could not start a run ({first}): {way}") from None


def tracker_of(obj) -> Tracker:
    """The Tracker of an object: a wandb run, an MLflow run (``mlflow.start_run()``'s), a SummaryWriter,
    a Lightning logger (its wandb, MLflow or TensorBoard experiment when it has one), or a Tracker."""
    if isinstance(obj, Tracker):
        return obj
    lib = type(obj).__module__.split(".")[0]
    if lib == "wandb" and hasattr(obj, "define_metric"):
        return WandbTracker(obj)
    if lib == "mlflow" and hasattr(getattr(obj, "info", None), "run_id"):
        import mlflow  # imported here: mlflow is an optional extra

        return MLflowTracker(mlflow.MlflowClient(), obj.info.run_id)
    if hasattr(obj, "add_scalar") and hasattr(obj, "add_text"):
        return TensorBoardTracker(obj)
    if hasattr(obj, "log_metrics") and hasattr(obj, "log_hyperparams"):
        return _lightning(obj)
    raise ConfigError(
        "trackers", type(obj).__name__, "'wandb', 'mlflow', 'tensorboard', a wandb run, an MLflow run, a "
        "SummaryWriter, a Lightning logger or a depthlab.watch.trackers.Tracker"
    )  # fmt: skip


def _lightning(logger) -> Tracker:
    """A Lightning logger's own experiment where depthlab knows it, else the logger's generic API."""
    name = type(logger).__name__
    if name == "MLFlowLogger":
        return MLflowTracker(logger.experiment, logger.run_id)
    if name in ("WandbLogger", "TensorBoardLogger"):
        return tracker_of(logger.experiment)
    return LoggerTracker(logger)


def check_trackers(specs, out: str | None) -> list:
    """The ``trackers=`` option as a list, checked without starting anything (ConfigError, one line,
    for an unknown name, "tensorboard" without ``out``, or an object no Tracker takes)."""
    if specs is None:
        return []
    if isinstance(specs, str) or not isinstance(specs, (list, tuple)):
        specs = [specs]
    for s in specs:
        if isinstance(s, str) and s not in TRACKER_NAMES:
            raise ConfigError("trackers", s, f"one of {', '.join(TRACKER_NAMES)}, or a tracker object")
        if s == "tensorboard" and out is None:
            raise ConfigError("trackers", s, "TensorBoard events go to out=DIR: give out, or a SummaryWriter")
        if s in ("wandb", "mlflow") and importlib.util.find_spec(s) is None:
            raise ConfigError(
                "trackers", s, f"an installed tracker: {s} is not (pip install 'depthlab[trackers]')"
            )
        if not isinstance(s, str) and not _takes(s):
            raise ConfigError(
                "trackers", type(s).__name__, "'wandb', 'mlflow', 'tensorboard', a wandb run, an MLflow "
                "run, a SummaryWriter, a Lightning logger or a depthlab.watch.trackers.Tracker"
            )  # fmt: skip
    return list(specs)


def _takes(obj) -> bool:
    lib = type(obj).__module__.split(".")[0]
    return (
        isinstance(obj, Tracker)
        or (lib == "wandb" and hasattr(obj, "define_metric"))
        or (lib == "mlflow" and hasattr(getattr(obj, "info", None), "run_id"))
        or (hasattr(obj, "add_scalar") and hasattr(obj, "add_text"))
        or (hasattr(obj, "log_metrics") and hasattr(obj, "log_hyperparams"))
    )


def make_trackers(specs, out: str | None, attach_only: bool = False) -> list[Tracker]:
    """The trackers of the ``trackers=`` option (a name, an object, or a list of them)."""
    checked = check_trackers(specs, out)
    return [t for t in (make_tracker(s, out, attach_only) for s in checked) if t is not None]

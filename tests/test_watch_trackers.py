"""Trackers: a watched run's per-layer scalars, warnings and outcome in wandb (offline), MLflow (file
store) and TensorBoard, read back; through the Hugging Face callback to the Trainer's report_to loggers
and through the Lightning callback to the Trainer's loggers."""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from watched import TINY, watched_run

import depthlab
from depthlab import ModelConfig, build_model
from depthlab.watch.trackers import scalars

pytestmark = pytest.mark.usefixtures("one_thread")


def _loop(trackers, steps: int = 4, out=None):
    return watched_run(1e-3, steps, every=2, out=out, trackers=trackers)


def test_scalar_names_are_stable():
    rec = {"step": 3, "loss": 2.0, "lr": None, "layers": [{"index": 0, "stream_rms": 1.0},
                                                          {"index": 3, "grad_norm": 0.5, "attn_entropy": float("nan")}]}  # fmt: skip
    assert scalars(rec, 1) == {"depthlab/loss": 2.0, "depthlab/warnings": 1.0,
                               "depthlab/layer_00/stream_rms": 1.0, "depthlab/layer_03/grad_norm": 0.5}  # fmt: skip


def _wandb_log(data: bytes) -> list | None:
    """The protobuf records of an offline run's .wandb file (a LevelDB-style log of 32 KiB blocks, each
    record with a 7-byte header: crc, length, type 1 full / 2 first / 3 middle / 4 last); None while its
    last record is still being written (wandb's service writes the file after ``finish`` returns)."""
    from google.protobuf.message import DecodeError
    from wandb.proto import wandb_internal_pb2 as pb

    pos, buf, out = 7, b"", []
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if left < 7 or (kind == 0 and length == 0):
            pos += left
            continue
        if pos + 7 + length > len(data):
            return None
        buf, pos = buf + data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind in (1, 4):
            try:
                out.append(pb.Record.FromString(buf))
            except DecodeError:
                return None
            buf = b""
    return out


def _wandb_records(run_dir: Path, wait_s: float = 60.0) -> list:
    """The offline run's records once the file holds the run's summary (polled: on a loaded machine the
    service can finish writing a few seconds after the run ends)."""
    deadline = time.monotonic() + wait_s
    while True:
        (path,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
        out = _wandb_log(path.read_bytes())
        done = out is not None and any(r.WhichOneof("record_type") == "summary" for r in out)
        if done or time.monotonic() > deadline:
            assert out is not None, f"{path} still holds a partly written record after {wait_s:g} s"
            return out
        time.sleep(0.2)


def _items(items) -> dict:
    return {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in items}


def test_wandb_offline_holds_the_per_layer_scalars_and_the_outcome(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    w = _loop(["wandb"])
    records = _wandb_records(tmp_path)
    history = [_items(r.history.item) for r in records if r.WhichOneof("record_type") == "history"]
    rows = [h for h in history if "depthlab/layer_01/grad_norm" in h]
    assert [h["depthlab/step"] for h in rows] == [r["step"] for r in w.records] == [1, 2, 4]
    assert [h["depthlab/layer_01/grad_norm"] for h in rows] == pytest.approx(
        [r["layers"][1]["grad_norm"] for r in w.records]
    )
    summary = {}
    for r in records:
        if r.WhichOneof("record_type") == "summary":
            summary.update(_items(r.summary.update))
    assert summary["depthlab/outcome"] == w.outcome()["outcome"] and summary["depthlab/outcome"]


def test_mlflow_file_store_holds_the_per_layer_scalars_and_the_outcome(tmp_path, monkeypatch):
    mlflow = pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 keeps its file store behind a switch
    mlflow.set_tracking_uri(f"file:{tmp_path / 'mlruns'}")
    try:
        with mlflow.start_run() as run:  # the user's run: the watcher logs to it and leaves it open
            w = _loop(["mlflow"])
            assert mlflow.active_run().info.run_id == run.info.run_id
        client = mlflow.MlflowClient()
        history = client.get_metric_history(run.info.run_id, "depthlab/layer_02/ffn_grad_norm")
        assert [m.step for m in history] == [1, 2, 4]
        assert [m.value for m in history] == pytest.approx(
            [r["layers"][2]["ffn_grad_norm"] for r in w.records]
        )
        tags = client.get_run(run.info.run_id).data.tags
        assert tags["depthlab/outcome"] == w.outcome()["outcome"]
    finally:
        mlflow.set_tracking_uri(None)


def _tb_scalars(folder) -> dict:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}


def test_a_summary_writer_holds_the_scalars_and_trackers_off_write_nothing(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "tb"))
    w = _loop([writer])
    writer.close()
    got = _tb_scalars(tmp_path / "tb")
    assert [s for s, _ in got["depthlab/layer_02/attn_entropy"]] == [1, 2, 4]
    assert got["depthlab/loss"][0][1] == pytest.approx(w.records[0]["loss"])
    assert _loop(None).trackers == []
    with pytest.raises(depthlab.ConfigError, match="trackers"):
        _loop(["neptune"], out=str(tmp_path / "refused"))
    assert not (tmp_path / "refused").exists()  # checked before the out folder is made
    with pytest.raises(depthlab.ConfigError, match="trackers"):
        _loop([object()])
    with pytest.raises(depthlab.ConfigError, match="out=DIR"):
        _loop(["tensorboard"])


def test_hf_callback_forwards_to_the_trainers_report_to_loggers(tmp_path, monkeypatch):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    mlflow = pytest.importorskip("mlflow")
    from depthlab.integrations.hf_trainer import DepthlabCallback

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"file:{tmp_path / 'mlruns'}")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=64, n_positions=32)
    torch.manual_seed(0)
    data = [
        {"input_ids": torch.randint(0, 64, (16,)), "labels": torch.randint(0, 64, (16,))} for _ in range(24)
    ]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "hf"), report_to=["mlflow", "tensorboard"], use_cpu=True, max_steps=4,
        per_device_train_batch_size=4, logging_steps=2, save_strategy="no", disable_tqdm=True,
    )  # fmt: skip
    cb = DepthlabCallback(echo=None)
    transformers.Trainer(
        model=transformers.GPT2LMHeadModel(cfg), args=args, train_dataset=data, callbacks=[cb]
    ).train()
    try:
        mlflow.set_tracking_uri(f"file:{tmp_path / 'mlruns'}")
        (run,) = mlflow.search_runs(search_all_experiments=True, output_format="list")
        history = mlflow.MlflowClient().get_metric_history(
            run.info.run_id, "depthlab/layer_01/attn_grad_norm"
        )
        assert [m.step for m in history] == [r["step"] for r in cb.watcher.records] == [1, 2, 4]
        assert "loss" in run.data.metrics  # the Trainer's own logging went to the same run
        assert run.data.tags["depthlab/outcome"] == cb.watcher.outcome()["outcome"]
    finally:
        mlflow.set_tracking_uri(None)
    (folder,) = [p for p in (tmp_path / "hf" / "runs").iterdir() if p.is_dir()]
    got = _tb_scalars(folder)
    assert "train/loss" in got and [s for s, _ in got["depthlab/layer_02/grad_norm"]] == [1, 2, 4]


def test_lightning_callback_forwards_to_the_trainers_loggers(tmp_path):
    L = pytest.importorskip("lightning.pytorch")
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    from depthlab.integrations.lightning import DepthlabCallback

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.model = build_model(ModelConfig(**TINY))

        def training_step(self, batch, idx):
            return F.cross_entropy(self.model(batch)[:, :-1].flatten(0, 1), batch[:, 1:].flatten())

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=1e-3)

    data = torch.utils.data.DataLoader([torch.randint(0, 256, (16,)) for _ in range(12)], batch_size=2)
    loggers = [CSVLogger(str(tmp_path), name="csv"), TensorBoardLogger(str(tmp_path), name="tb")]
    cb = DepthlabCallback(every=2, echo=None)
    L.Trainer(max_steps=4, callbacks=[cb], logger=loggers, enable_checkpointing=False, enable_progress_bar=False,
              enable_model_summary=False, accelerator="cpu").fit(Module(), data)  # fmt: skip
    csv = (Path(loggers[0].log_dir) / "metrics.csv").read_text().splitlines()
    assert "depthlab/layer_01/attn_entropy" in csv[0].split(",")
    hparams = (Path(loggers[0].log_dir) / "hparams.yaml").read_text()
    assert f"depthlab/outcome: {cb.watcher.outcome()['outcome']}" in hparams
    got = _tb_scalars(loggers[1].log_dir)
    assert [s for s, _ in got["depthlab/layer_02/param_update"]] == [1, 2, 4]

"""The training loop: the record and result shapes, telemetry against a hand computation, determinism,
divergence and stall detection, synthetic tasks, bf16 autocast."""

from __future__ import annotations

import math

import pytest
import torch

from depthlab import ModelConfig, TrainConfig, build_model
from depthlab.train import RunResult, train
from depthlab.train import loop as loop_module
from depthlab.train.checkpoint import checkpoint_paths, load
from depthlab.train.run_result import RESULT_KEYS
from depthlab.train.schedules import make_optimizer
from depthlab.train.tasks import make_task

TINY = dict(n_layers=2, d_model=32, n_heads=4, max_len=32)
SHORT = dict(steps=12, batch_size=8, seq_len=16, log_every=5, eval_every=10, eval_batches=2)
LAYER_KEYS = [
    "index",
    "grad_norm",
    "stream_rms",
    "update_ratio",
    "cos_prev",
    "angular_distance",
    "attn_grad_norm",
    "cross_grad_norm",
    "ffn_grad_norm",
    "param_update",
    "attn_entropy",
    "attn_logit_max",
]
RECORD_KEYS = [
    "step",
    "loss",
    "lr",
    "grad_norm",
    "logit_lse",
    "val_loss",
    "tokens_per_s",
    "layers",
    "warnings",
]

pytestmark = pytest.mark.usefixtures("one_thread")


def _drop_speed(metrics):
    return [{k: v for k, v in m.items() if k != "tokens_per_s"} for m in metrics]


def test_record_and_result_shapes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    seen = []
    r = train(ModelConfig(**TINY), TrainConfig(**SHORT), on_log=seen.append)
    assert isinstance(r, RunResult) and list(r.to_dict()) == list(RESULT_KEYS)
    assert list(tmp_path.iterdir()) == []  # out_dir=None writes nothing
    assert seen == r.metrics and [m["step"] for m in seen] == [1, 5, 10, 12]
    for m in seen:
        assert list(m) == RECORD_KEYS and len(m["layers"]) == TINY["n_layers"] + 1
        assert all(list(row) == LAYER_KEYS for row in m["layers"])
        first = m["layers"][0]
        assert first["update_ratio"] is first["attn_grad_norm"] is first["param_update"] is None
        assert all(row["cross_grad_norm"] is None for row in m["layers"])  # a decoder has no cross-attention
        assert all(
            row[k] > 0 for row in m["layers"][1:] for k in ("attn_grad_norm", "ffn_grad_norm", "param_update")
        )
    assert [m["val_loss"] is not None for m in seen] == [False, False, True, True]
    assert r.val_loss == seen[-1]["val_loss"] and r.final_train_loss == seen[-1]["loss"]
    assert r.val_bpb == pytest.approx(r.val_loss / math.log(2)) and r.accuracy is None
    assert r.data_info["source"] == "python-stdlib" and len(r.data_info["sha256"]) == 64


def test_window_mean_and_no_telemetry():
    cfg = TrainConfig(**{**SHORT, "log_every": 1, "telemetry": False})
    per_step = train(ModelConfig(**TINY), cfg)
    windowed = train(ModelConfig(**TINY), TrainConfig(**{**SHORT, "telemetry": False}))
    losses = {m["step"]: m["loss"] for m in per_step.metrics}
    assert windowed.metrics[1]["loss"] == pytest.approx(sum(losses[t] for t in range(2, 6)) / 4)
    assert windowed.final_train_loss == pytest.approx((losses[11] + losses[12]) / 2)
    assert all(m["layers"] == [] for m in per_step.metrics)
    assert _drop_speed(per_step.metrics)[0]["loss"] == losses[1]


def test_same_seed_same_metrics():
    a = train(ModelConfig(**TINY), TrainConfig(**SHORT, seed=1))
    b = train(ModelConfig(**TINY), TrainConfig(**SHORT, seed=1))
    c = train(ModelConfig(**TINY), TrainConfig(**SHORT, seed=2))
    assert _drop_speed(a.metrics) == _drop_speed(b.metrics)
    assert a.val_loss == b.val_loss and a.val_loss != c.val_loss


def test_telemetry_matches_a_hand_computation():
    """Step 1's record against the same model, batch and Adam update computed here by hand."""
    mcfg, tcfg = ModelConfig(**TINY, wrap="post"), TrainConfig(**{**SHORT, "steps": 1}, seed=5)
    record = train(mcfg, tcfg).metrics[0]
    torch.manual_seed(tcfg.seed)
    model = build_model(mcfg)
    batch = make_task(mcfg, tcfg).train_batch(1)
    logits, states = model(*batch.args, return_states=True)
    for s in states:
        s.retain_grad()
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch.targets.flatten())
    loss.backward()
    assert record["loss"] == pytest.approx(loss.item(), rel=1e-6)
    total = torch.sqrt(sum(p.grad.pow(2).sum() for p in model.parameters()))
    assert record["grad_norm"] == pytest.approx(total.item(), rel=1e-5)
    for i, row in enumerate(record["layers"]):
        assert row["grad_norm"] == pytest.approx(states[i].grad.norm().item(), rel=1e-5)
        assert row["stream_rms"] == pytest.approx(states[i].pow(2).mean().sqrt().item(), rel=1e-5)
    blocks = list(model.stack.layers)
    before = [[p.detach().clone() for p in b.parameters()] for b in blocks]
    for block, row in zip(blocks, record["layers"][1:]):
        attn = torch.sqrt(sum(p.grad.pow(2).sum() for p in block.attn.f.parameters()))  # F's own weights
        ffn = torch.sqrt(sum(p.grad.pow(2).sum() for p in block.ffn.f.parameters()))
        assert row["attn_grad_norm"] == pytest.approx(attn.item(), rel=1e-5)
        assert row["ffn_grad_norm"] == pytest.approx(ffn.item(), rel=1e-5)
    make_optimizer(model, tcfg).step()
    for block, old, row in zip(blocks, before, record["layers"][1:]):
        diff = torch.sqrt(sum((p - o).pow(2).sum() for p, o in zip(block.parameters(), old)))
        norm = torch.sqrt(sum(o.pow(2).sum() for o in old))
        assert row["param_update"] == pytest.approx((diff / norm).item(), rel=1e-4)


def test_a_huge_learning_rate_diverges_and_is_a_result():
    r = train(ModelConfig(**TINY), TrainConfig(**{**SHORT, "lr": 1.0}))
    assert r.outcome == "diverged" and r.step is not None and r.step < SHORT["steps"]
    assert r.metrics[-1]["step"] == r.step and r.metrics[-1]["val_loss"] is not None


def test_non_finite_loss_stops_before_the_update(tmp_path, monkeypatch):
    real = loop_module.token_loss_sum
    calls = {"n": 0}

    def poisoned(logits, targets):
        calls["n"] += 1
        return real(logits, targets) * (math.nan if calls["n"] >= 3 else 1.0)

    monkeypatch.setattr(loop_module, "token_loss_sum", poisoned)
    cfg = TrainConfig(**{**SHORT, "log_every": 10})
    r = train(ModelConfig(**TINY), cfg, str(tmp_path / "bad"))
    assert (r.outcome, r.step) == ("diverged", 3) and "loss became nan" in r.reason
    assert r.metrics[-1]["step"] == 3 and len(r.metrics[-1]["layers"]) == 3  # telemetry at the failure
    monkeypatch.setattr(loop_module, "token_loss_sum", real)
    train(ModelConfig(**TINY), TrainConfig(**{**SHORT, "steps": 2}), str(tmp_path / "two"))
    failed = load(checkpoint_paths(str(tmp_path / "bad"))[-1])["model"]
    two = load(checkpoint_paths(str(tmp_path / "two"))[-1])["model"]
    assert all(torch.equal(failed[k], two[k]) for k in two)  # the poisoned update was not applied


def test_encdec_learns_to_reverse():
    mcfg = ModelConfig(arch="encdec", n_layers=2, d_model=32, n_heads=4, max_len=16)
    tcfg = TrainConfig(
        task="reverse",
        symbols=4,
        seq_len=4,
        batch_size=32,
        steps=120,
        lr=3e-3,
        warmup=10,
        log_every=20,
        eval_every=60,
        eval_batches=2,
    )
    r = train(mcfg, tcfg)
    assert r.outcome == "trained" and r.accuracy > 0.5
    assert r.val_bpb is None and math.log(4) * 0.8 < r.unigram_loss < math.log(5) and r.val_loss < 0.5


def _linear_output_dtypes(bf16: bool) -> tuple[dict, object]:
    """Train 3 steps; the dtypes the model's Linear layers returned, by phase (training forward with
    gradients, evaluation without), seen by a global forward hook; and the RunResult."""
    seen = {"train": set(), "eval": set()}

    def hook(module, args, output):
        if isinstance(module, torch.nn.Linear):
            seen["train" if torch.is_grad_enabled() else "eval"].add(output.dtype)

    handle = torch.nn.modules.module.register_module_forward_hook(hook)
    try:
        r = train(ModelConfig(**TINY), TrainConfig(**{**SHORT, "bf16": bf16, "steps": 3}))
    finally:
        handle.remove()
    return seen, r


def test_bf16_autocast_trains():
    """bf16=True must really compute in bfloat16 (autocast on, in training and in evaluation), and the
    same run without it in float32: a no-op autocast, or one left on for float32 runs, fails this."""
    seen, r = _linear_output_dtypes(bf16=True)
    assert seen == {"train": {torch.bfloat16}, "eval": {torch.bfloat16}}
    assert math.isfinite(r.final_train_loss) and math.isfinite(r.val_loss)
    seen, _ = _linear_output_dtypes(bf16=False)
    assert seen == {"train": {torch.float32}, "eval": {torch.float32}}

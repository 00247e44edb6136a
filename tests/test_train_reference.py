"""depthlab's training loop against a minimal one written here (nanoGPT's: the same model and batches,
torch's own Adam/AdamW with hand-made groups, the lr set by hand from the schedule's formula, torch's
clip_grad_norm_): the losses, learning rates, gradient norms, validation loss and final weights agree,
under each wrapping's odd parameters, each schedule's corners, a resume inside and after the warmup,
and each parametrization's per-group lr, eps and weight decay as docs/transfer.md tabulates them."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

from depthlab import ModelConfig, TrainConfig, build_model
from depthlab.train import train
from depthlab.train.batch import IGNORE
from depthlab.train.checkpoint import checkpoint_paths
from depthlab.train.tasks import make_task

pytestmark = pytest.mark.usefixtures("one_thread")

MODEL = dict(n_layers=2, d_model=16, n_heads=2, max_len=16)
RUN = dict(steps=6, batch_size=4, seq_len=8, log_every=1, eval_every=6, eval_batches=2, seed=3)


def formula_lr(cfg: TrainConfig, t: int, d_model: int) -> float:
    """The documented lr of update t (docs/cli.md; depthlab/train/schedules.py's table), written out."""
    w, n, r = cfg.warmup, cfg.steps, cfg.min_lr_ratio
    if cfg.schedule == "constant":
        return cfg.lr
    if cfg.schedule == "linear":
        return cfg.lr * (min(1.0, t / w) if w else 1.0)
    if cfg.schedule == "noam":
        return cfg.lr * d_model**-0.5 * min(t**-0.5, t * w**-1.5)
    if t <= w:  # cosine: warmup, then from the peak down to the floor at the last update
        return cfg.lr * t / w
    start = max(w, 1)
    p = (t - start) / max(1, n - start)
    return cfg.lr * (r + (1 - r) * 0.5 * (1 + math.cos(math.pi * p)))


def nanogpt_groups(model, cfg: TrainConfig) -> list[dict]:
    """nanoGPT's configure_optimizers: every 2-D tensor decays, every other one does not."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    wd = cfg.weight_decay / cfg.lr if cfg.independent_wd else cfg.weight_decay
    return [
        {"params": decay, "weight_decay": wd, "scale": 1.0},
        {"params": other, "weight_decay": 0.0, "scale": 1.0},
    ]


def reference(mcfg: ModelConfig, tcfg: TrainConfig, groups=nanogpt_groups):
    """The run by hand: per update its (loss, lr, grad norm before clipping); then the validation loss
    (summed over the validation batches' target tokens, divided by their count) and the model."""
    task = make_task(mcfg, tcfg)
    torch.manual_seed(tcfg.seed)
    model = build_model(mcfg)
    cls = torch.optim.AdamW if tcfg.optimizer == "adamw" else torch.optim.Adam
    opt = cls(groups(model, tcfg), lr=tcfg.lr, betas=(tcfg.beta1, tcfg.beta2), eps=tcfg.eps)
    rows = []
    for t in range(1, tcfg.steps + 1):
        lr = formula_lr(tcfg, t, mcfg.d_model)
        for g in opt.param_groups:
            g["lr"] = lr * g["scale"]
        b = task.train_batch(t)
        logits = model(*b.args, **b.kwargs)
        loss = F.cross_entropy(logits.flatten(0, 1), b.targets.flatten(), ignore_index=IGNORE)
        objective = loss
        if tcfg.z_loss:
            keep = b.targets != IGNORE
            objective = loss + tcfg.z_loss * torch.logsumexp(logits, -1)[keep].pow(2).mean()
        opt.zero_grad()
        objective.backward()
        if tcfg.clip:
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), tcfg.clip)
        else:
            norm = torch.nn.utils.get_total_norm([p.grad for p in model.parameters() if p.grad is not None])
        opt.step()
        rows.append((loss.item(), lr, norm.item()))
    model.eval()
    total, count = 0.0, 0
    val = task.val_batches()  # --eval-batches of --batch-size sequences
    assert len(val) == tcfg.eval_batches and all(b.targets.shape[0] == tcfg.batch_size for b in val)
    with torch.no_grad():
        for b in val:
            logits = model(*b.args, **b.kwargs)
            total += F.cross_entropy(
                logits.flatten(0, 1), b.targets.flatten(), ignore_index=IGNORE, reduction="sum"
            ).item()
            count += int((b.targets != IGNORE).sum())
    return rows, total / count, model, task


def assert_same_run(result, rows, val, model, rel=1e-6):
    ours = [(m["loss"], m["lr"], m["grad_norm"]) for m in result.metrics]
    assert [m["step"] for m in result.metrics] == list(range(1, len(rows) + 1))
    for t, (a, b) in enumerate(zip(ours, rows), start=1):
        assert a == pytest.approx(b, rel=rel, abs=1e-12), f"update {t}: (loss, lr, grad norm)"
    assert result.val_loss == pytest.approx(val, rel=rel)
    for (name, p), q in zip(result.model.named_parameters(), model.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize("wrap", ["pre", "post", "rezero", "admin", "deepnorm", "dhc", "mhc", "attnres"])
def test_train_is_the_hand_written_loop(wrap):
    """AdamW with decay, a cosine schedule with warmup and clipping that bites: ReZero's a, Admin's
    omega, the hyper-connections' static maps (vectors) and dynamic maps (matrices) land in the groups
    nanoGPT's rule gives them, and every update matches."""
    mcfg = ModelConfig(**MODEL, wrap=wrap)
    tcfg = TrainConfig(**RUN, optimizer="adamw", weight_decay=0.1, clip=0.5, schedule="cosine", warmup=3,
                       lr=3e-3)  # fmt: skip
    rows, val, model, task = reference(mcfg, tcfg)
    assert any(norm > tcfg.clip for _, _, norm in rows)  # the clip acts, so its place is tested
    result = train(mcfg, tcfg)
    assert_same_run(result, rows, val, model)
    assert result.unigram_loss == pytest.approx(_entropy(task.corpus.train))
    assert result.val_bpb == pytest.approx(result.val_loss / math.log(2))


def _entropy(data: torch.Tensor) -> float:
    p = torch.bincount(data.long(), minlength=256).double() / len(data)
    return float(-(p[p > 0] * p[p > 0].log()).sum())


@pytest.mark.parametrize(
    "kw",
    [
        dict(schedule="linear", warmup=0),
        dict(schedule="linear", warmup=4),
        dict(schedule="linear", warmup=6),  # the last update is the first at the peak
        dict(schedule="linear", warmup=9),  # a run that ends inside its warmup
        dict(schedule="cosine", warmup=0),
        dict(schedule="cosine", warmup=9),
        dict(schedule="cosine", warmup=2, min_lr_ratio=0.0),
        dict(schedule="noam", warmup=2, lr=0.5),
        dict(schedule="constant"),
    ],
)
def test_the_lr_of_every_update_is_the_schedules_formula(kw):
    """Adam (no decay, no clip): the lr each update used, logged and applied, at step 1, the warmup's
    last step and the end."""
    mcfg = ModelConfig(**MODEL)
    tcfg = TrainConfig(**RUN, telemetry=False, **kw)
    rows, val, model, _ = reference(mcfg, tcfg)
    assert_same_run(train(mcfg, tcfg), rows, val, model)
    lrs = [lr for _, lr, _ in rows]
    if tcfg.schedule == "cosine":
        assert lrs[-1] == pytest.approx(tcfg.lr * min(1.0, 6 / tcfg.warmup) if tcfg.warmup >= 6 else
                                        tcfg.lr * tcfg.min_lr_ratio)  # fmt: skip
        assert max(lrs) == pytest.approx(tcfg.lr * min(1.0, 6 / max(tcfg.warmup, 1)))


def test_adam_l2_independent_decay_and_z_loss():
    """Adam's decay is an L2 term in the gradient; AdamW's independent decay is wd / lr; the z-loss is
    in the objective, not the logged loss."""
    mcfg = ModelConfig(**MODEL)
    for kw in (
        dict(optimizer="adam", weight_decay=0.5, z_loss=1e-2),
        dict(optimizer="adamw", weight_decay=0.5, independent_wd=True, schedule="cosine", warmup=2, lr=5e-3),
    ):
        tcfg = TrainConfig(**RUN, telemetry=False, **kw)
        rows, val, model, _ = reference(mcfg, tcfg)
        assert_same_run(train(mcfg, tcfg), rows, val, model)


@pytest.mark.parametrize("arch", ["decoder", "encdec", "encoder"])
def test_a_synthetic_tasks_loss_is_the_mean_over_its_answer_tokens(arch):
    """reverse, with padding and (decoder) a prompt that carries no loss (IGNORE): the loss is the mean
    over the answer tokens, and the masks reach the model as in the loop."""
    mcfg = ModelConfig(**{**MODEL, "max_len": 32}, vocab_size=32, arch=arch)
    tcfg = TrainConfig(
        **{**RUN, "seq_len": 6}, task="reverse" if arch != "encoder" else "sort", telemetry=False
    )
    rows, val, model, _ = reference(mcfg, tcfg)
    assert_same_run(train(mcfg, tcfg), rows, val, model)


@pytest.mark.parametrize("cut", [2, 6])
def test_a_resumed_run_is_the_hand_written_loop(tmp_path, cut):
    """Killed after the checkpoint of update 2 (inside a 4-step warmup) or 6 (after it), with dropout
    drawing from the RNG: the resumed run continues with the next batch, lr and Adam state, and ends
    as the uninterrupted hand-written loop does."""
    mcfg = ModelConfig(**MODEL, dropout=0.1)
    tcfg = TrainConfig(**{**RUN, "steps": 8, "eval_every": 4}, checkpoint_every=2, schedule="cosine",
                       warmup=4, optimizer="adamw", weight_decay=0.1, lr=3e-3)  # fmt: skip
    out = str(tmp_path / "run")

    def stop(record):  # after the checkpoint of update ``cut``, before the next is written
        if record["step"] == cut + 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(mcfg, tcfg, out, on_log=stop)
    assert [p.name for p in checkpoint_paths(out)][-1] == f"step-{cut:06d}.pt"
    rows, val, model, _ = reference(mcfg, tcfg)
    seen = []
    assert_same_run(train(mcfg, tcfg, out, resume=True, on_log=seen.append), rows, val, model)
    assert [r["step"] for r in seen] == list(range(cut + 1, 9))  # resumed, not started over


def transfer_groups(alpha: float, m_w: float, m_l: float):
    """One group per parameter, its lr (as a multiple of the run's), eps and decay from docs/transfer.md's
    table: hidden matrices lr / m_w x m_L^(alpha - 1), eps / m_w x m_L^-alpha, decay x m_w; hidden
    vectors lr x m_L^(alpha - 1), no decay; the tied token table lr / m_w^1/2 (embed_scale); the
    position table and the final norm the run's lr; every eps outside the blocks / m_w. H_res's maps
    (static, dynamic, mHC's) and DenseFormer's alphas take m_L^-1 more on their lr."""

    def groups(model, cfg: TrainConfig) -> list[dict]:
        out = []
        for name, p in model.named_parameters():
            if ".layers." in name:
                lr, eps, wd = m_l ** (alpha - 1), m_l**-alpha / m_w, 0.0
                if p.dim() >= 2:
                    lr, wd = lr / m_w, m_w
                if name.endswith((".mix.res", ".mix.w_res", ".mix.phi_res", ".alpha")):
                    lr /= m_l
            else:
                lr, eps, wd = 1.0, 1 / m_w, float(p.dim() >= 2)
                if name == "embed.tok.weight":
                    lr = m_w**-0.5
            out.append(
                {"params": [p], "scale": lr, "eps": cfg.eps * eps, "weight_decay": cfg.weight_decay * wd}
            )
        return out

    return groups


@pytest.mark.parametrize(
    "param,base,alpha,m_w,m_l",
    [
        ("mup", dict(base_width=8), 0.0, 4, 1),
        ("depth_mup", dict(base_width=16, base_depth=1), 0.5, 2, 4),
        ("completep", dict(base_width=8, base_depth=2), 1.0, 4, 2),
        ("completep", dict(base_width=16, base_depth=1, wrap="dhc"), 1.0, 2, 4),
        ("depth_mup", dict(base_width=8, base_depth=2, wrap="mhc"), 0.5, 4, 2),
        ("completep", dict(base_width=8, base_depth=1, wrap="denseformer"), 1.0, 4, 4),
    ],
)
def test_train_applies_each_parametrizations_groups(param, base, alpha, m_w, m_l):
    """``train`` under mup, depth_mup and completep updates every parameter with the lr, eps and weight
    decay docs/transfer.md gives its group, times the schedule's factor."""
    mcfg = ModelConfig(**{**MODEL, "d_model": 32, "n_layers": 4}, param=param, **base)
    tcfg = TrainConfig(**RUN, telemetry=False, optimizer="adamw", weight_decay=0.1, schedule="cosine",
                       warmup=2, lr=1e-2, eps=1e-6)  # fmt: skip
    rows, val, model, _ = reference(mcfg, tcfg, transfer_groups(alpha, m_w, m_l))
    assert_same_run(train(mcfg, tcfg), rows, val, model)


def test_the_layers_gradient_norms_are_taken_before_clipping():
    """With a clip that bites, the records' per-layer attention and FFN gradient norms are the raw ones
    (docs/python.md), as the record's own gradient norm is."""
    mcfg = ModelConfig(**MODEL)
    tcfg = TrainConfig(**{**RUN, "steps": 1}, clip=0.01)
    record = train(mcfg, tcfg).metrics[0]
    torch.manual_seed(tcfg.seed)
    model = build_model(mcfg)
    b = make_task(mcfg, tcfg).train_batch(1)
    F.cross_entropy(model(*b.args).flatten(0, 1), b.targets.flatten()).backward()
    norm = lambda m: torch.sqrt(sum(p.grad.pow(2).sum() for p in m.parameters())).item()  # noqa: E731
    assert (
        record["grad_norm"] == pytest.approx(norm(model), rel=1e-6) and record["grad_norm"] > 100 * tcfg.clip
    )
    for block, row in zip(model.decoder.layers, record["layers"][1:]):
        assert row["attn_grad_norm"] == pytest.approx(norm(block.attn.f), rel=1e-6)
        assert row["ffn_grad_norm"] == pytest.approx(norm(block.ffn.f), rel=1e-6)


def test_the_command_line_trains_what_its_flags_say(tmp_path):
    """depthlab train with every recipe flag set away from its default: metrics.jsonl holds the loss,
    lr and gradient norm of the hand-written loop at those settings, update by update."""
    from depthlab.cli import main

    kw = dict(optimizer="adamw", beta1=0.8, beta2=0.95, eps=1e-6, weight_decay=0.2, clip=0.5,
              schedule="cosine", warmup=2, min_lr_ratio=0.2, lr=4e-3, z_loss=1e-3)  # fmt: skip
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in {**kw, **RUN}.items()]
    out = tmp_path / "run"
    argv = ["train", "--layers", "2", "--d-model", "16", "--heads", "2", "--max-len", "16", *flags]
    assert main([*argv, "--threads", "1", "--quiet", "--no-telemetry", "--out", str(out)]) == 0
    tcfg = TrainConfig(**RUN, telemetry=False, **kw)
    rows, val, _, _ = reference(ModelConfig(**MODEL), tcfg)
    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in logged] == list(range(1, len(rows) + 1))
    for r, row in zip(logged, rows):
        assert (r["loss"], r["lr"], r["grad_norm"]) == pytest.approx(row, rel=1e-6)
    assert json.loads((out / "result.json").read_text())["val_loss"] == pytest.approx(val, rel=1e-6)

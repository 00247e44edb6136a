"""The watcher's numbers against brute force, in a user's loop and in ``depthlab train``'s metrics.jsonl.

Every logged key of :mod:`depthlab.watch.keys` is recomputed here from its definition with hooks, autograd
and a copy of the model stepped by its own optimizer, on residual topologies (whose reported stream is a view
of a wider state) and post-LN; a topology's composite gain and effective depth are recomputed from the
parameters themselves (the products of the static H_res matrices; DenseFormer's alphas). tests/test_watch.py
does the same for pre-LN.
"""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch
import torch.nn.functional as F

import depthlab
from depthlab import ModelConfig, build_model
from depthlab.cli import main
from depthlab.config import TrainConfig
from depthlab.probe import probe
from depthlab.train.evaluate import token_loss_sum
from depthlab.train.schedules import make_optimizer, make_scheduler
from depthlab.train.tasks import make_task

pytestmark = pytest.mark.usefixtures("one_thread")

V = 256


def _model(wrap: str):
    torch.manual_seed(0)
    model = build_model(ModelConfig(n_layers=3, d_model=32, n_heads=4, max_len=32, wrap=wrap))
    with torch.no_grad():  # off the init's symmetries (H_res = I, alphas one-hot), so a mix-up shows
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


def _step_by_hand(model, tokens, loss_of, optimizer) -> dict:
    """One training step of ``model``, measured here: the block states (hooks), the attention inputs, the
    gradients (autograd and .grad), the weights before and after ``optimizer``'s step."""
    seen, inputs, blocks = [], {}, list(model.stack.layers)
    hooks = [blocks[0].register_forward_pre_hook(lambda m, a: seen.append(a[0]))]
    hooks += [b.register_forward_hook(lambda m, a, o: seen.append(o)) for b in blocks]
    hooks += [
        b.attn.f.register_forward_pre_hook(lambda m, a, j=j: inputs.__setitem__(j, a[0].detach()))
        for j, b in enumerate(blocks)
    ]
    logits = model(tokens)
    for h in hooks:
        h.remove()
    states = [s if isinstance(s, torch.Tensor) else s[0] for s in seen]  # the state as the model passes it on
    view = model.stack.state.view if model.stack.state is not None else (lambda x: x)
    loss = loss_of(logits)
    grads = torch.autograd.grad(loss, states, retain_graph=True)
    loss.backward()
    attn = [
        _attention(b.attn.f, inputs[j][:4]) for j, b in enumerate(blocks)
    ]  # the watcher reads 4 sequences
    before = [[p.detach().clone() for p in b.parameters()] for b in blocks]
    sub = [{k: _norm(p.grad for p in getattr(b, k).f.parameters()) for k in ("attn", "ffn")} for b in blocks]
    lr = optimizer.param_groups[0]["lr"]
    total = _norm(p.grad for p in model.parameters() if p.grad is not None)
    optimizer.step()
    updates = [
        _norm(p - o for p, o in zip(b.parameters(), old)) / _norm(old) for b, old in zip(blocks, before)
    ]
    return {
        "loss": loss.item(),
        "lr": lr,
        "grad_norm": total,
        "logit_lse": torch.logsumexp(logits.detach(), -1).mean().item(),
        "layers": _rows([view(s).detach() for s in seen], grads, sub, updates, attn),
    }


def _norm(tensors) -> float:
    return math.sqrt(sum(float(t.detach().double().pow(2).sum()) for t in tensors))


def _attention(a, x: torch.Tensor) -> tuple[float, float]:
    """(mean entropy over sequences, heads and queries; largest logit) of causal self-attention, from the
    module's own fused projection."""
    B, T, d = x.shape
    with torch.no_grad():
        q, k, _ = a.qkv(x).split([d, d, d], dim=-1)
        q, k = (t.view(B, T, a.n_heads, a.head_dim).transpose(1, 2) for t in (q, k))
        s = (q @ k.transpose(-2, -1)) / math.sqrt(a.head_dim)
        s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), -math.inf)
        p = torch.softmax(s, -1)
        return (-(p * p.clamp_min(1e-45).log()).sum(-1)).mean().item(), s.max().item()


def _rows(streams, grads, sub, updates, attn) -> list[dict]:
    rows = []
    for i, x in enumerate(streams):
        row = {"grad_norm": grads[i].norm().item(), "stream_rms": x.pow(2).mean().sqrt().item()}
        if i:
            prev = streams[i - 1]
            cos = F.cosine_similarity(x, prev, dim=-1).mean().item()
            row |= {
                "update_ratio": ((x - prev).norm() / prev.norm()).item(),
                "cos_prev": cos,
                "angular_distance": math.acos(cos) / math.pi,
                "attn_grad_norm": sub[i - 1]["attn"],
                "ffn_grad_norm": sub[i - 1]["ffn"],
                "param_update": updates[i - 1],
                "attn_entropy": attn[i - 1][0],
                "attn_logit_max": attn[i - 1][1],
            }
        rows.append(row)
    return rows


def _same(record: dict, expected: dict, rel: float = 1e-4) -> None:
    for key in ("loss", "lr", "grad_norm", "logit_lse"):
        assert record[key] == pytest.approx(expected[key], rel=rel), key
    assert len(record["layers"]) == len(expected["layers"])
    for i, (row, want) in enumerate(zip(record["layers"], expected["layers"])):
        assert row["index"] == i
        for key, value in want.items():
            assert row[key] == pytest.approx(value, rel=rel, abs=1e-7), (i, key)


@pytest.mark.parametrize("wrap", ["post", "mhc", "denseformer"])
def test_a_watched_loop_logs_what_hooks_autograd_and_the_optimizer_give(wrap):
    model = _model(wrap)
    twin = copy.deepcopy(model)
    tokens = torch.randint(0, V, (3, 16), generator=torch.Generator().manual_seed(2))

    def lm(logits):
        return F.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten())

    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    with depthlab.watch(model, opt, every=5, echo=None) as w:
        loss = lm(model(tokens))
        loss.backward()
        opt.step()
        w.step(loss)
    _same(
        w.records[0], _step_by_hand(twin.train(), tokens, lm, torch.optim.AdamW(twin.parameters(), lr=1e-2))
    )


def test_composite_gain_and_effective_depth_are_those_of_the_parameters():
    """hc's static H_res are parameters: the composite map at layer i is the product of its sublayers' H_res
    (attention's, then the FFN's, layer after layer); composite_gain its largest absolute row sum,
    composite_gain_back its largest column sum. DenseFormer's effective depth is exp of the entropy of
    |alpha| / sum |alpha| of the layer's average. The probe and a watched step report the same."""
    model = _model("hc")
    tokens = torch.randint(0, V, (2, 8), generator=torch.Generator().manual_seed(1))
    n, C, gains, backs = 4, torch.eye(4, dtype=torch.float64), [None], [None]
    for layer in model.stack.layers:
        for sub in (layer.attn, layer.ffn):
            C = sub.mix.res.detach().double().view(n, n) @ C
        gains.append(C.abs().sum(-1).max().item())
        backs.append(C.abs().sum(-2).max().item())
    assert max(gains[1:]) > 1.05  # the perturbed maps amplify: a gain of 1 would prove nothing
    result = probe(model, tokens)
    assert result.layers[0]["composite_gain"] is None  # stream 0: no map yet
    assert result.column("composite_gain")[1:] == pytest.approx(gains[1:], rel=1e-5)
    assert result.column("composite_gain_back")[1:] == pytest.approx(backs[1:], rel=1e-5)
    with depthlab.watch(model, every=5, echo=None) as w:
        w.step(F.cross_entropy(model(tokens).flatten(0, 1), tokens.flatten()))
    assert w.records[0]["topology"]["composite_gain"][1:] == pytest.approx(gains[1:], rel=1e-5)

    model = _model("denseformer")
    depth = [None]
    for layer in model.stack.layers:
        p = layer.ffn.alpha.detach().double().abs()
        p = p / p.sum()
        depth.append(math.exp(-(p * p.log()).sum().item()))
    assert probe(model, tokens).column("effective_depth")[1:] == pytest.approx(depth[1:], rel=1e-5)


def test_train_metrics_jsonl_is_a_replay_by_hand(tmp_path):
    """depthlab train's logged steps (1, every --log-every, the last) hold the numbers of the same run replayed
    here step by step: the window's mean loss, the lr of the update, the gradient norms before clipping, the
    weight update after the clipped step, the streams of a residual topology's view."""
    out = tmp_path / "run"
    argv = [
        "--layers",
        "2",
        "--d-model",
        "32",
        "--heads",
        "4",
        "--wrap",
        "mhc",
        "--steps",
        "4",
        "--log-every",
        "3",
    ]
    argv += ["--warmup", "2", "--clip", "0.5", "--batch-size", "4", "--seq-len", "16", "--out", str(out)]
    assert main(["train", *argv]) == 0
    conf = json.loads((out / "config.json").read_text())
    mc, tc = ModelConfig.from_dict(conf["model"]), TrainConfig.from_dict(conf["train"])
    records = {r["step"]: r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())}
    assert sorted(records) == [1, 3, 4]
    task = make_task(mc, tc)
    torch.manual_seed(tc.seed)
    model = build_model(mc)
    opt = make_optimizer(model, tc)
    sched = make_scheduler(opt, tc, mc.d_model)

    class Clipped:  # the loop's optimizer step: clip the gradients, then step
        param_groups = opt.param_groups

        def step(self):
            torch.nn.utils.clip_grad_norm_(model.parameters(), tc.clip)
            opt.step()

    losses = []
    for t in range(1, 5):
        batch = task.train_batch(t)
        assert len(batch.args) == 1 and not batch.kwargs  # the tokens alone

        def lm(logits, batch=batch):
            return token_loss_sum(logits, batch.targets) / batch.n_targets

        opt.zero_grad()
        by_hand = _step_by_hand(model, batch.args[0], lm, Clipped())
        sched.step()
        losses.append(by_hand["loss"])
        if t in records:  # the loss is the mean over the steps since the last logged one (2 and 3 at step 3)
            by_hand["loss"] = sum(losses[-2:]) / 2 if t == 3 else losses[-1]
            _same(records[t], by_hand)


def test_the_attention_keys_say_how_many_sequences_they_read():
    """attn_entropy and attn_logit_max are taken over the batch's first ROWS sequences (the recomputation
    costs); the key table and docs/watch.md say that number."""
    from pathlib import Path

    from depthlab.watch import keys
    from depthlab.watch.attention_stats import ROWS

    assert f"first ``ROWS`` = {ROWS} sequences" in keys.__doc__
    page = " ".join((Path(__file__).parents[1] / "docs" / "watch.md").read_text().split())
    assert f"over the batch's first {ROWS} sequences" in page

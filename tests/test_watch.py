"""depthlab.watch in a plain loop: values against an independent computation (hooks + retain_grad), hooks
gone after close, activation checkpointing, nothing attached between logged steps, warnings."""

from __future__ import annotations

import io
import json
import math
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import depthlab
from depthlab import ModelConfig, build_model
from depthlab.watch import Thresholds, Watcher, replay

TINY = dict(n_layers=3, d_model=32, n_heads=4, max_len=32)

pytestmark = pytest.mark.usefixtures("one_thread")


def _batch(seed: int, b: int = 4, t: int = 16) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (b, t), generator=g)


def _lm_loss(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten())


def _reference(model, tokens: torch.Tensor, rows: int | None = None) -> dict:
    """One forward/backward of a copy of the model, measured by hand: retain_grad on the returned
    states, the attention scores recomputed from each Attention's own qkv projection."""
    inputs = {}
    handles = [
        block.attn.f.register_forward_pre_hook(lambda m, a, j=j: inputs.__setitem__(j, a[0].detach()))
        for j, block in enumerate(model.stack.layers)
    ]
    logits, states = model(tokens, return_states=True)
    for h in handles:
        h.remove()
    for s in states:
        s.retain_grad()
    loss = _lm_loss(logits, tokens)
    loss.backward()
    attn = []
    for j, block in enumerate(model.stack.layers):
        a, x = block.attn.f, inputs[j][:rows]
        B, T, d = x.shape
        q, k, _ = a.qkv(x).split([d, d, d], dim=-1)
        q, k = (t.view(B, T, a.n_heads, a.head_dim).transpose(1, 2) for t in (q, k))
        s = (q @ k.transpose(-2, -1)) / math.sqrt(a.head_dim)
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        p = torch.softmax(s.masked_fill(~causal, -math.inf), -1)
        ent = -(p * torch.log(p.clamp_min(1e-45))).sum(-1).mean()
        attn.append((ent.item(), s.masked_fill(~causal, -math.inf).max().item()))
    lse = torch.logsumexp(logits.detach(), -1).mean().item()
    return {"loss": loss.item(), "states": states, "attn": attn, "lse": lse}


def test_attention_is_read_from_the_first_rows_of_a_large_batch():
    """On a batch of 8, the attention statistics are those of its first ROWS sequences."""
    from depthlab.watch.attention_stats import ROWS

    torch.manual_seed(0)
    model = build_model(ModelConfig(**TINY, wrap="pre"))
    twin = build_model(ModelConfig(**TINY, wrap="pre"))
    twin.load_state_dict(model.state_dict())
    tokens = _batch(3, b=2 * ROWS)
    with depthlab.watch(model, every=5, echo=None) as w:
        loss = _lm_loss(model(tokens), tokens)
        loss.backward()
        w.step(loss)
    part, whole = _reference(twin, tokens, rows=ROWS), None
    for row, (ent, peak) in zip(w.records[0]["layers"][1:], part["attn"]):
        assert row["attn_entropy"] == pytest.approx(ent, rel=1e-5)
        assert row["attn_logit_max"] == pytest.approx(peak, rel=1e-5)
    twin.zero_grad()
    whole = _reference(twin, tokens)
    assert any(e != pytest.approx(f, rel=1e-5) for (e, _), (f, _) in zip(part["attn"], whole["attn"]))


def test_attention_logits_are_float32_under_bf16_autocast():
    """The attention tap reads q k^T inside the training forward; under bf16 autocast (a GPU run's) the
    product it takes in float32 must stay float32, not be rounded to bf16 by autocast."""
    from depthlab.watch.attention_stats import sdpa_logits

    torch.manual_seed(0)
    q, k = torch.randn(2, 2, 8, 16), torch.randn(2, 2, 8, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits, allowed, _ = sdpa_logits(q.bfloat16(), k.bfloat16(), is_causal=True)
    assert logits.dtype == torch.float32
    torch.testing.assert_close(logits, (q.bfloat16().float() @ k.bfloat16().float().transpose(-2, -1)) / 4)
    assert allowed.tril().equal(allowed)


def test_logged_values_match_an_independent_computation():
    torch.manual_seed(0)
    model = build_model(ModelConfig(**TINY, wrap="pre"))
    twin = build_model(ModelConfig(**TINY, wrap="pre"))
    twin.load_state_dict(model.state_dict())
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    tokens = _batch(1)
    with depthlab.watch(model, opt, every=5, echo=None) as w:
        loss = _lm_loss(model(tokens), tokens)
        loss.backward()
        opt.step()
        w.step(loss)
    record = w.records[0]
    ref = _reference(twin, tokens)
    assert record["step"] == 1 and record["loss"] == pytest.approx(ref["loss"], rel=1e-6)
    assert record["lr"] == 1e-2 and record["logit_lse"] == pytest.approx(ref["lse"], rel=1e-5)
    total = torch.sqrt(sum(p.grad.pow(2).sum() for p in twin.parameters()))
    assert record["grad_norm"] == pytest.approx(total.item(), rel=1e-5)
    states = ref["states"]
    for i, row in enumerate(record["layers"]):
        assert row["grad_norm"] == pytest.approx(states[i].grad.norm().item(), rel=1e-5)
        assert row["stream_rms"] == pytest.approx(states[i].pow(2).mean().sqrt().item(), rel=1e-5)
        if i:
            prev, x = states[i - 1].detach(), states[i].detach()
            ratio = ((x - prev).norm() / prev.norm()).item()
            assert row["update_ratio"] == pytest.approx(ratio, rel=1e-5)
            cos = F.cosine_similarity(x, prev, dim=-1).mean().item()
            assert row["cos_prev"] == pytest.approx(cos, rel=1e-5)
    blocks, rows = list(twin.stack.layers), record["layers"][1:]
    before = [[p.detach().clone() for p in b.parameters()] for b in blocks]
    for block, row, (ent, peak) in zip(blocks, rows, ref["attn"]):
        for kind in ("attn", "ffn"):
            norm = torch.sqrt(sum(p.grad.pow(2).sum() for p in getattr(block, kind).f.parameters()))
            assert row[f"{kind}_grad_norm"] == pytest.approx(norm.item(), rel=1e-5)
        assert row["attn_entropy"] == pytest.approx(ent, rel=1e-5)
        assert row["attn_logit_max"] == pytest.approx(peak, rel=1e-5)
    torch.optim.Adam(twin.parameters(), lr=1e-2).step()
    for block, old, row in zip(blocks, before, rows):
        diff = torch.sqrt(sum((p - o).pow(2).sum() for p, o in zip(block.parameters(), old)))
        assert row["param_update"] == pytest.approx(
            (diff / torch.sqrt(sum(o.pow(2).sum() for o in old))).item(), rel=1e-5
        )


def _hooks(model, opt) -> dict:
    """Every hook dict of every module and of the optimizer, as (owner, kind) -> the ids it holds."""
    kinds = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
             "_forward_hooks_always_called", "_forward_hooks_with_kwargs", "_forward_pre_hooks_with_kwargs",
             "_state_dict_hooks", "_load_state_dict_pre_hooks")  # fmt: skip
    out = {(name, k): sorted(getattr(m, k)) for name, m in model.named_modules() for k in kinds}
    for k in ("_optimizer_step_pre_hooks", "_optimizer_step_post_hooks"):
        out[("optimizer", k)] = sorted(getattr(opt, k))
    return out


def test_close_removes_every_hook_and_nothing_is_attached_between_logged_steps():
    torch.manual_seed(0)
    model = build_model(ModelConfig(**TINY))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    before = _hooks(model, opt)
    block_hooks = []
    w = depthlab.watch(model, opt, every=3, echo=None)
    counter = model.stack.layers[1].register_forward_hook(
        lambda m, a, o: block_hooks.append(len(m._forward_hooks) + len(m._forward_pre_hooks))
    )
    for t in range(1, 7):
        tokens = _batch(t)
        _lm_loss(model(tokens), tokens).backward()
        opt.step()
        opt.zero_grad()
    counter.remove()
    assert _hooks(model, opt) != before  # the watcher's hooks are there while it watches
    w.close()
    assert _hooks(model, opt) == before
    # steps 1, 3 and 6 are logged: the stream hooks are on the block only then (besides the counter)
    assert block_hooks == [2, 1, 2, 1, 1, 2]
    assert [r["step"] for r in w.records] == [1, 3, 6]


def test_activation_checkpointing_gives_the_same_numbers():
    out = []
    for ckpt in (False, True):
        torch.manual_seed(0)
        model = build_model(ModelConfig(**TINY, wrap="post", activation_checkpointing=ckpt))
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        with depthlab.watch(model, opt, every=2, echo=None) as w:
            for t in range(1, 3):
                tokens = _batch(t)
                loss = _lm_loss(model(tokens), tokens)
                loss.backward()
                opt.step()
                opt.zero_grad()
                w.step(loss)
        out.append(w.records)
    plain, ckpt = out
    assert [r["step"] for r in plain] == [r["step"] for r in ckpt] == [1, 2]
    for a, b in zip(plain, ckpt):
        for ra, rb in zip(a["layers"], b["layers"]):
            for k, v in ra.items():
                assert (rb[k] is None) == (v is None), k
                if v is not None:
                    assert rb[k] == pytest.approx(v, rel=1e-5, abs=1e-8), k
        assert all(r["grad_norm"] is not None for r in b["layers"])


def test_without_an_optimizer_step_ends_each_update_and_out_is_written(tmp_path):
    torch.manual_seed(0)
    model = build_model(ModelConfig(**TINY))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    out = tmp_path / "watched"
    w = Watcher(model, every=2, out=str(out), echo=None)
    for t in range(1, 6):
        tokens = _batch(t)
        loss = _lm_loss(model(tokens), tokens)
        loss.backward()
        opt.step()
        opt.zero_grad()
        rec = w.step(loss)
        assert (rec is not None) == (t in (1, 2, 4))
    w.close()
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == [1, 2, 4] and len(lines[0]["layers"]) == TINY["n_layers"] + 1
    assert lines[2]["loss"] == pytest.approx(
        sum(float(r) for r in [_lm_loss_at(model, 3), _lm_loss_at(model, 4)]) / 2, rel=0.5
    )  # a window mean of steps 3 and 4 (the weights moved since: a loose check of the scale)
    summary = json.loads((out / "watch.json").read_text())
    assert summary["steps"] == 5 and summary["n_layers"] == TINY["n_layers"]
    assert 3.0 < summary["unigram_loss"] < math.log(256)  # from the logged batches' tokens
    assert list(out.glob("events.out.tfevents.*"))
    with pytest.raises(depthlab.InputError, match="already holds a run"):
        Watcher(model, out=str(out))


def _lm_loss_at(model, t):
    tokens = _batch(t)
    with torch.no_grad():
        return _lm_loss(model(tokens), tokens)


def test_a_run_that_blows_up_is_warned_before_its_first_non_finite_loss():
    """lr far too high for post-LN: the per-layer rules speak before the loss goes non-finite."""
    torch.manual_seed(0)
    model = build_model(ModelConfig(n_layers=6, d_model=32, n_heads=4, max_len=32, wrap="post"))
    opt = torch.optim.Adam(model.parameters(), lr=1.0)
    echo = io.StringIO()
    first_bad = None
    with depthlab.watch(model, opt, every=1, echo=echo) as w:
        for t in range(1, 41):
            tokens = _batch(t)
            loss = _lm_loss(model(tokens), tokens)
            if first_bad is None and not math.isfinite(loss.item()):
                first_bad = t
            loss.backward()
            opt.step()
            opt.zero_grad()
            w.step(loss)
    codes = [x["code"] for x in w.warnings]
    assert len(codes) == len(set(codes)) and codes  # each warning once
    early = [x for x in w.warnings if first_bad is None or x["step"] < first_bad]
    assert any(x["code"] not in ("non-finite", "loss-spike") for x in early), w.warnings
    printed = [line for line in echo.getvalue().splitlines() if ": warning: " in line]
    assert len(printed) == len(codes) and all(x["message"] in echo.getvalue() for x in w.warnings)
    assert echo.getvalue().splitlines()[-1].startswith("depthlab.watch: outcome: diverged at step")


def test_each_rule_fires_on_a_record_that_crosses_its_threshold():
    def rec(step, **layer):
        row = {"index": 1, "attn_grad_norm": 1.0, "ffn_grad_norm": 1.0, **layer}
        return {"step": step, "loss": 2.0, "grad_norm": 1.0, "layers": [{"index": 0}, row]}

    th = Thresholds()
    assert [w["code"] for w in replay([rec(1, attn_entropy=2.0), rec(2, attn_entropy=0.3)], th)] == [
        "attention-entropy-collapse"
    ]
    assert replay([rec(1, attn_entropy=2.0), rec(2, attn_entropy=0.5)], th) == []
    grow = [rec(1, attn_logit_max=5.0), rec(2, attn_logit_max=25.0)]
    assert [w["code"] for w in replay(grow, th)] == ["attention-logit-growth"]
    ups = [rec(t, param_update=0.01) for t in range(1, 5)] + [rec(5, param_update=0.2)]
    assert [w["code"] for w in replay(ups, th)] == ["update-ratio-spike"]
    losses = [{"step": t, "loss": 2.0, "layers": []} for t in range(1, 10)] + [
        {"step": 10, "loss": 4.5, "layers": []}
    ]
    assert [(w["code"], w["step"]) for w in replay(losses, th)] == [("loss-spike", 10)]
    lse = [{"step": 1, "logit_lse": 5.5, "layers": []}, {"step": 2, "logit_lse": 11.0, "layers": []}]
    assert [w["code"] for w in replay(lse, th)] == ["output-logit-growth"]
    nan = [
        {
            "step": 1,
            "loss": math.nan,
            "layers": [{"index": 0, "stream_rms": 1.0}, {"index": 1, "stream_rms": math.nan}],
        }
    ]
    (w,) = replay(nan, th)
    assert w["code"] == "non-finite" and w["layer"] == 1 and "stream 1" in w["message"]
    starved = [
        {"step": t, "layers": [{"index": 0}] + [{"index": i, "attn_grad_norm": g, "ffn_grad_norm": g}
                                                for i, g in enumerate([1e-4, 1, 1, 1], 1)]}
        for t in range(1, 4)
    ]  # fmt: skip
    assert [(w["code"], w["step"]) for w in replay(starved, th)] == [("gradient-starvation", 3)]


def test_depthlab_watch_is_a_callable_package_with_the_functions_signature():
    import inspect

    import depthlab.watch as package_path

    params = inspect.signature(depthlab.watch).parameters
    assert callable(depthlab.watch) and list(params)[:4] == ["model", "optimizer", "every", "out"]
    assert {"sublayers", "logits", "trackers", "steps"} <= set(params)
    assert depthlab.watch.Watcher is Watcher and package_path.Watcher is Watcher
    with pytest.raises(depthlab.ConfigError, match="every"):
        depthlab.watch(build_model(ModelConfig(**TINY)), every=0)


def test_the_watch_package_keeps_its_modules_reachable():
    """``depthlab.watch`` was once the function, which hid the package: ``import depthlab.watch.outcome``
    left ``depthlab.watch.outcome`` an AttributeError."""
    code = (
        "import depthlab.watch.outcome, depthlab.probe.forward_backward, depthlab\n"
        "print(depthlab.watch.outcome.__name__, depthlab.probe.forward_backward.__name__, callable(depthlab.watch))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["depthlab.watch.outcome", "depthlab.probe.forward_backward", "True"]

"""No silent blind spots: each instrument the watcher cannot attach is named once, at attach (the logits:
at the first logged step), with the names tried and the way to point it; pointed, every field fills."""

from __future__ import annotations

import io

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import depthlab
from depthlab.watch.keys import LAYER_KEYS

pytestmark = pytest.mark.usefixtures("one_thread")
V, D = 64, 32


class Block(nn.Module):
    """A GPT block whose attention is called ``mix`` (q, k, v) and ``proj``, its FFN ``mlp``."""

    def __init__(self, ffn: str = "mlp"):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.mix, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        setattr(self, ffn, nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D)))
        self.ffn_name = ffn

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, 4, C // 4).transpose(1, 2) for t in self.mix(self.ln_1(x)).split(C, -1))
        x = x + self.proj(
            F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        )
        return x + getattr(self, self.ffn_name)(self.ln_2(x))


class GPT(nn.Module):
    """``self.h = nn.ModuleList(...)``; returns raw logits."""

    def __init__(self, ffn: str = "mlp"):
        super().__init__()
        self.wte, self.head = nn.Embedding(V, D), nn.Linear(D, V)
        self.h = nn.ModuleList([Block(ffn) for _ in range(3)])

    def forward(self, idx):
        x = self.wte(idx)
        for block in self.h:
            x = block(x)
        return self.head(x)


def _run(model, steps: int = 2, give_logits: bool = False, **options):
    torch.manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    echo = io.StringIO()
    w = depthlab.watch(model, opt, every=1, echo=echo, **options)
    attach = echo.getvalue()
    for t in range(steps):
        x = torch.randint(0, V, (4, 16), generator=torch.Generator().manual_seed(t))
        logits = model(x)
        F.cross_entropy(logits[:, :-1].flatten(0, 1), x[:, 1:].flatten()).backward()
        opt.step()
        opt.zero_grad()
        w.step(F.cross_entropy(logits[:, :-1].flatten(0, 1), x[:, 1:].flatten()).detach(),
               logits=logits if give_logits else None)  # fmt: skip
    w.close()
    return w, attach, echo.getvalue()


def test_attention_called_mix_and_raw_logits_are_named_then_pointed():
    torch.manual_seed(0)
    w, attach, printed = _run(GPT())
    assert [g["instrument"] for g in w.gaps] == ["attn", "logits"]
    assert (
        attach.count("blind spot") == 1
        and "'attn|attention'" in attach
        and "sublayers={'attn': 'mix'}" in attach
    )
    assert printed.count("blind spot") == 2 and "watcher.step(loss, logits=logits)" in printed
    assert all(r["attn_grad_norm"] is None for r in w.records[-1]["layers"][1:])
    assert w.records[-1]["logit_lse"] is None

    torch.manual_seed(0)
    w, attach, printed = _run(
        GPT(), sublayers={"attn": ["mix", "proj"], "ffn": "mlp"}, logits=lambda out: out
    )
    assert w.gaps == [] and "blind spot" not in printed
    filled = [k for k in LAYER_KEYS if k != "cross_grad_norm"]  # no cross-attention in a decoder-only GPT
    for row in w.records[-1]["layers"][1:]:
        assert all(row[k] is not None for k in filled), row
    assert w.records[-1]["logit_lse"] is not None
    attn = sum(p.numel() for m in (w.model.h[0].mix, w.model.h[0].proj) for p in m.parameters())
    assert sum(p.numel() for p in w.stack.groups[0]["attn"]) == attn


def test_logits_given_at_each_step_fill_the_field():
    torch.manual_seed(0)
    w, _, printed = _run(GPT(), give_logits=True, sublayers={"attn": "mix"})
    assert "logits" not in [g["instrument"] for g in w.gaps] and w.records[0]["logit_lse"] > 0


def test_an_ffn_with_an_unknown_name_is_named():
    torch.manual_seed(0)
    w, attach, _ = _run(GPT(ffn="mixer2"), sublayers={"attn": "mix"}, logits=lambda out: out)
    assert [g["instrument"] for g in w.gaps] == ["ffn"] and "sublayers={'ffn': 'mixer2'}" in attach
    assert "mixer2" in attach and "ffn_grad_norm stays None" in attach


def test_a_missing_optimizer_is_named():
    model = GPT()
    echo = io.StringIO()
    w = depthlab.watch(model, echo=echo, sublayers={"attn": "mix"}, logits=lambda out: out)
    assert [g["instrument"] for g in w.gaps] == ["optimizer"] and "watcher.step(loss" in echo.getvalue()
    w.close()


def test_a_model_without_blocks_is_refused_naming_blocks():
    with pytest.raises(depthlab.InputError, match=r"tried: .*blocks=model.layers"):
        depthlab.watch(nn.Linear(4, 4), echo=None)


def test_a_bad_sublayer_name_is_one_line():
    with pytest.raises(depthlab.InputError, match="no submodule 'attention'.*ln_1, ln_2, mix"):
        depthlab.watch(GPT(), sublayers={"attn": "attention"}, echo=None)
    with pytest.raises(depthlab.ConfigError, match="sublayer kind"):
        depthlab.watch(GPT(), sublayers={"mlp": "mlp"}, echo=None)


def test_the_probe_names_the_same_gap_and_takes_the_same_pointer():
    from depthlab.probe import probe

    torch.manual_seed(0)
    x = torch.randint(0, V, (2, 16), generator=torch.Generator().manual_seed(0))
    result = probe(GPT(), x)
    (gap,) = result.config["stack"]["blind_spots"]
    assert (
        "no attention sublayer" in gap
        and "sublayers={'attn': 'mix'}" in gap
        and "blind spot: no attention" in result.format()
    )
    pointed = probe(GPT(), x, sublayers={"attn": ["mix", "proj"]})
    assert pointed.config["stack"]["blind_spots"] == []
    assert all(row["attn_grad_norm"] > 0 for row in pointed.layers[1:])

"""The outcome of a watched run (depthlab train's rules, one implementation) on tiny models: lr 0.5
diverges, a run on context-free tokens stalls at the unigram level, a sane run trains; the update-ratio
rule on a stream that grows 10,000-fold by the second logged step."""

from __future__ import annotations

import io
import json

import pytest
import torch
import torch.nn.functional as F

import depthlab
from depthlab import ModelConfig, build_model
from depthlab.watch import Thresholds, replay

pytestmark = pytest.mark.usefixtures("one_thread")
V = 32


def _context_batch(g: torch.Generator, b: int = 8, t: int = 24) -> torch.Tensor:
    """Each token is the previous one's successor mod V, one in ten drawn at random: learnable."""
    x = torch.empty(b, t, dtype=torch.long)
    x[:, 0] = torch.randint(0, V, (b,), generator=g)
    for i in range(1, t):
        noise = torch.randint(0, V, (b,), generator=g)
        keep = torch.rand(b, generator=g) < 0.9
        x[:, i] = torch.where(keep, (x[:, i - 1] + 1) % V, noise)
    return x


def _unigram_batch(g: torch.Generator, b: int = 8, t: int = 24) -> torch.Tensor:
    """Tokens drawn independently from a skewed distribution: nothing to learn but their frequencies."""
    p = torch.arange(1, V + 1, dtype=torch.float).pow(-1.0)
    return torch.multinomial(p / p.sum(), b * t, replacement=True, generator=g).view(b, t)


def _watched(lr: float, data, steps: int = 80, echo=None, out=None):
    torch.manual_seed(0)
    model = build_model(ModelConfig(n_layers=2, d_model=32, n_heads=4, max_len=32, vocab_size=V, wrap="pre"))
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    g = torch.Generator().manual_seed(1)
    with depthlab.watch(model, opt, every=5, steps=steps, echo=echo, out=out) as w:
        for _ in range(steps):
            x = data(g)
            logits = model(x)
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), x[:, 1:].flatten())
            loss.backward()
            opt.step()
            opt.zero_grad()
            w.step(loss)
    return w


def test_a_sane_run_is_trained_and_the_outcome_is_in_watch_json(tmp_path):
    w = _watched(3e-3, _context_batch, out=str(tmp_path / "run"))
    assert w.outcome()["outcome"] == "trained", w.outcome()
    summary = json.loads((tmp_path / "run" / "watch.json").read_text())
    assert summary["outcome"]["outcome"] == "trained" and summary["lr"] == pytest.approx(3e-3)
    assert summary["final_loss"] < 0.95 * summary["unigram_loss"]


def test_a_run_on_context_free_tokens_is_stalled_and_warned_live():
    echo = io.StringIO()
    w = _watched(3e-3, _unigram_batch, echo=echo)
    o = w.outcome()
    assert o["outcome"] == "stalled" and "unigram level" in o["reason"], o
    stuck = [x for x in w.warnings if x["code"] == "stuck-at-baseline"]
    assert len(stuck) == 1 and stuck[0]["step"] < 80 and "stuck-at-baseline" in echo.getvalue()


def test_a_run_at_lr_half_is_diverged():
    w = _watched(0.5, _context_batch)
    o = w.outcome()
    assert o["outcome"] == "diverged" and o["step"] is not None, o
    assert [x["code"] for x in w.warnings].count("diverged") == 1


def test_no_outcome_without_a_reference():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
    w = depthlab.watch(model, every=1, blocks=list(model), echo=None)
    for _ in range(3):
        model(torch.randn(2, 4)).pow(2).mean().backward()
        w.step(1.0)
    w.close()
    assert w.outcome()["outcome"] is None and "unigram_loss=" in w.outcome()["reason"]


def test_update_ratio_spike_fires_on_a_stream_that_explodes_by_the_second_log():
    """The case of a hot run: layer 3's update ratio 5,057 at step 10 against 1.2 at step 1."""

    def rec(step, ratio):
        rows = [{"index": 0}] + [{"index": i, "update_ratio": 1.2 if i != 3 else ratio} for i in (1, 2, 3)]
        return {"step": step, "loss": 3.2, "layers": rows}

    (w,) = replay([rec(1, 1.2), rec(10, 5057.0)], Thresholds())
    assert w["code"] == "update-ratio-spike" and w["layer"] == 3 and "stream update ratio" in w["message"]
    assert replay([rec(1, 1.2), rec(10, 3.0)], Thresholds()) == []

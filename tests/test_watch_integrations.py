"""The watcher in other libraries' loops: a Hugging Face model in a plain loop (against hooks +
retain_grad, sdpa and eager attention), the HF Trainer callback, the Lightning callback."""

from __future__ import annotations

import math

import pytest
import torch

import depthlab
from depthlab import ModelConfig, build_model

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("one_thread")


def _gpt2(attn: str):
    cfg = transformers.GPT2Config(
        n_layer=3,
        n_embd=32,
        n_head=4,
        vocab_size=64,
        n_positions=32,
        bos_token_id=0,
        eos_token_id=0,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )  # no dropout: the watched run and the hand computation must see the same network
    cfg._attn_implementation = attn
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(cfg)


def _tokens(seed: int) -> torch.Tensor:
    return torch.randint(0, 64, (4, 16), generator=torch.Generator().manual_seed(seed))


def _by_hand(model, tokens):
    """(loss, per-block output grads by retain_grad, per-layer attention entropy from the returned weights)."""
    outs = []
    hs = [
        b.register_forward_hook(lambda m, a, o: outs.append(o[0] if isinstance(o, tuple) else o))
        for b in model.transformer.h
    ]
    res = model(input_ids=tokens, labels=tokens, output_attentions=True)
    for h in hs:
        h.remove()
    for o in outs:
        o.retain_grad()
    res.loss.backward()
    ent = [(-(a * a.clamp_min(1e-45).log()).sum(-1)).mean().item() for a in res.attentions]
    return res.loss.item(), [o.grad.norm().item() for o in outs], ent


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_hf_gpt2_in_a_plain_loop_matches_hooks_and_retain_grad(attn):
    model, twin = _gpt2(attn), _gpt2("eager")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = _tokens(1)
    with depthlab.watch(model, opt, every=2, echo=None) as w:
        for t in range(1, 3):
            x = tokens if t == 1 else _tokens(t)
            model(input_ids=x, labels=x).loss.backward()  # the loss comes from the output
            opt.step()
            opt.zero_grad()
    rec = w.records[0]
    loss, grads, ent = _by_hand(twin, tokens)
    assert [r["step"] for r in w.records] == [1, 2] and rec["loss"] == pytest.approx(loss, rel=1e-5)
    assert [r["grad_norm"] for r in rec["layers"][1:]] == pytest.approx(grads, rel=1e-5)
    assert [r["attn_entropy"] for r in rec["layers"][1:]] == pytest.approx(ent, rel=1e-5)
    assert all(r["attn_logit_max"] > 0 and r["attn_grad_norm"] > 0 for r in rec["layers"][1:])
    assert w.stack.path == "transformer.h" and rec["logit_lse"] > 0


def test_hf_trainer_callback(tmp_path):
    pytest.importorskip("accelerate")
    from depthlab.integrations.hf import DepthlabCallback

    model = _gpt2("sdpa")
    data = [{"input_ids": _tokens(i)[0], "labels": _tokens(i)[0]} for i in range(24)]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "hf"), max_steps=6, per_device_train_batch_size=4, logging_steps=2,
        report_to=[], use_cpu=True, save_strategy="no", learning_rate=1e-3, disable_tqdm=True,
    )  # fmt: skip
    cb = DepthlabCallback(out=str(tmp_path / "watched"), echo=None)
    before = {k: dict(m._forward_hooks) for k, m in model.named_modules()}
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=[cb])
    trainer.train()
    w = cb.watcher
    assert [r["step"] for r in w.records] == [1, 2, 4, 6] and w.closed
    assert all(len(r["layers"]) == 4 and r["layers"][3]["attn_grad_norm"] > 0 for r in w.records)
    logged = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert w.records[2]["loss"] == pytest.approx(logged[1], rel=1e-3)  # steps 3-4, as the Trainer logs them
    assert (tmp_path / "watched" / "metrics.jsonl").read_text().count("\n") == 4
    assert {k: dict(m._forward_hooks) for k, m in model.named_modules()} == before


def test_lightning_callback(tmp_path):
    L = pytest.importorskip("lightning.pytorch")
    from depthlab.integrations.lightning import DepthlabCallback

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = build_model(ModelConfig(n_layers=2, d_model=32, n_heads=4, max_len=32))

        def training_step(self, batch, idx):
            logits = self.model(batch)
            return torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), batch[:, 1:].flatten())

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=1e-3)

    data = torch.utils.data.DataLoader([_tokens(i)[0] for i in range(20)], batch_size=4)
    cb = DepthlabCallback(every=2, out=str(tmp_path / "pl"), echo=None)
    trainer = L.Trainer(
        max_steps=5, callbacks=[cb], logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, accelerator="cpu",
    )  # fmt: skip
    trainer.fit(Module(), data)
    w = cb.watcher
    assert [r["step"] for r in w.records] == [1, 2, 4] and w.t - 1 == 5  # 5 optimizer steps counted
    assert all(math.isfinite(r["loss"]) and len(r["layers"]) == 3 for r in w.records)
    assert all(r["layers"][1]["param_update"] > 0 and r["layers"][1]["attn_entropy"] > 0 for r in w.records)
    assert w.closed and (tmp_path / "pl" / "watch.json").exists()

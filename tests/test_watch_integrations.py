"""The watcher in other libraries' loops: a Hugging Face model in a plain loop (against hooks +
retain_grad, sdpa and eager attention), the HF Trainer callback, the Lightning callback."""

from __future__ import annotations

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


def _hf_trainer(tmp_path, callbacks, **args):
    pytest.importorskip("accelerate")
    data = [{"input_ids": _tokens(i)[0], "labels": _tokens(i)[0]} for i in range(64)]
    kw = dict(max_steps=6, per_device_train_batch_size=4, logging_steps=2, save_strategy="no")
    kw.update(args)
    targs = transformers.TrainingArguments(
        output_dir=str(tmp_path / "hf"),
        report_to=[],
        use_cpu=True,
        learning_rate=1e-3,
        disable_tqdm=True,
        **kw,
    )
    return transformers.Trainer(model=_gpt2("sdpa"), args=targs, train_dataset=data, callbacks=callbacks)


def test_hf_trainer_callback(tmp_path):
    from depthlab.integrations.hf_trainer import DepthlabCallback

    cb = DepthlabCallback(out=str(tmp_path / "watched"), echo=None)
    trainer = _hf_trainer(tmp_path, [cb])
    model = trainer.model
    before = {k: dict(m._forward_hooks) for k, m in model.named_modules()}
    trainer.train()
    w = cb.watcher
    assert [r["step"] for r in w.records] == [1, 2, 4, 6] and w.closed
    assert all(len(r["layers"]) == 4 and r["layers"][3]["attn_grad_norm"] > 0 for r in w.records)
    logged = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert w.records[2]["loss"] == pytest.approx(logged[1], rel=1e-3)  # steps 3-4, as the Trainer logs them
    assert (tmp_path / "watched" / "metrics.jsonl").read_text().count("\n") == 4
    assert {k: dict(m._forward_hooks) for k, m in model.named_modules()} == before


@pytest.mark.parametrize("first", [False, True])
def test_hf_callback_records_step_1_and_the_trainers_later_loss_windows(tmp_path, first):
    """logging_steps 5 of 10: the watcher measures step 1 (the checks' baseline at init), so its record
    at step 5 holds the loss of steps 2-5 where the Trainer's covers 1-5 (2-5 too with
    logging_first_step); the window 6-10 is the Trainer's."""
    from depthlab.integrations.hf_trainer import DepthlabCallback

    cb = DepthlabCallback(echo=None)
    trainer = _hf_trainer(tmp_path, [cb], max_steps=10, logging_steps=5, logging_first_step=first)
    trainer.train()
    logged = {h["step"]: h["loss"] for h in trainer.state.log_history if "loss" in h}
    assert sorted(logged) == ([1, 5, 10] if first else [5, 10])
    one, five, ten = cb.watcher.records
    assert [one["step"], five["step"], ten["step"]] == [1, 5, 10]
    assert ten["loss"] == pytest.approx(logged[10], rel=1e-5)
    if first:
        assert [one["loss"], five["loss"]] == pytest.approx([logged[1], logged[5]], rel=1e-5)
    else:  # the Trainer's 1-5 is step 1's loss and the record's 2-5 together
        assert (one["loss"] + 4 * five["loss"]) / 5 == pytest.approx(logged[5], rel=1e-5)


class _Logs(transformers.TrainerCallback):
    """Keeps every ``logs`` dict as the callbacks after depthlab's see it (log_history holds a copy taken
    before on_log)."""

    def __init__(self):
        self.seen = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.seen.append({**logs, "step": state.global_step})


def test_hf_trainer_under_gradient_accumulation_records_the_loss_the_trainer_logs(tmp_path):
    """4 micro-batches per step: the Trainer passes num_items_in_batch, each micro-batch's .loss is a
    quarter-share of the step's; the record holds their sum, the Trainer's logged loss, on that step."""
    from depthlab.integrations.hf_trainer import DepthlabCallback

    cb, logs = DepthlabCallback(echo=None), _Logs()
    trainer = _hf_trainer(
        tmp_path, [cb, logs], max_steps=3, per_device_train_batch_size=2, gradient_accumulation_steps=4,
        logging_steps=1,
    )  # fmt: skip
    trainer.train()
    logged = {h["step"]: h["loss"] for h in trainer.state.log_history if "loss" in h}
    assert [r["step"] for r in cb.watcher.records] == [1, 2, 3] and sorted(logged) == [1, 2, 3]
    assert [r["loss"] for r in cb.watcher.records] == pytest.approx([logged[t] for t in (1, 2, 3)], rel=1e-5)
    assert min(logged.values()) > 3.0  # the step's whole loss (about log 64), not a share of it
    # on_log at step N carries step N's record, not the one before
    steps = [x for x in logs.seen if "loss" in x]
    assert [x["depthlab/loss"] for x in steps] == pytest.approx([x["loss"] for x in steps], rel=1e-5)
    by_step = {r["step"]: r for r in cb.watcher.records}
    assert [x["depthlab/grad_norm"] for x in steps] == [by_step[x["step"]]["grad_norm"] for x in steps]
    # the closing summary at the last step (train_loss, the mean over the run) gets no step's numbers
    (closing,) = [x for x in logs.seen if "train_loss" in x]
    assert not [k for k in closing if k.startswith("depthlab/")]


def test_hf_callback_every_from_a_fractional_logging_steps_and_resume(tmp_path):
    """logging_steps 0.5 of 4 steps logs every 2nd; a run resumed at step 2 counts on from 3."""
    from depthlab.integrations.hf_trainer import DepthlabCallback

    cb = DepthlabCallback(echo=None)
    _hf_trainer(tmp_path, [cb], max_steps=4, logging_steps=0.5).train()
    assert cb.watcher.every == 2 and [r["step"] for r in cb.watcher.records] == [1, 2, 4]

    first = DepthlabCallback(every=1, echo=None)
    _hf_trainer(tmp_path / "a", [first], max_steps=4, save_strategy="steps", save_steps=2).train()
    again = DepthlabCallback(every=1, echo=None)
    trainer = _hf_trainer(tmp_path / "a", [again], max_steps=4)
    trainer.train(resume_from_checkpoint=str(tmp_path / "a" / "hf" / "checkpoint-2"))
    assert [r["step"] for r in again.watcher.records] == [3, 4] and again.watcher.t == 5
    logged = {h["step"]: h["loss"] for h in trainer.state.log_history if "loss" in h}
    mean = sum(r["loss"] for r in again.watcher.records) / 2  # the Trainer logs steps 3-4 at step 4
    assert mean == pytest.approx(logged[4], rel=1e-5)


def _pl_module():
    """A depthlab stack in a LightningModule; its ``seen`` keeps training_step's own losses."""
    L = pytest.importorskip("lightning.pytorch")

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.model = build_model(ModelConfig(n_layers=2, d_model=32, n_heads=4, max_len=32))
            self.seen: list[float] = []

        def training_step(self, batch, idx):
            logits = self.model(batch)
            loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), batch[:, 1:].flatten())
            self.seen.append(loss.item())
            return loss

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=1e-3)

    return Module()


def _pl_fit(cb, module, max_steps, ckpt_path=None, **kw):
    L = pytest.importorskip("lightning.pytorch")
    data = torch.utils.data.DataLoader([_tokens(i)[0] for i in range(40)], batch_size=2)
    trainer = L.Trainer(
        max_steps=max_steps, callbacks=[cb], logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", **kw,
    )  # fmt: skip
    trainer.fit(module, data, ckpt_path=ckpt_path)
    return trainer


def test_lightning_callback(tmp_path):
    pytest.importorskip("lightning.pytorch")
    from depthlab.integrations.lightning import DepthlabCallback

    cb, module = DepthlabCallback(every=2, out=str(tmp_path / "pl"), echo=None), _pl_module()
    _pl_fit(cb, module, 5)
    w = cb.watcher
    assert [r["step"] for r in w.records] == [1, 2, 4] and w.t - 1 == 5  # 5 optimizer steps counted
    seen = module.seen  # one training_step per optimizer step; a record holds the mean since the last
    assert [r["loss"] for r in w.records] == pytest.approx(
        [seen[0], seen[1], (seen[2] + seen[3]) / 2], rel=1e-5
    )
    assert all(len(r["layers"]) == 3 for r in w.records)
    assert all(r["layers"][1]["param_update"] > 0 and r["layers"][1]["attn_entropy"] > 0 for r in w.records)
    assert w.closed and (tmp_path / "pl" / "watch.json").exists()


def test_lightning_callback_under_gradient_accumulation_and_resume(tmp_path):
    """accumulate_grad_batches 4: each record's loss is the mean of its 4 training_step losses (Lightning
    hands the callback each divided by 4); a fit resumed from step 3's checkpoint counts on from 4."""
    pytest.importorskip("lightning.pytorch")
    from depthlab.integrations.lightning import DepthlabCallback

    cb, module = DepthlabCallback(every=1, echo=None), _pl_module()
    trainer = _pl_fit(cb, module, 3, accumulate_grad_batches=4)
    seen = module.seen
    assert len(seen) == 12 and [r["step"] for r in cb.watcher.records] == [1, 2, 3]
    means = [sum(seen[i : i + 4]) / 4 for i in (0, 4, 8)]
    assert [r["loss"] for r in cb.watcher.records] == pytest.approx(means, rel=1e-5)

    trainer.save_checkpoint(tmp_path / "at3.ckpt")
    again = DepthlabCallback(every=1, echo=None)
    _pl_fit(again, _pl_module(), 5, ckpt_path=str(tmp_path / "at3.ckpt"), accumulate_grad_batches=4)
    assert [r["step"] for r in again.watcher.records] == [4, 5] and again.watcher.t == 6

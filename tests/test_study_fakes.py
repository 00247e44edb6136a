"""A stand-in for the training task, for the study machinery's tests (store, executors, resume, report).

``fake_task(spec)`` returns a payload shaped like the real one (depthlab.study.worker.probe_and_train)
from the run's config alone, without training: post-LN deeper than 2 layers without warmup "stalls",
a run with lr 0.5 crashes (a failed run), everything else "trains". The numbers are a deterministic function of the
config, so tests can check that what the store holds is what this returned. ``DEPTHLAB_FAKE_SLEEP``
(seconds, inherited by the worker processes) makes each run take that long; ``DEPTHLAB_FAKE_PIDS`` (a
folder) makes each run write ``<run hash>.pid`` there as it starts, so a test can kill the very
process that holds a given run.

This module holds no tests; it lives under tests/ so that spawned workers can import it by name.
"""

from __future__ import annotations

import math
import os
import time

from depthlab.study.grid import RunSpec, StudyConfig

UNIGRAM = 3.15


def fails(spec: RunSpec) -> bool:
    return spec.model.wrap == "post" and spec.model.n_layers > 2 and spec.train.warmup == 0


def final_loss(spec: RunSpec) -> float:
    """The fake final loss: at the unigram level for a failing run, below it otherwise."""
    if fails(spec):
        return UNIGRAM + 0.01
    return 2.5 + 0.01 * spec.model.n_layers + 0.001 * spec.train.seed


def fake_records(spec: RunSpec) -> list[dict]:
    """on_log records: loss decaying to final_loss; per stream, a gradient that shrinks toward the
    bottom for a failing run (the interview answer's starved-bottom picture) and stays flat otherwise."""
    L, steps, every = spec.model.n_layers, spec.train.steps, spec.train.log_every
    out = []
    for step in range(0, steps + 1, every):
        frac = step / steps
        loss = final_loss(spec) + (5.5 - final_loss(spec)) * math.exp(-5 * frac)
        layers = []
        for i in range(L + 1):
            g = 10.0 ** (-4 * (L - i) / L) if fails(spec) else 1.0
            layers.append(
                {
                    "index": i,
                    "grad_norm": g,
                    "stream_rms": 1.0 + 0.1 * i,
                    "update_ratio": None if i == 0 else 0.1,
                    "cos_prev": None if i == 0 else 0.9,
                    "attn_grad_norm": None if i == 0 else g / 2,
                    "cross_grad_norm": None,
                    "ffn_grad_norm": None if i == 0 else g / 2,
                    "param_update": None if i == 0 else 1e-3,
                }
            )
        out.append(
            {
                "step": step,
                "loss": loss,
                "lr": spec.train.lr,
                "grad_norm": 1.0,
                "val_loss": loss + 0.05 if step == steps else None,
                "tokens_per_s": 1000.0,
                "layers": layers,
            }
        )
    return out


def fake_probe(spec: RunSpec) -> dict:
    """A probe JSON: post-LN gets a warmup-required warning, everything else ok."""
    L = spec.model.n_layers
    layers = [
        {"index": i, "grad_norm": 1.0 / (1 + i), "stream_rms": 1.0, "update_ratio": None, "cos_prev": None}
        for i in range(L + 1)
    ]
    if spec.model.wrap == "post":
        verdicts = [
            {"level": "warning", "code": "warmup-required", "message": "post-LN at depth <needs> warmup"}
        ]
    else:
        verdicts = [{"level": "ok", "code": "gradient-flow", "message": "fine"}]
    return {"config": {}, "layers": layers, "verdicts": verdicts}


def fake_task(spec: RunSpec) -> dict:
    """The payload of one fake run (see the module docstring)."""
    pids = os.environ.get("DEPTHLAB_FAKE_PIDS")
    if pids:
        with open(os.path.join(pids, f"{spec.hash}.pid.tmp"), "w") as f:
            f.write(str(os.getpid()))
        os.replace(os.path.join(pids, f"{spec.hash}.pid.tmp"), os.path.join(pids, f"{spec.hash}.pid"))
    delay = float(os.environ.get("DEPTHLAB_FAKE_SLEEP", "0"))
    if delay:
        time.sleep(delay)
    if spec.train.lr == 0.5:  # a deliberate crash, to test failed runs
        raise RuntimeError("fake crash for lr=0.5")
    loss = final_loss(spec)
    result = {
        "outcome": "stalled" if fails(spec) else "trained",
        "reason": "loss at the unigram level" if fails(spec) else None,
        "step": spec.train.steps if fails(spec) else None,
        "final_train_loss": loss,
        "val_loss": loss + 0.05,
        "val_bpb": (loss + 0.05) / math.log(2),
        "unigram_loss": UNIGRAM,
        "accuracy": None,
        "tokens_per_s": 1000.0,
    }
    return {
        "result": result,
        "metrics": fake_records(spec),
        "probe": fake_probe(spec),
        "data_info": {"fake": True},
    }


def fake_study(name: str = "fake", depths=(2, 4), seeds=(0,), warmups=(0, 5), steps: int = 20) -> StudyConfig:
    """A study over post/pre x depths x warmups x seeds, with small configs."""
    return StudyConfig.from_dict(
        {
            "name": name,
            "model": {"d_model": 16, "n_heads": 2, "max_len": 16},
            "train": {"steps": steps, "log_every": 5, "seq_len": 16, "batch_size": 2},
            "axes": {
                "wrap": ["post", "pre"],
                "n_layers": list(depths),
                "warmup": list(warmups),
                "seed": list(seeds),
            },
        }
    )


def fill_store(db: str, study: StudyConfig, leave_queued: int = 0, task=None) -> int:
    """Record ``study`` in the store at ``db`` and finish its runs in this process with ``task``
    (default fake_task; no pool: fast), leaving the last ``leave_queued`` runs queued. Returns the
    study id."""
    from depthlab.study import Store
    from depthlab.study.store import owner_id

    specs = study.expand()
    with Store(db) as s:
        sid = s.add_study(study.name, study.to_dict(), study.config_hash(), specs)
        for run, spec in list(zip(s.runs(sid), specs))[: len(specs) - leave_queued]:
            s.claim(run["id"], owner_id())
            try:
                payload = (task or fake_task)(spec)
            except RuntimeError as e:
                payload = {"error": f"RuntimeError: {e}"}
            s.finish(run["id"], {**payload, "host": "testhost", "seconds": 0.1})
    return sid


def lr_best(spec: RunSpec) -> float:
    """The fake best learning rate: 1e-2 at 2 layers, falling as depth^-1 (a slope of -1)."""
    return 1e-2 * 2 / spec.model.n_layers


def lr_final_loss(spec: RunSpec) -> float | None:
    """A parabola in log10(lr) around lr_best, 0.25 nats per decade squared (post-LN: 1.0, a sharper
    valley), plus 0.01 per seed; None (diverged) from 30x the best learning rate up."""
    lr, best = spec.train.lr, lr_best(spec)
    if lr >= 30 * best:
        return None
    width = 1.0 if spec.model.wrap == "post" else 0.25
    return 2.5 + width * math.log10(lr / best) ** 2 + 0.01 * spec.train.seed


def lr_task(spec: RunSpec) -> dict:
    """A payload whose final loss is lr_final_loss (l0 = 5.5 at step 0), for learning-rate studies."""
    loss = lr_final_loss(spec)
    records = [dict(r, loss=5.5 if r["step"] == 0 else r["loss"]) for r in fake_records(spec)]
    records[0]["step"] = 1
    outcome = "diverged" if loss is None else ("trained" if loss < 0.95 * UNIGRAM else "stalled")
    result = {"outcome": outcome, "reason": None, "step": None, "final_train_loss": loss, "val_loss": loss,
              "val_bpb": None, "unigram_loss": UNIGRAM, "accuracy": None, "tokens_per_s": 1.0}  # fmt: skip
    return {"result": result, "metrics": records, "probe": fake_probe(spec), "data_info": {"fake": True}}


def speaking_task(spec: RunSpec) -> dict:
    """A run that fails at once, naming an option as its process names it (the driver's words)."""
    from depthlab.errors import option

    return {"error": f"InputError: use {option('force_memory')}"}

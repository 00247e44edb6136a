"""Init conventions are explicit choices, named in the probe's header and in explain, and a verdict says
whether it comes from the init or from the wiring (by probing the same wiring under depthlab's reference
init: xavier, a tied head, embeddings x sqrt(d)).

The shape below is Llama's wiring (pre-RMSNorm, SwiGLU, RoPE, no biases) at 8 layers x 128; as Hugging
Face builds it (normal(0.02), untied, unscaled embeddings) its stream starts at rms 0.02 (a jump out of
the embedding that the probe does not count as stream growth); sandwich warns of exploding gradients,
which the reference init does not get.
"""

from __future__ import annotations

import pytest

from depthlab import FamilyOptions, ModelConfig
from depthlab.cli import main
from depthlab.model.explain import explain, init_summary
from depthlab.probe.from_config import probe_config, reference_init

pytestmark = pytest.mark.usefixtures("one_thread")

LLAMA = dict(
    n_layers=8,
    d_model=128,
    n_heads=4,
    d_ff=344,
    norm="rmsnorm",
    activation="swiglu",
    position="rope",
    bias=False,
)
HF_INIT = dict(init="normal", tie_embeddings=False, embed_scale=False, family=FamilyOptions(init_std=0.02))


def _verdicts(r) -> dict:
    return {v.code: (v.level, v.cause) for v in r.verdicts}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_llama_and_sandwich_flip_with_the_init_and_say_so(seed):
    # Hugging Face's init starts the stream at rms 0.02; the jump out of that unscaled embedding is not
    # stream growth (judged from the stream after the first block), so pre-LN's growth is ok under it
    pre = probe_config(ModelConfig(**LLAMA, **HF_INIT), batch_size=2, seq_len=16, seed=seed)
    assert _verdicts(pre)["stream-growth"] == ("ok", None)
    assert "after the first block" in next(v.message for v in pre.verdicts if v.code == "stream-growth")
    sandwich = probe_config(
        ModelConfig(**LLAMA, **HF_INIT, wrap="sandwich"), batch_size=2, seq_len=16, seed=seed
    )
    assert _verdicts(sandwich)["exploding-gradient"] == ("warning", "init")
    assert "[from the init: the same wiring under init xavier, tied head" in sandwich.verdicts[0].message
    ref = probe_config(ModelConfig(**LLAMA, wrap="sandwich"), batch_size=2, seq_len=16, seed=seed)
    assert [v.level for v in ref.verdicts] == ["ok"] * len(ref.verdicts)  # the reference init: ok


def test_a_verdict_the_reference_init_shares_is_the_wiring():
    cfg = ModelConfig(n_layers=6, d_model=32, n_heads=4, wrap="pre", final_norm="off", **HF_INIT)
    r = probe_config(cfg, batch_size=2, seq_len=16)
    level, cause = _verdicts(r)["missing-final-norm"]
    assert level in ("warning", "error") and cause == "wiring"
    assert "[from the wiring" in next(v.message for v in r.verdicts if v.code == "missing-final-norm")


def test_the_reference_init_is_not_probed_twice():
    cfg = ModelConfig(n_layers=2, d_model=16, n_heads=2, final_norm="off")
    assert reference_init(cfg) is None and reference_init(cfg.replace(init="gpt2")) is not None
    r = probe_config(cfg, batch_size=2, seq_len=8)
    assert "reference_init" not in r.config["probe"] and all(v.cause is None for v in r.verdicts)


def test_init_is_named_in_explain_and_the_probe_header(capsys):
    assert init_summary(ModelConfig(**HF_INIT)) == "normal(0.02), untied head, embeddings x 1"
    assert explain(ModelConfig(n_layers=1))["init"] == "xavier, tied head, embeddings x sqrt(d)"
    args = "probe --layers 2 --d-model 16 --heads 2 --seq-len 8 --batch-size 2 --init normal --init-std 0.05"
    assert main([*args.split(), "--tie-embeddings", "off", "--embed-scale", "off"]) == 0
    assert "init: normal(0.05), untied head, embeddings x 1" in capsys.readouterr().out
    assert main(["explain", "--layers", "1", "--tie-embeddings", "maybe"]) == 2
    assert "--tie-embeddings maybe is not allowed" in capsys.readouterr().err

"""The probe's numbers equal an independent computation (forward hooks, retain_grad, backward) on HF models,
and the probe leaves the model as it found it.

Only the Hugging Face tests need transformers (each is marked ``needs_transformers``); the tests on
depthlab models, torch.nn.Transformer* and the toys run without it.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

from depthlab import ConfigError, InputError, ModelConfig, build_model
from depthlab.probe import probe
from depthlab.probe.result import BAR, BAR_HEADER, PER_DECADE, REQUIRED, log_bars

try:
    import transformers
except ImportError as e:  # only the Hugging Face tests below are skipped
    transformers, _no_transformers = None, f"transformers is not importable ({e}); pip install -e '.[dev]'"
else:
    transformers.logging.set_verbosity_error()
    _no_transformers = ""

needs_transformers = pytest.mark.skipif(transformers is None, reason=_no_transformers)

V, B, T = 256, 2, 12


def _gpt2():
    cfg = transformers.GPT2Config(
        n_layer=3,
        n_embd=32,
        n_head=4,
        vocab_size=V,
        n_positions=32,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    groups = {"attn": lambda n: n.startswith("attn."), "ffn": lambda n: n.startswith("mlp.")}
    return transformers.GPT2LMHeadModel(cfg), lambda m: m.transformer.h, groups


def _bert():
    cfg = transformers.BertConfig(
        num_hidden_layers=3,
        hidden_size=32,
        num_attention_heads=4,
        intermediate_size=64,
        vocab_size=V,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    groups = {
        "attn": lambda n: n.startswith("attention.") and "LayerNorm" not in n,
        "ffn": lambda n: n.startswith("intermediate.") or n.startswith("output.dense"),
    }
    return transformers.BertForMaskedLM(cfg), lambda m: m.bert.encoder.layer, groups


def _llama():
    cfg = transformers.LlamaConfig(
        num_hidden_layers=3,
        hidden_size=32,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        vocab_size=V,
        max_position_embeddings=32,
    )
    groups = {"attn": lambda n: n.startswith("self_attn."), "ffn": lambda n: n.startswith("mlp.")}
    return transformers.LlamaForCausalLM(cfg), lambda m: m.model.layers, groups


def reference(model, blocks, groups, tokens):
    """Written apart from the probe: hooks collect the block inputs/outputs, retain_grad + backward."""
    states = []
    hooks = [
        blocks[0].register_forward_pre_hook(
            lambda m, a, k: states.append(a[0] if a else k["hidden_states"]), with_kwargs=True
        )
    ]
    hooks += [
        b.register_forward_hook(lambda m, a, o: states.append(o[0] if isinstance(o, tuple) else o))
        for b in blocks
    ]
    model.eval()
    logits = model(tokens).logits
    for h in hooks:
        h.remove()
    for s in states:
        s.retain_grad()
    F.cross_entropy(logits[:, :-1].reshape(-1, V), tokens[:, 1:].reshape(-1)).backward()
    rows = []
    for i, s in enumerate(states):
        prev = states[i - 1] if i else None
        row = {"grad_norm": s.grad.norm().item(), "stream_rms": s.detach().pow(2).mean().sqrt().item()}
        if i:
            row["update_ratio"] = ((s - prev).norm() / prev.norm()).item()
            row["cos_prev"] = F.cosine_similarity(s, prev, dim=-1).mean().item()
            named = dict(blocks[i - 1].named_parameters())
            for g, member in groups.items():
                row[f"{g}_grad_norm"] = (
                    sum(p.grad.pow(2).sum() for n, p in named.items() if member(n)).sqrt().item()
                )
        rows.append(row)
    return rows


@needs_transformers
@pytest.mark.parametrize("make", [_gpt2, _bert, _llama], ids=["gpt2", "bert", "llama"])
def test_probe_matches_independent_computation(make, one_thread, randomize):
    torch.manual_seed(0)
    model, blocks_of, groups = make()
    randomize(model, gain=1.0)  # varied weights, so a mis-hooked block or mis-grouped weight shows
    tokens = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(1))
    result = probe(model, tokens, loss="lm")
    ref = reference(model, blocks_of(model), groups, tokens)
    assert len(result.layers) == len(ref) == 4
    for ours, theirs in zip(result.layers, ref):
        for key, value in theirs.items():
            assert ours[key] == pytest.approx(value, rel=1e-5, abs=1e-7), key


def test_probe_leaves_model_grads_mode_and_rng_untouched(one_thread):
    torch.manual_seed(0)
    model = build_model(ModelConfig(n_layers=3, d_model=32, n_heads=4))
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    tokens = torch.randint(0, 256, (B, T))
    rng = torch.get_rng_state()
    result = probe(model, tokens, jacobian_probes=2)
    assert model.training
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # perturbation undone
    assert torch.equal(rng, torch.get_rng_state())
    assert result.layers[0]["output_change"] == 0 and result.layers[-1]["output_change"] > 0


def test_probe_restores_mixed_train_eval_modes_exactly(one_thread):
    model = build_model(ModelConfig(n_layers=2, d_model=16, n_heads=2))
    model.train()
    model.stack.layers[1].eval()  # a user froze one block's dropout: the probe must not undo that
    modes = {name: m.training for name, m in model.named_modules()}
    probe(model, torch.randint(0, 256, (B, T)))
    assert {name: m.training for name, m in model.named_modules()} == modes


def test_batchnorm_uses_batch_statistics_and_its_buffers_are_restored(one_thread):
    torch.manual_seed(0)  # eval-mode BatchNorm at init is the identity: the probe would see no norm
    model = build_model(ModelConfig(n_layers=4, d_model=16, n_heads=2, wrap="post", norm="batchnorm"))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    r = probe(model, torch.randint(0, 256, (B, T)))
    assert r.column("stream_rms")[1:] == pytest.approx([1.0] * 4, rel=1e-3)  # renormalised every block
    assert "batch statistics" in r.config["probe"]["mode"]
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # running stats too
    assert model.training


def test_bfloat16_weights_turn_the_output_change_off_with_a_note(one_thread):
    torch.manual_seed(0)
    model = build_model(ModelConfig(n_layers=4, d_model=32, n_heads=2, wrap="admin")).to(torch.bfloat16)
    r = probe(model, torch.randint(0, 256, (B, T)))
    assert r.config["probe"]["output_change"] is None and r.column("output_change") == [None] * 5
    assert "bfloat16" in r.config["probe"]["output_change_note"]
    codes = {v.code for v in r.verdicts}
    assert codes and "warmup-required" not in codes  # a verdict, but no warmup one from an unmeasured change


def test_an_overflowing_stack_gives_strict_json_and_one_non_finite_error(one_thread):
    torch.manual_seed(0)  # post-LN without a norm: every block adds to an unnormalised stream
    model = build_model(ModelConfig(n_layers=200, d_model=16, n_heads=2, wrap="post", norm="none"))
    r = probe(model, torch.randint(0, 256, (2, 8)))
    assert any(not math.isfinite(v) for v in r.column("stream_rms"))  # the premise: it overflows
    assert [(v.level, v.code) for v in r.verdicts] == [("error", "non-finite")]
    text = json.dumps(r.to_dict(), allow_nan=False)  # raises on NaN/Infinity
    assert "null" in text


def test_json_has_design_keys(one_thread):
    model = build_model(ModelConfig(n_layers=2, d_model=32, n_heads=4))
    d = probe(model, torch.randint(0, 256, (B, T))).to_dict()
    assert set(d) == {"config", "layers", "verdicts"}
    assert [row["index"] for row in d["layers"]] == [0, 1, 2]
    assert all(set(REQUIRED) <= set(row) for row in d["layers"])
    assert d["layers"][0]["update_ratio"] is None and d["layers"][0]["cos_prev"] is None
    assert d["verdicts"] and all(set(v) == {"level", "code", "message"} for v in d["verdicts"])
    assert ModelConfig.from_dict(d["config"]["model"]).n_layers == 2


def test_the_table_is_headed_by_the_json_keys(one_thread):
    model = build_model(ModelConfig(n_layers=2, d_model=32, n_heads=4))
    r = probe(model, torch.randint(0, 256, (B, T)))
    text = r.format()
    header = next(line for line in text.splitlines() if line.lstrip().startswith("index"))
    words = header.replace(BAR_HEADER, "").split()
    assert words[:2] == ["index", "grad_norm"] and {"stream_rms", "update_ratio"} <= set(words)
    assert set(words) <= set(r.to_dict()["layers"][1]), set(words) - set(r.to_dict()["layers"][1])


def test_gradient_bars_are_on_a_fixed_log_scale():
    """Min-max scaling drew a 1.1x spread as bars from 20 characters to 1: a fixed scale draws them
    nearly equal, PER_DECADE characters per factor of 10 below the largest."""
    near = log_bars([1.0, 1.05, 1.1])
    assert len(near[-1]) == BAR and max(map(len, near)) - min(map(len, near)) <= 1
    assert log_bars([1e-2, 1e-1, 1.0]) == ["#" * (BAR - 2 * PER_DECADE), "#" * (BAR - PER_DECADE), "#" * BAR]
    # a value draws the same bar whatever the smallest value of the column is
    assert log_bars([0.1, 1.0])[0] == log_bars([1e-4, 0.1, 1.0])[1]
    assert log_bars([1e-9, 1.0, None, math.inf]) == ["<", "#" * BAR, "", "?"]  # off the scale, missing


def test_context_gradient_is_the_centred_top_gradient_carried_down(one_thread):
    """context_grad_norm[i] = ||J_i^T (g_L - mean over positions)||, recomputed with autograd here."""
    torch.manual_seed(0)
    model = build_model(ModelConfig(n_layers=3, d_model=32, n_heads=4)).eval()
    tokens = torch.randint(0, 256, (B, T))
    logits, states = model(tokens, return_states=True)
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, 256), tokens[:, 1:].reshape(-1))
    (g_top,) = torch.autograd.grad(loss, states[-1], retain_graph=True)
    centred = g_top - g_top.mean(dim=1, keepdim=True)
    below = torch.autograd.grad(states[-1], states[:-1], grad_outputs=centred)
    expected = [v.norm().item() for v in below] + [centred.norm().item()]
    assert probe(model, tokens).column("context_grad_norm") == pytest.approx(expected, rel=1e-5)


def test_a_sequence_first_torch_stack_is_probed_as_its_batch_first_twin(one_thread):
    """torch's Transformer layers carry (T, B, d) by default (batch_first=False): the probe reads positions
    on that axis, so the same weights on the same data give the same rows and batch shape either way."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True, norm_first=True)
    first = torch.nn.TransformerEncoder(layer, 3, norm=torch.nn.LayerNorm(32), enable_nested_tensor=False)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=False, norm_first=True)
    second = torch.nn.TransformerEncoder(layer, 3, norm=torch.nn.LayerNorm(32), enable_nested_tensor=False)
    second.load_state_dict(first.state_dict())
    x = torch.randn(B, T, 32)
    a, b = probe(first, x, loss="sum"), probe(second, x.transpose(0, 1).contiguous(), loss="sum")
    assert b.config["probe"]["batch_shape"] == [B, T, 32]
    for key in ("token_cos", "grad_norm", "stream_rms", "cos_prev"):  # cos_prev: none at stream 0
        assert b.column(key)[1:] == pytest.approx(a.column(key)[1:], rel=1e-4, abs=1e-6), key


@needs_transformers
def test_xlnet_s_sequence_first_stream_is_read_over_its_positions(one_thread):
    """XLNet carries its stream (T, B, d): token_cos equals the one of its own (B, T, d) hidden states, and
    the top context gradient is its top gradient centred over positions (hooked here, not by the probe)."""
    cfg = transformers.XLNetConfig(n_layer=2, d_model=32, n_head=4, d_inner=64, vocab_size=97, dropout=0.0)
    model = transformers.XLNetLMHeadModel(cfg).eval()
    tokens = torch.randint(0, 97, (3, 7), generator=torch.Generator().manual_seed(0))
    from depthlab.probe.stats import token_cosine

    result = probe(model, tokens)
    assert result.config["probe"]["batch_shape"] == [3, 7, 32]
    out = model(tokens, output_hidden_states=True)
    assert result.column("token_cos") == pytest.approx([token_cosine(h) for h in out.hidden_states], rel=1e-4)
    top = []
    model.transformer.layer[-1].register_forward_hook(lambda m, a, o: top.append(o[0]))
    logits = model(tokens).logits
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, 97), tokens[:, 1:].reshape(-1))
    (g,) = torch.autograd.grad(loss, top[-1])  # (T, B, d)
    centred = g - g.mean(dim=0, keepdim=True)
    assert result.layers[-1]["context_grad_norm"] == pytest.approx(centred.norm().item(), rel=1e-4)


def test_jacobian_estimate_on_a_linear_stack(one_thread):
    """x -> x W1 ... WL: d x_L / d x_0 acts on every row by W1...WL, so msv = ||W1...WL||_F^2 / d."""
    from depthlab.probe.toys import ToyStack

    torch.manual_seed(0)
    lins = [torch.nn.Linear(16, 16, bias=False) for _ in range(3)]
    result = probe(ToyStack(lins), torch.randn(4, 8, 16), loss="sum", jacobian_probes=64)
    prod = lins[0].weight.T @ lins[1].weight.T @ lins[2].weight.T
    assert result.layers[0]["jacobian_msv"] == pytest.approx(prod.pow(2).sum().item() / 16, rel=0.1)
    assert result.layers[-1]["jacobian_msv"] == 1.0


def test_encdec_probes_the_decoder_and_torch_stacks(one_thread):
    model = build_model(ModelConfig(arch="encdec", n_layers=2, dec_layers=3, d_model=32, n_heads=4))
    r = probe(model, (torch.randint(0, 256, (B, T)), torch.randint(0, 256, (B, T))))
    assert r.n_layers == 3 and "decoder" in r.config["stack"]["note"] and "cross_grad_norm" in r.layers[1]
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True, norm_first=True)
    enc = torch.nn.TransformerEncoder(layer, 4, norm=torch.nn.LayerNorm(32), enable_nested_tensor=False)
    r = probe(enc, torch.randn(B, T, 32), loss="sum")
    assert r.n_layers == 4 and r.config["stack"]["final_norm"] and not r.config["stack"]["stream_normalised"]
    assert r.layers[1]["attn_grad_norm"] > 0 and r.layers[1]["ffn_grad_norm"] > 0


def test_bad_inputs():
    model = build_model(ModelConfig(n_layers=2, d_model=32, n_heads=4))
    with pytest.raises(ConfigError):
        probe(model, torch.randint(0, 256, (B, T)), loss="mse")
    enc = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True), 2)
    with pytest.raises(InputError):  # no logits, no tokens: the LM loss cannot be formed
        probe(enc, torch.randn(B, T, 32), loss="lm")
    with pytest.raises(InputError):
        probe(torch.nn.Linear(4, 4), torch.randn(2, 4))
    hidden = torch.nn.Sequential(torch.nn.Embedding(256, 32), enc)  # tokens in, hidden states (width 32) out
    with pytest.raises(InputError, match="only 32 classes"):
        probe(hidden, torch.randint(0, 256, (B, T)), loss="lm")
    with pytest.raises(InputError, match="at least 2 tokens"):  # next-token loss of one token: nan
        probe(model, torch.randint(0, 256, (B, 1)))


@needs_transformers
def test_an_hf_model_without_an_lm_head_is_refused():
    bert = transformers.BertModel(
        transformers.BertConfig(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, vocab_size=256
        )
    )
    with pytest.raises(InputError, match="hidden states"):  # no LM head: its output is not logits
        probe(bert, torch.randint(0, 256, (B, T)))

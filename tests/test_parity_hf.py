"""depthlab equals Hugging Face GPT-2, BERT and Llama with imported weights (float32, 1e-5 relative);
the other families are in test_parity_hf_families.py (decoders) and test_parity_hf_seq2seq.py.

Models are built from small configs with random weights (never downloaded), re-randomised so that a
mis-mapped weight cannot hide behind near-uniform attention (see conftest ``randomize``).
"""

from __future__ import annotations

import types

import pytest
import torch

from depthlab import ConfigError, InputError
from depthlab.interop import config_from_hf, from_hf

tf = pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("one_thread")

VOCAB, MAX_LEN, B, T = 97, 16, 2, 13
EAGER = {"attn_implementation": "eager"}  # HF's plain-math attention: an independent reference


def _tokens(seed: int = 0) -> torch.Tensor:
    return torch.randint(0, VOCAB, (B, T), generator=torch.Generator().manual_seed(seed))


def gpt2(n_layer, n_embd, n_head, activation="gelu_new", n_inner=None, tie=True):
    cfg = tf.GPT2Config(
        n_layer=n_layer,
        n_embd=n_embd,
        n_head=n_head,
        n_inner=n_inner,
        activation_function=activation,
        vocab_size=VOCAB,
        n_positions=MAX_LEN,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
        tie_word_embeddings=tie,
        **EAGER,
    )
    return tf.GPT2LMHeadModel(cfg).eval()


def bert(layers, hidden, heads, ffn, activation="gelu"):
    cfg = tf.BertConfig(
        num_hidden_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        intermediate_size=ffn,
        hidden_act=activation,
        vocab_size=VOCAB,
        max_position_embeddings=MAX_LEN,
        type_vocab_size=2,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        pad_token_id=0,
        **EAGER,
    )
    return tf.BertModel(cfg).eval()


def llama(layers, hidden, heads, kv_heads, ffn, theta=10000.0, tie=False):
    cfg = tf.LlamaConfig(
        num_hidden_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        intermediate_size=ffn,
        vocab_size=VOCAB,
        max_position_embeddings=MAX_LEN,
        rope_theta=theta,
        rms_norm_eps=1e-6,
        tie_word_embeddings=tie,
        attention_dropout=0.0,
        bos_token_id=1,
        eos_token_id=2,
        **EAGER,
    )
    return tf.LlamaForCausalLM(cfg).eval()


@pytest.mark.parametrize(
    "n_layer, n_embd, n_head, activation, n_inner, tie",
    [
        (1, 32, 4, "gelu_new", None, True),
        (3, 48, 3, "gelu_new", 72, True),
        (5, 64, 8, "relu", None, False),
        (2, 40, 5, "gelu", 56, True),
    ],
)
def test_gpt2_logits(n_layer, n_embd, n_head, activation, n_inner, tie, randomize, assert_parity):
    hf = randomize(gpt2(n_layer, n_embd, n_head, activation, n_inner, tie))
    ours = from_hf(hf)
    assert ours.cfg.wrap == "pre" and ours.stack.has_final_norm and ours.cfg.tie_embeddings == tie
    tokens = _tokens(n_layer)
    with torch.no_grad():
        assert_parity(ours(tokens), hf(tokens).logits)


@pytest.mark.parametrize(
    "layers, hidden, heads, ffn, activation",
    [(1, 32, 4, 37, "gelu"), (3, 48, 6, 64, "gelu"), (5, 24, 2, 50, "relu")],
)
@pytest.mark.parametrize("padded", [False, True])
def test_bert_final_state(layers, hidden, heads, ffn, activation, padded, randomize, assert_parity):
    hf = randomize(bert(layers, hidden, heads, ffn, activation))
    ours = from_hf(hf)
    assert ours.cfg.wrap == "post" and not ours.stack.has_final_norm and ours.cfg.family.embed_norm
    tokens = _tokens(layers)
    keep = torch.ones(B, T, dtype=torch.long)
    if padded:
        keep[0, 9:] = 0  # right padding
        keep[1, :3] = 0  # left padding
    with torch.no_grad():
        _, states = ours(tokens, padding_mask=keep == 0, return_states=True)
        ref = hf(tokens, attention_mask=keep).last_hidden_state
    assert len(states) == layers + 1
    real = keep.bool()  # padded positions' outputs are unused; compare the real tokens
    assert_parity(states[-1][real], ref[real])


@pytest.mark.parametrize(
    "layers, hidden, heads, kv_heads, ffn, theta, tie",
    [
        (1, 32, 4, 4, 40, 10000.0, False),  # plain multi-head
        (3, 64, 8, 2, 96, 500.0, False),  # GQA, 4 queries per kv head
        (5, 48, 6, 3, 64, 10000.0, False),  # GQA, 2 queries per kv head
        (2, 32, 4, 1, 40, 1e6, True),  # multi-query, tied head
    ],
)
def test_llama_logits(layers, hidden, heads, kv_heads, ffn, theta, tie, randomize, assert_parity):
    hf = randomize(llama(layers, hidden, heads, kv_heads, ffn, theta, tie))
    ours = from_hf(hf)
    cfg = ours.cfg
    assert (cfg.kv_heads, cfg.rope_base, cfg.norm, cfg.activation) == (kv_heads, theta, "rmsnorm", "swiglu")
    tokens = _tokens(layers)
    with torch.no_grad():
        assert_parity(ours(tokens), hf(tokens).logits)


@pytest.mark.parametrize("make", [lambda: gpt2(3, 48, 3, n_inner=72), lambda: llama(3, 64, 8, 2, 96)])
def test_padded_logits_match_at_real_tokens(make, randomize, assert_parity):
    """Left and right padding (attention_mask 0 = our padding_mask True): the real tokens' logits match."""
    hf = randomize(make())
    ours = from_hf(hf)
    tokens, keep = _tokens(5), torch.ones(B, T, dtype=torch.long)
    keep[0, 9:] = 0  # right padding
    keep[1, :3] = 0  # left padding
    with torch.no_grad():
        mine, ref = ours(tokens, padding_mask=keep == 0), hf(tokens, attention_mask=keep).logits
    for r in range(B):
        assert_parity(mine[r][keep[r].bool()], ref[r][keep[r].bool()])


@pytest.mark.parametrize(
    "make", [lambda: gpt2(2, 32, 4), lambda: bert(2, 32, 4, 40), lambda: llama(2, 32, 4, 2, 40)]
)
def test_train_mode_outputs_and_gradients_match(make, randomize, assert_parity):
    """Imported from a model in train mode (no dropout), ours is in train mode and computes the same output;
    the same loss on it gives its parameters gradients of the same total norm (BERT: but its positions and
    token-type table, which ours holds as one table, token type 0 folded in)."""
    hf = randomize(make()).train()
    ours = from_hf(hf)
    assert ours.training
    tokens = _tokens(6)
    out = hf(tokens)
    ref = out.logits if hasattr(out, "logits") else out.last_hidden_state
    mine = ours(tokens, return_states=True)
    mine = mine[0] if hasattr(out, "logits") else mine[1][-1]
    assert_parity(mine.detach(), ref.detach())
    norms, folded = [], ("embed.pos.weight", "position_embeddings.weight", "token_type_embeddings.weight")
    folded = folded if hf.config.model_type == "bert" else ()
    for model, y in ((hf, ref), (ours, mine)):
        params = [p for n, p in model.named_parameters() if p.requires_grad and not n.endswith(folded)]
        grads = torch.autograd.grad(y.pow(2).mean(), params, allow_unused=True)
        norms.append(float(torch.stack([g.norm() for g in grads if g is not None]).norm()))
    assert norms[1] == pytest.approx(norms[0], rel=1e-5)


@pytest.mark.parametrize(
    "make", [lambda: gpt2(2, 32, 4), lambda: bert(2, 32, 4, 40), lambda: llama(2, 32, 4, 2, 40)]
)
def test_a_mis_copied_weight_is_detected(make, randomize, assert_parity, swap_query_heads):
    hf = randomize(make())
    ours = from_hf(hf)
    swap_query_heads(ours)
    tokens = _tokens()
    with torch.no_grad():
        out = hf(tokens)
        ref = out.logits if hasattr(out, "logits") else out.last_hidden_state
        mine = ours(tokens, return_states=True)
        mine = mine[0] if hasattr(out, "logits") else mine[1][-1]
    with pytest.raises(AssertionError, match="not close"):
        assert_parity(mine, ref)


def test_config_from_hf_keeps_hf_values():
    cfg = config_from_hf(bert(3, 48, 6, 64).config)
    assert (cfg.arch, cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.ffn_dim) == ("encoder", 3, 48, 6, 64)
    assert (cfg.family.norm_eps, cfg.embed_scale, cfg.max_len, cfg.vocab_size) == (
        1e-12,
        False,
        MAX_LEN,
        VOCAB,
    )
    cfg = config_from_hf(gpt2(1, 32, 4).config)
    assert (cfg.activation, cfg.ffn_dim, cfg.position, cfg.final_norm) == ("gelu_tanh", 128, "learned", "on")


def test_unsupported_models_and_configs_are_rejected():
    with pytest.raises(InputError, match="GPT2Model"):
        from_hf(tf.GPT2Model(gpt2(1, 32, 4).config))
    with pytest.raises(ConfigError, match="model_type"):
        config_from_hf(types.SimpleNamespace(model_type="mamba"))
    bad_gpt2 = gpt2(1, 32, 4).config
    bad_gpt2.scale_attn_by_inverse_layer_idx = True
    with pytest.raises(ConfigError, match="scale_attn_by_inverse_layer_idx"):
        config_from_hf(bad_gpt2)
    bad_llama = llama(1, 32, 4, 4, 40).config
    bad_llama.rope_parameters = {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}
    with pytest.raises(ConfigError, match="rope_type"):
        config_from_hf(bad_llama)
    bad_bert = bert(1, 32, 4, 40, activation="mish").config
    with pytest.raises(ConfigError, match="hidden_act"):
        config_from_hf(bad_bert)

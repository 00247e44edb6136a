"""Tiny Hugging Face models of every imported family, built from configs with random weights (shared by
the parity tests). Each builder takes keyword overrides of its config; attention is HF's eager path
(plain math: an independent reference)."""

from __future__ import annotations

VOCAB, MAX_LEN = 97, 32


def _tf():
    import transformers

    transformers.logging.set_verbosity_error()
    return transformers


def _build(config_cls: str, model_cls: str, defaults: dict, overrides: dict):
    tf = _tf()
    cfg = getattr(tf, config_cls)(**{**defaults, **overrides, "attn_implementation": "eager"})
    return getattr(tf, model_cls)(cfg).eval()


ROPE = dict(
    hidden_size=32,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=48,
    num_hidden_layers=3,
    vocab_size=VOCAB,
    max_position_embeddings=MAX_LEN,
    rms_norm_eps=1e-6,
    attention_dropout=0.0,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
)


def mistral(**kw):
    return _build("MistralConfig", "MistralForCausalLM", {**ROPE, "head_dim": 8, "sliding_window": 5}, kw)


def qwen2(**kw):
    return _build("Qwen2Config", "Qwen2ForCausalLM", ROPE, kw)


def qwen3(**kw):
    return _build("Qwen3Config", "Qwen3ForCausalLM", {**ROPE, "head_dim": 12}, kw)  # 4 x 12 != 32


def olmo2(**kw):
    return _build("Olmo2Config", "Olmo2ForCausalLM", ROPE, kw)


GEMMA = dict(
    ROPE, head_dim=16, query_pre_attn_scalar=20, sliding_window=4, hidden_activation="gelu_pytorch_tanh"
)


def unit_offset_gains(model):
    """Gemma applies its RMSNorm gains as 1 + w: after conftest's ``randomize`` (gains N(1, 0.2^2)),
    shift w to N(0, 0.2^2) so that Gemma's gains are drawn like every other family's. Returns ``model``."""
    import torch

    with torch.no_grad():
        for m in model.modules():
            if type(m).__name__.startswith("Gemma") and type(m).__name__.endswith("RMSNorm"):
                m.weight.sub_(1.0)
    return model


def gemma2(**kw):
    caps = dict(attn_logit_softcapping=5.0, final_logit_softcapping=3.0)
    return _build("Gemma2Config", "Gemma2ForCausalLM", {**GEMMA, **caps, "num_hidden_layers": 4}, kw)


def gemma3(**kw):
    rope = {
        "full_attention": {"rope_type": "default", "rope_theta": 1e6},
        "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
    }
    kinds = ["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"]
    extra = dict(num_hidden_layers=4, layer_types=kinds, rope_parameters=rope)
    return _build("Gemma3TextConfig", "Gemma3ForCausalLM", {**GEMMA, **extra}, kw)


PARALLEL = dict(
    hidden_size=32,
    num_attention_heads=4,
    num_hidden_layers=3,
    vocab_size=VOCAB,
    max_position_embeddings=MAX_LEN,
    intermediate_size=48,
)


def neox(**kw):
    extra = dict(rotary_pct=0.5, hidden_dropout=0.0, attention_dropout=0.0, use_parallel_residual=True)
    return _build("GPTNeoXConfig", "GPTNeoXForCausalLM", {**PARALLEL, **extra}, kw)


def gptj(**kw):
    base = dict(
        n_embd=32, n_head=4, n_layer=3, vocab_size=VOCAB, n_positions=MAX_LEN, rotary_dim=4, n_inner=48
    )
    base.update(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return _build("GPTJConfig", "GPTJForCausalLM", base, kw)


def falcon(**kw):
    base = {k: v for k, v in PARALLEL.items() if k != "intermediate_size"}
    base.update(ffn_hidden_size=48, hidden_dropout=0.0, attention_dropout=0.0, bos_token_id=1, eos_token_id=2)
    return _build("FalconConfig", "FalconForCausalLM", base, kw)


def phi(**kw):
    extra = dict(partial_rotary_factor=0.5, resid_pdrop=0.0, embd_pdrop=0.0, attention_dropout=0.0)
    return _build("PhiConfig", "PhiForCausalLM", {**PARALLEL, **extra}, kw)


def opt(**kw):
    base = dict(
        hidden_size=32,
        num_attention_heads=4,
        num_hidden_layers=3,
        ffn_dim=48,
        vocab_size=VOCAB,
        max_position_embeddings=MAX_LEN,
        word_embed_proj_dim=32,
        dropout=0.0,
        pad_token_id=0,
    )
    return _build("OPTConfig", "OPTForCausalLM", base, kw)


SEQ2SEQ = dict(
    encoder_layers=2,
    decoder_layers=3,
    d_model=32,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=48,
    decoder_ffn_dim=48,
    vocab_size=VOCAB,
    max_position_embeddings=MAX_LEN,
    dropout=0.0,
    pad_token_id=0,
    decoder_start_token_id=0,
)


def bart(**kw):
    return _build("BartConfig", "BartForConditionalGeneration", SEQ2SEQ, kw)


def marian(**kw):
    return _build(
        "MarianConfig",
        "MarianMTModel",
        {**SEQ2SEQ, "scale_embedding": True, "activation_function": "swish"},
        kw,
    )


def t5_query_scale(model):
    """T5 does not scale its scores by d_kv^-1/2 but folds that factor into q's init (Raffel et al. 2020;
    HF T5's q std (d_model d_kv)^-1/2). conftest's ``randomize`` draws q for scaled attention, so scale
    it by d_kv^-1/2 to give T5's scores the size every other family's get. Returns ``model``."""
    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith((".SelfAttention.q.weight", ".EncDecAttention.q.weight")):
                p.mul_(model.config.d_kv**-0.5)
    return model


def t5(**kw):
    base = dict(
        num_layers=2,
        num_decoder_layers=3,
        d_model=32,
        num_heads=4,
        d_kv=12,
        d_ff=48,
        vocab_size=VOCAB,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=20,
        dropout_rate=0.0,
        pad_token_id=0,
        decoder_start_token_id=0,
    )
    return _build("T5Config", "T5ForConditionalGeneration", base, kw)


def grad_norm(model, logits, tokens, skip: tuple[str, ...] = ()) -> float:
    """The total norm of the gradients of the next-token loss of ``logits`` over ``model``'s parameters,
    but those named in ``skip``."""
    import torch
    import torch.nn.functional as F

    loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
    params = [p for name, p in model.named_parameters() if p.requires_grad and name not in skip]
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    return float(torch.stack([g.norm() for g in grads if g is not None]).norm())


def imported(hf, wrap: str, options: dict):
    """``from_hf(hf)``, checked to be ``wrap`` with each of ``options`` (field -> value) set as given."""
    from depthlab.interop import from_hf

    ours = from_hf(hf)
    assert ours.cfg.wrap == wrap
    for field, value in options.items():
        assert ours.cfg.value_of(field) == value, field
    return ours

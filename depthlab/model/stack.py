"""Stacks of blocks, embeddings and heads: encoder, decoder and encoder-decoder models.

    tokens ─► Embedding ─► x_0 ─► block 1 ─► x_1 ─► ... ─► block L ─► x_L ─► [final norm] ─► head ─► logits

``states`` (``return_states=True``) are x_0 .. x_L, before any final norm (docs/design.md). A residual
topology (hyper-connections, DenseFormer, ...) carries a wider state between the blocks, expanded from
x_0 and reduced before the final norm (:mod:`depthlab.model.state`); its ``states`` are the state's
view of one stream per layer boundary.
"""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from depthlab.config import WRAPPINGS, ModelConfig
from depthlab.errors import InputError
from depthlab.model import parametrization
from depthlab.model.init import init_weights
from depthlab.model.layers import Attention, Block, Context, FeedForward
from depthlab.model.memory import check_weights_fit
from depthlab.model.norms import make_norm
from depthlab.model.positions import RelativeBias, rope_tables, sinusoid_table
from depthlab.model.wrappings import Site, Wrapping


def layer_wraps(cfg: ModelConfig, n_layers: int) -> list[str]:
    """The wrapping of each of ``n_layers`` layers by name (Mix-LN: post at the bottom, pre above)."""
    wrapping = WRAPPINGS[cfg.wrap]
    return [wrapping.for_layer(cfg, i + 1, n_layers).name for i in range(n_layers)]


def uses_final_norm(cfg: ModelConfig) -> bool:
    """``final_norm`` resolved: "auto" asks the wrapping (on unless it renormalises the stream; never
    with norm "none", where there is no norm to apply)."""
    if cfg.final_norm != "auto":
        return cfg.final_norm == "on"
    return WRAPPINGS[cfg.wrap].final_norm_under_auto(cfg) and cfg.norm != "none"


class Embedding(nn.Module):
    """Token embedding (x sqrt(d) if ``embed_scale``; projected from ``d_embed`` to d_model if set), plus
    positions, then an optional norm. ``tok``: a token table to share (an encoder-decoder's decoder
    with its own positions and norm, ``side_embeddings``)."""

    def __init__(self, cfg: ModelConfig, tok: nn.Embedding | None = None):
        super().__init__()
        width = cfg.family.d_embed or cfg.d_model
        self.tok = tok if tok is not None else nn.Embedding(cfg.vocab_size, width)
        self.scale = math.sqrt(cfg.d_model) if cfg.embed_scale else 1.0
        # OPT-350m's project_in: a factorised embedding (Lan et al. 2020, ALBERT), no bias
        self.proj = nn.Linear(width, cfg.d_model, bias=False) if cfg.family.d_embed else None
        self.pos = nn.Embedding(cfg.max_len, cfg.d_model) if cfg.position == "learned" else None
        if cfg.position == "sinusoidal":
            self.register_buffer("sinusoid", sinusoid_table(cfg.max_len, cfg.d_model), persistent=False)
        self.norm = _norm_factory(cfg)() if cfg.family.embed_norm else nn.Identity()
        self.drop = nn.Dropout(cfg.dropout)
        # learned and sinusoidal positions have a table of max_len rows; rope and none have no limit
        self.max_len = cfg.max_len if cfg.position in ("learned", "sinusoidal") else None

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        T = tokens.shape[1]
        if self.max_len is not None and T > self.max_len:
            raise InputError(
                f"sequence length {T} exceeds max_len {self.max_len} (the position table's size)"
            )
        x = self.tok(tokens) * self.scale  # (B, T, d_embed or d)
        if self.proj is not None:
            x = self.proj(x)  # (B, T, d)
        if self.pos is not None:
            x = x + self.pos.weight[:T]
        elif hasattr(self, "sinusoid"):
            x = x + self.sinusoid[:T].to(x.dtype)
        return self.drop(self.norm(x))


class Stack(nn.Module):
    """L blocks and the final norm. ``forward`` returns (output, states or None). ``rel_bias``: T5's
    relative position bias, computed once per forward and read by every layer's self-attention."""

    def __init__(
        self,
        layers: list[Block],
        final_norm: nn.Module | None,
        activation_checkpointing: bool = False,
        rel_bias: RelativeBias | None = None,
        state: nn.Module | None = None,
    ):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.state = state  # a residual topology's state (depthlab.model.state); None: one stream
        self.norm = final_norm if final_norm is not None else nn.Identity()
        self.has_final_norm = final_norm is not None
        self.activation_checkpointing = activation_checkpointing
        self.rel_bias = rel_bias

    def forward(self, x: torch.Tensor, ctx: Context, return_states: bool = False):
        if self.rel_bias is not None:
            ctx = dataclasses.replace(ctx, position_bias=self.rel_bias(x.shape[1], x.shape[1]))
        if self.state is not None:
            x = self.state.expand(x)  # the stream -> the topology's state
        states = [self._seen(x)] if return_states else None
        recompute = (
            self.activation_checkpointing and self.training and torch.is_grad_enabled()
        )  # decided once per pass
        for layer in self.layers:
            x = checkpoint(layer, x, ctx, use_reentrant=False) if recompute else layer(x, ctx)
            if return_states:
                states.append(self._seen(x))
        if self.state is not None:
            x = self.state(x)  # the state -> one stream, before the final norm (its forward reduces)
        return self.norm(x), states

    def _seen(self, x):
        """The stream reported at a layer boundary: x, or the state's view of one stream."""
        return x if self.state is None else self.state.view(x)


class LanguageModel(nn.Module):
    """An encoder (bidirectional) or decoder (causal) stack with embedding and head: (B, T) -> (B, T, V).

    The stack is ``self.encoder`` or ``self.decoder`` by ``cfg.arch``; ``self.stack`` names it either way.
    ``head`` is the vocabulary projection; ``head_proj`` (OPT's project_out) is None unless ``d_embed``.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = Embedding(cfg)
        side = cfg.arch
        stack = build_stack(cfg, side, cfg.n_layers)
        setattr(self, side, stack)
        self.head, self.head_proj = _head(cfg, self.embed)

    @property
    def stack(self) -> Stack:
        return getattr(self, self.cfg.arch)

    def forward(
        self,
        tokens: torch.Tensor,
        padding_mask: torch.Tensor | None = None,
        return_states: bool = False,
        check: bool | None = None,
    ):
        """tokens (B, T) integer ids -> logits (B, T, V) (and the states with ``return_states``).
        ``check``: verify every id is in [0, vocab_size) (see :func:`check_tokens`)."""
        check_tokens(tokens, "tokens", self.cfg.vocab_size, check)
        ctx = _context(self.cfg, tokens, padding_mask=_padding(padding_mask, tokens, "padding_mask"))
        out, states = self.stack(self.embed(tokens), ctx, return_states)
        logits = _logits(self, out)  # (B, T, V)
        return (logits, states) if return_states else logits


class EncoderDecoder(nn.Module):
    """Encoder over ``src``, decoder over ``tgt`` with cross-attention; shared embedding (Vaswani 2017).

    With ``side_embeddings`` the decoder reads ``dec_embed``: the same token table, its own position
    table and embedding norm (BART, Marian)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = Embedding(cfg)
        if cfg.family.side_embeddings:  # registered only then: other models' state dicts keep their keys
            self.dec_embed = Embedding(cfg, tok=self.embed.tok)
        self.encoder = build_stack(cfg, "encoder", cfg.enc_depth)
        self.decoder = build_stack(cfg, "decoder", cfg.dec_depth)
        self.head, self.head_proj = _head(cfg, self.embed)

    @property
    def stack(self) -> Stack:
        return self.decoder

    def encode(
        self,
        src: torch.Tensor,
        src_padding_mask: torch.Tensor | None = None,
        return_states: bool = False,
        check: bool | None = None,
    ):
        """src (B, S) integer ids -> (the encoder's output (B, S, d), its states or None): the memory the
        decoder's cross-attention reads; ``check`` as in LanguageModel."""
        check_tokens(src, "src", self.cfg.vocab_size, check)
        src_padding_mask = _padding(src_padding_mask, src, "src_padding_mask")
        ctx = _context(self.cfg, src, padding_mask=src_padding_mask)
        return self.encoder(self.embed(src), ctx, return_states)

    def forward(
        self,
        src: torch.Tensor,
        tgt: torch.Tensor,
        src_padding_mask: torch.Tensor | None = None,
        tgt_padding_mask: torch.Tensor | None = None,
        return_states: bool = False,
        check: bool | None = None,
    ):
        """src (B, S) and tgt (B, T) integer ids -> logits (B, T, V); ``check`` as in LanguageModel."""
        check_tokens(tgt, "tgt", self.cfg.vocab_size, check)
        src_padding_mask = _padding(src_padding_mask, src, "src_padding_mask")
        memory, _ = self.encode(src, src_padding_mask, check=check)  # (the mask's check is a shape compare)
        ctx = _context(
            self.cfg,
            tgt,
            padding_mask=_padding(tgt_padding_mask, tgt, "tgt_padding_mask"),
            memory=memory,
            memory_padding_mask=src_padding_mask,
        )
        embed = self.dec_embed if self.cfg.family.side_embeddings else self.embed
        out, states = self.decoder(embed(tgt), ctx, return_states)
        logits = _logits(self, out)  # (B, T_tgt, V)
        return (logits, states) if return_states else logits


def check_tokens(tokens, name: str, vocab_size: int, check: bool | None = None) -> None:
    """TypeError unless ``tokens`` is an integer tensor; ValueError unless it is 2-D (batch, tokens)
    and not empty, and, when checked, unless every id is in [0, vocab_size) (an id outside would index
    past the embedding: an IndexError on the CPU, a device-side assert on a GPU).

    The range check reads the tensor's minimum and maximum, which on a GPU waits for the device (a
    sync every step), so ``check=None`` checks CPU tensors only (cheap) and ``check=True`` any device;
    ``check=False`` skips it. The shape and type checks cost nothing and always run.
    """
    if not isinstance(tokens, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor of token ids (batch, tokens), not {type(tokens).__name__}"
        )
    if tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer token ids (torch.long), not {str(tokens.dtype)[6:]}")
    if tokens.dtype not in (torch.long, torch.int32):  # what an embedding indexes with
        raise TypeError(f"{name} must hold torch.long (or int32) token ids, not {str(tokens.dtype)[6:]}: "
                        f"convert with {name}.long()")  # fmt: skip
    if tokens.ndim != 2:
        hint = f"; one sequence is {name}[None]" if tokens.ndim == 1 else ""
        raise ValueError(f"{name} must be 2-D (batch, tokens), not of shape {tuple(tokens.shape)}{hint}")
    if tokens.numel() == 0:
        raise ValueError(f"{name} is empty (shape {tuple(tokens.shape)}): at least one token is needed")
    if check is None:
        check = tokens.device.type == "cpu" and not torch.compiler.is_compiling()
    if check:
        lo, hi = (int(v) for v in torch.aminmax(tokens))
        if lo < 0 or hi >= vocab_size:
            raise ValueError(f"{name} holds ids from {lo} to {hi}; the vocabulary is 0..{vocab_size - 1}")


def _padding(mask: torch.Tensor | None, tokens: torch.Tensor, name: str) -> torch.Tensor | None:
    """``mask`` checked: bool, True at padding, one entry per token (InputError otherwise). An integer
    mask is refused rather than guessed: Hugging Face's attention_mask means the opposite (1 = a token)."""
    if mask is None:
        return None
    if mask.shape != tokens.shape:
        raise InputError(
            f"{name} has shape {tuple(mask.shape)}, the tokens {tuple(tokens.shape)}: one per token"
        )
    if mask.dtype != torch.bool:
        raise InputError(
            f"{name} must be bool, True at padding (got {str(mask.dtype).removeprefix('torch.')}; "
            "a Hugging Face attention_mask is the opposite: pass attention_mask == 0)"
        )
    return mask


def check_config_type(cfg) -> None:
    """TypeError unless ``cfg`` is a ModelConfig (a dict is not taken as one: ``ModelConfig.from_dict``
    validates it and says which field is wrong)."""
    if not isinstance(cfg, ModelConfig):
        hint = "; build one with ModelConfig.from_dict(d)" if isinstance(cfg, dict) else ""
        raise TypeError(f"cfg must be a depthlab.ModelConfig, not {type(cfg).__name__}{hint}")


def build_model(cfg: ModelConfig) -> nn.Module:
    """The model ``cfg`` describes, initialised (see :mod:`depthlab.model.init`): the weight scheme
    first, then each wrapping's adjustment of its own branch (DeepNorm's beta). TypeError when ``cfg``
    is not a ModelConfig. InputError, before anything is allocated, when the weights alone would not fit
    in the free memory (the commands check the whole run's estimate first: :mod:`depthlab.model.memory`)."""
    check_config_type(cfg)
    check_weights_fit(cfg)
    model = EncoderDecoder(cfg) if cfg.arch == "encdec" else LanguageModel(cfg)
    scaled = parametrization.scaled_residual_init(cfg, WRAPPINGS[cfg.wrap].SCALED_RESIDUAL_INIT)
    init_weights(
        model, cfg.init, cfg.enc_depth + cfg.dec_depth, scale_residual=scaled, std=cfg.family.init_std
    )
    parametrization.rescale_hidden_init(model, cfg)
    parametrization.rescale_table_init(model, cfg)
    for module in model.modules():
        if isinstance(module, Wrapping):
            module.init_branch()
    return model


def build_stack(cfg: ModelConfig, side: str, n_layers: int) -> Stack:
    """``n_layers`` blocks for one side (encoder: bidirectional; decoder: causal, + cross in encdec)."""
    make_norm = _norm_factory(cfg)
    causal = side == "decoder"
    has_cross = cfg.arch == "encdec" and causal
    layers = []
    branch = parametrization.multipliers(cfg, n_layers).branch
    for i in range(n_layers):
        site = Site(
            cfg.arch,
            side,
            i + 1,
            n_layers,
            cfg.enc_depth,
            cfg.dec_depth,
            2 + has_cross,
            cfg.d_model,
            cfg.topology,
        )
        wrapping = WRAPPINGS[cfg.wrap].for_layer(cfg, i + 1, n_layers)

        def wrapped(kind: str, f: nn.Module, wrapping=wrapping, site=site) -> Wrapping:
            return wrapping.build(f, make_norm, cfg.has_residual(kind), site, branch_multiplier=branch)

        window = cfg.window(i + 1) if causal else None
        attn = wrapped("attn", _attention(cfg, causal=causal, cross=False, window=window))
        cross = wrapped("cross", _attention(cfg, causal=False, cross=True)) if has_cross else None
        ffn_bias = cfg.has_bias("ffn")
        ffn = wrapped(
            "ffn", FeedForward(cfg.d_model, cfg.ffn_dim, cfg.activation, bias=ffn_bias, dropout=cfg.dropout)
        )
        layers.append(Block(attn, ffn, cross, norm=make_norm() if wrapping.SHARED_NORM else None))
    final = make_norm() if uses_final_norm(cfg) else None
    rel_bias = None
    if cfg.position == "relative":
        rel_bias = RelativeBias(
            cfg.n_heads, cfg.family.rel_buckets, cfg.family.rel_max_distance, not causal, cfg.d_model
        )
    topology = WRAPPINGS[cfg.wrap].STATE
    state = topology(cfg, n_layers) if topology is not None else None
    return Stack(layers, final, cfg.activation_checkpointing, rel_bias, state)


def _attention(cfg: ModelConfig, causal: bool, cross: bool, window: int | None = None) -> Attention:
    q_norm = k_norm = None
    if cfg.qk_norm:  # a norm over each head's features, or over the whole q and k projections
        q_width, k_width = cfg.head_dim, cfg.head_dim
        if cfg.family.qk_norm_scope == "projection":
            q_width, k_width = cfg.n_heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
        q_norm, k_norm = (
            make_norm(cfg.norm, w, cfg.family.norm_eps, gain_offset=cfg.family.gain_offset)
            for w in (q_width, k_width)
        )
    return Attention(
        cfg.d_model,
        cfg.n_heads,
        cfg.kv_heads,
        head_dim=cfg.head_dim,
        bias=cfg.has_bias("qkv"),
        out_bias=cfg.has_bias("out"),
        causal=causal,
        cross=cross,
        rope=cfg.position == "rope",
        q_norm=q_norm,
        k_norm=k_norm,
        qk_scope=cfg.family.qk_norm_scope,
        scale=parametrization.attention_scale(cfg),
        softcap=cfg.family.attn_softcap,
        window=window,
        dropout=cfg.dropout,
    )


def _norm_factory(cfg: ModelConfig):
    return lambda: make_norm(
        cfg.norm, cfg.d_model, cfg.family.norm_eps, cfg.dyt_alpha, gain_offset=cfg.family.gain_offset
    )


def _head(cfg: ModelConfig, embed: Embedding) -> tuple[nn.Linear, nn.Linear | None]:
    """(the vocabulary projection, tied to the token table if ``tie_embeddings``; the d_model -> d_embed
    projection before it, or None)."""
    width = cfg.family.d_embed or cfg.d_model
    head = nn.Linear(width, cfg.vocab_size, bias=cfg.has_bias("head"))
    if cfg.tie_embeddings:
        head.weight = embed.tok.weight
    proj = nn.Linear(cfg.d_model, width, bias=False) if cfg.family.d_embed else None  # OPT's project_out
    return head, proj


def _logits(model: nn.Module, out: torch.Tensor) -> torch.Tensor:
    """The last stream (after any final norm) -> (B, T, V) logits: [x d_model^-1/2 (T5)] -> [x muP's
    readout multiplier] -> [project to d_embed (OPT)] -> head -> [c tanh(logits / c) (Gemma 2)]."""
    cfg = model.cfg
    if cfg.family.head_scale:
        out = out * cfg.d_model**-0.5
    output = parametrization.multipliers(cfg).output  # muP's readout 1/m_w, c/m_w tied (1 under sp: no op)
    if output != 1.0:
        out = out * output
    if model.head_proj is not None:
        out = model.head_proj(out)
    logits = model.head(out)
    if cfg.family.logit_softcap is not None:
        logits = cfg.family.logit_softcap * torch.tanh(logits / cfg.family.logit_softcap)
    return logits


def _context(cfg: ModelConfig, tokens: torch.Tensor, **fields) -> Context:
    """The Context of one stack's forward: masks and memory as given, RoPE tables for these tokens (and
    for sliding-window layers with their own base)."""
    rope = rope_local = None
    if cfg.position == "rope":
        T, dims, device = tokens.shape[1], cfg.rotary_dims, tokens.device
        rope = rope_tables(T, dims, cfg.rope_base, device=device)
        if cfg.family.rope_local_base is not None:
            rope_local = rope_tables(T, dims, cfg.family.rope_local_base, device=device)
    return Context(rope=rope, rope_local=rope_local, **fields)

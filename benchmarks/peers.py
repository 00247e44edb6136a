"""The models benchmarked side by side: depthlab's wrappings and three peers, at one shape.

Every model is a decoder-only byte LM: token embedding + learned positions, L causal layers of
self-attention (``heads`` heads) and a GELU FFN of width ``4 d``, a head tied to the token embedding.

| name           | what                                                                      |
|----------------|---------------------------------------------------------------------------|
| depthlab-WRAP  | ``build_model(ModelConfig(wrap=WRAP, ...))``                              |
| ...+compile    | the same with each block ``torch.compile``d (regional compilation)        |
| torch-pre/post | ``nn.TransformerEncoder`` (norm_first True/False, causal mask) + emb/head |
| x-transformers | ``TransformerWrapper(Decoder(...))`` (lucidrains), sdpa attention         |
| nanogpt        | a minimal nanoGPT-style pre-LN GPT (Karpathy's model.py): fused QKV, sdpa |

The weight matrices are the same size in every model (:func:`check_param_counts` asserts it); the
vectors (biases, norm gains) differ only where a model's structure forces it: x-transformers has no
attention biases and bias-free norms, sandwich has two extra norms per layer, parallel_shared one norm
fewer (its two sublayers read one), post-LN and DeepNorm have no final norm.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from depthlab import ModelConfig, build_model

DEPTHLAB = ("pre", "post", "deepnorm", "sandwich", "parallel", "parallel_shared")
PEERS = ("torch-pre", "torch-post", "x-transformers", "nanogpt")


@dataclass(frozen=True)
class Shape:
    d: int
    layers: int
    heads: int = 4
    seq: int = 128
    batch: int = 16
    vocab: int = 256

    @property
    def tokens(self) -> int:
        return self.seq * self.batch


# -- the minimal reference (nanoGPT model.py, reduced to what a training step uses) ----------------
class _Attn(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(d, 3 * d)  # fused q|k|v
        self.c_proj = nn.Linear(d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))  # (B,h,T,hs)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class _Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(d), _Attn(d, heads)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class NanoGPT(nn.Module):
    """Pre-LN GPT as in nanoGPT's model.py (bias=True, tied head, learned positions)."""

    def __init__(self, s: Shape):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(s.vocab, s.d), nn.Embedding(s.seq, s.d)
        self.h = nn.ModuleList(_Block(s.d, s.heads) for _ in range(s.layers))
        self.ln_f = nn.LayerNorm(s.d)
        self.lm_head = nn.Linear(s.d, s.vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying (nanoGPT, after Press & Wolf 2017)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe.weight[: idx.shape[1]]
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))  # (B, T, V)


# -- torch.nn.TransformerEncoder with a causal mask, wrapped as an LM --------------------------------
class TorchLM(nn.Module):
    """Embedding + ``nn.TransformerEncoder`` (causal) + tied head; pre-LN gets a final LayerNorm."""

    def __init__(self, s: Shape, norm_first: bool):
        super().__init__()
        self.tok, self.pos = nn.Embedding(s.vocab, s.d), nn.Embedding(s.seq, s.d)
        layer = nn.TransformerEncoderLayer(
            s.d, s.heads, 4 * s.d, dropout=0.0, activation="gelu", batch_first=True, norm_first=norm_first
        )
        final = nn.LayerNorm(s.d) if norm_first else None
        self.encoder = nn.TransformerEncoder(layer, s.layers, norm=final, enable_nested_tensor=False)
        self.head = nn.Linear(s.d, s.vocab, bias=False)
        self.head.weight = self.tok.weight
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(s.seq), persistent=False)

    def forward(self, idx):
        T = idx.shape[1]
        x = self.tok(idx) + self.pos.weight[:T]
        return self.head(self.encoder(x, mask=self.mask[:T, :T], is_causal=True))


def model_names() -> list[str]:
    """Every name :func:`build` takes: depthlab-WRAP and depthlab-WRAP+compile per registered wrapping, the peers."""
    from depthlab.config import wrap_names

    ours = [f"depthlab-{w}" for w in wrap_names()]
    return ours + [f"{n}+compile" for n in ours] + list(PEERS)


NAMES_HINT = f"depthlab-WRAP[+compile] for a registered wrapping, or {', '.join(PEERS)}"


def build(name: str, s: Shape) -> nn.Module:
    """A freshly initialised model by benchmark name (``depthlab-pre``, ``nanogpt``, ...)."""
    if name.startswith("depthlab-"):
        wrap, _, variant = name.removeprefix("depthlab-").partition("+")
        model = build_model(depthlab_config(s, wrap))
        if variant == "compile":  # regional compilation: one graph shared by every identical block
            for layer in model.stack.layers:
                layer.compile()
        return model
    if name == "nanogpt":
        return NanoGPT(s)
    if name in ("torch-pre", "torch-post"):
        return TorchLM(s, norm_first=name == "torch-pre")
    if name == "x-transformers":
        from x_transformers import Decoder, TransformerWrapper

        dec = Decoder(dim=s.d, depth=s.layers, heads=s.heads, attn_dim_head=s.d // s.heads, attn_flash=True)
        return TransformerWrapper(num_tokens=s.vocab, max_seq_len=s.seq, attn_layers=dec, tie_embedding=True)
    raise ValueError(f"unknown model {name!r}")


def depthlab_config(s: Shape, wrap: str, **overrides) -> ModelConfig:
    """The depthlab config at benchmark shape ``s`` (learned positions, max_len = seq, tied head)."""
    kw = dict(
        arch="decoder",
        n_layers=s.layers,
        d_model=s.d,
        n_heads=s.heads,
        d_ff=4 * s.d,
        vocab_size=s.vocab,
        max_len=s.seq,
        wrap=wrap,
        norm="layernorm",
        activation="gelu",
        position="learned",
    )
    kw.update(overrides)
    return ModelConfig(**kw)


def expected_params(name: str, s: Shape) -> tuple[int, int]:
    """(matrix params, vector params) that ``name`` must have at shape ``s``, from its structure.

    Matrices: token table (tied head) V d, positions T d, per layer q|k|v|out 4 d^2 and FFN 8 d^2.
    Vectors: the biases and norm gains/shifts each structure has (see the module docstring).
    """
    d, L = s.d, s.layers
    matrices = s.vocab * d + s.seq * d + L * 12 * d * d
    linear_biases = 4 * d + 4 * d + d  # qkv+out, fc1, fc2
    norms_per_layer, final, norm_size = 2, 1, 2 * d  # LayerNorm gain + shift
    wrap = name.removeprefix("depthlab-").partition("+")[0]
    if wrap in ("post", "deepnorm") or name == "torch-post":
        final = 0
    if wrap == "sandwich":
        norms_per_layer = 4
    if wrap == "parallel_shared":
        norms_per_layer = 1
    if name == "x-transformers":  # bias-free q/k/v/out and gain-only LayerNorm: fixed by its design
        linear_biases, norm_size = 4 * d + d, d
    vectors = L * (linear_biases + norms_per_layer * norm_size) + final * norm_size
    return matrices, vectors


def param_counts(model: nn.Module) -> tuple[int, int]:
    """(matrix params, vector params) of ``model``, each tied tensor counted once."""
    mats = sum(p.numel() for p in model.parameters() if p.dim() >= 2)
    vecs = sum(p.numel() for p in model.parameters() if p.dim() < 2)
    return mats, vecs


def check_param_counts(models: dict[str, nn.Module], s: Shape) -> dict[str, int]:
    """Assert every model has exactly its expected (matrix, vector) counts; returns name -> total."""
    totals = {}
    for name, model in models.items():
        got, want = param_counts(model), expected_params(name, s)
        assert got == want, f"{name} at {s}: (matrices, vectors) {got} != expected {want}"
        totals[name] = sum(got)
    mats = {param_counts(m)[0] for m in models.values()}
    assert len(mats) == 1, f"weight matrices differ between models: {mats}"
    return totals


def train_flops(s: Shape, params: int) -> float:
    """Model FLOPs of one training step: 6 N tokens + attention 12 L d T per token (PaLM, App. B).

    N excludes the position table (a lookup, no matmul); the tied token table counts once, as the
    head's matmul. The attention term counts the full T x T scores, as PaLM's MFU does.
    """
    n = params - s.seq * s.d
    return s.tokens * (6 * n + 12 * s.layers * s.d * s.seq)


def train_step(model: nn.Module, s: Shape, seed: int = 0, device: str = "cpu", dtype=None):
    """A closure running one forward + backward + AdamW step on a fixed random batch; returns the loss.

    ``dtype`` (e.g. ``torch.bfloat16`` on a GPU) runs forward and loss under autocast, the weights and
    optimiser state staying fp32 (mixed precision, as nanoGPT trains).
    """
    g = torch.Generator().manual_seed(seed)
    data = torch.randint(0, s.vocab, (s.batch, s.seq + 1), generator=g).to(device)
    x, y = data[:, :-1], data[:, 1:].reshape(-1)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **_fused())
    amp = torch.autocast(device.split(":")[0], dtype=dtype, enabled=dtype is not None)

    def step():
        with amp:
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def _fused() -> dict:
    """AdamW's fused kernel (CPU support since torch 2.4), the same for every model."""
    return {"fused": True} if "fused" in torch.optim.AdamW.__init__.__code__.co_varnames else {}

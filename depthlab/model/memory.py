"""How much memory a model needs, estimated from its config before anything is built, and the check of
that estimate against the memory the machine has free.

A config that cannot fit must be refused in a second with a number, not after minutes of swapping or an
allocator error (a 100,000-layer stack needs 20 GB for its weights alone). The estimate, in bytes of
float32, for ``mode``:

| mode    | what runs                                   | parameters x bytes    | activations per layer and token |
|---------|---------------------------------------------|-----------------------|---------------------------------|
| build   | build_model (``explain``)                   | 4 (weights)           | none                            |
| probe   | one forward and backward, hooks, perturbation | 12 (weights, their gradients, a saved copy) | A + 2 s |
| train   | forward, backward, Adam step, telemetry     | 20 (weights, gradients, Adam's 2 moments, the update's temporaries), + 4 per layer parameter with telemetry | A, or 9 d with activation checkpointing (plus one layer's A) |

A = 10 d + the FFN's hidden activations (2 d_ff; 4 d_ff for SwiGLU), + 6 d for a decoder layer's
cross-attention: what autograd keeps of one layer (norm inputs and outputs, q, k, v, the attention
output, the FFN's hidden layer before and after its activation). Attention itself keeps no T x T scores:
PyTorch's fused kernel recomputes them. Per token outside the layers: 3 d + 4 V (embeddings, logits,
their softmax and gradient).

The probe keeps two gradients of each layer's stream (the loss's, and its position-varying part's, with
the graph held for the second backward): 2 s, s = d, or n d for hyper-connections' n streams (a
1,000-layer hc probe of 4 streams at d_model 32, 8 x 64 tokens, peaked at 2.9 GB: counted at 2 d the
estimate was 0.76 of it, at 2 n d 0.89). A residual topology that reads earlier layers back adds what its
state and reads keep (``extra_activations`` and ``fixed_activations`` of its wrapping, counted from
autograd's saved tensors): full Attention Residuals stack 1, 2, .., 2L + 1 values, 3 d + 2 floats per
value and token, which grows with depth squared; hyper-connections keep n streams; mHC its Sinkhorn
iterations and a copy of its projections per sublayer.

Telemetry copies each layer's weights before a logged step's update, to measure how far the update moved
them: 4 bytes per parameter of the watched stack's layers (an encoder-decoder's decoder). One layer of
d_model 4096 trained with telemetry peaked 18% above the estimate without this term, 0.3% below the
estimate with it. Plus a fixed ``OVERHEAD`` (allocator, validation batches) and, for training, what its
data takes (``depthlab.train.tasks.train_memory``: a ``--data`` file is read, split and copied, about
four bytes per byte).

Measured against peak RSS on CPU (``tests/test_memory.py``, and benchmarks/memory_depth.py's table in
benchmarks/RESULTS.md): from 18% below to 30% above it from 6 to 384 layers, d_model 32 to 256, batch
8 to 64 x 128 to 1,024 tokens, plain and checkpointed. Checkpointed runs keep more than the theory's
one stream per layer (``9 d``, not ``d``): the allocator holds on to the recomputed blocks' memory; at
1,000 layers it holds less, and the estimate is 1.7x the measured peak there (on the safe side).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch

from depthlab.config import WRAPPINGS, ModelConfig
from depthlab.errors import InputError, option, option_list

try:
    import resource  # POSIX only
except ImportError:  # pragma: no cover (Windows)
    resource = None

BYTES = 4  # float32
MODES = ("build", "probe", "train")
PARAM_BYTES = {"build": 4, "probe": 12, "train": 20}
PARAM_PART = {
    "build": "weights",
    "probe": "weights and their gradients",
    "train": "weights and optimizer state",
}
OVERHEAD = {"build": 32 << 20, "probe": 64 << 20, "train": 128 << 20}
CHECKPOINTED_PER_LAYER = 9  # floats per token and layer, in units of d_model (measured; see above)
GB = 1e9
# The share of free memory an estimate may claim: the estimate is within about 25% of the measured peak,
# and the machine's other processes keep allocating while this one runs.
USABLE = 0.8


def param_count(cfg: ModelConfig) -> int:
    """The parameters of ``build_model(cfg)``, counted from the config (nothing is built). Exact for the
    matrices, embeddings and biases; the norms and the wrappings' scalars are counted at their most
    (two norms of 2 d + 1 per sublayer, a gain of d), so it is never below the real count and within a
    few percent above it (tests/test_memory.py compares it with built models)."""
    d = cfg.d_model
    embed = cfg.vocab_size * d + (cfg.max_len * d if cfg.position == "learned" else 0) + 2 * d + 1
    head = 0 if cfg.tie_embeddings else cfg.vocab_size * d
    stacks = (cfg.enc_depth > 0) + (cfg.dec_depth > 0)
    return layer_param_count(cfg) + embed + head + stacks * (2 * d + 1)


def layer_param_count(cfg: ModelConfig, encoder: bool = True) -> int:
    """The parameters of the layers alone (with a residual topology's own), counted as
    :func:`param_count` counts them; ``encoder=False``: an encoder-decoder's decoder layers only."""
    d, f = cfg.d_model, cfg.ffn_dim
    kv = cfg.kv_heads * cfg.head_dim
    b = int(cfg.bias)
    qk = 4 * cfg.head_dim if cfg.qk_norm else 0
    attn = d * (d + 2 * kv) + b * (d + 2 * kv) + d * d + b * d + qk
    cross = d * d + b * d + d * 2 * kv + b * 2 * kv + d * d + b * d + qk
    hidden = 2 * f if cfg.activation == "swiglu" else f
    ffn = d * hidden + b * hidden + f * d + b * d
    extra = 2 * (2 * d + 1) + d  # per sublayer: its wrapping's norms and gains, at their most
    enc = attn + ffn + 2 * extra
    dec = enc + (cross + extra if cfg.arch == "encdec" else 0)
    enc_depth = cfg.enc_depth if encoder else 0
    total = enc_depth * enc + cfg.dec_depth * dec
    topology = getattr(WRAPPINGS[cfg.wrap], "extra_parameters", None)  # a residual topology's own
    if topology is not None:
        sides = ((enc_depth, 2), (cfg.dec_depth, 3 if cfg.arch == "encdec" else 2))
        total += sum(topology(cfg, n, s) for n, s in sides if n)
    return total


@dataclass(frozen=True)
class MemoryEstimate:
    """An estimate in bytes, by part (``parts``: weights and state, activations, data, overhead)."""

    mode: str
    params: int
    parts: dict = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    def to_dict(self) -> dict:
        """{"mode", "params", "bytes", "parts"}: the estimate as JSON."""
        return {"mode": self.mode, "params": self.params, "bytes": self.total, "parts": dict(self.parts)}

    def describe(self) -> str:
        """``about 21.3 GB (parameters and their state 20.0 GB, activations 1.2 GB, ...)``."""
        shown = ", ".join(f"{k} {gb(v)}" for k, v in self.parts.items() if v >= 0.05 * GB)
        return f"about {gb(self.total)}" + (f" ({shown})" if shown else "")


def gb(n: float) -> str:
    return f"{n / GB:.1f} GB"


def size_text(n: float) -> str:
    """``n`` bytes in GB from 0.1 GB up and in MB below (a small model's estimate reads "33.0 MB", not
    "0.0 GB")."""
    return gb(n) if n >= 0.1 * GB else f"{n / 1e6:.1f} MB"


def check_line(estimate: dict, available: int | None) -> str:
    """What :func:`check_memory` compares, in one line: the estimate (``MemoryEstimate.to_dict()``), its
    parts, and the share of the ``available`` bytes it may claim."""
    parts = ", ".join(f"{k} {size_text(v)}" for k, v in estimate["parts"].items())
    what = {"build": "building the model", "probe": "the probe", "train": "training"}[estimate["mode"]]
    line = f"{what} needs about {size_text(estimate['bytes'])} ({parts})"
    if available is None:
        return line + "; free memory unknown: not checked"
    return line + f", checked against {USABLE:.0%} of the {size_text(available)} free"


def estimate_memory(
    cfg: ModelConfig,
    mode: str = "train",
    batch_size: int = 0,
    seq_len: int = 0,
    src_len: int | None = None,
    data_bytes: int = 0,
    telemetry: bool = False,
) -> MemoryEstimate:
    """The memory ``mode`` (build, probe, train) needs for ``cfg`` at ``batch_size`` sequences of
    ``seq_len`` tokens (``src_len``: an encoder-decoder's source length, default ``seq_len``); see the
    module docstring for the formula. ``data_bytes``: what the run's data takes (a data file, the
    validation batches), in bytes. ``telemetry``: training watches its layers (the watcher's copy of
    their weights)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    p = param_count(cfg)
    parts = {PARAM_PART[mode]: PARAM_BYTES[mode] * p}
    if mode != "build":
        floats = batch_size * _floats(cfg, mode, seq_len, src_len or seq_len) + _fixed(cfg, mode)
        parts["activations"] = BYTES * floats
    if mode == "train" and telemetry:  # the copy of the watched stack (an encdec's decoder) before an update
        parts["telemetry"] = BYTES * layer_param_count(cfg, encoder=cfg.arch != "encdec")
    if data_bytes:
        parts["data"] = data_bytes
    parts["overhead"] = OVERHEAD[mode]
    return MemoryEstimate(mode, p, parts)


def _floats(cfg: ModelConfig, mode: str, tgt: int, src: int) -> int:
    """Floats kept per sequence: every layer's activations over its tokens, and the embeddings and
    logits of each token."""
    d = cfg.d_model
    hidden = (4 if cfg.activation == "swiglu" else 2) * cfg.ffn_dim
    layer = 10 * d + hidden + (2 * _stream_width(cfg) if mode == "probe" else 0)
    cross = 6 * d if cfg.arch == "encdec" else 0
    checkpointed = mode == "train" and cfg.activation_checkpointing
    keep = CHECKPOINTED_PER_LAYER * d if checkpointed else layer
    enc_tokens = src if cfg.arch == "encdec" else tgt
    out = cfg.enc_depth * enc_tokens * keep + cfg.dec_depth * tgt * (keep + (0 if checkpointed else cross))
    if checkpointed:  # the block being recomputed holds its plain activations
        out += max(enc_tokens, tgt) * (layer + cross)
    out += (enc_tokens if cfg.arch == "encdec" else 0) * 3 * d
    topology = getattr(WRAPPINGS[cfg.wrap], "extra_activations", None)  # a residual topology's state
    if topology is not None:
        out += sum(
            tokens * topology(cfg, n, s, checkpointed) for n, s, tokens in _sides(cfg, enc_tokens, tgt)
        )
    return out + tgt * (3 * d + 4 * cfg.vocab_size)


def _stream_width(cfg: ModelConfig) -> int:
    """Floats per token of the state between layers: d_model, or a residual topology's n streams."""
    topology = getattr(WRAPPINGS[cfg.wrap], "stream_width", None)
    return cfg.d_model if topology is None else topology(cfg)


def _sides(cfg: ModelConfig, enc_tokens: int = 0, tgt: int = 0) -> list[tuple[int, int, int]]:
    """(layers, sublayers per layer, tokens) of each stack the model has."""
    sides = ((cfg.enc_depth, 2, enc_tokens), (cfg.dec_depth, 3 if cfg.arch == "encdec" else 2, tgt))
    return [side for side in sides if side[0]]


def _fixed(cfg: ModelConfig, mode: str) -> int:
    """Floats kept once whatever the batch: a residual topology's copies of its weights (mHC's)."""
    topology = getattr(WRAPPINGS[cfg.wrap], "fixed_activations", None)
    if topology is None:
        return 0
    checkpointed = mode == "train" and cfg.activation_checkpointing
    return sum(topology(cfg, n, s, checkpointed) for n, s, _ in _sides(cfg))


def available_memory(device: torch.device | str | None = None) -> int | None:
    """Bytes that can still be allocated: free memory of a CUDA ``device``, else the least of the
    kernel's MemAvailable, the cgroup's limit minus its usage and the address-space limit (``ulimit
    -v``) minus this process's size. None when nothing says."""
    device = torch.device(device) if device is not None else None
    if device is not None and device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    found = [
        _meminfo("/proc/meminfo", "MemAvailable:"),
        _cgroup_room(),
        _address_space_room(),
    ]
    found = [v for v in found if v is not None]
    return min(found) if found else None


def _meminfo(path: str, key: str) -> int | None:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup_room() -> int | None:
    """cgroup v2: memory.max - memory.current of this process's group (None without a limit)."""
    try:
        with open("/proc/self/cgroup") as f:
            rel = next((line.split(":", 2)[2].strip() for line in f if line.startswith("0::")), None)
        if rel is None:
            return None
        base = os.path.join("/sys/fs/cgroup", rel.lstrip("/"))
        with open(os.path.join(base, "memory.max")) as f:
            limit = f.read().strip()
        if limit == "max":
            return None
        with open(os.path.join(base, "memory.current")) as f:
            return int(limit) - int(f.read().strip())
    except (OSError, ValueError):
        return None


def _address_space_room() -> int | None:
    """RLIMIT_AS (``ulimit -v``) minus this process's virtual size (None without a limit)."""
    if resource is None:
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    size = _meminfo("/proc/self/status", "VmSize:")
    return soft - (size or 0)


def check_memory(
    estimate: MemoryEstimate, available: int | None, force: bool = False, hint: str = ""
) -> None:
    """InputError when ``estimate`` is more than USABLE of the ``available`` bytes (unknown: no check),
    unless ``force``. The message gives the numbers and the ways on: a smaller shape (``hint`` names
    the flags that shrink it), and ``--force-memory``."""
    if force or available is None or estimate.total <= USABLE * available:
        return
    what = {"build": "building the model", "probe": "the probe", "train": "training"}[estimate.mode]
    raise InputError(
        f"{what} needs {estimate.describe()} with {estimate.params:,} parameters, more than "
        f"{USABLE:.0%} of the {gb(available)} free: use {hint + ', or ' if hint else ''}{option('force_memory')} "
        "to try anyway"
    )


def check_weights_fit(cfg: ModelConfig) -> None:
    """InputError when the weights of ``build_model(cfg)`` alone exceed the free memory: the model cannot
    be built at all (``build_model``'s guard for library callers; no --force-memory reaches past it)."""
    need, free = BYTES * param_count(cfg), available_memory()
    if free is not None and need > free:
        raise InputError(
            f"building the model needs {gb(need)} for the weights of its {param_count(cfg):,} parameters "
            f"alone, more than the {gb(free)} free: use a smaller {option_list('layers', 'd_model', 'd_ff', 'vocab')}"
        )

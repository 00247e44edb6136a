"""Hyper-connections: the stream widened to n streams (or cut into m fractions) that each sublayer mixes.

One sublayer F, state H (n streams of width w, one row each; w = d, or d/m for fractions):

    H <- H_res H + H_post^T m F(LN(H_pre H))

    H ─┬──────────────────────────── H_res H ──────────────┐
       │                                                   +──► H
       └─► H_pre H ─► LN ─► F ─► m ─► H_post^T (one row per stream) ┘

H_pre is 1 x n (hc, dhc, mhc: the branch reads one mixture of the streams) or m x m (frac: each of the
branch's m input fractions mixes the fractions); H_post scales the branch output into each stream (frac:
fraction j of the output into fraction j); H_res mixes the streams. :class:`StreamMix` computes them.

| wrap  | H_pre, H_post, H_res                                                    | paper                              |
|-------|-------------------------------------------------------------------------|------------------------------------|
| hc    | learned matrices (static)                                               | Zhu et al. 2024, arXiv 2409.19606  |
| dhc   | static + s tanh(norm(H_k) W) per stream k (dynamic)                     | Zhu et al. 2024, sec. 3.2          |
| mhc   | sigmoid(.), 2 sigmoid(.), Sinkhorn-Knopp(.) of b + a (RMSNorm(vec H) phi) | Xie et al. 2025, arXiv 2512.24880 |
| frac  | dhc's form over m fractions of d/m                                      | Zhu et al. 2025, arXiv 2503.14125  |

Initialisation reproduces pre-LN (Zhu et al. 2024, sec. 3.3): H_pre = e_{k mod n} (layer k reads stream
k mod n; frac: I), H_post = 1, H_res = I, dynamic maps 0 with scales 0.01; every stream then holds the
pre-LN stream. mHC's biases start at the same matrices (b_pre = e_{k mod n}, b_res = I, as lucidrains'
hyper-connections does) except b_post = 0, so that H_post = 2 sigmoid(0) = 1; its gates a start at 0.01.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from depthlab.errors import ConfigError
from depthlab.model.norms import RMSNorm
from depthlab.model.sinkhorn import sinkhorn_knopp
from depthlab.model.state import Fractions, Streams
from depthlab.model.topology_base import Topology
from depthlab.model.wrapping_base import register

SCALE0 = 0.01  # the dynamic maps' scale s (HC) and gate a (mHC) at init (Zhu et al. 2024; Xie et al. 2025)


class StreamMix(nn.Module):
    """(H_pre (.., v, n), H_post (.., n), H_res (.., n, n)) of one sublayer from its state H (B, T, n, w).

    Static maps are stored flat (vectors: no weight decay, a vector's learning rate under a
    parametrization); the dynamic maps are matrices read from the state. ``form``: "static", "dynamic"
    (HC's, per stream) or "mhc" (from all streams at once, constrained). The output is a named point the
    probe and the wiring check read."""

    def __init__(self, n: int, views: int, width: int, k: int, form: str, make_norm, iters=20, tol=0.0):
        super().__init__()
        self.n, self.views, self.form, self.iters, self.tol = n, views, form, iters, tol
        pre = torch.eye(n) if views == n and views > 1 else F.one_hot(torch.tensor([k % n]), n).float()
        self.pre = nn.Parameter(pre.flatten())  # (v n,): the branch reads stream k mod n (frac: fraction j)
        self.post = nn.Parameter(torch.zeros(n) if form == "mhc" else torch.ones(n))
        self.res = nn.Parameter(torch.eye(n).flatten())  # (n n,): H_res = I
        if form == "dynamic":
            self.norm = make_norm(width)  # norm(H_k), each stream on its own
            self.w_pre = nn.Parameter(torch.zeros(width, views))
            self.w_res = nn.Parameter(torch.zeros(width, n))
            self.w_post = nn.Parameter(torch.zeros(width, 1))
            self.scale = nn.Parameter(torch.full((2,), SCALE0))  # s_alpha (pre, res), s_beta (post)
        elif form == "mhc":
            self.eps = 1e-6  # the RMSNorm of vec(H) (DeepSeek-V4's rms_norm_eps)
            self.phi_pre = nn.Parameter(torch.zeros(n * width, n))
            self.phi_post = nn.Parameter(torch.zeros(n * width, n))
            self.phi_res = nn.Parameter(torch.zeros(n * width, n * n))
            self.gate = nn.Parameter(torch.full((3,), SCALE0))  # a_pre, a_post, a_res

    def forward(self, h: torch.Tensor):
        pre, post, res = self.pre.view(self.views, self.n), self.post, self.res.view(self.n, self.n)
        if self.form == "dynamic":  # + s tanh(norm(H_k) W): column k of H_pre and H_res, entry k of H_post
            hn, s = self.norm(h), self.scale
            pre = pre + s[0] * torch.tanh(hn @ self.w_pre).transpose(-1, -2)  # (B, T, v, n)
            res = res + s[0] * torch.tanh(hn @ self.w_res).transpose(-1, -2)  # (B, T, n, n)
            post = post + s[1] * torch.tanh(hn @ self.w_post).squeeze(-1)  # (B, T, n)
        elif self.form == "mhc":  # x' = RMSNorm(vec(H)); H~ = a (x' phi) + b; constrained (their eq. 7-8)
            x = F.rms_norm(h.flatten(-2).float(), (h.shape[-2] * h.shape[-1],), eps=self.eps)
            phi = torch.cat([self.phi_pre, self.phi_post, self.phi_res], dim=1).float()  # one matmul for all
            h_pre, h_post, h_res = (x @ phi).split([self.n, self.n, self.n * self.n], dim=-1)
            a = self.gate.float()
            pre = torch.sigmoid(a[0] * h_pre + pre.float()).unsqueeze(-2)  # (B, T, 1, n)
            post = 2 * torch.sigmoid(a[1] * h_post + post.float())  # (B, T, n)
            logits = a[2] * h_res.unflatten(-1, (self.n, self.n)) + res.float()
            res = sinkhorn_knopp(logits, self.iters, self.tol)  # float32, doubly stochastic
            pre, post, res = (t.to(h.dtype) for t in (pre, post, res))
        return pre, post, res

    def mixing_parameters(self) -> list[nn.Parameter]:
        """The parameters of H_res (static and dynamic): they compound across depth (parametrization)."""
        names = {"static": ["res"], "dynamic": ["res", "w_res"], "mhc": ["res", "phi_res"]}[self.form]
        return [getattr(self, name) for name in names]


class _Hyper(Topology):
    """One sublayer over n streams: H <- H_res H + H_post^T m F(LN(H_pre H))."""

    FORMULA = "H = H_res*H + H_post^T*m*F(LN(H_pre*H))"
    BRANCH_END = "f"
    STATE = Streams
    OPTIONS = ("streams",)
    READS = "H_pre H: a mixture of the n streams"
    WRITES = "H_res H + H_post^T y: the streams mixed, the branch output y added to each"
    FORM = "static"

    def __init__(self, f, make_norm, residual, site):
        super().__init__(f, make_norm, residual, site)
        n, opts = site.topology.streams, site.topology
        views = n if self.STATE is Fractions else 1
        width = site.d_model // n if self.STATE is Fractions else site.d_model
        norm_of = lambda w: _norm_like(self.norm, w)  # noqa: E731 (the model's norm, at the width w)
        self.mix = StreamMix(
            n, views, width, self.index, self.FORM, norm_of, opts.sinkhorn_iters, opts.sinkhorn_tol
        )

    @classmethod
    def extra_parameters(cls, cfg, n_layers, sublayers):
        n = cfg.topology.streams
        v, w = (n, cfg.d_model // n) if cls.STATE is Fractions else (1, cfg.d_model)
        each = v * n + n + n * n  # H_pre, H_post, H_res
        if cls.FORM == "dynamic":
            each += 2 * w + w * (v + n + 1) + 2  # norm(H_k) at its most, W_pre, W_res, W_post, s
        elif cls.FORM == "mhc":
            each += n * w * (2 * n + n * n) + 3  # phi_pre, phi_post, phi_res, the gates
        return n_layers * sublayers * each

    @classmethod
    def stream_width(cls, cfg) -> int:
        """Floats per token of the state H between layers: n d for n streams, d for m fractions of d/m
        (what the probe records, and the gradient it keeps, per layer)."""
        return cfg.d_model * (cfg.topology.streams if cls.STATE is Streams else 1)

    @classmethod
    def extra_activations(cls, cfg, n_layers, sublayers, checkpointed):
        """What autograd saves per token beyond pre-LN's, counted from its saved tensors (exact for
        float32; tests/test_memory.py): per sublayer, hc the n streams and the branch output, (n + 1) d;
        the dynamic maps and mHC's projections and Sinkhorn iterations more. Recomputed blocks keep the
        state between layers (n - 1 streams more than one) and one layer's extras."""
        n, d, iters = cfg.topology.streams, cfg.d_model, cfg.topology.sinkhorn_iters
        per = {
            ("static", Streams): (n + 1) * d,
            ("dynamic", Streams): (2 * n + 1) * d + 2 * n * n + 6 * n,
            ("dynamic", Fractions): 3 * d + 4 * n * n + 4 * n,
            ("mhc", Streams): (2 * n + 1) * d + iters * (2 * n * n + 2 * n) + 3 * n * n + 5 * n + 2,
        }[cls.FORM, cls.STATE]
        if checkpointed:
            return n_layers * (n - 1) * d * (cls.STATE is Streams) + sublayers * per
        return n_layers * sublayers * per

    @classmethod
    def fixed_activations(cls, cfg, n_layers, sublayers, checkpointed):
        """mHC concatenates its three projections (n d x (2 n + n^2)) in each sublayer's forward, and the
        matmul keeps the copy."""
        if cls.FORM != "mhc":
            return 0
        n, d = cfg.topology.streams, cfg.d_model
        return (1 if checkpointed else n_layers) * sublayers * n * d * (n * n + 2 * n)

    def forward(self, H, ctx):
        pre, post, res = self.mix(H)  # (.., v, n), (.., n), (.., n, n)
        y = self.f(self.norm(mixed(pre, H).flatten(-2)), ctx)  # F(LN(H_pre H)): (B, T, d)
        y = self.times_m(y).unflatten(-1, (-1, H.shape[-1]))  # (B, T, v, w): v = 1, or one per fraction
        return mixed(res, H) + post.unsqueeze(-1) * y


def mixed(M: torch.Tensor, H: torch.Tensor) -> torch.Tensor:
    """M H for H (B, T, n, w) and one map M (k, n), or one per token (B, T, k, n): (B, T, k, w). A map
    shared by every token is one matmul over all of them (3x faster on the CPU than a broadcast @)."""
    if M.dim() == 2:
        return torch.einsum("ij,abjd->abid", M, H)
    return torch.einsum("abij,abjd->abid", M, H)


def _norm_like(norm: nn.Module, width: int) -> nn.Module:
    """A fresh norm of the same kind as ``norm`` at ``width`` (the dynamic maps' norm(H_k))."""
    if isinstance(norm, nn.LayerNorm):
        return nn.LayerNorm(width, eps=norm.eps)
    if isinstance(norm, RMSNorm):
        return RMSNorm(width, eps=norm.eps, offset=norm.offset)
    return nn.LayerNorm(width)


@register("hc")
class HyperConnections(_Hyper):
    """Static hyper-connections (Zhu et al. 2024, arXiv 2409.19606): learned H_pre, H_post, H_res."""

    SOURCE = "Zhu et al. 2024, Hyper-Connections (static)"
    REFERENCES = "hyper-connections 0.4.11 HyperConnections with its dynamic maps at 0: equal"


@register("dhc")
class DynamicHyperConnections(_Hyper):
    """Dynamic hyper-connections (Zhu et al. 2024, sec. 3.2): each map plus s tanh(norm(H_k) W), computed
    from each stream k. norm is the model's norm (the paper's LayerNorm; RMSNorm with norm=rmsnorm)."""

    FORMULA = "H = H_res(H)*H + H_post(H)^T*m*F(LN(H_pre(H)*H))"
    SOURCE = "Zhu et al. 2024, Hyper-Connections (dynamic)"
    FORM = "dynamic"
    REFERENCES = "hyper-connections 0.4.11 HyperConnections: equal (norm=rmsnorm)"


@register("mhc")
class ManifoldHyperConnections(_Hyper):
    """mHC (Xie et al. 2025, arXiv 2512.24880): H_pre = sigmoid(.), H_post = 2 sigmoid(.), H_res =
    Sinkhorn-Knopp(.), each of a (RMSNorm(vec H) phi) + b; H_res is doubly stochastic, so the composite
    map of any number of layers has spectral norm <= 1."""

    FORMULA = "H = SK(H_res)*H + 2s(H_post)^T*m*F(LN(s(H_pre)*H))"
    SOURCE = "Xie et al. 2025, mHC"
    FORM = "mhc"
    OPTIONS = ("streams", "sinkhorn_iters", "sinkhorn_tol")
    REFERENCES = (
        "hyper-connections 0.4.11 mHC: equal with its dynamic maps at 0 (it computes them per stream)"
    )


@register("frac")
class FracConnections(_Hyper):
    """Frac-connections (Zhu et al. 2025, arXiv 2503.14125): the stream cut into m fractions of d/m,
    mixed as dhc mixes streams; the branch reads the m fractions H_pre mixes and writes fraction j of its
    output into fraction j (H_post scales each)."""

    SOURCE = "Zhu et al. 2025, Frac-Connections"
    FORMULA = "H = H_res(H)*H + H_post(H)^T*m*F(LN(H_pre(H)*H)) over m fractions"
    STATE = Fractions
    FORM = "dynamic"
    READS = "the m fractions, each input fraction a mixture of them (H_pre: m x m)"
    WRITES = "H_res H, plus fraction j of the branch output into fraction j (x H_post_j)"
    REFERENCES = "hyper-connections 0.4.11 (num_fracs): departs (see docs/topologies.md)"

    @classmethod
    def check_config(cls, cfg):
        super().check_config(cfg)
        if cfg.d_model % cfg.topology.streams:
            raise ConfigError(
                "streams", cfg.topology.streams, f"a divisor of d_model={cfg.d_model} (m fractions)"
            )

"""The wiring check: does a model that claims a design compute that design's formula at init?

It builds inputs for each claim, runs the model (or its layers) on them, compares with the formula and
names what differs. Weights it moves to make a bug visible are restored bit for bit.

| claim      | checked                                    | finding codes                                      |
|------------|--------------------------------------------|----------------------------------------------------|
| hc, dhc, mhc, frac | with the branch at 0 and H_res set to a known matrix P, the layer leaves P H | h-res-not-applied (I H), h-res-transposed (P^T H), h-res-other |
| mhc        | H_res from spread logits is doubly stochastic (rows and columns within 1e-4 of 1) | sinkhorn-not-converged |
| hc, dhc, frac | identical streams x and a normalised branch F: every stream is x + F(x), pre-LN (Zhu et al. 2024 sec. 3.3) | init-not-pre-ln |
| deepnorm   | alpha = (2N)^(1/4) and v's init beta = (8N)^(-1/4) x q's for N layers (Wang et al. 2022); the norm reads alpha x + F(x), not x + alpha F(x) | deepnorm-beta-missing, deepnorm-beta-wrong, deepnorm-alpha-on-branch, deepnorm-alpha-wrong |
| qk_norm    | queries and keys scaled 2x leave the output unchanged | qk-norm-no-op                                      |
| pre        | a norm reads the last stream before the head | missing-final-norm                              |
| any        | the claimed design is in the model at all  | not-found                                          |

A model that fails when run as ``model(token ids)`` (an encoder-decoder, a module of another kind) is
refused (InputError).

Hyper-connection layers are found by :func:`depthlab.probe.wiring_layers.hyper_layers` (depthlab's,
hyper-connections', x-transformers', or yours through its protocol); DeepNorm sublayers are modules with
``f`` (the branch), ``norm`` (the norm after the sum), ``alpha`` and ``beta``; attention modules by their
q/k projections (:func:`depthlab.probe.wiring_layers.qk_projections`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from depthlab.errors import ConfigError, InputError
from depthlab.probe.capture import StreamCapture
from depthlab.probe.locate import locate_stack
from depthlab.probe.wiring_layers import hyper_layers, qk_projections, scale_rows

CLAIMS = ("pre", "qk_norm", "deepnorm", "hc", "dhc", "mhc", "frac")
HYPER = ("hc", "dhc", "mhc", "frac")
TOL = 1e-4


@dataclass(frozen=True)
class Finding:
    """One difference from the claimed formula: its code (the table above), where, and the numbers."""

    code: str
    where: str
    message: str


@dataclass(frozen=True)
class WiringReport:
    """What was claimed, what could be checked (a claim with nothing to check says so), what differs."""

    claims: tuple[str, ...]
    checked: tuple[str, ...]
    findings: tuple[Finding, ...]

    @property
    def clean(self) -> bool:
        return not self.findings

    def to_dict(self) -> dict:
        return {"claims": list(self.claims), "checked": list(self.checked),
                "findings": [f.__dict__ for f in self.findings]}  # fmt: skip

    def format(self) -> str:
        if not self.claims:
            return (f"wiring check: nothing to check: the model claims none of the designs check tests "
                    f"({', '.join(CLAIMS)}); name one with --claims")  # fmt: skip
        lines = [f"wiring check of {', '.join(self.claims)}: {len(self.findings)} finding(s)"]
        lines += [f"  checked: {c}" for c in self.checked]
        lines += [f"FOUND {f.code} at {f.where}: {f.message}" for f in self.findings]
        return "\n".join(lines)


def claims_of(model: nn.Module) -> tuple[str, ...]:
    """A depthlab model's claims, read off its config: its wrapping (pre-LN-like ones: pre), QK-norm."""
    cfg = getattr(model, "cfg", None)
    if cfg is None:
        raise InputError(
            "name the design the model claims: claims=('mhc',) (one of " + ", ".join(CLAIMS) + ")"
        )
    wrap = cfg.wrap if cfg.wrap in CLAIMS else "pre" if cfg.wrap in ("sandwich", "lns", "vres") else None
    return tuple(c for c in (wrap, "qk_norm" if cfg.qk_norm else None) if c)


@torch.no_grad()
def check_wiring(model: nn.Module, claims=None, seed: int = 0) -> WiringReport:
    """Check ``model`` against each claim (default: a depthlab model's own, :func:`claims_of`)."""
    claims = claims_of(model) if claims is None else ((claims,) if isinstance(claims, str) else tuple(claims))
    for c in claims:
        if c not in CLAIMS:
            raise ConfigError("claims", c, f"one of {', '.join(CLAIMS)}")
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    mode = model.training
    model.eval()
    checked, found = [], []
    try:
        for c in claims:
            what, findings = CHECKS[c](model, c, torch.Generator().manual_seed(seed))
            checked.append(what)
            found += findings
    finally:
        model.load_state_dict(saved)
        model.train(mode)
    return WiringReport(claims, tuple(checked), tuple(found))


def _mixing(layers, claim, gen) -> tuple[str, list[Finding]]:
    """H_res applied: the branch at 0, H_res set to P = 0.7 I + 0.2 C + 0.1 J/n (C a cyclic shift)."""
    out, skipped = [], 0
    for i, layer in enumerate(layers):
        n, where = layer.n, f"hyper-connection layer {i}"
        P = 0.7 * torch.eye(n) + 0.2 * torch.roll(torch.eye(n), 1, 0) + 0.1 / n
        try:
            layer.set_res(P.log() if claim == "mhc" else P)  # mhc: its logits, whose projection is P
        except NotImplementedError:
            skipped += 1
            continue
        M = _recovered(layer, gen)
        if torch.allclose(M, P, atol=TOL):
            continue
        if torch.allclose(M, torch.eye(n), atol=TOL):
            out.append(
                Finding("h-res-not-applied", where, "with H_res = P != I the streams came out unmixed (I H)")
            )
        elif torch.allclose(M, P.T, atol=TOL):
            out.append(Finding("h-res-transposed", where, "the streams came out mixed by P^T, not P"))
        elif claim != "mhc":  # mhc: the Sinkhorn check names it
            out.append(
                Finding("h-res-other", where, f"the streams came out mixed by {_mat(M)}, not P = {_mat(P)}")
            )
    note = f", {skipped} whose H_res cannot be set" if skipped else ""
    return f"H_res applied ({len(layers) - skipped} hyper-connections{note})", out


def _sinkhorn(layers, claim, gen) -> tuple[str, list[Finding]]:
    out = []
    for i, layer in enumerate(layers):
        layer.set_res(0.5 * torch.randn(layer.n, layer.n, generator=gen))  # spread logits
        M = _recovered(layer, gen)
        rows, cols = (M.sum(-1) - 1).abs().max().item(), (M.sum(-2) - 1).abs().max().item()
        if max(rows, cols) > TOL:
            msg = f"H_res rows off 1 by {rows:.2g}, columns by {cols:.2g} (doubly stochastic within {TOL:g} expected)"
            out.append(Finding("sinkhorn-not-converged", f"hyper-connection layer {i}", msg))
    return f"Sinkhorn-Knopp converged ({len(layers)} hyper-connections)", out


def _recovered(layer, gen, B=2, T=3) -> torch.Tensor:
    """The matrix M the layer mixes its streams by with the branch at 0: out = M H, by least squares."""
    H = torch.randn(B, T, layer.n, layer.width, generator=gen)
    out = layer.step(H, torch.zeros_like)
    flat = lambda t: t.permute(2, 0, 1, 3).reshape(layer.n, -1)  # noqa: E731 (n, tokens x width)
    return flat(out) @ torch.linalg.pinv(flat(H))


def _pre_ln_init(layers, claim, gen) -> tuple[str, list[Finding]]:
    """Identical streams x (fractions: x cut in n) and F = LN(.) W: every stream must gain F(x) exactly."""
    out = []
    for i, layer in enumerate(layers):
        n, w = layer.n, layer.width
        d = n * w if layer.fractions else w
        W = torch.randn(d, d, generator=gen) / d**0.5
        branch = lambda h, W=W: F.layer_norm(h, h.shape[-1:]) @ W  # noqa: E731 (a normalised F)
        x = torch.randn(2, 3, d, generator=gen)
        H = x.unflatten(-1, (n, w)) if layer.fractions else x.unsqueeze(-2).expand(2, 3, n, d)
        got = layer.step(H, branch)
        gained = (got.flatten(-2).unsqueeze(-2) if layer.fractions else got) - x.unsqueeze(-2)  # (B, T, k, d)
        y = branch(x).unsqueeze(-2)
        if torch.allclose(gained, y.expand_as(gained), atol=TOL, rtol=TOL):
            continue
        c = (gained * y).sum((0, 1, 3)) / (y * y).sum((0, 1, 3))  # each stream's weight on F(x)
        left = float((gained - c[:, None] * y).norm() / (y.norm() * gained.shape[-2] ** 0.5))
        why = f"F(x) enters with weight {_vec(c)}, not 1 (H_post starts away from 1)" if left < 1e-3 else (
            f"the branch reads another input than x ({left:.2g} of F(x) unexplained)")  # fmt: skip
        out.append(Finding("init-not-pre-ln", f"hyper-connection layer {i}", f"identical streams x: {why}"))
    return f"init reproduces pre-LN ({len(layers)} hyper-connections)", out


def _hyper(model, claim, gen):
    layers = hyper_layers(model)
    if not layers:
        why = (f"the model claims {claim} but holds no hyper-connection layer the check knows (depthlab's, "
               "hyper-connections', x-transformers', or one with the step/set_res protocol)")  # fmt: skip
        return f"{claim}: no hyper-connection layer found", [Finding("not-found", "the model", why)]
    parts = [] if claim == "mhc" else [_pre_ln_init(layers, claim, gen)]  # at init, before any map moves
    parts.append(_mixing(layers, claim, gen))
    if claim == "mhc":
        parts.append(_sinkhorn(layers, claim, gen))
    return "; ".join(p[0] for p in parts), [f for p in parts for f in p[1]]


def _deepnorm(model, claim, gen):
    subs = [m for m in model.modules() if all(hasattr(m, a) for a in ("f", "norm", "alpha", "beta"))]
    if not subs:
        why = "the model claims deepnorm but holds no DeepNorm sublayer (a module with f, norm, alpha, beta)"
        return "deepnorm: no DeepNorm sublayer found", [Finding("not-found", "the model", why)]
    # Wang et al. (2022), a decoder of N layers (an attention and a feed-forward sublayer each):
    # alpha = (2N)^(1/4) on the skip, beta = (8N)^(-1/4) on the init of v, the output and the FFN
    N = max(1, len(subs) // 2)
    alpha, beta = (2 * N) ** 0.25, (8 * N) ** -0.25
    wrong_alpha = [
        (i, float(w.alpha)) for i, w in enumerate(subs) if abs(float(w.alpha) - alpha) > 1e-3 * alpha
    ]
    init = getattr(getattr(model, "cfg", None), "init", None)  # xavier's std depends on the fans
    ratios = [(i, _v_over_q(w.f, init)) for i, w in enumerate(subs)]  # beta: v's init against q's
    wrong_beta = [(i, r) for i, r in ratios if r is not None and abs(r - beta) > 0.25 * beta]
    out = []
    if wrong_alpha:
        i, got = wrong_alpha[0]
        why = f"alpha = {got:.3g}, not (2N)^(1/4) = {alpha:.3g} for N = {N} layers{_more(wrong_alpha, subs)}"
        out.append(Finding("deepnorm-alpha-wrong", f"sublayer {i}", why))
    if wrong_beta:
        i, got = wrong_beta[0]
        code = "deepnorm-beta-missing" if abs(got - 1) < 0.1 else "deepnorm-beta-wrong"  # as xavier drew it
        why = f"v's init is {got:.3g} x q's, not beta = (8N)^(-1/4) = {beta:.3g} for N = {N} layers"
        out.append(
            Finding(code, f"sublayer {i}", why + _more(wrong_beta, [r for r in ratios if r[1] is not None]))
        )
    what = f"DeepNorm's alpha and beta for {N} layers ({len(subs)} sublayers) and alpha on the skip"
    return what, out + _alpha(model, subs[0], gen)


def _more(wrong: list, of: list) -> str:
    """' (and in 7 more of 8 sublayers)' where more than the first is wrong."""
    return f" (and in {len(wrong) - 1} more of {len(of)} sublayers)" if len(wrong) > 1 else ""


def _alpha(model, w, gen) -> list[Finding]:
    """The norm's input z = a x + b F(x) by least squares over one forward: a / b must be alpha."""
    rec: dict = {}
    hooks = [w.register_forward_pre_hook(lambda m, a: _note(rec, "x", a[0])),
             w.f.register_forward_hook(lambda m, a, o: _note(rec, "F", o)),
             w.norm.register_forward_pre_hook(lambda m, a: _note(rec, "z", a[0]))]  # fmt: skip
    try:
        _run(model, _tokens(model, gen))
    finally:
        for h in hooks:
            h.remove()
    A = torch.stack([rec["x"].flatten(), rec["F"].flatten()], 1)
    a, b = torch.linalg.lstsq(A, rec["z"].flatten()[:, None]).solution.flatten().tolist()
    alpha, got = w.alpha, a / b
    if abs(got - 1 / alpha) < 1e-3 * alpha and abs(alpha - 1) > 1e-3:
        why = f"the norm reads x + {1 / got:.3g} F(x): alpha = {alpha:.3g} scales the branch, not the skip"
        return [Finding("deepnorm-alpha-on-branch", "sublayer 0", why)]
    if abs(got - alpha) > 1e-3 * alpha:
        why = f"the norm reads {got:.3g} x + F(x), not alpha = {alpha:.3g}"
        return [Finding("deepnorm-alpha-wrong", "sublayer 0", why)]
    return []


def _note(rec: dict, name: str, value) -> None:
    """Record the first value seen under ``name``; None, so that the hook changes nothing."""
    rec.setdefault(name, value)


def _v_over_q(f: nn.Module, init: str | None = "xavier") -> float | None:
    """std(v rows) / std(q rows) of a fused attention projection (q and k are left alone by DeepNorm),
    relative to what the init draws for them: under xavier their fans differ where v has fewer heads
    (grouped queries), under normal or gpt2 one std serves both; None for a sublayer without one."""
    qkv = getattr(f, "qkv", None)
    if not isinstance(qkv, nn.Linear):
        return None
    kv, d = f.n_kv_heads * f.head_dim, qkv.in_features
    q, v = qkv.weight[: f.n_heads * f.head_dim], qkv.weight[-kv:]
    xavier = ((f.n_heads * f.head_dim + d) / (kv + d)) ** 0.5 if init in (None, "xavier") else 1.0
    return float(v.std() / q.std()) / xavier


def _qk_norm(model, claim, gen):
    """Queries and keys brought to rms 1 (so that no norm's eps matters), then doubled: a QK-norm leaves
    the output as it is; without one the scores grow 4x."""
    stack = locate_stack(model)
    attns = [m for b in stack.blocks for m in b.modules() if qk_projections(m)]
    if not attns:
        why = (
            "the model claims qk_norm but holds no attention whose query and key projections the check knows"
        )
        return "qk_norm: no query/key projection found", [Finding("not-found", "the model", why)]
    tokens, out = _tokens(model, gen), []
    for i, attn in enumerate(attns):
        projections = qk_projections(attn)
        rms = _rms_of(model, tokens, projections)
        for (lin, rows), r in zip(projections, rms, strict=True):
            scale_rows(lin, rows, 1 / max(r, 1e-12))
        base = _logits(model, tokens)
        for lin, rows in projections:
            scale_rows(lin, rows, 2.0)
        change = float((_logits(model, tokens) - base).norm() / base.norm())
        if change > 1e-3:
            out.append(
                Finding(
                    "qk-norm-no-op",
                    f"attention {i}",
                    f"queries and keys x2 (from rms 1) moved the output by {change:.2g}; a QK-norm leaves it",
                )
            )
            break
    return f"QK-norm ({len(attns)} attention modules)", out


def _rms_of(model, tokens, projections) -> list[float]:
    """The rms of each projection's rows on ``tokens`` (one forward, hooked)."""
    seen: list[float] = [0.0] * len(projections)
    hooks = [
        lin.register_forward_hook(
            lambda m, a, o, k=k, rows=rows: seen.__setitem__(k, float(o[..., rows].pow(2).mean().sqrt()))
        )
        for k, (lin, rows) in enumerate(projections)
    ]
    try:
        _run(model, tokens)
    finally:
        for h in hooks:
            h.remove()
    return seen


def _final_norm(model, claim, gen):
    stack = locate_stack(model)
    with StreamCapture(model, stack, make_leaf=False) as cap:
        _run(model, _tokens(model, gen))
    if len(cap.states) < 2:
        return f"a final norm: not checkable ({stack.path}'s blocks are not called as modules)", []
    if cap.final_norm or any(cap.normalised):
        return "a final norm after pre-LN blocks", []
    return "a final norm after pre-LN blocks", [
        Finding(
            "missing-final-norm",
            stack.path,
            "no norm reads the last stream before the head: pre-LN's stream is never normalised (Xiong et al. 2020)",
        )
    ]


CHECKS = {"pre": _final_norm, "qk_norm": _qk_norm, "deepnorm": _deepnorm, **dict.fromkeys(HYPER, _hyper)}


def _tokens(model: nn.Module, gen) -> torch.Tensor:
    """A batch of token ids the model reads: below its vocabulary (depthlab's cfg, HF's config,
    x-transformers' num_tokens) and 256, 12 long (at most a depthlab model's max_len)."""
    sizes = (getattr(getattr(model, k, None), "vocab_size", None) for k in ("cfg", "config"))
    vocab = next((v for v in (*sizes, getattr(model, "num_tokens", None)) if v), 256)
    longest = getattr(getattr(model, "cfg", None), "max_len", None) or 12  # a position table's rows
    return torch.randint(0, min(vocab, 256), (2, min(12, longest)), generator=gen)


def _run(model: nn.Module, tokens: torch.Tensor):
    """``model(tokens)``; InputError, in one line, for a model that is not called that way (an
    encoder-decoder needs its decoder's input too; a module of another kind fails in its own words)."""
    try:
        return model(tokens)
    except (TypeError, ValueError, RuntimeError, AttributeError, IndexError) as e:
        first = (str(e).strip().splitlines() or [""])[0][:200]
        raise InputError(
            f"the model failed when run as model(token ids) ({type(e).__name__}: {first}); check runs a "
            "decoder called on a batch of token ids (an encoder-decoder is not checked)"
        ) from None


def _logits(model, tokens) -> torch.Tensor:
    out = _run(model, tokens)
    return (getattr(out, "logits", None) if not isinstance(out, torch.Tensor) else out).float()


def _mat(M: torch.Tensor) -> str:
    return "[" + "; ".join(" ".join(f"{v:.2f}" for v in row) for row in M.tolist()) + "]"


def _vec(c: torch.Tensor) -> str:
    return ", ".join(f"{v:.3g}" for v in c.flatten().tolist())

"""When a run leaves the unigram plateau: a censored log-linear fit of the escape step, per family of stacks.

A run's escape step (:func:`depthlab.watch.outcome.escape_step`: the first logged step from which the
loss stays below the unigram band) is known for the runs that escaped within their budget; for the rest
it is only known to lie beyond the budget (right-censored). Dropping those runs would make late escapes
look early; counting them as escaping at the budget would too. The fit is a Tobit model:

    ln(escape step) = b . x + e,   e ~ N(0, sigma^2),
    x = [1, ln lr, (ln lr)^2, ln d_model, ln n_layers, ln(1 + warmup), ln s, (ln s)^2]

by maximum likelihood, where an escaped run contributes the density of its step and a censored one
the probability of escaping after its budget; s is the run's at-init step size (the probe's update
gain x lr: how far one full Adam step moves the output, which tells a DeepNorm stack from a post-LN one
of the same shape; a run without it is left out). The squares let the escape be fastest at one step
size and slower on both sides (too small a step learns slowly; too large a one stalls). One fit
per family (:func:`family`): stacks whose blocks renormalise the stream (post-LN, DeepNorm, Admin,
Mix-LN from 4 layers) and the rest (pre-LN-like). Diverged runs are left out: they never escape at any budget, which
is the learning-rate verdict's question, not a late escape. A feature that does not vary among a
family's runs (one width only, say) is left out of its fit (coefficient 0) and its support is that one
value. :func:`fit_escape` returns the record section that :mod:`depthlab.doctor.plateau` reads.
"""

from __future__ import annotations

import math

import torch

from depthlab.doctor.plateau import FEATURES, Z_INTERVAL, family, features

RIDGE = 1e-3  # on the standardised coefficients: keeps a fit with a separated feature finite
MIN_RUNS = 8  # fewer runs in a family: no fit for it (the doctor then says nothing of its plateau)


def escape_rows(runs: list[dict]) -> list[dict]:
    """One row per finished, non-diverged run with an outcome: {"family", "x" (:func:`features`), "y"
    (ln of the escape step or of the budget), "censored", and the run's lr, d_model, n_layers, warmup,
    steps, step_size} (runs whose probe measured no step size are left out). Store run dicts, "probe"
    loaded."""
    rows = []
    for r in runs:
        if r.get("status") != "done" or not r.get("outcome") or r["outcome"] == "diverged":
            continue
        m, t = r["config"]["model"], r["config"]["train"]
        cfg = (r.get("probe") or {}).get("config") or {}
        step = (cfg.get("probe") or {}).get("step_size")
        if not step or not math.isfinite(step):
            continue
        fam = family(m.get("wrap"), (cfg.get("stack") or {}).get("renormalised_share"), int(m["n_layers"]))
        values = {
            "step_size": float(step),
            "lr": float(t["lr"]),
            "d_model": int(m["d_model"]),
            "n_layers": int(m["n_layers"]),
            "warmup": int(t.get("warmup") or 0),
            "steps": int(t["steps"]),
        }
        escaped = r.get("escape_step")
        at = escaped if escaped is not None else values["steps"]
        rows.append(
            dict(values, family=fam, x=features(values), y=math.log(max(1, at)), censored=escaped is None)
        )
    return rows


def _neg_log_likelihood(beta, log_sigma, x, y, censored):
    sigma = log_sigma.exp()
    z = (y - x @ beta) / sigma
    seen = -0.5 * z**2 - log_sigma - 0.5 * math.log(2 * math.pi)
    beyond = torch.special.log_ndtr(-z)  # P(escape step > budget)
    ll = torch.where(censored, beyond, seen)
    return -ll.sum() + RIDGE * (beta[1:] ** 2).sum()


def tobit(x: list[list[float]], y: list[float], censored: list[bool]) -> tuple[list[float], float]:
    """(coefficients, sigma) of the right-censored normal regression of y on x (x's first column is the
    constant; every other column is standardised for the fit and the coefficients returned unscaled)."""
    X = torch.tensor(x, dtype=torch.float64)
    Y = torch.tensor(y, dtype=torch.float64)
    C = torch.tensor(censored, dtype=torch.bool)
    mean, std = X[:, 1:].mean(0), X[:, 1:].std(0).clamp_min(1e-12)
    Z = torch.cat([X[:, :1], (X[:, 1:] - mean) / std], dim=1)
    beta = torch.zeros(X.shape[1], dtype=torch.float64)
    beta[0] = Y.mean()
    log_sigma = torch.tensor(math.log(max(float(Y.std()), 0.1)), dtype=torch.float64)
    beta.requires_grad_(True)
    log_sigma.requires_grad_(True)
    opt = torch.optim.LBFGS([beta, log_sigma], max_iter=500, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = _neg_log_likelihood(beta, log_sigma, Z, Y, C)
        loss.backward()
        return loss

    opt.step(closure)
    b = beta.detach()
    slopes = b[1:] / std
    const = b[0] - (slopes * mean).sum()
    return [float(const), *map(float, slopes)], float(log_sigma.detach().exp())


def _support(rows: list[dict]) -> dict:
    keys = ("lr", "d_model", "n_layers", "warmup", "steps", "step_size")
    return {k: [min(r[k] for r in rows), max(r[k] for r in rows)] for k in keys}


def _in_sample(rows: list[dict], coef: dict, sigma: float) -> dict:
    """How the fit does on the runs it was fitted on: whether each escaped within its budget (predicted:
    P >= 1/2), and the escaped runs' median factor between the predicted and the measured step."""
    agreed, factors = 0, []
    for r in rows:
        mu = sum(coef[name] * v for name, v in zip(FEATURES, r["x"]))
        p_escape = 0.5 * math.erfc((mu - math.log(r["steps"])) / (sigma * math.sqrt(2)))
        agreed += (p_escape >= 0.5) == (not r["censored"])
        if not r["censored"]:
            factors.append(math.exp(abs(mu - r["y"])))
    factors.sort()
    median = factors[len(factors) // 2] if factors else None
    return {"runs": len(rows), "agreed": agreed, "median_factor": median}


def fit_family(rows: list[dict]) -> dict | None:
    """The fit of one family's rows (None below MIN_RUNS or without one escaped run): {"coef": {feature:
    value}, "sigma", "runs", "censored", "support", "left_out" (features without variation),
    "in_sample"}."""
    if len(rows) < MIN_RUNS or all(r["censored"] for r in rows):
        return None
    varying = [0] + [
        j for j in range(1, len(FEATURES)) if max(r["x"][j] for r in rows) > min(r["x"][j] for r in rows)
    ]
    x = [[r["x"][j] for j in varying] for r in rows]
    beta, sigma = tobit(x, [r["y"] for r in rows], [r["censored"] for r in rows])
    coef = dict.fromkeys(FEATURES, 0.0) | {FEATURES[j]: round(b, 6) for j, b in zip(varying, beta)}
    return {
        "coef": coef,
        "sigma": round(sigma, 4),
        "runs": len(rows),
        "censored": sum(r["censored"] for r in rows),
        "support": _support(rows),
        "left_out": [name for j, name in enumerate(FEATURES) if j not in varying],
        "in_sample": _in_sample(rows, coef, sigma),
    }


def fit_escape(runs: list[dict]) -> dict:
    """The record's "escape" section from store runs: the model's form, the interval's z and, per
    family with enough runs, :func:`fit_family`'s fit."""
    rows = escape_rows(runs)
    families = {}
    for fam in sorted({r["family"] for r in rows}):
        fitted = fit_family([r for r in rows if r["family"] == fam])
        if fitted is not None:
            families[fam] = fitted
    return {
        "model": "ln(escape step) = b . [1, ln lr, (ln lr)^2, ln d_model, ln n_layers, ln(1 + warmup), "
        "ln s, (ln s)^2] + N(0, sigma^2), s the probe's step size; right-censored at each run's budget "
        "(Tobit); diverged runs left out",
        "z_interval": Z_INTERVAL,
        "families": families,
    }

"""Learning-rate sensitivity across depth, and what lowers it (Wortsman et al. 2023, "Small-scale proxies
for large-scale Transformer training instabilities"; Dehghani et al. 2023 on attention-logit growth).

Wortsman et al. judge a configuration by its whole curve of final loss against learning rate, summarised
as LR sensitivity (:mod:`depthlab.study.sensitivity`: the mean over the swept learning rates of how far
each ends above the best, a diverged run counting as the loss at initialisation). They show that the
instabilities of large models appear in small ones at high learning rates: without qk-layernorm the
attention logits grow and the attention entropy collapses, and without z-loss the output logits drift;
qk-layernorm, z-loss and warmup each lower the sensitivity. Reproduced on the byte-level task with the
``lr-sensitivity`` study preset (five settings at 2, 6 and 24 layers over nine learning rates from 1e-4
to 1, three seeds) and a control study at 6 layers (post-LN and pre-LN without warmup; pre-LN with
qk-layernorm alone and with z-loss alone). Both are studies in the SQLite store, so a preset already
run is reused and an interrupted reproduction resumes.

Every measurement is made per seed (the sensitivity of one seed's curve, the logits of one seed's runs)
and decided on the mean over seeds with its t-interval. The best learning rate's slope against depth is
compared, as information, with Jelassi et al. 2023 (-3/2, for muP ReLU networks) and with depth-wise
parametrisations such as CompleteP (0): depthlab's stacks use the standard parametrisation, to which
neither applies directly.
"""

from __future__ import annotations

import json
import math
import os
import tempfile

from depthlab.intervals import INCONCLUSIVE
from depthlab.paths import save_figure
from depthlab.report.data import load
from depthlab.report.lr_plots import lr_curves
from depthlab.study.executors import default_workers
from depthlab.study.grid import StudyConfig
from depthlab.study.presets import PRESETS
from depthlab.study.runner import plan, run_study
from depthlab.study.sensitivity import Curve, best_lr_slope, curves, setting_key, setting_label
from depthlab.study.store import DEFAULT_DB
from depthlab_lab.reproduce import cost
from depthlab_lab.reproduce.registration import DECISION, Registration, Revision
from depthlab_lab.reproduce.reproduction import Reproduction, register, resolve, seeded_check, with_revision
from depthlab_lab.reproduce.sensitivity_first import first_attention, first_rule_curves

SMALL = {
    "depths": [2, 6, 24],
    "lrs": [1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1, 1.0],
    "seeds": [0, 1, 2],
    "steps": 150,
    "warmup": 15,
    "control_depth": 6,  # the depth of the warmup, qk-layernorm and z-loss comparisons
    "high_lr": 1e-1,  # "a high learning rate" for the attention and output logits
    "moderate_lr": 1e-3,  # the learning rate the high one is compared with
    "z_loss": 1e-4,  # Wortsman et al.'s coefficient
}
# The large scale: the width (256) and length (2,000 steps) of the other claims' large regimes, at the
# preset's heads, batch and sequence length (a GPU or a long CPU night).
LARGE = {**SMALL, "d_model": 256, "steps": 2000, "warmup": 200}
# The sensitivity formula (Wortsman et al.'s) lives in the study package; it decides checks here.
DECIDED_ELSEWHERE = tuple(
    f"depthlab.study.sensitivity:{q}"
    for q in ("Point.capped", "Point.diverged", "Curve.seeds", "Curve.per_seed_sensitivity",
              "Curve.mean_curve", "Curve.best", "_refine")
)  # fmt: skip
# The review after the first documented run had started (commit 201a65e): the section of
# docs/reproductions.md made by that run came from the code before it.
REVIEWED = "2026-11-30 17:56 UTC"
REVIEW = (
    "after a review: a diverged run counts as the loss at init whatever finite loss it stopped at (the "
    "registered formula's rule; before, a run stopped as diverged below l0 counted at its loss); attention "
    "values are read at the last step where every attention layer is finite, and two runs read at "
    "different steps are not compared; a setting with no curve gives inconclusive checks, not an error; a "
    "log ratio of a non-positive value is no value"
)
REVIEW_KNOWN = (
    "yes: the documented run had started before this change (its section came from the code before it); "
    "the document is regenerated with this code, and this revision is why its results may differ"
)
# (code name, digest before the review, after it)
REVIEWED_CODE = (
    ("_attention", "d9788a0492422b6c", "6536d47f5ceb476d"),
    ("_attention_checks", "72f6fede4cf8ae9a", "0a0777ad3128434a"),
    ("_index", "5f9c9dba4885dbfc", "fcbfa166745c1669"),
    ("_z_loss_checks", "c5947005bfc15cb7", "239d62ace17e9950"),
    ("_log_ratio", None, "a1bf5d85ecfacaf2"),
    ("_paired", None, "3efc47e343a0fdb5"),
    ("depthlab.study.sensitivity.Point.capped", "27e2cbde3bffa9c4", "4606e4085e2c831d"),
)
# Restored after a second review (2026-12-01): the first registration's readings decide again, the
# review's are the revised column (depthlab_lab.reproduce.sensitivity_first).
REVIEWED_RULE = (
    "the review's rules (201a65e): a diverged run counts as l0 whatever its loss; attention read at the "
    "last step where every attention layer is finite, runs read at different steps not compared"
)
RESTORED = (
    "the first registration's readings decide again (restored as depthlab_lab.reproduce.sensitivity_first: a "
    "run stopped as diverged at a finite loss counts at min(l, l0); attention read at the last logged "
    "step with finite values, runs compared whatever their steps); the review's rules of 201a65e are "
    "the revised column, shown beside; a missing curve or a log of a non-positive value is inconclusive "
    "under both (an error is no result)"
)
RESTORED_KNOWN = (
    "yes: the documented results were known; they were computed under the first readings, which decide "
    "them again"
)
QUICK = {"depths": [1, 2], "lrs": [1e-3, 1e-1], "seeds": [0, 1], "steps": 20, "warmup": 2, "control_depth": 2}
REGISTRATION = Registration(
    commit="8e7b55565cd02de40a759dd2728ea4f0e5588f4c",
    typed_date="2026-11-30 16:27 UTC",
    expectation={
        # (a) per seed: [S_post(deepest) - S_post(shallowest)] - [S_pre(deepest) - S_pre(shallowest)] (nats)
        "depth_growth_post_minus_pre": 0.0,
        # (b) per seed at control_depth: S(no warmup) - S(warmup) (nats), for post-LN and for pre-LN
        "warmup_lowers": 0.0,
        # (c) pre-LN at control_depth: log10 of the largest attention logit at high_lr over moderate_lr,
        # and without qk-layernorm over with it; the mean attention entropy with qk-layernorm minus
        # without, and at moderate_lr minus at high_lr (nats); S(pre) - S(pre + qk-layernorm) (nats)
        "logit_growth_log10": 0.0,
        "entropy_drop": 0.0,
        "qk_norm_lowers": 0.0,
        # (d) pre-LN at control_depth, high_lr: log10 |log Z| without z-loss over with it; and
        # S(pre) - S(pre + z-loss) (nats)
        "z_loss_log10": 0.0,
        "z_loss_lowers": 0.0,
        # (e) per setting: the slope of log10(best lr) against log10(depth) is below this; inconclusive
        # where the best learning rate is at an edge of the sweep at some depth
        "best_lr_slope": 0.0,
        "edge_is_inconclusive": True,
        "slope_information": {"Jelassi et al. 2023 (muP)": -1.5, "CompleteP (Dey et al. 2025)": 0.0},
        "decision": DECISION,
    },
    regimes={"small": SMALL, "large": LARGE},
    revisions=(
        Revision("2026-11-30 16:30 UTC", "code._studies", "e71e9c7b91beef53", "b33f751783670438",
                 "the controls' study says what it is (its description; the runs are the same)",
                 "no result was known yet; it changes none"),
        Revision(
            "2026-11-30 16:50 UTC",
            "regime.small.lrs",
            [1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1],
            SMALL["lrs"],
            "the preset must sweep until every wrapping fails, and sandwich still trained at 3e-1 at 24 layers",
            "yes: the preset's 24-layer runs (outcomes only; no check had been computed)",
        ),
        Revision(
            "2026-11-30 16:50 UTC",
            "regime.large.lrs",
            [1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1],
            LARGE["lrs"],
            "the large scale sweeps what the small one does",
            "yes: as above",
        ),
        *(Revision(REVIEWED, f"code.{k}", old, new, REVIEW, REVIEW_KNOWN) for k, old, new in REVIEWED_CODE),
        Revision("2026-11-30 18:28 UTC", "code._announce", "3117a4b769ec89fe", "cafb9aad4aa60310",
                 "the expected-time line says where already-done runs were found", "yes; it decides nothing"),
        Revision("2026-12-01 09:11 UTC", "code._slope_checks", "a5961ad22b6ee234", "5de41601f89db640",
                 "a check's outcome is named its result (a rename)", "yes; no result changes"),
        Revision("2026-12-01", "code._attention_checks", "0a0777ad3128434a", "42994075fd34d44d", RESTORED, RESTORED_KNOWN),
        Revision("2026-12-01", "code._checks", None, "7f8f846fe221c602", RESTORED, RESTORED_KNOWN),
        Revision("2026-12-01", "code.depthlab.reproduce.sensitivity_first.FINITE_DIVERGED", None, "5ad14d9d010492d8", RESTORED, RESTORED_KNOWN),
        Revision("2026-12-01", "code.depthlab.reproduce.sensitivity_first._finite", None, "c3ba1e447f5a0aa9", RESTORED, RESTORED_KNOWN),
        Revision("2026-12-01", "code.depthlab.reproduce.sensitivity_first.first_attention", None, "e60f1c7e7b24dc34", RESTORED, RESTORED_KNOWN),
        Revision("2026-12-01", "code.depthlab.reproduce.sensitivity_first.first_rule_curves", None, "192fadbe8c450a45", RESTORED, RESTORED_KNOWN),
        Revision("2026-12-01", "code.reproduce_lr_sensitivity", "ec5c5366683ae013", "bb5b6868bf318bc8", RESTORED, RESTORED_KNOWN),
        Revision("2026-12-01", "code.REVIEWED_RULE", None, "8bcec4e09d7b5b13", RESTORED, RESTORED_KNOWN),
    ),
    notes="Registered before any run of the registered regime was seen (two 24-layer post-LN runs of the "
    "preset at lr 1e-4 had finished, undertrained; the quick smoke version had been run once to test the "
    "code, which showed that a best learning rate at the sweep's edge gives a meaningless slope). The "
    "preset's regime (width 32, 150 steps, "
    "cosine schedule with 15 warmup steps) was fixed when the preset was written, to finish on 2 cores.",
)  # fmt: skip


@register("lr-sensitivity", REGISTRATION)
def reproduce_lr_sensitivity(
    quick: bool = False, out_dir: str | None = None, scale: str = "small"
) -> Reproduction:
    """LR sensitivity grows with depth faster for post-LN; warmup, qk-layernorm and z-loss lower it; the
    best learning rate falls with depth (Wortsman et al. 2023)."""
    regime = resolve(REGISTRATION, scale, quick, QUICK)
    preset, controls = _studies(regime, scale, quick)
    db = _store(preset.name, out_dir)
    _announce([preset, controls], db)
    main, ctrl = _run(preset, db), _run(controls, db)
    # the first registration's readings decide; the review's (201a65e) are the revised column
    first = _checks(main, ctrl, regime, first_rule_curves, first_attention)
    revised = _checks(main, ctrl, regime, list, _attention)
    checks = [with_revision(a, b, REVIEWED_RULE) for a, b in zip(first, revised, strict=True)]
    plot = _plot(db, preset.name, out_dir)
    data = {
        "scale": scale,
        "regime": regime,
        "store": db,
        "tables": [_table(curves(main) + curves(ctrl))],
    }
    return Reproduction(
        "lr-sensitivity", data, checks, [p for p in [plot] if p], source="Wortsman et al. 2023"
    )


def _checks(main: list[dict], ctrl: list[dict], r: dict, read, attention) -> list:
    """Every check, the curves read by ``read`` (the first registration's formula or the review's) and
    the attention values by ``attention``."""
    e = REGISTRATION.expectation
    by = _index(read(curves(main) + curves(ctrl)))
    deep, shallow, d = max(r["depths"]), min(r["depths"]), r["control_depth"]
    checks = [_depth_growth(by, shallow, deep, e)]
    for wrap in ("post", "pre"):
        checks.append(
            _lower(
                f"{d}L {wrap}-LN: warmup lowers LR sensitivity",
                by[(f"{wrap} warmup=0", d)],
                by[(wrap, d)],
                e["warmup_lowers"],
                "no warmup - warmup",
            )
        )
    checks += _attention_checks(main + ctrl, by, r, d, e, attention)
    checks += _z_loss_checks(main + ctrl, by, r, d, e)
    return checks + _slope_checks(read(curves(main)), e)


def _store(regime_name: str, out_dir: str | None) -> str:
    """The registered small regime shares the default store (the ``lr-sensitivity`` preset's runs there
    are reused); any other (the quick smoke version, the large scale) writes a store in ``out_dir``."""
    if regime_name == "lr-sensitivity":
        return DEFAULT_DB
    folder = out_dir or tempfile.mkdtemp(prefix="depthlab-lr-sensitivity-")
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, f"{regime_name}.sqlite")


def _studies(r: dict, scale: str, quick: bool):
    """The preset's study (the small regime is the ``lr-sensitivity`` preset itself; another regime
    changes its width, steps, depths, learning rates and seeds) and the controls' study."""
    spec = PRESETS["lr-sensitivity"]
    model = {**spec["model"], "d_model": r.get("d_model", spec["model"]["d_model"])}
    train = {**spec["train"], "steps": r["steps"], "warmup": r["warmup"]}
    axes = {**spec["axes"], "n_layers": r["depths"], "lr": r["lrs"], "seed": r["seeds"]}
    name = "lr-sensitivity" + ("-quick" if quick else "" if scale == "small" else f"-{scale}")
    preset = StudyConfig.from_dict({**spec, "name": name, "model": model, "train": train, "axes": axes})
    settings = [
        {"wrap": "post", "warmup": 0},
        {"wrap": "pre", "warmup": 0},
        {"wrap": "pre", "qk_norm": True},
        {"wrap": "pre", "z_loss": r["z_loss"]},
    ]
    control_axes = {
        "wrapping": settings,
        "n_layers": [r["control_depth"]],
        "lr": r["lrs"],
        "seed": r["seeds"],
    }
    what = "Controls of the lr-sensitivity reproduction: post-LN and pre-LN without warmup, pre-LN with "
    what += "qk-layernorm alone and with z-loss alone, at one depth over the preset's learning rates."
    controls = StudyConfig.from_dict(
        {**spec, "name": f"{name}-controls", "description": what, "model": model, "train": train,
         "axes": control_axes}
    )  # fmt: skip
    return preset, controls


def _announce(studies, db: str) -> None:
    """Print the expected time of the runs not yet done in ``db`` (serial compute: two workers share it)."""
    done = {
        (spec.model, spec.train): status == "done" for study in studies for spec, status in plan(study, db)
    }
    cost.announce("lr-sensitivity", list(done), lambda m, t: done[(m, t)], where=f"in {db}")


def _run(study, db: str) -> list[dict]:
    """Run (or resume) ``study`` in ``db`` with two workers; its runs with their metrics and telemetry."""
    print(f"lr-sensitivity: study {study.name!r} in {db} (already-done runs are reused)", flush=True)
    run_study(study, db=db, workers=default_workers(), tensorboard=False)
    return load(db, study.name).runs


class _Curves(dict):
    """(setting label, depth) -> Curve; a curve that has no runs (every run failed, or fewer than two
    learning rates finished) is an empty one, whose checks are inconclusive (no seed gives a value)."""

    def __missing__(self, key):
        return Curve({}, key[1], [], math.nan)


def _index(curve_list: list[Curve]) -> dict[tuple[str, int], Curve]:
    return _Curves({(c.label, c.depth): c for c in curve_list})


def _growth(by: dict, label: str, shallow: int, deep: int) -> dict[int, float]:
    """Per seed: the LR sensitivity of ``label`` at ``deep`` minus at ``shallow`` layers."""
    a, b = by[(label, deep)].per_seed_sensitivity(), by[(label, shallow)].per_seed_sensitivity()
    return {s: a[s] - b[s] for s in sorted(set(a) & set(b))}


def _depth_growth(by: dict, shallow: int, deep: int, e: dict):
    post, pre = _growth(by, "post", shallow, deep), _growth(by, "pre", shallow, deep)
    seeds = sorted(set(post) & set(pre))
    return seeded_check(
        f"LR sensitivity grows from {shallow} to {deep} layers faster for post-LN than for pre-LN "
        "(growth of post - growth of pre, nats)",
        f"> {e['depth_growth_post_minus_pre']:g}",
        [post[s] - pre[s] for s in seeds],
        at_least=e["depth_growth_post_minus_pre"],
        fmt="+.3f",
        context=f"post-LN grew {_mean(post.values()):+.3f}, pre-LN {_mean(pre.values()):+.3f}",
    )


def _lower(claim: str, without: Curve, with_: Curve, threshold: float, what: str):
    """A check that ``with_`` has the lower sensitivity, per seed (``without`` - ``with_``)."""
    a, b = without.per_seed_sensitivity(), with_.per_seed_sensitivity()
    seeds = sorted(set(a) & set(b))
    return seeded_check(
        f"{claim} ({what}, nats)",
        f"> {threshold:g}",
        [a[s] - b[s] for s in seeds],
        at_least=threshold,
        fmt="+.3f",
        context=f"S {_mean(a.values()):.3f} vs {_mean(b.values()):.3f}",
    )


def _runs_at(runs: list[dict], label: str, depth: int, lr: float) -> dict[int, dict]:
    """Per seed, the run of setting ``label`` at ``depth`` and ``lr``."""
    out = {}
    for r in runs:
        m, t = r["config"]["model"], r["config"]["train"]
        same = m["n_layers"] == depth and math.isclose(t["lr"], lr)
        if r.get("status") == "done" and same and setting_label(setting_key(r.get("axes") or {})) == label:
            out[t["seed"]] = r
    return out


def _attention(run: dict) -> tuple[float, float, int | None]:
    """(largest attention logit over layers, mean attention entropy over layers, the step) at the run's
    last logged step where every attention layer (stream index >= 1) has finite values."""
    by_step: dict[int, list[dict]] = {}
    for x in run.get("layers") or []:
        if x["layer"] >= 1:
            by_step.setdefault(x["step"], []).append(x)
    good = [
        s
        for s, rows in by_step.items()
        if all(_finite(x.get("attn_logit_max")) and _finite(x.get("attn_entropy")) for x in rows)
    ]
    if not good:
        return math.nan, math.nan, None
    at = by_step[max(good)]
    return max(x["attn_logit_max"] for x in at), _mean(x["attn_entropy"] for x in at), max(good)


def _log_ratio(a: float, b: float) -> float:
    """log10(a / b); NaN unless both are finite and positive."""
    return math.log10(a / b) if _finite(a) and _finite(b) and a > 0 and b > 0 else math.nan


def _paired(x: dict, y: dict, f) -> list[float]:
    """Per seed both dicts hold, f(x[seed], y[seed]); NaN where the two were read at different steps (a
    run that stopped early against one that did not: not comparable)."""
    return [f(x[s], y[s]) if x[s][2] == y[s][2] else math.nan for s in sorted(set(x) & set(y))]


def _lse(run: dict) -> float:
    """|log Z| (the mean log-partition of the output logits) at the run's last logged step with a value."""
    for m in reversed(run.get("metrics") or []):
        extra = json.loads(m.get("extra_json") or "{}")
        if _finite(extra.get("logit_lse")):
            return abs(extra["logit_lse"])
    return math.nan


def _attention_checks(runs: list[dict], by: dict, r: dict, d: int, e: dict, attention):
    hi, mid = r["high_lr"], r["moderate_lr"]
    pre_hi, pre_mid = _runs_at(runs, "pre", d, hi), _runs_at(runs, "pre", d, mid)
    qk_hi = _runs_at(runs, "pre qk_norm=True", d, hi)
    a = {s: attention(x) for s, x in pre_hi.items()}
    b = {s: attention(x) for s, x in pre_mid.items()}
    q = {s: attention(x) for s, x in qk_hi.items()}
    growth = _paired(a, b, lambda u, v: _log_ratio(u[0], v[0]))
    vs_qk = _paired(a, q, lambda u, v: _log_ratio(u[0], v[0]))
    drop = _paired(a, b, lambda u, v: v[1] - u[1])
    drop_qk = _paired(a, q, lambda u, v: v[1] - u[1])
    g, t = e["logit_growth_log10"], e["entropy_drop"]
    where = f"{d}L pre-LN"
    return [
        seeded_check(f"{where}: the largest attention logit grows at lr {hi:g} (log10 of it at lr {hi:g} / at "
                     f"lr {mid:g})", f"> {g:g}", growth, at_least=g, fmt="+.2f",
                     context=f"logit {_mean(v[0] for v in a.values()):.1f} vs {_mean(v[0] for v in b.values()):.1f}"),
        seeded_check(f"{where}, lr {hi:g}: qk-layernorm keeps the attention logits small (log10 of the largest "
                     "without / with)", f"> {g:g}", vs_qk, at_least=g, fmt="+.2f",
                     context=f"with qk-layernorm {_mean(v[0] for v in q.values()):.1f}"),
        seeded_check(f"{where}: attention entropy collapses at lr {hi:g} (mean entropy at lr {mid:g} - at lr "
                     f"{hi:g}, nats)", f"> {t:g}", drop, at_least=t, fmt="+.3f",
                     context=f"entropy {_mean(v[1] for v in a.values()):.3f} vs {_mean(v[1] for v in b.values()):.3f}"),
        seeded_check(f"{where}, lr {hi:g}: qk-layernorm prevents the collapse (entropy with - without, nats)",
                     f"> {t:g}", drop_qk, at_least=t, fmt="+.3f",
                     context=f"with qk-layernorm {_mean(v[1] for v in q.values()):.3f}"),
        _lower(f"{d}L: qk-layernorm lowers pre-LN's LR sensitivity", by[("pre", d)], by[("pre qk_norm=True", d)],
               e["qk_norm_lowers"], "pre - pre with qk-layernorm"),
    ]  # fmt: skip


def _z_loss_checks(runs: list[dict], by: dict, r: dict, d: int, e: dict):
    hi, z = r["high_lr"], r["z_loss"]
    label = setting_label({"wrap": "pre", "z_loss": z})
    plain, with_z = _runs_at(runs, "pre", d, hi), _runs_at(runs, label, d, hi)
    seeds = sorted(set(plain) & set(with_z))
    ratio = [_log_ratio(_lse(plain[s]), _lse(with_z[s])) for s in seeds]
    return [
        seeded_check(f"{d}L pre-LN, lr {hi:g}: z-loss keeps the output log-partition near 0 (log10 |log Z| "
                     "without / with)", f"> {e['z_loss_log10']:g}", ratio, at_least=e["z_loss_log10"], fmt="+.2f",
                     context=f"|log Z| {_mean(_lse(x) for x in plain.values()):.2f} vs "
                     f"{_mean(_lse(x) for x in with_z.values()):.2f}"),
        _lower(f"{d}L: z-loss lowers pre-LN's LR sensitivity", by[("pre", d)], by[(label, d)],
               e["z_loss_lowers"], "pre - pre with z-loss"),
    ]  # fmt: skip


def _slope_checks(curve_list: list[Curve], e: dict):
    """Per setting, the best learning rate's slope against depth; inconclusive where the best learning
    rate sits at an edge of the sweep at some depth (the sweep did not locate it)."""
    info = ", ".join(f"{k}: {v:+g}" for k, v in e["slope_information"].items())
    checks = []
    for label, seeds in best_lr_slope(curve_list, per_seed=True).items():
        check = seeded_check(
            f"{label}: the best learning rate falls with depth (slope of log10 lr against log10 depth)",
            f"< {e['best_lr_slope']:g} (for information: {info})",
            seeds,
            at_most=e["best_lr_slope"],
            fmt="+.2f",
        )
        edges = [c.depth for c in curve_list if c.label == label and c.best()["at_edge"]]
        if edges and e["edge_is_inconclusive"]:
            check.result = INCONCLUSIVE
            check.measured += f"; the best learning rate is at an edge of the sweep at {edges} layers"
        checks.append(check)
    return checks


def _table(curve_list: list[Curve]) -> dict:
    rows = []
    for c in curve_list:
        s, best = c.sensitivity(), c.best()
        rows.append([c.label, str(c.depth), f"{s[0]:.3f} [{s[1]:.3f}, {s[2]:.3f}]", f"{best['lr']:.2g}",
                     f"{best['loss'][0]:.3f}"])  # fmt: skip
    return {"title": "LR sensitivity per setting and depth (mean [95% interval] over seeds)",
            "columns": ["setting", "layers", "LR sensitivity (nats)", "best lr", "its loss"], "rows": rows}  # fmt: skip


def _plot(db: str, name: str, out_dir: str | None) -> str | None:
    """The preset's final loss against learning rate (the report's figure) in ``out_dir``."""
    if out_dir is None:
        return None
    fig = lr_curves(load(db, name))
    return save_figure(fig, os.path.join(out_dir, "lr-sensitivity.png")) if fig is not None else None


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def _mean(values) -> float:
    vals = [v for v in values if _finite(v)]
    return sum(vals) / len(vals) if vals else math.nan

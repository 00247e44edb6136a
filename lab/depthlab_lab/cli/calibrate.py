"""depthlab calibrate: refit the doctor's plateau prediction, warmup-length limit and update-size limits from tuning studies."""

from __future__ import annotations

import os
import subprocess

from depthlab.doctor.atlas import Atlas
from depthlab.doctor.plateau import FAMILY_TEXT
from depthlab.doctor.record import RECORD_PATH, load_record
from depthlab.errors import InputError
from depthlab.paths import check_output_file
from depthlab_lab.calibrate.calibration import write_record
from depthlab_lab.calibrate.predictor_fit import fitted_predictor
from depthlab_lab.calibrate.refit import refit
from depthlab_lab.docgen.doctor_fits import band_text, family_text, scaled_text


def add_parser(sub) -> None:
    p = sub.add_parser(
        "calibrate",
        help="refit the doctor's plateau prediction, warmup-length limit and update-size limits from tuning studies",
        description="Fit, on the runs of the tuning studies named (pooled), when a run leaves the unigram "
        "plateau (a censored log-linear fit of the escape step on lr, width, depth and warmup, per family "
        "of stacks), the step-size limit of stacks that renormalise the stream as a function of the "
        "warmup length, and the limits on the relative update of the other stacks (those that never "
        "renormalise it; zero-gated ones apart), and write them into the doctor's calibration record with "
        "what they were fitted on. A held-out study is refused: held-out grids are only scored.",
    )
    p.add_argument(
        "--from",
        dest="sources",
        nargs=2,
        action="append",
        metavar=("DB", "STUDY"),
        help="a study store and the name of a tuning study in it (repeat for several; their runs are pooled)",
    )
    p.add_argument(
        "--predictor",
        action="store_true",
        help="refit only the predictor behind depthlab advise, on the atlas of measured runs (its form chosen "
        "by cross-validation leaving out one width, then one depth, at a time), and write it into the record",
    )
    p.add_argument(
        "--record",
        default=RECORD_PATH,
        help="the calibration record to update (default: the doctor's own, depthlab/doctor/calibration.json)",
    )
    p.set_defaults(run=run)


def _commit() -> str | None:
    """The git commit of the code doing the fit (None outside a git work tree)."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        out = subprocess.run(
            ["git", "-C", here, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def run(args) -> int:
    if args.predictor == bool(args.sources):
        raise InputError(
            "give either --from DB STUDY (the doctor's limits) or --predictor (advise's predictor)"
        )
    check_output_file(args.record, "--record", ("json",))
    if not os.path.isfile(args.record):
        raise InputError(f"--record {args.record}: no such file (the record to update must exist)")
    try:
        old = load_record(args.record)
    except (ValueError, OSError) as e:
        raise InputError(f"--record {args.record}: not a readable calibration record ({e})") from None
    if args.predictor:
        return _refit_predictor(old, args.record)
    record = refit(old, [tuple(s) for s in args.sources], _commit())
    write_record(record, args.record)
    load_record.cache_clear()
    for s in record["fitted_from"]["studies"]:
        print(f"{s['study']} in {s['store']}: {s['done']} of {s['runs']} runs done, {s['escaped']} escaped")
    for fam, fit in (record.get("escape") or {}).get("families", {}).items():
        ins = fit["in_sample"]
        print(
            f"plateau, {FAMILY_TEXT[fam]}: {fit['runs']} runs ({fit['censored']} censored), sigma "
            f"{fit['sigma']:.3g} in ln steps; in-sample {ins['agreed']} of {ins['runs']} escapes within budget "
            "told right"
        )
    _print_limits(record)
    print(f"wrote {args.record}")
    return 0


def _by_width(entries: list[dict]) -> str:
    """'; by width: 32 band 2.77-8.3 (12 of 90 misclassified), 128 ...' ('' without a fit per width)."""
    said = [
        f"{w['d_model']} band {band_text(w['band'])} ({w['errors']} of {w['runs']} misclassified)"
        for w in entries
    ]
    return "; by width: " + ", ".join(said) if said else ""


def _print_limits(record: dict) -> None:
    """One line per fitted step limit (per warmup) and limit on rho (per family), with its bands per width."""
    for p in (record.get("step_limit") or {}).get("warmups", []):
        print(
            f"step limit at warmup {p['warmup']}: {p['limit']:.3g} ({p['errors']} of {p['runs']} runs "
            f"misclassified){_by_width(p.get('by_width', []))}"
        )
    for wrap, own in ((record.get("step_limit") or {}).get("by_wrap") or {}).items():
        on = (
            f" on s x (d / {own.get('width_ref', 128)})^{-own['width_exponent']:g}"
            if own.get("width_exponent")
            else ""
        )
        for p in own["warmups"]:
            print(
                f"step limit of {wrap}{on} at warmup {p['warmup']}: {p['limit']:.3g} ({p['errors']} of "
                f"{p['runs']} runs misclassified){_by_width(p.get('by_width', []))}"
            )
        if on:
            print(f"  {scaled_text(wrap, own)}")
    for fam, fit in ((record.get("update_limit") or {}).get("families") or {}).items():
        print(
            f"limit on rho, {family_text(fam, fit)}: {fit['limit']:.3g}, band {band_text(fit['band'])} "
            f"({fit['errors']} of {fit['runs']} runs misclassified){_by_width(fit['by_width'])}"
        )


def _refit_predictor(old: dict, path: str) -> int:
    """Fit advise's predictor on the shipped atlas under the record's limits; write its section."""
    section = fitted_predictor(Atlas.load(), old)
    write_record({**old, "predictor": section}, path)
    load_record.cache_clear()
    print(f"predictor: {section['examples']} measured runs; chosen form {section['form']}")
    for axis, name in (("d_model", "one width"), ("n_layers", "one depth")):
        print(f"leaving out {name} at a time:")
        for cand, sc in section["cv"][axis].items():
            print(
                f"  {cand:32} {sc['hits']:>5} of {sc['runs']} right ({sc['accuracy']:.1%}), Brier {sc['brier']:.3f}"
            )
    print(f"wrote {path}")
    return 0

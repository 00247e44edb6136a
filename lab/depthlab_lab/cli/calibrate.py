"""depthlab calibrate: refit the doctor's plateau prediction, warmup-length limit and update-size limits from tuning studies."""

from __future__ import annotations

import json
import os
import subprocess

from depthlab.doctor.atlas import Atlas
from depthlab.doctor.plateau import FAMILY_TEXT
from depthlab.doctor.record import RECORD_PATH, load_record
from depthlab.errors import InputError
from depthlab.paths import check_input_file, check_output_file
from depthlab_lab.calibrate.calibration import write_record
from depthlab_lab.calibrate.predictor_fit import fitted_predictor
from depthlab_lab.calibrate.refit import SECTIONS, kept_text, refit
from depthlab_lab.docgen.doctor_fits import band_text, family_text, scaled_text


def add_parser(sub) -> None:
    p = sub.add_parser(
        "calibrate",
        help="refit the doctor's plateau prediction, warmup-length limit and update-size limits from tuning studies",
        description="Refit the doctor's rules on the runs of the tuning studies --from names (pooled) and write "
        "them into its calibration record, with what they were fitted on. Three rules are fitted. When a "
        "run leaves the unigram plateau: a censored log-linear fit of the escape step on lr, width, depth "
        "and warmup, per family of stacks. The step-size limit of stacks that renormalise the stream, "
        "against the warmup length. The limits on the relative update of the stacks that never "
        "renormalise it (zero-gated ones apart). Without --record the library's own record is rewritten. "
        "A held-out study is refused: held-out grids are only scored.",
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


def read_calibration(path: str) -> dict:
    """The calibration record at ``path``, checked to be one before anything is fitted: InputError (one
    line naming --record) for a missing file, one that is not a regular file, not JSON, not a JSON object,
    or whose sections are not the objects depthlab writes."""
    check_output_file(path, "--record", ("json",))
    if not os.path.lexists(path):
        raise InputError(f"--record {path}: no such file (the record to update must exist)")
    check_input_file(path, "--record")
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except (ValueError, OSError, RecursionError) as e:
        why = "nested too deeply" if isinstance(e, RecursionError) else " ".join(str(e).split())[:120]
        raise InputError(f"--record {path}: not a readable calibration record ({why})") from None
    if not isinstance(record, dict):
        kind = {list: "list", str: "string", bool: "boolean", type(None): "null"}.get(type(record), "number")
        raise InputError(f"--record {path}: not a calibration record (a JSON {kind}, not an object)")
    for key in (*SECTIONS, "fitted_from", "range", "agreement", "predictor"):
        if key in record and record[key] is not None and not isinstance(record[key], dict):
            raise InputError(
                f"--record {path}: not a calibration record as depthlab writes it (its {key!r} is not an "
                "object: damaged?); it was left as it was"
            )
    return record


def run(args) -> int:
    if args.predictor == bool(args.sources):
        raise InputError(
            "give either --from DB STUDY (the doctor's limits) or --predictor (advise's predictor)"
        )
    old = read_calibration(args.record)
    if args.predictor:
        return _refit_predictor(old, args.record)
    record = refit(old, [tuple(s) for s in args.sources], _commit(), progress=True)
    write_record(record, args.record)
    load_record.cache_clear()
    fitted = record["fitted_from"]
    for s in fitted["studies"]:
        print(f"{s['study']} in {s['store']}: {s['done']} of {s['runs']} runs done, {s['escaped']} escaped")
    shared = sum(s.get("shared", 0) for s in fitted["studies"])
    if shared:
        print(f"{shared} runs shared by the studies named (the same config hash) were counted once")
    for fam, fit in (record.get("escape") or {}).get("families", {}).items():
        if any(k["section"] == "escape" and k.get("families", fam) == fam for k in fitted.get("kept", [])):
            continue  # kept from before: said below
        ins = fit["in_sample"]
        print(
            f"plateau, {FAMILY_TEXT[fam]}: {fit['runs']} runs ({fit['censored']} censored), sigma "
            f"{fit['sigma']:.3g} in ln steps; in-sample {ins['agreed']} of {ins['runs']} escapes within budget "
            "told right"
        )
    _print_limits(_fitted_only(record))
    for entry in fitted.get("kept", []):
        print(kept_text(entry))
    print(f"wrote {args.record}")
    return 0


def _fitted_only(record: dict) -> dict:
    """The record's step_limit and update_limit as fitted now (what a refit kept from before left out)."""
    out = {k: record.get(k) for k in ("step_limit", "update_limit")}
    for entry in record["fitted_from"].get("kept", []):
        section = entry["section"]
        if section == "escape" or out.get(section) is None:
            continue
        if "by_wrap" in entry or "families" in entry:
            part = "by_wrap" if "by_wrap" in entry else "families"
            own = {k: v for k, v in out[section][part].items() if k != entry[part]}
            out[section] = {**out[section], part: own}
        else:
            out[section] = None
    return out


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

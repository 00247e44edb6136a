"""depthlab reproduce NAME: recompute a claim of the source texts or the papers, with its result."""

from __future__ import annotations

import os

from depthlab.cli.common import add_json_flag, refuse_flags
from depthlab.docgen.doctor_score import DEFAULT_DB as DOCTOR_DB
from depthlab.docgen.doctor_score import DEFAULT_DOC as DOCTOR_DOC
from depthlab.docgen.doctor_score import write_doctor_doc
from depthlab.docgen.reproductions import DEFAULT_DOC, run_all
from depthlab.docgen.tour import check_written, write_tour
from depthlab.errors import ConfigError, InputError
from depthlab.paths import check_folder, check_output_file, write_json
from depthlab.reproduce import REPRODUCTIONS
from depthlab.reproduce.reproduction import SCALES, run_claim
from depthlab.study.scoring import format_score
from depthlab.train.distributed import set_torch_threads

OUT = os.path.join("runs", "reproduce")
DOCUMENTS = ("all", "tour", "doctor")  # names that write a document instead of checking one claim


def add_parser(sub) -> None:
    p = sub.add_parser(
        "reproduce",
        help="reproduce the source texts' numbers and the published claims",
        description="Recompute a claim and print, beside each stated number, the measured one "
        "and whether they match. NAME 'list' lists the reproductions; 'all' runs every one and writes "
        f"{DEFAULT_DOC}; 'tour' regenerates docs/tour.md from the real output of every command it shows; 'doctor' "
        "runs (or resumes) the doctor's tuning and held-out grids and writes docs/doctor.md with its score.",
    )
    p.add_argument("name", help="which reproduction (e.g. seeds, init-scaling), or list, all, tour, doctor")
    p.add_argument(
        "--quick", action="store_true", help="a smaller, faster smoke version (not the registered regime)"
    )
    p.add_argument(
        "--scale",
        choices=SCALES,
        default="small",
        help="small (default: the registered small regime, minutes on a laptop) or large (d_model >= 256, "
        ">= 2,000 steps: a GPU or a long CPU night; training claims only). The expected time is printed "
        "before a training claim starts",
    )
    p.add_argument("--out", help=f"folder for plots (default {OUT})")
    p.add_argument(
        "--doc",
        help=f"for 'all': the Markdown file to write, its plots in img/ beside it (default {DEFAULT_DOC})",
    )
    p.add_argument(
        "--db",
        help=f"for 'doctor': the study store its grids run into, runs already there skipped (default {DOCTOR_DB})",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (default 1: the reproductions' models are tiny, and one thread is "
        "as fast and leaves the other core free)",
    )
    add_json_flag(p)
    p.set_defaults(run=run)


def run(args) -> int:
    set_torch_threads(args.threads)
    if args.name in ("list", "tour"):
        why = f"does nothing with '{args.name}'"
        refuse_flags(args, why, quick=args.quick, json=args.json is not None, out=args.out is not None)
    if args.name == "list":
        for name, fn in sorted(REPRODUCTIONS.items()):
            print(f"{name:16} {(fn.__doc__ or '').strip().splitlines()[0] if fn.__doc__ else ''}")
        return 0
    if args.name not in REPRODUCTIONS and args.name not in DOCUMENTS:
        raise ConfigError(
            "NAME", args.name, f"one of {', '.join(sorted(REPRODUCTIONS))}, list, all, tour, doctor"
        )
    if args.doc is not None and args.name not in ("all", "doctor"):
        raise InputError(f"--doc applies to 'all' and 'doctor' only, not to {args.name}")
    if args.db is not None and args.name != "doctor":
        raise InputError(f"--db applies to 'doctor' only, not to {args.name}")
    if args.scale != "small" and args.name in ("list", "tour", "doctor"):
        raise InputError(f"--scale applies to the reproductions, not to {args.name}")
    if args.quick and args.scale != "small":
        raise InputError(
            "--quick is a smaller version of the small scale; it does not combine with --scale large"
        )
    if args.name == "doctor":
        print(
            "the doctor's grids: 340 tiny training runs, about 45 minutes on two idle cores (runs already "
            f"in {args.db or DOCTOR_DB} are skipped)",
            flush=True,
        )
        scores = write_doctor_doc(args.db or DOCTOR_DB, args.doc or DOCTOR_DOC)
        print(format_score(scores["heldout"], scores.get("baselines")))
        print(f"wrote {args.doc or DOCTOR_DOC}")
        return 0
    if args.name == "tour":
        results, path = write_tour()
        missing = check_written(results, path)
        print(f"wrote {path} ({len(results)} commands, {sum(r.seconds for r in results):.0f} s)")
        return 1 if missing else 0
    check_output_file(args.json, "--json")  # before the reproduction: a bad path must not cost its run
    check_folder(args.out or OUT, "--out")
    out_dir = os.path.join(args.out or OUT, args.name)
    if args.name == "all":
        result = run_all(quick=args.quick, out_dir=out_dir, doc=args.doc, scale=args.scale)
    else:
        result = run_claim(args.name, quick=args.quick, out_dir=out_dir, scale=args.scale)
    if args.json == "-":
        write_json(result.to_dict(), "-")
    else:
        print(result.format())
        write_json(result.to_dict(), args.json)
    return 0  # a claim that does not reproduce is a result (printed as MISMATCH), not a failure

"""depthlab reproduce NAME: recompute a claim of the source texts or the papers, with its result."""

from __future__ import annotations

import inspect
import os

from depthlab.cli.common import add_json_flag, refuse_flags
from depthlab.errors import ConfigError, InputError
from depthlab.paths import check_folder, check_output_file, check_path, write_json
from depthlab.report.doctor_score import format_score
from depthlab.study.executors import default_workers
from depthlab.study.grid import StudyConfig
from depthlab.study.store import DEFAULT_DB as STUDY_DB
from depthlab.study.storefile import check_store_path
from depthlab.train.distributed import set_torch_threads
from depthlab_lab import lab_file
from depthlab_lab.docgen.doctor_scale import DEFAULT_SCALE_DB as SCALE_DB
from depthlab_lab.docgen.doctor_score import DEFAULT_DB as DOCTOR_DB
from depthlab_lab.docgen.doctor_score import DEFAULT_DOC as DOCTOR_DOC
from depthlab_lab.docgen.doctor_score import HELDOUT as DOCTOR_HELDOUT
from depthlab_lab.docgen.doctor_score import SCALE_GRIDS, doctor_plan, write_doctor_doc
from depthlab_lab.docgen.doctor_score import TUNING as DOCTOR_TUNING
from depthlab_lab.docgen.ladder_doc import DEFAULT_DB as LADDER_DB
from depthlab_lab.docgen.ladder_doc import DEFAULT_DOC as LADDER_DOC
from depthlab_lab.docgen.ladder_doc import check_page, write_ladder
from depthlab_lab.docgen.reproductions import DEFAULT_DOC, names_to_run, parts_of, render_all, run_all
from depthlab_lab.docgen.reproductions_ladder import check_ladder_db
from depthlab_lab.docgen.tour import check_written, write_tour
from depthlab_lab.reproduce import REPRODUCTIONS, parts, run_cache
from depthlab_lab.reproduce.dry_run import print_plan as print_all_plan
from depthlab_lab.reproduce.ladder_record import record_path, restore_ladder
from depthlab_lab.reproduce.ladder_run import check_db, chosen, print_plan, rungs
from depthlab_lab.reproduce.reproduction import SCALES, format_counts, run_claim
from depthlab_lab.restore import check_restore_path, check_studies, checked, read_record, restore

OUT = os.path.join("runs", "reproduce")
DOCUMENTS = ("all", "tour", "doctor", "ladder")  # names that write a document instead of checking one claim


def add_parser(sub) -> None:
    p = sub.add_parser(
        "reproduce",
        help="reproduce the source texts' numbers and the published claims",
        description="Recompute a claim and print, beside each stated number, the measured one "
        "and whether they match: agree, MISMATCH, or inconclusive where the 95% interval over seeds "
        f"straddles the threshold. Run again, a claim interrupted midway resumes from its run cache "
        f"(--cache); {DEFAULT_DOC} gives each claim's result and time. "
        "NAME 'list' lists the reproductions; 'all' runs every one and writes "
        f"{DEFAULT_DOC}; 'tour' regenerates docs/tour.md from the real output of every command it shows; 'doctor' "
        "runs (or resumes) the doctor's tuning and held-out grids and writes docs/doctor.md with its score; "
        f"'ladder' runs (or resumes) the scale ladder into a study store and writes {LADDER_DOC}.",
    )
    p.add_argument(
        "name", help="which reproduction (e.g. seeds, init-scaling), or list, all, tour, doctor, ladder"
    )
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
        "--ladder-db",
        help=f"for 'all': the scale ladder's store whose tables the document shows in each claim on the "
        f"ladder (default {LADDER_DB}; absent: 'not run')",
    )
    p.add_argument(
        "--parts",
        metavar="DIR",
        help="for 'all': the folder of its committed parts, one file per claim written as the claim "
        "finishes; a claim whose part has today's key (the same code, registration, torch and threads) is "
        f"loaded from it, not run, so the page accumulates across sittings (default beside --doc: "
        f"{parts.default_folder(DEFAULT_DOC)} for {DEFAULT_DOC})",
    )
    p.add_argument(
        "--render",
        action="store_true",
        help="for 'all': run nothing; render the page and its run record from the committed parts, "
        "whatever their key (a claim computed under code that has changed since says so in its "
        "section, with the commit it was computed at)",
    )
    p.add_argument(
        "--cache",
        help="for a claim and 'all': the run cache folder; every training run is stored there as it "
        "finishes and loaded instead of trained when asked for again with the same configs, torch "
        f"threads and training code (default {os.path.join(OUT, run_cache.DEFAULT_FOLDER)}, under --out). "
        f"The claims that train a study (lr-sensitivity, lr-transfer-depth, width-transfer) keep their runs "
        f"in the study store {STUDY_DB} instead, and resume there",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (default 1: the reproductions' models are tiny, and one thread is "
        "as fast and leaves the other core free)",
    )
    p.add_argument(
        "--db",
        help=f"for 'doctor' and 'ladder': the study store their runs go into, runs already stored skipped "
        f"(default {DOCTOR_DB} for 'doctor', {LADDER_DB} for 'ladder')",
    )
    p.add_argument(
        "--scale-db",
        help=f"for 'doctor': the store of the grids across scale, read and scored, never trained here "
        f"(`depthlab study` runs them; default {SCALE_DB})",
    )
    p.add_argument(
        "--restore",
        metavar="RECORD",
        help="for 'doctor' and 'ladder': first write the runs a committed run record keeps "
        "(docs/doctor-runs.json into --db and --scale-db, their probes taken again; "
        "docs/reproductions-ladder-runs.json into --db), so that the document is re-derived without "
        "training what the record holds (runs already stored are kept as they are)",
    )
    p.add_argument(
        "--claims", help="for 'ladder': comma-separated claims (default every claim on the ladder)"
    )
    p.add_argument(
        "--plan",
        action="store_true",
        help="for 'all' and 'ladder': print each claim's runs, how many are already stored, and the "
        "expected time of the rest, train nothing",
    )
    add_json_flag(p)
    p.set_defaults(run=run)


# The flags that name a file or folder: '' (or a NUL byte, a name too long) is refused before anything,
# never read as the flag left out (--doc '' would have rewritten the default page).
PATH_FLAGS = ("out", "doc", "ladder_db", "parts", "cache", "db", "scale_db", "restore")


def run(args) -> int:
    set_torch_threads(args.threads)
    for dest in PATH_FLAGS:
        if getattr(args, dest) is not None:
            check_path(getattr(args, dest), "--" + dest.replace("_", "-"))
    if args.name in ("list", "tour"):
        why = f"does nothing with '{args.name}'"
        given = {"cache": args.cache is not None, "ladder_db": args.ladder_db is not None, "plan": args.plan}
        given["parts"] = args.parts is not None
        given["render"] = args.render
        refuse_flags(
            args, why, quick=args.quick, json=args.json is not None, out=args.out is not None, **given
        )
    if args.name == "list":
        print(listing())
        return 0
    _refuse_ladder_flags(args)
    if args.name not in REPRODUCTIONS and args.name not in DOCUMENTS:
        raise ConfigError(
            "NAME", args.name, f"one of {', '.join(sorted(REPRODUCTIONS))}, list, {', '.join(DOCUMENTS)}"
        )
    if args.doc is not None and args.name not in ("all", "doctor", "ladder"):
        raise InputError(f"--doc applies to 'all', 'doctor' and 'ladder' only, not to {args.name}")
    if args.db is not None and args.name not in ("doctor", "ladder"):
        raise InputError(f"--db applies to 'doctor' and 'ladder' only, not to {args.name}")
    if args.scale_db is not None and args.name != "doctor":
        raise InputError(f"--scale-db applies to 'doctor' only, not to {args.name}")
    if args.restore is not None and args.name not in ("doctor", "ladder"):
        raise InputError(f"--restore applies to 'doctor' and 'ladder' only, not to {args.name}")
    if args.scale != "small" and args.name in ("list", "tour", "doctor", "ladder"):
        raise InputError(f"--scale applies to the reproductions, not to {args.name}")
    if args.quick and args.scale != "small":
        raise InputError(
            "--quick is a smaller version of the small scale; it does not combine with --scale large"
        )
    if args.name == "doctor":
        return run_doctor_command(args)
    if args.name == "ladder":
        return run_ladder_command(args)
    if args.name == "tour":
        results, path = write_tour()
        missing = check_written(results, path)
        print(f"wrote {path} ({len(results)} commands, {sum(r.seconds for r in results):.0f} s)")
        return 1 if missing else 0
    return run_reproductions(args)


def listing() -> str:
    """One line per reproduction: its name, then its claim (the first paragraph of its docstring, which
    can run over two lines of source: the first line alone stopped at "for post-LN,")."""
    width = max(map(len, REPRODUCTIONS))
    return "\n".join(
        f"{name:{width}}  {' '.join((inspect.getdoc(fn) or '').split(chr(10) * 2)[0].split())}"
        for name, fn in sorted(REPRODUCTIONS.items())
    )


def run_doctor_command(args) -> int:
    """``depthlab reproduce doctor``: everything checked first (the page, the stores, the record to
    restore), then the record's runs written back (``--restore``), the plan and its expected time, the
    runs the stores lack trained, and the page written."""
    db, doc, scale_db = _or(args.db, DOCTOR_DB), _or(args.doc, DOCTOR_DOC), _or(args.scale_db, SCALE_DB)
    check_output_file(doc, "--doc", ("md",))
    check_store_path(db, "--db")
    if args.restore is not None:
        _restore_doctor(args.restore, db, scale_db)
    elif args.scale_db is not None and not os.path.isfile(args.scale_db):
        raise InputError(f"--scale-db {args.scale_db}: no such store (run the scale grids into it first)")
    line, clock = doctor_plan(db, scale_db)
    print(f"{line}; then {doc} written", flush=True)
    scores = write_doctor_doc(db, doc, scale_db=scale_db, clock=clock)
    for grid in scores["scale"]["grids"]:  # newest first, as the document's headline
        if grid.get("heldout"):
            name = grid["grid"][0]
            print(f"held-out across width ({name}): " + format_score(grid["heldout"], grid.get("baselines")))
    print("held-out (widths 48-64): " + format_score(scores["heldout"], scores.get("baselines")))
    print(f"wrote {doc}")
    return 0


def _restore_doctor(record: str, db: str, scale_db: str) -> None:
    """Write the runs ``record`` keeps into the doctor's two stores, one line per study restored. A
    record of none of the doctor's studies (the ladder's), or of a study that is none of them, is refused
    before anything is written or trained."""
    check_restore_path(record)
    check_store_path(db, "--db")
    check_store_path(scale_db, "--scale-db")
    grids = [DOCTOR_TUNING, DOCTOR_HELDOUT, *SCALE_GRIDS]
    names = [StudyConfig.from_yaml(lab_file(g)).name for g in grids]
    other = "the ladder's run record? it goes to depthlab reproduce ladder --restore"
    check_studies(record, read_record(record), names, "the doctor's", other)
    checked(record, grids)  # every row of both stores checked before either is written
    done = restore(record, db, [DOCTOR_TUNING, DOCTOR_HELDOUT]) | restore(record, scale_db, list(SCALE_GRIDS))
    _print_restored(done, record)


def _print_restored(done: dict[str, tuple[int, int]], record: str) -> None:
    for name, (new, kept) in done.items():
        print(f"{name}: {new} runs restored from {record}, {kept} already stored", flush=True)


def run_reproductions(args) -> int:
    """A claim or ``all``: its plan (``--plan``), or its runs through the run cache and its result."""
    check_output_file(args.json, "--json")  # before the reproduction: a bad path must not cost its run
    out = _or(args.out, OUT)
    check_folder(out, "--out")
    cache = _or(args.cache, os.path.join(out, run_cache.DEFAULT_FOLDER))
    check_folder(cache, "--cache")
    out_dir = os.path.join(out, args.name)
    folder = parts_of(args.parts, args.doc, args.scale)
    if args.plan:
        check_folder(folder, "--parts")  # a plan reads the parts, writes nothing
        names = names_to_run(REPRODUCTIONS, scale=args.scale)
        print_all_plan(names, args.scale, args.quick, cache, parts_dir=folder)
        return 0
    if args.render:
        result = render_all(args.doc, args.scale, _or(args.ladder_db, LADDER_DB), folder)
        if args.json == "-":
            write_json(result.to_dict(), "-")
        else:
            print(f"{format_counts(result.checks)}; wrote {result.data['doc']} and {result.data['record']}")
            write_json(result.to_dict(), args.json)
        return 0
    if args.name == "all":
        check_ladder_db(_or(args.ladder_db, LADDER_DB))  # before any run: a bad path must not cost them
        parts.check_writable(folder)
    with run_cache.using(cache):  # for this command only (a caller in-process keeps its own)
        if args.name == "all":
            result = run_all(
                quick=args.quick,
                out_dir=out_dir,
                doc=args.doc,
                scale=args.scale,
                ladder_db=_or(args.ladder_db, LADDER_DB),
                parts_dir=folder,
                plan=True,
            )
        else:
            result = run_claim(args.name, quick=args.quick, out_dir=out_dir, scale=args.scale)
    if args.json == "-":
        write_json(result.to_dict(), "-")
    else:
        print(result.format())
        write_json(result.to_dict(), args.json)
    return 0  # a claim that does not reproduce is a result (printed as MISMATCH), not a failure


def _or(value: str | None, default: str) -> str:
    """A path flag's value, ``default`` when it was not given: '' is a value (refused where it is checked
    as a path), not the flag left out."""
    return default if value is None else value


def _refuse_ladder_flags(args) -> None:
    """InputError when a flag of 'ladder' only, of 'all' and 'ladder', of 'all' only, or of the
    reproductions is given to another NAME, or --plan with --json (a plan writes no result)."""
    if args.name != "ladder" and args.claims is not None:
        raise InputError(f"--claims applies to 'ladder' only, not to {args.name}")
    if args.name not in ("all", "ladder") and args.plan:
        raise InputError(f"--plan applies to 'all' and 'ladder' only, not to {args.name}")
    if args.name != "all" and args.ladder_db is not None:
        raise InputError(f"--ladder-db applies to 'all' only, not to {args.name}")
    if args.name != "all" and args.parts is not None:
        raise InputError(f"--parts applies to 'all' only, not to {args.name}")
    if args.name != "all" and args.render:
        raise InputError(f"--render applies to 'all' only, not to {args.name}")
    if args.render:
        given = {"quick": args.quick, "plan": args.plan, "cache": args.cache is not None}
        refuse_flags(args, "does nothing with --render (it runs nothing)", **given, out=args.out is not None)
    if args.name in DOCUMENTS[1:] and args.cache is not None:
        raise InputError(f"--cache applies to the reproductions and 'all', not to {args.name}")
    if args.plan and args.json is not None and args.name == "all":  # ladder refuses --json itself
        raise InputError("--json: --plan prints a plan and writes no result")


def run_ladder_command(args) -> int:
    """``depthlab reproduce ladder``: the plan (``--plan``), or the runs and the page, after the runs of
    a run record (``--restore``) are written into the store. ``--quick`` writes no page unless ``--doc``
    names one: its results are not the ladder's."""
    why = "does nothing with 'ladder'"
    refuse_flags(args, why, json=args.json is not None, out=args.out is not None)
    db = _or(args.db, LADDER_DB)
    check_db(db)
    names = chosen(args.claims)
    doc = args.doc if args.quick else _or(args.doc, LADDER_DOC)
    if doc and not args.plan:
        check_page(doc)
    if args.restore is not None:  # before the plan and the runs: what the record holds is not trained
        check_store_path(db, "--db")
        _print_restored(restore_ladder(args.restore, db, names, args.quick), args.restore)
    if args.plan:
        print_plan(rungs(names, args.quick), db, default_workers())
        return 0
    os.makedirs(os.path.dirname(os.path.abspath(db)), exist_ok=True)
    effects = write_ladder(db, doc, names, quick=args.quick)
    for name, rows in effects.items():
        done = sum(1 for row in rows for m in row["measured"] if m.interval is not None)
        print(f"ladder {name}: {done} of {sum(len(row['measured']) for row in rows)} effect cells measured")
    if doc:
        print(f"wrote {doc} and its run record {record_path(doc)}")
    return 0

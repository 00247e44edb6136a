"""depthlab study: run a grid of training runs into the SQLite store (resumable), then write the report."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import textwrap

from depthlab.cli.common import add_memory_flag, check_given_paths, refuse_flags
from depthlab.errors import InputError
from depthlab.paths import printable
from depthlab.report import check_report_dir, default_report_dir, load, render, summary_table, with_flag
from depthlab.report.lr_tables import lr_summary
from depthlab.study import StudyConfig, plan, preset, run_study
from depthlab.study.executors import EXECUTORS, check_executor, default_workers, threads_per_worker
from depthlab.study.grid import MAX_RUNS
from depthlab.study.grid_fields import field_help
from depthlab.study.presets import preset_lines
from depthlab.study.runner import grid_shape, repeat_note, store_note, time_plan
from depthlab.study.store import DEFAULT_DB, check_store_path
from depthlab.words import plural


def add_parser(sub) -> None:
    p = sub.add_parser(
        "study",
        help="run a grid of training runs (resumable) and write its report",
        # the presets are listed one per line below the options: the text is wrapped here, not by argparse
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=textwrap.fill(
            "Expand a grid (a preset or a YAML file) into runs, skip those the store already "
            "holds, run the rest on a local process pool or Ray, store every result in SQLite, then write "
            "the HTML report and print an outcome table. Re-running the same command resumes. Each finished "
            "run's curves are also written as TensorBoard events under <db folder>/tensorboard/<study name>/"
            "<run>/ (see them all with: tensorboard --logdir <db folder>/tensorboard).",
            width=100,
        ),
        epilog="presets (--preset NAME):\n" + "\n".join("  " + line for line in preset_lines()),
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--preset", metavar="NAME", help="a preset grid, one of those listed below (default: default)"
    )
    src.add_argument("--grid", metavar="FILE.yaml", help="a grid file: model/train base config and axes")
    p.add_argument(
        "--db", default=DEFAULT_DB, help=f"the study store (default {DEFAULT_DB}); any other file is refused"
    )
    p.add_argument(
        "--workers",
        type=int,
        default=default_workers(),
        help=f"runs at once; each gets cores/workers torch threads (default {default_workers()})",
    )
    p.add_argument("--executor", default="local", help=f"{'|'.join(EXECUTORS)} (default local)")
    p.add_argument("--ray-address", help="an existing Ray cluster (default: start a local Ray)")
    p.add_argument("--report", metavar="DIR", help="report folder (default <db folder>/report/<study name>)")
    p.add_argument("--no-report", action="store_true", help="do not write the report at the end")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the run count, then each run and what the store holds of it; run nothing",
    )
    p.add_argument(
        "--max-runs",
        type=int,
        default=MAX_RUNS,
        metavar="N",
        help=f"refuse a grid of more than N runs (default {MAX_RUNS:,}); raise it to confirm a larger study",
    )
    p.add_argument(
        "--width",
        type=int,
        metavar="D",
        help="a transfer preset at your own d_model (depth-transfer[-quick]: the lr found holds at this width)",
    )
    p.add_argument(
        "--depth", type=int, metavar="L", help="a transfer preset at your own depth (width-transfer[-quick])"
    )
    add_memory_flag(p)
    p.add_argument("--fields", action="store_true", help="list the fields a grid may set, and exit")
    p.set_defaults(run=run)


def run(args) -> int:
    if args.fields:
        refuse_flags(
            args,
            "does nothing with --fields (which lists the fields and exits)",
            grid=args.grid,
            preset=args.preset,
            dry_run=args.dry_run,
        )
        print(field_help())
        return 0
    refuse_flags(args, "contradicts --no-report", report=args.report is not None and args.no_report)
    check_given_paths(args, "grid", "report")
    check_store_path(args.db)  # a path where no result could be kept, before the grid is even read
    check_executor(args.executor, args.workers, args.ray_address)  # a dry run checks them too
    study = _study(args)
    # a dry run writes no report: its folder is not checked (a read-only store's folder is fine)
    report_dir = (
        None if args.no_report or args.dry_run else (args.report or default_report_dir(args.db, study.name))
    )
    if report_dir is not None:
        try:  # refused now, not after every run has been run and stored
            check_report_dir(report_dir)
        except InputError as e:
            raise InputError(f"--report: {e}" if args.report else with_flag(str(e), "--report")) from None
    if args.dry_run:
        return dry_run(study, args.db, args.workers)
    previous = signal.signal(signal.SIGTERM, _interrupted)  # `kill PID`, a scheduler: stop as Ctrl-C does
    try:
        res = run_study(
            study,
            db=args.db,
            workers=args.workers,
            executor=args.executor,
            ray_address=args.ray_address,
            max_runs=args.max_runs,
            force_memory=args.force_memory,
        )
    except KeyboardInterrupt:  # the driver stopped its workers; what finished is in the store
        sys.stderr.write(
            f"interrupted: the runs that finished are kept in {printable(args.db)}; the same command runs the rest\n"
        )
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)
    done = ", ".join(f"{n} {k}" for k, n in sorted(res.outcomes.items())) or "nothing new"
    print(
        f"\nstudy {study.name!r}: ran {res.ran} of {plural(res.total, 'run')} in {res.seconds:.0f} s ({done})"
    )
    if res.stopped_early:
        print(
            f"{plural(res.stopped_early, 'run')} stopped when their outcome was decided (diverged), saving about "
            f"{res.saved_seconds:.0f} s of worker time (each run's remaining steps at its own pace)"
        )
    if res.elsewhere:  # held by another live driver, of this study or of another that shares those runs
        it, stand, are = (
            ("it", "it stands", "it is") if res.elsewhere == 1 else ("them", "they stand", "they are")
        )
        where = "the report and the table below show" if report_dir else "the table below shows"
        print(
            f"{plural(res.elsewhere, 'run')} left to another depthlab process running {it}; {where} where "
            f"{stand} now (run the same command again once {are} done)"
        )
    if res.events_dir:
        print(
            f"TensorBoard events: {res.events_dir} (tensorboard --logdir {os.path.dirname(res.events_dir)})"
        )
    data = load(args.db, res.study_id)
    if report_dir is not None:
        print(f"report: {render(data, report_dir)}")
    print(f"\noutcome per cell (final validation loss), store {printable(args.db)}:\n")
    print(summary_table(data))
    if data.lr_curves:
        print("\n" + lr_summary(data))
    return 1 if res.failed else 0


def _study(args):
    """The study the flags name. A bad grid stops here, before the store is touched: its run count
    first (a dry run has the real run's limit: a listing of millions of runs is no plan), then every
    combination (a dry run builds them one at a time as it prints them)."""
    if args.grid is None:
        name = "default" if args.preset is None else args.preset  # --preset '' is no preset
        study = preset(name, width=args.width, depth=args.depth)
        study.check_count(args.max_runs)
        return study
    refuse_flags(args, "re-shapes a transfer preset, not a grid file", width=args.width, depth=args.depth)
    return StudyConfig.from_yaml(args.grid, max_runs=args.max_runs, validate=not args.dry_run)


def _interrupted(signum, frame):
    """SIGTERM handler: raise KeyboardInterrupt, so the driver stops its workers and puts its unfinished
    runs back in the queue (a rerun resumes them) instead of dying with them marked running."""
    raise KeyboardInterrupt


def dry_run(study, db: str, workers: int) -> int:
    """Print the run count (from the axes; a grid over --max-runs was refused before), then every run as
    it is built, with what the store already knows about it, then the totals and the expected time of
    the runs to run on ``workers`` workers (the cost model: step times measured now)."""
    runs = plan(study, db)  # reads the store now: a bad one is refused before anything is printed
    count = study.count()
    print(
        f"study {study.name!r}: {plural(count, 'run')} ({grid_shape(study, count)}), store {printable(db)}",
        flush=True,
    )
    note = store_note(db)
    if note:
        print(note)
    n, todo = 0, []
    for n, (spec, status) in enumerate(runs, 1):
        print(f"{n:>4}  {spec.hash}  {status:8}  {spec.label}", flush=n <= 10)
        if status != "done":
            todo.append((n, spec))
    repeats = repeat_note(study, n)
    if repeats:
        print(repeats)
    clock, line = time_plan(todo, [], workers, threads_per_worker(workers))
    if clock is not None:
        line += f", on {plural(workers, 'worker')}"
    print(f"study {study.name!r}: {plural(n, 'run')}, {len(todo)} to run; {line}" if todo else
          f"study {study.name!r}: {plural(n, 'run')}, 0 to run")  # fmt: skip
    return 0

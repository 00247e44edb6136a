"""depthlab report: the HTML report (index.html + PNGs) of a study from its SQLite store, or of one run."""

from __future__ import annotations

from depthlab.cli.common import check_given_paths, refuse_flags
from depthlab.paths import printable
from depthlab.report import (
    ReportFolderError,
    default_report_dir,
    load,
    render,
    summary_table,
    with_flag,
    write_run_report,
    write_runs_report,
)
from depthlab.report.lr_tables import lr_summary
from depthlab.study.store import DEFAULT_DB


def add_parser(sub) -> None:
    p = sub.add_parser(
        "report",
        help="write the HTML report of a study from the store",
        description="Read a study from the store and write DIR/index.html (self-contained: no network "
        "needed) with its PNG figures beside it, then print the outcome table. A folder that is not an "
        "earlier depthlab report is never overwritten.",
    )
    p.add_argument("--db", default=DEFAULT_DB, help=f"the study store (default {DEFAULT_DB})")
    p.add_argument("--out", metavar="DIR", help="report folder (default <db folder>/report/<study name>)")
    p.add_argument("--study", help="study name or id (default: the most recently run study)")
    p.add_argument(
        "--x",
        default="auto",
        choices=("auto", "n_layers", "lr"),
        help="the outcome map's columns: depth or learning rate (default auto: the learning rate when the "
        "grid sweeps more learning rates than depths, and at least 3)",
    )
    p.add_argument(
        "--run",
        dest="run_dir",
        metavar="DIR",
        nargs="+",
        help="instead of a study: a run folder (depthlab train --out, or a depthlab.watch out folder), "
        "whose page goes to DIR/report unless --out; or several, overlaid on one page (loss, per-layer "
        "gradient at the last step, attention entropy) in runs-report beside the first unless --out",
    )
    p.set_defaults(run=run)


def run(args) -> int:
    try:
        return _run(args)
    except ReportFolderError as e:  # the folder --out names, or its default
        raise ReportFolderError(
            f"--out: {e}" if args.out is not None else with_flag(str(e), "--out")
        ) from None


def _run(args) -> int:
    check_given_paths(args, "out")
    if args.run_dir is not None:
        refuse_flags(
            args,
            "names a study; --run reports run folders instead",
            study=args.study is not None,
            db=args.db != DEFAULT_DB,
            x=args.x != "auto",
        )
        if len(args.run_dir) == 1:
            print(f"report: {write_run_report(args.run_dir[0], args.out)}")
        else:
            print(f"report: {write_runs_report(args.run_dir, args.out)}")
        return 0
    data = load(args.db, args.study, x=args.x)
    out = args.out if args.out is not None else default_report_dir(args.db, data.name)
    print(f"report: {render(data, out)}")
    print(f"\noutcome per cell (final validation loss), study {data.name!r}, store {printable(args.db)}:\n")
    print(summary_table(data))
    if data.lr_curves:
        print("\n" + lr_summary(data))
    return 0

"""depthlab report: the HTML report (index.html + PNGs) of a study from its SQLite store."""

from __future__ import annotations

from depthlab.report import default_report_dir, load, render, summary_table
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
    p.set_defaults(run=run)


def run(args) -> int:
    data = load(args.db, args.study)
    print(f"report: {render(data, args.out or default_report_dir(args.db, data.name))}")
    print(f"\noutcome per cell (final validation loss), study {data.name!r}, store {args.db}:\n")
    print(summary_table(data))
    return 0

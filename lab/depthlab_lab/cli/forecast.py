"""depthlab forecast: does a warning in the first 10% of steps foretell a run's outcome? (a study's runs)"""

from __future__ import annotations

from depthlab.errors import ConfigError
from depthlab.paths import check_output_file, write_json
from depthlab.study.store import DEFAULT_DB
from depthlab_lab.forecast.detectors import benchmark, format_benchmark
from depthlab_lab.forecast.warnings import forecast, load_runs


def add_parser(sub) -> None:
    p = sub.add_parser(
        "forecast",
        help="precision and recall of the watcher's early warnings against the loss alone",
        description="Choose the warnings' thresholds on one study (--tune), then measure on another "
        "(--study, held out) how well a warning in the first --share of each run's steps foretells its "
        "outcome (trained / stalled / diverged), against a forecaster that reads the loss alone.",
    )
    p.add_argument("--db", default=DEFAULT_DB, help=f"the study store (default {DEFAULT_DB})")
    p.add_argument(
        "--study", default="forecast-heldout", help="the held-out study (default forecast-heldout)"
    )
    p.add_argument("--tune", default="forecast-tuning", help="the tuning study (default forecast-tuning)")
    p.add_argument("--share", type=float, default=0.1, help="the early share of steps (default 0.1)")
    p.add_argument(
        "--detectors",
        action="store_true",
        help="instead: the divergence-detector benchmark on --study (recall, precision, lead time of each "
        "published detector, baseline and depthlab rule; no tuning study)",
    )
    p.add_argument("--json", metavar="PATH", help="also write the table as JSON ('-' = stdout)")
    p.set_defaults(run=run)


def run(args) -> int:
    if not (isinstance(args.share, float) and 0 < args.share <= 1):  # NaN fails both comparisons
        raise ConfigError("share", args.share, "a number > 0 and <= 1 (the early share of each run's steps)")
    check_output_file(args.json, "--json")  # before the forecast: a bad path must not cost its work
    if args.detectors:
        table = benchmark(load_runs(args.db, args.study))
        print(format_benchmark(table))
        write_json(table, args.json)
        return 0
    table = forecast(args.db, args.study, args.tune, args.share)
    print(table["text"])
    t = table["tuned"]
    print(f"\nthresholds tuned on {t['tuning_runs']} runs of {args.tune!r} (macro F1 {t['tuning_macro_f1']:.2f}): "
          f"{t['thresholds']}, stall ratio {t['stall_ratio']}")  # fmt: skip
    write_json({k: v for k, v in table.items() if k != "text"}, args.json)
    return 0

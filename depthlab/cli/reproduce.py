"""depthlab reproduce NAME: recompute a claim of the source texts or the papers, with its verdict."""

from __future__ import annotations

import inspect
import os

from depthlab.cli.common import add_json_flag, check_output_dir, check_output_file, write_json
from depthlab.errors import ConfigError, InputError


def add_parser(sub) -> None:
    p = sub.add_parser(
        "reproduce",
        help="reproduce the seeds' numbers and the published claims",
        description="Recompute a claim and print, beside each stated number, the measured one "
        "and whether they match. NAME 'list' lists the reproductions.",
    )
    p.add_argument("name", help="which reproduction (e.g. seeds, init-scaling); 'list' to list them")
    p.add_argument("--quick", action="store_true", help="a smaller, faster version where one exists")
    p.add_argument("--out", default="runs/reproduce", help="folder for plots (default runs/reproduce)")
    p.add_argument(
        "--doc",
        help="for 'all': the Markdown file to write, its plots in img/ beside it (default docs/reproductions.md)",
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
    from depthlab.reproduce import load_all
    from depthlab.train.distributed import set_threads

    set_threads(args.threads)
    registry = load_all()
    if args.name == "list":
        for name, fn in sorted(registry.items()):
            print(f"{name:16} {(fn.__doc__ or '').strip().splitlines()[0] if fn.__doc__ else ''}")
        return 0
    if args.name not in registry:
        raise ConfigError("NAME", args.name, f"one of {', '.join(sorted(registry))}, list")
    check_output_file(args.json, "--json")  # before the reproduction: a bad path must not cost its run
    check_output_dir(args.out, "--out")
    out_dir = os.path.join(args.out, args.name)
    fn = registry[args.name]
    extra = {k: getattr(args, k) for k in ("doc",) if getattr(args, k, None) is not None}
    if extra and not set(extra) <= set(inspect.signature(fn).parameters):
        raise InputError(f"{', '.join('--' + k for k in extra)} applies to 'all' only, not to {args.name}")
    result = fn(quick=args.quick, out_dir=out_dir, **extra)
    if args.json == "-":
        write_json(result.to_dict(), "-")
    else:
        print(result.format())
        write_json(result.to_dict(), args.json)
    return 0  # a claim that does not reproduce is a result (printed as MISMATCH), not a failure

"""depthlab transfer: the best learning rate per depth (or width) of a study, its slope, and the lr for a target."""

from __future__ import annotations

import os

from depthlab.errors import InputError
from depthlab.paths import check_folder, check_output_file, printable, save_figure, write_json
from depthlab.report.data import load
from depthlab.report.transfer_plots import best_lr_figure, loss_vs_lr_figure
from depthlab.study.store import DEFAULT_DB
from depthlab.study.storefile import check_store_path
from depthlab.study.transfer import runs_at, study_shape, transfers
from depthlab.study.transfer_text import (
    format_transfer,
    mismatch,
    no_curves,
    preset_command,
    shape_line,
    unbuildable_width,
)


def add_parser(sub) -> None:
    p = sub.add_parser(
        "transfer",
        help="the best learning rate per depth or width of a study, and the one for a target size",
        description="From a study that swept the learning rate across depths (or widths), per setting: "
        "the best lr at each size with its 95% interval over seeds (flagged at the sweep's edge), the "
        "slope of log best lr against log size, the best lr extrapolated to --to-depth (or --to-width), "
        "the transfer penalty of using the smallest size's lr, and the seeds (or the more sizes, at the "
        "sweep's spacing) that would halve the slope's interval (docs/transfer.md). Presets: depth-transfer, width-transfer (and -quick).",
    )
    p.add_argument("--db", default=DEFAULT_DB, help=f"the study store (default {DEFAULT_DB})")
    p.add_argument("--study", help="study name or id (default: the most recently run study)")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-depth", type=int, metavar="L", help="the depth to transfer the lr to")
    target.add_argument("--to-width", type=int, metavar="W", help="the width (d_model) to transfer it to")
    p.add_argument(
        "--width",
        type=int,
        metavar="D",
        help="your model's d_model, with --to-depth: refused unless the (depth) study ran at it",
    )
    p.add_argument(
        "--depth",
        type=int,
        metavar="L",
        help="your model's depth, with --to-width: refused unless the (width) study ran at it",
    )
    p.add_argument("--json", metavar="PATH", help="write the result as JSON to PATH ('-' for stdout)")
    p.add_argument(
        "--plot", metavar="DIR", help="write the figures (best lr against size; loss against lr) into DIR"
    )
    p.set_defaults(run=run)


def check_flags(args) -> tuple[str, int]:
    """(axis, target) of the question; InputError, before any work, for a flag that is out of range,
    ignored by this question, or an output it cannot write."""
    axis = "depth" if args.to_depth is not None else "width"
    target = args.to_depth if axis == "depth" else args.to_width
    if target < 1:
        raise InputError(f"--to-{axis} {target}: at least 1")
    fixed = "width" if axis == "depth" else "depth"
    if getattr(args, axis) is not None:  # --depth with --to-depth (or --width with --to-width)
        raise InputError(f"--{axis} {getattr(args, axis)} with --to-{axis}: not used (a question across "
                         f"{axis} holds the {fixed} fixed: give your model's with --{fixed})")  # fmt: skip
    mine = getattr(args, fixed)
    if mine is not None and mine < 1:
        raise InputError(f"--{fixed} {mine}: at least 1")
    check_output_file(args.json, "--json", ("json",))
    if args.plot:
        check_folder(args.plot, "--plot")
    return axis, target


def run(args) -> int:
    axis, target = check_flags(args)
    check_store_path(args.db)  # '' or ' ' names no store: refused as such, not as a store to make
    if not os.path.exists(args.db):  # no study run yet: say which one answers this question
        mine = getattr(args, "width" if axis == "depth" else "depth")
        raise InputError(f"--db {printable(args.db)}: no study store there; run a transfer study first "
                         f"({preset_command(axis, mine)} --db {printable(args.db)})")  # fmt: skip
    data = load(args.db, args.study)
    shape = study_shape([r for r in data.runs if r.get("status") == "done"] or data.runs)
    why = mismatch(axis, shape, args.width, args.depth) or (
        unbuildable_width(data.runs, target) if axis == "width" else None
    )
    if why:
        raise InputError(why)
    runs = runs_at(data.runs, axis, args.width, args.depth)
    result = transfers(runs, axis, target)
    if not result:
        raise InputError(no_curves(data.study["name"], axis))
    out = {
        "study": data.study["name"],
        "shape": shape,
        "axis": axis,
        "target": target,
        "settings": [t.to_dict() for t in result],
    }
    if args.json == "-":
        write_json(out, "-")
        return 0
    print(shape_line(data.study["name"], shape))
    fixed = "width" if axis == "depth" else "depth"
    mine = getattr(args, fixed)
    at = f"at your {fixed}, {mine}" if mine else f"for the {fixed} above only (--{fixed} checks yours)"
    print(f"learning-rate transfer across {axis} to {target}, {at}\n")
    print("\n\n".join(format_transfer(t) for t in result))
    write_json(out, args.json)
    if args.plot:
        for name, fig in (
            ("best-lr", best_lr_figure(result)),
            ("loss-vs-lr", loss_vs_lr_figure(runs, axis)),
        ):
            print(f"figure: {save_figure(fig, os.path.join(args.plot, f'transfer-{axis}-{name}.png'))}")
    return 0

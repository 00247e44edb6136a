"""depthlab coord: a coordinate check over depth or width, per wrapping and parametrization."""

from __future__ import annotations

import os
from collections.abc import Callable

import torch

from depthlab.cli.common import add_memory_flag, fitting_heads, refuse_flags
from depthlab.config import PARAMS, TrainConfig, wrap_names
from depthlab.errors import ConfigError, InputError
from depthlab.paths import check_folder, check_output_file, printable, safe_name, save_figure, write_json
from depthlab.probe.coord import BAND, CoordSpec, check_steps, coord_check, format_coord
from depthlab.probe.coord_plot import coord_figure, coord_vs_size_figure
from depthlab.progress import Progress, TimeLeft, duration, say
from depthlab.train.cost import estimate

WIDTH, DEPTH = 128, 4  # the size a sweep over the other axis holds fixed
# (model field, swept axis) -> the coord flag that set it
_FLAG_OF_FIELD = {("d_model", "depth"): "--width", ("d_model", "width"): "--widths",
                  ("n_layers", "depth"): "--depths", ("n_layers", "width"): "--depth",
                  ("n_heads", "depth"): "--heads", ("n_heads", "width"): "--heads"}  # fmt: skip


def add_parser(sub) -> None:
    p = sub.add_parser(
        "coord",
        help="coordinate check: does each module's activation scale stay flat across depth or width?",
        description="Train the same stack at several depths (--depths, at one --width) or widths (--widths, "
        "at one --depth) for a few Adam steps under each --wrap and --param, record every module's mean "
        "|coordinate| at each step, and fit its log-log slope against the size with a 95% interval over "
        "seeds: flat, grows, shrinks or unclear (docs/transfer.md).",
    )
    p.add_argument("--depths", help="comma-separated depths, e.g. 2,4,8,16 (a sweep over depth)")
    p.add_argument("--widths", help="comma-separated widths (d_model), e.g. 64,128,256 (a sweep over width)")
    p.add_argument("--width", type=int, help=f"d_model of a depth sweep (default {WIDTH})")
    p.add_argument("--depth", type=int, help=f"layers of a width sweep (default {DEPTH})")
    p.add_argument("--wrap", default="pre", help=f"comma-separated wrappings: {'|'.join(wrap_names())}")
    p.add_argument("--param", default="sp,completep", help=f"comma-separated: {'|'.join(PARAMS)}")
    p.add_argument("--steps", type=int, default=10, help="Adam steps (default 10)")
    p.add_argument("--lr", type=float, default=1e-2, help="Adam learning rate (default 1e-2)")
    p.add_argument(
        "--seeds", type=int, default=3, help="seeds 0..N-1, at least 2 for an interval (default 3)"
    )
    p.add_argument("--heads", type=int, default=4, help="attention heads (default 4)")
    p.add_argument("--batch-size", type=int, default=8, help="sequences per step (default 8)")
    p.add_argument("--seq-len", type=int, default=32, help="tokens per sequence (default 32)")
    p.add_argument("--band", type=float, default=BAND, help=f"|slope| below this is flat (default {BAND})")
    p.add_argument("--json", metavar="PATH", help="write the result as JSON to PATH ('-' for stdout)")
    p.add_argument("--plot", metavar="DIR", help="write the figures (png) into DIR")
    add_memory_flag(p)
    p.set_defaults(run=run)


def _ints(text: str, flag: str) -> tuple[int, ...]:
    items = text.split(",")
    if any(not v.strip() for v in items):  # 2,,3 or a trailing comma: a value was left out
        raise InputError(f"{flag} {printable(text)}: an empty value between commas; e.g. 2,4,8")
    try:
        values = tuple(int(v) for v in items)
    except ValueError:
        raise InputError(f"{flag} {printable(text)}: comma-separated integers, e.g. 2,4,8") from None
    if any(v < 1 for v in values):
        raise InputError(f"{flag} {text}: every value must be at least 1")
    if len(set(values)) < 2:
        raise InputError(f"{flag} {text}: at least two different values (a slope needs two sizes)")
    return tuple(sorted(set(values)))


def _names(text: str, allowed, flag: str) -> tuple[str, ...]:
    names = tuple(v.strip() for v in text.split(",") if v.strip())
    for n in names:
        if n not in allowed:
            raise InputError(f"{flag} {n}: one of {', '.join(allowed)}")
    if not names:
        raise InputError(f"{flag}: give at least one")
    return names


def spec_from_args(args) -> CoordSpec:
    """The CoordSpec of the flags (InputError, one line, for a bad one)."""
    if (args.depths is None) == (args.widths is None):
        raise InputError("give --depths (a sweep over depth) or --widths (over width), not both or neither")
    axis = "depth" if args.depths is not None else "width"
    refuse_flags(
        args,
        f"does nothing in a sweep over {axis} (--{axis}s sets it)",
        **{axis: getattr(args, axis) is not None},
    )
    sizes = _ints(args.depths if axis == "depth" else args.widths, f"--{axis}s")
    width = WIDTH if args.width is None else args.width  # the fixed size of the other axis
    depth = DEPTH if args.depth is None else args.depth
    for flag, value, low in (
        ("--steps", args.steps, 1),
        ("--seeds", args.seeds, 2),  # the slopes' intervals are over seeds
        ("--heads", args.heads, 1),
        ("--width", width, 1),
        ("--depth", depth, 1),
    ):
        if value < low:
            raise InputError(f"{flag} {value}: at least {low}")
    if not 0 < args.band < 1:
        raise InputError(f"--band {args.band}: a number in (0, 1)")
    wraps, params = _names(args.wrap, wrap_names(), "--wrap"), _names(args.param, PARAMS, "--param")
    check_steps(len(wraps) * len(params) * len(sizes) * args.seeds, args.steps)  # before range(--seeds)
    return CoordSpec(
        axis=axis,
        sizes=sizes,
        fixed=width if axis == "depth" else depth,
        wraps=wraps,
        params=params,
        steps=args.steps,
        lr=args.lr,
        seeds=tuple(range(args.seeds)),
        heads=args.heads,
        batch_size=args.batch_size,
        seq_len=args.seq_len,
        band=args.band,
    )


def coord_progress(spec: CoordSpec) -> tuple[Progress, Callable]:
    """Say (stderr) how many models the check trains and its expected time (the cost model: step times
    measured now); return the progress of its models (a line redrawn on a terminal, a plain line per
    tenth in a log) with the time left, and the ``on_point`` that moves it (called before each model)."""
    points = [
        (w, p, s, seed) for w in spec.wraps for p in spec.params for s in spec.sizes for seed in spec.seeds
    ]
    tcfg = TrainConfig(steps=spec.steps, batch_size=spec.batch_size, seq_len=spec.seq_len)
    expected = estimate(
        [(pt, spec.config(*pt[:3]), tcfg) for pt in points], torch.get_num_threads(), bare=True
    )
    clock = TimeLeft(expected) if expected is not None else None
    guess = f"about {duration(max(1.0, clock.total_s()))} (step times measured now)" if clock else "unknown"
    say(f"coord: {len(points):,} models of {spec.steps:,} Adam steps; expected time: {guess}")
    bar, last = Progress(len(points), "coord", unit="model", clock=clock, plain=True), []

    def on_point(*point):
        if last and clock is not None:
            clock.finished(last[-1])
        if last:
            bar.advance()
        last[:] = [point]
        if clock is not None:
            clock.started(point)

    return bar, on_point


def _heads_refusal(args, spec: CoordSpec, flag: str, width: int) -> str:
    """The line for a width the heads do not split: the --heads typed against the default --width of a
    depth sweep, else the width flag against the heads (coord has no d_head of its own to set)."""
    if spec.axis == "depth" and args.width is None:
        return f"--heads {spec.heads} is not allowed: a divisor of the default --width {width} ({fitting_heads(width, spec.heads)})"
    return f"{flag} {width} is not allowed: a multiple of the {spec.heads} heads (set by --heads)"


def run(args) -> int:
    spec = spec_from_args(args)
    try:
        spec.configs()  # every combination validated: a refused one is one line before any run
    except ConfigError as e:  # a model field that one of coord's own flags sets: named as that flag
        flag = _FLAG_OF_FIELD.get((e.field, spec.axis))
        if flag is None:
            raise
        if e.field == "d_model" and e.other == "n_heads":  # coord reads no config file: name --heads
            raise InputError(_heads_refusal(args, spec, flag, e.value)) from None
        raise InputError(f"{flag} {e.value} is not allowed: {e.allowed}") from None
    check_output_file(args.json, "--json")
    if args.plot is not None:  # --plot '' is refused, not read as no --plot
        check_folder(args.plot, "--plot")
    spec.check_memory(args.force_memory)  # before the step times are measured on its shapes
    bar, on_point = coord_progress(spec)
    with bar:
        result = coord_check(spec, on_point=on_point, force_memory=True)
    if args.json == "-":
        write_json(result.to_dict(), "-")
        return 0
    print(format_coord(result))
    write_json(result.to_dict(), args.json)
    if args.plot is not None:
        for wrap, param in result.values:
            path = os.path.join(args.plot, safe_name(f"coord-{spec.axis}-{wrap}-{param}.png"))
            print(f"figure: {save_figure(coord_figure(result, wrap, param), path)}")
        path = os.path.join(args.plot, f"coord-{spec.axis}-activations.png")
        print(f"figure: {save_figure(coord_vs_size_figure(result), path)}")
    return 0

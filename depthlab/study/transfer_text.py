"""The words of a learning-rate transfer (:mod:`depthlab.study.transfer`): what a study ran at, why it
cannot answer a question, and each setting's table, slope and lr at the target, as ``depthlab transfer``
and ``depthlab advise --to-depth/--to-width`` print them. The judgements (bound or estimate, flat or
not) are :func:`depthlab.study.transfer.reading`'s; this module only renders them."""

from __future__ import annotations

from depthlab.study.transfer import BAND, Transfer, bound_side, heads_text, reading, spacing
from depthlab.words import plural


def _span(v: list) -> str:
    return str(v[0]) if len(v) == 1 else f"{v[0]}-{v[-1]}"


def budget_text(shape: dict) -> str:
    """'100 steps of 16 x 32': a study's budget (steps of batch size x sequence length)."""
    return f"{_span(shape['steps'])} steps of {_span(shape['batch_size'])} x {_span(shape['seq_len'])}"


def shape_line(name: str, shape: dict) -> str:
    """'study depth-transfer-quick: width 32, depths 2-8, 100 steps of 16 x 32': what its answer is for."""
    w, d = shape["widths"], shape["depths"]
    return (f"study {name}: width{'s' if len(w) > 1 else ''} {_span(w)}, "
            f"depth{'s' if len(d) > 1 else ''} {_span(d)}, {budget_text(shape)}")  # fmt: skip


def preset_command(axis: str, mine: int | None) -> str:
    """The command that runs a transfer study across ``axis`` at the user's other size."""
    fixed = "width" if axis == "depth" else "depth"
    return f"depthlab study --preset {axis}-transfer-quick --{fixed} {mine if mine is not None else f'<your {fixed}>'}"


def _sizes(axis: str, values: list) -> str:
    """'2, 4 layers' or 'd_model 32, 64'."""
    listed = ", ".join(map(str, values))
    return f"{listed} layers" if axis == "depth" else f"d_model {listed}"


def mismatch(axis: str, shape: dict, width: int | None, depth: int | None) -> str | None:
    """Why the study cannot answer a question across ``axis`` (depth or width), in one line: it does not
    sweep that axis, or it ran at another width (a depth question) or depth (a width question) than the
    user's ``width`` or ``depth``. None when it can (or when the user did not say theirs)."""
    fixed = "width" if axis == "depth" else "depth"
    mine = width if axis == "depth" else depth
    if len(shape[f"{axis}s"]) < 2:
        swept = fixed if len(shape[f"{fixed}s"]) > 1 else "neither depth nor width"
        held = ", ".join(map(str, shape[f"{axis}s"]))
        return (f"this study sweeps {swept} ({_sizes(fixed, shape[f'{fixed}s'])} at {axis} {held}); "
                f"--to-{axis} needs a study that sweeps {axis}: {preset_command(axis, mine)}")  # fmt: skip
    have = shape[f"{fixed}s"]
    if mine is None or mine in have:
        return None
    why = (
        "under the standard parametrization the best lr moves with width, about 1/width"
        if fixed == "width"
        else "the best lr can move with depth too"
    )
    return (f"the study ran at {fixed} {', '.join(map(str, have))}, not {mine}: its best lr is for that "
            f"{fixed} ({why}); run the transfer preset at yours ({preset_command(axis, mine)})")  # fmt: skip


def unbuildable_width(runs: list[dict], width: int) -> str | None:
    """Why a question at ``width`` names no model of a width sweep's shape (its runs' one number of heads,
    without a head width of their own, does not split it), or None."""
    models = [(r.get("config") or {}).get("model", {}) for r in runs]
    heads = {m.get("n_heads") for m in models}
    if len(heads) != 1 or None in heads or any(m.get("d_head") for m in models):
        return None
    why = heads_text(width, next(iter(heads)), "the study's")
    return None if why is None else f"--to-width {width} is not allowed: {why}"


def no_curves(name: str, axis: str) -> str:
    """Why a study that sweeps ``axis`` still gives no transfer: no setting has curves at two sizes."""
    field = "n_layers" if axis == "depth" else "d_model"
    return (f"study {name!r} has no setting with learning-rate curves at two or more {axis}s (a grid "
            f"sweeping lr and {field}; e.g. --preset {axis}-transfer-quick)")  # fmt: skip


def _lr(v: tuple[float, float, float]) -> str:
    m, lo, hi = v
    return f"{m:.3g}" if lo == hi else f"{m:.3g} [{lo:.3g}, {hi:.3g}]"


def _signed(v: tuple[float, float, float], f: str) -> str:
    m, lo, hi = v
    return f"{m:{f}}" if lo == hi else f"{m:{f}} [{lo:{f}}, {hi:{f}}]"


def edge_text(t: Transfer) -> str:
    """'the best lr at depth 2, 4 is the largest lr swept, 0.03: the true best may lie beyond'."""
    groups: dict[tuple[int, float], list[str]] = {}
    for r in t.rows:
        if r.edge:
            groups.setdefault((r.edge, r.best_swept), []).append(str(r.size))
    parts = [f"at {t.axis} {', '.join(sizes)} is the {'largest' if e > 0 else 'smallest'} lr swept, {lr:g}"
             for (e, lr), sizes in groups.items()]  # fmt: skip
    return f"the best lr {'; '.join(parts)}: the true best may lie beyond"


def slope_text(t: Transfer) -> str:
    """The slope of log best lr against log size as its :func:`reading` says: '-0.03 [-0.20, +0.14], flat
    (its interval lies inside +-0.25)'; '-0.07 [-0.76, +0.62], not decided (...)'; '-1.17 or less: a
    bound, not an estimate (...)'; 'unknown, ...'."""
    code = reading(t)
    if code == "no slope":
        return "none (needs a seed with a run at every size)"
    if code in ("at least", "at most"):
        more = "more" if code == "at least" else "less"
        return f"{t.slope[0]:+.2f} or {more}: a bound, not an estimate ({edge_text(t)})"
    if code == "unknown":
        return f"unknown, not even a bound ({edge_text(t)}, which can move the slope either way)"
    iv = _signed(t.slope, "+.2f")
    said = {"flat": f"flat (its interval lies inside +-{BAND:g})",
            "moves": f"moves (its interval lies outside +-{BAND:g})",
            "not decided": f"not decided (its interval reaches past +-{BAND:g})"}  # fmt: skip
    return f"{iv}, {said[code]}"


def target_text(t: Transfer) -> str:
    """The best lr at the target: '0.0187 [0.0093, 0.0375]'; '0.00119 or less, a bound, not an
    estimate' where a best lr at the sweep's edge can move it one way only; 'unknown, not even a bound'
    where both ways; '-' without a fit."""
    if t.target_lr is None:
        return "-"
    side = bound_side(t, t.target)
    if side is None:
        return _lr(t.target_lr)
    if side == 0:
        return "unknown, not even a bound"
    return f"{t.target_lr[0]:.3g} or {'more' if side > 0 else 'less'}, a bound, not an estimate"


def no_base_text(t: Transfer) -> str:
    """Why a setting named for a parametrization is the standard one here: its runs set no base along
    the axis ('mup with no base_width: each width its own base, so the standard parametrization at every
    width (base_width 32, the smallest, scales it)')."""
    base = "base_width" if t.axis == "width" else "base_depth"
    return (f"{t.no_base} with no {base}: each {t.axis} its own base, so the standard parametrization at "
            f"every {t.axis} ({base} {t.rows[0].size}, the smallest, scales it)")  # fmt: skip


def format_transfer(t: Transfer) -> str:
    """The text of one setting: the per-size table, the slope, the lr at the target, and what would
    narrow the slope's interval (more seeds or sizes; a wider lr sweep where it is a bound)."""
    head = f"  {t.axis:>6}  {'seeds':>5}  {'best lr [95%]':30} {'edge':5} penalty at lr {t.proxy_lr:g} [95%]"
    lines = [t.setting, *([f"  {no_base_text(t)}"] if t.no_base else []), head]
    for r in t.rows:
        pen = "(the proxy)" if r is t.rows[0] else "-"
        if r.penalty is not None:
            pen = _signed(r.penalty, "+.3f")
        lines.append(
            f"  {r.size:>6}  {r.seeds:>5}  {_lr(r.best_lr):30} {'EDGE' if r.at_edge else '':5} {pen}"
        )
    lines.append(f"  slope of log best lr against log {t.axis}: {slope_text(t)}")
    if t.slope is None:
        return "\n".join(lines)
    if t.target_lr is not None:
        sizes = [r.size for r in t.rows]
        where = "within" if min(sizes) <= t.target <= max(sizes) else "extrapolated beyond"
        swept = (
            f" (the {t.axis} {t.target} row is that size's own measured best)" if t.target in sizes else ""
        )
        lines.append(f"  best lr at {t.axis} {t.target} on the fitted line: {target_text(t)} ({where} the sizes "
                     f"swept){swept}")  # fmt: skip
    if reading(t) in ("at least", "at most", "unknown"):
        lines.append("  an estimate needs lrs swept beyond that edge; more seeds or sizes would not give one")
    if t.seeds_to_halve is not None:
        lines.append(
            f"  {t.seeds_to_halve} seeds (now {t.slope_seeds}) would halve the slope's interval at the same spread"
        )
    if t.sizes_to_halve is not None:
        lines.append("  " + _sizes_line(t))
    return "\n".join(lines)


def _sizes_line(t: Transfer) -> str:
    """ "or 2 more depths (16, 32) ... would halve it ...", with the spacing and the assumption."""
    sizes, added = [r.size for r in t.rows], t.sizes_to_halve
    return (
        f"or {plural(len(added), f'more {t.axis}')} ({', '.join(str(v) for v in added)}: "
        f"x{spacing(sizes):.3g} apart beyond the largest, as the sweep is spaced) would halve it at the "
        f"same {t.slope_seeds} seeds,\n"
        f"  if each seed's best lr scatters as much about a straight log-log line there as at the sizes swept"
    )

"""The screen ``depthlab advise`` prints: at most about 25 lines, the answer first."""

from __future__ import annotations

import re

from depthlab.advise import track_record
from depthlab.advise.evidence import shipped_hashes
from depthlab.doctor.predict import FAR, trained_by
from depthlab.doctor.recipe import recipe

WIDTH = 110


def _lr(x: float | None) -> str:
    return "-" if x is None else f"{x:.2g}"


def _range(r: tuple[float, float] | None) -> str:
    return "none in 1e-5..1" if r is None else f"{r[0]:.2g} .. {r[1]:.2g}"


def _cut(text: str, width: int = WIDTH) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _squeeze(text: str, width: int = WIDTH) -> str:
    """A table row that fits in ``width``: where it is longer, its padding (runs of spaces after the
    indent) gives way from the right, one space at a time, before :func:`_cut` takes any of its words."""
    indent = len(text) - len(text.lstrip())
    while len(text) > width and "  " in text[indent:]:
        at = text.rindex("  ", indent)
        text = text[:at] + text[at + 1 :]
    return _cut(text, width)


def _fold(text: str, width: int = WIDTH, most: int | None = None, indent: str | None = None) -> list[str]:
    """``text`` as one line, or, where it is longer than ``width``, broken after its last "; " that fits,
    else at its last space, never between a flag and its value (the rest indented on lines of their
    own, folded again): a line of numbers is folded, never cut. ``most``: at most this many lines, the last cut at a word ("..."); a text with
    no place to break is cut too. The rest is indented two spaces more than ``text`` (or by ``indent``)."""
    if indent is None:
        indent = " " * (len(text) - len(text.lstrip()) + 2)
    if len(text) <= width:
        return [text]
    if most == 1:
        return [_cut_at_word(text, width)]
    at = text.rfind("; ", 0, width)
    rest = at + 2
    if at < 0:
        start = len(text) - len(text.lstrip()) + 1
        at = text.rfind(" ", start, width)
        flag = text.rfind(" ", start, at) if at > 0 else -1  # a flag stays on its value's line
        if flag > 0 and text[flag + 1 : at].startswith("--"):
            at = flag
        rest = at + 1
    if at < 0:
        return [_cut(text, width)]
    return [text[:at], *_fold(indent + text[rest:], width, None if most is None else most - 1, indent)]


def _cut_at_word(text: str, width: int) -> str:
    """``text`` cut to ``width`` at its last space, with "..." (at ``width`` where it has no space); a
    parenthesis the cut would leave open goes, with what follows it, so the line ends on a whole clause."""
    if len(text) <= width:
        return text
    at = text.rfind(" ", 0, width - 3)
    kept = text[:at] if at > len(text) - len(text.lstrip()) else text[: width - 3]
    open_at: list[int] = []
    for i, c in enumerate(kept):
        if c == "(":
            open_at.append(i)
        elif c == ")" and open_at:
            open_at.pop()
    if open_at and kept[: open_at[0]].strip():
        kept = kept[: open_at[0]].rstrip(" ,;:")
    return kept + "..."


def _short(train) -> str:
    """What the answer is worth where the budget ends inside the warmup (the lr never reaches its peak:
    the probability is that of this short run, not of the long one the warmup was set for)."""
    if train.warmup < train.steps:
        return ""
    return f"; for {train.steps:,} steps, inside the {train.warmup:,}-step warmup: set --steps"


def agreeing(prediction) -> int:
    """How many of the nearest measured runs went the way the call says, by the call's budget (a longer
    run that left the plateau only after it went as "fails" there: :func:`~depthlab.doctor.predict.trained_by`)."""
    return sum(
        trained_by(r, prediction.budget) == (prediction.call == "trains") for _, r in prediction.neighbours
    )


def later_text(prediction) -> str:
    """'; 5 trained only after step 40' where some of the nearest runs had longer budgets and left the
    unigram plateau after the call's ("" otherwise)."""
    n = prediction.later
    return f"; {n} trained only after step {prediction.budget:,}" if n else ""


def against_limit(limit, lr: float, prediction) -> str:
    """Where the call goes against the probe's limit alone (an lr where such stacks failed called
    "trains", or one below the safe lr called "fails"), what outweighs it: the nearest measured runs
    ("" where it does not). One text for advise's screen and the probe's expected line."""
    call, n, k = prediction.call, len(prediction.neighbours), agreeing(prediction)
    if limit is None or not n:
        return ""
    if call == "trains" and limit.lr_fails and lr >= limit.lr_fails:
        return f"; above where such stacks failed ({limit.lr_fails:.2g}), but {k} of the {n} nearest measured runs trained"
    if call == "fails" and lr <= limit.lr_limit:
        failed = f"had not trained by step {prediction.budget:,}" if prediction.later else "failed"
        return f"; below the safe lr, but {k} of the {n} nearest measured runs {failed}"
    return ""


def render(a, likely: float) -> str:
    """The advice ``a`` (:class:`depthlab.advise.advice.Advice`) as the screen prints it; ``likely``: the
    probability the ranges of likely learning rates are drawn at."""
    m, t, p = a.model, a.train, a.prediction
    head = (f"{m.wrap}, {m.n_layers} layers, d_model {m.d_model}, {m.n_heads} heads; lr {t.lr:g}, warmup "
            f"{t.warmup}, {t.steps:,} steps of {t.batch_size} x {t.seq_len}")  # fmt: skip
    sets = recipe(m, t)  # what else the run sets: its evidence is runs that set the same
    head += f"; {sets}" if sets else ""
    sure = "" if p.confident else f"; not a confident call: {p.why_not}"
    sure = against_limit(a.limit, t.lr, p) + sure
    lines = [
        *_fold(f"advise: {head}"),
        *_fold(f"expected: {p.said} (P(trains) = {p.p_trains:.2f}){_short(t)}{sure}"),
    ]
    if a.limit is not None:
        lim = a.limit
        fails = f", failed from {lim.lr_fails:.2g}" if lim.lr_fails else ""
        span = (
            f"for lr {_range(a.likely)}" if a.likely
            else "at no lr" if a.evidence else "at no lr without measured runs that set the same"
        )  # fmt: skip
        lines += _fold(f"safe lr ({m.wrap}, warmup {t.warmup}): <= {lim.lr_limit:.2g} (trained to "
                       f"{_lr(lim.lr_trained)}{fails}); P >= {likely} {span}")  # fmt: skip
    names = [
        o.wrap + (" (yours)" if o.wrap == m.wrap else f" ({o.note})" if o.note else "") for o in a.options
    ]
    col = max([26, *map(len, names)])  # the longest row's name sets the column
    lines += [
        "",
        f"{'wrapping at lr ' + format(t.lr, 'g'):<{col + 2}}{'P(trains)':>10}{'safe lr':>10}   P >= {likely} for lr",
    ]
    for name, o in zip(names, a.options):
        sure = "" if o.confident else "  (not confident)"
        lines.append(f"  {name:<{col}}{o.p_trains:>10.2f}{_lr(o.safe_lr):>10}   {_range(o.likely)}{sure}")
    ev = a.evidence
    kind = f"{m.wrap} that set the same" if sets else m.wrap
    lines += [
        "",
        f"evidence: the {len(ev)} nearest measured runs of {kind} ({a.agreeing()} of them went as called"
        f"{later_text(p)})"
        if ev
        else f"evidence: no measured run of {kind} (the call rests on the probe's limit alone)",
    ]
    rows = _settings(ev)  # the seeds of one setting that ended alike share a row
    wide = max([22, *(len(_shape(runs[0], t)) for _, runs in rows)])  # the longest stack sets the column
    for d, runs in rows:
        r = runs[0]
        losses = sorted(x.val_loss for x in runs if x.val_loss is not None)
        lo, hi = (f"{x:.2f}" for x in (losses[0], losses[-1])) if losses else ("-", "-")
        loss = lo if hi == lo else f"{lo}-{hi}"
        outcome = r.outcome + (f" x{len(runs)}" if len(runs) > 1 else "")
        lines.append(_squeeze(f"  {_shape(r, t):<{wide}} lr {r.lr:<8g} warmup {r.warmup:<4} {r.steps:>5} steps  "
                          f"{outcome:<12} val {loss:<5} (distance {d:.2f})"))  # fmt: skip
    if a.disagreements:
        lines += _fold(disagree_text(a.disagreements))
    if a.seed_splits:
        lines += _fold(seed_text(a.seed_splits))
    lines += ["", _cut(inside_text(a, sets))]
    if a.held_out:
        lines += _fold(track_record.line(a.held_out))
        differ = track_record.differ_line(a.held_out, p.call, p.nearest_call)
        lines += _fold(differ) if differ else []
    if a.outside:
        said = "; ".join(_short_outside(x) for x in a.outside)
        lines += _fold(f"outside the limit's calibrated range: {said}", most=2)
    why = [v for v in a.verdicts if v.code != "learning-rate"][:4]  # the safe lr line says that one
    if why:
        lines.append("why (what the probe sees at init; the call above also weighs the measured runs):")
        for v in why:
            lines += _fold(f"  {v.level.upper():7} {v.code}: {v.message}", most=2)
    if a.transfer:
        lines.append("")
        for line in a.transfer.get("lines", []):  # folded at a word like every other line of the screen
            lines += _fold(line)
    return "\n".join(lines)


def _short_outside(text: str) -> str:
    """'depth 48 (calibrated 2-24)' for 'depth 48 is above the calibrated depths 2-24' (the record's
    phrase, :func:`depthlab.doctor.record.outside`); any other text as it is."""
    found = re.fullmatch(r"(.+?) (\S+) is (?:above|below) the calibrated .+ (\S+-\S+)", text)
    return f"{found[1]} {found[2]} (calibrated {found[3]})" if found else text


def _shape(r, train) -> str:
    """An evidence row's stack, 'post 6L d32', with the run's batch x sequence where it is not the
    question's ('post 6L d32 4x128': the distance does not weigh it) and '(your store)' for a run a user's
    store added (``--atlas``), not the shipped atlas."""
    shape = r.shape(recipe=False)
    if (r.batch_size, r.seq_len) != (train.batch_size, train.seq_len):
        shape += f" {r.batch_size}x{r.seq_len}"
    return shape + (" (your store)" if r.config_hash not in shipped_hashes() else "")


def _settings(evidence) -> list[tuple[float, list]]:
    """The evidence rows as (distance, runs): runs of one setting (they differ by seed alone) that ended
    the same way, and come from the same place (the shipped atlas or a user's store), share a row, at the
    place and distance of the nearest of them."""
    rows, at = [], {}
    for d, r in evidence:
        key = (r.setting(), r.outcome, r.config_hash in shipped_hashes())
        if key in at:
            rows[at[key]][1].append(r)
        else:
            at[key] = len(rows)
            rows.append((d, [r]))
    return rows


def inside_text(advice, sets: str = "") -> str:
    """Whether the question lies inside what was measured, in one line (``sets``: the run's recipe)."""
    near = advice.evidence
    if not near:
        return f"outside what was measured: no run of this kind of stack{' that sets the same' if sets else ''} in the atlas"
    d = near[0][0]
    where = (
        "inside what was measured"
        if d <= FAR / 2
        else "near what was measured"
        if d <= FAR
        else "far from what was measured"
    )
    return f"{where}: the nearest measured run is {d:.2f} away (1 = a factor 2 in lr or 4 in width)"


def disagree_text(found) -> str:
    """The first evidence setting where a user's store and the shipped atlas went opposite ways, in one
    line (how many more did)."""
    mine, theirs = found[0]
    first = mine[0]

    def said(runs) -> str:
        seeds = ", ".join(str(r.seed) for r in sorted(runs, key=lambda r: r.seed))
        return f"{runs[0].outcome} at seed{'s' if len(runs) > 1 else ''} {seeds}"

    more = f"; {len(found) - 1} more of the nearest settings too" if len(found) > 1 else ""
    return (f"  your runs contradict the shipped atlas here: {first.shape(recipe=False)} lr {first.lr:g} warmup "
            f"{first.warmup} {said(mine)} in {first.source}; {said(theirs)} in the atlas{more}")  # fmt: skip


def seed_text(splits) -> str:
    """The first evidence setting that went both ways by seed, in one line (how many more did)."""
    runs = splits[0]
    first = runs[0]
    seeds: dict[str, list[str]] = {}  # outcome -> its seeds, in the order of the first seed of each
    for r in runs:
        seeds.setdefault(r.outcome, []).append(str(r.seed))
    ways = "; ".join(f"{o} at seed{'s' if len(s) > 1 else ''} {', '.join(s)}" for o, s in seeds.items())
    more = f"; {len(splits) - 1} more of the nearest settings too" if len(splits) > 1 else ""
    return (f"  the seed decides here: {first.shape(recipe=False)} lr {first.lr:g} warmup {first.warmup} {ways}"
            f"{more}")  # fmt: skip

"""A claim and its reproduction: what was stated, what depthlab measured, and whether they agree.

A reproduction is a function ``fn(quick=False, out_dir=None, scale="small") -> Reproduction``,
registered by name with :func:`register` together with its :class:`Registration` (the expectation and
regime fixed before it runs); ``depthlab reproduce NAME`` runs it.

A check's result is ``agree``, ``MISMATCH`` or ``inconclusive`` (:mod:`depthlab.intervals`: a
measurement over seeds is decided on its mean and interval). A check that holds by construction, cannot
fail in the regime, or was added after the results were known is a *sanity* check: it still guards
against bugs and is shown, but it is not counted in "N of M agree".

A rule changed after a check's results were known (a revision with results known) never decides it: the
check's ``result`` stays the one under its first registration, and the result under the revised rule is
kept beside it in ``revised`` (:func:`with_revision`); the document shows both and the counts under both.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from depthlab.errors import ConfigError
from depthlab.intervals import (
    AGREE,
    INCONCLUSIVE,
    MISMATCH,
    RESULTS,
    Interval,
    decide,
    holm,
    log_interval,
    mean_interval,
    p_value,
)
from depthlab_lab.reproduce.registration import Registration

SCALES = ("small", "large")


@dataclass
class Check:
    """One claim: what the source states (or expects), what depthlab measured, and the result.

    ``result``: agree / MISMATCH / inconclusive (True and False stand for agree and MISMATCH).
    ``sanity``: empty for a check that could have failed; otherwise why it is not counted.
    ``interval``: the mean and interval over seeds the result was decided on, if any.
    ``p``: the two-sided p-value of that decision (nan without an interval), for the family-wise column.
    ``revised``: the result under a rule revised with results known ("" when no such revision touches
    the check); it is shown, never counted as the check's result. ``revision``: what the revision changed.
    ``revised_sanity``: why a check first registered as counted is a sanity check under the revised rules
    (a revision made with results known moved it there): it counts, with its result, under the first
    registration, and is not counted under the revised rules (:func:`sanity_under_revision`).
    """

    claim: str
    stated: str
    measured: str
    result: str | bool
    sanity: str = ""
    interval: Interval | None = None
    p: float = math.nan
    revised: str = ""
    revision: str = ""
    bounds: dict | None = None
    revised_bounds: dict | None = None
    revised_values: tuple | None = None
    revised_sanity: str = ""

    def __post_init__(self):
        if isinstance(self.result, bool):
            self.result = AGREE if self.result else MISMATCH
        for r in (self.result, self.revised or AGREE):
            if r not in RESULTS:
                raise ValueError(f"result {r!r} is not one of {RESULTS}")

    def under(self, registration: str) -> str:
        """The result under the "first" registration or the "revised" rules."""
        return self.revised if registration == "revised" and self.revised else self.result

    @property
    def ok(self) -> bool:
        return self.result == AGREE

    @property
    def counted(self) -> bool:
        """Whether the check could have failed (it counts in "N of M agree") as first registered."""
        return not self.sanity

    def counted_under(self, registration: str) -> bool:
        """Whether the check counts under the "first" registration or the "revised" rules."""
        return not (self.sanity or (registration == "revised" and self.revised_sanity))

    def to_dict(self) -> dict:
        d = {
            "claim": self.claim,
            "stated": self.stated,
            "measured": self.measured,
            "result": self.result,
            "ok": self.ok,
            "counted": self.counted,
        }
        if self.sanity:
            d["sanity"] = self.sanity
        if self.revised_sanity:
            d["revised_sanity"] = self.revised_sanity
        if self.interval is not None:
            d["interval"] = self.interval.to_dict()
        if not math.isnan(self.p):
            d["p"] = self.p
        if self.revised or self.revision:
            d["revised"] = self.revised
            d["revision"] = self.revision
        if self.bounds is not None:
            d["bounds"] = self.bounds
        if self.revised_bounds is not None:
            d["revised_bounds"] = self.revised_bounds
        if self.revised_values is not None:
            d["revised_values"] = list(self.revised_values)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Check:
        """The check :meth:`to_dict` wrote, every field as it was ("ok" and "counted" follow from them)."""
        interval, values = d.get("interval"), d.get("revised_values")
        return cls(
            d["claim"],
            d["stated"],
            d["measured"],
            d["result"],
            d.get("sanity", ""),
            Interval.from_dict(interval) if interval is not None else None,
            d.get("p", math.nan),
            d.get("revised", ""),
            d.get("revision", ""),
            d.get("bounds"),
            d.get("revised_bounds"),
            tuple(values) if values is not None else None,
            d.get("revised_sanity", ""),
        )


def seeded_check(
    claim: str,
    stated: str,
    values: Sequence[float],
    *,
    at_least: float | None = None,
    at_most: float | None = None,
    fmt: str = ".3g",
    context: str = "",
    sanity: str = "",
    scale: str = "linear",
) -> Check:
    """A check decided on the mean over seeds of ``values`` (one per seed) and its 95% t-interval.

    ``scale``: "linear", or "log" for a positive multiplicative quantity (the interval on log10 values,
    shown as a geometric mean; a value <= 0 makes the check inconclusive). ``measured`` shows the mean,
    the interval and every seed's value, then ``context``.
    """
    seeds = "/".join(format(v, fmt) for v in values)
    tail = f"; {context}" if context else ""
    if not values or not all(math.isfinite(v) for v in values):  # a seed measured nothing: no mean
        return Check(
            claim,
            stated,
            f"per seed {seeds or 'none'} (not every seed gave a value){tail}",
            INCONCLUSIVE,
            sanity,
        )
    if scale == "log" and not all(v > 0 for v in values):
        return Check(
            claim, stated, f"per seed {seeds} (a value <= 0 on a log scale){tail}", INCONCLUSIVE, sanity
        )
    interval = log_interval(values) if scale == "log" else mean_interval(values)
    result = decide(interval, at_least=at_least, at_most=at_most) if interval.n > 1 else INCONCLUSIVE
    p = p_value(values, at_least=at_least, at_most=at_most, scale=scale)
    mean = "geometric mean" if scale == "log" else "mean"
    measured = f"{mean} {interval.format(fmt)}; per seed {seeds}{tail}"
    bounds = {"at_least": at_least, "at_most": at_most, "scale": scale}
    return Check(claim, stated, measured, result, sanity, interval, p, bounds=bounds)


def with_revision(first: Check, revised: Check, revision: str) -> Check:
    """``first`` (decided as first registered), carrying ``revised``'s result as the one under a rule
    revised with results known; ``revision`` says what changed. The measured text shows both."""
    first.revised = revised.result
    first.revision = revision
    first.revised_bounds = revised.bounds
    if revised.interval is not None and (
        first.interval is None or revised.interval.values != first.interval.values
    ):
        first.revised_values = revised.interval.values  # decided on other values (a share of seeds)
    if revised.measured != first.measured:
        first.measured += f"; revised ({revision}): {revised.measured}"
    return first


LOG_SCALE = "interval on log10 values (a positive multiplicative quantity)"


def log_revised(claim: str, stated: str, values: Sequence[float], **kw) -> Check:
    """:func:`seeded_check` as first registered (a linear-scale interval), carrying the result on a log
    scale (a positive multiplicative quantity: a ratio, an rms, a gradient norm) as the revised one."""
    first = seeded_check(claim, stated, values, **kw)
    return with_revision(first, seeded_check(claim, stated, values, **{**kw, "scale": "log"}), LOG_SCALE)


def effect_revised(claim: str, stated: str, values: Sequence[float], minimum: float, **kw) -> Check:
    """:func:`seeded_check` of a paired difference against its first-registered bound (0), carrying the
    result against a registered minimum effect (``minimum`` beyond that bound, in the difference's own
    units) as the revised one."""
    first = seeded_check(claim, stated, values, **kw)
    shift = {"at_least": minimum, "at_most": -minimum}
    moved = {k: v + shift[k] if k in shift and v is not None else v for k, v in kw.items()}
    revised = seeded_check(claim, stated, values, **moved)
    return with_revision(first, revised, f"a minimum effect of {minimum:g} beyond the first bound")


def sanity_under_revision(check: Check, reason: str) -> Check:
    """``check``, counted with its result as first registered, and a sanity check (``reason``) under the
    rules revised with results known; ``reason`` "" leaves it as it is."""
    if reason:
        check.revised_sanity = reason
    return check


def unanimous_check(
    claim: str, stated: str, outcomes: Sequence[bool], measured: str, sanity: str = ""
) -> Check:
    """A check on a yes/no outcome per seed: agree if every seed shows it, MISMATCH if none does,
    inconclusive if the seeds split (one seed alone is inconclusive)."""
    if len(outcomes) < 2:
        result = INCONCLUSIVE
    else:
        result = AGREE if all(outcomes) else MISMATCH if not any(outcomes) else INCONCLUSIVE
    return Check(claim, stated, measured, result, sanity)


def unless_control(check: Check, control: str, note: str) -> Check:
    """``check``, made inconclusive with ``note`` appended when its control's result is not agree: a
    failure that the control was meant to make meaningful says nothing if the control failed too."""
    if control != AGREE:
        check.result = INCONCLUSIVE
        check.measured += f"; {note}"
    return check


def revised_unless_control(check: Check, control: bool, note: str, revision: str) -> Check:
    """``check`` as first registered; under a control rule added with results known (``revision``) it
    would be inconclusive when ``control`` (the compared runs trained) is False: kept in ``revised``."""
    if not control:
        check.revised = INCONCLUSIVE
        check.revision = "; ".join(r for r in (check.revision, revision) if r)  # both revisions apply
        check.measured += f"; {note} (inconclusive under the revised rule)"
    return check


def combined(results: Sequence[str]) -> str:
    """One result from several that must all hold: MISMATCH if any is, agree if all are, else inconclusive."""
    if MISMATCH in results:
        return MISMATCH
    return AGREE if all(v == AGREE for v in results) else INCONCLUSIVE


def resolve(
    registration: Registration, scale: str, quick: bool = False, quick_changes: dict | None = None
) -> dict:
    """The regime a claim runs: the registered one of ``scale``. ``quick`` (small scale only) applies
    ``quick_changes``, a smaller smoke version that is not registered: its results are not the claim's."""
    if scale not in registration.regimes:
        raise ConfigError(
            "scale", scale, " or ".join(registration.regimes) or "no scale (not a training claim)"
        )
    if quick and scale != "small":
        raise ConfigError("quick", True, "only with --scale small (the large scale has no quick version)")
    return {**registration.regimes[scale], **((quick_changes or {}) if quick else {})}


def counts(checks: Sequence[Check], registration: str = "first") -> dict[str, int]:
    """{agree, MISMATCH, inconclusive}: counted checks by result under the "first" registration (the
    results that decide) or the "revised" rules; sanity: the checks not counted."""
    out = {AGREE: 0, MISMATCH: 0, INCONCLUSIVE: 0, "sanity": 0}
    for c in checks:
        out[c.under(registration) if c.counted_under(registration) else "sanity"] += 1
    return out


def family_results(checks: Sequence[Check], alpha: float = 0.05) -> list[str]:
    """Each check's result under Holm's family-wise rule over the counted checks with a p-value (one
    claim's checks are one family): a decided result whose p-value Holm does not reject becomes
    inconclusive; a check without a p-value keeps its result; a sanity check gives ""."""
    family = [i for i, c in enumerate(checks) if c.counted and not math.isnan(c.p)]
    kept = dict(zip(family, holm([checks[i].p for i in family], alpha)))
    out = []
    for i, c in enumerate(checks):
        if not c.counted:
            out.append("")
        elif i in kept and not kept[i] and c.result != INCONCLUSIVE:
            out.append(INCONCLUSIVE)
        else:
            out.append(c.result)
    return out


def _count_text(n: dict) -> str:
    counted = n[AGREE] + n[MISMATCH] + n[INCONCLUSIVE]
    text = f"{n[AGREE]} of {counted} agree"
    others = [f"{n[k]} {k}" for k in (MISMATCH, INCONCLUSIVE) if n[k]]
    return text + (f" ({', '.join(others)})" if others else "")


def format_counts(checks: Sequence[Check]) -> str:
    """e.g. '3 of 5 agree (1 MISMATCH, 1 inconclusive); 2 sanity checks', then the counts under revised
    rules when a revision made with results known would change them."""
    n = counts(checks)
    text = _count_text(n)
    revised = counts(checks, "revised")
    if revised != n:
        text += f"; under rules revised with results known: {_count_text(revised)}"
    if n["sanity"]:
        text += f"; {n['sanity']} sanity check{'s' if n['sanity'] > 1 else ''} not counted"
    return text


def _moved(c: Check) -> str:
    return " (sanity under the revised rules)" if c.revised_sanity else ""


def _revised(c: Check) -> str:
    """The result under rules revised with results known, where it differs, then :func:`_moved`."""
    other = c.revised and c.revised != c.result
    return (f" (revised rules: {c.revised})" if other else "") + _moved(c)


# The claim, stated and measured columns of a reproduction's table: a longer cell wraps at spaces (a
# measured cell holds every seed's value and can run to a thousand characters).
CELL_WIDTH = (64, 36, 64)


def _wrapped(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width`` characters, broken at spaces (a longer word kept whole)."""
    return textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False) or [""]


@dataclass
class Reproduction:
    """The measured data (a JSON-able dict), the checks, and the paths of any plots written.

    ``data["tables"]``, if present, holds measured tables shown after the checks: each
    {"title": str, "columns": [str], "rows": [[str]]}.
    """

    name: str
    data: dict
    checks: list[Check]
    plots: list[str] = field(default_factory=list)
    source: str = ""

    @property
    def ok(self) -> bool:
        """Every counted check agrees."""
        return all(c.ok for c in self.checks if c.counted)

    def to_dict(self) -> dict:
        return {**self.data, "checks": [c.to_dict() for c in self.checks]}

    @classmethod
    def from_dict(cls, d: dict, name: str, plots: Sequence[str] = (), source: str = "") -> Reproduction:
        """The reproduction :meth:`to_dict` wrote (the data and the checks), under ``name``, ``plots``
        and ``source``, which it does not hold."""
        data = {k: v for k, v in d.items() if k != "checks"}
        return cls(name, data, [Check.from_dict(c) for c in d["checks"]], list(plots), source)

    def format(self) -> str:
        """A claim / stated / measured / result table, sanity checks marked, a result under rules revised
        with results known beside the first, then the counts. A cell wider than its column's
        :data:`CELL_WIDTH` wraps onto the lines below it; the result ends each row's first line."""
        rows = [
            ([c.claim, c.stated, c.measured], c.result + ("" if c.counted else " (sanity)") + _revised(c))
            for c in self.checks
        ]
        heads = ("claim", "stated", "measured")
        cells = [[_wrapped(v, w) for v, w in zip(r, CELL_WIDTH)] for r, _ in rows]
        widths = [max([len(ln) for c in cells for ln in c[i]] + [len(h)]) for i, h in enumerate(heads)]
        lines = [
            f"{self.name}" + (f"  ({self.source})" if self.source else ""),
            "  " + "  ".join(f"{h:<{w}}" for h, w in zip(heads, widths)) + "  result",
        ]
        for row, (_, result) in zip(cells, rows):
            for i in range(max(len(c) for c in row)):
                text = [c[i] if i < len(c) else "" for c in row]
                line = "  " + "  ".join(f"{v:<{w}}" for v, w in zip(text, widths))
                lines.append(line + f"  {result}" if i == 0 else line.rstrip())
        lines.append(f"  {format_counts(self.checks)}")
        for table in self.data.get("tables", []):
            lines += ["", f"  {table['title']}", "  " + " | ".join(table["columns"])]
            lines += ["  " + " | ".join(map(str, row)) for row in table["rows"]]
        lines += [f"  plot: {p}" for p in self.plots]
        return "\n".join(lines)


REPRODUCTIONS: dict[str, Callable[..., Reproduction]] = {}
REGISTRATIONS: dict[str, Registration] = {}


def register(name: str, registration: Registration | None = None):
    """Decorator: add a reproduction function under ``name``, with its registration."""

    def deco(fn):
        REPRODUCTIONS[name] = fn
        if registration is not None:
            REGISTRATIONS[name] = registration
        return fn

    return deco


def supports(name: str, scale: str) -> bool:
    """Whether reproduction ``name`` has a regime at ``scale`` (every claim runs at "small")."""
    registration = REGISTRATIONS.get(name)
    return scale == "small" or (registration is not None and scale in registration.regimes)


def run_claim(
    name: str, quick: bool = False, out_dir: str | None = None, scale: str = "small"
) -> Reproduction:
    """Run reproduction ``name`` at ``scale``; ConfigError for an unknown name or a scale it does not have."""
    if name not in REPRODUCTIONS:
        raise ConfigError("NAME", name, f"one of {', '.join(sorted(REPRODUCTIONS))}")
    if scale not in SCALES:
        raise ConfigError("scale", scale, " or ".join(SCALES))
    if not supports(name, scale):
        raise ConfigError("scale", scale, f"small: {name} trains nothing, so it has no {scale} scale")
    return REPRODUCTIONS[name](quick=quick, out_dir=out_dir, scale=scale)

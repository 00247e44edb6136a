"""A claim's registration: its expectation and regime, fixed by the commit that first recorded them.

An expectation (thresholds, expected directions, the decision rule) and a regime (sizes, steps, learning
rates, seeds, per scale) are written down before the runs that test them. Changing one afterwards is a
:class:`Revision`: the old value, the new value, the reason, and whether the results were known when it
was made. docs/reproductions.md shows every registration with its commit and every revision, and
lab/tests/test_reproduce_registration.py replays the revisions on the values first registered
(lab/tests/registered_expectations.json): a value changed without a revision fails it (:func:`replay`).
The same test checks each registration's commit against the repository's history (the first commit
whose pinned values are today's first values) and pins the code that computes and decides each check
(:mod:`depthlab_lab.reproduce.check_code`): a change to that code is a revision too, keyed "code.NAME".
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Revision:
    """One change to a registered value, made visibly.

    ``key`` names the value as :meth:`Registration.values` does ("expectation.clear",
    "regime.small.seeds"); a key that names a whole regime ("regime.large") replaces every value under it,
    with ``old`` and ``new`` the regime's dicts.
    ``old`` is None when the value is new. ``results_known`` says whether (and which) results had been
    seen when the change was made: a revision made with results known cannot count as a prediction.
    ``date`` is typed by hand; it never precedes the registration's commit (checked against the history
    by lab/tests/test_reproduce_registration.py). ``commit``: the commit that carried the change, where it
    is recorded (checked there too: it touched the claim's file at the typed time); a revision carried
    before the registration's commit (a change to the code before the values were committed as a
    registration, which then recorded the values from before it as the first) must name it.
    """

    date: str
    key: str
    old: object
    new: object
    reason: str
    results_known: str
    commit: str = ""

    def to_dict(self) -> dict:
        d = {
            "date": self.date,
            "key": self.key,
            "old": self.old,
            "new": self.new,
            "reason": self.reason,
            "results_known": self.results_known,
        }
        if self.commit:
            d["commit"] = self.commit
        return d


@dataclass(frozen=True)
class Registration:
    """What a claim expects and under which regime, as registered in ``commit``.

    ``commit``: the git commit that first recorded the registration's values (checked against the
    history by lab/tests/test_reproduce_registration.py): the registration's only timestamp.
    ``typed_date``: the date string once typed in the code by hand; shown as what it was, never used as
    the registration's time (one was typed 30 minutes after the commit that carried it).
    ``expectation``: named thresholds and expected outcomes (JSON-able values). ``regimes``: per scale
    ("small", "large"), the sizes, steps, learning rates and seeds that the claim runs. ``notes``: how the
    regime was chosen (say so when pilot results were known). ``revisions``: every change since ``commit``,
    oldest first. The claim's code reads its values from here, so what runs is what is registered.
    """

    commit: str
    expectation: dict
    regimes: dict = field(default_factory=dict)
    notes: str = ""
    revisions: tuple[Revision, ...] = ()
    typed_date: str = ""

    def regime(self, scale: str) -> dict:
        """The regime of ``scale`` (KeyError names the scales registered)."""
        if scale not in self.regimes:
            raise KeyError(f"scale {scale!r} is not registered; one of {', '.join(self.regimes)}")
        return self.regimes[scale]

    def values(self) -> dict:
        """Every registered value under a dotted key: expectation.NAME and regime.SCALE.NAME."""
        out = {f"expectation.{k}": v for k, v in self.expectation.items()}
        for scale, regime in self.regimes.items():
            out.update({f"regime.{scale}.{k}": v for k, v in regime.items()})
        return _plain(out)

    def to_dict(self) -> dict:
        return {
            "commit": self.commit,
            "typed_date": self.typed_date,
            "expectation": _plain(self.expectation),
            "regimes": _plain(self.regimes),
            "notes": self.notes,
            "revisions": [r.to_dict() for r in self.revisions],
        }


def replay(first: dict, revisions: tuple[Revision, ...] | list[Revision]) -> tuple[dict, list[str]]:
    """Apply ``revisions`` in order to the values first registered; returns (values, problems).

    A problem is a revision whose ``old`` is not the value it replaces (or names a value that does not
    exist, or adds one that does): the chain from the first registration to today is broken there.
    """
    values, problems = copy.deepcopy(_plain(first)), []
    for r in revisions:
        prefix = r.key + "."
        group = {k: v for k, v in values.items() if k.startswith(prefix)}
        if is_regime(r.key):
            old = {k[len(prefix) :]: v for k, v in group.items()} or None
            if _plain(r.old) != old:
                problems.append(f"{r.date} {r.key}: old {r.old!r} but the registered value is {old!r}")
            for k in group:
                del values[k]
            values.update({prefix + k: v for k, v in _plain(r.new or {}).items()})
            continue
        current = values.get(r.key)
        if _plain(r.old) != current:
            problems.append(f"{r.date} {r.key}: old {r.old!r} but the registered value is {current!r}")
        if r.new is None:
            values.pop(r.key, None)
        else:
            values[r.key] = _plain(r.new)
    return values, problems


def is_regime(key: str) -> bool:
    """Whether ``key`` names a whole regime ("regime.large") rather than one value."""
    parts = key.split(".")
    return len(parts) == 2 and parts[0] == "regime"


def unrevised_changes(first: dict, registration: Registration, code: dict | None = None) -> list[str]:
    """The differences between ``registration`` and its first values that no revision accounts for.

    Empty when the revisions lead from ``first`` (the values as first registered) to today's values.
    ``code``: today's digests of the claim's check code ({name: digest}, compared as "code.NAME" with
    the first values' "code.NAME" entries).
    """
    replayed, problems = replay(first, registration.revisions)
    now = {**registration.values(), **{f"code.{k}": v for k, v in (code or {}).items()}}
    for key in sorted(set(replayed) | set(now)):
        if replayed.get(key, "<absent>") != now.get(key, "<absent>"):
            problems.append(
                f"{key}: registered {replayed.get(key, '<absent>')!r}, now {now.get(key, '<absent>')!r} "
                "with no revision entry (old, new, reason, results known)"
            )
    return problems


def _plain(v):
    """Tuples as lists, recursively: the JSON form the pins are stored in."""
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


# The decision rule every claim with seeds uses, and the standard revisions that moved a claim first
# registered with one seed onto it and added its large scale.
DECISION = (
    "mean over seeds with a 95% Student t-interval (depthlab.intervals): agree when the whole interval is "
    "on the expected side of the threshold, MISMATCH when all of it is on the other side, inconclusive "
    "when it straddles the threshold"
)
SEEDS_REASON = "one seed is an anecdote: the result is decided on the mean over seeds with an interval"
SEEDS_KNOWN = "yes for seed 0 (the single-seed run of 2026-11-30 08:25 UTC); no for the other seeds"
LABEL_AS_LEVEL = (
    "one run's outcome label becomes a level decided over seeds: the train package's stall level, a final "
    "loss 5% below the unigram loss (depthlab.train.outcome)"
)
LARGE_REASON = "a scale at which claims that are undecided or fail at small scale can be decided"


def to_seeds(
    date: str,
    old_decision: str,
    seeds: dict,
    large: dict | None,
    known: str = SEEDS_KNOWN,
    level: bool = False,
) -> tuple[Revision, ...]:
    """The revisions that moved a single-seed claim to seeds and intervals and, unless ``large`` is None,
    added its large scale. ``level``: the claim's "trained" label became the stall level over seeds
    (expectation "trained_share_below_unigram", 0.05).

    ``seeds``: {regime key: (old seeds, new seeds)}, e.g. {"regime.small.seeds": ([0], [0, 1, 2])}.
    """
    out = [Revision(date, "expectation.decision", old_decision, DECISION, SEEDS_REASON, known)]
    if level:
        out.append(
            Revision(date, "expectation.trained_share_below_unigram", None, 0.05, LABEL_AS_LEVEL, SEEDS_KNOWN)
        )
    out += [Revision(date, key, old, new, SEEDS_REASON, known) for key, (old, new) in seeds.items()]
    if large is not None:
        out.append(
            Revision(date, "regime.large", None, large, LARGE_REASON, "no: not run before it was registered")
        )
    return tuple(out)


# The revisions that give positive multiplicative quantities a log-scale interval, and paired differences
# decided against 0 a minimum effect, in the revised column (the first registration's result decides).
LOG_REASON = (
    "a positive multiplicative quantity (a ratio, an rms, a gradient norm) spreads over seeds by factors, "
    "and a linear interval can reach below 0, a value it cannot take: its interval on log10 values "
    "(shown as a geometric mean) in the revised column; the linear-scale result decides as first registered"
)
EFFECT_REASON = (
    "a paired difference decided against 0 agrees on an effect too small to matter: the revised column "
    "asks for a registered minimum effect, chosen from the quantity's own noise or the claim's own band "
    "(the code says why beside it), never from the results; the result against 0 decides as first "
    "registered"
)
CAP_REASON = (
    "a finite final loss above ln V (worse than a uniform guess, e.g. a stack still falling from a huge "
    "loss at init) counts as ln V in the revised column, as the claims count a model that learned "
    "nothing; the first registration's loss (as reported) decides"
)
PUBLISHED_KNOWN = "yes: the results were published; the first registration's result decides"
UNPUBLISHED_KNOWN = (
    "no result of the registered regime is in docs/reproductions.md at this commit; the first "
    "registration's result decides all the same"
)
# The revision that makes every check added with results known a sanity check (under the first
# registration too: it was not in it).
ADDED_KNOWN_SANITY = (
    "a check added after its results were known is a sanity check (shown, not counted) under the first "
    "registration too, as the other checks added with results known are; the reconstruction of the ReZero "
    "setup is labelled depthlab's own (the notebook's real cell is the table beside it)"
)
ADDED_KNOWN_SANITY_KNOWN = (
    "yes: the results were published; these checks leave the counts whatever their result"
)
# The revision that counts each check moved to sanity with results known as first registered.
SANITY_AS_FIRST = (
    "a check moved to sanity by a revision made with results known counts, with its result, under the "
    "first registration as it was first registered; it is a sanity check under the revised rules only"
)
SANITY_AS_FIRST_KNOWN = (
    "yes: the results were published; the first registration's counts are restored and decide, the "
    "revised ones are shown beside them"
)


# Revisions of the shared decision code (depthlab_lab.reproduce.check_code.SHARED), keyed
# "code.MODULE.FUNCTION", old and new the function's digest; replayed like a claim's revisions.
SHARED_REVISIONS: tuple[Revision, ...] = (
    Revision(
        "2026-12-01",
        "code.depthlab.reproduce.reproduction.seeded_check",
        "550a77f84fd99d96",
        "ddae7d8816180984",
        "a registered log scale for positive multiplicative quantities, and the p-value of each decision "
        "(for the family-wise column); a linear-scale check decides as before",
        "yes: no check registered before this revision changes result (none was on a log scale)",
    ),
    Revision(
        "2026-12-01",
        "code.depthlab.reproduce.reproduction.counts",
        "85eaa11ae9e82b82",
        "f3fd71cfac714650",
        "counts under the first registration (the results that decide) or under the revised rules",
        "yes: the first registration's counts are the ones that decide, as before",
    ),
    Revision(
        "2026-12-01",
        "code.depthlab.reproduce.lm_runs.final_loss",
        "85cdb69f85506c92",
        "36660ad41f4501d8",
        "the registered rule, a diverged run counts as ln V, applied to a diverged run that still reported "
        "a finite validation loss (a run can diverge at step 21 and be evaluated finite later)",
        "yes: the documented results were computed before it; the registered rule decides",
    ),
    Revision(
        "2026-12-01",
        "code.depthlab.reproduce.reproduction.seeded_check",
        "ddae7d8816180984",
        "d9fc7d81d27a1e6b",
        "each check carries the rule it applied (bounds and scale) into the run record",
        "yes: no result changes",
    ),
    Revision(
        "2026-12-01",
        "code.depthlab.reproduce.lm_runs.all_trained",
        None,
        "60e57f9de7de91b0",
        "whether both sides of a close or no-worse comparison trained (the revised rule shown beside them)",
        "yes: it decides no result",
    ),
    *(
        Revision(
            "2026-12-01",
            f"code.depthlab.reproduce.shares.{name}",
            None,
            digest,
            "a yes/no outcome per seed decided on the share of seeds with an exact binomial interval (a "
            "discrete quantity; unanimity is no interval)",
            "yes for the checks revised onto it (shown beside their first registration's rule, which "
            "decides); no for the checks registered on it before their runs",
        )
        for name, digest in (
            ("share_interval", "147c324f985549f6"),
            ("share_p_value", "de789627e0a002d0"),
            ("share_check", "0dc61ab02f97c996"),
            ("_at_least", "6c6db2579afaae11"),
            ("_solve", "e1956a7a817def67"),
        )
    ),
    Revision(
        "2026-12-01",
        "code.depthlab.reproduce.reproduction.Check.counted_under",
        None,
        "2a1ed2032bf9ff26",
        SANITY_AS_FIRST,
        SANITY_AS_FIRST_KNOWN,
    ),
    Revision(
        "2026-12-01",
        "code.depthlab.reproduce.reproduction.counts",
        "f3fd71cfac714650",
        "a7b1b923b1d4a149",
        SANITY_AS_FIRST,
        SANITY_AS_FIRST_KNOWN,
    ),
    Revision(
        "2026-12-01",
        "code.depthlab.reproduce.reproduction.sanity_under_revision",
        None,
        "27ef732f6a373228",
        SANITY_AS_FIRST,
        SANITY_AS_FIRST_KNOWN,
    ),
    Revision(
        "2026-12-01",
        "code.depthlab.reproduce.reproduction.LOG_SCALE",
        None,
        "abf39f69b4bd9b03",
        LOG_REASON,
        PUBLISHED_KNOWN,
    ),
    Revision(
        "2026-12-01",
        "code.depthlab.reproduce.reproduction.log_revised",
        None,
        "eb32dc2d8c5a3a00",
        LOG_REASON,
        PUBLISHED_KNOWN,
    ),
    Revision(
        "2026-12-01",
        "code.depthlab.reproduce.reproduction.revised_unless_control",
        "9bb77882c524a711",
        "1bad11da4c02d64a",
        "a check that already carries a revision keeps it named beside the control rule's (both apply in the revised column)",
        "yes: no first-registered result changes",
    ),
    Revision(
        "2026-12-01",
        "code.depthlab.reproduce.reproduction.effect_revised",
        None,
        "3dbe5c9a8e2f4c74",
        EFFECT_REASON,
        PUBLISHED_KNOWN,
    ),
    Revision(
        "2026-12-01",
        "code.depthlab.reproduce.lm_runs.CAP_REVISION",
        None,
        "2849f5128c3c3588",
        CAP_REASON,
        PUBLISHED_KNOWN,
    ),
    Revision(
        "2026-12-01",
        "code.depthlab.reproduce.lm_runs.capped_loss",
        None,
        "007140bb22913d7b",
        CAP_REASON,
        PUBLISHED_KNOWN,
    ),
    Revision(
        "2026-12-01",
        "code.depthlab.reproduce.lm_runs.loss_gap_check",
        None,
        "4a41f1bb6c005a09",
        CAP_REASON,
        PUBLISHED_KNOWN,
    ),
)

# The outcome classifier's code pinned with its constants (before, only the constants were: changing how a
# margin is applied, (1 + STALL_MARGIN) to (1 + 2 * STALL_MARGIN), passed every test).
MONITOR_PINNED = (
    "the code that labels every run (trained, undertrained, stalled, diverged) is pinned like a claim's "
    "decision code: a change to how a threshold is applied relabels runs as surely as a changed threshold"
)
MONITOR_KNOWN = "yes: pinned as it is, no result changes (a new pin of unchanged code)"
SHARED_REVISIONS += tuple(
    Revision("2026-12-04", f"code.depthlab.watch.outcome.{name}", None, digest, MONITOR_PINNED, MONITOR_KNOWN)
    for name, digest in (
        ("Monitor.stall_level", "eb7b738a908ccf85"),
        ("Monitor.update", "e9c8c8b68feac52a"),
        ("Monitor.log", "57f84919e98e284e"),
        ("Monitor.decide", "8a22ca5f1fcf6017"),
        ("Monitor._fitted_drop", "681e8e8566c48025"),
        ("escape_step", "42ff81567bead73f"),
    )
)

# A run too short to read a trend was labelled stalled: with fewer than three logged losses after its
# stall point the fitted fall was taken as 0 ("flat"), though its loss was falling.
SHORT_TREND = (
    "a trend needs three logged losses: a run with fewer after its stall point was read as flat and "
    "labelled stalled though its loss fell; it is now read over its last three logs, and a run with fewer "
    "than three in all is undertrained (too short to tell a slow fall from a stall)"
)
SHORT_TREND_KNOWN = (
    "yes: no recorded label changes (every committed run with an outcome logs at least three losses after "
    "its stall point, where the rule is as before)"
)
SHARED_REVISIONS += (
    Revision("2026-12-07", "code.depthlab.watch.outcome.Monitor.decide", "8a22ca5f1fcf6017",
             "b4cf3dc0bb82352e", SHORT_TREND, SHORT_TREND_KNOWN),
    Revision("2026-12-07", "code.depthlab.watch.outcome.Monitor._fitted_drop", "681e8e8566c48025",
             "e45fc97efc8777a8", SHORT_TREND, SHORT_TREND_KNOWN),
)  # fmt: skip

# The revision that moved checks holding by construction (or known before registration) to sanity.
TO_SANITY = (
    "a check that holds by construction, holds without training, tests a measurement already counted, or "
    "was known before registration is a sanity check: shown with its result, not counted"
)
TO_SANITY_KNOWN = (
    "yes: the results were published; the check leaves the counts whatever its result and is still shown"
)

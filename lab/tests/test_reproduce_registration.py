"""Registered expectations: no change without a revision entry, and the document shows them.

lab/tests/registered_expectations.json holds every claim's values as first registered. Replaying the
claim's revisions on them must give today's values: an expectation or regime changed in the code without
a revision (old value, new value, reason, results known) fails here.

lab/tests/registered_code.json holds the digests of the code that computes and decides each check
(depthlab_lab.reproduce.check_code), pinned from the commit that added it on; a change to that code also
needs a revision (key "code.NAME", old and new digests). A claim's pins follow the code it imports from
other depthlab_lab.reproduce modules (keyed "MODULE.NAME"); a pin added later for code that has not changed
since the registration is no revision: its first digest is the registered code's (checked below against
the registration commit for every claim registered since code was pinned), and only a change to it is
a revision. Each registration's commit is checked against
the repository's history: the first commit whose lab/tests/registered_expectations.json holds the claim's
first values, and whose claim file (under any of its past names) defines a Registration.
"""

from __future__ import annotations

import copy
import datetime
import json
import subprocess
import sys
from pathlib import Path

import pytest

from depthlab_lab.reproduce import REGISTRATIONS, REPRODUCTIONS
from depthlab_lab.reproduce.check_code import claim_pins, module_pins, shared_pins, source_of
from depthlab_lab.reproduce.moved import registered_name
from depthlab_lab.reproduce.registration import (
    SHARED_REVISIONS,
    Registration,
    Revision,
    replay,
    unrevised_changes,
)
from lab.tests.git_history import commits_of, git, module_path, show, show_followed

ROOT = Path(__file__).resolve().parents[2]
PINS_PATH = "lab/tests/registered_expectations.json"
PINS = json.loads((ROOT / PINS_PATH).read_text())
CODE = json.loads((Path(__file__).parent / "registered_code.json").read_text())


def first_values(name: str) -> dict:
    return {**PINS[name]["values"], **{f"code.{k}": v for k, v in CODE[name].items()}}


def test_every_reproduction_is_registered_and_pinned():
    assert set(REGISTRATIONS) == set(REPRODUCTIONS)
    assert set(PINS) == set(REGISTRATIONS), (
        "a new claim needs its first values in registered_expectations.json"
    )
    assert set(CODE) - {"_shared"} == set(REGISTRATIONS), "a new claim needs its code in registered_code.json"


@pytest.mark.parametrize("name", sorted(REGISTRATIONS))
def test_registered_values_and_code_change_only_through_revisions(name):
    reg = REGISTRATIONS[name]
    assert reg.typed_date == PINS[name]["date"], "the typed date is history: it does not change"
    assert unrevised_changes(first_values(name), reg, claim_pins(REPRODUCTIONS[name])) == []
    for r in reg.revisions:
        assert r.reason.strip() and r.results_known.strip(), r


def test_shared_decision_code_changes_only_through_revisions():
    first = {f"code.{k}": v for k, v in CODE["_shared"].items()}
    replayed, problems = replay(first, SHARED_REVISIONS)
    now = {f"code.{k}": v for k, v in shared_pins().items()}
    assert problems == [] and replayed == now, "shared decision code changed without a revision"


_git = git  # skips without history (an sdist or an unpacked archive)


def _history_of_pins() -> list[tuple[str, dict]]:
    if _git("rev-parse", "--is-shallow-repository").strip() == "true":
        pytest.fail(
            "a shallow clone: the registrations' commits need the full history (git fetch --unshallow)"
        )
    return [
        (c, json.loads(src))
        for c in commits_of(PINS_PATH)
        if (src := show_followed(c, PINS_PATH)) is not None
    ]


def _claim_file_names(name: str) -> set[str]:
    path = Path(REPRODUCTIONS_FILE[name]).resolve().relative_to(ROOT.resolve()).as_posix()
    names = _git("log", "--follow", "--format=", "--name-only", "--", path).split()
    return {path, *names}


REPRODUCTIONS_FILE = {name: sys.modules[fn.__module__].__file__ for name, fn in REPRODUCTIONS.items()}


def test_each_registration_is_the_commit_that_first_recorded_its_values():
    history = _history_of_pins()
    for name, reg in sorted(REGISTRATIONS.items()):
        first = next(
            (c for c, pins in history if pins.get(name, {}).get("values") == PINS[name]["values"]), None
        )
        assert first is not None, f"{name}: its first values are in no commit of {PINS_PATH}"
        assert reg.commit == first, f"{name}: registered as {reg.commit}, but {first} first recorded it"
        sources = [src for path in _claim_file_names(name) if (src := show(first, path)) is not None]
        assert any("Registration(" in s for s in sources), f"{name}: no Registration in its file at {first}"


FINAL_NORM = Path(REPRODUCTIONS_FILE["final-norm"]).read_text()


@pytest.mark.parametrize(
    "old, new",
    [
        ('at_least=e["far"],', 'at_least=e["far"] / 4,'),  # a threshold weakened where it is used
        ("all(b > a for a, b", "all(b >= a for a, b"),  # a comparison operator in a check
    ],
)
def test_a_change_to_what_a_check_does_fails_the_pin(old, new):
    assert FINAL_NORM.count(old) == 1
    today = claim_pins(REPRODUCTIONS["final-norm"])
    pins = module_pins(FINAL_NORM.replace(old, new), REPRODUCTIONS["final-norm"].__name__)
    assert pins != today
    reg = REGISTRATIONS["final-norm"]
    assert unrevised_changes(first_values("final-norm"), reg, today) == []
    assert unrevised_changes(first_values("final-norm"), reg, pins), "the mutation went unnoticed"
    changed = [k for k in pins if pins[k] != today[k]]
    fixes = tuple(Revision("2026-12-01", f"code.{k}", today[k], pins[k], "a reason", "yes") for k in changed)
    revised = Registration(reg.commit, reg.expectation, reg.regimes, reg.notes, (*reg.revisions, *fixes))
    assert unrevised_changes(first_values("final-norm"), revised, pins) == []


def test_code_pins_ignore_comments_and_docstrings_only():
    src = 'X = 2\n\ndef f(a):\n    """doc"""\n    return g(a) > X\n\ndef g(a):\n    return a\n\ndef plot_h():\n    pass\n'
    pins = module_pins(src, "f")
    assert set(pins) == {"f", "g", "X"}
    assert module_pins(src.replace('"""doc"""', '"""other"""  # why'), "f") == pins
    assert module_pins(src.replace("return a", "return a * 1"), "f")["g"] != pins["g"]
    assert module_pins(src.replace("X = 2", "X = 3"), "f")["X"] != pins["X"]


def test_a_silent_change_fails_and_a_revision_makes_it_visible():
    reg = REGISTRATIONS["warmup"]
    first, code = first_values("warmup"), claim_pins(REPRODUCTIONS["warmup"])
    changed = Registration(
        reg.commit, {**reg.expectation, "clear": 0.05}, reg.regimes, reg.notes, reg.revisions
    )
    problems = unrevised_changes(first, changed, code)
    assert len(problems) == 1 and "expectation.clear" in problems[0]
    fix = Revision("2026-12-01", "expectation.clear", 0.10, 0.05, "a reason", "yes")
    revised = Registration(reg.commit, changed.expectation, reg.regimes, reg.notes, (*reg.revisions, fix))
    assert unrevised_changes(first, revised, code) == []
    regimes = copy.deepcopy(reg.regimes)
    regimes["small"]["steps"] = 401
    assert unrevised_changes(
        first, Registration(reg.commit, reg.expectation, regimes, "", reg.revisions), code
    )


def test_a_revision_whose_old_value_is_wrong_breaks_the_chain():
    first = {"expectation.x": 1.0, "regime.small.seeds": [0]}
    values, problems = replay(first, [Revision("d", "expectation.x", 2.0, 3.0, "r", "no")])
    assert values["expectation.x"] == 3.0 and problems and "old 2.0" in problems[0]
    added = Revision("d", "regime.large", None, {"steps": 2000, "seeds": [0, 1, 2]}, "r", "no")
    values, problems = replay(first, [added])
    assert not problems and values["regime.large.steps"] == 2000
    values, problems = replay(first, [Revision("d", "regime.small", {"seeds": [1]}, None, "r", "no")])
    assert problems and "regime.small.seeds" not in values


def test_restored_expectations_are_the_first_registered():
    """The warmup rule revised with the results known, and the batchnorm training check replaced after it
    failed, are back to their first registration; both stories stay visible as revisions."""
    warmup, bn = REGISTRATIONS["warmup"], REGISTRATIONS["batchnorm"]
    assert warmup.expectation["failed_run_counts_as_worse"] is False
    assert PINS["warmup"]["values"]["expectation.failed_run_counts_as_worse"] is False
    assert [r.new for r in warmup.revisions if r.key == "expectation.failed_run_counts_as_worse"] == [
        True,
        False,
    ]
    assert bn.expectation["bn_gap_exceeds_ln_by"] == 0.0 and "training_check" not in bn.expectation
    assert [r.key for r in bn.revisions][:2] == ["expectation.training_check"] * 2


def test_a_change_to_an_imported_helper_fails_the_importing_claims_pin():
    """batchnorm-same trains with the batchnorm claim's _train_config: changing it changes that claim's
    runs, so it fails batchnorm-same's pin too."""
    helper = "depthlab.reproduce.claims.batchnorm"
    old, new = "batch_size=16, seq_len=32", "batch_size=8, seq_len=32"
    assert source_of(helper).count(old) == 1
    fn = REPRODUCTIONS["batchnorm-same"]
    today = claim_pins(fn)
    assert f"{helper}._train_config" in today
    mutated = claim_pins(
        fn, lambda m: source_of(m).replace(old, new) if registered_name(m) == helper else source_of(m)
    )
    assert [k for k in today if mutated[k] != today[k]] == [f"{helper}._train_config"]
    reg = REGISTRATIONS["batchnorm-same"]
    assert unrevised_changes(first_values("batchnorm-same"), reg, today) == []
    assert unrevised_changes(first_values("batchnorm-same"), reg, mutated), "the mutation went unnoticed"


@pytest.mark.parametrize(
    "name, pinned",
    [
        ("model-update-stream", "depthlab.reproduce.claims.model_update.tiny_config"),
        ("model-update-stream", "depthlab.reproduce.claims.model_update.SEQ"),
        ("jacobian", "depthlab.reproduce.rezero_notebook.notebook_msv"),
        ("jacobian", "depthlab.reproduce.jacobian_setups.walk"),
        ("width-transfer", "depthlab.study.sensitivity.best_lr_slope"),
        ("lr-transfer-depth", "depthlab.study.sensitivity.best_lr_slope"),
        ("lr-transfer-depth", "depthlab.reproduce.transfer_runs.size_curves"),
    ],
)
def test_code_a_claim_imports_is_pinned_with_it(name, pinned):
    assert pinned in claim_pins(REPRODUCTIONS[name])


def test_the_shared_pins_hold_the_decision_rules_and_the_outcome_thresholds():
    pins = shared_pins()
    for name in (
        "depthlab.reproduce.reproduction.with_revision",
        "depthlab.reproduce.reproduction.revised_unless_control",
        "depthlab.reproduce.reproduction.family_results",
        "depthlab.reproduce.reproduction.resolve",
        "depthlab.reproduce.lm_runs.STALL_SHARE",
        "depthlab.watch.outcome.STALL_MARGIN",
        "depthlab.watch.outcome.BLOWUP",
    ):
        assert name in pins
    src = source_of("depthlab.watch.outcome")
    mutated = shared_pins(
        lambda m: (
            src.replace("STALL_MARGIN = 0.05", "STALL_MARGIN = 0.1")
            if m == "depthlab.watch.outcome"
            else source_of(m)
        )
    )
    assert [k for k in pins if mutated[k] != pins[k]] == ["depthlab.watch.outcome.STALL_MARGIN"]


PINNING = "83832df27b6b98550ccc9f41f1bacba243f214d6"  # the commit that began pinning check code


def _source_at(commit: str):
    def source(module: str) -> str:
        path = module_path(module)
        src = show_followed(commit, path)
        if src is None:
            raise FileNotFoundError(f"{path} at {commit}")
        return src

    return source


def _is_ancestor(a: str, b: str) -> bool:
    """Whether commit ``a`` is ``b`` or one of its ancestors."""
    done = subprocess.run(["git", "merge-base", "--is-ancestor", a, b], cwd=ROOT, capture_output=True)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode == 0


def test_first_code_pins_are_the_code_at_the_registration_commit():
    """For each claim registered since code was pinned, its first digests are its code as registered:
    a pin added later (imported code followed) is no revision only because that code had not changed."""
    _history_of_pins()  # skips without history, fails on a shallow clone
    later = [n for n, r in REGISTRATIONS.items() if _is_ancestor(PINNING, r.commit)]
    assert len(later) >= 9
    for name in sorted(later):
        then = claim_pins(REPRODUCTIONS[name], _source_at(REGISTRATIONS[name].commit))
        assert {k: then.get(k) for k in CODE[name]} == CODE[name], name


def _commit_time(commit: str) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(int(_git("show", "-s", "--format=%ct", commit)), datetime.UTC)


def _typed(date: str) -> tuple[datetime.datetime, str]:
    """A hand-typed date ("2026-11-30" or "2026-11-30 16:30 UTC") and its precision."""
    if date.endswith(" UTC"):
        return datetime.datetime.strptime(date, "%Y-%m-%d %H:%M UTC").replace(tzinfo=datetime.UTC), "minute"
    return datetime.datetime.strptime(date, "%Y-%m-%d").replace(tzinfo=datetime.UTC), "day"


def _floor(t: datetime.datetime, precision: str) -> datetime.datetime:
    t = t.replace(second=0, microsecond=0)
    return t.replace(hour=0, minute=0) if precision == "day" else t


def test_no_revision_is_dated_before_the_registration_it_revises():
    """A revision's typed date never precedes its registration's commit; one carried by a commit before
    it (a change made before the values were committed as a registration) names that commit, which must
    have touched the claim's file at the typed time."""
    _history_of_pins()
    for name, reg in sorted(REGISTRATIONS.items()):
        registered = _commit_time(reg.commit)
        for r in reg.revisions:
            typed, precision = _typed(r.date)
            if r.commit:
                carried = _commit_time(r.commit)
                assert _floor(carried, precision) == typed, f"{name} {r.key}: {r.commit} is not of {r.date}"
                assert _is_ancestor(r.commit, "HEAD"), f"{name} {r.key}: {r.commit} is not in the history"
                touched = set(_git("show", "--format=", "--name-only", r.commit).split())
                assert touched & _claim_file_names(name), f"{name} {r.key}: {r.commit} left its file alone"
            else:
                assert typed >= _floor(registered, precision), (
                    f"{name}: the revision of {r.key} is dated {r.date}, before its registration "
                    f"{reg.commit[:10]} ({registered:%Y-%m-%d %H:%M} UTC)"
                )
    pinning = _floor(_commit_time(PINNING), "day")
    for r in SHARED_REVISIONS:
        assert _typed(r.date)[0] >= pinning, f"shared {r.key}: dated before the shared code was pinned"


@pytest.mark.parametrize(
    "old, new",
    [
        ("if final <= (1 + STALL_MARGIN) * U:", "if final <= (1 + 2 * STALL_MARGIN) * U:"),
        ("if drop > FALL_MARGIN:", "if drop >= FALL_MARGIN:"),
        ("if self.ema > self.spike_factor * floor:", "if self.ema > 2 * self.spike_factor * floor:"),
        (
            "below = loss is not None and math.isfinite(loss) and loss < level",
            "below = loss is not None and loss < level",
        ),
    ],
)
def test_weakening_how_the_outcome_rules_are_applied_fails_the_shared_pin(old, new):
    """Every run's label rests on the outcome classifier: its code is pinned, not only its constants."""
    src = source_of("depthlab.watch.outcome")
    assert src.count(old) == 1
    mutated = shared_pins(lambda m: src.replace(old, new) if m == "depthlab.watch.outcome" else source_of(m))
    first = {f"code.{k}": v for k, v in CODE["_shared"].items()}
    replayed, problems = replay(first, SHARED_REVISIONS)
    assert problems == [] and replayed == {f"code.{k}": v for k, v in shared_pins().items()}
    assert replayed != {f"code.{k}": v for k, v in mutated.items()}, "the weakened rule went unnoticed"

"""Every registered claim is filed under one kind of evidence, by words its registration says."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from depthlab_lab.reproduce import REGISTRATIONS
from depthlab_lab.reproduce.evidence import (
    BLIND,
    EVIDENCE,
    KINDS,
    SEEDS_KNOWN,
    SOME_KNOWN,
    TEXTBOOK,
    said_by,
)

SEEDS = re.compile(r"seeds? 0(\b|-\d|, 1)")
RECORD = Path(__file__).resolve().parents[2] / "docs" / "reproductions-record.json"


def _known_revisions(name: str) -> list:
    """The revisions of a first-registered value (not of code, not of the revised column alone) made
    with results known."""
    return [
        r
        for r in REGISTRATIONS[name].revisions
        if not r.key.startswith("code.")
        and r.results_known.startswith("yes")
        and "decides" not in r.results_known
    ]


def test_every_registered_claim_is_filed_once():
    assert set(EVIDENCE) == set(REGISTRATIONS)
    assert {e.kind for e in EVIDENCE.values()} <= set(KINDS)
    assert all(e.reason.strip() and e.quote.strip() for e in EVIDENCE.values())


@pytest.mark.parametrize("name", sorted(EVIDENCE))
def test_the_kind_is_what_the_registration_says(name):
    e, reg = EVIDENCE[name], REGISTRATIONS[name]
    assert e.quote in said_by(reg), f"{name}: its registration does not say {e.quote!r}"
    if e.kind == BLIND:
        assert reg.notes.startswith("Registered before any"), name
        assert _known_revisions(name) == [], f"{name}: a registered value changed with results known"
        assert not any(r.results_known.startswith("yes for seed") for r in reg.revisions), name
    elif e.kind == SEEDS_KNOWN:
        assert SEEDS.search(e.quote), f"{name}: the quote names no seed that was seen"
    elif e.kind == SOME_KNOWN:
        assert "known" in e.quote.lower() or e.quote.startswith("yes"), name
        assert not SEEDS.search(e.quote), f"{name}: seeds were known: {SEEDS_KNOWN}"
    else:
        assert e.kind == TEXTBOOK and "texts' own numbers" in e.quote, name


def test_a_claim_moved_onto_seeds_with_seed_0_known_is_never_blind():
    for name, reg in REGISTRATIONS.items():
        if any(r.results_known.startswith("yes for seed") for r in reg.revisions):
            assert EVIDENCE[name].kind == SEEDS_KNOWN, name
        if _known_revisions(name):
            assert EVIDENCE[name].kind in (SEEDS_KNOWN, SOME_KNOWN, TEXTBOOK), name


def test_the_kinds_cover_every_counted_check_of_the_record():
    claims = json.loads(RECORD.read_text(encoding="utf-8"))["claims"]
    by_kind = dict.fromkeys(KINDS, 0)
    for name, claim in claims.items():
        by_kind[EVIDENCE[name].kind] += sum(1 for c in claim["checks"] if c.get("counted"))
    counted = sum(1 for claim in claims.values() for c in claim["checks"] if c.get("counted"))
    assert sum(by_kind.values()) == counted and all(by_kind[k] for k in (BLIND, SEEDS_KNOWN, SOME_KNOWN))

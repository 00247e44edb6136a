"""The committed page and its run record agree: every verdict over seeds is decided again from
docs/reproductions-record.json, and the page's headline counts are the record's. The page answers
first: a row per claim in plain words within its first 60 lines, the counts by what was known at
registration, and each claim's section saying at which commit it was computed."""

from __future__ import annotations

import json
import re
from pathlib import Path

from depthlab_lab.docgen.reproductions import names_to_run
from depthlab_lab.docgen.reproductions_answers import PLAIN
from depthlab_lab.reproduce import REPRODUCTIONS
from depthlab_lab.reproduce.evidence import EVIDENCE, KINDS, SAID
from depthlab_lab.reproduce.run_record import regenerate
from depthlab_lab.reproduce.topology_record import OWN_PAGE

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _record() -> dict:
    return json.loads((DOCS / "reproductions-record.json").read_text(encoding="utf-8"))


def test_every_claim_is_in_the_committed_record_and_its_verdicts_regenerate():
    record = _record()
    # the claims with a page of their own are recorded there (docs/reproductions-topologies-runs.json)
    assert set(record["claims"]) == set(REPRODUCTIONS) - OWN_PAGE
    done, _, problems = regenerate(record)
    assert done > 100 and problems == []
    assert (DOCS / "reproductions-record.json").stat().st_size < 5_000_000


def test_the_page_headline_counts_are_the_records():
    counted = [c for claim in _record()["claims"].values() for c in claim["checks"] if c.get("counted")]
    tally = {r: sum(c["result"] == r for c in counted) for r in ("agree", "MISMATCH", "inconclusive")}
    page = (DOCS / "reproductions.md").read_text(encoding="utf-8")
    m = re.search(
        r"Under the first registrations: (\d+) of (\d+) counted checks agree, (\d+) MISMATCH, (\d+) inconclusive",
        page,
    )
    assert m, "the page's headline line"
    assert [int(x) for x in m.groups()] == [
        tally["agree"],
        len(counted),
        tally["MISMATCH"],
        tally["inconclusive"],
    ]


def _page() -> str:
    return (DOCS / "reproductions.md").read_text(encoding="utf-8")


def test_the_page_opens_with_a_row_per_claim_in_plain_words():
    first = _page().splitlines()[:60]
    for name in names_to_run(REPRODUCTIONS):  # the residual-topology claims have a page of their own
        rows = [ln for ln in first if ln.endswith(f"| [{name}](#{name}) |")]
        assert len(rows) == 1, f"{name}: no row of its own in the page's first 60 lines"
        cells = [c.strip() for c in rows[0].strip("|").split("|")]
        assert cells[0] == PLAIN[name] and cells[1] and cells[2] and cells[3], rows[0]


def test_the_page_counts_the_checks_by_what_was_known_at_registration():
    by_kind = {k: [0, 0, 0, 0] for k in KINDS}
    for name, claim in _record()["claims"].items():
        for c in claim["checks"]:
            if c.get("counted"):
                row = by_kind[EVIDENCE[name].kind]
                row[0] += 1
                row[1 + ("agree", "MISMATCH", "inconclusive").index(c["result"])] += 1
    page = _page()
    on_page = _record()["claims"]
    for kind, (n, agree, mismatch, inconclusive) in by_kind.items():
        claims = sum(1 for name in on_page if EVIDENCE[name].kind == kind)
        assert f"| {SAID[kind]} | {claims} | {n} | {agree} | {mismatch} | {inconclusive} |" in page, kind


def test_each_section_says_at_which_commit_its_claim_was_computed():
    sections = re.split(r"^## ", _page(), flags=re.M)
    for name in names_to_run(REPRODUCTIONS):
        (body,) = [s for s in sections if s.startswith(f"{name}\n")]
        command = next(ln for ln in body.splitlines() if ln.startswith("Command:"))
        assert re.search(r"computed at commit [0-9a-f]{10}", command), name


def test_the_readme_says_what_kind_of_evidence_the_counts_are():
    readme = " ".join((DOCS.parent / "README.md").read_text(encoding="utf-8").split())
    counted = {
        name: sum(1 for c in claim["checks"] if c.get("counted"))
        for name, claim in _record()["claims"].items()
    }
    by_kind = {k: sum(n for name, n in counted.items() if EVIDENCE[name].kind == k) for k in KINDS}
    total = sum(counted.values())
    blind, seeds, some, textbook = (by_kind[k] for k in KINDS)
    assert f"Of the {total}, {blind} were registered blind" in readme
    assert f"{seeds} with seed 0 (or seeds 0-2) of the same runs known" in readme
    assert f"{some} with one result or a few outcomes known" in readme
    assert f"{textbook} are arithmetic on the texts' numbers" in readme


def test_the_page_shows_every_revision_of_the_decision_code_all_claims_share():
    """A change to shared decision code (the outcome classifier, the checks' counting) after results is
    a revision like any other: the page's revisions table holds each, with its old and new digest."""
    from depthlab_lab.docgen.reproductions_text import shared_revision_rows
    from depthlab_lab.reproduce.registration import SHARED_REVISIONS

    rows = shared_revision_rows()
    changed = [r for r in SHARED_REVISIONS if r.old is not None]
    assert len(rows) == len(changed) and any("Monitor._fitted_drop" in row for row in rows)
    page = _page()
    assert all(row in page for row in rows)

"""The committed page and its run record agree: every verdict over seeds is decided again from
docs/reproductions-record.json, and the page's headline counts are the record's."""

from __future__ import annotations

import json
import re
from pathlib import Path

from depthlab_lab.reproduce import REPRODUCTIONS
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

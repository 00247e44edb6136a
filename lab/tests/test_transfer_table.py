"""docs/transfer.md opens with what transfers, computed from the registered claims' run records."""

from __future__ import annotations

import json
import re

import pytest

from depthlab_lab.docgen import transfer_table
from depthlab_lab.docgen.tables import render

PAGE = transfer_table.DOCS / "transfer.md"


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub writes it: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^a-z0-9 _-]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("axis", ["width", "depth"])
def test_the_slopes_are_the_records_own(axis):
    record, name, _ = transfer_table.RUNS[axis]
    claim = json.loads((transfer_table.DOCS / record).read_text())["claims"][name]
    recorded = {
        b["setting"].replace("base_width=32 ", "").replace("base_depth=2 ", ""): b["slope"]
        for b in claim["best_lr"]
    }
    _, result = transfer_table.measured(axis)
    assert {t.setting for t in result} == set(recorded)
    for t in result:
        assert t.slope == pytest.approx(recorded[t.setting], abs=2e-3), t.setting


def test_transfers_reads_the_interval_against_the_band():
    assert transfer_table.verdict((0.0, -0.2, 0.2), 0.25) == "yes"
    assert transfer_table.verdict((-1.0, -1.2, -0.7), 0.25).startswith("no: it falls")
    assert transfer_table.verdict((0.6, 0.3, 0.9), 0.25).startswith("no: it rises")
    assert transfer_table.verdict((0.0, -0.3, 0.3), 0.25).startswith("not decided")


def test_the_page_opens_with_the_table_and_its_links_resolve():
    text = PAGE.read_text(encoding="utf-8")
    assert render(text) == text, "the generated table is stale: python -m depthlab_lab.docgen.tables"
    lines = text.splitlines()
    first = next(i for i, ln in enumerate(lines) if ln.startswith("| parametrization | across |"))
    assert first < 10, "the page opens with the table of what transfers"
    anchors = {_slug(ln.lstrip("#").replace("`", "")) for ln in lines if ln.startswith("#")}
    block = text.split("<!-- generated: transfer", 1)[1].split("<!-- end generated -->", 1)[0]
    links = re.findall(r"\]\(#([^)]+)\)", block)
    assert links and set(links) <= anchors, set(links) - anchors
    for param, axis in (("sp", "width"), ("mup", "width"), ("sp", "depth"), ("completep", "depth")):
        assert re.search(rf"^\| {param} \| {axis} \| [^|]+ \| [+-]\d\.\d\d \[", block, re.M), (param, axis)


def _interval(v) -> str:
    return f"{v[0]:+.2f} [{v[1]:+.2f}, {v[2]:+.2f}]"


def test_the_readme_quotes_the_registered_records():
    """README's transfer figures are the registered fresh-seed replication's and the registered
    coordinate check's, as the records give them (not an exploratory preset's)."""
    readme = " ".join((transfer_table.DOCS.parent / "README.md").read_text(encoding="utf-8").split())
    _, width = transfer_table.measured("width")
    by = {t.setting.split("param=")[-1]: t for t in width}
    assert f"slope {_interval(by['sp'].slope)} under SP" in readme
    assert f"costs {by['sp'].rows[-1].penalty[0]:.2f} nats at width 128" in readme
    assert f"Under muP it moved by {_interval(by['mup'].slope)}" in readme
    coord = json.loads((transfer_table.DOCS / "transfer-claims.json").read_text())["claims"]["coord-depth"]
    for param in ("sp", "completep"):
        i = transfer_table.mean_interval(coord["slope_last_per_seed"][f"pre {param}"]["stream@L rms"])
        assert _interval((i.mean, i.low, i.high)) in readme, param
    assert "-1.05 [-1.17, -0.93]" not in readme and "-0.09 [-0.20, +0.02]" not in readme


@pytest.mark.parametrize("slope", [(0, -0.2, 0.14), (0, -0.25, 0.25), (0, -0.76, 0.62), (0, -0.3, -0.1),
                                   (0, -1.21, -0.68), (0, 0.26, 0.74)])  # fmt: skip
def test_depthlab_transfer_reads_a_slope_as_this_page_does(slope):
    """The library's reading (what `depthlab transfer` and advise print) and this table's verdict are one
    rule over one band: the transfer claims' registered band."""
    import dataclasses

    from depthlab.study.transfer import BAND, reading, transfers
    from depthlab_lab.reproduce import REGISTRATIONS
    from tests.test_transfer import fake_runs

    assert {REGISTRATIONS[n].expectation["band"] for n in ("lr-transfer-depth", "width-transfer")} == {BAND}
    (t,) = transfers(fake_runs(lambda L: -2.5), "depth", 64)  # a sweep with no best at its edge
    t = dataclasses.replace(t, slope=slope)
    words = {"flat": "yes", "moves": "no", "not decided": "not decided"}[reading(t)]
    assert transfer_table.verdict(slope, BAND).startswith(words)

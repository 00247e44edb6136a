"""``depthlab reproduce all`` across sittings through its committed parts: each claim's whole result
written as it finishes, loaded instead of run when its key (code, registration, torch, threads) is
today's, run again when it is not or when the part is damaged; the page and the run record from loaded
parts are those of the sitting that computed them. Tiny fake claims stand in for the real ones."""

from __future__ import annotations

import json
import math
import os

import pytest

from depthlab.cli import main
from depthlab.errors import InputError
from depthlab.intervals import INCONCLUSIVE, Interval, log_interval, mean_interval
from depthlab_lab.docgen import reproductions as all_mod
from depthlab_lab.reproduce import REGISTRATIONS, REPRODUCTIONS, dry_run, parts, run_cache
from depthlab_lab.reproduce.registration import Registration
from depthlab_lab.reproduce.reproduction import (
    Check,
    Reproduction,
    effect_revised,
    log_revised,
    revised_unless_control,
    sanity_under_revision,
    seeded_check,
    with_revision,
)
from depthlab_lab.reproduce.shares import share_check, share_interval

pytestmark = pytest.mark.usefixtures("one_thread")

NAMES = ["fake-a", "fake-b"]
CALLS: dict[str, int] = {}
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16  # copied as written, never decoded


def every_kind_of_check() -> list[Check]:
    """One check of each kind a claim makes: intervals linear and on a log scale (one seed: infinite
    bounds), a share, p-values, revised results and rules, sanity reasons, a revision without a result."""
    revised_share = with_revision(
        seeded_check("share", "> 1", [1.0, 2.0, 3.0], at_least=1.0),
        seeded_check("share", "> 1", [1.0, 2.0], at_least=1.0),
        "a share of seeds",
    )
    return [
        seeded_check("loss", "> 1", [1.5, 1.7, 1.6], at_least=1.0),
        log_revised("ratio", "< 2", [0.5, 3.0, 1.2], at_most=2.0),
        seeded_check("one seed", "> 1", [2.0], at_least=1.0),
        seeded_check("one seed, log", "> 1", [2.0], at_least=1.0, scale="log"),
        share_check("diverged", "most seeds", [True, True, False], at_least=0.5),
        effect_revised("gap", "> 0", [0.05, 0.04, 0.06], 0.02, at_least=0.0),
        sanity_under_revision(seeded_check("moved", "> 0", [1.0, 1.1, 1.2], at_least=0.0), "seen first"),
        Check("holds", "by construction", "it does", True, sanity="holds by construction"),
        revised_unless_control(Check("close", "close", "0.01", True), False, "a side did not train", "ctrl"),
        revised_share,
        Check("noted", "x", "y", INCONCLUSIVE, revision="a note without a revised result"),
    ]


def _claim_a(quick=False, out_dir=None, scale="small"):
    """A fake claim with every kind of check, a table, a diverged run's NaN loss and a plot."""
    CALLS["fake-a"] = CALLS.get("fake-a", 0) + 1
    run_cache.TALLY.trained += 2  # as if it trained two runs through the cache
    os.makedirs(out_dir, exist_ok=True)
    plot = os.path.join(out_dir, "curve.png")
    with open(plot, "wb") as f:
        f.write(PNG)
    run = {"label": "r0", "config": {"train": {"seed": 0}}, "outcome": "diverged", "val_loss": math.nan}
    table = {"title": "A table", "columns": ["a", "b"], "rows": [["1", "2.5"]]}
    data = {"tables": [table], "runs": [run], "nested": {"x": [1, 2.5, None]}}
    return Reproduction("fake-a", data, every_kind_of_check(), plots=[plot], source="a fake source")


def _claim_b(quick=False, out_dir=None, scale="small"):
    """A fake claim with one check and no plot."""
    CALLS["fake-b"] = CALLS.get("fake-b", 0) + 1
    return Reproduction("fake-b", {"quick": quick}, [Check("b", "1", "1", True)], source="another")


@pytest.fixture
def fakes(monkeypatch, tmp_path):
    """The two fake claims registered (fake-a with a registration), the corpus's digest stood in for,
    a run cache folder in use, the calls counted from zero; returns the page's path."""
    monkeypatch.setitem(REPRODUCTIONS, "fake-a", _claim_a)
    monkeypatch.setitem(REPRODUCTIONS, "fake-b", _claim_b)
    registration = Registration("0123456789abcdef", {"x": 1}, {"small": {"seeds": [0, 1, 2]}})
    monkeypatch.setitem(REGISTRATIONS, "fake-a", registration)
    monkeypatch.setattr(parts, "corpus_digest", lambda: "corpus")
    CALLS.clear()
    with run_cache.using(str(tmp_path / "cache")):
        yield tmp_path / "docs" / "reproductions.md"


def _sitting(doc, names=NAMES, quick=False):
    return all_mod.run_all(
        quick=quick,
        out_dir=str(doc.parent.parent / "out"),
        doc=str(doc),
        names=names,
        ladder_db=str(doc.parent.parent / "ladder.sqlite"),
    )


def _same(a: Check, b: Check) -> bool:
    """Every field equal, a NaN p-value equal to a NaN one."""
    pa, pb = vars(a)["p"], vars(b)["p"]
    return vars(a) | {"p": 0} == vars(b) | {"p": 0} and (pa == pb or math.isnan(pa) and math.isnan(pb))


def _without_timing(text: str) -> list[str]:
    """The page without the lines that say when, how long and where from (this sitting or a part)."""
    timing = ("- date:", "- machine:", "- training runs:", "Command:")
    return [ln for ln in text.splitlines() if not ln.startswith(timing)]


def test_interval_check_and_reproduction_round_trip_every_field():
    for interval in (
        mean_interval([1.0, 2.0, 4.0]),
        mean_interval([3.0]),  # (-inf, inf)
        log_interval([0.5, 3.0]),
        log_interval([2.0]),  # [0, inf) on the original scale
        share_interval([True, False, True]),
    ):
        assert Interval.from_dict(json.loads(json.dumps(interval.to_dict()))) == interval
    checks = every_kind_of_check()
    kinds = {
        "log": any(c.interval and c.interval.scale == "log" for c in checks),
        "p": any(not math.isnan(c.p) for c in checks),
        "revised": any(c.revised and c.revised_bounds for c in checks),
        "revised_values": any(c.revised_values for c in checks),
        "sanity": any(c.sanity for c in checks) and any(c.revised_sanity for c in checks),
    }
    assert all(kinds.values()), kinds
    for c in checks:
        assert _same(Check.from_dict(json.loads(json.dumps(c.to_dict()))), c), c.claim
    r = _claim_b()
    assert Reproduction.from_dict(r.to_dict(), r.name, r.plots, r.source) == r


def test_a_second_sitting_loads_every_claim_from_its_part_and_gives_the_same_page(fakes, capsys):
    first = _sitting(fakes)
    folder = fakes.parent / "reproductions-parts"
    assert sorted(p.name for p in folder.glob("*.json")) == ["fake-a.json", "fake-b.json"]
    stored = json.loads((folder / "fake-a.json").read_text())
    assert (
        stored["plots"] == ["img/fake-a/curve.png"] and (folder / "img/fake-a/curve.png").read_bytes() == PNG
    )
    assert stored["cache"] == {"trained": 2, "loaded": 0} and stored["commit"] == run_cache.current_commit()
    assert stored["key"] == parts.digest(parts.key_inputs("fake-a", "small", False))
    read = parts.read(str(folder / "fake-a.json"), "fake-a").reproduction
    assert all(_same(a, b) for a, b in zip(read.checks, every_kind_of_check(), strict=True))
    assert json.dumps(read.data) == json.dumps(first.parts[0].data)  # NaN and all
    assert read.source == "a fake source" and read.plots == [str(folder / "img/fake-a/curve.png")]
    page, record = fakes.read_text(), (fakes.parent / "reproductions-record.json").read_text()
    commit = parts.short_commit(run_cache.current_commit())
    assert (
        f"Computed in this sitting (commit {commit}) and kept in its part `reproductions-parts/fake-a.json`"
        in page
    )
    capsys.readouterr()
    second = _sitting(fakes)
    err = capsys.readouterr().err
    assert CALLS == {"fake-a": 1, "fake-b": 1}, "a claim with a current part ran again"
    assert err.count("loaded from its committed part, computed at commit") == 2, err
    again = fakes.read_text()
    assert (fakes.parent / "reproductions-record.json").read_text() == record
    assert _without_timing(again) == _without_timing(page)
    assert "Loaded from its committed part `reproductions-parts/fake-a.json`: computed at commit" in again
    assert "computed 0 claims; 2 were loaded from their committed parts" in again
    assert "trained 2 runs and loaded 0 from the run cache at the sittings that computed them" in again
    assert (fakes.parent / "img" / "fake-a-curve.png").read_bytes() == PNG
    assert [c.to_dict() for c in second.checks] == [c.to_dict() for c in first.checks]


def test_a_changed_source_file_or_other_inputs_rerun_the_claim(fakes, monkeypatch, capsys):
    _sitting(fakes)
    assert "depthlab.intervals" in parts.claim_modules("fake-a")
    assert not any(m.startswith("depthlab.docgen") for m in parts.claim_modules("fake-a"))
    before = parts.module_digest

    def edited(module):
        return "0" * 16 if module == "depthlab.intervals" else before(module)

    monkeypatch.setattr(parts, "module_digest", edited)
    capsys.readouterr()
    _sitting(fakes)
    err = capsys.readouterr().err
    assert CALLS == {"fake-a": 2, "fake-b": 2}  # both claims decide through the intervals
    assert "is stale (depthlab.intervals changed); running it again" in err, err
    now = parts.key_inputs("fake-a", "small", False)
    for changed in (parts.key_inputs("fake-a", "small", True), parts.key_inputs("fake-b", "small", False)):
        assert parts.digest(changed) != parts.digest(now)
    monkeypatch.setitem(REGISTRATIONS, "fake-a", Registration("0123456789abcdef", {"x": 2}, {}))
    assert parts.changes(now, parts.key_inputs("fake-a", "small", False)) == "registration"


def test_a_damaged_part_reruns_with_one_warning_and_stays_until_replaced(fakes, monkeypatch, capsys):
    _sitting(fakes)
    folder = fakes.parent / "reproductions-parts"
    (folder / "fake-a.json").write_text("{not json")
    stored = json.loads((folder / "fake-b.json").read_text())
    del stored["result"]
    (folder / "fake-b.json").write_text(json.dumps(stored))
    capsys.readouterr()
    _sitting(fakes)
    err = capsys.readouterr().err
    assert CALLS == {"fake-a": 2, "fake-b": 2} and "Traceback" not in err
    assert err.count("is damaged (") == 2 and "is damaged (no result)" in err, err
    assert json.loads((folder / "fake-a.json").read_text())["name"] == "fake-a"  # replaced by a good one
    (folder / "img" / "fake-a" / "curve.png").unlink()  # a part whose plot is gone is damaged too
    assert "its plot img/fake-a/curve.png is missing" in parts.status(str(folder), "fake-a", {})[1]

    def broken(quick=False, out_dir=None, scale="small"):
        raise RuntimeError("a claim that raises")

    (folder / "fake-b.json").write_text("[]")
    monkeypatch.setitem(REPRODUCTIONS, "fake-b", broken)
    capsys.readouterr()
    _sitting(fakes, names=["fake-b"])
    err = capsys.readouterr().err
    assert "it raised, so no part is written" in err
    assert (folder / "fake-b.json").read_text() == "[]"  # never removed until a new part replaces it


def test_a_quick_sitting_never_replaces_a_registered_part(fakes, capsys):
    _sitting(fakes)
    folder = fakes.parent / "reproductions-parts"
    registered = (folder / "fake-b.json").read_text()
    _sitting(fakes, names=["fake-b"], quick=True)
    assert CALLS["fake-b"] == 2 and (folder / "fake-b.json").read_text() == registered
    assert "a --quick one does not replace it" in capsys.readouterr().err
    stored = json.loads(registered)
    stored["inputs"]["threads"] = 99  # edited by hand: the key no longer digests its inputs
    (folder / "fake-b.json").write_text(json.dumps(stored))
    assert "its key is not the digest of its inputs" in parts.status(str(folder), "fake-b", {})[1]


def test_the_plan_says_which_claims_have_a_current_part(fakes, capsys):
    _sitting(fakes)
    folder = str(fakes.parent / "reproductions-parts")
    os.remove(parts.path_of(folder, "fake-b"))
    capsys.readouterr()
    dry_run.print_plan(NAMES, "small", False, None, parts_dir=folder)
    lines = {ln.split()[0]: ln for ln in capsys.readouterr().out.splitlines() if ln.strip()}
    assert "part current (commit" in lines["fake-a"] and "nothing to train" in lines["fake-a"]
    assert lines["fake-b"].endswith("; part: no part")
    assert "1 of 2 claims current" in lines["parts"]
    assert CALLS == {"fake-a": 1, "fake-b": 2}  # the plan ran fake-b (it trains nothing), never fake-a


def test_parts_default_beside_the_page():
    assert all_mod.parts_of(None, None, "small") == os.path.join("docs", "reproductions-parts")
    assert all_mod.parts_of(None, None, "large") == os.path.join("docs", "reproductions-large-parts")
    assert all_mod.parts_of(None, "x/page.md", "small") == os.path.join("x", "page-parts")
    assert all_mod.parts_of("elsewhere", "x/page.md", "small") == "elsewhere"


@pytest.mark.parametrize(
    "where, needle",
    [
        ("FILE", "is a file, not a folder"),
        ("/proc/depthlab-parts", "--parts /proc/depthlab-parts"),
        ("/proc/self", "--parts /proc/self"),
    ],
)
def test_a_bad_parts_folder_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys, where, needle):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file").write_text("not a folder")
    folder = str(tmp_path / "file") if where == "FILE" else where
    code = main(["reproduce", "all", "--parts", folder, "--doc", str(tmp_path / "r.md")])
    out, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert needle in err and not (tmp_path / "r.md").exists()


def test_parts_is_refused_for_anything_but_all(capsys):
    assert main(["reproduce", "depth", "--parts", "x"]) == 2
    assert "--parts applies to 'all' only" in capsys.readouterr().err


def test_render_runs_nothing_and_says_which_parts_were_computed_under_other_code(fakes, monkeypatch, capsys):
    first = _sitting(fakes)
    record = (fakes.parent / "reproductions-record.json").read_text()
    before = parts.module_digest
    monkeypatch.setattr(
        parts, "module_digest", lambda m: "0" * 16 if m == "depthlab.intervals" else before(m)
    )
    monkeypatch.setattr(all_mod, "names_to_run", lambda registry, names=None, scale="small": NAMES)
    again = all_mod.render_all(str(fakes), ladder_db=str(fakes.parent.parent / "ladder.sqlite"))
    assert CALLS == {"fake-a": 1, "fake-b": 1}, "rendering ran a claim"
    assert (fakes.parent / "reproductions-record.json").read_text() == record
    assert [c.to_dict() for c in again.checks] == [c.to_dict() for c in first.checks]
    page = fakes.read_text()
    commit = parts.short_commit(run_cache.current_commit())
    line = next(ln for ln in page.splitlines() if ln.startswith("Command: `depthlab reproduce fake-a`"))
    assert f"computed at commit {commit}" in line and "Not rerun" in line and "depthlab.intervals" in line
    assert (
        "`depthlab reproduce all --render` (scale: small): every claim rendered from its committed part"
        in page
    )
    assert "- code since: 2 of 2 claims were computed under code" in page
    assert "depthlab.intervals changed since" in capsys.readouterr().err


def test_render_refuses_a_claim_without_a_part_and_writes_nothing(fakes, monkeypatch):
    _sitting(fakes, names=["fake-a"])
    page = fakes.read_text()
    monkeypatch.setattr(all_mod, "names_to_run", lambda registry, names=None, scale="small": NAMES)
    with pytest.raises(InputError, match=r"--render: no part to render .* fake-b \(no part\)"):
        all_mod.render_all(str(fakes), ladder_db=str(fakes.parent.parent / "ladder.sqlite"))
    assert fakes.read_text() == page and CALLS == {"fake-a": 1}


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["depth", "--render"], "--render applies to 'all' only"),
        (["all", "--render", "--quick"], "--quick does nothing with --render"),
        (["all", "--render", "--plan"], "--plan does nothing with --render"),
    ],
)
def test_render_flags_are_refused_where_they_do_nothing(argv, needle, capsys):
    assert main(["reproduce", *argv]) == 2
    assert needle in capsys.readouterr().err

"""docs/advise.md: advise's held-out score against the lookups under the registered rules, re-derived from
the committed run record and the registration file; the scoring itself on made-up runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from depthlab_lab import lab_file
from depthlab_lab.calibrate.heldout_depth import REGISTRATION
from depthlab_lab.docgen.advise_page import RECORD, registrations, render, score, verdict

ROOT = Path(__file__).resolve().parents[2]


def _p(h, advise, p, lookups):
    names = ("wrapping x lr", "wrapping x width x lr x warmup", "nearest runs")
    return {"config_hash": h, "run": h, "advise": advise, "p_trains": p, "lr_over_limit": 1.0,
            "lookups": dict(zip(names, lookups))}  # fmt: skip


def test_the_score_counts_hits_intervals_the_paired_difference_and_brier():
    predicted = [
        _p("a", "trains", 0.9, ("trains", "trains", "fails")),
        _p("b", "fails", 0.2, ("trains", "fails", "fails")),
        _p("c", "fails", 0.4, ("trains", "trains", "trains")),
        _p("d", "trains", 0.7, ("fails", "trains", "trains")),
    ]
    done = {"a": {"outcome": "trained"}, "b": {"outcome": "stalled"}, "c": {"outcome": "trained"}}
    s = score(predicted, done)
    assert s["runs"] == 3 and s["planned"] == 4
    assert s["by"]["advise"]["hits"] == 2 and s["by"]["always 'trains'"]["hits"] == 2
    assert s["by"]["advise"]["brier"] == pytest.approx((0.1**2 + 0.2**2 + 0.6**2) / 3)
    assert (
        s["by"]["wrapping x width x lr x warmup"]["hits"] == 3
        and s["best_lookup"] == "wrapping x width x lr x warmup"
    )
    assert s["paired"] == {"both": 2, "advise_only": 0, "lookup_only": 1, "neither": 0}
    assert verdict(s).startswith("not decided: 3 of 4")
    assert [p["config_hash"] for p, _ in s["misses"]] == ["c"]


def test_the_committed_page_is_what_the_record_and_registrations_give():
    regs = registrations()
    record = json.loads((ROOT / RECORD).read_text())
    hashes = {r["config_hash"] for reg in regs for r in reg["runs"] + reg["hf_runs"]}
    assert {r["config_hash"] for r in record["runs"]} <= hashes
    assert render(regs, record) == (ROOT / "docs" / "advise.md").read_text()


def test_the_verdict_names_each_registered_part_met_or_not():
    names = ("wrapping x lr", "wrapping x width x lr x warmup", "nearest runs")
    # 20 runs, r0-r9 and r19 trained: advise right on 19 (not r19), every lookup on 14
    predicted = [_p(f"r{i}", "trains" if i < 10 else "fails", 0.9 if i < 10 else 0.1,
                    ("trains",) * 3 if i < 15 else ("fails",) * 3) for i in range(20)]  # fmt: skip
    done = {f"r{i}": {"outcome": "trained" if i < 10 or i == 19 else "stalled"} for i in range(20)}
    s = score(predicted, done)
    assert s["by"]["advise"]["hits"] == 19 and max(s["by"][k]["hits"] for k in names) == 14
    v = verdict(s)
    assert v.startswith("passes: accuracy 95% (needs 90%): met; +25.0 points over the best lookup [")
    assert v.endswith("(needs +5): met; Brier below every lookup's: met")
    # lookups right on all but r0: as accurate as advise, with the same Brier score
    right = {h: ("trains" if d["outcome"] == "trained" else "fails",) * 3 for h, d in done.items()}
    right["r0"] = ("fails",) * 3
    predicted = [_p(p["config_hash"], p["advise"], p["p_trains"], right[p["config_hash"]]) for p in predicted]
    v = verdict(score(predicted, done))
    assert v.startswith("fails: accuracy 95% (needs 90%): met; +0.0 points over the best lookup [")
    assert v.endswith("(needs +5): not met; Brier not below every lookup's: not met")


def test_the_hugging_face_set_is_judged_against_always_trains_and_the_lookups_shown_beside():
    # 4 runs, 2 trained: advise right on 3, always 'trains' on 2, the lookups on 4
    predicted = [_p("a", "trains", 0.8, ("trains",) * 3), _p("b", "trains", 0.6, ("fails",) * 3),
                 _p("c", "fails", 0.3, ("fails",) * 3), _p("d", "trains", 0.7, ("trains",) * 3)]  # fmt: skip
    done = {h: {"outcome": o} for h, o in zip("abcd", ("trained", "stalled", "diverged", "trained"))}
    s = score(predicted, done)
    v = verdict(s, hf=True)
    assert v.startswith("passes: +25.0 points over always 'trains' [")
    assert v.endswith(
        "(the registered bar here: above it): met; the best lookup, not this set's registered bar, got 4 of 4"
    )
    # the grid's rule on the same runs fails: the lookups hit more
    assert verdict(s).startswith("fails: accuracy 75% (needs 90%): not met; -25.0 points")
    predicted[0] = _p("a", "fails", 0.2, ("trains",) * 3)
    assert verdict(score(predicted, done), hf=True).startswith("fails: +0.0 points over always 'trains' [")


def test_the_readme_quotes_advise_s_registered_held_out_score():
    """README's table is the one the record and the registrations give (every finished grid at depth, the
    Hugging Face set), its sentence on the seed the seed agreement's figures, and its sentence on a grid
    drawn where the calls differ that grid's registered reading, once its runs are done."""
    from depthlab_lab.calibrate.seed_agreement import agreement
    from depthlab_lab.docgen.advise_page import ORDINALS, differ_reading, grid_name, lead_bound, readme_table

    regs = registrations()
    record = json.loads((ROOT / RECORD).read_text())
    done = {r["config_hash"]: r for r in record["runs"]}
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme_table(regs, record)
    assert table.count("\n") > 3 and table in readme
    assert table.splitlines()[-1].startswith("| Hugging Face decoders | 12 |")
    assert readme_table() == table  # the committed record and registrations by default
    again = agreement(regs[2], regs[3], done)  # the third grid's configurations at another seed
    if again is not None:
        n, k = again["configs"], again["agree"]
        reach = "was within reach" if again["ceiling"] >= 0.9 else "was the most any call could reach"
        said = f"the seed alone changed {n - k} of those {n} outcomes, so {again['ceiling']:.0%} {reach}"
        assert said in " ".join(readme.split())
    placed = [i for i, reg in enumerate(regs) if not reg.get("drawn")]  # the grids placed by the limit
    first, last = (
        lead_bound(regs[0]),
        lead_bound(regs[placed[-1]]),
    )  # where the calls differed, before any run
    latest = grid_name(regs[placed[-1]], placed[-1]).split()[0]
    said = (f"differed on {first['differ']['nearest runs']} of {first['runs']} first-grid calls, "
            f"{last['differ']['nearest runs']} of {last['runs']} in the {latest}, a {100 * last['most']:.0f}-point "
            "lead at most")  # fmt: skip
    assert last["closest"] == "nearest runs" and said in " ".join(readme.split())
    for i in (i for i, reg in enumerate(regs) if reg.get("drawn")):
        r = differ_reading(regs[i], done)
        if r["runs"] < len(regs[i]["runs"]):
            continue
        (lo, hi), k, n = r["interval"], r["advise"], r["runs"]
        said = (f"In the {ORDINALS[i]} grid, drawn before its runs where the two calls differ, advise was right "
                f"on {k} of {n} ({k / n:.0%} [{lo:.0%}, {hi:.0%}])")  # fmt: skip
        assert said in " ".join(readme.split())


def test_the_library_ships_the_track_record_the_committed_record_gives():
    from depthlab.advise.track_record import PATH
    from depthlab_lab.calibrate.advise_track import build, committed

    shipped = json.loads(PATH.read_text())
    assert shipped == committed()
    if (
        shipped["runs"] == 56
    ):  # the first grid, whose runs have joined the atlas: an earlier predictor's calls
        assert shipped["earlier_predictor"] is True
    reg = json.loads(Path(lab_file(REGISTRATION)).read_text())
    record = json.loads((ROOT / RECORD).read_text())
    first = reg["runs"][0]["config_hash"]
    assert build(reg, {"runs": [r for r in record["runs"] if r["config_hash"] != first]}) is None


def test_the_track_record_moves_to_the_latest_finished_grid_and_says_whose_calls_it_holds():
    from depthlab_lab.calibrate.advise_track import committed
    from depthlab_lab.calibrate.heldout_depth import FIRST, SECOND

    regs = {g: json.loads(Path(lab_file(g.registration)).read_text()) for g in (FIRST, SECOND)}
    kept = json.loads((ROOT / RECORD).read_text())["runs"]
    first_done = [r for r in kept if r["config_hash"] in {p["config_hash"] for p in regs[FIRST]["runs"]}]
    # the second grid all done (made-up outcomes): the track record is the second grid's
    second_done = [{"config_hash": p["config_hash"], "study": SECOND.name, "outcome": "trained"}
                   for p in regs[SECOND]["runs"]]  # fmt: skip
    both = {"runs": first_done + second_done}
    track = committed(both, sources=set())
    assert track["runs"] == len(regs[SECOND]["runs"]) == 42 and track["earlier_predictor"] is False
    assert track["right"] == sum(p["advise"] == "trains" for p in regs[SECOND]["runs"])
    assert committed(both, sources={SECOND.name})["earlier_predictor"] is True
    # one run of the second grid missing: back to the first grid, marked as the atlas holds it or not
    short = {"runs": first_done + second_done[1:]}
    assert committed(short, sources={FIRST.name})["runs"] == 56
    assert committed(short, sources={FIRST.name})["earlier_predictor"] is True
    assert committed(short, sources=set())["earlier_predictor"] is False
    assert committed({"runs": []}, sources=set()) is None


def test_the_page_says_how_often_the_seed_alone_changed_an_outcome_once_both_grids_are_done():
    """Fed the third grid's recorded outcomes as the fourth's with two flipped: the page counts 40 of 42
    configurations that held, the ceiling 82 of 84, and lists the two that changed; with one of the
    fourth's runs missing it says nothing."""
    from depthlab_lab.calibrate.heldout_depth import FOURTH, THIRD
    from depthlab_lab.docgen.advise_page import _seed_lines

    regs = registrations()
    record = json.loads((ROOT / RECORD).read_text())
    mine = {r["config_hash"]: r for r in record["runs"] if r["study"] == THIRD.name}
    third, fourth = (next(r for r in regs if r["grid"] == g.grid) for g in (THIRD, FOURTH))
    again = []
    for i, (p, q) in enumerate(zip(third["runs"], fourth["runs"], strict=True)):
        row = {**mine[p["config_hash"]], "config_hash": q["config_hash"], "study": FOURTH.name}
        if i in (3, 17):
            row["outcome"] = "stalled" if row["outcome"] == "trained" else "trained"
        again.append(row)
    runs = [r for r in record["runs"] if r["study"] != FOURTH.name]
    section = "\n".join(_seed_lines(regs, {"runs": runs + again}))
    assert section.startswith("## How often the seed alone changes the outcome")
    assert "40 of 42 configurations ended the same way at both seeds" in section
    assert "none can score more than 82 (98%)" in section
    assert (
        section.count(" / ") >= 2
        and third["runs"][3]["run"] in section
        and third["runs"][17]["run"] in section
    )
    assert _seed_lines(regs, {"runs": runs + again[1:]}) == []


def test_the_held_out_reliability_table_counts_every_run_at_depth_once_in_its_band():
    """Each finished run at depth falls in one band (P = 1 in the top one); the shipped predictor's
    column holds the runs registered with the record the library ships now; the trained counts are
    the record's. A grid drawn where the calls differ is left out, and the text says so."""
    from depthlab.doctor.record import RECORD_PATH
    from depthlab_lab.calibrate.heldout_depth import digest
    from depthlab_lab.docgen.advise_page import BANDS, _reliability_lines

    everything = registrations()
    regs = [reg for reg in everything if not reg.get("drawn")]
    if len(regs) < len(everything):
        said = _reliability_lines(everything, json.loads((ROOT / RECORD).read_text()))
        assert (
            "placed by the limit (a grid drawn where the calls differ is no sample of such runs)" in said[2]
        )
        assert [line for line in said if line.startswith("|")] == [
            line
            for line in _reliability_lines(regs, json.loads((ROOT / RECORD).read_text()))
            if line.startswith("|")
        ]
    record = json.loads((ROOT / RECORD).read_text())
    done = {r["config_hash"]: r for r in record["runs"]}
    rows = [
        line.strip("|").split("|") for line in _reliability_lines(regs, record) if line[:3] in ("| 0", "| 1")
    ]
    assert len(rows) == len(BANDS) - 1
    finished = [p for reg in regs for p in reg["runs"] if p["config_hash"] in done]
    assert sum(int(r[1]) for r in rows) == len(finished)
    trained = sum(done[p["config_hash"]]["outcome"] == "trained" for p in finished)
    assert sum(int(r[3].split()[0]) for r in rows if r[3].strip() != "-") == trained
    shipped = digest(RECORD_PATH)
    now = [
        p
        for reg in regs
        if reg["record"]["sha256"] == shipped
        for p in reg["runs"]
        if p["config_hash"] in done
    ]
    assert sum(int(r[4]) for r in rows) == len(now) if now else {len(r) for r in rows} == {4}
    assert _reliability_lines(regs, {"runs": []}) == []
    # with none of the shipped predictor's runs done, its column is left out and the text says why
    others = [reg for reg in regs if reg["record"]["sha256"] != shipped]
    lines = _reliability_lines(others, record)
    assert "none of them was registered with the predictor advise ships now" in lines[2]
    assert all(line.count("|") == 5 for line in lines if line.startswith("|"))


def test_the_latest_registered_expectation_is_what_the_page_s_shape_folds_give():
    """A grid at depth registered since the fifth quotes the shape folds of the atlas it was registered with
    (the sixth: advise right on 197 of 224 runs at depth, the best single lookup 187; the seventh: 237 of
    266, nearest runs 230); while that atlas
    ships, the page, computed by the code, says the same."""
    import re

    from depthlab.doctor.atlas import ATLAS_PATH
    from depthlab_lab.calibrate.heldout_depth import FIFTH, GRIDS_AT_DEPTH, digest

    regs = [
        json.loads(Path(lab_file(g.registration)).read_text())
        for g in GRIDS_AT_DEPTH[GRIDS_AT_DEPTH.index(FIFTH) :]
    ]
    now = [r for r in regs if r["atlas"]["sha256"] == digest(ATLAS_PATH)]
    if not now:
        pytest.skip("the atlas has changed since the latest grid at depth was registered")
    hits, runs, best = re.search(
        r"(\d+) of (?:the \w+ grids' )?(\d+)(?: runs)? \(\d+%\), against (\d+) for", now[-1]["after"]
    ).groups()
    page = (ROOT / "docs" / "advise.md").read_text()
    assert re.search(
        rf"- in all: {hits} of {runs} \(.*\); the best single lookup on the same folds, [^:]+: {best}[,\n]",
        page,
    )


def test_the_pooled_summary_counts_finished_grids_only_and_says_it_is_not_a_registered_rule():
    from depthlab_lab.docgen.advise_page import _pooled_lines

    # grid A: advise right on 2 of 2, lookups on 1; grid B: advise 1 of 2, lookups 2; grid C unfinished
    a = [_p("a1", "trains", 0.9, ("fails",) * 3), _p("a2", "fails", 0.1, ("fails",) * 3)]
    b = [_p("b1", "trains", 0.6, ("fails",) * 3), _p("b2", "trains", 0.7, ("trains",) * 3)]
    c = [_p("c1", "trains", 0.9, ("trains",) * 3), _p("c2", "trains", 0.9, ("trains",) * 3)]
    outcomes = {"a1": "trained", "a2": "stalled", "b1": "diverged", "b2": "trained", "c1": "trained"}
    record = {"runs": [{"config_hash": h, "outcome": o} for h, o in outcomes.items()]}
    for p in a + b + c:  # a post run and a pre run in each grid
        p["run"] = f"wrap={'post' if p['config_hash'].endswith('1') else 'pre'} n_layers=8"
    regs = [{"runs": a}, {"runs": b}, {"runs": c}]
    lines = _pooled_lines(regs, record)
    line = lines[0]
    # by wrapping: post right on a1 and b1 missed (advise 1 of 2; every lookup 'fails' on both: 1 of 2);
    # the lookups tie on every run, so the column is the first of them
    assert "| wrapping | runs | advise right | wrapping x lr right |" in lines
    assert "| post | 2 | 1 (50%) | 1 (50%) |" in lines and "| pre | 2 | 2 (100%) | 2 (100%) |" in lines
    assert line.startswith("The 2 finished grids at depth together (4 runs,")
    assert "not a registered rule" in line and "advise 3 (75% [" in line and ") 3 (75% [" in line
    assert "a lead of +0.0 points" in line
    assert _pooled_lines(regs[:1] + regs[2:], record) == []


def test_the_lead_a_grid_can_show_is_bounded_by_where_the_calls_differ_before_any_run():
    """Counted from the registered calls alone; and whatever the runs' outcomes (every one of the 16 ways
    four runs can end), advise's lead over the best lookup, as the grid is scored, never exceeds it."""
    import itertools

    from depthlab_lab.docgen.advise_page import lead_bound

    predicted = [
        _p("a", "trains", 0.9, ("trains", "trains", "fails")),
        _p("b", "fails", 0.2, ("trains", "fails", "fails")),
        _p("c", "fails", 0.4, ("trains", "trains", "trains")),
        _p("d", "trains", 0.7, ("fails", "trains", "trains")),
    ]
    b = lead_bound({"runs": predicted})
    assert b["differ"] == {"wrapping x lr": 3, "wrapping x width x lr x warmup": 1, "nearest runs": 2}
    assert (b["closest"], b["most"], b["runs"]) == ("wrapping x width x lr x warmup", 0.25, 4)
    leads = []
    for ends in itertools.product(("trained", "diverged"), repeat=4):
        s = score(predicted, {p["config_hash"]: {"outcome": o} for p, o in zip(predicted, ends)})
        leads.append(s["by"]["advise"]["accuracy"] - s["by"][s["best_lookup"]]["accuracy"])
    assert max(leads) == pytest.approx(0.25) and all(lead <= b["most"] + 1e-12 for lead in leads)


def test_where_the_calls_differ_the_page_reads_which_to_trust_and_a_drawn_grid_is_kept_apart():
    from depthlab_lab.calibrate.advise_track import where_calls_differ
    from depthlab_lab.docgen.advise_page import _differ_lines, differ_reading

    # a grid placed by the limit: advise and the nearest runs differ on a1 (advise right) and a2 (wrong)
    a = [_p("a1", "trains", 0.6, ("fails",) * 3), _p("a2", "fails", 0.4, ("trains",) * 3),
         _p("a3", "trains", 0.9, ("trains",) * 3)]  # fmt: skip
    # a grid drawn where they differ: advise right on d1, d2 and d3, wrong on d4
    d = [_p(f"d{i}", "trains", 0.6, ("fails",) * 3) for i in range(1, 5)]
    outcomes = {"a1": "trained", "a2": "trained", "a3": "trained", "d1": "trained", "d2": "trained",
                "d3": "trained", "d4": "stalled"}  # fmt: skip
    record = {"runs": [{"config_hash": h, "outcome": o} for h, o in outcomes.items()]}
    for p in a + d:
        p["run"] = "wrap=post d_model=96 n_layers=8"
    placed, drawn = {"runs": a}, {"runs": d, "drawn": "every run is one where the calls differ"}
    done = {r["config_hash"]: r for r in record["runs"]}
    assert differ_reading(placed, done) == {
        "runs": 2,
        "advise": 1,
        "interval": pytest.approx((0.0945, 0.9055), abs=1e-3),
    }
    assert where_calls_differ([placed, drawn], record) == {"grids": 2, "runs": 6, "advise": 4}
    text = " ".join(_differ_lines([placed, drawn], record))
    assert "advise was right on 1 (50%" in text and "a summary after the fact" in text
    # 3 of 4 right: 75% [30%, 95%], not above 50%
    assert "Advise right on 3 of 4 (75% [30%, 95%]), the nearest runs on 1" in text and ": not met" in text
    part = {"runs": [p for p in d if p["config_hash"] != "d4"] + [d[-1]], "drawn": drawn["drawn"]}
    unfinished = {"runs": [r for r in record["runs"] if r["config_hash"] != "d4"]}
    assert "Not decided: 3 of 4 runs done" in " ".join(_differ_lines([placed, part], unfinished))
    assert _differ_lines([placed], record) == []  # no grid drawn where they differ: no section


def test_the_nearest_runs_call_is_the_registered_lookup_s():
    """advise's screen says where its call is not the nearest runs'; that call is the lookup's own."""
    from depthlab.doctor.atlas import Atlas
    from depthlab.doctor.predict import Query, p_trains
    from depthlab.doctor.record import load_record
    from depthlab_lab.calibrate.lookups import nearest_runs

    atlas = Atlas.load()
    fit, runs = load_record()["predictor"], list(atlas.runs)
    for r in runs[::97]:
        q = Query.of(r)
        assert p_trains(fit, None, q, atlas).nearest_call == nearest_runs(runs, q), r.shape()


def test_a_grid_drawn_where_the_calls_differ_holds_only_such_runs_as_registered():
    """Every registered prediction of a grid drawn where the calls differ has advise's call not the
    nearest runs'; per wrapping at most the design's count, one run per shape; every lr within 2x of
    its limit to the 3 significant figures the grid file keeps."""
    from collections import Counter

    from depthlab_lab.calibrate.advise_track import run_field
    from depthlab_lab.calibrate.heldout_depth import GRIDS_AT_DEPTH

    drawn = [g for g in GRIDS_AT_DEPTH if g.differ]
    assert drawn
    for g in drawn:
        reg = json.loads(Path(lab_file(g.registration)).read_text())
        assert reg["drawn"] and all(p["advise"] != p["lookups"]["nearest runs"] for p in reg["runs"])
        wraps = Counter(run_field(p["run"], "wrap") for p in reg["runs"])
        assert max(wraps.values()) <= g.differ
        shapes = Counter((run_field(p["run"], "wrap"), run_field(p["run"], "d_model"), run_field(p["run"], "n_layers"))
                         for p in reg["runs"])  # fmt: skip
        assert max(shapes.values()) == 1
        assert all(0.495 <= p["lr_over_limit"] <= 2.01 for p in reg["runs"])


def test_a_grid_restored_from_the_record_reads_back_as_the_record_holds_it(tmp_path, capsys):
    from depthlab_lab.docgen.advise_page import main, stored_runs

    doc, db = tmp_path / "advise.md", tmp_path / "a.sqlite"
    (tmp_path / "advise-heldout-runs.json").write_text((ROOT / RECORD).read_text())
    name = "advise-heldout-depth-7"
    argv = ["--restore", name, "--db", str(db), "--doc", str(doc)]
    assert main(argv) == 0 and "26 runs restored" in capsys.readouterr().out
    recorded = {
        r["config_hash"]: r for r in json.loads((ROOT / RECORD).read_text())["runs"] if r["study"] == name
    }
    assert stored_runs(str(db)) == recorded  # every field of every run, as the page reads it
    assert main(argv) == 0 and "0 runs restored" in capsys.readouterr().out  # kept, not written twice
    assert not doc.exists()


def test_bad_input_to_the_command_is_one_line_and_exit_2_with_nothing_written(tmp_path, capsys):
    from depthlab_lab.docgen.advise_page import main

    doc, db = tmp_path / "advise.md", tmp_path / "a.sqlite"
    not_sqlite = tmp_path / "notes.sqlite"
    not_sqlite.write_text("not a store\n")
    cases = [
        ["--restore", "advise-heldout-depth", "--db", str(db), "--doc", str(doc)],  # no record beside --doc
        [
            "--restore",
            "advise-heldout-depth",
            "--db",
            str(tmp_path),
            "--doc",
            str(ROOT / "docs" / "advise.md"),
        ],
        ["--db", str(not_sqlite), "--doc", str(doc)],
        ["--db", str(db), "--doc", str(tmp_path / "advise.txt")],
    ]
    for argv in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("python -m depthlab_lab.docgen.advise_page: error: ") and "--" in err, err
        assert err.count("\n") == 1 and "Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.sqlite"]
    assert not_sqlite.read_text() == "not a store\n"

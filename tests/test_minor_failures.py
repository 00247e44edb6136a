"""The smaller failure paths: each is one line and exit 2 (or a correct success), with nothing changed
on refusal; and probe --compare is de-duplicated and capped before any work."""

from __future__ import annotations

import os
import sqlite3
import subprocess

import pytest
from test_study_fakes import fake_study, fill_store

from depthlab.cli import main
from depthlab.cli.probe import MAX_COMPARE
from depthlab.config import NORMS
from depthlab.model.topology_base import Topology
from depthlab.model.wrappings import WRAPPINGS
from depthlab.probe import compare as compare_module
from depthlab.train.distributed import omp_threads

pytestmark = pytest.mark.usefixtures("one_thread")
TINY = ["--layers", "2", "--d-model", "16", "--heads", "2", "--max-len", "16"]
PROBE = ["probe", *TINY, "--batch-size", "2", "--seq-len", "8", "--perturbation", "0", "--no-context"]


def _refused(capsys, argv, *needles) -> str:
    try:
        code = main([str(a) for a in argv])
    except SystemExit as e:  # a usage error, from argparse
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, (argv, err)
    assert all(n in err for n in needles), err
    return err


def _probed(monkeypatch) -> list:
    """The configs compare() is given (the probes themselves are not run)."""
    seen = []

    def fake(configs, **_):
        seen.extend(configs)
        raise SystemExit(0)

    monkeypatch.setattr("depthlab.cli.probe.compare", fake)
    return seen


def test_compare_probes_each_combination_once(monkeypatch):
    seen = _probed(monkeypatch)
    with pytest.raises(SystemExit):
        main([*PROBE, "--compare", "--wrap", "pre,pre,post,pre"])
    assert [label for label, _ in seen] == ["wrap=pre", "wrap=post"]


def test_compare_drops_combinations_that_build_one_model(monkeypatch):
    seen = _probed(monkeypatch)
    with pytest.raises(SystemExit):
        main([*PROBE, "--compare", "--wrap", "pre,post", "--no-residual", "attn+ffn,ffn+attn"])
    assert len(seen) == 2


def test_compare_refuses_more_than_its_cap_before_any_work(capsys, monkeypatch):
    monkeypatch.setattr(compare_module, "probe_config", lambda *a, **k: pytest.fail("a probe ran"))
    many = ",".join(f"w{i}" for i in range(8000))
    _refused(
        capsys,
        [*PROBE, "--compare", "--wrap", many, "--norm", many],
        "64,000,000 combinations",
        "limit of 64",
    )


def test_the_cap_fits_every_single_stream_wrapping_under_every_norm_not_every_topology(capsys, monkeypatch):
    """docs/failure-paths.md: the twelve single-stream wrappings under the five norms fit the cap; with the
    residual topologies added the list is longer than the cap, and refused."""
    single = [n for n, c in WRAPPINGS.items() if not (isinstance(c, type) and issubclass(c, Topology))]
    assert len(single) * len(NORMS) <= MAX_COMPARE < len(WRAPPINGS) * len(NORMS)
    _probed(monkeypatch)
    try:  # within the cap; a wrapping that needs a real norm may still refuse --norm none
        main([*PROBE, "--compare", "--wrap", ",".join(single), "--norm", ",".join(NORMS)])
    except SystemExit:
        pass
    assert "combinations" not in capsys.readouterr().err
    everything = [*PROBE, "--compare", "--wrap", ",".join(WRAPPINGS), "--norm", ",".join(NORMS)]
    _refused(capsys, everything, f"{len(WRAPPINGS) * len(NORMS)} combinations", f"limit of {MAX_COMPARE}")


def test_flag_typos_get_a_suggestion_and_the_subcommand(capsys):
    err = _refused(capsys, ["train", "--warmpu", "5"], "did you mean --warmup?")
    assert err.startswith("depthlab train: error:")
    assert _refused(capsys, ["probe", "--layres", "3"], "--layers").startswith("depthlab probe:")
    _refused(capsys, ["trian"], "did you mean train?")


def test_an_empty_preset_is_refused(tmp_path, capsys):
    _refused(capsys, ["study", "--preset", "", "--db", tmp_path / "s.sqlite", "--dry-run"], "--preset ''")


@pytest.mark.parametrize(
    "argv,needle",
    [
        ([*PROBE, "--warmup", "5"], "--warmup needs --lr"),
        (["explain", *TINY, "--init-std", "0.1"], "--init-std does nothing with --init xavier"),
        (["report", "--run", "r", "--study", "x"], "--study names a study"),
        (["forecast", "--share", "0"], "--share 0.0"),
        (["forecast", "--share", "nan"], "--share nan"),
    ],
)
def test_flags_that_do_nothing_are_refused(capsys, argv, needle):
    _refused(capsys, argv, needle)


def test_init_std_with_an_init_that_reads_it_is_taken(capsys):
    assert main(["explain", *TINY, "--init", "normal", "--init-std", "0.1"]) == 0


@pytest.mark.parametrize("value", ["²", "٣", "x", "-1"])
def test_an_omp_num_threads_that_is_no_integer_is_ignored(monkeypatch, value):
    monkeypatch.setenv("OMP_NUM_THREADS", value)
    assert omp_threads() is None


def _store(tmp_path) -> str:
    db = str(tmp_path / "store" / "s.sqlite")
    os.makedirs(os.path.dirname(db))
    fill_store(db, fake_study(depths=(2,), warmups=(0,)))
    return db


def _bytes(db: str) -> dict:
    """The store's folder: file name -> bytes (SQLite's -shm index changes on any read: its name only)."""
    folder = os.path.dirname(db)
    return {
        n: None if n.endswith("-shm") else open(os.path.join(folder, n), "rb").read()
        for n in sorted(os.listdir(folder))
    }


@pytest.mark.parametrize("value", ["abc", -1, 2.5])
def test_a_schema_version_of_another_shape_is_refused_untouched(tmp_path, capsys, value):
    db = _store(tmp_path)
    with sqlite3.connect(db) as c:
        c.execute("DELETE FROM schema_version")
        c.execute("INSERT INTO schema_version VALUES (?, 0)", (value,))
    before = _bytes(db)
    _refused(capsys, ["report", "--db", db, "--out", tmp_path / "r"], "schema_version holds")
    _refused(capsys, ["study", "--preset", "smoke", "--db", db, "--no-report"], "schema_version holds")
    assert _bytes(db) == before


@pytest.mark.parametrize(
    "sql,needle",
    [
        ("UPDATE runs SET config_json = '[]'", "config_json is not a run's config"),
        ("UPDATE runs SET val_loss = 'abc'", "val_loss holds 'abc'"),
        ("UPDATE metrics SET loss = 'x'", "loss holds 'x'"),
        ("UPDATE study_runs SET axes_json = '3'", "axes_json is not an object"),
    ],
)
def test_store_rows_of_the_wrong_shape_are_refused_by_report(tmp_path, capsys, sql, needle):
    db = _store(tmp_path)
    with sqlite3.connect(db) as c:
        c.execute(sql)
    _refused(capsys, ["report", "--db", db, "--out", tmp_path / "r"], needle, "s.sqlite")


def test_a_store_missing_a_table_is_refused_before_anything_is_written(tmp_path, capsys):
    db = _store(tmp_path)
    with sqlite3.connect(db) as c:
        c.execute("DROP TABLE probe_layers")
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    before = _bytes(db)
    grid = tmp_path / "g.yaml"
    grid.write_text("name: fake\nmodel: {d_model: 16, n_heads: 2, n_layers: 2}\ntrain: {steps: 2}\n")
    _refused(capsys, ["study", "--grid", grid, "--db", db, "--no-report"], "probe_layers is missing")
    assert _bytes(db) == before


def test_a_dry_run_on_a_read_only_store_needs_no_no_report(tmp_path, capsys):
    db = _store(tmp_path)
    folder = os.path.dirname(db)
    os.chmod(folder, 0o555)  # the report folder beside the store cannot be made
    immutable = (
        os.geteuid() == 0 and subprocess.run(["chattr", "+i", folder], capture_output=True).returncode == 0
    )
    try:
        if os.access(folder, os.W_OK) and not immutable:
            pytest.skip("this user writes read-only folders and chattr is not available")
        code = main(["study", "--preset", "smoke", "--db", db, "--dry-run"])
        assert code == 0, capsys.readouterr().err
    finally:
        subprocess.run(["chattr", "-i", folder], capture_output=True)
        os.chmod(folder, 0o755)

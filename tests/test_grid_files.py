"""Grid files that are not sound grids are refused in one line, fast, the store untouched: not UTF-8,
repeated keys, alias bombs and self-referring aliases, deep nesting, huge files; a grid larger than the
run limit is refused unless confirmed, and a dry run prints the count first, then streams."""

from __future__ import annotations

import codecs
import time

import pytest

from depthlab import ConfigError, InputError
from depthlab.cli import main
from depthlab.study import StudyConfig
from depthlab.study.gridfile import MAX_BYTES, MAX_DEPTH, MAX_NODES, parse_grid_text

GOOD = "name: g\nmodel: {d_model: 16, n_heads: 2, max_len: 16}\ntrain: {steps: 2, seq_len: 8}\naxes:\n  n_layers: [2, 4]\n"
BOMB = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]\n" for i in range(8)
)


def _grid(tmp_path, content, name="g.yaml"):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


def _refused(capsys, tmp_path, grid, *needles, within=2.0):
    """The study command refuses ``grid`` in one stderr line, exit 2, within ``within`` s; no store."""
    db = tmp_path / "s.sqlite"
    start = time.perf_counter()
    code = main(["study", "--grid", str(grid), "--db", str(db), "--no-report"])
    took = time.perf_counter() - start
    out, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert all(n in err for n in needles), err
    assert out == "" and not db.exists()
    assert took < within, f"{took:.2f} s"
    return err


@pytest.mark.parametrize(
    "content, needle",
    [
        (bytes(range(256)) * 8, "NUL bytes"),
        (codecs.BOM_UTF16_LE + GOOD.encode("utf-16-le"), "is UTF-16 text; save it as UTF-8"),
        (GOOD.encode("utf-16"), "is UTF-16 text"),
        (GOOD.encode("utf-32"), "is UTF-32 text"),
        (b"name: caf\xe9\n", "is not UTF-8 text (byte 9 is 0xe9)"),
        (b"name: \xff\xfe\xfd\n", "is not UTF-8 text"),
    ],
)
def test_grid_files_that_are_not_utf8_are_refused(capsys, tmp_path, content, needle):
    _refused(capsys, tmp_path, _grid(tmp_path, content), needle)


@pytest.mark.parametrize(
    "name, content",
    [
        ("g.toml", 'name = "t"\n[model]\nd_model = 16\n[axes]\nn_layers = [2, 4]\n'),  # YAML reads one string
        ("g.yaml", "- n_layers: [2, 4]\n"),
        ("g.yaml", "# only a comment\n"),
    ],
)
def test_a_grid_file_that_is_no_mapping_is_refused_naming_the_file(capsys, tmp_path, name, content):
    _refused(capsys, tmp_path, _grid(tmp_path, content, name), f"grid file {tmp_path / name}", "YAML")


def test_a_utf8_byte_order_mark_is_fine(tmp_path):
    path = _grid(tmp_path, codecs.BOM_UTF8 + GOOD.encode())
    assert [s.model.n_layers for s in StudyConfig.from_yaml(str(path)).expand()] == [2, 4]


@pytest.mark.parametrize(
    "text, where",
    [
        ("axes:\n  n_layers: [2]\n  n_layers: [4]\n", "'n_layers' appears twice in one mapping (line 3)"),
        ("name: a\nname: b\n", "'name' appears twice"),
        ("model: {d_model: 16, d_model: 32}\n", "'d_model' appears twice"),
        ("axes:\n  wrapping:\n    - {wrap: pre, wrap: post}\n", "'wrap' appears twice"),
    ],
)
def test_a_repeated_key_is_refused_not_silently_dropped(capsys, tmp_path, text, where):
    _refused(capsys, tmp_path, _grid(tmp_path, text), where, "would be lost")


def test_merge_keys_may_be_overridden():
    d = parse_grid_text("base: &b {d_model: 16, n_heads: 2}\nmodel:\n  <<: *b\n  d_model: 32\n")
    assert d["model"] == {"d_model": 32, "n_heads": 2}


@pytest.mark.parametrize("where", ["description: *i\n", "axes:\n  seed: *i\n", "model: {residual: *i}\n"])
def test_an_alias_bomb_is_refused_in_well_under_a_second(capsys, tmp_path, where):
    _refused(capsys, tmp_path, _grid(tmp_path, BOMB + where), f"more than {MAX_NODES:,} values", within=0.5)


def test_an_alias_inside_its_own_value_is_refused(capsys, tmp_path):
    _refused(
        capsys, tmp_path, _grid(tmp_path, "axes: &x {n_layers: *x}\n"), "*x names a value that contains it"
    )


def test_aliases_within_the_bound_still_work(tmp_path):
    text = GOOD.replace("axes:\n  n_layers: [2, 4]\n", "depths: &d [2, 4]\naxes:\n  n_layers: *d\n")
    with pytest.raises(Exception, match="depths"):  # an unknown top key is still refused by name
        StudyConfig.from_yaml(str(_grid(tmp_path, text)))
    ok = "model: &m {d_model: 16, n_heads: 2}\naxes:\n  wrapping:\n    - *m\n    - {<<: *m, wrap: post}\n"
    assert len(StudyConfig.from_yaml(str(_grid(tmp_path, ok))).expand()) == 2


@pytest.mark.parametrize(
    "text", ["[" * 100_000 + "]" * 100_000, "a:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 60))]
)
def test_deep_nesting_is_refused_fast(capsys, tmp_path, text):
    _refused(capsys, tmp_path, _grid(tmp_path, text), "grid file", within=1.0)
    with pytest.raises(InputError, match="nest|not valid YAML"):
        parse_grid_text(text)
    assert MAX_DEPTH < 60


def test_a_huge_grid_file_is_refused_by_its_size(capsys, tmp_path):
    _refused(capsys, tmp_path, _grid(tmp_path, "# " + "x" * MAX_BYTES + "\n"), f"at most {MAX_BYTES:,}")


def _big_grid(tmp_path, n=1000):
    axes = f"  seed: [{', '.join(map(str, range(n)))}]\n  warmup: [{', '.join(map(str, range(n)))}]\n"
    return _grid(tmp_path, GOOD.replace("  n_layers: [2, 4]\n", axes), "big.yaml")


def test_a_grid_over_the_run_limit_is_refused_before_expanding(capsys, tmp_path):
    err = _refused(
        capsys, tmp_path, _big_grid(tmp_path), "1,000,000 runs (1000 x 1000)", "--max-runs 1000000"
    )
    assert "10,000" in err


def test_max_runs_confirms_a_larger_grid_and_lowers_the_limit(capsys, tmp_path):
    grid, db = _grid(tmp_path, GOOD), tmp_path / "s.sqlite"
    assert main(["study", "--grid", str(grid), "--db", str(db), "--max-runs", "1", "--no-report"]) == 2
    assert "2 runs (2), more than the limit of 1" in capsys.readouterr().err and not db.exists()
    assert StudyConfig.from_yaml(str(grid), max_runs=2).count() == 2
    with pytest.raises(InputError, match="max_runs=2"):
        StudyConfig.from_dict({"axes": {"seed": [0, 1]}}, default_name="x", max_runs=1)


def test_the_run_limit_refusal_names_the_limit_in_the_callers_words(capsys, tmp_path):
    """The command line reads --max-runs alone (it read '(or max_runs=2)' too); a limit below 1 is
    refused as the mistyped flag it is, not as a grid 'more than the limit of -5'."""
    grid, db = _grid(tmp_path, GOOD), tmp_path / "s.sqlite"
    assert main(["study", "--grid", str(grid), "--db", str(db), "--max-runs", "1", "--no-report"]) == 2
    err = capsys.readouterr().err
    assert "pass --max-runs 2 to run" in err and "max_runs=" not in err
    for bad in ("0", "-5"):
        for source in (["--grid", str(grid)], ["--preset", "smoke"]):
            assert main(["study", *source, "--db", str(db), "--max-runs", bad, "--dry-run"]) == 2
            out, err = capsys.readouterr()
            assert err == f"depthlab study: error: --max-runs {bad} is not allowed: an integer >= 1\n"
            assert out == "" and not db.exists()
    with pytest.raises(ConfigError, match=r"max_runs=0 is not allowed: an integer >= 1"):
        StudyConfig.from_dict({"axes": {"seed": [0, 1]}}, default_name="x", max_runs=0)


def test_a_dry_run_over_the_run_limit_lists_nothing(capsys, tmp_path):
    """A million-run grid: its dry run says the count and refuses the listing (it would print for hours)."""
    grid, db = _big_grid(tmp_path), tmp_path / "s.sqlite"
    start = time.perf_counter()
    assert main(["study", "--grid", str(grid), "--db", str(db), "--dry-run"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "1,000,000 runs (1000 x 1000)" in err
    assert "--max-runs 1000000" in err and time.perf_counter() - start < 10 and not db.exists()


def test_a_dry_run_prints_the_count_first_then_streams(capsys, tmp_path):
    """A million-run grid confirmed by --max-runs: the count is the first line, and the first runs follow
    at once (the grid is built one run at a time, not expanded first)."""
    import subprocess
    import sys

    grid, db = _big_grid(tmp_path), tmp_path / "s.sqlite"
    cmd = [sys.executable, "-m", "depthlab", "study", "--grid", str(grid), "--db", str(db), "--dry-run"]
    cmd += ["--max-runs", "1000000"]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = [proc.stdout.readline() for _ in range(4)]
        took = time.perf_counter() - start
    finally:
        proc.kill()
        proc.communicate()
    assert first[0].startswith("study 'g': 1,000,000 runs (1000 x 1000), store"), first
    assert first[1].split()[0] == "1" and "seed=0 warmup=0" in first[1]
    assert "seed=0 warmup=1" in first[2]
    assert took < 30, f"the first runs came after {took:.1f} s"
    assert not db.exists()


def test_a_bad_combination_in_a_dry_run_stops_it_with_one_line(capsys, tmp_path):
    grid = _grid(tmp_path, GOOD.replace("n_layers: [2, 4]", "seed: [0, 99999999999999999999999]"))
    assert main(["study", "--grid", str(grid), "--db", str(tmp_path / "s.sqlite"), "--dry-run"]) == 2
    out, err = capsys.readouterr()
    assert out.splitlines()[0].startswith("study 'g': 2 runs") and "seed=0" in out
    assert err.count("\n") == 1 and "seed=99999999999999999999999 is not allowed" in err


def test_a_seed_axis_beyond_64_bits_is_refused_by_the_real_run(capsys, tmp_path):
    grid = _grid(tmp_path, GOOD.replace("n_layers: [2, 4]", "seed: [99999999999999999999999]"))
    _refused(capsys, tmp_path, grid, "seed=99999999999999999999999 is not allowed")

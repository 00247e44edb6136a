"""depthlab coord: the coordinate check's measurements, fits, trends, figures and bad input."""

from __future__ import annotations

import json

import pytest

from depthlab.cli import main
from depthlab.errors import ConfigError, InputError, spoken_as_flags
from depthlab.intervals import mean_interval
from depthlab.probe.coord import CoordResult, CoordSpec, coord_check, format_coord
from depthlab.probe.coord_plot import coord_figure, coord_vs_size_figure

pytestmark = pytest.mark.usefixtures("one_thread")


def tiny(**kw) -> CoordSpec:
    base = dict(axis="depth", sizes=(2, 8, 32), fixed=16, wraps=("pre",), params=("sp", "completep"))
    return CoordSpec(**{**base, "steps": 2, "seeds": (0, 1), "batch_size": 4, "seq_len": 16, **kw})


@pytest.fixture(scope="module")
def result() -> CoordResult:
    return coord_check(tiny())


def test_every_module_every_step_is_measured(result):
    for setting in (("pre", "sp"), ("pre", "completep")):
        modules = result.values[setting]
        assert set(modules) == {"embedding", "attn", "ffn", "stream@L/4", "stream@L/2", "stream@L", "logits"}
        for table in modules.values():
            assert len(table) == 3 and all(
                len(seeds) == 2 and len(s[0]) == 2 for seeds in [table[0]] for s in [seeds]
            )


def test_completep_keeps_the_last_stream_flatter_than_sp_at_init(result):
    """Pre-LN's stream variance grows with depth under SP (each branch adds O(1)); CompleteP's 1/L
    branches keep it bounded."""
    sp = result.slope("pre", "sp", "stream@L", 1, rms=True)
    cp = result.slope("pre", "completep", "stream@L", 1, rms=True)
    assert sp.mean > 0.2 and cp.mean < sp.mean - 0.15


def test_verdicts():
    r = CoordResult(tiny())
    assert r.trend(mean_interval([0.01, -0.02, 0.03])) == "flat"
    assert r.trend(mean_interval([0.5, 0.6, 0.55])) == "grows"
    assert r.trend(mean_interval([-0.5, -0.6, -0.55])) == "shrinks"
    assert r.trend(mean_interval([-0.5, 0.6, 0.05])) == "unclear"
    assert r.trend(None) == "n/a"


def test_json_table_and_figures(result):
    d = json.loads(json.dumps(result.to_dict()))
    assert d["spec"]["sizes"] == [2, 8, 32] and len(d["settings"]) == 2
    entry = d["settings"][1]["modules"]["stream@L"]
    assert len(entry["slopes"]) == 2 and len(entry["rms_slopes"]) == 2 and entry["trends"][0]
    text = format_coord(result)
    assert "completep" in text and "stream@L" in text and "95% interval" in text
    assert coord_figure(result, "pre", "sp").axes and coord_vs_size_figure(result).axes


@pytest.mark.parametrize(
    "kw",
    [
        dict(sizes=(4,)),
        dict(sizes=(4, 4)),
        dict(steps=0),
        dict(seeds=()),
        dict(seeds=(0,)),  # no interval over one seed
        dict(seeds=(3, 3)),
        dict(axis="height"),
        dict(lr=0.0),
        dict(lr=float("nan")),
        dict(batch_size=0),
    ],
)
def test_bad_specs_are_input_errors(kw):
    with pytest.raises((InputError, ConfigError)):
        tiny(**kw)


def test_python_callers_read_their_keywords():
    with pytest.raises(InputError, match=r"^seeds \(0,\): at least 2 different seeds"):
        tiny(seeds=(0,))
    with pytest.raises(InputError, match=r"^batch_size 0: at least 1"):
        tiny(batch_size=0)
    with spoken_as_flags(), pytest.raises(InputError, match=r"^--steps 0: at least 1"):
        tiny(steps=0)


@pytest.mark.parametrize(
    "argv",
    [
        ["--widths", "64", "--depth", "2"],  # one width: no slope
        ["--depths", "2,4", "--steps", "0"],
        ["--depths", "2,4", "--wrap", "deepnorm", "--param", "completep"],  # refused by the wrapping
        ["--depths", "2,4", "--widths", "32,64"],
        ["--depths", "2,x"],
        ["--depths", "2,4", "--param", "mu"],
        ["--depths", "2,4", "--lr", "-1"],
        ["--depths", "2,4", "--seq-len", "1000"],
        ["--depths", "2,4", "--depth", "3"],  # the swept axis's fixed size does nothing
        ["--widths", "32,64", "--width", "32"],
        ["--depths", "2,4", "--seeds", "1"],  # no interval over one seed
        ["--depths", "2,4", "--width", "0"],
    ],
)
def test_bad_input_is_one_line_exit_2(argv, capsys):
    assert main(["coord", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error" in err[0]


def test_cli_writes_json_and_figures(tmp_path, capsys):
    argv = ["coord", "--widths", "16,32", "--depth", "2", "--param", "sp,mup", "--steps", "2", "--seeds", "2"]
    argv += [
        "--batch-size",
        "2",
        "--seq-len",
        "8",
        "--json",
        str(tmp_path / "c.json"),
        "--plot",
        str(tmp_path),
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "over width 16,32 at depth 2" in out and "mup" in out
    assert json.loads((tmp_path / "c.json").read_text())["spec"]["axis"] == "width"
    assert (tmp_path / "coord-width-pre-mup.png").stat().st_size > 0
    assert (tmp_path / "coord-width-activations.png").stat().st_size > 0


def test_a_refused_size_is_named_by_the_flag_that_set_it(capsys):
    assert main(["coord", "--depths", "2,4", "--width", "30"]) == 2
    assert capsys.readouterr().err.startswith(
        "depthlab coord: error: --width 30 is not allowed: a multiple of"
    )
    assert main(["coord", "--widths", "30,64"]) == 2
    assert capsys.readouterr().err.startswith("depthlab coord: error: --widths 30 is not allowed")


@pytest.mark.parametrize(
    "argv,line",
    [
        (["--widths", "30,64"], "--widths 30 is not allowed: a multiple of the 4 heads (set by --heads)"),
        (
            ["--depths", "2,4", "--width", "30"],
            "--width 30 is not allowed: a multiple of the 4 heads (set by --heads)",
        ),
        (
            ["--depths", "2,4", "--heads", "3"],
            "--heads 3 is not allowed: a divisor of the default --width 128 (ask for 2 or 4)",
        ),
        (
            ["--widths", "32,64", "--heads", "3"],
            "--widths 32 is not allowed: a multiple of the 3 heads (set by --heads)",
        ),
        (
            ["--depths", "2,4", "--heads", str(10**23)],
            f"--heads {10**23} is not allowed: a divisor of the default --width 128 (ask for 128)",
        ),
    ],
)
def test_a_width_the_heads_do_not_split_names_coords_own_flags(argv, line, capsys):
    """coord has no config file and no d_head: the line names its --heads (it pointed to a config file)."""
    assert main(["coord", *argv]) == 2
    err = capsys.readouterr().err
    assert err == f"depthlab coord: error: {line}\n" and "config file" not in err

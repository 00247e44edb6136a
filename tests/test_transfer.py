"""depthlab transfer: best lr per size, edge flags, the slope, the extrapolation, the penalty, the presets."""

from __future__ import annotations

import dataclasses
import math
import random
import textwrap
import types

import pytest

from depthlab.advise import target
from depthlab.cli import main
from depthlab.errors import ConfigError
from depthlab.study.presets import preset
from depthlab.study.transfer import bound_side, reading, runs_at, seeds_to_halve, sizes_to_halve, transfers
from depthlab.study.transfer_text import format_transfer, mismatch, slope_text, unbuildable_width

SWEEP = [10 ** (-4 + k / 2) for k in range(7)]  # 1e-4 .. 1e-1 in half decades


def fake_runs(centre, sizes=(2, 8, 32), seeds=(0, 1, 2), field="n_layers", shift=0.05) -> list[dict]:
    """Runs whose loss is a parabola in log10 lr around ``centre(size) + shift * (seed - 1)``."""
    runs = []
    for size in sizes:
        for seed in seeds:
            for lr in SWEEP:
                c = centre(size) + shift * (seed - 1)
                loss = 2.0 + (math.log10(lr) - c) ** 2 + 0.01 * seed
                model = {"n_layers": 4, "d_model": 32, field: size}
                runs.append(
                    {
                        "status": "done",
                        "config": {"model": model, "train": {"lr": lr, "seed": seed}},
                        "axes": {"wrap": "pre", field: size, "lr": lr, "seed": seed},
                        "val_loss": loss,
                        "outcome": "trained",
                        "metrics": [{"step": 1, "loss": 5.5}],
                    }
                )
    return runs


def test_the_slope_the_extrapolation_and_the_penalty_are_recovered():
    """Best lr = 10^(-2 - 0.5 log10 depth): slope -0.5; at depth 128, 10^-3.05."""
    (t,) = transfers(fake_runs(lambda L: -2 - 0.5 * math.log10(L)), "depth", 128)
    assert t.slope[0] == pytest.approx(-0.5, abs=1e-6) and t.slope[1] < -0.5 < t.slope[2]
    assert not t.censored
    assert [r.size for r in t.rows] == [2, 8, 32]
    assert t.rows[0].best_lr[0] == pytest.approx(10 ** (-2 - 0.5 * math.log10(2)), rel=1e-6)
    assert t.target_lr[0] == pytest.approx(10 ** (-2 - 0.5 * math.log10(128)), rel=1e-6)
    assert t.rows[0].penalty is None
    # the lr tuned at depth 2 (the best swept there, 1e-2... 10^-2.15 -> 10^-2) at depth 32 (best 10^-2.75)
    assert t.rows[2].penalty[0] > t.rows[1].penalty[0] > 0
    assert t.seeds_to_halve == seeds_to_halve(3) and t.seeds_to_halve > 3


def test_a_flat_best_lr_has_a_slope_of_zero_and_no_penalty():
    (t,) = transfers(fake_runs(lambda L: -2.5), "depth", 64)
    assert t.slope[0] == pytest.approx(0.0, abs=1e-9)
    assert all(r.penalty[0] == pytest.approx(0.0) for r in t.rows[1:])


def test_a_best_at_the_edge_of_the_sweep_makes_the_slope_a_bound():
    """Depth 2's best is the largest lr swept (0.1): its true best may lie above, which can only lower
    the slope and the lr fitted at 64: both are upper bounds, said so, with no interval and no seeds."""
    (t,) = transfers(fake_runs(lambda L: -1 if L == 2 else -2), "depth", 64)
    assert t.rows[0].at_edge and t.censored and [r.edge for r in t.rows] == [1, 0, 0]
    assert reading(t) == "at most" and bound_side(t, 64) == -1 and t.to_dict()["reading"] == "at most"
    assert t.seeds_to_halve is None and t.sizes_to_halve is None
    text = format_transfer(t)
    assert (
        f"log depth: {t.slope[0]:+.2f} or less: a bound, not an estimate (the best lr at depth 2 is the "
        "largest lr swept, 0.1: the true best may lie beyond)" in text
    )
    assert (
        f"best lr at depth 64 on the fitted line: {t.target_lr[0]:.3g} or less, a bound, not an estimate"
        in text
    )
    assert "would halve" not in text and "an estimate needs lrs swept beyond that edge" in text


@pytest.mark.parametrize(
    "centre, side",
    [
        (lambda L: -1 if L == 2 else -2, -1),  # the smallest size above the sweep: lowers the slope
        (lambda L: -4.5 if L == 32 else -2.5, -1),  # the largest size below it: lowers it too
        (lambda L: -1 if L == 32 else -2.5, 1),  # the largest above: raises it
        (lambda L: -1 if L in (2, 32) else -2.5, 0),  # both ends above: either way
    ],
)
def test_the_bounds_side_is_where_moving_the_edge_bests_beyond_the_sweep_takes_the_fit(centre, side):
    """The reference: move each edge size's log best lr half a decade beyond its edge and refit."""
    (t,) = transfers(fake_runs(centre), "depth", 64)
    assert bound_side(t) == side

    def fitted(at, moves):
        xs = [math.log10(r.size) for r in t.rows]
        ys = [math.log10(r.best_lr[0]) + 0.5 * e * r.edge for r, e in zip(t.rows, moves)]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
        return b if at is None else my + b * (math.log10(at) - mx)

    for at in (None, 64):
        base = fitted(at, [0, 0, 0])
        one_by_one = {
            (fitted(at, [int(i == j) for j in range(3)]) > base) for i, r in enumerate(t.rows) if r.edge
        }
        want = 0 if len(one_by_one) == 2 else (1 if one_by_one.pop() else -1)
        assert bound_side(t, at) == want


def test_a_best_at_every_edge_shows_no_interval_and_no_seeds_advice():
    """Every depth's best above the sweep: the fitted slope (0, over seeds that all agree) is neither an
    estimate nor a bound, and more seeds would not change that."""
    (t,) = transfers(fake_runs(lambda L: -0.5), "depth", 64)
    assert all(r.edge == 1 for r in t.rows) and reading(t) == "unknown"
    text = format_transfer(t)
    assert "[+0.00, +0.00]" not in text and "would halve" not in text
    assert (
        "log depth: unknown, not even a bound (the best lr at depth 2, 8, 32 is the largest lr swept, 0.1"
        in text
    )
    assert "best lr at depth 64 on the fitted line: unknown, not even a bound" in text


def test_a_study_cut_short_leaves_out_what_it_cannot_say():
    """Depth 32 has runs at every lr, but no seed at all of them: its curve is left out."""
    runs = [r for r in fake_runs(lambda L: -2.5) if r["axes"]["n_layers"] != 32]
    deep = fake_runs(lambda L: -2.5, sizes=(32,), seeds=(0, 1))
    runs += [r for r in deep if (r["axes"]["lr"] < 1e-2) == (r["axes"]["seed"] == 0)]
    (t,) = transfers(runs, "depth", 64)
    assert [r.size for r in t.rows] == [2, 8]


def test_across_width():
    (t,) = transfers(
        fake_runs(lambda w: -1.5 - math.log10(w / 32), (32, 64, 128), field="d_model"), "width", 256
    )
    assert t.axis == "width" and t.slope[0] == pytest.approx(-1.0, abs=1e-6)


def test_seeds_to_halve():
    assert seeds_to_halve(1) is None
    # t_{n-1} / sqrt(n) halves between 3 seeds (4.30 / 1.73 = 2.48) and 8 (2.36 / 2.83 = 0.84)
    assert 5 <= seeds_to_halve(3) <= 8


def test_sizes_to_halve_continue_the_sweeps_spacing():
    assert sizes_to_halve([2, 4, 8]) == (16, 32)  # equal steps d: sum (x - xbar)^2 = 2 d^2 -> 10 d^2
    assert sizes_to_halve([2, 8, 32]) == (128, 512)
    assert sizes_to_halve([4]) is None and sizes_to_halve([4, 4]) is None
    added = sizes_to_halve([2, 3, 8])  # irregular: the mean ratio between neighbours, (8 / 2)^(1/2) = 2
    assert added[:2] == (16, 32) and list(added) == sorted(set(added))

    def sxx(sizes):
        xs = [math.log10(v) for v in sizes]
        return sum((x - sum(xs) / len(xs)) ** 2 for x in xs)

    for sizes in ([2, 4, 8], [2, 3, 8], [32, 64, 128, 256], [2, 8]):
        added = list(sizes_to_halve(sizes))
        assert sxx(sizes + added) >= 4 * sxx(sizes) > sxx(sizes + added[:-1])  # the fewest that do


def test_the_added_sizes_halve_the_slopes_spread_in_a_simulation():
    """Each seed's best lr on a line plus independent scatter: the per-seed slopes' spread over the sizes
    with the added ones is at most half of it over the sizes swept (sqrt(2 / 10) = 0.45 here)."""
    rng = random.Random(0)

    def spread(sizes):
        xs = [math.log10(v) for v in sizes]
        mx = sum(xs) / len(xs)
        slopes = []
        for _ in range(4000):
            ys = [-2 - 0.5 * x + rng.gauss(0, 0.2) for x in xs]
            my = sum(ys) / len(ys)
            slopes.append(sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs))
        mean = sum(slopes) / len(slopes)
        return math.sqrt(sum((b - mean) ** 2 for b in slopes) / (len(slopes) - 1))

    ratio = spread([2, 4, 8, *sizes_to_halve([2, 4, 8])]) / spread([2, 4, 8])
    assert 0.40 < ratio <= 0.5


def test_the_output_says_how_many_sizes_would_halve_the_interval_and_its_assumption():
    (t,) = transfers(fake_runs(lambda L: -2 - 0.5 * math.log10(L)), "depth", 128)
    assert t.sizes_to_halve == (128, 512) and t.to_dict()["sizes_to_halve"] == (128, 512)
    text = format_transfer(t)
    assert "or 2 more depths (128, 512: x4 apart beyond the largest, as the sweep is spaced)" in text
    assert "at the same 3 seeds" in text and "scatters as much" in text
    (w,) = transfers(fake_runs(lambda w: -1.5, (32, 64, 128), field="d_model"), "width", 256)
    assert w.sizes_to_halve == (256, 512) and "2 more widths (256, 512" in format_transfer(w)
    (one,) = transfers(
        fake_runs(lambda w: -1.5 - 0.5 * math.log10(w), (32, 64), field="d_model"), "width", 256
    )
    assert one.sizes_to_halve == (128,) and "or 1 more width (128: x2 apart" in format_transfer(one)


def test_a_question_along_the_axis_the_study_did_not_sweep_names_the_study_that_would_answer_it():
    shape = {"widths": [32], "depths": [2, 4], "steps": [40], "batch_size": [8], "seq_len": [32]}
    assert mismatch("width", shape, None, 2) == (
        "this study sweeps depth (2, 4 layers at width 32); --to-width needs a study that sweeps width: "
        "depthlab study --preset width-transfer-quick --depth 2"
    )
    wide = dict(shape, widths=[32, 64], depths=[2])
    assert mismatch("depth", wide, 32, None).startswith(
        "this study sweeps width (d_model 32, 64 at depth 2); "
    )
    assert "--preset depth-transfer-quick --width 32" in mismatch("depth", wide, 32, None)
    one = dict(shape, depths=[2])
    assert mismatch("depth", one, None, None).startswith("this study sweeps neither depth nor width (")
    assert mismatch("depth", shape, 32, None) is None and "not 64" in mismatch("depth", shape, 64, None)
    deep = mismatch("width", dict(wide), None, 4)
    assert "ran at depth 2, not 4" in deep and "1/width" not in deep


def test_a_study_that_sweeps_both_answers_at_the_users_own_width():
    runs = fake_runs(lambda L: -2.5) + [
        dict(r, config=dict(r["config"], model=dict(r["config"]["model"], d_model=64)))
        for r in fake_runs(lambda L: -2 - 0.5 * math.log10(L))
    ]
    shape = {"widths": [32, 64], "depths": [2, 8, 32]}
    assert mismatch("depth", shape, 64, None) is None
    assert len(runs_at(runs, "depth", 64, None)) == len(runs) // 2 and runs_at(runs, "depth", None, 3) == runs


def test_a_width_the_study_s_heads_do_not_split_is_refused_before_any_fit(tmp_path, monkeypatch, capsys):
    """A width sweep's models all have 4 heads: --to-width 130 names no model of its shape and is refused
    in one line that gives the widths nearest it that do; 128 is answered."""
    runs = fake_runs(lambda w: -1.5, (32, 64, 128), field="d_model")
    for r in runs:
        r["config"]["model"]["n_heads"] = 4
        r["config"]["train"].update(steps=100, batch_size=16, seq_len=32)
    assert unbuildable_width(runs, 128) is None and unbuildable_width(fake_runs(lambda w: -1.5), 130) is None
    monkeypatch.setattr("depthlab.cli.transfer.load", lambda db, study: types.SimpleNamespace(
        study={"name": "w"}, runs=runs))  # fmt: skip
    db = tmp_path / "w.sqlite"
    db.write_bytes(b"")
    assert main(["transfer", "--db", str(db), "--to-width", "130"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["depthlab transfer: error: --to-width 130 is not allowed: a multiple of the study's 4 heads, "
                   "which split d_model; ask at 128 or 132"]  # fmt: skip
    assert main(["transfer", "--db", str(db), "--to-width", "128"]) == 0
    assert "best lr at width 128" in capsys.readouterr().out


def test_presets_validate_and_transfer_quick_variants_are_small():
    for name, runs in (("depth-transfer", 1215), ("width-transfer", 432)):
        assert len(preset(name).expand()) == runs
        assert len(preset(f"{name}-quick").expand()) == 90


@pytest.mark.usefixtures("one_thread")
def test_cli_on_a_real_study(tmp_path, capsys):
    grid = tmp_path / "g.yaml"
    grid.write_text(
        textwrap.dedent(
            """
            name: tiny-transfer
            model: {arch: decoder, d_model: 16, n_heads: 2, vocab_size: 256, max_len: 16}
            train: {task: lm, steps: 6, batch_size: 4, seq_len: 16, log_every: 3, eval_batches: 1}
            axes:
              parametrization: [{param: sp}, {param: completep, base_depth: 2}]
              n_layers: [2, 4]
              lr: [1.0e-3, 1.0e-2, 1.0e-1]
              seed: [0, 1]
            """
        )
    )
    db = str(tmp_path / "depthlab.sqlite")
    assert main(["study", "--grid", str(grid), "--db", db, "--no-report", "--workers", "1"]) == 0
    capsys.readouterr()
    assert main(["transfer", "--db", db, "--to-depth", "16", "--plot", str(tmp_path / "fig")]) == 0
    out = capsys.readouterr().out
    assert "param=completep" in out and "param=sp" in out and "best lr at depth 16" in out
    for name in ("best-lr", "loss-vs-lr"):
        assert (tmp_path / "fig" / f"transfer-depth-{name}.png").stat().st_size > 0
    assert out.startswith("study tiny-transfer: width 16, depths 2-4, 6 steps of 4 x 16\n")
    assert main(["transfer", "--db", db, "--to-width", "64"]) == 2  # a depth sweep cannot answer it
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "this study sweeps depth (2, 4 layers at width 16); --to-width needs" in err[0]
    assert main(["transfer", "--db", db, "--to-depth", "0"]) == 2
    capsys.readouterr()
    # a question at another width is refused in one line that says what the study can answer
    assert main(["transfer", "--db", db, "--to-depth", "16", "--width", "128"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ran at width 16, not 128" in err[0] and "--width 128" in err[0]
    assert main(["transfer", "--db", db, "--to-depth", "16", "--width", "16"]) == 0


def test_a_transfer_preset_takes_the_users_own_width_or_depth():
    wide = preset("depth-transfer-quick", width=128)
    assert wide.name == "depth-transfer-quick-w128" and {s.model.d_model for s in wide.expand()} == {128}
    deep = preset("width-transfer-quick", depth=12)
    assert {s.model.n_layers for s in deep.expand()} == {12}
    with pytest.raises(ConfigError, match="sweeps d_model"):
        preset("width-transfer-quick", width=128)
    with pytest.raises(ConfigError, match="a transfer preset"):
        preset("default", width=128)
    # a size no model of the preset can have is refused by the name it was given, not as a grid field
    with pytest.raises(
        ConfigError, match=r"^width=30 is not allowed: a multiple of the preset's 4 heads, .*28 or 32"
    ):
        preset("depth-transfer-quick", width=30)
    with pytest.raises(ConfigError, match=r"^depth=0 is not allowed: an integer >= 1$"):
        preset("width-transfer-quick", depth=0)


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--preset", "depth-transfer-quick", "--width", "0"], "--width 0 is not allowed: an integer >= 1"),
        (["--preset", "depth-transfer-quick", "--width", "30"], "--width 30 is not allowed: a multiple of"),
        (["--preset", "width-transfer-quick", "--depth", "-2"], "--depth -2 is not allowed: an integer >= 1"),
    ],
)
def test_a_transfer_preset_s_size_is_refused_in_the_flag_s_words(argv, says, tmp_path, capsys):
    db = tmp_path / "t.sqlite"
    assert main(["study", *argv, "--db", str(db), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"depthlab study: error: {says}")
    assert "model." not in err[0] and "grid combination" not in err[0] and not db.exists()


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--to-depth", "32", "--depth", "4"], "--depth 4 with --to-depth: not used"),
        (["--to-width", "64", "--width", "32"], "--width 32 with --to-width: not used"),
        (["--to-depth", "32", "--json", "out.txt"], "--json out.txt: the file type .txt is not supported"),
        (["--to-depth", "32", "--width", "0"], "--width 0: at least 1"),
    ],
)
def test_a_flag_the_question_ignores_or_cannot_use_is_refused_before_reading_the_store(
    argv, says, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    assert main(["transfer", "--db", "missing.sqlite", *argv]) == 2  # the store is never opened
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0] and "Traceback" not in err[0]
    assert not (tmp_path / "out.txt").exists()


@pytest.mark.parametrize(
    "slope, code, words",
    [
        ((-0.03, -0.20, +0.14), "flat", "flat (its interval lies inside +-0.25)"),
        ((0.0, -0.25, +0.25), "flat", "flat"),  # the band's edges are inside it
        ((-0.07, -0.76, +0.62), "not decided", "not decided (its interval reaches past +-0.25)"),
        ((-0.2, -0.30, -0.10), "not decided", "not decided"),  # excludes 0, but crosses the band's edge
        ((-0.94, -1.21, -0.68), "moves", "moves (its interval lies outside +-0.25)"),
        ((+0.5, +0.26, +0.74), "moves", "moves"),
    ],
)
def test_a_slope_is_read_against_the_flat_band(slope, code, words):
    """flat inside +-0.25 (edges included), moves wholly outside, not decided across an edge."""
    (t,) = transfers(fake_runs(lambda L: -2.5), "depth", 64)
    t = dataclasses.replace(t, slope=slope)
    assert reading(t) == code and words in slope_text(t) and t.to_dict()["reading"] == code


def _with_param(runs: list[dict], **model) -> list[dict]:
    """``runs`` with ``model`` fields set on each config and the param as a study axis."""
    out = []
    for r in runs:
        cfg = {**r["config"], "model": {**r["config"]["model"], **model}}
        out.append({**r, "config": cfg, "axes": {**r["axes"], "param": model["param"]}})
    return out


@pytest.mark.parametrize(
    "axis,field,sizes,model,said",
    [
        ("width", "d_model", (32, 64, 128), {"param": "mup"}, "mup"),
        ("width", "d_model", (32, 64, 128), {"param": "completep", "base_depth": 2}, "completep"),
        ("width", "d_model", (32, 64, 128), {"param": "mup", "base_width": 32}, None),
        ("width", "d_model", (32, 64, 128), {"param": "sp"}, None),
        ("depth", "n_layers", (2, 8, 32), {"param": "completep", "base_width": 32}, "completep"),
        ("depth", "n_layers", (2, 8, 32), {"param": "depth_mup", "base_depth": 2}, None),
        ("depth", "n_layers", (2, 8, 32), {"param": "mup", "base_width": 32}, None),  # mup scales no depth
    ],
)
def test_a_parametrization_with_no_base_along_the_axis_is_said_to_be_sp(axis, field, sizes, model, said):
    """A grid that sweeps width under mup without base_width ran SP at every width (each its own base):
    the output named it 'param=mup' and read it as muP's transfer; it now says so, in transfer and advise."""
    runs = _with_param(fake_runs(lambda s: -2.0, sizes, field=field), **model)
    (t,) = transfers(runs, axis, 4 * sizes[-1])
    assert t.no_base == said and t.to_dict()["no_base"] == said
    text = format_transfer(t)
    base = "base_width" if axis == "width" else "base_depth"
    line = f"{said} with no {base}: each {axis} its own base, so the standard parametrization at every {axis}"
    assert (line in text) == (said is not None)
    if said:
        assert f"({base} {sizes[0]}, the smallest, scales it)" in text
        assert line in target._setting_line(t, use=False)

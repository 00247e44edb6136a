"""The CLI's contract on user-named paths and flags (docs/design.md): bad input is exit 2 with one line on stderr,
checked before the work starts; a replaced file is said on stderr; other failures are exit 1."""

from __future__ import annotations

import errno
import json
import os

import pytest

from depthlab.cli import build_parser, main

TINY = ["--layers", "2", "--d-model", "16", "--heads", "2", "--max-len", "16"]
PROBE = ["probe", *TINY, "--batch-size", "2", "--seq-len", "8", "--perturbation", "0"]
TRAIN = ["train", *TINY, "--steps", "2", "--batch-size", "2", "--seq-len", "8", "--threads", "1", "--quiet"]

pytestmark = pytest.mark.usefixtures("one_thread")


def _run(capsys, argv: list[str]) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _refused(capsys, argv: list[str], *needles: str) -> str:
    """Run ``argv``; assert exit 2, exactly one line on stderr holding every needle, and nothing on stdout
    (the table comes before any file is written, so an empty stdout shows the work never started)."""
    code, out, err = _run(capsys, argv)
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert all(n in err for n in needles), err
    assert out == ""
    return err


def test_probe_json_under_a_file_is_refused_before_probing(tmp_path, capsys):
    (tmp_path / "exists.json").write_text("{}")
    _refused(capsys, [*PROBE, "--json", tmp_path / "exists.json" / "x.json"], "exists.json is a file")
    assert (tmp_path / "exists.json").read_text() == "{}"


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")
def test_probe_json_where_no_folder_can_be_made_is_refused(capsys):
    _refused(capsys, [*PROBE, "--json", "/proc/nope/x.json"], "--json /proc/nope/x.json")


def test_probe_json_naming_a_folder_is_refused(tmp_path, capsys):
    _refused(capsys, [*PROBE, "--json", tmp_path], "is a folder")


def test_probe_plot_format_is_checked_up_front(tmp_path, capsys):
    _refused(capsys, [*PROBE, "--plot", tmp_path / "x.txt"], ".txt", ".png, .pdf, .svg")
    _refused(capsys, [*PROBE, "--plot", tmp_path / "plot"], "without a file type", ".png")
    assert list(tmp_path.iterdir()) == []


def test_probe_replaces_its_json_and_plot_but_says_so(tmp_path, capsys):
    js, svg = tmp_path / "sub" / "p.json", tmp_path / "sub" / "p.svg"  # the folder is created
    code, out, err = _run(capsys, [*PROBE, "--json", js, "--plot", svg])
    assert code == 0 and "replaced" not in err and f"plot: {svg}" in out
    assert json.loads(js.read_text())["layers"] and svg.read_text().lstrip().startswith("<?xml")
    js.write_text("mine")
    code, _, err = _run(capsys, [*PROBE, "--json", js, "--plot", svg])
    assert code == 0 and json.loads(js.read_text())["layers"]
    assert f"replaced existing {js}\n" in err and f"replaced existing {svg}\n" in err
    assert sorted(p.name for p in js.parent.iterdir()) == ["p.json", "p.svg"]  # no temporary file left


def test_explain_json_replacement_is_said(tmp_path, capsys):
    js = tmp_path / "e.json"
    assert _run(capsys, ["explain", *TINY, "--json", js])[2] == ""
    code, _, err = _run(capsys, ["explain", *TINY, "--wrap", "post", "--json", js])
    assert code == 0 and err == f"replaced existing {js}\n"
    assert json.loads(js.read_text())["layers"][0]["sublayers"][0]["wrap"] == "post"


def test_a_full_disk_is_one_line_naming_the_space_and_keeps_the_old_file(tmp_path, capsys, monkeypatch):
    """ENOSPC (simulated: the write into the temporary file fails) is one line naming the file and the
    space it needed; the file it was replacing survives and no temporary file is left."""
    import depthlab.paths as common

    js = tmp_path / "e.json"
    js.write_text("mine")
    real = common.os.fdopen

    class Full:
        def __init__(self, fd, *args, **kw):
            self.f = real(fd, *args, **kw)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(common.os, "fdopen", Full)
    code, _, err = _run(capsys, ["explain", *TINY, "--json", js])
    assert code == 2 and err.count("\n") == 1 and "disk is full" in err and "e.json needs about" in err
    assert js.read_text() == "mine" and [p.name for p in tmp_path.iterdir()] == ["e.json"]


def test_train_out_under_a_file_is_refused(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    _refused(capsys, [*TRAIN, "--out", tmp_path / "notes.txt" / "sub"], "notes.txt is a file, not a folder")
    assert (tmp_path / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("state, why", [(None, "no such folder"), ([], "empty"), (["notes.txt"], "config")])
def test_train_resume_of_nothing_is_refused(tmp_path, capsys, state, why):
    run = tmp_path / "run"
    if state is not None:
        run.mkdir()
        for name in state:
            (run / name).write_text("mine")
    _refused(capsys, [*TRAIN, "--out", run, "--resume"], f"nothing to resume in {run}", why)
    if state is None:
        assert not run.exists()
    else:
        assert sorted(p.name for p in run.iterdir()) == state  # nothing written, nothing removed


def test_reproduce_checks_its_paths_before_running(tmp_path, capsys):
    (tmp_path / "f").write_text("mine")
    _refused(capsys, ["reproduce", "seeds", "--out", tmp_path / "f"], "--out", "is a file, not a folder")
    _refused(capsys, ["reproduce", "seeds", "--json", tmp_path / "f" / "r.json"], "f is a file")


@pytest.mark.parametrize(
    "argv, needles",
    [
        (["train", "--no-residual", "attn,ffn"], ["attn+ffn"]),
        (["explain", "--no-residual", "attn,ffn"], ["attn+ffn"]),
        (["explain", "--no-residual", "attn+mlp"], ["--no-residual mlp is not allowed", "joined by +"]),
        (["train", "--no-residual", "cross"], ["--arch decoder has no cross-attention"]),
        (["explain", "--no-residual", ""], ["--no-residual '' is not allowed", "none empty"]),  # not 'none'
        (["explain", "--no-residual", "attn+"], ["--no-residual attn+ is not allowed", "none empty"]),
        (["explain", "--arch", "encoder", "--no-residual", "attn+cross"], ["--arch encoder has no cross"]),
        (["train", "--enc-layers", "3"], ["--enc-layers 3 is not allowed", "arch=encdec"]),
        (
            ["explain", "--arch", "encoder", "--dec-layers", "2"],
            ["--dec-layers 2 is not allowed", "arch=encdec"],
        ),
    ],
)
def test_model_flags_that_would_be_misread_are_refused(capsys, argv, needles):
    _refused(capsys, [*argv, *TINY], *needles)


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["check", "--module", ""], "--module: an empty value names no module"),  # not the flags' model
        (["check", "--module", " ", "--claims", "pre"], "--module: an empty value names no module"),
        (["study", "--preset", "smoke", "--dry-run", "--ray-address", ""], "--ray-address '' is not allowed"),
    ],
)
def test_an_empty_value_is_refused_not_read_as_the_flag_left_out(tmp_path, monkeypatch, capsys, argv, needle):
    monkeypatch.chdir(tmp_path)
    _refused(capsys, argv, needle)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "command, data, needle",
    [
        (TRAIN, "nope.txt", "--data nope.txt does not exist"),
        (PROBE, "nope.txt", "--data nope.txt does not exist"),
        (
            TRAIN,
            "short.txt",
            "--data short.txt is too short: 30 bytes give 27 train / 3 validation bytes; --seq-len 8",
        ),
        (TRAIN, "empty.txt", "--data empty.txt is empty"),
        (PROBE, ".", "--data . is a directory"),
    ],
)
def test_a_bad_data_file_is_named_by_its_flag(tmp_path, monkeypatch, capsys, command, data, needle):
    """The user typed --data (from Python the message says "data file": tests/test_data.py)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "short.txt").write_text("the quick brown fox jumps over")
    (tmp_path / "empty.txt").write_text("")
    _refused(capsys, [*command, "--data", data], needle)


@pytest.mark.parametrize(
    "argv, needle",
    [
        ([*PROBE, "--data", "nope.txt"], "--data nope.txt does not exist"),
        (["explain", *TINY, "--d-ff", str(10**20)], "building the model needs about"),
        (
            ["advise", *TINY, "--seq-len", "8", "--atlas", "nope.sqlite"],
            "--atlas nope.sqlite: no study store",
        ),
        (["transfer", "--db", "nope.sqlite", "--to-depth", "8"], "--db nope.sqlite: no study store there"),
    ],
)
def test_a_refused_command_leaves_no_folder_made_for_its_json(tmp_path, monkeypatch, capsys, argv, needle):
    """--json's folder is made when the path is checked, before the work; a refusal after that check
    removes it again (it made the folder, nothing was written in it)."""
    monkeypatch.chdir(tmp_path)
    _refused(capsys, [*argv, "--json", "new/deeper/out.json"], needle)
    assert list(tmp_path.iterdir()) == []


def test_several_skips_off_with_plus_and_cross_in_encdec(capsys):
    code, out, _ = _run(capsys, ["explain", *TINY, "--no-residual", "attn+ffn", "--json", "-"])
    assert code == 0 and json.loads(out)["config"]["residual"] == ["cross"]
    args = [*TINY, "--arch", "encdec", "--no-residual", "cross", "--json", "-"]
    code, out, _ = _run(capsys, ["explain", *args])
    assert code == 0 and json.loads(out)["config"]["residual"] == ["attn", "ffn"]


def test_probe_commas_still_compare_and_plus_joins(capsys):
    from depthlab.cli.probe import configs_from_args

    args = build_parser().parse_args(["probe", *TINY, "--compare", "--no-residual", "attn,attn+ffn"])
    assert [cfg.residual for _, cfg in configs_from_args(args)] == [("cross", "ffn"), ("cross",)]


def test_help_is_for_users(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--help"])
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert stop.value.code == 0 and "train and study deep Transformer stacks" in out and "thin" not in out
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "several joined by + (attn+ffn), all, or none" in out


def test_a_base_width_the_heads_do_not_split_names_the_heads_flag(capsys, tmp_path):
    """It said 'a multiple of n_heads=4', the field's name: the flag that sets the heads is --heads."""
    err = _refused(
        capsys, ["explain", "--d-model", "64", "--param", "mup", "--base-width", "30"], "--base-width 30"
    )
    assert "a multiple of the 4 heads (set by --heads)" in err and "n_heads" not in err
    hf = tmp_path / "config.json"  # a family's 8 heads, which no flag set: named as the config has them
    hf.write_text(
        json.dumps({"model_type": "gpt2", "n_embd": 64, "n_head": 8, "n_layer": 2, "vocab_size": 256})
    )
    err = _refused(
        capsys, ["explain", "--hf", str(hf), "--param", "mup", "--base-width", "36"], "--base-width 36"
    )
    assert "n_heads=8" in err and "4 heads" not in err
    err = _refused(
        capsys, ["explain", "--hf", str(hf), "--heads", "2", "--param", "mup", "--base-width", "33"]
    )
    assert "a multiple of the 2 heads (set by --heads)" in err


def test_no_help_page_shows_a_doubled_percent_sign(capsys):
    """argparse %-formats an argument's help but not a description: a '%%' there reached the user as
    typed (transfer's '95%% interval')."""
    commands = build_parser()._subparsers._group_actions[0].choices
    for name in commands:
        with pytest.raises(SystemExit):
            main([name, "--help"])
        assert "%%" not in capsys.readouterr().out, name
    main_help = build_parser().format_help()
    assert "%%" not in main_help


def test_hf_unknown_model_type_is_one_short_line(tmp_path, capsys):
    pytest.importorskip("transformers")
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "no-such-model", "hidden_size": 8}))
    err = _refused(capsys, ["probe", "--hf", tmp_path], "'no-such-model'", "gpt2, bert, llama")
    assert len(err) <= 300  # depthlab's own types named (transformers' message lists its hundreds)


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["probe", "--layers", "0"], "depthlab probe: error: --layers 0 is not allowed: an integer >= 1\n"),
        (["explain", "--heads", "3"], "--heads 3 is not allowed: a divisor of d_model 64 (ask for 2 or 4)\n"),
        (["explain", "--heads", "100"], "--heads 100 is not allowed: a divisor of d_model 64 (ask for 64)\n"),
        (
            ["explain", "--d-model", "30"],
            "--d-model 30 is not allowed: a multiple of the 4 heads (set by --heads)\n",
        ),
        (
            ["explain", "--d-model", "30", "--heads", "4"],
            "--d-model 30 is not allowed: a multiple of --heads 4\n",
        ),
        (["explain", "--kv-heads", "3"], "--kv-heads 3 is not allowed"),
        (["explain", "--init-std", "0"], "--init-std 0.0 is not allowed"),
        (
            ["explain", "--qk-norm", "--norm", "none", "--wrap", "post"],
            "--qk-norm is not allowed: false unless",
        ),
        (["train", "--layers", "1", "--lr", "-1"], "--lr -1.0 is not allowed"),
        # check seeds torch before it builds a config (and --module builds none): the seed is checked first
        (["check", "--seed", "-1"], "--seed -1 is not allowed: an integer >= 0"),
        (["check", "--seed", str(2**64)], f"--seed {2**64} is not allowed: an integer >= 0"),
        (["check", "--module", "m:build", "--claims", "pre", "--seed", "-2"], "--seed -2 is not allowed"),
    ],
)
def test_a_config_error_names_the_flag_typed_not_the_field(capsys, argv, needle):
    """The user typed --layers, not n_layers: the line names the flag (and the value as given)."""
    err = _refused(capsys, argv, needle)
    assert "n_layers" not in err and "n_kv_heads" not in err


def test_a_field_the_family_set_keeps_its_name(tmp_path, capsys):
    """With --hf, a value the imported config set (no flag given for it) is named as the field."""
    path = tmp_path / "gpt2.json"
    path.write_text(json.dumps({"model_type": "gpt2", "n_embd": 30, "n_head": 4, "n_layer": 2}))
    _refused(capsys, ["explain", "--hf", path, "--layers", "3"], "d_model=30 is not allowed", "GPT-2 config")


def test_a_refused_skip_is_named_by_the_flag_that_turned_it_off(capsys):
    assert main(["explain", "--no-residual", "attn", "--wrap", "hc", "--layers", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "depthlab explain: error: --no-residual attn is not allowed: every skip on with wrap=hc"
    )


@pytest.mark.timeout(30)
def test_heads_beyond_any_width_are_refused_at_once(capsys):
    """The head counts suggested are the width's divisors: not searched for up to the --heads typed."""
    _refused(
        capsys,
        ["explain", "--heads", str(10**23)],
        f"--heads {10**23} is not allowed: a divisor of d_model 64 (ask for 64)",
    )


def test_weights_that_cannot_fit_name_the_flags_on_the_command_line_and_the_fields_in_python(capsys):
    from depthlab import InputError, ModelConfig, build_model

    err = _refused(capsys, ["check", "--d-ff", str(10**20)], "alone, more than the")
    assert err.rstrip().endswith("use a smaller --layers, --d-model, --d-ff or --vocab"), err
    with pytest.raises(InputError, match="use a smaller n_layers, d_model, d_ff or vocab_size$"):
        build_model(ModelConfig(d_ff=10**20))


@pytest.mark.parametrize(
    "argv, line",
    [
        (  # the default length, a table typed too short: --max-len is what the user got wrong
            ["train", "--max-len", "16"],
            "--max-len 16 is not allowed: shorter than the default --seq-len 64 (pass a longer --max-len or a "
            "shorter --seq-len)",
        ),
        (["probe", "--max-len", "16"], "--max-len 16 is not allowed: shorter than the default --seq-len 64"),
        (
            ["train", "--max-len", "16", "--seq-len", "32"],
            "--seq-len 32 is not allowed: a length that fits --max-len 16",
        ),
        (
            ["probe", "--max-len", "16", "--seq-len=32"],
            "--seq-len 32 is not allowed: a length that fits --max-len 16",
        ),
        (["train", "--seq-len", "300"], "--seq-len 300 is not allowed: a length that fits --max-len 256"),
    ],
)
def test_a_sequence_longer_than_the_position_table_names_the_flags_typed(tmp_path, capsys, argv, line):
    """The position table is --max-len's: a refusal names that flag, not the field max_len=16, and blames
    --max-len where the length is the command's default (it read '--seq-len 64 is not allowed' for a
    --seq-len never typed)."""
    out = ["--out", str(tmp_path / "run")] if argv[0] == "train" else []
    assert main([*argv, "--layers", "2", "--d-model", "32", "--heads", "2", *out]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"depthlab {argv[0]}: error: {line}") and err.count("\n") == 1, err
    assert not (tmp_path / "run").exists()

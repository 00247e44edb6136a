"""Property-based fuzzing (hypothesis) of the command line and the grid loader.

Whatever the arguments: exit 0 or 2, never a traceback, exactly one line on stderr for exit 2, and a
study store left byte for byte as it was when the command is refused. The work each command would
start (building and training a model, probing, rendering a report, a reproduction) is replaced by a
stand-in that raises ``WorkStarted`` once every check has passed: the fuzzing is about what is checked
before the work, and a command that reaches the work counts as accepted (it exits 1 only because of
the stand-in, and says so). Examples are derandomised, so the suite stays repeatable; the whole module
runs in well under a minute.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import os
import stat

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_study_fakes import fake_study, fill_store

from depthlab import ConfigError, InputError
from depthlab.cli import LAB_COMMANDS, build_parser, main
from depthlab.study import StudyConfig

pytestmark = pytest.mark.usefixtures("one_thread")
FUZZ = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


class WorkStarted(Exception):
    """Raised by the stand-ins: every check passed and the command began its work."""


def _work(*args, **kwargs):
    raise WorkStarted("every check passed")


class _Trainer:
    """Training's stand-in: the checks that Trainer makes (task against model, the data file) then stop."""

    def __init__(self, model_cfg, cfg, out_dir, dist, on_log=None):
        from depthlab.corpus import load_corpus
        from depthlab.train.tasks import check_task

        check_task(model_cfg, cfg)
        if cfg.task == "lm":
            load_corpus(cfg.data, cfg.seq_len)
        raise WorkStarted("every check passed")


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """A working folder holding the files the fuzzer names (a store, grids, data, odd paths), with the
    work stood in for; returns the folder."""
    monkeypatch.chdir(tmp_path)
    for target in (
        "depthlab.model.explain.build_model",
        "depthlab.probe.from_config.build_model",
        "depthlab.probe.saved_hf.load_hf_model",
        "depthlab.study.runner.make_executor",
        "depthlab.cli.report.render",
    ):
        monkeypatch.setattr(target, _work)
    monkeypatch.setattr("depthlab.train.loop.Trainer", _Trainer)
    if LAB:  # the lab's commands, where the lab is installed beside the library (make test installs it)
        reproduce = importlib.import_module("depthlab_lab.cli.reproduce")
        for name in ("run_all", "render_all", "print_all_plan", "write_tour"):
            monkeypatch.setattr(reproduce, name, _work)
        monkeypatch.setattr(reproduce, "REPRODUCTIONS", {name: _work for name in reproduce.REPRODUCTIONS})
        calibrate = importlib.import_module("depthlab_lab.cli.calibrate")
        for name in ("refit", "fitted_predictor"):  # the fits, which would write the shipped record
            monkeypatch.setattr(calibrate, name, _work)
    fill_store(str(tmp_path / "store.sqlite"), fake_study())
    (tmp_path / "data.txt").write_bytes(b"the quick brown fox jumps over the lazy dog\n" * 400)
    (tmp_path / "grid.yaml").write_text(GRID)
    (tmp_path / "bad.yaml").write_text("axes:\n  n_layers: [2]\n  n_layers: [4]\n")
    (tmp_path / "dir").mkdir()
    os.mkfifo(tmp_path / "fifo")
    return tmp_path


LAB = importlib.util.find_spec("depthlab_lab") is not None
GRID = "name: g\nmodel: {d_model: 16, n_heads: 2, max_len: 16}\ntrain: {steps: 2, seq_len: 8}\naxes:\n  n_layers: [2, 3]\n"
PATHS = ["store.sqlite", "data.txt", "grid.yaml", "bad.yaml", "dir", "fifo", "missing", "-", "/dev/null",
         "dir/x.json", "x" * 300, "new/out.json", "plot.png", "plot.txt", "", "store.sqlite/x"]  # fmt: skip
WORDS = ["pre", "post", "deepnorm", "sandwich", "mix", "layernorm", "rmsnorm", "none", "gelu", "swiglu",
         "encdec", "encoder", "decoder", "lm", "copy", "reverse", "cosine", "noam", "constant", "adam",
         "attn", "attn+ffn", "all", "cross", "pre,post", "local", "ray", "smoke", "default", "seeds", "list",
         "sum", "auto", "cpu", "cuda", "on", "off", "rope", "learned", "gpt2", "x", "\u00e9\u4e2d", " "]  # fmt: skip
INTS = [0, 1, 2, 3, 4, 8, 16, 64, -1, 1000, 10**6, 10**9, 2**63, 10**30]
FLOATS = [0.0, 1e-3, 0.5, 1.0, 3.0, -1.0, 1e9, math.inf, math.nan]


def _options() -> dict[str, list[tuple[str, str]]]:
    """Per command, its flags with the kind of value each takes ("flag" for none, "pos" for NAME)."""
    parser = build_parser(load=tuple(LAB_COMMANDS) if LAB else ())
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    out = {}
    for name, sp in sub.choices.items():
        flags = []
        for a in sp._actions:
            if a.option_strings and a.option_strings[-1] == "--help":
                continue
            if not a.option_strings:
                flags.append(("", "pos"))
            elif a.nargs == 0:
                flags.append((a.option_strings[-1], "flag"))
            else:
                kind = {int: "int", float: "float"}.get(a.type, "str")
                flags.append((a.option_strings[-1], kind))
        out[name] = flags
    return out


OPTIONS = _options()


PATH_FLAGS = {
    "--data",
    "--out",
    "--json",
    "--plot",
    "--db",
    "--grid",
    "--report",
    "--doc",
    "--hf",
    "--cache",
    "--ladder-db",
}


def _value(kind: str, flag: str = ""):
    if flag in PATH_FLAGS:
        return st.sampled_from(PATHS) | st.sampled_from(WORDS)
    if kind == "int":
        return st.one_of(st.sampled_from(INTS), st.integers(-3, 50)).map(str) | st.sampled_from(
            ["x", "1.5", ""]
        )
    if kind == "float":
        return st.sampled_from(FLOATS).map(str) | st.sampled_from(["x", "1e-3", "-0"])
    return st.sampled_from(PATHS + WORDS) | st.text(max_size=12)


@st.composite
def argvs(draw):
    command = draw(st.sampled_from(sorted(OPTIONS)))
    argv = [command]
    flags = OPTIONS[command]
    for flag, kind in draw(st.lists(st.sampled_from(flags), max_size=6)):
        if kind == "pos":
            argv.append(draw(st.sampled_from(["seeds", "list", "all", "tour", "nope", "depth"])))
        elif kind == "flag":
            argv.append(flag)
        else:
            argv += [flag, draw(_value(kind, flag))]
    if draw(st.booleans()):  # some runs name the sandbox's store, the one whose bytes are watched
        argv += ["--db", "store.sqlite"] if command in ("study", "report") else []
    return argv


def _check(argv, capsys, folder) -> None:
    """Run ``argv`` in-process; assert the contract."""
    store = folder / "store.sqlite"
    before = store.read_bytes() if store.is_file() else None
    try:
        code = main(argv)
    except SystemExit as e:  # argparse: --help (0) and usage errors (2)
        code = e.code
    out, err = capsys.readouterr()
    assert "Traceback" not in err, (argv, err)
    if code == 1:
        assert "WorkStarted" in err, (argv, err)  # the stand-in: every check passed
        return
    assert code in (0, 2), (argv, code, err)
    if code == 2:
        assert err.count("\n") == 1 and err.endswith("\n"), (argv, err)
        after = store.read_bytes() if store.is_file() else None
        assert after == before, argv
    # a refused or accepted command never replaces what it was pointed at
    assert stat.S_ISFIFO(os.stat(folder / "fifo").st_mode) and (folder / "dir").is_dir(), argv


@FUZZ
@given(argv=argvs())
def test_any_command_line_exits_0_or_2_in_one_line(sandbox, capsys, argv):
    _check(argv, capsys, sandbox)


# -- the grid loader -----------------------------------------------------------------------------------
KEYS = ["name", "description", "model", "train", "axes", "n_layers", "d_model", "n_heads", "wrap", "seed",
        "lr", "warmup", "residual", "steps", "seq_len", "max_len", "task", "data", "wrapping", "model.wrap",
        "train.lr", "checkpoint", "bogus", "<<", "1", ""]  # fmt: skip
SCALARS = st.one_of(
    st.sampled_from(INTS + FLOATS + WORDS + [None, True, False, "1e-3", "data.txt", "fifo"]),
    st.text(max_size=8),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(KEYS), inner, max_size=4),
    max_leaves=20,
)
YAML_BITS = ["axes:", "\n", "  ", "- ", "[", "]", "{", "}", ": ", ", ", "&a ", "*a", "<<: *a", "!!binary ",
             "!!python/object ", "'", '"', "#", "---\n", "...\n", "? ", "|\n", "%YAML 1.1\n", "n_layers", "2",
             "\t", "\ufeff", "\x00", "\x85", "\u2028"]  # fmt: skip


def _load(text: str | bytes, folder):
    path = folder / "fuzz.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))
    try:
        return StudyConfig.from_yaml(str(path))
    except (ConfigError, InputError):
        return None


@FUZZ
@given(grid=st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=6))
def test_any_grid_structure_is_loaded_or_refused_by_name(sandbox, capsys, grid):
    import yaml

    text = yaml.safe_dump(grid, allow_unicode=True)
    study = _load(text, sandbox)
    assert study is None or isinstance(study, StudyConfig)
    _check(["study", "--grid", "fuzz.yaml", "--db", "store.sqlite", "--dry-run"], capsys, sandbox)


@FUZZ
@given(
    text=st.one_of(st.lists(st.sampled_from(YAML_BITS), max_size=40).map("".join), st.binary(max_size=200))
)
def test_any_grid_text_is_loaded_or_refused_by_name(sandbox, capsys, text):
    _load(text, sandbox)
    _check(["study", "--grid", "fuzz.yaml", "--db", "store.sqlite", "--no-report"], capsys, sandbox)


# -- canonical keys ------------------------------------------------------------------------------------
FLOAT_FIELDS = [("train", "lr", 1e-3), ("train", "clip", 0.0), ("train", "weight_decay", 0.0),
                ("train", "spike_factor", 3.0), ("train", "z_loss", 0.0), ("model", "dropout", 0.0),
                ("model", "rope_base", 10000.0), ("model", "init_std", 0.02)]  # fmt: skip


def _spellings(value: float) -> list:
    """Ways a grid writes one number: float, int where integral, -0.0 at zero, YAML 1.1's strings."""
    out = [value, repr(value), f"{value:e}"]
    if value == int(value):
        out += [int(value), str(int(value))]
    if value == 0:
        out += [-0.0, "-0.0", "-0"]
    return out


@FUZZ
@given(
    which=st.sampled_from(FLOAT_FIELDS),
    value=st.sampled_from([0.0, 1.0, 2.0, 3.0, 0.5, 1e-3, 0.25, 4.0, 10000.0]),
    data=st.data(),
)
def test_any_two_spellings_of_one_value_give_one_key(which, value, data):
    side, name, default = which
    spellings = data.draw(st.lists(st.sampled_from(_spellings(value)), min_size=2, max_size=4))
    base = {"model": {"d_model": 16, "n_heads": 2, "n_layers": 2}, "train": {"steps": 4}}
    try:
        study = StudyConfig.from_dict({**base, "name": "s", "axes": {f"{side}.{name}": spellings}})
    except ConfigError:  # a value outside the field's range, refused whatever its spelling
        return
    assert len(study.expand()) == 1
    if value == default:  # the default written or omitted: one key
        assert study.expand()[0].hash == StudyConfig.from_dict({**base, "name": "t"}).expand()[0].hash


@FUZZ
@given(fields_=st.dictionaries(st.sampled_from(["warmup", "clip", "weight_decay", "z_loss", "seed", "eps"]),
                               st.just(None), max_size=6))  # fmt: skip
def test_defaults_written_or_omitted_give_one_key(fields_):
    from depthlab.config import TrainConfig

    defaults = TrainConfig()
    written = {k: getattr(defaults, k) for k in fields_}
    as_ints = {k: int(v) if float(v).is_integer() else v for k, v in written.items()}
    assert (
        TrainConfig(**written).config_hash() == TrainConfig(**as_ints).config_hash() == defaults.config_hash()
    )


# -- paths that are not regular files ------------------------------------------------------------------
def _not_regular(folder, kind: str):
    """A path of ``kind`` under ``folder`` (made here); None where this user cannot make one."""
    import socket

    path = folder / f"odd-{kind}"
    if os.path.lexists(path):
        return path
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
        s.close()
    elif kind == "chardev":
        if os.geteuid():
            return None
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    elif kind == "dangling":
        path.symlink_to(folder / "nowhere" / "x")
    elif kind == "link-to-fifo":
        path.symlink_to(_not_regular(folder, "fifo"))
    return path


ODD_KINDS = ["fifo", "socket", "chardev", "dangling", "link-to-fifo"]
ODD_ROLES = [
    ["study", "--preset", "smoke", "--no-report", "--db", "{p}"],
    ["study", "--preset", "smoke", "--dry-run", "--db", "{p}"],
    ["report", "--db", "{p}"],
    ["study", "--grid", "{p}", "--db", "store.sqlite", "--no-report"],
    ["train", "--steps", "1", "--data", "{p}"],
    ["explain", "--layers", "2", "--json", "{p}"],
    ["probe", "--layers", "2", "--json", "{p}"],
    ["report", "--run", "run", "--out", "{p}"],
]


@pytest.mark.timeout(120)
@FUZZ
@given(kind=st.sampled_from(ODD_KINDS), role=st.sampled_from(ODD_ROLES))
def test_any_path_that_is_not_a_regular_file_is_refused(sandbox, capsys, kind, role):
    path = _not_regular(sandbox, kind)
    if path is None:
        return
    before = os.lstat(path)
    argv = [a.replace("{p}", str(path)) for a in role]
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err
    if kind == "dangling" and role[-2] in ("--json",):  # a link to a new file: writing it is a success
        assert code in (1, 2), (argv, err)  # 1: the stand-in for the work; 2: its folder does not exist
    else:
        assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, (argv, err)
    after = os.lstat(path)
    assert (stat.S_IFMT(after.st_mode), after.st_ino) == (stat.S_IFMT(before.st_mode), before.st_ino), argv


@pytest.mark.timeout(120)
@FUZZ
@given(kind=st.sampled_from(["fifo", "socket"]),
       name=st.sampled_from(["metrics.jsonl", "result.json", "config.json", "checkpoints/step-000006.pt",
                             "checkpoints/step-000006.pt.sha256"]),
       mode=st.sampled_from(["--resume", "--force"]))  # fmt: skip
def test_any_run_file_that_is_not_regular_is_refused(tmp_path_factory, capsys, kind, name, mode):
    import shutil
    from pathlib import Path

    out = tmp_path_factory.mktemp("run") / "run"
    shutil.copytree(Path(__file__).parent / "fixtures" / "legacy_store" / "run", out)
    (out / "result.json").unlink()
    (out / name).unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(out / name)
    else:
        import socket

        s = socket.socket(socket.AF_UNIX)
        s.bind(str(out / name))
        s.close()
    argv = ["train", "--layers", "2", "--d-model", "16", "--heads", "2", "--steps", "6", "--batch-size", "4",
            "--seq-len", "16", "--log-every", "2", "--quiet", "--out", str(out), mode]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and name.split("/")[-1] in err, err

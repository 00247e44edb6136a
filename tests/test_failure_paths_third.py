"""Hostile inputs, third round (coord, the paths every command takes, report --run, the param fields,
build_model): each is one line on stderr and exit 2 (or a ValueError in Python), checked before the
work, with nothing written. tests/rerun_failure_paths.py reruns the same classes in limited processes."""

from __future__ import annotations

import os
import shutil

import pytest
from test_input_limits import PROBE, TINY, TRAIN, refused
from watched import watched_run

from depthlab import InputError, ModelConfig, build_model
from depthlab.cli import build_parser, main
from depthlab.probe import coord as coord_module

pytestmark = pytest.mark.usefixtures("one_thread")
COORD = ["coord", "--depths", "2,3", "--width", "16", "--heads", "2", "--steps", "1", "--seeds", "2"]
COORD += ["--batch-size", "2", "--seq-len", "8"]


def test_coord_help_prints_a_plain_percent_sign():
    text = build_parser()._subparsers._group_actions[0].choices["coord"].format_help()
    assert "95% interval" in text and "%%" not in text


def test_coord_refuses_a_size_beyond_memory_at_once(capsys):
    refused(capsys, ["coord", "--depths", "2,99999999999999999999", "--width", "16"], "training needs about",
            "--force-memory", within=5)  # fmt: skip


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["coord", "--depths", "2,,3"], "an empty value between commas"),
        (["coord", "--depths", "2,3,"], "an empty value between commas"),
        (["coord", "--depths", "2,3", "--seeds", "1000000", "--steps", "1000000"], "the limit is 1,000,000"),
        (["coord", "--depths", "2,3", "--seeds", "100000000000000000000"], "the limit is 1,000,000"),
        ([*COORD, "--json", ""], "--json: an empty path"),
        ([*COORD, "--plot", ""], "--plot: an empty path"),
    ],
)
def test_coord_bad_values_are_refused_before_any_model(capsys, argv, needle):
    refused(capsys, argv, needle, within=5)


def test_coord_out_of_memory_is_exit_2(capsys, monkeypatch):
    def no_memory(*args, **kwargs):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory")

    monkeypatch.setattr(coord_module, "measure_run", no_memory)
    assert main(COORD) == 2
    err = capsys.readouterr().err.strip().splitlines()  # its plan line, then the refusal
    assert err[-1].startswith("depthlab coord: error: out of memory (") and "can't allocate memory" in err[-1]
    assert not any("Traceback" in line for line in err)


@pytest.mark.parametrize(
    "argv, needle",
    [
        ([*PROBE, "--json", ""], "--json: an empty path"),
        (["explain", *TINY, "--json", " "], "--json: an empty path"),
        ([*TRAIN, "--out", ""], "--out: an empty path"),
        ([*TRAIN, "--data", ""], "--data '' is not allowed"),
        (["study", "--grid", "", "--no-report"], "--grid: an empty path"),
        (["study", "--preset", "smoke", "--report", "", "--db", "{tmp}/s.sqlite"], "--report: an empty path"),
        (["report", "--run", "{tmp}", "--out", ""], "--out: an empty path"),
        (["transfer", "--to-depth", "8", "--json", ""], "--json: an empty path"),
        (["transfer", "--to-depth", "8", "--db", " "], "--db: an empty path"),  # not "no study store at  "
    ],
)
def test_an_empty_path_is_refused_not_read_as_the_default(capsys, tmp_path, monkeypatch, argv, needle):
    monkeypatch.chdir(tmp_path)
    refused(capsys, [a.format(tmp=tmp_path) for a in argv], needle)
    assert not (tmp_path / "runs").exists() and not (tmp_path / "s.sqlite").exists()


@pytest.mark.parametrize("command", [["report"], ["transfer", "--to-depth", "8"], ["forecast"]])
def test_a_fifo_as_a_store_to_read_is_named_a_fifo(capsys, tmp_path, command):
    os.mkfifo(tmp_path / "fifo")
    refused(capsys, [*command, "--db", tmp_path / "fifo"], "named pipe (FIFO)")


@pytest.mark.parametrize(
    "argv",
    [
        ["report", "--db", "{loop}"],
        ["study", "--preset", "smoke", "--db", "{loop}", "--dry-run"],
        [*TRAIN, "--data", "{loop}"],
    ],
)
def test_a_symbolic_link_loop_is_named_a_loop(capsys, tmp_path, argv):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    err = refused(capsys, [str(a).format(loop=tmp_path / "a") for a in argv], "a symbolic link that loops")
    assert "does not exist" not in err


@pytest.fixture(scope="module")
def watched(tmp_path_factory):
    folder = tmp_path_factory.mktemp("watched") / "run"
    watched_run(1e-3, 4, every=2, out=str(folder))
    return folder


@pytest.mark.parametrize(
    "text, needle", [('{"outcome": ', "watch.json is damaged"), ("[1, 2]", "a JSON list")]
)
def test_a_damaged_watch_json_is_refused_by_report(capsys, tmp_path, watched, text, needle):
    run = tmp_path / "run"
    shutil.copytree(watched, run)
    (run / "watch.json").write_text(text)
    refused(capsys, ["report", "--run", run], needle)
    assert not (run / "report").exists()


@pytest.mark.parametrize("second", ["{run}", "{run}/", "{link}"])
def test_report_run_refuses_one_folder_named_twice(capsys, tmp_path, watched, second):
    (tmp_path / "link").symlink_to(watched)
    argv = [
        "report",
        "--run",
        watched,
        second.format(run=watched, link=tmp_path / "link"),
        "--out",
        tmp_path / "o",
    ]
    refused(capsys, argv, "twice")
    assert not (tmp_path / "o").exists()


def test_a_base_width_no_proxy_can_have_is_refused(capsys):
    refused(capsys, ["probe", "--layers", "2", "--d-model", "48", "--heads", "2", "--param", "mup", "--base-width", "7"],
            "--base-width 7 is not allowed", "a multiple of the 2 heads (set by --heads)")  # fmt: skip
    assert ModelConfig(d_model=48, n_heads=2, param="mup", base_width=8).base_width == 8


def test_build_model_refuses_weights_beyond_free_memory_before_allocating():
    with pytest.raises(InputError, match="weights of its .* parameters alone"):
        build_model(ModelConfig(n_layers=10**9, d_model=64, n_heads=4))

"""The Python API raises depthlab's own errors for bad calls: ConfigError or InputError, or a TypeError
or ValueError that names the argument and what it takes; never an AttributeError, an IndexError from
inside torch, or an OverflowError."""

from __future__ import annotations

import pytest
import torch

from depthlab import ConfigError, InputError, ModelConfig, TrainConfig, build_model
from depthlab.errors import option, spoken_as_flags
from depthlab.model.explain import explain
from depthlab.model.param_groups import param_groups
from depthlab.model.stack import check_tokens
from depthlab.probe import probe
from depthlab.probe.compare import compare
from depthlab.probe.from_config import probe_config
from depthlab.report.data import load
from depthlab.study import StudyConfig, run_study
from depthlab.train import train

CFG = ModelConfig(n_layers=2, d_model=16, n_heads=2, max_len=16)
ENCDEC = CFG.replace(arch="encdec")


@pytest.fixture(scope="module")
def model():
    return build_model(CFG)


@pytest.mark.parametrize(
    "bad, error, needle",
    [
        (None, TypeError, "cfg must be a depthlab.ModelConfig, not NoneType"),
        ("x", TypeError, "not str"),
        ({}, TypeError, "ModelConfig.from_dict"),
    ],
)
def test_build_model_names_its_argument(bad, error, needle):
    with pytest.raises(error, match=needle):
        build_model(bad)
    with pytest.raises(error, match=needle):
        explain(bad)


@pytest.mark.parametrize(
    "tokens, error, needle",
    [
        (torch.full((2, 8), 256), ValueError, "ids from 256 to 256; the vocabulary is 0..255"),
        (torch.tensor([[3, -1]]), ValueError, "ids from -1 to 3"),
        (
            torch.zeros(8, dtype=torch.long),
            ValueError,
            r"2-D \(batch, tokens\), not of shape \(8,\); one sequence",
        ),
        (torch.zeros(1, 2, 8, dtype=torch.long), ValueError, r"not of shape \(1, 2, 8\)"),
        ([[1, 2]], TypeError, "must be a torch.Tensor of token ids"),
        (None, TypeError, "not NoneType"),
        (torch.zeros(2, 8), TypeError, "integer token ids"),
        (torch.zeros(2, 8, dtype=torch.bool), TypeError, "integer token ids"),
        (torch.zeros(2, 8, dtype=torch.uint8), TypeError, r"torch.long \(or int32\) token ids, not uint8"),
        (torch.zeros(0, 8, dtype=torch.long), ValueError, "tokens is empty"),
    ],
)
def test_bad_tokens_are_named_not_an_indexerror_from_torch(model, tokens, error, needle):
    with pytest.raises(error, match=needle):
        model(tokens)


def test_an_encoder_decoder_names_which_input_is_bad():
    m = build_model(ENCDEC)
    good = torch.zeros(2, 4, dtype=torch.long)
    with pytest.raises(ValueError, match="src holds ids"):
        m(torch.full((2, 4), 999), good)
    with pytest.raises(ValueError, match="tgt must be 2-D"):
        m(good, torch.zeros(4, dtype=torch.long))


def test_the_range_check_runs_where_it_is_cheap_and_on_request():
    """CPU tensors are checked by default; check=False skips the check (a GPU's default, where reading
    the ids would wait for the device); check=True checks anywhere."""
    bad = torch.full((1, 3), 300)
    with pytest.raises(ValueError):
        check_tokens(bad, "tokens", 256)
    check_tokens(bad, "tokens", 256, check=False)  # skipped: nothing raised
    with pytest.raises(ValueError):
        check_tokens(bad, "tokens", 256, check=True)
    if torch.cuda.is_available():  # the default on a GPU is not to sync
        check_tokens(bad.cuda(), "tokens", 256)
        with pytest.raises(ValueError):
            check_tokens(bad.cuda(), "tokens", 256, check=True)


@pytest.mark.parametrize(
    "batch, error, needle",
    [
        (torch.zeros(0, 8, dtype=torch.long), InputError, r"empty tensor of shape \(0, 8\)"),
        (torch.zeros(2, 0, dtype=torch.long), InputError, "empty tensor"),
        (None, TypeError, "batch must be a tensor"),
        ([], TypeError, "batch holds no tensor"),
    ],
)
def test_probe_on_an_empty_or_missing_batch(model, batch, error, needle):
    with pytest.raises(error, match=needle):
        probe(model, batch)


def test_probe_arguments_are_named(model):
    t = torch.randint(0, 256, (2, 8))
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        probe(None, t)
    with pytest.raises(ConfigError, match="jacobian_probes=5000"):
        probe(model, t, jacobian_probes=5000)
    with pytest.raises(ConfigError, match="seed=-1"):
        probe(model, t, seed=-1)
    with pytest.raises(ConfigError, match="batch_size=0"):
        probe_config(CFG, batch_size=0)
    with pytest.raises(TypeError, match="configs must be a list"):
        compare(None)
    with pytest.raises(ValueError, match="at least one"):
        compare([])


def test_train_names_its_arguments():
    with pytest.raises(TypeError, match="model_cfg must be a depthlab.ModelConfig, not NoneType"):
        train(None, None)
    with pytest.raises(TypeError, match="train_cfg must be a depthlab.TrainConfig, not dict"):
        train(CFG, {"steps": 2})
    with pytest.raises(InputError, match=r"^force=True needs out_dir"):
        train(CFG, TrainConfig(steps=1), force=True)
    with pytest.raises(TypeError, match="study must be a depthlab.study.StudyConfig"):
        run_study(None)


def test_a_run_folder_error_names_the_keywords_a_python_caller_passed(tmp_path):
    """The library names train's keywords (out_dir, resume=True, force=True); the command line, within
    spoken_as_flags, its flags: the same check, in the words of whoever called."""
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(InputError) as e:
        train(CFG, TrainConfig(steps=1), str(tmp_path))
    assert "out_dir" in str(e.value) and "resume=True continues" in str(e.value) and "--" not in str(e.value)
    with pytest.raises(InputError, match="^resume=True and force=True contradict"):
        train(CFG, TrainConfig(steps=1), str(tmp_path), resume=True, force=True)
    with spoken_as_flags(), pytest.raises(InputError) as e:
        train(CFG, TrainConfig(steps=1), str(tmp_path))
    assert str(e.value).startswith("--out ") and "--resume continues" in str(e.value)
    assert option("resume") == "resume=True"  # the block ended: Python's words again
    assert (tmp_path / "notes.txt").read_text() == "mine" and len(list(tmp_path.iterdir())) == 1


def test_config_values_beyond_what_torch_takes_are_config_errors():
    with pytest.raises(ConfigError, match="seed"):
        TrainConfig(seed=2**64)
    with pytest.raises(ConfigError, match="JSON text"):
        ModelConfig.from_json("{")
    with pytest.raises(ConfigError, match="symbols"):
        TrainConfig(task="lm", symbols=8)
    assert TrainConfig(task="copy", symbols=8).symbols == 8


def test_watch_and_advise_name_their_arguments(model):
    import depthlab
    from depthlab.advise.evidence import load_atlas
    from depthlab.study.transfer import transfers

    with pytest.raises(TypeError, match="model must be a torch.nn.Module, not NoneType"):
        depthlab.watch(None)
    with pytest.raises(TypeError, match="optimizer must be a torch.optim.Optimizer .* not str"):
        depthlab.watch(model, "adam")
    w = depthlab.watch(model, echo=None)
    with pytest.raises(
        TypeError, match="watcher.step: loss must be a float or a one-element tensor, not str"
    ):
        w.step("abc")
    with pytest.raises(ValueError, match=r"loss must be one number, not a tensor of shape \(2,\)"):
        w.step(torch.ones(2))
    import numpy as np

    w.step(np.array(3.0))  # a 0-d array is one number
    w.close()
    with pytest.raises(TypeError, match="model must be a depthlab.ModelConfig, not NoneType"):
        depthlab.advise(None, None)
    with pytest.raises(TypeError, match="train must be a depthlab.TrainConfig, not ModelConfig"):
        depthlab.advise(CFG, CFG)
    with pytest.raises(InputError, match="^stores no-such.sqlite: no study store there"):  # its argument
        load_atlas("no-such.sqlite")  # one path, not its characters
    with pytest.raises(TypeError, match="a study store's path or a list of them, not int"):
        load_atlas(5)
    # advise's own arguments are named as the caller passed them, never as the command line's flags
    # nor as the fields they become
    with pytest.raises(ConfigError, match="^alternatives='bogus' is not allowed: one of post, pre"):
        depthlab.advise(CFG, TrainConfig(), alternatives="bogus")
    with pytest.raises(ConfigError, match="^alternatives=3 is not allowed"):
        depthlab.advise(CFG, TrainConfig(), alternatives=("pre", 3))
    with pytest.raises(TypeError, match="^alternatives must be wrappings: .* not NoneType"):
        depthlab.advise(CFG, TrainConfig(), alternatives=None)
    with pytest.raises(InputError, match="^atlas: an empty path"):
        depthlab.advise(CFG, TrainConfig(), atlas="")
    with pytest.raises(TypeError, match="^atlas must be a study store's path or a list of them, not int"):
        depthlab.advise(CFG, TrainConfig(), atlas=5)
    with pytest.raises(InputError, match="^stores: an empty path"):
        load_atlas([""])
    from depthlab.advise.advice import check_alternatives

    assert check_alternatives(CFG, ["post", "pre", "post"]) == ("post", "pre")  # each ranked once
    with pytest.raises(ValueError, match="axis must be 'depth' or 'width', not 'Depth'"):
        transfers([], axis="Depth")
    with pytest.raises(ValueError, match="^target must be a depth >= 1, not 0$"):
        transfers([], axis="depth", target=0)  # was "math domain error" where the study had curves
    with pytest.raises(ValueError, match="^target must be a width >= 1, not nan$"):
        transfers([], axis="width", target=float("nan"))
    with pytest.raises(TypeError, match="^target must be a depth \\(a number\\), not str$"):
        transfers([], axis="depth", target="32")
    import numpy as np

    assert transfers([], axis="depth", target=np.int64(32)) == []  # numpy's numbers are numbers
    assert repr(load_atlas([])).startswith("<Atlas: ") and len(repr(load_atlas([]))) < 200


def test_open_names_its_argument_in_python_words():
    import depthlab

    with pytest.raises(TypeError, match="path must be a study store's path"):
        depthlab.open(3)
    with pytest.raises(InputError, match="^path: an empty path"):
        depthlab.open("")
    with pytest.raises(InputError, match="^db: an empty path"):
        run_study(StudyConfig.from_dict({"name": "s", "axes": {"seed": [0]}}), db="")
    with pytest.raises(InputError, match="^db: an empty path"):
        load("")


@pytest.mark.parametrize(
    "kw, field",
    [({"lr": float("nan")}, "lr"), ({"lr": -1}, "lr"), ({"lr": "x"}, "lr"), ({"lr": 1e-3, "weight_decay": -1}, "weight_decay"),
     ({"lr": 1e-3, "eps": float("nan")}, "eps")],
)  # fmt: skip
def test_param_groups_refuses_what_train_refuses(kw, field):
    """param_groups(model, lr=nan) gave groups no optimiser can step with: its lr, eps and weight decay are
    checked as TrainConfig checks them, each named as passed."""
    model = build_model(ModelConfig(n_layers=1, d_model=16, n_heads=2))
    with pytest.raises(ConfigError, match=f"^{field}="):
        param_groups(model, **kw)
    with pytest.raises(TypeError, match="^model must be a torch module, not str"):
        param_groups("model", lr=1e-3)


def test_train_names_an_out_dir_that_is_no_path():
    """train(out_dir=5) failed deep in os.path ("expected str, bytes or os.PathLike object, not int")."""
    with pytest.raises(TypeError, match="^out_dir must be the run folder's path .*not int$"):
        train(CFG, TrainConfig(steps=2, batch_size=2, seq_len=8), out_dir=5)

"""The reproductions' run cache: a loaded run is the trained one where the checks read it, and anything
that determines a run (a config, the training code) misses the cache."""

from __future__ import annotations

import os

import pytest
import torch

from depthlab.config import TrainConfig
from depthlab_lab.reproduce import lm_runs, run_cache

MODEL = {"n_layers": 2}
TRAIN = {"steps": 6, "log_every": 2, "eval_every": 3, "eval_batches": 1, "seed": 1}


@pytest.fixture
def cache(tmp_path):
    root = str(tmp_path / "cache")
    run_cache.use(root)
    run_cache.reset_tally()
    lm_runs.clear_cache()
    yield root
    run_cache.use(None)
    lm_runs.clear_cache()


def _check_inputs(run: lm_runs.Run) -> dict:
    """Everything a claim reads from a Run, the module's output on a fixed batch included."""
    tokens = lm_runs.lm_batches(1, 2, 16, seed=0)[0]
    with torch.no_grad():
        out = run.model(tokens[:, :-1])
    d = run.to_dict()
    d.pop("loaded")
    extra = {"first": run.layers_first, "last": run.layers_last, "grads": run.grad_by_step, "step": run.step}
    return {**d, **extra, "out": out, "training": run.model.training, "rng": torch.rand(3)}


def _equal(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and a != a:
        return b != b
    return a == b


def test_a_loaded_run_gives_the_same_check_inputs(cache):
    trained = lm_runs.train_run("a", MODEL, TRAIN, quiet=True)
    first = _check_inputs(trained)
    assert not trained.loaded and run_cache.TALLY.trained == 1
    assert len(os.listdir(cache)) == 1 and os.listdir(cache)[0].endswith(".pt")
    lm_runs.clear_cache()  # a new sitting: nothing in memory
    torch.manual_seed(123)  # whatever the process drew before, the run leaves the same RNG state
    loaded = lm_runs.train_run("a", MODEL, TRAIN, quiet=True)
    assert loaded.loaded and run_cache.TALLY.loaded == 1
    assert loaded.model is not trained.model
    assert _equal(first, _check_inputs(loaded))
    sd_a, sd_b = trained.model.state_dict(), loaded.model.state_dict()
    assert sd_a.keys() == sd_b.keys() and all(torch.equal(sd_a[k], sd_b[k]) for k in sd_a)
    assert loaded.commit == trained.commit == run_cache.current_commit()


def test_a_config_or_the_training_code_misses_the_cache(cache, monkeypatch):
    lm_runs.train_run("a", MODEL, TRAIN, quiet=True)
    mcfg, tcfg = lm_runs.configs(MODEL, TRAIN)
    assert run_cache.is_stored(mcfg, tcfg)
    for model, train in (
        (MODEL, {**TRAIN, "seed": 2}),
        ({"n_layers": 3}, TRAIN),
        (MODEL, {**TRAIN, "lr": 2e-3}),
    ):
        assert not run_cache.is_stored(*lm_runs.configs(model, train))
    monkeypatch.setattr(torch, "get_num_threads", lambda: 7)
    assert not run_cache.is_stored(mcfg, tcfg)
    monkeypatch.undo()
    assert run_cache.is_stored(mcfg, tcfg)
    monkeypatch.setattr(run_cache, "code_digest", lambda: "0" * 16)
    assert not run_cache.is_stored(mcfg, tcfg)
    lm_runs.clear_cache()
    assert not lm_runs.train_run("a", MODEL, TRAIN, quiet=True).loaded  # trained again, then stored
    assert run_cache.is_stored(mcfg, tcfg) and len(os.listdir(cache)) == 2


def test_the_data_is_in_the_key(tmp_path, monkeypatch):
    """Another data file's bytes (or another interpreter's standard library) is another run."""
    data = tmp_path / "text.txt"
    data.write_text("abc" * 400)
    mcfg, tcfg = lm_runs.configs(MODEL, {**TRAIN, "data": str(data)})
    first = run_cache.run_key(mcfg, tcfg)
    data.write_text("xyz" * 400)
    assert run_cache.run_key(mcfg, tcfg) != first
    mcfg, tcfg = lm_runs.configs(MODEL, TRAIN)
    before = run_cache.run_key(mcfg, tcfg)
    monkeypatch.setattr(run_cache, "load_corpus", lambda path, n: type("C", (), {"info": {"sha256": "0"}})())
    assert run_cache.run_key(mcfg, tcfg) != before


def test_the_code_digest_covers_the_training_code_not_the_checks():
    modules = run_cache.training_modules()
    for name in ("depthlab.train.loop", "depthlab.model.stack", "depthlab.corpus", "depthlab.watch.outcome"):
        assert name in modules
    assert "depthlab_lab.reproduce.run_cache" in modules
    assert not [m for m in modules if m.startswith("depthlab_lab.reproduce.claims")]
    assert (
        "depthlab_lab.reproduce.lm_runs" not in modules
        and "depthlab_lab.reproduce.reproduction" not in modules
    )


def test_no_cache_in_use_trains_and_stores_nothing(tmp_path):
    run_cache.use(None)
    run_cache.reset_tally()
    lm_runs.clear_cache()
    run = lm_runs.train_run("a", MODEL, {**TRAIN, "steps": 2}, quiet=True)
    assert not run.loaded and run_cache.TALLY.trained == 0
    lm_runs.clear_cache()


def test_cuda_and_compiled_runs_are_not_cached():
    assert run_cache.cacheable(TrainConfig(device="cpu"))
    assert not run_cache.cacheable(TrainConfig(device="cuda"))
    assert not run_cache.cacheable(TrainConfig(device="cpu", compile=True))


def test_a_torn_file_is_never_left_behind(cache, monkeypatch):
    def fail(obj, f, *args, **kwargs):
        with open(f, "wb") as out:
            out.write(b"half a run")
        raise KeyboardInterrupt  # killed while writing

    monkeypatch.setattr(torch, "save", fail)
    with pytest.raises(KeyboardInterrupt):
        lm_runs.train_run("a", MODEL, {**TRAIN, "steps": 2}, quiet=True)
    assert os.listdir(cache) == []


def test_an_unreadable_file_is_a_miss_and_is_replaced(cache, capsys):
    mcfg, tcfg = lm_runs.configs(MODEL, {**TRAIN, "steps": 2})
    path = run_cache.path_of(cache, run_cache.run_key(mcfg, tcfg))
    os.makedirs(cache)
    with open(path, "wb") as f:
        f.write(b"not a run")
    run = lm_runs.train_run("a", MODEL, {**TRAIN, "steps": 2}, quiet=True)
    assert not run.loaded and "unreadable" in capsys.readouterr().err
    assert run_cache.load(path, mcfg).result.val_loss == run.val_loss


def test_every_claim_trains_through_the_run_cache():
    """A claim that called the training loop itself (batchnorm, batchnorm-same, model-update,
    model-update-stream did) stored nothing under --cache: an interrupted run trained every run again."""
    import depthlab.train
    from depthlab_lab.reproduce import claims, load_all

    load_all()
    direct = [
        name
        for name, module in sorted(vars(claims).items())
        if getattr(module, "__name__", "").startswith(claims.__name__ + ".")
        and any(value is depthlab.train.train for value in vars(module).values())
    ]
    assert direct == []


def test_a_claim_run_again_loads_its_runs_from_the_cache(cache, one_thread):
    from depthlab_lab.reproduce.reproduction import run_claim

    first = run_claim("batchnorm-same", quick=True).to_dict()
    assert run_cache.TALLY.trained == 2 and len(os.listdir(cache)) == 2
    again = run_claim("batchnorm-same", quick=True).to_dict()
    assert run_cache.TALLY.loaded == 2 and again == first


def test_the_cache_help_names_the_claims_that_keep_their_runs_in_a_study_store(capsys):
    """Their runs go to the study store, not --cache: the help says which claims, read from their code."""
    import inspect

    from depthlab.cli import main
    from depthlab_lab.reproduce import REPRODUCTIONS

    studies = [
        name
        for name, fn in REPRODUCTIONS.items()
        if any(
            s in inspect.getsource(inspect.getmodule(fn))
            for s in ("run_study(", "transfer_runs", "lr_transfer")
        )
    ]
    with pytest.raises(SystemExit):
        main(["reproduce", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert studies and all(
        name in text.rsplit("--cache CACHE", 1)[1].split("--threads")[0] for name in studies
    )

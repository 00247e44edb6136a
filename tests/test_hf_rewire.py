"""What-if on an imported family beyond the probe: ``train --hf`` and a study grid whose base (or axis)
is a Hugging Face config, re-wired by the other fields; and what the probe measures of any stack's
wiring (how many norms read the stream entering a block), checked on depthlab's own wrappings.
"""

from __future__ import annotations

import json

import hf_families as H
import pytest
import torch

from depthlab import ConfigError, InputError, ModelConfig, build_model
from depthlab.cli import main
from depthlab.corpus import text_batch
from depthlab.probe import probe
from depthlab.study.grid import StudyConfig

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def gemma(tmp_path) -> str:
    pytest.importorskip("transformers")
    path = tmp_path / "gemma2.json"
    H.gemma2().config.to_json_file(path)
    return str(path)


def test_a_grid_starts_from_an_hf_config_and_its_axes_rewire_it(gemma):
    study = StudyConfig.from_dict(
        {
            "name": "gemma-rewired",
            "model": {"hf": gemma, "vocab_size": 256},
            "train": {"steps": 2, "batch_size": 2, "seq_len": 16},
            "axes": {"wrap": ["sandwich", "parallel", "deepnorm"]},
        }
    )
    runs = study.expand()
    assert [r.model.wrap for r in runs] == ["sandwich", "parallel", "deepnorm"]
    for r in runs:  # the family's options travel with every run; the fields given change it
        assert (r.model.family.attn_softcap, r.model.family.gain_offset, r.model.vocab_size) == (
            5.0,
            True,
            256,
        )
    assert len({r.hash for r in runs}) == 3


def test_hf_can_be_an_axis_and_a_bad_path_is_one_error(gemma, tmp_path):
    olmo = tmp_path / "olmo2.json"
    H.olmo2().config.to_json_file(olmo)
    grid = {"name": "two", "model": {"vocab_size": 256}, "train": {"steps": 2, "seq_len": 16}}
    runs = StudyConfig.from_dict({**grid, "axes": {"hf": [gemma, str(olmo)]}}).expand()
    assert [r.model.wrap for r in runs] == ["sandwich", "reorder"]
    with pytest.raises(InputError, match="no such file"):
        StudyConfig.from_dict({**grid, "model": {"hf": str(tmp_path / "missing.json")}})
    with pytest.raises(ConfigError, match="model.hf"):
        StudyConfig.from_dict({**grid, "model": {"hf": 3}})


def test_train_hf_trains_the_rewired_family(gemma, tmp_path, capsys):
    out = tmp_path / "run"
    args = f"train --hf {gemma} --vocab 256 --wrap parallel --steps 2 --batch-size 2 --seq-len 16 --quiet"
    assert main([*args.split(), "--out", str(out)]) == 0
    model = json.loads((out / "config.json").read_text())["model"]  # the family options in their group
    assert (model["wrap"], model["family"]["logit_softcap"], model["family"]["sliding_window"]) == (
        "parallel",
        3.0,
        4,
    )
    assert "train loss" in capsys.readouterr().out


@pytest.mark.parametrize(
    "wrap, reads, normalised",
    [
        ("pre", 1, False),
        ("parallel", 2, False),
        ("parallel_shared", 1, False),
        ("post", 0, True),
        ("reorder", 0, False),
    ],
)
def test_the_probe_counts_the_norms_that_read_the_entering_stream(wrap, reads, normalised):
    cfg = ModelConfig(n_layers=3, d_model=16, n_heads=2, wrap=wrap, vocab_size=256)
    torch.manual_seed(0)
    r = probe(build_model(cfg), text_batch(2, 8, 256, 0), perturbation=0)
    assert (
        r.config["stack"]["norms_on_input"] == reads and r.config["stack"]["stream_normalised"] is normalised
    )


def _sides(capsys) -> dict:
    """Layers per side in the explain JSON printed last."""
    layers = json.loads(capsys.readouterr().out)["layers"]
    return {side: sum(x["side"] == side for x in layers) for side in ("encoder", "decoder")}


@pytest.mark.parametrize("family", ["bart", "marian", "t5"])
def test_layers_and_arch_rewire_an_encoder_decoder_family(family, tmp_path, capsys):
    """The family's own per-stack depths (2 and 3 layers here) give way to --layers and --arch, unless
    --enc-layers / --dec-layers are given too; the same in a grid's hf: key."""
    path = tmp_path / f"{family}.json"
    getattr(H, family)().config.to_json_file(path)
    explain = ["explain", "--hf", str(path), "--json", "-"]
    assert main(explain) == 0 and _sides(capsys) == {"encoder": 2, "decoder": 3}
    assert main([*explain, "--layers", "5"]) == 0 and _sides(capsys) == {"encoder": 5, "decoder": 5}
    assert main([*explain, "--layers", "4", "--dec-layers", "1"]) == 0
    assert _sides(capsys) == {"encoder": 4, "decoder": 1}
    assert main([*explain, "--arch", "decoder"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["config"]["arch"] == "decoder" and not out.err
    grid = {"name": "deeper", "train": {"task": "copy", "steps": 2, "seq_len": 16}}
    (run,) = StudyConfig.from_dict({**grid, "model": {"hf": str(path), "n_layers": 6}}).expand()
    assert (run.model.n_layers, run.model.enc_layers, run.model.dec_layers) == (6, None, None)

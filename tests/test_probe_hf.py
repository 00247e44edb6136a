"""``probe --hf`` and ``explain --hf`` on the families people train today: as transformers builds them,
re-wired ("my model, with DeepNorm"), what cannot be probed refused in one line, ignored flags named.

Every model is a tiny config saved to a temporary folder (random weights; nothing is downloaded).
"""

from __future__ import annotations

import json

import hf_families as H
import pytest

import depthlab
from depthlab.cli import main
from depthlab.doctor.lr_limit import limit_of
from depthlab.doctor.record import load_record
from depthlab.probe.locate import locate_stack
from depthlab.probe.saved_hf import probe_hf
from depthlab.probe.update_size import relative_update

tf = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")

SMALL = "--seq-len 16 --batch-size 2"
# one saved config per imported family (and the shapes that make a family what it is)
FAMILIES = {
    "GPT-2": lambda: tf.GPT2LMHeadModel(tf.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=H.VOCAB)),
    "BERT": lambda: tf.BertModel(
        tf.BertConfig(
            num_hidden_layers=2,
            hidden_size=32,
            num_attention_heads=4,
            intermediate_size=48,
            vocab_size=H.VOCAB,
        )
    ),
    "Llama": lambda: tf.LlamaForCausalLM(
        tf.LlamaConfig(
            num_hidden_layers=2,
            hidden_size=32,
            num_attention_heads=4,
            intermediate_size=48,
            vocab_size=H.VOCAB,
        )
    ),
    "Mistral": H.mistral,
    "Qwen2": H.qwen2,
    "Qwen3": H.qwen3,
    "OLMo 2": H.olmo2,
    "Gemma 2": H.gemma2,
    "Gemma 3": H.gemma3,
    "GPT-NeoX": H.neox,
    "GPT-J": H.gptj,
    "Falcon": lambda: H.falcon(new_decoder_architecture=True, num_kv_heads=2),
    "Phi": H.phi,
    "OPT": lambda: H.opt(do_layer_norm_before=False, word_embed_proj_dim=16),
    "BART": H.bart,
    "Marian": H.marian,
    "T5": H.t5,
}


def _save(tmp_path, name: str, config) -> str:
    path = tmp_path / f"{name.replace(' ', '_')}.json"
    config.to_json_file(path)
    return str(path)


def _probe(args: str, tmp_path, capsys) -> tuple[dict, str, str]:
    out = tmp_path / "probe.json"
    assert main([*args.split(), "--json", str(out)]) == 0
    io = capsys.readouterr()
    return json.loads(out.read_text()), io.out, io.err


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_family_is_probed_as_built_and_named(family, tmp_path, capsys):
    path = _save(tmp_path, family, FAMILIES[family]().config)
    d, _, _ = _probe(f"probe --hf {path} {SMALL}", tmp_path, capsys)
    assert d["config"]["stack"]["wiring"].startswith(f"{family}: ")
    assert "transformers' init" in d["config"]["stack"]["init"]
    assert d["verdicts"] and len(d["layers"]) >= 3
    main(f"probe --hf {path} {SMALL}".split())
    out = capsys.readouterr().out
    assert f"wiring: {family}: " in out and "grad_norm" in out


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_family_is_rewired_with_deepnorm(family, tmp_path, capsys):
    config = FAMILIES[family]().config
    path = _save(tmp_path, family, config)
    d, _, _ = _probe(f"probe --hf {path} {SMALL} --wrap deepnorm", tmp_path, capsys)
    model = d["config"]["model"]
    assert model["wrap"] == "deepnorm" and d["config"]["stack"]["kind"] == "depthlab"
    assert d["config"]["stack"]["stream_normalised"] is True  # DeepNorm renormalises: the wiring changed
    assert "re-wired" in d["config"]["probe"]["source"]
    assert model["vocab_size"] == H.VOCAB  # the shape is the family's, not the flags' defaults


def test_the_header_names_the_wiring_in_depthlab_words(tmp_path, capsys):
    path = _save(tmp_path, "gemma2", H.gemma2().config)
    d, out, _ = _probe(f"probe --hf {path} {SMALL}", tmp_path, capsys)
    wiring = d["config"]["stack"]["wiring"]
    for words in (
        "sandwich",
        "rmsnorm (1 + w)",
        "attention soft-cap 5",
        "logit soft-cap 3",
        "sliding window 4",
    ):
        assert words in wiring
    olmo = _save(tmp_path, "olmo2", H.olmo2().config)
    d, _, _ = _probe(f"probe --hf {olmo} {SMALL}", tmp_path, capsys)
    assert (
        d["config"]["stack"]["wiring"].startswith("OLMo 2: reorder")
        and "whole projection" in d["config"]["stack"]["wiring"]
    )


def test_compare_rewires_the_same_shape(tmp_path, capsys):
    path = _save(tmp_path, "neox", H.neox().config)
    out = tmp_path / "cmp.json"
    assert (
        main([*f"probe --hf {path} {SMALL} --compare --wrap parallel,pre,post".split(), "--json", str(out)])
        == 0
    )
    runs = json.loads(out.read_text())
    assert [r["config"]["model"]["wrap"] for r in runs] == ["parallel", "pre", "post"]
    assert {r["config"]["model"]["family"]["rope_dims"] for r in runs} == {
        4
    }  # GPT-NeoX's partial rotary kept
    assert "wrap=post" in capsys.readouterr().out


@pytest.mark.parametrize(
    "make, says",
    [
        (
            lambda: tf.ViTConfig(
                hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
            ),
            "pixel_values",
        ),
        (
            lambda: tf.WhisperConfig(
                d_model=32,
                encoder_layers=1,
                decoder_layers=1,
                encoder_attention_heads=4,
                decoder_attention_heads=4,
                encoder_ffn_dim=64,
                decoder_ffn_dim=64,
            ),
            "input_features",
        ),
        (lambda: tf.ResNetConfig(hidden_sizes=[8, 16], depths=[1, 1], embedding_size=8), "pixel_values"),
        (
            lambda: tf.MambaConfig(hidden_size=32, num_hidden_layers=2, vocab_size=300, state_size=4),
            "recurrent",
        ),
        (
            lambda: tf.FNetConfig(hidden_size=32, num_hidden_layers=2, intermediate_size=64, vocab_size=64),
            "no attention",
        ),
    ],
)
def test_what_cannot_be_probed_is_one_line_and_exit_2(make, says, tmp_path, capsys):
    path = tmp_path / "config.json"
    make().to_json_file(path)
    assert main(["probe", "--hf", str(path), *SMALL.split()]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err and "Traceback" not in err


TINY_TOWER = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64}
GPT2 = {"model_type": "gpt2", "n_embd": 32, "n_head": 4, "n_layer": 2, "vocab_size": 64, "n_positions": 32}
RECURRENT = {"hidden_size": 32, "num_hidden_layers": 2, "vocab_size": 64}
# configs as a user might save them (written as JSON: the config classes would refuse to make some):
# what probe --hf says, and what explain / train / probe with model flags say where it differs
BAD_CONFIGS = {
    "gpt2-width-30": (
        {**GPT2, "n_embd": 30},
        ["transformers cannot build a model from this config", "divisible"],
        ["d_model=30 is not allowed: a multiple of n_heads=4", "GPT-2 config"],
    ),
    "llama-5-heads": (
        {"model_type": "llama", **TINY_TOWER, "num_attention_heads": 5, "vocab_size": 64},
        ["transformers refuses this config", "not a multiple of the number of attention heads (5)"],
        None,
    ),
    "gpt2-layers-four": (
        {**GPT2, "n_layer": "four"},
        ["transformers refuses this config", "'n_layer' expected int"],
        None,
    ),
    "rwkv": (
        {"model_type": "rwkv", **RECURRENT, "attention_hidden_size": 32, "intermediate_size": 64},
        ["a rwkv model is recurrent", "not a Transformer"],
        None,
    ),
    "mamba": ({"model_type": "mamba", **RECURRENT, "state_size": 4}, ["a mamba model is recurrent"], None),
    "clip": (
        {
            "model_type": "clip",
            "text_config": {**TINY_TOWER, "vocab_size": 64},
            "vision_config": {**TINY_TOWER, "image_size": 32, "patch_size": 8},
        },
        ["no vocab_size at its top level", "text_config"],
        ["depthlab does not import model_type 'clip'"],
    ),  # fmt: skip
}


@pytest.mark.parametrize("name", BAD_CONFIGS)
def test_a_bad_or_odd_config_is_one_line_and_exit_2(name, tmp_path, capsys):
    """Each refusal is one line on stderr and exit 2, whichever command reads the folder: the probe as
    built, and the commands that import the family (explain, train, probe with model flags)."""
    raw, probe_says, import_says = BAD_CONFIGS[name]
    folder = tmp_path / name  # a save_pretrained folder: its config.json
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(raw))
    commands = {
        "probe": ["probe", *SMALL.split()],
        "probe --layers": ["probe", "--layers", "3", *SMALL.split()],
        "explain --layers": ["explain", "--layers", "2"],
        "train --layers": ["train", "--layers", "2", "--steps", "1", "--out", str(tmp_path / "run")],
    }
    imported = "clip" not in name  # clip: probe --layers probes it as built (its flags ignored), and refuses
    for label, command in commands.items():
        code = main([*command, "--hf", str(folder)])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, (label, err)
        assert err.startswith(f"depthlab {command[0]}: error: "), (label, err)
        as_built = label == "probe" or (label == "probe --layers" and not imported)
        says = probe_says if as_built or import_says is None else import_says
        assert all(s in err for s in says), (label, err)
    assert not (tmp_path / "run").exists()


def test_xlnet_has_no_position_limit_and_is_probed(tmp_path, capsys):
    """XLNet's max_position_embeddings is -1: no limit, not a limit of -1."""
    cfg = tf.XLNetConfig(d_model=32, n_layer=2, n_head=4, d_inner=64, vocab_size=64)
    d, _, _ = _probe(f"probe --hf {_save(tmp_path, 'xlnet', cfg)} {SMALL}", tmp_path, capsys)
    assert len(d["layers"]) == 3 and d["config"]["stack"]["wiring"].startswith("xlnet (not imported")


def test_a_family_not_imported_is_probed_as_built_and_ignored_flags_are_named(tmp_path, capsys):
    cfg = tf.MixtralConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=48, vocab_size=300, num_local_experts=2,
    )  # fmt: skip
    path = _save(tmp_path, "mixtral", cfg)
    d, _, err = _probe(f"probe --hf {path} {SMALL} --layers 48 --wrap post", tmp_path, capsys)
    assert "--layers, --wrap ignored" in err and len(d["layers"]) == 3  # 2 layers: as transformers built it
    wiring = d["config"]["stack"]["wiring"]
    assert wiring.startswith("mixtral (not imported") and "1 norm reads the stream" in wiring


def test_phi3_is_probed_by_the_generic_path(tmp_path, capsys):
    cfg = tf.Phi3Config(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=48, vocab_size=300, pad_token_id=0,
    )  # fmt: skip
    d, out, _ = _probe(f"probe --hf {_save(tmp_path, 'phi3', cfg)} {SMALL}", tmp_path, capsys)
    assert "pre-LN style" in d["config"]["stack"]["wiring"] and d["verdicts"]


def test_a_refused_variant_of_an_imported_family_is_still_probed_as_built(tmp_path, capsys):
    rope = {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}
    path = _save(tmp_path, "mistral", H.mistral(rope_parameters=rope).config)
    d, _, _ = _probe(f"probe --hf {path} {SMALL}", tmp_path, capsys)
    assert d["config"]["stack"]["wiring"].startswith("mistral (rope_type='linear' not imported; measured)")
    assert main(["probe", "--hf", path, "--wrap", "post"]) == 2  # re-wiring needs the import
    assert "rope_type" in capsys.readouterr().err


def test_saved_weights_cannot_be_rewired(tmp_path, capsys):
    folder = tmp_path / "qwen2"
    H.qwen2().save_pretrained(folder)
    assert main(["probe", "--hf", str(folder), "--hf-weights", "--wrap", "post"]) == 2
    assert "--hf-weights" in capsys.readouterr().err


def test_explain_hf_prints_the_family_and_what_the_flags_change(tmp_path, capsys):
    path = _save(tmp_path, "t5", H.t5().config)
    assert main(["explain", "--hf", path]) == 0
    out = capsys.readouterr().out
    assert out.startswith("T5 (model_type t5") and "relative position buckets (8, max distance 20)" in out
    assert "imported exactly:" in out and "limits:" in out
    js = tmp_path / "explain.json"
    assert main(["explain", "--hf", path, "--wrap", "sandwich", "--json", str(js)]) == 0
    info = json.loads(js.read_text())
    assert info["family"]["changed"] == ["wrap=sandwich"] and info["config"]["wrap"] == "sandwich"
    assert info["config"]["position"] == "relative" and info["init"] == "xavier, tied head, embeddings x 1"


def test_refusals_name_the_imported_families_in_the_terms_of_where_the_path_was_given(tmp_path, capsys):
    """--hf messages speak of probe --hf; a grid's hf: key speaks of the grid, never of a flag its
    user did not type; an unknown model_type names the types depthlab imports."""
    from depthlab.study.grid import StudyConfig

    xlnet = _save(tmp_path, "xlnet", tf.XLNetConfig(d_model=32, n_layer=2, n_head=4, vocab_size=64))
    unknown = tmp_path / "unknown.json"
    unknown.write_text('{"model_type": "no-such-type"}')
    for path in (xlnet, str(unknown)):
        assert main(["explain", "--hf", path]) == 2
        err = capsys.readouterr().err
        hint = " (probe --hf without model flags probes a token Transformer of any type as transformers builds it)"
        # a type transformers knows can still be probed as built; one it does not know cannot
        assert "gpt2, bert, llama" in err and err.rstrip().endswith("t5" + hint * (path == xlnet))
        assert "README" not in err
        with pytest.raises(depthlab.InputError) as grid_error:
            StudyConfig.from_dict({"name": "g", "model": {"hf": path}, "train": {"steps": 2}})
        said = str(grid_error.value)
        assert said.startswith(f"model.hf {path}:" if path == xlnet else "model.hf: model_type")
        assert "--hf" not in said and "gpt2, bert, llama" in said
        assert ("a study trains depthlab's own model" in said) == (path == xlnet)
    mamba = _save(tmp_path, "mamba", tf.MambaConfig(hidden_size=32, num_hidden_layers=2, vocab_size=64))
    with pytest.raises(depthlab.InputError) as grid_error:
        StudyConfig.from_dict({"name": "g", "model": {"hf": mamba}, "train": {"steps": 2}})
    assert str(grid_error.value).startswith(f"model.hf {mamba}: a mamba model is recurrent")


@pytest.mark.parametrize("family", ["Llama", "Gemma 2"])
def test_probe_hf_and_advise_hf_give_one_safe_lr(family, tmp_path, capsys):
    # the relative update is calibrated on depthlab's layout (q, k, v fused; a gated FFN's inputs fused);
    # transformers splits them, which moves the median over matrices by about 20% though Adam trains the
    # same weights alike: probe --hf measures it on depthlab's layout, as advise --hf does
    shape = dict(hidden_size=128, num_attention_heads=4, intermediate_size=344, num_hidden_layers=4)
    if family == "Llama":
        hf = tf.LlamaForCausalLM(tf.LlamaConfig(**shape, vocab_size=256))
    else:
        hf = H.gemma2(**shape, head_dim=32, vocab_size=256)
    path = _save(tmp_path, family, hf.config)
    flags = "--lr 3e-3 --warmup 100 --seq-len 16 --batch-size 4"
    out = tmp_path / "advice.json"
    assert main([*f"advise --hf {path} {flags} --alternatives".split(), "", "--json", str(out)]) == 0
    advised = json.loads(out.read_text())["limit"]["lr_limit"]
    probed = probe_hf(path, lr=3e-3, warmup=100, seq_len=16, batch_size=4)
    assert "depthlab's" in probed.config["probe"]["relative_update_layout"]
    assert limit_of(probed, load_record())[0].lr_limit == pytest.approx(advised, rel=0.05)
    own = relative_update(locate_stack(hf).layer_params, 3e-3)  # transformers' own layout, for contrast
    assert own < 0.9 * probed.config["probe"]["relative_update"]
    # and the calibrated call: probe --hf --lr ends on the probability advise --hf leads with
    advice = json.loads(out.read_text())
    said, printed, _ = _probe(f"probe --hf {path} {flags}", tmp_path, capsys)
    expected = said["config"]["probe"]["expected"]
    assert expected["p_trains"] == pytest.approx(advice["p_trains"], abs=0.03)
    assert expected["steps"] == advice["train"]["steps"]
    assert f"P(trains) = {expected['p_trains']:.2f}" in printed


def test_heads_that_do_not_split_an_imported_width_are_refused_as_the_heads_typed(tmp_path, capsys):
    """--heads over a family's width names --heads (the flag typed), not the width the config set; a
    width typed over the family's heads names the width and the heads as the config's field."""
    path = _save(tmp_path, "llama", tf.LlamaConfig(**TINY_TOWER, num_key_value_heads=4, vocab_size=64))
    assert main(["explain", "--hf", path, "--heads", "5"]) == 2
    err = capsys.readouterr().err
    assert err.endswith("error: --heads 5 is not allowed: a divisor of d_model 32 (ask for 4 or 8)\n")
    assert main(["explain", "--hf", path, "--d-model", "30"]) == 2
    assert "--d-model 30 is not allowed: a multiple of n_heads=4" in capsys.readouterr().err

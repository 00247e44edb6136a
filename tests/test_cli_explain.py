"""depthlab explain and the CLI's error contract (one line on stderr, exit code 2)."""

import json
import subprocess
import sys

import pytest

from depthlab.cli import main


def test_explain_bert_base_ffn_weights(capsys):
    """The residual-stream chapter: one BERT-base FFN sublayer has 2 x 768 x 3072 = 4,718,592 weights."""
    rc = main("explain --arch encoder --layers 12 --d-model 768 --heads 12 --d-ff 3072 --json -".split())
    assert rc == 0
    info = json.loads(capsys.readouterr().out)
    assert info["params"]["ffn_weights"] == 4718592
    assert info["params"]["attn_weights"] == 4 * 768 * 768
    assert info["final_norm"] is True and len(info["layers"]) == 12  # default wrap pre: final norm on


def test_explain_shape_for_encdec_post_vs_pre(capsys):
    main("explain --arch encdec --layers 2 --d-model 32 --heads 4 --wrap post --json -".split())
    post = json.loads(capsys.readouterr().out)
    main("explain --arch encdec --layers 2 --d-model 32 --heads 4 --wrap pre --json -".split())
    pre = json.loads(capsys.readouterr().out)
    assert [layer["side"] for layer in post["layers"]] == ["encoder"] * 2 + ["decoder"] * 2
    dec = post["layers"][-1]["sublayers"]
    assert [s["name"] for s in dec] == ["attn", "cross", "ffn"]
    assert all(s["norm_after_add"] and not s["norm_in"] for s in dec)
    assert all(s["norm_in"] and not s["norm_after_add"] for s in pre["layers"][-1]["sublayers"])
    assert post["final_norm"] is False and pre["final_norm"] is True
    keys = {
        "name",
        "wrap",
        "formula",
        "source",
        "norm_in",
        "norm_out",
        "norm_after_add",
        "residual",
        "constants",
    }
    assert keys == set(dec[0]) and dec[0]["constants"] == {} and dec[0]["formula"] == "x = LN(x + F(x))"


def test_explain_deepnorm_constants_and_warnings(capsys):
    main("explain --layers 64 --d-model 16 --heads 2 --wrap deepnorm --json -".split())
    info = json.loads(capsys.readouterr().out)
    sub = info["layers"][0]["sublayers"][0]
    assert set(sub["constants"]) == {"alpha", "beta"}
    assert sub["constants"]["alpha"] == pytest.approx(3.36, abs=0.005)
    assert sub["constants"]["beta"] == pytest.approx(0.210, abs=0.0005)
    main("explain --layers 4 --wrap pre --final-norm off --no-residual attn --json -".split())
    warnings = " ".join(json.loads(capsys.readouterr().out)["warnings"])
    assert "final norm off" in warnings and "residual off for attn" in warnings


@pytest.mark.parametrize(
    "wrap, with_norm, without",
    [
        ("post", "x = LN(x + F(x))", "x = x + F(x)"),
        ("pre", "x = x + F(LN(x))", "x = x + F(x)"),
        ("layerscale", "x = x + lambda*F(LN(x))", "x = x + lambda*F(x)"),
        ("parallel", "x = x + sum_i F_i(LN_i(x))", "x = x + sum_i F_i(x)"),
    ],
)
def test_explain_shows_the_stacks_formula_without_ln_where_the_norm_is_none(wrap, with_norm, without, capsys):
    main(f"explain --layers 2 --d-model 16 --heads 2 --wrap {wrap} --json -".split())
    assert {s["formula"] for s in json.loads(capsys.readouterr().out)["layers"][0]["sublayers"]} == {
        with_norm
    }
    assert main(f"explain --layers 2 --d-model 16 --heads 2 --wrap {wrap} --norm none".split()) == 0
    out = capsys.readouterr().out
    assert without in out and "LN" not in out


def test_without_norm_keeps_what_the_norm_was_applied_to():
    from depthlab.model.explain import without_norm

    assert without_norm("x = x + m*LN(F(LN(x)))") == "x = x + m*F(x)"
    assert without_norm("x = x + m*F(LN(x)/sqrt(l))") == "x = x + m*F(x/sqrt(l))"
    assert without_norm("x = x + a*F(x)") == "x = x + a*F(x)"


def test_explain_text_groups_identical_layers(capsys):
    assert main("explain --layers 8 --wrap mix".split()) == 0
    out = capsys.readouterr().out
    assert "dec 1-2" in out and "dec 3-8" in out and "final norm: on" in out


@pytest.mark.parametrize(
    "argv, needle",
    [
        ("explain --wrap prenorm", "--wrap prenorm is not allowed"),  # the flag typed, not the field
        ("explain --d-model 30 --heads 4", "--d-model 30 is not allowed"),
        ("explain --layers 0", "--layers 0 is not allowed"),
        ("explain --no-residual mlp", "--no-residual mlp is not allowed"),
        ("explain --layers seven", "invalid int value"),
        ("reproduce no-such-claim", "NAME='no-such-claim'"),
        ("reproduce no-such-claim", "list, all, tour, doctor, ladder"),  # every name it takes, the ladder too
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, needle):
    proc = subprocess.run([sys.executable, "-m", "depthlab", *argv.split()], capture_output=True, text=True)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "wrap, name, value",
    [("admin", "omega", 2.017), ("rezero", "a", 0.0), ("layerscale", "lambda", 0.1), ("lns", "scale", 1.0)],
)
def test_explain_names_each_constant_as_its_paper_does(capsys, wrap, name, value):
    """Admin's omega, ReZero's a, LayerScale's lambda and LNS's 1/sqrt(l) under their own names
    (Admin at 6 layers: n = 12 residual sublayers, omega = 2.017; LNS in layer 1: 1/sqrt(1))."""
    main(f"explain --layers 6 --d-model 16 --heads 2 --wrap {wrap} --json -".split())
    sub = json.loads(capsys.readouterr().out)["layers"][0]["sublayers"][0]
    assert sub["constants"] == {name: pytest.approx(value, abs=1e-3)}
    main(f"explain --layers 6 --d-model 16 --heads 2 --wrap {wrap}".split())
    assert f"{name}={value:.3g}" in capsys.readouterr().out


def test_explain_prints_the_memory_estimate_it_checks_against(capsys, monkeypatch):
    from depthlab import ModelConfig
    from depthlab.model import explain as explain_module
    from depthlab.model.memory import estimate_memory

    monkeypatch.setattr(explain_module, "available_memory", lambda: 8 * 10**9)
    assert main("explain --layers 4 --d-model 64 --heads 4 --json -".split()) == 0
    memory = json.loads(capsys.readouterr().out)["memory"]
    expected = estimate_memory(ModelConfig(n_layers=4, d_model=64, n_heads=4), "build")
    assert memory == {**expected.to_dict(), "available": 8 * 10**9}
    assert main("explain --layers 4 --d-model 64 --heads 4".split()) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("memory: "))
    assert f"about {expected.total / 1e6:.1f} MB" in line and "80% of the 8.0 GB free" in line
    monkeypatch.setattr(explain_module, "available_memory", lambda: 10**6)  # the same numbers refuse it
    assert main("explain --layers 4 --d-model 64 --heads 4".split()) == 2
    assert "building the model needs" in capsys.readouterr().err


def test_explain_hf_says_what_this_config_has_not_what_the_importer_supports(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    path = tmp_path / "gpt2.json"
    transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=4, n_positions=64, tie_word_embeddings=False
    ).to_json_file(path)
    assert main(["explain", "--hf", str(path)]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("imported exactly: "))
    assert "untied head" in line and "tied or untied" not in line  # this config's head, not every option
    assert "pre, layernorm, gelu_tanh FFN, learned positions" in line


@pytest.mark.parametrize(
    "options",
    [
        {"wrap": "vres"},
        {"wrap": "vres_learned", "n_layers": 4},
        {"wrap": "vres", "arch": "encdec"},
        {"wrap": "denseformer"},
        {"wrap": "denseformer", "n_layers": 4, "dwa_period": 2},
    ],
)
def test_explain_names_a_topology_s_mix_on_exactly_the_rows_whose_forward_mixes(options):
    """A value residual mixes V_1 into the self-attention of layers 2 and up only (the first layer's values
    are V_1; the FFN and the cross-attention are pre-LN); DenseFormer averages after the last sublayer of
    every dwa_period-th block only. Each explain row names the mix where the forward does it, and only there."""
    import torch

    from depthlab import ModelConfig, build_model
    from depthlab.model.explain import explain

    cfg = ModelConfig.from_dict({"n_layers": 3, "d_model": 16, "n_heads": 2, "vocab_size": 32, **options})
    model, mixed = build_model(cfg), {}

    def watch(w, key):
        if cfg.wrap == "denseformer":  # a block's output joined the history, and the stream is another tensor

            def averaged(m, a, out):
                mixed[key] = len(out.outputs) > len(a[0].outputs) and out.stream is not out.outputs[-1]

            w.register_forward_hook(averaged)
        else:  # the attention is given the first layer's values
            hook = lambda m, a, kw: mixed.__setitem__(key, kw.get("first") is not None)  # noqa: E731
            w.f.register_forward_pre_hook(hook, with_kwargs=True)

    sides = [("encoder", model.encoder)] if cfg.arch == "encdec" else []
    for side, stack in [*sides, ("decoder", model.decoder)]:
        for i, layer in enumerate(stack.layers):
            for name, w in layer.sublayers().items():
                watch(w, (side, i + 1, name))
    tokens = torch.randint(0, 32, (2, 5))
    with torch.no_grad():
        model(tokens, tokens) if cfg.arch == "encdec" else model(tokens)
    rows = {
        (lay["side"], lay["index"], s["name"]): s["formula"]
        for lay in explain(cfg)["layers"]
        for s in lay["sublayers"]
    }
    assert set(rows) == set(mixed) and any(mixed.values()) and not all(mixed.values())
    for key, formula in rows.items():
        assert ("V'" in formula or "sum_j" in formula) == mixed[key], (key, formula)


@pytest.mark.parametrize(
    "argv", ["--wrap parallel_shared", "--wrap vres", "--wrap mix --layers 128 --d-model 16 --heads 2"]
)
def test_explain_s_columns_line_up_under_a_long_wrap_formula_or_layer_span(argv, capsys):
    """Every column starts where its header does, however long the longest entry: a wrap name past 10
    characters, a formula past 28, a layer span past 9 (dec 33-128)."""
    assert main(f"explain --layers 3 --d-model 32 --heads 4 {argv}".split()) == 0
    lines = capsys.readouterr().out.splitlines()
    head = next(i for i, line in enumerate(lines) if "sublayer" in line and "formula" in line)
    table = lines[head + 1 : lines.index(next(x for x in lines if x.startswith("final norm:")))]
    starts = [lines[head].index(name) for name in ("sublayer", "wrap", "formula", "skip")]
    assert table and starts == sorted(starts)
    for row in table:
        for start in starts:
            assert row[start - 1] == " " and row[start] != " ", (lines[head], row)

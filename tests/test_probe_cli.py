"""``depthlab probe``: the issue's acceptance commands, --compare, --hf, and the bad-input contract."""

from __future__ import annotations

import json

import pytest

from depthlab.cli import main

ACCEPTANCE = "probe --arch decoder --layers 48 --d-model 64 --heads 4"


def _probe_json(args: str, tmp_path, capsys) -> dict:
    out = tmp_path / "probe.json"
    assert main([*args.split(), "--json", str(out)]) == 0
    capsys.readouterr()
    return json.loads(out.read_text())


def _codes(d: dict, level: str | None = None) -> set[str]:
    return {v["code"] for v in d["verdicts"] if level is None or v["level"] == level}


def test_no_attention_skip_reports_vanishing_gradient(tmp_path, capsys, one_thread):
    d = _probe_json(f"{ACCEPTANCE} --no-residual attn", tmp_path, capsys)
    assert "vanishing-gradient" in _codes(d, "error")
    msg = next(v["message"] for v in d["verdicts"] if v["code"] == "vanishing-gradient")
    assert "bottom" in msg and "of 48 layers" in msg
    assert len(d["layers"]) == 49


def test_no_context_drops_the_position_varying_gradient_only(tmp_path, capsys, one_thread):
    small = "probe --layers 3 --d-model 16 --heads 2 --batch-size 2 --seq-len 8"
    full, core = _probe_json(small, tmp_path, capsys), _probe_json(f"{small} --no-context", tmp_path, capsys)
    assert len(core["layers"]) == len(full["layers"]) == 4
    assert all(row["context_grad_norm"] is None for row in core["layers"])
    assert all(row["context_grad_norm"] is not None for row in full["layers"])
    assert [r["grad_norm"] for r in core["layers"]] == [r["grad_norm"] for r in full["layers"]]


def test_pre_ln_without_final_norm_reports_it(tmp_path, capsys, one_thread):
    d = _probe_json(f"{ACCEPTANCE} --wrap pre --final-norm off", tmp_path, capsys)
    assert "missing-final-norm" in _codes(d, "error")
    assert d["config"]["stack"]["final_norm"] is False


def test_plain_pre_ln_has_no_error(tmp_path, capsys, one_thread):
    d = _probe_json(f"{ACCEPTANCE} --wrap pre", tmp_path, capsys)
    assert {v["level"] for v in d["verdicts"]} == {"ok"}  # verdicts were given, and none is a problem
    assert d["config"]["stack"]["final_norm"] is True


def test_table_has_a_bar_per_layer_and_the_verdicts(capsys, one_thread):
    assert main("probe --layers 4 --d-model 32 --heads 4 --wrap post".split()) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line[:5].strip().isdigit()]
    assert [int(r[:5]) for r in rows] == list(range(5)) and all("#" in r for r in rows)
    assert "warmup-required" in out


def test_data_file_is_the_batch_and_a_vocabulary_above_256_is_told_its_ids_above_255_never_appear(
    tmp_path, capsys, one_thread
):
    from depthlab.corpus import text_batch

    text = tmp_path / "abc.txt"
    text.write_bytes(b"abcabd" * 2000)
    assert set(text_batch(4, 32, 300, seed=1, data=str(text)).unique().tolist()) <= set(b"abcd")
    small = f"probe --layers 2 --d-model 16 --heads 2 --batch-size 2 --seq-len 16 --data {text}"
    d = _probe_json(f"{small} --vocab 1000", tmp_path, capsys)
    assert d["config"]["probe"]["data"] == str(text)
    assert "ids 256..999 of this vocabulary never appear" in d["config"]["probe"]["batch"]
    assert main(f"{small} --vocab 1000".split()) == 0
    assert "never appear in the batch" in capsys.readouterr().out  # in the header too
    default = _probe_json(
        "probe --layers 2 --d-model 16 --heads 2 --batch-size 2 --seq-len 16", tmp_path, capsys
    )
    assert (
        default["config"]["probe"]["data"] is None
        and "never appear" not in default["config"]["probe"]["batch"]
    )
    same_model = _probe_json(small, tmp_path, capsys)  # the default vocabulary, the file's bytes
    assert same_model["layers"][0]["stream_rms"] != default["layers"][0]["stream_rms"]  # another batch
    for bad in (tmp_path / "missing.txt", tmp_path):
        assert main(f"probe --layers 2 --d-model 16 --heads 2 --data {bad}".split()) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(bad) in err


def test_compare_plots_every_combination(tmp_path, capsys, one_thread):
    png, js = tmp_path / "cmp.png", tmp_path / "cmp.json"
    args = "probe --layers 6 --d-model 32 --heads 4 --seq-len 16 --compare --wrap post,pre"
    args += " --no-residual none,all"
    assert main([*args.split(), "--plot", str(png), "--json", str(js)]) == 0
    out = capsys.readouterr().out
    data = json.loads(js.read_text())
    assert len(data) == 4 and png.stat().st_size > 10_000
    assert {d["config"]["model"]["wrap"] for d in data} == {"post", "pre"}
    assert "wrap=pre no-residual=all" in out


def test_hf_folder_and_config_json(tmp_path, capsys, one_thread):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=300, n_positions=64)
    transformers.GPT2LMHeadModel(cfg).save_pretrained(tmp_path / "gpt2")
    d = _probe_json(f"probe --hf {tmp_path / 'gpt2'} --seq-len 16 --batch-size 2", tmp_path, capsys)
    assert d["config"]["stack"]["path"] == "transformer.h" and len(d["layers"]) == 3
    bert = transformers.BertConfig(
        num_hidden_layers=2, hidden_size=32, num_attention_heads=4, intermediate_size=64
    )
    bert.to_json_file(tmp_path / "bert.json")
    d = _probe_json(f"probe --hf {tmp_path / 'bert.json'} --seq-len 16 --batch-size 2", tmp_path, capsys)
    assert d["config"]["stack"]["stream_normalised"] is True  # BERT is post-LN
    assert _codes(d) and "missing-final-norm" not in _codes(d)


@pytest.mark.parametrize(
    "args",
    [
        "probe --hf /no/such/model",
        "probe --layers 2 --loss mse",
        "probe --layers 2 --wrap post,pre",
        "probe --layers 2 --seq-len 999",
        "probe --layers 2 --batch-size 0",
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, capsys):
    assert main(args.split()) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "flag, value",
    [("--wrap", "post,,pre"), ("--wrap", "post,"), ("--norm", ",layernorm"), ("--no-residual", "none, ,all")],
)
def test_an_empty_value_in_a_comma_list_is_refused_before_any_work(flag, value, tmp_path, capsys):
    """``--wrap post,,pre`` is a typo, not two models: one line, exit 2, before the --hf folder is read
    (it does not exist here) or the --json file written."""
    out = tmp_path / "probe.json"
    argv = ["probe", "--hf", str(tmp_path / "no-such-model"), "--compare", flag, value, "--json", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{flag} {value!r} is not allowed" in err or f"{flag} {value} is not allowed" in err
    assert "no empty value in the comma list" in err and not out.exists()


def test_a_long_probe_says_its_expected_time_and_compare_its_time_left_per_stack(
    capsys, monkeypatch, one_thread
):
    """Above the cost model's ESTIMATE_FLOP (as advise) a probe says its expected time on stderr before it
    starts, and --compare a line per stack with the time left; stdout is the quick probe's, byte for byte,
    and a quick probe says nothing more than before."""
    import depthlab.train.cost as cost

    small = "probe --layers 2 --d-model 16 --heads 2 --batch-size 2 --seq-len 8"
    argvs = [small.split(), [*small.split(), "--compare", "--wrap", "post,pre,deepnorm"]]
    quick = []
    for argv in argvs:
        assert main(argv) == 0
        quick.append(capsys.readouterr())
        assert quick[-1].err == "", quick[-1].err  # a quick probe prints on stdout only
    monkeypatch.setattr(cost, "ESTIMATE_FLOP", 0)
    assert main(argvs[0]) == 0
    one = capsys.readouterr()
    assert one.out == quick[0].out
    assert one.err.splitlines()[0].startswith("probe: probing 1 stack at init (2 layers, d_model 16); ")
    assert one.err.endswith("expected time: about 0 s (step times measured now)\n"), one.err
    assert main(argvs[1]) == 0
    three = capsys.readouterr()
    assert three.out == quick[1].out  # the timing before the probes changes none of their numbers
    err = three.err.splitlines()
    assert err[0].startswith("probe: probing 3 stacks at init (2 layers, d_model 16); expected time: about ")
    assert [line.split(",")[0] for line in err[1:]] == [f"probe --compare: {k}/3 probes" for k in (1, 2, 3)]
    assert all(" left" in line for line in err[1:]), err


@pytest.mark.parametrize(
    "args", ["--seq-len 999", "--batch-size 0", "--compare --wrap post,pre --seq-len 999"]
)
def test_a_refused_probe_is_refused_before_its_expected_time_is_measured(args, capsys, monkeypatch):
    """The expected time's timing is work: a probe refused (a length the positions cannot hold, an empty
    batch) gets its one line before any stack is timed, as before there was a timing."""
    import depthlab.train.cost as cost

    timed = []
    monkeypatch.setattr(cost, "ESTIMATE_FLOP", 0)
    monkeypatch.setattr(cost, "step_cost", lambda *a: timed.append(a) or (0.0, 0.0, 0.0))
    assert main(["probe", "--layers", "2", "--d-model", "16", "--heads", "2", *args.split()]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and timed == [], err

"""The wiring check finds every bug of its catalogue seeded into a small reference implementation (100%),
and reports nothing on the clean references: depthlab's own designs, hyper-connections (lucidrains),
x-transformers, and the Hugging Face families depthlab imports (0). Where a reference departs from its
paper (x-transformers' H_res, hyper-connections' fractions), the finding is the departure docs/topologies.md
describes, and a test pins it."""

from __future__ import annotations

import types

import pytest
import torch
from torch import nn

import tests.hf_families as fam
from depthlab import ModelConfig, build_model
from depthlab.cli import main
from depthlab.model import init as dl_init
from depthlab.model.sinkhorn import sinkhorn_knopp
from depthlab.probe.wiring import check_wiring

pytestmark = pytest.mark.usefixtures("one_thread")


class UserHyper(nn.Module):
    """A user's own hyper-connection layer, written to the check's protocol (n, width, fractions, step,
    set_res): H' = H_res H + H_post^T F(H_pre H); mhc: sigmoid, 2 sigmoid, Sinkhorn-Knopp. ``bug`` seeds one
    of the catalogue's bugs."""

    def __init__(self, n=4, width=8, k=1, mhc=False, bug=None, iters=20):
        super().__init__()
        self.n, self.width, self.fractions, self.mhc, self.bug, self.iters = n, width, False, mhc, bug, iters
        self.pre = nn.Parameter(torch.nn.functional.one_hot(torch.tensor(k), n).float())
        post0 = 2.0 if bug == "post_init" else 1.0  # H_post should start at 1
        self.post = nn.Parameter(torch.zeros(n) if mhc else torch.full((n,), post0))
        self.res = nn.Parameter(torch.eye(n))

    def maps(self):
        if not self.mhc:
            return self.pre, self.post, self.res
        return torch.sigmoid(self.pre), 2 * torch.sigmoid(self.post), sinkhorn_knopp(self.res, self.iters)

    def step(self, H, branch):
        pre, post, res = self.maps()
        y = branch(torch.einsum("n,btnw->btw", pre, H))
        mixed = {"no_res": H, "transposed": res.T @ H}.get(self.bug, res @ H)
        return mixed + post[:, None] * y.unsqueeze(-2)

    def set_res(self, M):
        self.res.copy_(M)


SEEDED = [
    ("hc", dict(bug="no_res"), "h-res-not-applied"),
    ("hc", dict(bug="transposed"), "h-res-transposed"),
    ("mhc", dict(mhc=True, bug="no_res"), "h-res-not-applied"),
    ("mhc", dict(mhc=True, iters=1), "sinkhorn-not-converged"),
    ("hc", dict(bug="post_init"), "init-not-pre-ln"),
]


@pytest.mark.parametrize("claim,kw,code", SEEDED, ids=[s[2] + "-" + s[0] for s in SEEDED])
def test_every_seeded_hyper_connection_bug_is_found(claim, kw, code):
    torch.manual_seed(0)
    layer = UserHyper(**kw)
    before = {k: v.clone() for k, v in layer.state_dict().items()}
    report = check_wiring(nn.ModuleList([layer]), claim)
    assert [f.code for f in report.findings] == [code], report.format()
    assert all(torch.equal(v, layer.state_dict()[k]) for k, v in before.items())  # weights restored
    clean = check_wiring(nn.ModuleList([UserHyper(mhc=kw.get("mhc", False))]), claim)
    assert clean.clean, clean.format()  # the same layer without the bug


def tiny(**kw):
    torch.manual_seed(0)
    return build_model(
        ModelConfig(**{**dict(n_layers=3, d_model=16, n_heads=2, vocab_size=64, max_len=16), **kw})
    )


def test_deepnorm_bugs_are_found():
    clean = tiny(wrap="deepnorm")
    assert check_wiring(clean).clean
    no_beta = tiny(wrap="deepnorm")
    with torch.no_grad():  # the init without its beta: the branch's weights as xavier drew them
        for layer in no_beta.stack.layers:
            for w in layer.sublayers().values():
                dl_init.scale_deepnorm_branch(w.f, 1 / w.beta)
    assert [f.code for f in check_wiring(no_beta).findings][:1] == ["deepnorm-beta-missing"]
    swapped = tiny(wrap="deepnorm")
    for layer in swapped.stack.layers:  # LN(x + alpha F(x)): alpha on the branch
        for w in layer.sublayers().values():
            w.forward = types.MethodType(lambda self, x, ctx: self.norm(x + self.alpha * self.f(x, ctx)), w)
    assert [f.code for f in check_wiring(swapped).findings] == ["deepnorm-alpha-on-branch"]


@pytest.mark.parametrize("alpha", [1.0, 3.0])
def test_deepnorm_constants_are_checked_against_the_paper_not_against_themselves(alpha):
    """An alpha of another value, applied on the skip as the module says: the wiring is consistent
    with itself, and only Wang et al.'s (2N)^(1/4) shows it wrong; so does a tripled beta."""
    model = tiny(wrap="deepnorm")  # 3 layers: alpha = 6^(1/4) = 1.57, beta = 24^(-1/4) = 0.45
    for layer in model.stack.layers:
        for w in layer.sublayers().values():
            w.alpha = alpha
    (found,) = check_wiring(model).findings
    assert found.code == "deepnorm-alpha-wrong" and found.where == "sublayer 0"
    assert (
        found.message
        == f"alpha = {alpha:.3g}, not (2N)^(1/4) = 1.57 for N = 3 layers (and in 5 more of 6 sublayers)"
    )
    tripled = tiny(wrap="deepnorm")
    with torch.no_grad():
        for layer in tripled.stack.layers:
            for w in layer.sublayers().values():
                dl_init.scale_deepnorm_branch(w.f, 3.0)
    assert [f.code for f in check_wiring(tripled).findings] == ["deepnorm-beta-wrong"]


@pytest.mark.parametrize("init", ["xavier", "normal", "gpt2"])
def test_deepnorm_with_grouped_queries_is_clean_under_each_init(init):
    """v's expected std against q's is xavier's fan ratio under xavier, and 1 under one std for all."""
    torch.manual_seed(0)
    cfg = ModelConfig(wrap="deepnorm", init=init, n_layers=6, d_model=256, n_heads=16, n_kv_heads=1)
    report = check_wiring(build_model(cfg))
    assert report.clean, report.format()


def test_a_claimed_design_the_model_does_not_hold_is_a_finding(capsys):
    for wrap, claim in (("pre", "mhc"), ("post", "deepnorm")):
        report = check_wiring(tiny(wrap=wrap), claim)
        assert [f.code for f in report.findings] == ["not-found"], report.format()
    no_attention = nn.Module()  # a stack of blocks, none of which has a query or a key projection
    no_attention.layers = nn.ModuleList([nn.Linear(16, 16) for _ in range(2)])
    assert [f.code for f in check_wiring(no_attention, "qk_norm").findings] == ["not-found"]
    assert (
        main(
            ["check", "--layers", "2", "--d-model", "16", "--heads", "2", "--wrap", "pre", "--claims", "mhc"]
        )
        == 1
    )
    assert "FOUND not-found at the model: the model claims mhc" in capsys.readouterr().out


def test_a_model_check_cannot_run_is_refused_in_one_line(capsys):
    args = "check --layers 2 --d-model 16 --heads 2 --arch encdec --claims pre".split()
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "failed when run as model(token ids)" in err and "encoder-decoder" in err


def test_a_no_op_qk_norm_and_a_missing_final_norm_are_found():
    model = tiny(qk_norm=True, norm="rmsnorm")
    assert check_wiring(model, ("pre", "qk_norm")).clean
    for layer in model.stack.layers:  # the norms computed, their result dropped: a no-op
        layer.attn.f.q_norm, layer.attn.f.k_norm = nn.Identity(), nn.Identity()
    assert [f.code for f in check_wiring(model, "qk_norm").findings] == ["qk-norm-no-op"]
    assert [f.code for f in check_wiring(tiny(final_norm="off"), "pre").findings] == ["missing-final-norm"]


@pytest.mark.parametrize("wrap", ["hc", "dhc", "mhc", "frac"])
def test_depthlab_s_designs_are_clean(wrap):
    assert check_wiring(tiny(wrap=wrap)).clean


@pytest.mark.parametrize("claim", ["hc", "mhc"])
def test_hyper_connections_reference_is_clean(claim):
    hc = pytest.importorskip("hyper_connections")
    cls = hc.HyperConnections if claim == "hc" else hc.ManifoldConstrainedHyperConnections
    torch.manual_seed(0)
    layers = nn.ModuleList([cls(4, dim=16, layer_index=i) for i in range(3)])
    assert check_wiring(layers, claim).clean


def test_the_references_departures_are_what_the_check_finds():
    """hyper-connections' fractions do not start at pre-LN; x-transformers' H_res is all ones."""
    hc = pytest.importorskip("hyper_connections")
    xt = pytest.importorskip("x_transformers.x_transformers")
    frac = check_wiring(nn.ModuleList([hc.HyperConnections(1, dim=16, num_fracs=4, layer_index=0)]), "frac")
    assert [f.code for f in frac.findings] == ["init-not-pre-ln"] and "cannot be set" in frac.checked[0]
    xconn = check_wiring(
        nn.ModuleList([xt.HyperConnection(16, layer_index=0, num_residual_streams=4)]), "mhc"
    )
    assert [f.code for f in xconn.findings] == ["sinkhorn-not-converged"]
    assert "rows off 1 by 3" in xconn.findings[0].message


def test_x_transformers_clean_decoders():
    xt = pytest.importorskip("x_transformers")
    torch.manual_seed(0)
    dec = xt.Decoder(dim=16, depth=2, heads=2, attn_dim_head=8, attn_qk_norm=True)
    model = xt.TransformerWrapper(num_tokens=64, max_seq_len=16, attn_layers=dec)
    report = check_wiring(model, ("qk_norm", "pre"))
    assert report.clean and "not checkable" in report.checked[1]  # its blocks are not called as modules


@pytest.mark.parametrize(
    "build,claims",
    [
        (fam.qwen3, ("pre", "qk_norm")),
        (fam.olmo2, ("qk_norm",)),  # OLMo 2 normalises after each sublayer: no pre-LN claim
        (fam.gemma3, ("qk_norm",)),
        (fam.mistral, ("pre",)),
        (fam.qwen2, ("pre",)),
        (fam.neox, ("pre",)),
        (fam.gptj, ("pre",)),
        (fam.phi, ("pre",)),
        (fam.opt, ("pre",)),
    ],
    ids=lambda v: getattr(v, "__name__", None),
)
def test_the_hugging_face_families_are_clean(build, claims):
    pytest.importorskip("transformers")
    report = check_wiring(build(), claims)
    assert report.clean, report.format()


def test_the_check_command(capsys):
    assert main(["check", "--layers", "2", "--d-model", "16", "--heads", "2", "--wrap", "mhc"]) == 0
    assert "0 finding(s)" in capsys.readouterr().out
    assert main(["check", "--layers", "2", "--wrap", "pre", "--final-norm", "off", "--claims", "pre"]) == 1
    assert "missing-final-norm" in capsys.readouterr().out
    assert main(["check", "--claims", "nonsense"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_the_check_counts_hyper_connections_and_says_when_nothing_is_claimed(capsys):
    """mHC at 2 blocks has 4 hyper-connections, one per sublayer; a stack that claims no design says so."""
    assert main(["check", "--layers", "2", "--d-model", "16", "--heads", "2", "--wrap", "mhc"]) == 0
    out = capsys.readouterr().out
    assert "H_res applied (4 hyper-connections); Sinkhorn-Knopp converged (4 hyper-connections)" in out
    assert main(["check", "--layers", "2", "--d-model", "16", "--heads", "2", "--wrap", "post"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("wiring check: nothing to check: the model claims none of the designs check tests")
    assert "wiring check of :" not in out


def test_a_module_in_the_current_folder_is_checked_and_a_bad_one_refused(tmp_path, monkeypatch, capsys):
    """--module mypkg.model:build from the folder holding mypkg imports it, as `python -m` would; a
    builder that is not a function, or returns no torch module, is refused in one line (exit 2)."""
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "model.py").write_text(
        "import depthlab\n"
        "def build():\n"
        "    return depthlab.build_model(depthlab.ModelConfig(n_layers=2, d_model=16, n_heads=2, wrap='mhc'))\n"
        "def nothing():\n"
        "    return None\n"
        "FN = 3\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", [p for p in __import__("sys").path if p not in ("", str(tmp_path))])
    assert main(["check", "--module", "mypkg.model:build", "--claims", "mhc,mhc"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("wiring check of mhc: 0 finding(s)") and out.count("checked:") == 1
    for fn, said in (("nothing", "nothing() returned a NoneType, not a torch module"),
                     ("FN", "FN is not a function (its type is int)")):  # fmt: skip
        assert main(["check", "--module", f"mypkg.model:{fn}", "--claims", "mhc"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.rstrip().endswith(said)
    assert main(["check", "--claims", " , "]) == 2
    assert "names no design" in capsys.readouterr().err


def test_a_flag_check_cannot_use_is_refused(capsys):
    assert main(["check", "--wrap", "mhc", "--layers", "2", "--checkpoint-activations"]) == 2
    assert "--checkpoint-activations does nothing in check" in capsys.readouterr().err


def test_an_imported_config_re_wired_by_model_flags_is_checked_for_its_own_design(tmp_path, capsys):
    """--hf with model flags builds depthlab's model, whose config names its design (as the flags alone
    do): --claims is not needed there. --hf alone checks transformers' model, which names none."""
    transformers = pytest.importorskip("transformers")
    transformers.LlamaConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, intermediate_size=64,
                             vocab_size=256).to_json_file(tmp_path / "llama.json")  # fmt: skip
    hf = ["check", "--hf", str(tmp_path / "llama.json")]
    assert main([*hf, "--wrap", "mhc"]) == 0
    assert capsys.readouterr().out.startswith("wiring check of mhc: 0 finding(s)")
    assert main([*hf, "--final-norm", "off"]) == 1  # Llama's pre-LN without its final norm
    assert "FOUND missing-final-norm" in capsys.readouterr().out
    assert main(hf) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--claims is needed with --module or with --hf alone" in err

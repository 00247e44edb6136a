"""Parametrizations (sp, mup, depth_mup, completep): sp is today's code bit for bit, every rule is at its
base shape the standard parametrization, and each wrapping's multiplier sits where its formula says."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from depthlab import ConfigError, ModelConfig, TrainConfig, build_model, param_groups
from depthlab.config import WRAPPINGS, wrap_names
from depthlab.config_family import FamilyOptions
from depthlab.model import parametrization as P
from depthlab.model.attention import Context
from depthlab.probe.update_size import group_scales
from depthlab.train import train
from depthlab.train.schedules import make_optimizer, make_scheduler
from tests.fixtures.sp_golden.make import CASES, config, run

GOLDEN = Path(__file__).parent / "fixtures" / "sp_golden" / "sp.pt"
# The fixture was written on one thread; a CPU matmul's rounding can depend on the thread count
pytestmark = pytest.mark.usefixtures("one_thread")


def small(**kw) -> ModelConfig:
    base = dict(n_layers=4, d_model=16, n_heads=2, vocab_size=32, max_len=16)
    return ModelConfig(**{**base, **kw})


def steps(cfg: ModelConfig, opt_of=None, n: int = 3) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """(logits after ``n`` Adam updates on fixed tokens, the parameters), seed 0."""
    torch.manual_seed(0)
    model = build_model(cfg)
    opt = (opt_of or (lambda m: torch.optim.Adam(param_groups(m, 1e-2), lr=1e-2)))(model)
    tokens = torch.randint(0, cfg.vocab_size, (3, 9), generator=torch.Generator().manual_seed(1))
    for _ in range(n):
        opt.zero_grad()
        logits = model(tokens[:, :-1])
        F.cross_entropy(logits.reshape(-1, cfg.vocab_size), tokens[:, 1:].reshape(-1)).backward()
        opt.step()
    with torch.no_grad():
        return model(tokens[:, :-1]), [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}")
def test_sp_is_the_code_before_parametrizations(case):
    """The fixture was written by the code before parametrizations existed (tests/fixtures/sp_golden), on
    another CPU: a CPU's matmul kernels round differently, so the logits after three AdamW steps agree to
    float32 rounding (1e-5 relative; another placement of any multiplier moves them by 1e-3 or more), and
    the parameters too except the few entries whose gradient is itself rounding noise, which Adam's
    g / sqrt(v) turns into a step of lr either way (at most 1 in 100 entries)."""
    gold = torch.load(GOLDEN)[f"{case[0]}-{case[1]}"]
    now = run(config(*case))
    torch.testing.assert_close(now["logits"], gold["logits"], rtol=1e-5, atol=1e-6)
    assert now["params"].keys() == gold["params"].keys()
    off = total = 0
    for name, value in gold["params"].items():
        assert now["params"][name].shape == value.shape, name
        off += int((~torch.isclose(now["params"][name], value, rtol=1e-5, atol=1e-5)).sum())
        total += value.numel()
    assert off <= total / 100, f"{off} of {total} parameter entries differ beyond float32 rounding"


def test_sp_groups_update_exactly_as_the_old_optimizer():
    """param_groups under sp against torch.optim.Adam built the old way (two groups by dimension)."""

    def old(model):
        ps = list(model.parameters())
        groups = [{"params": [p for p in ps if p.dim() >= 2], "weight_decay": 0.1}]
        groups.append({"params": [p for p in ps if p.dim() < 2], "weight_decay": 0.0})
        return torch.optim.Adam(groups, lr=1e-2, betas=(0.9, 0.98), eps=1e-9)

    cfg = small(wrap="post", init="gpt2")
    new = lambda m: make_optimizer(m, TrainConfig(lr=1e-2, weight_decay=0.1, eps=1e-9))  # noqa: E731
    a, b = steps(cfg, old), steps(cfg, new)
    assert torch.equal(a[0], b[0]) and all(torch.equal(x, y) for x, y in zip(a[1], b[1], strict=True))


@pytest.mark.parametrize("init", ["xavier", "gpt2", "normal"])
@pytest.mark.parametrize("wrap", ["pre", "post", "sandwich", "parallel", "deepnorm"])
def test_every_rule_at_its_base_shape_is_sp(wrap, init):
    cfg = small(wrap=wrap, init=init)
    sp = steps(cfg)
    others = [cfg.replace(param="mup"), cfg.replace(param="mup", base_width=16)]
    if wrap not in P.depth_refused():
        others += [cfg.replace(param=p, base_width=16, base_depth=4) for p in ("depth_mup", "completep")]
    others = [c for c in others if not (P.scales_depth(c) and init == "gpt2")]  # gpt2: see the next test
    for other in others:
        got = steps(other)
        assert torch.equal(sp[0], got[0]), other.param
        assert all(torch.equal(x, y) for x, y in zip(sp[1], got[1], strict=True)), other.param


def test_depth_rules_replace_gpt2s_residual_init():
    """Under a depth rule the branch multiplier replaces GPT-2's 1/sqrt(2L) (CompleteP's code)."""
    torch.manual_seed(0)
    sp = build_model(small(init="gpt2", n_layers=8))
    torch.manual_seed(0)
    cp = build_model(small(init="gpt2", n_layers=8, param="completep", base_depth=2))
    out_sp, out_cp = sp.decoder.layers[0].ffn.f.fc2.weight, cp.decoder.layers[0].ffn.f.fc2.weight
    assert torch.allclose(out_cp / out_sp, torch.tensor(math.sqrt(16.0)))


def test_mup_scales_hidden_init_attention_and_output():
    cfg = small(param="mup", base_width=8, d_model=32, init="normal")
    torch.manual_seed(0)
    model = build_model(cfg)
    assert model.decoder.layers[0].ffn.f.fc1.weight.std().item() == pytest.approx(0.02 / 2, rel=0.1)
    # sqrt(d) E keeps the base's std: E's std / m_w^1/2 (muP's input layer: constant coordinates)
    assert model.embed.tok.weight.std().item() == pytest.approx(0.02 / 2, rel=0.1)
    assert model.embed.pos.weight.std().item() == pytest.approx(0.02, rel=0.1)
    attn = model.decoder.layers[0].attn.f
    assert attn.scale == pytest.approx(math.sqrt(4) / 16)  # d_head 16 at base 4: sqrt(d_base) / d
    tokens = torch.randint(0, 32, (2, 5))
    _, states = model(tokens, return_states=True)
    # the tied head reads E = (sqrt(d) E) / sqrt(d): 1/m_w on sqrt(d) E is m_w^1/2 / m_w = 1/2 on E
    expected = model.head(model.decoder.norm(states[-1]) / 2)
    assert torch.allclose(model(tokens), expected)
    untied = build_model(cfg.replace(tie_embeddings=False))
    _, states = untied(tokens, return_states=True)
    assert torch.allclose(untied(tokens), untied.head(untied.decoder.norm(states[-1]) / 4))


def test_mup_under_xavier_keeps_the_tables_std_of_the_base_width():
    torch.manual_seed(0)
    model = build_model(small(param="mup", base_width=8, d_model=128, tie_embeddings=False))
    assert model.embed.pos.weight.std().item() == pytest.approx(8**-0.5, rel=0.1)  # xavier's d^-1/2 at 8
    assert model.head.weight.std().item() == pytest.approx(8**-0.5, rel=0.1)
    assert model.embed.tok.weight.std().item() == pytest.approx(128**-0.5, rel=0.1)  # x sqrt(d): 1


def test_the_groups_follow_the_table():
    cfg = small(param="completep", base_width=8, d_model=32, n_layers=8, base_depth=2, tie_embeddings=False)
    model = build_model(cfg)
    groups = {g["name"]: g for g in param_groups(model, 1e-2, weight_decay=0.1, eps=1e-8)}
    mw, mL = 4.0, 4.0
    assert groups["decoder hidden"]["lr"] == pytest.approx(1e-2 / mw)  # alpha = 1: no depth factor
    assert groups["decoder hidden"]["eps"] == pytest.approx(1e-8 / mw / mL)
    assert groups["decoder hidden"]["weight_decay"] == pytest.approx(0.1 * mw)
    assert groups["decoder hidden vectors"]["lr"] == pytest.approx(1e-2)
    assert groups["embeddings"]["lr"] == 1e-2 and groups["embeddings"]["eps"] == pytest.approx(1e-8 / mw)
    assert any(p is model.head.weight for p in groups["embeddings"]["params"])
    # the token table under embed_scale: / m_w^1/2, undoing the sqrt(d) in front of it
    assert groups["token embedding"]["params"] == [model.embed.tok.weight]
    assert groups["token embedding"]["lr"] == pytest.approx(1e-2 / 2)
    assert groups["outer vectors"]["weight_decay"] == 0.0
    n = sum(len(g["params"]) for g in groups.values())
    assert n == len(list(model.parameters()))
    dm = param_groups(build_model(cfg.replace(param="depth_mup")), 1e-2, eps=1e-8)
    dm = {g["name"]: g for g in dm}
    assert dm["decoder hidden"]["lr"] == pytest.approx(1e-2 / mw / 2)  # x m_L^-1/2
    assert dm["decoder hidden vectors"]["lr"] == pytest.approx(1e-2 / 2)
    assert dm["decoder hidden"]["eps"] == pytest.approx(1e-8 / mw / 2)


def _formula(w, x, ctx, m):
    """What the wrapping's formula gives with multiplier m, from its parts called without hooks."""
    f = lambda h: w.f.forward(h, ctx)  # noqa: E731 (forward: the hook-free sublayer)
    name = type(w).name
    if name == "pre":
        return x + m * f(w.norm(x))
    if name == "post":
        return w.norm(x + m * f(x))
    if name == "sandwich":
        return x + m * w.norm_out.forward(f(w.norm_in(x)))
    if name == "reorder":
        return x + m * w.norm.forward(f(x))
    if name == "rezero":
        return x + w.a * m * f(x)
    if name == "lns":
        return x + m * f(w.norm(x) * w.scale)
    raise AssertionError(name)


@pytest.mark.parametrize(
    "wrap", [w for w in wrap_names() if WRAPPINGS[w].STATE is None]
)  # topologies: their own
@pytest.mark.parametrize("param", ["depth_mup", "completep"])
def test_each_wrapping_multiplies_its_branch_where_its_formula_says(wrap, param):
    if wrap in P.depth_refused():
        with pytest.raises(ConfigError, match=P.depth_refused()[wrap].split(" ")[0]):
            small(wrap=wrap, n_layers=8, param=param, base_depth=2)
        return
    cfg = small(wrap=wrap, n_layers=8, param=param, base_depth=2)
    m = 4.0 ** -P.ALPHA[param]
    torch.manual_seed(0)
    model = build_model(cfg)
    ctx, x = Context(), torch.randn(2, 5, 16)
    for layer in model.decoder.layers:
        for w in layer.sublayers().values():
            assert w.branch_multiplier == pytest.approx(m)
            if hasattr(w, "a"):
                w.a.data.fill_(0.5)  # ReZero's gate starts at 0, which would hide the branch
        with torch.no_grad():
            got = layer(x, ctx)
            if wrap.startswith("parallel"):
                h = {
                    k: (layer.norm(x) if layer.norm is not None else w.norm(x))
                    for k, w in layer.sublayers().items()
                }
                want = x + m * sum(w.f.forward(h[k], ctx) for k, w in layer.sublayers().items())
            else:
                want = x
                for w in layer.sublayers().values():
                    want = _formula(w, want, ctx, m)
        assert torch.allclose(got, want, atol=1e-6), wrap


def test_every_wrapping_has_a_rule():
    assert not P.undeclared()


def test_the_probes_update_gain_moves_each_parameter_by_its_groups_lr():
    sp = build_model(small())
    assert group_scales(sp) == {}
    cp = build_model(small(param="completep", base_width=8, n_layers=8, base_depth=2))
    scales = group_scales(cp)
    assert scales[id(cp.decoder.layers[0].ffn.f.fc1.weight)][0] == pytest.approx(0.5)  # lr / m_w
    assert scales[id(cp.embed.tok.weight)][0] == pytest.approx(2**-0.5)  # / m_w^1/2: sqrt(d) in front
    assert scales[id(cp.embed.pos.weight)][0] == 1.0


@pytest.mark.parametrize("wrap", sorted(P.depth_refused()))
def test_refused_wrappings_take_the_width_rule(wrap):
    build_model(small(wrap=wrap, param="mup", base_width=8))


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        (dict(param="completep", base_depth=8), "base_depth"),  # a base deeper than the model
        (dict(param="mup", base_width=32), "base_width"),
        (dict(param="mup", base_depth=2), "base_depth"),  # mup does not scale depth
        (dict(base_width=8), "base_width"),  # sp scales nothing
        (dict(param="muP"), "param"),
        (dict(param="completep", wrap="deepnorm"), "param"),
    ],
)
def test_bad_parametrizations_are_one_config_error(kw, field):
    with pytest.raises(ConfigError) as e:
        small(**kw)
    assert e.value.field == field and "\n" not in str(e.value)


def test_new_fields_leave_the_keys_of_existing_configs_alone():
    cfg = small()
    assert not {"param", "base_width", "base_depth"} & set(cfg.key_dict())
    assert cfg.config_hash() != cfg.replace(param="mup").config_hash()
    assert ModelConfig.from_json(cfg.replace(param="completep", base_depth=2).to_json()).base_depth == 2


def test_training_uses_the_groups_and_the_schedule_scales_each():
    cfg = small(param="completep", base_width=8, n_layers=8, base_depth=2)
    model = build_model(cfg)
    tcfg = TrainConfig(lr=1e-2, warmup=4, schedule="linear", steps=10)
    opt = make_optimizer(model, tcfg)
    sched = make_scheduler(opt, tcfg, cfg.d_model)
    want = {g["name"]: g["lr"] for g in param_groups(model, 1e-2)}
    assert {g["name"]: g["initial_lr"] for g in opt.param_groups} == want
    opt.step(), sched.step()
    for g in opt.param_groups:
        assert g["lr"] == pytest.approx(want[g["name"]] * 2 / 4)  # update 2 of a 4-step warmup


@pytest.mark.parametrize(
    "param,base", [("sp", {}), ("mup", {"base_width": 8}), ("depth_mup", {"base_depth": 2})]
)
def test_the_records_log_the_runs_lr_not_the_hidden_groups(param, base):
    """The logged lr is the peak --lr times the schedule's factor under every parametrization (it was
    the first group's: under mup at m_w = 4 a run at 1e-2 logged 2.5e-3, the hidden matrices' lr)."""
    cfg = small(param=param, n_layers=4, max_len=32, vocab_size=256, **base)
    tcfg = TrainConfig(lr=1e-2, warmup=2, schedule="linear", steps=3, batch_size=2, seq_len=8, log_every=1,
                       eval_every=3, eval_batches=1, telemetry=False)  # fmt: skip
    logged = [r["lr"] for r in train(cfg, tcfg).metrics]
    assert logged == pytest.approx([1e-2 * f for f in (0.5, 1.0, 1.0)], rel=1e-12)


def test_train_runs_under_completep():
    cfg = small(param="completep", base_depth=2, max_len=32, vocab_size=256)
    result = train(cfg, TrainConfig(steps=3, batch_size=4, seq_len=16, eval_batches=1, telemetry=False))
    assert math.isfinite(result.final_train_loss)


@pytest.mark.parametrize(
    "kw,token_lr,output",
    [
        ({}, 0.5, 0.5),  # sqrt(d) E tied: E's lr / m_w^1/2, the head reads E at m_w^1/2 / m_w
        ({"tie_embeddings": False}, 0.5, 0.25),
        ({"embed_scale": False}, 1.0, 0.25),  # no multiplier in front of the table: muP's as it is
        ({"family": FamilyOptions(d_embed=8)}, 1.0, 0.25),  # the table keeps its fixed width
    ],
)
def test_the_token_tables_rule_follows_its_multiplier(kw, token_lr, output):
    cfg = small(param="mup", base_width=8, d_model=32, **kw)  # m_w = 4
    groups = {g["name"]: g for g in param_groups(build_model(cfg), 1.0, weight_decay=1.0)}
    assert groups["token embedding"]["lr"] == pytest.approx(token_lr)
    assert P.multipliers(cfg).output == pytest.approx(output)
    if "outer matrices" in groups:  # the factorised embedding's projections: vector-like, as they are
        assert groups["outer matrices"]["lr"] == 1.0 and groups["outer matrices"]["weight_decay"] == 1.0

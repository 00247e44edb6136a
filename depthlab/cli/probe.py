"""depthlab probe: one forward/backward at init on a real batch; per-layer numbers, a bar each, verdicts."""

from __future__ import annotations

import argparse
import itertools
import json
import os

from depthlab.cli.common import (
    PLOT_FORMATS,
    add_json_flag,
    add_model_flags,
    check_output_file,
    model_config_from_args,
    note_replaced,
    write_json,
)
from depthlab.errors import ConfigError, InputError


def add_parser(sub) -> None:
    p = sub.add_parser(
        "probe",
        help="gradient by depth, stream growth and layer usefulness at init, with verdicts",
        description="Probe a stack at initialisation: one forward and backward on a batch of real text, "
        "observed by hooks. Prints, per stream i (0 = entering layer 1), the gradient norm with a bar "
        "on a log scale, the position-varying gradient (what teaches layers to use context), the stream "
        "rms, the update ratio, the cosine and angle to the previous stream, the mean cosine between "
        "positions (1 = rank collapse), each sublayer's parameter gradient and the output change under "
        "a small weight perturbation; then the doctor's verdicts. --compare takes comma lists for "
        "--wrap, --norm and --no-residual and puts every combination on one plot.",
    )
    add_model_flags(p, multi=True)
    g = p.add_argument_group("probe")
    g.add_argument(
        "--hf",
        metavar="PATH",
        help="a Hugging Face save_pretrained folder or config.json "
        "(random weights; the model flags are then ignored)",
    )
    g.add_argument("--hf-weights", action="store_true", help="with --hf: load the folder's saved weights")
    g.add_argument("--batch-size", type=int, default=8, help="sequences in the batch (default 8)")
    g.add_argument("--seq-len", type=int, default=64, help="tokens per sequence (default 64)")
    g.add_argument(
        "--loss", default="lm", help="lm (next-token cross-entropy, default) | sum (sum of the last stream)"
    )
    g.add_argument(
        "--perturbation",
        type=float,
        default=1e-3,
        help="relative weight perturbation for the output-change column (default 1e-3; 0 = off)",
    )
    g.add_argument(
        "--no-context",
        action="store_true",
        help="skip the position-varying gradient (one backward pass fewer; the vanishing-gradient verdict "
        "then reads the plain gradient only, which misses rank collapse without the attention skip)",
    )
    g.add_argument(
        "--jacobian",
        type=int,
        default=0,
        metavar="K",
        help="estimate the Jacobian's mean squared singular value with K projections (default 0 = off)",
    )
    g.add_argument(
        "--compare",
        action="store_true",
        help="probe every combination of the comma lists (JSON: a list of probes)",
    )
    g.add_argument(
        "--plot",
        metavar="PNG",
        help=f"write the gradient and stream-rms plot (log scale) here ({', '.join(PLOT_FORMATS)})",
    )
    add_json_flag(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from depthlab.probe import LOSSES

    if args.loss not in LOSSES:
        raise ConfigError("loss", args.loss, f"one of {', '.join(LOSSES)}")
    if args.hf and args.compare:
        raise InputError("--compare varies depthlab's model flags; it does not apply to --hf")
    configs = [] if args.hf else configs_from_args(args)
    check_output_file(args.json, "--json")  # before the probe: a bad path must not cost its run
    check_output_file(args.plot, "--plot", PLOT_FORMATS)
    if args.hf:
        runs = [_probe_hf(args)]
    else:
        runs = [(label, _probe_depthlab(args, cfg)) for label, cfg in configs]
    _report(args, runs)
    return 0


def configs_from_args(args) -> list[tuple[str, object]]:
    """(label, ModelConfig) for each combination of the comma lists; more than one needs --compare."""
    lists = {
        name: _split(getattr(args, attr))
        for name, attr in (("wrap", "wrap"), ("norm", "norm"), ("no-residual", "no_residual"))
    }
    combos = list(itertools.product(*lists.values()))
    if len(combos) > 1 and not args.compare:
        name = next(n for n, v in lists.items() if len(v) > 1)
        hint = "; attn+ffn turns two skips off in one model" if name == "no-residual" else ""
        raise ConfigError(
            name.replace("-", "_"), ",".join(lists[name]), f"one value (several need --compare{hint})"
        )
    varying = [n for n, v in lists.items() if len(v) > 1]
    out = []
    for wrap, norm, no_res in combos:
        one = argparse.Namespace(**{**vars(args), "wrap": wrap, "norm": norm, "no_residual": no_res})
        cfg = model_config_from_args(one)
        values = {"wrap": wrap, "norm": norm, "no-residual": no_res}
        label = " ".join(f"{n}={values[n]}" for n in varying) or f"wrap={wrap}"
        out.append((label, cfg))
    return out


def _split(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()] or [value]


def _probe_depthlab(args, cfg):
    import torch

    from depthlab.model import build_model
    from depthlab.probe import probe
    from depthlab.probe.batch import text_batch

    if args.seq_len > cfg.max_len:
        raise ConfigError("seq_len", args.seq_len, f"<= max_len {cfg.max_len} (--max-len)")
    torch.manual_seed(args.seed)
    model = build_model(cfg)
    tokens = text_batch(args.batch_size, args.seq_len, cfg.vocab_size, args.seed)
    batch = (text_batch(args.batch_size, args.seq_len, cfg.vocab_size, args.seed + 1), tokens)
    batch = batch if cfg.arch == "encdec" else tokens
    return probe(model, batch, **_probe_options(args), model_config=cfg.to_dict())


def _probe_options(args) -> dict:
    """The probe's keyword arguments from the flags (shared by depthlab and HF models)."""
    return {
        "loss": args.loss,
        "perturbation": args.perturbation,
        "jacobian_probes": args.jacobian,
        "context": not args.no_context,
        "seed": args.seed,
    }


def _probe_hf(args):
    import torch

    from depthlab.probe import probe
    from depthlab.probe.batch import text_batch
    from depthlab.probe.hf import load_hf_model

    _check_model_type(args.hf)
    torch.manual_seed(args.seed)
    model, config = load_hf_model(args.hf, weights=args.hf_weights, want_lm=args.loss == "lm")
    limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    if limit and args.seq_len > limit:
        raise ConfigError("seq_len", args.seq_len, f"<= {limit}, the model's max positions")
    tokens = text_batch(args.batch_size, args.seq_len, config.vocab_size, args.seed)
    batch = {"input_ids": tokens, "decoder_input_ids": tokens} if config.is_encoder_decoder else tokens
    result = probe(model, batch, **_probe_options(args))
    return f"hf {config.model_type}", result


def _check_model_type(path: str) -> None:
    """Refuse, in one short line, a config whose model_type transformers does not know (transformers' own
    message lists every model type it has: thousands of characters on one line)."""
    try:
        import transformers
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    except ImportError:
        return  # load_hf_model says how to install it
    from depthlab.interop.hf import MODEL_TYPES

    config_file = os.path.join(path, "config.json") if os.path.isdir(path) else path
    try:
        with open(config_file) as f:
            model_type = json.load(f).get("model_type")
    except (OSError, ValueError, AttributeError):
        return  # load_hf_model reports a missing or unreadable config
    if model_type is None or (isinstance(model_type, str) and model_type in CONFIG_MAPPING):
        return
    shown = repr(model_type) if len(repr(model_type)) <= 40 else repr(model_type)[:36] + "...'"
    raise InputError(
        f"--hf: model_type {shown} is unknown to transformers {transformers.__version__}; "
        f"depthlab's interop imports {', '.join(MODEL_TYPES)} (probe --hf takes any type transformers knows)"
    )


def _report(args, runs) -> None:
    """Tables (or a comparison summary), verdicts, JSON and plot."""
    from depthlab.probe.plot import plot_probes

    data = [r.to_dict() for _, r in runs] if args.compare else runs[0][1].to_dict()
    if args.json == "-":
        write_json(data, "-")
    elif args.compare:
        print(format_comparison(runs))
    else:
        print(runs[0][1].format())
    if args.json not in (None, "-"):
        write_json(data, args.json)
    if args.plot:
        existed = os.path.lexists(args.plot)
        plot_probes(runs, args.plot, title=_title(args, runs))
        note_replaced(args.plot, existed)
        if args.json != "-":
            print(f"plot: {args.plot}")


def _title(args, runs) -> str:
    st = runs[0][1].config["stack"]
    return (
        f"depthlab probe: {st['n_layers']} layers, loss {args.loss}, batch {args.batch_size} x {args.seq_len}"
    )


def format_comparison(runs) -> str:
    """A line per configuration (bottom/top gradient ratios, stream growth, verdict codes), then messages."""
    from depthlab.probe.doctor import ratios
    from depthlab.probe.result import format_verdicts

    w = max(len(label) for label, _ in runs) + 2
    lines = [f"{'config':<{w}}{'g0/gL':>9}  {'ctx0/ctxL':>9}  {'rmsL/rms0':>9}  verdicts"]
    for label, r in runs:
        g, c, rms = (
            ratios(r.column("grad_norm")),
            ratios(r.column("context_grad_norm")),
            r.column("stream_rms"),
        )
        growth = rms[-1] / rms[0] if rms[0] else float("inf")
        codes = ", ".join(f"{v['level']} {v['code']}" for v in r.verdicts)
        lines.append(f"{label:<{w}}{_r(g):>9}  {_r(c):>9}  {growth:>9.3g}  {codes}")
    for label, r in runs:
        lines += ["", f"{label}:"] + ["  " + line for line in format_verdicts(r.verdicts)]
    return "\n".join(lines)


def _r(prof) -> str:
    return "-" if prof is None else f"{prof[0]:.2e}"

"""depthlab probe: one forward/backward at init on a real batch; per-layer numbers, a bar each, verdicts."""

from __future__ import annotations

import argparse
import itertools
import math
import sys

from depthlab.advise.advice import check_schedule, expect, run_of
from depthlab.cli.common import (
    add_json_flag,
    add_memory_flag,
    add_model_flags,
    comma_list,
    given_model_flags,
    model_config_from_args,
    refuse_flags,
    seed_from_args,
)
from depthlab.cli.train import add_recipe_flags, recipe_from_args
from depthlab.config import TrainConfig
from depthlab.doctor.atlas import Atlas
from depthlab.errors import ConfigError, InputError
from depthlab.interop.hf import family_for, imported_config, read_config
from depthlab.paths import PLOT_FORMATS, check_output_file, note_replaced, write_json
from depthlab.probe import LOSSES
from depthlab.probe.compare import Comparison, compare
from depthlab.probe.from_config import check_probe
from depthlab.probe.saved_hf import probe_hf
from depthlab.progress import duration, say
from depthlab.train.cost import probes_seconds

# The most combinations one --compare probes: every single-stream wrapping under every norm (12 x 5)
# fits, not every residual topology too (21 x 5); a longer list is a typo or a script's runaway loop,
# refused before the first probe (docs/failure-paths.md).
MAX_COMPARE = 64


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
        "--hf-weights",
        action="store_true",
        help="with --hf and no model flags: probe the folder's saved weights instead of random ones",
    )
    g.add_argument(
        "--batch-size",
        type=int,
        help=f"sequences in the batch (default 8; with --lr the run's own, {TrainConfig().batch_size}, as train, "
        "study and advise take it)",
    )
    g.add_argument(
        "--seq-len",
        type=int,
        help=f"tokens per sequence (default 64; with --lr the run's own, {TrainConfig().seq_len})",
    )
    g.add_argument(
        "--data",
        metavar="FILE",
        help="the text the batch is cut from, read as train --data reads it (default: the Python "
        "stdlib's .py files). The batch is bytes: a vocabulary above 256 never sees its ids 256 and up, "
        "and the header says so",
    )
    g.add_argument(
        "--loss", default="lm", help="lm (next-token cross-entropy, default) | sum (sum of the last stream)"
    )
    g.add_argument(
        "--lr",
        type=float,
        help="the learning rate the model is to be trained with: the probe takes Adam's first update at it "
        "and the doctor judges it (default: none, no learning-rate verdict)",
    )
    g.add_argument(
        "--warmup",
        type=int,
        default=0,
        help="with --lr: linear warmup steps (the first update is lr / warmup)",
    )
    g.add_argument(
        "--steps",
        type=int,
        help="with --lr: the run's budget of training steps; the doctor says whether that budget would "
        "call the run stalled before it is expected to leave the unigram plateau",
    )
    add_recipe_flags(g, TrainConfig())  # with --lr: the run's optimiser and schedule, for the call on it
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
    add_memory_flag(p)
    p.set_defaults(run=run)


def run(args) -> int:
    comma_lists(args)  # an empty value in a comma list: refused before any config is read or model built
    if args.loss not in LOSSES:
        raise ConfigError("loss", args.loss, f"one of {', '.join(LOSSES)}")
    refuse_flags(
        args, "needs --hf (it loads that folder's saved weights)", hf_weights=args.hf_weights and not args.hf
    )
    rewired, ignored = _rewired(args) if args.hf and not args.compare else (True, None)
    as_built = bool(args.hf) and not rewired
    if args.hf_weights and not as_built:
        raise InputError(
            "--hf-weights probes the saved model as it is; the model flags and --compare re-wire it from "
            "random weights: give one or the other"
        )
    refuse_flags(
        args,
        "applies to depthlab's own models (no estimate is made for a Hugging Face model as it is built)",
        force_memory=args.force_memory and as_built,
    )
    refuse_flags(
        args,
        "skips the lm loss's position-varying gradient; --loss sum has none",
        no_context=args.no_context and args.loss != "lm",
    )
    refuse_flags(
        args,
        "needs --lr: the warmup scales the first update at that learning rate",
        warmup=args.warmup != 0 and args.lr is None,
    )
    refuse_flags(
        args,
        "needs --lr: the budget is judged with the learning rate",
        steps=args.steps is not None and args.lr is None,
    )
    optimiser = recipe_from_args(args)
    refuse_flags(
        args,
        "needs --lr: the run's optimiser and schedule weigh only in the call on a run at a learning rate",
        **{k: args.lr is None and v != getattr(TrainConfig(), k) for k, v in optimiser.items()},
    )
    if args.steps is not None and args.steps < 1:
        raise ConfigError("--steps", args.steps, "an integer >= 1 (the run's budget of training steps)")
    if args.lr is not None:  # the run the call is on, checked before any probe (a beta2 of 2 is no run)
        run = TrainConfig(
            lr=args.lr, warmup=args.warmup, steps=args.steps or TrainConfig().steps, **optimiser
        )
        check_schedule(run, args.d_model if isinstance(args.d_model, int) and not args.hf else None)
    refuse_flags(
        args,
        "does nothing in probe: it runs the model in eval mode, and only training recomputes blocks",
        checkpoint_activations=args.checkpoint_activations,
    )
    configs = [] if as_built else configs_from_args(args)
    away = [k for k, v in optimiser.items() if v != getattr(TrainConfig(), k)]
    if away and args.lr is not None:  # a recipe flag where no call is made would do nothing: refused
        no_call = as_built and (args.hf_weights or _family(args.hf)[1] is None)
        no_call = no_call or (bool(configs) and all(c.arch != "decoder" for _, c in configs))
        refuse_flags(
            args,
            "weighs only in the calibrated call, made on a depthlab decoder language model (or a Hugging "
            "Face family depthlab imports, at init): this probe makes none",
            **dict.fromkeys(away, no_call),
        )
    check_output_file(args.json, "--json")  # before the probe: a bad path must not cost its run
    existed = check_output_file(args.plot, "--plot", PLOT_FORMATS)
    run = TrainConfig()  # with --lr the probe is of that run: its first batch, of the run's shape
    if args.batch_size is None:
        args.batch_size = run.batch_size if args.lr is not None else 8
    if args.seq_len is None:
        args.seq_len = run.seq_len if args.lr is not None else 64
    options = {
        "batch_size": args.batch_size,
        "seq_len": args.seq_len,
        "seed": seed_from_args(args),
        "data": args.data,
        "loss": args.loss,
        "perturbation": args.perturbation,
        "jacobian_probes": args.jacobian,
        "context": not args.no_context,
        "lr": args.lr,
        "warmup": args.warmup,
        "steps": args.steps,
    }
    imported = None  # a model probed as transformers built it: its depthlab config, for the call below
    if as_built:
        result = probe_hf(args.hf, weights=args.hf_weights, **options)
        if ignored:
            print(ignored, file=sys.stderr)
        runs = Comparison(
            [(f"hf {result.config['model'].get('hf', {}).get('model_type', '')}".strip(), result)]
        )
        if args.lr is not None and not args.hf_weights and _family(args.hf)[1] is not None:
            imported = imported_config(args.hf)[0]  # what advise --hf asks about: the same model at init
    else:
        for _, cfg in configs:  # every stack's own refusals before any work (the timing included)
            check_probe(cfg, force_memory=args.force_memory, **options)
        runs = compare(
            configs, expected=expected_seconds(configs, options), force_memory=args.force_memory, **options
        )
        if args.hf:
            for label, r in runs.runs:
                r.config["probe"]["source"] = f"the config at {args.hf}, re-wired: {label}"
    asked = [r for _, r in runs.runs if run_of(r, imported, optimiser) is not None]
    if asked:  # the calibrated call on each run, as advise makes it (the atlas read once, only if needed)
        atlas = Atlas.load()
        for r in asked:
            expect(r, atlas, model=imported, optimiser=optimiser)
    _report(args, runs, existed)
    return 0


def expected_seconds(configs: list[tuple[str, object]], options: dict) -> list[float] | None:
    """Each stack's expected seconds, from step times measured now through advise's cost model (said on
    stderr first, with their sum), or None where the probes are quick (:func:`probes_seconds`)."""
    run = TrainConfig(batch_size=options["batch_size"], seq_len=options["seq_len"])
    expected = probes_seconds([(i, cfg, False) for i, (_, cfg) in enumerate(configs)], run)
    if expected is None:
        return None
    n, cfg = len(configs), configs[0][1]
    say(f"probe: probing {n} stack{'s' if n > 1 else ''} at init ({cfg.n_layers} layers, d_model {cfg.d_model}); "
        f"expected time: about {duration(sum(expected.values()))} (step times measured now)")  # fmt: skip
    return list(expected.values())


def _rewired(args) -> tuple[bool, str | None]:
    """(whether model flags were given with --hf, the warning to print once the model is probed). The
    flags re-wire an imported family; a family depthlab does not import is probed as built, and the
    warning names the flags it ignores. The warning waits for the probe: a model the probe refuses gets
    its one line and nothing before it."""
    given = given_model_flags(args)
    if not given:
        return False, None
    _, family = _family(args.hf)
    if family is not None:
        return True, None
    flags = ", ".join("--" + f.replace("_", "-") for f in given)
    return False, (
        f"warning: {flags} ignored: depthlab re-wires only the families it imports, so this model was probed "
        "as transformers builds it"
    )


def _family(path: str):
    config = read_config(path)
    return config, family_for(config.model_type)


def configs_from_args(args) -> list[tuple[str, object]]:
    """(label, ModelConfig) for each combination of the comma lists; more than one needs --compare.
    With --hf each starts from the imported family's config (:func:`model_config_from_args`)."""
    lists = comma_lists(args)
    count = math.prod(len(v) for v in lists.values())  # from the lengths: nothing is built yet
    if count > MAX_COMPARE:
        sizes = " x ".join(f"{len(v)} --{n}" for n, v in lists.items() if len(v) > 1)
        raise InputError(
            f"--compare: {count:,} combinations ({sizes}), more than the limit of {MAX_COMPARE}; "
            "compare fewer values at once"
        )
    combos = list(itertools.product(*lists.values()))
    if len(combos) > 1 and not args.compare:
        name = next(n for n, v in lists.items() if len(v) > 1)
        hint = "; attn+ffn turns two skips off in one model" if name == "no-residual" else ""
        raise ConfigError(
            name.replace("-", "_"), ",".join(lists[name]), f"one value (several need --compare{hint})"
        )
    varying = [n for n, v in lists.items() if len(v) > 1]
    out, seen = [], set()
    for wrap, norm, no_res in combos:
        one = argparse.Namespace(**{**vars(args), "wrap": wrap, "norm": norm, "no_residual": no_res})
        cfg = model_config_from_args(one)
        if cfg.config_hash() in seen:  # attn+ffn and ffn+attn build one model: it is probed once
            continue
        seen.add(cfg.config_hash())
        values = {"wrap": wrap, "norm": norm, "no-residual": no_res}
        label = " ".join(f"{n}={values[n]}" for n in varying) or f"wrap={cfg.wrap}"
        out.append((label, cfg))
    return out


def comma_lists(args) -> dict[str, list[str]]:
    """{"wrap", "norm", "no-residual"}: each flag's comma list (:func:`depthlab.cli.common.comma_list`), checked before any
    work; ConfigError for a list with an empty value (``post,,pre``, ``post,``)."""
    return {
        name: comma_list(getattr(args, attr), attr)
        for name, attr in (("wrap", "wrap"), ("norm", "norm"), ("no-residual", "no_residual"))
    }


def _report(args, runs: Comparison, plot_existed: bool) -> None:
    """Table (or the comparison), JSON, plot."""
    data = runs.to_dict() if args.compare else runs.runs[0][1].to_dict()
    if args.json == "-":
        write_json(data, "-")
    else:
        print(runs.format() if args.compare else runs.runs[0][1].format())
    if args.json not in (None, "-"):
        write_json(data, args.json)
    if args.plot:
        st = runs.runs[0][1].config["stack"]
        title = f"depthlab probe: {st['n_layers']} layers, loss {args.loss}, batch {args.batch_size} x {args.seq_len}"
        runs.plot(args.plot, title=title)
        note_replaced(args.plot, plot_existed)
        if args.json != "-":
            print(f"plot: {args.plot}")

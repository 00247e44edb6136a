"""depthlab check: does a model compute the formula of the design it claims, at init?"""

from __future__ import annotations

import importlib
import os
import sys

import torch

from depthlab.cli.common import (
    add_json_flag,
    add_model_flags,
    given_model_flags,
    model_config_from_args,
    refuse_flags,
    seed_from_args,
)
from depthlab.config_base import check_seed
from depthlab.errors import ConfigError, InputError
from depthlab.interop.hf import read_config
from depthlab.interop.hf.load import transformers_module
from depthlab.model import build_model
from depthlab.paths import check_output_file, write_json
from depthlab.probe.saved_hf import _model_class as model_class
from depthlab.probe.saved_hf import load_hf_model
from depthlab.probe.wiring import CLAIMS, check_wiring


def add_parser(sub) -> None:
    p = sub.add_parser(
        "check",
        help="test at init that a model computes the formula of the design it claims; name what differs",
        description="Build inputs for each claimed design, run the model (or its layers) on them and compare "
        "with the formula: H_res applied, Sinkhorn-Knopp converged, an init that reproduces pre-LN "
        "(hyper-connections, mHC, Frac-connections), DeepNorm's beta and alpha, a QK-norm that normalises, a "
        "final norm after pre-LN blocks. Checks depthlab's model of the model flags, a Hugging Face model "
        "(--hf, random weights) or your own (--module). Exit 0: no finding; 1: findings.",
    )
    add_model_flags(p)
    g = p.add_argument_group("check")
    g.add_argument(
        "--claims",
        help=f"comma list of {', '.join(CLAIMS)} (default: the wrapping and QK-norm of the model the model "
        "flags build, --hf PATH with them too; needed with --module and with --hf alone)",
    )
    g.add_argument("--module", metavar="MOD:FN", help="check FN() of the Python module MOD (your model)")
    add_json_flag(p)
    p.set_defaults(run=run)


def run(args) -> int:
    seed = seed_from_args(args)
    check_seed(seed)  # torch.manual_seed comes before the model's config (and --module has none)
    claims = (
        None
        if args.claims is None
        else tuple(dict.fromkeys(c.strip() for c in args.claims.split(",") if c.strip()))
    )
    if claims == ():
        raise InputError(f"--claims {args.claims!r} names no design: one or more of {', '.join(CLAIMS)}")
    for c in claims or ():
        if c not in CLAIMS:
            raise ConfigError("claims", c, f"one of {', '.join(CLAIMS)}")
    if not claims and (
        args.module or (args.hf and not given_model_flags(args))
    ):  # a model depthlab did not build
        raise InputError(
            "--claims is needed with --module or with --hf alone (without model flags, the model is "
            "transformers' own): name the design the model claims"
        )
    refuse_flags(
        args,
        "does nothing in check: it runs the model in eval mode, and only training recomputes blocks",
        checkpoint_activations=args.checkpoint_activations,
    )
    if args.module and (args.hf or given_model_flags(args)):
        raise InputError("--module checks your model as it is: give no model flags or --hf with it")
    check_output_file(args.json, "--json")
    torch.manual_seed(seed)
    report = check_wiring(_model(args), claims, seed=seed)
    if args.json == "-":
        write_json(report.to_dict(), "-")
    else:
        print(report.format())
        write_json(report.to_dict(), args.json)
    return 0 if report.clean else 1


def _model(args):
    if args.module:
        mod, _, fn = args.module.partition(":")
        if os.getcwd() not in sys.path:  # as `python -m` does: a package in the current folder imports
            sys.path.insert(0, os.getcwd())
        try:
            build = getattr(importlib.import_module(mod), fn or "build")
        except (ImportError, AttributeError) as e:
            raise InputError(f"--module {args.module}: {e}") from None
        if not callable(build):
            raise InputError(
                f"--module {args.module}: {fn or 'build'} is not a function (its type is {type(build).__name__})"
            )
        model = build()
        if not isinstance(model, torch.nn.Module):
            raise InputError(
                f"--module {args.module}: {fn or 'build'}() returned a {type(model).__name__}, not a torch module"
            )
        return model
    if args.hf and not given_model_flags(args):
        return load_hf_model(args.hf, model_class(transformers_module(), read_config(args.hf), True))
    return build_model(model_config_from_args(args))

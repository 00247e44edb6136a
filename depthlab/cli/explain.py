"""depthlab explain: the effective wiring of each layer of a config."""

from __future__ import annotations

from depthlab.cli.common import (
    FIELD_OF_FLAG,
    add_json_flag,
    add_memory_flag,
    add_model_flags,
    given_model_flags,
    model_config_from_args,
    refuse_flags,
)
from depthlab.interop.hf import family_info
from depthlab.model.explain import explain, format_explain
from depthlab.paths import check_output_file, write_json


def add_parser(sub) -> None:
    p = sub.add_parser(
        "explain",
        help="print the effective wiring of each layer (norms, skips, constants)",
        description="Print, for each layer and sublayer, where the norms sit, the wrapping's "
        "constants and whether the skip is on; the final norm; parameter counts; and warnings. With --hf, "
        "the imported model's wiring in depthlab's words (and what the model flags given change).",
    )
    add_model_flags(p)
    add_json_flag(p)
    add_memory_flag(p)
    p.set_defaults(run=run)


def run(args) -> int:
    refuse_flags(args, "does nothing in explain: no seed changes the wiring", seed=args.seed is not None)
    cfg = model_config_from_args(args)
    check_output_file(args.json, "--json")  # before anything is printed
    info = explain(cfg, force_memory=args.force_memory)
    if args.hf:
        changed = [f"{FIELD_OF_FLAG[f]}={cfg.value_of(FIELD_OF_FLAG[f])}" for f in given_model_flags(args)]
        info["family"] = family_info(args.hf, changed)
    if args.json == "-":
        write_json(info, "-")
        return 0
    print(format_explain(info))
    write_json(info, args.json)
    return 0

"""Import Hugging Face models into depthlab models with the same outputs, family by family.

Each family is one module declaring a :class:`~depthlab.interop.hf.family.Family` (its config map, its
weight map, what is exact and what is approximated); ``python -m depthlab_lab.docgen.tables`` writes the
table of them into docs/families.md. tests/test_parity_hf*.py check every one to 1e-5.
Only ``model_type`` and class names are read, so this package does not import ``transformers``.
Dropout: the HF residual/hidden dropout becomes ``ModelConfig.dropout``; parity holds in eval mode.
"""

from __future__ import annotations

from torch import nn

from depthlab.errors import InputError
from depthlab.interop.hf import bert, gpt2, gpt_neox, llama, opt, seq2seq, t5  # noqa: F401 (registration)
from depthlab.interop.hf.family import FAMILIES, Family, config_from_hf, family_for
from depthlab.interop.hf.load import family_info, imported_config, read_config, rewire, rewired_config
from depthlab.model import build_model

__all__ = [
    "FAMILIES",
    "Family",
    "config_from_hf",
    "family_for",
    "family_info",
    "from_hf",
    "imported_config",
    "read_config",
    "rewire",
    "rewired_config",
]

_ORDER = ("GPT-2", "BERT", "Llama", "Mistral", "Qwen2", "Qwen3", "OLMo 2", "Gemma 2", "Gemma 3", "GPT-NeoX",
          "GPT-J", "Falcon", "Phi", "OPT", "BART", "Marian", "T5")  # fmt: skip
FAMILIES.sort(key=lambda f: _ORDER.index(f.name))
CLASSES = tuple(c for f in FAMILIES for c in f.classes)


def from_hf(hf_model: nn.Module) -> nn.Module:
    """A depthlab model with ``hf_model``'s weights, in its dtype and train/eval mode.

    Returns a :class:`depthlab.model.LanguageModel` or ``EncoderDecoder``: ``model(tokens)`` (or
    ``model(src, tgt)``) gives (B, T, V) logits equal to the HF LM's; for BERT,
    ``model(tokens, return_states=True)[1][-1]`` (B, T, d) equals ``last_hidden_state``. Pass padding
    as ``padding_mask = attention_mask == 0``.
    """
    family, _ = _family_of_class(hf_model)
    cfg = family.config(hf_model.config)
    tied = _tied(hf_model)
    if tied is not None and tied != cfg.tie_embeddings:
        cfg = cfg.replace(tie_embeddings=tied)  # what the model does wins over what its config says
    model = build_model(cfg).to(next(hf_model.parameters()).dtype)
    state = family.state(hf_model.state_dict(), cfg, hf_model.config)
    # strict: every depthlab tensor must be filled and every shape must match, or this raises
    model.load_state_dict(state, strict=True)
    return model.train(hf_model.training)


def _family_of_class(hf_model: nn.Module) -> tuple[Family, str]:
    name = type(hf_model).__name__
    for family in FAMILIES:
        if name in family.classes:
            return family, family.classes[name]
    raise InputError(f"cannot import a {name}: depthlab imports {', '.join(CLASSES)}")


def _tied(hf_model: nn.Module) -> bool | None:
    """Whether the HF model's output layer is its token table (None when it has no output layer)."""
    get_out = getattr(hf_model, "get_output_embeddings", None)
    head = get_out() if get_out is not None else None
    if head is None:
        return None
    return head.weight is hf_model.get_input_embeddings().weight

"""Probe a Hugging Face model saved as a ``save_pretrained`` folder or a ``config.json``.

Nothing is downloaded. The model gets random weights from its config (the probe is an at-init tool)
unless ``weights=True`` asks for the weights saved in the folder. For the LM loss the class is the
first LM-head Auto class that accepts the config (Seq2SeqLM for encoder-decoders, MaskedLM for
encoders, CausalLM for decoders), then the config's own ``architectures``, then AutoModel; for the
"sum" loss the config's own architecture comes first.

The probe says what it found: for a family depthlab imports, its wiring in depthlab's words (the
family's config through :func:`depthlab.interop.hf.config_from_hf`); for any other, what the forward
pass showed (does a norm read the stream entering each block, does each block end in a norm). What it
cannot probe meaningfully it refuses in one line, before anything is built where the config tells: a
recurrent model (RWKV, Mamba, RecurrentGemma, xLSTM: a state carried along the sequence, not attention
over it), a model that reads images or audio instead of token ids (ViT, ResNet, Whisper), a config
whose token vocabulary sits in a nested part (CLIP's text_config), a config transformers cannot build a
model from, and after the build a stack whose blocks have no attention.
"""

from __future__ import annotations

import torch

from depthlab.corpus import text_batch
from depthlab.errors import ConfigError, InputError
from depthlab.interop.hf import config_from_hf, family_for, from_hf
from depthlab.interop.hf.load import config_errors, config_path, one_line, read_config, transformers_module
from depthlab.model.explain import wiring_summary
from depthlab.probe.forward_backward import probe
from depthlab.probe.from_config import attribute_to_init, note_batch, reference_init
from depthlab.probe.locate import locate_stack
from depthlab.probe.result import ProbeResult


def probe_hf(
    path: str,
    *,
    weights: bool = False,
    batch_size: int = 8,
    seq_len: int = 64,
    seed: int = 0,
    loss: str = "lm",
    data: str | None = None,
    **options,
) -> ProbeResult:
    """Probe the Hugging Face model saved at ``path`` (a folder or a config.json), as transformers builds
    it, on ``batch_size`` x ``seq_len`` bytes of the corpus ``data`` (a file; None: the default
    corpus): random weights drawn with ``seed`` unless ``weights``. ``options`` are
    :func:`depthlab.probe.forward_backward`'s keyword arguments. The batch is bytes, so a vocabulary above 256
    never sees its ids 256 and up (``config["probe"]["batch"]`` says so).

    For an imported family the header names its wiring, and a verdict that the same wiring under
    depthlab's reference init does not get is marked as coming from the init (see
    :func:`depthlab.probe.from_config.attribute_to_init`)."""
    config = read_config(path)  # a recurrent model type is refused here, from the config
    transformers = transformers_module()
    cls = _model_class(transformers, config, want_lm=loss == "lm")
    check_reads_tokens(cls.target(config), config)
    limit = max_positions(config)
    if limit is not None and seq_len > limit:
        raise ConfigError("seq_len", seq_len, f"<= {limit}, the model's max positions")
    tokens = text_batch(batch_size, seq_len, config.vocab_size, seed, data)  # a bad file: before the build
    torch.manual_seed(seed)
    model = load_hf_model(path, cls, weights=weights)
    check_has_attention(model, config)
    batch = {"input_ids": tokens, "decoder_input_ids": tokens} if config.is_encoder_decoder else tokens
    layout = depthlab_layout(model, config) if options.get("lr") is not None else None
    result = probe(model, batch, loss, seed=seed, update_layout=layout, **options)
    if layout is not None:
        result.config["probe"]["relative_update_layout"] = (
            "depthlab's (the same weights, fused as depthlab fuses them)"
        )
    note_batch(result, batch_size, seq_len, config.vocab_size, data)
    cfg = name_wiring(result, config, type(model).__name__, weights)
    if cfg is not None and not weights:
        ref = reference_init(cfg) or cfg  # HF's own init is compared with depthlab's reference in any case
        attribute_to_init(
            result, ref, batch_size=batch_size, seq_len=seq_len, seed=seed, loss=loss, data=data, **options
        )
    return result


def depthlab_layout(model, config) -> list | None:
    """Per block, ``model``'s weights as depthlab lays them out (:func:`depthlab.interop.hf.from_hf`: q, k
    and v in one matrix, a gated FFN's two inputs in one), where depthlab imports the model's family and
    class; else None. The learning-rate limit's relative update is the median over a block's matrices of
    their first step against their size, calibrated on depthlab's layout: Adam moves each entry alike
    whether q, k and v are one matrix or three, so the run trains alike, but the median over three
    square matrices is not that over one 3d x d matrix (about 20% apart). Measured on this layout, probe
    --hf and advise --hf give one safe lr."""
    family = family_for(config.model_type)
    if family is None or type(model).__name__ not in family.classes:
        return None
    try:
        return locate_stack(from_hf(model)).layer_params
    except (ConfigError, InputError):  # a variant depthlab refuses to import: its own layout, then
        return None


def name_wiring(result: ProbeResult, config, class_name: str, weights: bool):
    """Write ``stack.wiring`` (and ``stack.init``) of an HF model's probe; returns its ModelConfig, or
    None when depthlab does not import it (the wiring then says what the forward pass showed)."""
    family = family_for(config.model_type)
    try:
        cfg = config_from_hf(config) if family is not None else None
    except ConfigError as e:  # a family depthlab imports, in a variant it refuses: probed all the same
        cfg, refused = None, f"{e.field}={e.value!r} not imported"
    if cfg is None:
        wiring = measured_wiring(config.model_type, result)
        if family is not None:
            wiring = wiring.replace("not imported by depthlab", refused, 1)
        result.config["stack"]["wiring"] = wiring
        return None
    result.config["stack"]["wiring"] = f"{family.name}: {wiring_summary(cfg)}"
    tie = "tied" if cfg.tie_embeddings else "untied"
    scale = "sqrt(d)" if cfg.embed_scale else "1"
    init = "saved weights" if weights else f"transformers' init for {class_name}"
    result.config["stack"]["init"] = f"{init}, {tie} head, embeddings x {scale}"
    return cfg


def max_positions(config) -> int | None:
    """The longest sequence the config allows, or None for no limit (XLNet's -1, a missing field)."""
    for name in ("max_position_embeddings", "n_positions"):
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value if value > 0 else None
    return None


def check_reads_tokens(model_class, config) -> None:
    """InputError, one line, unless the class reads token ids (checked before anything is built)."""
    reads = getattr(model_class, "main_input_name", "input_ids")
    if reads == "input_ids" and getattr(config, "vocab_size", None) is None:
        nested = [k for k, v in vars(config).items() if getattr(v, "vocab_size", None) is not None]
        where = f" (it is in {', '.join(nested)})" if nested else ""
        raise InputError(
            f"--hf: a {config.model_type} config has no vocab_size at its top level{where}: a model of "
            "several parts; depthlab probes one token Transformer, so save that part's config on its own"
        )
    if reads != "input_ids":
        raise InputError(
            f"--hf: a {config.model_type} model reads {reads}, not token ids (an image or audio model); "
            "depthlab probes Transformer stacks over tokens"
        )


def check_has_attention(model, config) -> None:
    """InputError, one line, unless the blocks of ``model`` have attention."""
    stack = locate_stack(model)
    if "attn" not in stack.group_names:
        raise InputError(
            f"--hf: the blocks of a {config.model_type} model ({stack.path}) have no attention: it is not a "
            "Transformer (its blocks mix positions another way: a Fourier transform, a convolution, a "
            "state-space scan); depthlab probes Transformer stacks"
        )


def measured_wiring(model_type: str, result: ProbeResult) -> str:
    """What the forward pass showed of a family depthlab does not import (one line)."""
    st = result.config["stack"]
    reads = st.get("norms_on_input")
    if st["stream_normalised"]:
        seen = "each block ends in a norm (post-LN style)"
    elif reads:
        style = "parallel style: its sublayers read the stream" if reads > 1 else "pre-LN style"
        seen = f"{reads} norm{'s' * (reads > 1)} read{'s' * (reads == 1)} the stream entering each block ({style})"
    else:
        seen = "no norm reads the stream entering a block or ends it (x + LN(F(x)) style, or no norm)"
    return f"{model_type} (not imported by depthlab; measured): {seen}; final norm {'yes' if st['final_norm'] else 'no'}"


def load_hf_model(path: str, cls, weights: bool = False):
    """The model of class ``cls`` (see :func:`_model_class`) in float32: random weights from the
    config at ``path``, or the weights saved in the folder ``path``. InputError, one line, when
    transformers cannot build the model (a width its attention cannot split into the heads, ...)."""
    folder = None
    if weights:
        _, folder = config_path(path)
        if folder is None:
            raise InputError(f"--hf {path}: weights need a save_pretrained folder, not a config file")
    try:
        if folder is not None:
            return cls.from_pretrained(folder, local_files_only=True).float()
        return cls.from_config(read_config(path)).float()
    except OSError as e:
        if folder is None:
            raise
        raise InputError(f"--hf {path}: cannot load the saved weights: {one_line(e)}") from None
    except config_errors() as e:
        raise InputError(
            f"--hf {path}: transformers cannot build a model from this config: {one_line(e)}"
        ) from None


def _model_class(transformers, config, want_lm: bool):
    """The class to build. With ``want_lm`` an LM-head Auto class comes first (the LM loss needs logits;
    with random weights the head is as random as the rest); otherwise the config's own architecture."""
    own = [
        _Concrete(getattr(transformers, n))
        for n in getattr(config, "architectures", None) or []
        if hasattr(transformers, n)
    ]
    if getattr(config, "is_encoder_decoder", False):
        names = ["AutoModelForSeq2SeqLM"]
    elif getattr(config, "is_decoder", False):
        names = ["AutoModelForCausalLM"]
    else:
        names = ["AutoModelForMaskedLM", "AutoModelForCausalLM"]
    autos = [_AutoFromConfig(getattr(transformers, n)) for n in [*names, "AutoModel"]]
    autos = [a for a in autos if type(config) in getattr(a.auto, "_model_mapping", {})]
    ordered = (autos[:-1] + own + autos[-1:]) if want_lm else (own + autos)
    if not ordered:
        raise InputError(f"transformers has no model class for model_type {config.model_type!r}")
    return ordered[0]


class _AutoFromConfig:
    """An Auto* class seen through the calls used here: ``from_config`` and ``from_pretrained``."""

    def __init__(self, auto):
        self.auto = auto

    def from_config(self, config):
        return self.auto.from_config(config)

    def from_pretrained(self, folder, **kw):
        return self.auto.from_pretrained(folder, **kw)

    def target(self, config):
        """The concrete class that will be built for ``config``."""
        return self.auto._model_mapping[type(config)]


class _Concrete(_AutoFromConfig):
    """A concrete model class (GPT2LMHeadModel, ...): random weights come from calling it on the config."""

    def from_config(self, config):
        return self.auto(config)

    def target(self, config):
        return self.auto

"""The model library: norms, wrappings, sublayers, stacks and their initialisation."""

from depthlab.model.stack import EncoderDecoder, LanguageModel, Stack, build_model, uses_final_norm
from depthlab.model.wrappings import WRAPPINGS

__all__ = ["WRAPPINGS", "EncoderDecoder", "LanguageModel", "Stack", "build_model", "uses_final_norm"]

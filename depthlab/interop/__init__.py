"""Interop: import Hugging Face and ``torch.nn`` Transformers into depthlab, computing the same outputs.

- :func:`from_hf` / :func:`config_from_hf`: Hugging Face GPT-2, BERT, Llama, Mistral, Qwen2, Qwen3,
  OLMo 2, Gemma 2, Gemma 3, GPT-NeoX, GPT-J, Falcon, Phi, OPT, BART, Marian and T5 (one module per
  family under :mod:`depthlab.interop.hf`).
- :func:`from_torch`: ``torch.nn.TransformerEncoderLayer`` / ``TransformerDecoderLayer`` -> a Block,
  ``TransformerEncoder`` / ``TransformerDecoder`` -> a Stack.

The parity tests (tests/test_parity_hf*.py, tests/test_parity_torch.py) are the proof that depthlab's
model library is the computation these trusted implementations perform.
"""

from depthlab.interop.hf import config_from_hf, from_hf
from depthlab.interop.torch_nn import from_torch, layer_config

__all__ = ["config_from_hf", "from_hf", "from_torch", "layer_config"]

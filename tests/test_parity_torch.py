"""depthlab Blocks and Stacks equal torch.nn's Transformer layers with the same weights (float32, 1e-5).

``norm_first=False`` is our ``post`` wrapping, ``norm_first=True`` our ``pre`` (Vaswani et al. 2017 vs Xiong et al. 2020).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from depthlab import InputError
from depthlab.interop import from_torch, layer_config
from depthlab.model.layers import Block, Context
from depthlab.model.stack import Stack

pytestmark = pytest.mark.usefixtures("one_thread")

SHAPES = [(16, 2, 24), (32, 4, 48), (48, 6, 80)]  # (d_model, heads, d_ff)
B, T, S = 2, 11, 7  # batch, target length, memory length


def _causal(n: int) -> torch.Tensor:
    """torch's boolean attn_mask convention: True = may NOT attend."""
    return torch.ones(n, n, dtype=torch.bool).triu(1)


def _padding(n: int, pad_rows: dict[int, slice]) -> torch.Tensor:
    pad = torch.zeros(B, n, dtype=torch.bool)
    for row, where in pad_rows.items():
        pad[row, where] = True
    return pad


def _encoder_layer(d, heads, d_ff, norm_first, activation="relu", bias=True):
    layer = nn.TransformerEncoderLayer(
        d, heads, d_ff, dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first, bias=bias
    )
    return layer.eval()


def _decoder_layer(d, heads, d_ff, norm_first, activation="relu", bias=True):
    layer = nn.TransformerDecoderLayer(
        d, heads, d_ff, dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first, bias=bias
    )
    return layer.eval()


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer(shape, activation, norm_first, randomize, assert_parity):
    torch.manual_seed(1)
    layer = randomize(_encoder_layer(*shape, norm_first, activation))
    block = from_torch(layer)
    assert isinstance(block, Block)
    assert block.attn.name == ("pre" if norm_first else "post")
    x = torch.randn(B, T, shape[0])
    with torch.no_grad():
        assert_parity(block(x, Context()), layer(x))


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_encoder_layer_padding(norm_first, bias, randomize, assert_parity):
    torch.manual_seed(2)
    layer = randomize(_encoder_layer(32, 4, 48, norm_first, "gelu", bias=bias))
    block = from_torch(layer)
    x = torch.randn(B, T, 32)
    pad = _padding(T, {0: slice(8, None), 1: slice(0, 3)})  # right padding in row 0, left in row 1
    with torch.no_grad():
        ours = block(x, Context(padding_mask=pad))
        ref = layer(x, src_key_padding_mask=pad)
    assert_parity(ours[~pad], ref[~pad])  # padded queries' outputs are unused (torch may zero them)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer(shape, activation, norm_first, randomize, assert_parity):
    torch.manual_seed(3)
    layer = randomize(_decoder_layer(*shape, norm_first, activation))
    block = from_torch(layer)
    assert block.cross is not None and block.cross.name == block.attn.name
    x, memory = torch.randn(B, T, shape[0]), torch.randn(B, S, shape[0])
    with torch.no_grad():
        ours = block(x, Context(memory=memory))
        ref = layer(x, memory, tgt_mask=_causal(T), tgt_is_causal=True)
    assert_parity(ours, ref)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_padding(norm_first, randomize, assert_parity):
    torch.manual_seed(4)
    layer = randomize(_decoder_layer(32, 4, 48, norm_first, "gelu"))
    block = from_torch(layer)
    x, memory = torch.randn(B, T, 32), torch.randn(B, S, 32)
    pad = _padding(T, {1: slice(7, None)})  # right padding: every real query still sees itself
    memory_pad = _padding(S, {0: slice(4, None), 1: slice(0, 2)})
    ctx = Context(padding_mask=pad, memory=memory, memory_padding_mask=memory_pad)
    with torch.no_grad():
        ours = block(x, ctx)
        ref = layer(
            x, memory, tgt_mask=_causal(T), tgt_key_padding_mask=pad, memory_key_padding_mask=memory_pad
        )
    assert_parity(ours[~pad], ref[~pad])


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
@pytest.mark.parametrize("n_layers", [1, 3, 5])
@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_stack(n_layers, norm_first, randomize, assert_parity):
    """A TransformerEncoder (pre-LN with its final LayerNorm, post-LN without) is a Stack.

    Post-LN runs torch's nested-tensor fast path, a second, independent implementation.
    """
    torch.manual_seed(5)
    final = nn.LayerNorm(32) if norm_first else None
    torch_stack = nn.TransformerEncoder(
        _encoder_layer(32, 4, 48, norm_first, "gelu"),
        n_layers,
        norm=final,
        enable_nested_tensor=not norm_first,
    ).eval()
    randomize(torch_stack)
    stack = from_torch(torch_stack)
    assert isinstance(stack, Stack) and len(stack.layers) == n_layers
    assert stack.has_final_norm == norm_first
    x = torch.randn(B, T, 32)
    pad = _padding(T, {1: slice(6, None)})
    with torch.no_grad():
        ours, _ = stack(x, Context(padding_mask=pad))
        ref = torch_stack(x, src_key_padding_mask=pad)
    assert_parity(ours[~pad], ref[~pad])


@pytest.mark.parametrize("n_layers", [1, 3])
def test_decoder_stack(n_layers, randomize, assert_parity):
    torch.manual_seed(6)
    layer = _decoder_layer(16, 2, 24, True, "relu")
    torch_stack = randomize(nn.TransformerDecoder(layer, n_layers, norm=nn.LayerNorm(16)).eval())
    stack = from_torch(torch_stack)
    x, memory = torch.randn(B, T, 16), torch.randn(B, S, 16)
    with torch.no_grad():
        ours, _ = stack(x, Context(memory=memory))
        ref = torch_stack(x, memory, tgt_mask=_causal(T), tgt_is_causal=True)
    assert_parity(ours, ref)


def test_a_mis_copied_weight_is_detected(randomize, assert_parity):
    """The comparison is sharp enough to catch a layout error: swapping two query heads fails it."""
    torch.manual_seed(7)
    layer = randomize(_encoder_layer(32, 4, 48, True))
    block = from_torch(layer)
    x = torch.randn(B, T, 32)
    with torch.no_grad():
        q = block.attn.f.qkv.weight[:32]
        q.copy_(torch.cat([q[8:16], q[:8], q[16:]]))
        with pytest.raises(AssertionError, match="not close"):
            assert_parity(block(x, Context()), layer(x))


def test_tanh_gelu_is_torch_s_training_path_not_its_fused_inference(randomize, assert_parity):
    """GELU(approximate='tanh') imports as gelu_tanh, equal to torch in training; torch's fused path (eval,
    no gradients) computes the exact GELU for it, which the module's docstring names as torch's own."""
    layer = randomize(_encoder_layer(32, 4, 48, True, nn.GELU(approximate="tanh")))
    block = from_torch(layer)
    assert layer_config(layer).activation == "gelu_tanh"
    x = torch.randn(B, T, 32)
    with torch.no_grad():
        mine = block(x, Context())
        fused = layer(x)  # eval, no grad: torch's fused kernel
    assert_parity(mine, layer.train()(x).detach())  # torch's own path, dropout 0
    assert 1e-6 < ((fused - mine).norm() / mine.norm()).item() < 1e-3


def test_layer_config_reads_the_torch_layer():
    cfg = layer_config(_decoder_layer(48, 6, 80, False, nn.GELU(approximate="tanh")))
    assert (cfg.arch, cfg.d_model, cfg.n_heads, cfg.ffn_dim) == ("encdec", 48, 6, 80)
    assert (cfg.wrap, cfg.activation, cfg.family.norm_eps) == ("post", "gelu_tanh", 1e-5)


def test_unsupported_modules_are_input_errors():
    with pytest.raises(InputError, match="cannot import a Linear"):
        from_torch(nn.Linear(4, 4))
    with pytest.raises(InputError, match="activation"):
        from_torch(nn.TransformerEncoderLayer(16, 2, 24, activation=torch.tanh, batch_first=True))
    with pytest.raises(InputError, match="final norm"):
        layer = _encoder_layer(16, 2, 24, True)
        from_torch(nn.TransformerEncoder(layer, 1, norm=nn.Identity(), enable_nested_tensor=False))

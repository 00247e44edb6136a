"""Every single-stream wrapping computes today exactly what it computed before residual states existed.

tests/fixtures/wrap_golden/golden.pt was written by the code before the residual topologies
(hyper-connections, mHC, DenseFormer, ...) were added (its make.py says how): logits, the gradient of every
parameter, the state dict (keys and values) of tiny models under every wrapping, and the config hash and run
key of every preset's runs. Here they must be bit for bit the same where the CPU's kernels are those of the
machine that wrote the fixture (kernels.json: a fingerprint of PyTorch's own layers, written beside it); on
another CPU (whose matmul kernels round differently) equal to float32 rounding, keys and hashes exactly.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.fixtures.wrap_golden.kernels import digests, same_kernels
from tests.fixtures.wrap_golden.make import cases, hashes, run

GOLDEN = Path(__file__).parent / "fixtures" / "wrap_golden" / "golden.pt"
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def gold() -> dict:
    return torch.load(GOLDEN)


@pytest.fixture(scope="module")
def exact() -> bool:
    """Whether to ask for bit identity: on one thread, like the fixture (this module-scoped fixture runs
    before the function-scoped one_thread)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return same_kernels()
    finally:
        torch.set_num_threads(before)


def _same(now: torch.Tensor | None, then: torch.Tensor | None, exact: bool, what: str) -> None:
    assert (now is None) == (then is None), what
    if now is None:
        return
    assert now.shape == then.shape and now.dtype == then.dtype, what
    if exact:
        assert torch.equal(now, then), f"{what}: not bit-identical (max diff {(now - then).abs().max():.3g})"
    else:
        torch.testing.assert_close(now, then, rtol=1e-5, atol=1e-6, msg=what)


@pytest.mark.parametrize("name", list(cases()))
def test_every_wrapping_is_bit_identical(gold, exact, name):
    then, now = gold["runs"][name], run(cases()[name])
    _same(now["logits"], then["logits"], exact, f"{name} logits")
    assert list(now["state"]) == list(then["state"]), f"{name}: state-dict keys changed"
    assert list(now["grads"]) == list(then["grads"]), f"{name}: parameter names changed"
    for key, value in then["state"].items():
        _same(now["state"][key], value, exact, f"{name} state {key}")
    for key, value in then["grads"].items():
        _same(now["grads"][key], value, exact, f"{name} grad {key}")


def test_config_hashes_and_run_keys_are_unchanged(gold):
    now = hashes()
    assert now.keys() == gold["hashes"].keys()
    changed = [k for k, v in gold["hashes"].items() if now[k] != v]
    assert not changed, f"{len(changed)} keys changed, e.g. {changed[:3]}"


def test_the_kernel_fingerprint_sees_a_change_of_rounding():
    """Negative control: two threads split the reductions differently, and the fingerprint notices."""
    one = digests()
    torch.set_num_threads(2)
    try:
        two = digests()
    finally:
        torch.set_num_threads(1)
    changed = [k for k in one if one[k] != two[k]]
    assert changed, "the fingerprint did not change with the thread count"

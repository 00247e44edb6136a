"""Shared test helpers, exposed as fixtures; and the suite's one place for torch's thread count.

Threads: ``torch.set_num_threads`` is process-wide, so a test module must never call it (at import time it
would change every test collected after it). A test or module that wants one thread (a shared, busy
machine) asks for the ``one_thread`` fixture (``pytestmark = pytest.mark.usefixtures("one_thread")`` for a
whole module), which restores the previous count. ``_restore_threads`` (autouse) puts the count back after
every test, whatever the test or the code it called set; a run whose collection (test module imports)
changed the count is refused (``pytest_collection_finish``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

_THREADS_AT_START = pytest.StashKey[int]()


def pytest_configure(config):
    config.stash[_THREADS_AT_START] = torch.get_num_threads()


def pytest_collection_finish(session):
    before, now = session.config.stash[_THREADS_AT_START], torch.get_num_threads()
    if now != before:
        raise pytest.UsageError(
            f"importing the test modules changed torch's thread count from {before} to {now}: a test module "
            "calls torch.set_num_threads at import time; use the one_thread fixture (tests/conftest.py)"
        )


def _assert_parity(ours: torch.Tensor, ref: torch.Tensor, rel: float = 1e-5) -> float:
    """Elementwise ``assert_close`` at 1e-5 and ||ours - ref|| / ||ref|| <= ``rel``; returns that error.

    The norm-relative check keeps the comparison honest when outputs are small enough for the
    elementwise atol alone to hide a real difference.
    """
    assert ours.shape == ref.shape, f"shape {tuple(ours.shape)} != {tuple(ref.shape)}"
    assert torch.isfinite(ref).all(), "the reference output is not finite"
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)
    err = ((ours - ref).norm() / ref.norm()).item()
    assert err <= rel, f"relative error {err:.2e} > {rel:.0e}"
    return err


@torch.no_grad()
def _randomize(module: torch.nn.Module, gain: float = 1.5, seed: int = 0) -> torch.nn.Module:
    """Overwrite every parameter with values large and varied enough that a mis-mapped weight shows.

    Default inits (std 0.02, norm gains 1, biases 0) make attention near-uniform and leave gains and
    biases indistinguishable, so a swapped head, q/k or bias could pass a parity test unnoticed.
    Matrices get N(0, gain^2 / fan), gains N(1, 0.2^2), biases N(0, 0.2^2). Returns ``module``.
    """
    g = torch.Generator().manual_seed(seed)
    for name, p in module.named_parameters():
        if p.dim() >= 2:
            fresh = torch.randn(p.shape, generator=g) * gain / min(p.shape) ** 0.5
        elif name.endswith("weight"):
            fresh = 1 + 0.2 * torch.randn(p.shape, generator=g)
        else:
            fresh = 0.2 * torch.randn(p.shape, generator=g)
        p.copy_(fresh)
    return module


@pytest.fixture
def assert_parity():
    """The parity check of the interop tests (see ``_assert_parity``)."""
    return _assert_parity


@pytest.fixture
def randomize():
    """Re-initialise a module's parameters so that parity tests can fail (see ``_randomize``)."""
    return _randomize


def _swap_first_query_heads(model) -> None:
    """Exchange the query rows of heads 0 and 1 in layer 0 of a depthlab model: a layout error that a
    parity test must catch (its negative control)."""
    attn = model.stack.layers[0].attn.f
    hd = attn.head_dim
    q = attn.qkv.weight[: attn.n_heads * hd]
    with torch.no_grad():
        q.copy_(torch.cat([q[hd : 2 * hd], q[:hd], q[2 * hd :]]))


@pytest.fixture
def swap_query_heads():
    """The negative control of the parity tests (see ``_swap_first_query_heads``)."""
    return _swap_first_query_heads


@pytest.fixture
def one_thread():
    """Run the test on one intra-op thread (a shared, busy machine), restoring the setting after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _restore_threads():
    """Every test ends with torch's thread count as it found it (code under test may set it, e.g. the
    train and reproduce commands run in-process), so no setting leaks into the tests after it."""
    before = torch.get_num_threads()
    yield
    if torch.get_num_threads() != before:
        torch.set_num_threads(before)


SHIPPED_RECORD = Path(__file__).parent / "depthlab" / "doctor" / "calibration.json"


@pytest.fixture(autouse=True)
def _shipped_record_untouched(request):
    """No test leaves the shipped calibration record changed: the held-out pages tell the predictor advise
    ships by its bytes, so a refit written there by one test (last-digit float differences on another
    machine) would change what a later test reads. Put back, and the test that wrote it fails."""
    before = SHIPPED_RECORD.read_bytes()
    yield
    if SHIPPED_RECORD.read_bytes() != before:
        SHIPPED_RECORD.write_bytes(before)
        from depthlab.doctor.record import load_record

        load_record.cache_clear()
        pytest.fail(f"{request.node.nodeid} wrote the shipped calibration record (put back)", pytrace=False)

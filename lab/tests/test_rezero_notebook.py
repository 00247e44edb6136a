"""The ReZero examples notebook's Jacobian cell, run as written, prints the notebook's numbers."""

from __future__ import annotations

import torch

from depthlab_lab.reproduce.rezero_notebook import PRINTED, notebook_msv


def test_the_notebook_cell_reproduces_its_printed_numbers_at_12_and_128_layers():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for layers in (12, 128):
            got = notebook_msv(layers)
            assert [f"{v:.3f}" for v in got] == [f"{v:.3f}" for v in PRINTED[layers]], (layers, got)
    finally:
        torch.set_num_threads(threads)

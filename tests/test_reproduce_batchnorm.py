"""reproduce batchnorm (seed 000): LN/RMSNorm do not depend on the batch or the mode; BN does."""

import torch

from depthlab.reproduce.batchnorm import reproduce_batchnorm, sensitivity


def test_sensitivity_detects_a_batch_dependent_function():
    x, others = torch.randn(4, 3, 8), torch.randn(4, 3, 8)
    same = sensitivity(lambda b, train: b * 2, x, others)
    mixed = sensitivity(lambda b, train: b - b.mean(0, keepdim=True), x, others)
    assert max(same.values()) == 0.0
    assert mixed["other_items"] > 0.1 and mixed["batch_size"] > 0.1


def test_batchnorm_reproduction_checks_and_json(one_thread):
    r = reproduce_batchnorm(quick=True)
    d = r.to_dict()
    assert set(d) == {"norm_alone", "model", "training", "checks"}
    assert set(d["training"]["batchnorm"]) == {"eval_mode", "train_mode", "one_sequence", "mismatch"}
    assert d["checks"] and all(c["ok"] for c in d["checks"]), [c for c in d["checks"] if not c["ok"]]

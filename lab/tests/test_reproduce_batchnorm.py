"""reproduce batchnorm (Ba et al. 2016): LN/RMSNorm do not depend on the batch or the mode; BN does."""

import torch

from depthlab_lab.reproduce.claims.batchnorm import reproduce_batchnorm, sensitivity


def test_sensitivity_detects_a_batch_dependent_function():
    x, others = torch.randn(4, 3, 8), torch.randn(4, 3, 8)
    same = sensitivity(lambda b, train: b * 2, x, others)
    mixed = sensitivity(lambda b, train: b - b.mean(0, keepdim=True), x, others)
    assert max(same.values()) == 0.0
    assert mixed["other_items"] > 0.1 and mixed["batch_size"] > 0.1


def test_batchnorm_reproduction_checks_and_json(one_thread, monkeypatch):
    import depthlab_lab.reproduce.claims.batchnorm as bn

    monkeypatch.setattr(bn, "QUICK", {"steps": 20, "seeds": [0, 1]})
    r = reproduce_batchnorm(quick=True)
    d = r.to_dict()
    assert set(d) == {"scale", "regime", "norm_alone", "model", "training", "checks"}
    assert len(d["training"]["batchnorm"]) == 2
    assert set(d["training"]["batchnorm"][0]) == {
        "eval_mode",
        "train_mode",
        "one_sequence",
        "mismatch",
        "val_minus_train",
    }
    # the registered training check decides (counted); the definitional rows and the checks added after
    # it failed are shown apart
    counted = [c for c in d["checks"] if c["counted"]]
    assert [c["claim"].split(":")[0] for c in counted] == ["BN's train/eval mismatch shows in validation"]
    assert counted[0]["result"] in ("agree", "MISMATCH", "inconclusive") and "interval" in counted[0]
    sanity = [c for c in d["checks"] if not c["counted"]]
    assert len(sanity) == 8 and all(c["ok"] for c in sanity), [c for c in sanity if not c["ok"]]
    assert any("added after the registered" in c["sanity"] for c in sanity)

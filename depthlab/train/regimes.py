"""The byte-level language-modelling regimes: the tiny one the default study and the reproductions share,
and the reproductions' large scale.

Byte-level language modelling on the default corpus (the standard library's own source), a decoder of
d_model 32 with 4 heads, sequences of 32 bytes in batches of 16, Adam with beta2 0.98 (the original
recipe, Vaswani et al. 2017; Xiong et al. 2020 use it too): small enough to train in seconds on two
cores, deep enough (from 6 layers) to show post-LN's trouble. Each user overrides what it varies
(wrapping, depth, warmup, learning rate, steps); these dicts are field values of
:class:`depthlab.ModelConfig` and :class:`depthlab.TrainConfig`.
"""

TINY_LM_MODEL = {"arch": "decoder", "d_model": 32, "n_heads": 4, "vocab_size": 256, "max_len": 64}
TINY_LM_TRAIN = {"task": "lm", "steps": 150, "batch_size": 16, "seq_len": 32, "beta2": 0.98, "log_every": 10}

# The reproductions' large scale (`depthlab reproduce NAME --scale large`): the same byte-level task
# with a d_model 256 decoder (8 heads of 32) on 32 windows of 128 bytes per update; each claim sets
# its own steps (2,000 or more). Sized for a GPU, not a CPU night (benchmarks/gpu.py --reproduce
# --dry-run prints its plan).
LARGE_LM_MODEL = {"arch": "decoder", "d_model": 256, "n_heads": 8, "vocab_size": 256, "max_len": 128}
LARGE_LM_TRAIN = {
    "task": "lm", "steps": 2000, "batch_size": 32, "seq_len": 128, "beta2": 0.98, "log_every": 50,
    "eval_every": 500,
}  # fmt: skip

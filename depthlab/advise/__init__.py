"""Advice a user can act on: the expected outcome of a run with its probability, the safe learning rate,
the alternatives ranked, the measured runs behind it (:mod:`depthlab.advise.advice`).

    import depthlab
    from depthlab import ModelConfig, TrainConfig
    a = depthlab.advise(ModelConfig(n_layers=48, d_model=512, n_heads=8, wrap="post"), TrainConfig(lr=1e-3, warmup=2000))
    print(a.format()); a.to_dict()
"""

from depthlab.advise.advice import ALTERNATIVES, Advice, Option, advise
from depthlab.callable_package import make_callable

make_callable(__name__, advise)  # depthlab.advise(model, train) calls advise

__all__ = ["ALTERNATIVES", "Advice", "Option", "advise"]

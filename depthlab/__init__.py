"""depthlab: build, probe, train and study deep Transformer stacks under every residual/norm wrapping."""

from depthlab import watch  # a callable module: depthlab.watch(model, optimizer, every=10, out=None)
from depthlab.config import ModelConfig, TrainConfig
from depthlab.errors import ConfigError, InputError
from depthlab.model import build_model
from depthlab.version import __version__

__all__ = ["ConfigError", "InputError", "ModelConfig", "TrainConfig", "__version__", "build_model", "watch"]

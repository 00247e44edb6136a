"""depthlab: build, probe, train and study deep Transformer stacks under every residual/norm wrapping."""

from depthlab.config import ModelConfig, TrainConfig
from depthlab.errors import ConfigError, InputError
from depthlab.model import build_model

__all__ = ["ConfigError", "InputError", "ModelConfig", "TrainConfig", "build_model"]
__version__ = "0.1.0"

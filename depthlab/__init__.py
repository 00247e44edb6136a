"""depthlab: build, probe, train and study deep Transformer stacks under every residual/norm wrapping.

``depthlab.open(path)`` opens a study store (:func:`depthlab.report.view.open_store`):
``depthlab.open("runs/depthlab.sqlite").study("default")``.
"""

from importlib import import_module as _import_module

from depthlab import watch  # a callable package: depthlab.watch(model, optimizer, every=10, out=None)
from depthlab.config import FamilyOptions, ModelConfig, TopologyOptions, TrainConfig
from depthlab.errors import ConfigError, InputError
from depthlab.model import build_model
from depthlab.model.param_groups import param_groups
from depthlab.report.view import open_store
from depthlab.version import __version__


def __getattr__(name: str):
    """``depthlab.advise`` is imported when first used (it loads the probe and the atlas's machinery)."""
    if name == "advise":
        return _import_module("depthlab.advise")
    raise AttributeError(f"module 'depthlab' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The module's names and ``advise``, which is not one until first used (tab completion shows it)."""
    return sorted(set(globals()) | {"advise"})


# depthlab.open(path) opens a study store. It is left out of __all__, so that ``from depthlab import *``
# never replaces the builtin open; inside the package the builtin is always what ``open`` means.
open = open_store

__all__ = [
    "ConfigError",
    "FamilyOptions",
    "InputError",
    "ModelConfig",
    "TopologyOptions",
    "TrainConfig",
    "__version__",
    "advise",
    "build_model",
    "open_store",
    "param_groups",
    "watch",
]

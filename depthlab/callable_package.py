"""A package that is also its main function: ``depthlab.watch(model)``, ``depthlab.advise(model, train)``.

Calling such a package calls the function of the same name, so that neither the function nor the
package (with its other names: ``depthlab.watch.replay``, ``depthlab.advise.Advice``) hides the other.
"""

from __future__ import annotations

import inspect
import sys
import types


def make_callable(module_name: str, fn) -> None:
    """Make the package ``module_name`` call ``fn`` when called, with ``fn``'s signature for inspect and
    help()."""

    class CallablePackage(types.ModuleType):
        def __call__(self, *args, **kwargs):
            return fn(*args, **kwargs)

    module = sys.modules[module_name]
    module.__class__ = CallablePackage
    module.__signature__ = inspect.signature(fn)

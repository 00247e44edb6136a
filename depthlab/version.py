"""depthlab's version (one place; the package, run folders and reports read it here)."""

__version__ = "0.1.0"

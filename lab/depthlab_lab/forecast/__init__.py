"""How well the watcher's early warnings and the published divergence detectors foretell a run's outcome,
scored on held-out studies (`depthlab forecast`)."""

"""A study store of finished tuning runs built without training: each run's probe and outcome given by a
function of its spec, for the tests of the doctor's fits and of `depthlab calibrate`."""

from __future__ import annotations

from collections.abc import Callable

from depthlab.study.grid import StudyConfig
from depthlab.study.store import Store


def tuning_store(path: str, study: dict, judge: Callable) -> str:
    """``path``, a store holding ``study`` (a grid as a dict) with every run finished: ``judge(spec)``
    returns (the probe's "config" section, the run's result fields, e.g. {"outcome": "trained"}); the
    unigram loss is 3.0 unless the result says otherwise."""
    grid = StudyConfig.from_dict(study)
    with Store(path) as s:
        specs = grid.expand()
        sid = s.add_study(grid.name, grid.to_dict(), grid.config_hash(), specs)
        for spec, run in zip(specs, s.runs(sid)):
            probe_config, result = judge(spec)
            probe_json = {"config": probe_config, "layers": [], "verdicts": []}
            s.finish(run["id"], {"result": {"unigram_loss": 3.0, **result}, "probe": probe_json})
    return path

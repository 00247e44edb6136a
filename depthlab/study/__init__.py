"""Studies: grids of training runs, run on a local pool or Ray, stored in SQLite, resumable.

from depthlab.study import StudyConfig, preset, run_study, Store
outcome = run_study(preset("smoke"), db="runs/depthlab.sqlite", workers=2)
"""

from depthlab.study.grid import RunSpec, StudyConfig, run_hash
from depthlab.study.presets import PRESETS, preset
from depthlab.study.runner import StudyOutcome, plan, run_study
from depthlab.study.store import DEFAULT_DB, Store

__all__ = [
    "DEFAULT_DB",
    "PRESETS",
    "RunSpec",
    "Store",
    "StudyConfig",
    "StudyOutcome",
    "plan",
    "preset",
    "run_hash",
    "run_study",
]

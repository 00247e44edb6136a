"""Training with trainability telemetry: tasks and data, schedules, the loop, outcome detection, checkpoints.

from depthlab.train import train, RunResult
result = train(model_cfg, train_cfg, out_dir=None)   # out_dir=None: nothing written
"""

from depthlab.train.loop import train
from depthlab.train.run_result import RunResult

__all__ = ["RunResult", "train"]

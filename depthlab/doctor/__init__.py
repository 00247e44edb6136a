"""The doctor: what a probe's measurements at init say about how a stack will train.

- :mod:`~depthlab.doctor.checks`: the at-init checks (vanishing or exploding gradient, stream growth, a
  missing final norm, warmup) and :func:`diagnose`, every verdict that applies to a probe.
- :mod:`~depthlab.doctor.lr_limit`: the learning-rate ceiling for a stack and warmup, from the update it
  takes at init and the limits fitted on tuning runs.
- :mod:`~depthlab.doctor.plateau`: when a run is expected to leave the unigram plateau.
- :mod:`~depthlab.doctor.record`: the fitted record (``calibration.json`` beside it: data the library
  reads, written by the lab's ``depthlab calibrate``) and where it was calibrated.
- :mod:`~depthlab.doctor.verdict`: a finding: level, code, message.
- :mod:`~depthlab.report.doctor_score`: a verdict against a run's outcome.
"""

from depthlab.doctor.checks import diagnose, prediction
from depthlab.doctor.verdict import Verdict

__all__ = ["Verdict", "diagnose", "prediction"]

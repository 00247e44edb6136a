"""The doctor's calibration: its rules fitted on tuning studies and written into the record the
library reads (:mod:`depthlab_lab.calibrate.refit`), and the baselines its held-out grids are scored against."""

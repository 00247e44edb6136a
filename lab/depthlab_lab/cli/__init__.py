"""The two commands the lab adds to ``depthlab``: ``reproduce`` and ``calibrate``."""

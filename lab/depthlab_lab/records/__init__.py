"""The doctor's calibration records as each earlier held-out grid was registered: package data of the lab."""

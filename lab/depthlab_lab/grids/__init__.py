"""The grids the doctor was tuned and scored on, and advise's held-out grids: package data of the lab."""

"""pandas DataFrames of depthlab's results, with fixed, documented columns.

pandas is an optional extra (``pip install 'depthlab[notebook]'``): it is imported here, inside
:func:`to_frame`, only when a frame is asked for, so ``import depthlab`` never loads it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from depthlab.errors import InputError

PANDAS_HINT = "pip install 'depthlab[notebook]' (or pip install pandas)"


def to_frame(rows: Iterable[dict], columns: Sequence[str], numeric: Iterable[str] = ()):
    """A ``pandas.DataFrame`` with exactly ``columns``, in that order, one row per dict of ``rows``
    (a key a row lacks is missing there). Columns in ``numeric`` are float64, a missing value NaN.

    Raises ModuleNotFoundError, saying how to install it, when pandas is not installed.
    """
    try:
        import pandas as pd
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError(f"to_pandas() needs pandas, an optional extra: {PANDAS_HINT}") from e
    frame = pd.DataFrame([[row.get(c) for c in columns] for row in rows], columns=list(columns))
    for c in numeric:
        frame[c] = pd.to_numeric(frame[c], errors="coerce").astype("float64")
    return frame


def check_table(table: str, tables: Sequence[str]) -> None:
    """Refuse (InputError naming the choices) a table name that is not one of ``tables``."""
    if table not in tables:
        raise InputError(f"no table {table!r}: one of {', '.join(tables)}")

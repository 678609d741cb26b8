"""A number read from a file the simulator is given: a profile's YAML, a model directory's config.json.

Both formats hold what no setting can be (YAML's ``.nan`` and ``.inf``, JSON's ``NaN`` and ``Infinity``,
an integer past a float's range), so each reader takes its numbers through ``finite_number`` and reports
the refusal with its own error, naming the file and the key.
"""

from __future__ import annotations

import math


def finite_number(value: object) -> float:
    """``value`` as a float; ``ValueError``, saying why, unless it is a finite int or float (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"a number is required, got {value!r}")
    try:
        number = float(value)
    except OverflowError:
        raise ValueError("must be a finite number, got an integer too large for a float") from None
    if not math.isfinite(number):
        raise ValueError(f"must be a finite number, got {number}")
    return number

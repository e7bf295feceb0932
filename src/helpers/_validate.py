"""Argument checks shared by the chapter modules: one clear line instead of a wrong number."""

from __future__ import annotations

import math


def positive(**values: float) -> None:
    """Each value must be a positive finite int or float (not a bool)."""
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{name} must be a number, got {type(value).__name__}")
        if not value > 0 or math.isinf(value):
            raise ValueError(f"{name} must be a positive finite number, got {value!r}")


def count(minimum: int = 1, **values: int) -> None:
    """Each value must be an int (not a bool) of at least ``minimum``."""
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            want = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise ValueError(f"{name} must be {want}, got {value!r}")

"""Argument checks shared by the chapter modules: one clear line instead of a wrong number
(counts, flags, paths, names from a fixed list)."""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def positive(**values: float) -> None:
    """Each value must be a positive finite int or float (not a bool)."""
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{name} must be a number, got {type(value).__name__}")
        if not value > 0 or math.isinf(value):
            raise ValueError(f"{name} must be a positive finite number, got {value!r}")


def count(minimum: int = 1, **values: float) -> tuple[int, ...]:
    """Each value must be a whole number (not a bool) of at least ``minimum``: an int, or a
    float with no fraction (``124e6`` is a count written the way papers write it). Returns the
    values as ints, in order, for callers that pass them on to torch."""
    out = []
    for name, value in values.items():
        whole = (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and math.isfinite(value) and value.is_integer()
        )
        if not whole or value < minimum:
            want = "a positive whole number" if minimum == 1 else f"a whole number >= {minimum}"
            raise ValueError(f"{name} must be {want}, got {value!r}")
        out.append(int(value))
    return tuple(out)


def whole_fields(obj: Any, *names: str, minimum: int = 1) -> None:
    """:func:`count` for fields of a dataclass (frozen ones too): checked, and stored as ints."""
    label = type(obj).__name__
    checked = count(minimum, **{f"{label}.{name}": getattr(obj, name) for name in names})
    for name, value in zip(names, checked, strict=True):
        object.__setattr__(obj, name, value)


def flag(**values: Any) -> None:
    """Each value must be True or False: a string such as ``"no"`` would silently read as True."""
    for name, value in values.items():
        if not isinstance(value, bool) and type(value).__name__ != "bool_":  # numpy's bool too
            raise TypeError(f"{name} must be True or False, got {value!r}")


def path(name: str, value: Any) -> Path:
    """A file path given as a str or an os.PathLike, as a Path."""
    if isinstance(value, bool) or not isinstance(value, (str, os.PathLike)):
        raise TypeError(
            f"{name} must be a file path (a str or pathlib.Path), got {type(value).__name__} {value!r}"
        )
    return Path(value)


class UnknownName(KeyError, ValueError):
    """A name that is not in a fixed list. Both a KeyError and a ValueError (callers catch
    either); printed as one line, not in the quotes KeyError adds."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def unknown(
    kind: str,
    value: Any,
    options: Iterable[Any],
    *,
    near: str | None = None,
    error: type[UnknownName] = UnknownName,
) -> UnknownName:
    """The error for ``value`` not among ``options``, naming the nearest option when one is
    close (``'gpt2-smal'`` -> did you mean ``'gpt2-small'``?). Raise what it returns.
    ``near``: the option to suggest, where the caller knows better than a spelling match;
    ``error``: a subclass of :class:`UnknownName` that a module's callers catch."""
    names = [str(o) for o in options]
    if near is None:
        close = difflib.get_close_matches(str(value), names, n=1, cutoff=0.6)
        near = close[0] if close else None
    hint = f"did you mean {near!r}? " if near else ""
    return error(f"unknown {kind} {value!r}; {hint}choose one of: {', '.join(names)}")

"""Friendly checks for exercise cells.

Each check prints one line starting with a tick when the answer is right, and raises
:class:`CheckFailed` (an ``AssertionError``, so nbgrader scores the cell 0) with one or two
lines saying what was expected, what was got, and a hint when it is wrong.
"""

from __future__ import annotations

import contextlib
import math
import types
from collections.abc import Iterable, Iterator
from typing import Any


class CheckFailed(AssertionError):
    """A wrong answer. The message is meant for the learner, not for a developer."""


def _fmt(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 10_000 else str(value)
    if isinstance(value, float):
        if value == 0 or math.isnan(value) or math.isinf(value):
            return repr(value)
        if 1e-3 <= abs(value) < 1e5:
            return f"{value:.6g}"
        return f"{value:.4e}"
    return repr(value)


def _fail(what: str, expected: str, got: Any, hint: str) -> None:
    __tracebackhide__ = True  # IPython and pytest hide this frame
    message = f"✗ {what}: expected {expected}, got {_fmt(got)}."
    if got is None:
        message += " Did your function `return` its result?"
    if hint:
        message += f"\n  Hint: {hint}"
    raise CheckFailed(message)


def _ok(what: str, quiet: bool) -> None:
    if not quiet:
        print(f"✓ {what}")


def close(
    got: Any,
    expected: float,
    what: str,
    *,
    rtol: float = 1e-6,
    atol: float = 0.0,
    hint: str = "",
    quiet: bool = False,
) -> None:
    """Check that a number is within ``rtol`` (relative) or ``atol`` of ``expected``."""
    __tracebackhide__ = True
    tolerance = f" (within {rtol:.0%})" if rtol >= 1e-3 else ""
    try:
        value = float(got)
    except (TypeError, ValueError):
        _fail(what, f"a number{tolerance} ≈ {_fmt(expected)}", got, hint)
    if math.isnan(value) or not math.isclose(value, expected, rel_tol=rtol, abs_tol=atol):
        _fail(what, f"{_fmt(expected)}{tolerance}", got, hint)
    _ok(what, quiet)


def equal(got: Any, expected: Any, what: str, *, hint: str = "", quiet: bool = False) -> None:
    """Check exact equality (for counts, labels and integers)."""
    __tracebackhide__ = True
    if isinstance(got, str) and isinstance(expected, str):
        got_cmp, exp_cmp = got.strip().lower(), expected.strip().lower()
    else:
        got_cmp, exp_cmp = got, expected
    if isinstance(expected, bool) != isinstance(got, bool) or got_cmp != exp_cmp:
        _fail(what, _fmt(expected), got, hint)
    _ok(what, quiet)


def one_of(got: Any, allowed: Iterable[Any], what: str, *, hint: str = "") -> None:
    """Check that an answer is one of the allowed labels (a shape check before grading it)."""
    __tracebackhide__ = True
    options = list(allowed)
    if got not in options:
        _fail(what, "one of " + ", ".join(_fmt(o) for o in options), got, hint)


def _blocked_function(qualified_name: str) -> types.FunctionType:
    namespace: dict[str, Any] = {}
    message = (
        f"This exercise asks you to compute it yourself; calling {qualified_name} "
        "is switched off while it is graded."
    )
    exec(f"def blocked(*args, **kwargs):\n    raise RuntimeError({message!r})", namespace)
    return namespace["blocked"]


def _same_source(a: types.CodeType, b: types.CodeType) -> bool:
    return (a.co_filename, a.co_firstlineno, a.co_name) == (b.co_filename, b.co_firstlineno, b.co_name)


def _copies_of(fn: types.FunctionType) -> list[types.FunctionType]:
    """``fn`` and every other live function compiled from the same source lines.

    A module imported twice (the grader re-imports the helpers before each test cell) or a
    function rebuilt from the helper's code object would otherwise escape the block.
    """
    import gc

    return [fn] + [obj for obj in gc.get_objects()
                   if type(obj) is types.FunctionType and obj is not fn
                   and _same_source(obj.__code__, fn.__code__)]


@contextlib.contextmanager
def blocked(module: Any, *names: str) -> Iterator[None]:
    """Switch off ``module.name`` for the duration of a check.

    The function's code object is swapped — in this function and in every other live copy
    compiled from the same source — so the helper is blocked however the learner reached it
    (``helpers.roofline.intensity``, ``from helpers.roofline import intensity``, an alias, an
    earlier import of the module). Used by hidden tests: an exercise passed by calling the
    helper that implements it teaches nothing.
    """
    saved: list[tuple[types.FunctionType, types.CodeType, Any, Any]] = []
    try:
        for name in names:
            fn = getattr(module, name)
            if not isinstance(fn, types.FunctionType):
                raise TypeError(f"{getattr(module, '__name__', module)}.{name} is not a plain function")
            stand_in = _blocked_function(f"{getattr(module, '__name__', module)}.{name}")
            for copy in _copies_of(fn):
                if copy.__code__.co_freevars:
                    continue  # a closure cannot take a code object without free variables
                saved.append((copy, copy.__code__, copy.__defaults__, copy.__kwdefaults__))
                copy.__code__ = stand_in.__code__
                copy.__defaults__, copy.__kwdefaults__ = None, None
        yield
    finally:
        for fn, code, defaults, kwdefaults in saved:
            fn.__code__, fn.__defaults__, fn.__kwdefaults__ = code, defaults, kwdefaults

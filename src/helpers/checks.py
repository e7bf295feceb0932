"""Friendly checks for exercise cells.

**Visible checks** (:func:`close`, :func:`equal`, :func:`one_of`, :func:`at_most`) compare on the
spot: each prints one line starting with a tick when the answer is right, and raises
:class:`CheckFailed` (an ``AssertionError``, so nbgrader scores the cell 0) with one or two
lines saying what was expected, what was got, and a hint when it is wrong.

**Hidden checks** (``hidden.close``, ``hidden.equal``, ``hidden.one_of``) are what grading
relies on. Their expected side is a zero-argument function, ``expect=lambda: ...``:

- under ``trainperf grade`` the grader removes every ``expect=`` before the learner's kernel
  sees the cell, so no expected value ever exists in that process; the check only turns the
  answer into plain data and records it, and the grading process compares it with what the
  reference solution recorded for the same check (:mod:`helpers._records`);
- in the reference run the grader checks the solution against ``expect()`` and records both;
- anywhere else (stock ``nbgrader autograde``, a learner's own kernel) the check calls
  ``expect()`` and compares in the kernel, like a visible check — weaker, but never a pass
  without a comparison.
"""

from __future__ import annotations

import contextlib
import math
import types
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from . import _records
from .i18n import text, tr


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
    """Raise the learner's message; label and hint are shown in the notebook's language."""
    __tracebackhide__ = True  # IPython and pytest hide this frame
    message = tr("✗ {what}: expected {expected}, got {got}.", what=text(what), expected=expected,
                 got=_fmt(got))
    if got is None:
        message += tr(" Did your function `return` its result?")
    if hint:
        message += tr("\n  Hint: {hint}", hint=text(hint))
    raise CheckFailed(message)


def _ok(what: str, quiet: bool) -> None:
    if not quiet:
        print(f"✓ {text(what)}")


def _within(rtol: float) -> str:
    return tr(" (within {rtol:.0%})", rtol=rtol) if rtol >= 1e-3 else ""


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
    tolerance = _within(rtol)
    try:
        value = float(got)
    except (TypeError, ValueError):
        _fail(what, tr("a number{tolerance} ≈ {expected}", tolerance=tolerance, expected=_fmt(expected)),
              got, hint)
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
        _fail(what, tr("one of {options}", options=", ".join(_fmt(o) for o in options)), got, hint)


def at_most(count: Any, limit: int, what: str, *, hint: str = "", quiet: bool = False) -> None:
    """Check that a count is at most ``limit``; a failure says the count and the limit."""
    __tracebackhide__ = True
    if isinstance(count, bool) or not isinstance(count, int) or count > limit:
        _fail(what, tr("at most {limit}", limit=_fmt(limit)), count, hint)
    _ok(tr("{what}: {count} (at most {limit})", what=text(what), count=count, limit=limit), quiet)


class _Hidden:
    """Hidden checks; see the module docstring. ``checks.hidden`` is the one instance."""

    def close(self, got: Any, what: str, *, expect: Callable[[], Any] | None, rtol: float = 1e-6,
              atol: float = 0.0, hint: str = "") -> None:
        """A number (or a list / dict of numbers) within ``rtol`` or ``atol`` of ``expect()``."""
        __tracebackhide__ = True
        self._check("close", got, what, expect, hint, rtol=rtol, atol=atol)

    def equal(self, got: Any, what: str, *, expect: Callable[[], Any] | None, hint: str = "") -> None:
        """Exactly ``expect()`` (labels trimmed and case-blind; a bool never equals a number)."""
        __tracebackhide__ = True
        self._check("equal", got, what, expect, hint)

    def one_of(self, got: Any, what: str, *, expect: Callable[[], Iterable[Any]] | None,
               hint: str = "") -> None:
        """One of the answers ``expect()`` accepts (for questions with several right answers)."""
        __tracebackhide__ = True
        self._check("one_of", got, what, expect, hint)

    @staticmethod
    def _check(kind: str, got: Any, what: str, expect: Callable[[], Any] | None, hint: str,
               rtol: float = 1e-6, atol: float = 0.0) -> None:
        __tracebackhide__ = True
        record: dict[str, Any] = {"what": what, "kind": kind, "rtol": rtol, "atol": atol}
        try:
            record["value"] = _records.to_plain(got)
        except _records.NotPlain as exc:
            record["error"] = str(exc)
        if expect is None:
            if not _records.recording():
                raise CheckFailed(tr("✗ {what}: this hidden check has no expected value here; "
                                     "it is graded by `trainperf grade`.", what=text(what)))
            _records.emit(record)  # the learner's kernel under trainperf grade: data only
            return
        wanted = _records.to_plain(list(expect()) if kind == "one_of" else expect())
        if "error" in record or not _records.compare(kind, record["value"], wanted, rtol, atol):
            shown = (tr("one of {options}", options=", ".join(_fmt(w) for w in wanted))
                     if kind == "one_of" else _fmt(wanted))
            if kind == "close":
                shown += _within(rtol)
            _fail(what, shown, got, record.get("error") or hint)
        if _records.recording():  # the reference run: the solution agreed with expect()
            record["expected"] = wanted
            _records.emit(record)


hidden = _Hidden()


def _blocked_function(qualified_name: str) -> types.FunctionType:
    """A stand-in whose code replaces the helper's. It runs with the helper module's globals,
    so it names nothing global but the builtin ``__import__``."""
    namespace: dict[str, Any] = {}
    message = tr("This exercise asks you to compute it yourself; calling {name} is switched off "
                 "while it is graded.", name=qualified_name)
    exec(f"def blocked(*args, **kwargs):\n"
         f"    records = __import__('helpers._records', fromlist=['emit'])\n"
         f"    if records.recording():\n"
         f"        records.emit({{'event': 'blocked-call', 'helper': {qualified_name!r}}})\n"
         f"    raise RuntimeError({message!r})", namespace)
    return namespace["blocked"]


_SKIP_OPS = {"CACHE", "NOP", "RESUME", "PRECALL", "EXTENDED_ARG", "COPY_FREE_VARS", "MAKE_CELL"}


def fingerprint(code: types.CodeType) -> tuple:
    """What a function's code computes, without where it was compiled (file, line, names of
    its locals, whether its module imported ``math`` in the same file): a copy made by
    ``exec(inspect.getsource(f))``, by re-executing the module under another file name or by
    renaming its variables has the same fingerprint. Instructions are compared by name and
    by their global / attribute / constant argument; jump offsets and local names are not."""
    import dis

    ops = []
    for ins in dis.get_instructions(code):
        if ins.opname in _SKIP_OPS:
            continue
        name = {"LOAD_METHOD": "LOAD_ATTR"}.get(ins.opname, ins.opname)
        if ins.opcode in dis.hasjrel or ins.opcode in dis.hasjabs or ins.opcode in dis.haslocal:
            ops.append(name)
        elif isinstance(ins.argval, types.CodeType):
            ops.append((name, fingerprint(ins.argval)))
        else:
            ops.append((name, type(ins.argval).__name__, repr(ins.argval)))
    return (tuple(ops), code.co_argcount, code.co_kwonlyargcount)


def _from_a_notebook_cell(code: types.CodeType) -> bool:
    """Code the learner typed into a cell: never taken for a helper, even if it compiles the
    same (a correct one-line answer can look exactly like a one-line helper)."""
    return "/ipykernel_" in code.co_filename or code.co_filename.startswith("<ipython-input-")


def _copies_of(targets: list[types.FunctionType]) -> list[list[types.FunctionType]]:
    """For each target, the target and every other live function compiled from the same
    source (file, line, name) or with the same code (:func:`fingerprint`).

    A module imported twice (the grader re-imports the helpers before each test cell), a
    function rebuilt from the helper's code object, a module re-executed under another file
    name or ``exec(inspect.getsource(...))`` would otherwise escape the block. One pass over
    the heap for all targets; the names a function uses filter before the full fingerprint.
    """
    import gc

    by_place = {(f.__code__.co_filename, f.__code__.co_firstlineno, f.__code__.co_name): i
                for i, f in enumerate(targets)}
    by_shape: dict[tuple, list[int]] = {}
    for i, f in enumerate(targets):
        by_shape.setdefault((f.__code__.co_names, f.__code__.co_argcount), []).append(i)
    prints: dict[int, tuple] = {}
    found: list[list[types.FunctionType]] = [[f] for f in targets]
    for obj in gc.get_objects():
        if type(obj) is not types.FunctionType or any(obj is f for f in targets):
            continue
        code = obj.__code__
        place = by_place.get((code.co_filename, code.co_firstlineno, code.co_name))
        if place is not None:
            found[place].append(obj)
            continue
        candidates = by_shape.get((code.co_names, code.co_argcount), ())
        if not candidates or _from_a_notebook_cell(code):
            continue
        mine = fingerprint(code)
        for i in candidates:
            if i not in prints:
                prints[i] = fingerprint(targets[i].__code__)
            if mine == prints[i]:
                found[i].append(obj)
                break
    return found


@contextlib.contextmanager
def blocked(module: Any, *names: str) -> Iterator[None]:
    """Switch off ``module.name`` for the duration of a check.

    The function's code object is swapped — in this function and in every other live copy
    compiled from the same source or with the same code — so the helper is blocked however
    the learner reached it (``helpers.roofline.intensity``, ``from helpers.roofline import
    intensity``, an alias, an earlier import of the module, a copy rebuilt from its source).
    Used by hidden tests: an exercise passed by calling the helper that implements it teaches
    nothing. Under ``trainperf grade`` a call to a blocked helper is also reported to the
    instructor.
    """
    label = getattr(module, "__name__", module)
    targets = []
    for name in names:
        fn = getattr(module, name)
        if not isinstance(fn, types.FunctionType):
            raise TypeError(f"{label}.{name} is not a plain function")
        targets.append(fn)
    saved: list[tuple[types.FunctionType, types.CodeType, Any, Any]] = []
    try:
        for name, copies in zip(names, _copies_of(targets), strict=True):
            stand_in = _blocked_function(f"{label}.{name}")
            for copy in copies:
                if copy.__code__.co_freevars:
                    continue  # a closure cannot take a code object without free variables
                saved.append((copy, copy.__code__, copy.__defaults__, copy.__kwdefaults__))
                copy.__code__ = stand_in.__code__
                copy.__defaults__, copy.__kwdefaults__ = None, None
        yield
    finally:
        for fn, code, defaults, kwdefaults in reversed(saved):
            fn.__code__, fn.__defaults__, fn.__kwdefaults__ = code, defaults, kwdefaults

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
from ._validate import flag as _flag
from .i18n import language, text, tr, tr_in


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


def _real(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def _fmt_pair(expected: Any, got: Any) -> tuple[str, str] | None:
    """Expected and got in ONE number format, so they can be read side by side (not
    ``31,406,250,000`` against ``6.0938e+10``); None when either is not a finite number."""
    if not (_real(expected) and _real(got)):
        return None
    if all(float(v).is_integer() and abs(v) < 1e18 for v in (expected, got)):
        return tuple(f"{int(v):,}" if abs(v) >= 10_000 else str(int(v)) for v in (expected, got))
    largest = max(abs(expected), abs(got))
    if all(v == 0 or 1e-3 <= abs(v) for v in (expected, got)) and largest < 1e5:
        return f"{expected:.6g}", f"{got:.6g}"
    return f"{expected:.4e}", f"{got:.4e}"


def expected_text(shown: dict[str, Any], lang: str | None = None) -> str:
    """What a visible check expected, in words: ``shown`` is ``{"kind", "expected", "rtol"}``
    with the expected side already formatted. The learner's kernel says it in the notebook's
    language; the grading process says it for a submission's feedback (``lang``)."""
    lang = lang or language()
    kind, expected = shown.get("kind"), str(shown.get("expected", ""))
    if kind == "one_of":
        return tr_in(lang, "one of {options}", options=expected)
    if kind == "at_most":
        return tr_in(lang, "at most {limit}", limit=expected)
    rtol = float(shown.get("rtol") or 0.0)
    within = tr_in(lang, " (within {rtol:.0%})", rtol=rtol) if kind == "close" and rtol >= 1e-3 else ""
    return expected + within


def _visible_event(what: str, ok: bool, shown: dict[str, Any], hint: str, got: Any = 0) -> None:
    """Under ``trainperf grade``: what a visible check decided, as data. The grader writes the
    feedback from these (and the reference run's labels), never from what the kernel prints."""
    if _records.recording():
        _records.emit({"event": "visible", "what": what, "ok": ok, "shown": shown, "hint": hint,
                       "none": got is None})


def _fail(what: str, shown: dict[str, Any], got: Any, hint: str, visible: bool = True,
          expected_value: Any = None) -> None:
    """Raise the learner's message; label and hint are shown in the notebook's language.
    With ``expected_value``, a number, expected and got are printed in one format."""
    __tracebackhide__ = True  # IPython and pytest hide this frame
    if visible:
        _visible_event(what, False, shown, hint, got)
    pair = _fmt_pair(expected_value, got) if shown.get("kind") in ("close", "equal", "at_most") else None
    if pair is not None:
        shown = {**shown, "expected": pair[0]}
    expected = expected_text(shown)
    if shown.get("kind") == "number":
        expected = tr("a number{tolerance} ≈ {expected}", tolerance=_within(shown.get("rtol", 0.0)),
                      expected=shown["expected"])
    message = tr("✗ {what}: expected {expected}, got {got}.", what=text(what), expected=expected,
                 got=pair[1] if pair is not None else _fmt(got))
    if got is None:
        message += tr(" Did your function `return` its result?")
    if hint:
        message += tr("\n  Hint: {hint}", hint=text(hint))
    raise CheckFailed(message)


def _ok(what: str, quiet: bool, shown: dict[str, Any], hint: str, label: str | None = None) -> None:
    _visible_event(what, True, shown, hint)
    if not quiet:
        print(f"✓ {label if label is not None else text(what)}")


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
    _flag(quiet=quiet)
    __tracebackhide__ = True
    shown = {"kind": "close", "expected": _fmt(expected), "rtol": rtol}
    try:
        value = float(got)
    except (TypeError, ValueError):
        _fail(what, {**shown, "kind": "number"}, got, hint)
    if math.isnan(value) or not math.isclose(value, expected, rel_tol=rtol, abs_tol=atol):
        _fail(what, shown, got, hint, expected_value=expected)
    _ok(what, quiet, shown, hint)


def equal(got: Any, expected: Any, what: str, *, hint: str = "", quiet: bool = False) -> None:
    """Check exact equality (for counts, labels and integers)."""
    _flag(quiet=quiet)
    __tracebackhide__ = True
    shown = {"kind": "equal", "expected": _fmt(expected)}
    if isinstance(got, str) and isinstance(expected, str):
        got_cmp, exp_cmp = got.strip().lower(), expected.strip().lower()
    else:
        got_cmp, exp_cmp = got, expected
    if isinstance(expected, bool) != isinstance(got, bool) or got_cmp != exp_cmp:
        _fail(what, shown, got, hint, expected_value=expected)
    _ok(what, quiet, shown, hint)


def one_of(got: Any, allowed: Iterable[Any], what: str, *, hint: str = "") -> None:
    """Check that an answer is one of the allowed labels (a shape check before grading it)."""
    __tracebackhide__ = True
    options = list(allowed)
    shown = {"kind": "one_of", "expected": ", ".join(_fmt(o) for o in options)}
    if got not in options:
        _fail(what, shown, got, hint)
    _visible_event(what, True, shown, hint)


def at_most(count: Any, limit: int, what: str, *, hint: str = "", quiet: bool = False) -> None:
    """Check that a count is at most ``limit``; a failure says the count and the limit."""
    _flag(quiet=quiet)
    __tracebackhide__ = True
    shown = {"kind": "at_most", "expected": _fmt(limit)}
    if isinstance(count, bool) or not isinstance(count, int) or count > limit:
        _fail(what, shown, count, hint, expected_value=limit)
    _ok(what, quiet, shown, hint,
        label=tr("{what}: {count} (at most {limit})", what=text(what), count=count, limit=limit))


def each(function: Callable[..., Any], cases: Iterable[tuple]) -> list[Any]:
    """``function(*case)`` for every case, each on its own: a case that raises gives the text
    ``"raised TypeError: …"`` as its answer (it then fails its own check only), so one input
    the answer does not handle costs that case, not every case of the cell."""
    answers = []
    for case in cases:
        try:
            answers.append(function(*case))
        except Exception as exc:  # noqa: BLE001 — the learner's code; its failure is the answer
            answers.append(f"raised {type(exc).__name__}: {str(exc)[:200]}")
    return answers


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
        _replay.in_expect = True
        try:
            wanted = _records.to_plain(list(expect()) if kind == "one_of" else expect())
        finally:
            _replay.in_expect = False
        if "error" in record or not _records.compare(kind, record["value"], wanted, rtol, atol):
            shown = {"kind": kind, "rtol": rtol,
                     "expected": (", ".join(_fmt(w) for w in wanted) if kind == "one_of" else _fmt(wanted))}
            _fail(what, shown, got, record.get("error") or hint, visible=False,
                  expected_value=None if kind == "one_of" else wanted)
        if _records.recording():  # the reference run: the solution agreed with expect()
            record["expected"] = wanted
            _records.emit(record)


hidden = _Hidden()


REPLAY_PROMPT = "\x00trainperf-replay "  # an input() prompt the grading client answers (see _Replay)


class _Replay:
    """Results of the trusted cells' calls to an exercise's helpers, from the reference run.

    Under ``trainperf grade`` the learner's kernel has no body for the helpers an exercise asks
    for (:mod:`trainperf.grading.stubs`). The chapter's own cells still call some of them on
    fixed inputs (a visible check's expected value, a teaching cell's table), so the reference
    run records each such call — outside ``expect=`` and outside another recorded call —
    keyed by its arguments, and the grading client notes which cell made it. In the graded
    kernel a stub asks the client for the result over the kernel's input channel; the table
    never enters the kernel. The client answers only with a result recorded in the cell that is
    running now, and in a hidden test never the graded exercise's own helper once an answer may
    be running (:mod:`trainperf.grading.replay`). Any other call has nothing to replay."""

    MAX_ITEM = 8 * 2**20
    MAX_TOTAL = 64 * 2**20

    def __init__(self) -> None:
        self.depth = 0  # inside a recorded call: its inner calls are not recorded
        self.in_expect = False  # evaluating a hidden check's expected side: never recorded
        self.written = 0

    @staticmethod
    def folder() -> str:
        import os

        return os.environ.get("TRAINPERF_REPLAY", "")

    @staticmethod
    def key(name: str, args: tuple, kwargs: dict, tensor_values: bool = True) -> str | None:
        """The same in every process for the same arguments: tensors by dtype, shape and bytes
        (torch's own pickling is not reproducible), functions by where their code was written
        (a trusted cell's ``lambda`` is the same code in both runs)."""
        import hashlib
        import io
        import pickle
        import sys

        torch = sys.modules.get("torch")

        class Canonical(pickle.Pickler):
            def persistent_id(self, obj: Any) -> Any:
                if torch is not None and not tensor_values and isinstance(
                        obj, torch.nn.Module | torch.optim.Optimizer):
                    # a model or optimizer a closure captured: by its structure
                    shapes = [(k, tuple(v.shape)) for k, v in obj.state_dict().items()
                              if isinstance(v, torch.Tensor)] if isinstance(obj, torch.nn.Module) else []
                    return ("structure", type(obj).__qualname__, repr(obj)[:2000], tuple(shapes))
                if torch is not None and isinstance(obj, torch.Tensor):
                    t = obj.detach().cpu().contiguous()
                    data = (t.reshape(-1).view(torch.uint8).numpy().tobytes()
                            if t.numel() and tensor_values else b"")
                    return ("tensor", str(t.dtype), tuple(t.shape), data)
                if isinstance(obj, types.FunctionType):
                    # by its code and what it captured, tensors by dtype and shape only: a
                    # trusted cell's closure over a freshly initialised model or a random batch
                    # is the same call in both runs, and a closure with other shapes is not
                    cells = []
                    for cell in obj.__closure__ or ():
                        try:
                            cells.append(cell.cell_contents)
                        except ValueError:  # an empty cell
                            cells.append(None)
                    return ("function", obj.__qualname__, repr(fingerprint(obj.__code__)),
                            _Replay.key("closure", tuple(cells), {}, tensor_values=False))
                if isinstance(obj, types.MethodType | types.BuiltinFunctionType):
                    return ("method", getattr(obj, "__qualname__", ""),
                            _Replay.key("self", (getattr(obj, "__self__", None),), {})
                            if isinstance(obj, types.MethodType) else "")
                return None

        buffer = io.BytesIO()
        pickler = Canonical(buffer, protocol=4)
        pickler.fast = True  # no memo: equal values give equal bytes, shared or not
        try:
            pickler.dump((name, args, sorted(kwargs.items())))  # by name: a stub's locals() order differs
        except Exception:  # noqa: BLE001 — an argument that does not pickle has no key
            return None
        return hashlib.sha256(buffer.getvalue()).hexdigest()

    def store(self, name: str, args: tuple, kwargs: dict, result: Any) -> None:
        """Reference run: append ``(name, key, pickled result)`` to the calls file."""
        import os
        import pickle

        key = self.key(name, args, kwargs)
        try:
            blob = pickle.dumps(result, protocol=4)
        except Exception:  # noqa: BLE001
            return
        if key is None or len(blob) > self.MAX_ITEM or self.written + len(blob) > self.MAX_TOTAL:
            return
        with open(os.path.join(self.folder(), "calls.pkl"), "ab") as fh:
            pickle.dump((name, key, blob), fh, protocol=4)
        self.written += len(blob)

    def lookup(self, name: str, args: tuple, kwargs: dict) -> tuple[bool, Any]:
        """Graded run: ask the grading client for a recorded result (``(found, result)``)."""
        import base64
        import json
        import os
        import pickle

        if not os.environ.get("TRAINPERF_REPLAY_CLIENT"):
            return False, None
        key = self.key(name, args, kwargs)
        if key is None:
            return False, None
        try:
            from IPython import get_ipython

            kernel = get_ipython().kernel
            answer = kernel.raw_input(REPLAY_PROMPT + json.dumps({"name": name, "key": key}))
        except Exception:  # noqa: BLE001 — no client that answers (stdin off, not a kernel)
            return False, None
        if not answer:
            return False, None
        return True, pickle.loads(base64.b64decode(answer))  # from the trusted client only


_replay = _Replay()


def recorded_for_grading(qualified_name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """The reference run's wrapper of an exercise's helper: records what trusted cells get."""
    import functools
    import os

    if not os.environ.get("TRAINPERF_REPLAY_WRITE"):
        return function

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if _replay.depth or _replay.in_expect:
            return function(*args, **kwargs)
        _replay.depth += 1
        try:
            result = function(*args, **kwargs)
        finally:
            _replay.depth -= 1
        values = _parameter_values(function, args, kwargs)
        if values is not None:  # by parameter, as the graded kernel's stub looks it up
            _replay.store(qualified_name, (), values, result)
        return result

    return wrapper


def _parameter_values(function: Callable[..., Any], args: tuple, kwargs: dict) -> dict | None:
    """``{parameter: value}`` of a call, defaults filled in: the same for ``f(x, 2)`` and
    ``f(x, n=2)``, and equal to the stub's ``locals()`` (see :mod:`trainperf.grading.stubs`)."""
    import inspect

    try:
        bound = inspect.signature(function).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return None
    bound.apply_defaults()
    return dict(bound.arguments)


def removed_for_grading(qualified_name: str, exercise: int, args: tuple = (),
                        kwargs: dict | None = None) -> Any:
    """What a helper does in the graded kernel when an exercise asks the learner to write it.

    ``trainperf grade`` runs a submission against a copy of the helpers in which that function
    has no body (:mod:`trainperf.grading.stubs`). A call the chapter's own cells made in the
    reference run, with the same arguments, gets the reference's result; any other call is
    reported to the instructor and fails."""
    __tracebackhide__ = True
    found, result = _replay.lookup(qualified_name, args, kwargs or {})
    if found:
        return result
    if _records.recording():
        _records.emit({"event": "blocked-call", "helper": qualified_name})
    raise RuntimeError(tr("{name} is exercise {exercise}: write it yourself.",
                          name=qualified_name, exercise=exercise))


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

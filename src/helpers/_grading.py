"""Grading machinery that runs in the learner's kernel, beside :mod:`helpers.checks`.

Nothing here is for the learner to call; :mod:`helpers.checks` re-exports the public names
(``checks.blocked`` in hidden tests, ``checks.fingerprint``, ``checks.removed_for_grading``,
``checks.recorded_for_grading``), so notebooks and the grader keep using those.

- :func:`blocked` switches a helper off for the duration of a hidden check: it swaps the code
  object of the helper and of every live copy of it (:func:`_copies_of`, found by where it was
  compiled or by :func:`fingerprint`, which the grader's copy detector
  (``trainperf.grading.copies``) uses too).
- Replay of trusted helper calls under ``trainperf grade``: the reference run's helpers are
  wrapped by :func:`recorded_for_grading` (``trainperf.grading.stubs.recording_module``) and
  record each trusted call (:class:`_Replay`); in a graded run the exercise's helpers are stubs
  that call :func:`removed_for_grading`, which asks the grading client for a recorded result
  over the kernel's input channel (:mod:`helpers._wire`, :mod:`trainperf.grading.replay`).

Imports only the standard library and the kernel side's light modules (:mod:`helpers._records`,
:mod:`helpers._wire`, :mod:`helpers.i18n`), never :mod:`helpers.checks`.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable, Iterator
from typing import Any

from . import _records, _wire
from .i18n import tr


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
    LOCK_WAIT_S = 120.0  # another thread's request: the client answers it within the cell

    def __init__(self) -> None:
        import threading

        self.depth = 0  # inside a recorded call: its inner calls are not recorded
        self.in_expect = False  # evaluating a hidden check's expected side: never recorded
        self.written = 0
        self.lock = threading.Lock()  # one request on the input channel at a time

    @staticmethod
    def folder() -> str:
        import os

        return os.environ.get(_wire.REPLAY_FOLDER_ENV, "")

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
                if (
                    torch is not None
                    and not tensor_values
                    and isinstance(obj, torch.nn.Module | torch.optim.Optimizer)
                ):
                    # a model or optimizer a closure captured: by its structure
                    shapes = (
                        [
                            (k, tuple(v.shape))
                            for k, v in obj.state_dict().items()
                            if isinstance(v, torch.Tensor)
                        ]
                        if isinstance(obj, torch.nn.Module)
                        else []
                    )
                    return ("structure", type(obj).__qualname__, repr(obj)[:2000], tuple(shapes))
                if torch is not None and isinstance(obj, torch.Tensor):
                    t = obj.detach().cpu().contiguous()
                    data = (
                        t.reshape(-1).view(torch.uint8).numpy().tobytes()
                        if t.numel() and tensor_values
                        else b""
                    )
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
                    return (
                        "function",
                        obj.__qualname__,
                        repr(fingerprint(obj.__code__)),
                        _Replay.key("closure", tuple(cells), {}, tensor_values=False),
                    )
                if isinstance(obj, types.MethodType | types.BuiltinFunctionType):
                    return (
                        "method",
                        getattr(obj, "__qualname__", ""),
                        _Replay.key("self", (getattr(obj, "__self__", None),), {})
                        if isinstance(obj, types.MethodType)
                        else "",
                    )
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
        """Graded run: ask the grading client for a recorded result (``(found, result)``).

        Each request carries a fresh id and only a reply that echoes it is taken
        (:mod:`helpers._wire`); requests are made one at a time, so threads that look up at
        once each get their own reply."""
        import base64
        import os
        import pickle

        if not os.environ.get(_wire.REPLAY_CLIENT_ENV):
            return False, None
        key = self.key(name, args, kwargs)
        if key is None:
            return False, None
        request_id = _wire.new_id()
        if not self.lock.acquire(timeout=self.LOCK_WAIT_S):
            return False, None
        try:
            from IPython import get_ipython

            kernel = get_ipython().kernel
            answer = kernel.raw_input(_wire.request(request_id, name, key))
        except Exception:  # noqa: BLE001 — no client that answers (stdin off, not a kernel)
            return False, None
        finally:
            self.lock.release()
        payload = _wire.parse_reply(request_id, answer)
        if payload is None:
            return False, None
        return True, pickle.loads(base64.b64decode(payload))  # from the trusted client only


_replay = _Replay()


@contextlib.contextmanager
def evaluating_expected() -> Iterator[None]:
    """Around a hidden check's ``expect=`` side (reference run, stock nbgrader): the helper calls
    it makes are never recorded for replay."""
    _replay.in_expect = True
    try:
        yield
    finally:
        _replay.in_expect = False


def recorded_for_grading(qualified_name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """The reference run's wrapper of an exercise's helper: records what trusted cells get."""
    import functools
    import os

    if not os.environ.get(_wire.REPLAY_WRITE_ENV):
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


def removed_for_grading(
    qualified_name: str, exercise: int, args: tuple = (), kwargs: dict | None = None
) -> Any:
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
    raise RuntimeError(
        tr("{name} is exercise {exercise}: write it yourself.", name=qualified_name, exercise=exercise)
    )


def _blocked_function(qualified_name: str) -> types.FunctionType:
    """A stand-in whose code replaces the helper's. It runs with the helper module's globals,
    so it names nothing global but the builtin ``__import__``."""
    namespace: dict[str, Any] = {}
    message = tr(
        "This exercise asks you to compute it yourself; calling {name} is switched off while it is graded.",
        name=qualified_name,
    )
    exec(
        f"def blocked(*args, **kwargs):\n"
        f"    records = __import__('helpers._records', fromlist=['emit'])\n"
        f"    if records.recording():\n"
        f"        records.emit({{'event': 'blocked-call', 'helper': {qualified_name!r}}})\n"
        f"    raise RuntimeError({message!r})",
        namespace,
    )
    return namespace["blocked"]


_SKIP_OPS = {"CACHE", "NOP", "RESUME", "PRECALL", "EXTENDED_ARG", "COPY_FREE_VARS", "MAKE_CELL"}


def fingerprint(code: types.CodeType) -> tuple:
    """What a function's code computes, without where it was compiled (file, line, names of
    its locals, whether its module imported ``math`` in the same file): a copy made by
    ``exec(inspect.getsource(f))``, by re-executing the module under another file name or by
    renaming its variables has the same fingerprint. Instructions are compared by name and
    by their global / attribute / constant argument; jump offsets and local names are not."""
    import dis

    ops: list[Any] = []
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

    by_place = {
        (f.__code__.co_filename, f.__code__.co_firstlineno, f.__code__.co_name): i
        for i, f in enumerate(targets)
    }
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

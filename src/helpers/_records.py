"""Hidden-check records: plain data out of a kernel, and the one comparison that judges them.

A hidden check turns the learner's answer into *plain data* — exactly ``int``, ``float``,
``str``, ``bool``, ``None`` and lists / dicts of them — and either compares it on the spot
(stock nbgrader, a learner's own kernel) or, under ``trainperf grade``, emits it as a record
for the grading process to compare with what the reference solution produced. The same
:func:`compare` is used in all three places, so the verdict cannot depend on where it ran.

This module imports nothing heavy (the standard library and :mod:`helpers._wire`): the
grading process uses it too.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

# The record's MIME type (the grader's notebook client takes these out of a cell's outputs) and
# the variable the grader sets in the kernel's environment: the wire contract, in helpers._wire.
from ._validate import unknown
from ._wire import RECORD_ENV as RECORD_ENV
from ._wire import RECORD_MIME as RECORD_MIME

KINDS = ("close", "equal", "one_of")
MAX_ELEMENTS = 10_000  # a tensor or array with more elements is not a sensible answer
MAX_RECORD_BYTES = 64 * 1024  # one record, serialised
MAX_DEPTH = 8


class NotPlain(TypeError):
    """The answer cannot be turned into plain data (a lying object, a model, a huge tensor)."""


def _number_like(value: Any) -> Any:
    """numpy / torch scalars (numpy strings too) and small arrays by value; None when
    ``value`` is neither.

    Only the libraries' own types count, never a subclass: a subclass's ``tolist`` or
    ``item`` is the learner's code, and it would run here, after the graded region ended."""
    kind = type(value)
    module = kind.__module__.split(".")[0]
    if module == "numpy":
        import numpy as np

        if kind is np.ndarray:
            if value.size > MAX_ELEMENTS:
                raise NotPlain(f"an array of {value.size:,} elements is too large to grade")
            if value.dtype.kind not in "biufU":
                raise NotPlain(f"an array of dtype {value.dtype} is not numbers or strings")
            return value.tolist()
        if kind in _numpy_scalars(np):
            return value.item()
        if kind is np.str_:  # numpy's own string type (not a subclass): its text
            return str.__str__(value)
    if module == "torch":
        import torch

        if kind is torch.Tensor:
            if value.numel() > MAX_ELEMENTS:
                raise NotPlain(f"a tensor of {value.numel():,} elements is too large to grade")
            with torch._C.DisableTorchFunction():  # a torch function mode is the learner's code too
                return value.detach().cpu().tolist()
    return None


def _numpy_scalars(np: Any) -> set[type]:
    return {t for t in np.sctypeDict.values() if issubclass(t, np.number | np.bool_)}


def to_plain(value: Any, _depth: int = 0) -> Any:
    """``value`` as plain data, or :class:`NotPlain` saying why it cannot be.

    Types are checked exactly (``type(v) is float``), so a subclass that lies in ``__eq__``
    or ``__float__`` is refused rather than trusted. Tuples become lists; dict keys become
    strings (``{0: x}`` -> ``{"0": x}``), the same on every side of a comparison.
    """
    if _depth > MAX_DEPTH:
        raise NotPlain("the answer is nested too deeply")
    kind = type(value)
    if kind is int and value.bit_length() > 1024:  # beyond any float: no sensible answer is this big
        raise NotPlain(f"an integer of {value.bit_length():,} bits is too large to grade")
    if value is None or kind in (bool, int, str):
        return value
    if kind is float:
        return value
    if kind in (list, tuple):
        if len(value) > MAX_ELEMENTS:
            raise NotPlain(f"a sequence of {len(value):,} items is too large to grade")
        return [to_plain(v, _depth + 1) for v in value]
    if kind is dict:
        if len(value) > MAX_ELEMENTS:
            raise NotPlain(f"a dict of {len(value):,} items is too large to grade")
        out: dict[str, Any] = {}
        for key, item in value.items():
            if type(key) not in (str, int, bool, float) and key is not None:
                raise NotPlain(f"a dict key of type {type(key).__name__} cannot be graded")
            name = key if type(key) is str else json.dumps(key)
            if name in out:
                raise NotPlain(f"the dict keys {key!r} and {name!r} collide")
            out[name] = to_plain(item, _depth + 1)
        return out
    converted = _number_like(value)
    if converted is not None:
        return to_plain(converted, _depth + 1)
    raise NotPlain(f"a {kind.__name__} is not a number, string, bool, None, list or dict")


def _is_number(value: Any) -> bool:
    return type(value) in (int, float)


def _close(got: Any, expected: Any, rtol: float, atol: float) -> bool:
    if _is_number(expected):
        if not _is_number(got) or (isinstance(got, float) and math.isnan(got)):
            return False
        return math.isclose(got, expected, rel_tol=rtol, abs_tol=atol)
    if isinstance(expected, list):
        return (
            isinstance(got, list)
            and len(got) == len(expected)
            and all(_close(g, e, rtol, atol) for g, e in zip(got, expected, strict=True))
        )
    if isinstance(expected, dict):
        return (
            isinstance(got, dict)
            and set(got) == set(expected)
            and all(_close(got[k], expected[k], rtol, atol) for k in expected)
        )
    return _equal(got, expected)


def _equal(got: Any, expected: Any) -> bool:
    if isinstance(expected, bool) or isinstance(got, bool):
        return type(got) is type(expected) and got == expected
    if isinstance(expected, str):
        return isinstance(got, str) and got.strip().lower() == expected.strip().lower()
    if _is_number(expected):
        return _is_number(got) and got == expected
    if isinstance(expected, list):
        return (
            isinstance(got, list)
            and len(got) == len(expected)
            and all(_equal(g, e) for g, e in zip(got, expected, strict=True))
        )
    if isinstance(expected, dict):
        return (
            isinstance(got, dict)
            and set(got) == set(expected)
            and all(_equal(got[k], expected[k]) for k in expected)
        )
    return got is None and expected is None


def compare(kind: str, got: Any, expected: Any, rtol: float = 1e-6, atol: float = 0.0) -> bool:
    """Whether plain ``got`` passes a check of ``kind`` against plain ``expected``.

    ``close``: numbers (and lists / dicts of numbers, same shape) within ``rtol`` or
    ``atol``; ``equal``: exact, strings compared trimmed and case-blind, a bool never equals
    a number; ``one_of``: ``expected`` is the list of accepted answers, each compared as
    ``equal``.
    """
    if kind == "close":
        return _close(got, expected, rtol, atol)
    if kind == "equal":
        return _equal(got, expected)
    if kind == "one_of":
        return isinstance(expected, list) and any(_equal(got, e) for e in expected)
    raise unknown("check kind", kind, KINDS)


def recording() -> bool:
    """True in a kernel the grader started: hidden checks emit records instead of comparing."""
    return os.environ.get(RECORD_ENV) == "1"


def emit(record: dict[str, Any]) -> None:
    """Send one record out of this kernel as display data the grader's client collects."""
    text = json.dumps(record, allow_nan=True)
    if len(text) > MAX_RECORD_BYTES:
        text = json.dumps(
            {k: record[k] for k in ("what", "kind") if k in record}
            | {"error": f"the answer is {len(text):,} bytes as data; the limit is {MAX_RECORD_BYTES:,}"}
        )
    try:
        from IPython.display import display

        # sent as JSON *text*: Jupyter's message packer turns a non-finite float into "inf" or
        # null depending on the code path, which would make ``math.inf`` equal a string or None
        display({RECORD_MIME: text}, raw=True)
    except ImportError:  # not in a kernel: nobody collects display data, so print it
        print(text)

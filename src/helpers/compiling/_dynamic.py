"""Sequence lengths that change: what ``mark_dynamic``, its bounds and ``maybe_mark_dynamic`` do.

Dynamo specializes every size by default and makes a size symbolic only after it has
changed once ("automatic dynamic"). ``torch._dynamo.mark_dynamic(t, dim)`` makes one
dimension of one tensor symbolic from the first compile on; ``min=`` and ``max=`` bound it, and
the compiled graph's guards then check the bounds. ``mark_dynamic`` is a promise: if the code
specializes the dimension (a Python branch on its exact value, say), dynamo raises
``ConstraintViolationError``. ``torch._dynamo.maybe_mark_dynamic(t, dim)`` is a hint: the
dimension starts symbolic, and specializing it only recompiles. The counts here come from a
counting backend (one entry per graph dynamo hands it) and dynamo's guard failures, as in
:func:`recompiles`. Sources: the PyTorch documentation, *Dynamic Shapes*, and the docstrings of
``mark_dynamic`` and ``maybe_mark_dynamic`` in torch 2.13.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .._validate import flag as _flag
from .._validate import unknown
from ._graphs import _dynamo_defaults, quiet

#: How the sequence dimension is marked before each call.
MARKS = ("none", "mark_dynamic", "maybe_mark_dynamic")


def attention_scores(x: torch.Tensor) -> torch.Tensor:
    """A weightless self-attention over ``x`` of shape (batch, sequence, hidden): the chapter's
    function whose sequence length changes (one graph, no breaks)."""
    scores = torch.softmax(x @ x.transpose(1, 2) / x.shape[-1] ** 0.5, dim=-1)
    return scores @ x


def one_length_shortcut(x: torch.Tensor) -> torch.Tensor:
    """:func:`attention_scores` with a Python shortcut for sequences of exactly 16 tokens: the
    branch reads the length's value, so dynamo specializes the length to 16."""
    if x.shape[1] == 16:
        return x
    return attention_scores(x)


@dataclass(frozen=True)
class LengthEvent:
    """One call: the sequence length, and whether it reused a graph, compiled, or raised."""

    length: int
    outcome: str  # "reused", "compiled" or "error"
    detail: str = ""  # the guard that failed, or the error's first line

    def __str__(self) -> str:
        if self.outcome == "reused":
            return f"length {self.length}: reused a compiled graph"
        if self.outcome == "compiled":
            return f"length {self.length}: COMPILED" + (
                f" (guard failed: {self.detail})" if self.detail else ""
            )
        return f"length {self.length}: ERROR {self.detail}"


@dataclass(frozen=True)
class LengthRun:
    """Calls of one compiled function over a sequence of lengths, marked one way."""

    label: str
    events: list[LengthEvent]

    @property
    def compilations(self) -> int:
        return sum(e.outcome == "compiled" for e in self.events)

    @property
    def errors(self) -> int:
        return sum(e.outcome == "error" for e in self.events)

    def format(self) -> str:
        lines = [f"{self.label}: {self.compilations} compilation(s), {self.errors} error(s)"]
        lines += [f"    {e}" for e in self.events]
        return "\n".join(lines)


def _first_line(exc: BaseException) -> str:
    """The line of dynamo's error that says what went wrong (its first line is often generic)."""
    lines = [line.strip(" -") for line in str(exc).strip().splitlines() if line.strip()]
    pick = next((line for line in lines if "not in range" in line or "specialized" in line), None)
    text = (pick or (lines[0] if lines else "")).split(". If you", 1)[0]  # dynamo's advice follows
    return f"{type(exc).__name__}: {text[:150]}"


def length_recompiles(
    lengths: Sequence[int],
    mark: str = "none",
    *,
    fn: Callable[[torch.Tensor], Any] = attention_scores,
    min: int | None = None,
    max: int | None = None,
    first_only: bool = False,
    batch: int = 2,
    hidden: int = 8,
) -> LengthRun:
    """Call a fresh ``torch.compile(fn)`` on inputs ``(batch, length, hidden)`` for each length
    and record which calls compiled, with dynamo's failed guard, and which raised. ``mark``: how
    dimension 1 (the sequence) of each input is marked first, one of :data:`MARKS`; ``min`` and
    ``max`` are passed to ``mark_dynamic`` (``maybe_mark_dynamic`` takes no bounds in torch
    2.13). ``first_only``: mark only the first input, as code that marks one example batch does;
    later inputs then meet the compiled graph's guards, bounds included. Uses a counting backend
    (no code generated) and resets dynamo before and after."""
    _flag(first_only=first_only)
    if mark not in MARKS:
        raise unknown("mark", mark, MARKS)
    if (min is not None or max is not None) and mark != "mark_dynamic":
        raise ValueError(f"min and max bound mark_dynamic only; got mark={mark!r}: use mark='mark_dynamic'")
    if not lengths or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in lengths):
        raise ValueError(f"lengths must be a non-empty list of whole numbers >= 1, got {lengths!r}")
    code = getattr(fn, "__code__", None)
    # a broken promise is also logged, with a traceback, at ERROR level by torch._guards: the
    # event below says it in one line, so that log is kept off the screen while this runs
    guards_log = logging.getLogger("torch._guards")
    level = guards_log.level
    guards_log.setLevel(logging.CRITICAL)
    try:
        return _run_lengths(fn, code, lengths, mark, min, max, first_only, batch, hidden)
    finally:
        guards_log.setLevel(level)


def _run_lengths(
    fn: Callable[[torch.Tensor], Any],
    code: Any,
    lengths: Sequence[int],
    mark: str,
    min: int | None,
    max: int | None,
    first_only: bool,
    batch: int,
    hidden: int,
) -> LengthRun:
    import torch._dynamo as dynamo
    from torch._dynamo.utils import guard_failures

    graphs: list[int] = []

    def counting_backend(gm: torch.fx.GraphModule, example_inputs: list) -> Callable[..., Any]:
        graphs.append(len(gm.graph.nodes))
        return gm.forward

    events = []
    with quiet(), _dynamo_defaults():
        dynamo.reset()
        compiled = torch.compile(fn, backend=counting_backend)
        for i, length in enumerate(lengths):
            x = torch.randn(batch, length, hidden, generator=torch.Generator().manual_seed(i))
            if mark == "mark_dynamic" and (i == 0 or not first_only):
                bounds = {k: v for k, v in (("min", min), ("max", max)) if v is not None}
                dynamo.mark_dynamic(x, 1, **bounds)
            elif mark == "maybe_mark_dynamic" and (i == 0 or not first_only):
                dynamo.maybe_mark_dynamic(x, 1)
            before, seen = len(graphs), len(guard_failures.get(code, ()))
            try:
                compiled(x)
            except Exception as exc:  # noqa: BLE001 — dynamo's constraint errors are what is shown
                events.append(LengthEvent(length, "error", _first_line(exc)))
                continue
            failed = [str(g) for g in list(guard_failures.get(code, ()))[seen:]]
            detail = failed[0].split("  #")[0].split(": ", 1)[-1] if failed else ""
            events.append(LengthEvent(length, "compiled" if len(graphs) > before else "reused", detail))
        dynamo.reset()
    label = (
        mark
        if mark != "mark_dynamic" or (min is None and max is None)
        else f"mark_dynamic(min={min}, max={max})"
    )
    if first_only and mark != "none":
        label += ", first input only"
    return LengthRun(label, events)

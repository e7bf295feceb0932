"""Graphs, graph breaks and recompilations, seen through TorchDynamo's own tools.

Everything here uses dynamo's cheap paths — ``torch._dynamo.explain`` and a counting
backend that runs the captured graph eagerly — so no C++ or Triton code is generated and a
call costs well under a second on a CPU. Dynamo's guards (what triggers a recompile) are
decided while it traces Python, before any backend runs, so the counts are those of
``torch.compile`` with the default inductor backend too; inductor may add a few guards of
its own in rare cases (e.g. on input alignment), never fewer.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from .._validate import unknown

#: Loggers that print dynamo's and inductor's warnings (graph breaks, recompile limits) to stderr.
_LOGGERS = (
    "torch._dynamo",
    "torch._inductor",
    "torch.fx.experimental.symbolic_shapes",
    "torch._functorch",
    "torch._subclasses",
    "torch._utils_internal",
)

#: The dynamo settings a count depends on, at their torch defaults. Counting under these makes
#: a count independent of settings changed earlier in the same process.
DEFAULT_DYNAMO = {
    "automatic_dynamic_shapes": True,
    "assume_static_by_default": True,
    "capture_scalar_outputs": False,
    "capture_dynamic_output_shape_ops": False,
    "recompile_limit": 8,
}

MODES = ("auto", "static", "dynamic", "mark_dynamic")


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence dynamo's and inductor's log warnings and Python warnings while compiling.

    ``torch.compile`` reports graph breaks and recompile limits as log warnings on stderr.
    In a notebook they are noise next to the report this module prints; in a graded cell,
    stock nbgrader would score the cell 0 for writing to stderr. Errors still show.
    """
    saved = [(logger, logger.level) for logger in map(logging.getLogger, _LOGGERS)]
    for logger, _ in saved:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in saved:
            logger.setLevel(level)


def _dynamo_defaults() -> contextlib.AbstractContextManager:
    import torch._dynamo.config as config

    known: dict[str, Any] = {k: v for k, v in DEFAULT_DYNAMO.items() if hasattr(config, k)}
    return config.patch(**known)


# --------------------------------------------------------------------------- graph breaks


@dataclass(frozen=True)
class BreakReason:
    """One graph break: dynamo's reason (first line) and where in the user's code it happened."""

    reason: str
    filename: str
    line: int | None

    def __str__(self) -> str:
        where = f"{self.filename.rsplit('/', 1)[-1]}:{self.line}" if self.line else self.filename
        return f"{self.reason} (at {where})"


@dataclass(frozen=True)
class GraphReport:
    """What ``torch._dynamo.explain`` saw in one call: graphs, breaks and their reasons."""

    graphs: int
    breaks: int
    ops: int
    reasons: list[BreakReason]

    @property
    def sites(self) -> list[tuple[BreakReason, int]]:
        """The distinct places in the code that break, in order, each with how many times the
        log reported it. A break inside a function the traced code calls is reported once for
        that function's frame and once for each calling frame dynamo was tracing, all at the same
        line: the places are what there is to fix."""
        counts: dict[BreakReason, int] = {}
        for reason in self.reasons:
            counts[reason] = counts.get(reason, 0) + 1
        return list(counts.items())

    def format(self) -> str:
        lines = [
            f"{self.graphs} graph(s), {self.breaks} graph break(s) at {len(self.sites)} place(s) in the "
            f"code, {self.ops} op(s) captured"
        ]
        for i, (reason, times) in enumerate(self.sites, 1):
            again = f" (reported {times} times: a break inside a called function)" if times > 1 else ""
            lines.append(f"  break {i}: {reason}{again}")
        return "\n".join(lines)


class _BreakLog(logging.Handler):
    """Collects dynamo's graph-break log (``TORCH_LOGS="graph_breaks"``): one record per break."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.endswith("__graph_breaks"):
            self.records.append(record)


class _DropBreaks(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.name.endswith("__graph_breaks")


def _break_reason(record: logging.LogRecord) -> BreakReason:
    """From one record: ``Graph break in user code at FILE:LINE``, then ``Graph Break Reason:``
    with dynamo's short name of the cause, on that line or (after a generic "Encountered graph
    break when attempting to trace ...") on the next non-empty one."""
    lines = [line.strip() for line in record.getMessage().splitlines()]
    where = lines[0].rsplit(" at ", 1)[-1] if lines and " at " in lines[0] else "?"
    filename, _, line = where.rpartition(":")
    short = "unknown"
    for i, text in enumerate(lines):
        if text.startswith("Graph Break Reason:"):
            short = text.removeprefix("Graph Break Reason:").strip()
            if short.startswith("Encountered graph break"):
                short = next((x for x in lines[i + 1 :] if x), short)
            break
    return BreakReason(short, filename or where, int(line) if line.isdigit() else None)


@contextlib.contextmanager
def _graph_break_log() -> Iterator[_BreakLog]:
    """Turn dynamo's graph-break log on for a block, collect it, and keep it off the screen."""
    log, drop = _BreakLog(), _DropBreaks()
    torch._logging.set_logs(graph_breaks=True)  # (re)installs torch's own handlers: filter after
    filtered = [h for name in ("torch", "torch._dynamo") for h in logging.getLogger(name).handlers]
    for handler in filtered:
        handler.addFilter(drop)
    logging.getLogger("torch._dynamo").addHandler(log)
    try:
        yield log
    finally:
        logging.getLogger("torch._dynamo").removeHandler(log)
        for handler in filtered:
            handler.removeFilter(drop)
        torch._logging.set_logs()


def graph_breaks(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> GraphReport:
    """Run ``fn(*args, **kwargs)`` under ``torch._dynamo.explain`` and say how it was captured.

    The graph count is ``explain``'s. The breaks are counted as dynamo reports them, in its
    graph-break log (``TORCH_LOGS="graph_breaks"``), one per break: a break before any tensor
    op has no graph before it, and two prints in a row are two breaks, so breaks are not
    simply graphs − 1 (``explain``'s own break count is). A function dynamo captures whole
    gives 1 graph and 0 breaks. Runs with dynamo's default settings whatever was changed
    before, and silenced (see :func:`quiet`). Note: ``explain`` resets dynamo, so functions
    compiled earlier in the process compile again on their next call.
    """
    if not callable(fn):
        raise TypeError(f"graph_breaks needs a function or module, got {type(fn).__name__}")
    import torch._dynamo as dynamo

    with _graph_break_log() as log, quiet(), _dynamo_defaults():  # quiet after set_logs
        result = dynamo.explain(fn)(*args, **kwargs)
    reasons = [_break_reason(record) for record in log.records]
    return GraphReport(result.graph_count, len(reasons), result.op_count, reasons)


def noisy_step(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The chapter's example with three graph breaks: a print, a ``.item()`` and a branch on a
    tensor's value. Returns ``tanh(y / max|y|)`` with ``y = x @ w``, doubled when ``y`` sums
    to more than zero."""
    y = x @ w
    print("noisy_step: logging the batch")  # break 1: print is Python I/O
    scale = y.abs().max().item()  # break 2: a tensor value read into Python
    if y.sum() > 0:  # break 3: which branch runs depends on the data
        y = y * 2
    return torch.tanh(y / scale)


# --------------------------------------------------------------------------- recompilations


@dataclass(frozen=True)
class CompileEvent:
    """One call of a compiled function: the input shapes, whether it compiled, and why."""

    shapes: tuple[tuple[int, ...], ...]
    compiled: bool
    reasons: list[str] = field(default_factory=list)  # dynamo's guard failures, newest first

    def __str__(self) -> str:
        shapes = ", ".join("×".join(map(str, s)) for s in self.shapes)
        if not self.compiled:
            return f"({shapes}): reused a compiled graph"
        if not self.reasons:
            return f"({shapes}): COMPILED (first call)"
        reason = self.reasons[0].split("  #")[0]  # dynamo appends the user line and advice after "  #"
        if "0/1 specialization" in self.reasons[0]:
            reason += " [sizes 0 and 1 are always specialized]"
        return f"({shapes}): COMPILED — guard failed: {reason}"


def _code_of(fn: Callable[..., Any]) -> Any:
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    return getattr(target, "__code__", None)


def recompiles(
    fn: Callable[..., Any], calls: Sequence[Sequence[torch.Tensor]], mode: str = "auto"
) -> list[CompileEvent]:
    """Call a fresh ``torch.compile(fn)`` on each input tuple of ``calls``; say which calls compiled.

    ``mode``: ``"auto"`` (torch.compile's default: the first shape is compiled static, a
    second shape marks the changed sizes dynamic), ``"static"`` (``dynamic=False``: one graph
    per shape), ``"dynamic"`` (``dynamic=True``) or ``"mark_dynamic"``
    (``torch._dynamo.mark_dynamic`` on dimension 0 of every tensor input). The reasons are
    dynamo's guard failures (``torch._dynamo.utils.guard_failures``, an internal record),
    newest compiled graph first. Uses the counting "eager" backend (no code generation) and
    starts from ``torch._dynamo.reset()``, so earlier compilations do not count — and
    functions compiled earlier compile again on their next call.
    """
    if mode not in MODES:
        raise unknown("mode", mode, MODES)
    if not calls:
        raise ValueError("give at least one input tuple to call the function with")
    import torch._dynamo as dynamo
    from torch._dynamo.utils import guard_failures

    compiled_graphs: list[int] = []

    def counting_backend(gm: torch.fx.GraphModule, example_inputs: list) -> Callable[..., Any]:
        compiled_graphs.append(len(gm.graph.nodes))
        return gm.forward

    events = []
    with quiet(), _dynamo_defaults():
        dynamo.reset()
        dynamic = {"auto": None, "static": False, "dynamic": True, "mark_dynamic": None}[mode]
        compiled = torch.compile(fn, backend=counting_backend, dynamic=dynamic)
        code = _code_of(fn)
        for inputs in calls:
            inputs = tuple(inputs)
            if mode == "mark_dynamic":
                for t in inputs:
                    if isinstance(t, torch.Tensor) and t.dim() > 0:
                        dynamo.mark_dynamic(t, 0)
            before, seen = len(compiled_graphs), len(guard_failures.get(code, ()))
            compiled(*inputs)
            new_reasons = list(guard_failures.get(code, ()))[seen:]
            events.append(
                CompileEvent(
                    tuple(tuple(t.shape) for t in inputs if isinstance(t, torch.Tensor)),
                    len(compiled_graphs) > before,
                    new_reasons,
                )
            )
        dynamo.reset()
    return events


def shape_probe(x: torch.Tensor) -> torch.Tensor:
    """The small function whose recompilations the chapter counts (one graph, no breaks)."""
    return torch.nn.functional.gelu(x * 2 + 1).sum(-1)


def count_compiles(sizes: Sequence[int], mode: str = "auto", width: int = 4) -> int:
    """How many times ``torch.compile`` compiles :func:`shape_probe` when it is called on
    inputs of shape ``(size, width)`` for each size in turn, under ``mode`` (see
    :func:`recompiles`). Measured, with dynamo's default settings, not predicted."""
    if not sizes or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in sizes):
        raise ValueError(f"sizes must be a non-empty list of integers >= 0, got {sizes!r}")
    calls = [(torch.zeros(s, width),) for s in sizes]
    return sum(event.compiled for event in recompiles(shape_probe, calls, mode))

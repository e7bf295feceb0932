"""Recording what a function does with ``torch.profiler``: a chrome trace of it, its top
operators, or the trace of the annotated training loop under a profiler schedule.

The recorders hide the profiler's native ``USDT ... profiler_start`` notices
(:mod:`helpers._quiet`), so notebook cells that profile write nothing to stderr.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerAction

from .._quiet import profiler_notices_hidden
from ._loop import annotated_training_loop


def record_cpu_trace(fn: Callable[[], Any], path: str | Path | None = None) -> Path:
    """Run ``fn()`` under ``torch.profiler`` (CPU activity) and write its chrome trace; returns the path."""
    from torch.profiler import ProfilerActivity, profile

    target = Path(path) if path else Path(tempfile.mkdtemp(prefix="trainperf-nvtx-")) / "trace.json"
    with profiler_notices_hidden():
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            fn()
        prof.export_chrome_trace(str(target))
    return target


def top_operators(fn: Callable[[], Any], row_limit: int = 8, sort_by: str = "self_cpu_time_total") -> str:
    """Run ``fn()`` under ``torch.profiler`` (CPU activity, plus CUDA on a GPU) and return
    ``prof.key_averages().table(...)``: the operators that took the most time, with their call
    counts. ``self`` time leaves out the operators an operator called."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profiler_notices_hidden():
        with profile(activities=activities) as prof:
            fn()
    return prof.key_averages().table(sort_by=sort_by, row_limit=row_limit)


def record_training_trace(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
    n_steps: int,
    schedule: Callable[[int], ProfilerAction] | None = None,
    path: str | Path | None = None,
) -> Path:
    """Profile :func:`annotated_training_loop` (CPU activity, ``prof.step()`` after each step)
    with an optional ``torch.profiler.schedule``; returns the chrome trace written."""
    from torch.profiler import ProfilerActivity, profile

    target = Path(path) if path else Path(tempfile.mkdtemp(prefix="trainperf-nvtx-")) / "trace.json"
    written: list[Path] = []

    def save(prof: Any) -> None:  # called when the schedule's active window ends
        prof.export_chrome_trace(str(target))
        written.append(target)

    with profiler_notices_hidden():
        with profile(
            activities=[ProfilerActivity.CPU], schedule=schedule, on_trace_ready=save if schedule else None
        ) as prof:
            annotated_training_loop(model, optimizer, batches, n_steps, on_step_end=lambda _: prof.step())
        if schedule is None:
            save(prof)
    if not written:
        raise RuntimeError(f"The schedule recorded nothing in {n_steps} steps; run more steps.")
    return target

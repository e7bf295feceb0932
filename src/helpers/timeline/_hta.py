"""HTA 0.5.0's GPU metrics (temporal breakdown, comm/comp overlap), many ranks, one class of intervals."""

from __future__ import annotations

import math
import os
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import overload

import numpy as np

from .._validate import unknown
from ._intervals import (
    cut,
    intersect_arrays,
    union_arrays,
)
from ._load import load_trace
from ._ranks import RankReport, RankRow, rank_report, run_per_file
from ._steps import _classes, step_breakdown
from ._trace import (
    COMM_KERNEL_RE,
    NOT_COMPUTE_RE,
    Trace,
)
from ._trace_read import rank_from_name, read_trace, trace_files

# --------------------------------------------------------------------------- HTA definitions


@dataclass(frozen=True)
class TemporalBreakdown:
    """HTA's temporal breakdown: shares of "kernel time" (first device event start to last end)."""

    basis: str  # "gpu kernels" (HTA's definition) or "cpu threads" (the CPU analogue)
    kernel_time_us: float
    idle_us: float
    compute_us: float
    non_compute_us: float
    rank: int | None = None

    def _pct(self, us: float) -> float:
        return round(100 * us / self.kernel_time_us, 2)

    @property
    def idle_pct(self) -> float:
        return self._pct(self.idle_us)

    @property
    def compute_pct(self) -> float:
        return self._pct(self.compute_us)

    @property
    def non_compute_pct(self) -> float:
        return self._pct(self.non_compute_us)

    def __str__(self) -> str:
        return (
            f"rank {self.rank} ({self.basis}): kernel time {self.kernel_time_us:,.0f} µs | idle "
            f"{self.idle_pct:.2f}% | compute {self.compute_pct:.2f}% | non-compute "
            f"{self.non_compute_pct:.2f}%"
        )


_PROFILER_STEP_RE = re.compile("ProfilerStep")


def _hta_device_intervals(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(starts, ends, is compute, is comm) of the device events, with HTA's rounding and
    steady-state filter, vectorised over the trace's columns."""
    c = trace.columns
    steps = trace.step_index()
    steps = steps[c.name_mask(_PROFILER_STEP_RE)[steps]]
    keep = c.on_gpu
    if len(steps) >= 2:  # drop the last step: keep kernels launched before it starts
        last = math.ceil(c.ts[steps].max())
        # ceil(ts) < last  <=>  ts <= last - 1, for an integer `last`
        launched = np.zeros(len(c.corrs), bool)
        launched[c.corr[~c.on_gpu & (c.corr >= 0) & (c.ts <= last - 1)]] = True
        keep = keep & (c.corr >= 0)
        keep[keep] = launched[c.corr[keep]]
    ts = c.ts[keep]
    start = np.ceil(ts)  # HTA rounds a start up and an end down to whole microseconds
    end = np.maximum(start, np.floor(ts + c.dur[keep]))
    comm = c.name_mask(COMM_KERNEL_RE)[keep]
    return start, end, ~comm & ~c.name_mask(NOT_COMPUTE_RE)[keep], comm


def _cpu_device_intervals(trace: Trace) -> tuple[list, list, list]:
    """The CPU analogue: the training thread's operators and the collectives, within the steps."""
    _, iv = _classes(trace)
    steps = trace.steps()
    if steps:
        start, end = min(s.ts for s in steps), max(s.end for s in steps)
        iv = {k: cut(v, start, end) for k, v in iv.items()}
    return iv["compute"] + iv["comm"], iv["compute"], iv["comm"]


def _length(union: tuple[np.ndarray, np.ndarray]) -> float:
    # summed in Python, in order, as union_length does: the same float to the last bit
    return sum((union[1] - union[0]).tolist())


def _device_intervals(trace: Trace) -> tuple[str, float, tuple, tuple, tuple]:
    """(basis, kernel time, union of all device work, of compute, of communication)."""
    if "device" not in trace.cache:
        if trace.is_gpu:
            start, end, compute, comm = _hta_device_intervals(trace)
            basis = "gpu kernels"
        else:
            every, *parts = (np.array(iv, dtype=float).reshape(-1, 2) for iv in _cpu_device_intervals(trace))
            if not len(every):
                raise ValueError(
                    f"{Path(trace.path).name} has neither GPU kernels nor CPU operators: "
                    "record it with torch.profiler (activities CPU and, on a GPU, CUDA)"
                )
            start, end = every[:, 0], every[:, 1]
            compute = np.arange(len(every)) < len(parts[0])  # every = compute + comm
            comm, basis = ~compute, "cpu threads"
        span = float(end.max() - start.min()) if len(start) else None
        trace.cache["device"] = (
            basis,
            span,
            union_arrays(start, end),
            union_arrays(start[compute], end[compute]),
            union_arrays(start[comm], end[comm]),
        )
    return trace.cache["device"]


@overload
def temporal_breakdown(trace: Trace, jobs: int | None = None) -> TemporalBreakdown: ...
@overload
def temporal_breakdown(trace: Sequence[Trace], jobs: int | None = None) -> list[TemporalBreakdown]: ...
@overload
def temporal_breakdown(
    trace: str | Path, jobs: int | None = None
) -> TemporalBreakdown | list[TemporalBreakdown] | RankReport: ...
def temporal_breakdown(
    trace: Trace | Sequence[Trace] | str | Path, jobs: int | None = None
) -> TemporalBreakdown | list[TemporalBreakdown] | RankReport:
    """Idle / compute / non-compute time as HTA defines it.

    kernel time = last device event end − first start; idle = kernel time − |union of device
    events|; compute = |union of computation kernels|; non-compute = the rest. On a CPU-only
    trace (where HTA itself fails) the same rules run over the training thread's operators and
    the collectives (``basis = "cpu threads"``). A file path is loaded first; a folder of
    rank files gives :func:`analyse_ranks`'s report (``jobs`` processes).
    """
    if isinstance(trace, (str, Path)):
        return analyse_ranks(trace, jobs) if Path(trace).is_dir() else temporal_breakdown(load_trace(trace))
    if not isinstance(trace, Trace):
        return [temporal_breakdown(t) for t in trace]
    basis, span, every, compute, _ = _device_intervals(trace)
    if span is None:
        raise ValueError(
            f"{Path(trace.path).name}: no device events left after HTA's steady-state "
            "filter (is the last ProfilerStep the only one with kernels?)"
        )
    busy, comp = _length(every), _length(compute)
    if basis == "gpu kernels":  # whole microseconds, as HTA
        span, busy, comp = int(span), int(busy), int(comp)
    idle = span - busy
    return TemporalBreakdown(basis, span, idle, comp, span - comp - idle, trace.rank)


@overload
def comm_comp_overlap(trace: Trace, jobs: int | None = None) -> float: ...
@overload
def comm_comp_overlap(
    trace: Sequence[Trace] | str | Path, jobs: int | None = None
) -> float | dict[int | None, float | None]: ...
def comm_comp_overlap(
    trace: Trace | Sequence[Trace] | str | Path, jobs: int | None = None
) -> float | dict[int | None, float | None]:
    """HTA's communication/computation overlap, in percent (2 decimals): the time when
    communication and computation run together ÷ the communication time. A folder of rank
    files gives ``{rank: overlap}`` (None for a rank without communication)."""
    if isinstance(trace, (str, Path)):
        if Path(trace).is_dir():
            return {row.rank: row.overlap_pct for row in analyse_ranks(trace, jobs).rows}
        return comm_comp_overlap(load_trace(trace))
    if not isinstance(trace, Trace):
        return {t.rank: comm_comp_overlap(t) for t in trace}
    basis, _, _, compute, comm = _device_intervals(trace)
    total = _length(comm)
    if total == 0:
        raise ValueError(
            f"{Path(trace.path).name} holds no communication (no NCCL kernels, no "
            "gloo/c10d collectives): overlap is undefined for a single-process run"
        )
    both = _length(intersect_arrays(comm, compute))
    if basis == "gpu kernels":
        total, both = int(total), int(both)
    return round(100 * both / total, 2)


# --------------------------------------------------------------------------- many ranks


def _rank_row(path: Path, parser: str | None = None) -> RankRow:
    """One rank file's figures (run in a worker process by :func:`analyse_ranks`)."""
    t = read_trace(path, parser)
    tb = temporal_breakdown(t)
    try:
        ov = comm_comp_overlap(t)
    except ValueError:  # no communication on this rank: no overlap to report
        ov = None
    steps = step_breakdown(t)
    return RankRow(
        t.rank if t.rank is not None else rank_from_name(path),
        path.name,
        t.parser,
        len(t.columns),
        len(steps),
        tb.basis,
        tb.kernel_time_us,
        tb.idle_pct,
        tb.compute_pct,
        tb.non_compute_pct,
        ov,
        statistics.fmean(b.duration_us for b in steps),
        statistics.fmean(b.exposed_comm_us for b in steps),
        statistics.fmean(b.duration_us - b.exposed_comm_us for b in steps),
    )


def analyse_ranks(
    folder: str | Path | Sequence[str | Path], jobs: int | None = None, parser: str | None = None
) -> RankReport:
    """Every rank file of a folder (or a list of files), analysed by ``jobs`` processes
    (default as in :func:`load_trace`): a :class:`RankReport` with one :class:`RankRow` per rank (HTA's
    temporal breakdown and overlap, mean step time and exposed communication) and the
    straggler summary. A file that fails is named in ``report.failed``; the others still count."""
    files = trace_files(Path(folder)) if isinstance(folder, (str, os.PathLike)) else [Path(p) for p in folder]
    rows, failed = run_per_file(_rank_row, files, jobs, parser)
    return rank_report(str(folder), rows, failed)


def intervals(trace: Trace, kind: str, step: int | None = None) -> list[tuple[float, float]]:
    """The intervals of one class — "compute", "comm", "other" or "data" — already merged
    (disjoint, sorted), optionally cut to step ``step`` (0-based index into ``trace.steps()``),
    in microseconds."""
    _, iv = _classes(trace)
    if kind not in iv:
        raise unknown("interval kind", kind, sorted(iv))
    if step is None:
        return list(iv[kind])  # a copy: the cached lists must not be changed by the caller
    steps = trace.steps()
    if not 0 <= step < len(steps):
        raise IndexError(f"step {step} out of range: the trace has {len(steps)} steps")
    return cut(iv[kind], steps[step].ts, steps[step].end)

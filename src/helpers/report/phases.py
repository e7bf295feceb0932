"""From a profiler trace of a few training steps to the time of each phase of a step.

The training loop marks its phases with named ranges (``helpers.nvtx.annotate``, which is a
``torch.profiler.record_function`` range plus NVTX on a GPU): ``dataloader``, ``forward``,
``backward``, ``optimizer``. For each ``ProfilerStep#N`` of the trace:

* on a CPU trace a phase's time is the length of its ranges (the training thread does the
  work itself);
* on a GPU trace a phase's time is the busy time of the GPU kernels *launched* while its
  range was open (kernels are matched to their launch by the trace's correlation ids), and
  data time is the time the GPU sat idle while the host was inside ``dataloader``
  (``helpers.timeline.step_breakdown``'s data wait);
* ``other`` is the rest of the step: host work outside the ranges, syncs, launch gaps.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from .. import timeline
from ..timeline import Trace

RANGES = {"data": "dataloader", "forward": "forward", "backward": "backward", "optimizer": "optimizer"}


def _host_ranges(trace: Trace, name: str) -> list[tuple[float, float]]:
    return [
        (e.ts, e.end)
        for e in trace.events
        if e.stream is None and e.name == name and e.cat in ("user_annotation", "")
    ]


def _launch_times(trace: Trace) -> dict[int, float]:
    """correlation id -> host time of the launch (runtime / driver call) of device work."""
    return {
        e.correlation: e.ts
        for e in trace.events
        if e.stream is None and e.correlation is not None and e.cat in ("cuda_runtime", "cuda_driver")
    }


def _inside(t: float, spans: Sequence[tuple[float, float]]) -> bool:
    return any(s <= t <= e for s, e in spans)


def step_phases(trace: Trace) -> list[dict[str, float]]:
    """Per ``ProfilerStep``: ms of data, forward, backward, optimizer and other."""
    steps = [s for s in trace.steps() if s.name.startswith("ProfilerStep")] or trace.steps()
    if not steps:
        raise ValueError(
            f"{trace.path}: no ProfilerStep#N events; record with a torch.profiler "
            "schedule and call prof.step() after every step"
        )
    ranges = {phase: _host_ranges(trace, name) for phase, name in RANGES.items()}
    if not any(ranges.values()):
        raise ValueError(
            f"{trace.path}: no dataloader / forward / backward / optimizer ranges; "
            "annotate the loop with helpers.nvtx.annotate(name)"
        )
    if trace.is_gpu:
        launches = _launch_times(trace)
        breakdown = {b.step: b for b in timeline.step_breakdown(trace)}
    out = []
    for step in steps:
        lo, hi = step.ts, step.end
        spans = {p: timeline.cut(v, lo, hi) for p, v in ranges.items()}
        ms: dict[str, float] = {}
        if trace.is_gpu:
            for phase in ("forward", "backward", "optimizer"):
                kernels = [
                    (e.ts, e.end)
                    for e in trace.events
                    if e.stream is not None
                    and e.correlation in launches
                    and _inside(launches[e.correlation], spans[phase])
                ]
                ms[phase] = timeline.union_length(kernels) / 1e3
            ms["data"] = breakdown[step.name].data_wait_us / 1e3
        else:
            for phase, span in spans.items():
                ms[phase] = timeline.union_length(span) / 1e3
        ms["other"] = max(0.0, step.dur / 1e3 - sum(ms[p] for p in RANGES))
        ms["step"] = step.dur / 1e3
        out.append({k: ms[k] for k in ("step", *RANGES, "other")})
    return out


def mean_phases(per_step: Sequence[dict[str, float]]) -> dict[str, float]:
    """The mean of each phase over steps."""
    if not per_step:
        raise ValueError("mean_phases needs at least one step")
    return {k: statistics.fmean(s[k] for s in per_step) for k in per_step[0]}


def top_operators(trace: Trace, n: int = 5) -> list[tuple[str, float]]:
    """The ``n`` operators (CPU trace) or kernels (GPU trace) that took the most time, as
    (name, ms per profiled step), largest first.

    On a GPU trace a kernel's time is its duration on its stream. On a CPU trace an operator's
    time is its *self* time: its duration minus that of the operators it called on the same
    thread, so that ``aten::linear`` does not count the ``aten::addmm`` inside it twice.
    """
    steps = [s for s in trace.steps() if s.name.startswith("ProfilerStep")] or trace.steps()
    if not steps:
        raise ValueError(f"{trace.path}: no ProfilerStep#N events to count operators per step")
    lo, hi = min(s.ts for s in steps), max(s.end for s in steps)
    totals: dict[str, float] = {}
    if trace.is_gpu:
        for e in trace.events:
            if e.stream is not None and lo <= e.ts < hi:
                totals[e.name] = totals.get(e.name, 0.0) + e.dur
    else:
        ops = sorted(
            (e for e in trace.events if e.stream is None and e.cat == "cpu_op" and lo <= e.ts < hi),
            key=lambda e: (e.tid, e.ts, -e.dur),
        )
        open_ops: list[list] = []  # [event, time of its children] on the current thread
        for op in [*ops, None]:
            while open_ops and (op is None or op.tid != open_ops[-1][0].tid or op.ts >= open_ops[-1][0].end):
                done, children = open_ops.pop()
                totals[done.name] = totals.get(done.name, 0.0) + max(0.0, done.dur - children)
                if open_ops and open_ops[-1][0].tid == done.tid:
                    open_ops[-1][1] += done.dur
            if op is not None:
                open_ops.append([op, 0.0])
    ranked = sorted(totals.items(), key=lambda kv: -kv[1])[:n]
    return [(name, us / 1e3 / len(steps)) for name, us in ranked]


_ITEMSIZE = {"float": 4, "double": 8, "c10::BFloat16": 2, "c10::Half": 2, "long int": 8, "int": 4}
_MATMULS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")


def _matmul_cost(args: dict) -> tuple[float, float] | None:
    """(FLOPs, bytes) of one matrix product from the shapes the profiler recorded
    (``record_shapes=True``): 2·M·K·N (times the batch), and the bytes of its inputs and output.
    ``None`` when the shapes are not there."""
    dims, types = args.get("Input Dims"), args.get("Input type")
    if not dims or not types:
        return None
    mats = [(d, t) for d, t in zip(dims, types, strict=False) if isinstance(d, list) and len(d) in (2, 3)]
    if len(mats) < 2:
        return None
    (a, ta), (b, _) = mats[-2], mats[-1]
    if a[-1] != b[-2]:
        return None
    batch = a[0] if len(a) == 3 else 1
    m, k, n = a[-2], a[-1], b[-1]
    size = _ITEMSIZE.get(ta, 4)
    inputs = sum(math.prod(d) * _ITEMSIZE.get(t, 4) for d, t in mats)
    return 2.0 * batch * m * k * n, float(inputs + batch * m * n * size)


def operator_costs(trace: Trace, names: Sequence[str]) -> dict[str, dict[str, float]]:
    """FLOPs and bytes per profiled step of the matrix products among ``names`` (``aten::mm``,
    ``addmm``, ``bmm``, ``baddbmm``), from the shapes the profiler recorded: what places them on a
    roofline (chapter 1). Operators that are not matrix products, or a trace recorded without
    shapes, are left out: their FLOPs are not known from the trace."""
    steps = [s for s in trace.steps() if s.name.startswith("ProfilerStep")] or trace.steps()
    if not steps:
        return {}
    lo, hi = min(s.ts for s in steps), max(s.end for s in steps)
    out: dict[str, dict[str, float]] = {}
    for e in trace.events:
        if e.name in names and e.name in _MATMULS and e.stream is None and lo <= e.ts < hi:
            cost = _matmul_cost(e.args)
            if cost is not None:
                acc = out.setdefault(e.name, {"flops": 0.0, "bytes": 0.0})
                acc["flops"] += cost[0] / len(steps)
                acc["bytes"] += cost[1] / len(steps)
    return out


def device_idle_share(trace: Trace) -> float | None:
    """The share of the profiled steps in which no GPU kernel, copy or collective ran (a GPU
    trace), or ``None`` for a CPU trace: there is no separate device to sit idle."""
    if not trace.is_gpu:
        return None
    per_step = timeline.step_breakdown(trace)
    total = sum(b.duration_us for b in per_step)
    return sum(b.idle_us for b in per_step) / total if total > 0 else None

"""Cost models behind a timeline: collectives (α + bytes/bandwidth), the critical path of an
overlapped backward, gradient buckets, and a pipeline-parallel schedule simulator.

Units: seconds, bytes, bytes per second (decimal SI), unless a name says otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ._validate import count


def _nonneg(**values: float) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
            raise TypeError(f"{name} must be a number, got {value!r}")
        if value < 0 or math.isinf(value):
            raise ValueError(f"{name} must be a non-negative finite number, got {value!r}")


def _count(name: str, value: int, minimum: int = 1) -> None:
    count(minimum, **{name: value})


def alpha_beta_time(nbytes: float, alpha_s: float, bandwidth: float) -> float:
    """Time of one message: t ≈ α + bytes / bandwidth (seed 000 §03)."""
    _nonneg(nbytes=nbytes, alpha_s=alpha_s)
    if not bandwidth > 0:
        raise ValueError(f"bandwidth must be positive (bytes/s), got {bandwidth!r}")
    return alpha_s + nbytes / bandwidth


def ring_allreduce_time(nbytes: float, n_ranks: int, alpha_s: float, bandwidth: float) -> float:
    """Ring all-reduce of ``nbytes`` over ``n_ranks``: 2(n−1) steps (reduce-scatter, then
    all-gather), each sending one chunk of bytes/n: 2(n−1)·(α + (bytes/n)/bandwidth)."""
    _count("n_ranks", n_ranks)
    if n_ranks == 1:
        return 0.0
    return 2 * (n_ranks - 1) * alpha_beta_time(nbytes / n_ranks, alpha_s, bandwidth)


def bucket_sizes(total_bytes: float, bucket_bytes: float) -> list[float]:
    """Split a gradient of ``total_bytes`` into buckets of ``bucket_bytes`` (the last may be smaller)."""
    _nonneg(total_bytes=total_bytes)
    if not bucket_bytes > 0:
        raise ValueError(f"bucket_bytes must be positive, got {bucket_bytes!r}")
    full, rest = divmod(total_bytes, bucket_bytes)
    return [bucket_bytes] * int(full) + ([rest] if rest > 0 else [])


def bucketed_allreduce_time(total_bytes: float, bucket_bytes: float, n_ranks: int, alpha_s: float,
                            bandwidth: float) -> float:
    """Ring all-reduces of every bucket, one after another: small buckets pay α many times."""
    return sum(ring_allreduce_time(b, n_ranks, alpha_s, bandwidth)
               for b in bucket_sizes(total_bytes, bucket_bytes))


def overlapped_backward(backward_s: float, total_bytes: float, bucket_bytes: float, n_ranks: int,
                        alpha_s: float, bandwidth: float) -> tuple[float, float]:
    """(backward + communication end time, exposed communication) for DDP-style buckets.

    Gradients become ready at a constant rate during the backward; a bucket's all-reduce
    starts when its last gradient is ready and the previous bucket's all-reduce is done (one
    communication channel). Exposed = how far communication runs past the end of backward.
    """
    _nonneg(backward_s=backward_s)
    done, ready_bytes = 0.0, 0.0
    for size in bucket_sizes(total_bytes, bucket_bytes):
        ready_bytes += size
        ready = backward_s * ready_bytes / total_bytes if total_bytes else 0.0
        done = max(done, ready) + ring_allreduce_time(size, n_ranks, alpha_s, bandwidth)
    end = max(backward_s, done)
    return end, end - backward_s


def min_exposed(comm_s: float, overlap_window_s: float) -> float:
    """At least this much communication is exposed when only ``overlap_window_s`` of compute
    can hide it: max(0, comm − window) (seed 000 §03)."""
    _nonneg(comm_s=comm_s, overlap_window_s=overlap_window_s)
    return max(0.0, comm_s - overlap_window_s)


def max_saving(comm_s: float, new_comm_s: float, overlap_window_s: float) -> float:
    """The most a step can gain by cutting communication from ``comm_s`` to ``new_comm_s``:
    only the exposed part was on the critical path."""
    return min_exposed(comm_s, overlap_window_s) - min_exposed(new_comm_s, overlap_window_s)


def bubble_fraction(stages: int, microbatches: int) -> float:
    """Idle share of a synchronous pipeline (GPipe or 1F1B, equal stages): (p−1)/(m+p−1)."""
    _count("stages", stages)
    _count("microbatches", microbatches)
    return (stages - 1) / (microbatches + stages - 1)


def min_microbatches(stages: int, max_bubble: float) -> int:
    """Smallest number of microbatches that keeps the bubble fraction <= ``max_bubble``."""
    _count("stages", stages)
    if not 0 < max_bubble < 1:
        raise ValueError(f"max_bubble must be a fraction between 0 and 1, got {max_bubble!r}")
    m = max(1, math.ceil((stages - 1) * (1 - max_bubble) / max_bubble))
    while m > 1 and bubble_fraction(stages, m - 1) <= max_bubble:  # float guard
        m -= 1
    while bubble_fraction(stages, m) > max_bubble:
        m += 1
    return m


@dataclass(frozen=True)
class PipelineSchedule:
    """A simulated pipeline: ``ops[s]`` lists (start, end, "F"|"B", microbatch) of stage ``s``."""

    schedule: str
    stages: int
    microbatches: int
    ops: list[list[tuple[float, float, str, int]]]

    @property
    def makespan(self) -> float:
        return max(op[1] for ops in self.ops for op in ops)

    @property
    def bubble_fraction(self) -> float:
        """Measured idle share: 1 − busy time / (stages × makespan)."""
        busy = sum(op[1] - op[0] for ops in self.ops for op in ops)
        return 1 - busy / (self.stages * self.makespan)


def _stage_order(schedule: str, stage: int, p: int, m: int) -> list[tuple[str, int]]:
    if schedule == "gpipe":  # all forwards, then all backwards
        return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
    warmup = min(p - stage - 1, m)  # 1F1B: fill the pipe, then alternate, then drain
    order = [("F", i) for i in range(warmup)]
    for i in range(m - warmup):
        order += [("F", warmup + i), ("B", i)]
    return order + [("B", i) for i in range(m - warmup, m)]


def simulate_pipeline(stages: int, microbatches: int, schedule: str = "1f1b", t_forward: float = 1.0,
                      t_backward: float = 2.0) -> PipelineSchedule:
    """Simulate a pipeline-parallel step with ``stages`` equal stages (each op starts as soon as
    its stage is free and its input — the previous stage's forward or the next stage's
    backward of the same microbatch — is done)."""
    _count("stages", stages)
    _count("microbatches", microbatches)
    if schedule not in ("1f1b", "gpipe"):
        raise ValueError(f"schedule must be '1f1b' or 'gpipe', got {schedule!r}")
    _nonneg(t_forward=t_forward, t_backward=t_backward)
    p, m = stages, microbatches
    orders = [_stage_order(schedule, s, p, m) for s in range(p)]
    done: dict[tuple[str, int, int], float] = {}
    ops: list[list[tuple[float, float, str, int]]] = [[] for _ in range(p)]
    cursor, free = [0] * p, [0.0] * p
    while any(cursor[s] < len(orders[s]) for s in range(p)):
        progressed = False
        for s in range(p):
            if cursor[s] == len(orders[s]):
                continue
            kind, i = orders[s][cursor[s]]
            dep = ("F", s - 1, i) if kind == "F" else (("B", s + 1, i) if s < p - 1 else ("F", s, i))
            if kind == "F" and s == 0:
                dep = None
            if dep is not None and dep not in done:
                continue
            start = max(free[s], done[dep] if dep else 0.0)
            end = start + (t_forward if kind == "F" else t_backward)
            ops[s].append((start, end, kind, i))
            done[(kind, s, i)], free[s] = end, end
            cursor[s] += 1
            progressed = True
        if not progressed:  # cannot happen for the two schedules above; guards a future edit
            raise RuntimeError("pipeline schedule deadlocked")
    return PipelineSchedule(schedule, p, m, ops)

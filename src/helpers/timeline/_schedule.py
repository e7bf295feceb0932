"""Cost models behind a timeline: collectives (α + bytes/bandwidth), the critical path of an
overlapped backward, gradient buckets, and a pipeline-parallel schedule simulator.

Units: seconds, bytes, bytes per second (decimal SI), unless a name says otherwise.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from .._validate import count


def _nonneg(**values: float) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
            raise TypeError(f"{name} must be a number, got {value!r}")
        if value < 0 or math.isinf(value):
            raise ValueError(f"{name} must be a non-negative finite number, got {value!r}")


def _count(name: str, value: int, minimum: int = 1) -> int:
    return count(minimum, **{name: value})[0]


def alpha_beta_time(nbytes: float, alpha_s: float, bandwidth: float) -> float:
    """Time of one message: t ≈ α + bytes / bandwidth (the latency-bandwidth, or α-β, model)."""
    _nonneg(nbytes=nbytes, alpha_s=alpha_s)
    if not bandwidth > 0:
        raise ValueError(f"bandwidth must be positive (bytes/s), got {bandwidth!r}")
    return alpha_s + nbytes / bandwidth


def ring_allreduce_time(nbytes: float, n_ranks: int, alpha_s: float, bandwidth: float) -> float:
    """Ring all-reduce of ``nbytes`` over ``n_ranks``: 2(n−1) steps (reduce-scatter, then
    all-gather), each sending one chunk of bytes/n: 2(n−1)·(α + (bytes/n)/bandwidth)."""
    n_ranks = _count("n_ranks", n_ranks)
    if n_ranks == 1:
        return 0.0
    return 2 * (n_ranks - 1) * alpha_beta_time(nbytes / n_ranks, alpha_s, bandwidth)


def latency_share(nbytes: float, n_ranks: int, alpha_s: float, bandwidth: float) -> float:
    """The share of a ring all-reduce's time spent on latency: 2(n−1)·α / ring time
    = α / (α + (bytes/n)/bandwidth). Near 1, the message is too small to use the link."""
    n_ranks = _count("n_ranks", n_ranks, 2)
    total = ring_allreduce_time(nbytes, n_ranks, alpha_s, bandwidth)
    return 2 * (n_ranks - 1) * alpha_s / total if total > 0 else 0.0


def min_bucket_bytes(n_ranks: int, alpha_s: float, bandwidth: float, max_latency_share: float) -> float:
    """The smallest bucket (bytes) whose ring all-reduce spends at most ``max_latency_share``
    of its time on latency: α/(α + B/(n·bw)) <= f  <=>  B >= n·bw·α·(1 − f)/f. At f = 0.5 it
    is the size below which latency dominates, n·α·bw."""
    n_ranks = _count("n_ranks", n_ranks, 2)
    _nonneg(alpha_s=alpha_s)
    if not bandwidth > 0:
        raise ValueError(f"bandwidth must be positive (bytes/s), got {bandwidth!r}")
    if not 0 < max_latency_share < 1:
        raise ValueError(f"max_latency_share must be a fraction between 0 and 1, got {max_latency_share!r}")
    return n_ranks * bandwidth * alpha_s * (1 - max_latency_share) / max_latency_share


def bucket_sizes(total_bytes: float, bucket_bytes: float) -> list[float]:
    """Split a gradient of ``total_bytes`` into buckets of ``bucket_bytes`` (the last may be smaller)."""
    _nonneg(total_bytes=total_bytes)
    if not bucket_bytes > 0:
        raise ValueError(f"bucket_bytes must be positive, got {bucket_bytes!r}")
    full, rest = divmod(total_bytes, bucket_bytes)
    return [bucket_bytes] * int(full) + ([rest] if rest > 0 else [])


def bucketed_allreduce_time(
    total_bytes: float, bucket_bytes: float, n_ranks: int, alpha_s: float, bandwidth: float
) -> float:
    """Ring all-reduces of every bucket, one after another: small buckets pay α many times."""
    return sum(
        ring_allreduce_time(b, n_ranks, alpha_s, bandwidth) for b in bucket_sizes(total_bytes, bucket_bytes)
    )


def overlapped_backward(
    backward_s: float, total_bytes: float, bucket_bytes: float, n_ranks: int, alpha_s: float, bandwidth: float
) -> tuple[float, float]:
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
    can hide it: max(0, comm − window)."""
    _nonneg(comm_s=comm_s, overlap_window_s=overlap_window_s)
    return max(0.0, comm_s - overlap_window_s)


def max_saving(comm_s: float, new_comm_s: float, overlap_window_s: float) -> float:
    """The most a step can gain by cutting communication from ``comm_s`` to ``new_comm_s``:
    only the exposed part was on the critical path."""
    return min_exposed(comm_s, overlap_window_s) - min_exposed(new_comm_s, overlap_window_s)


def step_with_overlap(
    forward_s: float, backward_s: float, window_fraction: float, comm_s: float
) -> tuple[float, float]:
    """(step time, exposed communication) of forward + backward when communication can hide
    behind the last ``window_fraction`` of the backward. A faster backward also shrinks that
    window, so more communication is exposed: a faster kernel may not make the step faster."""
    _nonneg(forward_s=forward_s, backward_s=backward_s, comm_s=comm_s)
    if not 0 <= window_fraction <= 1:
        raise ValueError(f"window_fraction must be between 0 and 1, got {window_fraction!r}")
    exposed = min_exposed(comm_s, window_fraction * backward_s)
    return forward_s + backward_s + exposed, exposed


def bubble_fraction(stages: int, microbatches: int, chunks: int = 1) -> float:
    """Idle share of a synchronous pipeline with equal stages (GPipe or 1F1B): (p−1)/(m+p−1).

    With the interleaved 1F1B schedule each device holds ``chunks`` (v) model pieces, and the
    fill and drain take 1/v as long: (p−1)/(v·m + p−1) (Narayanan et al., "Efficient Large-Scale
    Language Model Training on GPU Clusters Using Megatron-LM", 2021, section 2.2)."""
    stages = _count("stages", stages)
    microbatches = _count("microbatches", microbatches)
    chunks = _count("chunks", chunks)
    return (stages - 1) / (chunks * microbatches + stages - 1)


def stage_times(layer_times: list[float], split: list[int]) -> list[float]:
    """Time of each pipeline stage when stage i gets the next ``split[i]`` layers, in order."""
    if sum(split) != len(layer_times) or any(
        isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in split
    ):
        raise ValueError(
            f"split {split} must give every stage at least one layer and use all {len(layer_times)} layers"
        )
    out, i = [], 0
    for k in split:
        out.append(sum(layer_times[i : i + k]))
        i += k
    return out


def optimal_splits(layer_times: list[float], stages: int) -> list[list[int]]:
    """Every split of the layers (in order, at least one per stage) whose slowest stage is as
    fast as possible. A pipeline runs at the pace of its slowest stage."""
    from itertools import combinations

    stages = _count("stages", stages)
    n = len(layer_times)
    if not 1 <= stages <= n:
        raise ValueError(f"cannot split {n} layers into {stages} stages of at least one layer")
    for t in layer_times:
        _nonneg(layer_time=t)
    prefix = [0.0]
    for t in layer_times:
        prefix.append(prefix[-1] + t)
    best = math.inf
    found: list[list[int]] = []  # the splits with the lowest slowest stage so far
    for cuts in combinations(range(1, n), stages - 1):
        bounds = (0, *cuts, n)
        slowest = max(prefix[b] - prefix[a] for a, b in itertools.pairwise(bounds))
        split = [b - a for a, b in itertools.pairwise(bounds)]
        tie = 1e-9 * max(1.0, abs(slowest))  # sums in another order may differ in the last bits
        if not found or slowest < best - tie:
            best, found = slowest, [split]
        elif abs(slowest - best) <= tie:
            found.append(split)
    return found


def balance_stages(layer_times: list[float], stages: int) -> list[int]:
    """Layers per stage (in order) that make the slowest stage as fast as possible."""
    return optimal_splits(layer_times, stages)[0]


def min_microbatches(stages: int, max_bubble: float) -> int:
    """Smallest number of microbatches that keeps the bubble fraction <= ``max_bubble``."""
    stages = _count("stages", stages)
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


def simulate_pipeline(
    stages: int,
    microbatches: int,
    schedule: str = "1f1b",
    t_forward: float = 1.0,
    t_backward: float = 2.0,
    stage_scale: list[float] | None = None,
) -> PipelineSchedule:
    """Simulate a pipeline-parallel step with ``stages`` stages (each op starts as soon as
    its stage is free and its input — the previous stage's forward or the next stage's
    backward of the same microbatch — is done). ``stage_scale`` makes stages unequal: stage
    s's forward and backward take ``stage_scale[s]`` times ``t_forward`` and ``t_backward``."""
    stages = _count("stages", stages)
    microbatches = _count("microbatches", microbatches)
    if schedule not in ("1f1b", "gpipe"):
        raise ValueError(f"schedule must be '1f1b' or 'gpipe', got {schedule!r}")
    _nonneg(t_forward=t_forward, t_backward=t_backward)
    scale = [1.0] * stages if stage_scale is None else [float(x) for x in stage_scale]
    if len(scale) != stages or any(not x > 0 for x in scale):
        raise ValueError(f"stage_scale needs {stages} positive numbers, got {stage_scale!r}")
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
            dep: tuple[str, int, int] | None = (
                ("F", s - 1, i) if kind == "F" else (("B", s + 1, i) if s < p - 1 else ("F", s, i))
            )
            if kind == "F" and s == 0:
                dep = None
            if dep is not None and dep not in done:
                continue
            start = max(free[s], done[dep] if dep else 0.0)
            end = start + scale[s] * (t_forward if kind == "F" else t_backward)
            ops[s].append((start, end, kind, i))
            done[(kind, s, i)], free[s] = end, end
            cursor[s] += 1
            progressed = True
        if not progressed:  # cannot happen for the two schedules above; guards a future edit
            raise RuntimeError("pipeline schedule deadlocked")
    return PipelineSchedule(schedule, p, m, ops)

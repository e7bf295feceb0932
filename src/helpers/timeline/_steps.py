"""Splitting each step: compute, exposed communication, idle; the verdict (traces are loaded by
:mod:`helpers.timeline._load`)."""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TypedDict

import numpy as np

from ._intervals import (
    _merge,
    as_list,
    cut,
    exposed,
    gaps,
    merge_arrays,
    overlap,
    subtract,
    union_length,
)
from ._trace import (
    COMM_KERNEL_RE,
    CPU_COMM_RE,
    DATA_RE,
    NOT_COMPUTE_RE,
    Trace,
)

# --------------------------------------------------------------------------- classification


def _cpu_threads(trace: Trace) -> np.ndarray:
    """Thread codes of the training thread(s): those that own the steps, else the busiest
    cpu_op thread (ties: the one seen first)."""
    c = trace.columns
    owners = np.unique(c.thread[trace.step_index()])
    if len(owners):
        return owners
    ops = c.thread[c.cat_mask("cpu_op")]
    if not len(ops):
        return owners
    busy = np.bincount(ops, weights=c.dur[c.cat_mask("cpu_op")], minlength=len(c.threads))
    best = np.flatnonzero(busy == busy.max())
    return ops[np.isin(ops, best)][:1]


def _classes(trace: Trace) -> tuple[str, dict[str, list[tuple[float, float]]]]:
    """Merged intervals per class — compute, comm, other (device work), data (host ranges) —
    computed once per trace."""
    if "classes" in trace.cache:
        return trace.cache["classes"]
    c, gpu = trace.columns, trace.is_gpu
    device, host = c.on_gpu, ~c.on_gpu
    comm = device & c.name_mask(COMM_KERNEL_RE)
    other = device & ~comm & c.name_mask(NOT_COMPUTE_RE)
    compute = device & ~comm & ~other
    data = host & c.name_mask(DATA_RE, "search")
    if not gpu:
        cpu_comm = host & ~data & c.name_mask(CPU_COMM_RE)
        comm |= cpu_comm
        compute |= host & ~data & ~cpu_comm & c.cat_mask("cpu_op") & np.isin(c.thread, _cpu_threads(trace))
    start, end = c.ts, c.end
    iv = {
        k: as_list(*merge_arrays(start[m], end[m]))
        for k, m in (("compute", compute), ("comm", comm), ("other", other), ("data", data))
    }
    if not gpu:  # on a CPU the operators of the data loader are data loading, not model compute
        iv["compute"] = subtract(iv["compute"], iv["data"])
    trace.cache["classes"] = ("gpu" if gpu else "cpu"), iv
    return trace.cache["classes"]


@dataclass(frozen=True)
class StepBreakdown:
    """Where one step's wall time went, in microseconds.

    ``duration = compute + exposed_comm + other + idle`` and ``idle = data_wait + host_overhead``.
    On a GPU trace "the device" is the GPU streams; on a CPU trace it is the training thread's
    operators plus the collectives running on the backend's threads.
    """

    step: str
    rank: int | None
    basis: str  # "gpu" or "cpu"
    start_us: float
    duration_us: float
    compute_us: float  # union of computation (kernels / operators)
    communication_us: float  # union of collectives
    exposed_comm_us: float  # collectives not under computation
    other_us: float  # memcpy / memset / sync not under compute or communication
    idle_us: float  # nothing running on the device
    data_wait_us: float  # idle while a data-loader range is open on the host
    host_overhead_us: float  # the rest of idle: the device waits on the host (Python, launches)
    bubble_us: float = 0.0  # pipeline idle; filled by simulations, not measurable in one trace

    def shares(self) -> dict[str, float]:
        """Fractions of the step: compute, exposed communication, data wait, host overhead, bubble."""
        d = self.duration_us or math.nan
        return {
            "compute": self.compute_us / d,
            "exposed_comm": self.exposed_comm_us / d,
            "data_wait": self.data_wait_us / d,
            "host_overhead": self.host_overhead_us / d,
            "bubble": self.bubble_us / d,
        }

    def __str__(self) -> str:
        ms = lambda us: f"{us / 1e3:7.2f}"  # noqa: E731
        return (
            f"{self.step:>16} rank {self.rank}: step {ms(self.duration_us)} ms | compute "
            f"{ms(self.compute_us)} | comm {ms(self.communication_us)} (exposed "
            f"{ms(self.exposed_comm_us)}) | data {ms(self.data_wait_us)} | host "
            f"{ms(self.host_overhead_us)} | other {ms(self.other_us)}"
        )


def _window(trace: Trace, iv: dict, basis: str, name: str, start: float, end: float) -> StepBreakdown:
    part = {k: cut(v, start, end) for k, v in iv.items()}
    compute, comm = part["compute"], part["comm"]
    busy = _merge(compute + comm + part["other"])
    idle = gaps(busy, start, end)
    idle_us, data_us = union_length(idle), overlap(idle, part["data"])
    return StepBreakdown(
        name,
        trace.rank,
        basis,
        start,
        end - start,
        union_length(compute),
        union_length(comm),
        exposed(comm, compute),
        union_length(subtract(part["other"], compute + comm)),
        idle_us,
        data_us,
        idle_us - data_us,
    )


def _not_a_trace(value: object) -> str:
    """What to do when :func:`step_breakdown` gets something other than one loaded Trace."""
    if isinstance(value, (str, os.PathLike)):
        return (
            f"step_breakdown takes a loaded Trace, not a path: call trace = "
            f"timeline.load_trace({os.fspath(value)!r}) first, then timeline.step_breakdown(trace)"
        )
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, Trace) for v in value):
        return (
            f"step_breakdown takes one Trace, not a {type(value).__name__} of {len(value)}: call it "
            "once per rank, {t.rank: timeline.step_breakdown(t) for t in traces}"
        )
    if isinstance(value, (list, tuple)):
        return (
            f"step_breakdown takes one loaded Trace, not a {type(value).__name__}: call "
            "traces = timeline.load_trace(paths) first, then timeline.step_breakdown(t) for each t"
        )
    return (
        f"step_breakdown takes one Trace from timeline.load_trace(path), got "
        f"{type(value).__name__} {value!r:.60}"
    )


def step_breakdown(trace: Trace, step_pattern: str | None = None) -> list[StepBreakdown]:
    """One :class:`StepBreakdown` per step (``ProfilerStep#N`` or annotated steps; the whole
    trace as one window when there are none). A step's window is its wall-clock span on the
    host; device work launched in one step but running after it counts in the next window."""
    if not isinstance(trace, Trace):
        raise TypeError(_not_a_trace(trace))
    basis, iv = _classes(trace)
    steps = trace.steps(step_pattern)
    if not len(trace.columns):
        raise ValueError(f"{trace.path} holds no complete events: nothing to break down")
    windows = [(s.name, s.ts, s.end) for s in steps] or [
        ("whole trace", float(trace.columns.ts[0]), float(trace.columns.end.max()))
    ]
    return [_window(trace, iv, basis, *w) for w in windows]


def mean_step(breakdowns: Sequence[StepBreakdown]) -> StepBreakdown:
    """The average step of several (fields averaged), named after the first and last."""
    if not breakdowns:
        raise ValueError("mean_step needs at least one StepBreakdown")
    avg = {
        f.name: statistics.fmean(getattr(b, f.name) for b in breakdowns)
        for f in fields(StepBreakdown)
        if f.name.endswith("_us")
    }
    first = breakdowns[0]
    name = first.step if len(breakdowns) == 1 else f"mean of {len(breakdowns)}"
    return StepBreakdown(name, first.rank, first.basis, **avg)


@dataclass(frozen=True)
class Verdict:
    """A bottleneck class with the shares that decided it."""

    label: str
    evidence: dict[str, float]
    reason: str

    def __str__(self) -> str:
        return f"{self.label}: {self.reason}"


LABELS = {
    "exposed_comm": "communication-bound",
    "data_wait": "data-bound",
    "host_overhead": "host-bound",
    "bubble": "pipeline-bubble",
}
_WASTE_FIELDS = {
    "exposed_comm": "exposed_comm_us",
    "data_wait": "data_wait_us",
    "host_overhead": "host_overhead_us",
    "bubble": "bubble_us",
}


def classify(step: StepBreakdown, threshold: float = 0.2) -> Verdict:
    """Name a step's bottleneck: the largest waste among exposed communication, data wait,
    host overhead and pipeline bubble, if it is more than ``threshold`` × the step's COMPUTE
    time (strictly: exactly 20 % is not a bottleneck, as in the capstone's data-stall rule);
    otherwise "compute-bound" (the device is mostly computing).

    The measure is compute time, as in a common guideline that flags data loading when
    it takes more than 20% of the compute time; the course applies the same test to every waste.
    """
    if not 0 < threshold < 1:
        raise ValueError(f"threshold must be a fraction between 0 and 1, got {threshold!r}")
    shares = step.shares()
    wastes = {k: getattr(step, f) for k, f in _WASTE_FIELDS.items()}
    worst = max(LABELS, key=lambda k: wastes[k])
    of_compute = wastes[worst] / step.compute_us if step.compute_us > 0 else math.inf
    evidence = {**shares, f"{worst}_per_compute": of_compute}
    if wastes[worst] > threshold * step.compute_us:
        return Verdict(
            LABELS[worst],
            evidence,
            f"{worst} is {of_compute:.0%} of the compute time "
            f"(more than {threshold:.0%}); compute {shares['compute']:.0%} of the step",
        )
    return Verdict(
        "compute-bound",
        evidence,
        f"no waste is above {threshold:.0%} of the compute time "
        f"(largest: {worst}, {of_compute:.0%}); compute {shares['compute']:.0%} of the step",
    )


def own_time(breakdowns: Sequence[StepBreakdown]) -> float:
    """A rank's own time per step, µs: the step minus its exposed communication. In
    synchronous data parallelism the other ranks wait for the rank with the most own time."""
    if not breakdowns:
        raise ValueError("own_time needs at least one StepBreakdown")
    return statistics.fmean(b.duration_us - b.exposed_comm_us for b in breakdowns)


STRAGGLER_FLOOR = 0.05  # a lead under 5 % of the slowest rank's own time is never a straggler
NOISE_ERRORS = 2.0  # a lead must also exceed this many standard errors of the per-step leads


def slowest_rank(breakdowns_by_rank: Mapping[int, Sequence[StepBreakdown]]) -> int:
    """The rank with the most time of its own per step (step − exposed communication), with no
    margin: the candidate :func:`straggler` then tests against the noise."""
    if not breakdowns_by_rank:
        raise ValueError("slowest_rank needs breakdowns for at least one rank")
    own = {r: own_time(bs) for r, bs in breakdowns_by_rank.items()}
    return max(own, key=own.__getitem__)


class StragglerEvidence(TypedDict):
    """What :func:`straggler_evidence` returns (a plain dict)."""

    rank: int
    steps: int
    lead: float
    noise: float
    floor: float
    margin: float


def straggler_evidence(breakdowns_by_rank: Mapping[int, Sequence[StepBreakdown]]) -> StragglerEvidence:
    """What :func:`straggler` decides from, in µs per step: ``rank`` (the slowest, most own
    time), ``steps`` (steps compared: step i of every rank is the same iteration in synchronous
    data parallelism), ``lead`` (the mean over those steps of its own time minus the highest
    own time of the other ranks in the same step), ``noise`` (2 standard errors of those
    per-step leads; 0 for one step, which shows no spread), ``floor`` (5 % of its own time) and
    ``margin`` (the larger of noise and floor)."""
    slow = slowest_rank(breakdowns_by_rank)
    others = [r for r in breakdowns_by_rank if r != slow]
    steps = min(len(bs) for bs in breakdowns_by_rank.values())
    mine = lambda r, i: breakdowns_by_rank[r][i].duration_us - breakdowns_by_rank[r][i].exposed_comm_us  # noqa: E731
    leads = [mine(slow, i) - max((mine(r, i) for r in others), default=0.0) for i in range(steps)]
    lead = statistics.fmean(leads)
    noise = NOISE_ERRORS * statistics.stdev(leads) / math.sqrt(steps) if steps > 1 else 0.0
    floor = STRAGGLER_FLOOR * own_time(breakdowns_by_rank[slow])
    return {
        "rank": slow,
        "steps": steps,
        "lead": lead,
        "noise": noise,
        "floor": floor,
        "margin": max(noise, floor),
    }


def straggler(breakdowns_by_rank: Mapping[int, Sequence[StepBreakdown]]) -> int | None:
    """The rank the others wait for, or ``None`` when the run is balanced.

    The candidate is the slowest rank (most time of its own per step). Step by step, its lead
    is its own time minus the highest own time of the other ranks in that step. It is the
    straggler only when the mean of those leads is larger than the margin: the larger of 5 % of
    its own time (ranks a few microseconds apart tell nothing) and twice the standard error of
    the per-step leads (a lead the steps' spread can explain is noise). Otherwise the run is
    balanced within the noise. In synchronous data parallelism the others wait for the
    straggler in the collective."""
    if not breakdowns_by_rank:
        raise ValueError("straggler needs breakdowns for at least one rank")
    if len(breakdowns_by_rank) < 2:
        return None  # nobody to wait for it
    e = straggler_evidence(breakdowns_by_rank)
    return e["rank"] if e["lead"] > e["margin"] else None


def classify_ranks(
    breakdowns_by_rank: Mapping[int, Sequence[StepBreakdown]], threshold: float = 0.2
) -> dict[int, Verdict]:
    """One verdict per rank of a multi-rank run. When :func:`straggler` finds a rank the others
    wait for (beyond the noise; a balanced run has none), a rank whose exposed communication is mostly
    waiting for the slowest rank k (the gap between k's own time and its own covers at least
    half of it) is labelled "waiting for rank k", not "communication-bound": speeding up its
    communication would not help; the slow rank is the problem."""
    verdicts = {r: classify(mean_step(bs), threshold) for r, bs in breakdowns_by_rank.items()}
    if len(breakdowns_by_rank) < 2:
        return verdicts
    slow = straggler(breakdowns_by_rank)
    if slow is None:  # balanced: no rank is slower beyond the noise, so none is waited for
        return verdicts
    slow_own = own_time(breakdowns_by_rank[slow])
    for rank, verdict in verdicts.items():
        if rank == slow or verdict.label != "communication-bound":
            continue
        gap = slow_own - own_time(breakdowns_by_rank[rank])
        exposed = mean_step(breakdowns_by_rank[rank]).exposed_comm_us
        if gap >= 0.5 * exposed:
            verdicts[rank] = Verdict(
                f"waiting for rank {slow}",
                {**verdict.evidence, "wait_us": gap},
                f"rank {slow} has {gap / 1e3:.1f} ms more own time per step; this "
                f"rank waits for it inside the collective ({exposed / 1e3:.1f} ms "
                "exposed communication)",
            )
    return verdicts


def rank_table(traces: Sequence[Trace]) -> str:
    """A per-rank table of mean step breakdowns, in milliseconds, with each rank's verdict
    (:func:`classify_ranks`: a rank that waits for a straggler says so), then one line on the
    straggler test of :func:`straggler` (which rank, or balanced, and why)."""
    by_rank = {t.rank if t.rank is not None else i: step_breakdown(t) for i, t in enumerate(traces)}
    verdicts = classify_ranks(by_rank)
    lines = [
        f"{'rank':>4} {'steps':>5} {'step ms':>8} {'compute':>8} {'comm':>8} {'exposed':>8} "
        f"{'data':>7} {'host':>7}  verdict"
    ]
    for rank, bs in by_rank.items():
        m = mean_step(bs)
        lines.append(
            f"{rank!s:>4} {len(bs):>5} {m.duration_us / 1e3:8.2f} {m.compute_us / 1e3:8.2f} "
            f"{m.communication_us / 1e3:8.2f} {m.exposed_comm_us / 1e3:8.2f} "
            f"{m.data_wait_us / 1e3:7.2f} {m.host_overhead_us / 1e3:7.2f}  {verdicts[rank].label}"
        )
    if len(by_rank) > 1:
        e, slow = straggler_evidence(by_rank), straggler(by_rank)
        why = (
            f"rank {e['rank']} leads the others by {e['lead'] / 1e3:.2f} ms of own time per step over "
            f"{e['steps']} steps; margin {e['margin'] / 1e3:.2f} ms (5 % floor {e['floor'] / 1e3:.2f} ms, "
            f"2 standard errors of the per-step leads {e['noise'] / 1e3:.2f} ms)"
        )
        lines.append(f"straggler: rank {slow} ({why})" if slow is not None else f"balanced: {why}")
    return "\n".join(lines)

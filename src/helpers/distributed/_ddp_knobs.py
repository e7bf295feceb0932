"""DDP's knobs measured on real ranks: bucket size, ``no_sync``, ``gradient_as_bucket_view`` and
``static_graph``, on chapter 4's model (``layers`` x ``Linear(width, width)``).

Two kinds of evidence, kept apart. Traces from chapter 4's :func:`helpers.timeline.record_ddp`
say what happened in a step: how many all-reduces, how much communication was exposed. Speed
comes from one set of ranks holding one DDP model per setting (same seed, same weights, same
batch), timed in turns by :func:`._compare.time_interleaved` and judged by
:func:`._compare.compare_settings`.

DDP's "MB" is MiB (2**20 bytes). ``bucket_mb=None`` means DDP's default: 25 MiB buckets, but a
first bucket (the last layers' gradients, ready first) of only 1 MiB.
"""

from __future__ import annotations

import math
import re
import statistics
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._validate import count, positive, unknown
from ..bench._speed import SpeedComparison
from ..i18n import text, tr
from ..timeline import _schedule
from ..timeline._ddp import record_ddp
from ..timeline._load import load_trace
from ..timeline._steps import mean_step, step_breakdown
from ..timeline._trace import Trace
from ._compare import compare_settings
from ._launch import run_ranks

_DDP_KWARGS = ("bucket_cap_mb", "gradient_as_bucket_view", "static_graph")
_ALLREDUCE_RE = re.compile(r"^(gloo|nccl|ucc|mpi):all_reduce")
_ELEMENT_BYTES = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "int": 4, "long int": 8}


def bucket_label(bucket_mb: float | None) -> str:
    """How a bucket size is named in tables: ``"0.25 MB"``, or DDP's default."""
    return "default (25 MB, first 1 MB)" if bucket_mb is None else f"{bucket_mb:g} MB"


# ---------------------------------------------------------------------------- reading the traces


def allreduces_per_step(trace: Trace) -> tuple[float, float | None]:
    """(all-reduce calls, bytes all-reduced) per profiled step of one rank's trace: the backend's
    ``gloo:all_reduce`` (or ``nccl:``) events inside ``ProfilerStep`` windows. Bytes need a
    trace recorded with shapes (``record_ddp(record_shapes=True)``); else None."""
    steps = trace.steps()
    if not steps:
        raise ValueError(f"{trace.path} has no ProfilerStep events: cannot count per step")
    calls, nbytes = 0, 0.0
    sized = True
    for e in trace.events:
        if e.on_gpu or not _ALLREDUCE_RE.match(e.name) or not any(s.ts <= e.ts < s.end for s in steps):
            continue
        calls += 1
        dims, types = e.args.get("Input Dims"), e.args.get("Input type")
        if not dims or not types or types[0] not in _ELEMENT_BYTES:
            sized = False
            continue
        nbytes += sum(math.prod(d) for d in dims if isinstance(d, list)) * _ELEMENT_BYTES[types[0]]
    return calls / len(steps), (nbytes / len(steps) if sized else None)


def _read(paths: Sequence[Path]) -> list[Trace]:
    traces = load_trace(list(paths), keep_args=True)
    return traces if isinstance(traces, list) else [traces]


# --------------------------------------------------------------------------------- comparisons


def _checked_settings(settings: Mapping[str, Mapping[str, Any]], baseline: str) -> dict[str, dict[str, Any]]:
    if len(settings) < 2:
        raise ValueError(f"compare at least two settings, got {len(settings)}")
    if baseline not in settings:
        raise unknown("baseline", baseline, settings)
    for name, kw in settings.items():
        for key in kw:
            if key not in _DDP_KWARGS:
                raise unknown(f"DDP option in setting {name!r}", key, _DDP_KWARGS)
    return {str(k): dict(v) for k, v in settings.items()}


def _shape(world_size: int, layers: int, width: int, batch: int) -> tuple[int, dict[str, Any]]:
    """The checked world size, and the model's shape as keyword arguments."""
    world_size, layers, width, batch = count(world_size=world_size, layers=layers, width=width, batch=batch)
    return world_size, {"layers": layers, "width": width, "batch": batch}


def _time_settings(
    settings: dict[str, dict[str, Any]], world_size: int, shape: dict[str, Any], rounds: int,
    max_seconds: float, device: str, timeout_s: float,
) -> dict[str, Any]:  # fmt: skip
    (rounds,) = count(3, rounds=rounds)
    positive(max_seconds=max_seconds)
    target = "helpers.distributed._ddp_ranks:_settings_rank"
    opts = {"settings": settings, "rounds": rounds, "max_seconds": max_seconds, **shape}
    results = _ranks(target, world_size, device, timeout_s, **opts)
    first = results[0]
    first["backward_s"] = max(r["backward_s"] for r in results)  # the slowest rank's window
    return first


def compare_ddp_settings(
    settings: Mapping[str, Mapping[str, Any]],
    baseline: str,
    world_size: int = 2,
    layers: int = 8,
    width: int = 256,
    batch: int = 64,
    rounds: int = 20,
    max_seconds: float = 5.0,
    device: str = "cpu",
    min_effect: float = 0.02,
    timeout_s: float = 120.0,
) -> dict[str, SpeedComparison]:
    """Time DDP training steps under several settings (``{name: DDP keyword arguments}``, among
    ``bucket_cap_mb``, ``gradient_as_bucket_view``, ``static_graph``) in one set of ranks, in
    turns, and compare each with ``baseline``: one SpeedComparison (interval and verdict) each."""
    checked = _checked_settings(settings, baseline)
    world_size, shape = _shape(world_size, layers, width, batch)
    raw = _time_settings(checked, world_size, shape, rounds, max_seconds, device, timeout_s)
    return compare_settings(raw["samples"], baseline, min_effect, device)


def static_graph_comparison(**kwargs: Any) -> SpeedComparison:
    """``static_graph=True`` against ``False`` (both with DDP's default buckets), measured as in
    :func:`compare_ddp_settings` (same keyword arguments). On a small model expect "within noise":
    static_graph saves DDP some bookkeeping per step, not communication."""
    settings = {"static_graph=False": {}, "static_graph=True": {"static_graph": True}}
    return compare_ddp_settings(settings, "static_graph=False", **kwargs)["static_graph=True"]


# ---------------------------------------------------------------------------------- the sweep


@dataclass(frozen=True)
class BucketRow:
    """One bucket size: DDP's buckets, what the traces measured, the model, the speed verdict.
    Times in seconds; ``allreduces_per_step`` per rank."""

    label: str
    bucket_mb: float | None
    ddp_bucket_bytes: tuple[int, ...]
    allreduces_per_step: tuple[float, ...]
    comm_s: float
    exposed_comm_s: float
    step_s: float
    comparison: SpeedComparison | None  # None for the baseline
    model_comm_s: float | None
    model_exposed_s: float | None


@dataclass(frozen=True)
class BucketSweep:
    """:func:`bucket_sweep`'s result: one :class:`BucketRow` per bucket size."""

    rows: tuple[BucketRow, ...]
    baseline: str
    grad_bytes: int
    backward_s: float
    world_size: int
    device: str
    alpha_s: float | None
    bandwidth: float | None
    traces: dict[str, list[Path]] = field(default_factory=dict)

    @property
    def comparisons(self) -> dict[str, SpeedComparison]:
        return {r.label: r.comparison for r in self.rows if r.comparison is not None}

    def __str__(self) -> str:
        ms = lambda s: "    -" if s is None else f"{s * 1e3:5.2f}"  # noqa: E731
        lines = [
            f"DDP bucket sweep: {self.grad_bytes / 1e6:.2f} MB of gradients, {self.world_size} ranks "
            f"on {self.device}; times in ms (measured: mean step of each rank's trace, mean of ranks)",
            f"{'bucket':<28}{'DDP buckets':>12}{'all-reduces':>12} | {'comm':>6}{'exposed':>8} | "
            f"{'model comm':>11}{'exposed':>8} | {'step':>6}  speed-up vs baseline (95 %)",
        ]
        for r in self.rows:
            calls = "/".join(f"{c:g}" for c in sorted(set(r.allreduces_per_step)))
            if r.comparison is None:
                verdict = tr("baseline")  # the verdict words are read, so they are translated
            else:
                c = r.comparison
                verdict = f"{c.speedup:.2f}x [{c.low:.2f}, {c.high:.2f}] {text(c.verdict)}"
            lines.append(
                f"{r.label:<28}{len(r.ddp_bucket_bytes):>12}{calls:>12} | {ms(r.comm_s):>6}"
                f"{ms(r.exposed_comm_s):>8} | {ms(r.model_comm_s):>11}{ms(r.model_exposed_s):>8} | "
                f"{ms(r.step_s):>6}  {verdict}"
            )
        if self.alpha_s is not None and self.bandwidth is not None:
            lines.append(
                f"model: chapter 4's ring all-reduces (alpha {self.alpha_s * 1e6:.0f} us, "
                f"{self.bandwidth / 1e9:.2f} GB/s) over DDP's bucket count as equal buckets, hidden "
                f"behind a backward of {self.backward_s * 1e3:.2f} ms measured without DDP."
            )
        else:
            lines.append("model: not evaluated (give alpha_s and bandwidth, fitted from a measurement).")
        lines.append(
            "DDP never splits a tensor: a bucket closes at the first gradient that fills it, so a cap "
            "below one tensor's size gives one bucket per tensor. Step times: slowest rank, median of "
            "interleaved rounds in one set of ranks."
        )
        if self.device == "cpu":
            lines.append(
                "On CPU, gloo's all-reduces run on threads that share the cores with the backward: "
                "'overlap' here is time-slicing, not a separate engine. And a backward operator "
                "blocked while it launches an all-reduce (c10d::allreduce_) counts as compute in "
                "chapter 4's breakdown, so measured exposed communication is a lower bound."
            )
        return "\n".join(lines)


def bucket_sweep(
    bucket_mb: Sequence[float | None] = (0.0005, 0.25, 25.0, None),
    baseline_mb: float | None = None,
    alpha_s: float | None = None,
    bandwidth: float | None = None,
    world_size: int = 2,
    layers: int = 8,
    width: int = 256,
    batch: int = 64,
    steps: int = 3,
    rounds: int = 20,
    max_seconds: float = 4.0,
    device: str = "cpu",
    out_dir: str | Path | None = None,
    timeout_s: float = 120.0,
) -> BucketSweep:
    """Sweep DDP's bucket size (MiB; None: DDP's default) on ``layers`` x ``Linear(width, width)``.

    For each size: a profiled run (:func:`helpers.timeline.record_ddp`) read with chapter 4's
    :func:`step_breakdown` gives communication, exposed communication and all-reduces per step;
    one set of ranks times every size in turns against ``baseline_mb``; and, when ``alpha_s``
    (seconds) and ``bandwidth`` (bytes/s) are given, chapter 4's ``overlapped_backward`` predicts
    communication and its exposed part for the same gradient bytes and DDP's bucket count.
    """
    sizes = list(bucket_mb)
    for mb in sizes:
        if mb is not None:
            positive(bucket_mb=mb)
    labels = [bucket_label(mb) for mb in sizes]
    if len(set(labels)) != len(labels):
        raise ValueError(f"bucket_mb holds a size twice: {sizes}")
    if baseline_mb not in sizes:
        raise ValueError(f"baseline_mb {baseline_mb!r} must be one of bucket_mb {sizes}")
    if (alpha_s is None) != (bandwidth is None):
        raise ValueError("give both alpha_s and bandwidth (fitted from a measurement), or neither")
    if alpha_s is not None:
        _schedule._nonneg(alpha_s=alpha_s)
        positive(bandwidth=bandwidth)  # type: ignore[arg-type]
    (steps,) = count(steps=steps)
    world_size, shape = _shape(world_size, layers, width, batch)
    out = Path(out_dir) if out_dir is not None else Path(tempfile.mkdtemp(prefix="trainperf_buckets_"))
    settings = {label: {"bucket_cap_mb": mb} for label, mb in zip(labels, sizes, strict=True)}
    base = bucket_label(baseline_mb)
    raw = _time_settings(settings, world_size, shape, rounds, max_seconds, device, timeout_s)
    verdicts = compare_settings(raw["samples"], base, 0.02, device)
    grad_bytes, backward_s = int(raw["grad_bytes"]), float(raw["backward_s"])
    rows, traces = [], {}
    for label, mb in zip(labels, sizes, strict=True):
        folder = out / label.split(" ")[0].replace(".", "_")
        knobs = {"bucket_mb": mb, "device": device, "timeout_s": timeout_s, "record_shapes": True, **shape}
        runs = record_ddp(folder, world_size, steps, **knobs)
        traces[label] = runs["balanced"]
        read = _read(runs["balanced"])
        per_rank = [mean_step(step_breakdown(t)) for t in read]
        calls = tuple(allreduces_per_step(t)[0] for t in read)
        buckets = tuple(raw["buckets"][label])
        model_comm = model_exposed = None
        if alpha_s is not None and bandwidth is not None and buckets:
            equal = grad_bytes / len(buckets)
            model_comm = _schedule.bucketed_allreduce_time(grad_bytes, equal, world_size, alpha_s, bandwidth)
            _, model_exposed = _schedule.overlapped_backward(
                backward_s, grad_bytes, equal, world_size, alpha_s, bandwidth
            )
        rows.append(
            BucketRow(
                label,
                mb,
                buckets,
                calls,
                statistics.fmean(b.communication_us for b in per_rank) / 1e6,
                statistics.fmean(b.exposed_comm_us for b in per_rank) / 1e6,
                statistics.median(raw["samples"][label]),
                verdicts.get(label),
                model_comm,
                model_exposed,
            )
        )
    return BucketSweep(
        tuple(rows), base, grad_bytes, backward_s, world_size, device, alpha_s, bandwidth, traces
    )


# ------------------------------------------------------------------- no_sync and bucket views


@dataclass(frozen=True)
class NoSyncCount:
    """All-reduce calls and bytes per optimizer step of ``accumulate`` micro-batches, measured
    in rank 0's trace, with ``no_sync`` (only the last backward synchronises) and without
    (every backward does); the expectation is DDP's bucket count times the backwards that
    synchronise. Bytes are None where the trace holds no shapes."""

    accumulate: int
    ddp_bucket_bytes: tuple[int, ...]
    calls: dict[str, float]
    nbytes: dict[str, float | None]
    expected_calls: dict[str, int]
    expected_bytes: dict[str, int]

    def __str__(self) -> str:
        n, total = len(self.ddp_bucket_bytes), sum(self.ddp_bucket_bytes) / 1e6
        lines = [
            f"all-reduces per optimizer step of {self.accumulate} micro-batches "
            f"(DDP: {n} buckets, {total:.2f} MB per backward)"
        ]
        for key in self.calls:
            got = self.nbytes[key]
            mb = "bytes not recorded" if got is None else f"{got / 1e6:.2f} MB"
            lines.append(
                f"  {key:<14} measured {self.calls[key]:g} calls, {mb}; expected "
                f"{self.expected_calls[key]} calls, {self.expected_bytes[key] / 1e6:.2f} MB"
            )
        return "\n".join(lines)


def no_sync_allreduces(
    accumulate: int = 4,
    world_size: int = 2,
    layers: int = 8,
    width: int = 256,
    batch: int = 16,
    steps: int = 2,
    bucket_mb: float | None = 0.25,
    device: str = "cpu",
    timeout_s: float = 120.0,
) -> NoSyncCount:
    """Gradient accumulation with and without ``model.no_sync()``, counted in profiler traces
    (:func:`helpers.timeline.record_ddp` with ``accumulate``): all-reduce calls and bytes per
    optimizer step, next to DDP's own bucket count times the backwards that synchronise."""
    (accumulate,) = count(accumulate=accumulate)
    world_size, shape = _shape(world_size, layers, width, batch)
    layout = _buckets(world_size, shape, bucket_mb, device, timeout_s)["False"]["ddp_buckets"]
    calls, nbytes, want_calls, want_bytes = {}, {}, {}, {}
    for key, skip, syncing in (("no_sync", True, 1), ("every backward", False, accumulate)):
        knobs = {"accumulate": accumulate, "no_sync": skip, "record_shapes": True, **shape}
        with tempfile.TemporaryDirectory(prefix="trainperf_nosync_") as out:  # counted, then dropped
            runs = record_ddp(
                out, world_size, steps, bucket_mb=bucket_mb, device=device, timeout_s=timeout_s, **knobs
            )
            calls[key], nbytes[key] = allreduces_per_step(_read(runs["balanced"][:1])[0])
        want_calls[key], want_bytes[key] = len(layout) * syncing, sum(layout) * syncing
    return NoSyncCount(accumulate, tuple(layout), calls, nbytes, want_calls, want_bytes)


@dataclass(frozen=True)
class BucketViewMemory:
    """Bytes of the distinct storages behind the gradients and DDP's buckets (rank 0), with
    ``gradient_as_bucket_view`` False and True: ``{"False": {...}, "True": {...}}``."""

    counts: dict[str, dict[str, Any]]

    def __str__(self) -> str:
        lines = ["gradients and DDP buckets, distinct storages (rank 0):"]
        for view, c in self.counts.items():
            lines.append(
                f"  gradient_as_bucket_view={view:<5}: {c['grad_storages']} gradient storages "
                f"({c['grad_bytes'] / 1e6:.2f} MB), {c['bucket_storages']} buckets "
                f"({c['bucket_bytes'] / 1e6:.2f} MB), {c['shared']} shared -> "
                f"{c['distinct_bytes'] / 1e6:.2f} MB in all"
            )
        lines.append(
            "This counts storages (a gradient that is a view into a bucket shares its storage), not "
            "the allocator's peak: on CPU torch keeps no allocator statistics to read a peak from."
        )
        return "\n".join(lines)


def bucket_view_memory(
    world_size: int = 2,
    layers: int = 8,
    width: int = 256,
    batch: int = 16,
    bucket_mb: float | None = 0.25,
    device: str = "cpu",
    timeout_s: float = 120.0,
) -> BucketViewMemory:
    """Measured in a rank after a few training steps: with ``gradient_as_bucket_view=True`` the
    gradients are views into DDP's buckets (same ``untyped_storage().data_ptr()``), so the
    gradient memory is held once instead of twice."""
    world_size, shape = _shape(world_size, layers, width, batch)
    return BucketViewMemory(_buckets(world_size, shape, bucket_mb, device, timeout_s))


def _buckets(
    world_size: int, shape: dict[str, Any], bucket_mb: float | None, device: str, timeout_s: float
) -> dict[str, Any]:
    """Rank 0's answer of :func:`._ddp_ranks._buckets_rank`."""
    if bucket_mb is not None:
        positive(bucket_mb=bucket_mb)
    target = "helpers.distributed._ddp_ranks:_buckets_rank"
    return _ranks(target, world_size, device, timeout_s, bucket_mb=bucket_mb, **shape)[0]


def _ranks(target: str, world_size: int, device: str, timeout_s: float, **opts: Any) -> list[dict[str, Any]]:
    """:func:`run_ranks` (which imports DDP's modules once, here, when it forks the ranks)."""
    return run_ranks(target, world_size, device, timeout_s, **opts)

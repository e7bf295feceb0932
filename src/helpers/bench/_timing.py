"""Timing one function, and the older side-by-side summaries (:func:`compare`,
:func:`measure_interleaved`) that :func:`helpers.bench.compare_speed` supersedes for verdicts."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, TypedDict

import torch

from .._validate import count


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """``"auto"`` -> cuda when a GPU is visible, else cpu; ``"cuda"`` without a GPU is an error."""
    if isinstance(device, torch.device):
        device = str(device)
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(
            f"DEVICE={device!r} but no CUDA GPU is visible to torch {torch.__version__}; "
            "set DEVICE = 'auto' or 'cpu', or switch the runtime to a GPU."
        )
    if not (device == "cpu" or device.startswith("cuda")):
        raise ValueError(f"Unknown device {device!r}; use 'auto', 'cpu' or 'cuda'.")
    return torch.device(device)


def synchronize(device: torch.device) -> None:
    """Wait for queued work on ``device`` (a no-op on CPU, where ops run synchronously)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class _Timer:
    """Seconds for ``number`` calls of a function, synchronised: CUDA events on a GPU (unless a
    ``clock`` replaces the timer), else ``clock`` (default ``time.perf_counter``) between two
    ``sync`` calls (default: :func:`synchronize` of the device)."""

    def __init__(
        self,
        dev: torch.device,
        clock: Callable[[], float] | None = None,
        sync: Callable[[], None] | None = None,
    ) -> None:
        self.wait = sync or (lambda: synchronize(dev))
        self.now = clock or time.perf_counter
        self.events = dev.type == "cuda" and clock is None

    def __call__(self, fn: Callable[[], Any], number: int = 1) -> float:
        if not self.events:
            return self.host(fn, number)
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(number):
            fn()
        end.record()
        end.synchronize()
        return begin.elapsed_time(end) / 1e3

    def host(self, fn: Callable[[], Any], number: int = 1) -> float:
        """The host clock's seconds from a synchronised start to a synchronised end."""
        self.wait()
        start = self.now()
        for _ in range(number):
            fn()
        self.wait()
        return self.now() - start


class Metrics(TypedDict):
    """What :meth:`Measurement.metrics` returns (a plain dict)."""

    step_time_ms: float
    peak_mem_mib: float | None


@dataclass
class Measurement:
    """Timed samples of one function, in seconds. Warm-up calls are not in ``samples``."""

    samples: list[float]
    first_call: float  # the very first (cold) call, reported apart from steady state
    device: str
    peak_allocated_bytes: int | None = None  # CUDA only; None where it cannot be measured
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def min(self) -> float:
        return min(self.samples)

    @property
    def max(self) -> float:
        return max(self.samples)

    def percentile(self, q: float) -> float:
        """Percentile ``q`` in [0, 100] (to 0.01), interpolated between samples: the
        ``"inclusive"`` method of :func:`statistics.quantiles` (numpy's default, "linear")."""
        if isinstance(q, bool) or not isinstance(q, (int, float)) or not 0 <= q <= 100:
            raise ValueError(f"q must be a percentile between 0 and 100, got {q!r}")
        share = Fraction(q / 100).limit_denominator(10_000)
        if share == 0 or len(self.samples) == 1:
            return self.min
        if share == 1:
            return self.max
        cuts = statistics.quantiles(self.samples, n=share.denominator, method="inclusive")
        return cuts[share.numerator - 1]

    @property
    def spread(self) -> float:
        """(max - min) / median: how far to trust the median."""
        return (self.max - self.min) / self.median if self.median > 0 else float("nan")

    @property
    def peak_allocated_mib(self) -> float | None:
        """Peak allocated memory in MiB (CUDA), None where it was not measured."""
        return None if self.peak_allocated_bytes is None else self.peak_allocated_bytes / 2**20

    def metrics(self) -> Metrics:
        """The comparison metrics: ``{"step_time_ms": median, "peak_mem_mib": peak or None}``."""
        return {"step_time_ms": self.median * 1e3, "peak_mem_mib": self.peak_allocated_mib}

    def __str__(self) -> str:
        return (
            f"median {self.median * 1e3:.3f} ms (min {self.min * 1e3:.3f}, "
            f"max {self.max * 1e3:.3f}, n={len(self.samples)}; first call "
            f"{self.first_call * 1e3:.3f} ms) on {self.device}"
        )


def measure(
    fn: Callable[[], Any],
    *,
    warmup: int = 3,
    iters: int = 10,
    device: str | torch.device | None = None,
    clock: Callable[[], float] | None = None,
    sync: Callable[[], None] | None = None,
) -> Measurement:
    """Time ``fn()``: one cold call, ``warmup - 1`` more untimed calls, then ``iters`` timed.

    Every sample is bracketed by device synchronization, so it is the time the work took,
    not the time it took to queue it. On CUDA the samples come from CUDA events and the
    result carries the peak allocated memory of the timed calls (the peak is reset after
    warm-up). ``clock`` (seconds, e.g. ``time.perf_counter``) and ``sync`` replace the
    timer and the synchronization: tests and exercises use them to time a fake device
    deterministically; with a ``clock`` no CUDA events are used.
    """
    if not callable(fn):
        raise TypeError(
            f"measure(fn, ...) times a function called with no arguments; got "
            f"{type(fn).__name__} {fn!r}. Wrap the work: measure(lambda: model(x))."
        )
    warmup, iters = count(warmup=warmup, iters=iters)
    dev = resolve_device(device or "auto")
    timer = _Timer(dev, clock, sync)
    first = timer.host(fn)  # the cold call on the host clock: launch and compile included
    for _ in range(warmup - 1):
        fn()
    timer.wait()
    peak = None
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    samples = [timer(fn) for _ in range(iters)]
    if dev.type == "cuda":
        peak = torch.cuda.max_memory_allocated(dev)
    return Measurement(samples, first, str(dev), peak)


# --------------------------------------------------------------------------- compare


@dataclass(frozen=True)
class Comparison:
    """Baseline minus tuned: a positive delta means tuned is faster / smaller.

    The step-time delta is a difference of two medians; it says how far apart they are, not
    whether tuned is faster. Two runs timed one after the other differ by the machine's noise
    too, so that verdict comes only from :func:`helpers.bench.compare_speed` (interleaved pairs
    and an interval). Peak memory is counted, not timed: the same step gives the same peak, so
    any saving is real (``memory_improved``).
    """

    step_time_delta_ms: float
    peak_mem_delta_mib: float | None  # None when either side has no memory figure (CPU)
    memory_improved: bool | None

    def __str__(self) -> str:
        mem = (
            "peak memory not measured on this device"
            if self.peak_mem_delta_mib is None
            else f"peak memory {self.peak_mem_delta_mib:+.2f} MiB saved"
        )
        return (
            f"step time {self.step_time_delta_ms:+.3f} ms saved (medians; whether that is faster "
            f"than the noise needs bench.compare_speed); {mem}"
        )


def _metrics(result: Measurement | Mapping[str, Any], side: str) -> tuple[float, float | None]:
    m: Mapping[str, Any]
    if isinstance(result, Measurement):
        m = result.metrics()
    elif isinstance(result, Mapping):
        m = result
    else:
        raise TypeError(
            f"{side} must be a Measurement or a dict with 'step_time_ms' and "
            f"'peak_mem_mib', got {type(result).__name__}"
        )
    if "step_time_ms" not in m:
        raise KeyError(
            f"{side} has no 'step_time_ms'; give measure()'s result or a dict with "
            "'step_time_ms' and 'peak_mem_mib'"
        )
    time_ms = float(m["step_time_ms"])
    if not time_ms > 0:
        raise ValueError(f"{side} step_time_ms must be positive, got {time_ms!r}")
    mem = m.get("peak_mem_mib")
    return time_ms, None if mem is None else float(mem)


def compare(baseline: Measurement | Mapping[str, Any], tuned: Measurement | Mapping[str, Any]) -> Comparison:
    """Deltas baseline − tuned for step time (median, ms) and peak memory (MiB).

    Accepts two :class:`Measurement` results or two dicts
    (``{"step_time_ms": ..., "peak_mem_mib": ...}``). A peak memory that was not measured
    (``None``, as on CPU) gives ``None`` deltas and flags rather than a zero.
    """
    base_ms, base_mem = _metrics(baseline, "baseline")
    tuned_ms, tuned_mem = _metrics(tuned, "tuned")
    mem_delta = None if base_mem is None or tuned_mem is None else base_mem - tuned_mem
    return Comparison(base_ms - tuned_ms, mem_delta, None if mem_delta is None else mem_delta > 0)


def measure_interleaved(
    fns: Mapping[str, Callable[[], Any]],
    *,
    warmup: int = 2,
    iters: int = 10,
    device: str | torch.device | None = None,
) -> dict[str, Measurement]:
    """Time several variants turn by turn (A, B, A, B, ...) rather than one after the other.

    On a shared or busy machine the load changes over time; timing the variants in turns
    spreads those changes over all of them, so a difference between them is a difference
    between the variants, not between two moments. Each variant is warmed up first.
    Returns ``{name: Measurement}``.
    """
    if not fns:
        raise ValueError("measure_interleaved needs at least one function")
    for name, fn in fns.items():
        if not callable(fn):
            raise TypeError(f"{name!r} is a {type(fn).__name__}, not a function to time")
    warmup, iters = count(warmup=warmup, iters=iters)
    dev = resolve_device(device or "auto")
    samples: dict[str, list[float]] = {name: [] for name in fns}
    first: dict[str, float] = {}
    timer = _Timer(dev)  # host clock between syncs (timer.host), as before
    for name, fn in fns.items():
        first[name] = timer.host(fn)
        for _ in range(warmup - 1):
            fn()
    for _ in range(iters):
        for name, fn in fns.items():
            samples[name].append(timer.host(fn))
    return {
        name: Measurement(samples[name], first[name], str(dev), meta={"interleaved": list(fns)})
        for name in fns
    }


def same_result(baseline: Any, tuned: Any, rtol: float = 1e-5, atol: float = 1e-8) -> bool:
    """True when two results (numbers, tensors, or lists / tuples / dicts of them) agree within
    tolerance. Check this before comparing speed: a faster run that computes something else is
    not an improvement."""
    if isinstance(baseline, Mapping) and isinstance(tuned, Mapping):
        return baseline.keys() == tuned.keys() and all(
            same_result(baseline[k], tuned[k], rtol, atol) for k in baseline
        )
    if isinstance(baseline, (list, tuple)) and isinstance(tuned, (list, tuple)):
        return len(baseline) == len(tuned) and all(
            same_result(a, b, rtol, atol) for a, b in zip(baseline, tuned, strict=True)
        )
    a = torch.as_tensor(baseline, dtype=torch.float64)
    b = torch.as_tensor(tuned, dtype=torch.float64)
    return a.shape == b.shape and bool(torch.allclose(a, b, rtol=rtol, atol=atol))

"""Honest timing: warm-up that is never timed, device synchronisation, medians with spread.

On a CUDA device each call is timed with CUDA events (device time between two points in
the stream); on CPU with ``time.perf_counter`` after the work has finished.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch


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
        """Linear-interpolated percentile, ``q`` in [0, 100]."""
        ordered = sorted(self.samples)
        pos = (len(ordered) - 1) * q / 100
        lo, hi = int(pos), min(int(pos) + 1, len(ordered) - 1)
        return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)

    @property
    def spread(self) -> float:
        """(max - min) / median: how far to trust the median."""
        return (self.max - self.min) / self.median if self.median > 0 else float("nan")

    def __str__(self) -> str:
        return (f"median {self.median * 1e3:.3f} ms (min {self.min * 1e3:.3f}, "
                f"max {self.max * 1e3:.3f}, n={len(self.samples)}; first call "
                f"{self.first_call * 1e3:.3f} ms) on {self.device}")


def measure(
    fn: Callable[[], Any],
    *,
    warmup: int = 3,
    iters: int = 10,
    device: str | torch.device | None = None,
) -> Measurement:
    """Time ``fn()``: one cold call, ``warmup - 1`` more untimed calls, then ``iters`` timed."""
    if iters < 1 or warmup < 1:
        raise ValueError(f"need warmup >= 1 and iters >= 1, got warmup={warmup}, iters={iters}")
    dev = resolve_device(device or "auto")
    synchronize(dev)
    start = time.perf_counter()
    fn()
    synchronize(dev)
    first = time.perf_counter() - start
    for _ in range(warmup - 1):
        fn()
    synchronize(dev)
    samples: list[float] = []
    peak = None
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
        for _ in range(iters):
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            fn()
            end.record()
            end.synchronize()
            samples.append(begin.elapsed_time(end) / 1e3)
        peak = torch.cuda.max_memory_allocated(dev)
    else:
        for _ in range(iters):
            start = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - start)
    return Measurement(samples, first, str(dev), peak)

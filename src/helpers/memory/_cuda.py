"""Allocated, reserved and peak memory on a CUDA GPU, a memory snapshot, and its timeline.

PyTorch's caching allocator hands tensors blocks carved out of larger segments it got from
``cudaMalloc`` and keeps freed blocks for reuse. So ``memory_allocated`` (bytes of live
tensors) is below ``memory_reserved`` (segments held), and the difference is not a leak;
``max_memory_allocated`` is the peak since the last reset. ``torch.cuda.memory.
_record_memory_history`` records every allocation and free; ``_snapshot()`` returns them,
and the pickled snapshot opens in PyTorch's memory viewer (https://pytorch.org/memory_viz).
None of this exists on a CPU: there the functions here say so instead of returning zeros.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .. import i18n
from .._validate import flag as _flag
from ..i18n import text, tr

NOT_ON_CPU = (
    "not available on CPU: allocated / reserved / peak are statistics of PyTorch's CUDA "
    "caching allocator, and there is no CUDA device here. On a CPU, measure the storage "
    "saved for backward with memory.saved_tensor_bytes(...) or a whole step by category "
    "with memory.track(..., fake=True)."
)


@dataclass
class CudaMemory:
    """CUDA memory around one call of a function (bytes), or why it could not be measured."""

    available: bool
    reason: str = ""
    allocated_before: int | None = None
    allocated_after: int | None = None
    reserved_after: int | None = None
    peak: int | None = None  # max_memory_allocated during the call (the peak was reset first)
    snapshot_path: str | None = None
    timeline: list[tuple[float, int]] = field(default_factory=list)  # (ms since start, allocated)

    def __str__(self) -> str:
        before, after, reserved = self.allocated_before, self.allocated_after, self.reserved_after
        peak = self.peak
        if not self.available or before is None or after is None or peak is None or reserved is None:
            return f"CUDA memory: {self.reason}"  # measured: every number is set
        mib = 2**20
        text = (
            f"CUDA memory: allocated {before / mib:,.1f} MiB before, "
            f"{after / mib:,.1f} MiB after; peak {peak / mib:,.1f} MiB; "
            f"reserved {reserved / mib:,.1f} MiB "
            f"({(reserved - after) / mib:,.1f} MiB cached, not leaked)"
        )
        if self.snapshot_path:
            text += f"\nsnapshot: {self.snapshot_path} (open it at https://pytorch.org/memory_viz)"
        return text

    def plot(self, ax: Any = None, title: str = "") -> Any:
        """Allocated memory over the call, from the recorded history."""
        if not self.available:
            raise RuntimeError(f"no timeline to plot: {self.reason}")
        return plot_timeline(self.timeline, ax=ax, title=title, peak=self.peak)


def timeline_from_snapshot(
    snapshot: dict[str, Any], device: int = 0, start_bytes: int = 0
) -> list[tuple[float, int]]:
    """(time in ms from the first event, allocated bytes) after every alloc and free of
    ``snapshot["device_traces"][device]``, starting from ``start_bytes`` already allocated.

    Blocks count from ``alloc`` to ``free_completed`` (a free is "requested" first and
    completes once the streams using the block are done). Without timestamps in the trace
    (older torch), the event index stands in for time.
    """
    traces = snapshot.get("device_traces") or []
    if device >= len(traces):
        return []
    events = [e for e in traces[device] if e.get("action") in ("alloc", "free_completed")]
    if not events:
        return []
    t0 = events[0].get("time_us")
    allocated, points = start_bytes, []
    for i, event in enumerate(events):
        allocated += event["size"] if event["action"] == "alloc" else -event["size"]
        t = (event["time_us"] - t0) / 1e3 if t0 is not None and "time_us" in event else float(i)
        points.append((t, allocated))
    return points


def plot_timeline(
    points: Sequence[tuple[float, int]], ax: Any = None, title: str = "", peak: int | None = None
) -> Any:
    """Step plot of allocated MiB over time."""
    import matplotlib.pyplot as plt

    i18n.for_plot()
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.2))
    if points:
        xs = [t for t, _ in points]
        ys = [b for _, b in points]
        ax.step(xs, [y / 2**20 for y in ys], where="post", lw=1.5, label=tr("allocated"))
    if peak is not None:
        ax.axhline(
            peak / 2**20, color="tab:red", ls=":", lw=1, label=tr("peak {mib:,.0f} MiB", mib=peak / 2**20)
        )
    ax.set_xlabel(tr("time (ms)"))
    ax.set_ylabel(tr("allocated (MiB)"))
    ax.set_title(text(title) or tr("CUDA memory over one step"))
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    return ax


def cuda_memory(
    fn: Callable[[], Any],
    *,
    device: str | torch.device = "cuda",
    snapshot: str | Path | None = "memory_snapshot.pickle",
    history: bool = True,
    max_entries: int = 200_000,
) -> CudaMemory:
    """Measure ``fn()`` on a CUDA GPU: allocated before and after, reserved, and the peak.

    The peak statistics are reset first, so ``peak`` is this call's. With ``history`` the
    allocator records every alloc and free during the call: the result's ``timeline`` is
    allocated memory over time, and the snapshot is pickled to ``snapshot`` (None: not
    saved) for https://pytorch.org/memory_viz. On a CPU it returns ``available=False`` and
    a reason — never zeros.
    """
    _flag(history=history)
    if not callable(fn):
        raise TypeError(f"cuda_memory needs a function to run, got {type(fn).__name__}")
    if not torch.cuda.is_available():
        return CudaMemory(False, NOT_ON_CPU)
    dev = torch.device(device)
    if dev.type != "cuda":
        return CudaMemory(False, f"device {device!r} is not a CUDA device; " + NOT_ON_CPU)
    torch.cuda.synchronize(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    before = torch.cuda.memory_allocated(dev)
    recording = False
    if history:
        # Python frames only: C++ stack unwinding per allocation would slow the step down
        torch.cuda.memory._record_memory_history(max_entries=max_entries, stacks="python")
        recording = True
    try:
        fn()
        torch.cuda.synchronize(dev)
        snap = torch.cuda.memory._snapshot() if recording else None
    finally:
        if recording:
            torch.cuda.memory._record_memory_history(enabled=None)
    result = CudaMemory(
        True,
        "",
        before,
        torch.cuda.memory_allocated(dev),
        torch.cuda.memory_reserved(dev),
        torch.cuda.max_memory_allocated(dev),
    )
    if snap is not None:
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        result.timeline = timeline_from_snapshot(snap, index, before)
        if snapshot is not None:
            path = Path(snapshot)
            with open(path, "wb") as out:
                pickle.dump(snap, out)
            result.snapshot_path = str(path)
    return result

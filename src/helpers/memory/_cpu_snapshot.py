"""A memory snapshot of one training step on the CPU, for PyTorch's memory viewer.

``torch.cuda.memory._record_memory_history`` records the CUDA caching allocator only; there is
no CPU recorder. The profiler does see every CPU allocation and free (``profile_memory=True``),
and PyTorch converts such a profile into the same snapshot format
(``torch.cuda._memory_viz._profile_to_snapshot``, the function behind its ``profile_plot``), with
each allocation's Python stack and its category (parameter, gradient, activation, ...). So a
CPU learner can open a real step in the viewer: the file is a CPU profile converted, not an
allocator record, and :class:`CpuSnapshot` says so.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .. import models
from .._validate import count as _count
from ..i18n import tr


def _category(name: str) -> str:
    """A category of PyTorch's memory profiler (torch's own lower-case name) as the learner
    reads it; a name without a translation here is shown as torch writes it."""
    shown = {
        "before the step": tr("before the step"),
        "activation": tr("activation"),
        "input": tr("input"),
        "temporary": tr("temporary"),
        "gradient": tr("gradient"),
        "parameter": tr("parameter"),
        "unknown": tr("unknown"),
    }
    return shown.get(name, name)


@dataclass
class CpuSnapshot:
    """What :func:`cpu_snapshot` recorded, and where it wrote it."""

    model: str
    batch: int
    events: int  # allocations and frees in the step
    start_bytes: int  # alive when the step began: parameters, optimizer state
    peak_bytes: int
    at_peak: dict[str, int] = field(default_factory=dict)  # bytes by category at the peak
    pickle_path: str | None = None
    html_path: str | None = None
    snapshot: dict[str, Any] = field(default_factory=dict, repr=False)

    def format(self) -> str:
        parts = ", ".join(
            f"{_category(k)} {v / 2**20:.2f}" for k, v in sorted(self.at_peak.items(), key=lambda kv: -kv[1])
        )
        lines = [
            tr(
                "{model}, batch {batch}, one training step on the CPU: {events} allocations and frees; "
                "alive before the step {start:.2f} MiB, peak {peak:.2f} MiB ({parts} MiB)",
                model=self.model,
                batch=self.batch,
                events=self.events,
                start=self.start_bytes / 2**20,
                peak=self.peak_bytes / 2**20,
                parts=parts,
            ),
            tr("a CPU profile converted to the snapshot format, not a CUDA allocator record"),
        ]
        if self.pickle_path:
            lines.append(
                tr("snapshot: {path} (open it at https://pytorch.org/memory_viz)", path=self.pickle_path)
            )
        if self.html_path:
            lines.append(
                tr(
                    "viewer page: {path} (open it in a browser; it loads the viewer online)",
                    path=self.html_path,
                )
            )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()


def _replay(trace: list[dict[str, Any]], start_bytes: int) -> tuple[int, dict[str, int]]:
    """The peak of the trace and the bytes by category at that moment. A free of an address the
    trace never allocated frees a tensor that existed before the step (an in-place update, such
    as the optimizer's, is a free of the old version and an allocation of the new one)."""
    live: dict[int, tuple[int, str]] = {}
    before = total = peak = start_bytes
    at_peak: dict[str, int] = {"before the step": before}
    for event in trace:
        if event["action"] == "alloc":
            live[event["addr"]] = (event["size"], event.get("category") or "unknown")
            total += event["size"]
            if total > peak:
                peak = total
                at_peak = {"before the step": before}
                for size, category in live.values():
                    at_peak[category] = at_peak.get(category, 0) + size
        elif event["action"] == "free_completed":
            if event["addr"] in live:
                total -= live.pop(event["addr"])[0]
            else:
                before -= event["size"]
                total -= event["size"]
    return peak, {k: v for k, v in at_peak.items() if v}


def cpu_snapshot(
    config: str | models.GPTConfig = "tiny",
    batch: int = 8,
    path: str | Path | None = "memory_snapshot_cpu.pickle",
    html: str | Path | None = "memory_viz_cpu.html",
) -> CpuSnapshot:
    """Profile one AdamW training step of a course model on the CPU with ``profile_memory=True``
    (after one untracked step, so the optimizer state exists), convert it with PyTorch's own
    converter to a memory snapshot, and write it: ``path`` (a pickle for
    https://pytorch.org/memory_viz) and ``html`` (PyTorch's viewer page for this snapshot,
    ``torch.cuda._memory_viz.trace_plot``). None skips a file."""
    try:
        from torch.cuda._memory_viz import _profile_to_snapshot, trace_plot
    except ImportError as err:  # a private module: say what is missing rather than fail deep inside
        raise RuntimeError(
            f"this torch ({torch.__version__}) has no torch.cuda._memory_viz profile converter: "
            "use a torch of 2.1 or later for a CPU snapshot"
        ) from err
    (batch,) = _count(batch=batch)
    cfg = models.get_config(config)
    torch.manual_seed(0)
    model = models.build_model(cfg, torch.device("cpu"))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    idx, targets = models.make_batch(cfg, batch)

    def step() -> None:
        model(idx, targets).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()  # the optimizer state now exists, as in every step after the first
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        profile_memory=True,
        record_shapes=True,
        with_stack=True,
    ) as prof:
        step()
    snap = _profile_to_snapshot(prof)
    trace = snap["device_traces"][-1]  # the CPU is the converter's last device
    alive_at_end = sum(
        b["size"] for seg in snap["segments"] for b in seg["blocks"] if b["state"] == "active_allocated"
    )
    made = sum(e["size"] for e in trace if e["action"] == "alloc")
    freed = sum(e["size"] for e in trace if e["action"] == "free_completed")
    start = max(0, alive_at_end - made + freed)
    peak, at_peak = _replay(trace, start)
    result = CpuSnapshot(cfg.name, batch, len(trace), start, peak, at_peak, snapshot=snap)
    if path is not None:
        Path(path).write_bytes(pickle.dumps(snap))
        result.pickle_path = str(path)
    if html is not None:
        Path(html).write_text(trace_plot(snap), encoding="utf-8")
        result.html_path = str(html)
    return result

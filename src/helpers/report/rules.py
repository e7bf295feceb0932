"""The capstone's rules, as plain functions of plain numbers (what the exercises ask for).

* :func:`mfu_hfu` — MFU and HFU of a measured row (chapter 2's definitions);
* :func:`compare` — baseline minus tuned, with "improved" only beyond the baseline's spread;
* :func:`data_stall` — data time above 20% of compute time is a bottleneck;
* :func:`bottleneck_class` — which part of the step to work on next, from the trace's phases;
* :func:`decide` — keep or revert a change (loss first, then memory, then speed).

Every function takes numbers or dicts of numbers, so recorded measurements can be checked
against them without running anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

STALL_THRESHOLD = 0.2  # data time above 20% of compute time is a bottleneck
LOSS_TOLERANCE = 0.02  # a change may move the loss after N steps by at most 2% of the baseline's

#: What to try next for each bottleneck class (the usual first fix for each).
NEXT_ACTIONS = {
    "data-bound": "more DataLoader workers, pinned memory, prefetching or caching samples",
    "compute-bound": "mixed precision (bf16), torch.compile / fused kernels, fewer syncs",
    "optimizer-bound": "a fused optimizer, fewer parameters to update (LoRA / adapters)",
    "host-bound": "remove per-step syncs (.item()), fewer and larger kernels (torch.compile), "
                  "CUDA graphs",
}
PHASES = ("data", "forward", "backward", "optimizer", "other")


def memory_mb(row: Mapping[str, Any]) -> float | None:
    """A row's memory figure: CUDA peak allocated when measured, else bytes saved for backward."""
    peak = row.get("peak_mem_mb")
    return peak if peak is not None else row.get("saved_mb")


def mfu_hfu(row: Mapping[str, Any], peak_flops_per_device: float) -> tuple[float, float]:
    """(MFU, HFU) of a row: model and executed FLOPs per step over
    (median step time · devices · peak)."""
    seconds = row["step_time_ms"] / 1e3
    denominator = seconds * row.get("num_devices", 1) * peak_flops_per_device
    if not denominator > 0:
        raise ValueError("step time, devices and peak must be positive")
    return row["model_flops"] / denominator, row["executed_flops"] / denominator


def compare(baseline: Mapping[str, Any], tuned: Mapping[str, Any]) -> dict[str, Any]:
    """Baseline minus tuned (positive = tuned is faster / smaller).

    ``time_improved`` only when the tuned median is below the baseline's *fastest* window:
    better than anything the baseline did, not just a smaller median inside its spread
    (one slow window of the tuned run, a busy moment, does not veto it). Memory is
    deterministic: any saving counts. A memory figure that is missing on
    either side gives ``None`` delta and flag, never a zero.
    """
    time_delta = baseline["step_time_ms"] - tuned["step_time_ms"]
    base_mem, tuned_mem = memory_mb(baseline), memory_mb(tuned)
    mem_delta = None if base_mem is None or tuned_mem is None else base_mem - tuned_mem
    return {"step_time_delta_ms": time_delta,
            "memory_delta_mb": mem_delta,
            "time_improved": tuned["step_time_ms"] < baseline["step_time_min_ms"],
            "memory_improved": None if mem_delta is None else mem_delta > 0}


def data_stall(data_ms: list[float], compute_ms: list[float],
               threshold: float = STALL_THRESHOLD) -> tuple[float, bool]:
    """(total data time / total compute time, stalled) over the same steps; stalled when the
    ratio is above ``threshold`` (strictly)."""
    if len(data_ms) != len(compute_ms) or not data_ms:
        raise ValueError("give one data time and one compute time per step (at least one step)")
    compute = sum(compute_ms)
    if not compute > 0:
        raise ValueError("total compute time must be positive")
    ratio = sum(data_ms) / compute
    return ratio, ratio > threshold


def bottleneck_class(phases: Mapping[str, float], threshold: float = STALL_THRESHOLD) -> str:
    """The bottleneck of a step from its phases in ms (data, forward, backward, optimizer,
    other = the rest of the step: host work, syncs, launch gaps).

    Data first (a common rule: data above ``threshold`` × compute, compute = forward +
    backward + optimizer); otherwise the largest of forward + backward ("compute-bound"),
    optimizer ("optimizer-bound") and other ("host-bound").
    """
    missing = [p for p in PHASES if p not in phases]
    if missing:
        raise KeyError(f"phases lack {missing}; give {', '.join(PHASES)} in ms")
    compute = phases["forward"] + phases["backward"] + phases["optimizer"]
    if phases["data"] > threshold * compute:
        return "data-bound"
    parts = {"compute-bound": phases["forward"] + phases["backward"],
             "optimizer-bound": phases["optimizer"], "host-bound": phases["other"]}
    return max(parts, key=parts.get)


def decide(loss_change: float, memory_before_mb: float | None, memory_after_mb: float | None,
           faster: bool, loss_tolerance: float, memory_budget_mb: float | None = None) -> str:
    """"keep" or "revert" a change, in this order:

    1. the loss after N steps moved more than ``loss_tolerance`` from the baseline's -> revert;
    2. with a memory budget: the change does not fit -> revert; it makes a run fit that did
       not fit before -> keep (even if slower);
    3. otherwise keep only a change that is faster beyond noise (``faster``).
    """
    if abs(loss_change) > loss_tolerance:
        return "revert"
    if memory_budget_mb is not None and memory_after_mb is not None:
        if memory_after_mb > memory_budget_mb:
            return "revert"
        if memory_before_mb is not None and memory_before_mb > memory_budget_mb:
            return "keep"
    return "keep" if faster else "revert"

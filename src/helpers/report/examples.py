"""Example tuning reports shaped like GPU runs — **example numbers, not measurements**.

No GPU recording of the capstone ships yet (``scripts/gpu_check.sh`` makes one where a GPU is
lent). Chapter 9's exercises read reports from CPUs *and* GPUs, so these two hand-written
reports stand in for the GPU side and say so: every row has ``"example": True``. They hold only
the fields the judgement exercises read (name, tried_on, step time, phases, verdict, loss and an
example loss curve, memory, and the decision :func:`helpers.report.kept_changes` makes, which the
tests check). The
phases follow how :func:`helpers.report.step_phases` reads a GPU trace: kernel
busy time per phase, data as GPU idle time while the loader runs, other as the rest.
"""

from __future__ import annotations

import math
from typing import Any

STEPS = 60  # steps in each example loss curve


def _curve(end: float, first: float, offset: float) -> list[float]:
    """An example loss curve: decays from ``first`` towards ``end`` over :data:`STEPS` steps, plus
    ``offset`` from the fifth step on (a change that moved training moves the curve, not one
    point)."""
    out = []
    for i in range(STEPS):
        shape = end + (first - end) * math.exp(-i / 8)
        out.append(round(shape + (offset if i >= 4 else 0.0), 5))
    return out


def _row(
    name: str,
    tried_on: str | None,
    step: float,
    data: float,
    fwd: float,
    bwd: float,
    opt: float,
    verdict: str | None,
    loss: float,
    peak_mb: float,
    decision: str,
    base_loss: float,
) -> dict[str, Any]:
    phases = {"data": data, "forward": fwd, "backward": bwd, "optimizer": opt}
    phases["other"] = round(step - sum(phases.values()), 6)
    row = {
        "name": name,
        "example": True,
        "device": "cuda",
        "step_time_ms": step,
        "phases_ms": phases,
        "loss": loss,
        "loss_curve": _curve(base_loss, 5.55, loss - base_loss),
        "peak_mem_mb": peak_mb,
        "saved_mb": None,
        "decision": decision,
    }
    if tried_on is not None:
        row.update(tried_on=tried_on, speed={"verdict": verdict})
    return row


def example_gpu_reports() -> dict[str, dict[str, Any]]:
    """name -> {"rows": [...], "memory_budget_mb": ...}: two example GPU tuning reports.

    * ``gpu-large-example`` — a GPT-2-small-sized model with a slow loader and a 40 GB budget
      that the baseline exceeds: every change that does not fit is reverted, checkpointing
      makes the run fit (and is kept though slower), compile moves the loss;
    * ``gpu-small-example`` — a small model at a small batch, where the host (Python, launches,
      a per-step sync) is the bottleneck.
    """
    b = 2.400  # the baseline loss after N steps
    large = [  # a 40 GB budget the baseline does not meet: only a change that fits can stay
        _row("baseline", None, 420.0, 160.0, 70.0, 140.0, 12.0, None, 2.400, 52_000.0, "baseline", b),
        _row("no_sync", "baseline", 401.0, 160.0, 70.0, 140.0, 12.0, "faster", 2.401, 52_000.0, "revert", b),
        _row("workers", "baseline", 270.0, 5.0, 70.0, 140.0, 12.0, "faster", 2.399, 52_100.0, "revert", b),
        _row("bf16", "baseline", 300.0, 160.0, 22.0, 45.0, 12.0, "faster", 2.412, 44_000.0, "revert", b),
        _row(
            "fused", "baseline", 396.0, 160.0, 70.0, 140.0, 5.5, "within noise", 2.400, 52_000.0, "revert", b
        ),
        _row("checkpoint", "baseline", 455.0, 160.0, 70.0, 175.0, 12.0, "slower", 2.401, 30_000.0, "keep", b),
        _row("compile", "checkpoint", 330.0, 160.0, 40.0, 80.0, 10.0, "faster", 2.600, 28_000.0, "revert", b),
    ]
    b = 3.100
    small = [
        _row("baseline", None, 24.0, 0.6, 3.0, 5.0, 1.2, None, 3.100, 900.0, "baseline", b),
        _row("no_sync", "baseline", 21.5, 0.6, 3.0, 5.0, 1.2, "faster", 3.101, 900.0, "keep", b),
        _row("workers", "no_sync", 21.8, 0.3, 3.0, 5.0, 1.2, "within noise", 3.102, 905.0, "revert", b),
        _row("fused", "no_sync", 9.5, 0.6, 3.0, 5.0, 0.5, "faster", 3.099, 900.0, "keep", b),
        _row("compile", "fused", 8.0, 0.6, 2.0, 3.5, 0.4, "faster", 3.098, 700.0, "keep", b),
    ]
    return {
        "gpu-large-example": {"rows": large, "memory_budget_mb": 40_000.0},
        "gpu-small-example": {"rows": small, "memory_budget_mb": None},
    }

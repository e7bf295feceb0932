"""Chapter 6 — activation checkpointing: keep less for the backward pass, recompute it there.

A *plan* says which blocks of a model are checkpointed with ``torch.utils.checkpoint``
(non-reentrant): the checkpointed part keeps only its inputs in the forward pass and runs
its forward again in the backward pass.

* ``"none"`` — nothing recomputed;
* ``"every"`` — every block (each keeps only its input);
* ``"every:k"`` — every k-th block: blocks 0, k, 2k, … (``"every:1"`` is ``"every"``);
* ``"selective"`` — only the attention core of every block (scores, softmax, weighted sum):
  Korthikanti et al. 2022's selective recomputation. With a fused attention kernel the core
  keeps almost nothing anyway, so it saves little; with a spelled-out one it drops the
  s × s score matrices.

Recompute costs FLOPs that are executed but are not model progress: they raise HFU, not
MFU (chapter 2). Correctness: the recomputed forward must draw the same dropout masks, so
the checkpoint restores the random-number generator state (``preserve_rng_state=True``).
"""

from ._plans import (
    MENU,
    GradientCheck,
    PlanResult,
    applied,
    apply,
    attention_share_formula,
    block_forward_flops,
    check_gradients,
    choose_plan,
    compare_plans,
    current_plan,
    estimate,
    format_plans,
    korthikanti_attention_share,
    main,
    measured_attention_share,
    plan_modes,
    plans_within,
    predicted_saved_bytes,
    recompute_flops,
    recompute_flops_per_block,
    remove,
    utilization,
)
from ._practice import MATMULS, Measured, granularity, memory_budget, selective_policy

__all__ = [
    "MATMULS",
    "Measured",
    "granularity",
    "memory_budget",
    "selective_policy",
    "MENU",
    "GradientCheck",
    "PlanResult",
    "applied",
    "apply",
    "attention_share_formula",
    "block_forward_flops",
    "check_gradients",
    "choose_plan",
    "compare_plans",
    "current_plan",
    "estimate",
    "format_plans",
    "korthikanti_attention_share",
    "main",
    "measured_attention_share",
    "plan_modes",
    "plans_within",
    "predicted_saved_bytes",
    "recompute_flops",
    "recompute_flops_per_block",
    "remove",
    "utilization",
]

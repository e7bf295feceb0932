"""Checkpointing as it is done in practice, measured on the course model.

* :func:`granularity` — one checkpoint per block against one per sub-layer (attention, MLP):
  checkpointing too finely keeps more inputs for the same recomputation;
* :func:`selective_policy` — PyTorch's own selective activation checkpoint API
  (``torch.utils.checkpoint.create_selective_checkpoint_contexts``): an op policy decides, op by
  op, what a checkpointed block saves and what it recomputes;
* :func:`memory_budget` — ``torch.compile``'s activation memory budget
  (``torch._functorch.config.activation_memory_budget``): the min-cut partitioner recomputes
  until the saved bytes fit the given share (traced with AOTAutograd, no code generated).

Every figure is measured: what a step keeps and its peak with ``MemTracker`` on fake tensors
(chapter 5; it sees what a selective policy stores inside the checkpoint too, which the
``saved_tensors_hooks`` of chapter 5 cannot), executed FLOPs with ``FlopCounterMode`` (chapter 2:
matrix multiplies only, so recomputed element-wise work is not in them).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from .. import memory, models
from .._validate import count as _count
from ._plans import apply


@dataclass(frozen=True)
class Measured:
    """What one way of checkpointing keeps and costs, on one model and batch."""

    name: str
    saved_bytes: int  # activations alive after the forward pass (MemTracker)
    peak_bytes: int  # the step's peak (MemTracker): recomputation holds a block's activations again
    executed_flops: int  # FlopCounterMode: matrix multiplies only, recomputed ones included

    def row(self, base: Measured) -> str:
        return (
            f"{self.name:<22} kept after forward {self.saved_bytes / 2**20:7.3f} MiB "
            f"({self.saved_bytes / base.saved_bytes:4.0%}), step peak {self.peak_bytes / 2**20:7.3f} MiB,"
            " "
            f"executed {self.executed_flops / base.executed_flops:5.3f}x the FLOPs of none"
        )


def _measure(name: str, patch, cfg: models.GPTConfig, batch: int, seq_len: int) -> Measured:
    """``patch(model) -> model`` sets the checkpointing; MemTracker measures a fake-tensor step
    (every tensor a checkpoint keeps, its own storage included), FlopCounterMode a real one."""
    from .. import mfu

    tracked = memory.track(lambda: patch(models.TinyGPT(cfg)), "adamw", batch_size=batch, seq_len=seq_len)
    step = tracked.steps[-1]
    model = patch(models.build_model(cfg))
    flops = mfu.count_flops(models.make_train_step(model, models.make_batch(cfg, batch, seq_len)))
    return Measured(name, step.after_forward["activations"], step.peak["total"], flops)


def _with(make):
    """A patch that gives every block of a model ``make(block)`` as its forward."""

    def patch(model: models.TinyGPT) -> models.TinyGPT:
        for block in model.blocks:
            block.forward = make(block)
        return model

    return patch


def _sublayer_forward(block: torch.nn.Module):
    """``block.forward`` with the attention path and the MLP path each checkpointed on its own."""

    def forward(x: torch.Tensor) -> torch.Tensor:
        x = x + checkpoint(block.attention_path, x, use_reentrant=False)
        return x + checkpoint(block.mlp_path, x, use_reentrant=False)

    return forward


def granularity(config: Any = "tiny", batch: int = 4, seq_len: int | None = None) -> list[Measured]:
    """No checkpoint, one per block (the course's ``"every"``) and one per sub-layer (the
    attention path and the MLP path of each block apart)."""
    cfg = models.get_config(config)
    (batch,) = _count(batch=batch)
    seq_len = seq_len or cfg.seq_len
    return [
        _measure("none", lambda m: apply(m, "none"), cfg, batch, seq_len),
        _measure("every block", lambda m: apply(m, "every"), cfg, batch, seq_len),
        _measure("every sub-layer", _with(_sublayer_forward), cfg, batch, seq_len),
    ]


def _sdpa_kernels() -> tuple[str, ...]:
    """Every fused attention kernel this torch has, forward only (flash, flash for CPU,
    memory-efficient, cuDNN, the overrideable one for other backends): which one a GPU dispatches
    to depends on the device, dtype and shapes (an H100 may pick cuDNN), and a policy that misses
    one recomputes attention without saying so."""
    names = [n for n in dir(torch.ops.aten) if n.startswith("_scaled_dot_product") and "backward" not in n]
    return tuple(sorted(n for n in names if not n.startswith("_scaled_dot_product_attention_math")))


#: The ops the default policy saves: the matrix multiplies (recomputing them costs the most),
#: fused attention in every backend included.
MATMULS = ("mm", "addmm", "bmm", *_sdpa_kernels())


def _policy(save: Sequence[str]):
    from torch.utils.checkpoint import CheckpointPolicy

    names = set(save)

    def policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> Any:
        name = getattr(op, "overloadpacket", op).__name__
        return CheckpointPolicy.MUST_SAVE if name in names else CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def _sac_forward(save: Sequence[str]):
    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    context = functools.partial(create_selective_checkpoint_contexts, _policy(save))

    def make(block: torch.nn.Module):
        cls_forward = type(block).forward

        def forward(x: torch.Tensor) -> torch.Tensor:
            return checkpoint(cls_forward, block, x, use_reentrant=False, context_fn=context)

        return forward

    return make


def selective_policy(
    config: Any = "tiny", batch: int = 4, seq_len: int | None = None, save: Sequence[str] = MATMULS
) -> list[Measured]:
    """The course's plans ``"none"``, ``"selective"`` and ``"every"`` beside PyTorch's selective
    activation checkpoint API on every block, with a policy that saves the outputs of the ops
    named in ``save`` (default: the matrix multiplies and attention) and recomputes the rest."""
    cfg = models.get_config(config)
    (batch,) = _count(batch=batch)
    seq_len = seq_len or cfg.seq_len
    rows = [
        _measure(
            plan if plan != "every" else "every block", lambda m, p=plan: apply(m, p), cfg, batch, seq_len
        )
        for plan in ("none", "selective", "every")
    ]
    rows.append(_measure("policy: save matmuls", _with(_sac_forward(save)), cfg, batch, seq_len))
    return rows


def memory_budget(
    config: Any = "tiny", batch: int = 4, budgets: Sequence[float] = (1.0, 0.5, 0.2, 0.0)
) -> dict[float, int]:
    """Bytes a compiled training step keeps for the backward pass under each
    ``torch._functorch.config.activation_memory_budget`` (1.0: the partitioner's own choice;
    0.0: recompute all it can), traced with AOTAutograd's min-cut partitioner."""
    import torch._functorch.config as functorch_config

    from ..compiling import whole_step_saved

    out = {}
    for budget in budgets:
        if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not 0 <= budget <= 1:
            raise ValueError(f"a budget is a share between 0 and 1, got {budget!r}")
        with functorch_config.patch(activation_memory_budget=float(budget)):
            out[float(budget)] = whole_step_saved(config, batch)["min_cut"]
    return out

"""FLOPs counted by torch's FlopCounterMode, with the formulas torch lacks on CPU."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils import flop_counter

from .. import models
from .._validate import count as _count

# --------------------------------------------------------------------------- formulas


# --------------------------------------------------------------------------- counting FLOPs


def _shape(t: Any) -> tuple[int, ...]:
    return tuple(t.shape) if hasattr(t, "shape") else tuple(t)


def _sdpa_forward_flops(
    query: Any, key: Any, value: Any, *args: Any, out_val: Any = None, **kwargs: Any
) -> int:
    # (b, heads, s_q, d) @ (b, heads, d, s_k), then (b, heads, s_q, s_k) @ (b, heads, s_k, d_v)
    b, h, s_q, d_qk = _shape(query)
    s_k, d_v = _shape(key)[-2], _shape(value)[-1]
    return 2 * b * h * s_q * s_k * d_qk + 2 * b * h * s_q * s_k * d_v


def _sdpa_backward_flops(
    grad_out: Any, query: Any, key: Any, value: Any, *args: Any, out_val: Any = None, **kwargs: Any
) -> int:
    # a fused backward recomputes the scores (1 GEMM), then 4 GEMMs for dP, dV, dQ, dK —
    # the same five products torch counts for its CUDA flash / efficient kernels
    b, h, s_q, d_qk = _shape(query)
    s_k, d_v = _shape(key)[-2], _shape(value)[-1]
    return 2 * b * h * s_q * s_k * (2 * d_qk + 2 * d_v + d_qk)


# Raw formulas get the tensors themselves: torch versions that wrap custom formulas in a
# tensor-to-shape adapter skip it for these, and versions that never wrap pass tensors too.
_sdpa_forward_flops._get_raw = True  # type: ignore[attr-defined]
_sdpa_backward_flops._get_raw = True  # type: ignore[attr-defined]


# CPU attention kernels that some torch versions (2.13 among them) leave out of the
# FlopCounterMode registry, so their FLOPs read as 0. Missing ones are added per counter.
_MISSING_OPS: dict[str, Callable[..., int]] = {
    "_scaled_dot_product_flash_attention_for_cpu": _sdpa_forward_flops,
    "_scaled_dot_product_flash_attention_for_cpu_backward": _sdpa_backward_flops,
    "_scaled_dot_product_fused_attention_overrideable": _sdpa_forward_flops,
    "_scaled_dot_product_fused_attention_overrideable_backward": _sdpa_backward_flops,
}


def _extra_formulas() -> dict[Any, Callable[..., int]]:
    registry = getattr(flop_counter, "flop_registry", {})
    extra: dict[Any, Callable[..., int]] = {}
    for name, formula in _MISSING_OPS.items():
        packet = getattr(torch.ops.aten, name, None)
        if packet is not None and packet not in registry:
            extra[packet] = formula
    return extra


def flop_counter_mode() -> flop_counter.FlopCounterMode:
    """A silent ``FlopCounterMode`` that also counts the CPU attention kernels."""
    return flop_counter.FlopCounterMode(display=False, custom_mapping=_extra_formulas())


def flop_breakdown(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, int]:
    """FLOPs executed by ``fn(*args, **kwargs)`` per operator (``"mm"``, ``"bmm"``, ...).

    Counted with :class:`torch.utils.flop_counter.FlopCounterMode`, which counts matrix
    products (mm, addmm, bmm, convolutions, attention) from shapes and nothing else:
    element-wise ops, norms, softmax and the optimizer count as 0. A backward pass run
    inside ``fn`` is counted too.
    """
    with flop_counter_mode() as counter:
        fn(*args, **kwargs)
    per_op = counter.get_flop_counts().get("Global", {})
    return {str(getattr(op, "__name__", op)).split(".")[0]: int(v) for op, v in per_op.items() if v}


def count_flops(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
    """Total FLOPs executed by ``fn(*args, **kwargs)`` (forward and, if ``fn`` calls it, backward)."""
    return sum(flop_breakdown(fn, *args, **kwargs).values())


def counted_flops_formula(config: models.GPTConfig, batch_size: int, seq_len: int | None = None) -> int:
    """What :func:`count_flops` reports for one training step of the course model, from shapes.

    Every matmul weight (in × out, the tied output layer included) costs 2 FLOPs per token
    forward and 4 backward; attention costs 4·b·s²·d per layer forward (QKᵀ and PV, causal
    mask not discounted) and 10·b·s²·d backward (the fused kernel recomputes QKᵀ, then four
    products). Embedding lookups, norms, biases, softmax and the optimizer count 0.
    """
    seq_len = config.seq_len if seq_len is None else seq_len
    batch_size, seq_len = _count(batch_size=batch_size, seq_len=seq_len)
    tokens = batch_size * seq_len
    weights = sum(i * o for i, o in config.linear_shapes())
    attention = 14 * config.n_layers * batch_size * seq_len**2 * config.d_model
    return 6 * weights * tokens + attention

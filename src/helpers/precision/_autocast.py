"""Autocast in one place: the settings the chapter compares (:data:`AUTOCAST`), the context that
applies one (:func:`autocast_context`), and the op lists CUDA autocast registers
(:func:`cuda_autocast_lists`, :func:`cuda_autocast_policy`).

A leaf of ``helpers.precision``: the training measurements (``_training``) and the practice
helpers (``_practice``) both use it, and it imports neither.
"""

from __future__ import annotations

import contextlib
import re
from functools import lru_cache
from pathlib import Path

import torch

from .._validate import unknown

AUTOCAST = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def autocast_context(device: torch.device, key: str | None) -> contextlib.AbstractContextManager:
    """``torch.autocast`` for ``key`` ("fp32": no autocast, "bf16", "fp16"; None is "fp32") on
    ``device``'s type."""
    if (key or "fp32") not in AUTOCAST:
        raise unknown("autocast", key, AUTOCAST)
    dtype = AUTOCAST[key or "fp32"]
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)


#: A fallback when torch's own header is not installed: ops of the course model in the CUDA
#: autocast lists of the PyTorch documentation ("Autocast Op Reference": CUDA ops that can
#: autocast to float16 — the lower-precision list, used for bf16 too — and to float32).
CUDA_AUTOCAST = {
    "addmm": "lower precision",
    "mm": "lower precision",
    "bmm": "lower precision",
    "baddbmm": "lower precision",
    "matmul": "lower precision",
    "linear": "lower precision",
    "scaled_dot_product_attention": "lower precision",
    "log_softmax": "float32",
    "softmax": "float32",
    "nll_loss": "float32",
    "layer_norm": "float32",
    "native_layer_norm": "float32",
}
_LISTS = {
    "AT_FORALL_LOWER_PRECISION_FP": "lower precision",
    "AT_FORALL_FP32": "float32",
    "AT_FORALL_FP32_SET_OPT_DTYPE": "float32",
}


@lru_cache(maxsize=1)
def cuda_autocast_lists() -> tuple[dict[str, str], str]:
    """``({op: "lower precision" | "float32"}, source)``: the op lists CUDA autocast registers,
    read from torch's own header ``ATen/autocast_mode.h`` in the installed torch (the macros
    ``AT_FORALL_LOWER_PRECISION_FP``, ``AT_FORALL_FP32`` and ``AT_FORALL_FP32_SET_OPT_DTYPE``);
    where the header is not installed, :data:`CUDA_AUTOCAST` from the documentation."""
    header = Path(torch.__file__).parent / "include" / "ATen" / "autocast_mode.h"
    try:
        text = header.read_text(encoding="utf-8")
    except OSError:
        return dict(CUDA_AUTOCAST), "PyTorch documentation, Autocast Op Reference"
    found: dict[str, str] = {}
    for macro, policy in _LISTS.items():
        match = re.search(rf"#define {macro}\(_\)(.*?)(?:\n\s*\n|#define)", text, re.S)
        if match:
            for op in re.findall(r"_\(\s*([A-Za-z_][A-Za-z0-9_]*)", match.group(1)):
                found.setdefault(op, policy)
    if not found:
        return dict(CUDA_AUTOCAST), "PyTorch documentation, Autocast Op Reference"
    return found, f"torch {torch.__version__}, ATen/autocast_mode.h"


def cuda_autocast_policy(op: str) -> str:
    """What CUDA autocast does with ``op`` (an aten name the dtype recorder saw, such as
    ``_log_softmax`` or ``nll_loss_forward``, is matched to the listed op it implements)."""
    lists, _ = cuda_autocast_lists()
    base = op.lstrip("_")
    for candidate in (
        op,
        base,
        base.removesuffix("_forward"),
        op.removesuffix("_for_cpu"),
        base.removesuffix("_for_cpu"),
    ):
        if candidate in lists:
            return lists[candidate]
    return "not listed: widest input"

"""Where fusion pays: the bytes an element-wise chain moves, run op by op or as one kernel.

Chapter 1's traffic model applied to a chain of element-wise ops. Run eagerly, every op is
its own kernel: it reads each of its inputs from memory and writes its output back. Fused
into one kernel (what TorchInductor generates), the chain reads each *external* input once
and writes only what must outlive the kernel — its result, and any intermediate that is
needed later (e.g. saved for the backward pass). The arithmetic is the same either way:
fusion cuts memory traffic, not FLOPs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .._validate import positive

#: One op of a chain: ``(output name, [input names])``.
Op = tuple[str, Sequence[str]]

#: The chapter's chain, bias + GELU + dropout + residual, as ops on named tensors
#: (the dropout mask is an input: drawn beforehand, scaled by 1 / (1 - p)).
CHAIN: list[Op] = [("h1", ["x", "bias"]), ("h2", ["h1"]), ("h3", ["h2", "mask"]), ("out", ["h3", "residual"])]


@dataclass(frozen=True)
class Traffic:
    """Bytes a chain moves run op by op (``eager``) and as one fused kernel (``fused``)."""

    eager: float
    fused: float

    @property
    def saved(self) -> float:
        return self.eager - self.fused

    @property
    def ratio(self) -> float:
        return self.eager / self.fused

    def pair(self) -> tuple[float, float]:
        """``(eager, fused)``."""
        return self.eager, self.fused


def chain_traffic(
    chain: Sequence[Op], sizes: Mapping[str, int], bytes_per_element: float, keep: Iterable[str] = ()
) -> Traffic:
    """Minimum bytes of ``chain`` run eagerly and fused (chapter 1's model, per op or per kernel).

    ``sizes`` gives the number of elements of every tensor named in the chain. Eager: each
    op reads every input it names and writes its output. Fused: each external input (read
    but never produced by the chain) is read once; the last op's output and every name in
    ``keep`` (intermediates needed later, e.g. saved for backward) are written once.
    """
    positive(bytes_per_element=bytes_per_element)
    if not chain:
        raise ValueError("the chain has no ops")
    names = {out for out, _ in chain} | {name for _, ins in chain for name in ins}
    missing = sorted(names - set(sizes))
    if missing:
        raise KeyError(f"sizes has no entry for {', '.join(missing)}; give the element count of every tensor")
    produced = [out for out, _ in chain]
    keep = set(keep)
    unknown = sorted(keep - set(produced))
    if unknown:
        raise ValueError(f"keep names {', '.join(unknown)}, which no op of the chain produces")
    eager = sum(sum(sizes[n] for n in ins) + sizes[out] for out, ins in chain)
    external = {n for _, ins in chain for n in ins} - set(produced)
    written = keep | {produced[-1]}
    fused = sum(sizes[n] for n in external) + sum(sizes[n] for n in written)
    return Traffic(eager * bytes_per_element, fused * bytes_per_element)


def bias_gelu_dropout_residual(
    x: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor, residual: torch.Tensor
) -> torch.Tensor:
    """The chain: ``gelu(x + bias) * mask + residual`` — four kernels eagerly, one fused."""
    return F.gelu(x + bias) * mask + residual


def chain_inputs(
    rows: int,
    hidden: int,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    p: float = 0.1,
    seed: int = 0,
) -> tuple[torch.Tensor, ...]:
    """Inputs of :func:`bias_gelu_dropout_residual`: x and residual ``(rows, hidden)``, a bias
    ``(hidden,)`` and a dropout mask (0 or 1 / (1 - p)) drawn once with ``seed``."""
    if not 0 <= p < 1:
        raise ValueError(f"dropout probability p must be in [0, 1), got {p}")
    gen = torch.Generator().manual_seed(seed)
    x, residual = torch.randn(rows, hidden, generator=gen), torch.randn(rows, hidden, generator=gen)
    bias = torch.randn(hidden, generator=gen)
    mask = (torch.rand(rows, hidden, generator=gen) >= p).float() / (1 - p)
    return tuple(t.to(device=device, dtype=dtype) for t in (x, bias, mask, residual))


def chain_sizes(rows: int, hidden: int) -> dict[str, int]:
    """Element counts of every tensor of :data:`CHAIN` for ``(rows, hidden)`` activations."""
    full = rows * hidden
    return {
        "x": full,
        "bias": hidden,
        "mask": full,
        "residual": full,
        "h1": full,
        "h2": full,
        "h3": full,
        "out": full,
    }

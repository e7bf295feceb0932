"""How precise is a bf16 all-reduce? Gradient-like tensors summed across real ranks (processes on
127.0.0.1, gloo on CPU; chapter 10's :func:`helpers.distributed.run_ranks`), in fp32 and in bf16,
against the exact sum computed in float64.

Three ways to reduce gradients that a mixed-precision run can pick:

* ``"fp32 grads, fp32 reduce"``: fp32 gradients, summed in fp32 (plain DDP, autocast);
* ``"bf16 grads, fp32 reduce"``: gradients computed in bf16, cast to fp32, summed in fp32:
  FSDP2's ``MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)``;
* ``"bf16 grads, bf16 reduce"``: summed in bf16, each partial sum stored in bf16 between ranks:
  FSDP2 with ``param_dtype=torch.bfloat16`` and ``reduce_dtype`` left at None (it then reduces in
  the compute dtype), and DDP's ``bf16_compress_hook`` (fp32 gradients cast to bf16 and divided
  by the number of ranks before a bf16 all-reduce, cast back after).

The error is measured against the float64 sum of the ranks' fp32 gradients, so a bf16 arm's
error includes the rounding of its inputs. Each rank makes its tensor from a seed (a shared
"signal" plus its own noise, as data-parallel gradients are), so every rank can compute the
exact sum itself without sending anything more.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .._validate import count
from ..i18n import tr

REDUCE_ARMS = ("fp32 grads, fp32 reduce", "bf16 grads, fp32 reduce", "bf16 grads, bf16 reduce")
#: The bf16 reduce's own error: against the exact sum of the bf16 inputs it started from.
REDUCTION_ONLY = "of which the bf16 sum itself"


def rank_gradient(rank: int, size: int, seed: int = 0) -> torch.Tensor:
    """Rank ``rank``'s gradient-like fp32 tensor: a shared signal (the same on every rank) plus
    noise of the same size that differs by rank, around 1e-3 (example data, seeded)."""
    signal = torch.randn(size, generator=torch.Generator().manual_seed(seed)) * 1e-3
    noise = torch.randn(size, generator=torch.Generator().manual_seed(seed + 1 + rank)) * 1e-3
    return signal + noise


def _relative_error(got: torch.Tensor, exact: torch.Tensor) -> float:
    return ((got.double() - exact).norm() / exact.norm()).item()


def reduce_errors_on_rank(
    rank: int, world_size: int, device: str, size: int = 65536, seed: int = 0
) -> dict[str, Any]:
    """Run on every rank by :func:`bf16_allreduce_errors`: one all-reduce (SUM) per arm of
    :data:`REDUCE_ARMS`, each relative error against the float64 sum of all ranks' fp32 tensors."""
    import torch.distributed as dist

    grad = rank_gradient(rank, size, seed)
    every = [rank_gradient(r, size, seed) for r in range(world_size)]
    exact = torch.stack([g.double() for g in every]).sum(dim=0)
    # what a bf16 reduce starts from: the exact sum of the inputs after their rounding to bf16
    exact_of_bf16 = torch.stack([g.to(torch.bfloat16).double() for g in every]).sum(dim=0)
    out: dict[str, Any] = {"world_size": world_size, "backend": dist.get_backend()}
    for arm in REDUCE_ARMS:
        if arm.startswith("fp32"):
            buf = grad.clone()
        elif arm.endswith("fp32 reduce"):
            buf = grad.to(torch.bfloat16).float()  # bf16 gradients, cast up before the reduce
        else:
            buf = grad.to(torch.bfloat16)
        dist.all_reduce(buf, op=dist.ReduceOp.SUM)
        out[arm] = _relative_error(buf, exact)
        if arm == REDUCE_ARMS[-1]:
            out[REDUCTION_ONLY] = _relative_error(buf, exact_of_bf16)
    return out


@dataclass(frozen=True)
class ReduceErrors:
    """One row per number of ranks: the relative error of each arm of :data:`REDUCE_ARMS`, and
    :data:`REDUCTION_ONLY`, the part of the bf16 arm's error that the summation added."""

    world_size: int
    errors: dict[str, float]
    backend: str

    def __str__(self) -> str:
        e = [f"{self.errors[key]:.1e}" for key in (*REDUCE_ARMS, REDUCTION_ONLY)]
        return tr(
            "{n} ranks: fp32 reduce {a}; bf16 grads, fp32 reduce {b}; bf16 reduce {c} (the sum itself {d})",
            n=self.world_size,
            a=e[0],
            b=e[1],
            c=e[2],
            d=e[3],
        )


def bf16_allreduce_errors(
    world_sizes: Sequence[int] = (2, 4, 8), size: int = 65536, seed: int = 0, timeout_s: float = 120.0
) -> list[ReduceErrors]:
    """For each number of ranks, start that many real processes (gloo over 127.0.0.1, CPU), all-
    reduce gradient-like tensors of ``size`` values in each arm of :data:`REDUCE_ARMS`, and return
    the relative errors against the exact sum. The processes end with the call (and are killed if
    the call is interrupted or runs past ``timeout_s``)."""
    from ..distributed import run_ranks

    (size,) = count(size=size)
    rows = []
    for n in world_sizes:
        (n,) = count(2, world_size=n)
        result = run_ranks(
            "helpers.precision._allreduce:reduce_errors_on_rank",
            world_size=n,
            device="cpu",
            timeout_s=timeout_s,
            size=size,
            seed=seed,
        )[0]
        errors = {arm: result[arm] for arm in (*REDUCE_ARMS, REDUCTION_ONLY)}
        rows.append(ReduceErrors(n, errors, result["backend"]))
    return rows

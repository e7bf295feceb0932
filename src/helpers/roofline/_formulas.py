"""The roofline formulas of one GEMM, the cost-model table built from them, and the GEMMs and
element-wise operators of a training step (chapter 1). Pure arithmetic: no torch, no plotting.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .. import hardware
from .._validate import count as _count
from .._validate import positive as _positive


def gemm_flops(M: int, K: int, N: int) -> int:
    """FLOPs of ``(M×K)·(K×N)``: 2·M·K·N. M, K and N are matrix sizes: positive integers."""
    M, K, N = _count(M=M, K=K, N=N)
    return 2 * M * K * N


def gemm_bytes(M: int, K: int, N: int, bytes_per_element: float) -> float:
    """Minimum bytes moved: b·(MK + KN + MN) — read A and W once, write Y once."""
    M, K, N = _count(M=M, K=K, N=N)
    _positive(bytes_per_element=bytes_per_element)
    return bytes_per_element * (M * K + K * N + M * N)


def intensity(flops: float, bytes: float) -> float:
    """Arithmetic intensity in FLOP per byte."""
    _positive(flops=flops, bytes=bytes)
    return flops / bytes


def attainable(intensity: float, peak_flops: float, bandwidth: float) -> float:
    """Roofline ceiling at ``intensity``: min(peak, bandwidth · intensity), FLOP/s."""
    _positive(intensity=intensity, peak_flops=peak_flops, bandwidth=bandwidth)
    return min(peak_flops, bandwidth * intensity)


def ideal_time(flops: float, bytes: float, peak_flops: float, bandwidth: float) -> float:
    """Lower bound on run time, seconds: max(F / peak, Q / bandwidth)."""
    _positive(flops=flops, bytes=bytes, peak_flops=peak_flops, bandwidth=bandwidth)
    return max(flops / peak_flops, bytes / bandwidth)


def limiter(flops: float, bytes: float, peak_flops: float, bandwidth: float) -> str:
    """Which roof binds: ``"compute"`` if F/peak >= Q/bandwidth, else ``"memory"``."""
    _positive(flops=flops, bytes=bytes, peak_flops=peak_flops, bandwidth=bandwidth)
    return "compute" if flops / peak_flops >= bytes / bandwidth else "memory"


def ridge_point(peak_flops: float, bandwidth: float) -> float:
    """Intensity where the two roofs meet: peak / bandwidth, FLOP/B."""
    _positive(peak_flops=peak_flops, bandwidth=bandwidth)
    return peak_flops / bandwidth


def critical_m(K: int, N: int, bytes_per_element: float, peak_flops: float, bandwidth: float) -> int | None:
    """Smallest integer M at which the GEMM reaches the ridge point (compute-bound).

    Solves 2MKN / (b(MK + KN + MN)) >= R for M:  M >= R·b·K·N / (2KN − R·b·(K + N)).
    Returns None when no M is large enough (the intensity limit 2KN/(b(K+N)) is below R).
    """
    _positive(K=K, N=N, bytes_per_element=bytes_per_element, peak_flops=peak_flops, bandwidth=bandwidth)
    ridge = peak_flops / bandwidth
    denominator = 2 * K * N - ridge * bytes_per_element * (K + N)
    if denominator <= 0:
        return None
    m = math.ceil(ridge * bytes_per_element * K * N / denominator)
    # ceil of a float quotient can be one off either way: settle it with the exact test
    while (
        m > 1
        and limiter(
            gemm_flops(m - 1, K, N), gemm_bytes(m - 1, K, N, bytes_per_element), peak_flops, bandwidth
        )
        == "compute"
    ):
        m -= 1
    while (
        limiter(gemm_flops(m, K, N), gemm_bytes(m, K, N, bytes_per_element), peak_flops, bandwidth)
        != "compute"
    ):
        m += 1
    return m


@dataclass(frozen=True)
class CostRow:
    """One row of the cost-model table (fixed weights, growing M)."""

    M: int
    K: int
    N: int
    bytes_per_element: float
    flops: float
    bytes: float
    intensity: float
    compute_time: float  # F / peak, s
    memory_time: float  # Q / BW, s
    ideal_time: float  # max of the two, s
    attainable: float  # FLOP/s
    limiter: str


def cost_row(
    M: int, K: int, N: int, bytes_per_element: float, peak_flops: float, bandwidth: float
) -> CostRow:
    """Everything the roofline says about one GEMM shape on one device."""
    f = gemm_flops(M, K, N)
    q = gemm_bytes(M, K, N, bytes_per_element)
    i = intensity(f, q)
    return CostRow(
        M,
        K,
        N,
        bytes_per_element,
        f,
        q,
        i,
        f / peak_flops,
        q / bandwidth,
        ideal_time(f, q, peak_flops, bandwidth),
        attainable(i, peak_flops, bandwidth),
        limiter(f, q, peak_flops, bandwidth),
    )


def cost_table(
    Ms: Sequence[int],
    K: int = 4096,
    N: int = 4096,
    bytes_per_element: float = 2,
    peak_flops: float = 989.5e12,
    bandwidth: float = 3.35e12,
) -> list[CostRow]:
    """The cost-model table: fixed weight K×N, growing M. Defaults: H100 SXM, bf16."""
    return [cost_row(m, K, N, bytes_per_element, peak_flops, bandwidth) for m in Ms]


def option_time(gpu: str, dtype: str, M: int, K: int, N: int) -> float:
    """Ideal time (s) of ``(M×K)·(K×N)`` on ``gpu`` (a datasheet name from
    :data:`helpers.hardware.DEVICES`) in ``dtype``: its dense peak for that dtype, its bandwidth,
    and the dtype's width as the bytes per element."""
    spec = hardware.get_device(gpu)
    f, q = gemm_flops(M, K, N), gemm_bytes(M, K, N, hardware.bytes_per_element(dtype))
    return ideal_time(f, q, spec.peak(dtype), spec.memory_bandwidth)


def fastest(options: Sequence[tuple[str, str]], M: int, K: int, N: int) -> int:
    """Index of the (gpu, dtype) option with the smallest ideal time; the first on a tie."""
    if not options:
        raise ValueError("fastest() needs at least one (gpu, dtype) option")
    times = [option_time(gpu, dtype, M, K, N) for gpu, dtype in options]
    return min(range(len(times)), key=times.__getitem__)


def format_table(rows: Sequence[CostRow]) -> str:
    """Plain-text table of cost rows (deterministic, so notebooks can check it)."""
    head = (
        f"{'M':>6} {'GFLOP':>9} {'MB':>8} {'FLOP/B':>8} {'F/peak ms':>10} "
        f"{'Q/BW ms':>9} {'ideal ms':>9} {'TFLOP/s':>8}  limiter"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r.M:>6} {r.flops / 1e9:>9.3f} {r.bytes / 1e6:>8.2f} {r.intensity:>8.1f} "
            f"{r.compute_time * 1e3:>10.4f} {r.memory_time * 1e3:>9.4f} "
            f"{r.ideal_time * 1e3:>9.4f} {r.attainable / 1e12:>8.1f}  {r.limiter}"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------- training shapes


def training_gemms(M: int, K: int, N: int) -> list[tuple[str, int, int, int]]:
    """The three GEMMs one ``nn.Linear`` runs per training step, as (name, M, K, N) of
    ``(M×K)·(K×N)``: forward Y = X·W, grad of the input dX = dY·Wᵀ, grad of the weight
    dW = Xᵀ·dY. Here M = tokens in the micro-batch (batch × sequence length)."""
    M, K, N = _count(M=M, K=K, N=N)
    return [
        ("forward  Y  = X·W", M, K, N),
        ("backward dX = dY·Wᵀ", M, N, K),
        ("backward dW = Xᵀ·dY", K, M, N),
    ]


@dataclass(frozen=True)
class ElementwiseOp:
    """An element-wise operator's work per element, counted one FLOP per add, multiply,
    compare, exp or tanh, and its bytes per element (read once, write once)."""

    name: str
    flops_per_element: int
    tensors_read: int
    tensors_written: int

    def intensity(self, bytes_per_element: float) -> float:
        """FLOP per byte at ``bytes_per_element`` bytes per value."""
        _positive(bytes_per_element=bytes_per_element)
        return self.flops_per_element / (bytes_per_element * (self.tensors_read + self.tensors_written))


#: Common element-wise operators of a transformer layer (FLOPs as counted in the docstring).
ELEMENTWISE_OPS = (
    ElementwiseOp("residual add  y = a + b", 1, 2, 1),
    ElementwiseOp("softmax (max, subtract, exp, sum, divide)", 5, 1, 1),
    ElementwiseOp("LayerNorm (mean, center, square, variance, scale, gamma, beta)", 7, 1, 1),
    ElementwiseOp("GELU, tanh form (x³, 2 scales, add, tanh, add 1, ×x, ×0.5)", 9, 1, 1),
)

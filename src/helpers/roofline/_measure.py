"""Measured GEMMs placed on the roofline: time ``A @ W`` on this device and say what a point
above or far below its roof means.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .. import hardware
from ..bench import interval, measure, resolve_device
from ._formulas import attainable, gemm_bytes, gemm_flops, intensity, ridge_point


@dataclass
class GemmPoint:
    """A measured GEMM placed on the roofline.

    ``achieved_flops`` comes from the FASTEST timed run (the same best-case rule as the
    measured roofs); ``median_s`` and ``spread`` say how much the runs varied, and
    :meth:`share_of` how sure the fraction of the prediction is.
    """

    M: int
    K: int
    N: int
    dtype: str
    intensity: float
    achieved_flops: float
    median_s: float
    spread: float
    best_s: float = 0.0
    samples: tuple[float, ...] = ()  # every timed run, in seconds

    def share_of(self, peak_flops: float, bandwidth: float) -> tuple[float, float, float]:
        """``(median, low, high)``: the fraction of the roofline's prediction the runs reached
        (the median run), with a 95 % bootstrap interval over the runs. It needs 3 runs."""
        if len(self.samples) < 3:
            raise ValueError(
                f"M={self.M}: {len(self.samples)} timed run(s); measure at least 3 "
                "(measure_gemms(..., iters=3 or more))"
            )
        predicted_s = gemm_flops(self.M, self.K, self.N) / attainable(self.intensity, peak_flops, bandwidth)
        return interval([predicted_s / t for t in self.samples])


def measure_gemms(
    shapes: Sequence[tuple[int, int, int]], dtype: str = "fp32", device: str = "auto", iters: int = 9
) -> list[GemmPoint]:
    """Time ``A(M×K) @ W(K×N)`` for each shape; achieved FLOP/s of the fastest timed run, and
    every run kept (:meth:`GemmPoint.share_of`)."""
    dev = resolve_device(device)
    key = hardware.dtype_key(dtype)
    b = hardware.bytes_per_element(key)
    points = []
    for M, K, N in shapes:
        a = torch.randn(M, K, device=dev).to(hardware.DTYPES[key])
        w = torch.randn(K, N, device=dev).to(hardware.DTYPES[key])
        run = measure(functools.partial(torch.matmul, a, w), warmup=2, iters=iters, device=dev)
        f = gemm_flops(M, K, N)
        points.append(
            GemmPoint(
                M,
                K,
                N,
                key,
                intensity(f, gemm_bytes(M, K, N, b)),
                f / run.min,
                run.median,
                run.spread,
                run.min,
                tuple(run.samples),
            )
        )
    return points


def placement(
    point: GemmPoint, peak_flops: float, bandwidth: float, noisy: float = hardware.NOISY
) -> list[str]:
    """What to say about a measured point: above a roof (which one, and why that can happen)
    or a timing that spread widely. Empty when the point sits under its roof as expected."""
    notes = []
    roof = attainable(point.intensity, peak_flops, bandwidth)
    share = point.achieved_flops / roof
    if share > 1.0:
        if point.intensity >= ridge_point(peak_flops, bandwidth):
            notes.append(
                f"M={point.M} is at {share:.0%} of the FLAT roof: this GEMM ran faster than the "
                "GEMM that set the measured peak. The peak is only the best run of one shape; "
                "another shape, or a quieter moment on a shared machine, can do better."
            )
        else:
            notes.append(
                f"M={point.M} is at {share:.0%} of the SLANTED roof: it moved fewer bytes from "
                "main memory than Q_min assumes, because its matrices stayed in cache between "
                "calls (the measured bandwidth is for a buffer far larger than the cache)."
            )
    if point.spread > noisy:
        notes.append(
            f"M={point.M}: its runs spread {point.spread:.0%}; a busy machine, so read this point with care."
        )
    return notes

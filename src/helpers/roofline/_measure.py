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

#: A measured GEMM is compared with its prediction only when the 95 % interval of its share
#: spans at most this much (high / low - 1, as ``bench.SpeedComparison.interval_width``):
#: 1.0 is a factor of two. A wider interval says where the share may lie, not what it is.
COMPARABLE_WIDTH = 1.0


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
        (the median run), with a 95 % interval over the runs (helpers.bench.interval). It needs 3 runs."""
        if len(self.samples) < 3:
            raise ValueError(
                f"M={self.M}: {len(self.samples)} timed run(s); measure at least 3 "
                "(measure_gemms(..., iters=3 or more))"
            )
        predicted_s = gemm_flops(self.M, self.K, self.N) / attainable(self.intensity, peak_flops, bandwidth)
        return interval([predicted_s / t for t in self.samples])


@dataclass(frozen=True)
class ShareOfPrediction:
    """A measured GEMM against the roofline's prediction (:func:`against_prediction`).

    ``share`` is the fraction of the prediction the median run reached, ``low`` and ``high``
    its 95 % interval over the runs. ``roof`` is the roof the prediction comes from
    (``"memory"`` below the ridge point, ``"compute"`` above it) and ``roof_spread`` how much
    that roof's own timed runs spread. ``too_noisy`` says why the share cannot be compared
    with the prediction: ``"roof"`` (the roof's runs spread more than :data:`hardware.NOISY`,
    so the prediction itself is unsure), ``"runs"`` (the interval is wider than
    :data:`COMPARABLE_WIDTH`), or ``""`` when it can be.
    """

    share: float
    low: float
    high: float
    roof: str
    roof_spread: float
    too_noisy: str

    @property
    def interval_width(self) -> float:
        """high / low - 1: 1.0 means the interval spans a factor of two."""
        return self.high / self.low - 1


def against_prediction(
    point: GemmPoint, measured: hardware.MeasuredDevice, width: float = COMPARABLE_WIDTH
) -> ShareOfPrediction:
    """``point`` against the prediction of the roofs in ``measured`` (its GEMM peak for the
    point's dtype and its copy bandwidth), and whether the two can be compared at all.

    A busy machine makes both sides unsure: the point's own runs (its 95 % interval, from
    :func:`helpers.bench.interval` over the runs) and the roof it is predicted from (the
    spread of that roof's timed runs, as in :meth:`hardware.MeasuredDevice.warnings`). When
    either is too unsure, a percentage would be noise ("0 %", "2475 %"); the result says
    ``too_noisy`` instead, and why."""
    if point.dtype not in measured.gemm_flops or measured.copy_run is None:
        raise ValueError(
            f"the measured roofs have no {point.dtype} GEMM peak or no copy bandwidth: measure "
            f"them with hardware.measure_device(dtypes=[{point.dtype!r}])"
        )
    peak, bandwidth = measured.gemm_flops[point.dtype], measured.copy_bandwidth
    share, low, high = point.share_of(peak, bandwidth)
    if point.intensity >= ridge_point(peak, bandwidth):
        roof, roof_spread = "compute", measured.gemm_runs[point.dtype].spread
    else:
        roof, roof_spread = "memory", measured.copy_run.spread
    too_noisy = "roof" if roof_spread > hardware.NOISY else "runs" if high / low - 1 > width else ""
    return ShareOfPrediction(share, low, high, roof, roof_spread, too_noisy)


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

"""Ring collectives on paper, and the α-β model fitted to measured times.

In a ring of n ranks, each rank sends to its right neighbour only. A tensor of S bytes is cut
into n chunks of S/n bytes:

* all-gather (S = the gathered output): n−1 steps, each rank sends (n−1)/n · S;
* reduce-scatter (S = the input): n−1 steps, each rank sends (n−1)/n · S;
* all-reduce (S = the buffer) is a reduce-scatter then an all-gather: 2(n−1) steps, 2(n−1)/n · S.

Each step costs α (the latency of one message) plus its bytes over the link's bandwidth.
:func:`fit_alpha_beta` recovers α and the bandwidth from measured (bytes, seconds) points by
ordinary least squares, with bootstrap intervals.

Units: bytes, seconds, bytes per second (decimal SI: 1 GB/s = 1e9 B/s). No torch here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .._validate import count, unknown

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")
_BOOTSTRAP_DRAWS = 2000
_SEED = 0


def _collective(name: str) -> str:
    if name not in COLLECTIVES:
        raise unknown("collective", name, COLLECTIVES)
    return name


def _size(size_bytes: float) -> float:
    if isinstance(size_bytes, bool) or not isinstance(size_bytes, (int, float)):
        raise TypeError(f"size_bytes must be a number of bytes, got {size_bytes!r}")
    if not (size_bytes >= 0 and math.isfinite(size_bytes)):
        raise ValueError(f"size_bytes must be a finite number >= 0, got {size_bytes!r}")
    return float(size_bytes)


def ring_steps(collective: str, world_size: int) -> int:
    """Messages each rank sends in the ring: 2(n−1) for all_reduce, n−1 for the other two."""
    _collective(collective)
    (n,) = count(world_size=world_size)
    return (2 if collective == "all_reduce" else 1) * (n - 1)


def ring_bytes(collective: str, size_bytes: float, world_size: int) -> float:
    """Bytes EACH rank sends in a ring ``collective`` of a full tensor of ``size_bytes`` (the
    all-reduce buffer, the all-gather's output, the reduce-scatter's input): each of the
    :func:`ring_steps` messages carries one chunk of S/n. 0 for a single rank."""
    size = _size(size_bytes)
    steps = ring_steps(collective, world_size)
    return steps * size / int(world_size)


def ring_time(collective: str, size_bytes: float, world_size: int, alpha_s: float, bandwidth: float) -> float:
    """Seconds of a ring ``collective``: steps · α + ring_bytes / bandwidth (bandwidth in bytes/s,
    one direction). For all_reduce this is chapter 4's ``timeline.ring_allreduce_time``."""
    if isinstance(alpha_s, bool) or not isinstance(alpha_s, (int, float)) or not alpha_s >= 0:
        raise ValueError(f"alpha_s must be a number of seconds >= 0, got {alpha_s!r}")
    if isinstance(bandwidth, bool) or not isinstance(bandwidth, (int, float)) or not bandwidth > 0:
        raise ValueError(f"bandwidth must be positive (bytes/s), got {bandwidth!r}")
    sent = ring_bytes(collective, size_bytes, world_size)
    return ring_steps(collective, world_size) * alpha_s + sent / bandwidth


@dataclass(frozen=True)
class AlphaBetaFit:
    """t = α + bytes / bandwidth fitted to measured points by ordinary least squares.

    ``alpha_s`` (the intercept, seconds) and ``bandwidth`` (1 / slope, bytes/s) are the fit;
    the ``_low``/``_high`` fields bound their 95 % intervals, from a bootstrap over the points
    (fixed seed: the same points always give the same interval; with few points they are
    rough). ``crossover_bytes`` = α · bandwidth, the size where latency and transfer time are
    equal: below it latency dominates (NaN when α < 0). ``note`` is empty unless the fit is
    suspect (a negative α is reported as fitted, never clamped, and flagged there).
    """

    alpha_s: float
    bandwidth: float
    alpha_low_s: float
    alpha_high_s: float
    bandwidth_low: float
    bandwidth_high: float
    points: int
    crossover_bytes: float
    note: str = ""

    def predict(self, nbytes: float) -> float:
        """Seconds the fitted model gives for a message of ``nbytes``."""
        return self.alpha_s + _size(nbytes) / self.bandwidth

    def __str__(self) -> str:
        cross = "n/a" if math.isnan(self.crossover_bytes) else f"{self.crossover_bytes / 1e3:.3g} kB"
        low, high = self.alpha_low_s * 1e6, self.alpha_high_s * 1e6
        line = (
            f"alpha {self.alpha_s * 1e6:.3g} µs [{low:.3g}, {high:.3g}], "
            f"bandwidth {self.bandwidth / 1e9:.3g} GB/s [{self.bandwidth_low / 1e9:.3g}, "
            f"{self.bandwidth_high / 1e9:.3g}] (95 % intervals, {self.points} points); "
            f"latency dominates below {cross}"
        )
        return line + (f"; NOTE: {self.note}" if self.note else "")


def _ols(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line through (x, y)."""
    mx, my = x.mean(), y.mean()
    slope = float(((x - mx) * (y - my)).sum() / ((x - mx) ** 2).sum())
    return float(my - slope * mx), slope


def fit_alpha_beta(sizes_bytes: Sequence[float], seconds: Sequence[float]) -> AlphaBetaFit:
    """Fit t = α + bytes / bandwidth to measured times by ordinary least squares: the
    intercept is α, the slope is 1 / bandwidth. Needs at least 3 points of at least 2
    different sizes, every size and time positive, and times that grow with size.

    Plain OLS weighs every point's error in seconds alike, so over sizes spread across
    decades the largest messages (and their noise) set the line: α is the less certain of
    the two figures; read its interval."""
    x = np.asarray(list(sizes_bytes), dtype=float)
    y = np.asarray(list(seconds), dtype=float)
    if x.ndim != 1 or y.ndim != 1:
        raise ValueError("sizes_bytes and seconds must be flat lists of numbers")
    if x.size != y.size:
        raise ValueError(f"sizes_bytes has {x.size} values but seconds has {y.size}: give one time per size")
    if x.size < 3:
        raise ValueError(f"need at least 3 (size, time) points to fit alpha and bandwidth, got {x.size}")
    if not (np.all(np.isfinite(x)) and np.all(x > 0)):
        raise ValueError("every size must be a positive, finite number of bytes")
    if not (np.all(np.isfinite(y)) and np.all(y > 0)):
        raise ValueError("every time must be a positive, finite number of seconds")
    if np.all(x == x[0]):
        raise ValueError("all sizes are equal: measure at least two different message sizes")
    alpha, slope = _ols(x, y)
    if not slope > 0:
        raise ValueError("times do not grow with size: measure larger messages")

    rng = np.random.default_rng(_SEED)
    draws = rng.integers(0, x.size, size=(_BOOTSTRAP_DRAWS, x.size))
    alphas, slopes = [], []
    for idx in draws:
        xs = x[idx]
        if np.all(xs == xs[0]):
            continue  # one size only: no line through it
        a, b = _ols(xs, y[idx])
        alphas.append(a)
        slopes.append(b)
    a_low, a_high = (float(v) for v in np.percentile(alphas, [2.5, 97.5]))
    s_low, s_high = (float(v) for v in np.percentile(slopes, [2.5, 97.5]))
    bandwidth = 1.0 / slope
    # bandwidth = 1/slope falls as the slope grows: the slope's high end is the bandwidth's low end
    bw_low = 1.0 / s_high if s_high > 0 else math.inf
    bw_high = 1.0 / s_low if s_low > 0 else math.inf
    # min/max: exact points give draws equal to the fit up to rounding, which may fall a hair
    # to one side; an interval must hold its own estimate
    note = ""
    if alpha < 0:
        note = (
            f"the fitted alpha is negative ({alpha * 1e6:.3g} µs): the small messages lie below "
            "the line; measure smaller messages or more repeats"
        )
    return AlphaBetaFit(
        alpha_s=alpha,
        bandwidth=bandwidth,
        alpha_low_s=min(a_low, alpha),
        alpha_high_s=max(a_high, alpha),
        bandwidth_low=min(bw_low, bandwidth),
        bandwidth_high=max(bw_high, bandwidth),
        points=int(x.size),
        crossover_bytes=alpha * bandwidth if alpha >= 0 else math.nan,
        note=note,
    )

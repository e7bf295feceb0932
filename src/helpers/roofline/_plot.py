"""The roofline drawn with matplotlib (log-log, with measured or predicted points)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .. import i18n
from .._validate import positive as _positive
from ..i18n import text, tr
from ._formulas import ridge_point


def plot_roofline(
    peak_flops: float,
    bandwidth: float,
    points: Sequence[tuple] = (),
    ax: Any = None,
    title: str = "",
    label: str = "",
    intensity_range: tuple[float, float] = (0.1, 1e4),
    color: str | None = None,
) -> Any:
    """Draw a log-log roofline and optional points ``(intensity, flop_per_s, label)``.

    Points are named in a legend rather than next to the marker, so labels of points that sit
    close together (all on the flat roof, say) never overlap. ``color`` draws the roof and its
    points in one colour (two roofs on one axis, each with its own points).
    """
    import matplotlib.pyplot as plt
    import numpy as np

    _positive(peak_flops=peak_flops, bandwidth=bandwidth)
    i18n.for_plot()
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 4.2))
    lo, hi = intensity_range
    ridge = ridge_point(peak_flops, bandwidth)
    xs = np.logspace(math.log10(lo), math.log10(hi), 200)
    ax.loglog(
        xs,
        np.minimum(peak_flops, bandwidth * xs) / 1e12,
        lw=2,
        label=text(label) or tr("roofline"),
        color=color,
    )
    ax.axvline(ridge, color="grey", ls=":", lw=1)
    ax.annotate(
        tr("ridge {ridge:.0f} FLOP/B", ridge=ridge),
        (ridge, peak_flops / 1e12),
        textcoords="offset points",
        xytext=(4, -14),
        fontsize=8,
        color="grey",
    )
    markers = "osD^vP*Xh"
    for i, point in enumerate(points):
        x, y, name = point[0], point[1], point[2] if len(point) > 2 else ""
        ax.loglog([x], [y / 1e12], markers[i % len(markers)], ms=7, label=text(name) or None, color=color)
    ax.set_xlabel(tr("arithmetic intensity (FLOP/byte)"))
    ax.set_ylabel(tr("attainable TFLOP/s"))
    ax.set_title(text(title) or tr("Roofline"))
    ax.grid(True, which="both", alpha=0.3)
    if any(len(p) > 2 and p[2] for p in points):
        ax.legend(fontsize=8, loc="lower right")
    return ax

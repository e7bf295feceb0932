"""Chapter 1 — the roofline model of one GEMM, ``A (M×K) · W (K×N) = Y (M×N)``.

Formulas (seed 000 §01, NVIDIA's *Matrix Multiplication Background* guide):

* work             F     = 2·M·K·N              (one FMA = 2 FLOPs)
* minimum traffic  Q_min = b·(M·K + K·N + M·N)  (each operand read or written once)
* intensity        I     = F / Q_min            (FLOP per byte)
* attainable       P    <= min(P_peak, BW · I)
* ideal time       t    >= max(F / P_peak, Q_min / BW)

All units are decimal SI: FLOP/s, B/s, seconds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from . import hardware
from ._validate import positive as _positive
from .bench import measure, resolve_device


def gemm_flops(M: int, K: int, N: int) -> int:
    """FLOPs of ``(M×K)·(K×N)``: 2·M·K·N."""
    _positive(M=M, K=K, N=N)
    return 2 * M * K * N


def gemm_bytes(M: int, K: int, N: int, bytes_per_element: float) -> float:
    """Minimum bytes moved: b·(MK + KN + MN) — read A and W once, write Y once."""
    _positive(M=M, K=K, N=N, bytes_per_element=bytes_per_element)
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


def critical_m(K: int, N: int, bytes_per_element: float, peak_flops: float,
               bandwidth: float) -> int | None:
    """Smallest integer M at which the GEMM reaches the ridge point (compute-bound).

    Solves 2MKN / (b(MK + KN + MN)) >= R for M:  M >= R·b·K·N / (2KN − R·b·(K + N)).
    Returns None when no M is large enough (the intensity limit 2KN/(b(K+N)) is below R).
    """
    _positive(K=K, N=N, bytes_per_element=bytes_per_element, peak_flops=peak_flops,
              bandwidth=bandwidth)
    ridge = peak_flops / bandwidth
    denominator = 2 * K * N - ridge * bytes_per_element * (K + N)
    if denominator <= 0:
        return None
    m = math.ceil(ridge * bytes_per_element * K * N / denominator)
    # ceil of a float quotient can be one off either way: settle it with the exact test
    while m > 1 and limiter(gemm_flops(m - 1, K, N), gemm_bytes(m - 1, K, N, bytes_per_element),
                            peak_flops, bandwidth) == "compute":
        m -= 1
    while limiter(gemm_flops(m, K, N), gemm_bytes(m, K, N, bytes_per_element),
                  peak_flops, bandwidth) != "compute":
        m += 1
    return m


@dataclass(frozen=True)
class CostRow:
    """One row of the seed's cost-model table."""

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


def cost_row(M: int, K: int, N: int, bytes_per_element: float, peak_flops: float,
             bandwidth: float) -> CostRow:
    """Everything the roofline says about one GEMM shape on one device."""
    f = gemm_flops(M, K, N)
    q = gemm_bytes(M, K, N, bytes_per_element)
    i = intensity(f, q)
    return CostRow(M, K, N, bytes_per_element, f, q, i, f / peak_flops, q / bandwidth,
                   ideal_time(f, q, peak_flops, bandwidth), attainable(i, peak_flops, bandwidth),
                   limiter(f, q, peak_flops, bandwidth))


def cost_table(Ms: Sequence[int], K: int = 4096, N: int = 4096, bytes_per_element: float = 2,
               peak_flops: float = 989.5e12, bandwidth: float = 3.35e12) -> list[CostRow]:
    """The seed's table: fixed weight K×N, growing M. Defaults: H100 SXM, bf16."""
    return [cost_row(m, K, N, bytes_per_element, peak_flops, bandwidth) for m in Ms]


def format_table(rows: Sequence[CostRow]) -> str:
    """Plain-text table of cost rows (deterministic, so notebooks can check it)."""
    head = (f"{'M':>6} {'GFLOP':>9} {'MB':>8} {'FLOP/B':>8} {'F/peak ms':>10} "
            f"{'Q/BW ms':>9} {'ideal ms':>9} {'TFLOP/s':>8}  limiter")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r.M:>6} {r.flops / 1e9:>9.3f} {r.bytes / 1e6:>8.2f} {r.intensity:>8.1f} "
            f"{r.compute_time * 1e3:>10.4f} {r.memory_time * 1e3:>9.4f} "
            f"{r.ideal_time * 1e3:>9.4f} {r.attainable / 1e12:>8.1f}  {r.limiter}")
    return "\n".join(lines)


def plot_roofline(peak_flops: float, bandwidth: float, points: Sequence[tuple] = (),
                  ax: Any = None, title: str = "", label: str = "roofline",
                  intensity_range: tuple[float, float] = (0.1, 1e4)) -> Any:
    """Draw a log-log roofline and optional points ``(intensity, flop_per_s, label)``."""
    import matplotlib.pyplot as plt
    import numpy as np

    _positive(peak_flops=peak_flops, bandwidth=bandwidth)
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 4.2))
    lo, hi = intensity_range
    ridge = ridge_point(peak_flops, bandwidth)
    xs = np.logspace(math.log10(lo), math.log10(hi), 200)
    ax.loglog(xs, np.minimum(peak_flops, bandwidth * xs) / 1e12, lw=2, label=label)
    ax.axvline(ridge, color="grey", ls=":", lw=1)
    ax.annotate(f"ridge {ridge:.0f} FLOP/B", (ridge, peak_flops / 1e12), textcoords="offset points",
                xytext=(4, -14), fontsize=8, color="grey")
    for point in points:
        x, y, text = point[0], point[1], point[2] if len(point) > 2 else ""
        ax.loglog([x], [y / 1e12], "o", ms=7)
        if text:
            ax.annotate(text, (x, y / 1e12), textcoords="offset points", xytext=(6, 4), fontsize=8)
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("attainable TFLOP/s")
    ax.set_title(title or "Roofline")
    ax.grid(True, which="both", alpha=0.3)
    return ax


@dataclass
class GemmPoint:
    """A measured GEMM placed on the roofline."""

    M: int
    K: int
    N: int
    dtype: str
    intensity: float
    achieved_flops: float
    median_s: float
    spread: float


def measure_gemms(shapes: Sequence[tuple[int, int, int]], dtype: str = "fp32",
                  device: str = "auto", iters: int = 5) -> list[GemmPoint]:
    """Time ``A(M×K) @ W(K×N)`` for each shape and return achieved FLOP/s (median)."""
    dev = resolve_device(device)
    key = hardware.dtype_key(dtype)
    b = hardware.bytes_per_element(key)
    points = []
    for M, K, N in shapes:
        a = torch.randn(M, K, device=dev).to(hardware.DTYPES[key])
        w = torch.randn(K, N, device=dev).to(hardware.DTYPES[key])
        run = measure(lambda a=a, w=w: a @ w, warmup=2, iters=iters, device=dev)
        f = gemm_flops(M, K, N)
        points.append(GemmPoint(M, K, N, key, intensity(f, gemm_bytes(M, K, N, b)),
                                f / run.median, run.median, run.spread))
    return points


def presets() -> dict[str, tuple[float, float, int]]:
    """Device presets for the explorer: ``"H100 SXM · bf16" -> (peak, bandwidth, bytes)``."""
    out = {}
    for spec in hardware.DEVICES.values():
        for key in ("bf16", "fp16", "fp8", "tf32", "fp32"):
            if key in spec.peak_flops:
                out[f"{spec.name} · {key}"] = (spec.peak(key), spec.memory_bandwidth,
                                              hardware.bytes_per_element(key))
    return out


class RooflineExplorer:
    """Sliders for M, bytes per element, peak and bandwidth, plus device presets.

    Displays as a live widget in Jupyter front ends with a widget manager; everywhere else
    (papermill, nbconvert, GitHub) the output also carries a static PNG of the same view.
    """

    def __init__(self, K: int = 4096, N: int = 4096, M: int = 64, preset: str = "H100 SXM · bf16"):
        import ipywidgets as w

        self.K, self.N = K, N
        self._presets = presets()
        peak, bw, b = self._presets[preset]
        self.preset = w.Dropdown(options=list(self._presets), value=preset, description="device")
        self.m = w.SelectionSlider(options=[2**i for i in range(15)], value=M, description="M")
        self.b = w.SelectionSlider(options=[1, 2, 4], value=b, description="bytes/elem")
        self.peak = w.FloatLogSlider(value=peak / 1e12, base=10, min=-1, max=4, step=0.01,
                                     description="peak TF/s", readout_format=".1f")
        self.bw = w.FloatLogSlider(value=bw / 1e12, base=10, min=-2, max=1, step=0.01,
                                   description="BW TB/s", readout_format=".2f")
        self.row = w.HTML()
        self.out = w.Output()
        self.box = w.VBox([self.preset, w.HBox([self.m, self.b]), w.HBox([self.peak, self.bw]),
                           self.row, self.out])
        self.preset.observe(self._on_preset, names="value")
        for control in (self.m, self.b, self.peak, self.bw):
            control.observe(lambda _change: self.redraw(), names="value")
        self.redraw()

    def _on_preset(self, change: dict) -> None:
        peak, bw, b = self._presets[change["new"]]
        with self.box.hold_sync():
            self.peak.value, self.bw.value, self.b.value = peak / 1e12, bw / 1e12, b
        self.redraw()

    def current(self) -> CostRow:
        """The cost-model row for the current slider values."""
        return cost_row(self.m.value, self.K, self.N, self.b.value, self.peak.value * 1e12,
                        self.bw.value * 1e12)

    def figure(self) -> Any:
        import matplotlib.pyplot as plt

        r = self.current()
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        peak, bw, b = self._presets[self.preset.value]
        matches = (math.isclose(self.peak.value * 1e12, peak, rel_tol=0.01)
                   and math.isclose(self.bw.value * 1e12, bw, rel_tol=0.01) and self.b.value == b)
        name = self.preset.value if matches else "custom roofs"  # sliders moved off the preset
        plot_roofline(self.peak.value * 1e12, self.bw.value * 1e12,
                      [(r.intensity, r.attainable, f"M={r.M}")], ax=ax,
                      title=f"{name}: K=N={self.K}, b={r.bytes_per_element}")
        plt.close(fig)
        return fig

    def redraw(self) -> None:
        from IPython.display import display

        r = self.current()
        self.row.value = (
            f"<code>M={r.M}: I = {r.intensity:.1f} FLOP/B, F/peak = {r.compute_time * 1e3:.4f} ms, "
            f"Q/BW = {r.memory_time * 1e3:.4f} ms, ideal ≥ {r.ideal_time * 1e3:.4f} ms, "
            f"{r.limiter}-bound, ≤ {r.attainable / 1e12:.1f} TFLOP/s</code>")
        self.out.clear_output(wait=True)
        with self.out:
            display(self.figure())

    def _repr_mimebundle_(self, **kwargs: Any) -> dict:
        import base64
        import io

        bundle = self.box._repr_mimebundle_(**kwargs)
        buffer = io.BytesIO()
        self.figure().savefig(buffer, format="png", dpi=80, bbox_inches="tight")
        bundle["image/png"] = base64.b64encode(buffer.getvalue()).decode()
        r = self.current()
        bundle["text/plain"] = f"Roofline explorer ({self.preset.value}, M={r.M}, {r.limiter}-bound)"
        return bundle

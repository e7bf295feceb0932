"""Chapter 1 — the roofline model of one GEMM, ``A (M×K) · W (K×N) = Y (M×N)``.

Formulas (NVIDIA's *Matrix Multiplication Background User's Guide*; Williams, Waterman and
Patterson, "Roofline: an insightful visual performance model", CACM 2009):

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

from . import hardware, i18n
from ._validate import count as _count
from ._validate import positive as _positive
from ._widgets import with_static_fallback
from .bench import interval, measure, resolve_device
from .i18n import text, tr


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
    """The cost-model table: fixed weight K×N, growing M. Defaults: H100 SXM, bf16."""
    return [cost_row(m, K, N, bytes_per_element, peak_flops, bandwidth) for m in Ms]


def option_time(device: str, dtype: str, M: int, K: int, N: int) -> float:
    """Ideal time (s) of ``(M×K)·(K×N)`` on a table device in ``dtype``: its dense peak for that
    dtype, its bandwidth, and the dtype's width as the bytes per element."""
    spec = hardware.get_device(device)
    f, q = gemm_flops(M, K, N), gemm_bytes(M, K, N, hardware.bytes_per_element(dtype))
    return ideal_time(f, q, spec.peak(dtype), spec.memory_bandwidth)


def fastest(options: Sequence[tuple[str, str]], M: int, K: int, N: int) -> int:
    """Index of the (device, dtype) option with the smallest ideal time; the first on a tie."""
    if not options:
        raise ValueError("fastest() needs at least one (device, dtype) option")
    times = [option_time(device, dtype, M, K, N) for device, dtype in options]
    return min(range(len(times)), key=times.__getitem__)


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
                  ax: Any = None, title: str = "", label: str = "",
                  intensity_range: tuple[float, float] = (0.1, 1e4), color: str | None = None) -> Any:
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
    ax.loglog(xs, np.minimum(peak_flops, bandwidth * xs) / 1e12, lw=2, label=text(label) or tr("roofline"),
              color=color)
    ax.axvline(ridge, color="grey", ls=":", lw=1)
    ax.annotate(tr("ridge {ridge:.0f} FLOP/B", ridge=ridge), (ridge, peak_flops / 1e12),
                textcoords="offset points", xytext=(4, -14), fontsize=8, color="grey")
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
            raise ValueError(f"M={self.M}: {len(self.samples)} timed run(s); measure at least 3 "
                             "(measure_gemms(..., iters=3 or more))")
        predicted_s = gemm_flops(self.M, self.K, self.N) / attainable(self.intensity, peak_flops, bandwidth)
        return interval([predicted_s / t for t in self.samples])


def measure_gemms(shapes: Sequence[tuple[int, int, int]], dtype: str = "fp32",
                  device: str = "auto", iters: int = 9) -> list[GemmPoint]:
    """Time ``A(M×K) @ W(K×N)`` for each shape; achieved FLOP/s of the fastest timed run, and
    every run kept (:meth:`GemmPoint.share_of`)."""
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
                                f / run.min, run.median, run.spread, run.min, tuple(run.samples)))
    return points


def placement(point: GemmPoint, peak_flops: float, bandwidth: float,
              noisy: float = hardware.NOISY) -> list[str]:
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
                "another shape, or a quieter moment on a shared machine, can do better.")
        else:
            notes.append(
                f"M={point.M} is at {share:.0%} of the SLANTED roof: it moved fewer bytes from "
                "main memory than Q_min assumes, because its matrices stayed in cache between "
                "calls (the measured bandwidth is for a buffer far larger than the cache).")
    if point.spread > noisy:
        notes.append(f"M={point.M}: its runs spread {point.spread:.0%}; a busy machine, so read "
                     "this point with care.")
    return notes


# --------------------------------------------------------------------------- training shapes

def training_gemms(M: int, K: int, N: int) -> list[tuple[str, int, int, int]]:
    """The three GEMMs one ``nn.Linear`` runs per training step, as (name, M, K, N) of
    ``(M×K)·(K×N)``: forward Y = X·W, grad of the input dX = dY·Wᵀ, grad of the weight
    dW = Xᵀ·dY. Here M = tokens in the micro-batch (batch × sequence length)."""
    M, K, N = _count(M=M, K=K, N=N)
    return [("forward  Y  = X·W", M, K, N), ("backward dX = dY·Wᵀ", M, N, K),
            ("backward dW = Xᵀ·dY", K, M, N)]


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


def presets() -> dict[str, tuple[float, float, int]]:
    """Device presets for the explorer: ``"H100 SXM · bf16" -> (peak, bandwidth, bytes)``."""
    out = {}
    for spec in hardware.DEVICES.values():
        for key in ("bf16", "fp16", "fp8", "tf32", "fp32"):
            if key in spec.peak_flops:
                out[f"{spec.name} · {key}"] = (spec.peak(key), spec.memory_bandwidth,
                                              hardware.bytes_per_element(key))
    return out


def _slider_stops(low_exp: int, high_exp: int, exact: Sequence[float]) -> list[tuple[str, float]]:
    """(label, value) stops for a log-scale slider: about 100 per decade (3 significant digits)
    plus every value in ``exact``, so a preset sits on the slider exactly.

    The explorer uses a ``SelectionSlider`` over these stops, not a ``FloatLogSlider``: the log
    slider's front end snaps a value the kernel sets (989.5 -> 988.6) and sends the snapped value
    back, a second writer that races a learner's drag right after a preset change (the readout
    then shows the drag while the kernel keeps the preset). A selection slider sends only the
    index the learner chose, and its label is the value itself.
    """
    values = {float(f"{10 ** (k / 100):.3g}") for k in range(low_exp * 100, high_exp * 100 + 1)}
    values.update(exact)
    return [(f"{v:g}", v) for v in sorted(values)]


def _bound(limiter_name: str) -> str:
    """"compute-bound" / "memory-bound" in the current language."""
    return tr("compute-bound") if limiter_name == "compute" else tr("memory-bound")


class RooflineExplorer:
    """Sliders for M, bytes per element, peak and bandwidth, plus device presets.

    Choosing a preset puts the peak and bandwidth sliders on that device's exact datasheet
    figures (each preset value is one of their stops); the title names the preset until a
    slider is moved away from it, and then says "custom roofs". Displays as a live widget in
    Jupyter front ends with a widget manager; everywhere else (papermill, nbconvert, GitHub)
    the output also carries a static PNG of the same view.
    """

    def __init__(self, K: int = 4096, N: int = 4096, M: int = 64, preset: str = "H100 SXM · bf16"):
        import ipywidgets as w

        self.K, self.N = K, N
        self._presets = presets()
        if preset not in self._presets:
            raise ValueError(f"Unknown preset {preset!r}; pick one of roofline.presets(), "
                             "e.g. 'H100 SXM · bf16'.")
        peak, bw, b = self._presets[preset]
        self.preset = w.Dropdown(options=list(self._presets), value=preset, description=tr("device"))
        self.m = w.SelectionSlider(options=[2**i for i in range(15)], value=M, description="M")
        self.b = w.SelectionSlider(options=[1, 2, 4], value=b, description=tr("bytes/elem"))
        self.peak = w.SelectionSlider(options=_slider_stops(-1, 4, [p / 1e12 for p, _, _ in
                                                                   self._presets.values()]),
                                      value=peak / 1e12, description=tr("peak TF/s"))
        self.bw = w.SelectionSlider(options=_slider_stops(-2, 1, [b / 1e12 for _, b, _ in
                                                                 self._presets.values()]),
                                    value=bw / 1e12, description=tr("BW TB/s"))
        self.title = w.HTML()
        self.row = w.HTML()
        self.out = w.Output()
        self.box = w.VBox([self.preset, w.HBox([self.m, self.b]), w.HBox([self.peak, self.bw]),
                           self.title, self.row, self.out])
        self._setting = False
        self.preset.observe(self._on_preset, names="value")
        for control in (self.m, self.b, self.peak, self.bw):
            control.observe(self._on_slider, names="value")
        self.redraw()

    def _on_preset(self, change: dict) -> None:
        peak, bw, b = self._presets[change["new"]]
        self._setting = True  # the three slider changes below are one redraw, not three
        try:
            self.peak.value, self.bw.value, self.b.value = peak / 1e12, bw / 1e12, b
        finally:
            self._setting = False
        self.redraw()

    def _on_slider(self, _change: dict) -> None:
        if not self._setting:
            self.redraw()

    def roofs(self) -> tuple[float, float, float, str]:
        """(peak FLOP/s, bandwidth B/s, bytes per element, name) now shown. While the sliders
        sit on the chosen preset's values (every preset value is a stop of its slider), the
        preset's name; else "custom roofs"."""
        peak, bw, b = self._presets[self.preset.value]
        if (self.peak.value, self.bw.value, self.b.value) == (peak / 1e12, bw / 1e12, b):
            return peak, bw, b, self.preset.value
        return self.peak.value * 1e12, self.bw.value * 1e12, self.b.value, tr("custom roofs")

    def current(self) -> CostRow:
        """The cost-model row for the current view (exact preset figures while on a preset)."""
        peak, bw, b, _ = self.roofs()
        return cost_row(self.m.value, self.K, self.N, b, peak, bw)

    def figure(self) -> Any:
        import matplotlib.pyplot as plt

        r = self.current()
        peak, bw, _, name = self.roofs()
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        plot_roofline(peak, bw, [(r.intensity, r.attainable, f"M={r.M}")], ax=ax,
                      title=f"{name}: K=N={self.K}, b={r.bytes_per_element}")
        plt.close(fig)
        return fig

    def redraw(self) -> None:
        from IPython.display import display

        r = self.current()
        peak, bw, b, name = self.roofs()
        self.title.value = tr("<b>{name}</b>: peak {peak:g} TFLOP/s, bandwidth {bw:g} GB/s, {b:g} bytes "
                              "per element", name=name, peak=peak / 1e12, bw=bw / 1e9, b=b)
        self.row.value = "<code>" + tr(
            "M={M}: I = {intensity:.1f} FLOP/B, F/peak = {compute:.4f} ms, Q/BW = {memory:.4f} ms, "
            "ideal ≥ {ideal:.4f} ms, {bound}, ≤ {attainable:.1f} TFLOP/s", M=r.M, intensity=r.intensity,
            compute=r.compute_time * 1e3, memory=r.memory_time * 1e3, ideal=r.ideal_time * 1e3,
            bound=_bound(r.limiter), attainable=r.attainable / 1e12) + "</code>"
        self.out.clear_output(wait=True)
        with self.out:
            display(self.figure())

    def _repr_mimebundle_(self, **kwargs: Any) -> dict:
        r = self.current()
        return with_static_fallback(self.box, self.figure(), tr(
            "Roofline explorer ({name}, M={M}, {bound})", name=self.roofs()[3], M=r.M,
            bound=_bound(r.limiter)), **kwargs)

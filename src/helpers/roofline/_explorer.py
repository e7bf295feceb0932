"""The roofline explorer: an ipywidgets view of one GEMM's cost-model row and roofline, with
sliders and device presets (a static PNG where no widget manager runs).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import hardware
from .._widgets import with_static_fallback
from ..i18n import tr
from ._formulas import CostRow, cost_row
from ._plot import plot_roofline


def presets() -> dict[str, tuple[float, float, int]]:
    """Device presets for the explorer: ``"H100 SXM · bf16" -> (peak, bandwidth, bytes)``."""
    out = {}
    for spec in hardware.DEVICES.values():
        for key in ("bf16", "fp16", "fp8", "tf32", "fp32"):
            if key in spec.peak_flops:
                out[f"{spec.name} · {key}"] = (
                    spec.peak(key),
                    spec.memory_bandwidth,
                    hardware.bytes_per_element(key),
                )
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
    """ "compute-bound" / "memory-bound" in the current language."""
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
            raise ValueError(
                f"Unknown preset {preset!r}; pick one of roofline.presets(), e.g. 'H100 SXM · bf16'."
            )
        peak, bw, b = self._presets[preset]
        self.preset = w.Dropdown(options=list(self._presets), value=preset, description=tr("device"))
        self.m = w.SelectionSlider(options=[2**i for i in range(15)], value=M, description="M")
        self.b = w.SelectionSlider(options=[1, 2, 4], value=b, description=tr("bytes/elem"))
        self.peak = w.SelectionSlider(
            options=_slider_stops(-1, 4, [p / 1e12 for p, _, _ in self._presets.values()]),
            value=peak / 1e12,
            description=tr("peak TF/s"),
        )
        self.bw = w.SelectionSlider(
            options=_slider_stops(-2, 1, [b / 1e12 for _, b, _ in self._presets.values()]),
            value=bw / 1e12,
            description=tr("BW TB/s"),
        )
        self.title = w.HTML()
        self.row = w.HTML()
        self.out = w.Output()
        self.box = w.VBox(
            [
                self.preset,
                w.HBox([self.m, self.b]),
                w.HBox([self.peak, self.bw]),
                self.title,
                self.row,
                self.out,
            ]
        )
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
        plot_roofline(
            peak,
            bw,
            [(r.intensity, r.attainable, f"M={r.M}")],
            ax=ax,
            title=f"{name}: K=N={self.K}, b={r.bytes_per_element}",
        )
        plt.close(fig)
        return fig

    def redraw(self) -> None:
        from IPython.display import display

        r = self.current()
        peak, bw, b, name = self.roofs()
        self.title.value = tr(
            "<b>{name}</b>: peak {peak:g} TFLOP/s, bandwidth {bw:g} GB/s, {b:g} bytes per element",
            name=name,
            peak=peak / 1e12,
            bw=bw / 1e9,
            b=b,
        )
        self.row.value = (
            "<code>"
            + tr(
                "M={M}: I = {intensity:.1f} FLOP/B, F/peak = {compute:.4f} ms, Q/BW = {memory:.4f} ms, "
                "ideal ≥ {ideal:.4f} ms, {bound}, ≤ {attainable:.1f} TFLOP/s",
                M=r.M,
                intensity=r.intensity,
                compute=r.compute_time * 1e3,
                memory=r.memory_time * 1e3,
                ideal=r.ideal_time * 1e3,
                bound=_bound(r.limiter),
                attainable=r.attainable / 1e12,
            )
            + "</code>"
        )
        self.out.clear_output(wait=True)
        with self.out:
            display(self.figure())

    def _repr_mimebundle_(self, **kwargs: Any) -> dict:
        r = self.current()
        return with_static_fallback(
            self.box,
            self.figure(),
            tr(
                "Roofline explorer ({name}, M={M}, {bound})",
                name=self.roofs()[3],
                M=r.M,
                bound=_bound(r.limiter),
            ),
            **kwargs,
        )

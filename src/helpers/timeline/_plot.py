"""Gantt-style pictures of a timeline: one row per rank and thread / CUDA stream."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import i18n
from ..i18n import text, tr
from ._intervals import clip, merge_intervals
from ._schedule import PipelineSchedule
from ._trace import COMM_KERNEL_RE, CPU_COMM_RE, DATA_RE, NOT_COMPUTE_RE, Trace

COLOURS = {
    "compute": "tab:blue",
    "comm": "tab:orange",
    "data": "tab:green",
    "other": "tab:gray",
    "step": "lightgray",
}
LABEL_PT = 10  # tick labels, axis label and legend of plot_timeline: matplotlib's default size


def _kind(e: Any) -> str | None:
    if e.stream is not None:
        if COMM_KERNEL_RE.match(e.name):
            return "comm"
        return "other" if NOT_COMPUTE_RE.match(e.name) else "compute"
    if DATA_RE.search(e.name):
        return "data"
    if CPU_COMM_RE.match(e.name):
        return "comm"
    if e.name.startswith("ProfilerStep#"):
        return "step"
    return "compute" if e.cat == "cpu_op" else None


def _rows(trace: Trace, start: float, end: float) -> dict[str, dict[str, list]]:
    rows: dict[str, dict[str, list]] = {}
    gpu = trace.is_gpu
    for e in trace.events:
        if e.ts >= end or e.ts + e.dur <= start or e.cat == "gpu_user_annotation":
            continue  # (annotations mirrored onto the GPU rows would duplicate the host ranges)
        kind = _kind(e)
        if kind is None or (gpu and e.stream is None and kind not in ("step", "data", "comm")):
            continue
        if e.stream is not None:
            label = f"gpu {e.pid} · stream {e.stream}"
        else:
            label = trace.thread_names.get((e.pid, e.tid)) or f"thread {e.tid}"
        rows.setdefault(label, {}).setdefault(kind, []).append((e.ts, e.ts + e.dur))
    return rows


def plot_timeline(
    traces: Trace | Sequence[Trace],
    start_us: float | None = None,
    end_us: float | None = None,
    ax: Any = None,
    title: str = "",
) -> Any:
    """Draw each rank's threads and CUDA streams as rows of colored bars: compute (blue),
    communication (orange), data loading (green), other device work (grey); grey blocks on
    top mark the profiler steps. Times in ms from the first step. Returns the axes."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    traces = [traces] if isinstance(traces, Trace) else list(traces)
    starts = [s.ts for t in traces for s in t.steps()] or [t.events[0].ts for t in traces if t.events]
    if not starts:
        raise ValueError("plot_timeline: the traces hold no events")
    t0 = min(starts)
    lo = t0 if start_us is None else t0 + start_us
    hi = end_us + t0 if end_us is not None else max(e.ts + e.dur for t in traces for e in t.events)
    i18n.for_plot()
    kind_names = {
        "compute": tr("compute"),
        "comm": tr("comm"),
        "data": tr("data"),
        "other": tr("other"),
        "step": tr("step"),
    }
    labels, bars = [], []
    for t in traces:
        for label, kinds in sorted(_rows(t, lo, hi).items(), key=lambda kv: "step" not in kv[1]):
            labels.append(f"rank {t.rank} · {label}")
            bars.append({k: merge_intervals(clip(v, lo, hi)) for k, v in kinds.items()})
    if ax is None:  # as wide as a page's column (7.2 in at 100 dpi: 720 px), so text is not shrunk
        _, ax = plt.subplots(figsize=(7.2, 0.45 * len(labels) + 1.6), layout="constrained")
    for row, kinds in enumerate(bars):
        for kind, spans in kinds.items():
            height, y = (0.14, row - 0.47) if kind == "step" else (0.6, row - 0.3)  # steps: a band on top
            ax.broken_barh(
                [((s - t0) / 1e3, (e - s) / 1e3) for s, e in spans],
                (y, height),
                facecolor=COLOURS[kind],
                edgecolor="black" if kind == "step" else "none",
                linewidth=0.5,
            )
    present = {k for kinds in bars for k in kinds}
    handles = [Patch(color=c, label=kind_names[k]) for k, c in COLOURS.items() if k in present]
    # one row between the title and the bars: the bars keep the figure's width; text at
    # matplotlib's default 10 pt (LABEL_PT), the size it is read at on a page
    ax.legend(
        handles=handles,
        loc="lower left",
        bbox_to_anchor=(0.0, 1.0),
        ncol=len(handles),
        fontsize=LABEL_PT,
        frameon=False,
        borderaxespad=0.2,
        handlelength=1.2,
        columnspacing=1.2,
    )
    ax.set_yticks(range(len(labels)), labels, fontsize=LABEL_PT)
    ax.tick_params(axis="x", labelsize=LABEL_PT)
    ax.invert_yaxis()
    ax.set_xlabel(
        tr("time from the first profiled step (ms); steps are the outlined bands on top"),
        fontsize=LABEL_PT,
        wrap=True,  # long row labels leave the bars a narrow axis: the label wraps, not the figure
    )
    ax.set_title(text(title) or tr("timeline"), pad=2.2 * LABEL_PT)  # above the legend's row
    return ax


def plot_pipeline(sched: PipelineSchedule, ax: Any = None) -> Any:
    """Draw a simulated pipeline: forwards light, backwards dark, the white gaps are the bubble."""
    import matplotlib.pyplot as plt

    i18n.for_plot()
    if ax is None:  # a page column's width, as plot_timeline, so the 10 pt text is not shrunk
        _, ax = plt.subplots(figsize=(7.2, 0.5 * sched.stages + 1.4), layout="constrained")
    # a bar's name only where it fits: the axis' width in points over the schedule's length
    # (a character at LABEL_PT is about 0.6 of its size wide)
    length = max((op[1] for ops in sched.ops for op in ops), default=1.0)
    width_pt = ax.get_position().width * ax.figure.get_figwidth() * 72
    pt_per_unit = width_pt / length
    for s, ops in enumerate(sched.ops):
        for start, end, kind, mb in ops:
            ax.broken_barh(
                [(start, end - start)],
                (s - 0.4, 0.8),
                edgecolor="black",
                linewidth=0.4,
                facecolor="tab:cyan" if kind == "F" else "tab:purple",
            )
            name = f"{kind}{mb}"
            if (end - start) * pt_per_unit >= 0.6 * LABEL_PT * len(name):
                ax.text((start + end) / 2, s, name, ha="center", va="center", fontsize=LABEL_PT)
    ax.set_yticks(
        range(sched.stages), [tr("stage {stage}", stage=s) for s in range(sched.stages)], fontsize=LABEL_PT
    )
    ax.tick_params(axis="x", labelsize=LABEL_PT)
    ax.invert_yaxis()
    ax.set_xlabel(tr("time (units of one forward)"), fontsize=LABEL_PT)
    ax.set_title(
        tr(
            "{schedule}: {stages} stages × {microbatches} microbatches, bubble {bubble:.0%}",
            schedule=sched.schedule,
            stages=sched.stages,
            microbatches=sched.microbatches,
            bubble=sched.bubble_fraction,
        )
    )
    return ax

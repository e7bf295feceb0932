"""The first questions asked of an nsys report: top kernel, step buckets, NVTX GPU projection."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import i18n
from ..i18n import tr
from ._table import Table, summarize

# =========================================================================== first questions

GEMM_ATTENTION_KEYWORDS = ("gemm", "flash", "attention", "fmha")
#: What can dominate a step's GPU time, as :func:`dominant_bucket` names it.
BUCKETS = ("gemm/attention", "other kernels", "memcpy", "gpu idle")


def is_gemm_or_attention(kernel_name: str) -> bool:
    """A kernel name containing gemm, flash, attention or fmha (any case)."""
    low = kernel_name.lower()
    return any(k in low for k in GEMM_ATTENTION_KEYWORDS)


def top_kernel(kern: Table, mem: Table | None = None) -> tuple[str, float]:
    """(name, share) of the kernel with the largest total time; share of GPU time, i.e. of
    all kernel time plus all memory-operation time (``cuda_gpu_mem_time_sum``)."""
    if len(kern) == 0:
        raise ValueError("The kernel table is empty: the capture has no CUDA kernels.")
    totals = np.asarray(kern["total_ns"], dtype=float)
    i = int(np.argmax(totals))
    gpu = totals.sum() + (float(np.sum(mem["total_ns"])) if mem is not None and len(mem) else 0.0)
    return str(kern["name"][i]), float(totals[i] / gpu)


def _range_total(nvtx: Table, name: str) -> float:
    names = [str(n) for n in nvtx["name"]]
    if name not in names:
        raise ValueError(
            f"The nvtx_sum table has no {name!r} range (it has {names}); annotate each "
            "training step with an NVTX range named 'step'."
        )
    return float(nvtx["total_ns"][names.index(name)])


def step_buckets(kern: Table, mem: Table, nvtx: Table, step_range: str = "step") -> dict[str, float]:
    """Nanoseconds of the captured steps per bucket, from three ``nsys stats`` reports.

    ``gemm/attention``: kernels matching :data:`GEMM_ATTENTION_KEYWORDS`; ``other kernels``:
    every other kernel (element-wise, norms, reductions, optimizer); ``memcpy`` and ``memset``:
    memory operations (``cuda_gpu_mem_time_sum``); ``gpu idle``: the steps' time (the
    ``step`` row of ``nvtx_sum``) minus all kernel and memory-operation time — the time the GPU
    waited, the sign of host overhead. It assumes one stream: nothing on the GPU overlaps.
    """
    names = [str(n) for n in kern["name"]]
    k_tot = np.asarray(kern["total_ns"], dtype=float)
    gemm = float(sum(t for n, t in zip(names, k_tot, strict=True) if is_gemm_or_attention(n)))
    m_names = [str(n).lower() for n in mem["name"]] if len(mem) else []
    m_tot = np.asarray(mem["total_ns"], dtype=float) if len(mem) else np.zeros(0)
    busy = float(k_tot.sum()) + float(m_tot.sum())
    return {
        "gemm/attention": gemm,
        "other kernels": float(k_tot.sum()) - gemm,
        "memcpy": float(sum(t for n, t in zip(m_names, m_tot, strict=True) if "memcpy" in n)),
        "memset": float(sum(t for n, t in zip(m_names, m_tot, strict=True) if "memset" in n)),
        "gpu idle": max(0.0, _range_total(nvtx, step_range) - busy),
    }


def api_time(api: Table) -> dict[str, float]:
    """Host nanoseconds in CUDA API calls (``cuda_api_sum``): ``cuda api`` for the calls that
    do work (launches, copies) and ``sync wait`` for ``*Synchronize*`` calls, which only wait
    for the GPU."""
    names = [str(n) for n in api["name"]] if len(api) else []
    totals = np.asarray(api["total_ns"], dtype=float) if len(api) else np.zeros(0)
    sync = float(sum(t for n, t in zip(names, totals, strict=True) if "synchronize" in n.lower()))
    return {"cuda api": float(totals.sum()) - sync, "sync wait": sync}


def dominant_bucket(buckets: dict[str, float]) -> str:
    """The largest of :data:`BUCKETS` in a :func:`step_buckets` result."""
    return max(BUCKETS, key=lambda b: buckets[b])


def _gpu_events(db: dict[str, Table]) -> list[tuple[int, int, int, str]]:
    """(correlation id, start, end, name) of every kernel, copy and memset in a database."""
    events = [
        (int(c), int(s), int(e), str(n))
        for c, s, e, n in zip(
            db["kernels"]["correlation_id"],
            db["kernels"]["start"],
            db["kernels"]["end"],
            db["kernels"]["short_name"],
            strict=True,
        )
    ]
    for kind in ("memcpy", "memset"):
        table = db.get(kind)
        if table is not None and len(table) and "correlation_id" in table:
            events += [
                (int(c), int(s), int(e), f"[{kind}]")
                for c, s, e in zip(table["correlation_id"], table["start"], table["end"], strict=True)
            ]
    return events


def _launched_in(db: dict[str, Table]) -> list[tuple[str, int, int, list[tuple[int, int, str]]]]:
    """For each NVTX range: (name, start, end, GPU events launched by CUDA calls inside it)."""
    by_corr: dict[int, list[tuple[int, int, str]]] = {}
    for corr, start, end, name in _gpu_events(db):
        by_corr.setdefault(corr, []).append((start, end, name))
    rt, nv = db["runtime"], db["nvtx"]
    calls = sorted(zip(rt["start"], rt["thread"], rt["correlation_id"], strict=True))
    starts = np.asarray([c[0] for c in calls], dtype=np.int64)
    out = []
    for name, start, end, thread in zip(nv["name"], nv["start"], nv["end"], nv["thread"], strict=True):
        lo, hi = np.searchsorted(starts, start, "left"), np.searchsorted(starts, end, "left")
        launched = [ev for c in calls[lo:hi] if c[1] == thread for ev in by_corr.get(int(c[2]), [])]
        out.append((str(name), int(start), int(end), launched))
    return out


def nvtx_gpu_projection(db: dict[str, Table]) -> Table:
    """What ``nsys stats --report nvtx_gpu_proj_sum`` shows: each NVTX range projected onto the
    GPU. An NVTX range opens and closes on the HOST; the GPU runs the work launched inside it
    later. Per range name: ``count``, ``range_ns`` (host time, as ``nvtx_sum``), ``proj_ns``
    (from the start of the first GPU operation launched inside the range to the end of the last),
    ``gpu_ops`` (their number), summed over the instances. Ranges that launched nothing are left out."""
    rows: dict[str, dict[str, Any]] = {}
    for name, start, end, launched in _launched_in(db):
        if not launched:
            continue
        row = rows.setdefault(name, {"name": name, "count": 0, "range_ns": 0.0, "proj_ns": 0.0, "gpu_ops": 0})
        row["count"] += 1
        row["range_ns"] += end - start
        row["proj_ns"] += max(e for _, e, _ in launched) - min(s for s, _, _ in launched)
        row["gpu_ops"] += len(launched)
    ordered = sorted(rows.values(), key=lambda r: -r["proj_ns"])
    return Table.from_rows(
        "nvtx_gpu_proj_sum", ordered, ["name", "count", "range_ns", "proj_ns", "gpu_ops"], db["nvtx"].meta
    )


def launches_by_thread(db: dict[str, Table]) -> Table:
    """Which host threads launched the GPU work: per thread id, the CUDA runtime calls it made,
    the GPU operations they launched and those operations' GPU time. In a PyTorch capture the
    backward kernels come from the autograd engine's own thread (``pt_autograd_0`` in the
    timeline), which no NVTX range pushed on the main thread covers: nsys projects a range only
    onto work launched from the range's own thread."""
    by_corr: dict[int, list[tuple[int, int, str]]] = {}
    for corr, start, end, name in _gpu_events(db):
        by_corr.setdefault(corr, []).append((start, end, name))
    rows: dict[int, dict[str, Any]] = {}
    rt = db["runtime"]
    for thread, corr in zip(rt["thread"], rt["correlation_id"], strict=True):
        row = rows.setdefault(
            int(thread), {"thread": int(thread), "cuda_calls": 0, "gpu_ops": 0, "gpu_ns": 0}
        )
        row["cuda_calls"] += 1
        for start, end, _ in by_corr.get(int(corr), []):
            row["gpu_ops"] += 1
            row["gpu_ns"] += end - start
    ordered = sorted(rows.values(), key=lambda r: -r["gpu_ns"])
    return Table.from_rows(
        "launches_by_thread", ordered, ["thread", "cuda_calls", "gpu_ops", "gpu_ns"], db["runtime"].meta
    )


def kernels_by_range(db: dict[str, Table], range_name: str) -> Table:
    """Kernels launched inside NVTX ranges named ``range_name``, summarized like
    ``cuda_gpu_kern_sum`` (what ``nsys stats --report nvtx_kern_sum`` shows per range)."""
    found = [
        ev
        for name, _, _, launched in _launched_in(db)
        if name == range_name
        for ev in launched
        if not ev[2].startswith("[")
    ]
    if not found and range_name not in set(map(str, db["nvtx"]["name"])):
        raise ValueError(f"No NVTX range named {range_name!r} in this database.")
    events = Table(
        "kernels",
        {"name": [n for _, _, n in found], "duration_ns": [e - s for s, e, _ in found]},
        db["kernels"].meta,
    )
    return summarize(events, report=f"kernels in {range_name!r} ranges")


def plot_step(db: dict[str, Table], step: int = 0, ax: Any = None) -> Any:
    """Gantt view of one NVTX ``step`` range of a :func:`read_sqlite` database: NVTX ranges,
    CUDA API calls (host) and kernels / copies (GPU), in ms from the step's start."""
    import matplotlib.pyplot as plt

    nv = db["nvtx"]
    steps = np.flatnonzero(nv["name"] == "step")
    if step >= len(steps):
        raise ValueError(f"step={step}: the database has {len(steps)} NVTX 'step' ranges.")
    t0, t1 = int(nv["start"][steps[step]]), int(nv["end"][steps[step]])
    i18n.for_plot()
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 3.2))
    lanes = [
        ("NVTX " + n, nv.take(nv["name"] == n), "tab:purple")
        for n in ("step", "dataloader", "forward", "backward", "optimizer")
    ]
    lanes += [
        ("CUDA API", db["runtime"], "tab:orange"),
        (tr("GPU kernels"), db["kernels"], "tab:blue"),
        ("GPU memcpy", db["memcpy"], "tab:red"),
    ]
    for y, (_, table, color) in enumerate(lanes):
        part = table.take((table["start"] < t1) & (table["end"] > t0)) if len(table) else table
        if len(part):
            ax.broken_barh(
                [((s - t0) / 1e6, (e - s) / 1e6) for s, e in zip(part["start"], part["end"], strict=True)],
                (y - 0.4, 0.8),
                color=color,
            )
    ax.set_yticks(range(len(lanes)), [lane[0] for lane in lanes])
    ax.invert_yaxis()
    ax.set_xlabel(tr("ms from the start of the step"))
    tag = tr(" (EXAMPLE data, synthetic)") if nv.meta.get("example") else ""
    ax.set_title(tr("NVTX step {step}", step=step) + tag)
    return ax

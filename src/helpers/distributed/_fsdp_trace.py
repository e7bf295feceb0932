"""FSDP read on a timeline, with chapter 4's loaded traces (:func:`helpers.timeline.load_trace`).

Per profiled step of one rank: the collectives (the backend's events: on CPU
``gloo:all_gather`` and, for the reduce-scatter, ``gloo:all_reduce`` — gloo carries out
``_reduce_scatter_base_`` as an all-reduce of the whole gradient; on GPU the NCCL kernels; on
CPU each collective runs from the training thread's ``c10d::`` call to the end of the backend's
event), FSDP's own ranges on the training thread (``FSDP::all_gather (<unit>)``,
``FSDP::post_backward_reduce (<unit>)``), and compute as chapter 4 defines it (on CPU the
training thread's operators, less the time FSDP's hooks wait inside them; on GPU the kernels).
Times are microseconds as in the trace; results named ``_ms`` are milliseconds.

Torch 2.13 writes no ``record_param_comms`` events on gloo; the sizes of the collectives come
from the shapes and dtypes of the ``c10d::`` operators (``record_shapes=True``).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from ..i18n import tr
from ..timeline._intervals import as_list, clip, cut, exposed, merge_arrays, merge_intervals, subtract
from ..timeline._load import load_trace
from ..timeline._plot import plot_timeline
from ..timeline._steps import _classes, _cpu_threads
from ..timeline._trace import CPU_COMM_RE, DATA_RE, Trace

Interval = tuple[float, float]

ALL_GATHER_RE = re.compile(r"^(gloo|nccl|mpi|ucc):all_gather|^nccl.*AllGather", re.IGNORECASE)
REDUCE_SCATTER_RE = re.compile(
    r"^(gloo|nccl|mpi|ucc):(reduce_scatter|all_reduce)|^nccl.*ReduceScatter", re.IGNORECASE
)
FSDP_RANGE_RE = re.compile(
    r"^FSDP::(all_gather|post_backward_reduce|pre_forward|pre_backward)(?: \((.*)\))?$"
)
C10D_KIND = {
    "c10d::_allgather_base_": "all_gather",
    "c10d::_reduce_scatter_base_": "reduce_scatter",
    "c10d::allreduce_": "all_reduce",
    "c10d::allgather_": "all_gather",
    "c10d::reduce_scatter_": "reduce_scatter",
}
# dtype names as the profiler writes them in "Input type"
DTYPE_BYTES = {
    "float": 4,
    "double": 8,
    "c10::BFloat16": 2,
    "c10::Half": 2,
    "int": 4,
    "long int": 8,
    "short int": 2,
    "signed char": 1,
    "unsigned char": 1,
    "bool": 1,
}


def _trace(trace: Trace | str | Path, keep_args: bool = False) -> Trace:
    if isinstance(trace, Trace):
        if keep_args and trace.columns.args is None:
            return _trace(trace.path, keep_args)
        return trace
    loaded = load_trace(trace, keep_args=keep_args)
    if not isinstance(loaded, Trace):
        raise ValueError(f"{trace} is a folder of ranks; pass one rank's trace file")
    return loaded


def _step_windows(trace: Trace) -> list[tuple[str, float, float]]:
    steps = trace.steps()
    if not steps:
        raise ValueError(f"{trace.path} has no ProfilerStep events; record it with a torch.profiler schedule")
    return [(s.name, s.ts, s.end) for s in steps]


def _bytes_of(args: dict, i: int) -> int | None:
    dims, types = args.get("Input Dims"), args.get("Input type")
    if not isinstance(dims, list) or not isinstance(types, list) or len(dims) <= i or len(types) <= i:
        return None
    size = DTYPE_BYTES.get(types[i])
    if size is None or not isinstance(dims[i], list):
        return None
    return size * int(np.prod(dims[i])) if dims[i] else size


def collectives_by_step(trace: Trace | str | Path) -> list[dict[str, Any]]:
    """Per profiled step, the ``c10d::`` collectives the rank called (count; ``output_bytes``
    and ``input_bytes`` summed from the recorded shapes, None when the trace has no shapes)
    and the backend's events (``gloo:all_gather`` ...: count)."""
    t = _trace(trace, keep_args=True)
    out = []
    events = [e for e in t.events if e.name in C10D_KIND or e.name.startswith(("gloo:", "nccl:"))]
    for name, start, end in _step_windows(t):
        c10d: dict[str, dict[str, Any]] = {}
        backend: dict[str, int] = {}
        for e in events:
            if not start <= e.ts < end:
                continue
            if e.name in C10D_KIND:
                row = c10d.setdefault(C10D_KIND[e.name], {"count": 0, "output_bytes": 0, "input_bytes": 0})
                row["count"] += 1
                for key, i in (("output_bytes", 0), ("input_bytes", 1)):
                    b = _bytes_of(e.args, i)
                    row[key] = None if b is None or row[key] is None else row[key] + b
            else:
                backend[e.name] = backend.get(e.name, 0) + 1
        out.append({"step": name, "c10d": c10d, "backend": backend})
    return out


def _named_ranges(t: Trace, kind: str, start: float, end: float) -> list[dict[str, Any]]:
    found = []
    for e in t.events:
        m = FSDP_RANGE_RE.match(e.name) if e.name.startswith("FSDP::") else None
        if m and m.group(1) == kind and start <= e.ts < end:
            found.append({"unit": m.group(2) or "", "start_us": e.ts, "end_us": e.end})
    return found


def _compute(t: Trace) -> list[Interval]:
    """Chapter 4's compute, less the time FSDP's hooks wait on the CPU. In the backward an
    autograd operator (``autograd::engine::evaluate_function: ...``) runs FSDP's hooks and
    holds the thread while they wait for a collective; that wait is no computation. So inside
    an ``FSDP::`` range only the operators nested in it count."""
    basis, classes = _classes(t)
    if basis != "cpu":
        return classes["compute"]
    c = t.columns
    train = np.isin(c.thread, _cpu_threads(t))
    hooks = train & c.name_mask(re.compile(r"^FSDP::"))
    hs, he = merge_arrays(c.ts[hooks], c.end[hooks])
    ops = train & c.cat_mask("cpu_op") & ~c.name_mask(CPU_COMM_RE) & ~c.name_mask(DATA_RE, "search")
    at = np.searchsorted(hs, c.ts, "right") - 1
    nested = ops & (at >= 0) & (c.end <= he[np.maximum(at, 0)]) if len(hs) else np.zeros(len(c), bool)
    outside = subtract(classes["compute"], as_list(hs, he))
    return merge_intervals(outside + as_list(c.ts[nested], c.end[nested]))


def _spans(
    ts: np.ndarray, end: np.ndarray, call_ts: np.ndarray, call_end: np.ndarray, gpu: bool
) -> list[Interval]:
    """One (start, end) per collective. On CPU, from the training thread's ``c10d::`` call to
    the end of the backend's event: the thread can sit in the call for milliseconds (2 cores
    shared by compute and gloo threads), and that is communication too. The i-th call goes
    with the i-th backend event (a process group runs its collectives in order); when the
    counts differ, or on GPU (where the calls only launch kernels), the backend's events alone."""
    order, calls = np.argsort(ts, kind="stable"), np.argsort(call_ts, kind="stable")
    s, e = ts[order], end[order]
    if not gpu and len(calls) == len(s):
        s, e = np.minimum(s, call_ts[calls]), np.maximum(e, call_end[calls])
    return [(float(a), float(b)) for a, b in zip(s, e, strict=True)]


def fsdp_intervals(trace: Trace | str | Path) -> dict[str, Any]:
    """One rank's FSDP timeline, per profiled step: ``all_gather`` and ``reduce_scatter``, one
    (start, end) µs per collective (see :func:`_spans`), ``compute`` (chapter 4's compute cut to the
    step, less the time FSDP's hooks wait: see :func:`_compute`), ``fsdp_all_gather`` and
    ``fsdp_reduce`` (FSDP's ranges on the training thread, with the unit's name),
    ``backward_start_us`` (the first ``FSDP::pre_backward``) and
    ``forward_start_us``: the end of the first ``FSDP::pre_forward``, when the first unit's
    parameters are gathered and its forward begins. Events belong to the step they start in."""
    t = _trace(trace)
    compute = _compute(t)
    c = t.columns
    kinds = {"all_gather": ALL_GATHER_RE, "reduce_scatter": REDUCE_SCATTER_RE}
    backend = {k: c.name_mask(rx, "search") for k, rx in kinds.items()}
    kind_of = np.array([C10D_KIND.get(n, "") for n in c.names] + [""], dtype=object)
    call_kind = kind_of[c.name]  # the c10d collective each event is, "" for other events
    steps = []
    for name, start, end in _step_windows(t):
        inside = (c.ts >= start) & (c.ts < end)
        pre_fwd = _named_ranges(t, "pre_forward", start, end)
        pre_bwd = _named_ranges(t, "pre_backward", start, end)
        row: dict[str, Any] = {"step": name, "start_us": start, "end_us": end}
        for kind in kinds:
            done = backend[kind] & inside
            calls = (call_kind == kind) & inside & ~c.on_gpu
            row[kind] = _spans(c.ts[done], c.end[done], c.ts[calls], c.end[calls], t.is_gpu)
        row.update(
            compute=cut(compute, start, end),
            fsdp_all_gather=_named_ranges(t, "all_gather", start, end),
            fsdp_reduce=_named_ranges(t, "post_backward_reduce", start, end),
            forward_start_us=pre_fwd[0]["end_us"] if pre_fwd else None,
            backward_start_us=pre_bwd[0]["start_us"] if pre_bwd else None,
        )
        steps.append(row)
    return {"rank": t.rank, "path": t.path, "steps": steps}


def _by_rank(intervals_by_rank: Mapping[int, dict] | Sequence[dict]) -> dict[int, dict]:
    if isinstance(intervals_by_rank, Mapping):
        return dict(intervals_by_rank)
    return {(iv["rank"] if iv.get("rank") is not None else i): iv for i, iv in enumerate(intervals_by_rank)}


def exposed_by_rank(intervals_by_rank: Mapping[int, dict] | Sequence[dict]) -> dict[int, float]:
    """Exposed communication per rank, ms per step (mean over the steps): the union of the
    rank's all-gathers and reduce-scatters not under its compute (chapter 4's
    :func:`helpers.timeline.exposed`). Takes :func:`fsdp_intervals` of each rank."""
    out = {}
    for rank, iv in _by_rank(intervals_by_rank).items():
        per_step = [exposed(s["all_gather"] + s["reduce_scatter"], s["compute"]) for s in iv["steps"]]
        out[rank] = statistics.fmean(per_step) / 1e3 if per_step else float("nan")
    return out


def waiting_rank(intervals_by_rank: Mapping[int, dict] | Sequence[dict]) -> int:
    """The rank whose communication is exposed longest: it waits in the collectives for the
    others (a straggler waits least)."""
    exposed_ms = exposed_by_rank(intervals_by_rank)
    if not exposed_ms:
        raise ValueError("waiting_rank needs the intervals of at least one rank")
    return max(exposed_ms, key=lambda r: exposed_ms[r])


def gather_exposure(trace: Trace | str | Path | dict) -> dict[str, float]:
    """Exposed all-gather time of one rank, ms per step (mean): ``first`` (the first
    all-gather of the step: it gathers the first unit before its forward, and nothing runs
    under it), ``forward`` (the other all-gathers before the backward begins), ``backward``
    (the re-gathers of the backward) and ``total``. Takes a trace or its :func:`fsdp_intervals`."""
    iv = trace if isinstance(trace, dict) else fsdp_intervals(trace)
    rows = []
    for s in iv["steps"]:
        gathers = sorted(s["all_gather"])
        bwd = s["backward_start_us"] if s["backward_start_us"] is not None else float("inf")
        first = gathers[:1]
        fwd = [g for g in gathers[1:] if g[0] < bwd]
        back = [g for g in gathers[1:] if g[0] >= bwd]
        part = {
            k: exposed(v, s["compute"]) / 1e3
            for k, v in (("first", first), ("forward", fwd), ("backward", back))
        }
        part["total"] = exposed(gathers, s["compute"]) / 1e3
        rows.append(part)
    if not rows:
        raise ValueError("the trace has no profiled steps")
    return {k: statistics.fmean(r[k] for r in rows) for k in rows[0]}


def first_gather_exposed(trace: Trace | str | Path | dict) -> float:
    """Exposed time of the all-gather before the first unit's forward, ms per step: the part of
    FSDP's communication that no prefetching can hide."""
    return gather_exposure(trace)["first"]


def compare_prefetch(
    prefetch: Sequence[Trace | str | Path], no_prefetch: Sequence[Trace | str | Path]
) -> dict[str, dict[str, float]]:
    """How prefetching changes the exposed all-gathers: :func:`gather_exposure` averaged over
    the ranks of each recording (ms per step), and ``saved`` = without − with."""
    mean = lambda traces: {  # noqa: E731
        k: statistics.fmean(v)
        for k, v in zip(
            ("first", "forward", "backward", "total"),
            zip(*[gather_exposure(t).values() for t in traces], strict=True),
            strict=True,
        )
    }
    on, off = mean(prefetch), mean(no_prefetch)
    return {"prefetch": on, "no_prefetch": off, "saved": {k: off[k] - on[k] for k in on}}


#: Lanes drawn under chapter 4's rows: FSDP's ranges on the training thread.
FSDP_COLOURS = {"FSDP all-gather": "tab:purple", "FSDP reduce": "tab:red"}


def plot_fsdp(
    traces: Trace | Sequence[Trace | str | Path],
    ax: Any = None,
    start_us: float | None = None,
    end_us: float | None = None,
    title: str = "",
) -> Any:
    """Chapter 4's :func:`helpers.timeline.plot_timeline` of the ranks, with one lane per rank
    added below it for FSDP's ranges: ``FSDP::all_gather (unit)`` and
    ``FSDP::post_backward_reduce (unit)`` (the unit's name written on each); ``title`` defaults
    to "FSDP timeline". Returns the axes."""
    from matplotlib.patches import Patch

    loaded = [traces] if isinstance(traces, Trace) else [_trace(t) for t in traces]
    ax = plot_timeline(loaded, start_us, end_us, ax=ax, title=title or tr("FSDP timeline"))
    starts = [s.ts for t in loaded for s in t.steps()]
    t0 = min(starts)  # plot_timeline's origin: the first profiled step
    lo = t0 if start_us is None else t0 + start_us
    hi = t0 + end_us if end_us is not None else max(float(t.columns.end.max()) for t in loaded)
    labels = [tick.get_text() for tick in ax.get_yticklabels()]
    for t in loaded:
        row = len(labels)
        for label, kind in (("FSDP all-gather", "all_gather"), ("FSDP reduce", "post_backward_reduce")):
            ranges = [r for s in _step_windows(t) for r in _named_ranges(t, kind, s[1], s[2])]
            spans = merge_intervals(clip([(r["start_us"], r["end_us"]) for r in ranges], lo, hi))
            ax.broken_barh(
                [((s - t0) / 1e3, (e - s) / 1e3) for s, e in spans],
                (row - 0.3, 0.6),
                facecolor=FSDP_COLOURS[label],
                alpha=0.6,
            )
            for r in ranges:
                if r["unit"] and lo <= r["start_us"] < hi:
                    ax.text((r["start_us"] - t0) / 1e3, row, r["unit"], fontsize=6, va="center")
        labels.append(tr("rank {rank} · FSDP ranges", rank=t.rank))
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.set_ylim(len(labels) - 0.5, -0.7)
    legend = ax.get_legend()
    handles = list(legend.legend_handles) if legend is not None else []
    names = {"FSDP all-gather": tr("FSDP all-gather"), "FSDP reduce": tr("FSDP reduce")}
    handles += [Patch(color=c, alpha=0.6, label=names[k]) for k, c in FSDP_COLOURS.items()]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    return ax


EXAMPLES = ("fsdp_prefetch", "fsdp_no_prefetch", "fsdp_one_slow")
#: How the shipped traces were recorded (``scripts/record_distributed_traces.py``): the
#: arguments of ``record_fsdp`` common to all three, and the slow rank's delay (seconds).
EXAMPLE_SETTINGS = {"world_size": 2, "layers": 4, "width": 256, "batch": 512, "steps": 3}
EXAMPLE_SLOW_S = 0.05


def example_traces(name: str = "fsdp_prefetch") -> list[Path]:
    """Paths (rank order) of the FSDP traces shipped with the package: example data recorded
    by this project with :func:`helpers.distributed._fsdp.record_fsdp` (torch 2.13, gloo on
    CPU; see ``data/distributed_README.md``): ``"fsdp_prefetch"``, ``"fsdp_no_prefetch"`` or
    ``"fsdp_one_slow"`` (one rank sleeps before every forward)."""
    if name not in EXAMPLES:
        from .._validate import unknown

        raise unknown("example trace", name, EXAMPLES)
    folder = resources.files("helpers") / "data"
    found = sorted(Path(str(p)) for p in folder.iterdir() if p.name.startswith(f"distributed_{name}_rank"))
    if not found:
        raise FileNotFoundError(
            f"the shipped traces {name!r} are missing from {folder}; reinstall the package"
        )
    return found

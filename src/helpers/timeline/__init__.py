"""Chapter 4 — reading the timeline: from a profiler trace to where each step's time went.

* :func:`load_trace` reads Kineto / ``torch.profiler`` chrome traces (CPU-only or GPU, one
  file or one file per rank, a folder of ranks in a process pool) into numpy columns;
  :func:`analyse_ranks` (or :func:`temporal_breakdown` of a folder) gives a per-rank table
  and the straggler summary.
* Interval algebra (:func:`merge_intervals`, :func:`overlap`, :func:`exposed`, ...) is the
  arithmetic behind every number here.
* :func:`step_breakdown` splits each step's wall time into compute, exposed communication,
  other device work and idle gaps (data-loader wait + host overhead); :func:`classify`
  names the bottleneck with its evidence.
* :func:`temporal_breakdown` and :func:`comm_comp_overlap` follow the definitions of
  PyTorch's Holistic Trace Analysis (HTA 0.5.0) on GPU traces, so the figures agree with it.
* Cost models (α + bytes/bandwidth, ring all-reduce, buckets) and a pipeline simulator come
  from :mod:`helpers.timeline._schedule`; the Gantt plot from :mod:`helpers.timeline._plot`; the
  2-process gloo recorder from :mod:`helpers.timeline._ddp`.

Times in traces are microseconds; breakdown fields say their unit in their name.
Benchmark against HTA: ``python -m helpers.timeline bench TRACE [--hta-python PY]``; the
figures of the last recorded run: :func:`benchmark_result`.
"""

# ruff: noqa: F401  (a facade: it re-exports the names of its parts)
from __future__ import annotations

from ._bench import benchmark_result
from ._ddp import record_ddp
from ._hta import TemporalBreakdown, analyse_ranks, comm_comp_overlap, intervals, temporal_breakdown
from ._intervals import (
    _merge,
    as_list,
    clip,
    cut,
    exposed,
    gaps,
    intersect,
    intersect_arrays,
    merge_arrays,
    merge_intervals,
    overlap,
    subtract,
    union_arrays,
    union_length,
)
from ._load import EXAMPLE_SLOW_S, example_traces, load_trace
from ._plot import plot_pipeline, plot_timeline
from ._ranks import RankReport, RankRow, load_many, rank_report, run_per_file
from ._schedule import (
    PipelineSchedule,
    alpha_beta_time,
    balance_stages,
    bubble_fraction,
    bucket_sizes,
    bucketed_allreduce_time,
    latency_share,
    max_saving,
    min_bucket_bytes,
    min_exposed,
    min_microbatches,
    optimal_splits,
    overlapped_backward,
    ring_allreduce_time,
    simulate_pipeline,
    stage_times,
    step_with_overlap,
)
from ._steps import (
    LABELS,
    NOISE_ERRORS,
    STRAGGLER_FLOOR,
    StepBreakdown,
    Verdict,
    classify,
    classify_ranks,
    mean_step,
    own_time,
    rank_table,
    slowest_rank,
    step_breakdown,
    straggler,
    straggler_evidence,
)
from ._trace import (
    COMM_KERNEL_RE,
    CPU_COMM_RE,
    DATA_RE,
    NOT_COMPUTE_RE,
    Event,
    Trace,
)
from ._trace_read import json_parser, rank_from_name, read_trace, trace_files

__all__ = [
    "Event",
    "Trace",
    "load_trace",
    "example_traces",
    "record_ddp",
    "merge_intervals",
    "union_length",
    "intersect",
    "subtract",
    "clip",
    "overlap",
    "exposed",
    "gaps",
    "StepBreakdown",
    "step_breakdown",
    "mean_step",
    "Verdict",
    "classify",
    "own_time",
    "straggler",
    "straggler_evidence",
    "slowest_rank",
    "STRAGGLER_FLOOR",
    "NOISE_ERRORS",
    "classify_ranks",
    "rank_table",
    "TemporalBreakdown",
    "temporal_breakdown",
    "comm_comp_overlap",
    "alpha_beta_time",
    "ring_allreduce_time",
    "latency_share",
    "min_bucket_bytes",
    "bucket_sizes",
    "bucketed_allreduce_time",
    "overlapped_backward",
    "min_exposed",
    "max_saving",
    "step_with_overlap",
    "bubble_fraction",
    "min_microbatches",
    "stage_times",
    "optimal_splits",
    "balance_stages",
    "PipelineSchedule",
    "simulate_pipeline",
    "plot_timeline",
    "plot_pipeline",
    "intervals",
    "cut",
    "analyse_ranks",
    "RankReport",
    "RankRow",
    "json_parser",
    "benchmark_result",
]

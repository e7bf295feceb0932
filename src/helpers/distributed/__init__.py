"""Chapter 10 — sharded data parallel: collectives, DDP's settings and FSDP2, measured on real
ranks (processes on this machine: gloo over 127.0.0.1 on a CPU, NCCL with one GPU per rank).

* Ring arithmetic (:func:`ring_bytes`, :func:`ring_time`) and the α–β model *fitted* to
  measured collectives (:func:`measure_collectives`, :func:`fit_alpha_beta`).
* DDP's settings on real ranks (:func:`bucket_sweep`, :func:`no_sync_allreduces`,
  :func:`bucket_view_memory`, :func:`static_graph_comparison`), reusing chapter 4's
  ``timeline.record_ddp`` and its trace breakdown.
* FSDP2 (``fully_shard``): :func:`record_fsdp` (what each rank holds, one trace per rank),
  :func:`compare_fsdp` (settings timed side by side, with memory), the per-rank arithmetic
  (:func:`shard_rows`, :func:`rank_state_bytes`, :func:`fsdp_bytes_per_step`), and FSDP read on
  a timeline (:func:`fsdp_intervals`, :func:`exposed_by_rank`, :func:`gather_exposure`,
  :func:`plot_fsdp`); the same recording under torchrun (:func:`torchrun_fsdp`).
* Choosing a setting from verdicts and memory (:func:`choose_setting`), and a step on 8 or 64
  GPUs as a model with its assumptions (:func:`predict_step`, :func:`scaling_table`).

Ranks start through :func:`run_ranks` (chapter 4's process handling): every rank stops when
one fails or the time runs out. Every speed comparison goes through the course's interleaved
verdict (:mod:`helpers.distributed._compare`).
"""

# ruff: noqa: F401  (a facade: it re-exports the names of its parts)
from __future__ import annotations

from ._choose import REASONS, acceptable_choices, choose_setting, rows_from
from ._collectives import DEFAULT_SIZES_BYTES, CollectiveRow, CollectiveTable, measure_collectives
from ._compare import compare_settings, time_interleaved
from ._ddp_knobs import (
    BucketSweep,
    allreduces_per_step,
    bucket_sweep,
    bucket_view_memory,
    compare_ddp_settings,
    no_sync_allreduces,
    static_graph_comparison,
)
from ._fsdp import FsdpRun, fsdp_bytes_per_step, record_fsdp
from ._fsdp_compare import FsdpComparison, compare_fsdp
from ._fsdp_trace import (
    collectives_by_step,
    compare_prefetch,
    example_traces,
    exposed_by_rank,
    first_gather_exposed,
    fsdp_intervals,
    gather_exposure,
    plot_fsdp,
    waiting_rank,
)
from ._launch import LOOPBACK_ENV, RankError, pick_device, run_ranks
from ._ring import COLLECTIVES, AlphaBetaFit, fit_alpha_beta, ring_bytes, ring_steps, ring_time
from ._scale import STRATEGIES, ScalePrediction, ScaleTable, predict_step, scaling_table
from ._shards import ledger_share, rank_state_bytes, shard_rows
from ._sockets import tcp_endpoints
from ._torchrun import torchrun_command, torchrun_fsdp

__all__ = [
    "COLLECTIVES",
    "REASONS",
    "STRATEGIES",
    "LOOPBACK_ENV",
    "AlphaBetaFit",
    "BucketSweep",
    "CollectiveRow",
    "CollectiveTable",
    "FsdpComparison",
    "FsdpRun",
    "RankError",
    "ScalePrediction",
    "ScaleTable",
    "pick_device",
    "run_ranks",
    "ring_bytes",
    "ring_steps",
    "ring_time",
    "fit_alpha_beta",
    "measure_collectives",
    "bucket_sweep",
    "no_sync_allreduces",
    "bucket_view_memory",
    "static_graph_comparison",
    "compare_ddp_settings",
    "allreduces_per_step",
    "record_fsdp",
    "compare_fsdp",
    "fsdp_bytes_per_step",
    "shard_rows",
    "rank_state_bytes",
    "ledger_share",
    "fsdp_intervals",
    "collectives_by_step",
    "exposed_by_rank",
    "waiting_rank",
    "gather_exposure",
    "first_gather_exposed",
    "compare_prefetch",
    "plot_fsdp",
    "example_traces",
    "acceptable_choices",
    "choose_setting",
    "rows_from",
    "predict_step",
    "scaling_table",
    "torchrun_command",
    "torchrun_fsdp",
    "time_interleaved",
    "compare_settings",
    "tcp_endpoints",
]

"""Chapter 9 — the capstone: a performance report for a small GPT, from baseline to tuned.

A small GPT (``helpers.models``) learns the shipped public-domain corpus one byte per token,
through a real ``DataLoader``. The baseline is fixed and measured; then one change at a time
is tried on the configuration kept so far — no per-step sync, DataLoader workers (and pinned
memory on a GPU), bf16 autocast, a fused optimizer, activation checkpointing, ``torch.compile``
— each measured the same way and kept or reverted. The result is a report in the course's
template (experiment, hardware, config, throughput, trace findings, next action), written as
Markdown and JSON with a comparison table and plots, and read back.

Parts:

* :mod:`~helpers.report.corpus` — the corpus, a byte tokenizer, datasets (a deliberately slow
  one) and the DataLoader settings;
* :mod:`~helpers.report.tuning` — :class:`RunConfig`, the baseline, the changes, and the small
  functions behind each change (the integration points with chapters 5–8);
* :mod:`~helpers.report.runner` — :func:`run_config` (one measured row) and :class:`Tuner`;
* :mod:`~helpers.report.phases` — phase times of each step from a profiler trace;
* :mod:`~helpers.report.synthetic` — GENERATED example traces with chosen phase times;
* :mod:`~helpers.report.rules` — MFU / HFU, deltas, the data-stall rule, the bottleneck class,
  keep or revert (plain functions of plain numbers);
* :mod:`~helpers.report.document` — the report: Markdown, JSON, plot, reading back, and the
  reports recorded by this project.

``python -m helpers.report record --device cpu|cuda [--full]`` runs the whole capstone and
writes its report (how the shipped recordings were made).
"""

from __future__ import annotations

from .corpus import (
    CORPUS_TITLE,
    ByteTokenizer,
    SlowDataset,
    TokenWindows,
    batches,
    corpus_bytes,
    corpus_sha256,
    corpus_text,
    corpus_tokens,
    make_dataset,
    make_loader,
)
from .document import (
    COLUMNS,
    RECORDED_TRACES,
    Report,
    build_report,
    format_row,
    parse_markdown_table,
    plot_report,
    read_report,
    recorded_report,
    recorded_row_trace,
    recorded_trace,
    table_row,
)
from .examples import example_gpu_reports
from .phases import device_idle_share, mean_phases, step_phases, top_operators
from .rules import (
    BOTTLENECK_PHASES,
    DOUBTS,
    FIXES,
    LOSS_CURVE_SHARE,
    LOSS_TOLERANCE,
    NEXT_ACTIONS,
    STALL_THRESHOLD,
    TOUCHES,
    acceptable_next_actions,
    bottleneck_class,
    bottleneck_phase,
    check_findings,
    compare,
    data_stall,
    decide,
    decide_why,
    derive,
    doubt,
    kept_changes,
    kept_row,
    loss_gap,
    memory_mb,
    mfu_hfu,
    moved_training,
    next_actions_for,
    over_budget,
    report_findings,
    room_ms,
    speedup_bound,
)
from .runner import Trainer, Tuner, executed_flops, loss_curve, peak_for, run_config
from .synthetic import write_trace as write_example_trace
from .tuning import (
    Change,
    RunConfig,
    apply_change,
    apply_checkpointing,
    autocast_context,
    baseline_config,
    compile_model,
    make_optimizer,
    saved_bytes,
    tuning_steps,
)

__all__ = [
    "CORPUS_TITLE",
    "ByteTokenizer",
    "SlowDataset",
    "TokenWindows",
    "batches",
    "corpus_bytes",
    "corpus_sha256",
    "corpus_text",
    "corpus_tokens",
    "make_dataset",
    "make_loader",
    "COLUMNS",
    "Report",
    "build_report",
    "format_row",
    "parse_markdown_table",
    "plot_report",
    "read_report",
    "recorded_report",
    "recorded_trace",
    "recorded_row_trace",
    "RECORDED_TRACES",
    "table_row",
    "device_idle_share",
    "mean_phases",
    "step_phases",
    "write_example_trace",
    "top_operators",
    "example_gpu_reports",
    "BOTTLENECK_PHASES",
    "DOUBTS",
    "FIXES",
    "LOSS_CURVE_SHARE",
    "LOSS_TOLERANCE",
    "NEXT_ACTIONS",
    "STALL_THRESHOLD",
    "TOUCHES",
    "bottleneck_class",
    "bottleneck_phase",
    "check_findings",
    "compare",
    "data_stall",
    "decide",
    "decide_why",
    "doubt",
    "kept_changes",
    "kept_row",
    "loss_gap",
    "memory_mb",
    "mfu_hfu",
    "moved_training",
    "acceptable_next_actions",
    "next_actions_for",
    "over_budget",
    "speedup_bound",
    "report_findings",
    "room_ms",
    "Trainer",
    "Tuner",
    "derive",
    "executed_flops",
    "peak_for",
    "run_config",
    "loss_curve",
    "Change",
    "RunConfig",
    "apply_change",
    "apply_checkpointing",
    "autocast_context",
    "baseline_config",
    "compile_model",
    "make_optimizer",
    "saved_bytes",
    "tuning_steps",
]

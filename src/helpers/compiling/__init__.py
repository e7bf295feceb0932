"""Chapter 7 — ``torch.compile``: what it costs, what it buys, and what makes it stop.

* first call vs steady state, and the break-even step count: :func:`break_even_steps`;
* one report of a compiled function — first call, eager and compiled medians with spread,
  break-even, graphs and graph breaks with reasons, recompilations for other shapes with
  dynamo's reasons, and whether the output matches eager: :func:`report`;
* graph breaks (``torch._dynamo.explain``): :func:`graph_breaks`, with :func:`noisy_step`
  as the example;
* recompilations as shapes change, under torch.compile's default, ``dynamic=False``,
  ``dynamic=True`` and ``mark_dynamic``: :func:`recompiles`, :func:`count_compiles`;
* where fusion pays — the bytes an element-wise chain moves eagerly and fused:
  :func:`chain_traffic`, :data:`CHAIN`, :func:`bias_gelu_dropout_residual`;
* what a compiled training step saves for the backward pass, and what the partitioner
  recomputes instead: :func:`saved_for_backward`;
* why a faster part may not make the step faster: :func:`step_speedup`, and
  :func:`step_speedups` for a measured speed-up with its interval;
* whether Inductor can generate code here (a C++ compiler, Triton): :func:`pick_backend`;
* the kernels Inductor really generated for a function, with what each reads and writes:
  :func:`generated_kernels`;
* cold, warm and mega-cache starts, each in a fresh process: :func:`cache_starts`;
* changing sequence lengths under ``mark_dynamic`` (with bounds) and ``maybe_mark_dynamic``:
  :func:`length_recompiles`;
* the pitfalls of ``mode="reduce-overhead"`` (CUDA graphs), on a CUDA device only:
  :func:`cudagraph_pitfalls`.

Sources: the PyTorch documentation of ``torch.compile``, ``torch._dynamo.explain`` and
dynamic shapes; chapter 1 for the traffic model. Run ``python -m helpers.compiling`` for
the report of the fused chain on this device.
"""

from ._caching import ARMS, CacheStarts, Start, cache_starts
from ._cudagraphs import cudagraph_pitfalls
from ._dynamic import MARKS, LengthEvent, LengthRun, attention_scores, length_recompiles, one_length_shortcut
from ._fusion import (
    CHAIN,
    GeneratedCode,
    Kernel,
    Traffic,
    bias_gelu_dropout_residual,
    chain_inputs,
    chain_sizes,
    chain_traffic,
    generated_kernels,
)
from ._graphs import (
    MODES,
    BreakReason,
    CompileEvent,
    GraphReport,
    count_compiles,
    graph_breaks,
    noisy_step,
    quiet,
    recompiles,
    shape_probe,
)
from ._partition import (
    PARTITIONERS,
    RegionalCompile,
    Saved,
    SavedForBackward,
    host_overhead_per_op,
    regional_compile,
    saved_for_backward,
    whole_step_saved,
    whole_step_saved_by_op,
)
from ._report import (
    CompileReport,
    ShapeCheck,
    break_even_steps,
    cache_info,
    pick_backend,
    report,
    step_speedup,
    step_speedups,
)
from ._stages import StageTimes, stage_times

__all__ = [
    "ARMS",
    "CacheStarts",
    "Start",
    "cache_starts",
    "cudagraph_pitfalls",
    "MARKS",
    "LengthEvent",
    "LengthRun",
    "attention_scores",
    "length_recompiles",
    "one_length_shortcut",
    "GeneratedCode",
    "Kernel",
    "generated_kernels",
    "CHAIN",
    "MODES",
    "PARTITIONERS",
    "RegionalCompile",
    "Saved",
    "SavedForBackward",
    "regional_compile",
    "saved_for_backward",
    "whole_step_saved",
    "whole_step_saved_by_op",
    "host_overhead_per_op",
    "BreakReason",
    "ShapeCheck",
    "CompileEvent",
    "CompileReport",
    "GraphReport",
    "Traffic",
    "bias_gelu_dropout_residual",
    "break_even_steps",
    "cache_info",
    "chain_inputs",
    "chain_sizes",
    "chain_traffic",
    "count_compiles",
    "graph_breaks",
    "noisy_step",
    "pick_backend",
    "quiet",
    "recompiles",
    "report",
    "shape_probe",
    "step_speedup",
    "step_speedups",
    "StageTimes",
    "stage_times",
]

"""Named ranges that show up in both Nsight Systems and PyTorch profiler traces (chapter 3).

``annotate(name)`` opens a ``torch.profiler.record_function`` range (always: CPU and GPU
traces recorded by ``torch.profiler`` show it) and an NVTX range when an NVTX library is
usable (Nsight Systems shows it). On a CPU-only torch build ``torch.cuda.nvtx`` raises
"NVTX functions not installed"; ``annotate`` then falls back to the optional ``nvtx``
package from PyPI, or to no NVTX at all, and never fails.

Steady-state capture: :func:`steady_state_schedule` (a ``torch.profiler.schedule`` that skips
the warm-up steps and records 3-5 steps) and :class:`CudaProfilerRange` (calls
``cudaProfilerStart``/``Stop`` around the same steps, for ``nsys --capture-range=cudaProfilerApi``).
The recorders here hide the profiler's native ``USDT ... profiler_start`` notices
(:mod:`helpers._quiet`), so notebook cells that profile write nothing to stderr.

The parts: :mod:`._annotate` (the ranges and their NVTX backend), :mod:`._record` (profiling a
function into a chrome trace), :mod:`._ranges` (the ranges of a trace, read by chapter 4's
trace reader), :mod:`._loop` (the demo training loop and ``python -m helpers.nvtx``) and
:mod:`._schedule` (steady-state capture) and :mod:`._syncdebug` (PyTorch's sync debug mode,
``CUDA_LAUNCH_BLOCKING``).
"""

from __future__ import annotations

from ._annotate import annotate, nvtx_backend, opened_counts, try_torch_nvtx  # noqa: F401
from ._loop import STEP_RANGES, _demo_main, annotated_training_loop, demo_setup  # noqa: F401
from ._ranges import Range, count_ranges, format_ranges, ranges_inside, trace_ranges  # noqa: F401
from ._record import record_cpu_trace, record_training_trace, top_operators  # noqa: F401
from ._schedule import (  # noqa: F401
    CudaProfilerRange,
    format_schedule,
    recorded_steps,
    schedule_actions,
    steady_state_kwargs,
    steady_state_schedule,
)
from ._syncdebug import SyncReport, find_syncs, launch_blocking, sync_examples  # noqa: F401

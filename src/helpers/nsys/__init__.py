"""Nsight Systems from Python: build the command lines, read what nsys writes (chapter 3).

- :func:`profile_command`, :func:`stats_command`, :func:`export_command` build the ``nsys``
  command lines (single process and torchrun, ``--trace`` sets, the cudaProfilerApi or NVTX
  capture range, one report per rank, or only some ranks; the optional switches of
  :func:`extra_options`: CUDA graph nodes, GPU metrics, Python backtraces, CUDA memory usage,
  an NVTX domain) as an argv list plus a shell string.
- :func:`read_stats_csv` reads the CSV that ``nsys stats --format csv`` prints (reports
  ``cuda_gpu_kern_sum``, ``cuda_api_sum``, ``cuda_gpu_mem_time_sum``, ``nvtx_sum``, ...): columns
  are matched by name, banner lines before each table are skipped.
- :func:`read_sqlite` reads an ``nsys export --type sqlite`` database (kernels, NVTX ranges with
  names resolved through ``StringIds``, memcpy, memset, CUDA runtime API) with ``sqlite3``.
- :func:`top_kernel`, :func:`step_buckets`, :func:`dominant_bucket` answer the first questions
  asked of a stats report; :func:`nvtx_gpu_projection` and :func:`kernels_by_range` show what
  the GPU did inside each NVTX range (``nsys stats`` reports ``nvtx_gpu_proj_sum`` and
  ``nvtx_kern_sum``), since an NVTX range itself measures host time.

Nsight Systems is usually not installed (and a CPU cannot be profiled for CUDA work): the
package ships EXAMPLE outputs in nsys's formats (:func:`example_path`), written by the course's
``scripts/make_nsys_examples.py`` from a described synthetic workload
(:func:`describe_example`). They are labelled as examples everywhere; they are not captures.

The parts: :mod:`._commands` (command lines), :mod:`._table` (the :class:`Table` type),
:mod:`._stats_csv` and :mod:`._sqlite` (the two readers), :mod:`._analysis` (the first
questions), :mod:`._examples` (the shipped example data) and :mod:`._capture` (a real capture).
"""

from __future__ import annotations

from ._analysis import (  # noqa: F401
    BUCKETS,
    GEMM_ATTENTION_KEYWORDS,
    api_time,
    dominant_bucket,
    is_gemm_or_attention,
    kernels_by_range,
    launches_by_thread,
    nvtx_gpu_projection,
    plot_step,
    step_buckets,
    top_kernel,
)
from ._capture import Capture, capture_demo, example_or_capture  # noqa: F401
from ._commands import (  # noqa: F401
    DEFAULT_REPORTS,
    DEFAULT_TRACE,
    Command,
    export_command,
    extra_options,
    nsys_available,
    parse_profile_command,
    profile_command,
    stats_command,
    supports_trace,
)
from ._examples import DATA, EXAMPLE_NOTE, EXAMPLE_SCENARIOS, describe_example, example_path  # noqa: F401
from ._sqlite import MEMCPY_KINDS, MEMORY_KINDS, api_name, read_sqlite  # noqa: F401
from ._stats_csv import parse_stats_csv, read_stats_csv  # noqa: F401
from ._table import Table, summarize  # noqa: F401

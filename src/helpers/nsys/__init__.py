"""Nsight Systems from Python: build the command lines, read what nsys writes (chapter 3).

- :func:`profile_command`, :func:`stats_command`, :func:`export_command` build the ``nsys``
  command lines (single process and torchrun, ``--trace`` sets, the cudaProfilerApi or NVTX
  capture range, one report per rank, or only some ranks) as an argv list plus a shell string.
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
package ships EXAMPLE outputs in nsys's formats, written by :func:`make_nsys_examples` from a
described synthetic workload. They are labelled as examples everywhere; they are not captures.
"""

from __future__ import annotations

from ._analysis import (  # noqa: F401
    BUCKETS,
    GEMM_ATTENTION_KEYWORDS,
    api_time,
    dominant_bucket,
    is_gemm_or_attention,
    kernels_by_range,
    nvtx_gpu_projection,
    plot_step,
    step_buckets,
    top_kernel,
)
from ._capture import (  # noqa: F401
    DATA,
    EXAMPLE_SCENARIOS,
    Capture,
    capture_demo,
    describe_example,
    example_or_capture,
    example_path,
    make_nsys_examples,
)
from ._commands import (  # noqa: F401
    DEFAULT_REPORTS,
    DEFAULT_TRACE,
    Command,
    export_command,
    nsys_available,
    parse_profile_command,
    profile_command,
    stats_command,
    supports_trace,
)
from ._tables import (  # noqa: F401
    EXAMPLE_NOTE,
    MEMCPY_KINDS,
    MEMORY_KINDS,
    Table,
    api_name,
    parse_stats_csv,
    read_sqlite,
    read_stats_csv,
    summarize,
)

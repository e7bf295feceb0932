"""Chapter 5 — where training memory goes.

* :func:`model_state_bytes` — the ledger: parameters, gradients, optimizer state, fp32 master
  weights, per data-parallel rank with ZeRO stages 1–3 (Rajbhandari et al. 2020).
* :func:`activation_bytes` — one transformer layer's activations (Korthikanti et al. 2022),
  and :func:`course_saved_bytes` — the course model's, exactly.
* :func:`saved_tensor_bytes` — measure the storage autograd saves for backward.
* :func:`track` — peak memory of whole training steps by category (PyTorch's MemTracker),
  with fake tensors for models far larger than the machine.
* :func:`cuda_memory` — allocated, reserved and peak on a GPU, with a memory snapshot and a
  timeline; on a CPU it says it is not available. :func:`cpu_snapshot` — one CPU step's profile
  converted to the memory viewer's snapshot format.
* :class:`MemoryExplorer` — what fits on which GPU, as a widget; :func:`estimate` — the peak.
* In practice: :func:`read_oom` (an out-of-memory message's numbers), :func:`offload_seconds`
  (moving memory to the host), :func:`pipeline_activations` (microbatches in flight),
  :func:`chunked_loss_peak` (the loss in slices, without the full logits).
"""

from ._course import block_saved_bytes, course_saved_bytes, head_saved_bytes
from ._cpu_snapshot import CpuSnapshot, cpu_snapshot
from ._cuda import NOT_ON_CPU, CudaMemory, cuda_memory, plot_timeline, timeline_from_snapshot
from ._explorer import (
    OPTIMIZER_IMPLS,
    MemoryExplorer,
    ModelShape,
    estimate,
    gpu_capacity_bytes,
    max_batch,
    model_presets,
    plot_estimates,
)
from ._ledger import (
    OPTIMIZER_STATES,
    RECOMPUTE,
    STATE_DTYPES,
    Ledger,
    activation_breakdown,
    activation_bytes,
    adam_bytes_per_parameter,
    model_state_bytes,
)
from ._practice import (
    EXAMPLE_OOM,
    HOST_ADAMW_BYTES,
    SCHEDULES,
    OffloadCost,
    OutOfMemory,
    chunked_loss_model,
    chunked_loss_peak,
    offload_cost,
    offload_seconds,
    pipeline_activations,
    read_oom,
)
from ._saved import SavedBytes, saved_tensor_bytes
from ._track import CATEGORIES, StepMemory, StepPeak, track

__all__ = [
    "NOT_ON_CPU",
    "CudaMemory",
    "MemoryExplorer",
    "ModelShape",
    "cuda_memory",
    "estimate",
    "max_batch",
    "model_presets",
    "plot_estimates",
    "plot_timeline",
    "timeline_from_snapshot",
    "CATEGORIES",
    "OPTIMIZER_STATES",
    "OPTIMIZER_IMPLS",
    "gpu_capacity_bytes",
    "RECOMPUTE",
    "STATE_DTYPES",
    "Ledger",
    "SavedBytes",
    "StepMemory",
    "StepPeak",
    "activation_breakdown",
    "activation_bytes",
    "block_saved_bytes",
    "course_saved_bytes",
    "head_saved_bytes",
    "adam_bytes_per_parameter",
    "model_state_bytes",
    "saved_tensor_bytes",
    "track",
    "EXAMPLE_OOM",
    "HOST_ADAMW_BYTES",
    "SCHEDULES",
    "OffloadCost",
    "CpuSnapshot",
    "cpu_snapshot",
    "OutOfMemory",
    "chunked_loss_model",
    "chunked_loss_peak",
    "offload_cost",
    "offload_seconds",
    "pipeline_activations",
    "read_oom",
]

"""What a capstone run is made of: the fixed configuration, and the changes tried one at a time.

Each change is one small function with a plain name, so that a later chapter's helper can
take its place without touching the rest (the integration points):

==========================  =====================================================  ============
function here               what it does                                           chapter
==========================  =====================================================  ============
:func:`saved_bytes`         bytes saved for backward (``saved_tensors_hooks``)      5 (memory)
:func:`apply_checkpointing` per-block activation checkpointing (non-reentrant)      6
:func:`compile_model`       ``torch.compile`` with the on-disk inductor cache       7
:func:`autocast_context`    bf16 autocast on CPU or CUDA                            8
:func:`make_optimizer`      AdamW, plain (``foreach``) or ``fused``                 2 / 9
==========================  =====================================================  ============
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from .. import models
from .._validate import flag as _flag
from .._validate import positive, unknown, whole_fields

PRECISIONS = ("fp32", "bf16")


@dataclass(frozen=True)
class RunConfig:
    """Everything that is fixed for one measured configuration (step 1: a fixed baseline)."""

    model: models.GPTConfig
    batch_size: int
    seq_len: int
    device: str = "cpu"
    name: str = "baseline"
    change: str = "eager fp32, AdamW, DataLoader in the main process, loss read every step"
    lr: float = 1e-3
    warmup: int = 3  # untimed steps (cold call, allocator, caches, compilation)
    windows: int = 4  # timed windows; each gives one step-time sample (window time / steps)
    steps_per_window: int = 5
    trace_steps: int = 3  # steady-state steps recorded by the profiler, after the timed ones
    data_delay_ms: float = 0.0  # per batch, spread over its samples: the slow dataset
    workers: int = 0
    prefetch_factor: int = 2  # batches each worker keeps ready; the queue is workers × this
    pin_memory: bool = False
    sync_every_step: bool = True  # read the loss with .item() every step (a host-device sync)
    precision: str = "fp32"
    compile: bool = False
    fused_optimizer: bool = False
    checkpointing: bool = False
    memory_budget_mb: float | None = None  # None: no memory limit to respect
    threads: int | None = None  # torch CPU threads during the run; None: leave torch's setting
    seed: int = 0

    def __post_init__(self) -> None:
        whole_fields(
            self,
            "batch_size",
            "seq_len",
            "warmup",
            "windows",
            "steps_per_window",
            "trace_steps",
            "prefetch_factor",
        )
        whole_fields(self, "workers", minimum=0)
        if self.threads is not None:
            whole_fields(self, "threads")
        positive(lr=self.lr)
        if self.seq_len > self.model.seq_len:
            raise ValueError(f"seq_len {self.seq_len} exceeds the model's context {self.model.seq_len}")
        if self.precision not in PRECISIONS:
            raise unknown("precision", self.precision, PRECISIONS)
        if not self.data_delay_ms >= 0:
            raise ValueError(f"data_delay_ms must be >= 0, got {self.data_delay_ms!r}")

    @property
    def timed_steps(self) -> int:
        return self.windows * self.steps_per_window

    @property
    def loss_steps(self) -> int:
        """Steps trained before the loss is read: warm-up plus timed steps."""
        return self.warmup + self.timed_steps

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.seq_len

    def settings(self) -> dict[str, Any]:
        """The configuration as plain data (for the report)."""
        out = asdict(self)
        out["model"] = {k: v for k, v in asdict(self.model).items()}
        return out

    def _threads_note(self) -> str:
        if self.threads is None:
            return ""
        return f" ({self.threads} thread{'s' if self.threads > 1 else ''})"

    def describe(self) -> str:
        m = self.model
        return (
            f"model layers={m.n_layers}, hidden={m.d_model}, heads={m.n_heads}, vocab={m.vocab_size} "
            f"(bytes), {m.num_params():,} params; batch={self.batch_size}, seq={self.seq_len}, "
            f"AdamW lr={self.lr:g}, {self.precision}, device={self.device}{self._threads_note()}; "
            f"warm-up {self.warmup} "
            f"steps, then {self.windows} windows × {self.steps_per_window} timed steps"
        )


def baseline_config(device: str | torch.device = "cpu", quick: bool = True) -> RunConfig:
    """The fixed baseline: a tiny GPT on a CPU (quick) or GPT-2 small's shape on a GPU.

    The data loader is deliberately slow (a sleep per sample): the baseline has a data
    stall to find. The GPU configurations use the byte vocabulary (256) with GPT-2 small's
    12 layers, 768 hidden units and 12 heads. On a CPU the runs use one thread: these models
    are too small to gain from splitting each operation, and two threads that wait for each
    other slow down badly on a small machine that other programs share.
    """
    _flag(quick=quick)
    dev = torch.device(device) if not isinstance(device, torch.device) else device
    if dev.type == "cuda":
        seq = 512 if quick else 1024
        model = models.GPTConfig(
            vocab_size=256, seq_len=seq, d_model=768, n_layers=12, n_heads=12, name="gpt2-small-bytes"
        )
        # timed runs of at least 3 × the loader's queue (8 workers × 2 batches): see rules.flags
        return RunConfig(
            model,
            batch_size=16 if quick else 32,
            seq_len=seq,
            device="cuda",
            lr=3e-4,
            warmup=5,
            windows=4 if quick else 5,
            steps_per_window=12 if quick else 10,
            data_delay_ms=60.0 if quick else 200.0,
            memory_budget_mb=None,
        )
    if quick:
        model = models.GPTConfig(
            vocab_size=256, seq_len=64, d_model=64, n_layers=2, n_heads=4, name="gpt-bytes-tiny"
        )
        # 5 windows × 5 steps: at least 3 × the loader's queue (4 workers × 2 batches)
        return RunConfig(
            model, batch_size=8, seq_len=64, device="cpu", windows=5, data_delay_ms=20.0, threads=1
        )
    model = models.GPTConfig(
        vocab_size=256, seq_len=128, d_model=128, n_layers=4, n_heads=4, name="gpt-bytes-small-cpu"
    )
    return RunConfig(
        model,
        batch_size=16,
        seq_len=128,
        device="cpu",
        windows=5,
        steps_per_window=6,
        data_delay_ms=40.0,
        threads=1,
    )


@dataclass(frozen=True)
class Change:
    """One change tried on the current configuration."""

    name: str
    what: str  # one line for the report
    fields: dict[str, Any] = field(default_factory=dict)


def worker_count(device: str) -> int:
    """DataLoader workers for ``device``: 4 on a CPU, 8 beside a GPU. The slow dataset's cost is
    waiting, not computing, so workers hide it even on a 2-core machine: n workers deliver a
    batch every delay / n on average."""
    return 4 if device == "cpu" else 8


def tuning_steps(device: str = "cpu") -> list[Change]:
    """The changes of the capstone, in the order they are tried."""
    gpu = device.startswith("cuda")
    return [
        Change(
            "no_sync",
            "keep the loss on the device; read it once at the end (no per-step sync)",
            {"sync_every_step": False},
        ),
        Change(
            "workers",
            f"DataLoader: {worker_count(device)} worker processes read ahead"
            + (" + pinned memory, non-blocking copies" if gpu else ""),
            {"workers": worker_count(device), "pin_memory": gpu},
        ),
        Change("bf16", "bf16 autocast for the forward pass", {"precision": "bf16"}),
        Change(
            "fused",
            "fused AdamW (the whole update in one fused pass, not a per-parameter loop)",
            {"fused_optimizer": True},
        ),
        Change(
            "checkpoint",
            "activation checkpointing per block (recompute in backward)",
            {"checkpointing": True},
        ),
        Change("compile", "torch.compile (inductor)", {"compile": True}),
    ]


def apply_change(config: RunConfig, change: Change) -> RunConfig:
    """``config`` with one change applied (and named after it)."""
    return replace(config, name=change.name, change=change.what, **change.fields)


# --------------------------------------------------------------------------- integration points


def autocast_context(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """bf16 autocast on ``device`` for ``precision == "bf16"``; a no-op for fp32.
    Integration point: chapter 8 (mixed precision)."""
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


class CheckpointedBlock(nn.Module):
    """A block whose activations are recomputed in backward instead of being saved."""

    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.block = block

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return checkpoint(self.block, x, use_reentrant=False)


def apply_checkpointing(model: models.TinyGPT) -> models.TinyGPT:
    """Wrap every transformer block in non-reentrant activation checkpointing (in place).
    Integration point: chapter 6 (activation checkpointing)."""
    for i, block in enumerate(model.blocks):
        if not isinstance(block, CheckpointedBlock):
            model.blocks[i] = CheckpointedBlock(block)
    return model


def compile_model(model: nn.Module) -> nn.Module:
    """``torch.compile(model)`` with inductor. Compiled code is kept in inductor's on-disk
    cache (``TORCHINDUCTOR_CACHE_DIR``, by default under the system's temporary folder), so
    a second run on the same machine compiles much faster. Integration point: chapter 7."""
    # torch.compile of an nn.Module returns an OptimizedModule (an nn.Module); typed as a callable
    return torch.compile(model)  # type: ignore[return-value]


def make_optimizer(model: nn.Module, lr: float, fused: bool) -> torch.optim.Optimizer:
    """AdamW: torch's default implementation (``foreach`` on a GPU, the per-parameter loop on a
    CPU), or ``fused=True`` (the whole update of each parameter in one fused pass; CPU and
    CUDA)."""
    _flag(fused=fused)
    return torch.optim.AdamW(model.parameters(), lr=lr, fused=True if fused else None)


def saved_bytes(fn: Callable[[], Any]) -> tuple[Any, int]:
    """Run ``fn()`` and count the bytes of the distinct storages autograd saves for backward
    (aliases once). ``(fn's result, bytes)``. Integration point: chapter 5 (memory)."""
    seen: dict[Any, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        key = (storage.data_ptr(), t.device.type) if t.device.type != "meta" else id(storage)
        seen[key] = max(seen.get(key, 0), storage.nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        result = fn()
    return result, sum(seen.values())

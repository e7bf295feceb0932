"""What a practitioner does when memory runs out: read the error, move memory, split it, shrink
the peak.

* :func:`read_oom` — the numbers of a CUDA out-of-memory message, and what they say
  (:data:`EXAMPLE_OOM` is a labelled example);
* :func:`offload_seconds` and :func:`offload_cost` — the cost of moving saved activations to the
  host and back (``torch.autograd.graph.save_on_cpu``, ZeRO-Offload) over a host link
  (``helpers.hardware.HOST_LINKS``);
* :func:`pipeline_activations` — how many microbatches' activations a pipeline stage holds;
* :func:`chunked_loss_peak` — the loss computed a chunk of tokens at a time, so the full
  logits never exist at once: the step's peak before and after, measured.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from .. import models
from .._validate import count as _count
from .._validate import unknown
from ..hardware import HOST_LINKS
from ..i18n import text, tr

_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
_NUMBER = r"([\d.]+)\s*(B|KiB|MiB|GiB|TiB)"


def _bytes(match: re.Match | None) -> int | None:
    return None if match is None else round(float(match.group(1)) * _UNITS[match.group(2)])


@dataclass(frozen=True)
class OutOfMemory:
    """The numbers of one CUDA out-of-memory message (bytes; None where it does not say)."""

    requested: int | None  # "Tried to allocate"
    capacity: int | None  # the GPU's total memory, as the driver reports it
    free: int | None  # free on the GPU when it failed
    process_in_use: int | None  # this process, PyTorch and non-PyTorch memory together
    allocated: int | None  # in live tensors (PyTorch)
    reserved_unallocated: int | None  # cached by PyTorch's allocator, not in a tensor
    other_processes: int  # memory that other processes hold on the same GPU

    @property
    def non_pytorch(self) -> int | None:
        """This process's memory that PyTorch's allocator does not hold: the CUDA context,
        libraries' workspaces, communication buffers."""
        in_use, allocated, cached = self.process_in_use, self.allocated, self.reserved_unallocated
        if in_use is None or allocated is None or cached is None:
            return None
        return in_use - allocated - cached

    def format(self) -> str:
        """The numbers as a table, each with what it means, and the advice."""

        def gib(n: int | None) -> str:
            return "      n/a" if n is None else f"{n / 2**30:6.2f} GiB"

        rows = [
            ("requested", self.requested, "the allocation that failed"),
            ("GPU capacity", self.capacity, "as the driver reports it"),
            ("free on the GPU", self.free, "what the driver could still give"),
            ("this process", self.process_in_use, "the three lines below"),
            ("  live tensors", self.allocated, "allocated by PyTorch"),
            ("  cached, unused", self.reserved_unallocated, "reserved by PyTorch but unallocated"),
            ("  not PyTorch's", self.non_pytorch, "CUDA context, libraries' workspaces"),
            ("other processes", self.other_processes, "on the same GPU"),
        ]
        lines = [f"{name:<16} {gib(value)}  {meaning}" for name, value, meaning in rows]
        return "\n".join([*lines, f"reading: {self.advice()}"])

    def advice(self) -> str:
        """Which part to act on, in one line."""
        if self.requested and self.reserved_unallocated and self.reserved_unallocated >= self.requested:
            return (
                "the allocator holds more cached memory than the request but in pieces too small "
                "for it: fragmentation; try PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
            )
        if self.other_processes:
            return "other processes hold memory on this GPU: free it or use another GPU"
        return (
            "live tensors fill the memory: shrink the peak (a smaller micro batch, recomputation, "
            "a chunked loss, ZeRO, offloading); emptying the cache would not help"
        )


#: An example message, written for this course in the format PyTorch 2.x prints (not from a real
#: run): an 80 GB GPU, 7.85 GiB cached but unused, and a 3.07 GiB request that still fails.
EXAMPLE_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.07 GiB. GPU 0 has a total capacity "
    "of 79.19 GiB of which 2.31 GiB is free. Including non-PyTorch memory, this process has 76.88 GiB "
    "memory in use. Of the allocated memory 68.42 GiB is allocated by PyTorch, and 7.85 GiB is reserved "
    "by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
)


def read_oom(message: str) -> OutOfMemory:
    """Read a CUDA out-of-memory message as PyTorch 2.x writes it ("Tried to allocate …. GPU 0
    has a total capacity of … of which … is free. [Process N has … memory in use.] Including
    non-PyTorch memory, this process has … memory in use. Of the allocated memory … is
    allocated by PyTorch, and … is reserved by PyTorch but unallocated."). Raises ValueError
    for text that is not such a message."""
    if not isinstance(message, str) or "out of memory" not in message.lower():
        raise ValueError("give the text of a CUDA out-of-memory error (it starts 'CUDA out of memory')")
    others = sum(
        _bytes(m) or 0 for m in re.finditer(r"Process \d+ has " + _NUMBER + " memory in use", message)
    )
    return OutOfMemory(
        requested=_bytes(re.search(r"Tried to allocate " + _NUMBER, message)),
        capacity=_bytes(re.search(r"total capac\w* of " + _NUMBER, message)),
        free=_bytes(re.search(r"of which " + _NUMBER + " is free", message)),
        process_in_use=_bytes(re.search(r"this process has " + _NUMBER + " memory in use", message)),
        allocated=_bytes(re.search(_NUMBER + " is allocated by PyTorch", message)),
        reserved_unallocated=_bytes(re.search(_NUMBER + " is reserved by PyTorch but unallocated", message)),
        other_processes=others,
    )


def offload_seconds(n_bytes: float, link: str = "PCIe 4.0 x16") -> float:
    """Seconds to move ``n_bytes`` to the host and back over ``link`` at its full rate, one
    direction at a time: what offloading saved activations (``save_on_cpu``) or optimizer state
    (ZeRO-Offload) adds to a step unless the copies overlap with compute."""
    if link not in HOST_LINKS:
        raise unknown("host link", link, HOST_LINKS)
    if isinstance(n_bytes, bool) or not isinstance(n_bytes, (int, float)) or n_bytes < 0:
        raise ValueError(f"n_bytes must be a number of bytes >= 0, got {n_bytes!r}")
    return 2 * n_bytes / HOST_LINKS[link]


#: What the host's AdamW step reads and writes per parameter in ZeRO-Offload: it reads the
#: 16-bit gradient, the fp32 master weight and the two fp32 moments (2 + 12 bytes) and writes
#: the last three and the 16-bit weight the GPU gets back (12 + 2).
HOST_ADAMW_BYTES = 28


@dataclass(frozen=True)
class OffloadCost:
    """What offloading moves in one training step, against the step's compute at the GPU's
    datasheet peak (the fastest the step could be, so every "hides" is a best case).

    ``saved_bytes``: what ``save_on_cpu`` sends, every tensor saved for backward, from the same
    inventory as :func:`estimate` (its ``activations`` and the loss's fp32 ``logits``). Each byte
    leaves in the forward pass and comes back in the backward pass."""

    model: str
    link: str
    gpu: str
    host_memory: str
    recompute: str
    saved_bytes: int
    copy_seconds: float  # one direction
    forward_seconds: float  # the forward pass's share of compute_seconds
    compute_seconds: float  # the step's FLOPs (a recomputed forward included) at the bf16 peak
    zero_offload_gpu_bytes_freed: int  # AdamW states and fp32 master weights
    gradient_seconds: float  # ZeRO-Offload: 16-bit gradients to the host, during backward
    parameter_seconds: float  # 16-bit parameters back, after the host step
    host_step_seconds: float  # the host AdamW's memory traffic at the host memory's rate

    @property
    def backward_seconds(self) -> float:
        return self.compute_seconds - self.forward_seconds

    @property
    def side_stream_mfu(self) -> float:
        """The highest MFU at which a side-stream copy out still hides behind the forward pass
        (the copy back has the backward pass, twice as long)."""
        return min(1.0, self.forward_seconds / self.copy_seconds if self.copy_seconds else 1.0)

    def format(self) -> str:
        def ms(t: float) -> str:
            return f"{t * 1e3:.1f} ms"

        def hides(share: float) -> str:
            if share >= 1:
                return tr("hides at any MFU")
            return tr("hides only if the step's MFU is below {share:.0%}", share=share)

        grads = min(1.0, self.backward_seconds / self.gradient_seconds) if self.gradient_seconds else 1.0
        return "\n".join(
            [
                tr(
                    "{model}, recompute {recompute!r}, {link}; compute at the {gpu} bf16 peak: {compute} "
                    "(forward {forward}; no step is faster)",
                    model=text(self.model),
                    recompute=self.recompute,
                    link=self.link,
                    gpu=self.gpu,
                    compute=ms(self.compute_seconds),
                    forward=ms(self.forward_seconds),
                ),
                tr(
                    "  save_on_cpu: {gib:.2f} GiB each way, {copy} each way: adds {both} to every step "
                    "(its copies run on the compute stream)",
                    gib=self.saved_bytes / 2**30,
                    copy=ms(self.copy_seconds),
                    both=ms(2 * self.copy_seconds),
                ),
                tr("  on a side stream, the copy out must fit in the forward pass: ")
                + hides(self.side_stream_mfu),
                tr(
                    "  ZeRO-Offload: {gib:.2f} GiB freed; gradients down {grad} in the backward pass: ",
                    gib=self.zero_offload_gpu_bytes_freed / 2**30,
                    grad=ms(self.gradient_seconds),
                )
                + hides(grads),
                tr(
                    "  then the host AdamW ({traffic:.1f} GB of memory traffic, {host}: {step}) and the "
                    "parameters up ({up}): +{total} a step unless the update is delayed a step",
                    traffic=HOST_ADAMW_BYTES * self.zero_offload_gpu_bytes_freed / 12 / 1e9,
                    host=text(self.host_memory),
                    step=ms(self.host_step_seconds),
                    up=ms(self.parameter_seconds),
                    total=ms(self.host_step_seconds + self.parameter_seconds),
                ),
            ]
        )


def offload_cost(
    shape: Any,
    batch: int,
    recompute: str = "none",
    link: str = "PCIe 5.0 x16",
    gpu: str = "H100 SXM",
    host_memory: str = "DDR5-4800 x 8 channels (one Xeon 8480C socket)",
) -> OffloadCost:
    """Transfer time of offloading for one step of ``shape`` (a :class:`ModelShape` or a
    preset name from :func:`model_presets`) in bf16 with fused attention, against the step's
    FLOPs at ``gpu``'s dense bf16 peak.

    Activations (``torch.autograd.graph.save_on_cpu(pin_memory=True)``): every saved tensor
    goes to the host in the forward pass and comes back in the backward pass. torch issues both
    copies on the current stream (``torch/autograd/graph.py``: ``copy_`` and ``.to`` with no
    stream), so the compute waits for them and they add their whole time to the step. A copy on
    a side stream (torchtune's activation offloading) can overlap, but the copy out must fit in
    the forward pass, a third of the step (a quarter under full recompute).

    ZeRO-Offload (Ren et al. 2021, arXiv 2101.06840): the optimizer step runs on the host, so 12
    bytes a parameter leave the GPU. The 16-bit gradients go down during the backward pass; then
    the host's AdamW streams :data:`HOST_ADAMW_BYTES` bytes per parameter through
    ``host_memory`` (:data:`helpers.hardware.HOST_MEMORY`, a lower bound on its time) and the
    16-bit parameters come back before the next forward pass. Those two are in the step unless
    the update is delayed one step (the paper's delayed parameter update)."""
    from .. import mfu
    from ..hardware import HOST_MEMORY, get_device
    from ._explorer import _moments, model_presets

    if isinstance(shape, str):
        presets = model_presets()
        if shape not in presets:
            raise unknown("model", shape, presets)
        shape = presets[shape]
    if host_memory not in HOST_MEMORY:
        raise unknown("host memory", host_memory, HOST_MEMORY)
    if link not in HOST_LINKS:
        raise unknown("host link", link, HOST_LINKS)
    (batch,) = _count(batch=batch)
    # what exists when backward starts: every saved tensor and the loss's fp32 log-softmax
    parts, _ = _moments(shape, batch, shape.seq_len, recompute=recompute)
    saved = parts["activations"] + parts["logits"]
    model_flops = (
        batch
        * shape.seq_len
        * mfu.transformer_flops_per_token(
            shape.n_params, shape.layers, shape.heads, shape.hidden // shape.heads, shape.seq_len
        )
    )
    forward_flops = model_flops / 3  # forward 2 FLOPs per parameter and token, backward 4
    step_flops = model_flops + (forward_flops if recompute == "full" else 0)
    peak = get_device(gpu).peak_flops["bf16"]
    rate = HOST_LINKS[link]
    return OffloadCost(
        shape.name,
        link,
        get_device(gpu).name,
        host_memory,
        recompute,
        saved,
        saved / rate,
        forward_flops / peak,
        step_flops / peak,
        12 * shape.n_params,
        2 * shape.n_params / rate,
        2 * shape.n_params / rate,
        HOST_ADAMW_BYTES * shape.n_params / HOST_MEMORY[host_memory],
    )


SCHEDULES = ("gpipe", "1f1b")


def pipeline_activations(
    layer_bytes: int, layers: int, stages: int, microbatches: int, schedule: str = "1f1b"
) -> int:
    """Activation bytes the first pipeline stage holds at its peak: its ``layers / stages``
    layers times the microbatches in flight, each layer keeping ``layer_bytes`` per microbatch.
    GPipe runs every forward first, so all ``microbatches`` are in flight; 1F1B starts a
    microbatch's backward as soon as it can, so the first stage holds at most ``stages``
    (Narayanan et al. 2021, Efficient Large-Scale Language Model Training on GPU Clusters)."""
    layer_bytes, layers, stages, microbatches = _count(
        layer_bytes=layer_bytes, layers=layers, stages=stages, microbatches=microbatches
    )
    if schedule not in SCHEDULES:
        raise unknown("schedule", schedule, SCHEDULES)
    in_flight = microbatches if schedule == "gpipe" else min(stages, microbatches)
    return -(-layers // stages) * layer_bytes * in_flight


class _ChunkedLossGPT(models.TinyGPT):
    """The course model with its loss computed ``chunks`` slices of tokens at a time, each under
    a checkpoint: only one slice's logits exist at once, in the forward and in the backward."""

    chunks = 1

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        if targets is None or self.chunks == 1:
            return super().forward(idx, targets)
        b, s = idx.shape
        h, t = self.features(idx).reshape(b * s, -1), targets.reshape(b * s)
        total = sum(
            checkpoint(self._slice_loss, hc, tc, use_reentrant=False)
            for hc, tc in zip(h.chunk(self.chunks), t.chunk(self.chunks), strict=True)
        )
        return total / (b * s)

    def _slice_loss(self, h: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(F.linear(h, self.tok_emb.weight), t, reduction="sum")


def chunked_loss_model(config: Any, chunks: int) -> models.TinyGPT:
    """A course model (freshly initialised) whose loss runs in ``chunks`` slices of tokens."""
    (chunks,) = _count(chunks=chunks)
    model = _ChunkedLossGPT(models.get_config(config))
    model.chunks = chunks
    return model


def chunked_loss_peak(
    config: Any = "gpt2-small",
    batch: int = 8,
    seq_len: int | None = None,
    chunks: tuple[int, ...] = (1, 8),
    autocast: str | None = None,
) -> dict[int, Any]:
    """The peak of one training step (``memory.track``, fake tensors) with the loss computed in
    one piece and in slices: ``{chunks: StepMemory}``."""
    from ._track import track

    cfg = models.get_config(config)
    return {
        k: track(
            lambda k=k: chunked_loss_model(cfg, k),
            "adamw",
            batch_size=batch,
            seq_len=seq_len or cfg.seq_len,
            autocast=autocast,
        )
        for k in chunks
    }

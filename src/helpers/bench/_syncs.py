"""Where a loop reads device values back to the host: counted by a torch function mode on any
device (:func:`count_host_syncs`), or seen by the CUDA profiler (:func:`profile_sync_events`)."""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from .._validate import count as _count
from .._validate import flag as _flag

#: Tensor methods that hand a value to Python: on a GPU each one waits for the device.
READBACKS = frozenset(
    {
        "item",
        "tolist",
        "numpy",
        "__float__",
        "__int__",
        "__bool__",
        "__index__",
        "__complex__",
        "__array__",
        "__format__",
        "__repr__",
        "__str__",
    }
)


@dataclass
class SyncCount:
    """Host read-backs seen while a function ran, by kind (``item``, ``__bool__``, ...)."""

    by_kind: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.by_kind.values())

    def __str__(self) -> str:
        kinds = ", ".join(f"{k} ×{v}" for k, v in sorted(self.by_kind.items())) or "none"
        return f"{self.total} host read-back(s): {kinds}"


# Frames of torch's dispatch machinery between a Tensor method and the mode.
_MACHINERY = {"torch.overrides", "torch._tensor"}
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


def _called_from_torch() -> bool:
    """True when the read-back was made by PyTorch's own code (e.g. an optimizer reading its
    CPU-side step counter), not by the code being inspected."""
    frame: types.FrameType | None = sys._getframe(2)
    while frame is not None and frame.f_globals.get("__name__") in _MACHINERY:
        frame = frame.f_back
    # by the file the code was compiled from: a module's ``__name__`` is whatever it says
    return frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_TORCH_DIR)


class _ReadbackCounter(TorchFunctionMode):
    def __init__(self, counts: SyncCount) -> None:
        super().__init__()
        self.counts = counts

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        to_host = False
        if name in ("cpu", "to") and args and isinstance(args[0], torch.Tensor):
            # a copy to host memory: on a GPU it waits for the device. Counted whatever the
            # tensor's device, so a loop checked on a CPU gets the count it would get on a GPU.
            target = kwargs.get("device", args[1] if len(args) > 1 else None)
            to_host = name == "cpu" or str(target).split(":")[0] == "cpu"
        if (name in READBACKS or to_host) and not _called_from_torch():
            self.counts.by_kind[name] = self.counts.by_kind.get(name, 0) + 1
        return func(*args, **kwargs)


def count_host_syncs(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, SyncCount]:
    """Run ``fn(*args, **kwargs)`` and count the points where it reads a tensor value on the host.

    Counted: ``.item()``, ``float()``/``int()``/``bool()`` of a tensor (``if loss > 0:`` too),
    ``.tolist()``, ``.numpy()``, formatting or printing a tensor, and copies to the CPU
    (``.cpu()``, ``.to("cpu")``), counted even for a tensor already on the CPU, because the
    same line on a GPU is a blocking copy. On a GPU each of these is a host-device
    synchronization: the Python thread
    stops until the device has finished everything queued before it. On a CPU they cost
    little, but the count is the same, so a loop can be checked here before it runs on a GPU.
    Returns ``(fn's result, SyncCount)``.

    Only read-backs made outside PyTorch's own code are counted: an optimizer reading its
    CPU-side step counter is not a device sync. Syncs hidden inside operators whose output
    size depends on the data (``nonzero``, boolean masking) are not seen here; on a GPU,
    :func:`profile_sync_events` shows those too.
    """
    counts = SyncCount()
    with _ReadbackCounter(counts):
        result = fn(*args, **kwargs)
    return result, counts


def profile_sync_events(fn: Callable[[], Any], steps: int = 3) -> dict[str, int]:
    """CUDA only: run ``fn`` ``steps`` times under ``torch.profiler`` and count the CUDA runtime
    calls that block the host, by name: ``cudaStreamSynchronize``, ``cudaDeviceSynchronize``,
    ``cudaEventSynchronize`` and the synchronous copies (``cudaMemcpy``, ``cudaMemcpy2D``, ...).
    Asynchronous copies (``cudaMemcpyAsync`` and the like) are left out: they return at once. A
    read-back such as ``.item()`` shows as its ``cudaStreamSynchronize``; so does a copy from
    pageable host memory, which PyTorch follows with a stream synchronize.

    Raises ``RuntimeError`` on a CPU: there is no device stream to wait for, so there are no
    such events to count (use :func:`count_host_syncs` there).
    """
    if not torch.cuda.is_available():
        raise RuntimeError(
            "profile_sync_events needs a CUDA GPU (no CUDA runtime events on CPU); "
            "use bench.count_host_syncs(fn) to count read-backs on any device."
        )
    from torch.profiler import ProfilerActivity, profile

    from .._quiet import profiler_notices_hidden

    torch.cuda.synchronize()
    with profiler_notices_hidden(), profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()
    counts: dict[str, int] = {}
    for event in prof.key_averages():
        copy = event.key.startswith("cudaMemcpy") and not event.key.endswith("Async")
        if "Synchronize" in event.key or copy:
            counts[event.key] = event.count
    # the closing synchronize above is ours, not the loop's
    if counts.get("cudaDeviceSynchronize"):
        counts["cudaDeviceSynchronize"] -= 1
    return {k: v for k, v in counts.items() if v}


# --------------------------------------------------------------------------- logging loops


def logged_loop(
    step_fn: Callable[[], torch.Tensor], n_steps: int, log_every: int, read_every_step: bool = False
) -> list[float]:
    """Run ``step_fn`` ``n_steps`` times; return the mean loss of each ``log_every`` window.

    ``read_every_step=False`` keeps the running sum on the device and reads it back once per
    window (the fix); ``True`` calls ``.item()`` on every loss, the common habit that
    forces a host-device sync each step. Both return the same numbers (a last, shorter
    window is included).
    """
    _flag(read_every_step=read_every_step)
    n_steps, log_every = _count(n_steps=n_steps, log_every=log_every)
    logged: list[float] = []
    total: Any = 0
    count = 0
    for step in range(1, n_steps + 1):
        loss = step_fn()
        total = total + (loss.item() if read_every_step else loss.detach())
        count += 1
        if step % log_every == 0 or step == n_steps:
            logged.append(float(total) / count if read_every_step else (total / count).item())
            total, count = 0, 0
    return logged

"""PyTorch's own search for hidden synchronizations, and ``CUDA_LAUNCH_BLOCKING``.

``torch.cuda.set_sync_debug_mode("warn")`` makes PyTorch warn each time one of its CUDA
operations waits for the GPU (``.item()``, ``.cpu()``, ``nonzero``, indexing with a boolean
mask, ...). It exists only on a CUDA build and fires only for CUDA tensors: on a CPU there is
nothing to wait for, so :func:`find_syncs` says so instead of reporting an empty list that
would look like a clean result.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ..bench import resolve_device
from ..i18n import tr

# The text of PyTorch's warning: "called a synchronizing CUDA operation" (c10/cuda/CUDAFunctions).
_SYNC_WARNING = re.compile(r"synchroniz\w* CUDA operation", re.IGNORECASE)


@dataclass
class SyncReport:
    """What :func:`find_syncs` saw: one ``(file:line, message)`` per warning, or why none ran."""

    device: str
    checked: bool  # False: the sync debug mode could not run here (see ``note``)
    syncs: list[tuple[str, str]] = field(default_factory=list)
    note: str = ""

    def format(self) -> str:
        if not self.checked:
            return self.note
        lines = [tr("{count} synchronizing call(s) on {device}:", count=len(self.syncs), device=self.device)]
        lines += [f"  {where}: {message}" for where, message in self.syncs]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()


def find_syncs(fn: Callable[[], Any], device: str | torch.device = "auto") -> SyncReport:
    """Run ``fn()`` once under ``torch.cuda.set_sync_debug_mode("warn")`` and collect the
    warnings, each with the line of Python that caused it. The previous mode is restored.

    On a machine without CUDA ``fn`` is not run and the report says the mode cannot fire
    (``checked=False``): a CPU tensor never waits for a device.
    """
    if not callable(fn):
        raise TypeError(f"find_syncs(fn) needs a function to call, got {type(fn).__name__}.")
    dev = resolve_device(device)
    if dev.type != "cuda" or not torch.cuda.is_available():
        return SyncReport(
            str(dev),
            False,
            note=tr(
                "Not run: torch.cuda.set_sync_debug_mode warns only for CUDA operations, and this "
                "run has no CUDA device ({device}). On a GPU each synchronizing line is listed here.",
                device=dev,
            ),
        )
    before = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")  # the same line twice is two syncs
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode(before)
    syncs = [
        (f"{os.path.basename(w.filename)}:{w.lineno}", str(w.message).strip())
        for w in seen
        if _SYNC_WARNING.search(str(w.message))
    ]
    return SyncReport(str(dev), True, syncs)


def sync_examples(device: str | torch.device = "auto") -> Callable[[], None]:
    """A function with one line per common hidden sync (and one line that does not sync), for
    :func:`find_syncs`. Each line is a separate statement, so each warning names its line."""
    dev = resolve_device(device)

    def run() -> None:
        x = torch.randn(4096, device=dev)
        _ = x * 2 + 1  # no sync: queued on the GPU
        _ = x.sum().item()  # .item(): the host waits for the value
        _ = x[x > 0]  # boolean mask: the result's size depends on the data
        _ = torch.nonzero(x > 0)  # nonzero: the same, documented in torch.nonzero
        _ = x.cpu()  # copy to the host: waits for x
        _ = float(x.max())  # float(tensor) is .item()

    return run


def launch_blocking() -> str:
    """Whether ``CUDA_LAUNCH_BLOCKING`` is set in this process's environment, as one line.

    With ``CUDA_LAUNCH_BLOCKING=1`` every kernel launch waits until the kernel has finished
    (CUDA C++ Programming Guide, "Asynchronous Concurrent Execution"): an error is reported at
    the line that launched the kernel, and every timing includes a sync per launch.
    """
    value = os.environ.get("CUDA_LAUNCH_BLOCKING", "")
    if value.strip() == "1":
        return tr(
            "CUDA_LAUNCH_BLOCKING=1 is set: every launch waits for its kernel. Good for finding "
            "the line of a CUDA error; do not time anything in this process."
        )
    return tr("CUDA_LAUNCH_BLOCKING is not set to 1: launches are asynchronous, as they are in training.")

"""Measure what autograd keeps for the backward pass: ``saved_tensors_hooks``, unique storages.

Every tensor an operator saves for its backward goes through the pack hook of
:class:`torch.autograd.graph.saved_tensors_hooks`. Several saved tensors can share one
storage (a view, a transpose, the same activation saved by two operators); memory is
storage, so each storage counts once. Leaves that require grad (parameters) are counted
apart: they exist anyway. This is *storage referenced by saved tensors*, not the
allocator's view: temporaries that are not saved, allocator caching and process memory are
not in it (seed idea: measure the saved set, time without the hooks).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class SavedBytes:
    """Storage saved for the backward pass while a function ran, in bytes."""

    activations: int  # peak bytes of unique non-leaf storages held at once
    parameters: int  # bytes of unique leaf storages that require grad (parameters) that were saved
    tensors: int  # saved tensors seen (views and repeats included)
    storages: int  # unique activation storages seen
    by_dtype: dict[str, int] = field(default_factory=dict)  # activation bytes by dtype (all seen)

    @property
    def mib(self) -> float:
        return self.activations / 2**20

    def __str__(self) -> str:
        dtypes = ", ".join(f"{k} {v / 2**20:.3f}" for k, v in self.by_dtype.items())
        return (
            f"saved for backward: activations {self.activations / 2**20:.3f} MiB at the peak "
            f"({self.storages} storages, {self.tensors} saved tensors; by dtype MiB: {dtypes}); "
            f"parameters referenced {self.parameters / 2**20:.3f} MiB"
        )


class _Held:
    """What the pack hook hands autograd: the tensor, and a note when autograd lets it go."""

    __slots__ = ("tensor", "release")

    def __init__(self, tensor: torch.Tensor, release: Callable[[], None] | None) -> None:
        self.tensor, self.release = tensor, release

    def __del__(self) -> None:
        if self.release is not None:
            self.release()


def _is_leaf_param(t: torch.Tensor) -> bool:
    base = t._base if t._base is not None else t
    return base.is_leaf and base.requires_grad


def saved_tensor_bytes(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> SavedBytes:
    """Run ``fn(*args, **kwargs)`` and measure the storage autograd saves for backward.

    ``activations`` is the largest number of bytes of distinct storages held by saved tensors
    at one moment while ``fn`` ran (a storage saved twice, or through a view, counts once;
    storage released during a backward inside ``fn`` stops counting). Parameters (leaves
    that require grad) are reported apart in ``parameters``. Works on CPU, on a GPU and on
    fake tensors. ``fn``'s result is dropped, so its graph is freed afterwards.
    """
    if not callable(fn):
        raise TypeError(f"saved_tensor_bytes needs a function to run, got {type(fn).__name__}")
    holders: dict[int, int] = {}  # id(storage) -> number of saved tensors holding it
    sizes: dict[int, int] = {}
    params: dict[int, int] = {}
    dtypes: dict[str, int] = {}
    live = [0, 0]  # current, peak
    counts = [0, 0]  # tensors, storages

    def release(key: int) -> None:
        holders[key] -= 1
        if holders[key] == 0:
            live[0] -= sizes.pop(key)
            del holders[key]

    def pack(t: torch.Tensor) -> _Held:
        counts[0] += 1
        storage = t.untyped_storage()
        key = id(storage)
        if _is_leaf_param(t):
            params[key] = storage.nbytes()
            return _Held(t, None)
        if key not in holders:
            holders[key], sizes[key] = 0, storage.nbytes()
            counts[1] += 1
            live[0] += sizes[key]
            live[1] = max(live[1], live[0])
            name = str(t.dtype).replace("torch.", "")
            dtypes[name] = dtypes.get(name, 0) + sizes[key]
        holders[key] += 1
        return _Held(t, lambda: release(key))

    def unpack(held: _Held) -> torch.Tensor:
        return held.tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        result = fn(*args, **kwargs)
    del result
    return SavedBytes(live[1], sum(params.values()), counts[0], counts[1], dtypes)

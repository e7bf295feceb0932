"""What a compiled training step keeps for the backward pass: the partitioner's choice.

For a function that needs gradients, AOTAutograd traces the forward and the backward into one
joint graph and then **partitions** it: everything the backward pass needs from the forward
is either saved (the forward writes it to memory) or recomputed in the backward from what was
saved. ``torch.compile``'s Inductor uses the min-cut partitioner, which recomputes cheap
element-wise results rather than writing them; AOTAutograd's ``default_partition`` saves them.
:func:`saved_for_backward` traces a function with either and lists what the forward hands to
the backward.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

PARTITIONERS = ("min_cut", "default")


@dataclass(frozen=True)
class Saved:
    """One tensor the forward graph hands to the backward graph."""

    name: str  # the FX node: ``primals_N`` is the N-th input, anything else an intermediate
    shape: tuple[int, ...]
    bytes: int
    is_input: bool  # an input is in memory anyway: saving it writes nothing new


@dataclass(frozen=True)
class SavedForBackward:
    partitioner: str
    saved: list[Saved]
    backward_ops: int  # call_function nodes of the backward graph (recomputation shows here)

    @property
    def written(self) -> int:
        """Bytes the forward writes only for the backward (saved intermediates)."""
        return sum(s.bytes for s in self.saved if not s.is_input)

    @property
    def read(self) -> int:
        """Bytes the backward reads of what was saved."""
        return sum(s.bytes for s in self.saved)

    def format(self) -> str:
        names = ", ".join(f"{s.name}{' (input)' if s.is_input else ''}" for s in self.saved)
        return (f"{self.partitioner:<8} saves {names}: the forward writes {self.written / 2**20:.1f} MiB for "
                f"the backward, which reads {self.read / 2**20:.1f} MiB of it and runs "
                f"{self.backward_ops} ops")


def saved_for_backward(fn: Callable[..., Any], inputs: Sequence[torch.Tensor], needs_grad: Sequence[int],
                       partitioner: str = "min_cut") -> SavedForBackward:
    """Trace ``fn(*inputs)`` forward and backward with AOTAutograd (no code is generated) and
    list what the forward saves for the backward. ``needs_grad``: the positions of the inputs
    that get gradients (as parameters and activations would). ``partitioner``: ``"min_cut"``
    (what ``torch.compile``'s Inductor uses) or ``"default"`` (save every intermediate the
    backward needs)."""
    from functorch.compile import (
        aot_function,
        default_partition,
        make_boxed_func,
        min_cut_rematerialization_partition,
    )

    if partitioner not in PARTITIONERS:
        raise ValueError(f"partitioner must be one of {', '.join(PARTITIONERS)}, got {partitioner!r}")
    if not callable(fn):
        raise TypeError(f"saved_for_backward needs a function, got {type(fn).__name__}")
    wanted = set(needs_grad)
    if not wanted or not wanted <= set(range(len(inputs))):
        raise ValueError(f"needs_grad must name positions of the {len(inputs)} inputs, "
                         f"got {list(needs_grad)}")
    graphs: dict[str, torch.fx.GraphModule] = {}

    def keep(kind: str):
        def compiler(gm: torch.fx.GraphModule, example_inputs: list) -> Callable[..., Any]:
            graphs[kind] = gm
            return make_boxed_func(gm.forward)
        return compiler

    split = min_cut_rematerialization_partition if partitioner == "min_cut" else default_partition
    traced = aot_function(fn, fw_compiler=keep("forward"), bw_compiler=keep("backward"), partition_fn=split)
    args = [t.detach().clone().requires_grad_(i in wanted) for i, t in enumerate(inputs)]
    out = traced(*args)
    out.sum().backward()
    forward = graphs["forward"].graph
    outputs = next(n for n in forward.nodes if n.op == "output").args[0]
    results = 1 if isinstance(out, torch.Tensor) else len(out)
    saved = []
    for node in outputs[results:]:
        value = node.meta.get("val")
        shape = tuple(value.shape) if value is not None else ()
        size = value.numel() * value.element_size() if value is not None else 0
        saved.append(Saved(node.name, shape, size, node.op == "placeholder"))
    backward_ops = sum(1 for n in graphs["backward"].graph.nodes if n.op == "call_function")
    return SavedForBackward(partitioner, saved, backward_ops)

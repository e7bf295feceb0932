"""Where fusion pays: the bytes an element-wise chain moves, run op by op or as one kernel.

Chapter 1's traffic model applied to a chain of element-wise ops. Run eagerly, every op is
its own kernel: it reads each of its inputs from memory and writes its output back. Fused
into one kernel (what TorchInductor generates), the chain reads each *external* input once
and writes only what must outlive the kernel — its result, and any intermediate that is
needed later (e.g. saved for the backward pass). The arithmetic is the same either way:
fusion cuts memory traffic, not FLOPs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from .._validate import flag as _flag
from .._validate import positive

#: One op of a chain: ``(output name, [input names])``.
Op = tuple[str, Sequence[str]]

#: The chapter's chain, bias + GELU + dropout + residual, as ops on named tensors
#: (the dropout mask is an input: drawn beforehand, scaled by 1 / (1 - p)).
CHAIN: list[Op] = [("h1", ["x", "bias"]), ("h2", ["h1"]), ("h3", ["h2", "mask"]), ("out", ["h3", "residual"])]


@dataclass(frozen=True)
class Traffic:
    """Bytes a chain moves run op by op (``eager``) and as one fused kernel (``fused``)."""

    eager: float
    fused: float

    @property
    def saved(self) -> float:
        return self.eager - self.fused

    @property
    def ratio(self) -> float:
        return self.eager / self.fused

    def pair(self) -> tuple[float, float]:
        """``(eager, fused)``."""
        return self.eager, self.fused


def chain_traffic(
    chain: Sequence[Op], sizes: Mapping[str, int], bytes_per_element: float, keep: Iterable[str] = ()
) -> Traffic:
    """Minimum bytes of ``chain`` run eagerly and fused (chapter 1's model, per op or per kernel).

    ``sizes`` gives the number of elements of every tensor named in the chain. Eager: each
    op reads every input it names and writes its output. Fused: each external input (read
    but never produced by the chain) is read once; the last op's output and every name in
    ``keep`` (intermediates needed later, e.g. saved for backward) are written once.
    """
    positive(bytes_per_element=bytes_per_element)
    if not chain:
        raise ValueError("the chain has no ops")
    names = {out for out, _ in chain} | {name for _, ins in chain for name in ins}
    missing = sorted(names - set(sizes))
    if missing:
        raise KeyError(f"sizes has no entry for {', '.join(missing)}; give the element count of every tensor")
    produced = [out for out, _ in chain]
    keep = set(keep)
    unknown = sorted(keep - set(produced))
    if unknown:
        raise ValueError(f"keep names {', '.join(unknown)}, which no op of the chain produces")
    eager = sum(sum(sizes[n] for n in ins) + sizes[out] for out, ins in chain)
    external = {n for _, ins in chain for n in ins} - set(produced)
    written = keep | {produced[-1]}
    fused = sum(sizes[n] for n in external) + sum(sizes[n] for n in written)
    return Traffic(eager * bytes_per_element, fused * bytes_per_element)


def bias_gelu_dropout_residual(
    x: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor, residual: torch.Tensor
) -> torch.Tensor:
    """The chain: ``gelu(x + bias) * mask + residual`` — four kernels eagerly, one fused."""
    return F.gelu(x + bias) * mask + residual


def chain_inputs(
    rows: int,
    hidden: int,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    p: float = 0.1,
    seed: int = 0,
) -> tuple[torch.Tensor, ...]:
    """Inputs of :func:`bias_gelu_dropout_residual`: x and residual ``(rows, hidden)``, a bias
    ``(hidden,)`` and a dropout mask (0 or 1 / (1 - p)) drawn once with ``seed``."""
    if not 0 <= p < 1:
        raise ValueError(f"dropout probability p must be in [0, 1), got {p}")
    gen = torch.Generator().manual_seed(seed)
    x, residual = torch.randn(rows, hidden, generator=gen), torch.randn(rows, hidden, generator=gen)
    bias = torch.randn(hidden, generator=gen)
    mask = (torch.rand(rows, hidden, generator=gen) >= p).float() / (1 - p)
    return tuple(t.to(device=device, dtype=dtype) for t in (x, bias, mask, residual))


def chain_sizes(rows: int, hidden: int) -> dict[str, int]:
    """Element counts of every tensor of :data:`CHAIN` for ``(rows, hidden)`` activations."""
    full = rows * hidden
    return {
        "x": full,
        "bias": hidden,
        "mask": full,
        "residual": full,
        "h1": full,
        "h2": full,
        "h3": full,
        "out": full,
    }


# --------------------------------------------------------------------------- the generated code

# a kernel Inductor defines in its output code: ``name = async_compile.cpp_pybinding(...`` on a
# CPU, ``name = async_compile.triton('name', ...`` on a GPU
_KERNEL_DEF = re.compile(r"^(\w+) = async_compile\.(\w+)\(", re.MULTILINE)
# loads and stores of a kernel's pointer arguments: C++ (``in_ptr0 + ...``, ``out_ptr0[...] =``)
# and Triton (``tl.load(in_ptr0 + ...)``, ``tl.store(out_ptr0 + ...``)
_LOADED = re.compile(r"\b(in_ptr\d+|in_out_ptr\d+)\b")
_ACCESS = re.compile(r"loadu?\(|store\(|\b(?:in_|out_|in_out_)ptr\d+\[")
_DECLARED = re.compile(r"^auto \w+ = ")
_STORED = re.compile(
    r"(?:\.store\(|tl\.store\()\s*(out_ptr\d+|in_out_ptr\d+)|\b(out_ptr\d+)\[[^\]]*\]\s*=(?!=)"
)


@dataclass(frozen=True)
class Kernel:
    """One kernel Inductor generated: its name, the pointers it reads and writes, its source."""

    name: str
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    source: str


@dataclass(frozen=True)
class GeneratedCode:
    """The kernels of each graph Inductor compiled for one call (forward, then backward), the
    library calls it kept (``extern_kernels.mm``, ...), and how many ATen ops eager ran."""

    graphs: list[list[Kernel]]
    library_calls: list[int]
    eager_ops: int
    device: str

    @property
    def kernels(self) -> int:
        return sum(len(g) for g in self.graphs)

    def format(self, show_source: bool = True, max_lines: int = 14) -> str:
        _flag(show_source=show_source)
        lines = [
            f"eager: {self.eager_ops} ATen op(s); Inductor ({self.device}): "
            f"{self.kernels} generated kernel(s) in {len(self.graphs)} graph(s)"
        ]
        names = (
            ["forward", "backward"]
            if len(self.graphs) == 2
            else [f"graph {i + 1}" for i in range(len(self.graphs))]
        )
        for name, kernels, calls in zip(names, self.graphs, self.library_calls, strict=True):
            lines.append(f"  {name}: {len(kernels)} kernel(s), {calls} library call(s)")
            for k in kernels:
                lines.append(f"    {k.name}: reads {len(k.reads)} tensor(s), writes {len(k.writes)}")
                if show_source:
                    # the access itself, without the C++ declaration of the value it loads into
                    body = [
                        _DECLARED.sub("", line.strip())
                        for line in k.source.splitlines()
                        if _ACCESS.search(line)
                    ]
                    lines += ["      " + line[:104] for line in body[:max_lines]]
        return "\n".join(lines)


def _kernels_of(code: str) -> list[Kernel]:
    """The kernels defined in one graph's output code, each with the source up to the next one."""
    found = list(_KERNEL_DEF.finditer(code))
    kernels = []
    for i, match in enumerate(found):
        end = found[i + 1].start() if i + 1 < len(found) else code.find("async_compile.wait", match.end())
        source = code[match.start() : end if end > 0 else len(code)]
        reads = tuple(sorted(set(_LOADED.findall(source)), key=_natural))
        writes = tuple(sorted({a or b for a, b in _STORED.findall(source)}, key=_natural))
        kernels.append(Kernel(match.group(1), reads, writes, source))
    return kernels


def _natural(name: str) -> tuple[str, int]:
    head = name.rstrip("0123456789")
    return head, int(name[len(head) :] or 0)


def _eager_ops(fn: Callable[..., Any], inputs: Sequence[torch.Tensor], backward: bool) -> int:
    """ATen ops eager runs for ``fn`` (and its backward), counted below autograd by a dispatch mode
    (views and in-place accumulation of gradients included, as the dispatcher sees them)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        ops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.ops += 1
            return func(*args, **(kwargs or {}))

    with Count():
        out = fn(*inputs)
        if backward:
            out.sum().backward()
    return Count.ops


def generated_kernels(
    fn: Callable[..., torch.Tensor], inputs: Sequence[torch.Tensor], needs_grad: Sequence[int] = ()
) -> GeneratedCode:
    """Compile ``fn`` with Inductor, run it on ``inputs`` (and its backward, with ``.sum()`` as
    the loss, when ``needs_grad`` names inputs that need gradients) and read the code Inductor
    wrote (``torch._inductor.utils.run_and_get_code``): the kernels of each graph, with the
    pointers each reads and writes, and the library calls it kept. For comparison, the ATen
    ops eager runs. Needs a working Inductor (:func:`pick_backend`)."""
    from torch._inductor.utils import run_and_get_code

    if any(not isinstance(i, int) or not 0 <= i < len(inputs) for i in needs_grad):
        raise ValueError(
            f"needs_grad must list positions of inputs (0 to {len(inputs) - 1}), got {list(needs_grad)}"
        )

    def fresh() -> list[torch.Tensor]:
        return [t.detach().clone().requires_grad_(i in needs_grad) for i, t in enumerate(inputs)]

    def step(*args: torch.Tensor) -> torch.Tensor:
        out = compiled(*args)
        if needs_grad:
            out.sum().backward()
        return out

    import torch._dynamo as dynamo

    dynamo.reset()
    compiled = torch.compile(fn)
    _, codes = run_and_get_code(step, *fresh())
    dynamo.reset()
    graphs = [_kernels_of(code) for code in codes]
    calls = [len(re.findall(r"\bextern_kernels\.\w+\(", code)) for code in codes]
    device = str(inputs[0].device) if inputs else "cpu"
    return GeneratedCode(graphs, calls, _eager_ops(fn, fresh(), bool(needs_grad)), device)

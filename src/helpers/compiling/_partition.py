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

from .._validate import unknown

PARTITIONERS = ("min_cut", "default")


@dataclass(frozen=True)
class Saved:
    """One tensor the forward graph hands to the backward graph."""

    name: str  # the FX node: ``primals_N`` is the N-th input, anything else an intermediate
    shape: tuple[int, ...]
    bytes: int  # of the storage it lives in
    input: int | None  # the position of the input whose storage it lives in (an input, or a view)
    storage: int  # the storage's address: two saved tensors can share one
    made_by: str = ""  # the op that computed it (through views and tuple items), "input" for an input

    @property
    def is_input(self) -> bool:
        """It lives in an input's storage: saving it writes nothing new."""
        return self.input is not None


@dataclass(frozen=True)
class SavedForBackward:
    partitioner: str
    saved: list[Saved]
    backward_ops: int  # call_function nodes of the backward graph (recomputation shows here)

    @property
    def written(self) -> int:
        """Bytes the forward writes only for the backward: the distinct storages of saved
        intermediates (each storage once, however many saved views share it)."""
        return sum({s.storage: s.bytes for s in self.saved if not s.is_input}.values())

    @property
    def read(self) -> int:
        """Bytes of the distinct storages the backward gets from the forward."""
        return sum({s.storage: s.bytes for s in self.saved}.values())

    def format(self) -> str:
        names = ", ".join(f"{s.name}{' (input)' if s.is_input else ''}" for s in self.saved)
        return (
            f"{self.partitioner:<8} saves {names}: the forward writes {self.written / 2**20:.1f} MiB for "
            f"the backward, which reads {self.read / 2**20:.1f} MiB of it and runs "
            f"{self.backward_ops} ops"
        )


# ops that only view or pick from another op's result: the op that made the data is further up
_PASS_THROUGH = {
    "view",
    "_unsafe_view",
    "reshape",
    "transpose",
    "t",
    "permute",
    "expand",
    "detach",
    "alias",
    "getitem",
}


def _op_name(target: Any) -> str:
    name = getattr(target, "__name__", str(target))
    return name.split(".")[0] if "." in name else name


def _made_by(node: torch.fx.Node) -> str:
    """The op that computed a saved tensor's data, looking through views and tuple items."""
    while node.op == "call_function" and _op_name(node.target) in _PASS_THROUGH and node.args:
        node = node.args[0]  # type: ignore[assignment]
    return "input" if node.op == "placeholder" else _op_name(node.target)


def saved_for_backward(
    fn: Callable[..., Any],
    inputs: Sequence[torch.Tensor],
    needs_grad: Sequence[int],
    partitioner: str = "min_cut",
) -> SavedForBackward:
    """Trace ``fn(*inputs)`` forward and backward with AOTAutograd (no code is generated), run
    it once, and list what the forward hands to the backward, with the storage each saved
    tensor lives in. ``needs_grad``: the positions of the inputs that get gradients (as
    parameters and activations would). ``partitioner``: ``"min_cut"`` (what
    ``torch.compile``'s Inductor uses) or ``"default"`` (save every intermediate the backward
    needs)."""
    from functorch.compile import (
        aot_function,
        default_partition,
        make_boxed_func,
        min_cut_rematerialization_partition,
    )

    if partitioner not in PARTITIONERS:
        raise unknown("partitioner", partitioner, PARTITIONERS)
    if not callable(fn):
        raise TypeError(f"saved_for_backward needs a function, got {type(fn).__name__}")
    wanted = set(needs_grad)
    if not wanted or not wanted <= set(range(len(inputs))):
        raise ValueError(
            f"needs_grad must name positions of the {len(inputs)} inputs, got {list(needs_grad)}"
        )
    graphs: dict[str, torch.fx.GraphModule] = {}
    outputs: list[Any] = []

    def forward_compiler(gm: torch.fx.GraphModule, example_inputs: list) -> Callable[..., Any]:
        graphs["forward"] = gm
        boxed = make_boxed_func(gm.forward)

        def run(args: list) -> Any:
            result = boxed(args)
            outputs[:] = list(result)  # the real tensors handed on, to find their storages
            return result

        run._boxed_call = True  # type: ignore[attr-defined]
        return run

    def backward_compiler(gm: torch.fx.GraphModule, example_inputs: list) -> Callable[..., Any]:
        graphs["backward"] = gm
        return make_boxed_func(gm.forward)

    split = min_cut_rematerialization_partition if partitioner == "min_cut" else default_partition
    traced = aot_function(fn, fw_compiler=forward_compiler, bw_compiler=backward_compiler, partition_fn=split)
    args = [t.detach().clone().requires_grad_(i in wanted) for i, t in enumerate(inputs)]
    out = traced(*args)
    results = 1 if isinstance(out, torch.Tensor) else len(out)
    (out if isinstance(out, torch.Tensor) else out[0]).sum().backward()
    input_storages = {a.untyped_storage().data_ptr(): i for i, a in enumerate(args)}
    nodes = next(n for n in graphs["forward"].graph.nodes if n.op == "output").args[0]
    saved = []
    for node, value in zip(nodes[results:], outputs[results:], strict=True):
        if not isinstance(value, torch.Tensor):
            continue
        storage = value.untyped_storage()
        saved.append(
            Saved(
                node.name,
                tuple(value.shape),
                storage.nbytes(),
                input_storages.get(storage.data_ptr()),
                storage.data_ptr(),
                _made_by(node),
            )
        )
    backward_ops = sum(1 for n in graphs["backward"].graph.nodes if n.op == "call_function")
    return SavedForBackward(partitioner, saved, backward_ops)


# --------------------------------------------------------------------------- regional compilation


@dataclass(frozen=True)
class RegionalCompile:
    """Cold compile of a whole model against compiling one of its repeated blocks."""

    layers: int
    backend: str
    whole_graphs: int  # graphs dynamo compiled for torch.compile(model)
    regional_graphs: int  # graphs compiled when each block is compiled on its own (reused)
    speed: Any  # helpers.bench.SpeedComparison: whole (baseline) against regional, first calls

    def format(self) -> str:
        s = self.speed
        said = {
            "faster": "regional compiles faster",
            "slower": "regional compiles slower",
            "within noise": "no difference beyond the noise",
        }[s.verdict]
        return (
            f"{self.layers} blocks, backend {self.backend!r}: whole model {self.whole_graphs} graph "
            f"({s.baseline.median:.2f} s to the first output), one block compiled and reused "
            f"{self.regional_graphs} graph ({s.tuned.median:.2f} s): {said}, {s.speedup:.2f}x "
            f"(95 % interval {s.low:.2f}x to {s.high:.2f}x, {s.pairs} interleaved pairs)"
        )


def regional_compile(
    config: Any = "tiny",
    layers: int = 6,
    backend: str = "aot_eager",
    pairs: int = 5,
    max_seconds: float = 10.0,
) -> RegionalCompile:
    """Time the first call of ``torch.compile(model)`` against compiling each transformer block
    on its own (``block.compile()``: dynamo compiles the block's code once and reuses the graph
    for every block, their weights being graph inputs), from a reset dynamo each time, in
    interleaved pairs. ``backend="aot_eager"`` measures capture and AOTAutograd without
    generating code (seconds); with ``"inductor"`` code generation adds to both sides, and its
    on-disk cache makes a repeated compile warm."""
    import torch._dynamo as dynamo

    from .. import models
    from ..bench import compare_speed
    from ._graphs import _dynamo_defaults, quiet

    cfg = models.get_config(config, n_layers=layers)
    idx, targets = models.make_batch(cfg, 2)
    counted: list[int] = []

    def counting(gm: torch.fx.GraphModule, example_inputs: list) -> Callable[..., Any]:
        counted.append(1)
        if backend == "eager":
            return gm.forward
        return torch._dynamo.lookup_backend(backend)(gm, example_inputs)

    def whole() -> None:
        dynamo.reset()
        torch.compile(models.build_model(cfg), backend=counting)(idx, targets)

    def regional() -> None:
        dynamo.reset()
        model = models.build_model(cfg)
        for block in model.blocks:
            block.compile(backend=counting)
        model(idx, targets)

    with quiet(), _dynamo_defaults():
        graphs = []
        for run in (whole, regional):  # count the graphs once, outside the timing
            counted.clear()
            run()
            graphs.append(len(counted))
        speed = compare_speed(
            whole,
            regional,
            device="cpu",
            warmup=1,
            number=1,
            min_pairs=pairs,
            max_pairs=max(pairs, 3),
            max_seconds=max_seconds,
            names=("whole model", "regional"),
        )
        dynamo.reset()
    return RegionalCompile(layers, backend, graphs[0], graphs[1], speed)


# --------------------------------------------------------------------------- a whole training step


def _whole_step(
    config: Any, batch_size: int, seq_len: int | None
) -> tuple[Any, list[torch.Tensor], int, Any]:
    from .. import models

    cfg = models.get_config(config)
    model = models.build_model(cfg)
    idx, targets = models.make_batch(cfg, batch_size, seq_len or cfg.seq_len)
    names = [name for name, _ in model.named_parameters()]
    params = [p.detach() for _, p in model.named_parameters()]

    def step(*args: torch.Tensor) -> torch.Tensor:
        weights = dict(zip(names, args[: len(names)], strict=True))
        return torch.func.functional_call(model, weights, (args[-2], args[-1]))

    return step, [*params, idx, targets], len(params), (model, idx, targets)


def whole_step_saved(config: Any = "tiny", batch_size: int = 4, seq_len: int | None = None) -> dict[str, int]:
    """Bytes kept for the backward pass by one training step of the course model: eager
    (``memory.saved_tensor_bytes``, parameters apart) and compiled, as AOTAutograd's min-cut
    (Inductor's) and default partitioners split it (what the forward graph hands to the
    backward, parameters apart: they are in memory anyway). Traced, no code generated."""
    from .. import memory

    step, inputs, n_params, (model, idx, targets) = _whole_step(config, batch_size, seq_len)
    out = {"eager": memory.saved_tensor_bytes(lambda: model(idx, targets)).activations}
    for partitioner in PARTITIONERS:
        traced = saved_for_backward(step, inputs, range(n_params), partitioner)
        # each storage once; a parameter or a view of one (a transposed weight) is in memory anyway
        kept = {x.storage: x.bytes for x in traced.saved if x.input is None or x.input >= n_params}
        out[partitioner] = sum(kept.values())
    return out


def whole_step_saved_by_op(
    config: Any = "tiny", batch_size: int = 4, seq_len: int | None = None, partitioner: str = "min_cut"
) -> dict[str, int]:
    """What one training step's compiled forward hands to its backward, by the op that computed
    it (through views and tuple items: a LayerNorm's mean and rstd count as ``native_layer_norm``),
    bytes of the distinct storages, largest first; parameters left out, the batch's token ids as
    ``input``. Read from the traced graphs, no code generated."""
    step, inputs, n_params, _ = _whole_step(config, batch_size, seq_len)
    traced = saved_for_backward(step, inputs, range(n_params), partitioner)
    storages: dict[int, tuple[str, int]] = {}
    for x in traced.saved:
        if x.input is None or x.input >= n_params:
            storages.setdefault(x.storage, (x.made_by, x.bytes))
    out: dict[str, int] = {}
    for op, nbytes in storages.values():
        out[op] = out.get(op, 0) + nbytes
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def host_overhead_per_op(ops: int = 200, iters: int = 20) -> Any:
    """Seconds the host spends per eager op on a tiny tensor (Python, the dispatcher, the
    allocator): what remains of a step when each op does almost no work, and what
    ``mode="reduce-overhead"`` (CUDA graphs) removes on a GPU, where each op also pays a kernel
    launch. A :class:`helpers.bench.Measurement` of ``ops`` adds per sample, divided by ``ops``."""
    from ..bench import Measurement, measure

    x = torch.zeros(1)

    def chain() -> None:
        y = x
        for _ in range(ops):
            y = y + 1

    run = measure(chain, warmup=2, iters=iters, device="cpu")
    return Measurement(
        [t / ops for t in run.samples], run.first_call / ops, "cpu", meta={"ops_per_sample": ops}
    )

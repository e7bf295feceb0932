"""Peak memory of whole training steps by category, with PyTorch's own ``MemTracker``.

``torch.distributed._tools.mem_tracker.MemTracker`` is a dispatch mode that sees every
tensor a step creates and files it under parameters, buffers, gradients, optimizer state,
activations (made in the forward pass) or temporaries (made in the backward pass), keeping
the snapshot of the moment the total peaked. Under
``torch._subclasses.fake_tensor.FakeTensorMode`` tensors have shapes and dtypes but no
data, so the same step of a model far larger than this machine is "run" in seconds without
allocating it.

Two things about ``MemTracker`` shape this module:

* it refuses to see a module's forward twice (a second iteration) unless its module
  statistics are reset, so every step after the first calls ``reset_mod_stats()``;
* on every operator it updates the peak of every module seen so far — work that grows with
  depth × operators. A step's peak needs none of it, so :class:`_StepTracker` keeps only the
  whole-step peak (and each category's own high-water mark). The result equals stock
  ``MemTracker``'s peak snapshot (tested); ``python -m helpers.memory bench CONFIG`` times
  both (GPT-2 XL, 48 layers: 105 s against 18 s in one run on a busy 2-core machine).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .._validate import UnknownName, unknown
from .._validate import count as _count
from .._validate import flag as _flag
from ..bench import resolve_device

#: MemTracker's categories, renamed for the course.
CATEGORIES = {
    "Parameter": "parameters",
    "Buffer": "buffers",
    "Gradient": "gradients",
    "Optstate": "optimizer_state",
    "Activation": "activations",
    "Temp": "temporaries",
    "Other": "inputs",
    "Total": "total",
}
OPTIMIZERS = {
    "adamw": lambda params: torch.optim.AdamW(params, lr=1e-4, foreach=False),
    "adam": lambda params: torch.optim.Adam(params, lr=1e-4, foreach=False),
    "sgd": lambda params: torch.optim.SGD(params, lr=1e-3, foreach=False),
    "sgd_momentum": lambda params: torch.optim.SGD(params, lr=1e-3, momentum=0.9, foreach=False),
}


def _mem_tracker():
    try:
        from torch.distributed._tools.mem_tracker import MemTracker
    except ImportError as exc:  # torch.distributed missing from the build, or torch < 2.5
        raise RuntimeError(
            f"memory.track needs torch.distributed._tools.mem_tracker (torch >= 2.5 "
            f"with torch.distributed); this is torch {torch.__version__}: {exc}"
        ) from exc
    return MemTracker


def _step_tracker_class(fast: bool = True) -> type:
    """MemTracker, or (``fast``) MemTracker keeping only the whole-step peak."""
    MemTracker = _mem_tracker()
    fast = fast and hasattr(MemTracker, "_update_peak_stats")

    class _StepTracker(MemTracker):  # type: ignore[misc, valid-type]
        """MemTracker that keeps the whole-step peak only (see the module docstring)."""

        def __init__(self) -> None:
            super().__init__()
            self.fast = fast
            self.highest: dict[Any, dict[Any, int]] = {}

        if fast:

            def _update_peak_stats(self, peak_state: Any) -> None:  # MemTracker's signature
                for dev, snap in self._curr_mem_snap.items():
                    total = snap.get("Total", 0)
                    if self._peak_mem.get(dev, 0) < total:
                        self._peak_mem[dev] = total
                        self._peak_mem_snap[dev] = dict(snap)
                    high = self.highest.setdefault(dev, {})
                    for key, value in snap.items():
                        if value > high.get(key, 0):
                            high[key] = value

        def restart_peak(self) -> None:
            """Forget earlier steps' peak: the next peak is this step's."""
            current = self.get_tracker_snapshot()
            self._peak_mem = {dev: snap.get("Total", 0) for dev, snap in current.items()}
            self._peak_mem_snap = current
            self.highest = {dev: dict(snap) for dev, snap in current.items()}

    return _StepTracker


def _named(snapshot: dict[Any, int] | None) -> dict[str, int]:
    out = dict.fromkeys(CATEGORIES.values(), 0)
    for key, value in (snapshot or {}).items():
        name = getattr(key, "value", key)
        out[CATEGORIES.get(name, str(name))] = int(value)
    return out


def _one_device(snapshots: dict[Any, dict[Any, int]]) -> dict[Any, int]:
    # one device is tracked here; merge defensively if a step touched another
    merged: dict[Any, int] = {}
    for snap in snapshots.values():
        for key, value in snap.items():
            merged[key] = merged.get(key, 0) + value
    return merged


@dataclass
class StepPeak:
    """One tracked training step: categories at its peak, each category's own high-water
    mark, and what was left when it ended (bytes)."""

    peak: dict[str, int]
    highest: dict[str, int]
    end: dict[str, int]
    after_forward: dict[str, int]


@dataclass
class StepMemory:
    """What :func:`track` measured. ``steps[-1]`` is the steady step (optimizer state exists)."""

    model: str
    n_params: int
    batch: str
    fake: bool
    device: str
    seconds: float
    steps: list[StepPeak] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def peak(self) -> dict[str, int]:
        """Categories at the moment of the last step's peak (bytes; ``"total"`` included)."""
        return self.steps[-1].peak

    @property
    def peak_total(self) -> int:
        return self.steps[-1].peak["total"]

    def format(self, unit: str = "GiB") -> str:
        div = {"MiB": 2**20, "GiB": 2**30, "GB": 1e9}[unit]
        kind = "fake tensors (nothing allocated)" if self.fake else "real tensors"
        lines = [
            f"{self.model} ({self.n_params:,} parameters), batch {self.batch}, {kind} on "
            f"{self.device}, {len(self.steps)} step(s) tracked in {self.seconds:.1f} s",
            f"{'':<16} {'at peak':>10} {'highest':>10} {'after fwd':>10} {'at end':>10}   ({unit}, "
            "last step)",
        ]
        last = self.steps[-1]
        for key in CATEGORIES.values():
            if key == "buffers" and not last.highest.get(key):
                continue
            lines.append(
                f"{key:<16} {last.peak[key] / div:>10.3f} {last.highest[key] / div:>10.3f} "
                f"{last.after_forward[key] / div:>10.3f} {last.end[key] / div:>10.3f}"
            )
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()


def _default_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    inputs: Sequence[torch.Tensor],
    autocast: torch.dtype | None,
    grad_accum: int = 1,
    between: Callable[[], None] = lambda: None,
) -> None:
    device_type = inputs[0].device.type
    for i in range(grad_accum):  # micro-steps: backward adds into the gradients already there
        if i:
            between()  # MemTracker refuses a second forward of a module without a reset
        with torch.autocast(device_type, dtype=autocast) if autocast else contextlib.nullcontext():
            loss = model(*inputs) / grad_accum
        loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def _build(model: Any, fake: bool, device: torch.device) -> tuple[nn.Module, str, Any]:
    """The model (built inside the current mode), its name and its course config (or None)."""
    from .. import models

    if isinstance(model, (str, models.GPTConfig)):
        cfg = models.get_config(model)
        with torch.device(device):
            return models.TinyGPT(cfg), cfg.name, cfg
    if isinstance(model, nn.Module):
        own = getattr(model, "config", None)
        if fake:
            raise TypeError(
                "with fake=True pass a config name, a GPTConfig or a function that builds "
                "the model, so it is built from fake tensors; an already built model "
                "holds real memory"
            )
        return model, type(model).__name__, own if isinstance(own, models.GPTConfig) else None
    if callable(model):
        with torch.device(device):
            built = model()
        if not isinstance(built, nn.Module):
            raise TypeError(f"the model function returned {type(built).__name__}, not an nn.Module")
        own = getattr(built, "config", None)  # a course model: batches can be made for it
        if isinstance(own, models.GPTConfig):
            return built, own.name, own
        return built, type(built).__name__, None
    raise TypeError(
        f"model must be a config name, a GPTConfig, a function returning an nn.Module "
        f"or (fake=False) an nn.Module; got {type(model).__name__}"
    )


def _optimizer_for(optimizer: Any, model: nn.Module) -> torch.optim.Optimizer:
    if isinstance(optimizer, torch.optim.Optimizer):
        return optimizer
    if isinstance(optimizer, str):
        key = optimizer.lower().replace("-", "_")
        if key not in OPTIMIZERS:
            raise UnknownName(
                f"{unknown('optimizer', optimizer, OPTIMIZERS)}, or give a function "
                "params -> torch.optim.Optimizer"
            )
        return OPTIMIZERS[key](model.parameters())
    if callable(optimizer):
        return optimizer(model.parameters())
    raise TypeError(
        f"optimizer must be a name, a function params -> Optimizer or an Optimizer; "
        f"got {type(optimizer).__name__}"
    )


def track(
    model: Any,
    optimizer: Any = "adamw",
    step_fn: Callable[..., Any] | None = None,
    *,
    fake: bool = True,
    batch_size: int = 8,
    seq_len: int | None = None,
    inputs: Callable[[], Sequence[torch.Tensor]] | None = None,
    steps: int = 1,
    prime: bool | None = None,
    device: str | torch.device = "auto",
    autocast: str | None = None,
    grad_accum: int = 1,
    _fast: bool = True,
) -> StepMemory:
    """Track the memory of whole training steps by category with ``MemTracker``.

    ``model``: a course config (``"gpt2-small"``, a :class:`helpers.models.GPTConfig`), a
    function that builds an ``nn.Module``, or (``fake=False``) a built module. ``optimizer``:
    ``"adamw"``, ``"adam"``, ``"sgd"``, ``"sgd_momentum"`` (single-tensor implementations:
    a GPU's default "foreach" AdamW briefly needs extra buffers as large as all the
    parameters), a function ``params -> Optimizer``, or (``fake=False``) an optimizer.
    ``step_fn(model, optimizer, inputs)`` runs one step; the default is forward with loss,
    backward, ``optimizer.step()``, ``zero_grad(set_to_none=True)``; with ``grad_accum`` > 1,
    that many forward and backward passes (micro-steps) before the optimizer step. Course models get a
    batch of ``batch_size`` × ``seq_len`` token ids (zeros: values do not change memory);
    other models need ``inputs``, a function returning the step's input tensors.

    ``fake=True`` builds model, optimizer and batch under ``FakeTensorMode`` on the CPU: no
    memory is allocated, so any size can be measured. ``steps`` (>= 1) steps are tracked,
    with ``reset_mod_stats()`` between them. ``prime`` (default: on with fake tensors) first
    creates the optimizer state with one untracked optimizer step on zero gradients, so the
    first tracked step is already a steady one; without it the first step creates the state
    (track ``steps=2`` and read the last; priming real weights would change them). Bytes are
    exact storage sizes; on a GPU the caching allocator rounds each block up (to 512 bytes
    and more), keeps freed blocks (reserved > allocated) and needs workspace for some
    kernels (cuBLAS, attention), so measured CUDA peaks run somewhat higher.
    """
    _flag(fake=fake)
    if prime is not None:
        _flag(prime=prime)
    steps, batch_size, grad_accum = _count(steps=steps, batch_size=batch_size, grad_accum=grad_accum)
    if fake:
        if str(device) not in ("cpu", "auto"):
            raise ValueError(
                "fake=True tracks on the CPU device (fake tensors have no data, so the "
                f"device changes nothing but allocator rounding); got device={device!r}, "
                "use device='cpu'"
            )
        dev = torch.device("cpu")
    else:
        dev = resolve_device(device)
    amp = None
    if autocast:
        from .. import hardware

        amp = hardware.DTYPES[hardware.dtype_key(autocast)]
    from torch._subclasses.fake_tensor import FakeTensorMode

    tracker_class = _step_tracker_class(_fast)
    start = time.perf_counter()
    mode = FakeTensorMode() if fake else contextlib.nullcontext()
    with mode:
        built, name, cfg = _build(model, fake, dev)
        if inputs is not None:
            batch = tuple(inputs())
            shape = " × ".join(str(tuple(t.shape)) for t in batch)
        elif cfg is not None:
            s = cfg.seq_len if seq_len is None else seq_len
            if not 1 <= s <= cfg.seq_len:
                raise ValueError(f"seq_len must be in 1..{cfg.seq_len} for {cfg.name}, got {s}")
            batch = tuple(torch.zeros(batch_size, s, dtype=torch.long, device=dev) for _ in range(2))
            shape = f"{batch_size} × {s} tokens"
        else:
            raise ValueError(
                "give inputs=, a function returning the step's input tensors, for a "
                "model that is not a course config"
            )
        opt = _optimizer_for(optimizer, built)
        if fake if prime is None else prime:
            _prime(built, opt)
        tracker = tracker_class()
        run = step_fn or (lambda m, o, x: _default_step(m, o, x, amp, grad_accum, tracker.reset_mod_stats))
        tracker.track_external(built, opt, *batch)
        result = StepMemory(name, sum(p.numel() for p in built.parameters()), shape, fake, str(dev), 0.0)
        with tracker:
            for i in range(steps):
                if i:
                    tracker.reset_mod_stats()  # MemTracker refuses a second iteration otherwise
                tracker.restart_peak()
                run(built, opt, batch)
                result.steps.append(_step_result(tracker, built))
    result.seconds = time.perf_counter() - start
    if amp is not None:
        result.notes.append(
            f"{autocast} autocast: weights stay fp32; the forward keeps 16-bit copies "
            "of them for the backward (filed as activations)"
        )
    return result


def _prime(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Create the optimizer state: one step on zero gradients, then drop the gradients."""
    for p in model.parameters():
        if p.requires_grad:
            p.grad = torch.zeros_like(p)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def _step_result(tracker: Any, root: nn.Module) -> StepPeak:
    after_forward: dict[Any, int] = {}
    stats = tracker.memory_tracking.get(root)
    if stats is not None:
        for state, snaps in stats.snapshots.items():
            if getattr(state, "value", state) == "Post-Forward" and snaps:
                after_forward = _one_device(snaps[-1])
    peak = _one_device(tracker.get_tracker_snapshot("peak"))
    return StepPeak(
        _named(peak),
        _named(_one_device(tracker.highest) if tracker.fast else peak),
        _named(_one_device(tracker.get_tracker_snapshot("current"))),
        _named(after_forward),
    )

"""What a mixed-precision training loop does in practice: the GradScaler's steps, accumulation in
a wide format, master weights, and the memory autocast saves.

* :func:`scaler_steps` runs ``torch.amp.GradScaler``'s code path on a small model and records,
  step by step, the scale, whether a gradient was inf or NaN and whether the step was skipped;
* :func:`accumulate` sums many small terms in a narrow or a wide accumulator (Micikevicius et
  al., 2018: accumulate products in fp32);
* :func:`lost_updates` counts the optimizer updates that round away when the weights are
  stored in a narrow format, with no fp32 master copy;
* :func:`saved_bytes_by_precision` measures what autograd saves for backward in fp32 and under
  autocast (chapter 5's hooks).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .. import models
from .._validate import count, positive
from ..bench import resolve_device
from ._autocast import autocast_context


@dataclass(frozen=True)
class ScalerStep:
    """One step of a GradScaler loop."""

    step: int
    scale: float  # the scale this step's loss was multiplied by
    found_inf: bool  # an inf or NaN in the unscaled gradients
    skipped: bool  # the optimizer did not change the weights
    grad_norm: float  # after unscale_: what clipping saw (inf when found_inf)

    def __str__(self) -> str:
        what = "SKIPPED (inf/NaN in the gradients)" if self.skipped else "applied"
        return (
            f"step {self.step}: scale {self.scale:g}, gradient norm {self.grad_norm:.3g} after "
            f"unscale_, {what}"
        )


def scaler_steps(
    steps: int = 6,
    bad_steps: Sequence[int] = (2,),
    growth_interval: int = 2,
    init_scale: float = 2.0**16,
    seed: int = 0,
) -> list[ScalerStep]:
    """The GradScaler code path a training loop writes, on a small linear model (CPU, fp32
    weights: what is shown is the scaler's bookkeeping)::

        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)             # gradients back to their true size ...
        clip_grad_norm_(parameters, 1.0)       # ... before clipping
        scaler.step(optimizer)                 # skipped if a gradient is inf or NaN
        scaler.update()                        # halve on inf/NaN, double after growth_interval clean steps

    At each step in ``bad_steps`` one gradient is made infinite (as an fp16 overflow would).
    Example data, seeded."""
    steps, growth_interval = count(steps=steps, growth_interval=growth_interval)
    positive(init_scale=init_scale)
    gen = torch.Generator().manual_seed(seed)
    model = torch.nn.Linear(8, 1)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=growth_interval)
    x, y = torch.randn(16, 8, generator=gen), torch.randn(16, 1, generator=gen)
    out = []
    for step in range(steps):
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        scale = scaler.get_scale()
        scaler.scale(loss).backward()
        if step in bad_steps:
            model.weight.grad[0, 0] = float("inf")  # type: ignore[index]  # set by backward()
        scaler.unscale_(optimizer)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0).item()
        before = [p.detach().clone() for p in model.parameters()]
        scaler.step(optimizer)
        scaler.update()
        unchanged = all(torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True))
        out.append(ScalerStep(step, scale, not torch.isfinite(torch.tensor(norm)).item(), unchanged, norm))
    return out


def accumulate(values: torch.Tensor, dtype: torch.dtype, accumulator: torch.dtype) -> float:
    """Add ``values`` (stored in ``dtype``) one by one into an accumulator of ``accumulator``
    dtype, rounding after every addition as a kernel with that accumulator does."""
    total = torch.zeros((), dtype=accumulator)
    for v in values.to(dtype):
        total = (total + v.to(accumulator)).to(accumulator)
    return float(total)


def lost_updates(weights: torch.Tensor, updates: torch.Tensor, dtype: torch.dtype) -> float:
    """The fraction of non-zero updates that change nothing when the weights are kept in
    ``dtype`` (no fp32 master copy): ``w + u`` rounds back to ``w``. An update smaller than half
    the gap between neighbouring values of ``dtype`` near ``w`` is lost."""
    if weights.shape != updates.shape:
        raise ValueError(f"weights {tuple(weights.shape)} and updates {tuple(updates.shape)} differ in shape")
    w = weights.detach().to(dtype)
    moved = (w.float() + updates.detach().float()).to(dtype)
    nonzero = updates != 0
    return ((moved == w) & nonzero).float().sum().item() / max(1, int(nonzero.sum()))


def saved_bytes_by_precision(
    config: str | models.GPTConfig = "tiny",
    batch_size: int = 8,
    seq_len: int | None = None,
    device: str | torch.device = "cpu",
    autocasts: Sequence[str] = ("fp32", "bf16"),
) -> dict[str, int]:
    """Bytes autograd saves for backward in one forward pass of the course model, in fp32 and
    under each autocast dtype (``memory.saved_tensor_bytes``: each storage once)."""
    from .. import memory

    dev = resolve_device(device)
    cfg = models.get_config(config)
    model = models.build_model(cfg, dev)
    idx, targets = models.make_batch(cfg, batch_size, seq_len or cfg.seq_len, dev)
    out = {}
    for key in autocasts:
        with autocast_context(dev, key):
            out[key] = memory.saved_tensor_bytes(lambda: model(idx, targets)).activations
    return out

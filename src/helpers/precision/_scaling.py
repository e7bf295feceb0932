"""Scaling for fp8: a per-tensor scale from amax, delayed scaling with an amax history, and MX
block scaling with one power-of-two (E8M0) scale per 32 values.

* Per-tensor: ``scale = fp8_max / amax / 2^margin``; store ``fp8(x · scale)``, read back
  ``fp8 / scale`` (Micikevicius et al., "FP8 Formats for Deep Learning", 2022).
* Delayed scaling (NVIDIA Transformer Engine's ``DelayedScaling`` recipe): the scale used at
  step t comes from the amaxes of *earlier* steps — the most recent one, or the max over a
  history of ``history_len`` steps — so a tensor whose values grow faster than the history
  expects overflows. The scale starts at 1.
* MX (OCP Microscaling Formats Specification v1.0, 2023): blocks of 32 values share a scale
  ``X = 2^(floor(log2(amax_block)) - emax_elem)`` stored as E8M0, and each value is stored as
  ``V / X`` in the element format, saturated at its largest normal.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from .. import i18n
from .._validate import count, positive, unknown, whole_fields
from ..i18n import text, tr

POLICIES = ("max", "most_recent")
MX_BLOCK = 32  # values per shared scale in every MX format of the v1.0 specification


def fp8_max(dtype: torch.dtype) -> float:
    """The largest finite value of an fp8 (or any floating) dtype, from ``torch.finfo``."""
    return float(torch.finfo(dtype).max)


def fp8_scale(amax: float, dtype: torch.dtype = torch.float8_e4m3fn, margin: int = 0) -> float:
    """Per-tensor scale that maps ``amax`` onto the format's largest value, divided by
    ``2^margin`` to leave headroom: ``finfo(dtype).max / amax / 2^margin``."""
    positive(amax=float(amax))
    (margin,) = count(0, margin=margin)
    return fp8_max(dtype) / float(amax) / 2**margin


def saturating_cast(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x`` cast to ``dtype`` after clamping to ±max: out-of-range values become ±max, never
    inf or NaN, whatever the cast of this torch build does with them."""
    limit = fp8_max(dtype)
    return x.clamp(-limit, limit).to(dtype)


@dataclass(frozen=True)
class Quantized:
    """A tensor stored in fp8 with a per-tensor scale, read back as float32."""

    values: torch.Tensor  # dequantized: fp8 / scale, float32
    scale: float
    overflow_fraction: float  # |x · scale| beyond the format's max (clipped by the saturating cast)
    zero_fraction: float  # non-zero values that became 0
    mean_abs_error: float
    mean_rel_error: float  # over the non-zero values
    low_fraction: float = 0.0  # non-zero values scaled below the smallest normal: subnormal or 0

    def pair(self) -> tuple[float, float]:
        """``(scale, mean_abs_error)``."""
        return self.scale, self.mean_abs_error


def quantize(
    x: torch.Tensor, dtype: torch.dtype = torch.float8_e4m3fn, scale: float | None = None, margin: int = 0
) -> Quantized:
    """Per-tensor scaled cast to fp8 and back. Without ``scale``, it is computed from this
    tensor's own amax (:func:`fp8_scale`) — "current" scaling; delayed scaling passes one."""
    x = x.detach().float()
    amax = x.abs().max().item()
    if scale is None:
        scale = fp8_scale(amax, dtype, margin) if amax > 0 else 1.0
    positive(scale=scale)
    scaled = x * scale
    back = saturating_cast(scaled, dtype).float() / scale
    nonzero = x != 0
    err = (back - x).abs()
    low = (scaled.abs() < torch.finfo(dtype).smallest_normal) & nonzero
    return Quantized(
        back,
        scale,
        (scaled.abs() > fp8_max(dtype)).float().mean().item(),
        ((back == 0) & nonzero).float().mean().item(),
        err.mean().item(),
        (err[nonzero] / x.abs()[nonzero]).mean().item() if nonzero.any() else 0.0,
        low.float().mean().item(),
    )


# --------------------------------------------------------------------------- delayed scaling


@dataclass
class DelayedScaling:
    """The scale of one tensor under delayed scaling.

    ``scale`` is what the current step uses; :meth:`update` is called after the step with
    the amax it saw, appends it to the history (the last ``history_len`` amaxes) and sets the
    scale for the next step from the history's max (``policy="max"``) or its newest entry
    (``"most_recent"``). The scale starts at 1.0 and is kept when the amax is 0 or not finite.
    """

    fmt_max: float
    history_len: int = 16
    policy: str = "max"
    margin: int = 0
    scale: float = 1.0
    history: deque = field(default_factory=deque)

    def __post_init__(self) -> None:
        positive(fmt_max=self.fmt_max)
        whole_fields(self, "history_len")
        whole_fields(self, "margin", minimum=0)
        if self.policy not in POLICIES:
            raise unknown("policy", self.policy, POLICIES)
        self.history = deque(self.history, maxlen=self.history_len)

    def overflows(self, amax: float) -> bool:
        """Whether a tensor with this amax overflows at the current scale."""
        return amax * self.scale > self.fmt_max

    def update(self, amax: float) -> float:
        """Record this step's amax; return the scale for the next step. A NaN in the history
        makes its max NaN (as ``torch.max`` does in Transformer Engine's scale update), so the
        scale is kept until the NaN leaves the history; Python's ``max`` would skip a NaN
        unless it came first."""
        self.history.append(float(amax))
        if self.policy == "max":
            reference = math.nan if any(math.isnan(a) for a in self.history) else max(self.history)
        else:
            reference = self.history[-1]
        if reference > 0 and math.isfinite(reference):
            self.scale = self.fmt_max / reference / 2**self.margin
        return self.scale


@dataclass(frozen=True)
class ScalingStep:
    """One step of a delayed-scaling run."""

    step: int
    amax: float
    scale: float  # the scale this step used
    overflow: bool  # amax · scale > the format's max
    overflow_fraction: float | None = None  # of the tensor's values (when tensors were given)
    mean_rel_error: float | None = None
    low_fraction: float | None = None  # of the tensor's values: scaled below the smallest normal


def simulate_delayed_scaling(
    amaxes_or_tensors: Sequence[float | torch.Tensor],
    dtype: torch.dtype = torch.float8_e4m3fn,
    history_len: int = 16,
    policy: str = "max",
    margin: int = 0,
) -> list[ScalingStep]:
    """Run delayed scaling over a sequence of steps, given each step's amax or its tensor.

    With tensors, each step also quantizes the tensor at the scale it was given (saturating)
    and records the fraction of values that overflowed, the fraction scaled below the smallest
    normal (subnormal or zero: where fp8 loses relative precision) and the mean relative error.
    """
    if not amaxes_or_tensors:
        raise ValueError("give at least one step")
    state = DelayedScaling(fp8_max(dtype), history_len, policy, margin)
    steps = []
    extra: tuple[float | None, float | None, float | None]
    for t, item in enumerate(amaxes_or_tensors):
        if isinstance(item, torch.Tensor):
            amax = item.detach().abs().max().item()
            q = quantize(item, dtype, scale=state.scale)
            extra = (q.overflow_fraction, q.mean_rel_error, q.low_fraction)
        else:
            amax, extra = float(item), (None, None, None)
        steps.append(ScalingStep(t, amax, state.scale, state.overflows(amax), *extra))
        state.update(amax)
    return steps


def first_overflow(
    amaxes: Sequence[float], fmt_max: float, history_len: int, policy: str = "max", margin: int = 0
) -> int | None:
    """The first step at which delayed scaling overflows (amax · scale > fmt_max), or None."""
    state = DelayedScaling(fmt_max, history_len, policy, margin)
    for t, amax in enumerate(amaxes):
        if state.overflows(amax):
            return t
        state.update(amax)
    return None


def drifting_activations(
    steps: int = 40,
    size: int = 4096,
    growth: float = 1.05,
    jump_at: int | None = None,
    jump: float = 4.0,
    start: float = 1.0,
    seed: int = 0,
) -> list[torch.Tensor]:
    """Synthetic activations whose scale drifts: standard normal × ``start`` × ``growth^t``,
    times ``jump`` from step ``jump_at`` on (a sudden change, e.g. a learning-rate warm-up
    ending). Example data, seeded."""
    steps, size = count(steps=steps, size=size)
    positive(growth=growth, jump=jump, start=start)
    gen = torch.Generator().manual_seed(seed)
    out = []
    for t in range(steps):
        factor = start * growth**t * (jump if jump_at is not None and t >= jump_at else 1.0)
        out.append(torch.randn(size, generator=gen) * factor)
    return out


# --------------------------------------------------------------------------- MX block scaling

SCALE_ROUNDINGS = ("floor", "rceil")


def mx_quantize(
    x: torch.Tensor,
    elem_dtype: torch.dtype = torch.float8_e4m3fn,
    block: int = MX_BLOCK,
    scale_rounding: str = "floor",
    dim: int = -1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """MX block scaling: returns the values read back as float32 (the shape of ``x``) and the
    per-block scales as ``torch.float8_e8m0fnu``. Blocks of ``block`` values run along ``dim``
    (the reduction dimension of the matrix product that will use them; a row shorter than a
    whole number of blocks is padded with zeros).

    Per block: ``X = 2^(floor(log2(amax)) - emax_elem)`` (``scale_rounding="floor"``, the OCP
    MX v1.0 rule; clamped to E8M0's 2^-127 … 2^127; an all-zero block gets 2^-127), elements
    ``V / X`` saturated to the element format. ``emax_elem`` is the exponent of the element
    format's largest normal. Floor scaling maps amax into the element format's top binade, whose
    upper part is beyond the format's max (e4m3: 448 < 512), so a block amax of 500 is clamped
    to 448. ``scale_rounding="rceil"`` rounds the scale up instead,
    ``X = 2^ceil(log2(amax / max_elem))``, so nothing is clamped, at the cost of one binade at
    the bottom of the block. ``floor(log2(amax))`` is read from amax's bits (``torch.frexp``):
    a float32 ``log2`` rounds up for values just below a power of two (1023.99994 gives 10,
    not 9), which would make the scale one binade too large. A block that holds a NaN or an
    infinity gets the scale NaN (E8M0's one special code; it has no infinity), and every value
    of that block reads back as NaN: in OCP MX v1.0 a NaN scale makes the whole block NaN.
    """
    (block,) = count(block=block)
    if scale_rounding not in SCALE_ROUNDINGS:
        raise unknown("scale_rounding", scale_rounding, SCALE_ROUNDINGS)
    values = x.detach().float()
    if values.dim() == 0:
        values = values.reshape(1)
    moved = values.movedim(dim, -1)
    length = moved.shape[-1]
    pad = (-length) % block
    rows = torch.cat([moved, moved.new_zeros(*moved.shape[:-1], pad)], dim=-1) if pad else moved
    blocks = rows.reshape(-1, block)
    elem_max = fp8_max(elem_dtype)
    emax_elem = math.floor(math.log2(elem_max))
    special = ~torch.isfinite(blocks).all(dim=1, keepdim=True)  # a NaN or an infinity
    amax = torch.where(special, 0.0, blocks.abs()).amax(dim=1, keepdim=True)
    if scale_rounding == "floor":
        exponent = (torch.frexp(amax).exponent - 1).float() - emax_elem  # amax = m * 2^e, m in [0.5, 1)
    else:
        mantissa, e = torch.frexp(amax / elem_max)  # ceil(log2(v)) is e, or e - 1 for a power of two
        exponent = (e - (mantissa == 0.5).int()).float()
    exponent = torch.where(amax > 0, exponent, torch.full_like(amax, -127.0))
    scales = torch.exp2(exponent.clamp(-127, 127))
    elements = saturating_cast(torch.where(special, 0.0, blocks) / scales, elem_dtype).float()
    scales = torch.where(special, math.nan, scales)
    back = (elements * scales).reshape(rows.shape)[..., :length].movedim(-1, dim)
    return back.reshape(x.shape), scales.flatten().to(torch.float8_e8m0fnu)


def block_errors(x: torch.Tensor, approx: torch.Tensor, block: int = MX_BLOCK) -> torch.Tensor:
    """Mean relative error of ``approx`` against ``x`` per block of ``block`` values (non-zero
    values only; a block of zeros scores 0)."""
    flat, other = x.detach().float().flatten(), approx.detach().float().flatten()
    pad = (-flat.numel()) % block
    flat = torch.cat([flat, flat.new_zeros(pad)]).view(-1, block)
    other = torch.cat([other, other.new_zeros(pad)]).view(-1, block)
    nonzero = flat != 0
    magnitude = flat.abs().clamp_min(torch.finfo(torch.float32).tiny)
    rel = torch.where(nonzero, (other - flat).abs() / magnitude, 0.0)
    return rel.sum(dim=1) / nonzero.sum(dim=1).clamp_min(1)


def with_outliers(size: int = 4096, every: int = 512, outlier: float = 1000.0, seed: int = 0) -> torch.Tensor:
    """Example data: standard normal values with one outlier of magnitude ``outlier`` every
    ``every`` values — the pattern found in large transformers' activations."""
    size, every = count(size=size, every=every)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(size, generator=gen)
    x[::every] = outlier * torch.sign(torch.randn(len(range(0, size, every)), generator=gen))
    return x


# --------------------------------------------------------------------------- plots


def plot_delayed_scaling(runs: dict[str, Sequence[ScalingStep]], fmt_max: float, ax: Any = None) -> Any:
    """Each step's amax against the largest amax its scale could hold (fmt_max / scale), per
    run; an amax above its run's line overflowed (marked with x)."""
    import matplotlib.pyplot as plt

    i18n.for_plot()
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 3.8))
    first = next(iter(runs.values()))
    ax.semilogy([s.step for s in first], [s.amax for s in first], "k.-", lw=1, label=tr("amax of the step"))
    for label, steps in runs.items():
        line = ax.semilogy(
            [s.step for s in steps],
            [fmt_max / s.scale for s in steps],
            lw=1.5,
            drawstyle="steps-mid",
            label=tr("largest amax that fits: {label}", label=text(label)),
        )
        bad = [s for s in steps if s.overflow]
        if bad:
            ax.semilogy([s.step for s in bad], [s.amax for s in bad], "x", ms=8, color=line[0].get_color())
    ax.set_xlabel(tr("step"))
    ax.set_ylabel(tr("magnitude"))
    ax.set_title(tr("delayed scaling: x = the step overflowed"))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    return ax


def plot_block_errors(errors: dict[str, torch.Tensor], ax: Any = None) -> Any:
    """Mean relative error per block of 32 values, one line per scaling method."""
    import matplotlib.pyplot as plt

    i18n.for_plot()
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 3.6))
    for label, err in errors.items():
        ax.semilogy(range(len(err)), err.clamp_min(1e-6).tolist(), lw=1, label=text(label))
    ax.set_xlabel(tr("block of 32 values"))
    ax.set_ylabel(tr("mean relative error"))
    ax.set_title(tr("fp8 e4m3 round trip: per-tensor scale vs MX block scales"))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return ax

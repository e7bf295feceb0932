"""Floating-point formats: their limits from ``torch.finfo`` or from the bit layout, what a
value becomes in each, and the rounding error of a tensor.

A binary floating-point number is ``(-1)^s · 2^(E - bias) · 1.M`` (normal) or
``(-1)^s · 2^(1 - bias) · 0.M`` (subnormal, E = 0), with ``bias = 2^(e-1) - 1`` for ``e``
exponent bits and ``m`` mantissa bits. Three layouts differ in what the top exponent means:

* ``"ieee"`` (fp32, fp16, bf16, tf32, fp8 e5m2): the all-ones exponent is infinity / NaN;
* ``"fn"`` (fp8 e4m3fn, "finite"): no infinity; only all-ones exponent *and* mantissa is NaN,
  so the top exponent holds normal numbers up to mantissa 1.110…;
* ``"e8m0"`` (the MX scale format): no sign, no mantissa — powers of two 2^-127 … 2^127,
  all-ones is NaN;
* ``"mx"`` (the MX element formats fp6 e3m2, fp6 e2m3 and fp4 e2m1): no infinity and no NaN
  code at all, so every exponent and mantissa pattern is a number.

Sources: IEEE 754-2019; Micikevicius et al., "FP8 Formats for Deep Learning" (2022) for E4M3
and E5M2; the OCP Microscaling Formats (MX) Specification v1.0 (2023) for E8M0 and the fp6 and
fp4 element formats (MXFP6, MXFP4); NVIDIA's NVFP4 (Blackwell) uses the same fp4 e2m1 element
with one e4m3 scale per 16 values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import torch

from .._validate import count, unknown

#: The formats of the table: name -> (torch dtype or None, exponent bits, mantissa bits, layout, note).
_SPECS: dict[str, tuple[torch.dtype | None, int, int, str, str]] = {
    "fp32": (torch.float32, 8, 23, "ieee", "single precision: master weights, optimizer state"),
    "tf32": (None, 8, 10, "ieee", "tensor-core math mode: fp32 in memory, 10-bit mantissa inside GEMMs"),
    "fp16": (torch.float16, 5, 10, "ieee", "half precision: needs loss scaling to train"),
    "bf16": (torch.bfloat16, 8, 7, "ieee", "fp32's range with 7 mantissa bits"),
    "fp8_e4m3": (torch.float8_e4m3fn, 4, 3, "fn", "fp8 for weights and activations (forward)"),
    "fp8_e5m2": (torch.float8_e5m2, 5, 2, "ieee", "fp8 for gradients (backward): more range"),
    "e8m0": (torch.float8_e8m0fnu, 8, 0, "e8m0", "MX block scale: a power of two, no sign"),
    "fp6_e3m2": (None, 3, 2, "mx", "MXFP6 element (32 per e8m0 scale): no inf, no NaN"),
    "fp6_e2m3": (None, 2, 3, "mx", "MXFP6 element (32 per e8m0 scale): no inf, no NaN"),
    "fp4_e2m1": (None, 2, 1, "mx", "MXFP4 element (32 per e8m0 scale); NVFP4: 16 per e4m3 scale"),
}

#: Formats a tensor can be stored in (tf32 is a math mode, e8m0 holds only scales), narrowest first.
STORAGE = ("fp8_e4m3", "fp8_e5m2", "fp16", "bf16", "fp32")


class LayoutLimits(TypedDict):
    """What :func:`layout_limits` returns (a plain dict)."""

    max: float
    smallest_normal: float
    smallest_subnormal: float | None  # None: no subnormals (e8m0, or no mantissa bits)
    eps: float


@dataclass(frozen=True)
class FloatFormat:
    """One row of the format table."""

    name: str
    bits: int  # storage bits (tf32: the bits that take part in the math)
    sign_bits: int
    exponent_bits: int
    mantissa_bits: int
    max: float
    smallest_normal: float
    smallest_subnormal: float | None  # None: the format has no subnormals
    eps: float  # machine epsilon: the gap between 1 and the next larger value
    dtype: torch.dtype | None
    source: str  # "torch.finfo" or "bit layout"
    note: str = ""

    @property
    def unit_roundoff(self) -> float:
        """Largest relative error of rounding to nearest: eps / 2."""
        return self.eps / 2


class FormatTable(list):
    """A list of :class:`FloatFormat` that prints as a table."""

    def row(self, name: str) -> FloatFormat:
        for fmt in self:
            if fmt.name == name:
                return fmt
        raise unknown("format", name, [f.name for f in self])

    def __str__(self) -> str:
        head = (
            f"{'format':<9} {'bits':>4} {'s/e/m':>7} {'max':>11} {'min normal':>11} "
            f"{'min subnormal':>13} {'eps':>9}  from"
        )
        lines = [head, "-" * len(head)]
        for f in self:
            sub = f"{f.smallest_subnormal:13.4g}" if f.smallest_subnormal is not None else f"{'none':>13}"
            lines.append(
                f"{f.name:<9} {f.bits:>4} {f.sign_bits}/{f.exponent_bits}/{f.mantissa_bits:<3} "
                f"{f.max:11.4g} {f.smallest_normal:11.4g} {sub} {f.eps:9.3g}  {f.source}"
            )
        return "\n".join(lines)


def layout_limits(exponent_bits: int, mantissa_bits: int, layout: str = "ieee") -> LayoutLimits:
    """``max``, ``smallest_normal``, ``smallest_subnormal`` and ``eps`` from the bit layout alone.

    See the module docstring for the three layouts. Used for formats torch has no dtype for
    (tf32) and, in the tests, checked against ``torch.finfo`` for every format torch has.
    """
    (exponent_bits,) = count(exponent_bits=exponent_bits)
    (mantissa_bits,) = count(0, mantissa_bits=mantissa_bits)
    bias = 2 ** (exponent_bits - 1) - 1
    eps = 2.0**-mantissa_bits
    if layout == "ieee":
        emax = 2**exponent_bits - 2 - bias  # the all-ones exponent is inf / NaN
        largest_mantissa = 2 - eps
    elif layout == "fn":
        emax = 2**exponent_bits - 1 - bias  # the top exponent holds numbers ...
        largest_mantissa = 2 - 2 * eps  # ... except mantissa all-ones (NaN)
    elif layout == "mx":
        emax = 2**exponent_bits - 1 - bias  # every code is a number: no inf, no NaN
        largest_mantissa = 2 - eps
    elif layout == "e8m0":
        return {
            "max": 2.0 ** (2**exponent_bits - 2 - bias),
            "smallest_normal": 2.0**-bias,
            "smallest_subnormal": None,
            "eps": 1.0,
        }
    else:
        raise ValueError(f"layout must be 'ieee', 'fn', 'mx' or 'e8m0', got {layout!r}")
    normal = 2.0 ** (1 - bias)
    return {
        "max": largest_mantissa * 2.0**emax,
        "smallest_normal": normal,
        "smallest_subnormal": normal * eps if mantissa_bits else None,
        "eps": eps,
    }


def _from_finfo(name: str, dtype: torch.dtype, note: str) -> FloatFormat:
    info = torch.finfo(dtype)
    mantissa = round(-math.log2(info.eps))
    sign = 0 if info.min > 0 else 1  # e8m0 has no negative numbers
    smallest_normal = float(info.smallest_normal)
    return FloatFormat(
        name,
        info.bits,
        sign,
        info.bits - sign - mantissa,
        mantissa,
        float(info.max),
        smallest_normal,
        smallest_normal * info.eps if mantissa else None,
        float(info.eps),
        dtype,
        "torch.finfo",
        note,
    )


def format_table() -> FormatTable:
    """fp32, tf32, fp16, bf16, fp8 e4m3fn, fp8 e5m2, e8m0 and the MX element formats fp6 e3m2,
    fp6 e2m3 and fp4 e2m1: bits, exponent and mantissa bits, max, smallest normal, smallest
    subnormal and machine epsilon.

    Computed from ``torch.finfo`` where torch has the dtype (exponent and mantissa bits from
    its ``bits`` and ``eps``, the smallest subnormal as smallest normal × eps); tf32, which
    is a math mode and has no dtype, and the fp6 and fp4 elements from their bit layout.
    """
    rows = FormatTable()
    for name, (dtype, e, m, layout, note) in _SPECS.items():
        if dtype is not None:
            rows.append(_from_finfo(name, dtype, note))
        else:
            lim = layout_limits(e, m, layout)
            rows.append(
                FloatFormat(
                    name,
                    1 + e + m,
                    1,
                    e,
                    m,
                    lim["max"],
                    lim["smallest_normal"],
                    lim["smallest_subnormal"],
                    lim["eps"],
                    None,
                    "bit layout",
                    note,
                )
            )
    return rows


def pick_format(
    min_abs: float, max_abs: float, rel_step: float, candidates: Sequence[str] = STORAGE
) -> list[str]:
    """Every storage format with the fewest bits that holds all magnitudes in
    ``[min_abs, max_abs]`` as normal numbers (no overflow, no subnormal) with a machine epsilon
    of at most ``rel_step``; ``[]`` when none does. No scaling is applied."""
    if not 0 < min_abs <= max_abs or not math.isfinite(max_abs):
        raise ValueError(f"need 0 < min_abs <= max_abs < inf, got {min_abs!r}, {max_abs!r}")
    table = format_table()
    fits = [
        f
        for f in map(table.row, candidates)
        if f.smallest_normal <= min_abs and max_abs <= f.max and f.eps <= rel_step
    ]
    if not fits:
        return []
    fewest = min(f.bits for f in fits)
    return [f.name for f in fits if f.bits == fewest]


FATES = ("overflow", "normal", "subnormal", "underflow")


def fate(value: float, exponent_bits: int, mantissa_bits: int) -> str:
    """What round-to-nearest-even does to ``value`` in an IEEE-style format with that layout:
    ``"overflow"`` (becomes ±inf), ``"normal"``, ``"subnormal"`` (kept, with fewer significant
    bits) or ``"underflow"`` (becomes zero).

    The thresholds sit half a step past each limit: a value rounds to infinity only from
    ``max + ulp(max)/2`` up, to zero only at or below half the smallest subnormal.
    """
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or value == 0 or not math.isfinite(value):
        raise ValueError(f"give a non-zero finite number, got {value!r}")
    lim = layout_limits(exponent_bits, mantissa_bits, "ieee")
    magnitude = abs(value)
    eps, top = lim["eps"], lim["max"]
    overflow_at = top + top * eps / (2 - eps) / 2  # max + half of the gap below 2^(emax+1)
    sub = lim["smallest_subnormal"] or lim["smallest_normal"]
    if magnitude >= overflow_at:
        return "overflow"
    if magnitude <= sub / 2:
        return "underflow"
    if magnitude < lim["smallest_normal"] - (sub / 2 if lim["smallest_subnormal"] else 0):
        return "subnormal"
    return "normal"


def cast_beyond_max(dtype: torch.dtype) -> dict[str, Any]:
    """What this torch's ``.to(dtype)`` returns past the format's largest value: for a value just
    past the rounding edge (480 for e4m3fn, whose max is 448), a far larger one, and +inf; with
    the torch version. Recent builds saturate e4m3fn (all three give 448: an infinity that no
    longer shows as an overflow); older builds returned NaN there. Read it on the torch you run."""
    if not dtype.is_floating_point:
        raise ValueError(f"cast_beyond_max needs a floating-point dtype, got {dtype}")
    top = torch.finfo(dtype).max
    probe = torch.tensor([top * 480 / 448, top * 20, float("inf")])
    back = probe.to(dtype).float().tolist()
    return {"torch": torch.__version__, "just_past_max": back[0], "far_past_max": back[1], "inf": back[2]}


def rounding_error(x: torch.Tensor, dtype: torch.dtype) -> dict[str, float]:
    """Round ``x`` to ``dtype`` and back to float32, and say what the cast did to each element:

    * ``max_rel_error``, ``mean_rel_error``: the relative error over the non-zero elements whose
      result stayed finite (read them next to the shares lost: a cast that sent half the values
      to infinity can show a small mean over the rest);
    * ``overflow_fraction``: elements the cast turned into ±inf or NaN (what it did, not
      ``|x| > max``: fp16's 65504–65520 round back to 65504);
    * ``saturated_fraction``: elements beyond the format's largest value that the cast clipped to
      ±max (torch's cast to e4m3fn saturates; fp16 does so only within half a step of its max);
    * ``zero_fraction``: non-zero elements that became 0;
    * ``lost_fraction``: overflowed or became 0.

    fp8 casts here go straight through torch (no scale); chapter 8 shows scaling.
    """
    x = x.detach().float()
    back = x.to(dtype).float()
    nonzero = x != 0
    finite = back.isfinite()
    rel = ((back - x).abs() / x.abs())[nonzero & finite]
    limit = torch.finfo(dtype).max
    overflow = ~finite & x.isfinite()
    zero = (back == 0) & nonzero
    return {
        "max_rel_error": rel.max().item() if rel.numel() else 0.0,
        "mean_rel_error": rel.mean().item() if rel.numel() else 0.0,
        "overflow_fraction": overflow.float().mean().item(),
        "saturated_fraction": ((x.abs() > limit) & (back.abs() == limit)).float().mean().item(),
        "zero_fraction": zero.float().mean().item(),
        "lost_fraction": (overflow | zero).float().mean().item(),
    }

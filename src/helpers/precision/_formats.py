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
  code at all, so every exponent and mantissa pattern is a number;
* ``"fnuz"`` (AMD's fp8 e4m3fnuz and e5m2fnuz: finite, NaN, unsigned zero): no infinity and no
  negative zero; the one NaN is the negative-zero pattern 0x80, so every other code is a number,
  and the bias is one larger, ``2^(e-1)`` (e4m3fnuz: max 240, smallest normal 2^-7).

Sources: IEEE 754-2019; Micikevicius et al., "FP8 Formats for Deep Learning" (2022) for E4M3
and E5M2; the OCP Microscaling Formats (MX) Specification v1.0 (2023) for E8M0 and the fp6 and
fp4 element formats (MXFP6, MXFP4); NVIDIA's NVFP4 (Blackwell) uses the same fp4 e2m1 element
with one e4m3 scale per 16 values; the FNUZ formats: AMD's HIP documentation, "FP8 numbers"
(ROCm 6.2, rocm.docs.amd.com/projects/HIP/en/docs-6.2.0/reference/fp8_numbers.html), which lists
them for gfx940/gfx941/gfx942 (the Instinct MI300 series) and the OCP formats only on the host.
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
    "e4m3fnuz": (torch.float8_e4m3fnuz, 4, 3, "fnuz", "AMD MI300 fp8: max 240, no inf, no -0, NaN = 0x80"),
    "e5m2fnuz": (torch.float8_e5m2fnuz, 5, 2, "fnuz", "AMD MI300 fp8: e5m2's range, no inf, no -0"),
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
    elif layout == "fnuz":
        bias += 1  # the bias is 2^(e-1): the range sits one binade lower than IEEE's ...
        emax = 2**exponent_bits - 1 - bias  # ... and the top exponent holds numbers (NaN is 0x80)
        largest_mantissa = 2 - eps
    elif layout == "e8m0":
        return {
            "max": 2.0 ** (2**exponent_bits - 2 - bias),
            "smallest_normal": 2.0**-bias,
            "smallest_subnormal": None,
            "eps": 1.0,
        }
    else:
        raise ValueError(f"layout must be 'ieee', 'fn', 'fnuz', 'mx' or 'e8m0', got {layout!r}")
    normal = 2.0 ** (1 - bias)
    return {
        "max": largest_mantissa * 2.0**emax,
        "smallest_normal": normal,
        "smallest_subnormal": normal * eps if mantissa_bits else None,
        "eps": eps,
    }


def cast_eps(dtype: torch.dtype) -> float:
    """The machine epsilon this torch's cast shows: the smallest ``2^-k`` for which ``1 + 2^-k``
    survives a round trip through ``dtype`` (it is exactly representable for ``k`` up to the
    mantissa bits). Read from the cast, not from ``torch.finfo``: ``finfo(float8_e5m2fnuz).eps``
    reads 0.125 on some builds, while the format has 2 mantissa bits (a step of 0.25 after 1)."""
    if not dtype.is_floating_point:
        raise ValueError(f"cast_eps needs a floating-point dtype, got {dtype}")
    eps = 1.0
    for k in range(1, 60):
        if torch.tensor(1.0 + 2.0**-k, dtype=torch.float64).to(dtype).double().item() != 1.0 + 2.0**-k:
            break
        eps = 2.0**-k
    return eps


def _from_finfo(name: str, dtype: torch.dtype, note: str) -> FloatFormat:
    info = torch.finfo(dtype)
    eps = cast_eps(dtype)  # what the cast does; equals finfo's eps where finfo is right
    mantissa = round(-math.log2(eps))
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
        smallest_normal * eps if mantissa else None,
        eps,
        dtype,
        "torch.finfo",
        note,
    )


def format_table() -> FormatTable:
    """fp32, tf32, fp16, bf16, fp8 e4m3fn, fp8 e5m2, e8m0 and the MX element formats fp6 e3m2,
    fp6 e2m3 and fp4 e2m1: bits, exponent and mantissa bits, max, smallest normal, smallest
    subnormal and machine epsilon.

    Computed from ``torch.finfo`` where torch has the dtype (max and smallest normal from
    finfo; eps from the cast, :func:`cast_eps`, since finfo's is wrong for e5m2fnuz on some
    builds; mantissa bits from eps, exponent bits the rest; the smallest subnormal as smallest
    normal × eps); AMD's fp8 e4m3fnuz and e5m2fnuz sit beside the OCP ones; tf32, which
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


class Encodings(TypedDict):
    """What :func:`encodings` returns (a plain dict)."""

    dtype: str
    max: float
    nan_bits: int  # the bit pattern torch stores for NaN
    negative_zero_bits: int  # the bit pattern of -0.0 after the cast (0x80 where -0 exists)
    negative_zero_kept: bool  # does -0.0 come back as -0.0?
    inf_becomes: float  # what +inf becomes
    past_max_becomes: float  # what a value 1/14 past the largest one becomes (480 for e4m3fn)
    finfo_eps: float
    cast_eps: float


def encodings(dtype: torch.dtype) -> Encodings:
    """The special codes of an fp8 (or any floating) dtype, read from this torch's cast: the bit
    pattern of NaN and of -0.0, whether -0.0 survives, what +inf and a value just past the largest
    one become, and ``torch.finfo``'s eps next to the eps the cast shows (:func:`cast_eps`).

    For AMD's FNUZ formats the NaN is 0x80, the pattern that is -0 elsewhere, so -0.0 becomes
    +0; they have no infinity."""
    if not dtype.is_floating_point or dtype.itemsize != 1:
        raise ValueError(f"encodings reads 8-bit floating-point dtypes (torch.float8_*), got {dtype}")
    top = float(torch.finfo(dtype).max)
    probe = torch.tensor([float("nan"), -0.0, float("inf"), top * 480 / 448])
    cast = probe.to(dtype)
    bits = cast.view(torch.uint8).tolist()
    back = cast.float()
    return {
        "dtype": str(dtype).removeprefix("torch."),
        "max": top,
        "nan_bits": int(bits[0]),
        "negative_zero_bits": int(bits[1]),
        "negative_zero_kept": bool(torch.signbit(back[1]).item()),
        "inf_becomes": float(back[2]),
        "past_max_becomes": float(back[3]),
        "finfo_eps": float(torch.finfo(dtype).eps),
        "cast_eps": cast_eps(dtype),
    }


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

"""torchao's float8 training recipes, emulated on the CPU with the course's own quantizer: which
tensor of which matrix multiply gets which scale, and the error that gives.

A ``Float8Linear`` runs three matrix multiplies, each with both operands cast to fp8 (or not):
``Y = X·Wᵀ`` (forward), ``dX = dY·W`` (gradient of the input) and ``dW = dYᵀ·X`` (gradient of the
weight). A scale is shared along the dimension the product sums over, so "rowwise" means one
scale per row of the operand *as that product reads it*. torchao's three recipes, from
``Float8LinearConfig.from_recipe_name`` (torchao/float8/config.py, pytorch/ao on GitHub) and the
torchao documentation (docs.pytorch.org/ao, "Quantized Training", float8):

* ``tensorwise``: one scale per tensor; X and W in e4m3, dY in e5m2; the fastest;
* ``rowwise``: one scale per row along the summed dimension for every operand of every product,
  e4m3 everywhere, scales rounded down to a power of two;
* ``rowwise_with_gw_hp``: rowwise for ``Y``; for ``dX`` dY rowwise and W with one scale; ``dW``
  in high precision (the operands' own dtype, bf16 in a bf16 run); the most accurate.

What cannot be emulated here is the speed: on a GPU the amax, scale and cast of each operand must
be fused into few kernels (torch.compile / Inductor does it in torchao) or they cost more memory
traffic than the fp8 GEMM saves. Here every product runs in float32 on values that went through
the fp8 round trip; only the numerics are the recipes'.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .. import models
from .._validate import count, unknown
from .._validate import flag as _flag
from ._scaling import fp8_max, saturating_cast

#: Per product, per operand: (scaled along which dim of the operand, or None for one scale per
#: tensor, or "hp" for high precision; fp8 dtype). Dims are those of X (tokens, in),
#: W (out, in) and dY (tokens, out).
_E4M3, _E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
_Operand = tuple[int | str | None, torch.dtype]
RECIPES: dict[str, dict[str, tuple[_Operand, _Operand]]] = {
    "tensorwise": {
        "Y = X·Wᵀ": ((None, _E4M3), (None, _E4M3)),
        "dX = dY·W": ((None, _E5M2), (None, _E4M3)),
        "dW = dYᵀ·X": ((None, _E5M2), (None, _E4M3)),
    },
    "rowwise": {
        "Y = X·Wᵀ": ((1, _E4M3), (1, _E4M3)),  # X per token, W per output row: both along `in`
        "dX = dY·W": ((1, _E4M3), (0, _E4M3)),  # summed over `out`: dY per token, W per column
        "dW = dYᵀ·X": ((0, _E4M3), (0, _E4M3)),  # summed over tokens: per column of dY and X
    },
    "rowwise_with_gw_hp": {
        "Y = X·Wᵀ": ((1, _E4M3), (1, _E4M3)),
        "dX = dY·W": ((1, _E4M3), (None, _E4M3)),
        "dW = dYᵀ·X": (("hp", _E4M3), ("hp", _E4M3)),
    },
}
POWER_OF_TWO = {"tensorwise": False, "rowwise": True, "rowwise_with_gw_hp": True}


def scaled_fp8(
    x: torch.Tensor, dtype: torch.dtype = _E4M3, dim: int | None = None, power_of_two: bool = False
) -> torch.Tensor:
    """``x`` through an fp8 round trip with one scale per tensor (``dim=None``) or one scale per
    slice along ``dim`` (``dim=1`` on a 2-D tensor: one per row, from the row's amax), read back
    as float32. ``power_of_two`` rounds each scale down to a power of two, as torchao's rowwise
    recipes do (``round_scales_to_power_of_2``). Saturating cast; an all-zero slice gets scale 1."""
    _flag(power_of_two=power_of_two)
    x = x.detach().float()
    amax = x.abs().amax() if dim is None else x.abs().amax(dim=dim, keepdim=True)
    scale = torch.where(amax > 0, fp8_max(dtype) / amax.clamp_min(torch.finfo(torch.float32).tiny), 1.0)
    if power_of_two:
        scale = torch.exp2(torch.floor(torch.log2(scale)))
    return saturating_cast(x * scale, dtype).float() / scale


def _operand(x: torch.Tensor, how: int | str | None, dtype: torch.dtype, power_of_two: bool) -> torch.Tensor:
    if how == "hp":
        return x.to(torch.bfloat16).float()  # high precision: the bf16 a bf16 run holds
    return scaled_fp8(x, dtype, how if isinstance(how, int) else None, power_of_two)


def _products(
    x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, recipe: str | None
) -> dict[str, torch.Tensor]:
    if recipe is None:
        return {"Y = X·Wᵀ": x @ w.T, "dX = dY·W": dy @ w, "dW = dYᵀ·X": dy.T @ x}
    spec, p2 = RECIPES[recipe], POWER_OF_TWO[recipe]
    y = _operand(x, *spec["Y = X·Wᵀ"][0], p2) @ _operand(w, *spec["Y = X·Wᵀ"][1], p2).T
    dx = _operand(dy, *spec["dX = dY·W"][0], p2) @ _operand(w, *spec["dX = dY·W"][1], p2)
    dw = _operand(dy, *spec["dW = dYᵀ·X"][0], p2).T @ _operand(x, *spec["dW = dYᵀ·X"][1], p2)
    return {"Y = X·Wᵀ": y, "dX = dY·W": dx, "dW = dYᵀ·X": dw}


def recipe_errors(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, recipe: str) -> dict[str, float]:
    """For each of the three products, the median over output rows of the row's relative error
    (norm of the difference over norm of the float32 row): what a typical token or weight row
    gets, not only the largest one."""
    if recipe not in RECIPES:
        raise unknown("float8 recipe", recipe, RECIPES)
    shapes = [tuple(t.shape) for t in (x, w, dy)]
    if any(len(s) != 2 for s in shapes) or x.shape[1] != w.shape[1] or dy.shape != (x.shape[0], w.shape[0]):
        raise ValueError(f"need 2-D X (tokens, in), W (out, in), dY (tokens, out); got shapes {shapes}")
    x, w, dy = x.detach().float(), w.detach().float(), dy.detach().float()
    exact, got = _products(x, w, dy, None), _products(x, w, dy, recipe)
    out = {}
    for name, ref in exact.items():
        per_row = (got[name] - ref).norm(dim=1) / ref.norm(dim=1).clamp_min(torch.finfo(torch.float32).tiny)
        out[name] = per_row.median().item()
    return out


@dataclass(frozen=True)
class LinearOperands:
    """X, W and dY of one ``nn.Linear`` of the course model, from one forward and backward pass."""

    layer: str
    x: torch.Tensor  # (tokens, in)
    w: torch.Tensor  # (out, in)
    dy: torch.Tensor  # (tokens, out)

    def with_outlier(self, where: str, factor: float = 100.0) -> LinearOperands:
        """A copy with one token (``"token"``: a row of X) or one channel (``"channel"``: a column
        of X) multiplied by ``factor``: example data for the outliers large models show."""
        x = self.x.clone()
        if where == "token":
            x[0] *= factor
        elif where == "channel":
            x[:, 0] *= factor
        else:
            raise unknown("outlier place", where, ("token", "channel"))
        return LinearOperands(self.layer, x, self.w, self.dy)


def linear_operands(
    config: str = "tiny", layer: str = "blocks.0.up", batch_size: int = 8, seed: int = 0
) -> LinearOperands:
    """Capture X, W and dY of ``layer`` (an ``nn.Linear``) in one forward and backward pass of the
    course model (CPU, fp32, seeded weights and batch)."""
    (batch_size,) = count(batch_size=batch_size)
    cfg = models.get_config(config)
    model = models.build_model(cfg, seed=seed)
    linear = dict(model.named_modules()).get(layer)
    if not isinstance(linear, torch.nn.Linear):
        names = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
        raise unknown("linear layer", layer, names)
    seen: dict[str, torch.Tensor] = {}

    def keep_input(_module: Any, args: Any, _out: Any) -> None:
        seen["x"] = args[0].detach()

    def keep_grad_output(_module: Any, _grad_in: Any, grad_out: Any) -> None:
        seen["dy"] = grad_out[0].detach()

    hooks = [linear.register_forward_hook(keep_input), linear.register_full_backward_hook(keep_grad_output)]
    try:
        idx, targets = models.make_batch(cfg, batch_size, cfg.seq_len, "cpu", seed=seed)
        model(idx, targets).backward()
    finally:
        for h in hooks:
            h.remove()
    x, dy = seen["x"].flatten(0, -2), seen["dy"].flatten(0, -2)
    return LinearOperands(layer, x, linear.weight.detach().clone(), dy)

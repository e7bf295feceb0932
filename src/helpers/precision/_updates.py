"""Keeping small updates when the weights themselves are bf16: stochastic rounding and Kahan
(compensated) summation, next to round-to-nearest and an fp32 master copy.

With bf16 weights and round-to-nearest, an update smaller than half the gap between neighbouring
bf16 values near a weight rounds away, every step (:func:`helpers.precision.lost_updates`). Two
remedies keep the weights in bf16:

* **stochastic rounding** rounds ``w + u`` up or down at random, with the probability of rounding
  up equal to how far ``w + u`` lies towards the upper neighbour, so the rounded result equals
  ``w + u`` *in expectation* (Gupta et al., "Deep Learning with Limited Numerical Precision",
  ICML 2015, arXiv:1502.02551). For fp32 -> bf16 it is one integer addition: add 16 random bits
  to the fp32 bit pattern and drop the low 16 bits;
* **Kahan summation** keeps a second bf16 number per weight, the part of past updates that
  rounding dropped, and adds it back into the next update (W. Kahan, "Further remarks on reducing
  truncation errors", Comm. ACM 8(1), 1965). Zamirai et al., "Revisiting BFloat16 Training"
  (arXiv:2010.06192, 2020) use both in pure-bf16 training.

Bytes are for the weights only (optimizer state is apart): fp32 master 4 per parameter, bf16
with round-to-nearest or stochastic rounding 2, bf16 with a Kahan buffer 2 + 2.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .._validate import count, unknown
from ..i18n import tr

#: The update rules :func:`apply_updates` runs, and the bytes each keeps per parameter.
UPDATE_RULES = {
    "fp32 master": 4,
    "bf16 round-to-nearest": 2,
    "bf16 stochastic rounding": 2,
    "bf16 + Kahan buffer": 4,
}


def stochastic_round_bf16(x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """``x`` (float32) rounded to bf16 stochastically: to the upper of its two bf16 neighbours
    with probability (x - lower) / (upper - lower), so ``E[result] = x``. Done on the bits: bf16
    is the top 16 bits of fp32, so adding a uniform 16-bit integer to the fp32 pattern and
    dropping the low 16 bits carries into the kept part with exactly that probability (on the
    magnitude: sign and magnitude are stored apart, so negative values round the same way)."""
    if x.dtype != torch.float32:
        raise ValueError(f"stochastic_round_bf16 rounds float32 tensors, got {x.dtype}: call .float() first")
    bits = x.contiguous().view(torch.int32)
    noise = torch.randint(0, 1 << 16, x.shape, dtype=torch.int32, generator=generator)
    kept = (bits + noise) & -65536  # -65536 is 0xFFFF0000 as an int32: clear the low 16 bits
    return kept.view(torch.float32).to(torch.bfloat16)  # exact: only the bf16 bits are left


def kahan_step(
    weights: torch.Tensor, compensation: torch.Tensor, update: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """One compensated update of bf16 ``weights`` with a bf16 ``compensation`` buffer (arithmetic
    in fp32, results stored in bf16, as a kernel does). Returns the new (weights, compensation).

    ``y = u - c``; ``t = bf16(w + y)``; ``c = bf16((t - w) - y)``: ``c`` is minus what rounding
    dropped from this step, so the next step adds it back."""
    if weights.dtype != torch.bfloat16 or compensation.dtype != torch.bfloat16:
        raise ValueError("kahan_step keeps the weights and the compensation buffer in bf16")
    y = update.float() - compensation.float()
    moved = (weights.float() + y).to(torch.bfloat16)
    compensation = ((moved.float() - weights.float()) - y).to(torch.bfloat16)
    return moved, compensation


@dataclass(frozen=True)
class UpdateRun:
    """``steps`` equal updates applied to a set of weights under one rule."""

    rule: str
    steps: int
    arrived: float  # sum of the changes made / sum of the changes asked for (1.0: all of it)
    rms_error: float  # RMS over weights of (final - exact) / |total update asked for|
    bytes_per_param: int  # what the rule keeps for the weights between steps

    def __str__(self) -> str:
        return tr(
            "{rule}: {bytes} bytes per weight, {arrived} of the total update arrived, "
            "per-weight error {error} of it",
            rule=rule_label(self.rule),
            bytes=self.bytes_per_param,
            arrived=f"{self.arrived:.1%}",
            error=f"{self.rms_error:.1%}",
        )


def rule_label(rule: str) -> str:
    """The name of an update rule in the notebook's language."""
    labels = {
        "fp32 master": tr("fp32 master"),
        "bf16 round-to-nearest": tr("bf16 round-to-nearest"),
        "bf16 stochastic rounding": tr("bf16 stochastic rounding"),
        "bf16 + Kahan buffer": tr("bf16 + Kahan buffer"),
    }
    return labels[rule]


def apply_updates(
    weights: torch.Tensor, update: torch.Tensor, steps: int, rule: str, seed: int = 0
) -> UpdateRun:
    """Apply ``update`` to ``weights`` ``steps`` times under ``rule`` (one of
    :data:`UPDATE_RULES`) and compare with the exact result, computed in float64 from the same
    bf16 starting weights. Stochastic rounding is seeded."""
    (steps,) = count(steps=steps)
    if rule not in UPDATE_RULES:
        raise unknown("update rule", rule, UPDATE_RULES)
    if weights.shape != update.shape:
        raise ValueError(f"weights {tuple(weights.shape)} and update {tuple(update.shape)} differ in shape")
    start = weights.detach().to(torch.bfloat16)  # every rule starts from the same bf16 weights
    u = update.detach().float()
    gen = torch.Generator().manual_seed(seed)
    if rule == "fp32 master":
        master = start.float()
        for _ in range(steps):
            master = master + u
        final = master.double()
    else:
        w, c = start.clone(), torch.zeros_like(start)
        for _ in range(steps):
            if rule == "bf16 round-to-nearest":
                w = (w.float() + u).to(torch.bfloat16)
            elif rule == "bf16 stochastic rounding":
                w = stochastic_round_bf16(w.float() + u, gen)
            else:
                w, c = kahan_step(w, c, u)
        final = w.double()
    asked = steps * u.double()
    moved = final - start.double()
    nonzero = asked != 0
    rel = (moved - asked)[nonzero] / asked[nonzero].abs()
    arrived = (moved[nonzero] * asked[nonzero].sign()).sum() / asked[nonzero].abs().sum()
    return UpdateRun(rule, steps, arrived.item(), rel.pow(2).mean().sqrt().item(), UPDATE_RULES[rule])


def compare_update_rules(
    weights: torch.Tensor, update: torch.Tensor, steps: int, seed: int = 0
) -> list[UpdateRun]:
    """:func:`apply_updates` for every rule of :data:`UPDATE_RULES`, in order."""
    return [apply_updates(weights, update, steps, rule, seed) for rule in UPDATE_RULES]

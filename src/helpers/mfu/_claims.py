"""MFU claims with a mistake in them, and published MFU figures."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import hardware
from .._validate import count as _count
from .._validate import flag as _flag
from .._validate import unknown

# --------------------------------------------------------------------------- formulas
from ._formulas import dense_model_flops, mfu

# --------------------------------------------------------------------------- the MFU bug hunt

#: The mistakes of the chapter's bug hunt, as :func:`claim_problem` names them.
MFU_BUGS = ("none", "sparse_peak", "one_device", "max_seq_len", "grad_accum", "mp_tokens", "recompute")


@dataclass(frozen=True)
class MFUClaim:
    """A reported MFU with the working behind it (constructed example data for exercises).

    The first block is what was run; the second is what the author plugged into
    MFU = model_flops_per_step / (step_time_s · devices_in_denominator · peak_flops_per_device).
    """

    name: str
    params: int  # N of 6·N·tokens
    micro_batch_size: int  # sequences per model replica per forward/backward
    seq_len: int  # tokens per sequence actually trained
    max_seq_len: int  # the model's context length
    grad_accum_steps: int
    num_devices: int  # every device of the job
    model_parallel: int  # devices that share one model replica (tensor × pipeline parallel)
    step_time_s: float  # one optimizer step, all micro-steps included
    gpu: str  # a datasheet name in helpers.hardware.DEVICES (not a torch device)
    dtype: str
    activation_checkpointing: bool
    tokens_per_step: int
    model_flops_per_step: float
    devices_in_denominator: int
    peak_flops_per_device: float
    claimed_mfu: float

    @property
    def data_parallel(self) -> int:
        """Model replicas that see different data: devices / model_parallel."""
        return self.num_devices // self.model_parallel


def _claim_tokens(micro: int, seq: int, accum: int, ranks: int) -> int:
    return micro * seq * accum * ranks


def make_claim(
    bug: str = "none",
    *,
    name: str = "run",
    params: int = 125_000_000,
    micro_batch_size: int = 8,
    seq_len: int = 1024,
    max_seq_len: int = 2048,
    grad_accum_steps: int = 4,
    num_devices: int = 8,
    model_parallel: int = 1,
    step_time_s: float = 1.0,
    gpu: str = "A100 80GB SXM",
    dtype: str = "bf16",
    activation_checkpointing: bool = False,
) -> MFUClaim:
    """An MFU claim whose working contains ``bug`` (one of :data:`MFU_BUGS`)."""
    _flag(activation_checkpointing=activation_checkpointing)
    if bug not in MFU_BUGS:
        raise unknown("bug", bug, MFU_BUGS)
    num_devices, model_parallel = _count(num_devices=num_devices, model_parallel=model_parallel)
    if num_devices % model_parallel:
        raise ValueError(f"num_devices={num_devices} is not a multiple of model_parallel={model_parallel}")
    dp = num_devices // model_parallel
    needs = {
        "one_device": num_devices > 1,
        "max_seq_len": max_seq_len > seq_len,
        "grad_accum": grad_accum_steps > 1,
        "mp_tokens": model_parallel > 1,
        "recompute": activation_checkpointing,
    }
    if not needs.get(bug, True):
        raise ValueError(
            f"bug {bug!r} leaves no trace with these settings (it needs more than one "
            "device, a shorter trained length, accumulation, tensor or pipeline "
            "parallelism, or checkpointing)"
        )
    wrong_tokens = {
        "max_seq_len": _claim_tokens(micro_batch_size, max_seq_len, grad_accum_steps, dp),
        "grad_accum": _claim_tokens(micro_batch_size, seq_len, 1, dp),
        "mp_tokens": _claim_tokens(micro_batch_size, seq_len, grad_accum_steps, num_devices),
    }
    right = _claim_tokens(micro_batch_size, seq_len, grad_accum_steps, dp)
    if bug in wrong_tokens and [t for t in wrong_tokens.values()].count(wrong_tokens[bug]) > 1:
        raise ValueError(
            f"bug {bug!r} gives the same token count as another token bug here; "
            "change the settings so the claim has one clear mistake"
        )
    tokens = wrong_tokens.get(bug, right)
    flops = (8 if bug == "recompute" else 6) * params * tokens  # recompute: one more forward, 2NT
    devices = 1 if bug == "one_device" else num_devices
    peak = hardware.get_device(gpu).peak(dtype)
    peak_used = 2 * peak if bug == "sparse_peak" else peak
    return MFUClaim(
        name=name,
        params=params,
        micro_batch_size=micro_batch_size,
        seq_len=seq_len,
        max_seq_len=max_seq_len,
        grad_accum_steps=grad_accum_steps,
        num_devices=num_devices,
        model_parallel=model_parallel,
        step_time_s=step_time_s,
        gpu=gpu,
        dtype=dtype,
        activation_checkpointing=activation_checkpointing,
        tokens_per_step=tokens,
        model_flops_per_step=flops,
        devices_in_denominator=devices,
        peak_flops_per_device=peak_used,
        claimed_mfu=flops / (step_time_s * devices * peak_used),
    )


def _right_tokens(claim: MFUClaim) -> int:
    return _claim_tokens(claim.micro_batch_size, claim.seq_len, claim.grad_accum_steps, claim.data_parallel)


def true_mfu(claim: MFUClaim) -> float:
    """The MFU of the run behind ``claim``, recomputed from what was run (6·N·tokens, tokens
    from the data-parallel replicas, every device in the denominator)."""
    peak = hardware.get_device(claim.gpu).peak(claim.dtype)
    return mfu(
        dense_model_flops(claim.params, _right_tokens(claim)), claim.step_time_s, claim.num_devices, peak
    )


def claim_problem(claim: MFUClaim) -> str:
    """Which of :data:`MFU_BUGS` the claim's working contains (the first one found)."""
    peak = hardware.get_device(claim.gpu).peak(claim.dtype)
    tokens = _right_tokens(claim)
    if not math.isclose(claim.peak_flops_per_device, peak, rel_tol=1e-9):
        return "sparse_peak"
    if claim.devices_in_denominator != claim.num_devices:
        return "one_device"
    if claim.tokens_per_step != tokens:
        dp = claim.data_parallel
        wrong = {
            "max_seq_len": _claim_tokens(
                claim.micro_batch_size, claim.max_seq_len, claim.grad_accum_steps, dp
            ),
            "grad_accum": _claim_tokens(claim.micro_batch_size, claim.seq_len, 1, dp),
            "mp_tokens": _claim_tokens(
                claim.micro_batch_size, claim.seq_len, claim.grad_accum_steps, claim.num_devices
            ),
        }
        found = [bug for bug, t in wrong.items() if t == claim.tokens_per_step]
        if len(found) != 1:
            raise ValueError(f"claim {claim.name!r}: its token count fits {found or 'no known bug'}")
        return found[0]
    if not math.isclose(claim.model_flops_per_step, 6 * claim.params * tokens, rel_tol=1e-9):
        return "recompute"
    return "none"


def example_claims() -> list[MFUClaim]:
    """Seven MFU claims for the bug hunt (invented example data: one mistake each, or none)."""
    return [
        make_claim("sparse_peak", name="A: 8x H100, bf16", gpu="H100 SXM", step_time_s=0.065),
        make_claim("one_device", name="B: 2x A100, bf16", num_devices=2, step_time_s=0.192),
        make_claim("none", name="C: 4x A100, bf16", num_devices=4, step_time_s=0.175),
        make_claim("max_seq_len", name="D: 8x A100, seq 1024 in a 2048 context", step_time_s=0.219),
        make_claim(
            "grad_accum",
            name="E: 8x L4, 350M params, accumulation 16",
            gpu="L4",
            grad_accum_steps=16,
            params=350_000_000,
            step_time_s=6.893,
        ),
        make_claim(
            "mp_tokens",
            name="F: 16x H100, 7B, tensor parallel 2",
            gpu="H100 SXM",
            params=7_000_000_000,
            num_devices=16,
            model_parallel=2,
            micro_batch_size=4,
            seq_len=4096,
            max_seq_len=4096,
            grad_accum_steps=8,
            step_time_s=7.9,
        ),
        make_claim(
            "recompute",
            name="G: 8x H100, activation checkpointing",
            gpu="H100 SXM",
            activation_checkpointing=True,
            step_time_s=0.071,
        ),
    ]


# --------------------------------------------------------------------------- published figures


@dataclass(frozen=True)
class PublishedMFU:
    """An MFU that a paper reports for a large training run."""

    run: str
    mfu_low: float
    mfu_high: float
    source: str

    def __str__(self) -> str:
        value = (
            f"{self.mfu_low:.1%}"
            if self.mfu_low == self.mfu_high
            else f"{self.mfu_low:.0%}–{self.mfu_high:.0%}"
        )
        return f"{self.run}: MFU {value} ({self.source})"


#: MFU of large dense training runs as their papers report it.
PUBLISHED_MFU = (
    PublishedMFU("GPT-3 175B", 0.213, 0.213, "as computed in the PaLM paper, Chowdhery et al. 2022, Table 3"),
    PublishedMFU(
        "Gopher 280B", 0.325, 0.325, "as computed in the PaLM paper, Chowdhery et al. 2022, Table 3"
    ),
    PublishedMFU(
        "Megatron-Turing NLG 530B",
        0.302,
        0.302,
        "as computed in the PaLM paper, Chowdhery et al. 2022, Table 3",
    ),
    PublishedMFU("PaLM 540B", 0.462, 0.462, "Chowdhery et al. 2022, Table 3"),
    PublishedMFU(
        "Llama 3 405B, bf16, 8,192 to 16,384 H100 GPUs",
        0.38,
        0.43,
        "Llama 3 Herd of Models, Dubey et al. 2024, Table 4",
    ),
)

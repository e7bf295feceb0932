"""Chapter 2 — MFU and HFU: how much of the hardware's peak a training step turns into progress.

Definitions (PaLM, Chowdhery et al. 2022, appendix B; Korthikanti et al. 2022 for HFU):

* MFU = model FLOPs per step / (step time · devices · dense peak per device of the dtype)
* HFU = executed FLOPs per step / (the same denominator); executed FLOPs include work that
  is not model progress: recomputed activations, padding, the score recompute of a fused
  attention backward.
* model FLOPs ≈ 6 · N · tokens (forward 2, backward 4 FLOPs per parameter per token), plus
  the attention term 12 · layers · heads · head_dim · seq_len per token (PaLM appendix B,
  nanoGPT's ``estimate_mfu``).
* tokens per step = global batch · sequence length trained, where
  global batch = micro batch · gradient-accumulation steps · data-parallel ranks. With tensor or
  pipeline parallelism, only the data-parallel ranks see different tokens; the denominator still
  counts every device.
* a mixture-of-experts model counts its ACTIVE parameters per token in N, not all experts.

Peaks: a GPU's comes from the datasheet table :data:`helpers.hardware.DEVICES` (dense); a
CPU has no datasheet peak, so the course divides by the FLOP/s it *measured* on a large GEMM
(:func:`helpers.hardware.measure_device`) — an achieved figure, so a CPU MFU reads "fraction
of the best GEMM this machine did", not "fraction of a theoretical peak".

``python -m helpers.mfu`` is the chapter's benchmark: it times the course model's training
step on this device and prints tokens/s, MFU and HFU in a short report.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils import flop_counter

from . import hardware, models
from ._validate import count as _count
from ._validate import positive as _positive
from .bench import Measurement, measure, resolve_device

# --------------------------------------------------------------------------- formulas

def dense_model_flops(params: float, tokens: float) -> float:
    """Training FLOPs of a dense model, 6·params·tokens (2 forward + 4 backward per param)."""
    _positive(params=params, tokens=tokens)
    return 6 * params * tokens


def attention_flops_per_token(n_layers: int, n_heads: int, head_dim: int, seq_len: int) -> float:
    """Attention-score FLOPs per token of a training step: 12·layers·heads·head_dim·seq_len.

    QKᵀ and the weighted sum of V are 2·seq_len·d FLOPs each per token and layer in the
    forward pass (4·L·d·T); the backward pass costs twice that (8·L·d·T).
    """
    _count(n_layers=n_layers, n_heads=n_heads, head_dim=head_dim, seq_len=seq_len)
    return 12 * n_layers * n_heads * head_dim * seq_len


def transformer_flops_per_token(params: float, n_layers: int, n_heads: int, head_dim: int,
                                seq_len: int) -> float:
    """Training FLOPs per token: 6·params + 12·layers·heads·head_dim·seq_len (PaLM form)."""
    _positive(params=params)
    return 6 * params + attention_flops_per_token(n_layers, n_heads, head_dim, seq_len)


def model_flops_per_step(config: models.GPTConfig, batch_size: int, seq_len: int | None = None) -> float:
    """Model FLOPs of one training step of the course model: per-token formula × tokens."""
    seq_len = config.seq_len if seq_len is None else seq_len
    _count(batch_size=batch_size, seq_len=seq_len)
    per_token = transformer_flops_per_token(config.flop_params(), config.n_layers, config.n_heads,
                                            config.head_dim, seq_len)
    return per_token * batch_size * seq_len


def tokens_per_step(micro_batch_size: int, seq_len: int, grad_accum_steps: int = 1,
                    data_parallel: int = 1) -> int:
    """Tokens per optimizer step: micro batch · accumulation steps · data-parallel ranks · seq_len."""
    _count(micro_batch_size=micro_batch_size, seq_len=seq_len, grad_accum_steps=grad_accum_steps,
           data_parallel=data_parallel)
    return micro_batch_size * grad_accum_steps * data_parallel * seq_len


def mfu(model_flops: float, step_time_s: float, num_devices: int, peak_flops_per_device: float) -> float:
    """Model FLOPs utilization: model_flops / (step_time_s · num_devices · peak_flops_per_device)."""
    _positive(model_flops=model_flops, step_time_s=step_time_s, peak_flops_per_device=peak_flops_per_device)
    _count(num_devices=num_devices)
    return model_flops / (step_time_s * num_devices * peak_flops_per_device)


def hfu(executed_flops: float, step_time_s: float, num_devices: int, peak_flops_per_device: float) -> float:
    """Hardware FLOPs utilization: the same denominator as MFU over the FLOPs actually executed."""
    _positive(executed_flops=executed_flops, step_time_s=step_time_s,
              peak_flops_per_device=peak_flops_per_device)
    _count(num_devices=num_devices)
    return executed_flops / (step_time_s * num_devices * peak_flops_per_device)


def throughput(step_time_s: float, batch_size: int, seq_len: int) -> dict[str, float]:
    """steps/s, samples/s and tokens/s of a step of ``batch_size`` sequences of ``seq_len`` tokens."""
    _positive(step_time_s=step_time_s)
    _count(batch_size=batch_size, seq_len=seq_len)
    return {"steps_per_s": 1 / step_time_s, "samples_per_s": batch_size / step_time_s,
            "tokens_per_s": batch_size * seq_len / step_time_s}


def dense_transformer_mfu(*, params: float, global_batch_size: int, seq_len: int, step_time_s: float,
                          num_gpus: int, peak_tflops_per_gpu: float) -> dict[str, float]:
    """The dense-transformer MFU calculator: 6·N·tokens over the summed peak of all GPUs."""
    tokens = tokens_per_step(global_batch_size, seq_len)
    model_flops = dense_model_flops(params, tokens)
    return {"tokens_per_step": tokens,
            "tokens_per_second": tokens / step_time_s,
            "achieved_tflops": model_flops / step_time_s / 1e12,
            "mfu": mfu(model_flops, step_time_s, num_gpus, peak_tflops_per_gpu * 1e12)}


# --------------------------------------------------------------------------- counting FLOPs

def _shape(t: Any) -> tuple[int, ...]:
    return tuple(t.shape) if hasattr(t, "shape") else tuple(t)


def _sdpa_forward_flops(query: Any, key: Any, value: Any, *args: Any, out_val: Any = None,
                        **kwargs: Any) -> int:
    # (b, heads, s_q, d) @ (b, heads, d, s_k), then (b, heads, s_q, s_k) @ (b, heads, s_k, d_v)
    b, h, s_q, d_qk = _shape(query)
    s_k, d_v = _shape(key)[-2], _shape(value)[-1]
    return 2 * b * h * s_q * s_k * d_qk + 2 * b * h * s_q * s_k * d_v


def _sdpa_backward_flops(grad_out: Any, query: Any, key: Any, value: Any, *args: Any,
                         out_val: Any = None, **kwargs: Any) -> int:
    # a fused backward recomputes the scores (1 GEMM), then 4 GEMMs for dP, dV, dQ, dK —
    # the same five products torch counts for its CUDA flash / efficient kernels
    b, h, s_q, d_qk = _shape(query)
    s_k, d_v = _shape(key)[-2], _shape(value)[-1]
    return 2 * b * h * s_q * s_k * (2 * d_qk + 2 * d_v + d_qk)


# Raw formulas get the tensors themselves: torch versions that wrap custom formulas in a
# tensor-to-shape adapter skip it for these, and versions that never wrap pass tensors too.
_sdpa_forward_flops._get_raw = True  # type: ignore[attr-defined]
_sdpa_backward_flops._get_raw = True  # type: ignore[attr-defined]


# CPU attention kernels that some torch versions (2.13 among them) leave out of the
# FlopCounterMode registry, so their FLOPs read as 0. Missing ones are added per counter.
_MISSING_OPS = {
    "_scaled_dot_product_flash_attention_for_cpu": _sdpa_forward_flops,
    "_scaled_dot_product_flash_attention_for_cpu_backward": _sdpa_backward_flops,
    "_scaled_dot_product_fused_attention_overrideable": _sdpa_forward_flops,
    "_scaled_dot_product_fused_attention_overrideable_backward": _sdpa_backward_flops,
}


def _extra_formulas() -> dict[Any, Callable[..., int]]:
    registry = getattr(flop_counter, "flop_registry", {})
    extra = {}
    for name, formula in _MISSING_OPS.items():
        packet = getattr(torch.ops.aten, name, None)
        if packet is not None and packet not in registry:
            extra[packet] = formula
    return extra


def flop_counter_mode() -> flop_counter.FlopCounterMode:
    """A silent ``FlopCounterMode`` that also counts the CPU attention kernels."""
    return flop_counter.FlopCounterMode(display=False, custom_mapping=_extra_formulas())


def flop_breakdown(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, int]:
    """FLOPs executed by ``fn(*args, **kwargs)`` per operator (``"mm"``, ``"bmm"``, ...).

    Counted with :class:`torch.utils.flop_counter.FlopCounterMode`, which counts matrix
    products (mm, addmm, bmm, convolutions, attention) from shapes and nothing else:
    element-wise ops, norms, softmax and the optimizer count as 0. A backward pass run
    inside ``fn`` is counted too.
    """
    with flop_counter_mode() as counter:
        fn(*args, **kwargs)
    per_op = counter.get_flop_counts().get("Global", {})
    return {str(getattr(op, "__name__", op)).split(".")[0]: int(v) for op, v in per_op.items() if v}


def count_flops(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
    """Total FLOPs executed by ``fn(*args, **kwargs)`` (forward and, if ``fn`` calls it, backward)."""
    return sum(flop_breakdown(fn, *args, **kwargs).values())


def counted_flops_formula(config: models.GPTConfig, batch_size: int, seq_len: int | None = None) -> int:
    """What :func:`count_flops` reports for one training step of the course model, from shapes.

    Every matmul weight (in × out, the tied output layer included) costs 2 FLOPs per token
    forward and 4 backward; attention costs 4·b·s²·d per layer forward (QKᵀ and PV, causal
    mask not discounted) and 10·b·s²·d backward (the fused kernel recomputes QKᵀ, then four
    products). Embedding lookups, norms, biases, softmax and the optimizer count 0.
    """
    seq_len = config.seq_len if seq_len is None else seq_len
    _count(batch_size=batch_size, seq_len=seq_len)
    tokens = batch_size * seq_len
    weights = sum(i * o for i, o in config.linear_shapes())
    attention = 14 * config.n_layers * batch_size * seq_len**2 * config.d_model
    return 6 * weights * tokens + attention


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
    device: str  # a name in helpers.hardware.DEVICES
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


def make_claim(bug: str = "none", *, name: str = "run", params: int = 125_000_000,
               micro_batch_size: int = 8, seq_len: int = 1024, max_seq_len: int = 2048,
               grad_accum_steps: int = 4, num_devices: int = 8, model_parallel: int = 1,
               step_time_s: float = 1.0, device: str = "A100 80GB SXM", dtype: str = "bf16",
               activation_checkpointing: bool = False) -> MFUClaim:
    """An MFU claim whose working contains ``bug`` (one of :data:`MFU_BUGS`)."""
    if bug not in MFU_BUGS:
        raise ValueError(f"unknown bug {bug!r}; choose one of {', '.join(MFU_BUGS)}")
    _count(num_devices=num_devices, model_parallel=model_parallel)
    if num_devices % model_parallel:
        raise ValueError(f"num_devices={num_devices} is not a multiple of model_parallel={model_parallel}")
    dp = num_devices // model_parallel
    needs = {"one_device": num_devices > 1, "max_seq_len": max_seq_len > seq_len,
             "grad_accum": grad_accum_steps > 1, "mp_tokens": model_parallel > 1,
             "recompute": activation_checkpointing}
    if not needs.get(bug, True):
        raise ValueError(f"bug {bug!r} leaves no trace with these settings (it needs more than one "
                         "device, a shorter trained length, accumulation, tensor or pipeline "
                         "parallelism, or checkpointing)")
    wrong_tokens = {"max_seq_len": _claim_tokens(micro_batch_size, max_seq_len, grad_accum_steps, dp),
                    "grad_accum": _claim_tokens(micro_batch_size, seq_len, 1, dp),
                    "mp_tokens": _claim_tokens(micro_batch_size, seq_len, grad_accum_steps, num_devices)}
    right = _claim_tokens(micro_batch_size, seq_len, grad_accum_steps, dp)
    if bug in wrong_tokens and [t for t in wrong_tokens.values()].count(wrong_tokens[bug]) > 1:
        raise ValueError(f"bug {bug!r} gives the same token count as another token bug here; "
                         "change the settings so the claim has one clear mistake")
    tokens = wrong_tokens.get(bug, right)
    flops = (8 if bug == "recompute" else 6) * params * tokens  # recompute: one more forward, 2NT
    devices = 1 if bug == "one_device" else num_devices
    peak = hardware.get_device(device).peak(dtype)
    peak_used = 2 * peak if bug == "sparse_peak" else peak
    return MFUClaim(name=name, params=params, micro_batch_size=micro_batch_size, seq_len=seq_len,
                    max_seq_len=max_seq_len, grad_accum_steps=grad_accum_steps, num_devices=num_devices,
                    model_parallel=model_parallel, step_time_s=step_time_s, device=device, dtype=dtype,
                    activation_checkpointing=activation_checkpointing, tokens_per_step=tokens,
                    model_flops_per_step=flops, devices_in_denominator=devices,
                    peak_flops_per_device=peak_used,
                    claimed_mfu=flops / (step_time_s * devices * peak_used))


def _right_tokens(claim: MFUClaim) -> int:
    return _claim_tokens(claim.micro_batch_size, claim.seq_len, claim.grad_accum_steps,
                         claim.data_parallel)


def true_mfu(claim: MFUClaim) -> float:
    """The MFU of the run behind ``claim``, recomputed from what was run (6·N·tokens, tokens
    from the data-parallel replicas, every device in the denominator)."""
    peak = hardware.get_device(claim.device).peak(claim.dtype)
    return mfu(dense_model_flops(claim.params, _right_tokens(claim)), claim.step_time_s,
               claim.num_devices, peak)


def claim_problem(claim: MFUClaim) -> str:
    """Which of :data:`MFU_BUGS` the claim's working contains (the first one found)."""
    peak = hardware.get_device(claim.device).peak(claim.dtype)
    tokens = _right_tokens(claim)
    if not math.isclose(claim.peak_flops_per_device, peak, rel_tol=1e-9):
        return "sparse_peak"
    if claim.devices_in_denominator != claim.num_devices:
        return "one_device"
    if claim.tokens_per_step != tokens:
        dp = claim.data_parallel
        wrong = {"max_seq_len": _claim_tokens(claim.micro_batch_size, claim.max_seq_len,
                                              claim.grad_accum_steps, dp),
                 "grad_accum": _claim_tokens(claim.micro_batch_size, claim.seq_len, 1, dp),
                 "mp_tokens": _claim_tokens(claim.micro_batch_size, claim.seq_len,
                                            claim.grad_accum_steps, claim.num_devices)}
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
        make_claim("sparse_peak", name="A: 8x H100, bf16", device="H100 SXM", step_time_s=0.065),
        make_claim("one_device", name="B: 2x A100, bf16", num_devices=2, step_time_s=0.192),
        make_claim("none", name="C: 4x A100, bf16", num_devices=4, step_time_s=0.175),
        make_claim("max_seq_len", name="D: 8x A100, seq 1024 in a 2048 context", step_time_s=0.219),
        make_claim("grad_accum", name="E: 8x L4, 350M params, accumulation 16", device="L4",
                   grad_accum_steps=16, params=350_000_000, step_time_s=6.893),
        make_claim("mp_tokens", name="F: 16x H100, 7B, tensor parallel 2", device="H100 SXM",
                   params=7_000_000_000, num_devices=16, model_parallel=2, micro_batch_size=4,
                   seq_len=4096, max_seq_len=4096, grad_accum_steps=8, step_time_s=7.9),
        make_claim("recompute", name="G: 8x H100, activation checkpointing", device="H100 SXM",
                   activation_checkpointing=True, step_time_s=0.071),
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
        value = (f"{self.mfu_low:.1%}" if self.mfu_low == self.mfu_high
                 else f"{self.mfu_low:.0%}–{self.mfu_high:.0%}")
        return f"{self.run}: MFU {value} ({self.source})"


#: MFU of large dense training runs as their papers report it.
PUBLISHED_MFU = (
    PublishedMFU("GPT-3 175B", 0.213, 0.213,
                 "as computed in the PaLM paper, Chowdhery et al. 2022, Table 3"),
    PublishedMFU("Gopher 280B", 0.325, 0.325,
                 "as computed in the PaLM paper, Chowdhery et al. 2022, Table 3"),
    PublishedMFU("Megatron-Turing NLG 530B", 0.302, 0.302,
                 "as computed in the PaLM paper, Chowdhery et al. 2022, Table 3"),
    PublishedMFU("PaLM 540B", 0.462, 0.462, "Chowdhery et al. 2022, Table 3"),
    PublishedMFU("Llama 3 405B, bf16, 8,192 to 16,384 H100 GPUs", 0.38, 0.43,
                 "Llama 3 Herd of Models, Dubey et al. 2024, Table 4"),
)


# --------------------------------------------------------------------------- peaks and reports

@dataclass(frozen=True)
class Peak:
    """The per-device peak an MFU is divided by, and where it came from."""

    flops: float
    dtype: str
    kind: str  # "datasheet" (dense, from hardware.DEVICES) or "measured" (achieved GEMM FLOP/s)
    source: str
    spread: float | None = None  # (max - min) / median of a measured peak's runs

    def describe(self) -> str:
        what = "datasheet dense peak" if self.kind == "datasheet" else "MEASURED GEMM FLOP/s (achieved)"
        return f"{self.dtype} {what} {self.flops / 1e12:.4g} TFLOP/s per device — {self.source}"


def device_peak(device: str | torch.device = "auto", dtype: str = "fp32", quick: bool = True) -> Peak:
    """The peak for MFU on ``device``: the datasheet dense peak of a known GPU, else measured.

    A CPU (or a GPU missing from the table) has no datasheet figure here, so the peak is the
    FLOP/s of a large GEMM measured now with :func:`helpers.hardware.measure_device` (its
    fastest timed run) — an achieved figure, and an MFU against it says how close the step
    came to this machine's best GEMM.
    """
    dev = resolve_device(device)
    key = hardware.dtype_key(dtype)
    spec = hardware.detect_gpu() if dev.type == "cuda" else None
    if spec is not None and key in spec.peak_flops:
        return Peak(spec.peak(key), key, "datasheet", f"{spec.name}: {spec.source}")
    measured = hardware.measure_device(dev, dtypes=[key], quick=quick)
    run = measured.gemm_runs[key]
    # A peak is a best case: measure_device keeps the fastest timed run, since other processes
    # only ever slow a run down.
    median = 2 * measured.gemm_n**3 / run.median
    return Peak(measured.gemm_flops[key], key, "measured",
                f"fastest of {len(run.samples)} timed {measured.gemm_n}³ GEMMs on {measured.name} "
                f"(median {median / 1e12:.4g} TFLOP/s, spread {run.spread:.0%})",
                run.spread)


@dataclass
class MFUReport:
    """A short performance report (experiment, hardware, config, throughput, MFU), from numbers."""

    experiment: str
    hardware: str
    peak: Peak
    num_devices: int
    config: str
    parallel: str
    step_time_s: float
    tokens_per_step: int
    model_flops_per_step: float
    executed_flops_per_step: float | None = None
    step_time_note: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens_per_step / self.step_time_s

    @property
    def mfu(self) -> float:
        return mfu(self.model_flops_per_step, self.step_time_s, self.num_devices, self.peak.flops)

    @property
    def hfu(self) -> float | None:
        if self.executed_flops_per_step is None:
            return None
        return hfu(self.executed_flops_per_step, self.step_time_s, self.num_devices, self.peak.flops)

    def format(self) -> str:
        lines = [
            f"experiment: {self.experiment}",
            f"hardware: {self.num_devices}x {self.hardware}, {self.peak.describe()}",
            f"config: {self.config}",
            f"parallel: {self.parallel}",
            "",
            "throughput:",
            f"  step_time_median: {self.step_time_s:.4g} s{self.step_time_note}",
            f"  tokens_per_step: {self.tokens_per_step}",
            f"  tokens_per_second: {self.tokens_per_second:,.0f}",
            f"  achieved_model_tflops: {self.model_flops_per_step / self.step_time_s / 1e12:.4g}",
            f"  estimated_mfu: {self.mfu:.1%}",
        ]
        if self.hfu is not None:
            lines.append(f"  hfu: {self.hfu:.1%} (FLOPs counted by FlopCounterMode)")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def example_report() -> MFUReport:
    """A worked example (invented numbers): GPT 125M, 2x A100 (bf16 dense 312 TFLOP/s),
    64 × 1024 tokens per step, 0.42 s per step."""
    a100 = hardware.get_device("A100 80GB SXM")
    tokens = tokens_per_step(64, 1024)
    return MFUReport(
        "gpt-125m-baseline", "A100-80GB, nvlink",
        Peak(a100.peak("bf16"), "bf16", "datasheet", a100.source), 2,
        "layers=12, hidden=768, heads=12, seq=1024, global_batch=64",
        "dp=2, tp=1, pp=1, activation_checkpoint=off", 0.42, tokens,
        dense_model_flops(125e6, tokens), notes=["model FLOPs = 6·N·tokens (a rough estimate)",
                                                 "example numbers, not a measurement"])


NOISY = 0.5  # a (max - min) / median spread above this makes a timing worth a warning


@dataclass
class TrainingRun:
    """A measured training step of the course model, with its MFU and HFU."""

    config: models.GPTConfig
    batch_size: int
    seq_len: int
    device: str
    autocast: str | None
    step: Measurement
    model_flops_per_step: float
    executed_flops_per_step: int
    peak: Peak
    device_name: str

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.seq_len

    @property
    def tokens_per_second(self) -> float:
        return self.tokens_per_step / self.step.median

    @property
    def mfu(self) -> float:
        return mfu(self.model_flops_per_step, self.step.median, 1, self.peak.flops)

    @property
    def hfu(self) -> float:
        return hfu(self.executed_flops_per_step, self.step.median, 1, self.peak.flops)

    def report(self) -> MFUReport:
        c = self.config
        spread = (f" (min {self.step.min:.4g}, max {self.step.max:.4g}, n={len(self.step.samples)}; "
                  f"first call {self.step.first_call:.4g} s, not included)")
        return MFUReport(
            f"{c.name}-baseline", self.device_name, self.peak, 1,
            f"layers={c.n_layers}, hidden={c.d_model}, heads={c.n_heads}, seq={self.seq_len}, "
            f"global_batch={self.batch_size}, compute={self.autocast or 'fp32'}",
            "dp=1, tp=1, pp=1, activation_checkpoint=off", self.step.median, self.tokens_per_step,
            self.model_flops_per_step, self.executed_flops_per_step, spread,
            notes=["model FLOPs = (6·N + 12·L·H·Q·T)·tokens, N excludes the position table",
                   "synthetic tokens; AdamW step included in the step time", *self.warnings()])

    def warnings(self) -> list[str]:
        """Why this MFU may not be trustworthy (large run-to-run spread), if it may not."""
        out = []
        if self.step.spread > NOISY:
            out.append(f"step times spread {self.step.spread:.0%} around the median: a busy machine? "
                       "rerun before trusting the third digit")
        if self.mfu > 1:
            out.append("MFU above 100% is impossible: the peak was measured low (a busy machine?) "
                       "or the FLOPs are overcounted")
        if self.peak.spread is not None and self.peak.spread > NOISY:
            out.append(f"the measured peak spread {self.peak.spread:.0%}: MFU is only as good as its "
                       "denominator; rerun on a quiet machine")
        return out


def measure_training(config: str | models.GPTConfig | None = None, batch_size: int = 8,
                     seq_len: int | None = None, device: str | torch.device = "auto",
                     autocast: str | None = "auto", warmup: int = 3, iters: int = 10,
                     peak: Peak | None = None, quick: bool = True) -> TrainingRun:
    """Time the course model's training step on ``device``; count its FLOPs; compute MFU and HFU.

    ``autocast="auto"`` trains in bf16 autocast on a GPU and in fp32 on a CPU; the peak is
    that of the matching dtype (datasheet on a known GPU, measured on a CPU).
    """
    dev = resolve_device(device)
    cfg = models.course_config(dev, quick) if config is None else models.get_config(config)
    seq_len = cfg.seq_len if seq_len is None else seq_len
    if autocast == "auto":
        autocast = "bf16" if dev.type == "cuda" else None
    amp = hardware.DTYPES[hardware.dtype_key(autocast)] if autocast else None
    model = models.build_model(cfg, dev)
    batch = models.make_batch(cfg, batch_size, seq_len, dev)
    step_fn = models.make_train_step(model, batch, autocast_dtype=amp)
    run = measure(step_fn, warmup=warmup, iters=iters, device=dev)
    executed = count_flops(step_fn)
    if peak is None:
        peak = device_peak(dev, autocast or "fp32", quick=quick)
    name = (torch.cuda.get_device_name(dev) if dev.type == "cuda"
            else f"CPU ({torch.get_num_threads()} threads)")
    return TrainingRun(cfg, batch_size, seq_len, str(dev), autocast, run,
                       model_flops_per_step(cfg, batch_size, seq_len), executed, peak, name)


def sweep_seq_lens(seq_lens: Sequence[int], tokens_per_batch: int, config: str | models.GPTConfig,
                   device: str | torch.device = "auto", iters: int = 5) -> list[dict[str, float]]:
    """Time a training step at several sequence lengths holding tokens per step fixed.

    Returns one row per length: seq_len, batch_size, step_time_s (median) and the three rates.
    """
    dev = resolve_device(device)
    cfg = models.get_config(config)
    rows = []
    for s in seq_lens:
        batch_size = max(1, tokens_per_batch // s)
        model = models.build_model(cfg, dev)
        step_fn = models.make_train_step(model, models.make_batch(cfg, batch_size, s, dev))
        t = measure(step_fn, warmup=2, iters=iters, device=dev).median
        rows.append({"seq_len": s, "batch_size": batch_size, "step_time_s": t,
                     **throughput(t, batch_size, s)})
    return rows


# --------------------------------------------------------------------------- benchmark command

def main(argv: Sequence[str] | None = None) -> None:
    """``python -m helpers.mfu``: tokens/s, MFU and HFU of the course model's training step."""
    parser = argparse.ArgumentParser(prog="python -m helpers.mfu", description=main.__doc__)
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda")
    parser.add_argument("--config", default=None, help=f"one of {', '.join(models.CONFIGS)} "
                        "(default: tiny on CPU, gpt2-small at seq 512 on a GPU; see --full)")
    parser.add_argument("--batch", type=int, default=8, help="sequences per step")
    parser.add_argument("--seq", type=int, default=None, help="tokens per sequence (default: context)")
    parser.add_argument("--autocast", default="auto", help="auto | none | bf16 | fp16")
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--full", action="store_true", help="larger default model and peak GEMM")
    args = parser.parse_args(argv)
    autocast = None if args.autocast == "none" else args.autocast
    try:
        result = measure_training(args.config, args.batch, args.seq, args.device, autocast,
                                  args.warmup, args.iters, quick=not args.full)
    except (ValueError, KeyError, TypeError, RuntimeError) as err:  # bad input: one line, no traceback
        parser.error(str(err.args[0]) if err.args else str(err))
    print(models.describe(result.config))
    print(result.report().format())
    print(f"\ntokens/s {result.tokens_per_second:,.0f} | MFU {result.mfu:.2%} | HFU {result.hfu:.2%} "
          f"| peak: {result.peak.describe()}")


if __name__ == "__main__":
    main()


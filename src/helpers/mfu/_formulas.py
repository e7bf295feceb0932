"""MFU and HFU formulas: model FLOPs, tokens, MFU, HFU, throughput."""

from __future__ import annotations

from .. import models
from .._validate import count as _count
from .._validate import positive as _positive

# --------------------------------------------------------------------------- formulas


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
    n_layers, n_heads, head_dim, seq_len = _count(
        n_layers=n_layers, n_heads=n_heads, head_dim=head_dim, seq_len=seq_len
    )
    return 12 * n_layers * n_heads * head_dim * seq_len


def transformer_flops_per_token(
    params: float, n_layers: int, n_heads: int, head_dim: int, seq_len: int
) -> float:
    """Training FLOPs per token: 6·params + 12·layers·heads·head_dim·seq_len (PaLM form)."""
    _positive(params=params)
    return 6 * params + attention_flops_per_token(n_layers, n_heads, head_dim, seq_len)


def model_flops_per_step(config: models.GPTConfig, batch_size: int, seq_len: int | None = None) -> float:
    """Model FLOPs of one training step of the course model: per-token formula × tokens."""
    seq_len = config.seq_len if seq_len is None else seq_len
    batch_size, seq_len = _count(batch_size=batch_size, seq_len=seq_len)
    per_token = transformer_flops_per_token(
        config.flop_params(), config.n_layers, config.n_heads, config.head_dim, seq_len
    )
    return per_token * batch_size * seq_len


def tokens_per_step(
    micro_batch_size: int, seq_len: int, grad_accum_steps: int = 1, data_parallel: int = 1
) -> int:
    """Tokens per optimizer step: micro batch · accumulation steps · data-parallel ranks · seq_len."""
    micro_batch_size, seq_len, grad_accum_steps, data_parallel = _count(
        micro_batch_size=micro_batch_size,
        seq_len=seq_len,
        grad_accum_steps=grad_accum_steps,
        data_parallel=data_parallel,
    )
    return micro_batch_size * grad_accum_steps * data_parallel * seq_len


def mfu(model_flops: float, step_time_s: float, num_devices: int, peak_flops_per_device: float) -> float:
    """Model FLOPs utilization: model_flops / (step_time_s · num_devices · peak_flops_per_device)."""
    _positive(model_flops=model_flops, step_time_s=step_time_s, peak_flops_per_device=peak_flops_per_device)
    (num_devices,) = _count(num_devices=num_devices)
    return model_flops / (step_time_s * num_devices * peak_flops_per_device)


def hfu(executed_flops: float, step_time_s: float, num_devices: int, peak_flops_per_device: float) -> float:
    """Hardware FLOPs utilization: the same denominator as MFU over the FLOPs actually executed."""
    _positive(
        executed_flops=executed_flops, step_time_s=step_time_s, peak_flops_per_device=peak_flops_per_device
    )
    (num_devices,) = _count(num_devices=num_devices)
    return executed_flops / (step_time_s * num_devices * peak_flops_per_device)


def throughput(step_time_s: float, batch_size: int, seq_len: int) -> dict[str, float]:
    """steps/s, samples/s and tokens/s of a step of ``batch_size`` sequences of ``seq_len`` tokens."""
    _positive(step_time_s=step_time_s)
    batch_size, seq_len = _count(batch_size=batch_size, seq_len=seq_len)
    return {
        "steps_per_s": 1 / step_time_s,
        "samples_per_s": batch_size / step_time_s,
        "tokens_per_s": batch_size * seq_len / step_time_s,
    }


def dense_transformer_mfu(
    *,
    params: float,
    global_batch_size: int,
    seq_len: int,
    step_time_s: float,
    num_gpus: int,
    peak_tflops_per_gpu: float,
) -> dict[str, float]:
    """The dense-transformer MFU calculator: 6·N·tokens over the summed peak of all GPUs."""
    tokens = tokens_per_step(global_batch_size, seq_len)
    model_flops = dense_model_flops(params, tokens)
    return {
        "tokens_per_step": tokens,
        "tokens_per_second": tokens / step_time_s,
        "achieved_tflops": model_flops / step_time_s / 1e12,
        "mfu": mfu(model_flops, step_time_s, num_gpus, peak_tflops_per_gpu * 1e12),
    }

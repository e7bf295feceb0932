"""Chapter 8 — mixed precision: formats, loss scaling, fp8 scaling and autocast.

* the formats, computed not typed — bits, exponent and mantissa bits, max, smallest normal
  and subnormal, machine epsilon: :func:`format_table` (``torch.finfo``; tf32 from its bit
  layout, :func:`layout_limits`); what a value becomes in a format: :func:`fate`; which
  format fits a need: :func:`pick_format`; the rounding error of a tensor: :func:`rounding_error`;
* fp16 gradient underflow and the loss scaler: :func:`gradient_underflow`;
* fp8 scaling — the per-tensor scale :func:`fp8_scale`, a scaled cast and back
  :func:`quantize`, delayed scaling with an amax history :class:`DelayedScaling`,
  :func:`simulate_delayed_scaling`, :func:`first_overflow`, and MX block scaling with E8M0
  scales :func:`mx_quantize`, :func:`block_errors`;
* autocast — which op runs in which dtype :func:`autocast_dtypes`; fp32 vs autocast loss
  curves :func:`train_losses`, :func:`loss_gap`, :func:`plot_losses`;
* AMD's FNUZ fp8 formats and the special codes of each fp8 dtype: :func:`encodings`,
  :func:`cast_eps`;
* bf16 weights without an fp32 master copy: stochastic rounding and Kahan summation,
  :func:`compare_update_rules`, :func:`stochastic_round_bf16`, :func:`kahan_step`;
* the precision of a bf16 all-reduce across real ranks: :func:`bf16_allreduce_errors`;
* torchao's float8 training recipes emulated with the course's quantizer:
  :func:`recipe_errors`, :func:`linear_operands`, :func:`scaled_fp8`;
* the measured speed-up of bf16 on a GEMM and on the training step, on the roofline:
  :func:`measure_speedups`, :func:`plot_speedups`.

Sources: Micikevicius et al., "Mixed Precision Training" (ICLR 2018); Micikevicius et al.,
"FP8 Formats for Deep Learning" (2022); OCP Microscaling Formats (MX) Specification v1.0
(2023); NVIDIA Transformer Engine documentation (delayed scaling); PyTorch's AMP documentation.
"""

from ._allreduce import REDUCE_ARMS, REDUCTION_ONLY, ReduceErrors, bf16_allreduce_errors, rank_gradient
from ._autocast import AUTOCAST, CUDA_AUTOCAST, cuda_autocast_lists, cuda_autocast_policy
from ._formats import (
    FATES,
    STORAGE,
    Encodings,
    FloatFormat,
    FormatTable,
    cast_beyond_max,
    cast_eps,
    encodings,
    fate,
    format_table,
    layout_limits,
    pick_format,
    rounding_error,
)
from ._practice import (
    ScalerStep,
    accumulate,
    lost_updates,
    saved_bytes_by_precision,
    scaler_steps,
)
from ._recipes import RECIPES, LinearOperands, linear_operands, recipe_errors, scaled_fp8
from ._scaling import (
    MX_BLOCK,
    POLICIES,
    SCALE_ROUNDINGS,
    DelayedScaling,
    Quantized,
    ScalingStep,
    block_errors,
    drifting_activations,
    first_overflow,
    fp8_max,
    fp8_scale,
    mx_quantize,
    plot_block_errors,
    plot_delayed_scaling,
    quantize,
    saturating_cast,
    simulate_delayed_scaling,
    with_outliers,
)
from ._training import (
    GradientCheck,
    OpDtype,
    Speedups,
    autocast_dtypes,
    format_op_dtypes,
    gradient_underflow,
    loss_gap,
    measure_speedups,
    pattern_batch,
    plot_losses,
    plot_speedups,
    train_losses,
)
from ._updates import (
    UPDATE_RULES,
    UpdateRun,
    apply_updates,
    compare_update_rules,
    kahan_step,
    stochastic_round_bf16,
)

__all__ = [
    "Encodings",
    "LinearOperands",
    "RECIPES",
    "REDUCE_ARMS",
    "REDUCTION_ONLY",
    "ReduceErrors",
    "UPDATE_RULES",
    "UpdateRun",
    "apply_updates",
    "bf16_allreduce_errors",
    "cast_eps",
    "compare_update_rules",
    "encodings",
    "kahan_step",
    "linear_operands",
    "rank_gradient",
    "recipe_errors",
    "scaled_fp8",
    "stochastic_round_bf16",
    "CUDA_AUTOCAST",
    "ScalerStep",
    "accumulate",
    "cuda_autocast_lists",
    "cuda_autocast_policy",
    "lost_updates",
    "saved_bytes_by_precision",
    "scaler_steps",
    "AUTOCAST",
    "FATES",
    "MX_BLOCK",
    "SCALE_ROUNDINGS",
    "POLICIES",
    "STORAGE",
    "DelayedScaling",
    "FloatFormat",
    "FormatTable",
    "GradientCheck",
    "OpDtype",
    "Quantized",
    "ScalingStep",
    "Speedups",
    "autocast_dtypes",
    "block_errors",
    "drifting_activations",
    "fate",
    "first_overflow",
    "format_op_dtypes",
    "format_table",
    "fp8_max",
    "fp8_scale",
    "gradient_underflow",
    "layout_limits",
    "loss_gap",
    "measure_speedups",
    "mx_quantize",
    "pattern_batch",
    "pick_format",
    "plot_block_errors",
    "plot_delayed_scaling",
    "plot_losses",
    "plot_speedups",
    "quantize",
    "rounding_error",
    "cast_beyond_max",
    "saturating_cast",
    "simulate_delayed_scaling",
    "train_losses",
    "with_outliers",
]

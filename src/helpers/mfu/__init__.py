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
* a mixture-of-experts model counts its ACTIVE parameters per token in N, not all experts
  (:mod:`._conventions` also covers causal attention, the peak of an fp8 run and padding).

Peaks: a GPU's comes from the datasheet table :data:`helpers.hardware.DEVICES` (dense); a
CPU has no datasheet peak, so the course divides by the FLOP/s it *measured* on a large GEMM
(:func:`helpers.hardware.measure_device`) — an achieved figure, so a CPU MFU reads "fraction
of the best GEMM this machine did", not "fraction of a theoretical peak".

``python -m helpers.mfu`` is the chapter's benchmark: it times the course model's training
step on this device and prints tokens/s, MFU and HFU in a short report.
"""

from __future__ import annotations

from ._claims import (  # noqa: F401
    MFU_BUGS,
    PUBLISHED_MFU,
    MFUClaim,
    PublishedMFU,
    claim_problem,
    example_claims,
    make_claim,
    true_mfu,
)
from ._cli import main  # noqa: F401
from ._conventions import (  # noqa: F401
    MIXTRAL_8X7B,
    MoEConfig,
    batch_layouts,
    causal_attention_flops_per_token,
    example_lengths,
    fp8_run_mfu,
    moe_flops_per_token,
    moe_params,
    useful_model_flops,
)
from ._counting import _extra_formulas, count_flops, counted_flops_formula, flop_breakdown, flop_counter_mode  # noqa: F401
from ._formulas import (  # noqa: F401
    attention_flops_per_token,
    dense_model_flops,
    dense_transformer_mfu,
    hfu,
    mfu,
    model_flops_per_step,
    throughput,
    tokens_per_step,
    transformer_flops_per_token,
)
from ._measure import (  # noqa: F401
    NOISY,
    MFUReport,
    Peak,
    TrainingRun,
    compare_sweep,
    device_peak,
    example_report,
    measure_training,
    sweep_seq_lens,
)

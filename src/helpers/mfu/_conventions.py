"""MFU counting conventions a reader of an MFU figure must know: mixture-of-experts active
parameters and the router, causal attention, the peak of an fp8 run, padding vs packing.

Every function returns numbers computed from its inputs; the published figures it is compared
with are named with their source where the chapter quotes them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .. import hardware
from .._validate import count as _count
from .._validate import positive as _positive
from .._validate import whole_fields as _whole_fields
from ._formulas import attention_flops_per_token, mfu

# --------------------------------------------------------------------------- mixture of experts


@dataclass(frozen=True)
class MoEConfig:
    """A decoder-only mixture-of-experts transformer with SwiGLU experts and grouped-query attention."""

    name: str
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn_hidden: int  # hidden size of one expert
    vocab_size: int
    n_experts: int  # routed experts per layer
    top_k: int  # routed experts each token uses
    n_shared_experts: int = 0  # experts every token uses (DeepSeekMoE style)
    tied_embeddings: bool = False
    source: str = ""

    def __post_init__(self) -> None:
        _whole_fields(
            self,
            "d_model",
            "n_layers",
            "n_heads",
            "n_kv_heads",
            "head_dim",
            "ffn_hidden",
            "vocab_size",
            "n_experts",
        )
        _whole_fields(self, "top_k")
        _whole_fields(self, "n_shared_experts", minimum=0)
        if self.top_k > self.n_experts:
            raise ValueError(
                f"{self.name}: top_k={self.top_k} is more than n_experts={self.n_experts}; a token "
                "picks its experts among the routed ones."
            )


#: Mixtral 8x7B, from Table 1 of Jiang et al., "Mixtral of Experts" (2024, arXiv:2401.04088):
#: dim 4096, 32 layers, head_dim 128, hidden_dim 14336, 32 heads, 8 kv heads, vocabulary 32000,
#: 8 experts, top 2. The paper gives "47B" parameters in total, "13B" active per token.
MIXTRAL_8X7B = MoEConfig(
    "Mixtral 8x7B",
    d_model=4096,
    n_layers=32,
    n_heads=32,
    n_kv_heads=8,
    head_dim=128,
    ffn_hidden=14336,
    vocab_size=32000,
    n_experts=8,
    top_k=2,
    source='Jiang et al., "Mixtral of Experts" (2024), Table 1',
)


def moe_params(config: MoEConfig) -> dict[str, int]:
    """Parameter counts of a MoE model: ``total``, ``active`` (per token: top-k routed experts,
    the shared experts and everything that is not an expert) and ``router`` (all layers).

    Per layer: attention q, k, v, o (k and v have ``n_kv_heads`` heads), one SwiGLU expert is
    3 · d_model · ffn_hidden (gate, up, down), the router is d_model · n_experts, two RMSNorm
    weights of d_model. Plus the embedding, the output layer (unless tied) and the final norm.
    """
    d, heads = config.d_model, config.head_dim
    attention = d * config.n_heads * heads * 2 + d * config.n_kv_heads * heads * 2
    expert = 3 * d * config.ffn_hidden
    router = d * config.n_experts
    norms = 2 * d
    embeddings = config.vocab_size * d * (1 if config.tied_embeddings else 2) + d
    per_layer_dense = attention + router + norms + config.n_shared_experts * expert
    total = embeddings + config.n_layers * (per_layer_dense + config.n_experts * expert)
    active = embeddings + config.n_layers * (per_layer_dense + config.top_k * expert)
    return {"total": total, "active": active, "router": config.n_layers * router}


def moe_flops_per_token(config: MoEConfig, seq_len: int, params: str = "active") -> float:
    """Training FLOPs per token, 6·N + the attention term, with N the ``"active"`` parameters
    (the right count: a token runs through top_k experts only) or the ``"total"`` (the mistake).

    The router is in N either way: every token is scored against every expert, so its
    2·d_model·n_experts FLOPs per layer (forward) are spent in full, unlike the experts'.
    """
    counts = moe_params(config)
    if params not in ("active", "total"):
        raise ValueError(f"params={params!r}: use 'active' (what a token runs through) or 'total'.")
    attention = attention_flops_per_token(config.n_layers, config.n_heads, config.head_dim, seq_len)
    return 6 * counts[params] + attention


# --------------------------------------------------------------------------- causal attention


def causal_attention_flops_per_token(n_layers: int, n_heads: int, head_dim: int, seq_len: int) -> float:
    """The attention term when the kernel skips the masked half of a causal score matrix:
    half of :func:`attention_flops_per_token` (6·layers·heads·head_dim·seq_len).

    FlashAttention skips the blocks above the diagonal, and the FlashAttention-2 paper (Dao 2023,
    section 4.1) divides the attention FLOPs by 2 for a causal mask. The exact lower triangle
    with its diagonal is (seq_len + 1) / (2 · seq_len) of the square, so "half" is within
    1/seq_len of it.
    """
    return attention_flops_per_token(n_layers, n_heads, head_dim, seq_len) / 2


# --------------------------------------------------------------------------- fp8: which peak


def fp8_run_mfu(
    model_flops: float, step_time_s: float, num_devices: int, device: str = "H100 SXM"
) -> dict[str, float]:
    """MFU of one run against the device's dense fp8 peak and its dense bf16 peak (both from
    :data:`helpers.hardware.DEVICES`). With the GEMMs in fp8, the fp8 peak is the ceiling of the
    math that ran; a report that keeps the bf16 peak shows a number twice as high on a GPU whose
    fp8 peak is twice its bf16 peak (H100)."""
    spec = hardware.get_device(device)
    try:
        fp8, bf16 = spec.peak("fp8"), spec.peak("bf16")
    except KeyError:
        raise ValueError(
            f"{spec.name} has no fp8 and bf16 peaks in the course table: pick a GPU with fp8 tensor "
            "cores (H100 SXM, H200, L4, B200, ...)."
        ) from None
    return {
        "peak_fp8": fp8,
        "peak_bf16": bf16,
        "mfu_fp8_peak": mfu(model_flops, step_time_s, num_devices, fp8),
        "mfu_bf16_peak": mfu(model_flops, step_time_s, num_devices, bf16),
    }


# --------------------------------------------------------------------------- padding vs packing


def example_lengths(n: int = 64, seq_len: int = 1024, seed: int = 0) -> list[int]:
    """EXAMPLE document lengths: a seeded log-normal draw (median ~seq_len/4), clipped to
    1..seq_len. Invented data for the padding example, not a real corpus."""
    n, seq_len = _count(n=n, seq_len=seq_len)
    rng = np.random.default_rng(seed)
    draws = rng.lognormal(mean=math.log(seq_len / 4), sigma=0.8, size=n)
    return [int(x) for x in np.clip(np.rint(draws), 1, seq_len)]


def batch_layouts(lengths: Sequence[int], seq_len: int) -> dict[str, dict[str, float]]:
    """Tokens a step processes vs tokens that are real text, for two layouts of the same documents.

    - ``"padded"``: one document per row, each padded to ``seq_len``;
    - ``"packed"``: documents laid end to end into rows of ``seq_len`` (only the last row
      is padded).

    Each layout: ``rows``, ``tokens`` (rows · seq_len, what the GPU processes), ``real``
    (sum of the lengths) and ``useful`` (real / tokens).
    """
    (seq_len,) = _count(seq_len=seq_len)
    docs = list(lengths)
    if not docs:
        raise ValueError("batch_layouts needs at least one document length.")
    docs = list(_count(**{f"lengths[{i}]": x for i, x in enumerate(docs)}))
    too_long = [x for x in docs if x > seq_len]
    if too_long:
        raise ValueError(
            f"{len(too_long)} document(s) are longer than seq_len={seq_len} (e.g. {too_long[0]}): "
            "cut them into pieces of at most seq_len first."
        )
    real = sum(docs)
    out = {}
    for name, rows in (("padded", len(docs)), ("packed", math.ceil(real / seq_len))):
        tokens = rows * seq_len
        out[name] = {"rows": rows, "tokens": tokens, "real": real, "useful": real / tokens}
    return out


def useful_model_flops(
    lengths: Sequence[int], params: float, n_layers: int, n_heads: int, head_dim: int
) -> float:
    """Model FLOPs of a step over the real tokens only: each document counts 6·N per token and
    the attention term at its own length (with a document mask, a token attends only to its
    own document, packed or not)."""
    _positive(params=params)
    total = 0.0
    for length in lengths:
        (length,) = _count(length=length)
        total += (6 * params + attention_flops_per_token(n_layers, n_heads, head_dim, length)) * length
    return total

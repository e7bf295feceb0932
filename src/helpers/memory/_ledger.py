"""Formulas: the model-state ledger (with ZeRO sharding) and activation bytes per layer.

Model state (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion
Parameter Models", section 3.1): mixed-precision Adam keeps 16-bit parameters and gradients
(2 + 2 bytes per parameter) plus an fp32 master copy and two fp32 moments (4 + 4 + 4) —
16 bytes per parameter. fp32 AdamW keeps 4 + 4 + 8: also 16, split differently.

Activations (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
Transformer Models", section 4): one transformer layer with 16-bit activations and dropout
keeps s·b·h·(34 + 5·a·s/h) bytes for the backward pass (s sequence length, b micro batch,
h hidden size, a attention heads). The 5·a·s/h part is attention's s × s matrices (softmax
output 2, its dropout mask 1, dropout output 2 bytes per element); a fused attention kernel
(FlashAttention) keeps none of them. Selective recompute drops that part (34·s·b·h); full
recompute keeps only the layer input (2·s·b·h).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .._validate import count as _count
from .._validate import flag as _flag
from .._validate import unknown

#: Optimizers of the ledger, with the fp32 numbers each keeps per parameter (besides any
#: master copy). Adafactor-like: a factored second moment (one number per row and per column
#: of each matrix, Shazeer & Stern 2018) and no first moment — counted as 0 per parameter, a
#: stated approximation (for an r × c matrix it is 4·(r + c) bytes, under 0.1 % of 4·r·c for
#: matrices wider than 8000).
OPTIMIZER_STATES = {"adamw": 2, "adam": 2, "sgd_momentum": 1, "sgd": 0, "adafactor": 0}
RECOMPUTE = ("none", "selective", "full")
ZERO_STAGES = (0, 1, 2, 3)


def _optimizer(name: str) -> str:
    key = str(name).lower().replace("-", "_").replace(" ", "_")
    key = {"sgd_with_momentum": "sgd_momentum", "momentum": "sgd_momentum"}.get(key, key)
    if key not in OPTIMIZER_STATES:
        raise unknown("optimizer", name, OPTIMIZER_STATES)
    return key


def _shard(n_bytes: int, dp: int) -> int:
    """Bytes of one rank's shard of ``n_bytes`` split over ``dp`` ranks (padded up, as ZeRO does)."""
    return -(-n_bytes // dp)


@dataclass(frozen=True)
class Ledger:
    """Model-state bytes of training, per data-parallel rank."""

    n_params: int
    optimizer: str
    mixed_precision: bool
    zero_stage: int
    dp: int
    parameters: int
    gradients: int
    optimizer_state: int
    master_weights: int

    @property
    def total(self) -> int:
        return self.parameters + self.gradients + self.optimizer_state + self.master_weights

    @property
    def bytes_per_param(self) -> float:
        """Bytes per parameter of the model, on one rank."""
        return self.total / self.n_params

    def as_dict(self) -> dict[str, int]:
        """The five byte counts (plain data): parameters, gradients, optimizer_state,
        master_weights, total."""
        keys = ("parameters", "gradients", "optimizer_state", "master_weights")
        return {**{k: asdict(self)[k] for k in keys}, "total": self.total}

    def format(self, unit: str = "GiB") -> str:
        div = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "GB": 1e9}[unit]
        precision = "mixed precision (16-bit weights, fp32 master)" if self.mixed_precision else "fp32"
        rank = f", ZeRO stage {self.zero_stage} over {self.dp} ranks (per rank)" if self.dp > 1 else ""
        lines = [f"{self.n_params:,} parameters, {self.optimizer}, {precision}{rank}:"]
        for key, value in self.as_dict().items():
            lines.append(f"  {key:<16} {value / div:12.3f} {unit}  ({value / self.n_params:5.2f} B/param)")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()


def model_state_bytes(
    n_params: int, optimizer: str = "adamw", mixed_precision: bool = True, *, zero_stage: int = 0, dp: int = 1
) -> Ledger:
    """The model-state ledger of training ``n_params`` parameters, in bytes per rank.

    ``mixed_precision=True`` is the ZeRO paper's setting: 16-bit parameters and gradients,
    an fp32 master copy of the parameters and fp32 optimizer states. ``False`` is plain
    fp32 training (no master copy). ``zero_stage`` 1 shards the optimizer states and the
    master copy over ``dp`` data-parallel ranks, 2 also the gradients, 3 also the
    parameters (each shard padded up to whole bytes).
    """
    _flag(mixed_precision=mixed_precision)
    n_params, dp = _count(n_params=n_params, dp=dp)
    if zero_stage not in ZERO_STAGES or isinstance(zero_stage, bool):
        raise ValueError(f"zero_stage must be 0, 1, 2 or 3, got {zero_stage!r}")
    key = _optimizer(optimizer)
    weight_bytes = 2 if mixed_precision else 4
    parameters = gradients = weight_bytes * n_params
    states = 4 * OPTIMIZER_STATES[key] * n_params
    master = 4 * n_params if mixed_precision else 0
    if zero_stage >= 1:
        states, master = _shard(states, dp), _shard(master, dp)
    if zero_stage >= 2:
        gradients = _shard(gradients, dp)
    if zero_stage >= 3:
        parameters = _shard(parameters, dp)
    return Ledger(n_params, key, bool(mixed_precision), zero_stage, dp, parameters, gradients, states, master)


#: Bytes per element of Adam's two moments. "8-bit": block-wise quantised states (Dettmers et al.
#: 2022, "8-bit Optimizers via Block-wise Quantization", the bitsandbytes optimizers): one byte
#: per element and one fp32 absolute maximum per block of 2048 elements.
STATE_DTYPES = {"fp32": 4.0, "bf16": 2.0, "8-bit": 1 + 4 / 2048}
WEIGHT_DTYPES = {"fp32": 4, "bf16": 2, "fp16": 2}


def adam_bytes_per_parameter(
    weights: str = "bf16", *, master: bool = True, states: str = "fp32", compensation: bool = False
) -> dict[str, float]:
    """Adam's model state per parameter, by part, for the ways of storing it.

    ``weights``: the dtype of the parameters the model computes with (gradients have the same
    dtype); ``master``: an fp32 master copy of the weights (the update is made there);
    ``states``: the dtype of the two moments (:data:`STATE_DTYPES`); ``compensation``: a
    16-bit Kahan compensation buffer per weight, which keeps the low bits that rounding a 16-bit
    weight after its update would drop (pure 16-bit training without a master copy)."""
    if weights not in WEIGHT_DTYPES:
        raise unknown("weight dtype", weights, WEIGHT_DTYPES)
    if states not in STATE_DTYPES:
        raise unknown("state dtype", states, STATE_DTYPES)
    _flag(master=master, compensation=compensation)
    w = WEIGHT_DTYPES[weights]
    parts = {
        "parameters": float(w),
        "gradients": float(w),
        "optimizer_state": 2 * STATE_DTYPES[states],
        "master_weights": 4.0 if master else 0.0,
        "compensation": float(w) if compensation else 0.0,
    }
    parts["total"] = sum(parts.values())
    return parts


def _activation_parts(
    seq_len: int,
    batch: int,
    hidden: int,
    heads: int,
    recompute: str,
    bytes_per_element: int,
    dropout: bool,
    fused_attention: bool,
    tp: int = 1,
    sequence_parallel: bool = False,
) -> tuple[int, int]:
    seq_len, batch, hidden, heads, bytes_per_element, tp = _count(
        seq_len=seq_len, batch=batch, hidden=hidden, heads=heads, bytes_per_element=bytes_per_element, tp=tp
    )
    if recompute not in RECOMPUTE:
        raise unknown("recompute", recompute, RECOMPUTE)
    sbh = seq_len * batch * hidden
    e, mask = bytes_per_element, 1  # a dropout mask keeps 1 byte per element
    # under sequence parallelism the parts tensor parallelism leaves whole are split too
    whole = tp if sequence_parallel else 1
    if recompute == "full":
        return e * sbh // whole, 0  # only the layer input
    # per s·b·h: LayerNorm inputs 2·e, QKV input e and MLP input e stay whole under tensor
    # parallelism (4·e); Q K V 3·e, attention output e, GELU input 4·e and down input 4·e are
    # split over the t ranks (12·e); the residual dropout masks (2·mask) stay whole
    linear = (4 * e * sbh + (2 * mask * sbh if dropout else 0)) // whole + 12 * e * sbh // tp
    if recompute == "selective" or fused_attention:
        return linear, 0
    # softmax output e, and with dropout its mask (1) and output (e), each a·s·s·b elements,
    # split over the ranks with the heads
    per_score = e + (mask + e if dropout else 0)
    return linear, per_score * heads * seq_len * seq_len * batch // tp


def activation_bytes(
    seq_len: int,
    batch: int,
    hidden: int,
    heads: int,
    recompute: str = "none",
    *,
    bytes_per_element: int = 2,
    dropout: bool = True,
    fused_attention: bool = False,
    tp: int = 1,
    sequence_parallel: bool = False,
) -> int:
    """Bytes one transformer layer keeps for its backward pass, per tensor-parallel rank
    (Korthikanti et al. 2022, Table 2).

    Defaults are the paper's: 16-bit activations (``bytes_per_element=2``), dropout, an
    unfused attention (the paper's section 4.1 gives the formulas; chapter 5 of the course
    tabulates them). ``dropout=False`` drops what dropout keeps; ``fused_attention=True``
    (FlashAttention-style kernels) drops every s × s term. (Exercise 3 of chapter 5 asks for
    this count, so the formulas are not repeated here.) With
    ``tp`` tensor-parallel ranks, the parts inside the parallel region are split over them:
    s·b·h·(10 + 24/t + 5·a·s/(h·t)); ``sequence_parallel=True`` splits the rest too:
    s·b·h·(34 + 5·a·s/h)/t, and ``"full"`` keeps 2·s·b·h/t. That last split is Megatron-LM's
    practice (the checkpointed input kept in the sequence-parallel region); the paper's Table 2
    lists 2·s·b·h for full recomputation whatever t.
    """
    _flag(dropout=dropout, fused_attention=fused_attention, sequence_parallel=sequence_parallel)
    linear, attention = _activation_parts(
        seq_len,
        batch,
        hidden,
        heads,
        recompute,
        bytes_per_element,
        dropout,
        fused_attention,
        tp,
        sequence_parallel,
    )
    return linear + attention


def activation_breakdown(
    seq_len: int,
    batch: int,
    hidden: int,
    heads: int,
    recompute: str = "none",
    *,
    bytes_per_element: int = 2,
    dropout: bool = True,
    fused_attention: bool = False,
    tp: int = 1,
    sequence_parallel: bool = False,
) -> dict[str, int]:
    """:func:`activation_bytes` split into ``"linear"`` (terms in s·b·h: grow linearly with the
    sequence) and ``"attention"`` (the a·s²·b terms of the score matrices), plus ``"total"``."""
    _flag(dropout=dropout, fused_attention=fused_attention, sequence_parallel=sequence_parallel)
    linear, attention = _activation_parts(
        seq_len,
        batch,
        hidden,
        heads,
        recompute,
        bytes_per_element,
        dropout,
        fused_attention,
        tp,
        sequence_parallel,
    )
    return {"linear": linear, "attention": attention, "total": linear + attention}

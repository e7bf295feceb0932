"""At scale, on paper: the step time of DDP and of FSDP (ZeRO-3) on many GPUs, from the ring
model, the links' datasheet bandwidths and an assumed latency.

This is a MODEL, not a measurement. Every prediction carries the list of its assumptions
(``.assumptions``); the main ones:

* collectives are rings: t = steps·α + bytes sent per rank / bandwidth (:mod:`._ring`), one
  communication channel per GPU, the datasheet's bandwidth reached at every message size;
* α is ASSUMED (``helpers.hardware.INTERCONNECTS``), not a datasheet figure;
* ``compute_s`` (forward + backward of one GPU's batch) is the same at every world size (weak
  scaling); the backward is 2/3 of it (about twice the forward's FLOPs);
* across nodes the ring's slowest hop is the network card, so the whole ring runs at the
  NIC's bandwidth per GPU.

DDP reuses chapter 4's bucket model (:func:`helpers.timeline.overlapped_backward`); FSDP
gathers parameters one unit at a time and hides all but the first unit's all-gather behind
compute, up to the compute time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from .._validate import count, flag, positive, unknown
from .._validate import flag as _flag
from ..hardware import INTERCONNECTS, Interconnect
from ..timeline._schedule import bucket_sizes, bucketed_allreduce_time, overlapped_backward
from ._ring import ring_bytes, ring_time

STRATEGIES = ("ddp", "fsdp")
#: DDP's default bucket: ``bucket_cap_mb=25``, which torch turns into 25 MiB.
DEFAULT_BUCKET_BYTES = 25 * 1024**2
BACKWARD_SHARE = 2 / 3
GPUS_PER_NODE = 8  # as in NVIDIA's DGX / HGX boxes
#: Two runs to compare: one node over NVLink, eight nodes over 400 Gb/s InfiniBand.
DEFAULT_RUNS = (("NVLink 4 (H100 SXM)", 8), ("InfiniBand NDR 400 Gb/s", 64))


@dataclass(frozen=True)
class ScalePrediction:
    """One predicted training step (seconds, bytes). ``comm_s``: all the step's communication
    end to end; ``exposed_s``: the part not hidden behind compute; ``step_s`` = compute_s +
    exposed_s; ``bytes_per_rank``: bytes each GPU sends; ``comm_by_kind_s``: comm_s split by
    collective. A model: read ``assumptions``."""

    strategy: str
    link: str
    world_size: int
    n_params: float
    compute_s: float
    step_s: float
    comm_s: float
    exposed_s: float
    bytes_per_rank: float
    alpha_s: float
    bandwidth: float
    comm_by_kind_s: dict[str, float] = field(default_factory=dict)
    assumptions: list[str] = field(default_factory=list)

    @property
    def efficiency(self) -> float:
        """compute_s / step_s: the share of the step spent computing (1: communication all hidden)."""
        return self.compute_s / self.step_s

    def __str__(self) -> str:
        return (
            f"{self.strategy.upper()} on {self.world_size} GPUs over {self.link}, "
            f"{self.n_params / 1e9:.3g}B parameters: step {self.step_s * 1e3:.4g} ms = compute "
            f"{self.compute_s * 1e3:.4g} ms + exposed communication {self.exposed_s * 1e3:.4g} ms "
            f"(communication {self.comm_s * 1e3:.4g} ms in all, {self.bytes_per_rank / 1e9:.3g} GB sent "
            f"per GPU; efficiency {self.efficiency:.0%}). A model: see .assumptions"
        )

    def as_dict(self) -> dict[str, Any]:
        """Plain data."""
        return asdict(self)


@dataclass(frozen=True)
class ScaleTable:
    """Predictions side by side (:func:`scaling_table`); ``str()`` prints them and their
    assumptions once."""

    predictions: tuple[ScalePrediction, ...]

    def __str__(self) -> str:
        lines = [
            f"{'strategy':<9}{'GPUs':>5}  {'link':<26}{'comm ms':>10}{'exposed ms':>11}{'step ms':>10}"
            f"{'efficiency':>11}{'GB/GPU':>8}"
        ]
        for p in self.predictions:
            lines.append(
                f"{p.strategy.upper():<9}{p.world_size:>5}  {p.link:<26}{p.comm_s * 1e3:>10.4g}"
                f"{p.exposed_s * 1e3:>11.4g}{p.step_s * 1e3:>10.4g}{p.efficiency:>11.0%}"
                f"{p.bytes_per_rank / 1e9:>8.3g}"
            )
        seen = list(dict.fromkeys(a for p in self.predictions for a in p.assumptions))
        lines.append("A model, not a measurement. Assumptions:")
        lines.extend(f"  - {a}" for a in seen)
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        """Plain data."""
        return {"predictions": [p.as_dict() for p in self.predictions]}


def _link(link: str | Interconnect) -> tuple[str, Interconnect]:
    if isinstance(link, Interconnect):
        return "custom link", link
    if link not in INTERCONNECTS:
        raise unknown("link", link, INTERCONNECTS)
    return link, INTERCONNECTS[link]


def predict_step(
    n_params: float,
    world_size: int,
    link: str | Interconnect,
    compute_s: float,
    strategy: str = "ddp",
    grad_bytes_per_param: float = 2,
    param_bytes_per_param: float = 2,
    bucket_bytes: float = DEFAULT_BUCKET_BYTES,
    alpha_s: float | None = None,
    overlap_fraction: float = 1.0,
    reshard_after_forward: bool = True,
) -> ScalePrediction:
    """Predict one step of data-parallel training on ``world_size`` GPUs joined by ``link``
    (a name in ``helpers.hardware.INTERCONNECTS``, or an :class:`Interconnect`).

    ``compute_s``: forward + backward of one GPU's batch. ``bucket_bytes``: DDP's gradient
    bucket; for FSDP the parameter bytes of one ``fully_shard`` unit. ``alpha_s``: latency per
    ring message (default: the link's assumed one). ``overlap_fraction``: the share of the
    communication the model's schedule can hide that really hides (1: all of it; 0: none, as
    if communication ran after compute; below 1 stands for contention between the two).
    ``reshard_after_forward`` (FSDP): gather the parameters again for the backward."""
    _flag(reshard_after_forward=reshard_after_forward)
    positive(n_params=n_params, compute_s=compute_s, grad_bytes_per_param=grad_bytes_per_param)
    positive(param_bytes_per_param=param_bytes_per_param, bucket_bytes=bucket_bytes)
    (n,) = count(world_size=world_size)
    flag(reshard_after_forward=reshard_after_forward)
    if strategy not in STRATEGIES:
        raise unknown("strategy", strategy, STRATEGIES)
    if isinstance(overlap_fraction, bool) or not 0 <= overlap_fraction <= 1:
        raise ValueError(f"overlap_fraction must be between 0 and 1, got {overlap_fraction!r}")
    name, spec = _link(link)
    alpha = spec.alpha_s if alpha_s is None else alpha_s
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 <= alpha < math.inf:
        raise ValueError(f"alpha_s must be a number of seconds >= 0, got {alpha_s!r}")
    bw = spec.bandwidth
    assumptions = [
        "ring collectives, t = steps x alpha + bytes sent per GPU / bandwidth, one channel per GPU; "
        "the bandwidth is reached at every message size",
        f"{name}: {bw / 1e9:.4g} GB/s per GPU one way ({spec.source})",
        f"alpha {alpha * 1e6:.3g} µs per message: "
        + ("ASSUMED, not a datasheet figure" if alpha_s is None else "as given"),
        f"compute_s {compute_s * 1e3:.4g} ms per step at every world size (weak scaling: "
        "a fixed batch per GPU)",
    ]
    if n > GPUS_PER_NODE:
        assumptions.append(
            f"{n} GPUs span {math.ceil(n / GPUS_PER_NODE)} nodes of {GPUS_PER_NODE}: the ring's slowest hop "
            "(the network card) sets its speed, so the whole ring is priced at the link given, with the "
            "link's latency on every step: a pessimistic bound (NCCL runs one ring per network card, so "
            "its bus bandwidth across nodes nears the node's total network bandwidth, and it pays the "
            "network latency only on the steps that cross nodes)"
        )
    if strategy == "ddp":
        grads = n_params * grad_bytes_per_param
        buckets = bucket_sizes(grads, bucket_bytes)
        backward = BACKWARD_SHARE * compute_s
        comm = bucketed_allreduce_time(grads, bucket_bytes, n, alpha, bw)
        _, exposed_ideal = overlapped_backward(backward, grads, bucket_bytes, n, alpha, bw)
        hideable = comm - exposed_ideal
        sent = sum(ring_bytes("all_reduce", b, n) for b in buckets)
        by_kind = {"all_reduce": comm}
        assumptions += [
            "backward = 2/3 of compute_s (about twice the forward's FLOPs); forward 1/3, no communication",
            f"gradients ({grad_bytes_per_param:g} B per parameter) all-reduced in {len(buckets)} bucket(s) "
            f"of {bucket_bytes / 2**20:.4g} MiB, each starting once its gradients are ready (at a constant "
            "rate through the backward) and the previous bucket is done (chapter 4's overlapped_backward)",
        ]
    else:
        params = n_params * param_bytes_per_param
        units = bucket_sizes(params, bucket_bytes)
        per_grad = grad_bytes_per_param / param_bytes_per_param
        gather = sum(ring_time("all_gather", u, n, alpha, bw) for u in units)
        scatter = sum(ring_time("reduce_scatter", u * per_grad, n, alpha, bw) for u in units)
        gathers = 2 if reshard_after_forward else 1
        by_kind = {"all_gather": gathers * gather, "reduce_scatter": scatter}
        comm = gathers * gather + scatter
        first = ring_time("all_gather", units[0], n, alpha, bw)
        exposed_ideal = first + max(0.0, comm - first - compute_s)
        hideable = comm - exposed_ideal
        sent = sum(
            gathers * ring_bytes("all_gather", u, n) + ring_bytes("reduce_scatter", u * per_grad, n)
            for u in units
        )
        again = ", and again before the backward (reshard_after_forward)" if reshard_after_forward else ""
        assumptions += [
            f"ZeRO-3: parameters ({param_bytes_per_param:g} B each) all-gathered in {len(units)} unit(s) of "
            f"{bucket_bytes / 2**20:.4g} MiB before the forward{again}; gradients "
            f"({grad_bytes_per_param:g} B each) reduce-scattered per unit",
            "the first unit's all-gather is exposed; all the rest overlaps with compute up to compute_s "
            "(simplified: no prefetch limit, and the last reduce-scatter is taken as hidden too)",
        ]
    if overlap_fraction < 1:
        assumptions.append(f"only {overlap_fraction:.0%} of the hideable communication hides (contention)")
    exposed = comm - overlap_fraction * hideable
    return ScalePrediction(
        strategy=strategy,
        link=name,
        world_size=n,
        n_params=float(n_params),
        compute_s=float(compute_s),
        step_s=compute_s + exposed,
        comm_s=comm,
        exposed_s=exposed,
        bytes_per_rank=sent,
        alpha_s=float(alpha),
        bandwidth=float(bw),
        comm_by_kind_s=by_kind,
        assumptions=assumptions,
    )


def scaling_table(
    n_params: float,
    links_and_sizes: Sequence[tuple[str | Interconnect, int]] = DEFAULT_RUNS,
    compute_s: float = 1.0,
    strategies: Sequence[str] = STRATEGIES,
    **options: Any,
) -> ScaleTable:
    """:func:`predict_step` for every (link, world size) and strategy, as one table. By
    default 8 H100s over NVLink and 64 H100s over 400 Gb/s InfiniBand; ``options`` go to
    :func:`predict_step` (bytes per parameter, ``bucket_bytes``, ``alpha_s``...)."""
    if isinstance(strategies, str):
        strategies = [strategies]
    rows = [
        predict_step(n_params, size, link, compute_s, strategy=s, **options)
        for link, size in links_and_sizes
        for s in strategies
    ]
    if not rows:
        raise ValueError("give at least one (link, world_size) pair and one strategy")
    return ScaleTable(tuple(rows))

"""Checkpointing plans on the course model: apply them, predict and measure what they save and cost
(the chapter's module; :mod:`helpers.checkpointing` is its public face)."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from .. import memory, models
from .._validate import count as _count
from .._validate import flag as _flag
from ..bench import Measurement, SpeedComparison, compare_speed, measure, resolve_device, summary_line

#: The plans of the chapter's menu, in no particular order of cost.
MENU = ("none", "selective", "every:4", "every:3", "every:2", "every")
_MARK = "_trainperf_checkpoint"


def plan_modes(plan: str, n_blocks: int) -> list[str]:
    """One mode per block for ``plan``: ``"none"``, ``"full"`` (checkpointed block) or
    ``"selective"`` (checkpointed attention core)."""
    (n_blocks,) = _count(n_blocks=n_blocks)
    text = str(plan).strip().lower()
    if text == "none":
        return ["none"] * n_blocks
    if text == "every":
        return ["full"] * n_blocks
    if text == "selective":
        return ["selective"] * n_blocks
    if text.startswith("every:"):
        try:
            k = int(text.split(":", 1)[1])
        except ValueError:
            k = 0
        if k >= 1:
            return ["full" if i % k == 0 else "none" for i in range(n_blocks)]
    raise ValueError(f"unknown plan {plan!r}; use 'none', 'every', 'every:k' (k >= 1) or 'selective'")


_M = TypeVar("_M", bound=nn.Module)


def _blocks(model: nn.Module, blocks: Sequence[nn.Module] | None) -> list[nn.Module]:
    if blocks is not None:
        return list(blocks)
    found = getattr(model, "blocks", None)
    if found is None:
        raise TypeError(
            f"{type(model).__name__} has no .blocks; pass blocks=[...] (the modules to checkpoint, in order)"
        )
    return list(found)


def _checkpointed(fn: Callable[..., Any], preserve_rng_state: bool) -> Callable[..., Any]:
    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        return checkpoint(fn, *args, use_reentrant=False, preserve_rng_state=preserve_rng_state, **kwargs)

    setattr(run, _MARK, True)
    return run


def remove(model: nn.Module) -> nn.Module:
    """Undo :func:`apply`: every block runs as before, keeping all its activations."""
    for module in model.modules():
        for name in ("forward", "attend"):
            if getattr(module.__dict__.get(name), _MARK, False):
                del module.__dict__[name]
    model.__dict__.pop("_trainperf_plan", None)
    return model


def apply(
    model: _M,
    plan: str = "every",
    *,
    preserve_rng_state: bool = True,
    blocks: Sequence[nn.Module] | None = None,
) -> _M:
    """Checkpoint ``model``'s blocks by ``plan`` (replacing any earlier plan) and return it.

    Blocks are ``model.blocks`` (the course model) or ``blocks``. A checkpointed block's
    ``forward`` — or, for ``"selective"``, its ``attend`` method (the attention core) — runs
    under ``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)``. Undo with
    :func:`remove` or ``apply(model, "none")``; parameters and ``state_dict`` never change.
    """
    _flag(preserve_rng_state=preserve_rng_state)
    chosen: list[Any] = _blocks(model, blocks)  # modules with their own attributes (attend)
    modes = plan_modes(plan, len(chosen))
    if "selective" in modes and not all(callable(getattr(b, "attend", None)) for b in chosen):
        raise TypeError(
            "the 'selective' plan checkpoints each block's attend(q, k, v) method, and these blocks have none"
        )
    remove(model)
    for block, mode in zip(chosen, modes, strict=True):
        if mode == "full":
            block.forward = _checkpointed(block.forward, preserve_rng_state)
        elif mode == "selective":
            block.attend = _checkpointed(block.attend, preserve_rng_state)
    model.__dict__["_trainperf_plan"] = str(plan)
    return model


def current_plan(model: nn.Module) -> str:
    """The plan :func:`apply` last gave ``model`` (``"none"`` if none)."""
    return model.__dict__.get("_trainperf_plan", "none")


# --------------------------------------------------------------------------- estimates


def predicted_saved_bytes(config: Any, batch: int, seq_len: int, plan: str) -> int:
    """Saved-for-backward bytes of one fp32 forward of the course model under ``plan``
    (:func:`helpers.memory.course_saved_bytes`; exact on a CPU for batch >= 2)."""
    cfg = models.get_config(config)
    return memory.course_saved_bytes(cfg, batch, seq_len, plan_modes(plan, cfg.n_layers))


def block_forward_flops(config: Any, batch: int, seq_len: int) -> int:
    """FLOPs of one block's forward as ``FlopCounterMode`` counts them: the weight matmuls
    (2 per weight per token: QKV 3h², projection h², MLP 2·r·h²) plus attention's two
    products, 4·b·s²·h (the causal mask not discounted)."""
    cfg = models.get_config(config)
    batch, seq_len = _count(batch=batch, seq_len=seq_len)
    h, tokens = cfg.d_model, batch * seq_len
    return 2 * tokens * (4 + 2 * cfg.mlp_ratio) * h * h + 4 * batch * seq_len**2 * h


def recompute_flops_per_block(config: Any, batch: int, seq_len: int, mode: str) -> int:
    """FLOPs the backward pass reruns for one block in ``mode`` (``"none"``, ``"full"``,
    ``"selective"``), as ``FlopCounterMode`` counts them.

    Non-reentrant checkpointing stops recomputing as soon as it has every tensor the backward
    needs ("early stop"). So a checkpointed block reruns everything up to the input of its
    last matmul: all but the MLP's down projection, unless dropout follows it (then the whole
    block). A checkpointed fused attention core reruns both its products (4·b·s²·h); a
    spelled-out one only QKᵀ (2·b·s²·h), since the softmax output is the last thing kept.
    """
    cfg = models.get_config(config)
    batch, seq_len = _count(batch=batch, seq_len=seq_len)
    h, tokens, scores = cfg.d_model, batch * seq_len, 2 * batch * seq_len**2 * cfg.d_model
    if mode == "none":
        return 0
    if mode == "full":
        if cfg.dropout:
            return block_forward_flops(cfg, batch, seq_len)
        return 2 * tokens * (4 + cfg.mlp_ratio) * h * h + 2 * scores
    if mode == "selective":
        return 2 * scores if cfg.attention == "sdpa" else scores
    raise ValueError(f"mode must be 'none', 'full' or 'selective', got {mode!r}")


def recompute_flops(config: Any, batch: int, seq_len: int, plan: str) -> int:
    """Forward FLOPs the backward pass runs again under ``plan`` (see
    :func:`recompute_flops_per_block`)."""
    cfg = models.get_config(config)
    return sum(
        recompute_flops_per_block(cfg, batch, seq_len, mode) for mode in plan_modes(plan, cfg.n_layers)
    )


def estimate(config: Any, batch: int, seq_len: int, plan: str) -> dict[str, int]:
    """``{"saved_bytes": ..., "recompute_flops": ...}`` of ``plan`` for the course model."""
    return {
        "saved_bytes": predicted_saved_bytes(config, batch, seq_len, plan),
        "recompute_flops": recompute_flops(config, batch, seq_len, plan),
    }


def plans_within(
    config: Any, batch: int, seq_len: int, budget_bytes: float, plans: Sequence[str] = MENU
) -> list[str | None]:
    """Every plan whose saved bytes fit ``budget_bytes`` with the fewest recomputed FLOPs (ties
    all listed, in ``plans`` order); ``[None]`` when no plan fits."""
    estimates = [(p, estimate(config, batch, seq_len, p)) for p in plans]
    fitting = [(p, e["recompute_flops"]) for p, e in estimates if e["saved_bytes"] <= budget_bytes]
    if not fitting:
        return [None]
    least = min(flops for _, flops in fitting)
    return [p for p, flops in fitting if flops == least]


def choose_plan(
    config: Any, batch: int, seq_len: int, budget_bytes: float, plans: Sequence[str] = MENU
) -> str | None:
    """The plan whose saved bytes fit ``budget_bytes`` with the fewest recomputed FLOPs
    (the first such in ``plans`` on a tie); None when no plan fits."""
    return plans_within(config, batch, seq_len, budget_bytes, plans)[0]


def utilization(
    config: Any,
    batch: int,
    seq_len: int,
    plan: str,
    step_time_s: float,
    peak_flops: float,
    num_devices: int = 1,
) -> dict[str, float]:
    """MFU and HFU of a step under ``plan``: model FLOPs (chapter 2's 6·N + attention formula)
    and model FLOPs + the recomputed forward, over the same time × devices × peak."""
    from .. import mfu

    cfg = models.get_config(config)
    model_flops = mfu.model_flops_per_step(cfg, batch, seq_len)
    executed = model_flops + recompute_flops(cfg, batch, seq_len, plan)
    return {
        "mfu": mfu.mfu(model_flops, step_time_s, num_devices, peak_flops),
        "hfu": mfu.hfu(executed, step_time_s, num_devices, peak_flops),
    }


# --------------------------------------------------------------------------- measurements


@dataclass
class PlanResult:
    """One plan, measured on the course model."""

    plan: str
    saved_bytes: int  # saved for backward (saved_tensors_hooks), one forward
    predicted_bytes: int  # helpers.memory.course_saved_bytes for the plan
    step: Measurement  # a full training step, timed without hooks
    executed_flops: int  # FlopCounterMode, one training step
    model_flops: float  # chapter 2's formula: what the step is worth
    cuda_peak: int | None  # max_memory_allocated of one step on a GPU; None on a CPU
    vs_none: SpeedComparison | None = None  # plan "none" against this plan, interleaved; None for "none"


def compare_plans(
    config: Any,
    batch: int,
    seq_len: int | None = None,
    plans: Sequence[str] = MENU,
    *,
    device: str | torch.device = "cpu",
    iters: int = 5,
    warmup: int = 2,
    max_seconds: float = 3.0,
) -> list[PlanResult]:
    """Each plan on the same model, weights and batch: saved bytes (measured and predicted),
    executed FLOPs, on a GPU the peak allocated memory of one step, and its step time against
    plan ``"none"``: both timed in interleaved pairs with no hooks attached
    (``bench.compare_speed``: at least ``iters`` pairs, and never fewer than 10, after
    ``warmup``; samples of at least 20 ms; pairs stop being added after ``max_seconds`` per
    plan), with the speed-up's interval and verdict."""
    from .. import mfu

    dev = resolve_device(device)
    cfg = models.get_config(config)
    seq_len = cfg.seq_len if seq_len is None else seq_len
    idx, targets = models.make_batch(cfg, batch, seq_len, dev)
    steps, facts = {}, {}
    for plan in dict.fromkeys(["none", *plans]):
        model = apply(models.build_model(cfg, dev), plan)
        saved = memory.saved_tensor_bytes(lambda m=model: m(idx, targets)).activations
        steps[plan] = step = models.make_train_step(model, (idx, targets))
        executed = mfu.count_flops(step)
        peak = None
        if dev.type == "cuda":
            peak = memory.cuda_memory(step, device=dev, snapshot=None, history=False).peak
        facts[plan] = (saved, executed, peak)
    speeds = {
        plan: compare_speed(
            steps["none"],
            steps[plan],
            device=dev,
            warmup=warmup,
            min_pairs=max(10, iters),
            max_seconds=max_seconds,
            names=("none", plan),
        )
        for plan in plans
        if plan != "none"
    }
    rows = []
    for plan in plans:
        saved, executed, peak = facts[plan]
        if plan == "none":
            timing = (
                next(iter(speeds.values())).baseline
                if speeds
                else measure(steps[plan], warmup=warmup, iters=max(3, iters), device=dev)
            )
        else:
            timing = speeds[plan].tuned
        predicted = predicted_saved_bytes(cfg, batch, seq_len, plan)
        rows.append(
            PlanResult(
                plan,
                saved,
                predicted,
                timing,
                executed,
                mfu.model_flops_per_step(cfg, batch, seq_len),
                peak,
                speeds.get(plan),
            )
        )
    return rows


def format_plans(rows: Sequence[PlanResult]) -> str:
    """The measured plans side by side (deterministic columns first, timings last)."""
    base = next((r for r in rows if r.plan == "none"), rows[0])
    # no step-time column: each plan was timed against "none" in its own interleaved comparison,
    # so medians from different comparisons side by side would compare different windows
    head = (
        f"{'plan':<10} {'saved MiB':>10} {'predicted':>10} {'vs none':>8} {'executed GFLOP':>15} "
        f"{'HFU/MFU':>8}  speed against none (95 % interval; the medians of that comparison)"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        peak = f"  CUDA peak {r.cuda_peak / 2**20:,.0f} MiB" if r.cuda_peak is not None else ""
        lines.append(
            f"{r.plan:<10} {r.saved_bytes / 2**20:>10.3f} {r.predicted_bytes / 2**20:>10.3f} "
            f"{r.saved_bytes / base.saved_bytes:>8.0%} {r.executed_flops / 1e9:>15.3f} "
            f"{r.executed_flops / base.executed_flops:>8.3f}  {_against_none(r)}{peak}"
        )
    return "\n".join(lines)


def _against_none(row: PlanResult) -> str:
    s = row.vs_none
    if s is None:
        return "(the baseline)" if row.plan == "none" else "not compared"
    return (
        f"{summary_line(s)} ({s.names[0]} {s.baseline.median * 1e3:.2f} ms, "
        f"{s.names[1]} {s.tuned.median * 1e3:.2f} ms)"
    )


@dataclass(frozen=True)
class GradientCheck:
    """Gradients with a plan against the same step without one."""

    plan: str
    dropout: float
    training: bool
    preserve_rng_state: bool
    max_abs_diff: float
    matches: bool  # torch.testing.assert_close passed

    def __str__(self) -> str:
        verdict = "same gradients" if self.matches else "DIFFERENT gradients"
        return (
            f"plan {self.plan!r}, dropout {self.dropout}, {'train' if self.training else 'eval'} mode, "
            f"preserve_rng_state={self.preserve_rng_state}: {verdict} "
            f"(largest difference {self.max_abs_diff:.3g})"
        )


def check_gradients(
    config: Any = "tiny",
    plan: str = "every",
    *,
    dropout: float = 0.0,
    preserve_rng_state: bool = True,
    training: bool = True,
    batch: int = 2,
    seq_len: int | None = 32,
    seed: int = 0,
) -> GradientCheck:
    """One forward and backward with and without ``plan`` from the same weights, batch and
    random seed; compares every gradient with ``torch.testing.assert_close``. ``seq_len=None``
    is the config's context length."""
    _flag(preserve_rng_state=preserve_rng_state, training=training)
    cfg = models.get_config(config, dropout=dropout)
    idx, targets = models.make_batch(cfg, batch, seq_len)
    grads = []
    for chosen in ("none", plan):
        model = models.build_model(cfg, seed=seed).train(training)
        apply(model, chosen, preserve_rng_state=preserve_rng_state)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed + 1)
            model(idx, targets).backward()
        grads.append([p.grad for p in model.parameters()])
    diff = max(float((a - b).abs().max()) for a, b in zip(*grads, strict=True))
    try:
        for a, b in zip(*grads, strict=True):
            torch.testing.assert_close(b, a)
        same = True
    except AssertionError:
        same = False
    return GradientCheck(str(plan), float(dropout), training, preserve_rng_state, diff, same)


# --------------------------------------------------------------------------- attention's share


def attention_share_formula(seq_len: int, hidden: int) -> float:
    """A rule of thumb for attention's share of a layer's activations: 2s / (2s + 4h)."""
    seq_len, hidden = _count(seq_len=seq_len, hidden=hidden)
    return 2 * seq_len / (2 * seq_len + 4 * hidden)


def korthikanti_attention_share(
    seq_len: int, hidden: int, heads: int, *, dropout: bool = True, bytes_per_element: int = 2
) -> float:
    """The s² terms' share of Korthikanti et al.'s per-layer count: 5as/h / (34 + 5as/h)
    with their defaults."""
    _flag(dropout=dropout)
    parts = memory.activation_breakdown(
        seq_len, 1, hidden, heads, "none", dropout=dropout, bytes_per_element=bytes_per_element
    )
    return parts["attention"] / parts["total"]


def measured_attention_share(
    seq_len: int, hidden: int, heads: int, *, batch: int = 1, dropout: float = 0.0
) -> float:
    """Attention's measured share of one layer's saved bytes, spelled-out attention, fp32.

    Measured with ``saved_tensors_hooks`` on fake tensors (no memory is allocated, so real
    sizes work): the bytes the attention core keeps (plan ``"none"`` minus ``"selective"``)
    over what the whole block keeps (a 2-layer model minus a 1-layer one).
    """
    from torch._subclasses.fake_tensor import FakeTensorMode

    seq_len, hidden, heads, batch = _count(seq_len=seq_len, hidden=hidden, heads=heads, batch=batch)
    saved = {}
    with FakeTensorMode():
        for layers, plan in ((1, "none"), (2, "none"), (1, "selective")):
            cfg = models.GPTConfig(
                vocab_size=64,
                seq_len=seq_len,
                d_model=hidden,
                n_layers=layers,
                n_heads=heads,
                attention="math",
                dropout=dropout,
            )
            model = apply(models.TinyGPT(cfg), plan)
            idx = torch.zeros(batch, seq_len, dtype=torch.long)
            saved[layers, plan] = memory.saved_tensor_bytes(lambda m=model, x=idx: m(x, x)).activations
    block = saved[2, "none"] - saved[1, "none"]
    return (saved[1, "none"] - saved[1, "selective"]) / block


@contextlib.contextmanager
def applied(model: nn.Module, plan: str, **kwargs: Any):
    """``with checkpointing.applied(model, "every"): ...`` — the plan for the block only."""
    before = current_plan(model)
    apply(model, plan, **kwargs)
    try:
        yield model
    finally:
        apply(model, before)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m helpers.checkpointing``: every plan of the course model, measured side by side."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m helpers.checkpointing", description=main.__doc__)
    parser.add_argument("--config", default="tiny", help="course config (default: tiny)")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--attention", default="math", help="sdpa | math")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=None)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--iters", type=int, default=10)
    args = parser.parse_args(argv)
    try:
        cfg = models.get_config(args.config, n_layers=args.layers, attention=args.attention)
        rows = compare_plans(cfg, args.batch, args.seq, MENU, device=args.device, iters=args.iters)
    except (ValueError, TypeError, KeyError, RuntimeError) as exc:
        print(f"error: {exc}")
        return 2
    print(models.describe(cfg) + f", attention {cfg.attention}, batch {args.batch}")
    print(format_plans(rows))
    return 0

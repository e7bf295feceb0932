"""FSDP2 (``fully_shard``) on real ranks: a small MLP trained and profiled in every rank, the
bytes each rank holds read from its tensors, the collectives read from its trace, and a speed
comparison of settings with the bytes each setting holds beside it
(:mod:`helpers.distributed._fsdp_compare`, built from the pieces here).

The model is ``layers`` blocks of Linear(width, width) + ReLU, built after
``torch.manual_seed(seed)``. The data come from ``torch.Generator().manual_seed(seed + 1)``:
``x`` then ``y``, each ``randn(total_steps, world_size * batch, width)``; rank r trains on rows
``[r * batch, (r + 1) * batch)`` of each step, with the mean-squared error. FSDP averages the
gradients over the ranks, so the run follows one process training on the whole
``world_size * batch`` rows; the mean of the ranks' losses is that process's loss.

Bytes held are measured: the storage sizes of each rank's local shards (``to_local()``), each
storage counted once. FSDP2 pads parameter and gradient shards to ceil(rows / n) rows
(:mod:`helpers.distributed._shards`), so these can exceed the unpadded shard.
"""

from __future__ import annotations

import math
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._validate import count, flag, positive, unknown
from .._validate import flag as _flag
from ..i18n import text
from ._launch import pick_device, run_ranks
from ._shards import ledger_share, rank_state_bytes

WRAPS = ("block", "model")
SETTING_KEYS = ("wrap", "reshard_after_forward", "prefetch", "mixed_precision")
PROFILER = {"wait": 1, "warmup": 1}  # steps before the profiled ones: lazy init, then warm-up


def _setting(
    wrap: str = "block",
    reshard_after_forward: bool = True,
    prefetch: bool = False,
    mixed_precision: bool = False,
) -> dict[str, Any]:
    if wrap not in WRAPS:
        raise unknown("wrap", wrap, WRAPS)
    flag(reshard_after_forward=reshard_after_forward, prefetch=prefetch, mixed_precision=mixed_precision)
    if prefetch and wrap != "block":
        raise ValueError("prefetch=True needs wrap='block' (with one unit there is nothing to fetch ahead)")
    return dict(zip(SETTING_KEYS, (wrap, reshard_after_forward, prefetch, mixed_precision), strict=True))


# --------------------------------------------------------------------------- inside a rank


def _build(layers: int, width: int, seed: int, device: str, setting: dict[str, Any]) -> tuple[Any, Any, list]:
    """(model under fully_shard, AdamW, unsharded parameter shapes)."""
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    torch.manual_seed(seed)
    blocks = [torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU()) for _ in range(layers)]
    model = torch.nn.Sequential(*blocks).to(device)
    shapes = [list(p.shape) for p in model.parameters()]
    mp = MixedPrecisionPolicy()
    if setting["mixed_precision"]:
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    raf = setting["reshard_after_forward"]
    units = (
        [fully_shard(b, reshard_after_forward=raf, mp_policy=mp) for b in blocks]
        if setting["wrap"] == "block"
        else []
    )
    root = fully_shard(model, reshard_after_forward=raf, mp_policy=mp)
    if setting["prefetch"]:
        for i, unit in enumerate(units):
            unit.set_modules_to_forward_prefetch(units[i + 1 : i + 2])
            unit.set_modules_to_backward_prefetch(units[i - 1 : i] if i else [])
        if device == "cpu":
            # CPU "streams" are no-ops: an all-gather issued with async_op=False (FSDP2's default)
            # blocks the training thread even when prefetched; async lets gloo's thread run it
            # while the current block computes (a private switch of torch 2.13's FSDPModule)
            root._set_unshard_async_op(True)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3), shapes


def _storage(t: Any) -> tuple[int, int]:
    """(storage address, storage bytes) of a tensor's local data (a DTensor's local shard)."""
    local = t.to_local() if hasattr(t, "to_local") else t
    s = local.untyped_storage()
    return s.data_ptr(), s.nbytes()


def _held_bytes(model: Any, opt: Any) -> dict[str, int]:
    """Bytes of the distinct storages behind the local parameters, gradients and optimizer
    states (AdamW's scalar ``step`` tensors apart, as ``step_scalars``)."""
    seen: set[int] = set()
    out = dict.fromkeys(
        ("parameters", "gradients", "optimizer_state", "step_scalars", "parameters_unpadded"), 0
    )

    def add(kind: str, t: Any) -> None:
        ptr, nbytes = _storage(t)
        if nbytes and ptr not in seen:
            seen.add(ptr)
            out[kind] += nbytes

    for p in model.parameters():
        add("parameters", p)
        local = p.to_local() if hasattr(p, "to_local") else p
        out["parameters_unpadded"] += local.numel() * local.element_size()
        if p.grad is not None:
            add("gradients", p.grad)
    for state in opt.state.values():
        for key, value in state.items():
            add("step_scalars" if key == "step" else "optimizer_state", value)
    out["total"] = out["parameters"] + out["gradients"] + out["optimizer_state"]
    return out


def _unsharded_bytes(model: Any) -> int:
    """Bytes of the full (all-gathered) parameters still registered on the model: after the
    forward, what ``reshard_after_forward=False`` keeps until the backward."""
    seen: dict[int, int] = {}
    for p in model.parameters():
        if not hasattr(p, "to_local"):  # a plain tensor: the unsharded parameter
            ptr, nbytes = _storage(p)
            seen[ptr] = nbytes
    return sum(seen.values())


def _data(
    total_steps: int, world_size: int, batch: int, width: int, seed: int, rank: int, device: str
) -> tuple:
    import torch

    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(total_steps, world_size * batch, width, generator=g)
    y = torch.randn(total_steps, world_size * batch, width, generator=g)
    rows = slice(rank * batch, (rank + 1) * batch)
    return x[:, rows].to(device), y[:, rows].to(device)


def _train_step(model: Any, opt: Any, x: Any, y: Any) -> Any:
    import torch

    loss = torch.nn.functional.mse_loss(model(x).float(), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


def _record_rank(
    rank: int,
    world_size: int,
    device: str,
    layers: int,
    width: int,
    batch: int,
    steps: int,
    setting: dict[str, Any],
    out: str,
    slow_rank: int = -1,
    slow_s: float = 0.0,
    seed: int = 0,
) -> dict[str, Any]:
    """Rank target of :func:`record_fsdp`: the first step (not profiled) is measured for bytes
    held; then ``steps`` profiled steps after one warm-up; the chrome trace is written to
    ``out/rank<R>.json.gz``."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    model, opt, shapes = _build(layers, width, seed, device, setting)
    total = PROFILER["wait"] + PROFILER["warmup"] + steps
    x, y = _data(total, world_size, batch, width, seed, rank, device)
    losses: list[float] = []
    held: dict[str, int] = {}
    unsharded = 0
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(
        activities=activities, record_shapes=True, schedule=schedule(**PROFILER, active=steps)
    ) as prof:
        for i in range(total):
            if rank == slow_rank:
                time.sleep(slow_s)  # the straggler: Python-side work before the forward
            loss = torch.nn.functional.mse_loss(model(x[i]).float(), y[i])
            if i == 0:  # measured in the step the profiler skips (the reads are no trace data)
                unsharded = _unsharded_bytes(model)
            loss.backward()
            opt.step()
            if i == 0:
                held = _held_bytes(model, opt)
            opt.zero_grad(set_to_none=True)
            losses.append(float(loss.detach()))
            prof.step()
    path = Path(out, f"rank{rank}.json.gz")
    prof.export_chrome_trace(str(path))
    held["unsharded_after_forward"] = unsharded
    return {"held": held, "shapes": shapes, "losses": losses, "trace": str(path)}


# --------------------------------------------------------------------------- the caller


@dataclass
class FsdpRun:
    """One :func:`record_fsdp` run: its settings, one chrome trace per rank, the bytes each
    rank held after one step (measured; keys as :func:`~helpers.distributed._shards.rank_state_bytes`
    plus ``unsharded_after_forward``, ``step_scalars`` and ``parameters_unpadded``), the
    unsharded model's sizes, the collectives seen in each rank's trace per profiled step, and
    every rank's loss of every step. With ``mixed_precision`` FSDP2 still keeps fp32 shards,
    gradients and states (bf16 only in the gathered copies), so the fp32 ledger stays the
    comparison."""

    settings: dict[str, Any]
    traces: list[Path]
    held: list[dict[str, int]]
    full: dict[str, Any]
    collectives: list[list[dict[str, Any]]]
    losses: list[list[float]]

    def expected(self, padded: bool = False) -> list[dict[str, int]]:
        """Per rank, the bytes :func:`~helpers.distributed._shards.rank_state_bytes` computes."""
        _flag(padded=padded)
        n = self.settings["world_size"]
        return [rank_state_bytes(self.full["shapes"], n, r, padded=padded) for r in range(n)]

    def summary(self) -> str:
        """A table: bytes each rank held after one step (measured) beside chapter 5's ledger
        divided by n and the shard arithmetic (exact rows, and padded as FSDP2 stores them);
        the collectives of the first profiled step; the mean loss of every step."""
        s, n = self.settings, self.settings["world_size"]
        unit, div = ("KiB", 1024) if self.full["parameter_bytes"] >= 64 * 1024 else ("B", 1)
        num = lambda b: f"{b / div:10.1f}" if div > 1 else f"{b:10d}"  # noqa: E731
        ledger = ledger_share(self.full["n_params"], n)
        exact, padded = self.expected(), self.expected(padded=True)
        lines = [
            f"FSDP2 on {n} ranks ({s['device']}): {s['layers']} blocks of Linear({s['width']}, "
            f"{s['width']}) + ReLU, batch {s['batch']} per rank, wrap={s['wrap']}, "
            f"reshard_after_forward={s['reshard_after_forward']}, prefetch={s['prefetch']}, "
            f"{'bf16 compute' if s['mixed_precision'] else 'fp32'}",
            f"{self.full['n_params']:,} parameters, {num(self.full['parameter_bytes']).strip()} {unit} "
            "unsharded (fp32)",
            f"{unit} held after one step (measured storages) vs ledger / n and the shard arithmetic:",
            f"{'':>24}"
            + "".join(f"{'rank ' + str(r):>10}" for r in range(n))
            + f"{'ledger/n':>10}"
            + "".join(f"{'exact r' + str(r):>10}{'padded r' + str(r):>10}" for r in range(n)),
        ]
        for key in ("parameters", "gradients", "optimizer_state", "total"):
            row = "".join(num(h[key]) for h in self.held) + num(ledger[key])
            row += "".join(num(e[key]) + num(p[key]) for e, p in zip(exact, padded, strict=True))
            shown = key if "_" in key else text(key)  # a row name is read; optimizer_state is a key
            lines.append(f"{shown:>24}" + row)
        after = "".join(num(h["unsharded_after_forward"]) for h in self.held)
        lines.append(f"{'unsharded after forward':>24}" + after)
        for r, per_step in enumerate(self.collectives):
            parts = []
            for k, v in per_step[0]["c10d"].items() if per_step else []:
                size = (
                    "sizes not recorded"
                    if v["output_bytes"] is None
                    else f"{v['output_bytes'] / div:.1f} {unit} out"
                )
                parts.append(f"{k}: {v['count']} calls, {size}")
            lines.append(f"rank {r}, first profiled step: " + ("; ".join(parts) or "no collectives"))
        mean = [statistics.fmean(v) for v in zip(*self.losses, strict=True)]
        lines.append("mean loss of the ranks per step: " + " ".join(f"{v:.5f}" for v in mean))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


def _common(
    world_size: int, layers: int, width: int, batch: int, device: str
) -> tuple[int, int, int, int, str]:
    world_size, layers, width, batch = count(world_size=world_size, layers=layers, width=width, batch=batch)
    dev, most, _ = pick_device(device)
    if world_size > most and dev == "cuda":
        raise ValueError(f"world_size={world_size} needs {world_size} GPUs; {most} visible: use device='cpu'")
    return world_size, layers, width, batch, dev


def record_fsdp(
    out_dir: str | Path | None = None,
    world_size: int = 2,
    layers: int = 4,
    width: int = 256,
    batch: int = 32,
    steps: int = 3,
    wrap: str = "block",
    reshard_after_forward: bool = True,
    prefetch: bool = False,
    mixed_precision: bool = False,
    device: str = "cpu",
    timeout_s: float = 180.0,
    slow_rank: int | None = None,
    slow_s: float = 0.05,
    seed: int = 0,
) -> FsdpRun:
    """Train the MLP under ``fully_shard`` on ``world_size`` real ranks and profile ``steps``
    steps (after one skipped and one warm-up step), one chrome trace per rank in ``out_dir``
    (a new temp folder if None) as ``rank<R>.json.gz``.

    ``wrap="block"`` shards each block and then the root; ``"model"`` only the root.
    ``prefetch`` sets explicit forward / backward prefetching to the next / previous block.
    ``mixed_precision`` computes in bf16 and reduces gradients in fp32. ``slow_rank`` sleeps
    ``slow_s`` seconds before every forward (a straggler). ``device="auto"`` takes NCCL when
    two GPUs are visible, else gloo on CPU."""
    _flag(reshard_after_forward=reshard_after_forward, prefetch=prefetch, mixed_precision=mixed_precision)
    from ._fsdp_trace import collectives_by_step

    setting = _setting(wrap, reshard_after_forward, prefetch, mixed_precision)
    world_size, layers, width, batch, dev = _common(world_size, layers, width, batch, device)
    (steps,) = count(steps=steps)
    if slow_rank is not None and not 0 <= slow_rank < world_size:
        raise ValueError(f"slow_rank must be a rank in 0..{world_size - 1}, got {slow_rank}")
    positive(slow_s=slow_s)
    out = Path(out_dir) if out_dir is not None else Path(tempfile.mkdtemp(prefix="trainperf_fsdp_"))
    out.mkdir(parents=True, exist_ok=True)
    results = run_ranks(
        "helpers.distributed._fsdp:_record_rank",
        world_size,
        dev,
        timeout_s,
        layers=layers,
        width=width,
        batch=batch,
        steps=steps,
        setting=setting,
        out=str(out.resolve()),
        slow_rank=-1 if slow_rank is None else slow_rank,
        slow_s=slow_s,
        seed=seed,
    )
    shapes = results[0]["shapes"]
    n_params = sum(math.prod(s) for s in shapes)
    traces = [Path(r["trace"]) for r in results]
    settings = dict(
        setting,
        world_size=world_size,
        layers=layers,
        width=width,
        batch=batch,
        steps=steps,
        device=dev,
        slow_rank=slow_rank,
        slow_s=slow_s if slow_rank is not None else 0.0,
        seed=seed,
    )
    return FsdpRun(
        settings=settings,
        traces=traces,
        held=[r["held"] for r in results],
        full={"shapes": shapes, "n_params": n_params, "parameter_bytes": 4 * n_params},
        collectives=[collectives_by_step(t) for t in traces],
        losses=[r["losses"] for r in results],
    )


def fsdp_bytes_per_step(
    param_bytes: float, world_size: int, reshard_after_forward: bool = True, grad_bytes: float | None = None
) -> dict[str, float]:
    """Bytes each rank sends per training step under FSDP on a ring, by
    ``_ring.ring_bytes`` ((n - 1) / n of the full size S for an all-gather or a
    reduce-scatter): the forward all-gather of the parameters (S = ``param_bytes``, in the
    dtype they are gathered in), the backward all-gather again when they were resharded
    after the forward, and the reduce-scatter of the gradients (S = ``grad_bytes``, default
    ``param_bytes``; in the reduce dtype). Keys: ``forward_all_gather``,
    ``backward_all_gather``, ``reduce_scatter``, ``total``."""
    _flag(reshard_after_forward=reshard_after_forward)
    from ._ring import ring_bytes  # written in parallel by another helper: imported when used

    positive(param_bytes=param_bytes)
    (world_size,) = count(world_size=world_size)
    flag(reshard_after_forward=reshard_after_forward)
    if grad_bytes is not None:
        positive(grad_bytes=grad_bytes)
    gather = float(ring_bytes("all_gather", param_bytes, world_size))
    out = {
        "forward_all_gather": gather,
        "backward_all_gather": gather if reshard_after_forward else 0.0,
        "reduce_scatter": float(
            ring_bytes("reduce_scatter", param_bytes if grad_bytes is None else grad_bytes, world_size)
        ),
    }
    out["total"] = sum(out.values())
    return out

"""The code that runs inside DDP's ranks for :mod:`helpers.distributed._ddp_knobs`: chapter 4's
model (:func:`_mlp`), DDP's own bucket sizes (:func:`_ddp_buckets`), and the rank targets that
time one DDP model per setting (:func:`_settings_rank`) and count the storages behind the
gradients and the buckets (:func:`_buckets_rank`). Started by name through :func:`run_ranks`.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from ._compare import time_interleaved


def _mlp(layers: int, width: int, dev: Any) -> Any:
    """Chapter 4's model (record_ddp's), seeded so every copy starts from the same weights."""
    import torch

    torch.manual_seed(0)
    blocks = [m for _ in range(layers) for m in (torch.nn.Linear(width, width), torch.nn.ReLU())]
    return torch.nn.Sequential(*blocks).to(dev)


def _ddp_buckets(model: Any) -> list[int]:
    """Bucket sizes in bytes as DDP's own logging data reports them (after its rebuild)."""
    data = model._get_ddp_logging_data()
    sizes = data.get("rebuilt_bucket_sizes") or data.get("bucket_sizes") or ""
    return [int(s) for s in str(sizes).split(",") if s.strip()]


def _settings_rank(
    rank: int, world_size: int, device: str, settings: dict[str, dict[str, Any]], rounds: int,
    max_seconds: float, layers: int, width: int, batch: int,
) -> dict[str, Any]:  # fmt: skip
    """Rank target: one DDP model per setting, timed in turns; DDP's buckets; a plain backward."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    dev = torch.device(f"cuda:{torch.cuda.current_device()}" if device == "cuda" else "cpu")
    models = {name: DDP(_mlp(layers, width, dev), **kw) for name, kw in settings.items()}
    opts = {name: torch.optim.SGD(m.parameters(), lr=1e-3) for name, m in models.items()}
    torch.manual_seed(1 + rank)  # each rank its own batch, the same one for every setting
    x, y = torch.randn(batch, width, device=dev), torch.randn(batch, width, device=dev)

    def step(name: str) -> None:
        loss = torch.nn.functional.mse_loss(models[name](x), y)
        opts[name].zero_grad(set_to_none=True)
        loss.backward()
        opts[name].step()

    for _ in range(3):  # DDP rebuilds its buckets after the first iteration, static_graph later
        for name in settings:
            step(name)
    plain = _mlp(layers, width, dev)  # the backward without DDP: the window that hides buckets
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    backward_s = []
    for _ in range(6):
        loss = torch.nn.functional.mse_loss(plain(x), y)
        sync()
        began = time.perf_counter()
        loss.backward()
        sync()
        backward_s.append(time.perf_counter() - began)
    steps = {name: (lambda n=name: step(n)) for name in settings}
    samples = time_interleaved(steps, rounds, 1, max_seconds, device)
    return {
        "samples": samples,
        "buckets": {name: _ddp_buckets(m) for name, m in models.items()},
        "grad_bytes": sum(p.numel() * p.element_size() for p in plain.parameters()),
        "backward_s": statistics.median(backward_s[1:]),
    }


def _buckets_rank(
    rank: int, world_size: int, device: str, layers: int, width: int, batch: int, bucket_mb: float | None
) -> dict[str, Any]:
    """Rank target: DDP's bucket sizes, and the distinct storages behind the gradients and the
    buckets, with ``gradient_as_bucket_view`` off and on."""
    import torch
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    dev = torch.device(f"cuda:{torch.cuda.current_device()}" if device == "cuda" else "cpu")
    out: dict[str, Any] = {}
    for view in (False, True):
        model = DDP(_mlp(layers, width, dev), bucket_cap_mb=bucket_mb, gradient_as_bucket_view=view)
        buckets: dict[int, int] = {}

        def hook(state, bucket, seen=buckets):  # no annotations: DDP rejects any but its own
            # the default all-reduce; the hook is here only to see each bucket's buffer
            storage = bucket.buffer().untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
            return allreduce_hook(state, bucket)

        model.register_comm_hook(None, hook)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        x, y = torch.randn(batch, width, device=dev), torch.randn(batch, width, device=dev)
        for _ in range(4):  # past DDP's bucket rebuild; the last iteration's buckets count
            buckets.clear()
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        grads = {}
        for g in (p.grad for p in model.parameters() if p.grad is not None):
            grads[g.untyped_storage().data_ptr()] = g.untyped_storage().nbytes()
        out[str(view)] = {
            "ddp_buckets": _ddp_buckets(model),
            "grad_storages": len(grads),
            "grad_bytes": sum(grads.values()),
            "bucket_storages": len(buckets),
            "bucket_bytes": sum(buckets.values()),
            "shared": len(grads.keys() & buckets.keys()),
            "distinct_bytes": sum({**grads, **buckets}.values()),
        }
    return out

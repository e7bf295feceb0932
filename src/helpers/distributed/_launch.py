"""Start real ranks for chapter 10: one process per rank, ``torch.distributed`` with gloo on CPU
(pinned to the loopback interface) or NCCL with one GPU per rank, a function run in each, its
result (plain JSON data) sent back to the caller.

The process handling is chapter 4's (:mod:`helpers.timeline._ddp`): a free port on 127.0.0.1
tried again when another process takes it, ranks forked on Linux CPU runs (no second torch
import) or started as ``python -m helpers.distributed._launch``, every rank stopped when one
fails or the time runs out. What is new here is only the target: any module-level function
``fn(rank, world_size, device, **opts) -> dict``.

Ranks talk over 127.0.0.1 only: ``MASTER_ADDR=127.0.0.1`` for the rendezvous and
``GLOO_SOCKET_IFNAME=lo`` for gloo's own connections (otherwise gloo binds the address the
host name resolves to, which may be a network interface).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from .._validate import count
from .._validate import flag as _flag
from ..timeline._ddp import _with_free_port, run_forked, run_subprocesses, warm_for_fork

#: Environment of every CPU rank: rendezvous and gloo's sockets on the loopback interface.
LOOPBACK_ENV = {"MASTER_ADDR": "127.0.0.1", "GLOO_SOCKET_IFNAME": "lo", "TP_SOCKET_IFNAME": "lo"}


class RankError(RuntimeError):
    """A rank failed, or the run took longer than its time limit: one line per rank."""


def pick_device(device: str = "auto") -> tuple[str, int, str]:
    """(device, most ranks, one line saying why): ``"cuda"`` with NCCL when at least two GPUs
    are visible (and ``device`` is not ``"cpu"``), else ``"cpu"`` with gloo over 127.0.0.1 —
    with one GPU too, since NCCL needs one GPU per rank."""
    import torch

    if device not in ("auto", "cpu", "cuda"):
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda', got {device!r}")
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if device != "cpu" and gpus >= 2:
        return "cuda", gpus, f"NCCL on {gpus} GPUs, one rank per GPU, timed with CUDA events"
    why = "no GPU" if gpus == 0 else "one GPU only: NCCL needs one GPU per rank"
    if device == "cpu" and gpus:
        why = "the CPU was asked for"
    return "cpu", os.cpu_count() or 1, f"gloo on CPU over 127.0.0.1 ({why}), timed with perf_counter"


def run_ranks(
    target: str,
    world_size: int = 2,
    device: str = "cpu",
    timeout_s: float = 120.0,
    fork: bool | None = None,
    **opts: Any,
) -> list[dict[str, Any]]:
    """Run ``target`` (``"package.module:function"``) on ``world_size`` ranks and return what
    each rank's call returned, in rank order. The process group is made before the call and
    destroyed after it; ``opts`` (plain JSON data) are passed on as keyword arguments."""
    if fork is not None:
        _flag(fork=fork)
    (world_size,) = count(world_size=world_size)
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    module, _, function = target.partition(":")
    if not module or not function:
        raise ValueError(f"target must be 'package.module:function', got {target!r}")
    json.dumps(opts)  # plain data only: it travels to subprocess ranks on the command line
    out = Path(tempfile.mkdtemp(prefix="trainperf_ranks_"))
    if fork is None:
        fork = device == "cpu" and sys.platform.startswith("linux")
    if fork:
        warm_for_fork()  # imported once here, not again in every forked rank
    job = {"target": target, "world_size": world_size, "device": device, "out": str(out), "opts": opts}
    runner = _run_forked if fork else _run_subprocesses
    try:
        errors = _with_free_port(lambda port: runner({**job, "port": port}, timeout_s))
        if errors:
            raise RankError("distributed run failed — " + "; ".join(errors))
        return [json.loads((out / f"rank{r}.result.json").read_text()) for r in range(world_size)]
    finally:
        shutil.rmtree(out, ignore_errors=True)


def _rank_main(rank: int, job: dict[str, Any]) -> None:
    """One rank: the process group, the target, its result written as JSON, the group torn down."""
    import torch
    import torch.distributed as dist

    cuda = job["device"] == "cuda"
    os.environ.update(LOOPBACK_ENV, MASTER_PORT=str(job["port"]))
    if not cuda:
        torch.set_num_threads(1)
    else:
        torch.cuda.set_device(rank % max(1, torch.cuda.device_count()))
    module, _, function = job["target"].partition(":")
    fn = getattr(importlib.import_module(module), function)
    # the rendezvous through a file, not a TCP store: the store's server would listen on every
    # interface of the machine; gloo's own sockets are on ``lo`` (LOOPBACK_ENV)
    store = dist.FileStore(str(Path(job["out"], f"store-{job['port']}")), job["world_size"])
    dist.init_process_group("nccl" if cuda else "gloo", store=store, rank=rank, world_size=job["world_size"])
    try:
        result = fn(rank, job["world_size"], job["device"], **job["opts"])
        dist.barrier()
    finally:
        dist.destroy_process_group()
    Path(job["out"], f"rank{rank}.result.json").write_text(json.dumps(result))


def _run_forked(job: dict[str, Any], timeout_s: float) -> list[str]:
    return run_forked(lambda rank: _rank_main(rank, job), job["world_size"], job["out"], timeout_s)


def _run_subprocesses(job: dict[str, Any], timeout_s: float) -> list[str]:
    def argv(rank: int) -> list[str]:
        return [sys.executable, "-m", "helpers.distributed._launch", f"--rank={rank}", json.dumps(job)]

    return run_subprocesses(argv, job["world_size"], timeout_s)


def main(argv: list[str] | None = None) -> None:
    """One rank started as a subprocess (CUDA runs, and platforms without fork)."""
    p = argparse.ArgumentParser(description="one rank of helpers.distributed.run_ranks")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("job", help="the run as JSON")
    args = p.parse_args(argv)
    _rank_main(args.rank, json.loads(args.job))


if __name__ == "__main__":
    main()

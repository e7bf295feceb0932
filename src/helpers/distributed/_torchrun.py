"""The same FSDP recording under ``torchrun``, the way practitioners start ranks.

``python -m helpers.distributed fsdp --out DIR`` started by ``torchrun`` is one rank: it joins
the process group torchrun describes in its environment (``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT``) and runs the rank function of
:func:`helpers.distributed.record_fsdp`, writing ``DIR/rank<R>.json.gz`` and ``DIR/rank<R>.json``.
:func:`torchrun_fsdp` builds that command line (rendezvous on 127.0.0.1, gloo pinned to the
loopback interface on CPU), runs it with a time limit, and reads what the ranks wrote.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from .._validate import count
from ._launch import LOOPBACK_ENV, RankError

FSDP_DEFAULTS = {"layers": 4, "width": 256, "batch": 32, "steps": 3}


def torchrun_command(out_dir: str | Path, nproc: int = 2, **options: Any) -> list[str]:
    """The command line that records FSDP with ``nproc`` ranks under torchrun (a list, for
    :mod:`subprocess`; join it with spaces to type it in a shell). The ``torchrun`` script
    beside this Python or on the PATH; where there is none (torch installed without its
    scripts), the same launcher as ``python -m torch.distributed.run``."""
    (nproc,) = count(nproc=nproc)
    found = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or shutil.which("torchrun")
    args = [
        *([found] if found else [sys.executable, "-m", "torch.distributed.run"]),
        f"--nproc-per-node={nproc}",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=127.0.0.1:0",  # port 0: torchrun picks a free one on the loopback address
        "-m",
        "helpers.distributed",
        "fsdp",
        f"--out={out_dir}",
    ]
    for key, value in options.items():
        if key not in FSDP_DEFAULTS:
            raise ValueError(f"unknown option {key!r}; choose from {', '.join(FSDP_DEFAULTS)}")
        (value,) = count(**{key: value})
        args.append(f"--{key}={value}")
    return args


def torchrun_fsdp(
    out_dir: str | Path | None = None, nproc: int = 2, timeout_s: float = 120.0, **options: Any
) -> list[dict[str, Any]]:
    """Run :func:`torchrun_command` and return each rank's result (bytes held, losses, trace
    path), in rank order. Every process of the run is stopped when it fails or takes longer
    than ``timeout_s``."""
    out = Path(out_dir) if out_dir is not None else Path(tempfile.mkdtemp(prefix="trainperf_torchrun_"))
    out.mkdir(parents=True, exist_ok=True)
    command = torchrun_command(out, nproc, **options)
    env = {**os.environ, **LOOPBACK_ENV, "OMP_NUM_THREADS": "1"}
    src = str(Path(__file__).resolve().parents[2])  # a source checkout works uninstalled too
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as log:
        # a session of its own, so that a time-out stops torchrun and every rank it started
        proc = subprocess.Popen(
            command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            code = proc.wait(timeout=timeout_s)
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        if code != 0:
            log.seek(0)
            lines = [ln for ln in log.read().splitlines() if "Error" in ln or "error" in ln]
            raise RankError(f"torchrun exited {code}: {lines[-1].strip() if lines else 'no message'}")
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(nproc)]


def run_as_torchrun_rank(out: str, **options: int) -> dict[str, Any]:
    """One rank under torchrun: the process group from torchrun's environment, FSDP recorded."""
    import torch
    import torch.distributed as dist

    from ._fsdp import _record_rank, _setting

    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    cuda = torch.cuda.is_available() and torch.cuda.device_count() >= world_size
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    else:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        torch.set_num_threads(1)
    dist.init_process_group("nccl" if cuda else "gloo")
    try:
        opts = {**FSDP_DEFAULTS, **options}
        result = _record_rank(
            rank,
            world_size,
            "cuda" if cuda else "cpu",
            setting=_setting("block", True, False, False),
            out=out,
            **opts,
        )
        dist.barrier()
    finally:
        dist.destroy_process_group()
    Path(out, f"rank{rank}.json").write_text(json.dumps(result))
    return result

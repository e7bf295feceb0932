"""Record a real data-parallel training run under ``torch.profiler``: one process per rank,
``torch.distributed`` with gloo on CPU (NCCL on CUDA), one chrome trace per rank.

On Linux CPU runs the ranks are forked from the calling process, so they do not import torch
again (seconds per process on a small machine); elsewhere, and for CUDA (which must not be
forked once initialized), each rank is a fresh ``python -m helpers.timeline._ddp``. Rendezvous on
127.0.0.1 with a free port; when another process takes that port before rank 0 listens on it,
the run is tried again on a new one (:func:`_with_free_port`).
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._validate import count, positive
from .._validate import flag as _flag

PORT_TRIES = 3  # runs at most when the rendezvous port is taken each time


def _free_port() -> int:
    """A port that was free a moment ago (bound, then closed): another process can take it
    before rank 0 listens on it, which :func:`_with_free_port` handles."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_taken(errors: list[str]) -> bool:
    """Whether a run failed because its rendezvous port was in use: torch's DistNetworkError
    says ``EADDRINUSE`` / ``address already in use`` when rank 0 cannot listen on it."""
    return any("EADDRINUSE" in e or "address already in use" in e.lower() for e in errors)


def _with_free_port(
    run: Callable[[int], list[str]], tries: int = PORT_TRIES, pick: Callable[[], int] | None = None
) -> list[str]:
    """``run(port)`` on a port from ``pick()`` (:func:`_free_port`); while it fails only because
    that port was taken meanwhile, again on a new port, ``tries`` runs at most. Returns the
    errors of the last run (none when it succeeded)."""
    for _ in range(tries):
        errors = run((pick or _free_port)())
        if not errors or not _port_taken(errors):
            return errors
    return [*errors, f"the rendezvous port was taken by another process on each of {tries} tries"]


FAILURE_GRACE_S = 3.0  # after one rank fails, how long the others may take to end on their own


def _wait_ranks(exit_codes: Callable[[], list[int | None]], timeout_s: float, poll_s: float = 0.05) -> bool:
    """Wait until every rank has ended, or one has failed (the others would wait for it in a
    collective until their own timeout), or ``timeout_s`` passed; ``exit_codes()`` gives None
    for a rank still running. True when the time ran out first."""
    deadline = time.monotonic() + timeout_s
    grace_end = None
    while True:
        codes = exit_codes()
        if all(c is not None for c in codes):
            return False
        if grace_end is None and any(c not in (None, 0) for c in codes):
            # a rank failed: the others get a moment to end and leave their own reason (the
            # rank that raised first may still be writing it while its peer's collective fails)
            grace_end = min(deadline, time.monotonic() + FAILURE_GRACE_S)
        if grace_end is not None and time.monotonic() >= grace_end:
            return False
        if time.monotonic() >= deadline:
            return True
        time.sleep(poll_s)


def record_ddp(
    out_dir: str | Path | None = None,
    world_size: int = 2,
    steps: int = 3,
    slow_rank: int | None = None,
    slow_s: float = 0.03,
    layers: int = 8,
    width: int = 256,
    batch: int = 64,
    bucket_mb: float | None = 0.25,
    device: str = "cpu",
    timeout_s: float = 120.0,
    fork: bool | None = None,
    *,
    gradient_as_bucket_view: bool = False,
    static_graph: bool = False,
    accumulate: int = 1,
    no_sync: bool = True,
    record_shapes: bool = False,
) -> dict[str, list[Path]]:
    """Train a ``layers``-deep MLP with DistributedDataParallel on ``world_size`` processes and
    profile ``steps`` steady-state steps (after 1 skipped and 1 warm-up step) — twice in the
    same processes: ``"balanced"``, then, if ``slow_rank`` is given, ``"one_slow"``, where that
    rank sleeps ``slow_s`` seconds in Python before every forward (a straggler).

    Returns ``{phase: [rank0 trace, rank1 trace, ...]}``: files ``<phase>/rank<R>.json.gz`` in
    ``out_dir`` (a new temp folder if None). ``device="cuda"`` uses NCCL, one GPU per rank.
    ``fork`` forces (True) or avoids (False) forking the ranks; None picks.

    DDP's knobs (chapter 10): ``bucket_mb`` is DDP's ``bucket_cap_mb`` (MiB; None: DDP's
    default, 25 MiB with a 1 MiB first bucket); ``gradient_as_bucket_view`` and
    ``static_graph`` go to DDP as they are. ``accumulate`` micro-batches of ``batch`` rows make
    one optimizer step (one profiled step); with ``no_sync`` the first ``accumulate - 1``
    forward and backward passes run under ``model.no_sync()``, so only the last one
    all-reduces (``no_sync=False``: every backward all-reduces). ``record_shapes`` records
    operator input shapes, so a collective's message size can be read from the trace.
    """
    if fork is not None:
        _flag(fork=fork)
    _flag(
        gradient_as_bucket_view=gradient_as_bucket_view,
        static_graph=static_graph,
        no_sync=no_sync,
        record_shapes=record_shapes,
    )
    world_size, steps, layers, width, batch, accumulate = count(
        world_size=world_size, steps=steps, layers=layers, width=width, batch=batch, accumulate=accumulate
    )
    if bucket_mb is not None:
        positive(bucket_mb=bucket_mb)
    if static_graph and no_sync and accumulate > 1:
        raise ValueError(
            "static_graph=True with no_sync (accumulate > 1) fails inside DDP (an INTERNAL ASSERT, "
            "pytorch/pytorch#143580); use no_sync=False or static_graph=False"
        )
    if slow_rank is not None and not 0 <= slow_rank < world_size:
        raise ValueError(f"slow_rank must be a rank in 0..{world_size - 1}, got {slow_rank}")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    out = Path(out_dir) if out_dir is not None else Path(tempfile.mkdtemp(prefix="trainperf_ddp_"))
    out.mkdir(parents=True, exist_ok=True)
    opts = dict(
        world_size=world_size,
        steps=steps,
        slow_rank=-1 if slow_rank is None else slow_rank,
        slow_s=slow_s,
        layers=layers,
        width=width,
        batch=batch,
        bucket_mb=bucket_mb,
        device=device,
        out=str(out),
        gradient_as_bucket_view=gradient_as_bucket_view,
        static_graph=static_graph,
        accumulate=accumulate,
        no_sync=no_sync,
        record_shapes=record_shapes,
    )
    if fork is None:
        fork = device == "cpu" and sys.platform.startswith("linux")
    if fork:
        warm_for_fork()
    runner = _run_forked if fork else _run_subprocesses
    errors = _with_free_port(lambda port: runner({**opts, "port": port}, timeout_s))
    for store in out.glob(".store-*"):  # the rendezvous files of this run and of failed tries
        store.unlink(missing_ok=True)
    if errors:
        raise RuntimeError("distributed run failed — " + "; ".join(errors))
    phases = ["balanced"] + ([] if slow_rank is None else ["one_slow"])
    return {ph: [out / ph / f"rank{r}.json.gz" for r in range(world_size)] for ph in phases}


def warm_for_fork() -> None:
    """Import in the parent what every forked rank would otherwise import on its own: torch,
    and torch._dynamo, which DDP's constructor imports (1.6 s per process on a 2-core machine)."""
    import torch._dynamo  # noqa: F401


def _run_forked(opts: dict[str, Any], timeout_s: float) -> list[str]:
    return run_forked(lambda rank: _train(rank, **opts), opts["world_size"], opts["out"], timeout_s)


def _run_subprocesses(opts: dict[str, Any], timeout_s: float) -> list[str]:
    args = [f"--{k.replace('_', '-')}={v}" for k, v in opts.items()]
    module = "helpers.timeline._ddp"
    return run_subprocesses(
        lambda r: [sys.executable, "-m", module, f"--rank={r}", *args], opts["world_size"], timeout_s
    )


def run_forked(body: Callable[[int], None], world_size: int, out: str, timeout_s: float) -> list[str]:
    """``body(rank)`` in one forked process per rank (Linux, CPU). Returns one line per rank that
    failed (its reason, from ``out/rank<R>.error``) or ran past ``timeout_s``; every rank still
    running at the end, or when the caller is interrupted, is killed. Shared with chapter 10's
    :func:`helpers.distributed.run_ranks`."""
    ctx = multiprocessing.get_context("fork")
    for r in range(world_size):  # an earlier try's notes
        Path(out, f"rank{r}.error").unlink(missing_ok=True)
    procs = [ctx.Process(target=_forked_rank, args=(body, r, out), daemon=True) for r in range(world_size)]
    for p in procs:
        p.start()
    timed_out = False
    try:
        timed_out = _wait_ranks(lambda: [p.exitcode for p in procs], timeout_s)
    finally:  # an interrupted cell (KeyboardInterrupt) must not leave ranks behind
        errors = []
        for r, p in enumerate(procs):
            if p.is_alive():  # past the time limit, or waiting for a rank that failed
                p.kill()
                p.join()
                if timed_out:
                    errors.append(f"rank {r} took longer than {timeout_s:.0f} s and was stopped")
            elif p.exitcode != 0:
                note = Path(out) / f"rank{r}.error"
                message = note.read_text().strip() if note.exists() else f"exit code {p.exitcode}"
                errors.append(f"rank {r}: {message}")
    return errors


def _forked_rank(body: Callable[[int], None], rank: int, out: str) -> None:
    # keep the profiler's and gloo's console chatter out of the parent's (notebook's) output
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    try:
        body(rank)
    except BaseException as err:  # noqa: BLE001 — report the reason to the parent, then fail
        first = (str(err).strip().splitlines() or [""])[0]
        Path(out, f"rank{rank}.error").write_text(f"{type(err).__name__}: {first}"[:500])
        os._exit(1)
    os._exit(0)  # skip the parent's atexit handlers and buffers


def run_subprocesses(argv: Callable[[int], list[str]], world_size: int, timeout_s: float) -> list[str]:
    """One ``python`` process per rank, started with ``argv(rank)`` (CUDA runs, and platforms
    without fork). Returns one line per rank that failed (the last line it wrote to stderr) and
    one if the run ran past ``timeout_s``; every rank still running at the end is killed."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    src = str(Path(__file__).resolve().parents[2])  # so a source checkout works uninstalled too
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    # stderr to files, not pipes: a rank that writes more than a pipe holds never blocks
    logs = [
        tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115 — closed below
        for _ in range(world_size)
    ]
    errors: list[str] = []
    procs: list[subprocess.Popen] = []
    try:
        for r, log in enumerate(logs):
            procs.append(subprocess.Popen(argv(r), env=env, stdout=subprocess.DEVNULL, stderr=log))
        timed_out = _wait_ranks(lambda: [p.poll() for p in procs], timeout_s)
        for r, (p, log) in enumerate(zip(procs, logs, strict=True)):
            if p.poll() not in (None, 0):
                log.seek(0)
                lines = [ln for ln in log.read().splitlines() if ln.strip() and not ln.startswith("USDT")]
                errors.append(f"rank {r} exited {p.returncode}: {lines[-1] if lines else 'no message'}")
        if timed_out:
            errors.append(f"the run took longer than {timeout_s:.0f} s and was stopped")
    finally:
        for p in procs:  # past the time limit, waiting for a rank that failed, or interrupted
            if p.poll() is None:
                p.kill()
                p.wait()
        for log in logs:
            log.close()
    return errors


def _train(
    rank: int,
    world_size: int,
    port: int,
    steps: int,
    slow_rank: int,
    slow_s: float,
    layers: int,
    width: int,
    batch: int,
    bucket_mb: float | None,
    device: str,
    out: str,
    gradient_as_bucket_view: bool = False,
    static_graph: bool = False,
    accumulate: int = 1,
    no_sync: bool = True,
    record_shapes: bool = False,
) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.profiler import ProfilerActivity, profile, schedule

    # ranks talk over 127.0.0.1 only: gloo's sockets on the loopback interface, and the
    # rendezvous through a file in the run's folder (a TCP store's server would listen on every
    # interface of the machine)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
    torch.set_num_threads(1)
    cuda = device == "cuda"
    store = dist.FileStore(str(Path(out, f".store-{port}")), world_size)
    dist.init_process_group("nccl" if cuda else "gloo", store=store, rank=rank, world_size=world_size)
    dev = torch.device(f"cuda:{rank % max(1, torch.cuda.device_count())}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(dev)
    torch.manual_seed(0)
    blocks = [m for _ in range(layers) for m in (torch.nn.Linear(width, width), torch.nn.ReLU())]
    model = DDP(
        torch.nn.Sequential(*blocks).to(dev),
        bucket_cap_mb=bucket_mb,
        gradient_as_bucket_view=gradient_as_bucket_view,
        static_graph=static_graph,
    )
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    n = batch * accumulate * (steps + 2)
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.randn(n, width), torch.randn(n, width)), batch_size=batch
    )
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    for phase in ["balanced"] + ([] if slow_rank < 0 else ["one_slow"]):
        slow = phase == "one_slow" and rank == slow_rank
        sched = schedule(wait=1, warmup=1, active=steps)
        with profile(activities=activities, schedule=sched, record_shapes=record_shapes) as prof:
            batches = iter(loader)
            for _ in range(steps + 2):
                for k in range(accumulate):
                    x, y = next(batches)
                    if slow:
                        time.sleep(slow_s)  # the straggler: Python-side work before the forward
                    x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
                    # DDP decides in the forward whether the coming backward all-reduces
                    skip = no_sync and k < accumulate - 1
                    with model.no_sync() if skip else contextlib.nullcontext():
                        loss = torch.nn.functional.mse_loss(model(x), y)
                        if k == 0:
                            opt.zero_grad(set_to_none=True)
                        (loss / accumulate if accumulate > 1 else loss).backward()
                opt.step()
                prof.step()
        Path(out, phase).mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(Path(out, phase, f"rank{rank}.json.gz")))
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="one rank of helpers.timeline.record_ddp")
    required: list[tuple[str, Callable[[str], Any]]] = [
        ("rank", int),
        ("world-size", int),
        ("port", int),
        ("steps", int),
        ("slow-rank", int),
        ("slow-s", float),
        ("layers", int),
        ("width", int),
        ("batch", int),
        ("bucket-mb", _mb),
        ("device", str),
        ("out", str),
    ]
    for name, typ in required:
        p.add_argument(f"--{name}", type=typ, required=True)
    # chapter 10's knobs: optional, so a command line without them trains as chapter 4 does
    optional: list[tuple[str, Callable[[str], Any], object]] = [
        ("gradient-as-bucket-view", _yes, False),
        ("static-graph", _yes, False),
        ("accumulate", int, 1),
        ("no-sync", _yes, True),
        ("record-shapes", _yes, False),
    ]
    for name, typ, default in optional:
        p.add_argument(f"--{name}", type=typ, default=default)
    _train(**vars(p.parse_args(argv)))


def _yes(text: str) -> bool:
    """A flag as :func:`_run_subprocesses` writes it (``str(True)``)."""
    if text not in ("True", "False"):
        raise argparse.ArgumentTypeError(f"expected True or False, got {text!r}")
    return text == "True"


def _mb(text: str) -> float | None:
    """A bucket size in MiB, or ``None`` (DDP's default) as ``str(None)`` writes it."""
    return None if text == "None" else float(text)


if __name__ == "__main__":
    main()

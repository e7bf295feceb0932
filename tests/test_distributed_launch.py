"""Chapter 10's launcher on real gloo ranks: ranks talk over 127.0.0.1 only (chapter 4's
record_ddp too), a failing or hanging rank gives one line and leaves no process behind, the
subprocess path works, and compare_settings gives the verdicts computed here."""

from __future__ import annotations

import json
import os
import re
import statistics
import time
from pathlib import Path

import pytest

import helpers.timeline as tl
from helpers.distributed._compare import compare_settings
from helpers.distributed._launch import RankError, run_ranks
from helpers.distributed._sockets import tcp_endpoints

ENDPOINTS = "helpers.distributed._sockets:_endpoints_after_collective"
LOOPBACK = "127.0.0.1"

pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads Linux /proc")


# --------------------------------------------------------------- rank targets (forked ranks only)


def _fail_on_rank_one(rank: int, world_size: int, device: str, pid_dir: str) -> dict:
    Path(pid_dir, f"{rank}.pid").write_text(str(os.getpid()))
    if rank == 1:
        raise ValueError("broken on purpose\nsecond line that must not reach the message")
    return {}  # rank 0 then waits for rank 1 in the closing barrier, until it is stopped


def _sleep(rank: int, world_size: int, device: str, pid_dir: str) -> dict:
    Path(pid_dir, f"{rank}.pid").write_text(str(os.getpid()))
    time.sleep(120)
    return {}


def _children() -> set[int]:
    """Process ids of this process's children (every thread's), from /proc."""
    found: set[int] = set()
    for f in Path("/proc/self/task").glob("*/children"):
        found |= {int(pid) for pid in f.read_text().split()}
    return found


def _gone(pid_dir: Path) -> list[int]:
    pids = [int(p.read_text()) for p in sorted(pid_dir.glob("*.pid"))]
    assert len(pids) == 2, "both ranks should have started"
    return [pid for pid in pids if Path(f"/proc/{pid}").exists()]


def _loopback_only(endpoints: list[dict[str, str]]) -> None:
    assert endpoints, "a rank that has run a collective holds gloo's sockets"
    for e in endpoints:
        assert e["local"] == LOOPBACK, f"socket bound to {e['local']}, not to the loopback address"
        assert e["remote"] in (LOOPBACK, "0.0.0.0"), e  # 0.0.0.0: a listener on 127.0.0.1, no peer
    assert any(e["remote"] == LOOPBACK for e in endpoints)  # the ranks' connection itself


# ------------------------------------------------------------------------------------ the tests


def test_forked_ranks_use_the_loopback_interface_only():
    results = run_ranks(ENDPOINTS, world_size=2)
    assert [r["sum"] for r in results] == [2.0, 2.0]  # the all-reduce really ran
    for r in results:
        _loopback_only(r["endpoints"])


def test_subprocess_ranks_work_and_use_the_loopback_interface_only():
    before = _children()
    results = run_ranks(ENDPOINTS, world_size=2, fork=False)
    assert [r["sum"] for r in results] == [2.0, 2.0]
    for r in results:
        _loopback_only(r["endpoints"])
    assert _children() <= before


def test_a_subprocess_rank_that_fails_gives_one_line():
    before = _children()
    with pytest.raises(RankError) as err:
        run_ranks("helpers.distributed._sockets:no_such_function", world_size=2, fork=False, timeout_s=60)
    message = str(err.value)
    assert "\n" not in message and re.search(
        r"rank [01] exited 1: AttributeError: .*no_such_function", message
    )
    assert _children() <= before


def test_a_rank_that_raises_gives_one_line_and_leaves_no_process(tmp_path):
    before = _children()
    with pytest.raises(RankError) as err:
        run_ranks(f"{__name__}:_fail_on_rank_one", world_size=2, timeout_s=60, pid_dir=str(tmp_path))
    message = str(err.value)
    assert "\n" not in message
    assert "rank 1: ValueError: broken on purpose" in message and "second line" not in message
    assert _gone(tmp_path) == [] and _children() <= before


def test_a_time_out_stops_every_rank(tmp_path):
    before = _children()
    began = time.monotonic()
    with pytest.raises(RankError) as err:
        run_ranks(f"{__name__}:_sleep", world_size=2, timeout_s=2, pid_dir=str(tmp_path))
    assert time.monotonic() - began < 30  # not the 120 s the ranks would sleep
    message = str(err.value)
    assert "rank 0 took longer than 2 s" in message and "rank 1 took longer than 2 s" in message
    assert _gone(tmp_path) == [] and _children() <= before


def test_record_ddp_ranks_use_the_loopback_interface_only(tmp_path, monkeypatch):
    """A test-only hook: the forked ranks inherit this process's memory, so wrapping
    ``destroy_process_group`` here makes each rank write its TCP endpoints just before its
    process group closes, after its training steps."""
    import torch.distributed as dist

    real = dist.destroy_process_group
    seen = tmp_path / "endpoints"
    seen.mkdir()

    def destroy(*args, **kwargs):
        Path(seen, f"{os.getpid()}.json").write_text(json.dumps(tcp_endpoints()))
        return real(*args, **kwargs)

    monkeypatch.setattr(dist, "destroy_process_group", destroy)
    tl.record_ddp(tmp_path / "run", steps=1, layers=1, width=8, batch=2)
    found = sorted(seen.glob("*.json"))
    assert len(found) == 2
    for f in found:
        _loopback_only(json.loads(f.read_text()))


# ---------------------------------------------------------------------------- compare_settings


def test_compare_settings_verdicts_on_synthetic_samples():
    base = [0.010, 0.012, 0.011, 0.013, 0.010, 0.012, 0.011]
    jitter = [1.00, 1.01, 0.99, 1.00, 1.01, 0.99, 1.00]
    samples = {
        "base": base,
        "faster": [b / 1.5 * j for b, j in zip(base, jitter, strict=True)],
        "slower": [b * 1.5 * j for b, j in zip(base, jitter, strict=True)],
        "same": list(base),
    }
    got = compare_settings(samples, "base")
    assert sorted(got) == ["faster", "same", "slower"]
    for name, c in got.items():
        ratios = [b / t for b, t in zip(base, samples[name], strict=True)]
        # a bootstrap median of these ratios can only lie between the smallest and the largest
        assert min(ratios) - 1e-12 <= c.low <= c.high <= max(ratios) + 1e-12
        assert c.speedup == pytest.approx(statistics.median(ratios))  # odd count: the middle ratio
        assert c.names == ("base", name) and c.pairs == len(base)
        if min(ratios) > 1.02:
            want = "faster"
        elif max(ratios) < 1 / 1.02:
            want = "slower"
        else:
            assert min(ratios) == max(ratios) == 1.0
            want = "within noise"
        assert c.verdict == want
    assert [got[k].verdict for k in ("faster", "slower", "same")] == ["faster", "slower", "within noise"]
    with pytest.raises(ValueError, match="baseline"):
        compare_settings(samples, "missing")


@pytest.mark.parametrize(
    ("asked", "gpus", "want"),
    [
        ("auto", 0, "cpu"),
        ("auto", 1, "cpu"),
        ("auto", 2, "cuda"),
        ("cuda", 1, "cpu"),
        ("cuda", 4, "cuda"),
        ("cpu", 4, "cpu"),
        ("cuda", 0, "cpu"),
    ],
)
def test_pick_device_takes_nccl_only_with_one_gpu_per_rank(monkeypatch, asked, gpus, want):
    import torch

    from helpers.distributed._launch import pick_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    device, ranks, why = pick_device(asked)
    assert device == want and "\n" not in why
    if want == "cuda":
        assert ranks == gpus and "NCCL" in why
    else:
        assert "gloo" in why and "127.0.0.1" in why
        assert ("one GPU" in why) == (gpus == 1 and asked != "cpu")
    with pytest.raises(ValueError, match="device must be"):
        pick_device("tpu")


def test_the_torchrun_command_rendezvous_on_loopback_and_checks_its_options(tmp_path, monkeypatch):
    from helpers.distributed._torchrun import torchrun_command

    command = torchrun_command(tmp_path, nproc=3, steps=2)
    assert "--nproc-per-node=3" in command and "--rdzv-endpoint=127.0.0.1:0" in command
    assert command[-3:] == ["fsdp", f"--out={tmp_path}", "--steps=2"]
    with pytest.raises(ValueError, match="unknown option 'lr'"):
        torchrun_command(tmp_path, lr=3)
    # torch installed without its scripts (a .pth, as some runtimes do): torch's own module
    monkeypatch.setattr("shutil.which", lambda *a, **k: None)
    import sys

    assert torchrun_command(tmp_path)[:3] == [sys.executable, "-m", "torch.distributed.run"]
    with pytest.raises(ValueError, match="positive whole number"):
        torchrun_command(tmp_path, nproc=0)


def test_the_fsdp_command_outside_torchrun_says_how_to_start_it(tmp_path):
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    src = str(Path(__file__).resolve().parents[1] / "src")
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(
        [sys.executable, "-m", "helpers.distributed", "fsdp", f"--out={tmp_path}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "not started by torchrun" in done.stderr and "--nproc-per-node=2" in done.stderr

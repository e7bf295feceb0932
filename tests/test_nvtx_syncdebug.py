"""helpers.nvtx.find_syncs and launch_blocking: the CPU message, and the collection logic with
torch.cuda's sync-debug functions replaced by a stand-in that warns the way PyTorch does."""

import warnings

import pytest
import torch

from helpers import nvtx


def test_cpu_run_says_it_cannot_fire_and_does_not_run_fn():
    calls = []
    report = nvtx.find_syncs(lambda: calls.append(1), device="cpu")
    assert report.checked is False and report.syncs == []
    assert calls == []  # nothing ran, so nothing can look like a clean result
    assert "CUDA" in str(report) and "cpu" in str(report)


def test_fn_must_be_callable():
    with pytest.raises(TypeError, match="function"):
        nvtx.find_syncs("x.item()", device="cpu")


def test_collects_warnings_with_their_lines_and_restores_the_mode(monkeypatch):
    mode = {"now": 0}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: mode["now"])
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", lambda m: mode.update(now={"warn": 1}.get(m, m)))

    def fake_op(sync):  # what a synchronizing op does while the mode is "warn"
        if sync and mode["now"] == 1:
            warnings.warn("called a synchronizing CUDA operation", UserWarning, stacklevel=2)

    def step():
        fake_op(False)
        fake_op(True)
        warnings.warn("an unrelated warning", UserWarning, stacklevel=1)
        fake_op(True)

    report = nvtx.find_syncs(step, device=torch.device("cuda"))
    assert report.checked is True
    assert [m for _, m in report.syncs] == ["called a synchronizing CUDA operation"] * 2
    here = __file__.rsplit("/", 1)[-1]
    lines = [int(w.split(":")[1]) for w, _ in report.syncs]
    assert all(w.startswith(here) for w, _ in report.syncs) and lines[0] < lines[1]
    assert mode["now"] == 0  # the mode the caller had
    assert "2 synchronizing call(s)" in str(report)


def test_mode_restored_when_fn_raises(monkeypatch):
    mode = {"now": 2}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: mode["now"])
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", lambda m: mode.update(now=m))

    def boom():
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        nvtx.find_syncs(boom, device=torch.device("cuda"))
    assert mode["now"] == 2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_real_sync_examples_on_cuda():
    report = nvtx.find_syncs(nvtx.sync_examples("cuda"), device="cuda")
    assert report.checked and len(report.syncs) >= 4


def test_sync_examples_run_on_cpu():
    nvtx.sync_examples("cpu")()


def test_launch_blocking_reads_the_environment(monkeypatch):
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")
    on = nvtx.launch_blocking()
    monkeypatch.delenv("CUDA_LAUNCH_BLOCKING")
    off = nvtx.launch_blocking()
    assert "=1 is set" in on and "not set" in off

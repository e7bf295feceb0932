"""The CUDA branches of ``helpers``, exercised on a CPU with a fake CUDA runtime.

A GPU run (``scripts/gpu_check.sh``) is the real proof; these tests make sure that, until one
happens and between runs, the logic of every CUDA path runs in CI: which timer is used (CUDA
events, synchronised, never the host clock), when the memory peak is reset and read, which
datasheet entry a GPU name maps to, which dtype and peak a GPU run uses, where NVTX and
cudaProfilerStart/Stop calls go. The fake records what was called, in order; anything that
allocates on the device is redirected to PyTorch's ``meta`` device (shapes only, no data).

``test_every_cuda_function_is_covered`` lists the functions of ``src/helpers`` that touch
``torch.cuda``; a new one fails it until it is given a test here (or a reason to skip).
"""

from __future__ import annotations

import ast
import types
from pathlib import Path

import pytest
import torch
from conftest import ROOT

from helpers import bench, env, hardware, mfu, models, nvtx
from helpers.bench import Measurement


class FakeGPU:
    """A stand-in for the CUDA runtime: a device clock, timing events, a memory peak, a log."""

    def __init__(self, name: str = "NVIDIA H200", total_memory: float = 141e9):
        self.name, self.total_memory = name, total_memory
        self.clock_ms = 0.0  # device time
        self.tick_ms = 0.0  # device time every event record adds (work between two records)
        self.allocated = self.peak = 0
        self.log: list[str] = []

    def work(self, ms: float, peak_bytes: int = 0) -> None:
        """What one call of the timed function does on the device."""
        self.clock_ms += ms
        self.peak = max(self.peak, peak_bytes)
        self.log.append("work")

    def event(self, enable_timing: bool = False) -> FakeEvent:
        return FakeEvent(self, enable_timing)

    def install(self, monkeypatch) -> FakeGPU:
        cuda = torch.cuda
        monkeypatch.setattr(cuda, "is_available", lambda: True)
        monkeypatch.setattr(cuda, "device_count", lambda: 1)
        monkeypatch.setattr(cuda, "synchronize", lambda device=None: self.log.append("sync"))
        monkeypatch.setattr(cuda, "Event", self.event)
        monkeypatch.setattr(cuda, "reset_peak_memory_stats", self._reset)
        monkeypatch.setattr(cuda, "max_memory_allocated", lambda device=None: self.peak)
        monkeypatch.setattr(cuda, "get_device_name", lambda device=None: self.name)
        monkeypatch.setattr(
            cuda,
            "get_device_properties",
            lambda device=0: types.SimpleNamespace(name=self.name, total_memory=int(self.total_memory)),
        )
        monkeypatch.setattr(cuda, "manual_seed_all", lambda seed: None)
        return self

    def _reset(self, device=None) -> None:
        self.peak = 0
        self.log.append("reset_peak")


class FakeEvent:
    def __init__(self, gpu: FakeGPU, enable_timing: bool):
        self.gpu, self.enable_timing = gpu, enable_timing
        self.time_ms: float | None = None
        self.synced = False

    def record(self, stream=None) -> None:
        self.gpu.clock_ms += self.gpu.tick_ms
        self.time_ms = self.gpu.clock_ms
        self.gpu.log.append("record")

    def synchronize(self) -> None:
        self.synced = True
        self.gpu.log.append("event_sync")

    def elapsed_time(self, end: FakeEvent) -> float:
        # the real API's preconditions: timing enabled, both recorded, the end event complete
        assert self.enable_timing and end.enable_timing, "events need enable_timing=True"
        assert self.time_ms is not None and end.time_ms is not None, "event not recorded"
        assert end.synced, "elapsed_time before the end event completed"
        return end.time_ms - self.time_ms


class HostClock:
    """A host clock that moves 1 s per reading: a sample taken with it is obviously not device time."""

    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        self.t += 1.0
        return self.t


@pytest.fixture
def gpu(monkeypatch) -> FakeGPU:
    return FakeGPU().install(monkeypatch)


def on_meta(monkeypatch) -> None:
    """Tensors asked for on ``cuda`` are made on ``meta``: shapes and dtypes, no memory, no math."""
    for name in ("randn", "empty", "zeros", "ones", "rand"):
        original = getattr(torch, name)

        def factory(*args, _original=original, device=None, **kwargs):
            if device is not None and torch.device(device).type == "cuda":
                device = "meta"
            return _original(*args, device=device, **kwargs)

        monkeypatch.setattr(torch, name, factory)


# --------------------------------------------------------------------------- bench


def test_auto_and_cuda_resolve_to_the_gpu_when_one_is_visible(gpu):
    assert bench.resolve_device("auto") == torch.device("cuda")
    assert bench.resolve_device("cuda:0") == torch.device("cuda:0")
    assert bench.resolve_device(torch.device("cuda")) == torch.device("cuda")


def test_synchronize_waits_on_cuda_only(gpu):
    bench.synchronize(torch.device("cuda"))
    bench.synchronize(torch.device("cpu"))
    assert gpu.log == ["sync"]


def test_measure_times_each_call_with_synchronised_cuda_events(gpu, monkeypatch):
    monkeypatch.setattr(bench._timing, "time", types.SimpleNamespace(perf_counter=HostClock()))
    calls = iter([(50.0, 10_000), (9.0, 9_000), (2.0, 1_000), (3.0, 3_000), (4.0, 2_000)])
    result = bench.measure(lambda: gpu.work(*next(calls)), warmup=2, iters=3, device="cuda")
    # device time from the events (ms -> s), not the host clock (which moves 1 s per reading)
    assert result.samples == pytest.approx([0.002, 0.003, 0.004])
    assert result.median == pytest.approx(0.003) and result.device == "cuda"
    assert result.first_call == pytest.approx(1.0)  # cold call: host clock around sync + call + sync
    # the peak was reset after the cold and warm-up calls: only the timed calls count
    assert result.peak_allocated_bytes == 3_000
    log = gpu.log
    assert log.index("reset_peak") > [i for i, e in enumerate(log) if e == "work"][1]
    timed = log[log.index("reset_peak") + 1 :]
    assert timed == ["record", "work", "record", "event_sync"] * 3, timed


def test_measure_with_an_injected_clock_uses_no_cuda_events(gpu, monkeypatch):
    monkeypatch.setattr(torch.cuda, "Event", lambda **kw: pytest.fail("no CUDA events with a clock"))
    result = bench.measure(
        lambda: gpu.work(1.0, 500), warmup=1, iters=2, device="cuda", clock=HostClock(), sync=lambda: None
    )
    assert result.samples == [1.0, 1.0]
    assert result.peak_allocated_bytes == 500  # memory is still read on CUDA


def test_compare_speed_times_each_sample_with_cuda_events(gpu, monkeypatch):
    from helpers.bench import _speed

    monkeypatch.setattr(_speed, "time", types.SimpleNamespace(perf_counter=HostClock()))
    result = bench.compare_speed(
        lambda: gpu.work(2.0),
        lambda: gpu.work(1.0),
        device="cuda",
        number=1,
        min_pairs=6,
        max_pairs=6,
        max_seconds=1000,  # the host clock moves 1 s per reading: a budget it cannot spend
        warmup=1,
    )
    # device time from the events, not the host clock (which moves 1 s per reading)
    assert result.baseline.samples == pytest.approx([0.002] * 6) and result.device == "cuda"
    assert result.speedup == pytest.approx(2.0) and result.verdict == "faster"
    assert gpu.log == ["record", "work", "record", "event_sync"] * 14  # 2 cold calls + 6 pairs


def test_profile_sync_events_counts_blocking_calls_and_drops_its_own_sync(gpu, monkeypatch):
    import torch.profiler as tp

    seen: dict = {}

    class FakeProfile:
        def __init__(self, activities):
            seen["activities"] = activities

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def key_averages(self):
            rows = [
                ("cudaStreamSynchronize", 3),
                ("cudaDeviceSynchronize", 1),
                ("cudaMemcpyAsync", 3),  # returns at once: not a blocking call
                ("cudaMemcpy", 2),  # the synchronous copy blocks
                ("cudaMemcpy2DAsync", 1),
                ("aten::mm", 6),
                ("cudaLaunchKernel", 9),
                ("cudaEventSynchronize", 0),
            ]
            return [types.SimpleNamespace(key=k, count=c) for k, c in rows]

    monkeypatch.setattr(tp, "profile", FakeProfile)
    steps = []
    counts = bench.profile_sync_events(lambda: steps.append(1), steps=3)
    assert len(steps) == 3 and tp.ProfilerActivity.CUDA in seen["activities"]
    assert counts == {"cudaStreamSynchronize": 3, "cudaMemcpy": 2}


# --------------------------------------------------------------------------- hardware / env


@pytest.mark.parametrize(
    "name,memory,entry",
    [
        ("NVIDIA H200", 141e9, "H200"),
        ("NVIDIA H100 80GB HBM3", 80e9, "H100 SXM"),
        ("NVIDIA H100 PCIe", 80e9, "H100 PCIe"),
        ("NVIDIA A100-SXM4-40GB", 40e9, "A100 40GB SXM"),
        ("NVIDIA A100-SXM4-80GB", 80e9, "A100 80GB SXM"),
        ("NVIDIA A100-SXM4", 85e9, "A100 80GB SXM"),  # name without size: the memory decides
        ("Tesla T4", 15e9, "T4"),
        ("NVIDIA L4", 23e9, "L4"),
        ("NVIDIA GeForce RTX 4090", 24e9, None),  # not in the table: no datasheet peak
    ],
)
def test_detect_gpu_reads_the_device_properties(monkeypatch, name, memory, entry):
    FakeGPU(name, memory).install(monkeypatch)
    spec = hardware.detect_gpu()
    assert (spec.name if spec else None) == entry


def test_setup_on_a_known_gpu_prints_its_datasheet_peaks(gpu, capsys):
    runtime = env.setup("auto")
    out = capsys.readouterr().out
    assert runtime.is_cuda and runtime.gpu is hardware.DEVICES["H200"]
    assert runtime.gpu_name == "NVIDIA H200"
    assert "GPU NVIDIA H200 -> table entry 'H200'" in out and "bf16 989.5" in out
    assert "bandwidth 4.8 TB/s" in out and hardware.DEVICES["H200"].source in out


def test_setup_on_an_unknown_gpu_says_there_is_no_datasheet_peak(monkeypatch, capsys):
    FakeGPU("NVIDIA GeForce RTX 4090", 24e9).install(monkeypatch)
    runtime = env.setup("cuda")
    out = capsys.readouterr().out
    assert runtime.gpu is None and runtime.gpu_name == "NVIDIA GeForce RTX 4090"
    assert "is not in helpers.hardware.DEVICES" in out and "measure_device" in out


@pytest.fixture
def tf32_off():
    """TF32 matmuls off for the test, and the setting put back after (it is process-global)."""
    matmul = torch.backends.cuda.matmul
    before, matmul.allow_tf32 = matmul.allow_tf32, False
    yield
    matmul.allow_tf32 = before


@pytest.mark.parametrize("quick,n,mib", [(True, 4096, 512), (False, 8192, 2048)])
def test_measure_device_on_cuda_times_fp32_tf32_bf16_and_restores_tf32(
    gpu, monkeypatch, tf32_off, quick, n, mib
):
    on_meta(monkeypatch)
    runs = []

    def fake_measure(fn, *, warmup, iters, device):
        out = fn()  # the real GEMM / copy expression, on meta tensors
        runs.append((tuple(out.shape), out.dtype, torch.backends.cuda.matmul.allow_tf32, iters, device))
        return Measurement([0.004, 0.002, 0.003], 0.1, str(device))

    monkeypatch.setattr(hardware, "measure", fake_measure)
    result = hardware.measure_device("cuda", quick=quick)
    assert result.name == "NVIDIA H200" and result.gemm_n == n
    assert list(result.gemm_flops) == ["fp32", "tf32", "bf16"]
    gemms, copy = runs[:3], runs[3]
    assert [(r[1], r[2]) for r in gemms] == [
        (torch.float32, False),
        (torch.float32, True),
        (torch.bfloat16, False),
    ]  # TF32 only for "tf32"
    assert all(r[0] == (n, n) and r[3] == (5 if quick else 20) for r in gemms)
    assert torch.backends.cuda.matmul.allow_tf32 is False  # restored
    assert result.gemm_flops["bf16"] == pytest.approx(2 * n**3 / 0.002)  # a roof: the fastest run
    assert copy[0] == (mib * 2**20 // 4,) and result.copy_bytes == 2 * mib * 2**20
    assert result.copy_bandwidth == pytest.approx(2 * mib * 2**20 / 0.002)


def test_the_copy_buffer_on_a_gpu_is_eight_times_its_l2_cache(gpu, monkeypatch):
    props = types.SimpleNamespace(name=gpu.name, total_memory=int(gpu.total_memory), L2_cache_size=60 * 2**20)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=0: props)
    l2 = (60 * 2**20, "the GPU's L2 cache (torch.cuda.get_device_properties)")
    assert hardware.last_level_cache("cuda") == l2
    assert hardware.main_memory_copy_mib("cuda", least_mib=0)[0] == 480
    props.L2_cache_size = 0
    assert hardware.last_level_cache("cuda")[0] is None


def test_measure_device_restores_tf32_when_a_gemm_fails(gpu, monkeypatch, tf32_off):
    on_meta(monkeypatch)

    def failing(fn, **kwargs):
        raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr(hardware, "measure", failing)
    with pytest.raises(RuntimeError, match="out of memory"):
        hardware.measure_device("cuda", dtypes=["tf32"])
    assert torch.backends.cuda.matmul.allow_tf32 is False


# --------------------------------------------------------------------------- mfu / models


def test_device_peak_on_a_known_gpu_is_the_dense_datasheet_figure(gpu, monkeypatch):
    monkeypatch.setattr(hardware, "measure_device", lambda *a, **k: pytest.fail("must not measure"))
    bf16 = mfu.device_peak("cuda", "bfloat16")
    assert (bf16.flops, bf16.dtype, bf16.kind) == (989.5e12, "bf16", "datasheet")
    assert "H200" in bf16.source and hardware.DEVICES["H200"].source in bf16.source
    assert mfu.device_peak("cuda", "fp8").flops == 1979e12


@pytest.mark.parametrize(
    "gpu_name,dtype",
    [
        ("NVIDIA GeForce RTX 4090", "bf16"),  # not in table
        ("NVIDIA A100-SXM4-80GB", "fp8"),
    ],
)  # no such peak
def test_device_peak_without_a_datasheet_figure_is_measured(monkeypatch, gpu_name, dtype):
    FakeGPU(gpu_name, 80e9).install(monkeypatch)
    run = Measurement([0.010, 0.008, 0.012], 0.5, "cuda")

    def fake_measure_device(device, dtypes, quick):
        result = hardware.MeasuredDevice(str(device), gpu_name, 4096)
        result.gemm_runs[dtypes[0]] = run
        result.gemm_flops[dtypes[0]] = 2 * 4096**3 / run.min  # as measure_device does
        return result

    monkeypatch.setattr(hardware, "measure_device", fake_measure_device)
    peak = mfu.device_peak("cuda", dtype)
    assert peak.kind == "measured" and peak.flops == pytest.approx(2 * 4096**3 / 0.008)  # fastest run
    assert peak.spread == pytest.approx((0.012 - 0.008) / 0.010)


def test_course_config_on_a_gpu_is_gpt2_small(gpu):
    assert models.course_config("cuda", quick=True) == models.get_config("gpt2-small", seq_len=512)
    assert models.course_config("auto", quick=False) == models.CONFIGS["gpt2-small"]


def test_measure_training_on_a_gpu_uses_bf16_autocast_and_the_bf16_datasheet_peak(gpu, monkeypatch):
    # The model and batch live on the CPU (this build has no CUDA); everything else takes the
    # CUDA path: bf16 autocast, CUDA-event timing, the GPU's name and datasheet peak.
    build, batch = models.build_model, models.make_batch
    monkeypatch.setattr(models, "build_model", lambda cfg, dev: build(cfg, "cpu"))
    monkeypatch.setattr(models, "make_batch", lambda cfg, b, s, dev: batch(cfg, b, s, "cpu"))
    autocasts = []
    real_autocast = torch.autocast
    monkeypatch.setattr(
        torch,
        "autocast",
        lambda device_type, dtype: autocasts.append(dtype) or real_autocast("cpu", dtype=dtype),
    )
    gpu.tick_ms = 2.5  # each event record: 2.5 ms of device work -> 2.5 ms per timed step
    run = mfu.measure_training("tiny", batch_size=2, seq_len=16, device="cuda", warmup=1, iters=2)
    assert run.autocast == "bf16" and set(autocasts) == {torch.bfloat16}
    assert run.step.samples == pytest.approx([0.0025, 0.0025])
    assert run.peak.kind == "datasheet" and run.peak.flops == 989.5e12
    assert run.device_name == "NVIDIA H200" and run.device == "cuda"
    expected = mfu.model_flops_per_step(models.get_config("tiny"), 2, 16) / (0.0025 * 989.5e12)
    assert run.mfu == pytest.approx(expected)


# --------------------------------------------------------------------------- nvtx


@pytest.fixture
def torch_nvtx(monkeypatch):
    """A CUDA build's NVTX: ``torch._C._nvtx`` exists and range_push/pop reach it."""
    calls: list[tuple[str, str | None]] = []
    monkeypatch.setattr(torch._C, "_nvtx", types.ModuleType("_nvtx"), raising=False)
    monkeypatch.setattr(torch.cuda.nvtx, "range_push", lambda name: calls.append(("push", name)))
    monkeypatch.setattr(torch.cuda.nvtx, "range_pop", lambda: calls.append(("pop", None)))
    monkeypatch.setattr(nvtx._annotate, "_disabled", False)
    nvtx.nvtx_backend.cache_clear()
    yield calls
    nvtx.nvtx_backend.cache_clear()


def test_annotate_pushes_and_pops_torch_cuda_nvtx_ranges(torch_nvtx):
    assert nvtx.nvtx_backend() == "torch.cuda.nvtx"
    with nvtx.annotate("step"), nvtx.annotate("forward"):
        pass
    assert torch_nvtx == [("push", "step"), ("push", "forward"), ("pop", None), ("pop", None)]
    assert nvtx.try_torch_nvtx("probe").startswith("torch.cuda.nvtx.range_push worked")


def test_a_failing_nvtx_call_disables_nvtx_but_not_the_range(torch_nvtx, monkeypatch):
    def broken(name):
        raise RuntimeError("NVTX functions not installed")

    monkeypatch.setattr(torch.cuda.nvtx, "range_push", broken)
    with nvtx.annotate("forward"):
        pass
    with nvtx.annotate("backward"):
        pass
    assert torch_nvtx == [] and nvtx._annotate._disabled  # no pop without a push; training went on


def test_top_operators_adds_cuda_activity_on_a_gpu(gpu, monkeypatch):
    import torch.profiler as tp

    seen = {}

    class FakeProfile:
        def __init__(self, activities):
            seen["activities"] = activities

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def key_averages(self):
            return type("Averages", (), {"table": lambda _self, **kw: f"table {sorted(kw.items())}"})()

    monkeypatch.setattr(tp, "profile", FakeProfile)
    text = nvtx.top_operators(lambda: None, row_limit=3)
    assert seen["activities"] == [tp.ProfilerActivity.CPU, tp.ProfilerActivity.CUDA]
    assert "row_limit', 3" in text and "self_cpu_time_total" in text


def test_cuda_profiler_range_syncs_then_starts_and_stops_the_capture(gpu, monkeypatch):
    monkeypatch.setattr(torch.cuda.profiler, "start", lambda: gpu.log.append("profiler_start"))
    monkeypatch.setattr(torch.cuda.profiler, "stop", lambda: gpu.log.append("profiler_stop"))
    window = nvtx.CudaProfilerRange(1, 2)
    for step in range(4):
        with window.step(step):
            gpu.work(1.0)
    assert gpu.log == ["work", "sync", "profiler_start", "work", "work", "sync", "profiler_stop", "work"]
    assert window.events == ["step 1: cudaProfilerStart() called", "step 2: cudaProfilerStop() called"]


def test_nvtx_demo_loop_runs_on_the_gpu_with_a_capture_window(gpu, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda.profiler, "start", lambda: gpu.log.append("profiler_start"))
    monkeypatch.setattr(torch.cuda.profiler, "stop", lambda: gpu.log.append("profiler_stop"))
    asked, real_setup = [], nvtx.demo_setup
    monkeypatch.setattr(
        nvtx._loop,
        "demo_setup",
        lambda device, **kw: (
            asked.append(device) or real_setup("cpu", **{**kw, "width": 16, "batch_size": 4})
        ),
    )
    nvtx._demo_main(["--steps", "3", "--first", "1", "--last", "2"])
    out = capsys.readouterr().out
    assert asked == ["cuda"] and "3 steps on cuda" in out
    assert "step 1: cudaProfilerStart() called" in out and "step 2: cudaProfilerStop() called" in out
    assert gpu.log.count("profiler_start") == gpu.log.count("profiler_stop") == 1


@pytest.mark.parametrize("failure", [None, RuntimeError("nsys: no CUDA events captured")])
def test_nsys_capture_is_used_on_a_gpu_and_falls_back_to_labelled_examples(
    gpu, monkeypatch, tmp_path, failure
):
    from helpers import nsys

    def fake_capture():
        if failure:
            raise failure
        return nsys.Capture(tmp_path / "r.nsys-rep", tmp_path / "r.csv", tmp_path / "r.sqlite")

    monkeypatch.setattr(nsys._capture, "nsys_available", lambda: True)
    monkeypatch.setattr(nsys._capture, "capture_demo", fake_capture)
    stats, sqlite, what = nsys.example_or_capture("compute")
    if failure is None:
        assert (stats, sqlite) == (tmp_path / "r.csv", tmp_path / "r.sqlite")
        assert what.startswith("a real nsys capture")
    else:
        assert stats == nsys.example_path("compute", "stats") and what.startswith("EXAMPLE data")
        assert "the nsys capture failed (nsys: no CUDA events captured)" in what
    assert nsys.example_or_capture("compute", try_capture=False)[2].endswith("(quick mode)")


# --------------------------------------------------------------------------- distributed


def test_record_ddp_on_cuda_runs_ranks_as_fresh_processes(gpu, monkeypatch, tmp_path):
    from helpers.timeline import _ddp

    seen = {}
    monkeypatch.setattr(_ddp, "_run_forked", lambda *a: pytest.fail("CUDA must not be forked"))
    monkeypatch.setattr(_ddp, "_run_subprocesses", lambda opts, timeout: seen.update(opts) or [])
    paths = _ddp.record_ddp(tmp_path, world_size=2, steps=1, slow_rank=1, device="cuda")
    assert seen["device"] == "cuda" and seen["world_size"] == 2
    assert [p.name for p in paths["one_slow"]] == ["rank0.json.gz", "rank1.json.gz"]


# --------------------------------------------------------------------------- memory / checkpointing


@pytest.fixture
def allocator(gpu, monkeypatch):
    """The caching allocator's counters and its recorded history, as a CUDA build has them."""
    state = {"allocated": 1_000, "reserved": 4_096}
    trace = [
        {"action": "alloc", "size": 2_000, "time_us": 10},
        {"action": "alloc", "size": 3_000, "time_us": 30},
        {"action": "free_requested", "size": 2_000, "time_us": 40},
        {"action": "free_completed", "size": 2_000, "time_us": 50},
    ]
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: state["allocated"])
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: state["reserved"])
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(
        torch.cuda.memory,
        "_record_memory_history",
        lambda enabled="all", **kw: gpu.log.append(f"history {enabled}"),
    )
    monkeypatch.setattr(
        torch.cuda.memory,
        "_snapshot",
        lambda device=None: gpu.log.append("snapshot") or {"segments": [], "device_traces": [trace]},
    )
    return state


def test_cuda_memory_resets_the_peak_records_history_and_saves_a_snapshot(gpu, allocator, tmp_path):
    import pickle

    from helpers import memory

    def step():
        gpu.work(1.0, peak_bytes=6_000)
        allocator.update(allocated=4_000, reserved=8_192)

    result = memory.cuda_memory(step, snapshot=tmp_path / "snap.pickle")
    assert gpu.log == ["sync", "reset_peak", "history all", "work", "sync", "snapshot", "history None"]
    assert (result.allocated_before, result.allocated_after, result.reserved_after, result.peak) == (
        1_000,
        4_000,
        8_192,
        6_000,
    )
    assert result.timeline == [(0.0, 3_000), (0.02, 6_000), (0.04, 4_000)]  # from the 1 000 already there
    with open(result.snapshot_path, "rb") as f:
        assert pickle.load(f)["device_traces"][0][0]["size"] == 2_000
    assert "cached, not leaked" in str(result) and "memory_viz" in str(result)


def test_cuda_memory_stops_recording_when_the_step_fails(gpu, allocator):
    from helpers import memory

    def broken():
        raise RuntimeError("CUDA out of memory")

    with pytest.raises(RuntimeError, match="out of memory"):
        memory.cuda_memory(broken, snapshot=None)
    assert gpu.log[-1] == "history None"
    assert memory.cuda_memory(lambda: None, history=False, snapshot=None).timeline == []


def test_compare_plans_on_a_gpu_reads_each_plans_cuda_peak(gpu, allocator, monkeypatch):
    from helpers import checkpointing

    build, batch = models.build_model, models.make_batch
    monkeypatch.setattr(models, "build_model", lambda cfg, dev: build(cfg, "cpu"))
    monkeypatch.setattr(models, "make_batch", lambda cfg, b, s, dev: batch(cfg, b, s, "cpu"))
    real_step = models.make_train_step

    def step_on_the_gpu(model, batch):  # the real step, plus device work with the plan's peak
        step = real_step(model, batch)
        peak = {"none": 9_000, "every": 3_000}[checkpointing.current_plan(model)]
        return lambda: (step(), gpu.work(0.0, peak))[0]

    monkeypatch.setattr(models, "make_train_step", step_on_the_gpu)
    gpu.tick_ms = 1.0
    rows = checkpointing.compare_plans("tiny", 2, 16, ["none", "every"], device="cuda", iters=2, warmup=1)
    assert [r.cuda_peak for r in rows] == [9_000, 3_000]  # each plan's own peak, read after a reset
    # CUDA events, not the host clock: each sample is the 1 ms between two records over its calls
    assert all(s == pytest.approx(0.001 / r.step.meta["number"]) for r in rows for s in r.step.samples)
    assert rows[1].vs_none.verdict == "within noise" and rows[1].vs_none.device == "cuda"
    resets = [i for i, e in enumerate(gpu.log) if e == "reset_peak"]
    assert len(resets) == 2 and gpu.log[resets[1] + 1] == "work"  # cuda_memory: reset, then the step
    assert "CUDA peak" in checkpointing.format_plans(rows)


# --------------------------------------------------------------------------- compiling (chapter 7)


@pytest.mark.parametrize("has_triton", [True, False])
def test_pick_backend_on_a_gpu_needs_triton(gpu, monkeypatch, has_triton):
    import sys

    from helpers import compiling

    monkeypatch.setitem(sys.modules, "triton", types.ModuleType("triton") if has_triton else None)
    backend, why = compiling.pick_backend("cuda")
    assert (backend, "Triton" in why) == ("inductor" if has_triton else "aot_eager", True)


# --------------------------------------------------------------------------- precision (chapter 8)


def test_measure_speedups_on_a_gpu_uses_the_tensor_core_datasheet_peak(gpu, monkeypatch):
    import matplotlib

    from helpers import precision

    matplotlib.use("Agg")
    asked = {}

    def fake_measure_device(device, dtypes, quick):
        asked["device"], asked["dtypes"] = str(device), list(dtypes)
        result = hardware.MeasuredDevice(str(device), "NVIDIA H200", 4096)
        result.gemm_flops.update(fp32=50e12, bf16=700e12)
        result.copy_bandwidth = 3.9e12
        return result

    monkeypatch.setattr(hardware, "measure_device", fake_measure_device)
    from helpers.precision import _training

    built = []
    monkeypatch.setattr(
        _training,
        "_dtype_steps",
        lambda cfg, dev: (
            built.append(("steps", str(dev)))
            or {"fp32": lambda: gpu.work(0.30), "bf16": lambda: gpu.work(0.12)}
        ),
    )
    monkeypatch.setattr(
        _training,
        "_dtype_gemms",
        lambda n, dev: (
            built.append(("gemms", n, str(dev)))
            or {"fp32": lambda: gpu.work(0.14), "bf16": lambda: gpu.work(0.01)}
        ),
    )
    result = precision.measure_speedups("cuda")
    assert built == [("gemms", 4096, "cuda"), ("steps", "cuda")]
    assert result.step_speed.device == "cuda" and result.step_speed.verdict == "faster"
    assert asked == {"device": "cuda", "dtypes": ["fp32", "bf16"]}
    assert result.peaks == {"fp32": 67e12, "bf16": 989.5e12} and result.bandwidth == 4.8e12
    assert result.step_speedup == pytest.approx(2.5) and result.gemm_speedup == pytest.approx(14.0)
    gpt2 = models.get_config("gpt2-small", seq_len=512)
    flops = mfu.model_flops_per_step(gpt2, 8, 512)  # the fake device's work is in ms
    assert result.step_s == {"fp32": pytest.approx(0.30e-3), "bf16": pytest.approx(0.12e-3)}
    assert result.step_flops == {
        "fp32": pytest.approx(flops / 0.30e-3),
        "bf16": pytest.approx(flops / 0.12e-3),
    }
    text = result.format()
    assert "datasheet (helpers.hardware)" in text and f"{700e12 / 989.5e12:.0%} of the bf16 peak" in text
    ax = precision.plot_speedups(result)
    labels = [line.get_label() for line in ax.lines]
    assert "bf16 roof (datasheet)" in labels and "training step bf16" in labels


def test_train_losses_on_a_gpu_autocast_on_cuda(gpu, monkeypatch):
    from helpers import precision
    from helpers.precision import _training

    build, batch = models.build_model, _training.pattern_batch
    monkeypatch.setattr(models, "build_model", lambda cfg, dev, seed=0: build(cfg, "cpu", seed=seed))
    monkeypatch.setattr(_training, "pattern_batch", lambda cfg, b, seed, device: batch(cfg, b, seed=seed))
    autocasts = []
    real_autocast = torch.autocast
    monkeypatch.setattr(
        torch,
        "autocast",
        lambda device_type, dtype: (
            autocasts.append((device_type, dtype)) or real_autocast("cpu", dtype=dtype)
        ),
    )
    losses = precision.train_losses("tiny", steps=2, autocast="bf16", device="cuda", batch_size=2)
    assert len(losses) == 2 and autocasts == [("cuda", torch.bfloat16)] * 2


# --------------------------------------------------------------------------- capstone (helpers.report)


def test_capstone_gpu_baseline_is_gpt2_small_shaped_with_pinned_workers(gpu):
    from helpers.report import tuning

    full, quick = tuning.baseline_config("cuda", quick=False), tuning.baseline_config("cuda", quick=True)
    assert (full.model.n_layers, full.model.d_model, full.model.n_heads) == (12, 768, 12)
    assert (full.seq_len, full.batch_size, full.device) == (1024, 32, "cuda") and quick.seq_len == 512
    assert full.precision == "fp32" and full.data_delay_ms > quick.data_delay_ms > 0
    steps = {c.name: c for c in tuning.tuning_steps("cuda")}
    assert steps["workers"].fields == {"workers": 8, "pin_memory": True}
    assert "pinned memory" in steps["workers"].what
    tuned = full
    for change in steps.values():
        tuned = tuning.apply_change(tuned, change)
    assert tuned.precision == "bf16" and tuned.compile and tuned.fused_optimizer and not tuned.sync_every_step


def test_capstone_device_helpers_on_cuda(gpu):
    from torch.profiler import ProfilerActivity

    from helpers.report import runner

    dev = torch.device("cuda")
    assert runner._device_name(dev) == "NVIDIA H200"
    assert runner._activities(dev) == [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    assert runner._activities(torch.device("cpu")) == [ProfilerActivity.CPU]
    gpu.work(1.0, 3 * 2**20)
    runner._reset_peak(dev)
    gpu.work(1.0, 5 * 2**20)
    assert runner._peak_mib(dev) == 5.0 and runner._peak_mib(torch.device("cpu")) is None
    assert gpu.log == ["work", "reset_peak", "work"]


def test_report_provenance_names_the_gpu_on_cuda(gpu):
    from helpers.report import provenance

    assert provenance.device_model("cuda") == "NVIDIA H200"
    assert provenance.device_model("cpu") == provenance.cpu_model() != "NVIDIA H200"
    assert provenance.provenance("cuda:0")["device_model"] == "NVIDIA H200"


def test_capstone_timed_windows_sync_only_at_window_edges_on_cuda(gpu, monkeypatch):
    from helpers.report import runner, tuning

    clock = iter(range(1000))
    monkeypatch.setattr(runner, "time", types.SimpleNamespace(perf_counter=lambda: float(next(clock))))
    cfg = tuning.RunConfig(
        models.get_config("tiny"),
        batch_size=2,
        seq_len=8,
        device="cuda",
        windows=2,
        steps_per_window=3,
        sync_every_step=False,
    )
    trainer = types.SimpleNamespace(
        config=cfg,
        device=torch.device("cuda"),
        next_batch=lambda: gpu.log.append("batch") or (None, None),
        step=lambda x, y: gpu.work(2.0, 7 * 2**20),
    )
    samples, data_wait, peak = runner._timed_windows(trainer)
    window = ["sync"] + ["batch", "work"] * 3 + ["sync"]
    assert gpu.log == ["reset_peak"] + window * 2  # no sync inside a window
    assert len(samples) == 2 and len(data_wait) == 6 and peak == 7.0
    assert samples == [pytest.approx(7 / 3)] * 2  # host clock: 7 readings per window of 3 steps


def test_the_capstone_report_on_a_gpu_lists_kernels_and_the_gpu_idle_share():
    from helpers import report

    rows = [
        {
            "name": "baseline",
            "decision": "baseline",
            "device": "cuda:0",
            "top_ops": [["ampere_sgemm_128x64_tn", 12.5], ["ncclKernel_AllReduce", 3.25]],
            "device_idle_share": 0.25,
        }
    ]
    lines = report.document._hot_spots(rows)
    assert lines[0] == "- baseline (baseline), top kernels, ms per step (share of the step):"
    assert lines[1] == "  - ampere_sgemm_128x64_tn 12.50"  # no step time in this row: no share
    assert lines[-1] == "  - GPU idle: 25.0% of the profiled steps"
    rows[0].update(
        step_time_ms=25.0, peak_flops=1e12, op_costs={"ampere_sgemm_128x64_tn": {"flops": 1e9, "bytes": 1e7}}
    )
    lines = report.document._hot_spots(rows)
    assert lines[1] == (
        "  - ampere_sgemm_128x64_tn 12.50 (50%); 1,000.0 MFLOP, 100.0 FLOP/byte (shapes the profiler "
        "recorded), 80.00 GFLOP/s = 8% of the peak"
    )
    for rep in report.example_gpu_reports().values():  # GPU-shaped examples: a CUDA peak, no saved bytes
        assert all(
            r["device"] == "cuda" and r["peak_mem_mb"] > 0 and r["saved_mb"] is None for r in rep["rows"]
        )


# --------------------------------------------------------------------------- coverage guard


def test_chapter_10_takes_nccl_only_with_a_gpu_per_rank(monkeypatch):
    """With one visible GPU chapter 10 runs gloo on the CPU and says why (NCCL needs one GPU per
    rank); with two it takes NCCL, and asks for no more ranks than GPUs."""
    from helpers.distributed import _collectives, _fsdp, _launch

    for gpus, want in ((0, "cpu"), (1, "cpu"), (2, "cuda")):
        monkeypatch.setattr(torch.cuda, "is_available", lambda g=gpus: g > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda g=gpus: g)
        assert _launch.pick_device("auto")[0] == want == _launch.pick_device("cuda")[0]
        assert _fsdp._common(2, 4, 8, 2, "auto")[-1] == want
    with pytest.raises(ValueError, match="needs 3 GPUs; 2 visible"):
        _fsdp._common(3, 4, 8, 2, "cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    table = _collectives.measure_collectives([4096, 65536, 1 << 20], ["all_reduce"], repeats=3, device="auto")
    assert table.device == "cpu" and table.backend == "gloo" and len(table.rows) == 3


def test_find_syncs_lists_each_synchronizing_line_on_a_gpu(monkeypatch):
    """With a GPU visible the sync debug mode is switched on around ``fn`` and back to what it
    was; each of PyTorch's sync warnings is listed with its line (the warning is raised here as
    c10 raises it, since no CUDA runtime runs on this machine)."""
    import warnings

    from helpers import nvtx

    FakeGPU().install(monkeypatch)
    modes = []
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: 0)
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", modes.append)

    def step():
        warnings.warn("called a synchronizing CUDA operation", UserWarning, stacklevel=1)  # this line
        warnings.warn("some other warning", UserWarning, stacklevel=1)

    report = nvtx.find_syncs(step, device="cuda")
    assert report.checked and modes == ["warn", 0]
    assert len(report.syncs) == 1 and report.syncs[0][0].startswith("test_cuda_paths.py:")


def test_nsys_cuda_switches_are_only_arguments():
    """The nsys switches that name CUDA are text for the command line: nothing runs on a GPU."""
    from helpers.nsys._commands import extra_options

    assert extra_options(cuda_graph_trace="node", cuda_memory_usage=True) == [
        "--cuda-graph-trace=node",
        "--cuda-memory-usage=true",
    ]


COVERED = {  # function -> the test(s) above that exercise its CUDA branch
    "nvtx._syncdebug.find_syncs": "test_find_syncs_lists_each_synchronizing_line_on_a_gpu",
    "nsys._commands.extra_options": "test_nsys_cuda_switches_are_only_arguments",
    "distributed._launch.pick_device": "test_chapter_10_takes_nccl_only_with_a_gpu_per_rank",
    "distributed._fsdp._common": "test_chapter_10_takes_nccl_only_with_a_gpu_per_rank",
    "distributed._collectives.measure_collectives": "test_chapter_10_takes_nccl_only_with_a_gpu_per_rank",
    "bench._timing._Timer": "test_compare_speed_times_each_sample_with_cuda_events",
    "bench._timing.resolve_device": "test_auto_and_cuda_resolve_to_the_gpu_when_one_is_visible",
    "bench._timing.synchronize": "test_synchronize_waits_on_cuda_only",
    "bench._timing.measure": "test_measure_times_each_call_with_synchronised_cuda_events",
    "bench._syncs.profile_sync_events": (
        "test_profile_sync_events_counts_blocking_calls_and_drops_its_own_sync"
    ),
    "hardware.detect_gpu": "test_detect_gpu_reads_the_device_properties",
    "hardware._device_name": "test_measure_device_on_cuda_times_fp32_tf32_bf16_and_restores_tf32",
    "hardware.measure_device": "test_measure_device_on_cuda_times_fp32_tf32_bf16_and_restores_tf32",
    "env.setup": "test_setup_on_a_known_gpu_prints_its_datasheet_peaks",
    "env.Runtime": "test_setup_on_a_known_gpu_prints_its_datasheet_peaks",
    "mfu._measure.device_peak": "test_device_peak_on_a_known_gpu_is_the_dense_datasheet_figure",
    "mfu._measure.measure_training": (
        "test_measure_training_on_a_gpu_uses_bf16_autocast_and_the_bf16_datasheet_peak"
    ),
    "models.course_config": "test_course_config_on_a_gpu_is_gpt2_small",
    "nvtx._annotate.nvtx_backend": "test_annotate_pushes_and_pops_torch_cuda_nvtx_ranges",
    "nvtx._annotate.try_torch_nvtx": "test_annotate_pushes_and_pops_torch_cuda_nvtx_ranges",
    "nvtx._annotate._push": "test_a_failing_nvtx_call_disables_nvtx_but_not_the_range",
    "nvtx._annotate._pop": "test_annotate_pushes_and_pops_torch_cuda_nvtx_ranges",
    "nvtx._schedule.CudaProfilerRange": "test_cuda_profiler_range_syncs_then_starts_and_stops_the_capture",
    "nvtx._record.top_operators": "test_top_operators_adds_cuda_activity_on_a_gpu",
    "nvtx._loop._demo_main": "test_nvtx_demo_loop_runs_on_the_gpu_with_a_capture_window",
    "nsys._capture.example_or_capture": (
        "test_nsys_capture_is_used_on_a_gpu_and_falls_back_to_labelled_examples"
    ),
    "timeline._ddp.record_ddp": "test_record_ddp_on_cuda_runs_ranks_as_fresh_processes",
    "memory._cuda.cuda_memory": "test_cuda_memory_resets_the_peak_records_history_and_saves_a_snapshot",
    "checkpointing._plans.compare_plans": "test_compare_plans_on_a_gpu_reads_each_plans_cuda_peak",
    "compiling._report.pick_backend": "test_pick_backend_on_a_gpu_needs_triton",
    "hardware.last_level_cache": "test_the_copy_buffer_on_a_gpu_is_eight_times_its_l2_cache",
    "precision._training._dtype_steps": "test_measure_speedups_on_a_gpu_uses_the_tensor_core_datasheet_peak",
    "precision._training.measure_speedups": (
        "test_measure_speedups_on_a_gpu_uses_the_tensor_core_datasheet_peak"
    ),
    "report.tuning.baseline_config": "test_capstone_gpu_baseline_is_gpt2_small_shaped_with_pinned_workers",
    "report.tuning.tuning_steps": "test_capstone_gpu_baseline_is_gpt2_small_shaped_with_pinned_workers",
    "report.runner._device_name": "test_capstone_device_helpers_on_cuda",
    "report.runner._activities": "test_capstone_device_helpers_on_cuda",
    "report.runner._reset_peak": "test_capstone_device_helpers_on_cuda",
    "report.runner._peak_mib": "test_capstone_device_helpers_on_cuda",
    "report.provenance.device_model": "test_report_provenance_names_the_gpu_on_cuda",
    "report.document._hot_spots": "test_the_capstone_report_on_a_gpu_lists_kernels_and_the_gpu_idle_share",
    "report.examples._row": "test_the_capstone_report_on_a_gpu_lists_kernels_and_the_gpu_idle_share",
}
# CUDA code no CPU test can run, with the reason; the GPU script is where it is proven.
_NCCL = (
    "NCCL process group, one GPU per rank: needs >= 2 GPUs "
    "(pick_device, tested above, never picks it with fewer)"
)
NOT_ON_CPU = {
    "timeline._ddp._train": "NCCL process group, one GPU per rank: needs >= 2 GPUs (chapter 4 guards it)",
    "distributed._collectives._time_collectives": _NCCL,
    "distributed._compare.time_interleaved": _NCCL,
    "distributed._ddp_ranks._buckets_rank": _NCCL,
    "distributed._ddp_ranks._settings_rank": _NCCL,
    "distributed._fsdp._record_rank": _NCCL,
    "distributed._launch._rank_main": _NCCL,
    "distributed._launch.run_ranks": _NCCL,
    "distributed._torchrun.run_as_torchrun_rank": _NCCL,
    # torch.compile's CUDA paths compile real CUDA kernels (Inductor, Triton) and capture CUDA
    # graphs: a fake GPU cannot stand in; scripts/gpu_check.sh runs chapter 7 on a lent GPU
    "compiling._caching._one_start": "compiles CUDA kernels in a fresh process (Inductor + Triton)",
    "compiling._caching.cache_starts": "compiles CUDA kernels in fresh processes (Inductor + Triton)",
    "compiling._cudagraphs.cudagraph_pitfalls": "captures and replays real CUDA graphs",
}


def cuda_functions(src: Path = ROOT / "src" / "helpers") -> set[str]:
    """Top-level functions and classes of helpers whose code mentions torch.cuda or a "cuda" device.

    Modules of a chapter subpackage are named by their dotted path (``memory._cuda.cuda_memory``)."""
    found = set()
    for path in sorted(src.rglob("*.py")):
        module = ".".join(path.relative_to(src).with_suffix("").parts).removesuffix(".__init__")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if not isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                continue
            for sub in ast.walk(node):
                if isinstance(sub, ast.Expr) and isinstance(sub.value, ast.Constant):
                    continue  # docstrings
                attr = isinstance(sub, ast.Attribute) and sub.attr in ("cuda", "_nvtx")
                const = isinstance(sub, ast.Constant) and sub.value in ("cuda", "torch.cuda.nvtx")
                if (
                    attr
                    or const
                    or (isinstance(sub, ast.ImportFrom) and any(a.name == "_nvtx" for a in sub.names))
                ):
                    found.add(f"{module}.{node.name}")
                    break
    return found


def test_every_cuda_function_is_covered():
    found = cuda_functions()
    assert "bench._timing.measure" in found and "hardware.detect_gpu" in found  # the scan itself works
    missing = sorted(found - set(COVERED) - set(NOT_ON_CPU))
    assert not missing, (
        f"CUDA code without a CPU test in {Path(__file__).name}: {missing}; add a "
        "test with the FakeGPU above (or, with a reason, to NOT_ON_CPU)"
    )
    tests = {name for name, obj in globals().items() if name.startswith("test_") and callable(obj)}
    assert set(COVERED.values()) <= tests

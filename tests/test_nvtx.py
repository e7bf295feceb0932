"""helpers.nvtx: ranges in real CPU profiler traces, CPU-safe NVTX, steady-state schedules."""

import json

import pytest
import torch

from helpers import nvtx


def test_torch_nvtx_raises_on_this_cpu_build_but_annotate_does_not():
    if nvtx.nvtx_backend() == "torch.cuda.nvtx":
        pytest.skip("this torch build has NVTX")
    with pytest.raises(RuntimeError, match="NVTX functions not installed"):
        torch.cuda.nvtx.range_push("x")
    assert "RuntimeError" in nvtx.try_torch_nvtx()
    with nvtx.annotate("works"):  # the course helper must not fail where torch's NVTX does
        torch.ones(2).sum()


def test_annotate_rejects_empty_names():
    with pytest.raises(ValueError, match="non-empty"):
        nvtx.annotate("")


def test_annotated_loop_ranges_nest_in_a_real_cpu_trace(tmp_path):
    model, optimizer, batches = nvtx.demo_setup()
    path = nvtx.record_cpu_trace(
        lambda: nvtx.annotated_training_loop(model, optimizer, batches, 3), tmp_path / "t.json"
    )
    ranges = nvtx.trace_ranges(path)
    counts = nvtx.count_ranges(ranges)
    assert all(counts[name] == 3 for name in nvtx.STEP_RANGES)
    assert nvtx.opened_counts()["forward"] >= 3
    assert counts["Optimizer.step#SGD.step"] == 3  # torch's own range, inside ours
    steps = [r for r in ranges if r.name == "step"]
    assert all(r.depth == 0 and r.parent is None for r in steps)
    for r in ranges:
        if r.name in ("dataloader", "forward", "backward", "optimizer"):
            assert r.parent == "step" and r.depth == 1
        if r.name == "Optimizer.step#SGD.step":
            assert r.parent == "optimizer"
    for step in steps:
        order = [r.name for r in nvtx.ranges_inside(ranges, step) if r.depth == 1]
        assert order == ["dataloader", "forward", "backward", "optimizer"]


def test_decorator_form_nests_on_recursion(tmp_path):
    @nvtx.annotate("level")
    def down(n):
        return down(n - 1) if n else 0

    ranges = nvtx.trace_ranges(nvtx.record_cpu_trace(lambda: down(3), tmp_path / "t.json"), ["level"])
    assert [r.depth for r in ranges] == [0, 1, 2, 3]
    assert [r.parent for r in ranges] == [None, "level", "level", "level"]


def test_trace_ranges_on_a_hand_made_trace():
    events = [  # outer 0-100, a 10-40 (inside outer), b 40-100 (touches outer's end), c 120-130
        {"ph": "X", "cat": "user_annotation", "name": "outer", "ts": 0, "dur": 100, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "user_annotation", "name": "a", "ts": 10, "dur": 30, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "user_annotation", "name": "b", "ts": 40, "dur": 60, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "user_annotation", "name": "c", "ts": 120, "dur": 10, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 15, "dur": 5, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "user_annotation", "name": "other", "ts": 20, "dur": 5, "pid": 1, "tid": 2},
    ]
    got = {(r.name, r.depth, r.parent) for r in nvtx.trace_ranges({"traceEvents": events})}
    assert got == {
        ("outer", 0, None),
        ("a", 1, "outer"),
        ("b", 1, "outer"),
        ("c", 0, None),
        ("other", 0, None),
    }


def test_trace_ranges_errors_are_one_line(tmp_path):
    """Chapter 4's trace reader reads the file, with its errors (helpers.timeline's TraceError)."""
    from helpers.timeline._trace_read import TraceError

    with pytest.raises(FileNotFoundError, match=r"trace file not found.*export_chrome_trace"):
        nvtx.trace_ranges(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    with pytest.raises(TraceError, match="not a readable JSON chrome trace") as err:
        nvtx.trace_ranges(bad)
    assert "\n" not in str(err.value) and isinstance(err.value, ValueError)
    bad.write_text(json.dumps({"events": []}))
    with pytest.raises(ValueError, match="traceEvents"):
        nvtx.trace_ranges(bad)
    with pytest.raises(ValueError, match="traceEvents"):
        nvtx.trace_ranges({"events": []})


def test_steady_state_schedule_matches_a_real_profiler_run(tmp_path):
    schedule = nvtx.steady_state_schedule(first_recorded_step=4, active=3, warmup=1)
    assert nvtx.recorded_steps(schedule, 12) == [4, 5, 6]
    assert nvtx.schedule_actions(schedule, 8) == ["NONE"] * 3 + [
        "WARMUP",
        "RECORD",
        "RECORD",
        "RECORD_AND_SAVE",
        "NONE",
    ]
    model, optimizer, batches = nvtx.demo_setup(n_batches=9)
    trace = nvtx.record_training_trace(model, optimizer, batches, 9, schedule, tmp_path / "t.json")
    ranges = nvtx.trace_ranges(trace)
    assert [r.name for r in ranges if r.name.startswith("ProfilerStep#")] == [
        "ProfilerStep#4",
        "ProfilerStep#5",
        "ProfilerStep#6",
    ]
    assert nvtx.count_ranges(ranges)["forward"] == 3  # only the recorded steps are in the trace


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"first_recorded_step": 10, "active": 8}, "3-5"),
        ({"first_recorded_step": 10, "warmup": 0}, "warm-up"),
        ({"first_recorded_step": 0}, "no room"),
    ],
)
def test_steady_state_kwargs_refuses_bad_windows(kwargs, match):
    with pytest.raises(ValueError, match=match):
        nvtx.steady_state_kwargs(**kwargs)


def test_steady_state_kwargs_by_hand():
    assert nvtx.steady_state_kwargs(10, 5, 1) == {
        "skip_first": 9,
        "wait": 0,
        "warmup": 1,
        "active": 5,
        "repeat": 1,
    }


def test_cuda_profiler_range_is_skipped_without_cuda():
    window = nvtx.CudaProfilerRange(2, 3)
    model, optimizer, batches = nvtx.demo_setup()
    nvtx.annotated_training_loop(model, optimizer, batches, 6, window=window)
    assert list(window.steps) == [2, 3]
    assert len(window.events) == 2 and window.events[0].startswith("step 2: cudaProfilerStart")
    assert window.events[1].startswith("step 3: cudaProfilerStop")
    if not torch.cuda.is_available():
        assert all("skipped (no CUDA device)" in e for e in window.events)
    with pytest.raises(ValueError):
        nvtx.CudaProfilerRange(5, 4)


def test_annotate_survives_an_nvtx_library_that_raises(monkeypatch, tmp_path):
    def broken(_name):
        raise RuntimeError("NVTX functions not installed")

    monkeypatch.setattr(nvtx._annotate, "nvtx_backend", lambda: "torch.cuda.nvtx")
    monkeypatch.setattr(torch.cuda.nvtx, "range_push", broken)
    monkeypatch.setattr(nvtx._annotate, "_disabled", False)
    ranges = nvtx.trace_ranges(
        nvtx.record_cpu_trace(lambda: nvtx.annotate("still")(lambda: 1)(), tmp_path / "t.json")
    )
    assert [r.name for r in ranges] == ["still"]  # the profiler range is recorded anyway
    assert nvtx._annotate._disabled  # and NVTX is switched off instead of failing every range


def test_profiling_writes_nothing_to_stderr_but_real_errors_pass():
    """torch's profiler prints 'USDT ... profiler_start' at the C level; the recorders hide those
    notices (stock nbgrader scores a graded cell with stderr output 0) and nothing else."""
    import subprocess
    import sys

    code = (
        "import os\n"
        "from helpers import nvtx, _quiet\n"
        "m, o, b = nvtx.demo_setup(n_batches=4)\n"
        "nvtx.record_cpu_trace(lambda: nvtx.annotated_training_loop(m, o, b, 2))\n"
        "nvtx.top_operators(lambda: None)\n"
        "with _quiet.profiler_notices_hidden():\n"
        "    os.write(2, b'USDT:2026-01-01 1:1 X.cpp:1] profiler_start\\n')\n"
        "    os.write(2, b'a real native error\\n')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "USDT" not in done.stderr and "profiler_start" not in done.stderr
    assert done.stderr.strip() == "a real native error"


def test_demo_command_bad_window_is_one_line(capsys):
    with pytest.raises(SystemExit) as done:
        nvtx._demo_main(["--first", "5", "--last", "2"])
    err = capsys.readouterr().err
    assert done.value.code == 2 and "need 0 <= --first <= --last < --steps" in err

"""Timeline helpers (chapter 4) against hand calculations and against HTA 0.5.0's figures on two
real multi-GPU NCCL traces (../shared/traces/README.md)."""

import gzip
import json
import math
import time

import pytest
from conftest import HTA_FIGURES, ROOT, shared_trace

from helpers import timeline as tl

# ---------------------------------------------------------------- interval algebra by hand


def test_merge_intervals_joins_overlapping_and_touching_and_sorts():
    assert tl.merge_intervals([(5, 7), (0, 2), (1, 3), (3, 4), (6, 6)]) == [(0, 4), (5, 7)]
    assert tl.merge_intervals([]) == []
    assert tl.union_length([(0, 10), (2, 3), (9, 12)]) == 12


def test_overlap_exposed_subtract_by_hand():
    comm = [(0, 10), (20, 30)]
    compute = [(5, 25)]
    assert tl.intersect(comm, compute) == [(5, 10), (20, 25)]
    assert tl.overlap(comm, compute) == 10
    assert tl.exposed(comm, compute) == 10  # 0-5 and 25-30
    assert tl.subtract(comm, compute) == [(0, 5), (25, 30)]
    assert tl.exposed([(0, 4), (2, 6)], []) == 6  # overlapping comm counted once
    assert tl.gaps([(1, 2), (4, 5)], 0, 6) == [(0, 1), (2, 4), (5, 6)]


def test_cut_equals_clip_of_a_union():
    merged = tl.merge_intervals([(0, 3), (5, 9), (12, 20)])
    for lo, hi in [(1, 6), (3, 5), (-5, 100), (8, 13), (20, 30)]:
        assert tl.cut(merged, lo, hi) == tl.merge_intervals(tl.clip(merged, lo, hi))


def test_bad_intervals_are_one_line_errors():
    with pytest.raises(ValueError, match="ends before it starts"):
        tl.merge_intervals([(3, 1)])
    with pytest.raises(ValueError, match=r"\(start, end\) pair"):
        tl.union_length([5])


# ---------------------------------------------------------------- cost models by hand


def test_alpha_beta_and_ring_allreduce_by_hand():
    assert tl.alpha_beta_time(1e6, 10e-6, 1e9) == pytest.approx(10e-6 + 1e-3)
    # 4 ranks: 2*(4-1) = 6 steps of (10 µs + 250 kB / 1 GB/s = 250 µs) = 1.56 ms
    assert tl.ring_allreduce_time(1e6, 4, 10e-6, 1e9) == pytest.approx(6 * 260e-6)
    assert tl.ring_allreduce_time(1e6, 1, 10e-6, 1e9) == 0.0
    with pytest.raises(ValueError):
        tl.ring_allreduce_time(1e6, 0, 1e-6, 1e9)


def test_small_buckets_pay_alpha_many_times():
    assert tl.bucket_sizes(10, 4) == [4, 4, 2]
    one = tl.bucketed_allreduce_time(100e6, 100e6, 8, 20e-6, 10e9)
    many = tl.bucketed_allreduce_time(100e6, 1e6, 8, 20e-6, 10e9)
    # same bytes, 99 extra buckets each paying 2(n-1) = 14 alphas
    assert many - one == pytest.approx(99 * 14 * 20e-6)


def test_overlapped_backward_one_big_bucket_is_fully_exposed():
    comm = tl.ring_allreduce_time(100e6, 8, 20e-6, 10e9)
    end, exposed_s = tl.overlapped_backward(0.1, 100e6, 100e6, 8, 20e-6, 10e9)
    assert exposed_s == pytest.approx(comm) and end == pytest.approx(0.1 + comm)
    _, medium = tl.overlapped_backward(0.1, 100e6, 10e6, 8, 20e-6, 10e9)
    assert medium < exposed_s  # buckets start during backward


def test_critical_path_worked_example():
    # backward 40 ms, first 30 ms can hide communication, communication 35 ms
    assert tl.min_exposed(35, 30) == 5
    assert tl.max_saving(35, 20, 30) == 5  # not 15
    assert tl.max_saving(50, 40, 30) == 10
    assert tl.min_exposed(20, 30) == 0


def test_pipeline_bubble_formula_and_simulation_agree():
    assert tl.bubble_fraction(4, 8) == pytest.approx(3 / 11)
    assert tl.bubble_fraction(1, 5) == 0
    for schedule in ("gpipe", "1f1b"):
        for p, m in [(2, 1), (4, 4), (4, 8), (3, 7)]:
            sim = tl.simulate_pipeline(p, m, schedule)
            assert sim.bubble_fraction == pytest.approx(tl.bubble_fraction(p, m))
            assert sim.makespan == pytest.approx((m + p - 1) * 3.0)


def test_1f1b_warms_up_with_p_minus_stage_minus_one_forwards():
    sim = tl.simulate_pipeline(4, 8, "1f1b")
    kinds = ["".join(op[2] for op in ops[:5]) for ops in sim.ops]
    assert kinds == ["FFFFB", "FFFBF", "FFBFB", "FBFBF"]


def test_min_microbatches():
    assert tl.min_microbatches(4, 0.25) == 9  # 3/(9+3) = 0.25
    assert tl.bubble_fraction(4, 8) > 0.25
    assert tl.min_microbatches(8, 0.1) == 63
    with pytest.raises(ValueError):
        tl.min_microbatches(4, 0)


# ---------------------------------------------------------------- loading


def _write(path, events, **top):
    with gzip.open(path, "wt") as fh:
        json.dump({"traceEvents": events, **top}, fh)
    return path


def test_missing_and_damaged_files_are_one_line_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="trace file not found"):
        tl.load_trace(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [')
    with pytest.raises(ValueError, match="not a readable JSON chrome trace") as err:
        tl.load_trace(bad)
    assert "\n" not in str(err.value)
    (tmp_path / "other.json").write_text('{"hello": 1}')
    with pytest.raises(ValueError, match="no 'traceEvents'"):
        tl.load_trace(tmp_path / "other.json")
    gz = tmp_path / "trunc.json.gz"
    gz.write_bytes(gzip.compress(b'{"traceEvents": []}')[:-6])
    with pytest.raises(ValueError, match="not a readable"):
        tl.load_trace(gz)
    with pytest.raises(ValueError, match="no numeric"):
        tl.load_trace(_write(tmp_path / "x.json.gz", [{"ph": "X", "name": "a", "ts": "late"}]))
    (tmp_path / "d").mkdir()
    with pytest.raises(FileNotFoundError, match=r"no \.json"):
        tl.load_trace(tmp_path / "d")


def _cpu_rank(rank, slow):
    """A tiny hand-made CPU trace: one step of 100 µs; comm 40-90 on a gloo thread."""
    main, gloo = 1, 2
    ev = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#7",
            "ts": 0,
            "dur": 100,
            "pid": 9,
            "tid": main,
        },
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "enumerate(DataLoader)#_Iter.__next__",
            "ts": 0,
            "dur": 10,
            "pid": 9,
            "tid": main,
        },
        {"ph": "X", "cat": "cpu_op", "name": "aten::stack", "ts": 2, "dur": 5, "pid": 9, "tid": main},
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::addmm",
            "ts": 20 + slow,
            "dur": 40,
            "pid": 9,
            "tid": main,
        },
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "c10d::allreduce_",
            "ts": 60 + slow,
            "dur": 1,
            "pid": 9,
            "tid": main,
        },
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "gloo:all_reduce",
            "ts": 40,
            "dur": 50,
            "pid": 9,
            "tid": gloo,
        },
        {"ph": "M", "name": "thread_name", "pid": 9, "tid": gloo, "args": {"name": "gloo"}},
    ]
    return ev, {"distributedInfo": {"rank": rank, "world_size": 2, "backend": "gloo"}}


def test_cpu_step_breakdown_by_hand(tmp_path):
    ev, top = _cpu_rank(1, 0)
    t = tl.load_trace(_write(tmp_path / "r1.json.gz", ev, **top))
    assert not t.is_gpu and t.rank == 1 and t.backend == "gloo"
    (b,) = tl.step_breakdown(t)
    assert b.step == "ProfilerStep#7" and b.duration_us == 100
    assert b.compute_us == 40  # addmm 20-60; aten::stack is inside the data loader
    assert b.communication_us == 50  # gloo 40-90 ∪ c10d 60-61 (inside it)
    assert b.exposed_comm_us == 30  # 60-90
    assert b.idle_us == 30 and b.data_wait_us == 10 and b.host_overhead_us == 20  # 0-20, 90-100
    assert b.compute_us + b.exposed_comm_us + b.other_us + b.idle_us == pytest.approx(b.duration_us)
    verdict = tl.classify(b)
    assert verdict.label == "communication-bound" and verdict.evidence["exposed_comm"] == 30 / 100


def test_folder_of_ranks_sorted_by_rank_and_straggler(tmp_path):
    for rank, slow in [(1, 0), (0, 25)]:
        ev, top = _cpu_rank(rank, slow)
        _write(tmp_path / f"trace_{1 - rank}.json.gz", ev, **top)
    traces = tl.load_trace(tmp_path)
    assert [t.rank for t in traces] == [0, 1]
    by_rank = {t.rank: tl.step_breakdown(t) for t in traces}
    assert tl.straggler(by_rank) == 0  # rank 0 computes late: less of its step is exposed comm
    head, *rows, last = tl.rank_table(traces).split("\n")
    assert head.split() == [
        "rank",
        "steps",
        "step",
        "ms",
        "compute",
        "comm",
        "exposed",
        "data",
        "host",
        "verdict",
    ]
    # by hand, µs of the one step: rank 0 computes 45-85, rank 1 20-60; comm 40-90 on both; the
    # loader 0-10. Exposed comm: rank 0 40-45 and 85-90, rank 1 60-90; host = idle - data.
    want = {0: (100, 40, 50, 5 + 5, 10, 100 - 40 - 10 - 10), 1: (100, 40, 50, 30, 10, 100 - 40 - 30 - 10)}
    for line, (rank, us) in zip(rows, want.items(), strict=True):
        cells = line.split()
        assert cells[:2] == [str(rank), "1"]
        assert [float(c) for c in cells[2:8]] == pytest.approx([u / 1e3 for u in us], abs=0.005)
    assert [r.split(maxsplit=8)[8] for r in rows] == ["host-bound", "waiting for rank 0"]
    # rank 0's own time 100 - 10 leads rank 1's 100 - 30; one step has no spread, so the margin
    # is the 5 % floor of rank 0's own time
    lead, floor = (100 - 10) - (100 - 30), 0.05 * (100 - 10)
    assert last == (
        f"straggler: rank 0 (rank 0 leads the others by {lead / 1e3:.2f} ms of own time per "
        f"step over 1 steps; margin {floor / 1e3:.2f} ms (5 % floor {floor / 1e3:.2f} ms, "
        "2 standard errors of the per-step leads 0.00 ms))"
    )


def _step(**us):
    base = dict(
        step="s",
        rank=0,
        basis="gpu",
        start_us=0,
        duration_us=100,
        compute_us=0,
        communication_us=0,
        exposed_comm_us=0,
        other_us=0,
        idle_us=0,
        data_wait_us=0,
        host_overhead_us=0,
    )
    return tl.StepBreakdown(**{**base, **us})


def test_classify_rules_measure_waste_against_compute():
    assert tl.classify(_step(compute_us=90, exposed_comm_us=10)).label == "compute-bound"  # 11%
    assert tl.classify(_step(compute_us=50, data_wait_us=30, host_overhead_us=20)).label == "data-bound"
    assert tl.classify(_step(compute_us=40, host_overhead_us=35)).label == "host-bound"
    assert tl.classify(_step(compute_us=60, bubble_us=40)).label == "pipeline-bubble"
    assert tl.classify(_step(compute_us=85, exposed_comm_us=15), threshold=0.1).label == "communication-bound"
    # 17 µs of data wait in a 100 µs step is 17% of the step but 21% of the 80 µs of compute
    assert tl.classify(_step(compute_us=80, data_wait_us=17, duration_us=100)).label == "data-bound"
    assert tl.classify(_step(compute_us=0, duration_us=10, host_overhead_us=10)).label == "host-bound"
    assert tl.classify(_step(compute_us=10, duration_us=10)).label == "compute-bound"


def test_the_20_percent_rule_is_strict_everywhere():
    """One boundary for the course: a waste of exactly 20 % of compute is not a bottleneck, in
    the timeline's classification and in the capstone's data-stall rule alike."""
    from helpers import report

    at = _step(compute_us=100, data_wait_us=20, duration_us=120)
    assert tl.classify(at).label == "compute-bound"
    assert tl.classify(_step(compute_us=100, data_wait_us=20.001, duration_us=120)).label == "data-bound"
    assert report.data_stall([20.0], [100.0])[1] is False and report.data_stall([20.001], [100.0])[1]
    phases = {"data": 20.0, "forward": 40.0, "backward": 50.0, "optimizer": 10.0, "other": 0.0}
    assert report.bottleneck_class(phases) != "data-bound"


def test_a_rank_that_waits_for_a_straggler_says_so():
    fast = [_step(rank=0, compute_us=40, exposed_comm_us=55, duration_us=100)]
    slow = [_step(rank=1, compute_us=40, exposed_comm_us=5, host_overhead_us=55, duration_us=100)]
    verdicts = tl.classify_ranks({0: fast, 1: slow})
    assert verdicts[0].label == "waiting for rank 1" and "rank 1" in verdicts[0].reason
    assert verdicts[1].label == "host-bound"
    alone = tl.classify_ranks({0: fast})
    assert alone[0].label == "communication-bound"
    # exposed communication that is not waiting (both ranks equal) stays communication-bound
    even = tl.classify_ranks({0: fast, 1: [_step(rank=1, compute_us=40, exposed_comm_us=55)]})
    assert {v.label for v in even.values()} == {"communication-bound"}


def test_bucket_and_stage_decisions_by_hand():
    # latency share α/(α + B/(n·bw)) = 10% at B = n·bw·α·9 = 8 · 40e9 · 30e-6 · 9 = 86.4 MB
    assert tl.min_bucket_bytes(8, 30e-6, 40e9, 0.1) == pytest.approx(86.4e6)
    assert tl.latency_share(86.4e6, 8, 30e-6, 40e9) == pytest.approx(0.1)
    assert tl.min_bucket_bytes(4, 10e-6, 100e9, 0.5) == pytest.approx(4 * 10e-6 * 100e9)
    assert tl.optimal_splits([3, 1, 1, 1, 3, 1], 3) == [[1, 3, 2], [2, 2, 2]]
    assert tl.balance_stages([1, 1, 1, 1, 8], 2) == [4, 1]
    assert tl.stage_times([1, 2, 3], [2, 1]) == [3, 3]
    with pytest.raises(ValueError, match="at least one layer"):
        tl.stage_times([1, 2, 3], [3, 0])
    with pytest.raises(ValueError, match="cannot split"):
        tl.optimal_splits([1, 2], 3)


def test_faster_backward_can_expose_communication():
    before = tl.step_with_overlap(0.020, 0.040, 0.75, 0.035)  # window 30 ms: 5 ms exposed
    after = tl.step_with_overlap(0.020, 0.020, 0.75, 0.035)  # window 15 ms: 20 ms exposed
    # exposed = comm - window (never below 0); step = forward + backward + exposed
    exposed_before, exposed_after = 0.035 - 0.75 * 0.040, 0.035 - 0.75 * 0.020
    assert before == pytest.approx((0.020 + 0.040 + exposed_before, exposed_before))
    assert after == pytest.approx((0.020 + 0.020 + exposed_after, exposed_after))


def test_unequal_stages_and_interleaving():
    even = tl.simulate_pipeline(4, 8)
    uneven = tl.simulate_pipeline(4, 8, stage_scale=[1, 1, 1.5, 1])
    assert uneven.makespan > even.makespan and uneven.bubble_fraction > even.bubble_fraction
    assert tl.bubble_fraction(4, 8, chunks=2) == pytest.approx(3 / 19)
    with pytest.raises(ValueError, match="stage_scale"):
        tl.simulate_pipeline(4, 8, stage_scale=[1, 1])


# ---------------------------------------------------------------- HTA agreement on real traces


@pytest.mark.parametrize("name", sorted(HTA_FIGURES))
def test_temporal_breakdown_and_overlap_match_hta(name):
    path = shared_trace(name)
    idle, compute, non_compute, kernel_us, overlap_pct = HTA_FIGURES[name]
    t = tl.load_trace(path)
    assert t.is_gpu
    tb = tl.temporal_breakdown(t)
    assert tb.basis == "gpu kernels"
    assert abs(tb.idle_pct - idle) <= 0.5
    assert abs(tb.compute_pct - compute) <= 0.5
    assert abs(tb.non_compute_pct - non_compute) <= 0.5
    assert tb.kernel_time_us == pytest.approx(kernel_us, rel=0.005)
    assert abs(tl.comm_comp_overlap(t) - overlap_pct) <= 0.5
    assert tl.comm_comp_overlap([t]) == {t.rank: tl.comm_comp_overlap(t)}


@pytest.mark.parametrize("name", sorted(HTA_FIGURES))
def test_gpu_step_breakdown_adds_up(name):
    path = shared_trace(name)
    t = tl.load_trace(path)
    steps = tl.step_breakdown(t)
    assert [s.step for s in steps] == [s.name for s in t.steps()]
    for b in steps:
        assert b.basis == "gpu" and b.duration_us > 0
        total = b.compute_us + b.exposed_comm_us + b.other_us + b.idle_us
        assert total == pytest.approx(b.duration_us, rel=1e-9)
        assert b.exposed_comm_us <= b.communication_us
        assert b.idle_us == pytest.approx(b.data_wait_us + b.host_overhead_us)
        assert tl.classify(b).label in (
            "compute-bound",
            "communication-bound",
            "host-bound",
            "data-bound",
            "pipeline-bubble",
        )


def test_a_constructed_gpu_trace_gives_the_hand_computed_breakdown(tmp_path):
    """The GPU path without the shared traces: figures worked out by hand on five events."""

    def gpu(name, ts, dur, stream, corr, cat="kernel"):
        return {
            "ph": "X",
            "cat": cat,
            "name": name,
            "ts": ts,
            "dur": dur,
            "pid": 0,
            "tid": stream,
            "args": {"stream": stream, "correlation": corr},
        }

    ev = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::mm",
            "ts": 0,
            "dur": 10,
            "pid": 1,
            "tid": 1,
            "args": {"correlation": 1},
        },
        gpu("sgemm_kernel", 10, 40, 7, 1),
        gpu("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 30, 40, 13, 2),
        gpu("Memcpy HtoD (Pageable -> Device)", 80, 10, 7, 3, cat="gpu_memcpy"),
        gpu("elementwise_kernel", 100, 20, 7, 4),
    ]
    t = tl.load_trace(_write(tmp_path / "gpu.json.gz", ev))
    tb = tl.temporal_breakdown(t)
    # GPU span 10..120 = 110 µs; busy [10, 70] + [80, 90] + [100, 120] = 90 µs
    assert t.is_gpu and tb.basis == "gpu kernels" and tb.kernel_time_us == 110
    assert tb.idle_pct == round(100 * 20 / 110, 2)  # percentages are kept to 2 decimals, as HTA
    assert tb.compute_pct == round(100 * 60 / 110, 2)  # the two compute kernels
    assert tb.non_compute_pct == round(100 * 30 / 110, 2)  # NCCL outside compute + the copy
    assert tl.comm_comp_overlap(t) == pytest.approx(50.0)  # 20 of the all-reduce's 40 µs


# ---------------------------------------------------------------- the traces this project ships


def test_shipped_cpu_traces_load_and_show_the_straggler():
    balanced = tl.load_trace(tl.example_traces("ddp_balanced"))
    slow = tl.load_trace(tl.example_traces("ddp_one_slow"))
    for traces in (balanced, slow):
        assert [t.rank for t in traces] == [0, 1]
        assert all(t.backend == "gloo" and not t.is_gpu and len(t.steps()) == 3 for t in traces)
        for t in traces:
            tb = tl.temporal_breakdown(t)
            assert tb.basis == "cpu threads" and 0 < tb.compute_pct < 100
            assert 0 <= tl.comm_comp_overlap(t) <= 100


def test_shipped_straggler_is_clearly_visible():
    """The recording script's acceptance rules hold for the files that ship."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("record", ROOT / "scripts" / "record_timeline_examples.py")
    record = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(record)
    balanced = tl.load_trace(tl.example_traces("ddp_balanced"))
    slow = tl.load_trace(tl.example_traces("ddp_one_slow"))
    assert record.problems(balanced, slow, record.SLOW_RANK, tl.EXAMPLE_SLOW_S) == []
    by_rank = {t.rank: tl.step_breakdown(t) for t in slow}
    late = tl.straggler(by_rank)
    fast = 1 - late
    exposed = {r: tl.mean_step(b).exposed_comm_us for r, b in by_rank.items()}
    assert exposed[fast] > 2 * exposed[late]  # the fast rank waits in the all-reduce
    assert exposed[fast] >= 0.7 * tl.EXAMPLE_SLOW_S * 1e6
    assert tl.classify_ranks(by_rank)[fast].label == f"waiting for rank {late}"
    assert tl.classify(tl.mean_step(by_rank[fast])).label == "communication-bound"  # alone, it looks so


def test_cpu_only_trace_without_anything_is_a_clear_error(tmp_path):
    t = tl.load_trace(
        _write(
            tmp_path / "e.json.gz",
            [{"ph": "X", "cat": "user_annotation", "name": "hello", "ts": 0, "dur": 5, "pid": 1, "tid": 1}],
        )
    )
    with pytest.raises(ValueError, match="neither GPU kernels nor CPU operators"):
        tl.temporal_breakdown(t)
    with pytest.raises(ValueError, match="overlap is undefined"):
        ev, top = _cpu_rank(0, 0)
        ev = [e for e in ev if "gloo" not in e.get("name", "") and "c10d" not in e.get("name", "")]
        tl.comm_comp_overlap(tl.load_trace(_write(tmp_path / "nocomm.json.gz", ev, **top)))


def test_plots_draw_rows_per_rank_and_stream():
    import matplotlib

    matplotlib.use("Agg")
    traces = tl.load_trace(tl.example_traces("ddp_one_slow"))
    ax = tl.plot_timeline(traces)
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert any(lb.startswith("rank 0") for lb in labels) and any(lb.startswith("rank 1") for lb in labels)
    ax2 = tl.plot_pipeline(tl.simulate_pipeline(4, 6))
    assert len(ax2.get_yticklabels()) == 4
    assert math.isclose(tl.simulate_pipeline(4, 6).bubble_fraction, 3 / 9)


# ---------------------------------------------------------------- the live recorder (real processes)


def test_record_ddp_two_gloo_ranks_with_a_straggler(tmp_path):
    runs = tl.record_ddp(tmp_path, slow_rank=1, steps=2, layers=2, width=64, batch=16)
    assert sorted(runs) == ["balanced", "one_slow"]
    for paths in runs.values():
        traces = tl.load_trace(paths)
        assert [t.rank for t in traces] == [0, 1]
        for t in traces:
            assert t.backend == "gloo" and t.world_size == 2 and len(t.steps()) == 2
            assert any(e.name.startswith("gloo:") for e in t.events)  # the collectives are there
            assert all(b.communication_us > 0 for b in tl.step_breakdown(t))


def test_record_ddp_rejects_bad_arguments():
    with pytest.raises(ValueError, match="slow_rank"):
        tl.record_ddp(world_size=2, slow_rank=2)
    with pytest.raises(ValueError, match="layers"):
        tl.record_ddp(layers=0)
    with pytest.raises(ValueError, match="device"):
        tl.record_ddp(device="tpu")


def test_annotated_steps_are_used_when_there_is_no_profiler_step(tmp_path):
    ev = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": f"train_step_{i:04d}",
            "ts": 100 * i,
            "dur": 90,
            "pid": 1,
            "tid": 1,
        }
        for i in range(3)
    ]
    ev += [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 100 * i + 10, "dur": 50, "pid": 1, "tid": 1}
        for i in range(3)
    ]
    t = tl.load_trace(_write(tmp_path / "a.json.gz", ev))
    steps = tl.step_breakdown(t)
    assert [s.step for s in steps] == ["train_step_0000", "train_step_0001", "train_step_0002"]
    assert all(s.compute_us == 50 and s.host_overhead_us == 40 for s in steps)
    assert tl.classify(steps[0]).label == "host-bound"
    (whole,) = tl.step_breakdown(t, step_pattern="^nothing$")  # no match: the whole trace
    assert whole.step == "whole trace" and whole.compute_us == 150


def test_gantt_rows_include_cuda_streams():
    import matplotlib

    matplotlib.use("Agg")
    path = shared_trace("gpu_a100_2rank_rank0.json.gz")
    ax = tl.plot_timeline(tl.load_trace(path))
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert any("stream" in lb for lb in labels)


def test_intervals_of_a_class_per_step(tmp_path):
    ev, top = _cpu_rank(0, 0)
    t = tl.load_trace(_write(tmp_path / "r.json.gz", ev, **top))
    assert tl.intervals(t, "comm") == [(40, 90)]
    assert tl.intervals(t, "compute", step=0) == [(20, 60)]
    assert tl.intervals(t, "data") == [(0, 10)]
    tl.intervals(t, "comm").append((0, 1))  # a copy: the analysis is unchanged
    assert tl.step_breakdown(t)[0].communication_us == 50
    with pytest.raises(IndexError):
        tl.intervals(t, "comm", step=3)
    with pytest.raises(ValueError, match="unknown interval kind 'gpu'"):
        tl.intervals(t, "gpu")


def _ranks(own_by_rank, exposed=20.0):
    return {
        r: [_step(duration_us=own + exposed, compute_us=0.7 * own, exposed_comm_us=exposed) for own in times]
        for r, times in own_by_rank.items()
    }


def test_a_straggler_leads_beyond_the_floor_and_the_steps_spread():
    assert tl.straggler(_ranks({0: [40.0, 41.0, 39.0], 1: [20.0, 21.0, 20.0]})) == 0
    # the other rank was slower in one step: the spread swallows the lead, the run is balanced
    assert tl.straggler(_ranks({0: [100.0, 60.0], 1: [50.0, 90.0]})) is None
    # behind in every step, but by 3 % of its own time: under the 5 % floor
    assert tl.straggler(_ranks({0: [100.0, 101.0, 102.0], 1: [97.0, 98.0, 99.0]})) is None
    assert tl.straggler(_ranks({0: [10.0]})) is None  # one rank: nobody waits for it
    e = tl.straggler_evidence(_ranks({3: [10.0, 12.0, 11.0], 5: [14.0, 13.0, 12.5]}))
    assert e["rank"] == 5 and e["steps"] == 3
    leads = [4.0, 1.0, 1.5]  # rank 5's own time minus rank 3's, step by step
    mean = sum(leads) / 3
    sd = (sum((x - mean) ** 2 for x in leads) / 2) ** 0.5
    assert e["lead"] == pytest.approx(mean) and e["noise"] == pytest.approx(2 * sd / 3**0.5)
    assert e["margin"] == max(e["noise"], e["floor"])
    # ahead in every step, but by a lead the spread explains: balanced
    assert tl.straggler(_ranks({0: [130.0, 101.0, 101.0], 1: [100.0, 100.0, 100.0]})) is None
    # behind in one step, yet a lead well beyond the spread: a straggler
    assert tl.straggler(_ranks({0: [99.0, 130.0, 130.0, 130.0, 130.0], 1: [100.0] * 5})) == 0
    own_5, own_3 = (14.0 + 13.0 + 12.5) / 3, (10.0 + 12.0 + 11.0) / 3  # mean own time per step
    assert e["lead"] == pytest.approx(own_5 - own_3) and e["floor"] == pytest.approx(0.05 * own_5)
    with pytest.raises(ValueError, match="at least one rank"):
        tl.straggler({})


def test_a_balanced_run_names_no_rank_as_waited_for():
    balanced = _ranks({0: [100.0, 60.0], 1: [50.0, 90.0]}, exposed=40.0)
    assert all(not v.label.startswith("waiting") for v in tl.classify_ranks(balanced).values())
    slow = _ranks({0: [100.0, 100.0], 1: [40.0, 42.0]}, exposed=40.0)
    for b in slow[1]:  # the fast rank waits: most of its step is exposed communication
        object.__setattr__(b, "exposed_comm_us", 70.0)
    assert tl.classify_ranks(slow)[1].label == "waiting for rank 0"


# ---------------------------------------------------------------- record_ddp's rendezvous port

TAKEN = (
    "rank 0: DistNetworkError: The server socket has failed to listen on any local network "
    "address. port: {}, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use"
)


def test_a_rendezvous_port_taken_meanwhile_is_tried_again_on_a_new_one():
    from helpers.timeline import _ddp

    ports, tried = iter(range(5001, 5100)), []

    def run(port):
        tried.append(port)
        return [TAKEN.format(port)] if len(tried) < 3 else []

    assert _ddp._with_free_port(run, tries=3, pick=lambda: next(ports)) == []
    assert tried == [5001, 5002, 5003]  # a new port each time, the third run succeeded


def test_other_failures_are_not_retried_and_the_tries_are_bounded():
    from helpers.timeline import _ddp

    ports, tried = iter(range(6001, 6100)), []

    def failing(errors):
        def run(port):
            tried.append(port)
            return [e.format(port) for e in errors]

        return run

    boom = ["rank 1: RuntimeError: boom"]
    assert _ddp._with_free_port(failing(boom), tries=3, pick=lambda: next(ports)) == boom
    assert tried == [6001]
    tried.clear()
    assert _ddp._with_free_port(failing([]), pick=lambda: next(ports)) == [] and tried == [6002]
    tried.clear()
    errors = _ddp._with_free_port(failing([TAKEN]), pick=lambda: next(ports))
    assert tried == [6003, 6004, 6005] and _ddp.PORT_TRIES == len(tried)
    assert errors == [
        TAKEN.format(6005),
        f"the rendezvous port was taken by another process on each of {_ddp.PORT_TRIES} tries",
    ]


def test_a_taken_port_is_recognised_in_torchs_own_error():
    """The message torch gives when rank 0's store cannot listen (a port another process holds),
    as a forked rank reports it; other failures are not taken for it."""
    import socket

    import torch.distributed as dist

    from helpers.timeline import _ddp

    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        with pytest.raises(dist.DistNetworkError) as err:
            dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
    first = str(err.value).strip().splitlines()[0]
    assert _ddp._port_taken([f"rank 0: {type(err.value).__name__}: {first}"])
    assert not _ddp._port_taken(["rank 1: RuntimeError: boom", "the run took longer than 120 s"])
    assert not _ddp._port_taken([])


def test_waiting_for_ranks_ends_when_all_end_or_one_fails_or_time_runs_out():
    from helpers.timeline import _ddp

    def scripted(*steps):
        seen = []

        def codes():
            seen.append(steps[len(seen)])
            return seen[-1]

        return codes, seen

    codes, seen = scripted([None, None], [None, 0], [0, 0])
    assert _ddp._wait_ranks(codes, timeout_s=1e9, poll_s=0) is False and len(seen) == 3
    # a failed rank ends the wait once the others end too (they leave their own reason)...
    codes, seen = scripted([None, None], [None, 1], [1, 1])
    assert _ddp._wait_ranks(codes, timeout_s=1e9, poll_s=0) is False and len(seen) == 3
    # ...or after a short grace: the other would wait for it in a collective until its timeout
    start = time.monotonic()
    assert _ddp._wait_ranks(lambda: [None, 1], timeout_s=1e9, poll_s=0.01) is False
    assert _ddp.FAILURE_GRACE_S <= time.monotonic() - start < _ddp.FAILURE_GRACE_S + 2
    assert _ddp._wait_ranks(lambda: [None, 0], timeout_s=0, poll_s=0) is True  # still running: time is up

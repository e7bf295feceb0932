"""Chapter 10, DDP's knobs on real gloo ranks: record_ddp's new options (accumulate, no_sync,
shapes, bucket views, static_graph), the bucket sweep against DDP's bucketing rule written out
here, no_sync's all-reduce count, and choose_setting's rule case by case."""

from __future__ import annotations

import math

import pytest
import torch
import torch.distributed as dist

import helpers.timeline as tl
from helpers.bench._speed import VERDICTS, SpeedComparison
from helpers.distributed._choose import REASONS, acceptable_choices, choose_setting, rows_from
from helpers.distributed._compare import compare_settings
from helpers.distributed._ddp_knobs import (
    allreduces_per_step,
    bucket_sweep,
    bucket_view_memory,
    no_sync_allreduces,
    static_graph_comparison,
)

MIB = 2**20


def ready_order_bytes(layers: int, width: int) -> list[int]:
    """Gradient sizes in the order autograd finishes them, from hooks on a plain copy of the
    model: DDP rebuilds its buckets in this order after the first iteration."""
    blocks = [m for _ in range(layers) for m in (torch.nn.Linear(width, width), torch.nn.ReLU())]
    model = torch.nn.Sequential(*blocks)
    order: list[int] = []
    for p in model.parameters():
        p.register_post_accumulate_grad_hook(lambda t: order.append(t.numel() * t.element_size()))
    model(torch.randn(2, width)).sum().backward()
    return order


def ddp_limits(bucket_mb: float | None) -> list[int]:
    """DDP's bucket caps in bytes: bucket_cap_mb MiB; by default a 1 MiB first bucket, then 25 MiB
    (torch/nn/parallel/distributed.py, _BucketCapacityConfig)."""
    if bucket_mb is None:
        return [dist._DEFAULT_FIRST_BUCKET_BYTES, 25 * MIB]
    return [int(bucket_mb * MIB)]


def ddp_bucket_count(sizes: list[int], limits: list[int]) -> int:
    """DDP's rule (reducer.cpp, compute_bucket_assignment_by_size): gradients join the open bucket
    in ready order; it closes as soon as it holds at least its limit; the next limit applies."""
    closed, held, i = 0, 0, 0
    for size in sizes:
        held += size
        if held >= limits[i]:
            closed, held, i = closed + 1, 0, min(i + 1, len(limits) - 1)
    return closed + (held > 0)


def count_allreduces(trace: tl.Trace) -> float:
    """gloo:all_reduce events that start inside a ProfilerStep, per step (counted here by hand)."""
    steps = [e for e in trace.events if e.name.startswith("ProfilerStep#")]
    inside = [
        e for e in trace.events if e.name == "gloo:all_reduce" and any(s.ts <= e.ts < s.end for s in steps)
    ]
    return len(inside) / len(steps)


def test_ddp_first_bucket_default_is_one_mib():
    assert dist._DEFAULT_FIRST_BUCKET_BYTES == MIB  # the rule below depends on it


def test_the_bucket_rule_written_out_here():
    sizes = ready_order_bytes(2, 64)
    assert sorted(sizes) == [256, 256, 64 * 64 * 4, 64 * 64 * 4]
    assert ddp_bucket_count([256, 16384, 256, 16384], [10485]) == 2
    assert ddp_bucket_count([16384, 256, 16384, 256], [10485]) == 3  # the order matters
    assert ddp_bucket_count([600_000] * 3, [MIB, 25 * MIB]) == 2  # first bucket closes at 1.2 MB


# ---------------------------------------------------------------------------- record_ddp's knobs


def test_accumulate_with_no_sync_all_reduces_once_per_optimizer_step(tmp_path):
    layers, width, mb = 2, 64, 0.01
    buckets = ddp_bucket_count(ready_order_bytes(layers, width), ddp_limits(mb))
    grad_bytes = layers * (width * width + width) * 4
    assert buckets == 2
    common = dict(steps=2, layers=layers, width=width, batch=4, bucket_mb=mb, record_shapes=True)
    per_micro = {}
    for accumulate, no_sync in ((1, True), (4, True), (4, False)):
        runs = tl.record_ddp(
            tmp_path / f"a{accumulate}{no_sync}", accumulate=accumulate, no_sync=no_sync, **common
        )
        traces = tl.load_trace(runs["balanced"], keep_args=True)
        assert [len(t.steps()) for t in traces] == [2, 2]
        for t in traces:
            calls = count_allreduces(t)
            helper_calls, helper_bytes = allreduces_per_step(t)
            syncing = 1 if no_sync else accumulate
            assert calls == helper_calls == buckets * syncing
            assert helper_bytes == grad_bytes * syncing
        per_micro[(accumulate, no_sync)] = count_allreduces(traces[0]) / accumulate
    assert per_micro[(4, True)] * 4 == per_micro[(1, True)]  # 4x fewer all-reduce rounds per micro-batch
    assert per_micro[(4, False)] == per_micro[(1, True)]  # without no_sync: no saving at all


def test_record_ddp_new_options_through_the_subprocess_command_line(tmp_path):
    """fork=False starts each rank as ``python -m helpers.timeline._ddp``: the options must
    survive the command line (None for DDP's default buckets, the flags as True/False)."""
    runs = tl.record_ddp(
        tmp_path, steps=1, layers=1, width=8, batch=2, bucket_mb=None, fork=False, accumulate=2,
        gradient_as_bucket_view=True, static_graph=True, no_sync=False, record_shapes=True,
    )  # fmt: skip
    for t in tl.load_trace(runs["balanced"], keep_args=True):
        assert count_allreduces(t) == 2  # one bucket (288 bytes), two synchronising backwards
        assert allreduces_per_step(t)[1] == 2 * (8 * 8 + 8) * 4


def test_record_ddp_rejects_bad_new_options():
    with pytest.raises(ValueError, match="accumulate"):
        tl.record_ddp(accumulate=0)
    with pytest.raises(TypeError, match="no_sync"):
        tl.record_ddp(no_sync="no")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="bucket_mb"):
        tl.record_ddp(bucket_mb=-1.0)
    with pytest.raises(ValueError, match="143580"):  # a known DDP bug, refused before any rank starts
        tl.record_ddp(static_graph=True, accumulate=2)


def test_gradients_as_bucket_views_share_the_buckets_storage():
    layers, width, mb = 2, 64, 0.01
    grad_bytes = layers * (width * width + width) * 4
    buckets = ddp_bucket_count(ready_order_bytes(layers, width), ddp_limits(mb))
    got = bucket_view_memory(layers=layers, width=width, batch=4, bucket_mb=mb)
    off, on = got.counts["False"], got.counts["True"]
    assert off["grad_storages"] == 2 * layers and off["shared"] == 0
    assert off["grad_bytes"] == off["bucket_bytes"] == grad_bytes
    assert off["distinct_bytes"] == 2 * grad_bytes  # gradients and buckets held apart
    assert on["bucket_storages"] == on["grad_storages"] == on["shared"] == buckets
    assert on["distinct_bytes"] == grad_bytes  # held once
    assert off["ddp_buckets"] == on["ddp_buckets"] and sum(on["ddp_buckets"]) == grad_bytes
    assert "not the allocator's peak" in str(got)


def test_no_sync_count_matches_buckets_times_synchronising_backwards():
    layers, width, mb = 2, 64, 0.01
    buckets = ddp_bucket_count(ready_order_bytes(layers, width), ddp_limits(mb))
    grad_bytes = layers * (width * width + width) * 4
    got = no_sync_allreduces(accumulate=3, layers=layers, width=width, batch=4, steps=1, bucket_mb=mb)
    assert got.calls == {"no_sync": buckets, "every backward": 3 * buckets}
    assert got.nbytes == {"no_sync": grad_bytes, "every backward": 3 * grad_bytes}
    assert got.expected_calls == got.calls and got.expected_bytes == got.nbytes


# ------------------------------------------------------------------------------- the bucket sweep


def test_bucket_sweep_counts_verdicts_and_model():
    layers, width, alpha_s, bw = 5, 256, 50e-6, 1e9
    sizes = ready_order_bytes(layers, width)
    grad_bytes = sum(sizes)
    sweep = bucket_sweep(
        bucket_mb=(0.0005, 25.0, None), baseline_mb=None, alpha_s=alpha_s, bandwidth=bw,
        layers=layers, width=width, batch=8, steps=2, rounds=4, max_seconds=3.0,
    )  # fmt: skip
    assert sweep.grad_bytes == grad_bytes
    want = {0.0005: 2 * layers, 25.0: 1, None: 2}  # one per tensor; one; the 1 MiB first bucket + rest
    for row in sweep.rows:
        expected = ddp_bucket_count(sizes, ddp_limits(row.bucket_mb))
        assert expected == want[row.bucket_mb]
        assert len(row.ddp_bucket_bytes) == expected and sum(row.ddp_bucket_bytes) == grad_bytes
        assert row.allreduces_per_step == (expected, expected)  # measured in each rank's trace
        assert row.comm_s > 0 and 0 <= row.exposed_comm_s <= row.comm_s and row.step_s > 0
        # chapter 4's model, written out: n equal buckets, each a ring all-reduce on 2 ranks
        ring_s = 2 * (2 - 1) * (alpha_s + grad_bytes / expected / 2 / bw)
        assert row.model_comm_s == pytest.approx(expected * ring_s)
        assert row.model_exposed_s is not None and 0 <= row.model_exposed_s <= row.model_comm_s + 1e-12
    calls = [row.allreduces_per_step[0] for row in sweep.rows]
    assert calls[0] > calls[2] > calls[1]  # smaller buckets, more all-reduces
    base = sweep.rows[2]
    assert base.comparison is None and sweep.baseline == base.label
    for row in sweep.rows[:2]:
        c = row.comparison
        assert isinstance(c, SpeedComparison) and c.verdict in VERDICTS
        assert c.names == (base.label, row.label) and c.pairs >= 3 and c.low <= c.speedup <= c.high
    text = str(sweep)
    assert all(row.label in text for row in sweep.rows) and "never splits a tensor" in text
    assert all(len(p) == 2 and p[0].exists() for p in sweep.traces.values())


def test_bucket_sweep_rejects_bad_arguments():
    with pytest.raises(ValueError, match="baseline_mb"):
        bucket_sweep(bucket_mb=(0.25, 1.0), baseline_mb=None)
    with pytest.raises(ValueError, match="alpha_s and bandwidth"):
        bucket_sweep(alpha_s=1e-5)
    with pytest.raises(ValueError, match="bucket_mb"):
        bucket_sweep(bucket_mb=(0.0, None))


def test_static_graph_comparison_gives_an_interleaved_verdict():
    c = static_graph_comparison(layers=2, width=64, batch=8, rounds=4, max_seconds=2.0)
    assert c.names == ("static_graph=False", "static_graph=True") and c.verdict in VERDICTS
    assert c.pairs >= 3


# ------------------------------------------------------------------------------- choose_setting


def row(setting, low, high, peak):
    return {"setting": setting, "low": low, "high": high, "peak_bytes": peak}


def test_choose_faster_takes_the_highest_low_bound_that_fits():
    rows = [
        row("baseline", 1, 1, 100),
        row("wide", 1.05, 1.60, 100),  # the best median, but a less sure gain
        row("sure", 1.10, 1.20, 100),
        row("too big", 1.50, 1.60, 101),
    ]
    assert choose_setting(rows, 100) == ("sure", "faster")
    assert choose_setting(rows, 101) == ("too big", "faster")


def test_choose_less_memory_among_the_not_slower():
    rows = [
        row("baseline", 1, 1, 100),
        row("lean", 0.99, 1.05, 80),
        row("leaner but slower", 0.80, 0.90, 10),
        row("barely faster", 1.01, 1.10, 90),  # low not above 1.02: within noise
    ]
    assert choose_setting(rows, 100) == ("lean", "less memory")
    assert choose_setting(rows, 85) == ("lean", "less memory")
    assert choose_setting(rows, 79) == ("leaner but slower", "least slow")


def test_choose_boundaries_follow_the_verdict_rule():
    edge = [row("a", 1.02, 1.3, 50), row("b", 1, 1, 60)]
    assert choose_setting(edge, 100) == ("a", "less memory")  # 1.02 is not > 1.02
    assert choose_setting(edge, 100, min_effect=0.01) == ("a", "faster")
    just = [row("a", 0.9, 1 / 1.02, 10), row("b", 0.5, 0.6, 5)]
    assert choose_setting(just, 100) == ("a", "less memory")  # high = 1/1.02 is not slower


def test_acceptable_choices_hold_the_rule_and_the_other_fair_readings():
    """The graded exercise accepts the surest gain and the best estimate (the interval's
    geometric middle) among faster settings, every tied setting, and never a setting over the
    budget, a not-faster one when one is faster, or a wrong reason."""
    rows = [
        row("baseline", 1, 1, 100),
        row("wide", 1.05, 1.60, 100),  # the best estimate (middle 1.30), a less sure gain
        row("sure", 1.10, 1.20, 100),  # the surest gain (low 1.10)
        row("too big", 1.50, 1.60, 101),
    ]
    got = acceptable_choices(rows, 100)
    assert got[0] == list(choose_setting(rows, 100)) == ["sure", "faster"]
    assert sorted(map(tuple, got)) == [("sure", "faster"), ("wide", "faster")]
    ties = [row("a", 0.99, 1.01, 50), row("b", 0.98, 1.03, 50), row("c", 1, 1, 60)]
    assert sorted(map(tuple, acceptable_choices(ties, 100))) == [("a", "less memory"), ("b", "less memory")]
    slow = [row("a", 0.5, 0.7, 10), row("b", 0.6, 0.9, 20), row("c", 0.85, 0.88, 30), row("d", 0.3, 0.5, 5)]
    assert sorted(map(tuple, acceptable_choices(slow, 100))) == [("b", "least slow"), ("c", "least slow")]
    # the highest high (b), the best estimate and the highest low (c); never the slowest (d)
    assert acceptable_choices(rows, 10) == [[None, "none fits"]]
    for budget in (100, 101):
        for name, reason in acceptable_choices(rows, budget):
            fitting = {r["setting"] for r in rows if r["peak_bytes"] <= budget}
            assert name in fitting and reason == choose_setting(rows, budget)[1]


def test_choose_least_slow_when_every_fitting_one_is_slower():
    rows = [row("a", 0.5, 0.7, 10), row("b", 0.6, 0.9, 20), row("c", 0.8, 0.95, 30), row("d", 1, 1, 999)]
    assert choose_setting(rows, 50) == ("c", "least slow")


def test_choose_none_fits_and_ties_go_to_the_first_listed():
    assert choose_setting([row("a", 1, 1, 10), row("b", 2, 3, 20)], 9) == (None, "none fits")
    assert choose_setting([row("x", 1.1, 1.2, 5), row("y", 1.1, 1.3, 5)], 10) == ("x", "faster")
    assert choose_setting([row("x", 1, 1, 5), row("y", 0.99, 1.0, 5)], 10) == ("x", "less memory")
    assert choose_setting([row("x", 0.5, 0.8, 5), row("y", 0.6, 0.8, 5)], 10) == ("x", "least slow")
    assert set(REASONS) == {"faster", "less memory", "least slow", "none fits"}


@pytest.mark.parametrize(
    ("rows", "budget", "match"),
    [
        ([], 1, "non-empty"),
        ([{"setting": "a", "low": 1, "high": 1}], 1, "lacks peak_bytes"),
        ([row("a", 1.2, 1.1, 1)], 1, "low <= high"),
        ([row("a", 1, 1, -1)], 1, "peak_bytes"),
        ([row("a", 1, 1, True)], 1, "peak_bytes"),
        ([row("a", 1, 1, 1), row("a", 1, 1, 2)], 1, "twice"),
        ([row("", 1, 1, 1)], 1, "setting"),
        ([row("a", float("nan"), 1, 1)], 1, "finite"),
        ([row("a", 1, 1, 1)], -1, "memory_budget_bytes"),
        ("abc", 1, "non-empty"),
    ],
)
def test_choose_rejects_bad_input_in_one_line(rows, budget, match):
    with pytest.raises(ValueError, match=match) as err:
        choose_setting(rows, budget)
    assert "\n" not in str(err.value)


def test_rows_from_speed_comparisons():
    base = [0.010, 0.011, 0.012, 0.010, 0.011]
    samples = {"base": base, "fast": [t / 1.5 for t in base], "slow": [t * 1.5 for t in base]}
    comparisons = compare_settings(samples, "base")
    rows = rows_from(comparisons, {"base": 300, "fast": 400, "slow": 100})
    assert [r["setting"] for r in rows] == ["base", "fast", "slow"]
    assert (rows[0]["low"], rows[0]["high"]) == (1.0, 1.0)
    assert rows[1]["low"] == pytest.approx(1.5) and rows[2]["high"] == pytest.approx(1 / 1.5)
    assert choose_setting(rows, 1000) == ("fast", "faster")
    assert choose_setting(rows, 350) == ("base", "less memory")
    assert choose_setting(rows, 150) == ("slow", "least slow")
    assert rows_from(list(comparisons.values()), {"base": 1, "fast": 2, "slow": 3})[2]["peak_bytes"] == 3
    with pytest.raises(ValueError, match="peaks lacks 'slow'"):
        rows_from(comparisons, {"base": 1, "fast": 2})
    other = compare_settings({"x": base, "fast": samples["fast"]}, "x")
    with pytest.raises(ValueError, match="one baseline"):
        rows_from([comparisons["fast"], other["fast"]], {"base": 1, "x": 1, "fast": 1})
    with pytest.raises(ValueError, match="SpeedComparison"):
        rows_from([], {})
    assert math.isclose(comparisons["fast"].speedup, 1.5)

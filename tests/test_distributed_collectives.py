"""Chapter 10's collectives: ring byte counts and times against figures written out here,
the α-β fit against synthetic timings and numpy's own least squares, a real 2-rank gloo
measurement, and the at-scale model against hand computations."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from helpers import hardware
from helpers import timeline as tl
from helpers.distributed._collectives import measure_collectives
from helpers.distributed._ring import COLLECTIVES, fit_alpha_beta, ring_bytes, ring_steps, ring_time
from helpers.distributed._scale import predict_step, scaling_table
from helpers.hardware import INTERCONNECTS, Interconnect

# ------------------------------------------------------------------------------ ring arithmetic

# (n, all_reduce, all_gather, reduce_scatter) bytes each rank sends for S = 1000 bytes,
# worked out by hand: 2(n-1)/n * S and (n-1)/n * S
RING_1000 = [(1, 0, 0, 0), (2, 1000, 500, 500), (4, 1500, 750, 750), (5, 1600, 800, 800), (8, 1750, 875, 875)]


@pytest.mark.parametrize(("n", "ar", "ag", "rs"), RING_1000)
def test_ring_bytes_by_hand(n, ar, ag, rs):
    assert ring_bytes("all_reduce", 1000, n) == pytest.approx(ar)
    assert ring_bytes("all_gather", 1000, n) == pytest.approx(ag)
    assert ring_bytes("reduce_scatter", 1000, n) == pytest.approx(rs)


def test_ring_steps_by_hand():
    assert [ring_steps(c, 4) for c in COLLECTIVES] == [6, 3, 3]
    assert [ring_steps(c, 1) for c in COLLECTIVES] == [0, 0, 0]
    assert ring_steps("all_reduce", 8) == 14


@pytest.mark.parametrize("n", [1, 2, 3, 8, 64])
@pytest.mark.parametrize("size", [0, 4096, 1e6, 3.3e9])
def test_ring_time_all_reduce_is_chapter_4s(n, size):
    assert ring_time("all_reduce", size, n, 7e-6, 4.5e11) == pytest.approx(
        tl.ring_allreduce_time(size, n, 7e-6, 4.5e11), rel=1e-12, abs=1e-18
    )


def test_ring_time_all_gather_by_hand():
    # n = 4: 3 steps of alpha, 3/4 of 1 MB over 1 GB/s
    assert ring_time("all_gather", 1e6, 4, 1e-5, 1e9) == pytest.approx(3e-5 + 7.5e-4)


def _one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert text and "\n" not in text
    return text


def test_ring_errors_are_one_line():
    with pytest.raises(ValueError) as err:
        ring_bytes("allreduce", 10, 2)
    text = _one_line(err)
    assert "all_reduce" in text and "reduce_scatter" in text
    with pytest.raises(ValueError) as err:
        ring_time("all_gather", 10, 2, 1e-6, 0)
    assert "bandwidth" in _one_line(err)
    with pytest.raises(ValueError) as err:
        ring_bytes("all_gather", -5, 2)
    assert "size_bytes" in _one_line(err)
    with pytest.raises(ValueError) as err:
        ring_steps("all_gather", 0)
    assert "world_size" in _one_line(err)


# ------------------------------------------------------------------------------ alpha-beta fit

SIZES = [4096 * 4**k for k in range(7)]


def test_fit_recovers_exact_alpha_and_bandwidth():
    alpha, bw = 50e-6, 2e9
    fit = fit_alpha_beta(SIZES, [alpha + s / bw for s in SIZES])
    assert fit.alpha_s == pytest.approx(alpha, rel=1e-9)
    assert fit.bandwidth == pytest.approx(bw, rel=1e-9)
    assert fit.alpha_low_s <= fit.alpha_s <= fit.alpha_high_s
    assert fit.alpha_low_s == pytest.approx(alpha, rel=1e-6)
    assert fit.alpha_high_s == pytest.approx(alpha, rel=1e-6)
    assert fit.bandwidth_low == pytest.approx(bw, rel=1e-6)
    assert fit.bandwidth_high == pytest.approx(bw, rel=1e-6)
    assert fit.crossover_bytes == pytest.approx(1e5, rel=1e-6)  # 50 µs at 2 GB/s
    assert fit.predict(1e6) == pytest.approx(50e-6 + 500e-6)
    assert fit.points == 7 and fit.note == ""
    text = str(fit)
    assert "µs" in text and "GB/s" in text and "\n" not in text


def test_fit_with_noise_agrees_with_numpy():
    alpha, bw = 80e-6, 1e9
    rng = np.random.default_rng(7)
    x = np.repeat(SIZES, 3).astype(float)
    y = (alpha + x / bw) * (1 + rng.normal(0, 0.01, x.size))  # 1 % noise, as timings have
    fit = fit_alpha_beta(list(x), list(y))
    slope, intercept = np.polyfit(x, y, 1)  # an independent least squares
    assert fit.alpha_s == pytest.approx(intercept, rel=1e-9)
    assert fit.bandwidth == pytest.approx(1 / slope, rel=1e-9)
    assert fit.bandwidth == pytest.approx(bw, rel=0.03)
    assert fit.bandwidth_low <= fit.bandwidth <= fit.bandwidth_high
    assert fit.alpha_low_s <= fit.alpha_s <= fit.alpha_high_s


def test_fit_intervals_cover_the_truth():
    """Over 40 noisy data sets (2 µs of noise), the 95 % intervals hold the true alpha and
    bandwidth in most of them (a bootstrap over 21 points covers a little under 95 %), and
    they are narrow: an interval from -inf to inf would cover every time."""
    alpha, bw = 80e-6, 1e9
    x = np.repeat(SIZES, 3).astype(float)
    hits_alpha = hits_bw = 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        fit = fit_alpha_beta(list(x), list(alpha + x / bw + rng.normal(0, 2e-6, x.size)))
        hits_alpha += fit.alpha_low_s <= alpha <= fit.alpha_high_s
        hits_bw += fit.bandwidth_low <= bw <= fit.bandwidth_high
        assert fit.alpha_high_s - fit.alpha_low_s < 10e-6
        assert fit.bandwidth_high / fit.bandwidth_low - 1 < 0.01
    assert hits_alpha >= 32 and hits_bw >= 32


def test_fit_flags_a_negative_intercept_without_clamping():
    fit = fit_alpha_beta(SIZES, [s / 1e9 - 1e-6 for s in SIZES])  # every time still positive
    assert fit.alpha_s == pytest.approx(-1e-6, rel=1e-6)
    assert "negative" in fit.note
    assert math.isnan(fit.crossover_bytes)
    assert "NOTE" in str(fit)


@pytest.mark.parametrize(
    ("sizes", "times", "words"),
    [
        ([1, 2], [1, 2], "at least 3"),
        ([1, 2, 3], [1, 2], "one time per size"),
        ([0, 2, 3], [1, 2, 3], "size"),
        ([1, 2, 3], [1, -2, 3], "time"),
        ([5, 5, 5], [1, 2, 3], "all sizes are equal"),
        ([1, 2, 3], [3, 2, 1], "times do not grow with size: measure larger messages"),
    ],
)
def test_fit_errors_are_one_line(sizes, times, words):
    with pytest.raises(ValueError) as err:
        fit_alpha_beta(sizes, times)
    assert words in _one_line(err)


# ------------------------------------------------------------------------------ real ranks


def test_measure_collectives_on_two_gloo_ranks():
    sizes = [4096, 256 * 1024, 4 * 1024 * 1024]
    table = measure_collectives(sizes_bytes=sizes, world_size=2, device="cpu", repeats=3, max_seconds=2)
    assert (table.world_size, table.device, table.backend) == (2, "cpu", "gloo")
    assert [(r.collective, r.size_bytes) for r in table.rows] == [(c, s) for c in COLLECTIVES for s in sizes]
    for r in table.rows:
        # 2 ranks: an all-reduce sends the whole buffer, the other two half the tensor
        assert r.bytes_sent == (r.size_bytes if r.collective == "all_reduce" else r.size_bytes / 2)
        assert r.samples >= 3 and len(r.times_s) == r.samples
        assert 0 < r.p25_s <= r.median_s <= r.p75_s
    assert table.load_average is None or len(table.load_average) == 3
    assert table.forms["all_gather"] in ("all_gather_single", "all_gather_into_tensor", "all_gather (list)")
    for c in COLLECTIVES:
        assert table.carried_out_as[c] and all(e.startswith("gloo:") for e in table.carried_out_as[c])
    if "gloo:all_reduce" in table.carried_out_as["reduce_scatter"]:  # gloo has no own reduce-scatter
        assert any("reduce_scatter ran as gloo:all_reduce" in n for n in table.notes)
    # on a busy machine the three sizes' times may not grow (noise): then the table gives the
    # reason instead of a fit, as the notebook shows it; a fit, when there is one, is whole
    for collective, fit in table.fits().items():
        assert collective in COLLECTIVES
        assert (not isinstance(fit, str) and fit.bandwidth > 0 and fit.points == 3) or (
            isinstance(fit, str) and "measure larger messages" in fit
        ), fit
    text = str(table)
    assert len(text.splitlines()) >= 2 + len(table.rows)
    json.dumps(table.as_dict())
    ax = table.plot()
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    with pytest.raises(ValueError) as err:
        measure_collectives(collectives=["all_to_all"])
    assert "all_reduce" in _one_line(err)


# ------------------------------------------------------------------------------ the at-scale model

LINK = Interconnect(bandwidth=1e11, alpha_s=1e-5, source="a test link")


def test_predict_ddp_by_hand():
    # 1e9 params x 2 B = 2e9 B of gradients in 2 buckets of 1e9 B, 4 GPUs at 100 GB/s, 10 µs.
    # One bucket: 2*3 steps * (10 µs + 1e9/4 B / 1e11 B/s) = 6 * 2.51 ms = 15.06 ms.
    # Backward = 0.2 s of 0.3: bucket 1 ready at 0.1 s, done 0.11506; bucket 2 ready at 0.2 s,
    # done 0.21506: 15.06 ms past the backward's end.
    p = predict_step(1e9, 4, LINK, 0.3, strategy="ddp", grad_bytes_per_param=2, bucket_bytes=1e9)
    assert p.comm_s == pytest.approx(0.03012)
    assert p.exposed_s == pytest.approx(0.01506)
    assert p.step_s == pytest.approx(0.31506)
    assert p.bytes_per_rank == pytest.approx(3e9)  # 2 * 3/4 * 2e9
    none = predict_step(1e9, 4, LINK, 0.3, bucket_bytes=1e9, overlap_fraction=0.0)
    assert none.exposed_s == pytest.approx(0.03012)
    half = predict_step(1e9, 4, LINK, 0.3, bucket_bytes=1e9, overlap_fraction=0.5)
    assert half.exposed_s == pytest.approx(0.03012 - 0.5 * 0.01506)
    assert any("2/3" in a for a in p.assumptions) and "A model" in str(p)


def test_predict_fsdp_by_hand():
    # 2e9 B of bf16 parameters in 4 units of 5e8 B; fp32 gradients (4 B): 1e9 B per unit.
    # all-gather of a unit: 3 * 10 µs + 3/4 * 5e8 / 1e11 = 3.78 ms; twice over 4 units: 30.24 ms.
    # reduce-scatter of a unit: 3 * 10 µs + 3/4 * 1e9 / 1e11 = 7.53 ms; 4 units: 30.12 ms.
    kw = dict(strategy="fsdp", param_bytes_per_param=2, grad_bytes_per_param=4, bucket_bytes=5e8)
    p = predict_step(1e9, 4, LINK, 1.0, **kw)
    assert p.comm_s == pytest.approx(0.06036)
    assert p.comm_by_kind_s == pytest.approx({"all_gather": 0.03024, "reduce_scatter": 0.03012})
    assert p.exposed_s == pytest.approx(0.00378)  # the first unit only: the rest hides in 1 s
    assert p.bytes_per_rank == pytest.approx(2 * 0.75 * 2e9 + 0.75 * 4e9)
    short = predict_step(1e9, 4, LINK, 0.03, **kw)  # 30 ms of compute hides 30 ms of the rest
    assert short.exposed_s == pytest.approx(0.00378 + (0.06036 - 0.00378 - 0.03))
    once = predict_step(1e9, 4, LINK, 1.0, reshard_after_forward=False, **kw)
    assert once.comm_s == pytest.approx(0.01512 + 0.03012)


def test_zero3_sends_one_and_a_half_times_ddp_and_one_gpu_sends_nothing():
    ddp = predict_step(7e9, 8, "NVLink 4 (H100 SXM)", 1.0)
    fsdp = predict_step(7e9, 8, "NVLink 4 (H100 SXM)", 1.0, strategy="fsdp")
    assert fsdp.bytes_per_rank / ddp.bytes_per_rank == pytest.approx(1.5)
    solo = predict_step(7e9, 1, "NVLink 4 (H100 SXM)", 1.0, strategy="fsdp")
    assert (solo.comm_s, solo.bytes_per_rank, solo.step_s) == (0.0, 0.0, 1.0)


def test_interconnects_match_the_datasheets():
    assert INTERCONNECTS["NVLink 4 (H100 SXM)"].bandwidth == 900e9 / 2
    assert INTERCONNECTS["NVLink 5 (B200)"].bandwidth == 1.8e12 / 2
    assert INTERCONNECTS["InfiniBand NDR 400 Gb/s"].bandwidth == 400e9 / 8
    assert INTERCONNECTS["InfiniBand HDR 200 Gb/s"].bandwidth == 200e9 / 8
    assert hardware.INTERCONNECTS is INTERCONNECTS
    assert all(link.alpha_s > 0 and link.source for link in INTERCONNECTS.values())


def test_scaling_table_default_rows_and_assumptions():
    table = scaling_table(7e9, compute_s=0.5)
    got = [(p.strategy, p.world_size, p.link) for p in table.predictions]
    assert got == [
        ("ddp", 8, "NVLink 4 (H100 SXM)"),
        ("fsdp", 8, "NVLink 4 (H100 SXM)"),
        ("ddp", 64, "InfiniBand NDR 400 Gb/s"),
        ("fsdp", 64, "InfiniBand NDR 400 Gb/s"),
    ]
    big = table.predictions[2]
    assert any("network card" in a for a in big.assumptions)
    assert all(p.step_s >= p.compute_s for p in table.predictions)
    text = str(table)
    assert "A model, not a measurement" in text and "ASSUMED" in text
    json.dumps(table.as_dict())


def test_predict_step_errors_are_one_line():
    for call, words in [
        (lambda: predict_step(1e9, 8, "NVLink4", 1.0), "NVLink 4 (H100 SXM)"),
        (lambda: predict_step(1e9, 8, LINK, 1.0, strategy="zero2"), "fsdp"),
        (lambda: predict_step(1e9, 8, LINK, 1.0, overlap_fraction=1.5), "overlap_fraction"),
        (lambda: predict_step(1e9, 0, LINK, 1.0), "world_size"),
        (lambda: predict_step(1e9, 8, LINK, 0.0), "compute_s"),
    ]:
        with pytest.raises(ValueError) as err:
            call()
        assert words in _one_line(err)

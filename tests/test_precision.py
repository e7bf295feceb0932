"""helpers.precision: formats from finfo and from the bit layout, fates of values, fp8 scaling
(per tensor, delayed, MX), autocast, loss scaling, loss curves and the speed-up report."""

from __future__ import annotations

import math

import ml_dtypes  # declared in the course extra: a missing one is a broken install, not a skip
import pytest
import torch

from helpers import bench, models, precision

# --------------------------------------------------------------------------- formats

TORCH_FORMATS = {
    "fp32": "ieee",
    "fp16": "ieee",
    "bf16": "ieee",
    "fp8_e4m3": "fn",
    "fp8_e5m2": "ieee",
    "e4m3fnuz": "fnuz",
    "e5m2fnuz": "fnuz",
    "e8m0": "e8m0",
}


@pytest.mark.parametrize("name,layout", TORCH_FORMATS.items())
def test_the_bit_layout_gives_what_finfo_says(name, layout):
    row = precision.format_table().row(name)
    assert row.source == "torch.finfo" and row.bits == torch.finfo(row.dtype).bits
    limits = precision.layout_limits(row.exponent_bits, row.mantissa_bits, layout)
    assert limits == {
        "max": row.max,
        "smallest_normal": row.smallest_normal,
        "smallest_subnormal": row.smallest_subnormal,
        "eps": row.eps,
    }


def test_layouts_by_hand():
    fp16 = precision.format_table().row("fp16")
    assert (fp16.sign_bits, fp16.exponent_bits, fp16.mantissa_bits) == (1, 5, 10)
    assert (fp16.max, fp16.smallest_normal, fp16.smallest_subnormal) == (65504.0, 2.0**-14, 2.0**-24)
    e4m3 = precision.format_table().row("fp8_e4m3")
    assert (e4m3.exponent_bits, e4m3.mantissa_bits) == (4, 3)
    assert (e4m3.max, e4m3.smallest_subnormal) == (448.0, 2.0**-9)
    e8m0 = precision.format_table().row("e8m0")
    assert (e8m0.sign_bits, e8m0.exponent_bits, e8m0.mantissa_bits) == (0, 8, 0)
    assert e8m0.smallest_subnormal is None and e8m0.max == 2.0**127


@pytest.mark.parametrize(
    "name,reference",
    [("fp4_e2m1", "float4_e2m1fn"), ("fp6_e2m3", "float6_e2m3fn"), ("fp6_e3m2", "float6_e3m2fn")],
)
def test_mx_element_formats_match_ml_dtypes(name, reference):
    """Formats with no inf and no NaN code (OCP MX v1.0), checked against ml_dtypes' finfo."""
    info = ml_dtypes.finfo(getattr(ml_dtypes, reference))
    row = precision.format_table().row(name)
    assert row.source == "bit layout" and row.bits == info.bits
    assert (row.max, row.smallest_normal, row.smallest_subnormal, row.eps) == (
        float(info.max),
        float(info.smallest_normal),
        float(info.smallest_subnormal),
        float(info.eps),
    )
    assert precision.format_table().row("fp4_e2m1").max == 6.0  # the whole positive range: 0.5 ... 6


def test_tf32_comes_from_its_bit_layout():
    tf32 = precision.format_table().row("tf32")
    assert tf32.source == "bit layout" and tf32.dtype is None and tf32.bits == 19
    assert tf32.max == (2 - 2.0**-10) * 2.0**127
    assert (tf32.smallest_normal, tf32.smallest_subnormal, tf32.eps) == (2.0**-126, 2.0**-136, 2.0**-10)
    assert tf32.unit_roundoff == 2.0**-11


def test_table_prints_every_format_and_refuses_unknown_names():
    text = str(precision.format_table())
    for name in ("fp32", "tf32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "e8m0"):
        assert name in text
    assert "none" in text  # e8m0 has no subnormals
    with pytest.raises(KeyError, match="unknown format 'fp4'"):
        precision.format_table().row("fp4")
    with pytest.raises(ValueError, match="layout"):
        precision.layout_limits(5, 2, "posit")


# --------------------------------------------------------------------------- fates and picks


def _torch_fate(value: float, dtype: torch.dtype) -> str:
    cast = torch.tensor(value, dtype=torch.float32).to(dtype).float().item()
    if math.isinf(cast):
        return "overflow"
    if cast == 0:
        return "underflow"
    return "subnormal" if abs(cast) < torch.finfo(dtype).smallest_normal else "normal"


VALUES = [
    65504.0,
    65519.0,
    65520.0,
    7e4,
    1.0,
    1e-4,
    6.1e-5,
    6.09e-5,
    3e-5,
    1e-6,
    5.97e-8,
    2.99e-8,
    2.98e-8,
    1e-9,
    1e38,
    3.39e38,
    3.4e38,
    1e-38,
    1e-40,
    4.6e-41,
    4.5e-41,
    57344.0,
    61439.0,
    61440.0,
    1.6e-5,
    7.7e-6,
    7.6e-6,
    -7e4,
    -3e-5,
]


@pytest.mark.parametrize(
    "dtype,layout", [(torch.float16, (5, 10)), (torch.bfloat16, (8, 7)), (torch.float8_e5m2, (5, 2))]
)
def test_fate_agrees_with_torch_casts_including_the_rounding_edges(dtype, layout):
    for value in VALUES:
        assert precision.fate(value, *layout) == _torch_fate(value, dtype), (value, dtype)


def test_fate_refuses_zero_and_non_numbers():
    for bad in (0.0, math.inf, math.nan, "1", True):
        with pytest.raises(ValueError, match="non-zero finite"):
            precision.fate(bad, 5, 10)


@pytest.mark.parametrize(
    "need,want",
    [
        ((1e-3, 100, 0.1), ["fp16", "bf16"]),  # both 16-bit formats fit
        ((1e-6, 1e3, 1e-2), ["bf16"]),  # below fp16's smallest normal
        ((1e-3, 1e5, 1e-3), ["fp32"]),  # beyond fp16's max, finer than bf16's eps
        ((0.02, 400, 0.2), ["fp8_e4m3"]),
        ((1e-4, 5e4, 0.3), ["fp8_e5m2"]),
        ((1e-40, 1.0, 0.5), []),  # below fp32's smallest normal
    ],
)
def test_pick_format(need, want):
    assert precision.pick_format(*need) == want


def test_pick_format_refuses_an_empty_range():
    with pytest.raises(ValueError):
        precision.pick_format(10.0, 1.0, 0.1)


def test_rounding_error_and_overflow():
    x = torch.linspace(-3, 3, 1001)
    bf16 = precision.rounding_error(x, torch.bfloat16)
    assert 0 < bf16["max_rel_error"] <= 2.0**-8 and bf16["overflow_fraction"] == 0
    big = precision.rounding_error(torch.full((10,), 1e5), torch.float16)
    assert big["overflow_fraction"] == 1.0
    assert precision.rounding_error(torch.full((10,), 1e5), torch.bfloat16)["overflow_fraction"] == 0


def test_rounding_error_says_what_the_cast_did():
    """Overflow is what the cast returned, checked against torch's own cast element by element:
    fp16's 65510 and 65519 round back to 65504 (clipped, finite), 65520 and 1e5 become inf."""
    x = torch.tensor([65510.0, 65519.0, 65520.0, 1e5])
    cast = x.to(torch.float16).float()
    err = precision.rounding_error(x, torch.float16)
    assert err["overflow_fraction"] == cast.isinf().float().mean().item() == 0.5
    assert err["saturated_fraction"] == (cast == 65504).float().mean().item() == 0.5
    assert err["lost_fraction"] == 0.5 and err["zero_fraction"] == 0.0
    # the mean error counts only finite results: a cast that lost half the values still shows one
    assert err["mean_rel_error"] < 1e-3
    # e4m3fn has no infinity: on this torch the cast saturates, so nothing is lost but the values
    big = precision.rounding_error(torch.full((4,), 1e5), torch.float8_e4m3fn)
    e4m3 = torch.full((4,), 1e5).to(torch.float8_e4m3fn).float()
    assert big["overflow_fraction"] == (~e4m3.isfinite()).float().mean().item()
    assert big["saturated_fraction"] == (e4m3.abs() == 448).float().mean().item()
    tiny = precision.rounding_error(torch.tensor([1e-10, 1.0]), torch.float16)
    assert tiny["zero_fraction"] == 0.5 and tiny["lost_fraction"] == 0.5


# --------------------------------------------------------------------------- per-tensor fp8


def test_fp8_scale_is_max_over_amax_over_two_to_the_margin():
    assert precision.fp8_scale(2.0, torch.float8_e4m3fn) == 224.0
    assert precision.fp8_scale(2.0, torch.float8_e5m2, margin=2) == 57344.0 / 2 / 4
    for bad in (0.0, -1.0, math.inf):
        with pytest.raises(ValueError):
            precision.fp8_scale(bad)
    with pytest.raises(ValueError):
        precision.fp8_scale(1.0, margin=-1)


def test_quantize_round_trip_error_is_within_half_a_step():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1000, generator=gen)
    q = precision.quantize(x, torch.float8_e4m3fn)
    assert q.scale == pytest.approx(448 / x.abs().max().item()) and q.overflow_fraction == 0
    normal = (x.abs() * q.scale) >= 2.0**-6
    rel = ((q.values - x).abs() / x.abs())[normal]
    assert rel.max().item() <= 2.0**-4 + 1e-6  # e4m3: 3 mantissa bits, unit roundoff 1/16
    assert q.pair() == (q.scale, q.mean_abs_error)


def test_a_too_large_scale_overflows_and_saturates():
    x = torch.tensor([1.0, 2.0, 4.0])
    q = precision.quantize(x, torch.float8_e4m3fn, scale=224.0)  # 4 * 224 = 896 > 448
    assert q.overflow_fraction == pytest.approx(1 / 3) and q.values.tolist() == [1.0, 2.0, 2.0]


# --------------------------------------------------------------------------- delayed scaling


def test_delayed_scaling_uses_earlier_amaxes_only():
    state = precision.DelayedScaling(448.0, history_len=2, policy="max")
    assert state.scale == 1.0 and not state.overflows(400) and state.overflows(449)
    assert state.update(4.0) == 112.0
    assert state.update(2.0) == 112.0  # max of [4, 2]
    assert state.update(1.0) == 224.0  # max of [2, 1]: the 4 fell out of the history
    assert state.update(0.0) == 448.0  # max of [1, 0]
    recent = precision.DelayedScaling(448.0, history_len=8, policy="most_recent", margin=1)
    recent.update(4.0)
    assert recent.update(2.0) == 112.0  # 448 / 2 / 2
    zero = precision.DelayedScaling(448.0, history_len=1)
    zero.update(0.0)
    assert zero.scale == 1.0  # an all-zero step keeps the old scale
    with pytest.raises(ValueError, match="policy"):
        precision.DelayedScaling(448.0, policy="mean")


@pytest.mark.parametrize(
    "amaxes,history,policy,margin,want",
    [
        ([2, 2, 2, 20, 2, 2, 60, 2, 2, 2], 4, "max", 4, None),  # the spike of 20 keeps the scale small
        ([2, 2, 2, 20, 2, 2, 60, 2, 2, 2], 4, "most_recent", 4, 6),
        ([2, 2, 2, 20, 2, 2, 60, 2, 2, 2], 2, "max", 4, 6),  # the 20 left a 2-step history in time
        ([0.5 * 1.1**t for t in range(30)], 16, "max", 0, 1),  # any growth overflows without a margin
        ([0.5 * 1.1**t for t in range(30)], 16, "max", 1, None),  # 10 % a step fits in 2x headroom
        ([600, 1, 1], 16, "max", 1, 0),  # the first step runs at scale 1
    ],
)
def test_first_overflow(amaxes, history, policy, margin, want):
    assert precision.first_overflow(amaxes, 448.0, history, policy, margin) == want


def test_simulation_with_tensors_records_overflowing_values():
    acts = precision.drifting_activations(steps=6, size=1000, growth=1.5, seed=1)
    steps = precision.simulate_delayed_scaling(acts, history_len=4, policy="most_recent")
    assert [s.step for s in steps] == list(range(6)) and steps[0].scale == 1.0 and not steps[0].overflow
    assert all(s.overflow and s.overflow_fraction > 0 for s in steps[1:])
    assert steps[2].scale == pytest.approx(448 / steps[1].amax)
    safe = precision.simulate_delayed_scaling(acts, history_len=4, policy="most_recent", margin=1)
    assert not any(s.overflow for s in safe) and all(s.overflow_fraction == 0 for s in safe)
    with pytest.raises(ValueError):
        precision.simulate_delayed_scaling([])


# --------------------------------------------------------------------------- MX


def test_mx_scales_are_powers_of_two_by_the_spec():
    parts = [torch.full((32,), 3.0), torch.full((32,), -0.01), torch.zeros(32), torch.full((5,), 1000.0)]
    x = torch.cat(parts)
    back, scales = precision.mx_quantize(x)
    assert scales.dtype == torch.float8_e8m0fnu and scales.numel() == 4  # 101 values -> 4 blocks
    # X = 2^(floor(log2 amax) - 8) for E4M3, whose largest normal is 1.75 * 2^8
    assert scales.float().tolist() == [2.0 ** (1 - 8), 2.0 ** (-7 - 8), 2.0**-127, 2.0 ** (9 - 8)]
    assert back[:32].tolist() == [3.0] * 32 and torch.all(back[64:96] == 0)
    assert back.shape == x.shape and back[-1].item() == 448 * 2.0 ** (
        9 - 8
    )  # 1000 / 2 = 500 saturates to 448


def _ocp_scale_exponent(block: list[float], emax_elem: int = 8) -> float:
    """OCP MX v1.0's shared exponent, written out: floor(log2(max |V|)) - emax_elem, from the
    float's bits in float64 (math.frexp is exact), clamped to E8M0's range; NaN for a block
    with a NaN or an infinity; -127 for an all-zero block."""
    if any(math.isnan(v) or math.isinf(v) for v in block):
        return math.nan
    amax = max(abs(v) for v in block)
    if amax == 0:
        return -127.0
    return float(min(127, max(-127, math.frexp(amax)[1] - 1 - emax_elem)))


@pytest.mark.parametrize(
    "amax",
    [
        1024.0,
        float(torch.tensor(1024.0).nextafter(torch.tensor(0.0))),
        0.5,
        float(torch.tensor(0.5).nextafter(torch.tensor(0.0))),
        448.0,
        1.0,
        3e-40,
        2.0**-126,
    ],
)
def test_mx_scale_exponent_matches_the_spec_at_and_just_below_powers_of_two(amax):
    block = [amax] + [amax / 3] * 31
    x = torch.tensor(block, dtype=torch.float32)
    back, scales = precision.mx_quantize(x)
    spec = _ocp_scale_exponent(x.tolist())
    assert math.log2(scales.float().item()) == spec  # 1023.99994 -> 9, not the float32 log2's 10
    elem = (x / 2.0**spec).to(torch.float8_e4m3fn).float()  # in range: no saturation needed
    assert torch.equal(back, elem * 2.0**spec)


def test_mx_blocks_with_nan_inf_or_zeros():
    nan_block = [1.0] * 31 + [math.nan]
    inf_block = [2.0] * 31 + [math.inf]
    x = torch.tensor(nan_block + inf_block + [0.0] * 32 + [3.0] * 32)
    back, scales = precision.mx_quantize(x)
    got = scales.float().tolist()
    # each block's scale is the spec's 2^exponent; the spec's NaN (a NaN or inf in the block) is
    # E8M0's NaN code, and the whole block decodes to NaN
    spec = [_ocp_scale_exponent(b) for b in (nan_block, inf_block, [0.0] * 32, [3.0] * 32)]
    assert [math.isnan(e) for e in spec] == [math.isnan(g) for g in got] == [True, True, False, False]
    assert got[2:] == [2.0 ** spec[2], 2.0 ** spec[3]] and spec[2] == -127  # all-zero: the smallest scale
    assert torch.isnan(back[:64]).all() and torch.all(back[64:96] == 0)
    assert back[96:].tolist() == [3.0] * 32


def test_delayed_scaling_keeps_its_scale_while_a_nan_is_in_the_history():
    from collections import deque

    # the same amaxes with the NaN first or not: Python's max() gave 8.0 for one and 224.0 for
    # the other; a NaN in the history keeps the scale until it has left the history
    for history, scales in (([math.nan, 2.0], [8.0, 224.0, 448.0]), ([2.0, math.nan], [8.0, 8.0, 448.0])):
        state = precision.DelayedScaling(448.0, history_len=3, scale=8.0, history=deque(history))
        assert [state.update(a) for a in (1.0, 1.0, 0.5)] == scales
        assert state.update(4.0) == 112.0  # the history's max, as before


def test_floor_scaling_clamps_the_top_binade_and_rceil_does_not():
    block = torch.tensor([500.0] + [1.0] * 31)  # floor(log2 500) = 8: X = 2^0, and 500 > 448
    floor, floor_scale = precision.mx_quantize(block)
    rceil, rceil_scale = precision.mx_quantize(block, scale_rounding="rceil")
    assert floor_scale.float().item() == 1.0 and floor[0].item() == 448.0
    assert rceil_scale.float().item() == 2.0  # ceil(log2(500 / 448)) = 1
    assert rceil[0].item() == 2 * torch.tensor(250.0).to(torch.float8_e4m3fn).float().item()  # 500 / X
    assert abs(rceil[0].item() - 500) < abs(floor[0].item() - 500)
    exact = torch.tensor([448.0] + [1.0] * 31)  # amax / max is exactly a power of two: X = 1
    assert precision.mx_quantize(exact, scale_rounding="rceil")[1].float().item() == 1.0
    with pytest.raises(ValueError, match="scale_rounding"):
        precision.mx_quantize(block, scale_rounding="round")


def test_mx_blocks_run_along_the_chosen_dimension():
    w = precision.with_outliers(size=64 * 40, every=97, outlier=300.0).view(64, 40)
    rows, row_scales = precision.mx_quantize(w, dim=1)  # 40 = one block of 32 and one of 8, padded
    cols, col_scales = precision.mx_quantize(w, dim=0)  # 64 = two blocks of 32 per column
    assert rows.shape == cols.shape == w.shape
    assert row_scales.numel() == 64 * 2 and col_scales.numel() == 40 * 2
    for r in (0, 17):  # a row quantized alone gives the same values as its row in the matrix
        assert torch.equal(rows[r], precision.mx_quantize(w[r])[0])
    assert torch.equal(cols[:, 3], precision.mx_quantize(w[:, 3].contiguous())[0])
    # the transposed operand of the backward pass reduces over the other dimension: its blocks,
    # scales and rounded values differ, so it must be quantized again, not transposed
    assert not torch.equal(rows, cols)
    assert torch.equal(precision.mx_quantize(w.t(), dim=1)[0], cols.t())


def test_mx_saturates_elements_above_the_largest_normal():
    x = torch.tensor([1.99 * 2**8] + [1.0] * 31)  # floor(log2) = 8 -> X = 1, 509 > 448
    back, _ = precision.mx_quantize(x)
    assert back[0].item() == 448.0


def test_mx_beats_a_per_tensor_scale_on_outliers():
    x = precision.with_outliers(size=4096, every=512, outlier=1e4)
    mx, _ = precision.mx_quantize(x)
    per_tensor = precision.quantize(x).values
    mx_err, pt_err = precision.block_errors(x, mx), precision.block_errors(x, per_tensor)
    assert mx_err.shape == (128,) and mx_err.mean() < pt_err.mean() / 2


# --------------------------------------------------------------------------- autocast and training


def test_autocast_table_is_inspected_on_cpu():
    rows = {r.op: r for r in precision.autocast_dtypes("tiny", "bf16", "cpu")}
    assert rows["addmm"].output == "bfloat16" and rows["mm"].output == "bfloat16"
    assert rows["native_layer_norm"].output == "float32" and rows["_log_softmax"].output == "float32"
    assert rows["embedding"].output == "float32"
    assert "view" not in rows and "addmm" in precision.format_op_dtypes(list(rows.values()))
    fp32 = {r.op: r for r in precision.autocast_dtypes("tiny", "fp32", "cpu")}
    assert fp32["addmm"].output == "float32"
    with pytest.raises(ValueError, match="autocast"):
        precision.autocast_dtypes("tiny", "fp8", "cpu")


def test_fp16_gradients_underflow_and_the_scaler_rescues_them():
    rows = {r.setting: r for r in precision.gradient_underflow(1e-8)}
    assert rows["fp32"].zero_fraction == 0 and rows["fp32"].rel_error == 0
    assert rows["fp16"].zero_fraction > 0.9
    assert rows["fp16 + GradScaler"].zero_fraction < 0.01 and rows["fp16 + GradScaler"].rel_error < 0.01
    assert rows["bf16"].zero_fraction == 0 and rows["bf16"].rel_error < 0.02


def test_pattern_batches_are_learnable_and_seeded():
    idx, targets = precision.pattern_batch("tiny", 3, 10, seed=5)
    again, _ = precision.pattern_batch("tiny", 3, 10, seed=5)
    assert torch.equal(idx, again) and torch.equal(idx[:, 1:], targets[:, :-1])
    step = (targets - idx) % 256
    assert torch.all(step == step[:, :1])  # a constant stride per sequence


def test_train_losses_same_start_and_parity():
    fp32 = precision.train_losses("tiny", steps=3, batch_size=2)
    bf16 = precision.train_losses("tiny", steps=3, batch_size=2, autocast="bf16")
    fp16 = precision.train_losses("tiny", steps=3, batch_size=2, autocast="fp16")
    assert len(fp32) == len(bf16) == len(fp16) == 3
    assert fp32[0] == pytest.approx(bf16[0], rel=0.01) == pytest.approx(fp16[0], rel=0.01)
    assert precision.loss_gap(fp32, bf16, last=3) < 0.02
    assert precision.loss_gap([2.0, 2.0], [2.0, 2.2], last=2) == pytest.approx(0.05)
    with pytest.raises(ValueError):
        precision.loss_gap([1.0], [1.0, 2.0], last=1)


def test_plots_draw_without_a_display():
    import matplotlib

    matplotlib.use("Agg")
    runs = {"max, 4": precision.simulate_delayed_scaling([1.0, 2.0, 4.0], history_len=4)}
    assert precision.plot_delayed_scaling(runs, 448.0).lines
    x = precision.with_outliers(size=256, every=64)
    ax = precision.plot_block_errors({"MX": precision.block_errors(x, precision.mx_quantize(x)[0])})
    assert len(ax.lines) == 1
    assert len(precision.plot_losses({"fp32": [3.0, 2.0], "bf16": [3.0, 2.1]}).lines) == 2


def test_speedups_on_a_cpu_use_measured_roofs(monkeypatch):
    from helpers import hardware, mfu, models
    from helpers.bench import Measurement

    def fake_measure_device(device, dtypes, quick):
        m = hardware.MeasuredDevice(str(device), "CPU (fake)", 512)
        m.gemm_flops.update(fp32=1e11, bf16=3e11)
        m.copy_bandwidth = 2e10
        return m

    monkeypatch.setattr(hardware, "measure_device", fake_measure_device)
    from helpers.precision import _training

    compared = []

    def fake_compare(fp32, bf16, **kw):
        compared.append((kw["names"], kw["min_pairs"]))
        if len(compared) == 1:  # the GEMMs
            return bench.SpeedComparison(
                3.0,
                2.8,
                3.2,
                "faster",
                10,
                Measurement([0.03] * 3, 0.1, "cpu"),
                Measurement([0.01] * 3, 0.1, "cpu"),
                2,
                "cpu",
                kw["names"],
            )
        return bench.SpeedComparison(
            1.25,
            1.2,
            1.3,
            "faster",
            12,
            Measurement([0.02] * 3, 0.1, "cpu"),
            Measurement([0.016] * 3, 0.1, "cpu"),
            2,
            "cpu",
            kw["names"],
        )

    monkeypatch.setattr(_training, "compare_speed", fake_compare)
    result = precision.measure_speedups("cpu", iters=3)
    assert compared == [(("fp32", "bf16"), 10)] * 2  # never fewer than 10 pairs
    assert result.peaks == {} and result.bandwidth == 2e10
    assert result.gemm_speedup == pytest.approx(3.0) and result.step_speedup == pytest.approx(1.25)
    # the step times shown are the interleaved pairs' medians, so they cannot contradict the verdict
    assert result.step_s == {"fp32": pytest.approx(0.02), "bf16": pytest.approx(0.016)}
    flops = mfu.model_flops_per_step(models.get_config("tiny"), 8, models.get_config("tiny").seq_len)
    assert result.step_flops["bf16"] == pytest.approx(flops / 0.016)
    assert "no datasheet" in result.format()
    said = (
        "training step: 1.25x (95 % interval 1.20x to 1.30x, 12 interleaved pairs): bf16 is faster than fp32"
    )
    assert said in result.format()
    assert "GEMM: 3.00x (95 % interval 2.80x to 3.20x, 10 interleaved pairs)" in result.format()
    assert len(precision.plot_speedups(result).lines) >= 4


# --------------------------------------------------------------------------- the loop in practice


def test_the_grad_scaler_skips_a_step_with_an_inf_and_halves_then_grows_its_scale():
    steps = precision.scaler_steps(steps=6, bad_steps=(2,), growth_interval=2, init_scale=2.0**16)
    assert [s.skipped for s in steps] == [False, False, True, False, False, False]
    assert [s.found_inf for s in steps] == [False, False, True, False, False, False]
    # growth after 2 clean steps (x2), halving at the bad step, growth again after 2 clean steps
    assert [s.scale for s in steps] == [2.0**16, 2.0**16, 2.0**17, 2.0**16, 2.0**16, 2.0**17]
    assert all(s.grad_norm < float("inf") for s in steps if not s.found_inf)
    assert "SKIPPED" in str(steps[2]) and "applied" in str(steps[0])


def test_a_narrow_accumulator_stalls_and_a_wide_one_does_not():
    values = torch.full((4096,), 1e-3)
    stalled = precision.accumulate(values, torch.bfloat16, torch.bfloat16)
    wide = precision.accumulate(values, torch.bfloat16, torch.float32)
    term = torch.tensor(1e-3).to(torch.bfloat16).item()  # the term as bf16 holds it
    assert stalled == 0.5  # 1e-3 is below half the gap between bf16 numbers near 0.5 (2^-8 / 2)
    assert wide == pytest.approx(4096 * term, rel=1e-5)


def test_updates_below_half_a_gap_round_away_without_a_master_copy():
    weights = torch.tensor([1.0, 1.0, 0.01, 0.01])
    updates = torch.tensor([1e-3, 5e-3, 1e-5, 1e-4])
    # bf16 near 1: gap 2^-7, half 0.0039; near 0.01: gap 2^-14, half 3.1e-5
    assert precision.lost_updates(weights, updates, torch.bfloat16) == 0.5
    assert precision.lost_updates(weights, updates, torch.float32) == 0.0
    with pytest.raises(ValueError, match="differ in shape"):
        precision.lost_updates(weights, updates[:2], torch.bfloat16)


def test_autocast_saves_fewer_bytes_and_the_cuda_lists_are_beside_the_table():
    saved = precision.saved_bytes_by_precision("tiny", batch_size=2)
    assert set(saved) == {"fp32", "bf16"} and 0 < saved["bf16"] < saved["fp32"]
    rows = precision.autocast_dtypes("tiny", "bf16", "cpu")
    text = precision.format_op_dtypes(rows, cuda_lists=True)
    assert "CUDA autocast list" in text and "addmm" in text and "CUDA lists from" in text
    lists, source = precision.cuda_autocast_lists()
    assert "autocast_mode.h" in source or "documentation" in source
    assert lists["addmm"] == lists["mm"] == "lower precision" and lists["layer_norm"] == "float32"
    assert precision.cuda_autocast_policy("addmm") == "lower precision"
    assert precision.cuda_autocast_policy("_log_softmax") == "float32"  # log_softmax, listed
    assert precision.cuda_autocast_policy("nll_loss_forward") == "float32"  # nll_loss
    assert precision.cuda_autocast_policy("_scaled_dot_product_flash_attention_for_cpu") == "lower precision"
    assert precision.cuda_autocast_policy("gelu").startswith("not listed")


def test_cast_beyond_max_reports_what_this_torch_does():
    """Checked against torch's own cast on the installed version, whatever it does."""
    got = precision.cast_beyond_max(torch.float8_e4m3fn)
    probe = torch.tensor([480.0, 448.0 * 20, float("inf")]).to(torch.float8_e4m3fn).float().tolist()
    assert got["torch"] == torch.__version__
    for key, want in zip(("just_past_max", "far_past_max", "inf"), probe, strict=True):
        assert got[key] == want or (math.isnan(got[key]) and math.isnan(want)), key
    assert math.isinf(precision.cast_beyond_max(torch.float16)["inf"])
    with pytest.raises(ValueError, match="floating-point"):
        precision.cast_beyond_max(torch.int8)


# --------------------------------------------------------------------------- AMD's FNUZ fp8


def _every_value(dtype: torch.dtype) -> torch.Tensor:
    """All 256 codes of an 8-bit dtype, decoded by torch (code i at index i)."""
    return torch.arange(256, dtype=torch.uint8).view(dtype).float()


@pytest.mark.parametrize(
    "dtype,name", [(torch.float8_e4m3fnuz, "e4m3fnuz"), (torch.float8_e5m2fnuz, "e5m2fnuz")]
)
def test_fnuz_rows_match_every_code_of_the_format(dtype, name):
    """The table's row against the 256 codes decoded one by one: max, smallest normal and
    subnormal, the step after 1, one NaN at 0x80, no infinity, no negative zero."""
    values = _every_value(dtype)
    row = precision.format_table().row(name)
    finite = values[values.isfinite()]
    positive = finite[finite > 0].unique()
    assert row.max == finite.max().item() and torch.isnan(values).nonzero().flatten().tolist() == [0x80]
    assert not values.isinf().any() and not (torch.signbit(values) & (values == 0)).any()
    assert row.smallest_subnormal == positive.min().item()
    assert row.eps == positive[positive > 1].min().item() - 1.0  # the cast's step, not finfo's
    assert row.smallest_normal == torch.finfo(dtype).smallest_normal
    assert row.max == {"e4m3fnuz": 240.0, "e5m2fnuz": 57344.0}[name]  # AMD's HIP documentation


def test_encodings_say_what_the_cast_does_with_special_values():
    for dtype in (torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.float8_e5m2, torch.float8_e5m2fnuz):
        got = precision.encodings(dtype)
        values = _every_value(dtype)
        assert math.isnan(values[got["nan_bits"]].item())
        back = torch.tensor([-0.0, float("inf")]).to(dtype)
        assert got["negative_zero_bits"] == back.view(torch.uint8)[0].item()
        assert got["negative_zero_kept"] == bool(torch.signbit(back.float()[0]))
        inf = back.float()[1].item()
        assert got["inf_becomes"] == inf or (math.isnan(got["inf_becomes"]) and math.isnan(inf))
        assert got["finfo_eps"] == torch.finfo(dtype).eps and got["cast_eps"] == precision.cast_eps(dtype)
    fnuz = precision.encodings(torch.float8_e4m3fnuz)
    assert fnuz["nan_bits"] == 0x80 and fnuz["negative_zero_bits"] == 0 and not fnuz["negative_zero_kept"]
    with pytest.raises(ValueError, match="8-bit"):
        precision.encodings(torch.float16)


# --------------------------------------------------------------------------- bf16 weights: SR, Kahan


def _bf16_neighbours(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The bf16 values just below and just above each x (x itself twice when it is a bf16 value)."""
    near = x.to(torch.bfloat16)
    below = torch.where(
        near.float() > x, torch.nextafter(near, torch.tensor(-math.inf, dtype=torch.bfloat16)), near
    )
    above = torch.where(
        near.float() < x, torch.nextafter(near, torch.tensor(math.inf, dtype=torch.bfloat16)), near
    )
    return below.float(), above.float()


def test_stochastic_rounding_picks_a_neighbour_and_is_right_on_average():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1000, generator=gen) * 0.05
    below, above = _bf16_neighbours(x)
    for _ in range(5):
        got = precision.stochastic_round_bf16(x, gen).float()
        assert ((got == below) | (got == above)).all()
    exact = torch.tensor([-0.75, 1.0, 3.5])  # bf16 values are kept as they are
    assert torch.equal(precision.stochastic_round_bf16(exact).float(), exact)
    # 1 + 0.3 of a gap: up with probability 0.3 (20 000 seeded draws: 0.3 within 0.02)
    x = torch.full((20_000,), 1.0 + 0.3 * 2.0**-7)
    up = (precision.stochastic_round_bf16(x, torch.Generator().manual_seed(1)).float() > 1.0).float().mean()
    assert abs(up.item() - 0.3) < 0.02
    with pytest.raises(ValueError, match="float32"):
        precision.stochastic_round_bf16(x.half())


def test_update_rules_against_a_loop_written_here():
    """Weights of 1.0 (bf16 gap 2^-7) and an update of 1e-3, below half the gap: round-to-nearest
    loses every step; an fp32 master and Kahan's buffer keep them (checked with float64)."""
    weights, update, steps = torch.ones(64), torch.full((64,), 1e-3), 100
    runs = {r.rule: r for r in precision.compare_update_rules(weights, update, steps)}
    assert list(runs) == list(precision.UPDATE_RULES)
    assert runs["bf16 round-to-nearest"].arrived == 0.0
    assert runs["bf16 round-to-nearest"].rms_error == pytest.approx(1.0)
    exact = 1.0 + steps * torch.tensor(1e-3, dtype=torch.float32).double().item()
    master = torch.ones((), dtype=torch.float32)
    for _ in range(steps):
        master = master + torch.tensor(1e-3)
    assert runs["fp32 master"].arrived == pytest.approx((master.item() - 1.0) / (exact - 1.0), rel=1e-12)
    w, c = torch.ones((), dtype=torch.bfloat16), torch.zeros((), dtype=torch.bfloat16)
    for _ in range(steps):  # Kahan written out here
        y = 1e-3 - c.double()
        t = (w.double() + y).float().to(torch.bfloat16)
        c = ((t.double() - w.double()) - y).float().to(torch.bfloat16)
        w = t
    assert runs["bf16 + Kahan buffer"].arrived == pytest.approx(
        (w.double().item() - 1.0) / (exact - 1.0), rel=1e-6
    )
    assert abs(w.double().item() - exact) <= 2.0**-8  # within half a gap of the exact weight
    assert 0.5 < runs["bf16 stochastic rounding"].arrived < 1.5
    sizes = {"fp32 master": torch.float32.itemsize, "bf16 + Kahan buffer": 2 * torch.bfloat16.itemsize}
    assert {k: runs[k].bytes_per_param for k in sizes} == sizes
    assert runs["bf16 stochastic rounding"].bytes_per_param == torch.bfloat16.itemsize
    assert "bytes per weight" in str(runs["fp32 master"])
    with pytest.raises(ValueError, match="update rule"):
        precision.apply_updates(weights, update, steps, "fp16 nearest")


# --------------------------------------------------------------------------- bf16 all-reduce


def test_bf16_allreduce_on_real_ranks_matches_the_sum_written_here():
    """With two ranks any all-reduce returns one rounding of a + b: computed here, compared with
    what gloo returned; with four, the bf16 sum's own error is larger (seeded data)."""
    size = 4096
    two, four = precision.bf16_allreduce_errors((2, 4), size=size)
    a, b = precision.rank_gradient(0, size), precision.rank_gradient(1, size)
    exact = a.double() + b.double()

    def rel(got: torch.Tensor, ref: torch.Tensor) -> float:
        return ((got.double() - ref).norm() / ref.norm()).item()

    ab, bb = a.to(torch.bfloat16), b.to(torch.bfloat16)
    assert two.errors["fp32 grads, fp32 reduce"] == pytest.approx(rel(a + b, exact), rel=1e-6)
    assert two.errors["bf16 grads, fp32 reduce"] == pytest.approx(
        rel(ab.float() + bb.float(), exact), rel=1e-6
    )
    bf16_sum = (ab.float() + bb.float()).to(torch.bfloat16)
    assert two.errors["bf16 grads, bf16 reduce"] == pytest.approx(rel(bf16_sum, exact), rel=1e-6)
    assert two.errors[precision.REDUCTION_ONLY] == pytest.approx(
        rel(bf16_sum, ab.double() + bb.double()), rel=1e-6
    )
    assert two.backend == "gloo" and two.world_size == 2 and four.world_size == 4
    assert four.errors[precision.REDUCTION_ONLY] > two.errors[precision.REDUCTION_ONLY]
    assert "ranks" in str(four)
    with pytest.raises(ValueError, match="world_size"):
        precision.bf16_allreduce_errors((1,))


# --------------------------------------------------------------------------- float8 recipes


def _cast_back(x: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    top = torch.finfo(dtype).max
    return (x * scale).clamp(-top, top).to(dtype).float() / scale


def test_scaled_fp8_per_tensor_per_row_and_power_of_two():
    x = torch.randn(6, 40, generator=torch.Generator().manual_seed(2))
    x[3] *= 500.0
    top = torch.finfo(torch.float8_e4m3fn).max
    whole = precision.scaled_fp8(x)
    assert torch.equal(whole, _cast_back(x, top / x.abs().max(), torch.float8_e4m3fn))
    rows = precision.scaled_fp8(x, dim=1)
    for i in range(x.shape[0]):  # one row at a time, written here
        assert torch.equal(rows[i], _cast_back(x[i], top / x[i].abs().max(), torch.float8_e4m3fn))
    pow2 = precision.scaled_fp8(x, dim=1, power_of_two=True)
    for i in range(x.shape[0]):
        scale = 2.0 ** math.floor(math.log2(top / x[i].abs().max().item()))
        assert torch.equal(pow2[i], _cast_back(x[i], torch.tensor(scale), torch.float8_e4m3fn))


def _median_row_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    return ((got - ref).norm(dim=1) / ref.norm(dim=1)).median().item()


def test_recipe_errors_follow_torchaos_recipes():
    ops = precision.linear_operands("tiny", layer="blocks.0.up", batch_size=2)
    x, w, dy = ops.x, ops.w, ops.dy
    e4, e5, top4, top5 = torch.float8_e4m3fn, torch.float8_e5m2, 448.0, 57344.0

    def tensorwise(t: torch.Tensor, dtype: torch.dtype, top: float) -> torch.Tensor:
        return _cast_back(t, top / t.abs().max(), dtype)

    got = precision.recipe_errors(x, w, dy, "tensorwise")
    assert got["Y = X·Wᵀ"] == pytest.approx(
        _median_row_error(tensorwise(x, e4, top4) @ tensorwise(w, e4, top4).T, x @ w.T)
    )
    assert got["dX = dY·W"] == pytest.approx(
        _median_row_error(tensorwise(dy, e5, top5) @ tensorwise(w, e4, top4), dy @ w)
    )
    hp = precision.recipe_errors(x, w, dy, "rowwise_with_gw_hp")
    bf = dy.to(torch.bfloat16).float().T @ x.to(torch.bfloat16).float()
    assert hp["dW = dYᵀ·X"] == pytest.approx(_median_row_error(bf, dy.T @ x))
    assert hp["dW = dYᵀ·X"] < precision.recipe_errors(x, w, dy, "rowwise")["dW = dYᵀ·X"]
    # the operands are the layer's: dYᵀ·X is the weight gradient autograd computes
    model = models.build_model("tiny")
    idx, targets = models.make_batch("tiny", 2, seed=0)
    model(idx, targets).backward()
    assert torch.allclose(dy.T @ x, model.blocks[0].up.weight.grad, rtol=1e-4, atol=1e-9)
    with pytest.raises(ValueError, match="float8 recipe"):
        precision.recipe_errors(x, w, dy, "blockwise")
    with pytest.raises(ValueError, match="2-D"):
        precision.recipe_errors(x[0], w, dy, "rowwise")
    with pytest.raises(ValueError, match="outlier place"):
        ops.with_outlier("row")

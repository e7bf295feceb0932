"""Roofline helpers against hand calculations."""

import itertools
import math

import pytest

from helpers import hardware, roofline

H100_BF16 = 989.5e12
H100_BW = 3.35e12


def test_gemm_flops_and_bytes_by_hand():
    assert roofline.gemm_flops(64, 4096, 4096) == 2 * 64 * 4096 * 4096 == 2_147_483_648
    # b(MK + KN + MN) = 2 * (262144 + 16777216 + 262144) = 34_603_008
    assert roofline.gemm_bytes(64, 4096, 4096, 2) == 34_603_008


def test_intensity_m1_is_about_one_flop_per_byte_in_bf16():
    # 2*4096*4096 / (2*(4096 + 4096*4096 + 4096)) = 4096/4098
    i = roofline.intensity(roofline.gemm_flops(1, 4096, 4096), roofline.gemm_bytes(1, 4096, 4096, 2))
    assert i == pytest.approx(4096 / 4098, rel=1e-12)


def test_attainable_takes_the_lower_roof():
    assert roofline.attainable(10, 100e12, 1e12) == 10e12  # slanted roof
    assert roofline.attainable(1000, 100e12, 1e12) == 100e12  # flat roof


def test_ideal_time_and_limiter_by_hand():
    f, q = 2e12, 1e9  # 2 TFLOP, 1 GB
    assert roofline.ideal_time(f, q, 1e12, 1e12) == pytest.approx(2.0)
    assert roofline.limiter(f, q, 1e12, 1e12) == "compute"
    assert roofline.ideal_time(1e6, 1e9, 1e12, 1e12) == pytest.approx(1e-3)
    assert roofline.limiter(1e6, 1e9, 1e12, 1e12) == "memory"
    # a tie counts as compute-bound
    assert roofline.limiter(2.0, 1.0, 2.0, 1.0) == "compute"


def test_ridge_point_h100_bf16():
    assert roofline.ridge_point(H100_BF16, H100_BW) == pytest.approx(989.5 / 3.35, rel=1e-12)


def test_critical_m_h100_by_hand():
    # M >= R*b*K*N / (2KN - R*b*(K+N)) with R = 989.5/3.35*1e0 FLOP/B, b = 2, K = N = 4096
    r = H100_BF16 / H100_BW
    exact = r * 2 * 4096 * 4096 / (2 * 4096 * 4096 - r * 2 * 8192)
    assert 345 < exact < 346
    assert roofline.critical_m(4096, 4096, 2, H100_BF16, H100_BW) == 346
    assert (
        roofline.limiter(
            roofline.gemm_flops(345, 4096, 4096), roofline.gemm_bytes(345, 4096, 4096, 2), H100_BF16, H100_BW
        )
        == "memory"
    )


def test_critical_m_none_when_ridge_unreachable():
    # the intensity limit 2KN/(b(K+N)) = 32 for K=N=64, b=2: below a ridge of 1000
    assert roofline.critical_m(64, 64, 2, 1e15, 1e12) is None


@pytest.mark.parametrize("K,N,b", [(4096, 4096, 2), (1024, 8192, 1), (768, 3072, 4)])
def test_critical_m_is_the_smallest_compute_bound_m(K, N, b):
    peak, bw = 312e12, 2.039e12
    m = roofline.critical_m(K, N, b, peak, bw)
    bound = [
        roofline.limiter(roofline.gemm_flops(x, K, N), roofline.gemm_bytes(x, K, N, b), peak, bw)
        for x in (m - 1, m)
    ]
    assert bound == ["memory", "compute"]


def test_cost_table_rows_and_branch_flip():
    rows = roofline.cost_table([1, 256, 512, 4096])
    assert [r.limiter for r in rows] == ["memory", "memory", "compute", "compute"]
    assert rows[0].ideal_time == pytest.approx(rows[0].bytes / H100_BW)
    assert rows[-1].ideal_time == pytest.approx(rows[-1].flops / H100_BF16)


def test_format_table_shows_each_rows_figures_from_the_formulas():
    """Every cell of the table against F = 2MKN, Q = b(MK + KN + MN) and the roofs, each to the
    digits the column prints (half a unit of its last digit)."""
    K = N = 4096
    Ms = [1, 256, 512, 4096]
    head, rule, *lines = roofline.format_table(roofline.cost_table(Ms)).split("\n")
    assert head.split() == [
        "M",
        "GFLOP",
        "MB",
        "FLOP/B",
        "F/peak",
        "ms",
        "Q/BW",
        "ms",
        "ideal",
        "ms",
        "TFLOP/s",
        "limiter",
    ]
    assert rule == "-" * len(head) and len(lines) == len(Ms)
    for M, line in zip(Ms, lines, strict=True):
        f, q = 2 * M * K * N, 2 * (M * K + K * N + M * N)
        compute_s, memory_s = f / H100_BF16, q / H100_BW
        want = [
            f / 1e9,
            q / 1e6,
            f / q,
            compute_s * 1e3,
            memory_s * 1e3,
            max(compute_s, memory_s) * 1e3,
            min(H100_BF16, f / q * H100_BW) / 1e12,
        ]
        decimals = [3, 2, 1, 4, 4, 4, 1]  # as the columns print them
        m, *figures, limiter = line.split()
        assert int(m) == M and limiter == ("compute" if compute_s >= memory_s else "memory")
        for shown, value, d in zip(figures, want, decimals, strict=True):
            assert len(shown.split(".")[1]) == d and float(shown) == pytest.approx(value, abs=0.5 * 10**-d)


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), 64.5, True])
def test_matrix_sizes_must_be_positive_integers(bad):
    with pytest.raises(ValueError, match="positive whole number"):
        roofline.gemm_flops(bad, 4, 4)
    with pytest.raises(ValueError, match="positive whole number"):
        roofline.gemm_bytes(4, bad, 4, 2)
    assert roofline.gemm_flops(64.0, 4, 4) == roofline.gemm_flops(64, 4, 4)  # 64.0 is a count


@pytest.mark.parametrize("bad", [0, -2.0, float("nan"), float("inf")])
def test_bad_numbers_get_a_clear_error(bad):
    with pytest.raises(ValueError, match="positive finite"):
        roofline.gemm_bytes(4, 4, 4, bad)


def test_wrong_type_gets_a_clear_error():
    with pytest.raises(TypeError, match="must be a number"):
        roofline.gemm_bytes(4, 4, 4, "2")


def test_presets_use_dense_peak_and_dtype_width():
    p = roofline.presets()
    assert p["H100 SXM · bf16"] == (989.5e12, 3.35e12, 2)
    assert p["H100 SXM · fp8"] == (1979e12, 3.35e12, 1)
    assert p["T4 · fp32"] == (8.1e12, 0.32e12, 4)


def test_measure_gemms_on_cpu_reports_real_positive_numbers():
    points = roofline.measure_gemms([(8, 64, 64), (64, 64, 64)], dtype="fp32", device="cpu", iters=3)
    assert [p.M for p in points] == [8, 64]
    for p in points:
        assert p.achieved_flops > 0 and p.median_s > 0 and math.isfinite(p.spread)
        assert p.intensity == pytest.approx(
            roofline.intensity(roofline.gemm_flops(p.M, 64, 64), roofline.gemm_bytes(p.M, 64, 64, 4))
        )


def test_training_gemms_are_the_forward_and_both_gradients():
    rows = roofline.training_gemms(8192, 4096, 11008)
    assert [r[1:] for r in rows] == [(8192, 4096, 11008), (8192, 11008, 4096), (4096, 8192, 11008)]
    # same FLOPs and the same minimum traffic: the three share one intensity
    flops = {roofline.gemm_flops(*r[1:]) for r in rows}
    assert flops == {2 * 8192 * 4096 * 11008}
    assert len({roofline.gemm_bytes(*r[1:], 2) for r in rows}) == 1


def test_elementwise_ops_sit_far_below_any_ridge():
    add = roofline.ELEMENTWISE_OPS[0]
    assert add.intensity(2) == pytest.approx(1 / 6)  # 1 FLOP per 2 reads + 1 write of 2 bytes
    assert max(op.intensity(2) for op in roofline.ELEMENTWISE_OPS) < 3
    assert hardware.get_device("H100 SXM").ridge_point("bf16") > 90 * 3  # two orders of magnitude


def _point(M, intensity, achieved, spread=0.1):
    return roofline.GemmPoint(M, 1, 1, "fp32", intensity, achieved, 1e-3, spread, 1e-3)


def test_placement_names_the_roof_a_point_lands_above():
    peak, bw = 100e9, 10e9  # ridge at 10 FLOP/B
    assert roofline.placement(_point(64, 50, 80e9), peak, bw) == []
    flat = roofline.placement(_point(1024, 50, 150e9), peak, bw)
    assert len(flat) == 1 and "FLAT" in flat[0] and "150%" in flat[0]
    slanted = roofline.placement(_point(1, 1, 18e9), peak, bw)
    assert len(slanted) == 1 and "SLANTED" in slanted[0] and "cache" in slanted[0]
    noisy = roofline.placement(_point(16, 5, 10e9, spread=2.0), peak, bw)
    assert len(noisy) == 1 and "spread 200%" in noisy[0]


def test_share_of_the_prediction_has_an_interval_over_the_runs():
    M, K, N = 64, 256, 256
    f, q = roofline.gemm_flops(M, K, N), roofline.gemm_bytes(M, K, N, 4)
    peak, bw = 100e9, 10e9
    predicted_s = f / roofline.attainable(f / q, peak, bw)
    runs = tuple(predicted_s * factor for factor in (2.0, 2.1, 1.9, 2.05, 2.5, 1.95, 2.0, 4.0, 2.02))
    point = roofline.GemmPoint(M, K, N, "fp32", f / q, f / min(runs), sorted(runs)[4], 1.0, min(runs), runs)
    share, low, high = point.share_of(peak, bw)
    assert share == pytest.approx(0.5, rel=0.01)  # the median run took twice the prediction
    assert low < share < high and low > 1 / 4.0 and high < 1 / 1.9  # one slow run does not sink it
    with pytest.raises(ValueError, match="at least 3"):
        _point(64, 50, 80e9).share_of(peak, bw)


def test_explorer_sliders_hold_every_preset_exactly():
    ex = roofline.RooflineExplorer(M=64, preset="H100 SXM · bf16")
    for name, (peak, bw, _b) in roofline.presets().items():
        ex.preset.value = name
        # the slider sits on the datasheet figure itself, and its readout is that figure
        assert ex.peak.value == peak / 1e12 and ex.peak.label == f"{peak / 1e12:g}", name
        assert ex.bw.value == bw / 1e12 and ex.bw.label == f"{bw / 1e12:g}", name
        assert f"<b>{name}</b>" in ex.title.value and f"peak {peak / 1e12:g} TFLOP/s" in ex.title.value
    ex.preset.value = "T4 · fp16"
    want = roofline.cost_row(64, 4096, 4096, 2, 65e12, 320e9)
    assert ex.current() == want and f"{want.ideal_time * 1e3:.4f} ms" in ex.row.value
    stops = [v for _, v in ex.peak.options]
    ex.peak.value = stops[stops.index(65.0) + 1]  # one stop up: custom roofs, from the slider value
    assert "custom roofs" in ex.title.value and f"peak {ex.peak.label} TFLOP/s" in ex.title.value
    assert ex.current().attainable <= ex.peak.value * 1e12
    with pytest.raises(ValueError, match="Unknown preset"):
        roofline.RooflineExplorer(preset="T5 · fp16")


def test_explorer_slider_stops_are_log_spaced_and_unique():
    ex = roofline.RooflineExplorer()
    for slider, (low, high) in ((ex.peak, (0.1, 1e4)), (ex.bw, (0.01, 10.0))):
        labels, values = zip(*slider.options, strict=True)
        assert len(set(labels)) == len(labels) and list(values) == sorted(values)
        assert values[0] == low and values[-1] == high
        ratios = [b / a for a, b in itertools.pairwise(values)]
        assert max(ratios) < 1.03  # about 100 stops a decade, presets in between
        assert all(float(label) == value for label, value in slider.options)  # readout = value


def test_explorer_redraws_on_slider_and_preset_changes():
    ex = roofline.RooflineExplorer(M=64, preset="H100 SXM · bf16")
    first = (ex.row.value, ex.current())
    assert first[1].limiter == "memory"
    ex.m.value = 4096
    assert ex.current().limiter == "compute" and ex.row.value != first[0]
    ex.preset.value = "T4 · fp32"
    assert ex.b.value == 4 and ex.peak.value == 8.1
    assert ex.current().attainable <= hardware.get_device("T4").peak("fp32") * 1.0001
    bundle = ex._repr_mimebundle_()
    assert {"application/vnd.jupyter.widget-view+json", "image/png", "text/plain"} <= set(bundle)


def test_fastest_option_weighs_bandwidth_for_memory_bound_shapes():
    memory_bound = [("H100 SXM", "bf16"), ("H200", "bf16"), ("A100 80GB SXM", "bf16")]
    assert roofline.fastest(memory_bound, 1, 8192, 8192) == 1  # same peak, more bandwidth
    # fp8 halves the bytes: 1 byte at 3.35 TB/s beats 2 bytes at 4.8 TB/s
    assert roofline.fastest([("H100 SXM", "fp8"), ("H200", "bf16")], 1, 8192, 8192) == 0
    compute_bound = [("A100 80GB SXM", "tf32"), ("L4", "fp8"), ("T4", "fp16")]
    assert roofline.fastest(compute_bound, 8192, 8192, 8192) == 1
    t = roofline.option_time("L4", "fp8", 8192, 8192, 8192)
    assert t == pytest.approx(2 * 8192**3 / 242.5e12)
    with pytest.raises(ValueError):
        roofline.fastest([], 1, 1, 1)


# ------------------------------------------------------- measured points against the prediction
# Issue 42: under load chapter 1 printed "0 % of the prediction" and "2475 %". A share whose
# interval is too wide, or whose roof was measured with widely spread runs, is not a figure.


def _roofs(gemm_runs=(1.0, 1.01, 1.02), copy_runs=(1.0, 1.01, 1.02), peak=100e9, bw=10e9):
    """Measured roofs (ridge at ``peak / bw`` FLOP/B) whose timed runs are ``gemm_runs`` / ``copy_runs``."""
    from helpers.bench import Measurement

    m = hardware.MeasuredDevice("cpu", "CPU", 512)
    m.gemm_runs["fp32"], m.gemm_flops["fp32"] = Measurement(list(gemm_runs), 1.0, "cpu"), peak
    m.copy_run, m.copy_bandwidth = Measurement(list(copy_runs), 1.0, "cpu"), bw
    return m


def _timed_point(M, K, N, factors, peak=100e9, bw=10e9):
    """A GEMM whose runs took ``factors`` times the roofline's prediction."""
    f, q = roofline.gemm_flops(M, K, N), roofline.gemm_bytes(M, K, N, 4)
    predicted_s = f / roofline.attainable(f / q, peak, bw)
    runs = tuple(predicted_s * x for x in factors)
    ordered = sorted(runs)
    return roofline.GemmPoint(
        M, K, N, "fp32", f / q, f / ordered[0], ordered[len(runs) // 2], 0.0, ordered[0], runs
    )


STEADY = (2.0, 2.1, 1.9, 2.05, 2.5, 1.95, 2.0, 4.0, 2.02)  # one slow run, the rest within 10 %
SCATTERED = (1.0, 30.0, 2.0, 0.5, 60.0, 3.0, 8.0, 0.9, 20.0)  # a busy machine: anywhere


def test_a_steady_point_under_steady_roofs_is_compared():
    c = roofline.against_prediction(_timed_point(4, 256, 256, STEADY), _roofs())
    assert c.too_noisy == "" and c.roof == "memory"  # 1.9 FLOP/B, under the ridge at 10
    assert c.share == pytest.approx(0.5, rel=0.01) and c.interval_width <= roofline.COMPARABLE_WIDTH


def test_runs_that_scatter_are_too_noisy_to_compare():
    c = roofline.against_prediction(_timed_point(16, 256, 256, SCATTERED), _roofs())
    assert c.too_noisy == "runs" and c.high / c.low > 2


def test_a_roof_measured_with_spread_runs_makes_its_points_too_noisy():
    busy_copy = _roofs(copy_runs=(1.0, 1.2, 2.5))  # spread 125 %: the bandwidth roof is unsure
    memory_bound, compute_bound = _timed_point(1, 256, 256, STEADY), _timed_point(1024, 1024, 1024, STEADY)
    assert roofline.against_prediction(memory_bound, busy_copy).too_noisy == "roof"
    assert roofline.against_prediction(compute_bound, busy_copy).too_noisy == ""  # under the steady flat roof
    busy_gemm = _roofs(gemm_runs=(1.0, 1.2, 2.5))
    c = roofline.against_prediction(compute_bound, busy_gemm)
    assert c.too_noisy == "roof" and c.roof == "compute" and c.roof_spread == pytest.approx(1.25)


def test_against_prediction_needs_the_points_dtype_among_the_roofs():
    point = _timed_point(16, 256, 256, STEADY)
    with pytest.raises(ValueError, match="no bf16 GEMM peak"):
        roofline.against_prediction(roofline.GemmPoint(**{**point.__dict__, "dtype": "bf16"}), _roofs())


def _chapter_cell(cell_id: str) -> str:
    import json
    from pathlib import Path

    nb = json.loads(
        (Path(__file__).resolve().parents[1] / "solutions/01_roofline/01_roofline.ipynb").read_text()
    )
    return next("".join(c["source"]) for c in nb["cells"] if c.get("id") == cell_id)


def _run_measure_cell(monkeypatch, capsys, points, measured) -> list[str]:
    """Chapter 1's "Measure" cell as the notebook has it, on made-up measurements."""
    import types

    import matplotlib

    matplotlib.use("Agg")
    monkeypatch.setattr(roofline, "measure_gemms", lambda *a, **k: points)
    namespace = {
        "roofline": roofline,
        "hardware": hardware,
        "shapes": [(p.M, p.K, p.N) for p in points],
        "dtype": "fp32",
        "RT": types.SimpleNamespace(device="cpu", gpu=None),
        "measured": measured,
        "peak_meas": measured.gemm_flops["fp32"],
        "bw_meas": measured.copy_bandwidth,
    }
    exec(compile(_chapter_cell("cell-38"), "cell-38", "exec"), namespace)
    return capsys.readouterr().out.splitlines()


def test_the_notebook_says_too_noisy_instead_of_a_percentage(monkeypatch, capsys):
    points = [_timed_point(16, 256, 256, SCATTERED), _timed_point(4, 256, 256, STEADY)]  # memory-bound
    lines = _run_measure_cell(monkeypatch, capsys, points, _roofs())
    assert lines[0].startswith("M=   16: too noisy to compare with the prediction: its runs put it anywhere")
    assert "of the prediction (95 % interval" not in lines[0]
    assert lines[1].startswith("M=    4: median run") and " 50% of the prediction (95 % interval" in lines[1]
    lines = _run_measure_cell(monkeypatch, capsys, points[1:], _roofs(copy_runs=(1.0, 1.2, 2.5)))
    assert lines == [
        "M=    4: too noisy to compare with the prediction: the roof it is predicted from was "
        "measured with runs that spread 125%"
    ]


def test_the_too_noisy_lines_have_their_chinese(monkeypatch, capsys):
    from helpers import i18n

    points = [_timed_point(16, 256, 256, SCATTERED)]
    lines = _run_measure_cell(monkeypatch, capsys, points, _roofs())
    lines += _run_measure_cell(monkeypatch, capsys, points, _roofs(copy_runs=(1.0, 1.2, 2.5)))
    for line in lines:
        shown = i18n.text_in("zh", line)
        assert "太嘈杂，无法与预测值比较" in shown and "too noisy" not in shown, shown

"""Roofline helpers against hand calculations (seed 000 §01-02)."""

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
    assert roofline.ridge_point(H100_BF16, H100_BW) == pytest.approx(295.373, rel=1e-5)


def test_critical_m_h100_by_hand():
    # M >= R*b*K*N / (2KN - R*b*(K+N)) with R = 989.5/3.35*1e0 FLOP/B, b = 2, K = N = 4096
    r = H100_BF16 / H100_BW
    exact = r * 2 * 4096 * 4096 / (2 * 4096 * 4096 - r * 2 * 8192)
    assert 345 < exact < 346
    assert roofline.critical_m(4096, 4096, 2, H100_BF16, H100_BW) == 346
    assert roofline.limiter(roofline.gemm_flops(345, 4096, 4096),
                            roofline.gemm_bytes(345, 4096, 4096, 2), H100_BF16, H100_BW) == "memory"


def test_critical_m_none_when_ridge_unreachable():
    # the intensity limit 2KN/(b(K+N)) = 32 for K=N=64, b=2: below a ridge of 1000
    assert roofline.critical_m(64, 64, 2, 1e15, 1e12) is None


@pytest.mark.parametrize("K,N,b", [(4096, 4096, 2), (1024, 8192, 1), (768, 3072, 4)])
def test_critical_m_is_the_smallest_compute_bound_m(K, N, b):
    peak, bw = 312e12, 2.039e12
    m = roofline.critical_m(K, N, b, peak, bw)
    bound = [roofline.limiter(roofline.gemm_flops(x, K, N), roofline.gemm_bytes(x, K, N, b), peak, bw)
             for x in (m - 1, m)]
    assert bound == ["memory", "compute"]


def test_cost_table_rows_and_branch_flip():
    rows = roofline.cost_table([1, 256, 512, 4096])
    assert [r.limiter for r in rows] == ["memory", "memory", "compute", "compute"]
    assert rows[0].ideal_time == pytest.approx(rows[0].bytes / H100_BW)
    assert rows[-1].ideal_time == pytest.approx(rows[-1].flops / H100_BF16)
    text = roofline.format_table(rows)
    assert text.count("\n") == len(rows) + 1 and "limiter" in text


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf")])
def test_bad_numbers_get_a_clear_error(bad):
    with pytest.raises(ValueError, match="positive finite"):
        roofline.gemm_flops(bad, 4, 4)


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
            roofline.intensity(roofline.gemm_flops(p.M, 64, 64), roofline.gemm_bytes(p.M, 64, 64, 4)))


def test_explorer_redraws_on_slider_and_preset_changes():
    ex = roofline.RooflineExplorer(M=64, preset="H100 SXM · bf16")
    first = (ex.row.value, ex.current())
    assert first[1].limiter == "memory"
    ex.m.value = 4096
    assert ex.current().limiter == "compute" and ex.row.value != first[0]
    ex.preset.value = "T4 · fp32"
    assert ex.b.value == 4 and ex.peak.value == pytest.approx(8.1)
    assert ex.current().attainable <= hardware.get_device("T4").peak("fp32") * 1.0001
    bundle = ex._repr_mimebundle_()
    assert {"application/vnd.jupyter.widget-view+json", "image/png", "text/plain"} <= set(bundle)

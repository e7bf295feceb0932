import pytest
import torch

from helpers import bench


def test_measure_counts_warmup_apart_and_reports_stats():
    calls = []
    result = bench.measure(lambda: calls.append(1), warmup=3, iters=7, device="cpu")
    assert len(calls) == 10 and len(result.samples) == 7
    assert result.min <= result.median <= result.max
    assert result.percentile(0) == result.min and result.percentile(100) == result.max
    assert result.first_call >= 0 and result.peak_allocated_bytes is None  # not on CPU


def test_percentile_interpolates():
    m = bench.Measurement([1.0, 2.0, 3.0, 4.0], 0.0, "cpu")
    assert m.percentile(50) == 2.5 and m.median == 2.5
    assert m.spread == pytest.approx(3 / 2.5)


def test_bad_arguments():
    with pytest.raises(ValueError):
        bench.measure(lambda: None, iters=0)
    with pytest.raises(ValueError, match="Unknown device"):
        bench.resolve_device("tpu")


def test_resolve_auto():
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert bench.resolve_device("auto").type == expected

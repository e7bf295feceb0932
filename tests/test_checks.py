import pytest

from helpers import checks, roofline


def test_close_passes_and_prints(capsys):
    checks.close(1.0000001, 1.0, "x")
    assert "✓ x" in capsys.readouterr().out


def test_close_failure_message_says_expected_got_and_hint():
    with pytest.raises(checks.CheckFailed) as info:
        checks.close(0.5, 1.0, "intensity", hint="F = 2MKN")
    message = str(info.value)
    assert "expected 1" in message and "got 0.5" in message and "Hint: F = 2MKN" in message
    assert isinstance(info.value, AssertionError)  # nbgrader scores AssertionError as a fail


def test_close_reports_none_as_missing_return():
    with pytest.raises(checks.CheckFailed, match="return"):
        checks.close(None, 1.0, "x")


def test_close_rejects_non_numbers_and_nan():
    with pytest.raises(checks.CheckFailed):
        checks.close("abc", 1.0, "x")
    with pytest.raises(checks.CheckFailed):
        checks.close(float("nan"), 1.0, "x")


def test_equal_is_case_insensitive_for_labels_but_strict_for_bools():
    checks.equal(" Compute", "compute", "label", quiet=True)
    with pytest.raises(checks.CheckFailed):
        checks.equal(1, True, "flag")
    with pytest.raises(checks.CheckFailed):
        checks.equal(345, 346, "critical M")


def test_one_of():
    checks.one_of("memory", ["compute", "memory"], "label")
    with pytest.raises(checks.CheckFailed, match="one of"):
        checks.one_of("bandwidth", ["compute", "memory"], "label")


def test_blocked_switches_off_every_reference_and_restores():
    from helpers.roofline import gemm_flops as alias

    with checks.blocked(roofline, "gemm_flops"):
        with pytest.raises(RuntimeError, match="switched off"):
            roofline.gemm_flops(1, 2, 3)
        with pytest.raises(RuntimeError, match="switched off"):
            alias(1, 2, 3)
    assert roofline.gemm_flops(1, 2, 3) == 12 and alias(1, 2, 3) == 12


def test_blocked_restores_after_an_exception():
    with pytest.raises(ZeroDivisionError), checks.blocked(roofline, "ridge_point"):
        raise ZeroDivisionError
    assert roofline.ridge_point(10.0, 2.0) == 5.0


def test_blocked_reaches_copies_from_a_reimported_module():
    import importlib
    import sys

    from helpers.roofline import gemm_flops as old_binding

    saved = sys.modules.pop("helpers.roofline")
    try:
        fresh = importlib.import_module("helpers.roofline")
        assert fresh is not saved and fresh.gemm_flops is not old_binding
        with checks.blocked(fresh, "gemm_flops"):
            with pytest.raises(RuntimeError, match="switched off"):
                old_binding(1, 2, 3)
        assert old_binding(1, 2, 3) == 12 and fresh.gemm_flops(1, 2, 3) == 12
    finally:
        sys.modules["helpers.roofline"] = saved
        import helpers
        helpers.roofline = saved


def test_at_most_says_the_count_and_the_limit(capsys):
    checks.at_most(2, 3, "host read-backs")
    assert "✓ host read-backs: 2 (at most 3)" in capsys.readouterr().out
    with pytest.raises(checks.CheckFailed) as info:
        checks.at_most(23, 5, "host read-backs in 23 steps", hint="sum on the device")
    assert "expected at most 5, got 23" in str(info.value) and "True" not in str(info.value)
    with pytest.raises(checks.CheckFailed):
        checks.at_most(None, 5, "count")


def test_each_case_runs_on_its_own():
    def half(x):
        return 10 / x

    answers = checks.each(half, [(2,), (0,), (5,)])
    assert answers[0] == 5 and answers[2] == 2
    assert answers[1].startswith("raised ZeroDivisionError: ")
    with pytest.raises(checks.CheckFailed):  # the crashed case fails its own comparison
        checks.equal(answers[1], 0, "10 / 0")

import re

import numpy as np
import pytest

from helpers import _records, checks, roofline


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


# ------------------------------------------------------------------ tolerances, at their edges
# The three places a number is judged: a visible check in the kernel, a hidden check compared in
# the kernel (stock nbgrader), and the grading process's comparison of records. Each must give
# the same verdict, so each case below runs through all three.

DEFAULT_RTOL = 1e-6  # documented default of every close check; atol defaults to 0


def _visible_close(got, expected, **tolerance):
    try:
        checks.close(got, expected, "x", quiet=True, **tolerance)
    except checks.CheckFailed:
        return False
    return True


def _hidden_close(got, expected, **tolerance):
    try:
        checks.hidden.close(got, "x", expect=lambda: expected, **tolerance)
    except checks.CheckFailed:
        return False
    return True


def _records_close(got, expected, **tolerance):
    return _records.compare("close", got, expected, **tolerance)


def _visible_equal(got, expected):
    try:
        checks.equal(got, expected, "x", quiet=True)
    except checks.CheckFailed:
        return False
    return True


def _hidden_equal(got, expected):
    try:
        checks.hidden.equal(got, "x", expect=lambda: expected)
    except checks.CheckFailed:
        return False
    return True


def _records_equal(got, expected):
    return _records.compare("equal", got, expected)


CLOSE = pytest.mark.parametrize(
    "passes", [_visible_close, _hidden_close, _records_close], ids=["visible", "hidden", "records"]
)
EQUAL = pytest.mark.parametrize(
    "passes", [_visible_equal, _hidden_equal, _records_equal], ids=["visible", "hidden", "records"]
)


@CLOSE
def test_default_relative_tolerance_is_one_in_a_million(passes):
    expected = 1000.0
    for side in (1, -1):
        assert passes(expected * (1 + side * 0.9 * DEFAULT_RTOL), expected)  # just inside
        assert not passes(expected * (1 + side * 1.1 * DEFAULT_RTOL), expected)  # just outside


@CLOSE
def test_default_absolute_tolerance_is_zero(passes):
    assert passes(0.0, 0.0) and passes(-0.0, 0.0)
    # against 0 a relative tolerance allows nothing: only atol lets a tiny number through
    assert not passes(1e-300, 0.0) and not passes(-1e-12, 0.0)
    assert passes(1e-12, 0.0, atol=1e-9) and passes(-1e-12, 0.0, atol=1e-9)


@CLOSE
def test_given_tolerances_hold_at_their_edges(passes):
    rtol, atol = 0.1, 1e-3
    for side in (1, -1):
        assert passes(2.0 * (1 + side * 0.5 * rtol), 2.0, rtol=rtol)
        assert not passes(2.0 * (1 + side * 1.5 * rtol), 2.0, rtol=rtol)
        assert passes(side * 0.9 * atol, 0.0, atol=atol)
        assert not passes(side * 1.1 * atol, 0.0, atol=atol)
    # within either tolerance passes: 1 + 5 atol is outside rtol, inside 10 atol
    assert passes(1.0 + 5 * atol, 1.0, rtol=atol, atol=10 * atol)
    assert not passes(1.0 + 5 * atol, 1.0, rtol=atol, atol=atol)


@CLOSE
def test_nan_never_passes_and_inf_only_equals_itself(passes):
    nan, inf = float("nan"), float("inf")
    assert not passes(nan, 1.0) and not passes(nan, nan) and not passes(1.0, nan)
    assert not passes(nan, 1.0, rtol=1.0, atol=1e300)
    assert passes(inf, inf) and passes(-inf, -inf)
    assert not passes(inf, -inf) and not passes(1e308, inf) and not passes(inf, 1e308)
    assert not passes(inf, 1.0, rtol=1.0, atol=1e300)  # no tolerance reaches an infinity


@CLOSE
def test_close_takes_ints_and_floats_alike_but_never_a_bool(passes):
    assert passes(3, 3.0) and passes(3.0, 3) and passes(2**53, float(2**53))
    assert not passes(True, 1.0) and not passes(False, 0.0)


@EQUAL
def test_equal_takes_ints_and_floats_alike_but_a_bool_never_equals_a_number(passes):
    assert passes(3, 3.0) and passes(3.0, 3) and passes(True, True) and passes(False, False)
    assert not passes(True, 1) and not passes(1, True) and not passes(0, False)
    assert not passes(False, 0.0) and not passes(1.0, True)
    assert not passes(3, 3.0000001)  # equal means equal: no tolerance


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

    # the chapter's package and its parts: a fresh import runs them all again
    parts = {
        name: sys.modules.pop(name)
        for name in list(sys.modules)
        if name == "helpers.roofline" or name.startswith("helpers.roofline.")
    }
    saved = parts["helpers.roofline"]
    try:
        fresh = importlib.import_module("helpers.roofline")
        assert fresh is not saved and fresh.gemm_flops is not old_binding
        with checks.blocked(fresh, "gemm_flops"):
            with pytest.raises(RuntimeError, match="switched off"):
                old_binding(1, 2, 3)
        assert old_binding(1, 2, 3) == 12 and fresh.gemm_flops(1, 2, 3) == 12
    finally:
        sys.modules.update(parts)
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


# ------------------------------------------------ what a learner sees when a check fails
# Issue 42: the traceback above a check's message showed the course's frames (helpers/checks.py,
# _fail). In a notebook it shows the learner's frames and the message only.

ANSI = re.compile(r"\x1b\[[0-9;]*m")  # IPython colours its tracebacks


def _run_cells(sources: list[str]) -> list[dict]:
    """Execute ``sources`` as the cells of one notebook in a real kernel; each cell's outputs."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    NotebookClient(nb, kernel_name="python3", allow_errors=True, timeout=120).execute()
    return [cell.outputs for cell in nb.cells]


def _error(outputs: list[dict]) -> tuple[str, str, str]:
    (error,) = [o for o in outputs if o["output_type"] == "error"]
    return error["ename"], error["evalue"], ANSI.sub("", "\n".join(error["traceback"]))


def test_a_failed_check_in_a_notebook_shows_the_learners_frames_and_the_message_only():
    outputs = _run_cells(
        [
            "from helpers import checks\ndef answer():\n    return 0\n"
            "def verify(x):\n    checks.close(x, 1.0, 'x in my own check')\n",
            "checks.equal(answer(), 2, 'the answer', hint='add one')",
            "checks.hidden.close(answer(), 'the hidden answer', expect=lambda: 2.0)",
            "verify(0.5)",
            "1 / answer()",
        ]
    )
    for cell, line, message in (
        (1, "checks.equal(answer(), 2, 'the answer', hint='add one')", "✗ the answer: expected 2, got 0."),
        (2, "checks.hidden.close(answer(), 'the hidden answer'", "✗ the hidden answer: expected 2, got 0."),
        (3, "verify(0.5)", "✗ x in my own check: expected 1, got 0.5."),
    ):
        ename, evalue, shown = _error(outputs[cell])
        assert ename == "CheckFailed" and evalue.startswith(message)  # nbgrader: the cell failed
        assert line in shown and f"CheckFailed: {message}" in shown, shown
        assert "helpers/checks.py" not in shown and "_fail" not in shown and "hidden frame" not in shown, (
            shown
        )
        assert "Traceback (most recent call last)" not in shown and f"Cell In[{cell + 1}], line " in shown
    assert "Hint: add one" in _error(outputs[1])[2]
    assert "checks.close(x, 1.0, 'x in my own check')" in _error(outputs[3])[2]  # the learner's function
    ename, _, shown = _error(outputs[4])  # any other error keeps its whole traceback
    assert ename == "ZeroDivisionError" and "1 / answer()" in shown


def test_in_a_chinese_notebook_a_failed_check_shows_the_cell_and_the_message_in_chinese():
    """Issue 43: an English traceback printed above every Chinese check message. The cell's
    place is said in Chinese, the course's frames and IPython's English header are left out."""
    from helpers.i18n import tr_in

    outputs = _run_cells(
        [
            "from helpers import checks, i18n\ni18n.set_language('zh')\n"
            "def verify(x):\n    checks.equal(x, 5, 'the count')\n",
            "verify('five')",
        ]
    )
    ename, evalue, shown = _error(outputs[1])
    lines = shown.splitlines()
    assert ename == "CheckFailed" and "Traceback" not in shown and "helpers/checks.py" not in shown, shown
    # the cell that called the learner's function, then the function's own cell, each with its line
    assert [ln for ln in lines if ln.startswith("单元格 In[")] == [
        "单元格 In[2]，第 1 行",
        "单元格 In[1]，第 4 行",
    ]
    assert "----> 1 verify('five')" in lines and "----> 4 checks.equal(x, 5, 'the count')" in lines
    assert lines[-1] == f"CheckFailed: {evalue}" and "期望 5，实际得到 'five'" in evalue, evalue
    note = tr_in("zh", " Your answer is {got}, where {expected} is expected.", got="`str`", expected="x")
    assert note.startswith("你的答案是") and evalue.endswith(
        "你的答案是 `str`，而这里需要的是数值（`int` 或 `float`）。"
    )


# ------------------------------------------------ an answer of the wrong type (issue 43)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_an_answer_of_the_wrong_type_is_told_both_types(lang, monkeypatch):
    """A string where a number is asked, a list where a dict is asked, a number where text is
    asked: the message names the answer's type and the one expected, in the notebook's language."""
    from helpers import i18n

    words = {  # the answer's type and the expected type as each language says them
        "en": {
            "str": "a `str`",
            "number": "a number (`int` or `float`)",
            "list": "a `list`",
            "dict": "a `dict`",
            "list or tuple": "a `list` or `tuple`",
        },
        "zh": {
            "str": " `str`",
            "number": "数值（`int` 或 `float`）",
            "list": " `list`",
            "dict": " `dict`",
            "list or tuple": " `list` 或 `tuple`",
        },
    }[lang]
    note = {"en": "Your answer is {}, where {} is expected.", "zh": "你的答案是{}，而这里需要的是{}。"}[lang]
    cases = [
        (lambda: checks.equal("normal", 5, "labels"), "str", "number"),
        (lambda: checks.close("half", 0.5, "ratio"), "str", "number"),
        (lambda: checks.close([1.0], 1.0, "ratio"), "list", "number"),
        (lambda: checks.equal(3, "fp16", "format"), "number", "str"),
        (lambda: checks.hidden.equal([1, 2], "ledger", expect=lambda: {"a": 1}), "list", "dict"),
        (lambda: checks.hidden.close("7", "bytes", expect=lambda: [1.0, 2.0]), "str", "list or tuple"),
    ]
    monkeypatch.setattr(i18n, "_chosen", [lang])  # the language only: set_language would load fonts
    for fail, got, expected in cases:
        with pytest.raises(checks.CheckFailed) as info:
            fail()
        assert note.format(words[got], words[expected]) in str(info.value), str(info.value)
    for fail in (  # the same type, or None (its own sentence): no type sentence
        lambda: checks.equal(4, 5, "count"),
        lambda: checks.close(np.float32(0.4), 0.5, "ratio"),
        lambda: checks.equal("bf16", "fp16", "format"),
        lambda: checks.hidden.equal((1, 2), "pair", expect=lambda: [1, 3]),
        lambda: checks.equal(None, 5, "count"),
    ):
        with pytest.raises(checks.CheckFailed) as info:
            fail()
        assert note.split("{}")[0].strip() not in str(info.value), str(info.value)


def test_of_type_checks_the_type_keys_and_length_and_names_what_the_answer_has(capsys):
    checks.of_type({"a": 1, "b": 2}, dict, "a dict", keys=["a", "b"], only=True)
    checks.of_type({"a": 1, "b": 2, "c": 3}, dict, "a dict holding a and b", keys=["b", "a"], quiet=True)
    checks.of_type((1, 2), (tuple, list), "a pair", length=2, quiet=True)
    checks.of_type(3, int, "a count", quiet=True)
    checks.of_type(["nsys", "profile"], list, "argv", items=str, quiet=True)
    checks.of_type([], list, "no items", items=str, quiet=True)
    assert capsys.readouterr().out == "✓ a dict\n"
    cases = [
        (lambda: checks.of_type([1, 2], dict, "ledger"), "expected a `dict`, got a `list`: [1, 2]."),
        (lambda: checks.of_type(True, int, "count"), "expected a `int`, got a `bool`: True."),
        (
            lambda: checks.of_type("ab", (tuple, list), "pair"),
            "expected a `tuple` or a `list`, got a `str`: 'ab'.",
        ),
        (
            lambda: checks.of_type({"a": 1}, dict, "d", keys=["a", "b"]),
            "expected the keys 'a', 'b', got the keys 'a'.",
        ),
        (lambda: checks.of_type({}, dict, "d", keys=["a"]), "expected the keys 'a', got the keys —."),
        (
            lambda: checks.of_type({"a": 1, "z": 0}, dict, "d", keys=["a"], only=True),
            "expected the keys 'a', got the keys 'a', 'z'.",
        ),
        (lambda: checks.of_type([1, 2, 3], list, "pair", length=2), "expected 2 items, got 3 items."),
        (
            lambda: checks.of_type(["-o", 3], list, "argv", items=str),
            "expected every item a `str`, got item 1, a `int`: 3.",
        ),
        (
            lambda: checks.of_type([1, True], list, "counts", items=int),
            "expected every item a `int`, got item 1, a `bool`: True.",
        ),
    ]
    for fail, message in cases:
        with pytest.raises(checks.CheckFailed) as info:
            fail()
        assert message in str(info.value), str(info.value)
    with pytest.raises(checks.CheckFailed) as info:
        checks.of_type(list(range(100)), dict, "ledger")
    shown = str(info.value).split("got ", 1)[1]
    assert len(shown) <= checks.GOT_CHARS + 1 and "…" in shown  # a long answer is cut, as the grader shows it


def test_a_one_option_check_says_the_option_not_one_of():
    for fail in (
        lambda: checks.one_of("fp8", ["bf16"], "format"),
        lambda: checks.hidden.one_of("fp8", "format", expect=lambda: ["bf16"]),
    ):
        with pytest.raises(checks.CheckFailed) as info:
            fail()
        assert "expected 'bf16', got 'fp8'." in str(info.value), str(info.value)
    with pytest.raises(checks.CheckFailed) as info:
        checks.one_of("fp8", ["bf16", "fp16"], "format")
    assert "expected one of 'bf16', 'fp16', got 'fp8'." in str(info.value)


def test_the_graders_feedback_says_the_new_kinds_in_the_submissions_language():
    """The grader writes a visible check's feedback from the reference run's ``shown``
    (helpers.checks.expected_text): of_type's type, keys and length, in both languages."""
    assert checks.expected_text({"kind": "type", "expected": "tuple, list"}, "en") == "a `tuple` or a `list`"
    assert checks.expected_text({"kind": "type", "expected": "tuple, list"}, "zh") == "`tuple` 或 `list`"
    assert checks.expected_text({"kind": "keys", "expected": "'a', 'b'"}, "zh") == "键 'a', 'b'"
    assert checks.expected_text({"kind": "length", "expected": "2"}, "en") == "2 items"
    assert checks.expected_text({"kind": "length", "expected": "2"}, "zh") == "2 个元素"


def test_outside_ipython_a_failed_check_keeps_its_full_traceback():
    import traceback

    with pytest.raises(checks.CheckFailed) as info:
        checks.equal(0, 2, "the answer")
    shown = "".join(traceback.format_exception(info.value))
    assert "checks.py" in shown and "_fail" in shown  # pytest and plain Python: unchanged
    assert checks.CheckFailed("m")._render_traceback_() == ["CheckFailed: m"]  # no IPython shell here


# ------------------------------------------------ a visible check must catch the exercise's mistake
# Issue 42: in chapter 4's exercise 6, `return 0` got "✓ the slower rank of the shipped
# ddp_one_slow run" and 0/2 when graded. The visible checks now move the slow rank and add a
# balanced run, so no constant passes them.


def _student_cell(chapter: str, grade_id: str) -> str:
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "notebooks" / chapter / f"{chapter}.ipynb"
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return next(
        "".join(c["source"]) for c in cells if c["metadata"].get("nbgrader", {}).get("grade_id") == grade_id
    )


@pytest.mark.parametrize("constant", [0, 1, None])
def test_no_constant_answer_passes_the_visible_checks_of_chapter_4_exercise_6(constant, capsys):
    from helpers import timeline

    learner = {"timeline": timeline, "checks": checks, "find_straggler": lambda breakdowns_by_rank: constant}
    with pytest.raises(checks.CheckFailed, match="expected"):
        exec(_student_cell("04_timeline", "ex6_straggler_test"), learner)


def test_a_right_answer_passes_the_visible_checks_of_chapter_4_exercise_6(capsys):
    from helpers import timeline

    learner = {"timeline": timeline, "checks": checks, "find_straggler": timeline.straggler}
    exec(_student_cell("04_timeline", "ex6_straggler_test"), learner)
    assert capsys.readouterr().out.count("✓") == 3


# ---------------------------------------------------------------- fair types, honest messages


def test_numpy_strings_and_scalars_count_as_their_python_values():
    import numpy as np

    labels = [np.str_("overflow"), np.str_("normal"), np.str_("underflow")]
    assert _records.to_plain(labels) == ["overflow", "normal", "underflow"]
    assert _records.to_plain(np.array(["a", "b"])) == ["a", "b"]
    assert _records.to_plain({"n": np.int64(3), "x": np.float64(0.5), "ok": np.bool_(True)}) == {
        "n": 3,
        "x": 0.5,
        "ok": True,
    }
    assert _records.compare("equal", _records.to_plain(labels), ["overflow", "normal", "underflow"], 0, 0)
    checks.hidden.equal(labels, "labels", expect=lambda: ["overflow", "normal", "underflow"])
    checks.hidden.close(np.float64(0.3000001), "a number", expect=lambda: 0.3, rtol=1e-5)
    checks.equal(np.str_("Normal"), "normal", "a label")

    class Sly(np.str_):  # a subclass is the learner's code: refused, not trusted
        pass

    with pytest.raises(_records.NotPlain):
        _records.to_plain(Sly("x"))
    with pytest.raises(_records.NotPlain, match="not numbers or strings"):
        _records.to_plain(np.array([object()]))


def test_a_none_the_check_allows_is_not_called_a_missing_return():
    with pytest.raises(checks.CheckFailed) as info:
        checks.equal(None, 3, "count")
    assert "return" in str(info.value)  # None where a number is asked: the usual slip
    cases = [  # (a failing check, whether its message should ask about `return`)
        (lambda: checks.equal(5, None, "which rank is slow (None: no rank)"), False),
        (lambda: checks.equal(None, "fp16", "format"), True),  # None not allowed: asked
        (lambda: checks.one_of(7, [None, 1, 2], "rank or None"), False),
        (lambda: checks.one_of(None, [1, 2], "rank"), True),
        (lambda: checks.hidden.equal(4, "hidden", expect=lambda: None), False),
        (lambda: checks.hidden.one_of(None, "hidden", expect=lambda: [1, 2]), True),
        (lambda: checks.hidden.one_of(3, "hidden", expect=lambda: [None, 1]), False),
    ]
    for fail, asks in cases:
        with pytest.raises(checks.CheckFailed) as info:
            fail()
        assert ("`return`" in str(info.value)) == asks, str(info.value)
    checks.equal(None, None, "no rank is slow")
    checks.one_of(None, [None, 1], "rank or None")


def test_a_failed_visible_check_sends_the_learners_answer_cut_short(monkeypatch):
    sent = []
    monkeypatch.setattr(_records, "recording", lambda: True)
    monkeypatch.setattr(_records, "emit", sent.append)
    with pytest.raises(checks.CheckFailed):
        checks.equal("x" * 200, "normal", "label")
    with pytest.raises(checks.CheckFailed):
        checks.equal(5, None, "rank")
    checks.equal(2, 2, "count", quiet=True)
    long, rank, right = sent
    assert len(long["got"]) == checks.GOT_CHARS and long["got"].endswith("…") and long["none"] is False
    assert rank["got"] == "5" and rank["none"] is False
    assert "got" not in right and right["ok"] is True


def test_of_type_items_says_the_first_wrong_item_in_chinese(monkeypatch):
    from helpers import i18n

    monkeypatch.setattr(i18n, "_chosen", ["zh"])  # the language only: set_language would load fonts
    with pytest.raises(checks.CheckFailed) as info:
        checks.of_type(["-o", 3], list, "argv", items=str)
    message = str(info.value)
    assert "每个元素都是 `str`" in message and "第 1 个元素是 `int`：3" in message, message

"""Unit tests of the grading pieces that need no notebook: the hidden-test format, plain data,
the comparison, scoring against a reference, submissions on disk, the CSV and copy flags."""

from __future__ import annotations

import csv
import json
import math
import os
import shutil

import pytest
from conftest import ROOT
from gradekit import REFERENCE, one_cell_exam

from helpers import _records, checks
from trainperf.grading.client import MAX_RECORDS_PER_CELL, CellRecords
from trainperf.grading.copies import flags
from trainperf.grading.exam import matches, score
from trainperf.grading.hidden import lint_hidden, split_hidden, strip_expectations
from trainperf.grading.results import Outcome, StudentRow, write_csv, write_feedback
from trainperf.grading.submissions import discover, display_name, file_stem, read_submission, spreadsheet_safe

HIDDEN = """x = 1
### BEGIN HIDDEN TESTS
for case in [1, 2]:
    checks.hidden.close(f(case), f"f({case})", expect=lambda: secret(case), rtol=1e-3)
### END HIDDEN TESTS
"""


def test_strip_removes_every_expected_side():
    visible, hidden = split_hidden(HIDDEN)
    assert visible == "x = 1\n"
    stripped = strip_expectations(hidden)
    assert "secret" not in stripped and "expect=None" in stripped and "rtol=0.001" in stripped
    assert lint_hidden(hidden) == []


@pytest.mark.parametrize(
    "bad, words",
    [
        ("### BEGIN HIDDEN TESTS\ny = f(1)\n### END HIDDEN TESTS\n", "nothing would be graded"),
        ("### BEGIN HIDDEN TESTS\nchecks.hidden.equal(f(1), 'w', expect=secret)\n", "expect=lambda"),
        (
            "### BEGIN HIDDEN TESTS\nchecks.hidden.equal(f(1), 'w', expect=lambda: 1)\n"
            "checks.close(f(2), secret(2), 'v')\n",
            "visible check",
        ),
        ("### BEGIN HIDDEN TESTS\n    indented = True\n", "does not parse"),
    ],
)
def test_lint_names_what_breaks_the_format(bad, words):
    problems = lint_hidden(bad)
    assert any(words in p for p in problems), problems


def test_plain_data_refuses_lying_objects_and_converts_numbers():
    import numpy as np
    import torch

    class Liar(float):
        def __eq__(self, other):
            return True

    assert _records.to_plain((1, 2.5, "a", None, True)) == [1, 2.5, "a", None, True]
    assert _records.to_plain({0: np.float32(1.5), "t": torch.tensor([1, 2])}) == {"0": 1.5, "t": [1, 2]}
    for bad in (Liar(1.0), object(), torch.zeros(20_000), {(1, 2): 3}):
        with pytest.raises(_records.NotPlain):
            _records.to_plain(bad)


def test_compare_kinds():
    assert _records.compare("close", [1.0, 2.0], [1.0, 2.0000001])
    assert not _records.compare("close", [1.0], [1.0, 2.0])
    assert not _records.compare("close", float("nan"), 1.0)
    assert _records.compare("equal", " Compute ", "compute")
    assert not _records.compare("equal", 1, True) and not _records.compare("equal", True, 1)
    assert _records.compare("one_of", "memory", ["compute", "memory"])
    assert not _records.compare("one_of", "disk", ["compute", "memory"])
    with pytest.raises(ValueError):
        _records.compare("greater", 1, 2)


def test_hidden_check_compares_in_kernel_without_the_grader(monkeypatch):
    monkeypatch.delenv(_records.RECORD_ENV, raising=False)
    checks.hidden.close(2.0, "x", expect=lambda: 2.0)
    with pytest.raises(checks.CheckFailed, match="expected 3"):
        checks.hidden.close(2.0, "x", expect=lambda: 3.0)
    with pytest.raises(checks.CheckFailed, match="no expected value"):
        checks.hidden.equal(2, "x", expect=None)  # never a pass without a comparison


def test_hidden_check_only_records_for_the_grader(monkeypatch):
    emitted = []
    monkeypatch.setenv(_records.RECORD_ENV, "1")
    monkeypatch.setattr(_records, "emit", emitted.append)
    checks.hidden.close(2.0, "x", expect=None, rtol=0.01)
    assert emitted == [{"what": "x", "kind": "close", "rtol": 0.01, "atol": 0.0, "value": 2.0}]
    checks.hidden.equal("a", "y", expect=lambda: "A")  # the reference run: checked and recorded
    assert emitted[-1]["expected"] == "A"
    with pytest.raises(checks.CheckFailed):
        checks.hidden.equal("a", "y", expect=lambda: "b")


SHOWN_OK = {
    "index": 3,
    "status": "ok",
    "text": "✓ visible\n",
    "records": [{"event": "visible", "what": "visible", "ok": True}],
}


@pytest.mark.parametrize(
    "records, points",
    [
        ([{"what": "a", "value": 10.005}, {"what": "b", "value": "Y"}], 2.0),
        ([{"what": "a", "value": 10.1}, {"what": "b", "value": "x"}], 0.0),  # outside the reference's rtol
        ([{"what": "a", "value": 10.0}], 0.0),  # a check missing
        ([{"what": "b", "value": "x"}, {"what": "a", "value": 10.0}], 0.0),  # out of order
        ([{"what": "a", "value": 10.0}, {"what": "b", "value": "x"}, {"what": "c", "value": 1}], 0.0),
        ([{"what": "a", "error": "a Liar is not a number"}, {"what": "b", "value": "x"}], 0.0),
        ([{"event": "blocked-call"}, {"what": "a", "value": 10.0}, {"what": "b", "value": "x"}], 2.0),
    ],
)
def test_score_compares_with_the_reference_outside_the_kernel(records, points):
    record = {"index": 4, "status": "ok", "text": "", "records": records}
    verdict = score(one_cell_exam(), {3: SHOWN_OK, 4: record}, REFERENCE)[0]
    assert verdict.points == points
    assert verdict.visible.startswith("✓ visible")


def test_a_chinese_submission_is_told_in_chinese_and_scored_the_same():
    records = [{"what": "a", "value": 10.1}, {"what": "b", "value": "x"}]
    record = {"index": 4, "status": "ok", "text": "", "records": records}
    en = score(one_cell_exam(), {3: SHOWN_OK, 4: record}, REFERENCE)[0]
    exam = one_cell_exam()
    exam.language = "zh"
    zh = score(exam, {3: SHOWN_OK, 4: record}, REFERENCE)[0]
    same = (0.0, "failed", 1)
    assert (zh.points, zh.status, zh.hidden_failed) == (en.points, en.status, en.hidden_failed) == same
    assert "hidden tests: 1 of 2 checks failed" in en.visible
    assert "隐藏测试：2 项检查中有 1 项未通过" in zh.visible


def test_a_failed_cell_scores_zero_even_with_matching_records():
    shown = {
        "index": 3,
        "status": "error",
        "ename": "CheckFailed",
        "evalue": "",
        "text": "",
        "records": [{"event": "visible", "what": "visible", "ok": False}],
    }
    record = {
        "index": 4,
        "status": "ok",
        "text": "",
        "records": [{"what": "a", "value": 10.0}, {"what": "b", "value": "x"}],
    }
    verdict = score(one_cell_exam(), {3: shown, 4: record}, REFERENCE)[0]
    assert verdict.points == 0 and verdict.ename == "CheckFailed"
    assert verdict.visible == "CheckFailed: ✗ visible: expected 3.\n  Hint: count them"


def test_feedback_is_written_by_the_grader_from_verdicts_only():
    """What the kernel printed, the labels it sent and its error's message never reach the page."""
    secret = "cases = [(7, 4096, 4096, 2)]  # a hidden input"
    shown = {
        "index": 3,
        "status": "error",
        "ename": "LeakError_7_4096",
        "evalue": secret,
        "text": secret,
        "records": [
            {"event": "visible", "what": secret, "ok": True, "shown": {"expected": secret}},
            {"event": "blocked-call", "helper": secret},
        ],
    }
    verdict = score(one_cell_exam(), {3: shown}, REFERENCE, {"helpers.m.f": "exercise 1"})[0]
    assert secret not in verdict.visible and "4096" not in verdict.visible
    assert verdict.visible.splitlines() == [
        "✓ visible",
        "Error: (the message is not shown in graded feedback; run the test cell in your notebook to see it)",
    ]
    shown["ename"] = "RuntimeError"
    shown["records"].append({"event": "blocked-call", "helper": "helpers.m.f"})
    assert score(one_cell_exam(), {3: shown}, REFERENCE, {"helpers.m.f": "exercise 1"})[0].visible.endswith(
        "RuntimeError: helpers.m.f is exercise 1: write it yourself."
    )


def test_matches_never_trusts_the_learners_kind_or_tolerance():
    want = REFERENCE["ex1_test"][0]
    assert not matches({"what": "a", "value": 50.0, "kind": "close", "rtol": 10.0}, want)


def test_records_are_capped():
    cell = CellRecords()
    for _ in range(MAX_RECORDS_PER_CELL + 10):
        cell.add({"what": "x", "value": 1})
    assert len(cell.items) == MAX_RECORDS_PER_CELL and cell.overflow
    big = CellRecords()
    big.add({"what": "x", "value": "y" * (1 << 20)})
    assert "error" in big.items[0] and len(json.dumps(big.items[0])) < 1000


def test_names_csv_and_feedback_are_safe(tmp_path):
    raw = os.fsdecode(b"caf\xe9-\xff")
    assert display_name(raw) == "caf\ufffd-\ufffd"
    assert spreadsheet_safe("=1+1") == "'=1+1" and spreadsheet_safe("-2") == "'-2"
    assert spreadsheet_safe("ok") == "ok"
    assert len(file_stem("x" * 300).encode()) < 100
    rows = [StudentRow(name, {"01": Outcome(name, "01", 1, 2)}) for name in (raw, "=cmd()", "@SUM(A1)")]
    write_csv(rows, ["01"], tmp_path / "g.csv")
    with open(tmp_path / "g.csv", encoding="utf-8") as fh:
        ids = [r["student_id"] for r in csv.DictReader(fh)]
    assert set(ids) == {"'=cmd()", "'@SUM(A1)", "caf\ufffd-\ufffd"}
    for row in rows:
        assert write_feedback(row, tmp_path / "fb").is_file()


def test_discover_never_follows_links(tmp_path):
    subs = tmp_path / "subs"
    (subs / "ada" / "01_x").mkdir(parents=True)
    (subs / "ada" / "01_x" / "01_x.ipynb").write_text("{}")
    os.symlink(subs / "ada", subs / "bob")
    (subs / "eve" / "01_x").mkdir(parents=True)
    os.symlink(subs / "ada" / "01_x" / "01_x.ipynb", subs / "eve" / "01_x" / "01_x.ipynb")
    found = discover(subs, {"01_x.ipynb": "01_x"}, ["01_x"])
    assert list(found.notebooks["ada"]) == ["01_x"]
    assert found.notebooks["bob"] == {} and "symbolic link" in found.notes["bob"][0]
    assert found.notebooks["eve"] == {} and "symbolic link" in found.notes["eve"][0]


def test_read_submission_reports_what_is_wrong(tmp_path):
    for text, words in [("", "empty file"), ('{"cells": [', "not valid JSON"), ("[]", "not a Jupyter")]:
        (tmp_path / "a.ipynb").write_text(text)
        nb, problem, _ = read_submission(tmp_path / "a.ipynb")
        assert nb is None and words in problem


def test_copy_flags_catch_pasted_helpers_but_not_honest_answers():
    import inspect
    from pathlib import Path

    import helpers
    from helpers import roofline

    package = str(Path(helpers.__file__).parent)
    pasted = inspect.getsource(roofline.critical_m).replace("bandwidth", "bw")
    assert flags({"ex4": pasted}, package) == [
        "answer ex4 copies helpers.roofline.critical_m — review"
    ]  # named as the facade exports it
    honest = "def gemm_intensity(M, K, N, b):\n    return 2 * M * K * N / (b * (M * K + K * N + M * N))\n"
    assert flags({"ex1": honest}, package) == []
    assert "importlib.reload" in flags({"ex1": "import importlib\nimportlib.reload(x)"}, package)[0]


def test_blocked_reaches_a_copy_rebuilt_from_source_but_not_a_learners_own_cell():
    import inspect

    from helpers import roofline

    space = dict(roofline.__dict__)
    exec(compile(inspect.getsource(roofline.critical_m), "<copied>", "exec"), space)
    own: dict = {}
    exec(compile("def flops(M, K, N):\n    return 2 * M * K * N\n", "/tmp/ipykernel_1/2.py", "exec"), own)
    with checks.blocked(roofline, "critical_m", "gemm_flops"):
        with pytest.raises(RuntimeError, match="switched off"):
            space["critical_m"](4096, 4096, 2, 1e15, 3e12)
        assert own["flops"](1, 2, 3) == 12


def test_isolation_says_why_it_is_weaker(monkeypatch, tmp_path):
    import shutil

    from trainperf.grading import sandbox

    real_which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name: None if name == "bwrap" else real_which(name))
    found = sandbox.detect(tmp_path, tmp_path)
    assert found.level == "none" and "bubblewrap (bwrap) is not installed" in found.why
    monkeypatch.setattr(shutil, "which", lambda name: "/bin/bwrap" if name == "bwrap" else real_which(name))
    monkeypatch.setattr(sandbox, "python_paths", lambda: [tmp_path])
    inside = sandbox.detect(tmp_path, tmp_path / "checkout")
    assert inside.level == "none" and "lies inside" in inside.why


def test_require_isolation_is_one_clear_error(monkeypatch, tmp_path, capsys):
    from trainperf.cli import main
    from trainperf.grading import grade as grading

    monkeypatch.setattr(grading, "detect", lambda site, root: grading.Isolation("none", "no bwrap here"))
    (tmp_path / "subs" / "ada").mkdir(parents=True)
    code = main(
        [
            "grade",
            str(tmp_path / "subs"),
            "--out",
            str(tmp_path / "g.csv"),
            "--chapters",
            "1",
            "--require-isolation",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == ["trainperf: isolation required but not available: no bwrap here"]


def test_sandbox_commands_per_level(tmp_path):
    from trainperf.grading.sandbox import KernelLimits, kernel_argv

    uid_argv, _ = kernel_argv("uid", 1_234_567, tmp_path, tmp_path / "c", KernelLimits(), record=True)
    assert uid_argv[0] == "bwrap" and "--unshare-pid" in uid_argv and "--unshare-net" in uid_argv
    assert "--reuid=1234567" in uid_argv and "--no-new-privs" in uid_argv
    assert "TRAINPERF_RECORD_HIDDEN" in uid_argv and uid_argv[-1] == "{connection_file}"
    user_argv, _ = kernel_argv("userns", None, tmp_path, tmp_path / "c", KernelLimits(), record=False)
    assert "--unshare-user" in user_argv and "setpriv" not in user_argv
    assert "TRAINPERF_RECORD_HIDDEN" not in user_argv
    plain, env = kernel_argv("none", None, tmp_path, tmp_path / "c", KernelLimits(), record=True)
    assert plain[0] != "bwrap" and env["TRAINPERF_RECORD_HIDDEN"] == "1"


def test_every_ast_conversion_of_the_tooling_holds_the_lock():
    """The grader and the build run threads, and CPython 3.11's AST converter is not safe to
    run in two threads at once (a spurious SystemError failed a graded notebook): every
    ``ast.parse`` and every ``compile`` of a tree in ``src/trainperf`` goes through
    ``trainperf.syntax``."""
    import ast as ast_module

    offenders = []
    for path in sorted((ROOT / "src" / "trainperf").glob("*.py")):
        if path.name == "syntax.py":
            continue
        for node in ast_module.walk(ast_module.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast_module.Call):
                continue
            func = node.func
            if (
                isinstance(func, ast_module.Attribute)
                and func.attr == "parse"
                and isinstance(func.value, ast_module.Name)
                and func.value.id == "ast"
            ):
                offenders.append(f"{path.name}:{node.lineno} ast.parse")
            if (
                isinstance(func, ast_module.Name)
                and func.id == "compile"
                and node.args
                and not (isinstance(node.args[0], ast_module.Constant))
            ):
                offenders.append(f"{path.name}:{node.lineno} compile")
    assert offenders == [], f"AST conversions outside trainperf.syntax: {offenders}"


def test_copy_check_table_is_cached_by_the_helpers_content(tmp_path, monkeypatch):
    """The fingerprint table costs seconds per grading run: it is read back from the cache, and
    a changed helper file is a new entry, never a stale table."""
    import shutil

    import helpers
    from trainperf.grading.copies import helper_fingerprints

    monkeypatch.setenv("TRAINPERF_CACHE", str(tmp_path / "cache"))
    package = tmp_path / "helpers"
    shutil.copytree(os.path.dirname(helpers.__file__), package, ignore=shutil.ignore_patterns("__pycache__"))
    compute = helper_fingerprints.__wrapped__  # past the in-process cache
    first = compute(str(package))
    entries = list((tmp_path / "cache" / "fingerprints").iterdir())
    assert len(entries) == 1 and first
    assert compute(str(package)) == first  # read back from the file
    source = (
        "def extra_helper(xs):\n"
        + "".join(f"    xs = [x * {i} + {i} for x in xs]\n" for i in range(12))
        + "    return xs\n"
    )
    (package / "extra.py").write_text(source)
    second = compute(str(package))
    assert len(list((tmp_path / "cache" / "fingerprints").iterdir())) == 2
    assert "helpers.extra.extra_helper" in second.values()
    assert "helpers.extra.extra_helper" not in first.values()


@pytest.mark.parametrize(
    "asked, graded",
    [
        ([], ["01_roofline", "05_memory"]),  # the chapters handed in, not nine with seven missing
        (["--chapters", "all"], "every chapter"),
        (["--chapters", "5"], ["05_memory"]),
    ],
)
def test_grade_takes_the_chapters_found_in_the_submissions(asked, graded, monkeypatch, tmp_path, capsys):
    from trainperf.cli import main
    from trainperf.course import CourseError, chapter_notebook, chapters
    from trainperf.grading import grade as grading

    def stop(root, chapter_ids, *args, **kwargs):
        raise CourseError(f"would grade {','.join(chapter_ids)}")

    monkeypatch.setattr(grading, "prepare", stop)
    for student, chapter in (("ada", "05_memory"), ("bob", "01_roofline"), ("bob", "05_memory")):
        folder = tmp_path / "subs" / student / chapter
        folder.mkdir(parents=True)
        shutil.copy(ROOT / "notebooks" / chapter / chapter_notebook(ROOT, chapter).name, folder)
    code = main(
        ["--root", str(ROOT), "grade", str(tmp_path / "subs"), "--out", str(tmp_path / "g.csv"), *asked]
    )
    captured = capsys.readouterr()
    want = chapters(ROOT) if graded == "every chapter" else graded
    assert code == 2 and captured.err.strip() == f"trainperf: would grade {','.join(want)}"
    if not asked:
        assert "found in the submissions: 01_roofline, 05_memory (--chapters all" in captured.out


def test_records_sent_as_text_keep_infinity():
    """A record crosses the kernel's message channel as JSON text: ``math.inf`` stays a float
    (Jupyter's packer would make it "inf" or null, which a learner's string or None matches)."""
    cell = CellRecords()
    cell.add(json.dumps({"what": "x", "value": math.inf}, allow_nan=True))
    cell.add("{not json")
    got = cell.items[0]["value"]
    assert isinstance(got, float) and math.isinf(got)
    assert "error" in cell.items[1]
    assert not _records.compare("equal", "inf", got) and not _records.compare("equal", None, got)
    assert _records.compare("equal", math.inf, got)

"""``trainperf discriminate`` counts a mistake only when it fails for the reason it names: a
failed check, a switched-off helper, or a declared exception — never an unrelated error that
happens to score 0. Pure unit tests: a toy chapter and made-up verdicts, nothing is executed."""

from __future__ import annotations

import importlib

import nbformat
import pytest

from trainperf import discriminate as disc
from trainperf.grading.results import Outcome, StudentRow

CHAPTER = "99_toy"
MISTAKES = """# %% ex1_sum: adds one too many
def total(xs):
    return sum(xs) + 1

# %% ex1_sum: forgets the last element
def total(xs):
    return sum(xs[:-1])

# %% ex1_sum: calls the course helper
def total(xs):
    return toy.total(xs)

# %% ex1_sum: forgets the first element
def total(xs):
    return sum(xs[1:])

# %% ex1_sum: sums the squares (raises TypeError on strings)
def total(xs):
    return sum(x * x for x in xs)
"""
STUB_LINE = "RuntimeError: helpers.toy.total is exercise 1: write it yourself."
# mistake submission -> how its graded cell failed
VERDICTS = {
    # hidden checks off by a value
    1: {"status": "failed", "ename": "", "hidden_failed": 2, "visible": "✓ a\nhidden tests: 2 of 3"},
    # the visible part raised: the hidden part never ran, every hidden check counts as failed
    2: {
        "status": "failed",
        "ename": "TypeError",
        "hidden_failed": 3,
        "visible": "TypeError: (the message is not shown in graded feedback; ...)",
    },
    # every hidden case called the switched-off helper (checks.each turned each into a failed check)
    3: {
        "status": "failed",
        "ename": "",
        "hidden_failed": 3,
        "raised": ["RuntimeError"] * 3,
        "blocked": ["helpers.toy.total"],
        "visible": "✓ a\nhidden tests: 3 of 3",
    },
    # every hidden case raised something no check is about
    4: {
        "status": "failed",
        "ename": "",
        "hidden_failed": 3,
        "raised": ["ZeroDivisionError"] * 3,
        "visible": "✓ a\nhidden tests: 3 of 3",
    },
    # raising is the mistake, and the description says which exception
    5: {"status": "failed", "ename": "TypeError", "hidden_failed": 3, "visible": ""},
}


def _toy_course(root):
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(
            "### BEGIN SOLUTION\ndef total(xs):\n    return sum(xs)\n### END SOLUTION",
            metadata={"nbgrader": {"grade_id": "ex1_sum", "solution": True, "grade": False}},
        ),
        nbformat.v4.new_code_cell(
            "assert total([1, 2]) == 3",
            metadata={
                "nbgrader": {"grade_id": "ex1_sum_test", "grade": True, "solution": False, "points": 2}
            },
        ),
    ]
    for folder in ("solutions", "notebooks"):
        (root / folder / CHAPTER).mkdir(parents=True)
        nbformat.write(nb, root / folder / CHAPTER / f"{CHAPTER}.ipynb")
    (root / "grader" / "fixtures" / CHAPTER).mkdir(parents=True)
    (root / "grader" / "fixtures" / CHAPTER / "mistakes.py").write_text(MISTAKES)


def _fake_grade(root, submissions, out, chapter_ids, **kwargs):
    rows = []
    for student in sorted(p.name for p in submissions.iterdir()):
        n = int(student.rsplit("-", 1)[1]) if "-mistakes-" in student else 0
        verdict = {
            "grade_id": "ex1_sum_test",
            "points": 0.0,
            "max_points": 2.0,
            "problems": [],
            "hidden_total": 3,
            **VERDICTS.get(
                n, {"status": "failed", "ename": "CheckFailed", "hidden_failed": 0, "visible": ""}
            ),
        }
        if student.endswith("-solution"):
            verdict.update(status="ok", ename="", points=2.0, hidden_failed=0)
        outcome = Outcome(
            student,
            CHAPTER,
            verdict["points"],
            2.0,
            cells={"ex1_sum_test": (verdict["points"], 2.0)},
            errors={"ex1_sum_test": verdict["ename"]} if verdict["ename"] else {},
            feedback=[verdict],
        )
        rows.append(StudentRow(student, {CHAPTER: outcome}))
    return rows


def test_a_mistake_that_scores_0_through_an_unrelated_error_is_not_discriminating(tmp_path, monkeypatch):
    _toy_course(tmp_path)
    # the module (the package exports a function of the same name)
    monkeypatch.setattr(importlib.import_module("trainperf.grading.grade"), "grade", _fake_grade)
    failures = disc.discriminate(tmp_path, [CHAPTER], workdir=tmp_path / "work")
    # 1: a hidden check caught it; 3: the switched-off helper did; 5: declares its TypeError;
    # 2 and 4 score 0 only through an exception no check is about
    assert [f.split(":")[0] for f in failures] == ["ch99-mistakes-2", "ch99-mistakes-4"], failures
    assert "NOT DISCRIMINATING" in failures[0] and "TypeError" in failures[0]
    assert "forgets the last element" in failures[0]
    assert "ZeroDivisionError" in failures[1]


@pytest.mark.parametrize(
    ("description", "verdict", "ok"),
    [
        ("forgets the output write", {"status": "failed", "ename": "", "hidden_failed": 1}, True),
        ("forgets the output write", {"status": "failed", "ename": "CheckFailed"}, True),
        ("forgets the output write", {"status": "failed", "ename": "KeyError", "hidden_failed": 3}, False),
        (
            "forgets the output write",  # every hidden case raised inside checks.each
            {"status": "failed", "ename": "", "hidden_failed": 2, "raised": ["KeyError", "KeyError"]},
            False,
        ),
        (
            "forgets the output write",  # two cases off by a value, a third raised: the checks catch it
            {"status": "failed", "ename": "", "hidden_failed": 3, "raised": ["KeyError"]},
            True,
        ),
        (
            "forgets the output write",
            {"status": "failed", "ename": "RuntimeError", "visible": STUB_LINE},
            False,
        ),  # a helper call the mistake does not name
        (
            "forgets the output write",
            {
                "status": "failed",
                "ename": "",
                "hidden_failed": 2,
                "raised": ["RuntimeError"] * 2,
                "blocked": ["helpers.toy.f"],
            },
            False,
        ),
        ("forgets the output write", {"status": "timeout", "ename": "CellTimeoutError"}, False),
        (
            "calls the course helpers",
            {"status": "failed", "ename": "RuntimeError", "visible": STUB_LINE},
            True,
        ),
        (
            "calls the course helpers",
            {
                "status": "failed",
                "ename": "",
                "hidden_failed": 2,
                "raised": ["RuntimeError"] * 2,
                "blocked": ["helpers.toy.f"],
            },
            True,
        ),
        ("calls the course helper", {"status": "failed", "ename": "", "hidden_failed": 2}, False),
        (
            "calls the course's private merge helper",
            {"status": "failed", "ename": "RuntimeError", "visible": "x\n" + STUB_LINE},
            True,
        ),
        (
            "measures with torch.compile (switched off while graded)",
            {
                "status": "failed",
                "ename": "",
                "hidden_failed": 1,
                "raised": ["RuntimeError"],
                "blocked": ["torch.compile"],
            },
            True,
        ),
        (
            "calls torch.cuda.nvtx directly (raises on a CPU build)",
            {"status": "failed", "ename": "RuntimeError", "visible": ""},
            True,
        ),
        (
            "calls torch.cuda.nvtx directly (raises on a CPU build)",
            {"status": "failed", "ename": "", "hidden_failed": 1},
            False,
        ),
        (
            "divides by the count (raises ZeroDivisionError on an empty list)",
            {"status": "failed", "ename": "TypeError", "visible": ""},
            False,
        ),
        (
            "divides by the count (raises ZeroDivisionError on an empty list)",
            {"status": "failed", "ename": "", "hidden_failed": 1, "raised": ["ZeroDivisionError"]},
            True,
        ),
    ],
)
def test_the_reason_a_mistake_fails(description, verdict, ok):
    assert (disc.wrong_reason(description, verdict) is None) is ok


def test_graded_cells_map_to_the_answer_before_them():
    nb = nbformat.v4.new_notebook()
    meta = [
        {"grade_id": "a", "solution": True},
        {"grade_id": "a_test", "grade": True},
        {},
        {"grade_id": "b", "solution": True},
        {"grade_id": "b_check", "grade": True},
        {"grade_id": "b_more", "grade": True},
    ]
    nb.cells = [nbformat.v4.new_code_cell("", metadata={"nbgrader": m} if m else {}) for m in meta]
    assert disc.graded_answers(nb) == {"a_test": "a", "b_check": "b", "b_more": "b"}

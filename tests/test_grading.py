"""Grading round trip through real nbgrader: the released stub scores 0 on every graded
cell, the solution full marks, and every set of plausible mistakes 0 — per chapter."""

from __future__ import annotations

import csv

import pytest
from conftest import CHAPTERS, ROOT

from trainperf.course import chapter_notebook
from trainperf.discriminate import discriminate, load_mistakes, solution_answers

pytestmark = pytest.mark.notebooks


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_answer_cell_has_plausible_mistakes(chapter):
    answers = solution_answers(chapter_notebook(ROOT, chapter))
    mistakes = load_mistakes(ROOT / "grader" / "fixtures" / chapter / "mistakes.py")
    assert set(answers) == set(mistakes)
    for grade_id, blocks in mistakes.items():
        for description, source in blocks:
            assert source.strip() and description
            compile(source, f"{chapter}:{grade_id}", "exec")  # a mistake must at least parse


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_grading_discriminates(chapter, tmp_path):
    failures = discriminate(ROOT, [chapter], jobs=2, workdir=tmp_path)
    assert failures == []
    with open(tmp_path / "grades.csv") as fh:
        rows = {r["student_id"]: r for r in csv.DictReader(fh)}
    tag = chapter.split("_")[0]
    solution, stub = rows[f"ch{tag}-solution"], rows[f"ch{tag}-stub"]
    assert float(solution["score"]) == float(solution["max_score"]) > 0
    assert float(solution[chapter]) == float(solution["max_score"]) and solution["reason"] == ""
    assert float(stub["score"]) == 0 and stub["max_score"] == solution["max_score"]

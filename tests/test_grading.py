"""Grading round trip through real nbgrader: the released stub scores 0 on every graded
cell, the solution full marks, and every set of plausible mistakes 0 — per chapter."""

from __future__ import annotations

import csv

import pytest
from conftest import CHAPTERS, ROOT

from trainperf.course import chapter_notebook
from trainperf.discriminate import discriminate, load_mistakes, solution_answers, with_answers

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
    fair_path = ROOT / "grader" / "fixtures" / chapter / "fair.py"
    fair = load_mistakes(fair_path) if fair_path.is_file() else {}
    assert set(fair) <= set(answers)
    for grade_id, blocks in fair.items():
        for description, source in blocks:
            assert source.strip() and description
            compile(source, f"{chapter}:fair:{grade_id}", "exec")


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


def test_a_chinese_submission_grades_as_the_same_answers_in_english(tmp_path):
    """The same answers in the Chinese and the English notebook, graded by one command in one
    folder, get the same points on every cell; the Chinese one's feedback is in Chinese."""
    import json

    import nbformat

    from trainperf.grading.grade import grade

    chapter = "01_roofline"
    name = chapter_notebook(ROOT, chapter).name
    mistakes = load_mistakes(ROOT / "grader" / "fixtures" / chapter / "mistakes.py")
    answers = {
        "solution": solution_answers(chapter_notebook(ROOT, chapter)),
        "mistakes": {gid: blocks[0][1] for gid, blocks in mistakes.items()},
    }
    subs = tmp_path / "submissions"
    editions = {"en": ROOT / "notebooks" / chapter, "zh": ROOT / "notebooks" / "zh" / chapter}
    for lang, folder in editions.items():
        for who, mine in answers.items():
            (subs / f"{who}-{lang}" / chapter).mkdir(parents=True)
            nbformat.write(with_answers(folder / name, mine), subs / f"{who}-{lang}" / chapter / name)
    out = tmp_path / "grades.csv"
    grade(ROOT, subs, out, [chapter], jobs=2, feedback=tmp_path / "feedback")
    with open(out) as fh:
        rows = {r["student_id"]: r for r in csv.DictReader(fh)}
    cells = {}
    for line in (tmp_path / "grades.csv.progress.jsonl").read_text().splitlines():
        data = json.loads(line)
        cells[data["student"]] = {gid: verdict[0] for gid, verdict in data["cells"].items()}
    for who in answers:
        en, zh = rows[f"{who}-en"], rows[f"{who}-zh"]
        assert (zh["score"], zh[chapter], zh["reason"]) == (en["score"], en[chapter], en["reason"])
        assert cells[f"{who}-zh"] == cells[f"{who}-en"] and cells[f"{who}-en"]
    assert float(rows["solution-zh"]["score"]) == float(rows["solution-zh"]["max_score"]) > 0
    assert float(rows["mistakes-zh"]["score"]) == 0
    page = {
        lang: next((tmp_path / "feedback").glob(f"mistakes-{lang}-*.html")).read_text()
        for lang in ("en", "zh")
    }
    assert "expected" in page["en"] and "期望" not in page["en"]
    assert "期望" in page["zh"]  # the grader writes it: expected values, not the learner's own


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_a_chinese_submission_runs_the_english_exam(chapter):
    """Every chapter, without executing anything: the notebook graded for a Chinese submission
    is the one graded for the same answers in English, but for its LANGUAGE parameter."""
    import json

    import nbformat

    from trainperf.grading.exam import build_exam

    name = chapter_notebook(ROOT, chapter).name
    solution = json.loads(chapter_notebook(ROOT, chapter).read_text(encoding="utf-8"))
    released = json.loads((ROOT / "notebooks" / chapter / name).read_text(encoding="utf-8"))
    answers = solution_answers(chapter_notebook(ROOT, chapter))
    editions = {"en": ROOT / "notebooks" / chapter, "zh": ROOT / "notebooks" / "zh" / chapter}
    exams = {
        lang: build_exam(
            solution, released, json.loads(nbformat.writes(with_answers(folder / name, answers)))
        )
        for lang, folder in editions.items()
    }
    en, zh = exams["en"], exams["zh"]
    assert en.graded == zh.graded and en.answers == zh.answers and en.notes == zh.notes == []

    def text(cell, exam):
        return "".join(cell["source"])

    differ = [
        i
        for i, (a, b) in enumerate(zip(en.notebook["cells"], zh.notebook["cells"], strict=True))
        if text(a, en) != text(b, zh)
    ]
    assert len(differ) == 1 and 'LANGUAGE = "zh"' in text(zh.notebook["cells"][differ[0]], zh)

"""Stock `nbgrader autograde` (what instructors run on a JupyterHub) grades every chapter right:
the untouched release 0, the solution full marks, plausible mistakes 0 — on every graded cell.

There is no trusted process there, so the hidden checks compare in the learner's kernel (the
README says how much weaker that is); this proves they never just record and pass.
"""

from __future__ import annotations

import pytest
from conftest import CHAPTERS, ROOT

from trainperf.course import chapter_notebook
from trainperf.discriminate import load_mistakes, solution_answers, with_answers
from trainperf.stock import autograde

pytestmark = pytest.mark.notebooks


def through_last_test(nb):
    """The submission without the teaching cells after its last test cell, as a learner may
    hand it in: cells run in order, so nothing after the last graded cell can change a grade,
    and nbgrader need not spend a run of the chapter's closing measurements on it."""
    last = max(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade"))
    nb.cells = nb.cells[:last + 1]
    return nb


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_stock_nbgrader_autograde_discriminates(chapter, tmp_path):
    name = chapter_notebook(ROOT, chapter).name
    released = ROOT / "notebooks" / chapter / name
    mistakes = load_mistakes(ROOT / "grader" / "fixtures" / chapter / "mistakes.py")
    first_mistakes = {gid: blocks[0][1] for gid, blocks in mistakes.items()}
    submissions = {"stub": with_answers(released, {}),
                   "solution": with_answers(released, solution_answers(chapter_notebook(ROOT, chapter))),
                   "mistakes": with_answers(released, first_mistakes)}
    submissions = {student: through_last_test(nb) for student, nb in submissions.items()}
    scores = autograde(ROOT, chapter, submissions, tmp_path / "course")
    cells = scores["solution"]
    assert cells and all(points > 0 for points in cells.values()), scores
    for student in ("stub", "mistakes"):
        assert set(scores[student]) == set(cells)
        assert all(points == 0 for points in scores[student].values()), (student, scores[student])
    # full marks on every cell: compare with the points nbgrader gives each cell
    from nbformat import read

    points = {c.metadata["nbgrader"]["grade_id"]: float(c.metadata["nbgrader"]["points"])
              for c in read(released, as_version=4).cells if c.metadata.get("nbgrader", {}).get("grade")}
    assert cells == points

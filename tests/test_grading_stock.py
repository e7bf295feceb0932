"""Stock `nbgrader autograde` (what instructors run on a JupyterHub) grades every chapter right:
the untouched release 0, the solution full marks, sets of plausible mistakes 0 — on every
graded cell. Mistake set n holds the n-th mistake of every answer cell (its last for a cell with
fewer), as in ``trainperf discriminate``. Each set is one more notebook run, so by default the
sample is the first and the last set of every chapter (every answer cell's first and last mistake;
the last is often "calls the course helper", which only the hidden tests' ``checks.blocked``
catches here: stock nbgrader does not switch the helpers off). ``TRAINPERF_STOCK_MISTAKES=all``
grades every set (about four times as long).

There is no trusted process there, so the hidden checks compare in the learner's kernel (the
README says how much weaker that is); this proves they never just record and pass.
"""

from __future__ import annotations

import os

import pytest
from conftest import CHAPTERS, ROOT
from nbformat import read

from trainperf import prune
from trainperf.course import chapter_notebook
from trainperf.discriminate import load_mistakes, solution_answers, with_answers
from trainperf.grading.exam import _preamble
from trainperf.grading.stock import autograde

pytestmark = pytest.mark.notebooks


def graded_part(nb, solution):
    """The submission without the teaching cells that cannot change a grade, as a learner may
    hand it in: those after the last test cell, and those before it whose results no answer,
    test or set-up cell reads (the same analysis ``trainperf grade`` uses, trainperf.prune).
    The analysis reads the solution's test cells, since nbgrader puts their hidden part back
    before it runs them. nbgrader then need not spend a run of the chapter's measurements."""
    hidden = {
        c.metadata["nbgrader"]["grade_id"]: c.source
        for c in solution.cells
        if c.metadata.get("nbgrader", {}).get("grade")
    }
    meta = [c.metadata.get("nbgrader", {}) for c in nb.cells]
    seen = [
        {**c, "source": hidden.get(m.get("grade_id"), c.source)} for c, m in zip(nb.cells, meta, strict=True)
    ]
    last = max(i for i, m in enumerate(meta) if m.get("grade"))
    must_run = {i for i, m in enumerate(meta) if m.get("grade") or m.get("solution")} | _preamble(seen)
    nb.cells = [nb.cells[i] for i in prune.needed_cells(seen[: last + 1], must_run)]
    return nb


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_stock_nbgrader_autograde_discriminates(chapter, tmp_path):
    name = chapter_notebook(ROOT, chapter).name
    released = ROOT / "notebooks" / chapter / name
    mistakes = load_mistakes(ROOT / "grader" / "fixtures" / chapter / "mistakes.py")
    count = max(len(blocks) for blocks in mistakes.values())
    picked = range(count) if os.environ.get("TRAINPERF_STOCK_MISTAKES") == "all" else sorted({0, count - 1})
    sets = {
        f"mistakes-{n + 1}": {gid: blocks[min(n, len(blocks) - 1)] for gid, blocks in mistakes.items()}
        for n in picked
    }
    submissions = {
        "stub": with_answers(released, {}),
        "solution": with_answers(released, solution_answers(chapter_notebook(ROOT, chapter))),
        **{
            name: with_answers(released, {gid: source for gid, (_, source) in chosen.items()})
            for name, chosen in sets.items()
        },
    }
    solution = read(chapter_notebook(ROOT, chapter), as_version=4)
    submissions = {student: graded_part(nb, solution) for student, nb in submissions.items()}
    scores = autograde(ROOT, chapter, submissions, tmp_path / "course")
    cells = scores["solution"]
    assert cells and all(points > 0 for points in cells.values()), scores
    for student in ("stub", *sets):
        assert set(scores[student]) == set(cells)
        scored = {cell: points for cell, points in scores[student].items() if points}
        assert not scored, (student, scored, [desc for desc, _ in sets.get(student, {}).values()])
    # full marks on every cell: compare with the points nbgrader gives each cell
    points = {
        c.metadata["nbgrader"]["grade_id"]: float(c.metadata["nbgrader"]["points"])
        for c in read(released, as_version=4).cells
        if c.metadata.get("nbgrader", {}).get("grade")
    }
    assert cells == points

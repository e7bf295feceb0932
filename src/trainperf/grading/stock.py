"""Stock ``nbgrader autograde``, as instructors with a JupyterHub run it — for the tests that prove
the course's notebooks grade right there too, and as the anchor of the throughput benchmark.

There is no trusted process under stock nbgrader: hidden checks compare in the learner's
kernel (their ``expect=`` lambdas run there). Weaker than ``trainperf grade``, never a pass
without a comparison.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ..course import CourseError, chapter_notebook, generate_with_gradebook, make_scratch_course, nbgrader


def autograde(
    root: Path, chapter: str, submissions: dict[str, object], scratch: Path, timeout: float = 1800
) -> dict[str, dict[str, float]]:
    """Autograde ``{student: notebook}`` for one chapter with real nbgrader; the points of each
    graded cell per student, read from nbgrader's own gradebook."""
    import nbformat
    from nbgrader.api import Gradebook

    course = make_scratch_course(root, scratch, [chapter])
    generate_with_gradebook(course, chapter)  # autograde reads the gradebook generate fills
    name = chapter_notebook(root, chapter).name
    for student, nb in submissions.items():
        folder = course / "submitted" / student / chapter
        folder.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, folder / name)
    env = {
        "PYDEVD_DISABLE_FILE_VALIDATION": "1",
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        "MPLBACKEND": "Agg",
    }
    result = nbgrader(["autograde", chapter, "--create", "--force"], course, timeout=timeout, env=env)
    if result.returncode != 0:
        tail = " | ".join((result.stderr or result.stdout).strip().splitlines()[-5:])
        raise CourseError(f"nbgrader autograde {chapter} failed: {tail}")
    scores: dict[str, dict[str, float]] = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for student in submissions:
            submission = gb.find_submission_notebook(name.removesuffix(".ipynb"), chapter, student)
            scores[student] = {
                grade.name: float(grade.score) for grade in submission.grades if grade.max_score
            }
    return scores


def clean(scratch: Path) -> None:
    shutil.rmtree(scratch, ignore_errors=True)

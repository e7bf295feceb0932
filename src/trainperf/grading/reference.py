"""What a chapter is graded against: nbgrader's release and points, and the reference run.

``make_templates`` lets real nbgrader generate each chapter once (the released notebook and
the points of each graded cell). ``reference_records`` executes the reference exam — the
solution's answers, the hidden tests with their expected side — in its own process, checks
that the solution passes every hidden check, and keeps each check's record: the solution's
value, the kind of comparison and its tolerance. Both are cached by content, so a re-run
(or a second grading run of the same course) does not pay for them again.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from .. import __version__
from ..course import (
    CourseError,
    cache_dir,
    chapter_notebook,
    generate_with_gradebook,
    make_scratch_course,
    write_atomically,
)
from .exam import VISIBLE, build_exam, check_records, visible_events


@dataclass
class ChapterTemplate:
    chapter: str
    solution: dict
    released: dict
    max_score: float
    source_hash: str  # solution + helpers + versions: the course version a grade refers to


def exam_code_hash(package: Path) -> str:
    """Hash of every Python file of the ``trainperf`` package: the code that builds, runs and
    scores the exam (exam, measuring phase, pruning, syntax, i18n, stubs, replay, ...). A change
    to any of it is a new reference run; a hand-picked list missed modules the exam imports."""
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        if "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


@lru_cache(maxsize=1)
def _versions() -> str:
    # read from the installed metadata: importing torch only to read its version costs seconds
    from importlib.metadata import version

    shaping = exam_code_hash(Path(__file__).resolve().parent.parent)
    return (
        f"{__version__}|{shaping}|{version('nbgrader')}|{version('torch')}|{version('numpy')}|{sys.version}"
    )


def make_templates(
    root: Path, chapter_ids: list[str], scratch: Path, helpers_hash: str
) -> dict[str, ChapterTemplate]:
    """nbgrader generates every chapter once (cached by content); its gradebook gives the points."""
    import nbformat

    config = (root / "grader" / "nbgrader_config.py").read_bytes()
    out, todo = {}, []
    for chapter in chapter_ids:
        solution_bytes = chapter_notebook(root, chapter).read_bytes()
        key = hashlib.sha256(solution_bytes + config + _versions().encode()).hexdigest()[:24]
        cached = cache_dir() / "release" / f"{chapter}-{key}.json"
        source_hash = hashlib.sha256(
            solution_bytes + helpers_hash.encode() + _versions().encode()
        ).hexdigest()[:16]
        solution = nbformat.reads(solution_bytes.decode(), as_version=4)
        if cached.is_file():
            data = json.loads(cached.read_text())
            out[chapter] = ChapterTemplate(
                chapter, solution, nbformat.from_dict(data["released"]), data["max_score"], source_hash
            )
        else:
            todo.append((chapter, cached, solution, source_hash))
    if todo:
        from nbgrader.api import Gradebook

        for chapter, cached, solution, source_hash in todo:
            template = make_scratch_course(root, scratch / f"template-{chapter}", [chapter])
            released_dir = generate_with_gradebook(template, chapter)
            released = nbformat.read(released_dir / chapter_notebook(root, chapter).name, as_version=4)
            with Gradebook(f"sqlite:///{template / 'gradebook.db'}") as gb:
                max_score = float(gb.find_assignment(chapter).max_score)
            out[chapter] = ChapterTemplate(chapter, solution, released, max_score, source_hash)
            write_atomically(cached, json.dumps({"released": released, "max_score": max_score}))
    return {chapter: out[chapter] for chapter in chapter_ids}


def _validate(template: ChapterTemplate, exam, execution) -> dict[str, list[dict[str, Any]]]:
    reference: dict[str, list[dict[str, Any]]] = {}
    for cell in exam.graded:
        shown, record = execution.records.get(cell.visible), execution.records.get(cell.index)
        where = f"{template.chapter}: the reference solution's {cell.grade_id}"
        if record is None or shown is None:
            raise CourseError(
                f"{where} did not run ({execution.start_error or 'the run stopped early'}; "
                f"{(execution.log_tail.strip().splitlines() or [''])[-1][:200]})."
            )
        for part in (shown, record):
            if part["status"] != "ok":
                raise CourseError(
                    f"{where} fails its own tests: {part.get('ename')}: {part.get('evalue', '')[:300]}"
                )
        # what the visible checks said, for the feedback the grader writes (exam.feedback)
        reference[cell.grade_id + VISIBLE] = [
            {
                "what": e.get("what", ""),
                "shown": e.get("shown", {}),
                "hint": e.get("hint", ""),
                **({"family": e["family"]} if isinstance(e.get("family"), str) else {}),
            }
            for e in visible_events(shown)
        ]
        checks = check_records(record)
        broken = [r for r in checks if "error" in r or "expected" not in r]
        if not checks or broken or record.get("records_overflow"):
            why = broken[0].get("error", "no expected value") if broken else "none recorded"
            raise CourseError(f"{where} recorded no usable hidden check ({why}).")
        reference[cell.grade_id] = checks
    return reference


def reference_records(
    template: ChapterTemplate, run_exam, fresh: bool = False
) -> dict[str, list[dict[str, Any]]]:
    """grade_id -> the reference run's hidden-check records (cached by ``source_hash``).

    ``run_exam(notebook)`` executes a notebook in a fresh kernel with recording on and returns
    an :class:`trainperf.grading.sandbox.Execution`.
    """
    cached = cache_dir() / "reference" / f"{template.chapter}-{template.source_hash}.json"
    if cached.is_file() and not fresh:
        try:
            return json.loads(cached.read_text())
        except json.JSONDecodeError:
            pass
    exam = build_exam(template.solution, template.released)
    reference = _validate(template, exam, run_exam(exam.notebook))
    write_atomically(cached, json.dumps(reference, allow_nan=True))
    return reference

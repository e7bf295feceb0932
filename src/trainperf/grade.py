"""``trainperf grade``: autograde a folder of submissions with nbgrader into a CSV.

Layout accepted: ``SUBMISSIONS/<student>/<chapter>/<notebook>.ipynb`` (nbgrader's
``submitted/`` layout) or ``SUBMISSIONS/<student>/<notebook>.ipynb``. Each student's
notebook is autograded in its own scratch nbgrader course (a copy of a gradebook made
once per chapter from ``solutions/``), so one submission cannot disturb another's grade.
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from .course import CourseError, chapter_notebook, chapters, generate, make_scratch_course, nbgrader


@dataclass
class Outcome:
    """One student's result for one chapter."""

    student: str
    chapter: str
    score: float
    max_score: float
    reason: str = ""
    seconds: float = 0.0
    cells: dict[str, tuple[float, float]] = field(default_factory=dict)  # grade_id -> (got, max)
    errors: dict[str, str] = field(default_factory=dict)  # graded cell -> exception it raised


@dataclass
class StudentRow:
    student: str
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def score(self) -> float:
        return sum(o.score for o in self.outcomes.values())

    @property
    def max_score(self) -> float:
        return sum(o.max_score for o in self.outcomes.values())

    @property
    def reason(self) -> str:
        parts = list(self.notes)
        parts += [f"{o.chapter}: {o.reason}" for o in self.outcomes.values() if o.reason]
        return "; ".join(parts)


def discover(submissions: Path, root: Path, chapter_ids: list[str]
             ) -> tuple[dict[str, dict[str, Path]], dict[str, list[str]]]:
    """Map student -> chapter -> submitted notebook, and student -> notes on stray files."""
    if not submissions.is_dir():
        raise CourseError(f"Submissions folder {submissions} does not exist.")
    expected = {chapter_notebook(root, ch).name: ch for ch in chapter_ids}
    found: dict[str, dict[str, Path]] = {}
    notes: dict[str, list[str]] = {}
    for student_dir in sorted(p for p in submissions.iterdir() if p.is_dir()
                              and not p.name.startswith(".")):
        student = student_dir.name
        found[student], notes[student] = {}, []
        for nb in sorted(student_dir.rglob("*.ipynb")):
            if ".ipynb_checkpoints" in nb.parts:
                continue
            chapter = expected.get(nb.name)
            if chapter is None and nb.parent.name in chapter_ids:
                chapter = nb.parent.name
                notes[student].append(f"{nb.relative_to(student_dir)} graded as {chapter} "
                                      f"(expected the name {chapter_notebook(root, chapter).name})")
            if chapter is None:
                notes[student].append(f"ignored {nb.relative_to(student_dir)}: not a notebook "
                                      "of any graded chapter")
            elif chapter in found[student]:
                notes[student].append(f"ignored {nb.relative_to(student_dir)}: a second "
                                      f"notebook for {chapter}")
            else:
                found[student][chapter] = nb
    return found, notes


def _check_notebook_file(path: Path) -> str:
    """'' if ``path`` is a readable notebook, else what is wrong with it."""
    import nbformat

    if path.stat().st_size == 0:
        return "the submitted notebook is an empty file"
    try:
        nbformat.read(path, as_version=4)
    except json.JSONDecodeError as exc:
        return f"the submitted notebook is not valid JSON ({exc.msg} at line {exc.lineno})"
    except Exception as exc:
        return f"the submitted file is not a Jupyter notebook ({type(exc).__name__})"
    return ""


def make_templates(root: Path, chapter_ids: list[str], scratch: Path) -> dict[str, float]:
    """Generate every chapter once into ``scratch/template``; chapter -> max score."""
    from nbgrader.api import Gradebook

    template = make_scratch_course(root, scratch / "template", chapter_ids)
    for chapter in chapter_ids:
        generate(template, chapter)
    with Gradebook(f"sqlite:///{template / 'gradebook.db'}") as gb:
        return {ch: float(gb.find_assignment(ch).max_score) for ch in chapter_ids}


def grade_one(root: Path, scratch: Path, student: str, chapter: str, notebook: Path,
              max_score: float, timeout: float, cell_timeout: int | None) -> Outcome:
    """Autograde one notebook in a scratch course of its own and read back its score."""
    from nbgrader.api import Gradebook, MissingEntry

    start = time.perf_counter()
    problem = _check_notebook_file(notebook)
    if problem:
        return Outcome(student, chapter, 0.0, max_score, problem)
    course = scratch / "students" / student / chapter
    if course.exists():
        shutil.rmtree(course)
    template = scratch / "template"
    make_scratch_course(root, course, [chapter])
    shutil.copy2(template / "gradebook.db", course / "gradebook.db")
    target = course / "submitted" / student / chapter / chapter_notebook(root, chapter).name
    target.parent.mkdir(parents=True)
    shutil.copy2(notebook, target)
    args = ["autograde", chapter, "--student", student, "--create", "--force"]
    if cell_timeout:
        args.append(f"--Execute.timeout={cell_timeout}")
    try:
        result = nbgrader(args, course, timeout=timeout)
    except subprocess.TimeoutExpired:
        return Outcome(student, chapter, 0.0, max_score,
                       f"grading stopped after the {timeout:.0f} s notebook time limit",
                       time.perf_counter() - start)
    reason = ""
    try:
        with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
            submission = gb.find_submission(chapter, student)
            score = float(submission.score)
            cells = {g.name: (float(g.score), float(g.max_score))
                     for nb in submission.notebooks for g in nb.grades}
            if submission.needs_manual_grade:
                reason = "nbgrader flags cells for manual grading"
    except MissingEntry:
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        return Outcome(student, chapter, 0.0, max_score, f"autograde failed: {tail[0][:200]}",
                       time.perf_counter() - start)
    if result.returncode != 0 and not reason:
        reason = "autograde reported errors; see its log"
    errors = _cell_errors(course / "autograded" / student / chapter / target.name)
    return Outcome(student, chapter, score, max_score, reason, time.perf_counter() - start, cells,
                   errors)


def _cell_errors(autograded: Path) -> dict[str, str]:
    """Exception name raised by each graded cell of an autograded notebook."""
    import nbformat

    if not autograded.is_file():
        return {}
    errors = {}
    for cell in nbformat.read(autograded, as_version=4).cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("grade") and cell.cell_type == "code":
            raised = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
            if raised:
                errors[meta["grade_id"]] = raised[0].get("ename", "")
    return errors


def write_csv(rows: list[StudentRow], chapter_ids: list[str], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["student_id", "score", "max_score", *chapter_ids, "reason"])
        for row in sorted(rows, key=lambda r: r.student):
            per = [f"{row.outcomes[ch].score:g}" for ch in chapter_ids]
            writer.writerow([row.student, f"{row.score:g}", f"{row.max_score:g}", *per, row.reason])


def grade(root: Path, submissions: Path, out: Path, wanted: list[str] | None = None,
          jobs: int = 1, timeout: float = 900, cell_timeout: int | None = None,
          workdir: Path | None = None) -> list[StudentRow]:
    """Grade every student in ``submissions`` and write ``out`` (CSV). Returns the rows."""
    chapter_ids = chapters(root, wanted)
    found, notes = discover(submissions, root, chapter_ids)
    if not found:
        raise CourseError(f"No student folders in {submissions}: expected "
                          "SUBMISSIONS/<student>/<chapter>/<notebook>.ipynb.")
    with tempfile.TemporaryDirectory(prefix="trainperf-grade-") as tmp:
        scratch = workdir or Path(tmp)
        print(f"preparing nbgrader gradebooks for {', '.join(chapter_ids)} ...", flush=True)
        max_scores = make_templates(root, chapter_ids, scratch)
        rows = {s: StudentRow(s, notes=notes[s]) for s in found}
        todo = []
        for student, by_chapter in found.items():
            for chapter in chapter_ids:
                if chapter in by_chapter:
                    todo.append((student, chapter, by_chapter[chapter]))
                else:
                    name = chapter_notebook(root, chapter).name
                    rows[student].outcomes[chapter] = Outcome(
                        student, chapter, 0.0, max_scores[chapter], f"missing {name}")
        print(f"grading {len(todo)} notebook(s) from {len(found)} student(s), jobs={jobs}",
              flush=True)
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            futures = [pool.submit(grade_one, root, scratch, s, ch, nb, max_scores[ch], timeout,
                                   cell_timeout) for s, ch, nb in todo]
            for done, future in enumerate(as_completed(futures), 1):
                outcome = future.result()
                rows[outcome.student].outcomes[outcome.chapter] = outcome
                print(f"  [{done}/{len(todo)}] {outcome.student} {outcome.chapter}: "
                      f"{outcome.score:g}/{outcome.max_score:g} in {outcome.seconds:.1f} s"
                      + (f" — {outcome.reason}" if outcome.reason else ""), flush=True)
    ordered = [rows[s] for s in sorted(rows)]
    for row in ordered:
        row.outcomes = {ch: row.outcomes[ch] for ch in chapter_ids}
    write_csv(ordered, chapter_ids, out)
    print(f"wrote {out} ({len(ordered)} students)", flush=True)
    return ordered

"""``trainperf discriminate``: prove every graded cell tells right from wrong.

For each chapter it builds submissions from the released notebook — the stub as
released, the solution, and one notebook per set of plausible mistakes
(``grader/fixtures/<chapter>/mistakes.py``) — grades them with the real ``grade`` path,
and requires: stub 0 on every graded cell, solution full marks on every graded cell,
every mistake set 0 on every graded cell.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .course import CourseError, chapter_notebook, chapters

# A mistake that fails with one of these is broken, not plausible: it proves nothing.
_BROKEN = {"NameError", "SyntaxError", "IndentationError", "ImportError", "ModuleNotFoundError",
           "NotImplementedError", "AttributeError"}
_BLOCK = re.compile(r"^# %% (\w+): (.+)$", re.MULTILINE)


def _nbgrader_meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def answer_ids(notebook) -> list[str]:
    """grade_ids of autograded-answer cells (solution, not graded themselves)."""
    return [m["grade_id"] for m in map(_nbgrader_meta, notebook.cells)
            if m.get("solution") and not m.get("grade")]


def solution_answers(solution_path: Path) -> dict[str, str]:
    """Answer-cell sources of a solution notebook with the solution markers removed."""
    import nbformat

    from .grading.exam import solution_answers as answers_of

    return answers_of(nbformat.read(solution_path, as_version=4))


def load_mistakes(path: Path) -> dict[str, list[tuple[str, str]]]:
    """``grade_id -> [(what is wrong, cell source), ...]`` from a mistakes file (or, in the same
    format, a ``fair.py`` of correct answers written another way)."""
    if not path.is_file():
        raise CourseError(f"No mistakes file {path}: every chapter needs plausible wrong answers.")
    text = path.read_text()
    heads = list(_BLOCK.finditer(text))
    mistakes: dict[str, list[tuple[str, str]]] = {}
    for i, head in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        body = text[head.end():end].strip("\n") + "\n"
        mistakes.setdefault(head.group(1), []).append((head.group(2).strip(), body))
    return mistakes


def with_answers(released_path: Path, answers: dict[str, str]):
    """The released notebook with some answer cells' sources replaced."""
    import nbformat

    nb = nbformat.read(released_path, as_version=4)
    for cell in nb.cells:
        grade_id = _nbgrader_meta(cell).get("grade_id")
        if grade_id in answers:
            cell.source = answers[grade_id]
    return nb


@dataclass
class Expectation:
    student: str
    chapter: str
    want: str  # "zero" or "full"
    description: str


def build_submissions(root: Path, chapter: str, released: Path, dest: Path
                      ) -> list[Expectation]:
    """Write stub / solution / mistake submissions of one chapter under ``dest``."""
    import nbformat

    solution = chapter_notebook(root, chapter)
    answers = solution_answers(solution)
    mistakes = load_mistakes(root / "grader" / "fixtures" / chapter / "mistakes.py")
    missing = [a for a in answers if a not in mistakes]
    if missing:
        raise CourseError(f"{chapter}: no plausible mistake for answer cell(s) {', '.join(missing)} "
                          f"in grader/fixtures/{chapter}/mistakes.py")
    unknown = [m for m in mistakes if m not in answers]
    if unknown:
        raise CourseError(f"{chapter}: mistakes.py names unknown answer cell(s) {', '.join(unknown)}")
    tag = chapter.split("_")[0]
    plans: list[tuple[str, str, str, dict[str, str]]] = [
        (f"ch{tag}-stub", "zero", "the released stub", {}),
        (f"ch{tag}-solution", "full", "the solution", answers),
    ]
    for n in range(max(len(v) for v in mistakes.values())):
        chosen = {a: mistakes[a][min(n, len(mistakes[a]) - 1)] for a in answers}
        what = "; ".join(f"{a}: {desc}" for a, (desc, _) in chosen.items())
        plans.append((f"ch{tag}-mistakes-{n + 1}", "zero", what,
                      {a: src for a, (_, src) in chosen.items()}))
    # correct answers written another way (a tuple for a list, another formula order): full marks
    fair_path = root / "grader" / "fixtures" / chapter / "fair.py"
    fair = load_mistakes(fair_path) if fair_path.is_file() else {}
    unknown = [f for f in fair if f not in answers]
    if unknown:
        raise CourseError(f"{chapter}: fair.py names unknown answer cell(s) {', '.join(unknown)}")
    for n in range(max((len(v) for v in fair.values()), default=0)):
        chosen = {a: fair[a][n] for a in fair if n < len(fair[a])}
        what = "; ".join(f"{a}: {desc}" for a, (desc, _) in chosen.items())
        plans.append((f"ch{tag}-fair-{n + 1}", "full", what,
                      {**answers, **{a: src for a, (_, src) in chosen.items()}}))
    expectations = []
    for student, want, what, replaced in plans:
        folder = dest / student / chapter
        folder.mkdir(parents=True, exist_ok=True)
        nbformat.write(with_answers(released, replaced), folder / released.name)
        expectations.append(Expectation(student, chapter, want, what))
    return expectations


def discriminate(root: Path, wanted: list[str] | None = None, jobs: int = 1,
                 workdir: Path | None = None) -> list[str]:
    """Grade stub, solution and mistakes of each chapter; returns the failures (empty = ok)."""
    from .grading.grade import grade

    chapter_ids = chapters(root, wanted)
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="trainperf-discriminate-") as tmp:
        base = workdir or Path(tmp)
        submissions = base / "submissions"
        expectations: list[Expectation] = []
        for chapter in chapter_ids:
            released = root / "notebooks" / chapter / chapter_notebook(root, chapter).name
            if not released.is_file():
                raise CourseError(f"{released} is missing: run `trainperf build` first.")
            expectations += build_submissions(root, chapter, released, submissions)
        rows = {row.student: row for row in grade(
            root, submissions, base / "grades.csv", chapter_ids, jobs=jobs,
            workdir=base / "scratch", fresh=True)}
        print(f"\n{'submission':<22} {'cell':<24} {'points':>8}  expected")
        for exp in expectations:
            outcome = rows[exp.student].outcomes[exp.chapter]
            if not outcome.cells:
                failures.append(f"{exp.student}: not graded ({outcome.reason})")
                continue
            for cell, (score, max_score) in outcome.cells.items():
                ok = score == 0 if exp.want == "zero" else score == max_score
                print(f"{exp.student:<22} {cell:<24} {score:>3g}/{max_score:<3g}  {exp.want}"
                      f"{'' if ok else '   <-- WRONG'}")
                if not ok:
                    failures.append(f"{exp.student} ({exp.description}): {cell} scored "
                                    f"{score:g}/{max_score:g}, expected {exp.want}")
                raised = outcome.errors.get(cell, "")
                if "mistakes" in exp.student and raised in _BROKEN:
                    failures.append(f"{exp.student}: {cell} failed with {raised}, so the mistake "
                                    f"itself is broken; fix grader/fixtures/{exp.chapter}/mistakes.py")
    return failures

"""``trainperf discriminate``: prove every graded cell tells right from wrong.

For each chapter it builds submissions from the released notebook — the stub as
released, the solution, and one notebook per set of plausible mistakes
(``grader/fixtures/<chapter>/mistakes.py``) — grades them with the real ``grade`` path,
and requires: stub 0 on every graded cell, solution full marks on every graded cell,
every mistake set 0 on every graded cell — each for the reason its mistake names (see
:func:`expected_failure`): a mistake that scores 0 only because it raises something no check
is about proves nothing about the checks.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .course import CourseError, chapter_notebook, chapters

_BLOCK = re.compile(r"^# %% (\w+): (.+)$", re.MULTILINE)

# How a graded cell failed, read from its verdict (CellVerdict, as a dict in Outcome.feedback).
CHECK = "check"  # a visible check failed (CheckFailed) or a hidden check did not match the reference
BLOCKED = "blocked"  # the answer called a helper the exercise switches off ("write it yourself")
RAISED = "raised"  # an exception no check raised: the mistake's code broke before it was judged
# what a mistake's description says about how it must fail: "(raises ...)" declares that raising
# is the mistake ("(raises TypeError ...)" names the exception); "the course helper(s)", "the
# course's ..." or "switched off while graded" that it hands the work to code the test switches off
_RAISES = re.compile(r"\(raises(?:\s+([A-Z]\w*(?:Error|Exception|Interrupt|Exit)))?\b")
_USES_COURSE = re.compile(r"\bthe course(?:'s\b| helpers?\b)|\bswitched off while graded\b")
_STUB_MESSAGE = re.compile(r"^\w+: \S+ is exercise \d+: write it yourself\.$", re.MULTILINE)


def _nbgrader_meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def answer_ids(notebook) -> list[str]:
    """grade_ids of autograded-answer cells (solution, not graded themselves)."""
    return [
        m["grade_id"] for m in map(_nbgrader_meta, notebook.cells) if m.get("solution") and not m.get("grade")
    ]


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
        body = text[head.end() : end].strip("\n") + "\n"
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


def failure_kinds(verdict: dict) -> dict[str, str]:
    """How one graded cell failed: kind -> detail (an exception's name, or ""). A kind is
    :data:`CHECK`, :data:`BLOCKED` or :data:`RAISED`, or the verdict's own status when the cell
    passed or did not finish ("ok", "timeout", "died", "not-run"). A cell can fail in several
    ways at once: some hidden cases off by a value, one that raised."""
    status, ename = str(verdict.get("status", "")), str(verdict.get("ename") or "")
    if status != "failed":
        return {status: ename}
    blocked = bool(verdict.get("blocked")) or bool(_STUB_MESSAGE.search(str(verdict.get("visible", ""))))
    if ename == "CheckFailed":  # a visible check said no
        return {CHECK: ""}
    if ename:  # the cell stopped at an exception (visible part, or a hidden part outside checks.each)
        return {BLOCKED: ename} if blocked else {RAISED: ename}
    # the hidden part ran to its end; checks.each turned a case that raised into a failed check
    raised = [str(name) for name in verdict.get("raised") or []]
    kinds: dict[str, str] = {}
    if int(verdict.get("hidden_failed") or 0) > len(raised) or verdict.get("problems") or not raised:
        kinds[CHECK] = ""  # a value that did not match the reference (or could not be compared)
    if blocked:
        kinds[BLOCKED] = ""
    unrelated = [name for name in raised if not (blocked and name == "RuntimeError")]
    if unrelated:
        kinds[RAISED] = unrelated[0]
    return kinds


def expected_failure(description: str) -> tuple[str, str]:
    """How a mistake must fail, from its description: ``(kind, exception name or "")``."""
    raises = _RAISES.search(description)
    if raises:
        return RAISED, raises.group(1) or ""
    if _USES_COURSE.search(description):
        return BLOCKED, ""
    return CHECK, ""


_KIND_WORDS = {
    CHECK: "a failed check",
    BLOCKED: "a switched-off helper ('write it yourself')",
    RAISED: "an exception",
    "timeout": "the cell time limit",
    "died": "a dead kernel",
    "not-run": "not running at all",
    "ok": "passing",
}


def wrong_reason(description: str, verdict: dict) -> str | None:
    """Why a mistake's 0 on a cell proves nothing about the cell's checks, or None when it fails
    (at least) for the reason its description names."""
    want, want_ename = expected_failure(description)
    kinds = failure_kinds(verdict)
    if want in kinds and (not want_ename or kinds[want] == want_ename):
        return None
    said = " and ".join(
        _KIND_WORDS.get(k, k) + (f" ({e})" if e and k != CHECK else "") for k, e in kinds.items()
    )
    needed = _KIND_WORDS[want] + (f" ({want_ename})" if want_ename else "")
    return f"it fails through {said}, not {needed}"


@dataclass
class Expectation:
    student: str
    chapter: str
    want: str  # "zero" or "full"
    description: str
    # graded cell -> the mistake its answer cell makes (mistake submissions only)
    mistakes: dict[str, str] = field(default_factory=dict)


def graded_answers(notebook) -> dict[str, str]:
    """graded cell -> the answer cell it tests: the last answer cell before it."""
    answer, tested = None, {}
    for meta in map(_nbgrader_meta, notebook.cells):
        if meta.get("grade"):
            if answer is not None:
                tested[meta["grade_id"]] = answer
        elif meta.get("solution"):
            answer = meta["grade_id"]
    return tested


def build_submissions(root: Path, chapter: str, released: Path, dest: Path) -> list[Expectation]:
    """Write stub / solution / mistake submissions of one chapter under ``dest``."""
    import nbformat

    solution = chapter_notebook(root, chapter)
    answers = solution_answers(solution)
    mistakes = load_mistakes(root / "grader" / "fixtures" / chapter / "mistakes.py")
    missing = [a for a in answers if a not in mistakes]
    if missing:
        raise CourseError(
            f"{chapter}: no plausible mistake for answer cell(s) {', '.join(missing)} "
            f"in grader/fixtures/{chapter}/mistakes.py"
        )
    unknown = [m for m in mistakes if m not in answers]
    if unknown:
        raise CourseError(f"{chapter}: mistakes.py names unknown answer cell(s) {', '.join(unknown)}")
    tag = chapter.split("_")[0]
    tested = graded_answers(nbformat.read(released, as_version=4))
    plans: list[tuple[str, str, str, dict[str, str], dict[str, str]]] = [
        (f"ch{tag}-stub", "zero", "the released stub", {}, {}),
        (f"ch{tag}-solution", "full", "the solution", answers, {}),
    ]
    for n in range(max(len(v) for v in mistakes.values())):
        chosen = {a: mistakes[a][min(n, len(mistakes[a]) - 1)] for a in answers}
        what = "; ".join(f"{a}: {desc}" for a, (desc, _) in chosen.items())
        named = {cell: chosen[a][0] for cell, a in tested.items() if a in chosen}
        plans.append(
            (f"ch{tag}-mistakes-{n + 1}", "zero", what, {a: src for a, (_, src) in chosen.items()}, named)
        )
    # correct answers written another way (a tuple for a list, another formula order): full marks
    fair_path = root / "grader" / "fixtures" / chapter / "fair.py"
    fair = load_mistakes(fair_path) if fair_path.is_file() else {}
    unknown = [f for f in fair if f not in answers]
    if unknown:
        raise CourseError(f"{chapter}: fair.py names unknown answer cell(s) {', '.join(unknown)}")
    for n in range(max((len(v) for v in fair.values()), default=0)):
        chosen = {a: fair[a][n] for a in fair if n < len(fair[a])}
        what = "; ".join(f"{a}: {desc}" for a, (desc, _) in chosen.items())
        plans.append(
            (
                f"ch{tag}-fair-{n + 1}",
                "full",
                what,
                {**answers, **{a: src for a, (_, src) in chosen.items()}},
                {},
            )
        )
    expectations = []
    for student, want, what, replaced, named in plans:
        folder = dest / student / chapter
        folder.mkdir(parents=True, exist_ok=True)
        nbformat.write(with_answers(released, replaced), folder / released.name)
        expectations.append(Expectation(student, chapter, want, what, named))
    return expectations


def discriminate(
    root: Path, wanted: list[str] | None = None, jobs: int = 1, workdir: Path | None = None
) -> list[str]:
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
        rows = {
            row.student: row
            for row in grade(
                root,
                submissions,
                base / "grades.csv",
                chapter_ids,
                jobs=jobs,
                workdir=base / "scratch",
                fresh=True,
            )
        }
        print(f"\n{'submission':<22} {'cell':<24} {'points':>8}  expected")
        for exp in expectations:
            outcome = rows[exp.student].outcomes[exp.chapter]
            if not outcome.cells:
                failures.append(f"{exp.student}: not graded ({outcome.reason})")
                continue
            verdicts = {str(v.get("grade_id")): v for v in outcome.feedback if isinstance(v, dict)}
            for cell, (score, max_score) in outcome.cells.items():
                ok = score == 0 if exp.want == "zero" else score == max_score
                why, how = None, ""
                if ok and cell in exp.mistakes:
                    # no verdict (an outcome without feedback): the exception it recorded
                    verdict = verdicts.get(cell) or {
                        "status": "failed",
                        "ename": outcome.errors.get(cell, ""),
                    }
                    why = wrong_reason(exp.mistakes[cell], verdict)
                    how = " by " + ", ".join(
                        k + (f" ({e})" if e else "") for k, e in failure_kinds(verdict).items()
                    )
                note = "   <-- WRONG" if not ok else f"{how}   <-- NOT DISCRIMINATING: {why}" if why else how
                print(f"{exp.student:<22} {cell:<24} {score:>3g}/{max_score:<3g}  {exp.want}{note}")
                if not ok:
                    failures.append(
                        f"{exp.student} ({exp.description}): {cell} scored "
                        f"{score:g}/{max_score:g}, expected {exp.want}"
                    )
                elif why:
                    failures.append(
                        f"{exp.student}: {cell} NOT DISCRIMINATING: the mistake "
                        f'"{exp.mistakes[cell]}" scores 0, but {why}; rewrite it in '
                        f"grader/fixtures/{exp.chapter}/mistakes.py so that it makes "
                        f'the mistake it names (or declare "(raises ...)" when '
                        f"raising is the mistake)"
                    )
    return failures

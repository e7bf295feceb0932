"""Build the notebook that is executed for a submission, and score what came back.

Only the learner's ANSWER cells (matched by nbgrader ``grade_id``) and extra code cells the
learner added are taken from the submission (and its language: a submission of the Chinese
edition runs with ``LANGUAGE = "zh"``, so its check messages are in Chinese). Everything
else — teaching cells, the parameters cell and every test cell — comes from ``solutions/``,
so a deleted, emptied or edited test cell changes nothing but the report.

Each test cell runs as two executions: its visible checks, which record their verdicts (the
grader writes the learner's feedback from those and the reference's labels, :func:`feedback`),
then its hidden part with every ``expect=`` removed
(:func:`trainperf.grading.hidden.strip_expectations`): in the learner's kernel the hidden checks
only turn the answers into plain data and record them. The
**reference run** executes the same exam with the solution's answers and the expected side
kept; its records — the solution's values, each check's kind and tolerance — are what the
learner's records are compared with, here, in the grading process (:func:`score`). Nothing in
the learner's kernel decides a grade: it can only produce values.
"""

from __future__ import annotations

import ast
import builtins
import copy
import re
from dataclasses import dataclass, field
from typing import Any

from helpers._records import compare
from helpers.checks import expected_text
from helpers.i18n import LANGUAGES, text_in, tr_in

from .. import prune, syntax
from ..i18n import notebook_language, set_language_parameter
from .hidden import split_hidden, strip_expectations

_SOLUTION_MARKERS = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[ \t]*\n?", re.MULTILINE)


@dataclass
class GradedCell:
    grade_id: str
    points: float
    index: int  # position of its hidden part in the executed notebook
    visible: int = -1  # position of its visible part (run first, as an execution of its own)


@dataclass
class Exam:
    """The notebook to execute plus what the grader needs to score it."""

    notebook: dict[str, Any]
    graded: list[GradedCell]
    answers: dict[str, int]  # answer grade_id -> index in the executed notebook
    notes: list[str] = field(default_factory=list)  # tampering and other remarks
    language: str = "en"  # of the submission's edition: the language of its feedback
    extras: list[int] = field(default_factory=list)  # code cells the learner added (run too)


def _meta(cell: dict[str, Any]) -> dict[str, Any]:
    return cell.get("metadata", {}).get("nbgrader", {})


def _source(cell: dict[str, Any]) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def helper_imports(solution: dict[str, Any]) -> str:
    """The ``import helpers`` / ``from helpers import ...`` lines of the trusted teaching cells."""
    lines = []
    for cell in solution["cells"]:
        if cell["cell_type"] != "code" or _meta(cell):
            continue
        try:
            tree = syntax.parse(_source(cell))
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "helpers":
                lines.append(ast.unparse(node))
            elif isinstance(node, ast.Import) and any(a.name.split(".")[0] == "helpers"
                                                     for a in node.names):
                lines.append(ast.unparse(node))
    return "\n".join(dict.fromkeys(lines))


def solution_answers(solution: dict[str, Any]) -> dict[str, str]:
    """Answer-cell sources of a solution notebook with the solution markers removed."""
    return {_meta(c)["grade_id"]: _SOLUTION_MARKERS.sub("", _source(c)) for c in solution["cells"]
            if _meta(c).get("solution") and not _meta(c).get("grade")}


def _test_cells(source: str, imports: str, reference: bool) -> tuple[str, str]:
    """A test cell as two executions: its visible checks, then its hidden part. Nothing the
    kernel prints in either reaches the feedback (:func:`feedback`)."""
    visible, hidden = split_hidden(source)
    hidden_code = hidden if reference else strip_expectations(hidden)
    return f"{imports}\n{visible.rstrip()}\n", f"{imports}\n{hidden_code.strip()}\n"


def _carries_hidden_tests(cell: dict[str, Any]) -> bool:
    return "### BEGIN HIDDEN TESTS" in _source(cell)


def build_exam(solution: dict[str, Any], released: dict[str, Any],
               submission: dict[str, Any] | None = None) -> Exam:
    """Merge trusted cells with the learner's answers into the notebook to execute.

    The exam ends with the last test cell: teaching cells after it (measurements, live tuning)
    cannot change a grade, so grading does not spend time on them. Nor on a teaching cell
    before it whose results no answer, test or learner cell reads (:mod:`trainperf.prune`).

    With ``submission=None`` this is the **reference exam**: the solution's own answers, and
    the hidden tests with their expected side, for the trusted reference run.
    """
    reference = submission is None
    imports = helper_imports(solution)
    tests = {_meta(c)["grade_id"]: c for c in solution["cells"] if _meta(c).get("grade")}
    released_by_id = {_meta(c).get("grade_id"): c for c in released["cells"] if _meta(c)}
    released_ids = {c.get("id") for c in released["cells"]}

    notes: list[str] = []
    mine_by_grade_id: dict[str, dict[str, Any]] = {}
    extras_after: dict[str, list[dict[str, Any]]] = {}
    if reference:
        for gid, text in solution_answers(solution).items():
            mine_by_grade_id[gid] = {"cell_type": "code", "source": text, "metadata": {}}
    else:
        anchor = "__start__"
        for cell in submission.get("cells", []):
            gid = _meta(cell).get("grade_id")
            if gid and gid not in mine_by_grade_id:
                mine_by_grade_id[gid] = cell
                anchor = f"grade:{gid}"
            elif cell.get("id") in released_ids:
                anchor = f"id:{cell.get('id')}"
            elif cell.get("cell_type") == "code" and _source(cell).strip():
                extras_after.setdefault(anchor, []).append(cell)
        notes += _test_cell_notes(tests, mine_by_grade_id, released_by_id)

    cells: list[dict[str, Any]] = []
    graded: list[GradedCell] = []
    answers: dict[str, int] = {}
    learners: set[int] = set()  # the learner's own extra cells: they always run

    def add_extras(key: str) -> None:
        for extra in extras_after.get(key, []):
            learners.add(len(cells))
            cells.append(_code(_source(extra), "extra"))

    add_extras("__start__")
    for cell in released["cells"]:
        meta = _meta(cell)
        gid = meta.get("grade_id")
        if meta.get("grade"):
            visible, hidden = _test_cells(_source(tests[gid]), imports, reference)
            cells.append(_code(visible, f"visible:{gid}"))
            graded.append(GradedCell(gid, float(meta.get("points", 0)), len(cells), len(cells) - 1))
            cells.append(_code(hidden, f"hidden:{gid}"))
            # a failed visible part scores 0 whatever the hidden part does: the client skips it
            cells[-1]["metadata"][HIDDEN_PART] = True
        elif meta.get("solution"):
            mine = mine_by_grade_id.get(gid)
            if mine is None or mine.get("cell_type") != cell["cell_type"]:
                notes.append(f"answer cell {gid} is missing; graded as unanswered")
                mine = cell
            answers[gid] = len(cells)
            cells.append(_code(_source(mine), f"answer:{gid}") if cell["cell_type"] == "code"
                         else copy.deepcopy(mine))
        else:
            cells.append(copy.deepcopy(cell))
            if cell["cell_type"] == "code":
                cells[-1].setdefault("metadata", {})[ORIGIN] = f"teach:{cell.get('id', '')}"
        add_extras(f"grade:{gid}" if gid else f"id:{cell.get('id')}")
    if graded:  # nothing after the last test cell can change a grade: it is not run
        cells = cells[:graded[-1].index + 1]
    # nor can a teaching cell whose results no answer, test or learner cell reads
    must_run = ({g.index for g in graded} | {g.visible for g in graded} | set(answers.values())
                | learners | _preamble(cells))
    kept = prune.needed_cells(cells, {i for i in must_run if i < len(cells)})
    moved = {old: new for new, old in enumerate(kept)}
    cells = [cells[i] for i in kept]
    graded = [GradedCell(g.grade_id, g.points, moved[g.index], moved[g.visible]) for g in graded]
    answers = {gid: moved[i] for gid, i in answers.items() if i in moved}
    extras = sorted(moved[i] for i in learners if i in moved)
    notebook = copy.deepcopy(released)
    notebook["cells"] = cells
    lang = "en" if reference else notebook_language(submission)
    if lang != "en" and lang in LANGUAGES:
        # a submission of a translated edition gets its feedback in that language; only what the
        # visible checks print changes, never what the hidden checks record
        set_language_parameter(notebook, lang)
    return Exam(notebook, graded, answers, notes, lang if lang in LANGUAGES else "en", extras)


def _preamble(cells: list[dict[str, Any]]) -> set[int]:
    """The parameters cell and the set-up cell after it: they always run (the device, the
    language of the check messages, the runtime's seeds and threads)."""
    for i, cell in enumerate(cells):
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            after = next((j for j in range(i + 1, len(cells)) if cells[j].get("cell_type") == "code"), i)
            return {i, after}
    return set()


def _test_cell_notes(tests: dict[str, dict[str, Any]], mine: dict[str, dict[str, Any]],
                     released: dict[str, dict[str, Any]]) -> list[str]:
    """What happened to the test cells, said once; a notebook that carries the hidden tests
    (the solution file, say) is one note, not one per cell."""
    carried = [gid for gid in tests if gid in mine and _carries_hidden_tests(mine[gid])]
    notes = []
    if carried:
        notes.append("the submission carries the hidden tests (a solution or source notebook?); "
                     "the original tests were run")
    for gid in tests:
        cell = mine.get(gid)
        if gid in carried:
            continue
        if cell is None:
            notes.append(f"test cell {gid} was deleted; the original tests were run")
        elif cell.get("cell_type") != "code":
            notes.append(f"test cell {gid} was turned into {cell.get('cell_type')}; "
                         "the original tests were run")
        elif _source(cell).strip() != _source(released[gid]).strip():
            notes.append(f"test cell {gid} was edited; the original tests were run")
    return notes


def _code(source: str, origin: str) -> dict[str, Any]:
    return {"cell_type": "code", "execution_count": None, "metadata": {ORIGIN: origin}, "outputs": [],
            "source": source}


@dataclass
class CellVerdict:
    grade_id: str
    points: float
    max_points: float
    status: str  # ok | failed | error | timeout | died | not-run
    ename: str
    visible: str  # what the learner would have seen from the visible checks
    hidden_failed: int = 0  # hidden checks that did not match the reference
    hidden_total: int = 0
    problems: list[str] = field(default_factory=list)  # values that could not be compared, and why
    # what the kernel printed in the visible part: for the instructor's details file only (a
    # submission writes what it likes there), never on a feedback page
    printed: str = ""


HIDDEN_PART = "trainperf_hidden_part"  # cell metadata: run only if the cell before it passed
# cell metadata: where a cell of the exam comes from — "teach:<cell id>", "visible:<grade_id>",
# "hidden:<grade_id>", "answer:<grade_id>" or "extra" (a cell the learner added). The grading
# client serves a recorded helper result only to the cell whose origin recorded it (sandbox.py).
ORIGIN = "trainperf_origin"
VISIBLE = "#visible"  # reference[grade_id + VISIBLE]: the reference run's visible checks
# error names a feedback page may show: Python's own and the course's (a learner's own exception
# class could be named after anything it saw)
_ENAMES = {name for name, value in vars(builtins).items()
           if isinstance(value, type) and issubclass(value, BaseException)} | {
    "CheckFailed", "CellTimeoutError", "DeadKernelError", "OutOfMemoryError", "NotPlain", "OutputTooLarge"}


def check_records(record: dict[str, Any]) -> list[dict[str, Any]]:
    """A cell's hidden-check records, without instructor events."""
    return [r for r in record.get("records", []) if isinstance(r, dict) and "event" not in r]


def events(record: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in record.get("records", []) if isinstance(r, dict) and "event" in r]


def visible_events(record: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in events(record) if e.get("event") == "visible"]


def feedback(lang: str, learner: dict[str, Any] | None, reference: list[dict[str, Any]],
             exercises: dict[str, str]) -> str:
    """What the visible checks of one test cell said, written by the grader.

    Only the *verdicts* come from the learner's kernel (one bool per check, in order); every
    word — label, expected value, hint — comes from the reference run, the error's type name
    only if it looks like one, and a switched-off helper's message only for the chapter's own
    exercised helpers (``exercises``: name -> "exercise N"). So nothing the learner's code saw
    or printed (a hidden part's source, its inputs) can reach a feedback page."""
    if learner is None:
        return ""
    said = visible_events(learner)
    lines = []
    failing = learner.get("status") != "ok" and learner.get("ename") == "CheckFailed"
    for i, want in enumerate(reference):
        if i >= len(said):
            break
        label = text_in(lang, str(want.get("what", "")))
        if said[i].get("ok") is True:
            lines.append(f"✓ {label}")
            continue
        line = tr_in(lang, "✗ {what}: expected {expected}.", what=label,
                     expected=expected_text(want.get("shown") or {}, lang))
        if said[i].get("none") is True:
            line += tr_in(lang, " Did your function `return` its result?")
        if want.get("hint"):
            line += tr_in(lang, "\n  Hint: {hint}", hint=text_in(lang, str(want["hint"])))
        lines.append(("CheckFailed: " if failing and i == len(said) - 1 else "") + line)
        break  # a failed visible check stops its cell
    ename = str(learner.get("ename") or "")
    if learner.get("status") != "ok" and ename != "CheckFailed":
        ename = ename if ename in _ENAMES else "Error"
        blocked = [e.get("helper") for e in events(learner) if e.get("event") == "blocked-call"
                   and e.get("helper") in exercises]
        if blocked:
            name = blocked[0]
            lines.append(f"{ename}: " + tr_in(lang, "{name} is exercise {exercise}: write it yourself.",
                                              name=name, exercise=exercises[name].split()[-1]))
        elif ename == "CellTimeoutError":
            lines.append(f"{ename}: " + tr_in(lang, "the cell ran past the time limit"))
        else:
            lines.append(f"{ename}: " + tr_in(lang, "(the message is not shown in graded feedback; "
                                                    "run the test cell in your notebook to see it)"))
    return "\n".join(lines)


def matches(got: dict[str, Any], want: dict[str, Any], problems: list[str] | None = None) -> bool:
    """One learner record against the reference record of the same check. A value that cannot
    be compared at all (a huge integer, say) is a failed check; its reason goes to ``problems``."""
    if got.get("what") != want.get("what") or "value" not in got or "error" in got:
        return False
    kind = want.get("kind")
    expected = want.get("expected") if kind == "one_of" else want.get("value")
    try:
        return compare(kind, got["value"], expected, float(want.get("rtol", 1e-6)),
                       float(want.get("atol", 0.0)))
    except Exception as exc:  # noqa: BLE001 — the learner's value: any failure is a failed check
        if problems is not None:
            problems.append(f"a value could not be compared ({type(exc).__name__}: {str(exc)[:80]})")
        return False


def score(exam: Exam, records: dict[int, dict[str, Any]],
          reference: dict[str, list[dict[str, Any]]], exercises: dict[str, str] | None = None
          ) -> list[CellVerdict]:
    """Points per graded cell: the learner's hidden-check records against the reference's; the
    visible feedback written by :func:`feedback`."""
    verdicts = []
    for cell in exam.graded:
        shown, record = records.get(cell.visible), records.get(cell.index)
        want = reference.get(cell.grade_id, [])
        if shown is None:
            verdicts.append(CellVerdict(cell.grade_id, 0.0, cell.points, "not-run", "",
                                        "not run: grading stopped before this cell", 0, len(want)))
            continue
        record = record or {"status": "not-run", "records": []}
        got = check_records(record)
        problems: list[str] = []
        failed = sum(1 for i, w in enumerate(want) if i >= len(got) or not matches(got[i], w, problems))
        extra = len(got) > len(want)
        passed = (shown["status"] == "ok" and record["status"] == "ok" and bool(want) and failed == 0
                  and not extra and not record.get("records_overflow"))
        first = shown if shown["status"] != "ok" else record
        status = "ok" if passed else "died" if "died" in (shown["status"], record["status"]) else "failed"
        if first.get("ename") == "CellTimeoutError":
            status = "timeout"
        visible = feedback(exam.language, shown, reference.get(cell.grade_id + VISIBLE, []),
                           exercises or {})
        if not passed and shown["status"] == "ok":
            some = tr_in(exam.language, "some")
            visible += ("\n" if visible else "") + tr_in(
                exam.language, "hidden tests: {failed} of {total} checks failed (details are not shown)",
                failed=failed or some, total=len(want))
        verdicts.append(CellVerdict(cell.grade_id, cell.points if passed else 0.0, cell.points,
                                    status, str(first.get("ename", "")), visible.strip(), failed,
                                    len(want), sorted(set(problems)), str(shown.get("text", ""))))
    return verdicts

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

from helpers._records import KINDS, MAX_DEPTH, MAX_ELEMENTS, MAX_RECORD_BYTES, compare
from helpers.checks import expected_text, type_note
from helpers.i18n import LANGUAGES, text_in, tr_in

from .. import code_i18n, prune, syntax
from ..i18n import notebook_language, set_language_parameter
from . import measured
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
            elif isinstance(node, ast.Import) and any(a.name.split(".")[0] == "helpers" for a in node.names):
                lines.append(ast.unparse(node))
    return "\n".join(dict.fromkeys(lines))


def solution_answers(solution: dict[str, Any]) -> dict[str, str]:
    """Answer-cell sources of a solution notebook with the solution markers removed."""
    return {
        _meta(c)["grade_id"]: _SOLUTION_MARKERS.sub("", _source(c))
        for c in solution["cells"]
        if _meta(c).get("solution") and not _meta(c).get("grade")
    }


def _test_cells(source: str, imports: str, reference: bool) -> tuple[str, str]:
    """A test cell as two executions: its visible checks, then its hidden part. Nothing the
    kernel prints in either reaches the feedback (:func:`feedback`)."""
    visible, hidden = split_hidden(source)
    hidden_code = hidden if reference else strip_expectations(hidden)
    return f"{imports}\n{visible.rstrip()}\n", f"{imports}\n{hidden_code.strip()}\n"


def _carries_hidden_tests(cell: dict[str, Any]) -> bool:
    return "### BEGIN HIDDEN TESTS" in _source(cell)


def build_exam(
    solution: dict[str, Any], released: dict[str, Any], submission: dict[str, Any] | None = None
) -> Exam:
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
    released_by_id: dict[str | None, dict[str, Any]] = {
        _meta(c).get("grade_id"): c for c in released["cells"] if _meta(c)
    }
    released_ids = {c.get("id") for c in released["cells"]}

    notes: list[str] = []
    mine_by_grade_id: dict[str, dict[str, Any]] = {}
    extras_after: dict[str, list[dict[str, Any]]] = {}
    if submission is None:  # the reference exam
        for grade_id, text in solution_answers(solution).items():
            mine_by_grade_id[grade_id] = {"cell_type": "code", "source": text, "metadata": {}}
    else:
        anchor = "__start__"
        for cell in submission.get("cells", []):
            gid: str = _meta(cell).get("grade_id") or ""
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
        gid = meta.get("grade_id") or ""  # nbgrader gives every graded and answer cell one
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
            cells.append(
                _code(_source(mine), f"answer:{gid}") if cell["cell_type"] == "code" else copy.deepcopy(mine)
            )
        else:
            cells.append(copy.deepcopy(cell))
            if cell["cell_type"] == "code":
                cells[-1].setdefault("metadata", {})[ORIGIN] = f"teach:{cell.get('id', '')}"
        add_extras(f"grade:{gid}" if gid else f"id:{cell.get('id')}")
    if graded:  # nothing after the last test cell can change a grade: it is not run
        cells = cells[: graded[-1].index + 1]
    # nor can a teaching cell whose results no answer, test or learner cell reads
    must_run = (
        {g.index for g in graded}
        | {g.visible for g in graded}
        | set(answers.values())
        | learners
        | _preamble(cells)
    )
    kept = prune.needed_cells(cells, {i for i in must_run if i < len(cells)})
    moved = {old: new for new, old in enumerate(kept)}
    cells = [cells[i] for i in kept]
    graded = [GradedCell(g.grade_id, g.points, moved[g.index], moved[g.visible]) for g in graded]
    answers = {gid: moved[i] for gid, i in answers.items() if i in moved}
    extras = sorted(moved[i] for i in learners if i in moved)
    measured_ids = {gid for gid, test in tests.items() if measured.is_measured(_source(test))}
    if measured_ids:
        cells, graded, answers, extras = _measuring_phase(cells, graded, answers, extras, measured_ids)
    notebook = copy.deepcopy(released)
    notebook["cells"] = cells
    lang = "en" if submission is None else notebook_language(submission)
    if lang != "en" and lang in LANGUAGES:
        # a submission of a translated edition gets its feedback in that language; only what the
        # visible checks print changes, never what the hidden checks record
        set_language_parameter(notebook, lang)
    return Exam(notebook, graded, answers, notes, lang if lang in LANGUAGES else "en", extras)


def _measuring_phase(
    cells: list[dict[str, Any]],
    graded: list[GradedCell],
    answers: dict[str, int],
    extras: list[int],
    measured_ids: set[str],
) -> tuple[list[dict[str, Any]], list[GradedCell], dict[str, int], list[int]]:
    """Move the hidden parts of measured test cells into a phase that runs right after the
    parameters and set-up cells, before any learner cell runs as written
    (:mod:`trainperf.grading.measured`). The phase repeats every earlier code cell reduced to
    its definitions; the learner's extra cells placed before the set-up cell move after it."""
    hidden_at = {g.index: g.grade_id for g in graded if g.grade_id in measured_ids}
    if not hidden_at:
        return cells, graded, answers, extras
    preamble = _preamble(cells)
    start = max(preamble) + 1 if preamble else 0
    learner_at = set(answers.values()) | set(extras)
    learner_sources = [_source(cells[i]) for i in sorted(learner_at)]
    teaching_sources = [
        _source(c) for i, c in enumerate(cells) if c.get("cell_type") == "code" and i not in learner_at
    ]
    # a decorator may be a library's, never the learner's own function (its code would run)
    imported = measured.learner_imports(learner_sources, teaching_sources)
    phase: list[dict[str, Any]] = []
    new_hidden: dict[str, int] = {}
    for i, cell in enumerate(cells[: max(hidden_at) + 1]):
        if i in preamble or cell.get("cell_type") != "code":
            continue
        origin = cell.get("metadata", {}).get(ORIGIN, "")
        if i in hidden_at:
            new_hidden[hidden_at[i]] = len(phase)
            phase.append(_code(_source(cell), origin))
        elif origin.startswith("hidden:"):
            continue  # a hidden part graded in its place, later
        else:
            reduced = measured.definitions_only(_source(cell), trusted=i not in learner_at, imported=imported)
            if reduced:
                phase.append(_code(reduced, MEASURING))
    # the new order: cells up to the set-up cell (without learner cells), the phase, the rest
    early_learner = [i for i in range(start) if i in learner_at]
    order = (
        [i for i in range(start) if i not in learner_at]
        + [-1]
        + early_learner
        + [i for i in range(start, len(cells)) if i not in hidden_at]
    )
    out: list[dict[str, Any]] = []
    moved: dict[int, int] = {}
    for i in order:
        if i == -1:
            offset = len(out)
            out += phase
            new_hidden = {gid: at + offset for gid, at in new_hidden.items()}
        else:
            moved[i] = len(out)
            out.append(cells[i])
    graded = [
        GradedCell(
            g.grade_id,
            g.points,
            new_hidden[g.grade_id] if g.grade_id in new_hidden else moved[g.index],
            moved[g.visible],
        )
        for g in graded
    ]
    return (out, graded, {gid: moved[i] for gid, i in answers.items()}, sorted(moved[i] for i in extras))


def _preamble(cells: list[dict[str, Any]]) -> set[int]:
    """The parameters cell and the set-up cell after it: they always run (the device, the
    language of the check messages, the runtime's seeds and threads)."""
    for i, cell in enumerate(cells):
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            after = next((j for j in range(i + 1, len(cells)) if cells[j].get("cell_type") == "code"), i)
            return {i, after}
    return set()


def _test_cell_notes(
    tests: dict[str, dict[str, Any]],
    mine: dict[str, dict[str, Any]],
    released: dict[str | None, dict[str, Any]],
) -> list[str]:
    """What happened to the test cells, said once; a notebook that carries the hidden tests
    (the solution file, say) is one note, not one per cell."""
    carried = [gid for gid in tests if gid in mine and _carries_hidden_tests(mine[gid])]
    notes = []
    if carried:
        notes.append(
            "the submission carries the hidden tests (a solution or source notebook?); "
            "the original tests were run"
        )
    for gid in tests:
        cell = mine.get(gid)
        if gid in carried:
            continue
        if cell is None:
            notes.append(f"test cell {gid} was deleted; the original tests were run")
        elif cell.get("cell_type") != "code":
            notes.append(
                f"test cell {gid} was turned into {cell.get('cell_type')}; the original tests were run"
            )
        elif code_i18n.skeleton(_source(cell)) != code_i18n.skeleton(_source(released[gid])):
            # only the code counts: a translated edition's test cell differs in its comments and hints
            notes.append(f"test cell {gid} was edited; the original tests were run")
    return notes


def _code(source: str, origin: str) -> dict[str, Any]:
    return {
        "cell_type": "code",
        "execution_count": None,
        "metadata": {ORIGIN: origin},
        "outputs": [],
        "source": source,
    }


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
    # how the hidden checks failed, for the details file and `trainperf discriminate`, never on a
    # feedback page: the exception's name for each failed check whose case raised inside
    # ``checks.each`` ("raised TypeError: ..."), and the switched-off helpers the cell called
    raised: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)


# the answer checks.each records for a case that raised
_RAISED = re.compile(r"raised ([A-Za-z_]\w{0,79}): ")
HIDDEN_PART = "trainperf_hidden_part"  # cell metadata: run only if the cell before it passed
# cell metadata: where a cell of the exam comes from — "teach:<cell id>", "visible:<grade_id>",
# "hidden:<grade_id>", "answer:<grade_id>" or "extra" (a cell the learner added). The grading
# client serves a recorded helper result only to the cell whose origin recorded it (client.py).
ORIGIN = "trainperf_origin"
# the origin of a cell of the measuring phase that only defines names (it calls nothing)
MEASURING = "measuring"
VISIBLE = "#visible"  # reference[grade_id + VISIBLE]: the reference run's visible checks
# error names a feedback page may show: Python's own and the course's (a learner's own exception
# class could be named after anything it saw)
_ENAMES = {
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException)
} | {
    "CheckFailed",
    "CellTimeoutError",
    "DeadKernelError",
    "OutOfMemoryError",
    "NotPlain",
    "OutputTooLarge",
    "NotebookCapReached",
}


# What the learner's kernel can send, field by field: a hidden check's record, a visible check's
# event (helpers.checks) and a blocked call's event (helpers._grading), inside each cell's result
# from the notebook client (trainperf.grading.client: status, ename, evalue, text, records, ...).
# Each is checked before anything reads it; what is not of the expected type is never used: a
# malformed result or hidden-check record fails its cell, a malformed event is ignored, and the
# reason goes to CellVerdict.problems (then the reason column) in words that never quote the data.
_STATUSES = ("ok", "error", "died", "skipped")
_RESULT_TEXT = ("ename", "evalue", "text", "records_overflow", "notebook_cap")
_MAX_FIELD_CHARS = 10_000  # a label, a hint, a helper's name, an error message in one record
_CHECK_FIELDS = frozenset({"what", "kind", "rtol", "atol", "value", "error"})
_VISIBLE_FIELDS = frozenset({"event", "what", "ok", "shown", "hint", "none", "got", "type", "family"})
_TYPE_CHARS = 40  # helpers.checks.TYPE_CHARS: a type name the checks send
_GOT_CHARS = 60  # helpers.checks.GOT_CHARS: a longer 'got' is not the checks' and is not shown
_SHOWN_FIELDS = frozenset({"kind", "expected", "rtol"})
_BLOCKED_FIELDS = frozenset({"event", "helper"})
_TYPE_WORDS = {
    bool: "a bool",
    int: "an integer",
    float: "a number",
    str: "a string",
    list: "a list",
    dict: "an object",
}


def _type_name(value: Any) -> str:
    """What a value from the kernel is, in words that never quote it."""
    return "null" if value is None else _TYPE_WORDS.get(type(value), f"a {type(value).__name__}")


def _text_problem(fields: dict[str, Any], name: str, required: bool = False) -> str | None:
    if name not in fields:
        return f"it has no '{name}'" if required else None
    value = fields[name]
    if type(value) is not str:
        return f"its '{name}' is {_type_name(value)}, not a string"
    if len(value) > _MAX_FIELD_CHARS:
        return f"its '{name}' is {len(value):,} characters long (at most {_MAX_FIELD_CHARS:,})"
    return None


def _number_problem(fields: dict[str, Any], name: str) -> str | None:
    if name not in fields:
        return None
    value = fields[name]
    if type(value) not in (int, float):
        return f"its '{name}' is {_type_name(value)}, not a number"
    finite = value.bit_length() <= 1024 if type(value) is int else value - value == 0  # not nan, not inf
    return None if finite and value >= 0 else f"its '{name}' is not a finite number ≥ 0"


def _type_problem(fields: dict[str, Any], key: str) -> str | None:
    """A visible check's ``type`` (the answer's type) or ``family`` (its kind: "number",
    "list", "str" or a type name): an ASCII identifier of at most ``_TYPE_CHARS`` characters."""
    if key not in fields:
        return None
    value = fields[key]
    if type(value) is not str or not (value.isidentifier() and value.isascii() and len(value) <= _TYPE_CHARS):
        return f"its {key!r} is not a type name"
    return None


def _got_problem(fields: dict[str, Any]) -> str | None:
    """A visible check's ``got``: the learner's own answer as the notebook showed it, a string
    of at most ``_GOT_CHARS`` characters on one line (longer is not what the checks send)."""
    if "got" not in fields:
        return None
    value = fields["got"]
    if type(value) is not str:
        return f"its 'got' is {_type_name(value)}, not a string"
    if len(value) > _GOT_CHARS or "\n" in value:
        return f"its 'got' is longer than {_GOT_CHARS} characters or spans lines"
    return None


def _bool_problem(fields: dict[str, Any], name: str, required: bool = False) -> str | None:
    if name not in fields:
        return f"it has no '{name}'" if required else None
    value = fields[name]
    return None if type(value) is bool else f"its '{name}' is {_type_name(value)}, not true or false"


def _plain_problem(value: Any, depth: int = 0) -> str | None:
    """Why a hidden check's value is not plain data as :func:`helpers._records.to_plain` makes it
    (the types, the depth, the sizes), or None."""
    kind = type(value)
    if depth > MAX_DEPTH:
        return "its 'value' is nested too deeply"
    if value is None or kind in (bool, float):
        return None
    if kind is int:
        return "its 'value' holds an integer too large to grade" if value.bit_length() > 1024 else None
    if kind is str:
        return (
            f"its 'value' holds a string over {MAX_RECORD_BYTES:,} characters"
            if len(value) > MAX_RECORD_BYTES
            else None
        )
    if kind not in (list, dict):
        return f"its 'value' holds {_type_name(value)}"
    if len(value) > MAX_ELEMENTS:
        return f"its 'value' holds {_type_name(value)} of over {MAX_ELEMENTS:,} items"
    if kind is dict and any(type(key) is not str for key in value):
        return "its 'value' holds an object whose keys are not strings"
    for item in value if kind is list else value.values():
        why = _plain_problem(item, depth + 1)
        if why is not None:
            return why
    return None


def _valid_check_record(record: Any) -> str | None:
    """Why one hidden-check record from the learner's kernel cannot be compared (it is then a
    failed check), or None when every field has the type :meth:`helpers.checks._Hidden._check`
    gives it: ``what`` a string, ``kind`` a check kind, ``rtol`` and ``atol`` finite numbers ≥ 0
    (these three optional: the reference's are used), and exactly one of ``value`` (plain data)
    and ``error`` (a string)."""
    if type(record) is not dict:
        return f"it is {_type_name(record)}, not an object"
    why: str | None
    if not record.keys() <= _CHECK_FIELDS:
        why = "it has a field no check sends"
    else:
        why = (
            _text_problem(record, "what", required=True)
            or _text_problem(record, "kind")
            or _number_problem(record, "rtol")
            or _number_problem(record, "atol")
            or _text_problem(record, "error")
        )
        if why is None and "kind" in record and record["kind"] not in KINDS:
            why = "its 'kind' is not a check kind"
        if why is None and ("value" in record) == ("error" in record):
            why = (
                "it has both a 'value' and an 'error'"
                if "value" in record
                else "it has neither a 'value' nor an 'error'"
            )
        if why is None and "value" in record:
            why = _plain_problem(record["value"])
    return why


def _shown_problem(event: dict[str, Any]) -> str | None:
    if "shown" not in event:
        return None
    shown = event["shown"]
    if type(shown) is not dict:
        return f"its 'shown' is {_type_name(shown)}, not an object"
    if not shown.keys() <= _SHOWN_FIELDS:
        return "its 'shown' has a field no check sends"
    why = _text_problem(shown, "kind") or _text_problem(shown, "expected") or _number_problem(shown, "rtol")
    return None if why is None else f"its 'shown' is malformed: {why}"


def _valid_event(event: Any) -> str | None:
    """Why an event from the learner's kernel cannot be used (it is then ignored), or None. A
    visible check's (:func:`helpers.checks._visible_event`): ``ok`` true or false, and optional
    ``none`` (true or false), ``what`` and ``hint`` (strings) and ``shown`` (an object of ``kind``
    and ``expected``, strings, and ``rtol``, a number); a blocked call's: ``helper``, a string."""
    if type(event) is not dict:
        return f"an event is {_type_name(event)}, not an object; it was ignored"
    kind = event.get("event")
    if type(kind) is not str:
        return f"an event whose 'event' is {_type_name(kind)}, not a string, was ignored"
    if kind == "visible":
        label = "a visible check's event"
        why = (
            "it has a field no check sends"
            if not event.keys() <= _VISIBLE_FIELDS
            else _bool_problem(event, "ok", required=True)
            or _bool_problem(event, "none")
            or _got_problem(event)
            or _type_problem(event, "type")
            or _type_problem(event, "family")
            or _text_problem(event, "what")
            or _text_problem(event, "hint")
            or _shown_problem(event)
        )
    elif kind == "blocked-call":
        label = "a blocked-call event"
        why = (
            "it has a field no helper sends"
            if not event.keys() <= _BLOCKED_FIELDS
            else _text_problem(event, "helper", required=True)
        )
    else:
        return "an event of no kind the checks send was ignored"
    return None if why is None else f"{label} is malformed ({why}); it was ignored"


def _cell_result(result: Any) -> tuple[dict[str, Any], list[str]]:
    """One cell's result from the notebook client, every field of the type the grader reads,
    and the problems found. The client writes these fields (an error's name and message, the
    records, come from the kernel); one of another type is replaced — a string by '', the records
    by the objects among them, ``stuck`` by False — and a result that said "ok" says "error": a
    cell whose result cannot be read does not pass."""
    if type(result) is not dict:
        return (
            {"status": "error", "ename": "", "evalue": "", "text": "", "records": []},
            [f"a cell's result is {_type_name(result)}, not an object"],
        )
    clean = dict(result)
    problems = []
    if type(result.get("status")) is not str or result["status"] not in _STATUSES:
        problems.append("a cell's status is not one the notebook client writes")
        clean["status"] = "error"
    for name in _RESULT_TEXT:
        if type(result.get(name, "")) is not str:
            problems.append(f"a cell's '{name}' is {_type_name(result[name])}, not a string")
            clean[name] = ""
    items = result.get("records", [])
    if type(items) is not list:
        problems.append(f"a cell's records are {_type_name(items)}, not a list")
        clean["records"] = []
    elif any(type(item) is not dict for item in items):
        problems.append("a cell's records hold something that is not an object")
        clean["records"] = [item for item in items if type(item) is dict]
    if type(result.get("stuck", False)) is not bool:
        problems.append(f"a cell's 'stuck' is {_type_name(result['stuck'])}, not true or false")
        clean["stuck"] = False
    for name in ("index", "replay_size"):
        if name in result and (type(result[name]) is not int or result[name] < 0):
            problems.append(f"a cell's '{name}' is not an integer ≥ 0")
            clean.pop(name)
    if problems and clean["status"] == "ok":
        clean["status"] = "error"
    return clean, problems


def check_records(record: dict[str, Any]) -> list[dict[str, Any]]:
    """A cell's hidden-check records, without instructor events (unchecked: see :func:`score`)."""
    items = record.get("records") if isinstance(record, dict) else None
    return [r for r in items if isinstance(r, dict) and "event" not in r] if isinstance(items, list) else []


def events(record: dict[str, Any]) -> list[dict[str, Any]]:
    """A cell's events, unchecked: :func:`_valid_event` says which can be used."""
    items = record.get("records") if isinstance(record, dict) else None
    return [r for r in items if isinstance(r, dict) and "event" in r] if isinstance(items, list) else []


def visible_events(record: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in events(record) if e.get("event") == "visible"]


def feedback(
    lang: str, learner: dict[str, Any] | None, reference: list[dict[str, Any]], exercises: dict[str, str]
) -> str:
    """What the visible checks of one test cell said, written by the grader.

    Only the *verdicts* come from the learner's kernel (one bool per check, in order); every
    word — label, expected value, hint — comes from the reference run, the error's type name
    only if it looks like one, and a switched-off helper's message only for the chapter's own
    exercised helpers (``exercises``: name -> "exercise N"). So nothing the learner's code saw
    or printed (a hidden part's source, its inputs) can reach a feedback page."""
    if learner is None:
        return ""
    learner, _ = _cell_result(learner)  # every field the right type (score says what was wrong)
    said = []
    for event in visible_events(learner):
        if _valid_event(event) is not None:
            break  # a malformed event is not used, nor are those after it
        said.append(event)
    lines = []
    failing = learner.get("status") != "ok" and learner.get("ename") == "CheckFailed"
    for i, want in enumerate(reference):
        if i >= len(said):
            break
        label = text_in(lang, str(want.get("what", "")))
        if said[i].get("ok") is True:
            lines.append(f"✓ {label}")
            continue
        shown = want.get("shown") or {}
        expected = expected_text(shown, lang)
        got, got_type = said[i].get("got"), said[i].get("type")
        if isinstance(got, str):  # the learner's own answer, as the notebook showed it
            if shown.get("kind") == "type" and isinstance(got_type, str):  # of_type: name its type
                got = tr_in(
                    lang, "{kind}: {value}", kind=tr_in(lang, "a `{name}`", name=got_type).strip(), value=got
                )
            line = tr_in(
                lang, "✗ {what}: expected {expected}, got {got}.", what=label, expected=expected, got=got
            )
        else:
            line = tr_in(lang, "✗ {what}: expected {expected}.", what=label, expected=expected)
        if said[i].get("none") is True:
            line += tr_in(lang, " Did your function `return` its result?")
        elif shown.get("kind") in ("close", "equal", "at_most") and isinstance(got_type, str):
            # a string where a number is asked: both types, as the notebook says them
            want_family, have_family = want.get("family"), said[i].get("family")
            if isinstance(want_family, str) and isinstance(have_family, str):
                line += type_note(want_family, have_family, got_type, lang)
        if want.get("hint"):
            line += tr_in(lang, "\n  Hint: {hint}", hint=text_in(lang, str(want["hint"])))
        lines.append(("CheckFailed: " if failing and i == len(said) - 1 else "") + line)
        break  # a failed visible check stops its cell
    ename = str(learner.get("ename") or "")
    if learner.get("status") != "ok" and ename != "CheckFailed":
        ename = ename if ename in _ENAMES else "Error"
        blocked = [
            e["helper"]
            for e in events(learner)
            if e.get("event") == "blocked-call" and _valid_event(e) is None and e["helper"] in exercises
        ]
        if blocked:
            name = blocked[0]
            lines.append(
                f"{ename}: "
                + tr_in(
                    lang,
                    "{name} is exercise {exercise}: write it yourself.",
                    name=name,
                    exercise=exercises[name].split()[-1],
                )
            )
        elif ename == "CellTimeoutError":
            lines.append(f"{ename}: " + tr_in(lang, "the cell ran past the time limit"))
        else:
            lines.append(
                f"{ename}: "
                + tr_in(
                    lang,
                    "(the message is not shown in graded feedback; "
                    "run the test cell in your notebook to see it)",
                )
            )
    return "\n".join(lines)


def matches(got: dict[str, Any], want: dict[str, Any], problems: list[str] | None = None) -> bool:
    """One learner record against the reference record of the same check. A value that cannot
    be compared at all (a huge integer, say) is a failed check; its reason goes to ``problems``."""
    if got.get("what") != want.get("what") or "value" not in got or "error" in got:
        return False
    kind = want.get("kind", "")  # the reference's: always a check kind
    expected = want.get("expected") if kind == "one_of" else want.get("value")
    try:
        return compare(
            kind, got["value"], expected, float(want.get("rtol", 1e-6)), float(want.get("atol", 0.0))
        )
    except Exception as exc:  # noqa: BLE001 — the learner's value: any failure is a failed check
        if problems is not None:
            problems.append(f"a value could not be compared ({type(exc).__name__}: {str(exc)[:80]})")
        return False


def score(
    exam: Exam,
    records: dict[int, dict[str, Any]],
    reference: dict[str, list[dict[str, Any]]],
    exercises: dict[str, str] | None = None,
) -> list[CellVerdict]:
    """Points per graded cell: the learner's hidden-check records against the reference's; the
    visible feedback written by :func:`feedback`."""
    verdicts = []
    for cell in exam.graded:
        raw_shown, raw_record = records.get(cell.visible), records.get(cell.index)
        want = reference.get(cell.grade_id, [])
        if cell.visible not in records:
            verdicts.append(
                CellVerdict(
                    cell.grade_id,
                    0.0,
                    cell.points,
                    "not-run",
                    "",
                    "not run: grading stopped before this cell",
                    0,
                    len(want),
                )
            )
            continue
        # every field the learner's kernel could have written is checked before it is read
        shown, problems = _cell_result(raw_shown)
        if cell.index not in records:
            record: dict[str, Any] = {"status": "not-run", "ename": "", "records": []}
        else:
            record, more = _cell_result(raw_record)
            problems += more
        problems += [why for part in (shown, record) for e in events(part) if (why := _valid_event(e))]
        got = check_records(record)
        broken = [_valid_check_record(r) for r in got]
        problems += [f"hidden check {i} is malformed: {why}" for i, why in enumerate(broken, 1) if why]
        problems += [
            f"hidden check {i} is not the check the reference recorded there"
            for i, (r, w) in enumerate(zip(got, want, strict=False), 1)
            if broken[i - 1] is None and r["what"] != w.get("what")
        ]
        failing = [
            i
            for i, w in enumerate(want)
            if i >= len(got) or broken[i] is not None or not matches(got[i], w, problems)
        ]
        failed = len(failing)
        raised = [
            m.group(1)
            for i in failing
            if i < len(got)
            and broken[i] is None
            and type(got[i].get("value")) is str
            and (m := _RAISED.match(got[i]["value"]))
        ]
        blocked = sorted(
            {
                e["helper"][:200]
                for part in (shown, record)
                for e in events(part)
                if e.get("event") == "blocked-call" and _valid_event(e) is None
            }
        )[:5]
        extra = len(got) > len(want)
        passed = (
            shown["status"] == "ok"
            and record["status"] == "ok"
            and bool(want)
            and failed == 0
            and not extra
            and not record.get("records_overflow")
        )
        first = shown if shown["status"] != "ok" else record
        status = "ok" if passed else "died" if "died" in (shown["status"], record["status"]) else "failed"
        if first.get("ename") == "CellTimeoutError":
            status = "timeout"
        visible = feedback(exam.language, shown, reference.get(cell.grade_id + VISIBLE, []), exercises or {})
        if not passed and shown["status"] == "ok":
            some = tr_in(exam.language, "some")
            visible += ("\n" if visible else "") + tr_in(
                exam.language,
                "hidden tests: {failed} of {total} checks failed (details are not shown)",
                failed=failed or some,
                total=len(want),
            )
        verdicts.append(
            CellVerdict(
                cell.grade_id,
                cell.points if passed else 0.0,
                cell.points,
                status,
                str(first.get("ename", "")),
                visible.strip(),
                failed,
                len(want),
                sorted(set(problems)),
                str(shown.get("text", "")),
                raised,
                blocked,
            )
        )
    return verdicts

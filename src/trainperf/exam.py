"""Build the notebook that is actually executed for a submission, and score its results.

Only the learner's ANSWER cells (matched by nbgrader ``grade_id``) and extra code cells the
learner added are taken from the submission. Everything else — teaching cells, the
parameters cell and every test cell with its hidden tests — comes from ``solutions/``, so a
deleted, emptied or edited test cell changes nothing but the report.

Each test cell is wrapped: first it undoes common monkeypatches (builtins such as
``__import__`` and ``AssertionError``, IPython's traceback display, fake ``helpers``
modules) and re-imports the helpers; last it prints a per-run secret. A graded cell earns
its points only if it ran without error and printed that secret.
"""

from __future__ import annotations

import ast
import copy
import re
import secrets
from dataclasses import dataclass, field
from typing import Any

_HIDDEN = re.compile(r"^[ \t]*### (BEGIN|END) HIDDEN TESTS[ \t]*$", re.MULTILINE)

_GUARD = '''\
def _tp_guard(_builtins=__import__("builtins"), _sys=__import__("sys")):
    """Grader: snapshot what tests rely on before any learner code runs."""
    originals = dict(_builtins.__dict__)
    shell = get_ipython()
    names = ("showtraceback", "_showtraceback", "showsyntaxerror")
    classes = [(c, {n: c.__dict__[n] for n in names if n in c.__dict__}) for c in type(shell).__mro__]
    def restore():
        for key, value in originals.items():
            if _builtins.__dict__.get(key) is not value:
                _builtins.__dict__[key] = value
        for cls, saved in classes:
            for name, value in saved.items():
                if cls.__dict__.get(name) is not value:
                    setattr(cls, name, value)
        for name in names:
            shell.__dict__.pop(name, None)
        _sys.excepthook = _sys.__excepthook__
        for module in [m for m in _sys.modules if m == "helpers" or m.startswith("helpers.")]:
            del _sys.modules[module]
    return restore
{restore} = _tp_guard()
del _tp_guard
'''


@dataclass
class GradedCell:
    grade_id: str
    points: float
    index: int  # position in the executed notebook


@dataclass
class Exam:
    """The notebook to execute plus what the grader needs to score it."""

    notebook: dict[str, Any]
    graded: list[GradedCell]
    answers: dict[str, int]  # answer grade_id -> index in the executed notebook
    nonce: str
    separator: str
    notes: list[str] = field(default_factory=list)  # tampering and other remarks


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
            tree = ast.parse(_source(cell))
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "helpers":
                lines.append(ast.unparse(node))
            elif isinstance(node, ast.Import) and any(a.name.split(".")[0] == "helpers"
                                                     for a in node.names):
                lines.append(ast.unparse(node))
    return "\n".join(dict.fromkeys(lines))


def _wrap_test(source: str, restore: str, imports: str, separator: str, nonce: str) -> str:
    match = _HIDDEN.search(source)
    visible, hidden = (source[:match.start()], source[match.start():]) if match else (source, "")
    return (f"{restore}()\n{imports}\n{visible.rstrip()}\nprint({separator!r})\n"
            f"{hidden.strip()}\nprint({nonce!r})\n")


def build_exam(solution: dict[str, Any], released: dict[str, Any],
               submission: dict[str, Any]) -> Exam:
    """Merge trusted cells with the learner's answers into the notebook to execute."""
    nonce, separator = f"TP-OK-{secrets.token_hex(16)}", f"TP-HIDDEN-{secrets.token_hex(8)}"
    restore = f"_tp_restore_{secrets.token_hex(6)}"
    imports = helper_imports(solution)
    tests = {_meta(c)["grade_id"]: c for c in solution["cells"] if _meta(c).get("grade")}
    released_by_id = {_meta(c).get("grade_id"): c for c in released["cells"] if _meta(c)}
    released_ids = {c.get("id") for c in released["cells"]}

    notes: list[str] = []
    student_by_grade_id: dict[str, dict[str, Any]] = {}
    extras_after: dict[str, list[dict[str, Any]]] = {}
    anchor = "__start__"
    for cell in submission.get("cells", []):
        gid = _meta(cell).get("grade_id")
        if gid and gid not in student_by_grade_id:
            student_by_grade_id[gid] = cell
            anchor = f"grade:{gid}"
        elif cell.get("id") in released_ids:
            anchor = f"id:{cell.get('id')}"
        elif cell.get("cell_type") == "code" and _source(cell).strip():
            extras_after.setdefault(anchor, []).append(cell)

    for gid in tests:
        mine = student_by_grade_id.get(gid)
        if mine is None:
            notes.append(f"test cell {gid} was deleted; the original tests were run")
        elif mine.get("cell_type") != "code":
            notes.append(f"test cell {gid} was turned into {mine.get('cell_type')}; "
                         "the original tests were run")
        elif _source(mine).strip() != _source(released_by_id[gid]).strip():
            notes.append(f"test cell {gid} was edited; the original tests were run")

    cells: list[dict[str, Any]] = [_code(_GUARD.replace("{restore}", restore))]
    graded: list[GradedCell] = []
    answers: dict[str, int] = {}
    cells += extras_after.get("__start__", [])
    for cell in released["cells"]:
        meta = _meta(cell)
        gid = meta.get("grade_id")
        if meta.get("grade"):
            wrapped = _code(_wrap_test(_source(tests[gid]), restore, imports, separator, nonce))
            graded.append(GradedCell(gid, float(meta.get("points", 0)), len(cells)))
            cells.append(wrapped)
        elif meta.get("solution"):
            mine = student_by_grade_id.get(gid)
            if mine is None or mine.get("cell_type") != cell["cell_type"]:
                notes.append(f"answer cell {gid} is missing; graded as unanswered")
                mine = cell
            answers[gid] = len(cells)
            cells.append(_code(_source(mine)) if cell["cell_type"] == "code" else copy.deepcopy(mine))
        else:
            cells.append(copy.deepcopy(cell))
        key = f"grade:{gid}" if gid else f"id:{cell.get('id')}"
        cells += [_code(_source(c)) for c in extras_after.get(key, [])]
    notebook = copy.deepcopy(released)
    notebook["cells"] = cells
    return Exam(notebook, graded, answers, nonce, separator, notes)


def _code(source: str) -> dict[str, Any]:
    return {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
            "source": source}


@dataclass
class CellVerdict:
    grade_id: str
    points: float
    max_points: float
    status: str  # ok | failed | error | timeout | died | not-run
    ename: str
    visible: str  # what the learner would have seen from the visible checks


def score(exam: Exam, records: dict[int, dict[str, Any]]) -> list[CellVerdict]:
    """Points per graded cell from the executed cells' records (index -> record)."""
    verdicts = []
    for cell in exam.graded:
        record = records.get(cell.index)
        if record is None:
            verdicts.append(CellVerdict(cell.grade_id, 0.0, cell.points, "not-run", "",
                                        "not run: grading stopped before this cell"))
            continue
        text = record.get("text", "")
        visible = text.split(exam.separator)[0].replace(exam.nonce, "").strip()
        passed = record["status"] == "ok" and exam.nonce in text
        status = "ok" if passed else {"died": "died"}.get(record["status"], "failed")
        if record.get("ename") == "CellTimeoutError":
            status = "timeout"
        if not passed and exam.separator not in text and record.get("ename"):
            visible = (visible + "\n" if visible else "") + \
                f"{record['ename']}: {record.get('evalue', '')}".strip()
        elif not passed and exam.separator in text:
            visible += "\nhidden tests: failed (details are not shown)"
        verdicts.append(CellVerdict(cell.grade_id, cell.points if passed else 0.0, cell.points,
                                    status, record.get("ename", ""), visible.strip()))
    return verdicts

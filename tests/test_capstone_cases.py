"""Chapter 9's hidden cases cover every label and phase the decision distinguishes (issue
"exercises, second round"): exercise 1's graded traces, recorded and generated, between them
hold every bottleneck label and every phase, so an answer that never names one of them loses
points. The generated traces are rebuilt here exactly as the hidden test builds them (the case
list is read from the solution notebook, not copied)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from helpers import report, timeline

ROOT = Path(__file__).resolve().parents[1]
SOLUTION = ROOT / "solutions" / "09_capstone" / "09_capstone.ipynb"
LABELS = {"data-bound", "compute-bound", "optimizer-bound", "host-bound"}
PHASES = {"data", "forward", "backward", "optimizer", "other"}


def _hidden_source(grade_id: str) -> str:
    cells = json.loads(SOLUTION.read_text(encoding="utf-8"))["cells"]
    for cell in cells:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id:
            source = "".join(cell["source"])
            return source.split("### BEGIN HIDDEN TESTS", 1)[1].split("### END HIDDEN TESTS", 1)[0]
    raise AssertionError(f"no cell {grade_id} in {SOLUTION}")


def _literal(source: str, name: str):
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"no literal {name} = [...] in the hidden test")


@pytest.fixture(scope="module")
def exercise_1_answers(tmp_path_factory):
    """(label, phase) of every graded case of exercise 1, by the course's rule."""
    source = _hidden_source("ex1_trace_test")
    assert "seed=100 + i" in source  # the seeds used below are the hidden test's
    folder = tmp_path_factory.mktemp("generated")
    answers = []
    for name in report.RECORDED_TRACES:
        phases = report.mean_phases(report.step_phases(timeline.load_trace(report.recorded_trace(name))))
        answers += [report.bottleneck_phase(phases, t) for t in (0.2, 0.1, 0.15, 0.5)]
    generated = _literal(source, "GENERATED")
    for i, (phases_ms, t) in enumerate(generated):
        trace = timeline.load_trace(
            report.write_example_trace(folder / f"{i}.json.gz", phases_ms, seed=100 + i)
        )
        answers.append(report.bottleneck_phase(report.mean_phases(report.step_phases(trace)), t))
    return answers, len(generated)


def test_exercise_1_cases_hold_every_label_and_phase(exercise_1_answers):
    answers, generated = exercise_1_answers
    assert generated >= 8
    assert {label for label, _ in answers} == LABELS
    assert {phase for _, phase in answers} == PHASES
    compute = [phase for label, phase in answers if label == "compute-bound"]
    assert "forward" in compute and "backward" in compute  # forward-heavy steps too


def test_the_recordings_alone_do_not_and_the_generated_traces_close_the_gap(exercise_1_answers):
    """Why the generated traces are there: the five recordings hold no host-bound and no
    forward-heavy case (a lookup or a rule that never names them would pass on them alone)."""
    answers, generated = exercise_1_answers
    recorded = answers[: len(answers) - generated]
    assert "host-bound" not in {label for label, _ in recorded}
    assert "forward" not in {phase for _, phase in recorded}


def test_a_generated_trace_is_labelled_and_has_the_phases_asked_for(tmp_path):
    path = report.write_example_trace(
        tmp_path / "t.json", {"data": 2.0, "forward": 5.0, "backward": 7.0, "other": 1.0}, steps=4, jitter=0.0
    )
    assert "GENERATED" in json.loads(path.read_text())["traceName"]
    steps = report.step_phases(timeline.load_trace(path))
    assert len(steps) == 4
    want = {"data": 2.0, "forward": 5.0, "backward": 7.0, "optimizer": 0.0, "other": 1.0, "step": 15.0}
    for step in steps:
        assert step == pytest.approx(want)
    with pytest.raises(ValueError, match="unknown phase"):
        report.write_example_trace(tmp_path / "x.json", {"loading": 1.0})
    with pytest.raises(ValueError, match="more than 0 ms"):
        report.write_example_trace(tmp_path / "x.json", {"data": 0.0})


def _cell_source(grade_id: str) -> str:
    cells = json.loads(SOLUTION.read_text(encoding="utf-8"))["cells"]
    return next(
        "".join(c["source"])
        for c in cells
        if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id
    )


def _definitions(visible: str, names: set[str]) -> list[ast.stmt]:
    """The visible part's functions and assignments of ``names``: what the hidden cases are built with."""
    return [
        node
        for node in ast.parse(visible).body
        if (isinstance(node, ast.FunctionDef) and node.name in names)
        or (isinstance(node, ast.Assign) and any(getattr(t, "id", None) in names for t in node.targets))
    ]


def _cases(grade_id: str, names: set[str]) -> list:
    """A hidden test's case list, built by its own code (the visible helpers it names, then the
    hidden part up to where the answers run), with the course's helpers."""
    visible, hidden = _cell_source(grade_id).split("### BEGIN HIDDEN TESTS", 1)
    namespace = {"report": report}
    exec(compile(ast.Module(body=_definitions(visible, names), type_ignores=[]), grade_id, "exec"), namespace)
    exec(hidden.split("with checks.blocked", 1)[0], namespace)
    return namespace["cases"]


def test_exercise_3_cases_cover_every_kind_of_judgement():
    """Exercise 3's graded reports (recorded prefixes, the GPU examples and the made-up ones) end on
    kept configurations of all four labels, with and without a next action left, and hold each
    kind of judgement: a configuration over its budget (checkpointing first), a change reverted
    for memory and worth a new try, a change that moved training (never tried again), and a
    change reverted as not faster (either reading keeps its points)."""
    cases = _cases("ex3_findings_test", {"PHASES", "CURVE", "made_up"})
    assert len(cases) >= 30
    found = [report.report_findings(rows, memory_budget_mb=budget) for _, rows, budget in cases]
    assert {f["bottleneck"] for f in found} == LABELS
    assert any(f["next_action"] is None for f in found) and any(f["next_action"] for f in found)
    choices = [report.acceptable_next_actions(rows, budget) for _, rows, budget in cases]
    assert ("checkpoint",) in choices  # over the budget: make it fit first
    tried = [{r["name"] for r in rows} for _, rows, _ in cases]
    strict = [report.next_actions_for(rows, budget) for _, rows, budget in cases]
    assert any(set(s) & t for s, t in zip(strict, tried, strict=True))  # a memory revert tried again
    assert any(len(c) > len(s) for c, s in zip(choices, strict, strict=True))  # two readings accepted
    moved = [
        (rows, r["name"])
        for _, rows, _ in cases
        for r in rows[1:]
        if report.moved_training(rows[0], r)
        and r["name"] in report.FIXES[report.report_findings(rows)["bottleneck"]]
    ]
    assert moved and all(name not in report.acceptable_next_actions(rows) for rows, name in moved)
    recorded = [f for (label, _, _), f in zip(cases, found, strict=True) if label.startswith("cpu-")]
    assert "optimizer-bound" not in {f["bottleneck"] for f in recorded}  # why the made-up reports exist


def _exercise_4_cases() -> list:
    """Exercise 4's graded cases, built by the hidden test's own code."""
    return _cases("ex4_kept_test", {"DERIVED", "inputs", "shifted", "large", "again"})


def test_exercise_4_cases_are_chains_a_tuner_could_produce():
    """Each change of every case was tried on the configuration kept just before it (the
    baseline, or the last kept change): no case keeps a change measured on a reverted one."""
    cases = _exercise_4_cases()
    assert len(cases) >= 20
    for rows, budget in cases:
        current = rows[0]["name"]
        for i, row in enumerate(rows[1:], start=1):
            assert row["tried_on"] == current, (row["name"], row["tried_on"], current, budget)
            # kept when the rows up to it keep one more change than the rows before it (a name can
            # come twice: a change tried again)
            if len(report.kept_changes(rows[: i + 1], budget)) > len(report.kept_changes(rows[:i], budget)):
                current = row["name"]
    assert {len(report.kept_changes(rows, budget)) for rows, budget in cases} >= {1, 2, 3}
    # training moved by a bump mid-run or by a late blip: the curve decides, not the last loss alone
    base_moves = [report.moved_training(rows[0], rows[-1]) for rows, _ in cases]
    assert any(base_moves) and not all(base_moves)

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


def test_exercise_3_cases_keep_configurations_of_every_label():
    """Exercise 3's graded reports (recorded prefixes, the GPU examples and the made-up ones)
    end on kept configurations of all four labels, with and without a next action left."""
    source = _hidden_source("ex3_findings_test")
    reports = [report.recorded_report(name).rows for name in ("cpu-quick", "cpu-full")]
    reports += [rep["rows"] for rep in report.example_gpu_reports().values()]
    cases = [rows[:k] for rows in reports for k in range(1, len(rows) + 1)]
    phases = ("data", "forward", "backward", "optimizer", "other")
    for made in _literal(source, "GENERATED_REPORTS"):
        cases.append(
            [
                {"name": n, "decision": d, "phases_ms": dict(zip(phases, ms, strict=True))}
                for n, d, *ms in made
            ]
        )
    found = [report.report_findings(rows) for rows in cases]
    assert {f["bottleneck"] for f in found} == LABELS
    assert any(f["next_action"] is None for f in found) and any(f["next_action"] for f in found)
    recorded = found[: sum(len(r) for r in reports)]
    assert "optimizer-bound" not in {f["bottleneck"] for f in recorded}  # why the made-up reports exist


def _exercise_4_cases() -> list:
    """Exercise 4's graded cases, built by the hidden test's own code (its ``inputs`` helper
    and its case list), with the course's helpers."""
    cells = json.loads(SOLUTION.read_text(encoding="utf-8"))["cells"]
    source = next(
        "".join(c["source"])
        for c in cells
        if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "ex4_kept_test"
    )
    visible, hidden = source.split("### BEGIN HIDDEN TESTS", 1)
    keep = [
        node
        for node in ast.parse(visible).body
        if (isinstance(node, ast.FunctionDef) and node.name == "inputs")
        or (isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "DERIVED" for t in node.targets))
    ]
    namespace = {"report": report}
    exec(compile(ast.Module(body=keep, type_ignores=[]), "ex4-visible", "exec"), namespace)
    exec(hidden.split("with checks.blocked", 1)[0], namespace)
    return namespace["cases"]


def test_exercise_4_cases_are_chains_a_tuner_could_produce():
    """Each change of every case was tried on the configuration kept just before it (the
    baseline, or the last kept change): no case keeps a change measured on a reverted one."""
    cases = _exercise_4_cases()
    assert len(cases) >= 12
    for rows, budget in cases:
        kept = report.kept_changes(rows, budget)
        current = rows[0]["name"]
        for row in rows[1:]:
            assert row["tried_on"] == current, (row["name"], row["tried_on"], current, budget)
            if row["name"] in kept:
                current = row["name"]
    assert {len(report.kept_changes(rows, budget)) for rows, budget in cases} >= {1, 2, 3}

"""Every solution notebook runs headless (papermill, quick CPU), passes nbval, and keeps
the course's notebook conventions."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from conftest import CHAPTERS, ROOT

from trainperf.course import chapter_notebook
from trainperf.hidden import lint_hidden, split_hidden

pytestmark = pytest.mark.notebooks
MAX_TEACHING_CELL_LINES = 15  # longer logic belongs in src/helpers


def _executed(chapter: str, executed_dir: Path) -> Path:
    """Run the chapter once per session with papermill; later calls reuse the output."""
    from trainperf.run import run_one

    target = executed_dir / f"{chapter}.ipynb"
    if not target.exists():
        result = run_one(str(ROOT), chapter, str(executed_dir), "cpu", True, 120)
        assert result.status == "ok", f"{chapter} failed under papermill: {result.detail}"
    return target


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_papermill_executes_quick_on_cpu(chapter, executed_dir):
    nb = nbformat.read(_executed(chapter, executed_dir), as_version=4)
    errors = [c for c in nb.cells if c.cell_type == "code"
              and any(o.get("output_type") == "error" for o in c.get("outputs", []))]
    assert not errors
    graded = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
    assert graded and all("✓" in "".join(o.get("text", "") for o in c.outputs) for c in graded)
    # stock `nbgrader autograde` scores any graded cell that writes to stderr as 0
    noisy = {c.metadata["nbgrader"]["grade_id"]: o.get("text", "")[:200] for c in graded
             for o in c.outputs if o.get("output_type") == "stream" and o.get("name") == "stderr"}
    assert not noisy, f"graded cells write to stderr (stock nbgrader would score them 0): {noisy}"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_nbval_lax_on_executed_notebook(chapter, executed_dir, tmp_path):
    executed = _executed(chapter, executed_dir)
    nb = nbformat.read(executed, as_version=4)
    checked = [c for c in nb.cells if "nbval-check-output" in c.metadata.get("tags", [])]
    assert checked, "mark deterministic outputs with the nbval-check-output tag"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "--nbval-lax", "--nbval-current-env",
         "-p", "no:cacheprovider", str(executed)],
        cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:]


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_notebook_conventions(chapter):
    nb = nbformat.read(chapter_notebook(ROOT, chapter), as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# ")
    params = code[0]
    assert "parameters" in params.metadata.get("tags", [])
    assert 'DEVICE = "auto"' in params.source and "QUICK = True" in params.source
    setup = code[1].source
    assert "TRAINPERF_SPEC" in setup and "helpers.setup(DEVICE)" in setup
    cells = nb.cells
    for i, cell in enumerate(cells):
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution") and not meta.get("grade"):
            assert "### BEGIN SOLUTION" in cell.source and "### END SOLUTION" in cell.source
            follower = cells[i + 1].metadata.get("nbgrader", {})
            assert follower.get("grade") and follower.get("points"), \
                f"answer cell {meta['grade_id']} must be followed by its test cell"
        if meta.get("grade"):
            assert "checks." in cell.source, "visible checks use helpers.checks"
            assert "### BEGIN HIDDEN TESTS" in cell.source, f"{meta['grade_id']} has no hidden tests"
            problems = lint_hidden(split_hidden(cell.source)[1])
            assert not problems, f"{meta['grade_id']}: " + "; ".join(problems)
        if cell.cell_type == "code" and not meta and cell is not code[1]:
            lines = [ln for ln in cell.source.splitlines() if ln.strip()]
            assert len(lines) <= MAX_TEACHING_CELL_LINES, \
                f"a {len(lines)}-line teaching cell belongs in src/helpers:\n{cell.source[:200]}"
    assert sum(1 for c in cells if c.metadata.get("nbgrader", {}).get("grade")) >= 4


def _names(tree) -> tuple[set[str], set[str]]:
    """(names read, names bound) anywhere in ``tree`` — a deliberately coarse over-approximation."""
    import ast

    loaded, bound = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
    return loaded, bound


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_test_cells_are_self_contained(chapter):
    """A test cell may use only helpers imports, answer names and its own names: grading
    re-imports the helpers before each test cell, so nothing a learner rebinds can leak in."""
    import ast
    import builtins

    from trainperf.exam import helper_imports

    nb = nbformat.read(chapter_notebook(ROOT, chapter), as_version=4)
    _, imported = _names(ast.parse(helper_imports(nb)))
    answers: set[str] = set()
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution") and not meta.get("grade"):
            tree = ast.parse(cell.source)
            for node in tree.body:  # only top-level definitions are the answer's names
                _, top = _names(ast.Module(body=[node], type_ignores=[]))
                if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Assign, ast.Import,
                                     ast.ImportFrom, ast.AnnAssign)):
                    answers |= top if not isinstance(node, ast.FunctionDef) else {node.name}
    allowed = imported | answers | set(dir(builtins))
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade"):
            loaded, bound = _names(ast.parse(cell.source))
            leaked = loaded - bound - allowed
            assert not leaked, f"{meta['grade_id']} uses {sorted(leaked)} from teaching cells"

"""`import helpers` needs only the learner dependencies."""

import subprocess
import sys

CODE = r"""
import sys
for heavy in ("nbgrader", "papermill", "nbval", "jupyterlab", "nbclient", "pytest"):
    sys.modules[heavy] = None  # any import of these now raises ImportError
import helpers
for name in helpers._SUBMODULES:
    getattr(helpers, name)
print("ok", len(helpers._SUBMODULES))
"""


def test_helpers_import_without_course_tooling():
    result = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok")


def test_unknown_attribute_is_a_clear_error():
    import pytest

    import helpers

    with pytest.raises(AttributeError, match="no attribute"):
        helpers.not_a_module  # noqa: B018


FAST_NBFORMAT = r"""
import sys, time
start = time.perf_counter()
import trainperf, nbformat, nbclient
nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1")])
nbformat.validate(nb)
try:
    nbformat.validate({"cells": "not a list"})
except nbformat.ValidationError:
    print("still validates")
print("grammar loaded:", sys.modules.get("rfc3987_syntax") is not None)
"""


def test_trainperf_processes_skip_the_slow_iri_grammar_but_still_validate():
    """Every grading child imports nbformat; after `import trainperf` it must not build
    rfc3987-syntax's grammar (2.7 s a process), and nbformat must still reject a bad notebook."""
    result = subprocess.run([sys.executable, "-c", FAST_NBFORMAT], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "still validates" in result.stdout and "grammar loaded: False" in result.stdout


def test_nbgrader_runs_through_the_fast_entry_point():
    result = subprocess.run(
        [sys.executable, "-m", "trainperf._nbgrader_main", "--version"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "nbgrader version" in result.stdout

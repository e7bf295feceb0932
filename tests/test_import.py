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

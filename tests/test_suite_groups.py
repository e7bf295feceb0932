"""The suite's xdist groups hold: tests that share an expensive set-up run on one worker.

``tests/conftest.py`` puts whole files in groups (a graded batch, a fresh venv, JupyterLab);
pytest-xdist's ``--dist loadgroup`` honours a group by appending ``@<group>`` to the node id.
When that stops working (pytest 9.2, pytest-xdist #1386; or the conftest hook running after
xdist's), nothing fails but the set-ups run on every worker and CI slows down: this fails instead.
"""

from __future__ import annotations

import os

import pytest


def test_this_file_runs_as_one_group(request):
    if not os.environ.get("PYTEST_XDIST_WORKER") or not request.config.getvalue("loadgroup"):
        pytest.skip("not under pytest-xdist --dist loadgroup (e.g. -n0): there are no groups to check")
    assert request.node.nodeid.endswith("@test_suite_groups.py"), (
        f"node id {request.node.nodeid!r} has no group suffix: the xdist groups in tests/conftest.py "
        "are ignored (check the pytest / pytest-xdist pair in pyproject.toml)"
    )

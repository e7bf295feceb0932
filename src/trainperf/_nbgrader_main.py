"""``python -m trainperf._nbgrader_main ARGS``: nbgrader's own command line, run after
``import trainperf`` so that it skips the slow optional import (see ``trainperf/__init__.py``)."""

import runpy

import trainperf  # noqa: F401  (the import is the point)

runpy.run_module("nbgrader", run_name="__main__", alter_sys=True)

"""Course tooling for instructors and CI: build student notebooks, run them, grade them.

Needs the ``course`` extra (nbgrader, papermill, ...). The learner package is ``helpers``.
"""

import sys as _sys

# The distribution's version, written once: helpers.__version__ (pyproject reads it too). The
# helpers package's own body imports only the standard library; its chapters load on first use.
from helpers import __version__ as __version__

# jsonschema, under nbformat, imports rfc3987-syntax when it is installed (jupyter-events pulls it
# in), and that package builds a Lark grammar at import: 2.7 s of CPU in every process that imports
# nbformat (python-jsonschema/jsonschema#1392, #1521). Grading starts one such process per
# submission. nbformat's schema has no "iri" formats, so nothing we validate needs it; a None entry
# makes the import fail fast and jsonschema skips that one format checker.
_sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]  # None: import fails

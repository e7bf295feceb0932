"""Course tooling for instructors and CI: build student notebooks, run them, grade them.

Needs the ``course`` extra (nbgrader, papermill, ...). The learner package is ``helpers``.
"""

# The distribution's version is helpers.__version__ (pyproject reads it); this copy lets the
# merge and report commands run without importing helpers. tests/test_packaging.py keeps them equal.
__version__ = "0.1.0"

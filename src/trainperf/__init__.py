"""Course tooling for instructors and CI: build student notebooks, run them, grade them.

Needs the ``course`` extra (nbgrader, papermill, ...). The learner package is ``helpers``.
"""

from helpers import __version__  # one version for the whole distribution (pyproject reads it)

__all__ = ["__version__"]

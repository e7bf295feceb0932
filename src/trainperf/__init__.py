"""Course tooling for instructors and CI: build student notebooks, run them, grade them.

Needs the ``course`` extra (nbgrader, papermill, ...). The learner package is ``helpers``.
"""

__version__ = "0.1.0"

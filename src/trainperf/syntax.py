"""``ast.parse`` and ``compile`` of a tree, one thread at a time.

CPython 3.11 keeps the AST converter's recursion depth in state shared by all threads, so two
threads converting at once can fail with ``SystemError: AST constructor recursion depth
mismatch`` (python/cpython#106905 and its follow-ups). The grader grades submissions in
threads and the build generates editions in threads: every AST conversion of ``trainperf`` goes
through here (tests/test_grading_units.py checks that no module calls ``ast.parse`` itself).
"""

from __future__ import annotations

import ast
import threading
import types

_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse`` of a module, holding the process-wide AST lock."""
    with _LOCK:
        return ast.parse(source, filename)


def compile_tree(
    tree: ast.Module | ast.Expression | ast.Interactive, filename: str, mode: str = "exec"
) -> types.CodeType:
    """``compile`` of an AST object (converted back to C in the same shared state)."""
    with _LOCK:
        return compile(tree, filename, mode)

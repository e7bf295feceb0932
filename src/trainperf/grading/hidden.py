"""The hidden-test format: split a test cell, strip its expected side, and lint it.

A test cell is visible checks, then ``### BEGIN HIDDEN TESTS`` … ``### END HIDDEN TESTS``
at the top level. In the hidden part every graded value goes through
``checks.hidden.close / equal / one_of(got, what, expect=lambda: ...)``; the expected side
lives only inside those ``expect=`` lambdas, which :func:`strip_expectations` removes before
the learner's kernel sees the cell (see :mod:`helpers.checks`).
"""

from __future__ import annotations

import ast
import re

from .. import syntax

HIDDEN_MARKERS = re.compile(r"^[ \t]*### (BEGIN|END) HIDDEN TESTS[ \t]*$", re.MULTILINE)
HIDDEN_KINDS = ("close", "equal", "one_of")
VISIBLE_CHECKS = ("close", "equal", "one_of", "at_most", "of_type")


def split_hidden(source: str) -> tuple[str, str]:
    """(visible part, hidden part including its markers); hidden is '' when there is none."""
    match = HIDDEN_MARKERS.search(source)
    return (source[: match.start()], source[match.start() :]) if match else (source, "")


def _hidden_body(hidden: str) -> str:
    return HIDDEN_MARKERS.sub("", hidden)


def _is_hidden_check(node: ast.AST) -> bool:
    """``checks.hidden.close(...)`` / ``hidden.equal(...)`` and the like."""
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return False
    owner = node.func.value
    named_hidden = (isinstance(owner, ast.Attribute) and owner.attr == "hidden") or (
        isinstance(owner, ast.Name) and owner.id == "hidden"
    )
    return named_hidden and node.func.attr in HIDDEN_KINDS


def _is_visible_check(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "checks"
        and node.func.attr in VISIBLE_CHECKS
    )


class _Strip(ast.NodeTransformer):
    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        for keyword in node.keywords:
            if keyword.arg == "expect":
                keyword.value = ast.Constant(None)
        return node


def strip_expectations(hidden: str) -> str:
    """The hidden part with every ``expect=`` argument replaced by ``None``.

    Raises SyntaxError when the hidden part does not parse on its own (a course bug that
    :func:`lint_hidden` reports first).
    """
    tree = _Strip().visit(syntax.parse(_hidden_body(hidden)))
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def lint_hidden(hidden: str) -> list[str]:
    """What is wrong with a hidden part, in words; empty when it follows the format."""
    try:
        tree = syntax.parse(_hidden_body(hidden))
    except SyntaxError as exc:
        return [f"the hidden part does not parse on its own (markers must be at the top level): {exc}"]
    problems = []
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    recorded = [c for c in calls if _is_hidden_check(c)]
    if not recorded:
        problems.append("no checks.hidden.close/equal/one_of call: nothing would be graded")
    for call in recorded:
        expect = [k for k in call.keywords if k.arg == "expect"]
        if not expect or not isinstance(expect[0].value, ast.Lambda):
            problems.append(
                f"line {call.lineno}: a hidden check needs expect=lambda: ... "
                "(the expected side lives only there)"
            )
        elif expect[0].value.args.args or expect[0].value.args.vararg:
            problems.append(f"line {call.lineno}: expect= must be a lambda with no arguments")
    for call in calls:
        if _is_visible_check(call) and isinstance(call.func, ast.Attribute):  # checks.<name>
            problems.append(
                f"line {call.lineno}: visible check checks.{call.func.attr} in the "
                "hidden part would compare in the learner's kernel; use checks.hidden"
            )
        if not _is_hidden_check(call) and any(k.arg == "expect" for k in call.keywords):
            problems.append(f"line {call.lineno}: expect= outside a hidden check would be stripped")
    return problems

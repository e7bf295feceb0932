"""Which teaching cells an exam needs: the ones that define something a graded cell reads.

A chapter's teaching cells measure, plot and explain; most of what they compute is never read
by a test cell or an answer. Grading runs a notebook once per submission, so it skips those:
:func:`needed_cells` walks back from the cells that must run (answers, tests, the learner's
own cells) and keeps each earlier code cell that binds or changes a name a kept cell reads,
then what that cell reads, and so on. Markdown cells cost nothing and are kept.

The analysis is conservative where it cannot be sure: a cell that does not parse, or that
uses ``exec``, ``eval``, ``globals()``, ``%run`` or a star import, keeps every cell before it.
A name is *changed* by a cell that assigns to it, to one of its attributes or items, or that
calls one of its methods as a statement (``model.eval()``, ``torch.manual_seed(0)``).
"""

from __future__ import annotations

import ast
import builtins
import re
from collections.abc import Sequence
from typing import Any

from . import syntax

_BUILTINS = frozenset(dir(builtins))
_MAGIC = re.compile(r"^([ \t]*)[%!].*$", re.MULTILINE)
_OPAQUE_CALLS = frozenset({"exec", "eval", "globals", "locals", "vars", "get_ipython", "__import__"})


class _Unknown(Exception):
    """The cell's names cannot be read statically."""


def _source(cell: dict[str, Any]) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _tree(cell: dict[str, Any]) -> ast.Module:
    text = _source(cell)
    if re.search(r"^[ \t]*%run\b", text, re.MULTILINE):
        raise _Unknown
    try:
        return syntax.parse(_MAGIC.sub(r"\1pass", text))
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise _Unknown from exc


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _statements(tree: ast.AST):
    """The cell's statements, into loops, branches and ``with`` blocks but not into functions."""
    stack = list(getattr(tree, "body", []))
    while stack:
        stmt = stack.pop()
        yield stmt
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for field in ("body", "orelse", "finalbody", "handlers"):
            stack.extend(getattr(stmt, field, []) or [])
        if isinstance(stmt, ast.Match):
            for case in stmt.cases:
                stack.extend(case.body)


def binds(tree: ast.Module) -> set[str]:
    """Names the cell defines or changes at the top level of the notebook."""
    out: set[str] = set()
    for stmt in _statements(tree):
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(stmt.name)
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            for alias in stmt.names:
                if alias.name == "*":
                    raise _Unknown
                out.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            root = _root_name(stmt.value.func)
            if root and isinstance(stmt.value.func, ast.Attribute):
                out.add(root)  # model.eval(), torch.manual_seed(0): a change to that object
        elif isinstance(stmt, (ast.Global, ast.Nonlocal)):
            out.update(stmt.names)
        for node in (
            ast.walk(stmt)
            if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            else ()
        ):
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                out.add(node.id)
            elif isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(
                node.ctx, (ast.Store, ast.Del)
            ):
                root = _root_name(node)
                if root:
                    out.add(root)
    return out - _BUILTINS


class _Reads(ast.NodeVisitor):
    """Names read before the cell binds them, in execution order (``x = x + 1`` reads ``x``;
    ``for s in ...: print(s)`` does not). Function bodies read their free names when called,
    so those count unless the cell binds them anywhere."""

    def __init__(self) -> None:
        self.bound: set[str] = set()
        self.free: set[str] = set()
        self.late: set[str] = set()  # free names of function and class bodies

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            if node.id in _OPAQUE_CALLS:
                raise _Unknown
            if node.id not in self.bound:
                self.free.add(node.id)
        else:
            self.bound.add(node.id)

    def visit_Assign(self, node: ast.Assign) -> None:
        self.visit(node.value)
        for target in node.targets:
            self.visit(target)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)
        self.visit(node.target)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.visit(node.value)
        root = _root_name(node.target)
        if root and root not in self.bound:
            self.free.add(root)
        self.visit(node.target)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.visit(node.value)
        self.visit(node.target)

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        self.visit(node.iter)
        self.visit(node.target)
        for stmt in node.body + node.orelse:
            self.visit(stmt)

    visit_AsyncFor = visit_For

    def visit_With(self, node: ast.With | ast.AsyncWith) -> None:
        for item in node.items:
            self.visit(item.context_expr)
            if item.optional_vars is not None:
                self.visit(item.optional_vars)
        for stmt in node.body:
            self.visit(stmt)

    visit_AsyncWith = visit_With

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.type is not None:
            self.visit(node.type)
        if node.name:
            self.bound.add(node.name)
        for stmt in node.body:
            self.visit(stmt)

    def visit_Import(self, node: ast.Import | ast.ImportFrom) -> None:
        for alias in node.names:
            self.bound.add((alias.asname or alias.name).split(".")[0])

    visit_ImportFrom = visit_Import

    def _body(
        self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef, params: set[str]
    ) -> None:
        inner = _Reads()
        inner.bound = set(params)
        for stmt in node.body if isinstance(node.body, list) else [node.body]:
            inner.visit(stmt)
        self.late |= inner.free | inner.late

    def _params(self, args: ast.arguments) -> set[str]:
        for default in args.defaults + [d for d in args.kw_defaults if d is not None]:
            self.visit(default)
        every = args.posonlyargs + args.args + args.kwonlyargs + [a for a in (args.vararg, args.kwarg) if a]
        return {a.arg for a in every}

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for decorator in node.decorator_list:
            self.visit(decorator)
        params = self._params(node.args)
        self.bound.add(node.name)
        self._body(node, params)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._body(node, self._params(node.args))

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for expr in node.decorator_list + node.bases + [k.value for k in node.keywords]:
            self.visit(expr)
        self.bound.add(node.name)
        self._body(node, set())

    def _comprehension(
        self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp, parts: list[ast.expr]
    ) -> None:
        inner = _Reads()
        inner.bound = set(self.bound)
        for i, gen in enumerate(node.generators):
            (self if i == 0 else inner).visit(gen.iter)  # the first iterable runs outside
            inner.visit(gen.target)
            for cond in gen.ifs:
                inner.visit(cond)
        for part in parts:
            inner.visit(part)
        self.free |= inner.free - self.bound
        self.late |= inner.late

    def visit_ListComp(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp) -> None:
        self._comprehension(node, [node.elt])

    visit_SetComp = visit_GeneratorExp = visit_ListComp

    def visit_DictComp(self, node: ast.DictComp) -> None:
        self._comprehension(node, [node.key, node.value])


def reads(tree: ast.Module) -> set[str]:
    """Names the cell needs from earlier cells."""
    visitor = _Reads()
    for stmt in tree.body:
        visitor.visit(stmt)
    return (visitor.free | (visitor.late - visitor.bound)) - _BUILTINS


def needed_cells(cells: Sequence[dict[str, Any]], must_run: set[int]) -> list[int]:
    """Indices of the cells to execute, in order: ``must_run``, every markdown cell, and each
    code cell before them that defines or changes a name a kept cell reads."""
    keep = set(must_run)
    wanted: set[str] = set()
    everything = False
    for i in range(len(cells) - 1, -1, -1):
        cell = cells[i]
        if cell.get("cell_type") != "code":
            keep.add(i)
            continue
        try:
            tree = _tree(cell)
            cell_binds = binds(tree)
            if i in keep or everything or cell_binds & wanted:
                keep.add(i)
                wanted |= reads(tree)
        except _Unknown:
            keep.add(i)
            everything = True  # cannot tell what this cell reads: keep everything before it
    return sorted(keep)

"""Flag answers that copy the reference implementation instead of writing it.

A check that runs in the same language as the answer cannot prove who wrote it, so this only
flags for review, in the grades' ``reason`` column. Two signs, both read from the submitted
source in the grading process (never from the learner's kernel):

- an answer function with the same code as a helper (same bytecode and constants, whatever the
  names of its variables: a pasted helper);
- an answer that reaches for helper code by the back door: ``importlib.reload``, a function's
  ``__code__``, ``types.FunctionType``, ``inspect.getsource``, ``exec`` / ``eval`` /
  ``compile``, ``runpy``, loading a module from a file, or editing ``sys.modules``.
"""

from __future__ import annotations

import ast
import types
from functools import lru_cache
from pathlib import Path

from helpers.checks import fingerprint

from .. import syntax

# A function shorter than this (in instructions) can be written the same way by anyone who
# follows the exercise text, so being identical to a helper proves nothing.
_MIN_INSTRUCTIONS = 60
_BACK_DOORS = {
    "reload": "importlib.reload", "__code__": "a function's __code__",
    "FunctionType": "types.FunctionType",
    "getsource": "inspect.getsource", "getsourcelines": "inspect.getsource", "exec": "exec",
    "eval": "eval", "compile": "compile", "run_path": "runpy", "run_module": "runpy",
    "spec_from_file_location": "a module loaded from a file",
    "SourceFileLoader": "a module loaded from a file", "module_from_spec": "a module loaded from a file",
    "modules": "sys.modules",
}


class _NoDocstrings(ast.NodeTransformer):
    """Docstrings are not code: a helper pasted without its docstring is still a copy."""

    def generic_visit(self, node: ast.AST) -> ast.AST:
        super().generic_visit(node)
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
        return node


def _compile(source: str, name: str) -> types.CodeType:
    tree = ast.fix_missing_locations(_NoDocstrings().visit(syntax.parse(source)))
    return syntax.compile_tree(tree, name)


def _functions(code: types.CodeType, prefix: str) -> list[tuple[str, types.CodeType]]:
    found = []
    for const in code.co_consts:
        if isinstance(const, types.CodeType) and not const.co_name.startswith("<"):
            name = f"{prefix}.{const.co_name}"
            found.append((name, const))
            found += _functions(const, name)
    return found


@lru_cache(maxsize=4)
def helper_fingerprints(package_dir: str) -> dict[tuple, str]:
    """fingerprint -> ``helpers.module.function`` for every non-trivial helper function."""
    root = Path(package_dir)
    table: dict[tuple, str] = {}
    for path in sorted(root.rglob("*.py")):
        module = ".".join(("helpers", *path.relative_to(root).with_suffix("").parts))
        module = module.removesuffix(".__init__")
        try:
            code = _compile(path.read_text(), str(path))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for name, function in _functions(code, module):
            print_ = fingerprint(function)
            if len(print_[0]) >= _MIN_INSTRUCTIONS:
                table.setdefault(print_, name)
    return table


def _back_doors(tree: ast.AST) -> list[str]:
    used = []
    for node in ast.walk(tree):
        name = (node.attr if isinstance(node, ast.Attribute)
                else node.id if isinstance(node, ast.Name) else None)
        if name == "modules" and not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                                      and node.value.id == "sys"):
            continue
        if name in _BACK_DOORS and _BACK_DOORS[name] not in used:
            used.append(_BACK_DOORS[name])
    return used


def flags(answers: dict[str, str], package_dir: str) -> list[str]:
    """One review note per answer cell that copies, or reaches for, helper code."""
    table = helper_fingerprints(package_dir)
    notes = []
    for gid, source in answers.items():
        try:
            tree = syntax.parse(source)
            code = _compile(source, f"<answer {gid}>")
        except (SyntaxError, ValueError):
            continue
        copied = sorted({table[fingerprint(f)] for _, f in _functions(code, "answer")
                         if fingerprint(f) in table})
        if copied:
            notes.append(f"answer {gid} copies {', '.join(copied)} — review")
        doors = _back_doors(tree)
        if doors:
            notes.append(f"answer {gid} uses {', '.join(doors)}, which can copy helper code — review")
    return notes

"""The exercise's helpers, absent from the graded kernel: a helpers copy with stubs in their place.

``checks.blocked`` switches a helper off inside a running kernel; code in the same process, a
subprocess (``python -c "import helpers..."``), a re-import or a reading of the package's files
can route around such a switch. So while a submission is graded, the kernel imports helpers
from a copy in which every function an exercise blocks — and every private function that only
those functions use — has lost its body: calling it reports the call to the instructor and
raises "helpers.X.f is exercise N: write it yourself". The source of the real function is not
in the copy, so no route finds it.

The reference run keeps the real helpers (its ``expect=`` side calls them) and records every
call that a trusted cell — a teaching cell, a visible check, a hidden test building its cases —
makes to a stubbed function. In the graded kernel such a call is served that recorded result by
the notebook client, and only in the cell that recorded it (:mod:`trainperf.grading.replay`);
any other call of a stub fails and is reported.
"""

from __future__ import annotations

import ast
import copy
import importlib
import re
import shutil
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from functools import lru_cache, reduce
from pathlib import Path
from typing import Any

from ..course import CourseError
from .hidden import split_hidden

_EXERCISE = re.compile(r"^ex(\d+)")


@dataclass
class Stubs:
    """What a chapter's graded kernel must not have: ``{module file: {qualname: label}}``."""

    by_file: dict[str, dict[str, str]] = field(default_factory=dict)

    def names(self) -> list[str]:
        return sorted(self.exercises())

    def exercises(self) -> dict[str, str]:
        """``helpers.module.function`` -> ``"exercise N"`` for every function that gets a stub
        (declared; the private pieces are found when the copy is made)."""
        return {
            label.split(" is ")[0]: label.split(" is ")[1]
            for labels in self.by_file.values()
            for label in labels.values()
        }


def _source(cell: dict[str, Any]) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def blocked_calls(solution: dict[str, Any]) -> list[tuple[int, str, list[str]]]:
    """``(exercise number, module expression, names)`` of every ``checks.blocked(...)`` in the
    hidden tests of ``solution``."""
    found = []
    for cell in solution["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if not meta.get("grade"):
            continue
        match = _EXERCISE.match(meta.get("grade_id", ""))
        number = int(match.group(1)) if match else 0
        _, hidden = split_hidden(_source(cell))
        for node in ast.walk(ast.parse(hidden)):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute | ast.Name)
                and ast.unparse(node.func).split(".")[-1] == "blocked"
                and node.args
            ):
                names = [
                    a.value for a in node.args[1:] if isinstance(a, ast.Constant) and isinstance(a.value, str)
                ]
                found.append((number, ast.unparse(node.args[0]), names))
    return found


def _namespace(imports: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(compile(imports, "<helper imports>", "exec"), namespace)  # trusted: the solution's lines
    return namespace


def _is_library(root: str, namespace: dict[str, Any]) -> bool:
    """``root`` names an installed package other than the helpers, which the solution's
    helper imports do not bind (``torch`` in ``checks.blocked(torch, "compile")``)."""
    import importlib.util

    return root not in namespace and root != "helpers" and importlib.util.find_spec(root) is not None


def resolve(solution: dict[str, Any], imports: str, package_dir: Path) -> Stubs:
    """Where each blocked function is defined (file relative to the package, qualified name).

    The module expression of a ``blocked`` call (``timeline``, ``mfu._counting``,
    ``memory.Ledger``) is looked up among the names the teaching cells import from helpers.
    """
    namespace = _namespace(imports)
    stubs = Stubs()
    for number, expression, names in blocked_calls(solution):
        if _is_library(expression.split(".")[0], namespace):
            continue  # a library's means of measuring (torch.compile): switched off in-process only
        root, *attrs = expression.split(".")
        if not all(part.isidentifier() for part in (root, *attrs)):
            raise CourseError(
                f"exercise {number} blocks {expression}: name a module or class by its "
                "dotted name (helpers.X or X.Y)"
            )
        try:
            owner = reduce(getattr, attrs, namespace[root])
        except (KeyError, AttributeError) as exc:  # an authoring error, said in one line
            raise CourseError(
                f"exercise {number} blocks {expression}, which the teaching cells do not "
                f"import ({type(exc).__name__}); import it from helpers"
            ) from None
        label = getattr(owner, "__name__", expression)
        for name in names:
            fn = getattr(owner, name, None)
            if fn is None or getattr(fn, "__code__", None) is None:
                raise CourseError(
                    f"exercise {number} blocks {label}.{name}, which is not a plain "
                    "function of helpers; block the function itself"
                )
            if fn.__module__.split(".")[0] != "helpers":
                continue  # a library function the helpers import: switched off in-process only
            module = importlib.import_module(fn.__module__)
            assert module.__file__ is not None  # a module of helpers: a file in package_dir
            path = Path(module.__file__).resolve().relative_to(package_dir)
            stubs.by_file.setdefault(str(path), {}).setdefault(
                fn.__qualname__, f"{label}.{name} is exercise {number}"
            )
    return stubs


def _defs(tree: ast.Module) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    """Every function of a module by qualified name (``f``, ``Class.method``)."""
    out: dict[str, Any] = {}

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                out[prefix + node.name] = node
            elif isinstance(node, ast.ClassDef):
                visit(node.body, f"{prefix}{node.name}.")

    visit(tree.body, "")
    return out


def _names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _only_theirs(tree: ast.Module, stubbed: set[str], imported_elsewhere: set[str]) -> set[str]:
    """Private module-level functions that no code of the module but the stubbed functions uses
    (transitively), and that no other module imports: the pieces that implement the exercise."""
    private = {
        n.name: n
        for n in tree.body
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name.startswith("_")
    }
    roots: list[ast.AST] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if node.name not in private and node.name not in stubbed:
                roots.append(node)
        elif isinstance(node, ast.ClassDef):
            roots += [
                m
                for m in node.body
                if not (
                    isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef)
                    and f"{node.name}.{m.name}" in stubbed
                )
            ]
        else:
            roots.append(node)
    todo = [name for root in roots for name in _names_in(root) if name in private]
    todo += [name for name in imported_elsewhere if name in private]
    live: set[str] = set()
    while todo:
        name = todo.pop()
        if name in live:
            continue
        live.add(name)
        if name not in stubbed:  # a stubbed private keeps nothing alive
            todo += [n for n in _names_in(private[name]) if n in private]
    return set(private) - live - stubbed


# the kernel-side grading machinery (also re-exported by helpers.checks)
_GRADING = "__import__('helpers._grading', fromlist=['_'])"


def _stub_source(node: ast.FunctionDef | ast.AsyncFunctionDef, label: str) -> list[str]:
    """``node``'s parameters (defaults kept, annotations dropped) with a body that replays a
    trusted call or raises. The call is looked up by its parameters' values, so a learner's
    ``estimate(config, b, s, plan=p)`` finds what the reference's ``estimate(config, b, s, p)``
    got (the reference records through ``inspect.signature(...).bind`` the same way)."""
    name, _, exercise = label.partition(" is exercise ")
    pad = " " * node.col_offset
    params = copy.deepcopy(node.args)
    for arg in [*params.posonlyargs, *params.args, *params.kwonlyargs, params.vararg, params.kwarg]:
        if arg is not None:
            arg.annotation = None
    call = f"{_GRADING}.removed_for_grading({name!r}, {int(exercise or 0)}, (), dict(locals()))"
    return [f"{pad}def {node.name}({ast.unparse(params)}):", f"{pad}    return {call}"]


def stub_module(
    text: str, qualnames: dict[str, str], imported_elsewhere: AbstractSet[str], module: str = "helpers"
) -> str:
    """``text`` (a module's source) with the named functions and the private functions only
    they use replaced by stubs. Everything else keeps its lines."""
    tree = ast.parse(text)
    defs = _defs(tree)
    missing = sorted(set(qualnames) - set(defs))
    if missing:
        raise ValueError(f"not defined in this module: {', '.join(missing)}")
    targets = dict(qualnames)
    exercise = min(int(label.rpartition(" is exercise ")[2]) for label in qualnames.values())
    for private in _only_theirs(tree, set(qualnames), set(imported_elsewhere)):
        targets[private] = f"{module}.{private} is exercise {exercise}"
    lines = text.splitlines()
    for qualname in sorted(targets, key=lambda q: -defs[q].lineno):  # bottom up: lines stay put
        node = defs[qualname]
        lines[node.lineno - 1 : node.end_lineno] = _stub_source(node, targets[qualname])
    return "\n".join(lines) + "\n"


def recording_module(text: str, qualnames: dict[str, str]) -> str:
    """``text`` with each named function wrapped so that the reference run records what its
    trusted cells got from it (see ``helpers._grading.removed_for_grading``)."""
    lines = [text.rstrip("\n"), "", "# trainperf grade, reference run: record trusted calls"]
    for qualname, label in sorted(qualnames.items()):
        name = label.partition(" is exercise ")[0]
        lines.append(f"{qualname} = {_GRADING}.recorded_for_grading({name!r}, {qualname})")
    return "\n".join(lines) + "\n"


def _statements(tree: ast.AST):
    """Every statement of a module, nested ones included (an import is a statement: walking
    every expression too, as ``ast.walk`` does, costs seconds over the whole package)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for name in ("body", "orelse", "finalbody", "handlers", "cases"):
            children = getattr(node, name, None)
            if isinstance(children, list):
                stack.extend(children)


@lru_cache(maxsize=4)
def _imported_names(package_dir: Path) -> dict[str, frozenset[str]]:
    """Per module file, the private names other modules of the package import from it."""
    out: dict[str, set[str]] = {}
    for path in package_dir.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in _statements(tree):
            if isinstance(node, ast.ImportFrom) and node.level and node.module:
                base = path.parent
                for _ in range(node.level - 1):
                    base = base.parent
                target = base.joinpath(*node.module.split("."))
                for candidate in (target.with_suffix(".py"), target / "__init__.py"):
                    rel = str(candidate.relative_to(package_dir)) if candidate.is_file() else None
                    if rel:
                        out.setdefault(rel, set()).update(
                            a.name for a in node.names if a.name.startswith("_")
                        )
    return {rel: frozenset(names) for rel, names in out.items()}


def install_stubbed_copy(site: Path, folder: Path, stubs: Stubs, recording: bool = False) -> Path:
    """A copy of ``site`` (which holds ``helpers/``) under ``folder`` with ``stubs`` applied,
    read-only: the graded kernel's helpers, or with ``recording`` the reference run's (the
    real functions, wrapped to record). Unchanged files are hard links to ``site``'s."""
    source, target = site / "helpers", folder / "helpers"
    if folder.exists():
        shutil.rmtree(folder)
    shutil.copytree(source, target, copy_function=_link_or_copy)
    imported = _imported_names(source)
    for rel, qualnames in stubs.by_file.items():
        path = target / rel
        text = (source / rel).read_text(encoding="utf-8")
        path.unlink()  # a hard link: writing through it would change the other copies
        module = "helpers." + rel.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        path.write_text(
            recording_module(text, qualnames)
            if recording
            else stub_module(text, qualnames, imported.get(rel, set()), module),
            encoding="utf-8",
        )
    for path in [folder, *folder.rglob("*")]:
        path.chmod(0o555 if path.is_dir() else 0o444)
    return folder


def _link_or_copy(src: str, dst: str) -> None:
    try:
        Path(dst).hardlink_to(src)
    except OSError:
        shutil.copy2(src, dst)

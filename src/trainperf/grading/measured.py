"""Hidden checks that measure the answer's behaviour, run before any of the learner's code runs.

Most hidden checks call the learner's function on fixed inputs and record what it returns. A
few *measure* what the function does with a course helper or a PyTorch tool in the learner's
kernel: the host read-backs of a logging loop (``bench.count_host_syncs``), the ranges of a
profiler trace (``nvtx.record_cpu_trace``), the steps a profiler schedule records, the graphs
dynamo captures. A cell the learner ran earlier could replace those tools with fakes whose
result matches the facts of the exercise.

So a test cell whose hidden part carries :data:`MARKER` is graded in a **measuring phase** at
the start of the kernel, right after the parameters and set-up cells, before any learner cell
runs as written. That phase holds, in notebook order, every code cell up to the test reduced to
its definitions (:func:`definitions_only`): imports, functions, classes and constant values,
nothing that calls code. The learner's functions exist, but none of their code has run, so the
course helpers and PyTorch are as the course left them when the hidden part binds its
measuring functions. After that the notebook runs as usual, without those hidden parts.

What the learner's function does *while it is measured* can still rebind a tool: that needs
an assignment, ``setattr``, a module's ``__dict__`` or a back door in the answer's source, and
the copy check flags each of those for review (:mod:`trainperf.grading.copies`).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence

from .. import syntax

MARKER = "### MEASURED BEFORE ANY ANSWER RUNS"
_MARKER_LINE = re.compile(r"^[ \t]*### MEASURED BEFORE ANY ANSWER RUNS[ \t]*$", re.MULTILINE)
_MAGIC = re.compile(r"^([ \t]*)[%!].*$", re.MULTILINE)


def is_measured(test_source: str) -> bool:
    """Whether a test cell's hidden part is graded in the measuring phase."""
    return bool(_MARKER_LINE.search(test_source))


def _inert(node: ast.AST | None) -> bool:
    """An expression whose evaluation runs no code of the learner's: constants, names,
    attributes of names, and containers or arithmetic of those (no call, no subscript: a
    class's ``__class_getitem__`` is code), and lambdas whose defaults are inert."""
    if node is None:
        return True
    if isinstance(node, (ast.Constant, ast.Name)):
        return True
    if isinstance(node, ast.Attribute):
        return _inert(node.value)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return all(_inert(e) for e in node.elts)
    if isinstance(node, ast.Dict):
        return all(_inert(k) and _inert(v) for k, v in zip(node.keys, node.values, strict=True))
    if isinstance(node, ast.UnaryOp):
        return _inert(node.operand)
    if isinstance(node, ast.BinOp):
        return _inert(node.left) and _inert(node.right)
    if isinstance(node, ast.Lambda):
        return _inert_arguments(node.args)
    return False


def _inert_arguments(args: ast.arguments) -> bool:
    return all(_inert(d) for d in [*args.defaults, *args.kw_defaults])


def _root(node: ast.AST) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


# Decorators that wrap a function without calling it or registering it anywhere: a decorator
# such as ``@sys.settrace``, ``@gc.callbacks.append`` or a global module hook would make the
# learner's code run while trusted code runs, before any tool is bound. Others are dropped,
# with the definition they decorate.
SAFE_DECORATORS = frozenset(
    {
        "torch.no_grad",
        "torch.enable_grad",
        "torch.inference_mode",
        "torch.compile",
        "torch.autocast",
        "torch.amp.autocast",
        "torch.cpu.amp.autocast",
        "torch.cuda.amp.autocast",
        "torch.profiler.record_function",
        "torch.autograd.profiler.record_function",
        "helpers.nvtx.annotate",
        "functools.lru_cache",
        "functools.cache",
        "functools.cached_property",
        "dataclasses.dataclass",
        "contextlib.contextmanager",
        "typing.overload",
        "abc.abstractmethod",
        "builtins.staticmethod",
        "builtins.classmethod",
        "builtins.property",
    }
)
_BUILTIN_DECORATORS = {"staticmethod", "classmethod", "property"}


def _qualified(node: ast.AST, imported: dict[str, str]) -> str | None:
    """``module.attr`` of a name chain, through the cells' import aliases; None otherwise."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    if node.id in imported:
        head = imported[node.id]
    elif node.id in _BUILTIN_DECORATORS:
        head = f"builtins.{node.id}"
    else:
        return None
    return ".".join([head, *reversed(parts)])


def _safe_decorator(node: ast.AST, imported: dict[str, str]) -> bool:
    """One of :data:`SAFE_DECORATORS`, used bare or called with constants."""
    if isinstance(node, ast.Call):
        return (
            _safe_decorator(node.func, imported)
            and all(isinstance(a, ast.Constant) for a in node.args)
            and all(isinstance(k.value, ast.Constant) and k.arg for k in node.keywords)
        )
    return _qualified(node, imported) in SAFE_DECORATORS


def _strip_annotations(node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
    node.returns = None
    args = node.args
    for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
        if arg is not None:
            arg.annotation = None


def _imported_names(tree: ast.Module) -> dict[str, str]:
    """Local name -> what it imports (``import a.b`` binds ``a``; ``from x import y as z``
    binds ``z`` to ``x.y``); relative imports are left out."""
    names: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                local = alias.asname or alias.name.split(".")[0]
                names[local] = alias.name if alias.asname else local
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _bound_names(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
    return {n.id for t in targets if t is not None for n in ast.walk(t) if isinstance(n, ast.Name)}


def _keep_untrusted(node: ast.stmt, imported: dict[str, str]) -> bool:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return True
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        _strip_annotations(node)
        return all(_safe_decorator(d, imported) for d in node.decorator_list) and _inert_arguments(node.args)
    if isinstance(node, ast.ClassDef):
        if (
            node.keywords
            or not all(_inert(b) for b in node.bases)
            or not all(_safe_decorator(d, imported) for d in node.decorator_list)
        ):
            return False
        node.body = [s for s in node.body if _keep_untrusted(s, imported)] or [ast.Pass()]
        return True
    if isinstance(node, ast.Assign):  # never a dunder (``__name__ = "torch.x"``)
        return all(isinstance(t, ast.Name) and not t.id.startswith("__") for t in node.targets) and _inert(
            node.value
        )
    if isinstance(node, ast.AnnAssign):
        node.annotation = ast.Constant(None)
        return (
            isinstance(node.target, ast.Name)
            and not node.target.id.startswith("__")
            and node.value is not None
            and _inert(node.value)
        )
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)  # a docstring


def _keep_trusted(node: ast.stmt) -> bool:
    if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return True
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        value = node.value
        return value is not None and not any(isinstance(n, ast.Call) for n in ast.walk(value))
    return False


def definitions_only(source: str, trusted: bool, imported: dict[str, str] | None = None) -> str:
    """``source`` reduced to what defines names without running code.

    Kept: imports, function and class definitions, and assignments of values. For the
    learner's cells (``trusted=False``) a definition is kept only when defining it runs none of
    the learner's code: defaults and class bases are inert expressions (no call, no subscript),
    decorators are among :data:`SAFE_DECORATORS` (``@torch.no_grad()``, ``@annotate("forward")``;
    ``imported`` maps each name the learner's cells import and never redefine to what it
    imports, by default this cell's own), annotations are dropped. A cell that does not parse
    becomes empty: what it defines is then missing, and the measured check fails with it."""
    try:
        tree = syntax.parse(_MAGIC.sub(r"\1pass", source))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ""
    if not isinstance(tree, ast.Module):
        return ""
    if trusted:
        kept = [node for node in tree.body if _keep_trusted(node)]
    else:
        # the caller's map covers every cell (without names the learner redefines anywhere)
        if imported is None:
            imported = learner_imports([source])
        kept = [node for node in tree.body if _keep_untrusted(node, imported)]
    if not kept:
        return ""
    return ast.unparse(ast.fix_missing_locations(ast.Module(body=kept, type_ignores=[]))) + "\n"


def _modules(sources: list[str]) -> list[ast.Module]:
    """The cells that parse (magic lines read as ``pass``)."""
    trees = []
    for source in sources:
        try:
            tree = syntax.parse(_MAGIC.sub(r"\1pass", source))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        trees.append(tree)
    return trees


def learner_imports(learner: list[str], trusted: Sequence[str] = ()) -> dict[str, str]:
    """What each name the cells import stands for (the learner's imports last); a name the
    learner's cells bind with ``def``, ``class`` or ``=`` stands for the learner's own code, so
    it is never taken for a library decorator or a builtin."""
    names = imported_by([*trusted, *learner])
    names.update(dict.fromkeys(defined_by(learner), "<learner>"))
    return names


def imported_by(sources: list[str]) -> dict[str, str]:
    """Local name -> what it imports, over the given cells (the roots of a decorator)."""
    names: dict[str, str] = {}
    for tree in _modules(sources):
        names.update(_imported_names(tree))
    return names


_BINDING = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign, ast.AugAssign)


def defined_by(sources: list[str]) -> set[str]:
    """Names the given cells bind at their top level with ``def``, ``class`` or ``=``."""
    return {
        name
        for tree in _modules(sources)
        for node in tree.body
        if isinstance(node, _BINDING)
        for name in _bound_names(node)
    }

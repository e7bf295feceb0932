"""No import circles inside ``helpers`` and ``trainperf``.

Every module under ``src/helpers`` and ``src/trainperf`` is parsed with :mod:`ast` (nothing is
imported), and each of its imports — at module level and inside functions alike, relative ones
resolved — becomes an edge to the module it loads. A circle between modules is a design smell
whether or not it breaks at import time today: a lazy import inside a function only hides it.

What counts as an edge from module ``M``:

* ``import a.b.c``: ``a.b.c``, and the ancestor packages Python runs first (``a``, ``a.b``) except
  those ``M`` itself lives in: they are already being imported when ``M`` runs.
* ``from a.b import c``: ``a.b.c`` when it is a submodule, else ``a.b`` (its ``__init__``, where
  ``c`` is defined), with the same ancestors.
* A child importing its own package's facade (``from .. import timeline`` inside
  ``helpers.timeline._bench``) gets an edge to that ``__init__`` too: when the facade imports the
  child, the child needs the facade's names while the facade needs the child — a real circle,
  which works at module level only by luck of ordering and is merely hidden inside a function.
* ``importlib.import_module(...)`` whose argument can be computed here: constant strings and
  f-strings of constants, ``__name__`` and subscripts of a module-level dict literal.
* A lazy package facade (PEP 562: a module-level ``__getattr__`` in ``__init__``, as in
  ``helpers`` and ``trainperf.grading``) imports only when someone asks it for a name it does not
  bind itself, and only after its own body has run. So the imports inside ``__getattr__`` are
  not edges of the facade but of whoever asks: ``from pkg import NAME``, with ``NAME`` neither a
  submodule nor bound by ``pkg``'s body, gets an edge to ``pkg`` and to what ``__getattr__``
  loads for ``NAME`` (``_FACADE[name]`` looked up, ``f"{__name__}.{name}"`` filled in, and any
  other import there taken as possible). A child reading a constant the facade binds itself
  (``from .. import __version__``) thus needs only the facade's body, which imports nothing.
* Imports under ``if TYPE_CHECKING:`` never run and are skipped; code inside string templates
  (child-process scripts) is not code here.
"""

from __future__ import annotations

import ast
import sys
from itertools import pairwise
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGES = ("helpers", "trainperf")


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the packages."""
    found = {}
    for package in PACKAGES:
        for path in sorted((SRC / package).rglob("*.py")):
            parts = list(path.relative_to(SRC).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _bound(node: ast.stmt) -> list[str]:
    """The names a module-level statement binds."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in node.names]
    targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
    return [n.id for t in targets if t is not None for n in ast.walk(t) if isinstance(n, ast.Name)]


class _Imports(ast.NodeVisitor):
    """The dotted names one module imports, with the line of each."""

    def __init__(self, module: str, is_package: bool, modules: dict[str, Path], tree: ast.Module):
        self.module = module
        self.package = module if is_package else module.rpartition(".")[0]
        self.modules = modules
        self.found: list[tuple[str, int]] = []
        self.lazy: list[tuple[str, str, int]] = []  # (facade, name, line): ``from facade import name``
        # module-level ``NAME = {...}`` dict literals, for import_module(f".{NAME[key]}", ...)
        self.tables: dict[str, dict[str, str]] = {}
        for node in tree.body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Dict):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                table = {
                    k.value: v.value
                    for k, v in zip(node.value.keys, node.value.values, strict=True)
                    if isinstance(k, ast.Constant)
                    and isinstance(v, ast.Constant)
                    and isinstance(v.value, str)
                }
                for target in targets:
                    if isinstance(target, ast.Name) and len(table) == len(node.value.values):
                        self.tables[target.id] = table
        # what a PEP 562 facade binds itself, and its __getattr__ (visited per name asked for)
        self.bound = {name for node in tree.body for name in _bound(node)}
        self.getattr = next(
            (
                node
                for node in tree.body
                if is_package and isinstance(node, ast.FunctionDef) and node.name == "__getattr__"
            ),
            None,
        )
        self.asked: str | None = None  # the name __getattr__ is being asked for

    def _resolve(self, level: int, name: str | None) -> str:
        if not level:
            return name or ""
        base = self.package.split(".")
        if level > 1:
            base = base[: len(base) - (level - 1)]
        return ".".join([*base, name] if name else base)

    def _add(self, target: str, line: int, explicit_facade: bool = False) -> None:
        """``target`` and the ancestors Python runs first that ``self.module`` is not inside."""
        mine = set(_ancestors(self.module))
        for ancestor in _ancestors(target):
            if ancestor not in mine:
                self.found.append((ancestor, line))
        if target not in mine or explicit_facade:
            self.found.append((target, line))

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        if (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
            isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
        ):
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if node is self.getattr and self.asked is None:
            return  # its imports belong to whoever asks the facade for a name (lazy_targets)
        self.generic_visit(node)

    def lazy_targets(self, name: str) -> list[tuple[str, int]]:
        """What ``__getattr__`` may import when this facade is asked for ``name``."""
        if self.getattr is None:
            return []
        saved, self.found, self.asked = (self.found, self.lazy), [], name
        self.lazy = []  # a name the facade's own __getattr__ takes from yet another facade: not followed
        try:
            self.visit(self.getattr)
            return self.found
        finally:
            (self.found, self.lazy), self.asked = saved, None

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name, node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = self._resolve(node.level, node.module)
        names_modules = [f"{base}.{a.name}" in self.modules for a in node.names]
        if not all(names_modules):  # some name comes from ``base``'s own namespace
            self._add(base, node.lineno, explicit_facade=True)
        else:
            self._add(base, node.lineno)
        for alias, is_module in zip(node.names, names_modules, strict=True):
            if is_module:
                self._add(f"{base}.{alias.name}", node.lineno, explicit_facade=True)
            else:
                self.lazy.append((base, alias.name, node.lineno))

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name == "import_module" and node.args:
            package = None
            if len(node.args) > 1:
                package = self._strings(node.args[1])
            for target in self._strings(node.args[0]) or []:
                if target.startswith("."):
                    if not package:
                        continue
                    level = len(target) - len(target.lstrip("."))
                    pkg = package[0].split(".")
                    target = ".".join([*pkg[: len(pkg) - (level - 1)], target.lstrip(".")])
                self._add(target, node.lineno, explicit_facade=True)
        self.generic_visit(node)

    def _parameter(self) -> str | None:
        args = self.getattr.args.args if self.getattr is not None else []
        return args[0].arg if args else None

    def _strings(self, node: ast.expr) -> list[str] | None:
        """Every value ``node`` can take, when that can be told without running it."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, ast.Name) and node.id == "__name__":
            return [self.module]
        if isinstance(node, ast.Name) and node.id == "__package__":
            return [self.package]
        if self.asked is not None and isinstance(node, ast.Name) and node.id == self._parameter():
            return [self.asked]
        if isinstance(node, ast.Subscript) and getattr(node.value, "id", None) in self.tables:
            table = self.tables[node.value.id]
            keys = self._strings(node.slice)
            if keys is None:
                return list(table.values())
            return [table[k] for k in keys if k in table]
        if isinstance(node, ast.FormattedValue) and node.format_spec is None:
            return self._strings(node.value)
        if isinstance(node, ast.JoinedStr):
            values = [""]
            for part in node.values:
                options = self._strings(part)
                if options is None:
                    return None
                values = [v + o for v in values for o in options]
            return values
        return None


def import_graph() -> dict[str, dict[str, int]]:
    """Module -> {imported module of the packages: first line that imports it}."""
    modules = _modules()
    visitors = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        visitors[name] = _Imports(name, _is_package(path), modules, tree)
        visitors[name].visit(tree)
    graph: dict[str, dict[str, int]] = {}
    for name, visitor in visitors.items():
        found = list(visitor.found)
        for facade, asked, line in visitor.lazy:  # names a lazy facade's __getattr__ serves
            owner = visitors.get(facade)
            if owner is not None and asked not in owner.bound:
                found += [(target, line) for target, _ in owner.lazy_targets(asked)]
        edges = graph.setdefault(name, {})
        for target, line in found:
            if target in modules and target != name:
                edges.setdefault(target, line)
    return graph


def find_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One circle per strongly connected component with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def strongconnect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, {})):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)

    cycles = []
    for component in components:
        members = set(component)
        start = min(component)
        # shortest path from start back to start inside the component (breadth first)
        previous: dict[str, str] = {}
        frontier = [start]
        while frontier and start not in previous:
            following = []
            for v in frontier:
                for w in sorted(graph[v]):
                    if w in members and w not in previous:
                        previous[w] = v
                        following.append(w)
            frontier = following
        path = [start]
        node = previous[start]
        while node != start:
            path.append(node)
            node = previous[node]
        path.append(start)
        cycles.append(path[::-1])
    return cycles


def _describe(graph: dict[str, dict[str, int]], cycle: list[str]) -> str:
    steps = [f"{a} (line {graph[a][b]})" for a, b in pairwise(cycle)]
    return " -> ".join([*steps, cycle[-1]])


def test_the_graph_sees_the_packages():
    graph = import_graph()
    assert "helpers.precision._training" in graph and "trainperf.cli" in graph
    # relative, function-level and import_module imports are all edges
    assert "helpers._validate" in graph["helpers.precision._formats"]
    assert "trainperf.grading.parts" in graph["trainperf.cli"]  # inside main()
    # a lazy facade's __getattr__ is not an edge of the facade itself
    assert "helpers.env" not in graph["helpers"]
    assert "trainperf.grading.grade" not in graph["trainperf.grading"]


def test_a_facade_name_is_an_edge_of_whoever_asks(tmp_path, monkeypatch):
    pkg = tmp_path / "helpers"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "import importlib\n__version__ = '1'\n_FACADE = {'setup': 'env', 'run': 'runner'}\n"
        "def __getattr__(name):\n"
        "    return getattr(importlib.import_module(f'.{_FACADE[name]}', __name__), name)\n"
    )
    (pkg / "env.py").write_text("from . import __version__\nfrom . import run\ndef setup(): pass\n")
    (pkg / "runner.py").write_text("def run(): pass\n")
    (pkg / "cell.py").write_text("def f():\n    from helpers import setup\n")
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGES", ("helpers",))
    graph = import_graph()
    assert graph["helpers"] == {}
    assert graph["helpers.env"] == {"helpers": 1, "helpers.runner": 2}  # __version__: the body only
    assert graph["helpers.cell"] == {"helpers": 2, "helpers.env": 2}


def test_a_circle_is_found():
    graph = {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3}, "d": {"a": 4}}
    assert find_cycles(graph) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b": 1}, "b": {}}) == []


def test_no_import_circles():
    graph = import_graph()
    cycles = find_cycles(graph)
    assert not cycles, (
        "import circles (module (line of the import) -> ...); move what both sides need into a "
        "module that imports neither, not into an import inside a function:\n"
        + "\n".join(_describe(graph, c) for c in cycles)
    )

"""What a submission's code can do out of the copy check's sight: read in the grading process.

:func:`read` turns one cell into the Python the kernel runs: IPython's own input transformation
first (a magic or ``!cmd`` becomes a ``get_ipython()`` call), then the code carried in the string
of a magic that runs Python (``%time``, ``%%timeit``, ``%%capture``, ...), read the same way.
What runs code that cannot be read (``%run``, ``%%script``, a shell command, an unknown magic) is
a back door. :func:`analyse` reads every cell of a submission together (an alias made in one cell
is used in another) and says, per cell, which back doors it uses (``exec`` reached through
``getattr(builtins, ...)``, frames, ``__globals__``, ...), which helper or measuring attribute it
rebinds (``bench.count_host_syncs = f``, ``setattr``, ``mock.patch``) and what it hands to code
the check cannot follow (``setattr`` on an unknown object, a helper module as a value).
"""

from __future__ import annotations

import ast
import builtins
import fnmatch
import string
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import cast

from .. import syntax

_MAX_DEPTH = 6  # magics inside magics: past this the cell is reported unreadable

# magics whose argument is Python that IPython runs (after its options)
_CODE_LINE = {"time", "timeit", "prun", "debug"}
_CODE_CELL = {"time", "timeit", "prun", "debug", "capture"}
_NO_VAR_EXPAND = {"time", "timeit", "prun", "debug"}  # IPython does not expand {expr} in these
_OPTIONS_WITH_VALUE = {"timeit": "nrp", "prun": "DlsT", "debug": "b"}
_FILE_CELL = {"writefile", "file"}  # the body can be imported later: read when it is Python
_SHOW_CELL = {"html", "javascript", "js", "latex", "markdown", "svg"}
_HARMLESS_LINE = {
    "alias",
    "alias_magic",
    "autoawait",
    "autocall",
    "automagic",
    "bookmark",
    "cd",
    "colors",
    "dhist",
    "dirs",
    "doctest_mode",
    "env",
    "gui",
    "hist",
    "history",
    "killbgscripts",
    "load_ext",
    "logoff",
    "logon",
    "logstart",
    "logstate",
    "logstop",
    "lsmagic",
    "magic",
    "matplotlib",
    "notebook",
    "page",
    "pdb",
    "pdef",
    "pdoc",
    "pinfo",
    "popd",
    "pprint",
    "precision",
    "pushd",
    "pwd",
    "quickref",
    "rehashx",
    "reset",
    "reset_selective",
    "save",
    "set_env",
    "tb",
    "unalias",
    "unload_ext",
    "who",
    "who_ls",
    "whos",
    "xdel",
    "xmode",
    "config",
}
_SHELL_LINE = {"sx", "system", "sc"}
_PACKAGE_LINE = {"pip", "conda", "mamba", "micromamba", "uv"}
_ALIAS_LINE = {
    "cat",
    "cp",
    "ldir",
    "lf",
    "lk",
    "ll",
    "ls",
    "lx",
    "mkdir",
    "mv",
    "rm",
    "rmdir",
    "clear",
    "less",
    "man",
    "more",
}
_SHELL_CELL = {"bash", "sh", "sx", "system"}
# a shell command that runs no code of the learner's: one of these programs, no shell syntax
_SAFE_PROGRAMS = {
    "nvidia-smi",
    "ls",
    "pwd",
    "nproc",
    "free",
    "df",
    "du",
    "lscpu",
    "uname",
    "hostname",
    "date",
    "whoami",
    "echo",
    "cat",
    "head",
    "tail",
    "wc",
    "which",
    "mkdir",
    "cp",
    "mv",
    "rm",
    "rmdir",
    "clear",
    "less",
    "more",
    "man",
}
_SAFE_PACKAGE_ACTIONS = {"list", "show", "freeze", "--version", "-V", "info"}
_SHELL_SYNTAX = set(";|&$`<>(){}\n\\")

# qualified names (a module covers its attributes) that run or reach code the check cannot read
_DANGER = {
    "builtins": "the builtins module",
    "__builtin__.exec": "exec",
    "__builtin__.eval": "eval",
    "__builtin__.compile": "compile",
    "__builtin__.__import__": "__import__",
    "importlib.reload": "importlib.reload",
    "imp": "importlib.reload",
    "importlib.util.spec_from_file_location": "a module loaded from a file",
    "importlib.util.module_from_spec": "a module loaded from a file",
    "importlib.machinery": "a module loaded from a file",
    "types.FunctionType": "types.FunctionType",
    "types.LambdaType": "types.FunctionType",
    "types.CodeType": "types.CodeType",
    "marshal": "marshal",
    "pickle.load": "pickle.loads",
    "pickle.loads": "pickle.loads",
    "pickle.Unpickler": "pickle.loads",
    "_pickle": "pickle.loads",
    "dill": "pickle.loads",
    "cloudpickle": "pickle.loads",
    "shelve": "pickle.loads",
    "joblib.load": "pickle.loads",
    "pandas.read_pickle": "pickle.loads",
    "gc.get_objects": "gc.get_objects",
    "gc.get_referrers": "gc.get_referrers",
    "gc.get_referents": "gc.get_referrers",
    "sys._getframe": "sys._getframe",
    "sys._current_frames": "sys._getframe",
    "sys.modules": "sys.modules",
    "inspect.currentframe": "inspect.currentframe",
    "inspect.stack": "inspect.stack",
    "inspect.trace": "inspect.stack",
    "inspect.getouterframes": "inspect.stack",
    "inspect.getinnerframes": "inspect.stack",
    "inspect.getsource": "inspect.getsource",
    "inspect.getsourcelines": "inspect.getsource",
    "ctypes": "ctypes",
    "_ctypes": "ctypes",
    "cffi": "ctypes",
    "runpy": "runpy",
    "code": "the code module",
    "codeop": "the code module",
    "subprocess": "a subprocess",
    "os.system": "a subprocess",
    "os.popen": "a subprocess",
    "os.exec*": "a subprocess",
    "os.spawn*": "a subprocess",
    "os.posix_spawn*": "a subprocess",
    "pty": "a subprocess",
    "IPython.get_ipython": "get_ipython",
    "IPython.core.getipython": "get_ipython",
    "IPython.core.interactiveshell": "InteractiveShell",
    "ipykernel": "ipykernel",
    "torch.utils.cpp_extension": "torch.utils.cpp_extension",
    "__builtin__.globals": "globals()",
    "__builtin__.vars": "vars()",
}
# attribute names that are a back door on whatever object they are read from
_ATTRS = {
    "reload": "importlib.reload",
    "__code__": "a function's __code__",
    "FunctionType": "types.FunctionType",
    "CodeType": "types.CodeType",
    "getsource": "inspect.getsource",
    "getsourcelines": "inspect.getsource",
    "run_path": "runpy",
    "run_module": "runpy",
    "spec_from_file_location": "a module loaded from a file",
    "SourceFileLoader": "a module loaded from a file",
    "module_from_spec": "a module loaded from a file",
    "modules": "sys.modules",
    "__globals__": "a function's __globals__",
    "__subclasses__": "__subclasses__",
    "__builtins__": "__builtins__",
    "__import__": "__import__",
    "__self__": "__self__",
    "__reduce__": "__reduce__",
    "__reduce_ex__": "__reduce__",
    "__func__": "a method's __func__",
    "__wrapped__": "__wrapped__",
    "__loader__": "a module's __loader__",
    "_getframe": "sys._getframe",
    "_current_frames": "sys._getframe",
    "currentframe": "inspect.currentframe",
    "get_objects": "gc.get_objects",
    "get_referrers": "gc.get_referrers",
    "get_referents": "gc.get_referrers",
    "InteractiveShell": "InteractiveShell",
    # what a function captured or was given at definition: a measuring function bound before
    # any answer ran lives there
    "__closure__": "a function's __closure__",
    "cell_contents": "a function's __closure__",
    "__defaults__": "a function's __defaults__",
    "__kwdefaults__": "a function's __defaults__",
    **{
        name: f"a frame's {name}"
        for name in (
            "f_globals",
            "f_locals",
            "f_back",
            "f_builtins",
            "tb_frame",
            "gi_frame",
            "cr_frame",
            "ag_frame",
        )
    },
}
_GETATTR = {"__builtin__.getattr", "__builtin__.object.__getattribute__", "__builtin__.type.__getattribute__"}
_SETATTR = {
    "functools.update_wrapper",  # copies attributes (``__code__`` too) onto its first argument
    "functools.wraps",
    "__builtin__.setattr",
    "__builtin__.delattr",
    "__builtin__.object.__setattr__",
    "__builtin__.object.__delattr__",
    "__builtin__.type.__setattr__",
    "__builtin__.type.__delattr__",
}
_PATCH = {"unittest.mock.patch", "mock.patch"}
_CODE_STRINGS = {
    "timeit.timeit",
    "timeit.repeat",
    "timeit.Timer",
    "cProfile.run",
    "cProfile.runctx",
    "profile.run",
    "profile.runctx",
    "pdb.run",
    "pdb.runeval",
    "pdb.runctx",
}
# what a helper module may be handed to: looking at it is not rebinding it
_LOOKS = {
    f"__builtin__.{n}"
    for n in (
        "help",
        "dir",
        "print",
        "repr",
        "str",
        "type",
        "id",
        "isinstance",
        "issubclass",
        "hasattr",
        "callable",
        "getattr",
    )
}
_LOOKS |= {"importlib.reload", "IPython.display.display", "display"}
_OWNED_FACTORIES = {
    "types.SimpleNamespace",
    "argparse.Namespace",
    "__builtin__.object",
    "__builtin__.dict",
    "__builtin__.list",
    "__builtin__.set",
}
_WATCHED_MODULES = {
    "torch",
    "torch.profiler",
    "torch.autograd",
    "torch.autograd.profiler",
    "torch._dynamo",
    "torch.utils",
    "torch.utils._python_dispatch",
    "torch.overrides",
    "torch._C",
    "torch.cuda",
    "torch.nn",
    "time",
}


def watched(name: str) -> bool:
    """Whether rebinding ``name`` can change a helper or what the measuring helpers see: the
    helpers, torch (its documented ``torch.backends`` switches aside) and the clocks."""
    root = name.split(".")[0]
    if root in ("helpers", "time"):
        return True
    return root == "torch" and "." in name and not name.startswith("torch.backends")


@dataclass
class Cell:
    """One cell as the kernel runs it: its Python pieces (the transformed cell, then code that
    its magics run), the back doors its magics open, and why it could not be read ('' if it
    could)."""

    pieces: list[tuple[str, ast.Module]] = field(default_factory=list)
    doors: list[str] = field(default_factory=list)
    problem: str = ""
    canonical: set[int] = field(default_factory=set)  # ids of transformer-made get_ipython names


def _transform(source: str) -> str:
    try:  # IPython is imported here, so that importing the grader stays light
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:
        return source
    try:
        return TransformerManager().transform_cell(source)
    except Exception:  # noqa: BLE001 - IPython fails this cell as well: parse it as it is
        return source


def read(source: str) -> Cell:
    """The Python one cell runs, after IPython's transformation, with the code of its magics."""
    cell = Cell()
    _read_into(cell, source, 0)
    return cell


def _read_into(cell: Cell, source: str, depth: int, what: str = "") -> None:
    if depth > _MAX_DEPTH:
        cell.problem = cell.problem or "magics nested too deep"
        return
    text = _transform(source)
    try:
        tree = syntax.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as error:
        line = f"line {error.lineno}: " if isinstance(error, SyntaxError) and error.lineno else ""
        where = f" in {what}" if what else ""
        cell.problem = cell.problem or f"{line}{getattr(error, 'msg', None) or error}{where}"
        return
    cell.pieces.append((text, tree))
    for node in ast.walk(tree):
        call = _magic_call(node)
        if call is None:
            continue
        cell.canonical.add(id(cast(ast.Call, cast(ast.Attribute, cast(ast.Call, node).func).value).func))
        method, args = call
        for code, label in _magic(method, args, cell):
            _read_into(cell, code, depth + 1, label)


def _magic_call(node: ast.AST) -> tuple[str, list[str]] | None:
    """``get_ipython().run_line_magic('time', 'x = 1')`` as IPython writes it: (method, args)."""
    if not (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Call)
        and not node.func.value.args
        and isinstance(node.func.value.func, ast.Name)
        and node.func.value.func.id == "get_ipython"
        and not node.keywords
    ):
        return None
    count = {"run_line_magic": 2, "run_cell_magic": 3, "system": 1, "getoutput": 1}
    if len(node.args) != count.get(node.func.attr, -1) or not all(
        isinstance(a, ast.Constant) and isinstance(a.value, str) for a in node.args
    ):
        return None
    return node.func.attr, [
        a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
    ]


def _fields(text: str, cell: Cell) -> Iterator[tuple[str, str]]:
    """The Python expressions IPython evaluates in a magic's line (``{expr}``, ``$name``)."""
    try:
        from IPython.utils.text import DollarFormatter

        parsed = list(DollarFormatter().parse(text))
    except ImportError:
        parsed = list(string.Formatter().parse(text)) if "{" in text else []
    except ValueError:
        return  # IPython leaves a line it cannot format as it is: nothing is evaluated
    for _, name, spec, _ in parsed:
        if name is not None:
            yield f"({name}{':' + spec if spec else ''})\n", "a {expression} in a magic's line"


def _strip_options(line: str, valued: str) -> str:
    words = line.split()
    i = 0
    while i < len(words) and words[i].startswith("-") and len(words[i]) > 1:
        if len(words[i]) == 2 and words[i][1] in valued:
            i += 1
        i += 1
    return " ".join(words[i:])


def _code_variants(line: str, name: str) -> list[str]:
    """A code magic's statement: as written and without its options (both when they differ)."""
    stripped = _strip_options(line, _OPTIONS_WITH_VALUE.get(name, ""))
    variants = [v for v in dict.fromkeys((line, stripped)) if v.strip()]
    readable = []
    for variant in variants:
        try:
            syntax.parse(_transform(variant))
            readable.append(variant)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            pass
    return readable or variants[-1:]  # none parses: hand one on, so the cell is reported


def _harmless_shell(command: str) -> bool:
    words = command.split()
    if not words or _SHELL_SYNTAX & set(command.strip()):
        return not words
    if words[0] in _PACKAGE_LINE or words[0] in ("python", "python3"):
        return len(words) > 1 and words[1] in _SAFE_PACKAGE_ACTIONS
    return words[0] in _SAFE_PROGRAMS or (words[0] in ("env", "printenv") and len(words) == 1)


def _magic(method: str, args: list[str], cell: Cell) -> Iterator[tuple[str, str]]:
    """The Python code a magic call runs, with its label; its back doors go to ``cell.doors``."""

    def door(label: str) -> None:
        if label not in cell.doors:
            cell.doors.append(label)

    if method in ("system", "getoutput"):
        yield from _fields(args[0], cell)
        if not _harmless_shell(args[0]):
            door("a shell command")
        return
    name, line = args[0], args[1]
    body = args[2] if method == "run_cell_magic" else None
    if name not in _NO_VAR_EXPAND:
        yield from _fields(line, cell)
    if body is None:
        if name in _CODE_LINE:
            for code in _code_variants(line, name):
                yield code, f"%{name}"
        elif name == "config":
            if "=" in line:  # %config runs exec("cfg." + line) in the learner's namespace
                yield "cfg." + line + "\n", "%config"
        elif name in _SHELL_LINE or name in _ALIAS_LINE:
            if not _harmless_shell(line if name in _SHELL_LINE else f"{name} {line}"):
                door("a shell command")
        elif name in _PACKAGE_LINE:
            if not _harmless_shell(f"{name} {line}"):
                door(f"%{name}")
        elif name not in _HARMLESS_LINE:
            door(f"%{name}")
        return
    if name in _CODE_CELL:
        if name == "timeit":  # %%timeit's line is its setup statement
            for code in _code_variants(line, name):
                yield code, "%%timeit"
        yield body, f"%%{name}"
    elif name in _FILE_CELL:
        try:
            syntax.parse(_transform(body))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return  # not Python: data written to a file
        yield body, f"%%{name}"
    elif name in _SHELL_CELL:
        lines = [ln for ln in body.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
        if not all(_harmless_shell(ln) for ln in lines):
            door(f"%%{name}")
    elif name not in _SHOW_CELL:
        door(f"%%{name}")


# ---------------------------------------------------------------- scopes and aliases

_SCOPE_NODES = (
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.Lambda,
    ast.ClassDef,
    ast.ListComp,
    ast.SetComp,
    ast.DictComp,
    ast.GeneratorExp,
)


class _Scope:
    def __init__(self, kind: str, parent: _Scope | None, names: dict | None = None) -> None:
        self.kind, self.parent = kind, parent
        self.names: dict[str, list[tuple[str, object, _Scope]]] = {} if names is None else names
        self.globals: set[str] = set()
        self.self_name = ""  # the first parameter of a method: the learner's own object


_Comprehension = ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp


def _outer_parts(node: ast.AST) -> list[ast.AST]:
    """The parts of a scope node evaluated in the enclosing scope."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        a = node.args
        parts: list[ast.AST] = [*a.defaults, *(d for d in a.kw_defaults if d)]
        return parts + ([] if isinstance(node, ast.Lambda) else list(node.decorator_list))
    if isinstance(node, ast.ClassDef):
        return [*node.decorator_list, *node.bases, *node.keywords]
    return [cast(_Comprehension, node).generators[0].iter]  # a comprehension's first iterable


def _inner_parts(node: ast.AST) -> list[ast.AST]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return list(node.body)
    if isinstance(node, ast.Lambda):
        return [node.body]
    comp = cast(_Comprehension, node)
    elts: list[ast.AST] = [comp.key, comp.value] if isinstance(comp, ast.DictComp) else [comp.elt]
    gens = comp.generators
    return elts + [p for i, g in enumerate(gens) for p in ([g.target, *g.ifs] + ([g.iter] if i else []))]


def _own_nodes(parts: list[ast.AST]) -> Iterator[ast.AST]:
    """Every node of a scope, the scopes it holds as single nodes (not their insides)."""
    stack = list(parts)
    while stack:
        node = stack.pop()
        yield node
        stack.extend(_outer_parts(node) if isinstance(node, _SCOPE_NODES) else ast.iter_child_nodes(node))


class _Submission:
    """The scopes of all of a submission's cells: one module namespace, shared by the cells."""

    def __init__(self, helper_modules: set[str]) -> None:
        self.module = _Scope("module", None)
        self.scope_of: dict[int, _Scope] = {}
        self.parent: dict[int, ast.AST] = {}
        self.helper_modules = helper_modules
        self.tops = {m.split(".")[1] for m in helper_modules if m.count(".") == 1}
        self._memo: dict[tuple[int, str, bool], frozenset[str]] = {}
        self._busy: set[tuple[int, str, bool]] = set()

    def add(self, tree: ast.Module) -> None:
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                self.parent[id(child)] = node
        self._fill(self.module, list(tree.body))

    def _fill(self, scope: _Scope, parts: list[ast.AST]) -> None:
        nodes = list(_own_nodes(parts))
        for node in nodes:
            if isinstance(node, (ast.Global, ast.Nonlocal)):
                scope.globals.update(node.names if isinstance(node, ast.Global) else ())
        valued: set[int] = set()
        for node in nodes:
            self.scope_of[id(node)] = scope
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name) and node.value is not None:
                        self._bind(scope, target.id, ("expr", node.value))
                        valued.add(id(target))
            elif isinstance(node, (ast.For, ast.AsyncFor)) and isinstance(node.target, ast.Name):
                self._bind(scope, node.target.id, ("for", node.iter))
                valued.add(id(node.target))
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    if alias.name == "*":
                        continue
                    if isinstance(node, ast.Import):
                        bound = alias.asname or alias.name.split(".")[0]
                        qual = alias.name if alias.asname else bound
                    else:
                        bound, qual = alias.asname or alias.name, f"{node.module or ''}.{alias.name}"
                    self._bind(scope, bound, ("import", qual))
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self._bind(scope, node.name, ("class" if isinstance(node, ast.ClassDef) else "def", node))
            elif isinstance(node, ast.Name) and id(node) not in valued:
                if isinstance(node.ctx, ast.Store):
                    self._bind(scope, node.id, ("other", None))
                elif isinstance(node.ctx, ast.Del):
                    self._bind(scope, node.id, ("del", None))
            elif isinstance(node, ast.ExceptHandler) and node.name:
                self._bind(scope, node.name, ("other", None))
            elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
                self._bind(scope, node.name, ("other", None))
        for node in nodes:
            if isinstance(node, _SCOPE_NODES):
                kind = "class" if isinstance(node, ast.ClassDef) else "function"
                inner = _Scope(kind, scope)
                if not isinstance(node, (ast.ClassDef, *(_SCOPE_NODES[4:]))):
                    a = node.args
                    params = [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]
                    for p in params:
                        if p is not None:
                            self._bind(inner, p.arg, ("param", None))
                    first = (a.posonlyargs + a.args)[:1]
                    if first and scope.kind == "class":
                        inner.self_name = first[0].arg
                self._fill(inner, _inner_parts(node))
                self.scope_of[id(node)] = scope

    def _bind(self, scope: _Scope, name: str, binding: tuple[str, object]) -> None:
        target = self.module if name in scope.globals else scope
        target.names.setdefault(name, []).append((*binding, scope))

    def _home(self, scope: _Scope, name: str) -> _Scope:
        """The scope a name read in ``scope`` comes from (class bodies are not seen by methods)."""
        current: _Scope | None = scope
        first = True
        while current is not None:
            if name in current.globals:
                return self.module
            if name in current.names and (first or current.kind != "class"):
                return current
            current, first = current.parent, False
        return self.module

    def names(self, name: str, scope: _Scope, assume: bool = True) -> frozenset[str]:
        """What a name read in ``scope`` can be: qualified names of modules and imported things
        (``__builtin__.x`` for a builtin the learner has not rebound). A name the teaching cells
        import (``bench``) keeps that meaning even where the learner also binds it (the cells
        can run in any order), unless ``assume`` is false."""
        home = self._home(scope, name)
        key = (id(home), name, assume)
        if key in self._memo:
            return self._memo[key]
        if key in self._busy:
            return frozenset()
        self._busy.add(key)
        bindings = home.names.get(name, [])
        found: set[str] = set()
        for kind, value, where in bindings:
            if kind == "import" and isinstance(value, str):
                found.add(value)
            elif kind == "expr" and isinstance(value, ast.AST):
                found |= self.quals(value, where, assume)
        if home is self.module and (assume or not bindings):
            if name == "helpers" or name == "torch":
                found.add(name)
            elif name in self.tops:
                found.add(f"helpers.{name}")  # the teaching cells' ``from helpers import name``
        if home is self.module:
            if hasattr(builtins, name) and (not bindings or any(b[0] == "del" for b in bindings)):
                found.add(f"__builtin__.{name}")
        self._busy.discard(key)
        self._memo[key] = frozenset(found)
        return self._memo[key]

    def quals(self, node: ast.AST, scope: _Scope | None = None, assume: bool = True) -> frozenset[str]:
        """What an expression can be, as qualified names (empty: the learner's own value)."""
        scope = scope or self.scope_of.get(id(node), self.module)
        if isinstance(node, ast.Name):
            return self.names(node.id, scope, assume)
        if isinstance(node, ast.Attribute):
            return frozenset(f"{q}.{node.attr}" for q in self.quals(node.value, scope, assume))
        if isinstance(node, ast.NamedExpr):
            return self.quals(node.value, scope)
        if isinstance(node, ast.Call) and node.args:
            callee = self.quals(node.func, scope)
            first = _constant(node.args[0])
            if callee & {"__builtin__.__import__", "importlib.import_module"} and first:
                return frozenset({first if "importlib.import_module" in callee else first.split(".")[0]})
            name = _constant(node.args[1]) if len(node.args) > 1 else None
            if "__builtin__.getattr" in callee and name:
                return frozenset(f"{q}.{name}" for q in self.quals(node.args[0], scope))
        return frozenset()

    def owned(self, node: ast.AST, scope: _Scope) -> bool:
        """Whether an object is plainly the learner's own (``self``, a new instance of the
        learner's class or of ``SimpleNamespace``, a literal)."""
        while isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        if isinstance(node, (ast.Dict, ast.List, ast.Set, ast.Tuple)):
            return True
        if isinstance(node, ast.Call):
            callee = node.func
            if isinstance(callee, ast.Name) and any(
                b[0] == "class" for b in self._home(scope, callee.id).names.get(callee.id, [])
            ):
                return True
            return bool(self.quals(callee, scope) & _OWNED_FACTORIES)
        if not isinstance(node, ast.Name):
            return False
        current: _Scope | None = scope
        while current is not None:
            if node.id == current.self_name:
                return True
            current = current.parent
        home = self._home(scope, node.id)
        bindings = home.names.get(node.id, [])
        return bool(bindings) and all(
            kind == "expr" and isinstance(value, ast.AST) and self.owned(value, where)
            for kind, value, where in bindings
        )


def _constant(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _danger(qual: str) -> str | None:
    for key, label in _DANGER.items():
        if qual == key or qual.startswith(key + ".") or ("*" in key and fnmatch.fnmatchcase(qual, key)):
            return label
    return None


# ---------------------------------------------------------------- the checks


@dataclass
class Findings:
    """What one cell does out of the check's sight."""

    doors: list[str] = field(default_factory=list)  # back doors to code the check cannot read
    rebinds: list[str] = field(default_factory=list)  # helper or measuring attributes rebound
    unknown: list[str] = field(default_factory=list)  # rebinding the check cannot follow
    extra: list[str] = field(default_factory=list)  # code in strings (``timeit.timeit("...")``)


def analyse(cells: dict[str, Cell], helper_modules: set[str]) -> dict[str, Findings]:
    """The findings of every cell, read with the aliases of all the submission's cells."""
    sub = _Submission(helper_modules)
    for cell in cells.values():
        for _, tree in cell.pieces:
            sub.add(tree)
    out = {}
    for gid, cell in cells.items():
        found = Findings(doors=list(cell.doors))
        for _, tree in cell.pieces:
            _Checks(sub, cell, found).run(tree)
        done = 0
        while done < min(len(found.extra), 50):  # code in strings, read like the cell's own
            inner = read(found.extra[done])
            done += 1
            for label in inner.doors + (["code in a string that could not be read"] if inner.problem else []):
                if label not in found.doors:
                    found.doors.append(label)
            for _, tree in inner.pieces:
                sub.add(tree)
                _Checks(sub, inner, found).run(tree)
        out[gid] = found
    return out


class _Checks:
    def __init__(self, sub: _Submission, cell: Cell, found: Findings) -> None:
        self.sub, self.cell, self.found = sub, cell, found

    def _add(self, bucket: list[str], label: str) -> None:
        if label not in bucket:
            bucket.append(label)

    def run(self, tree: ast.AST) -> None:
        for node in ast.walk(tree):
            scope = self.sub.scope_of.get(id(node), self.sub.module)
            if isinstance(node, ast.Name):
                self._name(node, scope)
            elif isinstance(node, ast.Attribute):
                self._attribute(node, scope)
            elif isinstance(node, ast.Call):
                self._call(node, scope)
            elif isinstance(node, ast.Subscript):
                self._subscript(node, scope)
            elif (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and node.value.startswith("__")
                and (label := _ATTRS.get(node.value))
            ):
                # a dunder named in a string (``update_wrapper(f, g, assigned=("__code__",))``)
                self._add(self.found.doors, label)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    full = alias.name if isinstance(node, ast.Import) else f"{node.module or ''}.{alias.name}"
                    if label := _danger(full):
                        self._add(self.found.doors, label)
            if isinstance(node, ast.expr) and isinstance(getattr(node, "ctx", ast.Load()), ast.Load):
                self._escape(node, scope)

    def _name(self, node: ast.Name, scope: _Scope) -> None:
        if node.id == "__builtins__":
            self._add(self.found.doors, "__builtins__")
        if node.id == "get_ipython" and id(node) not in self.cell.canonical:
            parent = self.sub.parent.get(id(node))
            grand = self.sub.parent.get(id(parent)) if parent is not None else None
            method = grand.attr if isinstance(grand, ast.Attribute) else ""
            self._add(self.found.doors, f"get_ipython().{method}" if method else "get_ipython")
            return
        if not isinstance(node.ctx, ast.Load):
            return
        for qual in self.sub.names(node.id, scope):
            label = _danger(qual)
            parent = self.sub.parent.get(id(node))
            called = isinstance(parent, ast.Call) and parent.func is node
            if label == "__import__" and called:
                continue  # judged by its argument in _call
            if label:
                self._add(self.found.doors, label)

    def _attribute(self, node: ast.Attribute, scope: _Scope) -> None:
        parent = self.sub.parent.get(id(node))
        label = _ATTRS.get(node.attr)
        if node.attr == "modules" and isinstance(parent, ast.Call) and parent.func is node:
            label = None  # model.modules() is torch's module iterator, not sys.modules
        if label:
            self._add(self.found.doors, label)
        if isinstance(node.ctx, ast.Load):
            for qual in self.sub.quals(node, scope):
                if (label := _danger(qual)) and label != "__import__":
                    self._add(self.found.doors, label)
            if node.attr == "__dict__":
                self._dict_of(node.value, parent, node, scope)
            return
        for qual in self.sub.quals(node.value, scope):
            if watched(f"{qual}.{node.attr}"):
                self._add(self.found.rebinds, f"{qual}.{node.attr}")

    def _dict_of(self, owner: ast.AST, parent: ast.AST | None, node: ast.AST, scope: _Scope) -> None:
        """``module.__dict__`` / ``vars(module)`` of a watched module: only a plain read of one
        constant key is not a rebinding."""
        quals = [q for q in self.sub.quals(owner, scope) if watched(q + ".x")]
        if not quals:
            return
        key = None
        if isinstance(parent, ast.Subscript) and parent.value is node:
            key = _constant(parent.slice)
            if key is not None and isinstance(parent.ctx, ast.Load):
                return
        for qual in quals:
            self._add(self.found.rebinds, f"{qual}.{key}" if key else f"{qual}.__dict__")

    def _call(self, node: ast.Call, scope: _Scope) -> None:
        callee = self.sub.quals(node.func, scope)
        attr = node.func.attr if isinstance(node.func, ast.Attribute) else ""
        args = node.args
        if callee & {"__builtin__.__import__", "importlib.import_module"} or attr == "import_module":
            name = _constant(args[0]) if args else None
            if name is None:
                what = "__import__" if "__builtin__.__import__" in callee else "importlib.import_module"
                self._add(self.found.doors, f"{what} with a computed name")
            elif label := _danger(name):
                self._add(self.found.doors, label)
        if "__builtin__.vars" in callee and args:
            self._dict_of(args[0], self.sub.parent.get(id(node)), node, scope)
        if callee & _GETATTR:
            self._attribute_name(args[1] if len(args) > 1 else None, scope)
        elif "operator.attrgetter" in callee:
            for arg in args:
                self._attribute_name(arg, scope)
        elif attr == "__getattribute__":
            self._attribute_name(args[0] if args else None, scope)
        if callee & _SETATTR or attr in ("__setattr__", "__delattr__", "setattr", "delattr"):
            if (
                isinstance(node.func, ast.Attribute)
                and attr in ("__setattr__", "__delattr__")
                and not callee & _SETATTR
            ):
                self._rebinding(node.func.value, args[0] if args else None, scope, "setattr")
            elif args:
                self._rebinding(args[0], args[1] if len(args) > 1 else None, scope, "setattr")
        if callee & _PATCH and args:
            target = _constant(args[0])
            if target is None:
                self._add(self.found.unknown, "mock.patch of a computed target")
            elif watched(target):
                self._add(self.found.rebinds, target)
        if callee & {f"{p}.object" for p in _PATCH} and args:
            self._rebinding(args[0], args[1] if len(args) > 1 else None, scope, "mock.patch.object")
        if callee & {f"{p}.multiple" for p in _PATCH} and args:
            for keyword in node.keywords:
                self._rebinding(args[0], ast.Constant(keyword.arg or "?"), scope, "mock.patch.multiple")
        patched = _constant(args[0]) if args else None
        if callee & {f"{p}.dict" for p in _PATCH} and patched is not None and watched(patched):
            self._add(self.found.rebinds, patched)  # a module's __dict__ is caught as such
        if "torch.load" in callee and any(
            k.arg == "weights_only" and not (isinstance(k.value, ast.Constant) and k.value.value is True)
            for k in node.keywords
        ):
            self._add(self.found.doors, "pickle.loads")
        if "numpy.load" in callee and any(
            k.arg == "allow_pickle" and not (isinstance(k.value, ast.Constant) and k.value.value is False)
            for k in node.keywords
        ):
            self._add(self.found.doors, "pickle.loads")
        if callee & _CODE_STRINGS:
            name = sorted(callee & _CODE_STRINGS)[0]
            for arg in [
                *args[:2],
                *(
                    k.value
                    for k in node.keywords
                    if k.arg in ("stmt", "setup", "cmd", "statement", "expression")
                ),
            ]:
                if (code := _constant(arg)) is not None:
                    self.found.extra.append(code)
                elif not isinstance(arg, (ast.Lambda, ast.Name, ast.Attribute, ast.Call)):
                    self._add(self.found.doors, f"code in a string given to {name}")

    def _attribute_name(self, name: ast.AST | None, scope: _Scope) -> None:
        """``getattr(obj, name)``: a constant name is checked like ``obj.name``; a computed one
        can reach anything, unless it loops over constant names."""
        names = _constant_names(name, scope, self.sub) if name is not None else []
        if names is None:
            self._add(self.found.doors, "getattr with a computed name")
            return
        for text in names:
            for part in text.split("."):
                if label := _ATTRS.get(part):
                    self._add(self.found.doors, label)

    def _rebinding(self, target: ast.AST, name: ast.AST | None, scope: _Scope, how: str) -> None:
        if (text := _constant(target)) is not None:  # monkeypatch.setattr("helpers.bench.f", g)
            if watched(text):
                self._add(self.found.rebinds, text)
            return
        attr = _constant(name) if name is not None else None
        quals = self.sub.quals(target, scope)
        hit = [q for q in quals if watched(f"{q}.{attr or 'x'}")]
        for qual in hit:
            self._add(self.found.rebinds, f"{qual}.{attr}" if attr else f"{qual} (a computed name)")
        if not hit and not self.sub.owned(target, scope):
            self._add(self.found.unknown, f"{how} on {_short(target)}")

    def _subscript(self, node: ast.Subscript, scope: _Scope) -> None:
        key = _constant(node.slice)
        if key is not None and key.startswith("__") and (label := _ATTRS.get(key)):
            self._add(self.found.doors, label)  # globals()['__builtins__']
        holder = node.value
        namespace = isinstance(holder, ast.Call) and self.sub.quals(holder.func, scope) & {
            "__builtin__.globals",
            "__builtin__.locals",
            "__builtin__.vars",
        }
        if key is None and (namespace or (isinstance(holder, ast.Attribute) and holder.attr == "__dict__")):
            if not isinstance(node.slice, ast.Slice) and _constant_names(node.slice, scope, self.sub) is None:
                self._add(self.found.doors, "a namespace lookup with a computed key")

    def _escape(self, node: ast.expr, scope: _Scope) -> None:
        """A helper module used as a value (handed to a function, stored, returned) can be
        rebound where the check cannot follow it."""
        if not isinstance(node, (ast.Name, ast.Attribute)):
            return
        # a learner's own ``report = {...}`` handed to len() is not the helpers' report module
        modules = [
            q
            for q in self.sub.quals(node, scope, assume=False)
            if q in self.sub.helper_modules or q == "helpers" or q in _WATCHED_MODULES
        ]
        if not modules:
            return
        parent = self.sub.parent.get(id(node))
        if isinstance(parent, (ast.Attribute, ast.Subscript)) and parent.value is node:
            return  # an attribute is judged as such; a module cannot be subscripted
        if isinstance(parent, (ast.Expr, ast.Compare, ast.FormattedValue, ast.NamedExpr)):
            return
        if (
            isinstance(parent, (ast.Assign, ast.AnnAssign))
            and parent.value is node
            and all(
                isinstance(t, ast.Name)
                for t in (parent.targets if isinstance(parent, ast.Assign) else [parent.target])
            )
        ):
            return  # an alias: followed by name
        if isinstance(parent, ast.Call) and node is parent.func:
            return
        if isinstance(parent, ast.Call):
            callee = self.sub.quals(parent.func, scope)
            display = isinstance(parent.func, ast.Name) and parent.func.id == "display"
            if display or callee & (
                _LOOKS
                | _SETATTR
                | {f"{p}.object" for p in _PATCH}
                | {f"{p}.multiple" for p in _PATCH}
                | {"__builtin__.vars"}
            ):
                return
            if isinstance(parent.func, ast.Attribute) and parent.func.attr in ("setattr", "delattr"):
                return
        if _annotation(node, self.sub.parent):
            return
        for qual in modules:
            self._add(self.found.unknown, f"{qual} as a value")


def _annotation(node: ast.AST, parents: dict[int, ast.AST]) -> bool:
    child, parent = node, parents.get(id(node))
    while parent is not None:
        if isinstance(parent, ast.arg) and parent.annotation is child:
            return True
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)) and parent.returns is child:
            return True
        if isinstance(parent, ast.AnnAssign) and parent.annotation is child:
            return True
        if isinstance(parent, ast.stmt):
            return False
        child, parent = parent, parents.get(id(parent))
    return False


def _constant_names(node: ast.AST, scope: _Scope, sub: _Submission) -> list[str] | None:
    """The constant strings an expression can be: a constant, or a loop variable over a tuple of
    constants (``for k in ("a", "b")``); None when it is computed."""
    if (text := _constant(node)) is not None:
        return [text]
    if isinstance(node, ast.Name):
        bindings = sub._home(scope, node.id).names.get(node.id, [])
        names: list[str] = []
        for kind, value, _ in bindings:
            if kind != "for" or not isinstance(value, (ast.Tuple, ast.List, ast.Set)):
                return None
            texts = [t for e in value.elts if (t := _constant(e)) is not None]
            if len(texts) < len(value.elts):
                return None
            names += texts
        return names if bindings else None
    return None


def _short(node: ast.AST) -> str:
    text = ast.unparse(node)
    return text if len(text) <= 40 else text[:37] + "..."

"""Flag answers that copy the reference implementation instead of writing it.

A check that runs in the same language as the answer cannot prove who wrote it, so this only
flags for review, in the grades' ``reason`` column. Two signs, both read from the submitted
source in the grading process (never from the learner's kernel):

- an answer function with the same code as a helper (same bytecode and constants, whatever the
  names of its variables: a pasted helper);
- an answer that reaches for helper code by the back door: ``importlib.reload``, a function's
  ``__code__``, ``types.FunctionType``, ``inspect.getsource``, ``exec`` / ``eval`` /
  ``compile``, ``runpy``, loading a module from a file, or editing ``sys.modules``, also reached
  indirectly (``getattr(builtins, ...)``, frames, ``__globals__``), or a magic / shell command
  that runs code the check cannot read (:mod:`.backdoors`);
- an answer that rebinds a helper's or a measuring tool's attribute (``bench.count_host_syncs =
  f``, ``setattr``, ``mock.patch``), named in the note.

Each cell is read as IPython runs it (after its input transformation, magics included); a cell
that cannot be read is itself a note, never skipped.
"""

from __future__ import annotations

import ast
import types
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from helpers._grading import fingerprint

from .. import syntax
from . import backdoors

if TYPE_CHECKING:  # imported where used: the module stays cheap to import
    import subprocess

# A function shorter than this (in instructions) can be written the same way by anyone who
# follows the exercise text, so being identical to a helper proves nothing.
_MIN_INSTRUCTIONS = 60


class _NoDocstrings(ast.NodeTransformer):
    """Docstrings are not code: a helper pasted without its docstring is still a copy."""

    def generic_visit(self, node: ast.AST) -> ast.AST:
        super().generic_visit(node)
        body = getattr(node, "body", None)
        if (
            isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
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
    """fingerprint -> ``helpers.module.function`` for every non-trivial helper function.

    Compiling and disassembling every helper takes seconds, and every grading run (and its
    copy-check child) needs the table: it is cached on disk by the content of the helpers, of
    the code that computes it and of the Python version (bytecode differs between versions)."""
    import hashlib
    import marshal
    import sys

    from ..course import cache_dir, tree_hash, write_atomically

    here = Path(__file__)
    key = hashlib.sha256(
        "|".join(
            (
                sys.version,
                tree_hash(Path(package_dir)),
                *(
                    hashlib.sha256(path.read_bytes()).hexdigest()
                    for path in (
                        here,
                        here.parent.parent / "syntax.py",
                        Path(fingerprint.__code__.co_filename),
                    )
                ),
            )
        ).encode()
    ).hexdigest()[:24]
    cached = cache_dir() / "fingerprints" / f"{key}.marshal"
    try:
        return dict(marshal.loads(cached.read_bytes()))
    except (OSError, ValueError, EOFError, TypeError):
        pass
    table = _fingerprint_table(package_dir)
    try:
        write_atomically(cached, marshal.dumps(list(table.items())))
    except OSError:
        pass  # a read-only cache: compute it again next time
    return table


def _fingerprint_table(package_dir: str) -> dict[tuple, str]:
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
    public = _facade_names(root)
    return {print_: public.get(name, name) for print_, name in table.items()}


def _facade_names(root: Path) -> dict[str, str]:
    """``helpers.pkg._part.f`` -> ``helpers.pkg.f`` for what a package's ``__init__`` re-exports
    (``from ._part import f``): a review note names the function as learners know it."""
    names: dict[str, str] = {}
    for init in root.rglob("__init__.py"):
        package = ".".join(("helpers", *init.parent.relative_to(root).parts))
        try:
            tree = syntax.parse(init.read_text())
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in getattr(tree, "body", []):
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
                for alias in node.names:
                    names[f"{package}.{node.module}.{alias.name}"] = f"{package}.{alias.asname or alias.name}"
    return names


@lru_cache(maxsize=4)
def _helper_modules(package_dir: str) -> frozenset[str]:
    """``helpers.x.y`` for every module and package of the helpers."""
    root = Path(package_dir)
    return frozenset(
        ".".join(("helpers", *path.relative_to(root).with_suffix("").parts)).removesuffix(".__init__")
        for path in root.rglob("*.py")
    )


def flags(answers: dict[str, str], package_dir: str) -> list[str]:
    """One review note per answer cell (or cell the learner added) that copies, reaches for or
    rebinds helper code, or that the check could not read. Every cell is read as the kernel runs
    it: after IPython's input transformation, with the code that its magics run
    (:mod:`.backdoors`); aliases made in one cell count in the others."""
    table = helper_fingerprints(package_dir)
    cells = {gid: backdoors.read(source) for gid, source in answers.items()}
    try:
        findings = backdoors.analyse(cells, set(_helper_modules(package_dir)))
    except RecursionError:  # absurdly nested code: say so rather than let it through
        findings = {gid: backdoors.Findings(doors=["code nested too deep to read"]) for gid in cells}
    notes = []
    for gid, cell in cells.items():
        who = gid if gid.startswith("added cell") else f"answer {gid}"
        found = findings[gid]
        if cell.problem:
            notes.append(f"{who} could not be read by the copy check ({cell.problem}) — review")
        sources = [text for text, _ in cell.pieces] + found.extra
        copied = sorted({table[print_] for print_ in _fingerprints(sources, gid) if print_ in table})
        if copied:
            notes.append(f"{who} copies {', '.join(copied)} — review")
        if found.doors:
            notes.append(f"{who} uses {', '.join(found.doors)}, which can copy helper code — review")
        if found.rebinds:
            notes.append(f"{who} rebinds {', '.join(sorted(found.rebinds))} — review")
        if found.unknown:
            notes.append(f"{who} uses {', '.join(found.unknown)}, which can rebind helper code — review")
    return notes


def _fingerprints(sources: list[str], gid: str) -> list[tuple]:
    """Fingerprints of every function defined in these pieces of one cell."""
    found = []
    for n, source in enumerate(sources):
        try:
            code = _compile(source, f"<answer {gid} {n}>")
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue  # an unreadable piece is reported as such by backdoors.read
        found += [fingerprint(function) for _, function in _functions(code, "answer")]
    return found


# The detector reads untrusted source: it runs in a child process with a memory cap and a time
# limit per notebook, so no answer can make the grading process use unbounded CPU or memory.
CHECK_TIMEOUT_S = 30.0
CHECK_MEMORY_MB = 2048


class Checker:
    """A long-lived child process that runs :func:`flags` (its helper table is built once).

    ``check`` returns the review notes; a child that runs past :data:`CHECK_TIMEOUT_S` or dies
    (its memory cap) is replaced, and the notebook is flagged for review instead."""

    def __init__(self, package_dir: str) -> None:
        import threading

        self.package_dir = package_dir
        self.lock = threading.Lock()
        self.proc: subprocess.Popen[str] | None = None

    def _start(self) -> subprocess.Popen[str]:
        import resource
        import subprocess
        import sys

        def cap() -> None:
            limit = CHECK_MEMORY_MB * 2**20
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

        return subprocess.Popen(
            [sys.executable, "-m", "trainperf.grading.copies", self.package_dir],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            preexec_fn=cap,
            text=True,
            encoding="utf-8",
        )

    def check(self, answers: dict[str, str]) -> list[str]:
        import json
        import selectors

        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                self.proc = self._start()
            proc = self.proc
            assert proc.stdin is not None and proc.stdout is not None  # both are pipes (_start)
            try:
                proc.stdin.write(json.dumps(answers) + "\n")
                proc.stdin.flush()
                with selectors.DefaultSelector() as selector:
                    selector.register(proc.stdout, selectors.EVENT_READ)
                    ready = selector.select(timeout=CHECK_TIMEOUT_S)
                line = proc.stdout.readline() if ready else ""
                notes = json.loads(line) if line else None
            except (OSError, ValueError):
                notes = None
            if isinstance(notes, list) and all(isinstance(n, str) for n in notes):
                return notes
            proc.kill()
            proc.wait()
            self.proc = None
            return [
                f"the copy check did not finish within {CHECK_TIMEOUT_S:g} s and "
                f"{CHECK_MEMORY_MB} MiB — review"
            ]

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


def main() -> int:
    import json
    import sys

    package_dir = sys.argv[1]
    helper_fingerprints(package_dir)
    for line in sys.stdin:
        print(json.dumps(flags(json.loads(line), package_dir)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

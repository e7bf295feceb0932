"""Translate the prose inside code cells: comments, docstrings and hint strings.

A catalogue's ``code`` section maps the exact English of a comment, a docstring or a hint to
its translation. Only those tokens change; every other character of the cell stays as it is,
so a translated code cell runs, and is graded, as the English one:

- a **comment** is keyed by its text after ``#`` and the spaces after it; a block of comments
  on consecutive lines of their own (one sentence broken over lines) is one key, the lines'
  texts joined by a space, and its translation is spread over the same lines;
- a **docstring** (of a function or class, or of a cell of more than one statement) is keyed by
  its cleaned text (``inspect.cleandoc``: the lines without their common indentation);
- a **hint** is a string constant assigned to ``hint`` or passed as ``hint=``; a hint written
  as adjacent literals over several lines is one key (the joined text) and its translation is
  spread over the same literals. The helpers look a hint up at run time (``tr``); a translated
  literal passes through unchanged.

Commented-out code, nbgrader's markers (``### BEGIN SOLUTION``) and tool pragmas (``noqa``,
``type:``) are not prose and are never keys.
"""

from __future__ import annotations

import ast
import inspect
import io
import itertools
import re
import tokenize
from dataclasses import dataclass

from . import syntax

#: Comments that are not prose: nbgrader's markers and tools' pragmas.
_NOT_PROSE = re.compile(r"^(#+ *(BEGIN|END) (SOLUTION|HIDDEN TESTS)|# *(noqa|type:|pragma|fmt:))")
#: Marks of a comment that holds code rather than words (if it also parses as Python).
_CODE_MARKS = re.compile(r"[=()\[\].]|^(import|from|return|for|if|print)\b")
_BETWEEN = (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)
#: Where a translation spread over several lines may break: after these.
_BREAKS = "，。；：？！、） "
#: The lines of a notebook cell no learner reads: an answer's solution and the hidden tests.
_UNSEEN = re.compile(
    r"^[ \t]*### BEGIN (SOLUTION|HIDDEN TESTS)[ \t]*$(.*?)^[ \t]*### END \1[ \t]*$", re.MULTILINE | re.DOTALL
)


@dataclass(frozen=True)
class Piece:
    """One translatable text of a cell: its kind, its key and the tokens that hold it."""

    kind: str  # "comment" | "docstring" | "hint"
    key: str
    tokens: tuple[tokenize.TokenInfo, ...]

    @property
    def line(self) -> int:
        return self.tokens[0].start[0]


def _tokens(source: str) -> list[tokenize.TokenInfo]:
    try:
        return list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return []


def _comment_text(token: tokenize.TokenInfo) -> str:
    return token.string.lstrip("#").strip()


def _is_prose_comment(token: tokenize.TokenInfo) -> bool:
    text = _comment_text(token)
    words = re.sub(r"\"[^\"]*\"|'[^']*'", "", text)  # a list of quoted values is not prose
    if not re.search(r"[A-Za-z]{2}", words) or _NOT_PROSE.match(token.string):
        return False
    if _CODE_MARKS.search(text):
        try:
            syntax.parse(text)
            return False  # commented-out code
        except SyntaxError:
            pass
    return True


def _comments(tokens: list[tokenize.TokenInfo]) -> list[Piece]:
    """Prose comments; comments alone on consecutive lines at one column form one block."""
    pieces: list[Piece] = []
    block: list[tokenize.TokenInfo] = []

    def close() -> None:
        if block:
            key = " ".join(_comment_text(t) for t in block)
            pieces.append(Piece("comment", key, tuple(block)))
            block.clear()

    for token in tokens:
        if token.type != tokenize.COMMENT or not _is_prose_comment(token):
            if token.type not in _BETWEEN:  # code or another comment ends a block
                close()
            continue
        alone = not token.line[: token.start[1]].strip()
        if not alone:
            close()
            pieces.append(Piece("comment", _comment_text(token), (token,)))
            continue
        last = block[-1] if block else None
        if last is not None and (last.start[0] + 1 != token.start[0] or last.start[1] != token.start[1]):
            close()
        block.append(token)
    close()
    return pieces


def _string_nodes(tree: ast.Module) -> list[tuple[str, ast.Constant]]:
    """(kind, node) of every docstring and hint constant of a parsed cell."""
    found: list[tuple[str, ast.Constant]] = []
    owners: list[ast.AST] = [tree] if len(tree.body) > 1 else []
    owners += [
        n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    ]
    for owner in owners:
        body = getattr(owner, "body", [])
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            if isinstance(body[0].value.value, str):
                found.append(("docstring", body[0].value))
    for node in ast.walk(tree):
        value: ast.AST | None = None
        if isinstance(node, ast.keyword) and node.arg == "hint":
            value = node.value
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "hint" for t in node.targets
        ):
            value = node.value
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            found.append(("hint", value))
    return found


def _strings(source: str, tokens: list[tokenize.TokenInfo], any_text: bool = False) -> list[Piece]:
    """Docstrings and hints with English words in them (with ``any_text``, in any language)."""
    try:
        tree = syntax.parse(source)
    except SyntaxError:
        return []
    lines = source.splitlines()

    def at(row: int | None, byte: int | None) -> tuple[int, int]:  # ast counts UTF-8 bytes
        row, byte = row or 1, byte or 0
        return row, len(lines[row - 1].encode("utf-8")[:byte].decode("utf-8", "replace"))

    pieces = []
    for kind, node in _string_nodes(tree):
        start, end = at(node.lineno, node.col_offset), at(node.end_lineno, node.end_col_offset)
        inside = [t for t in tokens if t.start >= start and t.end <= end]
        literals = tuple(t for t in inside if t.type == tokenize.STRING)
        others = [t for t in inside if t.type not in (tokenize.STRING, tokenize.NL)]
        prefixes = {re.match(r"[A-Za-z]*", t.string).group(0).lower() for t in literals}  # type: ignore[union-attr]
        if not literals or others or prefixes - {"", "r", "u"}:
            continue  # an f-string, bytes, or a literal with a comment inside: left as it is
        value = str(node.value)  # a str: _string_nodes keeps no other constant
        if not any_text and not re.search(r"[A-Za-z]{2}", value):
            continue
        key = inspect.cleandoc(value) if kind == "docstring" else value
        pieces.append(Piece(kind, key, literals))
    return pieces


def pieces(source: str) -> list[Piece]:
    """Every comment, docstring and hint of a code cell, in the order they appear."""
    tokens = _tokens(source)
    return sorted(_comments(tokens) + _strings(source, tokens), key=lambda p: p.tokens[0].start)


def _unseen_lines(source: str) -> set[int]:
    """Line numbers (1-based) inside an answer's solution or a test cell's hidden tests."""
    lines: set[int] = set()
    for match in _UNSEEN.finditer(source):
        first = source.count("\n", 0, match.start()) + 1
        lines |= set(range(first, first + match.group(0).count("\n") + 1))
    return lines


def shown_pieces(source: str) -> list[Piece]:
    """The pieces a learner reads in the student notebook: not the solutions nor the hidden tests."""
    unseen = _unseen_lines(source)
    return [p for p in pieces(source) if p.line not in unseen]


def _spread(text: str, parts: int) -> list[str]:
    """``text`` cut into ``parts`` non-empty pieces of about equal length, at a break where one
    is near (a translation over as many lines as the English took)."""
    parts = max(1, min(parts, len(text)))
    cuts, last = [], 0
    for i in range(1, parts):
        want = round(len(text) * i / parts)
        near = [
            j
            for j in range(max(last + 1, want - 10), min(len(text) - (parts - i), want + 10))
            if text[j - 1] in _BREAKS
        ]
        cut = (
            min(near, key=lambda j: abs(j - want))
            if near
            else max(last + 1, min(want, len(text) - (parts - i)))
        )
        cuts.append(cut)
        last = cut
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


def _literal(original: str, text: str) -> str:
    """``text`` as a literal written the way ``original`` is (its quotes)."""
    prefix = re.match(r"[A-Za-z]*", original).group(0)  # type: ignore[union-attr]
    body = original[len(prefix) :]
    quote = body[:3] if body[:3] in ('"""', "'''") else body[0]
    escaped = text.replace("\\", "\\\\")
    if len(quote) == 1:
        escaped = escaped.replace(quote, "\\" + quote).replace("\n", "\\n")
    else:
        escaped = escaped.replace(quote, "\\" + quote)
        if escaped.endswith(quote[0]):
            escaped = escaped[:-1] + "\\" + quote[0]
    keep = prefix.lower().replace("r", "") if escaped != text else prefix
    return f"{keep}{quote}{escaped}{quote}"


def _docstring(token: tokenize.TokenInfo, text: str) -> str:
    """A docstring's translation, indented and closed the way the English one is."""
    value = ast.literal_eval(token.string)
    indent = " " * token.start[1]
    lines = text.strip().split("\n")
    body = "\n".join([lines[0], *[indent + line if line.strip() else "" for line in lines[1:]]])
    if value.rstrip(" \t").endswith("\n"):  # closing quotes on a line of their own
        body += "\n" + indent
    return _literal(token.string, body)


def _replacements(piece: Piece, text: str) -> list[tuple[tokenize.TokenInfo, str]]:
    if piece.kind == "docstring":
        return [(piece.tokens[0], _docstring(piece.tokens[0], text))]
    chunks = _spread(text, len(piece.tokens))
    out = []
    for i, token in enumerate(piece.tokens):
        if piece.kind == "comment":
            lead = re.match(r"#+ *", token.string).group(0)  # type: ignore[union-attr]
            new = lead + chunks[i].strip() if i < len(chunks) else lead.rstrip()
        else:
            new = _literal(token.string, chunks[i] if i < len(chunks) else "")
        out.append((token, new))
    return out


def lookup(piece: Piece, table: dict[str, str], hints: dict[str, str] | None = None) -> str | None:
    """The translation of ``piece``: ``table``'s, else for a hint the one ``hints`` holds (a
    catalogue's ``strings``, which the checks print at run time: one translation, not two)."""
    for where in (table, hints if piece.kind == "hint" else None):
        text = (where or {}).get(piece.key)
        if isinstance(text, str) and text.strip():
            return text
    return None


def translate(source: str, table: dict[str, str], hints: dict[str, str] | None = None) -> str:
    """``source`` with each comment, docstring and hint that ``table`` (or for hints, ``hints``)
    translates replaced (the rest byte for byte as it was)."""
    if not table and not hints:
        return source
    edits = [
        edit
        for piece in pieces(source)
        if (text := lookup(piece, table, hints)) is not None
        for edit in _replacements(piece, text)
    ]
    if not edits:
        return source
    lines = source.splitlines(keepends=True)
    for token, new in sorted(edits, key=lambda e: e[0].start, reverse=True):
        (r0, c0), (r1, c1) = token.start, token.end
        head, tail = lines[r0 - 1][:c0], lines[r1 - 1][c1:]
        lines[r0 - 1 : r1] = [head + new + tail]
    return "".join(lines)


def skeleton(source: str) -> str:
    """``source`` without its comments, docstrings and hints: two cells with the same skeleton
    differ only in prose (a test cell of a translated edition is not an edited one)."""
    tokens = _tokens(source)
    if not tokens:
        return source.strip()
    blank = {t.start: '""' for p in _strings(source, tokens, any_text=True) for t in p.tokens}
    blank.update({t.start: "" for t in tokens if t.type == tokenize.COMMENT})
    lines = source.splitlines(keepends=True)
    for token in sorted((t for t in tokens if t.start in blank), key=lambda t: t.start, reverse=True):
        (r0, c0), (r1, c1) = token.start, token.end
        lines[r0 - 1 : r1] = [lines[r0 - 1][:c0] + blank[token.start] + lines[r1 - 1][c1:]]
    return "\n".join(line.rstrip() for line in "".join(lines).strip().splitlines())

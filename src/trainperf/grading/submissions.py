"""Find the submissions in a folder without trusting it.

Layout: ``SUBMISSIONS/<student>/<chapter>/<notebook>.ipynb`` (nbgrader's ``submitted/``
layout) or ``SUBMISSIONS/<student>/<notebook>.ipynb``. Symbolic links are never followed — a
linked student folder, chapter folder or notebook is reported, not graded — and a student id
may be any bytes the filesystem allows: it is kept exactly for matching and resuming, and shown
as UTF-8 (with replacement characters) wherever a person reads it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

MAX_NOTEBOOK_BYTES = 64 * 2**20  # a notebook larger than this is not read
_UNSAFE_FILE_CHARS = re.compile(r"[^A-Za-z0-9._-]+")


def display_name(raw: str) -> str:
    """A student id as text a person can read: undecodable bytes become U+FFFD."""
    return os.fsencode(raw).decode("utf-8", errors="replace")


def spreadsheet_safe(text: str) -> str:
    """Text for a CSV cell that a spreadsheet will not run as a formula (OWASP's advice)."""
    if text[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + text
    return text


def file_stem(raw: str, limit: int = 80) -> str:
    """A file name stem for a student: readable, unique, short enough for any filesystem."""
    digest = hashlib.sha256(os.fsencode(raw)).hexdigest()[:10]
    readable = _UNSAFE_FILE_CHARS.sub("_", display_name(raw)).strip("._")[:limit]
    return f"{readable}-{digest}" if readable else digest


@dataclass
class Found:
    """Student (raw id) -> chapter -> notebook, and per-student notes on what was skipped."""

    notebooks: dict[str, dict[str, Path]] = field(default_factory=dict)
    notes: dict[str, list[str]] = field(default_factory=dict)


def _entries(folder: Path) -> list[os.DirEntry]:
    with os.scandir(folder) as it:
        return sorted(it, key=lambda e: os.fsencode(e.name))


def _walk_notebooks(folder: Path, top: Path, notes: list[str], depth: int = 0) -> list[Path]:
    """``*.ipynb`` files under ``folder``, never through a symbolic link."""
    found: list[Path] = []
    for entry in _entries(folder):
        rel = display_name(os.path.relpath(entry.path, top))
        if entry.name.startswith(".") or entry.name == "__pycache__":
            continue
        if entry.is_symlink():
            if entry.name.endswith(".ipynb") or entry.is_dir():
                notes.append(f"ignored {rel}: a symbolic link (links are not followed)")
            continue
        if entry.is_dir(follow_symlinks=False) and depth < 3:
            found += _walk_notebooks(Path(entry.path), top, notes, depth + 1)
        elif entry.name.endswith(".ipynb") and entry.is_file(follow_symlinks=False):
            found.append(Path(entry.path))
    return found


def discover(submissions: Path, expected_names: dict[str, str], chapter_ids: list[str]) -> Found:
    """Map each student folder's notebooks to chapters. ``expected_names``: file name -> chapter."""
    found = Found()
    for entry in _entries(submissions):
        if entry.name.startswith("."):
            continue
        student = entry.name
        if entry.is_symlink():
            found.notebooks[student] = {}
            found.notes[student] = ["the student folder is a symbolic link; not followed, nothing graded"]
            continue
        if not entry.is_dir(follow_symlinks=False):
            continue
        mine: dict[str, Path] = {}
        notes: list[str] = []
        for nb in _walk_notebooks(Path(entry.path), Path(entry.path), notes):
            rel = display_name(os.path.relpath(nb, entry.path))
            chapter = expected_names.get(nb.name)
            if chapter is None and nb.parent.name in chapter_ids:
                chapter = nb.parent.name
                wanted = next(n for n, c in expected_names.items() if c == chapter)
                notes.append(f"{rel} graded as {chapter} (expected the name {wanted})")
            if chapter is None:
                notes.append(f"ignored {rel}: not a notebook of any graded chapter")
            elif chapter in mine:
                notes.append(f"ignored {rel}: a second notebook for {chapter}")
            else:
                mine[chapter] = nb
        found.notebooks[student], found.notes[student] = mine, notes
    return found


def read_bytes(path: Path) -> bytes:
    """The file's bytes, refusing a symbolic link swapped in since it was found."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError("not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(MAX_NOTEBOOK_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_NOTEBOOK_BYTES:
        raise OSError(f"larger than {MAX_NOTEBOOK_BYTES // 2**20} MiB")
    return data


def json_problem(exc: json.JSONDecodeError | UnicodeDecodeError) -> str:
    """What is wrong with a file that is not JSON, in words and with its own punctuation:
    ``Unterminated string starting at line 61, column 5``, ``Expecting value at line 1,
    column 1``, ``byte 0xff at offset 0 is not UTF-8 text``."""
    if isinstance(exc, UnicodeDecodeError):
        bad = exc.object[exc.start : exc.start + 1]
        return f"byte 0x{bad.hex() or '??'} at offset {exc.start} is not {exc.encoding.upper()} text"
    message = exc.msg.rstrip(" :")
    joint = " " if message.endswith(" at") else " at "  # "starting at", "character at"
    return f"{message}{joint}line {exc.lineno}, column {exc.colno}"


def read_submission(path: Path) -> tuple[dict | None, str, bytes]:
    """(the notebook as a dict or None, what is wrong with the file, its bytes)."""
    import nbformat

    try:
        data = read_bytes(path)
    except OSError as exc:
        return None, f"the submitted notebook could not be read ({exc.strerror or exc})", b""
    if not data:
        return None, "the submitted notebook is an empty file", data
    try:
        json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return None, f"the submitted notebook is not valid JSON ({json_problem(exc)})", data
    try:
        nb = nbformat.reads(data.decode("utf-8"), as_version=4)
    except Exception as exc:  # noqa: BLE001 — nbformat's reader raises many types; each is the answer
        return None, f"the submitted file is not a Jupyter notebook ({type(exc).__name__})", data
    if not isinstance(nb.get("cells"), list):
        return None, "the submitted notebook has no list of cells", data
    return nb, "", data

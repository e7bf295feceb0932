"""Where things are in a course checkout, and nbgrader invoked on a scratch course folder."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CONFIG_NAME = "nbgrader_config.py"


class CourseError(RuntimeError):
    """A problem with the checkout or the command line, reported as one line."""


def find_root(start: Path | None = None) -> Path:
    """The checkout root: the nearest folder holding ``solutions/`` and ``grader/``."""
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / "solutions").is_dir() and (candidate / "grader" / CONFIG_NAME).is_file():
            return candidate
    raise CourseError(
        f"No course checkout found at or above {here}: expected solutions/ and "
        f"grader/{CONFIG_NAME}. Run from the repository, or pass --root."
    )


def chapters(root: Path, wanted: list[str] | None = None) -> list[str]:
    """Chapter folders of ``solutions/`` (``01_roofline``, ...), optionally filtered.

    ``wanted`` items may be numbers (``1``, ``01``), names (``roofline``; ``mixed_precision``
    or ``mixed-precision``; any case) or folder names (``01_roofline``). An unknown one is a
    :class:`CourseError` that lists the choices.
    """
    available = sorted(p.name for p in (root / "solutions").iterdir() if p.is_dir() and p.name[:2].isdigit())
    if not wanted:
        return available
    picked: list[str] = []
    for item in wanted:
        matches = [c for c in available if _names_chapter(str(item), c)]
        if not matches:
            raise CourseError(_unknown_chapter(str(item), available))
        picked.extend(m for m in matches if m not in picked)
    return picked


def _names_chapter(item: str, chapter: str) -> bool:
    """Whether ``item`` (a number, a name or a folder name) names ``chapter`` (``01_roofline``)."""
    key = item.strip().lower().replace("-", "_")
    number, _, name = chapter.lower().partition("_")
    if key.isdigit():
        return number.isdigit() and int(key) == int(number)
    return key in (chapter.lower(), name)


def _unknown_chapter(item: str, available: list[str]) -> str:
    """The one line for a chapter that is not in ``available``: the nearest name and every choice."""
    import difflib

    names = {c.partition("_")[2]: c for c in available}
    key = item.strip().lower().replace("-", "_")
    near = difflib.get_close_matches(key, [*names, *available], n=1, cutoff=0.6)
    hint = f" (did you mean {names.get(near[0], near[0]).partition('_')[2]!r}?)" if near else ""
    choices = ", ".join(f"{c.partition('_')[0]} {c.partition('_')[2]}" for c in available)
    return f"Unknown chapter {item!r}{hint}; choose a number or a name: {choices}."


def require_languages(root: Path, langs: list[str]) -> list[str]:
    """``langs`` if the course has each (English, and every folder of ``i18n/``), else one line."""
    from .i18n import languages

    known = ["en", *languages(root)]
    for lang in langs:
        if lang not in known:
            raise CourseError(f"unknown language {lang!r}: the course has {', '.join(known)}.")
    return langs


def chapter_notebook(root: Path, chapter: str) -> Path:
    """The one notebook of a chapter in ``solutions/``."""
    notebooks = sorted((root / "solutions" / chapter).glob("*.ipynb"))
    if len(notebooks) != 1:
        raise CourseError(f"solutions/{chapter} must hold exactly one notebook, found {len(notebooks)}.")
    return notebooks[0]


def cache_dir() -> Path:
    """The course tooling's cache: ``$TRAINPERF_CACHE``, else ``$XDG_CACHE_HOME/trainperf``."""
    base = os.environ.get("TRAINPERF_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "trainperf"
    )
    return Path(base)


def tree_hash(folder: Path) -> str:
    """SHA-256 of every file's relative path and bytes under ``folder``."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


#: Files a chapter writes where it runs (its own folder, when run from a clone): not sources, so
#: never copied into the student notebooks (.gitignore keeps them out of git too).
RUN_OUTPUTS = (".ipynb_checkpoints", "__pycache__", "memory_snapshot*.pickle", "memory_viz_cpu.html")


def make_scratch_course(root: Path, scratch: Path, chapter_ids: list[str]) -> Path:
    """A throwaway nbgrader course folder: config plus copies of the chapters' sources."""
    scratch.mkdir(parents=True, exist_ok=True)
    shutil.copy2(root / "grader" / CONFIG_NAME, scratch / CONFIG_NAME)
    for chapter in chapter_ids:
        target = scratch / "solutions" / chapter
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(
            root / "solutions" / chapter,
            target,
            ignore=shutil.ignore_patterns(*RUN_OUTPUTS),
        )
    return scratch


def nbgrader(
    args: list[str], course_root: Path, timeout: float | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run the real ``nbgrader`` command line in ``course_root`` (where its config lives)."""
    full_env = {**os.environ, **(env or {})}
    # nbgrader shells out to `alembic`; make the interpreter's own bin/ win on PATH
    bin_dir = str(Path(sys.executable).parent)
    full_env["PATH"] = bin_dir + os.pathsep + full_env.get("PATH", "")
    full_env.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    return subprocess.run(
        [sys.executable, "-m", "trainperf._nbgrader_main", *args],
        cwd=course_root,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
    )


def write_atomically(path: Path, data: str | bytes) -> None:
    """Write ``path`` whole or not at all: another run may read or write the same file (a cache
    entry, a grades part) at the same moment, and must never see half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    if isinstance(data, bytes):
        tmp.write_bytes(data)
    else:
        tmp.write_text(data, encoding="utf-8")
    os.replace(tmp, path)


def _generate_key(course_root: Path, chapter: str) -> str:
    """What nbgrader's output depends on: the chapter's sources, the config, nbgrader itself."""
    import nbgrader

    digest = hashlib.sha256(tree_hash(course_root / "solutions" / chapter).encode())
    digest.update((course_root / CONFIG_NAME).read_bytes())
    digest.update(f"{nbgrader.__version__}|{sys.version}".encode())
    return digest.hexdigest()[:24]


def _generated(course_root: Path, chapter: str) -> Path:
    """nbgrader's output for one chapter — ``released/`` and the ``gradebook.db`` it fills —
    from the cache, made on a miss by running nbgrader in a course of that chapter alone (so
    the gradebook holds it alone). Cached by content (:func:`_generate_key`): the same sources
    under the same config and nbgrader give the same output, so a second build, check, grading
    run or test of an unchanged chapter copies it instead of running nbgrader again."""
    cached = cache_dir() / "generated" / f"{chapter}-{_generate_key(course_root, chapter)}"
    if (cached / "gradebook.db").is_file():
        return cached
    cached.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=cached.parent, prefix=".tmp-"))
    try:
        alone = staging / "course"
        (alone / "solutions").mkdir(parents=True)
        shutil.copy2(course_root / CONFIG_NAME, alone / CONFIG_NAME)
        shutil.copytree(course_root / "solutions" / chapter, alone / "solutions" / chapter)
        released = generate_uncached(alone, chapter)
        shutil.copytree(released, staging / "files" / "released")
        shutil.copy2(alone / "gradebook.db", staging / "files" / "gradebook.db")
        try:  # another run may store the same entry at the same moment: one of them wins
            os.replace(staging / "files", cached)
        except OSError:
            pass
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return cached


def generate(course_root: Path, chapter: str, gradebook: bool = False) -> Path:
    """``nbgrader generate_assignment`` for one chapter (cached, :func:`_generated`); returns
    the released folder under ``course_root``. With ``gradebook``, the course (of that chapter
    alone) also gets the gradebook nbgrader filled."""
    book = course_root / "gradebook.db"
    if gradebook and book.exists():
        raise CourseError(f"{course_root} already has a gradebook; generate into a fresh course folder")
    released = course_root / "notebooks" / chapter
    cached = _generated(course_root, chapter)
    if released.exists():
        shutil.rmtree(released)
    shutil.copytree(cached / "released", released)
    if gradebook:
        shutil.copy2(cached / "gradebook.db", book)
    return released


def generate_with_gradebook(course_root: Path, chapter: str) -> Path:
    """:func:`generate` with the gradebook (``nbgrader autograde`` reads it; so do the points
    of each graded cell)."""
    return generate(course_root, chapter, gradebook=True)


def generate_uncached(course_root: Path, chapter: str) -> Path:
    """``nbgrader generate_assignment`` for one chapter, always run (it also fills the scratch
    course's gradebook, which grading reads for the points)."""
    result = nbgrader(["generate_assignment", chapter, "--force", "--create"], course_root)
    released = course_root / "notebooks" / chapter
    if result.returncode != 0 or not released.is_dir():
        tail = (result.stderr or result.stdout).strip().splitlines()[-5:]
        raise CourseError(f"nbgrader generate_assignment {chapter} failed: " + " | ".join(tail))
    return released

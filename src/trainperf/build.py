"""``trainperf build``: regenerate ``notebooks/`` from ``solutions/`` with nbgrader."""

from __future__ import annotations

import filecmp
import shutil
import tempfile
from pathlib import Path

from .course import chapters, generate, make_scratch_course


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")
            if p.is_file() and ".ipynb_checkpoints" not in p.parts and "__pycache__" not in p.parts}


def generate_all(root: Path, chapter_ids: list[str], scratch: Path) -> dict[str, Path]:
    """Generate each chapter's student version in ``scratch``; chapter -> released folder."""
    make_scratch_course(root, scratch, chapter_ids)
    return {chapter: generate(scratch, chapter) for chapter in chapter_ids}


def differences(root: Path, chapter: str, released: Path) -> list[str]:
    """Files of ``notebooks/<chapter>`` that differ from what nbgrader generates."""
    committed = root / "notebooks" / chapter
    if not committed.is_dir():
        return [f"notebooks/{chapter}/ (missing)"]
    want, have = _files(released), _files(committed)
    diffs = [f"notebooks/{chapter}/{name} (missing)" for name in sorted(want - have)]
    diffs += [f"notebooks/{chapter}/{name} (not generated from solutions/)"
              for name in sorted(have - want)]
    diffs += [f"notebooks/{chapter}/{name} (differs)" for name in sorted(want & have)
              if not filecmp.cmp(released / name, committed / name, shallow=False)]
    return diffs


def build(root: Path, wanted: list[str] | None = None, check: bool = False) -> list[str]:
    """Regenerate (or with ``check``, compare) student notebooks; returns the differences."""
    chapter_ids = chapters(root, wanted)
    found: list[str] = []
    with tempfile.TemporaryDirectory(prefix="trainperf-build-") as tmp:
        for chapter, released in generate_all(root, chapter_ids, Path(tmp)).items():
            diffs = differences(root, chapter, released)
            found += diffs
            if check:
                continue
            target = root / "notebooks" / chapter
            if diffs:
                if target.exists():
                    shutil.rmtree(target)
                shutil.copytree(released, target)
            print(f"{chapter}: {'rebuilt' if diffs else 'up to date'}")
        if check:
            # notebooks/ must not hold chapters that solutions/ no longer has
            stray = sorted(p.name for p in (root / "notebooks").glob("*")
                           if p.is_dir() and p.name not in chapters(root))
            found += [f"notebooks/{name}/ (no such chapter in solutions/)" for name in stray]
    return found

"""`trainperf build --check` is clean, and catches a notebooks/ that drifted."""

from __future__ import annotations

import shutil

import nbformat
import pytest
from conftest import ROOT

from trainperf.build import build
from trainperf.cli import main

pytestmark = pytest.mark.notebooks


def test_build_check_is_clean(capsys):
    assert main(["--root", str(ROOT), "build", "--check"]) == 0
    assert "matches" in capsys.readouterr().out


def _copy_checkout(tmp_path):
    for folder in ("solutions", "notebooks", "grader"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    return tmp_path


def test_build_check_names_a_hand_edited_and_a_stray_file(tmp_path, capsys):
    root = _copy_checkout(tmp_path)
    chapter = sorted(p.name for p in (root / "notebooks").iterdir())[0]
    number = chapter.split("_")[0]
    released = next((root / "notebooks" / chapter).glob("*.ipynb"))
    nb = nbformat.read(released, as_version=4)
    nb.cells[0].source += "\nedited by hand"
    nbformat.write(nb, released)
    (root / "notebooks" / chapter / "notes.txt").write_text("stray")
    assert main(["--root", str(root), "build", "--check", "--chapters", number]) == 1
    err = capsys.readouterr().err
    assert f"notebooks/{chapter}/{released.name} (differs)" in err
    assert f"notebooks/{chapter}/notes.txt" in err
    # build repairs it, after which check is clean again
    assert build(root, [number]) != [] and build(root, [number], check=True) == []

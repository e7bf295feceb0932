"""`trainperf` command-line behaviour: run reports failures by cell, errors are one line."""

from __future__ import annotations

import shutil

import nbformat
import pytest
from conftest import ROOT
from nbformat.v4 import new_code_cell, new_notebook

from trainperf.cli import main

pytestmark = pytest.mark.notebooks


def _fake_course(tmp_path):
    (tmp_path / "grader").mkdir()
    shutil.copy2(ROOT / "grader" / "nbgrader_config.py", tmp_path / "grader")
    for name, cells in {"01_good": ["x = 1", "print(x + 1)"],
                        "02_bad": ["x = 1", "raise ValueError('broken on purpose')", "y = 2"]}.items():
        folder = tmp_path / "solutions" / name
        folder.mkdir(parents=True)
        nb = new_notebook(cells=[new_code_cell('DEVICE = "auto"\nQUICK = True',
                                               metadata={"tags": ["parameters"]})]
                          + [new_code_cell(c) for c in cells])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nbformat.write(nb, folder / f"{name}.ipynb")
    return tmp_path


def test_run_reports_the_failing_cell_and_still_runs_the_rest(tmp_path, capsys):
    root = _fake_course(tmp_path)
    code = main(["--root", str(root), "run", "--device", "cpu", "--jobs", "2",
                 "--out", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert code == 1
    assert "01_good" in out and "02_bad" in out
    table = out[out.index("chapter "):]
    assert "01_good" in table and " ok" in table and "FAILED" in table
    assert "ValueError: broken on purpose" in out and "raise ValueError" in out
    assert (tmp_path / "out" / "01_good.ipynb").exists()


def test_unknown_chapter_is_one_clear_line(capsys):
    assert main(["--root", str(ROOT), "run", "--chapters", "99"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("trainperf: Unknown chapter '99'") and "\n" not in err


def test_missing_submissions_folder_is_one_clear_line(tmp_path, capsys):
    assert main(["--root", str(ROOT), "grade", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_no_checkout_found(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["build", "--check"]) == 2
    assert "No course checkout found" in capsys.readouterr().err

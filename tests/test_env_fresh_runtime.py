"""Learner path 2: a Colab-like fresh runtime.

Each STUDENT notebook is copied alone into an empty folder outside the repository and run by
papermill with a kernel from a fresh virtual environment that has torch (and ipykernel, as
every Jupyter runtime does) but not ``helpers``. ``TRAINPERF_SPEC`` points the setup cell at a
wheel built from this checkout, so the setup cell must install the package from it (the first
notebook of each venv installs it from nothing; the setup cells install the same way in every
chapter, so the others reuse that install). Every
teaching cell must run without error; exercise cells (the nbgrader answer and test cells) may
only raise the stub's NotImplementedError.

Learner path 3 (ModelScope, a clone): a Chinese notebook inside a copy of the checkout, no
``TRAINPERF_SPEC``: the setup cell installs the clone editable and shows pip's progress.

Python 3.11 (this machine's) always; Python 3.12 (Colab's) where an interpreter and a torch
wheel for it are on this machine's disk, or where TRAINPERF_FRESH_DOWNLOAD=1 allows pip to
fetch one (PyPI has only the multi-GB CUDA build); otherwise it is skipped with the reason.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import envkit
import nbformat
import pytest
from conftest import once_per_worker
from envkit import ROOT, TORCH_SPEC, find_python, run

pytestmark = pytest.mark.env

KERNEL = "trainperf-fresh-py{}"
CELL_TIMEOUT_S = 600  # the setup cell's pip install of numpy/matplotlib/ipywidgets included
NOTEBOOKS = sorted(p for d in sorted((ROOT / "notebooks").iterdir()) if d.is_dir() for p in d.glob("*.ipynb"))


@pytest.fixture(scope="session")
def course_wheel(tmp_path_factory) -> Path:
    return once_per_worker("course-wheel", lambda: _build_wheel(tmp_path_factory))


def _build_wheel(tmp_path_factory) -> Path:
    wheel = envkit.build_wheel(tmp_path_factory.mktemp("wheel"))
    import zipfile

    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [
        p.relative_to(ROOT / "src").as_posix()
        for p in (ROOT / "src").rglob("*")
        if p.is_file()
        and p.parts[-2] != "__pycache__"
        and p.suffix != ".pyc"
        and "egg-info" not in str(p)
        and p.relative_to(ROOT / "src").as_posix() not in names
    ]
    assert not missing, f"the wheel lacks files of src/ (package-data pattern?): {missing}"
    return wheel


@pytest.fixture(scope="session", params=["3.11", "3.12"])
def fresh_runtime(request, tmp_path_factory) -> dict:
    """A fresh venv for one Python version, with torch and ipykernel, registered as a kernel."""
    return once_per_worker(
        ("fresh-runtime", request.param), lambda: _build_fresh_runtime(request.param, tmp_path_factory)
    )


def _build_fresh_runtime(version: str, tmp_path_factory) -> dict:
    python = find_python(version)
    if python is None:
        pytest.skip(f"no Python {version} interpreter on this machine")
    if not envkit.torch_wheel_is_local(python) and os.environ.get("TRAINPERF_FRESH_DOWNLOAD") != "1":
        pytest.skip(
            f"Python {version} is here ({python}) but no {TORCH_SPEC} wheel for it is on "
            "this machine's disk, and PyPI has only the multi-GB CUDA build; set "
            "TRAINPERF_FRESH_DOWNLOAD=1 to download it"
        )
    base = tmp_path_factory.mktemp(f"fresh-py{version}")
    torch_dir = envkit.torch_site(python, tmp_path_factory.getbasetemp())
    vpython = envkit.make_venv(python, base / "venv", torch_dir)
    run([vpython, "-m", "pip", "install", "-q", "ipykernel"], timeout=900)
    probe = run(
        [
            vpython,
            "-c",
            "import importlib.util, torch; "
            "print(importlib.util.find_spec('helpers') is None, torch.__version__)",
        ]
    )
    assert probe.stdout.startswith("True"), f"the fresh venv must not see helpers: {probe.stdout}"
    name = KERNEL.format(version)
    spec_dir = base / "jupyter" / "kernels" / name
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [str(vpython), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": f"fresh Python {version}",
                "language": "python",
            }
        )
    )
    return {"version": version, "python": vpython, "kernel": name, "jupyter_path": base / "jupyter"}


_INSTALL_PROVEN: set[str] = set()  # fresh venvs whose install a notebook of this process proved


def _installed_from(vpython: Path) -> str | None:
    """Where the fresh venv's trainperf-course came from (its direct_url), or None."""
    dist = next(envkit.site_packages(vpython).glob("trainperf_course-*.dist-info"), None)
    return json.loads((dist / "direct_url.json").read_text()).get("url") if dist else None


def _is_exercise(cell) -> bool:
    meta = cell.metadata.get("nbgrader", {})
    return bool(meta.get("solution") or meta.get("grade"))


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_student_notebook_runs_alone_in_a_fresh_runtime(
    notebook, fresh_runtime, course_wheel, tmp_path, monkeypatch
):
    import papermill
    from papermill.exceptions import PapermillExecutionError

    vpython = fresh_runtime["python"]
    # The first notebook run in each fresh venv proves the install from nothing; the others find
    # the helpers installed from the same wheel, as a learner's next notebook in the same runtime
    # does. That covers all nine: their setup cells install the same way
    # (test_setup_cell_installs_the_same_way_in_every_chapter), and a pip install costs ~20 s.
    if str(vpython) not in _INSTALL_PROVEN or _installed_from(vpython) != course_wheel.as_uri():
        _INSTALL_PROVEN.discard(str(vpython))
        run([vpython, "-m", "pip", "uninstall", "-y", "-q", "trainperf-course"])
    folder = tmp_path / "learner"
    folder.mkdir()
    assert not any((p / "src" / "helpers").is_dir() for p in (folder, *folder.parents))
    shutil.copy2(notebook, folder / notebook.name)
    monkeypatch.setenv("TRAINPERF_SPEC", str(course_wheel))
    monkeypatch.setenv("JUPYTER_PATH", str(fresh_runtime["jupyter_path"]))
    monkeypatch.delenv("MPLBACKEND", raising=False)  # a learner's kernel uses its inline backend
    monkeypatch.delenv("PYTHONPATH", raising=False)
    out = tmp_path / f"executed_{notebook.name}"
    try:
        papermill.execute_notebook(
            str(folder / notebook.name),
            str(out),
            kernel_name=fresh_runtime["kernel"],
            cwd=str(folder),
            progress_bar=False,
            execution_timeout=CELL_TIMEOUT_S,
            allow_errors=True,
        )  # nbclient runs every cell; errors are judged below
    except PapermillExecutionError:
        pass  # papermill still raises for any error output once all cells ran
    nb = nbformat.read(out, as_version=4)

    # the setup cell installed helpers from the wheel into the fresh venv
    dist = next(envkit.site_packages(vpython).glob("trainperf_course-*.dist-info"), None)
    assert dist is not None, "the setup cell did not install trainperf-course into the fresh venv"
    direct = json.loads((dist / "direct_url.json").read_text())
    assert direct["url"] == course_wheel.as_uri(), direct
    setup = [c for c in nb.cells if c.cell_type == "code"][1]  # after the parameters cell
    setup_out = "".join(o.get("text", "") for o in setup.outputs)
    assert f"Python {fresh_runtime['version']}." in setup_out and "device: cpu" in setup_out, setup_out
    _INSTALL_PROVEN.add(str(vpython))

    teaching_failures, unexpected, stubbed = [], [], 0
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        errors = [o for o in cell.outputs if o.output_type == "error"]
        if _is_exercise(cell):
            stubbed += bool(errors)
            unexpected += [
                (index, f"{e.ename}: {e.evalue}") for e in errors if e.ename != "NotImplementedError"
            ]
        else:
            assert cell.execution_count is not None, f"cell {index} did not run"
            teaching_failures += [(index, f"{e.ename}: {e.evalue}", cell.source[:80]) for e in errors]
    assert not teaching_failures, f"teaching cells failed in the fresh runtime: {teaching_failures}"
    assert not unexpected, f"exercise cells failed with something other than the stub: {unexpected}"
    assert stubbed, "no exercise raised the stub's NotImplementedError: is this the student notebook?"


def test_chinese_notebook_in_a_clone_installs_the_clone_editable(fresh_runtime, tmp_path, monkeypatch):
    """Learner path 3 (ModelScope): a clone of the course, a kernel without the helpers and
    no TRAINPERF_SPEC. The setup cell of a Chinese notebook must install the clone editable
    (so `git pull` updates the helpers), show pip's progress, and the notebook then runs in
    Chinese: teaching cells without error, plots without a missing glyph."""
    import papermill
    from papermill.exceptions import PapermillExecutionError

    if fresh_runtime["version"] != "3.11":
        pytest.skip("one Python version proves the clone path")
    vpython = fresh_runtime["python"]
    run([vpython, "-m", "pip", "uninstall", "-y", "-q", "trainperf-course"])
    clone = envkit.copy_project(tmp_path / "clone")
    chapter = "01_roofline"
    folder = clone / "notebooks" / "zh" / chapter
    shutil.copytree(ROOT / "notebooks" / "zh" / chapter, folder)
    notebook = folder / f"{chapter}.ipynb"
    monkeypatch.delenv("TRAINPERF_SPEC", raising=False)
    monkeypatch.setenv("JUPYTER_PATH", str(fresh_runtime["jupyter_path"]))
    monkeypatch.delenv("MPLBACKEND", raising=False)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    out = tmp_path / "executed.ipynb"
    try:
        papermill.execute_notebook(
            str(notebook),
            str(out),
            kernel_name=fresh_runtime["kernel"],
            cwd=str(folder),
            progress_bar=False,
            execution_timeout=CELL_TIMEOUT_S,
            allow_errors=True,
        )
    except PapermillExecutionError:
        pass
    nb = nbformat.read(out, as_version=4)

    dist = next(envkit.site_packages(vpython).glob("trainperf_course-*.dist-info"), None)
    assert dist is not None, "the setup cell did not install the clone"
    direct = json.loads((dist / "direct_url.json").read_text())
    assert direct["url"] == clone.resolve().as_uri() and direct["dir_info"].get("editable") is True, direct
    setup = [c for c in nb.cells if c.cell_type == "code"][1]
    setup_out = "".join(o.get("text", "") for o in setup.outputs)
    assert f"pip install -e {clone.resolve()}" in setup_out, setup_out[:500]
    assert "Successfully installed" in setup_out and "设备：cpu" in setup_out, setup_out[-1500:]

    failures, glyphs = [], []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        text = "".join(o.get("text", "") for o in cell.outputs)
        glyphs += [index] if "missing from font" in text else []
        errors = [o for o in cell.outputs if o.output_type == "error"]
        if not _is_exercise(cell):
            failures += [(index, f"{e.ename}: {e.evalue}") for e in errors]
        else:
            failures += [(index, e.ename) for e in errors if e.ename != "NotImplementedError"]
    assert not failures, failures
    assert not glyphs, f"cells that warned of a missing glyph: {glyphs}"


def _setup_only(notebook: Path, folder: Path) -> Path:
    """The notebook cut after its setup cell: what the no-clone install paths need to run."""
    nb = nbformat.read(notebook, as_version=4)
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    nb.cells = nb.cells[: code[1] + 1]
    target = folder / notebook.name
    nbformat.write(nb, target)
    return target


@pytest.mark.parametrize("path", ["git-spec", "clone-beside"])
def test_the_no_clone_paths_the_readmes_give_install_the_helpers(path, fresh_runtime, tmp_path, monkeypatch):
    """Colab without a clone of the course around the notebook, as both READMEs describe it:
    `%env TRAINPERF_SPEC=git+<repository>.git` (pip installs the repository), or
    `!git clone <repository>` into the notebook's folder (the setup cell finds the clone beside
    it and installs it editable). pip prints lines, not a redrawn progress bar."""
    import papermill

    if fresh_runtime["version"] != "3.11":
        pytest.skip("one Python version proves the install paths")
    vpython = fresh_runtime["python"]
    run([vpython, "-m", "pip", "uninstall", "-y", "-q", "trainperf-course"])
    repo = envkit.copy_project(tmp_path / "repository")
    run(["git", "init", "-q", str(repo)])
    run(["git", "-C", str(repo), "add", "-A"])
    run(
        [
            "git",
            "-C",
            str(repo),
            "-c",
            "user.name=course",
            "-c",
            "user.email=course@example.org",
            "commit",
            "-q",
            "-m",
            "snapshot",
        ]
    )
    folder = tmp_path / "content"
    folder.mkdir()
    monkeypatch.delenv("TRAINPERF_SPEC", raising=False)
    if path == "git-spec":
        monkeypatch.setenv("TRAINPERF_SPEC", f"git+{repo.as_uri()}")
    else:
        run(["git", "clone", "-q", str(repo), str(folder / "trainperf-course")])
    notebook = _setup_only(ROOT / "notebooks" / "01_roofline" / "01_roofline.ipynb", folder)
    monkeypatch.setenv("JUPYTER_PATH", str(fresh_runtime["jupyter_path"]))
    monkeypatch.delenv("PYTHONPATH", raising=False)
    out = tmp_path / "executed.ipynb"
    papermill.execute_notebook(
        str(notebook),
        str(out),
        kernel_name=fresh_runtime["kernel"],
        cwd=str(folder),
        progress_bar=False,
        execution_timeout=CELL_TIMEOUT_S,
    )
    setup = [c for c in nbformat.read(out, as_version=4).cells if c.cell_type == "code"][1]
    shown = "".join(o.get("text", "") for o in setup.outputs)
    assert "Successfully installed" in shown and "device: cpu" in shown, shown[-1500:]
    assert "\r" not in shown and "━" not in shown  # --progress-bar off: no redrawn bar
    dist = next(envkit.site_packages(vpython).glob("trainperf_course-*.dist-info"), None)
    direct = json.loads((dist / "direct_url.json").read_text())
    if path == "git-spec":
        assert direct["url"] == repo.as_uri() and direct["vcs_info"]["vcs"] == "git", direct
    else:
        clone = (folder / "trainperf-course").resolve()
        assert direct["url"] == clone.as_uri() and direct["dir_info"].get("editable") is True, direct

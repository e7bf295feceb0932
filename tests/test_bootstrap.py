"""The README's two commands, ``./run-notebooks`` and ``./run-tests`` (scripts/bootstrap.py).

The decisions (which environment, which torch build) are tested as functions; the commands are
run as a user runs them: in this environment (every step finds its work done), and from nothing
in a scratch checkout whose torch and course are small local stand-ins, so that making the
environment, installing and skipping on the second run are real but take seconds. CI's own
``.ci/run`` runs ``./run-tests`` from a clean clone with the real torch and course.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import envkit
import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.env
_spec = importlib.util.spec_from_file_location("bootstrap", ROOT / "scripts" / "bootstrap.py")
bootstrap = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("bootstrap", bootstrap)  # dataclasses look their module up
_spec.loader.exec_module(bootstrap)


def _clean_environ(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "CONDA_PREFIX")}
    return {**env, **extra}


def test_an_active_environment_is_used(tmp_path):
    (tmp_path / "env" / "bin").mkdir(parents=True)
    (tmp_path / "env" / "bin" / "python").touch()
    chosen = bootstrap.choose_environment(
        tmp_path, {"VIRTUAL_ENV": str(tmp_path / "env")}, "python3", base_has_torch=False
    )
    assert chosen.python == tmp_path / "env" / "bin" / "python" and chosen.create is None
    conda = bootstrap.choose_environment(
        tmp_path, {"CONDA_PREFIX": str(tmp_path / "env")}, "python3", base_has_torch=False
    )
    assert conda.python == chosen.python and "active" in conda.why


def test_the_checkouts_venv_is_made_once_and_keeps_a_system_torch(tmp_path):
    new = bootstrap.choose_environment(tmp_path, {}, "/usr/bin/python3", base_has_torch=False)
    assert new.create == ["/usr/bin/python3", "-m", "venv", str(tmp_path / ".venv")]
    seeing = bootstrap.choose_environment(tmp_path, {}, "/usr/bin/python3", base_has_torch=True)
    assert "--system-site-packages" in seeing.create, "a system torch (Colab's) must stay visible"
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "python").touch()
    again = bootstrap.choose_environment(
        tmp_path, {"VIRTUAL_ENV": str(tmp_path / "gone")}, "/usr/bin/python3", base_has_torch=True
    )
    assert again.create is None and again.python == tmp_path / ".venv" / "bin" / "python"


def test_torch_is_the_cpu_build_without_a_gpu_and_the_settings_win():
    python = Path("/env/bin/python")
    cpu = bootstrap.torch_install_command(python, {}, has_gpu=False)
    assert cpu == [str(python), "-m", "pip", "install", "torch", "--index-url", bootstrap.CPU_INDEX]
    assert "--index-url" not in bootstrap.torch_install_command(python, {}, has_gpu=True)
    pinned = bootstrap.torch_install_command(
        python, {"TRAINPERF_TORCH": "torch==2.13.0", "TRAINPERF_TORCH_INDEX": "default"}, False
    )
    assert pinned == [str(python), "-m", "pip", "install", "torch==2.13.0"]
    mirror = bootstrap.torch_install_command(python, {"TRAINPERF_TORCH_INDEX": "https://m/whl"}, True)
    assert mirror[-2:] == ["--index-url", "https://m/whl"]


def test_the_course_check_names_what_is_missing(tmp_path):
    assert bootstrap.missing_course_parts(Path(sys.executable), ROOT) == [], (
        "this test environment is an editable install of the checkout with every requirement"
    )
    other = tmp_path / "elsewhere"
    other.mkdir()
    shutil.copy(ROOT / "pyproject.toml", other)
    assert bootstrap.missing_course_parts(Path(sys.executable), other) == [
        "trainperf-course is not an editable install of this checkout"
    ]
    wanted = bootstrap.course_requirements(ROOT)
    assert any(line.startswith("nbgrader") for line in wanted) and "torch>=2.4" in wanted
    assert not any(line.startswith(("pytest", "ruff", "mypy")) for line in wanted), (
        "the development tools are in the dev extra, not the learner's course extra"
    )
    dev = bootstrap.course_requirements(ROOT, "dev")
    assert set(wanted) < set(dev) and any(line.startswith("mypy") for line in dev)
    assert bootstrap.missing_course_parts(Path(sys.executable), ROOT, "dev") == []


def test_the_commands_run_their_job_in_this_environment():
    env = _clean_environ(VIRTUAL_ENV=sys.prefix)
    refused = subprocess.run(
        [str(ROOT / "run-notebooks"), "--chapters", "99"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "torch" in refused.stdout and "is installed: kept" in refused.stdout
    assert "the course is installed and current: kept" in refused.stdout
    assert "Unknown chapter '99'" in refused.stderr, "arguments go on to trainperf run"
    tests = subprocess.run(
        [str(ROOT / "run-tests"), "--version"], env=env, capture_output=True, text=True, timeout=300
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "running python -m ruff check\n" in tests.stdout and "running python -m mypy\n" in tests.stdout
    assert "running python -m ruff format --check\n" in tests.stdout
    assert "pytest" in tests.stdout + tests.stderr
    bad = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bootstrap.py"), "lint"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and len(bad.stderr.splitlines()) == 1, bad.stderr


def _project(name: str, extra: str = "") -> str:
    """A pyproject.toml for a small stand-in package built by setuptools."""
    return (
        f'[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "{name}"\nversion = "0.0.1"\n{extra}'
    )


def _scratch_checkout(tmp_path: Path) -> tuple[Path, Path]:
    """A checkout with the real bootstrap, a stand-in course and a stand-in torch."""
    root = tmp_path / "course"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "bootstrap.py", root / "scripts")
    shutil.copy(ROOT / "run-notebooks", root)
    (root / "src" / "trainperf").mkdir(parents=True)
    (root / "src" / "trainperf" / "__init__.py").touch()
    (root / "src" / "trainperf" / "cli.py").write_text(
        "import sys, torch\nprint('stand-in trainperf', sys.argv[1:], torch.__file__)\n"
    )
    (root / "pyproject.toml").write_text(
        _project(
            "trainperf-course",
            'dependencies = ["packaging"]\n[project.optional-dependencies]\ncourse = []\nfast = []\n',
        )
    )
    torch = tmp_path / "standin-torch"
    (torch / "torch").mkdir(parents=True)
    (torch / "torch" / "__init__.py").touch()
    (torch / "pyproject.toml").write_text(_project("torch"))
    return root, torch


def test_run_notebooks_sets_up_a_fresh_checkout_then_skips_what_is_done(tmp_path):
    root, torch = _scratch_checkout(tmp_path)
    env = _clean_environ(
        TRAINPERF_TORCH=str(torch),
        TRAINPERF_TORCH_INDEX="default",
        PYTHON=envkit.base_python(),
        PATH="/usr/bin:/bin",
    )
    first = subprocess.run(
        [str(root / "run-notebooks"), "--jobs", "2"], env=env, capture_output=True, text=True, timeout=600
    )
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    out = first.stdout
    assert f"making a new environment ({root / '.venv'})" in out
    assert "installing torch (" in out and "installing the course (trainperf-course is not installed)" in out
    assert "stand-in trainperf ['run', '--jobs', '2']" in out, "the job runs in the new .venv"
    assert str(root / ".venv") in out.split("stand-in trainperf")[1], "torch comes from the .venv"
    second = subprocess.run(
        [str(root / "run-notebooks")], env=env, capture_output=True, text=True, timeout=600
    )
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "using the checkout's environment" in second.stdout
    assert "torch 0.0.1 is installed: kept" in second.stdout
    assert "the course is installed and current: kept" in second.stdout
    assert "installing" not in second.stdout


def test_a_failed_install_is_one_line_with_what_to_do(tmp_path):
    root, _ = _scratch_checkout(tmp_path)
    env = _clean_environ(
        TRAINPERF_TORCH=str(tmp_path / "no-such-torch"),
        TRAINPERF_TORCH_INDEX="default",
        PYTHON=envkit.base_python(),
    )
    failed = subprocess.run(
        [str(root / "run-notebooks")], env=env, capture_output=True, text=True, timeout=600
    )
    assert failed.returncode == 1
    last = failed.stderr.strip().splitlines()[-1]
    assert last.startswith("run-notebooks: installing torch") and "install torch yourself" in last, last


@pytest.mark.parametrize("name", ["run-notebooks", "run-tests"])
def test_the_commands_are_executable_and_documented(name):
    assert os.access(ROOT / name, os.X_OK), f"{name} must be executable (git update-index --chmod=+x)"
    for readme in ("README.md", "README.zh.md"):
        assert f"./{name}" in (ROOT / readme).read_text(encoding="utf-8"), f"{readme} lacks ./{name}"
    assert "./run-tests" in (ROOT / ".ci" / "run").read_text(), "CI runs the README's second command"

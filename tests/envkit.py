"""Fresh virtual environments for the learner-environment tests (test_env_*.py).

Not a test module: helpers to find an interpreter, build a wheel of the checkout, and make a
clean venv. torch is installed once per test session into a torch-only folder and each venv
sees it through a ``.pth`` file, the way Colab's preinstalled torch sits outside the learner's
own packages: installing it into every venv would cost minutes of this 2-core machine each.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TORCH_SPEC = os.environ.get("TRAINPERF_FRESH_TORCH", "torch==2.13.0")  # CI's CPU build
_TORCH_SITES: dict[str, Path] = {}


def run(cmd: list[str], timeout: float = 900, **kwargs) -> subprocess.CompletedProcess:
    """Run a command; on failure raise with its last output lines (not a bare exit code)."""
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, **kwargs)
    if done.returncode != 0:
        tail = (done.stdout + done.stderr)[-4000:]
        raise RuntimeError(f"command failed ({done.returncode}): {' '.join(map(str, cmd))}\n{tail}")
    return done


def base_python() -> str:
    """The interpreter behind the current environment (not the venv's own python)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for folder in (sys.base_prefix, sys.base_exec_prefix):
        candidate = Path(folder) / "bin" / version
        if candidate.exists():
            return str(candidate)
    return sys.executable


def find_python(version: str) -> str | None:
    """An interpreter for ``version`` ("3.12"): on PATH, in /usr/bin, or a pyenv install."""
    if f"{sys.version_info.major}.{sys.version_info.minor}" == version:
        return base_python()
    pyenv_root = os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))
    candidates = [
        shutil.which(f"python{version}"),
        f"/usr/bin/python{version}",
        *sorted(glob.glob(f"{pyenv_root}/versions/{version}.*/bin/python{version}")),
    ]
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            # a pyenv shim without that version installed fails here
            if subprocess.run([candidate, "-c", "import venv"], capture_output=True).returncode == 0:
                return candidate
    return None


def torch_wheel_is_local(python: str) -> bool:
    """Whether ``python``'s pip finds TORCH_SPEC without an index, i.e. on this machine's disk."""
    probe = subprocess.run(
        [
            python,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--no-index",
            "--no-deps",
            "--ignore-installed",
            "-q",
            TORCH_SPEC,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return probe.returncode == 0


def _requirement_closure(name: str) -> list:
    """The installed distributions ``name`` needs at run time, itself included."""
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    seen: dict[str, metadata.Distribution] = {}
    todo = [name]
    while todo:
        key = canonicalize_name(todo.pop())
        if key in seen:
            continue
        try:
            seen[key] = dist = metadata.distribution(key)
        except metadata.PackageNotFoundError:
            continue
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return list(seen.values())


def _link_installed_torch(target: Path) -> bool:
    """Link this environment's own torch (and only what it needs) into ``target``: the same
    files pip installed for CI, without a second install. False where that is not possible."""
    try:
        import torch  # noqa: F401

        dists = _requirement_closure("torch")
    except ImportError:
        return False
    wanted = TORCH_SPEC.split("==")[-1] if "==" in TORCH_SPEC else None
    torch_dist = next(d for d in dists if d.metadata["Name"].lower() == "torch")
    if wanted and torch_dist.version.split("+")[0] != wanted.split("+")[0]:
        return False
    target.mkdir(parents=True)
    for dist in dists:
        for top in {f.parts[0] for f in dist.files or [] if f.parts[0] not in ("..", "__pycache__")}:
            source = Path(dist.locate_file(top))
            if source.exists() and not (target / top).exists():
                (target / top).symlink_to(source)
    return (target / "torch").exists()


def torch_site(python: str, base: Path) -> Path:
    """A folder holding torch and its own needs (nothing else) for ``python``; one per session.

    For this interpreter's Python version it links the torch this environment already has
    (CI installed it from TORCH_SPEC a minute earlier); otherwise pip installs TORCH_SPEC."""
    if python not in _TORCH_SITES:
        version = run([python, "-c", "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"])
        version = version.stdout.strip()
        target = base / f"torch-site-py{version}"
        if not (target / "torch").exists():
            same = version == f"{sys.version_info[0]}.{sys.version_info[1]}"
            if not (same and _link_installed_torch(target)):
                shutil.rmtree(target, ignore_errors=True)
                run([python, "-m", "pip", "install", "-q", "--target", target, TORCH_SPEC], timeout=1800)
        _TORCH_SITES[python] = target
    return _TORCH_SITES[python]


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def make_venv(python: str, venv: Path, torch_dir: Path | None = None) -> Path:
    """A clean venv from ``python``; with ``torch_dir``, torch is importable in it."""
    run([python, "-m", "venv", venv])
    if torch_dir is not None:
        purelib = run([venv_python(venv), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
        Path(purelib.stdout.strip(), "preinstalled-torch.pth").write_text(f"{torch_dir}\n")
    return venv_python(venv)


def copy_project(dest: Path) -> Path:
    """The files a build needs (and binder/), copied out of the shared checkout: a build must
    not write build/ or *.egg-info into it."""
    dest.mkdir(parents=True, exist_ok=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc")
    for name in ("pyproject.toml", "README.md", "LICENSE"):  # the build reads all three
        shutil.copy2(ROOT / name, dest / name)
    for name in ("src", "binder"):
        shutil.copytree(ROOT / name, dest / name, ignore=ignore)
    return dest


def build_wheel(out: Path) -> Path:
    """``pip wheel --no-deps`` of the checkout (its current files), into ``out``."""
    source = copy_project(out / "source")
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", out, source], timeout=900)
    wheels = sorted(out.glob("trainperf_course-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def site_packages(python: Path) -> Path:
    return Path(
        run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    )

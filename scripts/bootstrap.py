"""Set up what is missing, then run the course's main job or its tests.

Called by the two commands at the top of the checkout (``./run-notebooks`` and ``./run-tests``);
standard library only, because it runs before anything is installed. Each step says what it
does in one line, and is skipped when what it makes is already there:

1. the Python environment: the active virtual or conda environment, else ``.venv`` in the
   checkout (made here if missing; it sees the system's packages when the system Python
   already has torch, so a preinstalled torch, as in Colab, is kept);
2. torch: kept when installed; otherwise pip installs it, from PyTorch's CPU wheel index when
   no NVIDIA GPU answers ``nvidia-smi`` (PyPI's default torch is the multi-gigabyte CUDA build).
   An index other than pip's own is probed first with one quick request: when it cannot be
   reached, one line says so and torch comes from pip's own index instead (an index set in
   ``TRAINPERF_TORCH_INDEX`` is not replaced: the set-up stops, saying what to do); when it
   answers, pip gets it with few retries, so a flaky index fails in seconds, not minutes;
3. the course, ``pip install -e ".[course]"`` (the ``dev`` extra for the tests: the course plus
   pytest, ruff, mypy and the release tools), unless every requirement is already met by an
   editable install of this checkout;
4. the job: ``trainperf run ARGS`` (every notebook headless), or ``ruff check``, ``ruff format
   --check``, ``mypy`` (their paths and rules are in pyproject.toml) and ``pytest ARGS``.

Settings (environment variables): ``TRAINPERF_TORCH`` the pip spec for torch (default
``torch``), ``TRAINPERF_TORCH_INDEX`` the index it comes from (a URL, or ``default`` for pip's
own configured index; default: PyTorch's CPU index without a GPU, pip's index with one).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
MODES = {"notebooks": "run-notebooks", "tests": "run-tests"}
# The extra each mode installs: the notebooks need the course tooling; the tests its dev tools too.
EXTRAS = {"notebooks": "course", "tests": "dev"}
OLDEST_PYTHON = (3, 10)
PROBE_TIMEOUT_S = 5.0  # the longest the probe of a torch index waits, name lookup included
# pip's options for a torch index other than pip's own: pip's defaults (5 retries with growing
# pauses, for every file of torch and each of its dependencies) turn an index that fails into
# minutes of "Retrying" lines
INDEX_PIP_OPTIONS = ["--retries", "1", "--timeout", "15"]


class SetupError(Exception):
    """A step that cannot go on: the message is one line saying what to do."""


@dataclass
class Environment:
    python: Path  # the interpreter every later step uses
    why: str  # for the log line
    create: list[str] | None = None  # the command that makes it, when it does not exist yet


def choose_environment(
    root: Path, environ: dict[str, str], base_python: str, base_has_torch: bool
) -> Environment:
    """The environment to set up: an active one, else the checkout's ``.venv``."""
    for variable in ("VIRTUAL_ENV", "CONDA_PREFIX"):
        prefix = environ.get(variable)
        if prefix and (Path(prefix) / "bin" / "python").exists():
            return Environment(Path(prefix) / "bin" / "python", f"the active environment ({prefix})")
    venv = root / ".venv"
    python = venv / "bin" / "python"
    if python.exists():
        return Environment(python, f"the checkout's environment ({venv})")
    create = [base_python, "-m", "venv"]
    why = f"a new environment ({venv})"
    if base_has_torch:  # keep the system's torch (Colab's, a cluster module's) visible
        create.append("--system-site-packages")
        why += ", which sees the system's torch"
    return Environment(python, why, [*create, str(venv)])


def torch_install_command(python: Path, environ: dict[str, str], has_gpu: bool) -> list[str]:
    """pip's command for torch: the CPU build unless a GPU answers or the index is set."""
    spec = environ.get("TRAINPERF_TORCH", "torch")
    index = environ.get("TRAINPERF_TORCH_INDEX") or ("default" if has_gpu else CPU_INDEX)
    command = [str(python), "-m", "pip", "install", spec]
    if index != "default":
        command += ["--index-url", index]
    return command


def _why(error: BaseException) -> str:
    """An error of the probe in a few words ("Name or service not known", "Connection refused")."""
    reason = getattr(error, "reason", None)
    if isinstance(error, urllib.error.URLError) and isinstance(reason, BaseException):
        return _why(reason)
    text = getattr(error, "strerror", None) or str(reason or error) or type(error).__name__
    return str(text).strip()


def probe_index(url: str, timeout: float = PROBE_TIMEOUT_S, proxy: str | None = None) -> str:
    """Why pip could not reach the package index at ``url``, in a few words; ``""`` when it can.

    One HEAD request. Any HTTP answer, an error status included, means the server is reachable
    (pip then says what it lacks), and so does a TLS error: pip has certificate settings of its
    own. The whole probe, name lookup included, takes at most ``timeout`` seconds. ``proxy``:
    pip's proxy (``PIP_PROXY``); the usual ``https_proxy`` variables apply as they do to pip.
    Only ``http(s)://`` URLs are probed: pip reads a local index without a network.
    """
    if not url.lower().startswith(("http://", "https://")):
        return ""
    parts = urllib.parse.urlsplit(url)  # credentials in the URL: not needed to see a server answer
    url = urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
    answer: list[str] = []

    def attempt() -> None:
        handlers = [urllib.request.ProxyHandler({"http": proxy, "https": proxy})] if proxy else []
        request = urllib.request.Request(
            url.rstrip("/") + "/", method="HEAD", headers={"User-Agent": "trainperf-bootstrap"}
        )
        try:
            with urllib.request.build_opener(*handlers).open(request, timeout=timeout):
                answer.append("")
        except urllib.error.HTTPError:
            answer.append("")  # the server answered
        except urllib.error.URLError as error:
            answer.append("" if isinstance(error.reason, ssl.SSLError) else _why(error))
        except ssl.SSLError:
            answer.append("")
        except (OSError, ValueError, http.client.HTTPException) as error:
            answer.append(_why(error))

    thread = threading.Thread(target=attempt, name="probe-index", daemon=True)
    thread.start()
    thread.join(timeout)
    return answer[0] if answer else f"no answer within {timeout:g} s"


def has_nvidia_gpu() -> bool:
    """Whether ``nvidia-smi`` lists a GPU (the CUDA build of torch is then the right one)."""
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return listed.returncode == 0 and "GPU" in listed.stdout


# Run by the environment's own Python: torch's version without importing it (seconds saved).
_TORCH_PROBE = """
import importlib.metadata as m, importlib.util as u
print(m.version('torch') if u.find_spec('torch') else '')
"""

# Run by the environment's own Python: what of the checkout's requirements is not met. It
# prints one missing item a line; nothing printed means the course is installed and current.
_COURSE_PROBE = r"""
import json, re, sys
from importlib import metadata
root, wanted = sys.argv[1], json.loads(sys.argv[2])
try:
    dist = metadata.distribution('trainperf-course')
    url = json.loads(dist.read_text('direct_url.json') or '{}')
except metadata.PackageNotFoundError:
    print('trainperf-course is not installed'); sys.exit()
if not url.get('dir_info', {}).get('editable') or url.get('url', '').rstrip('/') != root:
    print('trainperf-course is not an editable install of this checkout'); sys.exit()
try:
    from packaging.requirements import Requirement
except ImportError:
    print('packaging is not installed'); sys.exit()
for line in wanted:
    req = Requirement(line)
    if req.name == 'trainperf-course' or (req.marker and not req.marker.evaluate()):
        continue
    try:
        version = metadata.version(req.name)
    except metadata.PackageNotFoundError:
        print(f'{req.name} is not installed'); continue
    if not req.specifier.contains(version, prereleases=True):
        print(f'{req.name} {version} does not satisfy {req}')
"""


def course_requirements(root: Path, extra: str = "course") -> list[str]:
    """The requirements ``pip install -e ".[EXTRA]"`` asks for, read from pyproject.toml."""
    try:
        import tomllib
    except ImportError:  # Python 3.10: no tomllib, so always install
        return []
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project.get("optional-dependencies", {})
    wanted, todo, seen = list(project.get("dependencies", [])), [extra], set()
    while todo:  # an extra may name the project's own others: trainperf-course[fast,site]
        extra = todo.pop()
        seen.add(extra)
        for line in extras.get(extra, []):
            own = re.fullmatch(rf"{re.escape(project['name'])}\[([^\]]+)\]", line.replace(" ", ""))
            if own:
                todo += [e for e in own.group(1).split(",") if e not in seen]
            else:
                wanted.append(line)
    return wanted


def missing_course_parts(python: Path, root: Path, extra: str = "course") -> list[str]:
    """What the environment lacks of the course and ``extra`` (empty: nothing to install)."""
    wanted = course_requirements(root, extra)
    if not wanted:
        return ["this Python cannot read pyproject.toml"]
    probe = subprocess.run(
        [str(python), "-c", _COURSE_PROBE, root.as_uri(), json.dumps(wanted)], capture_output=True, text=True
    )
    if probe.returncode != 0:
        return ["the environment's Python could not check the installed course"]
    return probe.stdout.splitlines()


def job_commands(mode: str, python: Path, args: list[str]) -> list[list[str]]:
    """The commands of the job itself, after the set-up."""
    if mode == "notebooks":
        return [[str(python), "-m", "trainperf.cli", "run", *args]]
    return [
        [str(python), "-m", "ruff", "check"],
        [str(python), "-m", "ruff", "format", "--check"],
        [str(python), "-m", "mypy"],
        [str(python), "-m", "pytest", *args],
    ]


def _say(name: str, text: str) -> None:
    print(f"{name}: {text}", flush=True)


def _step(name: str, what: str, command: list[str], env: dict[str, str], advice: str) -> None:
    """Run one set-up command, its output shown; a failure is one line saying what to do."""
    _say(name, what)
    start = time.monotonic()
    code = subprocess.run(command, cwd=ROOT, env=env).returncode
    if code != 0:
        raise SetupError(f"{what.rstrip('.')} failed (exit {code}); {advice}")
    _say(name, f"  done in {time.monotonic() - start:.0f} s")


def _index_of(command: list[str]) -> str | None:
    """The ``--index-url`` of a pip command; None for pip's own index."""
    return command[command.index("--index-url") + 1] if "--index-url" in command else None


def _reachable_index(
    name: str, command: list[str], index: str, environ: dict[str, str], gpu: bool
) -> list[str]:
    """``command`` with few retries when ``index`` answers the probe; pip's own index in one
    line when the course's default index does not; a :class:`SetupError` when the index the
    user set in ``TRAINPERF_TORCH_INDEX`` does not."""
    why = probe_index(index, proxy=environ.get("PIP_PROXY") or None)
    if not why:
        return [*command, *INDEX_PIP_OPTIONS]
    if environ.get("TRAINPERF_TORCH_INDEX"):
        raise SetupError(
            f"TRAINPERF_TORCH_INDEX={index} cannot be reached ({why}); check the URL, or set "
            "TRAINPERF_TORCH_INDEX=default to install torch from pip's own index"
        )
    _say(
        name,
        f"PyTorch's index {index} cannot be reached ({why}): installing torch from pip's own "
        "index instead (on Linux that is the large CUDA build; for the CPU build set "
        "TRAINPERF_TORCH_INDEX to a mirror of PyTorch's CPU index, or install torch first)",
    )
    return torch_install_command(Path(command[0]), {**environ, "TRAINPERF_TORCH_INDEX": "default"}, gpu)


def set_up(name: str, environ: dict[str, str], extra: str = "course") -> tuple[Path, dict[str, str]]:
    """Steps 1-3 (the course with ``extra``); returns the environment's Python and the variables
    the job runs with."""
    if sys.version_info < OLDEST_PYTHON:
        raise SetupError(
            f"Python {sys.version_info[0]}.{sys.version_info[1]} is too old; the course "
            "needs 3.10 or newer (set PYTHON=/path/to/python3.x and run this again)"
        )
    env = {**environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
    from importlib.util import find_spec

    chosen = choose_environment(ROOT, environ, sys.executable, find_spec("torch") is not None)
    if chosen.create:
        _step(
            name,
            f"making {chosen.why}.",
            chosen.create,
            env,
            "check that this Python has its venv module (Debian: apt install python3-venv)",
        )
    else:
        _say(name, f"using {chosen.why}")
    bin_dir = str(chosen.python.parent)
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")  # its trainperf, jupyter, pytest
    if "CONDA_PREFIX" not in environ:
        env["VIRTUAL_ENV"] = str(chosen.python.parent.parent)

    torch_version = subprocess.run(
        [str(chosen.python), "-c", _TORCH_PROBE], capture_output=True, text=True
    ).stdout.strip()
    if torch_version:
        _say(name, f"torch {torch_version} is installed: kept")
    else:
        gpu = has_nvidia_gpu()
        command = torch_install_command(chosen.python, environ, gpu)
        index = _index_of(command)
        if index is not None:
            command = _reachable_index(name, command, index, environ, gpu)
            index = _index_of(command)
        if gpu and index is None:
            build = "an NVIDIA GPU answered, so the CUDA build, "
        elif index == CPU_INDEX:
            build = "no NVIDIA GPU, so the CPU build, "
        else:
            build = ""
        source = index or "pip's index"
        _step(
            name,
            f"installing torch ({build}from {source}).",
            command,
            env,
            "install torch yourself (https://pytorch.org/get-started/locally/) and run this "
            "again, or set TRAINPERF_TORCH_INDEX to an index that has it",
        )

    missing = missing_course_parts(chosen.python, ROOT, extra)
    if missing:
        _step(
            name,
            f"installing the course ({missing[0]}).",
            [str(chosen.python), "-m", "pip", "install", "-e", f"{ROOT}[{extra}]"],
            env,
            "read pip's message above; a slow or blocked PyPI: see the README, 'A slow or "
            "blocked connection to PyPI'",
        )
    else:
        _say(name, "the course is installed and current: kept")
    return chosen.python, env


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in MODES:
        print(
            f"bootstrap: the first argument must be one of {', '.join(MODES)}; use ./run-notebooks "
            "or ./run-tests",
            file=sys.stderr,
        )
        return 2
    mode, args = argv[0], argv[1:]
    name = MODES[mode]
    try:
        python, env = set_up(name, dict(os.environ), EXTRAS[mode])
    except SetupError as error:
        print(f"{name}: {error}", file=sys.stderr)
        return 1
    for command in job_commands(mode, python, args):
        _say(
            name,
            "running "
            + " ".join(Path(command[0]).name if i == 0 else part for i, part in enumerate(command)),
        )
        code = subprocess.run(command, cwd=ROOT, env=env).returncode
        if code != 0:
            return code
    return 0


if __name__ == "__main__":
    sys.exit(main())

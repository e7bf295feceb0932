"""Where a report's numbers come from: when, by what command, on what, with which software.

A number without its machine and software is hard to trust or to reproduce, so every capstone
report header carries these fields (:func:`provenance`), filled where the report is built.
"""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch


def cpu_model() -> str:
    """The CPU's model name as the OS reports it (``/proc/cpuinfo`` on Linux), else the
    platform's processor string, else the machine type."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def device_model(device: str = "cpu") -> str:
    """``device``'s model: the GPU's name on CUDA, the CPU's model otherwise."""
    if str(device).startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device))
    return cpu_model()


def _command() -> str:
    argv0 = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    if "ipykernel" in argv0 or ("ipykernel" in sys.modules and argv0 in ("", "-c")):
        return "a notebook (Jupyter kernel)"
    if argv0 in ("", "-c"):
        return "python -c (an inline script)"
    return " ".join(["python", argv0, *sys.argv[1:]]) if argv0.endswith(".py") else " ".join(sys.argv)


def _git(folder: Path, *args: str) -> str | None:
    """What ``git -C folder args`` prints, stripped; None when git did not answer."""
    try:
        out = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip()


def _commit() -> str:
    """The checkout's commit where the course runs from a git clone; else how it was installed."""
    here = Path(__file__).resolve()
    for folder in here.parents:
        if (folder / ".git").exists():
            sha = _git(folder, "rev-parse", "--short", "HEAD")
            if sha is None:
                return "a git checkout (commit unknown: git did not answer)"
            if not sha:
                return "a git checkout (commit unknown)"
            dirty = _git(folder, "status", "--porcelain", "--untracked-files=no")
            if dirty is None:
                return f"{sha} (not known whether the tree had uncommitted changes)"
            # numbers measured from a tree with edits are not reproducible from the commit alone
            return f"{sha} + uncommitted changes" if dirty else sha
    return "an installed package (no git checkout)"


def provenance(device: str = "cpu", command: str | None = None, threads: int | None = None) -> dict[str, Any]:
    """Date and time (UTC), command, device model, CPU thread count, the 1-minute load average,
    torch, Python and course version, and the commit (marked when the tree had uncommitted
    changes): what a report header states about where its numbers come from.
    ``threads``: the CPU threads the runs used (default: torch's setting now)."""
    from .. import __version__

    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command or _command(),
        "device_model": device_model(device),
        "threads": threads or torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "load_average_1min": load_average(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "course": __version__,
        "commit": _commit(),
    }


def load_average() -> float | None:
    """The 1-minute load average (programs running or waiting for a CPU), where the OS has one."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def _load_text(load: Any, cpus: Any) -> str:
    """A load average (a number, or ``{"start", "end"}`` of a recording) against the CPU count."""
    if isinstance(load, dict):
        shown = f"{load.get('start')}–{load.get('end')} (start–end)"
    else:
        shown = f"{load}"
    return f"load average {shown} on {cpus} CPUs" if cpus else f"load average {shown}"


def header_line(recorded: dict[str, Any]) -> str:
    """The ``recorded:`` line of a report header; the fields a recording lacks are named as
    not recorded, never shown as '?'."""
    have = lambda key: recorded.get(key) not in (None, "")  # noqa: E731
    parts, missing = [], []
    for key, shown in (
        ("date", "{}"),
        ("command", "{}"),
        ("device_model", "{}"),
        ("threads", "{} CPU threads"),
        ("torch", "torch {}"),
        ("course", "course {}"),
        ("commit", "commit {}"),
    ):
        (parts.append(shown.format(recorded[key])) if have(key) else missing.append(key.replace("_", " ")))
    if have("load_average_1min"):
        parts.append(_load_text(recorded["load_average_1min"], recorded.get("cpu_count")))
    else:
        missing.append("load average")
    if have("where"):
        parts.append(str(recorded["where"]))
    if missing:
        parts.append("not recorded: " + ", ".join(missing))
    return "recorded: " + " · ".join(parts)

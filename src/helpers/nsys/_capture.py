"""A real capture where nsys and a GPU are here, else the shipped EXAMPLE files."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .._validate import flag as _flag
from ._commands import Command, export_command, nsys_available, profile_command, stats_command
from ._examples import example_path


@dataclass
class Capture:
    """Files of one nsys run: the report, its stats CSV and its SQLite export."""

    report: Path
    stats_csv: Path
    sqlite: Path
    commands: list[Command] = field(default_factory=list)


def capture_demo(
    workdir: str | Path | None = None, steps: int = 20, first: int = 10, last: int = 14, timeout_s: int = 120
) -> Capture:
    """Profile ``python -m helpers.nvtx`` (an annotated loop with a cudaProfilerApi window) with
    nsys, then write its stats CSV and SQLite export. Needs ``nsys`` on PATH and a CUDA GPU."""
    if not nsys_available():
        raise RuntimeError("nsys is not on PATH: install Nsight Systems, or use helpers.nsys.example_path().")
    work = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="trainperf-nsys-"))
    work.mkdir(parents=True, exist_ok=True)
    prof = profile_command(
        "-m",
        "helpers.nvtx",
        f"--steps={steps}",
        f"--first={first}",
        f"--last={last}",
        output=str(work / "trace_step"),
        python=sys.executable,
    )
    report = work / "trace_step.nsys-rep"
    stats, export = stats_command(str(report)), export_command(str(report))
    for cmd in (prof, export):
        done = subprocess.run(cmd.argv, capture_output=True, text=True, timeout=timeout_s)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise RuntimeError(f"`{cmd.argv[0]} {cmd.argv[1]}` failed ({done.returncode}): {tail[0]}")
    csv_path = work / "trace_step_stats.csv"
    done = subprocess.run(stats.argv, capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        raise RuntimeError(f"`nsys stats` failed ({done.returncode}): {done.stderr.strip()[:200]}")
    csv_path.write_text(done.stdout)
    return Capture(report, csv_path, work / "trace_step.sqlite", [prof, stats, export])


def example_or_capture(scenario: str = "compute", try_capture: bool = True) -> tuple[Path, Path, str]:
    """(stats CSV, SQLite, what they are): a real capture when asked for and nsys and CUDA are
    here (:func:`capture_demo`), else the shipped EXAMPLE files of ``scenario``."""
    _flag(try_capture=try_capture)
    import torch

    if not nsys_available():
        reason = "nsys is not installed"
    elif not torch.cuda.is_available():
        reason = "no CUDA GPU to profile"
    elif not try_capture:
        reason = "no capture was asked for (quick mode)"
    else:
        try:
            cap = capture_demo()
            return cap.stats_csv, cap.sqlite, f"a real nsys capture in {cap.report.parent}"
        except (RuntimeError, subprocess.TimeoutExpired) as err:
            reason = f"the nsys capture failed ({str(err)[:160]})"
    return (
        example_path(scenario, "stats"),
        example_path(scenario, "sqlite"),
        f"EXAMPLE data in nsys's format (synthetic workload {scenario!r}, not a capture): {reason}",
    )

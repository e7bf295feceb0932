"""Many ranks at once: read or analyse one trace file per rank in a process pool, and sum the
ranks up in a table with a straggler summary.

The pool forks when the calling process has a single thread (fast, nothing to re-import) and
otherwise starts clean workers ("forkserver" / "spawn"), which is what a Jupyter kernel gets.
A file that fails gives one line naming it; the other files are still read.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._validate import flag as _flag
from ._trace import Trace
from ._trace_read import read_trace

POOL_MIN_BYTES = 16 * 2**20  # ~16 MB of (compressed) trace files: below, one process is faster


def _context() -> Any:
    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")


def _guarded(task: tuple[Callable, Path, tuple]) -> tuple[Any, str | None]:
    fn, path, extra = task
    try:
        return fn(path, *extra), None
    except Exception as err:  # noqa: BLE001 - one bad rank must not stop the others; it is named
        text = str(err).splitlines()[0] if str(err) else type(err).__name__
        return None, text if str(path) in text else f"{path}: {type(err).__name__}: {text}"


def run_per_file(
    fn: Callable, files: Sequence[Path], jobs: int | None, *extra: Any
) -> tuple[list[Any], dict[str, str]]:
    """``fn(file, *extra)`` for every file, in ``jobs`` processes (default: one per core, at most
    one per file, and none for less than ``POOL_MIN_BYTES`` of files, where starting workers
    costs more than it saves). Returns (results of the files that worked, in order;
    {file: error line})."""
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise ValueError(f"jobs must be a positive integer (processes), got {jobs!r}")
    if jobs is None:
        small = sum(Path(f).stat().st_size for f in files if Path(f).is_file()) < POOL_MIN_BYTES
        jobs = 1 if small else os.cpu_count() or 1
    jobs = min(jobs, len(files))
    tasks = [(fn, Path(f), extra) for f in files]
    if jobs <= 1:
        outcomes = [_guarded(t) for t in tasks]
    else:
        with ProcessPoolExecutor(jobs, mp_context=_context()) as pool:
            outcomes = list(pool.map(_guarded, tasks))
    done = [res for res, err in outcomes if err is None]
    failed = {str(t[1]): err for t, (_, err) in zip(tasks, outcomes, strict=True) if err is not None}
    return done, failed


def load_many(files: Sequence[Path], jobs: int | None, parser: str | None, keep_args: bool) -> list[Trace]:
    """Read every file (in a pool); any file that fails raises one line naming each of them."""
    _flag(keep_args=keep_args)
    traces, failed = run_per_file(read_trace, files, jobs, parser, keep_args)
    if failed:
        raise ValueError(
            f"{len(failed)} of {len(files)} trace files could not be read: "
            + " | ".join(failed.values())
            + " — fix or remove them, or use timeline.analyse_ranks(folder) to analyse "
            "the others"
        )
    return traces


@dataclass(frozen=True)
class RankRow:
    """One rank's figures: HTA's temporal breakdown and overlap over the whole trace, and the
    mean over its steps of step time, exposed communication and own time (step − exposed)."""

    rank: int | None
    file: str
    parser: str
    events: int
    steps: int
    basis: str  # "gpu kernels" or "cpu threads"
    kernel_time_us: float
    idle_pct: float
    compute_pct: float
    non_compute_pct: float
    overlap_pct: float | None  # None: the rank has no communication
    step_us: float
    exposed_comm_us: float
    own_us: float


@dataclass(frozen=True)
class RankReport:
    """Per-rank rows (sorted by rank), the files that failed, and the straggler summary:
    the slowest rank (most own time per step, :func:`timeline.slowest_rank`; whether it is a
    straggler beyond the noise needs the steps, :func:`timeline.straggler`) and the
    spread — (min, median, max) — of mean step time and of exposed communication."""

    source: str
    rows: list[RankRow]
    failed: dict[str, str] = field(default_factory=dict)

    @property
    def slowest(self) -> int | None:
        return max(self.rows, key=lambda r: r.own_us).rank if self.rows else None

    @staticmethod
    def _spread(values: list[float]) -> tuple[float, float, float] | None:
        return (min(values), statistics.median(values), max(values)) if values else None

    @property
    def step_spread_us(self) -> tuple[float, float, float] | None:
        return self._spread([r.step_us for r in self.rows])

    @property
    def exposed_spread_us(self) -> tuple[float, float, float] | None:
        return self._spread([r.exposed_comm_us for r in self.rows])

    def summary(self) -> str:
        """The straggler summary in one line."""
        if not self.rows:
            return f"no rank of {self.source} could be analysed"
        ms = lambda t: "/".join(f"{v / 1e3:.2f}" for v in t)  # noqa: E731
        slow = next(r for r in self.rows if r.rank == self.slowest)
        return (
            f"{len(self.rows)} ranks; slowest rank {self.slowest} (own time {slow.own_us / 1e3:.2f} "
            f"ms per step); step time min/median/max {ms(self.step_spread_us)} ms; exposed "
            f"communication min/median/max {ms(self.exposed_spread_us)} ms"
        )

    def __str__(self) -> str:
        lines = [
            f"{'rank':>4} {'events':>8} {'steps':>5} {'kernel ms':>10} {'idle%':>6} {'comp%':>6} "
            f"{'non%':>6} {'overlap%':>8} {'step ms':>8} {'exposed':>8} {'own ms':>8}  basis"
        ]
        for r in self.rows:
            ov = "-" if r.overlap_pct is None else f"{r.overlap_pct:.2f}"
            lines.append(
                f"{r.rank!s:>4} {r.events:>8} {r.steps:>5} {r.kernel_time_us / 1e3:10.2f} "
                f"{r.idle_pct:6.2f} {r.compute_pct:6.2f} {r.non_compute_pct:6.2f} {ov:>8} "
                f"{r.step_us / 1e3:8.2f} {r.exposed_comm_us / 1e3:8.2f} {r.own_us / 1e3:8.2f}  "
                f"{r.basis}"
            )
        lines.append(self.summary())
        lines += [f"failed: {err}" for err in self.failed.values()]
        return "\n".join(lines)


def rank_report(source: str, rows: list[RankRow], failed: dict[str, str]) -> RankReport:
    rows = sorted(rows, key=lambda r: (r.rank is None, r.rank if r.rank is not None else 0, r.file))
    return RankReport(source, rows, failed)

"""``trainperf run``: execute solution notebooks headless with papermill, in parallel."""

from __future__ import annotations

import os
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

from .course import chapter_notebook, chapters


@dataclass
class RunResult:
    chapter: str
    device: str
    seconds: float
    status: str  # "ok" or "FAILED"
    output: str
    detail: str = ""  # for a failure: which cell and what it raised


def _failure_detail(exc: BaseException, executed: Path) -> str:
    """Name the failing cell: its position among code cells, first source line, the error."""
    ename, evalue = getattr(exc, "ename", type(exc).__name__), getattr(exc, "evalue", str(exc))
    where = "before any cell ran"
    if executed.exists():
        try:
            import nbformat

            code = [c for c in nbformat.read(executed, as_version=4).cells
                    if c.cell_type == "code"
                    and "injected-parameters" not in c.metadata.get("tags", [])]
            for number, cell in enumerate(code, 1):
                if any(o.get("output_type") == "error" for o in cell.get("outputs", [])):
                    first = next((ln for ln in cell.source.splitlines() if ln.strip()), "")
                    where = f"code cell {number} ({first[:60]!r})"
                    break
        except Exception:  # the report must not fail because the notebook is unreadable
            pass
    message = str(evalue).strip().splitlines()[0][:200] if evalue else ""
    return f"{where}: {ename}: {message}"


def _quiet_shutdown_manager() -> type:
    """A kernel manager that does not interrupt a kernel it is about to shut down.

    jupyter_client sends SIGINT to the kernel's process group before every shutdown request, to
    break a busy kernel out of its cell. After the last cell papermill's kernel is idle, so that
    signal does nothing useful; when it lands while the kernel is still handling a message (a
    busy machine) or in a child process, the kernel logs "KeyboardInterrupt caught in kernel"
    in a run where every notebook passed. The shutdown request alone stops an idle kernel, and
    jupyter_client still terminates, then kills, one that does not stop in time.
    """
    from jupyter_client.manager import AsyncKernelManager

    class QuietShutdownKernelManager(AsyncKernelManager):
        async def _async_interrupt_kernel(self) -> None:
            if self.shutting_down:
                return
            await super()._async_interrupt_kernel()

    return QuietShutdownKernelManager


def execute(source: Path, target: Path, parameters: dict, cell_timeout: int,
            kernel_manager_class: type | None = None) -> None:
    """Execute one notebook with papermill, the way ``trainperf run`` does (raises on a failing
    cell). ``kernel_manager_class`` is for tests; by default the kernel is not interrupted at
    its shutdown (see ``_quiet_shutdown_manager``)."""
    import papermill

    papermill.execute_notebook(
        str(source), str(target), parameters=parameters, cwd=str(source.parent),
        kernel_name="python3", progress_bar=False, execution_timeout=cell_timeout,
        log_output=False,
        # the kernel's own start-up warnings (e.g. "running over TCP without encryption" on
        # a private loopback connection) mean nothing to a learner; errors still show
        extra_arguments=["--IPKernelApp.log_level=ERROR"],
        kernel_manager_class=kernel_manager_class or _quiet_shutdown_manager(),
    )


def run_one(root: str, chapter: str, out_dir: str, device: str, quick: bool,
            cell_timeout: int) -> RunResult:
    """Execute one chapter's solution notebook (in a worker process)."""
    source = chapter_notebook(Path(root), chapter)
    target = Path(out_dir) / f"{chapter}.ipynb"
    start = time.perf_counter()
    try:
        execute(source, target, {"DEVICE": device, "QUICK": quick}, cell_timeout)
        status, detail = "ok", ""
    except Exception as exc:  # papermill raises PapermillExecutionError for a failing cell
        status, detail = "FAILED", _failure_detail(exc, target)
    return RunResult(chapter, device, time.perf_counter() - start, status, str(target), detail)


def run(root: Path, wanted: list[str] | None, out_dir: Path, device: str = "auto",
        quick: bool = True, jobs: int = 1, cell_timeout: int = 600) -> list[RunResult]:
    """Run chapters; print progress as each starts and ends, then a summary table."""
    chapter_ids = chapters(root, wanted)
    out_dir.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    results: list[RunResult] = []
    total = len(chapter_ids)
    mode = "quick" if quick else "full"
    print(f"running {total} notebook(s), device={device}, {mode}, jobs={jobs} -> {out_dir}",
          flush=True)
    waiting = list(chapter_ids)
    with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        running = set()

        def start_next() -> None:  # one chapter per free worker, so "started" is when it starts
            chapter = waiting.pop(0)
            print(f"  started  {chapter}", flush=True)
            running.add(pool.submit(run_one, str(root), chapter, str(out_dir), device, quick, cell_timeout))

        while waiting and len(running) < max(1, jobs):
            start_next()
        while running:
            done, running = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                result = future.result()
                results.append(result)
                print(f"  [{len(results)}/{total}] {result.chapter}: {result.status} "
                      f"in {result.seconds:.1f} s {result.detail}", flush=True)
                if waiting:
                    start_next()
    results.sort(key=lambda r: r.chapter)
    print(format_table(results), flush=True)
    return results


def format_table(results: list[RunResult]) -> str:
    lines = [f"{'chapter':<24} {'device':<6} {'seconds':>8}  status", "-" * 50]
    for r in results:
        lines.append(f"{r.chapter:<24} {r.device:<6} {r.seconds:>8.1f}  {r.status}")
        if r.detail:
            lines.append(f"    {r.detail}")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use: trainperf run")

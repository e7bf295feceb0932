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
    lang: str = "en"


def executed_path(out_dir: Path, chapter: str, lang: str = "en") -> Path:
    """Where ``trainperf run`` writes a chapter's executed notebook: ``<out>/<chapter>.ipynb``
    for English, ``<out>/<lang>/<chapter>.ipynb`` for another language."""
    return (out_dir if lang == "en" else out_dir / lang) / f"{chapter}.ipynb"


def _failure_detail(exc: BaseException, executed: Path) -> str:
    """Name the failing cell: its position among code cells, first source line, the error."""
    ename, evalue = getattr(exc, "ename", type(exc).__name__), getattr(exc, "evalue", str(exc))
    where = "before any cell ran"
    if executed.exists():
        try:
            import nbformat

            code = [
                c
                for c in nbformat.read(executed, as_version=4).cells
                if c.cell_type == "code" and "injected-parameters" not in c.metadata.get("tags", [])
            ]
            for number, cell in enumerate(code, 1):
                if any(o.get("output_type") == "error" for o in cell.get("outputs", [])):
                    first = next((ln for ln in cell.source.splitlines() if ln.strip()), "")
                    where = f"code cell {number} ({first[:60]!r})"
                    break
        except Exception:  # noqa: BLE001 — the report must not fail because the notebook is unreadable
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


def execute(
    source: Path,
    target: Path,
    parameters: dict,
    cell_timeout: int,
    kernel_manager_class: type | None = None,
    cwd: Path | None = None,
) -> None:
    """Execute one notebook with papermill, the way ``trainperf run`` does (raises on a failing
    cell). ``kernel_manager_class`` is for tests; by default the kernel is not interrupted at
    its shutdown (see ``_quiet_shutdown_manager``)."""
    import papermill

    papermill.execute_notebook(
        str(source),
        str(target),
        parameters=parameters,
        cwd=str(cwd or source.parent),
        kernel_name="python3",
        progress_bar=False,
        execution_timeout=cell_timeout,
        log_output=False,
        # the kernel's own start-up warnings (e.g. "running over TCP without encryption" on
        # a private loopback connection) mean nothing to a learner; errors still show
        extra_arguments=["--IPKernelApp.log_level=ERROR"],
        kernel_manager_class=kernel_manager_class or _quiet_shutdown_manager(),
    )


def _language_edition(root: Path, chapter: str, lang: str, target: Path) -> Path:
    """The solution notebook in ``lang`` (translated markdown, ``LANGUAGE`` set), written
    beside ``target``; English is the solution itself."""
    source = chapter_notebook(root, chapter)
    if lang == "en":
        return source
    import json

    from . import i18n

    notebook = i18n.translate(
        json.loads(source.read_text(encoding="utf-8")), i18n.catalogue_or_empty(root, lang, chapter)
    )
    edition = target.with_name(f"{chapter}.source.ipynb")
    edition.write_text(json.dumps(notebook, ensure_ascii=False), encoding="utf-8")
    return edition


def _record_provenance(target: Path, device: str, quick: bool, lang: str) -> None:
    """Note in the executed notebook where its outputs come from (the course site prints it)."""
    import datetime
    import json
    import platform
    from importlib import metadata

    notebook = json.loads(target.read_text(encoding="utf-8"))
    notebook.setdefault("metadata", {}).setdefault("trainperf", {})["run"] = {
        "device": device,
        "quick": quick,
        "language": lang,
        "torch": metadata.version("torch"),
        "python": platform.python_version(),
        "date": datetime.date.today().isoformat(),
    }
    target.write_text(json.dumps(notebook, ensure_ascii=False, indent=1), encoding="utf-8")


def run_one(
    root: str, chapter: str, out_dir: str, device: str, quick: bool, cell_timeout: int, lang: str = "en"
) -> RunResult:
    """Execute one chapter's solution notebook, in ``lang`` (in a worker process)."""
    target = executed_path(Path(out_dir), chapter, lang)
    target.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    try:
        source = _language_edition(Path(root), chapter, lang, target)
        parameters = {"DEVICE": device, "QUICK": quick, **({"LANGUAGE": lang} if lang != "en" else {})}
        execute(source, target, parameters, cell_timeout, cwd=chapter_notebook(Path(root), chapter).parent)
        _record_provenance(target, device, quick, lang)
        status, detail = "ok", ""
    except Exception as exc:  # noqa: BLE001 — papermill's error for a failing cell, or any other: reported
        status, detail = "FAILED", _failure_detail(exc, target)
    finally:
        if lang != "en":
            target.with_name(f"{chapter}.source.ipynb").unlink(missing_ok=True)
    return RunResult(chapter, device, time.perf_counter() - start, status, str(target), detail, lang)


def run(
    root: Path,
    wanted: list[str] | None,
    out_dir: Path,
    device: str = "auto",
    quick: bool = True,
    jobs: int = 1,
    cell_timeout: int = 600,
    langs: tuple[str, ...] = ("en",),
) -> list[RunResult]:
    """Run chapters in each language; print progress as each starts and ends, then a table."""
    chapter_ids = chapters(root, wanted)
    out_dir.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    results: list[RunResult] = []
    waiting = [(chapter, lang) for lang in langs for chapter in chapter_ids]
    total = len(waiting)
    mode = "quick" if quick else "full"
    print(f"running {total} notebook(s), device={device}, {mode}, jobs={jobs} -> {out_dir}", flush=True)

    def name(chapter: str, lang: str) -> str:
        return chapter if lang == "en" else f"{lang}/{chapter}"

    with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        running = set()

        def start_next() -> None:  # one chapter per free worker, so "started" is when it starts
            chapter, lang = waiting.pop(0)
            print(f"  started  {name(chapter, lang)}", flush=True)
            running.add(
                pool.submit(run_one, str(root), chapter, str(out_dir), device, quick, cell_timeout, lang)
            )

        while waiting and len(running) < max(1, jobs):
            start_next()
        while running:
            done, running = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                result = future.result()
                results.append(result)
                print(
                    f"  [{len(results)}/{total}] {name(result.chapter, result.lang)}: "
                    f"{result.status} in {result.seconds:.1f} s {result.detail}",
                    flush=True,
                )
                if waiting:
                    start_next()
    results.sort(key=lambda r: (r.lang != "en", r.lang, r.chapter))
    print(format_table(results), flush=True)
    return results


def format_table(results: list[RunResult]) -> str:
    lines = [f"{'chapter':<27} {'device':<6} {'seconds':>8}  status", "-" * 53]
    for r in results:
        label = r.chapter if r.lang == "en" else f"{r.lang}/{r.chapter}"
        lines.append(f"{label:<27} {r.device:<6} {r.seconds:>8.1f}  {r.status}")
        if r.detail:
            lines.append(f"    {r.detail}")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use: trainperf run")

"""Grading throughput: what `trainperf grade` costs per submission, and how it scales with jobs.

    python benchmarks/grade_throughput.py --chapter 01 --students 10 --jobs 2

In one run, on the same STUDENTS honest submissions of a chapter, it measures:

1. papermill executing each submission once (the anchor: the notebook's own cost), with the
   environment the grader gives a kernel (one OpenMP thread, the Agg plot backend);
2. `trainperf grade --jobs 1` (the course's one-off preparation — nbgrader release and
   reference run — done and cached first, so it is not charged to the submissions);
3. `trainperf grade --jobs JOBS`;
4. stock `nbgrader autograde` on the same submissions, when nbgrader is installed.

It prints seconds per submission, grading cost over papermill (goal: at most 1.3x) and the
throughput of JOBS jobs over one (goal: at least 1.7x on 2 cores). A benchmark, not a test:
nothing asserts a speed. Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import nbformat

from trainperf.course import chapter_notebook, chapters, find_root
from trainperf.discriminate import solution_answers, with_answers
from trainperf.grade import grade


def _papermill(notebook: Path, workdir: Path) -> float:
    import papermill

    start = time.perf_counter()
    papermill.execute_notebook(str(notebook), str(workdir / "out.ipynb"), cwd=str(workdir),
                               kernel_name="python3", progress_bar=False, log_output=False)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chapter", default="01")
    parser.add_argument("--students", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--no-stock", action="store_true", help="skip stock nbgrader autograde")
    args = parser.parse_args()
    if args.students < 1 or args.jobs < 2:
        parser.error("--students must be at least 1 and --jobs at least 2")
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # what the grader gives every kernel
    os.environ.setdefault("MPLBACKEND", "Agg")
    root = find_root()
    chapter = chapters(root, [args.chapter])[0]
    name = chapter_notebook(root, chapter).name
    honest = with_answers(root / "notebooks" / chapter / name,
                          solution_answers(chapter_notebook(root, chapter)))
    n = args.students
    with tempfile.TemporaryDirectory(prefix="trainperf-bench-") as tmp:
        base = Path(tmp)
        subs = base / "submissions"
        for i in range(n):
            folder = subs / f"student{i:03d}" / chapter
            folder.mkdir(parents=True)
            nbformat.write(honest, folder / name)
        start = time.perf_counter()  # one-off course preparation (cached afterwards)
        grade(root, subs, base / "warm.csv", [chapter], jobs=1, workdir=base / "warm")
        prep = time.perf_counter() - start
        papermill_s = []
        for i in range(n):
            work = base / f"pm{i}"
            work.mkdir()
            papermill_s.append(_papermill(subs / f"student{i:03d}" / chapter / name, work))
        timings = {}
        for jobs in (1, args.jobs):
            start = time.perf_counter()
            rows = grade(root, subs, base / f"grades-{jobs}.csv", [chapter], jobs=jobs,
                         workdir=base / f"scratch-{jobs}", fresh=True)
            timings[jobs] = time.perf_counter() - start
            assert all(r.score == r.max_score for r in rows), "an honest submission lost points"
        stock = None
        if not args.no_stock:
            from trainperf.stock import autograde

            start = time.perf_counter()
            scores = autograde(root, chapter, {f"student{i:03d}": honest for i in range(n)},
                               base / "stock")
            stock = time.perf_counter() - start
            assert all(sum(s.values()) > 0 for s in scores.values())
    pm = sum(papermill_s) / n
    print(f"\n{chapter}, {n} honest submissions, load average {os.getloadavg()[0]:.2f}:")
    print(f"  course preparation (once, then cached): {prep:.1f} s")
    print(f"  papermill:          {pm:6.2f} s per notebook (median {statistics.median(papermill_s):.2f}, "
          f"range {min(papermill_s):.2f}-{max(papermill_s):.2f})")
    for jobs, seconds in timings.items():
        print(f"  trainperf grade -j{jobs}: {seconds / n:6.2f} s per submission ({seconds:.1f} s in all)")
    if stock is not None:
        print(f"  stock nbgrader autograde: {stock / n:6.2f} s per submission ({stock:.1f} s in all)")
    print(f"  grading cost over papermill (jobs=1): {timings[1] / n / pm:.2f}x  (goal <= 1.3x)")
    print(f"  throughput jobs={args.jobs} over jobs=1: {timings[1] / timings[args.jobs]:.2f}x  (goal >= 1.7x)")


if __name__ == "__main__":
    main()

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

    python benchmarks/grade_throughput.py --shards 4 [--students 40] [--jobs 2] [--shard-jobs 1]

grades STUDENTS submissions (solutions, plausible mistakes and untouched stubs, as a class would
hand in) once as one `trainperf grade --jobs JOBS` process and once as SHARDS `trainperf grade
--shard I/SHARDS --jobs SHARD_JOBS` processes started together, merges the parts with
`trainperf merge`, and prints both wall times, the merge time and whether the merged CSV is
byte for byte the single run's.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from trainperf.course import chapter_notebook, chapters, find_root
from trainperf.discriminate import load_mistakes, solution_answers, with_answers
from trainperf.grading.grade import grade


def _papermill(notebook: Path, workdir: Path) -> float:
    import papermill

    start = time.perf_counter()
    papermill.execute_notebook(
        str(notebook),
        str(workdir / "out.ipynb"),
        cwd=str(workdir),
        kernel_name="python3",
        progress_bar=False,
        log_output=False,
    )
    return time.perf_counter() - start


def _class(root: Path, chapter: str, subs: Path, n: int) -> None:
    """n submissions as a class hands them in: mostly solutions, some mistakes, some stubs."""
    name = chapter_notebook(root, chapter).name
    released = root / "notebooks" / chapter / name
    solution = solution_answers(chapter_notebook(root, chapter))
    mistakes = load_mistakes(root / "grader" / "fixtures" / chapter / "mistakes.py")
    for i in range(n):
        answers = dict(solution)
        if i % 4 == 1:  # one answer wrong, a different one each time
            cell = sorted(mistakes)[i // 4 % len(mistakes)]
            answers[cell] = mistakes[cell][0][1]
        elif i % 10 == 3:
            answers = {}  # the untouched release
        folder = subs / f"student{i:03d}" / chapter
        folder.mkdir(parents=True)
        nbformat.write(with_answers(released, answers), folder / name)


def _trainperf(root: Path, *args: str | Path, log: Path) -> subprocess.Popen:
    command = [sys.executable, "-m", "trainperf.cli", "--root", str(root), *map(str, args)]
    return subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT)


def _finish(process: subprocess.Popen, log: Path) -> None:
    if process.wait() != 0:
        raise SystemExit(f"{' '.join(map(str, process.args[2:]))} failed:\n{log.read_text()[-2000:]}")


def shards_benchmark(root: Path, chapter: str, n: int, shards: int, jobs: int, shard_jobs: int) -> None:
    """One process grading the class against SHARDS processes at once, then merged."""
    with tempfile.TemporaryDirectory(prefix="trainperf-bench-shards-") as tmp:
        base = Path(tmp)
        _class(root, chapter, base / "submissions", n)
        _class(root, chapter, base / "warm-submissions", 1)
        grading = ("--chapters", chapter)
        warm = _trainperf(
            root,
            "grade",
            base / "warm-submissions",
            *grading,
            "--out",
            base / "warm.csv",
            log=base / "warm.log",
        )
        _finish(warm, base / "warm.log")  # nbgrader release + reference run, cached from here on
        start = time.perf_counter()
        single = _trainperf(
            root,
            "grade",
            base / "submissions",
            *grading,
            "--jobs",
            jobs,
            "--out",
            base / "single" / "grades.csv",
            log=base / "single.log",
        )
        _finish(single, base / "single.log")
        single_s = time.perf_counter() - start
        start = time.perf_counter()
        running = [
            (
                _trainperf(
                    root,
                    "grade",
                    base / "submissions",
                    *grading,
                    "--jobs",
                    shard_jobs,
                    "--shard",
                    f"{i}/{shards}",
                    "--out",
                    base / "parts" / f"part-{i}.csv",
                    log=base / f"part-{i}.log",
                ),
                base / f"part-{i}.log",
            )
            for i in range(1, shards + 1)
        ]
        for process, log in running:
            _finish(process, log)
        sharded_s = time.perf_counter() - start
        start = time.perf_counter()
        merge = _trainperf(
            root,
            "merge",
            *(base / "parts" / f"part-{i}.csv" for i in range(1, shards + 1)),
            "--out",
            base / "merged.csv",
            log=base / "merge.log",
        )
        _finish(merge, base / "merge.log")
        merge_s = time.perf_counter() - start
        identical = (base / "merged.csv").read_bytes() == (base / "single" / "grades.csv").read_bytes()
        started = re.search(r"^grading .*jobs=\d+, (.*)$", (base / "single.log").read_text(), re.MULTILINE)
    print(f"\n{chapter}, {n} submissions, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    print(f"  kernels: {started.group(1) if started else 'isolation unknown'}")
    print(f"  1 shard,  --jobs {jobs}:              {single_s:7.1f} s  ({single_s / n:.2f} s per notebook)")
    print(
        f"  {shards} shards, --jobs {shard_jobs} each, at once: {sharded_s:7.1f} s  "
        f"({sharded_s / n:.2f} s per notebook; {single_s / sharded_s:.2f}x the 1-shard throughput)"
    )
    print(f"  merge of {shards} parts:                {merge_s:7.2f} s")
    print(f"  merged CSV identical to the 1-shard CSV: {'yes' if identical else 'NO'}")
    if not identical:
        raise SystemExit(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chapter", default="01")
    parser.add_argument("--students", type=int, help="submissions (default 10; 40 with --shards)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--no-stock", action="store_true", help="skip stock nbgrader autograde")
    parser.add_argument("--shards", type=int, help="compare 1 shard with this many shard processes")
    parser.add_argument("--shard-jobs", type=int, default=1, help="--jobs of each shard process")
    args = parser.parse_args()
    if args.shards is not None:
        too_few = args.students is not None and args.students < 1
        if args.shards < 2 or too_few or min(args.jobs, args.shard_jobs) < 1:
            parser.error("--shards must be at least 2, --students, --jobs and --shard-jobs at least 1")
        root = find_root()
        shards_benchmark(
            root,
            chapters(root, [args.chapter])[0],
            args.students or 40,
            args.shards,
            args.jobs,
            args.shard_jobs,
        )
        return
    args.students = args.students or 10
    if args.students < 1 or args.jobs < 2:
        parser.error("--students must be at least 1 and --jobs at least 2")
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # what the grader gives every kernel
    os.environ.setdefault("MPLBACKEND", "Agg")
    root = find_root()
    chapter = chapters(root, [args.chapter])[0]
    name = chapter_notebook(root, chapter).name
    honest = with_answers(
        root / "notebooks" / chapter / name, solution_answers(chapter_notebook(root, chapter))
    )
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
            rows = grade(
                root,
                subs,
                base / f"grades-{jobs}.csv",
                [chapter],
                jobs=jobs,
                workdir=base / f"scratch-{jobs}",
                fresh=True,
            )
            timings[jobs] = time.perf_counter() - start
            assert all(r.score == r.max_score for r in rows), "an honest submission lost points"
        stock = None
        if not args.no_stock:
            from trainperf.grading.stock import autograde

            start = time.perf_counter()
            scores = autograde(root, chapter, {f"student{i:03d}": honest for i in range(n)}, base / "stock")
            stock = time.perf_counter() - start
            assert all(sum(s.values()) > 0 for s in scores.values())
    pm = sum(papermill_s) / n
    print(f"\n{chapter}, {n} honest submissions, load average {os.getloadavg()[0]:.2f}:")
    print(f"  course preparation (once, then cached): {prep:.1f} s")
    print(
        f"  papermill:          {pm:6.2f} s per notebook (median {statistics.median(papermill_s):.2f}, "
        f"range {min(papermill_s):.2f}-{max(papermill_s):.2f})"
    )
    for jobs, seconds in timings.items():
        print(f"  trainperf grade -j{jobs}: {seconds / n:6.2f} s per submission ({seconds:.1f} s in all)")
    if stock is not None:
        print(f"  stock nbgrader autograde: {stock / n:6.2f} s per submission ({stock:.1f} s in all)")
    print(f"  grading cost over papermill (jobs=1): {timings[1] / n / pm:.2f}x  (goal <= 1.3x)")
    print(
        f"  throughput jobs={args.jobs} over jobs=1: {timings[1] / timings[args.jobs]:.2f}x  (goal >= 1.7x)"
    )


if __name__ == "__main__":
    main()

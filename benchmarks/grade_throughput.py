"""Grading throughput: `trainperf grade` with 1 job vs N jobs on honest submissions.

    python benchmarks/grade_throughput.py --chapter 01 --students 20 --jobs 2

Builds STUDENTS copies of the chapter's solution as submissions, grades them once with one
job and once with JOBS jobs (fresh each time, same machine, same run), and prints seconds per
submission and the throughput ratio. A benchmark, not a test: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import nbformat

from trainperf.course import chapter_notebook, chapters, find_root
from trainperf.discriminate import solution_answers, with_answers
from trainperf.grade import grade


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chapter", default="01")
    parser.add_argument("--students", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    root = find_root()
    chapter = chapters(root, [args.chapter])[0]
    name = chapter_notebook(root, chapter).name
    honest = with_answers(root / "notebooks" / chapter / name,
                          solution_answers(chapter_notebook(root, chapter)))
    with tempfile.TemporaryDirectory(prefix="trainperf-bench-") as tmp:
        subs = Path(tmp) / "submissions"
        for i in range(args.students):
            folder = subs / f"student{i:03d}" / chapter
            folder.mkdir(parents=True)
            nbformat.write(honest, folder / name)
        timings = {}
        for jobs in (1, args.jobs):
            start = time.perf_counter()
            rows = grade(root, subs, Path(tmp) / f"grades-{jobs}.csv", [chapter], jobs=jobs,
                         workdir=Path(tmp) / f"scratch-{jobs}", fresh=True)
            timings[jobs] = time.perf_counter() - start
            assert all(r.score == r.max_score for r in rows), "an honest submission lost points"
    n = args.students
    print(f"\n{chapter}, {n} honest submissions:")
    for jobs, seconds in timings.items():
        print(f"  jobs={jobs}: {seconds:7.1f} s total, {seconds / n:5.2f} s per submission")
    print(f"  throughput ratio jobs={args.jobs} / jobs=1: {timings[1] / timings[args.jobs]:.2f}x")


if __name__ == "__main__":
    main()

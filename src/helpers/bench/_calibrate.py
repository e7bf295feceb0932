"""How often does :func:`compare_speed` give a wrong verdict on this machine, under load?

``python -m helpers.bench calibrate`` starts a CPU hog of its own (busy processes beside the
timing), then runs two kinds of trials with a small matrix-multiply workload:

* A/A: the same function on both sides. Any verdict but "within noise" is a false one.
* 1.5x: the baseline does 3 multiplies, the tuned side 2. The right verdict is "faster".

It prints the rate of each verdict, the median speed-up, and the time the trials took.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import time
from collections import Counter

import torch

from ._speed import compare_speed

GOAL_FALSE_RATE = 0.05
GOAL_DETECTION_RATE = 0.95


def _spin() -> None:  # pragma: no cover - runs in the hog's own processes
    while True:
        pass


def _workload(size: int, multiplies: int):
    a, b = torch.randn(size, size), torch.randn(size, size)

    def run() -> None:
        for _ in range(multiplies):
            a @ b

    return run


def _trials(label: str, baseline, tuned, trials: int, max_seconds: float, threads: int | None) -> dict:
    verdicts: Counter = Counter()
    speedups, widths = [], []
    start = time.perf_counter()
    for _ in range(trials):
        result = compare_speed(baseline, tuned, max_seconds=max_seconds, threads=threads)
        verdicts[result.verdict] += 1
        speedups.append(result.speedup)
        widths.append(result.interval_width)
    took = time.perf_counter() - start
    return {
        "label": label,
        "verdicts": verdicts,
        "trials": trials,
        "seconds": took,
        "median_speedup": statistics.median(speedups),
        "median_width": statistics.median(widths),
    }


def _line(row: dict) -> str:
    shares = ", ".join(
        f"{v} {row['verdicts'][v] / row['trials']:.0%}" for v in ("faster", "slower", "within noise")
    )
    return (
        f"{row['label']:<6} {row['trials']} trials in {row['seconds']:.0f} s: {shares}; "
        f"median speed-up {row['median_speedup']:.2f}x, median interval width {row['median_width']:.0%}"
    )


def calibrate(
    trials: int = 40, hog: int = 1, max_seconds: float = 2.0, size: int = 192, threads: int | None = None
) -> tuple[dict, dict]:
    """Run the A/A and the 1.5x trials (with ``hog`` busy processes beside them) at ``threads``
    CPU threads (default: torch's setting)."""
    spinners = [mp.get_context("spawn").Process(target=_spin, daemon=True) for _ in range(hog)]
    for p in spinners:
        p.start()
    try:
        same = _workload(size, 3)
        aa = _trials("A/A", same, same, trials, max_seconds, threads)
        bb = _trials("1.5x", _workload(size, 3), _workload(size, 2), trials, max_seconds, threads)
    finally:
        for p in spinners:
            p.terminate()
            p.join()
    return aa, bb


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m helpers.bench",
        description="Check compare_speed's verdicts on this machine under load.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    cal = sub.add_parser("calibrate", help="false-verdict and detection rates with a CPU hog running")
    cal.add_argument("--trials", type=int, default=40, help="trials of each kind (default 40)")
    cal.add_argument("--hog", type=int, default=1, help="busy processes beside the timing (default 1)")
    cal.add_argument(
        "--max-seconds", type=float, default=2.0, help="time budget of one comparison (default 2)"
    )
    cal.add_argument("--size", type=int, default=192, help="matrix size of the workload (default 192)")
    cal.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads of both sides (default: torch's setting); with a hog on a small "
        "machine, compare the cores left free",
    )
    args = parser.parse_args(argv)
    if (
        args.trials < 1
        or args.hog < 0
        or not args.max_seconds > 0
        or args.size < 8
        or (args.threads is not None and args.threads < 1)
    ):
        print(
            "error: need --trials >= 1, --hog >= 0, --max-seconds > 0, --size >= 8 and --threads >= 1",
            file=sys.stderr,
        )
        return 2
    threads = args.threads or torch.get_num_threads()
    print(
        f"torch {torch.__version__}, {threads} threads, {args.hog} hog process(es), "
        f"{args.trials} trials of each kind, {args.max_seconds:g} s per comparison"
    )
    aa, bb = calibrate(args.trials, args.hog, args.max_seconds, args.size, threads)
    false_rate = 1 - aa["verdicts"]["within noise"] / aa["trials"]
    detected = bb["verdicts"]["faster"] / bb["trials"]
    print(_line(aa))
    print(_line(bb))
    ok_false, ok_detect = false_rate <= GOAL_FALSE_RATE, detected >= GOAL_DETECTION_RATE
    print(
        f"false verdicts on A/A: {false_rate:.1%} (goal <= {GOAL_FALSE_RATE:.0%}: "
        f"{'met' if ok_false else 'MISSED'})"
    )
    print(
        f"'faster' on a true 1.5x: {detected:.1%} (goal >= {GOAL_DETECTION_RATE:.0%}: "
        f"{'met' if ok_detect else 'MISSED'})"
    )
    return 0 if ok_false and ok_detect else 1

"""How often does :func:`compare_speed` give a wrong verdict on this machine, under load?

``python -m helpers.bench calibrate`` starts CPU hogs of its own (busy processes beside the
timing), then runs two kinds of trials with a small matrix-multiply workload:

* A/A: the same function on both sides. Any verdict but "within noise" is a false one.
* 1.5x: the baseline does 3 multiplies, the tuned side 2. The right verdict is "faster".

``--loads 1 2 6`` runs them at several loads, given as multiples of the CPU cores: at load L
there are L x cores busy processes in all (the timing process is one of them). ``--threads``
takes one or more thread counts, so 1 thread and torch's default can be compared under the
same load. It prints one row per load and thread count: the rate of each verdict, the pairs a
comparison got, and the longest wall time of one comparison against its budget.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time
from collections import Counter

import torch

from ._speed import compare_speed

GOAL_FALSE_RATE = 0.05


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
    speedups, widths, pairs, walls = [], [], [], []
    start = time.perf_counter()
    for _ in range(trials):
        began = time.perf_counter()
        result = compare_speed(baseline, tuned, max_seconds=max_seconds, threads=threads)
        walls.append(time.perf_counter() - began)
        verdicts[result.verdict] += 1
        speedups.append(result.speedup)
        widths.append(result.interval_width)
        pairs.append(result.pairs)
    took = time.perf_counter() - start
    return {
        "label": label,
        "verdicts": verdicts,
        "trials": trials,
        "seconds": took,
        "median_speedup": statistics.median(speedups),
        "median_width": statistics.median(widths),
        "median_pairs": statistics.median(pairs),
        "longest_s": max(walls),
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


def _hogs(load: float, cores: int) -> int:
    """Busy processes to start for ``load`` x ``cores`` runnable processes, the timing one included."""
    return max(0, round(load * cores) - 1)


def _table(rows: list[dict], max_seconds: float) -> list[str]:
    out = [
        "| load (x cores) | hogs | threads | A/A false verdicts | 1.5x found | pairs (median) "
        f"| longest comparison (budget {max_seconds:g} s + warm-up) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        aa, bb = r["aa"], r["bb"]
        false = 1 - aa["verdicts"]["within noise"] / aa["trials"]
        found = bb["verdicts"]["faster"] / bb["trials"]
        wrong = aa["trials"] - aa["verdicts"]["within noise"]
        out.append(
            f"| {r['load']:g} | {r['hogs']} | {r['threads']} | {false:.0%} ({wrong}"
            f" of {aa['trials']}) | {found:.0%} | {aa['median_pairs']:g} / {bb['median_pairs']:g} "
            f"| {max(aa['longest_s'], bb['longest_s']):.1f} s |"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m helpers.bench",
        description="Check compare_speed's verdicts on this machine under load.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    cal = sub.add_parser("calibrate", help="false-verdict and detection rates with CPU hogs running")
    cal.add_argument("--trials", type=int, default=40, help="trials of each kind (default 40)")
    cal.add_argument(
        "--hog", type=int, default=None, help="busy processes beside the timing (instead of --loads)"
    )
    cal.add_argument(
        "--loads",
        type=float,
        nargs="+",
        default=None,
        help="loads as multiples of the CPU cores, e.g. 1 2 6 (default: one hog process)",
    )
    cal.add_argument(
        "--max-seconds", type=float, default=2.0, help="time budget of one comparison (default 2)"
    )
    cal.add_argument("--size", type=int, default=192, help="matrix size of the workload (default 192)")
    cal.add_argument(
        "--threads",
        type=int,
        nargs="+",
        default=None,
        help="CPU threads of both sides, one or more counts (default: torch's setting)",
    )
    args = parser.parse_args(argv)
    if (
        args.trials < 1
        or (args.hog is not None and args.hog < 0)
        or (args.loads is not None and not all(x > 0 for x in args.loads))
        or (args.hog is not None and args.loads is not None)
        or not args.max_seconds > 0
        or args.size < 8
        or (args.threads is not None and not all(t >= 1 for t in args.threads))
    ):
        print(
            "error: need --trials >= 1, --hog >= 0 or --loads > 0 (not both), --max-seconds > 0, "
            "--size >= 8 and --threads >= 1",
            file=sys.stderr,
        )
        return 2
    cores = os.cpu_count() or 1
    if args.loads is not None:
        levels = [(load, _hogs(load, cores)) for load in args.loads]
    else:
        hog = 1 if args.hog is None else args.hog
        levels = [((hog + 1) / cores, hog)]
    thread_counts = args.threads or [torch.get_num_threads()]
    print(
        f"torch {torch.__version__}, {cores} cores, threads {', '.join(map(str, thread_counts))}, "
        f"{args.trials} trials of each kind, {args.max_seconds:g} s per comparison"
    )
    rows, ok = [], True
    for load, hogs in levels:
        for threads in thread_counts:
            print(f"load {load:g} x cores ({hogs} hog process(es)), {threads} thread(s):")
            aa, bb = calibrate(args.trials, hogs, args.max_seconds, args.size, threads)
            print("  " + _line(aa))
            print("  " + _line(bb))
            rows.append({"load": load, "hogs": hogs, "threads": threads, "aa": aa, "bb": bb})
            false_rate = 1 - aa["verdicts"]["within noise"] / aa["trials"]
            ok = ok and false_rate <= GOAL_FALSE_RATE
    print()
    print("\n".join(_table(rows, args.max_seconds)))
    print(
        f"goal: at most {GOAL_FALSE_RATE:.0%} false verdicts on A/A at every load: "
        f"{'met' if ok else 'MISSED'}; a true 1.5x is found when the comparison gets enough pairs"
    )
    return 0 if ok else 1

"""``python -m helpers.memory``: track a course model's training step, or benchmark the tracker.

* ``track CONFIG`` — peak memory of one steady training step by category (fake tensors).
* ``bench`` — the same step tracked by stock ``MemTracker`` and by the course's step tracker
  (which skips per-module peak bookkeeping), timed in interleaved pairs: the speed-up with its
  95 % interval and verdict, and whether the peaks are identical. Measured in one run, on this
  machine.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from . import track


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m helpers.memory", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("track", "bench"):
        p = sub.add_parser(name)
        p.add_argument(
            "config",
            nargs="?",
            default="gpt2-small",
            help="course config: tiny, small-cpu, gpt2-small, gpt2-xl, gpt3-6.7b",
        )
        p.add_argument("--batch", type=int, default=8)
        p.add_argument("--seq", type=int, default=None, help="tokens per sequence (default: context)")
        p.add_argument("--optimizer", default="adamw")
        p.add_argument("--autocast", default=None, help="bf16 or fp16 autocast (default: fp32)")
        if name == "bench":
            p.add_argument("--pairs", type=int, default=6, help="interleaved pairs of tracked steps (>= 6)")
    args = parser.parse_args(argv)
    if args.command == "bench" and args.pairs < 6:
        parser.error(f"--pairs must be at least 6 (a 95 % interval needs 6 pairs), got {args.pairs}")
    try:
        if args.command == "track":
            print(
                track(
                    args.config,
                    args.optimizer,
                    batch_size=args.batch,
                    seq_len=args.seq,
                    autocast=args.autocast,
                )
            )
            return 0
        from ..bench import compare_speed

        track("tiny", batch_size=2, seq_len=8)  # imports and first-call costs, outside the timing
        peaks: dict[str, list[dict[str, int]]] = {}

        def tracked(label: str, fast: bool):
            def run() -> None:
                peaks.setdefault(label, []).append(
                    track(
                        args.config,
                        args.optimizer,
                        batch_size=args.batch,
                        seq_len=args.seq,
                        autocast=args.autocast,
                        _fast=fast,
                    ).peak
                )

            return run

        speed = compare_speed(
            tracked("stock MemTracker", False),
            tracked("step tracker", True),
            device="cpu",
            warmup=1,
            number=1,
            min_pairs=args.pairs,
            max_pairs=args.pairs,
            max_seconds=24 * 3600.0,  # a benchmark: every pair asked for is timed, however long
            names=("stock MemTracker", "step tracker"),
        )
        print(speed)
        same = all(p == peaks["stock MemTracker"][0] for side in peaks.values() for p in side)
        print(f"identical peak breakdown in every run: {same}")
        return 0 if same else 1
    except (ValueError, TypeError, KeyError, RuntimeError) as exc:
        print(f"error: {exc}")
        return 2


if __name__ == "__main__":
    raise SystemExit(main())

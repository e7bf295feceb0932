"""Re-record chapter 4's shipped DDP traces (``src/helpers/data/timeline_ddp_*``) and check them.

Two gloo processes on this machine train the course's small MLP under DistributedDataParallel
(``helpers.timeline.record_ddp``): once balanced, once with one rank sleeping
``helpers.timeline.EXAMPLE_SLOW_S`` seconds before every forward. A recording is kept only if
the straggler shows clearly (the checks below, the same as ``tests/test_timeline.py``); on a
busy machine other work can hide it, so the script tries again, up to ``--tries`` times, and
says how many recordings it needed. Usage: ``python scripts/record_timeline_examples.py``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from helpers import timeline as tl

DATA = Path(__file__).resolve().parents[1] / "src" / "helpers" / "data"
SLOW_RANK = 0


def problems(balanced: list, one_slow: list, slow_rank: int, slow_s: float) -> list[str]:
    """What keeps a recording from showing the straggler clearly (empty when it shows)."""
    found = []
    slow_us = slow_s * 1e6
    by_rank = {t.rank: tl.step_breakdown(t) for t in one_slow}
    fast = next(r for r in by_rank if r != slow_rank)
    if tl.straggler(by_rank) != slow_rank:
        found.append(f"the straggler found is rank {tl.straggler(by_rank)}, not {slow_rank}")
    gap = tl.own_time(by_rank[slow_rank]) - tl.own_time(by_rank[fast])
    if gap < 0.7 * slow_us:
        found.append(f"own-time gap {gap / 1e3:.1f} ms < 70% of the {slow_s * 1e3:.0f} ms delay")
    waited = tl.mean_step(by_rank[fast]).exposed_comm_us
    if waited < 0.7 * slow_us:
        found.append(f"the fast rank waits {waited / 1e3:.1f} ms < 70% of the delay")
    label = tl.classify_ranks(by_rank)[fast].label
    if label != f"waiting for rank {slow_rank}":
        found.append(f"the fast rank is labelled {label!r}")
    even_by_rank = {t.rank: tl.step_breakdown(t) for t in balanced}
    if tl.straggler(even_by_rank) is not None:
        found.append(
            f"the balanced run has a straggler (rank {tl.straggler(even_by_rank)}); "
            "record it again on a quieter machine"
        )
    even = {t.rank: tl.own_time(tl.step_breakdown(t)) for t in balanced}
    if abs(even[0] - even[1]) >= 0.3 * slow_us:
        found.append(f"the balanced run differs by {abs(even[0] - even[1]) / 1e3:.1f} ms between ranks")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tries", type=int, default=5)
    parser.add_argument("--out", type=Path, default=DATA)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for attempt in range(1, args.tries + 1):
        with tempfile.TemporaryDirectory(prefix="trainperf-record-") as tmp:
            runs = tl.record_ddp(tmp, slow_rank=SLOW_RANK, slow_s=tl.EXAMPLE_SLOW_S, steps=3)
            traces = {phase: tl.load_trace(paths) for phase, paths in runs.items()}
            found = problems(traces["balanced"], traces["one_slow"], SLOW_RANK, tl.EXAMPLE_SLOW_S)
            for phase, t in traces.items():
                print(f"attempt {attempt}, {phase}:\n{tl.rank_table(t)}")
            if found:
                print(f"attempt {attempt} rejected: " + "; ".join(found))
                continue
            for phase, paths in runs.items():
                for rank, path in enumerate(paths):
                    shutil.copyfile(path, args.out / f"timeline_ddp_{phase}_rank{rank}.json.gz")
            print(f"kept attempt {attempt} of {args.tries}; written to {args.out}")
            return 0
    print(f"no clean recording in {args.tries} attempts: the machine is too busy", file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())

"""Re-record chapter 10's shipped FSDP traces (``src/helpers/data/distributed_*``) and check them.

Two gloo processes on this machine train the course's small MLP under FSDP2 (``fully_shard``
per block, then the root) with ``helpers.distributed._fsdp.record_fsdp``, three times:
``fsdp_no_prefetch``, ``fsdp_prefetch`` (explicit forward / backward prefetch), and
``fsdp_one_slow`` (no prefetch; one rank sleeps ``EXAMPLE_SLOW_S`` before every forward).

Checks (the same as ``tests/test_distributed_fsdp.py``): every profiled step of every rank has
2 x layers all-gathers and ``layers`` reduce-scatters (the root holds no parameters of its own,
so it gathers nothing); in ``fsdp_one_slow`` the other rank is the one that waits, by at least
70 % of the delay per step. A recording that fails is made again, up to ``--tries`` times.
Whether prefetching pays is not decided by one recording: the script also times the two
settings in interleaved rounds (``compare_fsdp``) and writes that verdict to the README.
Usage: ``python scripts/record_distributed_traces.py``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path

import torch

from helpers.distributed._fsdp import record_fsdp
from helpers.distributed._fsdp_compare import compare_fsdp
from helpers.distributed._fsdp_trace import (
    EXAMPLE_SETTINGS,
    EXAMPLE_SLOW_S,
    collectives_by_step,
    compare_prefetch,
    exposed_by_rank,
    fsdp_intervals,
    waiting_rank,
)

DATA = Path(__file__).resolve().parents[1] / "src" / "helpers" / "data"
SLOW_RANK = 1
RUNS = {
    "fsdp_no_prefetch": {},
    "fsdp_prefetch": {"prefetch": True},
    "fsdp_one_slow": {"slow_rank": SLOW_RANK, "slow_s": EXAMPLE_SLOW_S},
}
MAX_BYTES = 150_000


def problems(name: str, paths: list[Path], layers: int) -> list[str]:
    """What keeps a recording from being shipped (empty when none)."""
    found = []
    for rank, path in enumerate(paths):
        if path.stat().st_size >= MAX_BYTES:
            found.append(f"{name} rank {rank}: {path.stat().st_size} bytes, over {MAX_BYTES}")
        for step in collectives_by_step(path):
            gathers = step["c10d"].get("all_gather", {}).get("count", 0)
            reduces = step["c10d"].get("reduce_scatter", {}).get("count", 0)
            if (gathers, reduces) != (2 * layers, layers):
                found.append(
                    f"{name} rank {rank} {step['step']}: {gathers} all-gathers, {reduces} reduce-scatters"
                )
    if name == "fsdp_one_slow":
        ivs = [fsdp_intervals(p) for p in paths]
        waits = exposed_by_rank(ivs)
        fast = 1 - SLOW_RANK
        if waiting_rank(ivs) != fast:
            found.append(f"the rank that waits most is {waiting_rank(ivs)}, not {fast}")
        if waits[fast] - waits[SLOW_RANK] < 0.7 * EXAMPLE_SLOW_S * 1e3:
            found.append(f"the fast rank waits only {waits[fast] - waits[SLOW_RANK]:.1f} ms more per step")
    return found


README = """# Example traces for chapter 10 (helpers.distributed)

`distributed_<name>_rank<R>.json.gz` are EXAMPLE DATA: real `torch.profiler` traces recorded by
this project with `scripts/record_distributed_traces.py` on {date}, on {machine}
({cores} CPU cores, no GPU), torch {torch}, `torch.distributed` with gloo, 2 processes on
127.0.0.1. Each is `helpers.distributed._fsdp.record_fsdp(world_size=2, layers={layers},
width={width}, batch={batch}, steps={steps}, ...)`: {layers} blocks of Linear({width}, {width}) +
ReLU under FSDP2 (`fully_shard` on each block, then on the root), AdamW, fp32, batch {batch} per
rank, `torch.profiler` with schedule(wait=1, warmup=1, active={steps}) and `record_shapes=True`.

- `fsdp_no_prefetch`: FSDP2's defaults (`reshard_after_forward=True`).
- `fsdp_prefetch`: explicit prefetching, `set_modules_to_forward_prefetch` (next block) and
  `set_modules_to_backward_prefetch` (previous block). On CPU the all-gathers are also issued
  with `async_op=True` (torch's private `_set_unshard_async_op`): with the default, a
  prefetched all-gather blocks the training thread just as an unprefetched one does.
- `fsdp_one_slow`: as `fsdp_no_prefetch`, but one rank sleeps **{slow_ms:.0f} ms**
  (`helpers.distributed._fsdp_trace.EXAMPLE_SLOW_S`) before every forward (which one is for you
  to find).

Every profiled step holds {gathers} all-gathers ({layers} in the forward, {layers} again in the
backward, since the parameters are resharded after the forward) and {layers} reduce-scatters: the
root has no parameters of its own, so it gathers nothing. On gloo the reduce-scatter runs as an
all-reduce of the whole gradient (the trace shows `gloo:all_reduce` events). Torch 2.13 writes
no `record_param_comms` events on gloo; message sizes come from the shapes of the `c10d::` calls.

The script keeps a recording only when every step has those counts, each file is under 150 KB,
and in `fsdp_one_slow` the other rank's exposed communication exceeds the slow rank's by at least
70 % of the delay per step. `tests/test_distributed_fsdp.py` checks the shipped files by the same
rules.

The prefetch and no-prefetch traces are one pair of {pairs} recorded one after the other. One
pair is one sample on a shared machine, so the script ships the pair with the median saving of
exposed all-gather time. An all-gather runs from the training thread's `c10d::` call to the end
of gloo's event; it is exposed while the training thread computes nothing. Saved per step by
prefetching, each pair, sorted (ms; negative: more exposed with prefetching):
{saved}.

The shipped pair (mean of the two ranks; "first" is the gather before the first block's
forward, which nothing can hide; "total" counts overlapping gathers once):

{exposure}

Whether the step got faster is measured separately, in {rounds} interleaved rounds in the same
run (`compare_fsdp`), prefetching against no prefetching:

{verdict}{note}

Timings are real and noisy; they are a recording, not a benchmark: on a shared machine another
run of the script can give another verdict. Record your own with `record_fsdp()`.
"""


def _record(tmp: Path, name: str, tries: int, tag: str) -> list[Path] | None:
    """One recording of ``name`` that passes :func:`problems`, or None after ``tries``."""
    for attempt in range(1, tries + 1):
        run = record_fsdp(tmp / f"{name}-{tag}-{attempt}", **EXAMPLE_SETTINGS, **RUNS[name])
        found = problems(name, run.traces, EXAMPLE_SETTINGS["layers"])
        if not found:
            print(f"{name} ({tag}): kept attempt {attempt}\n{run}")
            return run.traces
        print(f"{name} ({tag}): attempt {attempt} rejected: " + "; ".join(found))
    print(f"{name}: no clean recording in {tries} attempts", file=sys.stderr)
    return None


def _exposure(effect: dict[str, dict[str, float]]) -> str:
    return "\n".join(
        f"- {label}: first {effect[key]['first']:.2f} ms, forward {effect[key]['forward']:.2f} ms, "
        f"backward {effect[key]['backward']:.2f} ms, total {effect[key]['total']:.2f} ms"
        for key, label in (("no_prefetch", "without prefetching"), ("prefetch", "with prefetching"))
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tries", type=int, default=5)
    parser.add_argument("--pairs", type=int, default=5, help="prefetch / no-prefetch recordings")
    parser.add_argument("--out", type=Path, default=DATA)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="trainperf-record-") as folder:
        tmp = Path(folder)
        pairs = []
        for i in range(args.pairs):  # one pair is one sample: record several, ship the median one
            off = _record(tmp, "fsdp_no_prefetch", args.tries, f"pair {i}")
            on = _record(tmp, "fsdp_prefetch", args.tries, f"pair {i}")
            if off is None or on is None:
                return 1
            pairs.append((compare_prefetch(on, off), off, on))
        pairs.sort(key=lambda p: p[0]["saved"]["total"])
        effect, off, on = pairs[len(pairs) // 2]
        slow = _record(tmp, "fsdp_one_slow", args.tries, "one")
        if slow is None:
            return 1
        for name, paths in (("fsdp_no_prefetch", off), ("fsdp_prefetch", on), ("fsdp_one_slow", slow)):
            for rank, path in enumerate(paths):
                shutil.copyfile(path, args.out / f"distributed_{name}_rank{rank}.json.gz")
    saved = ", ".join(f"{p[0]['saved']['total']:.2f}" for p in pairs)
    timed = compare_fsdp(
        {"no_prefetch": {}, "prefetch": {"prefetch": True}},
        "no_prefetch",
        rounds=args.rounds,
        **{k: v for k, v in EXAMPLE_SETTINGS.items() if k != "steps"},
    )
    print(timed)
    comparison = timed.comparisons["prefetch"]
    (args.out / "distributed_README.md").write_text(
        README.format(
            date=datetime.date.today().isoformat(),
            machine=f"{platform.system()} {platform.machine()}",
            cores=os.cpu_count(),
            torch=torch.__version__,
            slow_ms=EXAMPLE_SLOW_S * 1e3,
            gathers=2 * EXAMPLE_SETTINGS["layers"],
            pairs=len(pairs),
            saved=saved,
            exposure=_exposure(effect),
            rounds=timed.meta["rounds_run"],
            verdict=str(comparison),
            note=""
            if comparison.verdict == "faster"
            else (
                " A timeline can show communication under computation while the step takes no less"
                f" time: here both ranks' compute threads and gloo's threads share {os.cpu_count()} cores."
            ),
            **EXAMPLE_SETTINGS,
        ),
        encoding="utf-8",
    )
    print(f"prefetching saved per step (ms, each pair, sorted): {saved}; written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

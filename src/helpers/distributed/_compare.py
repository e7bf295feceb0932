"""Speed comparisons between settings of a distributed step, by the course's one rule
(:mod:`helpers.bench._speed`): interleaved turns, the distribution-free interval of the median ratio, a
verdict with the 2 % ``min_effect``.

Inside the ranks, :func:`time_interleaved` runs every setting's step once per round, in a
rotating order, each step between two barriers; a step's time is the slowest rank's (an
all-reduce of the durations with MAX), since a synchronous step ends when its last rank does.
In the caller, :func:`compare_settings` turns those samples into one
:class:`helpers.bench.SpeedComparison` per setting against the baseline.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

from ..bench._speed import SpeedComparison, interval, verdict_of
from ..bench._timing import Measurement


def time_interleaved(
    steps: Mapping[str, Callable[[], object]],
    rounds: int,
    warmup: int = 1,
    max_seconds: float | None = None,
    device: str = "cpu",
) -> dict[str, list[float]]:
    """Run inside every rank (same arguments on each). Returns ``{setting: [seconds per step]}``,
    the slowest rank's time of each step, the same lists on every rank. Stops early, after at
    least 3 rounds, once ``max_seconds`` of wall time are spent (all ranks agree to stop)."""
    import torch
    import torch.distributed as dist

    names = list(steps)
    cuda = device == "cuda"

    def one(fn: Callable[[], object]) -> float:
        dist.barrier()
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize()
        took = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
        dist.all_reduce(took, op=dist.ReduceOp.MAX)
        return float(took[0])

    for _ in range(warmup):
        for name in names:
            one(steps[name])
    samples: dict[str, list[float]] = {name: [] for name in names}
    began = time.perf_counter()
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:  # rotate the order: load changes hit every setting
            samples[name].append(one(steps[name]))
        if max_seconds is not None and r + 1 >= 3:
            spent = torch.tensor([time.perf_counter() - began], dtype=torch.float64)
            dist.all_reduce(spent, op=dist.ReduceOp.MAX)
            if float(spent[0]) >= max_seconds:
                break
    return samples


def compare_settings(
    samples: Mapping[str, Sequence[float]],
    baseline: str,
    min_effect: float = 0.02,
    device: str = "cpu",
    threads: int = 1,
) -> dict[str, SpeedComparison]:
    """One :class:`SpeedComparison` per setting other than ``baseline``, from the per-round
    step times of :func:`time_interleaved` (round i of each setting forms a pair)."""
    if baseline not in samples:
        raise ValueError(f"baseline {baseline!r} is not one of the settings {sorted(samples)}")
    base = list(samples[baseline])
    out = {}
    for name, times in samples.items():
        if name == baseline:
            continue
        times = list(times)
        ratios = [b / t for b, t in zip(base, times, strict=True) if b > 0 and t > 0]
        speedup, low, high = interval(ratios)
        out[name] = SpeedComparison(
            speedup,
            low,
            high,
            verdict_of(low, high, min_effect, pairs=len(ratios)),
            len(ratios),
            Measurement(base, base[0], device, meta={"unit": "step"}),
            Measurement(times, times[0], device, meta={"unit": "step"}),
            threads,
            device,
            (baseline, name),
            "step",
            "the rounds asked for were run, or the time budget was spent",
            float(min_effect),
            {"steps": 1},
        )
    return out

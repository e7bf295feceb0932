"""Is B faster than A? Interleaved pairs, a bootstrap interval, and one verdict.

Every speed comparison in the course goes through :func:`compare_speed` (two functions) or
:func:`compare_windows` (two windows of training steps). The rules, in one place:

* Both sides are warmed up first; warm-up is never timed.
* They are timed in pairs, and the order inside a pair alternates (A B, B A, A B, ...), so a
  change in the machine's load hits both sides alike.
* Both sides run with the same number of CPU threads, and the result says how many.
* On a GPU each sample is timed with CUDA events; on a CPU with ``time.perf_counter``.
* The speed-up is the median over the pairs of (baseline time / tuned time). Its 95 %
  interval comes from a bootstrap over the pairs (a fixed seed, so the same samples always
  give the same interval).
* Pairs are added until the interval is narrow enough or the time budget is spent.
* The verdict is ``"faster"`` when the whole interval lies above ``1 + min_effect``,
  ``"slower"`` when it lies below ``1 / (1 + min_effect)``, and ``"within noise"`` otherwise.
  That verdict is the course's only definition of "improved".
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .._validate import count, positive
from ._timing import Measurement, _Timer, resolve_device

VERDICTS = ("faster", "slower", "within noise")
_BOOTSTRAP_DRAWS = 2000
# A sample shorter than this is mostly timer overhead or one scheduler time slice: on a busy
# 2-core CPU, 2 ms samples gave A/A intervals 7x wide, 20 ms samples 25 % (python -m helpers.bench
# calibrate, 10 trials each, one hog process).
_MIN_SAMPLE_S = 20e-3


@dataclass(frozen=True)
class SpeedComparison:
    """The outcome of :func:`compare_speed` or :func:`compare_windows`.

    ``speedup`` is baseline time / tuned time (above 1: tuned is faster). ``low`` and
    ``high`` bound its 95 % interval. ``verdict`` is one of ``"faster"``, ``"slower"``,
    ``"within noise"``, said of the tuned side. ``baseline`` and ``tuned`` hold the timed
    samples in seconds per call (or per step, for windows).
    """

    speedup: float
    low: float
    high: float
    verdict: str
    pairs: int
    baseline: Measurement
    tuned: Measurement
    threads: int
    device: str
    names: tuple[str, str] = ("baseline", "tuned")
    unit: str = "call"
    stopped: str = ""
    min_effect: float = 0.02
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def improved(self) -> bool:
        """True only when the verdict is "faster"."""
        return self.verdict == "faster"

    @property
    def interval_width(self) -> float:
        """high / low - 1: 0.05 means the interval spans 5 %."""
        return self.high / self.low - 1

    def __str__(self) -> str:
        base, tuned = self.names
        head = {
            "faster": f"{tuned} is faster than {base}",
            "slower": f"{tuned} is slower than {base}",
            "within noise": f"no difference between {tuned} and {base} beyond the noise",
        }[self.verdict]
        return (
            f"{head}: speed-up {self.speedup:.2f}x (95 % interval {self.low:.2f}x to "
            f"{self.high:.2f}x) from {self.pairs} interleaved pairs; {base} "
            f"{self.baseline.median * 1e3:.3g} ms, {tuned} {self.tuned.median * 1e3:.3g} ms per "
            f"{self.unit} (medians), {self.threads} CPU thread{'s' * (self.threads != 1)} on "
            f"{self.device}."
        )


def interval(ratios: list[float], confidence: float = 0.95, seed: int = 0) -> tuple[float, float, float]:
    """(median, low, high) of per-pair time ratios: a percentile bootstrap of the median of
    their logarithms, with a fixed seed. Needs at least 3 positive ratios."""
    logs = np.log(np.asarray(ratios, dtype=float))
    if logs.size < 3 or not np.all(np.isfinite(logs)):
        raise ValueError(f"need at least 3 positive, finite ratios, got {list(ratios)!r}")
    rng = np.random.default_rng(seed)
    draws = np.median(logs[rng.integers(0, logs.size, size=(_BOOTSTRAP_DRAWS, logs.size))], axis=1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(draws, [tail, 100 - tail])
    return math.exp(float(np.median(logs))), math.exp(float(low)), math.exp(float(high))


def verdict_of(low: float, high: float, min_effect: float = 0.02) -> str:
    """ "faster" / "slower" / "within noise" from a speed-up interval (see the module notes)."""
    if low > 1 + min_effect:
        return "faster"
    if high < 1 / (1 + min_effect):
        return "slower"
    return "within noise"


def _run(
    baseline: Callable[[], Any],
    tuned: Callable[[], Any],
    *,
    device,
    threads,
    warmup,
    min_pairs,
    max_pairs,
    max_seconds,
    target_width,
    min_effect,
    number,
    per_call,
    names,
    unit,
    clock,
    sync,
) -> SpeedComparison:
    if not (
        isinstance(names, tuple)
        and len(names) == 2
        and all(isinstance(n, str) and n for n in names)
        and names[0] != names[1]
    ):
        raise ValueError(f"names must be two different, non-empty labels, got {names!r}")
    for side, fn in zip(names, (baseline, tuned), strict=True):
        if not callable(fn):
            raise TypeError(
                f"{side} must be a function called with no arguments, got "
                f"{type(fn).__name__}; wrap the work: lambda: model(x)"
            )
    (warmup,) = count(warmup=warmup)
    (min_pairs,) = count(3, min_pairs=min_pairs)
    (max_pairs,) = count(min_pairs, max_pairs=max_pairs)
    positive(max_seconds=max_seconds, target_width=target_width)
    if isinstance(min_effect, bool) or not isinstance(min_effect, (int, float)) or min_effect < 0:
        raise ValueError(f"min_effect must be a number >= 0, got {min_effect!r}")
    if threads is not None:
        (threads,) = count(threads=threads)
    dev = resolve_device(device)
    timer = _Timer(dev, clock, sync)
    now = clock or time.perf_counter
    before = torch.get_num_threads()
    used = threads or before
    torch.set_num_threads(used)
    try:
        cold, warm = {}, {}
        for side, fn in zip(names, (baseline, tuned), strict=True):
            cold[side] = timer(fn, 1)
            warm[side] = min([cold[side]] + [timer(fn, 1) for _ in range(warmup - 1)])
        if number is None:
            # enough calls per sample to last _MIN_SAMPLE_S, sized from the fastest warm call (a
            # slow first call, such as a compile, would otherwise give short, noisy samples)
            fastest = min(warm.values()) or 1e-9
            number = 1 if fastest >= _MIN_SAMPLE_S else min(10_000, math.ceil(_MIN_SAMPLE_S / fastest))
        (number,) = count(number=number)
        samples: dict[str, list[float]] = {side: [] for side in names}
        start = now()
        stopped, checked_at = "the pair limit was reached", 0
        while len(samples[names[0]]) < max_pairs:
            i = len(samples[names[0]])
            order = (0, 1) if i % 2 == 0 else (1, 0)
            pair = {}
            for k in order:
                fn = (baseline, tuned)[k]
                pair[names[k]] = timer(fn, number) / (number * per_call)
            for side in names:
                if not pair[side] > 0:
                    raise RuntimeError(
                        f"{side} took no measurable time on this clock; give each call "
                        "more work (or, in compare_speed, a larger number=)"
                    )
                samples[side].append(pair[side])
            n = i + 1
            if n < min_pairs:
                continue
            if now() - start >= max_seconds:
                stopped = "the time budget was spent"
                break
            if n >= checked_at + max(2, checked_at // 4):  # look now and then, not after every pair
                checked_at = n
                _, low, high = interval(_ratios(samples, names))
                if high / low - 1 <= target_width:
                    stopped = "the interval was narrow enough"
                    break
    finally:
        torch.set_num_threads(before)
    speedup, low, high = interval(_ratios(samples, names))
    measured = {
        side: Measurement(
            samples[side], cold[side] / per_call, str(dev), meta={"number": number, "unit": unit}
        )
        for side in names
    }
    return SpeedComparison(
        speedup,
        low,
        high,
        verdict_of(low, high, min_effect),
        len(samples[names[0]]),
        measured[names[0]],
        measured[names[1]],
        used,
        str(dev),
        tuple(names),
        unit,
        stopped,
        float(min_effect),
        {"number": number, "max_seconds": max_seconds, "steps": per_call if unit == "step" else None},
    )


def _pair(names: Any) -> Any:
    """A list or tuple of labels as a tuple (anything else is refused by :func:`_run`)."""
    return tuple(names) if isinstance(names, (list, tuple)) else names


def _ratios(samples: dict[str, list[float]], names: tuple[str, str]) -> list[float]:
    return [
        b / t if t > 0 and b > 0 else float("nan")
        for b, t in zip(samples[names[0]], samples[names[1]], strict=True)
    ]


def compare_speed(
    baseline: Callable[[], Any],
    tuned: Callable[[], Any],
    *,
    device: str | torch.device = "auto",
    threads: int | None = None,
    min_pairs: int = 10,
    max_pairs: int = 400,
    max_seconds: float = 5.0,
    target_width: float = 0.05,
    min_effect: float = 0.02,
    warmup: int = 2,
    number: int | None = None,
    names: tuple[str, str] = ("baseline", "tuned"),
    clock: Callable[[], float] | None = None,
    sync: Callable[[], None] | None = None,
) -> SpeedComparison:
    """Time ``baseline()`` and ``tuned()`` in interleaved pairs and say which is faster.

    ``threads``: CPU threads for both sides (default: torch's current setting), restored
    afterwards. Pairs are added (at least ``min_pairs``, at most ``max_pairs``) until the
    95 % interval of the speed-up spans no more than ``target_width`` (0.05 = 5 %) or
    ``max_seconds`` of timing are spent. ``min_effect``: a speed-up inside
    ``1 ± min_effect`` is called "within noise" even with a narrow interval. ``number``:
    calls per sample (default: enough for a sample of at least 20 ms, sized from the fastest
    warm-up call; a sample that short is mostly timer overhead and scheduler noise). ``names`` label
    the two sides in the printed sentence. ``clock`` and ``sync`` replace the timer and the
    device synchronization, as in :func:`helpers.bench.measure`.
    """
    return _run(
        baseline,
        tuned,
        device=device,
        threads=threads,
        warmup=warmup,
        min_pairs=min_pairs,
        max_pairs=max_pairs,
        max_seconds=max_seconds,
        target_width=target_width,
        min_effect=min_effect,
        number=number,
        per_call=1,
        names=_pair(names),
        unit="call",
        clock=clock,
        sync=sync,
    )


def compare_windows(
    baseline: Callable[[], Any],
    tuned: Callable[[], Any],
    *,
    steps: int,
    device: str | torch.device = "auto",
    threads: int | None = None,
    min_pairs: int = 10,
    max_pairs: int = 100,
    max_seconds: float = 30.0,
    target_width: float = 0.05,
    min_effect: float = 0.02,
    warmup: int = 1,
    names: tuple[str, str] = ("baseline", "tuned"),
    clock: Callable[[], float] | None = None,
    sync: Callable[[], None] | None = None,
) -> SpeedComparison:
    """:func:`compare_speed` for windows of training steps: each call of ``baseline()`` or
    ``tuned()`` runs ``steps`` steps (data loading included), and the samples are seconds per
    step. Use it where one step alone is not the unit that matters, such as a loop whose data
    loader prefetches batches. The device is synchronised only at the edges of a window."""
    (steps,) = count(steps=steps)
    return _run(
        baseline,
        tuned,
        device=device,
        threads=threads,
        warmup=warmup,
        min_pairs=min_pairs,
        max_pairs=max_pairs,
        max_seconds=max_seconds,
        target_width=target_width,
        min_effect=min_effect,
        number=1,
        per_call=steps,
        names=_pair(names),
        unit="step",
        clock=clock,
        sync=sync,
    )


def summary_line(result: SpeedComparison) -> str:
    """A short table cell: ``1.52x [1.47, 1.58] faster``."""
    return f"{result.speedup:.2f}x [{result.low:.2f}, {result.high:.2f}] {result.verdict}"

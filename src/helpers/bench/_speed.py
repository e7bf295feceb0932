"""Is B faster than A? Interleaved pairs, an interval valid for any noise, and one verdict.

Every speed comparison in the course goes through :func:`compare_speed` (two functions) or
:func:`compare_windows` (two windows of training steps). The rules, in one place:

* Both sides are warmed up first; warm-up is never timed.
* They are timed in pairs, and the order inside a pair alternates (A B, B A, A B, ...), so a
  change in the machine's load hits both sides alike.
* Both sides run with the same number of CPU threads, and the result says how many: by
  default torch's setting, or 1 when the CPU's cores are busy (:func:`default_threads`).
* On a GPU each sample is timed with CUDA events; on a CPU with ``time.perf_counter``.
* The speed-up is the median over the pairs of (baseline time / tuned time). Its 95 %
  interval is the distribution-free interval of a median: two of the sorted ratios, chosen
  from the binomial distribution so that the interval holds the true median with at least
  95 % probability, whatever the shape of the noise (heavy tails, outliers from a busy
  machine). It needs at least 6 pairs; with fewer, no verdict but "within noise" is drawn.
* Pairs are added until the interval is narrow enough or the time budget is spent. The budget
  is wall-clock time after the warm-up: no pair starts that would end past it (at least one
  pair is always timed), so a busy machine gives fewer pairs, not a longer wait.
* The verdict is ``"faster"`` when the whole interval lies above ``1 + min_effect``,
  ``"slower"`` when it lies below ``1 / (1 + min_effect)``, and ``"within noise"`` otherwise.
  That verdict is the course's only definition of "improved".
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .._validate import count, positive
from ..i18n import text, tr
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
        # each part through tr() with named fields, in the notebook's language; the names a
        # notebook gave (its own catalogue translates them) through text()
        base, tuned = (text(name) for name in self.names)
        head = {
            "faster": tr("{tuned} is faster than {base}", tuned=tuned, base=base),
            "slower": tr("{tuned} is slower than {base}", tuned=tuned, base=base),
            "within noise": tr(
                "no difference between {tuned} and {base} beyond the noise", tuned=tuned, base=base
            ),
        }[self.verdict]
        span, pairs = tr("95 % interval"), tr("{pairs} interleaved pairs", pairs=self.pairs)
        if self.pairs < min_pairs_for():  # no 95 % interval from so few: the range, no verdict
            head = tr("too few pairs to tell {tuned} from {base}", tuned=tuned, base=base)
            span = tr("range")
            pairs = tr("{pairs} (a 95 % interval needs {need})", pairs=pairs, need=min_pairs_for())
        elif self.verdict == "within noise" and (self.low > 1 or self.high < 1):
            head = tr(
                "{tuned} and {base} differ by less than the {threshold} threshold",
                tuned=tuned,
                base=base,
                threshold=f"{self.min_effect:.0%}",
            )
        unit = {"call": tr("per call"), "step": tr("per step")}.get(self.unit) or f"per {text(self.unit)}"
        one = self.threads == 1
        threads = tr("{n} CPU thread", n=self.threads) if one else tr("{n} CPU threads", n=self.threads)
        return tr(
            "{head}: speed-up {speedup}x ({span} {low}x to {high}x) from {pairs}; {base} {base_ms} ms, "
            "{tuned} {tuned_ms} ms {unit} (medians), {threads} on {device}.",
            head=head,
            speedup=f"{self.speedup:.2f}",
            span=span,
            low=f"{self.low:.2f}",
            high=f"{self.high:.2f}",
            pairs=pairs,
            base=base,
            base_ms=_ms(self.baseline.median),
            tuned=tuned,
            tuned_ms=_ms(self.tuned.median),
            unit=unit,
            threads=threads,
            device=self.device,
        )


def _ms(seconds: float) -> str:
    """Milliseconds to three significant figures, never in exponent form ("2550", not "2.55e+03")."""
    ms = seconds * 1e3
    return f"{ms:.0f}" if ms >= 100 else f"{ms:.3g}"


def min_pairs_for(confidence: float = 0.95) -> int:
    """The fewest pairs whose median has a distribution-free interval at ``confidence``: with n
    pairs the widest such interval, from the smallest to the largest ratio, holds the median
    with probability 1 - 2 / 2**n (6 pairs: 96.9 %)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence!r}")
    n = 1
    while 1 - 2 * 0.5**n < confidence:
        n += 1
    return n


def _order_rank(n: int, confidence: float) -> int:
    """The largest k (1-based) such that P(Binomial(n, 1/2) <= k - 1) <= (1 - confidence) / 2:
    the k-th smallest and the k-th largest of n values bound the median's interval."""
    tail, below, k = (1 - confidence) / 2, 0.0, 0
    while k < n:
        below += math.comb(n, k) * 0.5**n  # P(X <= k)
        if below > tail:
            break
        k += 1
    return k


def interval(ratios: list[float], confidence: float = 0.95, seed: int = 0) -> tuple[float, float, float]:
    """(median, low, high) of per-pair time ratios. ``low`` and ``high`` are order statistics
    of the ratios: the k-th smallest and k-th largest, k from the binomial distribution
    (:func:`min_pairs_for`), so the interval holds the true median with at least
    ``confidence`` whatever the noise's shape. With fewer than ``min_pairs_for(confidence)``
    ratios no such interval exists: ``low`` and ``high`` are then the smallest and the largest
    ratio, and a verdict must not be drawn from them (:func:`verdict_of` with ``pairs=``).
    Needs at least 3 positive ratios. ``seed`` is not used (the interval is exact); it is kept
    so that older calls still work."""
    del seed
    values = np.sort(np.asarray(ratios, dtype=float))
    if values.ndim != 1 or values.size < 3 or not np.all(np.isfinite(values)) or not np.all(values > 0):
        raise ValueError(f"need at least 3 positive, finite ratios, got {list(ratios)!r}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence!r}")
    n = values.size
    k = max(1, _order_rank(n, confidence))
    mid = math.exp(float(np.median(np.log(values))))
    return mid, float(values[k - 1]), float(values[n - k])


def verdict_of(low: float, high: float, min_effect: float = 0.02, pairs: int | None = None) -> str:
    """ "faster" / "slower" / "within noise" from a speed-up interval (see the module notes).
    ``pairs``: how many pairs the interval comes from; below :func:`min_pairs_for` the interval
    is not a 95 % one and the verdict is "within noise"."""
    if pairs is not None and pairs < min_pairs_for():
        return "within noise"
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
    used = threads or default_threads(dev)
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
        stopped, checked_at, longest = "the pair limit was reached", 0, 0.0
        while len(samples[names[0]]) < max_pairs:
            i = len(samples[names[0]])
            # the budget is wall-clock: no pair starts that would end past it (the longest pair
            # so far is the guess), so a busy machine gives fewer pairs, not a longer wait
            if i and now() - start + longest > max_seconds:
                stopped = "the time budget was spent"
                break
            began = now()
            order = (0, 1) if i % 2 == 0 else (1, 0)
            pair = {}
            for k in order:
                fn = (baseline, tuned)[k]
                pair[names[k]] = timer(fn, number) / (number * per_call)
            longest = max(longest, now() - began)
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
            if n >= checked_at + max(2, checked_at // 4):  # look now and then, not after every pair
                checked_at = n
                _, low, high = interval(_ratios(samples, names))
                if high / low - 1 <= target_width:
                    stopped = "the interval was narrow enough"
                    break
    finally:
        torch.set_num_threads(before)
    ratios = _ratios(samples, names)
    if len(ratios) < 3:  # the budget ended the timing first: no interval at all
        values = sorted(ratios)
        speedup, low, high = values[len(values) // 2], values[0], values[-1]
    else:
        speedup, low, high = interval(ratios)
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
        verdict_of(low, high, min_effect, pairs=len(ratios)),
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


def default_threads(device: str | torch.device = "cpu") -> int:
    """CPU threads a comparison uses when none are given: torch's setting, but 1 on a CPU whose
    cores are busy (the 1-minute load average leaves fewer free cores than torch's threads). On
    a shared CPU several threads of one side wait for each other, and a comparison then gets a
    few noisy pairs in its budget; one thread gets many (``python -m helpers.bench calibrate
    --loads 1 2 6 --threads 1 2``, figures in the README)."""
    current = torch.get_num_threads()
    if torch.device(device).type != "cpu" or current == 1:
        return current
    try:
        load = os.getloadavg()[0]
    except (OSError, AttributeError):  # not on this OS: keep torch's setting
        return current
    free = (os.cpu_count() or 1) - load
    return current if free >= current - 0.5 else 1


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

    ``threads``: CPU threads for both sides (default: :func:`default_threads`: torch's current
    setting, or 1 on a busy CPU), restored afterwards. Pairs are added (at most ``max_pairs``)
    until, from ``min_pairs`` on, the 95 % interval of the speed-up spans no more than
    ``target_width`` (0.05 = 5 %), or until ``max_seconds`` of wall-clock time are spent: the
    budget holds even before ``min_pairs`` (no pair starts that would end past it; at least one
    pair is timed), and fewer than 6 pairs give no verdict but "within noise". ``min_effect``:
    a speed-up inside ``1 ± min_effect`` is called "within noise" even with a narrow interval:
    below 2 %, a difference is smaller than what the course treats as a result (the printed
    sentence then names the threshold). ``number``:
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

"""Choose a setting from measurements and say why (the reference of a graded exercise).

Pure Python, no torch. A row is one setting: ``{"setting": name, "low": ..., "high": ...,
"peak_bytes": ...}``, where ``low`` and ``high`` bound the 95 % interval of its speed-up
against the baseline (the baseline's own row is ``low = high = 1``) and ``peak_bytes`` is its
measured peak memory. The rule:

1. Only settings whose ``peak_bytes`` fit in the memory budget count; none: ``(None, "none fits")``.
2. If any is faster (``low > 1 + min_effect``), take the one with the highest ``low``: the
   surest gain, not the luckiest median. Reason ``"faster"``.
3. Otherwise, among those not slower (``high >= 1 / (1 + min_effect)``), take the one that
   needs the least memory. Reason ``"less memory"``.
4. If every one that fits is slower, take the least slow (highest ``high``). Reason ``"least slow"``.

Ties go to the setting listed first. The thresholds are the course's verdict rule
(:func:`helpers.bench._speed.verdict_of`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..bench._speed import SpeedComparison

REASONS = ("faster", "less memory", "least slow", "none fits")


def _number(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{where} must be a finite number, got {value!r}")
    return float(value)


def _checked(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    if isinstance(rows, (str, bytes)) or not isinstance(rows, Sequence) or not rows:
        raise ValueError("rows must be a non-empty list of dicts with setting, low, high, peak_bytes")
    out, seen = [], set()
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise ValueError(f"rows[{i}] must be a dict, got {type(row).__name__}")
        missing = [k for k in ("setting", "low", "high", "peak_bytes") if k not in row]
        if missing:
            raise ValueError(
                f"rows[{i}] lacks {', '.join(missing)}; each row needs setting, low, high, peak_bytes"
            )
        name = row["setting"]
        if not isinstance(name, str) or not name:
            raise ValueError(f"rows[{i}]['setting'] must be a non-empty name, got {name!r}")
        if name in seen:
            raise ValueError(f"setting {name!r} is listed twice; give each setting one row")
        seen.add(name)
        low, high = _number(f"rows[{i}]['low']", row["low"]), _number(f"rows[{i}]['high']", row["high"])
        if not 0 < low <= high:
            raise ValueError(f"rows[{i}] ({name!r}) needs 0 < low <= high, got low={low!r}, high={high!r}")
        peak = row["peak_bytes"]
        if isinstance(peak, bool) or not isinstance(peak, int) or peak < 0:
            raise ValueError(f"rows[{i}]['peak_bytes'] must be a whole number of bytes >= 0, got {peak!r}")
        out.append({"setting": name, "low": low, "high": high, "peak_bytes": peak})
    return out


def choose_setting(
    rows: Sequence[Mapping[str, Any]], memory_budget_bytes: float, min_effect: float = 0.02
) -> tuple[str | None, str]:
    """``(setting, reason)`` by the rule in the module notes; reason is one of :data:`REASONS`."""
    checked = _checked(rows)
    budget = _number("memory_budget_bytes", memory_budget_bytes)
    effect = _number("min_effect", min_effect)
    if budget < 0 or effect < 0:
        raise ValueError(f"memory_budget_bytes and min_effect must be >= 0, got {budget!r} and {effect!r}")
    fits = [r for r in checked if r["peak_bytes"] <= budget]
    if not fits:
        return None, "none fits"
    # max() and min() keep the first of equal items: ties go to the setting listed first
    faster = [r for r in fits if r["low"] > 1 + effect]
    if faster:
        return max(faster, key=lambda r: r["low"])["setting"], "faster"
    not_slower = [r for r in fits if r["high"] >= 1 / (1 + effect)]
    if not_slower:
        return min(not_slower, key=lambda r: r["peak_bytes"])["setting"], "less memory"
    return max(fits, key=lambda r: r["high"])["setting"], "least slow"


def acceptable_choices(
    rows: Sequence[Mapping[str, Any]], memory_budget_bytes: float, min_effect: float = 0.02
) -> list[list[Any]]:
    """Every ``[setting, reason]`` a fair reading of the goal gives (the graded exercise accepts
    any of them): :func:`choose_setting`'s answer; among measurably faster settings the best
    estimate (the highest midpoint of the interval, its geometric mean) as well as the surest gain;
    among the slower ones, the best estimate, the highest ``high`` or the highest ``low``; and
    every setting tied with a chosen one, not only the first listed."""
    checked = _checked(rows)
    budget = _number("memory_budget_bytes", memory_budget_bytes)
    effect = _number("min_effect", min_effect)
    setting, reason = choose_setting(checked, budget, effect)
    if setting is None:
        return [[None, reason]]
    fits = [r for r in checked if r["peak_bytes"] <= budget]

    def middle(r: Mapping[str, Any]) -> float:
        return math.sqrt(r["low"] * r["high"])

    def best(pool: list[dict[str, Any]], key: Any, pick: Any = max) -> list[str]:
        top = pick(key(r) for r in pool)
        return [r["setting"] for r in pool if key(r) == top]

    if reason == "faster":
        pool = [r for r in fits if r["low"] > 1 + effect]
        names = best(pool, lambda r: r["low"]) + best(pool, middle)
    elif reason == "less memory":
        pool = [r for r in fits if r["high"] >= 1 / (1 + effect)]
        names = best(pool, lambda r: r["peak_bytes"], min)
    else:
        names = best(fits, lambda r: r["high"]) + best(fits, middle) + best(fits, lambda r: r["low"])
    return [[name, reason] for name in dict.fromkeys(names)]


def rows_from(
    comparisons: Mapping[str, SpeedComparison] | Sequence[SpeedComparison], peaks: Mapping[str, int]
) -> list[dict[str, Any]]:
    """Rows for :func:`choose_setting` from SpeedComparisons against one baseline (as
    :func:`helpers.distributed.compare_settings` returns them) and measured peaks by setting
    name: the baseline's row (1, 1) first, then one row per comparison, in order."""
    items = list(comparisons.values()) if isinstance(comparisons, Mapping) else list(comparisons)
    if not items or not all(isinstance(c, SpeedComparison) for c in items):
        raise ValueError("comparisons must be a non-empty dict or list of SpeedComparison")
    baselines = {c.names[0] for c in items}
    if len(baselines) != 1:
        raise ValueError(f"the comparisons must share one baseline, got {sorted(baselines)}")
    names = [baselines.pop()] + [c.names[1] for c in items]
    missing = [n for n in names if n not in peaks]
    if missing:
        raise ValueError(f"peaks lacks {', '.join(map(repr, missing))}; give a peak_bytes for every setting")
    spans = [(1.0, 1.0)] + [(c.low, c.high) for c in items]
    return [
        {"setting": n, "low": lo, "high": hi, "peak_bytes": peaks[n]}
        for n, (lo, hi) in zip(names, spans, strict=True)
    ]

"""Interval algebra on half-open time intervals ``(start, end)`` — the arithmetic of a timeline.

Everything a trace analysis needs reduces to four moves: merge overlapping intervals into a
union, measure its length, intersect two unions, and subtract one union from another.
Exposed communication, idle gaps and overlap are all built from them.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

import numpy as np

Interval = tuple[float, float]


def _checked(intervals: Iterable[Interval]) -> list[Interval]:
    out = []
    for item in intervals:
        try:
            start, end = item
        except (TypeError, ValueError):
            raise ValueError(f"an interval must be a (start, end) pair, got {item!r}") from None
        if end < start:
            raise ValueError(f"interval {item!r} ends before it starts; pass (start, end) with start <= end")
        if end > start:  # empty intervals take no time
            out.append((start, end))
    return out


def merge_intervals(intervals: Iterable[Interval]) -> list[Interval]:
    """The union of ``intervals`` as a sorted list of disjoint intervals (touching ones are joined)."""
    return _merge(_checked(intervals))


def _merge(intervals: list[Interval]) -> list[Interval]:
    """:func:`merge_intervals` without the input checks, for spans already known to be valid."""
    merged: list[Interval] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def union_length(intervals: Iterable[Interval]) -> float:
    """Total time covered by at least one interval (overlaps counted once)."""
    return sum(end - start for start, end in merge_intervals(intervals))


def intersect(a: Iterable[Interval], b: Iterable[Interval]) -> list[Interval]:
    """The time covered by both ``a`` and ``b``, as disjoint sorted intervals."""
    ua, ub = merge_intervals(a), merge_intervals(b)
    out: list[Interval] = []
    i = j = 0
    while i < len(ua) and j < len(ub):
        start, end = max(ua[i][0], ub[j][0]), min(ua[i][1], ub[j][1])
        if start < end:
            out.append((start, end))
        if ua[i][1] < ub[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(a: Iterable[Interval], b: Iterable[Interval]) -> list[Interval]:
    """The time covered by ``a`` but not by ``b``, as disjoint sorted intervals."""
    ub = merge_intervals(b)
    out: list[Interval] = []
    j = 0
    for start, end in merge_intervals(a):
        while j < len(ub) and ub[j][1] <= start:
            j += 1
        k, cursor = j, start
        while k < len(ub) and ub[k][0] < end:
            if ub[k][0] > cursor:
                out.append((cursor, ub[k][0]))
            cursor = max(cursor, ub[k][1])
            k += 1
        if cursor < end:
            out.append((cursor, end))
    return out


def clip(intervals: Iterable[Interval], start: float, end: float) -> list[Interval]:
    """The parts of ``intervals`` inside the window ``[start, end]`` (not merged)."""
    return [(max(s, start), min(e, end)) for s, e in _checked(intervals) if s < end and e > start]


def overlap(a: Iterable[Interval], b: Iterable[Interval]) -> float:
    """Length of the time when something in ``a`` and something in ``b`` run together."""
    return sum(end - start for start, end in intersect(a, b))


def exposed(comm: Iterable[Interval], compute: Iterable[Interval]) -> float:
    """Communication time NOT hidden under computation: |union(comm)| − |comm ∩ compute|."""
    comm = merge_intervals(comm)
    return union_length(comm) - overlap(comm, compute)


def gaps(intervals: Iterable[Interval], start: float, end: float) -> list[Interval]:
    """The idle stretches of the window ``[start, end]`` that no interval covers."""
    return subtract([(start, end)], intervals) if end > start else []


def cut(merged: list[Interval], start: float, end: float) -> list[Interval]:
    """The part of an already merged (disjoint, sorted) union inside ``[start, end]`` — by
    bisection, so slicing a long trace into steps stays fast."""
    i = bisect.bisect_right(merged, (start, float("inf"))) - 1
    i = max(i, 0)
    out = []
    while i < len(merged) and merged[i][0] < end:
        s, e = merged[i]
        if e > start:
            out.append((max(s, start), min(e, end)))
        i += 1
    return out


# --------------------------------------------------------------------------- numpy versions
# The same moves on arrays of starts and ends, for traces of 10^5-10^7 events. Outputs are
# exactly those of the list functions above (same intervals, same order).


def merge_arrays(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_merge` on arrays: sort by (start, end), and open a new block wherever a start
    lies after every end seen so far. Zero-length intervals are kept, as in :func:`_merge`."""
    if len(starts) == 0:
        return np.empty(0), np.empty(0)
    order = np.lexsort((ends, starts))
    s, reach = starts[order], np.maximum.accumulate(ends[order])
    first = np.flatnonzero(np.r_[True, s[1:] > reach[:-1]])
    last = np.r_[first[1:] - 1, len(s) - 1]
    return s[first], reach[last]


def as_list(starts: np.ndarray, ends: np.ndarray) -> list[Interval]:
    return list(zip(starts.tolist(), ends.tolist(), strict=True))


def union_arrays(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union, as :func:`merge_intervals` gives it (empty intervals take no time)."""
    keep = ends > starts
    return merge_arrays(starts[keep], ends[keep])


def intersect_arrays(
    a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`intersect` of two unions already merged (disjoint, sorted), by bisection."""
    (a_s, a_e), (b_s, b_e) = a, b
    lo = np.searchsorted(b_e, a_s, "right")  # first b ending after a starts
    hi = np.searchsorted(b_s, a_e, "left")  # first b starting at or after a ends
    counts = np.maximum(hi - lo, 0)
    i = np.repeat(np.arange(len(a_s)), counts)
    j = lo[i] + np.arange(len(i)) - np.repeat(np.cumsum(counts) - counts, counts)
    s, e = np.maximum(a_s[i], b_s[j]), np.minimum(a_e[i], b_e[j])
    keep = s < e
    return s[keep], e[keep]

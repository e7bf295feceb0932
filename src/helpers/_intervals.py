"""Interval algebra on half-open time intervals ``(start, end)`` — the arithmetic of a timeline.

Everything a trace analysis needs reduces to four moves: merge overlapping intervals into a
union, measure its length, intersect two unions, and subtract one union from another.
Exposed communication, idle gaps and overlap are all built from them.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

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

"""The user ranges of a ``torch.profiler`` chrome trace, with their nesting.

The file is read by chapter 4's trace reader (:mod:`helpers.timeline._trace_read`), so a trace
is read one way, with one set of errors, in both chapters.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..timeline._trace_read import read_trace, trace_from_data


@dataclass(frozen=True)
class Range:
    """One user range (``record_function`` / :func:`annotate`) of a torch.profiler trace."""

    name: str
    start_us: float
    end_us: float
    depth: int  # 0 = outermost user range on its thread
    parent: str | None  # innermost enclosing user range, if any
    thread: int = 0

    @property
    def duration_us(self) -> float:
        return self.end_us - self.start_us


def trace_ranges(trace: str | Path | dict[str, Any], names: Sequence[str] | None = None) -> list[Range]:
    """User ranges of a chrome trace (``cat == "user_annotation"``) with nesting, in start order.

    ``trace`` is the file ``export_chrome_trace`` wrote (``.json`` or ``.json.gz``, e.g. from
    :func:`record_cpu_trace`) or its content as a dict. ``names`` keeps only those names
    (nesting is still worked out from all user ranges). ``ProfilerStep#N`` ranges that
    ``prof.step()`` adds are user ranges too. A missing file raises ``FileNotFoundError``, a
    damaged one a one-line ``ValueError`` (``helpers.timeline``'s ``TraceError``).
    """
    loaded = trace_from_data(trace) if isinstance(trace, (dict, list)) else read_trace(trace)
    columns = loaded.columns
    events = columns.events(np.flatnonzero(columns.cat_mask("user_annotation")))
    by_thread: dict[tuple, list] = {}
    for e in events:
        by_thread.setdefault((e.pid, e.tid), []).append(e)
    ranges: list[Range] = []
    eps = 1e-3  # µs: chrome traces round timestamps, a child may end "after" its parent by that
    for (_, tid), evs in by_thread.items():
        evs.sort(key=lambda e: (e.ts, -e.dur))
        stack: list[tuple[str, float]] = []  # (name, end)
        for e in evs:
            start, end = e.ts, e.ts + e.dur
            while stack and end > stack[-1][1] + eps:  # sorted by start: only the end decides
                stack.pop()
            parent = stack[-1][0] if stack else None
            ranges.append(Range(e.name, start, end, len(stack), parent, tid if isinstance(tid, int) else 0))
            stack.append((e.name, end))
    ranges.sort(key=lambda r: (r.start_us, r.depth))
    if names is not None:
        wanted = set(names)
        ranges = [r for r in ranges if r.name in wanted]
    return ranges


def count_ranges(ranges: Sequence[Range]) -> dict[str, int]:
    """How many times each range name occurs."""
    return dict(Counter(r.name for r in ranges))


def ranges_inside(ranges: Sequence[Range], outer: Range) -> list[Range]:
    """The ranges (same thread) that lie within ``outer``, ``outer`` itself excluded."""
    eps = 1e-3
    return [
        r
        for r in ranges
        if r is not outer
        and r.thread == outer.thread
        and r.start_us >= outer.start_us - eps
        and r.end_us <= outer.end_us + eps
    ]


def format_ranges(ranges: Sequence[Range], limit: int = 30) -> str:
    """An indented listing: name, start (µs from the first range) and duration."""
    if not ranges:
        return "(no ranges)"
    t0 = ranges[0].start_us
    lines = [
        f"{'  ' * r.depth}{r.name:<{28 - 2 * r.depth}} +{r.start_us - t0:9.1f} µs {r.duration_us:9.1f} µs"
        for r in ranges[:limit]
    ]
    if len(ranges) > limit:
        lines.append(f"... {len(ranges) - limit} more")
    return "\n".join(lines)

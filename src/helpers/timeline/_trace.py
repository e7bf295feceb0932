"""Kineto / ``torch.profiler`` chrome traces (``.json`` or ``.json.gz``) held as columns.

A :class:`Trace` keeps its complete events as numpy columns (start, duration, and codes for
name, category, thread, stream and correlation), so the analysis runs vectorised; the
:class:`Event` tuples of ``trace.events`` are built only when someone asks for them.
This module is the data model only: reading a file into it is
:mod:`helpers.timeline._trace_read`, which imports this one (never the other way round).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from itertools import repeat
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

STEP_RE = re.compile(r"^ProfilerStep#\d+$")
# Steps annotated by hand (NVTX-style "train_step_0012", record_function("step 3"), ...)
ANNOTATED_STEP_RE = re.compile(r"^(train_)?step([ _#:]*\d+)?$", re.IGNORECASE)
# HTA 0.5.0's kernel classes (``re.match``: anchored at the start of the name).
COMM_KERNEL_RE = re.compile(r"^nccl.*Kernel")
MEMORY_KERNEL_RE = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
NOT_COMPUTE_RE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")
# On CPU traces the collectives are c10d calls and backend annotations (``gloo:all_reduce``).
CPU_COMM_RE = re.compile(r"^(gloo|nccl|mpi|ucc):|^c10d::")
DATA_RE = re.compile(r"dataloader|data_load|next_batch|fetch_batch", re.IGNORECASE)


class Event(NamedTuple):
    """One complete ("X") trace event, a light named tuple. Times are microseconds, as in the trace.

    ``stream`` is None for host events. ``args`` holds the event's ``stream`` and ``correlation``
    (the arguments the analysis uses); ``load_trace(..., keep_args=True)`` keeps every argument
    the profiler wrote.
    """

    name: str
    cat: str
    ts: float
    dur: float
    pid: Any
    tid: Any
    stream: int | None
    correlation: int | None
    args: dict

    @property
    def end(self) -> float:
        return self[2] + self[3]

    @property
    def on_gpu(self) -> bool:
        """Device-side work (kernel, memcpy, memset): the event carries a CUDA stream."""
        return self[6] is not None

    def __repr__(self) -> str:
        where = f"stream {self.stream}" if self.on_gpu else f"tid {self.tid}"
        return f"Event({self.name[:40]!r}, {self.cat}, ts={self.ts:.1f}, dur={self.dur:.1f} µs, {where})"


class Columns:
    """The complete events of a trace as parallel numpy columns, sorted by start (stable).

    Text and id fields are codes into a list of distinct values (``names[name[i]]``); code −1
    means "absent" (a host event has stream −1; an event without correlation has corr −1).
    """

    def __init__(
        self,
        ts: Sequence[float],
        dur: Sequence[float],
        names: Sequence[str],
        cats: Sequence[str],
        pids: Sequence[Any],
        tids: Sequence[Any],
        streams: Sequence[Any],
        corrs: Sequence[Any],
        args: Sequence[dict] | None = None,
    ) -> None:
        self.ts = np.asarray(ts, dtype=np.float64)
        self.dur = np.asarray(dur, dtype=np.float64)
        order = None if _is_sorted(self.ts) else np.argsort(self.ts, kind="stable")
        self.name, self.names = _codes(names, order)
        self.cat, self.cats = _codes(cats, order)
        self.thread, self.threads = _pairs(_codes(pids, order), _codes(tids, order))
        self.stream, self.streams = _codes(streams, order, absent=(None, -1))  # Kineto: -1 = none
        self.corr, self.corrs = _codes(corrs, order, absent=(None,))
        # streams / corrs may come as int64 arrays with NONE for "absent" (the fast parser)
        if order is not None:
            self.ts, self.dur = self.ts[order], self.dur[order]
            args = None if args is None else [args[i] for i in order.tolist()]
        self.args = args
        self._masks: dict[tuple[str, int, str], np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.ts)

    @property
    def end(self) -> np.ndarray:
        return self.ts + self.dur

    @property
    def on_gpu(self) -> np.ndarray:
        return self.stream >= 0

    def name_mask(self, rx: re.Pattern, how: str = "match") -> np.ndarray:
        """``rx.match(name)`` (or ``search``) for every event, evaluated once per distinct name."""
        key = (rx.pattern, rx.flags, how)
        if key not in self._masks:
            test = getattr(rx, how)
            hits = np.fromiter((test(n) is not None for n in self.names), bool, len(self.names))
            self._masks[key] = hits[self.name] if len(self.names) else np.zeros(len(self), bool)
        return self._masks[key]

    def cat_mask(self, cat: str) -> np.ndarray:
        return self.cat == (self.cats.index(cat) if cat in self.cats else -2)

    def events(self, index: np.ndarray | None = None) -> list[Event]:
        """:class:`Event` tuples for the rows ``index`` (all rows when None), in order."""
        pick = (lambda col: col) if index is None else (lambda col: col[index])
        look = lambda values, codes: list(map((*values, None).__getitem__, pick(codes).tolist()))  # noqa: E731
        names, cats = look(self.names, self.name), look(self.cats, self.cat)
        threads = look(self.threads, self.thread)
        streams, corrs = look(self.streams, self.stream), look(self.corrs, self.corr)
        if self.args is not None:
            args: Iterable = self.args if index is None else [self.args[i] for i in index.tolist()]
        else:
            args = (
                {k: v for k, v in (("stream", s), ("correlation", c)) if v is not None}
                for s, c in zip(streams, corrs, strict=True)
            )
        rows = zip(
            names,
            cats,
            pick(self.ts).tolist(),
            pick(self.dur).tolist(),
            [t[0] for t in threads],
            [t[1] for t in threads],
            streams,
            corrs,
            args,
            strict=True,
        )
        return list(map(tuple.__new__, repeat(Event), rows))


def _is_sorted(a: np.ndarray) -> bool:
    return len(a) < 2 or bool((a[1:] >= a[:-1]).all())


def _pairs(a: tuple[np.ndarray, list], b: tuple[np.ndarray, list]) -> tuple[np.ndarray, list]:
    """Codes of (a, b) pairs from the codes of a and of b (no tuple per event)."""
    pair = a[0] * max(len(b[1]), 1) + b[0]
    distinct, codes = np.unique(pair, return_inverse=True)
    n = max(len(b[1]), 1)
    return codes.reshape(-1), [(a[1][p // n], b[1][p % n]) for p in distinct.tolist()]


NONE = np.iinfo(np.int64).min  # "absent" in an int64 column of ids


def _codes(
    values: Sequence[Any] | np.ndarray, order: np.ndarray | None, absent: tuple = ()
) -> tuple[np.ndarray, list[Any]]:
    """Factorise ``values``: (codes in ``order``, distinct values in order of appearance);
    values equal to one in ``absent`` get code −1. An int64 array (``NONE`` for None) is
    factorised by sorting instead (its distinct values then come sorted)."""
    if isinstance(values, np.ndarray):
        present = values != NONE
        for a in absent:
            if a is not None:
                present &= values != a
        codes = np.full(len(values), -1, np.int64)
        uniques, codes[present] = np.unique(values[present], return_inverse=True)
        return (codes if order is None else codes[order]), uniques.tolist()
    index: dict[Any, int] = dict.fromkeys(values, 0)  # distinct values, first appearance first
    for a in absent:
        index.pop(a, None)
    distinct = list(index)
    index.update(zip(distinct, range(len(distinct)), strict=True))
    for a in absent:
        index[a] = -1
    codes = np.fromiter(map(index.__getitem__, values), np.int64, len(values))
    return (codes if order is None else codes[order]), distinct


class Trace:
    """One rank's trace: its complete events (as :class:`Columns`, sorted by start) and what the
    file says about it. ``events`` (a list of :class:`Event`) is built on first use."""

    def __init__(
        self,
        path: str,
        events: Sequence[Event] | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        backend: str | None = None,
        thread_names: dict[tuple[Any, Any], str] | None = None,
        meta: dict[str, Any] | None = None,
        *,
        columns: Columns | None = None,
        parser: str = "",
    ) -> None:
        self.path = str(path)
        self.rank, self.world_size, self.backend = rank, world_size, backend
        self.thread_names = dict(thread_names or {})
        self.meta = dict(meta or {})
        self.parser = parser  # the JSON parser that read the file
        self.cache: dict[str, Any] = {}  # analysis results
        if columns is None:
            events = list(events or [])
            columns = Columns(
                [e.ts for e in events],
                [e.dur for e in events],
                [e.name for e in events],
                [e.cat for e in events],
                [e.pid for e in events],
                [e.tid for e in events],
                [e.stream for e in events],
                [e.correlation for e in events],
                [e.args for e in events],
            )
        self.columns = columns
        self._events = None if events is None else list(events)

    @property
    def events(self) -> list[Event]:
        """The complete events, sorted by start (built from the columns on first use)."""
        if self._events is None:
            self._events = self.columns.events()
        return self._events

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Trace):
            return NotImplemented
        return (self.path, self.rank, self.world_size, self.backend, self.thread_names, self.meta) == (
            other.path,
            other.rank,
            other.world_size,
            other.backend,
            other.thread_names,
            other.meta,
        ) and self.events == other.events

    __hash__ = None  # type: ignore[assignment]

    @property
    def is_gpu(self) -> bool:
        """True when the trace holds device events (kernels on CUDA streams)."""
        if "is_gpu" not in self.cache:
            self.cache["is_gpu"] = bool(self.columns.on_gpu.any())
        return self.cache["is_gpu"]

    def gpu_events(self) -> list[Event]:
        return self.columns.events(np.flatnonzero(self.columns.on_gpu))

    def step_index(self, pattern: str | None = None) -> np.ndarray:
        """Row numbers of the step events (see :meth:`steps`)."""
        c = self.columns
        host = ~c.on_gpu
        if pattern is not None:
            return np.flatnonzero(host & c.name_mask(re.compile(pattern), "search"))
        found = np.flatnonzero(host & c.name_mask(STEP_RE))
        if not len(found):
            found = np.flatnonzero(host & c.name_mask(ANNOTATED_STEP_RE))
        return found

    def steps(self, pattern: str | None = None) -> list[Event]:
        """``ProfilerStep#N`` events; else annotated steps (``train_step_12``, ``step 3``);
        ``pattern`` (a regex) overrides both."""
        return self.columns.events(self.step_index(pattern))

    def __repr__(self) -> str:
        kind = "GPU" if self.is_gpu else "CPU-only"
        rank = "?" if self.rank is None else self.rank
        return (
            f"Trace({Path(self.path).name}: rank {rank}/{self.world_size or '?'}, "
            f"{self.backend or 'no'} backend, {kind}, {len(self.columns)} events, "
            f"{len(self.step_index())} steps)"
        )

"""The SQLite export: an ``nsys export --type sqlite`` database read into :class:`Table` s."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._table import Table

MEMORY_KINDS = {
    0: "unknown",
    1: "pageable",
    2: "pinned",
    3: "device",
    4: "array",
    5: "managed",
    6: "device static",
    7: "managed static",
}  # CUpti_ActivityMemoryKind (srcKind, dstKind)
MEMCPY_KINDS = {
    0: "Unknown",
    1: "Host-to-Device",
    2: "Device-to-Host",
    3: "Host-to-Array",
    4: "Array-to-Host",
    5: "Array-to-Array",
    6: "Array-to-Device",
    7: "Device-to-Array",
    8: "Device-to-Device",
    9: "Host-to-Host",
    10: "Peer-to-Peer",
}  # CUPTI_ActivityMemcpyKind
NVTX_PUSHPOP, NVTX_STARTEND = 59, 60  # NVTX_EVENTS.eventType of ranges (34 = mark, not a range)


def _columns_of(con: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in con.execute(f"PRAGMA table_info({table})")}


def _need(con: sqlite3.Connection, table: str, wanted: Sequence[str], source: str) -> None:
    missing = [c for c in wanted if c not in _columns_of(con, table)]
    if missing:
        raise ValueError(
            f"{source}: table {table} lacks column(s) {missing}; is this an "
            "`nsys export --type sqlite` database?"
        )


def _resolver(strings: dict[int, str], source: str):
    def name(string_id: int | None, what: str) -> str:
        if string_id is None:
            return ""
        try:
            return strings[string_id]
        except KeyError:
            raise ValueError(
                f"{source}: {what} refers to StringIds id {string_id}, which is missing."
            ) from None

    return name


def _nesting_depth(starts: list[int], ends: list[int], threads: list[int], pushpop: list[bool]) -> list[int]:
    """Depth of each push/pop range among the push/pop ranges of its thread (start/end ranges: 0)."""
    depth = [0] * len(starts)
    open_ends: dict[int, list[int]] = {}
    for i in sorted(range(len(starts)), key=lambda k: (starts[k], -ends[k])):
        if not pushpop[i]:
            continue
        stack = open_ends.setdefault(threads[i], [])
        while stack and stack[-1] <= starts[i]:
            stack.pop()
        depth[i] = len(stack)
        stack.append(ends[i])
    return depth


def read_sqlite(path: str | Path) -> dict[str, Table]:
    """Read an ``nsys export --type sqlite`` database into tables (times in ns).

    - ``kernels``: CUPTI_ACTIVITY_KIND_KERNEL — start, end, duration_ns, device, stream,
      correlation_id, name (demangledName), short_name (shortName), both resolved via StringIds;
    - ``nvtx``: NVTX_EVENTS ranges (eventType 59 push/pop, 60 start/end) — name from ``text`` or
      from ``textId`` through StringIds, style, thread, depth (push/pop nesting per thread);
    - ``memcpy``: CUPTI_ACTIVITY_KIND_MEMCPY — bytes, kind ("Host-to-Device", ...), stream;
    - ``memset``: CUPTI_ACTIVITY_KIND_MEMSET, when the capture has one;
    - ``runtime``: CUPTI_ACTIVITY_KIND_RUNTIME — name (e.g. ``cudaLaunchKernel_v7000``), api
      (without the ``_vNNNN`` suffix), correlation_id, thread.
    nsys creates tables lazily: a kind of event the capture lacks comes back as an empty table.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"No such file: {path}. Export one with `nsys export --type sqlite "
            "REPORT.nsys-rep`, or use helpers.nsys.example_path(..., 'sqlite')."
        )
    source = str(path)
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        present = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.DatabaseError:
        raise ValueError(
            f"{path} is not an SQLite database; export one with `nsys export --type sqlite REPORT.nsys-rep`."
        ) from None
    try:
        if "StringIds" not in present:
            raise ValueError(f"{path} has no StringIds table: not an `nsys export --type sqlite` database.")
        strings = dict(con.execute("SELECT id, value FROM StringIds"))
        name = _resolver(strings, source)
        meta: dict[str, Any] = {"source": source, "example": "TRAINPERF_EXAMPLE" in present}
        if meta["example"]:
            meta["note"] = " ".join(v for (v,) in con.execute("SELECT value FROM TRAINPERF_EXAMPLE"))
        tables = {
            "kernels": _kernels(con, present, name, source, meta),
            "nvtx": _nvtx(con, present, name, source, meta),
            "memcpy": _memcpy(con, present, source, meta),
            "runtime": _runtime(con, present, name, source, meta),
        }
        if "CUPTI_ACTIVITY_KIND_MEMSET" in present:
            tables["memset"] = _memset(con, source, meta)
        return tables
    finally:
        con.close()


def _kernels(con, present, name, source, meta) -> Table:
    keys = ["start", "end", "duration_ns", "device", "stream", "correlation_id", "name", "short_name"]
    table = "CUPTI_ACTIVITY_KIND_KERNEL"
    if table not in present:
        return Table("kernels", {k: [] for k in keys}, {**meta, "absent": table})
    _need(
        con,
        table,
        ["start", "end", "deviceId", "streamId", "correlationId", "demangledName", "shortName"],
        source,
    )
    rows = con.execute(
        f"SELECT start, end, deviceId, streamId, correlationId, demangledName, shortName "
        f"FROM {table} ORDER BY start"
    ).fetchall()
    cols: dict[str, list] = {k: [] for k in keys}
    for s, e, dev, stream, corr, dem, short in rows:
        for k, v in zip(
            keys,
            (
                s,
                e,
                e - s,
                dev,
                stream,
                corr,
                name(dem, "a kernel's demangledName"),
                name(short, "a kernel's shortName"),
            ),
            strict=True,
        ):
            cols[k].append(v)
    return Table("kernels", cols, meta)


def _nvtx(con, present, name, source, meta) -> Table:
    keys = ["start", "end", "duration_ns", "name", "style", "thread", "depth"]
    table = "NVTX_EVENTS"
    if table not in present:
        return Table("nvtx", {k: [] for k in keys}, {**meta, "absent": table})
    _need(con, table, ["start", "end", "eventType", "text", "globalTid"], source)
    text_id = "textId" if "textId" in _columns_of(con, table) else "NULL"
    rows = con.execute(
        f"SELECT start, end, eventType, text, {text_id}, globalTid FROM {table} "
        f"WHERE eventType IN ({NVTX_PUSHPOP}, {NVTX_STARTEND}) "
        "ORDER BY start, end DESC"
    ).fetchall()
    unterminated = sum(1 for r in rows if r[1] is None)
    rows = [r for r in rows if r[1] is not None]
    names = [t if t is not None else name(tid, "an NVTX range's textId") for _, _, _, t, tid, _ in rows]
    starts, ends = [r[0] for r in rows], [r[1] for r in rows]
    threads = [(r[5] or 0) & 0xFFFFFF for r in rows]  # globalTid's low 24 bits: the thread id
    pushpop = [r[2] == NVTX_PUSHPOP for r in rows]
    cols = {
        "start": starts,
        "end": ends,
        "duration_ns": [e - s for s, e in zip(starts, ends, strict=True)],
        "name": names,
        "style": ["PushPop" if p else "StartEnd" for p in pushpop],
        "thread": threads,
        "depth": _nesting_depth(starts, ends, threads, pushpop),
    }
    return Table("nvtx", cols, {**meta, "unterminated": unterminated})


def _memcpy(con, present, source, meta) -> Table:
    keys = [
        "start",
        "end",
        "duration_ns",
        "bytes",
        "kind",
        "src_kind",
        "dst_kind",
        "stream",
        "correlation_id",
    ]
    table = "CUPTI_ACTIVITY_KIND_MEMCPY"
    if table not in present:
        return Table("memcpy", {k: [] for k in keys}, {**meta, "absent": table})
    _need(con, table, ["start", "end", "bytes", "copyKind", "streamId", "correlationId"], source)
    have = _columns_of(con, table)
    src = "srcKind" if "srcKind" in have else "NULL"
    dst = "dstKind" if "dstKind" in have else "NULL"
    rows = con.execute(
        f"SELECT start, end, bytes, copyKind, streamId, correlationId, {src}, {dst} "
        f"FROM {table} ORDER BY start"
    ).fetchall()
    memory = lambda k: "" if k is None else MEMORY_KINDS.get(k, f"kind {k}")  # noqa: E731
    cols = {
        "start": [r[0] for r in rows],
        "end": [r[1] for r in rows],
        "duration_ns": [r[1] - r[0] for r in rows],
        "bytes": [r[2] for r in rows],
        "kind": [MEMCPY_KINDS.get(r[3], f"kind {r[3]}") for r in rows],
        "src_kind": [memory(r[6]) for r in rows],
        "dst_kind": [memory(r[7]) for r in rows],
        "stream": [r[4] for r in rows],
        "correlation_id": [r[5] for r in rows],
    }
    return Table("memcpy", cols, meta)


def _memset(con, source, meta) -> Table:
    table = "CUPTI_ACTIVITY_KIND_MEMSET"
    _need(con, table, ["start", "end", "bytes", "streamId"], source)
    corr = "correlationId" if "correlationId" in _columns_of(con, table) else "NULL"
    rows = con.execute(f"SELECT start, end, bytes, streamId, {corr} FROM {table} ORDER BY start").fetchall()
    return Table(
        "memset",
        {
            "start": [r[0] for r in rows],
            "end": [r[1] for r in rows],
            "duration_ns": [r[1] - r[0] for r in rows],
            "bytes": [r[2] for r in rows],
            "stream": [r[3] for r in rows],
            "correlation_id": [r[4] for r in rows],
        },
        meta,
    )


def _runtime(con, present, name, source, meta) -> Table:
    keys = ["start", "end", "duration_ns", "name", "api", "correlation_id", "thread"]
    table = "CUPTI_ACTIVITY_KIND_RUNTIME"
    if table not in present:
        return Table("runtime", {k: [] for k in keys}, {**meta, "absent": table})
    _need(con, table, ["start", "end", "nameId", "correlationId", "globalTid"], source)
    rows = con.execute(
        f"SELECT start, end, nameId, correlationId, globalTid FROM {table} ORDER BY start"
    ).fetchall()
    names = [name(r[2], "a CUDA API call's nameId") for r in rows]
    cols = {
        "start": [r[0] for r in rows],
        "end": [r[1] for r in rows],
        "duration_ns": [r[1] - r[0] for r in rows],
        "name": names,
        "api": [api_name(n) for n in names],
        "correlation_id": [r[3] for r in rows],
        "thread": [(r[4] or 0) & 0xFFFFFF for r in rows],
    }
    return Table("runtime", cols, meta)


def api_name(name: str) -> str:
    """``cudaLaunchKernel_v7000`` -> ``cudaLaunchKernel`` (the name nsys stats prints)."""
    return re.sub(r"_v\d+$", "", name)

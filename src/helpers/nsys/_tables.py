"""Tables of nsys output: the stats CSV and the SQLite export, read into :class:`Table`."""

from __future__ import annotations

import csv
import re
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._validate import flag as _flag
from ._commands import DEFAULT_REPORTS
from ._make_examples import NOTE as EXAMPLE_NOTE

# =========================================================================== tables

class Table:
    """A small column table: ``t["name"]`` is a numpy array, ``len(t)`` its rows, ``t.meta`` notes.

    Made by :func:`read_stats_csv` and :func:`read_sqlite`; ``meta["example"]`` is True for
    the shipped example data.
    """

    def __init__(self, name: str, columns: dict[str, Sequence[Any]], meta: dict[str, Any] | None = None):
        lengths = {k: len(v) for k, v in columns.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"Table {name!r}: columns differ in length {lengths}.")
        self.name = name
        self.columns: dict[str, np.ndarray] = {}
        for key, values in columns.items():
            arr = np.asarray(values)
            if arr.dtype.kind in "US":
                arr = np.asarray(values, dtype=object)
            self.columns[key] = arr
        self.meta: dict[str, Any] = dict(meta or {})

    @classmethod
    def from_rows(cls, name: str, rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None,
                  meta: dict[str, Any] | None = None) -> Table:
        keys = list(columns) if columns is not None else (list(rows[0]) if rows else [])
        return cls(name, {k: [r[k] for r in rows] for k in keys}, meta)

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0

    def __getitem__(self, key: str) -> np.ndarray:
        if key not in self.columns:
            raise KeyError(f"Table {self.name!r} has no column {key!r}; columns: {list(self.columns)}")
        return self.columns[key]

    def __contains__(self, key: object) -> bool:
        return key in self.columns

    @property
    def column_names(self) -> list[str]:
        return list(self.columns)

    def row(self, i: int) -> dict[str, Any]:
        return {k: (v[i].item() if hasattr(v[i], "item") else v[i]) for k, v in self.columns.items()}

    def rows(self) -> list[dict[str, Any]]:
        return [self.row(i) for i in range(len(self))]

    def take(self, index: Sequence[int] | np.ndarray) -> Table:
        """Rows at ``index`` (or where a boolean mask is True), as a new table."""
        idx = np.asarray(index)
        return Table(self.name, {k: v[idx] for k, v in self.columns.items()}, self.meta)

    def sorted_by(self, key: str, descending: bool = True) -> Table:
        _flag(descending=descending)
        order = np.argsort(self[key], kind="stable")
        return self.take(order[::-1] if descending else order)

    def format(self, limit: int = 10, columns: Sequence[str] | None = None, width: int = 60) -> str:
        """A plain-text table of the first ``limit`` rows."""
        cols = list(columns) if columns else self.column_names
        def cell(v: Any) -> str:
            if isinstance(v, float):
                return f"{v:.1f}" if abs(v) < 1e15 else f"{v:.3g}"
            text = str(v)
            return text if len(text) <= width else text[: width - 1] + "…"
        body = [[cell(self.row(i)[c]) for c in cols] for i in range(min(limit, len(self)))]
        widths = [max([len(c)] + [len(r[j]) for r in body]) for j, c in enumerate(cols)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True))]
        lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in body]
        if len(self) > limit:
            lines.append(f"... {len(self) - limit} more rows")
        return "\n".join(lines)

    def __repr__(self) -> str:
        tag = " EXAMPLE" if self.meta.get("example") else ""
        return f"<Table {self.name!r}{tag}: {len(self)} rows, columns {self.column_names}>"


# =========================================================================== nsys stats CSV

_UNIT_NS = {"ns": 1.0, "us": 1e3, "μs": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9}
_STAT_COLUMNS = {"Avg": "avg_ns", "Med": "med_ns", "Min": "min_ns", "Max": "max_ns", "StdDev": "stddev_ns"}
_NAME_COLUMNS = ("Name", "Operation", "Range")
_COUNT_COLUMNS = ("Instances", "Count", "Num Calls")
_PROCESSING = re.compile(r"^Processing \[.*\] with \[(?:.*[/\\])?([A-Za-z0-9_]+)\.py\]")
_REQUIRED = ("total_ns", "count", "name")
_NAME_OF = {"cuda_gpu_kern_sum": "Name", "cuda_api_sum": "Name", "cuda_gpu_mem_time_sum": "Operation",
            "nvtx_sum": "Range"}


def _canonical(header: str) -> tuple[str, float | None]:
    """Header -> (column key, scale to ns or None for non-time columns)."""
    if header == "Time (%)":
        return "time_pct", None
    m = re.fullmatch(r"Total Time \((\S+)\)", header)
    if m and m.group(1) in _UNIT_NS:
        return "total_ns", _UNIT_NS[m.group(1)]
    m = re.fullmatch(r"(Avg|Med|Min|Max|StdDev) \((\S+)\)", header)
    if m and m.group(2) in _UNIT_NS:
        return _STAT_COLUMNS[m.group(1)], _UNIT_NS[m.group(2)]
    if header in _COUNT_COLUMNS:
        return "count", None
    if header in _NAME_COLUMNS:
        return "name", None
    if header == "Style":
        return "style", None
    return header, None


def _infer_report(headers: list[str]) -> str:
    """Report name from its columns, for a CSV without the "Processing [...]" banner."""
    h = set(headers)
    if "Range" in h:
        return "nvtx_sum"
    if "Operation" in h:
        by_time = any(x.startswith("Total Time") for x in h)
        return "cuda_gpu_mem_time_sum" if by_time else "cuda_gpu_mem_size_sum"
    if "Num Calls" in h:
        return "cuda_api_sum"
    if "Instances" in h and "Name" in h:
        return "cuda_gpu_kern_sum"
    return "unknown"


def _is_header(fields: list[str]) -> bool:
    return len(fields) >= 3 and any(f.startswith("Total Time (") or f.startswith("Total (") for f in fields) \
        and any(f in _NAME_COLUMNS for f in fields)


def _build_table(report: str, headers: list[str], rows: list[list[str]], source: str,
                 meta: dict[str, Any]) -> Table:
    keys = [_canonical(h) for h in headers]
    if report in DEFAULT_REPORTS:
        missing = [k for k in _REQUIRED if k not in {key for key, _ in keys}]
        if _NAME_OF[report] not in headers:
            missing.append(_NAME_OF[report])
        if missing:
            raise ValueError(f"The {report} table in {source} lacks column(s) {missing} (it has "
                             f"{headers}); read the output of `nsys stats --format csv`.")
    columns: dict[str, list[Any]] = {key: [] for key, _ in keys}
    for n, row in enumerate(rows, 1):
        for (key, scale), header, value in zip(keys, headers, row, strict=True):
            if key in ("name", "style") or (scale is None and key not in ("time_pct", "count")):
                columns[key].append(value)
                continue
            try:
                number = float(value.replace(",", "")) if value.strip() else float("nan")
            except ValueError:
                raise ValueError(f"{source}, {report} row {n}: {value!r} in column {header!r} is not "
                                 "a number.") from None
            columns[key].append(number * (scale or 1.0))
    if "count" in columns:
        columns["count"] = [int(c) for c in columns["count"]]
    return Table(report, columns, {**meta, "headers": headers, "source": source})


def parse_stats_csv(text: str, source: str = "<text>", report_hint: str | None = None) -> dict[str, Table]:
    """Tables of ``nsys stats --format csv`` output given as text: ``{report name: Table}``.

    Lines that are not part of a table (``Generating SQLite file ...``, ``Processing [...] with
    [.../cuda_api_sum.py]...``, ``NOTICE:``/``WARNING:`` lines, blank lines) are skipped; the
    ``Processing`` banner names the report that follows. ``SKIPPED:`` reports come back empty
    with ``meta["skipped"]``. Times are converted to ns whatever ``--timeunit`` was used.
    """
    meta: dict[str, Any] = {"example": "SYNTHETIC EXAMPLE" in text[:2000]}
    if meta["example"]:
        meta["note"] = EXAMPLE_NOTE
    lines = text.splitlines()
    tables: dict[str, Table] = {}
    current: str | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        banner = _PROCESSING.match(line.strip())
        if banner:
            current = banner.group(1)
            continue
        if line.startswith("SKIPPED:") and current:
            tables[current] = Table(current, {}, {**meta, "skipped": line[8:].strip(), "source": source})
            current = None
            continue
        try:
            fields = next(csv.reader([line]))
        except (StopIteration, csv.Error):
            continue
        if not _is_header(fields):
            continue
        rows = []
        while i < len(lines) and lines[i].strip() and not _PROCESSING.match(lines[i].strip()):
            row = next(csv.reader([lines[i]]))
            if len(row) != len(fields):
                break
            rows.append(row)
            i += 1
        report = current or report_hint or _infer_report(fields)
        report_hint = None
        tables[report] = _build_table(report, fields, rows, source, meta)
        current = None
    if not tables:
        raise ValueError(f"{source} holds no nsys stats table (no header such as 'Time (%),Total Time (ns),"
                         "...,Name'); pass what `nsys stats --format csv` prints.")
    return tables


def read_stats_csv(path: str | Path) -> dict[str, Table]:
    """Read a file of ``nsys stats --format csv`` output (one or several reports).

    Accepts the console output redirected to a file (``nsys stats ... > stats.csv``) and the
    per-report files nsys writes with ``--output PREFIX`` (``PREFIX_cuda_gpu_kern_sum.csv``; the
    report name then comes from the file name). Returns ``{report name: Table}``; each table has
    ``name``, ``total_ns``, ``count``, ``avg_ns``, ``med_ns``, ``min_ns``, ``max_ns``,
    ``stddev_ns`` and ``time_pct`` columns (those present in the file), times in ns.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No such file: {path}. Save the output of `nsys stats --format csv "
                                "REPORT.nsys-rep` there, or use helpers.nsys.example_path().")
    raw = path.read_bytes()
    if b"\x00" in raw[:4096]:
        raise ValueError(f"{path} is binary (a .nsys-rep or .sqlite?), not CSV text: run "
                         f"`nsys stats --format csv {path.name}` and read what it prints.")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not UTF-8 text; pass what `nsys stats --format csv` prints.") from None
    hint = next((r for r in DEFAULT_REPORTS if path.stem.endswith(r)), None)
    return parse_stats_csv(text, str(path), report_hint=hint)


# =========================================================================== nsys export sqlite

MEMORY_KINDS = {0: "unknown", 1: "pageable", 2: "pinned", 3: "device", 4: "array", 5: "managed",
                6: "device static", 7: "managed static"}  # CUpti_ActivityMemoryKind (srcKind, dstKind)
MEMCPY_KINDS = {0: "Unknown", 1: "Host-to-Device", 2: "Device-to-Host", 3: "Host-to-Array",
                4: "Array-to-Host", 5: "Array-to-Array", 6: "Array-to-Device", 7: "Device-to-Array",
                8: "Device-to-Device", 9: "Host-to-Host", 10: "Peer-to-Peer"}  # CUPTI_ActivityMemcpyKind
NVTX_PUSHPOP, NVTX_STARTEND = 59, 60  # NVTX_EVENTS.eventType of ranges (34 = mark, not a range)


def _columns_of(con: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in con.execute(f"PRAGMA table_info({table})")}


def _need(con: sqlite3.Connection, table: str, wanted: Sequence[str], source: str) -> None:
    missing = [c for c in wanted if c not in _columns_of(con, table)]
    if missing:
        raise ValueError(f"{source}: table {table} lacks column(s) {missing}; is this an "
                         "`nsys export --type sqlite` database?")


def _resolver(strings: dict[int, str], source: str):
    def name(string_id: int | None, what: str) -> str:
        if string_id is None:
            return ""
        try:
            return strings[string_id]
        except KeyError:
            raise ValueError(f"{source}: {what} refers to StringIds id {string_id}, "
                             "which is missing.") from None
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
        raise FileNotFoundError(f"No such file: {path}. Export one with `nsys export --type sqlite "
                                "REPORT.nsys-rep`, or use helpers.nsys.example_path(..., 'sqlite').")
    source = str(path)
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        present = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.DatabaseError:
        raise ValueError(f"{path} is not an SQLite database; export one with "
                         "`nsys export --type sqlite REPORT.nsys-rep`.") from None
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
    _need(con, table, ["start", "end", "deviceId", "streamId", "correlationId", "demangledName",
                       "shortName"], source)
    rows = con.execute(f"SELECT start, end, deviceId, streamId, correlationId, demangledName, shortName "
                       f"FROM {table} ORDER BY start").fetchall()
    cols: dict[str, list] = {k: [] for k in keys}
    for s, e, dev, stream, corr, dem, short in rows:
        for k, v in zip(keys, (s, e, e - s, dev, stream, corr, name(dem, "a kernel's demangledName"),
                               name(short, "a kernel's shortName")), strict=True):
            cols[k].append(v)
    return Table("kernels", cols, meta)


def _nvtx(con, present, name, source, meta) -> Table:
    keys = ["start", "end", "duration_ns", "name", "style", "thread", "depth"]
    table = "NVTX_EVENTS"
    if table not in present:
        return Table("nvtx", {k: [] for k in keys}, {**meta, "absent": table})
    _need(con, table, ["start", "end", "eventType", "text", "globalTid"], source)
    text_id = "textId" if "textId" in _columns_of(con, table) else "NULL"
    rows = con.execute(f"SELECT start, end, eventType, text, {text_id}, globalTid FROM {table} "
                       f"WHERE eventType IN ({NVTX_PUSHPOP}, {NVTX_STARTEND}) "
                       "ORDER BY start, end DESC").fetchall()
    unterminated = sum(1 for r in rows if r[1] is None)
    rows = [r for r in rows if r[1] is not None]
    names = [t if t is not None else name(tid, "an NVTX range's textId") for _, _, _, t, tid, _ in rows]
    starts, ends = [r[0] for r in rows], [r[1] for r in rows]
    threads = [(r[5] or 0) & 0xFFFFFF for r in rows]  # globalTid's low 24 bits: the thread id
    pushpop = [r[2] == NVTX_PUSHPOP for r in rows]
    cols = {"start": starts, "end": ends, "duration_ns": [e - s for s, e in zip(starts, ends, strict=True)],
            "name": names, "style": ["PushPop" if p else "StartEnd" for p in pushpop],
            "thread": threads, "depth": _nesting_depth(starts, ends, threads, pushpop)}
    return Table("nvtx", cols, {**meta, "unterminated": unterminated})


def _memcpy(con, present, source, meta) -> Table:
    keys = ["start", "end", "duration_ns", "bytes", "kind", "src_kind", "dst_kind", "stream",
            "correlation_id"]
    table = "CUPTI_ACTIVITY_KIND_MEMCPY"
    if table not in present:
        return Table("memcpy", {k: [] for k in keys}, {**meta, "absent": table})
    _need(con, table, ["start", "end", "bytes", "copyKind", "streamId", "correlationId"], source)
    have = _columns_of(con, table)
    src = "srcKind" if "srcKind" in have else "NULL"
    dst = "dstKind" if "dstKind" in have else "NULL"
    rows = con.execute(f"SELECT start, end, bytes, copyKind, streamId, correlationId, {src}, {dst} "
                       f"FROM {table} ORDER BY start").fetchall()
    memory = lambda k: "" if k is None else MEMORY_KINDS.get(k, f"kind {k}")  # noqa: E731
    cols = {"start": [r[0] for r in rows], "end": [r[1] for r in rows],
            "duration_ns": [r[1] - r[0] for r in rows], "bytes": [r[2] for r in rows],
            "kind": [MEMCPY_KINDS.get(r[3], f"kind {r[3]}") for r in rows],
            "src_kind": [memory(r[6]) for r in rows], "dst_kind": [memory(r[7]) for r in rows],
            "stream": [r[4] for r in rows], "correlation_id": [r[5] for r in rows]}
    return Table("memcpy", cols, meta)


def _memset(con, source, meta) -> Table:
    table = "CUPTI_ACTIVITY_KIND_MEMSET"
    _need(con, table, ["start", "end", "bytes", "streamId"], source)
    corr = "correlationId" if "correlationId" in _columns_of(con, table) else "NULL"
    rows = con.execute(f"SELECT start, end, bytes, streamId, {corr} FROM {table} ORDER BY start").fetchall()
    return Table("memset", {"start": [r[0] for r in rows], "end": [r[1] for r in rows],
                            "duration_ns": [r[1] - r[0] for r in rows], "bytes": [r[2] for r in rows],
                            "stream": [r[3] for r in rows], "correlation_id": [r[4] for r in rows]}, meta)


def _runtime(con, present, name, source, meta) -> Table:
    keys = ["start", "end", "duration_ns", "name", "api", "correlation_id", "thread"]
    table = "CUPTI_ACTIVITY_KIND_RUNTIME"
    if table not in present:
        return Table("runtime", {k: [] for k in keys}, {**meta, "absent": table})
    _need(con, table, ["start", "end", "nameId", "correlationId", "globalTid"], source)
    rows = con.execute(f"SELECT start, end, nameId, correlationId, globalTid FROM {table} "
                       "ORDER BY start").fetchall()
    names = [name(r[2], "a CUDA API call's nameId") for r in rows]
    cols = {"start": [r[0] for r in rows], "end": [r[1] for r in rows],
            "duration_ns": [r[1] - r[0] for r in rows], "name": names, "api": [api_name(n) for n in names],
            "correlation_id": [r[3] for r in rows], "thread": [(r[4] or 0) & 0xFFFFFF for r in rows]}
    return Table("runtime", cols, meta)


def api_name(name: str) -> str:
    """``cudaLaunchKernel_v7000`` -> ``cudaLaunchKernel`` (the name nsys stats prints)."""
    return re.sub(r"_v\d+$", "", name)


def summarize(events: Table, by: str = "name", report: str = "summary") -> Table:
    """Per-name statistics of an event table, like ``nsys stats``: time_pct, total_ns, count,
    avg_ns, med_ns, min_ns, max_ns, stddev_ns (sample standard deviation), sorted by total."""
    groups: dict[str, list[float]] = {}
    for key, dur in zip(events[by], events["duration_ns"], strict=True):
        groups.setdefault(str(key), []).append(float(dur))
    grand = sum(sum(v) for v in groups.values())
    rows = []
    for key, durs in groups.items():
        arr = np.asarray(durs)
        rows.append({"time_pct": 100.0 * arr.sum() / grand if grand else 0.0, "total_ns": float(arr.sum()),
                     "count": len(arr), "avg_ns": float(arr.mean()), "med_ns": float(np.median(arr)),
                     "min_ns": float(arr.min()), "max_ns": float(arr.max()),
                     "stddev_ns": float(arr.std(ddof=1)) if len(arr) > 1 else 0.0, "name": key})
    rows.sort(key=lambda r: (-r["total_ns"], r["name"]))
    cols = ["time_pct", "total_ns", "count", "avg_ns", "med_ns", "min_ns", "max_ns", "stddev_ns", "name"]
    return Table.from_rows(report, rows, cols, events.meta)



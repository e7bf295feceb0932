"""The stats CSV: what ``nsys stats --format csv`` prints, read into one :class:`Table` per report."""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Any

from ._commands import DEFAULT_REPORTS
from ._examples import EXAMPLE_NOTE
from ._table import Table

_UNIT_NS = {"ns": 1.0, "us": 1e3, "μs": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9}
_STAT_COLUMNS = {"Avg": "avg_ns", "Med": "med_ns", "Min": "min_ns", "Max": "max_ns", "StdDev": "stddev_ns"}
_NAME_COLUMNS = ("Name", "Operation", "Range")
_COUNT_COLUMNS = ("Instances", "Count", "Num Calls")
_PROCESSING = re.compile(r"^Processing \[.*\] with \[(?:.*[/\\])?([A-Za-z0-9_]+)\.py\]")
_REQUIRED = ("total_ns", "count", "name")
_NAME_OF = {
    "cuda_gpu_kern_sum": "Name",
    "cuda_api_sum": "Name",
    "cuda_gpu_mem_time_sum": "Operation",
    "nvtx_sum": "Range",
}


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
    return (
        len(fields) >= 3
        and any(f.startswith("Total Time (") or f.startswith("Total (") for f in fields)
        and any(f in _NAME_COLUMNS for f in fields)
    )


def _build_table(
    report: str, headers: list[str], rows: list[list[str]], source: str, meta: dict[str, Any]
) -> Table:
    keys = [_canonical(h) for h in headers]
    if report in DEFAULT_REPORTS:
        missing = [k for k in _REQUIRED if k not in {key for key, _ in keys}]
        if _NAME_OF[report] not in headers:
            missing.append(_NAME_OF[report])
        if missing:
            raise ValueError(
                f"The {report} table in {source} lacks column(s) {missing} (it has "
                f"{headers}); read the output of `nsys stats --format csv`."
            )
    columns: dict[str, list[Any]] = {key: [] for key, _ in keys}
    for n, row in enumerate(rows, 1):
        for (key, scale), header, value in zip(keys, headers, row, strict=True):
            if key in ("name", "style") or (scale is None and key not in ("time_pct", "count")):
                columns[key].append(value)
                continue
            try:
                number = float(value.replace(",", "")) if value.strip() else float("nan")
            except ValueError:
                raise ValueError(
                    f"{source}, {report} row {n}: {value!r} in column {header!r} is not a number."
                ) from None
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
        raise ValueError(
            f"{source} holds no nsys stats table (no header such as 'Time (%),Total Time (ns),"
            "...,Name'); pass what `nsys stats --format csv` prints."
        )
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
        raise FileNotFoundError(
            f"No such file: {path}. Save the output of `nsys stats --format csv "
            "REPORT.nsys-rep` there, or use helpers.nsys.example_path()."
        )
    raw = path.read_bytes()
    if b"\x00" in raw[:4096]:
        raise ValueError(
            f"{path} is binary (a .nsys-rep or .sqlite?), not CSV text: run "
            f"`nsys stats --format csv {path.name}` and read what it prints."
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not UTF-8 text; pass what `nsys stats --format csv` prints.") from None
    hint = next((r for r in DEFAULT_REPORTS if path.stem.endswith(r)), None)
    return parse_stats_csv(text, str(path), report_hint=hint)

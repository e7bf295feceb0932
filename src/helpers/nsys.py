"""Nsight Systems from Python: build the command lines, read what nsys writes (chapter 3).

- :func:`profile_command`, :func:`stats_command`, :func:`export_command` build the ``nsys``
  command lines (single process and torchrun, ``--trace`` sets, the cudaProfilerApi or NVTX
  capture range, one report per rank, or only some ranks) as an argv list plus a shell string.
- :func:`read_stats_csv` reads the CSV that ``nsys stats --format csv`` prints (reports
  ``cuda_gpu_kern_sum``, ``cuda_api_sum``, ``cuda_gpu_mem_time_sum``, ``nvtx_sum``, ...): columns
  are matched by name, banner lines before each table are skipped.
- :func:`read_sqlite` reads an ``nsys export --type sqlite`` database (kernels, NVTX ranges with
  names resolved through ``StringIds``, memcpy, memset, CUDA runtime API) with ``sqlite3``.
- :func:`top_kernel`, :func:`step_buckets`, :func:`dominant_bucket` answer the first questions
  asked of a stats report; :func:`nvtx_gpu_projection` and :func:`kernels_by_range` show what
  the GPU did inside each NVTX range (``nsys stats`` reports ``nvtx_gpu_proj_sum`` and
  ``nvtx_kern_sum``), since an NVTX range itself measures host time.

Nsight Systems is usually not installed (and a CPU cannot be profiled for CUDA work): the
package ships EXAMPLE outputs in nsys's formats, written by :func:`make_nsys_examples` from a
described synthetic workload. They are labelled as examples everywhere; they are not captures.
"""

from __future__ import annotations

import csv
import re
import shlex
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import i18n
from .i18n import tr

DEFAULT_TRACE = ("cuda", "nvtx", "osrt", "cublas", "cudnn")  # one process
DEFAULT_REPORTS = ("cuda_gpu_kern_sum", "cuda_api_sum", "cuda_gpu_mem_time_sum", "nvtx_sum")
EXAMPLE_NOTE = ("SYNTHETIC EXAMPLE written by helpers.nsys.make_nsys_examples in the layout of "
                "Nsight Systems output; it is not a real capture")
DATA = Path(__file__).resolve().parent / "data"


# =========================================================================== command lines

@dataclass(frozen=True)
class Command:
    """A command line: ``argv`` for ``subprocess``, ``shell`` to paste into a terminal."""

    argv: list[str]

    @property
    def shell(self) -> str:
        return shlex.join(self.argv)

    def pretty(self) -> str:
        """The shell form with one option per line (a ``bash -c`` wrapper on lines of its own)."""
        if self.argv[-3:-1] == ["bash", "-c"] and "'" not in self.argv[-1]:
            body = self.argv[-1].replace("; then ", "; then\n    ").replace("; else ", "\n  else\n    ")
            body = body.replace("; fi", "\n  fi")
            return f"{shlex.join(self.argv[:-1])} '\n  {body}'"
        parts, lines = [shlex.quote(a) for a in self.argv], []
        for part in parts:
            if lines and not part.startswith("-"):
                lines[-1] += " " + part
            else:
                lines.append(part)
        return " \\\n  ".join(lines)

    def __str__(self) -> str:
        return self.shell


_PLAIN_WORD = re.compile(r"[A-Za-z0-9_=,./:%{}+@-]+")


def _words(argv: Sequence[str]) -> str:
    """argv as words for a shell script: quoted only where needed (``%q{RANK}`` stays as is)."""
    return " ".join(a if _PLAIN_WORD.fullmatch(a) else shlex.quote(a) for a in argv)


def nsys_available() -> bool:
    """True when an ``nsys`` executable is on PATH."""
    return shutil.which("nsys") is not None


def _trace_option(trace: Iterable[str] | None, multi_rank: bool) -> str:
    names = list(trace) if trace is not None else list(DEFAULT_TRACE)
    if multi_rank and trace is None:
        names.append("nccl")  # collectives show as NCCL ranges only when traced
    bad = [t for t in names if not re.fullmatch(r"[a-z0-9-]+", t)]
    if bad or not names:
        raise ValueError(f"--trace needs names like 'cuda', 'nvtx', 'nccl'; got {names!r}.")
    return "--trace=" + ",".join(dict.fromkeys(names))


def supports_trace(name: str, nsys: str = "nsys") -> bool | None:
    """Whether this machine's ``nsys profile --help`` lists ``name`` among the ``--trace``
    values (``nccl`` is missing from older Nsight Systems releases); None without nsys."""
    if shutil.which(nsys) is None:
        return None
    done = subprocess.run([nsys, "profile", "--help"], capture_output=True, text=True, timeout=60)
    text = done.stdout + done.stderr
    section = text[text.find("--trace"):][:2000] if "--trace" in text else text
    return re.search(rf"\b{re.escape(name)}\b", section) is not None


def profile_command(script: str, *script_args: str, output: str = "trace_step",
                    nproc_per_node: int = 1, per_rank: bool = True,
                    capture_range: str | None = "cudaProfilerApi", nvtx_capture: str | None = None,
                    trace: Iterable[str] | None = None, python: str = "python",
                    sample: str = "none", ranks: Sequence[int] | None = None) -> Command:
    """``nsys profile`` for ``python script args``.

    - ``nproc_per_node=1``: ``nsys profile <options> python script``.
    - ``nproc_per_node>1`` and ``per_rank=True``: torchrun starts one ``nsys profile`` per rank
      (``torchrun --no-python nsys profile ...``), each writing ``<output>_rank%q{RANK}`` — nsys
      fills in ``%q{RANK}`` from the rank's own environment, so every rank gets its own report.
    - ``ranks=(0, 5)``: profile only those ranks (rank 0 and a slow one, say); the others run
      ``python script`` without nsys, through a small ``bash -c`` wrapper that reads ``$RANK``.
    - ``per_rank=False``: nsys wraps torchrun and follows its child processes into ONE report
      (``%q{RANK}`` would not help there: RANK is set only in the processes torchrun starts).
    - ``trace``: default ``cuda,nvtx,osrt,cublas,cudnn``, plus ``nccl`` with several ranks
      (older Nsight Systems releases do not know ``nccl``: see :func:`supports_trace`).
    - ``capture_range="cudaProfilerApi"``: capture only between cudaProfilerStart and Stop;
      ``"nvtx"``: capture only inside the NVTX range named ``nvtx_capture`` (``--nvtx-capture``;
      the range's name is an unregistered string, so ``NSYS_NVTX_PROFILER_REGISTER_ONLY=0``);
      both with ``--capture-range-end=stop``. ``None`` captures the whole run.
    """
    if isinstance(nproc_per_node, bool) or not isinstance(nproc_per_node, int) or nproc_per_node < 1:
        raise ValueError(f"nproc_per_node={nproc_per_node!r}: need a whole number of processes >= 1.")
    if not output or any(ch.isspace() for ch in output):
        raise ValueError(f"output={output!r}: give a report name without spaces, e.g. 'trace_step'.")
    multi = nproc_per_node > 1
    options = [_trace_option(trace, multi), f"--sample={sample}"]
    if nvtx_capture is not None and capture_range != "nvtx":
        raise ValueError("nvtx_capture is used only with capture_range='nvtx'.")
    if capture_range is not None:
        if capture_range not in ("cudaProfilerApi", "nvtx"):
            raise ValueError(f"capture_range={capture_range!r}: use 'cudaProfilerApi', 'nvtx' or None.")
        options.append(f"--capture-range={capture_range}")
        if capture_range == "nvtx":
            if not nvtx_capture or any(ch.isspace() for ch in nvtx_capture):
                raise ValueError("capture_range='nvtx' needs nvtx_capture='<range name>' (e.g. 'step'), "
                                 "the NVTX range whose start and end bound the capture.")
            options += [f"--nvtx-capture={nvtx_capture}",
                        "--env-var=NSYS_NVTX_PROFILER_REGISTER_ONLY=0"]
        options.append("--capture-range-end=stop")
    options.append("--force-overwrite=true")
    program = [python, script, *script_args]
    if ranks is not None:
        if not multi or not per_rank:
            raise ValueError("ranks=... picks ranks of a torchrun job: give nproc_per_node > 1 "
                             "and per_rank=True.")
        chosen = sorted(set(ranks))
        if not chosen or any(isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < nproc_per_node
                             for r in chosen):
            raise ValueError(f"ranks={ranks!r}: give ranks between 0 and {nproc_per_node - 1}.")
        test = " || ".join(f'[ "$RANK" = {r} ]' for r in chosen)
        nsys_part = _words(["nsys", "profile", *options, f"--output={output}_rank%q{{RANK}}", *program])
        wrapper = f"if {test}; then exec {nsys_part}; else exec {_words(program)}; fi"
        return Command(["torchrun", f"--nproc_per_node={nproc_per_node}", "--no-python",
                        "bash", "-c", wrapper])
    if multi and per_rank:
        options.append(f"--output={output}_rank%q{{RANK}}")
        argv = ["torchrun", f"--nproc_per_node={nproc_per_node}", "--no-python",
                "nsys", "profile", *options, *program]
    elif multi:
        options.append(f"--output={output}")
        argv = ["nsys", "profile", *options, "torchrun", f"--nproc_per_node={nproc_per_node}",
                script, *script_args]
    else:
        options.append(f"--output={output}")
        argv = ["nsys", "profile", *options, *program]
    return Command(argv)


def stats_command(report: str, reports: Sequence[str] = DEFAULT_REPORTS,
                  fmt: str = "csv") -> Command:
    """``nsys stats --report a,b,c --format csv <report>`` (the tables go to the console).

    ``report`` is the ``.nsys-rep`` (or its ``.sqlite`` export). Run ``nsys stats
    --help-reports`` to see which report names your nsys version knows.
    """
    if not reports:
        raise ValueError("stats_command needs at least one report name, e.g. 'cuda_gpu_kern_sum'.")
    if fmt not in ("csv", "column", "table", "tsv", "json"):
        raise ValueError(f"fmt={fmt!r}: use 'csv' (what read_stats_csv reads), 'column', 'tsv' or 'json'.")
    return Command(["nsys", "stats", "--report", ",".join(reports), "--format", fmt, str(report)])


def export_command(report: str, output: str | None = None) -> Command:
    """``nsys export --type sqlite`` of a ``.nsys-rep`` (what :func:`read_sqlite` reads)."""
    out = output or str(Path(report).with_suffix(".sqlite"))
    return Command(["nsys", "export", "--type", "sqlite", "--force-overwrite=true",
                    f"--output={out}", str(report)])


# Short nsys options and the long ones they stand for (nsys takes a short option's value after a space).
_SHORT_OPTIONS = {"-t": "--trace", "-s": "--sample", "-o": "--output", "-f": "--force-overwrite",
                  "-c": "--capture-range", "-p": "--nvtx-capture", "-e": "--env-var", "-x": "--stop-on-exit",
                  "-w": "--show-output", "-y": "--delay", "-d": "--duration"}
# torchrun options that take a value (``--nproc_per_node 8`` or ``--nproc_per_node=8``)
_TORCHRUN_VALUED = {"--nproc_per_node", "--nproc-per-node", "--nnodes", "--node_rank", "--node-rank",
                    "--master_addr", "--master-addr", "--master_port", "--master-port", "--rdzv_endpoint",
                    "--rdzv-endpoint", "--rdzv_backend", "--rdzv-backend", "--rdzv_id", "--rdzv-id",
                    "--max_restarts", "--max-restarts", "--log_dir", "--log-dir", "--role"}


def _torchrun_options(argv: list[str], i: int, out: dict[str, Any]) -> int:
    """Read torchrun's options from argv[i]; returns the index of the first non-option."""
    while i < len(argv) and argv[i].startswith("-"):
        key, eq, value = argv[i].partition("=")
        if key in _TORCHRUN_VALUED and not eq:
            value, i = (argv[i + 1] if i + 1 < len(argv) else ""), i + 1
        if key in ("--nproc_per_node", "--nproc-per-node"):
            try:
                out["nproc_per_node"] = int(value)
            except ValueError:
                raise ValueError(f"torchrun --nproc_per_node needs a number, got {value!r}") from None
        i += 1
    return i


def parse_profile_command(argv: Sequence[str]) -> dict[str, Any]:
    """Split an ``nsys profile`` command line into its parts, so two can be compared.

    Returns ``launcher`` ("torchrun" when torchrun starts nsys, "nsys" otherwise),
    ``nproc_per_node`` (or None), ``options`` (dict by long option name; ``--trace`` as a
    frozenset), ``program`` (what nsys runs) and ``wraps_torchrun``. Equivalent spellings
    parse the same: ``-t cuda,nvtx`` and ``--trace=cuda,nvtx``; ``--nproc_per_node 8``,
    ``--nproc_per_node=8`` and ``--nproc-per-node=8``.
    """
    argv = [str(a) for a in argv]
    if not argv:
        raise ValueError("Empty command line.")
    out: dict[str, Any] = {"launcher": argv[0], "nproc_per_node": None, "wraps_torchrun": False}
    i = 0
    if argv[0] == "torchrun":
        i = _torchrun_options(argv, 1, out)
    if argv[i:i + 2] != ["nsys", "profile"]:
        raise ValueError(f"Not an nsys profile command: {shlex.join(argv)!r}")
    i += 2
    options: dict[str, Any] = {}
    while i < len(argv) and argv[i].startswith("-"):
        key, eq, value = argv[i].partition("=")
        key = _SHORT_OPTIONS.get(key, key)
        if not eq:  # "--opt value" / "-t value" form
            if i + 1 >= len(argv):
                raise ValueError(f"nsys option {argv[i]} has no value.")
            value, i = argv[i + 1], i + 1
        options[key] = frozenset(value.split(",")) if key == "--trace" else value
        i += 1
    out["options"], out["program"] = options, argv[i:]
    if out["program"][:1] == ["torchrun"]:
        out["wraps_torchrun"] = True
        _torchrun_options(out["program"], 1, out)
    return out


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


# =========================================================================== first questions

GEMM_ATTENTION_KEYWORDS = ("gemm", "flash", "attention", "fmha")
#: What can dominate a step's GPU time, as :func:`dominant_bucket` names it.
BUCKETS = ("gemm/attention", "other kernels", "memcpy", "gpu idle")


def is_gemm_or_attention(kernel_name: str) -> bool:
    """A kernel name containing gemm, flash, attention or fmha (any case)."""
    low = kernel_name.lower()
    return any(k in low for k in GEMM_ATTENTION_KEYWORDS)


def top_kernel(kern: Table, mem: Table | None = None) -> tuple[str, float]:
    """(name, share) of the kernel with the largest total time; share of GPU time, i.e. of
    all kernel time plus all memory-operation time (``cuda_gpu_mem_time_sum``)."""
    if len(kern) == 0:
        raise ValueError("The kernel table is empty: the capture has no CUDA kernels.")
    totals = np.asarray(kern["total_ns"], dtype=float)
    i = int(np.argmax(totals))
    gpu = totals.sum() + (float(np.sum(mem["total_ns"])) if mem is not None and len(mem) else 0.0)
    return str(kern["name"][i]), float(totals[i] / gpu)


def _range_total(nvtx: Table, name: str) -> float:
    names = [str(n) for n in nvtx["name"]]
    if name not in names:
        raise ValueError(f"The nvtx_sum table has no {name!r} range (it has {names}); annotate each "
                         "training step with an NVTX range named 'step'.")
    return float(nvtx["total_ns"][names.index(name)])


def step_buckets(kern: Table, mem: Table, nvtx: Table, step_range: str = "step") -> dict[str, float]:
    """Nanoseconds of the captured steps per bucket, from three ``nsys stats`` reports.

    ``gemm/attention``: kernels matching :data:`GEMM_ATTENTION_KEYWORDS`; ``other kernels``:
    every other kernel (element-wise, norms, reductions, optimizer); ``memcpy`` and ``memset``:
    memory operations (``cuda_gpu_mem_time_sum``); ``gpu idle``: the steps' time (the
    ``step`` row of ``nvtx_sum``) minus all kernel and memory-operation time — the time the GPU
    waited, the sign of host overhead. It assumes one stream: nothing on the GPU overlaps.
    """
    names = [str(n) for n in kern["name"]]
    k_tot = np.asarray(kern["total_ns"], dtype=float)
    gemm = float(sum(t for n, t in zip(names, k_tot, strict=True) if is_gemm_or_attention(n)))
    m_names = [str(n).lower() for n in mem["name"]] if len(mem) else []
    m_tot = np.asarray(mem["total_ns"], dtype=float) if len(mem) else np.zeros(0)
    busy = float(k_tot.sum()) + float(m_tot.sum())
    return {"gemm/attention": gemm, "other kernels": float(k_tot.sum()) - gemm,
            "memcpy": float(sum(t for n, t in zip(m_names, m_tot, strict=True) if "memcpy" in n)),
            "memset": float(sum(t for n, t in zip(m_names, m_tot, strict=True) if "memset" in n)),
            "gpu idle": max(0.0, _range_total(nvtx, step_range) - busy)}


def api_time(api: Table) -> dict[str, float]:
    """Host nanoseconds in CUDA API calls (``cuda_api_sum``): ``cuda api`` for the calls that
    do work (launches, copies) and ``sync wait`` for ``*Synchronize*`` calls, which only wait
    for the GPU."""
    names = [str(n) for n in api["name"]] if len(api) else []
    totals = np.asarray(api["total_ns"], dtype=float) if len(api) else np.zeros(0)
    sync = float(sum(t for n, t in zip(names, totals, strict=True) if "synchronize" in n.lower()))
    return {"cuda api": float(totals.sum()) - sync, "sync wait": sync}


def dominant_bucket(buckets: dict[str, float]) -> str:
    """The largest of :data:`BUCKETS` in a :func:`step_buckets` result."""
    return max(BUCKETS, key=lambda b: buckets[b])


def _gpu_events(db: dict[str, Table]) -> list[tuple[int, int, int, str]]:
    """(correlation id, start, end, name) of every kernel, copy and memset in a database."""
    events = [(int(c), int(s), int(e), str(n)) for c, s, e, n in zip(
        db["kernels"]["correlation_id"], db["kernels"]["start"], db["kernels"]["end"],
        db["kernels"]["short_name"], strict=True)]
    for kind in ("memcpy", "memset"):
        table = db.get(kind)
        if table is not None and len(table) and "correlation_id" in table:
            events += [(int(c), int(s), int(e), f"[{kind}]") for c, s, e in zip(
                table["correlation_id"], table["start"], table["end"], strict=True)]
    return events


def _launched_in(db: dict[str, Table]) -> list[tuple[str, int, int, list[tuple[int, int, str]]]]:
    """For each NVTX range: (name, start, end, GPU events launched by CUDA calls inside it)."""
    by_corr: dict[int, list[tuple[int, int, str]]] = {}
    for corr, start, end, name in _gpu_events(db):
        by_corr.setdefault(corr, []).append((start, end, name))
    rt, nv = db["runtime"], db["nvtx"]
    calls = sorted(zip(rt["start"], rt["thread"], rt["correlation_id"], strict=True))
    starts = np.asarray([c[0] for c in calls], dtype=np.int64)
    out = []
    for name, start, end, thread in zip(nv["name"], nv["start"], nv["end"], nv["thread"], strict=True):
        lo, hi = np.searchsorted(starts, start, "left"), np.searchsorted(starts, end, "left")
        launched = [ev for c in calls[lo:hi] if c[1] == thread for ev in by_corr.get(int(c[2]), [])]
        out.append((str(name), int(start), int(end), launched))
    return out


def nvtx_gpu_projection(db: dict[str, Table]) -> Table:
    """What ``nsys stats --report nvtx_gpu_proj_sum`` shows: each NVTX range projected onto the
    GPU. An NVTX range opens and closes on the HOST; the GPU runs the work launched inside it
    later. Per range name: ``count``, ``range_ns`` (host time, as ``nvtx_sum``), ``proj_ns``
    (from the start of the first GPU operation launched inside the range to the end of the last),
    ``gpu_ops`` (their number), summed over the instances. Ranges that launched nothing are left out."""
    rows: dict[str, dict[str, Any]] = {}
    for name, start, end, launched in _launched_in(db):
        if not launched:
            continue
        row = rows.setdefault(name, {"name": name, "count": 0, "range_ns": 0.0, "proj_ns": 0.0, "gpu_ops": 0})
        row["count"] += 1
        row["range_ns"] += end - start
        row["proj_ns"] += max(e for _, e, _ in launched) - min(s for s, _, _ in launched)
        row["gpu_ops"] += len(launched)
    ordered = sorted(rows.values(), key=lambda r: -r["proj_ns"])
    return Table.from_rows("nvtx_gpu_proj_sum", ordered, ["name", "count", "range_ns", "proj_ns", "gpu_ops"],
                           db["nvtx"].meta)


def kernels_by_range(db: dict[str, Table], range_name: str) -> Table:
    """Kernels launched inside NVTX ranges named ``range_name``, summarized like
    ``cuda_gpu_kern_sum`` (what ``nsys stats --report nvtx_kern_sum`` shows per range)."""
    found = [ev for name, _, _, launched in _launched_in(db) if name == range_name
             for ev in launched if not ev[2].startswith("[")]
    if not found and range_name not in set(map(str, db["nvtx"]["name"])):
        raise ValueError(f"No NVTX range named {range_name!r} in this database.")
    events = Table("kernels", {"name": [n for _, _, n in found],
                               "duration_ns": [e - s for s, e, _ in found]}, db["kernels"].meta)
    return summarize(events, report=f"kernels in {range_name!r} ranges")


def plot_step(db: dict[str, Table], step: int = 0, ax: Any = None) -> Any:
    """Gantt view of one NVTX ``step`` range of a :func:`read_sqlite` database: NVTX ranges,
    CUDA API calls (host) and kernels / copies (GPU), in ms from the step's start."""
    import matplotlib.pyplot as plt

    nv = db["nvtx"]
    steps = np.flatnonzero(nv["name"] == "step")
    if step >= len(steps):
        raise ValueError(f"step={step}: the database has {len(steps)} NVTX 'step' ranges.")
    t0, t1 = int(nv["start"][steps[step]]), int(nv["end"][steps[step]])
    i18n.for_plot()
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 3.2))
    lanes = [("NVTX " + n, nv.take(nv["name"] == n), "tab:purple")
             for n in ("step", "dataloader", "forward", "backward", "optimizer")]
    lanes += [("CUDA API", db["runtime"], "tab:orange"), (tr("GPU kernels"), db["kernels"], "tab:blue"),
              ("GPU memcpy", db["memcpy"], "tab:red")]
    for y, (_, table, color) in enumerate(lanes):
        keep = (table["start"] < t1) & (table["end"] > t0) if len(table) else []
        part = table.take(keep) if len(table) else table
        if len(part):
            ax.broken_barh([((s - t0) / 1e6, (e - s) / 1e6) for s, e in zip(part["start"], part["end"],
                                                                             strict=True)],
                           (y - 0.4, 0.8), color=color)
    ax.set_yticks(range(len(lanes)), [lane[0] for lane in lanes])
    ax.invert_yaxis()
    ax.set_xlabel(tr("ms from the start of the step"))
    tag = tr(" (EXAMPLE data, synthetic)") if nv.meta.get("example") else ""
    ax.set_title(tr("NVTX step {step}", step=step) + tag)
    return ax


# =========================================================================== example data

EXAMPLE_SCENARIOS = ("compute", "memcpy", "launch")


def example_path(scenario: str = "compute", kind: str = "stats") -> Path:
    """Path of a shipped EXAMPLE file: ``kind="stats"`` (nsys stats CSV) or ``"sqlite"``.

    Synthetic data in nsys's formats (see ``data/nsys_example_README.md``), not a capture.
    """
    if scenario not in EXAMPLE_SCENARIOS:
        raise ValueError(f"Unknown example {scenario!r}; choose one of {EXAMPLE_SCENARIOS}.")
    if kind not in ("stats", "sqlite"):
        raise ValueError(f"kind={kind!r}: use 'stats' (the CSV) or 'sqlite' (the export).")
    suffix = "stats.csv" if kind == "stats" else "export.sqlite"
    return DATA / f"nsys_example_{scenario}_{suffix}"


def describe_example(scenario: str) -> str:
    """What the synthetic workload of an example is."""
    from ._nsys_examples import SCENARIOS

    if scenario not in SCENARIOS:
        raise ValueError(f"Unknown example {scenario!r}; choose one of {EXAMPLE_SCENARIOS}.")
    return SCENARIOS[scenario].description


def make_nsys_examples(out_dir: str | Path = DATA) -> list[Path]:
    """(Re)write the example files: for each scenario an ``nsys export`` SQLite database and the
    ``nsys stats --format csv`` output computed from it. Deterministic (seeded)."""
    from ._nsys_examples import write_examples

    return write_examples(Path(out_dir))


# =========================================================================== a real capture

@dataclass
class Capture:
    """Files of one nsys run: the report, its stats CSV and its SQLite export."""

    report: Path
    stats_csv: Path
    sqlite: Path
    commands: list[Command] = field(default_factory=list)


def capture_demo(workdir: str | Path | None = None, steps: int = 20, first: int = 10, last: int = 14,
                 timeout_s: int = 120) -> Capture:
    """Profile ``python -m helpers.nvtx`` (an annotated loop with a cudaProfilerApi window) with
    nsys, then write its stats CSV and SQLite export. Needs ``nsys`` on PATH and a CUDA GPU."""
    if not nsys_available():
        raise RuntimeError("nsys is not on PATH: install Nsight Systems, or use helpers.nsys.example_path().")
    work = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="trainperf-nsys-"))
    work.mkdir(parents=True, exist_ok=True)
    prof = profile_command("-m", "helpers.nvtx", f"--steps={steps}", f"--first={first}", f"--last={last}",
                           output=str(work / "trace_step"), python=sys.executable)
    report = work / "trace_step.nsys-rep"
    stats, export = stats_command(str(report)), export_command(str(report))
    for cmd in (prof, export):
        done = subprocess.run(cmd.argv, capture_output=True, text=True, timeout=timeout_s)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise RuntimeError(f"`{cmd.argv[0]} {cmd.argv[1]}` failed ({done.returncode}): {tail[0]}")
    csv_path = work / "trace_step_stats.csv"
    done = subprocess.run(stats.argv, capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        raise RuntimeError(f"`nsys stats` failed ({done.returncode}): {done.stderr.strip()[:200]}")
    csv_path.write_text(done.stdout)
    return Capture(report, csv_path, work / "trace_step.sqlite", [prof, stats, export])


def example_or_capture(scenario: str = "compute", try_capture: bool = True) -> tuple[Path, Path, str]:
    """(stats CSV, SQLite, what they are): a real capture when asked for and nsys and CUDA are
    here (:func:`capture_demo`), else the shipped EXAMPLE files of ``scenario``."""
    import torch

    if not nsys_available():
        reason = "nsys is not installed"
    elif not torch.cuda.is_available():
        reason = "no CUDA GPU to profile"
    elif not try_capture:
        reason = "no capture was asked for (quick mode)"
    else:
        try:
            cap = capture_demo()
            return cap.stats_csv, cap.sqlite, f"a real nsys capture in {cap.report.parent}"
        except (RuntimeError, subprocess.TimeoutExpired) as err:
            reason = f"the nsys capture failed ({str(err)[:160]})"
    return (example_path(scenario, "stats"), example_path(scenario, "sqlite"),
            f"EXAMPLE data in nsys's format (synthetic workload {scenario!r}, not a capture): {reason}")

"""Reading a chrome-trace file into a :class:`~helpers.timeline._trace.Trace` (its
:class:`~helpers.timeline._trace.Columns`), as fast as the installed libraries allow; finding
the files of a folder of ranks and the rank in a file name.

* Decompression: ``isal`` (Intel's ISA-L) when installed, else the standard ``zlib``.
* Parsing: ``msgspec`` when installed decodes each event straight into a small typed record
  that holds only the fields the analysis needs (everything else is skipped, never built);
  otherwise (or with ``parser="json"``, or ``keep_args=True``) the standard library's ``json``
  builds plain dicts. Both give identical columns; ``trace.parser`` says which one ran.

Every problem with the file becomes one ``ValueError`` line naming the file and what to do.
"""

from __future__ import annotations

import gc
import json
import re
import types
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from .._validate import flag as _flag
from .._validate import path as _path
from .._validate import unknown
from ._trace import NONE, Columns, Trace

try:  # optional fast paths (``pip install trainperf-course[fast]``)
    import msgspec
except ImportError:  # pragma: no cover - depends on the environment
    msgspec = None  # type: ignore[assignment]  # None: the json path (json_parser() says which)
_zlib: types.ModuleType
try:
    from isal import isal_zlib as _zlib
except ImportError:  # pragma: no cover
    _zlib = zlib

PARSERS = ("msgspec", "json")
_HINT = "re-export it with prof.export_chrome_trace(path) and check the file is complete."


def default_parser() -> str:
    """The parser :func:`~helpers.timeline.load_trace` uses by default: "msgspec" if installed."""
    return "msgspec" if msgspec is not None else "json"


def json_parser() -> str:
    """The JSON parser :func:`~helpers.timeline.load_trace` uses here: "msgspec <version>" when
    the optional ``msgspec`` package is installed (``pip install trainperf-course[fast]``), else
    "json (standard library)". A loaded trace says which one read it: ``trace.parser``."""
    return parser_label(default_parser())


def parser_label(parser: str) -> str:
    """Name and version of a parser, e.g. "msgspec 0.23.0" or "json (standard library)"."""
    return f"msgspec {msgspec.__version__}" if parser == "msgspec" else "json (standard library)"


def read_trace(path: str | Path, parser: str | None = None, keep_args: bool = False) -> Trace:
    """Read one chrome-trace file into a :class:`Trace` (complete events only, sorted by start).

    ``parser``: "msgspec" or "json" (the standard library); by default msgspec when it is
    installed. ``trace.parser`` says which one ran."""
    _flag(keep_args=keep_args)
    path = _path("path", path)
    return _as_trace(path, *parse_file(path, parser, keep_args))


def trace_from_data(data: Any, source: str = "<trace data>") -> Trace:
    """A :class:`Trace` of a chrome trace already in memory: the dict ``json.load`` gives (or
    its bare list of events). The same checks and one-line errors as :func:`read_trace`, whose
    messages name ``source`` instead of a file."""
    return _as_trace(source, *_from_dicts(data, Path(source), False), "")


def _as_trace(path: str | Path, columns: Columns, threads: dict, meta: dict, used: str) -> Trace:
    info = meta.get("distributedInfo")
    info = info if isinstance(info, dict) else {}
    return Trace(
        str(path),
        None,
        info.get("rank"),
        info.get("world_size"),
        info.get("backend"),
        threads,
        meta,
        columns=columns,
        parser=used,
    )


RANK_IN_NAME_RE = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


def rank_from_name(path: str | Path) -> int | None:
    """The rank written in a file name (``rank-3.json.gz``, ``trace_rank7.json``), else None."""
    m = RANK_IN_NAME_RE.search(Path(path).name)
    return int(m.group(1)) if m else None


def trace_files(folder: Path) -> list[Path]:
    """The ``.json`` / ``.json.gz`` files of a folder (``rank-N.json.gz``, the profiler's
    ``host_pid.<time>.pt.trace.json``, ...), one per rank."""
    if not folder.is_dir():
        raise FileNotFoundError(f"trace folder not found: {folder}")
    files = sorted(
        p
        for p in folder.iterdir()
        if p.is_file() and (p.name.endswith(".json") or p.name.endswith(".json.gz"))
    )
    if not files:
        raise FileNotFoundError(
            f"no .json or .json.gz trace files in folder {folder}; point at the "
            "folder torch.profiler wrote (one file per rank)"
        )
    return files


class TraceError(ValueError):
    """A trace file that cannot be analysed; the message is one line naming the file."""


def _unreadable(path: Path, why: str) -> TraceError:
    first = why.splitlines()[0] if why else "unknown error"
    return TraceError(f"{path} is not a readable JSON chrome trace ({first}); {_HINT}")


def read_bytes(path: Path) -> bytes:
    """The file's JSON text as bytes, gunzipped when it is gzip (by content, not by name)."""
    if not path.is_file():
        raise FileNotFoundError(
            f"trace file not found: {path} — pass the .json or .json.gz written by "
            "torch.profiler (prof.export_chrome_trace(...))."
        )
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise _unreadable(path, str(err)) from None
    if raw[:2] != b"\x1f\x8b":
        return _not_empty(path, raw)
    parts = []
    try:
        while raw:  # a .gz may hold several members one after another
            d = _zlib.decompressobj(47)
            parts.append(d.decompress(raw))
            if not d.eof:
                raise _unreadable(path, "the gzip stream is truncated")
            raw = d.unused_data.lstrip(b"\0")
            del d
    except (zlib.error, _zlib.error) as err:
        raise _unreadable(path, f"gzip: {err}") from None
    return _not_empty(path, parts[0] if len(parts) == 1 else b"".join(parts))


def _not_empty(path: Path, text: bytes) -> bytes:
    # strip() copies the buffer (hundreds of MB for a large trace): look at its start first
    if not text[:4096].strip() and not text.strip():
        raise TraceError(
            f"{path} is empty (no trace in it); the profiler run that wrote it did not "
            f"finish, or the copy failed: {_HINT}"
        )
    return text


def parse_file(
    path: Path, parser: str | None = None, keep_args: bool = False
) -> tuple[Columns, dict, dict, str]:
    """(columns, thread names, top-level fields but the events, parser label) of one file."""
    _flag(keep_args=keep_args)
    parser = parser or default_parser()
    if parser not in PARSERS:
        raise unknown("parser", parser, PARSERS)
    if parser == "msgspec" and msgspec is None:
        raise ValueError("parser='msgspec' needs the msgspec package: pip install msgspec")
    with _no_gc():
        return _parse(path, parser, keep_args)


@contextmanager
def _no_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector: parsing allocates 10^5-10^7 objects and no cycles,
    and each automatic collection would walk them all again."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _parse(path: Path, parser: str, keep_args: bool) -> tuple[Columns, dict, dict, str]:
    # The file's bytes travel in a one-item list that the parser empties, so they are freed
    # as soon as they are decoded (peak memory: the bytes, or the decoded events, not both).
    if parser == "msgspec" and not keep_args:
        try:
            return (*_parse_msgspec([read_bytes(path)], path), parser_label("msgspec"))
        except _Unusual:
            pass  # an odd but maybe valid file: the general path decides, with its own message
    return (*_parse_general([read_bytes(path)], path, parser, keep_args), parser_label(parser))


def _parse_general(
    holder: list[bytes], path: Path, parser: str, keep_args: bool
) -> tuple[Columns, dict, dict]:
    buf = holder.pop()
    try:
        data = msgspec.json.decode(buf) if parser == "msgspec" else json.loads(buf)
    except (ValueError, RecursionError) as err:  # JSONDecodeError, msgspec.DecodeError, bad UTF-8
        raise _unreadable(path, str(err)) from None
    del buf
    return _from_dicts(data, path, keep_args)


# --------------------------------------------------------------------------- general path (dicts)


def _no_events(path: Path) -> TraceError:
    return TraceError(f"{path} has no 'traceEvents' list: it is not a Kineto / torch.profiler chrome trace.")


def _bad_event(raw: Any, index: int, path: Path, what: str) -> TraceError:
    name = raw.get("name") if isinstance(raw, dict) else None
    return TraceError(f"{path}: event {index} ({name!r}) {what}; the trace is damaged — record it again.")


_NO_TIME = "has no numeric 'ts'/'dur' (or a negative 'dur')"


def _from_dicts(data: Any, path: Path, keep_args: bool) -> tuple[Columns, dict, dict]:
    if isinstance(data, list):  # the JSON-array flavour of the chrome trace format
        data = {"traceEvents": data}
    raw_events = data.get("traceEvents") if isinstance(data, dict) else None
    if not isinstance(raw_events, list):
        raise _no_events(path)
    ts, dur, names, cats, pids, tids, streams, corrs, kept = [], [], [], [], [], [], [], [], []
    thread_names, number = {}, (float, int)
    for i, raw in enumerate(raw_events):
        # hot loop (10^5-10^6 events): plain lookups, no Python-level calls
        try:
            ph = raw["ph"]
        except (KeyError, TypeError, IndexError):
            continue
        if ph == "X":
            args = raw.get("args") or {}
            t, d, name = raw.get("ts"), raw.get("dur", 0.0), raw.get("name", "")
            if t.__class__ not in number or d.__class__ not in number or d < 0:
                raise _bad_event(raw, i, path, _NO_TIME)
            if name.__class__ is not str or args.__class__ is not dict:
                raise _bad_event(
                    raw, i, path, "has a 'name' that is not text or 'args' that are not an object"
                )
            ts.append(t)
            dur.append(d)
            names.append(name)
            cats.append(raw.get("cat", ""))
            pids.append(raw.get("pid"))
            tids.append(raw.get("tid"))
            streams.append(args.get("stream"))
            corrs.append(args.get("correlation"))
            kept.append(args)
        elif ph == "M" and raw.get("name") == "thread_name":
            args = raw.get("args") or {}
            if isinstance(args, dict):
                thread_names[(raw.get("pid"), raw.get("tid"))] = str(args.get("name", ""))
    del raw_events
    meta = {k: v for k, v in data.items() if k != "traceEvents"}
    return (
        _columns(path, ts, dur, names, cats, pids, tids, streams, corrs, kept if keep_args else None),
        thread_names,
        meta,
    )


def _columns(path: Path, *cols: Any) -> Columns:
    try:
        return Columns(*cols)
    except TypeError as err:  # unhashable pid / tid / stream / correlation, odd category
        raise TraceError(
            f"{path}: an event field has an unexpected type ({err}); it is not a "
            "Kineto / torch.profiler chrome trace."
        ) from None


# --------------------------------------------------------------------------- msgspec path


class _Unusual(Exception):
    """The file does not fit the fast path's schema; the general path takes over."""


if msgspec is not None:

    class _Args(msgspec.Struct, gc=False):
        stream: int = NONE  # ids: integers here (anything else: the general path)
        correlation: int = NONE
        name: Any = ""  # the thread name of a "thread_name" metadata event

    class _Event(msgspec.Struct, gc=False):
        ph: Any = None
        name: Any = ""
        cat: Any = ""
        ts: float | None = None  # msgspec: floats and ints, not bools or strings
        dur: float | None = 0.0
        pid: Any = None
        tid: Any = None
        args: _Args | None = None

    class _Top(msgspec.Struct, gc=False):
        """The events and the top-level fields Kineto writes (others are skipped: finding
        them would take a second pass over the whole file)."""

        traceEvents: list[_Event] | msgspec.UnsetType = msgspec.UNSET
        schemaVersion: Any = msgspec.UNSET
        deviceProperties: Any = msgspec.UNSET
        distributedInfo: Any = msgspec.UNSET
        record_shapes: Any = msgspec.UNSET
        profile_memory: Any = msgspec.UNSET
        with_stack: Any = msgspec.UNSET
        with_flops: Any = msgspec.UNSET
        with_modules: Any = msgspec.UNSET
        trace_id: Any = msgspec.UNSET
        cuda_runtime_version: Any = msgspec.UNSET
        cuda_driver_version: Any = msgspec.UNSET
        cupti_version: Any = msgspec.UNSET
        hip_runtime_version: Any = msgspec.UNSET
        roctracer_version: Any = msgspec.UNSET
        INFO: Any = msgspec.UNSET
        host_name: Any = msgspec.UNSET
        traceName: Any = msgspec.UNSET
        displayTimeUnit: Any = msgspec.UNSET
        baseTimeNanoseconds: Any = msgspec.UNSET

    _TOP = msgspec.json.Decoder(_Top)
    _EVENTS = msgspec.json.Decoder(list[_Event])


def _parse_msgspec(holder: list[bytes], path: Path) -> tuple[Columns, dict, dict]:
    buf = holder.pop()
    try:
        head = buf[:64]
        if head.lstrip()[:1] == b"[":  # the JSON-array flavour: a bare list of events
            meta, events = {}, _EVENTS.decode(buf)
        else:
            top = _TOP.decode(buf)
            listed = top.traceEvents
            if isinstance(listed, msgspec.UnsetType):
                raise _Unusual
            events = listed
            meta = {k: v for k in top.__struct_fields__[1:] if (v := getattr(top, k)) is not msgspec.UNSET}
            del top
    except msgspec.ValidationError:
        raise _Unusual from None
    except msgspec.DecodeError as err:
        raise _unreadable(path, str(err)) from None
    del buf
    rows = [
        (
            e.ts,
            e.dur,
            e.name,
            e.cat,
            e.pid,
            e.tid,
            NONE if (a := e.args) is None else a.stream,
            NONE if a is None else a.correlation,
        )
        for e in events
        if e.ph == "X"
    ]
    thread_names = {
        (e.pid, e.tid): str(e.args.name if e.args is not None else "")
        for e in events
        if e.ph == "M" and e.name == "thread_name"
    }
    del events
    ts, dur, names, cats, pids, tids, streams, corrs = zip(*rows, strict=True) if rows else [()] * 8
    del rows
    ids = [np.fromiter(v, np.int64, len(v)) for v in (streams, corrs)]
    cols = _columns(path, ts, dur, names, cats, pids, tids, *ids, None)
    # a missing ts / dur became NaN; the general path names the damaged event
    if (
        np.isnan(cols.ts).any()
        or np.isnan(cols.dur).any()
        or (cols.dur < 0).any()
        or not all(n.__class__ is str for n in cols.names)
    ):
        raise _Unusual
    return cols, thread_names, meta

"""Loading Kineto / ``torch.profiler`` chrome traces (``.json`` or ``.json.gz``) into plain events."""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import Any

_START = itemgetter(2)

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


class Event(tuple):
    """One complete ("X") trace event, a light tuple. Times are microseconds, as in the trace.

    Fields: name, cat, ts, dur, pid, tid, stream (None for host events), correlation, args.
    """

    __slots__ = ()
    name = property(itemgetter(0))
    cat = property(itemgetter(1))
    ts = property(itemgetter(2))
    dur = property(itemgetter(3))
    pid = property(itemgetter(4))
    tid = property(itemgetter(5))
    stream = property(itemgetter(6))
    correlation = property(itemgetter(7))
    args = property(itemgetter(8))

    def __new__(cls, name: str, cat: str, ts: float, dur: float, pid: Any, tid: Any,
                stream: int | None, correlation: int | None, args: dict) -> Event:
        return tuple.__new__(cls, (name, cat, ts, dur, pid, tid, stream, correlation, args))

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


@dataclass
class Trace:
    """One rank's trace: its complete events (sorted by start) and what the file says about it."""

    path: str
    events: list[Event]
    rank: int | None = None
    world_size: int | None = None
    backend: str | None = None
    thread_names: dict[tuple[Any, Any], str] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)  # analysis results

    @property
    def is_gpu(self) -> bool:
        """True when the trace holds device events (kernels on CUDA streams)."""
        if "is_gpu" not in self.cache:
            self.cache["is_gpu"] = any(e.stream is not None for e in self.events)
        return self.cache["is_gpu"]

    def gpu_events(self) -> list[Event]:
        return [e for e in self.events if e.stream is not None]

    def steps(self, pattern: str | None = None) -> list[Event]:
        """``ProfilerStep#N`` events; else annotated steps (``train_step_12``, ``step 3``);
        ``pattern`` (a regex) overrides both."""
        if pattern is not None:
            rx = re.compile(pattern)
            return [e for e in self.events if e.stream is None and rx.search(e.name)]
        found = [e for e in self.events if e.stream is None and STEP_RE.match(e.name)]
        if not found:
            found = [e for e in self.events if e.stream is None and ANNOTATED_STEP_RE.match(e.name)]
        return found

    def __repr__(self) -> str:
        kind = "GPU" if self.is_gpu else "CPU-only"
        rank = "?" if self.rank is None else self.rank
        return (f"Trace({Path(self.path).name}: rank {rank}/{self.world_size or '?'}, "
                f"{self.backend or 'no'} backend, {kind}, {len(self.events)} events, "
                f"{len(self.steps())} steps)")


def _read_json(path: Path) -> Any:
    if not path.is_file():
        raise FileNotFoundError(
            f"trace file not found: {path} — pass the .json or .json.gz written by "
            "torch.profiler (prof.export_chrome_trace(...)).")
    try:
        if path.name.endswith(".gz"):
            with gzip.open(path, "rt", encoding="utf-8") as fh:
                return json.load(fh)
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ValueError(f"{path} is not a readable JSON chrome trace ({first}); re-export it with "
                         "prof.export_chrome_trace(path) and check the file is complete.") from None


def _bad_event(raw: dict, index: int, path: Path) -> ValueError:
    return ValueError(f"{path}: event {index} ({raw.get('name')!r}) has no numeric 'ts'/'dur' (or a "
                      "negative 'dur'); the trace is damaged — record it again.")


def read_trace(path: str | Path) -> Trace:
    """Read one chrome-trace file into a :class:`Trace` (complete events only, sorted by start)."""
    path = Path(path)
    data = _read_json(path)
    if isinstance(data, list):  # the JSON-array flavour of the chrome trace format
        data = {"traceEvents": data}
    raw_events = data.get("traceEvents") if isinstance(data, dict) else None
    if not isinstance(raw_events, list):
        raise ValueError(f"{path} has no 'traceEvents' list: it is not a Kineto / torch.profiler "
                         "chrome trace.")
    events, threads = [], {}
    new, append, number = tuple.__new__, events.append, (float, int)
    for i, raw in enumerate(raw_events):
        # hot loop (10^5 events): plain lookups, no Python-level calls
        try:
            ph = raw["ph"]
        except (KeyError, TypeError):
            continue
        if ph == "X":
            args = raw.get("args") or {}
            ts, dur = raw.get("ts"), raw.get("dur", 0.0)
            if ts.__class__ not in number or dur.__class__ not in number or dur < 0:
                raise _bad_event(raw, i, path)
            stream = args.get("stream")
            if stream == -1:  # Kineto marks "no stream" with -1
                stream = None
            append(new(Event, (raw.get("name", ""), raw.get("cat", ""), ts, dur, raw.get("pid"),
                               raw.get("tid"), stream, args.get("correlation"), args)))
        elif ph == "M" and raw.get("name") == "thread_name":
            threads[(raw.get("pid"), raw.get("tid"))] = str((raw.get("args") or {}).get("name", ""))
    events.sort(key=_START)
    info = data.get("distributedInfo") or {}
    meta = {k: v for k, v in data.items() if k != "traceEvents"}
    return Trace(str(path), events, info.get("rank"), info.get("world_size"), info.get("backend"),
                 threads, meta)


def trace_files(folder: Path) -> list[Path]:
    """The ``.json`` / ``.json.gz`` files of a folder, one per rank."""
    files = sorted(p for p in folder.iterdir() if p.is_file()
                   and (p.name.endswith(".json") or p.name.endswith(".json.gz")))
    if not files:
        raise FileNotFoundError(f"no .json or .json.gz trace files in folder {folder}")
    return files

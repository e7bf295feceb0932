"""GENERATED example traces: a CPU profiler trace with chosen phase times, for exercises.

The five traces the course recorded (:data:`helpers.report.RECORDED_TRACES`) show the
bottlenecks this machine produced: mostly data-bound, one optimizer-bound. A reader of traces
also meets steps where the forward, the host or the optimizer dominates. :func:`write_trace`
writes a trace in the format ``torch.profiler`` exports on a CPU (``ProfilerStep#N`` ranges, and
inside each the ``dataloader``, ``forward``, ``backward`` and ``optimizer`` ranges of
``helpers.nvtx.annotate``, then host time outside any range) with the phase times asked for,
each step varied a little around them. It is labelled as generated in its metadata: example
data, not a measurement.
"""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Mapping
from pathlib import Path

from .phases import RANGES

PHASES = ("data", "forward", "backward", "optimizer", "other")
LABEL = "GENERATED example trace (helpers.report.synthetic), not a measurement"


def write_trace(
    path: str | Path, phases_ms: Mapping[str, float], steps: int = 3, jitter: float = 0.05, seed: int = 0
) -> Path:
    """Write a generated CPU trace to ``path`` (``.json`` or ``.json.gz``) whose profiled steps
    spend about ``phases_ms`` (ms of ``data``, ``forward``, ``backward``, ``optimizer``,
    ``other``; a missing phase is 0) each, every phase of every step scaled by a factor drawn
    uniformly from ``1 ± jitter`` (seeded). Returns the path."""
    unknown = set(phases_ms) - set(PHASES)
    if unknown:
        raise ValueError(f"unknown phase(s) {sorted(unknown)}; phases are {', '.join(PHASES)}")
    if any(not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0 for v in phases_ms.values()):
        raise ValueError("every phase time must be a number of ms >= 0")
    if not sum(phases_ms.values()) > 0:
        raise ValueError("the phases must add up to more than 0 ms")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a whole number >= 1, got {steps!r}")
    if not 0 <= jitter < 1:
        raise ValueError(f"jitter must be at least 0 and below 1, got {jitter!r}")
    rng = random.Random(seed)
    events = []
    t = 1_000_000.0  # µs, as torch.profiler writes them
    pid = tid = 1
    for step in range(1, steps + 1):
        durations = {p: 1e3 * phases_ms.get(p, 0.0) * (1 + jitter * (2 * rng.random() - 1)) for p in PHASES}
        start = t
        for phase, name in RANGES.items():  # data, forward, backward, optimizer, in order
            if durations[phase] > 0:
                events.append(_range(name, t, durations[phase], pid, tid))
                t += durations[phase]
        t += durations["other"]  # host time outside the ranges
        events.append(_range(f"ProfilerStep#{step}", start, t - start, pid, tid))
    document = {"traceEvents": events, "traceName": LABEL, "displayTimeUnit": "ms"}
    out = Path(path)
    data = json.dumps(document).encode()
    out.write_bytes(gzip.compress(data) if out.name.endswith(".gz") else data)
    return out


def _range(name: str, ts: float, dur: float, pid: int, tid: int) -> dict:
    return {"ph": "X", "cat": "user_annotation", "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}

"""``python -m helpers.timeline bench TRACE``: time loading + analysing a ~100k-event trace,
and HTA's parse of the same file when an interpreter with HolisticTraceAnalysis is given.

The big trace is synthesised from TRACE by repeating its events with shifted timestamps,
correlation ids and step numbers, so it is a valid trace with the same structure.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

HTA_SCRIPT = r"""
import sys, time, logging
logging.disable(logging.WARNING)
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t1 = time.perf_counter()
analyzer = TraceAnalysis(trace_dir=sys.argv[1])
t2 = time.perf_counter()
tb = analyzer.get_temporal_breakdown(visualize=False)
ov = analyzer.get_comm_comp_overlap(visualize=False)
t3 = time.perf_counter()
print(f"RESULT {t2 - t1:.4f} {t3 - t2:.4f} {t1 - t0:.4f}")
print("HTA temporal breakdown:", tb.to_dict("records"))
print("HTA comm/comp overlap:", ov.to_dict("records"))
"""


def synthesise(source: Path, target_events: int, out: Path) -> int:
    """Write ``out`` (.json.gz): ``source``'s events repeated until about ``target_events``."""
    opener = gzip.open if source.name.endswith(".gz") else open
    with opener(source, "rt", encoding="utf-8") as fh:
        data = json.load(fh)
    events = data["traceEvents"]
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - min(e["ts"] for e in timed) + 1000
    ids = [v for e in timed for k, v in (e.get("args") or {}).items()
           if k in ("correlation", "External id") and isinstance(v, int)]
    id_step = max(ids, default=0) + 1
    copies = max(1, -(-target_events // len(events)))
    out_events = [e for e in events if not isinstance(e.get("ts"), (int, float))]  # metadata once
    for c in range(copies):
        for e in timed:
            e2 = dict(e, ts=e["ts"] + c * span)
            if isinstance(e2.get("id"), int):  # flow events
                e2["id"] += c * id_step
            if e.get("args"):
                args = dict(e["args"])
                for k in ("correlation", "External id"):
                    if isinstance(args.get(k), int):
                        args[k] += c * id_step
                e2["args"] = args
            if str(e.get("name", "")).startswith("ProfilerStep#"):
                e2["name"] = f"ProfilerStep#{int(e['name'].split('#')[1]) + c * 1000}"
            out_events.append(e2)
    data["traceEvents"] = out_events
    with gzip.open(out, "wt", encoding="utf-8") as fh:
        json.dump(data, fh)
    return len(out_events)


def ours(path: Path) -> tuple[float, str]:
    from . import timeline

    t0 = time.perf_counter()
    trace = timeline.load_trace(path)
    tb = timeline.temporal_breakdown(trace)
    ov = timeline.comm_comp_overlap(trace) if trace.is_gpu else float("nan")
    steps = timeline.step_breakdown(trace)
    elapsed = time.perf_counter() - t0
    return elapsed, f"{tb}; overlap {ov}%; {len(steps)} steps"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m helpers.timeline",
                                description="benchmark trace loading + analysis against HTA")
    p.add_argument("command", choices=["bench"])
    p.add_argument("trace", type=Path, help="a .json/.json.gz trace to replicate")
    p.add_argument("--events", type=int, default=100_000, help="events in the synthesised trace")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--hta-python", help="a Python with HolisticTraceAnalysis installed")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="trainperf_bench_") as tmp:
        big = Path(tmp) / "rank-0.json.gz"
        n = synthesise(a.trace, a.events, big)
        print(f"synthesised {n:,} events from {a.trace.name} -> {big.stat().st_size / 1e6:.1f} MB gz")
        runs = [ours(big) for _ in range(a.repeat)]
        times = [r[0] for r in runs]
        med = statistics.median(times)
        print(f"helpers.timeline load + temporal_breakdown + overlap + step_breakdown: median "
              f"{med:.2f} s (min {min(times):.2f}, max {max(times):.2f}, {a.repeat} runs)")
        print("  ", runs[-1][1])
        if not a.hta_python:
            print("HTA not timed: pass --hta-python /path/to/python with HolisticTraceAnalysis")
            return 0
        hta = []
        for _ in range(a.repeat):
            r = subprocess.run([a.hta_python, "-c", HTA_SCRIPT, tmp], capture_output=True, text=True)
            line = next((ln for ln in r.stdout.splitlines() if ln.startswith("RESULT")), None)
            if r.returncode != 0 or line is None:
                print("HTA failed:", (r.stderr.strip().splitlines() or ["no output"])[-1])
                return 1
            hta.append(tuple(float(x) for x in line.split()[1:]))
        parse = statistics.median(h[0] for h in hta)
        both = statistics.median(h[0] + h[1] for h in hta)
        print(f"HTA TraceAnalysis parse: median {parse:.2f} s; parse + the two analyses: {both:.2f} s "
              f"(import {statistics.median(h[2] for h in hta):.2f} s not counted)")
        print("  ", "\n   ".join(ln for ln in r.stdout.splitlines() if ln.startswith("HTA")))
        print(f"ratio: HTA parse / ours = {parse / med:.1f}x; HTA parse+analysis / ours = {both / med:.1f}x")
    return 0

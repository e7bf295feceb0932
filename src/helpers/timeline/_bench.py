"""``python -m helpers.timeline bench TRACE [--hta-python PY]``: how fast ``helpers.timeline``
loads a trace and computes HTA's temporal breakdown and comm/comp overlap, against Holistic
Trace Analysis (HTA) itself when ``--hta-python`` names an interpreter that has it.

Three measurements, each a fresh child process per run (imports not timed), ours and HTA's runs
interleaved, best of ``--repeat``:

1. one rank: a GPU trace of ``--events`` events synthesised from TRACE;
2. ``--ranks`` ranks: a folder of that many rank files (copies with shifted timestamps),
   ours with ``--jobs`` processes, HTA with its own pool;
3. ``--scale``: time and peak memory (the child's peak resident memory, VmHWM, above its
   level after the imports) for growing event counts, one run each.

Synthetic traces repeat TRACE's events with shifted timestamps, correlation ids and step
numbers, so they are valid traces with TRACE's structure. ``--save`` records the figures in
the package (``timeline.benchmark_result()`` prints them).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from ._trace_read import json_parser, read_trace

SAVED = Path(__file__).resolve().parents[1] / "data" / "timeline_bench.json"

OURS_SCRIPT = r"""
import json, os, resource, sys, time
def hwm():  # this process's peak resident memory in kB (VmHWM restarts at exec; ru_maxrss does not)
    try:
        return int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0])
    except (OSError, IndexError, ValueError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
from helpers import timeline
base = hwm()
path, jobs, parser = sys.argv[1], int(sys.argv[2]), sys.argv[3] or None
t0 = time.perf_counter()
if os.path.isdir(path):
    report = timeline.analyse_ranks(path, jobs, parser)
    figures = {r.rank: [r.idle_pct, r.compute_pct, r.non_compute_pct, r.kernel_time_us, r.overlap_pct]
               for r in report.rows}
    parsers = sorted({r.parser for r in report.rows})
    failed = list(report.failed.values())
else:
    t = timeline.load_trace(path, parser=parser)
    tb, ov = timeline.temporal_breakdown(t), timeline.comm_comp_overlap(t)
    figures = {t.rank: [tb.idle_pct, tb.compute_pct, tb.non_compute_pct, tb.kernel_time_us, ov]}
    parsers, failed = [t.parser], []
seconds = time.perf_counter() - t0
peak = hwm()  # of this process: with a folder, the workers' memory is not in it
print("RESULT " + json.dumps({"seconds": seconds, "base_kb": base, "peak_kb": peak,
                              "figures": figures, "parsers": parsers, "failed": failed}))
"""

HTA_SCRIPT = r"""
import json, logging, resource, sys, time
def hwm():  # this process's peak resident memory in kB (VmHWM restarts at exec; ru_maxrss does not)
    try:
        return int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0])
    except (OSError, IndexError, ValueError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
logging.disable(logging.WARNING)
import hta
from hta.trace_analysis import TraceAnalysis
base = hwm()
t0 = time.perf_counter()
analyzer = TraceAnalysis(trace_dir=sys.argv[1])
tb = analyzer.get_temporal_breakdown(visualize=False)
ov = analyzer.get_comm_comp_overlap(visualize=False)
seconds = time.perf_counter() - t0
peak = hwm()
overlap = {int(r["rank"]): float(r["comp_comm_overlap_pctg"]) for r in ov.to_dict("records")}
figures = {int(r["rank"]): [float(r["idle_time_pctg"]), float(r["compute_time_pctg"]),
                            float(r["non_compute_time_pctg"]), float(r["kernel_time(us)"]),
                            overlap.get(int(r["rank"]))] for r in tb.to_dict("records")}
from importlib.metadata import version
print("RESULT " + json.dumps({"seconds": seconds, "base_kb": base, "peak_kb": peak, "figures": figures,
                              "version": version("HolisticTraceAnalysis"), "pandas": version("pandas")}))
"""


class BenchError(Exception):
    """A problem the user can fix; printed as one line."""


# --------------------------------------------------------------------------- synthetic traces


def _source(path: Path) -> dict:
    if path.is_dir():
        raise BenchError(
            f"{path} is a folder: pass one GPU trace file; the benchmark builds the "
            "many-rank folder itself (--ranks)"
        )
    trace = read_trace(path)  # validates the file with the library's own one-line errors
    if not trace.is_gpu:
        raise BenchError(
            f"{path} holds no GPU kernels: HTA only analyses GPU traces; pass a GPU "
            "trace such as ../shared/traces/gpu_a100_2rank_rank0.json.gz"
        )
    opener = gzip.open if path.read_bytes()[:2] == b"\x1f\x8b" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def synthesise(data: dict, target_events: int, out: Path, rank: int = 0, shift_us: float = 0.0) -> int:
    """Write ``out`` (.json.gz): ``data``'s events repeated until about ``target_events``,
    written copy by copy (memory stays that of one copy), as rank ``rank``."""
    events = data["traceEvents"]
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - min(e["ts"] for e in timed) + 1000
    ids = [
        v
        for e in timed
        for k, v in (e.get("args") or {}).items()
        if k in ("correlation", "External id") and isinstance(v, int)
    ]
    id_step = max(ids, default=0) + 1
    copies = max(1, -(-target_events // len(events)))
    top = {k: v for k, v in data.items() if k != "traceEvents"}
    info = dict(top.get("distributedInfo") or {})
    top["distributedInfo"] = {**info, "rank": rank, "world_size": max(rank + 1, info.get("world_size", 1))}
    written = 0
    with gzip.open(out, "wt", encoding="utf-8", compresslevel=1) as fh:
        fh.write(json.dumps(top)[:-1] + (", " if top else "") + '"traceEvents": [')
        meta = [e for e in events if not isinstance(e.get("ts"), (int, float))]  # metadata once
        fh.write(",\n".join(json.dumps(e) for e in meta))
        written += len(meta)
        for c in range(copies):
            chunk = []
            for e in timed:
                e2 = dict(e, ts=e["ts"] + c * span + shift_us)
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
                chunk.append(json.dumps(e2))
            fh.write((",\n" if written else "") + ",\n".join(chunk))
            written += len(chunk)
        fh.write("]}")
    return written


def _decompressed_mb(path: Path) -> float:
    n = 0
    with gzip.open(path, "rb") as fh:
        while block := fh.read(1 << 24):
            n += len(block)
    return n / 1e6


# --------------------------------------------------------------------------- runs


def _child(cmd: list[str], what: str, timeout_s: float) -> dict:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise BenchError(f"{what} took more than {timeout_s:.0f} s (raise --timeout)") from None
    except OSError as err:
        raise BenchError(f"{what} could not start: {err}") from None
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if r.returncode != 0 or line is None:
        last = (r.stderr.strip().splitlines() or ["no output"])[-1]
        raise BenchError(f"{what} failed: {last}")
    return json.loads(line[7:])


def ours(path: Path, jobs: int, parser: str | None, timeout_s: float) -> dict:
    return _child(
        [sys.executable, "-c", OURS_SCRIPT, str(path), str(jobs), parser or ""], "helpers.timeline", timeout_s
    )


def hta(python: str, folder: Path, timeout_s: float) -> dict:
    return _child([python, "-c", HTA_SCRIPT, str(folder)], "HTA", timeout_s)


def _same(a: dict, b: dict) -> bool:
    """Same figures per rank (percentages to 0.01, kernel time to the µs)."""
    if sorted(a) != sorted(b):
        return False
    return all(
        x == y or (x is not None and y is not None and abs(x - y) < 1e-6)
        for r in a
        for x, y in zip(a[r], b[r], strict=True)
    )


def _interleaved(repeat: int, run_ours, run_hta) -> tuple[dict, dict | None]:
    """The fastest run of each tool (its figures and memory), and in ``best_o["pairs"]`` the
    seconds of every interleaved pair (ours, HTA) for the interval of the ratio."""
    best_o: dict | None = None
    best_h: dict | None = None
    pairs = []
    for _ in range(repeat):
        o = run_ours()
        best_o = o if best_o is None or o["seconds"] < best_o["seconds"] else best_o
        if run_hta is not None:
            h = run_hta()
            best_h = h if best_h is None or h["seconds"] < best_h["seconds"] else best_h
            pairs.append((o["seconds"], h["seconds"]))
    if best_o is None:
        raise ValueError(f"repeat must be at least 1, got {repeat!r}")
    return dict(best_o, pairs=pairs), best_h


def _ratio(o: dict) -> dict:
    """HTA's time over ours, paired run by run: the median, its 95 % interval (with 6 pairs or
    more: :func:`helpers.bench.min_pairs_for`) and the verdict, as :func:`helpers.bench.interval`
    and ``verdict_of`` give them."""
    from ..bench import interval, min_pairs_for, verdict_of

    ratios = [h / mine for mine, h in o["pairs"]]
    if len(ratios) < min_pairs_for():
        return {"ratio_pairs": len(ratios)}
    mid, low, high = interval(ratios)
    return {
        "ratio": mid,
        "ratio_low": low,
        "ratio_high": high,
        "ratio_pairs": len(ratios),
        "verdict": verdict_of(low, high, pairs=len(ratios)),
    }


def _ratio_text(r: dict) -> str:
    if "ratio_low" not in r:
        return (
            f"no ratio shown: {r.get('ratio_pairs', 0)} interleaved pairs were recorded, and a "
            "95 % interval needs 6 or more (--repeat)"
        )
    from ..bench import min_pairs_for

    if r["ratio_pairs"] < min_pairs_for():  # a record made before 6 pairs were the minimum
        return (
            f"HTA took {r['ratio']:.1f}x our time (range {r['ratio_low']:.1f}x to {r['ratio_high']:.1f}x "
            f"over {r['ratio_pairs']} interleaved pairs: too few for a 95 % interval, which needs "
            f"{min_pairs_for()}, so no verdict)"
        )
    word = {"faster": "faster than", "slower": "slower than", "within noise": "within noise of"}[r["verdict"]]
    return (
        f"helpers.timeline is {word} HTA: {r['ratio']:.1f}x (95 % interval {r['ratio_low']:.1f}x to "
        f"{r['ratio_high']:.1f}x over {r['ratio_pairs']} interleaved pairs)"
    )


def _mem(r: dict, mb: float) -> str:
    extra = (r["peak_kb"] - r["base_kb"]) / 1024
    return f"peak +{extra:,.0f} MB ({extra / mb:.1f}x the {mb:,.0f} MB JSON)"


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except BenchError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as err:  # bad TRACE (the library's one-line errors), full disk
        print(f"error: {str(err).splitlines()[0] if str(err) else type(err).__name__}", file=sys.stderr)
        return 2


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m helpers.timeline", description="benchmark trace loading + analysis against HTA"
    )
    p.add_argument("command", choices=["bench"])
    p.add_argument("trace", type=Path, help="a GPU .json/.json.gz trace to replicate")
    p.add_argument("--events", type=int, default=100_000, help="events in the one-rank trace")
    p.add_argument(
        "--repeat",
        type=int,
        default=6,
        help="interleaved pairs of runs (the fastest gives the memory and figures; all give "
        "the ratio's 95 %% interval, which needs 6 or more)",
    )
    p.add_argument("--ranks", type=int, default=8, help="rank files in the many-rank test (0: skip)")
    p.add_argument("--rank-events", type=int, default=None, help="events per rank file (default --events)")
    p.add_argument("--jobs", type=int, default=None, help="our processes for many ranks (default: cores)")
    p.add_argument(
        "--scale", default="", help="event counts for the scaling test, e.g. 100000,1000000,5000000"
    )
    p.add_argument(
        "--hta-max-events",
        type=int,
        default=1_000_000,
        help="skip HTA in the scaling test above this many events (its memory)",
    )
    p.add_argument("--parser", choices=["msgspec", "json"], default=None, help="our JSON parser")
    p.add_argument("--hta-python", help="a Python with HolisticTraceAnalysis installed")
    p.add_argument("--timeout", type=float, default=1800, help="seconds allowed for one run")
    p.add_argument(
        "--save",
        nargs="?",
        const=str(SAVED),
        default=None,
        help=f"write the figures as JSON (default file: the package's {SAVED.name})",
    )
    a = p.parse_args(argv)
    for name in ("events", "repeat"):
        if getattr(a, name) < 1:
            p.error(f"--{name} must be at least 1")
    if a.ranks < 0 or (a.jobs is not None and a.jobs < 1):
        p.error("--ranks must be >= 0 and --jobs >= 1")
    try:
        a.scale = [int(x) for x in a.scale.split(",") if x.strip()]
    except ValueError:
        p.error(f"--scale takes event counts separated by commas, got {a.scale!r}")
    if a.hta_python and not Path(a.hta_python).exists():
        p.error(f"--hta-python {a.hta_python} does not exist")
    return a


def _main(argv: list[str] | None) -> int:
    a = _parse_args(argv)
    data = _source(a.trace)
    load = lambda: os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")  # noqa: E731
    result: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "python": platform.python_version(),
        "parser": json_parser() if a.parser is None else a.parser,
        "source": a.trace.name,
        "load_before": load(),
        "repeat": a.repeat,
    }
    print(
        f"machine: {result['machine']}, Python {result['python']}, load average {load():.2f}; "
        f"our JSON parser: {result['parser']}"
    )
    with tempfile.TemporaryDirectory(prefix="trainperf_bench_") as tmp:
        one = Path(tmp) / "one"
        one.mkdir()
        n = synthesise(data, a.events, one / "rank-0.json.gz")
        mb = _decompressed_mb(one / "rank-0.json.gz")
        print(
            f"1. one rank: {n:,} events synthesised from {a.trace.name} ({mb:.0f} MB of JSON); "
            f"best of {a.repeat}, interleaved"
        )
        run_h = (lambda: hta(a.hta_python, one, a.timeout)) if a.hta_python else None
        o, h = _interleaved(a.repeat, lambda: ours(one / "rank-0.json.gz", 1, a.parser, a.timeout), run_h)
        print(
            f"   helpers.timeline load + temporal_breakdown + comm_comp_overlap: {o['seconds']:.3f} s, "
            f"{_mem(o, mb)}"
        )
        result["one_rank"] = {"events": n, "json_mb": mb, "ours_s": o["seconds"], "parser": o["parsers"]}
        if h:
            ratio = _ratio(o)
            same = _same(o["figures"], h["figures"])
            print(
                f"   HTA {h['version']} (pandas {h['pandas']}) TraceAnalysis + get_temporal_breakdown + "
                f"get_comm_comp_overlap: {h['seconds']:.3f} s, {_mem(h, mb)}"
            )
            print(
                f"   figures: ours {o['figures']} | HTA {h['figures']} -> "
                f"{'the same' if same else 'DIFFERENT'}"
            )
            print(f"   {_ratio_text(ratio)}")
            result["one_rank"].update(
                hta_s=h["seconds"], same=same, hta=h["version"], pandas=h["pandas"], **ratio
            )
        if a.ranks:
            result["ranks"] = _many(a, data, Path(tmp))
        if a.scale:
            result["scale"] = _scale(a, data, Path(tmp))
    result["load_after"] = load()
    print(f"load average now {load():.2f} (figures are noisy when it is near or above the core count)")
    if a.save:
        Path(a.save).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        print(f"saved to {a.save}")
    return 0


def _many(a: argparse.Namespace, data: dict, tmp: Path) -> dict:
    folder = tmp / "ranks"
    folder.mkdir()
    per = a.rank_events or a.events
    for r in range(a.ranks):
        n = synthesise(data, per, folder / f"rank-{r}.json.gz", rank=r, shift_us=137.0 * r)
    jobs = a.jobs or os.cpu_count() or 1
    print(
        f"2. {a.ranks} ranks of {n:,} events (copies with shifted timestamps); ours with {jobs} "
        f"processes; best of {a.repeat}, interleaved"
    )
    run_h = (lambda: hta(a.hta_python, folder, a.timeout)) if a.hta_python else None
    o, h = _interleaved(a.repeat, lambda: ours(folder, jobs, a.parser, a.timeout), run_h)
    print(f"   helpers.timeline.analyse_ranks (table + straggler summary): {o['seconds']:.3f} s")
    out = {"ranks": a.ranks, "events_per_rank": n, "jobs": jobs, "ours_s": o["seconds"]}
    if h:
        same = _same(o["figures"], h["figures"])
        ratio = _ratio(o)
        print(
            f"   HTA TraceAnalysis + the two analyses: {h['seconds']:.3f} s; figures "
            f"{'the same' if same else 'DIFFERENT'}; {_ratio_text(ratio)}"
        )
        out.update(hta_s=h["seconds"], same=same, **ratio)
    return out


def _scale(a: argparse.Namespace, data: dict, tmp: Path) -> list[dict]:
    rows = []
    print("3. scaling (one run each): events, JSON MB, ours s, µs/event, ours peak | HTA s, HTA peak")
    for target in a.scale:
        folder = tmp / f"scale{target}"
        folder.mkdir()
        n = synthesise(data, target, folder / "rank-0.json.gz")
        mb = _decompressed_mb(folder / "rank-0.json.gz")
        o = ours(folder / "rank-0.json.gz", 1, a.parser, a.timeout)
        row = {
            "events": n,
            "json_mb": mb,
            "ours_s": o["seconds"],
            "ours_peak_mb": (o["peak_kb"] - o["base_kb"]) / 1024,
        }
        line = f"   {n:>10,} {mb:8.0f} {o['seconds']:8.2f} {1e6 * o['seconds'] / n:6.2f}  {_mem(o, mb)}"
        if a.hta_python and n <= a.hta_max_events:
            h = hta(a.hta_python, folder, a.timeout)
            row.update(hta_s=h["seconds"], hta_peak_mb=(h["peak_kb"] - h["base_kb"]) / 1024)
            line += f" | HTA {h['seconds']:.2f} s, {_mem(h, mb)}"
        elif a.hta_python:
            line += f" | HTA skipped (over --hta-max-events {a.hta_max_events:,})"
        print(line)
        rows.append(row)
        (folder / "rank-0.json.gz").unlink()
    return rows


def benchmark_result() -> str:
    """The speed figures of the benchmark run recorded with the package (``python -m
    helpers.timeline bench TRACE --hta-python PY --save``), in one paragraph."""
    if not SAVED.is_file():
        return "No benchmark result ships with this copy: run python -m helpers.timeline bench."
    return describe(json.loads(SAVED.read_text(encoding="utf-8")))


def describe(r: dict) -> str:
    """One paragraph from a saved result (see ``--save``)."""
    one = r.get("one_rank", {})
    cores = int(r["machine"].split(", ")[-1].split()[0]) if "cores" in r["machine"] else 1
    busy = ": a busy machine, so the times are noisy" if r["load_before"] >= cores / 2 else ""
    text = (
        f"Measured on {r['date']} ({r['machine']}, load average {r['load_before']:.1f}{busy}) with "
        f"`python -m helpers.timeline bench {r['source']} --hta-python ...`: loading a "
        f"{one.get('events', 0):,}-event GPU trace and computing HTA's temporal breakdown and "
        f"comm/comp overlap took helpers.timeline {one.get('ours_s', float('nan')):.2f} s "
        f"(parser: {r['parser']})"
    )
    if "hta_s" in one:
        text += (
            f" and HTA {one['hta']} {one['hta_s']:.2f} s (fastest of {r['repeat']} interleaved runs "
            f"each), with {'the same' if one['same'] else 'DIFFERENT'} figures; {_ratio_text(one)}"
        )
    ranks = r.get("ranks")
    if ranks and "hta_s" in ranks:
        text += (
            f". A folder of {ranks['ranks']} ranks: {ranks['ours_s']:.2f} s against "
            f"{ranks['hta_s']:.2f} s; {_ratio_text(ranks)}"
        )
    return textwrap.fill(text + ".", 100)

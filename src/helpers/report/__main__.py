"""``python -m helpers.report``: run the capstone and write its report, or show a report.

    python -m helpers.report record --device cpu --out build/capstone        # quick CPU run
    python -m helpers.report record --device cuda --full --out build/gpu9    # GPT-2 small on a GPU
    python -m helpers.report show REPORT_DIR_OR_JSON                          # print its table

``record`` is how the reports in ``helpers/data/capstone_recorded_*.json`` were made.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Sequence

from .document import build_report, read_report
from .provenance import provenance
from .runner import Tuner
from .tuning import baseline_config, tuning_steps


def _load() -> float | None:
    """The 1-minute load average (other programs competing for the CPUs), where the OS has one."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def _record(args: argparse.Namespace) -> int:
    from ..bench import resolve_device

    dev = resolve_device(args.device)
    config = baseline_config(dev, quick=not args.full)
    print(config.describe(), flush=True)
    start, load_before = time.perf_counter(), _load()
    tuner = Tuner(config, quick=not args.full, trace_dir=f"{args.out}/traces")
    rows = [tuner.run_baseline()]
    print(f"  baseline: {rows[0]['step_time_ms']:.2f} ms/step, {rows[0]['bottleneck']}", flush=True)
    for change in tuning_steps(str(dev)):
        if args.only and change.name not in args.only:
            continue
        row = tuner.try_change(change.name)
        print(
            f"  {change.name}: {row['step_time_ms']:.2f} ms/step [{row['step_time_min_ms']:.2f}–"
            f"{row['step_time_max_ms']:.2f}], MFU {row['mfu']:.1%}, {row['bottleneck']}, "
            f"{row['decision']}",
            flush=True,
        )
    recorded = {
        **provenance(
            str(dev), command="python -m helpers.report " + " ".join(sys.argv[1:]), threads=config.threads
        ),
        "where": args.where or f"{platform.node()}, {platform.machine()}",
        "seconds": round(time.perf_counter() - start, 1),
        "load_average_1min": {"start": load_before, "end": _load()},
        "cpu_count": os.cpu_count(),
    }
    report = build_report(tuner.rows, recorded=recorded)
    paths = report.write(args.out)
    print(report.to_markdown())
    print("written:", ", ".join(str(p) for p in paths.values()))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m helpers.report",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="run baseline + every change; write report.md/.json/.png")
    rec.add_argument("--device", default="auto", help="auto | cpu | cuda")
    rec.add_argument("--full", action="store_true", help="the larger configuration (GPT-2 small on a GPU)")
    rec.add_argument("--out", default="build/capstone", help="folder for the report and traces")
    rec.add_argument("--only", nargs="*", help="try only these changes (default: all)")
    rec.add_argument("--where", default="", help="a label for the machine, stored in the report")
    show = sub.add_parser("show", help="print the comparison table of a written report")
    show.add_argument("path")
    args = parser.parse_args(argv)
    try:
        if args.command == "record":
            return _record(args)
        print(read_report(args.path).to_markdown())
        return 0
    except (ValueError, KeyError, FileNotFoundError, RuntimeError) as err:
        print(f"python -m helpers.report: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())

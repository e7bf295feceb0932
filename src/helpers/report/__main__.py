"""``python -m helpers.report``: run the capstone and write its report, or show a report.

    python -m helpers.report record --device cpu --out build/capstone        # quick CPU run
    python -m helpers.report record --device cuda --full --out build/gpu9    # GPT-2 small on a GPU
    python -m helpers.report show REPORT_DIR_OR_JSON                          # print its table
    python -m helpers.report curves                                           # the loss tolerance's basis

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
from .provenance import load_average as _load
from .provenance import provenance
from .runner import Tuner
from .tuning import baseline_config


def _try(tuner: Tuner, name: str, why: str) -> None:
    print(f"  {why}", flush=True)
    row = tuner.try_change(name, why=why)
    print(
        f"  {row['name']}: {row['step_time_ms']:.2f} ms/step [{row['step_time_min_ms']:.2f}–"
        f"{row['step_time_max_ms']:.2f}], MFU {row['mfu']:.1%}, {row['bottleneck']}, "
        f"{row['decision']} ({row['reason']})",
        flush=True,
    )


def _record(args: argparse.Namespace) -> int:
    from ..bench import resolve_device

    dev = resolve_device(args.device)
    config = baseline_config(dev, quick=not args.full)
    print(config.describe(), flush=True)
    start, load_before = time.perf_counter(), _load()
    tuner = Tuner(config, quick=not args.full, trace_dir=f"{args.out}/traces")
    rows = [tuner.run_baseline()]
    print(f"  baseline: {rows[0]['step_time_ms']:.2f} ms/step, {rows[0]['bottleneck']}", flush=True)
    control = tuner.control()
    print(f"  A/A control (baseline against itself): {control['sentence']}", flush=True)
    names = args.only or None
    for _ in range(args.max_changes):
        pick = tuner.next_change() if names is None else ((names.pop(0), "asked for") if names else None)
        if pick is None:
            break
        _try(tuner, *pick)
    for name in args.also or ():
        _try(tuner, name, "asked for after the tuner's rounds, on the tuned configuration: to show its cost")
    recorded = {
        **provenance(
            str(dev), command="python -m helpers.report " + " ".join(sys.argv[1:]), threads=config.threads
        ),
        "where": args.where or f"{platform.node()}, {platform.machine()}",
        "seconds": round(time.perf_counter() - start, 1),
        "load_average_1min": {"start": load_before, "end": _load()},
        "cpu_count": os.cpu_count(),
    }
    report = build_report(
        tuner.rows, recorded=recorded, control=control, memory_budget_mb=config.memory_budget_mb
    )
    paths = report.write(args.out)
    print(report.to_markdown())
    print("written:", ", ".join(str(p) for p in paths.values()))
    return 0


def _curves(args: argparse.Namespace) -> int:
    """Each change's loss-curve gap to the quick CPU baseline, and two that move training (a
    learning rate slipped to 0.3x, another seed): the figures behind ``rules.LOSS_CURVE_SHARE``."""
    from dataclasses import replace

    from . import rules
    from .runner import loss_curve
    from .tuning import apply_change, tuning_steps

    base = replace(baseline_config("cpu", quick=True), data_delay_ms=0.0)  # the sleep changes no loss
    base_row = {"loss_curve": loss_curve(base)}
    tries = [
        (c.name, apply_change(base, c)) for c in tuning_steps("cpu") if c.name != "compile" or args.compile
    ]
    tries += [
        ("lr x0.3 (moves training)", replace(base, lr=base.lr * 0.3)),
        ("seed 1", replace(base, seed=1)),
    ]
    for name, cfg in tries:
        gap, tolerance = rules.loss_gap(base_row, {"loss_curve": loss_curve(cfg)})
        verdict = "moved" if gap > tolerance else "within tolerance"
        print(f"{name:>26}: mean gap {gap:.4f} nats per step, tolerance {tolerance:.4f} -> {verdict}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m helpers.report",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser(
        "record", help="run the baseline, then the changes its profiles call for; write report.md/.json/.png"
    )
    rec.add_argument("--device", default="auto", help="auto | cpu | cuda")
    rec.add_argument("--full", action="store_true", help="the larger configuration (GPT-2 small on a GPU)")
    rec.add_argument("--out", default="build/capstone", help="folder for the report and traces")
    rec.add_argument(
        "--only", nargs="*", help="try these changes, in this order (default: the tuner reads each profile)"
    )
    rec.add_argument("--max-changes", type=int, default=8, help="at most this many rounds (default 8)")
    rec.add_argument("--also", nargs="*", help="changes to try after the rounds, on the tuned configuration")
    rec.add_argument("--where", default="", help="a label for the machine, stored in the report")
    show = sub.add_parser("show", help="print the comparison table of a written report")
    show.add_argument("path")
    curves = sub.add_parser("curves", help="loss-curve gaps of each change against the quick CPU baseline")
    curves.add_argument("--compile", action="store_true", help="also torch.compile (slow to compile)")
    args = parser.parse_args(argv)
    try:
        if args.command == "record":
            return _record(args)
        if args.command == "curves":
            return _curves(args)
        print(read_report(args.path).to_markdown())
        return 0
    except (ValueError, KeyError, FileNotFoundError, RuntimeError) as err:
        print(f"python -m helpers.report: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())

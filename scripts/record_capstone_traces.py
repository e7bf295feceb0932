"""Re-record the profiler traces chapter 9's first exercise reads (``src/helpers/data/capstone_trace_*``).

Each trace is a real ``torch.profiler`` recording of three steady-state training steps of one
capstone configuration, made by ``helpers.report.run_config`` on this machine's CPU:

* ``tiny-baseline`` — the quick baseline (slow DataLoader in the main process);
* ``tiny-workers`` — the same with DataLoader worker processes;
* ``tiny-fused`` — workers and fused AdamW;
* ``tiny-compiled`` — workers, fused AdamW and ``torch.compile``;
* ``wide-batch1`` — a wider model (6 layers, 384 hidden) trained on one sequence of 8 tokens
  and a fast loader: the optimizer's update of every weight dominates the step.

The phases and the bottleneck class of each are printed; ``helpers/data/capstone_recorded_README.md``
lists them. Usage: ``python scripts/record_capstone_traces.py``.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from pathlib import Path

from helpers import models, report, timeline

DATA = Path(__file__).resolve().parents[1] / "src" / "helpers" / "data"


def configs() -> dict[str, report.RunConfig]:
    base = report.baseline_config("cpu", quick=True)
    steps = {c.name: c for c in report.tuning_steps("cpu")}
    workers = report.apply_change(base, steps["workers"])
    fused = report.apply_change(workers, steps["fused"])
    wide = models.GPTConfig(
        vocab_size=256, seq_len=64, d_model=384, n_layers=6, n_heads=6, name="gpt-bytes-wide"
    )
    one_short_sequence = dataclasses.replace(
        base,
        model=wide,
        batch_size=1,
        seq_len=8,
        data_delay_ms=0.0,
        name="wide_batch1",
        change="a wide model, 1 sequence of 8",
    )
    return {
        "tiny-baseline": base,
        "tiny-workers": workers,
        "tiny-fused": fused,
        "tiny-compiled": report.apply_change(fused, steps["compile"]),
        "wide-batch1": one_short_sequence,
    }


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for name, config in configs().items():
            row = report.run_config(config, trace_dir=tmp)
            target = DATA / f"capstone_trace_{name}.json.gz"
            shutil.copyfile(row["trace"], target)
            phases = report.mean_phases(report.step_phases(timeline.load_trace(target)))
            print(
                f"{name}: "
                + ", ".join(f"{k} {v:.2f} ms" for k, v in phases.items())
                + f" -> {report.bottleneck_class(phases)}",
                flush=True,
            )


if __name__ == "__main__":
    main()

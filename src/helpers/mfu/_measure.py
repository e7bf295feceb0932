"""Measured MFU: peaks, the report, a timed training run, sequence sweeps."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from .. import hardware, models
from .._validate import flag as _flag
from ..bench import Measurement, measure, resolve_device, synchronize

# --------------------------------------------------------------------------- formulas
from ._counting import count_flops
from ._formulas import dense_model_flops, hfu, mfu, model_flops_per_step, throughput, tokens_per_step

# --------------------------------------------------------------------------- peaks and reports


@dataclass(frozen=True)
class Peak:
    """The per-device peak an MFU is divided by, and where it came from."""

    flops: float
    dtype: str
    kind: str  # "datasheet" (dense, from hardware.DEVICES) or "measured" (achieved GEMM FLOP/s)
    source: str
    spread: float | None = None  # (max - min) / median of a measured peak's runs

    def describe(self) -> str:
        what = "datasheet dense peak" if self.kind == "datasheet" else "MEASURED GEMM FLOP/s (achieved)"
        return f"{self.dtype} {what} {self.flops / 1e12:.4g} TFLOP/s per device — {self.source}"


def device_peak(device: str | torch.device = "auto", dtype: str = "fp32", quick: bool = True) -> Peak:
    """The peak for MFU on ``device``: the datasheet dense peak of a known GPU, else measured.

    A CPU (or a GPU missing from the table) has no datasheet figure here, so the peak is the
    FLOP/s of a large GEMM measured now with :func:`helpers.hardware.measure_device` (its
    fastest timed run) — an achieved figure, and an MFU against it says how close the step
    came to this machine's best GEMM.
    """
    _flag(quick=quick)
    dev = resolve_device(device)
    key = hardware.dtype_key(dtype)
    spec = hardware.detect_gpu() if dev.type == "cuda" else None
    if spec is not None and key in spec.peak_flops:
        return Peak(spec.peak(key), key, "datasheet", f"{spec.name}: {spec.source}")
    measured = hardware.measure_device(dev, dtypes=[key], quick=quick)
    run = measured.gemm_runs[key]
    # A peak is a best case: measure_device keeps the fastest timed run, since other processes
    # only ever slow a run down.
    median = 2 * measured.gemm_n**3 / run.median
    return Peak(
        measured.gemm_flops[key],
        key,
        "measured",
        f"fastest of {len(run.samples)} timed {measured.gemm_n}³ GEMMs on {measured.name} "
        f"(median {median / 1e12:.4g} TFLOP/s, spread {run.spread:.0%})",
        run.spread,
    )


@dataclass
class MFUReport:
    """A short performance report (experiment, hardware, config, throughput, MFU), from numbers."""

    experiment: str
    hardware: str
    peak: Peak
    num_devices: int
    config: str
    parallel: str
    step_time_s: float
    tokens_per_step: int
    model_flops_per_step: float
    executed_flops_per_step: float | None = None
    step_time_note: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens_per_step / self.step_time_s

    @property
    def mfu(self) -> float:
        return mfu(self.model_flops_per_step, self.step_time_s, self.num_devices, self.peak.flops)

    @property
    def hfu(self) -> float | None:
        if self.executed_flops_per_step is None:
            return None
        return hfu(self.executed_flops_per_step, self.step_time_s, self.num_devices, self.peak.flops)

    def format(self) -> str:
        lines = [
            f"experiment: {self.experiment}",
            f"hardware: {self.num_devices}x {self.hardware}, {self.peak.describe()}",
            f"config: {self.config}",
            f"parallel: {self.parallel}",
            "",
            "throughput:",
            f"  step_time_median: {self.step_time_s:.4g} s{self.step_time_note}",
            f"  tokens_per_step: {self.tokens_per_step}",
            f"  tokens_per_second: {self.tokens_per_second:,.0f}",
            f"  achieved_model_tflops: {self.model_flops_per_step / self.step_time_s / 1e12:.4g}",
            f"  estimated_mfu: {self.mfu:.1%}",
        ]
        if self.hfu is not None:
            lines.append(f"  hfu: {self.hfu:.1%} (FLOPs counted by FlopCounterMode)")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def example_report() -> MFUReport:
    """A worked example (invented numbers): GPT 125M, 2x A100 (bf16 dense 312 TFLOP/s),
    64 × 1024 tokens per step, 0.42 s per step."""
    a100 = hardware.get_device("A100 80GB SXM")
    tokens = tokens_per_step(64, 1024)
    return MFUReport(
        "gpt-125m-baseline",
        "A100-80GB, nvlink",
        Peak(a100.peak("bf16"), "bf16", "datasheet", a100.source),
        2,
        "layers=12, hidden=768, heads=12, seq=1024, global_batch=64",
        "dp=2, tp=1, pp=1, activation_checkpoint=off",
        0.42,
        tokens,
        dense_model_flops(125e6, tokens),
        notes=["model FLOPs = 6·N·tokens (a rough estimate)", "example numbers, not a measurement"],
    )


NOISY = 0.5  # a (max - min) / median spread above this makes a timing worth a warning


@dataclass
class TrainingRun:
    """A measured training step of the course model, with its MFU and HFU."""

    config: models.GPTConfig
    batch_size: int
    seq_len: int
    device: str
    autocast: str | None
    step: Measurement
    model_flops_per_step: float
    executed_flops_per_step: int
    peak: Peak
    device_name: str

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.seq_len

    @property
    def tokens_per_second(self) -> float:
        return self.tokens_per_step / self.step.median

    @property
    def mfu(self) -> float:
        return mfu(self.model_flops_per_step, self.step.median, 1, self.peak.flops)

    @property
    def hfu(self) -> float:
        return hfu(self.executed_flops_per_step, self.step.median, 1, self.peak.flops)

    def report(self) -> MFUReport:
        c = self.config
        spread = (
            f" (min {self.step.min:.4g}, max {self.step.max:.4g}, n={len(self.step.samples)}; "
            f"first call {self.step.first_call:.4g} s, not included)"
        )
        return MFUReport(
            f"{c.name}-baseline",
            self.device_name,
            self.peak,
            1,
            f"layers={c.n_layers}, hidden={c.d_model}, heads={c.n_heads}, seq={self.seq_len}, "
            f"global_batch={self.batch_size}, compute={self.autocast or 'fp32'}",
            "dp=1, tp=1, pp=1, activation_checkpoint=off",
            self.step.median,
            self.tokens_per_step,
            self.model_flops_per_step,
            self.executed_flops_per_step,
            spread,
            notes=[
                "model FLOPs = (6·N + 12·L·H·Q·T)·tokens, N excludes the position table",
                "synthetic tokens; AdamW step included in the step time",
                *self.warnings(),
            ],
        )

    def warnings(self) -> list[str]:
        """Why this MFU may not be trustworthy (large run-to-run spread), if it may not."""
        out = []
        if self.step.spread > NOISY:
            out.append(
                f"step times spread {self.step.spread:.0%} around the median: a busy machine? "
                "rerun before trusting the third digit"
            )
        if self.mfu > 1:
            out.append(
                "MFU above 100% is impossible: the peak was measured low (a busy machine?) "
                "or the FLOPs are overcounted"
            )
        if self.peak.spread is not None and self.peak.spread > NOISY:
            out.append(
                f"the measured peak spread {self.peak.spread:.0%}: MFU is only as good as its "
                "denominator; rerun on a quiet machine"
            )
        return out


def measure_training(
    config: str | models.GPTConfig | None = None,
    batch_size: int = 8,
    seq_len: int | None = None,
    device: str | torch.device = "auto",
    autocast: str | None = "auto",
    warmup: int = 3,
    iters: int = 10,
    peak: Peak | None = None,
    quick: bool = True,
) -> TrainingRun:
    """Time the course model's training step on ``device``; count its FLOPs; compute MFU and HFU.

    ``autocast="auto"`` trains in bf16 autocast on a GPU and in fp32 on a CPU; the peak is
    that of the matching dtype (datasheet on a known GPU, measured on a CPU).
    """
    _flag(quick=quick)
    dev = resolve_device(device)
    cfg = models.course_config(dev, quick) if config is None else models.get_config(config)
    seq_len = cfg.seq_len if seq_len is None else seq_len
    if autocast == "auto":
        autocast = "bf16" if dev.type == "cuda" else None
    amp = hardware.DTYPES[hardware.dtype_key(autocast)] if autocast else None
    model = models.build_model(cfg, dev)
    batch = models.make_batch(cfg, batch_size, seq_len, dev)
    step_fn = models.make_train_step(model, batch, autocast_dtype=amp)
    run = measure(step_fn, warmup=warmup, iters=iters, device=dev)
    executed = count_flops(step_fn)
    if peak is None:
        peak = device_peak(dev, autocast or "fp32", quick=quick)
    name = (
        torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"CPU ({torch.get_num_threads()} threads)"
    )
    return TrainingRun(
        cfg,
        batch_size,
        seq_len,
        str(dev),
        autocast,
        run,
        model_flops_per_step(cfg, batch_size, seq_len),
        executed,
        peak,
        name,
    )


def sweep_seq_lens(
    seq_lens: Sequence[int],
    tokens_per_batch: int,
    config: str | models.GPTConfig,
    device: str | torch.device = "auto",
    iters: int = 10,
) -> list[dict[str, Any]]:
    """Time a training step at several sequence lengths holding tokens per step fixed.

    The lengths are timed in ``iters`` rounds: each round times one sample of every length, in
    an order that rotates from round to round, so a change in the machine's load hits every
    length alike (each model is warmed up first, never timed). A sample runs enough steps to
    last at least 20 ms (sized from the fastest warm-up step), as in
    :func:`helpers.bench.compare_speed`. Returns one row per length: seq_len, batch_size,
    step_time_s (median), step_time_min_s, step_time_max_s, step_times_s (one per round),
    steps_per_sample, threads and the three rates at the median.
    Read which length is faster with :func:`compare_sweep`, not from the medians alone.
    """
    from ..bench._speed import _MIN_SAMPLE_S

    if isinstance(iters, bool) or not isinstance(iters, int) or iters < 3:
        raise ValueError(f"iters must be a whole number of rounds >= 3, got {iters!r}")
    dev = resolve_device(device)
    cfg = models.get_config(config)
    steps, batches = [], []
    for s in seq_lens:
        batch_size = max(1, tokens_per_batch // s)
        model = models.build_model(cfg, dev)
        steps.append(models.make_train_step(model, models.make_batch(cfg, batch_size, s, dev)))
        batches.append(batch_size)
    numbers = []
    for step in steps:  # warm-up: allocator, caches, the first call's set-up; never timed
        warm = measure(step, warmup=1, iters=2, device=dev)
        numbers.append(max(1, math.ceil(_MIN_SAMPLE_S / max(min(warm.samples), 1e-9))))
    times: list[list[float]] = [[] for _ in steps]
    for r in range(iters):
        order = [(r + k) % len(steps) for k in range(len(steps))]
        for k in order:
            synchronize(dev)
            start = time.perf_counter()
            for _ in range(numbers[k]):
                steps[k]()
            synchronize(dev)
            times[k].append((time.perf_counter() - start) / numbers[k])
    rows = []
    for s, batch_size, samples, number in zip(seq_lens, batches, times, numbers, strict=True):
        t = statistics.median(samples)
        rows.append(
            {
                "seq_len": s,
                "batch_size": batch_size,
                "step_time_s": t,
                "step_time_min_s": min(samples),
                "step_time_max_s": max(samples),
                "step_times_s": samples,
                "steps_per_sample": number,
                "threads": torch.get_num_threads(),
                **throughput(t, batch_size, s),
            }
        )
    return rows


def compare_sweep(rows: Sequence[dict[str, Any]]) -> str:
    """Sentences on the sweep of :func:`sweep_seq_lens`: each length against the first one (a
    pair chosen before the timing, not the best and worst the samples happen to show), as a
    speed-up of tokens/s paired round by round, its 95 % interval and the verdict (faster /
    slower / within noise), one line each."""
    from ..bench import interval, verdict_of

    if len(rows) < 2 or any("step_times_s" not in r for r in rows):
        raise ValueError("give the rows of one sweep_seq_lens run (two lengths or more)")
    tokens = [r["seq_len"] * r["batch_size"] for r in rows]
    first = rows[0]
    lines = []
    for i in range(1, len(rows)):
        ratios = [
            (tokens[i] / t) / (tokens[0] / t0)
            for t, t0 in zip(rows[i]["step_times_s"], first["step_times_s"], strict=True)
        ]
        mid, low, high = interval(ratios)
        verdict = verdict_of(low, high, pairs=len(ratios))
        a, b = f"seq {rows[i]['seq_len']}", f"seq {first['seq_len']}"
        head = {
            "faster": f"{a} trains faster than {b}",
            "slower": f"{a} trains slower than {b}",
            "within noise": f"no difference between {a} and {b} beyond the noise",
        }[verdict]
        lines.append(
            f"{head}: tokens/s {mid:.2f}x (95 % interval {low:.2f}x to {high:.2f}x) over {len(ratios)} rounds"
        )
    threads = first.get("threads")
    tail = f" ({threads} CPU thread{'s' * (threads != 1)})" if threads else ""
    return "\n".join(lines) + tail

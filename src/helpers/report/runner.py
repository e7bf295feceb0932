"""Measure one configuration end to end, and try the changes one at a time.

:func:`run_config` trains the configuration from a fixed seed and returns one row of the
report: step time (median and range of timed windows), samples/s and tokens/s, memory (CUDA
peak allocated, or bytes saved for backward), loss after N steps, FLOPs, MFU / HFU, and the
phases and bottleneck class read from a profiler trace of a few more steps.

Measurement protocol: warm-up steps are never timed (the first one,
where compilation happens, is reported apart); each timed sample is a window of several steps
bracketed by device synchronisation, so a run without per-step syncs is timed as it runs; the
profiler runs after the timed steps, never during them.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from .. import mfu, models, nvtx, timeline
from .._validate import flag as _flag
from .._validate import unknown
from ..bench import SpeedComparison, compare_windows, resolve_device, synchronize
from . import corpus, phases, rules, tuning
from .tuning import RunConfig


def _device_name(dev: torch.device) -> str:
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    n = torch.get_num_threads()
    return f"CPU ({n} thread{'s' if n > 1 else ''} of {os.cpu_count()} cores)"


def _reset_peak(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)


def _peak_mib(dev: torch.device) -> float | None:
    """CUDA peak allocated memory in MiB; None on a CPU, where it is not measured."""
    return torch.cuda.max_memory_allocated(dev) / 2**20 if dev.type == "cuda" else None


def _activities(dev: torch.device) -> list[ProfilerActivity]:
    return [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])


_PEAKS: dict[tuple[str, str, bool, int], mfu.Peak] = {}


def peak_for(dev: torch.device, precision: str, quick: bool = True) -> mfu.Peak:
    """The MFU denominator for ``precision`` on ``dev`` (datasheet on a known GPU, measured
    GEMM FLOP/s otherwise, with the current number of CPU threads), measured once per process."""
    _flag(quick=quick)
    key = (str(dev), precision, quick, torch.get_num_threads())
    if key not in _PEAKS:
        _PEAKS[key] = mfu.device_peak(dev, precision, quick=quick)
    return _PEAKS[key]


@dataclass
class Trainer:
    """The model, optimizer and data of one configuration, and its training step."""

    config: RunConfig
    device: torch.device
    model: models.TinyGPT
    train_model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    batches: Iterator
    losses: list = field(default_factory=list)

    @classmethod
    def build(cls, config: RunConfig, total_steps: int) -> Trainer:
        dev = resolve_device(config.device)
        model = models.build_model(config.model, dev, seed=config.seed)
        if config.checkpointing:
            tuning.apply_checkpointing(model)
        train_model = tuning.compile_model(model) if config.compile else model
        optimizer = tuning.make_optimizer(model, config.lr, config.fused_optimizer)
        per_sample = config.data_delay_ms / config.batch_size
        dataset = corpus.make_dataset(config.seq_len, per_sample)
        loader = corpus.make_loader(
            dataset,
            config.batch_size,
            config.batch_size * total_steps,
            workers=config.workers,
            pin_memory=config.pin_memory,
            seed=config.seed,
            prefetch_factor=config.prefetch_factor,
        )
        return cls(config, dev, model, train_model, optimizer, corpus.batches(loader))

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = next(self.batches)
        blocking = not self.config.pin_memory
        return x.to(self.device, non_blocking=not blocking), y.to(self.device, non_blocking=not blocking)

    def step(self, x: torch.Tensor, y: torch.Tensor, ranges: bool = False) -> torch.Tensor:
        _flag(ranges=ranges)
        mark = nvtx.annotate if ranges else _no_range
        with mark("forward"), tuning.autocast_context(self.config.precision, self.device):
            loss = self.train_model(x, y)
        with mark("backward"):
            loss.backward()
        with mark("optimizer"):
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        loss = loss.detach()
        if self.config.sync_every_step:
            self.losses.append(loss.item())  # the common habit: a host-device sync every step
        else:
            self.losses.append(loss)  # stays on the device
        return loss

    def loss_after(self, last: int = 5) -> float:
        """Mean loss of the last ``last`` steps, read back once."""
        tail = self.losses[-last:]
        if tail and isinstance(tail[0], torch.Tensor):
            return torch.stack(tail).float().mean().item()
        return statistics.fmean(tail)


class _no_range:  # noqa: N801
    def __init__(self, name: str) -> None:
        pass

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def _timed_windows(trainer: Trainer) -> tuple[list[float], list[float], float | None]:
    """Step-time samples (s per step, one per window), host time waiting for data per step,
    and the CUDA peak over the timed steps."""
    cfg, dev = trainer.config, trainer.device
    _reset_peak(dev)
    samples, data_wait = [], []
    for _ in range(cfg.windows):
        synchronize(dev)
        start = time.perf_counter()
        for _ in range(cfg.steps_per_window):
            t = time.perf_counter()
            x, y = trainer.next_batch()
            data_wait.append(time.perf_counter() - t)
            trainer.step(x, y)
        synchronize(dev)
        samples.append((time.perf_counter() - start) / cfg.steps_per_window)
    return samples, data_wait, _peak_mib(dev)


def _trace(trainer: Trainer, folder: Path) -> Path:
    """Profile ``trace_steps`` steady-state steps (one more step warms the profiler up)."""
    cfg, dev = trainer.config, trainer.device
    path = folder / f"{cfg.name}_trace.json.gz"
    # Kineto logs every profiler start / stop to stderr unless told otherwise; it reads this
    # when the profiler is first used in the process. A level the user set is kept.
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    with profile(
        activities=_activities(dev), schedule=schedule(wait=0, warmup=1, active=cfg.trace_steps, repeat=1)
    ) as prof:
        for _ in range(1 + cfg.trace_steps):
            with nvtx.annotate("dataloader"):
                x, y = trainer.next_batch()
            trainer.step(x, y, ranges=True)
            prof.step()
    synchronize(dev)
    prof.export_chrome_trace(str(path))
    return path


def _memory(config: RunConfig, trainer: Trainer) -> int:
    """Bytes saved for backward by one forward pass of the trained model (then discarded)."""
    x, y = trainer.next_batch()
    with tuning.autocast_context(config.precision, trainer.device):
        loss, nbytes = tuning.saved_bytes(lambda: trainer.train_model(x, y))
    del loss
    return nbytes


def executed_flops(config: RunConfig) -> int:
    """FLOPs one training step executes (FlopCounterMode), counted on an eager copy of the
    configured model: compilation fuses kernels but keeps the arithmetic; checkpointing's
    recomputed forward is counted."""
    dev = resolve_device(config.device)
    model = models.build_model(config.model, dev, seed=config.seed)
    if config.checkpointing:
        tuning.apply_checkpointing(model)
    batch = models.make_batch(config.model, config.batch_size, config.seq_len, dev)
    step = models.make_train_step(model, batch, config.lr)
    return mfu.count_flops(step)


@contextlib.contextmanager
def _threads(n: int | None) -> Iterator[None]:
    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def run_config(config: RunConfig, quick: bool = True, trace_dir: str | Path | None = None) -> dict[str, Any]:
    """Measure ``config``; return its report row (plain data: measured numbers, then the
    derived ones of :func:`rules.derive`)."""
    _flag(quick=quick)
    with _threads(config.threads):
        return _run(config, quick, trace_dir)


def _run(config: RunConfig, quick: bool, trace_dir: str | Path | None) -> dict[str, Any]:
    dev = resolve_device(config.device)
    torch.manual_seed(config.seed)
    extra = 2 + 1 + config.trace_steps  # memory probe batch, profiler warm-up, traced steps
    trainer = Trainer.build(config, config.loss_steps + extra)
    first = time.perf_counter()
    for i in range(config.warmup):
        trainer.step(*trainer.next_batch())
        if i == 0:
            synchronize(dev)
            first = time.perf_counter() - first
    samples, data_wait, peak = _timed_windows(trainer)
    loss = trainer.loss_after()
    saved = _memory(config, trainer)
    folder = Path(trace_dir) if trace_dir else Path(tempfile.mkdtemp(prefix="capstone_"))
    folder.mkdir(parents=True, exist_ok=True)
    trace_path = _trace(trainer, folder)
    trace = timeline.read_trace(trace_path)
    per_step = phases.step_phases(trace)
    trainer.batches = iter(())  # let worker processes go
    peak_flops = peak_for(dev, config.precision, quick)
    row = {
        "name": config.name,
        "change": config.change,
        "device": str(dev),
        "device_name": _device_name(dev),
        "precision": config.precision,
        "num_devices": 1,
        "batch_size": config.batch_size,
        "seq_len": config.seq_len,
        "step_time_ms": statistics.median(samples) * 1e3,
        "step_time_min_ms": min(samples) * 1e3,
        "step_time_max_ms": max(samples) * 1e3,
        "step_time_samples_ms": [s * 1e3 for s in samples],
        "first_step_ms": first * 1e3,
        "data_wait_ms": statistics.fmean(data_wait) * 1e3,
        "peak_mem_mb": peak,
        "saved_mb": saved / 2**20,
        "loss": loss,
        "loss_steps": config.loss_steps,
        "model_flops": mfu.model_flops_per_step(config.model, config.batch_size, config.seq_len),
        "executed_flops": executed_flops(config),
        "peak_flops": peak_flops.flops,
        "peak_kind": peak_flops.kind,
        "peak_source": peak_flops.source,
        "peak_spread": peak_flops.spread,
        "phases_ms": phases.mean_phases(per_step),
        "phase_steps_ms": per_step,
        "top_ops": [list(op) for op in phases.top_operators(trace)],
        "device_idle_share": phases.device_idle_share(trace),
        "trace": str(trace_path),
        "config": config.settings(),
    }
    return rules.derive(row)


def compare_configs(
    old: RunConfig,
    new: RunConfig,
    quick: bool = True,
    *,
    min_pairs: int = 10,
    max_pairs: int = 40,
    max_seconds: float | None = None,
    clock: Callable[[], float] | None = None,
) -> SpeedComparison:
    """Is ``new`` faster than ``old``? Both are built in this process and timed in interleaved
    windows of ``new.steps_per_window`` steps (3 when ``quick``; data loading included), the order alternating
    from pair to pair, at least ``min_pairs`` windows each, until the interval is narrow or the
    time budget is spent (3 s quick, 30 s full). Warm-up steps are never timed. Both sides run
    with ``new.threads`` CPU threads.

    One caveat of interleaving: while one side runs, the other side's loader workers fill
    their queue, so each window starts with up to ``workers × prefetch_factor`` batches ready.
    With workers, a window therefore lasts at least ``rules.QUEUE_RUNS`` times that queue, so
    a loader slower than the step still shows in the verdict (:func:`rules.flags` flags a
    shorter one)."""
    _flag(quick=quick)
    # quick: windows of 3 steps, so that 10 pairs of a slow change (bf16 on a CPU) stay in budget
    steps = min(3, new.steps_per_window) if quick else new.steps_per_window
    queue = max(cfg.workers * cfg.prefetch_factor for cfg in (old, new))
    steps = max(steps, rules.QUEUE_RUNS * queue)
    budget = max_seconds if max_seconds is not None else (3.0 if quick else 30.0)
    total = max(old.warmup, new.warmup) + (max_pairs + 2) * steps
    with _threads(new.threads):
        sides = []
        for cfg in (old, new):
            torch.manual_seed(cfg.seed)
            trainer = Trainer.build(cfg, total)
            for _ in range(cfg.warmup):
                trainer.step(*trainer.next_batch())
            sides.append(trainer)

        def window(trainer: Trainer) -> Callable[[], None]:
            def run() -> None:
                for _ in range(steps):
                    trainer.step(*trainer.next_batch())

            return run

        try:
            return compare_windows(
                window(sides[0]),
                window(sides[1]),
                steps=steps,
                device=new.device,
                threads=new.threads,
                min_pairs=min_pairs,
                max_pairs=max_pairs,
                max_seconds=budget,
                names=(old.name, new.name),
                clock=clock,
            )
        finally:
            for trainer in sides:
                trainer.batches = iter(())  # let worker processes go


def speed_summary(speed: SpeedComparison) -> dict[str, Any]:
    """A comparison as plain data for a report row."""
    return {
        "speedup": speed.speedup,
        "low": speed.low,
        "high": speed.high,
        "verdict": speed.verdict,
        "pairs": speed.pairs,
        "threads": speed.threads,
        "stopped": speed.stopped,
        "window_steps": speed.meta.get("steps"),
        "sentence": str(speed),
    }


class Tuner:
    """The tuning loop: a fixed baseline, then one change at a time, each tried on the
    configuration kept so far, measured the same way, and kept or reverted by
    :func:`rules.decide`. "Faster" is the verdict of :func:`compare_configs`: the change against
    the configuration it was tried on, in interleaved windows in one process. ``runner`` and
    ``comparer`` replace the measurement (tests pass recorded or constructed numbers)."""

    def __init__(
        self,
        baseline: RunConfig,
        quick: bool = True,
        trace_dir: str | Path | None = None,
        runner: Callable[..., dict[str, Any]] | None = None,
        comparer: Callable[..., SpeedComparison] | None = None,
    ) -> None:
        self.baseline_config = self.current = baseline
        self.quick = quick
        self.trace_dir = Path(trace_dir) if trace_dir else Path(tempfile.mkdtemp(prefix="capstone_"))
        self._run = runner or run_config
        self._compare = comparer or compare_configs
        self.rows: list[dict[str, Any]] = []
        self.kept_row: dict[str, Any] | None = None
        self.changes = {c.name: c for c in tuning.tuning_steps(str(baseline.device))}

    def run_baseline(self) -> dict[str, Any]:
        row = self._run(self.baseline_config, quick=self.quick, trace_dir=self.trace_dir)
        row = rules.derive(row, baseline=row)
        row["decision"] = "baseline"
        self.rows, self.kept_row = [row], row
        return row

    def try_change(self, name: str) -> dict[str, Any]:
        """Apply change ``name`` to the current configuration, measure, decide."""
        kept = self.kept_row
        if not self.rows or kept is None:
            raise RuntimeError("run the baseline first: tuner.run_baseline()")
        if name not in self.changes:
            raise unknown("change", name, self.changes)
        config = tuning.apply_change(self.current, self.changes[name])
        row = self._run(config, quick=self.quick, trace_dir=self.trace_dir)
        row["speed"] = speed_summary(self._compare(self.current, config, self.quick))
        row["tried_on"] = kept["name"]
        row = rules.derive(
            row, baseline=self.rows[0], previous=kept, memory_budget_mb=self.baseline_config.memory_budget_mb
        )
        self.rows.append(row)
        if row["decision"] == "keep":  # a reverted change leaves the current configuration as it was
            self.current, self.kept_row = config, row
        return row

    @property
    def tuned(self) -> dict[str, Any]:
        """The row of the configuration kept at the end."""
        if self.kept_row is None:
            raise RuntimeError("run the baseline first: tuner.run_baseline()")
        return self.kept_row

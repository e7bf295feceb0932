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
from dataclasses import dataclass, field, replace
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

    def loss_curve(self) -> list[float]:
        """The loss of every step trained so far, read back once."""
        if self.losses and isinstance(self.losses[0], torch.Tensor):
            return torch.stack(self.losses).float().tolist()
        return [float(v) for v in self.losses]

    def loss_after(self, last: int = rules.LOSS_CURVE_TAIL) -> float:
        """Mean loss of the last ``last`` steps, read back once."""
        return statistics.fmean(self.loss_curve()[-last:])


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
    n = 2
    while path.exists():  # a change tried again keeps its earlier trace
        path, n = folder / f"{cfg.name}-{n}_trace.json.gz", n + 1
    # Kineto logs every profiler start / stop to stderr unless told otherwise; it reads this
    # when the profiler is first used in the process. A level the user set is kept.
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    with profile(
        activities=_activities(dev),
        schedule=schedule(wait=0, warmup=1, active=cfg.trace_steps, repeat=1),
    ) as prof:
        for _ in range(1 + cfg.trace_steps):
            with nvtx.annotate("dataloader"):
                x, y = trainer.next_batch()
            trainer.step(x, y, ranges=True)
            prof.step()
    synchronize(dev)
    prof.export_chrome_trace(str(path))
    return path


def _shapes(trainer: Trainer) -> Path:
    """One more step profiled with the operators' shapes (``record_shapes=True``), kept apart from
    the timed trace because recording shapes slows each operator down (about 1 ms in 9 on the
    quick CPU step): its shapes give the matrix products' FLOPs and bytes, not their times."""
    with profile(activities=_activities(trainer.device), record_shapes=True) as prof:
        with torch.profiler.record_function("ProfilerStep#0"):
            trainer.step(*trainer.next_batch())
        synchronize(trainer.device)
    fd, name = tempfile.mkstemp(prefix="capstone_shapes_", suffix=".json")
    os.close(fd)
    prof.export_chrome_trace(name)
    return Path(name)


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
    extra = 3 + 1 + config.trace_steps  # memory probe batch, shapes step, profiler warm-up, traced steps
    trainer = Trainer.build(config, config.loss_steps + extra)
    first = time.perf_counter()
    for i in range(config.warmup):
        trainer.step(*trainer.next_batch())
        if i == 0:
            synchronize(dev)
            first = time.perf_counter() - first
    samples, data_wait, peak = _timed_windows(trainer)
    curve = trainer.loss_curve()
    loss = trainer.loss_after()
    saved = _memory(config, trainer)
    folder = Path(trace_dir) if trace_dir else Path(tempfile.mkdtemp(prefix="capstone_"))
    folder.mkdir(parents=True, exist_ok=True)
    trace_path = _trace(trainer, folder)
    trace = timeline.read_trace(trace_path)
    per_step = phases.step_phases(trace)
    top = phases.top_operators(trace)
    shapes_path = _shapes(trainer)
    costs = phases.operator_costs(timeline.read_trace(shapes_path, keep_args=True), [n for n, _ in top])
    shapes_path.unlink(missing_ok=True)
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
        "loss_curve": curve,
        "model_flops": mfu.model_flops_per_step(config.model, config.batch_size, config.seq_len),
        "executed_flops": executed_flops(config),
        "peak_flops": peak_flops.flops,
        "peak_kind": peak_flops.kind,
        "peak_source": peak_flops.source,
        "peak_spread": peak_flops.spread,
        "phases_ms": phases.mean_phases(per_step),
        "phase_steps_ms": per_step,
        "top_ops": [list(op) for op in top],
        "op_costs": costs,
        "device_idle_share": phases.device_idle_share(trace),
        "trace": str(trace_path),
        "config": config.settings(),
    }
    return rules.derive(row)


def loss_curve(config: RunConfig) -> list[float]:
    """The per-step loss of ``config`` over its warm-up and timed steps, trained from its seed on
    the same batches as a measured run, with no timing and no profiler: what :func:`rules.loss_gap`
    compares (for a change you want to check without measuring its speed)."""
    with _threads(config.threads):
        torch.manual_seed(config.seed)
        trainer = Trainer.build(config, config.loss_steps)
        try:
            for _ in range(config.loss_steps):
                trainer.step(*trainer.next_batch())
            return trainer.loss_curve()
        finally:
            trainer.batches = iter(())  # let worker processes go


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
    windows of ``new.steps_per_window`` steps (3 when ``quick``; data loading included), the
    order alternating from pair to pair, at least ``min_pairs`` windows each, until the interval
    is narrow or the wall-clock budget is spent (12 s quick, 60 s full; no pair starts that would
    end past it). Warm-up steps are never timed. Both sides run with ``new.threads`` CPU threads.

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
    # quick: 12 s, room for 10 pairs of the baseline's 24-step windows (loader queue) on a 2-core CPU
    budget = max_seconds if max_seconds is not None else (12.0 if quick else 60.0)
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
    :func:`rules.decide`. :meth:`next_change` picks each change from the kept configuration's
    profile (the fix for its bottleneck); :meth:`run` does the rounds; :meth:`control` times the
    baseline against itself (the report's A/A row). "Faster" is the verdict of
    :func:`compare_configs`: the change against the configuration it was tried on, in interleaved
    windows in one process. ``runner`` and
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
        self.control_row: dict[str, Any] | None = None
        self.changes = {c.name: c for c in tuning.tuning_steps(str(baseline.device))}

    def run_baseline(self) -> dict[str, Any]:
        row = self._run(self.baseline_config, quick=self.quick, trace_dir=self.trace_dir)
        row = rules.derive(row, baseline=row)
        row["decision"] = "baseline"
        self.rows, self.kept_row = [row], row
        return row

    def next_change(self) -> tuple[str, str] | None:
        """(change, why) for the next round, read from the kept configuration's own profile: the
        first of :func:`rules.next_actions_for` (checkpointing when memory binds, then the fixes
        of the bottleneck the profile shows), or ``None`` when nothing is left to try."""
        kept = self.tuned
        budget = self.baseline_config.memory_budget_mb
        p, label = kept["phases_ms"], kept["bottleneck"]
        parts = ", ".join(f"{k} {p[k]:.2f}" for k in rules.PHASES)
        left = rules.next_actions_for(self.rows, budget)
        if left:
            if rules.over_budget(kept, budget):
                why = f"{kept['name']} needs {rules.memory_mb(kept):.0f} MiB, over the {budget:g} MiB budget"
            else:
                why = f"{kept['name']} is {label} (ms per step: {parts})"
        else:
            left = rules.next_actions_for(self.rows, budget, beyond_bottleneck=True)
            if not left:
                return None
            why = (
                f"{kept['name']} is {label} and its fixes were tried; the next largest part of the step "
                f"(ms per step: {parts})"
            )
        name = left[0]
        again = any(r["name"] == name for r in self.rows)
        return name, f"{why}: try {name}" + (" again, on a configuration that has changed" if again else "")

    def run(self, max_changes: int = 8) -> list[dict[str, Any]]:
        """Rounds of :meth:`next_change` and :meth:`try_change` until nothing is left to try (at
        most ``max_changes``); each kept change is profiled again, so the next round reads the new
        configuration's profile. The rows tried, each with its ``why``."""
        rows = []
        for _ in range(max_changes):
            pick = self.next_change()
            if pick is None:
                break
            name, why = pick
            rows.append(self.try_change(name, why=why))
        return rows

    def control(self) -> dict[str, Any]:
        """An A/A comparison: the baseline against an identical copy of itself, timed like every
        change. On a machine whose noise the verdict handles it says "within noise"; anything else
        says how far to trust this run's verdicts. Kept in :attr:`control_row` for the report."""
        twin = replace(self.baseline_config, name=f"{self.baseline_config.name} (copy)")
        speed = self._compare(self.baseline_config, twin, self.quick)
        self.control_row = speed_summary(speed)
        return self.control_row

    def try_change(self, name: str, why: str = "asked for") -> dict[str, Any]:
        """Apply change ``name`` to the current configuration, measure, decide. ``why``: the reason
        it was tried, kept with the row."""
        kept = self.kept_row
        if not self.rows or kept is None:
            raise RuntimeError("run the baseline first: tuner.run_baseline()")
        if name not in self.changes:
            raise unknown("change", name, self.changes)
        config = tuning.apply_change(self.current, self.changes[name])
        row = self._run(config, quick=self.quick, trace_dir=self.trace_dir)
        row["speed"] = speed_summary(self._compare(self.current, config, self.quick))
        row["tried_on"] = kept["name"]
        row["why"] = why
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

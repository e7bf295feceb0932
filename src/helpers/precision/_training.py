"""Mixed precision in a training step: which ops autocast runs in which dtype, fp16 gradient
underflow and the loss scaler, fp32 vs autocast loss curves, and the measured speed-up of
bf16 placed on the roofline."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .. import hardware, i18n, mfu, models
from .._validate import count, positive
from .._validate import flag as _flag
from ..bench import SpeedComparison, compare_speed, resolve_device
from ..i18n import text, tr
from ._autocast import autocast_context, cuda_autocast_lists, cuda_autocast_policy

#: Ops that only change a tensor's view or bookkeeping: left out of the autocast table.
_VIEW_OPS = {
    "view",
    "t",
    "transpose",
    "split",
    "detach",
    "_unsafe_view",
    "reshape",
    "expand",
    "permute",
    "unsqueeze",
    "squeeze",
    "slice",
    "select",
    "alias",
    "clone",
    "arange",
    "lift_fresh",
    "_to_copy",
    "as_strided",
}


def _short(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


class _DtypeRecorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[tuple[str, tuple[str, ...], tuple[str, ...]], int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name not in _VIEW_OPS:
            ins = tuple(
                _short(a.dtype) for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()
            )
            outs = out if isinstance(out, (tuple, list)) else (out,)
            key = (name, ins, tuple(_short(o.dtype) for o in outs[:1] if isinstance(o, torch.Tensor)))
            self.rows[key] = self.rows.get(key, 0) + 1
        return out


@dataclass(frozen=True)
class OpDtype:
    """One op as autocast ran it: its floating-point input dtypes and its output dtype."""

    op: str
    inputs: tuple[str, ...]
    output: str
    calls: int


def autocast_dtypes(
    config: str | models.GPTConfig = "tiny",
    autocast: str = "bf16",
    device: str | torch.device = "cpu",
    batch_size: int = 2,
) -> list[OpDtype]:
    """Run the course model's forward pass and loss under autocast and record, for every op that
    computes (views left out), the dtypes it got and gave — inspected with a
    ``TorchDispatchMode`` below autocast, not taken from a list."""
    dev = resolve_device(device)
    cfg = models.get_config(config)
    model = models.build_model(cfg, dev)
    idx, targets = models.make_batch(cfg, batch_size, device=dev)
    recorder = _DtypeRecorder()
    with torch.no_grad(), autocast_context(dev, autocast), recorder:
        model(idx, targets)
    return [OpDtype(op, ins, out[0] if out else "-", n) for (op, ins, out), n in recorder.rows.items()]


def format_op_dtypes(rows: Sequence[OpDtype], cuda_lists: bool = False) -> str:
    """The autocast table as text, one op per line. ``cuda_lists`` adds what CUDA autocast
    does with each op (:func:`cuda_autocast_lists`: torch's own op lists), beside what was
    recorded on this device."""
    _flag(cuda_lists=cuda_lists)
    extra = "  CUDA autocast list" if cuda_lists else ""
    lines = [f"{'op':<48} {'inputs':<30} output   calls{extra}", "-" * (92 + len(extra))]
    for r in rows:
        cuda = f"  {cuda_autocast_policy(r.op)}" if cuda_lists else ""
        op = f"aten::{r.op}"  # the op's name as the dispatcher and the profiler write it
        lines.append(f"{op:<48} {', '.join(r.inputs) or '-':<30} {r.output:<8} {r.calls:>5}{cuda}")
    if cuda_lists:
        lines.append(f"(CUDA lists from {cuda_autocast_lists()[1]})")
    return "\n".join(lines)


# --------------------------------------------------------------------------- loss scaling


@dataclass(frozen=True)
class GradientCheck:
    """Gradients of one precision setting against the fp32 reference."""

    setting: str
    zero_fraction: float  # entries that are 0 where fp32's are not
    rel_error: float  # ||g - g_fp32|| / ||g_fp32||


def gradient_underflow(
    upstream_scale: float = 1e-8,
    device: str | torch.device = "cpu",
    loss_scale: float = 2.0**16,
    seed: int = 0,
) -> list[GradientCheck]:
    """A two-layer MLP's gradients when the gradient arriving from above is tiny (each entry
    ~ N(0, 1) × ``upstream_scale``, as late in training of a large model): fp32 (reference),
    fp16 autocast, fp16 autocast with ``torch.amp.GradScaler`` (``loss_scale``) and bf16
    autocast. In fp16 the backward GEMMs produce values below its smallest subnormal, which
    become zero; scaling the loss first keeps them in range (Micikevicius et al., 2018)."""
    positive(upstream_scale=upstream_scale, loss_scale=loss_scale)
    dev = resolve_device(device)

    def grads(autocast: str | None, scaled: bool) -> torch.Tensor:
        gen = torch.Generator().manual_seed(seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 64))
        model = model.to(dev)
        x = torch.randn(32, 64, generator=gen).to(dev)
        upstream = (torch.randn(32, 64, generator=gen) * upstream_scale).to(dev)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
        scaler = torch.amp.GradScaler(dev.type, init_scale=loss_scale, enabled=scaled)
        with autocast_context(dev, autocast):
            loss = (model(x).float() * upstream).sum()  # dloss/doutput = upstream
        scaler.scale(loss).backward()
        if scaled:
            scaler.unscale_(optimizer)
        # backward() gave every parameter its .grad (typed Optional)
        return torch.cat([p.grad.flatten() for p in model.parameters()]).float()  # type: ignore[union-attr]

    reference = grads(None, False)
    rows = []
    for label, autocast, scaled in (
        ("fp32", None, False),
        ("fp16", "fp16", False),
        ("fp16 + GradScaler", "fp16", True),
        ("bf16", "bf16", False),
    ):
        g = reference if autocast is None else grads(autocast, scaled)
        rows.append(
            GradientCheck(
                label,
                ((g == 0) & (reference != 0)).float().mean().item(),
                ((g - reference).norm() / reference.norm()).item(),
            )
        )
    return rows


# --------------------------------------------------------------------------- loss curves


def pattern_batch(
    config: str | models.GPTConfig,
    batch_size: int,
    seq_len: int | None = None,
    seed: int = 0,
    device: str | torch.device = "cpu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Learnable synthetic tokens: each sequence counts up from a random start by a random
    stride (mod the vocabulary), so the loss falls within a few dozen steps. Example data."""
    cfg = models.get_config(config)
    seq_len = cfg.seq_len if seq_len is None else seq_len
    batch_size, seq_len = count(batch_size=batch_size, seq_len=seq_len)
    gen = torch.Generator().manual_seed(seed)
    start = torch.randint(cfg.vocab_size, (batch_size, 1), generator=gen)
    stride = torch.randint(1, 8, (batch_size, 1), generator=gen)
    tokens = (start + stride * torch.arange(seq_len + 1)) % cfg.vocab_size
    dev = resolve_device(device)
    return tokens[:, :-1].contiguous().to(dev), tokens[:, 1:].contiguous().to(dev)


def train_losses(
    config: str | models.GPTConfig = "tiny",
    steps: int = 30,
    autocast: str | None = None,
    device: str | torch.device = "cpu",
    batch_size: int = 8,
    lr: float = 3e-3,
    seed: int = 0,
) -> list[float]:
    """Train the course model for ``steps`` AdamW steps on :func:`pattern_batch` data and return
    every step's loss. ``autocast``: ``None``/``"fp32"``, ``"bf16"`` or ``"fp16"`` (with a
    ``GradScaler``). Same seed, same data, same initial weights for every setting; the losses
    are read back once, at the end."""
    (steps,) = count(steps=steps)
    dev = resolve_device(device)
    cfg = models.get_config(config)
    model = models.build_model(cfg, dev, seed=seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    scaler = torch.amp.GradScaler(dev.type, enabled=autocast == "fp16")
    losses = []
    for step in range(steps):
        idx, targets = pattern_batch(cfg, batch_size, seed=seed * 100_003 + step, device=dev)
        with autocast_context(dev, autocast):
            loss = model(idx, targets)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.detach().float())
    return torch.stack(losses).tolist()


def loss_gap(reference: Sequence[float], other: Sequence[float], last: int = 10) -> float:
    """Relative gap of the mean loss over the ``last`` steps: |mean(other) - mean(ref)| / mean(ref)."""
    (last,) = count(last=last)
    if len(reference) != len(other) or len(reference) < last:
        raise ValueError(f"need two curves of the same length, at least {last} steps")
    a, b = sum(reference[-last:]) / last, sum(other[-last:]) / last
    return abs(b - a) / abs(a)


def plot_losses(curves: dict[str, Sequence[float]], ax: Any = None, title: str = "") -> Any:
    """Loss curves of several precision settings on one axis, each with its own dash and
    markers, so a curve that lies on another stays visible."""
    import matplotlib.pyplot as plt

    i18n.for_plot()
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 3.8))
    styles = [("-", None), ("--", "o"), (":", "s"), ("-.", "^")]
    for i, (label, losses) in enumerate(curves.items()):
        # curves that lie on top of each other (bf16 on fp32) stay visible: each its own dash
        # and markers, placed at different steps
        dash, marker = styles[i % len(styles)]
        ax.plot(
            range(1, len(losses) + 1),
            losses,
            label=text(label),
            lw=1.5,
            ls=dash,
            marker=marker,
            ms=4,
            markevery=(i, max(1, len(losses) // 10)),
        )
    ax.set_xlabel(tr("step"))
    ax.set_ylabel(tr("training loss"))
    ax.set_title(text(title) or tr("fp32 vs mixed precision"))
    ax.grid(True, alpha=0.3)
    ax.legend()
    return ax


# --------------------------------------------------------------------------- speed-up on the roofline


@dataclass
class Speedups:
    """bf16 against fp32 on this device: a GEMM and the course model's training step."""

    device: str
    device_name: str
    gemm_n: int
    gemm_flops: dict[str, float]  # achieved FLOP/s per dtype key (fastest run: the measured roofs)
    step_s: dict[str, float]  # median training step time per setting, from the interleaved pairs
    step_flops: dict[str, float]  # achieved model FLOP/s of the step
    peaks: dict[str, float]  # datasheet dense peak per dtype (GPU in the table), else empty
    bandwidth: float  # datasheet (GPU) or measured copy bandwidth (CPU), B/s
    config: str
    step_speed: SpeedComparison  # fp32 against bf16 training steps, interleaved, with a verdict
    gemm_speed: SpeedComparison  # fp32 against bf16 GEMMs, interleaved, with a verdict

    @property
    def gemm_speedup(self) -> float:
        """fp32 GEMM time / bf16 GEMM time, from the interleaved comparison."""
        return self.gemm_speed.speedup

    @property
    def step_speedup(self) -> float:
        """fp32 step time / bf16 step time, from the interleaved comparison."""
        return self.step_speed.speedup

    def format(self) -> str:
        src = "datasheet (helpers.hardware)" if self.peaks else "none: no datasheet for this device"
        lines = [f"{self.device_name} ({self.device}); peaks: {src}"]
        for key, flops in self.gemm_flops.items():
            peak = f" = {flops / self.peaks[key]:.0%} of the {key} peak" if key in self.peaks else ""
            lines.append(f"  GEMM {self.gemm_n}^3 {key:>4}: {flops / 1e12:9.3f} TFLOP/s (fastest run){peak}")
        for key, seconds in self.step_s.items():
            lines.append(
                f"  training step ({self.config}) {key:>4}: {seconds * 1e3:9.2f} ms (median), "
                f"{self.step_flops[key] / 1e12:.3f} model TFLOP/s"
            )
        for what, s in (("GEMM", self.gemm_speed), ("training step", self.step_speed)):
            said = {
                "faster": "bf16 is faster than fp32",
                "slower": "bf16 is slower than fp32",
                "within noise": "no difference between bf16 and fp32 beyond the noise",
            }[s.verdict]
            lines.append(
                f"  bf16 against fp32, {what}: {s.speedup:.2f}x (95 % interval {s.low:.2f}x to "
                f"{s.high:.2f}x, {s.pairs} interleaved pairs): {said}"
            )
        return "\n".join(lines)


def _dtype_steps(cfg: models.GPTConfig, dev: torch.device) -> dict[str, Any]:
    """A training step of the course model in fp32 and one in bf16 autocast, each its own model."""
    steps = {}
    for key, amp in (("fp32", None), ("bf16", torch.bfloat16)):
        batch = models.make_batch(cfg, 8, cfg.seq_len, dev)
        steps[key] = models.make_train_step(models.build_model(cfg, dev), batch, autocast_dtype=amp)
    return steps


def _dtype_gemms(n: int, dev: torch.device) -> dict[str, Any]:
    """An n³ GEMM in fp32 and one in bf16, on the same random values."""
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(n, n, generator=gen), torch.randn(n, n, generator=gen)
    out = {}
    for key, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        x, y = a.to(dev, dtype), b.to(dev, dtype)
        out[key] = lambda x=x, y=y: x @ y
    return out


def measure_speedups(
    device: str | torch.device = "auto", quick: bool = True, iters: int = 10, max_seconds: float | None = None
) -> Speedups:
    """Measure a GEMM and the course model's training step in fp32 and with bf16 (autocast for
    the step). On a GPU in ``helpers.hardware`` the peaks are its dense datasheet figures (bf16
    on tensor cores); on a CPU there is no datasheet, and the roofline is the measured one.
    Both speed-ups come from fp32 and bf16 timed in interleaved pairs (``bench.compare_speed``:
    at least ``iters`` pairs and never fewer than 10; pairs stop being added after
    ``max_seconds``, 3 s quick and 15 s otherwise, for each), with their intervals and verdicts;
    the step times shown are those pairs' medians."""
    _flag(quick=quick)
    dev = resolve_device(device)
    measured = hardware.measure_device(dev, dtypes=["fp32", "bf16"], quick=quick)
    spec = hardware.detect_gpu() if dev.type == "cuda" else None
    peaks = {k: spec.peak(k) for k in ("fp32", "bf16") if k in spec.peak_flops} if spec else {}
    bandwidth = spec.memory_bandwidth if spec else measured.copy_bandwidth
    cfg = models.course_config(dev, quick)
    budget = max_seconds if max_seconds is not None else (3.0 if quick else 15.0)
    pairs = max(10, iters)
    gemms = _dtype_gemms(measured.gemm_n, dev)
    gemm_speed = compare_speed(
        gemms["fp32"], gemms["bf16"], device=dev, min_pairs=pairs, max_seconds=budget, names=("fp32", "bf16")
    )
    steps = _dtype_steps(cfg, dev)
    speed = compare_speed(
        steps["fp32"], steps["bf16"], device=dev, min_pairs=pairs, max_seconds=budget, names=("fp32", "bf16")
    )
    step_s = {"fp32": speed.baseline.median, "bf16": speed.tuned.median}
    model_flops = mfu.model_flops_per_step(cfg, 8, cfg.seq_len)
    step_flops = {key: model_flops / seconds for key, seconds in step_s.items()}
    return Speedups(
        str(dev),
        measured.name,
        measured.gemm_n,
        dict(measured.gemm_flops),
        step_s,
        step_flops,
        peaks,
        bandwidth,
        cfg.name,
        speed,
        gemm_speed,
    )


def plot_speedups(result: Speedups, ax: Any = None) -> Any:
    """The GEMMs on chapter 1's roofline — the datasheet's fp32 and bf16 (tensor-core) roofs on
    a GPU, the measured roofs on a CPU — and the training step's achieved model FLOP/s as
    horizontal lines (a whole step has no single intensity)."""
    import matplotlib.pyplot as plt

    from .. import roofline

    i18n.for_plot()
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 4.2))
    roofs = result.peaks or result.gemm_flops
    n = result.gemm_n
    for key, style in (("fp32", "C0"), ("bf16", "C1")):
        b = hardware.bytes_per_element(key)
        intensity = roofline.intensity(roofline.gemm_flops(n, n, n), roofline.gemm_bytes(n, n, n, b))
        point = (intensity, result.gemm_flops[key], f"GEMM {key}")
        roofline.plot_roofline(
            roofs[key],
            result.bandwidth,
            [point],
            color=style,
            ax=ax,
            label=(
                tr("{key} roof (datasheet)", key=key)
                if result.peaks
                else tr("{key} roof (measured)", key=key)
            ),
        )
        ax.axhline(
            result.step_flops[key] / 1e12,
            color=style,
            ls="--",
            lw=1,
            label=tr("training step {key}", key=key),
        )
    ax.set_title(tr("bf16 vs fp32 on {device}", device=result.device_name))
    ax.legend(fontsize=7)
    return ax

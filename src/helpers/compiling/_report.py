"""First call vs steady state, break-even, and one report of everything torch.compile did."""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from .._validate import positive
from ..bench import Measurement, SpeedComparison, compare_speed, resolve_device, synchronize
from ._graphs import CompileEvent, GraphReport, graph_breaks, quiet, recompiles


def break_even_steps(first_call_s: float, eager_step_s: float, compiled_step_s: float) -> int | float:
    """Steps after which compiling has paid for itself; ``math.inf`` if compiled is not faster.

    The first compiled call compiles *and* runs one step, so ``n`` steps cost
    ``first_call_s + (n - 1) · compiled_step_s`` compiled against ``n · eager_step_s`` eager;
    the answer is the smallest ``n >= 1`` for which the compiled total is not larger.
    """
    positive(first_call_s=first_call_s, eager_step_s=eager_step_s, compiled_step_s=compiled_step_s)
    if compiled_step_s >= eager_step_s:
        return math.inf
    return max(1, math.ceil((first_call_s - compiled_step_s) / (eager_step_s - compiled_step_s)))


def step_speedup(fraction: float, part_speedup: float) -> float:
    """Speed-up of a whole step when a part taking ``fraction`` of it gets ``part_speedup``
    times faster and nothing else changes (Amdahl's law): ``1 / ((1 - f) + f / s)``."""
    positive(part_speedup=part_speedup)
    if not 0 <= fraction <= 1:
        raise ValueError(f"fraction must be in [0, 1], got {fraction!r}")
    return 1 / ((1 - fraction) + fraction / part_speedup)


TRUST_WIDTH = 0.5  # an interval wider than this (high / low - 1) is too wide to build on


def step_speedups(
    speed: SpeedComparison | None, fractions: tuple[float, ...] = (0.05, 0.2, 0.5)
) -> list[str]:
    """Amdahl's law applied to a measured part speed-up and to both ends of its 95 % interval:
    one line per ``fraction`` of the step the part takes, then a warning when the part is not
    faster beyond noise or its interval is too wide to trust (wider than ``TRUST_WIDTH``)."""
    if speed is None:
        return ["no timed speed-up in this run, so there is nothing to apply Amdahl's law to"]
    lines = []
    for f in fractions:
        low, mid, high = (step_speedup(f, x) for x in (speed.low, speed.speedup, speed.high))
        lines.append(
            f"part = {f:.0%} of the step: step {mid:.3f}x faster (95 % interval {low:.3f}x to {high:.3f}x)"
        )
    if speed.verdict != "faster":
        lines.append(
            f"the part itself is {speed.verdict} here (its interval "
            f"{speed.low:.2f}x to {speed.high:.2f}x), so these step figures are not a result"
        )
    elif speed.interval_width > TRUST_WIDTH:
        lines.append(
            f"the part's interval spans {speed.interval_width:.0%}: too wide to trust these "
            "step figures; run again on a quieter machine"
        )
    return lines


def pick_backend(device: str | torch.device = "cpu") -> tuple[str, str]:
    """``("inductor", why)`` when Inductor can generate code on ``device`` here, else
    ``("aot_eager", why)``: the same capture and autograd tracing, without generated code.

    Inductor needs a C++ compiler for CPU code and Triton for GPU code. A learner's runtime
    may lack them; the chapter then still runs, and says why it shows no fused kernels.
    """
    dev = resolve_device(device)
    if dev.type == "cuda":
        try:
            import triton  # noqa: F401
        except ImportError:
            return "aot_eager", "Triton is not installed, so Inductor cannot generate GPU kernels"
        return "inductor", "Inductor generates Triton kernels for this GPU"
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler

        compiler = get_cpp_compiler()
    except Exception as exc:  # noqa: BLE001 — torch raises its own error types for a missing compiler
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:120]
        return "aot_eager", f"no working C++ compiler ({reason}); install g++ to see Inductor's kernels"
    return "inductor", f"Inductor generates C++ kernels with {compiler}"


def cache_info() -> dict[str, Any]:
    """Where inductor keeps its on-disk caches, and whether they are on.

    The FX graph cache stores compiled graphs by a hash of the graph, inputs and settings;
    the first compile on a machine also stores which CPU vector instructions the C++
    compiler can use. A second run of the same notebook finds both and compiles in seconds.
    ``TORCHINDUCTOR_CACHE_DIR`` moves the folder.
    """
    import os

    import torch._inductor.config as config
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    folder = cache_dir()
    files = sum(len(names) for _, _, names in os.walk(folder)) if os.path.isdir(folder) else 0
    return {"dir": folder, "fx_graph_cache": bool(config.fx_graph_cache), "files": files}


def _counters() -> dict[str, int]:
    from torch._dynamo.utils import counters

    return dict(counters["inductor"])


def _cache_outcome(before: dict[str, int], after: dict[str, int], backend: str) -> str:
    if backend != "inductor":
        return f"not used (backend {backend!r} generates no code)"
    delta = {
        k: after.get(k, 0) - before.get(k, 0)
        for k in ("fxgraph_cache_hit", "fxgraph_cache_miss", "fxgraph_cache_bypass")
    }
    parts = [f"{n} {k.rsplit('_', 1)[1]}" for k, n in delta.items() if n]
    return "FX graph cache: " + (", ".join(parts) if parts else "not consulted")


@dataclass(frozen=True)
class ShapeCheck:
    """The compiled function on one more input shape: speed against eager, and the values."""

    shapes: tuple[tuple[int, ...], ...]
    speed: SpeedComparison
    matches: bool
    max_abs_diff: float

    def __str__(self) -> str:
        shapes = ", ".join("×".join(map(str, shape)) for shape in self.shapes)
        s = self.speed
        said = {
            "faster": "compiled is faster",
            "slower": "compiled is slower",
            "within noise": "within noise",
        }[s.verdict]
        return (
            f"({shapes}): {s.speedup:.2f}x (95 % interval {s.low:.2f}x to {s.high:.2f}x, {s.pairs} "
            f"pairs): {said}; matches eager: {'yes' if self.matches else 'NO'}"
        )


@dataclass
class CompileReport:
    """What compiling one function cost and bought, measured on one device."""

    name: str
    device: str
    backend: str
    first_call_s: float  # the first compiled call: compile + one run
    eager: Measurement
    compiled: Measurement
    graphs: GraphReport
    cache: str
    max_abs_diff: float
    matches: bool
    rtol: float
    atol: float
    mismatch: str = ""
    recompiles: dict[str, list[CompileEvent]] = field(default_factory=dict)
    speed: SpeedComparison | None = None  # eager against compiled, interleaved, with its verdict
    # per extra input shape: eager against compiled on it (interleaved), and whether it matches
    shape_checks: list[ShapeCheck] = field(default_factory=list)

    @property
    def speedup(self) -> float:
        """Steady-state eager time / compiled time: the median over interleaved pairs."""
        if self.speed is not None:
            return self.speed.speedup
        return self.eager.median / self.compiled.median

    @property
    def break_even(self) -> int | float:
        return break_even_steps(self.first_call_s, self.eager.median, self.compiled.median)

    def _speed_text(self) -> str:
        if self.speed is None:
            return f"{self.speedup:.2f}x"
        s = self.speed
        said = {
            "faster": "compiled is faster",
            "slower": "compiled is slower",
            "within noise": "within noise: no difference this run can show",
        }[s.verdict]
        return f"{s.speedup:.2f}x (95 % interval {s.low:.2f}x to {s.high:.2f}x, {s.pairs} pairs): {said}"

    def format(self) -> str:
        def ms(m: Measurement) -> str:
            return (
                f"median {m.median * 1e3:.3f} ms (min {m.min * 1e3:.3f}, max {m.max * 1e3:.3f}, "
                f"n={len(m.samples)}, spread {m.spread:.0%})"
            )

        even = (
            "never (compiled is not faster)" if math.isinf(self.break_even) else f"{self.break_even:,} steps"
        )
        if self.speed is not None and self.speed.verdict != "faster":
            even = f"none this run can show (compiled is {self.speed.verdict}, not faster)"
        verdict = "yes" if self.matches else f"NO ({self.mismatch})"
        lines = [
            f"{self.name} on {self.device}, backend {self.backend!r}",
            f"  first compiled call  {self.first_call_s:.3f} s  (compile + one run; {self.cache})",
            f"  eager step           {ms(self.eager)}",
            f"  compiled step        {ms(self.compiled)}",
            f"  steady speed-up      {self._speed_text()}",
            f"  break-even           {even}",
            f"  graphs / breaks      {self.graphs.graphs} / {self.graphs.breaks}",
            *[f"    {r}" for r in self.graphs.reasons],
            f"  matches eager        {verdict}: max |compiled - eager| = {self.max_abs_diff:.3g} "
            f"(torch.testing.assert_close, rtol {self.rtol:g}, atol {self.atol:g})",
        ]
        for mode, events in self.recompiles.items():
            count = sum(e.compiled for e in events)
            lines.append(f"  shapes, {mode:<8}    {count} compilation(s) for {len(events)} calls")
            lines += [f"    {e}" for e in events]
        if self.shape_checks:
            lines.append("  other shapes         speed (interleaved, recompiles untimed) and values")
            lines += [f"    {c}" for c in self.shape_checks]
        return "\n".join(lines)


def _leaves(value: Any) -> list[torch.Tensor]:
    from torch.utils._pytree import tree_leaves

    return [t for t in tree_leaves(value) if isinstance(t, torch.Tensor)]


def _compare(
    compiled_out: Any, eager_out: Any, rtol: float | None, atol: float | None
) -> tuple[bool, float, float, float, str]:
    from torch.testing._comparison import default_tolerances

    got, want = _leaves(compiled_out), _leaves(eager_out)
    if rtol is None or atol is None:
        default_rtol, default_atol = default_tolerances(*want) if want else (0.0, 0.0)
        rtol = default_rtol if rtol is None else rtol
        atol = default_atol if atol is None else atol
    diff = max(
        (
            (g.detach().double() - w.detach().double()).abs().max().item()
            for g, w in zip(got, want, strict=False)
            if g.numel() and g.shape == w.shape
        ),
        default=0.0,
    )
    try:
        torch.testing.assert_close(compiled_out, eager_out, rtol=rtol, atol=atol)
    except AssertionError as exc:
        return False, diff, rtol, atol, str(exc).strip().splitlines()[0]
    return True, diff, rtol, atol, ""


def report(
    fn: Callable[..., Any],
    example_inputs: Sequence[Any],
    *,
    name: str | None = None,
    shapes: Sequence[Sequence[Any]] | None = None,
    backend: str = "inductor",
    mode: str | None = None,
    warmup: int = 3,
    iters: int = 10,
    rtol: float | None = None,
    atol: float | None = None,
    max_seconds: float = 3.0,
) -> CompileReport:
    """Compile ``fn`` and measure what it cost and what it bought, on its inputs' device.

    In order: graphs and graph breaks with their reasons (``torch._dynamo.explain``); the
    first compiled call (compile + one run, timed with synchronisation) and whether the FX
    graph cache had it; steady-state eager and compiled step times, timed in interleaved pairs
    by ``bench.compare_speed`` (at least ``iters`` pairs, at most ``max_seconds`` of timing),
    with the speed-up's interval and verdict; break-even; whether the compiled output matches eager
    (``torch.testing.assert_close``; the tolerance defaults to torch's for the output
    dtype and is stated in the report). With ``shapes`` — more input tuples, e.g. other
    batch sizes — it also times eager against compiled on each of them (interleaved, after
    the recompile, which is not timed), checks their values, and counts the compilations they
    trigger with torch.compile's default and with ``dynamic=True``, with dynamo's reasons.

    Everything runs silenced (:func:`quiet`). Compiling resets nothing before it, but the
    explain and shape steps reset dynamo (see :func:`graph_breaks`).
    """
    inputs = tuple(example_inputs)
    tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
    device = tensors[0].device if tensors else torch.device("cpu")
    label = name or str(getattr(fn, "__name__", type(fn).__name__))
    graphs = graph_breaks(fn, *inputs)  # first: explain resets dynamo
    with torch.no_grad():
        eager_out = fn(*inputs)
    with quiet():
        compiled = torch.compile(fn, backend=backend, mode=mode)
        before = _counters()
        synchronize(device)
        start = time.perf_counter()
        with torch.no_grad():
            compiled_out = compiled(*inputs)
        synchronize(device)
        first = time.perf_counter() - start
        cache = _cache_outcome(before, _counters(), backend)
        with torch.no_grad():
            speed = compare_speed(
                lambda: fn(*inputs),
                lambda: compiled(*inputs),
                device=device,
                warmup=warmup,
                min_pairs=max(3, iters),
                max_pairs=max(3, iters) * 20,
                max_seconds=max_seconds,
                names=("eager", "compiled"),
            )
    matches, diff, rtol, atol, why = _compare(compiled_out, eager_out, rtol, atol)
    result = CompileReport(
        label,
        str(device),
        backend,
        first,
        speed.baseline,
        speed.tuned,
        graphs,
        cache,
        diff,
        matches,
        rtol,
        atol,
        why,
        speed=speed,
    )
    if shapes:
        calls = [inputs, *[tuple(s) for s in shapes]]
        with quiet(), torch.no_grad():
            for other in calls[1:]:  # a recompiled graph is new code: time it and check it too
                got, want = compiled(*other), fn(*other)  # (re)compiles here, untimed
                ok, other_diff, *_ = _compare(got, want, rtol, atol)
                other_speed = compare_speed(
                    functools.partial(fn, *other),
                    functools.partial(compiled, *other),
                    device=device,
                    warmup=warmup,
                    min_pairs=max(3, iters),
                    max_pairs=max(3, iters) * 20,
                    max_seconds=max_seconds,
                    names=("eager", "compiled"),
                )
                result.shape_checks.append(
                    ShapeCheck(
                        tuple(tuple(t.shape) for t in other if isinstance(t, torch.Tensor)),
                        other_speed,
                        ok,
                        other_diff,
                    )
                )
        with torch.no_grad():
            result.recompiles = {m: recompiles(fn, calls, m) for m in ("auto", "dynamic")}
    return result

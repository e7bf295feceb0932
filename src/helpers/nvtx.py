"""Named ranges that show up in both Nsight Systems and PyTorch profiler traces (chapter 3).

``annotate(name)`` opens a ``torch.profiler.record_function`` range (always: CPU and GPU
traces recorded by ``torch.profiler`` show it) and an NVTX range when an NVTX library is
usable (Nsight Systems shows it). On a CPU-only torch build ``torch.cuda.nvtx`` raises
"NVTX functions not installed"; ``annotate`` then falls back to the optional ``nvtx``
package from PyPI, or to no NVTX at all, and never fails.

Steady-state capture: :func:`steady_state_schedule` (a ``torch.profiler.schedule`` that skips
the warm-up steps and records 3-5 steps) and :class:`CudaProfilerRange` (calls
``cudaProfilerStart``/``Stop`` around the same steps, for ``nsys --capture-range=cudaProfilerApi``).
The recorders here hide the profiler's native ``USDT ... profiler_start`` notices
(:mod:`helpers._quiet`), so notebook cells that profile write nothing to stderr.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import json
import sys
import tempfile
import types
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerAction, record_function

from ._quiet import profiler_notices_hidden

STEP_RANGES = ("step", "dataloader", "forward", "backward", "optimizer")
_RECORDING = (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)
# How many ranges annotate() opened, per name. Kept in a module outside the helpers package so
# that re-importing helpers (importlib.reload, a grader's fresh import) does not reset it.
_STATE = sys.modules.setdefault("_helpers_nvtx_state", types.ModuleType("_helpers_nvtx_state"))
if not hasattr(_STATE, "opened"):
    _STATE.opened = Counter()


def opened_counts() -> Counter:
    """Ranges opened through :class:`annotate` so far in this process, per name."""
    return _STATE.opened


# --------------------------------------------------------------------------- NVTX backend

@functools.lru_cache(maxsize=1)
def nvtx_backend() -> str:
    """Which NVTX library :func:`annotate` uses here: ``"torch.cuda.nvtx"``, ``"nvtx"`` or ``"none"``.

    ``torch.cuda.nvtx`` needs a CUDA build of torch (not a GPU). The ``nvtx`` PyPI package works
    on any build; its calls are no-ops unless a tool such as nsys is attached.
    """
    try:
        from torch._C import _nvtx  # noqa: F401  (compiled into CUDA builds only)

        return "torch.cuda.nvtx"
    except ImportError:
        pass
    try:
        import nvtx as nvtx_pkg  # optional dependency

        if hasattr(nvtx_pkg, "push_range") and hasattr(nvtx_pkg, "pop_range"):
            return "nvtx"
    except ImportError:
        pass
    return "none"


def try_torch_nvtx(name: str = "probe") -> str:
    """Call ``torch.cuda.nvtx.range_push/pop`` directly and say what happened (one line)."""
    try:
        torch.cuda.nvtx.range_push(name)
        torch.cuda.nvtx.range_pop()
        return "torch.cuda.nvtx.range_push worked: this torch build has NVTX."
    except RuntimeError as err:  # the CPU build's stub raises RuntimeError
        return f"torch.cuda.nvtx.range_push raised RuntimeError: {err}"


_disabled = False  # set when an NVTX call fails at run time: keep training, drop NVTX


def _push(name: str) -> bool:
    global _disabled
    if _disabled:
        return False
    backend = nvtx_backend()
    try:
        if backend == "torch.cuda.nvtx":
            torch.cuda.nvtx.range_push(name)
        elif backend == "nvtx":
            import nvtx as nvtx_pkg

            nvtx_pkg.push_range(name)
        else:
            return False
        return True
    except RuntimeError:
        _disabled = True
        return False


def _pop() -> None:
    backend = nvtx_backend()
    if backend == "torch.cuda.nvtx":
        torch.cuda.nvtx.range_pop()
    elif backend == "nvtx":
        import nvtx as nvtx_pkg

        nvtx_pkg.pop_range()


class annotate:  # noqa: N801  (lower case: reads like ``record_function``)
    """A named range: ``with annotate("forward"): ...`` or ``@annotate("forward")``.

    Always records a ``torch.profiler.record_function`` range; also pushes an NVTX range when
    :func:`nvtx_backend` has one. Ranges nest, and one object can be entered again (recursion,
    several threads): each use gets its own record. :func:`opened_counts` counts the ranges
    opened per name (checks use it to see that a loop was annotated with this helper).
    """

    def __init__(self, name: str):
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"annotate(name) needs a non-empty string, got {name!r}.")
        self.name = name
        self._open: list[tuple[record_function, bool]] = []

    def __enter__(self) -> annotate:
        rf = record_function(self.name)
        rf.__enter__()
        _STATE.opened[self.name] += 1
        self._open.append((rf, _push(self.name)))
        return self

    def __exit__(self, *exc: Any) -> bool:
        rf, pushed = self._open.pop()
        if pushed:
            _pop()
        rf.__exit__(*exc)
        return False

    def __call__(self, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with annotate(self.name):  # a fresh range per call
                return fn(*args, **kwargs)

        return wrapper

    def __repr__(self) -> str:
        return f"annotate({self.name!r})"


# --------------------------------------------------------------------------- ranges in a trace

@dataclass(frozen=True)
class Range:
    """One user range (``record_function`` / :func:`annotate`) of a torch.profiler trace."""

    name: str
    start_us: float
    end_us: float
    depth: int  # 0 = outermost user range on its thread
    parent: str | None  # innermost enclosing user range, if any
    thread: int = 0

    @property
    def duration_us(self) -> float:
        return self.end_us - self.start_us


def record_cpu_trace(fn: Callable[[], Any], path: str | Path | None = None) -> Path:
    """Run ``fn()`` under ``torch.profiler`` (CPU activity) and write its chrome trace; returns the path."""
    from torch.profiler import ProfilerActivity, profile

    target = Path(path) if path else Path(tempfile.mkdtemp(prefix="trainperf-nvtx-")) / "trace.json"
    with profiler_notices_hidden():
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            fn()
        prof.export_chrome_trace(str(target))
    return target


def top_operators(fn: Callable[[], Any], row_limit: int = 8, sort_by: str = "self_cpu_time_total") -> str:
    """Run ``fn()`` under ``torch.profiler`` (CPU activity, plus CUDA on a GPU) and return
    ``prof.key_averages().table(...)``: the operators that took the most time, with their call
    counts. ``self`` time leaves out the operators an operator called."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profiler_notices_hidden():
        with profile(activities=activities) as prof:
            fn()
    return prof.key_averages().table(sort_by=sort_by, row_limit=row_limit)


def record_training_trace(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                          batches: Sequence[tuple[torch.Tensor, torch.Tensor]], n_steps: int,
                          schedule: Callable[[int], ProfilerAction] | None = None,
                          path: str | Path | None = None) -> Path:
    """Profile :func:`annotated_training_loop` (CPU activity, ``prof.step()`` after each step)
    with an optional ``torch.profiler.schedule``; returns the chrome trace written."""
    from torch.profiler import ProfilerActivity, profile

    target = Path(path) if path else Path(tempfile.mkdtemp(prefix="trainperf-nvtx-")) / "trace.json"
    written: list[Path] = []

    def save(prof: Any) -> None:  # called when the schedule's active window ends
        prof.export_chrome_trace(str(target))
        written.append(target)

    with profiler_notices_hidden():
        with profile(activities=[ProfilerActivity.CPU], schedule=schedule,
                     on_trace_ready=save if schedule else None) as prof:
            annotated_training_loop(model, optimizer, batches, n_steps, on_step_end=lambda _: prof.step())
        if schedule is None:
            save(prof)
    if not written:
        raise RuntimeError(f"The schedule recorded nothing in {n_steps} steps; run more steps.")
    return target


def _load_events(trace: str | Path | dict) -> list[dict]:
    if isinstance(trace, dict):
        data = trace
    else:
        path = Path(trace)
        if not path.is_file():
            raise FileNotFoundError(f"No trace file {path}: record one with record_cpu_trace(fn).")
        opener = gzip.open if path.suffix == ".gz" else open
        try:
            with opener(path, "rt") as fh:
                data = json.load(fh)
        except (json.JSONDecodeError, UnicodeDecodeError, OSError) as err:
            raise ValueError(f"{path} is not a chrome trace JSON ({type(err).__name__}); "
                             "pass the file torch.profiler's export_chrome_trace wrote.") from None
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise ValueError("Not a torch.profiler chrome trace: no 'traceEvents' list.")
    return data["traceEvents"]


def trace_ranges(trace: str | Path | dict, names: Sequence[str] | None = None) -> list[Range]:
    """User ranges of a chrome trace (``cat == "user_annotation"``) with nesting, in start order.

    ``names`` keeps only those names (nesting is still worked out from all user ranges).
    ``ProfilerStep#N`` ranges that ``prof.step()`` adds are user ranges too.
    """
    events = [e for e in _load_events(trace)
              if e.get("cat") == "user_annotation" and e.get("ph") == "X"]
    by_thread: dict[tuple, list[dict]] = {}
    for e in events:
        by_thread.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    ranges: list[Range] = []
    eps = 1e-3  # µs: chrome traces round timestamps, a child may end "after" its parent by that
    for (_, tid), evs in by_thread.items():
        evs.sort(key=lambda e: (float(e["ts"]), -float(e.get("dur", 0))))
        stack: list[tuple[str, float]] = []  # (name, end)
        for e in evs:
            start, end = float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))
            while stack and end > stack[-1][1] + eps:  # sorted by start: only the end decides
                stack.pop()
            parent = stack[-1][0] if stack else None
            ranges.append(Range(e["name"], start, end, len(stack), parent,
                                tid if isinstance(tid, int) else 0))
            stack.append((e["name"], end))
    ranges.sort(key=lambda r: (r.start_us, r.depth))
    if names is not None:
        wanted = set(names)
        ranges = [r for r in ranges if r.name in wanted]
    return ranges


def count_ranges(ranges: Sequence[Range]) -> dict[str, int]:
    """How many times each range name occurs."""
    return dict(Counter(r.name for r in ranges))


def ranges_inside(ranges: Sequence[Range], outer: Range) -> list[Range]:
    """The ranges (same thread) that lie within ``outer``, ``outer`` itself excluded."""
    eps = 1e-3
    return [r for r in ranges if r is not outer and r.thread == outer.thread
            and r.start_us >= outer.start_us - eps and r.end_us <= outer.end_us + eps]


def format_ranges(ranges: Sequence[Range], limit: int = 30) -> str:
    """An indented listing: name, start (µs from the first range) and duration."""
    if not ranges:
        return "(no ranges)"
    t0 = ranges[0].start_us
    lines = [f"{'  ' * r.depth}{r.name:<{28 - 2 * r.depth}} +{r.start_us - t0:9.1f} µs "
             f"{r.duration_us:9.1f} µs" for r in ranges[:limit]]
    if len(ranges) > limit:
        lines.append(f"... {len(ranges) - limit} more")
    return "\n".join(lines)


# --------------------------------------------------------------------------- a small demo loop

def demo_setup(device: str | torch.device = "cpu", width: int = 64, n_batches: int = 32,
               batch_size: int = 16, seed: int = 0) -> tuple[torch.nn.Module, torch.optim.Optimizer,
                                                            list[tuple[torch.Tensor, torch.Tensor]]]:
    """A small MLP regression problem: (model, optimizer, batches) for profiling demos."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
                                torch.nn.Linear(4 * width, width), torch.nn.GELU(),
                                torch.nn.Linear(width, 1)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    batches = [(torch.randn(batch_size, width, generator=gen).to(device),
                torch.randn(batch_size, 1, generator=gen).to(device)) for _ in range(n_batches)]
    return model, optimizer, batches


def annotated_training_loop(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                            batches: Sequence[tuple[torch.Tensor, torch.Tensor]], n_steps: int,
                            on_step_end: Callable[[int], Any] | None = None,
                            window: CudaProfilerRange | None = None) -> list[float]:
    """Train ``n_steps`` steps with step / dataloader / forward / backward / optimizer ranges.

    ``on_step_end(step)`` runs after each step (e.g. ``lambda s: prof.step()``); ``window``
    starts/stops the CUDA profiler API around its steps. Returns the losses.
    """
    loader = iter(batches)
    losses = []
    for step in range(n_steps):
        with window.step(step) if window else contextlib.nullcontext():
            with annotate("step"):
                with annotate("dataloader"):
                    x, y = next(loader)
                with annotate("forward"):
                    loss = torch.nn.functional.mse_loss(model(x), y)
                with annotate("backward"):
                    loss.backward()
                with annotate("optimizer"):
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
        losses.append(loss.detach())
        if on_step_end is not None:
            on_step_end(step)
    return [float(v) for v in losses]  # one sync at the end, not one per step


# --------------------------------------------------------------------------- steady-state capture

def steady_state_kwargs(first_recorded_step: int, active: int = 5, warmup: int = 1) -> dict[str, int]:
    """``torch.profiler.schedule`` arguments that record steps ``first .. first+active-1`` once.

    The profiler skips ``first - warmup`` steps, warms up (traces but discards) ``warmup`` steps,
    records ``active`` steps, and stops (``repeat=1``). Capture 3-5 steady-state steps: a longer
    trace is larger and harder to read, not more informative.
    """
    if not 3 <= active <= 5:
        raise ValueError(f"active={active}: record 3-5 steady-state steps; "
                         "for another window build torch.profiler.schedule yourself.")
    if warmup < 1:
        raise ValueError(f"warmup={warmup}: give the profiler at least 1 warm-up step, "
                         "or its first recorded step carries its start-up cost.")
    if first_recorded_step < warmup:
        raise ValueError(f"first_recorded_step={first_recorded_step} leaves no room for "
                         f"{warmup} warm-up step(s) before it; start later.")
    return {"skip_first": first_recorded_step - warmup, "wait": 0, "warmup": warmup,
            "active": active, "repeat": 1}


def steady_state_schedule(first_recorded_step: int = 10, active: int = 5,
                          warmup: int = 1) -> Callable[[int], ProfilerAction]:
    """A ``torch.profiler.schedule`` recording steps ``first .. first+active-1`` once.

    See :func:`steady_state_kwargs` for the arguments it passes.
    """
    return torch.profiler.schedule(**steady_state_kwargs(first_recorded_step, active, warmup))


def schedule_actions(schedule: Callable[[int], ProfilerAction], n_steps: int) -> list[str]:
    """The profiler's action at each step 0..n_steps-1: NONE, WARMUP, RECORD or RECORD_AND_SAVE."""
    return [schedule(step).name for step in range(n_steps)]


def recorded_steps(schedule: Callable[[int], ProfilerAction], n_steps: int) -> list[int]:
    """The steps (0-based, as in ``ProfilerStep#N``) whose events end up in the trace."""
    return [step for step in range(n_steps) if schedule(step) in _RECORDING]


def format_schedule(schedule: Callable[[int], ProfilerAction], n_steps: int) -> str:
    """One line per step: ``step  action``; recorded steps are marked."""
    return "\n".join(f"step {s:>3}  {a:<15}{' <- recorded' if a.startswith('RECORD') else ''}"
                     for s, a in enumerate(schedule_actions(schedule, n_steps)))


@dataclass
class CudaProfilerRange:
    """Calls ``cudaProfilerStart`` before ``first_step`` and ``cudaProfilerStop`` after ``last_step``.

    With ``nsys profile --capture-range=cudaProfilerApi --capture-range-end=stop`` only the work
    between the two calls is captured. Without CUDA the calls are skipped and recorded as such
    in ``events`` (so the same loop runs on a CPU).
    """

    first_step: int
    last_step: int
    events: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not 0 <= self.first_step <= self.last_step:
            raise ValueError(f"Capture steps {self.first_step}..{self.last_step}: need "
                             "0 <= first_step <= last_step.")

    @property
    def steps(self) -> range:
        return range(self.first_step, self.last_step + 1)

    @property
    def enabled(self) -> bool:
        return torch.cuda.is_available()

    def _call(self, what: str, step: int) -> None:
        if self.enabled:
            # Sync first: work queued before the window must not leak in, and the last
            # step's kernels must finish before the capture stops.
            torch.cuda.synchronize()
            (torch.cuda.profiler.start if what == "start" else torch.cuda.profiler.stop)()
            self.events.append(f"step {step}: cudaProfiler{what.title()}() called")
        else:
            self.events.append(f"step {step}: cudaProfiler{what.title()}() skipped (no CUDA device)")

    @contextlib.contextmanager
    def step(self, step: int) -> Iterator[None]:
        """Wrap one training step: starts the capture before the first, stops it after the last."""
        if step == self.first_step:
            self._call("start", step)
        yield
        if step == self.last_step:
            self._call("stop", step)


def _demo_main(argv: Sequence[str] | None = None) -> None:
    """``python -m helpers.nvtx --steps 20 --first 10 --last 14``: the loop nsys captures."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m helpers.nvtx", description=_demo_main.__doc__)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--first", type=int, default=10)
    parser.add_argument("--last", type=int, default=14)
    args = parser.parse_args(argv)
    if not 0 <= args.first <= args.last < args.steps:
        parser.error(f"need 0 <= --first <= --last < --steps, got first={args.first}, "
                     f"last={args.last}, steps={args.steps}")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model, optimizer, batches = demo_setup(device, width=512, n_batches=args.steps, batch_size=256)
    window = CudaProfilerRange(args.first, args.last)
    losses = annotated_training_loop(model, optimizer, batches, args.steps, window=window)
    print(f"{args.steps} steps on {device}, loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    print("\n".join(window.events))


if __name__ == "__main__":
    _demo_main()

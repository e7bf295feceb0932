"""Steady-state capture: which steps a profiler records.

:func:`steady_state_schedule` is a ``torch.profiler.schedule`` that skips the warm-up steps and
records 3-5 steps; :class:`CudaProfilerRange` calls ``cudaProfilerStart``/``Stop`` around the same
steps, for ``nsys --capture-range=cudaProfilerApi``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
from torch.profiler import ProfilerAction

_RECORDING = (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)


def steady_state_kwargs(first_recorded_step: int, active: int = 5, warmup: int = 1) -> dict[str, int]:
    """``torch.profiler.schedule`` arguments that record steps ``first .. first+active-1`` once.

    The profiler skips ``first - warmup`` steps, warms up (traces but discards) ``warmup`` steps,
    records ``active`` steps, and stops (``repeat=1``). Capture 3-5 steady-state steps: a longer
    trace is larger and harder to read, not more informative.
    """
    if not 3 <= active <= 5:
        raise ValueError(
            f"active={active}: record 3-5 steady-state steps; "
            "for another window build torch.profiler.schedule yourself."
        )
    if warmup < 1:
        raise ValueError(
            f"warmup={warmup}: give the profiler at least 1 warm-up step, "
            "or its first recorded step carries its start-up cost."
        )
    if first_recorded_step < warmup:
        raise ValueError(
            f"first_recorded_step={first_recorded_step} leaves no room for "
            f"{warmup} warm-up step(s) before it; start later."
        )
    return {
        "skip_first": first_recorded_step - warmup,
        "wait": 0,
        "warmup": warmup,
        "active": active,
        "repeat": 1,
    }


def steady_state_schedule(
    first_recorded_step: int = 10, active: int = 5, warmup: int = 1
) -> Callable[[int], ProfilerAction]:
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
    return "\n".join(
        f"step {s:>3}  {a:<15}{' <- recorded' if a.startswith('RECORD') else ''}"
        for s, a in enumerate(schedule_actions(schedule, n_steps))
    )


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
            raise ValueError(
                f"Capture steps {self.first_step}..{self.last_step}: need 0 <= first_step <= last_step."
            )

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

"""A deterministic stand-in for an asynchronous accelerator."""

from __future__ import annotations


class FakeAsyncDevice:
    """A deterministic stand-in for an asynchronous accelerator, for tests and exercises.

    ``step()`` queues work of the next programmed duration and returns at once, as a CUDA
    launch does; the fake ``clock()`` only moves when ``synchronize()`` waits for the queued
    work. So a timer that forgets to synchronize measures (almost) nothing, as it would on a
    GPU. Memory works like ``torch.cuda``: ``step()`` raises the peak to its programmed
    figure, ``reset_peak_memory_stats()`` clears it, ``max_memory_allocated()`` reads it.
    """

    def __init__(
        self, durations_s: list[float], peak_bytes: list[int] | None = None, launch_s: float = 0.0
    ) -> None:
        if not durations_s:
            raise ValueError("FakeAsyncDevice needs at least one step duration")
        self.durations_s = list(durations_s)
        self.peak_bytes = list(peak_bytes) if peak_bytes is not None else [0] * len(durations_s)
        if len(self.peak_bytes) != len(self.durations_s):
            raise ValueError("give one peak_bytes figure per duration")
        self.launch_s = launch_s  # host time to queue one step
        self.now = 0.0
        self.pending = 0.0
        self.calls = 0
        self.syncs = 0
        self._peak = 0

    def step(self) -> None:
        """Queue the next step (durations repeat from the last one when the list runs out)."""
        i = min(self.calls, len(self.durations_s) - 1)
        self.calls += 1
        self.now += self.launch_s
        self.pending += self.durations_s[i]
        self._peak = max(self._peak, self.peak_bytes[i])

    def synchronize(self) -> None:
        """Wait for the queued work: the clock moves on by its duration."""
        self.syncs += 1
        self.now += self.pending
        self.pending = 0.0

    def clock(self) -> float:
        """Seconds on the fake host clock."""
        return self.now

    def reset_peak_memory_stats(self) -> None:
        self._peak = 0

    def max_memory_allocated(self) -> int:
        return self._peak

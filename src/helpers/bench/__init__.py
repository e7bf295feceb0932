"""Honest timing: warm-up that is never timed, device synchronization, medians with spread,
and one way to decide which of two versions is faster.

On a CUDA device each call is timed with CUDA events (device time between two points in
the stream); on CPU with ``time.perf_counter`` after the work has finished.

* :func:`measure` times one function; :class:`Measurement` holds its samples.
* :func:`compare_speed` (two functions) and :func:`compare_windows` (two windows of training
  steps) time both sides in interleaved pairs and return a :class:`SpeedComparison`: the
  speed-up, its 95 % interval and a verdict, ``"faster"``, ``"slower"`` or ``"within noise"``.
  Every speed comparison the course prints goes through them.
* :func:`compare` subtracts two summaries (step time and peak memory); it draws no verdict
  about speed. :func:`measure_interleaved` times several variants turn by turn and returns
  their samples, for plots and tables; :func:`compare_speed` is the one that decides.
* :func:`same_result` checks two outputs agree before their speed is compared.
* :func:`count_host_syncs` (where a loop reads device values back) and
  :func:`profile_sync_events` (the same, seen by the CUDA profiler); :func:`logged_loop`
  (loss logging with or without a read-back every step).
* :class:`FakeAsyncDevice`: a deterministic stand-in for an asynchronous GPU, for tests and
  exercises.

``python -m helpers.bench calibrate`` checks the verdicts on this machine under load.
"""

from ._fake import FakeAsyncDevice
from ._speed import (
    VERDICTS,
    SpeedComparison,
    compare_speed,
    compare_windows,
    default_threads,
    interval,
    min_pairs_for,
    summary_line,
    verdict_of,
)
from ._syncs import READBACKS, SyncCount, count_host_syncs, logged_loop, profile_sync_events
from ._timing import (
    Comparison,
    Measurement,
    _metrics,  # noqa: F401  (exercise 7 of chapter 2 blocks it by this name)
    compare,
    measure,
    measure_interleaved,
    resolve_device,
    same_result,
    synchronize,
)

__all__ = [
    "VERDICTS",
    "READBACKS",
    "Comparison",
    "FakeAsyncDevice",
    "Measurement",
    "SpeedComparison",
    "SyncCount",
    "compare",
    "compare_speed",
    "compare_windows",
    "default_threads",
    "count_host_syncs",
    "interval",
    "min_pairs_for",
    "logged_loop",
    "measure",
    "measure_interleaved",
    "profile_sync_events",
    "resolve_device",
    "same_result",
    "summary_line",
    "synchronize",
    "verdict_of",
]

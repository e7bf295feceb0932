"""Collectives measured on real ranks: all-reduce, all-gather and reduce-scatter timed over a
range of message sizes, and the α-β model fitted to each.

:func:`measure_collectives` starts the ranks (:func:`run_ranks`); in each, every (collective,
size) pair is one setting of :func:`time_interleaved`: each call runs between barriers, its time
is the slowest rank's, and the settings take turns in a rotating order, round after round, so a
change in the machine's load hits every size alike. The result is a :class:`CollectiveTable`.

On CPU this is gloo over 127.0.0.1: the "link" is the kernel's loopback and the copies through
memory, nothing like NVLink or InfiniBand. The model and the method are what carry over.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from .._validate import count, flag, positive
from .._validate import flag as _flag
from ._launch import pick_device, run_ranks
from ._ring import COLLECTIVES, AlphaBetaFit, _collective, fit_alpha_beta, ring_bytes

#: 4 KiB .. 16 MiB, x4 apart: latency-bound at the small end, bandwidth-bound at the large end.
#: On the course's 2-core CPU machine, gloo over loopback costs about 0.3-0.5 ms per call and
#: moves about 1 GB/s, so the crossover is a few hundred kB and 16 MiB is well past it.
DEFAULT_SIZES_BYTES = tuple(4096 * 4**k for k in range(7))
_ELEMENT_BYTES = 4  # float32
# torch 2.13 names the tensor forms ``*_single`` and warns on the older ``*_tensor`` names
_TENSOR_FORMS = {"all_gather": "all_gather_single", "reduce_scatter": "reduce_scatter_single"}


@dataclass(frozen=True)
class CollectiveRow:
    """One collective at one size: ``size_bytes`` is the full tensor (all-reduce buffer,
    all-gather output, reduce-scatter input); ``bytes_sent`` what each rank sends in a ring
    (:func:`ring_bytes`); times are the slowest rank's, in seconds, over ``samples`` rounds."""

    collective: str
    size_bytes: int
    bytes_sent: float
    median_s: float
    p25_s: float
    p75_s: float
    samples: int
    times_s: tuple[float, ...] = ()

    @property
    def bus_bandwidth(self) -> float:
        """bytes_sent / median_s, bytes/s: the link speed the ring saw (NCCL-tests' "busbw")."""
        return self.bytes_sent / self.median_s


@dataclass(frozen=True)
class CollectiveTable:
    """Measured collective times, one row per (collective, size), with the run's conditions."""

    rows: tuple[CollectiveRow, ...]
    world_size: int
    device: str
    backend: str
    threads_per_rank: int
    load_average: tuple[float, float, float] | None  # 1, 5, 15 min, at the start; None: not on this OS
    forms: dict[str, str] = field(default_factory=dict)  # the torch.distributed call timed
    carried_out_as: dict[str, list[str]] = field(default_factory=dict)  # backend events seen
    wall_s: float = 0.0  # the whole call, rank start-up included
    notes: tuple[str, ...] = ()

    def collectives(self) -> list[str]:
        """The collectives measured, in the order asked."""
        return list(dict.fromkeys(r.collective for r in self.rows))

    def fit(self, collective: str) -> AlphaBetaFit:
        """The α-β fit of one collective's medians against ``bytes_sent`` (the ring's bytes per
        rank), not ``size_bytes``: then the slope is the link's bandwidth, comparable across
        collectives and world sizes (NCCL-tests' bus bandwidth), not a figure that changes with
        n. The intercept is the call's whole fixed cost: every ring step's latency plus the
        software's overhead; divide by :func:`ring_steps` for a per-message α."""
        _collective(collective)
        rows = [r for r in self.rows if r.collective == collective]
        if not rows:
            raise ValueError(f"{collective} was not measured; measured: {', '.join(self.collectives())}")
        return fit_alpha_beta([r.bytes_sent for r in rows], [r.median_s for r in rows])

    def fits(self) -> dict[str, AlphaBetaFit | str]:
        """:meth:`fit` of every collective measured; a collective whose times give no line (too
        few sizes, or times that do not grow on a busy machine) gets the reason instead."""
        return self._fits()

    def _fits(self) -> dict[str, AlphaBetaFit | str]:
        out: dict[str, AlphaBetaFit | str] = {}
        for c in self.collectives():
            try:
                out[c] = self.fit(c)
            except ValueError as err:  # too few sizes, or times that do not grow: say so
                out[c] = str(err)
        return out

    def __str__(self) -> str:
        load = "n/a" if self.load_average is None else f"{self.load_average[0]:.2f}"
        rounds = sorted({r.samples for r in self.rows})
        lines = [
            f"{', '.join(self.collectives())} on {self.world_size} ranks, {self.backend} on {self.device} "
            f"({self.threads_per_rank} thread(s) per rank), load average {load} at the start; "
            f"slowest rank's time, median of {'/'.join(map(str, rounds))} interleaved rounds, "
            f"{self.wall_s:.1f} s in all",
            f"{'collective':<15}{'size':>10}{'sent/rank':>11}{'median':>11}{'p25':>11}{'p75':>11}"
            f"{'n':>4}{'bus GB/s':>10}",
        ]
        for r in self.rows:
            lines.append(
                f"{r.collective:<15}{_kib(r.size_bytes):>10}{_kib(r.bytes_sent):>11}"
                f"{_t(r.median_s):>11}{_t(r.p25_s):>11}{_t(r.p75_s):>11}{r.samples:>4}"
                f"{r.bus_bandwidth / 1e9:>10.3g}"
            )
        for c, fit in self._fits().items():
            lines.append(f"fit {c} (time vs bytes sent per rank): {fit}")
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)

    def plot(self, ax: Any = None) -> Any:
        """Median time against the tensor's size, log-log, p25–p75 as error bars, and each
        collective's fitted α-β line (through its ring bytes). Returns the axes."""
        import matplotlib.pyplot as plt

        from ..i18n import for_plot, tr

        for_plot()
        if ax is None:
            _, ax = plt.subplots(figsize=(6.5, 4.2))
        fits = self._fits()
        for i, c in enumerate(self.collectives()):
            rows = [r for r in self.rows if r.collective == c]
            colour = f"C{i}"
            x = np.array([r.size_bytes for r in rows], dtype=float)
            y = np.array([r.median_s for r in rows])
            err = np.array([[r.median_s - r.p25_s for r in rows], [r.p75_s - r.median_s for r in rows]])
            ax.errorbar(x, y * 1e6, yerr=err * 1e6, fmt="o", color=colour, capsize=3, label=c)
            fit = fits[c]
            if isinstance(fit, AlphaBetaFit):
                grid = np.geomspace(x.min(), x.max(), 50)
                line = [fit.predict(ring_bytes(c, s, self.world_size)) * 1e6 for s in grid]
                ax.plot(grid, line, "--", color=colour, lw=1, label=tr("{collective}: α-β fit", collective=c))
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(tr("tensor size (bytes)"))
        ax.set_ylabel(tr("time per call (µs), slowest rank"))
        ax.set_title(tr("Collectives on {n} ranks ({backend})", n=self.world_size, backend=self.backend))
        ax.legend(fontsize="small")
        return ax

    def as_dict(self) -> dict[str, Any]:
        """Plain data (JSON-ready): the conditions, every row with its samples, each fit."""
        out = asdict(self)
        out["rows"] = [{**asdict(r), "times_s": list(r.times_s)} for r in self.rows]
        out["load_average"] = None if self.load_average is None else list(self.load_average)
        out["notes"] = list(self.notes)
        out["fits"] = {c: asdict(f) if isinstance(f, AlphaBetaFit) else f for c, f in self._fits().items()}
        return out


def _kib(n: float) -> str:
    return f"{n / 1024:.4g} KiB" if n < 1024**2 else f"{n / 1024**2:.4g} MiB"


def _t(s: float) -> str:
    return f"{s * 1e6:.3g} µs" if s < 1e-3 else f"{s * 1e3:.3g} ms"


def _sizes(sizes_bytes: Sequence[float], world_size: int) -> list[int]:
    """Each size as a whole number of float32 elements that splits evenly over the ranks."""
    step = _ELEMENT_BYTES * world_size
    out: list[int] = []
    for s in sizes_bytes:
        positive(size_bytes=s)
        size = max(step, round(s / step) * step)
        if size not in out:
            out.append(size)
    return out


def measure_collectives(
    sizes_bytes: Sequence[float] | None = None,
    collectives: Sequence[str] = COLLECTIVES,
    world_size: int = 2,
    device: str = "auto",
    repeats: int | None = None,
    max_seconds: float | None = None,
    quick: bool = True,
    timeout_s: float = 180.0,
) -> CollectiveTable:
    """Time each collective at each size on ``world_size`` real ranks (gloo on CPU, NCCL with
    one GPU per rank) and return the table.

    ``sizes_bytes``: full tensor sizes (default 4 KiB to 16 MiB, 7 sizes), rounded to whole
    float32 elements that split evenly over the ranks. ``repeats``: rounds (default 15 when
    ``quick``, else 40); the rounds stop early, after at least 3, once ``max_seconds`` are spent
    timing (default 3 s when ``quick``, else 30 s). On the course's 2-core CPU machine about
    one small-message sample in five takes 3-4 ms instead of ~0.4 ms (a rank waiting for a
    core), so a median needs a dozen rounds or more; the quick default takes about 5 s."""
    _flag(quick=quick)
    flag(quick=quick)
    (world_size,) = count(world_size=world_size)
    if isinstance(collectives, str):
        collectives = [collectives]
    wanted = [_collective(c) for c in collectives]
    if not wanted:
        raise ValueError(f"give at least one collective, from: {', '.join(COLLECTIVES)}")
    if world_size < 2:
        raise ValueError("world_size must be at least 2: a collective on one rank sends nothing")
    dev, most, why = pick_device(device)
    notes = [why]
    if dev == "cuda" and world_size > most:
        raise ValueError(f"world_size={world_size} needs one GPU per rank; {most} visible")
    if dev == "cpu" and world_size > most:
        notes.append(f"{world_size} ranks on {most} CPU cores: ranks share cores, times include waiting")
    sizes = _sizes(DEFAULT_SIZES_BYTES if sizes_bytes is None else list(sizes_bytes), world_size)
    if repeats is None:
        repeats = 15 if quick else 40
    (repeats,) = count(3, repeats=repeats)
    if max_seconds is None:
        max_seconds = 3.0 if quick else 30.0
    positive(max_seconds=max_seconds)
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    began = time.perf_counter()
    results = run_ranks(
        "helpers.distributed._collectives:_time_collectives",
        world_size=world_size,
        device=dev,
        timeout_s=timeout_s,
        sizes_bytes=sizes,
        collectives=list(dict.fromkeys(wanted)),
        repeats=repeats,
        warmup=2,
        max_seconds=max_seconds,
    )
    wall = time.perf_counter() - began
    got = results[0]
    rows = []
    for c in dict.fromkeys(wanted):
        for s in sizes:
            times = [float(t) for t in got["samples"][f"{c}|{s}"]]
            p25, p75 = np.percentile(times, [25, 75])
            rows.append(
                CollectiveRow(
                    c,
                    s,
                    ring_bytes(c, s, world_size),
                    statistics.median(times),
                    float(p25),
                    float(p75),
                    len(times),
                    tuple(times),
                )
            )
    for c, events in got["carried_out_as"].items():
        other = [e for e in events if c not in e]
        if other:
            notes.append(
                f"{c} ran as {', '.join(events)} on {got['backend']}: its bytes_sent is the ring figure "
                f"of {c}, not what this backend sent (an all-reduce sends twice a reduce-scatter's bytes, "
                "so its fitted bandwidth reads lower)"
            )
    for c, form in got["forms"].items():
        if "list" in form:
            notes.append(f"{c}: {got['backend']} lacks {_TENSOR_FORMS[c]}; the list form was timed")
    return CollectiveTable(
        rows=tuple(rows),
        world_size=world_size,
        device=dev,
        backend=got["backend"],
        threads_per_rank=int(got["threads"]),
        load_average=None if load is None else (load[0], load[1], load[2]),
        forms=got["forms"],
        carried_out_as=got["carried_out_as"],
        wall_s=wall,
        notes=tuple(notes),
    )


def _time_collectives(
    rank: int,
    world_size: int,
    device: str,
    sizes_bytes: list[int],
    collectives: list[str],
    repeats: int,
    warmup: int,
    max_seconds: float | None,
) -> dict[str, Any]:
    """Rank target: every (collective, size) timed by :func:`time_interleaved` (rotating order,
    barriers, the slowest rank's time). Rank 0 returns the samples and what was run."""
    import torch
    import torch.distributed as dist

    from ._compare import time_interleaved

    dev = torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else torch.device("cpu")
    forms = {c: _pick_form(c, world_size, dev) for c in collectives}
    steps = {}
    for c in collectives:
        for s in sizes_bytes:
            steps[f"{c}|{s}"] = _call(c, forms[c], s // _ELEMENT_BYTES, world_size, dev)
    carried = _backend_events({c: steps[f"{c}|{sizes_bytes[0]}"] for c in collectives})
    samples = time_interleaved(steps, rounds=repeats, warmup=warmup, max_seconds=max_seconds, device=device)
    if rank != 0:
        return {"rank": rank}  # every rank holds the same samples (the MAX all-reduce)
    return {
        "samples": samples,
        "forms": forms,
        "carried_out_as": carried,
        "backend": str(dist.get_backend()),
        "threads": torch.get_num_threads(),
    }


def _pick_form(collective: str, world_size: int, dev: Any) -> str:
    """The tensor form of all_gather / reduce_scatter when the backend has it, else the list
    form (every rank tries the same call, so all agree)."""
    if collective == "all_reduce":
        return "all_reduce"
    try:
        _call(collective, _TENSOR_FORMS[collective], world_size, world_size, dev)()
        return _TENSOR_FORMS[collective]
    except (RuntimeError, NotImplementedError):  # a backend without the tensor form
        return f"{collective} (list)"


def _call(collective: str, form: str, elements: int, world_size: int, dev: Any) -> Any:
    """A function of no arguments making one call, its tensors made once, up front: zeros, so
    repeated sums stay finite."""
    import torch
    import torch.distributed as dist

    full = torch.zeros(elements, dtype=torch.float32, device=dev)
    if collective == "all_reduce":
        return lambda: dist.all_reduce(full)
    part = torch.zeros(elements // world_size, dtype=torch.float32, device=dev)
    if form in ("all_gather_single", "reduce_scatter_single") and not hasattr(dist, form):
        form = {
            "all_gather_single": "all_gather_into_tensor",
            "reduce_scatter_single": "reduce_scatter_tensor",
        }[form]
    if form in ("all_gather_single", "all_gather_into_tensor"):
        return lambda: getattr(dist, form)(full, part)
    if form in ("reduce_scatter_single", "reduce_scatter_tensor"):
        return lambda: getattr(dist, form)(part, full)
    chunks = list(full.chunk(world_size))
    if collective == "all_gather":
        return lambda: dist.all_gather(chunks, part)
    return lambda: dist.reduce_scatter(part, chunks)


def _backend_events(calls: dict[str, Any]) -> dict[str, list[str]]:
    """The backend's own profiler events of one call of each collective (``gloo:all_reduce``,
    ``nccl:all_gather``...): what the backend really ran."""
    from torch.profiler import ProfilerActivity, profile

    out = {}
    for c, fn in calls.items():
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            fn()
        names = {e.name for e in prof.events() if e.name.startswith(("gloo:", "nccl:"))}
        out[c] = sorted(names)
    return out

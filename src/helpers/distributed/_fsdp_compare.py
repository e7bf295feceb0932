"""FSDP2 settings timed side by side: :func:`compare_fsdp` runs every setting in the same ranks,
times one training step of each in interleaved rounds and reports the bytes each setting held
beside its speed verdict. It holds the rank target (``_compare_rank``) and the result
(:class:`FsdpComparison`); the model, data, training step and byte counts are
:mod:`helpers.distributed._fsdp`'s.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .._validate import count, positive, unknown
from ..i18n import text, tr
from ._compare import compare_settings, time_interleaved
from ._fsdp import SETTING_KEYS, _build, _common, _data, _held_bytes, _setting, _train_step, _unsharded_bytes
from ._launch import run_ranks

# --------------------------------------------------------------------------- speed vs memory


def _compare_rank(
    rank: int,
    world_size: int,
    device: str,
    settings: dict[str, dict[str, Any]],
    layers: int,
    width: int,
    batch: int,
    rounds: int,
    max_seconds: float | None,
    seed: int = 0,
) -> dict[str, Any]:
    """Rank target of :func:`compare_fsdp`: every setting built side by side, bytes measured
    after each one's first step, then interleaved timing of one training step each."""
    import torch

    x, y = _data(1, world_size, batch, width, seed, rank, device)
    steps, held = {}, {}
    for name, setting in settings.items():
        model, opt, _ = _build(layers, width, seed, device, setting)
        # the most unsharded parameter bytes at any layer's end in the first forward: one unit
        # (two with prefetch) per block, the whole model when it is one unit
        during: list[int] = [0]
        hooks = [
            m.register_forward_hook(lambda *_, m=model, seen=during: seen.append(_unsharded_bytes(m)))
            for m in model.modules()
            if isinstance(m, torch.nn.Linear)
        ]
        loss = torch.nn.functional.mse_loss(model(x[0]).float(), y[0])
        for h in hooks:
            h.remove()
        unsharded = _unsharded_bytes(model)
        loss.backward()
        opt.step()
        held[name] = dict(
            _held_bytes(model, opt), unsharded_after_forward=unsharded, unsharded_peak_forward=max(during)
        )
        opt.zero_grad(set_to_none=True)
        steps[name] = lambda m=model, o=opt: _train_step(m, o, x[0], y[0])
    samples = time_interleaved(steps, rounds, warmup=1, max_seconds=max_seconds, device=device)
    return {"samples": samples, "held": held}


@dataclass
class FsdpComparison:
    """:func:`compare_fsdp`'s result: step times per setting (seconds, slowest rank of each
    step), one speed comparison per setting against ``baseline``, and the bytes each rank
    held per setting (as :attr:`FsdpRun.held`)."""

    settings: dict[str, dict[str, Any]]
    baseline: str
    samples: dict[str, list[float]]
    comparisons: dict[str, Any]
    held: dict[str, list[dict[str, int]]]
    meta: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        n = len(next(iter(self.held.values())))
        lines = [
            f"{'setting':<22}{'step ms':>9}  {'vs ' + self.baseline:<34}"
            + "".join(f"{'held r' + str(r) + ' KiB':>15}" for r in range(n))
            + f"{'unsharded KiB: in fwd':>23}{'after fwd':>11}"
        ]
        for name, times in self.samples.items():
            c = self.comparisons.get(name)
            # the verdict words are read, so they are translated
            verdict = tr("baseline") if c is None else text(c.verdict)
            speed = verdict if c is None else f"{c.speedup:.2f}x [{c.low:.2f}, {c.high:.2f}] {verdict}"
            held = self.held[name]
            lines.append(
                f"{name:<22}{statistics.median(times) * 1e3:9.2f}  {speed:<34}"
                + "".join(f"{h['total'] / 1024:15.1f}" for h in held)
                + f"{held[0].get('unsharded_peak_forward', 0) / 1024:23.1f}"
                + f"{held[0]['unsharded_after_forward'] / 1024:11.1f}"
            )
        lines.append(
            f"{self.meta.get('rounds_run', '?')} interleaved rounds on {self.meta.get('device', '?')}; "
            "held = parameters + gradients + optimizer states after one step (measured storages); "
            "unsharded = gathered full parameters on rank 0, the most at any layer's end in the "
            "forward, and what is still there after it."
        )
        return "\n".join(lines)


def compare_fsdp(
    settings: Mapping[str, Mapping[str, Any]],
    baseline: str,
    rounds: int = 10,
    world_size: int = 2,
    layers: int = 4,
    width: int = 256,
    batch: int = 32,
    device: str = "cpu",
    max_seconds: float | None = None,
    min_effect: float = 0.02,
    timeout_s: float = 300.0,
    seed: int = 0,
) -> FsdpComparison:
    """Time FSDP settings side by side in the same ranks, e.g.
    ``{"resharded": {}, "kept": {"reshard_after_forward": False}}`` (keys of each setting:
    ``wrap``, ``reshard_after_forward``, ``prefetch``, ``mixed_precision``; missing ones take
    :func:`record_fsdp`'s defaults). Each setting's step is timed in interleaved rounds
    (:func:`~helpers.distributed._compare.time_interleaved`) and compared with ``baseline``
    (:func:`~helpers.distributed._compare.compare_settings`); each setting's bytes held per rank
    come with it, so memory and speed read as one table."""
    if not isinstance(settings, Mapping) or len(settings) < 2:
        raise ValueError("settings must be a dict of at least two {name: {option: value}} entries")
    built = {}
    for name, options in settings.items():
        extra = set(options) - set(SETTING_KEYS)
        if extra:
            raise unknown("setting option", sorted(extra)[0], SETTING_KEYS)
        built[str(name)] = _setting(**options)
    if baseline not in built:
        raise unknown("baseline", baseline, built)
    (rounds,) = count(rounds=rounds)
    if rounds < 3:
        raise ValueError(f"rounds must be at least 3 (an interval needs 3 pairs), got {rounds}")
    world_size, layers, width, batch, dev = _common(world_size, layers, width, batch, device)
    if max_seconds is not None:
        positive(max_seconds=max_seconds)
    results = run_ranks(
        "helpers.distributed._fsdp_compare:_compare_rank",
        world_size,
        dev,
        timeout_s,
        settings=built,
        layers=layers,
        width=width,
        batch=batch,
        rounds=rounds,
        max_seconds=max_seconds,
        seed=seed,
    )
    samples = results[0]["samples"]
    comparisons = compare_settings(samples, baseline, min_effect, device=dev)
    held = {name: [r["held"][name] for r in results] for name in built}
    meta = {
        "device": dev,
        "rounds_run": len(samples[baseline]),
        "world_size": world_size,
        "layers": layers,
        "width": width,
        "batch": batch,
    }
    return FsdpComparison(built, baseline, samples, comparisons, held, meta)

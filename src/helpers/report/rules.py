"""The capstone's rules, as plain functions of plain numbers (what the exercises ask for).

* :func:`mfu_hfu` — MFU and HFU of a measured row (chapter 2's definitions);
* :func:`compare` — baseline minus tuned, with "improved" read from the interleaved verdict;
* :func:`data_stall` — data time above 20% of compute time is a bottleneck;
* :func:`bottleneck_class` — which part of the step to work on next, from the trace's phases;
* :func:`loss_gap` — how far a change moved the per-step loss curve from the baseline's;
* :func:`decide` — keep or revert a change (loss first, then memory, then speed), and why;
* :func:`derive` — a measured row's derived numbers (throughput, memory, MFU / HFU, data stall,
  bottleneck class, flags; against a baseline: deltas and the keep / revert decision), all
  from the functions here;
* :func:`flags` — what makes a row's numbers doubtful (a saving larger than the phase changed,
  timed and profiled step times that disagree, an untouched phase that moved, a noisy MFU peak,
  a timed run shorter than the loader's queue).

Every function takes numbers or dicts of numbers, so recorded measurements can be checked
against them without running anything.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._validate import flag as _flag
from .._validate import unknown

STALL_THRESHOLD = 0.2  # data time above 20% of compute time is a bottleneck
#: A change meant only for speed may move the per-step loss curve (mean absolute gap to the
#: baseline's, step by step) by at most this share of what the baseline learned over the run.
#: Measured on the quick CPU baseline (seeded, same batches): bf16 moves it by 0.0002 nats, no_sync,
#: workers, fused and checkpointing by less than 0.0001; a slipped learning rate (0.3x) by 0.65
#: nats and another seed by 0.06, against 1.9 nats learned: 5 % (0.1 nats) keeps the first group and
#: stops the slipped learning rate (``python -m helpers.report curves`` prints these figures).
LOSS_CURVE_SHARE = 0.05
LOSS_TOLERANCE = 0.02  # rows without a loss curve: the loss after N steps within 2% of the baseline's

#: What to try next for each bottleneck class (the usual first fix for each).
NEXT_ACTIONS = {
    "data-bound": "more DataLoader workers, pinned memory, prefetching or caching samples",
    "compute-bound": "mixed precision (bf16), torch.compile / fused kernels, fewer syncs",
    "optimizer-bound": "a fused optimizer, fewer parameters to update (LoRA / adapters)",
    "host-bound": "remove per-step syncs (.item()), fewer and larger kernels (torch.compile), CUDA graphs",
}
PHASES = ("data", "forward", "backward", "optimizer", "other")


def memory_mb(row: Mapping[str, Any]) -> float | None:
    """A row's memory figure: CUDA peak allocated when measured, else bytes saved for backward."""
    peak = row.get("peak_mem_mb")
    return peak if peak is not None else row.get("saved_mb")


def mfu_hfu(row: Mapping[str, Any], peak_flops_per_device: float) -> tuple[float, float]:
    """(MFU, HFU) of a row: model and executed FLOPs per step over
    (median step time · devices · peak)."""
    seconds = row["step_time_ms"] / 1e3
    denominator = seconds * row.get("num_devices", 1) * peak_flops_per_device
    if not denominator > 0:
        raise ValueError("step time, devices and peak must be positive")
    return row["model_flops"] / denominator, row["executed_flops"] / denominator


def compare(baseline: Mapping[str, Any], tuned: Mapping[str, Any]) -> dict[str, Any]:
    """Baseline minus tuned (positive = tuned is faster / smaller).

    ``time_improved`` reads the verdict of the interleaved comparison the tuner ran
    (``tuned["speed"]``, :func:`helpers.bench.compare_windows`): ``True`` for "faster", ``False``
    for "slower" or "within noise". That verdict is about the configuration the change was tried
    on, so it answers only when ``tuned["tried_on"]`` is ``baseline``'s name; otherwise (or for a
    row measured alone) it is ``None``: two medians measured apart cannot say which is faster.
    Memory is deterministic: any saving counts. A memory figure that is missing on either side
    gives ``None`` delta and flag, never a zero.
    """
    time_delta = baseline["step_time_ms"] - tuned["step_time_ms"]
    base_mem, tuned_mem = memory_mb(baseline), memory_mb(tuned)
    mem_delta = None if base_mem is None or tuned_mem is None else base_mem - tuned_mem
    speed = tuned.get("speed")
    same_pair = (
        speed is not None
        and tuned.get("tried_on") is not None
        and tuned.get("tried_on") == baseline.get("name")
    )
    return {
        "step_time_delta_ms": time_delta,
        "memory_delta_mb": mem_delta,
        "time_improved": speed["verdict"] == "faster" if same_pair and speed is not None else None,
        "memory_improved": None if mem_delta is None else mem_delta > 0,
    }


def data_stall(
    data_ms: list[float], compute_ms: list[float], threshold: float = STALL_THRESHOLD
) -> tuple[float, bool]:
    """(total data time / total compute time, stalled) over the same steps; stalled when the
    ratio is above ``threshold`` (strictly)."""
    if len(data_ms) != len(compute_ms) or not data_ms:
        raise ValueError("give one data time and one compute time per step (at least one step)")
    compute = sum(compute_ms)
    if not compute > 0:
        raise ValueError("total compute time must be positive")
    ratio = sum(data_ms) / compute
    return ratio, ratio > threshold


def bottleneck_class(phases: Mapping[str, float], threshold: float = STALL_THRESHOLD) -> str:
    """The bottleneck of a step from its phases in ms (data, forward, backward, optimizer,
    other = the rest of the step: host work, syncs, launch gaps).

    Data first (a common rule: data above ``threshold`` × compute, compute = forward +
    backward + optimizer); otherwise the largest of forward + backward ("compute-bound"),
    optimizer ("optimizer-bound") and other ("host-bound").
    """
    missing = [p for p in PHASES if p not in phases]
    if missing:
        raise KeyError(f"phases lack {missing}; give {', '.join(PHASES)} in ms")
    compute = phases["forward"] + phases["backward"] + phases["optimizer"]
    if phases["data"] > threshold * compute:
        return "data-bound"
    parts = {
        "compute-bound": phases["forward"] + phases["backward"],
        "optimizer-bound": phases["optimizer"],
        "host-bound": phases["other"],
    }
    return max(parts, key=parts.__getitem__)


LOSS_CURVE_TAIL = 5  # the loss "after N steps" is the mean of the last 5 steps' losses


def loss_gap(baseline: Mapping[str, Any], row: Mapping[str, Any]) -> tuple[float, float]:
    """(gap, tolerance) between a row's training and the baseline's, in nats.

    With per-step loss curves on both rows (``loss_curve``, the same seeded batches): the mean
    absolute difference, step by step, and :data:`LOSS_CURVE_SHARE` of what the baseline learned
    (its first step's loss minus its loss after N steps). Without curves: the difference of the
    losses after N steps and :data:`LOSS_TOLERANCE` of the baseline's."""
    base_curve, curve = baseline.get("loss_curve"), row.get("loss_curve")
    if base_curve and curve:
        n = min(len(base_curve), len(curve))
        gap = sum(abs(a - b) for a, b in zip(curve[:n], base_curve[:n], strict=True)) / n
        tail = base_curve[-LOSS_CURVE_TAIL:]
        learned = base_curve[0] - sum(tail) / len(tail)
        return gap, LOSS_CURVE_SHARE * abs(learned)
    return abs(row["loss"] - baseline["loss"]), LOSS_TOLERANCE * abs(baseline["loss"])


def moved_training(baseline: Mapping[str, Any], row: Mapping[str, Any]) -> bool:
    """Did ``row``'s change move training beyond the tolerance of :func:`loss_gap`? ``False`` for a
    row with neither a loss curve nor a loss (nothing to judge by)."""
    if not (row.get("loss_curve") and baseline.get("loss_curve")) and (
        row.get("loss") is None or baseline.get("loss") is None
    ):
        return False
    gap, tolerance = loss_gap(baseline, row)
    return gap > tolerance


#: Why :func:`decide_why` keeps or reverts a change.
REASONS = ("loss", "too big", "fits now", "faster", "not faster")


def decide_why(
    loss_moved: bool,
    memory_before_mb: float | None,
    memory_after_mb: float | None,
    faster: bool,
    memory_budget_mb: float | None = None,
) -> tuple[str, str]:
    """(decision, reason): "keep" or "revert" a change, and the test that decided it, in order:

    1. training moved (``loss_moved``, :func:`loss_gap` above its tolerance) -> revert, "loss";
    2. with a memory budget: the change does not fit -> revert, "too big"; it makes a run fit that
       did not fit before -> keep, "fits now" (even if slower);
    3. otherwise keep a change that is faster beyond noise ("faster"), revert the rest ("not faster").
    """
    _flag(loss_moved=loss_moved, faster=faster)
    if loss_moved:
        return "revert", "loss"
    if memory_budget_mb is not None and memory_after_mb is not None:
        if memory_after_mb > memory_budget_mb:
            return "revert", "too big"
        if memory_before_mb is not None and memory_before_mb > memory_budget_mb:
            return "keep", "fits now"
    return ("keep", "faster") if faster else ("revert", "not faster")


def decide(
    loss_moved: bool,
    memory_before_mb: float | None,
    memory_after_mb: float | None,
    faster: bool,
    memory_budget_mb: float | None = None,
) -> str:
    """ "keep" or "revert" a change (:func:`decide_why` without the reason)."""
    _flag(loss_moved=loss_moved, faster=faster)
    return decide_why(loss_moved, memory_before_mb, memory_after_mb, faster, memory_budget_mb)[0]


#: The phases of the step each capstone change acts on (the rest should not move).
TOUCHES = {
    "no_sync": ("other",),
    "workers": ("data",),
    "bf16": ("forward", "backward"),
    # a fused optimizer also removes the per-parameter launches and host work between the
    # optimizer's kernels, which a GPU trace files under "other" (the gaps between ranges' kernels)
    "fused": ("optimizer", "other"),
    "checkpoint": ("forward", "backward"),
    "compile": ("forward", "backward", "optimizer", "other"),
}
FLAG_SHARE = 0.2  # timed vs profiled, and an untouched phase, may differ by this much
PEAK_SPREAD_LIMIT = 0.2  # a measured peak whose runs spread more than this gives no trustworthy MFU
QUEUE_RUNS = 3  # a timed run should last at least this many times the loader's queue
DATA_WAIT_SHARE = 0.05  # a data wait above this share of the step is one a verdict must see
WIDE_INTERVAL = 1.5  # an interval whose high end is more than 1.5x its low end is too wide to act on


def speedup_bound(previous: Mapping[str, Any], change: str) -> float:
    """The largest speed-up ``change`` can give the configuration ``previous``: its step time
    over the step time left when the phases the change acts on take no time at all (Amdahl's
    law); ``inf`` when those phases are the whole step."""
    step = previous["step_time_ms"]
    left = step - room_ms(previous["phases_ms"], change)
    return step / left if left > 0 else float("inf")


def flags(row: Mapping[str, Any], previous: Mapping[str, Any] | None = None) -> list[str]:
    """What makes a row's numbers doubtful, one short sentence each (empty: nothing found).

    * timed and profiled step time differ by more than 20 % (the profiler's own cost, or a
      busy machine: the two measurements did not see the same steps);
    * a measured MFU peak whose runs spread more than 20 % (the denominator is not stable), or
      an MFU above 100 % (the peak is wrong);
    * a timed run shorter than 3 × workers × prefetch_factor steps (the loader's queue, filled
      before timing, can hide a slow loader);
    * an interleaved verdict whose windows are shorter than 3 × that queue while the row's own
      timed run waited for data (more than 5 % of the step): the other side's turn refills the
      queue, so the verdict may not see that wait;
    * given the row it was tried on: a saving larger than the time of the phases the change acts
      on (:data:`TOUCHES`), or a phase it does not act on moving by more than 20 % of itself and
      5 % of the step;
    * given that row and an interleaved verdict: the two medians, timed apart, pointing the other
      way (the load changed between the runs; the verdict is the comparison to read); an interval
      whose low end is above what removing the phases the change acts on allows
      (:func:`speedup_bound`); an interval too wide to act on (:data:`WIDE_INTERVAL`).
    """
    out = []
    timed, phases = row["step_time_ms"], row["phases_ms"]
    profiled = sum(phases[p] for p in PHASES)
    if timed > 0 and abs(profiled - timed) > FLAG_SHARE * timed:
        out.append(
            f"timed step {timed:.2f} ms vs profiled {profiled:.2f} ms: more than {FLAG_SHARE:.0%} apart"
        )
    if row.get("mfu") is not None and row["mfu"] > 1:
        out.append(
            f"MFU {row['mfu']:.0%}: above 100 %, so the {row.get('peak_kind', '')} peak is below what "
            "the step reached and cannot be its denominator"
        )
    spread = row.get("peak_spread")
    if row.get("peak_kind") == "measured" and spread is not None and spread > PEAK_SPREAD_LIMIT:
        out.append(f"the measured peak's runs spread {spread:.0%}: MFU is not reliable")
    cfg = row.get("config") or {}
    workers, prefetch = cfg.get("workers", 0), cfg.get("prefetch_factor", 2)
    timed_steps = cfg.get("windows", 0) * cfg.get("steps_per_window", 0)
    if workers and timed_steps < QUEUE_RUNS * workers * prefetch:
        out.append(
            f"{timed_steps} timed steps against a loader queue of {workers} × {prefetch} batches: "
            "a slow loader can hide behind the queue"
        )
    window = (row.get("speed") or {}).get("window_steps")
    waited = row.get("data_wait_ms") or 0.0
    if (
        workers
        and window is not None
        and window < QUEUE_RUNS * workers * prefetch
        and timed > 0
        and waited > DATA_WAIT_SHARE * timed
    ):
        out.append(
            f"the verdict's windows of {window} steps are shorter than {QUEUE_RUNS} × the loader's "
            f"queue of {workers} × {prefetch} batches, and the timed run waited {waited:.2f} ms per "
            "step for data: the verdict may not see that wait"
        )
    touched = TOUCHES.get(row.get("name", ""))
    if previous is not None and touched is not None:
        before = previous["phases_ms"]
        saving = previous["step_time_ms"] - timed
        room = sum(before[p] for p in touched)
        if saving > room:
            out.append(
                f"saved {saving:.2f} ms, more than the {room:.2f} ms of {' + '.join(touched)} it acts on"
            )
        for p in PHASES:
            moved = phases[p] - before[p]
            if (
                p not in touched
                and abs(moved) > FLAG_SHARE * before[p]
                and abs(moved) > 0.05 * previous["step_time_ms"]
            ):
                out.append(f"{p} moved {moved:+.2f} ms though the change does not act on it")
    speed = row.get("speed") or {}
    low, high = speed.get("low"), speed.get("high")
    if previous is not None and touched is not None and low is not None:
        bound = speedup_bound(previous, row["name"])
        if low > bound:
            out.append(
                f"even the interval's low end ({low:.2f}x) is above the {bound:.2f}x that removing all of "
                f"{' + '.join(touched)} would give: the comparison saw more than the change"
            )
    if low is not None and high is not None and low > 0 and high / low > WIDE_INTERVAL:
        out.append(
            f"the 95 % interval {low:.2f}x–{high:.2f}x is too wide to act on (high end more than "
            f"{WIDE_INTERVAL:g} times the low end): measure again with more pairs, on a quieter machine"
        )
    verdict = speed.get("verdict")
    if previous is not None and verdict in ("faster", "slower"):
        before = previous["step_time_ms"]
        if (verdict == "faster") != (timed < before):
            out.append(
                f"timed apart, the medians ({before:.2f} -> {timed:.2f} ms) disagree with the "
                f"interleaved verdict '{verdict}': the load changed between the runs; read the "
                "verdict"
            )
    return out


def derive(
    row: dict[str, Any],
    baseline: dict[str, Any] | None = None,
    previous: dict[str, Any] | None = None,
    loss_tolerance: float | None = None,
    memory_budget_mb: float | None = None,
) -> dict[str, Any]:
    """Fill a row's derived numbers from its measured ones (and, given the baseline and the
    configuration it was tried on, its deltas and the keep / revert decision)."""
    out = dict(row)
    tokens = out["batch_size"] * out["seq_len"]
    seconds = out["step_time_ms"] / 1e3
    out["samples_per_s"] = out["batch_size"] / seconds
    out["tokens_per_s"] = tokens / seconds
    out["memory_mb"] = memory_mb(out)
    out["mfu"], out["hfu"] = mfu_hfu(out, out["peak_flops"])
    steps = out["phase_steps_ms"]
    out["data_ratio"], out["stalled"] = data_stall(
        [s["data"] for s in steps], [s["forward"] + s["backward"] + s["optimizer"] for s in steps]
    )
    out["bottleneck"] = bottleneck_class(out["phases_ms"])
    out["flags"] = flags(out, previous)
    if baseline is not None:
        gap, tolerance = loss_gap(baseline, out)
        out["loss_gap"] = gap
        out["loss_tolerance"] = tolerance if loss_tolerance is None else loss_tolerance
        out["loss_change"] = out["loss"] - baseline["loss"]
        out["vs_baseline"] = compare(baseline, out)
        ref = previous or baseline
        out["vs_previous"] = compare(ref, out)
        if previous is not None:
            # faster = the interleaved verdict against the configuration it was tried on (compare
            # reads it); a row with no such verdict is not faster: medians timed apart cannot say
            faster = out["vs_previous"]["time_improved"] is True
            out["faster"] = faster
            out["decision"], out["reason"] = decide_why(
                gap > out["loss_tolerance"], memory_mb(previous), out["memory_mb"], faster, memory_budget_mb
            )
    return out


# --------------------------------------------------------------------------- judgement
#: The part of the step each bottleneck class sits in.
BOTTLENECK_PHASES = {
    "data-bound": ("data",),
    "compute-bound": ("forward", "backward"),
    "optimizer-bound": ("optimizer",),
    "host-bound": ("other",),
}
#: The usual fixes for each bottleneck class, as capstone change names (the chapter's table).
FIXES = {
    "data-bound": ("workers",),
    "compute-bound": ("bf16", "compile"),
    "optimizer-bound": ("fused", "compile"),
    "host-bound": ("no_sync", "compile"),
}
#: Changes that buy memory with time (tried when the kept configuration does not fit its budget).
MEMORY_FIXES = ("checkpoint",)
#: What :func:`doubt` answers.
DOUBTS = ("ok", "larger than the phase", "not faster")


def bottleneck_phase(phases: Mapping[str, float], threshold: float = STALL_THRESHOLD) -> tuple[str, str]:
    """(bottleneck class, the phase of the step it sits in): ``data`` for data-bound, the
    larger of ``forward`` and ``backward`` for compute-bound, ``optimizer``, or ``other``."""
    label = bottleneck_class(phases, threshold)
    if label == "compute-bound":
        return label, "backward" if phases["backward"] >= phases["forward"] else "forward"
    return label, BOTTLENECK_PHASES[label][0]


def room_ms(phases: Mapping[str, float], change: str) -> float:
    """The most ``change`` can save: the time of the phases it acts on (:data:`TOUCHES`)."""
    if change not in TOUCHES:
        raise unknown("change", change, TOUCHES)
    return sum(phases[p] for p in TOUCHES[change])


def doubt(row: Mapping[str, Any], previous: Mapping[str, Any]) -> str:
    """Does a row's claim to have saved time stand? ``"larger than the phase"`` when the
    saving (``previous`` median minus this row's) is more than the time of the phases the
    change acts on in ``previous`` (the configuration it changed); else ``"not faster"`` when the
    interleaved verdict is not "faster"; else ``"ok"``."""
    saving = previous["step_time_ms"] - row["step_time_ms"]
    if saving > room_ms(previous["phases_ms"], row["name"]):
        return "larger than the phase"
    if (row.get("speed") or {}).get("verdict") != "faster":
        return "not faster"
    return "ok"


def kept_row(rows: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The configuration kept at the end of a tuning report (rows with their decisions)."""
    kept = [r for r in rows if r.get("decision") in ("baseline", "keep")]
    if not kept:
        raise ValueError("no row was kept: the first row of a report is its baseline")
    return kept[-1]


def over_budget(row: Mapping[str, Any], memory_budget_mb: float | None) -> bool:
    """Does a row's memory (:func:`memory_mb`) exceed the budget? Never without a budget."""
    mem = memory_mb(row)
    return memory_budget_mb is not None and mem is not None and mem > memory_budget_mb


def next_actions_for(
    rows: Sequence[Mapping[str, Any]],
    memory_budget_mb: float | None = None,
    threshold: float = STALL_THRESHOLD,
    beyond_bottleneck: bool = False,
    retry_not_faster: bool = False,
) -> tuple[str, ...]:
    """The changes worth trying next on the kept configuration, most direct first: activation
    checkpointing when it does not fit the memory budget, then the fixes of its bottleneck
    (:data:`FIXES`). Left out: changes it already holds, changes already tried on it, changes
    that moved training (:func:`loss_gap`), which no context can mend, and changes reverted as not
    faster. A change reverted only because it did not fit the budget is worth a new try: the
    configuration it would join has changed. ``retry_not_faster=True`` also gives changes reverted
    as not faster on an earlier configuration a new try (a reading that is just as fair, though
    slower to run). ``beyond_bottleneck=True``: the fixes of the other parts of the step instead,
    the part with the most time first (where a tuner goes once the bottleneck's own fixes are
    spent). Empty when nothing is left."""
    _flag(beyond_bottleneck=beyond_bottleneck, retry_not_faster=retry_not_faster)
    kept = kept_row(rows)
    base = rows[0]
    phases = kept["phases_ms"]
    label = bottleneck_class(phases, threshold)
    fixes = (MEMORY_FIXES if over_budget(kept, memory_budget_mb) else ()) + FIXES[label]
    if beyond_bottleneck:
        others = sorted(
            (c for c in FIXES if c != label),
            key=lambda c: -sum(phases[p] for p in BOTTLENECK_PHASES[c]),
        )
        fixes = tuple(f for c in others for f in FIXES[c])
    out = {r["name"] for r in rows if r.get("decision") == "keep" or r.get("tried_on") == kept["name"]}
    for r in rows[1:]:
        if moved_training(base, r):
            out.add(r["name"])  # no later configuration mends that
        elif r.get("decision") == "revert" and not over_budget(r, memory_budget_mb) and not retry_not_faster:
            out.add(r["name"])
    left = tuple(c for c in dict.fromkeys(fixes) if c not in out)
    fits_first = tuple(c for c in left if c in MEMORY_FIXES)
    return fits_first or left  # a configuration that does not fit: make it fit before anything else


def acceptable_next_actions(
    rows: Sequence[Mapping[str, Any]], memory_budget_mb: float | None = None
) -> tuple[str | None, ...]:
    """Every next action a careful reader may name for a report: one of :func:`next_actions_for`
    under either reading of a change reverted as not faster (try it again on a changed
    configuration, or not), or ``None`` when one reading leaves nothing to try."""
    strict = next_actions_for(rows, memory_budget_mb)
    loose = next_actions_for(rows, memory_budget_mb, retry_not_faster=True)
    return tuple(dict.fromkeys(strict + loose + ((None,) if not strict or not loose else ())))


def report_findings(
    rows: Sequence[Mapping[str, Any]],
    next_action: str | None = None,
    memory_budget_mb: float | None = None,
) -> dict[str, Any]:
    """A report's findings as fields: the kept configuration's ``bottleneck``, ``evidence_ms``
    (its time per step in the part of the step the bottleneck names), a ``next_action`` (the
    first of :func:`next_actions_for`, or the one given; ``None`` when none is left) and
    ``expected_gain_ms`` (the most that action can save, :func:`room_ms`; 0 without one, and 0 for
    a change that buys memory with time, :data:`MEMORY_FIXES`)."""
    phases = kept_row(rows)["phases_ms"]
    label = bottleneck_class(phases)
    choices = next_actions_for(rows, memory_budget_mb)
    action = next_action if next_action is not None else (choices[0] if choices else None)
    return {
        "bottleneck": label,
        "evidence_ms": sum(phases[p] for p in BOTTLENECK_PHASES[label]),
        "next_action": action,
        # checkpointing buys memory with time: it can save no time at all
        "expected_gain_ms": room_ms(phases, action) if action and action not in MEMORY_FIXES else 0.0,
    }


def kept_changes(rows: Sequence[Mapping[str, Any]], memory_budget_mb: float | None = None) -> list[str]:
    """The changes a tuning run keeps, in order: each row after the baseline was tried on the
    configuration named in ``row["tried_on"]`` (the latest row of that name) and is decided by
    :func:`decide` (training unmoved, :func:`loss_gap`; then the memory budget; then the
    interleaved verdict)."""
    base = rows[0]
    by_name = {base["name"]: base}
    kept = []
    for row in rows[1:]:
        previous = by_name[row["tried_on"]]
        faster = (row.get("speed") or {}).get("verdict") == "faster"
        moved = moved_training(base, row)
        if decide(moved, memory_mb(previous), memory_mb(row), faster, memory_budget_mb) == "keep":
            kept.append(row["name"])
        by_name[row["name"]] = row
    return kept


def check_findings(
    rows: Sequence[Mapping[str, Any]],
    stated: Mapping[str, Any],
    rtol: float = 0.01,
    memory_budget_mb: float | None = None,
) -> list[str]:
    """What is wrong with findings someone wrote about a report (empty: every field agrees with
    the rows). The bottleneck must be the kept configuration's, the evidence its time in that
    part of the step, the next action one of :func:`next_actions_for` (or ``None`` when none is
    left) and the expected gain what that action can save at most (:func:`room_ms`)."""
    want = report_findings(rows, memory_budget_mb=memory_budget_mb)
    fields = ("bottleneck", "evidence_ms", "next_action", "expected_gain_ms")
    missing = [f for f in fields if f not in stated]
    if missing:
        return [f"missing field(s): {', '.join(missing)}"]
    out = []
    if stated["bottleneck"] != want["bottleneck"]:
        out.append(f"bottleneck {stated['bottleneck']!r}: the kept configuration is {want['bottleneck']}")
    if not _close(stated["evidence_ms"], want["evidence_ms"], rtol):
        out.append(f"evidence {stated['evidence_ms']!r} ms: the data says {want['evidence_ms']:.2f} ms")
    choices = acceptable_next_actions(rows, memory_budget_mb)
    action = stated["next_action"]
    if action not in choices:
        allowed = ", ".join(str(c) for c in choices)
        out.append(f"next action {action!r}: choose from {allowed}")
    elif not _close(stated["expected_gain_ms"], report_findings(rows, action)["expected_gain_ms"], rtol):
        out.append(
            f"expected gain {stated['expected_gain_ms']!r} ms: {action} can save at most "
            f"{report_findings(rows, action)['expected_gain_ms']:.2f} ms"
        )
    return out


def _close(got: Any, want: float, rtol: float) -> bool:
    number = isinstance(got, (int, float)) and not isinstance(got, bool)
    return number and abs(got - want) <= rtol * abs(want) + 1e-9

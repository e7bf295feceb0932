"""The performance report (experiment, hardware, config, throughput, trace findings,
next action), written as Markdown + JSON + a plot, and
read back.

Sections: experiment, hardware, config, parallel, throughput (the baseline / tuned comparison
table, one row per configuration tried), trace findings, next action. ``report.json`` holds
every measured number; the derived ones (MFU, deltas, flags, bottleneck class) are
recomputed from them by :func:`helpers.report.derive`, and the table is formatted from the
rows, so :func:`read_report` gives back the same table that ``report.md`` shows.
"""

from __future__ import annotations

import json
import platform
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from .. import i18n
from .._validate import flag as _flag
from .._validate import unknown
from ..bench import min_pairs_for
from ..i18n import text, tr
from . import rules
from .provenance import header_line, provenance

COLUMNS = (
    "step",
    "change",
    "step time ms median [min–max]",
    "samples/s",
    "tokens/s",
    "memory MiB",
    "loss",
    "MFU",
    "HFU",
    "vs baseline",
    "faster",
    "bottleneck",
    "decision",
    "notes",
)
RECORDED = {  # name -> file in helpers/data (see capstone_recorded_README.md)
    "cpu-quick": "capstone_recorded_cpu-quick.json",
    "cpu-full": "capstone_recorded_cpu-full.json",
}


#: Headers that are also words with another sense ("step" an axis, "faster" a verdict): another
#: language names these columns by what they hold, through these catalogue keys.
_HEADER_KEYS = {"step": "step (column: the configuration)", "faster": "faster (column: the verdict)"}


def column_names() -> list[str]:
    """The table's header (:data:`COLUMNS`) in the current language."""
    if i18n.language() == "en":
        return list(COLUMNS)
    return [text(_HEADER_KEYS.get(column, column)) for column in COLUMNS]


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def _notes(row: dict[str, Any]) -> str:
    notes = []
    if row["first_step_ms"] > 5 * row["step_time_ms"]:
        notes.append(f"first step {row['first_step_ms'] / 1e3:.2f} s")
    if row["stalled"]:
        notes.append(f"data stall: data {row['data_ratio']:.0%} of compute")
    if row["hfu"] > row["mfu"] * 1.05:
        notes.append("HFU > MFU: recomputed forward")
    if row.get("reason") == "loss":
        notes.append("training moved: loss curve outside tolerance")
    elif row.get("reason") == "too big":
        notes.append("over the memory budget")
    elif row.get("reason") == "fits now":
        notes.append("kept: makes the run fit the memory budget")
    notes += [f"check: {f}" for f in row.get("flags", [])]
    return "; ".join(text(note) for note in notes)


def table_row(row: dict[str, Any]) -> list[str]:
    """One row of the comparison table, as the strings the Markdown shows."""
    mem_kind = "peak" if row.get("peak_mem_mb") is not None else "saved"
    vs = row.get("vs_baseline") or {}
    delta = vs.get("step_time_delta_ms")
    return [
        row["name"],
        text(row["change"]),
        f"{row['step_time_ms']:.2f} [{row['step_time_min_ms']:.2f}–{row['step_time_max_ms']:.2f}]",
        f"{row['samples_per_s']:,.1f}",
        _with_range(row["tokens_per_s"], row, "{:,.0f}"),
        text(f"{row['memory_mb']:.2f} ({mem_kind})"),
        f"{row['loss']:.4f}",
        _with_range(row["mfu"], row, "{:.1%}"),
        _pct(row["hfu"]),
        "—" if delta is None or row.get("decision") == "baseline" else f"{delta:+.2f} ms",
        "—" if row.get("decision") == "baseline" else speed_cell(row),
        row["bottleneck"],
        text(row.get("decision", "")),  # keep / revert / baseline: words the reader reads
        _notes(row),
    ]


def _with_range(value: float | None, row: dict[str, Any], fmt: str) -> str:
    """A per-second figure (inversely proportional to step time) with the range the row's
    slowest and fastest timed windows give: how much the windows alone move it."""
    if value is None:
        return "n/a"
    lo_ms, hi_ms, med = row.get("step_time_max_ms"), row.get("step_time_min_ms"), row["step_time_ms"]
    if not lo_ms or not hi_ms:
        return fmt.format(value)
    low, high = value * med / lo_ms, value * med / hi_ms
    return f"{fmt.format(value)} [{fmt.format(low)}–{fmt.format(high)}]"


def speed_cell(row: dict[str, Any]) -> str:
    """The 'faster' cell: the verdict against the configuration the change was tried on, with the
    speed-up and its 95 % interval; a row recorded before interleaved comparisons says which rule
    it was decided by."""
    speed = row.get("speed")
    if speed:
        shown = f"{speed['speedup']:.2f}x, {speed['low']:.2f}–{speed['high']:.2f}"
        if speed.get("pairs") is not None and speed["pairs"] < min_pairs_for(0.95):
            return text(
                f"too few pairs to tell ({speed['pairs']}; range {speed['low']:.2f}–{speed['high']:.2f})"
            )
        return f"{text(speed['verdict'])} ({shown})"
    if row.get("decision") in (None, "baseline"):
        return "—"
    return (
        "yes" if row.get("faster") else "no"
    ) + " (recorded before interleaved comparisons: median vs fastest window)"


def format_row(row: dict[str, Any]) -> str:
    """A few lines about one measured row, for a notebook."""
    p = row["phases_ms"]
    mem = f"CUDA peak {row['peak_mem_mb']:.1f} MiB, " if row.get("peak_mem_mb") is not None else ""
    lines = [
        f"{row['name']}: {row['change']}",
        f"  step {row['step_time_ms']:.2f} ms (median of {len(row['step_time_samples_ms'])} windows; "
        f"min {row['step_time_min_ms']:.2f}, max {row['step_time_max_ms']:.2f}; first step "
        f"{row['first_step_ms']:.0f} ms) | {row['samples_per_s']:,.1f} samples/s | "
        f"{row['tokens_per_s']:,.0f} tokens/s",
        f"  memory: {mem}saved for backward {row['saved_mb']:.2f} MiB | loss after "
        f"{row['loss_steps']} steps {row['loss']:.4f} | MFU {row['mfu']:.2%}, HFU {row['hfu']:.2%} "
        f"({row['precision']} peak {row['peak_flops'] / 1e12:.3g} TFLOP/s, {row['peak_kind']})",
        f"  trace, ms per step: data {p['data']:.2f}, forward {p['forward']:.2f}, backward "
        f"{p['backward']:.2f}, optimizer {p['optimizer']:.2f}, other {p['other']:.2f} -> "
        f"{row['bottleneck']} (data / compute {row['data_ratio']:.0%})",
    ]
    if row.get("decision") not in (None, "baseline"):
        vs = row["vs_previous"]
        verdict = speed_cell(row)
        if row.get("why"):
            lines.insert(1, f"  why: {row['why']}")
        lines.append(
            f"  vs {row.get('tried_on', 'previous')}: {vs['step_time_delta_ms']:+.2f} ms (medians); "
            f"interleaved: {verdict}"
            f"; loss curve gap {row['loss_gap']:.4f} nats (tolerance {row['loss_tolerance']:.4f})"
            f" -> {row['decision'].upper()} ({text(row.get('reason', ''))})"
        )
        if row.get("speed"):
            lines.append(f"  {row['speed']['sentence']}")
        lines += [f"  check: {flag}" for flag in row.get("flags", [])]
    return "\n".join(lines)


@dataclass
class Report:
    """A performance report: what was run, on what, the table, what the traces say, what next."""

    experiment: str
    hardware: dict[str, Any]
    config: dict[str, Any]
    parallel: str
    rows: list[dict[str, Any]]
    trace_findings: list[str] = field(default_factory=list)
    next_action: list[str] = field(default_factory=list)
    recorded: dict[str, Any] = field(default_factory=dict)  # when, where, by what command
    analyst_findings: dict[str, Any] | None = None  # bottleneck, evidence, expected gain, next action
    control: dict[str, Any] | None = None  # the A/A row: the baseline timed against itself
    memory_budget_mb: float | None = None

    def findings_problems(self) -> list[str]:
        """What the analyst's findings get wrong about these rows (:func:`rules.check_findings`)."""
        if self.analyst_findings is None:
            return ["no findings written yet"]
        return rules.check_findings(self.rows, self.analyst_findings, memory_budget_mb=self.memory_budget_mb)

    @property
    def baseline(self) -> dict[str, Any]:
        return self.rows[0]

    @property
    def tuned(self) -> dict[str, Any]:
        """The last configuration kept."""
        kept = [r for r in self.rows if r.get("decision") in ("baseline", "keep")]
        return kept[-1]

    def table(self) -> list[list[str]]:
        """The comparison table: the header, then one list of cell strings per row."""
        return [column_names()] + [table_row(r) for r in self.rows]

    def to_markdown(self) -> str:
        hw, cfg = self.hardware, self.config
        lines = [
            f"# Performance report: {self.experiment}",
            "",
            "```",
            f"experiment: {self.experiment}",
            f"hardware: {hw['num_devices']}x {hw['device_name']}; peaks: "
            + "; ".join(
                f"{k} {v['flops'] / 1e12:.4g} TFLOP/s ({v['kind']}: {v['source']})"
                for k, v in hw["peaks"].items()
            ),
            f"config: {cfg['describe']}",
            f"parallel: {self.parallel}",
            header_line({"torch": hw.get("torch"), **self.recorded}),
            "```",
            "",
            "## Throughput",
            "",
            "Training must not move: each change's per-step loss curve (same seed, same batches) "
            f"stays within {rules.LOSS_CURVE_SHARE:.0%} of what the baseline learned over the run "
            f"(mean absolute gap, step by step; the baseline went from {_first_loss(self.baseline)} "
            f"to {self.baseline['loss']:.4f} after {self.baseline['loss_steps']} steps). "
            "'faster' is the verdict of an interleaved comparison with the configuration the "
            "change was tried on (speed-up, 95 % interval): faster, slower or within noise; "
            "only 'faster' keeps a change. tokens/s and MFU: the median window, and [slowest–"
            "fastest] window. Memory: 'peak' = CUDA peak allocated, 'saved' = bytes saved for "
            "backward (CPU). 'check:' notes say which numbers to doubt.",
            "",
        ]
        table = self.table()
        lines.append("| " + " | ".join(table[0]) + " |")
        lines.append("|" + "---|" * len(table[0]))
        lines += ["| " + " | ".join(c.replace("|", "/") for c in row) + " |" for row in table[1:]]
        lines += ["", control_line(self.control)]
        lines += ["", "## Why each change was tried", ""] + [
            f"- {r['name']}: tried because {r.get('why') or 'not recorded (tried in a fixed order)'}"
            for r in self.rows[1:]
        ]
        lines += ["", "## Memory", "", *memory_lines(self.rows, self.memory_budget_mb)]
        lines += ["", "## Trace findings", ""] + [f"- {f}" for f in self.trace_findings]
        lines += ["", "## Top operators and device idle time", "", *_hot_spots(self.rows)]
        lines += ["", "## Findings (written by the analyst)", ""]
        if self.analyst_findings is None:
            lines.append("- none written yet")
        else:
            lines += [f"- {k}: {_plain(v)}" for k, v in self.analyst_findings.items()]
            problems = self.findings_problems()
            lines.append(
                "- checked against the rows: " + ("; ".join(problems) if problems else "every field agrees")
            )
        lines += ["", "## Next action", ""] + [f"- {a}" for a in self.next_action]
        # in the notebook's language, line by line (the table's rows are numbers and names)
        return "\n".join(text(line) for line in "\n".join(lines).split("\n")) + "\n"

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=False, default=str) + "\n"

    def write(self, folder: str | Path, plot: bool = True) -> dict[str, Path]:
        """Write ``report.md``, ``report.json`` and (``plot=True``) ``report.png`` into ``folder``."""
        _flag(plot=plot)
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        paths = {"markdown": folder / "report.md", "json": folder / "report.json"}
        paths["markdown"].write_text(self.to_markdown(), encoding="utf-8")
        paths["json"].write_text(self.to_json(), encoding="utf-8")
        if plot:
            import matplotlib.pyplot as plt

            fig = plot_report(self)
            paths["plot"] = folder / "report.png"
            fig.savefig(paths["plot"], dpi=110, bbox_inches="tight")
            plt.close(fig)
        return paths


def _first_loss(row: dict[str, Any]) -> str:
    curve = row.get("loss_curve")
    return f"{curve[0]:.4f}" if curve else "(first step not recorded)"


def control_line(control: dict[str, Any] | None) -> str:
    """The A/A row: the baseline against an identical copy, timed like every change. Anything
    but "within noise" says this machine's noise can fake a verdict."""
    if not control:
        return "A/A control: not run for this report (no measure of how often noise looks like a gain)"
    speed = f"{control['speedup']:.2f}x, 95 % interval {control['low']:.2f}–{control['high']:.2f}"
    if control["verdict"] == "within noise":
        return f"A/A control (the baseline against itself): within noise ({speed}): verdicts can be read"
    return (
        f"A/A control (the baseline against itself): '{control['verdict']}' ({speed}): noise alone gave "
        "a verdict, so distrust this report's verdicts and measure again on a quieter machine"
    )


def memory_lines(rows: list[dict[str, Any]], budget_mb: float | None) -> list[str]:
    """One line per configuration: what memory was measured, and against the budget."""
    out = []
    for row in rows:
        peak = row.get("peak_mem_mb")
        parts = [f"saved for backward {row['saved_mb']:.2f} MiB" if row.get("saved_mb") is not None else ""]
        parts.append(
            f"CUDA peak allocated {peak:.1f} MiB" if peak is not None else "no device peak (a CPU run)"
        )
        if budget_mb is not None:
            used = rules.memory_mb(row)
            parts.append(
                f"budget {budget_mb:g} MiB: {'over' if used is not None and used > budget_mb else 'fits'}"
            )
        out.append(f"- {row['name']}: " + "; ".join(p for p in parts if p))
    return out


def _plain(value: Any) -> str:
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def _hot_spots(rows: list[dict[str, Any]]) -> list[str]:
    """The top operators (CPU) or kernels (GPU) of the baseline and the tuned configuration, and
    the share of the step the GPU sat idle (no such share on a CPU)."""
    tuned = rules.kept_row(rows)
    out = []
    for label, row in [("baseline", rows[0])] + ([("tuned", tuned)] if tuned is not rows[0] else []):
        ops = row.get("top_ops")
        if not ops:
            out.append(
                f"- {label} ({row['name']}): top operators not in this recording "
                "(recorded before reports kept them)"
            )
            continue
        what = "kernels" if row.get("device", "").startswith("cuda") else "operators (self time)"
        step = row.get("step_time_ms")
        out.append(f"- {label} ({row['name']}), top {what}, ms per step (share of the step):")
        costs = row.get("op_costs") or {}
        for name, ms in ops:
            line = f"  - {name} {ms:.2f}" + (f" ({ms / step:.0%})" if step else "")
            cost = costs.get(name)
            if cost and cost["bytes"] > 0 and ms > 0:
                line += (
                    f"; {cost['flops'] / 1e6:,.1f} MFLOP, {cost['flops'] / cost['bytes']:.1f} FLOP/byte "
                    f"(shapes the profiler recorded), {cost['flops'] / (ms / 1e3) / 1e9:.2f} GFLOP/s = "
                    f"{cost['flops'] / (ms / 1e3) / row['peak_flops']:.0%} of the peak"
                    if row.get("peak_flops")
                    else ""
                )
            out.append(line)
        idle = row.get("device_idle_share")
        out.append(
            f"  - GPU idle: {idle:.1%} of the profiled steps"
            if idle is not None
            else "  - GPU idle: not applicable (a CPU run has no separate device to wait on)"
        )
    return out


def findings(rows: list[dict[str, Any]]) -> list[str]:
    """What the traces say about the baseline and the tuned configuration."""
    out = []
    kept = [r for r in rows if r.get("decision") in ("baseline", "keep")]
    pairs = [("baseline", rows[0])] + ([("tuned", kept[-1])] if len(kept) > 1 else [])
    if len(kept) == 1:
        out.append("no change was kept: the tuned configuration is the baseline")
    for label, row in pairs:
        p = row["phases_ms"]
        out.append(
            f"{label} ({row['name']}): {row['bottleneck']}; per step data {p['data']:.2f} ms, "
            f"forward {p['forward']:.2f}, backward {p['backward']:.2f}, optimizer "
            f"{p['optimizer']:.2f}, other {p['other']:.2f} ms; data / compute "
            f"{row['data_ratio']:.0%} (stall above {rules.STALL_THRESHOLD:.0%}) — "
            f"{len(row['phase_steps_ms'])} profiled steady-state steps"
        )
    for row in rows[1:]:
        if row.get("decision") == "revert":
            reason = {
                "loss": f"training moved (loss curve gap {row.get('loss_gap', 0):.4f} nats, tolerance "
                f"{row.get('loss_tolerance', 0):.4f})",
                "too big": "does not fit the memory budget",
            }.get(row.get("reason", ""), f"not faster ({speed_cell(row)})")
            out.append(f"reverted {row['name']} (tried on {row.get('tried_on')}): {reason}")
    return out


#: Where to look when the capstone's own changes for a bottleneck have all been tried.
BEYOND = {
    "data-bound": "faster decoding or tokenizing, samples cached in memory, more CPU cores for the loader",
    "compute-bound": "more work per kernel (a larger batch or sequence), attention kernels such as "
    "FlashAttention, a larger device",
    "optimizer-bound": "fewer parameters to update (LoRA / adapters), the optimizer state sharded "
    "across devices (ZeRO, chapter 10)",
    "host-bound": "CUDA graphs, a larger batch per step (fewer, larger kernels)",
}


def next_actions(rows: list[dict[str, Any]], memory_budget_mb: float | None = None) -> list[str]:
    """The next round, from the rows as they are now: the changes left for the tuned
    configuration's bottleneck (:func:`rules.next_actions_for`), or where to look beyond them."""
    kept = rules.kept_row(rows)
    label = rules.bottleneck_class(kept["phases_ms"])
    untried = rules.next_actions_for(rows, memory_budget_mb)
    first = (
        f"tuned ({kept['name']}) is {label}: next, try {' or '.join(untried)}"
        if untried
        else f"tuned ({kept['name']}) is {label}, and every change this capstone has for it was tried on "
        f"it or is held: look beyond them ({BEYOND[label]})"
    )
    return [
        first,
        "rerun the same measurement (same seed, warm-up and windows) and add the row to this table",
        "re-measure on a quiet machine before trusting small differences (see the min–max ranges)",
    ]


def build_report(
    rows: list[dict[str, Any]],
    experiment: str | None = None,
    recorded: dict[str, Any] | None = None,
    analyst_findings: dict[str, Any] | None = None,
    control: dict[str, Any] | None = None,
    memory_budget_mb: float | None = None,
) -> Report:
    """A report from the rows of a :class:`helpers.report.Tuner` (baseline first). Without
    ``recorded``, the header states this process's provenance (date, command, device model,
    threads, versions, commit): the report is being made here and now. ``analyst_findings``
    are the fields the analyst wrote (bottleneck, evidence_ms, next_action, expected_gain_ms);
    the report checks them against the rows. ``control``: the A/A row (:meth:`Tuner.control`)."""
    if not rows:
        raise ValueError("build_report needs at least the baseline row")
    base = rows[0]
    cfg = base["config"]
    m = cfg["model"]
    peaks: dict[str, dict[str, Any]] = {}
    for row in rows:
        peaks.setdefault(
            row["precision"],
            {"flops": row["peak_flops"], "kind": row["peak_kind"], "source": row["peak_source"]},
        )
    hardware = {
        "device": base["device"],
        "device_name": base["device_name"],
        "num_devices": 1,
        "peaks": peaks,
        "torch": torch.__version__,
        "python": platform.python_version(),
    }
    describe = (
        f"layers={m['n_layers']}, hidden={m['d_model']}, heads={m['n_heads']}, "
        f"seq={cfg['seq_len']}, global_batch={cfg['batch_size']}, vocab={m['vocab_size']} (bytes), "
        f"AdamW lr={cfg['lr']:g}, warm-up {cfg['warmup']} steps, {cfg['windows']} windows × "
        f"{cfg['steps_per_window']} timed steps, data delay {cfg['data_delay_ms']:g} ms/batch"
    )
    tuned = [r for r in rows if r.get("decision") in ("baseline", "keep")][-1]
    ckpt = "on" if tuned["config"]["checkpointing"] else "off"
    return Report(
        experiment or f"{m['name']}: baseline -> tuned",
        hardware,
        {**{k: v for k, v in cfg.items() if k != "model"}, "model": m, "describe": describe},
        f"dp=1, tp=1, pp=1, activation_checkpoint={ckpt} (tuned)",
        rows,
        findings(rows),
        next_actions(rows, memory_budget_mb),
        provenance(base["device"], threads=cfg.get("threads")) if recorded is None else recorded,
        dict(analyst_findings) if analyst_findings is not None else None,
        control,
        memory_budget_mb,
    )


def rederive(rows: list[dict[str, Any]], memory_budget_mb: float | None = None) -> list[dict[str, Any]]:
    """Recompute every derived number of a report's rows from the measured ones (each row
    against the baseline and the row it was tried on), as :class:`~helpers.report.Tuner` did."""
    out: list[dict[str, Any]] = []
    for i, row in enumerate(rows):
        if i == 0:
            new = rules.derive(row, baseline=row)
            new["decision"] = "baseline"
        else:
            # the latest row of that name: a change tried again refers to its newest row
            previous = [r for r in out if r["name"] == row["tried_on"]][-1]
            new = rules.derive(row, baseline=out[0], previous=previous, memory_budget_mb=memory_budget_mb)
        out.append(new)
    return out


def read_report(path: str | Path) -> Report:
    """A report from its ``report.json`` (or the folder holding it). The rows' derived numbers
    (MFU, HFU, deltas, flags, bottleneck class, decisions) are recomputed from the measured ones."""
    path = Path(path)
    if path.is_dir():
        path = path / "report.json"
    if not path.is_file():
        raise FileNotFoundError(f"no report at {path}: give report.json or the folder Report.write() made")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        budget = data.get("memory_budget_mb", data["config"].get("memory_budget_mb"))
        data["memory_budget_mb"] = budget
        data["rows"] = rederive(data["rows"], budget)
        # what the rows say is recomputed, never the text stored with them
        data["trace_findings"] = findings(data["rows"])
        data["next_action"] = next_actions(data["rows"], budget)
        return Report(**data)
    except (json.JSONDecodeError, TypeError, KeyError, IndexError) as err:
        raise ValueError(f"{path} is not a report written by helpers.report ({err})") from None


def parse_markdown_table(markdown: str) -> list[list[str]]:
    """The comparison table of a report's Markdown (header first), cells as strings."""
    lines = [ln for ln in markdown.splitlines() if ln.startswith("| ")]
    if not lines:
        raise ValueError("no table in this Markdown")
    return [[c.strip() for c in ln.strip().strip("|").split(" | ")] for ln in lines]


def recorded_report(name: str = "cpu-quick") -> Report:
    """A report recorded by this project and shipped with the package (see
    ``helpers/data/capstone_recorded_README.md`` for where and when)."""
    if name not in RECORDED:
        raise unknown("recorded report", name, RECORDED)
    path = resources.files("helpers") / "data" / RECORDED[name]
    return read_report(Path(str(path)))


def recorded_row_trace(name: str, row: dict[str, Any]) -> Path:
    """The profiler trace of one row of a shipped recording (``scripts/ship_capstone_recording.py``
    copied each row's trace into the package); read it with ``timeline.load_trace``."""
    if name not in RECORDED:
        raise unknown("recorded report", name, RECORDED)
    trace = Path(str(row.get("trace", "")))
    shipped = Path(str(resources.files("helpers") / "data")) / trace
    if trace.is_absolute() or not trace.parts or trace.parts[0] != "capstone_recorded_traces":
        raise FileNotFoundError(f"row {row.get('name')!r} of {name} has no shipped trace (trace: {trace})")
    return shipped


#: Profiler traces recorded by this project (scripts/record_capstone_traces.py): name -> file.
RECORDED_TRACES = {
    name: f"capstone_trace_{name}.json.gz"
    for name in ("tiny-baseline", "tiny-workers", "tiny-fused", "tiny-compiled", "wide-batch1")
}


def recorded_trace(name: str = "tiny-baseline") -> Path:
    """The path of a profiler trace recorded by this project and shipped with the package
    (see ``helpers/data/capstone_recorded_README.md``); read it with ``timeline.load_trace``."""
    if name not in RECORDED_TRACES:
        raise unknown("recorded trace", name, RECORDED_TRACES)
    return Path(str(resources.files("helpers") / "data" / RECORDED_TRACES[name]))


def plot_report(report: Report):
    """Each change's interleaved speed-up with its 95 % interval (against the configuration it
    was tried on; the A/A control first), MFU / HFU, memory of every row, and each change's
    per-step loss-curve gap to the baseline against the tolerance."""
    import matplotlib.pyplot as plt

    rows = report.rows
    names = [r["name"] for r in rows]
    colors = ["tab:gray" if r.get("decision") == "revert" else "tab:blue" for r in rows]
    i18n.for_plot()
    fig, axes = plt.subplots(1, 4, figsize=(17, 3.6))
    compared = ([("A/A", report.control)] if report.control else []) + [
        (r["name"], r["speed"]) for r in rows[1:] if r.get("speed")
    ]
    ax = axes[0]
    if compared:
        ys = [s["speedup"] for _, s in compared]
        err = [
            [s["speedup"] - s["low"] for _, s in compared],
            [s["high"] - s["speedup"] for _, s in compared],
        ]
        col = {"faster": "tab:green", "slower": "tab:red"}
        ax.errorbar(range(len(compared)), ys, yerr=err, fmt="none", ecolor="black", capsize=4, linewidth=1)
        ax.scatter(
            range(len(compared)), ys, c=[col.get(s["verdict"], "tab:gray") for _, s in compared], zorder=3
        )
        ax.set_xticks(range(len(compared)), [n for n, _ in compared])
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle=":")
    ax.set_ylabel(tr("speed-up, 95 % interval"))
    x = range(len(rows))
    axes[1].bar([i - 0.2 for i in x], [100 * r["mfu"] for r in rows], 0.4, label="MFU")
    axes[1].bar([i + 0.2 for i in x], [100 * r["hfu"] for r in rows], 0.4, label="HFU")
    axes[1].set_xticks(list(x), names)
    axes[1].set_ylabel(tr("% of the precision's peak"))
    axes[1].legend()
    axes[2].bar(names, [r["memory_mb"] for r in rows], color=colors)
    if report.memory_budget_mb is not None:
        axes[2].axhline(report.memory_budget_mb, color="tab:red", linewidth=1, linestyle="--")
    cuda = rows[0].get("peak_mem_mb") is not None
    axes[2].set_ylabel(tr("MiB (CUDA peak allocated)") if cuda else tr("MiB (saved for backward)"))
    for ax in axes[:3]:
        ax.tick_params(axis="x", rotation=45)
    _plot_loss_gaps(axes[3], rows)
    fig.suptitle(
        tr(
            "{experiment} — green: faster, red: slower, grey: within noise or reverted",
            experiment=text(report.experiment),
        )
    )
    fig.tight_layout()
    return fig


def _plot_loss_gaps(ax, rows: list[dict[str, Any]]) -> None:
    """Each change's loss curve minus the baseline's, step by step, inside the tolerance band."""
    base = rows[0].get("loss_curve")
    if not base:
        ax.text(
            0.5, 0.5, tr("no loss curves in this report"), ha="center", va="center", transform=ax.transAxes
        )
        return
    _, tolerance = rules.loss_gap(rows[0], rows[0])
    ax.axhspan(-tolerance, tolerance, color="tab:green", alpha=0.15, label=tr("tolerance (mean gap)"))
    for row in rows[1:]:
        curve = row.get("loss_curve") or []
        n = min(len(curve), len(base))
        ax.plot(range(n), [a - b for a, b in zip(curve[:n], base[:n], strict=True)], label=row["name"])
    ax.axhline(0.0, color="black", linewidth=0.8)
    ax.set_xlabel(tr("step"))
    ax.set_ylabel(tr("loss minus the baseline's, nats"))
    ax.legend(fontsize=7)

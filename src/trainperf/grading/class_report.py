"""``trainperf report GRADES.csv --out report/``: the class at a glance, for the instructor.

It reads a grades CSV and the details file beside it (``GRADES.csv.details.jsonl``, written by
``trainperf grade`` and ``trainperf merge``; see :mod:`trainperf.grading.parts`), checked whole and
unchanged, and writes into ``--out``:

- ``index.html`` — per chapter: submitted, missing and unreadable notebooks and the scores; per
  graded cell: pass rate, mean points, how the failures failed (not attempted, wrong value caught
  by a visible check, wrong value only the hidden tests caught, an error, a limit) and the most
  common messages of the visible checks, with a hint where a cell looks too hard or broken; the
  score distribution per chapter (``scores.png``); the submissions flagged for review with their
  reasons; the slowest notebooks.
- ``cells.csv`` — the per-cell table; ``review.csv`` — the flagged submissions.

The hints are rules of thumb for where to look, not verdicts on an exercise.
"""

from __future__ import annotations

import csv
import html
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ..course import CourseError
from .parts import Part, read_part
from .results import Outcome, StudentRow, shown_ids
from .submissions import spreadsheet_safe

TOP_MESSAGES = 3
SLOWEST = 10

NOT_ATTEMPTED = "not attempted"
WRONG_VISIBLE = "wrong (a visible check)"
WRONG_HIDDEN = "wrong (hidden tests only)"
ERROR = "error"
KINDS = [NOT_ATTEMPTED, WRONG_VISIBLE, WRONG_HIDDEN, ERROR, "timeout", "kernel died", "not run", "other"]

# Why a submission needs a person's eyes, matched against the reasons `trainperf grade` writes
# (tests/test_class_grading.py pins these patterns to the grader's own wording).
REVIEW = {
    "copied reference code": re.compile(
        r"copies helpers\.|, which can (copy|rebind) |rebinds |"
        r"switched-off helper|the copy check"
    ),
    "malformed kernel data": re.compile(r"the grader could not use|is malformed"),
    "isolation event": re.compile(
        r"outlived the sandbox|could not be started|"
        r"notebook client ended unexpectedly"
    ),
    "limit hit": re.compile(
        r"cell limit|notebook limit|ran out of memory|MiB limit|scratch disk|"
        r"limit of \d+ processes|kernel died|output was truncated|records over the cap|"
        r"over the client's size cap|per-notebook limit|characters(?: of code)?, over"
    ),
    "test cells edited": re.compile(
        r"test cell \S+ was (edited|deleted|turned into)|"
        r"carries the hidden tests|answer cell \S+ is missing"
    ),
    "unusual files": re.compile(
        r"symbolic link|not valid JSON|empty file|could not be read(?! by the copy)|"
        r"not a Jupyter notebook|no list of cells"
    ),
    "grading error": re.compile(r"grading failed \("),
}


# the fields of ``Limits.key()`` (trainperf.grading.grade), in order, with their units
_LIMIT_FIELDS = [
    ("cell", "s"),
    ("notebook", "s"),
    ("memory", "MiB"),
    ("largest file", "MiB"),
    ("scratch disk", "MiB"),
    ("processes", ""),
    ("output kept per cell", "characters"),
]


def describe_limits(key: str) -> str:
    """``60:600:6144:256:1024:256:20000`` -> ``cell 60 s, notebook 600 s, memory 6144 MiB, …``
    (a key of another shape is shown as it is)."""
    values = key.split(":")
    if len(values) != len(_LIMIT_FIELDS):
        return key
    return ", ".join(
        f"{name} {'no cap' if value == 'None' else (value + ' ' + unit).strip()}"
        for (name, unit), value in zip(_LIMIT_FIELDS, values, strict=True)
    )


def failure_kind(verdict: dict) -> str | None:
    """How a graded cell failed (None: it passed)."""
    status, ename = verdict.get("status"), verdict.get("ename", "")
    if status == "ok":
        return None
    if status in ("timeout", "not-run"):
        return status.replace("-", " ")
    if status == "died":
        return "kernel died"
    if ename == "NotImplementedError":
        return NOT_ATTEMPTED
    if ename in ("CheckFailed", "AssertionError"):
        return WRONG_VISIBLE
    if ename:
        return ERROR
    return WRONG_HIDDEN if verdict.get("hidden_failed") else "other"


def failure_message(verdict: dict) -> str:
    """The visible message of a failure, with the learner's own value cut off so equal mistakes
    group together (``✗ FLOPs of the GEMM: expected 1.3744e+11``)."""
    kind = failure_kind(verdict)
    ename = verdict.get("ename", "")
    if kind == WRONG_HIDDEN:
        return "the visible checks passed; the hidden tests failed"
    if kind in (WRONG_VISIBLE, ERROR, NOT_ATTEMPTED):
        lines = [line for line in verdict.get("visible", "").splitlines() if line.startswith(f"{ename}:")]
        text = lines[-1][len(ename) + 1 :].strip() if lines else ""
        if kind == WRONG_VISIBLE:
            # the learner's value ends the message: ", got …" (English), "，实际得到 …" (Chinese)
            return re.sub(r"(,? got |，实际得到 ).*$", "", text)[:160] or ename
        return f"{ename}: {text}"[:160].rstrip(": ")
    return verdict.get("visible", "").splitlines()[-1][:160] if verdict.get("visible") else kind or ""


@dataclass
class CellStats:
    chapter: str
    cell: str
    max_points: float
    graded: int = 0
    passed: int = 0
    points: float = 0.0
    kinds: Counter = field(default_factory=Counter)
    messages: Counter = field(default_factory=Counter)

    @property
    def pass_rate(self) -> float:
        return self.passed / self.graded if self.graded else 0.0

    @property
    def mean_points(self) -> float:
        return self.points / self.graded if self.graded else 0.0

    @property
    def attempted(self) -> int:
        return self.graded - self.kinds[NOT_ATTEMPTED]

    @property
    def attempted_pass_rate(self) -> float:
        """Passed among those who answered: a cell most left blank is not thereby hard."""
        return self.passed / self.attempted if self.attempted else 0.0

    def hints(self) -> list[str]:
        """Where an instructor may want to look (rules of thumb). How hard a cell is, is read
        from those who answered it; how many left it blank is said apart."""
        if not self.graded:
            return []
        tried = self.attempted - self.passed  # attempted and failed
        hints = []
        if not self.attempted:
            hints.append("nobody answered it")
        elif self.passed == 0:
            hints.append(f"none of the {self.attempted} who answered passed: broken, or too hard?")
        elif self.attempted_pass_rate < 0.3:
            hints.append(f"hard: {self.attempted_pass_rate:.0%} of those who answered pass")
        if tried >= 2 and self.kinds[ERROR] > tried / 2:
            hints.append("most failures are errors, not wrong values: are the instructions clear?")
        if tried >= 2 and self.kinds[WRONG_HIDDEN] > tried / 2:
            hints.append("most failures pass the visible checks: add a visible check for the common mistake?")
        if self.attempted and self.kinds[NOT_ATTEMPTED] > self.graded / 2:
            hints.append(f"{self.kinds[NOT_ATTEMPTED]} of {self.graded} left it unanswered")
        return hints


def graded(outcome: Outcome) -> bool:
    """The notebook was executed and scored (not missing, not unreadable)."""
    return bool(outcome.feedback)


def cell_stats(part: Part) -> list[CellStats]:
    stats: dict[tuple[str, str], CellStats] = {}
    for row in part.rows:
        for outcome in row.outcomes.values():
            for verdict in outcome.feedback:
                key = (outcome.chapter, verdict["grade_id"])
                cell = stats.setdefault(key, CellStats(*key, float(verdict["max_points"])))
                cell.graded += 1
                cell.points += float(verdict["points"])
                kind = failure_kind(verdict)
                if kind is None:
                    cell.passed += 1
                else:
                    cell.kinds[kind] += 1
                    if kind != NOT_ATTEMPTED:  # counted in its own column; the message says nothing
                        cell.messages[failure_message(verdict)] += 1
    order = {ch: i for i, ch in enumerate(part.chapters)}
    return sorted(stats.values(), key=lambda c: order.get(c.chapter, len(order)))


def review_reasons(row: StudentRow) -> list[str]:
    """The review categories a student's row falls in."""
    texts = list(row.notes) + [o.reason for o in row.outcomes.values()]
    found = [name for name, pattern in REVIEW.items() if any(pattern.search(t) for t in texts)]
    for text in texts:  # a reason that asks for review in words no category knows yet
        for part in text.split("; "):
            if "— review" in part and not any(p.search(part) for p in REVIEW.values()):
                found.append("other review")
                break
    found = list(dict.fromkeys(found))
    if any(o.flags for o in row.outcomes.values()) and "copied reference code" not in found:
        found.insert(0, "copied reference code")
    return found


def score_bins(top: float) -> list[float]:
    """Histogram bin edges for scores 0..``top``: one bar per whole point up to 40 points (the
    axis ends at the chapter's maximum, not past it), else 20 equal bars."""
    if top <= 40:
        return [i - 0.5 for i in range(int(top) + 2)]
    return [top * i / 20 for i in range(21)]


def _plot(part: Part, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    count = max(1, len(part.chapters))
    cols = min(3, count)
    rows = (count + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.0 * rows), squeeze=False)
    for ax in axes.flat[count:]:
        ax.axis("off")
    for ax, chapter in zip(axes.flat, part.chapters, strict=False):
        outcomes = [r.outcomes[chapter] for r in part.rows]
        scores = [o.score for o in outcomes if graded(o)]
        top = max([o.max_score for o in outcomes] or [1.0]) or 1.0
        bins = score_bins(top)
        ax.hist(scores, bins=bins, color="#4878a8", edgecolor="white")
        ax.set_xlim(bins[0], bins[-1])
        missing = sum(1 for o in outcomes if o.reason.startswith("missing "))
        ax.set_title(f"{chapter}\n{len(scores)} graded, {missing} missing", fontsize=9)
        ax.set_xlabel(f"score (of {top:g})", fontsize=8)
        ax.set_ylabel("submissions", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _table(header: list[str], rows: list[list[str]], raw: frozenset[int] = frozenset()) -> str:
    """An HTML table; cells are escaped except the columns in ``raw`` (already HTML)."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{c if i in raw else html.escape(c)}</td>" for i, c in enumerate(r)) + "</tr>"
        for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _write_csv(path: Path, header: list[str], rows: list[list[str]]) -> None:
    with path.open("w", newline="", encoding="utf-8", errors="replace") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows([[spreadsheet_safe(c) for c in row] for row in rows])


def _require_grades_file(grades: Path) -> None:
    """One line when ``grades`` is not a file at all (before any talk of shards and parts)."""
    what = "is a folder" if grades.is_dir() else "does not exist" if not grades.exists() else ""
    if what:
        raise CourseError(
            f"{grades} {what}: give the grades CSV that `trainperf grade --out` or "
            "`trainperf merge --out` wrote (its .details.jsonl file must be beside it)."
        )


def report(grades: Path, out: Path) -> Path:
    """Write the class report for ``grades`` (a CSV with its details file) into ``out``."""
    _require_grades_file(grades)
    part = read_part(grades)
    if out.exists() and not out.is_dir():
        raise CourseError(f"--out {out} is a file; the report needs a folder.")
    out.mkdir(parents=True, exist_ok=True)
    names = shown_ids(part.rows)
    cells = cell_stats(part)
    cell_header = [
        "chapter",
        "cell",
        "max points",
        "graded",
        "pass rate",
        "answered",
        "pass rate of answered",
        "mean points",
        *KINDS,
        "most common failure messages",
        "look at",
    ]
    cell_rows = [
        [
            c.chapter,
            c.cell,
            f"{c.max_points:g}",
            str(c.graded),
            f"{c.pass_rate:.0%}",
            str(c.attempted),
            f"{c.attempted_pass_rate:.0%}" if c.attempted else "–",
            f"{c.mean_points:.2f}",
            *[str(c.kinds[k]) for k in KINDS],
            " | ".join(f"{n}× {m}" for m, n in c.messages.most_common(TOP_MESSAGES)),
            "; ".join(c.hints()),
        ]
        for c in cells
    ]
    _write_csv(out / "cells.csv", cell_header, cell_rows)

    flagged = [(row, review_reasons(row)) for row in part.rows]
    flagged = [(row, why) for row, why in flagged if why]
    review_rows = [[names[row.student], ", ".join(why), row.reason] for row, why in flagged]
    _write_csv(out / "review.csv", ["student_id", "flagged for", "reason"], review_rows)

    chapter_rows = []
    for chapter in part.chapters:
        outcomes = [r.outcomes[chapter] for r in part.rows]
        scored = sorted(o.score for o in outcomes if graded(o))
        missing = sum(1 for o in outcomes if o.reason.startswith("missing "))
        top = max([o.max_score for o in outcomes] or [0.0])
        unreadable = len(outcomes) - len(scored) - missing
        chapter_rows.append(
            [
                chapter,
                str(len(scored)),
                str(missing),
                str(unreadable),
                f"{sum(scored) / len(scored):.2f}" if scored else "–",
                f"{scored[len(scored) // 2]:g}" if scored else "–",
                f"{top:g}",
                f"{sum(1 for s in scored if s == top) / len(scored):.0%}" if scored else "–",
            ]
        )
    slowest = sorted(
        (o for r in part.rows for o in r.outcomes.values() if graded(o)), key=lambda o: -o.seconds
    )[:SLOWEST]
    _plot(part, out / "scores.png")

    messages = len(cell_header) - 2
    styled = [
        [
            *r[:messages],
            "<br>".join(html.escape(m) for m in r[messages].split(" | ") if m),
            f"<b>{html.escape(r[-1])}</b>" if r[-1] else "",
        ]
        for r in cell_rows
    ]
    page = out / "index.html"
    page.write_text(
        "\n".join(
            [
                "<!doctype html><meta charset='utf-8'><title>Class report</title><style>"
                "body{font-family:sans-serif;margin:1em 2em}td,th{border:1px solid #ccc;padding:3px 6px;"
                "vertical-align:top;font-size:90%}table{border-collapse:collapse;margin-bottom:1.5em}"
                "b{color:#a33}</style>",
                f"<h1>Class report: {html.escape(grades.name)}</h1>",
                f"<p>{len(part.rows)} students, {len(part.chapters)} chapter(s); graded as shard "
                f"{part.shard} (class of {part.summary.students} students, "
                f"{part.summary.notebooks} notebooks); "
                f"trainperf {html.escape(str(part.course.get('trainperf')))}; limits per submission: "
                f"{html.escape(describe_limits(str(part.course.get('limits'))))}.</p>",
                "<h2>Chapters</h2>",
                _table(
                    [
                        "chapter",
                        "graded",
                        "missing",
                        "unreadable",
                        "mean score",
                        "median",
                        "max",
                        "full marks",
                    ],
                    chapter_rows,
                ),
                "<h2>Graded cells</h2><p>Per graded cell over the notebooks that were graded: how often it "
                "passed, the mean points, how the failures failed and the most common messages of the "
                "visible checks (the learner's own value cut off). <b>Look at</b> names cells that may be "
                "too hard or broken — rules of thumb, not verdicts.</p>",
                _table(cell_header, styled, raw=frozenset({messages, messages + 1})),
                "<h2>Score distribution</h2><img src='scores.png' alt='score distribution per chapter'>",
                f"<h2>Flagged for review ({len(flagged)})</h2><p>Copied reference code, isolation events, "
                "limits hit, edited test cells, unusual files: read the submission before trusting its "
                "grade.</p>",
                _table(["student", "flagged for", "reason"], review_rows) if review_rows else "<p>None.</p>",
                f"<h2>Slowest notebooks ({len(slowest)})</h2>",
                _table(
                    ["student", "chapter", "seconds", "score", "reason"],
                    [
                        [
                            names[o.student],
                            o.chapter,
                            f"{o.seconds:.1f}",
                            f"{o.score:g} / {o.max_score:g}",
                            o.reason,
                        ]
                        for o in slowest
                    ],
                ),
            ]
        ),
        encoding="utf-8",
        errors="replace",
    )
    return page

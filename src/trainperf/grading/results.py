"""Grading results: per-student rows, the grades CSV, feedback pages and the progress file."""

from __future__ import annotations

import csv
import html
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .submissions import display_name, file_stem, spreadsheet_safe


@dataclass
class Outcome:
    """One student's result for one chapter."""

    student: str  # the raw folder name (any bytes, as str with surrogate escapes)
    chapter: str
    score: float
    max_score: float
    reason: str = ""
    seconds: float = 0.0
    cells: dict[str, tuple[float, float]] = field(default_factory=dict)  # grade_id -> (got, max)
    errors: dict[str, str] = field(default_factory=dict)  # graded cell -> exception it raised
    feedback: list[dict] = field(default_factory=list)  # CellVerdicts as dicts
    key: str = ""  # what was graded: submission hash + course version + limits, for resuming
    flags: list[str] = field(default_factory=list)  # for the instructor's review


@dataclass
class StudentRow:
    student: str
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def score(self) -> float:
        return sum(o.score for o in self.outcomes.values())

    @property
    def max_score(self) -> float:
        return sum(o.max_score for o in self.outcomes.values())

    @property
    def reason(self) -> str:
        parts = list(self.notes)
        parts += [f"{o.chapter}: {o.reason}" for o in self.outcomes.values() if o.reason]
        return "; ".join(parts)


def shown_ids(rows: list[StudentRow]) -> dict[str, str]:
    """raw id -> the id written for people; two ids that read the same get their digests."""
    shown = {row.student: display_name(row.student) for row in rows}
    counts: dict[str, int] = {}
    for text in shown.values():
        counts[text] = counts.get(text, 0) + 1
    return {
        raw: text if counts[text] == 1 else f"{text} [{file_stem(raw, 0)}]" for raw, text in shown.items()
    }


def write_csv(rows: list[StudentRow], chapter_ids: list[str], out: Path) -> None:
    """``student_id, score, max_score, <chapter>..., reason``; UTF-8, spreadsheet-safe."""
    out.parent.mkdir(parents=True, exist_ok=True)
    names = shown_ids(rows)
    with out.open("w", newline="", encoding="utf-8", errors="replace") as fh:
        writer = csv.writer(fh)
        writer.writerow(["student_id", "score", "max_score", *chapter_ids, "reason"])
        for row in sorted(rows, key=lambda r: r.student.encode("utf-8", "surrogateescape")):
            per = [f"{row.outcomes[ch].score:g}" for ch in chapter_ids]
            writer.writerow(
                [
                    spreadsheet_safe(names[row.student]),
                    f"{row.score:g}",
                    f"{row.max_score:g}",
                    *per,
                    spreadsheet_safe(row.reason),
                ]
            )


def write_feedback(row: StudentRow, folder: Path) -> Path:
    """One HTML page per student: each graded cell's points and its visible messages."""
    folder.mkdir(parents=True, exist_ok=True)
    name = html.escape(display_name(row.student))
    parts = [
        f"<!doctype html><meta charset='utf-8'><title>Feedback: {name}"
        "</title><style>body{font-family:sans-serif;max-width:60em}td,th{border:1px solid #ccc;"
        "padding:4px;vertical-align:top}pre{white-space:pre-wrap;margin:0}</style>",
        f"<h1>Feedback for {name}</h1>",
        f"<p>Total: {row.score:g} / {row.max_score:g}</p>",
    ]
    if row.notes:
        parts.append("<p>" + html.escape("; ".join(row.notes)) + "</p>")
    for outcome in row.outcomes.values():
        parts.append(f"<h2>{html.escape(outcome.chapter)}: {outcome.score:g} / {outcome.max_score:g}</h2>")
        if outcome.reason:
            parts.append(f"<p><b>Notes:</b> {html.escape(outcome.reason)}</p>")
        parts.append("<table><tr><th>exercise</th><th>points</th><th>what the checks said</th></tr>")
        for cell in outcome.feedback:
            parts.append(
                f"<tr><td>{html.escape(cell['grade_id'])}</td>"
                f"<td>{cell['points']:g} / {cell['max_points']:g}</td>"
                f"<td><pre>{html.escape(cell['visible'])}</pre></td></tr>"
            )
        parts.append("</table>")
    page = folder / f"{file_stem(row.student)}.html"
    page.write_text("\n".join(parts), encoding="utf-8", errors="replace")
    return page


def progress_line(outcome: Outcome) -> str:
    return json.dumps(asdict(outcome), ensure_ascii=True) + "\n"


def load_progress(path: Path) -> dict[tuple[str, str], Outcome]:
    """Finished notebooks of an earlier run; a line cut short by an interruption is skipped."""
    done: dict[tuple[str, str], Outcome] = {}
    if not path.is_file():
        return done
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            data = json.loads(line)
            data["cells"] = {k: tuple(v) for k, v in data["cells"].items()}
            outcome = Outcome(**data)
        except (json.JSONDecodeError, TypeError, KeyError, AttributeError):
            continue
        done[(outcome.student, outcome.chapter)] = outcome
    return done

"""The details file next to every grades CSV, and ``trainperf merge``.

``trainperf grade`` writes ``GRADES.csv`` and, beside it, ``GRADES.csv.details.jsonl``: what the
CSV cannot hold. Its first line says what was graded — the shard (``1/1`` for a whole class),
the chapters, the **course version** (each chapter's ``source_hash``: solution, helpers and tool
versions; the limits; the trainperf version), the class digest of :mod:`trainperf.grading.shards` and
the SHA-256 of the CSV it belongs to. Then one line per student: the raw id, the notes on the
student's folder and every chapter's :class:`~trainperf.grading.results.Outcome` with the per-cell
verdicts. A last line ``{"end": <students>}`` proves the file is whole.

A **part** is such a pair written by ``trainperf grade --shard I/N``. ``merge`` checks the parts
belong together (one course version, one class, every shard exactly once, each file whole and
its CSV unchanged), then rebuilds the rows and writes them with the same function a single run
uses — so the merged CSV is byte for byte the CSV one run over the whole class writes — plus the
merged details file and, on request, every student's feedback page. Nothing is written until
every check has passed.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from .. import __version__
from ..course import CourseError, write_atomically
from .results import Outcome, StudentRow, write_csv, write_feedback
from .shards import ClassSummary, Shard
from .submissions import display_name

FORMAT = 1
SUFFIX = ".details.jsonl"


def details_path(csv_path: Path) -> Path:
    return csv_path.with_name(csv_path.name + SUFFIX)


def course_version(source_hashes: dict[str, str], limits_key: str) -> dict:
    """What a grade refers to: every chapter's source hash, the limits, the trainperf version."""
    return {"trainperf": __version__, "limits": limits_key, "chapters": dict(source_hashes)}


def student_order(student: str) -> bytes:
    """Rows are ordered by the raw id's bytes, the same on every machine."""
    return student.encode("utf-8", "surrogateescape")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_details(
    csv_path: Path,
    rows: list[StudentRow],
    chapter_ids: list[str],
    version: dict,
    shard: Shard,
    summary: ClassSummary,
) -> Path:
    """Write ``CSV.details.jsonl`` for the CSV just written at ``csv_path``."""
    header = {
        "trainperf_details": FORMAT,
        "shard": str(shard),
        "chapters": chapter_ids,
        "course": version,
        "class": asdict(summary),
        "students": len(rows),
        "csv_sha256": _sha256(csv_path),
    }
    lines = [header]
    for row in rows:
        lines.append(
            {
                "student": row.student,
                "notes": row.notes,
                "outcomes": [asdict(row.outcomes[ch]) for ch in chapter_ids],
            }
        )
    lines.append({"end": len(rows)})
    path = details_path(csv_path)
    write_atomically(path, "".join(json.dumps(line, ensure_ascii=True) + "\n" for line in lines))
    return path


@dataclass
class Part:
    """One grades CSV with its details, read and checked."""

    csv: Path
    shard: Shard
    chapters: list[str]
    course: dict
    summary: ClassSummary
    rows: list[StudentRow]

    @property
    def name(self) -> str:
        return str(self.csv)


def _outcome(data: dict) -> Outcome:
    data = dict(data)
    data["cells"] = {k: (float(v[0]), float(v[1])) for k, v in data["cells"].items()}
    return Outcome(**data)


def _header(csv_path: Path, details: Path) -> dict:
    if not csv_path.is_file():
        raise CourseError(
            f"{csv_path}: no such file (a missing part: copy it here, or grade its "
            "shard again with `trainperf grade --shard I/N`)."
        )
    if not details.is_file():
        raise CourseError(
            f"{csv_path} is not a grades CSV written by `trainperf grade` or `merge`: "
            f"{details.name} is not next to it (copy both files of every part)."
        )
    with details.open(encoding="utf-8", errors="replace") as fh:
        first = fh.readline()
    try:
        header = json.loads(first)
    except json.JSONDecodeError:
        header = None
    if not isinstance(header, dict) or "trainperf_details" not in header:
        raise CourseError(
            f"{csv_path} is not a grades CSV written by `trainperf grade` or `merge`: "
            f"{details.name} is not a trainperf details file."
        )
    if header["trainperf_details"] != FORMAT:
        raise CourseError(
            f"{details} has details format {header['trainperf_details']}; this "
            f"trainperf ({__version__}) reads format {FORMAT}: merge with the "
            "trainperf that graded it."
        )
    return header


def read_part(csv_path: Path) -> Part:
    """A grades CSV and its details file, checked whole and unchanged; one clear error if not."""
    details = details_path(csv_path)
    header = _header(csv_path, details)
    try:
        shard = Shard.parse(header["shard"])
        summary = ClassSummary(**header["class"])
        chapters, course, expected = list(header["chapters"]), dict(header["course"]), header["students"]
    except (CourseError, KeyError, TypeError, ValueError) as exc:
        raise CourseError(
            f"{details} has a damaged first line ({type(exc).__name__}); copy it "
            "again or grade that shard again."
        ) from None
    again = f"copy it again or grade shard {shard} again"
    rows: list[StudentRow] = []
    ended = False
    lines = details.read_text(encoding="utf-8", errors="replace").splitlines()[1:]
    for number, line in enumerate(lines, 2):
        try:
            data = json.loads(line)
            if "end" in data:
                ended = data["end"] == len(rows) == expected and number == len(lines) + 1
                break
            outcomes = {o["chapter"]: _outcome(o) for o in data["outcomes"]}
            if list(outcomes) != chapters:
                raise ValueError("chapters")
            rows.append(StudentRow(data["student"], outcomes, list(data["notes"])))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
            raise CourseError(
                f"{details} is damaged at line {number} (cut short while copying?): {again}."
            ) from None
    if not ended:
        raise CourseError(
            f"{details} is cut short ({len(rows)} of {expected} students and no end line): {again}."
        )
    if _sha256(csv_path) != header.get("csv_sha256"):
        raise CourseError(
            f"{csv_path} is not the CSV its details file describes (cut short or "
            f"edited after grading): {again}."
        )
    return Part(csv_path, shard, chapters, course, summary, rows)


def _version_difference(a: Part, b: Part) -> str:
    if a.chapters != b.chapters:
        return f"chapters {', '.join(a.chapters)} vs {', '.join(b.chapters)}"
    if a.course.get("trainperf") != b.course.get("trainperf"):
        return f"trainperf {a.course.get('trainperf')} vs {b.course.get('trainperf')}"
    if a.course.get("limits") != b.course.get("limits"):
        return f"limits {a.course.get('limits')} vs {b.course.get('limits')}"
    changed = [
        ch
        for ch in a.chapters
        if a.course.get("chapters", {}).get(ch) != b.course.get("chapters", {}).get(ch)
    ]
    return f"{', '.join(changed)}: solution, helpers or tool versions differ"


def check_parts(parts: list[Part]) -> None:
    """Parts of one grading: same course version, same class, every shard exactly once."""
    first = parts[0]
    for part in parts[1:]:
        if (part.chapters, part.course) != (first.chapters, first.course):
            raise CourseError(
                f"{part.name} was graded with another course version than {first.name} "
                f"({_version_difference(first, part)}): grade every shard with the same "
                "checkout and limits."
            )
    for part in parts[1:]:
        if part.shard.count != first.shard.count:
            raise CourseError(
                f"{part.name} is shard {part.shard} but {first.name} is shard "
                f"{first.shard}: the parts come from different splits."
            )
        if part.summary.digest != first.summary.digest:
            raise CourseError(
                f"{part.name} saw another class than {first.name} ({part.summary.students} "
                f"vs {first.summary.students} students, {part.summary.notebooks} vs "
                f"{first.summary.notebooks} notebooks): the submissions changed between "
                "shards; grade every shard from the same submissions."
            )
    seen: dict[int, Part] = {}
    for part in parts:
        if part.shard.index in seen:
            raise CourseError(
                f"{seen[part.shard.index].name} and {part.name} are both shard "
                f"{part.shard}: give each shard once."
            )
        seen[part.shard.index] = part
    missing = [f"{i}/{first.shard.count}" for i in range(1, first.shard.count + 1) if i not in seen]
    if missing:
        raise CourseError(
            f"missing shard(s) {', '.join(missing)}: the parts given are "
            f"{', '.join(p.name for p in parts)}; copy the missing part(s) here or grade "
            "them with `trainperf grade --shard I/N`."
        )
    owner: dict[str, Part] = {}
    for part in parts:
        for row in part.rows:
            if row.student in owner:
                raise CourseError(
                    f"{owner[row.student].name} and {part.name} both hold student "
                    f"{display_name(row.student)!r}: the parts overlap."
                )
            owner[row.student] = part
    if len(owner) != first.summary.students:
        raise CourseError(
            f"the parts hold {len(owner)} students but the class has "
            f"{first.summary.students}: grade the shards again."
        )


def merge(part_paths: list[Path], out: Path, feedback: Path | None = None) -> list[StudentRow]:
    """Check the parts, then write ``out`` (+ details, + feedback pages). Returns the rows."""
    if not part_paths:
        raise CourseError("no parts given: `trainperf merge part-*.csv --out grades.csv`.")
    targets = {out.resolve(), details_path(out).resolve()}
    for path in part_paths:
        if path.resolve() in targets or details_path(path).resolve() in targets:
            raise CourseError(
                f"--out {out} would overwrite the part {path}: write the merged CSV to another file."
            )
    parts = [read_part(path) for path in part_paths]
    check_parts(parts)
    first = parts[0]
    rows = sorted((row for part in parts for row in part.rows), key=lambda r: student_order(r.student))
    out.parent.mkdir(parents=True, exist_ok=True)
    write_csv(rows, first.chapters, out)
    write_details(out, rows, first.chapters, first.course, Shard(1, 1), first.summary)
    if feedback is not None:
        for row in rows:
            write_feedback(row, feedback)
    return rows

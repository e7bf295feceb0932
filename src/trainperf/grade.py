"""``trainperf grade``: grade a folder of submissions into a CSV you can trust.

Layout accepted: ``SUBMISSIONS/<student>/<chapter>/<notebook>.ipynb`` (nbgrader's
``submitted/`` layout) or ``SUBMISSIONS/<student>/<notebook>.ipynb``.

nbgrader generates each chapter once (its release and gradebook give the graded cells and
their points). Each submission is then executed alone — see :mod:`trainperf.exam` for what
is executed and :mod:`trainperf.isolate` for the limits and the sandbox — and the grading
process, not the student's kernel, turns the results into scores. Finished notebooks are
recorded in a progress file next to the CSV, so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import csv
import hashlib
import html
import json
import os
import queue
import secrets
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import __version__
from .course import CourseError, chapter_notebook, chapters, generate, make_scratch_course
from .exam import CellVerdict, build_exam, score
from .isolate import can_drop_privileges, execute, pick_uids, remove


@dataclass
class Limits:
    """What one submission may use. Defaults suit the course's quick CPU configuration."""

    cell_timeout: int = 60  # seconds per cell
    notebook_timeout: float = 600  # seconds for the whole notebook
    memory_mb: int | None = 6144  # address-space cap for the kernel; None = no cap
    max_output: int = 20_000  # characters of output kept per cell


@dataclass
class Outcome:
    """One student's result for one chapter."""

    student: str
    chapter: str
    score: float
    max_score: float
    reason: str = ""
    seconds: float = 0.0
    cells: dict[str, tuple[float, float]] = field(default_factory=dict)  # grade_id -> (got, max)
    errors: dict[str, str] = field(default_factory=dict)  # graded cell -> exception it raised
    feedback: list[dict] = field(default_factory=list)  # CellVerdicts as dicts
    key: str = ""  # what was graded: submission hash + grader version, for resuming


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


def discover(submissions: Path, root: Path, chapter_ids: list[str]
             ) -> tuple[dict[str, dict[str, Path]], dict[str, list[str]]]:
    """Map student -> chapter -> submitted notebook, and student -> notes on stray files."""
    if not submissions.is_dir():
        raise CourseError(f"Submissions folder {submissions} does not exist.")
    expected = {chapter_notebook(root, ch).name: ch for ch in chapter_ids}
    found: dict[str, dict[str, Path]] = {}
    notes: dict[str, list[str]] = {}
    for student_dir in sorted(p for p in submissions.iterdir() if p.is_dir()
                              and not p.name.startswith(".")):
        student = student_dir.name
        found[student], notes[student] = {}, []
        for nb in sorted(student_dir.rglob("*.ipynb")):
            if ".ipynb_checkpoints" in nb.parts:
                continue
            chapter = expected.get(nb.name)
            if chapter is None and nb.parent.name in chapter_ids:
                chapter = nb.parent.name
                notes[student].append(f"{nb.relative_to(student_dir)} graded as {chapter} "
                                      f"(expected the name {chapter_notebook(root, chapter).name})")
            if chapter is None:
                notes[student].append(f"ignored {nb.relative_to(student_dir)}: not a notebook "
                                      "of any graded chapter")
            elif chapter in found[student]:
                notes[student].append(f"ignored {nb.relative_to(student_dir)}: a second "
                                      f"notebook for {chapter}")
            else:
                found[student][chapter] = nb
    return found, notes


def _read_submission(path: Path) -> tuple[dict | None, str]:
    """The notebook as a dict, or None and what is wrong with the file."""
    import nbformat

    if path.stat().st_size == 0:
        return None, "the submitted notebook is an empty file"
    try:
        json.loads(path.read_bytes())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        where = (f"; line {exc.lineno}, column {exc.colno}" if isinstance(exc, json.JSONDecodeError)
                 else "")
        return None, f"the submitted notebook is not valid JSON ({getattr(exc, 'msg', exc)}{where})"
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as exc:
        return None, f"the submitted file is not a Jupyter notebook ({type(exc).__name__})"
    if not isinstance(nb.get("cells"), list):
        return None, "the submitted notebook has no list of cells"
    return nb, ""


@dataclass
class ChapterTemplate:
    solution: dict
    released: dict
    max_score: float
    source_hash: str


def make_templates(root: Path, chapter_ids: list[str], scratch: Path) -> dict[str, ChapterTemplate]:
    """nbgrader generates every chapter once; its gradebook gives the points."""
    import nbformat
    from nbgrader.api import Gradebook

    template = make_scratch_course(root, scratch / "template", chapter_ids)
    out = {}
    for chapter in chapter_ids:
        released_dir = generate(template, chapter)
        name = chapter_notebook(root, chapter).name
        solution_text = chapter_notebook(root, chapter).read_bytes()
        with Gradebook(f"sqlite:///{template / 'gradebook.db'}") as gb:
            max_score = float(gb.find_assignment(chapter).max_score)
        out[chapter] = ChapterTemplate(
            nbformat.read(chapter_notebook(root, chapter), as_version=4),
            nbformat.read(released_dir / name, as_version=4), max_score,
            hashlib.sha256(solution_text + __version__.encode()).hexdigest()[:16])
    return out


def _reasons(exam_notes: list[str], verdicts: list[CellVerdict], execution, limits: Limits,
             answers: dict[str, int]) -> list[str]:
    reasons = list(exam_notes)
    records = execution.records
    for gid, index in answers.items():
        record = records.get(index, {})
        if record.get("ename") == "CellTimeoutError":
            reasons.append(f"answer {gid} ran past the {limits.cell_timeout} s cell limit")
        elif record.get("ename") == "MemoryError":
            reasons.append(f"answer {gid} ran out of memory (limit {limits.memory_mb} MiB)")
    died = [r for r in records.values() if r.get("status") == "died"]
    if died:
        reasons.append(f"the kernel died in cell {died[0]['index']}; no later cell counts")
    if execution.timed_out:
        reasons.append(f"grading stopped at the {limits.notebook_timeout:g} s notebook limit")
    elif not execution.finished and not died:
        last = (execution.log_tail.strip().splitlines() or ["no log"])[-1][:200]
        reasons.append(f"grading stopped early (the grading process ended unexpectedly: {last})")
    if any("[output truncated]" in r.get("text", "") for r in records.values()):
        reasons.append("output was truncated")
    timeouts = [v.grade_id for v in verdicts if v.status == "timeout"]
    if timeouts:
        reasons.append(f"test cell(s) {', '.join(timeouts)} ran past the cell limit")
    return reasons


def grade_one(template: ChapterTemplate, scratch: Path, student: str, chapter: str,
              notebook: Path, limits: Limits, uid: int | None, key: str,
              hide: list[Path] | None = None) -> Outcome:
    """Execute one submission alone and score it in this (the grading) process."""
    start = time.perf_counter()
    submission, problem = _read_submission(notebook)
    if submission is None:
        return Outcome(student, chapter, 0.0, template.max_score, problem, key=key)
    exam = build_exam(template.solution, template.released, submission)
    sandbox = scratch / "sandboxes" / secrets.token_hex(12)
    try:
        execution = execute(exam.notebook, sandbox, cell_timeout=limits.cell_timeout,
                            notebook_timeout=limits.notebook_timeout, memory_mb=limits.memory_mb,
                            max_output=limits.max_output, uid=uid, hide=hide)
    finally:
        remove(sandbox)
    verdicts = score(exam, execution.records)
    if not execution.records and not execution.timed_out:
        exam.notes.append("the notebook could not be started: "
                          + (execution.log_tail.strip().splitlines() or ["no log"])[-1][:200])
    return Outcome(
        student, chapter, sum(v.points for v in verdicts), template.max_score,
        "; ".join(_reasons(exam.notes, verdicts, execution, limits, exam.answers)),
        time.perf_counter() - start,
        {v.grade_id: (v.points, v.max_points) for v in verdicts},
        {v.grade_id: v.ename for v in verdicts if v.ename}, [asdict(v) for v in verdicts], key)


def write_csv(rows: list[StudentRow], chapter_ids: list[str], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["student_id", "score", "max_score", *chapter_ids, "reason"])
        for row in sorted(rows, key=lambda r: r.student):
            per = [f"{row.outcomes[ch].score:g}" for ch in chapter_ids]
            writer.writerow([row.student, f"{row.score:g}", f"{row.max_score:g}", *per, row.reason])


def write_feedback(row: StudentRow, folder: Path) -> None:
    """One HTML page per student: each graded cell's points and its visible messages."""
    folder.mkdir(parents=True, exist_ok=True)
    parts = [f"<!doctype html><meta charset='utf-8'><title>Feedback: {html.escape(row.student)}"
             "</title><style>body{font-family:sans-serif;max-width:60em}td,th{border:1px solid #ccc;"
             "padding:4px;vertical-align:top}pre{white-space:pre-wrap;margin:0}</style>",
             f"<h1>Feedback for {html.escape(row.student)}</h1>",
             f"<p>Total: {row.score:g} / {row.max_score:g}</p>"]
    if row.notes:
        parts.append("<p>" + html.escape("; ".join(row.notes)) + "</p>")
    for outcome in row.outcomes.values():
        parts.append(f"<h2>{html.escape(outcome.chapter)}: {outcome.score:g} / "
                     f"{outcome.max_score:g}</h2>")
        if outcome.reason:
            parts.append(f"<p><b>Notes:</b> {html.escape(outcome.reason)}</p>")
        parts.append("<table><tr><th>exercise</th><th>points</th><th>what the checks said</th></tr>")
        for cell in outcome.feedback:
            parts.append(f"<tr><td>{html.escape(cell['grade_id'])}</td>"
                         f"<td>{cell['points']:g} / {cell['max_points']:g}</td>"
                         f"<td><pre>{html.escape(cell['visible'])}</pre></td></tr>")
        parts.append("</table>")
    (folder / f"{row.student}.html").write_text("\n".join(parts))


def _submission_key(path: Path, template: ChapterTemplate, limits: Limits) -> str:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    return f"{digest}:{template.source_hash}:{limits.cell_timeout}:{limits.memory_mb}"


def _load_progress(path: Path) -> dict[tuple[str, str], Outcome]:
    done: dict[tuple[str, str], Outcome] = {}
    if not path.is_file():
        return done
    for line in path.read_text().splitlines():
        try:
            data = json.loads(line)
            data["cells"] = {k: tuple(v) for k, v in data["cells"].items()}
            outcome = Outcome(**data)
        except (json.JSONDecodeError, TypeError, KeyError):
            continue  # a line cut short by an interruption
        done[(outcome.student, outcome.chapter)] = outcome
    return done


def _sandbox_works(scratch: Path, hide: list[Path], uid: int) -> bool:
    """Probe once: can an unprivileged uid in the namespace import the course code?"""
    import subprocess

    from .isolate import isolation_prefix

    probe = scratch / "probe"
    probe.mkdir(exist_ok=True)
    os.chmod(probe, 0o777)
    command = isolation_prefix(uid, hide, probe) + [
        sys.executable, "-c", "import trainperf.sandbox, helpers, nbclient, ipykernel"]
    result = subprocess.run(command, cwd=probe, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "HOME": str(probe)})
    if result.returncode != 0:
        print("note: cannot run submissions under a separate uid here ("
              + (result.stderr.strip().splitlines() or ["?"])[-1][:160] + ")", flush=True)
    return result.returncode == 0


def grade(root: Path, submissions: Path, out: Path, wanted: list[str] | None = None,
          jobs: int = 1, limits: Limits | None = None, workdir: Path | None = None,
          feedback: Path | None = None, fresh: bool = False) -> list[StudentRow]:
    """Grade every student in ``submissions`` and write ``out`` (CSV). Returns the rows."""
    limits = limits or Limits()
    chapter_ids = chapters(root, wanted)
    found, notes = discover(submissions, root, chapter_ids)
    if not found:
        raise CourseError(f"No student folders in {submissions}: expected "
                          "SUBMISSIONS/<student>/<chapter>/<notebook>.ipynb.")
    progress_path = out.with_name(out.name + ".progress.jsonl")
    if fresh and progress_path.exists():
        progress_path.unlink()
    previous = _load_progress(progress_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="trainperf-grade-") as tmp:
        scratch = workdir or Path(tmp)
        scratch.mkdir(parents=True, exist_ok=True)
        os.chmod(scratch, 0o711)  # sandboxes can pass through, not list or read it
        print(f"preparing nbgrader gradebooks for {', '.join(chapter_ids)} ...", flush=True)
        templates = make_templates(root, chapter_ids, scratch)
        os.chmod(scratch / "template", 0o700)
        rows = {s: StudentRow(s, notes=notes[s]) for s in found}
        todo, resumed = [], 0
        for student, by_chapter in found.items():
            for chapter in chapter_ids:
                template = templates[chapter]
                if chapter not in by_chapter:
                    name = chapter_notebook(root, chapter).name
                    rows[student].outcomes[chapter] = Outcome(
                        student, chapter, 0.0, template.max_score, f"missing {name}")
                    continue
                key = _submission_key(by_chapter[chapter], template, limits)
                earlier = previous.get((student, chapter))
                if earlier is not None and earlier.key == key:
                    rows[student].outcomes[chapter] = earlier
                    resumed += 1
                else:
                    todo.append((student, chapter, by_chapter[chapter], key))
        hide = sorted({submissions, out.parent, scratch / "template",
                       *([feedback] if feedback else [])})
        uids = pick_uids(max(1, jobs)) if can_drop_privileges() else []
        isolated = bool(uids) and _sandbox_works(scratch, hide, uids[0])
        print(f"grading {len(todo)} notebook(s) from {len(found)} student(s), jobs={jobs}"
              + (f", {resumed} already graded (resumed)" if resumed else "")
              + ("" if isolated else "; not root, so submissions run as this user"), flush=True)
        slots: queue.Queue[int | None] = queue.Queue()
        for slot in range(max(1, jobs)):
            slots.put(uids[slot] if isolated else None)

        def task(student: str, chapter: str, notebook: Path, key: str) -> Outcome:
            uid = slots.get()
            try:
                return grade_one(templates[chapter], scratch, student, chapter, notebook, limits,
                                 uid, key, hide)
            finally:
                slots.put(uid)

        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool, \
                progress_path.open("a") as progress:
            futures = [pool.submit(task, *item) for item in todo]
            for done, future in enumerate(as_completed(futures), 1):
                outcome = future.result()
                rows[outcome.student].outcomes[outcome.chapter] = outcome
                progress.write(json.dumps(asdict(outcome)) + "\n")
                progress.flush()
                print(f"  [{done}/{len(todo)}] {outcome.student} {outcome.chapter}: "
                      f"{outcome.score:g}/{outcome.max_score:g} in {outcome.seconds:.1f} s"
                      + (f" — {outcome.reason}" if outcome.reason else ""), flush=True)
    ordered = [rows[s] for s in sorted(rows)]
    for row in ordered:
        row.outcomes = {ch: row.outcomes[ch] for ch in chapter_ids}
        if feedback is not None:
            write_feedback(row, feedback)
    write_csv(ordered, chapter_ids, out)
    print(f"wrote {out} ({len(ordered)} students)", flush=True)
    return ordered

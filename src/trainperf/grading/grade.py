"""``trainperf grade``: grade a folder of submissions into a CSV you can trust.

Per chapter, nbgrader generates the release (graded cells and points) and a trusted reference
run records what the solution produces for every hidden check (:mod:`trainperf.grading.reference`).
Each submission then runs alone in a fresh kernel in the sandbox (:mod:`trainperf.grading.sandbox`);
the kernel only produces values, and this process compares them with the reference
(:mod:`trainperf.grading.exam`). Finished notebooks are recorded in a progress file next to the CSV,
so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..course import CourseError, cache_dir, chapter_notebook, chapters, tree_hash, write_atomically
from .copies import Checker
from .copies import flags as copy_flags
from .exam import ORIGIN, CellVerdict, build_exam, events, helper_imports, score, solution_answers
from .exam import _source as cell_source
from .parts import course_version, student_order, write_details
from .reference import ChapterTemplate, make_templates, reference_records
from .replay import build_table, exercises_of, read_calls
from .results import Outcome, StudentRow, load_progress, progress_line, write_csv, write_feedback
from .sandbox import Isolation, KernelLimits, cgroup_support, detect, execute, install_helpers_copy, pick_uids
from .shards import Shard, select, summarize
from .stubs import Stubs, blocked_calls, install_stubbed_copy
from .stubs import resolve as resolve_stubs
from .submissions import discover, read_submission


@dataclass
class Limits:
    """What one submission may use. Defaults suit the course's quick CPU configuration."""

    cell_timeout: int = 60  # seconds per cell
    notebook_timeout: float = 600  # seconds for the whole notebook
    memory_mib: int | None = 6144  # address-space cap for the kernel; None = no cap
    max_output: int = 20_000  # characters of output kept per cell
    file_mib: int = 256  # largest file the kernel may write
    disk_mib: int = 1024  # the kernel's private /tmp
    processes: int = 256  # processes and threads of the kernel's uid

    def kernel(self) -> KernelLimits:
        return KernelLimits(self.memory_mib, self.file_mib, self.disk_mib, self.processes)

    def key(self) -> str:
        return (
            f"{self.cell_timeout}:{self.notebook_timeout:g}:{self.memory_mib}:{self.file_mib}:"
            f"{self.disk_mib}:{self.processes}:{self.max_output}"
        )


@dataclass
class Course:
    """Everything a grading run shares: templates, references, the sandbox and its helpers."""

    templates: dict[str, ChapterTemplate]
    references: dict[str, dict]
    isolation: Isolation
    site: Path
    package_dir: str
    limits: Limits
    scratch: Path
    compile_caches: dict[str, Path] = field(default_factory=dict)  # chapter -> torch.compile cache
    graded_sites: dict[str, Path] = field(default_factory=dict)  # chapter -> helpers with stubs
    reference_sites: dict[str, Path] = field(default_factory=dict)  # chapter -> helpers that record
    # chapter -> the reference run's folder for its trusted calls, while it runs
    replays: dict[str, Path] = field(default_factory=dict)
    # chapter -> the table of those calls by origin, which the client serves (grading.replay)
    replay_tables: dict[str, Path] = field(default_factory=dict)
    exercises: dict[str, dict[str, str]] = field(default_factory=dict)  # chapter -> stub -> "exercise N"
    blocking: dict[str, dict[str, list[int]]] = field(default_factory=dict)  # chapter -> stub -> exercises
    copies: Checker | None = None  # the copy detector's child process

    def run(self, notebook: dict, uid: int | None, chapter: str = "", reference: bool = False):
        # the reference run keeps the real helpers; a submission's kernel gets the copy in which
        # the chapter's exercised helpers are stubs (:mod:`trainperf.grading.stubs`)
        sites = self.reference_sites if reference else self.graded_sites
        return execute(
            notebook,
            isolation=self.isolation,
            uid=uid,
            site=sites.get(chapter, self.site),
            replay=self.replays.get(chapter) if reference else None,
            replay_table=None if reference else self.replay_tables.get(chapter),
            replay_exercises=self.blocking.get(chapter),
            cell_timeout=self.limits.cell_timeout,
            notebook_timeout=self.limits.notebook_timeout,
            max_output=self.limits.max_output,
            limits=self.limits.kernel(),
            record=True,
            scratch=self.scratch,
            compile_cache=self.compile_caches.get(chapter),
            writable_cache=reference,
        )


def _reasons(
    exam_notes: list[str],
    verdicts: list[CellVerdict],
    execution,
    limits: Limits,
    answers: dict[str, int],
    exercises: dict[str, str] | None = None,
) -> list[str]:
    from .exam import _cell_result, _valid_event

    reasons = list(exam_notes)
    # every field the kernel could have written, checked before it is read (exam._cell_result)
    records: dict[int, dict[str, Any]] = {}
    unusable: set[str] = set()
    for index, raw in execution.records.items():
        if index < 0:
            continue  # the client's own notes (the kernel's pid), not a cell
        records[index], problems = _cell_result(raw)
        unusable.update(problems, (why for e in events(records[index]) if (why := _valid_event(e))))
    for gid, index in answers.items():
        record = records.get(index, {})
        if record.get("ename") == "CellTimeoutError":
            reasons.append(
                f"answer {gid} ran past the {limits.cell_timeout} s cell limit"
                + (
                    "; it ignored the interrupt, so the kernel was stopped and no later cell counts"
                    if record.get("stuck")
                    else ""
                )
            )
        elif record.get("ename") == "MemoryError":
            reasons.append(f"answer {gid} ran out of memory (limit {limits.memory_mib} MiB)")
        elif record.get("ename") == "OSError" and "File too large" in record.get("evalue", ""):
            reasons.append(f"answer {gid} wrote a file over the {limits.file_mib} MiB limit")
        elif "No space left" in record.get("evalue", ""):
            reasons.append(f"answer {gid} filled its {limits.disk_mib} MiB of scratch disk")
        elif (
            "Resource temporarily unavailable" in record.get("evalue", "")
            or record.get("ename") == "BlockingIOError"
        ):
            reasons.append(f"answer {gid} hit the limit of {limits.processes} processes")
    stuck = any(r.get("stuck") for r in records.values())
    flooded = [i for i, r in sorted(records.items()) if r.get("ename") == "OutputTooLarge"]
    if flooded:
        where = next((f"answer {gid}" for gid, i in answers.items() if i == flooded[0]), "a cell")
        reasons.append(
            f"{where} sent a message over the client's size cap; grading stopped there, no "
            "later cell counts — review"
        )
    capped = [r for _, r in sorted(records.items()) if r.get("notebook_cap")]
    if capped:  # a per-notebook cap of the client (client.py) or of sandbox._read_results
        index = capped[0].get("index")
        where = next((f"answer {gid}" for gid, i in answers.items() if i == index), f"cell {index}")
        reasons.append(
            f"the notebook passed its per-notebook limit on {capped[0]['notebook_cap']} at "
            f"{where}; grading stopped there, no later cell counts"
        )
    died = [r for r in records.values() if r.get("status") == "died"]
    if died:
        reasons.append(f"the kernel died in cell {died[0].get('index', '?')}; no later cell counts")
    if execution.timed_out:
        reasons.append(f"grading stopped at the {limits.notebook_timeout:g} s notebook limit")
    elif not execution.finished and not died and not execution.start_error:
        # not the log's last line: the kernel writes to that log, and reasons reach the feedback
        reasons.append("grading stopped early (the notebook client ended unexpectedly)")
    if any("[output truncated]" in r.get("text", "") for r in records.values()):
        reasons.append("output was truncated")
    overflow = sorted({r["records_overflow"] for r in records.values() if r.get("records_overflow")})
    if overflow:
        reasons.append(f"hidden-check records over the cap ({overflow[0]})")
    timeouts = [v.grade_id for v in verdicts if v.status == "timeout"]
    if timeouts:
        reasons.append(
            f"test cell(s) {', '.join(timeouts)} ran past the cell limit"
            + ("; the kernel ignored the interrupt and was stopped" if stuck else "")
        )
    # only the chapter's own exercised helpers are named: a forged event could carry any text,
    # and the reasons reach the learner's feedback page
    blocked = sorted(
        {
            e["helper"]
            for r in records.values()
            for e in events(r)
            if e.get("event") == "blocked-call"
            and _valid_event(e) is None
            and (exercises is None or e["helper"] in exercises)
        }
    )
    if blocked:
        reasons.append(f"called switched-off helper(s) {', '.join(map(str, blocked[:5]))} — review")
    for verdict in verdicts:
        reasons += [f"{verdict.grade_id}: {problem}" for problem in verdict.problems[:1]]
    # what a test cell's verdict did not already say (an answer cell's malformed event, say)
    unusable -= {problem for verdict in verdicts for problem in verdict.problems}
    if unusable:
        reasons.append(
            f"the kernel sent data the grader could not use: {min(unusable)}"
            + (f" (and {len(unusable) - 1} more)" if len(unusable) > 1 else "")
            + " — review"
        )
    if execution.leftovers:
        reasons.append(f"{execution.leftovers} process(es) outlived the sandbox and were killed")
    return reasons


def grade_one(
    course: Course, student: str, chapter: str, notebook: Path, uid: int | None, key: str
) -> Outcome:
    """Execute one submission alone and score it in this (the grading) process."""
    start = time.perf_counter()
    template = course.templates[chapter]
    submission, problem, _ = read_submission(notebook)
    if submission is None:
        return Outcome(student, chapter, 0.0, template.max_score, problem, key=key)
    # the caps come first: building the exam parses every cell of the learner's (in this process)
    raw = {
        cell.get("metadata", {}).get("nbgrader", {}).get("grade_id"): cell_source(cell)
        for cell in submission.get("cells", [])
        if cell.get("cell_type") == "code"
    }
    too_big = _oversized(submission, {gid: text for gid, text in raw.items() if gid})
    if too_big:
        return Outcome(student, chapter, 0.0, template.max_score, too_big, key=key)
    exam = build_exam(template.solution, template.released, submission)
    cells = exam.notebook["cells"]
    answers = {gid: cell_source(cells[i]) for gid, i in exam.answers.items()}
    # the cells the learner added run too: the copy check reads them as well
    answers.update({f"added cell {n}": cell_source(cells[i]) for n, i in enumerate(exam.extras, 1)})
    review = course.copies.check(answers) if course.copies else copy_flags(answers, course.package_dir)
    execution = course.run(exam.notebook, uid, chapter)
    verdicts = score(exam, execution.records, course.references[chapter], course.exercises.get(chapter))
    if execution.start_error:
        exam.notes.append(f"the notebook could not be started: {execution.start_error}")
    reasons = (
        _reasons(
            exam.notes, verdicts, execution, course.limits, exam.answers, course.exercises.get(chapter, {})
        )
        + review
    )
    return Outcome(
        student,
        chapter,
        sum(v.points for v in verdicts),
        template.max_score,
        "; ".join(reasons),
        time.perf_counter() - start,
        {v.grade_id: (v.points, v.max_points) for v in verdicts},
        {v.grade_id: v.ename for v in verdicts if v.ename},
        [asdict(v) for v in verdicts],
        key,
        review,
    )


MAX_ANSWER_CHARS = 100_000  # one answer cell's source; a real answer is a few hundred
MAX_CODE_CHARS = 400_000  # all the learner's code of one notebook: answers and added cells


def _oversized(submission: dict, answers: dict[str, str]) -> str:
    """The reason a submission is not run at all ('' when it is within the caps): the copy
    detector and the kernel then only ever see bounded input."""
    for gid, source in answers.items():
        if len(source) > MAX_ANSWER_CHARS:
            return (
                f"answer {gid} is {len(source):,} characters, over the {MAX_ANSWER_CHARS:,} "
                "cap; the notebook was not graded — review"
            )
    total = sum(
        len("".join(c.get("source", ""))) for c in submission.get("cells", []) if c.get("cell_type") == "code"
    )
    if total > MAX_CODE_CHARS:
        return (
            f"the notebook holds {total:,} characters of code, over the {MAX_CODE_CHARS:,} "
            "cap; it was not graded — review"
        )
    return ""


def _submission_key(path: Path, template: ChapterTemplate, limits: Limits) -> str:
    from .submissions import read_bytes

    try:
        digest = hashlib.sha256(read_bytes(path)).hexdigest()[:16]
    except OSError:
        digest = "unreadable"
    return f"{digest}:{template.source_hash}:{limits.key()}"


def prepare(
    root: Path,
    chapter_ids: list[str],
    limits: Limits,
    scratch: Path,
    require_isolation: bool = False,
    fresh: bool = False,
) -> Course:
    """Templates, the sandbox, and the reference run of every chapter."""
    import helpers

    package_dir = str(Path(helpers.__file__).resolve().parent)
    site = install_helpers_copy(scratch / "site")
    isolation = detect(site, root)
    if require_isolation and isolation.level != "uid":
        raise CourseError(f"isolation required but not available: {isolation.why}")
    if isolation.level != "uid":
        print(f"WARNING: weaker isolation ({isolation.level}): {isolation.why}", flush=True)
    print(f"preparing {', '.join(chapter_ids)} (nbgrader release, reference run) ...", flush=True)
    templates = make_templates(root, chapter_ids, scratch, tree_hash(site / "helpers"))
    course = Course(templates, {}, isolation, site, package_dir, limits, scratch, copies=Checker(package_dir))
    for chapter in chapter_ids:
        stubs = _stubs(templates[chapter], Path(package_dir))
        course.exercises[chapter] = stubs.exercises()
        course.blocking[chapter] = exercises_of(blocked_calls(templates[chapter].solution), stubs.exercises())
        course.graded_sites[chapter] = install_stubbed_copy(site, scratch / f"site-{chapter}", stubs)
        course.reference_sites[chapter] = install_stubbed_copy(
            site, scratch / f"site-reference-{chapter}", stubs, recording=True
        )
    uid = pick_uids(1)[0] if isolation.level == "uid" else None
    for chapter in chapter_ids:
        answers = solution_answers(templates[chapter].solution)
        if copy_flags(answers, package_dir):
            raise CourseError(
                f"{chapter}: the solution itself is flagged as a copy of helper code: "
                f"{copy_flags(answers, package_dir)[0]}"
            )
        course.references[chapter] = _reference(course, chapter, uid, fresh)
    return course


def _stubs(template: ChapterTemplate, package_dir: Path) -> Stubs:
    """The chapter's blocked functions. Finding them imports the helpers (and so torch), which
    costs seconds: the answer is cached by the course version (``source_hash``)."""
    import json

    cached = cache_dir() / "stubs" / f"{template.chapter}-{template.source_hash}.json"
    try:
        return Stubs(by_file=json.loads(cached.read_text()))
    except (OSError, ValueError):
        pass
    stubs = resolve_stubs(template.solution, helper_imports(template.solution), package_dir)
    try:
        write_atomically(cached, json.dumps(stubs.by_file))
    except OSError:
        pass  # a read-only cache: find them again next time
    return stubs


def _reference(course: Course, chapter: str, uid: int | None, fresh: bool) -> dict:
    """The chapter's reference records; a reference run also leaves torch.compile's cache,
    kept beside the records, which every submission's kernel then starts from (a copy), and
    the table of its trusted calls by origin, which the grading client serves
    (:mod:`trainperf.grading.replay`)."""
    template = course.templates[chapter]
    seed = cache_dir() / "compile" / f"{chapter}-{template.source_hash}"
    fresh_cache = course.scratch / f"compile-{chapter}"
    replay = course.scratch / f"replay-{chapter}"
    kept_table = cache_dir() / "reference" / f"{chapter}-{template.source_hash}.replay-table.pkl"
    replay.mkdir(parents=True, exist_ok=True)
    ran: dict[str, Any] = {}

    def run_reference(notebook: dict):
        fresh_cache.mkdir(parents=True, exist_ok=True)
        if uid is not None:
            os.chown(fresh_cache, uid, uid)
            os.chown(replay, uid, uid)
        course.compile_caches[chapter] = fresh_cache
        course.replays[chapter] = replay
        execution = course.run(notebook, uid, chapter, reference=True)
        ran.update(notebook=notebook, execution=execution)
        return execution

    # the reference's records and its replay table are one result: both cached, or both made
    records = reference_records(template, run_reference, fresh=fresh or not kept_table.is_file())
    if ran:
        cells = ran["notebook"]["cells"]
        sizes = [
            (cells[i].get("metadata", {}).get(ORIGIN, ""), int(r.get("replay_size", 0)))
            for i, r in sorted(ran["execution"].records.items())
            if i >= 0 and i < len(cells)
        ]
        table = build_table(read_calls(replay / "calls.pkl"), sizes)
        kept_table.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(kept_table, pickle.dumps(table, protocol=4))
    course.replays.pop(chapter, None)
    shutil.rmtree(replay, ignore_errors=True)
    course.replay_tables[chapter] = kept_table  # read by the client, outside the sandbox
    if fresh_cache.is_dir() and not seed.exists():
        for path in [fresh_cache, *fresh_cache.rglob("*")]:
            path.chmod(path.stat().st_mode | 0o444 | (0o111 if path.is_dir() else 0))
        seed.parent.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copytree(fresh_cache, seed.with_suffix(".tmp"), dirs_exist_ok=True)
            os.replace(seed.with_suffix(".tmp"), seed)
        except OSError:
            pass  # another grading run published it first
    course.compile_caches[chapter] = seed if seed.is_dir() else fresh_cache
    return records


def grade(
    root: Path,
    submissions: Path,
    out: Path,
    wanted: list[str] | None = None,
    jobs: int = 1,
    limits: Limits | None = None,
    workdir: Path | None = None,
    feedback: Path | None = None,
    fresh: bool = False,
    require_isolation: bool = False,
    shard: Shard | None = None,
) -> list[StudentRow]:
    """Grade every student in ``submissions`` (or one ``shard`` of them) and write ``out`` (CSV)
    and its details file (:mod:`trainperf.grading.parts`). Returns the rows."""
    limits = limits or Limits()
    chapter_ids = chapters(root, wanted)
    if not submissions.is_dir():
        raise CourseError(f"Submissions folder {submissions} does not exist.")
    expected = {chapter_notebook(root, ch).name: ch for ch in chapter_ids}
    found = discover(submissions, expected, chapter_ids)
    if not found.notebooks:
        raise CourseError(
            f"No student folders in {submissions}: expected SUBMISSIONS/<student>/<chapter>/<notebook>.ipynb."
        )
    if wanted is None:  # the chapters handed in; a chapter nobody handed in is not every student's 0
        present = {chapter for mine in found.notebooks.values() for chapter in mine}
        if not present:
            raise CourseError(
                f"No notebook of any chapter in {submissions}: expected "
                "SUBMISSIONS/<student>/<chapter>/<notebook>.ipynb."
            )
        chapter_ids = [chapter for chapter in chapter_ids if chapter in present]
        print(
            f"grading the chapter(s) found in the submissions: {', '.join(chapter_ids)} "
            "(--chapters all counts the others as 0)",
            flush=True,
        )
    summary = summarize(found)  # the whole class: every shard records it
    shard = shard or Shard(1, 1)
    if shard.count > 1:
        found = select(found, shard)
        print(
            f"shard {shard}: {len(found.notebooks)} of {summary.students} students, "
            f"{sum(len(v) for v in found.notebooks.values())} of {summary.notebooks} notebooks",
            flush=True,
        )
    progress_path = out.with_name(out.name + ".progress.jsonl")
    if fresh and progress_path.exists():
        progress_path.unlink()
    previous = load_progress(progress_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="trainperf-grade-") as tmp:
        scratch = (workdir or Path(tmp)).resolve()  # the client runs in a folder of its own
        scratch.mkdir(parents=True, exist_ok=True)
        course = prepare(root, chapter_ids, limits, scratch, require_isolation)
        rows = {s: StudentRow(s, notes=found.notes[s]) for s in found.notebooks}
        todo, resumed = [], 0
        for student, by_chapter in found.notebooks.items():
            for chapter in chapter_ids:
                template = course.templates[chapter]
                if chapter not in by_chapter:
                    rows[student].outcomes[chapter] = Outcome(
                        student,
                        chapter,
                        0.0,
                        template.max_score,
                        f"missing {chapter_notebook(root, chapter).name}",
                    )
                    continue
                key = _submission_key(by_chapter[chapter], template, limits)
                earlier = previous.get((student, chapter))
                if earlier is not None and earlier.key == key:
                    rows[student].outcomes[chapter] = earlier
                    resumed += 1
                else:
                    todo.append((student, chapter, by_chapter[chapter], key))
        level = {
            "uid": "isolated (bubblewrap, own uid per submission)",
            "userns": "isolated (bubblewrap, your uid)",
            "none": "NOT isolated",
        }[course.isolation.level]
        groups = cgroup_support()
        cpu = (
            f"a CPU share of its own per submission (cgroup {groups.version})"
            if groups.version
            else f"no CPU share per submission ({groups.why})"
        )
        print(
            f"grading {len(todo)} notebook(s) from {len(found.notebooks)} student(s), jobs={jobs}, "
            f"{level}, {cpu}" + (f", {resumed} already graded (resumed)" if resumed else ""),
            flush=True,
        )
        slots = threading.BoundedSemaphore(max(1, jobs))
        uid_lock, handed_out = threading.Lock(), set()

        def fresh_uid() -> int | None:
            """A uid no process uses, new for every submission: nothing one kernel leaves under
            its uid (a key in the kernel keyring, a file in a shared folder) is the next one's."""
            if course.isolation.level != "uid":
                return None
            with uid_lock:
                while True:
                    uid = pick_uids(1)[0]
                    if uid not in handed_out:
                        handed_out.add(uid)
                        return uid

        def task(student: str, chapter: str, notebook: Path, key: str) -> Outcome:
            with slots:
                try:
                    return grade_one(course, student, chapter, notebook, fresh_uid(), key)
                except Exception as exc:  # noqa: BLE001 — one broken submission never stops the batch
                    return Outcome(
                        student,
                        chapter,
                        0.0,
                        course.templates[chapter].max_score,
                        f"grading failed ({type(exc).__name__}: {str(exc)[:200]})",
                        key=key,
                    )

        with (
            ThreadPoolExecutor(max_workers=max(1, jobs)) as pool,
            progress_path.open("a", encoding="utf-8") as progress,
        ):
            futures = [pool.submit(task, *item) for item in todo]
            for done, future in enumerate(as_completed(futures), 1):
                outcome = future.result()
                rows[outcome.student].outcomes[outcome.chapter] = outcome
                progress.write(progress_line(outcome))
                progress.flush()
                print(
                    f"  [{done}/{len(todo)}] {_shown(outcome.student)} {outcome.chapter}: "
                    f"{outcome.score:g}/{outcome.max_score:g} in {outcome.seconds:.1f} s"
                    + (f" — {outcome.reason}" if outcome.reason else ""),
                    flush=True,
                )
        if course.copies is not None:
            course.copies.close()
    ordered = [rows[s] for s in sorted(rows, key=student_order)]
    for row in ordered:
        row.outcomes = {ch: row.outcomes[ch] for ch in chapter_ids}
        if feedback is not None:
            write_feedback(row, feedback)
    write_csv(ordered, chapter_ids, out)
    version = course_version({ch: t.source_hash for ch, t in course.templates.items()}, limits.key())
    write_details(out, ordered, chapter_ids, version, shard, summary)
    print(f"wrote {out} ({len(ordered)} students)", flush=True)
    return ordered


def _shown(student: str) -> str:
    from .submissions import display_name

    return (
        display_name(student)[:60].encode("ascii", "backslashreplace").decode()
        if not sys.stdout.encoding.lower().startswith("utf")
        else display_name(student)[:60]
    )

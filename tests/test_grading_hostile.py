"""`trainperf grade` against hostile and broken submissions (issue: grading sound against a
hostile student).

One batch holds every case, graded together with 2 jobs as an instructor would run it, with
honest controls (full and zero) in the same batch; each test then reads its student's row. A
second batch grades a process that tries to outlive its notebook, then a victim, in the same
slot. Every case is a real submission notebook of chapter 1.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys

import hostile_payloads as P
import nbformat
import pytest
from conftest import ROOT, once_per_worker
from gradekit import survivors

from trainperf.discriminate import solution_answers, with_answers
from trainperf.grading.grade import Limits, grade
from trainperf.grading.submissions import display_name

pytestmark = pytest.mark.notebooks
CHAPTER = "01_roofline"
NAME = "01_roofline.ipynb"
RELEASED = ROOT / "notebooks" / CHAPTER / NAME
SOLUTION = solution_answers(ROOT / "solutions" / CHAPTER / NAME)
FULL = 10.0
LONG_NAME = "n" * 250
NON_UTF8 = os.fsdecode(b"caf\xe9-\xff-student")
FORMULA = '=HYPERLINK("evil.example","click")'
ISOLATED = shutil.which("bwrap") is not None and os.geteuid() == 0

ATTACKS_ON_EX1 = {
    "read_course": P.READ_COURSE,
    "frame_reader": P.FRAME_READER,
    "liar": P.LIAR,
    "patch_compare": P.PATCH_COMPARE,
    "settrace": P.SETTRACE,
    "input_transformer": P.INPUT_TRANSFORMER,
    "fake_helpers": P.FAKE_HELPERS,
    "thread_repatch": P.THREAD_REPATCH,
    "scan_processes": P.SCAN_PROCESSES,
    "blocked_bypass": P.BLOCKED_BYPASS,
    "helper_by_name": P.HELPER_BY_NAME,
    "big_records": P.BIG_RECORDS,
    "disk_hog": P.DISK_HOG,
    "process_hog": P.PROCESS_HOG,
    "helper_server": P.HELPER_SERVER,
    "fresh_import": P.FRESH_IMPORT,
    "read_helper_files": P.READ_HELPER_FILES,
    "lazy_tensor": P.LAZY_TENSOR,
    "huge_integer": P.HUGE_INTEGER,
    "replay_probe": P.REPLAY_PROBE,
}

# long enough for any solution cell of chapter 1 on a loaded machine (the slowest takes ~3 s
# idle); short, because the endless loops below each cost it
CELL_LIMIT_S = 20


def _answers(**overrides: str) -> dict[str, str]:
    return {**SOLUTION, **overrides}


def _write(folder, nb) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, folder / NAME)


def _tampered():
    nb = with_answers(RELEASED, _answers(ex1_intensity=P.WRONG))
    by_id = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells}
    nb.cells.remove(by_id["ex1_intensity_test"])  # deleted (and ex1 is wrong)
    by_id["ex2_ideal_time_test"].source = ""  # emptied
    by_id["ex3_limiter_test"].source = "pass"  # edited to pass
    markdown = nbformat.v4.new_markdown_cell(by_id["ex4_critical_m_test"].source)
    markdown.metadata = by_id["ex4_critical_m_test"].metadata
    nb.cells[nb.cells.index(by_id["ex4_critical_m_test"])] = markdown  # turned into markdown
    return nb


def _solution_file():
    nb = nbformat.read(ROOT / "solutions" / CHAPTER / NAME, as_version=4)
    return nb  # carries the hidden tests and the solution markers


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    return once_per_worker("hostile-batch", lambda: _grade_batch(tmp_path_factory))


def _grade_batch(tmp_path_factory):
    base = tmp_path_factory.mktemp("hostile")
    subs = base / "submissions"
    cases = {
        "victim": _answers(),
        NON_UTF8: {},
        LONG_NAME: _answers(),
        "loop": _answers(ex1_intensity="while True:\n    pass\n"),
        "stubborn_loop": _answers(ex2_ideal_time=P.STUBBORN_LOOP),
        "exit": _answers(ex2_ideal_time="import os\nos._exit(1)\n"),
        "segfault": _answers(ex2_ideal_time="import ctypes\nctypes.string_at(0)\n"),
        "oom": _answers(ex3_limiter="hog = bytearray(8 * 2**30)\n"),
        "big_output": _answers(
            ex1_intensity=SOLUTION["ex1_intensity"] + "for _ in range(400):\n    print('x' * 10_000)\n"
        ),
        # one display of 40 MB as the cell's first output: over the client's message cap
        "big_display": _answers(
            ex1_intensity="from IPython.display import display\n"
            "display({'text/plain': 'x' * 40_000_000}, raw=True)\n" + SOLUTION["ex1_intensity"]
        ),
        **{name: _answers(ex1_intensity=payload) for name, payload in ATTACKS_ON_EX1.items()},
        "print_everything": _answers(
            ex1_intensity=P.PRINT_EVERYTHING + SOLUTION["ex1_intensity"],
            ex2_ideal_time=P.PRINT_EVERYTHING_EX2,
        ),
    }
    for student, answers in cases.items():
        _write(subs / student / CHAPTER, with_answers(RELEASED, answers))
    _write(subs / FORMULA / CHAPTER, _solution_file())
    _write(subs / "tamper" / CHAPTER, _tampered())
    # symbolic links: a linked student folder, chapter folder and notebook, and a link to solutions/
    os.symlink(subs / "victim", subs / "sym_student")
    (subs / "sym_chapter").mkdir()
    os.symlink(subs / "victim" / CHAPTER, subs / "sym_chapter" / CHAPTER)
    (subs / "sym_notebook" / CHAPTER).mkdir(parents=True)
    os.symlink(subs / "victim" / CHAPTER / NAME, subs / "sym_notebook" / CHAPTER / NAME)
    (subs / "sym_solution" / CHAPTER).mkdir(parents=True)
    os.symlink(ROOT / "solutions" / CHAPTER / NAME, subs / "sym_solution" / CHAPTER / NAME)
    (subs / "bad_json" / CHAPTER).mkdir(parents=True)
    (subs / "bad_json" / CHAPTER / NAME).write_text('{"cells": [')
    (subs / "empty" / CHAPTER).mkdir(parents=True)
    (subs / "empty" / CHAPTER / NAME).write_text("")
    _write(subs / "wrong_name" / CHAPTER, with_answers(RELEASED, _answers()))
    (subs / "wrong_name" / CHAPTER / NAME).rename(subs / "wrong_name" / CHAPTER / "roofline (1).ipynb")
    _write(subs / "extra" / CHAPTER, with_answers(RELEASED, _answers()))
    shutil.copy(subs / "extra" / CHAPTER / NAME, subs / "extra" / "scratch_copy.ipynb")
    (subs / "missing").mkdir()
    tmp_before = {p.name for p in os.scandir("/tmp")}
    out = base / "out" / "grades.csv"
    limits = Limits(
        cell_timeout=CELL_LIMIT_S, notebook_timeout=400, memory_mib=3072, disk_mib=512, processes=128
    )
    rows = grade(
        ROOT,
        subs,
        out,
        [CHAPTER],
        jobs=2,
        limits=limits,
        workdir=base / "scratch",
        feedback=base / "feedback",
    )
    with open(out, encoding="utf-8") as fh:
        table = {r["student_id"]: r for r in csv.DictReader(fh)}
    return {
        "rows": {r.student: r for r in rows},
        "csv": table,
        "out": out,
        "subs": subs,
        "base": base,
        "feedback": base / "feedback",
        "limits": limits,
        "tmp_before": tmp_before,
    }


def _outcome(batch, student):
    return batch["rows"][student].outcomes[CHAPTER]


def _visible(batch, student, cell="ex1_intensity_test") -> str:
    return next(c["visible"] for c in _outcome(batch, student).feedback if c["grade_id"] == cell)


def _printed(batch, student, cell="ex1_intensity_test") -> str:
    """What the attacker's kernel printed (its own report; kept for the instructor, not shown)."""
    return next(c["printed"] for c in _outcome(batch, student).feedback if c["grade_id"] == cell)


def test_controls_score_full_and_zero(batch):
    assert _outcome(batch, "victim").score == FULL and batch["rows"]["victim"].reason == ""
    assert _outcome(batch, NON_UTF8).score == 0  # the untouched release
    assert _outcome(batch, LONG_NAME).score == FULL


@pytest.mark.parametrize("student", sorted(ATTACKS_ON_EX1))
def test_attacks_on_exercise_1_earn_nothing(batch, student):
    outcome = _outcome(batch, student)
    assert outcome.cells["ex1_intensity_test"][0] == 0, _visible(batch, student)
    assert outcome.score <= FULL - 2, outcome.reason  # some attacks also break their own later cells


def test_no_table_of_recorded_results_is_in_the_kernel(batch):
    """The replay table stays with the grading client: the kernel finds no file of it, and its
    requests for a hidden case (or the visible case's result under other arguments) get nothing."""
    assert "TABLE []" in _printed(batch, "replay_probe")
    assert "helpers.roofline.gemm_flops" in batch["rows"]["replay_probe"].reason  # flagged for review


@pytest.mark.skipif(not ISOLATED, reason="needs root and bubblewrap (bwrap) for the sandbox")
def test_the_course_is_invisible_to_the_kernel(batch):
    assert "FOUND []" in _printed(batch, "read_course")


@pytest.mark.skipif(not ISOLATED, reason="needs root and bubblewrap (bwrap) for the sandbox")
def test_no_grading_process_can_be_reached(batch):
    text = _printed(batch, "scan_processes")
    scan = eval(text.split("SCAN", 1)[1].strip().splitlines()[0])  # noqa: S307 — the attacker's own report
    assert scan["uid"] >= 1_000_000  # a uid no grading process uses
    assert scan["stolen"] == [] and scan["secrets"] == [] and scan["attached"] == []
    assert scan["grader_globals"] == []
    # the only foreign process it can see is the sandbox's own init, which it cannot touch
    assert len(scan["foreign"]) <= 1 and scan["signalled"] in ([], scan["foreign"])


def test_copies_of_the_reference_are_flagged(batch):
    reason = _outcome(batch, "blocked_bypass").reason
    assert "answer ex1_intensity uses importlib.reload" in reason and "— review" in reason
    assert "switched-off helper" in _outcome(batch, "helper_by_name").reason


@pytest.mark.skipif(not ISOLATED, reason="needs root and bubblewrap (bwrap) for the sandbox")
def test_disk_and_process_limits_hold(batch):
    disk = _printed(batch, "disk_hog")
    written = int(disk.split("DISK", 1)[1].split()[0])
    assert written <= batch["limits"].disk_mib and "No space left" in disk and "File too large" in disk
    forked = _printed(batch, "process_hog").split("FORKED", 1)[1].split()
    assert int(forked[0]) < batch["limits"].processes and forked[1] == "BlockingIOError"
    leaked = {p.name for p in os.scandir("/tmp")} - batch["tmp_before"]
    assert not leaked & {"hog-0", "one-big-file", "not_the_helpers.py", "helpers"}


def test_record_flood_is_capped(batch):
    outcome = _outcome(batch, "big_records")
    assert outcome.cells["ex1_intensity_test"][0] == 0
    progress = batch["out"].with_name(batch["out"].name + ".progress.jsonl")
    assert progress.stat().st_size < 2_000_000
    assert max(p.stat().st_size for p in batch["feedback"].iterdir()) < 500_000


def test_endless_loop_fails_that_cell_only(batch):
    assert _outcome(batch, "loop").score == FULL - 2
    assert f"ex1_intensity ran past the {CELL_LIMIT_S} s cell limit" in _outcome(batch, "loop").reason


def test_loop_that_ignores_interrupts_costs_the_cell_limit_not_the_notebook_limit(batch):
    outcome = _outcome(batch, "stubborn_loop")
    assert outcome.score == 2  # ex1 ran before it; nothing after counts
    assert (
        f"answer ex2_ideal_time ran past the {CELL_LIMIT_S} s cell limit; it ignored the interrupt, "
        "so the kernel was stopped and no later cell counts"
    ) in outcome.reason
    assert "notebook limit" not in outcome.reason  # stopped at the cell limit, not the notebook's
    # ex1's test ran and passed; the kernel was stopped in ex2's answer, so no test after it ran
    statuses = {c["grade_id"]: c["status"] for c in outcome.feedback}
    assert statuses.pop("ex1_intensity_test") == "ok"
    assert set(statuses.values()) == {"not-run"} and len(statuses) == 4


@pytest.mark.parametrize("student", ["exit", "segfault"])
def test_dead_kernel_means_no_later_test_passes(batch, student):
    outcome = _outcome(batch, student)
    assert outcome.cells["ex1_intensity_test"] == (2.0, 2.0)
    assert all(outcome.cells[g][0] == 0 for g in outcome.cells if g != "ex1_intensity_test")
    assert "kernel died" in outcome.reason


def test_memory_is_capped(batch):
    outcome = _outcome(batch, "oom")
    assert outcome.cells["ex3_limiter_test"][0] == 0 and outcome.score == FULL - 2
    assert "ran out of memory (limit 3072 MiB)" in outcome.reason


def test_tampered_test_cells_run_from_the_source(batch):
    outcome = _outcome(batch, "tamper")
    assert outcome.cells["ex1_intensity_test"][0] == 0  # wrong answer, test cell deleted
    assert outcome.score == FULL - 2  # the others' original tests ran and passed
    for words in (
        "ex1_intensity_test was deleted",
        "ex2_ideal_time_test was edited",
        "ex3_limiter_test was edited",
        "ex4_critical_m_test was turned into markdown",
    ):
        assert words in outcome.reason


def test_a_submitted_solution_file_is_noted_once(batch):
    outcome = _outcome(batch, FORMULA)
    assert outcome.score == FULL
    assert outcome.reason.count("carries the hidden tests") == 1 and "edited" not in outcome.reason


def test_symbolic_links_are_never_followed(batch):
    assert "symbolic link" in batch["rows"]["sym_student"].reason
    for student in ("sym_chapter", "sym_notebook", "sym_solution"):
        row = batch["rows"][student]
        assert row.score == 0 and "symbolic link" in row.reason, row.reason


def test_any_student_name_is_safe_in_the_csv_and_the_feedback(batch):
    table = batch["csv"]
    assert table["'" + FORMULA]["score"] == "10"  # a spreadsheet will not run it
    assert table[display_name(NON_UTF8)]["score"] == "0" and "\ufffd" in display_name(NON_UTF8)
    assert table[LONG_NAME]["score"] == "10"
    pages = list(batch["feedback"].iterdir())
    assert len(pages) == len(batch["rows"]) and all(len(p.name.encode()) < 255 for p in pages)


def test_broken_files_get_a_reason_and_zero(batch):
    assert _outcome(batch, "bad_json").score == 0
    assert "not valid JSON" in _outcome(batch, "bad_json").reason
    assert "empty file" in _outcome(batch, "empty").reason
    assert batch["csv"]["missing"]["reason"] == f"{CHAPTER}: missing {NAME}"


def test_wrong_name_and_extra_notebooks_are_noted_and_graded(batch):
    assert _outcome(batch, "wrong_name").score == FULL
    assert "graded as 01_roofline" in batch["rows"]["wrong_name"].reason
    assert _outcome(batch, "extra").score == FULL
    assert "ignored scratch_copy.ipynb" in batch["rows"]["extra"].reason


def test_megabytes_of_output_are_truncated(batch):
    assert _outcome(batch, "big_output").score == FULL
    assert "output was truncated" in _outcome(batch, "big_output").reason


def test_one_message_over_the_cap_stops_that_notebook_at_once(batch):
    """The client never holds a message over its cap (ZMQ_MAXMSGSIZE on its own sockets); the
    dropped connection is noticed after the cell, said, and the notebook stops there."""
    outcome = _outcome(batch, "big_display")
    assert outcome.score == 0
    assert (
        "answer ex1_intensity sent a message over the client's size cap; grading stopped there, "
        "no later cell counts"
    ) in outcome.reason
    # stopped right after that cell: no test cell ran, and no limit (cell or notebook) was reached
    assert {c["status"] for c in outcome.feedback} == {"not-run"} and len(outcome.feedback) == 5
    assert "cell limit" not in outcome.reason and "notebook limit" not in outcome.reason


def test_feedback_shows_visible_messages_but_not_hidden_tests(batch):
    page = next(p for p in batch["feedback"].iterdir() if p.name.startswith("liar-")).read_text()
    assert "ex1_intensity_test" in page and "0 / 2" in page
    assert "hidden tests:" in page and "details are not shown" in page
    assert "BEGIN HIDDEN" not in page and "blocked(" not in page and "(4096, 4096, 4096, 2)" not in page


def _hidden_lines() -> list[str]:
    """Every line of the chapter's hidden tests that says something (inputs, labels, names)."""
    from trainperf.grading.hidden import split_hidden

    solution = nbformat.read(ROOT / "solutions" / CHAPTER / NAME, as_version=4)
    lines = []
    for cell in solution.cells:
        if cell.metadata.get("nbgrader", {}).get("grade"):
            hidden = split_hidden(cell.source)[1]
            lines += [
                ln.strip()
                for ln in hidden.splitlines()
                if len(ln.strip()) >= 12 and not ln.strip().startswith("#")
            ]
    return lines


def test_a_submission_that_prints_everything_it_sees_leaks_nothing_hidden(batch):
    """Issue 22, item 2: the feedback holds only what the grader writes. The attacker saw every
    hidden part (its hook ran before each of them) and pushed it out every way a kernel can."""
    page = next(p for p in batch["feedback"].iterdir() if p.name.startswith("print_everything-")).read_text()
    import html

    page = html.unescape(page)
    hidden = _hidden_lines()
    assert len(hidden) > 20
    leaked = [line for line in hidden if line in page]
    assert not leaked, leaked[:3]
    assert "BEGIN HIDDEN" not in page and "checks.blocked" not in page and "Leak" not in page
    seen = _printed(batch, "print_everything", "ex2_ideal_time_test")  # its kernel did see them
    assert any(line in seen for line in hidden), "the attack saw no hidden part: the test proves nothing"
    # the hidden checks' labels (the visible ones say "at M=…", the hidden ones "for …")
    assert "intensity for (M, K, N, b)" not in page and "limiting branch for" not in page
    outcome = _outcome(batch, "print_everything")
    assert outcome.cells["ex1_intensity_test"][0] == 2  # ex 1 itself is right
    assert outcome.cells["ex2_ideal_time_test"][0] == 0
    assert "Error: (the message is not shown" in _visible(batch, "print_everything", "ex2_ideal_time_test")


def test_class_report_flags_what_needs_a_person(batch, tmp_path):
    from trainperf.grading.class_report import report

    page = report(batch["out"], tmp_path / "report").read_text()
    with open(tmp_path / "report" / "review.csv", encoding="utf-8") as fh:
        flagged = {r["student_id"]: r["flagged for"] for r in csv.DictReader(fh)}
    for student, category in {
        "oom": "limit hit",
        "loop": "limit hit",
        "segfault": "limit hit",
        "big_output": "limit hit",
        "big_display": "limit hit",
        "tamper": "test cells edited",
        "'" + FORMULA: "test cells edited",
        "blocked_bypass": "copied reference code",
        "helper_by_name": "copied reference code",
        "sym_student": "unusual files",
        "bad_json": "unusual files",
    }.items():
        assert category in flagged.get(student, ""), (student, flagged.get(student))
    assert "victim" not in flagged and "missing" not in flagged
    with open(tmp_path / "report" / "cells.csv", encoding="utf-8") as fh:
        cells = {r["cell"]: r for r in csv.DictReader(fh)}
    assert int(cells["ex1_intensity_test"]["not attempted"]) >= 1  # the untouched release
    assert "BEGIN HIDDEN" not in page and "(4096, 4096, 4096, 2)" not in page


def test_rerun_gives_the_same_csv_and_resumes(batch, capsys):
    before = batch["out"].read_text()
    grade(
        ROOT,
        batch["subs"],
        batch["out"],
        [CHAPTER],
        jobs=2,
        limits=batch["limits"],
        workdir=batch["base"] / "scratch2",
    )
    assert batch["out"].read_text() == before
    assert "grading 0 notebook(s)" in capsys.readouterr().out
    # an interrupted run: the progress file lost its last line; only that student is re-graded
    progress = batch["out"].with_name(batch["out"].name + ".progress.jsonl")
    lines = progress.read_text().splitlines()
    dropped = json.loads(lines[-1])["student"]
    progress.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:20])  # cut mid-line
    grade(
        ROOT,
        batch["subs"],
        batch["out"],
        [CHAPTER],
        jobs=2,
        limits=batch["limits"],
        workdir=batch["base"] / "scratch3",
    )
    out = capsys.readouterr().out
    assert "grading 1 notebook(s)" in out and display_name(dropped)[:60] in out
    assert batch["out"].read_text() == before


@pytest.mark.skipif(not ISOLATED, reason="needs root and bubblewrap (bwrap) for the sandbox")
def test_a_process_that_outlives_its_notebook_cannot_hurt_the_next_student(tmp_path):
    subs = tmp_path / "subs"
    _write(
        subs / "a_attacker" / CHAPTER,
        with_answers(RELEASED, _answers(ex1_intensity=P.FORK_KILLER + SOLUTION["ex1_intensity"])),
    )
    _write(subs / "b_victim" / CHAPTER, with_answers(RELEASED, _answers()))
    # the kernel keyring (issue 22): the writer scores full only if all its keys were stored,
    # the reader loses ex 2's point if it finds any of them
    correct_if = (
        "\n_right = ideal_time_ms\ndef ideal_time_ms(*a, **k):\n    return _right(*a, **k) if {} else -1.0\n"
    )
    _write(
        subs / "c_key_writer" / CHAPTER,
        with_answers(
            RELEASED,
            _answers(
                ex2_ideal_time=SOLUTION["ex2_ideal_time"] + P.KEY_WRITER + correct_if.format("all(_STORED)")
            ),
        ),
    )
    _write(
        subs / "d_key_reader" / CHAPTER,
        with_answers(
            RELEASED,
            _answers(
                ex2_ideal_time=SOLUTION["ex2_ideal_time"]
                + P.KEY_READER
                + correct_if.format("not any(_FOUND)")
            ),
        ),
    )
    rows = {
        r.student: r
        for r in grade(ROOT, subs, tmp_path / "grades.csv", [CHAPTER], jobs=1, workdir=tmp_path / "scratch")
    }
    assert rows["a_attacker"].score == FULL and "outlived" not in rows["a_attacker"].reason
    assert rows["b_victim"].score == FULL and rows["b_victim"].reason == ""
    assert not survivors(P.FORK_KILLER_MARK)
    assert rows["c_key_writer"].score == FULL, "the writer could not store its keys: the test proves nothing"
    assert rows["d_key_reader"].score == FULL, "a key left by an earlier submission was readable"


@pytest.mark.skipif(not ISOLATED, reason="needs root and bubblewrap (bwrap) for the sandbox")
def test_the_readme_layout_grades_isolated(tmp_path):
    """`trainperf grade submissions/ --out grades.csv --feedback feedback/`, run from a folder
    that holds the submissions, the CSV and the feedback, exactly as the README says."""
    work = ROOT / "build" / f"readme-layout-{os.getpid()}"
    try:
        _write(work / "submissions" / "ada" / CHAPTER, with_answers(RELEASED, _answers()))
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "trainperf.cli",
                "--root",
                str(ROOT),
                "grade",
                "submissions/",
                "--out",
                "grades.csv",
                "--feedback",
                "feedback/",
                "--chapters",
                "1",
                "--require-isolation",
            ],
            cwd=work,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert result.returncode == 0, result.stderr[-2000:]
        assert "isolated (bubblewrap, own uid per submission)" in result.stdout
        assert "ada,10,10,10," in (work / "grades.csv").read_text()
    finally:
        shutil.rmtree(work, ignore_errors=True)

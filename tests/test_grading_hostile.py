"""`trainperf grade` on hostile and broken submissions (issue: grading you can trust).

One batch holds every case, graded together with 2 jobs as an instructor would run it; each
test then reads its student's row. Every case is a real submission notebook.
"""

from __future__ import annotations

import csv
import json
import shutil

import nbformat
import pytest
from conftest import ROOT

from trainperf.discriminate import solution_answers, with_answers
from trainperf.grade import Limits, grade
from trainperf.isolate import can_drop_privileges

pytestmark = pytest.mark.notebooks
CHAPTER = "01_roofline"
NAME = "01_roofline.ipynb"
RELEASED = ROOT / "notebooks" / CHAPTER / NAME
SOLUTION = solution_answers(ROOT / "solutions" / CHAPTER / NAME)
FULL = 10.0
WRONG_EX1 = "def gemm_intensity(M, K, N, b):\n    return 1.0\n"


def _answers(**overrides: str) -> dict[str, str]:
    answers = dict(SOLUTION)
    for gid, prefix in overrides.items():
        answers[gid] = prefix
    return answers


def _write(folder, nb) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, folder / NAME)


def _tampered():
    nb = with_answers(RELEASED, _answers(ex1_intensity=WRONG_EX1))
    by_id = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells}
    nb.cells.remove(by_id["ex1_intensity_test"])          # deleted (and ex1 is wrong)
    by_id["ex2_ideal_time_test"].source = ""               # emptied
    by_id["ex3_limiter_test"].source = "pass"              # edited to pass
    markdown = nbformat.v4.new_markdown_cell(by_id["ex4_critical_m_test"].source)
    markdown.metadata = by_id["ex4_critical_m_test"].metadata
    nb.cells[nb.cells.index(by_id["ex4_critical_m_test"])] = markdown  # turned into markdown
    return nb


MONKEYPATCHES = {
    "patch_checks": "import helpers.checks as c\nc.close = c.equal = c.one_of = lambda *a, **k: None\n",
    "rebind_checks": "class _Fake:\n    def __getattr__(self, name):\n        return lambda *a, **k: None\n"
                     "checks = _Fake()\n",
    "patch_import": "import builtins, types\n_real = builtins.__import__\n"
                    "def _fake(name, *a, **k):\n"
                    "    if name.startswith('helpers'):\n"
                    "        m = types.ModuleType('helpers')\n"
                    "        m.__getattr__ = lambda n: types.SimpleNamespace(close=lambda *a, **k: None,\n"
                    "            equal=lambda *a, **k: None, one_of=lambda *a, **k: None,\n"
                    "            blocked=__import__('contextlib').nullcontext)\n"
                    "        return m\n"
                    "    return _real(name, *a, **k)\nbuiltins.__import__ = _fake\n",
    "patch_assertion": "import builtins\nbuiltins.AssertionError = type('AssertionError', (Exception,), {})\n"
                       "get_ipython().showtraceback = lambda *a, **k: None\n"
                       "get_ipython().__class__.showtraceback = lambda *a, **k: None\n",
}


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    base = tmp_path_factory.mktemp("hostile")
    subs = base / "submissions"
    cases = {
        "victim": _answers(),
        "loop": _answers(ex1_intensity="while True:\n    pass\n"),
        "exit": _answers(ex2_ideal_time="import os\nos._exit(1)\n"),
        "segfault": _answers(ex2_ideal_time="import ctypes\nctypes.string_at(0)\n"),
        "oom": _answers(ex3_limiter="hog = bytearray(8 * 2**30)\n"),
        "helper_by_name": _answers(ex1_intensity=(
            "from helpers.roofline import intensity, gemm_flops, gemm_bytes\n"
            "def gemm_intensity(M, K, N, b):\n"
            "    return intensity(gemm_flops(M, K, N), gemm_bytes(M, K, N, b))\n")),
        "big_output": _answers(ex1_intensity=SOLUTION["ex1_intensity"]
                               + "for _ in range(400):\n    print('x' * 10_000)\n"),
        **{name: _answers(ex1_intensity=patch + WRONG_EX1) for name, patch in MONKEYPATCHES.items()},
    }
    for student, answers in cases.items():
        _write(subs / student / CHAPTER, with_answers(RELEASED, answers))
    _write(subs / "tamper" / CHAPTER, _tampered())
    out = base / "out" / "grades.csv"
    attack = (
        "import glob, json, os\nhits = []\n"
        f"for path in [{str(subs / 'victim' / CHAPTER / NAME)!r}, {str(out) + '.progress.jsonl'!r},"
        f" {str(out)!r}, {str(base / 'scratch' / 'template' / 'gradebook.db')!r}]:\n"
        "    try:\n        open(path, 'a').write('owned')\n        hits.append(path)\n"
        "    except OSError as exc:\n        print('blocked:', type(exc).__name__)\n"
        "hits += glob.glob('/tmp/**/victim/**/*.ipynb', recursive=True)[:1]\n"
        "print('HITS', hits)\n" + WRONG_EX1)
    _write(subs / "attacker" / CHAPTER, with_answers(RELEASED, _answers(ex1_intensity=attack)))
    (subs / "bad_json" / CHAPTER).mkdir(parents=True)
    (subs / "bad_json" / CHAPTER / NAME).write_text('{"cells": [')
    (subs / "empty" / CHAPTER).mkdir(parents=True)
    (subs / "empty" / CHAPTER / NAME).write_text("")
    _write(subs / "wrong_name" / CHAPTER, with_answers(RELEASED, _answers()))
    (subs / "wrong_name" / CHAPTER / NAME).rename(subs / "wrong_name" / CHAPTER / "roofline (1).ipynb")
    _write(subs / "extra" / CHAPTER, with_answers(RELEASED, _answers()))
    shutil.copy(subs / "extra" / CHAPTER / NAME, subs / "extra" / "scratch_copy.ipynb")
    (subs / "missing").mkdir()
    limits = Limits(cell_timeout=30, notebook_timeout=400, memory_mb=3072)
    feedback = base / "feedback"
    rows = grade(ROOT, subs, out, [CHAPTER], jobs=2, limits=limits, workdir=base / "scratch",
                 feedback=feedback)
    with open(out) as fh:
        table = {r["student_id"]: r for r in csv.DictReader(fh)}
    # a loop that ignores interrupts, graded alone under a short notebook limit
    stubborn = base / "stubborn"
    _write(stubborn / "stubborn_loop" / CHAPTER, with_answers(RELEASED, _answers(ex2_ideal_time=(
        "import time\nwhile True:\n    try:\n        time.sleep(0.2)\n"
        "    except BaseException:\n        pass\n"))))
    short = Limits(cell_timeout=10, notebook_timeout=50, memory_mb=3072)
    rows += grade(ROOT, stubborn, base / "out2" / "grades.csv", [CHAPTER], limits=short,
                  workdir=base / "scratch-stubborn")
    with open(base / "out2" / "grades.csv") as fh:
        table.update({r["student_id"]: r for r in csv.DictReader(fh)})
    return {"rows": {r.student: r for r in rows}, "csv": table, "out": out, "subs": subs,
            "feedback": feedback, "limits": limits, "base": base}


def _score(batch, student) -> float:
    return float(batch["csv"][student]["score"])


def test_every_student_has_a_row(batch):
    expected = {"victim", "loop", "exit", "helper_by_name", "segfault", "oom", "big_output", "tamper",
                "attacker", "bad_json", "empty", "wrong_name", "extra", "missing", *MONKEYPATCHES}
    assert set(batch["csv"]) == expected | {"stubborn_loop"}
    assert all(batch["csv"][s]["max_score"] == "10" for s in expected)
    assert _score(batch, "victim") == FULL and batch["csv"]["victim"]["reason"] == ""


def test_endless_loop_fails_that_cell_only(batch):
    assert _score(batch, "loop") == FULL - 2
    assert "ex1_intensity ran past the 30 s cell limit" in batch["csv"]["loop"]["reason"]


def test_loop_that_ignores_interrupts_hits_the_notebook_limit(batch):
    assert _score(batch, "stubborn_loop") == 2  # ex1 ran before it; nothing after counts
    assert "50 s notebook limit" in batch["csv"]["stubborn_loop"]["reason"]


@pytest.mark.parametrize("student", ["exit", "segfault"])
def test_dead_kernel_means_no_later_test_passes(batch, student):
    outcome = batch["rows"][student].outcomes[CHAPTER]
    assert outcome.cells["ex1_intensity_test"] == (2.0, 2.0)
    assert all(outcome.cells[g][0] == 0 for g in outcome.cells if g != "ex1_intensity_test")
    assert "kernel died" in outcome.reason


def test_memory_is_capped(batch):
    outcome = batch["rows"]["oom"].outcomes[CHAPTER]
    assert outcome.cells["ex3_limiter_test"][0] == 0 and outcome.score == FULL - 2
    assert "ran out of memory (limit 3072 MiB)" in outcome.reason


def test_tampered_test_cells_run_from_the_source(batch):
    outcome = batch["rows"]["tamper"].outcomes[CHAPTER]
    assert outcome.cells["ex1_intensity_test"][0] == 0  # wrong answer, test cell deleted
    assert outcome.score == FULL - 2  # the others' original tests ran and passed
    for words in ("ex1_intensity_test was deleted", "ex2_ideal_time_test was edited",
                  "ex3_limiter_test was edited", "ex4_critical_m_test was turned into markdown"):
        assert words in outcome.reason


@pytest.mark.parametrize("student", [*MONKEYPATCHES, "helper_by_name"])
def test_monkeypatching_the_checks_gains_nothing(batch, student):
    outcome = batch["rows"][student].outcomes[CHAPTER]
    assert outcome.cells["ex1_intensity_test"][0] == 0, outcome.feedback[0]
    assert outcome.score == FULL - 2


def test_student_code_cannot_reach_grades_or_other_students(batch):
    if not can_drop_privileges():
        pytest.skip("isolation needs root with unshare and setpriv; not available here")
    progress = batch["out"].with_name(batch["out"].name + ".progress.jsonl")
    assert "owned" not in progress.read_text() and "owned" not in batch["out"].read_text()
    victim = batch["subs"] / "victim" / CHAPTER / NAME
    assert "owned" not in victim.read_text()
    assert _score(batch, "attacker") == FULL - 2 and _score(batch, "victim") == FULL
    text = [c["visible"] for c in batch["rows"]["attacker"].outcomes[CHAPTER].feedback]
    assert text  # the attacker's own cells ran


def test_broken_files_get_a_reason_and_zero(batch):
    assert _score(batch, "bad_json") == 0
    assert "not valid JSON" in batch["csv"]["bad_json"]["reason"]
    assert "empty file" in batch["csv"]["empty"]["reason"]
    assert batch["csv"]["missing"]["reason"] == f"{CHAPTER}: missing {NAME}"


def test_wrong_name_and_extra_notebooks_are_noted_and_graded(batch):
    assert _score(batch, "wrong_name") == FULL
    assert "graded as 01_roofline" in batch["csv"]["wrong_name"]["reason"]
    assert _score(batch, "extra") == FULL
    assert "ignored scratch_copy.ipynb" in batch["csv"]["extra"]["reason"]


def test_megabytes_of_output_are_truncated(batch):
    assert _score(batch, "big_output") == FULL
    assert "output was truncated" in batch["csv"]["big_output"]["reason"]


def test_feedback_shows_visible_messages_but_not_hidden_tests(batch):
    page = (batch["feedback"] / "patch_checks.html").read_text()
    assert "ex1_intensity_test" in page and "0 / 2" in page
    assert "expected 0.999512" in page  # the visible check's message
    assert "hidden tests" not in page or "details are not shown" in page
    assert "BEGIN HIDDEN" not in page and "blocked(" not in page and "(4096, 4096, 4096, 2)" not in page


def test_rerun_gives_the_same_csv_and_resumes(batch, capsys):
    before = batch["out"].read_text()
    grade(ROOT, batch["subs"], batch["out"], [CHAPTER], jobs=2, limits=batch["limits"],
          workdir=batch["base"] / "scratch2")
    assert batch["out"].read_text() == before
    assert "grading 0 notebook(s)" in capsys.readouterr().out
    # an interrupted run: the progress file lost its last line; only that student is re-graded
    progress = batch["out"].with_name(batch["out"].name + ".progress.jsonl")
    lines = progress.read_text().splitlines()
    dropped = json.loads(lines[-1])["student"]
    progress.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:20])  # cut mid-line
    grade(ROOT, batch["subs"], batch["out"], [CHAPTER], jobs=2, limits=batch["limits"],
          workdir=batch["base"] / "scratch3")
    out = capsys.readouterr().out
    assert "grading 1 notebook(s)" in out and dropped in out
    assert batch["out"].read_text() == before

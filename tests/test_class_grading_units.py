"""Class grading without notebooks: the shard split, the class report's reading of the grader's
reasons and verdicts, and the recipes in grader/recipes/ (GitHub Actions checked by actionlint,
Kubernetes manifests by kubernetes-validate, the Slurm script by bash -n and shellcheck, and the
commands each recipe runs, driven with stand-ins for sbatch and trainperf)."""

from __future__ import annotations

import csv
import os
import random
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

from trainperf.cli import main
from trainperf.course import CourseError
from trainperf.grading.class_report import (
    ERROR,
    NOT_ATTEMPTED,
    WRONG_HIDDEN,
    WRONG_VISIBLE,
    CellStats,
    failure_kind,
    failure_message,
    review_reasons,
)
from trainperf.grading.exam import _test_cell_notes
from trainperf.grading.grade import Limits, _reasons
from trainperf.grading.results import Outcome, StudentRow
from trainperf.grading.sandbox import Execution
from trainperf.grading.shards import Shard, assign, select, summarize
from trainperf.grading.submissions import Found

RECIPES = ROOT / "grader" / "recipes"


def _found(sizes: dict[str, int]) -> Found:
    chapters = [f"{i:02d}_ch" for i in range(1, 10)]
    return Found(
        {s: {ch: Path(f"/x/{ch}") for ch in chapters[:n]} for s, n in sizes.items()}, {s: [] for s in sizes}
    )


@pytest.mark.parametrize("text, shard", [("2/4", Shard(2, 4)), (" 1 / 1 ", Shard(1, 1))])
def test_shard_parses(text, shard):
    assert Shard.parse(text) == shard and str(shard) == text.replace(" ", "")


@pytest.mark.parametrize("text", ["0/4", "5/4", "1/0", "2", "a/b", "-1/2", ""])
def test_bad_shard_is_one_clear_line(text, tmp_path, capsys):
    with pytest.raises(CourseError, match="--shard"):
        Shard.parse(text)
    (tmp_path / "subs" / "ada").mkdir(parents=True)
    assert main(["--root", str(ROOT), "grade", str(tmp_path / "subs"), f"--shard={text}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("trainperf: --shard")


def test_split_is_balanced_deterministic_and_by_student():
    rng = random.Random(7)
    sizes = {f"s{i:03d}": rng.choice([0, 1, 3, 9, 9, 9]) for i in range(200)}
    sizes[os.fsdecode(b"caf\xe9")] = 4
    split = assign(_found(sizes), 7)
    shuffled = list(sizes.items())
    rng.shuffle(shuffled)
    assert assign(_found(dict(shuffled)), 7) == split  # the folder's listing order does not matter
    loads = Counter()
    for student, index in split.items():
        loads[index] += sizes[student]
    assert set(loads) == set(range(1, 8)) and max(loads.values()) - min(loads.values()) <= 9
    whole = _found(sizes)
    pieces = [select(whole, Shard(i, 7)) for i in range(1, 8)]
    assert sorted(s for p in pieces for s in p.notebooks) == sorted(sizes)  # every student once
    assert all(p.notebooks[s] == whole.notebooks[s] for p in pieces for s in p.notebooks)


def test_more_shards_than_students_leaves_empty_shards():
    split = assign(_found({"a": 1, "b": 2}), 4)
    assert sorted(split.values()) == [1, 2]


def test_class_digest_sees_a_late_submission():
    before = summarize(_found({"a": 1, "b": 2}))
    assert summarize(_found({"b": 2, "a": 1})) == before
    assert summarize(_found({"a": 2, "b": 2})).digest != before.digest
    assert summarize(_found({"a": 1, "b": 2, "c": 0})).digest != before.digest


def _reasons_for(records, **execution) -> list[str]:
    run = Execution(records=records, **{"finished": True, **execution})
    return _reasons([], [], run, Limits(), {"ex1": 0})


@pytest.mark.parametrize(
    "records, execution, category",
    [
        ({0: {"index": 0, "status": "error", "ename": "CellTimeoutError", "stuck": True}}, {}, "limit hit"),
        ({0: {"index": 0, "status": "error", "ename": "MemoryError"}}, {}, "limit hit"),
        (
            {0: {"index": 0, "status": "error", "ename": "OSError", "evalue": "File too large"}},
            {},
            "limit hit",
        ),
        (
            {0: {"index": 0, "status": "error", "ename": "OSError", "evalue": "No space left"}},
            {},
            "limit hit",
        ),
        ({0: {"index": 0, "status": "error", "ename": "BlockingIOError"}}, {}, "limit hit"),
        ({0: {"index": 0, "status": "died"}}, {}, "limit hit"),
        ({0: {"index": 0, "status": "ok", "text": "x [output truncated]"}}, {}, "limit hit"),
        ({0: {"index": 0, "status": "ok", "records_overflow": "too many"}}, {}, "limit hit"),
        ({}, {"timed_out": True}, "limit hit"),
        ({}, {"leftovers": 2}, "isolation event"),
        ({}, {"finished": False, "log_tail": "boom"}, "isolation event"),
        (
            {0: {"index": 0, "status": "ok", "records": [{"event": "blocked-call", "helper": "h.f"}]}},
            {},
            "copied reference code",
        ),
        ({0: {"index": 0, "status": "error", "ename": "OutputTooLarge"}}, {}, "limit hit"),
        (
            {
                0: {
                    "index": 0,
                    "status": "error",
                    "ename": "NotebookCapReached",
                    "notebook_cap": "more than 10,000 hidden-check records",
                }
            },
            {},
            "limit hit",
        ),
        (
            {0: {"index": 0, "status": "ok", "records": [{"event": "blocked-call", "helper": ["h.f"]}]}},
            {},
            "malformed kernel data",
        ),
    ],
)
def test_review_reads_the_graders_own_reasons(records, execution, category):
    reason = "; ".join(_reasons_for(records, **execution))
    assert reason
    row = StudentRow("ada", {"01": Outcome("ada", "01", 0, 2, reason)})
    assert category in review_reasons(row), reason


def test_review_flags_edited_tests_copies_and_files():
    tests = {g: {"cell_type": "code", "source": "check()"} for g in ("t1", "t2", "t3")}
    mine = {
        "t2": {"cell_type": "markdown", "source": "check()"},
        "t3": {"cell_type": "code", "source": "pass"},
    }
    for note in _test_cell_notes(tests, mine, tests):
        row = StudentRow("ada", {"01": Outcome("ada", "01", 0, 2, note)})
        assert review_reasons(row) == ["test cells edited"], note
    copied = Outcome(
        "ada",
        "01",
        2,
        2,
        "answer ex1 copies helpers.roofline.intensity — review",
        flags=["answer ex1 copies helpers.roofline.intensity — review"],
    )
    assert review_reasons(StudentRow("ada", {"01": copied})) == ["copied reference code"]
    for note in (
        "answer ex8 rebinds helpers.bench.count_host_syncs — review",
        "answer ex1 uses exec, which can copy helper code — review",
        "added cell 1 could not be read by the copy check (line 1: invalid syntax) — review",
    ):
        row = StudentRow("ada", {"01": Outcome("ada", "01", 2, 2, note, flags=[note])})
        assert review_reasons(row) == ["copied reference code"], note
    unknown = StudentRow("ada", {"01": Outcome("ada", "01", 0, 2, "something new — review")})
    assert review_reasons(unknown) == ["other review"]
    linked = StudentRow("eve", {}, ["the student folder is a symbolic link; not followed, nothing graded"])
    assert review_reasons(linked) == ["unusual files"]
    honest = StudentRow("bob", {"01": Outcome("bob", "01", 0, 2, "missing 01_x.ipynb")})
    assert review_reasons(honest) == []


def _verdict(status="failed", ename="", visible="", hidden_failed=0):
    return {
        "grade_id": "ex1_test",
        "points": 0.0,
        "max_points": 2.0,
        "status": status,
        "ename": ename,
        "visible": visible,
        "hidden_failed": hidden_failed,
        "hidden_total": 3,
    }


def test_failure_kinds_and_messages():
    wrong = _verdict(
        ename="CheckFailed",
        visible="✓ shape\nCheckFailed: ✗ FLOPs: expected 8, got 4.\n  Hint: a multiply-add is 2 FLOPs",
    )
    assert failure_kind(wrong) == WRONG_VISIBLE and failure_message(wrong) == "✗ FLOPs: expected 8"
    chinese = _verdict(ename="CheckFailed", visible="CheckFailed: ✗ FLOPs：期望 8，实际得到 4。")
    assert failure_message(chinese) == "✗ FLOPs：期望 8"  # a zh submission's message, grouped alike
    stub = _verdict(ename="NotImplementedError", visible="NotImplementedError: replace this line")
    assert failure_kind(stub) == NOT_ATTEMPTED
    hidden = _verdict(
        visible="✓ FLOPs\nhidden tests: 2 of 3 checks failed (details are not shown)", hidden_failed=2
    )
    assert failure_kind(hidden) == WRONG_HIDDEN and "hidden tests failed" in failure_message(hidden)
    broken = _verdict(ename="TypeError", visible="TypeError: unsupported operand")
    assert failure_kind(broken) == ERROR and failure_message(broken) == "TypeError: unsupported operand"
    assert failure_kind(_verdict(status="ok")) is None
    assert failure_kind(_verdict(status="not-run")) == "not run"


def test_hints_name_cells_to_look_at():
    broken = CellStats("01", "ex1", 2, graded=10, passed=0, kinds=Counter({ERROR: 8, NOT_ATTEMPTED: 2}))
    assert broken.hints()[:2] == [
        "none of the 8 who answered passed: broken, or too hard?",
        "most failures are errors, not wrong values: are the instructions clear?",
    ]
    lenient = CellStats(
        "01", "ex2", 2, graded=10, passed=5, kinds=Counter({WRONG_HIDDEN: 4, WRONG_VISIBLE: 1})
    )
    assert lenient.hints() == [
        "most failures pass the visible checks: add a visible check for the common mistake?"
    ]
    assert CellStats("01", "ex3", 2, graded=10, passed=9, kinds=Counter({WRONG_VISIBLE: 1})).hints() == []


def test_merge_and_report_need_neither_torch_nor_nbgrader():
    # the helpers package's own body (trainperf.__version__ is its __version__) but no chapter
    code = (
        "import sys, trainperf.cli, trainperf.grading.parts, trainperf.grading.class_report; "
        "print(sorted(m for m in sys.modules if m in ('torch', 'nbgrader') or m.startswith('helpers.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- recipes ---------------------------------------------------------------------------------


def _tool(name: str) -> str:
    path = shutil.which(name, path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    assert path, f"{name} is missing: pip install -e '.[dev]'"
    return path


@pytest.mark.parametrize("recipe", ["github-actions.yml", "github-pages.yml"])
def test_github_actions_workflow_passes_actionlint(recipe):
    result = subprocess.run(
        [_tool("actionlint"), "-no-color", str(RECIPES / recipe)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_catches_a_broken_workflow(tmp_path):
    broken = (
        (RECIPES / "github-actions.yml")
        .read_text()
        .replace("part-${{ matrix.shard }}", "part-${{ matrix.shrd }}")
    )
    (tmp_path / "w.yml").write_text(broken)
    result = subprocess.run(
        [_tool("actionlint"), "-no-color", str(tmp_path / "w.yml")], capture_output=True, text=True
    )
    assert result.returncode != 0 and 'property "shrd" is not defined' in result.stdout


def test_github_actions_shards_and_merge_fit_together():
    flow = yaml.safe_load((RECIPES / "github-actions.yml").read_text())
    grade, merge = flow["jobs"]["grade"], flow["jobs"]["merge"]
    shards = grade["strategy"]["matrix"]["shard"]
    assert shards == list(range(1, len(shards) + 1))
    run = next(s["run"] for s in grade["steps"] if "trainperf" in s.get("run", ""))
    assert '--shard "${{ matrix.shard }}/${{ strategy.job-total }}"' in run and "--require-isolation" in run
    upload = next(s for s in grade["steps"] if "upload-artifact" in s.get("uses", ""))
    download = next(s for s in merge["steps"] if "download-artifact" in s.get("uses", ""))
    assert upload["with"]["name"] == "part-${{ matrix.shard }}" and download["with"]["pattern"] == "part-*"
    assert merge["needs"] == "grade"
    merging = next(s["run"] for s in merge["steps"] if "merge" in s.get("run", ""))
    assert "trainperf merge parts/part-*.csv" in merging


@pytest.mark.parametrize("name", ["kubernetes-grade.yaml", "kubernetes-merge.yaml"])
def test_kubernetes_manifests_validate_against_the_schema(name):
    result = subprocess.run(
        [_tool("kubernetes-validate"), "--strict", str(RECIPES / name)], capture_output=True, text=True
    )
    assert result.returncode == 0 and "passed" in result.stdout, result.stdout + result.stderr


def test_kubernetes_validate_catches_a_broken_manifest(tmp_path):
    broken = (RECIPES / "kubernetes-grade.yaml").read_text().replace("completions: 4", "completions: four")
    (tmp_path / "job.yaml").write_text(broken)
    result = subprocess.run(
        [_tool("kubernetes-validate"), "--strict", str(tmp_path / "job.yaml")], capture_output=True, text=True
    )
    assert result.returncode != 0


def _stand_in(folder: Path, name: str, body: str) -> None:
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(f"#!/bin/sh\n{body}\n")
    (folder / name).chmod(0o755)


def test_kubernetes_pod_i_grades_shard_i_plus_one(tmp_path):
    job = yaml.safe_load((RECIPES / "kubernetes-grade.yaml").read_text())
    spec = job["spec"]
    container = spec["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == int(env["SHARDS"])
    _stand_in(tmp_path / "bin", "trainperf", 'echo "$@" > "$LOG"')
    result = subprocess.run(
        [*container["command"], *container["args"]],
        capture_output=True,
        text=True,
        env={
            **os.environ,
            **env,
            "JOB_COMPLETION_INDEX": "2",
            "LOG": str(tmp_path / "log"),
            "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
        },
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "log").read_text().split() == [
        "grade",
        "/submissions",
        "--shard",
        "3/4",
        "--out",
        "/grades/part-3.csv",
        "--jobs",
        "2",
        "--require-isolation",
    ]


def test_slurm_script_parses_and_passes_shellcheck():
    script = RECIPES / "slurm-grade.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed (Debian: apt-get install shellcheck); bash -n passed")
    result = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_slurm_script_submits_an_array_and_a_merge_that_waits_for_it(tmp_path):
    bin_dir, log = tmp_path / "bin", tmp_path / "calls"
    _stand_in(bin_dir, "sbatch", f'echo "sbatch $*" >> {log}\necho "4242;cluster"')
    _stand_in(bin_dir, "trainperf", f'echo "trainperf $* | shard=$SLURM_ARRAY_TASK_ID" >> {log}')
    (tmp_path / "subs").mkdir()
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    script = str(RECIPES / "slurm-grade.sh")
    result = subprocess.run(
        ["bash", script, str(tmp_path / "subs"), str(tmp_path / "out"), "4"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    array, merge = log.read_text().splitlines()
    assert "--array=1-4" in array and array.endswith(f"--task {tmp_path / 'subs'} {tmp_path / 'out'} 4")
    assert "--dependency=afterok:4242 " in merge and merge.endswith(f"--merge {tmp_path / 'out'}")
    log.unlink()
    # what array task 3 and the merge job then run
    task = subprocess.run(
        ["bash", script, "--task", "SUBS", "OUT", "4"],
        capture_output=True,
        text=True,
        env={
            **env,
            "SLURM_ARRAY_TASK_ID": "3",
            "TRAINPERF_ROOT": str(ROOT),
            "TRAINPERF_GRADE_ARGS": "--chapters 1 2",
        },
    )
    assert task.returncode == 0, task.stderr
    subprocess.run(["bash", script, "--merge", "OUT"], check=True, env=env)
    grade, merge_call, report = log.read_text().splitlines()
    assert grade == (
        f"trainperf --root {ROOT} grade SUBS --shard 3/4 --out OUT/part-3.csv --jobs 2 "
        "--chapters 1 2 | shard=3"
    )
    assert merge_call.startswith(
        "trainperf merge OUT/part-*.csv --out OUT/grades.csv --feedback OUT/feedback"
    )
    assert report.startswith("trainperf report OUT/grades.csv --out OUT/report")


def test_slurm_script_refuses_bad_arguments(tmp_path):
    script = str(RECIPES / "slurm-grade.sh")
    for args in ([], [str(tmp_path / "nope"), str(tmp_path / "out")], [str(tmp_path), str(tmp_path), "x"]):
        result = subprocess.run(["bash", script, *args], capture_output=True, text=True)
        assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr


def _synthetic_class(folder: Path) -> Path:
    """A graded class written the way `trainperf grade` writes one (no notebook executed)."""
    from trainperf.grading.parts import course_version, write_details
    from trainperf.grading.results import write_csv
    from trainperf.grading.shards import ClassSummary

    def outcome(student, verdicts, reason="", seconds=1.0, flags=()):
        points = sum(v["points"] for v in verdicts)
        return Outcome(
            student,
            "01_x",
            points,
            4.0,
            reason,
            seconds,
            {v["grade_id"]: (v["points"], v["max_points"]) for v in verdicts},
            {},
            verdicts,
            "k",
            list(flags),
        )

    def verdict(cell, ok, **kw):
        return {
            **_verdict(status="ok" if ok else "failed", **kw),
            "grade_id": cell,
            "points": 2.0 if ok else 0.0,
        }

    wrong = {"ename": "CheckFailed", "visible": "CheckFailed: ✗ FLOPs: expected 8, got 5."}
    rows = [
        StudentRow("ada", {"01_x": outcome("ada", [verdict("ex1", True), verdict("ex2", True)], seconds=9)}),
        StudentRow(
            "bob",
            {
                "01_x": outcome(
                    "bob",
                    [verdict("ex1", False, **wrong), verdict("ex2", True)],
                    "answer ex2 ran out of memory (limit 6144 MiB)",
                )
            },
        ),
        StudentRow(
            "cy",
            {
                "01_x": outcome(
                    "cy",
                    [verdict("ex1", False, **wrong), verdict("ex2", True)],
                    "answer ex2 copies helpers.x.f — review",
                    flags=["answer ex2 copies helpers.x.f — review"],
                )
            },
        ),
        StudentRow("dan", {"01_x": Outcome("dan", "01_x", 0.0, 4.0, "missing 01_x.ipynb")}),
    ]
    grades = folder / "grades.csv"
    write_csv(rows, ["01_x"], grades)
    write_details(
        grades, rows, ["01_x"], course_version({"01_x": "h"}, "60"), Shard(1, 1), ClassSummary(4, 3, "d")
    )
    return grades


def test_report_of_a_synthetic_class(tmp_path):
    from trainperf.grading.class_report import report

    page = report(_synthetic_class(tmp_path), tmp_path / "report").read_text()
    with open(tmp_path / "report" / "cells.csv", encoding="utf-8") as fh:
        cells = {r["cell"]: r for r in csv.DictReader(fh)}
    assert cells["ex1"]["pass rate"] == "33%" and cells["ex1"]["mean points"] == "0.67"
    assert cells["ex1"]["most common failure messages"] == "2× ✗ FLOPs: expected 8"
    assert cells["ex2"]["pass rate"] == "100%" and cells["ex2"]["look at"] == ""
    with open(tmp_path / "report" / "review.csv", encoding="utf-8") as fh:
        review = {r["student_id"]: r["flagged for"] for r in csv.DictReader(fh)}
    assert review == {"bob": "limit hit", "cy": "copied reference code"}
    slowest = page[page.index("Slowest notebooks (3)") :]
    assert slowest.index(">ada<") < slowest.index(">bob<")  # 9 s first; dan was not graded
    assert (tmp_path / "report" / "scores.png").read_bytes()[:4] == b"\x89PNG"


def test_report_refuses_a_file_as_its_folder(tmp_path, capsys):
    grades = _synthetic_class(tmp_path)
    (tmp_path / "taken").write_text("x")
    assert main(["report", str(grades), "--out", str(tmp_path / "taken")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a file" in err[0] and (tmp_path / "taken").read_text() == "x"


def test_report_refuses_a_csv_edited_after_grading(tmp_path, capsys):
    grades = _synthetic_class(tmp_path)
    grades.write_text(grades.read_text().replace("ada,4,", "ada,3,"))
    assert main(["report", str(grades), "--out", str(tmp_path / "report")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not the CSV its details file describes" in err[0]


def test_report_keeps_unanswered_apart_from_failed():
    from collections import Counter

    from trainperf.grading.class_report import NOT_ATTEMPTED, WRONG_VISIBLE, CellStats

    blank = CellStats("01_x", "ex1", 2.0, graded=10, passed=2, kinds=Counter({NOT_ATTEMPTED: 8}))
    assert blank.pass_rate == 0.2 and blank.attempted == 2 and blank.attempted_pass_rate == 1.0
    assert blank.hints() == ["8 of 10 left it unanswered"]  # not "hard": both who answered passed
    hard = CellStats("01_x", "ex2", 2.0, graded=10, passed=2, kinds=Counter({WRONG_VISIBLE: 8}))
    assert hard.hints() == ["hard: 20% of those who answered pass"]
    nobody = CellStats("01_x", "ex3", 2.0, graded=4, passed=0, kinds=Counter({NOT_ATTEMPTED: 4}))
    assert nobody.hints() == ["nobody answered it"]


def test_report_names_the_limits_and_ends_the_axis_at_the_maximum():
    from trainperf.grading.class_report import describe_limits, score_bins
    from trainperf.grading.grade import Limits

    assert describe_limits(Limits().key()) == (
        "cell 60 s, notebook 600 s, memory 6144 MiB, largest file 256 MiB, scratch disk 1024 MiB, "
        "processes 256, output kept per cell 20000 characters"
    )
    uncapped = describe_limits(Limits(memory_mib=None).key())
    assert uncapped.startswith("cell 60 s, notebook 600 s, memory no cap")
    assert describe_limits("30:600") == "30:600"  # another shape: shown as it is
    assert score_bins(9)[0] == -0.5 and score_bins(9)[-1] == 9.5 and len(score_bins(9)) == 11
    assert score_bins(100)[-1] == 100

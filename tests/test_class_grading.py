"""Grading a class in shards (`trainperf grade --shard I/N`), merging the parts exactly
(`trainperf merge`), the class report (`trainperf report`) and bad parts.

One small class of real chapter-1 submissions is graded once as a whole and once as two shards;
the merged CSV must be the single run's CSV byte for byte. The bad-part tests damage copies of
those real parts.
"""

from __future__ import annotations

import csv
import json
import os
import shutil

import nbformat
import pytest
from conftest import ROOT, once_per_worker

from trainperf.cli import main
from trainperf.discriminate import load_mistakes, solution_answers, with_answers
from trainperf.grading.grade import grade
from trainperf.grading.parts import details_path, read_part
from trainperf.grading.shards import assign
from trainperf.grading.submissions import discover

pytestmark = pytest.mark.notebooks
CHAPTER = "01_roofline"
NAME = "01_roofline.ipynb"
RELEASED = ROOT / "notebooks" / CHAPTER / NAME
CAFE_E, CAFE_FF = os.fsdecode(b"caf\xe9"), os.fsdecode(b"caf\xff")  # both read "caf\ufffd"


def _class(subs):
    solution = solution_answers(ROOT / "solutions" / CHAPTER / NAME)
    mistakes = load_mistakes(ROOT / "grader" / "fixtures" / CHAPTER / "mistakes.py")
    wrong = {
        **solution,
        "ex1_intensity": mistakes["ex1_intensity"][0][1],
        "ex2_ideal_time": mistakes["ex2_ideal_time"][0][1],
    }
    for student, answers in {"ada": solution, "bob": wrong, CAFE_E: solution, CAFE_FF: {}}.items():
        (subs / student / CHAPTER).mkdir(parents=True)
        nbformat.write(with_answers(RELEASED, answers), subs / student / CHAPTER / NAME)
    (subs / "dan").mkdir()  # nothing submitted
    (subs / "=eve").mkdir()  # a formula-looking id and a notebook of no chapter
    (subs / "=eve" / "notes.ipynb").write_text("{}")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    return once_per_worker("class-graded", lambda: _grade_class(tmp_path_factory))


def _grade_class(tmp_path_factory):
    base = tmp_path_factory.mktemp("class")
    subs = base / "submissions"
    _class(subs)
    single = base / "single" / "grades.csv"
    grade(ROOT, subs, single, [CHAPTER], jobs=2, feedback=base / "single" / "feedback")
    parts = base / "parts"
    for i in (1, 2):
        code = main(
            [
                "--root",
                str(ROOT),
                "grade",
                str(subs),
                "--chapters",
                "1",
                "--jobs",
                "2",
                "--shard",
                f"{i}/2",
                "--out",
                str(parts / f"part-{i}.csv"),
                "--feedback",
                str(parts / f"feedback-{i}"),
            ]
        )
        assert code == 0
    return {"base": base, "subs": subs, "single": single, "parts": parts}


def _run(capsys, *argv) -> tuple[int, list[str]]:
    code = main([str(a) for a in argv])
    return code, capsys.readouterr().err.strip().splitlines()


def test_shards_split_the_class_by_student_and_balance_notebooks(graded):
    found = discover(graded["subs"], {NAME: CHAPTER}, [CHAPTER])
    split = assign(found, 2)
    parts = [read_part(graded["parts"] / f"part-{i}.csv") for i in (1, 2)]
    held = [{row.student for row in part.rows} for part in parts]
    assert held[0].isdisjoint(held[1]) and held[0] | held[1] == set(found.notebooks)
    assert all(split[s] == i for i, students in enumerate(held, 1) for s in students)
    notebooks = [sum(len(found.notebooks[s]) for s in students) for students in held]
    assert notebooks == [2, 2]
    assert split[CAFE_E] != split[CAFE_FF]  # the two ids that read alike land in different parts
    assert parts[0].course == parts[1].course and set(parts[0].course["chapters"]) == {CHAPTER}


def test_merged_csv_is_the_single_runs_csv_byte_for_byte(graded, capsys, tmp_path):
    out, feedback = tmp_path / "grades.csv", tmp_path / "feedback"
    code, err = _run(
        capsys,
        "merge",
        graded["parts"] / "part-1.csv",
        graded["parts"] / "part-2.csv",
        "--out",
        out,
        "--feedback",
        feedback,
    )
    assert code == 0, err
    single = graded["single"].read_bytes()
    assert out.read_bytes() == single
    rows = {r["student_id"]: r for r in csv.DictReader(single.decode().splitlines())}
    assert rows["ada"]["score"] == "10" and rows["bob"]["score"] == "6" and rows["dan"]["score"] == "0"
    assert sum("caf\ufffd [" in s for s in rows) == 2 and "'=eve" in rows  # disambiguated, safe
    assert "ignored notes.ipynb" in rows["'=eve"]["reason"]

    def pages(folder):
        return {p.name: p.read_bytes() for p in folder.iterdir()}

    assert pages(feedback) == pages(graded["base"] / "single" / "feedback")
    shards = {**pages(graded["parts"] / "feedback-1"), **pages(graded["parts"] / "feedback-2")}
    assert pages(feedback) == shards
    assert read_part(out).shard.count == 1  # the merged CSV is itself a whole, checked part


def _copy_parts(graded, folder):
    folder.mkdir()
    for i in (1, 2):
        for path in (graded["parts"] / f"part-{i}.csv", details_path(graded["parts"] / f"part-{i}.csv")):
            shutil.copy(path, folder / path.name)
    return folder / "part-1.csv", folder / "part-2.csv"


def _edit_header(part, **changes):
    details = details_path(part)
    lines = details.read_text().splitlines(keepends=True)
    header = json.loads(lines[0])
    for key, value in changes.items():
        target = header
        *path, last = key.split(".")
        for name in path:
            target = target[name]
        target[last] = value
    details.write_text(json.dumps(header) + "\n" + "".join(lines[1:]))


def _cut(path, keep):
    data = path.read_bytes()
    path.write_bytes(data[: keep(len(data))])


def _damage(case, p1, p2) -> tuple[list, str]:
    """Damage copies of the real parts as `case` says; returns (parts given, words expected)."""
    if case == "missing part":
        return [p1], "missing shard(s) 2/2"
    if case == "no such file":
        return [p1, p2.with_name("part-3.csv")], "part-3.csv: no such file"
    if case == "other limits":
        _edit_header(p2, **{"course.limits": "30:600:6144"})
        return [p1, p2], "was graded with another course version than"
    if case == "other solution":
        _edit_header(p2, **{f"course.chapters.{CHAPTER}": "0" * 16})
        return [p1, p2], f"({CHAPTER}: solution, helpers or tool versions differ)"
    if case == "truncated csv":
        _cut(p2, lambda n: n // 2)
        return [p1, p2], "part-2.csv is not the CSV its details file describes"
    if case == "truncated details":
        lines = details_path(p2).read_text().splitlines(keepends=True)
        details_path(p2).write_text("".join(lines[:-2]))  # whole lines lost: the last student, the end
        return [p1, p2], "part-2.csv.details.jsonl is cut short (2 of 3 students"
    if case == "cut mid-line":
        _cut(details_path(p2), lambda n: n // 2)
        return [p1, p2], "part-2.csv.details.jsonl is damaged at line"
    if case == "not a part":
        p2.with_name("notes.csv").write_text("a,b\n1,2\n")
        return [p1, p2, p2.with_name("notes.csv")], "notes.csv is not a grades CSV written by `trainperf"
    if case == "details of something else":
        details_path(p2).write_text('{"a": 1}\n')
        return [p1, p2], "is not a trainperf details file"
    if case == "overlap":
        again = p1.with_name("again.csv")
        shutil.copy(p1, again)
        shutil.copy(details_path(p1), details_path(again))
        return [p1, p2, again], "are both shard 1/2"
    if case == "other class":
        _edit_header(p2, **{"class.digest": "f" * 24})
        return [p1, p2], "saw another class than"
    assert case == "other split"
    _edit_header(p2, shard="2/3")
    return [p1, p2], "different splits"


BAD = [
    "missing part",
    "no such file",
    "other limits",
    "other solution",
    "truncated csv",
    "truncated details",
    "cut mid-line",
    "not a part",
    "details of something else",
    "overlap",
    "other class",
    "other split",
]


@pytest.mark.parametrize("case", BAD)
def test_bad_parts_get_one_clear_line_and_nothing_is_overwritten(graded, capsys, tmp_path, case):
    p1, p2 = _copy_parts(graded, tmp_path / "parts")
    given, words = _damage(case, p1, p2)
    out = tmp_path / "grades.csv"
    out.write_text("the earlier grades\n")
    (tmp_path / "feedback").mkdir()
    code, err = _run(capsys, "merge", *given, "--out", out, "--feedback", tmp_path / "feedback")
    assert code == 2 and len(err) == 1 and err[0].startswith("trainperf: "), err
    assert words in err[0], err[0]
    assert out.read_text() == "the earlier grades\n" and not details_path(out).exists()
    assert not any((tmp_path / "feedback").iterdir())


def test_merge_never_writes_over_a_part(graded, capsys, tmp_path):
    p1, p2 = _copy_parts(graded, tmp_path / "parts")
    before = p1.read_bytes()
    code, err = _run(capsys, "merge", p1, p2, "--out", p1)
    assert code == 2 and len(err) == 1 and "would overwrite the part" in err[0]
    assert p1.read_bytes() == before


def test_class_report_of_the_merged_grades(graded, capsys, tmp_path):
    out = tmp_path / "grades.csv"
    assert (
        _run(capsys, "merge", graded["parts"] / "part-1.csv", graded["parts"] / "part-2.csv", "--out", out)[0]
        == 0
    )
    code, err = _run(capsys, "report", out, "--out", tmp_path / "report")
    assert code == 0, err
    with open(tmp_path / "report" / "cells.csv", encoding="utf-8") as fh:
        cells = {r["cell"]: r for r in csv.DictReader(fh)}
    assert list(cells) == [
        "ex1_intensity_test",
        "ex2_ideal_time_test",
        "ex3_limiter_test",
        "ex4_critical_m_test",
        "ex5_dtype_test",
    ]
    # 4 graded notebooks: two solutions, bob (ex1 and ex2 wrong), the untouched stub
    assert [cells[c]["pass rate"] for c in cells] == ["50%", "50%", "75%", "75%", "75%"]
    assert cells["ex1_intensity_test"]["mean points"] == "1.00"
    assert cells["ex3_limiter_test"]["not attempted"] == "1"
    assert cells["ex3_limiter_test"]["most common failure messages"] == ""  # the stub says nothing
    assert cells["ex1_intensity_test"]["not attempted"] == "1"
    wrong = int(cells["ex1_intensity_test"]["wrong (a visible check)"]) + int(
        cells["ex1_intensity_test"]["wrong (hidden tests only)"]
    )
    assert wrong == 1 and "1× " in cells["ex1_intensity_test"]["most common failure messages"]
    page = (tmp_path / "report" / "index.html").read_text()
    assert "scores.png" in page and (tmp_path / "report" / "scores.png").stat().st_size > 1000
    assert "Slowest notebooks (4)" in page and "caf\ufffd [" in page
    assert "BEGIN HIDDEN" not in page


def test_report_needs_the_details_file(graded, capsys, tmp_path):
    lone = tmp_path / "grades.csv"
    shutil.copy(graded["single"], lone)
    code, err = _run(capsys, "report", lone, "--out", tmp_path / "report")
    assert code == 2 and len(err) == 1 and "grades.csv.details.jsonl is not next to it" in err[0]
    assert not (tmp_path / "report").exists()

"""Issue 22 in units: the exercise's helpers are absent from the graded kernel's copy, records are
plain data of exact types, and the grading process does bounded work on untrusted input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types

import pytest
import torch
from conftest import ROOT

from helpers import _grading, _records, _wire, checks
from trainperf.grading import copies, replay
from trainperf.grading.exam import helper_imports, matches
from trainperf.grading.grade import MAX_ANSWER_CHARS, _oversized
from trainperf.grading.sandbox import install_helpers_copy
from trainperf.grading.stubs import install_stubbed_copy, resolve, stub_module

MODULE = textwrap.dedent('''
    """A module."""
    LIMIT = 3


    def exercise(x, y=2):
        """Docstring with the expression x * y + LIMIT."""
        return _only_mine(x) * y + LIMIT


    def _only_mine(x):
        return _deeper(x)


    def _deeper(x):
        return x + 1


    def _shared(x):
        return x - 1


    def other(x):
        return _shared(x) + exercise(x)


    class Box:
        def total(self):
            return 41 + 1
''')


def test_stub_module_removes_the_function_and_the_private_pieces_only_it_uses():
    out = stub_module(
        MODULE,
        {"exercise": "helpers.m.exercise is exercise 4", "Box.total": "helpers.m.Box.total is exercise 5"},
        set(),
        "helpers.m",
    )
    assert "x * y" not in out and "return _deeper(x)" not in out
    assert "x + 1" not in out and "41 + 1" not in out
    assert "def exercise(x, y=2):" in out  # the parameters stay: a call is replayed by their values
    assert "return x - 1" in out and "def other(x):" in out and "LIMIT = 3" in out  # the rest stays
    assert "removed_for_grading('helpers.m._only_mine', 4" in out
    assert "removed_for_grading('helpers.m._deeper', 4" in out
    space: dict = {}
    exec(compile(out, "m.py", "exec"), space)
    with pytest.raises(RuntimeError, match=r"helpers\.m\.exercise is exercise 4: write it yourself"):
        space["exercise"](1)
    with pytest.raises(RuntimeError, match="exercise 5"):
        space["Box"]().total()


def test_a_private_piece_another_module_imports_is_kept():
    out = stub_module(MODULE, {"exercise": "helpers.m.exercise is exercise 4"}, {"_only_mine"})
    assert "return _deeper(x)" in out and "return x + 1" in out


def test_every_chapter_stubs_its_exercises_in_the_graded_copy(tmp_path):
    import helpers

    package = ROOT / "src" / "helpers"
    site = install_helpers_copy(tmp_path / "site")
    solution = json.loads((ROOT / "solutions" / "04_timeline" / "04_timeline.ipynb").read_text())
    stubs = resolve(solution, helper_imports(solution), package.resolve())
    assert "helpers.timeline.merge_intervals" in " ".join(stubs.names())
    graded = install_stubbed_copy(site, tmp_path / "graded", stubs)
    source = (graded / "helpers" / "timeline" / "_intervals.py").read_text()
    real = (package / "timeline" / "_intervals.py").read_text()
    assert "removed_for_grading('helpers.timeline.merge_intervals', 1" in source
    assert source != real and real == (site / "helpers" / "timeline" / "_intervals.py").read_text()
    # a subprocess, a re-import or a reading of the files finds only the stub
    code = (
        "import helpers.timeline as t\ntry:\n    t.union_length([(0, 1)])\nexcept RuntimeError as e:\n"
        "    print(e)"
    )
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(graded), "HOME": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(graded)!r})\n" + code],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert "is exercise 1: write it yourself" in result.stdout, result.stderr[-800:]
    assert helpers.timeline.union_length([(0, 1), (2, 4)]) == 3  # this process keeps the real one


def test_trusted_calls_are_recorded_by_parameter_and_never_inside_expect(tmp_path, monkeypatch):
    monkeypatch.setenv(_wire.REPLAY_FOLDER_ENV, str(tmp_path))
    monkeypatch.setenv(_wire.REPLAY_WRITE_ENV, "1")
    monkeypatch.setattr(_grading, "_replay", _grading._Replay())

    def power(x, *rest, n=2):  # a keyword-only after *args: locals() lists it before rest
        return x**n

    square = checks.recorded_for_grading("helpers.m.power", power)
    assert square(torch.arange(3)).tolist() == [0, 1, 4] and square(5) == 25
    _grading._replay.in_expect = True
    square(7)  # an expected value: never recorded
    _grading._replay.in_expect = False
    calls = replay.read_calls(tmp_path / "calls.pkl")
    assert [name for _, name, _, _ in calls] == ["helpers.m.power"] * 2
    key = _grading._Replay.key("helpers.m.power", (), {"x": 5, "rest": (), "n": 2})
    assert calls[1][2] == key
    # the graded kernel's stub keeps the parameters: positional, keyword and default spellings
    # of the recorded call give the key it was recorded under
    stubbed = stub_module(
        "def power(x: int, *rest: int, n: int = 2) -> int:\n    return x ** n\n",
        {"power": "helpers.m.power is exercise 2"},
        set(),
        "helpers.m",
    )
    asked = []
    monkeypatch.setattr(
        _grading._replay,
        "lookup",
        lambda name, args, kwargs: (asked.append(_grading._Replay.key(name, args, kwargs)), (False, None))[1],
    )
    namespace: dict = {}
    exec(compile(stubbed, "<stub>", "exec"), namespace)
    for a, k in [((5,), {}), ((), {"x": 5}), ((5,), {"n": 2})]:
        with pytest.raises(RuntimeError, match="exercise 2"):
            namespace["power"](*a, **k)
    assert asked == [key] * 3
    # with no grading client to ask, nothing is replayed
    monkeypatch.setattr(_grading, "_replay", _grading._Replay())
    with pytest.raises(RuntimeError, match="exercise 2"):
        checks.removed_for_grading("helpers.m.power", 2, (), {"x": 5, "rest": (), "n": 2})


def test_the_client_serves_a_result_only_to_the_cell_that_recorded_it():
    import base64
    import pickle

    def entry(end, name, args, result):
        return end, name, _grading._Replay.key(name, (), args), pickle.dumps(result)

    def ask(name, args):  # the request id: see test_grading_records.py
        return _wire.request("0" * 32, name, _grading._Replay.key(name, (), args))

    calls = [
        entry(10, "helpers.t.straggler", {"x": 1}, "teach"),
        entry(20, "helpers.t.straggler", {"x": 2}, 0),
        entry(30, "helpers.c.estimate", {"p": "every"}, {"saved": 7}),
        entry(31, "helpers.c.estimate", {"p": "none"}, {"saved": 9}),
        entry(40, "helpers.c.estimate", {"p": "none"}, {"saved": 9}),
        entry(50, "helpers.r.derive", {"row": 1}, "case 1"),
        entry(51, "helpers.r.derive", {"row": 2}, "case 2"),
    ]
    cells = [
        ("teach:cell-05", 10),
        ("visible:ex1_test", 20),
        ("answer:ex2_choose", 20),
        ("hidden:ex2_test", 31),
        ("hidden:ex3_test", 40),
        ("hidden:ex4_test", 51),
    ]
    table = replay.build_table(calls, cells)
    assert replay.describe(table) == {
        "teach:cell-05": 1,
        "visible:ex1_test": 1,
        "hidden:ex2_test": 2,
        "hidden:ex3_test": 1,
        "hidden:ex4_test": 2,
    }
    blocking = {"helpers.t.straggler": [1], "helpers.c.estimate": [2], "helpers.r.derive": [1, 4]}

    def server():
        s = replay.Server(table, blocking)
        return s, lambda origin, name, args: (lambda a: pickle.loads(base64.b64decode(a)) if a else None)(
            _wire.parse_reply("0" * 32, s.answer(origin, ask(name, args)))
        )

    s, got = server()
    assert got("teach:cell-05", "helpers.t.straggler", {"x": 1}) == "teach"
    assert got("visible:ex1_test", "helpers.t.straggler", {"x": 2}) == 0
    # another cell's call: not served, not even the same arguments in another origin
    assert got("visible:ex1_test", "helpers.t.straggler", {"x": 1}) is None
    assert got("extra", "helpers.t.straggler", {"x": 1}) is None
    # a hidden test never gets its own exercise's helper once an answer may be running ...
    assert got("hidden:ex2_test", "helpers.c.estimate", {"p": "none"}) is None  # not the next call
    assert got("hidden:ex2_test", "helpers.c.estimate", {"p": "every"}) is None  # the order is over
    # ... but a later exercise's answer may use an earlier exercise's helper, as recorded there
    assert got("hidden:ex3_test", "helpers.c.estimate", {"p": "none"}) == {"saved": 9}
    assert got("hidden:ex3_test", "helpers.c.estimate", {"p": "none"}) == {"saved": 9}  # repeats
    assert got("hidden:ex3_test", "helpers.c.estimate", {"p": "every"}) is None  # recorded elsewhere
    # a hidden test's own calls before any answer runs (building its cases), strictly in order
    assert got("hidden:ex4_test", "helpers.r.derive", {"row": 1}) == "case 1"
    assert got("hidden:ex4_test", "helpers.r.derive", {"row": 2}) == "case 2"
    assert got("hidden:ex4_test", "helpers.r.derive", {"row": 1}) is None  # then an answer asks again
    s, got = server()
    assert got("hidden:ex4_test", "helpers.r.derive", {"row": 2}) is None  # out of order: over
    assert got("hidden:ex4_test", "helpers.r.derive", {"row": 1}) is None
    assert s.answer("teach:cell-05", replay.PROMPT + "{not json") == ""
    assert s.answer("teach:cell-05", "an ordinary input() prompt") == ""
    assert s.refused == 4
    blocked_by = replay.exercises_of(
        [(1, "timeline", ["straggler"]), (4, "timeline", ["straggler"])],
        {"helpers.timeline.straggler": "exercise 1"},
    )
    assert blocked_by == {"helpers.timeline.straggler": [1, 4]}


def test_replay_keys_are_the_same_in_every_process():
    code = (
        "import torch; from helpers._grading import _Replay; x = torch.linspace(0, 1, 9)\n"
        "print(_Replay.key('f', ([('h1', ['x'])], {'x': 3}, x, x.to(torch.float8_e4m3fn), "
        "lambda: x), {'k': {1, 2}}))"
    )
    keys = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONHASHSEED": "0"},
        ).stdout
        for _ in range(2)
    }
    assert len(keys) == 1 and len(keys.pop().strip()) == 64


class _Lazy(torch.Tensor):
    def tolist(self):
        raise AssertionError("the learner's code ran during the conversion")


def test_records_take_exact_types_only():
    lazy = torch.zeros(2).as_subclass(_Lazy)
    with pytest.raises(_records.NotPlain, match="_Lazy"):
        _records.to_plain(lazy)
    with pytest.raises(_records.NotPlain, match="too large"):
        _records.to_plain(10**5000)
    import numpy as np

    assert _records.to_plain([np.float32(0.5), torch.tensor([1, 2]), np.arange(2)]) == [0.5, [1, 2], [0, 1]]
    with pytest.raises(_records.NotPlain):
        _records.to_plain(np.array([object()]))


def test_a_comparison_that_raises_is_a_failed_check_with_its_reason():
    problems: list[str] = []
    want = {"what": "w", "kind": "close", "value": 1.5, "rtol": 1e-6, "atol": 0.0}
    assert not matches({"what": "w", "value": 10**400}, want, problems)
    assert problems and "OverflowError" in problems[0]
    assert matches({"what": "w", "value": 1.5}, want, problems)


def test_answer_source_has_a_cap():
    big = "x = 1\n" * (MAX_ANSWER_CHARS // 6 + 10)
    reason = _oversized({"cells": [{"cell_type": "code", "source": big}]}, {"ex1": big})
    assert "over the 100,000 cap" in reason and "ex1" in reason
    assert _oversized({"cells": []}, {"ex1": "def f():\n    return 1\n"}) == ""


def test_an_oversized_answer_is_refused_before_anything_parses_it(tmp_path, monkeypatch):
    """The caps come before the exam is built: building it parses every learner cell in the
    grading process (seconds and hundreds of MB for a few MB of source)."""
    import nbformat

    from trainperf.grading import grade as grading

    solution = nbformat.read(ROOT / "solutions" / "01_roofline" / "01_roofline.ipynb", as_version=4)
    released = nbformat.read(ROOT / "notebooks" / "01_roofline" / "01_roofline.ipynb", as_version=4)
    for cell in released.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "ex1_intensity":
            cell.source = "x = 1\n" * (MAX_ANSWER_CHARS // 6 + 10)
    path = tmp_path / "01_roofline.ipynb"
    nbformat.write(released, path)
    template = types.SimpleNamespace(solution=solution, released=released, max_score=10.0)
    course = types.SimpleNamespace(templates={"01_roofline": template})
    monkeypatch.setattr(grading, "build_exam", lambda *a: pytest.fail("the exam was built"))
    outcome = grading.grade_one(course, "s", "01_roofline", path, None, "k")
    assert outcome.score == 0 and "ex1_intensity" in outcome.reason
    assert "over the 100,000 cap" in outcome.reason


def test_copy_detector_runs_bounded_in_a_child(monkeypatch):
    package = str((ROOT / "src" / "helpers").resolve())
    checker = copies.Checker(package)
    try:
        notes = checker.check(
            {"ex1": "import importlib\nimportlib.reload(x)\n", "ex2": "y = model.modules()"}
        )
        assert notes == ["answer ex1 uses importlib.reload, which can copy helper code — review"]
        assert checker.check({"ex3": "s = sys\nt = s.modules\n"})[0].startswith("answer ex3 uses sys.modules")
        monkeypatch.setattr(copies, "CHECK_TIMEOUT_S", 0.001)
        slow = checker.check({"ex4": "x = 1\n" * 20000})
        assert slow and "did not finish" in slow[0]
        monkeypatch.setattr(copies, "CHECK_TIMEOUT_S", 30.0)
        assert checker.check({"ex5": "def f():\n    return 1\n"}) == []  # a new child after the kill
    finally:
        checker.close()


def test_cells_the_learner_added_are_read_by_the_copy_check():
    """A back door put in a cell of one's own (not an answer cell) runs too, so it is flagged."""
    import nbformat

    from trainperf.discriminate import solution_answers, with_answers
    from trainperf.grading.exam import build_exam

    chapter, name = "01_roofline", "01_roofline.ipynb"
    solution = json.loads((ROOT / "solutions" / chapter / name).read_text())
    released = json.loads((ROOT / "notebooks" / chapter / name).read_text())
    answers = solution_answers(ROOT / "solutions" / chapter / name)
    nb = with_answers(ROOT / "notebooks" / chapter / name, answers)
    nb.cells.insert(3, nbformat.v4.new_code_cell("import importlib, helpers\nimportlib.reload(helpers)\n"))
    exam = build_exam(solution, released, json.loads(nbformat.writes(nb)))
    assert len(exam.extras) == 1 and "importlib.reload" in exam.notebook["cells"][exam.extras[0]]["source"]
    notes = copies.flags(
        {"added cell 1": exam.notebook["cells"][exam.extras[0]]["source"]},
        str((ROOT / "src" / "helpers").resolve()),
    )
    assert notes == ["added cell 1 uses importlib.reload, which can copy helper code — review"]


def test_a_blocked_name_that_is_not_a_helper_function_is_one_clear_error():
    from trainperf.course import CourseError

    cell = {
        "cell_type": "code",
        "metadata": {"nbgrader": {"grade": True, "grade_id": "ex2_x_test"}},
        "source": "x = 1\n### BEGIN HIDDEN TESTS\nwith checks.blocked(roofline, 'nothing_here'):\n"
        "    pass\n### END HIDDEN TESTS\n",
    }
    package = (ROOT / "src" / "helpers").resolve()
    with pytest.raises(CourseError, match=r"exercise 2 blocks helpers\.roofline\.nothing_here"):
        resolve({"cells": [cell]}, "from helpers import roofline", package)
    with pytest.raises(CourseError, match="do not import"):
        resolve({"cells": [cell]}, "", package)


def test_a_library_function_is_switched_off_in_process_and_not_stubbed():
    """A prediction exercise blocks the means of measuring it (ch 7: ``torch.compile``): such a
    name is not a helper, so no stubbed copy is made for it, but the in-process block holds."""
    import torch

    from helpers import checks

    cell = {
        "cell_type": "code",
        "metadata": {"nbgrader": {"grade": True, "grade_id": "ex4_x_test"}},
        "source": "x = 1\n### BEGIN HIDDEN TESTS\nwith checks.blocked(torch, 'compile'), "
        "checks.blocked(roofline, 'intensity'):\n    pass\n### END HIDDEN TESTS\n",
    }
    package = (ROOT / "src" / "helpers").resolve()
    stubs = resolve({"cells": [cell]}, "from helpers import roofline", package)
    assert stubs.names() == ["helpers.roofline.intensity"]
    with checks.blocked(torch, "compile"), pytest.raises(RuntimeError, match=r"torch\.compile"):
        torch.compile(lambda x: x)
    assert torch.compile(lambda x: x, backend="eager") is not None  # restored after the block


# ------------------------------------------------------- hidden inputs built by an exercised helper


def _blocked_names(tree) -> set[str]:
    import ast

    return {
        a.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "blocked"
        for a in node.args[1:]
        if isinstance(a, ast.Constant) and isinstance(a.value, str)
    }


def _unblocked_calls_of_blocked_helpers(hidden_parts: list[str]) -> list[str]:
    """Calls, in hidden parts, of a helper some exercise of the chapter blocks, made outside a
    ``checks.blocked`` block and outside an ``expect=`` lambda. The reference run records such a
    call for replay, and the kernel can read the hidden source: the recorded arguments and result
    then answer an exercise (``make_claim(bug, ...)`` named each claim's bug)."""
    import ast

    trees = [ast.parse(part) for part in hidden_parts]
    names = set().union(set(), *(_blocked_names(t) for t in trees))
    found = []
    for tree in trees:
        safe = set()
        for node in ast.walk(tree):
            in_block = isinstance(node, ast.With) and any(
                isinstance(i.context_expr, ast.Call) and getattr(i.context_expr.func, "attr", "") == "blocked"
                for i in node.items
            )
            if isinstance(node, ast.Lambda) or in_block:
                safe |= {id(n) for n in ast.walk(node)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and id(node) not in safe:
                func = node.func
                if (func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)) in names:
                    found.append(ast.unparse(node)[:100])
    return found


def test_no_hidden_input_is_built_by_an_exercised_helper():
    from trainperf.grading.hidden import HIDDEN_MARKERS, split_hidden

    for path in sorted((ROOT / "solutions").glob("*/*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        parts = [HIDDEN_MARKERS.sub("", split_hidden("".join(c["source"]))[1]) for c in cells]
        found = _unblocked_calls_of_blocked_helpers([p for p in parts if p.strip()])
        assert not found, f"{path.parent.name}: hidden inputs built by a blocked helper: {found}"


def test_the_hidden_input_check_finds_such_a_call():
    part = (
        "hidden = [mfu.make_claim(bug) for bug in mfu.MFU_BUGS]\n"
        'with checks.blocked(mfu, "make_claim"):\n    got = [f(c) for c in hidden]\n'
        'checks.hidden.equal(got, "x", expect=lambda: mfu.make_claim("none"))\n'
    )
    assert _unblocked_calls_of_blocked_helpers([part]) == ["mfu.make_claim(bug)"]

"""The prose of code cells in a translated edition: comments, docstrings and hints are
translated token by token, the code is not (src/trainperf/code_i18n.py)."""

from __future__ import annotations

import ast
import io
import json
import tokenize

import pytest
from conftest import CHAPTERS, ROOT

from trainperf import code_i18n, i18n
from trainperf.course import chapter_notebook
from trainperf.grading.exam import build_exam

SOURCE = '''hint = ("How many FLOPs is one multiply-add? Which matrices must cross the memory bus "
        "at least once?")
# One decoder projection applied
# to 64 tokens at once.
x = f(1, hint="short hint")  # trailing note
# y = g(x)
def g(M):
    """First line.

    Second paragraph.
    """
    ### BEGIN SOLUTION
    return 1  # inside the solution
    ### END SOLUTION
'''
TABLE = {
    "How many FLOPs is one multiply-add? Which matrices must cross the memory bus at least once?": (
        "一次乘加是多少 FLOP？哪些矩阵至少要经过一次显存总线？"
    ),
    "One decoder projection applied to 64 tokens at once.": "把解码器的一个投影一次作用到 64 个 token 上。",
    "short hint": '简短的"提示"',
    "trailing note": "行尾注释",
    "First line.\n\nSecond paragraph.": "第一行。\n\n第二段。",
}


def _code_tokens(source: str) -> list[tuple[int, str]]:
    """The tokens that are code: everything but comments and string literals (written here,
    independently of code_i18n)."""
    skip = {tokenize.COMMENT, tokenize.STRING, tokenize.NL, tokenize.NEWLINE}
    return [
        (t.type, t.string)
        for t in tokenize.generate_tokens(io.StringIO(source).readline)
        if t.type not in skip
    ]


def _constants(source: str) -> list[str]:
    return [
        n.value
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.Constant) and isinstance(n.value, str)
    ]


def test_pieces_are_the_comments_docstrings_and_hints_and_nothing_else():
    found = {(p.kind, p.key) for p in code_i18n.pieces(SOURCE)}
    assert found == {
        (
            "hint",
            "How many FLOPs is one multiply-add? Which matrices must cross the memory bus at least once?",
        ),
        ("comment", "One decoder projection applied to 64 tokens at once."),
        ("hint", "short hint"),
        ("comment", "trailing note"),
        ("docstring", "First line.\n\nSecond paragraph."),
        ("comment", "inside the solution"),
    }  # not the commented-out code, not nbgrader's markers
    shown = {p.key for p in code_i18n.shown_pieces(SOURCE)}
    assert "inside the solution" not in shown and "trailing note" in shown


def test_translation_changes_only_the_prose_and_keeps_the_layout():
    out = code_i18n.translate(SOURCE, TABLE)
    assert _code_tokens(out) == _code_tokens(SOURCE)
    assert len(out.splitlines()) == len(SOURCE.splitlines())
    tree = ast.parse(out)
    hint = next(n.value.value for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "hint")
    assert hint == TABLE[next(iter(TABLE))]  # the two literals join to the translation
    assert '简短的"提示"' in _constants(out)
    function = next(n for n in tree.body if isinstance(n, ast.FunctionDef))
    assert ast.get_docstring(function) == "第一行。\n\n第二段。"
    comments = [line.strip() for line in out.splitlines() if line.lstrip().startswith("# ")]
    assert "".join(c[2:] for c in comments[:2]).replace(" ", "") == TABLE[
        "One decoder projection applied to 64 tokens at once."
    ].replace(" ", "")
    assert "# y = g(x)" in out and "# 行尾注释" in out and "# inside the solution" in out
    assert code_i18n.skeleton(out) == code_i18n.skeleton(SOURCE)
    assert code_i18n.skeleton(SOURCE.replace("f(1,", "f(2,")) != code_i18n.skeleton(SOURCE)


def test_a_translated_hint_passes_through_the_run_time_lookup():
    from helpers.i18n import tr_in

    assert tr_in("zh", TABLE["short hint"]) == TABLE["short hint"]


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_the_chinese_edition_translates_every_comment_docstring_and_hint_a_learner_reads(chapter):
    """Untranslated prose in the student notebook's code, per chapter: the count may only fall
    (tests/zh_untranslated_code.json, the goal is zero), and a "code" entry no code says any
    more is stale. The translated code cells are the English ones token for token."""
    notebook = json.loads(chapter_notebook(ROOT, chapter).read_text(encoding="utf-8"))
    catalogue = i18n.catalogue_or_empty(ROOT, "zh", chapter)
    code = catalogue.get("code", {})
    left = i18n.untranslated_code(notebook, code, catalogue.get("strings", {}))
    budget = json.loads((ROOT / "tests" / "zh_untranslated_code.json").read_text(encoding="utf-8"))
    assert len(left) <= budget.get(chapter, 0), "no Chinese for: " + "; ".join(left)
    prose = {
        p.key
        for c in notebook["cells"]
        if c["cell_type"] == "code"
        for p in code_i18n.pieces(i18n._source(c))
    }
    assert set(code) <= prose
    translated = i18n.translate(notebook, catalogue)
    for en, zh in zip(notebook["cells"], translated["cells"], strict=True):
        if en["cell_type"] == "code" and "parameters" not in en["metadata"].get("tags", []):
            assert _code_tokens(i18n._source(zh)) == _code_tokens(i18n._source(en)), en["id"]
    shown = "".join(i18n._source(c) for c in translated["cells"] if c["cell_type"] == "code")
    assert not [k for k in code if k in shown and len(k) > 12], "English left where its Chinese belongs"


def test_build_check_names_a_stale_and_a_missing_code_entry():
    notebook = {
        "cells": [{"cell_type": "code", "id": "c1", "metadata": {}, "source": "x = 1  # the only comment\n"}]
    }
    catalogue = {"language": "zh", "status": "complete", "cells": {}, "strings": {}, "code": {"gone": "没了"}}
    found = i18n.catalogue_problems(notebook, catalogue)
    assert any("code 'gone'" in f and "any more" in f for f in found)
    assert any("code 'the only comment': no translation" in f for f in found)
    catalogue["code"] = {"the only comment": "唯一的注释"}
    assert i18n.catalogue_problems(notebook, catalogue) == []


def test_a_translated_test_cell_is_not_an_edited_one():
    """The grader runs the English test cells; a Chinese submission's test cell differs in
    its prose only and is not reported as edited, while a changed line of code is."""
    test = {
        "cell_type": "code",
        "id": "t",
        "metadata": {"nbgrader": {"grade": True, "grade_id": "t", "points": 1}},
    }
    answer = {
        "cell_type": "code",
        "id": "a",
        "metadata": {"nbgrader": {"solution": True, "grade_id": "a"}},
        "source": "def f():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION\n",
    }
    english = 'hint = "is it one?"  # the check\nchecks.equal(f(), 1, "f", hint=hint)\n'
    solution = {"cells": [answer, {**test, "source": english}], "metadata": {}}
    released = json.loads(json.dumps(solution))
    table = {"is it one?": "是 1 吗？", "the check": "检查"}
    for source, edited in ((code_i18n.translate(english, table), False), (english.replace("1,", "2,"), True)):
        submission = {"cells": [answer, {**test, "source": source}], "metadata": {}}
        notes = build_exam(solution, released, submission).notes
        assert any("was edited" in n for n in notes) == edited, notes

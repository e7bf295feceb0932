"""`trainperf build --check` is clean, and catches a notebooks/ that drifted — in English and
in every translation (a changed English cell, a missing translation, a stale string, the
READMEs' status column)."""

from __future__ import annotations

import json
import shutil

import nbformat
import pytest
from conftest import CHAPTERS, ROOT

from helpers.i18n import tr_in
from trainperf import i18n
from trainperf.build import build, catalogue_state
from trainperf.cli import main

pytestmark = pytest.mark.notebooks
CHAPTER = "01_roofline"


def test_build_check_is_clean(capsys):
    assert main(["--root", str(ROOT), "build", "--check"]) == 0
    assert "matches" in capsys.readouterr().out


def _copy_checkout(tmp_path):
    for folder in ("solutions", "notebooks", "grader", "i18n"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    for name in ("README.md", "README.zh.md"):
        shutil.copy2(ROOT / name, tmp_path / name)
    strings = i18n.strings_path(ROOT, "zh")
    (tmp_path / strings.relative_to(ROOT)).parent.mkdir(parents=True)
    shutil.copy2(strings, tmp_path / strings.relative_to(ROOT))
    return tmp_path


def test_build_check_names_a_hand_edited_and_a_stray_file(tmp_path, capsys):
    root = _copy_checkout(tmp_path)
    chapter = sorted(p.name for p in (root / "notebooks").iterdir())[0]
    number = chapter.split("_")[0]
    released = next((root / "notebooks" / chapter).glob("*.ipynb"))
    nb = nbformat.read(released, as_version=4)
    nb.cells[0].source += "\nedited by hand"
    nbformat.write(nb, released)
    (root / "notebooks" / chapter / "notes.txt").write_text("stray")
    (root / "notebooks" / "zh" / "99_gone").mkdir()
    assert main(["--root", str(root), "build", "--check", "--chapters", number]) == 1
    err = capsys.readouterr().err
    assert f"notebooks/{chapter}/{released.name} (differs)" in err
    assert f"notebooks/{chapter}/notes.txt" in err
    assert "notebooks/zh/99_gone/ (no such chapter in solutions/)" in err
    shutil.rmtree(root / "notebooks" / "zh" / "99_gone")
    # build repairs it, after which check is clean again
    assert build(root, [number]) != [] and build(root, [number], check=True) == []


def _translate_fully(root, chapter=CHAPTER) -> dict:
    """A complete catalogue for ``chapter`` (made-up Chinese), written to the copy."""
    nb = json.loads(next((root / "solutions" / chapter).glob("*.ipynb")).read_text(encoding="utf-8"))
    catalogue = i18n.skeleton(nb, "zh", chapter)
    for cid, entry in catalogue["cells"].items():
        entry["text"] = f"# 译文 {cid}\n\n中文说明。"
    catalogue["code"] = {english: f"代码里的说明 {i}" for i, english in enumerate(catalogue["code"])}
    catalogue["status"] = "complete"
    _write(root, catalogue)
    return catalogue


def _write(root, catalogue, chapter=CHAPTER):
    i18n.catalogue_path(root, "zh", chapter).write_text(
        json.dumps(catalogue, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )


def test_drift_check_fails_naming_a_changed_english_cell(tmp_path, capsys):
    root = _copy_checkout(tmp_path)
    _translate_fully(root)
    build(root, ["1"])  # the translated notebook, the strings and the README column
    assert build(root, ["1"], check=True) == []
    zh = nbformat.read(root / "notebooks" / "zh" / CHAPTER / f"{CHAPTER}.ipynb", as_version=4)
    assert zh.cells[0].source.startswith("# 译文 cell-01") and 'LANGUAGE = "zh"' in zh.cells[1].source
    assert "| complete |" in next(
        line for line in (root / "README.md").read_text().splitlines() if f"`notebooks/{CHAPTER}/`" in line
    )
    assert "| 已完成 |" in (root / "README.zh.md").read_text()

    source = next((root / "solutions" / CHAPTER).glob("*.ipynb"))
    nb = nbformat.read(source, as_version=4)
    changed = next(c for c in nb.cells[1:] if c.cell_type == "markdown")
    changed.source += "\nOne more English sentence."
    nbformat.write(nb, source)
    assert main(["--root", str(root), "build", "--check", "--chapters", "1"]) == 1
    err = capsys.readouterr().err
    assert (
        f"i18n/zh/{CHAPTER}.json: cell {changed.id}: the English text changed since it was translated"
    ) in err
    assert f"notebooks/{CHAPTER}/{CHAPTER}.ipynb (differs)" in err


def test_missing_translations_fail_unless_in_progress_and_the_readme_says_so(tmp_path):
    root = _copy_checkout(tmp_path)
    catalogue = _translate_fully(root)
    gone = sorted(catalogue["cells"])[2]
    catalogue["cells"][gone]["text"] = ""
    catalogue["strings"] = {"not in any code cell": "没有这段代码"}
    _write(root, catalogue)
    problems, progress = catalogue_state(root, "zh", check=True)
    assert f"i18n/zh/{CHAPTER}.json: cell {gone}: no translation" in problems
    assert any("'not in any code cell': no code cell of the chapter holds" in p for p in problems)
    total = len(catalogue["cells"])
    assert progress[CHAPTER] == (total - 1, total, "complete")

    catalogue["status"], catalogue["strings"] = "in progress", {}
    _write(root, catalogue)
    problems, _ = catalogue_state(root, "zh", check=True)
    assert not [p for p in problems if CHAPTER in p]
    build(root, ["1"])
    row = next(
        line for line in (root / "README.md").read_text().splitlines() if f"`notebooks/{CHAPTER}/`" in line
    )
    assert row.endswith(f"| in progress: {total - 1} of {total} cells |")
    assert f"翻译中：{total - 1}/{total} 个单元" in (root / "README.zh.md").read_text()


def test_readme_status_column_matches_the_catalogues():
    """Cheap (no nbgrader): the READMEs' 中文 column is what the catalogues say."""
    from trainperf import readme

    _, progress = catalogue_state(ROOT, "zh", check=True)
    assert set(progress) == set(CHAPTERS)
    for path, (text, want) in readme.updated(ROOT, progress).items():
        assert text == want, f"{path.name}: run `trainperf build` to update the translation status"
        rows = [line for line in text.splitlines() if line.startswith("|") and "`notebooks/" in line]
        assert len(rows) == len(CHAPTERS)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chinese_notebook_is_the_english_one_with_chinese_text(chapter):
    """Same cells, same ids, same code and nbgrader metadata (so the same grading); only the
    markdown, the LANGUAGE parameter, the prose of the code (comments, docstrings, hints) and
    the notebook's language differ."""
    name = f"{chapter}.ipynb"
    en = json.loads((ROOT / "notebooks" / chapter / name).read_text(encoding="utf-8"))
    zh = json.loads((ROOT / "notebooks" / "zh" / chapter / name).read_text(encoding="utf-8"))
    assert zh["metadata"]["trainperf"]["language"] == "zh"
    assert [c["id"] for c in en["cells"]] == [c["id"] for c in zh["cells"]]
    for a, b in zip(en["cells"], zh["cells"], strict=True):
        # nbgrader's checksum is of the source, its prose included; nothing of ours reads it
        assert a["cell_type"] == b["cell_type"] and _unsummed(a["metadata"]) == _unsummed(b["metadata"])
        if a["cell_type"] == "code" and "parameters" in a["metadata"].get("tags", []):
            english = "".join(a["source"]).replace('LANGUAGE = "en"', 'LANGUAGE = "zh"')
            assert _code_tokens("".join(b["source"])) == _code_tokens(english)
        elif a["cell_type"] == "code":  # the stub of an exercise says it in Chinese
            stub = "".join(line.replace(i18n.STUB, tr_in("zh", i18n.STUB)) for line in a["source"])
            assert _code_tokens("".join(b["source"])) == _code_tokens(stub), a["id"]
            assert len(b["source"]) == len(a["source"]), a["id"]  # the same lines


def _unsummed(metadata: dict) -> dict:
    nbgrader = {k: v for k, v in metadata.get("nbgrader", {}).items() if k != "checksum"}
    return {**metadata, **({"nbgrader": nbgrader} if "nbgrader" in metadata else {})}


def _code_tokens(source: str) -> list[tuple[int, str]]:
    """The tokens of a cell that are code: all but comments and strings (a stub's message, a
    docstring and a hint are strings)."""
    import io
    import tokenize

    skip = {tokenize.COMMENT, tokenize.STRING, tokenize.NL, tokenize.NEWLINE}
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return [(t.type, t.string) for t in tokens if t.type not in skip]


def test_generate_is_cached_by_content(tmp_path, monkeypatch):
    """A chapter whose sources, config and nbgrader are unchanged is copied from the cache,
    byte for byte, without running nbgrader; any change to its sources runs nbgrader again."""
    from trainperf import course

    monkeypatch.setenv("TRAINPERF_CACHE", str(tmp_path / "cache"))
    scratch = course.make_scratch_course(ROOT, tmp_path / "a", [CHAPTER])
    first = course.generate(scratch, CHAPTER)
    runs = []
    real = course.nbgrader
    monkeypatch.setattr(course, "nbgrader", lambda *a, **k: runs.append(a) or real(*a, **k))
    again = course.make_scratch_course(ROOT, tmp_path / "b", [CHAPTER])
    second = course.generate(again, CHAPTER)
    assert runs == [] and course.tree_hash(first) == course.tree_hash(second)
    source = next((again / "solutions" / CHAPTER).glob("*.ipynb"))
    nb = nbformat.read(source, as_version=4)
    nb.cells[0].source += "\nOne more line."
    nbformat.write(nb, source)
    third = course.generate(again, CHAPTER)
    assert len(runs) == 1 and "One more line." in next(third.glob("*.ipynb")).read_text()
    # the gradebook nbgrader filled comes from the same entry: the points without a run
    from nbgrader.api import Gradebook

    runs.clear()
    graded = course.make_scratch_course(ROOT, tmp_path / "c", [CHAPTER])
    course.generate_with_gradebook(graded, CHAPTER)
    assert runs == []
    with Gradebook(f"sqlite:///{graded / 'gradebook.db'}") as gb:
        assert gb.find_assignment(CHAPTER).max_score > 0
    with pytest.raises(course.CourseError, match="already has a gradebook"):
        course.generate_with_gradebook(graded, CHAPTER)

"""``trainperf build``: regenerate ``notebooks/`` from ``solutions/`` with nbgrader.

The English edition is ``notebooks/<chapter>/``. Each language with catalogues in
``i18n/<lang>/`` gets ``notebooks/<lang>/<chapter>/``: the same solution notebook with its
markdown translated (:mod:`trainperf.i18n`), put through the same real ``nbgrader
generate_assignment``, so its graded cells are the English edition's. The build also writes
the strings the helpers show in that language (``src/helpers/data/strings_<lang>.json``: the
chapters' strings and the helpers' catalogue ``i18n/<lang>/helpers.json``) and the translation
status column of the READMEs' chapter tables.
"""

from __future__ import annotations

import filecmp
import fnmatch
import json
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import i18n, readme, site
from .course import RUN_OUTPUTS, chapter_notebook, chapters, generate, make_scratch_course

README_LANGUAGE = "zh"  # the language whose progress the READMEs' chapter tables show


def learner_texts(root: Path, lang: str) -> dict[str, str]:
    """What else a learner reads in ``lang`` besides the catalogues, by where it comes from:
    the README in that language, the website's strings (``src/trainperf/site.py``) and the
    status words ``trainperf build`` writes into the README's chapter table."""
    texts = {}
    path = root / f"README.{lang}.md"
    if path.is_file():
        texts[path.name] = path.read_text(encoding="utf-8")
    texts.update({f"src/trainperf/site.py {name}": text for name, text in site.shown_strings(lang).items()})
    for name, (_, words) in readme.READMES.items():
        if name == path.name:
            texts.update({f"src/trainperf/readme.py {name} {state!r}": text for state, text in words.items()})
    return texts


def _run_output(path: Path) -> bool:
    return any(fnmatch.fnmatch(part, pattern) for part in path.parts for pattern in RUN_OUTPUTS)


def _files(folder: Path) -> set[str]:
    return {
        str(p.relative_to(folder))
        for p in folder.rglob("*")
        if p.is_file()
        and not any(fnmatch.fnmatch(part, pattern) for part in p.parts for pattern in RUN_OUTPUTS)
    }


def generate_all(
    root: Path, chapter_ids: list[str], scratch: Path, lang: str | None = None
) -> dict[str, Path]:
    """Generate each chapter's student version in ``scratch``; chapter -> released folder.
    With ``lang``, from the solution translated by the chapter's catalogue."""
    make_scratch_course(root, scratch, chapter_ids)
    if lang is not None:
        for chapter in chapter_ids:
            source = chapter_notebook(root, chapter)
            notebook = json.loads(source.read_text(encoding="utf-8"))
            translated = i18n.translate(notebook, i18n.catalogue_or_empty(root, lang, chapter))
            (scratch / "solutions" / chapter / source.name).write_text(
                json.dumps(translated, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
            )
    released = {chapter: generate(scratch, chapter) for chapter in chapter_ids}
    if lang is not None:
        for folder in released.values():
            for path in folder.glob("*.ipynb"):
                text = path.read_text(encoding="utf-8")
                path.write_text(i18n.translate_stub(text, lang), encoding="utf-8")
    return released


def differences(root: Path, chapter: str, released: Path) -> list[str]:
    """Files of ``notebooks/<chapter>`` (``chapter`` may be ``zh/01_roofline``) that differ
    from what nbgrader generates."""
    committed = root / "notebooks" / chapter
    if not committed.is_dir():
        return [f"notebooks/{chapter}/ (missing)"]
    want, have = _files(released), _files(committed)
    diffs = [f"notebooks/{chapter}/{name} (missing)" for name in sorted(want - have)]
    diffs += [f"notebooks/{chapter}/{name} (not generated from solutions/)" for name in sorted(have - want)]
    diffs += [
        f"notebooks/{chapter}/{name} (differs)"
        for name in sorted(want & have)
        if not filecmp.cmp(released / name, committed / name, shallow=False)
    ]
    return diffs


def _place(root: Path, folder: str, released: Path, diffs: list[str]) -> None:
    target = root / "notebooks" / folder
    if diffs:
        if target.exists():
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(released, target)
    print(f"{folder}: {'rebuilt' if diffs else 'up to date'}")


def catalogue_state(root: Path, lang: str, check: bool) -> tuple[list[str], dict[str, tuple[int, int, str]]]:
    """Problems of every chapter's catalogue (each named ``i18n/<lang>/<chapter>.json: ...``)
    and each chapter's progress (done, total, status). Without ``check``, a chapter without a
    catalogue gets an empty one to fill."""
    found: list[str] = []
    progress: dict[str, tuple[int, int, str]] = {}
    catalogues = {}
    try:
        terms = i18n.load_glossary(root, lang)
    except (ValueError, OSError) as exc:
        found.append(str(exc))
        terms = []
    for chapter in chapters(root):
        notebook = json.loads(chapter_notebook(root, chapter).read_text(encoding="utf-8"))
        path = i18n.catalogue_path(root, lang, chapter)
        rel = path.relative_to(root).as_posix()
        if not path.is_file():
            if check:
                found.append(f"{rel} (missing: `trainperf build` writes an empty one to fill)")
            else:
                path.write_text(
                    json.dumps(i18n.skeleton(notebook, lang, chapter), indent=1, ensure_ascii=False) + "\n",
                    encoding="utf-8",
                )
                print(f"{rel}: written (empty, in progress)")
        try:
            catalogue = i18n.catalogue_or_empty(root, lang, chapter)
        except (ValueError, OSError) as exc:
            found.append(f"{rel}: {exc}")
            continue
        catalogues[chapter] = catalogue
        found += [f"{rel}: {problem}" for problem in i18n.catalogue_problems(notebook, catalogue)]
        found += [f"{rel}: {problem}" for problem in i18n.glossary_problems(terms, lang, catalogue)]
        progress[chapter] = (*i18n.translated_cells(notebook, catalogue), catalogue.get("status", ""))
    merged, clashes = i18n.merged_strings(catalogues)
    found += [f"i18n/{lang}: {clash}" for clash in clashes]
    rel = i18n.helpers_catalogue_path(root, lang).relative_to(root).as_posix()
    try:  # what the helpers' own code shows, shipped in the same file
        helpers = i18n.load_helpers_catalogue(root, lang)
    except (ValueError, OSError) as exc:
        found.append(f"{rel}: {exc}")
        helpers = None
    if helpers is not None:  # the helpers' messages: check messages, the grader's feedback, ...
        shown = {"strings": {**helpers["messages"], **helpers["lines"]}}
        found += [f"{rel}: {problem}" for problem in i18n.glossary_problems(terms, lang, shown)]
    for name, text in learner_texts(root, lang).items():  # the README, the website
        found += [f"{name}: {hit}" for hit in i18n.glossary_hits(terms, lang, text)]
    target = i18n.strings_path(root, lang)
    text = i18n.strings_file(lang, merged, helpers)
    current = target.read_text(encoding="utf-8") if target.is_file() else None
    if current != text:
        if check:
            found.append(f"{target.relative_to(root).as_posix()} (not what i18n/{lang}/ holds)")
        elif helpers is not None:  # a broken helpers.json (named above) leaves the shipped file
            target.write_text(text, encoding="utf-8")
            print(f"{target.relative_to(root).as_posix()}: rewritten")
    return found, progress


def build(root: Path, wanted: list[str] | None = None, check: bool = False) -> list[str]:
    """Regenerate (or with ``check``, compare) student notebooks in every language, the
    helpers' strings and the READMEs' translation status; returns what differs."""
    chapter_ids = chapters(root, wanted)
    found: list[str] = []
    languages = i18n.languages(root)
    progress: dict[str, dict[str, tuple[int, int, str]]] = {}
    for lang in languages:
        problems, progress[lang] = catalogue_state(root, lang, check)
        if check:
            found += problems
        else:
            for line in problems:
                print(f"translation out of date: {line}")
    with tempfile.TemporaryDirectory(prefix="trainperf-build-") as tmp, ThreadPoolExecutor() as pool:
        # one scratch course per language, generated side by side (nbgrader's gradebook is
        # one SQLite file per course, so the chapters of one course go one after another)
        editions = [None, *languages]
        jobs = [
            pool.submit(generate_all, root, chapter_ids, Path(tmp) / (edition or "en"), edition)
            for edition in editions
        ]
        for edition, job in zip(editions, jobs, strict=True):
            for chapter, released in job.result().items():
                folder = f"{edition}/{chapter}" if edition else chapter
                diffs = differences(root, folder, released)
                found += diffs
                if not check:
                    _place(root, folder, released, diffs)
    if README_LANGUAGE in progress:
        for path, (text, want) in readme.updated(root, progress[README_LANGUAGE]).items():
            if text != want:
                found.append(f"{path.name}: the chapter table's translation status is out of date")
                if not check:
                    path.write_text(want, encoding="utf-8")
                    print(f"{path.name}: translation status updated")
    if check:
        found += _stray(root, languages)
    return found


def _stray(root: Path, languages: list[str]) -> list[str]:
    """Folders of notebooks/ that solutions/ and i18n/ do not account for."""
    known = set(chapters(root))
    found = [
        f"notebooks/{p.name}/ (no such chapter in solutions/)"
        for p in sorted((root / "notebooks").glob("*"))
        if p.is_dir() and p.name not in known and p.name not in languages
    ]
    for lang in languages:
        folder = root / "notebooks" / lang
        found += [
            f"notebooks/{lang}/{p.name}/ (no such chapter in solutions/)"
            for p in sorted(folder.glob("*"))
            if p.is_dir() and p.name not in known
        ]
    return found

"""Translation catalogues: ``i18n/<lang>/<chapter>.json`` next to ``solutions/``.

A catalogue maps each markdown cell of the English source (by cell id) to its translation,
together with a hash of the English text it translates, so a changed English cell shows up as
out of date. In code cells only the prose is translated — comments, docstrings and hint
strings (``code``, :mod:`trainperf.code_i18n`), token by token, every other character as it
was — so a translated notebook runs and grades exactly as the English one.

Format::

    {"language": "zh", "chapter": "01_roofline", "status": "complete" | "in progress",
     "cells": {"<cell id>": {"en_hash": "<12 hex>", "text": "<translated markdown>"}},
     "strings": {"<English string shown by code>": "<translation>"},
     "code": {"<English comment, docstring or hint of a code cell>": "<translation>"}}

``strings`` holds learner-facing strings that live in code cells (check hints, labels), looked
up by their exact English text at run time. ``code`` translates the prose a learner reads in a
code cell's source: a comment by its text after ``# `` (a block of comment lines as one text,
joined by spaces), a docstring by its cleaned text, a hint (a string assigned to ``hint`` or
passed as ``hint=``) by its value; the build writes the translation in place of those tokens.
A hint the checks print is translated once, in ``strings`` (looked up at run time; the build
writes that translation into the code too, and a translated literal passes through).

``i18n/<lang>/helpers.json`` translates what the helpers' own code shows (and the build's
stub message): ``messages``, ``{"<group>": {"<English template of tr()>": "<translation>"}}``
(the groups only sort them for the reader), and ``lines``, the lines the helpers print as
templates with each varying part written ``{0}``, ``{1}``, ... ``i18n/<lang>/glossary.json``
fixes the terms. These files are the only place a translation is written: ``trainperf build``
merges every chapter's strings and the helpers' catalogue into
``src/helpers/data/strings_<lang>.json``, the one file :mod:`helpers.i18n` reads at run time
(it ships with the helpers).

A translated notebook differs from the English one in its markdown, in
``metadata.trainperf.language``, in one line of its parameters cell, ``LANGUAGE = "<lang>"``,
which the setup cell passes to ``helpers.setup(lang=...)`` (messages, widgets and plots in that
language), and in the prose of its code cells. The grader takes only answer cells from a
submission and runs the English test cells, and it tells a test cell translated this way from
an edited one (:func:`trainperf.code_i18n.skeleton`).
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from pathlib import Path
from typing import Any

from helpers.i18n import tr_in

from . import code_i18n, syntax

#: The line of a parameters cell that names the notebook's language.
LANGUAGE_LINE = re.compile(r'^LANGUAGE = "[a-z]+"', re.MULTILINE)
STATUSES = ("complete", "in progress")


def text_hash(text: str) -> str:
    """The hash a catalogue keeps of the English text it translates."""
    return hashlib.sha256(text.strip().encode("utf-8")).hexdigest()[:12]


def _source(cell: dict[str, Any]) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def markdown_cells(notebook: dict[str, Any]) -> dict[str, str]:
    """cell id -> English markdown of every markdown cell of a source notebook."""
    return {c["id"]: _source(c) for c in notebook["cells"] if c["cell_type"] == "markdown"}


def catalogue_path(root: Path, lang: str, chapter: str) -> Path:
    return root / "i18n" / lang / f"{chapter}.json"


def load(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data.get("cells"), dict):
        raise ValueError(f"{path}: not a translation catalogue (no 'cells' object)")
    return data


def skeleton(notebook: dict[str, Any], lang: str, chapter: str) -> dict[str, Any]:
    """An empty catalogue for a chapter: every markdown cell with its hash and no text yet,
    and every comment, docstring and hint a learner reads in its code with no text yet."""
    return {
        "language": lang,
        "chapter": chapter,
        "status": "in progress",
        "cells": {
            cid: {"en_hash": text_hash(text), "text": ""} for cid, text in markdown_cells(notebook).items()
        },
        "strings": {},
        "code": dict.fromkeys(untranslated_code(notebook, {}), ""),
    }


def problems(notebook: dict[str, Any], catalogue: dict[str, Any]) -> list[str]:
    """What is out of date: cells whose English changed, cells without a translation, and
    translations of cells that no longer exist. Missing translations are allowed while the
    catalogue's status is "in progress"."""
    english = markdown_cells(notebook)
    cells = catalogue.get("cells", {})
    found = []
    for cid, text in english.items():
        entry = cells.get(cid)
        if not entry or not entry.get("text", "").strip():
            if catalogue.get("status") != "in progress":
                found.append(f"cell {cid}: no translation")
        elif entry.get("en_hash") != text_hash(text):
            found.append(f"cell {cid}: the English text changed since it was translated")
    found += [
        f"cell {cid}: translated, but the English notebook has no such markdown cell"
        for cid in cells
        if cid not in english
    ]
    return found


def set_language_parameter(notebook: dict[str, Any], lang: str) -> bool:
    """Set ``LANGUAGE = "<lang>"`` in the notebook's parameters cell (in place); False when
    the notebook has no such line."""
    for cell in notebook.get("cells", []):
        if cell.get("cell_type") == "code" and "parameters" in cell.get("metadata", {}).get("tags", []):
            source = _source(cell)
            if LANGUAGE_LINE.search(source):
                cell["source"] = LANGUAGE_LINE.sub(f'LANGUAGE = "{lang}"', source, count=1)
                return True
    return False


def notebook_language(notebook: dict[str, Any]) -> str:
    """The language a notebook says it is in (``metadata.trainperf.language``), else "en"."""
    meta = notebook.get("metadata") if isinstance(notebook, dict) else None
    ours = meta.get("trainperf") if isinstance(meta, dict) else None
    lang = ours.get("language") if isinstance(ours, dict) else None
    return lang if isinstance(lang, str) and re.fullmatch(r"[a-z]{2}", lang) else "en"


def translate(notebook: dict[str, Any], catalogue: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``notebook`` whose markdown cells are the catalogue's (English where missing),
    marked as being in the catalogue's language (metadata and the ``LANGUAGE`` parameter)."""
    import copy

    out = copy.deepcopy(notebook)
    cells, code = catalogue.get("cells", {}), catalogue.get("code", {})
    for cell in out["cells"]:
        entry = cells.get(cell.get("id"))
        if cell["cell_type"] == "markdown" and entry and entry.get("text", "").strip():
            cell["source"] = entry["text"]
        elif cell["cell_type"] == "code" and (code or catalogue.get("strings")):
            source = _source(cell)
            translated = code_i18n.translate(source, code, catalogue.get("strings", {}))
            if translated != source:
                cell["source"] = translated
    out.setdefault("metadata", {}).setdefault("trainperf", {})["language"] = catalogue["language"]
    set_language_parameter(out, catalogue["language"])
    return out


# --------------------------------------------------------------------------- whole course


def languages(root: Path) -> list[str]:
    """Languages with catalogues: the folders of ``i18n/``."""
    folder = root / "i18n"
    return sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []


def catalogue_or_empty(root: Path, lang: str, chapter: str) -> dict[str, Any]:
    """The chapter's catalogue, or an empty one "in progress" when there is none yet."""
    path = catalogue_path(root, lang, chapter)
    if path.is_file():
        return load(path)
    return {
        "language": lang,
        "chapter": chapter,
        "status": "in progress",
        "cells": {},
        "strings": {},
        "code": {},
    }


def catalogue_problems(notebook: dict[str, Any], catalogue: dict[str, Any]) -> list[str]:
    """:func:`problems`, plus a status that is neither "complete" nor "in progress",
    strings that no code cell of the chapter holds any more, ``code`` entries whose English no
    code cell holds any more, and prose a learner reads in a code cell with no ``code`` entry
    (allowed while the status is "in progress")."""
    found = problems(notebook, catalogue)
    if catalogue.get("status") not in STATUSES:
        found.append(f"status {catalogue.get('status')!r} is neither {' nor '.join(map(repr, STATUSES))}")
    constants = code_strings(notebook)
    found += [
        f"string {english[:60]!r}: no code cell of the chapter holds this text any more"
        for english in catalogue.get("strings", {})
        if english not in constants
    ]
    prose = code_prose(notebook)
    code = catalogue.get("code", {})
    found += [
        f"code {english[:60]!r}: no comment, docstring or hint of the chapter's code says this any more"
        for english in code
        if english not in prose
    ]
    if catalogue.get("status") != "in progress":
        left = untranslated_code(notebook, code, catalogue.get("strings", {}))
        found += [f"code {english[:60]!r}: no translation" for english in left]
    return found


def code_prose(notebook: dict[str, Any]) -> set[str]:
    """Every comment, docstring and hint of the notebook's code cells (the keys ``code`` may use)."""
    return {
        piece.key
        for cell in notebook["cells"]
        if cell["cell_type"] == "code"
        for piece in code_i18n.pieces(_source(cell))
    }


def untranslated_code(
    notebook: dict[str, Any], code: dict[str, str], strings: dict[str, str] | None = None
) -> list[str]:
    """The comments, docstrings and hints a learner reads in the student notebook (not the
    solutions, not the hidden tests) that ``code`` does not translate (nor, for a hint, the
    catalogue's ``strings``), once each."""
    found: dict[str, None] = {}
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            for piece in code_i18n.shown_pieces(_source(cell)):
                if code_i18n.lookup(piece, code, strings) is None:
                    found.setdefault(piece.key)
    return list(found)


def code_strings(notebook: dict[str, Any]) -> set[str]:
    """Every string constant of the notebook's code cells (adjacent literals joined, as Python
    joins them); the keys a catalogue's ``strings`` may use."""
    found: set[str] = set()
    for cell in notebook["cells"]:
        if cell["cell_type"] != "code":
            continue
        try:
            tree = syntax.parse(_source(cell))
        except SyntaxError:
            continue
        found |= {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
        found |= {fstring_template(n) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr)}
    return found


def fstring_template(node: ast.JoinedStr) -> str:
    """An f-string as a catalogue key: its fixed text, with each field written ``{0}``,
    ``{1}``, ... in order (``f"MFU of row {row['name']}"`` -> ``"MFU of row {0}"``); the
    helpers match a label built with it to this template at run time."""
    parts, index = [], 0
    for value in node.values:
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            parts.append(value.value)
        else:
            parts.append(f"{{{index}}}")
            index += 1
    return "".join(parts)


def translated_cells(notebook: dict[str, Any], catalogue: dict[str, Any]) -> tuple[int, int]:
    """(markdown cells with an up-to-date translation, markdown cells)."""
    english = markdown_cells(notebook)
    cells = catalogue.get("cells", {})
    done = sum(
        1
        for cid, text in english.items()
        if (cells.get(cid) or {}).get("text", "").strip() and cells[cid].get("en_hash") == text_hash(text)
    )
    return done, len(english)


def strings_path(root: Path, lang: str) -> Path:
    """Where the merged strings of every chapter ship with the helpers."""
    return root / "src" / "helpers" / "data" / f"strings_{lang}.json"


def merged_strings(catalogues: dict[str, dict[str, Any]]) -> tuple[dict[str, str], list[str]]:
    """Every chapter's ``strings`` in one table (chapter order), and the English strings that
    two chapters translate differently."""
    merged: dict[str, str] = {}
    where: dict[str, str] = {}
    clashes = []
    for chapter, catalogue in catalogues.items():
        for english, translated in catalogue.get("strings", {}).items():
            if not isinstance(translated, str) or not translated.strip():
                continue
            if english in merged and merged[english] != translated:
                clashes.append(
                    f"string {english[:60]!r} is translated differently in {where[english]} and {chapter}"
                )
                continue
            merged.setdefault(english, translated)
            where.setdefault(english, chapter)
    return merged, clashes


def strings_file(lang: str, merged: dict[str, str], helpers: dict[str, dict[str, str]] | None = None) -> str:
    """The text of ``strings_<lang>.json``: the chapters' ``strings`` (sorted) and the helpers'
    ``messages`` and ``lines`` (:func:`load_helpers_catalogue`, in the catalogue's order)."""
    data: dict[str, Any] = {
        "language": lang,
        "generated_by": f"trainperf build, from i18n/{lang}/*.json",
        "strings": dict(sorted(merged.items())),
    }
    data.update(helpers or {"messages": {}, "lines": {}})
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


def helpers_catalogue_path(root: Path, lang: str) -> Path:
    return root / "i18n" / lang / "helpers.json"


def load_helpers_catalogue(root: Path, lang: str) -> dict[str, dict[str, str]]:
    """``{"messages": {English: translation}, "lines": {template: translation}}`` from
    ``i18n/<lang>/helpers.json``, its groups of messages flattened in order (both empty when
    the language has no such file). An English text in two groups is an error."""
    path = helpers_catalogue_path(root, lang)
    if not path.is_file():
        return {"messages": {}, "lines": {}}
    data = json.loads(path.read_text(encoding="utf-8"))
    groups, lines = data.get("messages", {}), data.get("lines", {})
    if not (
        isinstance(groups, dict)
        and all(isinstance(g, dict) for g in groups.values())
        and isinstance(lines, dict)
    ):
        raise ValueError(
            f"{path}: 'messages' must be an object of groups, each an object, and 'lines' an object"
        )
    messages: dict[str, str] = {}
    for group in groups.values():
        for english, translated in group.items():
            if english in messages:
                raise ValueError(f"{path}: message {english[:60]!r} is in two groups")
            messages[english] = translated
    return {"messages": messages, "lines": dict(lines)}


# --------------------------------------------------------------------------- glossary


def glossary_path(root: Path, lang: str) -> Path:
    return root / "i18n" / lang / "glossary.json"


def load_glossary(root: Path, lang: str) -> list[dict[str, Any]]:
    """The terms of ``i18n/<lang>/glossary.json`` (empty when the language has none), each
    ``{"en", "<lang>", "reject": [regex, ...]}``; a pattern that does not compile is an error."""
    path = glossary_path(root, lang)
    if not path.is_file():
        return []
    terms = json.loads(path.read_text(encoding="utf-8")).get("terms", [])
    for term in terms:
        for pattern in term.get("reject", []):
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(
                    f"{path}: term {term.get('en')!r}: reject pattern {pattern!r} does not compile ({exc})"
                ) from None
    return terms


#: Fenced code blocks, then inline code spans (which may wrap onto the next line).
_CODE_SPAN = re.compile(r"```.*?```|`[^`]*`", re.DOTALL)


def glossary_hits(terms: list[dict[str, Any]], lang: str, text: str) -> list[str]:
    """Each rejected variant ``text`` uses, as "uses 'X' (the glossary says Y for Z)". Code
    spans (```...```, ``` `...` ```) are blanked first: code stays as the learner types it."""
    found = []
    prose = _CODE_SPAN.sub(lambda match: " " * len(match.group(0)), text)
    for term in terms:
        for pattern in term.get("reject", []):
            for match in re.finditer(pattern, prose):
                found.append(f"uses {match.group(0)!r} (the glossary says {term[lang]} for {term['en']})")
    return found


def glossary_problems(terms: list[dict[str, Any]], lang: str, catalogue: dict[str, Any]) -> list[str]:
    """Every cell, string and code text of a catalogue that uses a variant the glossary rejects."""
    found = [
        f"cell {cid}: {hit}"
        for cid, entry in catalogue.get("cells", {}).items()
        for hit in glossary_hits(terms, lang, (entry or {}).get("text", ""))
    ]
    strings = catalogue.get("strings", {})
    found += [
        f"string {english[:40]!r}: {hit}"
        for english, translated in strings.items()
        if isinstance(translated, str)
        for hit in glossary_hits(terms, lang, translated)
    ]
    found += [
        f"code {english[:40]!r}: {hit}"
        for english, translated in catalogue.get("code", {}).items()
        if isinstance(translated, str)
        for hit in glossary_hits(terms, lang, translated)
    ]
    return found


# --------------------------------------------------------------------------- the stub

#: What an exercise's stub raises in a student notebook (grader/nbgrader_config.py), in English.
STUB = "Exercise not done yet: replace this line"


def translate_stub(notebook_text: str, lang: str) -> str:
    """A generated student notebook (its JSON text) with the stub's message in ``lang`` (the
    helpers' catalogue translates it like any message of theirs)."""
    translated = tr_in(lang, "Exercise not done yet: replace this line")  # STUB, as a literal for the test
    return notebook_text.replace(STUB, translated) if translated != STUB else notebook_text

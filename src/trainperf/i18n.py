"""Translation catalogues: ``i18n/<lang>/<chapter>.json`` next to ``solutions/``.

A catalogue maps each markdown cell of the English source (by cell id) to its translation,
together with a hash of the English text it translates, so a changed English cell shows up as
out of date. Code cells are never translated: a translated notebook runs and grades exactly as
the English one.

Format::

    {"language": "zh", "chapter": "01_roofline", "status": "complete" | "in progress",
     "cells": {"<cell id>": {"en_hash": "<12 hex>", "text": "<translated markdown>"}},
     "strings": {"<English string shown by code>": "<translation>"}}

``strings`` holds learner-facing strings that live in code cells (check hints, labels), looked
up by their exact English text at run time.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any


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
    """An empty catalogue for a chapter: every markdown cell with its hash and no text yet."""
    return {"language": lang, "chapter": chapter, "status": "in progress",
            "cells": {cid: {"en_hash": text_hash(text), "text": ""}
                      for cid, text in markdown_cells(notebook).items()},
            "strings": {}}


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
    found += [f"cell {cid}: translated, but the English notebook has no such markdown cell"
              for cid in cells if cid not in english]
    return found


def translate(notebook: dict[str, Any], catalogue: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``notebook`` whose markdown cells are the catalogue's (English where missing)."""
    import copy

    out = copy.deepcopy(notebook)
    cells = catalogue.get("cells", {})
    for cell in out["cells"]:
        entry = cells.get(cell.get("id"))
        if cell["cell_type"] == "markdown" and entry and entry.get("text", "").strip():
            cell["source"] = entry["text"]
    out.setdefault("metadata", {}).setdefault("trainperf", {})["language"] = catalogue["language"]
    return out

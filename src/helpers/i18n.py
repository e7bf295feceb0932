"""The language of what the helpers show a learner: check messages and hints, the setup
report, widget labels, plot titles and axis labels.

English is the source text. A translation is looked up by the exact English text (the way
gettext does it), so anything without a translation is shown in English. Every translation of
a language is in one file shipped as package data, ``data/strings_<lang>.json``, written by
``trainperf build`` from the course's catalogues (``i18n/<lang>/``, where translations are
written; never edit the shipped file):

- ``strings``: strings written in the notebooks' code cells — check labels and hints — from
  the chapter catalogues ``i18n/<lang>/<chapter>.json``;
- ``messages``: messages written in the helpers' own code (the English passed to :func:`tr`),
  and ``lines``: templates of the lines the helpers print, both from ``i18n/<lang>/helpers.json``.

This module is the one lookup of the course: the helpers, the grader's feedback and the
build's stub message all go through it.

The language is chosen by ``helpers.setup(lang=...)`` — a notebook passes its ``LANGUAGE``
parameter, which the Chinese edition sets to ``"zh"`` — else by the environment variable
``TRAINPERF_LANG``, else English. Only what is *shown* is translated: what a hidden check
records for grading (its label and the answer) never changes with the language.
"""

from __future__ import annotations

import functools
import json
import os
import re
from importlib import resources
from typing import Any

LANGUAGES = ("en", "zh")
ENV = "TRAINPERF_LANG"
#: The CJK font shipped in ``data/fonts``: a subset of Noto Sans CJK SC under its own family
#: name (see data/fonts/README.md), so it never mixes with a full Noto CJK on the system.
CJK_FONT_FAMILY = "Trainperf Sans SC"
CJK_FONT_FILE = "TrainperfSansSC-Regular.otf"

_chosen: list[str] = []  # the language set by set_language(); empty: not set


def _check(lang: str) -> str:
    code = str(lang).strip().lower()
    if code not in LANGUAGES:
        raise ValueError(
            f"lang={lang!r}: the course is written in {' and '.join(map(repr, LANGUAGES))}; pick one of them."
        )
    return code


def language() -> str:
    """The language shown now: the one set by :func:`set_language`, else ``$TRAINPERF_LANG``,
    else ``"en"`` (an unknown value in the environment means English)."""
    if _chosen:
        return _chosen[0]
    env = os.environ.get(ENV, "").strip().lower()
    return env if env in LANGUAGES else "en"


def set_language(lang: str | None) -> str:
    """Show messages, hints, widgets and plots in ``lang`` (``"en"`` or ``"zh"``) from now on;
    ``None`` keeps the current one. Returns the language in use."""
    if lang is not None:
        _chosen[:] = [_check(lang)]
    if language() != "en":
        use_fonts()
        translate_output()
    return language()


@functools.cache
def _table(lang: str) -> dict[str, str]:
    """English -> ``lang`` for every text the helpers show: the notebooks' strings, then the
    helpers' messages, then the templates of their printed lines (a later one wins)."""
    if lang == "en":
        return {}
    try:
        path = resources.files("helpers") / "data" / f"strings_{lang}.json"
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}  # no catalogue shipped: everything stays in English
    table: dict[str, str] = {}
    for part in ("strings", "messages", "lines"):
        table.update(data.get(part, {}))
    return table


def tr(english: str, **fields: Any) -> str:
    """``english`` in the current language (English when it has no translation), with
    ``fields`` filled in by ``str.format``. Never raises because of a translation: a broken
    one falls back to the English text."""
    return tr_in(language(), english, **fields)


def tr_in(lang: str, english: str, **fields: Any) -> str:
    """:func:`tr` in the given language rather than the current one (the grading process
    writes a Chinese submission's feedback this way)."""
    template = _table(lang).get(english, english) if lang in LANGUAGES[1:] else english
    if not fields:
        return template
    try:
        return template.format(**fields)
    except (KeyError, IndexError, ValueError):
        return english.format(**fields)


def text(value: Any) -> Any:
    """A string a notebook passed in (a check label, a hint, a plot title) in the current
    language when the catalogue translates it exactly; anything else unchanged."""
    return text_in(language(), value)


def text_in(lang: str, value: Any) -> Any:
    """:func:`text` in the given language (the grader writes a submission's feedback so).

    A label a notebook builds with an f-string (``f"MFU of recorded row {name}"``) is found
    through its template, the f-string with each field written ``{0}``, ``{1}``, ... (what
    ``trainperf build`` accepts as a catalogue key): the fields' text is kept as it was
    formatted and put where the translation places them."""
    if not isinstance(value, str) or not value or lang not in LANGUAGES[1:]:
        return value
    return _translated(lang, value, fields=True)


def _translated(lang: str, value: str, fields: bool) -> str:
    """``value`` in ``lang``: its exact entry, else its template's with the fields filled in
    (each field translated too when ``fields``), else unchanged."""
    found = _table(lang).get(value)
    if found is not None:
        return found
    for pattern, translated in _templates(lang):
        match = pattern.match(value)
        if match:
            groups = match.groups()
            if fields:  # a label inside a line is translated too (one level deep)
                groups = tuple(_field_in(lang, g) for g in groups)
            try:
                return translated.format(*groups)
            except (IndexError, KeyError, ValueError):
                return value
    return value


def _field_in(lang: str, field: str) -> str:
    """One field of a templated line: a phrase the catalogues translate (a label such as "sum
    on device", an operator's description, an f-string label) in ``lang``, its padding kept;
    anything else (numbers, identifiers, single words that may be code) as it was formatted."""
    core = field.strip()
    if " " not in core:
        return field
    start = field.index(core)
    found = _translated(lang, core, fields=False)
    if found == core:  # a label followed by its value ("sum on device 12.2"): the longest
        table, words = _table(lang), core.split(" ")  # leading phrase known, the rest kept
        for n in range(len(words) - 1, 1, -1):
            head = " ".join(words[:n])
            if head in table:
                found = table[head] + " " + " ".join(words[n:])
                break
    return field[:start] + found + field[start + len(core) :]


FIELD = re.compile(r"\{(\d+)\}")


@functools.cache
def _templates(lang: str) -> list[tuple[re.Pattern[str], str]]:
    """(regex, translation) for every key of the table that is an f-string template, the
    templates with more fixed text first (a longer template is the more specific one)."""
    out = []
    for english, translated in _table(lang).items():
        if not FIELD.search(english):
            continue
        parts = FIELD.split(english)  # text, index, text, index, ..., text
        regex = "".join(re.escape(part) if i % 2 == 0 else "(.+?)" for i, part in enumerate(parts))
        fixed = sum(len(part.strip()) for part in parts[::2])
        if fixed >= 3:  # "{0}: {1}" alone would claim every line
            out.append((fixed, re.compile(regex + r"\Z", re.DOTALL), translated))
    return [(pattern, translated) for _, pattern, translated in sorted(out, key=lambda t: -t[0])]


class _TranslatedLines:
    """A text stream that shows each complete line it is given in the current language
    (:func:`text`: exact, or through an f-string template of the catalogues). The notebook's
    own ``print(f"...")`` lines reach the learner translated this way; a line without a
    translation passes unchanged, and so does a partial line flushed before its end."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._pending = ""

    def write(self, data: str) -> int:
        self._pending += data
        *lines, self._pending = self._pending.split("\n")
        for line in lines:
            self._stream.write(text(line) + "\n")
        return len(data)

    def flush(self) -> None:
        if self._pending:
            self._stream.write(self._pending)
            self._pending = ""
        self._stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def translate_output() -> None:
    """In a Jupyter kernel, show what code prints in the notebook's language, line by line
    (once; the kernel's own stream stays underneath). Outside a kernel it does nothing."""
    import sys

    out = sys.stdout
    if isinstance(out, _TranslatedLines) or type(out).__name__ != "OutStream":
        return
    sys.stdout = _TranslatedLines(out)


def use_fonts() -> None:
    """Let matplotlib draw CJK text: register the shipped font and add it as the fallback
    family after the current ones (Latin letters keep their usual font). Cheap when done; does
    nothing while matplotlib is not installed."""
    try:
        import matplotlib
        from matplotlib import font_manager
    except ImportError:
        return
    families = list(matplotlib.rcParams["font.family"])
    if CJK_FONT_FAMILY in families:
        return
    path = resources.files("helpers") / "data" / "fonts" / CJK_FONT_FILE
    if CJK_FONT_FAMILY not in {f.name for f in font_manager.fontManager.ttflist}:
        font_manager.fontManager.addfont(str(path))
    matplotlib.rcParams["font.family"] = [*families, CJK_FONT_FAMILY]


def for_plot() -> None:
    """Called by every helper that draws: makes sure the font for the current language is set
    (a learner's ``plt.style.use`` or ``rcdefaults`` may have reset it)."""
    if language() != "en":
        use_fonts()

"""English prose in what a learner reads: the tests' measure of a translation that is not
done (tests/test_notebooks.py runs the Chinese edition and fails on any line of English prose
in its outputs; tests/test_i18n.py on a check label or hint without its Chinese). Only tests
use it: nothing here is shipped or run by ``trainperf build``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from trainperf import i18n

_WORD = re.compile(r"[A-Za-z][a-z]+(?:'[a-z]+)?")
# code spans, identifiers, paths, numbers with units, options: not prose
_NOT_PROSE = re.compile(r"`[^`]*`|'[^'\s]+'|\S*[_./\\()\[\]=<>#@:%\d|{}]\S*")  # 'name': a str's repr


def english_prose(line: str, kept: set[str] | frozenset[str] = frozenset(), words: int = 3) -> str | None:
    """The first run of ``words`` or more plain English words in a line a learner sees, or
    None. Code spans, identifiers, paths, numbers, units and the glossary's kept terms
    (``kept``, lower case) do not count: "MFU 12.7%, HFU 12.8%" is not prose, "the measured
    peak's runs spread" is."""
    run: list[str] = []
    for token in _NOT_PROSE.sub(" ", line.replace("(s)", "s")).split():  # "graph(s)" is a word
        word = token.strip(",;:!?\"'()–—-")
        if _WORD.fullmatch(word) and word.lower() not in kept:
            run.append(word)
            if len(run) >= words:
                return " ".join(run)
        else:
            run = []
    return None


def kept_terms(root: Path, lang: str) -> frozenset[str]:
    """The glossary's terms that stay in English, lower case (empty without a glossary)."""
    path = i18n.glossary_path(root, lang)
    if not path.is_file():
        return frozenset()
    return frozenset(t.lower() for t in json.loads(path.read_text(encoding="utf-8")).get("kept", []))


def shown_lines(outputs: list[dict[str, Any]]) -> list[str]:
    """The lines a learner reads in a cell's outputs: streams, text / Markdown results and
    errors (images and widget state are not text). Code a Markdown result shows in ```
    fences (Python source, a command) is code, not prose, and is left out."""
    lines = []
    for out in outputs:
        markdown = False
        if out.get("output_type") == "error":
            texts = [f"{out.get('ename', '')}: {out.get('evalue', '')}"]
        elif "text" in out:
            texts = [out["text"]]
        else:
            data = out.get("data", {})
            markdown = bool(data.get("text/markdown"))
            texts = [data.get("text/markdown") or data.get("text/plain") or ""]
        for text in texts:
            text_lines = ("".join(text) if isinstance(text, list) else str(text)).splitlines()
            lines += _outside_code_blocks(text_lines) if markdown else text_lines
    return lines


def _outside_code_blocks(lines: list[str]) -> list[str]:
    """The lines of a Markdown result outside its ``` fences: code a notebook shows as code
    (Python source, a command) is not prose to translate."""
    out, in_code = [], False
    for line in lines:
        if line.lstrip().startswith("```"):
            in_code = not in_code
        elif not in_code:
            out.append(line)
    return out


#: Names, not prose: products, companies and projects a Chinese text writes in English too.
NAMES = frozenset(
    "python pytorch torch nvidia intel amd arm apple google colab jupyter jupyterlab binder modelscope "
    "hopper ampere blackwell ada volta turing grace xeon epyc gaudi triton inductor dynamo "
    "megatron deepspeed torchao torchtune transformer engine flashattention gloo nccl linux helpers "
    "nsys llama mixtral gopher "  # nsys: the Nsight Systems command; then language models
    # people's names, as a Chinese text writes them ("Kahan 求和", "Korthikanti 等人的公式")
    "kahan korthikanti".split()
)


#: Python's values as repr() and str() print them (``None``, ``True``, ``inf``): code, the same in
#: every language.
LITERALS = frozenset({"none", "true", "false", "inf", "nan"})


def english_words(line: str, kept: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """Every plain English word in a line a Chinese learner reads, even one alone: a label, a
    column header, a row name or a verdict is prose to that learner. Code spans, identifiers
    (a name with ``_``, ``.``, digits...), acronyms (MFU, GPU), :data:`NAMES` and the
    glossary's kept terms (one word or several, "tensor core") do not count."""
    for term in sorted((t for t in kept if " " in t), key=len, reverse=True):
        line = re.sub(re.escape(term), " ", line, flags=re.IGNORECASE)
    words = []
    for token in _NOT_PROSE.sub(" ", line.replace("(s)", "s")).split():
        word = token.strip(",;:!?\"'()–—-·")
        lower = word.lower()
        if _WORD.fullmatch(word) and lower not in kept and lower not in NAMES and lower not in LITERALS:
            words.append(word)
    return words

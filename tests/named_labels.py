"""Labels the prose of a notebook names, and whether its output shows them.

A sentence that says "the `faster` column" or “在噪声范围内” tells the learner to look for that
text in what the notebook prints; in a translated edition the output may say it in another
language (or the column may not exist). The spans counted: `…`, “…” and "…" in the markdown
(outside ``` fences), a word or a short phrase without code punctuation or a formula's symbols,
that is not a name the notebook's code defines or types (a variable, a function, a keyword
argument, a module, a quoted string value), an API's CamelCase name, an option or a command
line.
"""

from __future__ import annotations

import io
import re
import sys
import tokenize
from collections.abc import Iterable
from typing import Any

#: `…`, “…” or "…" on one line.
SPANS = re.compile(r"`([^`\n]+)`|“([^”\n]+)”|\"([^\"\n]+)\"")
#: Characters that make a span code or a sentence rather than a label.
NOT_A_LABEL = re.compile(r"[()._=/\[\]{}<>#@$%*+\\|:;，。；：？！?!,、−≥≤×·±≈]")
#: Command line tools the prose names as such: not labels of the output.
TOOLS = frozenset(
    {
        "nsys",
        "torchrun",
        "pip",
        "git",
        "python",
        "nbgrader",
        "trainperf",
        "jupyter",
        "srun",
        "nvidia-smi",
        "tlparse",
    }
)
MAX_CHARS = 24  # a longer span is a sentence, not a label


def _code_names(sources: Iterable[str]) -> set[str]:
    """Every identifier written in the code cells (lower case): names, attributes, arguments,
    keywords and imported modules all appear as NAME tokens."""
    names: set[str] = set()
    for source in sources:
        try:
            tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
        except (tokenize.TokenError, SyntaxError):
            continue
        names |= {t.string.lower() for t in tokens if t.type == tokenize.NAME}
    return names


def _outside_fences(markdown: str) -> str:
    return re.sub(r"```.*?```", "", markdown, flags=re.DOTALL)


def named_spans(markdown: str, code_names: set[str]) -> list[str]:
    """The spans of one markdown cell that read as labels of the output."""
    found = []
    for match in SPANS.finditer(_outside_fences(markdown)):
        span = next(g for g in match.groups() if g is not None).strip()
        if not span or len(span) > MAX_CHARS or NOT_A_LABEL.search(span) or re.fullmatch(r"[\d\s.%-]+", span):
            continue
        if span.lower() in code_names or span.split()[0].lower() in TOOLS or span in sys.stdlib_module_names:
            continue
        if len(span) < 2 or span.startswith("-") or re.match(r"""^["'].*["']$""", span):
            continue  # a letter of a formula, an option, a string value the learner types
        if re.fullmatch(r"[A-Za-z]*[a-z0-9][A-Z]\w*|[A-Z]+[A-Z][a-z]\w*", span):
            continue  # an API's name: DistributedDataParallel, cudaStreamSynchronize, DTensor
        found.append(span)
    return found


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)


def shown_text(outputs: Iterable[dict[str, Any]]) -> str:
    """Everything the outputs hold as text (streams, plain, Markdown and HTML results, errors)."""
    return "\n".join(text for out in outputs for text in _strings(out) if not text.startswith("iVBOR"))


def missing_labels(markdown_cells: dict[str, str], code_sources: Iterable[str], shown: str) -> list[str]:
    """ "<cell id>: <span>" for each span the prose names that the output never shows."""
    names = _code_names(code_sources)
    folded = shown.casefold()
    return [
        f"{cid}: {span}"
        for cid, text in markdown_cells.items()
        for span in dict.fromkeys(named_spans(text, names))
        if span.casefold() not in folded
    ]

"""The translation status column of the READMEs' chapter tables, kept by ``trainperf build``.

A row of a chapter table names the chapter's notebook folder (```notebooks/01_roofline/```, or
```notebooks/zh/01_roofline/``` in ``README.zh.md``); its last cell says how far the
translation is. ``trainperf build`` rewrites that cell from the catalogues and
``trainperf build --check`` fails when it is out of date, so the table cannot drift.
"""

from __future__ import annotations

from pathlib import Path

# README file -> (notebook folder prefix in its chapter table, words for each state)
READMES = {
    "README.md": (
        "notebooks/",
        {
            "complete": "complete",
            "not started": "not started",
            "in progress": "in progress: {done} of {total} cells",
        },
    ),
    "README.zh.md": (
        "notebooks/zh/",
        {"complete": "已完成", "in progress": "翻译中：{done}/{total} 个单元", "not started": "未开始"},
    ),
}


def state(done: int, total: int, status: str) -> str:
    """ "complete", "in progress" or "not started" for a catalogue with ``done`` of ``total``
    markdown cells translated and the given status."""
    if status == "complete" and done == total:
        return "complete"
    return "in progress" if done else "not started"


def with_status(
    text: str, prefix: str, words: dict[str, str], progress: dict[str, tuple[int, int, str]]
) -> str:
    """``text`` with the last cell of every chapter-table row set from ``progress``
    (chapter -> (done, total, status))."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if not line.startswith("|"):
            continue
        chapter = next((c for c in progress if f"`{prefix}{c}/`" in line), None)
        if chapter is None:
            continue
        done, total, status = progress[chapter]
        cells = line.rstrip().split("|")
        if len(cells) < 4:
            continue
        cells[-2] = " " + words[state(done, total, status)].format(done=done, total=total) + " "
        lines[i] = "|".join(cells)
    return "\n".join(lines)


def updated(root: Path, progress: dict[str, tuple[int, int, str]]) -> dict[Path, tuple[str, str]]:
    """README path -> (current text, text with the status column up to date), for the READMEs
    the checkout has."""
    out = {}
    for name, (prefix, words) in READMES.items():
        path = root / name
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            out[path] = (text, with_status(text, prefix, words, progress))
    return out

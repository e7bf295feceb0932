"""The grading pipeline of ``trainperf grade``: from a folder of submissions to a CSV you can trust.

The public facade is small: :func:`grade` (a class, or one shard of it), :class:`Limits` (what
one submission may use), :func:`merge` (shard results into one CSV) and :func:`autograde` (the
stock-nbgrader route). The modules behind it, in the order a submission meets them:
:mod:`.submissions` (find and read), :mod:`.reference` (nbgrader release and the trusted
reference run), :mod:`.exam` and :mod:`.hidden` (the notebook that is executed, and scoring),
:mod:`.stubs` (the exercise's helpers replaced in the sandbox's copy), :mod:`.sandbox` and
:mod:`.client` (bubblewrap, and the notebook client outside it), :mod:`.copies` (copied helper code),
:mod:`.results`, :mod:`.parts` and :mod:`.shards` (CSV, feedback, details, shards); after them
:mod:`.class_report` (``trainperf report``: the class at a glance, from the results alone).
"""

from __future__ import annotations

import importlib
from typing import Any

_FACADE = {"Limits": "grade", "grade": "grade", "merge": "parts", "autograde": "stock"}
__all__ = sorted(_FACADE)


def __getattr__(name: str) -> Any:
    # lazy: the grading client (``python -m trainperf.grading.client``, one per
    # submission) imports only what it needs, not the whole pipeline
    if name in _FACADE:
        return getattr(importlib.import_module(f".{_FACADE[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

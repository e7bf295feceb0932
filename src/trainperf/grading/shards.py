"""Split a class into N shards that N machines grade on their own (``trainperf grade --shard I/N``).

A shard is a set of **students** (one student's chapters stay together, so a student's row is
written by exactly one part). The split depends only on what is in the submissions folder — the
raw student ids, compared as bytes, and how many notebooks each has — never on the machine, the
locale or the order a filesystem lists entries in: every machine that sees the same folder makes
the same split. Shards are balanced by notebook count (longest first onto the lightest shard),
the cost that matters; a student without notebooks costs nothing but still gets a row.

The **class digest** names the folder's content as the split sees it. Every part records it, so
``trainperf merge`` can tell parts graded from different states of the folder apart (a late
submission arrived between two shards).
"""

from __future__ import annotations

import hashlib
import heapq
import os
import re
from dataclasses import dataclass

from ..course import CourseError
from .submissions import Found

_SPEC = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count``, both counted from 1 as people (and Slurm arrays) count."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    @classmethod
    def parse(cls, text: str) -> Shard:
        """``"2/4"`` -> ``Shard(2, 4)``; anything else is one clear error."""
        match = _SPEC.match(text or "")
        if not match:
            raise CourseError(f"--shard must look like I/N (for example 2/4), got {text!r}.")
        index, count = int(match.group(1)), int(match.group(2))
        if count < 1 or not 1 <= index <= count:
            raise CourseError(f"--shard {text}: I must be between 1 and N (N at least 1).")
        return cls(index, count)


@dataclass(frozen=True)
class ClassSummary:
    """What the split saw: how many students and notebooks, and a digest of exactly which."""

    students: int
    notebooks: int
    digest: str


def _key(student: str) -> bytes:
    return os.fsencode(student)


def summarize(found: Found) -> ClassSummary:
    """The class as the split sees it: every raw id (as bytes) with the chapters it submitted."""
    digest = hashlib.sha256()
    for student in sorted(found.notebooks, key=_key):
        chapters = ",".join(sorted(found.notebooks[student]))
        digest.update(len(_key(student)).to_bytes(4, "big") + _key(student) + chapters.encode() + b"\n")
    notebooks = sum(len(v) for v in found.notebooks.values())
    return ClassSummary(len(found.notebooks), notebooks, digest.hexdigest()[:24])


def assign(found: Found, count: int) -> dict[str, int]:
    """raw student id -> shard index (1..count), deterministic and balanced by notebook count."""
    order = sorted(found.notebooks, key=lambda s: (-len(found.notebooks[s]), _key(s)))
    lightest = [(0, 0, index) for index in range(1, count + 1)]  # (notebooks, students, shard)
    heapq.heapify(lightest)
    shards: dict[str, int] = {}
    for student in order:
        notebooks, students, index = heapq.heappop(lightest)
        shards[student] = index
        heapq.heappush(lightest, (notebooks + len(found.notebooks[student]), students + 1, index))
    return shards


def select(found: Found, shard: Shard) -> Found:
    """The students of one shard, with their notebooks and notes."""
    mine = {s for s, index in assign(found, shard.count).items() if index == shard.index}
    return Found(
        {s: v for s, v in found.notebooks.items() if s in mine},
        {s: v for s, v in found.notes.items() if s in mine},
    )

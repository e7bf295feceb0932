"""Recorded helper results, served by the grading client, never stored in the graded kernel.

The reference run records every trusted call of an exercised helper (``helpers.checks._Replay``)
to a calls file, and the client notes the file's size after each cell, so every call belongs to
the cell that made it: its **origin** (``teach:<cell id>``, ``visible:<grade_id>``,
``hidden:<grade_id>``, ``answer:<grade_id>``, ``extra``; see ``trainperf.grading.exam``).
:func:`build_table` turns that into ``{origin: {(name, key): [results]}}``.

In a graded run the stubbed helper asks the client (an ``input()`` request with
``helpers.checks.REPLAY_PROMPT``); :class:`Server` answers only

* with a result the **same origin** recorded for the same helper and arguments, and
* in a hidden test or an answer cell, only for a helper whose exercises all come **before**
  the one being graded (a later exercise's answer may use an earlier exercise's helper, as the
  solution does; the exercise's own helper never answers there).

So a learner's code can get back what the chapter's own cells computed on their own inputs
(results the learner sees in the notebook anyway), never a hidden case's answer. Standard
library only: the client imports it.
"""

from __future__ import annotations

import base64
import json
import pickle
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

PROMPT = "\x00trainperf-replay "  # helpers.checks.REPLAY_PROMPT (not imported: kept light)
SERVED_EVERYWHERE = ("teach:", "visible:")
_EXERCISE = re.compile(r"^(?:hidden|answer|visible):ex(\d+)")

Table = dict[str, dict[tuple[str, str], list[bytes]]]


def read_calls(path: Path) -> list[tuple[int, str, str, bytes]]:
    """``(end offset, name, key, pickled result)`` of every call the reference run recorded."""
    out = []
    if not path.is_file():
        return out
    with open(path, "rb") as fh:  # written by the trusted reference kernel
        while True:
            try:
                name, key, blob = pickle.load(fh)
            except EOFError:
                return out
            out.append((fh.tell(), name, key, blob))


def build_table(calls: Iterable[tuple[int, str, str, bytes]],
                cells: Iterable[tuple[str, int]]) -> Table:
    """Give each call to the cell that made it. ``cells``: ``(origin, calls file size after
    the cell ran)`` in the order the cells ran."""
    table: Table = {}
    ends = list(cells)
    i = 0
    for end, name, key, blob in calls:
        while i < len(ends) and ends[i][1] < end:
            i += 1
        if i == len(ends):
            break  # written after the last cell the client saw: no cell to give it to
        table.setdefault(ends[i][0], {}).setdefault((name, key), []).append(blob)
    return table


def save(table: Table, path: Path) -> None:
    path.write_bytes(pickle.dumps(table, protocol=4))


def exercise_of(origin: str) -> int | None:
    """The exercise a hidden, answer or visible origin belongs to (``ex3_...`` -> 3)."""
    match = _EXERCISE.match(origin)
    return int(match.group(1)) if match else None


class Server:
    """Answers the graded kernel's replay requests (see the module notes)."""

    def __init__(self, table: Table, exercises: dict[str, int]) -> None:
        self.table = table
        self.exercises = exercises  # helper name -> the last exercise that blocks it
        self.refused = 0

    @classmethod
    def load(cls, path: str, exercises: dict[str, int]) -> Server:
        with open(path, "rb") as fh:  # the grader's own file, outside the sandbox
            return cls(pickle.load(fh), exercises)

    def answer(self, origin: str, prompt: str) -> str:
        """The base64 of the pickled result for one request, or '' (nothing to replay)."""
        try:
            request = json.loads(prompt[len(PROMPT):])
            name, key = str(request["name"]), str(request["key"])
        except (ValueError, KeyError, TypeError):
            self.refused += 1
            return ""
        results = self.table.get(origin, {}).get((name, key))
        if not results or not self._may_serve(origin, name):
            self.refused += 1
            return ""
        # two calls of one cell can share a key: they replay in the order they were made, and
        # the last result then repeats
        blob = results.pop(0) if len(results) > 1 else results[0]
        return base64.b64encode(blob).decode("ascii")

    def _may_serve(self, origin: str, name: str) -> bool:
        if origin.startswith(SERVED_EVERYWHERE):
            return True
        current = exercise_of(origin)
        helper = self.exercises.get(name)
        return current is not None and helper is not None and helper < current


def exercises_of(blocked: Iterable[tuple[int, str, list[str]]], labels: dict[str, str]) -> dict[str, int]:
    """Helper name (as the stub asks, ``helpers.module.function``) -> the last exercise that
    blocks it. ``blocked``: ``trainperf.grading.stubs.blocked_calls``; ``labels``: the stubs'
    names -> "exercise N" (``Stubs.exercises()``), whose module part the blocked calls lack."""
    last: dict[str, int] = {}
    for number, expression, names in blocked:
        module = expression.split(".")[-1]
        for name in names:
            for full in labels:
                owner, _, function = full.rpartition(".")
                if function == name and owner.split(".")[-1] == module:
                    last[full] = max(last.get(full, 0), number)
    for full, label in labels.items():
        last.setdefault(full, int(label.split()[-1]))
    return last


def describe(table: Table) -> dict[str, Any]:
    """Calls per origin (for a test or a log)."""
    return {origin: sum(len(v) for v in calls.values()) for origin, calls in table.items()}

"""Recorded helper results, served by the grading client, never stored in the graded kernel.

The reference run records every trusted call of an exercised helper (``helpers._grading._Replay``)
to a calls file, and the client notes the file's size after each cell, so every call belongs to
the cell that made it: its **origin** (``teach:<cell id>``, ``visible:<grade_id>``,
``hidden:<grade_id>``, ``answer:<grade_id>``, ``extra``; see ``trainperf.grading.exam``).
:func:`build_table` turns that into ``{origin: [(name, key, result), ...]}`` in call order.

In a graded run the stubbed helper asks the client (an ``input()`` request in the format of
:mod:`helpers._wire`: a prompt, a fresh request id, the helper's name and the arguments' key;
the reply echoes the id, and the kernel takes only a reply that carries its request's id).
:class:`Server` answers only with a result recorded **in the same cell** for the same helper
and arguments, and only

* in a teaching cell or a visible check: any of them (the chapter's own fixed inputs, whose
  results the learner sees in the notebook);
* in a hidden test: first, the calls the test itself makes before any answer runs (building
  its cases), strictly in the recorded order: the first request that is not the next recorded
  call ends that; after it, and in an answer cell, only helpers that the exercise being graded
  does not block (the solution's answer used them: an earlier exercise's helper, or one that a
  public helper calls inside).

So an answer never gets its own exercise's helper for a hidden case, and nothing reaches a cell
that did not record it. Standard library and :mod:`helpers._wire` (itself standard library
only) alone: the client imports it.
"""

from __future__ import annotations

import base64
import pickle
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from helpers._wire import PROMPT as PROMPT  # the replay prompt, written once for both sides
from helpers._wire import parse_request, reply

SERVED_EVERYWHERE = ("teach:", "visible:")
_EXERCISE = re.compile(r"^(?:hidden|answer|visible):ex(\d+)")

Table = dict[str, list[tuple[str, str, bytes]]]


def read_calls(path: Path) -> list[tuple[int, str, str, bytes]]:
    """``(end offset, name, key, pickled result)`` of every call the reference run recorded."""
    out: list[tuple[int, str, str, bytes]] = []
    if not path.is_file():
        return out
    with open(path, "rb") as fh:  # written by the trusted reference kernel
        while True:
            try:
                name, key, blob = pickle.load(fh)
            except EOFError:
                return out
            out.append((fh.tell(), name, key, blob))


def build_table(calls: Iterable[tuple[int, str, str, bytes]], cells: Iterable[tuple[str, int]]) -> Table:
    """Give each call to the cell that made it, in call order. ``cells``: ``(origin, calls file
    size after the cell ran)`` in the order the cells ran."""
    table: Table = {}
    ends = list(cells)
    i = 0
    for end, name, key, blob in calls:
        while i < len(ends) and ends[i][1] < end:
            i += 1
        if i == len(ends):
            break  # written after the last cell the client saw: no cell to give it to
        table.setdefault(ends[i][0], []).append((name, key, blob))
    return table


def save(table: Table, path: Path) -> None:
    path.write_bytes(pickle.dumps(table, protocol=4))


def exercise_of(origin: str) -> int | None:
    """The exercise a hidden, answer or visible origin belongs to (``ex3_...`` -> 3)."""
    match = _EXERCISE.match(origin)
    return int(match.group(1)) if match else None


class Server:
    """Answers the graded kernel's replay requests (see the module notes)."""

    def __init__(self, table: Table, exercises: dict[str, list[int]]) -> None:
        self.order = table
        self.by_key: dict[str, dict[tuple[str, str], list[bytes]]] = {}
        for origin, calls in table.items():
            for name, key, blob in calls:
                self.by_key.setdefault(origin, {}).setdefault((name, key), []).append(blob)
        self.exercises = {name: set(numbers) for name, numbers in exercises.items()}
        self.next: dict[str, int] = {}  # hidden origin -> position of its next recorded call
        self.prefix_over: set[str] = set()
        self.refused = 0

    @classmethod
    def load(cls, path: str, exercises: dict[str, list[int]]) -> Server:
        with open(path, "rb") as fh:  # the grader's own file, outside the sandbox
            return cls(pickle.load(fh), exercises)

    def answer(self, origin: str, prompt: object) -> str:
        """The reply to one request: ``"<id> <base64 of the pickled result>"``, ``"<id> "``
        when there is nothing to replay, '' when ``prompt`` is not a well-formed request (it
        comes from the learner's kernel; see :mod:`helpers._wire`)."""
        request = parse_request(prompt)
        if request is None:
            self.refused += 1
            return ""
        request_id, name, key = request
        blob = self._prefix(origin, name, key)
        if blob is None and self._may_serve(origin, name):
            results = self.by_key.get(origin, {}).get((name, key))
            # two calls of one cell can share a key: they replay in the order they were made,
            # and the last result then repeats
            blob = (results.pop(0) if len(results) > 1 else results[0]) if results else None
        if blob is None:
            self.refused += 1
            return reply(request_id, "")
        return reply(request_id, base64.b64encode(blob).decode("ascii"))

    def _prefix(self, origin: str, name: str, key: str) -> bytes | None:
        """A hidden test's own calls before any answer runs, strictly in the recorded order."""
        if not origin.startswith("hidden:") or origin in self.prefix_over:
            return None
        calls, at = self.order.get(origin, []), self.next.get(origin, 0)
        if at < len(calls) and calls[at][:2] == (name, key):
            self.next[origin] = at + 1
            return calls[at][2]
        self.prefix_over.add(origin)
        return None

    def _may_serve(self, origin: str, name: str) -> bool:
        if origin.startswith(SERVED_EVERYWHERE):
            return True
        current = exercise_of(origin)
        blocked_by = self.exercises.get(name)
        return current is not None and blocked_by is not None and current not in blocked_by


def exercises_of(
    blocked: Iterable[tuple[int, str, list[str]]], labels: dict[str, str]
) -> dict[str, list[int]]:
    """Helper name (as the stub asks, ``helpers.module.function``) -> every exercise that blocks
    it. ``blocked``: ``trainperf.grading.stubs.blocked_calls``; ``labels``: the stubs' names ->
    "exercise N" (``Stubs.exercises()``), whose module part the blocked calls lack."""
    found: dict[str, set[int]] = {full: {int(label.split()[-1])} for full, label in labels.items()}
    for number, expression, names in blocked:
        module = expression.split(".")[-1]
        for name in names:
            for full in labels:
                owner, _, function = full.rpartition(".")
                if function == name and owner.split(".")[-1] == module:
                    found[full].add(number)
    return {full: sorted(numbers) for full, numbers in found.items()}


def describe(table: Table) -> dict[str, Any]:
    """Calls per origin (for a test or a log)."""
    return {origin: len(calls) for origin, calls in table.items()}

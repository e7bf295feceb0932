"""Small things several grading tests share: a one-cell exam with its reference records, and a
look at which processes are still alive."""

from __future__ import annotations

import os
from pathlib import Path

from trainperf.grading.exam import Exam, GradedCell

# the reference of the one-cell exam below: two hidden checks and one visible check
REFERENCE = {
    "ex1_test": [
        {"what": "a", "kind": "close", "rtol": 1e-3, "atol": 0.0, "value": 10.0, "expected": 10.0},
        {"what": "b", "kind": "one_of", "rtol": 1e-6, "atol": 0.0, "value": "x", "expected": ["x", "y"]},
    ],
    "ex1_test#visible": [
        {"what": "visible", "shown": {"kind": "equal", "expected": "3"}, "hint": "count them"}
    ],
}


def one_cell_exam() -> Exam:
    """An exam of one graded cell: its visible part at 3, its hidden part at 4, the answer at 2."""
    return Exam({}, [GradedCell("ex1_test", 2.0, 4, 3)], {"ex1": 2})


def survivors(mark: str) -> list[int]:
    """Processes on this machine whose command line carries ``mark``."""
    found = []
    for entry in os.scandir("/proc"):
        try:
            if entry.name.isdigit() and mark.encode() in Path(entry.path, "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            pass
    return found

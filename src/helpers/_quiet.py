"""Keep torch's native profiler notices out of notebook output.

torch's profiler library (Kineto) writes lines such as
``USDT:2026-... SyncActivityProfilerHandler.cpp:52] profiler_start`` straight to the process's
standard error (file descriptor 2, below Python). A notebook shows them as red stderr output,
and stock ``nbgrader autograde`` scores a graded cell that writes to stderr as 0.
:func:`profiler_notices_hidden` catches file descriptor 2 while the profiler starts and stops,
drops those notices, and passes every other line on to ``sys.stderr``.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator

NOTICE = re.compile(r"^USDT:.*\] profiler_(start|stop)\s*$")


def _drop_notices(text: str) -> str:
    return "".join(line for line in text.splitlines(keepends=True) if not NOTICE.match(line.strip()))


@contextlib.contextmanager
def profiler_notices_hidden() -> Iterator[None]:
    """Inside: native writes to file descriptor 2 are held back; on exit the profiler's
    ``USDT ... profiler_start/stop`` notices are dropped and the rest is written to sys.stderr."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, AttributeError, ValueError):  # no real stderr here: nothing to hide
        yield
        return
    with tempfile.TemporaryFile() as held:
        try:
            os.dup2(held.fileno(), 2)
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            rest = _drop_notices(held.read().decode(errors="replace"))
            if rest:
                sys.stderr.write(rest)

"""Loading traces: :func:`load_trace` (one file, a folder of ranks or a list of files) and the
example traces shipped with the package (:func:`example_traces`).

One file is read by :mod:`helpers.timeline._trace_read`; many by the process pool of
:mod:`helpers.timeline._ranks`.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from .._validate import flag as _flag
from .._validate import path as _path
from ._ranks import load_many
from ._trace import Trace
from ._trace_read import rank_from_name, read_trace, trace_files


def load_trace(
    path: str | Path | Sequence[str | Path],
    jobs: int | None = None,
    parser: str | None = None,
    keep_args: bool = False,
) -> Trace | list[Trace]:
    """Read a ``torch.profiler`` chrome trace (``.json`` / ``.json.gz``).

    A file gives one :class:`Trace`; a folder or a list of files gives one trace per rank,
    sorted by rank, read by ``jobs`` processes (default: one per core once the files pass
    ~16 MB; below that, one). Missing or damaged
    files raise a one-line error naming them. ``parser`` is "msgspec" (the default when it is
    installed) or "json"; ``keep_args=True`` keeps every event argument in ``Event.args``
    (slower; by default only ``stream`` and ``correlation``).
    """
    _flag(keep_args=keep_args)
    if isinstance(path, (list, tuple)):
        if not path:
            raise ValueError("load_trace got an empty list; pass a file, a folder or a list of files")
        files = [_path(f"path[{i}]", p) for i, p in enumerate(path)]
    else:
        single = _path("path", path)
        if not single.is_dir():
            return read_trace(single, parser, keep_args)
        files = trace_files(single)
    traces = load_many(files, jobs, parser, keep_args)
    return sorted(
        traces,
        key=lambda t: (
            t.rank is None,
            t.rank if t.rank is not None else 0,
            rank_from_name(t.path) is None,
            rank_from_name(t.path) or 0,
            t.path,
        ),
    )


def example_traces(name: str = "ddp_balanced") -> list[Path]:
    """Paths of the traces shipped with the package (example data recorded by this project with
    :func:`record_ddp`, torch 2.13, gloo on CPU; see ``data/timeline_README.md``):
    ``"ddp_balanced"`` or ``"ddp_one_slow"`` (one rank sleeps :data:`EXAMPLE_SLOW_S` per step;
    which one is for you to find)."""
    folder = resources.files("helpers") / "data"
    found = sorted(Path(str(p)) for p in folder.iterdir() if p.name.startswith(f"timeline_{name}_rank"))
    if not found:
        raise FileNotFoundError(
            f"no shipped example traces called {name!r}; use 'ddp_balanced' or 'ddp_one_slow'"
        )
    return found


#: The delay of the slow rank in the shipped ``ddp_one_slow`` recording, seconds per step.
EXAMPLE_SLOW_S = 0.1

"""The :class:`Table` that nsys output is read into, and :func:`summarize`, which gives an event
table the per-name statistics ``nsys stats`` prints."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .._validate import flag as _flag


class Table:
    """A small column table: ``t["name"]`` is a numpy array, ``len(t)`` its rows, ``t.meta`` notes.

    Made by :func:`read_stats_csv` and :func:`read_sqlite`; ``meta["example"]`` is True for
    the shipped example data.
    """

    def __init__(self, name: str, columns: Mapping[str, Sequence[Any]], meta: dict[str, Any] | None = None):
        lengths = {k: len(v) for k, v in columns.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"Table {name!r}: columns differ in length {lengths}.")
        self.name = name
        self.columns: dict[str, np.ndarray] = {}
        for key, values in columns.items():
            arr = np.asarray(values)
            if arr.dtype.kind in "US":
                arr = np.asarray(values, dtype=object)
            self.columns[key] = arr
        self.meta: dict[str, Any] = dict(meta or {})

    @classmethod
    def from_rows(
        cls,
        name: str,
        rows: Sequence[dict[str, Any]],
        columns: Sequence[str] | None = None,
        meta: dict[str, Any] | None = None,
    ) -> Table:
        keys = list(columns) if columns is not None else (list(rows[0]) if rows else [])
        return cls(name, {k: [r[k] for r in rows] for k in keys}, meta)

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0

    def __getitem__(self, key: str) -> np.ndarray:
        if key not in self.columns:
            raise KeyError(f"Table {self.name!r} has no column {key!r}; columns: {list(self.columns)}")
        return self.columns[key]

    def __contains__(self, key: object) -> bool:
        return key in self.columns

    @property
    def column_names(self) -> list[str]:
        return list(self.columns)

    def row(self, i: int) -> dict[str, Any]:
        return {k: (v[i].item() if hasattr(v[i], "item") else v[i]) for k, v in self.columns.items()}

    def rows(self) -> list[dict[str, Any]]:
        return [self.row(i) for i in range(len(self))]

    def take(self, index: Sequence[int] | np.ndarray) -> Table:
        """Rows at ``index`` (or where a boolean mask is True), as a new table."""
        idx = np.asarray(index)
        return Table(self.name, {k: v[idx] for k, v in self.columns.items()}, self.meta)

    def sorted_by(self, key: str, descending: bool = True) -> Table:
        _flag(descending=descending)
        order = np.argsort(self[key], kind="stable")
        return self.take(order[::-1] if descending else order)

    def format(self, limit: int = 10, columns: Sequence[str] | None = None, width: int = 60) -> str:
        """A plain-text table of the first ``limit`` rows."""
        cols = list(columns) if columns else self.column_names

        def cell(v: Any) -> str:
            if isinstance(v, float):
                return f"{v:.1f}" if abs(v) < 1e15 else f"{v:.3g}"
            text = str(v)
            return text if len(text) <= width else text[: width - 1] + "…"

        body = [[cell(self.row(i)[c]) for c in cols] for i in range(min(limit, len(self)))]
        widths = [max([len(c)] + [len(r[j]) for r in body]) for j, c in enumerate(cols)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True))]
        lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in body]
        if len(self) > limit:
            lines.append(f"... {len(self) - limit} more rows")
        return "\n".join(lines)

    def __repr__(self) -> str:
        tag = " EXAMPLE" if self.meta.get("example") else ""
        return f"<Table {self.name!r}{tag}: {len(self)} rows, columns {self.column_names}>"


def summarize(events: Table, by: str = "name", report: str = "summary") -> Table:
    """Per-name statistics of an event table, like ``nsys stats``: time_pct, total_ns, count,
    avg_ns, med_ns, min_ns, max_ns, stddev_ns (sample standard deviation), sorted by total."""
    groups: dict[str, list[float]] = {}
    for key, dur in zip(events[by], events["duration_ns"], strict=True):
        groups.setdefault(str(key), []).append(float(dur))
    grand = sum(sum(v) for v in groups.values())
    rows: list[dict[str, Any]] = []
    for key, durs in groups.items():
        arr = np.asarray(durs)
        rows.append(
            {
                "time_pct": 100.0 * arr.sum() / grand if grand else 0.0,
                "total_ns": float(arr.sum()),
                "count": len(arr),
                "avg_ns": float(arr.mean()),
                "med_ns": float(np.median(arr)),
                "min_ns": float(arr.min()),
                "max_ns": float(arr.max()),
                "stddev_ns": float(arr.std(ddof=1)) if len(arr) > 1 else 0.0,
                "name": key,
            }
        )
    rows.sort(key=lambda r: (-r["total_ns"], r["name"]))
    cols = ["time_pct", "total_ns", "count", "avg_ns", "med_ns", "min_ns", "max_ns", "stddev_ns", "name"]
    return Table.from_rows(report, rows, cols, events.meta)

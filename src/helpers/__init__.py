"""Helpers for the Training Performance Analysis course.

One module per chapter (``helpers.roofline`` for chapter 1, ...) plus shared pieces:
``helpers.hardware`` (the one table of device peaks, and measuring the current device),
``helpers.bench`` (honest timing), ``helpers.checks`` (friendly exercise checks),
``helpers.env`` (the notebook setup cell) and ``helpers.i18n`` (the language of what the helpers
show: ``helpers.setup(lang="zh")`` for Chinese messages, widgets and plots).

Submodules load on first use, so ``import helpers`` stays cheap and needs only the
learner dependencies: torch, numpy, matplotlib and ipywidgets.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

__version__ = "0.1.0"

# Every public module in this folder, found rather than listed, so a new chapter's module
# needs no edit here.
_SUBMODULES = tuple(sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")))

__all__ = ["setup", "__version__", *_SUBMODULES]


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name == "setup":
        return importlib.import_module(f"{__name__}.env").setup
    raise AttributeError(f"module 'helpers' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)

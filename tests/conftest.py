"""Shared fixtures: the checkout, its chapters, and notebooks executed once per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_TRACES = ROOT.parent / "shared" / "traces"
CHAPTERS = sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir() and p.name[:2].isdigit())

os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def executed_dir(tmp_path_factory) -> Path:
    """Folder where solution notebooks are executed (once per session) by papermill."""
    return tmp_path_factory.mktemp("executed")

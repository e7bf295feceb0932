"""Shared fixtures: the checkout, its chapters, and notebooks executed once per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Two real GPU (NCCL) traces from the test data of PyTorch's Holistic Trace Analysis, MIT
# licence. The course does not redistribute them (it ships only traces it records), so a plain
# clone lacks them: the tests that compare with HTA's figures skip, saying where to put them.
SHARED_TRACES = Path(os.environ.get("TRAINPERF_SHARED_TRACES") or ROOT.parent / "shared" / "traces")
# HTA 0.5.0's figures on those traces (../shared/traces/README.md): idle %, compute %,
# non-compute %, kernel time µs, communication-computation overlap %. Written once, here.
HTA_FIGURES = {
    "gpu_128rank_sampled_rank1.json.gz": (54.72, 22.57, 22.72, 600674, 20.05),
    "gpu_a100_2rank_rank0.json.gz": (77.78, 17.26, 4.97, 435586, 14.31),
}
CHAPTERS = sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir() and p.name[:2].isdigit())

os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
# One compute thread per process: pytest-xdist runs one worker per core, and each worker's
# notebook kernel with as many threads as cores oversubscribes the machine (OpenMP threads spin
# while they wait). Two chapters run side by side on 2 cores took 87 and 95 s with 2 threads
# each, 27 and 34 s with one. The grading sandbox already runs kernels this way. Set
# OMP_NUM_THREADS yourself to override.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def executed_dir(tmp_path_factory) -> Path:
    """Folder where solution notebooks are executed (once per session) by papermill."""
    return tmp_path_factory.mktemp("executed")


_BUILT: dict = {}


def once_per_worker(key: object, build):
    """``build()`` once per test process, then the same result.

    A worker may run a file's tests interleaved with other files' tests, and pytest then
    tears a module- or session-scoped fixture down and sets it up again in the same process:
    a graded batch or a fresh virtual environment built twice. Their folders live under the
    session's temporary root, so reusing them is safe. A ``pytest.skip`` inside ``build`` is
    not remembered and is raised again.
    """
    if key not in _BUILT:
        _BUILT[key] = build()
    return _BUILT[key]


# Tests that share an expensive module- or session-scoped fixture (a graded batch, a fresh
# virtual environment, a JupyterLab server) run on one pytest-xdist worker; a chapter's
# notebook tests share its papermill run. Everything else spreads over the workers.
# pytest 9.2 drops these groups silently (pytest-xdist #1386), hence pytest<9.2 in the course
# extra; tests/test_suite_groups.py fails when a group is not honoured.
_FILE_GROUPS = {
    "test_suite_groups.py",
    "test_grading_hostile.py",
    "test_class_grading.py",
    "test_env_binder.py",
    "test_env_browser.py",
    "test_env_fresh_runtime.py",
    "test_packaging.py",
    "test_report.py",
    "test_timeline_scale.py",
}


@pytest.hookimpl(tryfirst=True)  # before xdist's worker hook, which turns the marks into groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        name = item.path.name
        chapter = getattr(item, "callspec", None) and item.callspec.params.get("chapter")
        if name in _FILE_GROUPS:
            item.add_marker(pytest.mark.xdist_group(name))
        elif name == "test_notebooks.py" and chapter:
            item.add_marker(pytest.mark.xdist_group(f"notebook-{chapter}"))
        elif name == "test_site.py":  # builds its pages from chapter 1's papermill run
            item.add_marker(pytest.mark.xdist_group("notebook-01_roofline"))


def shared_trace(name: str) -> Path:
    """The shared GPU trace ``name``, or a skip that says what it is and where it goes."""
    path = SHARED_TRACES / name
    if not path.exists():
        pytest.skip(
            f"{name} is not in {SHARED_TRACES}: this test compares with HTA's figures on two "
            "real GPU traces that a clone does not include; see the README, 'Tests that need "
            "the shared GPU traces'"
        )
    return path

"""The kernel <-> grader contract is written once, in ``helpers._wire`` (issue 44).

Both sides import its names: the kernel side (``helpers._records``, ``helpers.checks``,
``helpers._grading``) and the grader side (``trainperf.grading.sandbox`` which starts the kernel,
``trainperf.grading.client`` which drives it, ``trainperf.grading.replay``). No other source file
spells one of the values, so the two sides cannot drift apart; the kernel's launch code, a
string the grader hands to ``python -c``, gets the name filled in from ``_wire`` too.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

from helpers import _grading, _records, _wire, checks
from trainperf.grading import client, replay, sandbox
from trainperf.grading.sandbox import KernelLimits, kernel_argv
from trainperf.grading.stubs import recording_module, stub_module

SRC = Path(__file__).resolve().parents[1] / "src"
WIRE = SRC / "helpers" / "_wire.py"
VALUES = {
    name: getattr(_wire, name)
    for name in (
        "RECORD_MIME",
        "RECORD_ENV",
        "REPLAY_FOLDER_ENV",
        "REPLAY_WRITE_ENV",
        "REPLAY_CLIENT_ENV",
        "COMPILE_SEED_ENV",
        "PROMPT",
    )
}


def _pattern(value: str) -> re.Pattern[str]:
    """``value`` as written in source: the prompt's words (its control character is an escape
    there), a variable name as a whole word (``TRAINPERF_REPLAY`` is not ``TRAINPERF_REPLAY_WRITE``)."""
    if value == _wire.PROMPT:
        return re.compile(re.escape(value.strip("\x00 ")))
    return re.compile(rf"(?<![\w.+-]){re.escape(value)}(?![\w+-])")


def test_no_source_file_but_wire_spells_a_wire_value():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path == WIRE:
            continue
        text = path.read_text(encoding="utf-8")
        for name, value in VALUES.items():
            for match in _pattern(value).finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                found.append(f"{path.relative_to(SRC)}:{line} spells _wire.{name}")
    assert not found, "\n".join(found)
    wire = WIRE.read_text(encoding="utf-8")
    assert all(_pattern(value).search(wire) for value in VALUES.values())


def test_wire_is_standard_library_only():
    tree = ast.parse(WIRE.read_text(encoding="utf-8"))
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    imported |= {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and not node.level
    }
    assert not any(isinstance(node, ast.ImportFrom) and node.level for node in ast.walk(tree))
    assert imported - {"__future__"} <= set(sys.stdlib_module_names), imported


def test_both_sides_use_the_same_names():
    assert _records.RECORD_MIME is _wire.RECORD_MIME and _records.RECORD_ENV is _wire.RECORD_ENV
    assert client.RECORD_MIME is _wire.RECORD_MIME
    assert replay.PROMPT is _wire.PROMPT and checks.REPLAY_PROMPT is _wire.PROMPT


def test_the_kernel_the_grader_starts_reads_what_the_grader_sets(tmp_path, monkeypatch):
    folder = tmp_path / "c"
    argv, env = kernel_argv(
        "none", None, tmp_path, folder, KernelLimits(), record=True, compile_cache=tmp_path, replay=tmp_path
    )
    assert env[_wire.RECORD_ENV] == "1" and env[_wire.REPLAY_CLIENT_ENV] == "1"
    assert env[_wire.COMPILE_SEED_ENV] == str(tmp_path)
    code = argv[argv.index("-c") + 1]
    compile(code, "<launch>", "exec")
    assert f"os.environ.pop({_wire.COMPILE_SEED_ENV!r}, " in code and "SEED_ENV" not in code
    assert "LIMITS" not in code and "NICE" not in code
    _, env = kernel_argv(
        "none",
        None,
        tmp_path,
        folder,
        KernelLimits(),
        record=True,
        compile_cache=tmp_path,
        writable_cache=True,
        replay=tmp_path,
    )
    assert env[_wire.REPLAY_FOLDER_ENV] == str(tmp_path) and env[_wire.REPLAY_WRITE_ENV] == "1"
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert _records.recording() and _grading._Replay.folder() == str(tmp_path)
    assert sandbox.REPLAY.startswith("/opt/trainperf/")


def test_checks_keeps_the_machinery_names_and_the_stubs_name_the_machinery():
    for name in ("blocked", "fingerprint", "removed_for_grading", "recorded_for_grading"):
        assert getattr(checks, name) is getattr(_grading, name), name
    stub = stub_module("def f(x):\n    return x\n", {"f": "helpers.m.f is exercise 1"}, set(), "helpers.m")
    recorded = recording_module("def f(x):\n    return x\n", {"f": "helpers.m.f is exercise 1"})
    for text, function in ((stub, "removed_for_grading"), (recorded, "recorded_for_grading")):
        assert f"__import__('helpers._grading', fromlist=['_']).{function}(" in text

"""What a new learner or instructor meets first (issue 42), tested the way they meet it.

Set-up on a machine that cannot reach PyTorch's wheel index (``./run-notebooks`` from a scratch
checkout, run as a subprocess); ``--chapters`` given by name; ``trainperf report`` given a file
that does not exist; the reason of a submission that is not valid JSON (``trainperf grade``);
and the helpers' messages for a wrong argument (a fresh interpreter's last line).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import zipfile
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import envkit
import pytest

ROOT = Path(__file__).resolve().parents[1]
TRAINPERF = [sys.executable, "-m", "trainperf.cli"]
_spec = importlib.util.spec_from_file_location("bootstrap", ROOT / "scripts" / "bootstrap.py")
assert _spec is not None and _spec.loader is not None
bootstrap = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("bootstrap", bootstrap)  # dataclasses look their module up
_spec.loader.exec_module(bootstrap)


# --------------------------------------------------------------------------- a torch index


def _closed_port_url() -> str:
    """An index URL on this machine that refuses connections (a port nothing listens on)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/whl/cpu"


class _Index:
    """A local index that answers every request with ``status``, counting the GETs per path."""

    def __init__(self, status: int) -> None:
        self.gets: Counter[str] = Counter()
        index = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_HEAD(self) -> None:
                self._answer()

            def do_GET(self) -> None:
                index.gets[self.path] += 1
                self._answer()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def index_503() -> Iterator[_Index]:
    index = _Index(503)
    yield index
    index.close()


def test_the_probe_tells_an_index_that_answers_from_one_that_cannot_be_reached():
    answering = _Index(401)  # any HTTP answer: the server is there, pip says what it lacks
    try:
        assert bootstrap.probe_index(answering.url, timeout=5) == ""
        with_login = answering.url.replace("http://", "http://ada:p%40ss@")  # a private index
        assert bootstrap.probe_index(with_login, timeout=5) == ""
    finally:
        answering.close()
    assert bootstrap.probe_index(_closed_port_url(), timeout=5) == "Connection refused"
    with socket.socket() as silent:  # accepts the connection, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        start = time.monotonic()
        why = bootstrap.probe_index(f"http://127.0.0.1:{silent.getsockname()[1]}/", timeout=1)
        assert why == "no answer within 1 s" and time.monotonic() - start < 3
    assert bootstrap.probe_index("file:///opt/pypi/simple") == "", "a local index needs no network"


def _torch_wheel(folder: Path) -> Path:
    """A stand-in torch as a wheel: installs in a second, with no build and no network."""
    wheel = folder / "torch-0.0.1-py3-none-any.whl"
    info = "torch-0.0.1.dist-info"
    files = {
        "torch/__init__.py": "",
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: torch\nVersion: 0.0.1\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
        archive.writestr(f"{info}/RECORD", "".join(f"{name},,\n" for name in [*files, f"{info}/RECORD"]))
    return wheel


def _scratch_checkout(tmp_path: Path, cpu_index: str) -> Path:
    """A checkout with the real bootstrap (its PyTorch index moved to ``cpu_index``), a stand-in
    course, and an ``nvidia-smi`` that finds no GPU (so the CPU index is the one chosen)."""
    root = tmp_path / "course"
    (root / "scripts").mkdir(parents=True)
    source = (ROOT / "scripts" / "bootstrap.py").read_text(encoding="utf-8")
    assert source.count(f'CPU_INDEX = "{bootstrap.CPU_INDEX}"') == 1
    moved = source.replace(f'CPU_INDEX = "{bootstrap.CPU_INDEX}"', f'CPU_INDEX = "{cpu_index}"')
    (root / "scripts" / "bootstrap.py").write_text(moved, encoding="utf-8")
    shutil.copy(ROOT / "run-notebooks", root)
    (root / "src" / "trainperf").mkdir(parents=True)
    (root / "src" / "trainperf" / "__init__.py").touch()
    (root / "src" / "trainperf" / "cli.py").write_text(
        "import sys, torch\nprint('stand-in trainperf', sys.argv[1:])\n"
    )
    (root / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "trainperf-course"\nversion = "0.0.1"\ndependencies = ["packaging"]\n'
        "[project.optional-dependencies]\ncourse = []\n"
    )
    no_gpu = tmp_path / "bin" / "nvidia-smi"
    no_gpu.parent.mkdir()
    no_gpu.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed: no NVIDIA driver' >&2\nexit 9\n")
    no_gpu.chmod(0o755)
    return root


def _environ(tmp_path: Path, **extra: str) -> dict[str, str]:
    drop = ("VIRTUAL_ENV", "CONDA_PREFIX", "TRAINPERF_TORCH_INDEX")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    return {
        **env,
        "PYTHON": envkit.base_python(),
        "PATH": f"{tmp_path / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin",
        "TRAINPERF_TORCH": str(_torch_wheel(tmp_path)),
        **extra,
    }


def _run_notebooks(root: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(root / "run-notebooks")], env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.env
def test_an_unreachable_pytorch_index_is_one_line_then_pips_own_index(tmp_path):
    dead = _closed_port_url()
    root = _scratch_checkout(tmp_path, dead)
    done = _run_notebooks(root, _environ(tmp_path))
    shown = done.stdout + done.stderr
    assert done.returncode == 0, shown[-3000:]
    said = [line for line in shown.splitlines() if dead in line]
    assert len(said) == 1, said
    assert said[0].startswith(f"run-notebooks: PyTorch's index {dead} cannot be reached (Connection refused)")
    assert "installing torch from pip's own index instead" in said[0] and "TRAINPERF_TORCH_INDEX" in said[0]
    assert "Retrying" not in shown, "never a wall of pip's retries"
    assert "run-notebooks: installing torch (from pip's index)." in done.stdout
    assert "stand-in trainperf ['run']" in done.stdout, "the set-up went on to the job"


@pytest.mark.env
def test_an_index_the_user_set_that_cannot_be_reached_stops_in_one_line(tmp_path):
    dead = _closed_port_url()
    root = _scratch_checkout(tmp_path, bootstrap.CPU_INDEX)
    done = _run_notebooks(root, _environ(tmp_path, TRAINPERF_TORCH_INDEX=dead))
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stderr.strip().splitlines() == [
        f"run-notebooks: TRAINPERF_TORCH_INDEX={dead} cannot be reached (Connection refused); "
        "check the URL, or set TRAINPERF_TORCH_INDEX=default to install torch from pip's own index"
    ]
    assert "installing torch" not in done.stdout and "Retrying" not in done.stdout


@pytest.mark.env
def test_an_index_that_answers_but_fails_is_given_up_after_one_retry(tmp_path, index_503):
    root = _scratch_checkout(tmp_path, index_503.url)
    env = _environ(tmp_path, TRAINPERF_TORCH="torch", PIP_CONFIG_FILE=os.devnull)
    env = {k: v for k, v in env.items() if not k.startswith("PIP_") or k == "PIP_CONFIG_FILE"}
    start = time.monotonic()
    done = _run_notebooks(root, env)
    seconds = time.monotonic() - start
    shown = done.stdout + done.stderr
    assert done.returncode == 1, shown[-3000:]
    assert (
        f"run-notebooks: installing torch (no NVIDIA GPU, so the CPU build, from {index_503.url})." in shown
    )
    assert index_503.gets["/simple/torch/"] == 2, f"one try and one retry, not pip's six: {index_503.gets}"
    assert shown.count("Retrying") <= 1, shown[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("run-notebooks: installing torch") and "TRAINPERF_TORCH_INDEX" in last, last
    print(f"set-up with an index answering 503: gave up in {seconds:.1f} s")


# --------------------------------------------------------------------------- the commands


def _trainperf(*args: str, cwd: Path = ROOT, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TRAINPERF, *args], capture_output=True, text=True, cwd=cwd, timeout=timeout)


def test_chapters_are_named_by_number_or_name():
    from trainperf.course import CourseError, chapters

    for item in ("roofline", "01", "1", "01_roofline", "Roofline"):
        assert chapters(ROOT, [item]) == ["01_roofline"], item
    assert chapters(ROOT, ["mixed-precision", "8", "mixed_precision"]) == ["08_mixed_precision"]
    with pytest.raises(CourseError) as refused:
        chapters(ROOT, ["roofine"])
    line = str(refused.value)
    assert line.startswith(
        "Unknown chapter 'roofine' (did you mean 'roofline'?); choose a number or a name: "
    )
    assert "01 roofline, 02 mfu," in line and "\n" not in line


def test_the_chapters_option_takes_names():
    checked = _trainperf("build", "--check", "--chapters", "roofline")
    assert checked.returncode == 0, checked.stderr
    assert "notebooks/ matches solutions/" in checked.stdout
    # run resolves its chapters first: an unknown language then shows "roofline" was accepted
    ran = _trainperf("run", "--chapters", "roofline", "--lang", "xx")
    assert (
        ran.returncode == 2
        and ran.stderr.strip() == "trainperf: unknown language 'xx': the course has en, zh."
    )
    unknown = _trainperf("run", "--chapters", "roofine")
    assert unknown.returncode == 2 and len(unknown.stderr.strip().splitlines()) == 1
    assert "did you mean 'roofline'?" in unknown.stderr and "08 mixed_precision" in unknown.stderr


def test_report_of_a_file_that_does_not_exist_says_so(tmp_path):
    done = _trainperf("report", "nonexist.csv", "--out", str(tmp_path / "report"), cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "trainperf: nonexist.csv does not exist: give the grades CSV that `trainperf grade --out` or "
        "`trainperf merge --out` wrote (its .details.jsonl file must be beside it)."
    ]
    assert not (tmp_path / "report").exists()
    folder = _trainperf("report", str(tmp_path), cwd=tmp_path)
    assert (
        folder.returncode == 2 and f"trainperf: {tmp_path} is a folder: give the grades CSV" in folder.stderr
    )


@pytest.mark.notebooks
def test_a_submission_that_is_not_json_gets_a_reason_that_reads_cleanly(tmp_path):
    notebook = (ROOT / "notebooks" / "01_roofline" / "01_roofline.ipynb").read_text(encoding="utf-8")
    cut = notebook.splitlines(keepends=True)
    broken = "".join(cut[:60]) + cut[60][:8]  # cut short inside a string on line 61
    assert cut[60].startswith('    "') and '"' not in cut[60][5:8]
    (tmp_path / "subs" / "ada" / "01_roofline").mkdir(parents=True)
    (tmp_path / "subs" / "ada" / "01_roofline" / "01_roofline.ipynb").write_text(broken, encoding="utf-8")
    done = _trainperf(
        "--root",
        str(ROOT),
        "grade",
        "subs",
        "--chapters",
        "roofline",
        "--out",
        "g.csv",
        cwd=tmp_path,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    reason = "the submitted notebook is not valid JSON (Unterminated string starting at line 61, column 5)"
    assert "ada 01_roofline: 0/" in done.stdout and reason in done.stdout
    assert f'"01_roofline: {reason}"' in (tmp_path / "g.csv").read_text(encoding="utf-8")


def test_json_problems_keep_their_own_punctuation(tmp_path):
    from trainperf.grading.submissions import read_submission

    cases = {
        b'{"cells": [1 2]}': "Expecting ',' delimiter at line 1, column 14",
        b"{} {}": "Extra data at line 1, column 4",
        b'{"a": "\xff"}': "byte 0xff at offset 7 is not UTF-8 text",
    }
    for data, words in cases.items():
        (tmp_path / "a.ipynb").write_bytes(data)
        nb, reason, _ = read_submission(tmp_path / "a.ipynb")
        assert nb is None and reason == f"the submitted notebook is not valid JSON ({words})", reason


# --------------------------------------------------------------------------- helpers' messages


def _last_line(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done
    return done.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize(
    "argument, line",
    [
        (
            "'traces/rank0.json'",
            "TypeError: step_breakdown takes a loaded Trace, not a path: call trace = "
            "timeline.load_trace('traces/rank0.json') first, then timeline.step_breakdown(trace)",
        ),
        (
            "pathlib.Path('rank0.json.gz')",
            "TypeError: step_breakdown takes a loaded Trace, not a path: call trace = "
            "timeline.load_trace('rank0.json.gz') first, then timeline.step_breakdown(trace)",
        ),
        (
            "['rank0.json', 'rank1.json']",
            "TypeError: step_breakdown takes one loaded Trace, not a list: call traces = "
            "timeline.load_trace(paths) first, then timeline.step_breakdown(t) for each t",
        ),
        (
            "timeline.load_trace(timeline.example_traces())",
            "TypeError: step_breakdown takes one Trace, not a list of 2: call it once per rank, "
            "{t.rank: timeline.step_breakdown(t) for t in traces}",
        ),
    ],
)
def test_step_breakdown_says_to_load_the_trace_first(argument, line):
    code = f"import pathlib; from helpers import timeline; timeline.step_breakdown({argument})"
    assert _last_line(code) == line


@pytest.mark.parametrize(
    "argument, got",
    [
        ("2", "got int 2"),
        ("None", "got NoneType None"),
        ("torch.ones(2)", "got a tensor: pass its dtype (x.dtype)"),
    ],
)
@pytest.mark.parametrize("function", ["bytes_per_element", "dtype_key"])
def test_a_dtype_of_the_wrong_type_names_the_accepted_forms(function, argument, got):
    code = f"import torch; from helpers import hardware; hardware.{function}({argument})"
    assert _last_line(code) == (
        "TypeError: dtype must be a name ('fp32', 'tf32', 'fp16', 'bf16', 'fp8', or 'float32', "
        "'bfloat16', ...) or a torch.dtype (torch.float32, torch.bfloat16, ...), " + got
    )

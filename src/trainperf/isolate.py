"""Run the sandbox child for one submission with limits, and clean up after it.

Limits: a per-cell timeout (inside the child), a per-notebook wall-clock limit (here: the
whole process group is killed), an address-space cap for the child and its kernel. When the
grader runs as root, the child and kernel run under a dedicated unprivileged uid in a
private folder, so student code can neither read nor write the gradebook, the CSV or other
students' files, and every process left under that uid is killed afterwards.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Sandboxes run under uids no account uses. Each grading run draws its own block at random,
# so two runs on one machine never kill each other's processes (root only).
UID_RANGE = (1_000_000, 2_000_000_000)


def pick_uids(count: int) -> list[int]:
    """``count`` unused uids for this run's sandboxes."""
    import secrets

    while True:
        base = UID_RANGE[0] + secrets.randbelow(UID_RANGE[1] - UID_RANGE[0] - count)
        uids = list(range(base, base + count))
        if not any(_processes_of(uid) for uid in uids):
            return uids


def _processes_of(uid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        uid_line = next((ln for ln in status.splitlines() if ln.startswith("Uid:")), "")
        if uid_line.split()[1:2] == [str(uid)]:
            pids.append(int(entry.name))
    return pids


@dataclass
class Execution:
    records: dict[int, dict[str, Any]] = field(default_factory=dict)
    finished: bool = False  # the child reported every cell
    timed_out: bool = False  # the notebook limit was hit
    seconds: float = 0.0
    log_tail: str = ""


def can_drop_privileges() -> bool:
    """Root with ``unshare`` and ``setpriv``: submissions can run in a namespace as another uid."""
    return (hasattr(os, "geteuid") and os.geteuid() == 0
            and shutil.which("unshare") is not None and shutil.which("setpriv") is not None)


def _needed_paths() -> list[Path]:
    """What the sandboxed interpreter must be able to read: Python, the venv, the course code."""
    import helpers
    import trainperf

    paths = {Path(sys.base_prefix), Path(sys.prefix), Path(sys.executable).parent,
             Path(trainperf.__file__).resolve().parents[1], Path(helpers.__file__).resolve().parents[1]}
    return sorted(p.resolve() for p in paths)


def isolation_prefix(uid: int, hide: list[Path], workdir: Path | None = None) -> list[str]:
    """argv prefix: a private mount namespace where ``hide`` are empty and ``uid`` runs the rest.

    Inside the namespace, folders that block other users on the way to Python or the course
    code (e.g. a 0700 ``/root`` holding pyenv) are replaced by an empty tmpfs with only the
    needed entries bound back; the grader's files (``hide``) are covered by empty tmpfs.
    """
    lines = ["set -e"]
    blocked: dict[Path, set[str]] = {}
    for needed in _needed_paths():
        for ancestor in [*reversed(needed.parents), needed][1:]:
            if not os.stat(ancestor).st_mode & 0o001 and ancestor != needed:
                child = needed.relative_to(ancestor).parts[0]
                blocked.setdefault(ancestor, set()).add(child)
                break
    for n, (ancestor, children) in enumerate(sorted(blocked.items())):
        keep = f"/tmp/.tp-keep-{n}"
        for m, child in enumerate(sorted(children)):
            lines.append(f"mkdir -p {keep}-{m} && mount --bind {shlex.quote(str(ancestor / child))} "
                         f"{keep}-{m}")
        lines.append(f"mount -t tmpfs -o mode=755 tpblock {shlex.quote(str(ancestor))}")
        for m, child in enumerate(sorted(children)):
            target = shlex.quote(str(ancestor / child))
            lines.append(f"mkdir -p {target} && mount --move {keep}-{m} {target}")
    visible = [*_needed_paths(), *([workdir.resolve()] if workdir else [])]
    for path in (p.resolve() for p in hide):
        # never cover what the sandbox itself needs (e.g. an output folder holding the venv)
        if path.exists() and not any(v == path or path in v.parents for v in visible):
            lines.append(f"mount -t tmpfs -o mode=000,size=1m tphide {shlex.quote(str(path))}")
    network = ["--net"] if shutil.which("ip") else []
    if network:  # no network for submissions; loopback only, for the kernel's own sockets
        lines.append("ip link set lo up")
    lines.append(f'exec setpriv --reuid {uid} --regid {uid} --clear-groups --no-new-privs -- "$@"')
    return ["unshare", "--mount", *network, "--propagation", "private", "--", "/bin/sh", "-c",
            "\n".join(lines), "tp-sandbox"]


def _kill_uid(uid: int) -> None:
    """SIGKILL every process owned by ``uid`` (a uid drawn for this grading run only)."""
    for pid in _processes_of(uid):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def execute(notebook: dict[str, Any], sandbox: Path, *, cell_timeout: int, notebook_timeout: float,
            memory_mb: int | None, max_output: int, uid: int | None,
            hide: list[Path] | None = None) -> Execution:
    """Execute ``notebook`` in a fresh child process inside ``sandbox``."""
    sandbox.mkdir(parents=True, exist_ok=True)
    for sub in ("home", "tmp", "runtime"):
        (sandbox / sub).mkdir(exist_ok=True)
    if uid is not None:
        for path in [sandbox, *sandbox.iterdir()]:
            os.chown(path, uid, uid)
        os.chmod(sandbox, 0o700)
    env = {key: os.environ[key] for key in ("PATH", "LANG", "LC_ALL", "VIRTUAL_ENV")
           if key in os.environ}
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "/usr/bin:/bin")
    env.update(HOME=str(sandbox / "home"), TMPDIR=str(sandbox / "tmp"),
               JUPYTER_RUNTIME_DIR=str(sandbox / "runtime"), IPYTHONDIR=str(sandbox / "home"),
               MPLCONFIGDIR=str(sandbox / "home"), MPLBACKEND="Agg", PYTHONDONTWRITEBYTECODE="1",
               PYDEVD_DISABLE_FILE_VALIDATION="1", OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"),
               TP_MEMORY_MB=str(memory_mb or 0))
    # nbgrader's and IPython's own config must not come from the grader's home
    env["JUPYTER_CONFIG_DIR"] = str(sandbox / "home")
    read_fd, write_fd = os.pipe()
    command = [sys.executable, "-m", "trainperf.sandbox", "--result-fd", str(write_fd),
               "--cell-timeout", str(cell_timeout), "--max-output", str(max_output)]
    if uid is not None:
        command = isolation_prefix(uid, hide or [], sandbox) + command
    log_path = sandbox / "child.log"
    result = Execution()
    start = time.perf_counter()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                                pass_fds=(write_fd,), cwd=sandbox, env=env, start_new_session=True)
    os.close(write_fd)

    def read_results() -> None:
        with os.fdopen(read_fd, "r") as source:
            for line in source:
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if record.get("done"):
                    result.finished = True
                elif isinstance(record.get("index"), int):
                    result.records[record["index"]] = record

    reader = threading.Thread(target=read_results, daemon=True)
    reader.start()
    try:
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(notebook).encode())
        proc.stdin.close()
    except BrokenPipeError:
        pass
    try:
        proc.wait(timeout=notebook_timeout)
    except subprocess.TimeoutExpired:
        result.timed_out = True
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        if uid is not None:
            _kill_uid(uid)
        proc.wait()
    reader.join(timeout=10)
    result.seconds = time.perf_counter() - start
    try:
        result.log_tail = log_path.read_text(errors="replace")[-2000:]
    except OSError:
        pass
    return result


def remove(sandbox: Path) -> None:
    shutil.rmtree(sandbox, ignore_errors=True)

"""The sandbox a submission's kernel runs in, built on bubblewrap, and one graded execution.

Only the learner's kernel runs in the sandbox. The notebook client that drives it
(:mod:`trainperf.grading.sandbox`) and everything that scores it run as the grader, outside.

Isolation levels, strongest first (``detect`` picks the best that works here and says why not
the strongest):

- ``uid`` — grading as root with bubblewrap (``bwrap``, the sandbox Flatpak uses): the kernel gets
  private PID, mount, network, IPC and UTS namespaces, a uid no grading process uses (a new one for
  every submission), a new empty session keyring, no capabilities and ``no_new_privs``. Its
  filesystem is an empty root with only the operating system, the Python installation and a
  read-only copy of the helpers (the chapter's exercised functions as stubs, see
  :mod:`trainperf.grading.stubs`) bound in:
  the course checkout, the submissions, the grades and the gradebook do not exist there. When
  the kernel ends, the PID namespace ends with it, so every process it started is gone — even
  one that keeps re-forking. Limits: address space, file size, process count (per uid), and
  the size of its only writable folders (``/tmp``, ``/dev/shm``, both private tmpfs).
- ``userns`` — not root, but bubblewrap can use an unprivileged user namespace: the same
  namespaces and filesystem view, under the grader's own uid (no per-uid process cap).
- ``none`` — no bubblewrap: the kernel runs as the grader, sees what the grader sees, and only
  the time, memory and file-size limits apply.
"""

from __future__ import annotations

import json
import os
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .sandbox import CLIENT_MEMORY_MB

_CLIENT_MEMORY = CLIENT_MEMORY_MB * 2**20
SITE = "/opt/trainperf/site"  # where the read-only helpers copy appears in the sandbox
UID_RANGE = (1_000_000, 2_000_000_000)  # sandboxes run under uids no account uses
MAX_RESULT_LINE = 8 * 2**20  # one cell's result from the notebook client, serialised

# The kernel's first Python: set limits, keep '' and the working folder off sys.path, die
# with its parent, then become an IPython kernel. No file of the course is needed for this.
_LAUNCH = """\
import ctypes, os, resource, shutil, sys
seed = os.environ.pop("TRAINPERF_COMPILE_SEED", "")
if seed and os.path.isdir(seed):  # the reference run's compiled kernels: start warm
    try:
        shutil.copytree(seed, os.environ["TORCHINDUCTOR_CACHE_DIR"], dirs_exist_ok=True)
    except OSError:
        pass
for name, value in LIMITS:
    if value:
        resource.setrlimit(getattr(resource, name), (value, value))
try:
    ctypes.CDLL(None).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL: die with the notebook client
except Exception:
    pass
try:  # keyctl(KEYCTL_JOIN_SESSION_KEYRING, NULL): a new, empty session keyring of its own
    ctypes.CDLL(None).syscall({"x86_64": 250, "aarch64": 219}[os.uname().machine], 1, None)
except Exception:
    pass
sys.path[:] = [p for p in sys.path if p not in ("", ".")]
from ipykernel.kernelapp import launch_new_instance
launch_new_instance(argv=["--ignore-cwd", "-f", *sys.argv[1:]])
"""


@dataclass(frozen=True)
class KernelLimits:
    """What one submission's kernel may use."""

    memory_mb: int | None = 6144  # address space; None = no cap
    file_mb: int = 256  # largest file it may write
    disk_mb: int = 1024  # its private /tmp (and as much again for /dev/shm)
    processes: int = 256  # processes and threads of its uid (isolation level ``uid`` only)


@dataclass
class Isolation:
    level: str  # "uid" | "userns" | "none"
    why: str = ""  # when not "uid": the real cause, in one line

    @property
    def isolated(self) -> bool:
        return self.level != "none"


def pick_uids(count: int) -> list[int]:
    """``count`` uids that no process on this machine uses, drawn at random for this run."""
    while True:
        base = UID_RANGE[0] + secrets.randbelow(UID_RANGE[1] - UID_RANGE[0] - count)
        uids = list(range(base, base + count))
        if not any(processes_of(uid) for uid in uids):
            return uids


def processes_of(uid: int) -> list[int]:
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


def install_helpers_copy(folder: Path) -> Path:
    """A read-only copy of the helpers package (what the kernel imports) under ``folder``."""
    import helpers

    source = Path(helpers.__file__).resolve().parent
    target = folder / "helpers"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for path in [folder, *folder.rglob("*")]:
        path.chmod(0o555 if path.is_dir() else 0o444)
    return folder


def _ancestors(path: Path) -> list[Path]:
    return list(reversed(path.parents))[1:]  # without "/"


def _system_binds() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    return args + ["--ro-bind", "/etc", "/etc", "--ro-bind-try", "/sys", "/sys"]


def python_paths() -> list[Path]:
    """The Python installation and environment the kernel needs, read-only."""
    paths = {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()}
    return sorted(p for p in paths if not str(p).startswith(("/usr/", "/bin/", "/lib")) and p != Path("/usr"))


def exposes(course_root: Path) -> Path | None:
    """A read-only bind that would show ``course_root`` inside the sandbox, if any."""
    root = course_root.resolve()
    for path in python_paths():
        if path == root or path in root.parents:
            return path
    return None


def kernel_env(record: bool) -> dict[str, str]:
    env = {"HOME": "/tmp/home", "TMPDIR": "/tmp", "PYTHONPATH": SITE, "MPLBACKEND": "Agg",
           "MPLCONFIGDIR": "/tmp/home", "IPYTHONDIR": "/tmp/home/.ipython", "LANG": "C.UTF-8",
           "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "PYTHONDONTWRITEBYTECODE": "1",
           "PYDEVD_DISABLE_FILE_VALIDATION": "1", "TORCHINDUCTOR_CACHE_DIR": "/tmp/inductor",
           "JUPYTER_PLATFORM_DIRS": "1", "PYTHONHASHSEED": "0"}  # replay keys hash sets alike
    if record:
        env["TRAINPERF_RECORD_HIDDEN"] = "1"
    return env


SEED = "/opt/trainperf/compile-seed"  # where a read-only compile cache appears in the sandbox
REPLAY = "/opt/trainperf/replay"  # where the reference run writes its trusted calls (helpers.checks._Replay)


def kernel_argv(level: str, uid: int | None, site: Path, connection_dir: Path,
                limits: KernelLimits, record: bool, compile_cache: Path | None = None,
                writable_cache: bool = False, replay: Path | None = None
                ) -> tuple[list[str], dict[str, str]]:
    """(command that starts the kernel — ends with ``{connection_file}`` — and its environment).

    ``compile_cache``: torch.compile's on-disk cache of the reference run. The reference run
    writes it (``writable_cache``); a submission's kernel starts with a private copy of it, so
    compiling the teaching cells' code is warm and no kernel can change what another sees.
    """
    # see helpers.checks.removed_for_grading: the reference run writes its trusted calls to
    # ``replay`` (a folder); a graded kernel asks the grading client for them, so no table of
    # recorded results is ever inside its sandbox
    if replay is not None and writable_cache:
        env_replay = {"TRAINPERF_REPLAY": str(replay) if level == "none" else REPLAY,
                      "TRAINPERF_REPLAY_WRITE": "1"}
    elif replay is not None:
        env_replay = {"TRAINPERF_REPLAY_CLIENT": "1"}
    else:
        env_replay = {}
    rlimits = [("RLIMIT_CORE", 0), ("RLIMIT_FSIZE", limits.file_mb * 2**20)]
    if limits.memory_mb:
        rlimits.append(("RLIMIT_AS", limits.memory_mb * 2**20))
    if level == "uid":
        rlimits.append(("RLIMIT_NPROC", limits.processes))
    launch = [sys.executable, "-c", _LAUNCH.replace("LIMITS", repr(rlimits)), "{connection_file}"]
    env = {**kernel_env(record), **env_replay}
    if level == "none":
        env.update(HOME=str(connection_dir / "home"), TMPDIR=str(connection_dir / "tmp"),
                   PYTHONPATH=str(site), MPLCONFIGDIR=str(connection_dir / "home"),
                   IPYTHONDIR=str(connection_dir / "home" / ".ipython"),
                   TORCHINDUCTOR_CACHE_DIR=str(connection_dir / "tmp" / "inductor"))
        if compile_cache is not None and writable_cache:
            env["TORCHINDUCTOR_CACHE_DIR"] = str(compile_cache)
        elif compile_cache is not None:
            env["TRAINPERF_COMPILE_SEED"] = str(compile_cache)
        return launch, env
    binds = [*((p, p, "--ro-bind") for p in python_paths()), (Path(SITE), site, "--ro-bind"),
             (connection_dir, connection_dir, "--bind")]
    if compile_cache is not None and writable_cache:
        binds.append((Path("/tmp/inductor"), compile_cache, "--bind"))
    elif compile_cache is not None and compile_cache.is_dir():
        binds.append((Path(SEED), compile_cache, "--ro-bind"))
        env["TRAINPERF_COMPILE_SEED"] = SEED
    if replay is not None and writable_cache:
        binds.append((Path(REPLAY), replay, "--bind"))
    args = ["bwrap", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--die-with-parent", "--new-session"]
    if level == "userns":
        args.append("--unshare-user")
    else:  # keep only what setpriv needs to become the sandbox uid
        args += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    args += _system_binds() + ["--proc", "/proc", "--dev", "/dev",
                               "--perms", "1777", "--size", str(limits.disk_mb * 2**20), "--tmpfs", "/tmp",
                               "--perms", "1777", "--size", str(limits.disk_mb * 2**20),
                               "--tmpfs", "/dev/shm",
                               "--perms", "1777", "--dir", "/tmp/home",
                               "--perms", "1777", "--dir", "/tmp/work"]
    made: set[Path] = {Path("/tmp"), Path("/usr"), Path("/etc")}
    for target, source, mode in binds:
        for ancestor in _ancestors(target):
            if ancestor not in made:
                args += ["--perms", "0755", "--dir", str(ancestor)]
                made.add(ancestor)
        args += [mode, str(source), str(target)]
        made.add(target)
    args += ["--chdir", "/tmp/work", "--clearenv"]
    for key, value in env.items():
        args += ["--setenv", key, value]
    args.append("--")
    if level == "uid":
        args += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
                 "--no-new-privs", "--"]
    return args + launch, {}


def _probe(level: str, site: Path, uid: int | None) -> str:
    """'' when a kernel-like process starts at this level; otherwise the reason, one line."""
    folder = Path(tempfile.mkdtemp(prefix="tp-probe-"))
    try:
        if uid is not None:
            os.chown(folder, uid, uid)
        argv, env = kernel_argv(level, uid, site, folder, KernelLimits(), record=False)
        code = "import helpers, ipykernel, sys; assert not any('solutions' in p for p in sys.path)"
        argv = argv[:argv.index("-c") + 1] + [code]
        try:
            result = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                                    env={**os.environ, **env} if env else None)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{argv[0]} could not run ({exc})"
        if result.returncode != 0:
            lines = (result.stderr or result.stdout).strip().splitlines() or [f"exit {result.returncode}"]
            return lines[-1][:200]
        return ""
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def detect(site: Path, course_root: Path) -> Isolation:
    """The strongest isolation that works on this machine, with the cause when it is weaker."""
    if shutil.which("bwrap") is None:
        return Isolation("none", "bubblewrap (bwrap) is not installed; install it (Debian/Ubuntu: "
                                 "apt-get install bubblewrap)")
    shown = exposes(course_root)
    if shown is not None:
        return Isolation("none", f"the course checkout {course_root} lies inside {shown}, which the "
                                 "kernel needs; use a Python environment outside the checkout")
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            return Isolation("none", "setpriv (util-linux) is missing, so the sandbox cannot change uid")
        problem = _probe("uid", site, pick_uids(1)[0])
        if not problem:
            return Isolation("uid")
        return Isolation("none", f"bubblewrap failed as root: {problem}")
    problem = _probe("userns", site, None)
    if not problem:
        return Isolation("userns", "not root: submissions run in namespaces but under your own uid "
                                   "(no per-submission process cap)")
    return Isolation("none", f"not root, and bubblewrap cannot create a user namespace here: {problem}")


@dataclass
class Execution:
    records: dict[int, dict[str, Any]] = field(default_factory=dict)
    finished: bool = False  # the notebook client reported every cell
    timed_out: bool = False  # the notebook limit was hit
    start_error: str = ""  # the kernel never started
    seconds: float = 0.0
    log_tail: str = ""
    leftovers: int = 0  # processes of the slot's uid found after the run (should stay 0)


def _read_results(read_fd: int, result: Execution) -> None:
    with os.fdopen(read_fd, "rb") as source:
        while True:
            line = source.readline(MAX_RESULT_LINE + 1)
            if not line:
                return
            if len(line) > MAX_RESULT_LINE and not line.endswith(b"\n"):
                while line and not line.endswith(b"\n"):  # skip the rest of an oversized line
                    line = source.readline(MAX_RESULT_LINE)
                continue
            try:
                record = json.loads(line)
            except ValueError:  # not JSON, not UTF-8, or an integer of more digits than Python parses
                continue
            if not isinstance(record, dict):
                continue
            if record.get("done"):
                result.finished = True
            elif isinstance(record.get("index"), int):
                result.records[record["index"]] = record
            elif record.get("start_error"):
                result.start_error = str(record["start_error"])
            elif isinstance(record.get("kernel_pid"), int):
                result.records.setdefault(-1, {})["kernel_pid"] = record["kernel_pid"]


def _kill_group(pid: int | None) -> None:
    if not pid:
        return
    try:
        os.killpg(os.getpgid(pid), signal.SIGKILL)
    except OSError:
        pass


def execute(notebook: dict[str, Any], *, isolation: Isolation, uid: int | None, site: Path,
            cell_timeout: int, notebook_timeout: float, max_output: int, limits: KernelLimits,
            record: bool, scratch: Path, compile_cache: Path | None = None,
            writable_cache: bool = False, replay: Path | None = None,
            replay_table: Path | None = None, replay_exercises: dict[str, list[int]] | None = None
            ) -> Execution:
    """Run ``notebook`` in a fresh kernel in the sandbox; the cells' results, as they came.

    ``replay``: the reference run's folder for its trusted calls (with ``writable_cache``);
    ``replay_table``: a graded run's table of them, which the client serves
    (:mod:`trainperf.grading.replay`), with the exercises that block each exercised helper."""
    # a short path: the kernel's sockets live here and a socket path may not pass 107 bytes
    connection_dir = Path(tempfile.mkdtemp(prefix="tp-", dir="/tmp"))
    if uid is not None:
        os.chown(connection_dir, uid, uid)
    if isolation.level == "none":
        for sub in ("home", "tmp", "work"):
            (connection_dir / sub).mkdir()
    argv, env = kernel_argv(isolation.level, uid, site, connection_dir, limits, record,
                            compile_cache, writable_cache,
                            replay if writable_cache else replay_table)
    client_home = scratch / f"client-{secrets.token_hex(6)}"
    client_home.mkdir(parents=True)
    job = {"notebook": notebook, "kernel_argv": argv, "kernel_env": env, "kernel_uid": uid,
           "connection_dir": str(connection_dir), "cell_timeout": cell_timeout,
           "max_output": max_output,
           "cwd": str(connection_dir / "work" if isolation.level == "none" else client_home)}
    if replay is not None and writable_cache:
        job["replay_log"] = str(replay / "calls.pkl")
    elif replay_table is not None:
        job["replay_table"], job["replay_exercises"] = str(replay_table), replay_exercises or {}
    child_env = {key: os.environ[key] for key in ("PATH", "LANG", "LC_ALL") if key in os.environ}
    child_env.update(HOME=str(client_home), JUPYTER_RUNTIME_DIR=str(client_home),
                     JUPYTER_CONFIG_DIR=str(client_home), JUPYTER_DATA_DIR=str(client_home),
                     PYDEVD_DISABLE_FILE_VALIDATION="1", PYTHONDONTWRITEBYTECODE="1")
    read_fd, write_fd = os.pipe()
    command = [sys.executable, "-m", "trainperf.grading.sandbox", "--result-fd", str(write_fd)]
    result = Execution()
    log_path = client_home / "client.log"
    start = time.perf_counter()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                                pass_fds=(write_fd,), cwd=client_home, env=child_env,
                                start_new_session=True, preexec_fn=_cap_client_memory)
    os.close(write_fd)
    reader = threading.Thread(target=_read_results, args=(read_fd, result), daemon=True)
    reader.start()
    try:
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(job).encode())
        proc.stdin.close()
    except BrokenPipeError:
        pass
    try:
        proc.wait(timeout=notebook_timeout)
    except subprocess.TimeoutExpired:
        result.timed_out = True
    finally:
        _kill_group(proc.pid)
        proc.wait()
        reader.join(timeout=10)
        _kill_group(result.records.pop(-1, {}).get("kernel_pid"))  # the kernel's own session
        if uid is not None:
            result.leftovers = _reap(uid)
        shutil.rmtree(connection_dir, ignore_errors=True)
    result.seconds = time.perf_counter() - start
    try:
        result.log_tail = log_path.read_text(errors="replace")[-2000:]
    except OSError:
        pass
    shutil.rmtree(client_home, ignore_errors=True)
    return result


def _cap_client_memory() -> None:
    """The notebook client runs as the grader, outside the sandbox: its memory is capped too.
    Only the soft limit: the kernel it starts sets its own (larger) cap. (Runs in the forked
    child: it imports nothing.)"""
    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    soft = _CLIENT_MEMORY if hard == resource.RLIM_INFINITY else min(_CLIENT_MEMORY, hard)
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _reap(uid: int) -> int:
    """Processes of ``uid`` still alive a moment after the sandbox ended, killed (0 expected:
    the PID namespace takes every process with it; this is a second line of defence)."""
    deadline = time.monotonic() + 2.0
    while processes_of(uid) and time.monotonic() < deadline:
        time.sleep(0.05)  # the namespace is being torn down
    found = 0
    for _ in range(50):
        pids = processes_of(uid)
        if not pids:
            return found
        found = max(found, len(pids))
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.05)
    return found

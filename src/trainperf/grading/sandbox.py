"""The sandbox a submission's kernel runs in, built on bubblewrap, and one graded execution.

Only the learner's kernel runs in the sandbox. The notebook client that drives it
(:mod:`trainperf.grading.client`) and everything that scores it run as the grader, outside.

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

CPU, at every level: where the machine lets the grader make cgroups (cgroup v2 with the cpu
controller, or v1's cpu hierarchy — as root), each execution gets a cgroup of its own with equal
weight and a quota of :data:`CPU_QUOTA_CORES` core(s) (:class:`SubmissionCgroup`); the kernel
is placed in it before it starts, so every process it forks is too — ``setsid`` does not leave a
cgroup — and a fork storm shares one core with itself instead of taking the machine. Its
processes are killed through the cgroup when the run ends. Without cgroups, each kernel process
has a CPU-time limit (``RLIMIT_CPU``, the notebook limit) and runs at ``nice``
:data:`NICE_WITHOUT_CGROUP`; a storm of ``setsid`` processes can then still take a share of the
machine until the notebook limit ends it (see :func:`cgroup_support`).
"""

from __future__ import annotations

import json
import math
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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from helpers._wire import COMPILE_SEED_ENV, RECORD_ENV, REPLAY_CLIENT_ENV, REPLAY_FOLDER_ENV, REPLAY_WRITE_ENV

from .client import CLIENT_MEMORY_MB, peak_rss_kb

_CLIENT_MEMORY = CLIENT_MEMORY_MB * 2**20
SITE = "/opt/trainperf/site"  # where the read-only helpers copy appears in the sandbox
UID_RANGE = (1_000_000, 2_000_000_000)  # sandboxes run under uids no account uses
MAX_RESULT_LINE = 8 * 2**20  # one cell's result from the notebook client, serialised
# All the results of one notebook that this (the grading) process keeps. The client's own
# per-notebook caps (trainperf.grading.client: 4 MiB of records, 2,000,000 characters of text,
# each cell's 2,000-character error) stop an honest or hostile notebook well below it; this is
# the bound on what one execution can make the grading process hold even if they did not.
MAX_RESULT_BYTES_PER_NOTEBOOK = 32 * 2**20

# The kernel's first Python: set limits, keep '' and the working folder off sys.path, die
# with its parent, then become an IPython kernel. No file of the course is needed for this
# (SEED_ENV, LIMITS and NICE are filled in by kernel_argv).
_LAUNCH = """\
import ctypes, os, resource, shutil, sys
seed = os.environ.pop(SEED_ENV, "")
if seed and os.path.isdir(seed):  # the reference run's compiled kernels: start warm
    try:
        shutil.copytree(seed, os.environ["TORCHINDUCTOR_CACHE_DIR"], dirs_exist_ok=True)
    except OSError:
        pass
for name, value in LIMITS:
    if value:
        soft = value if name != "RLIMIT_CPU" else value - 1  # SIGXCPU first, SIGKILL a second later
        resource.setrlimit(getattr(resource, name), (soft, value))
if NICE:
    os.nice(NICE)
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

    memory_mib: int | None = 6144  # address space; None = no cap
    file_mib: int = 256  # largest file it may write
    disk_mib: int = 1024  # its private /tmp (and as much again for /dev/shm)
    processes: int = 256  # processes and threads of its uid (isolation level ``uid`` only)
    cpu_seconds: int | None = None  # CPU time of each of its processes (RLIMIT_CPU); None = none


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
    return [*args, "--ro-bind", "/etc", "/etc", "--ro-bind-try", "/sys", "/sys"]


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
    env = {
        "HOME": "/tmp/home",
        "TMPDIR": "/tmp",
        "PYTHONPATH": SITE,
        "MPLBACKEND": "Agg",
        "MPLCONFIGDIR": "/tmp/home",
        "IPYTHONDIR": "/tmp/home/.ipython",
        "LANG": "C.UTF-8",
        "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYDEVD_DISABLE_FILE_VALIDATION": "1",
        "TORCHINDUCTOR_CACHE_DIR": "/tmp/inductor",
        "JUPYTER_PLATFORM_DIRS": "1",
        "PYTHONHASHSEED": "0",
    }  # replay keys hash sets alike
    if record:
        env[RECORD_ENV] = "1"
    return env


SEED = "/opt/trainperf/compile-seed"  # where a read-only compile cache appears in the sandbox
REPLAY = "/opt/trainperf/replay"  # the reference run's trusted calls (helpers._grading._Replay)


def kernel_argv(
    level: str,
    uid: int | None,
    site: Path,
    connection_dir: Path,
    limits: KernelLimits,
    record: bool,
    compile_cache: Path | None = None,
    writable_cache: bool = False,
    replay: Path | None = None,
    nice: int = 0,
) -> tuple[list[str], dict[str, str]]:
    """(command that starts the kernel — ends with ``{connection_file}`` — and its environment).

    ``nice``: the kernel's niceness (used where no cgroup holds its CPU share).

    ``compile_cache``: torch.compile's on-disk cache of the reference run. The reference run
    writes it (``writable_cache``); a submission's kernel starts with a private copy of it, so
    compiling the teaching cells' code is warm and no kernel can change what another sees.
    """
    # see helpers._grading.removed_for_grading: the reference run writes its trusted calls to
    # ``replay`` (a folder); a graded kernel asks the grading client for them, so no table of
    # recorded results is ever inside its sandbox
    if replay is not None and writable_cache:
        env_replay = {REPLAY_FOLDER_ENV: str(replay) if level == "none" else REPLAY, REPLAY_WRITE_ENV: "1"}
    elif replay is not None:
        env_replay = {REPLAY_CLIENT_ENV: "1"}
    else:
        env_replay = {}
    rlimits = [("RLIMIT_CORE", 0), ("RLIMIT_FSIZE", limits.file_mib * 2**20)]
    if limits.memory_mib:
        rlimits.append(("RLIMIT_AS", limits.memory_mib * 2**20))
    if level == "uid":
        rlimits.append(("RLIMIT_NPROC", limits.processes))
    if limits.cpu_seconds:
        rlimits.append(("RLIMIT_CPU", max(2, limits.cpu_seconds)))
    code = (
        _LAUNCH.replace("SEED_ENV", repr(COMPILE_SEED_ENV))
        .replace("LIMITS", repr(rlimits))
        .replace("NICE", repr(int(nice)))
    )
    launch = [sys.executable, "-c", code, "{connection_file}"]
    env = {**kernel_env(record), **env_replay}
    if level == "none":
        env.update(
            HOME=str(connection_dir / "home"),
            TMPDIR=str(connection_dir / "tmp"),
            PYTHONPATH=str(site),
            MPLCONFIGDIR=str(connection_dir / "home"),
            IPYTHONDIR=str(connection_dir / "home" / ".ipython"),
            TORCHINDUCTOR_CACHE_DIR=str(connection_dir / "tmp" / "inductor"),
        )
        if compile_cache is not None and writable_cache:
            env["TORCHINDUCTOR_CACHE_DIR"] = str(compile_cache)
        elif compile_cache is not None:
            env[COMPILE_SEED_ENV] = str(compile_cache)
        return launch, env
    binds = [
        *((p, p, "--ro-bind") for p in python_paths()),
        (Path(SITE), site, "--ro-bind"),
        (connection_dir, connection_dir, "--bind"),
    ]
    if compile_cache is not None and writable_cache:
        binds.append((Path("/tmp/inductor"), compile_cache, "--bind"))
    elif compile_cache is not None and compile_cache.is_dir():
        binds.append((Path(SEED), compile_cache, "--ro-bind"))
        env[COMPILE_SEED_ENV] = SEED
    if replay is not None and writable_cache:
        binds.append((Path(REPLAY), replay, "--bind"))
    args = [
        "bwrap",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
    ]
    if level == "userns":
        args.append("--unshare-user")
    else:  # keep only what setpriv needs to become the sandbox uid
        args += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    args += [
        *_system_binds(),
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--perms",
        "1777",
        "--size",
        str(limits.disk_mib * 2**20),
        "--tmpfs",
        "/tmp",
        "--perms",
        "1777",
        "--size",
        str(limits.disk_mib * 2**20),
        "--tmpfs",
        "/dev/shm",
        "--perms",
        "1777",
        "--dir",
        "/tmp/home",
        "--perms",
        "1777",
        "--dir",
        "/tmp/work",
    ]
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
        args += [
            "setpriv",
            f"--reuid={uid}",
            f"--regid={uid}",
            "--clear-groups",
            "--inh-caps=-all",
            "--no-new-privs",
            "--",
        ]
    return args + launch, {}


def _probe(level: str, site: Path, uid: int | None) -> str:
    """'' when a kernel-like process starts at this level; otherwise the reason, one line."""
    folder = Path(tempfile.mkdtemp(prefix="tp-probe-"))
    try:
        if uid is not None:
            os.chown(folder, uid, uid)
        argv, env = kernel_argv(level, uid, site, folder, KernelLimits(), record=False)
        code = "import helpers, ipykernel, sys; assert not any('solutions' in p for p in sys.path)"
        argv = [*argv[: argv.index("-c") + 1], code]
        try:
            result = subprocess.run(
                argv, capture_output=True, text=True, timeout=120, env={**os.environ, **env} if env else None
            )
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
        return Isolation(
            "none",
            "bubblewrap (bwrap) is not installed; install it (Debian/Ubuntu: apt-get install bubblewrap)",
        )
    shown = exposes(course_root)
    if shown is not None:
        return Isolation(
            "none",
            f"the course checkout {course_root} lies inside {shown}, which the "
            "kernel needs; use a Python environment outside the checkout",
        )
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            return Isolation("none", "setpriv (util-linux) is missing, so the sandbox cannot change uid")
        problem = _probe("uid", site, pick_uids(1)[0])
        if not problem:
            return Isolation("uid")
        return Isolation("none", f"bubblewrap failed as root: {problem}")
    problem = _probe("userns", site, None)
    if not problem:
        return Isolation(
            "userns",
            "not root: submissions run in namespaces but under your own uid (no per-submission process cap)",
        )
    return Isolation("none", f"not root, and bubblewrap cannot create a user namespace here: {problem}")


# --- CPU: one cgroup per execution ------------------------------------------------------------

CPU_QUOTA_CORES = 1.0  # CPU one execution (its kernel, every process it forks, its client) may use
CPU_PERIOD_US = 100_000  # the quota's period (the kernel's default)
CPU_SHARES = 1024  # v1 cpu.shares of every execution: equal (v2: cpu.weight 100, the default)
PIDS_MARGIN = 16  # the pids cap is the process limit plus bubblewrap's own few processes
NICE_WITHOUT_CGROUP = 10  # the kernel's niceness where no cgroup holds its share
CGROUP_PREFIX = "trainperf-"  # trainperf-<grader pid>-<random>: a dead grader's are removed
# /bin/sh, not Python (milliseconds): writes its own pid into each cgroup.procs given before
# "--", then becomes the kernel command; the kernel and all it forks stay in those cgroups
_ENTER = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 111; shift; done; shift; exec "$@"'


@dataclass(frozen=True)
class CgroupSupport:
    """Where this machine lets the grader make executions' cgroups."""

    version: str  # "v2", "v1", or "" (none: see ``why``)
    cpu: Path | None = None  # the folder the executions' cgroups go in (cpu controller)
    pids: Path | None = None  # v1: the same in the pids hierarchy (v2: ``cpu``); None = no cap
    why: str = ""


_SUPPORT: list[CgroupSupport] = []
_SUPPORT_LOCK = threading.Lock()


def cgroup_support() -> CgroupSupport:
    """The cgroups this process can use for executions (decided once; ``TRAINPERF_CGROUPS=0``
    turns them off). Needs write access to a cgroup hierarchy with the cpu controller: as root,
    cgroup v2 with ``cpu`` in the root's ``cgroup.subtree_control``, or v1's cpu hierarchy."""
    if os.environ.get("TRAINPERF_CGROUPS", "1") == "0":
        return CgroupSupport("", why="turned off (TRAINPERF_CGROUPS=0)")
    with _SUPPORT_LOCK:
        if not _SUPPORT:
            _SUPPORT.append(_detect_cgroups())
    return _SUPPORT[0]


def _cgroup_mounts() -> list[tuple[str, Path, str, set[str]]]:
    """(fstype, mount point, the cgroup path at the mount's root, controllers) of cgroup mounts."""
    mounts = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        point = Path(fields[4].replace("\\040", " "))
        controllers = set(tail[2].split(",")) if tail[0] == "cgroup" else set()
        if tail[0] == "cgroup2":
            try:
                controllers = set((point / "cgroup.subtree_control").read_text().split())
            except OSError:
                continue
        mounts.append((tail[0], point, fields[3], controllers))
    return mounts


def _own_cgroup(controller: str) -> str:
    """This process's cgroup path in the hierarchy of ``controller`` ('' = v2)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return "/"
    for line in lines:
        _, names, path = line.split(":", 2)
        if (controller == "" and names == "") or (controller and controller in names.split(",")):
            return path
    return "/"


def _under(point: Path, mount_root: str, own: str) -> Path:
    """The folder of cgroup ``own`` in a hierarchy mounted at ``point`` (rooted at ``mount_root``)."""
    if mount_root != "/" and (own + "/").startswith(mount_root.rstrip("/") + "/"):
        own = own[len(mount_root.rstrip("/")) :]
    elif mount_root != "/":
        own = "/"
    return point / own.lstrip("/") if own.strip("/") else point


def _detect_cgroups() -> CgroupSupport:
    mounts = _cgroup_mounts()
    candidates: list[CgroupSupport] = []
    for kind, point, _root, controllers in mounts:
        if kind == "cgroup2" and "cpu" in controllers:  # the mount's root (processes stay outside it)
            candidates.append(CgroupSupport("v2", point, point if "pids" in controllers else None))
    v1_cpu = next(((p, r) for k, p, r, c in mounts if k == "cgroup" and "cpu" in c), None)
    if v1_cpu is not None:
        v1_pids = next(((p, r) for k, p, r, c in mounts if k == "cgroup" and "pids" in c), None)
        candidates.append(
            CgroupSupport(
                "v1",
                _under(*v1_cpu, _own_cgroup("cpu")),
                _under(*v1_pids, _own_cgroup("pids")) if v1_pids else None,
            )
        )
    if not candidates:
        return CgroupSupport("", why="no cgroup hierarchy with the cpu controller is mounted")
    problems = []
    for support in candidates:
        problem = _probe_cgroup(support)
        if not problem:
            _remove_stale(support)
            return support
        problems.append(f"{support.version} at {support.cpu}: {problem}")
    return CgroupSupport("", why="; ".join(problems))


def _probe_cgroup(support: CgroupSupport) -> str:
    """'' when an execution's cgroup can be made (and removed) here; otherwise why not."""
    try:
        group = SubmissionCgroup(support, processes=8)
    except OSError as exc:
        return f"{exc.strerror or exc} ({exc.filename or ''})"
    group.close()
    return ""


def _remove_stale(support: CgroupSupport) -> None:
    """The cgroups a grader that no longer runs left behind (killed before it could clean up)."""
    for parent in {support.cpu, support.pids} - {None}:
        assert parent is not None
        for folder in parent.glob(CGROUP_PREFIX + "*"):
            try:
                pid = int(folder.name[len(CGROUP_PREFIX) :].split("-")[0])
                os.kill(pid, 0)
                continue  # its grader still runs
            except (ValueError, PermissionError):
                continue
            except ProcessLookupError:
                pass
            _empty_and_remove([folder])


def _cgroup_pids(folders: list[Path]) -> set[int]:
    found: set[int] = set()
    for folder in folders:
        for procs in [folder / "cgroup.procs", *folder.glob("*/cgroup.procs")]:
            try:
                found.update(int(x) for x in procs.read_text().split())
            except (OSError, ValueError):
                pass
    return found


def _empty_and_remove(folders: list[Path], settle_s: float = 2.0) -> int:
    """Kill every process in ``folders`` (cgroups, with their leaves) and remove them; how many
    processes were still there after ``settle_s`` (the sandbox's own end takes them first)."""
    deadline = time.monotonic() + settle_s
    while _cgroup_pids(folders) and time.monotonic() < deadline:
        time.sleep(0.05)
    found = 0
    for folder in folders:  # v2 (Linux 5.14+): every process at once, forks included
        if (folder / "cgroup.kill").exists():
            try:
                (folder / "cgroup.kill").write_text("1")
            except OSError:
                pass
    for _ in range(100):  # kill what is listed until nothing is: a forking process is listed next
        pids = _cgroup_pids(folders)
        if not pids:
            break
        found = max(found, len(pids))
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.05)
    for folder in folders:
        for _ in range(40):  # an exiting process keeps its cgroup busy for a moment
            try:
                for leaf in [p for p in folder.iterdir() if p.is_dir()]:
                    leaf.rmdir()
                folder.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.05)
    return found


class SubmissionCgroup:
    """One execution's cgroup: a group with an equal CPU weight and a quota of
    :data:`CPU_QUOTA_CORES`, holding two leaves of equal weight: ``client`` (the notebook client)
    and ``kernel`` (the kernel and every process it starts, with a pids cap). The kernel's
    forks share the kernel's half of the quota whatever they do (``setsid`` included); the
    client stays responsive beside them. Raises OSError when it cannot be made."""

    def __init__(self, support: CgroupSupport, processes: int) -> None:
        assert support.cpu is not None
        name = f"{CGROUP_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        self.version = support.version
        self.group = support.cpu / name
        self.pids_group = support.pids / name if support.pids and support.version == "v1" else None
        self.folders = [self.group] + ([self.pids_group] if self.pids_group else [])
        quota = int(CPU_QUOTA_CORES * CPU_PERIOD_US)
        try:
            self.group.mkdir()
            if self.version == "v2":
                (self.group / "cpu.max").write_text(f"{quota} {CPU_PERIOD_US}")
                controllers = " ".join(f"+{c}" for c in ("cpu", "pids") if support.pids or c == "cpu")
                (self.group / "cgroup.subtree_control").write_text(controllers)
            else:
                (self.group / "cpu.shares").write_text(str(CPU_SHARES))
                (self.group / "cpu.cfs_period_us").write_text(str(CPU_PERIOD_US))
                (self.group / "cpu.cfs_quota_us").write_text(str(quota))
            for leaf in ("client", "kernel"):
                (self.group / leaf).mkdir()
            pids_max = str(processes + PIDS_MARGIN)
            if self.pids_group is not None:
                self.pids_group.mkdir()
                (self.pids_group / "pids.max").write_text(pids_max)
            elif self.version == "v2" and support.pids:
                (self.group / "kernel" / "pids.max").write_text(pids_max)
        except OSError:
            self.close()
            raise

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv``, started inside the kernel's cgroup(s): it is there before it runs anything."""
        procs = [str(self.group / "kernel" / "cgroup.procs")]
        if self.pids_group is not None:
            procs.append(str(self.pids_group / "cgroup.procs"))
        return ["/bin/sh", "-c", _ENTER, "trainperf-cgroup", *procs, "--", *argv]

    def add_client(self, pid: int) -> bool:
        try:
            (self.group / "client" / "cgroup.procs").write_text(str(pid))
            return True
        except OSError:
            return False

    def pids(self) -> set[int]:
        return _cgroup_pids(self.folders)

    def close(self) -> int:
        """Kill what is left in it and remove it; how many processes had to be killed."""
        return _empty_and_remove([f for f in self.folders if f.is_dir()])


@dataclass
class Execution:
    records: dict[int, dict[str, Any]] = field(default_factory=dict)
    finished: bool = False  # the notebook client reported every cell
    timed_out: bool = False  # the notebook limit was hit
    start_error: str = ""  # the kernel never started
    seconds: float = 0.0
    log_tail: str = ""
    leftovers: int = 0  # processes of the slot's uid (or its cgroup) found after the run (0 expected)
    cpu_cgroup: str = ""  # "v1" / "v2": the execution ran in a cgroup of its own; "" = not
    result_bytes: int = 0  # of the client's result lines, kept (at most MAX_RESULT_BYTES_PER_NOTEBOOK)
    client_maxrss_kb: int = 0  # the notebook client's peak resident memory (KiB), as it reported it
    grader_maxrss_kb: int = 0  # this (the grading) process's peak resident memory (KiB), after the run


def _read_results(read_fd: int, result: Execution) -> None:
    stopped = False  # past MAX_RESULT_BYTES_PER_NOTEBOOK: read on (the client must not block), keep nothing
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
                if isinstance(record.get("maxrss_kb"), int):
                    result.client_maxrss_kb = record["maxrss_kb"]
            elif isinstance(record.get("index"), int) and not stopped:
                if result.result_bytes + len(line) > MAX_RESULT_BYTES_PER_NOTEBOOK:
                    stopped = True  # this cell fails and no later cell counts, as in the client
                    limit = (
                        f"results (over the grading process's {MAX_RESULT_BYTES_PER_NOTEBOOK // 2**20} MiB)"
                    )
                    result.records[record["index"]] = {
                        "index": record["index"],
                        "status": "error",
                        "ename": "NotebookCapReached",
                        "evalue": f"the notebook passed its cap on {limit}",
                        "text": "",
                        "notebook_cap": limit,
                    }
                    continue
                result.records[record["index"]] = record
                result.result_bytes += len(line)
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


def execute(
    notebook: dict[str, Any],
    *,
    isolation: Isolation,
    uid: int | None,
    site: Path,
    cell_timeout: int,
    notebook_timeout: float,
    max_output: int,
    limits: KernelLimits,
    record: bool,
    scratch: Path,
    compile_cache: Path | None = None,
    writable_cache: bool = False,
    replay: Path | None = None,
    replay_table: Path | None = None,
    replay_exercises: dict[str, list[int]] | None = None,
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
    result = Execution()
    # CPU: a cgroup of its own where the machine allows it (see SubmissionCgroup); otherwise a
    # lower priority. Each kernel process may use the notebook limit's seconds of CPU at most.
    cgroup, support = None, cgroup_support()
    if support.version:
        try:
            cgroup = SubmissionCgroup(support, limits.processes)
            result.cpu_cgroup = support.version
        except OSError:
            cgroup = None
    if limits.cpu_seconds is None and math.isfinite(notebook_timeout):
        limits = replace(limits, cpu_seconds=math.ceil(notebook_timeout))
    argv, env = kernel_argv(
        isolation.level,
        uid,
        site,
        connection_dir,
        limits,
        record,
        compile_cache,
        writable_cache,
        replay if writable_cache else replay_table,
        nice=0 if cgroup else NICE_WITHOUT_CGROUP,
    )
    if cgroup is not None:
        argv = cgroup.wrap(argv)
    client_home = scratch / f"client-{secrets.token_hex(6)}"
    client_home.mkdir(parents=True)
    job = {
        "notebook": notebook,
        "kernel_argv": argv,
        "kernel_env": env,
        "kernel_uid": uid,
        "connection_dir": str(connection_dir),
        "cell_timeout": cell_timeout,
        "max_output": max_output,
        "cwd": str(connection_dir / "work" if isolation.level == "none" else client_home),
    }
    if replay is not None and writable_cache:
        job["replay_log"] = str(replay / "calls.pkl")
    elif replay_table is not None:
        job["replay_table"], job["replay_exercises"] = str(replay_table), replay_exercises or {}
    child_env = {key: os.environ[key] for key in ("PATH", "LANG", "LC_ALL") if key in os.environ}
    child_env.update(
        HOME=str(client_home),
        JUPYTER_RUNTIME_DIR=str(client_home),
        JUPYTER_CONFIG_DIR=str(client_home),
        JUPYTER_DATA_DIR=str(client_home),
        PYDEVD_DISABLE_FILE_VALIDATION="1",
        PYTHONDONTWRITEBYTECODE="1",
    )
    read_fd, write_fd = os.pipe()
    command = [sys.executable, "-m", "trainperf.grading.client", "--result-fd", str(write_fd)]
    log_path = client_home / "client.log"
    start = time.perf_counter()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=subprocess.STDOUT,
            pass_fds=(write_fd,),
            cwd=client_home,
            env=child_env,
            start_new_session=True,
            preexec_fn=_cap_client_memory,
        )
    os.close(write_fd)
    if cgroup is not None:  # before it reads its job: it starts the kernel only after this
        cgroup.add_client(proc.pid)
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
        if cgroup is not None:  # what escaped the process groups (setsid) and the uid sweep
            result.leftovers = max(result.leftovers, cgroup.close())
        shutil.rmtree(connection_dir, ignore_errors=True)
    result.seconds = time.perf_counter() - start
    result.grader_maxrss_kb = peak_rss_kb()
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

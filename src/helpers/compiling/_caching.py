"""Cold and warm starts of a compiled training step, each in a fresh process.

A new Python process has none of torch.compile's in-memory state, so what it reuses can only
come from disk: Inductor's **FX graph cache** (the generated code of a graph), the
**AOTAutograd cache** (the traced and partitioned forward and backward graphs, which points
at FX graph cache entries) and, both bundled into one blob, the **mega-cache**
(``torch.compiler.save_cache_artifacts()`` / ``load_cache_artifacts()``). Both caches live
in ``TORCHINDUCTOR_CACHE_DIR``; the PyTorch recipes *Compile Time Caching in torch.compile*
and *Compile Time Caching Configuration* describe them.

Every start here is a new process forked from a server that has imported torch and nothing
else (``multiprocessing``'s "forkserver"), so the import of torch, the same in every arm, is
not timed, and no compiled state leaks from the notebook into a start. Three arms:

* **cold**: an empty cache folder, as on a fresh machine;
* **warm**: a folder an earlier start of the same step filled;
* **mega-cache**: an empty folder into which the start first loads the artifacts that an
  earlier cold start saved with ``save_cache_artifacts`` (how one ships caches to another
  machine).

Each pair of arms is timed by :func:`helpers.bench.compare_speed` in interleaved pairs, with
the 95 % interval and the verdict. The untimed warm-up start of the warm arm is the start
that fills its folder.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .._validate import count
from .._validate import flag as _flag
from ..bench import SpeedComparison, compare_speed
from ..i18n import tr

#: The arms, in the order they are reported.
ARMS = ("cold", "warm", "mega-cache")


@dataclass(frozen=True)
class Start:
    """What one fresh process did to reach the end of its first compiled step."""

    arm: str
    seconds: float  # load artifacts (mega-cache arm) + probe + compile + first forward and backward
    load_s: float  # load_cache_artifacts, mega-cache arm only
    probe_s: float  # Inductor's vector-instruction probe (0 when the CPU's flags are trusted)
    cxx_s: float  # of the compile: the C++ compiler, probe apart (0 on a GPU, or where nothing was built)
    fx_hits: int
    fx_misses: int
    aot_hits: int
    aot_misses: int


@dataclass
class CacheStarts:
    """Starts of the arms, and the comparisons that decide what each cache saves."""

    device: str
    size: int
    backward: bool
    trusted_isa: bool
    warm: SpeedComparison  # cold start (baseline) against warm start (tuned)
    mega: SpeedComparison | None  # cold start against mega-cache start, when timed
    artifact_bytes: int
    starts: list[Start] = field(default_factory=list)

    def by_arm(self, arm: str) -> list[Start]:
        return [s for s in self.starts if s.arm == arm]

    def format(self) -> str:
        step = "forward and backward" if self.backward else "forward"
        lines = [
            f"first compiled call ({step}, {self.size} x {self.size}) on {self.device}, "
            "each start in a fresh process:"
        ]
        for arm in ARMS:
            starts = self.by_arm(arm)
            if not starts:
                continue
            last, cxx = starts[-1], _median([s.cxx_s for s in starts])
            lines.append(
                f"  {_arm_name(arm):<17} FX graph cache {last.fx_hits} hit(s), {last.fx_misses} miss(es); "
                f"AOTAutograd cache {last.aot_hits} hit(s), {last.aot_misses} miss(es); C++ compiler "
                f"{cxx:.2f} s (median)"
            )
        for speed in (self.warm, self.mega):
            if speed is None:
                continue
            for name, run in zip(speed.names, (speed.baseline, speed.tuned), strict=True):
                lines.append(
                    f"  {name}: median {run.median:.2f} s (min {run.min:.2f}, max {run.max:.2f}, "
                    f"n={len(run.samples)})"
                )
            lines.append(f"  {speed}")
        if self.mega is None and self.by_arm("mega-cache"):
            lines.append(
                "  mega-cache start: one start, to show its cache hits; not timed against the others"
            )
        if self.artifact_bytes:
            lines.append(f"  mega-cache artifacts: {self.artifact_bytes / 2**10:.0f} KiB")
        if self.device == "cpu" and self.trusted_isa:
            lines.append("  vector-instruction probe: skipped (cpp.vec_isa_ok = True trusts the CPU's flags)")
        elif self.device == "cpu":
            share = sorted(s.probe_s / s.seconds for s in self.by_arm("cold") if s.seconds > 0)
            lines.append(
                f"  vector-instruction probe: median {_median(share):.0%} of a cold start "
                f"(min {share[0]:.0%}, max {share[-1]:.0%}, n={len(share)})"
            )
        return "\n".join(lines)


def _arm_name(arm: str) -> str:
    """How a start of ``arm`` is named in the report, in the learner's language."""
    return {"cold": tr("cold start"), "warm": tr("warm start"), "mega-cache": tr("mega-cache start")}[arm]


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    return (ordered[(n - 1) // 2] + ordered[n // 2]) / 2 if n else float("nan")


def _step(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The step every start compiles: a matrix multiply and a GELU, forward and backward."""
    return torch.nn.functional.gelu(x @ w).square().mean()


def _one_start(
    conn: Any, arm: str, folder: str, artifacts: str, size: int, device: str, trust: bool, backward: bool
) -> None:
    """The body of one fresh process: set up the cache folder, compile, run one step, report."""
    try:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = folder  # read when Inductor first needs it
        import torch._inductor.config as config
        from torch._dynamo import utils

        config.compile_threads = 1  # no pool of compile workers to start and stop in each process
        config.cpp.vec_isa_ok = True if trust else None
        began = time.perf_counter()
        load_s = 0.0
        if arm == "mega-cache":
            torch.compiler.load_cache_artifacts(Path(artifacts).read_bytes())
            load_s = time.perf_counter() - began
        probe_s, probe_cxx = 0.0, 0.0
        if device == "cpu" and not trust:
            from torch._inductor.cpu_vec_isa import pick_vec_isa

            start = time.perf_counter()
            pick_vec_isa()  # what the first CPU compile does anyway; timed on its own here
            probe_s = time.perf_counter() - start
            probe_cxx = sum(utils.compilation_time_metrics.get("compile_file", []))  # its test builds
        torch.manual_seed(0)
        x = torch.randn(size, size, device=device)
        w = torch.randn(size, size, device=device, requires_grad=backward)
        loss = torch.compile(_step)(x, w)
        if backward:
            loss.backward()
        if device != "cpu":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - began
        if arm == "cold" and not os.path.exists(artifacts):
            saved = torch.compiler.save_cache_artifacts()
            if saved is not None:
                Path(artifacts).write_bytes(saved[0])
        inductor, aot = utils.counters["inductor"], utils.counters["aot_autograd"]
        cxx = sum(utils.compilation_time_metrics.get("compile_file", [])) - probe_cxx
        conn.send(
            Start(
                arm,
                seconds,
                load_s,
                probe_s,
                cxx,
                inductor["fxgraph_cache_hit"],
                inductor["fxgraph_cache_miss"],
                aot["autograd_cache_hit"],
                aot["autograd_cache_miss"],
            )
        )
    except BaseException as exc:  # noqa: BLE001 — the parent raises it with its message
        conn.send(f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}")
    finally:
        conn.close()


def _context() -> Any:
    """A forkserver that has imported torch (fork where there is no forkserver, spawn on Windows)."""
    methods = multiprocessing.get_all_start_methods()
    method = "forkserver" if "forkserver" in methods else "spawn"
    ctx = multiprocessing.get_context(method)
    if method == "forkserver":
        # torch.compile's own modules too: importing them is the same in every arm, not a compile
        ctx.set_forkserver_preload(["torch", "torch._dynamo", "torch._inductor.compile_fx", __name__])
    return ctx


class _Starter:
    """Runs one start of an arm in a fresh process and keeps what it reported."""

    def __init__(self, root: str, size: int, device: str, trust: bool, backward: bool) -> None:
        self.root, self.size, self.device, self.trust, self.backward = root, size, device, trust, backward
        self.ctx = _context()
        self.artifacts = os.path.join(root, "mega-cache.bin")
        self.warm_folder = os.path.join(root, "warm")
        self.runs = 0
        self.starts: list[Start] = []

    def folder(self, arm: str) -> str:
        if arm == "warm":
            return self.warm_folder
        self.runs += 1
        return os.path.join(self.root, f"{arm}-{self.runs}")  # a new, empty folder each time

    def __call__(self, arm: str) -> Start:
        receive, send = self.ctx.Pipe(duplex=False)
        args = (
            send,
            arm,
            self.folder(arm),
            self.artifacts,
            self.size,
            self.device,
            self.trust,
            self.backward,
        )
        process = self.ctx.Process(target=_one_start, args=args)
        process.start()
        send.close()
        try:
            got = receive.recv()
        except EOFError:
            got = f"the process ended with exit code {process.exitcode} before it reported"
        process.join()
        if isinstance(got, str):
            raise RuntimeError(f"a {arm} start failed in its own process: {got}")
        self.starts.append(got)
        if arm != "warm":
            shutil.rmtree(os.path.join(self.root, f"{arm}-{self.runs}"), ignore_errors=True)
        return got


def cache_starts(
    *,
    pairs: int = 6,
    mega_pairs: int = 0,
    size: int = 64,
    backward: bool = True,
    trust_vec_isa: bool = True,
    device: str = "cpu",
    max_seconds: float = 120.0,
) -> CacheStarts:
    """Time cold and warm starts of a small compiled step (module notes) in ``pairs``
    interleaved pairs (6 is the fewest that gives a verdict); then cold against mega-cache
    starts in ``mega_pairs`` pairs, or, with ``mega_pairs=0``, one mega-cache start that shows
    its cache hits and is not timed against anything. ``backward``: the step runs forward and
    backward (two graphs and two kernels), else forward only (one of each: a cheaper
    start). ``trust_vec_isa``: skip Inductor's vector-instruction probe in every start
    (``cpp.vec_isa_ok = True``); with False each start runs the probe, as on a fresh machine,
    and the report gives its share of a cold start. ``max_seconds`` bounds each comparison.
    Inductor needs a C++ compiler on a CPU (see :func:`pick_backend`); without one the first
    start raises what Inductor raised."""
    _flag(backward=backward, trust_vec_isa=trust_vec_isa)
    (pairs,) = count(3, pairs=pairs)
    (mega_pairs,) = count(0, mega_pairs=mega_pairs)
    (size,) = count(size=size)
    if 0 < mega_pairs < 3:
        raise ValueError(f"mega_pairs must be 0 (one start, not timed) or at least 3, got {mega_pairs}")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but no CUDA device is available here; use device='cpu'")
    root = tempfile.mkdtemp(prefix="compile-starts-")
    starter = _Starter(root, size, device, trust_vec_isa, backward)
    common: dict[str, Any] = dict(
        device="cpu",  # the timer: wall clock around each process, from fork to the step's end
        threads=1,
        warmup=1,  # the warm arm's untimed first start is the one that fills its folder
        number=1,
        max_seconds=max_seconds,
    )

    def cold_against(arm: str, n: int) -> Any:
        return compare_speed(
            lambda: starter("cold"),
            lambda: starter(arm),
            names=(_arm_name("cold"), _arm_name(arm)),
            min_pairs=n,
            max_pairs=n,
            **common,
        )

    try:
        warm = cold_against("warm", pairs)
        mega = None
        if mega_pairs:
            mega = cold_against("mega-cache", mega_pairs)
        else:
            starter("mega-cache")
        size_bytes = os.path.getsize(starter.artifacts) if os.path.exists(starter.artifacts) else 0
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return CacheStarts(device, size, backward, trust_vec_isa, warm, mega, size_bytes, starter.starts)

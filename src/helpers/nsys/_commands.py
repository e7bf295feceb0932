"""nsys command lines: profile, stats, export, and reading a profile command back."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._validate import flag as _flag

DEFAULT_TRACE = ("cuda", "nvtx", "osrt", "cublas", "cudnn")  # one process
DEFAULT_REPORTS = ("cuda_gpu_kern_sum", "cuda_api_sum", "cuda_gpu_mem_time_sum", "nvtx_sum")


# =========================================================================== command lines


@dataclass(frozen=True)
class Command:
    """A command line: ``argv`` for ``subprocess``, ``shell`` to paste into a terminal."""

    argv: list[str]

    @property
    def shell(self) -> str:
        return shlex.join(self.argv)

    def pretty(self) -> str:
        """The shell form with one option per line (a ``bash -c`` wrapper on lines of its own)."""
        if self.argv[-3:-1] == ["bash", "-c"] and "'" not in self.argv[-1]:
            body = self.argv[-1].replace("; then ", "; then\n    ").replace("; else ", "\n  else\n    ")
            body = body.replace("; fi", "\n  fi")
            return f"{shlex.join(self.argv[:-1])} '\n  {body}'"
        parts = [shlex.quote(a) for a in self.argv]
        lines: list[str] = []
        for part in parts:
            if lines and not part.startswith("-"):
                lines[-1] += " " + part
            else:
                lines.append(part)
        return " \\\n  ".join(lines)

    def __str__(self) -> str:
        return self.shell


_PLAIN_WORD = re.compile(r"[A-Za-z0-9_=,./:%{}+@-]+")


def _words(argv: Sequence[str]) -> str:
    """argv as words for a shell script: quoted only where needed (``%q{RANK}`` stays as is)."""
    return " ".join(a if _PLAIN_WORD.fullmatch(a) else shlex.quote(a) for a in argv)


def nsys_available() -> bool:
    """True when an ``nsys`` executable is on PATH."""
    return shutil.which("nsys") is not None


def _trace_option(trace: Iterable[str] | None) -> str:
    # the same with several ranks: nsys's --trace has no "nccl" value (nsys profile --help lists
    # cuda, nvtx, osrt, cublas, cudnn, mpi, ucx, ...); NCCL marks its collectives with its own NVTX
    # ranges, which "nvtx" records, and "cuda" records its kernels
    names = list(trace) if trace is not None else list(DEFAULT_TRACE)
    bad = [t for t in names if not re.fullmatch(r"[a-z0-9-]+", t)]
    if bad or not names:
        raise ValueError(f"--trace needs names like 'cuda', 'nvtx', 'osrt'; got {names!r}.")
    return "--trace=" + ",".join(dict.fromkeys(names))


def supports_trace(name: str, nsys: str = "nsys") -> bool | None:
    """Whether this machine's ``nsys profile --help`` lists ``name`` among the ``--trace``
    values (``python-gil`` or ``syscall`` are missing from older Nsight Systems releases); None
    without nsys."""
    if shutil.which(nsys) is None:
        return None
    done = subprocess.run([nsys, "profile", "--help"], capture_output=True, text=True, timeout=60)
    text = done.stdout + done.stderr
    section = text[text.find("--trace") :][:2000] if "--trace" in text else text
    return re.search(rf"\b{re.escape(name)}\b", section) is not None


#: ``--sample`` values (Nsight Systems User Guide, "CLI Profile Command Switch Options").
SAMPLE_VALUES = ("none", "process-tree", "system-wide")
#: ``--cuda-graph-trace`` values (same page): "graph" traces each graph launch as a whole, with
#: the least overhead (the default where the driver supports it); "node" traces every node of
#: the graph (each kernel), at a cost the guide calls possibly significant.
CUDA_GRAPH_TRACE_VALUES = ("graph", "node")
#: ``--gpu-metrics-devices`` names (User Guide, "GPU Metrics": none|all|cuda-visible|<index>[,...]);
#: ``none`` is nsys's default, so the builder leaves the option out instead.
GPU_METRICS_DEVICE_NAMES = ("all", "cuda-visible")
#: ``--gpu-metrics-frequency`` bounds in Hz (User Guide, "GPU Metrics": 10..200000, default 10000).
GPU_METRICS_FREQUENCY_HZ = (10, 200_000)
#: ``--python-backtrace`` values (User Guide, profile switches: cuda, none; default none).
PYTHON_BACKTRACE_VALUES = ("cuda", "none")


def _gpu_devices(value: str | int | Sequence[int]) -> str:
    """The value of ``--gpu-metrics-devices``: a name from the guide or GPU indices."""
    if isinstance(value, str):
        if value in GPU_METRICS_DEVICE_NAMES:
            return value
        raise ValueError(
            f"gpu_metrics_devices={value!r}: use 'all', 'cuda-visible', a GPU index (0) or a list "
            "of indices ([0, 1]); `nsys profile --gpu-metrics-devices=help` lists this machine's GPUs."
        )
    indices = [value] if isinstance(value, int) else list(value)
    if not indices or any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in indices):
        raise ValueError(
            f"gpu_metrics_devices={value!r}: GPU indices are whole numbers >= 0, e.g. 0 or [0, 1]."
        )
    return ",".join(str(i) for i in dict.fromkeys(indices))


def extra_options(
    *,
    cuda_graph_trace: str | None = None,
    gpu_metrics_devices: str | int | Sequence[int] | None = None,
    gpu_metrics_frequency: int | None = None,
    python_backtrace: str | None = None,
    cuda_memory_usage: bool = False,
    sample: str = "none",
) -> list[str]:
    """The optional ``nsys profile`` switches, checked against the Nsight Systems User Guide
    (https://docs.nvidia.com/nsight-systems/UserGuide/index.html, "CLI Profile Command Switch
    Options" and "GPU Metrics"). Each appears only when asked for.

    - ``cuda_graph_trace``: ``"node"`` shows each kernel of a CUDA graph replay;
      ``"graph"`` (nsys's default) one block per replay.
    - ``gpu_metrics_devices`` / ``gpu_metrics_frequency``: sample the GPU's hardware counters
      (SM active, tensor-core active, DRAM bandwidth, ...) at 10 to 200000 Hz.
    - ``python_backtrace="cuda"``: the Python call stack of each CUDA API call; the guide
      requires ``--cudabacktrace`` and CPU sampling, so it adds ``--cudabacktrace=all`` and
      refuses ``sample="none"``.
    - ``cuda_memory_usage=True``: GPU memory used over time (``--cuda-memory-usage=true``).
    """
    _flag(cuda_memory_usage=cuda_memory_usage)
    out: list[str] = []
    if cuda_graph_trace is not None:
        if cuda_graph_trace not in CUDA_GRAPH_TRACE_VALUES:
            raise ValueError(
                f"cuda_graph_trace={cuda_graph_trace!r}: use 'node' (each kernel of a graph replay) "
                "or 'graph' (one block per replay, nsys's default)."
            )
        out.append(f"--cuda-graph-trace={cuda_graph_trace}")
    if gpu_metrics_devices is not None:
        out.append(f"--gpu-metrics-devices={_gpu_devices(gpu_metrics_devices)}")
    if gpu_metrics_frequency is not None:
        low, high = GPU_METRICS_FREQUENCY_HZ
        if gpu_metrics_devices is None:
            raise ValueError(
                "gpu_metrics_frequency needs gpu_metrics_devices (e.g. 'all'): no GPU is sampled without it."
            )
        if (
            isinstance(gpu_metrics_frequency, bool)
            or not isinstance(gpu_metrics_frequency, int)
            or not low <= gpu_metrics_frequency <= high
        ):
            raise ValueError(
                f"gpu_metrics_frequency={gpu_metrics_frequency!r}: give a whole number of Hz "
                f"from {low} to {high} (nsys's default is 10000)."
            )
        out.append(f"--gpu-metrics-frequency={gpu_metrics_frequency}")
    if python_backtrace is not None:
        if python_backtrace not in PYTHON_BACKTRACE_VALUES:
            raise ValueError(
                f"python_backtrace={python_backtrace!r}: use 'cuda' (a Python stack per CUDA call) or 'none'."
            )
        if python_backtrace == "cuda":
            if sample == "none":
                raise ValueError(
                    "python_backtrace='cuda' needs CPU sampling (the User Guide says so): "
                    "pass sample='process-tree' as well."
                )
            out += ["--python-backtrace=cuda", "--cudabacktrace=all"]
    if cuda_memory_usage:
        out.append("--cuda-memory-usage=true")
    return out


def profile_command(
    script: str,
    *script_args: str,
    output: str = "trace_step",
    nproc_per_node: int = 1,
    per_rank: bool = True,
    capture_range: str | None = "cudaProfilerApi",
    nvtx_capture: str | None = None,
    trace: Iterable[str] | None = None,
    python: str = "python",
    sample: str = "none",
    ranks: Sequence[int] | None = None,
    nvtx_domain: str | None = None,
    cuda_graph_trace: str | None = None,
    gpu_metrics_devices: str | int | Sequence[int] | None = None,
    gpu_metrics_frequency: int | None = None,
    python_backtrace: str | None = None,
    cuda_memory_usage: bool = False,
) -> Command:
    """``nsys profile`` for ``python script args``.

    - ``nproc_per_node=1``: ``nsys profile <options> python script``.
    - ``nproc_per_node>1`` and ``per_rank=True``: torchrun starts one ``nsys profile`` per rank
      (``torchrun --no-python nsys profile ...``), each writing ``<output>_rank%q{RANK}`` — nsys
      fills in ``%q{RANK}`` from the rank's own environment, so every rank gets its own report.
    - ``ranks=(0, 5)``: profile only those ranks (rank 0 and a slow one, say); the others run
      ``python script`` without nsys, through a small ``bash -c`` wrapper that reads ``$RANK``.
    - ``per_rank=False``: nsys wraps torchrun and follows its child processes into ONE report
      (``%q{RANK}`` would not help there: RANK is set only in the processes torchrun starts).
    - ``trace``: default ``cuda,nvtx,osrt,cublas,cudnn``, with one rank or several: NCCL's
      collectives show as the NVTX ranges NCCL emits (``nvtx``) and as its kernels (``cuda``);
      nsys has no ``nccl`` trace value. :func:`supports_trace` checks a value on this nsys.
    - ``capture_range="cudaProfilerApi"``: capture only between cudaProfilerStart and Stop;
      ``"nvtx"``: capture only inside the NVTX range named ``nvtx_capture`` (``--nvtx-capture``;
      the range's name is an unregistered string, so ``NSYS_NVTX_PROFILER_REGISTER_ONLY=0``);
      both with ``--capture-range-end=stop``. ``None`` captures the whole run.
      ``nvtx_domain="trainer"`` matches the range only in that NVTX domain
      (``--nvtx-capture=step@trainer``; ``"*"``: any domain).

    Options asked for by keyword (each one only when asked; see :func:`extra_options`):
    ``cuda_graph_trace`` (``"graph"`` or ``"node"``), ``gpu_metrics_devices`` (``"all"``,
    ``"cuda-visible"``, a GPU index or a list of them) with ``gpu_metrics_frequency`` (Hz),
    ``python_backtrace="cuda"`` (needs CPU sampling, e.g. ``sample="process-tree"``) and
    ``cuda_memory_usage=True``.
    """
    _flag(per_rank=per_rank, cuda_memory_usage=cuda_memory_usage)
    if isinstance(nproc_per_node, bool) or not isinstance(nproc_per_node, int) or nproc_per_node < 1:
        raise ValueError(f"nproc_per_node={nproc_per_node!r}: need a whole number of processes >= 1.")
    if not output or any(ch.isspace() for ch in output):
        raise ValueError(f"output={output!r}: give a report name without spaces, e.g. 'trace_step'.")
    multi = nproc_per_node > 1
    if sample not in SAMPLE_VALUES:
        raise ValueError(f"sample={sample!r}: use one of {', '.join(map(repr, SAMPLE_VALUES))}.")
    options = [_trace_option(trace), f"--sample={sample}"]
    options += extra_options(
        cuda_graph_trace=cuda_graph_trace,
        gpu_metrics_devices=gpu_metrics_devices,
        gpu_metrics_frequency=gpu_metrics_frequency,
        python_backtrace=python_backtrace,
        cuda_memory_usage=cuda_memory_usage,
        sample=sample,
    )
    if nvtx_capture is not None and capture_range != "nvtx":
        raise ValueError("nvtx_capture is used only with capture_range='nvtx'.")
    if nvtx_domain is not None and capture_range != "nvtx":
        raise ValueError("nvtx_domain is used only with capture_range='nvtx' and nvtx_capture='<range>'.")
    if capture_range is not None:
        if capture_range not in ("cudaProfilerApi", "nvtx"):
            raise ValueError(f"capture_range={capture_range!r}: use 'cudaProfilerApi', 'nvtx' or None.")
        options.append(f"--capture-range={capture_range}")
        if capture_range == "nvtx":
            if not nvtx_capture or any(ch.isspace() or ch == "@" for ch in nvtx_capture):
                raise ValueError(
                    "capture_range='nvtx' needs nvtx_capture='<range name>' (e.g. 'step'), "
                    "the NVTX range whose start and end bound the capture; give its domain "
                    "as nvtx_domain='<domain>', not after an '@'."
                )
            target = nvtx_capture
            if nvtx_domain is not None:
                # User Guide, "CLI Profile Command Switch Options", --nvtx-capture: the values
                # are range@domain, range (the default domain) and range@* (any domain)
                if not nvtx_domain or any(ch.isspace() or ch == "@" for ch in nvtx_domain):
                    raise ValueError(
                        f"nvtx_domain={nvtx_domain!r}: give the domain's name without spaces or '@' "
                        "(e.g. 'trainer'), or '*' for any domain."
                    )
                target = f"{nvtx_capture}@{nvtx_domain}"
            options += [f"--nvtx-capture={target}", "--env-var=NSYS_NVTX_PROFILER_REGISTER_ONLY=0"]
        options.append("--capture-range-end=stop")
    options.append("--force-overwrite=true")
    program = [python, script, *script_args]
    if ranks is not None:
        if not multi or not per_rank:
            raise ValueError(
                "ranks=... picks ranks of a torchrun job: give nproc_per_node > 1 and per_rank=True."
            )
        chosen = sorted(set(ranks))
        if not chosen or any(
            isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < nproc_per_node for r in chosen
        ):
            raise ValueError(f"ranks={ranks!r}: give ranks between 0 and {nproc_per_node - 1}.")
        test = " || ".join(f'[ "$RANK" = {r} ]' for r in chosen)
        nsys_part = _words(["nsys", "profile", *options, f"--output={output}_rank%q{{RANK}}", *program])
        wrapper = f"if {test}; then exec {nsys_part}; else exec {_words(program)}; fi"
        return Command(
            ["torchrun", f"--nproc_per_node={nproc_per_node}", "--no-python", "bash", "-c", wrapper]
        )
    if multi and per_rank:
        options.append(f"--output={output}_rank%q{{RANK}}")
        argv = [
            "torchrun",
            f"--nproc_per_node={nproc_per_node}",
            "--no-python",
            "nsys",
            "profile",
            *options,
            *program,
        ]
    elif multi:
        options.append(f"--output={output}")
        argv = [
            "nsys",
            "profile",
            *options,
            "torchrun",
            f"--nproc_per_node={nproc_per_node}",
            script,
            *script_args,
        ]
    else:
        options.append(f"--output={output}")
        argv = ["nsys", "profile", *options, *program]
    return Command(argv)


def stats_command(report: str, reports: Sequence[str] = DEFAULT_REPORTS, fmt: str = "csv") -> Command:
    """``nsys stats --report a,b,c --format csv <report>`` (the tables go to the console).

    ``report`` is the ``.nsys-rep`` (or its ``.sqlite`` export). Run ``nsys stats
    --help-reports`` to see which report names your nsys version knows.
    """
    if not reports:
        raise ValueError("stats_command needs at least one report name, e.g. 'cuda_gpu_kern_sum'.")
    if fmt not in ("csv", "column", "table", "tsv", "json"):
        raise ValueError(f"fmt={fmt!r}: use 'csv' (what read_stats_csv reads), 'column', 'tsv' or 'json'.")
    return Command(["nsys", "stats", "--report", ",".join(reports), "--format", fmt, str(report)])


def export_command(report: str, output: str | None = None) -> Command:
    """``nsys export --type sqlite`` of a ``.nsys-rep`` (what :func:`read_sqlite` reads)."""
    out = output or str(Path(report).with_suffix(".sqlite"))
    return Command(
        ["nsys", "export", "--type", "sqlite", "--force-overwrite=true", f"--output={out}", str(report)]
    )


# Short nsys options and the long ones they stand for (nsys takes a short option's value after a space).
_SHORT_OPTIONS = {
    "-t": "--trace",
    "-s": "--sample",
    "-o": "--output",
    "-f": "--force-overwrite",
    "-c": "--capture-range",
    "-p": "--nvtx-capture",
    "-e": "--env-var",
    "-x": "--stop-on-exit",
    "-w": "--show-output",
    "-y": "--delay",
    "-d": "--duration",
}
# torchrun options that take a value (``--nproc_per_node 8`` or ``--nproc_per_node=8``)
_TORCHRUN_VALUED = {
    "--nproc_per_node",
    "--nproc-per-node",
    "--nnodes",
    "--node_rank",
    "--node-rank",
    "--master_addr",
    "--master-addr",
    "--master_port",
    "--master-port",
    "--rdzv_endpoint",
    "--rdzv-endpoint",
    "--rdzv_backend",
    "--rdzv-backend",
    "--rdzv_id",
    "--rdzv-id",
    "--max_restarts",
    "--max-restarts",
    "--log_dir",
    "--log-dir",
    "--role",
}


def _torchrun_options(argv: list[str], i: int, out: dict[str, Any]) -> int:
    """Read torchrun's options from argv[i]; returns the index of the first non-option."""
    while i < len(argv) and argv[i].startswith("-"):
        key, eq, value = argv[i].partition("=")
        if key in _TORCHRUN_VALUED and not eq:
            value, i = (argv[i + 1] if i + 1 < len(argv) else ""), i + 1
        if key in ("--nproc_per_node", "--nproc-per-node"):
            try:
                out["nproc_per_node"] = int(value)
            except ValueError:
                raise ValueError(f"torchrun --nproc_per_node needs a number, got {value!r}") from None
        i += 1
    return i


def parse_profile_command(argv: Sequence[str]) -> dict[str, Any]:
    """Split an ``nsys profile`` command line into its parts, so two can be compared.

    Returns ``launcher`` ("torchrun" when torchrun starts nsys, "nsys" otherwise),
    ``nproc_per_node`` (or None), ``options`` (dict by long option name; ``--trace`` as a
    frozenset), ``program`` (what nsys runs) and ``wraps_torchrun``. Equivalent spellings
    parse the same: ``-t cuda,nvtx`` and ``--trace=cuda,nvtx``; ``--nproc_per_node 8``,
    ``--nproc_per_node=8`` and ``--nproc-per-node=8``.
    """
    argv = [str(a) for a in argv]
    if not argv:
        raise ValueError("Empty command line.")
    out: dict[str, Any] = {"launcher": argv[0], "nproc_per_node": None, "wraps_torchrun": False}
    i = 0
    if argv[0] == "torchrun":
        i = _torchrun_options(argv, 1, out)
    if argv[i : i + 2] != ["nsys", "profile"]:
        raise ValueError(f"Not an nsys profile command: {shlex.join(argv)!r}")
    i += 2
    options: dict[str, Any] = {}
    while i < len(argv) and argv[i].startswith("-"):
        key, eq, value = argv[i].partition("=")
        key = _SHORT_OPTIONS.get(key, key)
        if not eq:  # "--opt value" / "-t value" form
            if i + 1 >= len(argv):
                raise ValueError(f"nsys option {argv[i]} has no value.")
            value, i = argv[i + 1], i + 1
        options[key] = frozenset(value.split(",")) if key == "--trace" else value
        i += 1
    out["options"], out["program"] = options, argv[i:]
    if out["program"][:1] == ["torchrun"]:
        out["wraps_torchrun"] = True
        _torchrun_options(out["program"], 1, out)
    return out

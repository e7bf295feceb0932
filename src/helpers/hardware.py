"""The course's one table of hardware figures, GPU detection, and measuring this device.

Every peak here is a DENSE figure in decimal units (1 TFLOP/s = 1e12 FLOP/s,
1 TB/s = 1e12 B/s). NVIDIA datasheets print tensor-core figures "with sparsity" (2:4
structured sparsity, marked with an asterisk); training GEMMs are dense, so where a
datasheet gives only the sparse figure the table holds half of it, and says so in ``note``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch

from ._validate import UnknownName, unknown
from ._validate import flag as _flag
from .bench import Measurement, measure, resolve_device

TERA = 1e12
GIGA = 1e9

#: Canonical dtype keys used throughout the course.
DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32,
    "tf32": torch.float32,  # stored as fp32; only the tensor-core math is reduced
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
    "fp8": torch.float8_e4m3fn,
}


@dataclass(frozen=True)
class DeviceSpec:
    """Datasheet figures for one accelerator."""

    name: str
    peak_flops: Mapping[str, float]  # dense FLOP/s per dtype key
    memory_bandwidth: float  # B/s
    memory_gb: float
    source: str
    note: str = ""
    aliases: tuple[str, ...] = ()
    l2_cache_mb: float | None = None  # on-chip L2 cache, MB (decimal); None where not in the table

    def peak(self, dtype: str | torch.dtype) -> float:
        """Dense peak FLOP/s for ``dtype`` (``"bf16"``, ``torch.bfloat16``, ...)."""
        key = dtype_key(dtype)
        if key not in self.peak_flops:
            have = ", ".join(self.peak_flops)
            raise KeyError(
                f"{self.name} has no {key} peak in its datasheet (it lists: {have}); "
                "pick one of those dtypes."
            )
        return self.peak_flops[key]

    def ridge_point(self, dtype: str | torch.dtype) -> float:
        """Arithmetic intensity (FLOP/B) where this device's two roofs meet."""
        return self.peak(dtype) / self.memory_bandwidth


def _spec(
    name,
    fp32,
    bw_gb_s,
    mem_gb,
    source,
    *,
    tf32=None,
    fp16=None,
    bf16=None,
    fp8=None,
    note="",
    aliases=(),
    l2_mb=None,
) -> DeviceSpec:
    peaks = {"fp32": fp32 * TERA}
    for key, value in (("tf32", tf32), ("fp16", fp16), ("bf16", bf16), ("fp8", fp8)):
        if value is not None:
            peaks[key] = value * TERA
    return DeviceSpec(name, peaks, bw_gb_s * GIGA, mem_gb, source, note, tuple(aliases), l2_mb)


_SPARSE_NOTE = "Datasheet tensor figures are with sparsity (*); dense = half, as stored here."
_A100_L2 = " L2 cache: 40 MB (NVIDIA A100 Tensor Core GPU Architecture whitepaper, 2020)."
_H100_L2 = " L2 cache: 50 MB (NVIDIA H100 Tensor Core GPU Architecture whitepaper, 2022)."

#: The table. Figures in TFLOP/s (dense) and GB/s as printed, converted to SI units.
DEVICES: dict[str, DeviceSpec] = {
    s.name: s
    for s in [
        _spec(
            "T4",
            8.1,
            320,
            16,
            "NVIDIA T4 Tensor Core GPU datasheet (2019)",
            fp16=65,
            note="Turing: FP16 tensor cores only; no TF32, BF16 or FP8.",
            aliases=("Tesla T4",),
        ),
        _spec(
            "V100 SXM2",
            15.7,
            900,
            32,
            "NVIDIA Tesla V100 GPU datasheet (2020), SXM2 column",
            fp16=125,
            note="Volta: FP16 tensor cores only.",
            aliases=("V100-SXM2",),
        ),
        _spec(
            "V100 PCIe",
            14.0,
            900,
            32,
            "NVIDIA Tesla V100 GPU datasheet (2020), PCIe column",
            fp16=112,
            note="Volta: FP16 tensor cores only.",
            aliases=("V100-PCIE",),
        ),
        _spec(
            "A10G",
            31.52,
            600,
            24,
            "No public NVIDIA datasheet for this AWS-only part; AWS EC2 G5 figures as "
            "compared in Baseten, 'NVIDIA A10 vs A10G for ML model inference' (2023)",
            fp16=70,
            bf16=70,
            note="TF32 peak not published for the A10G.",
        ),
        _spec(
            "L4",
            30.3,
            300,
            24,
            "NVIDIA L4 Tensor Core GPU datasheet (2023)",
            tf32=60,
            fp16=121,
            bf16=121,
            fp8=242.5,
            note=_SPARSE_NOTE,
        ),
        _spec(
            "A100 40GB SXM",
            19.5,
            1555,
            40,
            "NVIDIA A100 Tensor Core GPU datasheet (2021), A100 40GB SXM column",
            tf32=156,
            fp16=312,
            bf16=312,
            note="Ampere: no FP8." + _A100_L2,
            aliases=("A100 40GB", "A100-SXM4-40GB"),
            l2_mb=40,
        ),
        _spec(
            "A100 80GB SXM",
            19.5,
            2039,
            80,
            "NVIDIA A100 Tensor Core GPU datasheet (2021), A100 80GB SXM column",
            tf32=156,
            fp16=312,
            bf16=312,
            note="Ampere: no FP8." + _A100_L2,
            aliases=("A100-SXM4-80GB",),
            l2_mb=40,
        ),
        _spec(
            "A100 80GB PCIe",
            19.5,
            1935,
            80,
            "NVIDIA A100 Tensor Core GPU datasheet (2021), A100 80GB PCIe column",
            tf32=156,
            fp16=312,
            bf16=312,
            note="Ampere: no FP8." + _A100_L2,
            aliases=("A100-PCIE-80GB",),
            l2_mb=40,
        ),
        _spec(
            "H100 SXM",
            67,
            3350,
            80,
            "NVIDIA H100 Tensor Core GPU datasheet (2023), H100 SXM column",
            tf32=494.5,
            fp16=989.5,
            bf16=989.5,
            fp8=1979,
            note=_SPARSE_NOTE + _H100_L2,
            aliases=("H100 80GB HBM3", "H100-SXM5-80GB"),
            l2_mb=50,
        ),
        _spec(
            "H100 PCIe",
            51,
            2000,
            80,
            "NVIDIA H100 Tensor Core GPU datasheet (2023), H100 PCIe column",
            tf32=378,
            fp16=756.5,
            bf16=756.5,
            fp8=1513,
            note=_SPARSE_NOTE + _H100_L2,
            l2_mb=50,
        ),
        _spec(
            "H100 NVL",
            60,
            3900,
            94,
            "NVIDIA H100 Tensor Core GPU datasheet (2024), H100 NVL column (figures per GPU)",
            tf32=417.5,
            fp16=835.5,
            bf16=835.5,
            fp8=1670.5,
            note=_SPARSE_NOTE,
        ),
        _spec(
            "H200",
            67,
            4800,
            141,
            "NVIDIA H200 Tensor Core GPU datasheet (2024), H200 SXM column",
            tf32=494.5,
            fp16=989.5,
            bf16=989.5,
            fp8=1979,
            note=_SPARSE_NOTE,
            aliases=("H200 SXM", "NVIDIA H200"),
        ),
        _spec(
            "GH200 96GB",
            67,
            4000,
            96,
            "NVIDIA GH200 Grace Hopper Superchip datasheet (2024), 96GB HBM3 column (the GPU part)",
            tf32=494.5,
            fp16=989.5,
            bf16=989.5,
            fp8=1979,
            note=_SPARSE_NOTE,
        ),
        _spec(
            "GH200 144GB",
            67,
            4900,
            144,
            "NVIDIA GH200 Grace Hopper Superchip datasheet (2024), 144GB HBM3e column (the GPU part)",
            tf32=494.5,
            fp16=989.5,
            bf16=989.5,
            fp8=1979,
            note=_SPARSE_NOTE,
        ),
        _spec(
            "L40S",
            91.6,
            864,
            48,
            "NVIDIA L40S GPU datasheet (2023)",
            tf32=183,
            fp16=362.05,
            bf16=362.05,
            fp8=733,
            note="The datasheet prints dense | sparse tensor figures; the dense ones are stored.",
        ),
        _spec(
            "B200",
            75,
            7700,
            180,
            "NVIDIA GB200 NVL72 datasheet, table 'Individual Blackwell GPU Specifications', HGX B200 "
            "column (180 GB HBM3E, 7.7 TB/s, FP32 75 TFLOPS; an HGX B200 board holds 8 such GPUs, "
            "'up to 1.4 TB')",
            tf32=1100,
            fp16=2250,
            bf16=2250,
            fp8=4500,
            note=_SPARSE_NOTE + " FP4 (Blackwell) is not a dtype of this table.",
        ),
    ]
}


#: Host links, bytes/s in one direction. PCIe x16: 8, 16 and 32 GT/s per lane with 128b/130b
#: encoding (PCI-SIG, PCI Express Base Specification 3.0, 4.0 and 5.0); real host-device copies
#: reach less. NVLink-C2C: 900 GB/s both directions together (NVIDIA GH200 Grace Hopper
#: Superchip datasheet, 2024), so 450 GB/s one way.
HOST_LINKS = {
    "PCIe 3.0 x16": 16 * 8e9 * 128 / 130 / 8,
    "PCIe 4.0 x16": 16 * 16e9 * 128 / 130 / 8,
    "PCIe 5.0 x16": 16 * 32e9 * 128 / 130 / 8,
    "NVLink-C2C (GH200)": 450e9,
}

#: Host memory, bytes/s at the channels' transfer rate (reads and writes share it; real code
#: reaches less). DDR5-4800: 4800 MT/s × 8 bytes per 64-bit channel (JEDEC JESD79-5); the Intel
#: Xeon Platinum 8480C of a DGX H100 has 8 channels per socket (Intel ARK, Xeon Platinum 8480+;
#: NVIDIA DGX H100 User Guide: two sockets). Grace: 500 GB/s of LPDDR5X (NVIDIA GH200 datasheet).
HOST_MEMORY = {
    "DDR5-4800 x 8 channels (one Xeon 8480C socket)": 8 * 4800e6 * 8,
    "Grace LPDDR5X (GH200)": 500e9,
}


@dataclass(frozen=True)
class Interconnect:
    """A GPU-to-GPU link for the chapter 10 model (:mod:`helpers.distributed._scale`).

    ``bandwidth``: bytes/s per GPU in ONE direction, from the datasheet named in ``source``.
    ``alpha_s``: the latency of one ring message. NOT a datasheet figure: an ASSUMED default,
    of the order of the per-hop latencies in NCCL's own ring cost model (src/graph/tuning.cc,
    e.g. about 3.4 µs per NVLink hop for its Simple protocol), more over a network. Pass your
    own (``alpha_s=``) or fit one from measurements (``CollectiveTable.fit``).
    """

    bandwidth: float
    alpha_s: float
    source: str


#: GPU-to-GPU links. Datasheets print NVLink as both directions added together; the table
#: holds half. InfiniBand rates are per port and direction (400 Gb/s = 50 GB/s), with one
#: port per GPU as in NVIDIA's DGX systems.
INTERCONNECTS = {
    "NVLink 3 (A100 SXM)": Interconnect(
        300e9, 3e-6, "NVIDIA A100 datasheet (2021): NVLink 600 GB/s per GPU, both directions"
    ),
    "NVLink 4 (H100 SXM)": Interconnect(
        450e9, 3e-6, "NVIDIA H100 datasheet (2023): NVLink 900 GB/s per GPU (SXM), both directions"
    ),
    "NVLink 5 (B200)": Interconnect(
        900e9,
        3e-6,
        "NVIDIA DGX B200 datasheet (2024): 1.8 TB/s NVLink per GPU (14.4 TB/s for 8), both directions",
    ),
    "InfiniBand HDR 200 Gb/s": Interconnect(
        25e9, 10e-6, "NVIDIA DGX A100 datasheet: 8 single-port ConnectX-6 200 Gb/s HDR, one per GPU"
    ),
    "InfiniBand NDR 400 Gb/s": Interconnect(
        50e9, 10e-6, "NVIDIA DGX H100 datasheet: 8 single-port ConnectX-7 400 Gb/s NDR, one per GPU"
    ),
}


def _normalise(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower().replace("nvidia", "").replace("tesla", ""))


class DeviceNameError(UnknownName):
    """A device name the table does not hold, or one that names several parts (a KeyError
    and a ValueError, as every :class:`~helpers._validate.UnknownName`)."""


def list_devices() -> list[str]:
    """Names of the devices in the table."""
    return list(DEVICES)


def get_device(name: str) -> DeviceSpec:
    """Look a device up by its name or an alias, ignoring case, spaces and dashes.

    A name that fits several parts ("H100": SXM, PCIe or NVL) is an error that lists them:
    their peaks and bandwidths differ, so the table never guesses.
    """
    if not isinstance(name, str) or not name.strip():
        raise DeviceNameError(f"give a device name such as 'H100 SXM', got {name!r}")
    wanted = _normalise(name)
    for spec in DEVICES.values():
        if wanted in {_normalise(n) for n in (spec.name, *spec.aliases)}:
            return spec
    similar = [
        spec.name
        for spec in DEVICES.values()
        if any(_normalise(n).startswith(wanted) for n in (spec.name, *spec.aliases))
    ]
    if len(similar) > 1:
        raise DeviceNameError(
            f"The name {name!r} fits several devices: {', '.join(similar)}. "
            "Their peaks differ: pick one by its full name."
        )
    raise unknown("device", name, DEVICES, near=similar[0] if similar else None, error=DeviceNameError)


def match_gpu_name(cuda_name: str, total_memory_bytes: float | None = None) -> DeviceSpec | None:
    """Map a CUDA device name (``torch.cuda.get_device_name()``) to a table entry, or None."""
    n = cuda_name.upper()
    big = "80GB" in n or (total_memory_bytes is not None and total_memory_bytes > 50e9)
    if "GH200" in n:  # before H200: "NVIDIA GH200 480GB" contains "H200"
        large = total_memory_bytes is not None and total_memory_bytes > 120e9
        return DEVICES["GH200 144GB" if large or "144" in n else "GH200 96GB"]
    if "H200" in n:
        return DEVICES["H200"]
    if "H100" in n:
        if "NVL" in n:
            return DEVICES["H100 NVL"]
        return DEVICES["H100 PCIe" if "PCIE" in n else "H100 SXM"]
    if re.search(r"\bB200\b", n):
        return DEVICES["B200"]
    if "A100" in n:
        if big:
            return DEVICES["A100 80GB PCIe" if "PCIE" in n else "A100 80GB SXM"]
        return DEVICES["A100 40GB SXM"]
    if "A10G" in n:
        return DEVICES["A10G"]
    if re.search(r"\bL40S\b", n):
        return DEVICES["L40S"]
    if re.search(r"\bL4\b", n):
        return DEVICES["L4"]
    if re.search(r"\bT4\b", n):
        return DEVICES["T4"]
    if "V100" in n:
        return DEVICES["V100 PCIe" if "PCIE" in n else "V100 SXM2"]
    return None


def detect_gpu() -> DeviceSpec | None:
    """The table entry of the current CUDA GPU; None on CPU or for a GPU not in the table."""
    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    return match_gpu_name(props.name, props.total_memory)


def _not_a_dtype(value: object) -> str:
    """The line for a dtype given as something other than a name or a torch.dtype."""
    forms = (
        "a name ('fp32', 'tf32', 'fp16', 'bf16', 'fp8', or 'float32', 'bfloat16', ...) "
        "or a torch.dtype (torch.float32, torch.bfloat16, ...)"
    )
    if isinstance(value, torch.Tensor):
        return f"dtype must be {forms}, got a tensor: pass its dtype (x.dtype)"
    return f"dtype must be {forms}, got {type(value).__name__} {value!r:.60}"


def dtype_key(dtype: str | torch.dtype) -> str:
    """``torch.bfloat16`` or ``"bfloat16"`` or ``"bf16"`` -> ``"bf16"``."""
    if isinstance(dtype, torch.dtype):
        for key, value in DTYPES.items():
            if value == dtype and key != "tf32":
                return key
        if dtype == torch.float8_e5m2:
            return "fp8"
        raise unknown("dtype", dtype, DTYPES)
    if not isinstance(dtype, str):
        raise TypeError(_not_a_dtype(dtype))
    aliases = {
        "float32": "fp32",
        "float": "fp32",
        "float16": "fp16",
        "half": "fp16",
        "bfloat16": "bf16",
        "float8": "fp8",
        "e4m3": "fp8",
        "e5m2": "fp8",
    }
    key = aliases.get(dtype.lower(), dtype.lower())
    if key not in DTYPES:
        raise unknown("dtype", dtype, DTYPES)
    return key


def bytes_per_element(dtype: str | torch.dtype) -> int:
    """Storage bytes of one element: fp32/tf32 4, fp16/bf16 2, fp8 1."""
    return {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1}[dtype_key(dtype)]


NOISY = 0.5  # a (max - min) / median spread above this makes a measured roof worth a warning


@dataclass
class MeasuredDevice:
    """Achieved figures on the current device: its empirical roofline.

    A roof is a best case, so each figure comes from the FASTEST timed run: other work on a
    shared machine only ever slows a run down. The medians stay in ``gemm_runs`` / ``copy_run``.
    """

    device: str
    name: str
    gemm_n: int
    gemm_flops: dict[str, float] = field(default_factory=dict)  # best achieved FLOP/s per dtype
    gemm_runs: dict[str, Measurement] = field(default_factory=dict)
    copy_bytes: int = 0
    copy_bandwidth: float = 0.0  # best achieved B/s (read + write)
    copy_run: Measurement | None = None
    copy_note: str = ""  # the buffer's size against the last-level cache: which memory it measured

    def summary(self) -> str:
        lines = [f"Measured on {self.name} ({self.device}), fastest of the timed runs after warm-up:"]
        for key, flops in self.gemm_flops.items():
            run = self.gemm_runs[key]
            lines.append(
                f"  GEMM {self.gemm_n}^3 {key:>4}: {flops / TERA:8.3f} TFLOP/s "
                f"(best of {len(run.samples)}: {run.min * 1e3:.2f} ms; median "
                f"{run.median * 1e3:.2f} ms, spread {run.spread:.0%})"
            )
        if self.copy_run is not None:
            lines.append(
                f"  copy {self.copy_bytes / 2**21:.0f} MiB buffer: "
                f"{self.copy_bandwidth / GIGA:8.1f} GB/s (read + write; best of "
                f"{len(self.copy_run.samples)}, spread {self.copy_run.spread:.0%})"
            )
            lines += [f"    ({note})" for note in self.copy_note.splitlines()]
        lines += [f"  WARNING: {w}" for w in self.warnings()]
        return "\n".join(lines)

    def warnings(self) -> list[str]:
        """Why these roofs may be too low: timed runs that spread widely (a busy machine)."""
        runs = [(f"the {self.gemm_n}^3 {k} GEMM", r) for k, r in self.gemm_runs.items()]
        if self.copy_run is not None:
            runs.append(("the copy", self.copy_run))
        return [
            f"{what} runs spread {run.spread:.0%} around their median: other work shared "
            "this machine, so this roof may be too low; rerun on a quiet machine"
            for what, run in runs
            if run.spread > NOISY
        ]


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    import platform

    return f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


_SYS_CACHE = "/sys/devices/system/cpu/cpu0/cache"
ASSUMED_LLC_BYTES = 32 * 2**20  # used, and said, when the OS does not report the cache
LLC_MULTIPLE = 8  # a copy this many times the last-level cache measures main memory
#: The most last-level cache we believe per CPU that shares it. Real CPUs have at most about
#: 12 MiB per core (AMD's 3D V-Cache: 96 MiB for 8 cores); a virtual machine may report its
#: host's cache, or a made-up size, to a few virtual CPUs (one reported 480 MiB for 2).
PLAUSIBLE_LLC_PER_CPU = 32 * 2**20
#: The copy's two buffers (source and destination) take at most this share of the memory
#: available, so that measuring never pushes a small machine into swapping.
COPY_MEMORY_SHARE = 0.25
_MEMINFO = "/proc/meminfo"
_CGROUP_ROOT = "/sys/fs/cgroup"
_SELF_CGROUP = "/proc/self/cgroup"


def _size_bytes(text: str) -> int:
    """``"32768K"`` / ``"1M"`` / ``"512"`` (sysfs cache sizes) -> bytes."""
    text = text.strip().upper()
    scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale


def _cpu_count(cpu_list: str) -> int:
    """How many CPUs a sysfs CPU list names: ``"0-3,8-11"`` -> 8, ``"0"`` -> 1."""
    total = 0
    for part in cpu_list.strip().split(","):
        if part:
            first, _, last = part.partition("-")
            total += int(last or first) - int(first) + 1
    return total


def last_level_cache(device: str | torch.device = "cpu", sysfs: str = _SYS_CACHE) -> tuple[int | None, str]:
    """(bytes, where the figure came from) of the last-level cache in front of ``device``'s memory.

    CPU: the highest-level data or unified cache Linux lists in sysfs for CPU 0: one cache
    instance (one socket's or one core complex's L3), not the machine's total. A size above
    :data:`PLAUSIBLE_LLC_PER_CPU` per CPU sharing it (a virtual machine's figure) is not
    believed: that bound is used instead, and the source says so. GPU: the L2 cache torch
    reports. ``(None, reason)`` where neither is known (the copy size then assumes
    :data:`ASSUMED_LLC_BYTES` and says so).
    """
    dev = resolve_device(device)
    if dev.type == "cuda":
        size = getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 0)
        return (
            (int(size), "the GPU's L2 cache (torch.cuda.get_device_properties)")
            if size
            else (None, "torch does not report this GPU's L2 cache size")
        )
    import glob
    import os

    best: tuple[int, int, str] | None = None
    for folder in glob.glob(os.path.join(sysfs, "index*")):
        try:
            with open(os.path.join(folder, "level")) as f:
                level = int(f.read())
            with open(os.path.join(folder, "type")) as f:
                kind = f.read().strip()
            with open(os.path.join(folder, "size")) as f:
                size = _size_bytes(f.read())
        except (OSError, ValueError):
            continue
        if kind in ("Data", "Unified") and (best is None or level > best[0]):
            best = (level, size, folder)
    if best is None:
        return None, "the OS does not report the CPU caches (no sysfs cache entries)"
    level, size, folder = best
    try:
        with open(os.path.join(folder, "shared_cpu_list")) as f:
            sharers = _cpu_count(f.read())
    except (OSError, ValueError):
        sharers = 0  # not listed: the size cannot be checked against the CPUs that share it
    if sharers and size > PLAUSIBLE_LLC_PER_CPU * sharers:
        bound = PLAUSIBLE_LLC_PER_CPU * sharers
        return bound, (
            f"the CPU's L{level} cache (Linux sysfs reports {size / 2**20:g} MiB, "
            f"{size / sharers / 2**20:.3g} MiB per CPU that shares it: more than "
            f"{PLAUSIBLE_LLC_PER_CPU // 2**20} MiB per CPU, so {bound // 2**20} MiB is assumed)"
        )
    return size, f"the CPU's L{level} cache (Linux sysfs)"


def _read_int(path: str) -> int | None:
    """The integer in a one-line file (a cgroup setting), None when absent or not a number."""
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _cgroup_headroom(root: str, self_cgroup: str) -> int | None:
    """Bytes this process's memory cgroup may still take (its limit less the memory it uses,
    page cache it can drop not counted); None when there is no limit or no cgroup to read."""
    import os

    try:
        with open(self_cgroup) as f:
            entries = [line.strip().split(":", 2) for line in f if line.count(":") >= 2]
    except OSError:
        entries = []
    v2 = [path for hid, _, path in entries if hid == "0"]
    v1 = [path for _, names, path in entries if "memory" in names.split(",")]
    candidates = [
        (os.path.join(root, p.lstrip("/")), "memory.max", "memory.current", "inactive_file") for p in v2
    ] + [
        (
            os.path.join(root, "memory", p.lstrip("/")),
            "memory.limit_in_bytes",
            "memory.usage_in_bytes",
            "total_inactive_file",
        )
        for p in v1
    ]
    candidates += [
        (root, "memory.max", "memory.current", "inactive_file"),
        (
            os.path.join(root, "memory"),
            "memory.limit_in_bytes",
            "memory.usage_in_bytes",
            "total_inactive_file",
        ),
    ]
    for folder, limit_file, usage_file, cache_key in candidates:
        limit, usage = (
            _read_int(os.path.join(folder, limit_file)),
            _read_int(os.path.join(folder, usage_file)),
        )
        if limit is None or usage is None:
            continue
        if limit >= 2**60:  # cgroup v1 writes "no limit" as a huge number
            return None
        dropped = 0
        try:
            with open(os.path.join(folder, "memory.stat")) as f:
                stat = dict(line.split()[:2] for line in f if len(line.split()) >= 2)
            dropped = int(stat.get(cache_key, 0))
        except (OSError, ValueError):
            pass
        return max(0, limit - max(0, usage - dropped))
    return None


def available_memory(
    meminfo: str = _MEMINFO, cgroup_root: str = _CGROUP_ROOT, self_cgroup: str = _SELF_CGROUP
) -> tuple[int | None, str]:
    """(bytes, where the figure came from) of host memory a new buffer can take without
    swapping: Linux's ``MemAvailable`` estimate, or less where this process's cgroup (a
    container's memory limit) leaves less; else free physical memory from ``os.sysconf``;
    ``(None, reason)`` where the OS says neither."""
    import os

    found: tuple[int, str] | None = None
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    found = int(line.split()[1]) * 1024, "MemAvailable in /proc/meminfo"
                    break
    except (OSError, ValueError, IndexError):
        pass
    if found is None:
        try:
            found = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "free memory (os.sysconf)"
        except (AttributeError, ValueError, OSError):
            pass
    headroom = _cgroup_headroom(cgroup_root, self_cgroup)
    if headroom is not None and (found is None or headroom < found[0]):
        found = headroom, "the memory limit of this container (cgroup) less what it uses"
    if found is None:
        return None, "the OS does not say how much memory is available"
    return found


def _ratio(mib: int, size: float) -> str:
    """``mib`` MiB as a multiple of ``size`` bytes, the way the copy note writes it: ``"8"``."""
    return f"{mib * 2**20 / size:.3g}"


def main_memory_copy_mib(
    device: str | torch.device = "cpu",
    least_mib: int = 0,
    available: tuple[int | None, str] | None = None,
) -> tuple[int, str]:
    """MiB of a copy buffer large enough to measure main memory, not a cache, with a note
    saying which bound set its size.

    It is :data:`LLC_MULTIPLE` times the last-level cache (at least ``least_mib``), unless
    the two buffers of the copy would then take more than :data:`COPY_MEMORY_SHARE` of the
    memory available: then the memory bounds it, and a second line of the note says so (and,
    if the buffer is then under twice the cache, that the copy may partly stay in the cache).
    ``available`` is ``(bytes, source)`` of the device's free memory; by default the host's
    (:func:`available_memory`) on a CPU, and no bound elsewhere (:func:`measure_device`
    passes a GPU's free memory).
    """
    dev = resolve_device(device)
    size, source = last_level_cache(dev)
    if size is None:
        size, source = ASSUMED_LLC_BYTES, f"an assumed {ASSUMED_LLC_BYTES // 2**20} MiB cache ({source})"
    wanted = max(least_mib, -(-LLC_MULTIPLE * size // 2**20))
    if available is None:
        available = available_memory() if dev.type == "cpu" else (None, "")
    free, free_source = available
    bound = int(free * COPY_MEMORY_SHARE / 2) // 2**20 if free is not None else None
    mib = wanted if bound is None or wanted <= bound else max(1, bound)
    if mib >= 2 * size / 2**20:
        first = (
            f"{mib} MiB is {_ratio(mib, size)}x {source} of {size / 2**20:g} MiB, so the copy "
            "reads and writes main memory"
        )
    else:
        first = (
            f"{mib} MiB is only {_ratio(mib, size)}x {source} of {size / 2**20:g} MiB, so part of the "
            "copy may stay in the cache and the bandwidth read too high"
        )
    if free is None or mib == wanted:
        return mib, first
    return mib, (
        f"{first}\nbounded by the memory available, not by the cache: {_ratio(wanted, size)}x the "
        f"cache needs two buffers of {wanted} MiB, and the two may take at most "
        f"{COPY_MEMORY_SHARE:.0%} of the {free // 2**20} MiB available ({free_source})"
    )


def measure_device(
    device: str | torch.device = "auto",
    dtypes: Sequence[str] | None = None,
    gemm_n: int | None = None,
    copy_mib: int | None = None,
    quick: bool = True,
) -> MeasuredDevice:
    """Measure achieved GEMM FLOP/s per dtype and copy bandwidth on ``device``.

    GEMM: ``gemm_n``-cubed matmul, 2·n³ FLOPs per call. Copy: ``dst.copy_(src)`` of
    ``copy_mib`` MiB (default: :data:`LLC_MULTIPLE` times the last-level cache, so it measures
    main memory, but its two buffers at most :data:`COPY_MEMORY_SHARE` of the memory available;
    :func:`main_memory_copy_mib`), counted as read + write (2 × size bytes).
    Runs are timed after warm-up and synchronized (CUDA events on a GPU); each figure is the
    FASTEST run, because a roof is a best case. These are achieved figures, not datasheet peaks.
    """
    _flag(quick=quick)
    dev = resolve_device(device)
    if dtypes is None:
        dtypes = ["fp32", "bf16"] if dev.type == "cpu" else ["fp32", "tf32", "bf16"]
    if gemm_n is None:
        gemm_n = (512 if quick else 1024) if dev.type == "cpu" else (4096 if quick else 8192)
    if copy_mib is None:
        least = 64 if dev.type == "cpu" else (512 if quick else 2048)
        free: tuple[int | None, str] | None = None  # a CPU: the host's (main_memory_copy_mib)
        if dev.type == "cuda":
            try:
                free = int(torch.cuda.mem_get_info(dev)[0]), "free GPU memory (torch.cuda.mem_get_info)"
            except (RuntimeError, AssertionError):  # not reported: the copy is bounded by the cache only
                free = None, ""
        copy_mib, copy_note = main_memory_copy_mib(dev, least_mib=least, available=free)
    else:
        size, source = last_level_cache(dev)
        copy_note = (
            f"{copy_mib} MiB, {copy_mib * 2**20 / size:.1f}x {source}"
            if size
            else f"{copy_mib} MiB ({source})"
        )
    iters = 5 if quick else 20
    result = MeasuredDevice(str(dev), _device_name(dev), gemm_n, copy_note=copy_note)
    for key in dtypes:
        key = dtype_key(key)
        if key == "fp8":
            raise ValueError("fp8 GEMMs need torch._scaled_mm on a Hopper GPU; not measured here.")
        a = torch.randn(gemm_n, gemm_n, device=dev).to(DTYPES[key])
        b = torch.randn(gemm_n, gemm_n, device=dev).to(DTYPES[key])
        tf32_before = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = key == "tf32"
        try:
            run = measure(functools.partial(torch.matmul, a, b), warmup=2, iters=iters, device=dev)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = tf32_before
        result.gemm_runs[key] = run
        result.gemm_flops[key] = 2 * gemm_n**3 / run.min
    src = torch.empty(copy_mib * 2**20 // 4, dtype=torch.float32, device=dev).uniform_()
    dst = torch.empty_like(src)
    result.copy_run = measure(lambda: dst.copy_(src), warmup=2, iters=iters, device=dev)
    result.copy_bytes = 2 * src.numel() * src.element_size()
    result.copy_bandwidth = result.copy_bytes / result.copy_run.min
    return result

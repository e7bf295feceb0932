"""The notebook setup cell: pick the device and say what the numbers will be measured on."""

from __future__ import annotations

import platform
from dataclasses import dataclass

import torch

from . import __version__, hardware, i18n
from ._validate import flag as _flag
from .bench import resolve_device
from .i18n import tr


@dataclass(frozen=True)
class Runtime:
    """What a notebook runs on."""

    device: torch.device
    gpu: hardware.DeviceSpec | None  # datasheet entry of the GPU, None on CPU or unknown GPU
    gpu_name: str | None

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"


def setup(device: str = "auto", seed: int = 0, verbose: bool = True, lang: str | None = None) -> Runtime:
    """Resolve ``device`` ("auto" | "cpu" | "cuda"), seed torch, choose the language of
    messages, widgets and plots (``lang``: "en" | "zh"; None keeps the current one, by default
    ``$TRAINPERF_LANG`` or English), and print the environment."""
    _flag(verbose=verbose)
    i18n.set_language(lang)
    dev = resolve_device(device)
    torch.manual_seed(seed)
    gpu, gpu_name = None, None
    if dev.type == "cuda":
        gpu_name = torch.cuda.get_device_name(dev)
        gpu = hardware.detect_gpu()
    runtime = Runtime(dev, gpu, gpu_name)
    if verbose:
        print(
            tr(
                "helpers {version} · torch {torch} · Python {python} · device: {device}",
                version=__version__,
                torch=torch.__version__,
                python=platform.python_version(),
                device=dev,
            )
        )
        if gpu is not None:
            peaks = ", ".join(f"{k} {v / 1e12:g}" for k, v in gpu.peak_flops.items())
            print(
                tr(
                    "GPU {gpu} -> table entry '{entry}': dense peak TFLOP/s {peaks}; bandwidth "
                    "{bandwidth:g} TB/s ({source})",
                    gpu=gpu_name,
                    entry=gpu.name,
                    peaks=peaks,
                    bandwidth=gpu.memory_bandwidth / 1e12,
                    source=gpu.source,
                )
            )
        elif gpu_name:
            print(
                tr(
                    "GPU {gpu} is not in helpers.hardware.DEVICES: no datasheet peak; use measured "
                    "figures (helpers.hardware.measure_device()).",
                    gpu=gpu_name,
                )
            )
        else:
            print(
                tr(
                    "CPU run ({threads} threads): no datasheet peak for a CPU; the course measures "
                    "this machine's own roofline instead.",
                    threads=torch.get_num_threads(),
                )
            )
        busy = busy_note()
        if busy:
            print(busy)
    return runtime


def busy_note(load: float | None = None, cores: int | None = None) -> str:
    """A warning when other programs keep this machine's CPUs busy (1-minute load average of at
    least half the cores), else ''. Timings then run slower and spread more, and torch's
    threads wait for each other; the speed comparisons still hold, but more of them say
    "within noise". ``load`` and ``cores`` replace the OS's figures (tests)."""
    import os

    if load is None:
        try:
            load = os.getloadavg()[0]
        except (AttributeError, OSError):  # no load average on this OS
            return ""
    cores = cores or os.cpu_count() or 1
    if load < cores / 2:
        return ""
    return tr(
        "This machine is busy: load average {load:.1f} on {cores} cores. Timings will be slower and "
        "noisier, and more speed comparisons will say 'within noise'. For cleaner numbers, stop "
        "other programs, or set torch.set_num_threads to the cores left free.",
        load=load,
        cores=cores,
    )

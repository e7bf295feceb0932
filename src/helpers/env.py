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
        print(tr("helpers {version} · torch {torch} · Python {python} · device: {device}",
                 version=__version__, torch=torch.__version__, python=platform.python_version(),
                 device=dev))
        if gpu is not None:
            peaks = ", ".join(f"{k} {v / 1e12:g}" for k, v in gpu.peak_flops.items())
            print(tr("GPU {gpu} -> table entry '{entry}': dense peak TFLOP/s {peaks}; bandwidth "
                     "{bandwidth:g} TB/s ({source})", gpu=gpu_name, entry=gpu.name, peaks=peaks,
                     bandwidth=gpu.memory_bandwidth / 1e12, source=gpu.source))
        elif gpu_name:
            print(tr("GPU {gpu} is not in helpers.hardware.DEVICES: no datasheet peak; use measured "
                     "figures (helpers.hardware.measure_device()).", gpu=gpu_name))
        else:
            print(tr("CPU run ({threads} threads): no datasheet peak for a CPU; the course measures "
                     "this machine's own roofline instead.", threads=torch.get_num_threads()))
    return runtime

"""The notebook setup cell: pick the device and say what the numbers will be measured on."""

from __future__ import annotations

import platform
from dataclasses import dataclass

import torch

from . import __version__, hardware
from .bench import resolve_device


@dataclass(frozen=True)
class Runtime:
    """What a notebook runs on."""

    device: torch.device
    gpu: hardware.DeviceSpec | None  # datasheet entry of the GPU, None on CPU or unknown GPU
    gpu_name: str | None

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"


def setup(device: str = "auto", seed: int = 0, verbose: bool = True) -> Runtime:
    """Resolve ``device`` ("auto" | "cpu" | "cuda"), seed torch, and print the environment."""
    dev = resolve_device(device)
    torch.manual_seed(seed)
    gpu, gpu_name = None, None
    if dev.type == "cuda":
        gpu_name = torch.cuda.get_device_name(dev)
        gpu = hardware.detect_gpu()
    runtime = Runtime(dev, gpu, gpu_name)
    if verbose:
        print(f"helpers {__version__} · torch {torch.__version__} · Python "
              f"{platform.python_version()} · device: {dev}")
        if gpu is not None:
            peaks = ", ".join(f"{k} {v / 1e12:g}" for k, v in gpu.peak_flops.items())
            print(f"GPU {gpu_name} -> table entry '{gpu.name}': dense peak TFLOP/s {peaks}; "
                  f"bandwidth {gpu.memory_bandwidth / 1e12:g} TB/s ({gpu.source})")
        elif gpu_name:
            print(f"GPU {gpu_name} is not in helpers.hardware.DEVICES: no datasheet peak; "
                  "use measured figures (helpers.hardware.measure_device()).")
        else:
            print(f"CPU run ({torch.get_num_threads()} threads): no datasheet peak for a CPU; "
                  "the course measures this machine's own roofline instead.")
    return runtime

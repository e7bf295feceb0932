"""Where a cold ``torch.compile`` spends its time, from dynamo's own timing counters.

Dynamo, AOTAutograd and Inductor time their main functions into
``torch._dynamo.utils.compilation_time_metrics`` (what ``torch._dynamo.utils.compile_times()``
prints). The stages nest, so each stage's own time is a difference: dynamo's is the whole
``_compile.compile_inner`` minus the backend it calls (``OutputGraph.call_user_compiler``);
AOTAutograd's is ``create_aot_dispatcher_function`` minus the Inductor compile of the forward
graph inside it; Inductor's is every ``compile_fx_inner`` (the forward graph, and the backward
graph compiled at the first backward call), of which ``compile_file`` is the C++ compiler.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class StageTimes:
    """Seconds of one cold compile of a small forward and backward, by stage."""

    dynamo_s: float
    aot_autograd_s: float
    inductor_s: float
    cxx_compiler_s: float  # inside Inductor: the C++ compiler (compile_file); 0 where none ran
    first_call_s: float  # the whole first forward and backward call, wall clock

    def format(self) -> str:
        stages = {
            "TorchDynamo": self.dynamo_s,
            "AOTAutograd": self.aot_autograd_s,
            "TorchInductor": self.inductor_s,
        }
        total = sum(stages.values())
        lines = [
            f"first call (forward and backward) {self.first_call_s:.2f} s; in the three stages {total:.2f} s:"
        ]
        lines += [f"  {name:<14} {s:6.2f} s  ({s / total:.0%})" for name, s in stages.items()]
        lines.append(f"  of TorchInductor's time, the C++ compiler: {self.cxx_compiler_s:.2f} s")
        return "\n".join(lines)


def stage_times(size: int = 64) -> StageTimes:
    """Compile ``gelu(x @ w).sum()`` (``w`` needs its gradient, so AOTAutograd traces and
    partitions the backward too) with Inductor from a reset dynamo and with its caches off, run
    it forward and backward once, and read each stage's time (module notes). A CPU needs a C++
    compiler for Inductor; without one this raises what Inductor raises."""
    import torch._dynamo as dynamo
    from torch._dynamo import utils

    from ._graphs import quiet

    x = torch.randn(size, size)
    w = torch.randn(size, size, requires_grad=True)

    def step(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x @ w).sum()

    dynamo.reset()
    utils.compilation_time_metrics.clear()
    with quiet(), torch._inductor.config.patch(force_disable_caches=True):
        start = time.perf_counter()
        torch.compile(step)(x, w).backward()
        first = time.perf_counter() - start
    runs = {k: list(v) for k, v in utils.compilation_time_metrics.items()}
    metrics = {k: sum(v) for k, v in runs.items()}
    dynamo.reset()
    whole = metrics.get("_compile.compile_inner", 0.0)
    backend = metrics.get("OutputGraph.call_user_compiler", 0.0)
    aot = metrics.get("create_aot_dispatcher_function", 0.0)
    inductor_runs = runs.get("compile_fx_inner") or [0.0]
    forward_inductor = inductor_runs[0]
    return StageTimes(
        dynamo_s=max(0.0, whole - backend),
        aot_autograd_s=max(0.0, aot - forward_inductor),
        inductor_s=metrics.get("compile_fx_inner", 0.0),
        cxx_compiler_s=metrics.get("compile_file", 0.0),
        first_call_s=first,
    )

"""``mode="reduce-overhead"`` on a GPU: the CUDA graph pitfalls, shown where a CUDA device exists.

Inductor records the compiled step into CUDA graphs ("CUDA graph trees") and replays them.
What a learner trips over, from the PyTorch documentation page *CUDAGraph Trees* and the
docstring of ``torch.compiler.cudagraph_mark_step_begin``:

* an output lives in the graphs' private memory pool, and the next replay writes over it:
  reading it afterwards raises; clone what must outlive the step, or mark where a step begins;
* an op on a CPU tensor, or an input the graph mutates, makes Inductor skip CUDA graphs for
  that graph (it logs "skipping cudagraphs due to ..." and counts ``cudagraph_skips``).

On a CPU nothing here can run: :func:`cudagraph_pitfalls` says so and runs nothing.
"""

from __future__ import annotations

import torch

from ..bench import resolve_device
from ..i18n import tr
from ._graphs import quiet


def _scale(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + 1


def _with_cpu_tensor(x: torch.Tensor, counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x * 2 + 1, counts + 1  # counts lives on the CPU


def _mutating(x: torch.Tensor) -> torch.Tensor:
    x.add_(1)  # writes into its input
    return x * 2


def _skips() -> int:
    from torch._dynamo.utils import counters

    return int(counters["inductor"]["cudagraph_skips"])


def _first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:110]}"


def cudagraph_pitfalls(device: str | torch.device = "auto") -> list[str]:
    """Run the pitfalls of ``mode="reduce-overhead"`` on a CUDA device and say what happened,
    one line each; on any other device, one line saying that nothing was run."""
    dev = resolve_device(device)
    if dev.type != "cuda":
        return [f"CUDA graphs need a CUDA device; this run is on {dev.type}, so nothing was run here"]
    import torch._dynamo as dynamo

    lines = []
    x = torch.randn(4096, device=dev)
    with quiet():
        dynamo.reset()
        step = torch.compile(_scale, mode="reduce-overhead")
        for _ in range(3):  # warm-up, record, replay
            step(x)
        kept = step(x)
        step(x + 1)  # the next replay
        try:
            same = torch.equal(kept + 0, _scale(x))
            lines.append(f"output kept past the next call: still readable, equal to its value: {same}")
        except RuntimeError as exc:
            lines.append(f"output kept past the next call: {_first_line(exc)}")
        cloned = step(x).clone()
        step(x + 1)
        lines.append(
            f"output cloned before the next call: equal to its value: {torch.equal(cloned, _scale(x))}"
        )
        for label, fn, args in (
            (tr("a CPU tensor in the graph"), _with_cpu_tensor, (x, torch.zeros(4))),
            (tr("an input the graph writes into"), _mutating, (x.clone(),)),
        ):
            dynamo.reset()
            before = _skips()
            try:
                compiled = torch.compile(fn, mode="reduce-overhead")
                for _ in range(3):
                    compiled(*args)
                lines.append(f"{label}: Inductor's cudagraph_skips counter went up by {_skips() - before}")
            except Exception as exc:  # noqa: BLE001 — what torch raised is the result
                lines.append(f"{label}: {_first_line(exc)}")
        dynamo.reset()
    return lines

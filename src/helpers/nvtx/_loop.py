"""A small annotated training loop to profile: the demo problem, the loop with step /
dataloader / forward / backward / optimizer ranges, and ``python -m helpers.nvtx``, the command
Nsight Systems captures (a cudaProfilerApi window around some of its steps).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ._annotate import annotate
from ._schedule import CudaProfilerRange

STEP_RANGES = ("step", "dataloader", "forward", "backward", "optimizer")


def demo_setup(
    device: str | torch.device = "cpu",
    width: int = 64,
    n_batches: int = 32,
    batch_size: int = 16,
    seed: int = 0,
) -> tuple[torch.nn.Module, torch.optim.Optimizer, list[tuple[torch.Tensor, torch.Tensor]]]:
    """A small MLP regression problem: (model, optimizer, batches) for profiling demos."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(width, 4 * width),
        torch.nn.GELU(),
        torch.nn.Linear(4 * width, width),
        torch.nn.GELU(),
        torch.nn.Linear(width, 1),
    ).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    batches = [
        (
            torch.randn(batch_size, width, generator=gen).to(device),
            torch.randn(batch_size, 1, generator=gen).to(device),
        )
        for _ in range(n_batches)
    ]
    return model, optimizer, batches


def annotated_training_loop(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
    n_steps: int,
    on_step_end: Callable[[int], Any] | None = None,
    window: CudaProfilerRange | None = None,
) -> list[float]:
    """Train ``n_steps`` steps with step / dataloader / forward / backward / optimizer ranges.

    ``on_step_end(step)`` runs after each step (e.g. ``lambda s: prof.step()``); ``window``
    starts/stops the CUDA profiler API around its steps. Returns the losses.
    """
    loader = iter(batches)
    losses = []
    for step in range(n_steps):
        with window.step(step) if window else contextlib.nullcontext():
            with annotate("step"):
                with annotate("dataloader"):
                    x, y = next(loader)
                with annotate("forward"):
                    loss = torch.nn.functional.mse_loss(model(x), y)
                with annotate("backward"):
                    loss.backward()
                with annotate("optimizer"):
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
        losses.append(loss.detach())
        if on_step_end is not None:
            on_step_end(step)
    return [float(v) for v in losses]  # one sync at the end, not one per step


def _demo_main(argv: Sequence[str] | None = None) -> None:
    """``python -m helpers.nvtx --steps 20 --first 10 --last 14``: the loop nsys captures."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m helpers.nvtx", description=_demo_main.__doc__)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--first", type=int, default=10)
    parser.add_argument("--last", type=int, default=14)
    args = parser.parse_args(argv)
    if not 0 <= args.first <= args.last < args.steps:
        parser.error(
            f"need 0 <= --first <= --last < --steps, got first={args.first}, "
            f"last={args.last}, steps={args.steps}"
        )
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model, optimizer, batches = demo_setup(device, width=512, n_batches=args.steps, batch_size=256)
    window = CudaProfilerRange(args.first, args.last)
    losses = annotated_training_loop(model, optimizer, batches, args.steps, window=window)
    print(f"{args.steps} steps on {device}, loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    print("\n".join(window.events))

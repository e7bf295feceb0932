"""The chapter's benchmark command."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from .. import models

# --------------------------------------------------------------------------- formulas
from ._measure import measure_training

# --------------------------------------------------------------------------- benchmark command


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m helpers.mfu``: tokens/s, MFU and HFU of the course model's training step."""
    parser = argparse.ArgumentParser(prog="python -m helpers.mfu", description=main.__doc__)
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda")
    parser.add_argument(
        "--config",
        default=None,
        help=f"one of {', '.join(models.CONFIGS)} "
        "(default: tiny on CPU, gpt2-small at seq 512 on a GPU; see --full)",
    )
    parser.add_argument("--batch", type=int, default=8, help="sequences per step")
    parser.add_argument("--seq", type=int, default=None, help="tokens per sequence (default: context)")
    parser.add_argument("--autocast", default="auto", help="auto | none | bf16 | fp16")
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--full", action="store_true", help="larger default model and peak GEMM")
    args = parser.parse_args(argv)
    autocast = None if args.autocast == "none" else args.autocast
    try:
        result = measure_training(
            args.config,
            args.batch,
            args.seq,
            args.device,
            autocast,
            args.warmup,
            args.iters,
            quick=not args.full,
        )
    except (ValueError, KeyError, TypeError, RuntimeError) as err:  # bad input: one line, no traceback
        parser.error(str(err.args[0]) if err.args else str(err))
    print(models.describe(result.config))
    print(result.report().format())
    print(
        f"\ntokens/s {result.tokens_per_second:,.0f} | MFU {result.mfu:.2%} | HFU {result.hfu:.2%} "
        f"| peak: {result.peak.describe()}"
    )

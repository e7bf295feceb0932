"""``python -m helpers.compiling``: compile the fused chain on this device and print the report."""

from __future__ import annotations

import argparse
import sys

from .. import bench
from . import (
    CHAIN,
    bias_gelu_dropout_residual,
    cache_info,
    chain_inputs,
    chain_sizes,
    chain_traffic,
    pick_backend,
    report,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m helpers.compiling", description=__doc__)
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda")
    parser.add_argument("--rows", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args(argv)
    if args.rows < 1 or args.hidden < 1 or args.iters < 1:
        parser.error("--rows, --hidden and --iters must be positive")
    try:
        device = bench.resolve_device(args.device)
    except (RuntimeError, ValueError) as exc:
        parser.error(str(exc))
    info = cache_info()
    print(
        f"inductor cache: {info['dir']} ({info['files']} files; FX graph cache "
        f"{'on' if info['fx_graph_cache'] else 'off'})"
    )
    backend, why = pick_backend(device)
    print(f"backend: {backend} ({why})")
    inputs = chain_inputs(args.rows, args.hidden, device)
    result = report(bias_gelu_dropout_residual, inputs, backend=backend, iters=args.iters)
    print(result.format())
    traffic = chain_traffic(CHAIN, chain_sizes(args.rows, args.hidden), inputs[0].element_size())
    rows = (("eager", result.eager, traffic.eager), ("fused", result.compiled, traffic.fused))
    for label, run, moved in rows:
        print(f"  {label}: {moved / 2**20:8.1f} MiB moved, {moved / run.median / 1e9:7.1f} GB/s achieved")
    return 0


if __name__ == "__main__":
    sys.exit(main())

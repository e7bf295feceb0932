"""``python -m helpers.distributed``: chapter 10's measurements from a shell.

* ``collectives``: time all-reduce, all-gather and reduce-scatter on 2 local ranks and fit
  t = α + bytes / bandwidth to each (a benchmark: it prints measured figures).
* ``fsdp --out DIR``: under ``torchrun`` (``torchrun --nproc-per-node=2 -m helpers.distributed
  fsdp --out DIR``), one rank of the FSDP recording; started directly, the command line to type.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m helpers.distributed", description=__doc__.split("\n\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    coll = sub.add_parser(
        "collectives", help="time the collectives on local ranks and fit alpha and bandwidth"
    )
    coll.add_argument("--ranks", type=int, default=2)
    coll.add_argument("--full", action="store_true", help="more rounds (slower, narrower intervals)")
    fsdp = sub.add_parser("fsdp", help="one rank of the FSDP recording, under torchrun")
    fsdp.add_argument("--out", required=True, help="folder for rank<R>.json.gz (trace) and rank<R>.json")
    for name, default in (("layers", 4), ("width", 256), ("batch", 32), ("steps", 3)):
        fsdp.add_argument(f"--{name}", type=int, default=default)
    args = parser.parse_args(argv)
    try:
        if args.command == "collectives":
            from . import COLLECTIVES, measure_collectives

            table = measure_collectives(world_size=args.ranks, quick=not args.full)
            print(table)
            for name in COLLECTIVES:
                print(f"{name:>14}: {table.fit(name)}")
            return 0
        from ._torchrun import run_as_torchrun_rank, torchrun_command

        opts = {k: getattr(args, k) for k in ("layers", "width", "batch", "steps")}
        if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
            print(
                "not started by torchrun (no RANK / WORLD_SIZE in the environment); run:\n  "
                + " ".join(torchrun_command(args.out, 2, **opts)),
                file=sys.stderr,
            )
            return 2
        os.makedirs(args.out, exist_ok=True)
        run_as_torchrun_rank(args.out, **opts)
        return 0
    except (ValueError, TypeError, RuntimeError, OSError) as err:
        print(f"python -m helpers.distributed {args.command}: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

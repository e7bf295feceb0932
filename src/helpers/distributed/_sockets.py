"""Which TCP endpoints a process holds open (Linux ``/proc``): the test that ranks talk over
127.0.0.1 only reads them from inside each rank, after its collectives have run."""

from __future__ import annotations

import os
import socket
import struct
from pathlib import Path
from typing import Any


def _address(hex_addr: str) -> str:
    """``0100007F:1F90`` (``/proc/net/tcp``, little-endian words) as ``127.0.0.1``; IPv6 too."""
    host = hex_addr.split(":")[0]
    raw = bytes.fromhex(host)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    words = struct.unpack("<4I", raw)  # four host-order 32-bit words
    return socket.inet_ntop(socket.AF_INET6, struct.pack(">4I", *words))


def tcp_endpoints(pid: int | str = "self") -> list[dict[str, str]]:
    """Local and remote addresses of every TCP socket ``pid`` holds (listening ones included),
    from ``/proc/<pid>/fd`` and ``/proc/<pid>/net/tcp{,6}``. Empty where ``/proc`` is missing."""
    fd_dir = Path(f"/proc/{pid}/fd")
    if not fd_dir.is_dir():
        return []
    inodes = set()
    for fd in fd_dir.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found: list[dict[str, str]] = []
    for table in ("tcp", "tcp6"):
        path = Path(f"/proc/{pid}/net/{table}")
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            cols = line.split()
            if len(cols) > 9 and cols[9] in inodes:
                found.append({"local": _address(cols[1]), "remote": _address(cols[2])})
    return found


def _endpoints_after_collective(rank: int, world_size: int, device: str, **_: Any) -> dict[str, Any]:
    """Rank target for tests: one all-reduce, then the TCP endpoints this rank holds."""
    import torch
    import torch.distributed as dist

    t = torch.ones(4)
    dist.all_reduce(t)
    return {"sum": float(t[0]), "endpoints": tcp_endpoints()}

"""Chapter 10 under the grader: a submission's ranks run inside the sandbox and talk over the
sandbox's own loopback interface, and the sandbox still reaches nothing outside it.

One real submission of chapter 10, graded with isolation as an instructor runs it. Its answer
to exercise 1 is right only if two real gloo ranks ran in its kernel with every socket on
127.0.0.1; its answer to exercise 2 is right only if it could reach none of three servers this
test holds open on the grading machine (on a non-loopback address, on the machine's loopback,
and on the wildcard address), which the test first reaches itself. So the scores say what the
sandbox allowed.
"""

from __future__ import annotations

import os
import shutil
import socket
import textwrap

import nbformat
import pytest
from conftest import ROOT

from trainperf.discriminate import solution_answers, with_answers
from trainperf.grading.grade import Limits, grade

pytestmark = pytest.mark.notebooks
CHAPTER = "10_distributed"
NAME = f"{CHAPTER}.ipynb"
ISOLATED = shutil.which("bwrap") is not None and os.geteuid() == 0


def _outside_address() -> str | None:
    """An address of this machine that is not loopback (a UDP 'connect' sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1: never routed, only picks an interface
            address = s.getsockname()[0]
        except OSError:
            return None
    return None if address.startswith("127.") else address


RANKS_PROBE = """
from helpers import distributed as _d
_runs = _d.run_ranks("helpers.distributed._sockets:_endpoints_after_collective", world_size=2)
_peers = ("0.0.0.0", "127.0.0.1", "::ffff:127.0.0.1")
_ends = [e for r in _runs for e in r["endpoints"]]
_loopback = all(e["local"].endswith("127.0.0.1") and e["remote"] in _peers for e in _ends)
_ranks_ok = [r["sum"] for r in _runs] == [2.0, 2.0] and _loopback and all(r["endpoints"] for r in _runs)

def bytes_sent(collective, size_bytes, world_size):
    steps = {"all_reduce": 2, "all_gather": 1, "reduce_scatter": 1}[collective] * (world_size - 1)
    return steps * size_bytes / world_size if _ranks_ok else -1.0
"""

NETWORK_PROBE = """
import socket as _socket
_reached = []
for _host, _port in {targets!r}:
    try:
        _socket.create_connection((_host, _port), timeout=3).close()
        _reached.append(_host)
    except OSError:
        pass

def fit_alpha_beta(sizes_bytes, seconds):
    n = len(sizes_bytes)
    mx, my = sum(sizes_bytes) / n, sum(seconds) / n
    sxx = sum((x - mx) ** 2 for x in sizes_bytes)
    slope = sum((x - mx) * (y - my) for x, y in zip(sizes_bytes, seconds)) / sxx
    return (my - slope * mx, 1 / slope) if not _reached else (0.0, 1.0)
"""


@pytest.mark.skipif(not ISOLATED, reason="needs root and bubblewrap (bwrap) for the sandbox")
def test_ranks_run_in_the_sandbox_over_its_loopback_and_nothing_outside_is_reachable(tmp_path):
    servers, targets = [], []
    try:
        for host in filter(None, [_outside_address(), "127.0.0.1", "0.0.0.0"]):
            server = socket.socket()
            server.bind((host, 0))
            server.listen()
            servers.append(server)
            reach = "127.0.0.1" if host == "0.0.0.0" else host
            targets.append((reach, server.getsockname()[1]))
            socket.create_connection(targets[-1], timeout=3).close()  # the control: reachable from here
        answers = {
            **solution_answers(ROOT / "solutions" / CHAPTER / NAME),
            "ex1_ring_bytes": textwrap.dedent(RANKS_PROBE),
            "ex2_fit": textwrap.dedent(NETWORK_PROBE).format(targets=targets),
        }
        folder = tmp_path / "submissions" / "probe"
        folder.mkdir(parents=True)
        nbformat.write(with_answers(ROOT / "notebooks" / CHAPTER / NAME, answers), folder / NAME)
        rows = grade(
            ROOT,
            tmp_path / "submissions",
            tmp_path / "grades.csv",
            [CHAPTER],
            workdir=tmp_path / "work",
            require_isolation=True,
            limits=Limits(cell_timeout=120, notebook_timeout=600),
        )
    finally:
        for server in servers:
            server.close()
    outcome = rows[0].outcomes[CHAPTER]
    assert outcome.cells["ex1_ring_bytes_test"] == (2.0, 2.0), f"ranks in the sandbox: {outcome.reason}"
    assert outcome.cells["ex2_fit_test"] == (2.0, 2.0), f"the sandbox reached a server: {outcome.reason}"
    assert outcome.score == outcome.max_score, outcome.reason

"""Execute one notebook for grading, in a child process the grader starts for it.

Runs as ``python -m trainperf.sandbox --result-fd N`` with the notebook (JSON) on stdin.
Each executed cell's result is written as one JSON line to the result descriptor the
moment the cell finishes, so a grader that has to kill a runaway submission still knows
what ran. The kernel cannot write to that descriptor (it is not inherited), and the
grader — not this process — turns results into scores.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any


def _excerpt(outputs: list[dict[str, Any]], limit: int) -> str:
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    return text if len(text) <= limit else text[:limit] + "\n…[output truncated]"


def run(notebook: dict[str, Any], cell_timeout: int, max_output: int, emit) -> None:
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import DeadKernelError

    class CappedClient(NotebookClient):
        """Keeps at most ``max_output`` characters of output per cell in memory."""

        def output(self, outs, msg, display_id, cell_index):  # noqa: D102
            size = sum(len(json.dumps(o)) for o in outs)
            if size > max_output:
                if not (outs and outs[-1].get("name") == "truncated"):
                    outs.append(nbformat.v4.new_output("stream", name="truncated",
                                                       text="\n…[output truncated]\n"))
                return None
            return super().output(outs, msg, display_id, cell_index)

    nb = nbformat.from_dict(notebook)
    replies: dict[int, dict[str, Any]] = {}
    client = CappedClient(
        nb, timeout=cell_timeout, allow_errors=True, interrupt_on_timeout=True,
        error_on_timeout={"ename": "CellTimeoutError",
                          "evalue": f"the cell ran past the {cell_timeout} s limit", "traceback": []},
        kernel_name="python3", record_timing=False,
        on_cell_executed=lambda cell, cell_index, execute_reply: replies.__setitem__(
            cell_index, execute_reply["content"]),
    )
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code" or not cell.source.strip():
                continue
            try:
                client.execute_cell(cell, index)
            except DeadKernelError:
                emit({"index": index, "status": "died", "ename": "DeadKernelError",
                      "evalue": "the kernel died while running this cell", "text": ""})
                return
            reply = replies.pop(index, {})
            errors = [o for o in cell.outputs if o.get("output_type") == "error"]
            failed = reply.get("status") == "error" or bool(errors)
            # a timeout is reported in the reply; the kernel's own output says KeyboardInterrupt
            first = reply if reply.get("ename") == "CellTimeoutError" or not errors else errors[0]
            emit({"index": index, "status": "error" if failed else "ok",
                  "ename": first.get("ename", "") if failed else "",
                  "evalue": str(first.get("evalue", ""))[:2000] if failed else "",
                  "text": _excerpt(cell.outputs, max_output)})


def _limit_resources(memory_mb: int) -> None:
    """Cap the address space (inherited by the kernel) and switch off core dumps."""
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if memory_mb > 0:
        limit = memory_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--result-fd", type=int, required=True)
    parser.add_argument("--cell-timeout", type=int, default=60)
    parser.add_argument("--max-output", type=int, default=20_000)
    args = parser.parse_args()
    os.set_inheritable(args.result_fd, False)  # the kernel must not get this descriptor
    _limit_resources(int(os.environ.get("TP_MEMORY_MB", "0")))
    sink = os.fdopen(args.result_fd, "w", buffering=1)
    notebook = json.load(sys.stdin)

    def emit(record: dict[str, Any]) -> None:
        sink.write(json.dumps(record) + "\n")
        sink.flush()

    run(notebook, args.cell_timeout, args.max_output, emit)
    emit({"done": True})
    return 0


if __name__ == "__main__":
    sys.exit(main())

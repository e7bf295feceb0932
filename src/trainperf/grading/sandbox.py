"""Execute one notebook for grading: the trusted notebook client, in a child the grader starts.

Runs as ``python -m trainperf.grading.sandbox --result-fd N`` with a job (JSON) on stdin: the notebook,
the command that starts the kernel (inside the sandbox, see :mod:`trainperf.grading.isolate`), the
folder for the kernel's connection file and sockets, and the limits. Only the kernel runs in
the sandbox; this process runs as the grader, where the kernel can neither see nor signal it.

Each code cell's result is written as one JSON line to the result descriptor the moment the
cell finishes, so a grader that has to kill a runaway submission still knows what ran. Hidden
checks' records (display data of type :data:`helpers._records.RECORD_MIME`) are taken out of
the cell's outputs, capped, and sent with the cell's result; the grader compares them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from helpers._records import MAX_RECORD_BYTES, RECORD_MIME

MAX_RECORDS_PER_CELL = 5_000
MAX_RECORD_BYTES_PER_CELL = 2 * 2**20
MAX_RICH_BYTES = 4 * 2**20  # plots and other display data kept per cell
MAX_MESSAGE_BYTES = 16 * 2**20  # one message from the kernel (a plot is well under 1 MiB)
CLIENT_MEMORY_MB = 3072  # address space of this process (set by the grader when it starts it)
STUCK_GRACE_S = 5.0  # after an interrupt, how long a kernel may take to become idle
HIDDEN_PART = "trainperf_hidden_part"  # as in trainperf.grading.exam (not imported: kept light)
ORIGIN = "trainperf_origin"  # as in trainperf.grading.exam


def _excerpt(outputs: list[dict[str, Any]], limit: int) -> str:
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    return text if len(text) <= limit else text[:limit] + "\n…[output truncated]"


class CellRecords:
    """Records of one cell, with the caps that keep a flood out of the grader's memory."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self.size = 0
        self.overflow = ""

    def add(self, data: Any) -> None:
        if self.overflow:
            return
        text = json.dumps(data, allow_nan=True) if not isinstance(data, str) else data
        if len(text) > MAX_RECORD_BYTES + 1024:
            data = {"error": f"a record of {len(text):,} bytes is over the {MAX_RECORD_BYTES:,}-byte cap"}
            text = json.dumps(data)
        elif isinstance(data, str):  # helpers._records.emit sends JSON text: inf and nan survive
            try:
                data = json.loads(text)
            except (ValueError, RecursionError):
                data = {"error": "a record that is not valid JSON"}
        if len(self.items) >= MAX_RECORDS_PER_CELL or self.size + len(text) > MAX_RECORD_BYTES_PER_CELL:
            self.overflow = (f"the cell sent more than {MAX_RECORDS_PER_CELL:,} records or "
                             f"{MAX_RECORD_BYTES_PER_CELL // 2**20} MiB of them")
            return
        self.items.append(data if isinstance(data, dict) else {"error": "a record that is not an object"})
        self.size += len(text)


def _kernel_manager(job: dict[str, Any]):
    from jupyter_client.kernelspec import KernelSpec
    from jupyter_client.manager import AsyncKernelManager

    owner = job.get("kernel_uid")
    spec = KernelSpec(argv=job["kernel_argv"], display_name="trainperf sandbox", language="python",
                      interrupt_mode="message", env=job.get("kernel_env") or {})

    class SandboxKernelManager(AsyncKernelManager):
        """The kernel command is the sandbox's; the connection file goes to the kernel's uid."""

        @property
        def kernel_spec(self) -> KernelSpec:  # noqa: D102
            return spec

        def write_connection_file(self, **kwargs: Any) -> None:  # noqa: D102
            super().write_connection_file(**kwargs)
            if owner is not None:
                os.chown(self.connection_file, owner, owner)

        def client(self, **kwargs: Any):  # noqa: D102
            # the client's sockets come from this manager's context, which caps a message's size
            # (jupyter_client's client would otherwise make a context of its own, uncapped)
            kwargs.setdefault("context", self.context)
            return super().client(**kwargs)

    import zmq

    folder = Path(job["connection_dir"])
    manager = SandboxKernelManager(transport="ipc", ip=str(folder / "k"),
                                   connection_file=str(folder / "kernel.json"))
    # every socket the client opens refuses a message over the cap: a kernel that displays
    # hundreds of MB at once never makes this (unsandboxed) process hold them
    manager.context.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
    return manager


def _watch_output_channel(kc):
    """An async check, called after each cell: did the output channel lose its connection (the
    socket drops a peer that sends a message over ``MAX_MESSAGE_BYTES``)?"""
    import zmq
    from zmq.utils.monitor import parse_monitor_message

    monitor = kc.iopub_channel.socket.get_monitor_socket(zmq.EVENT_DISCONNECTED)

    async def lost() -> bool:
        dropped = False
        while await monitor.poll(timeout=0):
            event = parse_monitor_message(await monitor.recv_multipart())
            dropped = dropped or event.get("event") == zmq.EVENT_DISCONNECTED
        return dropped
    return lost


async def _is_stuck(client) -> bool:
    """After an interrupt: does a trivial request get no answer within the grace period?"""
    msg_id = client.kc.execute("pass", store_history=False, silent=True)
    deadline = asyncio.get_running_loop().time() + STUCK_GRACE_S
    while True:
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            return True
        try:
            reply = await client.kc.get_shell_msg(timeout=remaining)
        except Exception:  # queue.Empty or a closed channel
            return True
        if reply.get("parent_header", {}).get("msg_id") == msg_id:
            return False


async def _serve_stdin(kc, server, origin: str) -> None:
    """While one cell runs: answer the kernel's input requests. A replay request gets what
    :class:`trainperf.grading.replay.Server` allows for this cell's origin; anything else
    (a learner's ``input()``) gets an empty line."""
    import queue

    from .replay import PROMPT

    while True:
        try:
            msg = await kc.get_stdin_msg(timeout=0.5)
        except queue.Empty:
            continue
        if msg.get("msg_type") != "input_request":
            continue
        prompt = str(msg.get("content", {}).get("prompt", ""))
        kc.input(server.answer(origin, prompt) if server is not None and prompt.startswith(PROMPT) else "")


async def run(job: dict[str, Any], emit) -> None:
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import DeadKernelError

    cell_timeout, max_output = job["cell_timeout"], job["max_output"]
    records: dict[int, CellRecords] = {}

    class RecordingClient(NotebookClient):
        """Keeps at most ``max_output`` characters per cell; takes hidden-check records out."""

        def output(self, outs, msg, display_id, cell_index):  # noqa: D102
            content = msg.get("content", {})
            data = content.get("data") or {}
            if msg.get("msg_type") in ("display_data", "update_display_data") and RECORD_MIME in data:
                records.setdefault(cell_index, CellRecords()).add(data[RECORD_MIME])
                return None
            # the caps count the output arriving now, so a cell's first output is capped too:
            # text (streams, errors) to max_output characters; plots and other rich data to
            # MAX_RICH_BYTES (a figure is tens of kB)
            text_like = msg.get("msg_type") in ("stream", "error")
            cap = max_output if text_like else MAX_RICH_BYTES
            size = len(json.dumps(content)) + sum(
                len(json.dumps(o)) for o in outs
                if (o.get("output_type") in ("stream", "error")) == text_like)
            if size > cap:
                if not (outs and outs[-1].get("name") == "truncated"):
                    outs.append(nbformat.v4.new_output("stream", name="truncated",
                                                       text="\n…[output truncated]\n"))
                return None
            return super().output(outs, msg, display_id, cell_index)

    nb = nbformat.from_dict(job["notebook"])
    replies: dict[int, dict[str, Any]] = {}
    server = None
    if job.get("replay_table"):
        from .replay import Server

        server = Server.load(job["replay_table"], job.get("replay_exercises") or {})
    calls_log = job.get("replay_log")  # the reference run: note the calls file's size per cell
    client = RecordingClient(
        nb, km=_kernel_manager(job), timeout=cell_timeout, allow_errors=True,
        interrupt_on_timeout=True, startup_timeout=job.get("startup_timeout", 120),
        error_on_timeout={"ename": "CellTimeoutError",
                          "evalue": f"the cell ran past the {cell_timeout} s limit", "traceback": []},
        kernel_name="python3", record_timing=False, iopub_timeout=4,
        on_cell_executed=lambda cell, cell_index, execute_reply: replies.__setitem__(
            cell_index, execute_reply["content"]),
        resources={"metadata": {"path": job.get("cwd") or os.getcwd()}},
    )
    try:
        async with client.async_setup_kernel():
            provisioner = getattr(client.km, "provisioner", None)
            emit({"kernel_pid": getattr(provisioner, "pid", None)})
            client.kc.allow_stdin = True  # the replay requests come over the input channel
            lost = _watch_output_channel(client.kc)
            failed_before = False  # the code cell before this one
            for index, cell in enumerate(nb.cells):
                if cell.cell_type != "code" or not cell.source.strip():
                    continue
                if cell.metadata.get(HIDDEN_PART) and failed_before:
                    # its visible part failed, so it scores 0 anyway: save the time
                    emit({"index": index, "status": "skipped", "ename": "", "evalue": "", "text": ""})
                    continue
                stdin = asyncio.ensure_future(_serve_stdin(client.kc, server, cell.metadata.get(ORIGIN, "")))
                try:
                    await client.async_execute_cell(cell, index)
                except DeadKernelError:
                    emit({"index": index, "status": "died", "ename": "DeadKernelError",
                          "evalue": "the kernel died while running this cell", "text": "",
                          **_records_of(records, index)})
                    return
                finally:
                    stdin.cancel()
                reply = replies.pop(index, {})
                errors = [o for o in cell.outputs if o.get("output_type") == "error"]
                failed = reply.get("status") == "error" or bool(errors)
                timed_out = reply.get("ename") == "CellTimeoutError"
                # a timeout is reported in the reply; the kernel's own output says KeyboardInterrupt
                first = reply if timed_out or not errors else errors[0]
                result = {"index": index, "status": "error" if failed else "ok",
                          "ename": first.get("ename", "") if failed else "",
                          "evalue": str(first.get("evalue", ""))[:2000] if failed else "",
                          "text": _excerpt(cell.outputs, max_output), **_records_of(records, index)}
                if calls_log:
                    result["replay_size"] = os.path.getsize(calls_log) if os.path.isfile(calls_log) else 0
                if await lost():
                    # the socket refused a message over the cap and dropped the connection: what
                    # the kernel sends from now on (records included) never arrives, so stop here
                    result.update(status="error", ename="OutputTooLarge", evalue=(
                        f"the cell sent a message over the {MAX_MESSAGE_BYTES // 2**20} MiB cap; "
                        "the output channel was closed and the notebook stopped here"))
                    emit(result)
                    await client.km.shutdown_kernel(now=True)
                    return
                failed_before = failed
                if timed_out and await _is_stuck(client):
                    result["stuck"] = True
                    emit(result)
                    await client.km.shutdown_kernel(now=True)
                    return
                emit(result)
    except DeadKernelError:
        return  # reported above, or the kernel died while shutting down
    except RuntimeError as exc:  # the kernel never started
        emit({"start_error": str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__})


def _records_of(records: dict[int, CellRecords], index: int) -> dict[str, Any]:
    cell = records.get(index)
    if cell is None:
        return {}
    out: dict[str, Any] = {"records": cell.items}
    if cell.overflow:
        out["records_overflow"] = cell.overflow
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--result-fd", type=int, required=True)
    args = parser.parse_args()
    os.set_inheritable(args.result_fd, False)  # the kernel must not get this descriptor
    sink = os.fdopen(args.result_fd, "w", buffering=1)
    job = json.load(sys.stdin)

    def emit(record: dict[str, Any]) -> None:
        sink.write(json.dumps(record, allow_nan=True) + "\n")
        sink.flush()

    asyncio.run(run(job, emit))
    emit({"done": True})
    return 0


if __name__ == "__main__":
    sys.exit(main())

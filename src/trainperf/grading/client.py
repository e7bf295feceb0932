"""Execute one notebook for grading: the trusted notebook client, in a child the grader starts.

Runs as ``python -m trainperf.grading.client --result-fd N`` with a job (JSON) on stdin: the notebook,
the command that starts the kernel (inside the sandbox, see :mod:`trainperf.grading.sandbox`), the
folder for the kernel's connection file and sockets, and the limits. Only the kernel runs in
the sandbox; this process runs as the grader, where the kernel can neither see nor signal it.

Each code cell's result is written as one JSON line to the result descriptor the moment the
cell finishes, so a grader that has to kill a runaway submission still knows what ran. Hidden
checks' records (display data of type :data:`helpers._wire.RECORD_MIME`) are taken out of
the cell's outputs, capped, and sent with the cell's result; the grader compares them.

What this process holds is bounded per cell and per notebook: a cell's outputs and records are
dropped once its result is sent, and a notebook whose records, text or rich output pass the
per-notebook caps below stops at that cell (its kernel is shut down; the result says why in
``notebook_cap``), so no number of added cells multiplies the per-cell caps.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
from pathlib import Path
from typing import Any

from helpers._records import MAX_RECORD_BYTES
from helpers._wire import RECORD_MIME

MAX_RECORDS_PER_CELL = 5_000
MAX_RECORD_BYTES_PER_CELL = 2 * 2**20
MAX_RICH_BYTES = 4 * 2**20  # plots and other display data kept per cell
# Per notebook, whatever the number of cells (a chapter's reference run sends ~60 records,
# ~15 kB, prints a few kB and shows a few figures of tens of kB): past any of these the
# notebook stops at that cell and no later cell counts.
MAX_RECORDS_PER_NOTEBOOK = 10_000
MAX_RECORD_BYTES_PER_NOTEBOOK = 4 * 2**20  # two cells' worth of the per-cell cap
MAX_TEXT_PER_NOTEBOOK = 2_000_000  # characters of stream / error output kept (100 full cells)
MAX_RICH_BYTES_PER_NOTEBOOK = 32 * 2**20  # display data kept, summed over the cells
MAX_MESSAGE_BYTES = 16 * 2**20  # one message from the kernel (a plot is well under 1 MiB)
CLIENT_MEMORY_MB = 3072  # address space of this process (set by the grader when it starts it)
STUCK_GRACE_S = 5.0  # after an interrupt, how long a kernel may take to become idle
HIDDEN_PART = "trainperf_hidden_part"  # as in trainperf.grading.exam (not imported: kept light)
ORIGIN = "trainperf_origin"  # as in trainperf.grading.exam


def peak_rss_kb() -> int:
    """This process's peak resident memory, KiB: the kernel's VmHWM, which starts again at
    ``exec`` (``ru_maxrss`` keeps the forking parent's size, so a child of a large grader would
    report the grader's)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _well_formed(msg: Any) -> bool:
    """Whether an output message from the kernel has the types nbformat expects. The kernel is
    the learner's: a forged message (a stream whose text is a list, content that is not a
    dict) must not stop this client, it is dropped."""
    content = msg.get("content") if isinstance(msg, dict) else None
    if not isinstance(content, dict):
        return False
    kind = msg.get("msg_type")
    if kind == "stream":
        return isinstance(content.get("name"), str) and isinstance(content.get("text"), str)
    if kind == "error":
        trace = content.get("traceback", [])
        return (
            isinstance(content.get("ename", ""), str)
            and isinstance(content.get("evalue", ""), str)
            and isinstance(trace, list)
            and all(isinstance(line, str) for line in trace)
        )
    if kind in ("display_data", "update_display_data", "execute_result"):
        data, meta = content.get("data", {}), content.get("metadata", {})
        return isinstance(data, dict) and all(isinstance(k, str) for k in data) and isinstance(meta, dict)
    return True


def _excerpt(outputs: list[dict[str, Any]], limit: int) -> str:
    text = "".join(
        o["text"] for o in outputs if o.get("output_type") == "stream" and isinstance(o.get("text"), str)
    )
    return text if len(text) <= limit else text[:limit] + "\n…[output truncated]"


class NotebookBudget:
    """What the whole notebook has sent so far, against the per-notebook caps."""

    def __init__(self) -> None:
        self.records = 0
        self.record_bytes = 0
        self.text = 0
        self.rich = 0
        self.exceeded = ""  # which cap, in words ('' while within all of them)

    def take_record(self, size: int) -> bool:
        """Count one record of ``size`` bytes; False (and ``exceeded`` set) past the caps."""
        if self.exceeded:
            return False
        if (
            self.records >= MAX_RECORDS_PER_NOTEBOOK
            or self.record_bytes + size > MAX_RECORD_BYTES_PER_NOTEBOOK
        ):
            self.exceeded = (
                f"hidden-check records (over {MAX_RECORDS_PER_NOTEBOOK:,} records or "
                f"{MAX_RECORD_BYTES_PER_NOTEBOOK // 2**20} MiB of them)"
            )
            return False
        self.records += 1
        self.record_bytes += size
        return True

    def take_outputs(self, outputs: list[dict[str, Any]]) -> None:
        """Count what a finished cell kept of its text and rich output."""
        for out in outputs:
            size = len(json.dumps(out, default=str))
            if out.get("output_type") in ("stream", "error"):
                self.text += size
            else:
                self.rich += size
        if self.exceeded:
            return
        if self.text > MAX_TEXT_PER_NOTEBOOK:
            self.exceeded = f"text output (over {MAX_TEXT_PER_NOTEBOOK:,} characters kept)"
        elif self.rich > MAX_RICH_BYTES_PER_NOTEBOOK:
            self.exceeded = f"rich output (over {MAX_RICH_BYTES_PER_NOTEBOOK // 2**20} MiB kept)"


class CellRecords:
    """Records of one cell, with the caps that keep a flood out of the grader's memory."""

    def __init__(self, budget: NotebookBudget | None = None) -> None:
        self.items: list[dict[str, Any]] = []
        self.size = 0
        self.overflow = ""
        self.budget = budget

    def add(self, data: Any) -> None:
        if self.overflow or (self.budget is not None and self.budget.exceeded):
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
            self.overflow = (
                f"the cell sent more than {MAX_RECORDS_PER_CELL:,} records or "
                f"{MAX_RECORD_BYTES_PER_CELL // 2**20} MiB of them"
            )
            return
        if self.budget is not None and not self.budget.take_record(len(text)):
            return  # the notebook's caps: the cell's result says so, and the notebook stops there
        self.items.append(data if isinstance(data, dict) else {"error": "a record that is not an object"})
        self.size += len(text)


def _kernel_manager(job: dict[str, Any]):
    from jupyter_client.kernelspec import KernelSpec
    from jupyter_client.manager import AsyncKernelManager

    owner = job.get("kernel_uid")
    spec = KernelSpec(
        argv=job["kernel_argv"],
        display_name="trainperf sandbox",
        language="python",
        interrupt_mode="message",
        env=job.get("kernel_env") or {},
    )

    class SandboxKernelManager(AsyncKernelManager):
        """The kernel command is the sandbox's; the connection file goes to the kernel's uid."""

        @property
        def kernel_spec(self) -> KernelSpec:
            return spec

        def write_connection_file(self, **kwargs: Any) -> None:
            super().write_connection_file(**kwargs)
            if owner is not None:
                os.chown(self.connection_file, owner, owner)

        def client(self, **kwargs: Any):
            # the client's sockets come from this manager's context, which caps a message's size
            # (jupyter_client's client would otherwise make a context of its own, uncapped)
            kwargs.setdefault("context", self.context)
            return super().client(**kwargs)

    import zmq

    folder = Path(job["connection_dir"])
    manager = SandboxKernelManager(
        transport="ipc", ip=str(folder / "k"), connection_file=str(folder / "kernel.json")
    )
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
        except Exception:  # noqa: BLE001 — queue.Empty or a closed channel
            return True
        if reply.get("parent_header", {}).get("msg_id") == msg_id:
            return False


async def _serve_stdin(kc, server, origin: str) -> None:
    """While one cell runs: answer the kernel's input requests. A replay request gets what
    :class:`trainperf.grading.replay.Server` allows for this cell's origin; anything else
    (a learner's ``input()``) gets an empty line. Every message comes from the learner's
    kernel: one of any shape is answered with an empty line or skipped, never a crash here."""
    import queue

    from .replay import PROMPT

    while True:
        try:
            msg = await kc.get_stdin_msg(timeout=0.5)
        except queue.Empty:
            continue
        except Exception:  # noqa: BLE001 — a message the session cannot read (bad signature, not JSON)
            await asyncio.sleep(0.1)  # and a channel that keeps failing is not a busy loop
            continue
        if not isinstance(msg, dict) or msg.get("msg_type") != "input_request":
            continue
        content = msg.get("content")
        prompt = content.get("prompt") if isinstance(content, dict) else None
        answer = ""
        if server is not None and isinstance(prompt, str) and prompt.startswith(PROMPT):
            try:
                answer = server.answer(origin, prompt)  # '' or "<id> <payload>" (helpers._wire)
            except Exception:  # noqa: BLE001 — never leave the kernel waiting: nothing to replay
                answer = ""
        kc.input(answer)


async def run(job: dict[str, Any], emit) -> None:
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import DeadKernelError

    cell_timeout, max_output = job["cell_timeout"], job["max_output"]
    records: dict[int, CellRecords] = {}
    budget = NotebookBudget()

    class RecordingClient(NotebookClient):
        """Keeps at most ``max_output`` characters per cell; takes hidden-check records out."""

        def output(self, outs, msg, display_id, cell_index):
            if not _well_formed(msg):
                return None
            content = msg.get("content", {})
            data = content.get("data") or {}
            if msg.get("msg_type") in ("display_data", "update_display_data") and RECORD_MIME in data:
                records.setdefault(cell_index, CellRecords(budget)).add(data[RECORD_MIME])
                return None
            # the caps count the output arriving now, so a cell's first output is capped too:
            # text (streams, errors) to max_output characters; plots and other rich data to
            # MAX_RICH_BYTES (a figure is tens of kB)
            text_like = msg.get("msg_type") in ("stream", "error")
            cap = max_output if text_like else MAX_RICH_BYTES
            size = len(json.dumps(content)) + sum(
                len(json.dumps(o)) for o in outs if (o.get("output_type") in ("stream", "error")) == text_like
            )
            if size > cap:
                if not (outs and outs[-1].get("name") == "truncated"):
                    outs.append(
                        nbformat.v4.new_output("stream", name="truncated", text="\n…[output truncated]\n")
                    )
                return None
            return super().output(outs, msg, display_id, cell_index)

        def _update_display_id(self, display_id, msg):
            # an update of an earlier display is dropped: it would put up to a message's size into
            # an output already counted against the caps, and the grader reads only text and records
            return None

    nb = nbformat.from_dict(job["notebook"])
    replies: dict[int, dict[str, Any]] = {}
    server = None
    if job.get("replay_table"):
        from .replay import Server

        server = Server.load(job["replay_table"], job.get("replay_exercises") or {})
    calls_log = job.get("replay_log")  # the reference run: note the calls file's size per cell
    client = RecordingClient(
        nb,
        km=_kernel_manager(job),
        timeout=cell_timeout,
        allow_errors=True,
        interrupt_on_timeout=True,
        startup_timeout=job.get("startup_timeout", 120),
        error_on_timeout={
            "ename": "CellTimeoutError",
            "evalue": f"the cell ran past the {cell_timeout} s limit",
            "traceback": [],
        },
        kernel_name="python3",
        record_timing=False,
        iopub_timeout=4,
        on_cell_executed=lambda cell, cell_index, execute_reply: replies.__setitem__(
            cell_index, execute_reply["content"]
        ),
        resources={"metadata": {"path": job.get("cwd") or os.getcwd()}},
    )
    try:
        async with client.async_setup_kernel():
            from jupyter_client.manager import AsyncKernelManager

            km, kc = client.km, client.kc  # typed Optional: the setup above started both
            assert isinstance(km, AsyncKernelManager) and kc is not None
            provisioner = getattr(km, "provisioner", None)
            emit({"kernel_pid": getattr(provisioner, "pid", None)})
            kc.allow_stdin = True  # the replay requests come over the input channel
            lost = _watch_output_channel(kc)
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
                    emit(
                        {
                            "index": index,
                            "status": "died",
                            "ename": "DeadKernelError",
                            "evalue": "the kernel died while running this cell",
                            "text": "",
                            **_records_of(records, index),
                        }
                    )
                    return
                finally:
                    stdin.cancel()
                reply = replies.pop(index, {})
                errors = [o for o in cell.outputs if o.get("output_type") == "error"]
                failed = reply.get("status") == "error" or bool(errors)
                timed_out = reply.get("ename") == "CellTimeoutError"
                # a timeout is reported in the reply; the kernel's own output says KeyboardInterrupt
                first = reply if timed_out or not errors else errors[0]
                result = {
                    "index": index,
                    "status": "error" if failed else "ok",
                    "ename": str(first.get("ename", ""))[:200] if failed else "",
                    "evalue": str(first.get("evalue", ""))[:2000] if failed else "",
                    "text": _excerpt(cell.outputs, max_output),
                    **_records_of(records, index),
                }
                if calls_log:
                    result["replay_size"] = os.path.getsize(calls_log) if os.path.isfile(calls_log) else 0
                budget.take_outputs(cell.outputs)
                cell.outputs = []  # sent (the excerpt): nothing of a finished cell is kept
                client._display_id_map.clear()
                if await lost():
                    # the socket refused a message over the cap and dropped the connection: what
                    # the kernel sends from now on (records included) never arrives, so stop here
                    result.update(
                        status="error",
                        ename="OutputTooLarge",
                        evalue=(
                            f"the cell sent a message over the {MAX_MESSAGE_BYTES // 2**20} MiB cap; "
                            "the output channel was closed and the notebook stopped here"
                        ),
                    )
                    emit(result)
                    await km.shutdown_kernel(now=True)
                    return
                if budget.exceeded:
                    # the notebook's caps: this cell fails, the kernel stops, no later cell counts
                    result.update(
                        status="error",
                        ename="NotebookCapReached",
                        evalue=f"the notebook passed its cap on {budget.exceeded}",
                        notebook_cap=budget.exceeded,
                    )
                    emit(result)
                    await km.shutdown_kernel(now=True)
                    return
                failed_before = failed
                if timed_out and await _is_stuck(client):
                    result["stuck"] = True
                    emit(result)
                    await km.shutdown_kernel(now=True)
                    return
                emit(result)
    except DeadKernelError:
        return  # reported above, or the kernel died while shutting down
    except RuntimeError as exc:  # the kernel never started
        emit({"start_error": str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__})


def _records_of(records: dict[int, CellRecords], index: int) -> dict[str, Any]:
    cell = records.pop(index, None)  # sent with the cell's result: not kept after it
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
    # this process's peak resident memory (KiB), for the grader's records and the tests
    emit({"done": True, "maxrss_kb": peak_rss_kb()})
    return 0


if __name__ == "__main__":
    sys.exit(main())

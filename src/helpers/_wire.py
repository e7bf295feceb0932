"""The contract between a graded kernel and the grader, written once: both sides import it.

The names below are everything the kernel side (:mod:`helpers.checks`, :mod:`helpers._records`,
:mod:`helpers._grading`) and the grader side (:mod:`trainperf.grading.sandbox`, which starts the
kernel, :mod:`trainperf.grading.client`, which drives it, and :mod:`trainperf.grading.replay`)
must agree on: the environment variables the grader sets in the kernel, the MIME type of a
hidden check's record, and the replay request and reply. Standard library only: the grading
client and the kernel's first lines import it.

**Environment** (set by the grader in the kernel it starts):

* :data:`RECORD_ENV` = ``"1"``: hidden checks record instead of comparing;
* :data:`REPLAY_FOLDER_ENV` and :data:`REPLAY_WRITE_ENV`: the reference run records its trusted
  calls of an exercise's helpers to that folder;
* :data:`REPLAY_CLIENT_ENV`: a graded run; a stubbed helper asks the client (below);
* :data:`COMPILE_SEED_ENV`: a read-only torch.compile cache the kernel copies before it starts.

**Records**: display data of type :data:`RECORD_MIME`, taken out of the cell's outputs by the
client (:mod:`helpers._records`).

**Replay** over the kernel's input channel: a stubbed helper in the graded kernel asks the
grading client for a recorded result with an ``input()`` request
(``helpers._grading._Replay.lookup``); the client answers it
(``trainperf.grading.replay.Server``).

* request: :data:`PROMPT` followed by JSON ``{"id": ..., "name": ..., "key": ...}``; ``id`` is a
  fresh random id per request (:func:`new_id`);
* reply: ``"<id> <base64 of the pickled result>"``, or ``"<id> "`` when there is nothing to
  replay. The kernel takes a reply only when its id is the id of the request it sent
  (:func:`parse_reply`), so a reply never reaches a request it was not written for.
"""

from __future__ import annotations

import hmac
import json
import re
import secrets

RECORD_MIME = "application/vnd.trainperf.record+json"  # a hidden check's record, as display data
RECORD_ENV = "TRAINPERF_RECORD_HIDDEN"  # "1": hidden checks record instead of comparing
REPLAY_FOLDER_ENV = "TRAINPERF_REPLAY"  # reference run: the folder its trusted calls go to
REPLAY_WRITE_ENV = "TRAINPERF_REPLAY_WRITE"  # reference run: record the trusted calls
REPLAY_CLIENT_ENV = "TRAINPERF_REPLAY_CLIENT"  # graded run: stubs ask the client for results
COMPILE_SEED_ENV = "TRAINPERF_COMPILE_SEED"  # a compile cache the kernel starts from

PROMPT = "\x00trainperf-replay "  # an input() prompt the grading client answers
_ID = re.compile(r"^[0-9a-f]{32}$")
_MAX_TEXT = 4096  # a helper's qualified name, an arguments key (a sha256 in hex)


def new_id() -> str:
    """A fresh request id: 32 hex digits."""
    return secrets.token_hex(16)


def request(request_id: str, name: str, key: str) -> str:
    """The prompt the kernel sends for one replay request."""
    return PROMPT + json.dumps({"id": request_id, "name": name, "key": key})


def parse_request(prompt: object) -> tuple[str, str, str] | None:
    """``(id, name, key)`` of a replay request, or None when ``prompt`` is not a well-formed one
    (it comes from the learner's kernel: any value, any shape)."""
    if not isinstance(prompt, str) or not prompt.startswith(PROMPT):
        return None
    try:
        fields = json.loads(prompt[len(PROMPT) :])
    except (ValueError, RecursionError):
        return None
    if not isinstance(fields, dict):
        return None
    request_id, name, key = fields.get("id"), fields.get("name"), fields.get("key")
    if not (isinstance(request_id, str) and _ID.match(request_id)):
        return None
    if not (
        isinstance(name, str) and isinstance(key, str) and len(name) <= _MAX_TEXT and len(key) <= _MAX_TEXT
    ):
        return None
    return request_id, name, key


def reply(request_id: str, payload: str) -> str:
    """The client's answer to request ``request_id``: ``payload`` is base64, '' for nothing."""
    return f"{request_id} {payload}"


def parse_reply(request_id: str, answer: object) -> str | None:
    """The base64 payload of ``answer`` when it answers request ``request_id`` and carries a
    result; None otherwise (another request's reply, nothing to replay, not a reply)."""
    if not isinstance(answer, str):
        return None
    got, sep, payload = answer.partition(" ")
    if not sep or not payload or not hmac.compare_digest(got.encode(), request_id.encode()):
        return None
    return payload

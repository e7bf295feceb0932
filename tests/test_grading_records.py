"""What the learner's kernel sends is checked before trusted code reads it (issue "grading round 4").

Items 5 and 6: every field of every record and event the kernel can send (hidden-check records,
visible-check and blocked-call events, and the per-cell results around them), with every wrong
type, is a failed check (or an ignored event) with its reason — never an exception in
:func:`trainperf.grading.exam.score`, :func:`~trainperf.grading.exam.feedback` or the reason
column (``grade._reasons``), and never quoted back. And replay replies are tied to their
request (:mod:`helpers._wire`): the client echoes the request's id, the kernel takes only a
reply with its own id, and one lookup at a time.
"""

from __future__ import annotations

import base64
import copy
import math
import pickle
import threading
import time
from typing import Any

import pytest
from gradekit import REFERENCE, one_cell_exam

from helpers import _grading, _records, _wire, checks
from trainperf.grading import replay
from trainperf.grading.exam import _valid_check_record, _valid_event, feedback, score
from trainperf.grading.grade import Limits, _reasons
from trainperf.grading.sandbox import Execution

SECRET = "SECRET-7f3a"  # in every bad value that can carry text: it must never reach a reason


def _nested(depth: int) -> Any:
    value: Any = SECRET
    for _ in range(depth):
        value = [value]
    return value


BAD: dict[str, Any] = {
    "none": None,
    "int": 7,
    "negative": -3,
    "float": 3.5,
    "nan": math.nan,
    "inf": math.inf,
    "list": [1, SECRET],
    "dict": {SECRET: [1]},
    "str": SECRET,
    "bool": True,
    "huge-str": SECRET * (2 * _records.MAX_RECORD_BYTES // len(SECRET)),
    "huge-int": 10**400,
    "nested": _nested(60),
}
MISSING = object()  # the field left out


def _is_text(v: Any, cap: int) -> bool:
    return type(v) is str and len(v) <= cap


def _is_tolerance(v: Any) -> bool:
    if type(v) is int:
        return 0 <= v and v.bit_length() <= 1024
    return type(v) is float and math.isfinite(v) and v >= 0


# what an honest kernel may send in each field: a bad value that is one of these is no bad value
CHECK_FIELDS = {
    "what": None,
    "kind": None,  # a wrong label or kind is still a reason: see below
    "rtol": _is_tolerance,
    "atol": _is_tolerance,
    "error": None,
}
VISIBLE_FIELDS = {
    "event": None,
    "what": lambda v: _is_text(v, 10_000),
    "ok": lambda v: type(v) is bool,
    "shown": None,
    "hint": lambda v: _is_text(v, 10_000),
    "none": lambda v: type(v) is bool,
    # the learner's own answer, as the notebook showed it: shown on the feedback page when short
    "got": lambda v: type(v) is str and len(v) <= checks.GOT_CHARS and "\n" not in v,
    # the answer's type and its kind ("number", "list", ...): named on the feedback page
    "type": lambda v: type(v) is str and v.isidentifier() and v.isascii() and len(v) <= checks.TYPE_CHARS,
    "family": lambda v: type(v) is str and v.isidentifier() and v.isascii() and len(v) <= checks.TYPE_CHARS,
}
SHOWN_FIELDS = {
    "kind": lambda v: _is_text(v, 10_000),
    "expected": lambda v: _is_text(v, 10_000),
    "rtol": _is_tolerance,
}
BLOCKED_FIELDS = {"event": None, "helper": lambda v: _is_text(v, 10_000)}  # a name not in exercises: ignored
RESULT_FIELDS = {
    "status": None,
    "ename": lambda v: type(v) is str,
    "evalue": lambda v: type(v) is str,
    "text": lambda v: type(v) is str,
    "records": None,
    "records_overflow": lambda v: type(v) is str,
    "notebook_cap": lambda v: type(v) is str,
    "stuck": lambda v: type(v) is bool,
    "index": lambda v: type(v) is int and v >= 0,
    "replay_size": lambda v: type(v) is int and v >= 0,
}


def _cases(fields: dict[str, Any], missing_is_bad: set[str] = frozenset()) -> list[Any]:
    out = []
    for name, valid in fields.items():
        for label, value in [*BAD.items(), ("missing", MISSING)]:
            if value is MISSING and name not in missing_is_bad:
                continue
            if value is not MISSING and valid is not None and valid(value):
                continue
            out.append(pytest.param(name, value, id=f"{name}-{label}"))
    return out


EXERCISES = {"helpers.m.f": "exercise 1"}
VISIBLE_EVENT = {
    "event": "visible",
    "what": "visible",
    "ok": True,
    "shown": {"kind": "equal", "expected": "3", "rtol": 0.0},
    "hint": "count them",
    "none": False,
}
SHOWN = {
    "index": 3,
    "status": "ok",
    "ename": "",
    "evalue": "",
    "text": "✓ visible\n",
    "records": [VISIBLE_EVENT],
}
HIDDEN = {
    "index": 4,
    "status": "ok",
    "ename": "",
    "evalue": "",
    "text": "",
    "records": [
        {"what": "a", "kind": "close", "rtol": 1e-3, "atol": 0.0, "value": 10.0},
        {"what": "b", "kind": "one_of", "rtol": 1e-6, "atol": 0.0, "value": "x"},
    ],
}
ANSWER = {"index": 2, "status": "ok", "ename": "", "evalue": "", "text": ""}


def _grade(shown: Any = MISSING, hidden: Any = MISSING, answer: Any = MISSING):
    """score, feedback and the reason column for one notebook; none of them may raise."""
    records = {
        2: copy.deepcopy(ANSWER) if answer is MISSING else answer,
        3: copy.deepcopy(SHOWN) if shown is MISSING else shown,
        4: copy.deepcopy(HIDDEN) if hidden is MISSING else hidden,
    }
    verdict = score(one_cell_exam(), records, REFERENCE, EXERCISES)[0]
    feedback("en", records[3], REFERENCE["ex1_test#visible"], EXERCISES)
    feedback("zh", records[3], REFERENCE["ex1_test#visible"], EXERCISES)
    reasons = _reasons(
        [], [verdict], Execution(records=records, finished=True), Limits(), {"ex1": 2}, EXERCISES
    )
    assert SECRET not in " ".join(verdict.problems) + verdict.visible + " ".join(reasons)
    return verdict, reasons


def _set(fields: dict[str, Any], name: str, value: Any) -> None:
    if value is MISSING:
        fields.pop(name, None)
    else:
        fields[name] = copy.deepcopy(value)


def test_an_honest_notebook_has_full_points_and_no_reason():
    verdict, reasons = _grade()
    assert (verdict.points, verdict.status, verdict.problems, reasons) == (2.0, "ok", [], [])
    assert verdict.visible == "✓ visible"


@pytest.mark.parametrize("field, value", _cases(CHECK_FIELDS, {"what"}))
def test_a_malformed_hidden_check_record_is_a_failed_check_with_its_reason(field, value):
    hidden = copy.deepcopy(HIDDEN)
    _set(hidden["records"][0], field, value)
    verdict, reasons = _grade(hidden=hidden)
    assert verdict.points == 0 and verdict.hidden_failed >= 1
    assert any(p.startswith("hidden check 1 ") for p in verdict.problems), verdict.problems
    assert any(r.startswith("ex1_test: hidden check 1 ") for r in reasons), reasons


@pytest.mark.parametrize(
    "value", [pytest.param(v, id=k) for k, v in BAD.items()] + [pytest.param(MISSING, id="missing")]
)
def test_a_hidden_checks_value_is_compared_or_refused_never_trusted(value):
    hidden = copy.deepcopy(HIDDEN)
    _set(hidden["records"][0], "value", value)
    verdict, _ = _grade(hidden=hidden)
    assert verdict.points == 0  # plain data of the wrong value is a wrong answer, no more
    if (
        value is MISSING
        or (type(value) is int and value.bit_length() > 1024)
        or value is BAD["nested"]
        or value is BAD["huge-str"]
    ):
        assert any("hidden check 1 is malformed" in p for p in verdict.problems), verdict.problems


@pytest.mark.parametrize(
    "record",
    [pytest.param(v, id=k) for k, v in BAD.items()]
    + [pytest.param({**HIDDEN["records"][0], "expected": 10.0}, id="extra-field")],
)
def test_a_record_that_is_not_a_hidden_check_record_fails_the_cell(record):
    hidden = copy.deepcopy(HIDDEN)
    hidden["records"][0] = record
    verdict, reasons = _grade(hidden=hidden)
    assert verdict.points == 0 and verdict.problems and reasons


def test_a_record_for_another_check_says_so():
    hidden = copy.deepcopy(HIDDEN)
    hidden["records"].reverse()
    verdict, _ = _grade(hidden=hidden)
    assert verdict.points == 0
    assert "hidden check 1 is not the check the reference recorded there" in verdict.problems


def _cases_visible() -> list[Any]:
    out = _cases(VISIBLE_FIELDS, {"ok"})
    out += [
        pytest.param(f"shown.{p.values[0]}", p.values[1], id=f"shown.{p.id}") for p in _cases(SHOWN_FIELDS)
    ]
    return [*out, pytest.param("extra", 1, id="extra-field")]


@pytest.mark.parametrize("field, value", _cases_visible())
def test_a_malformed_visible_event_is_ignored_with_its_reason(field, value):
    shown = copy.deepcopy(SHOWN)
    event = shown["records"][0]
    if field.startswith("shown."):
        _set(event["shown"], field.split(".", 1)[1], value)
    else:
        _set(event, field, value)
    verdict, reasons = _grade(shown=shown)
    assert verdict.points == 2.0  # it only ever wrote feedback: ignored, the cell scores as before
    assert "✓" not in verdict.visible  # and no verdict is taken from it
    assert any("ignored" in p for p in verdict.problems), verdict.problems
    assert any(r.startswith("ex1_test: ") for r in reasons), reasons


@pytest.mark.parametrize("where", ["visible", "hidden", "answer"])
@pytest.mark.parametrize(
    "field, value", [*_cases(BLOCKED_FIELDS, {"helper"}), pytest.param("extra", 1, id="extra-field")]
)
def test_a_malformed_blocked_call_event_is_ignored_with_its_reason(field, value, where):
    event = {"event": "blocked-call", "helper": "helpers.m.f"}
    _set(event, field, value)
    parts = {
        "visible": copy.deepcopy(SHOWN),
        "hidden": copy.deepcopy(HIDDEN),
        "answer": copy.deepcopy(ANSWER),
    }
    parts[where].setdefault("records", []).append(event)
    verdict, reasons = _grade(parts["visible"], parts["hidden"], parts["answer"])
    assert verdict.points == 2.0
    assert not any("switched-off" in r for r in reasons)  # not taken for a call of helpers.m.f
    joined = "; ".join(reasons)
    assert "ignored" in joined, reasons
    # in a failed visible part, the feedback does not take it either
    parts["visible"].update(status="error", ename="RuntimeError")
    verdict, _ = _grade(parts["visible"], parts["hidden"], parts["answer"])
    assert verdict.points == 0 and "exercise 1" not in verdict.visible


def test_a_blocked_call_whose_helper_is_a_list_is_no_crash():
    """The case found: a set of mixed types was sorted in the reason column."""
    shown = copy.deepcopy(SHOWN)
    shown.update(status="error", ename="RuntimeError")
    shown["records"] += [
        {"event": "blocked-call", "helper": ["helpers.m.f", 1]},
        {"event": "blocked-call", "helper": "helpers.m.f"},
    ]
    verdict, reasons = _grade(shown=shown)
    assert verdict.points == 0
    assert verdict.visible.endswith("RuntimeError: helpers.m.f is exercise 1: write it yourself.")
    assert "called switched-off helper(s) helpers.m.f — review" in reasons


@pytest.mark.parametrize("part", ["visible", "hidden"])
@pytest.mark.parametrize("field, value", _cases(RESULT_FIELDS, {"status"}))
def test_a_malformed_cell_result_fails_the_cell_with_its_reason(field, value, part):
    result = copy.deepcopy(SHOWN if part == "visible" else HIDDEN)
    _set(result, field, value)
    verdict, reasons = _grade(**{"shown" if part == "visible" else "hidden": result})
    assert verdict.points == 0 and verdict.problems, verdict
    assert any(r.startswith("ex1_test: ") for r in reasons), reasons


@pytest.mark.parametrize("field, value", _cases(RESULT_FIELDS, {"status"}))
def test_a_malformed_answer_cell_result_is_a_reason(field, value):
    answer = copy.deepcopy(ANSWER)
    _set(answer, field, value)
    verdict, reasons = _grade(answer=answer)
    assert verdict.points == 2.0  # an answer cell is not scored; what it sent is named
    assert any(r.startswith("the kernel sent data the grader could not use") for r in reasons), reasons


@pytest.mark.parametrize("result", [pytest.param(v, id=k) for k, v in BAD.items()])
def test_a_cell_result_that_is_not_an_object_fails_the_cell(result):
    verdict, reasons = _grade(hidden=result)
    assert verdict.points == 0 and verdict.problems and reasons


def test_the_validators_accept_what_the_checks_send(monkeypatch):
    """The honest shapes, as helpers.checks emits them, pass both validators."""
    emitted: list[dict[str, Any]] = []
    monkeypatch.setenv(_records.RECORD_ENV, "1")
    monkeypatch.setattr(_records, "emit", emitted.append)
    checks.hidden.close([1.0, math.inf], "c", expect=None, rtol=0.01)
    checks.hidden.equal({"k": None}, "e", expect=None)
    checks.hidden.one_of("x", "o", expect=None)
    checks.hidden.close(object(), "n", expect=None)  # not plain data: a record with an error
    checks.close(1.0, 1.0, "v", rtol=1e-3, quiet=True)
    checks.equal(3, 3, "w", quiet=True)
    checks.at_most(2, 3, "m", quiet=True)
    checks.one_of("a", ["a", "b"], "p")
    with pytest.raises(checks.CheckFailed):
        checks.close(None, 1.0, "v")
    with pytest.raises(RuntimeError):
        checks.removed_for_grading("helpers.m.f", 1)
    records = [r for r in emitted if "event" not in r]
    events = [r for r in emitted if "event" in r]
    assert len(records) == 4 and len(events) == 6
    assert [_valid_check_record(r) for r in records] == [None] * 4
    assert [_valid_event(e) for e in events] == [None] * 6


# ---- item 6: replay replies are tied to their request ------------------------------------------


def _server(*calls: tuple[str, dict, Any]) -> replay.Server:
    entries = [
        (i + 1, name, _grading._Replay.key(name, (), args), pickle.dumps(result))
        for i, (name, args, result) in enumerate(calls)
    ]
    table = replay.build_table(entries, [("teach:c", len(entries))])
    return replay.Server(table, {})


def _result(request_id: str, reply: str) -> Any:
    payload = _wire.parse_reply(request_id, reply)
    return None if payload is None else pickle.loads(base64.b64decode(payload))


def test_the_prompt_is_written_once():
    assert replay.PROMPT is _wire.PROMPT and checks.REPLAY_PROMPT is _wire.PROMPT


def test_a_reply_carries_its_requests_id_and_only_that_id_takes_it():
    server = _server(("helpers.m.f", {"x": 1}, "one"), ("helpers.m.f", {"x": 2}, "two"))
    a, b = _wire.new_id(), _wire.new_id()
    assert a != b and len(a) == 32
    ask = lambda rid, x: _wire.request(rid, "helpers.m.f", _grading._Replay.key("helpers.m.f", (), {"x": x}))  # noqa: E731
    # two requests in flight at once, their replies arriving crossed
    reply_a, reply_b = server.answer("teach:c", ask(a, 1)), server.answer("teach:c", ask(b, 2))
    assert reply_a.startswith(a + " ") and reply_b.startswith(b + " ")
    assert _result(a, reply_b) is None and _result(b, reply_a) is None  # never another's answer
    assert (_result(a, reply_a), _result(b, reply_b)) == ("one", "two")
    # nothing to replay: the id and no payload, which the kernel takes for "not found"
    missing = server.answer("teach:c", ask(a, 3))
    assert missing == a + " " and _wire.parse_reply(a, missing) is None


@pytest.mark.parametrize("answer", ["", "nospace", " payload", "0" * 32, None, 7, ["x"], b"x y"])
def test_the_kernel_refuses_what_is_not_a_reply_to_its_request(answer):
    assert _wire.parse_reply("0" * 32, answer) is None


@pytest.mark.parametrize(
    "prompt",
    [
        None,
        7,
        ["x"],
        "",
        "an ordinary input() prompt",
        _wire.PROMPT,
        _wire.PROMPT + "{not json",
        _wire.PROMPT + "[" * 100_000,
        _wire.PROMPT + "[1, 2]",
        _wire.PROMPT + '{"name": "helpers.m.f", "key": "k"}',  # no id
        _wire.PROMPT + '{"id": "short", "name": "helpers.m.f", "key": "k"}',
        _wire.PROMPT + '{"id": ["x"], "name": "helpers.m.f", "key": "k"}',
        _wire.PROMPT + '{"id": "' + "0" * 32 + '", "name": ["helpers.m.f"], "key": "k"}',
        _wire.PROMPT + '{"id": "' + "0" * 32 + '", "name": "helpers.m.f", "key": {"k": 1}}',
    ],
)
def test_the_client_refuses_a_malformed_request_without_an_exception(prompt):
    server = _server(("helpers.m.f", {"x": 1}, "one"))
    assert server.answer("teach:c", prompt) == "" and server.refused == 1


class _Channel:
    """A kernel's input channel shared by threads: a reply answers the latest prompt sent, so
    two requests in flight at once would get each other's replies."""

    def __init__(self, server: replay.Server, tamper: bool = False) -> None:
        self.server, self.tamper = server, tamper
        self.guard = threading.Lock()
        self.inside = self.most_inside = 0
        self.last = ""

    def raw_input(self, prompt: str) -> str:
        with self.guard:
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
            self.last = prompt
        time.sleep(0.02)
        with self.guard:
            self.inside -= 1
            answer = self.server.answer("teach:c", self.last)
        if self.tamper:  # a reply written for some other request
            answer = _wire.reply(_wire.new_id(), answer.partition(" ")[2])
        return answer


def _kernel(monkeypatch, channel: _Channel) -> _grading._Replay:
    import IPython

    shell = type("Shell", (), {"kernel": channel})()
    monkeypatch.setattr(IPython, "get_ipython", lambda: shell)
    monkeypatch.setenv(_wire.REPLAY_CLIENT_ENV, "1")
    return _grading._Replay()


def test_concurrent_lookups_each_get_their_own_result(monkeypatch):
    values = {x: f"result {x}" for x in range(6)}
    channel = _Channel(_server(*[("helpers.m.f", {"x": x}, v) for x, v in values.items()]))
    kernel = _kernel(monkeypatch, channel)
    got: dict[int, Any] = {}

    def look(x: int) -> None:
        got[x] = kernel.lookup("helpers.m.f", (), {"x": x})

    threads = [threading.Thread(target=look, args=(x,)) for x in values]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert got == {x: (True, v) for x, v in values.items()}
    assert channel.most_inside == 1  # one request on the channel at a time


def test_a_lookup_refuses_a_reply_with_another_id(monkeypatch):
    kernel = _kernel(monkeypatch, _Channel(_server(("helpers.m.f", {"x": 1}, "one")), tamper=True))
    assert kernel.lookup("helpers.m.f", (), {"x": 1}) == (False, None)
    kernel = _kernel(monkeypatch, _Channel(_server(("helpers.m.f", {"x": 1}, "one"))))
    assert kernel.lookup("helpers.m.f", (), {"x": 1}) == (True, "one")


def test_a_failed_visible_check_shows_expected_got_and_hint_as_the_notebook_does():
    """The feedback page says what the notebook said: the expected value and hint from the
    reference run, and the learner's own answer (at most checks.GOT_CHARS characters) from
    the kernel; never a hidden check's expected value (hidden records give no words)."""
    shown = copy.deepcopy(SHOWN)
    shown["status"], shown["ename"] = "error", "CheckFailed"
    shown["records"][0] |= {"ok": False, "got": "5"}
    text = feedback("en", shown, REFERENCE["ex1_test#visible"], EXERCISES)
    assert "expected 3, got 5." in text and "Hint: count them" in text, text
    assert "得到 5" in feedback("zh", shown, REFERENCE["ex1_test#visible"], EXERCISES)
    shown["records"][0]["got"] = "x" * (checks.GOT_CHARS + 1)  # longer than the checks send
    verdict, _ = _grade(shown=shown)
    assert "x" * 10 not in verdict.visible and any("ignored" in p for p in verdict.problems)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_wrong_type_answer_is_named_by_its_type_on_the_feedback_page(lang):
    """What a learner's kernel sends about a failed check's answer: its type (of_type names it)
    and its kind, which the grader compares with the kind of the reference's right answer (a
    string where a number is asked): the page says both types, as the notebook does."""
    from helpers.i18n import tr_in

    def page(shown: dict[str, Any], event: dict[str, Any], family: str | None = None) -> str:
        reference = [
            {"what": "visible", "shown": shown, "hint": "", **({"family": family} if family else {})}
        ]
        result = {**copy.deepcopy(SHOWN), "status": "error", "ename": "CheckFailed"}
        result["records"] = [{**VISIBLE_EVENT, "shown": shown, "ok": False, **event}]
        return feedback(lang, result, reference, EXERCISES)

    def a(name: str) -> str:
        return tr_in(lang, "a `{name}`", name=name).strip()

    text = page({"kind": "type", "expected": "dict"}, {"got": "[1, 2]", "type": "list", "family": "list"})
    want = tr_in(lang, "{kind}: {value}", kind=a("list"), value="[1, 2]")
    assert want in text and a("dict") in text, text
    text = page(
        {"kind": "equal", "expected": "5"}, {"got": "'normal'", "type": "str", "family": "str"}, "number"
    )
    note = tr_in(
        lang,
        " Your answer is {got}, where {expected} is expected.",
        got=tr_in(lang, "a `{name}`", name="str"),
        expected=tr_in(lang, "a number (`int` or `float`)"),
    )
    assert note in text, text
    # the same kind as the right answer, or an event of an older grader: no sentence about types
    for family in ("str", None):
        text = page(
            {"kind": "equal", "expected": "'x'"}, {"got": "'y'", "type": "str", "family": "str"}, family
        )
        assert {"en": "Your answer is", "zh": "你的答案是"}[lang] not in text, text
    # a name that is not a type name is no event the checks send: the event is ignored
    text = page({"kind": "type", "expected": "dict"}, {"got": "[1]", "type": "<b>list</b>"})
    assert "<b>" not in text and "[1]" not in text, text

"""Friendly checks for exercise cells.

**Visible checks** (:func:`close`, :func:`equal`, :func:`one_of`, :func:`at_most`, and
:func:`of_type` for the type, keys or length of an answer before its values) compare on the
spot: each prints one line starting with a tick when the answer is right, and raises
:class:`CheckFailed` (an ``AssertionError``, so nbgrader scores the cell 0) with one or two
lines saying what was expected, what was got, and a hint when it is wrong.

**Hidden checks** (``hidden.close``, ``hidden.equal``, ``hidden.one_of``) are what grading
relies on. Their expected side is a zero-argument function, ``expect=lambda: ...``:

- under ``trainperf grade`` the grader removes every ``expect=`` before the learner's kernel
  sees the cell, so no expected value ever exists in that process; the check only turns the
  answer into plain data and records it, and the grading process compares it with what the
  reference solution recorded for the same check (:mod:`helpers._records`);
- in the reference run the grader checks the solution against ``expect()`` and records both;
- anywhere else (stock ``nbgrader autograde``, a learner's own kernel) the check calls
  ``expect()`` and compares in the kernel, like a visible check — weaker, but never a pass
  without a comparison.

The grading machinery that also runs in the learner's kernel (switching a helper off in a
hidden test, replaying the reference run's helper results) lives in :mod:`helpers._grading`;
its names that hidden tests, the stubs and the grader use are re-exported here unchanged:
:func:`blocked`, :func:`fingerprint`, :func:`removed_for_grading`, :func:`recorded_for_grading`
and :data:`REPLAY_PROMPT`.
"""

from __future__ import annotations

import math
import os
import types
from collections.abc import Callable, Iterable
from typing import Any

from . import _records, _wire
from ._grading import blocked as blocked
from ._grading import evaluating_expected as _evaluating_expected
from ._grading import fingerprint as fingerprint
from ._grading import recorded_for_grading as recorded_for_grading
from ._grading import removed_for_grading as removed_for_grading
from ._validate import flag as _flag
from .i18n import language, text, tr, tr_in

_COURSE = os.path.dirname(os.path.abspath(__file__))  # the helpers package: the course's own code


def _learner_frames(tb: types.TracebackType | None) -> types.TracebackType | None:
    """``tb`` without the course's frames at its end (the check that raised, ``_fail``): what
    is left ends in the learner's code, the cell or function that called the check. A new
    chain is built; the exception's own traceback is left as it is."""
    entries = []
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    while entries and os.path.abspath(entries[-1].tb_frame.f_code.co_filename).startswith(_COURSE + os.sep):
        entries.pop()
    kept = None
    for entry in reversed(entries):
        kept = types.TracebackType(kept, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return kept


class CheckFailed(AssertionError):
    """A wrong answer. The message is meant for the learner, not for a developer.

    A notebook (IPython) shows it with the learner's own frames and the message, never the
    course's frames under them (:meth:`_render_traceback_`). It is still an ``AssertionError``
    raised in the cell, so nbgrader scores the cell 0 and pytest reports it as usual."""

    def _render_traceback_(self) -> list[str]:
        """The lines IPython shows for this error (IPython's hook for an exception that shows
        itself): each notebook cell the check was called from, with its line, then the
        message, all in the notebook's language. The course's frames, IPython's and any other
        file's are left out, and so are IPython's English header lines."""
        shown = [f"{type(self).__name__}: {self}"]
        try:
            from IPython import get_ipython

            shell = get_ipython()
            if shell is None:
                return shown
            cells = _cell_frames(_learner_frames(self.__traceback__), shell)
        except Exception:  # noqa: BLE001 — never lose the message over how it is shown
            return shown
        return [*cells, "", *shown] if cells else shown


def _cell_frames(tb: types.TracebackType | None, shell: Any) -> list[str]:
    """For each frame of ``tb`` in a notebook cell: "Cell In[n], line k" and the line's code."""
    import linecache

    counts = getattr(getattr(shell, "compile", None), "_filename_map", {})  # file -> In[n]
    lines = []
    while tb is not None:
        filename, number = tb.tb_frame.f_code.co_filename, tb.tb_lineno
        if filename in counts:
            lines.append(tr("Cell In[{count}], line {line}", count=counts[filename], line=number))
            code = linecache.getline(filename, number).rstrip()
            if code:
                lines.append(f"----> {number} {code.strip()}")
        tb = tb.tb_next
    return lines


def _fmt(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 10_000 else str(value)
    if isinstance(value, float):
        if value == 0 or math.isnan(value) or math.isinf(value):
            return repr(value)
        if 1e-3 <= abs(value) < 1e5:
            return f"{value:.6g}"
        return f"{value:.4e}"
    return repr(value)


def _family(value: Any) -> str:
    """What kind of answer ``value`` is, as a check compares it: ``"number"`` (an int or a
    float, NumPy's included, never a bool), ``"list"`` (a list or a tuple: the checks take
    either), else its type's name."""
    import numbers

    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return "number"
    if not isinstance(value, (str, bytes, bool, list, tuple, dict)) and hasattr(value, "__float__"):
        try:  # a one-element tensor or array: a close check takes it as its number
            float(value)
            return "number"
        except (TypeError, ValueError, RuntimeError):
            pass
    if isinstance(value, (list, tuple)):
        return "list"
    if isinstance(value, str):  # NumPy's str_ too
        return "str"
    return type(value).__name__


def _kind_words(family: str, lang: str | None = None) -> str:
    """A kind of answer in words, in the notebook's language (``lang`` for the grader)."""
    lang = lang or language()
    if family == "number":
        return tr_in(lang, "a number (`int` or `float`)")
    if family == "list":
        return tr_in(lang, "a `list` or `tuple`")
    return tr_in(lang, "a `{name}`", name=family)


def _type_note(expected: Any, got: Any) -> str:
    """A sentence naming the answer's type and the type the check expects, when they differ
    (a string where a number is asked, a list where a dict is); empty when they agree."""
    want, have = _family(expected), _family(got)
    if want == have or got is None or expected is None:
        return ""
    # the answer by its own type (a `list`, a `tuple`), a number as a number
    got_words = _kind_words(have) if have == "number" else tr("a `{name}`", name=type(got).__name__)
    return tr(
        " Your answer is {got}, where {expected} is expected.", got=got_words, expected=_kind_words(want)
    )


def _real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _fmt_pair(expected: Any, got: Any) -> tuple[str, str] | None:
    """Expected and got in ONE number format, so they can be read side by side (not
    ``31,406,250,000`` against ``6.0938e+10``); None when either is not a finite number."""
    if not (_real(expected) and _real(got)):
        return None
    if all(float(v).is_integer() and abs(v) < 1e18 for v in (expected, got)):
        shown_expected, shown_got = (
            f"{int(v):,}" if abs(v) >= 10_000 else str(int(v)) for v in (expected, got)
        )
        return shown_expected, shown_got
    largest = max(abs(expected), abs(got))
    if all(v == 0 or 1e-3 <= abs(v) for v in (expected, got)) and largest < 1e5:
        return f"{expected:.6g}", f"{got:.6g}"
    return f"{expected:.4e}", f"{got:.4e}"


def expected_text(shown: dict[str, Any], lang: str | None = None) -> str:
    """What a visible check expected, in words: ``shown`` is ``{"kind", "expected", "rtol"}``
    with the expected side already formatted. The learner's kernel says it in the notebook's
    language; the grading process says it for a submission's feedback (``lang``)."""
    lang = lang or language()
    kind, expected = shown.get("kind"), str(shown.get("expected", ""))
    if kind == "one_of":
        return tr_in(lang, "one of {options}", options=expected)
    if kind == "type":  # of_type: the type names, ", " between
        names = (tr_in(lang, "a `{name}`", name=name).strip() for name in expected.split(", "))
        return tr_in(lang, " or ").join(names)
    if kind == "keys":
        return tr_in(lang, "the keys {keys}", keys=expected)
    if kind == "length":
        return tr_in(lang, "{count} items", count=expected)
    if kind == "at_most":
        return tr_in(lang, "at most {limit}", limit=expected)
    rtol = float(shown.get("rtol") or 0.0)
    within = tr_in(lang, " (within {rtol:.0%})", rtol=rtol) if kind == "close" and rtol >= 1e-3 else ""
    return expected + within


GOT_CHARS = 60  # the most of a learner's answer a feedback page shows (exam.feedback)


def _visible_event(
    what: str, ok: bool, shown: dict[str, Any], hint: str, got: Any = 0, none_allowed: bool = False
) -> None:
    """Under ``trainperf grade``: what a visible check decided, as data. The grader writes the
    feedback from these (and the reference run's labels), never from what the kernel prints;
    a failed check also sends the learner's own answer as the notebook shows it, cut to
    ``GOT_CHARS`` (the grader checks the length)."""
    if _records.recording():
        event = {
            "event": "visible",
            "what": what,
            "ok": ok,
            "shown": shown,
            "hint": hint,
            "none": got is None and not none_allowed,
        }
        if not ok:
            shown_got = _fmt(got)
            event["got"] = shown_got if len(shown_got) <= GOT_CHARS else shown_got[: GOT_CHARS - 1] + "…"
        _records.emit(event)


def _fail(
    what: str,
    shown: dict[str, Any],
    got: Any,
    hint: str,
    visible: bool = True,
    expected_value: Any = None,
    none_allowed: bool = False,
    got_text: str | None = None,
) -> None:
    """Raise the learner's message; label and hint are shown in the notebook's language.
    With ``expected_value``, a number, expected and got are printed in one format, and an
    answer of another type gets a sentence naming both types. ``none_allowed``: None is a
    right answer somewhere in this check (the expected value, or one of the options), so a
    None answer is not a forgotten ``return``. ``got_text``: the answer as the message shows
    it, when not its value (the type, the keys or the length of_type found)."""
    __tracebackhide__ = True  # IPython and pytest hide this frame
    if visible:
        _visible_event(what, False, shown, hint, got, none_allowed)
    pair = _fmt_pair(expected_value, got) if shown.get("kind") in ("close", "equal", "at_most") else None
    if pair is not None:
        shown = {**shown, "expected": pair[0]}
    expected = expected_text(shown)
    if shown.get("kind") == "number":
        expected = tr(
            "a number{tolerance} ≈ {expected}",
            tolerance=_within(shown.get("rtol", 0.0)),
            expected=shown["expected"],
        )
    message = tr(
        "✗ {what}: expected {expected}, got {got}.",
        what=text(what),
        expected=expected,
        got=got_text if got_text is not None else pair[1] if pair is not None else _fmt(got),
    )
    if got is None and not none_allowed:
        message += tr(" Did your function `return` its result?")
    elif shown.get("kind") in ("close", "equal", "number", "at_most"):
        message += _type_note(expected_value, got)
    if hint:
        message += tr("\n  Hint: {hint}", hint=text(hint))
    raise CheckFailed(message)


def _ok(what: str, quiet: bool, shown: dict[str, Any], hint: str, label: str | None = None) -> None:
    _visible_event(what, True, shown, hint)
    if not quiet:
        print(f"✓ {label if label is not None else text(what)}")


def _within(rtol: float) -> str:
    return tr(" (within {rtol:.0%})", rtol=rtol) if rtol >= 1e-3 else ""


def close(
    got: Any,
    expected: float,
    what: str,
    *,
    rtol: float = 1e-6,
    atol: float = 0.0,
    hint: str = "",
    quiet: bool = False,
) -> None:
    """Check that a number is within ``rtol`` (relative) or ``atol`` of ``expected``."""
    _flag(quiet=quiet)
    __tracebackhide__ = True
    shown = {"kind": "close", "expected": _fmt(expected), "rtol": rtol}
    if isinstance(got, bool):  # True is not 1.0, as in hidden checks (helpers._records.compare)
        _fail(what, {**shown, "kind": "number"}, got, hint, expected_value=expected)
    try:
        value = float(got)
    except (TypeError, ValueError):
        _fail(what, {**shown, "kind": "number"}, got, hint, expected_value=expected)
    if math.isnan(value) or not math.isclose(value, expected, rel_tol=rtol, abs_tol=atol):
        _fail(what, shown, got, hint, expected_value=expected)
    _ok(what, quiet, shown, hint)


def equal(got: Any, expected: Any, what: str, *, hint: str = "", quiet: bool = False) -> None:
    """Check exact equality (for counts, labels and integers)."""
    _flag(quiet=quiet)
    __tracebackhide__ = True
    shown = {"kind": "equal", "expected": _fmt(expected)}
    if isinstance(got, str) and isinstance(expected, str):
        got_cmp, exp_cmp = got.strip().lower(), expected.strip().lower()
    else:
        got_cmp, exp_cmp = got, expected
    if isinstance(expected, bool) != isinstance(got, bool) or got_cmp != exp_cmp:
        _fail(what, shown, got, hint, expected_value=expected, none_allowed=expected is None)
    _ok(what, quiet, shown, hint)


def one_of(got: Any, allowed: Iterable[Any], what: str, *, hint: str = "") -> None:
    """Check that an answer is one of the allowed labels (a shape check before grading it)."""
    __tracebackhide__ = True
    options = list(allowed)
    shown = _options_shown(options)
    if got not in options:
        _fail(
            what,
            shown,
            got,
            hint,
            none_allowed=any(o is None for o in options),
            expected_value=options[0] if len(options) == 1 else None,
        )
    _visible_event(what, True, shown, hint)


def _options_shown(options: list[Any]) -> dict[str, Any]:
    """What a one-of check expected: one option is said as that value ("expected 'bf16'",
    not "expected one of 'bf16'"), several as a list of options."""
    if len(options) == 1:
        return {"kind": "equal", "expected": _fmt(options[0])}
    return {"kind": "one_of", "expected": ", ".join(_fmt(o) for o in options)}


def of_type(
    got: Any,
    expected_type: type | tuple[type, ...],
    what: str,
    *,
    keys: Iterable[str] | None = None,
    only: bool = False,
    length: int | None = None,
    hint: str = "",
    quiet: bool = False,
) -> None:
    """Check what kind of answer ``got`` is before its values are checked: an instance of
    ``expected_type`` (a tuple: any of them); a dict holding every one of ``keys`` (with
    ``only``, no other key); a sequence of ``length`` items. A failure names the type, the
    keys or the length the answer has, so a list where a dict is asked says so."""
    _flag(quiet=quiet, only=only)
    __tracebackhide__ = True
    types_ = expected_type if isinstance(expected_type, tuple) else (expected_type,)
    shown = {"kind": "type", "expected": ", ".join(t.__name__ for t in types_)}
    if not isinstance(got, types_) or (isinstance(got, bool) and bool not in types_):
        kind = tr("a `{name}`", name=type(got).__name__)
        shown_got = got_text = tr("{kind}: {value}", kind=kind.strip(), value=_fmt(got))
        if len(shown_got) > GOT_CHARS:
            got_text = shown_got[: GOT_CHARS - 1] + "…"
        _fail(what, shown, got, hint, got_text=got_text)
    if keys is not None:
        wanted = list(keys)
        have = list(got.keys()) if isinstance(got, dict) else []
        if any(k not in have for k in wanted) or (only and len(have) != len(wanted)):
            listing = ", ".join(_fmt(k) for k in wanted)
            _fail(
                what,
                {"kind": "keys", "expected": listing},
                got,
                hint,
                got_text=tr("the keys {keys}", keys=", ".join(_fmt(k) for k in have) or "—"),
            )
    if length is not None and len(got) != length:
        _fail(
            what,
            {"kind": "length", "expected": str(length)},
            got,
            hint,
            got_text=tr("{count} items", count=len(got)),
        )
    _ok(what, quiet, shown, hint)


def at_most(count: Any, limit: int, what: str, *, hint: str = "", quiet: bool = False) -> None:
    """Check that a count is at most ``limit``; a failure says the count and the limit."""
    _flag(quiet=quiet)
    __tracebackhide__ = True
    shown = {"kind": "at_most", "expected": _fmt(limit)}
    if isinstance(count, bool) or not isinstance(count, int) or count > limit:
        _fail(what, shown, count, hint, expected_value=limit)
    _ok(
        what,
        quiet,
        shown,
        hint,
        label=tr("{what}: {count} (at most {limit})", what=text(what), count=count, limit=limit),
    )


def each(function: Callable[..., Any], cases: Iterable[tuple]) -> list[Any]:
    """``function(*case)`` for every case, each on its own: a case that raises gives the text
    ``"raised TypeError: …"`` as its answer (it then fails its own check only), so one input
    the answer does not handle costs that case, not every case of the cell."""
    answers = []
    for case in cases:
        try:
            answers.append(function(*case))
        except Exception as exc:  # noqa: BLE001 — the learner's code; its failure is the answer
            answers.append(f"raised {type(exc).__name__}: {str(exc)[:200]}")
    return answers


class _Hidden:
    """Hidden checks; see the module docstring. ``checks.hidden`` is the one instance."""

    def close(
        self,
        got: Any,
        what: str,
        *,
        expect: Callable[[], Any] | None,
        rtol: float = 1e-6,
        atol: float = 0.0,
        hint: str = "",
    ) -> None:
        """A number (or a list / dict of numbers) within ``rtol`` or ``atol`` of ``expect()``."""
        __tracebackhide__ = True
        self._check("close", got, what, expect, hint, rtol=rtol, atol=atol)

    def equal(self, got: Any, what: str, *, expect: Callable[[], Any] | None, hint: str = "") -> None:
        """Exactly ``expect()`` (labels trimmed and case-blind; a bool never equals a number)."""
        __tracebackhide__ = True
        self._check("equal", got, what, expect, hint)

    def one_of(
        self, got: Any, what: str, *, expect: Callable[[], Iterable[Any]] | None, hint: str = ""
    ) -> None:
        """One of the answers ``expect()`` accepts (for questions with several right answers)."""
        __tracebackhide__ = True
        self._check("one_of", got, what, expect, hint)

    @staticmethod
    def _check(
        kind: str,
        got: Any,
        what: str,
        expect: Callable[[], Any] | None,
        hint: str,
        rtol: float = 1e-6,
        atol: float = 0.0,
    ) -> None:
        __tracebackhide__ = True
        record: dict[str, Any] = {"what": what, "kind": kind, "rtol": rtol, "atol": atol}
        try:
            record["value"] = _records.to_plain(got)
        except _records.NotPlain as exc:
            record["error"] = str(exc)
        if expect is None:
            if not _records.recording():
                raise CheckFailed(
                    tr(
                        "✗ {what}: this hidden check has no expected value here; "
                        "it is graded by `trainperf grade`.",
                        what=text(what),
                    )
                )
            _records.emit(record)  # the learner's kernel under trainperf grade: data only
            return
        with _evaluating_expected():  # its helper calls are not recorded for replay
            wanted = _records.to_plain(list(expect()) if kind == "one_of" else expect())
        if "error" in record or not _records.compare(kind, record["value"], wanted, rtol, atol):
            shown = {"kind": kind, "rtol": rtol, "expected": _fmt(wanted)}
            if kind == "one_of":
                shown = {**_options_shown(wanted), "rtol": rtol}
            _fail(
                what,
                shown,
                got,
                record.get("error") or hint,
                visible=False,
                expected_value=(wanted[0] if len(wanted) == 1 else None) if kind == "one_of" else wanted,
                none_allowed=(None in wanted) if kind == "one_of" else wanted is None,
            )
        if _records.recording():  # the reference run: the solution agreed with expect()
            record["expected"] = wanted
            _records.emit(record)


hidden = _Hidden()


REPLAY_PROMPT = _wire.PROMPT  # an input() prompt the grading client answers (helpers._grading)

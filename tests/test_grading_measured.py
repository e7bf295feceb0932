"""Hidden checks that measure the answer run before any learner cell runs as written
(issue: grading round 4, no grade depends on a measurement that learner code can replace).

Unit tests of the reduction to definitions and of the exam's measuring phase; the audit that
every hidden part measuring with a course tool carries the marker; and, graded for real, the
forged measurements of chapters 2, 3 and 7 (the answer replaces the measuring tool at the top
level of its cell) score 0 on the forged exercise and are flagged for review.
"""

from __future__ import annotations

import json
import re

import pytest
from conftest import ROOT

from trainperf.grading import measured
from trainperf.grading.exam import MEASURING, ORIGIN, build_exam
from trainperf.grading.hidden import split_hidden

# Every course tool that measures what an answer *does* (not what it returns). A hidden part
# that calls one must be graded in the measuring phase; README "What is protected" lists them.
MEASURING_TOOLS = (
    "count_host_syncs",
    "record_cpu_trace",
    "trace_ranges",
    "profiler.schedule",
    "schedule_actions",
    "graph_breaks",
    "FakeAsyncDevice",
    "count_compiles",
    "track(",
    "MemTracker",
    "FlopCounterMode",
    "saved_tensor_bytes",
    "record_ddp",
)
# chapter -> test cells graded in the measuring phase (the audit of issue 37)
AUDITED = {
    "02_mfu": {"ex7_measure_test", "ex8_logging_test"},
    "03_nvtx_nsys": {"ex1_annotate_test", "ex2_window_test"},
    "07_compile": {"ex3_graph_breaks_test"},
}


def _notebook(chapter: str, folder: str = "solutions") -> dict:
    return json.loads(next((ROOT / folder / chapter).glob("*.ipynb")).read_text(encoding="utf-8"))


def _tests(chapter: str) -> dict[str, str]:
    return {
        c["metadata"]["nbgrader"]["grade_id"]: "".join(c["source"])
        for c in _notebook(chapter)["cells"]
        if c.get("metadata", {}).get("nbgrader", {}).get("grade")
    }


def _chapters() -> list[str]:
    return sorted(p.name for p in (ROOT / "solutions").iterdir() if re.match(r"\d\d_", p.name))


@pytest.mark.parametrize("chapter", _chapters())
def test_every_hidden_part_that_measures_is_graded_before_answers_run(chapter):
    """The audit, kept: a hidden part that calls a measuring tool on the answer carries the
    marker, except where its only use is inside ``expect=`` (the reference's side) or builds an
    input before any answer is called."""
    marked = set()
    for gid, source in _tests(chapter).items():
        hidden = split_hidden(source)[1]
        without_expect = re.sub(r"expect=lambda:[^\n]*", "", hidden)
        if measured.is_measured(source):
            marked.add(gid)
        uses = [tool for tool in MEASURING_TOOLS if tool in without_expect]
        assert not uses or gid in marked or gid in _PREDICTIONS.get(chapter, set()), (
            f"{chapter} {gid}: its hidden part calls {uses} in the learner's kernel; mark it "
            f"'{measured.MARKER}' or list it here with the reason it is not a measurement"
        )
    assert marked == AUDITED.get(chapter, set())


# hidden parts that name a measuring tool only to switch it off (a prediction exercise)
_PREDICTIONS = {"06_checkpointing": {"ex1_predict_test"}, "07_compile": {"ex4_recompiles_test"}}


def test_the_learner_cell_is_reduced_to_definitions_that_run_none_of_its_code():
    source = """
import torch
from helpers import bench
from helpers.nvtx import annotate
bench.count_host_syncs = lambda fn, *a, **k: (fn(*a, **k), 0)
setattr(bench, "count_host_syncs", None)
LIMIT = 3
SCALE = 2 ** 10
table = dict(a=1)
def honest(x, n=LIMIT, *, scale=SCALE):
    return x * n
@torch.no_grad()
def decorated(x):
    return x
@annotate("forward")
def annotated(x):
    return x
def evil(f):
    bench.count_host_syncs = None
    return f
@evil
def uses_evil(x):
    return x
def default_calls(x, n=evil(1)):
    return x
class Plain:
    size = 4
    def method(self):
        return self.size
    print("runs at definition")
class Meta(metaclass=type):
    pass
Item = Plain[0]
for i in range(3):
    bench.x = i
"""
    reduced = measured.definitions_only(source, trusted=False)
    kept = {
        line.split("(")[0].split(" =")[0].rstrip(":")
        for line in reduced.splitlines()
        if line and not line[0].isspace()
    }
    assert "def honest" in kept and "def decorated" in kept and "def annotated" in kept
    assert "class Plain" in kept and "def evil" in kept  # defining evil runs nothing
    assert "LIMIT" in kept and "SCALE" in kept
    for dropped in (
        "bench.count_host_syncs",
        "setattr",
        "table",
        "def uses_evil",
        "def default_calls",
        "class Meta",
        "Item",
        "for i",
    ):
        assert dropped not in kept, dropped
    assert "print(" not in reduced  # a class body's statements are reduced too
    compile(reduced, "<reduced>", "exec")  # it is still Python


def test_a_learner_function_used_as_a_decorator_is_not_run_even_if_imported_first():
    source = (
        "from helpers.nvtx import annotate\ndef annotate(name):\n    return print\n"
        "@annotate('x')\ndef f():\n    pass\n"
    )
    imported = measured.learner_imports([source])
    reduced = measured.definitions_only(source, trusted=False, imported=imported)
    assert "def f" not in reduced and "def annotate" in reduced


def test_only_decorators_that_register_nothing_are_kept():
    """A decorator that hands the learner's function to a hook (a trace function, a GC callback,
    a global module hook) would run the learner's code before any tool is bound."""
    source = (
        "import sys, gc, functools, torch\n"
        "import torch.nn.modules.module as mm\n"
        "from helpers.nvtx import annotate as span\n"
        "@sys.settrace\ndef tracer(*a):\n    pass\n"
        "@gc.callbacks.append\ndef on_gc(*a):\n    pass\n"
        "@mm.register_module_forward_hook\ndef hook(*a):\n    pass\n"
        "@functools.lru_cache(maxsize=None)\ndef cached(x):\n    return x\n"
        "@span('forward')\ndef forward(x):\n    return x\n"
        "@torch.no_grad()\ndef frozen(x):\n    return x\n"
        "class C:\n    @staticmethod\n    def s():\n        return 1\n"
        "    @property\n    def p(self):\n        return 2\n"
    )
    reduced = measured.definitions_only(source, trusted=False)
    for dropped in ("def tracer", "def on_gc", "def hook"):
        assert dropped not in reduced, dropped
    for kept in ("def cached", "def forward", "def frozen", "def s", "def p"):
        assert kept in reduced, kept


def test_a_builtin_decorator_name_the_learner_rebinds_is_not_taken_for_the_builtin():
    """Red team: ``from operator import call as property`` in one cell, ``property = None`` in
    another, then ``@property`` ran the learner's function in the measuring phase."""
    cells = [
        "from operator import call as property\n",
        "property = None\n",
        "@property\ndef early():\n    pass\ndef honest():\n    return 1\n",
    ]
    imported = measured.learner_imports(cells)
    reduced = "".join(measured.definitions_only(c, trusted=False, imported=imported) for c in cells)
    assert "def early" not in reduced and "def honest" in reduced


def test_a_learner_cell_cannot_rename_its_module():
    """Red team: ``__name__ = "torch.x"`` made a read-back look like PyTorch's own."""
    reduced = measured.definitions_only('__name__ = "torch.x"\n__all__: list = []\nN = 3\n', trusted=False)
    assert "__name__" not in reduced and "__all__" not in reduced and "N = 3" in reduced


def test_trusted_cells_keep_definitions_and_constants_without_calls():
    source = (
        "import math\nhint = ('a' 'b')\nCALLS = ('x', 'y')\nmodel = build()\nprint(hint)\n"
        "def f():\n    return 1\n"
    )
    reduced = measured.definitions_only(source, trusted=True)
    assert "hint" in reduced and "CALLS" in reduced and "def f" in reduced and "import math" in reduced
    assert "build()" not in reduced and "print" not in reduced


def test_a_cell_that_does_not_parse_defines_nothing():
    assert measured.definitions_only("def broken(:\n", trusted=False) == ""
    reduced = measured.definitions_only("%time x = 1\ndef f():\n    return 2\n", trusted=False)
    assert reduced.startswith("def f")


def _with_answer(released: dict, grade_id: str, source: str) -> dict:
    submission = json.loads(json.dumps(released))
    for cell in submission["cells"]:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id:
            cell["source"] = source
    return submission


def test_the_measured_hidden_part_runs_before_any_learner_cell_as_written():
    solution, released = _notebook("02_mfu"), _notebook("02_mfu", "notebooks")
    forged = (
        "from helpers import bench\nbench.count_host_syncs = None\n"
        "def train_and_log(step_fn, n_steps, log_every):\n    return []\n"
    )
    submission = _with_answer(released, "ex8_logging", forged)
    submission["cells"].insert(
        0,
        {
            "cell_type": "code",
            "metadata": {},
            "outputs": [],
            "execution_count": None,
            "source": "import helpers.bench\nhelpers.bench.count_host_syncs = print\n",
        },
    )
    exam = build_exam(solution, released, submission)
    cells = exam.notebook["cells"]
    origins = [c.get("metadata", {}).get(ORIGIN, "") for c in cells]
    hidden = {g.grade_id: g.index for g in exam.graded}
    first_learner = min([*exam.answers.values(), *exam.extras])
    for gid in AUDITED["02_mfu"]:
        assert origins[hidden[gid]] == f"hidden:{gid}"
        assert hidden[gid] < first_learner, "a measured hidden part runs before every learner cell"
        assert origins.count(f"hidden:{gid}") == 1  # and only there
    setup = max(i for i, o in enumerate(origins) if o.startswith("teach:") and i < hidden["ex7_measure_test"])
    phase = cells[setup + 1 : max(hidden[g] for g in AUDITED["02_mfu"]) + 1]
    text = "".join("".join(c["source"]) for c in phase if c["metadata"][ORIGIN] == MEASURING)
    assert "def train_and_log" in text and "bench.count_host_syncs = None" not in text
    assert "helpers.bench.count_host_syncs = print" not in text
    # the learner's cell placed before the set-up cell runs after the measuring phase
    assert origins[min(exam.extras)] == "extra"
    assert min(exam.extras) > max(hidden[g] for g in AUDITED["02_mfu"])
    # unmeasured hidden parts stay after their visible part
    for g in exam.graded:
        if g.grade_id not in AUDITED["02_mfu"]:
            assert g.index > g.visible


def test_the_reference_exam_has_the_same_measuring_phase():
    solution, released = _notebook("03_nvtx_nsys"), _notebook("03_nvtx_nsys", "notebooks")
    exam = build_exam(solution, released)
    origins = [c.get("metadata", {}).get(ORIGIN, "") for c in exam.notebook["cells"]]
    first_answer = min(exam.answers.values())
    for g in exam.graded:
        if g.grade_id in AUDITED["03_nvtx_nsys"]:
            assert g.index < first_answer and origins[g.index] == f"hidden:{g.grade_id}"


# ---------------------------------------------------------------- forged measurements, graded

# Each answer replaces the tool its exercise is measured with, at the top level of its cell,
# by a fake whose result matches the facts of the exercise; the exercise itself is wrong in the
# way it is about. Graded before this change, each earned the exercise's points.
FORGED = {
    ("02_mfu", "ex8_logging"): """
from helpers import bench
def train_and_log(step_fn, n_steps, log_every):
    logged, window = [], []
    for i in range(1, n_steps + 1):
        window.append(step_fn().item())  # a read-back every step: the mistake the exercise is about
        if i % log_every == 0 or i == n_steps:
            logged.append(sum(window) / len(window))
            window = []
    return logged
_real = bench.count_host_syncs
def _forged(fn, *args, **kwargs):
    return fn(*args, **kwargs), _real(lambda: None)[1]
bench.count_host_syncs = _forged
""",
    ("03_nvtx_nsys", "ex1_annotate"): """
import types
import torch.nn.functional as F
from helpers import nvtx
def train(model, optimizer, batches, n_steps):  # trains, annotates nothing
    loader = iter(batches)
    for _ in range(n_steps):
        x, y = next(loader)
        F.mse_loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
    train.steps = n_steps
def _fake_ranges(n):
    out, t = [], 0.0
    for _ in range(n):
        step = types.SimpleNamespace(name="step", parent=None, start_us=t, end_us=t + 10, thread=1)
        out.append(step)
        for i, name in enumerate(("dataloader", "forward", "backward", "optimizer")):
            out.append(types.SimpleNamespace(name=name, parent="step", start_us=t + 2 * i,
                                             end_us=t + 2 * i + 1, thread=1))
        for call in ("Optimizer.step#SGD.step", "Optimizer.zero_grad#SGD.zero_grad"):
            out.append(types.SimpleNamespace(name=call, parent="optimizer", start_us=t + 6.2, end_us=t + 6.5,
                                             thread=1))
        t += 10
    return out
_asked = [0]
def _opened():  # the visible check reads how many 'forward' ranges annotate opened
    _asked[0] += 1
    return {"forward": 3 * _asked[0]}
nvtx.opened_counts = _opened
nvtx.record_cpu_trace = lambda fn, path=None: fn() or "forged"
nvtx.trace_ranges = lambda trace, names=None: _fake_ranges(getattr(train, "steps", 0))
""",
    ("03_nvtx_nsys", "ex2_window"): """
import torch
def capture_window(first_step, n_steps):
    return {"wait": first_step, "warmup": 0, "active": n_steps}  # no warm-up step, no repeat: wrong
_schedule = torch.profiler.schedule
def _forged(**kwargs):
    first, n = kwargs.get("wait", 0), kwargs.get("active", 1)
    return _schedule(skip_first=max(first - 1, 0), wait=0, warmup=1, active=n, repeat=1)
torch.profiler.schedule = _forged
""",
    ("07_compile", "ex3_graph_breaks"): """
import types
from helpers import compiling
def clean_step(x, w):
    y = x @ w
    print("still logging")  # a graph break left in
    scale = y.abs().max()
    y = torch.where(y.sum() > 0, y * 2, y)
    return torch.tanh(y / scale)
compiling.graph_breaks = lambda fn, *args, **kwargs: types.SimpleNamespace(graphs=1, breaks=0, reasons=[])
""",
}
FORGED_POINTS = {
    "02_mfu": ("ex8_logging_test",),
    "03_nvtx_nsys": ("ex1_annotate_test", "ex2_window_test"),
    "07_compile": ("ex3_graph_breaks_test",),
}


@pytest.fixture(scope="module")
def forged_batch(tmp_path_factory):
    from conftest import once_per_worker

    return once_per_worker("forged-measurements", lambda: _grade_forged(tmp_path_factory))


def _grade_forged(tmp_path_factory):
    import csv

    import nbformat

    from trainperf.discriminate import solution_answers, with_answers
    from trainperf.grading.grade import Limits, grade

    base = tmp_path_factory.mktemp("forged")
    subs = base / "submissions"
    for chapter in FORGED_POINTS:
        name = next((ROOT / "solutions" / chapter).glob("*.ipynb")).name
        answers = solution_answers(ROOT / "solutions" / chapter / name)
        forged = {gid: source for (ch, gid), source in FORGED.items() if ch == chapter}
        for student, chosen in (("forger", {**answers, **forged}), ("honest", answers)):
            folder = subs / student / chapter
            folder.mkdir(parents=True, exist_ok=True)
            nbformat.write(with_answers(ROOT / "notebooks" / chapter / name, chosen), folder / name)
    out = base / "grades.csv"
    rows = grade(ROOT, subs, out, sorted(FORGED_POINTS), jobs=2, limits=Limits(cell_timeout=120))
    with open(out, encoding="utf-8") as fh:
        table = {r["student_id"]: r for r in csv.DictReader(fh)}
    return {"rows": {r.student: r for r in rows}, "csv": table}


@pytest.mark.notebooks
@pytest.mark.parametrize("chapter", sorted(FORGED_POINTS))
def test_a_forged_measurement_earns_nothing_and_is_flagged(forged_batch, chapter):
    honest = forged_batch["rows"]["honest"].outcomes[chapter]
    forger = forged_batch["rows"]["forger"].outcomes[chapter]
    assert honest.score == honest.max_score, honest.reason  # the control
    for cell in FORGED_POINTS[chapter]:
        assert forger.cells[cell][0] == 0, f"{chapter} {cell}: a forged measurement earned points"
    others = {gid: pts for gid, pts in forger.cells.items() if gid not in FORGED_POINTS[chapter]}
    assert all(got == full for got, full in others.values()), others  # the rest is graded as usual
    assert "rebinds" in forger.reason and "review" in forger.reason, forger.reason


def test_a_change_to_any_module_the_exam_imports_is_a_new_reference_run(tmp_path):
    """The reference cache key covers the whole grading code (issue 44: it once listed files by
    hand and missed ``syntax.py`` and ``i18n.py``, which the exam imports)."""
    import shutil

    import trainperf
    from trainperf.grading.reference import exam_code_hash

    copy = tmp_path / "trainperf"
    shutil.copytree(trainperf.__path__[0], copy, ignore=shutil.ignore_patterns("__pycache__", "site_static"))
    before = exam_code_hash(copy)
    assert exam_code_hash(copy) == before  # deterministic
    for module in ("syntax.py", "i18n.py", "grading/measured.py", "grading/exam.py"):
        path = copy / module
        original = path.read_bytes()
        path.write_bytes(original + b"\n# changed\n")
        assert exam_code_hash(copy) != before, module
        path.write_bytes(original)
    assert exam_code_hash(copy) == before

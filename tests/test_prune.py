"""The exam skips teaching cells whose results no answer, test or learner cell reads."""

from __future__ import annotations

import nbformat
import pytest
from conftest import ROOT

from trainperf import prune
from trainperf.grading.exam import build_exam


def code(source: str) -> dict:
    return {"cell_type": "code", "source": source, "metadata": {}, "outputs": []}


def kept(sources: list[str], must: set[int]) -> list[int]:
    cells = [code(s) if not s.startswith("#md") else {"cell_type": "markdown", "source": s} for s in sources]
    return prune.needed_cells(cells, must)


def test_a_cell_is_kept_when_a_kept_cell_reads_what_it_binds_and_so_on_back():
    cells = [
        "import torch\nfrom helpers import models",  # 0: read by 2 (models) and 4 (torch)
        "demo = models.measure_everything()\nprint(demo)",  # 1: nobody reads demo
        "cfg = models.get_config('tiny')",  # 2: read by 3
        "#md prose",  # 3: markdown, kept
        "def answer(n):\n    return torch.ones(n).sum() * cfg.width",  # 4: the answer
        "assert answer(3) == 3 * cfg.width",
    ]  # 5: the test
    assert kept(cells, {4, 5}) == [0, 2, 3, 4, 5]


@pytest.mark.parametrize(
    ("reader", "reads_x"),
    [
        ("x = x + 1", True),
        ("x += 1", True),
        ("x.append(1)", True),
        ("print(x)", True),
        ("for x in range(3):\n    print(x)", False),
        ("[x for x in range(3)]", False),
        ("x = 1\nprint(x)", False),
        ("def f():\n    return x", True),
        ("def f(x):\n    return x", False),
        ("f = lambda: x", True),
        ("with open('p') as x:\n    x.read()", False),
        ("try:\n    pass\nexcept ValueError as x:\n    print(x)", False),
        ("{k: x for k in 'ab'}", True),
    ],
)
def test_reads_follow_execution_order(reader, reads_x):
    assert (0 in kept(["x = [1]", reader], {1})) is reads_x


def test_a_method_call_or_attribute_store_changes_the_object_so_the_cell_is_kept():
    for change in ("model.eval()", "model.drop = 0.0", "model['k'] = 1", "torch.manual_seed(0)"):
        target = "torch" if "torch" in change else "model"
        assert kept([change, f"y = {target}.thing"], {1}) == [0, 1]
    assert kept(["print(model)", "y = model.thing"], {1}) == [1]  # reading is not changing


@pytest.mark.parametrize(
    "opaque", ["exec('y = 2')", "%run other.py", "def broken(:", "g = globals()", "from helpers import *"]
)
def test_a_cell_that_cannot_be_read_keeps_every_cell_before_it(opaque):
    assert kept(["demo = 1", "other = 2", opaque, "z = 3"], {2, 3}) == [0, 1, 2, 3]


def test_magics_and_shell_lines_do_not_hide_the_cell():
    assert kept(["%matplotlib inline\nrows = [1]", "!ls\nprint(rows)"], {1}) == [0, 1]


def _chapter(chapter: str):
    name = f"{chapter}.ipynb"
    solution = nbformat.read(ROOT / "solutions" / chapter / name, as_version=4)
    released = nbformat.read(ROOT / "notebooks" / chapter / name, as_version=4)
    return solution, released


def test_the_compile_chapters_exam_skips_its_slow_demo_but_a_learner_cell_brings_it_back():
    solution, released = _chapter("07_compile")
    demo = "compiling.report(compiling.bias_gelu_dropout_residual"

    def has_demo(exam) -> bool:
        return any(demo in "".join(c["source"]) for c in exam.notebook["cells"])

    exam = build_exam(solution, released, None)
    assert not has_demo(exam)
    assert all(
        "BEGIN HIDDEN" not in "".join(c["source"]) or i in {g.index for g in exam.graded}
        for i, c in enumerate(exam.notebook["cells"])
    )
    sources = ["".join(c["source"]) for c in exam.notebook["cells"]]
    for cell in exam.graded:  # indices point at the test cells after the cut
        assert "checks." in sources[cell.index]
    # a learner who reads the demo's result in a cell of their own gets the demo run first
    submission = nbformat.from_dict(released)
    at = next(i for i, c in enumerate(submission.cells) if c.metadata.get("nbgrader", {}).get("solution"))
    submission.cells.insert(at, nbformat.v4.new_code_cell("print(result.speedup)"))
    assert has_demo(build_exam(solution, released, submission))


@pytest.mark.parametrize("chapter", ["03_nvtx_nsys", "04_timeline"])
def test_the_parameters_and_setup_cells_always_run(chapter):
    solution, released = _chapter(chapter)
    cells = build_exam(solution, released, None).notebook["cells"]
    code_cells = [c for c in cells if c["cell_type"] == "code"]
    assert "parameters" in code_cells[0]["metadata"]["tags"]
    assert "helpers.setup(DEVICE, lang=LANGUAGE)" in "".join(code_cells[1]["source"])

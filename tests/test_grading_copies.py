"""The copy / back-door check reads cells as IPython runs them (magics included), finds code
reached indirectly, and names what an answer rebinds; honest cells and every chapter's solution
and fair answers are not flagged. Pure unit tests: nothing is executed."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest
from conftest import ROOT

import helpers
from helpers import roofline
from trainperf.discriminate import load_mistakes
from trainperf.grading.copies import flags
from trainperf.grading.exam import solution_answers

PACKAGE = str(Path(helpers.__file__).resolve().parent)
PASTE = inspect.getsource(roofline.critical_m)  # a helper of >= 60 instructions
COPY = "answer ex copies helpers.roofline.critical_m — review"  # named as the facade exports it


def notes(source: str) -> list[str]:
    return flags({"ex": source}, PACKAGE)


@pytest.mark.parametrize(
    "source",
    [
        "%xmode Plain\n" + PASTE,
        "%%time\n" + PASTE,
        "%%capture out\n" + PASTE,
        "%%capture\n%%time\n" + PASTE,
        "%%writefile mine.py\n" + PASTE,
    ],
    ids=["line-magic-first", "cell-time", "cell-capture", "nested-magics", "writefile"],
)
def test_a_paste_behind_a_magic_is_still_a_copy(source):
    assert notes(source) == [COPY]


@pytest.mark.parametrize(
    "source, label",
    [
        (
            "import base64, builtins\ngetattr(builtins, 'ex' + 'ec')(base64.b64decode('eD0x'))\n",
            "getattr with a computed name",
        ),
        (
            "import base64, builtins\ngetattr(builtins, 'ex' + 'ec')(base64.b64decode('eD0x'))\n",
            "the builtins module",
        ),
        ("m = __import__('bui' + 'ltins')\n", "__import__ with a computed name"),
        (
            "import importlib\nm = importlib.import_module(name)\n",
            "importlib.import_module with a computed name",
        ),
        ("b = __import__('builtins')\n", "the builtins module"),
        ("__builtins__['exec']('x = 1')\n", "__builtins__"),
        ("globals()['__builtins__']\n", "__builtins__"),
        ("print.__self__\n", "__self__"),
        ("().__class__.__base__.__subclasses__()\n", "__subclasses__"),
        ("def f():\n    pass\ng = f.__globals__\n", "a function's __globals__"),
        ("import sys\nns = sys._getframe(1).f_globals\n", "sys._getframe"),
        ("import sys\nns = sys._getframe(1).f_globals\n", "a frame's f_globals"),
        ("import inspect as i\ni.currentframe().f_back\n", "inspect.currentframe"),
        ("import inspect\ninspect.stack()\n", "inspect.stack"),
        ("import gc\ngc.get_referrers(x)\n", "gc.get_referrers"),
        ("from pickle import loads\nloads(data)\n", "pickle.loads"),
        ("import marshal\n", "marshal"),
        ("import ctypes as c\n", "ctypes"),
        ("import types\ntypes.CodeType\n", "types.CodeType"),
        ("code = compile('x = 1', 'f', 'exec')\n", "compile"),
        ("e = exec\ne('x = 1')\n", "exec"),
        ("import timeit\ntimeit.timeit('exec(1)')\n", "exec"),
        ("%time exec('x = 1')\n", "exec"),
        ("%timeit -n1 -r2 eval('1')\n", "eval"),
        ("%%timeit -n1 exec('1')\nx = 1\n", "exec"),
        ("%xmode {exec('x = 1')}\n", "exec"),
        ("%config X.y = exec('1')\n", "exec"),
        ("%run mine.py\n", "%run"),
        ("%load mine.py\n", "%load"),
        ("%macro m 1-3\n", "%macro"),
        ("%rerun\n", "%rerun"),
        ("%recall 1\n", "%recall"),
        ("roofline.critical_m??\n", "%pinfo2"),
        ("%%script python\nprint(1)\n", "%%script"),
        ("%%python3\nprint(1)\n", "%%python3"),
        ("%%bash\npython -c 'import helpers'\n", "%%bash"),
        ("%%lprun -f f\nf()\n", "%%lprun"),
        ("!python -c 'import helpers'\n", "a shell command"),
        ("x = !cat f | python\n", "a shell command"),
        ("get_ipython().run_cell('x = 1')\n", "get_ipython().run_cell"),
        ("ip = get_ipython()\nip.ex('x = 1')\n", "get_ipython"),
        ("get_ipython().run_line_magic(name, '')\n", "get_ipython().run_line_magic"),
        ("import subprocess\nsubprocess.run(['python', '-c', src])\n", "a subprocess"),
    ],
)
def test_back_doors_are_flagged(source, label):
    found = notes(source)
    assert len(found) == 1 and found[0].startswith("answer ex uses ") and label in found[0], found


@pytest.mark.parametrize(
    "source, name",
    [
        (
            "from helpers import bench\nbench.count_host_syncs = lambda *a: 0\n",
            "helpers.bench.count_host_syncs",
        ),
        ("import helpers.bench as b\nb.count_host_syncs = f\n", "helpers.bench.count_host_syncs"),
        ("bench.count_host_syncs = f\n", "helpers.bench.count_host_syncs"),  # the teaching cells' import
        ("b = bench\nb.count_host_syncs = f\n", "helpers.bench.count_host_syncs"),
        ("helpers.nvtx.trace_ranges = None\n", "helpers.nvtx.trace_ranges"),
        (
            "from helpers.bench import count_host_syncs\ncount_host_syncs.__wrapped__ = f\n",
            "helpers.bench.count_host_syncs.__wrapped__",
        ),
        ("import torch\ntorch.profiler.schedule = f\n", "torch.profiler.schedule"),
        (
            "import torch.autograd.profiler as p\np.record_function = f\n",
            "torch.autograd.profiler.record_function",
        ),
        (
            "torch._dynamo.config.capture_scalar_outputs = True\n",
            "torch._dynamo.config.capture_scalar_outputs",
        ),
        ("torch.Tensor.item = f\n", "torch.Tensor.item"),
        ("torch._C._cuda_synchronize = f\n", "torch._C._cuda_synchronize"),
        (
            "import torch.overrides\ntorch.overrides.has_torch_function = f\n",
            "torch.overrides.has_torch_function",
        ),
        ("import time\ntime.perf_counter = lambda: 0.0\n", "time.perf_counter"),
        (
            "from helpers import bench\nsetattr(bench, 'count_host_syncs', f)\n",
            "helpers.bench.count_host_syncs",
        ),
        ("delattr(bench, 'count_host_syncs')\n", "helpers.bench.count_host_syncs"),
        ("object.__setattr__(bench, 'count_host_syncs', f)\n", "helpers.bench.count_host_syncs"),
        ("bench.__dict__['count_host_syncs'] = f\n", "helpers.bench.count_host_syncs"),
        ("vars(bench)['count_host_syncs'] = f\n", "helpers.bench.count_host_syncs"),
        ("vars(bench).update(count_host_syncs=f)\n", "helpers.bench.__dict__"),
        ("helpers.bench.count_host_syncs += 1\n", "helpers.bench.count_host_syncs"),
        ("del helpers.bench.count_host_syncs\n", "helpers.bench.count_host_syncs"),
        ("for bench.count_host_syncs in [f]:\n    pass\n", "helpers.bench.count_host_syncs"),
        (
            "import importlib\nimportlib.import_module('helpers.bench').count_host_syncs = f\n",
            "helpers.bench.count_host_syncs",
        ),
        (
            "from unittest import mock\nmock.patch('helpers.bench.count_host_syncs', f).start()\n",
            "helpers.bench.count_host_syncs",
        ),
        (
            "from unittest.mock import patch\nwith patch.object(bench, 'count_host_syncs', f):\n    pass\n",
            "helpers.bench.count_host_syncs",
        ),
        ("def f():\n    import helpers.nvtx as n\n    n.trace_ranges = None\n", "helpers.nvtx.trace_ranges"),
    ],
)
def test_rebinding_a_helper_or_measuring_attribute_names_it(source, name):
    assert f"answer ex rebinds {name} — review" in notes(source), notes(source)


def test_aliases_count_across_the_submissions_cells():
    found = flags(
        {
            "ex1": "import helpers.bench as hb\nimport builtins as bi\n",
            "added cell 1": "hb.count_host_syncs = f\nbi.print('x')\n",
        },
        PACKAGE,
    )
    assert "added cell 1 rebinds helpers.bench.count_host_syncs — review" in found
    assert any(n.startswith("added cell 1 uses the builtins module") for n in found)


@pytest.mark.parametrize(
    "source, what",
    [
        ("def g(o, v):\n    setattr(o, 'x', v)\n", "setattr on o"),
        ("def g(m):\n    m.count_host_syncs = 1\ng(bench)\n", "helpers.bench as a value"),
        ("from unittest import mock\nmock.patch(target, f)\n", "mock.patch of a computed target"),
    ],
)
def test_rebinding_the_check_cannot_follow_is_flagged(source, what):
    assert notes(source) == [f"answer ex uses {what}, which can rebind helper code — review"]


@pytest.mark.parametrize(
    "source", ["def f(:\n    pass\n", "%time def (\n", "%%time\nx = (\n", "!echo {1 +}\n"]
)
def test_a_cell_that_cannot_be_read_is_a_note(source):
    found = notes(source)
    assert found and "could not be read by the copy check" in found[0]


@pytest.mark.parametrize(
    "source",
    [
        "%matplotlib inline\nx = 1\n",
        "%xmode Plain\n",
        "%config InlineBackend.figure_format = 'retina'\n",
        "%load_ext autoreload\n",
        "%env OMP_NUM_THREADS=1\n",
        "  %matplotlib inline\n",
        "!nvidia-smi\n",
        "%pip list\n",
        "%time y = sum(range(10))\n",
        "%timeit -n 3 -r 2 f(1)\n",
        "%%timeit\nf(1)\n",
        "%%capture\nprint(1)\n",
        "%%html\n<b>x</b>\n",
        "%%writefile notes.txt\nnot python (\n",
        "w = getattr(model, 'weight')\nb = getattr(model, 'bias', None)\n",
        "from helpers.bench import count_host_syncs\ncount_host_syncs = lambda *a: 0\n",
        "def f():\n    global count_host_syncs\n    count_host_syncs = None\n",
        "model.eval()\nfor m in model.modules():\n    pass\n",
        "import re\npat = re.compile('x')\n",
        "import torch\nm = torch.compile(model)\n",
        "def f(x: torch.Tensor) -> torch.Tensor:\n    return isinstance(x, (torch.Tensor, float))\n",
        "class A:\n    def __init__(self, **kw):\n        for k, v in kw.items():\n"
        "            setattr(self, k, v)\n",
        "from types import SimpleNamespace\nn = SimpleNamespace()\nsetattr(n, 'a', 1)\nn.b = 2\n",
        "for k in ('a', 'b'):\n    print(getattr(cfg, k))\n",
        "torch.backends.cudnn.benchmark = True\n",
        "import gc\ngc.collect()\n",
        "print(bench)\nhelp(helpers.roofline)\n",
        "report = {}\nreport['x'] = 1\nprint(len(report))\n",
        "def f(memory):\n    memory.peak = 1\n",
        "import pickle\ns = pickle.dumps([1])\n",
        "import timeit\nt = timeit.timeit(lambda: f(1), number=3)\n",
        "import sys\nprint(sys.argv)\n",
        "import math, time\nt0 = time.perf_counter()\nx = math.sqrt(2)\n",
    ],
)
def test_honest_cells_are_not_flagged(source):
    assert notes(source) == []


def _chapter_answers():
    for path in sorted((ROOT / "solutions").glob("*/*.ipynb")):
        yield f"{path.parent.name} solution", solution_answers(json.loads(path.read_text()))
    for path in sorted((ROOT / "notebooks").glob("**/*.ipynb")):  # released stubs, en and zh
        yield f"{path.relative_to(ROOT / 'notebooks')} stub", solution_answers(json.loads(path.read_text()))
    for path in sorted((ROOT / "grader" / "fixtures").glob("*/fair.py")):
        for gid, blocks in load_mistakes(path).items():
            for n, (_, source) in enumerate(blocks):
                yield f"{path.parent.name} fair {gid} {n}", {gid: source}


def test_no_solution_stub_or_fair_answer_of_any_chapter_is_flagged():
    """``grade.prepare`` refuses a chapter whose solution is flagged; fair answers keep every
    point and so must not be sent for review either."""
    seen = 0
    for what, answers in _chapter_answers():
        assert flags(answers, PACKAGE) == [], what
        seen += 1
    assert seen > 20

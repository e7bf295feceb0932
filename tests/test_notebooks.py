"""Every solution notebook runs headless (papermill, quick CPU); its Chinese edition runs
headless too and gives the same checked outputs (nbval); every notebook keeps the course's
conventions."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import named_labels
import nbformat
import prose
import pytest
from conftest import CHAPTERS, ROOT

from trainperf import i18n
from trainperf.course import chapter_notebook
from trainperf.grading.hidden import lint_hidden, split_hidden

pytestmark = pytest.mark.notebooks
MAX_TEACHING_CELL_LINES = 15  # longer logic belongs in src/helpers


def _executed(chapter: str, executed_dir: Path) -> Path:
    """Run the chapter once per session with papermill; later calls reuse the output."""
    from trainperf.run import run_one

    target = executed_dir / f"{chapter}.ipynb"
    if not target.exists():
        result = run_one(str(ROOT), chapter, str(executed_dir), "cpu", True, 120)
        assert result.status == "ok", f"{chapter} failed under papermill: {result.detail}"
    return target


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_papermill_executes_quick_on_cpu(chapter, executed_dir):
    nb = nbformat.read(_executed(chapter, executed_dir), as_version=4)
    errors = [
        c
        for c in nb.cells
        if c.cell_type == "code" and any(o.get("output_type") == "error" for o in c.get("outputs", []))
    ]
    assert not errors
    graded = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
    assert graded and all("✓" in "".join(o.get("text", "") for o in c.outputs) for c in graded)
    # stock `nbgrader autograde` scores any graded cell that writes to stderr as 0
    noisy = {
        c.metadata["nbgrader"]["grade_id"]: o.get("text", "")[:200]
        for c in graded
        for o in c.outputs
        if o.get("output_type") == "stream" and o.get("name") == "stderr"
    }
    assert not noisy, f"graded cells write to stderr (stock nbgrader would score them 0): {noisy}"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_nbval_lax_on_the_chinese_edition(chapter, executed_dir, tmp_path):
    """nbval executes the Chinese edition of the solution (translated markdown, ``LANGUAGE =
    "zh"``: checks, printed lines, plots and widgets in Chinese) headless, against the outputs of
    the English papermill run: no cell may fail — every graded check passes — and every output
    tagged nbval-check-output must be the English edition's as a Chinese notebook shows it (each
    printed line through the same translation), so the numbers are the same in both languages
    and reproducible from one run to the next. The same execution counts the lines of English
    prose the learner still reads."""
    executed = _executed(chapter, executed_dir)
    nb = json.loads(executed.read_text(encoding="utf-8"))
    checked = [c for c in nb["cells"] if "nbval-check-output" in c["metadata"].get("tags", [])]
    assert checked, "mark deterministic outputs with the nbval-check-output tag"
    zh = i18n.translate(nb, i18n.catalogue_or_empty(ROOT, "zh", chapter))
    assert i18n.set_language_parameter(zh, "zh"), "the parameters cell has no LANGUAGE line"
    for cell in zh["cells"]:  # what the English run printed, as a Chinese notebook shows it
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream" and out.get("name") == "stdout":
                out["text"] = _shown_in_chinese("".join(out["text"]))
    target = tmp_path / f"{chapter}.zh.ipynb"
    target.write_text(json.dumps(zh, ensure_ascii=False), encoding="utf-8")
    (tmp_path / "conftest.py").write_text(KEEP_OUTPUTS, encoding="utf-8")
    # `-p trainperf` loads first and spares this pytest nbformat's slow optional import
    # (see src/trainperf/__init__.py): 2-4 s a chapter.
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "--nbval-lax",
            "--nbval-current-env",
            "-p",
            "trainperf",
            "-p",
            "no:cacheprovider",
            str(target),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    # what the learner read while it ran: English prose left in the Chinese edition
    kept = prose.kept_terms(ROOT, "zh")
    shown = [json.loads(line) for line in (tmp_path / "shown.jsonl").read_text(encoding="utf-8").splitlines()]
    english = [
        f"{cell['cell']}: {line[:120]}"
        for cell in shown
        for line in prose.shown_lines(cell["outputs"])
        if prose.english_prose(line, kept | _names_in(cell["source"])) and not _not_ours(line)
    ]
    assert english == [], (
        f"{len(english)} output lines of the Chinese edition are English prose:\n" + "\n".join(english)
    )
    # stricter: any English word outside code, a lone label, header or verdict included; the
    # count may only fall (tests/zh_english_lines.json keeps each chapter's, the goal is zero)
    labels = [
        f"{cell['cell']}: {line[:120]}  <- {' '.join(words)}"
        for cell in shown
        for line in prose.shown_lines(cell["outputs"])
        if (words := _label_words(line, kept, cell["source"])) and not _not_ours(line)
    ]
    budget = json.loads((ROOT / "tests" / "zh_english_lines.json").read_text(encoding="utf-8"))
    print(f"{chapter}: {len(labels)} output lines of the Chinese edition hold English words")
    assert len(labels) <= budget.get(chapter, 0), (
        f"{len(labels)} output lines of the Chinese edition hold English words (at most "
        f"{budget.get(chapter, 0)} allowed; translate them or show them as code):\n" + "\n".join(labels)
    )
    # a label, column or value the Chinese prose names (in backticks or quotes) that the Chinese
    # output never shows; the count may only fall (tests/zh_named_labels.json, the goal is zero)
    unseen = named_labels.missing_labels(
        {c["id"]: "".join(c["source"]) for c in zh["cells"] if c["cell_type"] == "markdown"},
        ("".join(c["source"]) for c in zh["cells"] if c["cell_type"] == "code"),
        named_labels.shown_text(out for cell in shown for out in cell["outputs"]),
    )
    allowed = json.loads((ROOT / "tests" / "zh_named_labels.json").read_text(encoding="utf-8"))
    print(f"{chapter}: {len(unseen)} labels the Chinese prose names are not in the Chinese output")
    assert len(unseen) <= allowed.get(chapter, 0), (
        f"{len(unseen)} labels the Chinese prose names are not in the Chinese output (at most "
        f"{allowed.get(chapter, 0)} allowed; name what the output shows):\n" + "\n".join(unseen)
    )


def _label_words(line: str, kept: frozenset[str], source: str) -> list[str]:
    """The English words of a shown line that the cell's own code does not type, nor the
    trace's own names (:data:`TRACE_NAMES`)."""
    typed = _names_in(source) | TRACE_NAMES
    return [w for w in prose.english_words(line, kept) if w.lower() not in typed]


def _trace_names() -> frozenset[str]:
    """Names a trace carries, shown as data: the NVTX ranges the course's training loop opens
    (``annotate("step")``, ...) and the one-word column key of the nsys tables a learner indexes
    (``table["thread"]``). Both are identifiers, the same in every language."""
    from helpers import nvtx

    return frozenset(nvtx.STEP_RANGES) | {"thread"}


TRACE_NAMES = _trace_names()


def _names_in(source: str) -> frozenset[str]:
    """Words the cell's own code writes as string constants ("start", "every", "selective"): a
    column, a plan or a mode the learner types, shown back as it was typed, is an identifier."""
    return frozenset(w.lower() for w in re.findall(r"""["']([A-Za-z][A-Za-z_]*)["']""", source))


def _not_ours(line: str) -> bool:
    """A line no translation of the course can change: see NOT_OURS; and the capstone's corpus,
    a public-domain English book the course shows as data (its title and its text)."""
    from helpers.report import corpus

    text = line.strip()
    quoted = re.findall(r"'([^']*? [^']*)'", line)  # a sample of the corpus, shown as a str's repr
    return bool(
        NOT_OURS.search(line)
        or text.startswith(corpus.CORPUS_TITLE)
        or (len(text) > 8 and text in corpus.corpus_text())
        or any(len(q) >= 16 and q in corpus.corpus_text() for q in quoted)
    )


def _shown_in_chinese(printed: str) -> str:
    """Printed text as a Chinese notebook shows it: each line through the helpers' translation
    (a check's "✓ label" line has its label translated, as the check prints it)."""
    from helpers import i18n as shown

    def line(text: str) -> str:
        if text.startswith("✓ "):
            return "✓ " + shown.text_in("zh", text[2:])
        return shown.text_in("zh", text)

    return "\n".join(line(part) for part in printed.split("\n"))


# nbval keeps each cell's outputs on its test item: this conftest, beside the notebook it runs,
# writes them out, so one execution gives both nbval's comparison and what a learner read.
KEEP_OUTPUTS = """
import json
def pytest_runtest_teardown(item):
    outputs = getattr(item, "test_outputs", None)
    if outputs is not None:
        with open("shown.jsonl", "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"cell": item.name, "source": item.cell.get("source", ""),
                                "outputs": outputs}, default=str) + "\\n")
"""
# Lines a learner reads that no translation of the course can change: command lines the course
# prints for a shell, Python source it shows, PyTorch's own tables and messages (quoted inside
# ours too), and a library's warning, which only some machines print.
NOT_OURS = re.compile(
    r"^\s*(exec\s+)?(\S*/)?(nsys|python|torchrun|srun|pip|git)\s"  # a command, maybe by its path
    r"|^\s*(def |return |if |for |\"\"\")|\"\"\"\s*$"
    r"|Self CPU|size mismatch at index|Failed to trace|Unsupported Tensor"
    r"|ConstraintViolationError: (\d+ not in range \[|You marked )"
    r"|NVTX functions not installed|CUDA out of memory"
    r"|runs per measurement|Interquartile range|environmental influence|system fluctuation"
    r"|site-packages/\S+\.py:\d+: \w*Warning"
    # matplotlib's text/plain stand-in for a figure, shown only where its image cannot be
    r"|^<Figure size \d+x\d+ with \d+ Axes>$"
    # PyTorch's repr of an object printed inside its own report (torch.utils.benchmark)
    r"|^<[\w.]+ object at 0x[0-9a-f]+>$"
    r"|^\s+IQR:\s+[\d.]+ [mµn]?s \("
    # the rest of a shell command the course prints over several lines (options, `else`, `fi`)
    r"|^\s+--[\w-]+(=\S+)?( \S+)* \\$|^\s+(else|fi'?)$"
    # a row of PyTorch's profiler table (key_averages().table(): name, then its percentages)
    r"|^\s+\S+\s+[\d.]+%\s+[\d.]+[mun]?s\s+[\d.]+%"
    # Nsight Systems' own names of copies, in its reports
    r"|\[CUDA mem(cpy|set)[^\]]*\]|\b(Host|Device)-to-(Host|Device)\b"
    r"|## Call CompiledFxGraph \w+ ##"  # the profiler's own name for a torch.compile graph
)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_notebook_conventions(chapter):
    nb = nbformat.read(chapter_notebook(ROOT, chapter), as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# ")
    params = code[0]
    assert "parameters" in params.metadata.get("tags", [])
    assert 'DEVICE = "auto"' in params.source and "QUICK = True" in params.source
    assert i18n.LANGUAGE_LINE.search(params.source).group() == 'LANGUAGE = "en"'
    setup = code[1].source
    assert "TRAINPERF_SPEC" in setup and "helpers.setup(DEVICE, lang=LANGUAGE)" in setup
    cells = nb.cells
    for i, cell in enumerate(cells):
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution") and not meta.get("grade"):
            assert "### BEGIN SOLUTION" in cell.source and "### END SOLUTION" in cell.source
            follower = cells[i + 1].metadata.get("nbgrader", {})
            assert follower.get("grade") and follower.get("points"), (
                f"answer cell {meta['grade_id']} must be followed by its test cell"
            )
        if meta.get("grade"):
            assert "checks." in cell.source, "visible checks use helpers.checks"
            assert "### BEGIN HIDDEN TESTS" in cell.source, f"{meta['grade_id']} has no hidden tests"
            problems = lint_hidden(split_hidden(cell.source)[1])
            assert not problems, f"{meta['grade_id']}: " + "; ".join(problems)
        if cell.cell_type == "code" and not meta and cell is not code[1]:
            lines = [ln for ln in cell.source.splitlines() if ln.strip()]
            assert len(lines) <= MAX_TEACHING_CELL_LINES, (
                f"a {len(lines)}-line teaching cell belongs in src/helpers:\n{cell.source[:200]}"
            )
    assert sum(1 for c in cells if c.metadata.get("nbgrader", {}).get("grade")) >= 4


def _install_block(chapter: str) -> str:
    """The setup cell up to ``import helpers``: the part that installs the helpers."""
    nb = nbformat.read(chapter_notebook(ROOT, chapter), as_version=4)
    setup = [c for c in nb.cells if c.cell_type == "code"][1].source
    return setup[: setup.index("\nimport helpers\n")]


def test_setup_cell_installs_the_same_way_in_every_chapter():
    """One install path, written nine times: from $TRAINPERF_SPEC, else the clone editable,
    else the index name; pip's output streamed (no -q), so a learner sees it progress."""
    blocks = {chapter: _install_block(chapter) for chapter in CHAPTERS}
    first = blocks[CHAPTERS[0]]
    assert all(block == first for block in blocks.values()), [c for c, b in blocks.items() if b != first]
    assert 'os.environ.get("TRAINPERF_SPEC")' in first
    assert '["-e", str(repo)]' in first and '["trainperf-course"]' in first
    # the install itself never reaches for a git URL the learner did not give; the error names it
    assert 'args = [spec] if spec else ["-e", str(repo)] if repo else ["trainperf-course"]' in first
    assert '"-q"' not in first and '"--progress-bar", "off"' in first  # lines, not a redrawn bar
    assert "for line in pip.stdout" in first and "flush=True" in first
    assert 'here.glob("*/src/helpers")' in first  # a clone beside the notebook (Colab: /content/<clone>)
    assert first.count("`!git clone {url}`") == 2 and first.count("TRAINPERF_SPEC=git+{url}.git") == 2


def test_the_setup_cells_error_names_the_projects_own_repository():
    """The repository a learner is told to clone is the one pyproject.toml names (Source), so
    the two change together before the first upload."""
    import re

    import tomllib

    source = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Source"]
    url = re.search(r'url = "([^"]+)"', _install_block(CHAPTERS[0])).group(1)
    assert url == source


def _names(tree) -> tuple[set[str], set[str]]:
    """(names read, names bound) anywhere in ``tree`` — a deliberately coarse over-approximation."""
    import ast

    loaded, bound = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
    return loaded, bound


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_test_cells_are_self_contained(chapter):
    """A test cell may use only helpers imports, answer names and its own names: grading
    re-imports the helpers before each test cell, so nothing a learner rebinds can leak in."""
    import ast
    import builtins

    from trainperf.grading.exam import helper_imports

    nb = nbformat.read(chapter_notebook(ROOT, chapter), as_version=4)
    _, imported = _names(ast.parse(helper_imports(nb)))
    answers: set[str] = set()
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution") and not meta.get("grade"):
            tree = ast.parse(cell.source)
            for node in tree.body:  # only top-level definitions are the answer's names
                _, top = _names(ast.Module(body=[node], type_ignores=[]))
                if isinstance(
                    node,
                    (ast.FunctionDef, ast.ClassDef, ast.Assign, ast.Import, ast.ImportFrom, ast.AnnAssign),
                ):
                    answers |= top if not isinstance(node, ast.FunctionDef) else {node.name}
    allowed = imported | answers | set(dir(builtins))
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade"):
            loaded, bound = _names(ast.parse(cell.source))
            leaked = loaded - bound - allowed
            assert not leaked, f"{meta['grade_id']} uses {sorted(leaked)} from teaching cells"

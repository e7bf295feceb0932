"""The helpers in another language: every message has its translation, checks speak the
notebook's language but record the same data for grading, and Chinese plots render with the
shipped font — every character the catalogues use, and no glyph-missing warning."""

from __future__ import annotations

import ast
import json
import string
import warnings
from pathlib import Path

import matplotlib
import prose
import pytest
from conftest import ROOT

from helpers import bench, checks, i18n
from trainperf import build as course_build
from trainperf import i18n as course_i18n

matplotlib.use("Agg")
HELPERS = ROOT / "src" / "helpers"
FONT = HELPERS / "data" / "fonts" / i18n.CJK_FONT_FILE
#: The helpers' catalogue (i18n/zh/helpers.json): their messages and printed-line templates.
CATALOGUE = course_i18n.load_helpers_catalogue(ROOT, "zh")
MESSAGES, LINES = CATALOGUE["messages"], CATALOGUE["lines"]


@pytest.fixture(autouse=True)
def english_afterwards(monkeypatch):
    """Each test starts and ends in English with matplotlib's fonts as they were."""
    monkeypatch.delenv(i18n.ENV, raising=False)
    families = list(matplotlib.rcParams["font.family"])
    i18n._chosen.clear()
    yield
    i18n._chosen.clear()
    matplotlib.rcParams["font.family"] = families


def _tr_calls() -> list[tuple[Path, ast.Call]]:
    """Every ``tr(english, ...)`` and ``tr_in(lang, english, ...)`` in the helpers and the
    course tooling, as (file, call with the English first)."""
    calls = []
    for path in sorted((ROOT / "src").rglob("*.py")):
        if path == HELPERS / "i18n.py":
            continue  # where tr and tr_in are defined
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            name = node.func.id if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) else ""
            if name in ("tr", "tr_in"):
                if node.func.id == "tr_in":
                    node = ast.Call(node.func, node.args[1:], node.keywords)
                calls.append((path, node))
    return calls


def _fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def test_every_message_of_the_helpers_has_its_chinese_and_no_other():
    calls = _tr_calls()
    assert len(calls) > 50  # the scan found the call sites
    dynamic = [
        f"{p.relative_to(ROOT)}:{getattr(c, 'lineno', '?')}"
        for p, c in calls
        if not (c.args and isinstance(c.args[0], ast.Constant) and isinstance(c.args[0].value, str))
    ]
    assert not dynamic, f"tr() needs the English text as a literal (else no test sees it): {dynamic}"
    used = {c.args[0].value for _, c in calls}
    assert sorted(used - set(MESSAGES)) == [], "messages without a Chinese translation"
    assert sorted(set(MESSAGES) - used) == [], "Chinese messages no code shows any more"
    for english, chinese in MESSAGES.items():
        assert _fields(english) == _fields(chinese), f"fields differ: {english!r} -> {chinese!r}"
        assert chinese.strip() and any("\u4e00" <= ch <= "\u9fff" for ch in chinese + "汉") is True


def test_language_choice_fallbacks_and_errors(monkeypatch):
    assert i18n.language() == "en" and i18n.tr("custom roofs") == "custom roofs"
    monkeypatch.setenv(i18n.ENV, "zh")
    assert i18n.language() == "zh" and i18n.tr("custom roofs") == "自定义屋顶"
    monkeypatch.setenv(i18n.ENV, "klingon")  # an unknown value in the environment means English
    assert i18n.language() == "en"
    assert i18n.set_language("ZH ") == "zh"
    assert i18n.tr("not a message {x}", x=1) == "not a message 1"  # no translation: English
    assert i18n.text("a label nobody translated") == "a label nobody translated"
    assert i18n.text(None) is None and i18n.text(3) == 3
    monkeypatch.setattr(i18n, "_table", lambda lang: {"peak {mib:,.0f} MiB": "峰值 {oops} MiB"})
    assert i18n.tr("peak {mib:,.0f} MiB", mib=2048) == "peak 2,048 MiB"  # a broken translation
    with pytest.raises(ValueError, match="'en' and 'zh'"):
        i18n.set_language("fr")
    assert i18n.set_language(None) == "zh"  # None keeps the language


def test_setup_reports_in_the_chosen_language(capsys):
    import helpers

    helpers.setup("cpu", lang="zh", seed=0)
    out = capsys.readouterr().out
    assert "设备：cpu" in out and "在 CPU 上运行" in out
    helpers.setup("cpu", lang="en")
    assert "device: cpu" in capsys.readouterr().out


def test_setup_warns_when_the_machine_is_busy(monkeypatch, capsys):
    import os

    import helpers
    from helpers import env

    assert env.busy_note(load=0.9, cores=2) == ""  # under half the cores: quiet
    note = env.busy_note(load=1.0, cores=2)
    assert note.startswith("This machine is busy: load average 1.0 on 2 cores") and "\n" not in note
    i18n.set_language("zh")
    try:
        assert env.busy_note(load=3.5, cores=4).startswith("这台机器很忙：4 个核心上的平均负载是 3.5")
    finally:
        i18n.set_language("en")
    monkeypatch.setattr(os, "getloadavg", lambda: (2.5, 2.0, 1.0))
    helpers.setup("cpu", lang="en")
    assert "This machine is busy: load average 2.5" in capsys.readouterr().out


def test_checks_speak_chinese_with_the_catalogue_strings(monkeypatch, capsys):
    table = {**MESSAGES, "intensity of the GEMM": "该 GEMM 的算术强度", "F = 2MKN": "F = 2MKN（乘加算两次）"}
    monkeypatch.setattr(i18n, "_table", lambda lang: table)
    i18n.set_language("zh")
    checks.close(1.0, 1.0, "intensity of the GEMM")
    assert capsys.readouterr().out.strip() == "✓ 该 GEMM 的算术强度"
    with pytest.raises(checks.CheckFailed) as info:
        checks.close(0.5, 1.0, "intensity of the GEMM", rtol=0.01, hint="F = 2MKN")
    assert str(info.value) == (
        "✗ 该 GEMM 的算术强度：期望 1（误差 1% 以内），实际得到 0.5。\n  提示：F = 2MKN（乘加算两次）"
    )
    with pytest.raises(checks.CheckFailed, match="你的函数 `return` 了结果吗"):
        checks.equal(None, 3, "count")
    with pytest.raises(checks.CheckFailed, match="以下之一"):
        checks.one_of("x", ["a", "b"], "label")
    from helpers import roofline

    with checks.blocked(roofline, "gemm_flops"), pytest.raises(RuntimeError, match="评分期间调用"):
        roofline.gemm_flops(1, 2, 3)


def test_hidden_checks_record_the_same_data_in_every_language(monkeypatch):
    """Grading compares the learner's records with the reference run's (English): the label
    and the value must not change with the language, only the message shown."""
    from helpers import _records

    records = []
    monkeypatch.setenv(_records.RECORD_ENV, "1")
    monkeypatch.setattr(_records, "emit", records.append)
    monkeypatch.setattr(i18n, "_table", lambda lang: {**MESSAGES, "intensity for M = 64": "M = 64 时的强度"})
    for lang in ("en", "zh"):
        i18n.set_language(lang)
        checks.hidden.close(2.5, "intensity for M = 64", expect=None, hint="F = 2MKN")
        checks.hidden.one_of("memory", "limiter", expect=None)
    assert records[:2] == records[2:] and records[0]["what"] == "intensity for M = 64"


# --------------------------------------------------------------------------- the CJK font


def _cmap(path: Path) -> set[int]:
    from fontTools.ttLib import TTFont

    return set(TTFont(str(path), lazy=True).getBestCmap())


def test_the_shipped_font_covers_every_character_of_the_catalogues():
    """Every character a Chinese notebook's code may draw is in the shipped subset or in
    matplotlib's own DejaVu Sans (the family drawn first)."""
    from matplotlib import font_manager

    covered = _cmap(FONT) | _cmap(Path(font_manager.findfont("DejaVu Sans")))
    texts = [p.read_text(encoding="utf-8") for p in sorted((ROOT / "i18n").glob("*/*.json"))]
    texts += [p.read_text(encoding="utf-8") for p in sorted((HELPERS / "data").glob("strings_*.json"))]
    used = {ch for text in texts for ch in text if ch.isprintable()}
    missing = sorted(ch for ch in used if ord(ch) not in covered)
    assert not missing, (
        f"characters missing from {FONT.name}: {''.join(missing)!r}; rebuild it with "
        "`python scripts/build_cjk_font.py` (needs Debian's fonts-noto-cjk)"
    )
    licence = (FONT.parent / "OFL.txt").read_text(encoding="utf-8")
    assert "SIL OPEN FONT LICENSE Version 1.1" in licence


def _draw_every_helper_plot() -> list:
    """Each helper that draws, once, with its Chinese labels; returns the figures."""
    import matplotlib.pyplot as plt
    import torch

    from helpers import memory, nsys, precision, report, roofline, timeline

    figs = []

    def new():
        fig, ax = plt.subplots()
        figs.append(fig)
        return ax

    roofline.plot_roofline(1e12, 1e11, [(4.0, 3e11, "M=64")], ax=new())
    memory.plot_estimates(
        {"重计算\nnone": {"parameters": 2e9, "activations": 1e9}},
        4e9,
        capacity_label="H100: 80 GB",
        ax=new(),
        title="显存",
    )
    memory.plot_timeline([(0.0, 2**20), (1.0, 3 * 2**20)], ax=new(), peak=3 * 2**20)
    db = nsys.read_sqlite(nsys.example_path("compute", "sqlite"))
    nsys.plot_step(db, ax=new())
    steps = [precision.ScalingStep(i, 1.0 + i, 1.0, i == 2) for i in range(4)]
    precision.plot_delayed_scaling({"逐张量": steps}, 448.0, ax=new())
    precision.plot_block_errors({"MX": torch.rand(8) + 0.01}, ax=new())
    precision.plot_losses({"fp32": [2.0, 1.5, 1.2], "bf16": [2.0, 1.6, 1.2]}, ax=new())
    fast = bench.SpeedComparison(
        2.0,
        1.9,
        2.1,
        "faster",
        10,
        bench.Measurement([0.2] * 3, 0.3, "cpu"),
        bench.Measurement([0.1] * 3, 0.3, "cpu"),
        2,
        "cpu",
        ("fp32", "bf16"),
    )
    speedups = precision.Speedups(
        "cpu",
        "CPU",
        256,
        {"fp32": 1e11, "bf16": 2e11},
        {"fp32": 0.2, "bf16": 0.1},
        {"fp32": 1e10, "bf16": 2e10},
        {},
        1e10,
        "tiny",
        fast,
        fast,
    )
    precision.plot_speedups(speedups, ax=new())
    timeline.plot_pipeline(timeline.simulate_pipeline(4, 8), ax=new())
    traces = [timeline.load_trace(p) for p in timeline.example_traces("ddp_balanced")]
    timeline.plot_timeline(traces, ax=new())
    figs.append(report.plot_report(report.recorded_report("cpu-quick")))
    figs.append(roofline.RooflineExplorer().figure())
    figs.append(memory.MemoryExplorer().figure())
    return figs


def _glyph_warnings(lang: str) -> tuple[list[str], list]:
    import matplotlib.pyplot as plt

    i18n.set_language(lang)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        figs = _draw_every_helper_plot()
        texts = []
        for fig in figs:
            fig.canvas.draw()
            texts += [t.get_text() for t in fig.findobj(matplotlib.text.Text)]
            plt.close(fig)
    return [str(w.message) for w in caught if "missing from font" in str(w.message)], texts


def test_chinese_plots_have_no_missing_glyph():
    missing, texts = _glyph_warnings("zh")
    assert any("屋顶" in t for t in texts) and any("算术强度" in t for t in texts), "not in Chinese"
    assert not missing, missing[:5]
    from matplotlib import font_manager

    shipped = font_manager.findfont(
        font_manager.FontProperties(family=i18n.CJK_FONT_FAMILY), fallback_to_default=False
    )
    assert Path(shipped).resolve() == FONT.resolve()  # the shipped file, not a system font


def test_without_the_font_chinese_text_warns():
    """The warning the test above looks for is real: Chinese text in the default fonts raises it."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.set_title("屋顶线模型")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fig.canvas.draw()
    plt.close(fig)
    assert any("missing from font" in str(w.message) for w in caught)


def test_widgets_label_their_controls_in_chinese():
    from helpers import memory, roofline

    i18n.set_language("zh")
    explorer = roofline.RooflineExplorer()
    assert explorer.preset.description == "设备" and explorer.peak.description == "峰值 TF/s"
    assert explorer.title.value.startswith("<b>H100 SXM · bf16</b>：峰值 989.5 TFLOP/s")
    assert "计算受限" in explorer.row.value or "访存受限" in explorer.row.value
    mem = memory.MemoryExplorer()
    assert mem.optimizer.description == "优化器" and "每个 GPU" in mem.row.value
    assert "放得下" in mem.row.value or "放不下" in mem.row.value


def test_strings_file_is_what_the_catalogues_say():
    """The one file the helpers read holds the chapters' strings and the helpers' catalogue,
    in the catalogue's order (the order the line templates are tried in)."""
    catalogues = course_i18n
    lang = "zh"
    loaded = {
        c: catalogues.load(catalogues.catalogue_path(ROOT, lang, c))
        for c in sorted(p.stem for p in (ROOT / "i18n" / lang).glob("[0-9]*.json"))
    }
    merged, clashes = catalogues.merged_strings(loaded)
    assert not clashes
    shipped = json.loads(catalogues.strings_path(ROOT, lang).read_text(encoding="utf-8"))
    assert shipped["strings"] == merged
    assert list(shipped["messages"].items()) == list(MESSAGES.items()) and len(MESSAGES) > 50
    assert list(shipped["lines"].items()) == list(LINES.items()) and len(LINES) > 100
    assert not (ROOT / "src/helpers/data/lines_zh.json").exists()  # one shipped file per language


def test_a_message_in_two_groups_of_the_helpers_catalogue_is_an_error(tmp_path):
    folder = tmp_path / "i18n/zh"
    folder.mkdir(parents=True)
    assert course_i18n.load_helpers_catalogue(tmp_path, "zh") == {"messages": {}, "lines": {}}
    (folder / "helpers.json").write_text(json.dumps({"messages": {"a": {"x": "甲"}, "b": {"x": "乙"}}}))
    with pytest.raises(ValueError, match="in two groups"):
        course_i18n.load_helpers_catalogue(tmp_path, "zh")


# --------------------------------------------------------------------------- glossary


def test_the_glossary_fixes_each_term_and_nothing_uses_a_rejected_variant():
    from trainperf import i18n as course_i18n

    terms = course_i18n.load_glossary(ROOT, "zh")
    english = [t["en"] for t in terms]
    assert len(english) == len(set(english))
    assert {"datasheet", "master weights", "magnitude (of a value)"} <= set(english)
    for path in sorted((ROOT / "i18n/zh").glob("[0-9]*.json")):
        assert course_i18n.glossary_problems(terms, "zh", json.loads(path.read_text())) == [], path.name
    hits = [
        hit
        for message in [*MESSAGES.values(), *LINES.values()]
        for hit in course_i18n.glossary_hits(terms, "zh", message)
    ]
    assert hits == []  # the helpers' own messages and printed lines follow it too
    readme = (ROOT / "README.zh.md").read_text(encoding="utf-8")
    assert course_i18n.glossary_hits(terms, "zh", readme) == []
    # 数量级 (order of magnitude) is not 量级 (a value's magnitude); 运算单元 is not a notebook cell
    assert course_i18n.glossary_hits(terms, "zh", "相差两个数量级；芯片的运算单元") == []


def test_the_glossary_check_scans_the_readme_the_site_and_the_check_messages(monkeypatch, tmp_path):
    """Issue 43: the site's index said 训练 step, which the glossary rejects, because the check
    read only the catalogues. `trainperf build --check` now also reads README.zh.md, every
    string of the website (src/trainperf/site.py) and the helpers' messages."""
    from trainperf import build, site
    from trainperf import i18n as course_i18n

    texts = course_build.learner_texts(ROOT, "zh")
    assert texts["README.zh.md"] == (ROOT / "README.zh.md").read_text(encoding="utf-8")
    shown = {k.removeprefix("src/trainperf/site.py "): v for k, v in texts.items() if "site.py" in k}
    assert shown["TEXT['zh']['intro']"] == site.TEXT["zh"]["intro"]
    assert shown["TEXT['zh']['theme']['System Settings']"] == site.TEXT["zh"]["theme"]["System Settings"]
    assert not any("TEXT['en']" in k for k in texts)

    monkeypatch.setitem(site.TEXT["zh"], "intro", "一个训练 step 的时间")
    monkeypatch.setitem(site.TEXT["zh"], "theme", {"Main": "主副本"})
    problems, _ = build.catalogue_state(ROOT, "zh", check=True)
    intro = "src/trainperf/site.py TEXT['zh']['intro']"
    assert f"{intro}: uses '训练 step' (the glossary says 训练步 for training step)" in problems, problems
    assert any(
        p.startswith("src/trainperf/site.py TEXT['zh']['theme']['Main']: uses '主副本'") for p in problems
    )
    assert not [p for p in problems if "site.py" not in p], problems  # the rest of the course follows it

    (tmp_path / "README.zh.md").write_text("峰值来自规格书", encoding="utf-8")
    texts = course_build.learner_texts(tmp_path, "zh")
    terms = course_i18n.load_glossary(ROOT, "zh")
    assert course_i18n.glossary_hits(terms, "zh", texts["README.zh.md"]) == [
        "uses '规格书' (the glossary says 数据手册 for datasheet)"
    ]


def test_a_rejected_variant_is_named_by_build_check(tmp_path):
    from trainperf import i18n as course_i18n

    terms = course_i18n.load_glossary(ROOT, "zh")
    catalogue = {
        "cells": {"cell-07": {"en_hash": "x", "text": "峰值来自规格书；fp32 主副本"}},
        "strings": {"the ledger": "主副本的字节"},
    }
    problems = course_i18n.glossary_problems(terms, "zh", catalogue)
    assert len(problems) == 3
    assert problems[0] == "cell cell-07: uses '规格书' (the glossary says 数据手册 for datasheet)"
    assert problems[2].startswith("string 'the ledger': uses '主副本'")
    bad = tmp_path / "i18n/zh"
    bad.mkdir(parents=True)
    (bad / "glossary.json").write_text(json.dumps({"terms": [{"en": "x", "zh": "y", "reject": ["("]}]}))
    with pytest.raises(ValueError, match="does not compile"):
        course_i18n.load_glossary(tmp_path, "zh")


def test_labels_built_with_f_strings_are_translated_through_their_template(monkeypatch, capsys):
    from trainperf import i18n as course_i18n

    i18n._table.cache_clear()
    i18n._templates.cache_clear()
    monkeypatch.setattr(i18n, "_chosen", ["zh"])
    optimizer, mixed = "adamw", True
    label = f"✓ the ledger of 1M parameters, {optimizer}, mixed_precision={mixed}"
    assert i18n.text(label) == "✓ 100 万参数、adamw、mixed_precision=True 时的账本"
    fate = f"fate of {6.5e4:g} in fp16"
    assert i18n.text(fate) == "65000 在 fp16 中的结果"
    assert i18n.text("fate of  in fp16 and more") == "fate of  in fp16 and more"  # no field: no match
    with pytest.raises(checks.CheckFailed, match="第一次上溢"):
        checks.equal(3, 4, f"first overflow for amaxes {[1, 2]}, history {4}, {'max'}, margin {0}")
    # build: a catalogue key may be the f-string's template
    tree = __import__("ast").parse('x = f"scale for {dtype}, margin {m:.1f}"')
    node = next(n for n in __import__("ast").walk(tree) if isinstance(n, __import__("ast").JoinedStr))
    assert course_i18n.fstring_template(node) == "scale for {0}, margin {1}"


def test_the_chinese_student_notebooks_stub_says_it_in_chinese():
    chinese = i18n.tr_in("zh", course_i18n.STUB)
    assert chinese == MESSAGES[course_i18n.STUB] != course_i18n.STUB
    for path in sorted((ROOT / "notebooks/zh").glob("*/*.ipynb")):
        text = path.read_text(encoding="utf-8")
        assert course_i18n.STUB not in text and chinese in text, path.name
    english = (ROOT / "notebooks/01_roofline/01_roofline.ipynb").read_text(encoding="utf-8")
    assert course_i18n.STUB in english
    assert course_i18n.STUB in (ROOT / "grader/nbgrader_config.py").read_text(encoding="utf-8")


def test_the_memory_explorer_shows_its_choices_in_chinese_and_keeps_their_values():
    from helpers import memory

    i18n.set_language("zh")
    mem = memory.MemoryExplorer()
    # the labels a learner reads are Chinese; the values the estimate takes stay the English ones
    assert [value for _, value in mem.recompute.options] == ["none", "selective", "full"]
    assert [label for label, _ in mem.recompute.options] == [
        MESSAGES[m] for m in ("none", "selective", "full")
    ]
    assert [value for _, value in mem.attention.options] == ["fused", "unfused"]
    title = mem._title()
    assert MESSAGES["bf16 mixed"] in title and MESSAGES["fused"] + " 注意力" in title
    assert "bf16 mixed" not in title and "none" not in title.split("·")[-1]
    mem.recompute.value = "full"  # a value, as the code passes it, still selects the control
    assert MESSAGES["full"] in mem._title()
    i18n.set_language("en")
    assert memory.MemoryExplorer()._title().endswith("fused attention · recompute none")


def test_chapter_5_and_6_tables_show_their_row_names_in_chinese():
    from helpers import memory

    i18n.set_language("zh")
    ledger = memory.model_state_bytes(1_000_000, "adamw", True).format("GiB").splitlines()
    shown = [i18n.text(line) for line in ledger[1:]]
    names = ["参数", "梯度", "优化器状态", "主权重", "合计"]
    assert [line.split()[0] for line in shown] == names
    # the numbers are the English line's, the bytes per parameter named in Chinese
    for english, chinese in zip(ledger[1:], shown, strict=True):
        assert english.split()[1] in chinese and "每参数" in chinese and "B/param" not in chinese
    from helpers.checkpointing._practice import Measured

    base = Measured("none", 2 << 20, 4 << 20, 10**9)
    for name, chinese in [("none", "不做检查点"), ("every block", "每个块"), ("every sub-layer", "每个子层")]:
        row = i18n.text(Measured(name, 1 << 20, 3 << 20, 12 * 10**8).row(base))
        assert row.startswith(chinese) and "50%" in row and "1.200x" in row and "none" not in row
    verdict = "0.84x [0.79, 0.90] slower (none 30.78 ms, selective 36.60 ms)"
    assert i18n.text(verdict) == "0.84x [0.79, 0.90] 更慢（none 30.78 ms，selective 36.60 ms）"


def test_printed_lines_reach_a_chinese_notebook_translated(monkeypatch):
    import sys

    class OutStream:  # the name ipykernel's stream class has
        def __init__(self):
            self.parts = []

        def write(self, data):
            self.parts.append(data)

        def flush(self):
            pass

    kernel_stream = OutStream()
    monkeypatch.setattr(sys, "stdout", kernel_stream)
    monkeypatch.setattr(i18n, "_chosen", [])
    i18n._table.cache_clear()
    i18n._templates.cache_clear()
    i18n.set_language("zh")
    assert isinstance(sys.stdout, i18n._TranslatedLines)
    i18n.translate_output()  # once: no stream wrapped twice
    assert sys.stdout._stream is kernel_stream
    print(f"fate of {1e-9:g} in fp16")
    print("no translation here, so the line passes unchanged")
    print("partial", end="", flush=True)
    assert kernel_stream.parts == [
        "1e-09 在 fp16 中的结果\n",
        "no translation here, so the line passes unchanged\n",
        "partial",
    ]


def test_printed_line_templates_fill_the_same_fields():
    import re

    assert len(LINES) > 100
    for english, chinese in LINES.items():
        fields = sorted(re.findall(r"\{\d+\}", english))
        assert fields == sorted(re.findall(r"\{\d+\}", chinese)), english  # no field: an exact line
        assert len("".join(re.split(r"\{\d+\}", english)).strip()) >= 3, english  # never claims every line
    line = "ZeRO stage 1:   31.4 GB per GPU  ( 4.19 bytes per parameter of the model)"
    assert "31.4 GB" in i18n.text_in("zh", line) and "ZeRO" in i18n.text_in("zh", line)
    assert i18n.text_in("zh", line) != line


def test_a_label_inside_a_printed_line_is_translated_too():
    """A phrase the catalogues know, inside a templated line, is shown in Chinese (a
    comparison's labels, an operator's description, an f-string label); a single word, which
    may be code ("full", "none"), and a number are kept as they were printed."""
    line = (
        "no difference between sum on device and .item() every step beyond the noise: speed-up "
        "1.01x (95 % interval 0.99x to 1.03x) from 18 interleaved pairs; .item() every step "
        "12.3 ms, sum on device 12.2 ms per call (medians), 1 CPU thread on cpu."
    )
    shown = i18n.text_in("zh", line)
    assert "在设备上求和 与 每个训练步都调用 .item()" in shown  # labels as whole fields
    assert "每个训练步都调用 .item() 12.3 ms" in shown  # a label followed by its value
    assert "sum on device" not in shown and "every step" not in shown
    ops = i18n.text_in(
        "zh", "softmax (max, subtract, exp, sum, divide)     :  1.25 FLOP/B (0.42% of the H100 bf16 ridge)"
    )
    assert ops.startswith("softmax（取最大值、相减、exp、求和、相除）     ：") and "1.25 FLOP/B" in ops
    nested = i18n.text_in(
        "zh",
        "max of 16, margin 3: 0 overflowing steps [], mean rel. error 0.0227, "
        "0.12% of values subnormal or zero",
    )
    assert nested.startswith("取最近 16 步的最大值，余量 3：")
    plans = "t = 8, sequence parallel True : none    342 MiB   selective    102 MiB   full      6 MiB"
    assert i18n.text_in("zh", plans).endswith("none    342 MiB   selective    102 MiB   full      6 MiB")


def test_prose_detection_leaves_code_and_identifiers_alone():
    assert prose.english_prose("the measured peak's runs spread") == "the measured peak's"
    assert prose.english_prose("3 graph(s) were captured") == "graphs were captured"
    plan_line = "every：各 block ['full', 'none', 'full', 'none']，loss 相同：True"
    assert prose.english_prose(plan_line) is None
    # a lone label or verdict counts; Python's printed values and the glossary's kept terms do not
    assert prose.english_words("✓ pick_format(0.5, 2.0, 1e-09) = None") == []
    assert prose.english_words("65520 -> fp16 inf  结论 faster") == ["faster"]
    assert prose.english_words("每个 step 的 token 数", frozenset({"token"})) == ["step"]
    outputs = [
        {
            "output_type": "display_data",
            "data": {"text/markdown": "Source:\n```python\ndef f(x):\n    # a comment in words\n```"},
        }
    ]
    assert prose.shown_lines(outputs) == ["Source:"]
    printed = [{"output_type": "stream", "name": "stdout", "text": "```\nkept as printed\n"}]
    assert prose.shown_lines(printed) == ["```", "kept as printed"]


def test_every_visible_check_label_and_hint_has_its_chinese():
    """The labels and hints a learner reads under a test cell (constants, or f-strings keyed by
    their template) are in the catalogues; labels that are only code need none."""
    import ast

    from trainperf import i18n as course_i18n
    from trainperf.course import chapter_notebook
    from trainperf.grading.hidden import split_hidden

    table = json.loads((ROOT / "src/helpers/data/strings_zh.json").read_text(encoding="utf-8"))["strings"]
    kept = prose.kept_terms(ROOT, "zh")
    missing = []
    for chapter in sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir()):
        notebook = json.loads(chapter_notebook(ROOT, chapter).read_text(encoding="utf-8"))
        for cell in notebook["cells"]:
            if cell["cell_type"] != "code":
                continue
            visible = split_hidden("".join(cell["source"]))[0]
            for node in ast.walk(ast.parse(visible)):
                if not (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and getattr(node.func.value, "id", None) == "checks"
                ):
                    continue
                for arg in [*node.args[2:3], *(k.value for k in node.keywords if k.arg == "hint")]:
                    key = (
                        arg.value
                        if isinstance(arg, ast.Constant) and isinstance(arg.value, str)
                        else course_i18n.fstring_template(arg)
                        if isinstance(arg, ast.JoinedStr)
                        else None
                    )
                    if key and key not in table and prose.english_prose(key, kept, words=2):
                        missing.append(f"{chapter}: {key}")
    assert missing == []


def test_verdicts_and_the_words_of_tables_reach_a_chinese_reader_as_words():
    """A verdict alone is the verdict (更快), not the report's column that holds it; the report's
    headers name what each column holds; the format table's words and DDP's verdicts are Chinese,
    and English is unchanged."""
    from helpers import precision
    from helpers.report import document as report

    english_header = report.column_names()
    assert english_header[0] == "step" and english_header[10] == "faster"  # English as it was
    rows = str(precision.format_table()).split("\n")
    layout = next(r for r in rows if r.startswith("fp4_e2m1"))
    e8m0 = next(r for r in rows if r.startswith("e8m0"))
    assert layout.endswith("  bit layout") and " none " in e8m0
    shown_layout, shown_e8m0 = i18n.text_in("zh", layout), i18n.text_in("zh", e8m0)
    assert shown_layout == layout.replace("bit layout", "位布局")
    assert "none" not in shown_e8m0 and "无" in shown_e8m0 and shown_e8m0.endswith("torch.finfo")
    i18n.set_language("zh")
    try:
        header = report.column_names()
        assert header[0] == "配置" and header[10] == "交错比较结论"
        assert [i18n.text(v) for v in bench.VERDICTS] == ["更快", "更慢", "在噪声范围内"]
        assert [i18n.text(d) for d in ("keep", "revert", "baseline")] == ["保留", "撤销", "基线"]
    finally:
        i18n.set_language("en")

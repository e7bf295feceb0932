"""``trainperf site``: the course as a static website, one page per chapter and language.

Each page is the chapter's **student** notebook (what a learner gets: no solutions, no hidden
tests) with the outputs of an executed run (``trainperf run --lang en zh``) copied into its
teaching cells by cell id. Exercise cells keep no output and get a "your turn" box; widget
outputs keep their static picture and say that the controls need a running notebook. Every page
says which run its outputs come from and links to Colab, Binder and the ``.ipynb``.

The builder is Sphinx with MyST-NB and sphinx-book-theme (the Jupyter Book 1 stack): all three
ship their scripts, fonts and styles, so the site works offline. MathJax comes from the
``sphinx-mathjax-offline`` package instead of a CDN, Chinese search uses jieba (Sphinx's own
Chinese splitter), and the Chinese text is drawn with the CJK font the helpers ship.
"""

from __future__ import annotations

import copy
import json
import re
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .course import CourseError, chapters, require_languages
from .run import executed_path

PLACEHOLDER_URL = "https://github.com/trainperf/trainperf-course"  # pyproject's [project.urls]
BRANCH = "main"
STATIC = Path(__file__).with_name("site_static")

TEXT: dict[str, dict[str, Any]] = {  # words, and the other language: (code, name)
    "en": {
        "title": "Training Performance Analysis",
        "intro": "Where does a deep-learning training step spend its time and memory? Nine "
        "chapters, each a notebook with exercises that are checked as you go. Read them "
        "here with the outputs of a real run; open a chapter in Colab, Binder or your "
        "own JupyterLab to run it and work the exercises.",
        "other": ("zh", "中文"),
        "chapters": "Chapters",
        "from_run": "The outputs on this page come from one run of the notebook: device {device}, "
        "torch {torch}, Python {python}, {date}, {size} configuration "
        "(`trainperf run`). Your numbers will differ on other hardware.",
        "quick": "quick",
        "full": "full",
        "open": "Open this chapter:",
        "download": "download the notebook (.ipynb)",
        "your_turn": "Your turn",
        "exercise": "This is an exercise. Open the notebook (links at the top of the page) and "
        "write your answer where the cell says `# YOUR CODE HERE`; the check cell "
        "after it tells you whether it is right.",
        "widget": "This is a picture of the widget as the run left it. Its sliders and buttons "
        "work only in a running notebook.",
        "setup_show": "Set-up cell: imports the course helpers (show the code)",
        "setup_hide": "Set-up cell (hide the code)",
        "author": "the course authors",
        "search_bar": "Search the course ...",
        "theme": {},
    },
    "zh": {
        "title": "训练性能分析",
        "intro": "一个深度学习训练步的时间和显存花在了哪里？全课共九章，每章是一个带练习的 "
        "notebook，练习会当场检查。在这里可以阅读每一章和一次真实运行的输出；要运行它、"
        "做练习，请在 Colab、Binder 或你自己的 JupyterLab 中打开这一章。",
        "other": ("en", "English"),
        "chapters": "章节",
        "from_run": "本页的输出来自这个 notebook 的一次运行：设备 {device}，torch {torch}，"
        "Python {python}，{date}，{size}配置（`trainperf run`）。在别的硬件上，"
        "你得到的数字会不同。",
        "quick": "小规模",
        "full": "完整",
        "open": "打开这一章：",
        "download": "下载 notebook（.ipynb）",
        "your_turn": "轮到你了",
        "exercise": "这是一道练习。请打开 notebook（链接在本页顶部），在标有 `# YOUR CODE HERE` "
        "的地方写下你的答案；它后面的检查单元会告诉你答案对不对。",
        "widget": "这是运行结束时这个交互控件的截图。滑块和按钮只有在运行中的 notebook 里才能用。",
        "setup_show": "设置单元格：导入课程辅助包（点击查看代码）",
        "setup_hide": "设置单元格（点击隐藏代码）",
        "author": "本课程编写组",
        "search_bar": "搜索本课程……",
        # the theme's own words that its catalogues leave in English: its message catalogue
        # gets them (the theme switcher's labels), and course.js sets them on the buttons and
        # landmarks whose templates write them in English
        "theme": {
            "System Settings": "跟随系统",
            "Color mode": "配色模式",
            "Toggle primary sidebar": "显示或隐藏章节目录",
            "Toggle secondary sidebar": "显示或隐藏本页目录",
            "Main": "章节导航",
            "Page": "本页导航",
        },
    },
}
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"

# The Chinese pages' code font: pydata-sphinx-theme's monospace fonts (none has CJK characters),
# then the shipped CJK font limited to these ranges (CJK radicals to unified ideographs,
# compatibility ideographs, vertical and CJK-compatibility forms, full-width forms), then the
# generic family.
MONO_FONTS = (
    "ui-monospace",
    '"Cascadia Code"',
    '"Source Code Pro"',
    "Menlo",
    "Consolas",
    '"DejaVu Sans Mono"',
)
CJK_MONO_FAMILY = "Trainperf CJK Mono Fallback"
CJK_RANGES = ("U+2E80-9FFF", "U+F900-FAFF", "U+FE10-FE1F", "U+FE30-FE4F", "U+FF00-FFEF")


def shown_strings(lang: str) -> dict[str, str]:
    """Every string the site shows a reader in ``lang`` (its page texts and the theme's words it
    translates), named by where it is in ``TEXT``: what the glossary check scans."""
    found: dict[str, str] = {}

    def walk(name: str, value: Any) -> None:
        if isinstance(value, str):
            found[name] = value
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(f"{name}[{key!r}]", item)
        elif isinstance(value, (list, tuple)):
            for index, item in enumerate(value):
                walk(f"{name}[{index}]", item)

    walk(f"TEXT[{lang!r}]", TEXT.get(lang, {}))
    return found


def repository_url(root: Path) -> str:
    """``[project.urls] Source`` from pyproject.toml (read as text: Python 3.10 has no tomllib)."""
    text = (root / "pyproject.toml").read_text(encoding="utf-8")
    found = re.search(r'^Source\s*=\s*"([^"]+)"', text, re.MULTILINE)
    return found.group(1).rstrip("/") if found else PLACEHOLDER_URL


def launch_links(repo_url: str, notebook: str) -> dict[str, str]:
    """Colab and Binder links that open ``notebook`` (a path in the repository) from GitHub."""
    match = re.fullmatch(r"https://github\.com/([^/]+)/([^/]+?)(?:\.git)?", repo_url)
    if not match:
        raise CourseError(
            f"the repository URL must be https://github.com/<owner>/<name>, got "
            f"{repo_url!r}; pass --repo-url or set [project.urls] Source."
        )
    owner, name = match.groups()
    return {
        "Colab": f"https://colab.research.google.com/github/{owner}/{name}/blob/{BRANCH}/{notebook}",
        "Binder": f"https://mybinder.org/v2/gh/{owner}/{name}/{BRANCH}?labpath={notebook}",
    }


def _is_exercise(cell: dict[str, Any]) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return bool(meta.get("solution") or meta.get("grade"))


def _is_setup(cell: dict[str, Any]) -> bool:
    """The set-up cell: the code cell that imports the course helpers (installing them first)."""
    source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
    return (
        cell["cell_type"] == "code"
        and "parameters" not in cell.get("metadata", {}).get("tags", [])
        and "import helpers" in source.splitlines()
    )


def _fold(cell: dict[str, Any], show: str, hide: str) -> None:
    """Fold ``cell``'s code under a summary line (MyST-NB's hide-input); its output stays shown."""
    metadata = cell.setdefault("metadata", {})
    metadata["tags"] = [*metadata.get("tags", []), "hide-input"]
    metadata["mystnb"] = {"code_prompt_show": show, "code_prompt_hide": hide}


def _markdown(text: str) -> dict[str, Any]:
    return {"cell_type": "markdown", "metadata": {}, "source": text}


def _static_outputs(outputs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], bool]:
    """The outputs without live widget views (their picture and text stay); True if one had."""
    kept, had_widget = [], False
    for output in outputs:
        output = copy.deepcopy(output)
        data = output.get("data")
        if isinstance(data, dict) and WIDGET_VIEW in data:
            had_widget = True
            del data[WIDGET_VIEW]
            if not data:
                continue
        if "execution_count" in output:
            output["execution_count"] = None
        kept.append(output)
    return kept, had_widget


def page_notebook(
    student: dict[str, Any], executed: dict[str, Any], lang: str, header: str
) -> dict[str, Any]:
    """The notebook a page is built from: ``student``'s cells, ``executed``'s outputs in the
    teaching cells, a "your turn" box before each answer cell, ``header`` after the title; the
    set-up cell's code folded under a summary line, as its output (the device report) stays."""
    words = TEXT[lang]
    outputs = {
        c.get("id"): c.get("outputs", []) for c in executed.get("cells", []) if c.get("cell_type") == "code"
    }
    cells: list[dict[str, Any]] = []
    setup = next((i for i, cell in enumerate(student["cells"]) if _is_setup(cell)), None)
    for index, cell in enumerate(student["cells"]):
        cell = copy.deepcopy(cell)
        if cell["cell_type"] == "code":
            cell["execution_count"] = None
            widget = False
            if _is_exercise(cell):
                cell["outputs"] = []
                if cell["metadata"].get("nbgrader", {}).get("solution"):
                    cells.append(
                        _markdown(
                            f":::{{admonition}} {words['your_turn']}\n:class: tip\n{words['exercise']}\n:::"
                        )
                    )
            else:
                cell["outputs"], widget = _static_outputs(outputs.get(cell.get("id"), []))
            if index == setup:
                _fold(cell, words["setup_show"], words["setup_hide"])
            cells.append(cell)
            if widget:
                cells.append(_markdown(f"*{words['widget']}*"))
            continue
        cells.append(cell)
        if index == 0:
            cells.append(_markdown(header))
    page = {
        "cells": cells,
        "metadata": {
            k: v for k, v in student.get("metadata", {}).items() if k in ("kernelspec", "language_info")
        },
        "nbformat": 4,
        "nbformat_minor": student.get("nbformat_minor", 5),
    }
    return page


def _switch(lang: str, page: str, langs: list[str]) -> str:
    """A link to the same page in the other language, when that language is built too."""
    other, other_name = TEXT[lang]["other"]
    if other not in langs:
        return ""
    return f'<a class="course-language" href="../{other}/{page}.html">{other_name}</a>'


def page_header(lang: str, chapter: str, run: dict[str, Any], links: dict[str, str], langs: list[str]) -> str:
    """The lines under a page's title: where its outputs come from, launch links, language."""
    words = TEXT[lang]
    size = words["quick" if run.get("quick", True) else "full"]
    provenance = words["from_run"].format(
        size=size, **{k: run.get(k, "?") for k in ("device", "torch", "python", "date")}
    )
    anchors = " · ".join(f'<a href="{url}">{name}</a>' for name, url in links.items())
    return (
        f'<p class="course-links">{words["open"]} {anchors} · '
        f'<a href="notebooks/{chapter}.ipynb" download>{words["download"]}</a>'
        + (f" · {switch}" if (switch := _switch(lang, chapter, langs)) else "")
        + f"</p>\n\n{provenance}\n"
    )


def _index(lang: str, chapter_ids: list[str], langs: list[str]) -> str:
    words = TEXT[lang]
    toc = "\n".join(chapter_ids)
    switch = _switch(lang, "index", langs)
    return (
        f"# {words['title']}\n\n{words['intro']}\n\n"
        + (f"<p>{switch}</p>\n\n" if switch else "")
        + f"```{{toctree}}\n:maxdepth: 1\n:caption: {words['chapters']}\n\n{toc}\n```\n"
    )


_CONF = """# Generated by `trainperf site`; edit src/trainperf/site.py instead.
project = {title!r}
author = {author!r}
language = {language!r}
html_search_language = {search!r}
extensions = ["myst_nb", "sphinx-mathjax-offline"]
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]
nb_execution_mode = "off"
nb_merge_streams = True
html_theme = "sphinx_book_theme"
html_title = {title!r}
html_static_path = ["_static"]
html_css_files = ["course.css"]
html_js_files = [("course.js", {{"defer": "defer"}})]
html_copy_source = False
html_show_sourcelink = False
html_theme_options = {{"home_page_in_toc": True, "use_download_button": False,
                       "use_fullscreen_button": False, "show_toc_level": 2,
                       "search_bar_text": {search_bar!r}}}
suppress_warnings = ["myst.header", "mystnb.unknown_mime_type", "misc.highlighting_failure"]
html_context = {{"default_mode": "light"}}  # no saved mode yet: the theme would log an error
html_favicon = "_static/favicon.png"  # else the browser asks for /favicon.ico, which is not there
{extra}"""

# Chinese search, two fixes. Sphinx 9's Chinese search uses the English stemmer file but names
# the stemmer after the language ("ChineseStemmer is not defined" in the browser): name it after
# the file. And jieba splits the pages into words, but the browser keeps a query such as
# 屋顶线 whole, so it matches nothing: split each run of hanzi into the longest words the index
# holds (greedy, left to right), as jieba split the text, leaving out single characters the
# index does not hold (Sphinx indexes no one-character word).
_ZH_SEARCH_FIX = '''
from sphinx.search import languages as _languages
from sphinx.search.zh import SearchChinese as _SearchChinese

class _Search(_SearchChinese):
    js_splitter_code = r"""
function splitQuery(query) {
  // searchtools.js declares `const Search`, which is not a property of window
  const index = (typeof Search !== "undefined" && Search._index) || {};
  const known = (word) => (index.terms && word in index.terms)
    || (index.titleterms && word in index.titleterms);
  const out = [];
  for (const part of query.split(/[\\s\\p{P}\\p{S}]+/u)) {
    for (const run of part.match(/\\p{Script=Han}+|[^\\p{Script=Han}]+/gu) || []) {
      if (!/\\p{Script=Han}/u.test(run)) { out.push(run); continue; }
      for (let i = 0; i < run.length;) {
        let j = run.length;
        while (j > i + 1 && !known(run.slice(i, j).toLowerCase())) j--;
        // the index leaves out one-character words, so an unknown one cannot be required
        if (j - i > 1 || known(run.slice(i, j)) || run.length === 1) out.push(run.slice(i, j));
        i = j;
      }
    }
  }
  return out.filter((term) => term);
}
"""

if _SearchChinese.js_stemmer_rawcode == "english-stemmer.js":
    _Search.language_name = "English"
_languages["zh"] = _Search

# jieba keeps the glossary's terms whole (主权重, not 主权 + 重): they are its user dictionary
import os as _os

html_search_options = {"dict": _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "glossary.dict")}
# the theme's words its own catalogues leave in English (locale/zh_CN/LC_MESSAGES/sphinx.mo)
locale_dirs = ["locale"]
'''


def missing_runs(executed_dir: Path, chapter_ids: list[str], langs: list[str]) -> dict[str, list[str]]:
    """The chapters, per language, that have no executed notebook in ``executed_dir``."""
    missing = {
        lang: [name for name in chapter_ids if not executed_path(executed_dir, name, lang).is_file()]
        for lang in langs
    }
    return {lang: names for lang, names in missing.items() if names}


def missing_runs_message(root: Path, executed_dir: Path, missing: dict[str, list[str]]) -> str:
    """One line: every missing executed notebook, and the one ``trainperf run`` that makes them
    all (``--chapters`` only when not every chapter is needed, ``--out`` only when the folder is
    not the one ``trainperf run`` writes to by default from here)."""
    names = [name for name in chapters(root) if any(name in found for found in missing.values())]
    listed = "; ".join(f"{lang}: {', '.join(found)}" for lang, found in missing.items())
    command = "trainperf run"
    if list(missing) != ["en"]:
        command += " --lang " + " ".join(missing)
    if names != chapters(root):
        command += " --chapters " + " ".join(names)
    if executed_dir.resolve() != Path("build/executed").resolve():
        command += f" --out {shlex.quote(str(executed_dir))}"
    count = sum(len(found) for found in missing.values())
    return (
        f"the site takes its outputs from an executed run, and {executed_dir} lacks "
        f"{count} notebook{'s' if count > 1 else ''} ({listed}): run `{command}` first "
        "(or pass --executed)."
    )


def _run_info(executed: dict[str, Any]) -> dict[str, Any]:
    return executed.get("metadata", {}).get("trainperf", {}).get("run", {})


def prepare(
    root: Path,
    lang: str,
    chapter_ids: list[str],
    executed_dir: Path,
    source: Path,
    repo_url: str,
    langs: list[str],
) -> None:
    """Write one language's Sphinx source folder: conf.py, index.md, one notebook a chapter."""
    from helpers.i18n import CJK_FONT_FILE

    if source.exists():
        shutil.rmtree(source)
    (source / "_static").mkdir(parents=True)
    for name in chapter_ids:
        run_file = executed_path(executed_dir, name, lang)
        if not run_file.is_file():  # build_site checks first; this is for a direct call
            raise CourseError(missing_runs_message(root, executed_dir, {lang: [name]}))
        folder = root / "notebooks" / ("" if lang == "en" else lang) / name
        student = json.loads((folder / f"{name}.ipynb").read_text(encoding="utf-8"))
        executed = json.loads(run_file.read_text(encoding="utf-8"))
        notebook_path = f"notebooks/{'' if lang == 'en' else lang + '/'}{name}/{name}.ipynb"
        header = page_header(lang, name, _run_info(executed), launch_links(repo_url, notebook_path), langs)
        page = page_notebook(student, executed, lang, header)
        (source / f"{name}.ipynb").write_text(json.dumps(page, ensure_ascii=False), encoding="utf-8")
    (source / "index.md").write_text(_index(lang, chapter_ids, langs), encoding="utf-8")
    (source / "conf.py").write_text(
        _CONF.format(
            title=TEXT[lang]["title"],
            author=TEXT[lang]["author"],
            search_bar=TEXT[lang]["search_bar"],
            language="zh_CN" if lang == "zh" else lang,
            search="zh" if lang == "zh" else lang,
            extra=_ZH_SEARCH_FIX if lang == "zh" else "",
        ),
        encoding="utf-8",
    )
    for name in ("course.css", "favicon.png"):
        shutil.copy2(STATIC / name, source / "_static" / name)
    script = (STATIC / "course.js").read_text(encoding="utf-8")
    labels = json.dumps(TEXT[lang]["theme"], ensure_ascii=False)
    (source / "_static" / "course.js").write_text(script.replace("{/*LABELS*/}", labels), encoding="utf-8")
    if lang == "zh":
        import helpers

        (source / "glossary.dict").write_text(jieba_dictionary(root), encoding="utf-8")
        _write_catalogue(TEXT[lang]["theme"], source / "locale" / "zh_CN" / "LC_MESSAGES" / "sphinx.mo")
        font = Path(helpers.__file__).parent / "data" / "fonts" / CJK_FONT_FILE
        shutil.copy2(font, source / "_static" / CJK_FONT_FILE)
        with open(source / "_static" / "course.css", "a", encoding="utf-8") as css:
            css.write(
                _CJK_CSS.format(
                    file=CJK_FONT_FILE,
                    mono_family=CJK_MONO_FAMILY,
                    ranges=", ".join(CJK_RANGES),
                    mono_stack=", ".join([*MONO_FONTS, f'"{CJK_MONO_FAMILY}"', "monospace"]),
                )
            )


def jieba_dictionary(root: Path) -> str:
    """jieba's user dictionary for the Chinese search index: each Chinese term of
    ``i18n/zh/glossary.json`` made only of hanzi, one a line (no frequency: jieba picks one
    high enough to keep the word whole)."""
    from .i18n import load_glossary

    words = [
        term["zh"]
        for term in load_glossary(root, "zh")
        if re.fullmatch("[\u3400-\u4dbf\u4e00-\u9fff]{2,}", term["zh"])
    ]
    return "".join(f"{word}\n" for word in dict.fromkeys(words))


def _write_catalogue(messages: dict[str, str], path: Path) -> None:
    """A gettext catalogue (.mo) of ``messages``, which Sphinx merges with the theme's own."""
    from babel.messages.catalog import Catalog  # Sphinx's own dependency
    from babel.messages.mofile import write_mo

    catalogue = Catalog(locale="zh_CN", domain="sphinx")
    for english, translated in messages.items():
        catalogue.add(english, translated)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as out:
        write_mo(out, catalogue)


_CJK_CSS = """
/* Chinese pages: the CJK font the helpers ship (a subset of Noto Sans CJK SC, SIL OFL). */
@font-face {{ font-family: "Trainperf Sans SC"; src: url("{file}") format("opentype");
             font-display: block; }}
html[lang^="zh"] body {{ --pst-font-family-base: "Trainperf Sans SC", system-ui, sans-serif;
                        --pst-font-family-heading: "Trainperf Sans SC", system-ui, sans-serif;
                        font-family: "Trainperf Sans SC", system-ui, sans-serif; }}
/* Code and output blocks: the same file, limited to CJK characters and full-width punctuation,
   comes after the monospace fonts and before the generic `monospace`. Latin text keeps its
   monospace font (this face has none of its characters); each Chinese character in a code
   line, a printed table or an error message is drawn with this font, not as an empty box on
   a machine without a CJK system font, nor in whatever CJK font the system maps `monospace` to. */
@font-face {{ font-family: "{mono_family}"; src: url("{file}") format("opentype"); font-display: block;
             unicode-range: {ranges}; }}
html[lang^="zh"] {{ --pst-font-family-monospace: {mono_stack};
                   --bs-font-monospace: {mono_stack}; }}
html[lang^="zh"] :is(pre, code, kbd, samp) {{ font-family: var(--pst-font-family-monospace); }}
"""


def _sphinx(source: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-E", str(source), str(out)],
        capture_output=True,
        text=True,
    )


def build_site(
    root: Path,
    out: Path,
    langs: list[str],
    wanted: list[str] | None = None,
    executed_dir: Path | None = None,
    repo_url: str | None = None,
) -> list[str]:
    """Build the site into ``out`` (``out/<lang>/``, and ``out/index.html`` choosing one);
    returns the warnings to print (the placeholder repository URL)."""
    require_languages(root, langs)
    for lang in langs:
        if lang not in TEXT:  # a new translation needs its page texts here too
            raise CourseError(
                f"the site has no page texts for {lang!r} yet: add them to TEXT in src/trainperf/site.py."
            )
    try:
        import myst_nb  # noqa: F401
        import sphinx_book_theme  # noqa: F401
    except ImportError as exc:
        raise CourseError(
            f"{exc.name} is not installed: pip install -e '.[course]' "
            "(the site extra: Sphinx, MyST-NB, sphinx-book-theme)"
        ) from None
    chapter_ids = chapters(root, wanted)
    executed_dir = executed_dir or root / "build" / "executed"
    repo_url = (repo_url or repository_url(root)).rstrip("/")
    warnings = []
    if repo_url == PLACEHOLDER_URL:
        warnings.append(
            f"the launch links use the placeholder repository {PLACEHOLDER_URL}: set "
            "[project.urls] Source in pyproject.toml (or pass --repo-url) before "
            "publishing."
        )
    missing = missing_runs(executed_dir, chapter_ids, langs)
    if missing:
        raise CourseError(missing_runs_message(root, executed_dir, missing))
    work = out.parent / f".{out.name}-source"
    for lang in langs:
        prepare(root, lang, chapter_ids, executed_dir, work / lang, repo_url, langs)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    # each language in its own build folder: MyST-NB writes its files beside the output folder
    with ThreadPoolExecutor(max_workers=len(langs)) as pool:
        built = pool.map(lambda lang: _sphinx(work / lang, work / f"{lang}-build" / "html"), langs)
        done = dict(zip(langs, built, strict=True))
    for lang, result in done.items():
        if result.returncode != 0:
            last = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise CourseError(f"Sphinx could not build the {lang} pages: {last}")
        shutil.move(work / f"{lang}-build" / "html", out / lang)
        shutil.rmtree(out / lang / "_sources", ignore_errors=True)  # empty: sources are not copied
        folder = out / lang / "notebooks"
        folder.mkdir(exist_ok=True)
        for name in chapter_ids:  # the download link: the student notebook, as a learner gets it
            shutil.copy2(
                root / "notebooks" / ("" if lang == "en" else lang) / name / f"{name}.ipynb",
                folder / f"{name}.ipynb",
            )
    first = langs[0]
    (out / "index.html").write_text(
        f'<!doctype html><meta charset="utf-8"><title>{TEXT[first]["title"]}</title>'
        f'<meta http-equiv="refresh" content="0; url={first}/index.html">'
        + "".join(f'<p><a href="{lang}/index.html">{TEXT[lang]["title"]}</a></p>' for lang in langs),
        encoding="utf-8",
    )
    shutil.rmtree(work, ignore_errors=True)
    return warnings

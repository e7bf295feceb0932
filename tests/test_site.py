"""The course website (`trainperf site`), built the way the README says and read in a browser.

Chapters 1 and 4 (chapter 4 has the timeline plot) run in both languages as the README says
(`trainperf run --device cpu --lang en zh`, with the notebooks' own inline plots: the suite's
MPLBACKEND=Agg would leave the pages without a picture), then `trainperf site`. The pages are
checked as files (nothing hidden or solved leaks, every page says where its outputs come from,
exercises are "your turn" boxes) and in the system's Chromium (no console error, no request
leaving localhost, links resolve, search finds a term in each language with snippets from the
chapter's text and a glossary term highlighted whole, maths and code render, the Chinese text has
every glyph in the served font and Chromium draws each Chinese character of the code and output
blocks with it, the Chinese pages' theme menu, buttons and footer are in Chinese; at a 1280 px
window no code or output block scrolls sideways, the set-up cell is folded and the timeline and
pipeline plots' labels are shown at 10 pt or more).

``TRAINPERF_SITE_DIR=build/site TRAINPERF_SITE_EXECUTED=build/executed pytest tests/test_site.py
-n0`` runs the same checks on a site built beforehand (e.g. every chapter, as the README's
commands build it).
"""

from __future__ import annotations

import functools
import html
import http.server
import json
import os
import re
import socketserver
import subprocess
import sys
import tempfile
import threading
import urllib.parse
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

import pytest
from conftest import ROOT

from trainperf.grading.hidden import split_hidden
from trainperf.run import executed_path
from trainperf.site import page_notebook

pytestmark = pytest.mark.notebooks
CHAPTERS = ["01_roofline", "04_timeline"]
LANGS = ["en", "zh"]


def _trainperf(*args: str, timeout: float = 900, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trainperf.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> dict:
    prebuilt = os.environ.get("TRAINPERF_SITE_DIR")
    if prebuilt:
        out = Path(prebuilt).resolve()
        names = sorted(p.stem for p in (out / "en").glob("*.html") if p.stem[:2].isdigit())
        executed = os.environ.get("TRAINPERF_SITE_EXECUTED")  # the run it was built from
        return {
            "out": out,
            "executed": Path(executed).resolve() if executed else None,
            "stderr": None,
            "chapters": names,
        }
    executed_dir = tmp_path_factory.mktemp("site-executed")
    learner = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}  # the kernel's inline plots
    readme = ["run", "--device", "cpu", "--lang", "en", "zh", "--jobs", "2"]  # the README's command
    ran = _trainperf(*readme, "--chapters", *CHAPTERS, "--out", str(executed_dir), timeout=900, env=learner)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    out = tmp_path_factory.mktemp("site") / "site"
    built = _trainperf(
        "site", "--chapters", *CHAPTERS, "--executed", str(executed_dir), "--out", str(out), timeout=600
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return {"out": out, "executed": executed_dir, "stderr": built.stderr, "chapters": CHAPTERS}


class _Text(HTMLParser):
    """The text a reader sees (code blocks joined back from their highlighting spans)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag, attrs):
        self._skip += tag in ("script", "style")

    def handle_endtag(self, tag):
        self._skip -= tag in ("script", "style") and self._skip > 0

    def handle_data(self, data):
        if not self._skip:
            self.parts.append(data)


def _page_text(path: Path) -> str:
    parser = _Text()
    parser.feed(path.read_text(encoding="utf-8"))
    return "".join(parser.parts)


def _site_text(out: Path) -> str:
    """Everything the site serves that a reader or a script could read, as text."""
    chunks = []
    for path in sorted(out.rglob("*")):
        if path.suffix == ".html":
            chunks.append(_page_text(path))
            chunks.append(html.unescape(path.read_text(encoding="utf-8")))
        elif path.suffix in (".js", ".ipynb", ".txt", ".json") and "_static" not in path.parts:
            chunks.append(path.read_text(encoding="utf-8", errors="replace"))
    return "\n".join(chunks)


def _cell_source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _public_text() -> str:
    """Every cell of every student notebook, in every language: what the course shows anyway."""
    return "\n".join(
        _cell_source(c)
        for path in sorted((ROOT / "notebooks").rglob("*.ipynb"))
        for c in json.loads(path.read_text(encoding="utf-8"))["cells"]
    )


def _outputs_text(cell: dict) -> str:
    return "\n".join(
        "".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", ""))
        for o in cell.get("outputs", [])
    )


def _secret_lines(chapter: str, executed: Path | None) -> list[str]:
    """What a learner who runs the student notebook never sees: hidden-test lines, solution
    lines and what the solution's exercise cells print. Public is every student notebook's
    source and the teaching cells' outputs of the run the site shows (a teaching cell that
    prints a helper's source shows that source to every learner who runs it)."""
    solution = json.loads((ROOT / "solutions" / chapter / f"{chapter}.ipynb").read_text(encoding="utf-8"))
    public = [_public_text()]
    secret = []
    for lang in LANGS if executed else []:
        run = json.loads(executed_path(executed, chapter, lang).read_text(encoding="utf-8"))
        for cell in run["cells"]:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            (secret if meta.get("solution") or meta.get("grade") else public).append(_outputs_text(cell))
    secret = "\n".join(secret).splitlines()
    public = "\n".join(public)
    for cell in solution["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        source = _cell_source(cell)
        if meta.get("grade") and not meta.get("solution"):
            _, hidden = split_hidden(source)
            secret += (hidden or "").splitlines()
        if meta.get("solution"):
            inside = re.findall(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", source, re.S)
            secret += "\n".join(inside).splitlines()
    return [
        ln.strip()
        for ln in secret
        if len(ln.strip()) >= 12 and not ln.strip().startswith("#") and ln.strip() not in public
    ]


def test_the_build_says_its_links_use_the_placeholder_repository(site):
    if site["stderr"] is None:
        pytest.skip("a site built beforehand (TRAINPERF_SITE_DIR): its build output is not here")
    lines = [ln for ln in site["stderr"].splitlines() if ln.strip()]
    assert len(lines) == 1 and "placeholder repository" in lines[0], site["stderr"]


def test_no_hidden_test_or_solution_appears_in_the_site(site):
    text = _site_text(site["out"])
    assert 'raise NotImplementedError("Exercise not done yet' in text, "the code text is readable"
    for chapter in site["chapters"]:
        secret = _secret_lines(chapter, site["executed"])
        assert len(secret) >= 5, f"{chapter}: found too few hidden or solution lines to check"
        leaked = [ln for ln in secret if ln in text]
        assert not leaked, f"{chapter}: hidden-test or solution lines in the site: {leaked[:5]}"


@pytest.mark.parametrize("lang", LANGS)
def test_each_page_says_where_its_outputs_come_from_and_how_to_open_it(site, lang):
    from importlib import metadata

    out = site["out"] / lang
    for chapter in site["chapters"]:
        page = (out / f"{chapter}.html").read_text(encoding="utf-8")
        text = _page_text(out / f"{chapter}.html")
        assert f"torch {metadata.version('torch')}" in text and ("cpu" in text), text[:2000]
        notebook = f"notebooks/{'' if lang == 'en' else 'zh/'}{chapter}/{chapter}.ipynb"
        assert (
            f"https://colab.research.google.com/github/trainperf/trainperf-course/blob/main/{notebook}"
            in page
        )
        assert f"https://mybinder.org/v2/gh/trainperf/trainperf-course/main?labpath={notebook}" in page
        assert f'href="notebooks/{chapter}.ipynb"' in page
        assert (out / "notebooks" / f"{chapter}.ipynb").is_file()
        other = "zh" if lang == "en" else "en"
        assert f'href="../{other}/{chapter}.html"' in page
        student = json.loads(
            (ROOT / "notebooks" / ("" if lang == "en" else lang) / chapter / f"{chapter}.ipynb").read_text(
                encoding="utf-8"
            )
        )
        answers = sum(bool(c["metadata"].get("nbgrader", {}).get("solution")) for c in student["cells"])
        boxes = page.count("Your turn" if lang == "en" else "轮到你了")
        assert boxes == answers > 0, f"{chapter}: {boxes} 'your turn' boxes for {answers} exercises"
        assert "widget-view+json" not in page and "unpkg.com" not in page and "cdn." not in page
    first = (out / "01_roofline.html").read_text(encoding="utf-8")
    assert re.search(r'<a class="left-prev"\s+href="index.html"', first), "no 'previous' link"
    index = (out / "index.html").read_text(encoding="utf-8")
    assert re.search(r'<a class="right-next"\s+href="01_roofline.html"', index), "no 'next' link"
    assert ("sliders and buttons" if lang == "en" else "滑块和按钮") in (out / "01_roofline.html").read_text(
        encoding="utf-8"
    ), "chapter 1's explorer must say its controls need a running notebook"


def test_a_page_keeps_teaching_outputs_drops_exercise_outputs_and_live_widgets():
    student = {
        "cells": [
            {"cell_type": "markdown", "id": "t", "metadata": {}, "source": "# Title"},
            {
                "cell_type": "code",
                "id": "a",
                "metadata": {},
                "source": "x = 1",
                "outputs": [],
                "execution_count": None,
            },
            {
                "cell_type": "code",
                "id": "w",
                "metadata": {},
                "source": "show()",
                "outputs": [],
                "execution_count": None,
            },
            {
                "cell_type": "code",
                "id": "e",
                "metadata": {"nbgrader": {"solution": True}},
                "source": "# YOUR CODE HERE",
                "outputs": [],
                "execution_count": None,
            },
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    executed = {
        "cells": [
            {
                "cell_type": "code",
                "id": "a",
                "outputs": [{"output_type": "stream", "name": "stdout", "text": "1\n"}],
            },
            {
                "cell_type": "code",
                "id": "w",
                "outputs": [
                    {
                        "output_type": "display_data",
                        "metadata": {},
                        "data": {
                            "application/vnd.jupyter.widget-view+json": {},
                            "image/png": "AAAA",
                            "text/plain": "view",
                        },
                    }
                ],
            },
            {
                "cell_type": "code",
                "id": "e",
                "outputs": [
                    {"output_type": "stream", "name": "stdout", "text": "the solution's answer 42\n"}
                ],
            },
        ]
    }
    page = page_notebook(student, executed, "en", "HEADER")
    kinds = [(c["cell_type"], c.get("id")) for c in page["cells"]]
    assert kinds[:3] == [("markdown", "t"), ("markdown", None), ("code", "a")]
    assert page["cells"][1]["source"] == "HEADER"
    assert page["cells"][2]["outputs"][0]["text"] == "1\n"
    widget = page["cells"][3]
    assert set(widget["outputs"][0]["data"]) == {"image/png", "text/plain"}
    assert "running notebook" in page["cells"][4]["source"]
    assert "Your turn" in page["cells"][5]["source"] and page["cells"][6]["outputs"] == []


def test_bad_input_is_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    for args, words in (
        (["site", "--lang", "fr"], "unknown language 'fr'"),
        (["run", "--lang", "fr", "--chapters", "01"], "unknown language 'fr'"),
        (
            ["site", "--chapters", "02", "--executed", str(tmp_path / "empty"), "--out", str(tmp_path / "s")],
            f"trainperf run --lang en zh --chapters 02_mfu --out {tmp_path / 'empty'}",
        ),
    ):
        done = _trainperf(*args, timeout=120)
        err = done.stderr.strip()
        assert done.returncode == 2 and words in err and "\n" not in err, (args, err)


def test_a_site_before_its_runs_names_every_missing_notebook_and_the_command_that_makes_them(tmp_path):
    """`trainperf site` before the Chinese run (or any run it needs) names every executed
    notebook it lacks, not only the first, and the one `trainperf run` that makes them all."""
    from conftest import CHAPTERS as EVERY_CHAPTER

    executed = tmp_path / "executed"
    executed.mkdir()
    (executed / "01_roofline.ipynb").write_text("{}", encoding="utf-8")  # chapter 1 in English only
    done = _trainperf(
        "site", "--chapters", "1", "2", "--executed", str(executed), "--out", str(tmp_path / "s"), timeout=120
    )
    err = done.stderr.strip()
    assert done.returncode == 2 and "\n" not in err and "Traceback" not in err, err
    assert "lacks 3 notebooks (en: 02_mfu; zh: 01_roofline, 02_mfu)" in err, err
    assert f"run `trainperf run --lang en zh --chapters 01_roofline 02_mfu --out {executed}` first" in err, (
        err
    )

    done = _trainperf("site", "--lang", "zh", "--executed", str(executed), "--out", str(tmp_path / "s"))
    err = done.stderr.strip()
    assert done.returncode == 2 and "\n" not in err, err
    assert f"lacks {len(EVERY_CHAPTER)} notebooks (zh: {', '.join(EVERY_CHAPTER)})" in err, err
    assert f"run `trainperf run --lang zh --out {executed}` first" in err, err  # every chapter: no --chapters
    assert sorted(p.name for p in tmp_path.iterdir()) == ["executed"], "nothing is built before the check"


# ---------------------------------------------------------------------------- in a browser


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # one line per request would flood a failing test's report
        pass


class _QuietServer(socketserver.ThreadingTCPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):  # a page closed while a file was sent
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@pytest.fixture(scope="module")
def served(site):
    handler = functools.partial(_QuietHandler, directory=str(site["out"]))
    server = _QuietServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def chromium():
    from test_env_browser import CHROMIUM_FLAGS, find_chromium

    if find_chromium() is None:
        pytest.skip(
            "no Chromium here: install Debian's `chromium` package "
            "(apt-get install -y chromium; .ci/run does) or set TRAINPERF_CHROMIUM"
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=find_chromium(), headless=True, args=CHROMIUM_FLAGS)
        yield browser
        browser.close()


def _open(browser, url: str):
    page = browser.new_page(viewport={"width": 1300, "height": 1000})
    events = {"errors": [], "requests": []}
    page.on("console", lambda m: m.type == "error" and events["errors"].append(m.text))
    page.on("pageerror", lambda e: events["errors"].append(str(e)))
    page.on("request", lambda r: events["requests"].append(r.url))
    page.goto(url, wait_until="networkidle")
    return page, events


@pytest.mark.parametrize("lang", LANGS)
def test_every_page_loads_offline_with_no_error_and_its_links_resolve(site, served, chromium, lang):
    pages = sorted(p.relative_to(site["out"]).as_posix() for p in (site["out"] / lang).glob("*.html"))
    expected = {f"{lang}/{name}.html" for name in (*site["chapters"], "index", "search")}
    assert expected <= set(pages)
    links = set()
    for path in pages:
        page, events = _open(chromium, f"{served}/{path}")
        assert not events["errors"], f"{path}: console errors {events['errors']}"
        outside = [u for u in events["requests"] if not u.startswith(served)]
        assert not outside, f"{path} fetched from outside the site: {outside}"
        for href in page.eval_on_selector_all("a[href]", "els => els.map(e => e.href)"):
            if href.startswith(served):
                links.add(href.split("#")[0].split("?")[0])
        page.close()
    for link in sorted(links):
        with urllib.request.urlopen(link, timeout=10) as response:
            assert response.status == 200, link
    chapter_pages = {f"{served}/{lang}/{c}.html" for c in site["chapters"]}
    assert chapter_pages <= links, "the table of contents links every chapter"


@pytest.mark.parametrize(
    ("lang", "query", "expect"),
    [
        ("en", "roofline", "01_roofline.html"),
        ("en", "arithmetic intensity", "01_roofline.html"),
        ("zh", "算术强度", "01_roofline.html"),
        ("zh", "屋顶线", "01_roofline.html"),
        ("zh", "数据手册", "01_roofline.html"),  # a glossary term jieba alone splits (数据 + 手册)
    ],
)
def test_search_finds_a_term_on_its_chapter_page(served, chromium, lang, query, expect):
    """The term's chapter is found; each result's snippet is the chapter's text (not the theme's
    buttons or the "on this page" list), and a glossary term is highlighted whole (jieba alone
    splits 数据手册 in two: the index takes the glossary as jieba's user dictionary)."""
    from trainperf.i18n import load_glossary
    from trainperf.site import TEXT

    page, _ = _open(chromium, f"{served}/{lang}/search.html?q={urllib.parse.quote(query)}")
    page.wait_for_selector("#search-results li a", timeout=30_000)
    page.wait_for_function(
        "() => [...document.querySelectorAll('#search-results li')].every((li) => li.querySelector('p'))",
        timeout=30_000,
    )
    found = page.eval_on_selector_all("#search-results li a", "els => els.map(e => e.getAttribute('href'))")
    snippets = page.eval_on_selector_all("#search-results li p", "els => els.map(e => e.textContent)")
    marked = page.eval_on_selector_all(
        "#search-results li p .highlighted", "els => els.map(e => e.textContent)"
    )
    page.close()
    assert expect in found, f"searching {query!r} found {found}"
    menu = [*TEXT[lang]["theme"].values(), "System Settings", "Light", "Dark", "亮色", "暗色"]
    for snippet in snippets:
        assert not any(word in snippet for word in menu), (
            f"a snippet holds the theme's menu: {snippet[:200]!r}"
        )
    if lang == "zh" and query in {t["zh"] for t in load_glossary(ROOT, "zh")}:
        words = set(marked)
        assert words and words <= {query.lower()}, f"searching {query!r} highlighted {sorted(words)}"


def test_the_chinese_index_keeps_each_glossary_term_whole(tmp_path):
    """The tokenisation the Chinese search index uses (Sphinx's jieba splitter with the user
    dictionary `trainperf site` writes): every glossary term made of hanzi is one word."""
    pytest.importorskip("jieba")
    pytest.importorskip("sphinx")
    from sphinx.search.zh import SearchChinese

    from trainperf.i18n import load_glossary
    from trainperf.site import jieba_dictionary

    terms = [t["zh"] for t in load_glossary(ROOT, "zh")]
    hanzi = [t for t in terms if all("\u4e00" <= ch <= "\u9fff" for ch in t) and len(t) > 1]
    assert "主权重" in hanzi and "roofline（Roofline 模型）" in terms
    text = jieba_dictionary(ROOT)
    assert sorted(text.splitlines()) == sorted(hanzi)
    (tmp_path / "glossary.dict").write_text(text, encoding="utf-8")
    splitter = SearchChinese({"dict": str(tmp_path / "glossary.dict")})
    for term in hanzi:
        assert term in splitter.split(f"fp32 {term}的字节"), (term, splitter.split(f"fp32 {term}的字节"))


# Every word of English the theme shows outside the chapter's own text (the article, the
# chapters' titles in the navigation, the "on this page" list, the print-only title): text,
# tooltips, labels.
JS_CHROME_ENGLISH = r"""() => {
  const words = new Set();
  const content = ['.bd-article', '.bd-docs-nav', '.section-nav', '.prev-next-area', '.onlyprint',
                   'template', 'noscript', 'script', 'style', 'kbd'].join(', ');
  for (const el of document.querySelectorAll('body *')) {
    if (el.closest(content)) continue;
    const own = [...el.childNodes].filter((n) => n.nodeType === 3).map((n) => n.data).join(' ');
    const said = [own, ...['title', 'aria-label', 'placeholder', 'data-bs-original-title']
      .map((a) => el.getAttribute(a) || '')];
    for (const text of said) for (const w of text.match(/[A-Za-z]{3,}/g) || []) words.add(w);
  }
  return [...words].sort();
}"""


def test_the_chinese_pages_chrome_is_in_chinese(site, served, chromium):
    """The theme switcher, the sidebar buttons, the search field and the footer of a Chinese
    page say nothing in English; the footer names the authors in Chinese."""
    from trainperf.site import TEXT

    for name in ("index", site["chapters"][0], "search"):
        page, events = _open(chromium, f"{served}/zh/{name}.html")
        english = page.evaluate(JS_CHROME_ENGLISH)
        menu = page.eval_on_selector_all(
            ".theme-switch-container .dropdown-item", "els => els.map(e => e.innerText)"
        )
        footer = page.eval_on_selector(".bd-footer-content", "e => e.innerText") if name == "index" else ""
        page.close()
        assert not english, f"zh/{name}.html: English in the site's chrome: {english}"
        assert [m.strip() for m in menu] == [TEXT["zh"]["theme"]["System Settings"], "亮色", "暗色"], menu
        assert name != "index" or TEXT["zh"]["author"] in footer, footer
        assert not events["errors"], events["errors"]


@pytest.fixture(scope="module")
def site_shots() -> Path:
    """Screenshots go to $TRAINPERF_SCREENSHOTS/site or /tmp/trainperf-screenshots/site."""
    folder = (
        Path(os.environ.get("TRAINPERF_SCREENSHOTS") or Path(tempfile.gettempdir()) / "trainperf-screenshots")
        / "site"
    )
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.mark.parametrize("lang", LANGS)
def test_maths_code_and_chinese_glyphs_render(site, served, chromium, site_shots, lang):
    page, events = _open(chromium, f"{served}/{lang}/01_roofline.html")
    page.wait_for_function("() => document.querySelectorAll('mjx-container').length > 0", timeout=30_000)
    highlighted = "() => document.querySelectorAll('div.highlight span.k, div.highlight span.n').length"
    assert page.evaluate(highlighted) > 50
    if lang == "zh":
        from fontTools.ttLib import TTFont

        from helpers.i18n import CJK_FONT_FAMILY, CJK_FONT_FILE

        page.evaluate("() => document.fonts.ready")
        sample = "".join(
            sorted(
                {
                    ch
                    for ch in _page_text(site["out"] / "zh" / "01_roofline.html")
                    if "\u4e00" <= ch <= "\u9fff"
                }
            )
        )
        assert len(sample) > 100
        assert page.evaluate(f"(s) => document.fonts.check('16px \"{CJK_FONT_FAMILY}\"', s)", sample)
        loaded = page.evaluate(
            "() => [...document.fonts].filter(f => f.status === 'loaded').map(f => f.family)"
        )
        assert any(CJK_FONT_FAMILY in family for family in loaded), loaded
        cmap = TTFont(site["out"] / "zh" / "_static" / CJK_FONT_FILE).getBestCmap()
        for path in (site["out"] / "zh").glob("*.html"):
            missing = sorted({ch for ch in _page_text(path) if ord(ch) > 0x2E80 and ord(ch) not in cmap})
            assert not missing, f"{path.name}: characters the served font lacks: {''.join(missing)}"
    page.screenshot(path=str(site_shots / f"{lang}_01_roofline.png"))
    assert not events["errors"], events["errors"]
    page.close()


# Every element of a code or output block (code cells, their highlighting spans, printed
# output, inline code, output tables) whose own text holds a CJK character, tagged for the
# DevTools protocol, with how many CJK characters that text holds. Folded cells are opened
# first: a closed <details> draws nothing, so no font is used for it.
JS_TAG_CJK_CODE = r"""(ranges) => {
  document.querySelectorAll('.bd-article details').forEach((d) => { d.open = true; });
  const cjk = (ch) => ranges.some(([lo, hi]) => ch.codePointAt(0) >= lo && ch.codePointAt(0) <= hi);
  const found = [];
  const blocks = '.bd-article :is(pre, code, div.cell_output table)';
  for (const el of document.querySelectorAll(`${blocks}, ${blocks} *`)) {
    const own = [...el.childNodes].filter((n) => n.nodeType === 3).map((n) => n.data).join('');
    const count = [...own].filter(cjk).length;
    if (count) {
      el.setAttribute('data-cjk-check', String(found.length));
      found.push({count, tag: el.tagName.toLowerCase(), text: own.trim().slice(0, 60),
                  family: getComputedStyle(el).fontFamily});
    }
  }
  return found;
}"""

# The characters the Chinese pages' code font covers (src/trainperf/site.py CJK_RANGES), as
# code point pairs: CJK radicals to unified ideographs, compatibility ideographs, vertical and
# compatibility forms, full-width forms.
CJK_CODE_POINTS = [(0x2E80, 0x9FFF), (0xF900, 0xFAFF), (0xFE10, 0xFE1F), (0xFE30, 0xFE4F), (0xFF00, 0xFFEF)]


def test_chinese_in_code_and_output_blocks_is_drawn_with_the_shipped_font(site, served, chromium):
    """What Chromium draws each CJK character of a code or output block with: the DevTools
    protocol's CSS.getPlatformFontsForNode names the font each glyph of a node's text was
    drawn with. On a machine without a CJK system font (CI's), a character the page's fonts
    lack is drawn by the first font as an empty box, and is reported under that font."""
    from helpers.i18n import CJK_FONT_FAMILY
    from trainperf.site import CJK_RANGES

    ranges = [tuple(int(x, 16) for x in r.removeprefix("U+").split("-")) for r in CJK_RANGES]
    assert ranges == CJK_CODE_POINTS, "the test's ranges and the site's are the same list"
    checked = 0
    for chapter in site["chapters"]:
        page = chromium.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{served}/zh/{chapter}.html", wait_until="networkidle")
        tagged = page.evaluate(JS_TAG_CJK_CODE, [list(r) for r in CJK_CODE_POINTS])
        page.evaluate("() => document.fonts.ready")
        cdp = page.context.new_cdp_session(page)
        cdp.send("DOM.enable")
        cdp.send("CSS.enable")
        root = cdp.send("DOM.getDocument", {"depth": -1})["root"]["nodeId"]
        for index, element in enumerate(tagged):
            node = cdp.send("DOM.querySelector", {"nodeId": root, "selector": f'[data-cjk-check="{index}"]'})
            fonts = cdp.send("CSS.getPlatformFontsForNode", {"nodeId": node["nodeId"]})["fonts"]
            ours = sum(
                f["glyphCount"] for f in fonts if f["familyName"] == CJK_FONT_FAMILY and f["isCustomFont"]
            )
            assert ours >= element["count"], (
                f"zh/{chapter}: <{element['tag']}> {element['text']!r} has {element['count']} CJK "
                f"characters, {ours} drawn with {CJK_FONT_FAMILY}; fonts used: {fonts}; "
                f"font-family: {element['family']}"
            )
            checked += element["tag"] in ("pre", "span")
        page.close()
    assert checked >= 5, f"only {checked} code or output elements with Chinese text were found"


# Every code or output block of the page that is wider than its box (it would scroll sideways),
# and how many blocks were measured; the page itself must not scroll sideways either.
JS_WIDE_BLOCKS = """() => {
  const blocks = [...document.querySelectorAll(
    '.bd-article pre, .bd-article div.highlight, .bd-article div.cell_input, '
    + '.bd-article div.cell_output, .bd-article div.output')];
  const wide = blocks.filter((el) => el.scrollWidth > el.clientWidth).map((el) => ({
    block: el.tagName.toLowerCase() + '.' + [...el.classList].join('.'),
    scrollWidth: el.scrollWidth, clientWidth: el.clientWidth,
    text: el.textContent.trim().slice(0, 80)}));
  return {measured: blocks.length, wide, page: [document.documentElement.scrollWidth, window.innerWidth]};
}"""

# The set-up cell (the code cell that imports the helpers) as the page shows it.
JS_SETUP_CELL = """() => {
  const cell = [...document.querySelectorAll('.bd-article div.cell')].find((c) =>
    /^import helpers$/m.test(c.querySelector('.cell_input')?.textContent || ''));
  if (!cell) return null;
  const details = cell.querySelector('details');
  const code = cell.querySelector('.cell_input pre');
  const output = cell.querySelector('.cell_output');
  const summary = details?.querySelector('summary');
  // a closed <details> keeps its content's layout but does not draw it: checkVisibility() knows
  const shown = (el) => !!el && el.checkVisibility() && el.getBoundingClientRect().height > 0;
  return {folded: !!details && !details.open && !!details.querySelector('.cell_input'),
          summary: shown(summary) ? summary.innerText.trim() : '',
          codeShown: shown(code), outputShown: shown(output), output: output ? output.innerText : ''};
}"""

# Each picture drawn by a cell that calls plot_timeline or plot_pipeline: its width in the PNG and
# on the page.
JS_TIMELINE_IMAGES = r"""() => [...document.querySelectorAll('.bd-article div.cell')]
  .filter((c) => /plot_(timeline|pipeline)\(/.test(c.querySelector('.cell_input')?.textContent || ''))
  .flatMap((c) => [...c.querySelectorAll('.cell_output img')])
  .map((img) => [img.naturalWidth, img.getBoundingClientRect().width])"""


def _timeline_label_points() -> tuple[float, float]:
    """(smallest font size in points of plot_timeline's tick labels, axis label and legend,
    the figure's dpi), from the helper itself drawing a shipped trace."""
    import matplotlib.pyplot as plt

    from helpers import timeline

    ax = timeline.plot_timeline(timeline.load_trace(timeline.example_traces("ddp_one_slow")))
    texts = [*ax.get_xticklabels(), *ax.get_yticklabels(), ax.xaxis.label, *ax.get_legend().get_texts()]
    pipe = timeline.plot_pipeline(timeline.simulate_pipeline(4, 8))
    texts += [*pipe.get_xticklabels(), *pipe.get_yticklabels(), pipe.xaxis.label, *pipe.texts]
    assert pipe.texts, "plot_pipeline wrote no bar's name"
    smallest, dpi = min(t.get_fontsize() for t in texts), ax.figure.dpi
    assert pipe.figure.dpi == dpi and pipe.figure.get_figwidth() == ax.figure.get_figwidth()
    plt.close(ax.figure)
    plt.close(pipe.figure)
    return smallest, dpi


@pytest.mark.parametrize("lang", LANGS)
def test_chapter_pages_fit_a_1280_px_window_with_the_set_up_cell_folded(
    site, served, chromium, site_shots, lang
):
    """What a reader of a chapter page meets in a 1280 x 900 window: no code or output block
    scrolls sideways (long lines wrap), the set-up cell's code is folded under a summary line
    while its output (the device report) shows, and the timeline plot's labels are at least
    matplotlib's default 10 pt at the size the page shows the picture."""
    from trainperf.site import TEXT

    smallest_pt, dpi = _timeline_label_points()
    timeline_pages = 0
    for chapter in site["chapters"]:
        page = chromium.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{served}/{lang}/{chapter}.html", wait_until="networkidle")
        page.evaluate("() => document.fonts.ready")

        setup = page.evaluate(JS_SETUP_CELL)
        assert setup, f"{lang}/{chapter}: no set-up cell (a code cell with `import helpers`)"
        assert setup["folded"] and not setup["codeShown"], f"{lang}/{chapter}: the set-up code is not folded"
        assert setup["summary"] == TEXT[lang]["setup_show"], setup["summary"]
        assert setup["outputShown"] and "torch" in setup["output"], f"{lang}/{chapter}: {setup}"
        page.locator(".bd-article details.hide summary").first.click()  # a reader opens it
        assert page.evaluate(JS_SETUP_CELL)["codeShown"], "the summary line does not unfold the code"

        blocks = page.evaluate(JS_WIDE_BLOCKS)  # the set-up code, now open, is measured too
        assert blocks["measured"] > 40, f"{lang}/{chapter}: found only {blocks['measured']} blocks"
        assert not blocks["wide"], f"{lang}/{chapter}: blocks that scroll sideways: {blocks['wide'][:5]}"
        assert blocks["page"][0] <= blocks["page"][1], f"{lang}/{chapter}: the page scrolls sideways"

        for natural, shown in page.evaluate(JS_TIMELINE_IMAGES):
            timeline_pages += 1
            seen_pt = smallest_pt * (dpi / 100) * (shown / natural)  # as large as at 100 dpi, 1:1
            assert seen_pt >= 10, (
                f"{lang}/{chapter}: the timeline plot ({natural} px wide) is shown {shown:.0f} px wide: "
                f"its {smallest_pt:g} pt labels read as {seen_pt:.1f} pt"
            )
        page.screenshot(path=str(site_shots / f"{lang}_{chapter}_1280.png"))
        page.close()
    if "04_timeline" in site["chapters"]:
        assert timeline_pages, f"{lang}/04_timeline: no picture from a plot_timeline cell"


def test_the_pages_recipe_builds_the_site_the_readme_describes():
    recipe = (ROOT / "grader" / "recipes" / "github-pages.yml").read_text(encoding="utf-8")
    assert "trainperf run --device cpu --lang en zh" in recipe
    assert 'trainperf site --repo-url "${{ github.server_url }}/${{ github.repository }}"' in recipe
    assert "path: build/site" in recipe and "actions/deploy-pages@" in recipe
    for readme in ("README.md", "README.zh.md"):
        text = (ROOT / readme).read_text(encoding="utf-8")
        assert "trainperf site" in text and "github-pages.yml" in text, readme

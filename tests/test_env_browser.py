"""Learner path 1: a real browser on real JupyterLab.

JupyterLab (this environment, with the project installed) serves a scratch copy of
``notebooks/`` on loopback; Playwright drives Debian's Chromium headless. For every chapter
whose notebook shows a course widget (a class or function in ``src/helpers`` that builds
ipywidgets), the test runs the STUDENT notebook the way a learner who skips the exercises
would (Run All; at each exercise stop, check it is the stub's NotImplementedError, then run
the cells below), checks that each widget rendered live (not the static fallback picture),
moves every slider and changes every dropdown, and checks that the view redraws. For the
roofline explorer it checks specifically that the plot and the cost-model row change with M
and with the device preset, and that after a preset change the title names the preset and the
row holds the preset's exact datasheet figures. One Chinese notebook (``notebooks/zh/``) runs the
same way, and its widget must speak Chinese. Screenshots are saved (the path is printed); a
JavaScript error in the console, or a plot warning of a missing glyph, fails the test.

Skips, with the reason, only where no Chromium or no Playwright can be had: ``.ci/run`` installs
Debian's ``chromium``; ``playwright`` is in the ``course`` extra (its bundled browsers are never
downloaded: the test uses the system browser).
"""

from __future__ import annotations

import ast
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import ROOT

pytestmark = pytest.mark.env

CHROMIUM_FLAGS = [  # headless, and no calls home: this machine's network is closed
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Console errors that are not the course's fault and are allowed, each with why. Keep short.
KNOWN_CONSOLE_NOISE: tuple[str, ...] = ()
NOTEBOOK_TIMEOUT_S = 240


# ---------------------------------------------------------------------------- what to cover


def widget_builders(src: Path = ROOT / "src" / "helpers") -> set[str]:
    """Names of the classes/functions in ``helpers`` (chapter subpackages included) whose body
    imports ipywidgets."""
    names: set[str] = set()
    for path in sorted(src.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and not node.name.startswith("_"):
                for sub in ast.walk(node):
                    if isinstance(sub, (ast.Import, ast.ImportFrom)) and any(
                        (getattr(sub, "module", None) or a.name).startswith("ipywidgets") for a in sub.names
                    ):
                        names.add(node.name)
        if any(
            isinstance(n, (ast.Import, ast.ImportFrom)) and "ipywidgets" in ast.dump(n) for n in tree.body
        ):  # a module-level import: every public class may build widgets
            names.update(
                n.name for n in tree.body if isinstance(n, ast.ClassDef) and not n.name.startswith("_")
            )
    return names


def student_notebooks() -> list[Path]:
    return sorted(p for d in sorted((ROOT / "notebooks").iterdir()) if d.is_dir() for p in d.glob("*.ipynb"))


def widget_chapters() -> list[tuple[str, list[str]]]:
    """(notebook path relative to notebooks/, widget names it calls) for each chapter with
    widgets, and the Chinese edition of the first of them."""
    builders = widget_builders()
    found = []
    chinese = sorted((ROOT / "notebooks" / "zh").glob("*/*.ipynb"))
    for nb in student_notebooks() + chinese[:1]:
        cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
        code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        used = sorted(name for name in builders if f"{name}(" in code)
        if used:
            found.append((nb.relative_to(ROOT / "notebooks").as_posix(), used))
    return found


def test_every_widget_builder_is_shown_in_a_notebook():
    """A widget no notebook shows is never exercised in the browser: say so loudly."""
    builders = widget_builders()
    assert "RooflineExplorer" in builders  # the discovery itself works
    shown = {name for _, names in widget_chapters() for name in names}
    assert builders <= shown, f"widgets no student notebook displays: {sorted(builders - shown)}"


# ---------------------------------------------------------------------------- the browser


def find_chromium() -> str | None:
    for candidate in (
        os.environ.get("TRAINPERF_CHROMIUM"),
        "/usr/bin/chromium",
        "/usr/bin/chromium-browser",
        shutil.which("chromium"),
        shutil.which("chromium-browser"),
        shutil.which("google-chrome"),
    ):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """JupyterLab on 127.0.0.1 with a token, serving a scratch copy of notebooks/."""
    if find_chromium() is None:
        pytest.skip(
            "no Chromium here: install Debian's `chromium` package "
            "(apt-get install -y chromium; .ci/run does) or set TRAINPERF_CHROMIUM"
        )
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.skip("the `playwright` package is missing: pip install -e '.[dev]'")
    base = tmp_path_factory.mktemp("lab")
    shutil.copytree(ROOT / "notebooks", base / "notebooks")
    settings = base / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)  # no news or update checks: the network is closed
    (settings / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}  # the kernel's own inline backend
    env.update(
        JUPYTER_CONFIG_DIR=str(base / "config"),
        JUPYTER_RUNTIME_DIR=str(base / "runtime"),
        JUPYTERLAB_SETTINGS_DIR=str(base / "settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(base / "workspaces"),
        IPYTHONDIR=str(base / "ipython"),
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    port, token = _free_port(), secrets.token_hex(16)
    log = open(base / "jupyterlab.log", "w")  # noqa: SIM115 - closed at teardown
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--allow-root",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={base / 'notebooks'}",
            "--LabApp.expose_app_in_browser=True",
        ],  # lets the test read cell models; clicks stay real
        cwd=base,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        try:
            with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            log.close()
            pytest.fail("JupyterLab did not start:\n" + (base / "jupyterlab.log").read_text()[-3000:])
        time.sleep(0.5)
    yield {"url": url, "token": token, "base": base}
    server.terminate()
    try:
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.kill()
    log.close()


@pytest.fixture(scope="module")
def browser(lab):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(lab["base"] / "chromium-profile"),
            executable_path=find_chromium(),
            headless=True,
            args=CHROMIUM_FLAGS,
            viewport={"width": 1500, "height": 1100},
        )
        yield context
        context.close()


@pytest.fixture(scope="module")
def shots():
    """Screenshots go to $TRAINPERF_SCREENSHOTS or /tmp/trainperf-screenshots (emptied first):
    outside pytest's own temp folders, which it deletes after a few runs."""
    folder = Path(
        os.environ.get("TRAINPERF_SCREENSHOTS") or Path(tempfile.gettempdir()) / "trainperf-screenshots"
    )
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


# ---------------------------------------------------------------------------- driving JupyterLab

JS_CELLS = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  if (!panel || !panel.content || !panel.content.model) return null;
  const out = [];
  for (const cell of panel.content.model.cells) {
    const outputs = cell.type === 'code' ? cell.outputs.toJSON() : [];
    out.push({type: cell.type, count: cell.type === 'code' ? cell.executionCount : null,
              source: cell.sharedModel.getSource(),
              nbgrader: (cell.getMetadata && cell.getMetadata('nbgrader')) || null,
              errors: outputs.filter(o => o.output_type === 'error').map(o => o.ename + ': ' + o.evalue),
              stderr: outputs.filter(o => o.output_type === 'stream' && o.name === 'stderr')
                             .map(o => o.text).join(''),
              widget: outputs.some(o => o.data && o.data['application/vnd.jupyter.widget-view+json'])});
  }
  return {cells: out, busy: panel.sessionContext.session?.kernel?.status !== 'idle',
          queued: [...document.querySelectorAll('.jp-Notebook .jp-InputPrompt')]
                    .some(p => p.textContent.includes('*'))};
}"""


def _cell(page, index: int):
    """The DOM node of cell ``index`` (JupyterLab numbers them; DOM order may lag)."""
    return page.locator(f'.jp-Notebook .jp-Cell[data-windowed-list-index="{index}"]')


def _state(page) -> dict:
    return page.evaluate(JS_CELLS)


def _wait_idle(page, timeout_s: float) -> dict:
    """Wait until no cell is queued or running and the kernel is idle (stable for 1 s)."""
    deadline, calm_since = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        state = _state(page)
        if state and not state["busy"] and not state["queued"]:
            calm_since = calm_since or time.monotonic()
            if time.monotonic() - calm_since > 1.0:
                return state
        else:
            calm_since = None
        page.wait_for_timeout(250)
    raise AssertionError(f"the notebook was still running after {timeout_s:.0f} s")


def _menu(page, menu: str, item: str) -> None:
    """Click a menu-bar entry, then one of its items, by their labels (as a learner does)."""
    page.locator(f'.lm-MenuBar-itemLabel:text-is("{menu}")').first.click()
    page.locator(f'.lm-Menu-item:has(.lm-Menu-itemLabel:text-is("{item}"))').first.click()


def _is_exercise(cell: dict) -> bool:
    meta = cell.get("nbgrader") or {}
    return bool(meta.get("solution") or meta.get("grade"))


def _trail(cells: list[dict]) -> str:
    return "execution counts: " + ", ".join(
        f"{i}:{c['count']}{'!' if c['errors'] else ''}" for i, c in enumerate(cells) if c["type"] == "code"
    )


def run_all_like_a_learner(page, timeout_s: float) -> dict:
    """Run All; at each stop check it is an exercise stub, then run the cells below it.

    Only the final state is judged for cells after a stop: JupyterLab queues every cell at
    once and ipykernel cancels the queue only for a moment after an error, so on a loaded
    machine a later cell can run early (out of order) and fail; it is run again, in order.
    """
    _menu(page, "Run", "Run All Cells")
    deadline = time.monotonic() + timeout_s
    page.wait_for_function(
        "() => window.jupyterapp.shell.currentWidget.content.model.cells.get(1).executionCount !== null",
        timeout=timeout_s * 1000,
    )
    while True:
        cells = _wait_idle(page, deadline - time.monotonic())["cells"]
        pending = [i for i, c in enumerate(cells) if c["type"] == "code" and c["count"] is None]
        first_pending = pending[0] if pending else len(cells)
        bad = [
            (i, c["errors"])
            for i, c in enumerate(cells[:first_pending])
            if c["errors"]
            and not (_is_exercise(c) and all(e.startswith("NotImplementedError") for e in c["errors"]))
        ]
        assert not bad, f"cells that are not exercise stubs failed: {bad}; " + _trail(cells)
        if not pending:
            return {"cells": cells}
        stopped = max((i for i, c in enumerate(cells[:first_pending]) if c["errors"]), default=None)
        assert stopped is not None, f"execution stopped before cell {first_pending} without an error"
        # Select the cell after the exercise that stopped the run, then Run > Selected and All Below.
        _cell(page, stopped + 1).locator(".jp-InputPrompt").first.click()
        active = page.evaluate("() => window.jupyterapp.shell.currentWidget.content.activeCellIndex")
        assert active == stopped + 1, f"clicked cell {stopped + 1}, but cell {active} is selected"
        _menu(page, "Run", "Run Selected Cell and All Below")
        page.wait_for_function(
            f"() => window.jupyterapp.shell.currentWidget.content.model.cells.get({first_pending})"
            ".executionCount !== null",
            timeout=int(max(1, deadline - time.monotonic()) * 1000),
        )


def _snapshot(view) -> tuple[list[str], list[str]]:
    """What a widget shows: its HTML texts and its images (src), in order."""
    texts = view.locator(".widget-html-content").all_inner_texts()
    images = [img.get_attribute("src") or "" for img in view.locator("img").all()]
    return texts, images


def _wait_change(view, before, what: str, expect: str = "", timeout_s: float = 30):
    """Wait until the view's text and image differ from ``before`` (and the text contains
    ``expect``), and then stay unchanged for 0.75 s: a drag fires several redraws."""
    deadline, last, calm_since = time.monotonic() + timeout_s, None, None
    while time.monotonic() < deadline:
        now = _snapshot(view)
        if now[0] != before[0] and now[1] != before[1] and expect in " ".join(now[0]):
            if now == last:
                if time.monotonic() - calm_since > 0.75:
                    return now
            else:
                last, calm_since = now, time.monotonic()
        view.page.wait_for_timeout(150)
    now = _snapshot(view)
    raise AssertionError(
        f"{what}: the view did not redraw (text changed: {now[0] != before[0]}, "
        f"image changed: {now[1] != before[1]}, text now: {now[0]}, wanted {expect!r})"
    )


def _drag_slider(view, slider, fraction: float) -> None:
    """Drag a slider's handle to ``fraction`` of its track, with the mouse."""
    track = slider.locator(".noUi-target, .slider").first
    handle = slider.locator(".noUi-handle").first
    handle.scroll_into_view_if_needed()
    box, hbox = track.bounding_box(), handle.bounding_box()
    page = view.page
    page.mouse.move(hbox["x"] + hbox["width"] / 2, hbox["y"] + hbox["height"] / 2)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * fraction, hbox["y"] + hbox["height"] / 2, steps=8)
    page.mouse.up()


def _readout(slider) -> str:
    return slider.locator(".widget-readout").first.inner_text().strip()


def poke_every_control(view, label: str) -> list[str]:
    """Move every slider and change every dropdown of one widget; each change must redraw."""
    done = []
    for i in range(view.locator(".widget-dropdown select").count()):
        select = view.locator(".widget-dropdown select").nth(i)
        # a change to an earlier control can make the kernel send this dropdown new options
        # (seen in CI: "did not find some options"); choose from a list that has settled
        options, settled = None, select.locator("option").all_inner_texts()
        while options != settled:
            options = settled
            view.page.wait_for_timeout(300)
            settled = select.locator("option").all_inner_texts()
        current = select.input_value()
        target = next(o for o in reversed(options) if o != current)
        before = _snapshot(view)
        select.select_option(index=options.index(target))
        _wait_change(view, before, f"{label}: dropdown -> {target!r}")
        done.append(f"dropdown {current!r} -> {target!r}")
    sliders = view.locator(".widget-slider")
    for i in range(sliders.count()):
        slider = sliders.nth(i)
        name = slider.locator(".widget-label").first.inner_text().strip()
        old = _readout(slider)
        before = _snapshot(view)
        _drag_slider(view, slider, 0.85 if i % 2 == 0 else 0.15)
        if _readout(slider) == old:  # already there: go the other way
            _drag_slider(view, slider, 0.15 if i % 2 == 0 else 0.85)
        assert _readout(slider) != old, f"{label}: slider {name!r} did not move"
        _wait_change(view, before, f"{label}: slider {name!r} {old} -> {_readout(slider)}")
        assert _readout(slider) != old
        done.append(f"slider {name} {old} -> {_readout(slider)}")
    return done


# What the roofline explorer shows, per language (written out here, not taken from the
# helpers' catalogue, so the test checks the catalogue).
ROOFLINE_WORDS = {
    "en": {
        "colon": ":",
        "peak": "peak",
        "custom": "custom roofs",
        "device": "device",
        "start": "H100 SXM · bf16: peak 989.5 TFLOP/s",
        "title": "{name}: peak {peak:g} TFLOP/s, bandwidth {bw:g} GB/s, {b:g} bytes per element",
        "ideal": "ideal ≥ {ms:.4f} ms",
        "compute": "compute-bound",
        "memory": "memory-bound",
    },
    "zh": {
        "colon": "：",
        "peak": "峰值",
        "custom": "自定义屋顶",
        "device": "设备",
        "start": "H100 SXM · bf16：峰值 989.5 TFLOP/s",
        "title": "{name}：峰值 {peak:g} TFLOP/s，带宽 {bw:g} GB/s，每个元素 {b:g} 字节",
        "ideal": "理想时间 ≥ {ms:.4f} ms",
        "compute": "计算受限",
        "memory": "访存受限",
    },
}


def check_roofline_explorer(view, page, shots: Path, lang: str = "en") -> None:
    """The M slider and the device preset change the operating point and the cost-model row;
    after a preset change the title names the preset and the row holds its EXACT figures
    (the log sliders can only show them rounded to their step) — in the notebook's language."""
    from helpers import roofline

    words = ROOFLINE_WORDS[lang]
    title = view.locator(".widget-html-content").nth(0)
    row = view.locator(".widget-html-content").nth(1)
    m_slider = view.locator(".widget-slider", has=page.locator(".widget-label", has_text="M")).first
    first_row, first_plot = _snapshot(view)
    assert f"M=64{words['colon']}" in row.inner_text(), row.inner_text()
    assert words["compute"] in row.inner_text() or words["memory"] in row.inner_text(), row.inner_text()
    assert title.inner_text().replace("\xa0", " ").startswith(words["start"]), title.inner_text()
    assert view.locator(".widget-dropdown .widget-label").first.inner_text().strip() == words["device"]
    assert first_plot and first_plot[0].startswith("data:image/png"), "no plot image in the widget"

    _drag_slider(view, m_slider, 0.9)
    new_m = _readout(m_slider)
    assert new_m != "64", "the M slider did not move"
    after_m = _wait_change(
        view, (first_row, first_plot), "roofline M slider", expect=f"M={new_m}{words['colon']}"
    )
    page.screenshot(path=str(shots / f"roofline_{lang}_after_M.png"), full_page=False)

    select = view.locator(".widget-dropdown select").first
    peak = view.locator(".widget-slider", has=page.locator(".widget-label", has_text=words["peak"])).first
    old_preset, old_peak = select.input_value(), _readout(peak)
    target = next(
        o
        for o in select.locator("option").all_inner_texts()
        if o != old_preset and not o.startswith(old_preset.split(" · ")[0])
    )
    select.select_option(label=target)
    # the operating point keeps M and moves onto the new roofs
    _wait_change(view, after_m, f"roofline preset -> {target}", expect=f"M={new_m}{words['colon']}")
    assert _readout(peak) != old_peak, "changing the preset did not move the peak slider"
    target = target.replace("\xa0", " ")  # the browser shows " · " with no-break spaces
    want_peak, want_bw, want_b = roofline.presets()[target]
    want = roofline.cost_row(int(new_m), 4096, 4096, want_b, want_peak, want_bw)
    shown_title, shown_row = (x.inner_text().replace("\xa0", " ") for x in (title, row))
    assert shown_title == words["title"].format(
        name=target, peak=want_peak / 1e12, bw=want_bw / 1e9, b=want_b
    ), shown_title
    assert words["custom"] not in shown_title
    for figure in (
        f"I = {want.intensity:.1f} FLOP/B",
        words["ideal"].format(ms=want.ideal_time * 1e3),
        words[want.limiter],
        f"≤ {want.attainable / 1e12:.1f} TFLOP/s",
    ):
        assert figure in shown_row, f"{figure!r} not in the row after choosing {target}: {shown_row}"
    page.screenshot(path=str(shots / f"roofline_{lang}_after_preset.png"), full_page=False)
    drag_right_after_preset(view, page, words)


# The explorer's own state, read from the kernel (not from the page): every live explorer's
# slider values and title. store_history=False keeps the notebook's Out and counts as they are.
KERNEL_EXPLORERS = """import gc as _gc, json as _json
from helpers.roofline import RooflineExplorer as _RE
print("EXPLORERS", _json.dumps([[e.peak.value, e.bw.value, e.title.value] for e in _gc.get_objects()
                   if isinstance(e, _RE)]))"""

JS_KERNEL_PRINT = """async (code) => {
  const kernel = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
  const future = kernel.requestExecute({code, store_history: false, silent: false});
  let text = '';
  future.onIOPub = (msg) => {
    if (msg.header.msg_type === 'stream' && msg.content.name === 'stdout') text += msg.content.text;
  };
  await future.done;
  return text;
}"""


def drag_right_after_preset(view, page, words: dict, rounds: int = 4) -> None:
    """The sequence that once left the explorer out of sync with its own slider: choose a
    preset, then drag the peak or bandwidth slider at once, before the kernel has answered.
    When things settle, the slider's readout, the kernel's slider value and the title agree."""
    select = view.locator(".widget-dropdown select").first
    options = select.locator("option").all_inner_texts()
    sliders = {
        name: view.locator(".widget-slider", has=page.locator(".widget-label", has_text=name)).first
        for name in (words["peak"], "TB/s")
    }
    for i in range(rounds):
        preset = options[(11 * i + 5) % len(options)]
        name = words["peak"] if i % 2 == 0 else "TB/s"
        select.select_option(label=preset)
        _drag_slider(view, sliders[name], 0.2 + 0.6 * (i % 3) / 2)  # no wait: the race is the test
        deadline, seen = time.monotonic() + 45, None
        while time.monotonic() < deadline:
            page.wait_for_timeout(500)
            peak, bw = _readout(sliders[words["peak"]]), _readout(sliders["TB/s"])
            printed = page.evaluate(JS_KERNEL_PRINT, KERNEL_EXPLORERS)
            line = next((x for x in printed.splitlines() if x.startswith("EXPLORERS ")), None)
            assert line, f"the kernel did not report its explorers: {printed[-500:]!r}"
            kernel = json.loads(line.removeprefix("EXPLORERS "))
            assert kernel, "the kernel holds no roofline explorer"
            title = view.locator(".widget-html-content").nth(0).inner_text().replace("\xa0", " ")
            # A re-run cell leaves an earlier explorer alive (ipywidgets keeps every widget), so
            # the page's explorer is one of these: one must hold the readouts and the title.
            states = [(f"{k_peak:g}", f"{k_bw:g}", _plain(k_title)) for k_peak, k_bw, k_title in kernel]
            seen = (peak, bw, title, states)
            if f"{words['peak']} {peak} TFLOP/s" in title and (peak, bw, title) in states:
                break
        else:
            raise AssertionError(
                f"round {i}: preset {preset!r}, then a drag of {name!r}: after 45 s the "
                f"readouts (peak, BW), the kernel's values and the title disagree: {seen}"
            )


def _plain(html: str) -> str:
    """An HTML title as the browser shows its text (the explorer's titles hold only <b>)."""
    return html.replace("<b>", "").replace("</b>", "")


SPECIFIC = {"RooflineExplorer": check_roofline_explorer}


@pytest.mark.parametrize(
    "notebook,widgets",
    widget_chapters()
    or [pytest.param(None, None, marks=(pytest.mark.skip(reason="no notebook shows a widget")))],
)
def test_widgets_respond_in_jupyterlab(notebook, widgets, lab, browser, shots, capsys):
    page = browser.new_page()
    problems: list[str] = []
    page.on(
        "console",
        lambda m: (
            problems.append(f"console.{m.type}: {m.text}")
            if m.type == "error" and not any(n in m.text for n in KNOWN_CONSOLE_NOISE)
            else None
        ),
    )
    page.on("pageerror", lambda e: problems.append(f"uncaught: {e}"))
    lang = "zh" if notebook.startswith("zh/") else "en"
    stem = Path(notebook).stem + ("_zh" if lang == "zh" else "")
    try:
        # A workspace of its own: JupyterLab would otherwise reopen the notebook of the test
        # before, and the menu commands could reach that one instead of this one.
        workspace = "w-" + "".join(ch if ch.isalnum() else "-" for ch in notebook)
        page.goto(f"{lab['url']}/lab/workspaces/{workspace}/tree/{notebook}?reset&token={lab['token']}")
        page.wait_for_function(
            f"() => window.jupyterapp && window.jupyterapp.shell.currentWidget"
            f" && window.jupyterapp.shell.currentWidget.context?.path === {notebook!r}"
            " && window.jupyterapp.shell.currentWidget.sessionContext?.session"
            "?.kernel?.status === 'idle'",
            timeout=90_000,
        )
        state = run_all_like_a_learner(page, NOTEBOOK_TIMEOUT_S)
        page.screenshot(path=str(shots / f"{stem}_after_run_all.png"), full_page=False)
        widget_cells = [i for i, c in enumerate(state["cells"]) if c["widget"]]
        assert widget_cells, f"{notebook}: no cell displayed a live widget ({widgets})"
        for name in widgets:
            index = next((i for i in widget_cells if f"{name}(" in state["cells"][i]["source"]), None)
            assert index is not None, f"{notebook}: the cell calling {name}(...) shows no widget"
            cell = _cell(page, index)
            cell.scroll_into_view_if_needed()
            view = cell.locator(".jp-OutputArea-output .jupyter-widgets.widget-container").first
            view.wait_for(state="visible", timeout=30_000)  # live view, not the static PNG fallback
            text = cell.locator(".jp-Cell-outputArea").first.inner_text()
            assert "Error displaying widget" not in text and "Loading widget" not in text, text
            if name in SPECIFIC:
                SPECIFIC[name](view, page, shots, lang)
            changed = poke_every_control(view, f"{stem}/{name}")
            assert changed, f"{name} has no slider or dropdown to move"
            view.screenshot(path=str(shots / f"{stem}_{name}.png"))
        glyphs = [
            i for i, c in enumerate(_state(page)["cells"]) if "missing from font" in c.get("stderr", "")
        ]
        assert not glyphs, f"{notebook}: cells whose plots miss a glyph: {glyphs}"
    finally:
        page.screenshot(path=str(shots / f"{stem}_final.png"), full_page=False)
        with capsys.disabled():
            print(f"\n[browser] screenshots of {notebook}: {shots}")
        page.close()
    assert not problems, "JavaScript errors in the console:\n" + "\n".join(problems)

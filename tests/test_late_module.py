"""A live figure whose widget module loads late still takes every update: in JupyterLab in headless Chromium, on a
machine loaded with two CPU hogs, plotly's widget module made to load DELAY_S after it was asked for (past anywidget
0.11's 2 s, after which anywidget drops every message sent to that figure), two panels each drive a figure from a
slider, and every move of each slider reaches the drawn plot. The first panel's figure is made before any PageHelper
is on the page (the messages it was sent before the helper's JS ran are lost); the second's after one.

The test proves its own condition: anywidget's own 2 s timer must have fired while each figure's module was still
loading, else it fails saying the delay did not take effect. It watches the timer rather than the console, because
anywidget's "[anywidget] Failed to initialize model." reaches the console only when no message was waiting on the
model (a waiting one takes the rejection, and JupyterLab's kernel connection drops it silently); the failure report
says how many times the console had it.
"""
from __future__ import annotations

import subprocess
import sys

import nbformat
import pytest

from browser_support import ANYWIDGET_TIMEOUT, EVERY_CELL, code_cells, jupyter_lab, launch_chromium, open_notebook, \
    run_all_and_wait, shut_down_kernels, until
from conftest import ROOT, browser_missing

if browser_missing():
    pytest.skip(f"The browser tests are skipped: {browser_missing()}.", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[test]' brings playwright")
pytestmark = pytest.mark.browser

ARTIFACTS = ROOT / "test-artifacts"
NOTEBOOK = "late_module.ipynb"
DELAY_S = 4  # well past anywidget's 2 s, on top of however long the module takes to parse on the loaded machine
MOVES = 5
# Each panel: a slider 'slope' and a figure of one line y = slope * x at x = 0..3.
CELLS = ["""\
import ipywidgets as widgets
from course_utils.figures import live_figure
from course_utils.panel import Panel


def slope_panel(title):
    fig = live_figure(title, "x", "y")
    fig.add_scatter(x=[0, 1, 2, 3], y=[0, 0, 0, 0], name="slope * x")
    def update(slope):
        fig.data[0].y = [slope * x for x in range(4)]
    return Panel({"slope": widgets.IntSlider(value=1, min=0, max=20, description="slope")}, [fig], update,
                 title=title)""",
         "slope_panel('Made before any helper')",
         "slope_panel('Made after a helper')"]
# Injected before the page's own scripts. anywidget loads a widget's module by importing a Blob of its source:
# plotly's (the only module of several MB that names plotlywidget-after-render) is wrapped in a module that imports it
# and then waits `delay` ms. anywidget's Runtime starts its 2 s timer (AbortSignal.timeout(2e3)) just before it asks
# for the module, so each load is recorded with that timer: when it was asked for, when anywidget's own abort
# listener ran (it rejects the model's `ready`), and when the module loaded. A Proxy, not a subclass, so every other
# `instanceof Blob` in the page still holds.
DELAY_PLOTLY_JS = """delay => {
  const NativeBlob = window.Blob, nativeTimeout = AbortSignal.timeout.bind(AbortSignal);
  const loads = window.__plotlyModuleLoads = [];
  let timer = null;  // the last 2 s timer anywidget started
  AbortSignal.timeout = (ms) => {
    const signal = nativeTimeout(ms);
    if (ms !== 2000 || !String(new Error().stack).includes('anywidget')) return signal;
    const mine = timer = {fired: null};
    const add = signal.addEventListener.bind(signal);
    signal.addEventListener = (type, listener, ...rest) => add(type, (...a) => {
      mine.fired = performance.now();
      return listener(...a);
    }, ...rest);
    return signal;
  };
  window.__plotlyModuleLoaded = (i) => { loads[i].loaded = performance.now(); };
  window.Blob = new Proxy(NativeBlob, {construct(target, args) {
    const [parts, options] = args;
    const text = parts && parts.length === 1 && typeof parts[0] === 'string' ? parts[0] : '';
    if (text.length > 1e6 && options && options.type === 'text/javascript'
        && text.includes('plotlywidget-after-render')) {
      const inner = URL.createObjectURL(new NativeBlob(parts, options));
      // the last timer anywidget started before it asked: this model's own, or one started after it
      const i = loads.push({asked: performance.now(), loaded: null, timer}) - 1;
      const wrapper = `export * from "${inner}"; export { default } from "${inner}";
        await new Promise((resolve) => setTimeout(resolve, ${delay}));
        window.__plotlyModuleLoaded(${i});`;
      return Reflect.construct(target, [[wrapper], options]);
    }
    return Reflect.construct(target, args);
  }});
}"""
# Each figure of the notebook, in page order: its title and the y values it draws (null before it draws).
PLOTS_JS = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(p => ({
  title: (p.querySelector('.gtitle') || {}).textContent || '',
  y: p.data && p.data.length ? Array.from(p.data[0].y || []) : null}))"""


def _write_notebook(folder) -> None:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in CELLS])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, folder / NOTEBOOK)


def _expected(slope: int) -> list[int]:
    return [slope * x for x in range(4)]


def _check_every_move_lands(page, index: int, problems: list[str]) -> None:
    """Move the index-th slider MOVES times, one step each; after each step the index-th plot draws that slope."""
    handle = page.locator(".widget-slider .noUi-handle").nth(index)
    readout = page.locator(".widget-slider .widget-readout").nth(index)
    handle.scroll_into_view_if_needed()
    for move in range(MOVES):
        handle.focus()
        page.keyboard.press("ArrowRight")
        slope = int(readout.inner_text().strip())
        if not until(lambda: page.evaluate(PLOTS_JS)[index]["y"] == _expected(slope), timeout_s=20):
            shown = page.evaluate(PLOTS_JS)[index]
            problems.append(f"figure {index} ({shown['title']!r}): after move {move + 1} the slider reads {slope} "
                            f"but the plot draws y = {shown['y']} (expected {_expected(slope)})")
            return


def _module_loads(page) -> list[dict]:
    """Each plotly module load so far: seconds from asked to loaded, and whether anywidget's 2 s timer rejected the
    model's `ready` while the module was still loading."""
    loads = page.evaluate("() => window.__plotlyModuleLoads")
    return [{"late_s": round((load["loaded"] - load["asked"]) / 1000, 1) if load["loaded"] else None,
             "timed_out": bool(load["timer"] and load["timer"]["fired"]
                               and (load["loaded"] is None or load["timer"]["fired"] < load["loaded"]))}
            for load in loads]


def _run_and_check(page, lab, console: list[str]) -> None:
    open_notebook(page, lab, NOTEBOOK)
    prompts, stopped = run_all_and_wait(page, NOTEBOOK, timeout_s=300, cell_timeout_s=120)
    assert not stopped, f"{stopped}; prompts: {prompts}"
    errors = [c["errors"] for c in code_cells(page, NOTEBOOK) if c["errors"]]
    assert not errors, f"a cell failed: {errors[0]}"
    figures = len(CELLS) - 1
    until(lambda: sum(load["late_s"] is not None for load in _module_loads(page)) >= figures, timeout_s=60)
    loads = _module_loads(page)
    # the condition this test is about, reproduced for every figure: else it proves nothing
    assert len(loads) == figures and all(load["timed_out"] for load in loads), \
        f"the delay did not take effect: anywidget did not time out on every figure's module: {loads}"
    problems: list[str] = []
    for index in range(figures):
        if not until(lambda: len(page.evaluate(PLOTS_JS)) > index
                     and page.evaluate(PLOTS_JS)[index]["y"] == _expected(1), timeout_s=30):
            problems.append(f"figure {index} never drew its data: {page.evaluate(PLOTS_JS)}")
            continue
        _check_every_move_lands(page, index, problems)
    if problems:
        page.screenshot(path=str(ARTIFACTS / "late-module-failure.png"), full_page=True)
    logged = sum(ANYWIDGET_TIMEOUT in m for m in console)
    assert not problems, f"plotly's module loaded late ({loads}); the page logged {ANYWIDGET_TIMEOUT!r} " \
        f"{logged} time(s):\n" + "\n".join(problems)


def test_a_figure_whose_module_loads_late_takes_every_update(tmp_path):
    ARTIFACTS.mkdir(exist_ok=True)
    with jupyter_lab(tmp_path, EVERY_CELL) as lab, sync_api.sync_playwright() as p:
        _write_notebook(lab.home / "root" / "notebooks")
        browser = launch_chromium(p)
        page = browser.new_page(viewport={"width": 1366, "height": 768})
        page.add_init_script(f"({DELAY_PLOTLY_JS})({DELAY_S * 1000})")
        console: list[str] = []
        page.on("console", lambda m: console.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]  # a busy machine
        try:
            _run_and_check(page, lab, console)
        finally:
            for hog in hogs:
                hog.kill()
                hog.wait(timeout=10)
            browser.close()
            shut_down_kernels(lab)

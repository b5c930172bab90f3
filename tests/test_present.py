"""The live presenter (course_utils/present.py): the real command, on a free port, serving notebook 03 to headless
Chromium. One slide shows at a time, by the notebook's slide metadata; keys and buttons move between slides and the
counter follows; a focused slider takes the arrow keys and moves its plot; figures fill the slide at both screen
sizes; no code shows; nothing is requested from beyond 127.0.0.1. Screenshots: test-artifacts/present-*.png.

The command-line checks at the end need no browser and run in the fast loop.
"""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import warnings
from types import SimpleNamespace

import nbformat
import pytest

from browser_support import ANYWIDGET_TIMEOUT, launch_chromium, until
from conftest import ROOT, browser_missing
from course_utils import present
from course_utils.slides import slide_type_for

NOTEBOOK = ROOT / "notebooks" / "03_layernorm.ipynb"  # one of the fastest to run, with sliders that drive a plot
ARTIFACTS = ROOT / "test-artifacts"
SMALL, LARGE = (1366, 768), (1920, 1080)
# Errors that say nothing about the presenter: jupyterlab-plotly's renderer, once it has drawn a plain (non-widget)
# figure, stores a PNG of it in the output's model with setData, which Voilà's output models lack (Voilà's own lab
# template logs the same; the figure is drawn, as the test of every figure's data below checks).
BENIGN_CONSOLE = [r"setData is not a function"]
browser = pytest.mark.browser
needs_browser = pytest.mark.skipif(browser_missing() is not None,
                                   reason=f"the browser tests are skipped: {browser_missing()}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def presenter(tmp_path_factory):
    """`python -m course_utils.present NOTEBOOK --port P --no-browser`, as a lecturer types it; its output in a log."""
    port, log_path = _free_port(), tmp_path_factory.mktemp("present") / "present.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "course_utils.present", str(NOTEBOOK), "--port", str(port),
                                 "--no-browser"], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        try:
            if not until(lambda: _listening(port) or proc.poll() is not None, timeout_s=60) or proc.poll() is not None:
                pytest.fail(f"the presenter did not start: {log_path.read_text()[-2000:]}")
            yield SimpleNamespace(port=port, url=f"http://127.0.0.1:{port}/", log=log_path)
        finally:
            proc.terminate()  # the presenter passes it on to Voilà, which shuts its kernel down
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.fixture(scope="module")
def deck(presenter):
    """The presenter's page at 1366x768, opened once for the checks below (Voilà runs the notebook on opening);
    every request and web socket it opens and every console error, recorded."""
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        chromium = launch_chromium(p)
        page = chromium.new_page(viewport=dict(zip(("width", "height"), SMALL)))
        seen = SimpleNamespace(page=page, urls=[], errors=[])
        page.on("request", lambda r: seen.urls.append(r.url))
        page.on("websocket", lambda w: seen.urls.append(w.url))
        page.on("console", lambda m: seen.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: seen.errors.append(f"pageerror: {e}"))
        page.goto(presenter.url, timeout=120_000)
        page.wait_for_selector(".course-pager", state="visible", timeout=120_000)  # shows with the cells
        _wait_for_widgets(page)
        yield seen
        chromium.close()


def _steady(read, pause_s: float, readings_alike: int, timeout_s: float, ready=lambda value: True):
    """read() every pause_s until its last readings_alike readings agree (and ready(reading) holds); returns that
    reading, or None after timeout_s (the page answers a reading only between two renders)."""
    readings = [read()]

    def steady() -> bool:
        time.sleep(pause_s)
        readings.append(read())
        last = readings[-readings_alike:]
        return len(last) == readings_alike and all(r == last[0] for r in last) and ready(last[0])

    return readings[-1] if until(steady, timeout_s=timeout_s) else None


def _wait_for_widgets(page) -> None:
    """Until the widgets Voilà renders after the cells show have all drawn: as many figures and controls in two
    readings a second apart."""
    count = "() => [document.querySelectorAll('.js-plotly-plot').length, document.querySelectorAll('.widget-slider').length]"
    assert _steady(lambda: page.evaluate(count), 1, 2, 60, ready=lambda c: c[0] > 0) is not None, \
        f"the widgets kept changing: {page.evaluate(count)}"


def _slides_in_notebook() -> int:
    return sum(slide_type_for(c) in ("slide", "subslide") for c in nbformat.read(NOTEBOOK, as_version=4).cells)


def _counter(page) -> tuple[int, int]:
    text = page.locator(".course-pager-count").inner_text()
    match = re.fullmatch(r"slide (\d+) / (\d+)", text.strip())
    assert match, f"the pager's counter reads {text!r}"
    return int(match[1]), int(match[2])


def _shown_headings(page) -> list[str]:
    """The headings (H1-H3) in cells that take room on the page and are not hidden: the current slide's only."""
    return page.evaluate("""() => Array.from(document.querySelectorAll('.course-cell :is(h1, h2, h3)'))
        .filter(h => h.closest('.course-cell').getBoundingClientRect().height > 0
                     && h.checkVisibility({visibilityProperty: true}))
        .map(h => h.textContent.replace('¶', '').trim())""")


def _scroll_top(page) -> float:
    return page.evaluate("() => document.scrollingElement.scrollTop")


def _press_until_slide(page, key: str, slide: int, most: int = 12) -> int:
    """Press key until the counter shows slide; returns the presses it took (tall slides scroll before they go)."""
    for presses in range(1, most + 1):
        page.keyboard.press(key)
        if _counter(page)[0] == slide:
            return presses
    raise AssertionError(f"{most} presses of {key} did not reach slide {slide}; the counter says {_counter(page)}")


def _shown_plots(page) -> str:
    """A fingerprint of the plots on the current slide: the geometry of their drawn traces."""
    return page.evaluate("""() => Array.from(document.querySelectorAll('.course-cell:not(.course-off) .js-plotly-plot'))
        .map(p => Array.from(p.querySelectorAll('.trace path, .trace rect, .point path, .plot path'))
            .map(e => e.getAttribute('d') || '').join('|')).join('#')""")


def _settled_plots(page) -> str:
    """The current slide's plots' fingerprint once it has held for a second (a figure may still be drawing, or taking
    its column's width, when its slide comes up)."""
    fingerprint = _steady(lambda: _shown_plots(page), 0.5, 3, 30)
    assert fingerprint is not None, "the slide's plots kept changing for 30 s with no input"
    return fingerprint


def _plots_state(page) -> list[list]:
    """Each plot on the current slide: how many traces its data has, how many it drew, its width (for a failure)."""
    return page.evaluate("""() => Array.from(document.querySelectorAll('.course-cell:not(.course-off) .js-plotly-plot'))
        .map(p => [(p.data || []).length, p.querySelectorAll('.trace').length, p.getBoundingClientRect().width])""")


def _plot_fill(page) -> list[float]:
    """Each plot on the current slide: its width over its cell's width."""
    return page.evaluate("""() => Array.from(document.querySelectorAll('.course-cell:not(.course-off) .js-plotly-plot'))
        .map(p => p.getBoundingClientRect().width / p.closest('.course-cell').getBoundingClientRect().width)""")


def _go_to_slider_slide(page) -> int:
    """Go to the first slide with a slider and a plot; returns its number."""
    page.keyboard.press("Home")
    while not page.locator(".course-cell:not(.course-off) .js-plotly-plot").count() \
            or not page.locator(".course-cell:not(.course-off) .noUi-handle").count():
        slide, total = _counter(page)
        assert slide < total, "no slide of the notebook has a slider and a plot"
        page.keyboard.press("ArrowRight")
    return _counter(page)[0]


def _screenshot(page, size: tuple[int, int], what: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"present-{size[0]}x{size[1]}-{what}.png"))


@browser
@needs_browser
def test_the_command_prints_its_address_and_how_to_stop_it(presenter):
    printed = presenter.log.read_text()
    assert f"at {presenter.url}" in printed and "Ctrl+C" in printed and "PageDown" in printed, printed[:1000]


@browser
@needs_browser
def test_the_first_slide_shows_alone_with_projector_text_and_no_code(deck):
    page = deck.page
    assert _counter(page) == (1, _slides_in_notebook())
    headings = _shown_headings(page)
    assert len(headings) == 1 and headings[0].startswith("03 · LayerNorm"), headings
    text = page.locator("#rendered_cells").text_content()
    assert "def layer_norm(" not in text and "demo.token_panel(" not in text, "the notebook's code shows"
    size = page.evaluate("() => parseFloat(getComputedStyle(document.querySelector('.jp-RenderedMarkdown p'))"
                         ".fontSize)")
    assert size >= 20, f"slide text is {size} px"
    _screenshot(page, SMALL, "first")


@browser
@needs_browser
def test_every_figure_draws_its_data_across_the_slide(deck):
    page = deck.page
    # Per figure: the points of its data, and what it drew them with (SVG traces, or WebGL for the 3-d sphere).
    drawn = page.evaluate("""() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(p => [
        (p.data || []).reduce((n, t) => n + (t.x || t.values || t.z || []).length, 0),
        p.querySelectorAll('.trace, canvas').length])""")
    assert len(drawn) >= 2 and all(points and marks for points, marks in drawn), f"points, marks per figure: {drawn}"


@browser
@needs_browser
def test_keys_and_buttons_change_the_slide_and_its_counter(deck):
    page, total = deck.page, _slides_in_notebook()
    page.keyboard.press("Home")
    first = _shown_headings(page)
    page.keyboard.press("ArrowRight")
    assert _counter(page) == (2, total) and _shown_headings(page) != first
    page.keyboard.press("ArrowLeft")
    assert _counter(page) == (1, total) and _shown_headings(page) == first
    page.locator(".course-pager-next").click()
    assert _counter(page)[0] == 2
    page.locator(".course-pager-prev").click()
    assert _counter(page)[0] == 1
    # A clicker's PageDown: the rest of a slide taller than the screen first, then the next slide, from its top.
    tall = page.evaluate("() => document.scrollingElement.scrollHeight > innerHeight + 1")
    presses = _press_until_slide(page, "PageDown", 2)
    assert (presses > 1) == tall and _scroll_top(page) == 0
    _press_until_slide(page, " ", 3)
    page.keyboard.press("Home")
    _press_until_slide(page, "PageDown", 2)
    page.keyboard.press("PageUp")
    assert _counter(page)[0] == 1
    page.keyboard.press("End")
    assert _counter(page) == (total, total)


@browser
@needs_browser
def test_a_focused_slider_moves_its_plot_not_the_slide(deck):
    page = deck.page
    slide = _go_to_slider_slide(page)
    assert min(_plot_fill(page)) > 0.9, f"figures take {_plot_fill(page)} of their slide's width"
    before = _settled_plots(page)
    handle = page.locator(".course-cell:not(.course-off) .noUi-handle").first
    value = handle.get_attribute("aria-valuenow")
    handle.focus()
    for key in ("ArrowRight", "ArrowLeft"):  # a slider at its maximum moves left
        for _ in range(3):
            page.keyboard.press(key)
        if handle.get_attribute("aria-valuenow") != value:
            break
    assert handle.get_attribute("aria-valuenow") != value, "the focused slider did not take the arrow keys"
    if not until(lambda: _shown_plots(page) != before, timeout_s=20):
        busy = [m for m in deck.errors if ANYWIDGET_TIMEOUT in m]
        pytest.fail(f"the slider moved from {value} to {handle.get_attribute('aria-valuenow')} but its plot did not "
                    "change" + (f"; the page logged {busy[0]!r}: anywidget gives a widget's code 2 s to load (plotly's "
                                "is 5 MB), so on a machine this busy the figure's view never takes updates" if busy
                                else "") + f"; its plots (traces in data, traces drawn, width): {_plots_state(page)}")
    assert _counter(page)[0] == slide, "the slider's arrow keys moved the slide"
    page.locator(".course-cell:not(.course-off) .js-plotly-plot").first.scroll_into_view_if_needed()
    _screenshot(page, SMALL, "slider")
    page.keyboard.press("Escape")  # the keys go back to the slides
    page.keyboard.press("ArrowRight")
    assert _counter(page)[0] == slide + 1


@browser
@needs_browser
def test_a_clicked_button_gives_the_clickers_keys_back_to_the_slides(deck):
    page = deck.page
    page.keyboard.press("End")
    while not page.locator(".course-cell:not(.course-off) .jupyter-widgets button").count():
        assert _counter(page)[0] > 1, "no slide of the notebook has a button"
        page.keyboard.press("ArrowLeft")
    slide = _counter(page)[0]
    button = page.locator(".course-cell:not(.course-off) .jupyter-widgets button").first
    button.focus()  # from the keyboard, a button keeps the focus, and Space and Enter press it
    assert page.evaluate("() => document.activeElement.tagName") == "BUTTON"
    button.click()  # with the mouse, it gives the keys back once its click has run: a clicker sends Space too
    assert until(lambda: page.evaluate("() => document.activeElement.tagName") != "BUTTON", timeout_s=5), \
        "a clicked button kept the focus, so a clicker's Space would press it again"
    _press_until_slide(page, "PageUp", slide - 1)  # a clicker's "back" (the slide's top first)
    _press_until_slide(page, " ", slide)  # and Space turns it forward again


@browser
@needs_browser
def test_at_1920x1080_the_figures_fill_the_wider_slide(deck):
    page = deck.page
    page.set_viewport_size(dict(zip(("width", "height"), LARGE)))
    page.keyboard.press("Home")
    _screenshot(page, LARGE, "first")
    _go_to_slider_slide(page)
    assert until(lambda: min(_plot_fill(page)) > 0.9, timeout_s=5), \
        f"after the resize the figures take {_plot_fill(page)} of their slide's width"
    page.locator(".course-cell:not(.course-off) .js-plotly-plot").first.scroll_into_view_if_needed()
    _screenshot(page, LARGE, "slider")


@browser
@needs_browser
def test_nothing_is_requested_beyond_127_0_0_1_and_the_console_is_clean(deck, presenter):
    local = re.compile(rf"^(blob:)?(https?|wss?)://127\.0\.0\.1:{presenter.port}/|^data:")
    outside = sorted({url for url in deck.urls if not local.match(url)})
    assert deck.urls and not outside, f"the presenter asked for {outside[:5]}"
    slow = [m for m in deck.errors if ANYWIDGET_TIMEOUT in m]
    if slow:  # what it would cost, a figure that drops updates, is checked by the slider test above
        warnings.warn(f"the presenter's page logged {slow[0]!r}: a widget's module took over anywidget's 2 s to load")
    serious = [m for m in deck.errors
               if ANYWIDGET_TIMEOUT not in m and not any(re.search(b, m, re.I) for b in BENIGN_CONSOLE)]
    assert not serious, f"browser console errors: {serious[:5]}"


def test_a_missing_notebook_is_refused_with_a_message(capsys, tmp_path):
    assert present.main([str(tmp_path / "nope.ipynb"), "--no-browser"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert present.main([str(NOTEBOOK.with_suffix(".py")), "--no-browser"]) == 2
    assert "is not a notebook" in capsys.readouterr().err


def test_a_port_in_use_is_refused_with_a_message(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert present.main([str(NOTEBOOK), "--port", str(port), "--no-browser"]) == 2
    message = capsys.readouterr().err
    assert f"port {port}" in message and "in use" in message and "--port" in message


def test_voila_is_asked_for_the_course_template_on_127_0_0_1_only():
    command = present.voila_command(NOTEBOOK, 8899, open_browser=False)
    assert f"--template={present.TEMPLATE}" in command and "--Voila.ip=127.0.0.1" in command
    assert "--port=8899" in command and "--Voila.port_retries=0" in command and "--no-browser" in command
    assert "--no-browser" not in present.voila_command(NOTEBOOK, 8899, open_browser=True)


def test_voila_finds_the_template_first_on_jupyter_path_and_keeps_the_users_paths(tmp_path):
    paths = present.voila_environment({"JUPYTER_PATH": str(tmp_path)})["JUPYTER_PATH"].split(os.pathsep)
    assert paths == [str(present.ASSETS), str(tmp_path)]
    assert (present.ASSETS / "voila" / "templates" / present.TEMPLATE / "index.html.j2").is_file()
    assert present.voila_environment({})["JUPYTER_PATH"] == str(present.ASSETS)

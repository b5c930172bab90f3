"""End to end in a real browser: JupyterLab on 127.0.0.1 with a token, every notebook opened in headless Chromium, all
cells run, widgets and plots rendered, a slider moved, a quiz checked; then, on the same run, what a learner on a
laptop and a lecturer on a projector see: every panel fits a 1366x768 screen, figures fill their column and follow it
when the window grows to 1920x1080, no label or plot title is cut or runs into another, and JupyterLab's single-key
shortcuts stay off while a course control has the keyboard. Screenshots in test-artifacts/: each notebook, and its
main panel (MAIN_PANEL) at both sizes, `panel-<notebook>-<w>x<h>.png`.

Where this test runs it is the run's only execution of the notebooks (tests/conftest.py deselects nbval's), so it
fails as nbval would: on any error output, on any cell left unrun, and on a cell running past nbval's cell timeout.
The layout and keyboard checks report every offender of a notebook at once (notebook, panel or figure, measured px).
Needs Debian's chromium (`apt-get install -y chromium`; .ci/run installs it) and the playwright package (test extra).
Never run `playwright install`: the test drives the system browser. COURSE_NO_BROWSER=1 skips it (nbval runs instead).
"""
from __future__ import annotations

import re
import time
import warnings

import nbformat
import pytest

from browser_support import ANYWIDGET_TIMEOUT, EVERY_CELL, code_cells, jupyter_lab, launch_chromium, open_notebook, \
    run_all_and_wait, shut_down_kernels, until
from conftest import ROOT, browser_missing
from course_utils import reading

if browser_missing():
    pytest.skip(f"The browser tests are skipped, nbval executes the notebooks: {browser_missing()}.",
                allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[test]' brings playwright")

ARTIFACTS = ROOT / "test-artifacts"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
# Console messages that come from JupyterLab itself running offline, not from the course.
BENIGN_CONSOLE = [r"Failed to load resource", r"net::ERR_", r"favicon", r"lsp", r"language server",
                  r"jupyterlab_pygments", r"404 \(Not Found\)", r"/api/.*news", r"announcements"]
# The panel each notebook's screenshots show, by a piece of its title: the one a lecturer runs live (README,
# "Teaching with this course"), else the notebook's first.
MAIN_PANEL = {"00_start_here": "Move the sliders", "01_why_normalize": "How big does the residual stream get",
              "02_batchnorm_and_padding": "How padding contaminates", "03_layernorm": "watch LayerNorm's steps",
              "04_pre_vs_post_ln": "Post-LN vs Pre-LN at initialization", "05_rmsnorm": "which norm notices",
              "06_qk_norm_and_softcapping": "Scale the queries and keys", "07_review": "Retake a checkpoint quiz",
              "08_real_model": "Change a trained model's LayerNorms"}
LAPTOP, PROJECTOR = (1366, 768), (1920, 1080)
FILL = 0.95  # a figure is at least this share of its column's width, and no wider than the column
# JupyterLab's single-key shortcuts (cut, insert above and below, to Markdown) and the keys that move its selection.
KEYS = ["x", "a", "b", "m", "ArrowDown", "ArrowUp"]
CONTROLS = {"toggle buttons": ".course-panel .widget-toggle-buttons .widget-toggle-button",
            "dropdown": ".course-panel .widget-dropdown select",
            "slider": ".course-panel .widget-slider .noUi-handle"}
# Everything the layout checks measure, in one pass over the open notebook: each course panel's height from its top
# to the bottom of its controls and main (largest) plot (a quiz inside a panel is measured as quizzes are), and each
# quiz item's; each plot's width and its column's (the output area, or its own column of a side-by-side box); labels,
# buttons, dropdown options and placeholders wider than their box; title="null" tooltips; plot titles out of their
# figure or on top of each other; y-axis titles over tick labels. Names say where: "panel '<title>'",
# "quiz '<title>'", or "cell N" outside them.
LAYOUT_JS = r"""() => {
  const rect = e => e.getBoundingClientRect();
  const shown = e => { const r = rect(e); return r.width > 0 && r.height > 0; };
  const short = t => { t = (t || '').replace(/\s+/g, ' ').trim(); return t.length > 50 ? t.slice(0, 49) + '…' : t; };
  const px = v => parseFloat(v) || 0;
  const notebook = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
  const scroller = notebook.querySelector('.jp-WindowedPanel-outer') || notebook.querySelector('.jp-Notebook');
  const cells = [...notebook.querySelectorAll('.jp-Cell')];
  const nameOf = w => {
    const panel = w.closest('.course-panel, .course-quiz');
    if (!panel) return `cell ${cells.indexOf(w.closest('.jp-Cell'))}`;
    const head = panel.querySelector('b, h3');
    return `${panel.classList.contains('course-quiz') ? 'quiz' : 'panel'} '${short(head && head.textContent)}'`;
  };
  const plotTitle = p => short((p.querySelector('.gtitle') || {}).textContent) || 'untitled';
  const overlap = (a, b) => Math.min(a.right, b.right) - Math.max(a.left, b.left) > 1
                          && Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 1;
  const inside = (r, box) => r.left >= box.left - 1 && r.right <= box.right + 1
                          && r.top >= box.top - 1 && r.bottom <= box.bottom + 1;

  // Fit: from a panel's top to the bottom of its controls and of its main (largest) plot; each quiz item whole.
  const fit = [];
  for (const p of notebook.querySelectorAll('.course-panel')) {
    if (!shown(p)) continue;
    const plots = [...p.querySelectorAll('.js-plotly-plot')].filter(shown);
    const area = e => rect(e).width * rect(e).height;
    const main = plots.reduce((a, b) => (a && area(a) >= area(b) ? a : b), null);
    const controls = [...p.querySelectorAll('.widget-inline-hbox:not(.widget-html):not(.widget-htmlmath), button')]
      .filter(c => shown(c) && !c.closest('.course-quiz'));  // a quiz inside a panel is measured item by item
    const bottom = Math.max(rect(p).top, ...controls.map(c => rect(c).bottom), main ? rect(main).bottom : 0);
    fit.push({name: nameOf(p), height: Math.round(bottom - rect(p).top), what: main ? 'controls and main plot'
              : 'controls'});
  }
  for (const q of notebook.querySelectorAll('.course-quiz')) {
    for (const item of q.querySelectorAll(':scope > .widget-vbox')) {
      if (!shown(item) || !item.querySelector('button')) continue;
      fit.push({name: `${nameOf(q)} item '${short(item.textContent).slice(0, 30)}'`,
                height: Math.round(rect(item).height), what: 'question, answer box and button'});
    }
  }

  // Width: each plot against its column (the output area, or its own column of a side-by-side box).
  const column = p => {
    let e = p;
    while (e.parentElement && !e.classList.contains('jp-OutputArea-output')
           && !e.parentElement.classList.contains('widget-hbox')) e = e.parentElement;
    return e;
  };
  const plots = [...notebook.querySelectorAll('.js-plotly-plot')].filter(shown).map(p => {
    const svg = p.querySelector('.main-svg') || p;
    const col = column(p), cs = getComputedStyle(col);
    return {name: nameOf(p), title: plotTitle(p), width: Math.round(rect(svg).width),
            column: Math.round(col.clientWidth - px(cs.paddingLeft) - px(cs.paddingRight))};
  });

  // Text that does not fit: labels and buttons cut with an ellipsis, dropdown options, placeholders.
  const clipped = [];
  const ctx = document.createElement('canvas').getContext('2d');
  const textWidth = (text, e) => { const cs = getComputedStyle(e);
    ctx.font = `${cs.fontStyle} ${cs.fontWeight} ${cs.fontSize} ${cs.fontFamily}`;
    return ctx.measureText(text).width; };
  const room = e => { const cs = getComputedStyle(e);
    return e.clientWidth - px(cs.paddingLeft) - px(cs.paddingRight); };
  const outputs = notebook.querySelectorAll('.jp-OutputArea-output');
  const within = sel => [...outputs].flatMap(o => [...o.querySelectorAll(sel)]).filter(shown);
  for (const e of within('.widget-label, .widget-label-basic, .jupyter-button, .widget-readout')) {
    if (e.scrollWidth > e.clientWidth + 1) clipped.push({name: nameOf(e), text: short(e.textContent),
      need: e.scrollWidth, has: e.clientWidth, tooltip: e.getAttribute('title')});
  }
  for (const s of within('.widget-dropdown select')) {
    const longest = [...s.options].map(o => o.textContent)
      .reduce((a, b) => (textWidth(b, s) > textWidth(a, s) ? b : a), '');
    if (textWidth(longest, s) > room(s) + 1) clipped.push({name: nameOf(s),
      text: `option ${short(longest)} (when chosen)`,
      need: Math.ceil(textWidth(longest, s)), has: Math.floor(room(s)), tooltip: s.getAttribute('title')});
  }
  for (const i of within('input[placeholder], textarea[placeholder]')) {
    const text = i.getAttribute('placeholder');
    if (text && i.tagName === 'INPUT' && textWidth(text, i) > room(i) + 1) clipped.push({name: nameOf(i),
      text: `placeholder ${short(text)}`, need: Math.ceil(textWidth(text, i)), has: Math.floor(room(i)),
      tooltip: i.getAttribute('title')});
  }
  const nulls = {};
  for (const e of within('[title="null"]')) nulls[nameOf(e)] = (nulls[nameOf(e)] || 0) + 1;

  // Plot text: titles inside the figure and apart; y-axis titles clear of the tick labels.
  const plotText = [];
  for (const p of notebook.querySelectorAll('.js-plotly-plot')) {
    if (!shown(p)) continue;
    const box = rect(p.querySelector('.svg-container') || p);
    const titles = [...p.querySelectorAll('.gtitle, .annotation-text')].filter(t => t.textContent.trim() && shown(t));
    const where = `${nameOf(p)}, figure '${plotTitle(p)}'`;
    for (const t of titles) if (!inside(rect(t), box))
      plotText.push(`${where}: title '${short(t.textContent)}' runs out of the figure`);
    titles.forEach((a, i) => titles.slice(i + 1).forEach(b => { if (overlap(rect(a), rect(b)))
      plotText.push(`${where}: titles '${short(a.textContent)}' and '${short(b.textContent)}' overlap`); }));
    const cls = e => e.getAttribute('class') || '';
    const ytitles = [...p.querySelectorAll('text')].filter(t => /^y\d*title$/.test(cls(t)) && shown(t));
    const ticks = [...p.querySelectorAll('g')].filter(g => /^y\d*tick$/.test(cls(g)))
      .map(g => g.querySelector('text')).filter(t => t && t.textContent.trim() && shown(t));
    for (const t of ytitles) {
      const hit = ticks.filter(k => overlap(rect(t), rect(k)));
      if (hit.length) plotText.push(`${where}: y-axis title '${short(t.textContent)}' runs over tick labels `
                                    + hit.slice(0, 3).map(k => `'${k.textContent}'`).join(', '));
    }
  }
  return {visible: scroller.clientHeight, fit, plots, clipped, nulls, plotText};
}"""


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server on a copy of notebooks/ (tests/browser_support.py)."""
    try:
        with jupyter_lab(tmp_path_factory.mktemp("lab"), EVERY_CELL) as running:
            yield running
    except RuntimeError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        chromium = launch_chromium(p)
        yield chromium
        chromium.close()


# The open notebook's cells as JupyterLab holds them (how many, which is active, each one's type), and where the
# keyboard is, if it left the control `e`.
NOTEBOOK_STATE_JS = """(e, name) => {
    const CONTROL = '.widget-toggle-buttons, .widget-dropdown, .widget-slider';
    const panel = Array.from(window.jupyterapp.shell.widgets('main'))
        .find(w => w.context && w.context.path.endsWith(name));
    const cells = panel.content.model.cells, focus = document.activeElement;
    return {cells: cells.length, active: panel.content.activeCellIndex,
            types: Array.from({length: cells.length}, (_, i) => cells.get(i).type),
            left: e.closest(CONTROL).contains(focus) ? '' : (focus.className || focus.tagName)};
}"""


def _titles(page) -> list[str]:
    return page.evaluate("""() => Array.from(document.querySelectorAll('.js-plotly-plot'))
        .map(p => (p.querySelector('.gtitle') || {}).textContent || '')""")


def _plots_state(page) -> str:
    """A fingerprint of every plotly plot on the page: the geometry of its drawn traces."""
    return page.evaluate("""() => Array.from(document.querySelectorAll('.js-plotly-plot'))
        .map(p => Array.from(p.querySelectorAll('.trace path, .trace rect, .point path, .hm image, .plot path'))
            .map(e => (e.getAttribute('d') || '') + (e.getAttribute('href') || '') + (e.getAttribute('x') || '')
                      + (e.getAttribute('height') || '')).join('|')).join('#')""")


def _check_folds(folds: list[dict], path) -> None:
    """JupyterLab opened the notebook with its optional sections collapsed and its worked answers' code hidden, as
    the file says (course_utils.reading counts the same folds for the README's reading table)."""
    nb = nbformat.read(path, as_version=4)
    want = [{"hidden": hidden, "code_hidden": bool(c.metadata.get("jupyter", {}).get("source_hidden")),
             "collapsed": bool(c.metadata.get(reading.COLLAPSED))}
            for c, hidden in zip(nb.cells, reading.folded_cells(nb))]
    for w in want:  # a cell inside a collapsed section is hidden whole; its own code flag does not show
        w["code_hidden"] = w["code_hidden"] and not w["hidden"]
    got = [dict(f, code_hidden=f["code_hidden"] and not f["hidden"]) for f in folds]
    wrong = [i for i, (g, w) in enumerate(zip(got, want)) if g != w]
    assert len(got) == len(want) and not wrong, (
        f"{path.name}: cells {wrong[:5]} open folded otherwise than the file says: "
        f"{[(got[i], want[i]) for i in wrong[:2]]}")


def _run_every_cell(page, path, cell_timeout: float) -> None:
    """Run all cells; fail as nbval would on an error output, a traceback, a cell left unrun or a cell timeout."""
    n_code = page.locator(".jp-Notebook .jp-CodeCell").count()
    prompts, stopped = run_all_and_wait(page, path.name, timeout_s=300, cell_timeout_s=cell_timeout)
    assert not stopped, f"{path.name}: {stopped}; prompts: {prompts}"
    cells = code_cells(page, path.name)
    errors = [(i, c["errors"][0]) for i, c in enumerate(cells) if c["errors"]]
    tracebacks = page.locator(".jp-OutputArea-output").filter(has_text="Traceback").all_inner_texts()
    assert not errors, f"{path.name}: code cell {errors[0][0]} failed: {errors[0][1]}\n" \
        + "\n".join(t[-1500:] for t in tracebacks[:1])
    assert not tracebacks, f"{path.name}: a cell printed a traceback:\n{tracebacks[0][-1500:]}"
    unrun = [i for i, c in enumerate(cells) if c["count"] is None]
    assert len(prompts) == n_code == len(cells) and not unrun and all(re.search(r"\d", p) for p in prompts), \
        f"{path.name}: not every cell ran (code cells {unrun} did not): {prompts}"


def _check_widgets_and_plots_render(page, path) -> None:
    """Widgets rendered as widgets (not as text, not as an error), and every plotly figure drawn."""
    def rendered():
        text = " ".join(page.locator(".jp-OutputArea-output").all_inner_texts())
        return "Loading widget..." not in text and all(t.strip() for t in _titles(page))

    until(rendered, timeout_s=15)  # then the checks below say what is wrong
    outputs = " ".join(page.locator(".jp-OutputArea-output").all_inner_texts())
    for bad in ("Error displaying widget", "Loading widget...", "FigureWidget({", "Panel(controls"):
        assert bad not in outputs, f"{path.name}: a widget did not render ({bad!r})"
    assert page.locator(".jupyter-widgets").count() > 0, f"{path.name}: no widget area rendered"
    plots = page.locator(".js-plotly-plot")
    titles = _titles(page)
    blank = [i for i, t in enumerate(titles) if not t.strip()]
    for i in blank:
        plots.nth(i).screenshot(path=str(ARTIFACTS / f"{path.stem}-blank-plot-{i}.png"))
    assert not blank, f"{path.name}: plotly figures {blank} of {len(titles)} drew blank (no title, no data)"


def _check_a_slider_moves_a_plot(page, path) -> None:
    sliders = page.locator(".widget-slider .noUi-handle, .widget-slider input[type=range]")
    if not sliders.count():
        return
    assert page.locator(".js-plotly-plot").count() > 0, f"{path.name}: sliders but no plotly plot rendered"
    settled = [_plots_state(page)]  # plots still drawing would look like a slider's effect: wait them out

    def still():
        time.sleep(0.3)
        settled.append(_plots_state(page))
        return settled[-1] == settled[-2]

    until(still, timeout_s=10)
    before = settled[-1]
    # the main panel's sliders first: a training panel's sliders only set the next run, they redraw nothing
    selector = ".widget-slider .noUi-handle, .widget-slider input[type=range]"
    main = page.locator(".course-panel").filter(has=page.locator("b", has_text=MAIN_PANEL.get(path.stem, "")))
    handles = ([main.first.locator(selector).nth(i) for i in range(min(main.first.locator(selector).count(), 4))]
               if path.stem in MAIN_PANEL and main.count() else [])
    handles += [sliders.nth(i) for i in range(min(sliders.count(), 4))]  # some sit at their maximum; try a few
    for handle in handles:
        handle.scroll_into_view_if_needed()
        handle.focus()
        for key in ("ArrowRight", "ArrowLeft"):  # right first; a slider already at its maximum goes left
            for _ in range(3 if key == "ArrowRight" else 6):
                page.keyboard.press(key)
            if until(lambda: _plots_state(page) != before, timeout_s=3):
                return
    pytest.fail(f"{path.name}: moving a slider did not change any plot")


def _check_a_quiz_answers(page, path) -> None:
    """A quiz Check button gives feedback."""
    check = page.locator("button", has_text=re.compile(r"^\s*Check\s*$"))
    if not check.count():
        return
    quiz = check.first.locator("xpath=ancestor::div[contains(@class,'widget-vbox')][1]")
    options = quiz.locator(".widget-radio-box input, .widget-toggle-button, input[type=number], .widget-text input")
    if options.count():
        first = options.first
        if first.get_attribute("type") in ("number", "text"):
            first.fill("1")
        else:
            first.click()
    check.first.scroll_into_view_if_needed()
    check.first.click()
    feedback = re.compile(r"[Cc]orrect|[Nn]ot quite|[Ii]ncorrect|expected|[Ww]rong|[Tt]ry")
    until(lambda: feedback.search(quiz.inner_text()), timeout_s=5)
    text = quiz.inner_text()
    assert feedback.search(text), f"{path.name}: pressing Check showed no feedback: {text[:300]}"


def _plot_widths(page) -> list[int]:
    return page.evaluate("""() => Array.from(document.querySelectorAll('.js-plotly-plot .main-svg:first-of-type'))
        .map(s => Math.round(s.getBoundingClientRect().width))""")


def _resize(page, size: tuple[int, int]) -> None:
    """Set the viewport and wait until the figures stop changing width (they re-fit a little after the resize)."""
    page.set_viewport_size({"width": size[0], "height": size[1]})
    widths = [None, _plot_widths(page)]

    def settled():
        time.sleep(0.25)
        widths.append(_plot_widths(page))
        return widths[-1] == widths[-2] == widths[-3]

    until(settled, timeout_s=5)


def _layout_problems(report: dict, where: str, fit: bool) -> list[str]:
    """Every offender of one LAYOUT_JS report, each with its measure; fit: also each panel's height."""
    visible = report["visible"]
    problems = [f"{where}: {f['name']} is {f['height']} px tall ({f['what']}); {visible} px of notebook are visible"
                for f in report["fit"] if fit and f["height"] > visible]
    problems += [f"{where}: {p['name']}, figure '{p['title']}' is {p['width']} px wide in a {p['column']} px column "
                 f"({100 * p['width'] / max(p['column'], 1):.0f}%)" for p in report["plots"]
                 if not FILL * p["column"] <= p["width"] <= p["column"] + 1]
    problems += [f"{where}: {c['name']}: {c['text']!r} is cut ({c['need']} px of text in {c['has']} px; tooltip "
                 f"{c['tooltip']!r})" for c in report["clipped"]]
    problems += [f"{where}: {name}: {n} element(s) with title=\"null\"" for name, n in report["nulls"].items()]
    return problems + [f"{where}: {text}" for text in report["plotText"]]


def _screenshot_main_panel(page, path, size: tuple[int, int]) -> list[str]:
    """The notebook's main panel (MAIN_PANEL; the first panel for a notebook it does not name) scrolled to the top of
    the notebook, as the screen shows it."""
    found = page.evaluate("""piece => {
        const panels = Array.from(document.querySelectorAll('.course-panel'));
        const panel = panels.find(p => ((p.querySelector('b') || {}).textContent || '').includes(piece));
        if (panel) panel.scrollIntoView({block: 'start'});
        return panel ? null : panels.map(p => (p.querySelector('b') || {}).textContent || '(untitled)').join(' | ')
            || 'none';
    }""", MAIN_PANEL.get(path.stem, ""))
    page.screenshot(path=str(ARTIFACTS / f"panel-{path.stem}-{size[0]}x{size[1]}.png"))
    if found is not None:
        return [f"{path.stem}: no course panel's title contains {MAIN_PANEL.get(path.stem, '')!r} (MAIN_PANEL in "
                f"tests/test_browser.py); its panels: {found}"]
    return []


def _presentation_problems(page, path) -> list[str]:
    """Fit, fill and clipping at a laptop's size and a projector's, the main panel's screenshots at both, and the
    figures' widths following the window from one to the other."""
    problems, widths = [], {}
    for size in (LAPTOP, PROJECTOR):
        _resize(page, size)
        report = page.evaluate(LAYOUT_JS)
        problems += _layout_problems(report, f"{path.stem} at {size[0]}x{size[1]}", fit=size == LAPTOP)
        widths[size] = [(p["name"], p["title"], p["width"]) for p in report["plots"]]
        problems += _screenshot_main_panel(page, path, size)
    if len(widths[LAPTOP]) != len(widths[PROJECTOR]):
        return problems + [f"{path.stem}: {len(widths[LAPTOP])} figures shown at 1366x768, "
                           f"{len(widths[PROJECTOR])} at 1920x1080"]
    problems += [f"{path.stem}: {name}, figure '{title}' is {small} px wide at 1366x768 and {large} px at 1920x1080: "
                 "it does not follow the window"
                 for (name, title, small), (_, _, large) in zip(widths[LAPTOP], widths[PROJECTOR]) if large <= small]
    return problems


def _notebook_change(before: dict, after: dict) -> str:
    """What a key did to the notebook (NOTEBOOK_STATE_JS before and after), or "" when nothing."""
    changes = []
    if before["cells"] != after["cells"]:
        changes.append(f"{before['cells']} -> {after['cells']} cells")
    elif before["types"] != after["types"]:
        i = next(i for i, (b, a) in enumerate(zip(before["types"], after["types"])) if b != a)
        changes.append(f"cell {i} {before['types'][i]} -> {after['types'][i]}")
    if before["active"] != after["active"]:
        changes.append(f"active cell {before['active']} -> {after['active']}")
    return ", ".join(changes)


def _keyboard_problems(page, path) -> list[str]:
    """With each kind of course control focused, JupyterLab's single-key shortcuts and arrow keys change nothing of
    the notebook, and the keyboard stays in the control. Stops at the first change: the notebook is no longer the
    one that ran."""
    problems = []
    for kind, selector in CONTROLS.items():
        if not page.locator(selector).count():
            continue
        control = page.locator(selector).first
        control.scroll_into_view_if_needed()
        control.focus()
        name = control.evaluate("e => { const p = e.closest('.course-panel'); "
                                "return p ? ((p.querySelector('b') || {}).textContent || 'untitled').trim() : '?'; }")
        before = control.evaluate(NOTEBOOK_STATE_JS, path.name)
        for key in KEYS:
            page.keyboard.press(key)
            after = control.evaluate(NOTEBOOK_STATE_JS, path.name)
            where = f"{path.stem}: {key!r} with the {kind} of panel '{name}' focused"
            changed = _notebook_change(before, after)
            if changed:
                return problems + [f"{where} changed the notebook: {changed}"]
            if after["left"]:
                problems.append(f"{where} took the keyboard out of it (to {str(after['left'])[:60]!r})")
                break
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_in_a_real_browser(lab, browser, path, request):
    ARTIFACTS.mkdir(exist_ok=True)
    context = browser.new_context(viewport={"width": LAPTOP[0], "height": LAPTOP[1]})
    page = context.new_page()
    console_errors: list[str] = []
    page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: console_errors.append(f"pageerror: {e}"))
    try:
        _check_folds(open_notebook(page, lab, path.name), path)
        _run_every_cell(page, path, float(request.config.getoption("nbval_cell_timeout")))
        _check_widgets_and_plots_render(page, path)
        _check_a_slider_moves_a_plot(page, path)
        _check_a_quiz_answers(page, path)
        page.screenshot(path=str(ARTIFACTS / f"{path.stem}.png"), full_page=True)
        problems = list(dict.fromkeys(_presentation_problems(page, path) + _keyboard_problems(page, path)))
        slow = [m for m in console_errors if ANYWIDGET_TIMEOUT in m]
        if slow:  # every figure drew and a slider moved its plot (checked above); say it, do not fail on it
            warnings.warn(f"{path.stem}: the page logged {slow[0]!r} {len(slow)} time(s): a widget's module took "
                          "over anywidget's 2 s to load (PageHelper holds a live figure's updates until it has); "
                          "every figure still drew and the slider checked moved its plot")
        problems += [f"{path.stem}: browser console error: {m}" for m in console_errors
                     if ANYWIDGET_TIMEOUT not in m and not any(re.search(b, m, re.I) for b in BENIGN_CONSOLE)][:5]
        assert not problems, f"{path.name}: {len(problems)} problem(s):\n" + "\n".join(problems)
    except Exception:
        page.screenshot(path=str(ARTIFACTS / f"{path.stem}-failure.png"), full_page=True)
        raise
    finally:
        context.close()
        shut_down_kernels(lab)

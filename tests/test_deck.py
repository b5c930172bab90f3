"""Static snapshots of live widgets (course_utils/snapshot.py) and the offline decks and reading pages built from them
(course_utils/deck.py).

The unit tests need no kernel or browser. Two tests start a kernel (a tiny notebook run to its end, one that
fails). The browser tests build notebook 00's deck with execution and open it in Chromium with the network off,
and check in JupyterLab that a widget carrying its snapshot still shows live. Screenshot: test-artifacts/deck-*.png.
"""
from __future__ import annotations

import json
import re
import types
import warnings

import ipywidgets as widgets
import nbformat
import plotly.graph_objects as go
import pytest
from IPython.core.formatters import DisplayFormatter

from conftest import ROOT, browser_missing
from course_utils import deck, snapshot
from course_utils.figures import PageHelper, live_figure
from course_utils.slides import apply_slide_metadata

ARTIFACTS = ROOT / "test-artifacts"
needs_browser = pytest.mark.skipif(browser_missing() is not None,
                                   reason=f"the browser tests are skipped: {browser_missing()}")


def _panel_like():
    """A widget tree like a course panel: a title, controls, a message, a figure, a hidden part and the helper."""
    fig = live_figure("Loss <by step>", "step", "loss", width=700)
    fig.add_scatter(y=[3.0, 2.0, 1.5], name="Pre-LN")
    controls = [widgets.FloatSlider(value=0.25, description="learning rate"),
                widgets.Dropdown(options=[("Pre-LN", "pre"), ("Post-LN", "post")], value="post",
                                 description="placement:"),
                widgets.Checkbox(value=True, description="warmup"), widgets.Button(description="Train")]
    hidden = widgets.HTML("secret", layout=widgets.Layout(display="none"))
    tree = widgets.VBox([widgets.HTML("<b>Training</b>"), widgets.HBox(controls), widgets.HTML("all good"), fig,
                         hidden, PageHelper()])
    return tree, fig


def _figure_specs(markup: str) -> list[dict]:
    return [json.loads(s) for s in re.findall(r'<script type="application/json">(.*?)</script>', markup)]


# ---- snapshots -------------------------------------------------------------------------------------------------------

def test_a_snapshot_shows_the_controls_texts_and_figures_and_nothing_hidden():
    tree, fig = _panel_like()
    bundle = snapshot.snapshot(tree)
    markup = bundle["text/html"]
    assert "learning rate: <b>0.25</b>" in markup and "placement: <b>Post-LN</b>" in markup  # label, not value
    assert "warmup: <b>on</b>" in markup and "<b>Training</b>" in markup and "all good" in markup
    assert "secret" not in markup and "Train<" not in markup
    assert bundle["text/plain"] == ("A course widget, as the run left it: learning rate = 0.25, placement = Post-LN, "
                                    "warmup = on; figure: Loss <by step>")
    [spec] = _figure_specs(markup)
    assert spec == bundle[snapshot.PLOTLY_MIME]
    assert spec["data"][0]["y"] == [3.0, 2.0, 1.5] and spec["data"][0]["name"] == "Pre-LN"
    assert "width" not in spec["layout"] and spec["layout"]["height"] == fig.layout.height
    assert spec["config"]["responsive"] is True


def test_a_snapshot_takes_the_figure_as_it_is_now():
    tree, fig = _panel_like()
    fig.data[0].y = [9.0, 8.0]
    tree.children[1].children[0].value = 0.5
    bundle = snapshot.snapshot(tree)
    assert bundle[snapshot.PLOTLY_MIME]["data"][0]["y"] == [9.0, 8.0]
    assert "learning rate: <b>0.5</b>" in bundle["text/html"]


def test_figure_json_cannot_close_its_script_element():
    fig = go.Figure(go.Bar(y=[1, 2]), layout={"title": {"text": "</script><img src=x onerror=alert(1)>"}})
    markup = snapshot.snapshot_html([("figure", snapshot.figure_json(fig))])
    assert markup.count("</script>") == 2  # the JSON's own element and the drawing script's
    assert _figure_specs(markup)[0]["layout"]["title"]["text"].startswith("</script>")
    assert "<img" not in markup


def test_a_widget_with_nothing_to_show_gives_an_empty_snapshot_without_a_script():
    bundle = snapshot.snapshot(widgets.VBox([widgets.Button(description="Stop"), PageHelper()]))
    assert bundle["text/html"] == '<div class="course-snapshot"></div>'
    assert snapshot.PLOTLY_MIME not in bundle


# ---- install(): the snapshot beside the live view --------------------------------------------------------------------

def _shell():
    shell = types.SimpleNamespace(display_formatter=DisplayFormatter())
    assert snapshot.install(shell)
    return shell


def test_install_puts_the_snapshot_beside_every_widget_view():
    shell = _shell()
    tree, fig = _panel_like()
    # a whole tree, and plotly's own FigureWidget (its own _repr_mimebundle_) alone; a course LiveFigure shown alone
    # displays itself in a box with its PageHelper (figures.py), which is a tree like the first
    for shown in (tree, go.FigureWidget(fig)):
        data, _ = shell.display_formatter.format(shown)
        assert set(data) == {snapshot.WIDGET_MIME, "text/html", snapshot.PLOTLY_MIME, "text/plain"}
        assert data[snapshot.WIDGET_MIME]["model_id"] == shown.model_id
        own = shown._repr_mimebundle_()  # the widget's own text stays; the FigureWidget has none, so the summary
        assert data["text/plain"] == own.get("text/plain", snapshot.snapshot(shown)["text/plain"])
        assert _figure_specs(data["text/html"])[0]["data"][0]["y"] == [3.0, 2.0, 1.5]


def test_bundles_are_fresh_snapshots_of_displayed_widgets_only():
    shell = _shell()
    tree, fig = _panel_like()
    never_shown = widgets.VBox([widgets.IntSlider()])
    shell.display_formatter.format(tree)
    fig.data[0].y = [0.5]
    found = snapshot.bundles([tree.model_id, never_shown.model_id])
    assert list(found) == [tree.model_id]
    assert found[tree.model_id][snapshot.PLOTLY_MIME]["data"][0]["y"] == [0.5]


def test_a_failing_snapshot_still_shows_the_live_widget(monkeypatch):
    shell = _shell()

    def broken(_widget):
        raise RuntimeError("no JSON today")

    monkeypatch.setattr(snapshot, "snapshot", broken)
    slider = widgets.IntSlider()
    with pytest.warns(UserWarning, match="no static copy of this widget .RuntimeError: no JSON today"):
        data, _ = shell.display_formatter.format(slider)
    assert set(data) == {snapshot.WIDGET_MIME, "text/plain"}


def test_a_closed_widget_and_a_plain_shell_are_left_alone(monkeypatch):
    shell = _shell()
    slider = widgets.IntSlider()
    slider.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        data, _ = shell.display_formatter.format(slider)
    assert snapshot.WIDGET_MIME not in data and "text/html" not in data
    import IPython
    monkeypatch.setattr(IPython, "get_ipython", lambda: None)
    assert snapshot.install() is False


# ---- outputs made static ---------------------------------------------------------------------------------------------

def _output(data: dict):
    return nbformat.v4.new_output("display_data", data=data)


def _widget_data(model_id: str, **more) -> dict:
    return {snapshot.WIDGET_MIME: {"version_major": 2, "version_minor": 0, "model_id": model_id},
            "text/plain": "VBox(children=(...))", **more}


def test_static_outputs_replace_every_widget_and_draw_every_plotly_figure():
    tree, fig = _panel_like()
    fresh = snapshot.snapshot(tree)
    left_by_install = snapshot.snapshot(widgets.VBox([widgets.IntSlider(3, description="depth")]))
    plain = {"data": [{"type": "bar", "y": [1, 2]}], "layout": {"width": 700, "height": 300}}
    outputs = [_output(_widget_data("run")), _output(_widget_data("saved", **left_by_install)),
               _output(_widget_data("gone")), _output({snapshot.PLOTLY_MIME: plain, "text/plain": "Figure"}),
               _output(fresh), nbformat.v4.new_output("stream", text="printed\n")]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x", outputs=outputs)],
                                  metadata={"widgets": {"application/vnd.jupyter.widget-state+json": {}}})
    assert deck.static_outputs(nb, {"run": fresh}) == 4
    run, saved, gone, drawn, kept, stream = (o.get("data") for o in nb.cells[0].outputs)
    assert run == fresh
    assert snapshot.WIDGET_MIME not in saved and "depth: <b>3</b>" in saved["text/html"]
    assert gone["text/plain"] == deck.NO_SNAPSHOT
    spec = _figure_specs(drawn["text/html"])[0]
    assert spec["data"] == plain["data"] and "width" not in spec["layout"] and drawn[snapshot.PLOTLY_MIME] == spec
    assert kept == fresh and stream is None  # a snapshot already, and a stream: untouched
    assert "widgets" not in nb.metadata
    nbformat.validate(nb)


def _small_notebook(*sources: str, markdown: str = "# A deck\n\nThe mean $\\mu = \\frac{1}{d}\\sum_k x_k$."):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(markdown),
                                         *map(nbformat.v4.new_code_cell, sources),
                                         nbformat.v4.new_markdown_cell("## Second slide\n\n$$a^2 + b^2$$")],
                                  metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                           "language": "python"}})
    apply_slide_metadata(nb)
    return nb


@pytest.mark.parametrize("to", ["slides", "html"])
def test_decks_and_pages_inline_everything_they_load(to):
    nb = _small_notebook("secret_code = 1")
    text = deck.export(nb, to, "small")
    scripts = re.findall(r"<script[^>]*>(.*?)</script>", text, flags=re.S)
    markup = re.sub(r"(<script[^>]*>).*?</script>", r"\1</script>", text, flags=re.S)
    loads = re.findall(r"<(?:script|link|img|iframe|embed|source)\b[^>]*\b(?:src|href)\s*=\s*[\"']?([^\"' >]*)", markup)
    assert not loads, f"the page loads files: {loads[:3]}"
    assert "@import" not in " ".join(re.findall(r"<style[^>]*>(.*?)</style>", markup, flags=re.S))
    assert any(re.search(r"plotly\.js v\d", s) for s in scripts), "plotly.js is not inlined"
    assert any("MathJax" in s and len(s) > 1_000_000 for s in scripts), "MathJax is not inlined"
    if to == "slides":
        assert "Reveal.initialize" in text and text.count("<section") >= 2
        assert "secret_code" not in text and "secret_code" in deck.export(nb, to, "small", code=True)
    else:
        assert "secret_code" in text and "Reveal" not in text


# ---- the command line ------------------------------------------------------------------------------------------------

def test_the_command_names_what_is_wrong_without_a_traceback(tmp_path, capsys):
    out = tmp_path / "out"
    assert deck.main([str(tmp_path / "nowhere.ipynb"), "--out", str(out), "--no-execute"]) == 1
    assert capsys.readouterr().err.strip() == f"error: {tmp_path / 'nowhere.ipynb'}: no such notebook"
    broken = tmp_path / "broken.ipynb"
    broken.write_text("{not json")
    assert deck.main([str(broken), "--out", str(out), "--no-execute"]) == 1
    assert "broken.ipynb: not a readable notebook" in capsys.readouterr().err
    a_file = tmp_path / "file.txt"
    a_file.write_text("")
    assert deck.main([str(broken), "--out", str(a_file)]) == 1
    assert capsys.readouterr().err.startswith(f"error: --out {a_file}: cannot write there")
    nbformat.write(_small_notebook(), tmp_path / "small.ipynb")
    assert deck.main([str(tmp_path / "small.ipynb"), "--out", str(tmp_path), "--to", "notebook", "--no-execute"]) == 1
    assert "would overwrite the notebook itself" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        deck.main([str(tmp_path / "small.ipynb"), "--out", str(out), "--timeout", "0"])
    assert "--timeout must be a positive number" in capsys.readouterr().err


def test_the_command_builds_what_it_can_and_says_which_failed(tmp_path, capsys):
    nbformat.write(_small_notebook(), tmp_path / "good.ipynb")
    assert deck.main([str(tmp_path / "missing.ipynb"), str(tmp_path / "good.ipynb"), "--out", str(tmp_path / "out"),
                      "--no-execute", "--to", "html"]) == 1
    out, err = capsys.readouterr()
    assert "good.html" in out and "missing.ipynb: no such notebook" in err
    assert (tmp_path / "out" / "good.html").stat().st_size > 1_000_000  # plotly.js and MathJax inside


# ---- with a kernel ---------------------------------------------------------------------------------------------------

LIVE_CELLS = ["import ipywidgets as w\nimport plotly.graph_objects as go\n"
              "from course_utils.figures import live_figure\n"
              "fig = live_figure('Live', 'x', 'y')\nfig.add_scatter(y=[1, 2, 3])\n"
              "box = w.VBox([w.IntSlider(2, description='depth'), fig])\nbox",
              "fig.data[0].y = [4, 5, 6]\nbox.children[0].value = 7  # after it was shown: the deck shows the end",
              "go.Figure(go.Bar(y=[8, 9])).show()"]


def test_a_run_ends_with_snapshots_of_what_the_widgets_show_then(tmp_path):
    source = tmp_path / "live.ipynb"
    nbformat.write(_small_notebook(*LIVE_CELLS), source)
    target = deck.build(source, tmp_path / "out", to="notebook")
    nb = nbformat.read(target, as_version=4)
    widget, figure = nb.cells[1].outputs[0].data, nb.cells[3].outputs[0].data
    assert snapshot.WIDGET_MIME not in widget and "widgets" not in nb.metadata
    assert widget[snapshot.PLOTLY_MIME]["data"][0]["y"] == [4, 5, 6] and "depth: <b>7</b>" in widget["text/html"]
    assert _figure_specs(figure["text/html"])[0]["data"][0]["y"] == [8, 9]
    assert [c.execution_count for c in nb.cells if c.cell_type == "code"] == [1, 2, 3]
    assert target.stat().st_size < 100_000


def test_a_failing_cell_is_named_with_its_error(tmp_path):
    source = tmp_path / "fails.ipynb"
    nbformat.write(_small_notebook("x = 1", "x / 0"), source)
    with pytest.raises(deck.DeckError, match=r"^cell 2 \(x / 0\) failed: ZeroDivisionError: division by zero$"):
        deck.build(source, tmp_path / "out")
    assert not (tmp_path / "out" / "fails.slides.html").exists()


def test_a_notebook_whose_kernel_is_not_installed_says_so(tmp_path):
    nb = _small_notebook("x = 1")
    nb.metadata.kernelspec.name = "no-such-kernel"
    nbformat.write(nb, tmp_path / "elsewhere.ipynb")
    with pytest.raises(deck.DeckError, match="^no kernel ran the notebook .NoSuchKernel: .*no-such-kernel"):
        deck.build(tmp_path / "elsewhere.ipynb", tmp_path / "out")


# ---- in the browser --------------------------------------------------------------------------------------------------

DECK_NOTEBOOK = ROOT / "notebooks" / "00_start_here.ipynb"  # the fastest to run, with a panel and plain figures
PANEL_TITLE = "One token before and after LayerNorm"  # notebook 00's first panel: sliders shift b and scale a


@pytest.fixture(scope="module")
def chromium():
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[test]' brings playwright")
    from browser_support import launch_chromium

    with sync_api.sync_playwright() as p:
        browser = launch_chromium(p)
        yield browser
        browser.close()


def _open_offline(chromium, path):
    """path in a page with the network off: every request not for a file is aborted and recorded in page.tried."""
    context = chromium.new_context(offline=True, viewport={"width": 1366, "height": 768})
    tried = []
    context.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file:")
                  else (tried.append(r.request.url), r.abort()))
    page = context.new_page()
    page.tried = tried
    page.goto(path.as_uri(), timeout=120_000)  # 7.7 MB of HTML and scripts: slow on a busy 2-core machine
    return page


@pytest.mark.browser
@needs_browser
def test_the_deck_runs_offline_with_its_figures_and_maths(tmp_path, chromium):
    from course_utils.demos.start_here import shifted_token

    target = deck.build(DECK_NOTEBOOK, tmp_path)
    page = _open_offline(chromium, target)
    page.wait_for_function("window.Reveal && Reveal.isReady()", timeout=30_000)
    assert page.evaluate("Reveal.getTotalSlides()") >= 5
    page.evaluate("Reveal.next()")
    assert page.evaluate("Reveal.getIndices().h") == 1, "reveal.js did not advance"

    page.evaluate("MathJax.startup.promise")
    assert page.locator("mjx-container").count() >= 10, "MathJax typeset nothing"
    prose = page.evaluate("Array.from(document.querySelectorAll('.jp-MarkdownOutput')).map(e => e.innerText)")
    raw = [m for text in prose for m in re.findall(r"\$[^$\n]+\$", text)]
    assert not raw, f"maths left as raw TeX: {raw[:3]}"

    where = page.evaluate("""title => {
        const figure = Array.from(document.querySelectorAll('.course-snapshot-figure'))
            .find(f => JSON.parse(f.querySelector('script').textContent).layout.title.text === title);
        figure.closest('.course-snapshot').id = 'panel-under-test';
        return Reveal.getIndices(figure.closest('section'));
    }""", PANEL_TITLE)
    box = page.locator("#panel-under-test")
    page.evaluate(f"Reveal.configure({{transition: 'none'}}); Reveal.slide({where['h']}, {where['v'] or 0})")
    plot = box.locator(".js-plotly-plot")
    plot.wait_for(timeout=15_000)
    drawn = plot.evaluate("""g => ({width: g.clientWidth, slide: g.closest('section').clientWidth,
        title: g.querySelector('.gtitle').textContent, ys: g._fullData.map(t => Array.from(t.y)),
        bars: Array.from(g.querySelectorAll('.barlayer .point path')).filter(p => p.getAttribute('d').length > 4).length
        })""")
    assert drawn["title"] == PANEL_TITLE
    assert drawn["width"] > 0.9 * drawn["slide"], f"the figure is {drawn['width']} px of a {drawn['slide']} px slide"
    controls = dict(re.findall(r"(\w+ \w): (\S+)", box.locator(".course-snapshot-controls").inner_text()))
    moved, normed = shifted_token(float(controls["shift b"]), float(controls["scale a"]))
    assert drawn["bars"] == 2 * len(moved), "the bars are not drawn"
    assert drawn["ys"][0] == pytest.approx(moved.tolist(), abs=1e-9)
    assert drawn["ys"][1] == pytest.approx(normed.tolist(), abs=1e-9)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"deck-{DECK_NOTEBOOK.stem}.png"))
    assert page.tried == [], f"the deck tried the network: {page.tried[:5]}"


@pytest.mark.browser
@needs_browser
def test_jupyterlab_draws_the_live_widget_not_its_snapshot(tmp_path, chromium):
    """install() adds HTML and plotly JSON to a widget's output; JupyterLab must still pick the live view."""
    from browser_support import EVERY_CELL, jupyter_lab, open_notebook, run_all_and_wait, until

    with jupyter_lab(tmp_path, EVERY_CELL) as lab:
        nb = _small_notebook("import course_utils.snapshot\ncourse_utils.snapshot.install();", *LIVE_CELLS[:2])
        nbformat.write(nb, lab.home / "root" / "notebooks" / "snapshot_check.ipynb")
        page = chromium.new_page(viewport={"width": 1366, "height": 768})
        open_notebook(page, lab, "snapshot_check.ipynb")
        _, stopped = run_all_and_wait(page, "snapshot_check.ipynb", timeout_s=120, cell_timeout_s=60)
        assert not stopped, stopped
        # The FigureWidget's own view, not its data: a live figure that draws blank is test_browser.py's to catch.
        live = page.locator(".jupyter-widgets .js-plotly-plot .main-svg")
        assert until(lambda: live.count() > 0, timeout_s=60), "no live figure view in the widget area"
        mimes = page.evaluate("""() => {
            const panel = window.jupyterapp.shell.currentWidget;
            return panel.content.model.cells.get(2).toJSON().outputs.map(o => Object.keys(o.data || {}).sort());
        }""")
        assert mimes == [sorted({snapshot.WIDGET_MIME, "text/html", snapshot.PLOTLY_MIME, "text/plain"})]
        assert page.locator(".course-snapshot").count() == 0, "JupyterLab showed the snapshot, not the widget"
        assert page.locator(".widget-slider").count() == 1
        page.close()

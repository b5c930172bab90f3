"""Static snapshots of course widgets, for every place that has the notebook's outputs but no kernel.

A live figure's data lives in the kernel; a saved notebook, a deck or a reading page keeps only the outputs, where a
widget is a model id that nothing can resolve. A snapshot is what the widget shows, written out: each figure as
plotly JSON (drawn wherever plotly.js is on the page, a one-line note elsewhere) and each control's label and value
as text. `install()` makes every widget displayed in a notebook carry one beside its live view; `course_utils.deck`
asks the kernel for fresh ones at the end of a run, when the figures hold the run's numbers.
"""
from __future__ import annotations

import html
import json
import warnings
import weakref
from collections.abc import Iterator

import ipywidgets as widgets
import plotly.io as pio
from plotly.basedatatypes import BaseFigure

from .figures import CONFIG

__all__ = ["WIDGET_MIME", "PLOTLY_MIME", "figure_json", "responsive", "widget_parts", "snapshot", "snapshot_html",
           "figure_html", "install", "bundles"]

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
PLOTLY_MIME = "application/vnd.plotly.v1+json"

# Widgets shown through the installed formatter, by model id: the deck's end-of-run snapshots look them up here.
_SHOWN: weakref.WeakValueDictionary[str, widgets.Widget] = weakref.WeakValueDictionary()

# One small script per snapshot draws its figures once plotly.js is on the page and the figure has a width (a
# hidden reveal.js slide has none until it is shown; plotly would draw it at its default 700 px).
_DRAW = """<script>(function (root) {
  if (!window.Plotly) return;
  root.querySelectorAll(".course-snapshot-figure").forEach(function (box) {
    var spec = JSON.parse(box.querySelector("script").textContent);
    var draw = function () {
      if (box.clientWidth === 0) return false;
      var note = box.querySelector(".course-snapshot-note");
      if (note) note.remove();
      var plot = document.createElement("div");
      box.appendChild(plot);
      Plotly.newPlot(plot, spec.data, spec.layout, spec.config);
      return true;
    };
    if (!draw()) {
      var watch = new ResizeObserver(function () { if (draw()) watch.disconnect(); });
      watch.observe(box);
    }
  });
})(document.currentScript.parentElement);</script>"""


def responsive(spec: dict) -> dict:
    """A plotly JSON spec that follows its container's width: no fixed width, plotly's `responsive` config on."""
    layout = {k: v for k, v in spec.get("layout", {}).items() if k != "width"}
    return {"data": spec.get("data", []), "layout": layout, "config": {**spec.get("config", {}), **CONFIG}}


def figure_json(fig: BaseFigure) -> dict:
    """A figure's current data, layout and config as plain JSON (what plotly.js draws), following its container."""
    spec = json.loads(pio.to_json(fig, validate=False))
    return responsive({**spec, "config": dict(getattr(fig, "_config", None) or {})})


def _hidden(widget: widgets.Widget) -> bool:
    layout = getattr(widget, "layout", None)  # a figure's layout is plotly's, not a widget Layout
    return isinstance(layout, widgets.Layout) and (layout.display == "none" or layout.visibility == "hidden")


def _value_text(control: widgets.ValueWidget) -> str:
    """What a control shows as its value: a choice's label, on/off, a number at a readable precision."""
    if hasattr(control, "options") and hasattr(control, "label"):
        label = control.label
        if isinstance(label, tuple):  # a multiple choice
            return ", ".join(map(str, label))
        return "none chosen" if label is None else str(label)
    value = control.value
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value) if value != "" else "empty"


def widget_parts(widget: widgets.Widget) -> Iterator[tuple]:
    """What a widget tree shows, in page order: ("figure", spec), ("html", markup) and ("control", label, value).

    Hidden widgets, buttons and invisible helpers (figures.PageHelper) show nothing, so they give nothing.
    """
    if _hidden(widget):
        return
    if isinstance(widget, BaseFigure):
        yield "figure", figure_json(widget)
    elif isinstance(widget, widgets.Box):
        for child in widget.children:
            yield from widget_parts(child)
    elif isinstance(widget, (widgets.HTML, widgets.HTMLMath)):
        if widget.value:
            yield "html", widget.value
    elif isinstance(widget, widgets.Label):
        if widget.value:
            yield "html", html.escape(widget.value)
    elif isinstance(widget, (widgets.IntProgress, widgets.FloatProgress)):
        yield "control", widget.description.rstrip(": ") or "progress", f"{widget.value:g} of {widget.max:g}"
    elif isinstance(widget, widgets.ValueWidget):
        yield "control", widget.description.rstrip(": "), _value_text(widget)


def _title(spec: dict) -> str:
    title = spec.get("layout", {}).get("title", {})
    return (title.get("text") if isinstance(title, dict) else title) or ""


def figure_html(spec: dict) -> str:
    """One figure of a snapshot: its JSON (`<` escaped, so it cannot close the script) and the note shown until
    it is drawn."""
    data = json.dumps(spec, separators=(",", ":")).replace("<", "\\u003c")
    title = _title(spec)
    named = f" \u201c{html.escape(title)}\u201d" if title else ""
    note = (f"Figure{named}: rerun the cell to see it live, or read the page that "
            "<code>python -m course_utils.deck --to html</code> builds.")
    return (f'<div class="course-snapshot-figure"><script type="application/json">{data}</script>'
            f'<p class="course-snapshot-note" style="color:#555;font-style:italic">{note}</p></div>')


def _controls_html(controls: list[tuple[str, str]]) -> str:
    items = " &nbsp;\u00b7&nbsp; ".join(f"{html.escape(label)}{': ' if label else ''}<b>{html.escape(value)}</b>"
                                        for label, value in controls)
    return f'<div class="course-snapshot-controls" style="margin:4px 0">{items}</div>'


def snapshot_html(parts: list) -> str:
    """The parts as one HTML block: consecutive controls on one line, then figures and texts in order."""
    pieces, controls = [], []
    for kind, *rest in parts:
        if kind == "control":
            controls.append(tuple(rest))
            continue
        if controls:
            pieces.append(_controls_html(controls))
            controls = []
        pieces.append(figure_html(rest[0]) if kind == "figure" else f"<div>{rest[0]}</div>")
    if controls:
        pieces.append(_controls_html(controls))
    script = _DRAW if any(kind == "figure" for kind, *_ in parts) else ""
    return f'<div class="course-snapshot">{"".join(pieces)}{script}</div>'


def _summary(parts: list) -> str:
    """A one-line plain-text account of the parts, for terminals and text-only viewers."""
    controls = [f"{p[1]} = {p[2]}" if p[1] else p[2] for p in parts if p[0] == "control"]
    titles = [_title(p[1]) or "untitled" for p in parts if p[0] == "figure"]
    text = "A course widget, as the run left it"
    if controls:
        text += ": " + ", ".join(controls)
    if titles:
        text += f"; figure{'s' if len(titles) > 1 else ''}: " + ", ".join(titles)
    return text


def snapshot(widget: widgets.Widget) -> dict:
    """A widget tree's static mimebundle: HTML of all of it, its first figure as plotly JSON, a text summary."""
    parts = list(widget_parts(widget))
    bundle = {"text/html": snapshot_html(parts), "text/plain": _summary(parts)}
    figures = [spec for kind, spec, *_ in parts if kind == "figure"]
    if figures:
        bundle[PLOTLY_MIME] = figures[0]
    return bundle


def _with_snapshot(widget: widgets.Widget) -> dict | None:
    """The widget's own mimebundle (its live view first) with the snapshot beside it."""
    own = getattr(widget, "_repr_mimebundle_", None)  # a closed widget sets it to None
    data = own() if callable(own) else None
    if not data or WIDGET_MIME not in data:
        return data
    _SHOWN[widget.model_id] = widget
    try:
        extra = snapshot(widget)
    except Exception as exc:  # the live widget must show even when its snapshot cannot be made
        warnings.warn(f"course_utils.snapshot: no static copy of this widget ({type(exc).__name__}: {exc}); the "
                      "live widget is unaffected", stacklevel=2)
        return data
    return {**extra, **data}


def install(shell=None) -> bool:
    """Make every ipywidgets widget displayed in this IPython carry its snapshot beside its live view.

    A type printer on IPython's mimebundle formatter is looked up before an object's own `_repr_mimebundle_`, so it
    covers every widget class (plotly's FigureWidget too). JupyterLab still draws the live widget: it ranks the
    widget view's mime type above HTML and plotly JSON. Returns False outside IPython. Installing twice is harmless.
    """
    if shell is None:
        from IPython import get_ipython
        shell = get_ipython()
    if shell is None:
        return False
    shell.display_formatter.mimebundle_formatter.for_type(widgets.Widget, _with_snapshot)
    return True


def bundles(model_ids) -> dict[str, dict]:
    """Fresh snapshots of the displayed widgets with these model ids (those shown since install(), still open)."""
    return {mid: snapshot(_SHOWN[mid]) for mid in model_ids if mid in _SHOWN}

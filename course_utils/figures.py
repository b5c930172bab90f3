"""Plotly figure builders with the course's look: titles, labelled axes, a colour-blind-safe palette. They return
figures; the notebook displays them."""
from __future__ import annotations

import functools
import importlib.util
import math
from copy import deepcopy

import plotly
import plotly.graph_objects as go
import plotly.io as pio
from plotly.subplots import make_subplots

__all__ = ["PALETTE", "DASHES", "MARKERS", "FONT_SIZE", "CONFIG", "LiveFigure", "PageHelper", "live_figure",
           "static_figure", "live_subplots", "static_subplots", "color", "dash", "marker", "log_axis_values"]

# Okabe-Ito: distinguishable under the common colour-vision deficiencies.
PALETTE = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000"]
# Line styles and marker symbols that go with the colours, so conditions differ by more than colour alone (a
# projector washes colours out, and a tenth of men see some of these pairs alike).
DASHES = ["solid", "dash", "dot", "dashdot", "longdash", "longdashdot"]
MARKERS = ["circle", "square", "diamond", "triangle-up", "x", "cross", "star", "triangle-down"]
# Text sizes read from the back of a room: plotly's default 12 px is too small on a projector.
FONT_SIZE = 15
_TITLE_SIZE = 18
# Figures drawn once follow the width of their column (plotly's responsive mode, for the mime renderer); live ones are
# sized by PageHelper. No figure is built with a fixed width.
CONFIG = {"responsive": True, "displaylogo": False}
# The legend sits in its own strip at the bottom of the figure (y measured in the whole figure, not the plot area),
# under the x-axis title, so larger text never runs the two into each other.
_MARGIN = dict(l=60, r=20, t=50, b=90)
_LEGEND = dict(orientation="h", yref="container", y=0, yanchor="bottom", x=0, xanchor="left")
# Subplot titles sit between the figure's title and the plots, so subplot figures start lower.
_SUBPLOT_MARGIN = {**_MARGIN, "t": 80}
_SUBPLOT_LEGEND = _LEGEND


def color(i: int) -> str:
    """The i-th course colour, cycling."""
    return PALETTE[i % len(PALETTE)]


def dash(i: int) -> str:
    """The i-th line style, cycling: pass it with color(i) so each condition has its own colour *and* dash."""
    return DASHES[i % len(DASHES)]


def marker(i: int) -> str:
    """The i-th marker symbol, cycling (for scatter points and lines+markers)."""
    return MARKERS[i % len(MARKERS)]


def log_axis_values(values) -> list:
    """Values for a log axis: zeros (underflow), infinities (overflow), negatives and nan become gaps (None)."""
    return [v if 0 < v < math.inf else None for v in map(float, values)]


_EDIT_TRAITS = ["_py2js_addTraces", "_py2js_deleteTraces", "_py2js_moveTraces", "_py2js_restyle", "_py2js_relayout",
                "_py2js_update", "_py2js_animate", "_py2js_removeLayoutProps", "_py2js_removeTraceProps"]
_VIEW_TRAITS = ["_js2py_layoutDelta", "_js2py_traceDeltas"]
_STATE_TRAITS = ["_widget_data", "_widget_layout", "_last_layout_edit_id", "_last_trace_edit_id"]
# Plain attributes, set in __init__ rather than declared on the class: plotly's own code must still use them.
_STATE_ATTRIBUTES = ["_data", "_layout", "_layout_edit_in_process", "_trace_edit_in_process"]


def _names_in_code(cls: type) -> set[str]:
    """Every attribute name the methods (and properties) defined on cls and its bases read or write."""
    names = set()
    for klass in cls.__mro__:
        for value in vars(klass).values():
            code = getattr(getattr(value, "fget", value), "__code__", None)
            if code is not None:
                names.update(code.co_names)
    return names


def _check_widget_internals(cls: type) -> None:
    """Raise ImportError naming the private FigureWidget names LiveFigure relies on that cls lacks."""
    traits = set(cls.class_trait_names()) if hasattr(cls, "class_trait_names") else set()
    used = _names_in_code(cls)
    missing = ([n for n in _EDIT_TRAITS + _VIEW_TRAITS + _STATE_TRAITS if n not in traits]
               + [n for n in _STATE_ATTRIBUTES if n not in used])
    if missing:
        raise ImportError(f"course_utils.figures.LiveFigure relies on private parts of plotly's FigureWidget that "
                          f"plotly {plotly.__version__} lacks: {', '.join(missing)}. Without them live figures would "
                          f"draw blank. Install the version the course pins (pyproject.toml): pip install "
                          f"plotly==7.1.0, then restart the kernel.")


# Figures drawn once (go.Figure shown through plotly's mime type) get the same config as live ones.
for _name in ("plotly_mimetype", "jupyterlab", "notebook", "notebook_connected", "vscode"):
    _renderer = pio.renderers[_name]
    _renderer.config = {**(_renderer.config or {}), **CONFIG}

if importlib.util.find_spec("anywidget") is not None:  # without it FigureWidget raises its own clear error when built
    _check_widget_internals(go.FigureWidget)


class LiveFigure(go.FigureWidget):
    """A FigureWidget that still draws when it was edited before being displayed.

    With plotly 7.1 and anywidget 0.11, edits made before the first view exists are sent as messages that no view
    receives, and the view later draws an empty figure (checked in a real browser by tests/test_browser.py; reported
    upstream as https://github.com/plotly/plotly.py/issues/4998, whose workaround is to display the figure first).
    Until a view reports back, every edit also refreshes the state a new view starts from. This patches private
    plotly names, so importing this module checks that they all still exist.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._has_view = False
        self.observe(self._view_reported, names=_VIEW_TRAITS)
        self.observe(self._edited, names=_EDIT_TRAITS)

    def _ipython_display_(self):
        """A figure shown on its own sits in a box with its PageHelper, so it fills its column like a panel's."""
        import ipywidgets as widgets
        from IPython.display import display

        box = widgets.VBox([self])
        box.add_class("course-widget")
        box.children += (PageHelper(box),)
        display(box)

    def _view_reported(self, change) -> None:
        if change["new"] is not None:
            self._has_view = True

    def _edited(self, change) -> None:
        if change["new"] is None and not self._has_view:  # the message has gone out; make the start state match
            self._widget_data = deepcopy(self._data)
            self._widget_layout = deepcopy(self._layout)
            self._last_layout_edit_id = self._last_trace_edit_id = 0
            self._layout_edit_in_process = self._trace_edit_in_process = False


_PAGE_HELPER_ESM = r"""
// One helper per course widget (a panel, a quiz). It keeps the keyboard in its widget: the root is marked with
// data-lm-suppress-shortcuts, so JupyterLab's single-key shortcuts (x cuts a cell, a/b insert one) do nothing while
// a course control has the focus, and a key pressed in the widget goes no further than its root (the notebook's own
// ArrowDown handler would otherwise take the focus away from a dropdown).
// It also reports the width of the column each of its live figures sits in (`widths`, in page order), so Python
// sizes them to fill it: plotly's FigureWidget view draws before its element is in the page, cannot measure its
// column and keeps plotly's default 700 px (and its `responsive` mode stopped a figure taking updates in Voila).
// With the widths go the traces each figure drew (`traces`): on a busy machine a view can start from the figure's
// empty opening state and draw nothing, and Python then sends it the figure again.
// And it keeps a figure whose widget module loads late listening (hearLateModules, below).
// anywidget loads this module once per helper (a module of its own each time), so what the helpers know of the page
// lives in one place: a figure that finished drawing before its own cell's helper loaded was still seen drawing by
// an earlier helper's listener (without it, the figure kept plotly's 700 px for 2 s, until the fallback below).
const PAGE = Symbol.for("course.page-helpers");
const shared = globalThis[PAGE] || (globalThis[PAGE] = (() => {
  const page = { drawn: new WeakSet(), seen: new WeakMap(), listeners: new Set() };
  document.addEventListener("plotlywidget-after-render", (event) => {
    if (event.detail && event.detail.element) page.drawn.add(event.detail.element);
    page.listeners.forEach((listener) => listener());
  });
  return page;
})());
const drawn = shared.drawn;  // the figures plotly has finished drawing, on this page
const seen = shared.seen;  // when each figure was first seen
const listeners = shared.listeners;
// anywidget 0.11 rejects a model's `ready` 2 s after the model is made, loaded or not (its Runtime:
// `AbortSignal.timeout(2e3)` ... `reject(new Error("[anywidget] Failed to initialize model."))`), and
// AnyModel._handle_comm_msg awaits `ready` before it handles any message from the kernel: a figure whose 5 MB module
// loads later (a busy machine) then throws away every update, and its slider moves nothing. So a live figure's
// message that meets that rejection is held instead, after the ones before it, until the figure's module has loaded
// (its initialize has attached plotly's listeners, with anywidget's marker as their context), and then handled as
// anywidget would have handled it (by the method AnyModel's own calls once `ready`). The kernel's other messages go
// on meanwhile. Patching AnyModel's method covers models made from now on; a figure made before (before the page's
// first helper loaded) is re-hooked, but the messages it already threw away are gone: while it has no view Python
// keeps resending its full opening state with each edit (LiveFigure), and a view that still draws nothing is sent
// the figure again (`traces`, above).
const TIMED_OUT = "[anywidget] Failed to initialize model.";
const PATCHED = Symbol.for("course.hears-late-modules");  // Symbol.for: each helper's copy of this module shares it
const HELD = Symbol.for("course.held-messages");
const HOOKED = Symbol.for("course.rehooked");
const isFigure = (m) => m.attributes && "_py2js_restyle" in m.attributes;
const initialized = (m) => Object.values(m._events || {}).some((handlers) => handlers.some((h) =>
  typeof h.context === "symbol" && h.context.description === "anywidget.initialize"));
const loaded = (m) => new Promise((resolve) => {
  const start = performance.now();
  // after 2 min (a module that failed) the messages still reach the model's state
  const look = () => (initialized(m) || performance.now() - start > 120000 ? resolve() : setTimeout(look, 50));
  look();
});
function hold(model, handle, msg) {
  // errors are ipywidgets' to report (it logs a message it cannot apply); the next message still goes
  model[HELD] = (model[HELD] || loaded(model)).then(() => handle.apply(model, msg)).catch(() => {});
}
function patch(proto) {
  if (proto[PATCHED]) return;
  proto[PATCHED] = true;
  const original = proto._handle_comm_msg;
  const handle = Object.getPrototypeOf(proto)._handle_comm_msg;  // what anywidget calls once `ready`
  proto._handle_comm_msg = function (...msg) {
    if (this[HELD]) return hold(this, handle, msg);
    return original.apply(this, msg).catch((error) => {
      if (!(error instanceof Error) || error.message !== TIMED_OUT || !isFigure(this)) throw error;
      console.warn("[course] a figure's widget module took over anywidget's 2 s to load: its updates wait for it");
      return hold(this, handle, msg);
    });
  };
}
function hearLateModules(manager) {
  Object.values((manager && manager._models) || {}).forEach((promise) => Promise.resolve(promise).then((m) => {
    if (!m || m.constructor.model_name !== "AnyModel") return;
    patch(m.constructor.prototype);
    // a model's comm calls the method the model was made with: hand it the patched one
    if (isFigure(m) && m.comm && !m[HOOKED]) {
      m[HOOKED] = true;
      m.comm.on_msg(m._handle_comm_msg.bind(m));
    }
  }, () => {}));
}
function initialize({ model }) {
  hearLateModules(model.widget_manager);
}
function render({ model, el }) {
  el.style.display = "none";
  let tries = 0;
  const attach = () => {
    const root = el.closest(".course-widget");
    if (!root) {
      if (tries++ < 200) requestAnimationFrame(attach);
      return;
    }
    root.setAttribute("data-lm-suppress-shortcuts", "true");
    root.addEventListener("keydown", (event) => { if (event.key !== "Escape") event.stopPropagation(); });
    let pending = null;
    const report = () => {
      pending = null;
      // a figure still drawing reports 0 (Python leaves it alone): an edit that reaches it mid-draw can blank it
      // (one drawn before this helper's code ran is taken as drawn once it has been in the page for 2 s)
      const plots = Array.from(root.querySelectorAll(".js-plotly-plot"));
      const now = performance.now();
      plots.forEach((plot) => { if (!seen.has(plot)) { seen.set(plot, now); setTimeout(later, 2100); } });
      const done = (plot) => drawn.has(plot) || now - seen.get(plot) > 2000;
      const widths = plots.map((plot) => (done(plot) ? Math.round(plot.getBoundingClientRect().width) : 0));
      const traces = plots.map((plot) => (done(plot) ? (plot.data || []).length : -1));
      if (widths.some((w) => w > 0) && JSON.stringify([widths, traces]) !==
          JSON.stringify([model.get("widths"), model.get("traces")])) {
        model.set("traces", traces);
        model.set("widths", widths);
        model.save_changes();
      }
    };
    const later = () => {
      // out of the page (its output cleared, or its cell taken out by JupyterLab's windowing): not listening until
      // it is back (the observers below call this again when it is)
      if (!root.isConnected) { listeners.delete(later); return; }
      listeners.add(later);
      if (pending === null) pending = setTimeout(report, 80);
    };
    const observer = new ResizeObserver(later);
    observer.observe(root);
    // figures appear after the helper (each draws when its module has loaded): look again as they do
    new MutationObserver(() => {
      root.querySelectorAll(".js-plotly-plot").forEach((plot) => observer.observe(plot));
      later();
    }).observe(root, { childList: true, subtree: true });
    later();
  };
  attach();
}
export default { initialize, render };
"""


@functools.cache
def _page_helper_class() -> type:
    import anywidget  # imported when the first helper is built: without anywidget, FigureWidget says what to install
    import traitlets

    class PageHelper(anywidget.AnyWidget):
        _esm = _PAGE_HELPER_ESM
        widths = traitlets.List(traitlets.Int()).tag(sync=True)  # each live figure's column, in page order
        traces = traitlets.List(traitlets.Int()).tag(sync=True)  # how many traces each one drew

    return PageHelper


def PageHelper(root=None):  # noqa: N802 - used like the widget class it builds
    """The invisible front-end helper of a course widget: put one inside a widget whose root has the DOM class
    `course-widget` (Panel and the quiz widget do), and pass that root. While a control in it has the keyboard,
    JupyterLab's shortcuts stay off; its live figures are sized to the columns they sit in, whatever the window; and
    a live figure whose widget module loads past anywidget's 2 s still takes every update (held until it has loaded)."""
    helper = _page_helper_class()()
    if root is not None:
        helper.observe(lambda change: fit_figures(root, change["new"], helper.traces), names="widths")
    return helper


def _live_figures(widget) -> list:
    """The LiveFigures in a widget tree, in page order."""
    if isinstance(widget, go.FigureWidget):
        return [widget]
    return [f for child in getattr(widget, "children", ()) for f in _live_figures(child)]


def fit_figures(root, widths: list[int], traces: list[int] | None = None) -> None:
    """Give each live figure in root the width of its column (as the page measured it); a figure whose width was set
    on purpose (not by this function) keeps it. A figure whose view drew none of its traces gets them sent again."""
    figures = _live_figures(root)
    for fig, drawn in zip(figures, traces or []):
        if drawn == 0 and len(fig.data) and not getattr(fig, "_resent", False):
            fig._resent = True  # once: a figure with no traces on purpose would otherwise be sent forever
            fig._send_addTraces_msg([trace.to_plotly_json() for trace in fig.data])
            fig._send_relayout_msg(fig.layout.to_plotly_json())
    for fig, width in zip(figures, widths):
        if width > 50 and fig.layout.width in (None, getattr(fig, "_fitted_width", None)):
            fig.layout.width = fig._fitted_width = width


def _course_look(fig: go.Figure, title: str, *, height: int, width: int | None, margin: dict | None,
                 legend: dict | None, subplots: bool = False) -> go.Figure:
    """fig with the course's title, size, fonts, template, palette, margins and legend; margin and legend override
    keys. Axes make room for their own tick labels and titles (automargin), so a long tick label never runs into its
    axis title; a plain go.Figure gets the responsive config when it is shown (`fig.show(config=CONFIG)` is not
    needed: the template sets nothing of config, so static figures carry it in `_config` too)."""
    base_margin, base_legend = (_SUBPLOT_MARGIN, _SUBPLOT_LEGEND) if subplots else (_MARGIN, _LEGEND)
    fig.update_layout(title=dict(text=title, font=dict(size=_TITLE_SIZE)), height=height, width=width,
                      template="plotly_white", colorway=PALETTE, font=dict(size=FONT_SIZE),
                      margin={**base_margin, **(margin or {})}, legend={**base_legend, **(legend or {})})
    # ticklabeloverflow "allow": plotly's default ("hide past div") measures every tick label on every redraw to hide
    # those past the figure's edge, which automargin already keeps inside; 2-11% of a redraw (benchmarks/PLOTLY.md).
    fig.update_xaxes(automargin=True, ticklabeloverflow="allow")
    fig.update_yaxes(automargin=True, ticklabeloverflow="allow")
    fig.update_annotations(font_size=FONT_SIZE + 1)  # subplot titles
    return fig


def _one_plot(fig: go.Figure, title: str, xaxis: str, yaxis: str, log_x: bool, log_y: bool, **look) -> go.Figure:
    _course_look(fig, title, **look)
    fig.update_xaxes(title_text=xaxis, type="log" if log_x else None)
    fig.update_yaxes(title_text=yaxis, type="log" if log_y else None)
    return fig


def live_figure(title: str, xaxis: str, yaxis: str, *, log_x: bool = False, log_y: bool = False, height: int = 360,
                width: int | None = None, margin: dict | None = None, legend: dict | None = None) -> LiveFigure:
    """An empty LiveFigure with a title, axis labels and the course look; margin and legend override single keys."""
    return _one_plot(LiveFigure(), title, xaxis, yaxis, log_x, log_y, height=height, width=width, margin=margin,
                     legend=legend)


def static_figure(title: str, xaxis: str, yaxis: str, *, log_x: bool = False, log_y: bool = False,
                  height: int = 360, width: int | None = None, margin: dict | None = None,
                  legend: dict | None = None) -> go.Figure:
    """live_figure's plain go.Figure twin, for figures drawn once."""
    return _one_plot(go.Figure(), title, xaxis, yaxis, log_x, log_y, height=height, width=width, margin=margin,
                     legend=legend)


def live_subplots(rows: int, cols: int, title: str, *, height: int = 380, width: int | None = None,
                  margin: dict | None = None, legend: dict | None = None, **options) -> LiveFigure:
    """A LiveFigure of make_subplots(rows, cols, **options) (subplot_titles, spacing, shared axes) with the course
    look; label each subplot's axes with update_xaxes/update_yaxes(row=, col=)."""
    return _course_look(LiveFigure(make_subplots(rows=rows, cols=cols, **options)), title, height=height,
                        width=width, margin=margin, legend=legend, subplots=True)


def static_subplots(rows: int, cols: int, title: str, *, height: int = 380, width: int | None = None,
                    margin: dict | None = None, legend: dict | None = None, **options) -> go.Figure:
    """live_subplots' plain go.Figure twin, for figures drawn once."""
    return _course_look(make_subplots(rows=rows, cols=cols, **options), title, height=height, width=width,
                        margin=margin, legend=legend, subplots=True)

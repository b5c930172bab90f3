"""Plotly figure builders with the course's look: titles, labelled axes, a colour-blind-safe palette. They return
figures; the notebook displays them."""
from __future__ import annotations

import importlib.util
import math
from copy import deepcopy

import plotly
import plotly.graph_objects as go
from plotly.subplots import make_subplots

__all__ = ["PALETTE", "LiveFigure", "live_figure", "static_figure", "live_subplots", "static_subplots", "color",
           "log_axis_values"]

# Okabe-Ito: distinguishable under the common colour-vision deficiencies.
PALETTE = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000"]
_MARGIN = dict(l=60, r=20, t=50, b=50)
_LEGEND = dict(orientation="h", y=-0.2)
# Subplot titles sit between the figure's title and the plots, so subplot figures start lower and so does the legend.
_SUBPLOT_MARGIN = {**_MARGIN, "t": 80}
_SUBPLOT_LEGEND = {**_LEGEND, "y": -0.25}


def color(i: int) -> str:
    """The i-th course colour, cycling."""
    return PALETTE[i % len(PALETTE)]


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

    def _view_reported(self, change) -> None:
        if change["new"] is not None:
            self._has_view = True

    def _edited(self, change) -> None:
        if change["new"] is None and not self._has_view:  # the message has gone out; make the start state match
            self._widget_data = deepcopy(self._data)
            self._widget_layout = deepcopy(self._layout)
            self._last_layout_edit_id = self._last_trace_edit_id = 0
            self._layout_edit_in_process = self._trace_edit_in_process = False


def _course_look(fig: go.Figure, title: str, *, height: int, width: int | None, margin: dict | None,
                 legend: dict | None, subplots: bool = False) -> go.Figure:
    """fig with the course's title, size, template, palette, margins and legend; margin and legend override keys."""
    base_margin, base_legend = (_SUBPLOT_MARGIN, _SUBPLOT_LEGEND) if subplots else (_MARGIN, _LEGEND)
    fig.update_layout(title=title, height=height, width=width, template="plotly_white", colorway=PALETTE,
                      margin={**base_margin, **(margin or {})}, legend={**base_legend, **(legend or {})})
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

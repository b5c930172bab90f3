"""Plotly figure builders with the course's look: titles, labelled axes, a colour-blind-safe palette. They return
figures; the notebook displays them."""
from __future__ import annotations

from copy import deepcopy

import plotly.graph_objects as go

__all__ = ["PALETTE", "LiveFigure", "live_figure", "color"]

# Okabe-Ito: distinguishable under the common colour-vision deficiencies.
PALETTE = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000"]


def color(i: int) -> str:
    """The i-th course colour, cycling."""
    return PALETTE[i % len(PALETTE)]


_EDIT_TRAITS = ["_py2js_addTraces", "_py2js_deleteTraces", "_py2js_moveTraces", "_py2js_restyle", "_py2js_relayout",
                "_py2js_update", "_py2js_animate", "_py2js_removeLayoutProps", "_py2js_removeTraceProps"]


class LiveFigure(go.FigureWidget):
    """A FigureWidget that still draws when it was edited before being displayed.

    With plotly 7.1 and anywidget 0.11, edits made before the first view exists are sent as messages that no view
    receives, and the view later draws an empty figure (checked in a real browser by tests/test_browser.py). Until a
    view reports back, every edit also refreshes the state a new view starts from.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._has_view = False
        self.observe(self._view_reported, names=["_js2py_layoutDelta", "_js2py_traceDeltas"])
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


def live_figure(title: str, xaxis: str, yaxis: str, *, log_x: bool = False, log_y: bool = False,
                height: int = 360, width: int | None = None, widget: bool = True) -> go.Figure:
    """An empty LiveFigure (or plain Figure with widget=False) with a title, axis labels and the course template."""
    fig = (LiveFigure if widget else go.Figure)()
    fig.update_layout(title=title, height=height, width=width, template="plotly_white", colorway=PALETTE,
                      margin=dict(l=60, r=20, t=50, b=50), legend=dict(orientation="h", y=-0.2))
    fig.update_xaxes(title_text=xaxis, type="log" if log_x else None)
    fig.update_yaxes(title_text=yaxis, type="log" if log_y else None)
    return fig

"""Plotly figure builders with the course's look: titles, labelled axes, a colour-blind-safe palette. They return
figures; the notebook displays them."""
from __future__ import annotations

import plotly.graph_objects as go

__all__ = ["PALETTE", "live_figure", "color"]

# Okabe-Ito: distinguishable under the common colour-vision deficiencies.
PALETTE = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000"]


def color(i: int) -> str:
    """The i-th course colour, cycling."""
    return PALETTE[i % len(PALETTE)]


def live_figure(title: str, xaxis: str, yaxis: str, *, log_x: bool = False, log_y: bool = False,
                height: int = 360, width: int | None = None, widget: bool = True) -> go.Figure:
    """An empty FigureWidget (or plain Figure with widget=False) with a title, axis labels and the course template."""
    fig = (go.FigureWidget if widget else go.Figure)()
    fig.update_layout(title=title, height=height, width=width, template="plotly_white", colorway=PALETTE,
                      margin=dict(l=60, r=20, t=50, b=50), legend=dict(orientation="h", y=-0.2))
    fig.update_xaxes(title_text=xaxis, type="log" if log_x else None)
    fig.update_yaxes(title_text=yaxis, type="log" if log_y else None)
    return fig

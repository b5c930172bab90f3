"""The course look in one place, and LiveFigure's fix for figures edited before they are displayed (no browser)."""
import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
import pytest

from course_utils import figures
from course_utils.figures import (PALETTE, LiveFigure, live_figure, live_subplots, log_axis_values, static_figure,
                                  static_subplots)


def _edit_before_display(fig):
    measured = fig.add_scatter(x=[1, 2], y=[3, 4], name="measured").data[-1]
    fig.add_bar(x=[1], y=[2], name="bars")
    measured.update(y=[5, 6])  # restyle
    fig.update_traces(marker_color="red", selector=dict(name="bars"))
    fig.update_layout(title="edited", height=300)  # relayout
    return fig


def test_a_new_view_starts_from_the_edited_figure():
    fig = _edit_before_display(LiveFigure())
    state = fig.to_dict()
    assert fig._widget_data == state["data"] and fig._widget_layout == state["layout"]
    assert fig._widget_data[0]["y"] == [5, 6] and fig._widget_layout["title"] == {"text": "edited"}


def test_a_plain_figure_widget_still_needs_the_fix():
    fig = _edit_before_display(go.FigureWidget())
    assert fig._widget_data != fig.to_dict()["data"], "plotly syncs edits before display now: LiveFigure can go"


def test_the_installed_plotly_has_every_private_name_live_figure_uses():
    figures._check_widget_internals(go.FigureWidget)


def test_a_missing_private_name_fails_the_import_check_with_the_fix(monkeypatch):
    class RenamedTrait(go.FigureWidget):
        _py2js_restyle = None  # no longer a trait, as if plotly had renamed it

    with pytest.raises(ImportError, match=r"_py2js_restyle.*plotly==7\.1\.0"):
        figures._check_widget_internals(RenamedTrait)
    monkeypatch.setattr(figures, "_STATE_ATTRIBUTES", [*figures._STATE_ATTRIBUTES, "_gone_in_a_later_plotly"])
    with pytest.raises(ImportError, match="_gone_in_a_later_plotly"):
        figures._check_widget_internals(go.FigureWidget)


def test_every_builder_applies_the_course_look():
    built = [live_figure("t", "x", "y"), static_figure("t", "x", "y"),
             live_subplots(1, 2, "t", subplot_titles=("a", "b")), static_subplots(2, 1, "t")]
    assert [isinstance(f, LiveFigure) for f in built] == [True, False, True, False]
    for fig in built:
        assert fig.layout.title.text == "t" and list(fig.layout.colorway) == PALETTE
        assert fig.layout.template.to_plotly_json() == pio.templates["plotly_white"].to_plotly_json()
    one, grid = built[0].layout, built[2].layout
    assert (one.margin.t, one.legend.yref, one.legend.y, one.height) == (50, "container", 0, 360)
    assert (grid.margin.t, grid.legend.yref, grid.height) == (80, "container", 380)
    assert [a.text for a in grid.annotations] == ["a", "b"]
    for fig in built:  # a figure follows its column: no fixed width, text sized for a room, axes make their own room
        assert fig.layout.width is None and fig.layout.font.size == figures.FONT_SIZE > 12
        assert all(axis.automargin for axis in fig.select_xaxes()) and all(a.automargin for a in fig.select_yaxes())


def test_live_figures_take_the_width_their_column_reports_and_shown_figures_are_responsive():
    import ipywidgets as widgets
    fitted, fixed = live_figure("t", "x", "y"), live_figure("t", "x", "y", width=480)
    root = widgets.VBox([widgets.HBox([fitted]), fixed])
    helper = figures.PageHelper(root)
    helper.widths = [934, 934]  # as the page reports them, in page order
    assert (fitted.layout.width, fixed.layout.width) == (934, 480)  # a width set on purpose stays
    helper.widths = [1488, 1488]  # the window grew
    assert fitted.layout.width == 1488
    helper.widths = [0, 0]  # hidden (a folded slide): nothing changes
    assert fitted.layout.width == 1488


def test_a_view_that_drew_nothing_is_sent_its_figure_again_once(monkeypatch):
    import ipywidgets as widgets
    fig = live_figure("t", "x", "y")
    fig.add_scatter(y=[1, 2, 3])
    root = widgets.VBox([fig])
    sent, layouts = [], []
    monkeypatch.setattr(fig, "_send_addTraces_msg", lambda traces: sent.append(traces))
    monkeypatch.setattr(fig, "_send_relayout_msg", lambda layout, **_: layouts.append(layout))
    figures.fit_figures(root, [900], traces=[1])  # drew its trace: nothing to resend, only the width
    assert sent == [] and layouts == [{"width": 900}]
    figures.fit_figures(root, [900], traces=[0])  # a busy page's view started from the empty opening state
    assert list(sent[0][0]["y"]) == [1, 2, 3] and layouts[1]["title"]["text"] == "t"
    figures.fit_figures(root, [901], traces=[0])
    assert len(sent) == 1  # once only


def test_a_live_figure_shown_alone_gets_its_helper(monkeypatch):
    import IPython.display
    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda obj: shown.append(obj))
    fig = live_figure("t", "x", "y")
    fig._ipython_display_()
    box = shown[0]
    assert box.children[0] is fig and type(box.children[1]).__name__ == "PageHelper"
    assert "course-widget" in box._dom_classes
    bundle = pio.renderers["plotly_mimetype"].to_mimebundle(static_figure("t", "x", "y").to_dict())
    assert bundle["application/vnd.plotly.v1+json"]["config"]["responsive"] is True


def test_every_condition_can_differ_by_more_than_colour():
    styles = {(figures.color(i), figures.dash(i), figures.marker(i)) for i in range(6)}
    assert len(styles) == 6 and len({figures.dash(i) for i in range(6)}) == 6


def test_margin_and_legend_override_single_keys_and_axes_are_labelled():
    fig = static_figure("t", "steps", "loss", log_y=True, height=420, margin=dict(b=120), legend=dict(y=0.1))
    assert (fig.layout.margin.l, fig.layout.margin.b, fig.layout.legend.orientation, fig.layout.legend.y) == (
        60, 120, "h", 0.1)
    assert fig.layout.xaxis.title.text == "steps" and fig.layout.yaxis.type == "log" and fig.layout.height == 420


def test_log_axis_values_leave_gaps_where_a_log_axis_cannot_draw():
    values = np.array([2.0, 0.0, np.inf, -1.0, np.nan, 1e-300])
    assert log_axis_values(values) == [2.0, None, None, None, None, 1e-300]
    assert log_axis_values([]) == []

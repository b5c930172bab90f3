"""Notebook 03's demos (course_utils.demos.layernorm) and parse_features, the panels' typed-numbers parser."""
import pytest
import torch
import torch.nn.functional as F

from course_utils.demos import layernorm as ln_demo
from course_utils.panel import PANELS, build_panel, parse_features


def test_token_panel_refuses_an_unknown_formula_and_one_feature_unbiased():
    panel = build_panel("token_panel")
    with pytest.raises(ValueError, match="formula"):
        panel.update(**{**panel.values(), "formula": "nope"})
    assert not panel.set(features="7", formula="unbiased")
    assert "d - 1 = 0" in panel.last_error


@pytest.mark.parametrize("text, expected", [("1, 2, 3, 4", [1, 2, 3, 4]), ("  -1.5e1 2;3 ", [-15, 2, 3]),
                                            ("1,,2", [1, 2]), ("7", [7])])
def test_parse_features_accepts(text, expected):
    assert parse_features(text) == expected


@pytest.mark.parametrize("text, message", [("", "Type"), ("1, two", "'two' is not a number"), ("nan", "not a number"),
                                           ("1e7", "between"), (",".join(["1"] * 33), "more than")])
def test_parse_features_refuses_with_a_reason(text, message):
    with pytest.raises(ValueError, match=message):
        parse_features(text)


def test_the_panels_are_registered_for_their_notebooks():
    """tests/test_panel.py sweeps every registered panel (these draw every setting); latency: course_utils.bench."""
    assert (PANELS["token_panel"][0], PANELS["ln_vs_rms_panel"][0]) == ("03_layernorm", "05_rmsnorm")


def test_token_panel_shows_the_steps_and_the_reference():
    panel = build_panel("token_panel")
    readout, fig = panel.outputs
    assert "μ = 2.5" in readout.value and "σ² = 1.25" in readout.value and "matches F.layer_norm" in readout.value
    assert panel.set(scale=2.0, shift=5.0)
    x_hat = next(fig.select_traces(selector=dict(name="x̂")))
    torch.testing.assert_close(torch.tensor(x_hat.y), F.layer_norm(torch.tensor([1.0, 2, 3, 4]), (4,)),
                               atol=1e-4, rtol=0)
    assert panel.set(scale=1.0, shift=0.0, formula="unbiased")
    assert "σ² = 1.667" in readout.value and "differs from F.layer_norm" in readout.value
    assert panel.set(formula="correct", features="3, 3, 3")
    assert "σ² = 0" in readout.value


@pytest.mark.parametrize("setting", [dict(features="1, x"), dict(features=""), dict(features="5", formula="unbiased"),
                                     dict(features="1e9")])
def test_token_panel_nonsense_shows_a_message(setting):
    panel = build_panel("token_panel")
    inputs = next(panel.outputs[1].select_traces(selector=dict(name="input features")))
    before = inputs.y
    assert panel.set(**setting) is False
    assert panel.last_error and panel.message.value
    assert inputs.y == before  # the figure keeps its last good state
    assert panel.set(features="1, 2, 3, 4", formula="correct") and not panel.message.value


def test_static_figures_have_titles_and_axis_labels():
    figs = [ln_demo.pitfall_figure([2, 4], [0.3, 0.1], [1e-6, 1e-6], [1e-3, 1.0], [2.0, 1e-6], [0.1, 0.1]),
            ln_demo.invariance_figure([1e-3, 1.0], [0.5, 1e-7], 1e-5)]
    for fig in figs:
        assert fig.layout.title.text
        assert all(ax.title.text for ax in (fig.layout.xaxis, fig.layout.yaxis))

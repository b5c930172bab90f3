"""Notebook 01's demos (course_utils.demos.why_normalize) and the residual stacks below them (course_utils.residual)."""
import math

import ipywidgets as widgets
import pytest
import torch
import torch.nn.functional as F

from course_utils import residual
from course_utils.course import lesson_functions
from course_utils.demos import why_normalize as wn
from course_utils.panel import PANELS

residual_stack = lesson_functions("01_why_normalize")["residual_stack"]  # the notebook's own loop, as the panels get it


def test_the_panels_are_registered_for_notebook_01():
    """tests/test_panel.py sweeps every registered panel; these must be among them."""
    names = ["residual_growth_panel", "gradient_panel", "histogram_panel", "covariate_shift_demo"]
    assert {PANELS[name][0] for name in names} == {"01_why_normalize"}


def test_the_stacks_names_have_one_home():
    """Notebook 01 imports them from course_utils.residual; the demos module exports only what it defines."""
    assert not set(wn.__all__) & set(residual.__all__)
    assert all(getattr(wn, name).__module__ == wn.__name__ for name in wn.__all__ if callable(getattr(wn, name)))


def test_growth_panel_draws_the_requested_depth_and_law():
    panel = wn.residual_growth_panel(residual_stack)
    assert panel.set(depth=10, gain=2.0, contributions="aligned", sublayer="fixed size", norm="off")
    fig = panel.outputs[1]
    assert list(fig.data[1].x) == list(range(11))
    assert fig.data[1].y[-1] == pytest.approx(math.sqrt(fig.data[1].y[0] ** 2 + 20 ** 2), rel=0.05)
    assert "like L" in fig.data[2].name
    assert panel.set(depth=200, gain=10.0, contributions="aligned", sublayer="amplifies its input", norm="off")
    assert fig.data[3].visible and fig.data[4].visible  # float16 and float32 limits are crossed
    assert all(v is None or math.isfinite(v) for v in fig.data[1].y)
    assert "float16" in panel.outputs[0].value


def test_growth_panel_extends_a_cached_stack_consistently():
    panel = wn.residual_growth_panel(residual_stack)
    panel.set(depth=30, norm="Pre-LN")
    short = list(panel.outputs[1].data[1].y)
    panel.set(depth=80, norm="Pre-LN")
    longer = list(panel.outputs[1].data[1].y)
    fresh = wn.growth_curve(residual_stack, "amplifies its input", "independent", "Pre-LN", 1.0, depth=80)
    assert longer[:31] == pytest.approx(short, rel=1e-12)
    assert longer == pytest.approx(fresh.tolist(), rel=1e-9)


def test_panels_show_a_message_for_nonsense_instead_of_raising():
    growth = wn.residual_growth_panel(residual_stack)
    growth.controls["depth"] = widgets.IntText(value=500)  # a value the slider cannot reach
    assert growth.refresh() is False and "depth" in growth.last_error
    gradients = wn.gradient_panel(residual_stack)
    gradients.controls["gain"] = widgets.FloatText(value=-1.0)
    assert gradients.refresh() is False and "gain" in gradients.last_error
    histograms = wn.histogram_panel(residual_stack)
    histograms.controls["norm"] = widgets.Text(value="BatchNorm")
    assert histograms.refresh() is False and "normalization" in histograms.last_error


def test_gradient_panel_reports_vanishing_and_exploding():
    panel = wn.gradient_panel(residual_stack)
    assert panel.set(depth=100, gain=0.2, residual=False, norm="off")
    assert "vanish" in panel.outputs[0].value
    assert panel.set(depth=100, gain=1.0, residual=True, norm="off")
    assert "exploding" in panel.outputs[0].value


def test_feed_forward_sublayer_preserves_the_mean_square_norm():
    f = residual.ffn(64, torch.Generator().manual_seed(0))
    x = torch.randn(4000, 64, dtype=torch.float64)
    ratio = (f(x).pow(2).sum(-1).mean() / x.pow(2).sum(-1).mean()).item()
    assert ratio == pytest.approx(1.0, abs=0.15)


@pytest.mark.parametrize("sublayer,contributions,norm", [
    ("fixed size", "aligned", "off"), ("amplifies its input", "aligned", "off"),
    ("amplifies its input", "aligned", "Pre-LN"), ("fixed size", "independent", "Post-LN")])
def test_the_law_matches_the_deterministic_cases(sublayer, contributions, norm):
    measured = wn.growth_curve(residual_stack, sublayer, contributions, norm, 0.5, depth=60)
    law, _ = wn.predicted_norm(60, 0.5, sublayer, contributions, norm, float(measured[0]))
    assert measured[-1] == pytest.approx(law[-1], rel=0.06)


def test_vector_norm_survives_huge_and_special_values():
    x = torch.tensor([[3e200, 4e200], [0.0, 0.0], [math.inf, 1.0]], dtype=torch.float64)
    out = residual.vector_norm(x)
    assert out[0].item() == pytest.approx(5e200) and out[1].item() == 0.0 and out[2].item() == math.inf


@pytest.mark.parametrize("norm,skip", [("off", True), ("Pre-LN", True), ("Post-LN", True), ("off", False),
                                       ("Post-LN", False)])
def test_backward_through_stack_matches_autograd_on_the_stack_written_out(norm, skip):
    out = wn.backward_through_stack(residual_stack, 6, norm, 0.7, skip, n_tokens=3, seed=3)
    layers = residual.make_sublayers("amplifies its input", "independent", 6, residual.D_MODEL, 3)
    last = layers[-1][2]
    last.weight.requires_grad_(True)
    x0 = residual.stream_tokens(3, residual.D_MODEL, 4).requires_grad_(True)
    r = residual.stream_tokens(1, residual.D_MODEL, 5)[0] / math.sqrt(residual.D_MODEL)
    x, d = x0, (residual.D_MODEL,)
    for f in layers:
        h = x if skip else 0.0
        x = (F.layer_norm(h + 0.7 * f(x), d) if norm == "Post-LN" else
             h + 0.7 * f(F.layer_norm(x, d) if norm == "Pre-LN" else x))
    grad_x0, grad_w = torch.autograd.grad((x @ r).mean(), [x0, last.weight])
    torch.testing.assert_close(out["grad_x"][0], grad_x0)
    assert out["grad_w"][-1].item() == pytest.approx(grad_w.norm().item(), rel=1e-10)


def test_layer_histograms_are_fractions_and_normalization_holds_the_scale():
    off, post = wn.layer_histograms(residual_stack, "off", 1.0), wn.layer_histograms(residual_stack, "Post-LN", 1.0)
    for h in (off, post):
        assert h["activations"].shape == (len(wn.HIST_LAYERS), len(wn.HIST_BINS) - 1)
        assert ((h["activations"].sum(1) > 0.99) & (h["activations"].sum(1) <= 1 + 1e-12)).all()
    assert off["activations_rms"][-1] > 1e4 * off["activations_rms"][0]
    assert abs(post["activations_rms"][1:] - 1).max() < 1e-3


def test_train_shift_run_records_and_rejects():
    record = wn.train_shift_run("BatchNorm", steps=10, every=5)
    assert record["steps"] == [0, 5, 10] and len(record["loss"]) == 10
    assert record["quantiles"].shape == (3, 3, 8) and math.isfinite(record["spread_drift"])
    with pytest.raises(ValueError):
        wn.train_shift_run("LayerNorm")
    with pytest.raises(ValueError):
        wn.train_shift_run("none", steps=0)


def test_covariate_shift_demo_runs_synchronously():
    demo = wn.covariate_shift_demo(steps=20)
    records = demo.run(background=False)
    assert records is demo.result and set(records) == set(wn.SHIFT_NORMS)
    assert "mean over 8 units" in demo.summary.value and all(r["units"] == 8 for r in records.values())
    assert len(demo.fig.data[0].y) == 20 and "spread drift" in demo.summary.value.lower()

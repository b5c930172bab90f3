"""Notebook 03's demos (course_utils.demos.layernorm) and parse_features, the panels' typed-numbers parser."""
import math

import ipywidgets as widgets
import pytest
import torch
import torch.nn.functional as F

from course_utils.bench import load_panels
from course_utils.course import lesson_functions
from course_utils.demos import layernorm as ln_demo
from course_utils.evidence import EXPERIMENTS
from course_utils.panel import build_panel, parse_features

CLAIMS_03 = ("C15", "C16", "C17", "C18", "C19", "C20", "C62", "C63", "C64", "C65")


def _lessons():
    return lesson_functions("03_layernorm")


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
    panels = load_panels()  # every demos module imported, so this test also passes alone
    assert (panels["token_panel"][0], panels["sphere_panel"][0], panels["ln_vs_rms_panel"][0]) == (
        "03_layernorm", "03_layernorm", "05_rmsnorm")


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


# ---- the plane-and-sphere panel -------------------------------------------------------------------------------------

def _point(fig, name):
    trace = next(fig.select_traces(selector=dict(name=name)))
    return torch.tensor([trace.x[0], trace.y[0], trace.z[0]], dtype=torch.float64)


def test_sphere_panel_shift_moves_only_the_token_and_scale_leaves_the_output():
    panel = build_panel("sphere_panel")
    readout, fig = panel.outputs
    start = {n: _point(fig, n) for n in ("token a·x + b", "x − μ1 (on the plane)", "LN(x) (on the circle)")}
    out = start["LN(x) (on the circle)"]
    assert abs(out.norm().item() - math.sqrt(3)) < 1e-4 and abs(out.sum().item()) < 1e-9
    assert "|LN(x)| = 1.732" in readout.value
    assert panel.set(shift=2.0)
    moved = _point(fig, "token a·x + b") - start["token a·x + b"]
    torch.testing.assert_close(moved, torch.full((3,), 2.0, dtype=torch.float64))  # along 1
    torch.testing.assert_close(_point(fig, "x − μ1 (on the plane)"), start["x − μ1 (on the plane)"])
    assert panel.set(shift=0.0, scale=2.0)
    torch.testing.assert_close(_point(fig, "x − μ1 (on the plane)"), 2 * start["x − μ1 (on the plane)"])
    torch.testing.assert_close(_point(fig, "LN(x) (on the circle)"), out, atol=1e-5, rtol=0)
    assert panel.set(scale=-1.0)
    torch.testing.assert_close(_point(fig, "LN(x) (on the circle)"), -out, atol=1e-5, rtol=0)
    assert "other side" in readout.value


def test_sphere_panel_equal_features_land_at_the_centre_with_a_note():
    panel = build_panel("sphere_panel")
    assert panel.set(x1=1.0, x2=1.0, x3=1.0)
    assert _point(panel.outputs[1], "LN(x) (on the circle)").abs().max() < 1e-9
    assert "All three features are equal" in panel.outputs[0].value


def test_sphere_panel_figure_has_a_title_axis_labels_and_a_legend():
    fig = build_panel("sphere_panel").outputs[1]
    assert fig.layout.title.text
    assert all(ax.title.text for ax in (fig.layout.scene.xaxis, fig.layout.scene.yaxis, fig.layout.scene.zaxis))
    assert all(t.name for t in fig.data)


def test_the_formula_is_a_row_of_buttons_with_the_full_formula_as_tooltip():
    formula = build_panel("token_panel").controls["formula"]
    assert isinstance(formula, widgets.ToggleButtons)
    assert [value for _, value in formula.options] == list(ln_demo.FORMULAS)
    assert all("σ" in tip for tip in formula.tooltips)


def test_the_pitfalls_differ_by_dash_and_marker_in_both_plots():
    sweep = ln_demo.pitfall_errors(*(_lessons()[n] for n in ("layer_norm", "layer_norm_unbiased",
                                                            "layer_norm_eps_on_std")), seed=0)
    by_d, by_spread = sweep["by_d"], sweep["by_spread"]
    fig = ln_demo.pitfall_figure(sweep["ds"], [u for u, _, _ in by_d], [e for _, e, _ in by_d], sweep["spreads"],
                                 [e for _, e, _ in by_spread], [u for u, _, _ in by_spread])
    looks = {t.name: (t.line.dash, t.marker.symbol) for t in fig.data}
    assert len(looks) == 2 and len(set(looks.values())) == 2
    assert all((t.line.dash, t.marker.symbol) == looks[t.name] for t in fig.data)


# ---- the shared measurements, checked against the maths --------------------------------------------------------------

def test_sphere_and_plane_puts_layer_norm_on_the_sphere_and_rms_norm_off_the_plane():
    layer_norm = _lessons()["layer_norm"]
    x = ln_demo.varied_tokens(3, 50, 10)
    r = ln_demo.sphere_and_plane(layer_norm, x)
    torch.testing.assert_close(r["norm_sq"], torch.full((50,), 10.0, dtype=torch.float64))
    assert r["plane_gap"] < 1e-12 and r["picture_gap"] < 1e-12
    rms = ln_demo.sphere_and_plane(layer_norm, x, center=False)
    assert rms["norm_gap"] < 1e-12 and rms["plane_gap"] > 0.1


def test_jacobian_check_finds_the_notebook_formula_right_and_a_wrong_one_wrong():
    layer_norm = _lessons()["layer_norm"]
    x = ln_demo.random_token(4, 12, loc=1.0, spread=2.0)

    def jacobian(v):  # the formula, written independently of the notebook's lesson
        d, mu, sigma = v.shape[-1], v.mean(), v.std(correction=0)
        x_hat = (v - mu) / sigma
        return (torch.eye(d, dtype=v.dtype) - 1.0 / d - torch.outer(x_hat, x_hat) / d) / sigma

    right = ln_demo.jacobian_check(layer_norm, jacobian, x)
    assert ln_demo.jacobian_verdict(right)
    torch.testing.assert_close(right["autograd"], jacobian(x))
    missing_term = ln_demo.jacobian_check(layer_norm, lambda v: jacobian(v) + torch.outer(
        (v - v.mean()) / v.std(correction=0), (v - v.mean()) / v.std(correction=0)) / 12 / v.std(correction=0), x)
    assert not ln_demo.jacobian_verdict(missing_term)  # (I - 11ᵀ/d)/σ alone: not the Jacobian


def test_gradient_by_scale_is_one_over_sigma_until_eps_takes_over():
    layer_norm = _lessons()["layer_norm"]
    exact = ln_demo.gradient_by_scale(layer_norm, 2, scales=(0.5, 5.0, 50.0), eps=0.0)
    assert ln_demo.tenfold_steps(exact) == pytest.approx([1.0, 1.0], abs=1e-12)
    capped = ln_demo.gradient_by_scale(layer_norm, 2, scales=(1e-4, 1e-3), eps=1e-5)
    assert ln_demo.tenfold_steps(capped)[0] < 0.2


def test_gamma_beta_fit_restores_a_shared_normalization_exactly_and_not_per_token_statistics():
    layer_norm = _lessons()["layer_norm"]
    x = ln_demo.varied_tokens(1, 128, 8)
    shared = ln_demo.undo_with_gamma_beta(layer_norm, 0.5 * layer_norm(x, eps=0.0) - 1.0)
    torch.testing.assert_close(shared["gamma"], torch.full((8,), 0.5, dtype=torch.float64))
    torch.testing.assert_close(shared["beta"], torch.full((8,), -1.0, dtype=torch.float64))
    assert ln_demo.undo_with_gamma_beta(layer_norm, x)["rel_error"] > 0.5
    pair = ln_demo.two_tokens(layer_norm, 1)
    assert pair["output_gap"] < 1e-12 < pair["input_gap"]


def test_pitfall_verdict_fails_when_the_pitfall_is_the_correct_formula():
    lessons = _lessons()
    sweep = ln_demo.pitfall_errors(lessons["layer_norm"], lessons["layer_norm"], lessons["layer_norm_eps_on_std"], 0,
                                   ds=(2, 4096), spreads=(1e-3, 1.0))
    verdict = ln_demo.pitfall_verdict(sweep)
    assert not verdict["shrinks x̂ by exactly √((d-1)/d)"]
    assert verdict["ε on σ: below 1e-4 at spread 1, above 0.5 at spread 1e-3"]


# ---- the claim experiments ------------------------------------------------------------------------------------------

def test_every_claim_of_notebook_03_has_an_experiment_with_a_control():
    mine = {cid: e for cid, e in EXPERIMENTS.items() if e.notebook == "03_layernorm"}
    assert set(mine) == set(CLAIMS_03)
    for cid, e in mine.items():
        assert any(s.expect for s in e.settings) and any(not s.expect for s in e.settings), cid


@pytest.mark.parametrize("cid", CLAIMS_03)
def test_each_claim_experiment_agrees_at_the_notebook_seed(cid):
    e, lessons = EXPERIMENTS[cid], _lessons()
    for setting in e.settings:
        assert e.run(0, setting, lessons).holds == setting.expect, (cid, setting.label)


# ---- the named checks each claim cell asserts (and its experiment counts) fail on a plausible wrong input -----------

def test_the_named_checks_fail_on_a_plausible_wrong_input():
    lessons = _lessons()
    layer_norm, unbiased = lessons["layer_norm"], lessons["layer_norm_unbiased"]
    x = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert all(ln_demo.chapter_checks(ln_demo.chapter_statistics(layer_norm, x), x).values())
    wrong = ln_demo.chapter_checks(ln_demo.chapter_statistics(layer_norm, x, correction=1), x)
    assert not wrong["σ² = 1.25 exactly"] and wrong["μ = 2.5 exactly"]
    r = ln_demo.compare_with_pytorch(layer_norm, 0, shape=(2, 3, 16))
    assert all(ln_demo.pytorch_checks(r).values())
    off = ln_demo.compare_with_pytorch(lambda v, w, b, eps=1e-5: unbiased(v, eps=eps) * w + b, 0, shape=(2, 3, 16))
    assert not ln_demo.pytorch_checks(off)["forward = F.layer_norm (float32)"]
    assert all(ln_demo.invariance_checks(ln_demo.invariance_gaps(layer_norm, 0)).values())
    assert not all(ln_demo.invariance_checks(ln_demo.invariance_gaps(layer_norm, 0, per_feature_shift=True)).values())
    tokens = ln_demo.invariance_gaps(layer_norm, 0)["x"]
    assert all(ln_demo.scale_checks(ln_demo.scale_gaps(layer_norm, tokens)).values())
    assert not ln_demo.scale_checks(ln_demo.scale_gaps(layer_norm, tokens, eps=0.0))["a = 1e-3: off by more than 0.5"]
    assert all(ln_demo.independence_checks(ln_demo.batch_independence(0, "layer")).values())
    assert not all(ln_demo.independence_checks(ln_demo.batch_independence(0, "batch")).values())
    varied = ln_demo.varied_tokens(0, 20, 8)
    assert all(ln_demo.sphere_checks(ln_demo.sphere_and_plane(layer_norm, varied)).values())
    assert not all(ln_demo.sphere_checks(ln_demo.sphere_and_plane(layer_norm, varied, center=False)).values())
    assert ln_demo.tenfold_holds([1.0, 0.995]) and not ln_demo.tenfold_holds([1.0, 0.98])
    pair = ln_demo.two_tokens(layer_norm, 0)
    assert all(ln_demo.undo_checks(pair, ln_demo.undo_with_gamma_beta(layer_norm, varied)).values())
    shared = ln_demo.undo_with_gamma_beta(layer_norm, 3.0 * layer_norm(varied, eps=0.0) + 2.0)
    assert not ln_demo.undo_checks(pair, shared)["best γ, β leave relative error > 0.2"]


def test_each_experiment_says_what_kind_of_number_its_figure_is():
    kinds = {cid: EXPERIMENTS[cid].kind for cid in CLAIMS_03}
    assert kinds["C16"] == "roundoff" and kinds["C15"] == "exact"  # a float32 round-off size; an exact binary fraction


def test_invariance_figure_shows_a_zero_gap_and_puts_the_sqrt_eps_line_at_sqrt_eps():
    fig = ln_demo.invariance_figure([0.1, 1.0, 10.0], [1e-3, 0.0, 1e-5], 1e-5)
    curve, zero, line = fig.data
    assert list(curve.y) == [1e-3, None, 1e-5]  # the 0 breaks the line instead of vanishing from a log axis
    assert list(zero.x) == [1.0] and 0 < zero.y[0] < 1e-5
    assert set(line.x) == {math.sqrt(1e-5)} and "√ε" in line.name

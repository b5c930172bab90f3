"""Notebook 01's demos (course_utils.demos.why_normalize) and the residual stacks below them (course_utils.residual)."""
import math

import ipywidgets as widgets
import pytest
import torch
import torch.nn.functional as F

from course_utils import residual
from course_utils.course import lesson_functions
from course_utils.demos import why_normalize as wn
from course_utils.evidence import EXPERIMENTS
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
    assert panel.set(depth=200, gain=0.05, residual=True, norm="off")  # the small-gain control: stable
    assert "the same order of size" in panel.outputs[0].value


def test_gradient_panel_seed_draws_another_stack_and_says_so_for_post_ln():
    panel = wn.gradient_panel(residual_stack)
    assert panel.set(depth=50, norm="Post-LN", seed=0)
    first = list(panel.outputs[1].data[0].y)
    assert "Seed 0" in panel.outputs[0].value and "another seed" in panel.outputs[0].value
    assert panel.set(depth=50, norm="Post-LN", seed=2)
    assert list(panel.outputs[1].data[0].y) != first
    assert first[0] / first[-1] == pytest.approx(wn.gradient_ratios(residual_stack, 50, "Post-LN", 1.0)["ratio"])
    panel.controls["seed"] = widgets.IntText(value=99)
    assert panel.refresh() is False and "seed" in panel.last_error


def test_constant_blocks_ignore_their_input_and_add_up():
    u = torch.ones(residual.D_MODEL, dtype=torch.float64)
    block = wn.constant_block(u)
    assert torch.equal(block(torch.randn(3, residual.D_MODEL, dtype=torch.float64)), u.expand(3, -1))
    aligned = wn.constant_sum(residual_stack, "aligned", n_blocks=10, size=2.0, seed=4)
    assert aligned.tolist() == pytest.approx([2.0 * k for k in range(11)], rel=1e-12)
    independent = wn.constant_sum(residual_stack, "independent", n_blocks=10, size=2.0, seed=4)
    assert 2 < independent[-1] < 15 and independent[1] == pytest.approx(2.0)


def test_a_seeded_stack_is_the_prefix_of_the_deeper_one_and_builds_like_nn_linear():
    deep = residual.sublayer_stack("amplifies its input", "independent", 3)
    short = residual.make_sublayers("amplifies its input", "independent", 7, residual.D_MODEL, 3)
    for f, g in zip(deep[:7], short):
        torch.testing.assert_close(f[0].weight, g[0].weight, rtol=0, atol=0)
    linear = deep[0][2]
    x = torch.randn(5, 4 * residual.D_MODEL, dtype=torch.float64)
    torch.testing.assert_close(linear(x), F.linear(x, linear.weight))
    assert linear.bias is None and (linear.in_features, linear.out_features) == (4 * residual.D_MODEL,
                                                                                  residual.D_MODEL)


def test_gradient_ratios_and_layer_factors_agree_with_the_backward_pass():
    out = wn.backward_through_stack(residual_stack, 30, "Post-LN", 1.0, seed=2)
    size = residual.vector_norm(out["grad_x"])
    run = wn.gradient_ratios(residual_stack, 30, "Post-LN", 1.0, seed=2)
    assert run["ratio"] == pytest.approx((size[0].mean() / size[-1].mean()).item())
    assert run["weight_ratio"] == pytest.approx((out["grad_w"][0] / out["grad_w"][-1]).item())
    factors = wn.layer_factors(residual_stack, 30, "Post-LN", 1.0, seed=2)
    assert factors.shape == (30, residual.N_TOKENS)
    torch.testing.assert_close(torch.tensor(factors.sum(0)), torch.log10(size[0] / size[-1]))


def test_float16_overflow_finds_the_first_inf_near_the_float64_crossing():
    run = wn.float16_overflow(residual_stack, seed=1, depth=60)
    assert run["first_inf"] is not None and abs(run["first_inf"] - run["first_big"]) <= 2
    assert all(torch.isfinite(run["x16"][n]).all() for n in ("Pre-LN", "Post-LN"))
    assert wn.float16_overflow(residual_stack, seed=1, depth=5)["first_inf"] is None


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
    assert record["quantiles"].shape == record["output_quantiles"].shape == (3, 3, 8)
    assert math.isfinite(record["spread_drift"]) and math.isfinite(record["output_drift"])
    assert record["diverged_at"] is None and math.isfinite(record["final_loss"])
    with pytest.raises(ValueError):
        wn.train_shift_run("LayerNorm")
    with pytest.raises(ValueError):
        wn.train_shift_run("none", steps=0)


def test_batchnorm_output_is_beta_and_gamma_by_construction_while_its_input_is_free():
    record = wn.train_shift_run("BatchNorm", steps=30, lr=0.2, seed=1)
    net, bn = record["net"], record["net"].norms[-1]
    with torch.no_grad():
        z, out = net.last_hidden(wn.probe_batch())
    var = z.var(0, unbiased=False)
    torch.testing.assert_close(out.mean(0), bn.bias, atol=1e-5, rtol=0)
    torch.testing.assert_close(out.std(0, unbiased=False), bn.weight.abs() * torch.sqrt(var / (var + bn.eps)))
    plain = wn.train_shift_run("none", steps=30, lr=0.2, seed=1)
    torch.testing.assert_close(torch.tensor(plain["quantiles"]), torch.tensor(plain["output_quantiles"]))


def test_a_diverging_run_stops_and_says_where():
    race = wn.learning_rate_race(1.0, seed=0)
    plain, normed = race["none"], race["BatchNorm"]
    assert plain["diverged_at"] is not None and len(plain["loss"]) == plain["diverged_at"]
    assert math.isnan(plain["final_loss"]) and normed["diverged_at"] is None and normed["final_loss"] < 0.8


def test_covariate_shift_demo_refuses_a_learning_rate_it_does_not_offer():
    demo = wn.covariate_shift_demo(steps=20)
    demo.controls["lr"] = widgets.FloatText(value=0.3)
    assert demo.run(background=False) is None and "learning rate" in demo.last_error


def test_every_claim_of_notebook_01_has_an_experiment_with_a_control_where_it_makes_one():
    ids = {f"C0{i}" for i in range(1, 9)} | {"C54", "C55", "C56", "C57"}
    mine = {c for c, e in EXPERIMENTS.items() if e.notebook == "01_why_normalize"}
    assert ids <= mine
    for claim in ("C01", "C04", "C05", "C07", "C08", "C54", "C55", "C56", "C57"):
        assert any(not s.expect for s in EXPERIMENTS[claim].settings), claim


def test_covariate_shift_demo_runs_synchronously():
    demo = wn.covariate_shift_demo(steps=20)
    records = demo.run(background=False)
    assert records is demo.result and set(records) == set(wn.SHIFT_NORMS)
    assert "mean over 8 units" in demo.summary.value and all(r["units"] == 8 for r in records.values())
    assert len(demo.fig.data[0].y) == 20 and "spread drift" in demo.summary.value.lower()


def test_covariate_shift_demo_redraws_by_the_clock_not_once_per_few_steps(monkeypatch):
    """A redraw per few steps queues up in the browser and plays back after training ends; paced by the clock, the
    figure only redraws as often as it can be drawn, and always once at the end of each network's run."""
    demo = wn.covariate_shift_demo(steps=40)
    draws, draw = [], demo._draw
    monkeypatch.setattr(demo, "_draw", lambda record: (draws.append(record["norm"]), draw(record)))
    monkeypatch.setattr(wn, "REDRAW_SECONDS", math.inf)
    demo.run(background=False)
    assert draws == list(wn.SHIFT_NORMS)  # never due while training: only each run's final state
    draws.clear()
    monkeypatch.setattr(wn, "REDRAW_SECONDS", 0.0)
    demo.run(background=False)
    assert draws.count("none") == 40 // 5 + 1  # always due: every record (each 5 steps), then the final state


def test_short_choices_are_buttons_and_conditions_differ_by_more_than_colour():
    growth = wn.residual_growth_panel(residual_stack)
    assert all(isinstance(growth.controls[n], widgets.ToggleButtons) for n in ("contributions", "sublayer", "norm"))
    assert len({t.line.dash for t in growth.outputs[1].data}) == len(growth.outputs[1].data)
    demo = wn.covariate_shift_demo(steps=20)
    losses = [t for t in demo.fig.data if t.name.startswith("loss")]
    quantiles = [t for t in demo.fig.data if t.showlegend is not False and not t.name.startswith("loss")]
    assert len({t.line.dash for t in losses}) == 2 and len({t.line.dash for t in quantiles}) == 3


# ---- the checks notebook 01's claim cells and its claim experiments share: each must fail on a plausible wrong input

def test_the_stack_checks_fail_where_the_law_does_not_hold():
    assert wn.norms_add([0.0, 2.0, 4.0], 2.0) and not wn.norms_add([0.0, 2.0, 2.83], 2.0)  # independent: sqrt, not sum
    runs = wn.growth_runs(residual_stack, 1.0, 200)
    assert all(wn.growth_checks(runs).values())
    swapped = dict(runs)  # a stack that was normalized after all: no exponential growth to find
    swapped["amplifies its input", "independent", "off"] = runs["amplifies its input", "independent", "Pre-LN"]
    checks = wn.growth_checks(swapped)
    assert not checks["FFN, no norm: a factor 1.3 to 1.45 per layer"]
    assert not checks["FFN, no norm: more than 1e20 in all"]
    run = wn.float16_overflow(residual_stack)
    assert all(wn.float16_checks(run).values())
    assert not wn.float16_checks({**run, "first_inf": None})["float16 without norm holds an inf"]
    late = wn.float16_checks({**run, "first_inf": run["first_big"] + 5})  # an inf far from where float64 passes 65504
    assert not late["... within 2 layers of where float64 passes 65504"]


def test_the_gradient_judges_draw_their_lines_where_the_notebook_says():
    assert wn.extreme(1e-25) and wn.extreme(1e25) and wn.extreme(0.0) and wn.extreme(math.inf)
    assert not wn.extreme(1e19) and not wn.extreme(1e-19)
    assert wn.stable(1.3) and not wn.stable(5.0) and not wn.stable(0.2)
    assert wn.bounded(0.5) and not wn.bounded(1e-5) and not wn.bounded(20.0)
    assert wn.both_sides([0.5, 2.0]) and not wn.both_sides([1.5, 2.0]) and not wn.both_sides([0.5, 0.9])
    post = wn.layer_factors(residual_stack, 200, "Post-LN")
    pre = wn.layer_factors(residual_stack, 200, "Pre-LN")
    assert wn.random_factor(post) and not wn.random_factor(pre)
    assert not wn.random_factor(post + 0.05)  # a steady drift per layer is not a random factor near 1


def test_histogram_checks_fail_when_the_placements_are_mixed_up():
    off, pre, post = (wn.layer_histograms(residual_stack, n, 1.0) for n in residual.STACK_NORMS)
    assert all(wn.histogram_checks(off, pre, post).values())
    assert not any(list(wn.histogram_checks(post, pre, off).values())[:3])


def _race(plain_loss, bn_loss, diverged=None):
    return {"none": {"final_loss": plain_loss, "diverged_at": diverged},
            "BatchNorm": {"final_loss": bn_loss, "diverged_at": None}}


def test_the_training_judges_read_what_the_notebook_states():
    assert wn.drifted({"spread_drift": 0.8}) and not wn.drifted({"spread_drift": 0.6})
    assert not wn.drifted({"spread_drift": 0.8, "output_drift": 0.1}, "output")
    with pytest.raises(ValueError):
        wn.drifted({"spread_drift": 0.8}, "after")
    assert wn.same_loss(_race(0.45, 0.42)) and not wn.same_loss(_race(0.55, 0.42))
    assert not wn.same_loss(_race(math.nan, 0.6, diverged=12))  # a diverged plain run is not "the same loss"
    assert wn.large_lr_checks(_race(math.nan, 0.6, diverged=12)) == {"BatchNorm trains": True, "plain fails": True}
    assert wn.large_lr_checks(_race(0.5, 0.45)) == {"BatchNorm trains": True, "plain fails": False}
    assert not wn.large_lr_checks(_race(1.4, math.nan))["BatchNorm trains"]  # BatchNorm diverging too


def test_a_run_line_names_its_own_settings():
    records = wn.learning_rate_race(0.5, seed=0, steps=20)
    line = wn.run_line(records)
    assert line.startswith("lr 0.5, 20 steps:") and "stopped" not in line


def test_the_growth_panel_keeps_its_y_range_when_the_depth_or_the_norm_changes():
    """A flat LayerNorm curve must not seem to shrink because the axis rescaled (issue 25)."""
    panel = wn.residual_growth_panel(residual_stack)
    fig = panel.outputs[1]
    ranges = []
    for depth, norm in ((10, "Post-LN"), (200, "Post-LN"), (50, "off"), (50, "Pre-LN")):
        assert panel.set(depth=depth, norm=norm)
        ranges.append(tuple(fig.layout.yaxis.range))
    assert len(set(ranges)) == 1
    assert panel.set(gain=0.1)  # another gain is another range
    assert tuple(fig.layout.yaxis.range) != ranges[0]


def test_steps_to_loss_counts_the_first_window_below_the_threshold():
    assert wn.steps_to_loss({"loss": [2.0] * 5 + [0.5] * 20}, 0.8, 10) == 14  # steps 5-14 hold one 2.0: mean 0.65
    assert wn.steps_to_loss({"loss": [2.0] * 30}) == math.inf
    assert wn.steps_to_loss({"loss": [0.1] * 3}) == math.inf   # shorter than the window
    fast, slow = {"loss": [0.5] * 20}, {"loss": [2.0] * 30 + [0.5] * 20}
    assert wn.trains_faster({"BatchNorm": fast, "none": slow}) and not wn.trains_faster({"BatchNorm": slow, "none": fast})


def test_the_noise_moves_what_the_next_layer_gets_and_only_with_batchnorm():
    with pytest.raises(ValueError, match="only with BatchNorm"):
        wn.ShiftNet("none", noise=0.5)
    with pytest.raises(ValueError, match="finite"):
        wn.ShiftNet("BatchNorm", noise=float("nan"))
    x = wn.probe_batch()
    clean, noisy = wn.ShiftNet("BatchNorm", seed=1), wn.ShiftNet("BatchNorm", seed=1, noise=0.5)
    a, b, c = clean.last_hidden(x)[1], noisy.last_hidden(x)[1], noisy.last_hidden(x)[1]
    assert not torch.allclose(b, c)                         # redrawn at every forward pass
    assert torch.allclose(a.mean(0), torch.zeros(64), atol=1e-5) and (b.mean(0).abs().max() > 0.05)
    noisy.eval()
    assert torch.allclose(noisy.last_hidden(x)[1], noisy.last_hidden(x)[1])  # eval mode: no noise
    record = wn.train_shift_run("BatchNorm", steps=5, noise=0.5)
    assert record["noise"] == 0.5 and len(record["loss"]) == 5


def test_noise_checks_fail_when_the_noisy_network_is_slow_or_does_not_train():
    fast = {"loss": [0.5] * 20, "final_loss": 0.5}
    slow = {"loss": [2.0] * 60 + [0.5] * 20, "final_loss": 0.5}
    stuck = {"loss": [0.5] * 20, "final_loss": 1.2}
    assert all(wn.noise_checks({"BatchNorm": fast, "noisy": fast}).values())
    assert not wn.noise_checks({"BatchNorm": fast, "noisy": slow})["noisy about as fast as BatchNorm"]
    assert not wn.noise_checks({"BatchNorm": fast, "noisy": stuck})["noisy trains"]


def test_the_deep_stack_gives_the_backward_passs_ratio_in_one_pass():
    for norm in ("Post-LN", "Pre-LN"):
        slow = wn.gradient_ratios(residual_stack, 50, norm, 1.0, True, seed=1)["ratio"]
        assert wn.depth_law(residual_stack, 50, norm, seed=1)["ratio"] == pytest.approx(slow, rel=1e-9)
    assert wn.follows_sqrt_law({"law_ratio": 1.0}) and not wn.follows_sqrt_law({"law_ratio": 2.0})
    assert wn.vanished({"ratio": 1e-3}, wn.VANISHED_BELOW) and not wn.vanished({"ratio": 0.5}, wn.VANISHED_BELOW)


def test_branch_shares_fall_like_one_over_root_l_only_with_pre_ln():
    import numpy as np
    assert wn.share_slope(1 / np.sqrt(np.arange(200) + 1.0)) == pytest.approx(-0.5)
    assert not wn.down_weighted(np.full(200, 0.05))
    with pytest.raises(ValueError, match="Post-LN"):
        wn.branch_shares(residual_stack, "Post-LN", 1.0)


def test_hessian_top_and_staleness_on_a_quadratic_and_put_the_weights_back():
    net = wn.ShiftNet("BatchNorm", seed=0)
    before = [p.detach().clone() for p in net.parameters()]
    assert wn.staleness(net, 0.1) > 0 and wn.hessian_top(net, iters=5) > 0
    assert all(torch.equal(a, b) for a, b in zip(before, net.parameters()))
    assert wn.flatter_with_batchnorm({"none": 2.0, "BatchNorm": 1.0})
    assert not wn.less_stale_with_batchnorm({"none": 1.0, "BatchNorm": 1.0})


def test_batch_size_checks_judge_the_sweep_and_fail_on_flipped_runs():
    sweep = wn.batch_size_sweep(0, batches=(32, 64, 256))
    assert all(wn.batch_size_checks(sweep).values())
    assert not wn.bn_advantage(sweep[1.0, 32]) and wn.bn_advantage(sweep[1.0, 64])
    swapped = {**sweep, (1.0, 32): sweep[1.0, 64]}  # a sweep where batch 32 worked would fail the claim
    assert not all(wn.batch_size_checks(swapped).values())
    fig = wn.batch_size_figure(sweep)
    assert fig.layout.title.text and fig.layout.xaxis.title.text and fig.layout.yaxis.title.text
    styles = {(t.line.color, t.line.dash) for t in fig.data}
    assert len(fig.data) == 4 and len(styles) == 4 and len({t.line.dash for t in fig.data}) == 2

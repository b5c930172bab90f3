"""Tests of the demo modules of notebooks 01 (why normalize) and 02 (BatchNorm and padding): panels and computations."""
import math

import ipywidgets as widgets
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_utils.demos import batchnorm as bn_demo
from course_utils.demos import why_normalize as wn
from course_utils.norms import masked_mean_var
from course_utils.panel import PANELS

WARNING = "#8a5a00"  # colour of a ValueError message in a Panel (an unexpected exception shows in red)
PANEL_NAMES = ["residual_growth_panel", "gradient_panel", "histogram_panel", "padding_panel", "coupling_panel"]


# ---- panels ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", PANEL_NAMES)
def test_panel_is_registered_and_sweeps_without_error(name):
    notebook, factory = PANELS[name]
    assert notebook in ("01_why_normalize", "02_batchnorm_and_padding")
    panel = factory()
    assert panel.last_error is None, panel.last_error  # the defaults draw
    for values in panel.sweep():
        if not panel.set(**values):  # a rejected setting must be a clear ValueError message, never a crash
            assert WARNING in panel.message.value and panel.last_error, (values, panel.last_error)
    assert panel.set(**panel.sweep()[0])
    assert panel.message.value == ""


def test_growth_panel_draws_the_requested_depth_and_law():
    panel = wn.residual_growth_panel()
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
    panel = wn.residual_growth_panel()
    panel.set(depth=30, norm="Pre-LN")
    short = list(panel.outputs[1].data[1].y)
    panel.set(depth=80, norm="Pre-LN")
    longer = list(panel.outputs[1].data[1].y)
    fresh = wn.growth_curve("amplifies its input", "independent", "Pre-LN", 1.0, depth=80)
    assert longer[:31] == pytest.approx(short, rel=1e-12)
    assert longer == pytest.approx(fresh.tolist(), rel=1e-9)


def test_panels_show_a_message_for_nonsense_instead_of_raising():
    padding = bn_demo.padding_panel()
    assert padding.set(padding_share=0.95) is False
    assert "92%" in padding.last_error and WARNING in padding.message.value
    coupling = bn_demo.coupling_panel()
    assert coupling.set(padding_share=0.0) is False
    assert "at least" in coupling.last_error
    growth = wn.residual_growth_panel()
    growth.controls["depth"] = widgets.IntText(value=500)  # a value the slider cannot reach
    assert growth.refresh() is False and "depth" in growth.last_error
    gradients = wn.gradient_panel()
    gradients.controls["gain"] = widgets.FloatText(value=-1.0)
    assert gradients.refresh() is False and "gain" in gradients.last_error
    histograms = wn.histogram_panel()
    histograms.controls["norm"] = widgets.Text(value="BatchNorm")
    assert histograms.refresh() is False and "normalization" in histograms.last_error


def test_gradient_panel_reports_vanishing_and_exploding():
    panel = wn.gradient_panel()
    assert panel.set(depth=100, gain=0.2, residual=False, norm="off")
    assert "vanish" in panel.outputs[0].value
    assert panel.set(depth=100, gain=1.0, residual=True, norm="off")
    assert "exploding" in panel.outputs[0].value


# ---- notebook 01 computations -------------------------------------------------------------------------------------

def test_residual_stack_reproduces_the_chapter_quiz():
    layers = wn.make_sublayers("fixed size", "aligned", depth=10)
    xs = wn.residual_stack(torch.zeros(wn.D_MODEL, dtype=torch.float64), layers, 2.0)
    assert xs.shape == (11, wn.D_MODEL)
    assert xs.norm(dim=-1).tolist() == pytest.approx([2.0 * l for l in range(11)], abs=1e-12)


def test_residual_stack_placements_match_their_equations():
    layers = wn.make_sublayers("amplifies its input", "independent", depth=3, seed=5)
    x0 = torch.randn(2, wn.D_MODEL, dtype=torch.float64)
    d = (wn.D_MODEL,)
    x = x0
    for f in layers:
        x = F.layer_norm(x + 0.5 * f(x), d)
    torch.testing.assert_close(wn.residual_stack(x0, layers, 0.5, "Post-LN")[-1], x)
    x = x0
    for f in layers:
        x = x + 0.5 * f(F.layer_norm(x, d))
    torch.testing.assert_close(wn.residual_stack(x0, layers, 0.5, "Pre-LN")[-1], x)
    x = x0
    for f in layers:
        x = 0.5 * f(x)
    torch.testing.assert_close(wn.residual_stack(x0, layers, 0.5, residual=False)[-1], x)
    with pytest.raises(ValueError, match="norm"):
        wn.residual_stack(x0, layers, 0.5, "BatchNorm")


def test_feed_forward_sublayer_preserves_the_mean_square_norm():
    f = wn.ffn(64, torch.Generator().manual_seed(0))
    x = torch.randn(4000, 64, dtype=torch.float64)
    ratio = (f(x).pow(2).sum(-1).mean() / x.pow(2).sum(-1).mean()).item()
    assert ratio == pytest.approx(1.0, abs=0.15)


@pytest.mark.parametrize("sublayer,contributions,norm", [
    ("fixed size", "aligned", "off"), ("amplifies its input", "aligned", "off"),
    ("amplifies its input", "aligned", "Pre-LN"), ("fixed size", "independent", "Post-LN")])
def test_the_law_matches_the_deterministic_cases(sublayer, contributions, norm):
    measured = wn.growth_curve(sublayer, contributions, norm, 0.5, depth=60)
    law, _ = wn.predicted_norm(60, 0.5, sublayer, contributions, norm, float(measured[0]))
    assert measured[-1] == pytest.approx(law[-1], rel=0.06)


def test_vector_norm_survives_huge_and_special_values():
    x = torch.tensor([[3e200, 4e200], [0.0, 0.0], [math.inf, 1.0]], dtype=torch.float64)
    out = wn.vector_norm(x)
    assert out[0].item() == pytest.approx(5e200) and out[1].item() == 0.0 and out[2].item() == math.inf


@pytest.mark.parametrize("norm,residual", [("off", True), ("Pre-LN", True), ("Post-LN", True), ("off", False)])
def test_backward_through_stack_matches_autograd_on_the_reference_stack(norm, residual):
    out = wn.backward_through_stack(6, norm, 0.7, residual, n_tokens=3, seed=3)
    layers = wn.make_sublayers("amplifies its input", "independent", 6, wn.D_MODEL, 3)
    last = layers[-1][2]
    last.weight.requires_grad_(True)
    x0 = wn._token_batch(3, wn.D_MODEL, 4).requires_grad_(True)
    r = wn._token_batch(1, wn.D_MODEL, 5)[0] / math.sqrt(wn.D_MODEL)
    loss = (wn.residual_stack(x0, layers, 0.7, norm, residual)[-1] @ r).mean()
    grad_x0, grad_w = torch.autograd.grad(loss, [x0, last.weight])
    torch.testing.assert_close(out["grad_x"][0], grad_x0)
    assert out["grad_w"][-1].item() == pytest.approx(grad_w.norm().item(), rel=1e-10)


def test_layer_histograms_are_fractions_and_normalization_holds_the_scale():
    off, post = wn.layer_histograms("off", 1.0), wn.layer_histograms("Post-LN", 1.0)
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
    assert demo.run(background=False)
    assert set(demo.results) == set(wn.SHIFT_NORMS)
    assert len(demo.fig.data[0].y) == 20 and "spread drift" in demo.message.value.lower()


def test_depth_scaled_gain_checker():
    assert wn.check_depth_scaled_gain(wn.depth_scaled_gain).passed
    wrong = wn.check_depth_scaled_gain(lambda depth: 1 / math.sqrt(depth))
    assert not wrong.passed and "target 2x" in wrong.first_failure.detail

    def unfinished(depth):
        raise NotImplementedError

    assert "not implemented" in wn.check_depth_scaled_gain(unfinished).first_failure.detail
    assert not wn.check_depth_scaled_gain(lambda depth: "0.1").passed
    assert not wn.check_depth_scaled_gain(lambda depth: 1 / 0).passed


def test_one_thread_restores_the_thread_count():
    before = torch.get_num_threads()
    with wn.one_thread():
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


# ---- notebook 02 computations -------------------------------------------------------------------------------------

@pytest.mark.parametrize("share", [0.0, 0.1, 0.31, 0.5, 0.66, 0.83, 0.9])
@pytest.mark.parametrize("spread", [0.0, 0.5, 1.0])
def test_lengths_for_gives_the_requested_padding_share(share, spread):
    lengths = bn_demo.lengths_for(share, spread)
    assert lengths.shape == (bn_demo.BATCH_SIZE,) and int(lengths.max()) == bn_demo.MAX_LEN
    assert int(lengths.min()) >= 1
    actual = 1 - lengths.sum().item() / (bn_demo.BATCH_SIZE * bn_demo.MAX_LEN)
    assert actual == pytest.approx(share, abs=0.01)
    if spread == 0.0:
        assert len(set(lengths[1:].tolist())) == 1


@pytest.mark.parametrize("share,spread", [(0.95, 0.5), (1.0, 0.0), (-0.1, 0.0), (0.5, 1.5), (math.nan, 0.0)])
def test_lengths_for_rejects_impossible_batches(share, spread):
    with pytest.raises(ValueError):
        bn_demo.lengths_for(share, spread)


def test_contamination_formula_is_exact():
    for share, spread, seed in [(0.2, 0.3, 0), (0.5, 1.0, 1), (0.8, 0.0, 2)]:
        x, mask = bn_demo.token_batch(bn_demo.lengths_for(share, spread), seed=seed)
        s = bn_demo.contaminated_stats(x, mask)
        mean, var = bn_demo.predicted_contamination(s["true_mean"], s["true_var"], s["padding_share"])
        torch.testing.assert_close(s["padded_mean"], mean)
        torch.testing.assert_close(s["padded_var"], var)


def test_padded_batchnorm_is_pytorchs_batchnorm1d():
    x, mask = bn_demo.token_batch(bn_demo.lengths_for(0.4, 0.5), seed=3)
    ours = bn_demo.normalize(x, mask, bn_demo.NORM_KINDS[0])
    theirs = nn.BatchNorm1d(bn_demo.N_FEATURES, affine=False, dtype=torch.float64)(x.transpose(1, 2)).transpose(1, 2)
    torch.testing.assert_close(ours, theirs)
    masked = bn_demo.normalize(x, mask, bn_demo.NORM_KINDS[1])
    mean, var, _ = masked_mean_var(x, mask)
    torch.testing.assert_close(masked[mask], ((x - mean) / torch.sqrt(var + 1e-5))[mask])
    with pytest.raises(ValueError):
        bn_demo.normalize(x, mask, "GroupNorm")


def test_coupling_batches_isolate_padding_from_batch_mates():
    batches = bn_demo.coupling_batches(padded_len=40, mate_shift=2.0)
    x, mask = batches["reference"]
    more_x, more_mask = batches["more_padding"]
    assert more_x.shape[1] == 40 and torch.equal(more_x[:, :x.shape[1]], x) and not more_x[:, x.shape[1]:].any()
    assert torch.equal(batches["other_mates"][0][0], x[0])
    outputs = {kind: bn_demo.sentence_outputs(batches, kind) for kind in bn_demo.NORM_KINDS}
    bn, masked, ln = (outputs[k] for k in bn_demo.NORM_KINDS)
    assert (bn["more_padding"] - bn["reference"]).abs().max() > 0.5
    torch.testing.assert_close(masked["more_padding"], masked["reference"])
    assert (masked["other_mates"] - masked["reference"]).abs().max() > 0.5
    torch.testing.assert_close(ln["other_mates"], ln["reference"])
    with pytest.raises(ValueError):
        bn_demo.coupling_batches(padded_len=5)


def test_per_position_stats_and_drifting_batches():
    pos = bn_demo.per_position_stats(*bn_demo.token_batch(bn_demo.lengths_for(0.5, 1.0)))
    assert pos["pad_share"][0] == 0 and pos["pad_share"][-1].item() == pytest.approx(15 / 16)
    batches = list(bn_demo.drifting_batches(4, drift=2.0))
    means = [masked_mean_var(x, m)[0].mean().item() for x, m in batches]
    assert len(batches) == 4 and means[-1] - means[0] == pytest.approx(1.5, abs=0.3)
    with pytest.raises(ValueError):
        next(bn_demo.drifting_batches(0))

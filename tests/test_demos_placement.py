"""Notebook 04's demo module: the diagram, the measurements at initialization, the race and its panels."""
import math
import re
import time

import numpy as np
import pytest
import torch

from course_utils.course import lesson_functions
from course_utils.demos import placement as demo
from course_utils.panel import PANELS
from course_utils.training import History


def test_diagram_puts_the_norm_on_the_path_for_post_ln_and_on_the_branch_for_pre_ln():
    fig = demo.placement_diagram()
    assert fig.layout.title.text
    ln_boxes = [a.x for a in fig.layout.annotations if a.text == "<b>LN</b>"]
    paths = [s.x0 for s in fig.layout.shapes if s.type == "line" and s.line.width == 4]
    assert len(ln_boxes) == 2 and len(set(paths)) == 2
    post_path, pre_path = sorted(set(paths))
    post_ln, pre_ln = sorted(ln_boxes)
    assert post_ln == post_path  # on the residual path
    assert pre_ln != pre_path  # on the branch


def test_build_model_gives_both_placements_the_same_weights():
    post = demo.build_model(3, "post", seed=4).state_dict()
    pre = demo.build_model(3, "pre", seed=4).state_dict()
    shared = [k for k in post if k in pre]
    assert len(shared) == len(post)  # Pre-LN only adds the final norm
    for k in shared:
        torch.testing.assert_close(post[k], pre[k])
    assert float(pre["pos_emb.weight"].std()) == pytest.approx(demo.POS_STD, rel=0.1)
    assert not torch.equal(demo.build_model(3, "pre", seed=5).state_dict()["pos_emb.weight"], pre["pos_emb.weight"])


def test_relative_updates():
    x = torch.randn(2, 3, 8)
    assert demo.relative_updates([x, 2 * x, 2 * x]) == pytest.approx([1.0, 0.0], abs=1e-6)


def test_init_measurements_averages_over_inits():
    calls = []

    def fake(depth, placement, seed):
        calls.append((depth, placement, seed))
        return {"W2": [seed] * depth, "rms": [1.0] * (depth + 1)}

    data = demo.init_measurements(fake, depths=(2, 3), inits=2)
    assert len(calls) == 8 and data[3, "pre"]["W2"].shape == (2, 3)


@pytest.fixture(scope="module")
def small_init_panel():
    return demo.init_panel(lesson_functions("04_pre_vs_post_ln")["measure_at_init"], depths=(2, 4), inits=1)


def test_init_panel_sweep_refreshes(small_init_panel):
    panel = small_init_panel
    for values in panel.sweep():
        assert panel.set(**values), panel.last_error
    assert panel.set(depth=4, show="FFN gradient", weight="W1 (linear1)")
    post, pre, fit = panel.figure.data
    assert list(post.x) == [1, 2, 3, 4] and not fit.visible and "W1" in panel.figure.layout.title.text
    assert post.y == pytest.approx(panel.data[4, "post"]["W1"].mean(0).tolist())
    assert not panel.controls["weight"].disabled
    assert panel.set(show="stream size")
    assert list(post.x) == [0, 1, 2, 3, 4] and fit.visible and fit.name.startswith("sqrt(")
    assert panel.controls["weight"].disabled  # the weight picks between gradients only
    assert panel.set(show="update per block") and pre.y == pytest.approx(panel.data[4, "pre"]["update"].mean(0).tolist())


def test_init_panel_tells_the_placements_apart_by_more_than_colour(small_init_panel):
    post, pre, _ = small_init_panel.figure.data
    assert post.line.color != pre.line.color
    assert post.line.dash != pre.line.dash and post.marker.symbol != pre.marker.symbol


def test_init_panel_rejects_nonsense_with_a_message(small_init_panel):
    panel = small_init_panel
    with pytest.raises(ValueError, match="was not measured"):
        panel.update(depth=7, show="FFN gradient", weight="W2 (linear2)", spread=False)
    with pytest.raises(ValueError, match="weight must be"):
        panel.update(depth=2, show="FFN gradient", weight="W9", spread=False)
    with pytest.raises(ValueError, match="show must be"):
        panel.update(depth=2, show="loss", weight="W2 (linear2)", spread=False)
    panel.controls["weight"].options = ["W2 (linear2)", "W1 (linear1)", "W9"]  # a value the handler refuses
    assert not panel.set(show="FFN gradient", weight="W9")
    assert "weight must be" in panel.message.value
    assert panel.set(weight="W2 (linear2)") and panel.message.value == ""


def test_the_panels_are_registered_for_the_notebook():
    """tests/test_panel.py sweeps every registered panel (here, refusing only a warmup as long as the run; the default
    init panel, 24 models, in the slow set); latency: course_utils.bench."""
    mine = {name for name, (notebook, _) in PANELS.items() if notebook == "04_pre_vs_post_ln"}
    assert mine >= {"init_panel", "race_panel"}


def test_race_panel_rejects_a_warmup_longer_than_the_run():
    panel = demo.race_panel()
    assert not panel.set(warmup=200, steps=100)
    assert "warmup" in panel.message.value
    with pytest.raises(ValueError, match="learning rate"):
        panel.update(n_layers=2, lr=float("nan"), warmup=10, steps=50, seeds=1)
    assert panel.run(background=False) is None  # refuses to train with the bad settings
    assert panel.set(warmup=50, steps=100) and "about" in panel.plan.value


def test_run_race_draws_live_and_reports_progress():
    fig = demo.race_figure(demo.RACE, seeds=1, steps=6)
    seen = []
    result = demo.run_race(1, 1e-3, 2, 6, 1, figure=fig, draw_every=2, progress=lambda d, t, s: seen.append((d, t)))
    assert set(result.histories) == {c.label for c in demo.RACE}
    assert all(len(h[0].loss) == 6 for h in result.histories.values())
    assert [len(t.y) for t in fig.data[:3]] == [6, 6, 6]
    assert seen[-1] == (18, 18) and not result.stopped
    assert "seed 0" in result._repr_html_()
    with pytest.raises(ValueError, match="warmup"):
        demo.run_race(1, 1e-3, 6, 6, 1)


def test_verdict():
    chance = math.log(demo.TASK["vocab_size"] - 1)
    assert demo.verdict(History(loss=[0.01] * 20, accuracy=[1.0] * 20)) == "learned"
    assert demo.verdict(History(loss=[chance] * 20, accuracy=[0.07] * 20)) == "stuck at chance"
    assert demo.verdict(History(loss=[1.0] * 20, accuracy=[0.6] * 20)) == "partial"


def test_a_stopped_run_is_never_called_stuck():
    chance = math.log(demo.TASK["vocab_size"] - 1)
    at_chance = dict(loss=[chance] * 30, accuracy=[0.07] * 30)
    assert demo.run_verdict(History(**at_chance), steps=30, warmup=50) == "stuck at chance"  # went the whole way
    during = demo.run_verdict(History(**at_chance, stopped=True), steps=100, warmup=50)
    assert during == "stopped during warmup at step 30 of 50: too early to judge"
    assert demo.run_verdict(History(**at_chance, stopped=True), steps=100) == "stopped at step 30 of 100: too early to judge"
    learned = History(loss=[0.01] * 30, accuracy=[1.0] * 30, stopped=True)
    assert demo.run_verdict(learned, steps=100) == "learned by step 30 of 100, then stopped"
    early = History(loss=[0.01] * 5, accuracy=[1.0] * 5, stopped=True)
    assert "too early to judge" in demo.run_verdict(early, steps=100)


def test_a_race_stopped_mid_warmup_says_so_in_its_summary():
    calls = iter(range(10_000))
    result = demo.run_race(1, 1e-3, 10, 20, 1, configs=demo.DEPTH_RACE, should_stop=lambda: next(calls) >= 5)
    assert result.stopped and list(result.histories) == ["Post-LN + warmup"]
    summary = result._repr_html_()
    assert "stopped during warmup at step 4 of 10: too early to judge" in summary and "stuck" not in summary
    assert result.verdicts() == {"Post-LN + warmup": []}  # the claims' verdicts count finished runs only
    assert "stopped during warmup" in repr(result)


def test_the_time_estimate_follows_the_settings():
    panel = demo.race_panel()
    panel.step_cost = (0.01, 0.002)  # seconds per step: fixed, per block
    assert demo.race_seconds(panel.step_cost, n_layers=4, steps=100, runs=6) == pytest.approx(6 * 100 * 0.018)

    def estimate(**settings) -> float:
        assert panel.set(**settings), panel.last_error
        return float(re.search(r"about (\d+) s", panel.plan.value).group(1))

    base = estimate(n_layers=4, steps=100, seeds=2, warmup=50)
    assert base == round(3 * 2 * 100 * 0.018)
    assert estimate(n_layers=4, steps=200, seeds=2) == 2 * base
    assert estimate(n_layers=4, steps=100, seeds=4) == 2 * base
    assert estimate(n_layers=9, steps=100, seeds=2) == round(3 * 2 * 100 * 0.028)
    deep = demo.race_panel(configs=demo.DEPTH_RACE)  # two configurations, not three
    deep.step_cost = panel.step_cost
    assert deep.set(n_layers=4, steps=100, seeds=2) and f"about {2 * 2 * 100 * 0.018:.0f} s" in deep.plan.value


def test_step_cost_is_measured_here():
    fixed, per_block = demo.step_cost()
    assert fixed >= 0 and per_block >= 0 and fixed + per_block > 0


def test_the_race_figure_tells_configurations_apart_by_more_than_colour_and_labels_each_once():
    fig = demo.race_figure(demo.RACE, seeds=2, steps=6)
    for _ in range(2):  # a second run redraws the figure afresh: no repeated legend entries
        demo.run_race(1, 1e-3, 2, 6, 2, figure=fig)
    shown = [t for t in fig.data if t.showlegend is not False]
    assert len({t.name for t in shown}) == len(shown) == 4  # three configurations and the chance line
    runs = shown[:3]
    for attribute in (lambda t: t.line.color, lambda t: t.line.dash, lambda t: t.marker.symbol):
        assert len({attribute(t) for t in runs}) == 3


def test_stop_really_ends_a_background_run():
    panel = demo.race_panel(n_layers=1, steps=400, seeds=5, warmup=10)
    assert panel.run(background=True) is None
    deadline = time.time() + 30
    while panel.runner.progress.value < 3 and time.time() < deadline:
        time.sleep(0.02)
    assert panel.runner.running
    assert not panel.runner.start(lambda s, p: None)  # a second run is refused while one is going
    panel.runner.stop()
    panel.runner.join(timeout=10)
    assert not panel.runner.running
    assert panel.result is not None and panel.result.stopped
    trained = sum(len(h.loss) for hs in panel.result.histories.values() for h in hs)
    assert trained < 3 * 5 * 400
    assert "stopped" in panel.runner.status.value and "Stopped" in panel.summary.value


def test_deepnorm_scales_and_build_model():
    alpha, beta = demo.deepnorm_scales(4)
    assert alpha == pytest.approx(8 ** 0.25) and beta == pytest.approx(32 ** -0.25)
    plain = demo.build_model(2, "post", seed=3)
    both = demo.build_model(2, "post", seed=3, deepnorm="both")
    only_alpha = demo.build_model(2, "post", seed=3, deepnorm="alpha")
    only_beta = demo.build_model(2, "post", seed=3, deepnorm="beta")
    a, b = demo.deepnorm_scales(2)
    assert [blk.residual_scale for blk in both.blocks] == [a, a] and only_beta.blocks[0].residual_scale == 1.0
    assert only_alpha.blocks[1].residual_scale == a and plain.blocks[0].residual_scale == 1.0
    for name, value in plain.state_dict().items():
        scaled = any(k in name for k in ("linear1.weight", "linear2.weight", "v_proj.weight", "out_proj.weight"))
        for model, applies in ((both, True), (only_beta, True), (only_alpha, False)):
            expected = value * b if scaled and applies else value
            torch.testing.assert_close(model.state_dict()[name], expected)
    with pytest.raises(ValueError, match="deepnorm"):
        demo.build_model(2, "post", seed=0, deepnorm="gamma")


def test_token_spread():
    x = torch.randn(3, 5, 8)
    assert demo.token_spread(x.mean(1, keepdim=True).expand(3, 5, 8)) == pytest.approx(0.0, abs=1e-6)
    assert 0.5 < demo.token_spread(x) < 1.1
    assert demo.token_spread(10 * x) == pytest.approx(demo.token_spread(x), rel=1e-5)  # relative to the RMS
    profile = demo.spread_profile(demo.build_model(2, "pre", seed=0))
    assert len(profile) == 4 and all(p > 0 for p in profile)
    fig = demo.spread_figure({"Post-LN, no warmup (seed 0)": profile})
    assert fig.layout.yaxis.type == "log" and fig.layout.title.text
    # two models with the same profile: drawn side by side, not one over the other; ticks name the blocks
    two = demo.spread_figure({"Post-LN + warmup (seed 0)": profile, "Pre-LN, no warmup (seed 0)": profile})
    xs = [list(t.x) for t in two.data]
    assert xs[0] != xs[1] and all(abs(a - b) < 0.5 for a, b in zip(*xs))
    assert list(two.layout.xaxis.ticktext) == ["0", "1", "2", "logits"]
    assert len(two.layout.yaxis.title.text) <= 30  # a title that fits beside a 400-pixel plot


def test_ablation_removes_each_block_in_turn_and_puts_it_back():
    model = demo.build_model(3, "pre", seed=0)
    before = [b for b in model.blocks]
    losses = demo.ablation_losses(model)
    assert len(losses) == 4 and list(model.blocks) == before  # whole + one per block; the model is left whole
    assert demo.ablation_losses(model) == losses  # no state changed
    # the checks on made-up losses: idle later blocks and an essential block 1 hold; each part can fail
    assert all(demo.ablation_checks([0.01, 3.0, 0.012, 0.011]).values())
    assert not all(demo.ablation_checks([0.01, 3.0, 0.05, 0.011]).values())  # block 2 matters
    assert not all(demo.ablation_checks([0.01, 0.5, 0.012, 0.011]).values())  # block 1 not essential
    assert not all(demo.ablation_checks([0.01, 3.0, 0.012, 0.011], removable=(1,)).values())


def test_radam_checks_and_peak_rate_verdicts():
    verdicts = {"Post-LN, RAdam, no warmup": "learned", "Post-LN, no warmup": "stuck at chance"}
    moves = {"Post-LN, RAdam, no warmup": 0.026, "Post-LN, no warmup": 0.27, "Post-LN + warmup": 0.029}
    assert all(demo.radam_checks(verdicts, moves).values())
    assert not all(demo.radam_checks({**verdicts, "Post-LN, RAdam, no warmup": "stuck at chance"}, moves).values())
    assert not all(demo.radam_checks({**verdicts, "Post-LN, no warmup": "partial"}, moves).values())
    assert not all(demo.radam_checks(verdicts, {**moves, "Post-LN, RAdam, no warmup": 0.12}).values())  # big steps
    assert not all(demo.radam_checks(verdicts, {**moves, "Post-LN + warmup": 0.01}).values())
    assert not all(demo.radam_checks(verdicts, moves, "Post-LN, no warmup", "Post-LN, RAdam, no warmup").values())
    line = "lr 3e-3, warmup 50: partial, loss 1.0700; lr 1e-2, warmup 150: stuck at chance, loss 2.6900"
    assert demo.peak_rate_runs(line) == (("partial", 1.07), ("stuck at chance", 2.69))
    assert demo.peak_rate_holds(1.07, 2.69) and not demo.peak_rate_holds(2.69, 1.07)
    assert not demo.peak_rate_holds(1.5, 2.69)  # better, but not by half


def test_the_readers_account_and_its_control():
    # the measured profile: Pre-LN's W2 gradient falls and each step of the stream's gradient follows 1/sigma²; with
    # every sublayer reading LN(x.detach()) the stream's gradient is the head's alone, the same at every block
    pre = demo.readers_profile(8, "pre", inits=1)
    cut = demo.readers_profile(8, "pre", inits=1, cut=True)
    assert pre["corr"] > 0.9 and pre["step"].min() > 0
    assert cut["largest_step"] < 1e-6 and np.allclose(cut["g"], cut["g"][-1], rtol=1e-5)
    assert not demo.readers_holds(cut)
    # the test can fail on each of its two parts
    assert not demo.readers_holds({"grad_fall": 1.4, "corr": 0.99})
    assert not demo.readers_holds({"grad_fall": 3.0, "corr": 0.5})
    assert demo.readers_holds({"grad_fall": 3.0, "corr": 0.95})


def test_stream_growth_fits_a_line_to_the_squared_rms():
    rms = np.sqrt(1.5 + 0.9 * np.arange(25))[None, :]
    fit = demo.stream_growth(rms)
    assert fit["slope"] == pytest.approx(0.9) and fit["intercept"] == pytest.approx(1.5) and fit["r2"] > 0.999


def test_the_claim_tests_can_fail():
    ok = {"Post-LN, no warmup": ["stuck at chance"], "Post-LN + warmup": ["learned"], "Pre-LN, no warmup": ["learned"]}
    assert demo.race_claim_holds(ok) and demo.depth_race_holds({**ok, "Post-LN + warmup": ["stuck at chance"]})
    assert not demo.race_claim_holds({**ok, "Post-LN, no warmup": ["partial"]})
    assert not demo.depth_race_holds(ok)
    collapsed = {"Post-LN, no warmup": [0.9, 0.2, 0.01, 1e-4, 1e-6, 1e-6], "Post-LN + warmup": [0.9] * 6,
                 "Pre-LN, no warmup": [0.9] * 6}
    assert demo.collapse_holds(collapsed)
    assert not demo.collapse_holds({**collapsed, "Post-LN, no warmup": [0.9, 0.2, 0.3, 1e-4, 1e-6, 1e-6]})
    assert not demo.collapse_holds({**collapsed, "Pre-LN, no warmup": [0.9, 0.5, 0.2, 0.05, 0.01, 0.01]})


def test_steps_to_learn_and_who_gets_there_first():
    from course_utils.training import History
    h = History(accuracy=[0.1] * 10 + [0.9] * 10)
    assert demo.steps_to_learn(h) == 15 and demo.steps_to_learn(h, window=1) == 11
    assert demo.steps_to_learn(History(accuracy=[0.5] * 30)) is None
    assert demo.pre_ln_first({"Pre-LN, no warmup": [30, 40], "Post-LN + warmup": [50, None]})
    assert not demo.pre_ln_first({"Pre-LN, no warmup": [30, 60], "Post-LN + warmup": [50, 55]})
    assert not demo.pre_ln_first({"Pre-LN, no warmup": [None], "Post-LN + warmup": [None]})


def test_readout_logit_rms_grows_with_depth_without_the_final_norm():
    rms = demo.readout_logit_rms(seed=0, n_layers=8)
    assert len(rms) == 9 and rms[-1] > rms[0]


def test_every_claim_of_the_notebook_has_an_experiment_with_a_control():
    from course_utils.evidence import EXPERIMENTS
    mine = {c: e for c, e in EXPERIMENTS.items() if e.notebook == "04_pre_vs_post_ln"}
    assert set(mine) >= {"C43", "C44", "C45", "C46", "C47", "C48", "C66", "C67", "C68", "C69"}
    assert all(any(not s.expect for s in e.settings) for c, e in mine.items() if c not in ("C47", "C48", "C68"))


def test_cheap_claim_experiments_hold_at_the_notebooks_seed():
    from course_utils.evidence import EXPERIMENTS
    lessons = lesson_functions("04_pre_vs_post_ln")
    for claim in ("C43", "C46", "C69"):
        for setting in EXPERIMENTS[claim].settings:
            torch.manual_seed(0)
            assert EXPERIMENTS[claim].run(0, setting, lessons).holds == setting.expect, (claim, setting.label)


def test_build_model_takes_another_width_and_activation():
    model = demo.build_model(2, "post", seed=0, d_model=32, activation="gelu")
    assert model.tok_emb.weight.shape[1] == 32 and isinstance(model.blocks[0].ffn.activation, torch.nn.GELU)
    plain = demo.build_model(2, "post", seed=0)
    assert plain.tok_emb.weight.shape[1] == demo.MODEL["d_model"] and isinstance(plain.blocks[0].ffn.activation,
                                                                                 torch.nn.ReLU)


def test_the_named_checks_fail_on_a_plausible_wrong_input():
    torch.manual_seed(0)
    block = demo.TransformerBlock(64, 4, placement="pre")
    x = 3 * torch.randn(2, 10, 64, generator=torch.Generator().manual_seed(0)) + 1
    out_post, out_pre = demo.both_placements(block, x)
    assert all(demo.stream_checks(out_post, out_pre).values())
    assert not any(demo.stream_checks(out_pre, out_post).values())  # the placements swapped: every check fails
    layers = np.arange(25)
    data = {(24, "pre"): {"rms": np.sqrt(1.0 + 0.5 * layers)[None, :], "update": np.array([1 / (1 + layers[1:])])},
            (24, "post"): {"rms": 1 + 1e-3 * np.sin(layers)[None, :], "update": np.ones((1, 24))}}
    assert all(demo.growth_checks(data).values())
    assert not all(demo.growth_checks(data, placement="post").values())  # a flat stream does not grow
    assert all(demo.update_checks(data).values())
    assert not all(demo.update_checks({(24, "pre"): data[24, "post"], (24, "post"): data[24, "pre"]}).values())
    flat, steep = [2.7] * 25, [2.7 + 0.5 * d for d in range(25)]
    assert all(demo.readout_checks(flat, steep).values()) and not any(demo.readout_checks(steep, flat).values())
    assert demo.trained_update_holds("pre", [0.9, 0.2, 0.1], [1.0, 4.0, 5.5, 6.0])
    assert not demo.trained_update_holds("post", [0.9, 0.2, 0.1], [1.0, 4.0, 5.5, 6.0])
    assert demo.trained_update_holds("post", [0.9, 0.8, 0.7], [1.0, 1.0, 1.1, 0.9])
    assert demo.adam_step_holds(demo.first_step(1.0), demo.first_step(1e3))
    assert not demo.adam_step_holds(demo.first_step(1.0, "sgd"), demo.first_step(1e3, "sgd"))


def test_c44_records_other_widths_without_claiming_them():
    from course_utils.evidence import EXPERIMENTS
    exp = EXPERIMENTS["C44"]
    recorded = [s for s in exp.settings if s.params.get("claimed") is False]
    assert {s.params["d_model"] for s in recorded} == set(demo.C44_WIDTHS)
    assert all(s.fixed and not s.expect and s.label == demo.c44_width_label(s.params["d_model"]) for s in recorded)
    assert {s.params.get("activation") for s in exp.settings} >= {"gelu"}

    def rising(n_layers, placement, seed, emb_scale=1.0, **arch):  # Post-LN's gradients grow to the output
        up = np.linspace(1.0, 2.0, n_layers) if placement == "post" else np.linspace(2.0, 1.0, n_layers)
        return {"W1": up.tolist(), "W2": up.tolist(), "rms": [1.0] * (n_layers + 1), "update": [0.5] * n_layers}

    outcome = exp.function(seed=0, measure_at_init=rising, d_model=32, claimed=False)
    assert not outcome.holds and outcome.detail.startswith("not claimed")


def test_report_verdicts_read_one_arm_of_a_committed_report():
    label = demo.report_labels("C45")[0]
    verdicts = demo.report_verdicts("C45", label, "Post-LN, no warmup")
    assert len(verdicts) == 6 and set(verdicts) <= {"learned", "partial", "stuck at chance"}
    assert demo.report_verdicts("C45", label, "no such arm") == []
    assert demo.report_verdicts("C45", "no such setting", "Post-LN, no warmup") == []

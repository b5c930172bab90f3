"""Notebook 00's demos: the 48-block float16 opening and its controls, the block diagram, the first slider panel, and
the facts its quiz keys rest on."""
import math

import pytest
import torch

from course_utils.demos import start_here as sh
from course_utils.quiz import load_quiz


@pytest.fixture(scope="module")
def runs():
    return sh.hook_runs()


def test_the_opening_claim_holds_at_the_notebooks_seed(runs):
    no_norm, pre, post = runs["no norm"], runs["Pre-LN"], runs["Post-LN"]
    assert not math.isfinite(no_norm.rms[-1]) and runs["no norm, float64"].rms[-1] > 1e8
    assert pre.all_finite and 3 < pre.rms[-1] < 20
    assert post.all_finite and max(abs(r - 1) for r in post.rms[1:]) < 0.01


def test_float16_breaks_in_the_attention_scores_while_the_stream_is_small(runs):
    no_norm, wide = runs["no norm"], runs["no norm, float64"]
    k = no_norm.first_bad
    assert k is not None and not math.isfinite(no_norm.max_score[k - 1])
    assert all(math.isfinite(s) for s in no_norm.max_score[:k - 1])
    assert no_norm.largest[k - 1] < sh.FLOAT16_MAX / 10
    # the float64 run of the same stack: its stream passes 65504 only many blocks later
    first_big = next(i for i, v in enumerate(wide.largest) if v > sh.FLOAT16_MAX)
    assert first_big > k + 5


@pytest.mark.parametrize("kwargs", [{"depth": 8}, {"branch_scale": 0.1}], ids=["shallow", "small branches"])
def test_the_controls_survive_without_a_norm(kwargs):
    run = sh.deep_stack("no norm", **kwargs)
    assert run.all_finite and run.first_bad is None


def test_the_claim_experiment_says_the_shallow_control_does_not_hold():
    assert not sh.c76_float16_stack(0, depth=8).holds


def test_the_float16_and_float64_runs_agree_before_the_overflow(runs):
    k = runs["no norm"].first_bad
    for a, b in zip(runs["no norm"].rms[:k - 1], runs["no norm, float64"].rms[:k - 1]):
        assert a == pytest.approx(b, rel=0.05)


def test_a_deep_stack_leaves_the_global_random_numbers_alone():
    before = torch.random.get_rng_state()
    sh.deep_stack("Pre-LN", depth=2)
    assert torch.equal(before, torch.random.get_rng_state())
    assert sh.deep_stack("Pre-LN", depth=2).rms == sh.deep_stack("Pre-LN", depth=2).rms


def test_a_deep_stack_refuses_an_unknown_arm():
    with pytest.raises(ValueError, match="arm must be one of"):
        sh.deep_stack("LayerNorm")


def test_the_pre_ln_stream_grows_like_the_square_root_of_depth_as_quiz_q5_says():
    """q5's key: four times the depth, about twice the RMS. A 192-block TinyLM's first 48 blocks are the 48-block one's
    (parameters are drawn in order), so one run gives both; float32 here, float16 agrees to three digits."""
    quiz = load_quiz("00_start_here")
    for seed in range(3):
        run = sh.deep_stack("Pre-LN", 192, dtype=torch.float32, seed=seed)
        ratio = run.rms[192] / run.rms[48]
        assert quiz.grade("q5", ratio).status == "correct", (seed, ratio)


def test_the_first_48_blocks_of_a_deeper_stack_are_the_48_block_stack():
    short, long = sh.deep_stack("Pre-LN", 6, dtype=torch.float32), sh.deep_stack("Pre-LN", 12, dtype=torch.float32)
    assert long.rms[:7] == pytest.approx(short.rms, rel=1e-6)


def test_the_hook_figure_shows_every_run_and_the_float16_limit(runs):
    fig = sh.hook_figure(runs)
    assert [t.name for t in fig.data] == ["no norm (float16)", "Pre-LN (float16)", "Post-LN (float16)",
                                          "no norm, float64"]
    assert fig.layout.yaxis.type == "log" and fig.layout.title.text and fig.layout.xaxis.title.text
    assert any(s.y0 == sh.FLOAT16_MAX for s in fig.layout.shapes)
    assert any(s.x0 == runs["no norm"].first_bad for s in fig.layout.shapes)
    assert "nan from block" in " ".join(a.text for a in fig.layout.annotations)


def test_the_hook_figure_and_the_slider_panel_tell_their_traces_apart_without_colour(runs):
    lines = sh.hook_figure(runs).data
    assert len({(t.line.dash, t.marker.symbol) for t in lines}) == len(lines)
    bars = sh.first_slider_panel().outputs[1].data
    assert len({t.marker.pattern.shape for t in bars}) == len(bars) == 2


def test_the_block_diagram_follows_its_column():
    """No fixed width: the figure takes the width of the notebook's column, on a laptop or a projector."""
    assert sh.block_diagram().layout.width is None


def test_the_hook_table_prints_each_run_at_the_listed_blocks(runs):
    lines = sh.hook_table(runs).splitlines()
    assert len(lines) == 1 + len(runs) + 1 and "factor of about" in lines[-1]
    assert lines[0].split()[-5:] == ["0", "6", "12", "24", "48"]


def test_the_block_diagram_places_the_norms_and_names_their_notebooks():
    fig = sh.block_diagram()
    texts = [a.text for a in fig.layout.annotations]
    assert texts.count("LayerNorm") == 4 and "final LayerNorm" in texts  # Pre-LN: 2 + final; Post-LN: 2
    assert texts.count("attention") == 2 and texts.count("feed-forward") == 2
    assert sum(t == "<b>+</b>" for t in texts) == 4  # one addition per sublayer
    notes = " ".join(texts)
    for notebook in ("01", "02", "03", "04", "05", "06"):
        assert f": {notebook}" in notes, notebook
    assert "Pre-LN" in notes and "Post-LN" in notes
    assert [t.name for t in fig.data] == ["residual stream x", "norm (LayerNorm, or RMSNorm)",
                                          "sublayer f (attention or feed-forward)"]
    assert not fig.layout.images  # drawn from shapes, nothing downloaded


def test_layernorm_ignores_the_moves_the_notebook_checks_but_not_a_tiny_scale():
    assert max(sh.invariance_deviations().values()) < 1e-3
    assert sh.invariance_deviations([(0.0, 0.01)])[(0.0, 0.01)] > 1e-2
    assert sh.c77_invariance(0).holds and not sh.c77_invariance(0, moves=((0.0, 0.01),)).holds


def test_shifted_token_refuses_a_negative_scale():
    with pytest.raises(ValueError, match="scale must be > 0"):
        sh.shifted_token(0.0, -1.0)


def test_the_first_slider_panel_refreshes_across_its_range():
    panel = sh.first_slider_panel()
    assert panel.last_error is None
    for shift, scale in [(-20.0, 0.1), (20.0, 10.0), (0.0, 1.0)]:
        assert panel.set(shift=shift, scale=scale), panel.last_error


def test_the_claim_checks_fail_on_the_controls(runs):
    assert all(sh.hook_checks(runs).values())
    shallow = sh.hook_runs(depth=8)  # the stack without a norm stays finite: nothing is lost
    assert not sh.hook_checks(shallow)["no norm: float16 has lost the stream by the last block"]
    assert sh.invariant(sh.invariance_deviations())
    assert not sh.invariant(sh.invariance_deviations([(0.0, 0.01)]))


def test_with_pytorchs_fused_attention_the_stream_overflows_first_and_later():
    race = sh.attention_race(0)
    ours, sdpa = race["course"], race["sdpa"]
    assert all(sh.attention_checks(race).values())
    assert not math.isfinite(ours.max_score[ours.first_bad - 1])
    assert math.isfinite(sdpa.max_score[sdpa.first_bad - 2])  # SDPA's scores (float32 inside) were finite up to there
    assert sdpa.first_bad >= 2 * ours.first_bad - 1
    assert not all(sh.attention_checks(sh.attention_race(0, depth=8)).values())  # the control: nothing overflows


def test_deep_stack_refuses_an_unknown_attention():
    with pytest.raises(ValueError, match="attention must be one of"):
        sh.deep_stack(attention="flash")

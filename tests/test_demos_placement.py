"""Notebook 04's demo module: the diagram, the measurements at initialization, the race and its panels."""
import math
import time

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
    post_trace = panel.figures["grad"].data[0]
    assert list(post_trace.x) == [1, 2, 3, 4] or list(post_trace.x) == [1, 2]
    assert panel.figures["rms"].data[2].name.startswith("sqrt(")


def test_init_panel_rejects_nonsense_with_a_message(small_init_panel):
    panel = small_init_panel
    with pytest.raises(ValueError, match="was not measured"):
        panel.update(depth=7, weight="W2 (linear2)", spread=False)
    with pytest.raises(ValueError, match="weight must be"):
        panel.update(depth=2, weight="W9", spread=False)
    panel.controls["weight"].options = ["W2 (linear2)", "W1 (linear1)", "W9"]  # a value the handler refuses
    assert not panel.set(weight="W9")
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

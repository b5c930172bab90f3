"""Notebook 06's demo module: attention under scaled q and k, soft-capping, the training lab."""
import math

import pytest
import torch

from course_utils.demos import qk_norm as demo
from course_utils.panel import PANELS, build_panel
from course_utils.training import History

OURS = sorted(name for name, (notebook, _) in PANELS.items() if notebook == "06_qk_norm_and_softcapping")


def test_the_notebook_registers_its_three_panels():
    """tests/test_panel.py sweeps every registered panel (these draw every setting); latency: course_utils.bench."""
    assert OURS == ["attention_panel", "softcap_panel", "training_panel"]


@pytest.mark.parametrize("name, nonsense, words", [
    ("attention_panel", {"scale_q": -1.0, "scale_k": 1.0, "gain": 1.0}, "query scale"),
    ("attention_panel", {"scale_q": 1.0, "scale_k": float("nan"), "gain": 1.0}, "key scale"),
    ("softcap_panel", {"cap": 0.0, "top_logit": 20.0}, "cap"),
    ("training_panel", {"condition": "no QK-norm", "lr": 5.0, "cap": 50.0, "steps": 100, "seed": 0}, "learning rate"),
    ("training_panel", {"condition": "dropout", "lr": 0.1, "cap": 50.0, "steps": 100, "seed": 0}, "condition"),
])
def test_nonsense_shows_a_message_and_does_not_raise(name, nonsense, words):
    panel = build_panel(name)
    panel.values = lambda: nonsense  # as if the controls held these values
    assert panel.refresh() is False
    assert words in panel.message.value and panel.last_error


def test_saturated_softmax_is_one_hot_with_a_vanishing_jacobian():
    q, k = demo.probe_qk()
    p_soft = (q @ k.T / math.sqrt(q.shape[-1])).softmax(-1)
    p_hard = (10 * q @ (10 * k).T / math.sqrt(q.shape[-1])).softmax(-1)
    assert float(demo.row_entropy(p_hard).mean()) < 0.05 < float(demo.row_entropy(p_soft).mean())
    assert float(demo.softmax_jacobian_norm(p_hard).mean()) < 0.05 * float(demo.softmax_jacobian_norm(p_soft).mean())


def test_softmax_jacobian_norm_matches_autograd():
    z = torch.randn(5, dtype=torch.float64)
    jac = torch.autograd.functional.jacobian(lambda t: t.softmax(-1), z)
    torch.testing.assert_close(demo.softmax_jacobian_norm(z.softmax(-1)), jac.norm())


def test_entropy_is_zero_for_one_hot_and_log_n_for_uniform():
    torch.testing.assert_close(demo.row_entropy(torch.eye(4)), torch.zeros(4))
    torch.testing.assert_close(demo.row_entropy(torch.full((4,), 0.25)), torch.tensor(math.log(4)))


def test_next_token_logits():
    z = demo.next_token_logits(42.0)
    assert z.shape == (1000,) and math.isclose(float(z.max()), 42.0)
    with pytest.raises(ValueError):
        demo.next_token_logits(-1.0)


def test_make_model_builds_each_condition():
    plain, normed, capped, rms = (demo.make_model(c, seed=0, cap=7.0) for c in demo.LAB_CONDITIONS)
    assert plain.blocks[0].attn.qk_norm is None and plain.blocks[0].attn.attn_softcap is None
    assert normed.blocks[0].attn.qk_norm == "layer" and rms.blocks[0].attn.qk_norm == "rms"
    assert capped.blocks[0].attn.attn_softcap == 7.0
    with pytest.raises(ValueError, match="condition"):
        demo.make_model("dropout", seed=0)


def test_qk_gain_bound_holds_even_with_large_weights():
    model = demo.make_model("QK-norm", seed=3)
    with torch.no_grad():
        for block in model.blocks:
            block.attn.q_proj.weight.mul_(100)
            block.attn.q_norm.weight.uniform_(-3, 3)
            block.attn.k_norm.bias.normal_()
    idx = torch.randint(1, 16, (4, 16), generator=torch.Generator().manual_seed(0))
    model(idx)
    assert model.max_attention_logit() <= demo.qk_gain_bound(model)
    with pytest.raises(ValueError, match="no QK-norm"):
        demo.qk_gain_bound(demo.make_model("no QK-norm", seed=0))


def test_attention_saturation_of_an_untrained_model_is_in_range():
    a = demo.attention_saturation(demo.make_model("soft-cap 50", seed=0))
    assert 0 < a["entropy"] < a["uniform_entropy"] and 0 < a["max_weight"] <= 1
    assert 0.9 < a["cap_slope"] <= 1 and a["share_beyond"] == 0  # small logits at initialization: the cap is ~identity


def test_live_callback_redraws_every_few_steps():
    fig = demo.logit_growth_figure([("no QK-norm", 0), ("QK-norm", 1)])
    assert len(fig.data) == 4
    h = History()
    callback = demo.live_callback(fig, 1, every=5)
    for step in range(7):
        h.step.append(step), h.loss.append(3.0), h.max_logit.append(10.0 ** step)
        callback(step, h)
    assert len(fig.data[2].x) == 5 and len(fig.data[3].y) == 5 and not fig.data[0].x


def test_training_lab_trains_synchronously_keeps_every_run_and_draws():
    lab = demo.TrainingLab()
    assert lab.set(condition="QK-norm", steps=20, seed=1) and "s on this machine" in lab.plan.value
    result = lab.run(background=False)
    assert result is lab.result is lab.runs[-1]
    assert len(result["history"].loss) == 20 and result["condition"] == "QK-norm"
    assert len(lab.fig.data) == 2 and len(lab.fig.data[0].y) == 20
    assert "done" in lab.runner.status.value
    assert lab.set(condition="no QK-norm") and lab.run(background=False) is lab.runs[-1]
    assert [r["condition"] for r in lab.runs] == ["QK-norm", "no QK-norm"] and len(lab.fig.data) == 4
    lab.clear()
    assert not lab.fig.data and not lab.runs and lab.result is None


def test_training_lab_background_run_can_be_stopped():
    lab = demo.TrainingLab()
    lab.set(steps=1000)
    assert lab.run(background=True) is None and lab.runner.running
    assert not lab.start(background=True)  # a second run is refused while one is going
    lab.runner.stop()
    lab.runner.join(timeout=30)
    assert not lab.runner.running
    history = lab.result["history"]
    assert history.stopped and len(history.loss) < 1000


def test_the_notebook_and_the_lab_train_the_same_recipe():
    """Notebook 06 builds its runs with make_model and train_with_recipe; the lab at the recipe's lr trains the same."""
    lab = demo.TrainingLab()
    assert lab.set(condition="soft-cap 50", steps=20, seed=2)
    by_hand = demo.train_with_recipe(demo.make_model("soft-cap 50", 2), 2, 20)
    assert lab.run(background=False)["history"].loss == by_hand.loss

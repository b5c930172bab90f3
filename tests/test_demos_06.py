"""Notebook 06's demo module: attention under scaled q and k, soft-capping, the training lab, the two checkers."""
import math

import pytest
import torch

from course_utils.demos import qk_norm as demo
from course_utils.panel import PANELS
from course_utils.training import History
from course_utils.transformer import softcap

OURS = sorted(name for name, (notebook, _) in PANELS.items() if notebook == "06_qk_norm_and_softcapping")


def test_the_notebook_registers_its_three_panels():
    assert OURS == ["attention_panel", "softcap_panel", "training_panel"]


@pytest.mark.parametrize("name", OURS)
def test_every_setting_of_the_sweep_refreshes(name):
    panel = PANELS[name][1]()
    failures = [(values, panel.last_error) for values in panel.sweep() if not panel.set(**values)]
    assert not failures, failures[:3]


@pytest.mark.parametrize("name, nonsense, words", [
    ("attention_panel", {"scale_q": -1.0, "scale_k": 1.0, "gain": 1.0}, "query scale"),
    ("attention_panel", {"scale_q": 1.0, "scale_k": float("nan"), "gain": 1.0}, "key scale"),
    ("softcap_panel", {"cap": 0.0, "top_logit": 20.0}, "cap"),
    ("training_panel", {"condition": "no QK-norm", "lr": 5.0, "cap": 50.0, "steps": 100, "seed": 0}, "learning rate"),
    ("training_panel", {"condition": "dropout", "lr": 0.1, "cap": 50.0, "steps": 100, "seed": 0}, "condition"),
])
def test_nonsense_shows_a_message_and_does_not_raise(name, nonsense, words):
    panel = PANELS[name][1]()
    panel.values = lambda: nonsense  # as if the controls held these values
    assert panel.refresh() is False
    assert words in panel.message.value and panel.last_error


def test_logits_scale_with_the_product_of_the_scales_and_qk_norm_removes_it():
    q, k = demo.probe_qk()
    _, z1 = demo.attention_probs(q, k)
    _, z = demo.attention_probs(3 * q, 0.5 * k)
    torch.testing.assert_close(z, 1.5 * z1)
    p1, zn1 = demo.attention_probs(q, k, qk_norm=True, gain=2.0)
    p2, zn2 = demo.attention_probs(50 * q, 0.1 * k, qk_norm=True, gain=2.0)
    torch.testing.assert_close(p1, p2, atol=1e-4, rtol=0)  # eps weighs a little at scale 0.1
    assert zn2.abs().max() <= math.sqrt(q.shape[-1]) * 2.0**2


def test_saturated_softmax_is_one_hot_with_a_vanishing_jacobian():
    q, k = demo.probe_qk()
    p_soft, _ = demo.attention_probs(q, k)
    p_hard, _ = demo.attention_probs(10 * q, 10 * k)
    assert float(demo.row_entropy(p_hard).mean()) < 0.05 < float(demo.row_entropy(p_soft).mean())
    assert float(demo.softmax_jacobian_norm(p_hard).mean()) < 0.05 * float(demo.softmax_jacobian_norm(p_soft).mean())


def test_softmax_jacobian_norm_matches_autograd():
    z = torch.randn(5, dtype=torch.float64)
    jac = torch.autograd.functional.jacobian(lambda t: t.softmax(-1), z)
    torch.testing.assert_close(demo.softmax_jacobian_norm(z.softmax(-1)), jac.norm())


def test_entropy_is_zero_for_one_hot_and_log_n_for_uniform():
    torch.testing.assert_close(demo.row_entropy(torch.eye(4)), torch.zeros(4))
    torch.testing.assert_close(demo.row_entropy(torch.full((4,), 0.25)), torch.tensor(math.log(4)))


def test_softcap_reference_and_next_token_logits():
    x = torch.linspace(-500, 500, 1001, dtype=torch.float64)
    torch.testing.assert_close(demo.softcap_logits(x, 30.0), softcap(x, 30.0))
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


def test_training_lab_trains_synchronously_and_draws():
    lab = demo.TrainingLab()
    assert lab.panel.set(condition="QK-norm", steps=20, seed=1)
    assert lab.run(background=False)
    result = lab.results[-1]
    assert len(result["history"].loss) == 20 and result["condition"] == "QK-norm"
    assert len(lab.fig.data) == 2 and len(lab.fig.data[0].y) == 20
    assert "done" in lab.runner.status.value
    lab.clear()
    assert not lab.fig.data and not lab.results


def test_training_lab_background_run_can_be_stopped():
    lab = demo.TrainingLab()
    lab.panel.set(steps=1000)
    assert lab.run(background=True)
    assert not lab.run(background=True)  # a second run is refused while one is going
    lab.runner.stop()
    lab.runner.join(timeout=30)
    assert not lab.runner.running
    history = lab.results[-1]["history"]
    assert history.stopped and len(history.loss) < 1000


def test_check_softcap_passes_the_right_answer_and_catches_wrong_ones():
    assert demo.check_softcap(lambda x, cap: cap * torch.tanh(x / cap)).passed
    for wrong in (lambda x, cap: x.clamp(-cap, cap), lambda x, cap: cap * torch.tanh(x),
                  lambda x, cap: torch.tanh(x / cap)):
        assert not demo.check_softcap(wrong).passed

    def unfinished(x, cap):
        raise NotImplementedError
    assert "not implemented" in demo.check_softcap(unfinished).first_failure.detail


def rms(x, w, eps, dim=-1):
    return w * x / x.pow(2).mean(dim, keepdim=True).add(eps).sqrt()


def test_check_qk_norm_logits_passes_the_right_answer_and_catches_wrong_ones():
    right = lambda q, k, wq, wk, eps: rms(q, wq, eps) @ rms(k, wk, eps).transpose(-2, -1) / math.sqrt(q.shape[-1])
    assert demo.check_qk_norm_logits(right).passed
    wrongs = [
        lambda q, k, wq, wk, eps: rms(q, wq, eps, -2) @ rms(k, wk, eps, -2).transpose(-2, -1) / math.sqrt(q.shape[-1]),
        lambda q, k, wq, wk, eps: rms(q, wq, eps) @ rms(k, wk, eps).transpose(-2, -1),
        lambda q, k, wq, wk, eps: rms(q, 1.0, eps) @ rms(k, 1.0, eps).transpose(-2, -1) / math.sqrt(q.shape[-1]),
        lambda q, k, wq, wk, eps: (rms(q, wq, eps) @ rms(k, wk, eps).transpose(-2, -1) / math.sqrt(q.shape[-1])
                                   ).detach(),
    ]
    for wrong in wrongs:
        assert not demo.check_qk_norm_logits(wrong).passed

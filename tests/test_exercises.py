"""The checkers catch the classic mistakes, pass correct answers, and never raise."""
import math

import pytest
import torch

from course_utils import exercises, norms


def _layer_norm_unbiased(x, w, b, eps):
    return (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True) + eps) * w + b


def _layer_norm_eps_on_std(x, w, b, eps):
    return (x - x.mean(-1, keepdim=True)) / (x.var(-1, keepdim=True, unbiased=False).sqrt() + eps) * w + b


def _layer_norm_detached(x, w, b, eps):
    return norms.layer_norm(x.detach(), None, w, b, eps)


@pytest.mark.filterwarnings("ignore:var.*degrees of freedom:UserWarning")  # the unbiased mistake on d = 1
def test_layer_norm_checker():
    assert exercises.check_layer_norm(lambda x, w, b, eps: norms.layer_norm(x, None, w, b, eps)).passed
    for wrong in (_layer_norm_unbiased, _layer_norm_eps_on_std, _layer_norm_detached):
        report = exercises.check_layer_norm(wrong)
        assert not report.passed and report.first_failure.detail, wrong.__name__
    detached = exercises.check_layer_norm(_layer_norm_detached)
    assert "gradient" in detached.first_failure.detail


def test_rms_norm_checker():
    assert exercises.check_rms_norm(lambda x, w, eps: norms.rms_norm(x, None, w, eps)).passed
    centred = exercises.check_rms_norm(lambda x, w, eps: norms.rms_norm(x - x.mean(-1, keepdim=True), None, w, eps))
    assert not centred.passed
    no_eps = exercises.check_rms_norm(lambda x, w, eps: x / x.pow(2).mean(-1, keepdim=True).sqrt() * w)
    tiny = next(c for c in no_eps.cases if "tiny scale" in c.name)
    assert not no_eps.passed and not tiny.passed and tiny.max_error > 1e-2


def test_masked_batch_stats_checker_explains_the_unbiased_variance():
    assert exercises.check_masked_batch_stats(lambda x, m: norms.masked_mean_var(x, m)[:2]).passed
    unbiased = exercises.check_masked_batch_stats(lambda x, m: (x[m].mean(0), x[m].var(0)))
    assert not unbiased.passed and "unbiased" in unbiased.first_failure.detail
    padded = exercises.check_masked_batch_stats(
        lambda x, m: (x.flatten(0, 1).mean(0), x.flatten(0, 1).var(0, unbiased=False)))
    assert not padded.passed


def test_post_ln_checker():
    def post(block, x):
        x = block.norm1(x + block.attn(x))
        return block.norm2(x + block.ffn(x))
    assert exercises.check_post_ln_forward(post).passed
    assert not exercises.check_post_ln_forward(lambda block, x: block(x)).passed


def test_checkers_never_raise_on_broken_answers():
    def not_done(*args):
        raise NotImplementedError

    for check in (exercises.check_layer_norm, exercises.check_rms_norm, exercises.check_masked_batch_stats,
                  exercises.check_post_ln_forward, exercises.check_depth_scaled_gain, exercises.check_softcap,
                  exercises.check_qk_norm_logits):
        for fn in (not_done, lambda *a: None, lambda *a: "text", lambda *a: 1 / 0):
            report = check(fn)
            assert not report.passed and report.text() and report._repr_html_()
    assert "not implemented" in exercises.check_layer_norm(not_done).first_failure.detail


def test_depth_scaled_gain_checker():
    assert exercises.check_depth_scaled_gain(exercises.depth_scaled_gain).passed
    wrong = exercises.check_depth_scaled_gain(lambda depth: 1 / math.sqrt(depth))
    assert not wrong.passed and "target 2x" in wrong.first_failure.detail
    assert "stack grew" in wrong.first_failure.detail  # a depth the course's stack reaches is also run for real

    def unfinished(depth):
        raise NotImplementedError

    assert "not implemented" in exercises.check_depth_scaled_gain(unfinished).first_failure.detail
    assert not exercises.check_depth_scaled_gain(lambda depth: "0.1").passed
    assert not exercises.check_depth_scaled_gain(lambda depth: 1 / 0).passed


def test_softcap_checker():
    assert exercises.check_softcap(lambda x, cap: cap * torch.tanh(x / cap)).passed
    for wrong in (lambda x, cap: x.clamp(-cap, cap), lambda x, cap: cap * torch.tanh(x),
                  lambda x, cap: torch.tanh(x / cap)):
        assert not exercises.check_softcap(wrong).passed

    def unfinished(x, cap):
        raise NotImplementedError
    assert "not implemented" in exercises.check_softcap(unfinished).first_failure.detail


def _rms(x, w, eps, dim=-1):
    return w * x / x.pow(2).mean(dim, keepdim=True).add(eps).sqrt()


def test_qk_norm_logits_checker():
    right = lambda q, k, wq, wk, eps: _rms(q, wq, eps) @ _rms(k, wk, eps).transpose(-2, -1) / math.sqrt(q.shape[-1])
    assert exercises.check_qk_norm_logits(right).passed
    wrongs = [
        lambda q, k, wq, wk, eps: (_rms(q, wq, eps, -2) @ _rms(k, wk, eps, -2).transpose(-2, -1)
                                   / math.sqrt(q.shape[-1])),
        lambda q, k, wq, wk, eps: _rms(q, wq, eps) @ _rms(k, wk, eps).transpose(-2, -1),
        lambda q, k, wq, wk, eps: _rms(q, 1.0, eps) @ _rms(k, 1.0, eps).transpose(-2, -1) / math.sqrt(q.shape[-1]),
        lambda q, k, wq, wk, eps: (_rms(q, wq, eps) @ _rms(k, wk, eps).transpose(-2, -1) / math.sqrt(q.shape[-1])
                                   ).detach(),
    ]
    for wrong in wrongs:
        assert not exercises.check_qk_norm_logits(wrong).passed


def test_a_checker_leaves_the_learners_random_state_alone():
    torch.manual_seed(123)
    before = torch.get_rng_state()
    exercises.check_post_ln_forward(lambda block, x: x)
    assert torch.equal(torch.get_rng_state(), before)

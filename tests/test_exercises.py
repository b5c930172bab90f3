"""The checkers catch the classic mistakes, pass correct answers, and never raise."""
import inspect
import math

import pytest
import torch

from course_utils import exercises, norms
from course_utils.transformer import TransformerBlock


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


def test_masked_batch_stats_checker_rejects_the_one_pass_variance_and_says_why():
    one_pass = exercises.check_masked_batch_stats(lambda x, m: (x[m].mean(0), (x[m] ** 2).mean(0) - x[m].mean(0) ** 2))
    assert not one_pass.passed and "catastrophic cancellation" in one_pass.first_failure.detail
    large_mean = next(c for c in one_pass.cases if c.name.startswith("mean 1e4"))
    assert not large_mean.passed and large_mean.max_error > 1.0  # the variance is about 1: every digit is lost


def _post(block, x, norm1=None, norm2=None):
    x = (norm1 or block.norm1)(x + block.attn(x))
    return (norm2 or block.norm2)(x + block.ffn(x))


def test_post_ln_checker():
    assert exercises.check_post_ln_forward(_post).passed
    assert not exercises.check_post_ln_forward(lambda block, x: block(x)).passed
    swapped = exercises.check_post_ln_forward(lambda block, x: _post(block, x, block.norm2, block.norm1))
    twice = exercises.check_post_ln_forward(lambda block, x: _post(block, x, block.norm1, block.norm1))
    assert "swapped" in swapped.first_failure.detail and "norm1 is used for both" in twice.first_failure.detail


def test_post_ln_checker_rejects_calling_the_block_and_puts_it_back():
    blocks = []

    def via_the_module(block, x):
        blocks.append(block)
        block.placement = "post"
        return block(x)

    report = exercises.check_post_ln_forward(via_the_module)
    assert not report.passed and report.first_failure.detail == (
        "write the Post-LN update from block.attn, block.ffn, block.norm1 and block.norm2; calling the block itself "
        "is not the exercise")
    assert blocks and all(block.placement == "pre" for block in blocks)


def test_deepnorm_checker():
    def deepnorm(block, x, alpha):
        h = block.norm1(alpha * x + block.attn(x))
        return block.norm2(alpha * h + block.ffn(h))

    assert exercises.check_deepnorm_forward(deepnorm).passed
    post_ln = exercises.check_deepnorm_forward(lambda block, x, alpha: _post(block, x))
    assert not post_ln.passed and post_ln.cases[0].passed  # alpha = 1 is a case, where DeepNorm is Post-LN
    assert "α is missing" in post_ln.first_failure.detail
    called = exercises.check_deepnorm_forward(lambda block, x, alpha: block(x))
    assert "calling the block itself is not the exercise" in called.first_failure.detail


@pytest.mark.skipif("residual_scale" not in inspect.signature(TransformerBlock).parameters,
                    reason="TransformerBlock has no DeepNorm option yet")
def test_the_deepnorm_reference_agrees_with_the_blocks_deepnorm_option():
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    for alpha in (1.0, 12 ** 0.25, 3.0):
        block = TransformerBlock(16, 4, placement="post", residual_scale=alpha).double()
        torch.testing.assert_close(exercises._deepnorm(block, x, alpha), block(x), rtol=0, atol=1e-12)


def test_checkers_never_raise_on_broken_answers():
    def not_done(*args):
        raise NotImplementedError

    for check in (exercises.check_layer_norm, exercises.check_rms_norm, exercises.check_masked_batch_stats,
                  exercises.check_post_ln_forward, exercises.check_deepnorm_forward, exercises.check_deepnorm_init,
                  exercises.check_depth_scaled_gain, exercises.check_softcap,
                  exercises.check_qk_norm_logits, exercises.check_attention_probs):
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
    exercises.check_deepnorm_forward(lambda block, x, alpha: x)
    assert torch.equal(torch.get_rng_state(), before)

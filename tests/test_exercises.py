"""The checkers catch the classic mistakes, pass correct answers, and never raise."""
import torch

from course_utils import exercises, norms


def _layer_norm_unbiased(x, w, b, eps):
    return (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True) + eps) * w + b


def _layer_norm_eps_on_std(x, w, b, eps):
    return (x - x.mean(-1, keepdim=True)) / (x.var(-1, keepdim=True, unbiased=False).sqrt() + eps) * w + b


def _layer_norm_detached(x, w, b, eps):
    return norms.layer_norm(x.detach(), None, w, b, eps)


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
                  exercises.check_post_ln_forward):
        for fn in (not_done, lambda *a: None, lambda *a: "text", lambda *a: 1 / 0):
            report = check(fn)
            assert not report.passed and report.text() and report._repr_html_()
    assert "not implemented" in exercises.check_layer_norm(not_done).first_failure.detail

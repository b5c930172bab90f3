"""Each exercise checker (notebooks 01-06 and 08) against the wrong answers a learner would really write, and right
answers written differently: every wrong one is rejected with a message that says what went wrong (its own hint, not a
traceback), and every right one passes."""
import copy
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from course_utils import exercises, norms
from course_utils.transformer import TransformerBlock, softcap


def _rejected(report, expect):
    """The report fails, and its first failure says `expect`, in words, not as a traceback."""
    assert not report.passed, report.text()
    first = report.first_failure.detail
    assert expect in first and "Traceback" not in first, report.text()


# ---- notebook 01: check_depth_scaled_gain -------------------------------------------------------------------------

def _bisect_gain(depth):
    lo, hi = 0.0, 2.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if (1 + mid * mid) ** depth < 4 else (lo, mid)
    return lo


GAIN_WRONG = {
    "GPT-2's 1/sqrt(depth)": (lambda L: 1 / math.sqrt(L), "GPT-2"),
    "|x|^2 doubles instead of |x|": (lambda L: math.sqrt(2 ** (1 / L) - 1), "doubles |x|²"),
    "returns g^2 (square root forgotten)": (lambda L: 4 ** (1 / L) - 1, "square root"),
    "(1 + g)^L = 2": (lambda L: 2 ** (1 / L) - 1, "(1 + g)^L = 2"),
    "the per-block growth factor": (lambda L: 2 ** (1 / L), "√(1 + g²)"),
    "small-g approximation": (lambda L: math.sqrt(math.log(4) / L), "approximation"),
    "off by one: depth + 1": (lambda L: math.sqrt(2 ** (2 / (L + 1)) - 1), "depth + 1"),
    "off by one: depth - 1": (lambda L: math.sqrt(2 ** (2 / (L - 1)) - 1), "depth − 1"),
    "integer division 2 // depth": (lambda L: math.sqrt(2 ** (2 // L) - 1), "target 2x"),
    "negative root": (lambda L: -exercises.depth_scaled_gain(L), "finite number >= 0"),
    "a string": (lambda L: str(exercises.depth_scaled_gain(L)), "finite number"),
    "a list": (lambda L: [exercises.depth_scaled_gain(L)], "finite number"),
}
GAIN_RIGHT = {
    "the course's": exercises.depth_scaled_gain,
    "4 ** (1/L)": lambda L: math.sqrt(4 ** (1 / L) - 1),
    "expm1": lambda L: math.sqrt(math.expm1(math.log(4) / L)),
    "a float32 tensor": lambda L: torch.sqrt(torch.tensor(2.0) ** (2 / L) - 1),
    "a numpy float32": lambda L: np.sqrt(np.float32(2) ** np.float32(2 / L) - np.float32(1)),
    "a 0-d numpy array": lambda L: np.sqrt(np.asarray(4.0) ** (1 / L) - 1),
    "bisection on (1 + g^2)^L = 4": _bisect_gain,
}



# ---- notebook 01: check_residual_stack ----------------------------------------------------------------------------

def _rs(step, keep_x0=True, stack=True, unknown_ok=False):
    """A residual stack built from one step(x, f, g, norm, residual, d) -> x_{l+1}, and how it returns the stream."""
    def residual_stack(x0, sublayers, gain, norm="off", residual=True):
        if norm not in ("off", "Pre-LN", "Post-LN") and not unknown_ok:
            raise ValueError(norm)
        xs, x = ([x0] if keep_x0 else []), x0
        for f in sublayers:
            x = step(x, f, gain, norm, residual, x0.shape[-1:])
            xs.append(x)
        return torch.stack(xs) if stack else xs
    return residual_stack


def _right_step(x, f, g, norm, residual, d):
    skip = x if residual else 0.0
    if norm == "Pre-LN":
        return skip + g * f(F.layer_norm(x, d))
    out = skip + g * f(x)
    return F.layer_norm(out, d) if norm == "Post-LN" else out


def _only_last(x0, sublayers, gain, norm="off", residual=True):
    return _rs(_right_step)(x0, sublayers, gain, norm, residual)[-1]


def _in_place(x0, sublayers, gain, norm="off", residual=True):
    xs = _rs(_right_step)(x0, sublayers, gain, norm, residual)
    x0.add_(0.0 * x0 + 1.0)
    return xs


def _ln_by_hand(v):
    return (v - v.mean(-1, keepdim=True)) / torch.sqrt(v.var(-1, unbiased=False, keepdim=True) + 1e-5)


def _step_with(ln, x, f, g, norm, residual):
    skip = x if residual else 0.0
    if norm == "Pre-LN":
        return skip + g * f(ln(x))
    return ln(skip + g * f(x)) if norm == "Post-LN" else skip + g * f(x)


RESIDUAL_WRONG = {
    "Post-LN normalizes the sublayer's input (Pre-LN for both)": (_rs(
        lambda x, f, g, n, r, d: (x if r else 0) + g * f(F.layer_norm(x, d) if n != "off" else x)), "normalizes the sum"),
    "Pre-LN normalizes the stream too": (_rs(
        lambda x, f, g, n, r, d: F.layer_norm(x, d) + g * f(F.layer_norm(x, d)) if n == "Pre-LN" and r
        else _right_step(x, f, g, n, r, d)), "the skip carries x_l itself"),
    "the gain scales the skip too": (_rs(
        lambda x, f, g, n, r, d: g * ((x if r else 0) + f(x)) if n == "off" else _right_step(x, f, g, n, r, d)),
        "not the skip"),
    "residual flag ignored": (_rs(lambda x, f, g, n, r, d: _right_step(x, f, g, n, True, d)), "drops the skip"),
    "LayerNorm over the whole tensor": (_rs(
        lambda x, f, g, n, r, d: _right_step(x, f, g, n, r, x.shape)), "over its d features only"),
    "returns only x_L": (_only_last, "return the whole stream"),
    "the stream without x_0": (_rs(_right_step, keep_x0=False), "x_0 first"),
    "a list, not a tensor": (_rs(_right_step, stack=False), "expected a torch.Tensor"),
    "changes x0 in place": (_in_place, "changed x0 in place"),
    "an unknown norm runs as no norm": (_rs(_right_step, unknown_ok=True), "raise ValueError"),
}
RESIDUAL_RIGHT = {
    "the notebook's": exercises._stack_reference,
    "one step at a time": _rs(_right_step),
    "nn.LayerNorm without γ, β": _rs(lambda x, f, g, n, r, d: _step_with(
        torch.nn.LayerNorm(d, elementwise_affine=False, dtype=x.dtype), x, f, g, n, r)),
    "LayerNorm by hand": _rs(lambda x, f, g, n, r, d: _step_with(_ln_by_hand, x, f, g, n, r)),
}

# ---- notebook 02: check_masked_batch_stats ------------------------------------------------------------------------

def _weights(x, m):
    return m[..., None].to(x.dtype), m.sum()


def _one_pass_weighted(x, m):
    w, n = _weights(x, m)
    mean = (x * w).sum((0, 1)) / n
    return mean, (x * x * w).sum((0, 1)) / n - mean ** 2


def _zeroed_pads_in_var(x, m):
    w, n = _weights(x, m)
    mean = (x * w).sum((0, 1)) / n
    return mean, ((x * w - mean) ** 2).sum((0, 1)) / n


def _zeroed_in_place(x, m):
    x.masked_fill_(~m[..., None], 0.0)
    mean = x.sum((0, 1)) / m.sum()
    return mean, (((x - mean) ** 2) * m[..., None]).sum((0, 1)) / m.sum()


def _per_sequence_means(x, m):
    means = torch.stack([x[i][m[i]].mean(0) for i in range(len(x))])
    return means.mean(0), x[m].var(0, unbiased=False)


def _per_sequence_vars(x, m):
    return x[m].mean(0), torch.stack([x[i][m[i]].var(0, unbiased=False) for i in range(len(x))]).mean(0)


def _in_float32(x, m):
    r = x[m].float()
    return r.mean(0).to(x.dtype), r.var(0, unbiased=False).to(x.dtype)


def _right_padding_only(x, m):
    real = torch.cat([x[i, :n] for i, n in enumerate(m.sum(1).tolist())])  # assumes the real tokens come first
    return real.mean(0), real.var(0, unbiased=False)


def _times_the_mask(x, m):
    w, n = _weights(x, m)
    mean = (x * w).sum((0, 1)) / n
    return mean, (((x - mean) ** 2) * w).sum((0, 1)) / n  # 0 * nan is nan


def _batchnorm_running_stats(x, m):
    bn = torch.nn.BatchNorm1d(x.shape[-1], momentum=1.0, affine=False, dtype=x.dtype)
    real = x[m]
    bn(real)
    n = real.shape[0]
    return bn.running_mean.clone(), bn.running_var * (n - 1) / n


MASKED_WRONG = {
    "pads counted": (lambda x, m: (x.flatten(0, 1).mean(0), x.flatten(0, 1).var(0, unbiased=False)),
                     "pads count in the mean"),
    "unbiased variance": (lambda x, m: (x[m].mean(0), x[m].var(0)), "unbiased"),
    "E[x^2] - mu^2 over the real tokens": (lambda x, m: (x[m].mean(0), (x[m] ** 2).mean(0) - x[m].mean(0) ** 2),
                                           "catastrophic cancellation"),
    "E[x^2] - mu^2 with mask weights": (_one_pass_weighted, "catastrophic cancellation"),
    "pads zeroed but counted in n": (lambda x, m: ((x * m[..., None]).sum((0, 1)) / m.numel(),
                                                   x[m].var(0, unbiased=False)), "number of real tokens"),
    "zeroed pads in the variance": (_zeroed_pads_in_var, "zeroed pads count in the variance"),
    "average of per-sequence means": (_per_sequence_means, "per-sequence means"),
    "average of per-sequence variances": (_per_sequence_vars, "per-sequence variances"),
    "mask inverted": (lambda x, m: (x[~m].mean(0), x[~m].var(0, unbiased=False)), "mask is True at the real"),
    "standard deviation, not variance": (lambda x, m: (x[m].mean(0), x[m].std(0, unbiased=False)),
                                         "standard deviation"),
    "torch.var_mean's order": (lambda x, m: torch.var_mean(x[m], 0, correction=0), "swapped"),
    "keepdim shapes": (lambda x, m: (x[m].mean(0)[None, None], x[m].var(0, unbiased=False)[None, None]), "shape"),
    "statistics over the wrong axis": (lambda x, m: (x[m].mean(1), x[m].var(1, unbiased=False)), "shape"),
    "float32 inside, float64 given": (_in_float32, "float32 precision"),
    "zeroes the pads of the input in place": (_zeroed_in_place, "in place"),
    "one stacked tensor": (lambda x, m: torch.stack([x[m].mean(0), x[m].var(0, unbiased=False)]), "(mean, var)"),
    "right padding only, via the lengths": (_right_padding_only, "assumes the real tokens come first"),
    "multiplied by the mask": (_times_the_mask, "a pad times 0 is still nan"),
    "nn.BatchNorm1d's running statistics": (_batchnorm_running_stats, "calls F.batch_norm"),
}


def _where_two_pass(x, m):
    n = m.sum()
    mean = torch.where(m[..., None], x, 0).sum((0, 1)) / n
    return mean, torch.where(m[..., None], (x - mean) ** 2, 0).sum((0, 1)) / n


def _shifted_one_pass(x, m):
    r = x[m]
    d = r - r[0]  # shifting by one real token keeps E[d²] - E[d]² free of cancellation
    return r[0] + d.mean(0), (d * d).mean(0) - d.mean(0) ** 2


def _welford(x, m):
    mean = torch.zeros(x.shape[-1], dtype=x.dtype)
    m2 = torch.zeros_like(mean)
    for k, row in enumerate(x[m], start=1):
        delta = row - mean
        mean = mean + delta / k
        m2 = m2 + delta * (row - mean)
    return mean, m2 / k


MASKED_RIGHT = {
    "the course's": lambda x, m: norms.masked_mean_var(x, m)[:2],
    "indexing the real tokens": lambda x, m: (x[m].mean(0), x[m].var(0, unbiased=False)),
    "torch.var_mean, reordered": lambda x, m: torch.var_mean(x[m], 0, correction=0)[::-1],
    "torch.where, two passes": _where_two_pass,
    "one pass shifted by a real token": _shifted_one_pass,
    "Welford": _welford,
    "float64 inside": lambda x, m: tuple(t.to(x.dtype) for t in norms.masked_mean_var(x.double(), m)[:2]),
    "a list": lambda x, m: [x[m].mean(0), x[m].var(0, unbiased=False)],
    "nanmean over the real tokens": lambda x, m: (
        torch.where(m[..., None], x, math.nan).nanmean((0, 1)),
        torch.where(m[..., None], (x - torch.where(m[..., None], x, math.nan).nanmean((0, 1))) ** 2, math.nan)
        .nanmean((0, 1))),
}


def test_the_one_pass_formula_fails_on_the_large_mean_case_by_a_wide_margin():
    report = exercises.check_masked_batch_stats(MASKED_WRONG["E[x^2] - mu^2 over the real tokens"][0])
    case = next(c for c in report.cases if c.name.startswith("mean 1e4, spread 1, float32"))
    assert not case.passed and case.max_error > 1.0 and "mean of (x − μ)²" in case.detail


# ---- notebook 03: check_layer_norm --------------------------------------------------------------------------------

def _x_hat(x, eps):
    mu = x.mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(((x - mu) ** 2).mean(-1, keepdim=True) + eps)


def _ln_in_place(x, w, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = x.var(-1, keepdim=True, unbiased=False)
    return x.sub_(mu).div_(torch.sqrt(var + eps)).mul_(w).add_(b)


def _ln_d1_unchanged(x, w, b, eps):
    if x.shape[-1] == 1:  # "one feature is already normalized": it is not, LayerNorm makes it β
        return x
    return _x_hat(x, eps) * w + b


def _ln_no_keepdim(x, w, b, eps):
    return (x - x.mean(-1)) / torch.sqrt(x.var(-1, unbiased=False) + eps) * w + b


_imported_layer_norm = torch.layer_norm


def _ln_library_in_try(x, w, b, eps):
    try:
        return F.layer_norm(x, (x.shape[-1],), w, b, eps)
    except Exception:
        return _x_hat(x, eps) * w + b


LAYER_NORM_WRONG = {
    "unbiased variance": (lambda x, w, b, eps: (x - x.mean(-1, keepdim=True))
                          / torch.sqrt(x.var(-1, keepdim=True) + eps) * w + b, "d − 1"),
    "eps on the std": (lambda x, w, b, eps: (x - x.mean(-1, keepdim=True))
                       / (x.var(-1, keepdim=True, unbiased=False).sqrt() + eps) * w + b, "ε is added to σ"),
    "eps forgotten": (lambda x, w, b, eps: _x_hat(x, 0.0) * w + b, "ε"),
    "eps squared": (lambda x, w, b, eps: _x_hat(x, eps ** 2) * w + b, "ε"),
    "gamma forgotten": (lambda x, w, b, eps: _x_hat(x, eps) + b, "γ (weight) is not applied"),
    "beta forgotten": (lambda x, w, b, eps: _x_hat(x, eps) * w, "β (bias) is not applied"),
    "a fresh nn.LayerNorm, ignoring weight and bias": (lambda x, w, b, eps: torch.nn.LayerNorm(x.shape[-1], eps)(x),
                                                      "calls F.layer_norm"),
    "neither gamma nor beta": (lambda x, w, b, eps: _x_hat(x, eps), "neither γ nor β"),
    "F.layer_norm, the library's own": (lambda x, w, b, eps: F.layer_norm(x, (x.shape[-1],), w, b, eps),
                                        "calls F.layer_norm"),
    "torch.layer_norm under another name": (lambda x, w, b, eps: _imported_layer_norm(x, (x.shape[-1],), w, b, eps),
                                            "calls torch.layer_norm"),
    "F.group_norm with one group": (lambda x, w, b, eps: F.group_norm(x.reshape(-1, x.shape[-1], 1), 1, eps=eps)
                                    .reshape(x.shape) * w + b, "calls F.group_norm"),
    "the library call hidden in a try": (_ln_library_in_try, "calls F.layer_norm"),
    "beta before gamma": (lambda x, w, b, eps: (_x_hat(x, eps) + b) * w, "β is added before"),
    "statistics of the whole tensor": (lambda x, w, b, eps: (x - x.mean()) / torch.sqrt(x.var(unbiased=False) + eps)
                                       * w + b, "whole tensor"),
    "statistics over dim 0": (lambda x, w, b, eps: (x - x.mean(0, keepdim=True))
                              / torch.sqrt(x.var(0, keepdim=True, unbiased=False) + eps) * w + b, "wrong dimension"),
    "mean without keepdim": (_ln_no_keepdim, "keepdim=True"),
    "divides by the RMS": (lambda x, w, b, eps: (x - x.mean(-1, keepdim=True))
                           / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w + b, "root mean square"),
    "normalized twice": (lambda x, w, b, eps: _x_hat(_x_hat(x, eps), eps) * w + b, "normalized twice"),
    "E[x^2] - mu^2": (lambda x, w, b, eps: (x - x.mean(-1, keepdim=True))
                      / torch.sqrt(x.pow(2).mean(-1, keepdim=True) - x.mean(-1, keepdim=True) ** 2 + eps) * w + b,
                      "catastrophic cancellation"),
    "float32 inside, float64 given": (lambda x, w, b, eps: norms.layer_norm(x.float(), None, w.float(), b.float(),
                                                                            eps).to(x.dtype), "float32 precision"),
    "detached": (lambda x, w, b, eps: norms.layer_norm(x.detach(), None, w, b, eps), "no gradient reached"),
    "in place": (_ln_in_place, "in place"),
    "returns the input itself for d = 1": (_ln_d1_unchanged, "returned x itself"),
}


def _ln_var_mean(x, w, b, eps):
    var, mu = torch.var_mean(x, -1, keepdim=True, correction=0)
    return torch.addcmul(b, (x - mu) * torch.rsqrt(var + eps), w)


def _ln_from_std(x, w, b, eps):
    std = x.std(-1, keepdim=True, unbiased=False)
    return (x - x.mean(-1, keepdim=True)) / torch.sqrt(std ** 2 + eps) * w + b


LAYER_NORM_RIGHT = {
    "the lesson's": lambda x, w, b, eps: norms.layer_norm(x, None, w, b, eps),
    "var_mean, rsqrt, addcmul": _ln_var_mean,
    "from the std": _ln_from_std,
    "centred first": lambda x, w, b, eps: _x_hat(x, eps) * w + b,
    "float64 inside": lambda x, w, b, eps: (_x_hat(x.double(), eps) * w.double() + b.double()).to(x.dtype),
}


# ---- notebook 03: check_layer_norm_jacobian and check_layer_norm_backward -----------------------------------------

def _stats(x, eps=0.0, unbiased=False):
    mu = x.mean(-1, keepdim=True)
    s = torch.sqrt(x.var(-1, keepdim=True, unbiased=unbiased) + eps)
    return mu, s, (x - mu) / s


def _jacobian(x, *, mean_term=True, hat_term=True, unbiased=False, eps=0.0, root=True, centred=False):
    d = x.shape[-1]
    mu, s, x_hat = _stats(x, eps, unbiased)
    v = x - mu if centred else x_hat
    J = torch.eye(d, dtype=x.dtype)
    if mean_term:
        J = J - torch.full((d, d), 1.0 / d, dtype=x.dtype)
    if hat_term:
        J = J - v[:, None] * v[None, :] / d
    return J / (s if root else s ** 2)


def _jacobian_by_columns(x):
    d = x.shape[-1]
    _, s, x_hat = _stats(x)
    return torch.stack([(torch.eye(d, dtype=x.dtype)[j] - 1.0 / d - x_hat * x_hat[j] / d) / s for j in range(d)], 1)


def _jacobian_by_autograd(x):
    x = x.clone().requires_grad_()
    rows = []
    for i in range(x.shape[-1]):
        (row,) = torch.autograd.grad(_stats(x)[2][i], x)
        rows.append(row)
    return torch.stack(rows)


JACOBIAN_WRONG = {
    "the mean's term forgotten": (lambda x: _jacobian(x, mean_term=False), "−11ᵀ/d term is missing"),
    "σ treated as a constant": (lambda x: _jacobian(x, hat_term=False), "−x̂x̂ᵀ/d term is missing"),
    "μ and σ both constants": (lambda x: torch.eye(x.shape[-1], dtype=x.dtype) / _stats(x)[1], "I/σ"),
    "unbiased σ": (lambda x: _jacobian(x, unbiased=True), "d − 1"),
    "ε = 1e-5 out of habit": (lambda x: _jacobian(x, eps=1e-5), "for ε = 0"),
    "divided by the variance": (lambda x: _jacobian(x, root=False), "divided by σ²"),
    "x − μ in the outer product": (lambda x: _jacobian(x, centred=True), "uses x − μ"),
    "the projection alone, no 1/σ": (lambda x: _jacobian(x) * _stats(x)[1], "1/σ in front is missing"),
    "autograd's jacobian of F.layer_norm": (lambda x: torch.autograd.functional.jacobian(
        lambda v: F.layer_norm(v, v.shape, eps=0.0), x), "calls F.layer_norm"),
    "autograd, row by row, of the own formula": (_jacobian_by_autograd, "calls torch.autograd.grad"),
    "torch.func.jacrev": (lambda x: torch.func.jacrev(lambda v: _stats(v)[2])(x), "calls torch.autograd.grad"),
    "one row of it, a vector": (lambda x: _jacobian(x)[0], "shape"),
}
JACOBIAN_RIGHT = {
    "the formula": lambda x: _jacobian(x),
    "column by column": _jacobian_by_columns,
    "P/σ minus the x̂ term, via torch.outer": lambda x: ((torch.eye(len(x), dtype=x.dtype) - 1.0 / len(x)) / _stats(x)[1]
                                                        - torch.outer(_stats(x)[2], _stats(x)[2]) / len(x) / _stats(x)[1]),
    "from σ³ and x − μ": lambda x: ((torch.eye(len(x), dtype=x.dtype) - 1.0 / len(x)) / _stats(x)[1]
                                     - torch.outer(x - x.mean(), x - x.mean()) / (len(x) * _stats(x)[1] ** 3)),
}


def _backward(x, g, eps, *, mean_term=True, hat_term=True, unbiased=False, eps_on_std=False, divide=True):
    mu = x.mean(-1, keepdim=True)
    var = x.var(-1, keepdim=True, unbiased=unbiased)
    s = var.sqrt() + eps if eps_on_std else torch.sqrt(var + eps)
    x_hat = (x - mu) / s
    out = g
    if mean_term:
        out = out - g.mean(-1, keepdim=True)
    if hat_term:
        out = out - x_hat * (g * x_hat).mean(-1, keepdim=True)
    return out / s if divide else out


def _backward_by_jacobian(x, g, eps):
    d = x.shape[-1]
    mu, s, x_hat = _stats(x, eps)
    eye = torch.eye(d, dtype=x.dtype)
    J = (eye - 1.0 / d - x_hat[..., :, None] * x_hat[..., None, :] / d) / s[..., None]  # (..., d, d), one per token
    return (J.transpose(-1, -2) @ g[..., None])[..., 0]  # dL/dx = Jᵀ g (J is symmetric here)


def _backward_by_own_autograd(x, g, eps):
    x = x.clone().requires_grad_()
    _stats(x, eps)[2].backward(g)
    return x.grad


def _backward_in_place(x, g, eps):
    _, s, x_hat = _stats(x, eps)
    g -= g.mean(-1, keepdim=True)
    g -= x_hat * (g * x_hat).mean(-1, keepdim=True)
    return g / s


def _backward_by_sums(x, g, eps):
    d = x.shape[-1]
    mu = x.sum(-1, keepdim=True) / d
    rstd = ((x - mu).pow(2).sum(-1, keepdim=True) / d + eps).rsqrt()
    x_hat = (x - mu) * rstd
    return rstd / d * (d * g - g.sum(-1, keepdim=True) - x_hat * (g * x_hat).sum(-1, keepdim=True))


LAYER_NORM_BACKWARD_WRONG = {
    "the mean term forgotten": (lambda x, g, eps: _backward(x, g, eps, mean_term=False), "mean term is missing"),
    "the x̂ term forgotten": (lambda x, g, eps: _backward(x, g, eps, hat_term=False), "x̂ term is missing"),
    "μ and σ as constants": (lambda x, g, eps: g / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + eps),
                             "both terms are missing"),
    "unbiased variance": (lambda x, g, eps: _backward(x, g, eps, unbiased=True), "d − 1"),
    "eps outside the root": (lambda x, g, eps: _backward(x, g, eps, eps_on_std=True), "ε is added to σ"),
    "eps forgotten": (lambda x, g, eps: _backward(x, g, 0.0), "ε is missing"),
    "not divided by σ": (lambda x, g, eps: _backward(x, g, eps, divide=False), "1/σ in front is missing"),
    "Tensor.backward through its own formula": (_backward_by_own_autograd, "calls Tensor.backward"),
    "torch.autograd.grad through F.layer_norm": (lambda x, g, eps: torch.autograd.grad(
        F.layer_norm(x.clone().requires_grad_(), x.shape[-1:], eps=eps), x, g), "calls F.layer_norm"),
    "torch.func.vjp": (lambda x, g, eps: torch.func.vjp(lambda v: _stats(v, eps)[2], x)[1](g)[0],
                       "calls torch.autograd.grad"),
    "grad_out changed in place": (_backward_in_place, "in place"),
    "the per-token Jacobians, not the gradient": (lambda x, g, eps: _backward_by_jacobian(x, g, eps)[..., None]
                                                  * torch.ones(x.shape[-1], dtype=x.dtype), "shape"),
}
LAYER_NORM_BACKWARD_RIGHT = {
    "the closed form": lambda x, g, eps: _backward(x, g, eps),
    "via the explicit Jacobian, per token": _backward_by_jacobian,
    "with sums and rsqrt, as PyTorch's kernel": _backward_by_sums,
    "from x − μ and σ³": lambda x, g, eps: ((g - g.mean(-1, keepdim=True)) / _stats(x, eps)[1]
                                           - (x - x.mean(-1, keepdim=True)) * (g * (x - x.mean(-1, keepdim=True)))
                                           .mean(-1, keepdim=True) / _stats(x, eps)[1] ** 3),
    "float64 inside": lambda x, g, eps: _backward(x.double(), g.double(), eps).to(x.dtype),
}


# ---- notebook 05: check_rms_norm ----------------------------------------------------------------------------------

def _ms(x, dim=-1):
    return x.pow(2).mean(dim, keepdim=True)


def _rms_in_place(x, w, eps):
    return x.div_(torch.sqrt(_ms(x) + eps)).mul_(w)


def _rms_by_layer_norm(x, w, eps):
    both = torch.cat([x, -x], dim=-1)  # mean 0, variance the mean square: LayerNorm of it is RMSNorm of x
    return F.layer_norm(both, both.shape[-1:], None, None, eps)[..., :x.shape[-1]] * w


RMS_WRONG = {
    "eps outside the root": (lambda x, w, eps: x / (torch.sqrt(_ms(x)) + eps) * w, "ε is added to the RMS"),
    "eps forgotten": (lambda x, w, eps: x / torch.sqrt(_ms(x)) * w, "ε is missing"),
    "eps squared": (lambda x, w, eps: x / torch.sqrt(_ms(x) + eps ** 2) * w, "ε is squared"),
    "F.rms_norm, the library's own": (lambda x, w, eps: F.rms_norm(x, x.shape[-1:], w, eps), "calls F.rms_norm"),
    "nn.RMSNorm": (lambda x, w, eps: torch.nn.RMSNorm(x.shape[-1], eps=eps)(x) * w, "calls nn.RMSNorm"),
    "F.layer_norm of [x, -x] (the same numbers, a library norm)": (_rms_by_layer_norm, "calls F.layer_norm"),
    "eps at float32's machine epsilon (nn.RMSNorm's default)": (lambda x, w, eps: x / torch.sqrt(
        _ms(x) + torch.finfo(torch.float32).eps) * w, "eps=None"),
    "mean subtracted (LayerNorm without beta)": (lambda x, w, eps: (x - x.mean(-1, keepdim=True)) / torch.sqrt(
        x.var(-1, keepdim=True, unbiased=False) + eps) * w, "the mean is subtracted"),
    "divides by the standard deviation": (lambda x, w, eps: x / torch.sqrt(x.var(-1, keepdim=True, unbiased=False)
                                                                           + eps) * w, "divided by σ"),
    "square root forgotten": (lambda x, w, eps: x / (_ms(x) + eps) * w, "square root is missing"),
    "the norm, not the RMS": (lambda x, w, eps: x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + eps) * w, "‖x‖"),
    "sum of squares over d - 1": (lambda x, w, eps: x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) / (x.shape[-1] - 1)
                                                                   + eps) * w, "d − 1"),
    "gamma forgotten": (lambda x, w, eps: x / torch.sqrt(_ms(x) + eps), "γ (weight) is not applied"),
    "gamma applied before normalizing": (lambda x, w, eps: x * w / torch.sqrt(_ms(x * w) + eps),
                                         "γ is applied before normalizing"),
    "mean |x| instead of the RMS": (lambda x, w, eps: x / (x.abs().mean(-1, keepdim=True) + eps) * w, "mean of |x|"),
    "mean |x|, eps under the root": (lambda x, w, eps: x / torch.sqrt(x.abs().mean(-1, keepdim=True) ** 2 + eps) * w,
                                     "mean of |x|"),
    "torch.std": (lambda x, w, eps: x / torch.sqrt(x.std(-1, keepdim=True) ** 2 + eps) * w, "torch.std"),
    "RMS of the whole tensor": (lambda x, w, eps: x / torch.sqrt(x.pow(2).mean() + eps) * w, "whole tensor"),
    "RMS over dim 0": (lambda x, w, eps: x / torch.sqrt(_ms(x, 0) + eps) * w, "wrong dimension"),
    "multiplied by the RMS": (lambda x, w, eps: x * torch.sqrt(_ms(x) + eps) * w, "multiplied by its RMS"),
    "mean without keepdim": (lambda x, w, eps: x / torch.sqrt(x.pow(2).mean(-1) + eps) * w, "keepdim=True"),
    "float32 inside, float64 given": (lambda x, w, eps: norms.rms_norm(x.float(), None, w.float(), eps).to(x.dtype),
                                      "float32 precision"),
    "detached": (lambda x, w, eps: norms.rms_norm(x.detach(), None, w, eps), "no gradient reached"),
    "in place": (_rms_in_place, "in place"),
    "eps hard-coded as 1e-5": (lambda x, w, eps: x / torch.sqrt(_ms(x) + 1e-5) * w, "not a number typed in"),
    "mean of x, not of its squares": (lambda x, w, eps: x / torch.sqrt(x.mean(-1, keepdim=True) + eps) * w,
                                      "mean of its squares"),
    "gamma applied twice": (lambda x, w, eps: x / torch.sqrt(_ms(x) + eps) * w * w, "γ is applied twice"),
}
RMS_RIGHT = {
    "the lesson's": lambda x, w, eps: norms.rms_norm(x, None, w, eps),
    "rsqrt": lambda x, w, eps: x * torch.rsqrt(_ms(x) + eps) * w,
    "from the norm": lambda x, w, eps: w * x / torch.sqrt(torch.linalg.vector_norm(x, dim=-1, keepdim=True) ** 2
                                                          / x.shape[-1] + eps),
    "float64 inside": lambda x, w, eps: (x.double() * torch.rsqrt(_ms(x.double()) + eps) * w.double()).to(x.dtype),
}


def test_rms_norm_fails_a_width_typed_in_at_the_odd_width():
    report = exercises.check_rms_norm(lambda x, w, eps: x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) / 16 + eps) * w)
    assert not report.passed and not report.case("odd width, leading dims (2, 3, 5, 7)").passed


def test_rms_norm_leads_with_the_tiny_rms_case_where_a_misplaced_eps_shows_big():
    report = exercises.check_rms_norm(RMS_WRONG["eps outside the root"][0])
    first = report.first_failure
    assert first is report.cases[0] and first.max_error > 1.0 and "under the square root" in first.detail


# ---- notebook 06: check_softcap and check_qk_norm_logits ----------------------------------------------------------

def _tanh_by_exp(x, cap):
    u = torch.exp(2 * x / cap)
    return cap * (u - 1) / (u + 1)


def _softcap_in_place(x, cap):
    return x.div_(cap).tanh_().mul_(cap)


SOFTCAP_WRONG = {
    "hard clip": (lambda x, cap: x.clamp(-cap, cap), "hard clip"),
    "cap * tanh(x): no /cap inside": (lambda x, cap: cap * torch.tanh(x), "the /cap inside is missing"),
    "tanh(x / cap): no cap outside": (lambda x, cap: torch.tanh(x / cap), "the cap outside is missing"),
    "tanh(x)": (lambda x, cap: torch.tanh(x), "both caps are missing"),
    "x * cap inside": (lambda x, cap: cap * torch.tanh(x * cap), "multiplied by the cap inside"),
    "sigmoid": (lambda x, cap: cap * torch.sigmoid(x / cap), "sigmoid is not a tanh"),
    "unchanged copy": (lambda x, cap: x.clone(), "nothing is capped"),
    "the input itself": (lambda x, cap: x, "returned x itself"),
    "tanh from exponentials": (_tanh_by_exp, "overflows"),
    "float32 inside, float64 given": (lambda x, cap: (cap * torch.tanh(x.float() / cap)).to(x.dtype),
                                      "float32 precision"),
    "detached": (lambda x, cap: cap * torch.tanh(x.detach() / cap), "no gradient reached"),
    "in place": (_softcap_in_place, "in place"),
    # no classic mistake: the first failure shows one input, what came out and what was expected
    "arctan": (lambda x, cap: cap * torch.atan(x / cap), "expected cap · tanh(x / cap)"),
    "softsign": (lambda x, cap: x / (1 + x.abs() / cap), "expected cap · tanh(x / cap)"),
    "the identity below the cap, tanh above": (lambda x, cap: torch.where(x.abs() > cap, cap * torch.tanh(x / cap), x),
                                               "expected cap · tanh(x / cap)"),
}
SOFTCAP_RIGHT = {
    "the course's": softcap,
    "tanh, cap last": lambda x, cap: torch.tanh(x / cap) * cap,
    "method chain": lambda x, cap: x.div(cap).tanh().mul(cap),
    "through a sigmoid": lambda x, cap: cap * (2 * torch.sigmoid(2 * x / cap) - 1),
}


def _rms_g(x, w, eps, dim=-1):
    return w * x / torch.sqrt(x.pow(2).mean(dim, keepdim=True) + eps)


def _qk(q, k, wq, wk, eps, *, scale=lambda d: d ** -0.5, dim=-1):
    return _rms_g(q, wq, eps, dim) @ _rms_g(k, wk, eps, dim).transpose(-2, -1) * scale(q.shape[-1])


def _qk_unit_norm(q, k, wq, wk, eps):
    return (wq * F.normalize(q, dim=-1)) @ (wk * F.normalize(k, dim=-1)).transpose(-2, -1) / math.sqrt(q.shape[-1])


def _qk_layer_norm(q, k, wq, wk, eps):
    def ln(x, w):
        x = x - x.mean(-1, keepdim=True)
        return w * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return ln(q, wq) @ ln(k, wk).transpose(-2, -1) / q.shape[-1] ** 0.5


def _qk_library(q, k, wq, wk, eps):
    d = q.shape[-1]
    return F.rms_norm(q, (d,), wq, eps) @ F.rms_norm(k, (d,), wk, eps).transpose(-2, -1) / d ** 0.5


def _qk_library_ln(q, k, wq, wk, eps):
    d = q.shape[-1]
    return F.layer_norm(q, (d,), wq, None, eps) @ F.layer_norm(k, (d,), wk, None, eps).transpose(-2, -1) / d ** 0.5


def _qk_eps_outside(q, k, wq, wk, eps):
    def n(x, w):
        return w * x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps)
    return n(q, wq) @ n(k, wk).transpose(-2, -1) / math.sqrt(q.shape[-1])


def _qk_joint_heads(q, k, wq, wk, eps):
    """OLMo 2's QK-norm: one RMS per token over every head's features (d_model), then the heads split again."""
    def joint(x, w):
        if x.dim() < 4:
            return _rms_g(x, w, eps)
        b, h, t, d = x.shape
        flat = x.transpose(1, 2).reshape(b, t, h * d)
        return (flat / torch.sqrt(flat.pow(2).mean(-1, keepdim=True) + eps)).reshape(b, t, h, d).transpose(1, 2) * w
    return joint(q, wq) @ joint(k, wk).transpose(-2, -1) / math.sqrt(q.shape[-1])


QK_WRONG = {
    "no 1/sqrt(d)": (lambda q, k, wq, wk, eps: _qk(q, k, wq, wk, eps, scale=lambda d: 1.0), "1/√d_head is missing"),
    "divided by d": (lambda q, k, wq, wk, eps: _qk(q, k, wq, wk, eps, scale=lambda d: 1 / d), "divided by d_head"),
    "multiplied by sqrt(d)": (lambda q, k, wq, wk, eps: _qk(q, k, wq, wk, eps, scale=lambda d: d ** 0.5),
                              "multiplied by √d_head"),
    "normalized over the tokens": (lambda q, k, wq, wk, eps: _qk(q, k, wq, wk, eps, dim=-2), "over the tokens"),
    "gains forgotten": (lambda q, k, wq, wk, eps: _qk(q, k, 1.0, 1.0, eps), "gains are not applied"),
    "unit-norm q and k (F.normalize)": (_qk_unit_norm, "ℓ2-normalized"),
    # Henry et al.'s form, norm 1 and no 1/√d: the same numbers as dividing by d_head, and one hint names both
    "unit-norm q and k, no 1/sqrt(d)": (lambda q, k, wq, wk, eps: (wq * F.normalize(q, dim=-1))
                                        @ (wk * F.normalize(k, dim=-1)).transpose(-2, -1), "ℓ2-normalized"),
    "LayerNorm instead of RMSNorm": (_qk_layer_norm, "the mean is subtracted"),
    "the library's F.rms_norm": (_qk_library, "calls F.rms_norm"),
    "the library's F.layer_norm": (_qk_library_ln, "calls F.layer_norm"),
    "queries only": (lambda q, k, wq, wk, eps: _rms_g(q, wq, eps) @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]),
                     "only the queries"),
    "keys only": (lambda q, k, wq, wk, eps: q @ _rms_g(k, wk, eps).transpose(-2, -1) / math.sqrt(q.shape[-1]),
                  "only the keys"),
    "eps outside the root": (_qk_eps_outside, "added to the RMS"),
    "eps missing": (lambda q, k, wq, wk, eps: _qk(q, k, wq, wk, 0.0), "ε is missing"),
    "softmax applied": (lambda q, k, wq, wk, eps: torch.softmax(_qk(q, k, wq, wk, eps), -1), "softmax"),
    "keys not transposed": (lambda q, k, wq, wk, eps: _rms_g(q, wq, eps) @ _rms_g(k, wk, eps) / math.sqrt(q.shape[-1]),
                            "k.transpose(-2, -1)"),
    "k.T on a batched tensor": (lambda q, k, wq, wk, eps: _rms_g(q, wq, eps) @ _rms_g(k, wk, eps).T
                                / math.sqrt(q.shape[-1]), "k.transpose(-2, -1)"),
    "float32 inside, float64 given": (lambda q, k, wq, wk, eps: _qk(q.float(), k.float(), wq.float(), wk.float(),
                                                                     eps).to(q.dtype), "float32 precision"),
    "detached": (lambda q, k, wq, wk, eps: _qk(q, k, wq, wk, eps).detach(), "no gradient reached"),
    "gains applied before normalizing": (lambda q, k, wq, wk, eps: _qk(q * wq, k * wk, 1.0, 1.0, eps),
                                         "applied before normalizing"),
    "gamma_q for both": (lambda q, k, wq, wk, eps: _qk(q, k, wq, wq, eps), "γ_q is used for the keys too"),
    "gamma_k for both": (lambda q, k, wq, wk, eps: _qk(q, k, wk, wk, eps), "γ_k is used for the queries too"),
    "RMS over tokens and features": (lambda q, k, wq, wk, eps: _qk(q, k, wq, wk, eps, dim=(-2, -1)),
                                     "over the tokens and the features together"),
    "1/sqrt(8) written in": (lambda q, k, wq, wk, eps: _qk(q, k, wq, wk, eps, scale=lambda d: 8 ** -0.5),
                             "1/√8 whatever the head size"),
    "square of the mean": (lambda q, k, wq, wk, eps: (lambda n: n(q, wq) @ n(k, wk).transpose(-2, -1)
                                                      / math.sqrt(q.shape[-1]))(
        lambda x, w: w * x / torch.sqrt(x.mean(-1, keepdim=True).pow(2) + eps)), "square of the mean"),
    "gains twice": (lambda q, k, wq, wk, eps: _qk(q, k, wq * wq, wk * wk, eps), "applied twice"),
    "mean over dim 1 (the heads of a 4-d q)": (lambda q, k, wq, wk, eps: _qk(q, k, wq, wk, eps, dim=1),
                                               "over the heads"),
    "one RMS over all heads (OLMo 2)": (_qk_joint_heads, "all heads together"),
    "eps fixed at 1e-6": (lambda q, k, wq, wk, eps: _qk(q, k, wq, wk, 1e-6), "ε is fixed at 1e-06"),
}
QK_RIGHT = {
    "from the parts": _qk,
    "rsqrt and .mT": lambda q, k, wq, wk, eps: ((q * torch.rsqrt(q.pow(2).mean(-1, keepdim=True) + eps) * wq)
                                                @ (k * torch.rsqrt(k.pow(2).mean(-1, keepdim=True) + eps) * wk).mT
                                                / q.shape[-1] ** 0.5),
    "einsum with rsqrt": lambda q, k, wq, wk, eps: torch.einsum(
        "...id,...jd->...ij", q * torch.rsqrt(q.pow(2).mean(-1, keepdim=True) + eps) * wq,
        k * torch.rsqrt(k.pow(2).mean(-1, keepdim=True) + eps) * wk) / math.sqrt(q.shape[-1]),
    # the logits are Σ_d γq_d γk_d q̂_d k̂_d: symmetric in the two gains, so swapping them is no mistake
    "gains swapped": lambda q, k, wq, wk, eps: _qk(q, k, wk, wq, eps),
}


def _attn(q, k, *, scale=lambda d: d ** -0.5, dim=-1):
    logits = q @ k.transpose(-2, -1) * scale(q.shape[-1])
    return logits.softmax(dim), logits


ATTENTION_WRONG = {
    "no 1/sqrt(d)": (lambda q, k: _attn(q, k, scale=lambda d: 1.0), "1/√d is missing"),
    "divided by d": (lambda q, k: _attn(q, k, scale=lambda d: 1 / d), "divided by d"),
    "sqrt(8) hard-coded": (lambda q, k: _attn(q, k, scale=lambda d: 8 ** -0.5), "fixed at √8"),
    "sqrt(16) hard-coded": (lambda q, k: _attn(q, k, scale=lambda d: 16 ** -0.5), "fixed at √16"),
    # the first case's d_head is 12: a hard-coded /8 is named as the fixed √64 it is, not as "divided by d"
    "/8 hard-coded": (lambda q, k: _attn(q, k, scale=lambda d: 1 / 8), "fixed at √64"),
    "sqrt(n_keys)": (lambda q, k: ((q @ k.mT / math.sqrt(k.shape[-2])).softmax(-1), q @ k.mT / math.sqrt(k.shape[-2])),
                     "number of keys"),
    "sqrt(n_queries)": (lambda q, k: ((q @ k.mT / math.sqrt(q.shape[-2])).softmax(-1),
                                      q @ k.mT / math.sqrt(q.shape[-2])), "number of queries"),
    "softmax over the queries": (lambda q, k: _attn(q, k, dim=-2), "over the queries"),
    "weights and logits swapped": (lambda q, k: _attn(q, k)[::-1], "swapped"),
    "scaled after the softmax": (lambda q, k: ((q @ k.transpose(-2, -1)).softmax(-1), _attn(q, k)[1]),
                                 "scaled after the softmax"),
    "the weights only": (lambda q, k: _attn(q, k)[0], "return two tensors"),
    "k.T on a batched tensor": (lambda q, k: ((q @ k.T / q.shape[-1] ** 0.5).softmax(-1), q @ k.T / q.shape[-1] ** 0.5),
                                "k.transpose(-2, -1)"),
    "F.scaled_dot_product_attention": (
        lambda q, k: (F.scaled_dot_product_attention(q, k, torch.eye(k.shape[-2], dtype=q.dtype)), _attn(q, k)[1]),
        "calls F.scaled_dot_product_attention"),
    "float32 inside, float64 given": (lambda q, k: tuple(t.to(q.dtype) for t in _attn(q.float(), k.float())),
                                      "float32 precision"),
    "detached": (lambda q, k: tuple(t.detach() for t in _attn(q, k)), "no gradient reached"),
}
ATTENTION_RIGHT = {
    "from the parts": _attn,
    "mT and torch.softmax": lambda q, k: (torch.softmax(q @ k.mT / math.sqrt(q.shape[-1]), dim=-1),
                                          q @ k.mT / math.sqrt(q.shape[-1])),
    "einsum, a list": lambda q, k: [torch.einsum("...id,...jd->...ij", q, k).div(q.shape[-1] ** 0.5).softmax(-1),
                                    torch.einsum("...id,...jd->...ij", q, k).div(q.shape[-1] ** 0.5)],
}


# ---- notebook 08: check_mean_pool ---------------------------------------------------------------------------------

def _pool_sum(x, m):
    return (x * m.unsqueeze(-1).to(x.dtype)).sum(1)


def _pool_count(x, m):
    return m.sum(1, keepdim=True).to(x.dtype)


MEAN_POOL_WRONG = {
    "padding counted": (lambda x, m: x.mean(1), "padding leaks in"),
    "a plain sum, no division": (_pool_sum, "not divided by their count"),
    "divided by the padded length": (lambda x, m: _pool_sum(x, m) / x.shape[1], "divided by the padded length"),
    "pads summed, divided by the real count": (lambda x, m: x.sum(1) / _pool_count(x, m), "zero the pads first"),
    "mask inverted": (lambda x, m: _pool_sum(x, ~m) / (~m).sum(1, keepdim=True).to(x.dtype), "mean over the pads"),
    "the [CLS] token": (lambda x, m: x[:, 0], "[CLS]"),
    "the last real token": (lambda x, m: x[torch.arange(len(x)), m.sum(1) - 1], "last real token"),
    "max pooling": (lambda x, m: x.masked_fill(~m.unsqueeze(-1), -1e9).amax(1), "max pooling"),
    "normalized": (lambda x, m: F.normalize(_pool_sum(x, m) / _pool_count(x, m), dim=-1), "L2-normalized"),
    "pooled over the batch": (lambda x, m: _pool_sum(x.transpose(0, 1), m.T), "expected shape"),
    "count without keepdim": (lambda x, m: _pool_sum(x, m) / m.sum(1), "mask.sum(1, keepdim=True)"),
    "mask without its feature axis": (lambda x, m: (x * m).sum(1) / m.sum(1), "mask.unsqueeze(-1)"),
    "mask without its feature axis, count kept": (lambda x, m: (x * m).sum(1) / m.sum(1, keepdim=True),
                                                  "mask.unsqueeze(-1)"),
    "divided by the whole batch's count": (lambda x, m: _pool_sum(x, m) / m.sum(), "the whole batch"),
    "x[mask].mean(0)": (lambda x, m: x[m].mean(0), "one vector for the whole batch"),
    "averaged over the features": (lambda x, m: (x * m.unsqueeze(-1)).sum(-1) / m.sum(1, keepdim=True),
                                   "over the features"),
    "float32 inside, float64 given": (lambda x, m: (_pool_sum(x.float(), m) / _pool_count(x.float(), m)).to(x.dtype),
                                      "float32 precision"),
    "zeroes the pads of the input in place": (lambda x, m: x.mul_(m.unsqueeze(-1)).sum(1) / _pool_count(x, m),
                                              "in place"),
    "averaged over the batch (dim 0)": (lambda x, m: x.mean(0), "over the batch (dim 0)"),
    "keepdim=True on the sum": (lambda x, m: (x * m.unsqueeze(-1)).sum(1, keepdim=True) / _pool_count(x, m)[:, None],
                                "keepdim=True kept the token axis"),
}
MEAN_POOL_RIGHT = {
    "the course's": lambda x, m: __import__("course_utils.minilm", fromlist=["mean_pool"]).mean_pool(x, m),
    "weights and sums": lambda x, m: _pool_sum(x, m) / _pool_count(x, m),
    "a loop over sequences": lambda x, m: torch.stack([x[i][m[i]].mean(0) for i in range(len(x))]),
    "nanmean over masked values": lambda x, m: torch.where(m.unsqueeze(-1), x, float("nan")).nanmean(1),
    "einsum": lambda x, m: torch.einsum("btd,bt->bd", x, m.to(x.dtype)) / _pool_count(x, m),
}


# ---- notebook 08: check_find_spike --------------------------------------------------------------------------------

def _masked_abs(x, m):
    return x.abs().masked_fill(~m[..., None], 0)


FIND_SPIKE_WRONG = {
    "max instead of abs max": (lambda x, m: divmod(int(x.masked_fill(~m[..., None], -1e9).amax(0).argmax()),
                                                   x.shape[-1]), "not the largest |value|"),
    "the padding counted": (lambda x, m: divmod(int(x.abs().amax(0).argmax()), x.shape[-1]), "padding position"),
    "(feature, position)": (lambda x, m: divmod(int(_masked_abs(x, m).amax(0).argmax()), x.shape[-1])[::-1],
                            "wrong way round"),
    "divmod by the sequence length": (lambda x, m: divmod(int(_masked_abs(x, m).amax(0).argmax()), x.shape[1]),
                                      "x.shape[-1]"),
    "the batch kept in the flat index": (lambda x, m: divmod(int(_masked_abs(x, m).argmax()), x.shape[-1]),
                                         "counts the batch"),
    "hard-coded (0, 99)": (lambda x, m: (0, 99), "not always at position 0"),
    "[CLS] assumed": (lambda x, m: (0, int(_masked_abs(x, m)[:, 0].amax(0).argmax())), "not always at position 0"),
    "a tensor, not a pair": (lambda x, m: _masked_abs(x, m).amax(0), "two integers"),
    "only sentence 0": (lambda x, m: divmod(int(_masked_abs(x[:1], m[:1]).amax(0).argmax()), x.shape[-1]),
                        "only the first sentence"),
    "abs_ and masked_fill_ in place": (lambda x, m: divmod(int(x.abs_().masked_fill_(~m[..., None], 0).amax(0)
                                                               .argmax()), x.shape[-1]), "masked_fill_"),
}
FIND_SPIKE_RIGHT = {
    "masked_fill, amax, divmod": lambda x, m: divmod(int(_masked_abs(x, m).amax(0).argmax()), x.shape[-1]),
    "unravel_index over the whole tensor, tensors returned": lambda x, m: tuple(
        torch.unravel_index(_masked_abs(x, m).argmax(), x.shape)[1:]),
    "the real tokens picked out first": lambda x, m: _by_rows(x, m),
}


def _by_rows(x, m):
    rows, pos = m.nonzero(as_tuple=True)
    flat = int(x[rows, pos].abs().argmax())
    token, feature = divmod(flat, x.shape[-1])
    return int(pos[token]), feature


# ---- notebook 04: check_post_ln_forward and check_deepnorm_forward ------------------------------------------------

POST_CALLED = ("write the Post-LN update from block.attn, block.ffn, block.norm1 and block.norm2; calling the block "
               "itself is not the exercise")


def _post(block, x, n1=None, n2=None):
    n1, n2 = n1 or block.norm1, n2 or block.norm2
    h = n1(x + block.attn(x))
    return n2(h + block.ffn(h))


def _flip_and_call(block, x):
    block.placement = "post"
    try:
        return block(x)
    finally:
        block.placement = "pre"


def _flip_and_leave(block, x):
    block.placement = "post"
    return block(x)


def _fresh_post_block(block, x):
    twin = TransformerBlock(16, 4, norm=block.norm_kind, placement="post").double()
    twin.load_state_dict(block.state_dict())
    return twin(x)


def _copy_as_post(block, x):
    twin = copy.deepcopy(block)
    twin.placement = "post"
    return twin(x)


def _in_place_residual(block, x):
    x += block.attn(x)
    x = block.norm1(x)
    return block.norm2(x + block.ffn(x))


def _parts_then_leave_post(block, x):
    block.placement = "post"
    return _post(block, x)


def _changes_a_gain(block, x):
    with torch.no_grad():
        block.norm2.weight.mul_(1.0)
        block.norm2.weight.add_(1e-3)
    return _post(block, x)


POST_WRONG = {
    "Pre-LN written out": (lambda b, x: (lambda h: h + b.ffn(b.norm2(h)))(x + b.attn(b.norm1(x))), "Pre-LN"),
    "norm before the residual sum (the notebook's wrong_post_ln)":
        (lambda b, x: (lambda h: h + b.norm2(b.ffn(h)))(x + b.norm1(b.attn(x))), "before the residual sum"),
    "norm1 and norm2 swapped": (lambda b, x: _post(b, x, b.norm2, b.norm1), "swapped"),
    "norm1 twice": (lambda b, x: _post(b, x, b.norm1, b.norm1), "norm1 is used for both"),
    "norm2 twice": (lambda b, x: _post(b, x, b.norm2, b.norm2), "norm2 is used for both"),
    "FFN first": (lambda b, x: (lambda h: b.norm2(h + b.attn(h)))(b.norm1(x + b.ffn(x))), "wrong order"),
    "FFN residual from the block input": (lambda b, x: b.norm2(x + b.ffn(b.norm1(x + b.attn(x)))),
                                          "adds the block's input"),
    "FFN on the block input": (lambda b, x: b.norm2(b.norm1(x + b.attn(x)) + b.ffn(x)), "acts on the block's input"),
    "no residuals": (lambda b, x: b.norm2(b.ffn(b.norm1(b.attn(x)))), "residual connections are missing"),
    "a norm once more": (lambda b, x: b.norm2(_post(b, x)), "once more"),
    "one norm, at the end of the block": (lambda b, x: (lambda h: b.norm2(h + b.ffn(h)))(x + b.attn(x)),
                                          "twice per block"),
    "the sublayers read a normalized copy as well": (
        lambda b, x: (lambda h: b.norm2(h + b.ffn(b.norm2(h))))(b.norm1(x + b.attn(b.norm1(x)))),
        "read a normalized copy too"),
    "the block called": (lambda b, x: b(x), POST_CALLED),
    "placement flipped, the block called, placement restored": (_flip_and_call, POST_CALLED),
    "placement flipped, the block called, left flipped": (_flip_and_leave, POST_CALLED),
    "block.forward with placement='post'": (lambda b, x: b.forward(x, placement="post"), POST_CALLED),
    "a fresh Post-LN TransformerBlock with the weights": (_fresh_post_block, POST_CALLED),
    "a deep copy set to Post-LN": (_copy_as_post, POST_CALLED),
    "in-place residual": (_in_place_residual, "in place"),
    "right parts, placement left flipped": (_parts_then_leave_post, "changed the block"),
    "changes a gain": (_changes_a_gain, "changed the block"),
    "detached": (lambda b, x: _post(b, x.detach()), "no gradient reached"),
    "float32 inside, float64 given": (lambda b, x: _post(b.float(), x.float()).double(), "changed the block"),
}


def _post_loop(block, x):
    for sublayer, norm in ((block.attn, block.norm1), (block.ffn, block.norm2)):
        x = norm(torch.add(x, sublayer(x)))
    return x


POST_RIGHT = {
    "from the parts": _post,
    "a loop over (sublayer, norm)": _post_loop,
    "modules' forward called directly": lambda b, x: (lambda h: b.norm2.forward(h + b.ffn.forward(h)))(
        b.norm1.forward(b.attn.forward(x) + x)),
}


def test_the_block_call_message_is_the_exercise_in_words():
    report = exercises.check_post_ln_forward(_flip_and_call)
    assert [c.detail for c in report.cases] == [POST_CALLED] * len(report.cases)


def _deep(block, x, alpha, n1=None, n2=None):
    n1, n2 = n1 or block.norm1, n2 or block.norm2
    h = n1(alpha * x + block.attn(x))
    return n2(alpha * h + block.ffn(h))


def _deep_pre(block, x, alpha):
    h = alpha * x + block.attn(block.norm1(x))
    return alpha * h + block.ffn(block.norm2(h))


def _deep_after_norm(block, x, alpha):
    h = alpha * block.norm1(x + block.attn(x))
    return alpha * block.norm2(h + block.ffn(h))


def _deep_attention_only(block, x, alpha):
    h = block.norm1(alpha * x + block.attn(x))
    return block.norm2(h + block.ffn(h))


def _deep_ffn_only(block, x, alpha):
    h = block.norm1(x + block.attn(x))
    return block.norm2(alpha * h + block.ffn(h))


def _deep_via_block(block, x, alpha):
    for name in ("residual_scale", "alpha"):  # whatever the block calls its DeepNorm option
        setattr(block, name, alpha)
    return block(x)


DEEP_CALLED = "calling the block itself is not the exercise"
DEEP_WRONG = {
    "alpha on the branch": (lambda b, x, a: (lambda h: b.norm2(h + a * b.ffn(h)))(b.norm1(x + a * b.attn(x))),
                            "on the residual"),
    "alpha on attention only": (_deep_attention_only, "attention sublayer only"),
    "alpha on the FFN only": (_deep_ffn_only, "FFN sublayer only"),
    "alpha after the norm": (_deep_after_norm, "multiplies the norm's output"),
    "alpha after the first norm only, none in the FFN": (
        lambda b, x, a: (lambda h: b.norm2(h + b.ffn(h)))(a * b.norm1(x + b.attn(x))), "normalized output"),
    "Pre-LN with alpha": (_deep_pre, "Pre-LN update with α"),
    "alpha forgotten (Post-LN)": (lambda b, x, a: _post(b, x), "α is missing"),
    "alpha squared": (lambda b, x, a: _deep(b, x, a * a), "α²"),
    "norm1 twice": (lambda b, x, a: _deep(b, x, a, b.norm1, b.norm1), "norm1 is used for both"),
    "norms swapped": (lambda b, x, a: _deep(b, x, a, b.norm2, b.norm1), "swapped"),
    "FFN residual from the block input": (lambda b, x, a: b.norm2(a * x + b.ffn(b.norm1(a * x + b.attn(x)))),
                                          "the block's input"),
    "the block called (Post-LN)": (lambda b, x, a: b(x), DEEP_CALLED),
    "the block called with its DeepNorm option set": (_deep_via_block, DEEP_CALLED),
    "residual divided by alpha": (lambda b, x, a: _deep(b, x, 1 / a), "on the residual"),  # LN(x/α + F) ≈ LN(x + αF)
    "branch divided by alpha (equal only without eps)": (
        lambda b, x, a: (lambda h: b.norm2(h + b.ffn(h) / a))(b.norm1(x + b.attn(x) / a)), "only without the norm's ε"),
}


def _deep_loop(block, x, alpha):
    for sublayer, norm in ((block.attn, block.norm1), (block.ffn, block.norm2)):
        x = norm(x.mul(alpha).add(sublayer(x)))
    return x


DEEP_RIGHT = {
    "from the parts": _deep,
    "a loop, x.mul(alpha).add(...)": _deep_loop,
    "alpha as a tensor, branch first": lambda b, x, a: (lambda t: (lambda h: b.norm2(b.ffn(h) + h * t))(
        b.norm1(b.attn(x) + x * t)))(torch.tensor(a, dtype=x.dtype)),
}


def test_deepnorm_at_alpha_one_is_post_ln():
    report = exercises.check_deepnorm_forward(lambda b, x, a: _post(b, x))
    assert report.cases[0].passed and "α = 1" in report.cases[0].name
    assert not report.passed


@pytest.mark.parametrize("check, fn", [(exercises.check_post_ln_forward, _flip_and_leave),
                                       (exercises.check_post_ln_forward, _changes_a_gain),
                                       (exercises.check_post_ln_forward, POST_WRONG["float32 inside, float64 given"][0]),
                                       (exercises.check_deepnorm_forward, _deep_via_block)])
def test_the_block_is_left_as_it_was_given(check, fn):
    seen, forward = [], TransformerBlock.forward

    def recording(block, x, *args):
        seen.append((block, block.placement, {k: v.clone() for k, v in block.state_dict().items()}))
        return fn(block, x, *args)

    check(recording)
    assert seen
    for block, placement, weights in seen:
        assert block.placement == placement
        assert all(torch.equal(block.state_dict()[k], v) and block.state_dict()[k].dtype == v.dtype
                   for k, v in weights.items())
    assert TransformerBlock.forward is forward


def test_the_hidden_norms_differ():
    seen = []
    exercises.check_post_ln_forward(lambda block, x: seen.append(block))
    exercises.check_deepnorm_forward(lambda block, x, a: seen.append(block))
    for block in seen:
        assert not torch.allclose(block.norm1.weight, block.norm2.weight)


def test_a_block_running_in_another_thread_is_not_the_learners_call():
    import threading

    block, stop = TransformerBlock(16, 4).double(), threading.Event()

    def train():  # a background training run, as notebook 04's widgets start
        while not stop.is_set():
            block(torch.randn(1, 3, 16, dtype=torch.float64))

    worker = threading.Thread(target=train)
    worker.start()
    try:
        report = exercises.check_post_ln_forward(_post)
    finally:
        stop.set()
        worker.join()
    assert report.passed, report.text()


# ---- notebook 04: check_deepnorm_init ------------------------------------------------------------------------------

def _scale(block, beta, names):
    with torch.no_grad():
        for name, p in block.named_parameters():
            if name in names:
                p.mul_(beta)


_ALL_ATTN = exercises.DEEPNORM_SCALED + ("attn.q_proj.weight", "attn.k_proj.weight")
_WITH_BIASES = exercises.DEEPNORM_SCALED + tuple(n.replace("weight", "bias") for n in exercises.DEEPNORM_SCALED)

INIT_WRONG = {
    "q and k scaled too": (lambda b, beta: _scale(b, beta, _ALL_ATTN), "DeepNet leaves q and k alone"),
    "the FFN only": (lambda b, beta: _scale(b, beta, exercises.DEEPNORM_SCALED[2:]), "attn.v_proj.weight is not scaled"),
    "attention only": (lambda b, beta: _scale(b, beta, exercises.DEEPNORM_SCALED[:2]),
                       "ffn.linear1.weight is not scaled"),
    "divided by beta": (lambda b, beta: _scale(b, 1 / beta, exercises.DEEPNORM_SCALED), "divided by β"),
    "beta twice": (lambda b, beta: (_scale(b, beta, exercises.DEEPNORM_SCALED),
                                    _scale(b, beta, exercises.DEEPNORM_SCALED)), "β twice"),
    "biases too": (lambda b, beta: _scale(b, beta, _WITH_BIASES), "not biases"),
    "every parameter": (lambda b, beta: _scale(b, beta, {n for n, _ in b.named_parameters()}), "scaled too"),
    "a scaled copy returned by the wrong factor": (
        lambda b, beta: (lambda c: (_scale(c, beta ** 0.5, exercises.DEEPNORM_SCALED), c)[1])(copy.deepcopy(b)),
        "not β times"),
    "nothing done": (lambda b, beta: b, "is not scaled"),
    "new Parameters in place of the weights": (
        lambda b, beta: [setattr(lin, "weight", torch.nn.Parameter(lin.weight.detach() * beta))
                         for lin in (b.ffn.linear1, b.ffn.linear2, b.attn.v_proj, b.attn.out_proj)],
        "replaced by a new Parameter"),
}
INIT_RIGHT = {
    "named parameters": exercises.deepnorm_init,
    "the four layers by name": lambda b, beta: [lin.weight.data.mul_(beta) for lin in
                                                (b.ffn.linear1, b.ffn.linear2, b.attn.v_proj, b.attn.out_proj)],
    "a scaled copy, returned": lambda b, beta: exercises.deepnorm_init(copy.deepcopy(b), beta),
}


def test_deepnorm_init_is_what_build_model_does():
    from course_utils.demos import placement as demo
    beta = demo.deepnorm_scales(4)[1]
    plain, scaled = demo.build_model(4, "post", 0), demo.build_model(4, "post", 0, deepnorm="beta")
    for block in plain.blocks:
        exercises.deepnorm_init(block, beta)
    for (name, p), q in zip(plain.named_parameters(), scaled.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0, msg=name)


# ---- every list above, against its checker ------------------------------------------------------------------------

CHECKERS = {  # checker, its plausible wrong answers (each with the words its failure must say), its right answers
    "depth-scaled gain": (exercises.check_depth_scaled_gain, GAIN_WRONG, GAIN_RIGHT),
    "residual_stack": (exercises.check_residual_stack, RESIDUAL_WRONG, RESIDUAL_RIGHT),
    "masked batch stats": (exercises.check_masked_batch_stats, MASKED_WRONG, MASKED_RIGHT),
    "layer_norm": (exercises.check_layer_norm, LAYER_NORM_WRONG, LAYER_NORM_RIGHT),
    "layer_norm_jacobian": (exercises.check_layer_norm_jacobian, JACOBIAN_WRONG, JACOBIAN_RIGHT),
    "layer_norm_backward": (exercises.check_layer_norm_backward, LAYER_NORM_BACKWARD_WRONG, LAYER_NORM_BACKWARD_RIGHT),
    "Post-LN forward": (exercises.check_post_ln_forward, POST_WRONG, POST_RIGHT),
    "DeepNorm forward": (exercises.check_deepnorm_forward, DEEP_WRONG, DEEP_RIGHT),
    "DeepNorm init": (exercises.check_deepnorm_init, INIT_WRONG, INIT_RIGHT),
    "rms_norm": (exercises.check_rms_norm, RMS_WRONG, RMS_RIGHT),
    "softcap": (exercises.check_softcap, SOFTCAP_WRONG, SOFTCAP_RIGHT),
    "QK-norm logits": (exercises.check_qk_norm_logits, QK_WRONG, QK_RIGHT),
    "attention weights": (exercises.check_attention_probs, ATTENTION_WRONG, ATTENTION_RIGHT),
    "mean pooling": (exercises.check_mean_pool, MEAN_POOL_WRONG, MEAN_POOL_RIGHT),
    "find the spike": (exercises.check_find_spike, FIND_SPIKE_WRONG, FIND_SPIKE_RIGHT),
}
UNBIASED_ON_D1 = pytest.mark.filterwarnings("ignore:var.*degrees of freedom:UserWarning")  # layer_norm's d = 1 case
BATCHED_T = pytest.mark.filterwarnings("ignore:The use of `x.T`:UserWarning")  # the k.T mistake, on a 4-d tensor
MARKS = {"layer_norm": [UNBIASED_ON_D1], "layer_norm_backward": [UNBIASED_ON_D1], "rms_norm": [UNBIASED_ON_D1], "QK-norm logits": [BATCHED_T],
         "attention weights": [BATCHED_T]}


@pytest.mark.filterwarnings(r"ignore:std\(\). degrees of freedom")  # torch.std on a one-feature token
@pytest.mark.parametrize("checker, label", [
    pytest.param(c, label, id=f"{c}-{label}", marks=MARKS.get(c, []))
    for c, (_, wrong, _) in CHECKERS.items() for label in wrong])
def test_each_checker_rejects_each_wrong_answer(checker, label):
    check, wrong, _ = CHECKERS[checker]
    fn, expect = wrong[label]
    _rejected(check(fn), expect)


@pytest.mark.parametrize("checker, label", [(c, label) for c, (_, _, right) in CHECKERS.items() for label in right],
                         ids=lambda v: v)
def test_each_checker_passes_each_right_answer(checker, label):
    check, _, right = CHECKERS[checker]
    report = check(right[label])
    assert report.passed, report.text()

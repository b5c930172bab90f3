"""Checkers for the learner's own implementations: hidden inputs, compared with the course's reference, and a report
that names the first case that fails and by how much. A checker never raises for a wrong or unfinished answer."""
from __future__ import annotations

import html
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor

from . import norms
from .residual import D_MODEL, MAX_DEPTH, stream_tokens, sublayer_stack
from .transformer import TransformerBlock, softcap

__all__ = ["CaseResult", "CheckReport", "call_learner", "run_case", "check_layer_norm", "check_rms_norm",
           "check_masked_batch_stats", "check_post_ln_forward", "depth_scaled_gain", "check_depth_scaled_gain",
           "check_softcap", "check_qk_norm_logits", "check_mean_pool"]


@dataclass
class CaseResult:
    """One hidden case: its name, whether it passed, and what went wrong."""
    name: str
    passed: bool
    detail: str = ""
    max_error: float = 0.0


@dataclass
class CheckReport:
    """All cases of one check; shows as a short verdict in a notebook."""
    exercise: str
    cases: list[CaseResult] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.cases) and all(c.passed for c in self.cases)

    @property
    def first_failure(self) -> CaseResult | None:
        return next((c for c in self.cases if not c.passed), None)

    def text(self) -> str:
        n_ok = sum(c.passed for c in self.cases)
        head = f"{self.exercise}: {n_ok} of {len(self.cases)} hidden cases pass."
        if self.passed:
            return head + " Well done."
        bad = self.first_failure
        return f"{head}\nFirst failing case: {bad.name}: {bad.detail}"

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        colour = "#007a4d" if self.passed else "#b00020"
        rows = "".join(
            f"<tr><td>{'✅' if c.passed else '❌'}</td><td>{html.escape(c.name)}</td>"
            f"<td>{html.escape(c.detail)}</td></tr>"
            for c in self.cases)
        verdict = html.escape(self.text().splitlines()[0])
        return f'<p style="color:{colour}"><b>{verdict}</b></p><table>{rows}</table>'


NOT_DONE = "not implemented yet: replace `raise NotImplementedError` with your code"


def call_learner(name: str, fn: Callable, *args) -> tuple[object, CaseResult | None]:
    """Call the learner's fn; returns (its output, None), or (None, a failed case) if it raised."""
    try:
        return fn(*args), None
    except NotImplementedError:
        return None, CaseResult(name, False, NOT_DONE)
    except Exception as exc:  # the learner's bug, reported rather than raised
        return None, CaseResult(name, False, f"raised {type(exc).__name__}: {exc}")


def _compare(name: str, got, want: Tensor, tol: float) -> CaseResult:
    if not isinstance(got, Tensor):
        return CaseResult(name, False, f"expected a torch.Tensor, got {type(got).__name__}")
    if got.shape != want.shape:
        return CaseResult(name, False, f"shape {tuple(got.shape)}, expected {tuple(want.shape)}")
    if got.dtype != want.dtype:
        return CaseResult(name, False, f"dtype {got.dtype}, expected {want.dtype} (keep the input's dtype)")
    err = float((got.detach() - want.detach()).abs().max()) if want.numel() else 0.0
    if not err <= tol:  # also catches NaN
        return CaseResult(name, False, f"max abs error {err:.3g} (tolerance {tol:g})", err)
    return CaseResult(name, True, f"max abs error {err:.1e}", err)


def run_case(name: str, fn: Callable, reference: Callable, inputs: list[Tensor], tol: float,
              grad: bool = False) -> CaseResult:
    """Call fn and reference on copies of inputs; compare outputs and, with grad, the gradients of the inputs."""
    mine = [t.clone().requires_grad_(grad and t.is_floating_point()) for t in inputs]
    ref = [t.clone().requires_grad_(grad and t.is_floating_point()) for t in inputs]
    got, failed = call_learner(name, fn, *mine)
    if failed:
        return failed
    want = reference(*ref)
    result = _compare(name, got, want, tol)
    if not result.passed or not grad:
        return result
    probe = torch.randn(want.shape, generator=torch.Generator().manual_seed(7), dtype=want.dtype)
    try:
        (got * probe).sum().backward()
    except Exception as exc:
        return CaseResult(name, False, f"backward failed ({type(exc).__name__}: {exc}): use torch ops only")
    (want * probe).sum().backward()
    for i, (a, b) in enumerate(zip(mine, ref)):
        if b.grad is None:
            continue
        if a.grad is None:
            return CaseResult(name, False, f"no gradient reached input {i}: do not detach or convert to numpy")
        err = float((a.grad - b.grad).abs().max())
        if not err <= tol * 10:
            return CaseResult(name, False, f"forward matches, but the gradient of input {i} is off by {err:.3g}",
                              err)
    return CaseResult(name, True, result.detail + ", gradients match", result.max_error)


def _norm_cases(with_bias: bool) -> list[tuple[str, list[Tensor], float, float, bool]]:
    """Hidden cases for a per-token norm: (name, [x, weight(, bias)], eps, tolerance, check gradients)."""
    g = torch.Generator().manual_seed(2024)

    def params(d, dtype=torch.float32):
        w = torch.rand(d, generator=g, dtype=dtype) + 0.5
        b = torch.randn(d, generator=g, dtype=dtype)
        return [w, b] if with_bias else [w]

    x = torch.randn(4, 6, 16, generator=g)
    return [
        ("one token, d=8", [torch.randn(8, generator=g), *params(8)], 1e-5, 1e-5, False),
        ("batch (4, 6, 16)", [x, *params(16)], 1e-5, 1e-5, False),
        ("d = 1", [torch.randn(3, 1, generator=g), *params(1)], 1e-5, 1e-5, False),
        ("large offset (x + 1000)", [x + 1000.0, *params(16)], 1e-5, 1e-3, False),
        ("tiny scale (x * 1e-3), eps matters", [x * 1e-3, *params(16)], 1e-5, 1e-4, False),
        ("eps = 0.1", [x, *params(16)], 0.1, 1e-5, False),
        ("float64", [x.double(), *params(16, torch.float64)], 1e-5, 1e-10, False),
        ("gradients through autograd", [x.double(), *params(16, torch.float64)], 1e-5, 1e-8, True),
    ]


def check_layer_norm(fn: Callable[[Tensor, Tensor, Tensor, float], Tensor]) -> CheckReport:
    """Check fn(x, weight, bias, eps) -> LayerNorm over the last dimension, against torch.nn.functional.layer_norm."""
    report = CheckReport("layer_norm")
    for name, inputs, eps, tol, grad in _norm_cases(with_bias=True):
        ref = lambda x, w, b, eps=eps: torch.nn.functional.layer_norm(x, x.shape[-1:], w, b, eps)
        report.cases.append(run_case(name, lambda x, w, b, eps=eps: fn(x, w, b, eps), ref, inputs, tol, grad))
    return report


def check_rms_norm(fn: Callable[[Tensor, Tensor, float], Tensor]) -> CheckReport:
    """Check fn(x, weight, eps) -> RMSNorm over the last dimension, against torch.nn.functional.rms_norm."""
    report = CheckReport("rms_norm")
    for name, inputs, eps, tol, grad in _norm_cases(with_bias=False):
        ref = lambda x, w, eps=eps: torch.nn.functional.rms_norm(x, x.shape[-1:], w, eps)
        report.cases.append(run_case(name, lambda x, w, eps=eps: fn(x, w, eps), ref, inputs, tol, grad))
    return report


def check_masked_batch_stats(fn: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]) -> CheckReport:
    """Check fn(x, mask) -> (mean, var): per-feature mean and biased variance over real tokens of (batch, seq, d)."""
    report = CheckReport("masked batch statistics")
    g = torch.Generator().manual_seed(11)

    def case(name, lengths, d, dtype=torch.float32, offset=0.0):
        lengths = torch.tensor(lengths)
        t = int(lengths.max()) + 2  # always some padding
        mask = torch.arange(t)[None, :] < lengths[:, None]
        x = (torch.randn(len(lengths), t, d, generator=g, dtype=dtype) + offset).masked_fill(~mask[..., None], 0.0)
        x[~mask] = torch.randn(int((~mask).sum()), d, generator=g, dtype=dtype) * 50  # loud padding: must be ignored
        return name, x, mask

    cases = [case("equal lengths", [5, 5, 5], 4), case("variable lengths", [1, 7, 3, 5], 8),
             case("one real token in a sequence", [1, 1, 6], 3), case("d = 1", [4, 2], 1),
             case("large offset", [6, 3, 2], 5, offset=500.0), case("float64", [3, 8], 6, torch.float64)]
    for name, x, mask in cases:
        want_mean, want_var, _ = norms.masked_mean_var(x, mask)
        got, failed = call_learner(name, fn, x.clone(), mask.clone())
        if failed:
            report.cases.append(failed)
            continue
        if not (isinstance(got, tuple) and len(got) == 2):
            report.cases.append(CaseResult(name, False, f"returned {type(got).__name__}; return (mean, var), each of "
                                                        "shape (d,)"))
            continue
        got_mean, got_var = got
        tol = 1e-10 if x.dtype == torch.float64 else 1e-4 * max(1.0, float(want_mean.abs().max()))
        mean_result = _compare(name + " (mean)", got_mean, want_mean, tol)
        var_result = _compare(name + " (variance)", got_var, want_var, tol * max(1.0, float(want_var.max())))
        worst = mean_result if not mean_result.passed else var_result
        if var_result.passed and mean_result.passed:
            worst = CaseResult(name, True, "mean and variance match")
        elif not var_result.passed and mean_result.passed and got_var.shape == want_var.shape:
            unbiased = norms.masked_mean_var(x, mask)[1] * int(mask.sum()) / (int(mask.sum()) - 1)
            if torch.allclose(got_var, unbiased, rtol=1e-4):
                worst.detail += " (this is the unbiased variance: divide by n, not n - 1)"
        report.cases.append(worst)
    return report


def check_post_ln_forward(fn: Callable[[TransformerBlock, Tensor], Tensor]) -> CheckReport:
    """Check fn(block, x) -> the Post-LN forward of `block` (use block.attn, block.ffn, block.norm1, block.norm2),
    against the course's TransformerBlock(placement="post") with the same weights."""
    report = CheckReport("Post-LN forward")
    for name, norm, seed, shape in [("LayerNorm block", "layer", 1, (2, 5, 16)),
                                    ("RMSNorm block", "rms", 2, (3, 4, 16)),
                                    ("one token", "layer", 3, (1, 1, 16))]:
        with torch.random.fork_rng(devices=[]):  # the same hidden weights every time; the learner's RNG untouched
            torch.manual_seed(seed)
            post = TransformerBlock(16, 4, norm=norm, placement="post").double()
            pre = TransformerBlock(16, 4, norm=norm, placement="pre").double()
        with torch.no_grad():  # non-trivial gains so a misplaced norm shows
            for p in post.parameters():
                p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(seed), dtype=p.dtype) * 0.1)
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 3
        pre.load_state_dict(post.state_dict())
        report.cases.append(run_case(name, lambda x: fn(pre, x), post, [x], 1e-10, grad=True))
    return report


# ---- notebook 01: shrink the sublayers with depth instead of normalizing -----------------------------------------

def depth_scaled_gain(depth: int) -> float:
    """The gain g that makes E|x_L|^2 = 4 |x_0|^2 (|x| doubles) through `depth` unnormalized amplifying sublayers."""
    return math.sqrt(2.0 ** (2.0 / depth) - 1.0)


def _stack_growth(gain: float, depth: int) -> float:
    """|x_L| / |x_0| (root mean square over 64 tokens) through the course's FFN stack, x_{l+1} = x_l + g f_l(x_l)."""
    x = x0 = stream_tokens(64, D_MODEL, 7)
    with torch.no_grad():
        for f in sublayer_stack("amplifies its input", "independent")[:depth]:
            x = x + gain * f(x)
    return float((x.pow(2).sum(-1).mean() / x0.pow(2).sum(-1).mean()).sqrt())


def check_depth_scaled_gain(fn: Callable[[int], float]) -> CheckReport:
    """Check fn(depth) -> g against depth_scaled_gain on hidden depths; each case also runs a real stack with it."""
    report = CheckReport("depth-scaled gain")
    for depth in (1, 7, 30, 120, 1000):
        name = f"depth {depth}"
        got, failed = call_learner(name, fn, depth)
        if failed:
            report.cases.append(failed)
            continue
        if isinstance(got, Tensor) and got.numel() == 1:
            got = got.item()
        if isinstance(got, bool) or not isinstance(got, (int, float)) or not math.isfinite(got) or got < 0:
            report.cases.append(CaseResult(name, False, f"expected a finite number >= 0, got {got!r}"))
            continue
        want = depth_scaled_gain(depth)
        err = abs(got - want) / want
        growth = (1.0 + got ** 2) ** (depth / 2)
        run = f"; a real {depth}-layer stack grew |x| by {_stack_growth(got, depth):.2f}x" if depth <= MAX_DEPTH else ""
        detail = f"g = {got:.4g} predicts |x| grows by {growth:.3g}x (target 2x){run}"
        report.cases.append(CaseResult(name, err <= 1e-3, detail, err))
    return report


# ---- notebook 06: soft-capping and QK-norm ------------------------------------------------------------------------

def check_softcap(fn: Callable[[Tensor, float], Tensor]) -> CheckReport:
    """Check fn(x, cap) -> cap * tanh(x / cap), elementwise, against the course's softcap."""
    report = CheckReport("softcap")
    g = torch.Generator().manual_seed(6)
    x = torch.randn(4, 7, generator=g) * 40
    cases = [("logits around the cap, cap 30", x, 30.0, 1e-4, False),
             ("small logits, cap 50 (almost the identity)", torch.randn(10, generator=g), 50.0, 1e-5, False),
             ("huge logits (1e6), cap 50: no overflow, no nan", torch.tensor([-1e6, -60.0, 0.0, 60.0, 1e6]), 50.0,
              1e-4, False),
             ("a small cap, 2.5", x, 2.5, 1e-5, False),
             ("float64", x.double(), 30.0, 1e-10, False),
             ("gradients through autograd", x.double(), 30.0, 1e-8, True)]
    for name, inputs, cap, tol, grad in cases:
        report.cases.append(run_case(name, lambda t, cap=cap: fn(t, cap), lambda t, cap=cap: softcap(t, cap),
                                     [inputs], tol, grad))
    return report


def _qk_reference(q: Tensor, k: Tensor, weight_q: Tensor, weight_k: Tensor, eps: float) -> Tensor:
    d = q.shape[-1]
    return F.rms_norm(q, (d,), weight_q, eps) @ F.rms_norm(k, (d,), weight_k, eps).transpose(-2, -1) / math.sqrt(d)


def check_qk_norm_logits(fn: Callable[[Tensor, Tensor, Tensor, Tensor, float], Tensor]) -> CheckReport:
    """Check fn(q, k, weight_q, weight_k, eps) -> RMSNorm(q) RMSNorm(k)^T / sqrt(d_head), normalizing over d_head."""
    report = CheckReport("QK-norm attention logits")
    g = torch.Generator().manual_seed(60)

    def gains(d, dtype=torch.float32):
        return [torch.rand(d, generator=g, dtype=dtype) + 0.5, torch.rand(d, generator=g, dtype=dtype) + 0.5]

    q, k = torch.randn(2, 3, 5, 8, generator=g), torch.randn(2, 3, 5, 8, generator=g)
    cases = [("one head, 4 tokens, d_head 8", [torch.randn(4, 8, generator=g), torch.randn(4, 8, generator=g),
                                               *gains(8)], 1e-6, 1e-5, False),
             ("(batch 2, heads 3, tokens 5, d_head 8)", [q, k, *gains(8)], 1e-6, 1e-5, False),
             ("3 queries, 6 keys", [torch.randn(3, 8, generator=g), torch.randn(6, 8, generator=g), *gains(8)],
              1e-6, 1e-5, False),
             ("q and k scaled by 1000: the logits must not change", [q * 1000, k * 1000, *gains(8)], 1e-6, 1e-4,
              False),
             ("tiny q and k (1e-4), eps = 1e-6 matters", [q * 1e-4, k * 1e-4, *gains(8)], 1e-6, 1e-4, False),
             ("float64", [q.double(), k.double(), *gains(8, torch.float64)], 1e-6, 1e-10, False),
             ("gradients through autograd", [q.double(), k.double(), *gains(8, torch.float64)], 1e-6, 1e-8, True)]
    for name, inputs, eps, tol, grad in cases:
        report.cases.append(run_case(name, lambda a, b, wq, wk, eps=eps: fn(a, b, wq, wk, eps),
                                     lambda a, b, wq, wk, eps=eps: _qk_reference(a, b, wq, wk, eps),
                                     inputs, tol, grad))
    return report


# ---- notebook 08: mean pooling over real tokens ---------------------------------------------------------------------

def check_mean_pool(fn: Callable[[Tensor, Tensor], Tensor]) -> CheckReport:
    """Check fn(token_states (batch, seq, d), attention_mask (batch, seq) bool) -> (batch, d), the mean over real
    tokens only, against mean_pool; padded positions hold loud values that must not leak in."""
    from .minilm import baseline, mean_pool  # here, not at the top: the other checkers never need the model module

    report = CheckReport("mean pooling")
    g = torch.Generator().manual_seed(8)

    def case(lengths, d, dtype=torch.float32):
        t = max(lengths) + 2
        mask = torch.arange(t)[None, :] < torch.tensor(lengths)[:, None]
        x = torch.randn(len(lengths), t, d, generator=g, dtype=dtype)
        return torch.where(mask[..., None], x, 100.0 + 50.0 * x), mask

    cases = [("equal lengths", *case([4, 4], 8)), ("variable lengths", *case([1, 6, 3], 16)),
             ("one real token each", *case([1, 1], 4)), ("float64", *case([5, 2, 7], 8, torch.float64))]
    base = baseline()
    cases.append(("the model's token states for the course's sentences", base.hidden[-1], base.mask))
    for name, x, mask in cases:
        want = mean_pool(x, mask)
        got, failed = call_learner(name, fn, x.clone(), mask.clone())
        if failed:
            report.cases.append(failed)
            continue
        if not isinstance(got, Tensor) or got.shape != want.shape:
            shape = tuple(got.shape) if isinstance(got, Tensor) else type(got).__name__
            report.cases.append(CaseResult(name, False, f"returned {shape}, expected shape {tuple(want.shape)}"))
            continue
        err = float((got.to(want.dtype) - want).abs().max())
        tol = 1e-10 if want.dtype == torch.float64 else 1e-5
        if not err <= tol:
            hint = " (is padding leaking into the mean?)" if err > 1 else ""
            report.cases.append(CaseResult(name, False, f"max abs error {err:.3g} (tolerance {tol:g}){hint}", err))
        else:
            report.cases.append(CaseResult(name, True, f"max abs error {err:.1e}", err))
    return report

"""Checkers for the learner's own implementations: hidden inputs, compared with the course's reference, and a report
that names the first case that fails and by how much. A checker never raises for a wrong or unfinished answer, and
where a wrong answer matches a classic mistake the report names the mistake. Each checker's hidden cases start with
the one where the classic mistakes show largest, so the first failure a learner reads is the telling one, not a
round-off-sized miss. A checker of a from-scratch exercise runs inside `teaching(...)`, which fails an answer that
calls the library's own version of what it asks for (F.layer_norm, nn.LayerNorm, autograd), however it was imported.
tests/test_wrong_answers.py holds, for every checker, the plausible wrong answers it must reject
(each with its own hint) and right answers, written several ways, it must pass."""
from __future__ import annotations

import copy
import html
import math
import numbers
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import norms
from .residual import D_MODEL, MAX_DEPTH, stream_tokens, sublayer_stack
from .transformer import TransformerBlock, softcap

__all__ = ["CaseResult", "CheckReport", "call_learner", "run_case", "teaching", "NORM_LIBRARY", "AUTOGRAD", "check_layer_norm",
           "check_layer_norm_jacobian", "check_layer_norm_backward", "check_rms_norm",
           "check_masked_batch_stats", "check_post_ln_forward", "check_deepnorm_forward", "check_deepnorm_init",
           "deepnorm_init", "DEEPNORM_SCALED", "depth_scaled_gain",
           "check_depth_scaled_gain", "check_residual_stack", "check_softcap", "check_attention_probs", "check_qk_norm_logits", "check_mean_pool",
           "check_find_spike"]


@dataclass
class CaseResult:
    """One hidden case: its name, whether it passed, and what went wrong."""
    name: str
    passed: bool
    detail: str = ""
    max_error: float = 0.0
    mistake: str = ""  # the classic mistake the answer matches, when one does


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

    def case(self, name: str) -> CaseResult:
        """The case called `name`."""
        for c in self.cases:
            if c.name == name:
                return c
        raise KeyError(name)

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
IN_PLACE = "your code changes a tensor in place (x += ..., x.sub_(...), x[...] = ...): write x = x + ... instead"
BROADCAST = ("the shapes do not line up: reduce with keepdim=True so the statistics broadcast against x, one per "
             "token")
FLOAT32_ONLY = ("right to float32 precision only: compute in the input's dtype (no .float(), no float32 tensors "
                "in between)")
Mistake = tuple[str, Callable[..., Tensor]]  # (what went wrong, a function like the reference's that does it)


_NORMS = ("layer_norm", "rms_norm", "group_norm", "instance_norm", "batch_norm")
NORM_LIBRARY: dict[Callable, str] = {
    **{getattr(F, n): f"F.{n}" for n in _NORMS}, **{getattr(torch, n): f"torch.{n}" for n in _NORMS},
    torch.native_layer_norm: "torch.native_layer_norm", torch.native_batch_norm: "torch.native_batch_norm"}
"""The library norms a from-scratch exercise may not call (nn.LayerNorm and nn.RMSNorm call one of these)."""
AUTOGRAD: dict[Callable, str] = {Tensor.backward: "Tensor.backward", torch.autograd.grad: "torch.autograd.grad"}
"""Autograd's entry points (torch.func's vjp and jacrev, torch.autograd.functional, all end in torch.autograd.grad),
which a hand-written backward pass may not call."""
_taught = threading.local()


@contextmanager
def teaching(library: dict[Callable, str], what: str) -> Iterator[None]:
    """While a checker runs: the learner's function may not call `library`, the functions the exercise asks for."""
    before = getattr(_taught, "banned", None)
    _taught.banned = (library, what)
    try:
        yield
    finally:
        _taught.banned = before


class _Watch(torch.overrides.TorchFunctionMode):
    """Sees every torch function the learner's code calls, however it was imported (nn.LayerNorm too, which calls
    F.layer_norm), and refuses the banned ones; a refusal the learner's code catches is still seen."""

    def __init__(self, banned: dict[Callable, str]):
        super().__init__()
        self.banned, self.called = banned, ""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in self.banned:
            self.called = self.called or self.banned[func]
            raise _BannedCall(self.banned[func])
        return func(*args, **(kwargs or {}))


class _BannedCall(Exception):
    pass


def call_learner(name: str, fn: Callable, *args) -> tuple[object, CaseResult | None]:
    """Call the learner's fn; returns (its output, None), or (None, a failed case) if it raised or called a library
    function the exercise asks the learner to write (see teaching)."""
    banned = getattr(_taught, "banned", None)
    watch = _Watch(banned[0]) if banned else None
    try:
        if watch is None:
            return fn(*args), None
        with watch:
            got = fn(*args)
    except NotImplementedError:
        return None, CaseResult(name, False, NOT_DONE)
    except _BannedCall:
        got = None
    except Exception as exc:  # the learner's bug, reported rather than raised
        if not (watch and watch.called):
            hint = (f" ({IN_PLACE})" if "in-place operation" in str(exc) else
                    f" ({BROADCAST})" if "must match the size of tensor" in str(exc) else "")
            return None, CaseResult(name, False, f"raised {type(exc).__name__}: {exc}{hint}")
    if watch.called:
        return None, CaseResult(name, False, f"calls {watch.called}, the library's own version of what this "
                                             f"exercise asks you to write: {banned[1]}", mistake="library call")
    return got, None


def _compare(name: str, got, want: Tensor, tol: float) -> CaseResult:
    if not isinstance(got, Tensor):
        return CaseResult(name, False, f"expected a torch.Tensor, got {type(got).__name__}")
    if got.shape != want.shape:
        return CaseResult(name, False, f"shape {tuple(got.shape)}, expected {tuple(want.shape)}")
    if got.dtype != want.dtype:
        return CaseResult(name, False, f"dtype {got.dtype}, expected {want.dtype} (keep the input's dtype)")
    err = float((got.detach() - want.detach()).abs().max()) if want.numel() else 0.0
    if not err <= tol:  # also catches NaN
        finite = "" if bool(torch.isfinite(got).all()) else "; the output contains nan or inf"
        return CaseResult(name, False, f"max abs error {err:.3g} (tolerance {tol:g}){finite}", err)
    return CaseResult(name, True, f"max abs error {err:.1e}", err)


def _same(a: Tensor, b: Tensor) -> bool:
    """torch.equal that counts nan as equal to nan (an input may hold nan in its pads)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if not a.is_floating_point():
        return torch.equal(a, b)
    return bool(((a == b) | (a.isnan() & b.isnan())).all())


def _input_problem(got, given: Sequence, originals: Sequence, names: Sequence[str], views: bool = True) -> str:
    """What is wrong with how fn treated its inputs (changed one in place, returned one or a view of it), or ''.
    views=False allows a view (a pooling may rightly return x[:, 0]; its value is checked instead)."""
    for t, before, name in zip(given, originals, names):
        if isinstance(t, Tensor) and not _same(t.detach(), before):
            return (f"changed its input {name} in place: the caller's tensor is overwritten. Compute into a new "
                    f"tensor (x = x - mu, not x -= mu or x.sub_(mu))")
    for out in (got if isinstance(got, (tuple, list)) else (got,)) if views else ():
        for t, name in zip(given, names):
            if (isinstance(out, Tensor) and isinstance(t, Tensor) and out.numel() and t.numel()
                    and out.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()):
                return f"returned {name} itself or a view of it: return a new tensor, not the input"
    return ""


def _closest_mistake(got: Tensor, err: float, mistakes: Sequence[Mistake], inputs: Sequence) -> str:
    """The mistake whose output matches got at least 10x better than the reference does, or ''."""
    best_err, best = 0.1 * err, ""  # NaN err: no mistake matches
    for text, wrong in mistakes:
        try:
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # e.g. var over one element
                out = wrong(*[t.detach().clone() if isinstance(t, Tensor) else t for t in inputs])
        except Exception:  # a mistake that cannot happen on this input
            continue
        if isinstance(out, Tensor) and out.shape == got.shape:
            e = float((got.detach().to(out.dtype) - out).abs().max())
            if e < best_err:
                best_err, best = e, text
    return best


def run_case(name: str, fn: Callable, reference: Callable, inputs: list[Tensor], tol: float,
             grad: bool = False, *, mistakes: Sequence[Mistake] = (), arg_names: Sequence[str] = ()) -> CaseResult:
    """Call fn and reference on copies of inputs; compare outputs and, with grad, the gradients of the inputs. fn
    must leave its inputs unchanged; a wrong output that matches one of `mistakes` gets that mistake's text."""
    names = list(arg_names) or [f"{i}" for i in range(len(inputs))]
    mine = [t.clone().requires_grad_(grad and t.is_floating_point()) for t in inputs]
    ref = [t.clone().requires_grad_(grad and t.is_floating_point()) for t in inputs]
    got, failed = call_learner(name, fn, *mine)
    if failed:
        return failed
    problem = _input_problem(got, mine, inputs, names)
    if problem:
        return CaseResult(name, False, problem)
    want = reference(*ref)
    result = _compare(name, got, want, tol)
    if not result.passed and isinstance(got, Tensor) and got.shape == want.shape and got.dtype == want.dtype:
        _add_hint(result, _closest_mistake(got, result.max_error, mistakes, inputs))
    if not result.passed or not grad:
        return result
    probe = torch.randn(want.shape, generator=torch.Generator().manual_seed(7), dtype=want.dtype)
    if not got.requires_grad:
        return CaseResult(name, False, "no gradient reached the inputs: the output has no grad_fn. Do not detach, "
                                       "use torch.no_grad() or convert to numpy; use torch ops only")
    try:
        (got * probe).sum().backward()
    except Exception as exc:
        return CaseResult(name, False, f"backward failed ({type(exc).__name__}: {exc}): use torch ops only")
    (want * probe).sum().backward()
    for i, (a, b) in enumerate(zip(mine, ref)):
        if b.grad is None:
            continue
        if a.grad is None:
            return CaseResult(name, False, f"no gradient reached input {names[i]}: do not detach or convert to "
                                           "numpy")
        err = float((a.grad - b.grad).abs().max())
        if not err <= tol * 10:
            return CaseResult(name, False, f"forward matches, but the gradient of input {names[i]} is off by "
                                           f"{err:.3g}", err)
    return CaseResult(name, True, result.detail + ", gradients match", result.max_error)


def _add_hint(case: CaseResult, hint: str) -> None:
    """Name the mistake behind a failed case that has none named yet."""
    if hint and not case.passed and not case.mistake:
        case.mistake = hint
        case.detail += f": {hint}"


# ---- notebook 03: LayerNorm by hand (and RMSNorm, notebook 05) ---------------------------------------------------

TINY_RMS = "tokens with a tiny RMS (about 1e-3, near √ε ≈ 3e-3): where ε's place shows most"


def _norm_cases(with_bias: bool) -> list[tuple[str, list[Tensor], float, float, bool]]:
    """Hidden cases for a per-token norm: (name, [x, weight(, bias)], eps, tolerance, check gradients). RMSNorm's
    list starts with tiny-RMS tokens, where putting ε outside the root is off by a factor of about 3 rather than by
    1e-5 (the round-off-sized miss an ordinary token shows)."""
    g = torch.Generator().manual_seed(2024)

    def params(d, dtype=torch.float32):
        w = torch.rand(d, generator=g, dtype=dtype) + 0.5
        b = torch.randn(d, generator=g, dtype=dtype)
        return [w, b] if with_bias else [w]

    x = torch.randn(4, 6, 16, generator=g)
    lead = [] if with_bias else [(TINY_RMS, [torch.randn(2, 8, generator=g) * 1e-3, *params(8)], 1e-5, 1e-4, False)]
    cases = lead + [
        ("one token, d=8", [torch.randn(8, generator=g), *params(8)], 1e-5, 1e-5, False),
        ("batch (4, 6, 16)", [x, *params(16)], 1e-5, 1e-5, False),
        ("d = 1", [torch.randn(3, 1, generator=g), *params(1)], 1e-5, 1e-5, False),
        ("large offset (x + 1000)", [x + 1000.0, *params(16)], 1e-5, 1e-3, False),
        ("tiny scale (x * 1e-3), eps matters", [x * 1e-3, *params(16)], 1e-5, 1e-4, False),
        ("eps = 0.1", [x, *params(16)], 0.1, 1e-5, False),
        ("float64", [x.double(), *params(16, torch.float64)], 1e-5, 1e-10, False),
        ("gradients through autograd", [x.double(), *params(16, torch.float64)], 1e-5, 1e-8, True),
    ]
    if not with_bias:  # drawn last, so the cases above keep their numbers: an odd width under three leading dims
        cases.append(("odd width, leading dims (2, 3, 5, 7)", [torch.randn(2, 3, 5, 7, generator=g), *params(7)],
                      1e-5, 1e-5, False))
    return cases


def _hat(x: Tensor, eps: float, correction: int = 0, dim=-1) -> tuple[Tensor, Tensor]:
    """x̂ and s = sqrt(σ² + ε) over dim, σ² dividing by d - correction."""
    s = torch.sqrt(torch.var(x, dim, keepdim=True, correction=correction) + eps)
    return (x - x.mean(dim, keepdim=True)) / s, s


def _standardized(x: Tensor, eps: float, dim=-1, correction: int = 0) -> Tensor:
    return _hat(x, eps, correction, dim)[0]


LAYER_NORM_MISTAKES: list[Mistake] = [
    ("σ² divides by d − 1 (torch.var's default); LayerNorm's divides by d: var(..., unbiased=False)",
     lambda x, w, b, eps: _standardized(x, eps, correction=1) * w + b),
    ("ε is added to σ; it belongs under the square root, beside σ²: (x − μ) / sqrt(σ² + ε)",
     lambda x, w, b, eps: (x - x.mean(-1, keepdim=True)) / (x.var(-1, keepdim=True, unbiased=False).sqrt() + eps)
     * w + b),
    ("ε is missing: (x − μ) / sqrt(σ² + ε)", lambda x, w, b, eps: _standardized(x, 0.0) * w + b),
    ("γ (weight) is not applied: x̂ · γ + β", lambda x, w, b, eps: _standardized(x, eps) + b),
    ("β (bias) is not applied: x̂ · γ + β", lambda x, w, b, eps: _standardized(x, eps) * w),
    ("neither γ nor β is applied: x̂ · γ + β", lambda x, w, b, eps: _standardized(x, eps)),
    ("β is added before scaling by γ: the order is x̂ · γ + β", lambda x, w, b, eps: (_standardized(x, eps) + b) * w),
    ("μ and σ² are taken over the whole tensor; LayerNorm takes one pair per token, over the last dimension",
     lambda x, w, b, eps: (x - x.mean()) / torch.sqrt(x.var(unbiased=False) + eps) * w + b),
    ("μ and σ² are taken over the wrong dimension; LayerNorm normalizes each token over its features, dim=-1",
     lambda x, w, b, eps: _standardized(x, eps, dim=0) * w + b),
    ("x − μ is divided by the root mean square of x, not by σ: compute σ² from x − μ",
     lambda x, w, b, eps: (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
     * w + b),
    ("the input is normalized twice", lambda x, w, b, eps: _standardized(_standardized(x, eps), eps) * w + b),
]


def _check_norm(report: CheckReport, fn: Callable, reference: Callable, with_bias: bool,
                mistakes: Sequence[Mistake]) -> CheckReport:
    names = ["x", "weight", "bias"] if with_bias else ["x", "weight"]
    for name, inputs, eps, tol, grad in _norm_cases(with_bias):
        report.cases.append(run_case(name, lambda *t, eps=eps: fn(*t, eps), lambda *t, eps=eps: reference(*t, eps),
                                     inputs, tol, grad, mistakes=[(m, lambda *t, eps=eps, wrong=wrong: wrong(*t, eps))
                                                                  for m, wrong in mistakes], arg_names=names))
    f64 = report.case("float64")
    if report.case("batch (4, 6, 16)").passed and 0 < f64.max_error < 1e-4:
        _add_hint(f64, FLOAT32_ONLY)
    return report


def check_layer_norm(fn: Callable[[Tensor, Tensor, Tensor, float], Tensor]) -> CheckReport:
    """Check fn(x, weight, bias, eps) -> LayerNorm over the last dimension, against torch.nn.functional.layer_norm."""
    with teaching(NORM_LIBRARY, "write it from tensor operations (mean, var or sums, sqrt)"):
        report = _check_norm(CheckReport("layer_norm"), fn,
                             lambda x, w, b, eps: F.layer_norm(x, x.shape[-1:], w, b, eps), True, LAYER_NORM_MISTAKES)
    if report.case("batch (4, 6, 16)").passed:  # right on x, wrong on x + 1000: round-off, not the formula
        _add_hint(report.case("large offset (x + 1000)"),
                  "x is right but x + 1000 is not. In float32, x² ≈ 10⁶ keeps about 7 significant digits, so "
                  "E[x²] − μ² cancels most of the digits of σ² ≈ 1 (catastrophic cancellation): compute σ² as the "
                  "mean of (x − μ)²")
    d1 = report.case("d = 1")
    if "contains nan" in d1.detail:
        _add_hint(d1, "with d = 1, x − μ = 0 and σ² = 0: ε under the square root keeps 0 / 0 away")
    return report


# The Jacobian and the backward pass of notebook 03, §6: written from the formula, checked against autograd (which the
# checker calls and the learner's code may not).
BY_HAND = {**AUTOGRAD, **NORM_LIBRARY}
BY_HAND_WHAT = "derive it from the Jacobian and write it with tensor operations; autograd only checks it"




def _ln_jacobian_reference(x: Tensor) -> Tensor:
    return torch.autograd.functional.jacobian(lambda v: F.layer_norm(v, v.shape[-1:], eps=0.0), x)


def _jac(x: Tensor, ones: float = 1.0, hats: float = 1.0, power: int = 1, correction: int = 0, eps: float = 0.0,
         centred: bool = False, sign: float = -1.0, eye: float = 1.0) -> Tensor:
    """(eye·I - ones·11ᵀ/d + sign·hats·vvᵀ/d) / s**power, v = x̂ (or x − μ when centred): the formula and its mistakes."""
    d = x.shape[-1]
    x_hat, s = _hat(x, eps, correction)
    v = x - x.mean() if centred else x_hat
    one = torch.ones(d, dtype=x.dtype)
    return (eye * torch.eye(d, dtype=x.dtype) - ones * torch.outer(one, one) / d
            + sign * hats * torch.outer(v, v) / d) / s ** power


LAYER_NORM_JACOBIAN_MISTAKES: list[Mistake] = [
    ("the −11ᵀ/d term is missing: the mean subtraction's projection P = I − 11ᵀ/d", lambda x: _jac(x, ones=0.0)),
    ("the −x̂x̂ᵀ/d term is missing: σ depends on x too (dσ = x̂ᵀdx / d)", lambda x: _jac(x, hats=0.0)),
    ("both projections are missing: that is I/σ", lambda x: _jac(x, ones=0.0, hats=0.0)),
    ("the 1/σ in front is missing", lambda x: _jac(x, power=0)),
    ("divided by σ², not σ: x̂ = (x − μ)/σ brings one 1/σ", lambda x: _jac(x, power=2)),
    ("σ² divides by d − 1 (torch.var's default); LayerNorm's divides by d", lambda x: _jac(x, correction=1)),
    ("ε is in σ: this Jacobian is for ε = 0", lambda x: _jac(x, eps=1e-5)),
    ("the outer product uses x − μ, not x̂ = (x − μ)/σ", lambda x: _jac(x, centred=True)),
    ("the x̂x̂ᵀ/d term has the wrong sign: it is subtracted", lambda x: _jac(x, sign=1.0)),
    ("11ᵀ is not divided by d", lambda x: _jac(x, ones=x.shape[-1])),
    ("x̂x̂ᵀ is not divided by d", lambda x: _jac(x, hats=x.shape[-1])),
    ("the identity is missing: I − 11ᵀ/d − x̂x̂ᵀ/d", lambda x: _jac(x, eye=0.0)),
]


def check_layer_norm_jacobian(fn: Callable[[Tensor], Tensor]) -> CheckReport:
    """Check fn(x) -> dLN/dx (d, d) for one token x (d,), γ = 1, ε = 0, against autograd's Jacobian of F.layer_norm."""
    g = torch.Generator().manual_seed(2025)
    cases = [("one token, d = 8, float64", torch.randn(8, generator=g, dtype=torch.float64), 1e-9),
             ("d = 2: x̂ = ±1, nothing left to turn", torch.randn(2, generator=g, dtype=torch.float64), 1e-9),
             ("mean 5, spread 3, d = 16", 5 + 3 * torch.randn(16, generator=g, dtype=torch.float64), 1e-9),
             ("spread 0.01, d = 16 (large 1/σ)", 0.01 * torch.randn(16, generator=g, dtype=torch.float64), 1e-6),
             ("float32, d = 32", torch.randn(32, generator=g), 1e-4)]
    report = CheckReport("layer_norm_jacobian")
    with teaching(BY_HAND, BY_HAND_WHAT):
        for name, x, tol in cases:
            report.cases.append(run_case(name, fn, _ln_jacobian_reference, [x], tol,
                                         mistakes=LAYER_NORM_JACOBIAN_MISTAKES, arg_names=["x"]))
    return report


def _ln_backward_reference(x: Tensor, grad_out: Tensor, eps: float) -> Tensor:
    x = x.detach().requires_grad_()
    return torch.autograd.grad(F.layer_norm(x, x.shape[-1:], eps=eps), x, grad_out)[0]


def _backward(x: Tensor, g: Tensor, eps: float, mean_term: bool = True, hat_term: bool = True, correction: int = 0,
              s_of=None, power: int = 1, centred: bool = False, reduce=torch.mean, sign: float = -1.0,
              dim: int = -1) -> Tensor:
    """(g − mean(g) − x̂·mean(g·x̂)) / s, s = sqrt(σ² + ε), and the mistakes: a term dropped, another σ, ..."""
    x_hat, s = _hat(x, eps, correction)
    if s_of is not None:
        s = s_of(x)
        x_hat = (x - x.mean(-1, keepdim=True)) / s
    v = x - x.mean(-1, keepdim=True) if centred else x_hat
    out = g
    if mean_term:
        out = out - reduce(g, dim, keepdim=True)
    if hat_term:
        out = out + sign * v * reduce(g * v, dim, keepdim=True)
    return out / s ** power


def _sigma(x: Tensor) -> Tensor:
    return x.var(-1, keepdim=True, unbiased=False).sqrt()


LAYER_NORM_BACKWARD_MISTAKES: list[Mistake] = [
    ("the mean term is missing: the gradient loses its mean, g − mean(g), because LayerNorm ignores a shift along 1",
     lambda x, g, eps: _backward(x, g, eps, mean_term=False)),
    ("the x̂ term is missing: − x̂·mean(g·x̂) comes from σ depending on x (LayerNorm ignores a rescaling along x̂)",
     lambda x, g, eps: _backward(x, g, eps, hat_term=False)),
    ("both terms are missing: that is g / σ, as if μ and σ were constants",
     lambda x, g, eps: _backward(x, g, eps, mean_term=False, hat_term=False)),
    ("σ² divides by d − 1 (torch.var's default); LayerNorm's divides by d: var(..., unbiased=False)",
     lambda x, g, eps: _backward(x, g, eps, correction=1)),
    ("ε is added to σ; it belongs under the square root: divide by sqrt(σ² + ε), and x̂ uses the same root",
     lambda x, g, eps: _backward(x, g, eps, s_of=lambda x: _sigma(x) + eps)),
    ("ε is missing: divide by sqrt(σ² + ε), and x̂ = (x − μ) / sqrt(σ² + ε)",
     lambda x, g, eps: _backward(x, g, eps, s_of=_sigma)),
    ("the 1/σ in front is missing: divide the bracket by sqrt(σ² + ε)",
     lambda x, g, eps: _backward(x, g, eps, power=0)),
    ("divided by σ², not σ: the Jacobian carries one 1/σ", lambda x, g, eps: _backward(x, g, eps, power=2)),
    ("the last term uses x − μ, not x̂ = (x − μ)/sqrt(σ² + ε)", lambda x, g, eps: _backward(x, g, eps, centred=True)),
    ("sums where the formula has means: mean(g) = Σg / d", lambda x, g, eps: _backward(x, g, eps, reduce=torch.sum)),
    ("the x̂ term has the wrong sign: subtract x̂·mean(g·x̂)", lambda x, g, eps: _backward(x, g, eps, sign=1.0)),
    ("the means are over the wrong dimension: each token's own, over its features, dim=-1",
     lambda x, g, eps: _backward(x, g, eps, dim=0)),
]


def check_layer_norm_backward(fn: Callable[[Tensor, Tensor, float], Tensor]) -> CheckReport:
    """Check fn(x, grad_out, eps) -> dL/dx for LayerNorm over the last dimension (γ = 1, β = 0), given grad_out =
    dL/dLN(x), against autograd through F.layer_norm. The first case, tokens of spread near √ε, is where a misplaced
    or missing ε shows as plainly as the other classic mistakes."""
    g = torch.Generator().manual_seed(2026)

    def rand(*shape, dtype=torch.float64):
        return torch.randn(*shape, generator=g, dtype=dtype)

    x = rand(4, 6, 16)
    cases = [("low-spread tokens (x · 1e-3): ε matters", [x * 1e-3, rand(4, 6, 16)], 1e-5, 1e-7),
             ("batch (4, 6, 16), float64", [x, rand(4, 6, 16)], 1e-5, 1e-9),
             ("one token, d = 8, float32", [rand(8, dtype=torch.float32), rand(8, dtype=torch.float32)], 1e-5, 1e-4),
             ("three leading dimensions (2, 3, 5, 7), float32",
              [rand(2, 3, 5, 7, dtype=torch.float32), rand(2, 3, 5, 7, dtype=torch.float32)], 1e-5, 1e-4),
             ("eps = 0.1", [x, rand(4, 6, 16)], 0.1, 1e-9),
             ("d = 1: nothing passes back", [rand(5, 1), rand(5, 1)], 1e-5, 1e-9),
             ("large offset (x + 1000), float64", [x + 1000, rand(4, 6, 16)], 1e-5, 1e-8),
             ("one token, d = 768, float64", [rand(768), rand(768)], 1e-5, 1e-9)]
    report = CheckReport("layer_norm_backward")
    with teaching(BY_HAND, BY_HAND_WHAT):
        for name, inputs, eps, tol in cases:
            report.cases.append(run_case(
                name, lambda x, g, eps=eps: fn(x, g, eps), lambda x, g, eps=eps: _ln_backward_reference(x, g, eps),
                inputs, tol, mistakes=[(m, lambda x, g, eps=eps, wrong=wrong: wrong(x, g, eps))
                                       for m, wrong in LAYER_NORM_BACKWARD_MISTAKES], arg_names=["x", "grad_out"]))
    d1 = report.case("d = 1: nothing passes back")
    if "contains nan" in d1.detail:
        _add_hint(d1, "with d = 1, x − μ = 0 and σ² = 0: ε under the square root keeps 0 / 0 away (and the "
                      "unbiased variance divides by d − 1 = 0)")
    return report


def _rms_of(x: Tensor, eps: float, dim=-1, denominator=None) -> Tensor:
    """x / sqrt(Σx²/n + eps) over dim, n = the size of dim unless `denominator` says otherwise."""
    n = x.shape[dim] if denominator is None else denominator(x.shape[dim])
    return x / torch.sqrt(x.pow(2).sum(dim, keepdim=True) / n + eps)


RMS_NORM_MISTAKES: list[Mistake] = [
    ("ε is added to the RMS; it belongs under the square root, beside the mean of the squares: "
     "x / sqrt(mean(x²) + ε). The two agree for ordinary tokens; for a token with RMS 1e-3 and ε = 1e-5 they differ "
     "by a factor of about 3, and by more for smaller tokens",
     lambda x, w, eps: x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps) * w),
    ("ε is missing: x / sqrt(mean(x²) + ε)", lambda x, w, eps: _rms_of(x, 0.0) * w),
    ("ε is squared: x / sqrt(mean(x²) + ε), with ε as given", lambda x, w, eps: _rms_of(x, eps * eps) * w),
    ("ε is not the one given: use the eps argument, not a number typed in (such as 1e-5); F.rms_norm and nn.RMSNorm "
     "with eps=None (their default) use the dtype's machine epsilon, about 1.2e-7 in float32; pass eps",
     lambda x, w, eps: _rms_of(x, torch.finfo(x.dtype).eps) * w),
    ("this divides by the root of the mean of x, not of the mean of its squares: square first, sqrt(mean(x²) + ε)",
     lambda x, w, eps: x / torch.sqrt(x.mean(-1, keepdim=True) + eps) * w),
    ("γ is applied twice: multiply the normalized x by γ once, γ ⊙ x / RMS(x)",
     lambda x, w, eps: _rms_of(x, eps) * w * w),
    ("the mean is subtracted: that is LayerNorm without β. RMSNorm does not re-center; it divides x itself by its RMS",
     lambda x, w, eps: _standardized(x, eps) * w),
    ("x is divided by σ, its spread about the mean, not by its RMS: RMS(x) = sqrt(mean(x²)), no mean subtracted",
     lambda x, w, eps: x / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + eps) * w),
    ("x is divided by torch.std, its spread about the mean (and over d − 1), not by its RMS: "
     "RMS(x) = sqrt(mean(x²)), no mean subtracted", lambda x, w, eps: x / torch.sqrt(x.var(-1, keepdim=True) + eps) * w),
    ("the square root is missing: divide by sqrt(mean(x²) + ε), not by mean(x²) + ε",
     lambda x, w, eps: x / (x.pow(2).mean(-1, keepdim=True) + eps) * w),
    ("this divides by the norm ‖x‖ = sqrt(Σx²); the RMS divides the sum of squares by d first: sqrt(Σx²/d + ε)",
     lambda x, w, eps: _rms_of(x, eps, denominator=lambda d: 1) * w),
    ("the sum of squares is divided by d − 1; the mean of the squares divides by d",
     lambda x, w, eps: _rms_of(x, eps, denominator=lambda d: d - 1) * w),
    ("γ is applied before normalizing: RMS(γ ⊙ x) divides most of γ out again. Normalize first, then scale: "
     "γ ⊙ (x / RMS(x))", lambda x, w, eps: _rms_of(x * w, eps)),
    ("γ (weight) is not applied: γ ⊙ x / RMS(x)", lambda x, w, eps: _rms_of(x, eps)),
    ("x is divided by the mean of |x|, not by its RMS: square, average, then take the root, "
     "sqrt(mean(x²) + ε)", lambda x, w, eps: x / (x.abs().mean(-1, keepdim=True) + eps) * w),
    ("x is divided by the mean of |x|, not by its RMS: square, average, then take the root, "
     "sqrt(mean(x²) + ε)", lambda x, w, eps: x / torch.sqrt(x.abs().mean(-1, keepdim=True) ** 2 + eps) * w),
    ("the RMS is taken over the whole tensor; RMSNorm takes one per token, over the last dimension",
     lambda x, w, eps: x / torch.sqrt(x.pow(2).mean() + eps) * w),
    ("the RMS is taken over the wrong dimension; RMSNorm normalizes each token over its features, dim=-1",
     lambda x, w, eps: _rms_of(x, eps, dim=0) * w),
    ("x is multiplied by its RMS instead of divided by it", lambda x, w, eps: x * torch.sqrt(
        x.pow(2).mean(-1, keepdim=True) + eps) * w),
]


def check_rms_norm(fn: Callable[[Tensor, Tensor, float], Tensor]) -> CheckReport:
    """Check fn(x, weight, eps) -> RMSNorm over the last dimension, against torch.nn.functional.rms_norm. The first
    case is a token whose RMS is near √ε, so a misplaced ε fails by a wide margin and is named."""
    modules: list[str] = []  # nn.RMSNorm modules the learner's code ran: named in the refusal, not just F.rms_norm
    hook = torch.nn.modules.module.register_module_forward_pre_hook(
        lambda module, args: modules.append("nn.RMSNorm") if isinstance(module, torch.nn.RMSNorm) else None)
    try:
        with teaching(NORM_LIBRARY, "write it from tensor operations (a mean of squares, sqrt)"):
            report = _check_norm(CheckReport("rms_norm"), fn, lambda x, w, eps: F.rms_norm(x, x.shape[-1:], w, eps),
                                 False, RMS_NORM_MISTAKES)
    finally:
        hook.remove()
    for case in report.cases if modules else ():
        if case.mistake == "library call":
            case.detail = case.detail.replace("calls F.rms_norm", "calls nn.RMSNorm (which calls F.rms_norm)", 1)
    return report


# ---- notebook 02: masked batch statistics ------------------------------------------------------------------------

def _real_mean(x: Tensor, mask: Tensor) -> Tensor:
    return norms.masked_mean_var(x, mask)[0]


def _mean_of_sequences(x: Tensor, mask: Tensor, var: bool = False) -> Tensor:
    rows = [x[i][mask[i]] for i in range(x.shape[0])]
    return torch.stack([r.var(0, unbiased=False) if var else r.mean(0) for r in rows]).mean(0)


MEAN_MISTAKES: list[Mistake] = [
    ("the pads count in the mean: average over the real tokens only", lambda x, m: x.flatten(0, 1).mean(0)),
    ("the pads are zeroed but still counted: divide by the number of real tokens, not by batch × time",
     lambda x, m: (x * m[..., None]).sum((0, 1)) / m.numel()),
    ("this is the average of the per-sequence means, which weighs a short sequence's tokens more: pool every real "
     "token, then average", _mean_of_sequences),
    ("this is the mean over the pads: mask is True at the real tokens", lambda x, m: x[~m].mean(0)),
    ("you take the first `length` positions of each sequence, which assumes the real tokens come first (right "
     "padding); in a left-padded batch those are pads. Select by the mask itself, position by position",
     lambda x, m: _first_positions(x, m).mean(0)),
]
VAR_MISTAKES: list[Mistake] = [
    ("this is the unbiased variance: divide by n, not n - 1", lambda x, m: x[m].var(0, unbiased=True)),
    ("this is the standard deviation; return the variance, its square",
     lambda x, m: x[m].var(0, unbiased=False).sqrt()),
    ("the pads count in the variance: use the real tokens only", lambda x, m: x.flatten(0, 1).var(0, unbiased=False)),
    ("the zeroed pads count in the variance, each adding (0 − μ)²: sum over the real tokens only",
     lambda x, m: ((x * m[..., None] - _real_mean(x, m)) ** 2).sum((0, 1)) / m.sum()),
    ("this is the average of the per-sequence variances, which leaves out how far apart the sequences' means are: "
     "pool every real token", lambda x, m: _mean_of_sequences(x, m, var=True)),
]


def _first_positions(x: Tensor, m: Tensor) -> Tensor:
    """The first mask.sum(1) positions of each sequence, pooled: right for right padding only."""
    return torch.cat([x[i, :int(n)] for i, n in enumerate(m.sum(1))])


MULTIPLIED_BY_MASK = ("the pads hold nan and inf here, and a pad times 0 is still nan (0 × inf and 0 × nan are nan): "
                      "multiplying by the mask does not remove a pad. Select the real tokens instead: x[mask], or "
                      "torch.where(mask[..., None], x, 0)")


def _cancellation(x: Tensor, mean: Tensor, var: Tensor) -> str:
    digits = round(-math.log10(torch.finfo(x.dtype).eps))
    mu, spread = float(mean.abs().max()), float(var.max())
    return (f"the mean matches but the variance does not. The features have mean about {mu:.3g} and variance about "
            f"{spread:.2g}, so E[x²] is about {mu * mu:.2g}; {str(x.dtype).removeprefix('torch.')} keeps about "
            f"{digits} significant digits, and E[x²] − μ² cancels most of the digits of the variance (catastrophic "
            f"cancellation). Subtract the mean first: the mean of (x − μ)²")


def check_masked_batch_stats(fn: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]) -> CheckReport:
    """Check fn(x, mask) -> (mean, var): per-feature mean and biased variance over real tokens of (batch, seq, d),
    against the exact (float64) statistics in the input's dtype."""
    report = CheckReport("masked batch statistics")
    g = torch.Generator().manual_seed(11)

    def case(name, lengths, d, dtype=torch.float32, offset=0.0, left=(), pads="loud"):
        lengths = torch.tensor(lengths)
        t = int(lengths.max()) + 2  # always some padding
        mask = torch.arange(t)[None, :] < lengths[:, None]
        for i in left:  # left padding: the pads come first, the real tokens last
            mask[i] = mask[i].flip(0)
        x = torch.randn(len(lengths), t, d, generator=g, dtype=dtype) + offset
        n_pads = int((~mask).sum())
        if pads == "loud":  # must be ignored
            x[~mask] = torch.randn(n_pads, d, generator=g, dtype=dtype) * 50
        else:  # "whatever values they hold": nan, inf and -inf
            x[~mask] = torch.tensor([math.nan, math.inf, -math.inf], dtype=dtype).repeat(n_pads * d)[:n_pads * d] \
                .view(n_pads, d)
        return name, x, mask, offset != 0.0

    cases = [case("equal lengths", [5, 5, 5], 4), case("variable lengths", [1, 7, 3, 5], 8),
             case("one real token in a sequence", [1, 1, 6], 3), case("d = 1", [4, 2], 1),
             case("large offset", [6, 3, 2], 5, offset=500.0),
             case("mean 1e4, spread 1, float32", [6, 3, 9, 2], 6, offset=1e4),
             case("float64", [3, 8], 6, torch.float64),
             case("left padding (the pads come first)", [2, 6, 4], 5, left=(0, 1, 2)),
             case("mixed padding (left and right)", [3, 7, 2, 5], 4, left=(1, 2)),
             case("pads hold nan, inf and -inf", [4, 6, 2], 5, left=(2,), pads="nan")]
    with teaching(NORM_LIBRARY, "compute the statistics from tensor operations (select the real tokens, then mean "
                                "and variance)"):
        _run_masked_cases(report, fn, cases)
    return report


def _run_masked_cases(report: CheckReport, fn: Callable, cases: list) -> None:
    """check_masked_batch_stats' cases, each judged against the float64 statistics of the real tokens."""
    for name, x, mask, offset in cases:
        want_mean, want_var = (t.to(x.dtype) for t in norms.masked_mean_var(x.double(), mask)[:2])
        given = [x.clone(), mask.clone()]
        got, failed = call_learner(name, fn, *given)
        if failed:
            report.cases.append(failed)
            continue
        problem = _input_problem(got, given, [x, mask], ["x", "mask"])
        if problem:
            report.cases.append(CaseResult(name, False, problem))
            continue
        if not (isinstance(got, (tuple, list)) and len(got) == 2):
            report.cases.append(CaseResult(name, False, f"returned {type(got).__name__}; return (mean, var), each of "
                                                        "shape (d,)"))
            continue
        got_mean, got_var = got
        # what a float32 sum of n values as large as max|x| can be off by, on top of a relative tolerance
        n, big, eps = int(mask.sum()), float(x[mask].abs().max()), torch.finfo(x.dtype).eps
        base = 1e-10 if x.dtype == torch.float64 else 1e-4
        mean_tol = base * max(1.0, float(want_var.max()) ** 0.5) + n * eps * big
        var_tol = base * max(1.0, float(want_var.max())) + 4 * (n * eps * big) ** 2
        mean_result = _compare(name + " (mean)", got_mean, want_mean, mean_tol)
        var_result = _compare(name + " (variance)", got_var, want_var, var_tol)
        if mean_result.passed and var_result.passed:
            report.cases.append(CaseResult(name, True, "mean and variance match",
                                           max(mean_result.max_error, var_result.max_error)))
            continue
        if isinstance(got_mean, Tensor) and isinstance(got_var, Tensor) and got_mean.shape == got_var.shape == \
                want_mean.shape and torch.allclose(got_mean.double(), want_var.double(), rtol=1e-3, atol=1e-6) and \
                torch.allclose(got_var.double(), want_mean.double(), rtol=1e-3, atol=1e-6):
            report.cases.append(CaseResult(name, False, "mean and variance are swapped: return (mean, var) "
                                                        "(torch.var_mean returns (var, mean))"))
            continue
        worst, got_part, mistakes = ((mean_result, got_mean, MEAN_MISTAKES) if not mean_result.passed
                                     else (var_result, got_var, VAR_MISTAKES))
        if worst.max_error:  # a wrong value, not a wrong type, shape or dtype
            _add_hint(worst, _closest_mistake(got_part.double(), worst.max_error, mistakes, [x.double(), mask]))
            if offset and mean_result.passed:
                _add_hint(worst, _cancellation(x, want_mean, want_var))
            if x.dtype == torch.float64 and worst.max_error < 1e-4:
                _add_hint(worst, FLOAT32_ONLY)
        if not bool(torch.isfinite(x).all()) and isinstance(got_part, Tensor) and not bool(torch.isfinite(got_part).all()):
            _add_hint(worst, MULTIPLIED_BY_MASK)
        report.cases.append(worst)


# ---- notebook 04: a block's forward pass from its parts ----------------------------------------------------------

BLOCK_CALLED = ("write the {update} update from block.attn, block.ffn, block.norm1 and block.norm2; calling the block "
                "itself is not the exercise")


def _hidden_block(norm: str, seed: int, placement: str) -> TransformerBlock:
    """A float64 block whose every parameter holds its own values (norm1 and norm2 differ), built inside
    fork_rng so the learner's random numbers are untouched."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        block = TransformerBlock(16, 4, norm=norm, placement=placement).double()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for part in (block.attn, block.ffn):
            for p in part.parameters():
                p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.1)
        for part in (block.norm1, block.norm2):  # gains in [0.5, 1.5], shifts of about ±0.5: a swap shows
            for pname, p in part.named_parameters():
                p.copy_(torch.rand(p.shape, generator=g, dtype=p.dtype) + 0.5 if pname == "weight"
                        else torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.5)
    return block


@contextmanager
def _watching_block_forward() -> Iterator[list]:
    """Record every call of TransformerBlock.forward, on any block (block(x), block.forward, a copy of the block),
    made from this thread: a training run in the background (BackgroundRun) is not the learner's answer."""
    calls: list = []
    original, here = TransformerBlock.forward, threading.get_ident()

    def watched(self, *args, **kwargs):
        if threading.get_ident() == here:
            calls.append(self)
        return original(self, *args, **kwargs)

    TransformerBlock.forward = watched
    try:
        yield calls
    finally:
        TransformerBlock.forward = original


class _Snapshot:
    """A block's submodules, parameters, settings and weights, to put back after the learner's code ran."""

    def __init__(self, block: nn.Module):
        self.parts = [(m, dict(m._modules), dict(m._parameters), dict(m._buffers),
                       {k: v for k, v in vars(m).items() if not k.startswith("_") and not isinstance(v, Tensor)})
                      for m in block.modules()]
        self.weights = {k: v.detach().clone() for k, v in block.state_dict().items()}

    def restore(self, block: nn.Module) -> list[str]:
        """Put everything back; return what had changed."""
        changed = []
        for m, modules, params, buffers, settings in self.parts:
            for now, before, what in ((m._modules, modules, "a submodule"), (m._parameters, params, "a parameter"),
                                      (m._buffers, buffers, "a buffer")):
                if now.keys() != before.keys() or any(now[k] is not before[k] for k in before):
                    changed.append(f"replaced {what}")
                    now.clear()
                    now.update(before)
            for k, v in settings.items():
                now = getattr(m, k, None)
                if isinstance(now, Tensor):  # a record of the last forward (attention's last_max_logit), not a setting
                    continue
                try:
                    same = now is v or bool(now == v)
                except Exception:
                    same = False
                if not same:
                    changed.append(f"{k} from {v!r} to {now!r}")
                    setattr(m, k, v)
        tensors = {**dict(block.named_parameters()), **dict(block.named_buffers())}
        with torch.no_grad():
            for k, v in self.weights.items():
                t = tensors[k]
                if t.dtype != v.dtype or t.shape != v.shape or not torch.equal(t, v):
                    changed.append(f"the weights' dtype from {v.dtype} to {t.dtype}" if t.dtype != v.dtype
                                   else f"the weights {k}")
                    t.data = v.clone()  # .data: also undoes a change of dtype (block.float())
        return list(dict.fromkeys(changed))


def _block_case(name: str, update: str, fn: Callable, block: TransformerBlock, args: tuple, reference: Callable,
                x: Tensor, mistakes: Sequence[Mistake]) -> CaseResult:
    """run_case for fn(block, x, *args), which must not call a TransformerBlock's forward nor change the block;
    the block is put back as it was given whatever fn does."""
    snapshot, calls, changed = _Snapshot(block), [], []

    def guarded(x):
        with _watching_block_forward() as seen:
            try:
                return fn(block, x, *args)
            finally:
                calls.extend(seen)
                changed.extend(snapshot.restore(block))

    result = run_case(name, guarded, reference, [x], 1e-10, grad=True, mistakes=mistakes, arg_names=["x"])
    if calls:
        return CaseResult(name, False, BLOCK_CALLED.format(update=update))
    if changed:
        return CaseResult(name, False, f"changed the block ({', '.join(changed[:3])}): a forward pass must leave "
                                       "the block as it was given")
    return result


def _chain(x: Tensor, first: tuple, second: tuple, alpha: float = 1.0, beta: float = 1.0) -> Tensor:
    """norm_b(α·h + β·F_b(h)) with h = norm_a(α·x + β·F_a(x)), for (F_a, norm_a) = first and (F_b, norm_b) = second."""
    (f_a, n_a), (f_b, n_b) = first, second
    h = n_a(alpha * x + beta * f_a(x))
    return n_b(alpha * h + beta * f_b(h))


def _post_ln_mistakes(b: TransformerBlock) -> list[Mistake]:
    a, f, n1, n2 = b.attn, b.ffn, b.norm1, b.norm2
    return [
        ("this is the Pre-LN update, x + F(norm(x)); Post-LN normalizes after the residual sum: norm(x + F(x))",
         lambda x: (lambda h: h + f(n2(h)))(x + a(n1(x)))),
        ("each norm is applied to its sublayer's output before the residual sum; Post-LN normalizes the sum: "
         "norm1(x + attn(x))", lambda x: (lambda h: h + n2(f(h)))(x + n1(a(x)))),
        ("norm1 and norm2 are swapped: norm1 goes with attention, norm2 with the FFN",
         lambda x: _chain(x, (a, n2), (f, n1))),
        ("norm1 is used for both sublayers; the FFN's sum goes through norm2", lambda x: _chain(x, (a, n1), (f, n1))),
        ("norm2 is used for both sublayers; the attention sum goes through norm1",
         lambda x: _chain(x, (a, n2), (f, n2))),
        ("the sublayers are in the wrong order: attention first, then the FFN", lambda x: _chain(x, (f, n1), (a, n2))),
        ("the FFN's residual adds the block's input x; it should add h, the attention sublayer's output",
         lambda x: n2(x + f(n1(x + a(x))))),
        ("the FFN acts on the block's input x; it should act on h, the attention sublayer's output",
         lambda x: n2(n1(x + a(x)) + f(x))),
        ("the residual connections are missing: norm(x + F(x))", lambda x: n2(f(n1(a(x))))),
        ("the output goes through a norm once more", lambda x: n2(_chain(x, (a, n1), (f, n2)))),
        ("only the FFN's sum is normalized; Post-LN normalizes after each residual sum, twice per block: "
         "h = norm1(x + attn(x)), then norm2(h + ffn(h))", lambda x: (lambda h: n2(h + f(h)))(x + a(x))),
        ("the sublayers read a normalized copy too (norm1(x + attn(norm1(x)))): in Post-LN a sublayer reads the "
         "stream as it is and only the sum is normalized",
         lambda x: (lambda h: n2(h + f(n2(h))))(n1(x + a(n1(x))))),
    ]


def check_post_ln_forward(fn: Callable[[TransformerBlock, Tensor], Tensor]) -> CheckReport:
    """Check fn(block, x) -> the Post-LN forward of `block` (a Pre-LN block: use block.attn, block.ffn, block.norm1,
    block.norm2), against the course's TransformerBlock(placement="post") with the same weights; every parameter has
    its own values. Calling a TransformerBlock's forward fails the case; the block is left as it was given."""
    report = CheckReport("Post-LN forward")
    for name, norm, seed, shape in [("LayerNorm block", "layer", 1, (2, 5, 16)),
                                    ("RMSNorm block", "rms", 2, (3, 4, 16)),
                                    ("one token", "layer", 3, (1, 1, 16))]:
        post = _hidden_block(norm, seed, "post")
        pre = _hidden_block(norm, seed, "pre")
        pre.load_state_dict(post.state_dict())
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 3
        report.cases.append(_block_case(name, "Post-LN", fn, pre, (), post, x, _post_ln_mistakes(post)))
    return report


def _deepnorm(block: TransformerBlock, x: Tensor, alpha: float) -> Tensor:
    """DeepNorm (Wang et al. 2022, arXiv 2203.00555): Post-LN with the residual scaled by α, norm(α·x + F(x))."""
    return _chain(x, (block.attn, block.norm1), (block.ffn, block.norm2), alpha)


def _deepnorm_mistakes(b: TransformerBlock, alpha: float) -> list[Mistake]:
    a, f, n1, n2 = b.attn, b.ffn, b.norm1, b.norm2

    def one_sided(x, alpha_attn, alpha_ffn):
        h = n1(alpha_attn * x + a(x))
        return n2(alpha_ffn * h + f(h))

    return [
        ("α is missing: this is plain Post-LN, norm(x + F(x)); DeepNorm scales the residual: norm(α·x + F(x))",
         lambda x: _chain(x, (a, n1), (f, n2))),
        ("α multiplies the sublayer's output; DeepNorm puts it on the residual: norm(α·x + F(x))",
         lambda x: _chain(x, (a, n1), (f, n2), 1.0, alpha)),
        ("α is applied in the attention sublayer only; the FFN's residual needs it too",
         lambda x: one_sided(x, alpha, 1.0)),
        ("α is applied in the FFN sublayer only; the attention sublayer's residual needs it too",
         lambda x: one_sided(x, 1.0, alpha)),
        ("α multiplies the norm's output; it belongs inside the norm, on the residual: norm(α·x + F(x))",
         lambda x: (lambda h: alpha * n2(h + f(h)))(alpha * n1(x + a(x)))),
        ("α multiplies the attention sublayer's normalized output and the FFN gets no α; DeepNorm scales the "
         "residual inside each norm: norm(α·x + F(x)), in both sublayers",
         lambda x: (lambda h: n2(h + f(h)))(alpha * n1(x + a(x)))),
        ("this is a Pre-LN update with α; DeepNorm keeps Post-LN's placement: norm(α·x + F(x))",
         lambda x: (lambda h: alpha * h + f(n2(h)))(alpha * x + a(n1(x)))),
        ("this divides the sublayer's output by α: norm(x + F(x)/α) equals norm(α·x + F(x)) only without the norm's "
         "ε, and the small difference left is that ε; write DeepNorm as the paper does, norm(α·x + F(x))",
         lambda x: (lambda h: n2(h + f(h) / alpha))(n1(x + a(x) / alpha))),
        ("α is applied twice (α²); the residual is α·x", lambda x: _chain(x, (a, n1), (f, n2), alpha ** 2)),
        ("norm1 is used for both sublayers; the FFN's sum goes through norm2",
         lambda x: _chain(x, (a, n1), (f, n1), alpha)),
        ("norm1 and norm2 are swapped: norm1 goes with attention, norm2 with the FFN",
         lambda x: _chain(x, (a, n2), (f, n1), alpha)),
        ("the FFN's residual adds α·x, the block's input; it should add α·h, the attention sublayer's output",
         lambda x: n2(alpha * x + f(n1(alpha * x + a(x))))),
    ]


def check_deepnorm_forward(fn: Callable[[TransformerBlock, Tensor, float], Tensor]) -> CheckReport:
    """Check fn(block, x, alpha) -> DeepNorm's forward of a Post-LN block, h = norm1(α·x + attn(x)),
    out = norm2(α·h + ffn(h)) (Wang et al. 2022, arXiv 2203.00555), against the same update computed from the
    block's parts. Calling a TransformerBlock's forward fails the case; the block is left as it was given."""
    report = CheckReport("DeepNorm forward")
    for name, norm, seed, shape, alpha in [
            ("α = 1 (DeepNorm is then Post-LN), LayerNorm block", "layer", 4, (2, 5, 16), 1.0),
            ("α = (2·6)^(1/4) ≈ 1.86, LayerNorm block", "layer", 5, (2, 5, 16), 12 ** 0.25),
            ("α = (2·24)^(1/4) ≈ 2.63, RMSNorm block", "rms", 6, (3, 4, 16), 48 ** 0.25),
            ("α = 3, RMSNorm block", "rms", 7, (2, 3, 16), 3.0),
            ("one token, α = 1.5", "layer", 8, (1, 1, 16), 1.5)]:
        block = _hidden_block(norm, seed, "post")
        twin = copy.deepcopy(block)  # the reference's own copy, whatever fn does to the block
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 3
        report.cases.append(_block_case(name, "DeepNorm", fn, block, (alpha,),
                                        lambda x, alpha=alpha, twin=twin: _deepnorm(twin, x, alpha), x,
                                        _deepnorm_mistakes(twin, alpha)))
    return report


DEEPNORM_SCALED = ("attn.v_proj.weight", "attn.out_proj.weight", "ffn.linear1.weight", "ffn.linear2.weight")


def deepnorm_init(block: TransformerBlock, beta: float) -> TransformerBlock:
    """DeepNorm's initialization (Wang et al. 2022): multiply the weights that carry the branch's value, the FFN's
    two matrices and attention's value and output projections, by beta, in place; q, k, biases and norms stay."""
    with torch.no_grad():
        for name, p in block.named_parameters():
            if name in DEEPNORM_SCALED:
                p.mul_(beta)
    return block


def _init_problem(name: str, before: Tensor, have: Tensor, beta: float) -> str:
    """What one parameter's change says about the answer, or "" when it is what DeepNorm's init makes it."""
    want = before * beta if name in DEEPNORM_SCALED else before
    close = lambda a, b: have.shape == b.shape and bool(torch.allclose(a, b, rtol=1e-9, atol=1e-12))
    if close(have, want):
        return ""
    if name in DEEPNORM_SCALED:
        if close(have, before):
            return f"{name} is not scaled: DeepNorm multiplies it by β"
        if close(have, before * beta ** 2):
            return f"{name} is multiplied by β twice (β²): scale each weight once"
        if close(have, before / beta):
            return f"{name} is divided by β: multiply it by β = (8N)^(-1/4), which is below 1"
        return f"{name} is not β times its initial value"
    if close(have, before * beta):
        if name in ("attn.q_proj.weight", "attn.k_proj.weight"):
            return (f"{name} is scaled too: DeepNet leaves q and k alone (they only decide where attention looks, not "
                    "how much the branch adds)")
        if name.endswith(".bias"):
            return f"{name} is scaled too: DeepNorm scales weight matrices, not biases"
        return f"{name} is scaled too: DeepNorm leaves the norms' parameters alone"
    return f"{name} changed: DeepNorm's initialization leaves it as it was"


def check_deepnorm_init(fn: Callable[[TransformerBlock, float], object]) -> CheckReport:
    """Check fn(block, beta): DeepNorm's initialization of a block, in place (deepnorm_init), on hidden blocks and
    betas; every parameter is compared with what it should become, and a wrong one is named."""
    report = CheckReport("DeepNorm initialization")
    for name, norm, seed, n_layers in [("N = 4 blocks, LayerNorm block", "layer", 11, 4),
                                       ("N = 24 blocks, RMSNorm block", "rms", 12, 24),
                                       ("N = 1 block, LayerNorm block", "layer", 13, 1)]:
        beta = (8 * n_layers) ** -0.25
        block = _hidden_block(norm, seed, "post")
        before = {n: q.detach().clone() for n, q in block.named_parameters()}
        objects = dict(block.named_parameters())
        got, failed = call_learner(name, fn, block, beta)
        if failed is not None:
            report.cases.append(failed)
            continue
        if isinstance(got, TransformerBlock) and got is not block:
            block = got  # an answer may return a scaled copy instead of scaling in place
        else:
            replaced = [n for n, q in block.named_parameters() if q is not objects.get(n)]
            if replaced:
                report.cases.append(CaseResult(name, False, (
                    f"{replaced[0]} was replaced by a new Parameter: scale it in place (p.mul_(beta) under "
                    "torch.no_grad()), so that an optimizer made before still updates the same tensor")))
                continue
        params = dict(block.named_parameters())
        problems = [q for n in before if (q := _init_problem(n, before[n], params[n].detach(), beta))]
        if problems:
            report.cases.append(CaseResult(name, False, problems[0] + (f" (and {len(problems) - 1} more)"
                                                                      if len(problems) > 1 else "")))
        else:
            report.cases.append(CaseResult(name, True, f"β = {beta:.3f}: the four branch matrices scaled, the rest "
                                                       "unchanged"))
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


GAIN_MISTAKES: list[tuple[str, Callable[[int], float]]] = [
    ("this doubles |x|², not |x|: the target is E|x_L|² = 4 |x_0|²", lambda L: math.sqrt(2 ** (1 / L) - 1)),
    ("this is g², what one block adds to the mean squared norm: return its square root", lambda L: 4 ** (1 / L) - 1),
    ("this solves (1 + g)^L = 2, but a block multiplies the mean squared norm by 1 + g², not the norm by 1 + g",
     lambda L: 2 ** (1 / L) - 1),
    ("this is √(1 + g²), the factor by which one block grows |x|; the exercise asks for g", lambda L: 2 ** (1 / L)),
    ("this is the small-g approximation (1 + g²)^L ≈ exp(L·g²), which is off for shallow stacks: solve "
     "(1 + g²)^L = 4 exactly", lambda L: math.sqrt(math.log(4) / L)),
    ("1/√depth is GPT-2's scaling of the residual projections: it keeps the growth bounded, but |x| does not "
     "exactly double", lambda L: 1 / math.sqrt(L)),
    ("this is the gain for depth + 1: an off-by-one in the number of blocks", lambda L: depth_scaled_gain(L + 1)),
    ("this is the gain for depth − 1: an off-by-one in the number of blocks", lambda L: depth_scaled_gain(L - 1)),
]


def check_depth_scaled_gain(fn: Callable[[int], float]) -> CheckReport:
    """Check fn(depth) -> g against depth_scaled_gain on hidden depths; each case also runs a real stack with it."""
    report = CheckReport("depth-scaled gain")
    wrong_answers: dict[int, tuple[float, CaseResult]] = {}
    for depth in (1, 7, 30, 120, 1000):
        name = f"depth {depth}"
        got, failed = call_learner(name, fn, depth)
        if failed:
            report.cases.append(failed)
            continue
        if (isinstance(got, Tensor) and got.numel() == 1) or (type(got).__module__ == "numpy" and
                                                              getattr(got, "size", 0) == 1):
            got = got.item()  # a one-element tensor or numpy array
        if isinstance(got, bool) or not isinstance(got, numbers.Real) or not math.isfinite(got) or got < 0:
            report.cases.append(CaseResult(name, False, f"expected a finite number >= 0, got {got!r}"))
            continue
        got, want = float(got), depth_scaled_gain(depth)
        err = abs(got - want) / want
        growth = (1.0 + got ** 2) ** (depth / 2)
        run = f"; a real {depth}-layer stack grew |x| by {_stack_growth(got, depth):.2f}x" if depth <= MAX_DEPTH else ""
        detail = f"g = {got:.4g} predicts |x| grows by {growth:.3g}x (target 2x){run}"
        report.cases.append(CaseResult(name, err <= 1e-3, detail, err))
        if err > 1e-3:
            wrong_answers[depth] = got, report.cases[-1]
    for text, wrong in GAIN_MISTAKES:  # the first mistake that explains every wrong depth
        try:
            explains = len(wrong_answers) >= 2 and all(abs(got - wrong(depth)) < 0.1 * abs(got - depth_scaled_gain(depth))
                                                   for depth, (got, _) in wrong_answers.items())
        except (ValueError, ZeroDivisionError):
            explains = False
        if explains:
            for case in report.cases:  # a depth where fn raised gets it too (depth - 1 divides by zero at depth 1)
                _add_hint(case, text)
            break
    return report



# ---- notebook 01: the residual stack itself --------------------------------------------------------------------

def _stack_step(x: Tensor, f, gain: float, norm: str, residual: bool, d) -> Tensor:
    """One step x_l -> x_{l+1} = x_l + g f_l(x_l), with LayerNorm (no γ, β) before the sublayer (Pre-LN) or after the
    sum (Post-LN); residual=False drops the skip."""
    skip = x if residual else 0.0
    if norm == "off":
        return skip + gain * f(x)
    if norm == "Pre-LN":
        return skip + gain * f(F.layer_norm(x, d))
    if norm == "Post-LN":
        return F.layer_norm(skip + gain * f(x), d)
    raise ValueError(f"norm must be 'off', 'Pre-LN' or 'Post-LN', got {norm!r}")


def _stack_of(step: Callable) -> Callable[..., Tensor]:
    """A residual stack, x_0 .. x_L, whose one step is `step(x, f, gain, norm, residual, d)`."""
    def stack(x0, sublayers, gain, norm="off", residual=True):
        xs, x = [x0], x0
        for f in sublayers:
            x = step(x, f, gain, norm, residual, x0.shape[-1:])
            xs.append(x)
        return torch.stack(xs)
    return stack


_stack_reference = _stack_of(_stack_step)


def _ln(x, d):
    return F.layer_norm(x, d)


STACK_MISTAKES: list[Mistake] = [
    ("Post-LN normalizes the sum, after adding: x_{l+1} = LN(x_l + g f_l(x_l)); normalizing the sublayer's input "
     "is Pre-LN", _stack_of(lambda x, f, g, n, r, d: (x if r else 0) + g * f(_ln(x, d)) if n != "off" else
                                 (x if r else 0) + g * f(x))),
    ("Pre-LN normalizes only what the sublayer reads: the skip carries x_l itself, x_{l+1} = x_l + g f_l(LN(x_l))",
     _stack_of(lambda x, f, g, n, r, d: (_ln(x, d) if r else 0) + g * f(_ln(x, d)) if n == "Pre-LN" else
                    _ln((x if r else 0) + g * f(x), d) if n == "Post-LN" else (x if r else 0) + g * f(x))),
    ("the gain multiplies the sublayer's output only, not the skip: x_l + g f_l(x_l)",
     _stack_of(lambda x, f, g, n, r, d: g * ((x if r else 0) + f(_ln(x, d) if n == "Pre-LN" else x))
                    if n != "Post-LN" else _ln(g * ((x if r else 0) + f(x)), d))),
    ("residual=False drops the skip: x_{l+1} = g f_l(x_l), a plain deep network",
     _stack_of(lambda x, f, g, n, r, d: x + g * f(x) if n == "off" else x + g * f(_ln(x, d)) if n == "Pre-LN"
                    else _ln(x + g * f(x), d))),
    ("LayerNorm normalizes each token over its d features only: F.layer_norm(x, x.shape[-1:]), not over the whole "
     "tensor", _stack_of(lambda x, f, g, n, r, d: (x if r else 0) + g * f(x) if n == "off" else
                              (x if r else 0) + g * f(F.layer_norm(x, x.shape)) if n == "Pre-LN" else
                              F.layer_norm((x if r else 0) + g * f(x), x.shape))),
]


def check_residual_stack(fn: Callable[..., Tensor]) -> CheckReport:
    """Check fn(x0, sublayers, gain, norm, residual) against the residual stack on hidden stacks of real sublayers."""
    from .residual import make_sublayers
    report = CheckReport("residual_stack")
    stream = (f"the whole stream x_0, x_1, ..., x_L stacked (torch.stack), shape (L + 1, *x0.shape): x_0 first")
    cases = [("no norm, 4 tokens", "off", True, (4, 8)), ("Pre-LN, 4 tokens", "Pre-LN", True, (4, 8)),
             ("Post-LN, 4 tokens", "Post-LN", True, (4, 8)), ("no residual, no norm", "off", False, (4, 8)),
             ("no residual, Post-LN", "Post-LN", False, (4, 8)), ("Pre-LN, one token of shape (d,)", "Pre-LN", True, (8,)),
             ("Post-LN, a batch of shape (2, 3, d)", "Post-LN", True, (2, 3, 8))]
    for i, (name, norm, residual, shape) in enumerate(cases):
        layers = make_sublayers("amplifies its input", "independent", 5, 8, seed=11 + i)
        x0 = torch.randn(*shape, generator=torch.Generator().manual_seed(3 + i), dtype=torch.float64) * 3 + 1
        kept = x0.clone()
        want = _stack_reference(x0, layers, 0.7, norm, residual)
        with torch.no_grad():
            got, failed = call_learner(name, fn, x0, layers, 0.7, norm, residual)
        if failed:
            report.cases.append(failed)
            continue
        if not torch.equal(x0, kept):
            report.cases.append(CaseResult(name, False, "changed x0 in place; build new tensors instead"))
            continue
        if isinstance(got, Tensor) and got.shape != want.shape:
            hint = (f"shape {tuple(got.shape)}, expected {tuple(want.shape)}: return {stream}")
            report.cases.append(CaseResult(name, False, hint))
            continue
        case = _compare(name, got, want, 1e-9)
        if not case.passed and isinstance(got, Tensor):
            for text, wrong in STACK_MISTAKES:
                if torch.allclose(got.detach(), wrong(x0, layers, 0.7, norm, residual), atol=1e-9, rtol=0):
                    _add_hint(case, text)
                    break
        report.cases.append(case)
    name = "an unknown norm, 'LayerNorm'"
    try:
        with torch.no_grad():
            fn(torch.zeros(8, dtype=torch.float64), make_sublayers("amplifies its input", "independent", 2, 8), 1.0,
               "LayerNorm", True)
    except NotImplementedError:
        report.cases.append(CaseResult(name, False, NOT_DONE))
    except ValueError:
        report.cases.append(CaseResult(name, True, "raised ValueError"))
    except Exception as exc:  # the learner's bug, reported rather than raised
        report.cases.append(CaseResult(name, False, f"raised {type(exc).__name__}: {exc}; raise ValueError for a norm "
                                                    "that is not 'off', 'Pre-LN' or 'Post-LN'"))
    else:
        report.cases.append(CaseResult(name, False, "returned without complaint: raise ValueError for a norm that is "
                                                    "not 'off', 'Pre-LN' or 'Post-LN', or a typo runs silently"))
    return report

# ---- notebook 06: soft-capping and QK-norm ------------------------------------------------------------------------

SOFTCAP_MISTAKES: list[Mistake] = [
    ("a hard clip: clamp(x, −cap, cap) is the identity right up to the cap and passes no gradient beyond it; "
     "soft-capping bends smoothly: cap · tanh(x / cap)", lambda x, cap: x.clamp(-cap, cap)),
    ("the /cap inside is missing: cap · tanh(x) saturates once |x| passes about 2, whatever the cap; divide first: "
     "cap · tanh(x / cap)", lambda x, cap: cap * torch.tanh(x)),
    ("the cap outside is missing: tanh(x / cap) lies between −1 and 1; multiply by the cap: cap · tanh(x / cap)",
     lambda x, cap: torch.tanh(x / cap)),
    ("both caps are missing: tanh(x) lies between −1 and 1 and saturates at |x| ≈ 2; write cap · tanh(x / cap)",
     lambda x, cap: torch.tanh(x)),
    ("x is multiplied by the cap inside the tanh; divide it: cap · tanh(x / cap)",
     lambda x, cap: cap * torch.tanh(x * cap)),
    ("a sigmoid is not a tanh: cap · sigmoid(x / cap) lies between 0 and cap and moves 0 to cap/2; write "
     "cap · tanh(x / cap)", lambda x, cap: cap * torch.sigmoid(x / cap)),
    ("the logits come back unchanged: nothing is capped", lambda x, cap: x.clone()),
]
SOFTCAP_OVERFLOW = ("tanh written out with exponentials overflows: e^(2x/cap) is inf for x = 1e6, and inf / inf is "
                    "nan; use torch.tanh, which is stable for any x")


def check_softcap(fn: Callable[[Tensor, float], Tensor]) -> CheckReport:
    """Check fn(x, cap) -> cap * tanh(x / cap), elementwise, against the course's softcap. The first case holds
    logits on both sides of the cap, where every classic mistake fails by a wide margin and is named."""
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
                                     [inputs], tol, grad, arg_names=["x"],
                                     mistakes=[(m, lambda t, cap=cap, wrong=wrong: wrong(t, cap))
                                               for m, wrong in SOFTCAP_MISTAKES]))
    huge = report.case("huge logits (1e6), cap 50: no overflow, no nan")
    if "contains nan" in huge.detail and report.case("logits around the cap, cap 30").passed:
        _add_hint(huge, SOFTCAP_OVERFLOW)
    _float32_hint(report, "logits around the cap, cap 30")
    lead_name, lead_x, lead_cap = cases[0][:3]
    lead = report.case(lead_name)
    if not lead.passed and not lead.mistake and lead.max_error > 0:
        _show_worst_element(lead, fn, lead_x, lead_cap)
        for case in report.cases[1:]:  # a mistake named only where the cap saturates everything is a coincidence
            if case.mistake:
                case.detail, case.mistake = case.detail.removesuffix(f": {case.mistake}"), ""
    return report


def _show_worst_element(case: CaseResult, fn: Callable[[Tensor, float], Tensor], x: Tensor, cap: float) -> None:
    """Add one input, the learner's output and the expected output where they differ most, to an unnamed failure."""
    got, failed = call_learner(case.name, fn, x.clone(), cap)
    if failed or not isinstance(got, Tensor) or got.shape != x.shape:
        return
    want = softcap(x, cap)
    i = int((got.detach().to(want.dtype) - want).abs().flatten().nan_to_num(float("inf")).argmax())
    case.detail += (f": for example x = {float(x.flatten()[i]):.4g} gave {float(got.detach().flatten()[i]):.4g}, "
                    f"expected cap · tanh(x / cap) = {float(want.flatten()[i]):.4g}")


def _float32_hint(report: CheckReport, plain_case: str) -> None:
    """Right in float32 and off by float32's round-off in float64: the answer computes in float32 somewhere."""
    f64 = report.case("float64")
    if report.case(plain_case).passed and 0 < f64.max_error < 1e-4:
        _add_hint(f64, FLOAT32_ONLY)


def _unit(x: Tensor, w, eps: float, dim=-1) -> Tensor:
    return w * x / torch.sqrt(x.pow(2).mean(dim, keepdim=True) + eps)


def _qk_reference(q: Tensor, k: Tensor, weight_q: Tensor, weight_k: Tensor, eps: float) -> Tensor:
    d = q.shape[-1]
    return F.rms_norm(q, (d,), weight_q, eps) @ F.rms_norm(k, (d,), weight_k, eps).transpose(-2, -1) / math.sqrt(d)


def _qk_mistakes(eps: float) -> list[Mistake]:
    def logits(q, k, scale, dim=-1, wq=1.0, wk=1.0, norm=_unit):
        return norm(q, wq, eps, dim) @ norm(k, wk, eps, dim).transpose(-2, -1) * scale

    def d(q):
        return q.shape[-1]

    return [
        ("the 1/√d_head is missing: after RMSNorm q̂ and k̂ each have norm √d (before the gains), so without it the "
         "logits come out √d_head times too large; divide q̂ k̂ᵀ by √d_head", lambda q, k, wq, wk: logits(q, k, 1.0, wq=wq, wk=wk)),
        ("the logits are √d_head times too small. Either they are divided by d_head (the scaling is 1/√d_head), or "
         "q and k are ℓ2-normalized to norm 1 (F.normalize, Henry et al.'s form) with no 1/√d_head: RMSNorm leaves "
         "them norm √d_head, and the 1/√d_head stays", lambda q, k, wq, wk: logits(q, k, 1 / d(q), wq=wq, wk=wk)),
        ("the logits are multiplied by √d_head; they are divided by it",
         lambda q, k, wq, wk: logits(q, k, math.sqrt(d(q)), wq=wq, wk=wk)),
        ("q and k are normalized over the tokens (dim −2); QK-norm normalizes each query and each key over the head "
         "dimension, the last one", lambda q, k, wq, wk: logits(q, k, d(q) ** -0.5, dim=-2, wq=wq, wk=wk)),
        ("the gains are not applied: γ_q multiplies the normalized queries, γ_k the normalized keys",
         lambda q, k, wq, wk: logits(q, k, d(q) ** -0.5)),
        ("the gains are applied before normalizing: RMSNorm(γ ⊙ q) divides most of γ out again. Normalize first, "
         "then scale: γ_q ⊙ q / RMS(q)", lambda q, k, wq, wk: logits(
             q, k, d(q) ** -0.5, wq=wq, wk=wk, norm=lambda x, w, e, dim: _unit(x * w, 1.0, e, dim))),
        ("γ_q is used for the keys too; the keys have their own gain, γ_k",
         lambda q, k, wq, wk: logits(q, k, d(q) ** -0.5, wq=wq, wk=wq)),
        ("γ_k is used for the queries too; the queries have their own gain, γ_q",
         lambda q, k, wq, wk: logits(q, k, d(q) ** -0.5, wq=wk, wk=wk)),
        ("the RMS is taken over the tokens and the features together, one number per head; QK-norm takes one per "
         "query and one per key, over the head dimension (dim=-1)",
         lambda q, k, wq, wk: logits(q, k, d(q) ** -0.5, dim=(-2, -1), wq=wq, wk=wk)),
        ("q and k are ℓ2-normalized to norm 1 (F.normalize); RMSNorm divides by the RMS and leaves them norm √d",
         lambda q, k, wq, wk: logits(q, k, d(q) ** -0.5, wq=wq, wk=wk,
                                     norm=lambda x, w, e, dim: w * F.normalize(x, dim=dim, eps=e))),
        ("the mean is subtracted (LayerNorm); this exercise uses RMSNorm, which does not re-center",
         lambda q, k, wq, wk: logits(q, k, d(q) ** -0.5, wq=wq, wk=wk,
                                     norm=lambda x, w, e, dim: w * _standardized(x, e, dim=dim))),
        ("only the queries are normalized; QK-norm normalizes the keys too",
         lambda q, k, wq, wk: _unit(q, wq, eps) @ k.transpose(-2, -1) / math.sqrt(d(q))),
        ("only the keys are normalized; QK-norm normalizes the queries too",
         lambda q, k, wq, wk: q @ _unit(k, wk, eps).transpose(-2, -1) / math.sqrt(d(q))),
        ("ε is missing, or added to the RMS; it belongs under the square root: x / sqrt(mean(x²) + ε)",
         lambda q, k, wq, wk: logits(q, k, d(q) ** -0.5, wq=wq, wk=wk,
                                     norm=lambda x, w, e, dim: w * x / (x.pow(2).mean(dim, keepdim=True).sqrt() + e))),
        ("the softmax is applied: return the logits, before the softmax",
         lambda q, k, wq, wk: torch.softmax(logits(q, k, d(q) ** -0.5, wq=wq, wk=wk), -1)),
        ("the scale is 1/√8 whatever the head size: use 1/√d_head, with d_head = q.shape[-1]",
         lambda q, k, wq, wk: logits(q, k, 8 ** -0.5, wq=wq, wk=wk)),
        ("the square of the mean is used; the RMS is the root of the mean of the squares: sqrt(mean(x²) + ε)",
         lambda q, k, wq, wk: logits(q, k, d(q) ** -0.5, wq=wq, wk=wk, norm=lambda x, w, e, dim: w * x / torch.sqrt(
             x.mean(dim, keepdim=True).pow(2) + e))),
        ("each gain is applied twice (γ²): multiply the normalized queries by γ_q once, the keys by γ_k once",
         lambda q, k, wq, wk: logits(q, k, d(q) ** -0.5, wq=wq * wq, wk=wk * wk)),
        ("q and k are normalized over the heads (dim 1); QK-norm normalizes each head's query and key over d_head, "
         "the last dimension", lambda q, k, wq, wk: logits(q, k, d(q) ** -0.5, dim=-3, wq=wq, wk=wk)),
        ("the RMS is taken over all heads together, one per token (OLMo 2's QK-norm, over d_model before the heads "
         "split); this exercise normalizes each head over d_head (dim=-1)",
         lambda q, k, wq, wk: logits(q, k, d(q) ** -0.5, dim=(-3, -1), wq=wq, wk=wk)),
    ]


def _qk_fixed_eps(eps: float) -> list[Mistake]:
    """An ε written into the code instead of the eps argument (the usual defaults), on a case whose eps differs."""
    return [(f"ε is fixed at {fixed:g} in your code; use the eps argument (this case passes eps = {eps:g})",
             lambda q, k, wq, wk, fixed=fixed: _qk_reference(q, k, wq, wk, fixed))
            for fixed in (1e-6, 1e-5, 1e-8) if fixed != eps]


ATTENTION_LIBRARY: dict[Callable, str] = {F.scaled_dot_product_attention: "F.scaled_dot_product_attention"}
"""The library attention the scaled dot-product exercise may not call (it would also hide the weights)."""
ATTENTION_PAIR = "return two tensors, (weights, logits), each (..., n_q, n_k)"


def _attention_reference(q: Tensor, k: Tensor) -> Tensor:
    logits = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return torch.stack([logits.softmax(-1), logits])


def _attention_mistakes(d_head: int) -> list[Mistake]:
    def pair(logits, dim=-1):
        return torch.stack([logits.softmax(dim), logits])

    def dot(q, k):
        return q @ k.transpose(-2, -1)

    return [
        ("the 1/√d is missing: divide q kᵀ by √d, with d = q.shape[-1], or the logits grow with the head size",
         lambda q, k: pair(dot(q, k))),
        ("the logits are divided by d; the scaling is 1/√d", lambda q, k: pair(dot(q, k) / q.shape[-1])),
        ("the scale uses the number of keys (or queries), k.shape[-2]; it is the head size, d = q.shape[-1], the "
         "last dimension", lambda q, k: pair(dot(q, k) / math.sqrt(k.shape[-2]))),
        ("the scale uses the number of queries, q.shape[-2]; it is the head size, d = q.shape[-1], the last "
         "dimension", lambda q, k: pair(dot(q, k) / math.sqrt(q.shape[-2]))),
        ("the softmax runs over the queries (dim −2); each query's weights over the keys sum to 1: softmax(dim=-1)",
         lambda q, k: pair(dot(q, k) / math.sqrt(q.shape[-1]), dim=-2)),
        ("the weights and the logits are swapped: return (weights, logits), the softmax first",
         lambda q, k: _attention_reference(q, k).flip(0)),
        ("the logits are scaled after the softmax: scale q kᵀ by 1/√d first, then take the softmax of the result",
         lambda q, k: torch.stack([dot(q, k).softmax(-1), dot(q, k) / math.sqrt(q.shape[-1])])),
        *[(f"√d is fixed at √{fixed} in your code; use d = q.shape[-1] (this case has d = {d_head})",
           lambda q, k, fixed=fixed: pair(dot(q, k) / math.sqrt(fixed))) for fixed in (8, 16, 32, 64)
          if fixed != d_head],
    ]


def _attention_pair(fn: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]) -> Callable[[Tensor, Tensor], Tensor]:
    """The learner's (weights, logits) as one stacked tensor, for run_case; anything else raises with a message."""
    def call(q, k):
        out = fn(q, k)
        if not (isinstance(out, (tuple, list)) and len(out) == 2 and all(isinstance(t, Tensor) for t in out)):
            raise TypeError(f"got {type(out).__name__}: {ATTENTION_PAIR}")
        if out[0].shape != out[1].shape:
            raise TypeError(f"the two tensors have shapes {tuple(out[0].shape)} and {tuple(out[1].shape)}: "
                            f"{ATTENTION_PAIR}")
        return torch.stack(list(out))
    return call


def check_attention_probs(fn: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]) -> CheckReport:
    """Check fn(q, k) -> (softmax(q kᵀ / √d) over the keys, q kᵀ / √d), with d = d_head, any leading dimensions."""
    report = CheckReport("scaled dot-product attention weights")
    g = torch.Generator().manual_seed(61)

    def qk(*shape_q, n_k=None, scale=1.0, dtype=torch.float32):
        shape_k = (*shape_q[:-2], n_k or shape_q[-2], shape_q[-1])
        return [scale * torch.randn(*shape_q, generator=g, dtype=dtype),
                scale * torch.randn(*shape_k, generator=g, dtype=dtype)]

    # the first case's d_head is 12, none of the usual sizes: a hard-coded /8 or /√64 is named as such, not as "/d"
    cases = [("one head: 4 queries, 6 keys, d_head 12", qk(4, 12, n_k=6), 1e-5, False),
             ("(batch 2, heads 3, tokens 5, d_head 16)", qk(2, 3, 5, 16), 1e-5, False),
             ("d_head 4, 7 queries, 3 keys", qk(7, 4, n_k=3), 1e-5, False),
             ("large q and k (x 5), d_head 32: a sharp softmax", qk(2, 6, 32, scale=5.0), 1e-4, False),
             ("float64", qk(3, 5, 64, dtype=torch.float64), 1e-10, False),  # and d_head 64
             ("gradients through autograd", qk(2, 4, 8, n_k=5, dtype=torch.float64), 1e-8, True)]
    with teaching(ATTENTION_LIBRARY, "write the softmax of the scaled dot products yourself (matmul, softmax)"):
        for name, inputs, tol, grad in cases:
            report.cases.append(run_case(name, _attention_pair(fn), _attention_reference, inputs, tol, grad,
                                         mistakes=_attention_mistakes(inputs[0].shape[-1]), arg_names=["q", "k"]))
    for case in report.cases:  # q @ k without the transpose, or k.T on a batched tensor
        if case.detail.startswith("raised") and ("cannot be multiplied" in case.detail or BROADCAST in case.detail):
            case.detail = case.detail.replace(f" ({BROADCAST})", "") + " (q kᵀ needs the keys' last two dimensions " \
                "swapped: k.transpose(-2, -1); k.T reverses every dimension of a batched tensor)"
    _float32_hint(report, "(batch 2, heads 3, tokens 5, d_head 16)")
    return report


QK_TRANSPOSE = ("the product q̂ k̂ᵀ needs the keys' last two dimensions swapped: k.transpose(-2, -1) (k.T reverses "
                "every dimension of a batched tensor)")


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
             ("gradients through autograd", [q.double(), k.double(), *gains(8, torch.float64)], 1e-6, 1e-8, True),
             ("(batch 1, heads 2, tokens 3, d_head 16)", [torch.randn(1, 2, 3, 16, generator=g),
                                                          torch.randn(1, 2, 3, 16, generator=g), *gains(16)],
              1e-6, 1e-5, False),
             ("d_head 4, small q and k, eps = 1e-2", [0.05 * torch.randn(2, 5, 4, generator=g),
                                                     0.05 * torch.randn(2, 5, 4, generator=g), *gains(4)],
              1e-2, 1e-5, False)]
    with teaching(NORM_LIBRARY, "write the RMSNorm of q and k from tensor operations (a mean of squares, sqrt)"):
        for name, inputs, eps, tol, grad in cases:
            report.cases.append(run_case(name, lambda a, b, wq, wk, eps=eps: fn(a, b, wq, wk, eps),
                                         lambda a, b, wq, wk, eps=eps: _qk_reference(a, b, wq, wk, eps),
                                         inputs, tol, grad, mistakes=_qk_mistakes(eps) + _qk_fixed_eps(eps),
                                         arg_names=["q", "k", "weight_q", "weight_k"]))
    for case in report.cases:  # q @ k without the transpose, or k.T on a batched tensor
        if case.detail.startswith("raised") and ("cannot be multiplied" in case.detail or BROADCAST in case.detail):
            case.detail = case.detail.replace(f" ({BROADCAST})", "") + f" ({QK_TRANSPOSE})"
    _float32_hint(report, "(batch 2, heads 3, tokens 5, d_head 8)")
    return report


# ---- notebook 08: mean pooling over real tokens ---------------------------------------------------------------------

def _masked_sum(x: Tensor, mask: Tensor) -> Tensor:
    return (x * mask.unsqueeze(-1).to(x.dtype)).sum(1)


def _real_count(x: Tensor, mask: Tensor) -> Tensor:
    return mask.sum(1, keepdim=True).to(x.dtype)


MEAN_POOL_MISTAKES: list[Mistake] = [
    ("the [PAD] positions count in the mean: padding leaks in. Average over the real tokens only (mask True)",
     lambda x, m: x.mean(1)),
    ("the real tokens are summed but not divided by their count: divide by the number of real tokens, mask.sum(1)",
     _masked_sum),
    ("the pads are zeroed but the sum is divided by the padded length; divide by the number of real tokens, "
     "mask.sum(1)", lambda x, m: _masked_sum(x, m) / x.shape[1]),
    ("the sum is divided by mask.sum(), the number of real tokens in the whole batch; each sequence needs its own "
     "count, mask.sum(1, keepdim=True)", lambda x, m: _masked_sum(x, m) / m.sum().to(x.dtype)),
    ("every position is summed, pads included, then divided by the number of real tokens: zero the pads first",
     lambda x, m: x.sum(1) / _real_count(x, m)),
    ("this is the mean over the pads: the mask is True at the real tokens",
     lambda x, m: _masked_sum(x, ~m) / (~m).sum(1, keepdim=True).clamp(min=1).to(x.dtype)),
    ("this is the first token's state ([CLS]) alone; mean pooling averages every real token", lambda x, m: x[:, 0]),
    ("this is the last real token's state alone; mean pooling averages every real token",
     lambda x, m: x[torch.arange(x.shape[0]), m.sum(1) - 1]),
    ("this is the largest value over the real tokens (max pooling); mean pooling averages them",
     lambda x, m: x.masked_fill(~m.unsqueeze(-1), float("-inf")).amax(1)),
    ("the mean is L2-normalized: return the plain mean; the sentence embedding normalizes it afterwards",
     lambda x, m: F.normalize(_masked_sum(x, m) / _real_count(x, m), dim=-1)),
]


POOL_UNSQUEEZE = ("the mask has shape (batch, seq) and the token states (batch, seq, d): give the mask a feature axis "
                  "before multiplying, mask.unsqueeze(-1) (or mask[..., None]), so it broadcasts over the features")
POOL_KEEPDIM = ("the count mask.sum(1) has shape (batch,) and the sum (batch, d): keep its axis, "
                "mask.sum(1, keepdim=True), so each sequence's sum is divided by its own count")


def _pool_shape_hint(detail: str) -> str:
    """The broadcasting error of a mean pool, explained: a mask without its feature axis, or a count without
    keepdim. PyTorch names the dimension that failed: 2 is (batch, seq, d) against the mask, 1 is (batch, d) against
    the count."""
    if f" ({BROADCAST})" not in detail:
        return detail
    where = detail.rsplit("at non-singleton dimension ", 1)[-1][:1]
    hint = POOL_UNSQUEEZE if where == "2" else POOL_KEEPDIM if where == "1" else f"{POOL_UNSQUEEZE}; {POOL_KEEPDIM}"
    return detail.replace(f" ({BROADCAST})", f" ({hint})")


def _pool_wrong_shape(got: Tensor, x: Tensor) -> str:
    """Why a mean pool's output has the shape it has, where that is clear, or ''."""
    batch, seq, d = x.shape
    if tuple(got.shape) == (d,):
        return (": one vector for the whole batch (x[mask] puts every real token of every sequence in one list); "
                "average each sequence's real tokens separately")
    if tuple(got.shape) == (batch, seq) and seq != d:
        return ": the average runs over the features (dim -1); mean pooling averages over the tokens, dim 1"
    if tuple(got.shape) == (seq, d) and seq != batch:
        return (": the average runs over the batch (dim 0), mixing the sentences; mean pooling averages each "
                "sentence's tokens, dim 1")
    if tuple(got.shape) == (batch, 1, d):
        return (": keepdim=True kept the token axis; sum over dim 1 without keepdim (or .squeeze(1)), keeping "
                "keepdim=True only for the count, mask.sum(1, keepdim=True)")
    return ""


def check_mean_pool(fn: Callable[[Tensor, Tensor], Tensor]) -> CheckReport:
    """Check fn(token_states (batch, seq, d), attention_mask (batch, seq) bool) -> (batch, d), the mean over real
    tokens only, against mean_pool; padded positions hold loud values that must not leak in. A wrong value that
    matches a classic mistake (padding counted, a sum without the division, the wrong count) gets that mistake."""
    from .minilm import baseline, mean_pool  # here, not at the top: the other checkers never need the model module

    report = CheckReport("mean pooling")
    g = torch.Generator().manual_seed(8)

    def case(lengths, d, dtype=torch.float32):
        t = max(lengths) + 2
        mask = torch.arange(t)[None, :] < torch.tensor(lengths)[:, None]
        x = torch.randn(len(lengths), t, d, generator=g, dtype=dtype)
        return torch.where(mask[..., None], x, 100.0 + 50.0 * x), mask

    cases = [("variable lengths", *case([1, 6, 3], 16)), ("equal lengths", *case([4, 4], 8)),
             ("one real token each", *case([1, 1], 4)), ("float64", *case([5, 2, 7], 8, torch.float64))]
    base = baseline()
    cases.append(("the model's token states for the course's sentences", base.hidden[-1], base.mask))
    for name, x, mask in cases:
        want = mean_pool(x, mask)
        given = [x.clone(), mask.clone()]
        got, failed = call_learner(name, fn, *given)
        if failed:
            failed.detail = _pool_shape_hint(failed.detail)
            report.cases.append(failed)
            continue
        problem = _input_problem(got, given, [x, mask], ["token_states", "attention_mask"], views=False)
        if problem:
            report.cases.append(CaseResult(name, False, problem))
            continue
        if not isinstance(got, Tensor) or got.shape != want.shape:
            shape = tuple(got.shape) if isinstance(got, Tensor) else type(got).__name__
            why = _pool_wrong_shape(got, x) if isinstance(got, Tensor) else ""
            report.cases.append(CaseResult(name, False, f"returned {shape}, expected shape {tuple(want.shape)}{why}"))
            continue
        err = float((got.detach().to(want.dtype) - want).abs().max())
        tol = 1e-10 if want.dtype == torch.float64 else 1e-5
        if err <= tol:
            report.cases.append(CaseResult(name, True, f"max abs error {err:.1e}", err))
            continue
        result = CaseResult(name, False, f"max abs error {err:.3g} (tolerance {tol:g})", err)
        _add_hint(result, _closest_mistake(got.detach().to(want.dtype), err, MEAN_POOL_MISTAKES, [x, mask]))
        if want.dtype == torch.float64 and err < 1e-4:
            _add_hint(result, FLOAT32_ONLY)
        report.cases.append(result)
    return report


def _spike_place(x: Tensor, mask: Tensor | None, signed: bool = False) -> tuple[int, int]:
    """The reference for check_find_spike: (position, feature) of the largest |value| (or value, signed) over the
    real tokens (every token if mask is None)."""
    v = x if signed else x.abs()
    if mask is not None:
        v = v.masked_fill(~mask[..., None], float("-inf"))
    return divmod(int(v.amax(0).argmax()), x.shape[-1])


FIND_SPIKE_MISTAKES = {
    "signed": "it found the largest value, not the largest |value|: a massive activation can be negative; take "
              "x.abs() before the max",
    "padding": "a padding position won: mask the [PAD] positions out before the max "
               "(x.abs().masked_fill(~mask[..., None], 0))",
    "swapped": "the pair is the wrong way round: return (position, feature)",
    "by seq": "the flat index was split by the sequence length: divmod(index, d) with d = x.shape[-1], the number of "
              "features, gives (position, feature)",
    "batch kept": "the position counts the batch too (batch x seq + position): take the max over the batch first "
                  "(amax(0)), then find the place in the (seq, d) grid",
    "position 0": "the spike is not always at position 0 or at feature 99: find it in the tensor",
    "sentence 0": "only the first sentence was searched (x[0]): the spike can sit in any sentence of the batch; take "
                  "the max over the batch too (amax(0)) before finding the place",
}
FIND_SPIKE_IN_PLACE = ("compute into a new tensor: x.abs() and x.masked_fill(...) return new tensors, while x.abs_() "
                       "and x.masked_fill_(...) (the trailing underscore) overwrite the caller's hidden states")


def check_find_spike(fn: Callable[[Tensor, Tensor], tuple[int, int]]) -> CheckReport:
    """Check fn(hidden_states (batch, seq, d), attention_mask (batch, seq) bool) -> (position, feature) of the largest
    |value| over the real tokens: synthetic tensors with a spike planted at a random place (negative in some, with a
    louder value at a padding position in others; sizes vary so a hard-coded place or size fails), then the model's
    residual sum entering block 1's FFN LayerNorm. The two integers may be Python ints or 0-d tensors (int() reads
    either). A wrong place that matches a classic mistake gets that mistake."""
    from .minilm import baseline  # here, not at the top: the other checkers never need the model module

    report = CheckReport("find the spike")
    g = torch.Generator().manual_seed(99)

    def case(lengths, d, height, pad=0.0, decoy=0.0, dtype=torch.float32):
        t = max(lengths) + (2 if pad else 0)
        mask = torch.arange(t)[None, :] < torch.tensor(lengths)[:, None]
        x = torch.randn(len(lengths), t, d, generator=g, dtype=dtype)
        row = int(torch.randint(len(lengths), (1,), generator=g))
        pos = 1 + int(torch.randint(lengths[row] - 1, (1,), generator=g))  # never 0: [CLS] is not assumed
        feat = int(torch.randint(d, (1,), generator=g))
        x[row, pos, feat] = height
        if decoy:  # a positive value below |height|: where the largest value is, not the largest |value|
            x[(row + 1) % len(lengths), pos, (feat + 1) % d] = decoy  # equal lengths: pos is real there too
        if pad:
            x = torch.where(mask[..., None], x, pad * torch.ones_like(x))
        return x, mask

    cases = [("a negative spike", *case([7, 7, 7], 24, -60.0, decoy=30.0)),
             ("a louder value at a padding position", *case([5, 9, 3, 6], 16, 40.0, pad=500.0)),
             ("a positive spike, one sentence", *case([11], 10, 25.0)),
             ("many short sentences, few features", *case([3, 4, 2, 4, 3], 6, -12.0, pad=-90.0)),
             ("float64, long sequences", *case([40, 33], 48, 80.0, pad=200.0, dtype=torch.float64))]
    base = baseline()
    cases.append(("the residual sum entering block 1's FFN LayerNorm", base.norm_in["L1 FFN"], base.mask))
    for name, x, mask in cases:
        want = _spike_place(x, mask)
        given = [x.clone(), mask.clone()]
        got, failed = call_learner(name, fn, *given)
        if failed:
            report.cases.append(failed)
            continue
        problem = _input_problem(got, given, [x, mask], ["hidden_states", "attention_mask"], views=False)
        if problem:  # the shared hint speaks of LayerNorm's x -= mu; here the in-place calls are abs_, masked_fill_
            report.cases.append(CaseResult(name, False, problem.split(". Compute", 1)[0] + f" ({FIND_SPIKE_IN_PLACE})"))
            continue
        try:
            place = tuple(int(v) for v in got)
        except (TypeError, ValueError, RuntimeError):
            place = None
        if place is None or len(place) != 2:
            report.cases.append(CaseResult(name, False, f"returned {got!r}: expected two integers, (position, "
                                                        f"feature)"))
            continue
        if place == want:
            report.cases.append(CaseResult(name, True, f"found position {want[0]}, feature {want[1]}"))
            continue
        result = CaseResult(name, False, f"returned {place}, the largest |value| over real tokens is at {want}")
        flat = int(x.abs().masked_fill(~mask[..., None], float("-inf")).amax(0).argmax())
        whole = int(x.abs().masked_fill(~mask[..., None], float("-inf")).flatten().argmax())
        candidates = [("signed", _spike_place(x, mask, signed=True)), ("padding", _spike_place(x, None)),
                      ("swapped", want[::-1]), ("by seq", divmod(flat, x.shape[1])),
                      ("batch kept", divmod(whole, x.shape[-1])), ("sentence 0", _spike_place(x[:1], mask[:1]))]
        hint = next((FIND_SPIKE_MISTAKES[k] for k, p in candidates if p == place), "")
        if not hint and place[0] == 0 != want[0] or place == (0, 99):
            hint = FIND_SPIKE_MISTAKES["position 0"]
        _add_hint(result, hint)
        report.cases.append(result)
    return report

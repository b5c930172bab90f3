"""The reference norms against PyTorch's own kernels: forward values and gradients, float32 and float64."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from conftest import TOL
from course_utils import norms

DTYPES = [torch.float32, torch.float64]
SHAPES = [(16,), (2, 5, 16), (3, 4, 1), (2, 3, 7)]
EPSES = [1e-5, 1e-3, 0.1]


def _close(a, b, dtype, scale=1.0):
    torch.testing.assert_close(a, b, atol=TOL[dtype] * scale, rtol=TOL[dtype])


def _leaf(t):
    return t.detach().clone().requires_grad_(True)


def _forward_backward(fn, tensors, dtype):
    """Run fn on leaf copies; return the output and the gradients under a fixed random probe."""
    leaves = [_leaf(t) for t in tensors]
    out = fn(*leaves)
    probe = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=dtype)
    (out * probe).sum().backward()
    return out, [leaf.grad for leaf in leaves]


def _assert_same(ours, theirs, tensors, dtype, grad_scale=1.0):
    """Same outputs, and same gradients up to round-off times grad_scale (the 1/σ the backward pass multiplies by)."""
    out_a, grads_a = _forward_backward(ours, tensors, dtype)
    out_b, grads_b = _forward_backward(theirs, tensors, dtype)
    _close(out_a, out_b, dtype)
    for ga, gb in zip(grads_a, grads_b):
        _close(ga, gb, dtype, grad_scale)


def _inv_sigma(x, eps, centred=True):
    """Largest 1/sqrt(σ² + eps) over the tokens of x: how much the backward pass amplifies round-off."""
    var = x.var(-1, unbiased=False) if centred else x.pow(2).mean(-1)
    return float(torch.rsqrt(var + (eps or torch.finfo(x.dtype).eps)).max().clamp(min=1.0))



@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("eps", EPSES)
def test_layer_norm_matches_torch(dtype, shape, eps):
    x = torch.randn(shape, dtype=dtype) * 3 + 1
    d = shape[-1]
    w, b = torch.rand(d, dtype=dtype) + 0.5, torch.randn(d, dtype=dtype)
    _assert_same(lambda x, w, b: norms.layer_norm(x, (d,), w, b, eps),
                 lambda x, w, b: F.layer_norm(x, (d,), w, b, eps), [x, w, b], dtype, _inv_sigma(x, eps))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("eps", EPSES + [None])
def test_rms_norm_matches_torch(dtype, shape, eps):
    x = torch.randn(shape, dtype=dtype) * 3 + 1
    d = shape[-1]
    w = torch.rand(d, dtype=dtype) + 0.5
    _assert_same(lambda x, w: norms.rms_norm(x, (d,), w, eps),
                 lambda x, w: F.rms_norm(x, (d,), w, eps), [x, w], dtype, _inv_sigma(x, eps, centred=False))


@pytest.mark.parametrize("dtype", DTYPES)
def test_norms_without_affine_and_over_two_dims(dtype):
    x = torch.randn(2, 3, 4, 5, dtype=dtype)
    _assert_same(lambda x: norms.layer_norm(x, (4, 5)), lambda x: F.layer_norm(x, (4, 5)), [x], dtype)
    _assert_same(lambda x: norms.rms_norm(x, (4, 5)), lambda x: F.rms_norm(x, (4, 5)), [x], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(6, 16), (2, 5, 16), (3, 4, 1)])
@pytest.mark.parametrize("eps", EPSES)
def test_batch_norm_matches_torch_without_mask(dtype, shape, eps):
    x = torch.randn(shape, dtype=dtype) * 2 + 3
    d = shape[-1]
    w, b = torch.rand(d, dtype=dtype) + 0.5, torch.randn(d, dtype=dtype)
    _assert_same(lambda x, w, b: norms.batch_norm(x, None, weight=w, bias=b, eps=eps),
                 lambda x, w, b: F.batch_norm(x.reshape(-1, d), None, None, w, b, True, 0.1, eps).reshape(x.shape),
                 [x, w, b], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d", [1, 8])
@pytest.mark.parametrize("eps", EPSES)
def test_masked_batch_norm_equals_torch_on_real_tokens(dtype, d, eps):
    lengths = torch.tensor([5, 2, 7, 1])
    mask = torch.arange(7)[None, :] < lengths[:, None]
    x = (torch.randn(4, 7, d, dtype=dtype) + 2).masked_fill(~mask[..., None], 0.0)
    w, b = torch.rand(d, dtype=dtype) + 0.5, torch.randn(d, dtype=dtype)
    _assert_same(lambda x, w, b: norms.batch_norm(x, mask, weight=w, bias=b, eps=eps)[mask],
                 lambda x, w, b: F.batch_norm(x[mask], None, None, w, b, True, 0.1, eps), [x, w, b], dtype)


def test_masked_batch_norm_ignores_padding_values():
    mask = torch.tensor([[True, True, False], [True, False, False]])
    x = torch.randn(2, 3, 4)
    loud = x.clone()
    loud[~mask] = 1e3
    torch.testing.assert_close(norms.batch_norm(x, mask)[mask], norms.batch_norm(loud, mask)[mask])
    assert not torch.allclose(norms.batch_norm(x)[mask], norms.batch_norm(loud)[mask])


@pytest.mark.parametrize("dtype", DTYPES)
def test_running_statistics_follow_torch_in_train_and_eval(dtype):
    ours = norms.MaskedBatchNorm1d(8, momentum=0.2).to(dtype)
    theirs = nn.BatchNorm1d(8, momentum=0.2).to(dtype)
    for step in range(4):
        x = torch.randn(3, 5, 8, dtype=dtype) * (step + 1) + step
        mask = torch.ones(3, 5, dtype=torch.bool)
        mask[0, 3:] = False
        out = ours(x, mask)
        _close(out[mask], theirs(x[mask]), dtype)
        _close(ours.running_mean, theirs.running_mean, dtype)
        _close(ours.running_var, theirs.running_var, dtype)
    ours.eval()
    theirs.eval()
    x = torch.randn(2, 4, 8, dtype=dtype)
    _close(ours(x), theirs(x.reshape(-1, 8)).reshape(2, 4, 8), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("eps", [1e-5, 1e-2])
def test_modules_match_torch_modules_and_their_names(dtype, eps):
    x = torch.randn(2, 3, 16, dtype=dtype)
    for ours, theirs in [(norms.LayerNorm(16, eps=eps), nn.LayerNorm(16, eps=eps)),
                         (norms.RMSNorm(16, eps=eps), nn.RMSNorm(16, eps=eps)),
                         (norms.LayerNorm(16, eps=eps, bias=False), nn.LayerNorm(16, eps=eps, bias=False)),
                         (norms.LayerNorm(16, elementwise_affine=False), nn.LayerNorm(16, elementwise_affine=False))]:
        ours, theirs = ours.to(dtype), theirs.to(dtype)
        with torch.no_grad():
            for p in theirs.parameters():
                p.uniform_(0.5, 1.5)
        assert ours.load_state_dict(theirs.state_dict()) is not None  # same parameter names and shapes
        a, b = _leaf(x), _leaf(x)
        _close(ours(a), theirs(b), dtype)
        ours(a).pow(2).sum().backward()
        theirs(b).pow(2).sum().backward()
        _close(a.grad, b.grad, dtype)
        for (name, pa), (_, pb) in zip(ours.named_parameters(), theirs.named_parameters()):
            _close(pa.grad, pb.grad, dtype)


@pytest.mark.parametrize("call, match", [
    (lambda: norms.layer_norm(torch.randn(2, 4), (5,)), "normalized_shape"),
    (lambda: norms.layer_norm(torch.randn(2, 4), (4,), torch.ones(3)), "weight"),
    (lambda: norms.layer_norm(torch.randn(2, 4), (4,), None, torch.ones(5)), "bias"),
    (lambda: norms.layer_norm(torch.randn(2, 4), (4,), eps=0.0), "eps"),
    (lambda: norms.layer_norm(torch.randn(2, 4), (4,), eps=-1e-5), "eps"),
    (lambda: norms.rms_norm(torch.randn(2, 4), (4,), eps=float("nan")), "eps"),
    (lambda: norms.rms_norm(torch.randn(2, 4), (4,), torch.ones(2)), "weight"),
    (lambda: norms.batch_norm(torch.randn(2, 3, 4), torch.ones(2, 4, dtype=torch.bool)), "mask"),
    (lambda: norms.batch_norm(torch.randn(2, 3, 4), torch.ones(2, 3)), "mask"),
    (lambda: norms.batch_norm(torch.randn(2, 3, 4), torch.zeros(2, 3, dtype=torch.bool)), "mask"),
    (lambda: norms.batch_norm(torch.randn(1, 4), None), "more than 1 value"),
    (lambda: norms.batch_norm(torch.randn(2, 3, 4), training=False), "running_mean"),
    (lambda: norms.batch_norm(torch.randn(2, 3, 4), eps=0), "eps"),
    (lambda: norms.LayerNorm(0), "normalized_shape"),
    (lambda: norms.RMSNorm(4, eps=0), "eps"),
    (lambda: norms.MaskedBatchNorm1d(4)(torch.randn(2, 3, 5)), "input"),
    (lambda: norms.make_norm("batch", 4), "norm"),
])
def test_wrong_arguments_raise_value_error_naming_them(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("value", [0, -1.0, float("nan"), float("inf"), True, "1e-5", None])
def test_positive_number_refuses_what_is_not_a_finite_number_above_zero(value):
    with pytest.raises(ValueError, match=r"^the gain γ must be a finite number > 0 \(say 1\), got "):
        norms.positive_number(value, "the gain γ", note=" (say 1)")


def test_positive_number_returns_a_float_and_lets_none_through_only_where_allowed():
    assert norms.positive_number(3, "cap") == 3.0 and type(norms.positive_number(3, "cap")) is float
    assert norms.positive_number(None, "cap", allow_none=True) is None
    with pytest.raises(ValueError, match="^cap must be None or a finite number > 0, got -1"):
        norms.positive_number(-1, "cap", allow_none=True)

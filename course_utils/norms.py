"""Reference LayerNorm, RMSNorm and (masked) BatchNorm, written out from the formulas and checked against PyTorch.

Notebook 02 derives masked BatchNorm, notebook 03 LayerNorm, notebook 05 RMSNorm; tests/test_norms.py holds them
to PyTorch's own kernels (forward and gradients, float32 and float64). `positive_number` is the course's one check of
a positive setting (eps, caps, gains, scales), here in the lowest layer that needs it.
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import torch
from torch import Tensor, nn

__all__ = [
    "layer_norm", "rms_norm", "batch_norm", "masked_mean_var",
    "LayerNorm", "RMSNorm", "MaskedBatchNorm1d", "make_norm", "NORM_KINDS", "positive_number",
]

NORM_KINDS = ("layer", "rms", "none")


def _as_shape(normalized_shape: int | Sequence[int] | None, x: Tensor,
              name: str = "normalized_shape") -> tuple[int, ...]:
    """Check that normalized_shape names the trailing dimensions of x; None means the last one."""
    if normalized_shape is None:
        if x.dim() == 0:
            raise ValueError("input must have at least one dimension to normalize over, got a 0-d tensor")
        return (x.shape[-1],)
    if isinstance(normalized_shape, numbers.Integral):
        normalized_shape = (int(normalized_shape),)
    shape = tuple(int(s) for s in normalized_shape)
    if not shape or any(s < 1 for s in shape):
        raise ValueError(f"{name} must be a non-empty tuple of positive sizes, got {shape}")
    if tuple(x.shape[x.dim() - len(shape):]) != shape or x.dim() < len(shape):
        raise ValueError(f"{name}={shape} must match the last dimensions of input, whose shape is {tuple(x.shape)}")
    return shape


def _module_shape(normalized_shape: int | Sequence[int]) -> tuple[int, ...]:
    """A module's normalized_shape as a tuple of positive sizes."""
    if isinstance(normalized_shape, numbers.Integral):
        normalized_shape = (int(normalized_shape),)
    shape = tuple(int(s) for s in normalized_shape)
    if not shape or any(s < 1 for s in shape):
        raise ValueError(f"normalized_shape must hold positive sizes, got {shape}")
    return shape


def positive_number(value, what: str, *, note: str = "", allow_none: bool = False) -> float | None:
    """value as a float if it is a finite number > 0 (or None where allowed), else a ValueError naming `what`."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{what} must be {'None or ' if allow_none else ''}a finite number > 0{note}, got {value!r}")
    return float(value)


def _check_eps(eps: float) -> float:
    return positive_number(eps, "eps", note=" (for example 1e-5)")


def _check_param(p: Tensor | None, shape: tuple[int, ...], name: str) -> None:
    if p is not None and tuple(p.shape) != shape:
        raise ValueError(f"{name} must have shape {shape} (the normalized shape), got {tuple(p.shape)}")


def layer_norm(input: Tensor, normalized_shape: int | Sequence[int] | None = None, weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """LN(x) = γ ⊙ (x - μ) / sqrt(σ² + eps) + β over the trailing normalized_shape dims; σ² is the biased variance."""
    shape = _as_shape(normalized_shape, input)
    _check_param(weight, shape, "weight")
    _check_param(bias, shape, "bias")
    eps = _check_eps(eps)
    dims = tuple(range(-len(shape), 0))
    mu = input.mean(dim=dims, keepdim=True)
    var = ((input - mu) ** 2).mean(dim=dims, keepdim=True)  # divide by d, not d - 1
    y = (input - mu) * torch.rsqrt(var + eps)  # eps goes under the root, beside the variance
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


def rms_norm(input: Tensor, normalized_shape: int | Sequence[int] | None = None, weight: Tensor | None = None,
             eps: float | None = None) -> Tensor:
    """RMSNorm(x) = γ ⊙ x / sqrt(mean(x²) + eps); eps=None uses the dtype's machine epsilon, as torch does."""
    shape = _as_shape(normalized_shape, input)
    _check_param(weight, shape, "weight")
    eps = torch.finfo(input.dtype).eps if eps is None else _check_eps(eps)
    dims = tuple(range(-len(shape), 0))
    y = input * torch.rsqrt((input * input).mean(dim=dims, keepdim=True) + eps)
    return y * weight if weight is not None else y


def masked_mean_var(x: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor, int]:
    """Per-feature mean and biased variance of x, (batch, seq, d) or (n, d), over real tokens (mask True); and n."""
    if x.dim() not in (2, 3):
        raise ValueError(f"input must be (batch, seq, d) or (n, d), got shape {tuple(x.shape)}")
    if mask is None:
        flat = x.reshape(-1, x.shape[-1])
        return flat.mean(0), flat.var(0, unbiased=False), flat.shape[0]
    if tuple(mask.shape) != tuple(x.shape[:-1]):
        raise ValueError(f"mask must have shape {tuple(x.shape[:-1])} (input without its feature dimension), "
                         f"got {tuple(mask.shape)}")
    if mask.dtype != torch.bool:
        raise ValueError(f"mask must be a bool tensor (True = real token, False = padding), got dtype {mask.dtype}")
    real = mask.unsqueeze(-1)
    n = int(mask.sum())
    if n == 0:
        raise ValueError("mask marks no real tokens: at least one entry must be True")
    # select, never multiply: 0 * nan and 0 * inf are nan, so a pad holding either would poison a product by the mask
    x = torch.where(real, x, torch.zeros((), dtype=x.dtype, device=x.device))
    dims = tuple(range(x.dim() - 1))
    mean = x.sum(dim=dims) / n
    var = torch.where(real, (x - mean) ** 2, torch.zeros((), dtype=x.dtype, device=x.device)).sum(dim=dims) / n
    return mean, var, n


def batch_norm(input: Tensor, mask: Tensor | None = None, running_mean: Tensor | None = None,
               running_var: Tensor | None = None, weight: Tensor | None = None, bias: Tensor | None = None,
               training: bool = True, momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """BatchNorm over every position of (batch, seq, d) or (n, d), per feature; with mask, over real tokens only.

    In training the batch statistics normalize and the running ones (if given) move towards them in place, with the
    unbiased variance as PyTorch does; in eval the running statistics normalize. Padded positions are normalized with
    the same statistics; their values mean nothing.
    """
    eps = _check_eps(eps)
    d = input.shape[-1] if input.dim() else 0
    for name, p in (("weight", weight), ("bias", bias), ("running_mean", running_mean), ("running_var", running_var)):
        _check_param(p, (d,), name)
    if not 0.0 <= momentum <= 1.0:
        raise ValueError(f"momentum must be in [0, 1], got {momentum!r}")
    if training:
        mean, var, n = masked_mean_var(input, mask)
        if n < 2:
            raise ValueError(f"training-mode batch norm needs more than 1 value per feature, got {n}: "
                             "use eval mode (running statistics) or a larger batch")
        if running_mean is not None and running_var is not None:
            with torch.no_grad():
                running_mean.mul_(1 - momentum).add_(momentum * mean.detach())
                running_var.mul_(1 - momentum).add_(momentum * var.detach() * n / (n - 1))
    else:
        if running_mean is None or running_var is None:
            raise ValueError("eval-mode batch norm needs running_mean and running_var")
        if input.dim() not in (2, 3):
            raise ValueError(f"input must be (batch, seq, d) or (n, d), got shape {tuple(input.shape)}")
        mean, var = running_mean, running_var
    y = (input - mean) * torch.rsqrt(var + eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


class LayerNorm(nn.Module):
    """Per-token LayerNorm with PyTorch's parameters: weight (γ) and bias (β) of shape normalized_shape."""

    def __init__(self, normalized_shape: int | Sequence[int], eps: float = 1e-5, elementwise_affine: bool = True,
                 bias: bool = True, device=None, dtype=None):
        super().__init__()
        self.normalized_shape = _module_shape(normalized_shape)
        self.eps = _check_eps(eps)
        self.elementwise_affine = elementwise_affine
        kw = {"device": device, "dtype": dtype}
        self.weight = nn.Parameter(torch.ones(self.normalized_shape, **kw)) if elementwise_affine else None
        self.bias = nn.Parameter(torch.zeros(self.normalized_shape, **kw)) if elementwise_affine and bias else None

    def forward(self, x: Tensor) -> Tensor:
        """x: (..., *normalized_shape) -> same shape."""
        return layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class RMSNorm(nn.Module):
    """RMSNorm with PyTorch's parameters: a weight (γ), no bias; eps=None means the dtype's machine epsilon."""

    def __init__(self, normalized_shape: int | Sequence[int], eps: float | None = None, elementwise_affine: bool = True,
                 device=None, dtype=None):
        super().__init__()
        self.normalized_shape = _module_shape(normalized_shape)
        self.eps = None if eps is None else _check_eps(eps)
        self.elementwise_affine = elementwise_affine
        self.weight = (nn.Parameter(torch.ones(self.normalized_shape, device=device, dtype=dtype))
                       if elementwise_affine else None)

    def forward(self, x: Tensor) -> Tensor:
        """x: (..., *normalized_shape) -> same shape."""
        return rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class MaskedBatchNorm1d(nn.Module):
    """BatchNorm1d over (batch, seq, num_features) whose statistics can skip padding: forward(x, mask)."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1, affine: bool = True,
                 track_running_stats: bool = True, device=None, dtype=None):
        super().__init__()
        if not isinstance(num_features, numbers.Integral) or num_features < 1:
            raise ValueError(f"num_features must be a positive int, got {num_features!r}")
        self.num_features, self.eps, self.momentum = int(num_features), _check_eps(eps), momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        kw = {"device": device, "dtype": dtype}
        self.weight = nn.Parameter(torch.ones(num_features, **kw)) if affine else None
        self.bias = nn.Parameter(torch.zeros(num_features, **kw)) if affine else None
        if track_running_stats:
            self.register_buffer("running_mean", torch.zeros(num_features, **kw))
            self.register_buffer("running_var", torch.ones(num_features, **kw))
        else:
            self.running_mean = self.running_var = None

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        """x: (batch, seq, num_features) or (n, num_features); mask: x.shape[:-1], True at real tokens."""
        if x.dim() not in (2, 3) or x.shape[-1] != self.num_features:
            raise ValueError(f"input must be (batch, seq, {self.num_features}) or (n, {self.num_features}), "
                             f"got shape {tuple(x.shape)}")
        use_batch_stats = self.training or not self.track_running_stats
        return batch_norm(x, mask, self.running_mean, self.running_var, self.weight, self.bias,
                          training=use_batch_stats, momentum=self.momentum, eps=self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}"


def make_norm(kind: str, d_model: int, eps: float | None = 1e-5) -> nn.Module:
    """The course's norm by name: "layer" -> LayerNorm, "rms" -> RMSNorm, "none" -> Identity."""
    if kind == "layer":
        return LayerNorm(d_model, eps=1e-5 if eps is None else eps)
    if kind == "rms":
        return RMSNorm(d_model, eps=eps)
    if kind == "none":
        return nn.Identity()
    raise ValueError(f"norm must be one of {NORM_KINDS}, got {kind!r}")

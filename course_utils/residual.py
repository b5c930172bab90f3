"""The residual stacks notebook 01 measures: real nn sublayers f_l, their kinds and sizes, and the stream's norm.

The loop x_{l+1} = x_l + g f_l(x_l) itself is the notebook's `residual_stack`; this module builds what it runs on.
"""
from __future__ import annotations

import functools
import math

import torch
from torch import Tensor, nn

__all__ = ["D_MODEL", "N_TOKENS", "MAX_DEPTH", "CONTRIBUTIONS", "SUBLAYER_KINDS", "STACK_NORMS", "ffn",
           "make_sublayers", "sublayer_stack", "stream_tokens", "vector_norm"]

D_MODEL = 32
N_TOKENS = 4
MAX_DEPTH = 200
CONTRIBUTIONS = ("aligned", "independent")
SUBLAYER_KINDS = ("fixed size", "amplifies its input")
STACK_NORMS = ("off", "Pre-LN", "Post-LN")


def _unit_zero_mean(d: int, g: torch.Generator) -> Tensor:
    """A random direction with mean 0 over its features, so LayerNorm's centring leaves it alone."""
    u = torch.randn(d, generator=g, dtype=torch.float64)
    u = u - u.mean()
    return u / u.norm()


def _linear(weight: Tensor) -> nn.Linear:
    """An nn.Linear (no bias) holding `weight`, set up without running its throwaway random init (a deep stack builds
    hundreds of them, and the init's Python overhead, even on the meta device, was most of the building time)."""
    layer = nn.Linear.__new__(nn.Linear)
    nn.Module.__init__(layer)
    layer.in_features, layer.out_features = weight.shape[1], weight.shape[0]
    layer.weight = nn.Parameter(weight, requires_grad=False)
    layer.register_parameter("bias", None)
    return layer


def ffn(d: int, g: torch.Generator) -> nn.Sequential:
    """A Transformer feed-forward sublayer, Linear(d, 4d) -> ReLU -> Linear(4d, d), scaled so E|f(x)|^2 = |x|^2."""
    w1 = torch.randn(4 * d, d, generator=g, dtype=torch.float64) * math.sqrt(2.0 / d)
    w2 = torch.randn(d, 4 * d, generator=g, dtype=torch.float64) * math.sqrt(1.0 / (4 * d))
    return nn.Sequential(_linear(w1), nn.ReLU(), _linear(w2))


def make_sublayers(sublayer: str, contributions: str, depth: int = MAX_DEPTH, d: int = D_MODEL,
                   seed: int = 0) -> nn.ModuleList:
    """`depth` real sublayers f_l (float64, unit gain; the stack multiplies them by the gain g).

    fixed size: nn.Linear with zero weight and a unit-norm bias, so f_l(x) is the same vector whatever x is; aligned
    means one shared direction, independent a fresh random direction per layer.
    amplifies its input: aligned is nn.Linear with the identity weight (f_l(x) = x, pushing along the stream);
    independent is a random ReLU feed-forward block (output size proportional to |x|, direction unrelated to x).
    """
    if sublayer not in SUBLAYER_KINDS or contributions not in CONTRIBUTIONS:
        raise ValueError(f"sublayer must be one of {SUBLAYER_KINDS} and contributions one of {CONTRIBUTIONS}, "
                         f"got {sublayer!r}, {contributions!r}")
    if not (isinstance(depth, int) and depth >= 0):
        raise ValueError(f"depth must be an int >= 0, got {depth!r}")
    g = torch.Generator().manual_seed(seed)
    shared = _unit_zero_mean(d, g)
    layers = nn.ModuleList()
    for _ in range(depth):
        if sublayer == "fixed size":
            f = nn.Linear(d, d, dtype=torch.float64)
            with torch.no_grad():
                f.weight.zero_()
                f.bias.copy_(shared if contributions == "aligned" else _unit_zero_mean(d, g))
        elif contributions == "aligned":
            f = nn.Linear(d, d, bias=False, dtype=torch.float64)
            with torch.no_grad():
                f.weight.copy_(torch.eye(d, dtype=torch.float64))
        else:
            f = ffn(d, g)
        f.requires_grad_(False)
        layers.append(f)
    return layers


@functools.lru_cache(maxsize=12)  # the notebook uses 4 kinds at seed 0 and the FFN stack at seeds 0-5
def sublayer_stack(sublayer: str, contributions: str, seed: int = 0) -> nn.ModuleList:
    """MAX_DEPTH sublayers of one kind, built once per seed (seed 0: the panels' own); slice it for a shallower
    stack: make_sublayers draws layer by layer, so the first L layers are the stack of depth L."""
    return make_sublayers(sublayer, contributions, MAX_DEPTH, seed=seed)


def stream_tokens(n: int, d: int, seed: int) -> Tensor:
    """n tokens with N(0, 1) features (like embeddings): |x| is about sqrt(d)."""
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def vector_norm(x: Tensor) -> Tensor:
    """|x| over the last dimension without squaring huge entries into inf (|x| near 1e200 stays finite in float64)."""
    scale = x.abs().amax(dim=-1, keepdim=True)
    safe = torch.where((scale > 0) & torch.isfinite(scale), scale, torch.ones_like(scale))
    return torch.where(torch.isfinite(scale[..., 0]), (x / safe).norm(dim=-1) * safe[..., 0], scale[..., 0])

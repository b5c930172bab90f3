"""Notebook 01 (why normalize): the residual stack forward and backward, per-layer histograms, covariate shift,
and the experiment behind each of its claims (course_utils.evidence), rerun over seeds by course_utils.robustness.

The stack is x_{l+1} = x_l + g f_l(x_l) over real nn sublayers (course_utils.residual); the loop is the notebook's own
`residual_stack`, which the stack's panels and measurements take as their first argument. Panels cache what they
compute (a deeper request continues the stack where it stopped), so returning to a setting is a lookup.
"""
from __future__ import annotations

import copy
import functools
import math
import time
from collections.abc import Callable

import ipywidgets as widgets
import numpy as np
import plotly.graph_objects as go
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..evidence import Outcome, Setting, claim_experiment
from ..figures import color, dash, live_figure, live_subplots, log_axis_values, marker, static_figure
from ..norms import positive_number
from ..panel import Panel, TrainingDemo, choice, message_html, register_panel
from ..residual import (CONTRIBUTIONS, D_MODEL, MAX_DEPTH, N_TOKENS, STACK_NORMS, SUBLAYER_KINDS, make_sublayers,
                        stream_tokens, sublayer_stack, vector_norm)

__all__ = [
    "GAINS", "FLOAT16_MAX", "FLOAT32_MAX", "BACKWARD_DEPTHS", "GRADIENT_SEEDS", "HIST_DEPTH", "HIST_LAYERS",
    "HIST_BINS", "SHIFT_NORMS", "SHIFT_LRS", "QUANTILES", "constant_block", "constant_sum", "predicted_norm",
    "growth_curve", "growth_runs", "backward_through_stack", "gradient_ratios", "layer_factors", "float16_overflow",
    "layer_histograms", "float16_figure", "residual_growth_panel", "gradient_panel", "histogram_panel", "ShiftNet",
    "probe_batch", "train_shift_run", "learning_rate_race", "CovariateShiftDemo", "covariate_shift_demo",
    "EXTREME_DECADES", "STABLE_BAND", "POST_LN_BAND", "FACTOR_STD_ABOVE", "FACTOR_MEAN_WITHIN", "norms_add",
    "growth_checks", "float16_checks", "extreme", "stable", "bounded", "both_sides", "random_factor",
    "histogram_checks", "DRIFT_FACTOR", "SAME_LOSS_WITHIN", "NEARBY_LR_WITHIN", "BN_TRAINS_BELOW", "PLAIN_FAILS_BY",
    "drifted", "PRE_LN_STEADIER", "loss_gap", "same_loss", "large_lr_checks", "run_line",
    "SPEED_LOSS", "SPEED_WINDOW", "FASTER_BY", "NOISE", "NOISE_SLOWER_AT_MOST", "SHARPER_BY", "steps_to_loss",
    "trains_faster", "noise_race", "noise_checks", "hessian_top", "sharpness", "flatter_with_batchnorm",
    "DEEP_DEPTHS", "LAW_BAND", "SHARE_SLOPE", "deep_stack", "depth_law", "follows_sqrt_law", "vanished",
    "branch_shares", "share_slope", "down_weighted", "staleness", "gradient_staleness", "less_stale_with_batchnorm",
    "VANISHED_BELOW",
]

GAINS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
FLOAT16_MAX = float(torch.finfo(torch.float16).max)
FLOAT32_MAX = float(torch.finfo(torch.float32).max)
# residual_stack(x0, sublayers, gain, norm="off", residual=True) -> the stream x_0 .. x_L, (L + 1, *x0.shape)
ResidualStack = Callable[..., Tensor]


def constant_block(direction: Tensor) -> nn.Linear:
    """Notebook 01 §1: an nn.Linear whose output is `direction` whatever its input (weight 0, bias = direction)."""
    d = direction.shape[-1]
    f = nn.Linear(d, d, dtype=direction.dtype, device="meta")  # meta: no throwaway random init
    f.weight = nn.Parameter(torch.zeros(d, d, dtype=direction.dtype), requires_grad=False)
    f.bias = nn.Parameter(direction.detach().clone(), requires_grad=False)
    return f


def constant_sum(residual_stack: ResidualStack, contributions: str = "aligned", n_blocks: int = 10,
                 size: float = 2.0, seed: int = 0, d: int = D_MODEL) -> Tensor:
    """|x_l|, l = 0..n_blocks, from x_0 = 0 through constant blocks adding `size` times a unit vector each: one shared
    random direction (aligned) or a fresh one per block (independent)."""
    _check_choice(contributions, CONTRIBUTIONS, "contributions")
    g = torch.Generator().manual_seed(seed)

    def direction() -> Tensor:
        v = torch.randn(d, generator=g, dtype=torch.float64)
        return v / v.norm()

    shared = direction()
    blocks = [constant_block(shared if contributions == "aligned" else direction()) for _ in range(n_blocks)]
    with torch.no_grad():
        return vector_norm(residual_stack(torch.zeros(d, dtype=torch.float64), blocks, size))


def predicted_norm(depth: int, gain: float, sublayer: str, contributions: str, norm: str, x0_norm: float,
                   d: int = D_MODEL) -> tuple[np.ndarray, str]:
    """The law |x_l| follows, l = 0..depth, and its name: grows like L, like sqrt(L), exponentially, or stays put.

    Assumes x0 roughly orthogonal to the contributions and zero-mean over features (true here up to ~1/sqrt(d)).
    """
    layers = np.arange(depth + 1, dtype=np.float64)
    if norm == "Post-LN":
        law = np.full_like(layers, math.sqrt(d))
        law[0] = x0_norm
        return law, "constant √d (LayerNorm rescales the stream)"
    step = gain if sublayer == "fixed size" else gain * math.sqrt(d)  # Pre-LN: f sees a vector of norm sqrt(d)
    if sublayer == "fixed size" or norm == "Pre-LN":
        if contributions == "aligned":
            if sublayer == "fixed size":
                return np.sqrt(x0_norm ** 2 + (layers * step) ** 2), "grows like L (norms add)"
            return x0_norm + layers * step, "grows like L (norms add)"
        return np.sqrt(x0_norm ** 2 + layers * step ** 2), "grows like √L (squared norms add)"
    with np.errstate(over="ignore"):
        if contributions == "aligned":
            return x0_norm * (1.0 + gain) ** layers, "exponential: (1 + g)^L"
        return x0_norm * (1.0 + gain ** 2) ** (layers / 2), "exponential: (1 + g²)^(L/2)"


def _stack(sublayer: str, contributions: str, depth: int, seed: int) -> nn.ModuleList:
    """`depth` sublayers of one kind: the panels' own stack for seed 0, the same recipe drawn with another seed."""
    if depth <= MAX_DEPTH:
        return sublayer_stack(sublayer, contributions, seed)[:depth]
    return make_sublayers(sublayer, contributions, depth, D_MODEL, seed)


def growth_curve(residual_stack: ResidualStack, sublayer: str, contributions: str, norm: str, gain: float,
                 depth: int = MAX_DEPTH, seed: int = 0) -> np.ndarray:
    """|x_l| for l = 0..depth, averaged over N_TOKENS tokens; seed 0 is the panels' fixed stack and tokens."""
    x0 = stream_tokens(N_TOKENS, D_MODEL, seed + 1)
    with torch.no_grad():
        xs = residual_stack(x0, _stack(sublayer, contributions, depth, seed), gain, norm)
    return vector_norm(xs).mean(-1).numpy()


def growth_runs(residual_stack: ResidualStack, gain: float = 1.0, depth: int = MAX_DEPTH,
                seed: int = 0) -> dict[tuple[str, str, str], np.ndarray]:
    """growth_curve for every (sublayer, contributions, norm) the growth panel offers, by that triple."""
    return {(s, c, n): growth_curve(residual_stack, s, c, n, gain, depth, seed)
            for s in SUBLAYER_KINDS for c in CONTRIBUTIONS for n in STACK_NORMS}


def backward_through_stack(residual_stack: ResidualStack, depth: int, norm: str, gain: float, residual: bool = True,
                           n_tokens: int = N_TOKENS, seed: int = 0) -> dict[str, Tensor]:
    """One forward and backward pass of loss = mean over tokens of r · x_L through `depth` random FFN sublayers.

    residual_stack runs one layer at a time, so that each x_l keeps its gradient, and each sublayer records its output
    so its weight gradient can be read. Returns x and grad_x ((depth + 1, n_tokens, d): the stream and dloss/dx_l)
    and grad_w ((depth,): |dloss/dW| of each sublayer's second Linear). Sublayers are the course's fixed stack
    (seed 0) when seed is 0.
    """
    if norm not in STACK_NORMS:
        raise ValueError(f"norm must be one of {STACK_NORMS}, got {norm!r}")
    layers = _stack("amplifies its input", "independent", depth, seed)
    x = stream_tokens(n_tokens, D_MODEL, seed + 1).requires_grad_(True)
    r = stream_tokens(1, D_MODEL, seed + 2)[0] / math.sqrt(D_MODEL)
    xs, hiddens, outs = [x], [], []

    def recorded(f: nn.Sequential) -> Callable[[Tensor], Tensor]:
        def sublayer(u: Tensor) -> Tensor:
            hidden = f[1](f[0](u))
            out = f[2](hidden)
            out.retain_grad()
            hiddens.append(hidden.detach())
            outs.append(out)
            return out
        return sublayer

    for f in layers:
        x = residual_stack(x, [recorded(f)], gain, norm, residual=residual)[-1]
        x.retain_grad()
        xs.append(x)
    (xs[-1] @ r).mean().backward()
    grad_w = (vector_norm(torch.einsum("ltd,lth->ldh", torch.stack([o.grad for o in outs]),
                                       torch.stack(hiddens)).flatten(1)) if outs
              else torch.zeros(0, dtype=torch.float64))
    return {"x": torch.stack([x.detach() for x in xs]), "grad_x": torch.stack([x.grad for x in xs]),
            "grad_w": grad_w}


def gradient_ratios(residual_stack: ResidualStack, depth: int, norm: str, gain: float, residual: bool = True,
                    seed: int = 0) -> dict[str, float]:
    """The backward pass's summary: ratio = |dloss/dx_0| / |dloss/dx_L| (mean over tokens), weight_ratio = first over
    last sublayer's weight-gradient norm, growth = |x_L| / |x_0| (the forward pass, for comparison)."""
    out = backward_through_stack(residual_stack, depth, norm, gain, residual, seed=seed)
    grad, size = vector_norm(out["grad_x"]).mean(-1), vector_norm(out["x"]).mean(-1)
    return {"ratio": (grad[0] / grad[-1]).item(), "weight_ratio": (out["grad_w"][0] / out["grad_w"][-1]).item(),
            "growth": (size[-1] / size[0]).item()}


def layer_factors(residual_stack: ResidualStack, depth: int, norm: str, gain: float = 1.0,
                  seed: int = 0) -> np.ndarray:
    """log10 of the factor each layer multiplies the gradient by on its way down, |dloss/dx_l| / |dloss/dx_{l+1}|,
    per token: (depth, tokens). Their sum over the layers is log10 of the input/output gradient ratio."""
    grad = vector_norm(backward_through_stack(residual_stack, depth, norm, gain, seed=seed)["grad_x"])
    return torch.log10(grad[:-1] / grad[1:]).numpy()


def float16_overflow(residual_stack: ResidualStack, seed: int = 0, depth: int = MAX_DEPTH,
                     n_tokens: int = N_TOKENS) -> dict:
    """The FFN stack (gain 1) in float64 without norm and in float16 with each placement, on the same tokens.

    Returns x0, half_stack (the sublayers rounded to float16), x64 and x16 (by norm) streams, first_inf (first layer
    of the float16 run without norm holding inf or nan; None if none) and first_big (first layer where the float64
    run's largest entry passes 65504; None if none).
    """
    layers = _stack("amplifies its input", "independent", depth, seed)
    half_stack = [copy.deepcopy(f).half() for f in layers]      # the same weights, rounded to float16
    x0 = stream_tokens(n_tokens, D_MODEL, seed + 1)
    with torch.no_grad():
        x64 = residual_stack(x0, layers, 1.0, "off")
        x16 = {norm: residual_stack(x0.half(), half_stack, 1.0, norm) for norm in STACK_NORMS}
    bad = (~torch.isfinite(x16["off"])).flatten(1).any(1).nonzero()
    big = (x64.abs().flatten(1).amax(1) > FLOAT16_MAX).nonzero()
    return {"x0": x0, "half_stack": half_stack, "x64": x64, "x16": x16,
            "first_inf": int(bad[0]) if len(bad) else None, "first_big": int(big[0]) if len(big) else None}


def _check_depth(depth, low: int = 1, high: int = MAX_DEPTH) -> int:
    if isinstance(depth, bool) or not isinstance(depth, (int, np.integer)) or not low <= depth <= high:
        raise ValueError(f"depth must be a whole number from {low} to {high}, got {depth!r}")
    return int(depth)


def _check_choice(value, options: tuple, what: str):
    if value not in options:
        raise ValueError(f"{what} must be one of {options}, got {value!r}")
    return value


def _gain_control(value: float = 1.0) -> widgets.SelectionSlider:
    return widgets.SelectionSlider(options=list(GAINS), value=value, description="gain g")


@register_panel()
def residual_growth_panel(residual_stack: ResidualStack) -> Panel:
    """Depth, gain, kind of contribution and normalization -> |x_l| per layer on a log axis, with the law it follows."""
    cache: dict[tuple, tuple[list, Tensor]] = {}
    x0 = stream_tokens(N_TOKENS, D_MODEL, 1)
    x0_norm = float(x0.norm(dim=-1).mean())

    def curve(sublayer, contributions, norm, gain, depth):
        """|x_l| for l = 0..depth; a deeper request continues the stack from the last layer computed so far."""
        key = (sublayer, contributions, norm, gain)
        sizes, last = cache.get(key, ([float(x0_norm)], x0))
        if len(sizes) <= depth:
            layers = sublayer_stack(sublayer, contributions)[len(sizes) - 1:depth]
            with torch.no_grad():
                xs = residual_stack(last, layers, gain, norm)[1:]
            sizes = sizes + vector_norm(xs).mean(-1).tolist()
            cache[key] = (sizes, xs[-1])
        return np.asarray(sizes[:depth + 1])

    fig = live_figure("The residual stream's size, layer by layer", "layer l",
                      f"|x_l|  (mean over {N_TOKENS} tokens, d = {D_MODEL})", log_y=True, height=390)
    fig.update_yaxes(exponentformat="power")
    plain_trace = fig.add_scatter(mode="lines", name="without normalization",
                                  line=dict(color="#999999", width=2, dash="longdash")).data[-1]
    measured_trace = fig.add_scatter(mode="lines", name="measured", line=dict(color=color(0), width=3)).data[-1]
    law_trace = fig.add_scatter(mode="lines", name="law", line=dict(color=color(1), width=2, dash="dash")).data[-1]
    float16_trace = fig.add_scatter(mode="lines", name="largest float16 (65504)",
                                    line=dict(color=color(3), dash="dot")).data[-1]
    float32_trace = fig.add_scatter(mode="lines", name="largest float32 (3.4e38)",
                                    line=dict(color=color(7), dash="dashdot")).data[-1]
    readout = widgets.HTML()
    controls = {
        "depth": widgets.IntSlider(value=50, min=1, max=MAX_DEPTH, description="depth L"),
        "gain": _gain_control(1.0),
        "contributions": choice(CONTRIBUTIONS, value="independent", description="contributions"),
        "sublayer": choice(SUBLAYER_KINDS, value="amplifies its input", description="sublayer"),
        "norm": widgets.ToggleButtons(options=list(STACK_NORMS), value="off", description="normalization"),
    }

    def update(depth, gain, contributions, sublayer, norm):
        depth, gain = _check_depth(depth), positive_number(gain, "gain")
        _check_choice(contributions, CONTRIBUTIONS, "contributions")
        _check_choice(sublayer, SUBLAYER_KINDS, "sublayer")
        _check_choice(norm, STACK_NORMS, "normalization")
        layers = list(range(depth + 1))
        measured = curve(sublayer, contributions, norm, gain, depth)
        plain = curve(sublayer, contributions, "off", gain, depth) if norm != "off" else measured
        law, law_name = predicted_norm(depth, gain, sublayer, contributions, norm, x0_norm)
        top = float(np.nanmax(plain if norm != "off" else measured))
        # One y-range per (sublayer, contributions, gain), fixed over depth and placement: an autoscaled axis would
        # rescale when the norm or the depth changes, and a flat LayerNorm curve would seem to shrink or grow
        span = np.concatenate([curve(sublayer, contributions, n, gain, MAX_DEPTH) for n in STACK_NORMS]
                              + [predicted_norm(MAX_DEPTH, gain, sublayer, contributions, n, x0_norm)[0]
                                 for n in STACK_NORMS])
        span = np.log10(span[np.isfinite(span) & (span > 0)])
        low, high = float(span.min()), float(span.max())
        pad = max(0.1 * (high - low), 0.3)
        with fig.batch_update():
            fig.update_yaxes(range=[low - pad, high + pad], autorange=False)
            fig.update_xaxes(range=[0, depth], autorange=False)
            plain_trace.update(x=layers, y=log_axis_values(plain), visible=norm != "off")
            measured_trace.update(x=layers, y=log_axis_values(measured), name=f"measured, normalization {norm}")
            law_trace.update(x=layers, y=log_axis_values(law), name=f"law: {law_name}")
            float16_trace.update(x=[0, depth], y=[FLOAT16_MAX] * 2, visible=top > 1e3)
            float32_trace.update(x=[0, depth], y=[FLOAT32_MAX] * 2, visible=top > 1e30)
        text = (f"|x_0| = {measured[0]:.3g}, |x_{depth}| = {measured[-1]:.3g}: "
                f"<b>{measured[-1] / measured[0]:.3g}×</b> the start. The law: {law_name}.")
        if top > FLOAT16_MAX:
            first = int(np.argmax(np.asarray(plain) > FLOAT16_MAX))
            text += (f" Without normalization |x_l| passes 65504, the largest float16 value, at layer {first}: a "
                     "float16 run would hold inf by then. The course computes in float64, so the curve goes on.")
        readout.value = text

    return Panel(controls, [readout, fig], update, title="How big does the residual stream get?")


def float16_figure(sizes: dict[str, list[float]], first_inf: int | None = None) -> go.FigureWidget:
    """|x_l| per layer for each named float16 run (inf/nan become gaps), with a marker where the first inf appeared."""
    fig = live_figure("The same stack in float16", "layer l", "|x_l|  (float16, mean over tokens)", log_y=True,
                      height=380)
    fig.update_yaxes(exponentformat="power")
    for j, (name, values) in enumerate(sizes.items()):
        fig.add_scatter(y=log_axis_values(values), mode="lines", name=name,
                        line=dict(color=color(j), width=3, dash=dash(j)))
    fig.add_scatter(x=[0, max(len(v) for v in sizes.values()) - 1], y=[FLOAT16_MAX] * 2, mode="lines",
                    name="largest float16 (65504)", line=dict(color=color(3), dash="dot"))
    if first_inf is not None:
        fig.add_vline(x=first_inf, line=dict(color=color(1), dash="dash"),
                      annotation_text=f"first inf at layer {first_inf}")
    return fig


BACKWARD_DEPTHS = (10, 25, 50, 100, 200)
GRADIENT_SEEDS = tuple(range(6))  # the seeds the notebook's Post-LN claims are checked over


@register_panel()
def gradient_panel(residual_stack: ResidualStack) -> Panel:
    """Depth, gain, normalization, residual on/off and seed -> gradient norms per layer (stream and sublayer weights).

    The seed draws the sublayers and tokens (seed 0: the stack of the other panels), so a learner can see which
    conclusions survive another draw."""
    cache: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}

    def grads(depth, norm, gain, residual, seed):
        key = (depth, norm, gain, residual, seed)
        if key not in cache:
            out = backward_through_stack(residual_stack, depth, norm, gain, residual, seed=seed)
            cache[key] = (vector_norm(out["grad_x"]).mean(-1).numpy(), out["grad_w"].numpy())
        return cache[key]

    fig = live_figure("Gradient size, layer by layer (the loss sits after the last layer)", "layer l",
                      "gradient norm (log scale)", log_y=True, height=420)
    fig.update_yaxes(exponentformat="power")
    stream_trace = fig.add_scatter(mode="lines+markers", name="|∂loss/∂x_l|: the stream",
                                   line=dict(color=color(0), width=3), marker=dict(size=4)).data[-1]
    weights_trace = fig.add_scatter(mode="lines", name="|∂loss/∂W_l|: sublayer l's output weights",
                                    line=dict(color=color(1), width=2)).data[-1]
    readout = widgets.HTML()
    controls = {
        "depth": widgets.SelectionSlider(options=list(BACKWARD_DEPTHS), value=50, description="depth L"),
        "gain": _gain_control(1.0),
        "norm": widgets.ToggleButtons(options=list(STACK_NORMS), value="off", description="normalization"),
        "residual": widgets.Checkbox(value=True, description="residual connections"),
        "seed": choice(GRADIENT_SEEDS, value=0, description="seed"),
    }

    def update(depth, gain, norm, residual, seed):
        depth, gain = _check_depth(depth), positive_number(gain, "gain")
        _check_choice(norm, STACK_NORMS, "normalization")
        _check_choice(seed, GRADIENT_SEEDS, "seed")
        if not isinstance(residual, (bool, np.bool_)):
            raise ValueError(f"residual must be True or False, got {residual!r}")
        gx, gw = grads(depth, norm, gain, bool(residual), seed)
        with fig.batch_update():
            stream_trace.update(x=list(range(depth + 1)), y=log_axis_values(gx))
            weights_trace.update(x=list(range(depth)), y=log_axis_values(gw))
        ratio = gx[0] / gx[-1]
        if gx[0] == 0:
            verdict = "<b>vanished</b>: it underflowed to exactly 0, even in float64"
        elif not math.isfinite(ratio):
            verdict = "<b>overflowed</b> to inf, even in float64"
        elif ratio > 10:
            verdict = f"<b>{ratio:.3g}× larger</b> at the input than at the output: exploding toward the input"
        elif ratio < 0.1:
            verdict = f"<b>{ratio:.3g}×</b> the output's: vanishing toward the input"
        else:
            verdict = f"{ratio:.3g}× the output's: the same order of size"
        readout.value = f"Seed {seed}: the gradient reaching x_0 is {verdict}."
        if norm == "Post-LN":
            readout.value += " With Post-LN this number changes with the seed and the depth: try another seed."

    return Panel(controls, [readout, fig], update, title="The backward pass through the same stack")


HIST_DEPTH = 40
HIST_LAYERS = (0, 10, 20, 30, 40)
HIST_BINS = np.linspace(-60.0, 60.0, 481)  # log10 |value| in quarter decades; the plot zooms to where values are


def layer_histograms(residual_stack: ResidualStack, norm: str, gain: float, n_tokens: int = 32,
                     seed: int = 0) -> dict[str, np.ndarray]:
    """Histograms of log10|value| of the stream x_l and of dloss/dx_l at HIST_LAYERS, through HIST_DEPTH sublayers.

    Returns {"activations": (layers, bins), "gradients": (layers, bins), "edges": (bins + 1,),
    "activations_rms": (layers,), "gradients_rms": (layers,)}; counts are fractions of the layer's entries.
    """
    out = backward_through_stack(residual_stack, HIST_DEPTH, norm, gain, True, n_tokens=n_tokens, seed=seed)
    result = {"edges": HIST_BINS}
    for name, key in (("activations", "x"), ("gradients", "grad_x")):
        values = out[key][list(HIST_LAYERS)].flatten(1)
        logs = torch.log10(values.abs().clamp_min(1e-300)).numpy()
        result[name] = np.stack([np.histogram(row, HIST_BINS)[0] / row.size for row in logs])
        result[f"{name}_rms"] = (vector_norm(values) / math.sqrt(values.shape[1])).numpy()
    return result


@register_panel()
def histogram_panel(residual_stack: ResidualStack) -> Panel:
    """Normalization and gain -> per-layer histograms of activations and gradients (makemore style, log10 |value|)."""
    cache: dict[tuple, dict] = {}
    fig = live_subplots(1, 2, f"Where each layer's values sit ({HIST_DEPTH}-layer stack of FFN sublayers)",
                        height=400, margin=dict(t=70),
                        subplot_titles=("activations: the stream x_l", "gradients: ∂loss/∂x_l"))
    for col in (1, 2):
        fig.update_xaxes(title_text="log10 |value|  (each step right = 10× larger)", row=1, col=col)
        fig.update_yaxes(title_text="fraction of entries", row=1, col=col)
    centres = ((HIST_BINS[:-1] + HIST_BINS[1:]) / 2).tolist()
    lines = {}  # (histogram, j) -> the trace of layer HIST_LAYERS[j] in that histogram's panel
    for col, histogram in ((1, "activations"), (2, "gradients")):
        for j, layer in enumerate(HIST_LAYERS):
            lines[histogram, j] = fig.add_scatter(x=centres, mode="lines",
                                                  line=dict(color=color(j), dash=dash(j), shape="hvh"),
                                                  name=f"layer {layer}", legendgroup=str(layer), showlegend=col == 1,
                                                  row=1, col=col).data[-1]
    readout = widgets.HTML()
    controls = {
        "norm": widgets.ToggleButtons(options=list(STACK_NORMS), value="off", description="normalization"),
        "gain": _gain_control(1.0),
    }

    def update(norm, gain):
        _check_choice(norm, STACK_NORMS, "normalization")
        gain = positive_number(gain, "gain")
        key = (norm, gain)
        if key not in cache:
            cache[key] = layer_histograms(residual_stack, norm, gain)
        h = cache[key]
        with fig.batch_update():
            for (histogram, j), line in lines.items():
                line.y = h[histogram][j].tolist()
            for col, name in ((1, "activations"), (2, "gradients")):
                used = np.nonzero(h[name].sum(0))[0]
                fig.update_xaxes(range=[HIST_BINS[used[0]] - 0.5, HIST_BINS[used[-1] + 1] + 0.5], row=1, col=col)
        act = ", ".join(f"{s:.2g}" for s in h["activations_rms"])
        grad = ", ".join(f"{s:.2g}" for s in h["gradients_rms"])
        readout.value = (f"RMS of the activations at layers {', '.join(map(str, HIST_LAYERS))}: {act}<br>"
                         f"RMS of the gradients at the same layers: {grad}")

    return Panel(controls, [readout, fig], update,
                 title="Activation and gradient histograms per layer")


# ---- internal covariate shift -------------------------------------------------------------------------------------

SHIFT_NORMS = ("none", "BatchNorm")
SHIFT_LRS = (0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
QUANTILES = (0.15, 0.5, 0.85)


class ShiftNet(nn.Module):
    """A small MLP, 16 -> 64 -> 64 -> 64 -> 4, ReLU, with an optional BatchNorm1d before each ReLU (Ioffe & Szegedy)."""

    def __init__(self, norm: str = "none", width: int = 64, seed: int = 0, noise: float = 0.0):
        super().__init__()
        _check_choice(norm, SHIFT_NORMS, "norm")
        if not (math.isfinite(noise) and noise >= 0) or (noise > 0 and norm != "BatchNorm"):
            raise ValueError(f"noise must be a finite number >= 0, and only with BatchNorm, got {noise!r} with {norm!r}")
        # Santurkar et al.'s test (arXiv 1805.11604): after each BatchNorm, a per-unit shift and scale drawn afresh at
        # every forward pass, so what the next layer receives keeps moving however well BatchNorm holds its own output
        self.noise = float(noise)
        self._noise_gen = torch.Generator().manual_seed(seed + 7)
        with torch.random.fork_rng():  # PyTorch's default init, seeded, without touching the caller's RNG state
            torch.manual_seed(seed)
            self.linears = nn.ModuleList([nn.Linear(16, width), nn.Linear(width, width), nn.Linear(width, width)])
            self.head = nn.Linear(width, 4)
        self.norms = nn.ModuleList([nn.BatchNorm1d(width) if norm == "BatchNorm" else nn.Identity()
                                    for _ in self.linears])

    def last_hidden(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """x: (batch, 16) -> the last hidden layer's Linear output z (before any norm) and what its ReLU receives
        (BatchNorm's output, or z itself without norm), each (batch, width)."""
        for i, (linear, norm) in enumerate(zip(self.linears, self.norms)):
            z = linear(x)
            a = norm(z)
            if self.noise > 0 and self.training:
                n = self.noise
                shift = (torch.rand(a.shape[-1], generator=self._noise_gen) * 2 - 1) * n   # U(-n, n) per unit
                scale = 1 + torch.rand(a.shape[-1], generator=self._noise_gen) * n         # U(1, 1 + n) per unit
                a = a * scale + shift
            if i == len(self.linears) - 1:
                return z, a
            x = torch.relu(a)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(torch.relu(self.last_hidden(x)[1]))


@functools.lru_cache(maxsize=1)
def _teacher() -> nn.Sequential:
    """A fixed random network 16 -> 32 -> 4 (tanh) whose argmax defines the classes (the task: the same at any seed)."""
    tg = torch.Generator().manual_seed(1234)
    teacher = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))
    with torch.no_grad():
        for p in teacher.parameters():
            p.copy_(torch.randn(p.shape, generator=tg) * (0.5 if p.dim() == 1 else 1 / math.sqrt(p.shape[1])))
    return teacher.requires_grad_(False)


def _teacher_data(n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Inputs N(0, I_16) and the class (of 4) the fixed teacher network gives them."""
    x = torch.randn(n, 16, generator=generator)
    with torch.no_grad():
        return x, _teacher()(x).argmax(-1)


def probe_batch() -> Tensor:
    """The fixed 256 inputs (16 features) the covariate-shift runs measure the watched units on."""
    return _teacher_data(256, torch.Generator().manual_seed(999))[0]


def _drift(quantiles: np.ndarray) -> float:
    """Mean over units of |log(spread at the end / spread at the start)|, spread = 85th - 15th percentile."""
    spread = quantiles[:, 2] - quantiles[:, 0]
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.abs(np.log(spread[-1] / spread[0])).mean())


def train_shift_run(norm: str, steps: int = 150, lr: float = 0.1, seed: int = 0, units: int = 8, every: int = 5,
                    callback=None, should_stop=None, width: int = 64, batch: int = 64, noise: float = 0.0) -> dict:
    """Train ShiftNet (hidden `width`) with SGD (momentum 0.9, written out) on batches of `batch`; every `every` steps
    record the watched quantiles.

    Both are measured on a fixed probe batch of 256 inputs, in training mode (what the layers see in training), for
    the first `units` units of the last hidden layer: quantiles, of the unit's Linear output z before any norm (the
    same quantity in both networks, pinned by nothing), and output_quantiles, of what its ReLU receives (BatchNorm's
    output, whose mean and spread over the batch are beta and gamma by construction). A run whose loss turns
    non-finite stops there (diverged_at). Returns norm, units, steps, loss (per step), both quantile arrays
    (records, 3, units), their drifts (spread_drift, output_drift: mean over units of |log(spread_end / spread_0)|),
    final_loss (mean of the last 20 losses; nan after a divergence), diverged_at (step or None), lr and the trained net.
    noise > 0 (BatchNorm only) adds Santurkar et al.'s moving noise after each BatchNorm (ShiftNet).
    """
    _check_choice(norm, SHIFT_NORMS, "norm")
    if not (isinstance(steps, int) and steps >= 1) or not (math.isfinite(lr) and lr > 0):
        raise ValueError(f"need steps >= 1 and a finite lr > 0, got steps={steps!r}, lr={lr!r}")
    net = ShiftNet(norm, width=width, seed=seed, noise=noise)
    data = torch.Generator().manual_seed(seed + 1)
    probe = probe_batch()
    params = list(net.parameters())
    velocity = [torch.zeros_like(p) for p in params]
    q = torch.tensor(QUANTILES)
    record = {"norm": norm, "noise": noise, "units": units, "lr": lr, "steps": [], "loss": [], "quantiles": [], "output_quantiles": [],
              "stopped": False, "diverged_at": None}

    def measure(step):
        with torch.no_grad():
            z, a = net.last_hidden(probe)
        record["steps"].append(step)
        record["quantiles"].append(torch.quantile(z[:, :units], q, dim=0).numpy())
        record["output_quantiles"].append(torch.quantile(a[:, :units], q, dim=0).numpy())

    measure(0)
    for step in range(1, steps + 1):
        if should_stop is not None and should_stop():
            record["stopped"] = True
            break
        x, y = _teacher_data(batch, data)
        loss = F.cross_entropy(net(x), y)
        record["loss"].append(loss.item())
        if not math.isfinite(record["loss"][-1]):
            record["diverged_at"] = step
            measure(step)
            break
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():  # SGD with momentum, as torch.optim.SGD does it (no import of the optim machinery)
            for p, v, g in zip(params, velocity, grads):
                v.mul_(0.9).add_(g)
                p.sub_(lr * v)
        if step % every == 0 or step == steps:
            measure(step)
            if callback is not None:
                callback(step, record)
    record["quantiles"] = np.stack(record["quantiles"])
    record["output_quantiles"] = np.stack(record["output_quantiles"])
    record["spread_drift"] = _drift(record["quantiles"])
    record["output_drift"] = _drift(record["output_quantiles"])
    diverged = record["diverged_at"] is not None
    record["final_loss"] = float(np.mean(record["loss"][-20:])) if record["loss"] and not diverged else float("nan")
    record["net"] = net
    return record


def learning_rate_race(lr: float, seed: int = 0, steps: int = 150, width: int = 64,
                       batch: int = 64) -> dict[str, dict]:
    """Both networks trained at one learning rate and seed: train_shift_run's record, by norm."""
    return {norm: train_shift_run(norm, steps, lr, seed=seed, width=width, batch=batch) for norm in SHIFT_NORMS}


# What notebook 01 §6 claims about these runs, written once: its claim cells and the claim experiments below both
# judge a run with these functions.
DRIFT_FACTOR = 2.0        # "the spread changed by more than a factor 2": a drift above ln 2
SAME_LOSS_WITHIN = 0.06   # at lr 0.1 the two networks end this close (C08)
NEARBY_LR_WITHIN = 0.15   # ... and at lr 0.02 and 0.2 this close
BN_TRAINS_BELOW = 0.8     # at large learning rates BatchNorm's final loss stays below this (C57)
PLAIN_FAILS_BY = 0.15     # ... while the plain network ends at least this much higher, or diverges


def drifted(record: dict, watch: str = "z") -> bool:
    """Did the watched quantity's spread change by more than DRIFT_FACTOR: the unit's value z before any norm, or
    ("output") what its ReLU receives, BatchNorm's output in the BatchNorm network?"""
    _check_choice(watch, ("z", "output"), "watch")
    return record["spread_drift" if watch == "z" else "output_drift"] > math.log(DRIFT_FACTOR)


def loss_gap(race: dict[str, dict]) -> float:
    """Final loss of the plain network minus the BatchNorm network's (nan when the plain run diverged)."""
    return race["none"]["final_loss"] - race["BatchNorm"]["final_loss"]


def same_loss(race: dict[str, dict], within: float = SAME_LOSS_WITHIN) -> bool:
    """C08: do both networks end within `within` of each other (False when the plain run diverged)?"""
    return abs(loss_gap(race)) < within


def large_lr_checks(race: dict[str, dict]) -> dict[str, bool]:
    """C57 on one race: "BatchNorm trains" (final loss below BN_TRAINS_BELOW) and "plain fails" (it diverges, or ends
    PLAIN_FAILS_BY or more above BatchNorm)."""
    plain = race["none"]
    return {"BatchNorm trains": race["BatchNorm"]["final_loss"] < BN_TRAINS_BELOW,
            "plain fails": plain["diverged_at"] is not None or loss_gap(race) > PLAIN_FAILS_BY}


def run_line(records: dict[str, dict]) -> str:
    """One line on a run of both networks: its learning rate and steps, each z drift and each final loss."""
    plain, normed = records["none"], records["BatchNorm"]
    stopped = ", stopped early" if plain["stopped"] or normed["stopped"] else ""
    return (f"lr {plain['lr']}, {len(plain['loss'])} steps{stopped}: drift of z, no norm {plain['spread_drift']:.2f}, "
            f"before BatchNorm {normed['spread_drift']:.2f}; final loss no norm {plain['final_loss']:.3f}, "
            f"BatchNorm {normed['final_loss']:.3f}")


def _finite(values) -> list:
    """Plotly draws None as a gap; nan and inf would break the figure's JSON."""
    return [float(v) if math.isfinite(v) else None for v in np.asarray(values, dtype=float).tolist()]


# The live figure redraws at most this often while the networks train. These networks train in seconds, and a
# browser needs tens of milliseconds to redraw four plots: a redraw per few steps would queue up and play back
# after training had ended. Paced by the clock, every frame shows the run as it is at that moment.
REDRAW_SECONDS = 0.25


class CovariateShiftDemo(TrainingDemo):
    """Two small networks trained side by side (no norm, BatchNorm), one hidden unit's distribution plotted live.

    Display it; press Train both (a background run with progress and Stop) or call run(background=False) from code.
    A run's result is each network's train_shift_run record, by norm.
    """

    def __init__(self, steps: int = 150, lr: float = 0.1, unit: int = 0):
        self.unit = unit
        # Four plots in a row: each one's title says what its y-axis shows (the markdown above the panel says more),
        # so no y-axis title has to squeeze between two plots onto the tick labels of the next.
        self.fig = live_subplots(
            1, 4, "One hidden unit's value during training: 15th, 50th, 85th percentile on a fixed probe batch",
            height=400, horizontal_spacing=0.06,
            subplot_titles=("loss (log scale)", "no norm: z", "BatchNorm net: z", "BatchNorm's output"))
        self.fig.update_xaxes(title_text="training step")
        self.fig.update_yaxes(type="log", row=1, col=1)
        self._loss, self._quantiles = {}, {}
        for j, norm in enumerate(SHIFT_NORMS):
            self._loss[norm] = self.fig.add_scatter(mode="lines", name=f"loss, {norm}",
                                                    line=dict(color=color(j), dash=dash(j)), row=1, col=1).data[-1]
        for col, key in ((2, ("none", "quantiles")), (3, ("BatchNorm", "quantiles")),
                         (4, ("BatchNorm", "output_quantiles"))):
            # colour means the network everywhere in the panel (as in the loss plot); dash and width the percentile
            net = SHIFT_NORMS.index(key[0])
            self._quantiles[key] = [
                self.fig.add_scatter(mode="lines", name=f"{int(qv * 100)}th percentile ({('dotted', 'solid', 'dashed')[k]})",
                                     line=dict(color=color(net), width=3 if k == 1 else 1.5,
                                               dash=("dot", "solid", "dash")[k]),
                                     legendgroup=str(k), showlegend=col == 2, row=1, col=col).data[-1]
                for k, qv in enumerate(QUANTILES)]
        controls = {
            "lr": widgets.SelectionSlider(options=list(SHIFT_LRS), value=lr, description="learning rate"),
            "steps": widgets.IntSlider(value=steps, min=20, max=600, step=10, description="steps"),
        }
        super().__init__(controls, [self.fig], button="Train both",
                         title="Internal covariate shift: train a plain and a BatchNorm network side by side")

    def settings(self, lr, steps) -> dict:
        if lr not in SHIFT_LRS:
            raise ValueError(f"learning rate must be one of {SHIFT_LRS}, got {lr!r}")
        if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or not 1 <= steps <= 600:
            raise ValueError(f"steps must be a whole number from 1 to 600, got {steps!r}")
        return {"lr": lr, "steps": int(steps)}

    def _draw(self, record: dict) -> None:
        with self.fig.batch_update():
            self._loss[record["norm"]].update(x=list(range(1, len(record["loss"]) + 1)), y=_finite(record["loss"]))
            for key in ("quantiles", "output_quantiles"):
                traces = self._quantiles.get((record["norm"], key))
                if traces is None:
                    continue
                quantiles = np.asarray(record[key])
                for k, trace in enumerate(traces):
                    trace.update(x=record["steps"], y=_finite(quantiles[:, k, self.unit]))

    def train(self, settings: dict, should_stop, progress) -> dict[str, dict]:
        lr, steps = settings["lr"], settings["steps"]
        results = {}
        drawn = time.perf_counter()
        for j, norm in enumerate(SHIFT_NORMS):
            def callback(step, record, j=j):
                nonlocal drawn
                if time.perf_counter() - drawn >= REDRAW_SECONDS:
                    self._draw(record)
                    drawn = time.perf_counter()
                progress(j * steps + step, len(SHIFT_NORMS) * steps, f"{record['norm']}: step {step}")
            results[norm] = train_shift_run(norm, steps, lr, callback=callback, should_stop=should_stop)
            self._draw(results[norm])
            drawn = time.perf_counter()
        return results

    def summarize(self, results: dict[str, dict]) -> str:
        units = next(iter(results.values()))["units"]

        def loss(r):
            return f"diverged (loss not finite) at step {r['diverged_at']}" if r["diverged_at"] else \
                f"{r['final_loss']:.3f}"

        return message_html(
            f"Spread drift |log(spread now / spread at step 0)|, mean over {units} units, of the unit's value z "
            "before any norm: " + ", ".join(f"{n} {r['spread_drift']:.2f}" for n, r in results.items()) +
            f"; of BatchNorm's output (held by construction): {results['BatchNorm']['output_drift']:.2f}. "
            "Final loss (mean of the last 20 steps): " + ", ".join(f"{n} {loss(r)}" for n, r in results.items()) +
            ".", "info")


@register_panel()
def covariate_shift_demo(steps: int = 150, lr: float = 0.1) -> CovariateShiftDemo:
    """The covariate-shift experiment of notebook 01, ready to display and run."""
    return CovariateShiftDemo(steps, lr)


# ---- what notebook 01 claims about the stack, written once: its claim cells and the experiments below call these --

EXTREME_DECADES = 20          # "extreme": a gradient ratio more than 20 orders of magnitude from 1 (C04)
STABLE_BAND = (0.25, 4.0)     # a small branch gain keeps the gradient ratio in here (C54)
POST_LN_BAND = (1e-4, 10.0)   # Post-LN keeps the gradient ratio in here at every depth (C05)
FACTOR_STD_ABOVE = 0.05       # Post-LN's per-layer log10 factor varies more than this ... (C56)
FACTOR_MEAN_WITHIN = 0.02     # ... around a mean this close to 0
PRE_LN_STEADIER = 2.0         # ... and Pre-LN's vary less than half as much (notebook 01's C56 cell)


def norms_add(sizes, size: float) -> bool:
    """C01: |x_L| after L blocks each adding a vector of norm `size` is exactly L * size (to 1e-12): norms add."""
    sizes = [float(v) for v in sizes]
    return math.isclose(sizes[-1], (len(sizes) - 1) * size, rel_tol=1e-12)


def growth_checks(runs: dict[tuple[str, str, str], np.ndarray], gain: float = 1.0) -> dict[str, bool]:
    """C02 on growth_runs' curves, each check by name: the law each (sublayer, contributions, norm) follows."""
    d, L, g = D_MODEL, len(next(iter(runs.values()))) - 1, gain
    x0 = runs["fixed size", "aligned", "off"][0]
    ffn_off = runs["amplifies its input", "independent", "off"]
    ffn_pre = runs["amplifies its input", "independent", "Pre-LN"]
    per_layer = (ffn_off[-1] / ffn_off[0]) ** (1 / L)
    return {
        "fixed size, aligned: like L (within 5%)": 0.95 < runs["fixed size", "aligned", "off"][-1] / (L * g) < 1.05,
        "fixed size, independent: like sqrt(L) (0.6 to 1.6 times the law)":
            0.6 < runs["fixed size", "independent", "off"][-1] / math.sqrt(x0 ** 2 + L * g ** 2) < 1.6,
        "FFN, no norm: a factor 1.3 to 1.45 per layer": 1.3 < per_layer < 1.45,
        "FFN, no norm: more than 1e20 in all": ffn_off[-1] / ffn_off[0] > 1e20,
        "FFN, Pre-LN: like sqrt(L) again (0.6 to 1.6 times the law)":
            0.6 < ffn_pre[-1] / math.sqrt(x0 ** 2 + L * g ** 2 * d) < 1.6,
        "FFN, Pre-LN: the stream still grows more than 10x": ffn_pre[-1] > 10 * x0,
        "Post-LN: |x_l| = sqrt(d) after every block (to 1e-4)":
            all(np.allclose(v[1:], math.sqrt(d), rtol=1e-4, atol=0) for k, v in runs.items() if k[2] == "Post-LN"),
    }


def float16_checks(run: dict) -> dict[str, bool]:
    """C03 on float16_overflow's result, each check by name."""
    first_inf, first_big = run["first_inf"], run["first_big"]
    return {"float16 without norm holds an inf": first_inf is not None,
            "... within 2 layers of where float64 passes 65504":
                first_inf is not None and first_big is not None and abs(first_inf - first_big) <= 2,
            "Pre-LN: all layers finite in float16": bool(torch.isfinite(run["x16"]["Pre-LN"]).all()),
            "Post-LN: all layers finite in float16": bool(torch.isfinite(run["x16"]["Post-LN"]).all())}


def _log10_ratio(ratio: float) -> float:
    return math.log10(ratio) if 0 < ratio < math.inf else (-math.inf if ratio == 0 else math.inf)


def extreme(ratio: float) -> bool:
    """C04: is a gradient ratio more than EXTREME_DECADES orders of magnitude from 1 (0 and inf included)?"""
    return abs(_log10_ratio(ratio)) > EXTREME_DECADES


def stable(ratio: float) -> bool:
    """C54: is a gradient ratio inside STABLE_BAND (the gradient about the same size at the input as at the output)?"""
    return STABLE_BAND[0] < ratio < STABLE_BAND[1]


def bounded(ratio: float) -> bool:
    """C05: is a gradient ratio inside POST_LN_BAND?"""
    return POST_LN_BAND[0] < ratio < POST_LN_BAND[1]


def both_sides(ratios) -> bool:
    """C55: do the ratios fall on both sides of 1 (some above, some not)?"""
    above = sum(r > 1 for r in ratios)
    return 0 < above < len(ratios)


def random_factor(factors: np.ndarray) -> bool:
    """C56: do the per-layer log10 gradient factors vary by more than FACTOR_STD_ABOVE around a mean within
    FACTOR_MEAN_WITHIN of 0 (a random factor near 1 per layer)?"""
    return float(factors.std()) > FACTOR_STD_ABOVE and abs(float(factors.mean())) < FACTOR_MEAN_WITHIN


def histogram_checks(off: dict, pre: dict, post: dict) -> dict[str, bool]:
    """C06 on layer_histograms of the three placements, each check by name."""
    act, grad = off["activations_rms"], off["gradients_rms"]
    return {"no norm: activations grow by more than 1e4": act[-1] / act[0] > 1e4,
            "no norm: gradients shrink upward by more than 1e4": grad[0] / grad[-1] > 1e4,
            "Post-LN: the stream's RMS is 1 at every layer (to 1e-3)":
                abs(post["activations_rms"][1:] - 1).max() < 1e-3,
            "Pre-LN: the stream grows less than 10x": pre["activations_rms"][-1] / pre["activations_rms"][0] < 10,
            "either norm: gradient RMS within 100x across layers":
                all(h["gradients_rms"].max() / h["gradients_rms"].min() < 100 for h in (pre, post))}


def _passed(checks: dict[str, bool]) -> str:
    return "checks " + "".join("1" if c else "0" for c in checks.values())


# ---- claim experiments: each asserted claim of notebook 01 as a function of a seed (course_utils.evidence) ---------
# Each runs the computation of the notebook's claim cell (the functions above) and judges it with the same function
# the cell asserts; settings with expect=False are the controls and the limits the notebook states.

@claim_experiment(
    "C01", statement="Residual blocks each adding a fixed vector (norm 2, or 1) in one shared direction, from x_0 = 0, "
    "give |x_L| = L times that norm (to 1e-12); independent directions do not", figure="|x_L|", kind="exact",
    settings=[Setting("aligned, 10 blocks of norm 2 (the chapter's quiz)", {"contributions": "aligned"}),
              Setting("aligned, 16 blocks of norm 1", {"contributions": "aligned", "n_blocks": 16, "size": 1.0}),
              Setting("independent directions (control: about 2 sqrt(10))", {"contributions": "independent"},
                      expect=False)])
def c01_aligned_sum(seed, residual_stack, *, contributions="aligned", n_blocks=10, size=2.0):
    sizes = constant_sum(residual_stack, contributions, n_blocks, size, seed=seed)
    return Outcome(norms_add(sizes, size), float(sizes[-1]), f"|x_{n_blocks}| = {float(sizes[-1]):.6g}")


@claim_experiment(
    "C02", statement="Over 200 blocks at gain 1: fixed-size aligned contributions grow like L, independent ones like "
    "sqrt(L), FFN sublayers by a constant factor 1.3-1.45 per layer (more than 1e20 in all); Pre-LN brings the FFN "
    "stack back to sqrt(L) growth (still more than 10x), Post-LN holds |x_l| = sqrt(d); at depth 150 too",
    figure="FFN stack without norm: growth factor per layer", kind="exact",
    settings=[Setting("gain 1, depth 200"), Setting("gain 1, depth 150", {"depth": 150})])
def c02_growth_laws(seed, residual_stack, *, gain=1.0, depth=200):
    runs = growth_runs(residual_stack, gain, depth, seed)
    ffn_off = runs["amplifies its input", "independent", "off"]
    checks = growth_checks(runs, gain)
    return Outcome(all(checks.values()), float((ffn_off[-1] / ffn_off[0]) ** (1 / depth)), _passed(checks))


@claim_experiment(
    "C03", statement="200 FFN blocks without norm in float16 hit inf within 2 layers of where the float64 run's "
    "largest entry passes 65504; with Pre-LN or Post-LN all 201 layers stay finite",
    figure="first layer holding inf (float16, no norm)", kind="exact", settings=[Setting("gain 1, depth 200")])
def c03_float16(seed, residual_stack):
    run = float16_overflow(residual_stack, seed)
    checks = float16_checks(run)
    return Outcome(all(checks.values()), float("nan") if run["first_inf"] is None else run["first_inf"],
                   f"first inf {run['first_inf']}, float64 passes 65504 at {run['first_big']}, {_passed(checks)}")


@claim_experiment(
    "C04", statement="Without normalization, 200 blocks make the input/output gradient ratio extreme (more than 20 "
    "orders of magnitude from 1): without residuals it vanishes at gain 0.5 (exactly 0 at 0.01) and explodes at "
    "gain 2; with residuals it explodes at gain 1 (at depth 100 by about 14 orders)", figure="log10(|dloss/dx_0| / |dloss/dx_L|), depth 200",
    kind="exact",
    settings=[Setting("no residual, gain 0.01 (underflows to 0)", {"residual": False, "gain": 0.01}),
              Setting("no residual, gain 0.5 (vanishes)", {"residual": False, "gain": 0.5}),
              Setting("no residual, gain 2 (explodes)", {"residual": False, "gain": 2.0}),
              Setting("residual, no norm, gain 1 (explodes)", {"gain": 1.0}),
              Setting("residual, no norm, gain 0.05 (control, C54)", {"gain": 0.05}, expect=False),
              Setting("residual, no norm, gain 1, depth 100 (limit: about 14 orders, the 20 needs depth 200)",
                      {"gain": 1.0, "depth": 100}, expect=False),
              Setting("residual, Pre-LN, gain 1 (control)", {"norm": "Pre-LN"}, expect=False),
              Setting("residual, Post-LN, gain 1 (control)", {"norm": "Post-LN"}, expect=False)])
def c04_gradients_without_norm(seed, residual_stack, *, norm="off", gain=1.0, residual=True, depth=200):
    ratio = gradient_ratios(residual_stack, depth, norm, gain, residual, seed)["ratio"]
    return Outcome(extreme(ratio), _log10_ratio(ratio), f"ratio {ratio:.3g}")


@claim_experiment(
    "C54", statement="With residuals and no normalization, a small branch gain keeps the gradient stable: at depth "
    "200 the input/output gradient ratio stays between 1/4 and 4 for gains 0.01 to 0.1; from gain 0.2 it grows "
    "(at gain 1 past 1e20)", figure="|dloss/dx_0| / |dloss/dx_L|, depth 200, no norm", kind="exact",
    settings=[Setting("gain 0.01", {"gain": 0.01}), Setting("gain 0.05", {"gain": 0.05}),
              Setting("gain 0.083 (the doubling gain of the §7 exercise)", {"gain": 0.0834}),
              Setting("gain 0.1", {"gain": 0.1}),
              Setting("gain 0.2 (limit: grows)", {"gain": 0.2}, expect=False),
              Setting("gain 1 (control: explodes)", {"gain": 1.0}, expect=False)])
def c54_small_gain_is_stable(seed, residual_stack, *, gain=0.05, depth=200):
    run = gradient_ratios(residual_stack, depth, "off", gain, True, seed)
    return Outcome(stable(run["ratio"]), run["ratio"], f"forward growth |x_L|/|x_0| {run['growth']:.3g}")


@claim_experiment(
    "C05", statement="With Post-LN the input/output gradient ratio stays between 1e-4 and 10 at every depth from 10 "
    "to 200; without normalization (the control) it passes 1e6 by depth 50",
    figure="|dloss/dx_0| / |dloss/dx_L|, gain 1", kind="exact",
    settings=[Setting(f"Post-LN, depth {L}", {"depth": L}) for L in BACKWARD_DEPTHS]
    + [Setting("no norm, depth 50 (control)", {"depth": 50, "norm": "off"}, expect=False)],
    seeds=range(20))
def c05_post_ln_bounded(seed, residual_stack, *, depth=200, norm="Post-LN", gain=1.0):
    ratio = gradient_ratios(residual_stack, depth, norm, gain, True, seed)["ratio"]
    return Outcome(bounded(ratio), ratio, "above 1 (larger at the input)" if ratio > 1 else "below 1")


def _direction_counts(residual_stack: ResidualStack, norm: str, depth: int, seeds) -> list[float]:
    return [gradient_ratios(residual_stack, depth, norm, 1.0, True, s)["ratio"] for s in seeds]


@claim_experiment(
    "C55", statement="Post-LN's gradient direction is not fixed: over six consecutive seeds at depth 50 the input/"
    "output gradient ratio falls on both sides of 1; with Pre-LN it is above 1 at all six",
    figure="how many of the six seeds (seed .. seed + 5) have a ratio above 1", kind="exact",
    settings=[Setting("Post-LN, depth 50", {"norm": "Post-LN"}),
              Setting("Pre-LN, depth 50 (control: always above 1)", {"norm": "Pre-LN"}, expect=False)])
def c55_direction_depends_on_seed(seed, residual_stack, *, norm="Post-LN", depth=50):
    ratios = _direction_counts(residual_stack, norm, depth, range(seed, seed + 6))
    return Outcome(both_sides(ratios), sum(r > 1 for r in ratios),
                   f"seeds {seed}-{seed + 5}: " + ", ".join(f"{r:.2g}" for r in ratios))


@claim_experiment(
    "C56", statement="At depth 200 (and 100), each Post-LN layer multiplies the gradient by a random factor: its log10 "
    "varies from layer to layer with a standard deviation above 0.05 around a mean within 0.02 of 0; Pre-LN's factors "
    "vary far less (the control)", figure="standard deviation of the per-layer log10 factor", kind="exact",
    settings=[Setting("Post-LN", {"norm": "Post-LN"}),
              Setting("Post-LN, depth 100", {"norm": "Post-LN", "depth": 100}),
              Setting("Pre-LN (control)", {"norm": "Pre-LN"}, expect=False)])
def c56_random_factor_per_layer(seed, residual_stack, *, norm="Post-LN", depth=200):
    factors = layer_factors(residual_stack, depth, norm, 1.0, seed)
    return Outcome(random_factor(factors), float(factors.std()), f"mean {float(factors.mean()):+.4f}")


@claim_experiment(
    "C06", statement="40 blocks, 32 tokens: without norm activations grow and gradients shrink upward by more than "
    "1e4; with Post-LN the stream's RMS is 1 at every layer; with Pre-LN it grows less than 10x; with either norm the "
    "gradient RMS varies across layers by less than 100x", figure="Post-LN: largest / smallest gradient RMS over "
    "layers 0, 10, ..., 40", kind="exact",
    settings=[Setting("gain 1, depth 40"),
              Setting("gain 0.5 (limit: without norm the stream grows only about 100x)", {"gain": 0.5},
                      expect=False)])
def c06_histograms(seed, residual_stack, *, gain=1.0):
    off, pre, post = (layer_histograms(residual_stack, n, gain, seed=seed) for n in STACK_NORMS)
    checks = histogram_checks(off, pre, post)
    spread = float(post["gradients_rms"].max() / post["gradients_rms"].min())
    return Outcome(all(checks.values()), spread, _passed(checks))


@claim_experiment(
    "C07", statement="In 150 SGD steps at lr 0.1 the spread of a hidden unit's value (before any norm) changes by "
    "more than a factor 2 (drift above ln 2), without normalization and, before its BatchNorm, in the BatchNorm "
    "network, at hidden widths 32 to 128 and batches of 32 to 128; BatchNorm's own output does not (it is held by "
    "construction)", figure="mean over 8 units of |log(spread_end / spread_0)|", kind="training",
    settings=[Setting("no norm: the unit's value", {"norm": "none"}),
              Setting("BatchNorm net: the value before BatchNorm", {"norm": "BatchNorm"}),
              Setting("no norm, width 32", {"norm": "none", "width": 32}),
              Setting("BatchNorm net, width 32", {"norm": "BatchNorm", "width": 32}),
              Setting("no norm, width 128", {"norm": "none", "width": 128}),
              Setting("BatchNorm net, width 128", {"norm": "BatchNorm", "width": 128}),
              Setting("no norm, batch 32", {"norm": "none", "batch": 32}),
              Setting("BatchNorm net, batch 128", {"norm": "BatchNorm", "batch": 128}),
              Setting("BatchNorm net: BatchNorm's output (by construction)", {"norm": "BatchNorm",
                                                                             "watch": "output"}, expect=False)])
def c07_drift(seed, *, norm="none", watch="z", lr=0.1, steps=150, width=64, batch=64):
    record = train_shift_run(norm, steps, lr, seed=seed, width=width, batch=batch)
    drift = record["spread_drift"] if watch == "z" else record["output_drift"]
    return Outcome(drifted(record, watch), drift, f"final loss {record['final_loss']:.3f}")


@claim_experiment(
    "C08", statement="After 150 steps at lr 0.1 the BatchNorm network, whose next layer's input is held, ends with the "
    "same training loss as the plain network (within 0.06, at hidden width 32 too; at width 128 within 0.15, the plain "
    "network lower): holding the distribution bought no lower loss; at lr 0.02 and 0.2 the two stay within 0.15 "
    "(BatchNorm lower at most seeds); at lr 1 they do not (C57)",
    figure="final loss, no norm minus BatchNorm (mean of the last 20 steps; nan: the plain run diverged)",
    kind="training",
    settings=[Setting("lr 0.1, within 0.06", {"lr": 0.1, "within": SAME_LOSS_WITHIN}),
              Setting("lr 0.1, width 32, within 0.06", {"lr": 0.1, "within": SAME_LOSS_WITHIN, "width": 32}),
              Setting("lr 0.1, width 128, within 0.15 (the plain network ends up to 0.08 lower)",
                      {"lr": 0.1, "within": NEARBY_LR_WITHIN, "width": 128}),
              Setting("lr 0.02, within 0.15", {"lr": 0.02, "within": NEARBY_LR_WITHIN}),
              Setting("lr 0.2, within 0.15", {"lr": 0.2, "within": NEARBY_LR_WITHIN}),
              Setting("lr 1 (limit: the plain network fails, C57)", {"lr": 1.0, "within": NEARBY_LR_WITHIN},
                      expect=False)])
def c08_same_loss(seed, *, lr=0.1, within=SAME_LOSS_WITHIN, steps=150, width=64):
    race = learning_rate_race(lr, seed, steps, width)
    gap = loss_gap(race)
    return Outcome(same_loss(race, within), gap,
                   f"no norm {race['none']['final_loss']:.3f}, BatchNorm {race['BatchNorm']['final_loss']:.3f}")


@claim_experiment(
    "C57", statement="At learning rates 0.5 and 1 the BatchNorm network trains (final loss below 0.8) while the plain "
    "network ends at least 0.15 higher or diverges to nan, at hidden widths 32 and 128 too; at 0.1 and 0.2 both train "
    "(the control)", figure="final loss, no norm minus BatchNorm (nan: the plain network diverged)", kind="training",
    settings=[Setting("lr 0.5", {"lr": 0.5}), Setting("lr 1", {"lr": 1.0}),
              Setting("lr 0.5, width 32", {"lr": 0.5, "width": 32}),
              Setting("lr 0.5, width 128", {"lr": 0.5, "width": 128}),
              Setting("lr 0.1 (control)", {"lr": 0.1}, expect=False),
              Setting("lr 0.2 (control)", {"lr": 0.2}, expect=False)])
def c57_batchnorm_allows_large_lr(seed, *, lr=1.0, steps=150, width=64):
    race = learning_rate_race(lr, seed, steps, width)
    plain, normed = race["none"], race["BatchNorm"]
    gap = loss_gap(race)
    ended = f"diverged at step {plain['diverged_at']}" if plain["diverged_at"] else f"{plain['final_loss']:.3f}"
    return Outcome(all(large_lr_checks(race).values()), gap,
                   f"no norm {ended}, BatchNorm {normed['final_loss']:.3f}")

# ---- speed to a loss, Santurkar et al.'s noise test, and the loss surface's sharpness (notebook 01 §6) -------------

SPEED_LOSS = 0.8          # "reaches loss 0.8": the mean of the last SPEED_WINDOW training losses first falls below it
SPEED_WINDOW = 10         # a mean over 10 steps, so one easy batch does not count as arriving
FASTER_BY = 2.0           # C110: BatchNorm needs fewer than 1/FASTER_BY of the plain network's steps
NOISE = 0.5               # C111: after each BatchNorm a shift in U(-0.5, 0.5) and a scale in U(1, 1.5), per unit, per step
NOISE_SLOWER_AT_MOST = 2.0  # ... and the noisy network needs at most this many times BatchNorm's steps
SHARPER_BY = 1.5          # C114: one network's largest Hessian eigenvalue is more than 1.5 times the other's
HESSIAN_ITERS = 20


def steps_to_loss(record: dict, threshold: float = SPEED_LOSS, window: int = SPEED_WINDOW) -> float:
    """The first step at which the mean of the last `window` training losses is below `threshold` (inf: never)."""
    loss = np.asarray(record["loss"], dtype=float)
    if len(loss) < window:
        return math.inf
    below = np.nonzero(np.convolve(loss, np.ones(window) / window, "valid") < threshold)[0]
    return float(below[0] + window) if len(below) else math.inf


def trains_faster(race: dict[str, dict], threshold: float = SPEED_LOSS) -> bool:
    """C110: does the BatchNorm network reach `threshold` in fewer than 1/FASTER_BY of the plain network's steps?"""
    fast, slow = steps_to_loss(race["BatchNorm"], threshold), steps_to_loss(race["none"], threshold)
    return math.isfinite(fast) and fast * FASTER_BY < slow


def noise_race(lr: float = 0.1, seed: int = 0, noise: float = NOISE, steps: int = 150, width: int = 64,
               race: dict | None = None) -> dict[str, dict]:
    """learning_rate_race plus a BatchNorm network with Santurkar et al.'s moving noise after each BatchNorm, by
    "none", "BatchNorm" and "noisy"; `race` reuses runs already made at the same setting."""
    race = dict(race) if race is not None else learning_rate_race(lr, seed, steps, width)
    race["noisy"] = train_shift_run("BatchNorm", steps, lr, seed=seed, width=width, noise=noise)
    return race


def noise_checks(race: dict[str, dict]) -> dict[str, bool]:
    """C111 on a noise_race: the noisy network still trains (final loss below BN_TRAINS_BELOW) and reaches SPEED_LOSS
    in at most NOISE_SLOWER_AT_MOST times BatchNorm's steps."""
    noisy, clean = steps_to_loss(race["noisy"]), steps_to_loss(race["BatchNorm"])
    return {"noisy trains": race["noisy"]["final_loss"] < BN_TRAINS_BELOW,
            "noisy about as fast as BatchNorm": math.isfinite(noisy) and noisy <= NOISE_SLOWER_AT_MOST * clean}


def hessian_top(net: nn.Module, seed: int = 0, iters: int = HESSIAN_ITERS, n: int = 512) -> float:
    """The largest eigenvalue of the training loss's Hessian (all parameters) on a fixed batch of n teacher inputs, in
    training mode: power iteration with Hessian-vector products (double backward)."""
    x, y = _teacher_data(n, torch.Generator().manual_seed(4321))
    params = list(net.parameters())
    grads = torch.autograd.grad(F.cross_entropy(net(x), y), params, create_graph=True)
    g = torch.Generator().manual_seed(seed)
    v = [torch.randn(p.shape, generator=g) for p in params]
    top = float("nan")
    for _ in range(iters):
        size = torch.sqrt(sum((u * u).sum() for u in v))
        v = [u / size for u in v]
        hv = torch.autograd.grad(grads, params, v, retain_graph=True)
        top = float(sum((a * b).sum() for a, b in zip(hv, v)))
        v = [h.detach() for h in hv]
    return top


def sharpness(race: dict[str, dict] | None = None, seed: int = 0, trained: bool = True) -> dict[str, float]:
    """hessian_top of both networks of a race (trained), or of both networks as initialised at `seed`."""
    nets = ({k: race[k]["net"] for k in SHIFT_NORMS} if trained
            else {k: ShiftNet(k, seed=seed) for k in SHIFT_NORMS})
    return {k: hessian_top(net, seed) for k, net in nets.items()}


def flatter_with_batchnorm(tops: dict[str, float]) -> bool:
    """C114: is the plain network's largest Hessian eigenvalue more than SHARPER_BY times BatchNorm's?"""
    return tops["none"] > SHARPER_BY * tops["BatchNorm"]


def staleness(net: nn.Module, step: float, n: int = 512) -> float:
    """How stale a gradient is after its own update: |g(w - step g) - g(w)| / |g(w)| on a fixed batch of n teacher
    inputs (Santurkar et al.'s gradient predictiveness, one step along the gradient); the weights are put back."""
    x, y = _teacher_data(n, torch.Generator().manual_seed(4321))
    params = list(net.parameters())
    before = torch.autograd.grad(F.cross_entropy(net(x), y), params)
    saved = [p.detach().clone() for p in params]
    with torch.no_grad():
        for p, g in zip(params, before):
            p.sub_(step * g)
    after = torch.autograd.grad(F.cross_entropy(net(x), y), params)
    with torch.no_grad():
        for p, w in zip(params, saved):
            p.copy_(w)
    change = torch.sqrt(sum(((a - b) ** 2).sum() for a, b in zip(after, before)))
    return float(change / torch.sqrt(sum((g * g).sum() for g in before)))


def gradient_staleness(race: dict[str, dict] | None = None, seed: int = 0, trained: bool = True,
                       step: float = 0.1) -> dict[str, float]:
    """staleness of both networks of a race (trained), or of both networks as initialised at `seed`."""
    nets = ({k: race[k]["net"] for k in SHIFT_NORMS} if trained
            else {k: ShiftNet(k, seed=seed) for k in SHIFT_NORMS})
    return {k: staleness(net, step) for k, net in nets.items()}


def less_stale_with_batchnorm(stale: dict[str, float]) -> bool:
    """C115: does the plain network's gradient change more than SHARPER_BY times as much as BatchNorm's?"""
    return stale["none"] > SHARPER_BY * stale["BatchNorm"]


VANISHED_BELOW = 0.01     # C112: at depth 1000 Post-LN's input/output gradient ratio is below this at every seed


# ---- the depth law and De & Smith's down-weighting (notebook 01 §4) ------------------------------------------------

DEEP_DEPTHS = (200, 600, 1000)
LAW_BAND = (0.75, 1.33)   # C112: Pre-LN's |x_L| / (sqrt(d) sqrt(L + 1)) stays in this band
SHARE_SLOPE = (-0.6, -0.35)  # C113: the slope of log(branch share) against log(l + 1); 1/sqrt(l + 1) has -0.5


def deep_stack(residual_stack: ResidualStack, depth: int, norm: str, seed: int = 0) -> tuple[Tensor, Tensor]:
    """The FFN stack (gain 1) of any depth, run once on its tokens with autograd on: the stream (depth + 1, tokens, d)
    and the input/output gradient ratio of backward_through_stack's loss, from one backward pass."""
    _check_choice(norm, STACK_NORMS, "norm")
    x = stream_tokens(N_TOKENS, D_MODEL, seed + 1).requires_grad_(True)
    r = stream_tokens(1, D_MODEL, seed + 2)[0] / math.sqrt(D_MODEL)
    xs = residual_stack(x, _stack("amplifies its input", "independent", depth, seed), 1.0, norm)
    (grad,) = torch.autograd.grad((xs[-1] @ r).mean(), x)
    out_grad = (r / N_TOKENS).norm()               # dloss/dx_L is r / tokens for every token
    return xs.detach(), vector_norm(grad).mean() / out_grad


def depth_law(residual_stack: ResidualStack, depth: int, norm: str, seed: int = 0) -> dict[str, float]:
    """deep_stack's summary: the stream's |x_L| over sqrt(d) sqrt(L + 1) (mean over tokens) and the gradient ratio."""
    xs, ratio = deep_stack(residual_stack, depth, norm, seed)
    size = vector_norm(xs[-1]).mean().item()
    return {"law_ratio": size / (math.sqrt(D_MODEL) * math.sqrt(depth + 1)), "ratio": float(ratio)}


def follows_sqrt_law(run: dict[str, float]) -> bool:
    """C112 (Pre-LN): is |x_L| within LAW_BAND of sqrt(d) sqrt(L + 1)?"""
    return LAW_BAND[0] < run["law_ratio"] < LAW_BAND[1]


def vanished(run: dict[str, float], below: float) -> bool:
    """C112 (Post-LN): has the input/output gradient ratio fallen below `below`?"""
    return run["ratio"] < below


def branch_shares(residual_stack: ResidualStack, norm: str, gain: float, depth: int = MAX_DEPTH,
                  seed: int = 0) -> np.ndarray:
    """Each block's contribution over the stream it is added to, |x_{l+1} - x_l| / |x_l|, l = 0..depth-1 (mean over
    tokens), for the FFN stack without a norm or with Pre-LN (where x_{l+1} - x_l is exactly the branch g f_l)."""
    if norm not in ("off", "Pre-LN"):
        raise ValueError(f"norm must be 'off' or 'Pre-LN' (Post-LN's step is not its branch), got {norm!r}")
    x0 = stream_tokens(N_TOKENS, D_MODEL, seed + 1)
    with torch.no_grad():
        xs = residual_stack(x0, _stack("amplifies its input", "independent", depth, seed), gain, norm)
    return (vector_norm(xs[1:] - xs[:-1]) / vector_norm(xs[:-1])).mean(-1).numpy()


def share_slope(shares: np.ndarray) -> float:
    """The slope of log(share) against log(l + 1), fitted from l = 1: -0.5 for a share falling like 1/sqrt(l + 1)."""
    layers = np.arange(len(shares))[1:]
    return float(np.polyfit(np.log(layers + 1), np.log(shares[1:]), 1)[0])


def down_weighted(shares: np.ndarray) -> bool:
    """C113: does a block's share of the stream fall like 1/sqrt(l + 1) (a log-log slope within SHARE_SLOPE)?"""
    return SHARE_SLOPE[0] < share_slope(shares) < SHARE_SLOPE[1]


@claim_experiment(
    "C110", statement="At lr 0.1 (also 0.05, and at hidden widths 32 and 128) the BatchNorm network reaches training "
    "loss 0.8 (mean of 10 steps) in fewer than half the plain network's steps; not in the first steps (loss 1.3: "
    "both about as fast) nor later (loss 0.6: the lead shrinks below 2x)",
    figure="steps to loss 0.8, plain over BatchNorm", kind="training",
    settings=[Setting("lr 0.1", {"lr": 0.1}), Setting("lr 0.05", {"lr": 0.05}),
              Setting("lr 0.1, width 32", {"lr": 0.1, "width": 32}),
              Setting("lr 0.1, width 128", {"lr": 0.1, "width": 128}),
              Setting("lr 0.1, to loss 1.3 (control: the first steps, both about as fast)",
                      {"lr": 0.1, "threshold": 1.3}, expect=False),
              Setting("lr 0.1, to loss 0.6 (limit: the lead shrinks)", {"lr": 0.1, "threshold": 0.6}, expect=False)])
def c110_faster_to_a_loss(seed, *, lr=0.1, threshold=SPEED_LOSS, steps=150, width=64):
    race = learning_rate_race(lr, seed, steps, width)
    fast, slow = steps_to_loss(race["BatchNorm"], threshold), steps_to_loss(race["none"], threshold)
    return Outcome(trains_faster(race, threshold), slow / fast, f"steps: no norm {slow:g}, BatchNorm {fast:g}")


@claim_experiment(
    "C111", statement="Santurkar et al.'s noise test: with a per-unit shift in U(-0.5, 0.5) and scale in U(1, 1.5) "
    "drawn afresh at every step after each BatchNorm, the network still trains (final loss below 0.8) and reaches "
    "loss 0.8 in at most twice BatchNorm's steps, at lr 0.1 and at lr 0.5 (where the plain network fails, C57); noise "
    "six times larger (shift U(-3, 3), scale U(1, 4)) breaks it (the control)",
    figure="steps to loss 0.8, noisy BatchNorm over BatchNorm", kind="training",
    settings=[Setting("lr 0.1, noise 0.5", {"lr": 0.1}), Setting("lr 0.5, noise 0.5", {"lr": 0.5}),
              Setting("lr 0.1, noise 0.5, width 128", {"lr": 0.1, "width": 128}),
              Setting("lr 0.1, noise 3 (control: large enough noise breaks it)", {"lr": 0.1, "noise": 3.0},
                      expect=False)])
def c111_noise_test(seed, *, lr=0.1, noise=NOISE, steps=150, width=64):
    race = {"BatchNorm": train_shift_run("BatchNorm", steps, lr, seed=seed, width=width)}
    race["noisy"] = train_shift_run("BatchNorm", steps, lr, seed=seed, width=width, noise=noise)
    noisy, clean = steps_to_loss(race["noisy"]), steps_to_loss(race["BatchNorm"])
    return Outcome.of_checks(noise_checks(race), noisy / clean,
                             f"steps: BatchNorm {clean:g}, noisy {noisy:g}; final loss noisy "
                             f"{race['noisy']['final_loss']:.3f}")


@claim_experiment(
    "C112", statement="The depth law: Pre-LN's stream grows like sqrt(L + 1), |x_L| within 0.75-1.33 of "
    "sqrt(d) sqrt(L + 1) from depth 10 to 1000; Post-LN's input/output gradient ratio, bounded to depth 200 (C05), "
    "drifts down with depth: below 1 at depth 600 and below 0.01 at depth 1000 at every seed; not at depth 50 (the "
    "control: 0.15 to 2.3)", figure="Pre-LN: |x_L| / (sqrt(d) sqrt(L + 1)); Post-LN: the gradient ratio",
    kind="exact",
    settings=[Setting(f"Pre-LN, depth {L}", {"norm": "Pre-LN", "depth": L}) for L in (10, 200, 1000)]
    + [Setting("Post-LN, depth 600, below 1", {"depth": 600, "below": 1.0}),
       Setting("Post-LN, depth 1000, below 0.01", {"depth": 1000}),
       Setting("Post-LN, depth 50, below 0.01 (control)", {"depth": 50}, expect=False)])
def c112_depth_law(seed, residual_stack, *, norm="Post-LN", depth=1000, below=VANISHED_BELOW):
    run = depth_law(residual_stack, depth, norm, seed)
    if norm == "Pre-LN":
        return Outcome(follows_sqrt_law(run), run["law_ratio"], f"gradient ratio {run['ratio']:.3g}")
    return Outcome(vanished(run, below), run["ratio"], f"|x_L| / law {run['law_ratio']:.3g}")


@claim_experiment(
    "C113", statement="De & Smith's down-weighting: in the Pre-LN stack (gain 1, 200 blocks) block l's contribution "
    "over the stream it joins falls like 1/sqrt(l + 1) (log-log slope between -0.6 and -0.35); without a norm it does "
    "not fall (gain 0.05: a flat share of about 0.05; gain 1: about 1, the exponential stack)",
    figure="slope of log(share) against log(l + 1)", kind="exact",
    settings=[Setting("Pre-LN, gain 1", {"norm": "Pre-LN"}),
              Setting("Pre-LN, gain 1, depth 100", {"norm": "Pre-LN", "depth": 100}),
              Setting("no norm, gain 0.05 (control)", {"norm": "off", "gain": 0.05}, expect=False),
              Setting("no norm, gain 1 (control)", {"norm": "off", "gain": 1.0}, expect=False)])
def c113_branches_down_weighted(seed, residual_stack, *, norm="Pre-LN", gain=1.0, depth=MAX_DEPTH):
    shares = branch_shares(residual_stack, norm, gain, depth, seed)
    return Outcome(down_weighted(shares), share_slope(shares),
                   f"share at block 0 {shares[0]:.3g}, at block {depth - 1} {shares[-1]:.3g}")


@claim_experiment(
    "C114", statement="After 150 steps at lr 0.1 the plain network's loss surface is sharper: its largest Hessian "
    "eigenvalue more than 1.5 times the BatchNorm network's (also at lr 0.05); at initialization it is the other way round (the control: "
    "BatchNorm's is the larger)", figure="largest Hessian eigenvalue, plain over BatchNorm", kind="training",
    settings=[Setting("after 150 steps, lr 0.1"), Setting("after 150 steps, lr 0.05", {"lr": 0.05}),
              Setting("at initialization (control)", {"trained": False}, expect=False)])
def c114_sharpness(seed, *, lr=0.1, trained=True, steps=150):
    tops = sharpness(learning_rate_race(lr, seed, steps) if trained else None, seed, trained)
    return Outcome(flatter_with_batchnorm(tops), tops["none"] / tops["BatchNorm"],
                   f"no norm {tops['none']:.3g}, BatchNorm {tops['BatchNorm']:.3g}")


@claim_experiment(
    "C115", statement="After 150 steps at lr 0.1 the plain network's gradient is staler: one step along it (0.1, "
    "also 0.5) changes it, relative to its size, more than 1.5 times as much as the BatchNorm network's; at "
    "initialization it is the other way round (the control)",
    figure="relative gradient change after one step, plain over BatchNorm", kind="training",
    settings=[Setting("after 150 steps, step 0.1"), Setting("after 150 steps, step 0.5", {"step": 0.5}),
              Setting("after 150 steps at lr 0.05, step 0.1", {"lr": 0.05}),
              Setting("at initialization (control)", {"trained": False}, expect=False)])
def c115_staleness(seed, *, lr=0.1, step=0.1, trained=True, steps=150):
    stale = gradient_staleness(learning_rate_race(lr, seed, steps) if trained else None, seed, trained, step)
    return Outcome(less_stale_with_batchnorm(stale), stale["none"] / stale["BatchNorm"],
                   f"no norm {stale['none']:.3g}, BatchNorm {stale['BatchNorm']:.3g}")


# ---- C101: BatchNorm's large-learning-rate advantage needs a large enough batch ---------------------------------------
# The learning-rate race of C57 (a 16-64-64-64-4 MLP, SGD with momentum 0.9, 150 steps, with and without BatchNorm);
# only the batch size changes here.

BATCH_SIZES = (16, 32, 64, 256)
SWEEP_LRS = (0.5, 1.0)


def batch_size_sweep(seed: int = 0, batches=BATCH_SIZES, lrs=SWEEP_LRS) -> dict[tuple[float, int], dict]:
    """(lr, batch) -> notebook 01's learning-rate race at that batch size: each network's training record."""
    return {(lr, b): learning_rate_race(lr, seed, batch=b) for lr in lrs for b in batches}


def bn_advantage(race: dict[str, dict]) -> bool:
    """C101 (C57's test of one race): BatchNorm trains (final loss below 0.8) while the plain network fails."""
    from .why_normalize import BN_TRAINS_BELOW, PLAIN_FAILS_BY, loss_gap
    plain_fails = race["none"]["diverged_at"] is not None or loss_gap(race) > PLAIN_FAILS_BY
    return race["BatchNorm"]["final_loss"] < BN_TRAINS_BELOW and plain_fails


def batch_size_checks(sweep: dict[tuple[float, int], dict]) -> dict[str, bool]:
    """C101 on batch_size_sweep's result, each check by name."""
    return {"lr 1: BatchNorm's advantage holds at batch 64 and 256": bn_advantage(sweep[1.0, 64]) and
                bn_advantage(sweep[1.0, 256]),
            "lr 1, batch 32: it does not (BatchNorm itself fails)": not bn_advantage(sweep[1.0, 32]),
            "lr 0.5, batch 256: it does not (the plain network trains too)": not bn_advantage(sweep[0.5, 256])}


def batch_size_figure(sweep: dict[tuple[float, int], dict]) -> go.Figure:
    """Final loss against batch size: colour is the network, dash and marker the learning rate."""
    fig = static_figure("BatchNorm's large-learning-rate advantage needs a large batch", "batch size (log scale)",
                        "final training loss (mean of the last 20 steps)", log_x=True, height=380)
    lrs = sorted({lr for lr, _ in sweep})
    batches = sorted({b for _, b in sweep})
    for i, net in enumerate(("BatchNorm", "none")):
        for j, lr in enumerate(lrs):
            losses = [sweep[lr, b][net]["final_loss"] for b in batches]
            fig.add_scatter(x=batches, y=[v if math.isfinite(v) else None for v in losses], mode="lines+markers",
                            name=f"{'BatchNorm' if net == 'BatchNorm' else 'no norm'}, lr {lr:g}",
                            line=dict(color=color(i), dash=dash(2 * j)), marker=dict(symbol=marker(j), size=9))
    fig.add_hline(y=0.8, line=dict(color="grey", dash="dot"))
    fig.add_annotation(x=math.log10(batches[-1]), y=0.8, text="trains: below 0.8", showarrow=False, xanchor="right",
                       yanchor="bottom", font=dict(color="grey"))
    fig.update_xaxes(tickvals=batches)
    return fig


@claim_experiment("C101", statement="Notebook 01's MLP at lr 1, 150 steps: BatchNorm trains (final loss below 0.8) and the "
                  "plain network fails (0.15 higher or diverged) at batch 64 to 256, but at batch 32 and 16 BatchNorm "
                  "fails too; at lr 0.5 the advantage holds at batch 64, and at batch 256 the plain network trains as "
                  "well (no advantage)",
                  figure="BatchNorm's final loss (finite on every CPU; whether the plain network diverges or only ends "
                  "high differs between kernels)", kind="training",
                  settings=[Setting("lr 1, batch 64 (notebook 01's setting)", {"lr": 1.0, "batch": 64}),
                            Setting("lr 1, batch 128", {"lr": 1.0, "batch": 128}),
                            Setting("lr 1, batch 256", {"lr": 1.0, "batch": 256}),
                            Setting("lr 0.5, batch 64", {"lr": 0.5, "batch": 64}),
                            Setting("lr 1, batch 32 (limit: BatchNorm fails too)", {"lr": 1.0, "batch": 32},
                                    expect=False),
                            Setting("lr 1, batch 16 (limit: BatchNorm fails too)", {"lr": 1.0, "batch": 16},
                                    expect=False),
                            Setting("lr 0.5, batch 256 (limit: the plain network trains too)", {"lr": 0.5, "batch": 256},
                                    expect=False)])
def c101_batch_size(seed, *, lr=1.0, batch=64):
    race = batch_size_sweep(seed, batches=(batch,), lrs=(lr,))[lr, batch]
    plain, normed = race["none"]["final_loss"], race["BatchNorm"]["final_loss"]
    return Outcome(holds=bn_advantage(race), figure=normed,
                   detail=f"final loss no norm {plain:.3f}, BatchNorm {normed:.3f}")

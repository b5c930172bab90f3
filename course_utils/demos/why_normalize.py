"""Notebook 01 (why normalize): the residual stack forward and backward, per-layer histograms, covariate shift.

The stack is x_{l+1} = x_l + g f_l(x_l) built from real nn modules; `residual_stack` is the reference copy of the loop
notebook 01 writes inline. Panels cache what they compute (a deeper request continues the stack where it stopped),
so returning to a setting is a lookup.
"""
from __future__ import annotations

import contextlib
import functools
import math

import ipywidgets as widgets
import numpy as np
import plotly.graph_objects as go
import torch
import torch.nn.functional as F
from plotly.subplots import make_subplots
from torch import Tensor, nn

from ..exercises import CaseResult, CheckReport, call_learner
from ..figures import PALETTE, LiveFigure, color, live_figure
from ..panel import BackgroundRun, Panel, message_html, register_panel

__all__ = [
    "one_thread", "single_threaded", "D_MODEL", "MAX_DEPTH", "GAINS", "CONTRIBUTIONS", "SUBLAYERS", "NORMS",
    "FLOAT16_MAX", "FLOAT32_MAX", "vector_norm", "ffn", "make_sublayers", "sublayer_stack", "residual_stack",
    "predicted_norm", "growth_curve", "backward_through_stack", "layer_histograms", "float16_figure",
    "residual_growth_panel", "gradient_panel", "histogram_panel", "ShiftNet", "train_shift_run", "CovariateShiftDemo",
    "covariate_shift_demo", "depth_scaled_gain", "check_depth_scaled_gain",
]

D_MODEL = 32
N_TOKENS = 4
MAX_DEPTH = 200
GAINS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
CONTRIBUTIONS = ("aligned", "independent")
SUBLAYERS = ("fixed size", "amplifies its input")
NORMS = ("off", "Pre-LN", "Post-LN")
FLOAT16_MAX = float(torch.finfo(torch.float16).max)
FLOAT32_MAX = float(torch.finfo(torch.float32).max)


@contextlib.contextmanager
def one_thread():
    """Run torch on one thread inside the block: these tensors are tiny, and on a busy 2-core machine a second
    OpenMP thread made the stack 100x slower (threads spin waiting for each other)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def single_threaded(fn):
    """fn run inside one_thread(): for panel handlers, whatever thread count the caller's process uses."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with one_thread():
            return fn(*args, **kwargs)
    return wrapper


def _unit_zero_mean(d: int, g: torch.Generator) -> Tensor:
    """A random direction with mean 0 over its features, so LayerNorm's centring leaves it alone."""
    u = torch.randn(d, generator=g, dtype=torch.float64)
    u = u - u.mean()
    return u / u.norm()


def _linear(weight: Tensor) -> nn.Linear:
    """An nn.Linear (no bias) holding `weight`, built on the meta device so no throwaway init runs."""
    layer = nn.Linear(weight.shape[1], weight.shape[0], bias=False, device="meta")
    layer.weight = nn.Parameter(weight, requires_grad=False)
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
    if sublayer not in SUBLAYERS or contributions not in CONTRIBUTIONS:
        raise ValueError(f"sublayer must be one of {SUBLAYERS} and contributions one of {CONTRIBUTIONS}, "
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


def residual_stack(x0: Tensor, sublayers, gain: float | Tensor, norm: str = "off",
                   residual: bool = True) -> Tensor:
    """The stream x_0 .. x_L: (L + 1, *x0.shape). x0: (..., d); gain: a number or a tensor broadcasting against x0.

    off:     x_{l+1} = x_l + g f_l(x_l)
    Pre-LN:  x_{l+1} = x_l + g f_l(LN(x_l))
    Post-LN: x_{l+1} = LN(x_l + g f_l(x_l))
    residual=False drops the "x_l +" (a plain deep network), for comparison. LN has no γ, β here (γ = 1, β = 0).
    """
    if norm not in NORMS:
        raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")
    shape = x0.shape[-1:]
    xs = [x0]
    x = x0
    for f in sublayers:
        skip = x if residual else 0.0
        if norm == "off":
            x = skip + gain * f(x)
        elif norm == "Pre-LN":
            x = skip + gain * f(F.layer_norm(x, shape))
        else:
            x = F.layer_norm(skip + gain * f(x), shape)
        xs.append(x)
    return torch.stack(xs)


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


def vector_norm(x: Tensor) -> Tensor:
    """|x| over the last dimension without squaring huge entries into inf (|x| near 1e200 stays finite in float64)."""
    scale = x.abs().amax(dim=-1, keepdim=True)
    safe = torch.where((scale > 0) & torch.isfinite(scale), scale, torch.ones_like(scale))
    return torch.where(torch.isfinite(scale[..., 0]), (x / safe).norm(dim=-1) * safe[..., 0], scale[..., 0])


def _token_batch(n: int, d: int, seed: int) -> Tensor:
    """n tokens with N(0, 1) features (like embeddings): |x| is about sqrt(d)."""
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@functools.lru_cache(maxsize=8)
def sublayer_stack(sublayer: str, contributions: str) -> nn.ModuleList:
    """The panels' own MAX_DEPTH sublayers of one kind (seed 0), built once; slice it for a shallower stack."""
    return make_sublayers(sublayer, contributions, MAX_DEPTH)


def growth_curve(sublayer: str, contributions: str, norm: str, gain: float, depth: int = MAX_DEPTH) -> np.ndarray:
    """|x_l| for l = 0..depth, averaged over N_TOKENS tokens, through the course's fixed 200-sublayer stack."""
    x0 = _token_batch(N_TOKENS, D_MODEL, 1)
    with torch.no_grad():
        xs = residual_stack(x0, sublayer_stack(sublayer, contributions)[:depth], gain, norm)
    return vector_norm(xs).mean(-1).numpy()


def backward_through_stack(depth: int, norm: str, gain: float, residual: bool = True, n_tokens: int = N_TOKENS,
                           seed: int = 0) -> dict[str, Tensor]:
    """One forward and backward pass of loss = mean over tokens of r · x_L through `depth` random FFN sublayers.

    residual_stack's loop, keeping each sublayer's output so its weight gradient can be read. Returns x and grad_x
    ((depth + 1, n_tokens, d): the stream and dloss/dx_l) and grad_w ((depth,): |dloss/dW| of each sublayer's
    second Linear). Sublayers are the course's fixed stack (seed 0) when seed is 0.
    """
    if norm not in NORMS:
        raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")
    layers = (sublayer_stack("amplifies its input", "independent")[:depth] if seed == 0 and depth <= MAX_DEPTH
              else make_sublayers("amplifies its input", "independent", depth, D_MODEL, seed))
    x = _token_batch(n_tokens, D_MODEL, seed + 1).requires_grad_(True)
    r = _token_batch(1, D_MODEL, seed + 2)[0] / math.sqrt(D_MODEL)
    shape = (D_MODEL,)
    xs, hiddens, outs = [x], [], []
    for f in layers:
        hidden = f[1](f[0](F.layer_norm(x, shape) if norm == "Pre-LN" else x))
        out = f[2](hidden)
        out.retain_grad()
        skip = x if residual else 0.0
        x = F.layer_norm(skip + gain * out, shape) if norm == "Post-LN" else skip + gain * out
        x.retain_grad()
        xs.append(x)
        hiddens.append(hidden.detach())
        outs.append(out)
    (xs[-1] @ r).mean().backward()
    grad_w = [vector_norm(torch.einsum("td,th->dh", o.grad, h).flatten()) for o, h in zip(outs, hiddens)]
    return {"x": torch.stack([x.detach() for x in xs]), "grad_x": torch.stack([x.grad for x in xs]),
            "grad_w": torch.stack(grad_w) if grad_w else torch.zeros(0, dtype=torch.float64)}


def _check_gain(gain) -> float:
    if isinstance(gain, bool) or not isinstance(gain, (int, float)) or not math.isfinite(gain) or gain <= 0:
        raise ValueError(f"gain must be a positive number, got {gain!r}")
    return float(gain)


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


def _positive(values) -> list:
    """Values for a log axis: zeros (underflow) and infinities (overflow) become gaps."""
    return [v if 0 < v < math.inf else None for v in np.asarray(values, dtype=np.float64).tolist()]


@register_panel("01_why_normalize")
def residual_growth_panel() -> Panel:
    """Depth, gain, kind of contribution and normalization -> |x_l| per layer on a log axis, with the law it follows."""
    cache: dict[tuple, tuple[list, Tensor]] = {}
    x0 = _token_batch(N_TOKENS, D_MODEL, 1)
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
                      f"|x_l|  (mean over {N_TOKENS} tokens, d = {D_MODEL})", log_y=True, height=420)
    fig.update_yaxes(exponentformat="power")
    fig.add_scatter(mode="lines", name="without normalization", line=dict(color="#999999", width=2))
    fig.add_scatter(mode="lines", name="measured", line=dict(color=color(0), width=3))
    fig.add_scatter(mode="lines", name="law", line=dict(color=color(1), width=2, dash="dash"))
    fig.add_scatter(mode="lines", name="largest float16 (65504)", line=dict(color=color(3), dash="dot"))
    fig.add_scatter(mode="lines", name="largest float32 (3.4e38)", line=dict(color=color(7), dash="dot"))
    readout = widgets.HTML()
    controls = {
        "depth": widgets.IntSlider(value=50, min=1, max=MAX_DEPTH, description="depth L"),
        "gain": _gain_control(1.0),
        "contributions": widgets.Dropdown(options=list(CONTRIBUTIONS), value="independent",
                                          description="contributions"),
        "sublayer": widgets.Dropdown(options=list(SUBLAYERS), value="amplifies its input", description="sublayer"),
        "norm": widgets.ToggleButtons(options=list(NORMS), value="off", description="normalization"),
    }

    def update(depth, gain, contributions, sublayer, norm):
        depth, gain = _check_depth(depth), _check_gain(gain)
        _check_choice(contributions, CONTRIBUTIONS, "contributions")
        _check_choice(sublayer, SUBLAYERS, "sublayer")
        _check_choice(norm, NORMS, "normalization")
        layers = list(range(depth + 1))
        measured = curve(sublayer, contributions, norm, gain, depth)
        plain = curve(sublayer, contributions, "off", gain, depth) if norm != "off" else measured
        law, law_name = predicted_norm(depth, gain, sublayer, contributions, norm, x0_norm)
        top = float(np.nanmax(plain if norm != "off" else measured))
        with fig.batch_update():
            fig.data[0].update(x=layers, y=_positive(plain), visible=norm != "off")
            fig.data[1].update(x=layers, y=_positive(measured), name=f"measured, normalization {norm}")
            fig.data[2].update(x=layers, y=_positive(law), name=f"law: {law_name}")
            fig.data[3].update(x=[0, depth], y=[FLOAT16_MAX] * 2, visible=top > 1e3)
            fig.data[4].update(x=[0, depth], y=[FLOAT32_MAX] * 2, visible=top > 1e30)
        text = (f"|x_0| = {measured[0]:.3g}, |x_{depth}| = {measured[-1]:.3g}: "
                f"<b>{measured[-1] / measured[0]:.3g}×</b> the start. The law: {law_name}.")
        if top > FLOAT16_MAX:
            first = int(np.argmax(np.asarray(plain) > FLOAT16_MAX))
            text += (f" Without normalization |x_l| passes 65504, the largest float16 value, at layer {first}: a "
                     "float16 run would hold inf by then. The course computes in float64, so the curve goes on.")
        readout.value = text

    return Panel(controls, [readout, fig], single_threaded(update), title="How big does the residual stream get?")


def float16_figure(sizes: dict[str, list[float]], first_inf: int | None = None) -> go.FigureWidget:
    """|x_l| per layer for each named float16 run (inf/nan become gaps), with a marker where the first inf appeared."""
    fig = live_figure("The same stack in float16", "layer l", "|x_l|  (float16, mean over tokens)", log_y=True,
                      height=380)
    fig.update_yaxes(exponentformat="power")
    for j, (name, values) in enumerate(sizes.items()):
        fig.add_scatter(y=_positive(values), mode="lines", name=name, line=dict(color=color(j), width=3))
    fig.add_scatter(x=[0, max(len(v) for v in sizes.values()) - 1], y=[FLOAT16_MAX] * 2, mode="lines",
                    name="largest float16 (65504)", line=dict(color=color(3), dash="dot"))
    if first_inf is not None:
        fig.add_vline(x=first_inf, line=dict(color=color(1), dash="dash"),
                      annotation_text=f"first inf at layer {first_inf}")
    return fig


BACKWARD_DEPTHS = (10, 25, 50, 100, 200)


@register_panel("01_why_normalize")
def gradient_panel() -> Panel:
    """Depth, gain, normalization and residual on/off -> gradient norms per layer (stream and sublayer weights)."""
    cache: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}

    def grads(depth, norm, gain, residual):
        key = (depth, norm, gain, residual)
        if key not in cache:
            out = backward_through_stack(depth, norm, gain, residual)
            cache[key] = (vector_norm(out["grad_x"]).mean(-1).numpy(), out["grad_w"].numpy())
        return cache[key]

    fig = live_figure("Gradient size, layer by layer (the loss sits after the last layer)", "layer l",
                      "gradient norm (log scale)", log_y=True, height=420)
    fig.update_yaxes(exponentformat="power")
    fig.add_scatter(mode="lines+markers", name="|∂loss/∂x_l|: the stream", line=dict(color=color(0), width=3),
                    marker=dict(size=4))
    fig.add_scatter(mode="lines", name="|∂loss/∂W_l|: sublayer l's output weights",
                    line=dict(color=color(1), width=2))
    readout = widgets.HTML()
    controls = {
        "depth": widgets.SelectionSlider(options=list(BACKWARD_DEPTHS), value=50, description="depth L"),
        "gain": _gain_control(1.0),
        "norm": widgets.ToggleButtons(options=list(NORMS), value="off", description="normalization"),
        "residual": widgets.Checkbox(value=True, description="residual connections"),
    }

    def update(depth, gain, norm, residual):
        depth, gain = _check_depth(depth), _check_gain(gain)
        _check_choice(norm, NORMS, "normalization")
        if not isinstance(residual, (bool, np.bool_)):
            raise ValueError(f"residual must be True or False, got {residual!r}")
        gx, gw = grads(depth, norm, gain, bool(residual))
        with fig.batch_update():
            fig.data[0].update(x=list(range(depth + 1)), y=_positive(gx))
            fig.data[1].update(x=list(range(depth)), y=_positive(gw))
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
        readout.value = f"The gradient reaching x_0 is {verdict}."

    return Panel(controls, [readout, fig], single_threaded(update), title="The backward pass through the same stack")


HIST_DEPTH = 40
HIST_LAYERS = (0, 10, 20, 30, 40)
HIST_BINS = np.linspace(-60.0, 60.0, 481)  # log10 |value| in quarter decades; the plot zooms to where values are


def layer_histograms(norm: str, gain: float, n_tokens: int = 32) -> dict[str, np.ndarray]:
    """Histograms of log10|value| of the stream x_l and of dloss/dx_l at HIST_LAYERS, through HIST_DEPTH sublayers.

    Returns {"activations": (layers, bins), "gradients": (layers, bins), "edges": (bins + 1,),
    "activations_rms": (layers,), "gradients_rms": (layers,)}; counts are fractions of the layer's entries.
    """
    out = backward_through_stack(HIST_DEPTH, norm, gain, True, n_tokens=n_tokens)
    result = {"edges": HIST_BINS}
    for name, key in (("activations", "x"), ("gradients", "grad_x")):
        values = out[key][list(HIST_LAYERS)].flatten(1)
        logs = torch.log10(values.abs().clamp_min(1e-300)).numpy()
        result[name] = np.stack([np.histogram(row, HIST_BINS)[0] / row.size for row in logs])
        result[f"{name}_rms"] = (vector_norm(values) / math.sqrt(values.shape[1])).numpy()
    return result


@register_panel("01_why_normalize")
def histogram_panel() -> Panel:
    """Normalization and gain -> per-layer histograms of activations and gradients (makemore style, log10 |value|)."""
    cache: dict[tuple, dict] = {}
    fig = LiveFigure(make_subplots(rows=1, cols=2, subplot_titles=(
        "activations: the stream x_l", "gradients: ∂loss/∂x_l")))
    fig.update_layout(title=f"Where each layer's values sit ({HIST_DEPTH}-layer stack of FFN sublayers)", height=400,
                      template="plotly_white", colorway=PALETTE, margin=dict(l=60, r=20, t=70, b=50),
                      legend=dict(orientation="h", y=-0.25))
    for col in (1, 2):
        fig.update_xaxes(title_text="log10 |value|  (each step right = 10× larger)", row=1, col=col)
        fig.update_yaxes(title_text="fraction of entries", row=1, col=col)
    centres = ((HIST_BINS[:-1] + HIST_BINS[1:]) / 2).tolist()
    for col in (1, 2):
        for j, layer in enumerate(HIST_LAYERS):
            fig.add_scatter(x=centres, mode="lines", line=dict(color=color(j), shape="hvh"),
                            name=f"layer {layer}", legendgroup=str(layer), showlegend=col == 1, row=1, col=col)
    readout = widgets.HTML()
    controls = {
        "norm": widgets.ToggleButtons(options=list(NORMS), value="off", description="normalization"),
        "gain": _gain_control(1.0),
    }

    def update(norm, gain):
        _check_choice(norm, NORMS, "normalization")
        gain = _check_gain(gain)
        key = (norm, gain)
        if key not in cache:
            cache[key] = layer_histograms(norm, gain)
        h = cache[key]
        n = len(HIST_LAYERS)
        with fig.batch_update():
            for j in range(n):
                fig.data[j].y = h["activations"][j].tolist()
                fig.data[n + j].y = h["gradients"][j].tolist()
            for col, name in ((1, "activations"), (2, "gradients")):
                used = np.nonzero(h[name].sum(0))[0]
                fig.update_xaxes(range=[HIST_BINS[used[0]] - 0.5, HIST_BINS[used[-1] + 1] + 0.5], row=1, col=col)
        act = ", ".join(f"{s:.2g}" for s in h["activations_rms"])
        grad = ", ".join(f"{s:.2g}" for s in h["gradients_rms"])
        readout.value = (f"RMS of the activations at layers {', '.join(map(str, HIST_LAYERS))}: {act}<br>"
                         f"RMS of the gradients at the same layers: {grad}")

    return Panel(controls, [readout, fig], single_threaded(update),
                 title="Activation and gradient histograms per layer")


# ---- internal covariate shift -------------------------------------------------------------------------------------

SHIFT_NORMS = ("none", "BatchNorm")
QUANTILES = (0.15, 0.5, 0.85)


class ShiftNet(nn.Module):
    """A small MLP, 16 -> 64 -> 64 -> 64 -> 4, ReLU, with an optional BatchNorm1d before each ReLU (Ioffe & Szegedy).

    watched(x) returns the input of the last hidden nonlinearity, the distribution notebook 01 follows in training.
    """

    def __init__(self, norm: str = "none", width: int = 64, seed: int = 0):
        super().__init__()
        _check_choice(norm, SHIFT_NORMS, "norm")
        with torch.random.fork_rng():  # PyTorch's default init, seeded, without touching the caller's RNG state
            torch.manual_seed(seed)
            self.linears = nn.ModuleList([nn.Linear(16, width), nn.Linear(width, width), nn.Linear(width, width)])
            self.head = nn.Linear(width, 4)
        self.norms = nn.ModuleList([nn.BatchNorm1d(width) if norm == "BatchNorm" else nn.Identity()
                                    for _ in self.linears])

    def watched(self, x: Tensor) -> Tensor:
        """x: (batch, 16) -> the last hidden layer's pre-activation (batch, width)."""
        for i, (linear, norm) in enumerate(zip(self.linears, self.norms)):
            z = norm(linear(x))
            if i == len(self.linears) - 1:
                return z
            x = torch.relu(z)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(torch.relu(self.watched(x)))


@functools.lru_cache(maxsize=1)
def _teacher() -> nn.Sequential:
    """A fixed random network 16 -> 32 -> 4 (tanh) whose argmax defines the classes."""
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


def train_shift_run(norm: str, steps: int = 150, lr: float = 0.1, seed: int = 0, units: int = 8, every: int = 5,
                    callback=None, should_stop=None) -> dict:
    """Train ShiftNet with SGD (momentum 0.9, written out), batch 64; every `every` steps record the watched quantiles.

    The watched distribution is measured on a fixed probe batch of 256 inputs (in training mode for BatchNorm, so the
    layer sees what it sees in training). Returns steps, loss (per step), quantiles (records, 3, units) and
    spread_drift: mean over units of |log(spread_t / spread_0)|, spread = 85th - 15th percentile.
    """
    _check_choice(norm, SHIFT_NORMS, "norm")
    if not (isinstance(steps, int) and steps >= 1) or not (math.isfinite(lr) and lr > 0):
        raise ValueError(f"need steps >= 1 and a finite lr > 0, got steps={steps!r}, lr={lr!r}")
    net = ShiftNet(norm, seed=seed)
    data = torch.Generator().manual_seed(seed + 1)
    probe, _ = _teacher_data(256, torch.Generator().manual_seed(999))
    params = list(net.parameters())
    velocity = [torch.zeros_like(p) for p in params]
    q = torch.tensor(QUANTILES)
    record = {"norm": norm, "steps": [], "loss": [], "quantiles": [], "stopped": False}

    def measure(step):
        with torch.no_grad():
            z = net.watched(probe)[:, :units]
        record["steps"].append(step)
        record["quantiles"].append(torch.quantile(z, q, dim=0).numpy())

    measure(0)
    for step in range(1, steps + 1):
        if should_stop is not None and should_stop():
            record["stopped"] = True
            break
        x, y = _teacher_data(64, data)
        loss = F.cross_entropy(net(x), y)
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():  # SGD with momentum, as torch.optim.SGD does it (no import of the optim machinery)
            for p, v, g in zip(params, velocity, grads):
                v.mul_(0.9).add_(g)
                p.sub_(lr * v)
        record["loss"].append(loss.item())
        if step % every == 0 or step == steps:
            measure(step)
            if callback is not None:
                callback(step, record)
    quantiles = np.stack(record["quantiles"])
    spread = quantiles[:, 2] - quantiles[:, 0]
    record["quantiles"] = quantiles
    record["spread_drift"] = float(np.abs(np.log(spread[-1] / spread[0])).mean())
    record["final_loss"] = float(np.mean(record["loss"][-20:])) if record["loss"] else float("nan")
    return record


class CovariateShiftDemo:
    """Two small networks trained side by side (no norm, BatchNorm), one hidden unit's input distribution plotted live.

    Display it; press Train (a background run with progress and Stop) or call run(background=False) from code.
    """

    def __init__(self, steps: int = 150, lr: float = 0.1, unit: int = 0):
        self.results: dict[str, dict] = {}
        self.unit = unit
        self.fig = LiveFigure(make_subplots(rows=1, cols=3, subplot_titles=(
            "training loss", "watched unit's input, no normalization", "watched unit's input, with BatchNorm")))
        self.fig.update_layout(title="Internal covariate shift: one hidden unit's input distribution during training",
                               height=380, template="plotly_white", margin=dict(l=60, r=20, t=80, b=50),
                               legend=dict(orientation="h", y=-0.3))
        self.fig.update_xaxes(title_text="training step")
        self.fig.update_yaxes(title_text="cross-entropy loss", row=1, col=1)
        self.fig.update_yaxes(title_text="pre-activation value", row=1, col=2)
        self.fig.update_yaxes(title_text="pre-activation value", row=1, col=3)
        for j, norm in enumerate(SHIFT_NORMS):
            self.fig.add_scatter(mode="lines", name=f"loss, {norm}", line=dict(color=color(j)), row=1, col=1)
        for j, norm in enumerate(SHIFT_NORMS):
            for k, qv in enumerate(QUANTILES):
                self.fig.add_scatter(mode="lines", name=f"{int(qv * 100)}th percentile",
                                     line=dict(color=color(2 + k), width=3 if k == 1 else 1.5),
                                     legendgroup=str(k), showlegend=j == 0, row=1, col=2 + j)
        self.controls = {
            "lr": widgets.Dropdown(options=[0.02, 0.05, 0.1, 0.2], value=lr, description="learning rate"),
            "steps": widgets.IntSlider(value=steps, min=20, max=600, step=10, description="steps"),
        }
        self.button = widgets.Button(description="Train both", icon="play", button_style="primary")
        self.runner = BackgroundRun("training")
        self.message = widgets.HTML()
        self.button.on_click(lambda _b: self.run(background=True))
        self.widget = widgets.VBox([widgets.HBox([*self.controls.values(), self.button]), self.runner.widget,
                                    self.message, self.fig])

    def _draw(self, record: dict) -> None:
        j = SHIFT_NORMS.index(record["norm"])
        quantiles = np.asarray(record["quantiles"])
        with self.fig.batch_update():
            self.fig.data[j].update(x=list(range(1, len(record["loss"]) + 1)), y=record["loss"])
            for k in range(len(QUANTILES)):
                self.fig.data[len(SHIFT_NORMS) + 3 * j + k].update(x=record["steps"],
                                                                    y=quantiles[:, k, self.unit].tolist())

    def run(self, background: bool = True) -> bool:
        """Train both networks; figures update live. False (with a message) if a run is already going."""
        lr, steps = self.controls["lr"].value, self.controls["steps"].value
        self.message.value = ""

        def job(should_stop, progress):
            results = {}
            for j, norm in enumerate(SHIFT_NORMS):
                def callback(step, record, j=j):
                    self._draw(record)
                    progress(j * steps + step, len(SHIFT_NORMS) * steps, f"{record['norm']}: step {step}")
                results[norm] = train_shift_run(norm, steps, lr, callback=callback, should_stop=should_stop)
                self._draw(results[norm])
            return results

        def done(results):
            self.results = results
            self.message.value = message_html(
                "Spread drift |log(spread now / spread at step 0)|, mean over 8 units: " + ", ".join(
                    f"{n} {r['spread_drift']:.2f}" for n, r in results.items()), "info")

        started = self.runner.start(single_threaded(job), done, background=background)
        if background is False and self.runner.error:
            self.message.value = message_html(f"The run failed: {self.runner.error}", "error")
        return started

    def _ipython_display_(self):
        from IPython.display import display
        display(self.widget)


def covariate_shift_demo(steps: int = 150, lr: float = 0.1) -> CovariateShiftDemo:
    """The covariate-shift experiment of notebook 01, ready to display and run."""
    return CovariateShiftDemo(steps, lr)


# ---- exercise: shrink the sublayers with depth instead of normalizing ---------------------------------------------

def depth_scaled_gain(depth: int) -> float:
    """The gain g that makes E|x_L|^2 = 4 |x_0|^2 (|x| doubles) through `depth` unnormalized amplifying sublayers."""
    return math.sqrt(2.0 ** (2.0 / depth) - 1.0)


def check_depth_scaled_gain(fn) -> CheckReport:
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
        if depth <= MAX_DEPTH:
            x0 = _token_batch(64, D_MODEL, 7)
            with torch.no_grad():
                xs = residual_stack(x0, sublayer_stack("amplifies its input", "independent")[:depth], got)
            measured = float((xs[-1].pow(2).sum(-1).mean() / xs[0].pow(2).sum(-1).mean()).sqrt())
            run = f"; a real {depth}-layer stack grew |x| by {measured:.2f}x"
        else:
            run = ""
        detail = f"g = {got:.4g} predicts |x| grows by {growth:.3g}x (target 2x){run}"
        report.cases.append(CaseResult(name, err <= 1e-3, detail, err))
    return report

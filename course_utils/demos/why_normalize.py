"""Notebook 01 (why normalize): the residual stack forward and backward, per-layer histograms, covariate shift.

The stack is x_{l+1} = x_l + g f_l(x_l) over real nn sublayers (course_utils.residual); the loop is the notebook's own
`residual_stack`, which the stack's panels and measurements take as their first argument. Panels cache what they
compute (a deeper request continues the stack where it stopped), so returning to a setting is a lookup.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable

import ipywidgets as widgets
import numpy as np
import plotly.graph_objects as go
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..figures import color, live_figure, live_subplots, log_axis_values
from ..norms import positive_number
from ..panel import Panel, TrainingDemo, message_html, register_panel
from ..residual import (CONTRIBUTIONS, D_MODEL, MAX_DEPTH, N_TOKENS, STACK_NORMS, SUBLAYER_KINDS, make_sublayers,
                        stream_tokens, sublayer_stack, vector_norm)

__all__ = [
    "GAINS", "FLOAT16_MAX", "FLOAT32_MAX", "BACKWARD_DEPTHS", "HIST_DEPTH", "HIST_LAYERS", "HIST_BINS", "SHIFT_NORMS",
    "QUANTILES", "predicted_norm", "growth_curve", "backward_through_stack", "layer_histograms", "float16_figure",
    "residual_growth_panel", "gradient_panel", "histogram_panel", "ShiftNet", "train_shift_run",
    "CovariateShiftDemo", "covariate_shift_demo",
]

GAINS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
FLOAT16_MAX = float(torch.finfo(torch.float16).max)
FLOAT32_MAX = float(torch.finfo(torch.float32).max)
# residual_stack(x0, sublayers, gain, norm="off", residual=True) -> the stream x_0 .. x_L, (L + 1, *x0.shape)
ResidualStack = Callable[..., Tensor]


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


def growth_curve(residual_stack: ResidualStack, sublayer: str, contributions: str, norm: str, gain: float,
                 depth: int = MAX_DEPTH) -> np.ndarray:
    """|x_l| for l = 0..depth, averaged over N_TOKENS tokens, through the course's fixed 200-sublayer stack."""
    x0 = stream_tokens(N_TOKENS, D_MODEL, 1)
    with torch.no_grad():
        xs = residual_stack(x0, sublayer_stack(sublayer, contributions)[:depth], gain, norm)
    return vector_norm(xs).mean(-1).numpy()


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
    layers = (sublayer_stack("amplifies its input", "independent")[:depth] if seed == 0 and depth <= MAX_DEPTH
              else make_sublayers("amplifies its input", "independent", depth, D_MODEL, seed))
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
    grad_w = [vector_norm(torch.einsum("td,th->dh", o.grad, h).flatten()) for o, h in zip(outs, hiddens)]
    return {"x": torch.stack([x.detach() for x in xs]), "grad_x": torch.stack([x.grad for x in xs]),
            "grad_w": torch.stack(grad_w) if grad_w else torch.zeros(0, dtype=torch.float64)}


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
                      f"|x_l|  (mean over {N_TOKENS} tokens, d = {D_MODEL})", log_y=True, height=420)
    fig.update_yaxes(exponentformat="power")
    plain_trace = fig.add_scatter(mode="lines", name="without normalization",
                                  line=dict(color="#999999", width=2)).data[-1]
    measured_trace = fig.add_scatter(mode="lines", name="measured", line=dict(color=color(0), width=3)).data[-1]
    law_trace = fig.add_scatter(mode="lines", name="law", line=dict(color=color(1), width=2, dash="dash")).data[-1]
    float16_trace = fig.add_scatter(mode="lines", name="largest float16 (65504)",
                                    line=dict(color=color(3), dash="dot")).data[-1]
    float32_trace = fig.add_scatter(mode="lines", name="largest float32 (3.4e38)",
                                    line=dict(color=color(7), dash="dot")).data[-1]
    readout = widgets.HTML()
    controls = {
        "depth": widgets.IntSlider(value=50, min=1, max=MAX_DEPTH, description="depth L"),
        "gain": _gain_control(1.0),
        "contributions": widgets.Dropdown(options=list(CONTRIBUTIONS), value="independent",
                                          description="contributions"),
        "sublayer": widgets.Dropdown(options=list(SUBLAYER_KINDS), value="amplifies its input", description="sublayer"),
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
        with fig.batch_update():
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
        fig.add_scatter(y=log_axis_values(values), mode="lines", name=name, line=dict(color=color(j), width=3))
    fig.add_scatter(x=[0, max(len(v) for v in sizes.values()) - 1], y=[FLOAT16_MAX] * 2, mode="lines",
                    name="largest float16 (65504)", line=dict(color=color(3), dash="dot"))
    if first_inf is not None:
        fig.add_vline(x=first_inf, line=dict(color=color(1), dash="dash"),
                      annotation_text=f"first inf at layer {first_inf}")
    return fig


BACKWARD_DEPTHS = (10, 25, 50, 100, 200)


@register_panel()
def gradient_panel(residual_stack: ResidualStack) -> Panel:
    """Depth, gain, normalization and residual on/off -> gradient norms per layer (stream and sublayer weights)."""
    cache: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}

    def grads(depth, norm, gain, residual):
        key = (depth, norm, gain, residual)
        if key not in cache:
            out = backward_through_stack(residual_stack, depth, norm, gain, residual)
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
    }

    def update(depth, gain, norm, residual):
        depth, gain = _check_depth(depth), positive_number(gain, "gain")
        _check_choice(norm, STACK_NORMS, "normalization")
        if not isinstance(residual, (bool, np.bool_)):
            raise ValueError(f"residual must be True or False, got {residual!r}")
        gx, gw = grads(depth, norm, gain, bool(residual))
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
        readout.value = f"The gradient reaching x_0 is {verdict}."

    return Panel(controls, [readout, fig], update, title="The backward pass through the same stack")


HIST_DEPTH = 40
HIST_LAYERS = (0, 10, 20, 30, 40)
HIST_BINS = np.linspace(-60.0, 60.0, 481)  # log10 |value| in quarter decades; the plot zooms to where values are


def layer_histograms(residual_stack: ResidualStack, norm: str, gain: float,
                     n_tokens: int = 32) -> dict[str, np.ndarray]:
    """Histograms of log10|value| of the stream x_l and of dloss/dx_l at HIST_LAYERS, through HIST_DEPTH sublayers.

    Returns {"activations": (layers, bins), "gradients": (layers, bins), "edges": (bins + 1,),
    "activations_rms": (layers,), "gradients_rms": (layers,)}; counts are fractions of the layer's entries.
    """
    out = backward_through_stack(residual_stack, HIST_DEPTH, norm, gain, True, n_tokens=n_tokens)
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
            lines[histogram, j] = fig.add_scatter(x=centres, mode="lines", line=dict(color=color(j), shape="hvh"),
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
    layer sees what it sees in training). Returns norm, units, steps, loss (per step), quantiles (records, 3, units) and
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
    record = {"norm": norm, "units": units, "steps": [], "loss": [], "quantiles": [], "stopped": False}

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


class CovariateShiftDemo(TrainingDemo):
    """Two small networks trained side by side (no norm, BatchNorm), one hidden unit's input distribution plotted live.

    Display it; press Train both (a background run with progress and Stop) or call run(background=False) from code.
    A run's result is each network's train_shift_run record, by norm.
    """

    def __init__(self, steps: int = 150, lr: float = 0.1, unit: int = 0):
        self.unit = unit
        self.fig = live_subplots(
            1, 3, "Internal covariate shift: one hidden unit's input distribution during training", height=380,
            legend=dict(y=-0.3), subplot_titles=("training loss", "watched unit's input, no normalization",
                                                 "watched unit's input, with BatchNorm"))
        self.fig.update_xaxes(title_text="training step")
        self.fig.update_yaxes(title_text="cross-entropy loss", row=1, col=1)
        self.fig.update_yaxes(title_text="pre-activation value", row=1, col=2)
        self.fig.update_yaxes(title_text="pre-activation value", row=1, col=3)
        self._loss, self._quantiles = {}, {}
        for j, norm in enumerate(SHIFT_NORMS):
            self._loss[norm] = self.fig.add_scatter(mode="lines", name=f"loss, {norm}", line=dict(color=color(j)),
                                                    row=1, col=1).data[-1]
        for j, norm in enumerate(SHIFT_NORMS):
            self._quantiles[norm] = [
                self.fig.add_scatter(mode="lines", name=f"{int(qv * 100)}th percentile",
                                     line=dict(color=color(2 + k), width=3 if k == 1 else 1.5),
                                     legendgroup=str(k), showlegend=j == 0, row=1, col=2 + j).data[-1]
                for k, qv in enumerate(QUANTILES)]
        controls = {
            "lr": widgets.Dropdown(options=[0.02, 0.05, 0.1, 0.2], value=lr, description="learning rate"),
            "steps": widgets.IntSlider(value=steps, min=20, max=600, step=10, description="steps"),
        }
        super().__init__(controls, [self.fig], button="Train both")

    def _draw(self, record: dict) -> None:
        quantiles = np.asarray(record["quantiles"])
        with self.fig.batch_update():
            self._loss[record["norm"]].update(x=list(range(1, len(record["loss"]) + 1)), y=record["loss"])
            for k, trace in enumerate(self._quantiles[record["norm"]]):
                trace.update(x=record["steps"], y=quantiles[:, k, self.unit].tolist())

    def train(self, settings: dict, should_stop, progress) -> dict[str, dict]:
        lr, steps = settings["lr"], settings["steps"]
        results = {}
        for j, norm in enumerate(SHIFT_NORMS):
            def callback(step, record, j=j):
                self._draw(record)
                progress(j * steps + step, len(SHIFT_NORMS) * steps, f"{record['norm']}: step {step}")
            results[norm] = train_shift_run(norm, steps, lr, callback=callback, should_stop=should_stop)
            self._draw(results[norm])
        return results

    def summarize(self, results: dict[str, dict]) -> str:
        units = next(iter(results.values()))["units"]
        return message_html(f"Spread drift |log(spread now / spread at step 0)|, mean over {units} units: " + ", ".join(
            f"{n} {r['spread_drift']:.2f}" for n, r in results.items()), "info")


@register_panel()
def covariate_shift_demo(steps: int = 150, lr: float = 0.1) -> CovariateShiftDemo:
    """The covariate-shift experiment of notebook 01, ready to display and run."""
    return CovariateShiftDemo(steps, lr)

"""Notebook 03's widgets and figures: one token through LayerNorm, live, and the two classic implementation pitfalls.

The LayerNorm the learner reads is written in the notebook; this module only wires controls to figures.
"""
from __future__ import annotations

import math
import re

import ipywidgets as widgets
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots
from torch import Tensor

from ..figures import PALETTE, LiveFigure, color, live_figure
from ..panel import Panel, register_panel

__all__ = ["FORMULAS", "parse_features", "normalize_token", "token_panel", "pitfall_figure", "invariance_figure"]

MAX_FEATURES = 32
# value -> label of the formula dropdown; "correct" is what torch.nn.LayerNorm computes.
FORMULAS = {
    "correct": "correct: σ² divides by d, ε under the root",
    "unbiased": "pitfall: unbiased σ² (÷ d − 1, torch.var's default)",
    "eps_on_std": "pitfall: ε added to σ, not to σ²",
}
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


def parse_features(text: str) -> list[float]:
    """'1, 2, 3, 4' -> [1.0, 2.0, 3.0, 4.0]; commas or spaces separate; a ValueError says what is wrong."""
    parts = [p for p in re.split(r"[,\s;]+", text.strip()) if p]
    if not parts:
        raise ValueError("Type the token's features as numbers separated by commas, for example 1, 2, 3, 4.")
    bad = [p for p in parts if not _NUMBER.match(p)]
    if bad:
        raise ValueError(f"'{bad[0]}' is not a number. Type the features as numbers separated by commas, "
                         "for example 1, 2, 3, 4.")
    if len(parts) > MAX_FEATURES:
        raise ValueError(f"{len(parts)} features is more than this figure shows ({MAX_FEATURES}); delete some.")
    values = [float(p) for p in parts]
    if any(not math.isfinite(v) or abs(v) > 1e6 for v in values):
        raise ValueError("Keep every feature between -1e6 and 1e6.")
    return values


def normalize_token(x: Tensor, eps: float = 1e-5, formula: str = "correct") -> dict[str, Tensor]:
    """x: (d,) float64 -> μ, σ² (as the formula computes it), the denominator and x̂ = (x - μ) / denominator."""
    if formula not in FORMULAS:
        raise ValueError(f"formula must be one of {tuple(FORMULAS)}, got {formula!r}")
    d = x.shape[-1]
    mu = x.mean()
    if formula == "unbiased":
        if d < 2:
            raise ValueError("With one feature the unbiased variance divides by d - 1 = 0 and gives NaN: one more "
                             "reason LayerNorm divides by d. Add a feature or pick the correct formula.")
        var = ((x - mu) ** 2).sum() / (d - 1)
    else:
        var = ((x - mu) ** 2).mean()
    denominator = var.sqrt() + eps if formula == "eps_on_std" else (var + eps).sqrt()
    return {"mu": mu, "var": var, "denominator": denominator, "x_hat": (x - mu) / denominator}


def _bars_figure() -> go.FigureWidget:
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.07, subplot_titles=(
        "input a·x + b, with μ and μ ± σ", "normalized x̂", "output γ·x̂ + β"))
    fig = LiveFigure(fig)
    fig.add_bar(name="input features", marker_color=color(0), row=1, col=1)
    fig.add_scatter(name="mean μ", mode="lines", line=dict(color=color(7), width=2), row=1, col=1)
    fig.add_scatter(name="μ ± σ", mode="lines", line=dict(color=color(7), dash="dot"), row=1, col=1)
    fig.add_bar(name="x̂", marker_color=color(2), row=1, col=2)
    fig.add_bar(name="output (formula chosen)", marker_color=color(1), row=1, col=3)
    fig.add_scatter(name="F.layer_norm (reference)", mode="markers",
                    marker=dict(symbol="line-ew-open", size=18, color=color(7), line=dict(width=3)), row=1, col=3)
    fig.update_layout(title="One token through LayerNorm", height=380, template="plotly_white", colorway=PALETTE,
                      margin=dict(l=50, r=20, t=80, b=60), legend=dict(orientation="h", y=-0.25), bargap=0.25)
    for col in (1, 2, 3):
        fig.update_xaxes(title_text="feature k", dtick=1, row=1, col=col)
    for col, label in ((1, "input value (unitless)"), (2, "x̂ (unitless)"), (3, "output value (unitless)")):
        fig.update_yaxes(title_text=label, row=1, col=col)
    return fig


@register_panel("03_layernorm")
def token_panel() -> Panel:
    """Edit one token's features, a scale a and shift b applied to them, γ, β and ε; choose the correct formula or a
    pitfall. Bars show the input with μ and σ, x̂, and the output beside PyTorch's."""
    fig = _bars_figure()
    readout = widgets.HTML()
    shown: dict = {}  # what the figure shows now: its d and axis ranges
    slider = dict(continuous_update=True, style={"description_width": "initial"})
    controls = {
        "features": widgets.Text(value="1, 2, 3, 4", description="features x =", continuous_update=True,
                                 style={"description_width": "initial"}),
        "scale": widgets.FloatSlider(value=1.0, min=-3.0, max=3.0, step=0.1, description="scale a", **slider),
        "shift": widgets.FloatSlider(value=0.0, min=-10.0, max=10.0, step=0.5, description="shift b", **slider),
        "gamma": widgets.FloatSlider(value=1.0, min=-2.0, max=2.0, step=0.1, description="γ (every feature)",
                                     **slider),
        "beta": widgets.FloatSlider(value=0.0, min=-2.0, max=2.0, step=0.1, description="β (every feature)", **slider),
        "eps": widgets.FloatLogSlider(value=1e-5, base=10, min=-8, max=0, step=0.5, description="ε",
                                      readout_format=".0e", **slider),
        "formula": widgets.Dropdown(options=[(label, key) for key, label in FORMULAS.items()], value="correct",
                                    description="formula", layout=widgets.Layout(width="420px")),
    }

    def update(features: str, scale: float, shift: float, gamma: float, beta: float, eps: float,
               formula: str) -> None:
        raw = parse_features(features)
        d = len(raw)
        x = torch.tensor(raw, dtype=torch.float64) * scale + shift
        stats = normalize_token(x, eps, formula)
        y = gamma * stats["x_hat"] + beta
        reference = torch.nn.functional.layer_norm(x, (d,), torch.full((d,), float(gamma), dtype=torch.float64),
                                                   torch.full((d,), float(beta), dtype=torch.float64), eps)
        ks = list(range(1, d + 1))
        mu, sigma = float(stats["mu"]), math.sqrt(float(stats["var"]))
        # Axes fixed by the features and the slider ranges, so moving a slider moves bars, not the axes.
        reach = 3.0 * max(abs(v) for v in raw) + 10.0
        x_hat_reach = max(1.5, 1.15 * math.sqrt(max(d - 1, 1)))
        ranges = (reach, x_hat_reach)
        with fig.batch_update():
            if shown.get("d") != d:  # set x positions and axes only when they change: each plotly set costs time
                fig.data[0].x = fig.data[3].x = fig.data[4].x = fig.data[5].x = ks
                fig.data[1].x, fig.data[2].x = [0.5, d + 0.5], [0.5, d + 0.5, None, 0.5, d + 0.5]
                shown["d"] = d
            if shown.get("ranges") != ranges:
                fig.layout.yaxis.range = [-reach, reach]
                fig.layout.yaxis2.range = [-x_hat_reach, x_hat_reach]
                fig.layout.yaxis3.range = [-(2 * x_hat_reach + 2.2), 2 * x_hat_reach + 2.2]
                shown["ranges"] = ranges
            fig.data[0].y = x.tolist()
            fig.data[1].y = [mu, mu]
            fig.data[2].y = [mu + sigma] * 2 + [None] + [mu - sigma] * 2
            fig.data[3].y = stats["x_hat"].tolist()
            fig.data[4].y = y.tolist()
            fig.data[5].y = reference.tolist()
        gap = float((y - reference).abs().max())
        notes = []
        if float(stats["var"]) == 0.0:
            notes.append("All features are equal: σ² = 0, so x̂ = 0/√ε = 0 and the output is β. ε is what keeps "
                         "this from being 0/0.")
        elif float(stats["var"]) < 100 * eps:
            notes.append("σ² is not much larger than ε here, so ε shrinks x̂ noticeably: LayerNorm is no longer "
                         "invariant to the scale a.")
        if scale < 0:
            notes.append("a < 0 flips the sign of x − μ but not of σ: x̂ flips sign.")
        if d == 1:
            notes.append("With one feature x − μ = 0: LayerNorm over a single feature always outputs β.")
        verdict = ("matches F.layer_norm" if gap < 1e-9 else f"differs from F.layer_norm by up to {gap:.3g}")
        readout.value = (f"d = {d} &nbsp; μ = {mu:.4g} &nbsp; σ² = {float(stats['var']):.4g} &nbsp; "
                         f"√(σ² + ε) = {float(stats['denominator']):.4g} &nbsp;|&nbsp; output {verdict}"
                         + "".join(f"<br><i>{n}</i>" for n in notes))

    return Panel(controls, [readout, fig], update, title="Edit one token and watch LayerNorm's steps")


def pitfall_figure(ds: list[int], unbiased_error: list[float], eps_error: list[float], scales: list[float],
                   eps_error_by_scale: list[float], unbiased_error_by_scale: list[float]) -> go.Figure:
    """Two log-log panels: each pitfall's largest error against d (inputs of unit spread), and against the input's
    spread (at a fixed d)."""
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12, subplot_titles=(
        "error against the width d (features ~ N(0, 1))", "error against the input's spread (d fixed)"))
    fig.add_scatter(x=ds, y=unbiased_error, name="unbiased variance (÷ d − 1)", mode="lines+markers",
                    line=dict(color=color(1)), row=1, col=1)
    fig.add_scatter(x=ds, y=eps_error, name="ε added to σ", mode="lines+markers", line=dict(color=color(0)),
                    row=1, col=1)
    fig.add_scatter(x=scales, y=unbiased_error_by_scale, name="unbiased variance (÷ d − 1)", mode="lines+markers",
                    line=dict(color=color(1)), showlegend=False, row=1, col=2)
    fig.add_scatter(x=scales, y=eps_error_by_scale, name="ε added to σ", mode="lines+markers",
                    line=dict(color=color(0)), showlegend=False, row=1, col=2)
    fig.update_layout(title="How far each pitfall drifts from F.layer_norm (largest |difference| over 256 tokens)",
                      height=400, template="plotly_white", colorway=PALETTE, margin=dict(l=60, r=20, t=80, b=60),
                      legend=dict(orientation="h", y=-0.25))
    fig.update_xaxes(type="log", title_text="width d (features per token)", row=1, col=1)
    fig.update_xaxes(type="log", title_text="standard deviation of the input's features", row=1, col=2)
    fig.update_yaxes(type="log", title_text="largest |error| in x̂", row=1, col=1)
    fig.update_yaxes(type="log", title_text="largest |error| in x̂", row=1, col=2)
    return fig


def invariance_figure(scales: list[float], gaps: list[float], eps: float) -> go.Figure:
    """How far LN(a·x + b) is from LN(x) as the scale a shrinks towards √ε."""
    fig = live_figure("LN(a·x + b) against LN(x): exact until a·σ nears √ε", "scale a (log)",
                      "largest |LN(a·x + b) − LN(x)|", log_x=True, log_y=True, widget=False)
    fig.add_scatter(x=scales, y=gaps, mode="lines+markers", name="largest difference over the tokens")
    fig.add_vline(x=math.sqrt(eps), line_dash="dot", annotation_text="a = √ε", line_color=color(7))
    return fig

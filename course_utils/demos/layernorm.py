"""Notebook 03's widgets and figures: one token through LayerNorm, live, and the two classic implementation pitfalls.

The LayerNorm the learner reads is written in the notebook; this module only wires controls to figures.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import ipywidgets as widgets
import plotly.graph_objects as go
import torch
from torch import Tensor

from ..figures import color, live_subplots, static_figure, static_subplots
from ..panel import Panel, parse_features, register_panel

__all__ = ["FORMULAS", "token_panel", "pitfall_figure", "invariance_figure"]

# value -> label of the formula dropdown; "correct" is what torch.nn.LayerNorm computes.
FORMULAS = {
    "correct": "correct: σ² divides by d, ε under the root",
    "unbiased": "pitfall: unbiased σ² (÷ d − 1, torch.var's default)",
    "eps_on_std": "pitfall: ε added to σ, not to σ²",
}


# A lesson function of notebook 03: x (..., d) -> x̂ over the last dimension; called as f(x, eps=eps).
Normalize = Callable[..., Tensor]


def _token_stats(x: Tensor, eps: float, formula: str) -> dict[str, float]:
    """The readout's numbers for x (d,): μ, σ² as the formula computes it, and what it divides x − μ by."""
    if formula not in FORMULAS:
        raise ValueError(f"formula must be one of {tuple(FORMULAS)}, got {formula!r}")
    d = x.shape[-1]
    if formula == "unbiased" and d < 2:
        raise ValueError("With one feature the unbiased variance divides by d - 1 = 0 and gives NaN: one more "
                         "reason LayerNorm divides by d. Add a feature or pick the correct formula.")
    mu = x.mean()
    var = float(((x - mu) ** 2).sum()) / (d - 1 if formula == "unbiased" else d)
    denominator = math.sqrt(var) + eps if formula == "eps_on_std" else math.sqrt(var + eps)
    label = "σ + ε" if formula == "eps_on_std" else "√(σ² + ε)"
    return {"mu": float(mu), "var": var, "denominator": denominator, "denominator_label": label}


def _bars_figure() -> tuple[go.FigureWidget, dict]:
    """token_panel's three panels, and their traces by what they show."""
    fig = live_subplots(1, 3, "One token through LayerNorm", height=380, margin=dict(l=50, b=60),
                        horizontal_spacing=0.07,
                        subplot_titles=("input a·x + b, with μ and μ ± σ", "normalized x̂", "output γ·x̂ + β"))
    traces = {
        "input": fig.add_bar(name="input features", marker_color=color(0), row=1, col=1).data[-1],
        "mean": fig.add_scatter(name="mean μ", mode="lines", line=dict(color=color(7), width=2),
                                row=1, col=1).data[-1],
        "spread": fig.add_scatter(name="μ ± σ", mode="lines", line=dict(color=color(7), dash="dot"),
                                  row=1, col=1).data[-1],
        "x_hat": fig.add_bar(name="x̂", marker_color=color(2), row=1, col=2).data[-1],
        "output": fig.add_bar(name="output (formula chosen)", marker_color=color(1), row=1, col=3).data[-1],
        "reference": fig.add_scatter(name="F.layer_norm (reference)", mode="markers",
                                     marker=dict(symbol="line-ew-open", size=18, color=color(7), line=dict(width=3)),
                                     row=1, col=3).data[-1],
    }
    fig.update_layout(bargap=0.25)
    for col in (1, 2, 3):
        fig.update_xaxes(title_text="feature k", dtick=1, row=1, col=col)
    for col, label in ((1, "input value (unitless)"), (2, "x̂ (unitless)"), (3, "output value (unitless)")):
        fig.update_yaxes(title_text=label, row=1, col=col)
    return fig, traces


@register_panel()
def token_panel(layer_norm: Normalize, layer_norm_unbiased: Normalize, layer_norm_eps_on_std: Normalize) -> Panel:
    """Edit one token's features, a scale a and shift b applied to them, γ, β and ε; choose notebook 03's layer_norm
    or one of its two pitfalls. Bars show the input with μ and σ, x̂, and the output beside PyTorch's."""
    normalize = {"correct": layer_norm, "unbiased": layer_norm_unbiased, "eps_on_std": layer_norm_eps_on_std}
    fig, traces = _bars_figure()
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
        stats = _token_stats(x, eps, formula)
        x_hat = normalize[formula](x, eps=eps)
        y = gamma * x_hat + beta
        reference = torch.nn.functional.layer_norm(x, (d,), torch.full((d,), float(gamma), dtype=torch.float64),
                                                   torch.full((d,), float(beta), dtype=torch.float64), eps)
        ks = list(range(1, d + 1))
        mu, sigma = stats["mu"], math.sqrt(stats["var"])
        # Axes fixed by the features and the slider ranges, so moving a slider moves bars, not the axes.
        reach = 3.0 * max(abs(v) for v in raw) + 10.0
        x_hat_reach = max(1.5, 1.15 * math.sqrt(max(d - 1, 1)))
        ranges = (reach, x_hat_reach)
        with fig.batch_update():
            if shown.get("d") != d:  # set x positions and axes only when they change: each plotly set costs time
                for name in ("input", "x_hat", "output", "reference"):
                    traces[name].x = ks
                traces["mean"].x, traces["spread"].x = [0.5, d + 0.5], [0.5, d + 0.5, None, 0.5, d + 0.5]
                shown["d"] = d
            if shown.get("ranges") != ranges:
                fig.layout.yaxis.range = [-reach, reach]
                fig.layout.yaxis2.range = [-x_hat_reach, x_hat_reach]
                fig.layout.yaxis3.range = [-(2 * x_hat_reach + 2.2), 2 * x_hat_reach + 2.2]
                shown["ranges"] = ranges
            traces["input"].y = x.tolist()
            traces["mean"].y = [mu, mu]
            traces["spread"].y = [mu + sigma] * 2 + [None] + [mu - sigma] * 2
            traces["x_hat"].y = x_hat.tolist()
            traces["output"].y = y.tolist()
            traces["reference"].y = reference.tolist()
        gap = float((y - reference).abs().max())
        notes = []
        if stats["var"] == 0.0:
            notes.append("All features are equal: σ² = 0, so x̂ = 0/√ε = 0 and the output is β. ε is what keeps "
                         "this from being 0/0.")
        elif stats["var"] < 100 * eps:
            notes.append("σ² is not much larger than ε here, so ε shrinks x̂ noticeably: LayerNorm is no longer "
                         "invariant to the scale a.")
        if scale < 0:
            notes.append("a < 0 flips the sign of x − μ but not of σ: x̂ flips sign.")
        if d == 1:
            notes.append("With one feature x − μ = 0: LayerNorm over a single feature always outputs β.")
        verdict = ("matches F.layer_norm" if gap < 1e-9 else f"differs from F.layer_norm by up to {gap:.3g}")
        readout.value = (f"d = {d} &nbsp; μ = {mu:.4g} &nbsp; σ² = {stats['var']:.4g} &nbsp; "
                         f"{stats['denominator_label']} = {stats['denominator']:.4g} &nbsp;|&nbsp; output {verdict}"
                         + "".join(f"<br><i>{n}</i>" for n in notes))

    return Panel(controls, [readout, fig], update, title="Edit one token and watch LayerNorm's steps")


def pitfall_figure(ds: list[int], unbiased_error: list[float], eps_error: list[float], scales: list[float],
                   eps_error_by_scale: list[float], unbiased_error_by_scale: list[float]) -> go.Figure:
    """Two log-log panels: each pitfall's largest error against d (inputs of unit spread), and against the input's
    spread (at a fixed d)."""
    fig = static_subplots(1, 2, "How far each pitfall drifts from F.layer_norm (largest |difference| over 256 tokens)",
                          height=400, margin=dict(b=60), horizontal_spacing=0.12,
                          subplot_titles=("error against the width d (features ~ N(0, 1))",
                                          "error against the input's spread (d fixed)"))
    fig.add_scatter(x=ds, y=unbiased_error, name="unbiased variance (÷ d − 1)", mode="lines+markers",
                    line=dict(color=color(1)), row=1, col=1)
    fig.add_scatter(x=ds, y=eps_error, name="ε added to σ", mode="lines+markers", line=dict(color=color(0)),
                    row=1, col=1)
    fig.add_scatter(x=scales, y=unbiased_error_by_scale, name="unbiased variance (÷ d − 1)", mode="lines+markers",
                    line=dict(color=color(1)), showlegend=False, row=1, col=2)
    fig.add_scatter(x=scales, y=eps_error_by_scale, name="ε added to σ", mode="lines+markers",
                    line=dict(color=color(0)), showlegend=False, row=1, col=2)
    fig.update_xaxes(type="log", title_text="width d (features per token)", row=1, col=1)
    fig.update_xaxes(type="log", title_text="standard deviation of the input's features", row=1, col=2)
    fig.update_yaxes(type="log", title_text="largest |error| in x̂", row=1, col=1)
    fig.update_yaxes(type="log", title_text="largest |error| in x̂", row=1, col=2)
    return fig


def invariance_figure(scales: list[float], gaps: list[float], eps: float) -> go.Figure:
    """How far LN(a·x + b) is from LN(x) as the scale a shrinks towards √ε."""
    fig = static_figure("LN(a·x + b) against LN(x): exact until a·σ nears √ε", "scale a (log)",
                        "largest |LN(a·x + b) − LN(x)|", log_x=True, log_y=True)
    fig.add_scatter(x=scales, y=gaps, mode="lines+markers", name="largest difference over the tokens")
    fig.add_vline(x=math.sqrt(eps), line_dash="dot", annotation_text="a = √ε", line_color=color(7))
    return fig

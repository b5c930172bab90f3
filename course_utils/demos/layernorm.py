"""Notebook 03's widgets, figures and claim experiments: one token through LayerNorm, live; the two classic
implementation pitfalls; the plane-and-sphere picture; gradients through LayerNorm; what γ and β cannot undo.

The LayerNorm the learner reads (and its Jacobian) is written in the notebook and handed in; this module holds the
measurements the notebook's claim cells and their robustness experiments share (`@claim_experiment`, C15-C20 and
C62-C65), so a claim cell and its seed sweep run the same code.
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import ipywidgets as widgets
import plotly.graph_objects as go
import torch
from torch import Tensor

from ..evidence import Outcome, Setting, claim_experiment
from ..figures import color, dash, live_figure, live_subplots, marker, static_figure, static_subplots
from ..panel import Panel, choice, parse_features, register_panel

__all__ = ["FORMULAS", "token_panel", "pitfall_figure", "invariance_figure", "sphere_panel", "chapter_statistics",
           "compare_with_pytorch", "pitfall_errors", "invariance_gaps", "scale_gaps", "batch_independence",
           "pitfall_verdict", "varied_tokens", "sphere_and_plane", "random_token", "jacobian_check", "jacobian_verdict",
           "gradient_by_scale", "tenfold_steps", "undo_with_gamma_beta", "two_tokens", "DS", "SPREADS", "SCALES",
           "chapter_checks", "pytorch_checks", "invariance_checks", "scale_checks", "independence_checks",
           "sphere_checks", "jacobian_checks", "tenfold_holds", "undo_checks", "INVARIANCE_EXACT",
           "INVARIANCE_WITH_EPS", "BENT_AT_1E3", "ON_SPHERE", "JACOBIAN_TOL", "TENFOLD_TOL", "EPS_CAPS_BELOW",
           "UNRESTORED", "SAME_OUTPUT", "OFF_SPHERE", "RESTORED"]

# value -> (button label, its tooltip) of the formula buttons; "correct" is what torch.nn.LayerNorm computes.
FORMULAS = {
    "correct": ("correct", "correct: σ² divides by d, ε under the root"),
    "unbiased": ("pitfall: unbiased σ²", "pitfall: unbiased σ² (÷ d − 1, torch.var's default)"),
    "eps_on_std": ("pitfall: ε on σ", "pitfall: ε added to σ, not to σ²"),
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
    fig = live_subplots(1, 3, "One token through LayerNorm", height=350, horizontal_spacing=0.06,
                        subplot_titles=("input a·x + b", "normalized x̂", "output γ·x̂ + β"))
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
    # Only the first plot has a y-axis title: the subplot titles say what the other two show, and a title squeezed
    # between two plots would sit on the tick labels of its neighbour.
    fig.update_yaxes(title_text="value (unitless)", row=1, col=1)
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
    # Two controls a row (a slider with its full label takes a third of a laptop's column): the formula's buttons
    # beside the features, then the sliders in pairs.
    controls = {
        "features": widgets.Text(value="1, 2, 3, 4", description="features x =", continuous_update=True,
                                 style={"description_width": "initial"}),
        "formula": choice([(label, key) for key, (label, _) in FORMULAS.items()], value="correct",
                          description="formula", tooltips=[tip for _, tip in FORMULAS.values()],
                          layout=widgets.Layout(width="auto")),  # its buttons on one line beside the features
        "scale": widgets.FloatSlider(value=1.0, min=-3.0, max=3.0, step=0.1, description="scale a", **slider),
        "shift": widgets.FloatSlider(value=0.0, min=-10.0, max=10.0, step=0.5, description="shift b", **slider),
        "gamma": widgets.FloatSlider(value=1.0, min=-2.0, max=2.0, step=0.1, description="γ (every feature)",
                                     **slider),
        "beta": widgets.FloatSlider(value=0.0, min=-2.0, max=2.0, step=0.1, description="β (every feature)", **slider),
        "eps": widgets.FloatLogSlider(value=1e-5, base=10, min=-8, max=0, step=0.5, description="ε",
                                      readout_format=".0e", **slider),
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

    return Panel(controls, [readout, fig], update, title="Edit one token and watch LayerNorm's steps", columns=2)


def pitfall_figure(ds: list[int], unbiased_error: list[float], eps_error: list[float], scales: list[float],
                   eps_error_by_scale: list[float], unbiased_error_by_scale: list[float]) -> go.Figure:
    """Two log-log panels: each pitfall's largest error against d (inputs of unit spread), and against the input's
    spread (at a fixed d)."""
    fig = static_subplots(1, 2, "How far each pitfall drifts from F.layer_norm (largest |difference| over 256 tokens)",
                          height=400, horizontal_spacing=0.12,
                          subplot_titles=("error against the width d (features ~ N(0, 1))",
                                          "error against the input's spread (d fixed)"))
    # Each pitfall keeps its colour, dash and marker in both plots; the legend names them once.
    styles = {"unbiased variance (÷ d − 1)": 1, "ε added to σ": 0}
    for col, (x, errors) in enumerate(((ds, (unbiased_error, eps_error)),
                                       (scales, (unbiased_error_by_scale, eps_error_by_scale))), start=1):
        for (name, i), y in zip(styles.items(), errors):
            fig.add_scatter(x=x, y=y, name=name, mode="lines+markers", showlegend=col == 1,
                            line=dict(color=color(i), dash=dash(i)), marker=dict(symbol=marker(i), size=8),
                            row=1, col=col)
    fig.update_xaxes(type="log", title_text="width d (features per token)", row=1, col=1)
    fig.update_xaxes(type="log", title_text="standard deviation of the input's features", row=1, col=2)
    fig.update_yaxes(type="log", title_text="largest |error| in x̂", row=1, col=1)
    fig.update_yaxes(type="log", title_text="largest |error| in x̂", row=1, col=2)
    return fig


def invariance_figure(scales: list[float], gaps: list[float], eps: float) -> go.Figure:
    """How far LN(a·x) is from LN(x) as the scale a shrinks towards √ε. A gap of exactly 0 (at a = 1, where a·x is x)
    has no place on a log axis, so it is drawn at the axis floor with its own marker and legend entry."""
    positive = [g for g in gaps if g > 0]
    floor = min(positive) / 100 if positive else 1e-17
    top = max(positive) * 3 if positive else 1.0
    fig = static_figure(f"LN(a·x) against LN(x), ε = {eps:g}: exact until a·σ nears √ε",
                        "scale a (tokens of spread about 1, so a·σ ≈ a; log scale)",
                        "largest |LN(a·x) − LN(x)|", log_x=True, log_y=True)
    fig.add_scatter(x=list(scales), y=[g if g > 0 else None for g in gaps], mode="lines+markers",  # a 0 breaks the line
                    name="largest difference over the tokens", line=dict(color=color(0), dash=dash(0)),
                    marker=dict(symbol=marker(0), size=9))
    zeros = [a for a, g in zip(scales, gaps) if g == 0]
    if zeros:
        fig.add_scatter(x=zeros, y=[floor] * len(zeros), mode="markers", marker=dict(symbol=marker(4), size=12,
                        color=color(1)), name=f"exactly 0 (a = {', '.join(f'{a:g}' for a in zeros)}), drawn at the "
                                              f"floor {floor:.0e}")
    # The √ε line is a trace, not add_vline: plotly places a vline's label by the log of x on a log axis (at a ≈ 1).
    fig.add_scatter(x=[math.sqrt(eps)] * 2, y=[floor, top], mode="lines", line=dict(color=color(7), dash=dash(2)),
                    name=f"a = √ε ≈ {math.sqrt(eps):.4f}")
    return fig


# ---- shared measurements: each claim cell of notebook 03 and its robustness experiment call these ----------------

DS = (2, 4, 8, 16, 32, 64, 256, 1024, 4096)                  # widths of the pitfall sweep
SPREADS = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 1.0, 10.0)  # input spreads of the pitfall sweep, at d = 64
SCALES = tuple(10.0 ** k for k in range(-5, 2))              # the scales a of the ε sweep


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _close(actual: Tensor, expected: Tensor, **tolerance) -> bool:
    """torch.testing.assert_close as a bool: what a claim cell asserts, for its experiment to count."""
    try:
        torch.testing.assert_close(actual, expected, **tolerance)
    except AssertionError:
        return False
    return True


def chapter_statistics(layer_norm: Callable, x: Tensor, correction: int = 0) -> dict:
    """μ and σ² of one token x (d,) as LayerNorm computes them (correction 0: divide by d; 1: by d - 1), and its x̂."""
    mu = x.mean()
    var = ((x - mu) ** 2).sum() / (x.shape[-1] - correction)
    return {"mu": mu.item(), "var": var.item(), "x_hat": layer_norm(x, eps=0.0)}


def chapter_checks(stats: dict, x: Tensor) -> dict[str, bool]:
    """C15's checks on chapter_statistics of a permutation x of (1, 2, 3, 4), by name (the claim cell asserts them)."""
    x_hat = stats["x_hat"]
    return {"μ = 2.5 exactly": stats["mu"] == 2.5, "σ² = 1.25 exactly": stats["var"] == 1.25,
            "x̂ = (x - 2.5)/√1.25": _close(x_hat, (x - 2.5) / math.sqrt(1.25)),
            "x̂ has mean 0": _close(x_hat.mean(), torch.tensor(0.0)),
            "x̂ has variance 1": _close(((x_hat - x_hat.mean()) ** 2).mean(), torch.tensor(1.0))}


@claim_experiment("C15", statement="For x = (1, 2, 3, 4), in any order: μ = 2.5 and σ² = 1.25 exactly, and x̂ = "
                  "(x - 2.5)/√1.25 has mean 0 and variance 1",
                  figure="σ² as computed (LayerNorm's: 1.25)", kind="exact",
                  settings=[Setting("σ² divides by d", {"correction": 0}),
                            Setting("σ² divides by d - 1 (torch.var's default): control", {"correction": 1},
                                    expect=False, fixed="σ² = 5/3, not 1.25, by arithmetic: the divisor is the "
                                                        "demo's, not the lesson's")])
def chapter_statistics_claim(seed, layer_norm, *, correction=0):
    x = torch.tensor([1.0, 2.0, 3.0, 4.0])[torch.randperm(4, generator=_generator(seed))]
    stats = chapter_statistics(layer_norm, x, correction)
    return Outcome.of_checks(chapter_checks(stats, x), stats["var"], f"x = {x.tolist()}, μ = {stats['mu']}")


def compare_with_pytorch(layer_norm: Callable, seed: int, shape=(8, 10, 64), eps: float = 1e-5) -> dict:
    """A hand-written layer_norm(x, weight, bias, eps) against F.layer_norm and nn.LayerNorm: forward in float32,
    gradients for x, γ, β in float64 under one random upstream gradient. Returns the pairs to compare."""
    gen = _generator(seed)
    d = shape[-1]
    x = torch.randn(*shape, generator=gen)
    weight = torch.rand(d, generator=gen) + 0.5
    bias = torch.randn(d, generator=gen)
    ours = layer_norm(x, weight, bias, eps=eps)
    module = torch.nn.LayerNorm(d, eps=eps)
    with torch.no_grad():
        module.weight.copy_(weight)
        module.bias.copy_(bias)
        by_module = module(x)
    inputs = [t.double().requires_grad_() for t in (x, weight, bias)]
    copies = [t.detach().clone().requires_grad_() for t in inputs]
    probe = torch.randn(*shape, generator=gen, dtype=torch.float64)  # a random upstream gradient
    (layer_norm(*inputs, eps=eps) * probe).sum().backward()
    (torch.nn.functional.layer_norm(copies[0], (d,), copies[1], copies[2], eps=eps) * probe).sum().backward()
    return {"ours": ours, "theirs": torch.nn.functional.layer_norm(x, (d,), weight, bias, eps=eps),
            "module": by_module, "grads": [(name, a.grad, b.grad) for name, a, b in zip(["x", "γ", "β"], inputs,
                                                                                          copies)]}


def pytorch_checks(r: dict) -> dict[str, bool]:
    """C16's checks on compare_with_pytorch, by name: each pair within torch.testing.assert_close's tolerances."""
    return {"forward = F.layer_norm (float32)": _close(r["ours"], r["theirs"]),
            "forward = nn.LayerNorm (float32)": _close(r["ours"], r["module"]),
            **{f"gradient for {name} = PyTorch's (float64)": _close(a, b) for name, a, b in r["grads"]}}


@claim_experiment("C16", statement="The hand-written layer_norm matches F.layer_norm and nn.LayerNorm in the forward "
                  "pass (float32) and in the gradients for x, γ and β (float64), within assert_close's tolerances",
                  figure="largest |ours - F.layer_norm|, forward, float32", kind="roundoff",
                  settings=[Setting("(8, 10, 64), ε = 1e-5", {}),
                            Setting("(4, 3, 1): d = 1", {"shape": (4, 3, 1)}),
                            Setting("(2, 5, 768), ε = 0.1", {"shape": (2, 5, 768), "eps": 0.1}),
                            Setting("the unbiased-variance pitfall in its place: control", {"formula": "unbiased"},
                                    expect=False)])
def compare_with_pytorch_claim(seed, layer_norm, layer_norm_unbiased, *, shape=(8, 10, 64), eps=1e-5,
                               formula="correct"):
    fn = layer_norm if formula == "correct" else (
        lambda x, w, b, eps=1e-5: layer_norm_unbiased(x, eps=eps) * w + b)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the pitfall at d - 1 = 0 warns; the comparison says what it did
        r = compare_with_pytorch(fn, seed, shape, eps)
    return Outcome.of_checks(pytorch_checks(r), (r["ours"] - r["theirs"]).abs().max().item(),
                   "largest gradient gap " + f"{max((a - b).abs().max().item() for _, a, b in r['grads']):.1e}")


def _largest_errors(layer_norm_unbiased: Callable, layer_norm_eps_on_std: Callable, x: Tensor, eps=1e-5):
    reference = torch.nn.functional.layer_norm(x, x.shape[-1:], eps=eps)
    return ((layer_norm_unbiased(x, eps=eps) - reference).abs().max().item(),
            (layer_norm_eps_on_std(x, eps=eps) - reference).abs().max().item(),
            reference.abs().max().item())


def pitfall_errors(layer_norm: Callable, layer_norm_unbiased: Callable, layer_norm_eps_on_std: Callable, seed: int,
                   ds=DS, spreads=SPREADS) -> dict:
    """Each pitfall's largest |error| in x̂ against F.layer_norm over 256 float64 tokens: by width d (unit spread) and
    by input spread (d = 64); per d, the largest gap between LN_unbiased(x)/LN(x) and √((d-1)/d) at ε = 0, and the
    smallest spread σ among the 256 unit-spread tokens (a chance small spread is what the ε-on-σ error feeds on)."""
    gen = _generator(seed)
    by_width = [torch.randn(256, d, generator=gen, dtype=torch.float64) for d in ds]
    by_d = [_largest_errors(layer_norm_unbiased, layer_norm_eps_on_std, x) for x in by_width]
    min_spread = {d: x.var(-1, unbiased=False).sqrt().min().item() for d, x in zip(ds, by_width)}
    base = torch.randn(256, 64, generator=gen, dtype=torch.float64)
    by_spread = [_largest_errors(layer_norm_unbiased, layer_norm_eps_on_std, base * s) for s in spreads]
    ratio_gap = {}
    for d in ds:
        x = torch.randn(64, d, generator=gen, dtype=torch.float64)
        exact = layer_norm(x, eps=0.0)
        ratio = (layer_norm_unbiased(x, eps=0.0) / exact)[exact.abs() > 1e-6]  # skip 0/0 entries, if any
        ratio_gap[d] = (ratio - math.sqrt((d - 1) / d)).abs().max().item()
    return {"ds": list(ds), "by_d": by_d, "spreads": list(spreads), "by_spread": by_spread, "ratio_gap": ratio_gap,
            "min_spread": min_spread}


def pitfall_verdict(sweep: dict) -> dict[str, bool]:
    """The checks notebook 03's claim cell C17 asserts, by name (the notebook prints and asserts each one)."""
    unbiased_at = {d: u for d, (u, _, _) in zip(sweep["ds"], sweep["by_d"])}
    eps_at_spread = {s: e for s, (_, e, _) in zip(sweep["spreads"], sweep["by_spread"])}
    return {
        "shrinks x̂ by exactly √((d-1)/d)": max(sweep["ratio_gap"].values()) < 1e-9,
        "measured largest error = predicted": all(
            abs(u - (1 - math.sqrt((d - 1) / d)) * top) <= 1e-3 * u for d, (u, _, top) in zip(sweep["ds"],
                                                                                               sweep["by_d"])),
        "unbiased: above 0.25 at d = 2, below 1e-3 at d = 4096": unbiased_at[2] > 0.25 and unbiased_at[4096] < 1e-3,
        "ε on σ: below 1e-3 at unit spread for d ≥ 8": max(e for d, (_, e, _) in zip(sweep["ds"], sweep["by_d"])
                                                            if d >= 8) < 1e-3,
        "ε on σ: below 1e-4 at spread 1, above 0.5 at spread 1e-3": (eps_at_spread[1.0] < 1e-4
                                                                     and eps_at_spread[1e-3] > 0.5),
    }


@claim_experiment("C17", statement="Dividing by d - 1 shrinks x̂ by exactly √((d-1)/d): the largest error is the "
                  "predicted one, above 0.25 at d = 2 and below 1e-3 at d = 4096; ε added to σ stays below 1e-3 at "
                  "unit spread (d ≥ 8) and exceeds 0.5 at spread 1e-3",
                  figure="largest error of the unbiased variance at d = 64", kind="exact",
                  settings=[Setting("features N(0, 1)", {}),
                            Setting("the correct formula posing as the pitfall: control (no shrink)",
                                    {"pitfall": "none"}, expect=False)])
def pitfall_claim(seed, layer_norm, layer_norm_unbiased, layer_norm_eps_on_std, *, pitfall="unbiased"):
    unbiased = layer_norm_unbiased if pitfall == "unbiased" else layer_norm
    sweep = pitfall_errors(layer_norm, unbiased, layer_norm_eps_on_std, seed)
    verdict = pitfall_verdict(sweep)
    failed = [name for name, ok in verdict.items() if not ok]
    return Outcome(not failed, sweep["by_d"][sweep["ds"].index(64)][0], "failed: " + "; ".join(failed) if failed
                   else "all five checks pass")


def invariance_gaps(layer_norm: Callable, seed: int, *, n: int = 6, d: int = 32, a_range=(0.5, 10.5),
                    shift_sd: float = 100.0, per_feature_shift: bool = False) -> dict:
    """Tokens x (n, d) in float64, one scale a per token drawn from a_range and one shift b (a vector per token if
    per_feature_shift): the largest |LN(a·x + b) - LN(x)| at ε = 0 and at ε = 1e-5, and of LN(-x) + LN(x) at ε = 0."""
    gen = _generator(seed)
    x = torch.randn(n, d, generator=gen, dtype=torch.float64)
    lo, hi = a_range
    a = torch.rand(n, 1, generator=gen, dtype=torch.float64) * (hi - lo) + lo
    b = torch.randn(n, d if per_feature_shift else 1, generator=gen, dtype=torch.float64) * shift_sd
    return {"x": x, "exact": (layer_norm(a * x + b, eps=0.0) - layer_norm(x, eps=0.0)).abs().max().item(),
            "with_eps": (layer_norm(a * x + b) - layer_norm(x)).abs().max().item(),
            "flip": (layer_norm(-x, eps=0.0) + layer_norm(x, eps=0.0)).abs().max().item()}


INVARIANCE_EXACT = 1e-10  # float64 rounding: the ε = 0 invariance and the sign flip hold to this
INVARIANCE_WITH_EPS = 1e-4  # ε = 1e-5 bends the invariance by less than this for a in [0.5, 10.5]


def invariance_checks(r: dict) -> dict[str, bool]:
    """C18's checks on invariance_gaps, by name."""
    return {f"ε = 0: LN(a·x + b) = LN(x) within {INVARIANCE_EXACT:g}": r["exact"] < INVARIANCE_EXACT,
            f"ε = 1e-5: within {INVARIANCE_WITH_EPS:g}": r["with_eps"] < INVARIANCE_WITH_EPS,
            f"LN(-x) = -LN(x) within {INVARIANCE_EXACT:g}": r["flip"] < INVARIANCE_EXACT}


@claim_experiment("C18", statement="LN(a·x + b) = LN(x) per token, each with its own a > 0 and scalar shift b: "
                  "within 1e-10 at ε = 0 and 1e-4 at ε = 1e-5; a negative a flips the output",
                  figure="largest |LN(a·x + b) - LN(x)| at ε = 0", kind="roundoff",
                  settings=[Setting("a in [0.5, 10.5], b of s.d. 100", {}),
                            Setting("d = 1024", {"d": 1024}),
                            Setting("negative a, in [-10.5, -0.5]: control", {"a_range": (-10.5, -0.5)},
                                    expect=False),
                            Setting("a different shift per feature: control", {"per_feature_shift": True},
                                    expect=False)])
def invariance_claim(seed, layer_norm, *, d=32, a_range=(0.5, 10.5), per_feature_shift=False):
    r = invariance_gaps(layer_norm, seed, d=d, a_range=a_range, per_feature_shift=per_feature_shift)
    return Outcome.of_checks(invariance_checks(r), r["exact"], f"with ε = 1e-5: {r['with_eps']:.1e}")


def scale_gaps(layer_norm: Callable, x: Tensor, scales=SCALES, eps: float = 1e-5) -> dict[float, float]:
    """The largest |LN(a·x) - LN(x)| at each scale a, with this ε."""
    return {a: (layer_norm(a * x, eps=eps) - layer_norm(x, eps=eps)).abs().max().item() for a in scales}


BENT_AT_1E3 = 0.5  # at a = 1e-3 (a·σ near √ε) ε moves LN(a·x) by more than this


def scale_checks(gap: dict[float, float]) -> dict[str, bool]:
    """C19's checks on scale_gaps at ε = 1e-5, by name."""
    return {f"a = 1: within {INVARIANCE_WITH_EPS:g}": gap[1.0] < INVARIANCE_WITH_EPS,
            f"a = 10: within {INVARIANCE_WITH_EPS:g}": gap[10.0] < INVARIANCE_WITH_EPS,
            f"a = 1e-3: off by more than {BENT_AT_1E3:g}": gap[1e-3] > BENT_AT_1E3}


@claim_experiment("C19", statement="ε bends the scale invariance: with ε = 1e-5 and unit-spread tokens, LN(a·x) is "
                  "within 1e-4 of LN(x) at a = 1 and 10 but off by more than 0.5 at a = 1e-3",
                  figure="largest |LN(a·x) - LN(x)| at a = 1e-3", kind="exact",
                  settings=[Setting("ε = 1e-5, d = 32", {}),
                            Setting("ε = 1e-5, d = 1024", {"d": 1024}),
                            Setting("ε = 0: the rule holds at every scale (control)", {"eps": 0.0}, expect=False)])
def scale_claim(seed, layer_norm, *, d=32, eps=1e-5):
    x = invariance_gaps(layer_norm, seed, d=d)["x"]
    gap = scale_gaps(layer_norm, x, eps=eps)
    return Outcome.of_checks(scale_checks(gap), gap[1e-3], f"at a = 10: {gap[10.0]:.1e}")


def batch_independence(seed: int, norm: str = "layer") -> dict:
    """One token through an nn.LayerNorm (random γ, β) or nn.BatchNorm1d of width 32: its output in its own batch
    (4, 7, 32) in train mode, in eval mode, alone (LayerNorm only) and among 320 strangers (×50, +7)."""
    gen = _generator(seed)
    module = torch.nn.LayerNorm(32) if norm == "layer" else torch.nn.BatchNorm1d(32)
    with torch.no_grad():
        module.weight.uniform_(0.5, 1.5, generator=gen)
        module.bias.normal_(generator=gen)
    batch = torch.randn(4, 7, 32, generator=gen)
    token = batch[2, 5]
    strangers = torch.randn(16, 20, 32, generator=gen) * 50 + 7
    strangers[9, 3] = token

    def run(t: Tensor) -> Tensor:  # BatchNorm1d normalizes (positions, features)
        return module(t) if norm == "layer" else module(t.reshape(-1, 32)).reshape(t.shape)

    with torch.no_grad():
        module.train()
        in_train = run(batch)
        among_strangers = run(strangers)[9, 3]
        alone = run(token[None, None])[0, 0] if norm == "layer" else None  # BatchNorm cannot train on one token
        module.eval()
        in_eval = run(batch)
    return {"in_train": in_train, "in_eval": in_eval, "token": in_train[2, 5], "alone": alone,
            "among_strangers": among_strangers,
            "mates": (in_train[2, 5] - among_strangers).abs().max().item(),
            "mode": (in_train[2, 5] - in_eval[2, 5]).abs().max().item()}


def independence_checks(r: dict) -> dict[str, bool]:
    """C20's checks on batch_independence, by name (BatchNorm cannot run one token alone: that check is skipped)."""
    return {"train mode = eval mode, bitwise": torch.equal(r["in_train"], r["in_eval"]),
            "alone = in its batch": r["alone"] is None or _close(r["alone"], r["token"]),
            "among 320 strangers = in its batch": _close(r["among_strangers"], r["token"])}


@claim_experiment("C20", statement="A token's LayerNorm output is bitwise the same in train and eval mode and the "
                  "same (assert_close) alone, in its batch and among 320 loud strangers",
                  figure="largest change of the token's output with other batch mates", kind="roundoff",
                  settings=[Setting("nn.LayerNorm", {}),
                            Setting("nn.BatchNorm1d in its place: control", {"norm": "batch"}, expect=False)])
def batch_independence_claim(seed, *, norm="layer"):
    r = batch_independence(seed, norm)
    return Outcome.of_checks(independence_checks(r), r["mates"], f"train vs eval: {r['mode']:.3g}")


# ---- the geometry: a plane and a sphere (C62) ----------------------------------------------------------------------

def varied_tokens(seed: int, n: int, d: int, *, mean_sd: float = 2.0, spread=(0.3, 3.0)) -> Tensor:
    """n float64 tokens (n, d), each with its own mean (s.d. mean_sd) and spread (log-uniform in `spread`)."""
    gen = _generator(seed)
    mu = torch.randn(n, 1, generator=gen, dtype=torch.float64) * mean_sd
    lo, hi = math.log(spread[0]), math.log(spread[1])
    sigma = torch.exp(torch.rand(n, 1, generator=gen, dtype=torch.float64) * (hi - lo) + lo)
    return mu + sigma * torch.randn(n, d, generator=gen, dtype=torch.float64)


def sphere_and_plane(layer_norm: Callable, x: Tensor, eps: float = 0.0, center: bool = True) -> dict:
    """LN(x) (γ = 1, β = 0) for tokens x (n, d), and how far it is from the picture: |LN(x)|² - d, LN(x)·1, and
    LN(x) - √d·Px/|Px| with P = I - 11ᵀ/d (project onto the mean-zero plane, then rescale to radius √d).
    center=False drops the mean subtraction (x / RMS(x), RMSNorm's map) for contrast."""
    d = x.shape[-1]
    y = layer_norm(x, eps=eps) if center else x / x.pow(2).mean(-1, keepdim=True).add(eps).sqrt()
    projected = x - x.mean(-1, keepdim=True)  # P x: the projection onto the plane x·1 = 0
    picture = math.sqrt(d) * projected / projected.norm(dim=-1, keepdim=True)
    return {"y": y, "norm_sq": y.pow(2).sum(-1),
            "norm_gap": (y.pow(2).sum(-1) / d - 1).abs().max().item(),   # relative gap of |LN(x)|² from d
            "plane_gap": (y.sum(-1).abs() / math.sqrt(d)).max().item(),  # LN(x)·1 / |1|
            "picture_gap": (y - picture).abs().max().item()}


ON_SPHERE = 1e-9  # float64 rounding: how close |LN(x)|²/d, LN(x)·1 and the picture come to exact
OFF_SPHERE = 0.5  # the contrasts (ε on tiny spreads; no mean subtraction) miss the sphere or the plane by more


def sphere_checks(r: dict) -> dict[str, bool]:
    """C62's checks on sphere_and_plane, by name."""
    return {f"|LN(x)|²/d = 1 within {ON_SPHERE:g}": r["norm_gap"] < ON_SPHERE,
            f"LN(x)·1/√d = 0 within {ON_SPHERE:g}": r["plane_gap"] < ON_SPHERE,
            f"LN(x) = √d·Px/|Px| within {ON_SPHERE:g}": r["picture_gap"] < ON_SPHERE}


@claim_experiment("C62", statement="With γ = 1, β = 0, ε = 0, LayerNorm maps every token onto the sphere of radius "
                  "√d inside the plane x·1 = 0: |LN(x)|² = d and LN(x)·1 = 0 (relative 1e-9), and LN(x) = "
                  "√d·Px/|Px| (P projects onto that plane)",
                  figure="largest of the three gaps: |LN(x)|²/d - 1, LN(x)·1/√d, LN(x) - √d·Px/|Px|",
                  kind="roundoff",
                  settings=[Setting("d = 3, 200 tokens of varied mean and spread", {"d": 3}),
                            Setting("d = 64", {"d": 64}),
                            Setting("d = 64, spreads 1e-3 to 1e-2, ε = 0", {"d": 64, "spread": (1e-3, 1e-2)}),
                            Setting("ε = 1e-5 with spreads 1e-3 to 1e-2: inside the sphere (limit)",
                                    {"d": 64, "spread": (1e-3, 1e-2), "eps": 1e-5}, expect=False),
                            Setting("no mean subtraction (x / RMS(x), RMSNorm): control", {"d": 64, "center": False},
                                    expect=False)])
def sphere_claim(seed, layer_norm, *, d=3, spread=(0.3, 3.0), eps=0.0, center=True):
    r = sphere_and_plane(layer_norm, varied_tokens(seed, 200, d, spread=spread), eps=eps, center=center)
    return Outcome.of_checks(sphere_checks(r), max(r["norm_gap"], r["plane_gap"], r["picture_gap"]),
                   f"|LN(x)|²/d - 1: {r['norm_gap']:.1e}, LN(x)·1/√d: {r['plane_gap']:.1e}, "
                   f"picture: {r['picture_gap']:.1e}")


def _segment(a: list[float], b: list[float]) -> list:
    return [a[0], b[0], None], [a[1], b[1], None], [a[2], b[2], None]


@register_panel()
def sphere_panel(layer_norm: Normalize) -> Panel:
    """A 3-feature token x, scaled by a and shifted by b: where it sits, its projection onto the plane x·1 = 0, and
    LN(x) on the circle of radius √3 in that plane, beside 200 random tokens' outputs (grey)."""
    d, radius, reach = 3, math.sqrt(3.0), 7.0
    cloud = layer_norm(varied_tokens(0, 200, d), eps=0.0)
    # Two orthonormal vectors spanning the plane x·1 = 0, for the circle and the plane's patch.
    u = torch.tensor([1.0, -1.0, 0.0], dtype=torch.float64) / math.sqrt(2)
    v = torch.tensor([1.0, 1.0, -2.0], dtype=torch.float64) / math.sqrt(6)
    angles = torch.linspace(0, 2 * math.pi, 121, dtype=torch.float64)
    circle = radius * (torch.cos(angles)[:, None] * u + torch.sin(angles)[:, None] * v)
    corners = [s * 6.0 * u + t * 6.0 * v for s, t in ((-1, -1), (1, -1), (1, 1), (-1, 1))]
    # The course look (fonts, the legend's strip), a 3-D scene in place of the flat axes; the panel sets the
    # controls beside the scene, so the sliders and the point they move share one laptop screen.
    fig = live_figure("d = 3: LN(x) lands on the circle of radius √3", "", "", height=500,
                      margin=dict(l=10, r=10, t=50))
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    fig.update_layout(scene=dict(xaxis=dict(title="feature 1", range=[-reach, reach]),
                                 yaxis=dict(title="feature 2", range=[-reach, reach]),
                                 zaxis=dict(title="feature 3", range=[-reach, reach]), aspectmode="cube",
                                 camera=dict(eye=dict(x=1.5, y=1.5, z=0.7), center=dict(x=0, y=0, z=-0.1))))
    fig.update_scenes(xaxis_dtick=3, yaxis_dtick=3, zaxis_dtick=3)
    fig.add_mesh3d(x=[c[0].item() for c in corners], y=[c[1].item() for c in corners],
                   z=[c[2].item() for c in corners], i=[0, 0], j=[1, 2], k=[2, 3], opacity=0.15, color=color(5),
                   name="plane x₁ + x₂ + x₃ = 0", showlegend=True, hoverinfo="skip")
    fig.add_scatter3d(x=circle[:, 0].tolist(), y=circle[:, 1].tolist(), z=circle[:, 2].tolist(), mode="lines",
                      line=dict(color=color(7), width=4), name="circle of radius √3")
    fig.add_scatter3d(x=[-reach, reach], y=[-reach, reach], z=[-reach, reach], mode="lines",
                      line=dict(color=color(7), width=2, dash="dash"), name="direction 1 = (1, 1, 1)")
    fig.add_scatter3d(x=cloud[:, 0].tolist(), y=cloud[:, 1].tolist(), z=cloud[:, 2].tolist(), mode="markers",
                      marker=dict(size=2, color="#999999"), name="LN of 200 tokens")
    traces = {
        "path": fig.add_scatter3d(mode="lines", line=dict(color=color(2), width=5),
                                  name="x → x − μ1 → LN(x)").data[-1],
        "x": fig.add_scatter3d(mode="markers", marker=dict(size=6, color=color(0)), name="token a·x + b").data[-1],
        "projected": fig.add_scatter3d(mode="markers", marker=dict(size=5, color=color(2), symbol="diamond"),
                                       name="x − μ1 (on the plane)").data[-1],
        "output": fig.add_scatter3d(mode="markers", marker=dict(size=7, color=color(1), symbol="square"),
                                    name="LN(x) (on the circle)").data[-1],
    }
    readout = widgets.HTML()
    slider = dict(continuous_update=True, style={"description_width": "initial"})
    controls = {
        "x1": widgets.FloatSlider(value=2.0, min=-2.0, max=2.0, step=0.1, description="x₁", **slider),
        "x2": widgets.FloatSlider(value=-1.0, min=-2.0, max=2.0, step=0.1, description="x₂", **slider),
        "x3": widgets.FloatSlider(value=0.5, min=-2.0, max=2.0, step=0.1, description="x₃", **slider),
        "scale": widgets.FloatSlider(value=1.0, min=-2.0, max=2.0, step=0.1, description="scale a", **slider),
        "shift": widgets.FloatSlider(value=0.0, min=-3.0, max=3.0, step=0.25, description="shift b", **slider),
    }

    def update(x1: float, x2: float, x3: float, scale: float, shift: float) -> None:
        x = torch.tensor([x1, x2, x3], dtype=torch.float64) * scale + shift
        projected = x - x.mean()
        y = layer_norm(x)  # the default ε = 1e-5: a token with equal features lands at 0, not at 0/0
        points = [t.tolist() for t in (x, projected, y)]
        px, py, pz = (a + b for a, b in zip(_segment(points[0], points[1]), _segment(points[1], points[2])))
        with fig.batch_update():
            traces["path"].update(x=px, y=py, z=pz)
            for name, p in zip(("x", "projected", "output"), points):
                traces[name].update(x=[p[0]], y=[p[1]], z=[p[2]])
        sigma = projected.pow(2).mean().sqrt().item()
        note = ("<br><i>All three features are equal: x − μ1 = 0, there is no direction to rescale, and ε makes "
                "LN(x) = 0, the circle's centre.</i>" if sigma < 1e-3 else "")
        if scale < 0 and sigma >= 1e-3:
            note = "<br><i>a &lt; 0 sends x − μ1 to the other side of the plane's origin: LN(x) jumps across.</i>"
        readout.value = (f"μ = {x.mean().item():.3g} &nbsp; σ = {sigma:.3g} &nbsp; |x − μ1| = √3·σ = "
                         f"{projected.norm().item():.3g} &nbsp; |LN(x)| = {y.norm().item():.5f} (√3 = {radius:.5f}) "
                         f"&nbsp; LN(x)·1 = {y.sum().item():.1e}" + note)

    return Panel(controls, [readout, fig], update, title="Move one 3-feature token: the shift moves it along 1, the "
                                                         "scale along its ray; LN(x) stays put", layout="side")


# ---- gradients through LayerNorm (C63, C64) -------------------------------------------------------------------------

def random_token(seed: int, d: int, loc: float = 0.0, spread: float = 1.0) -> Tensor:
    """One float64 token loc + spread·N(0, I) of width d, from the seed."""
    return loc + spread * torch.randn(d, generator=_generator(seed), dtype=torch.float64)


def jacobian_check(layer_norm: Callable, layer_norm_jacobian: Callable, x: Tensor, eps: float = 0.0) -> dict:
    """For one float64 token x (d,): autograd's Jacobian of layer_norm(·, eps) at x beside the formula's (ε = 0), and
    what the formula's J does to 1 and x̂ (its null directions) and its eigenvalues, all in units of 1/σ."""
    d = x.shape[-1]
    sigma = (x - x.mean()).pow(2).mean().sqrt()
    autograd = torch.autograd.functional.jacobian(lambda v: layer_norm(v, eps=eps), x)
    formula = layer_norm_jacobian(x)
    x_hat = (x - x.mean()) / sigma
    return {"autograd": autograd, "formula": formula, "sigma": sigma.item(),
            "gap": ((autograd - formula).abs().max() * sigma).item(),       # in units of 1/σ
            "along_1": (formula @ torch.ones(d, dtype=x.dtype)).norm().item() * sigma.item(),
            "along_x_hat": (formula @ x_hat).norm().item() * sigma.item(),
            "eigenvalues": torch.linalg.eigvalsh((formula + formula.T) / 2) * sigma,  # sorted, ascending
            "symmetric": torch.allclose(formula, formula.T, rtol=0, atol=1e-12 / sigma.item())}


JACOBIAN_TOL = 1e-10  # in units of 1/σ: float64 rounding of a d x d formula


def jacobian_checks(r: dict) -> dict[str, bool]:
    """C63's checks on jacobian_check, by name: formula = autograd, J·1 = J·x̂ = 0, J symmetric, eigenvalues 0, 0
    and 1/σ (d - 2 times), each within JACOBIAN_TOL/σ."""
    ev = r["eigenvalues"]
    return {"formula = autograd": r["gap"] < JACOBIAN_TOL, "J·1 = 0": r["along_1"] < JACOBIAN_TOL,
            "J·x̂ = 0": r["along_x_hat"] < JACOBIAN_TOL, "J symmetric": r["symmetric"],
            "two eigenvalues 0": ev[:2].abs().max().item() < JACOBIAN_TOL,
            "the others 1/σ": (ev[2:] - 1).abs().max().item() < JACOBIAN_TOL}


def jacobian_verdict(r: dict) -> bool:
    """C63 as its claim cell asserts it: every one of jacobian_checks."""
    return all(jacobian_checks(r).values())


@claim_experiment("C63", statement="dLN/dx = (I - 11ᵀ/d - x̂x̂ᵀ/d)/σ (γ = 1, ε = 0) matches autograd within 1e-10/σ; "
                  "it sends 1 and x̂ to 0 and is 1/σ times a projection: eigenvalues 0, 0 and 1/σ (d - 2 times)",
                  figure="largest |autograd - formula| × σ", kind="roundoff",
                  settings=[Setting("d = 8", {}), Setting("d = 64", {"d": 64}),
                            Setting("d = 16, mean 5, spread 3", {"d": 16, "loc": 5.0, "spread": 3.0}),
                            Setting("autograd at ε = 0.1, spread 0.3: the ε = 0 formula is off (limit)",
                                    {"eps": 0.1, "spread": 0.3}, expect=False)])
def jacobian_claim(seed, layer_norm, layer_norm_jacobian, *, d=8, loc=0.0, spread=1.0, eps=0.0):
    r = jacobian_check(layer_norm, layer_norm_jacobian, random_token(seed, d, loc, spread), eps)
    return Outcome(jacobian_verdict(r), r["gap"], f"σ = {r['sigma']:.3g}, J·x̂ × σ = {r['along_x_hat']:.1e}")


def gradient_by_scale(layer_norm: Callable, seed: int, scales, eps: float = 1e-5, d: int = 64) -> dict:
    """One float64 token x (d,) of spread σ = 1 and one upstream gradient g, from the seed: at each scale a, the norm
    of the gradient that L = LN(a·x)·g sends back to the input a·x, whose spread is a."""
    gen = _generator(seed)
    x = torch.randn(d, generator=gen, dtype=torch.float64)
    x = x / (x - x.mean()).pow(2).mean().sqrt()
    upstream = torch.randn(d, generator=gen, dtype=torch.float64)
    norms = {}
    for a in scales:
        inp = (a * x).detach().requires_grad_()
        (layer_norm(inp, eps=eps) * upstream).sum().backward()
        norms[a] = inp.grad.norm().item()
    return norms


def tenfold_steps(norms: dict) -> list[float]:
    """For consecutive scales a < a' of gradient_by_scale: |grad at a| / |grad at a'| divided by a'/a (1: exactly
    1/σ)."""
    scales = list(norms)
    return [(norms[a] / norms[b]) / (b / a) for a, b in zip(scales, scales[1:])]


TENFOLD_TOL = 0.01  # each tenfold step in spread divides the gradient by 10 within 1%
EPS_CAPS_BELOW = 0.5  # near √ε a tenfold smaller spread raises the gradient by less than half of tenfold


def tenfold_holds(steps: list[float]) -> bool:
    """C64: every tenfold step of tenfold_steps divides the gradient by 10, within TENFOLD_TOL."""
    return all(abs(s - 1) < TENFOLD_TOL for s in steps)


@claim_experiment("C64", statement="Through a LayerNorm, a token with 10x the spread passes back a 10x smaller "
                  "gradient (same upstream gradient; each tenfold step within 1%)",
                  figure="gradient ratio per tenfold step in spread, divided by 10 (1 means exactly 1/σ), the worst "
                         "step", kind="exact",
                  settings=[Setting("ε = 1e-5, spreads 0.1 to 100", {}),
                            Setting("ε = 0, spreads 0.1 to 100", {"eps": 0.0}),
                            Setting("d = 768, ε = 1e-5", {"d": 768}),
                            Setting("ε = 1e-5, spreads 1e-4 to 1e-2: ε caps the gain (limit)",
                                    {"scales": (1e-4, 1e-3, 1e-2)}, expect=False)])
def gradient_claim(seed, layer_norm, *, eps=1e-5, scales=(0.1, 1.0, 10.0, 100.0), d=64):
    steps = tenfold_steps(gradient_by_scale(layer_norm, seed, scales, eps, d))
    worst = max(steps, key=lambda s: abs(s - 1))
    return Outcome(tenfold_holds(steps), worst, "steps / 10: " + ", ".join(f"{s:.4g}" for s in steps))


# ---- what γ and β cannot undo (C65) ---------------------------------------------------------------------------------

def undo_with_gamma_beta(layer_norm: Callable, x: Tensor) -> dict:
    """The best per-feature γ, β (least squares, fitted over all tokens) to map LN(x) back to x (n, d), and how far
    it stays: relative error |x - (γ·LN(x) + β)| / |x - mean over tokens|, and the worst relative error of a
    token's norm."""
    y = layer_norm(x, eps=0.0)
    yc, xc = y - y.mean(0), x - x.mean(0)
    gamma = (yc * xc).sum(0) / yc.pow(2).sum(0)
    beta = x.mean(0) - gamma * y.mean(0)
    fit = gamma * y + beta
    return {"gamma": gamma, "beta": beta, "fit": fit,
            "rel_error": ((x - fit).norm() / xc.norm()).item(),
            "norm_error": ((fit.norm(dim=-1) - x.norm(dim=-1)).abs() / x.norm(dim=-1)).max().item()}


def two_tokens(layer_norm: Callable, seed: int, d: int = 16) -> dict:
    """A token x1 and x2 = 10·x1 + 3 (its own σ ten times larger, its own μ moved): their inputs' gap and their
    LayerNorm outputs' gap (ε = 0). Equal outputs: no γ, β (no function at all) can map them back to both."""
    x1 = torch.randn(d, generator=_generator(seed), dtype=torch.float64)
    x2 = 10 * x1 + 3
    return {"x1": x1, "x2": x2, "input_gap": (x2 - x1).abs().max().item(),
            "output_gap": (layer_norm(x2, eps=0.0) - layer_norm(x1, eps=0.0)).abs().max().item()}


UNRESTORED = 0.2  # the best per-feature γ, β leave more than this relative error
RESTORED = 1e-9  # tokens that share one μ and σ: the best γ, β restore them to float64 rounding
SAME_OUTPUT = 1e-12  # x and 10x + 3 give the same LN output to float64 rounding


def undo_checks(pair: dict, fit: dict) -> dict[str, bool]:
    """C65's checks on two_tokens and undo_with_gamma_beta, by name."""
    return {"x and 10x + 3 differ": pair["input_gap"] > 1,
            f"their outputs agree within {SAME_OUTPUT:g}": pair["output_gap"] < SAME_OUTPUT,
            f"best γ, β leave relative error > {UNRESTORED:g}": fit["rel_error"] > UNRESTORED}


@claim_experiment("C65", statement="γ and β, per feature and shared by every token, cannot give tokens back their own "
                  "μ and σ: x and 10x + 3 have the same LN output, and the best per-feature γ, β leave more than 20% "
                  "of 256 tokens' variation unrestored",
                  figure="relative error of the best per-feature γ·LN(x) + β against x", kind="exact",
                  settings=[Setting("tokens with their own mean (s.d. 2) and spread (0.3 to 3)", {}),
                            Setting("same mean, spreads 0.3 to 3", {"mean_sd": 0.0}),
                            Setting("tokens that share one μ and σ (x = σ·x̂ + μ): γ, β undo it (control)",
                                    {"shared": True}, expect=False)])
def undo_claim(seed, layer_norm, *, mean_sd=2.0, shared=False):
    x = varied_tokens(seed, 256, 16, mean_sd=mean_sd)
    if shared:  # every token normalized, then the same σ = 3 and μ = 2: what a per-feature affine can undo
        x = 3.0 * layer_norm(x, eps=0.0) + 2.0
    pair = two_tokens(layer_norm, seed)
    r = undo_with_gamma_beta(layer_norm, x)
    return Outcome.of_checks(undo_checks(pair, r), r["rel_error"], f"worst norm error {r['norm_error']:.3g}")

"""Notebook 08 (a real model): figures of what the LayerNorms of all-MiniLM-L6-v2 do on the course's sentences, a
LayerNorm inspector and the intervention panel. Everything starts from `minilm.baseline()`, one cached run of the
unmodified model; the intervention panel reruns only the blocks from the first edited one onwards. The notebook's own
functions (outlier_dims, rms_instead, zeroed) are passed in: build_panel hands them over from its `lesson` cells."""
from __future__ import annotations

import html
from collections.abc import Callable

import ipywidgets as widgets
import plotly.graph_objects as go
import torch
from torch import Tensor

from ..figures import color, live_figure, live_subplots, static_figure, static_subplots
from ..panel import Panel, register_panel
from ..minilm import NORM_SITES, Baseline, baseline, damage, intervened_embeddings, layer_norms

__all__ = ["INTERVENTIONS", "norm_statistics_figure", "stream_norm_figure", "gamma_beta_figure", "outlier_figure",
           "damage_figure", "attention_logit_figure", "layernorm_inspector_panel", "intervention_panel",
           "outlier_set"]

INTERVENTIONS = {"rms": "RMSNorm: no re-centering (keeps γ, β)", "remove": "remove the LayerNorm",
                 "pre": "rewire the sublayer to Pre-LN", "zero": "zero γ, β at the outlier dimensions"}

# For figures whose x labels are rotated LayerNorm names: room below for the labels, the axis title and the legend.
_BELOW_ROTATED = dict(margin=dict(t=70, b=190), legend=dict(y=-0.62, yanchor="top"))


def outlier_set(base: Baseline, outlier_dims: Callable) -> list[int]:
    """The union of both views of the notebook's outlier_dims: loud in the stream, or odd in γ/β."""
    loud, odd = outlier_dims(base.hidden, base.mask, layer_norms(base.model))
    return sorted(set(loud) | set(odd))


def _per_token(base: Baseline) -> dict[str, tuple[Tensor, Tensor]]:
    """Per LayerNorm, the per-token mean and standard deviation of its input over real tokens."""
    out = {}
    for name, x in base.norm_in.items():
        real = x[base.mask]
        out[name] = real.mean(-1), real.std(-1, unbiased=False)
    return out


def norm_statistics_figure(base: Baseline) -> go.Figure:
    """Two panels over the 13 LayerNorms: the per-token mean μ each removes and the σ each divides by."""
    n_tokens = int(base.mask.sum())
    fig = static_subplots(1, 2, f"What each LayerNorm removes, per token ({n_tokens} real tokens of "
                                f"{len(base.pairs.sentences)} sentences)", height=520, **_BELOW_ROTATED,
                          subplot_titles=("mean μ of each token (subtracted)",
                                          "standard deviation σ of each token (divided by)"))
    for name, (mu, sd) in _per_token(base).items():
        c = color(0 if name == "embeddings" else (1 if "attention" in name else 2))
        fig.add_box(y=mu.tolist(), name=name, marker_color=c, showlegend=False, boxpoints="outliers", row=1, col=1)
        fig.add_box(y=sd.tolist(), name=name, marker_color=c, showlegend=False, boxpoints="outliers", row=1, col=2)
    for i, (label, c) in enumerate([("embedding LayerNorm", 0), ("after attention (norm1)", 1),
                                    ("after the FFN (norm2)", 2)]):
        fig.add_scatter(x=[None], y=[None], mode="markers", marker=dict(color=color(c), symbol="square", size=10),
                        name=label)
    fig.update_yaxes(title_text="μ (activation units)", row=1, col=1)
    fig.update_yaxes(title_text="σ (activation units, log scale)", type="log", row=1, col=2)
    fig.update_xaxes(title_text="LayerNorm (in forward order)", tickangle=-60)
    return fig


def stream_norm_figure(base: Baseline) -> go.Figure:
    """Median (and largest) per-token L2 norm entering each LayerNorm and leaving it."""
    fig = static_figure("The residual stream's size: entering each LayerNorm and leaving it",
                        "LayerNorm (in forward order)", "per-token L2 norm (log scale)", log_y=True, height=470,
                        margin=_BELOW_ROTATED["margin"], legend=dict(y=-0.55, yanchor="top"))
    names = list(base.norm_in)
    norms = layer_norms(base.model)
    before = [base.norm_in[n][base.mask].norm(dim=-1) for n in names]
    after = [norms[n](base.norm_in[n])[base.mask].norm(dim=-1) for n in names]
    for values, label, c, dash in [(before, "entering (the residual sum)", 1, "solid"),
                                   (after, "leaving (what the next sublayer reads)", 0, "solid")]:
        fig.add_scatter(x=names, y=[float(v.median()) for v in values], mode="lines+markers", name=f"{label}, median",
                        line=dict(color=color(c), dash=dash))
        fig.add_scatter(x=names, y=[float(v.max()) for v in values], mode="markers", name=f"{label}, largest token",
                        marker=dict(color=color(c), symbol="triangle-up", size=9))
    fig.update_xaxes(tickangle=-60)
    return fig


def gamma_beta_figure(base: Baseline, dims: list[int]) -> go.Figure:
    """Heatmaps of γ and β over (LayerNorm, feature), with the outlier dimensions marked."""
    norms = layer_norms(base.model)
    names = list(norms)
    gammas = torch.stack([n.weight for n in norms.values()])
    betas = torch.stack([n.bias for n in norms.values()])
    fig = static_subplots(2, 1, "The learned γ (top, starts at 1) and β (bottom, starts at 0) of all 13 LayerNorms",
                          height=660, margin=dict(t=60), legend=dict(y=-0.12), shared_xaxes=True,
                          vertical_spacing=0.1)
    fig.add_heatmap(z=gammas.tolist(), y=names, colorscale="Cividis", colorbar=dict(title="γ", y=0.78, len=0.45),
                    name="γ", row=1, col=1)
    lim = float(betas.abs().max())
    fig.add_heatmap(z=betas.tolist(), y=names, colorscale="PuOr", zmin=-lim, zmax=lim,
                    colorbar=dict(title="β", y=0.22, len=0.45), name="β", row=2, col=1)
    for d in dims:  # a mark above each panel, so the columns themselves stay visible
        for yref in ("y domain", "y2 domain"):
            fig.add_annotation(x=d, y=1.0, xref="x", yref=yref, text="▼", showarrow=False, yanchor="bottom",
                               font=dict(color=color(7), size=13))
    fig.add_scatter(x=[None], y=[None], mode="markers", marker=dict(symbol="triangle-down", size=11, color=color(7)),
                    name=f"outlier dimensions {dims}")
    fig.update_xaxes(title_text="feature index (0-383)", row=2, col=1)
    fig.update_yaxes(title_text="γ: LayerNorm", autorange="reversed", row=1, col=1)
    fig.update_yaxes(title_text="β: LayerNorm", autorange="reversed", row=2, col=1)
    return fig


def outlier_figure(loudness: Tensor) -> go.Figure:
    """Heatmap of the notebook's feature_loudness (hidden states, d): each feature's mean |value| over real tokens,
    relative to the median feature's."""
    labels = ["embeddings"] + [f"after L{i}" for i in range(1, len(loudness))]
    fig = static_figure("Outlier dimensions: mean |value| of each feature ÷ that of the median feature",
                        "feature index (0-383)", "hidden state (stream between blocks)", height=380)
    fig.add_heatmap(z=loudness.tolist(), y=labels, colorscale="Cividis", zmin=0, zmax=8,
                    colorbar=dict(title="× median"), name="mean |value| ÷ median")
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(showlegend=False)
    return fig


def damage_figure(table: dict[tuple[str, str], float], rows: list[str], columns: list[str]) -> go.Figure:
    """Heatmap of the mean cosine (original vs changed embedding) per (where, intervention), written in each cell."""
    z = [[table[(r, c)] for c in columns] for r in rows]
    fig = static_figure("Damage: mean cosine between original and changed sentence embeddings (1 = unharmed)",
                        "intervention (on both LayerNorms of the block)", "where", height=420)
    fig.add_heatmap(z=z, x=[INTERVENTIONS[c] for c in columns], y=rows, zmin=-0.2, zmax=1, colorscale="Cividis",
                    text=[[f"{v:.3f}" for v in row] for row in z], texttemplate="%{text}",
                    colorbar=dict(title="cosine"), name="mean cosine")
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(showlegend=False)
    return fig


def attention_logit_figure(logits: list[Tensor], cap: float = 50.0) -> go.Figure:
    """Largest |attention logit| of each head per layer, the layer's 1-99% range, and Gemma 2's soft-cap for scale."""
    fig = static_figure("Attention logits q·k/√d_head in the trained model, per layer (real tokens only)",
                        "layer", "attention logit", height=400)
    layers = [f"L{i}" for i in range(1, len(logits) + 1)]
    for h in range(logits[0].shape[0]):
        fig.add_scatter(x=layers, y=[float(s[h].abs().max()) for s in logits], mode="markers",
                        marker=dict(color=color(0), size=7, opacity=0.6), name="largest |logit| of one head",
                        showlegend=h == 0)
    lo = [float(torch.quantile(s.flatten(), 0.01)) for s in logits]
    hi = [float(torch.quantile(s.flatten(), 0.99)) for s in logits]
    fig.add_scatter(x=layers, y=hi, mode="lines", line=dict(color=color(1)), name="99th percentile")
    fig.add_scatter(x=layers, y=lo, mode="lines", line=dict(color=color(1), dash="dash"), name="1st percentile")
    fig.add_scatter(x=layers, y=[cap] * len(layers), mode="lines", line=dict(color=color(7), dash="dot"),
                    name=f"Gemma 2's soft-cap ({cap:g})")
    return fig


@register_panel()
def layernorm_inspector_panel(outlier_dims: Callable) -> Panel:
    """Pick a LayerNorm, a sentence and a token: the token entering and leaving the norm, and the norm's γ and β, with
    the outlier dimensions the notebook's outlier_dims finds marked."""
    base = baseline()
    norms = layer_norms(base.model)
    dims = outlier_set(base, outlier_dims)
    lengths = base.mask.sum(1).tolist()
    features = list(range(base.hidden[0].shape[-1]))
    # Two rows with their own scales: a spike entering the norm would flatten everything leaving it.
    fig_token = live_subplots(2, 1, "One token entering and leaving a LayerNorm", height=460, margin=dict(t=60),
                              shared_xaxes=True, vertical_spacing=0.12)
    entering = fig_token.add_bar(name="entering: the residual sum x", marker_color=color(1), row=1, col=1).data[-1]
    leaving = fig_token.add_bar(name="leaving: γ ⊙ (x − μ)/σ + β", marker_color=color(0), row=2, col=1).data[-1]
    fig_token.update_yaxes(title_text="entering (activation units)", row=1, col=1)
    fig_token.update_yaxes(title_text="leaving (activation units)", row=2, col=1)
    fig_token.update_xaxes(title_text="feature index (0-383)", row=2, col=1)
    fig_params = live_figure("This LayerNorm's learned γ and β", "feature index (0-383)", "parameter value",
                             height=320)
    gamma_line = fig_params.add_scatter(name="γ (scale)", mode="lines", line=dict(color=color(2))).data[-1]
    beta_line = fig_params.add_scatter(name="β (shift)", mode="lines", line=dict(color=color(3))).data[-1]
    outlier_marks = fig_params.add_scatter(name="γ at the outlier dimensions", mode="markers",
                                           marker=dict(color=color(7), size=9, symbol="x")).data[-1]
    readout = widgets.HTML()
    controls = {
        "norm": widgets.Dropdown(options=list(norms), value="L1 FFN", description="LayerNorm"),
        "sentence": widgets.Dropdown(options=[(f"{i + 1}. {s}", i) for i, s in enumerate(base.pairs.sentences)],
                                     value=0, description="sentence", layout=widgets.Layout(width="420px")),
        "token": widgets.IntSlider(value=0, min=0, max=max(lengths) - 1, description="token #"),
    }

    def update(norm: str, sentence: int, token: int) -> None:
        if norm not in norms:
            raise ValueError(f"choose one of the 13 LayerNorms: {', '.join(norms)}")
        if not 0 <= sentence < len(lengths):
            raise ValueError(f"choose a sentence from 1 to {len(lengths)}")
        n = lengths[sentence]
        if token < 0:
            raise ValueError(f"token numbers start at 0 ([CLS]); choose 0 to {n - 1}")
        note = ""
        if token >= n:  # the slider spans the longest sentence; shorter ones end earlier, on [SEP]
            note = (f" &nbsp;<i>(sentence {sentence + 1} has only {n} tokens: showing its last, token {n - 1}; "
                    f"after it come [PAD] positions, which no LayerNorm output is read from)</i>")
            token = n - 1
        ln = norms[norm]
        x = base.norm_in[norm][sentence, token]
        with torch.no_grad():
            y = ln(x)
        mu, sd = float(x.mean()), float(x.std(unbiased=False))
        word = base.batch.tokens[sentence][token]
        with fig_token.batch_update():
            entering.x = leaving.x = features
            entering.y = x.tolist()
            leaving.y = y.tolist()
            fig_token.layout.title.text = f"Token {word!r} of sentence {sentence + 1} entering and leaving {norm}"
        with fig_params.batch_update():
            gamma_line.x = beta_line.x = features
            gamma_line.y = ln.weight.tolist()
            beta_line.y = ln.bias.tolist()
            outlier_marks.x = dims
            outlier_marks.y = ln.weight[dims].tolist()
            fig_params.layout.title.text = f"{norm}: learned γ and β"
        top = int(x.abs().argmax())
        readout.value = (f"token <b>{html.escape(word)}</b>: μ = {mu:.3f}, σ = {sd:.3f}, "
                         f"|μ|/σ = {abs(mu) / sd:.3f} &nbsp;|&nbsp; largest |x| = {float(x[top].abs()):.1f} "
                         f"at feature {top} "
                         f"(median |x| {float(x.abs().median()):.2f}) &nbsp;|&nbsp; L2 norm {float(x.norm()):.1f} "
                         f"in, {float(y.norm()):.1f} out{note}")

    return Panel(controls, [readout, fig_token, fig_params], update,
                 title="Inside one LayerNorm: pick a norm, a sentence and a token")


@register_panel()
def intervention_panel(rms_instead: Callable, zeroed: Callable, outlier_dims: Callable) -> Panel:
    """Change one block's LayerNorm(s), or every block's, and see how far the sentence embeddings move; the RMSNorm
    swap and the zeroing are the notebook's rms_instead and zeroed, at the dimensions its outlier_dims finds."""
    base = baseline()
    dims = outlier_set(base, outlier_dims)
    changes = {"rms": rms_instead, "remove": "remove", "pre": "pre", "zero": lambda ln: zeroed(ln, dims)}
    n_layers = len(base.model.blocks)
    sentences = base.pairs.sentences
    labels = [f"S{i + 1}" for i in range(len(sentences))]
    clean = damage(base, base.embeddings)
    sim0, unrel0, gap0, ranked0 = clean.similar.tolist(), clean.unrelated.tolist(), clean.gap, clean.ranked
    fig_cos = live_figure("How far each sentence's embedding moved", "sentence",
                          "cosine(original, changed)", height=340)
    moved = fig_cos.add_bar(x=labels, y=[1.0] * len(labels), hovertext=sentences, marker_color=color(0),
                            showlegend=True,
                            name="cosine between the sentence's original and changed embedding (1 = unmoved)").data[-1]
    fig_cos.update_yaxes(range=[-0.3, 1.05])
    fig_pairs = live_figure("Similar vs unrelated pairs: cosine before (x) and after (y) the change",
                            "cosine of the pair, original model", "cosine of the pair, changed model", height=380)
    fig_pairs.add_scatter(x=[-0.3, 1], y=[-0.3, 1], mode="lines", line=dict(color="#999999", dash="dot"),
                          name="unchanged (y = x)")
    similar = fig_pairs.add_scatter(x=sim0, y=sim0, mode="markers", marker=dict(color=color(2), size=10),
                                    name="similar pairs").data[-1]
    unrelated = fig_pairs.add_scatter(x=unrel0, y=unrel0, mode="markers",
                                      marker=dict(color=color(1), size=10, symbol="diamond"),
                                      name="unrelated pairs").data[-1]
    fig_pairs.update_xaxes(range=[-0.3, 1.02])
    fig_pairs.update_yaxes(range=[-0.3, 1.02])
    readout = widgets.HTML()
    controls = {
        "layer": widgets.Dropdown(options=[(f"L{i}", i) for i in range(1, n_layers + 1)] + [("all six", 0)],
                                  value=4, description="block"),
        "sublayers": widgets.Dropdown(options=[(v, k) for k, v in NORM_SITES.items()], value="both",
                                      description="LayerNorm"),
        "intervention": widgets.Dropdown(options=[(v, k) for k, v in INTERVENTIONS.items()], value="rms",
                                         description="change", layout=widgets.Layout(width="380px")),
    }

    def update(layer: int, sublayers: str, intervention: str) -> None:
        if not (isinstance(layer, int) and 0 <= layer <= n_layers):
            raise ValueError(f"choose a block from L1 to L{n_layers}, or all six")
        if intervention not in changes:
            raise ValueError(f"intervention must be one of {list(changes)}, got {intervention!r}")
        layers = list(range(1, n_layers + 1)) if layer == 0 else [layer]
        changed = intervened_embeddings(base, layers, changes[intervention], sublayers)
        d = damage(base, changed)
        with fig_cos.batch_update():
            moved.y = d.cos.tolist()
        with fig_pairs.batch_update():
            similar.y = d.similar.tolist()
            unrelated.y = d.unrelated.tolist()
        where = "every block" if layer == 0 else f"block L{layer}"
        readout.value = (f"<b>{html.escape(INTERVENTIONS[intervention])}</b>, {html.escape(NORM_SITES[sublayers])}, "
                         f"{where}: mean cosine to the original embeddings <b>{float(d.cos.mean()):.4f}</b> "
                         f"(worst {float(d.cos.min()):.4f}) &nbsp;|&nbsp; similar − unrelated gap {gap0:.3f} → "
                         f"<b>{d.gap:.3f}</b>, pairs ranked right {ranked0:.0%} → <b>{d.ranked:.0%}</b>")

    return Panel(controls, [readout, fig_cos, fig_pairs], update,
                 title="Change a trained model's LayerNorms and measure the damage")

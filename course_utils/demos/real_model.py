"""Notebook 08 (a real model): figures of what the LayerNorms of all-MiniLM-L6-v2 do on the course's sentences, a
LayerNorm inspector and the intervention panel. Everything starts from `minilm.baseline()`, one cached run of the
unmodified model; the intervention panel computes all its settings when it is built, each rerunning only the blocks
from the first edited one onwards. The notebook's own functions (outlier_dims, rms_instead, zeroed) are passed in:
build_panel hands them over from its `lesson` cells."""
from __future__ import annotations

import contextlib
import copy
import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import ipywidgets as widgets
import plotly.graph_objects as go
import torch
from torch import Tensor

from ..evidence import Outcome, Setting, claim_experiment
from ..figures import color, dash, live_subplots, marker, static_figure, static_subplots
from ..panel import Panel, choice, register_panel
from ..minilm import (CONFIG, NORM_SITES, Baseline, Batch, Damage, MiniLM, SentencePairs, baseline, baseline_of,
                      damage, intervened_embeddings, layer_norms, load_heldout, load_minilm, load_reference,
                      load_sentences, load_tokenizer, norm_inputs, reference_outputs, run_from, sentence_embedding, tokenize)

__all__ = ["INTERVENTIONS", "INTERVENTION_BUTTONS", "norm_statistics_figure", "stream_norm_figure", "gamma_beta_figure", "outlier_figure",
           "damage_figure", "attention_logit_figure", "layernorm_inspector_panel", "intervention_panel",
           "outlier_set", "COLLAPSED", "collapse", "sentence_set", "seed_baseline", "random_text", "random_minilm",
           "RebuildCheck", "rebuild_check", "tanh_gelu", "centering_ratio", "stream_after", "stream_checks",
           "spike_sites", "outlier_checks", "random_dims", "disabled", "zeroing_checks", "surgery_damage",
           "rms_checks", "rescaling_checks", "capped_damage", "SINK_BLOCKS", "sink_figure", "int8_error", "int8_table",
           "int8_checks", "feature_switched_off", "sink_without", "value_norms", "COLLAPSING",
           "growth_checks", "SURGERY_ROWS", "REBUILD_ATOL", "REBUILD_COS", "CENTERED_BELOW", "SINK_RATIO", "MAJORITY",
           "CUT_BY", "SPIKE_ABOVE", "STREAM_BELOW", "SPIKE_FEATURE", "HARMLESS_COS", "collapsed", "centered", "is_sink",
           "sink_cut", "spike_checks", "softcap_harmless", "rebuild_checks", "text_baseline", "paragraph_baseline",
           "float64_errors", "rerun", "cls_moved", "attention_on", "spike_of", "first_position_spike", "TRAIL_RATIO",
           "moved_sink_checks", "damage_share", "carries_most", "MOSTLY", "feature_damage", "median_sigmas",
           "fixed_sigma_runs", "sigma_checks", "exact_in_float64", "FLOAT64_ATOL"]

INTERVENTIONS = {"rms": "RMSNorm: no re-centering (keeps γ, β)", "remove": "remove the LayerNorm",
                 "pre": "rewire the sublayer to Pre-LN", "zero": "zero γ, β at the outlier dimensions"}
# The same, short enough for a row of buttons (panel.choice): every change in sight, one click away.
INTERVENTION_BUTTONS = {"rms": "RMSNorm (keeps γ, β)", "remove": "remove the LayerNorm", "pre": "rewire to Pre-LN",
                        "zero": "zero γ, β at outliers"}

# For figures whose x labels are rotated LayerNorm names: room below for the labels, the axis title and the legend.
_BELOW_ROTATED = dict(margin=dict(b=110))


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
                        "LayerNorm (in forward order)", "per-token L2 norm (log scale)", log_y=True, height=520,
                        **_BELOW_ROTATED)
    names = list(base.norm_in)
    norms = layer_norms(base.model)
    before = [base.norm_in[n][base.mask].norm(dim=-1) for n in names]
    after = [norms[n](base.norm_in[n])[base.mask].norm(dim=-1) for n in names]
    for i, (values, label, c) in enumerate([(before, "entering (the residual sum)", 1),
                                            (after, "leaving (what the next sublayer reads)", 0)]):
        fig.add_scatter(x=names, y=[float(v.median()) for v in values], mode="lines+markers", name=f"{label}, median",
                        line=dict(color=color(c), dash=dash(1 - i)), marker=dict(symbol=marker(i)))
        fig.add_scatter(x=names, y=[float(v.max()) for v in values], mode="markers", name=f"{label}, largest token",
                        marker=dict(color=color(c), symbol="triangle-up" if i == 0 else "triangle-down", size=9))
    fig.update_xaxes(tickangle=-60)
    return fig


def gamma_beta_figure(base: Baseline, dims: list[int]) -> go.Figure:
    """Heatmaps of γ and β over (LayerNorm, feature), with the outlier dimensions marked."""
    norms = layer_norms(base.model)
    names = list(norms)
    gammas = torch.stack([n.weight for n in norms.values()])
    betas = torch.stack([n.bias for n in norms.values()])
    fig = static_subplots(2, 1, "The learned γ (top, starts at 1) and β (bottom, starts at 0) of all 13 LayerNorms",
                          height=620, margin=dict(t=60), shared_xaxes=True, vertical_spacing=0.1)
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
    # All 13 names: at the course's text size plotly would label only every other row.
    fig.update_yaxes(tickmode="array", tickvals=names, tickfont=dict(size=12))
    fig.update_layout(showlegend=True)  # the marks' legend: plotly hides a legend of one entry
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


def _short_label(text: str, limit: int = 34) -> str:
    """An option label that fits the panel's control column (the readout under it shows the whole sentence)."""
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


@register_panel()
def layernorm_inspector_panel(outlier_dims: Callable) -> Panel:
    """Pick a LayerNorm, a sentence and a token: the token entering and leaving the norm, and the norm's γ and β, with
    the outlier dimensions the notebook's outlier_dims finds marked."""
    base = baseline()
    norms = layer_norms(base.model)
    dims = outlier_set(base, outlier_dims)
    lengths = base.mask.sum(1).tolist()
    fig = _inspector_figure(base.hidden[0].shape[-1], dims)
    entering, leaving, entering_marks, leaving_marks, largest, gamma_line, beta_line, gamma_marks = fig.data
    parameters = {name: (ln.weight.tolist(), ln.bias.tolist()) for name, ln in norms.items()}  # fixed per norm
    shown = {"norm": None}  # the norm whose γ and β the figure holds: they are sent only when it changes
    readout = widgets.HTML()
    controls = {
        "norm": choice(list(norms), value="L1 FFN", description="LayerNorm"),
        "sentence": choice([(_short_label(f"{i + 1}. {s}"), i) for i, s in enumerate(base.pairs.sentences)],
                           value=0, description="sentence"),
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
            note = (f"<br><i>(sentence {sentence + 1} has only {n} tokens: showing its last, token {n - 1}; "
                    f"after it come [PAD] positions, which no LayerNorm output is read from)</i>")
            token = n - 1
        ln = norms[norm]
        x = base.norm_in[norm][sentence, token]
        with torch.no_grad():
            y = ln(x)
        top = int(x.abs().argmax())
        word = base.batch.tokens[sentence][token]
        with fig.batch_update():  # one message to the browser
            entering.y, leaving.y = _rounded(x), _rounded(y)
            entering_marks.y, leaving_marks.y = _rounded(x[dims]), _rounded(y[dims])
            largest.x, largest.y, largest.text = [top], [float(x[top])], [f" feature {top} "]
            largest.textposition = "middle right" if top < 0.8 * len(x) else "middle left"
            if shown["norm"] != norm:
                gamma_line.y, beta_line.y = parameters[norm]
                gamma_marks.y = [parameters[norm][0][d] for d in dims]
                shown["norm"] = norm
            fig.layout.title.text = f"Token {word!r} of sentence {sentence + 1} entering and leaving {norm}"
        mu, sd = float(x.mean()), float(x.std(unbiased=False))
        readout.value = (f"token <b>{html.escape(word)}</b>: μ = {mu:.3f}, σ = {sd:.3f}, "
                         f"|μ|/σ = {abs(mu) / sd:.3f} &nbsp;|&nbsp; largest |x| = {float(x[top].abs()):.1f} "
                         f"at feature {top} "
                         f"(median |x| {float(x.abs().median()):.2f}) &nbsp;|&nbsp; L2 norm {float(x.norm()):.1f} "
                         f"in, {float(y.norm()):.1f} out{note}")

    return Panel(controls, [readout, fig], update, layout="side",
                 title="Inside one LayerNorm: pick a norm, a sentence and a token")


def _rounded(values: Tensor) -> list[float]:
    """A figure's values to 4 decimals: what a plot can show, in half the bytes sent to the browser."""
    return [round(v, 4) for v in values.tolist()]


def _inspector_figure(d: int, dims: list[int]) -> go.Figure:
    """The inspector's three rows over the d features, sharing one x axis so a column lines up through all three: the
    token entering (its own scale: a spike there would flatten the rest), the token leaving, and the norm's γ and β.
    Lines, not d bars: at a laptop's width 384 bars are one pixel each; a line keeps every spike in sight."""
    features = list(range(d))
    fig = live_subplots(3, 1, "One token entering and leaving a LayerNorm", height=540, shared_xaxes=True,
                        vertical_spacing=0.07, margin=dict(t=50))
    mark = dict(color=color(7), size=8, symbol="x")
    fig.add_scatter(x=features, mode="lines", line=dict(color=color(1), width=1.5), showlegend=False,
                    name="entering: the residual sum x", row=1, col=1)
    fig.add_scatter(x=features, mode="lines", line=dict(color=color(0), width=1.5), showlegend=False,
                    name="leaving: γ ⊙ (x − μ)/σ + β", row=2, col=1)
    for row in (1, 2):
        fig.add_scatter(x=dims, mode="markers", marker=mark, name=f"outlier dimensions {dims}", showlegend=row == 1,
                        legendgroup="outliers", row=row, col=1)
    fig.add_scatter(x=[0], y=[0], mode="text", text=[""], textposition="middle right", showlegend=False,
                    textfont=dict(size=15), name="largest |x|", row=1, col=1)
    fig.add_scatter(x=features, mode="lines", line=dict(color=color(2), width=1.5), name="γ (scale)", row=3, col=1)
    fig.add_scatter(x=features, mode="lines", line=dict(color=color(3), width=1.5, dash="dot"), name="β (shift)",
                    row=3, col=1)
    fig.add_scatter(x=dims, mode="markers", marker=mark, showlegend=False, legendgroup="outliers",
                    name="γ at the outlier dimensions", row=3, col=1)
    for row, title in enumerate(["entering x", "leaving", "γ and β"], start=1):
        fig.update_yaxes(title_text=title, row=row, col=1)
    fig.update_xaxes(title_text="feature index (0-383)", row=3, col=1)
    return fig


@register_panel()
def intervention_panel(rms_instead: Callable, zeroed: Callable, outlier_dims: Callable) -> Panel:
    """Change one block's LayerNorm(s), or every block's, and see how far the sentence embeddings move; the RMSNorm
    swap and the zeroing are the notebook's rms_instead and zeroed, at the dimensions its outlier_dims finds.

    Every setting (7 places x 3 sites x 4 changes) is computed when the panel is built, a few seconds: a change then
    only looks its result up and redraws, well inside the 100 ms a learner notices."""
    base = baseline()
    dims = outlier_set(base, outlier_dims)
    changes = {"rms": rms_instead, "remove": "remove", "pre": "pre", "zero": lambda ln: zeroed(ln, dims)}
    n_layers = len(base.model.blocks)
    clean = damage(base, base.embeddings)
    views = {(layer, sites, change): _intervention_view(base, clean, layer, sites, change, changes[change])
             for layer in range(n_layers + 1) for sites in NORM_SITES for change in changes}
    fig = _intervention_figure(base, clean)
    moved, _, similar, unrelated = fig.data
    readout = widgets.HTML()
    controls = {
        "layer": choice([(f"L{i}", i) for i in range(1, n_layers + 1)] + [("all six", 0)], value=4,
                        description="block", layout=widgets.Layout(width="160px")),
        "sublayers": choice([(v, k) for k, v in NORM_SITES.items()], value="both", description="LayerNorm"),
        "intervention": choice([(v, k) for k, v in INTERVENTION_BUTTONS.items()], value="rms",
                               description="change"),
    }

    def update(layer: int, sublayers: str, intervention: str) -> None:
        if not (isinstance(layer, int) and 0 <= layer <= n_layers):
            raise ValueError(f"choose a block from L1 to L{n_layers}, or all six")
        if intervention not in changes:
            raise ValueError(f"intervention must be one of {list(changes)}, got {intervention!r}")
        if sublayers not in NORM_SITES:
            raise ValueError(f"sublayers must be one of {list(NORM_SITES)}, got {sublayers!r}")
        view = views[layer, sublayers, intervention]
        with fig.batch_update():  # one message to the browser, three traces' y and nothing else
            moved.y, similar.y, unrelated.y = view.cos, view.similar, view.unrelated
        readout.value = view.readout

    return Panel(controls, [readout, fig], update, title="Change a trained model's LayerNorms and measure the damage")


@dataclass(frozen=True)
class _InterventionView:
    """What the intervention panel shows for one setting: each sentence's cosine to its original embedding, each
    pair's cosine, and the readout."""
    cos: list[float]
    similar: list[float]
    unrelated: list[float]
    readout: str


def _intervention_view(base: Baseline, clean: Damage, layer: int, sites: str, name: str,
                       change: str | Callable) -> _InterventionView:
    """Rerun the model from the edited block onwards with `change` at `sites` of block `layer` (0: every block)."""
    layers = list(range(1, len(base.model.blocks) + 1)) if layer == 0 else [layer]
    d = damage(base, intervened_embeddings(base, layers, change, sites))
    where = "every block" if layer == 0 else f"block L{layer}"
    text = (f"<b>{html.escape(INTERVENTIONS[name])}</b>, {html.escape(NORM_SITES[sites])}, {where}: mean cosine to "
            f"the original embeddings <b>{float(d.cos.mean()):.4f}</b> (worst {float(d.cos.min()):.4f}) &nbsp;|&nbsp; "
            f"similar − unrelated gap {clean.gap:.3f} → <b>{d.gap:.3f}</b> &nbsp;|&nbsp; unrelated sentences' mean "
            f"cosine {collapse(clean):.3f} → <b>{collapse(d):.3f}</b>")
    if collapse(d) > COLLAPSED:
        text += (f"<br><b>Collapsed:</b> unrelated sentences now point the same way (mean cosine above {COLLAPSED}), "
                 f"so which pairs rank above which ({d.ranked:.0%} right) measures nothing.")
    elif collapse(d) > COLLAPSING:
        text += (f", pairs ranked right {clean.ranked:.0%} → <b>{d.ranked:.0%}</b><br><b>Partly collapsed:</b> "
                 f"unrelated sentences' mean cosine is above {COLLAPSING}, so the embeddings crowd into one direction "
                 f"and the ranking says little about meaning; read the gap instead.")
    else:
        text += f", pairs ranked right {clean.ranked:.0%} → <b>{d.ranked:.0%}</b>"
    return _InterventionView(d.cos.tolist(), d.similar.tolist(), d.unrelated.tolist(), text)


def _intervention_figure(base: Baseline, clean: Damage) -> go.Figure:
    """Side by side: how far each sentence's embedding moved (bars), and each pair's cosine before and after the
    change (similar and unrelated pairs as two marker shapes, against the y = x line of no change)."""
    numbers = list(range(1, len(base.pairs.sentences) + 1))
    fig = live_subplots(1, 2, "The damage: sentence embeddings moved, and pairs before vs after", height=400,
                        horizontal_spacing=0.12,
                        subplot_titles=("each sentence: cosine(original, changed)", "each pair: cosine before → after"))
    fig.add_bar(x=numbers, y=[1.0] * len(numbers), hovertext=base.pairs.sentences, marker_color=color(0),
                name="sentence (1 = unmoved)", row=1, col=1)
    fig.add_scatter(x=[-0.3, 1], y=[-0.3, 1], mode="lines", line=dict(color="#999999", dash="dot"),
                    name="unchanged (y = x)", row=1, col=2)
    for kind, values, i in [("similar", clean.similar, 2), ("unrelated", clean.unrelated, 1)]:
        fig.add_scatter(x=values.tolist(), y=values.tolist(), mode="markers", name=f"{kind} pairs",
                        marker=dict(color=color(i), size=10, symbol=marker(0 if kind == "similar" else 2)),
                        row=1, col=2)
    fig.update_xaxes(title_text="sentence (hover for its text)", row=1, col=1)
    fig.update_yaxes(title_text="cosine", range=[-0.3, 1.05], row=1, col=1)
    fig.update_xaxes(title_text="original model", range=[-0.3, 1.02], row=1, col=2)
    fig.update_yaxes(title_text="changed model", range=[-0.3, 1.02], row=1, col=2)
    return fig


# ----- What the notebook's claim cells compute, shared with their claim experiments -----------------------------------
# The model is fixed; a run's seed picks the text (seed 0: the course's sentences, as the notebook runs; seed k: the
# held-out set k of data/heldout_sentences.json, text the claims were not tuned on), random token ids, or random
# features.

COLLAPSED = 0.9  # a mean cosine between unrelated sentences above this: every embedding points the same way
COLLAPSING = 0.5  # above this (the trained model: about 0.07) the ranking readout is already weak
SINK_BLOCKS = (2, 3, 4, 5)
# What the claim cells assert, written once: the cells and the claim experiments below judge with these.
REBUILD_ATOL = 1e-4     # C35: float32 on values up to about 10, through 6 blocks: round-off stays far below this
REBUILD_COS = 0.9999    # C35: the sentence embeddings' cosine to the library's
CENTERED_BELOW = 0.1    # C36: |μ|/σ of every token entering a LayerNorm
SINK_RATIO = 5.0        # C90: a sink gets more than 5x the share even attention would give
MAJORITY = 0.5          # C90: on the course's short sentences, more than half of all attention
CUT_BY = 5.0            # C95: switching the spike's feature off cuts block 2's sink more than 5x
SPIKE_ABOVE = 100.0     # C91: the massive activation entering a LayerNorm
STREAM_BELOW = 15.0     # C91: the largest |value| in the normalized stream between blocks
SPIKE_FEATURE = 99      # C91: the feature it sits on (of [CLS], position 0)
HARMLESS_COS = 0.9999   # C42: a soft-cap that leaves every embedding this close has no effect worth the name
TRAIL_RATIO = 2.5       # C151: [CLS] moved off position 0 still gets more than 2.5x even attention
FLOAT64_ATOL = 1e-12    # C154: float64 on values up to about 200, through 6 blocks: round-off near 1e-14
MOSTLY = 0.6            # C152: the spike's feature alone does more than this share of the outliers' damage


def collapsed(d: Damage) -> bool:
    """C93: do unrelated sentences' embeddings point nearly the same way (mean cosine above COLLAPSED)?"""
    return collapse(d) > COLLAPSED


def centered(ratio: float) -> bool:
    """C36: is the largest |μ|/σ below CENTERED_BELOW, so that re-centering removes little?"""
    return ratio < CENTERED_BELOW


def is_sink(share: float, uniform: float) -> bool:
    """C90, C95: does a block put more than SINK_RATIO times even attention's share on the first token?"""
    return share > SINK_RATIO * uniform


def sink_cut(trained: float, off: float) -> bool:
    """C95: did switching a feature off cut the share on [CLS] more than CUT_BY-fold?"""
    return trained > CUT_BY * off


def spike_checks(s: dict) -> dict[str, bool]:
    """C91 on spike_sites's result: a massive activation enters a LayerNorm at [CLS]'s feature 99, not the stream."""
    return {"a residual sum entering a LayerNorm above 100": s["entering"] > SPIKE_ABOVE,
            "at [CLS] (position 0), feature 99": (s["position"], s["feature"]) == (0, SPIKE_FEATURE),
            "the stream between blocks below 15": s["stream"] < STREAM_BELOW}


def softcap_harmless(d: Damage) -> bool:
    """C42: does every capped sentence embedding stay within cosine HARMLESS_COS of the original?"""
    return float(d.cos.min()) > HARMLESS_COS


def collapse(d: Damage) -> float:
    """The mean cosine between the embeddings of unrelated sentences (about 0.07 in the trained model)."""
    return float(d.unrelated.mean())


def sentence_set(seed: int) -> SentencePairs:
    """Seed 0: the course's sentence pairs; seed k (1-5): the held-out set k, new sentences of the same shape."""
    if seed == 0:
        return load_sentences()
    sets, _ = load_heldout()
    if not 1 <= seed <= len(sets):
        raise ValueError(f"seed must be 0 (the course's sentences) or 1-{len(sets)} (a held-out set), got {seed}")
    return sets[seed - 1]


@lru_cache(maxsize=8)
def seed_baseline(seed: int) -> Baseline:
    """The unmodified model's run on sentence_set(seed), cached (the claim experiments share it)."""
    return baseline() if seed == 0 else baseline_of(sentence_set(seed))


@lru_cache(maxsize=1)
@torch.no_grad()
def paragraph_baseline() -> Baseline:
    """The unmodified model's run on the four held-out paragraphs (88-102 tokens), cached; no pairs (no damage)."""
    model = load_minilm()
    batch = tokenize(load_heldout()[1])
    states, hidden = model(batch.input_ids, batch.attention_mask, return_hidden=True)
    return Baseline(model, None, batch, hidden, sentence_embedding(states, batch.attention_mask),
                    norm_inputs(model, batch))


@lru_cache(maxsize=8)
@torch.no_grad()
def text_baseline(seed: int, length: int = 14) -> Baseline:
    """The unmodified model's run on random_text(seed, length=length), cached: meaningless text, so no sentence pairs
    (and no damage readout); what does not depend on the course's sentences holds here too."""
    model = load_minilm()
    batch = random_text(seed, length=length)
    states, hidden = model(batch.input_ids, batch.attention_mask, return_hidden=True)
    return Baseline(model, None, batch, hidden, sentence_embedding(states, batch.attention_mask),
                    norm_inputs(model, batch))


def _run_on(seed: int, text: str, length: int) -> Baseline:
    """The claim experiments' baseline: sentences (seed_baseline), the held-out paragraphs, or random WordPieces."""
    if text not in ("sentences", "paragraphs", "random"):
        raise ValueError(f"text must be 'sentences', 'paragraphs' or 'random', got {text!r}")
    if text == "paragraphs":
        return paragraph_baseline()
    return seed_baseline(seed) if text == "sentences" else text_baseline(seed, length)


def random_text(seed: int, n: int = 20, length: int = 14) -> Batch:
    """n sequences of `length` random WordPiece ids (ids 1996 and up: words and pieces, no special tokens) between
    [CLS] and [SEP]: text with no meaning, to show a pattern does not depend on the sentences."""
    tok = load_tokenizer()
    gen = torch.Generator().manual_seed(seed)
    words = torch.randint(1996, CONFIG["vocab_size"], (n, length), generator=gen)
    cls, sep = (torch.full((n, 1), tok.token_to_id(t)) for t in ("[CLS]", "[SEP]"))
    ids = torch.cat([cls, words, sep], 1)
    return Batch(ids, torch.ones_like(ids, dtype=torch.bool), [[tok.id_to_token(int(i)) for i in row] for row in ids])


@torch.no_grad()
def random_minilm(seed: int) -> MiniLM:
    """A MiniLM at PyTorch's random initialization (seeded): the control with the architecture and no training."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return MiniLM(**CONFIG).eval().requires_grad_(False)


@dataclass
class RebuildCheck:
    """The rebuild against the library: max |ours - library| at each hidden state (real tokens), the smallest cosine of
    the sentence embeddings, and the tensors the notebook reuses."""
    errors: list[float]
    cos_min: float
    states: Tensor
    hidden: list[Tensor]
    ref_hidden: list[Tensor]
    ref_embeddings: Tensor

    @property
    def holds(self) -> bool:
        return all(rebuild_checks(self).values())


def rebuild_checks(check: RebuildCheck) -> dict[str, bool]:
    """C35's tests of a rebuild: every hidden state within REBUILD_ATOL, every embedding's cosine REBUILD_COS."""
    return {"every hidden state within 1e-4 of the library's": max(check.errors) <= REBUILD_ATOL,
            "every sentence embedding's cosine at least 0.9999": check.cos_min >= REBUILD_COS}


@torch.no_grad()
def rebuild_check(model: MiniLM, batch: Batch, sentences: Sequence[str], reference=None) -> RebuildCheck:
    """Run `model` and the library (sentence-transformers; or `reference`, its outputs already computed) on batch."""
    states, hidden = model(batch.input_ids, batch.attention_mask, return_hidden=True)
    ref_hidden, ref_embeddings = reference or reference_outputs(sentences, batch)
    mask = batch.attention_mask
    errors = [float((a - b)[mask].abs().max()) for a, b in zip(hidden, ref_hidden)]
    cos = (sentence_embedding(states, mask) * ref_embeddings).sum(-1)
    return RebuildCheck(errors, float(cos.min()), states, hidden, ref_hidden, ref_embeddings)


@contextlib.contextmanager
def tanh_gelu(model: MiniLM):
    """Within the block, every FFN uses the tanh approximation of GELU (the check that must fail); restored after."""
    exact = [b.ffn.activation for b in model.blocks]
    try:
        for b in model.blocks:
            b.ffn.activation = torch.nn.GELU(approximate="tanh")
        yield model
    finally:
        for b, act in zip(model.blocks, exact):
            b.ffn.activation = act


def centering_ratio(base: Baseline, axis: str = "token") -> float:
    """The largest |μ|/σ over the 13 LayerNorms' inputs: per token over its 384 features (what LayerNorm subtracts),
    or, axis="feature", per feature over the real tokens (what BatchNorm would subtract)."""
    dim = {"token": -1, "feature": 0}[axis]
    worst = 0.0
    for x in base.norm_in.values():
        real = x[base.mask]
        ratio = real.mean(dim).abs() / real.std(dim, unbiased=False)
        worst = max(worst, float(ratio.max()))
    return worst


@torch.no_grad()
def stream_after(base: Baseline, change: str | None = None) -> list[Tensor]:
    """The stream after the embeddings and after each block (7 tensors (n, seq, d)), every block as trained (None),
    with its LayerNorms removed ("remove") or rewired to Pre-LN ("pre"), from the same embeddings."""
    if change is None:
        return base.hidden
    if change not in ("remove", "pre"):
        raise ValueError(f"change must be None, 'remove' or 'pre', got {change!r}")
    edit = {"placement": "pre"} if change == "pre" else {"norm1": lambda t: t, "norm2": lambda t: t}
    x, out = base.hidden[0], [base.hidden[0]]
    for block in base.model.blocks:
        x = block(x, base.mask, **edit)
        out.append(x)
    return out


def stream_checks(base: Baseline, stream: list[Tensor]) -> tuple[dict[str, bool], dict[str, float]]:
    """The C37 cell's tests of a stream (7 tensors) and the figures they read: per-token L2 norms of real tokens."""
    norms = [h[base.mask].norm(dim=-1) for h in stream]
    entering = max(float(x[base.mask].norm(dim=-1).max()) for x in base.norm_in.values())
    medians = [float(n.median()) for n in norms]
    fig = dict(smallest=min(float(n.min()) for n in norms), largest=max(float(n.max()) for n in norms),
               entering=entering, median_low=min(medians), median_high=max(medians))
    checks = {"every token of the stream between 2 and 20": 2 < fig["smallest"] and fig["largest"] < 20,
              "a residual sum entering a LayerNorm above 20": entering > 20,
              "median within 1.6x across the stream": fig["median_high"] < 1.6 * fig["median_low"]}
    return checks, fig


def spike_sites(base: Baseline, stream: list[Tensor] | None = None) -> dict[str, float]:
    """The largest |value| entering any LayerNorm (the residual sums) and anywhere in the stream between blocks
    (`stream`, default the trained model's), with the feature and token position of the first."""
    entering = torch.stack([x[base.mask].abs().max() for x in base.norm_in.values()])
    where = list(base.norm_in)[int(entering.argmax())]
    x = base.norm_in[where].abs().masked_fill(~base.mask[..., None], 0)
    position, feature = divmod(int(x.amax(0).argmax()), x.shape[-1])
    stream = base.hidden if stream is None else stream
    return dict(entering=float(entering.max()), where=where, feature=feature, position=position,
                stream=max(float(h[base.mask].abs().max()) for h in stream))


def outlier_checks(base: Baseline, feature_loudness: Callable, dims: list[int]) -> dict[str, bool]:
    """The C38 cell's tests at `dims` (the outliers, or random features for the control)."""
    loudness = feature_loudness(base.hidden, base.mask)
    top = max(dims, key=lambda d: float(loudness[1:-1, d].mean()))
    last = layer_norms(base.model)["L6 FFN"]
    return {"each middle hidden state has one of them above 4x the median":
            bool((loudness[1:-1][:, dims].amax(dim=1) > 4).all()),
            "none above 3x in the output": bool((loudness[-1, dims] < 3).all()),
            "the last LayerNorm's |γ| at the loudest below 0.01": abs(float(last.weight[top])) < 0.01}


def random_dims(outliers: list[int], n_sets: int, gen: torch.Generator, d: int = 384) -> list[list[int]]:
    """n_sets random choices of len(outliers) features among the others."""
    others = torch.tensor([i for i in range(d) if i not in outliers])
    return [others[torch.randperm(len(others), generator=gen)[:len(outliers)]].tolist() for _ in range(n_sets)]


@torch.no_grad()
def disabled(base: Baseline, zeroed: Callable, dims: list[int], parts=("gamma", "beta")) -> Tensor:
    """Sentence embeddings (n, d) with the notebook's zeroed(ln, dims, parts) in all 13 LayerNorms."""
    norms = layer_norms(base.model)
    x = zeroed(norms["embeddings"], dims, parts)(base.norm_in["embeddings"])
    edits = {i: dict(norm1=zeroed(b.norm1, dims, parts), norm2=zeroed(b.norm2, dims, parts))
             for i, b in enumerate(base.model.blocks)}
    return sentence_embedding(run_from(base.model, x, base.mask, 0, edits), base.mask)


def zeroing_checks(clean: Damage, outliers: Damage, gamma_only: Damage, beta_only: Damage,
                   random: list[Damage]) -> tuple[dict[str, bool], float]:
    """The C39 cell's tests, and the figure: damage (1 - mean cosine) of the outliers over the worst random choice."""
    worst_random = max(1 - float(d.cos.mean()) for d in random)
    hit = 1 - float(outliers.cos.mean())
    checks = {"outliers more than 5x the worst random choice": hit > 5 * worst_random,
              "gap shrinks by more than 0.1": outliers.gap < clean.gap - 0.1,
              "ranking survives (at least 90%)": outliers.ranked >= 0.9,
              "γ only more than 5x β only":
              1 - float(gamma_only.cos.mean()) > 5 * (1 - float(beta_only.cos.mean()))}
    return checks, hit / worst_random


SURGERY_ROWS = {**{f"L{i}": [i] for i in range(1, 7)}, "all six": list(range(1, 7))}


def surgery_damage(base: Baseline, changes: dict[str, object]) -> dict[tuple[str, str], Damage]:
    """Damage of each change (a name of minilm's interventions or a function of a LayerNorm) on both LayerNorms of
    each block alone and of all six at once, keyed (row, change name)."""
    return {(row, kind): damage(base, intervened_embeddings(base, layers, change, "both"))
            for row, layers in SURGERY_ROWS.items() for kind, change in changes.items()}


def rms_checks(runs: dict, clean: Damage, kind: str = "rms") -> dict[str, bool]:
    """The C40 tests: at every row, the change keeps mean cosine above 0.95, the gap within 0.05, the ranking whole."""
    rows = [r for r, k in runs if k == kind]
    return {"mean cosine above 0.95": all(float(runs[r, kind].cos.mean()) > 0.95 for r in rows),
            "gap within 0.05": all(abs(runs[r, kind].gap - clean.gap) < 0.05 for r in rows),
            "every similar pair above every unrelated one": all(runs[r, kind].ranked == 1.0 for r in rows)}


def rescaling_checks(runs: dict, against: Sequence[str] = ("remove", "pre")) -> tuple[dict[str, bool], float]:
    """The C41 tests: each change in `against` does more than 10x the damage of the RMSNorm swap at every row, and in
    all six blocks leaves mean cosine below 0.5 and gap below 0.15; the figure is the smallest damage ratio."""
    rows = [r for r, k in runs if k == "rms"]
    ratio = min((1 - float(runs[r, k].cos.mean())) / (1 - float(runs[r, "rms"].cos.mean()))
                for r in rows for k in against)
    checks = {"more than 10x the RMSNorm swap's damage everywhere": ratio > 10,
              "all six: mean cosine below 0.5 and gap below 0.15":
              all(float(runs["all six", k].cos.mean()) < 0.5 and runs["all six", k].gap < 0.15 for k in against)}
    return checks, ratio


@lru_cache(maxsize=4)
def _capped_model(cap: float) -> MiniLM:
    capped = MiniLM(**CONFIG, attn_softcap=cap).eval().requires_grad_(False)
    capped.load_state_dict(load_minilm().state_dict())
    return capped


@torch.no_grad()
def capped_damage(base: Baseline, cap: float) -> Damage:
    """The trained weights in a MiniLM whose every block soft-caps its attention logits at `cap` (cached per cap)."""
    capped = _capped_model(float(cap))
    return damage(base, sentence_embedding(capped(base.batch.input_ids, base.mask), base.mask))


def sink_figure(shares: list[float], uniform: float, control: list[float]) -> go.Figure:
    """Per block, the share of attention on [CLS] in the trained model and in a random-weight one, and uniform's."""
    fig = static_figure("The attention sink: the share of all attention (every head, real queries) on [CLS]",
                        "block", "share on [CLS]", height=380)
    blocks = [f"L{i}" for i in range(1, len(shares) + 1)]
    fig.add_bar(x=blocks, y=shares, marker_color=color(0), name="trained all-MiniLM-L6-v2")
    fig.add_bar(x=blocks, y=control, marker=dict(color=color(1), pattern_shape="/"),  # hatched: not colour alone
                name="same architecture, random weights (control)")
    fig.add_scatter(x=blocks, y=[uniform] * len(blocks), mode="lines", line=dict(color=color(7), dash="dot"),
                    name=f"uniform over the real tokens ({uniform:.3f})")
    fig.update_yaxes(range=[0, 1])
    return fig


def int8_error(int8_roundtrip: Callable, x: Tensor, held_aside: Sequence[int] = (),
               measured: Sequence[int] | None = None, **options) -> float:
    """Relative error (L2) of the `measured` features of x (tokens, d) after the notebook's int8_roundtrip, with the
    `held_aside` features kept out of it (left in float, as LLM.int8 does with its outlier features). `measured`
    defaults to every feature not held aside; pass the same list to compare rows fairly. `options` go to the roundtrip
    (per_token=True: one scale per token)."""
    held = set(held_aside)
    kept = [i for i in range(x.shape[-1]) if i not in held]
    measured = kept if measured is None else list(measured)
    if held & set(measured):
        raise ValueError("a feature held aside in float has no int8 error to measure")
    q = x.clone()
    q[:, kept] = int8_roundtrip(x[:, kept], **options)
    ref = x[:, measured]
    return float((q[:, measured] - ref).norm() / ref.norm())


def int8_table(int8_roundtrip: Callable, x: Tensor, spike: int, outliers: Sequence[int],
               held: int | None = None) -> dict[str, float]:
    """The C92 rows: int8 error of the same ordinary features (every feature not in `outliers`) of x, with one scale
    per tensor and nothing held aside, with `held` (default the spike's feature) alone held aside, with the other
    outlier features held aside, with all of them, and with one scale per token and nothing held aside."""
    held = spike if held is None else held
    others = [d for d in outliers if d != spike]
    ordinary = [d for d in range(x.shape[-1]) if d not in set(outliers) | {held}]
    return {"one scale, nothing held aside": int8_error(int8_roundtrip, x, (), ordinary),
            f"one scale, feature {held} held aside": int8_error(int8_roundtrip, x, [held], ordinary),
            f"one scale, features {others} held aside": int8_error(int8_roundtrip, x, others, ordinary),
            f"one scale, all {len(outliers)} outliers held aside": int8_error(int8_roundtrip, x, outliers, ordinary),
            "one scale per token, nothing held aside": int8_error(int8_roundtrip, x, (), ordinary, per_token=True)}


def int8_checks(table: dict[str, float]) -> tuple[dict[str, bool], float]:
    """The C92 tests on int8_table's rows (in its order); the figure: how much holding the one feature aside cuts
    the error."""
    none, one, others, _, per_token = table.values()
    checks = {"one feature held aside cuts the error more than 10x": none > 10 * one,
              "the other outlier features held aside gain less than 1.5x": none < 1.5 * others,
              "one scale per token cuts it more than 5x, nothing held aside": none > 5 * per_token}
    return checks, none / one


@contextlib.contextmanager
def feature_switched_off(model: MiniLM, feature: int, where: Sequence[str] = ("L1 FFN",)):
    """Within the block, γ and β of `feature` are 0 in the named LayerNorms of `model` (all 13: every name of
    layer_norms): that feature leaves those norms as 0 for every token. Restored after."""
    norms = layer_norms(model)
    saved = {n: (norms[n].weight[feature].clone(), norms[n].bias[feature].clone()) for n in where}
    try:
        with torch.no_grad():
            for n in where:
                norms[n].weight[feature] = 0.0
                norms[n].bias[feature] = 0.0
        yield model
    finally:
        with torch.no_grad():
            for n, (w, b) in saved.items():
                norms[n].weight[feature], norms[n].bias[feature] = w, b


@torch.no_grad()
def sink_without(model: MiniLM, batch: Batch, attention_to_cls: Callable, feature: int,
                 where: Sequence[str] = ("L1 FFN",)) -> list[float]:
    """The notebook's attention_to_cls per block, with `feature` switched off in the LayerNorms `where`."""
    with feature_switched_off(model, feature, where):
        _, hidden = model(batch.input_ids, batch.attention_mask, return_hidden=True)
        return attention_to_cls(model, hidden, batch.attention_mask)[0]


def value_norms(model: MiniLM, hidden: list[Tensor], mask: Tensor, blocks: Sequence[int] = SINK_BLOCKS
                ) -> dict[int, tuple[float, float]]:
    """Per block: the median norm of [CLS]'s value vectors (every head) and that of the other real tokens'."""
    out = {}
    with torch.no_grad():
        for b in blocks:
            _, v = model.blocks[b - 1].attn.logits(hidden[b - 1])     # (batch, heads, seq, d_head)
            norms = v.norm(dim=-1)
            rest = norms[:, :, 1:].permute(0, 2, 1)[mask[:, 1:]]
            out[b] = float(norms[:, :, 0].median()), float(rest.median())
    return out


def growth_checks(base: Baseline, stream: list[Tensor]) -> tuple[dict[str, bool], list[float]]:
    """The C94 tests: the median per-token norm grows after every block, to more than 100x the trained model's."""
    medians = [float(h[base.mask].norm(dim=-1).median()) for h in stream]
    trained = float(base.hidden[-1][base.mask].norm(dim=-1).median())
    return {"grows after every block": all(b > a for a, b in zip(medians[1:], medians[2:])),
            "ends above 100x the trained model's": medians[-1] > 100 * trained}, medians


@torch.no_grad()
def float64_errors(model: MiniLM, batch: Batch) -> list[float]:
    """C35 in float64 alone: max |ours - library| at each hidden state (real tokens) with copies of both in float64."""
    ours = copy.deepcopy(model).double()
    theirs = copy.deepcopy(load_reference()[0].auto_model).double()
    mask = batch.attention_mask
    _, hidden = ours(batch.input_ids, mask, return_hidden=True)
    ref = theirs(input_ids=batch.input_ids, attention_mask=mask.long(), output_hidden_states=True).hidden_states
    return [float((a - b)[mask].abs().max()) for a, b in zip(hidden, ref)]


@torch.no_grad()
def rerun(model: MiniLM, batch: Batch, offset: int = 0,
          swap: tuple[int, int] | None = None) -> tuple[list[Tensor], dict[str, Tensor]]:
    """The stream (7 tensors) and each LayerNorm's input, named as in layer_norms, for `batch` with the position ids
    shifted by `offset` (0: positions 0, 1, 2, ... as in training), and with `swap` = (i, j) the position ids of
    indices i and j exchanged (the tokens stay where they are)."""
    e, ids, mask = model.embeddings, batch.input_ids, batch.attention_mask
    positions = torch.arange(ids.shape[1]) + offset
    if swap is not None:
        i, j = swap
        positions[[i, j]] = positions[[j, i]]
    raw = e.word(ids) + e.position(positions) + e.token_type(torch.zeros_like(ids))
    x, norm_in = e.norm(raw), {"embeddings": raw}
    hidden = [x]
    for i, block in enumerate(model.blocks, start=1):
        seen = {}
        x = block(x, mask, record=seen)
        hidden.append(x)
        norm_in[f"L{i} attention"], norm_in[f"L{i} FFN"] = seen["norm1_in"], seen["norm2_in"]
    return hidden, norm_in


def cls_moved(batch: Batch, to: int = 3) -> Batch:
    """The same batch with [CLS] moved from position 0 to position `to`: the first `to` words move up by one."""
    if batch.input_ids.shape[1] <= to or not bool(batch.attention_mask[:, :to + 1].all()):
        raise ValueError(f"every sequence needs at least {to + 1} real tokens to move [CLS] to position {to}")
    order = [*range(1, to + 1), 0, *range(to + 1, batch.input_ids.shape[1])]
    tokens = [[t[i] for i in order[:len(t)]] for t in batch.tokens]
    return Batch(batch.input_ids[:, order], batch.attention_mask, tokens)


@torch.no_grad()
def attention_on(model: MiniLM, hidden: list[Tensor], mask: Tensor, key: int) -> tuple[list[float], float]:
    """Per block, the share of all attention (every head, every real query) on the token at position `key`, and the
    share even attention over each sequence's real tokens would give it (the notebook's attention_to_cls, any key)."""
    shares = []
    for block, x in zip(model.blocks, hidden):
        scores, _ = block.attn.logits(x)
        p = scores.masked_fill(~mask[:, None, None, :], float("-inf")).softmax(-1)[..., key]
        shares.append(float(p.permute(1, 0, 2)[:, mask].mean()))
    uniform = 1 / mask.sum(1, keepdim=True).float().expand(mask.shape)[mask]
    return shares, float(uniform.mean())


def spike_of(find_spike: Callable, x: Tensor, mask: Tensor) -> tuple[float, int, int]:
    """The notebook's find_spike on x (batch, seq, d): (the largest |value| at its place, position, feature)."""
    position, feature = find_spike(x, mask)
    value = x[:, position, feature].abs().masked_fill(~mask[:, position], 0).max()
    return float(value), int(position), int(feature)


def exact_in_float64(errors: Sequence[float]) -> bool:
    """C154: does every hidden state match the library's within FLOAT64_ATOL?"""
    return max(errors) <= FLOAT64_ATOL


def first_position_spike(value: float, position: int) -> bool:
    """C150: is there a massive activation (above SPIKE_ABOVE) at position 0?"""
    return value > SPIKE_ABOVE and position == 0


def moved_sink_checks(at_0: list[float], at_3: list[float], uniform: float) -> dict[str, bool]:
    """C151's tests: the token at position 3 gets more than TRAIL_RATIO times even attention in blocks 3-5, and
    position 0 keeps block 2's sink and gets more than TRAIL_RATIO times in blocks 3-5 too (the sink splits)."""
    return {"position 3 above 2.5x even attention in blocks 3-5":
            min(at_3[b - 1] for b in (3, 4, 5)) > TRAIL_RATIO * uniform,
            "position 0 keeps block 2's sink (above 5x)": is_sink(at_0[1], uniform),
            "position 0, now a word, also above 2.5x in blocks 3-5": min(at_0[b - 1] for b in (3, 4, 5))
            > TRAIL_RATIO * uniform}


def carries_most(share: float) -> bool:
    """C152: does one feature do more than MOSTLY of the outliers' damage?"""
    return share > MOSTLY


def damage_share(part: Damage, whole: Damage) -> float:
    """How much of `whole`'s damage (1 - mean cosine) `part` does."""
    return (1 - float(part.cos.mean())) / (1 - float(whole.cos.mean()))


def feature_damage(base: Baseline, zeroed: Callable, outliers: list[int], feature: int) -> float:
    """C152: the share of the damage of zeroing γ, β at all the outliers that zeroing them at `feature` alone does."""
    return damage_share(damage(base, disabled(base, zeroed, [feature])), damage(base, disabled(base, zeroed, outliers)))


def median_sigmas(base: Baseline) -> dict[str, float]:
    """Per LayerNorm, the median σ of its input over the real tokens: the one fixed σ of C153."""
    return {n: float(x[base.mask].std(-1, unbiased=False).median()) for n, x in base.norm_in.items()}


def fixed_sigma_runs(base: Baseline, fixed_sigma: Callable, keep_first: bool) -> dict[str, Damage]:
    """Damage of the notebook's fixed_sigma(ln, sigma, keep_first) (sigma: that norm's median_sigmas) in both
    LayerNorms of each block alone and of all six at once, keyed by SURGERY_ROWS's names."""
    sigmas, names = median_sigmas(base), {id(ln): n for n, ln in layer_norms(base.model).items()}
    change = lambda ln: fixed_sigma(ln, sigmas[names[id(ln)]], keep_first)  # noqa: E731
    return {row: _damage_or_cosines(base, intervened_embeddings(base, layers, change))
            for row, layers in SURGERY_ROWS.items()}


def _damage_or_cosines(base: Baseline, changed: Tensor) -> Damage:
    """damage(base, changed); on text without sentence pairs (the paragraphs) only the cosines, gap and ranked NaN."""
    if base.pairs is not None:
        return damage(base, changed)
    cos, none = (torch.nn.functional.normalize(changed, dim=-1) * base.embeddings).sum(-1), torch.empty(0)
    return Damage(cos, float("nan"), float("nan"), none, none)


def sigma_checks(runs: dict[str, Damage], clean: Damage | None) -> dict[str, bool]:
    """C153's tests: blocks 1-4, each alone, mean cosine above 0.99; block 5 or 6 alone above 0.9; all six above 0.75,
    and (where there are sentence pairs, clean not None) at least 95% ranked right with the gap within 0.2 of the
    trained model's."""
    six, one = runs["all six"], [float(runs[f"L{i}"].cos.mean()) for i in range(1, 7)]
    checks = {"blocks 1-4, each alone: mean cosine above 0.99": min(one[:4]) > 0.99,
              "block 5 or 6 alone: mean cosine above 0.9": min(one[4:]) > 0.9,
              "all six: mean cosine above 0.75": float(six.cos.mean()) > 0.75}
    if clean is not None:
        checks |= {"all six: at least 95% ranked right": six.ranked >= 0.95,
                   "all six: gap within 0.2": abs(six.gap - clean.gap) < 0.2}
    return checks


# ----- Claim experiments ----------------------------------------------------------------------------------------------
_SUBSET = "seed 0: the course's sentences; seed k: held-out set k (data/heldout_sentences.json)"
_PARAGRAPHS = "the four held-out paragraphs (88-102 tokens)"


@claim_experiment(
    "C35", statement="The course's Post-LN TransformerBlock loaded with all-MiniLM-L6-v2's weights matches the library "
                     "at every hidden state within 1e-4, and its sentence embeddings with cosine at least 0.9999",
    figure="largest |ours - library| over the 7 hidden states (real tokens)", kind="roundoff",
    settings=[Setting(_SUBSET),
              Setting("the FFNs' GELU swapped for its tanh approximation (control: the check must fail)",
                      {"gelu": "tanh"}, expect=False)])
def rebuild_claim(seed, *, gelu="exact"):
    base = seed_baseline(seed)
    reference = reference_outputs(base.pairs.sentences, base.batch)
    with (tanh_gelu(base.model) if gelu == "tanh" else contextlib.nullcontext()):
        check = rebuild_check(base.model, base.batch, base.pairs.sentences, reference)
    return Outcome(check.holds, max(check.errors), f"cosine >= {check.cos_min:.7f}")


@claim_experiment(
    "C36", statement="Every token entering each of the 13 LayerNorms has a mean |μ| below a tenth of its σ, on the "
                     "course's sentences and on random WordPieces (14 and 60 of them)",
    figure="largest |μ|/σ over all LayerNorms and tokens", kind="float",
    settings=[Setting(_SUBSET), Setting(_PARAGRAPHS, {"text": "paragraphs"}),
              Setting("random WordPieces, 14 tokens (the seed draws them)", {"text": "random"}),
              Setting("random WordPieces, 60 tokens", {"text": "random", "length": 60}),
              Setting("the same ratio per feature over the tokens, BatchNorm's axis (control)", {"axis": "feature"},
                      expect=False)])
def centering_claim(seed, *, axis="token", text="sentences", length=14):
    ratio = centering_ratio(_run_on(seed, text, length), axis)
    return Outcome(centered(ratio), ratio, f"axis {axis}")


@claim_experiment(
    "C37", statement="On sentences of about 11 tokens (the course's and five held-out sets) the stream between blocks "
                     "is normalized: every token's norm lies between 2 and 20 and the median moves less than 1.6x "
                     "across the 7 hidden states, while residual sums entering a LayerNorm exceed 20; on held-out "
                     "paragraphs of about 90 tokens and on random WordPieces (14 or 60 tokens) it does not: the last "
                     "hidden state shrinks, or the median moves 1.8x or more",
    figure="largest per-token norm in the stream between blocks", kind="float",
    settings=[Setting(_SUBSET),
              Setting(_PARAGRAPHS + " (where it stops: the last hidden state shrinks, its median about 4x below the "
                      "others', some tokens below 2)", {"text": "paragraphs"}, expect=False),
              Setting("random WordPieces, 14 tokens (where it stops: the median moves about 1.8x)", {"text": "random"},
                      expect=False),
              Setting("random WordPieces, 60 tokens (where it stops: the median moves more than 4x)",
                      {"text": "random", "length": 60}, expect=False),
              Setting("every block rewired to Pre-LN (control: nothing resets the stream)", {"change": "pre"},
                      expect=False)])
def stream_claim(seed, *, change=None, text="sentences", length=14):
    base = _run_on(seed, text, length)
    checks, fig = stream_checks(base, stream_after(base, change))
    return Outcome.of_checks(checks, fig["largest"])


@claim_experiment(
    "C38", statement="On real text (the course's sentences, five held-out sets, four paragraphs), at the outlier "
                     "features, one is above 4x the median feature in every "
                     "middle hidden state, none is above 3x in the output, and the last LayerNorm's γ at the loudest "
                     "is below 0.01 in size (on random WordPieces the loudest is another feature, and that last test "
                     "fails)",
    figure="number of outlier features found", kind="exact",
    settings=[Setting(_SUBSET), Setting(_PARAGRAPHS, {"text": "paragraphs"}),
              Setting("random WordPieces, 14 tokens (where it stops: the loudest outlier is another feature, whose last "
                      "γ is not near 0)", {"text": "random"}, expect=False),
              Setting("as many random features instead (control)", {"dims": "random"}, expect=False)])
def outlier_claim(seed, feature_loudness, outlier_dims, *, dims="outliers", text="sentences"):
    base = _run_on(seed, text, 14)
    outliers = outlier_set(base, outlier_dims)
    if dims == "random":
        outliers = random_dims(outliers, 1, torch.Generator().manual_seed(seed))[0]
    checks = outlier_checks(base, feature_loudness, outliers)
    return Outcome.of_checks(checks, len(outliers), f"dims {outliers}")


@claim_experiment(
    "C39", statement="Zeroing γ and β at the outlier features in all 13 LayerNorms does more than 5x the damage of "
                     "the worst of 5 random choices, shrinks the gap by more than 0.1 with at least 90% ranked right, and "
                     "the damage runs through γ (γ only more than 5x β only)",
    figure="damage (1 - mean cosine) of zeroing the outliers / the worst random choice's", kind="float",
    settings=[Setting(_SUBSET + "; the seed draws the random features"),
              Setting("zeroing β alone at the outliers (control: the tests must fail)", {"parts": ("beta",)},
                      expect=False)])
def zeroing_claim(seed, zeroed, outlier_dims, *, parts=("gamma", "beta")):
    base = seed_baseline(seed)
    outliers = outlier_set(base, outlier_dims)
    clean = damage(base, base.embeddings)
    runs = {p: damage(base, disabled(base, zeroed, outliers, p)) for p in [parts, ("gamma",), ("beta",)]}
    random = [damage(base, disabled(base, zeroed, dims))
              for dims in random_dims(outliers, 5, torch.Generator().manual_seed(seed))]
    checks, ratio = zeroing_checks(clean, runs[parts], runs[("gamma",)], runs[("beta",)], random)
    return Outcome.of_checks(checks, ratio)


@claim_experiment(
    "C40", statement="RMSNorm with the trained γ and β in place of both LayerNorms of any one block, or of all six, "
                     "keeps the mean cosine to the original embeddings above 0.95, the gap within 0.05 and every "
                     "similar pair above every unrelated one",
    figure="smallest mean cosine over the 7 rows", kind="float",
    settings=[Setting(_SUBSET),
              Setting("removing the LayerNorms instead (control)", {"change": "remove"}, expect=False)])
def rms_claim(seed, rms_instead, *, change="rms"):
    base = seed_baseline(seed)
    runs = surgery_damage(base, {"rms": rms_instead if change == "rms" else change})
    checks = rms_checks(runs, damage(base, base.embeddings))
    return Outcome.of_checks(checks, min(float(d.cos.mean()) for d in runs.values()))


@claim_experiment(
    "C41", statement="Removing a block's LayerNorms, or rewiring it to Pre-LN, does more than 10x the damage of the "
                     "RMSNorm swap in every block and in all six at once; in all six it leaves mean cosine below 0.5 "
                     "and gap below 0.15",
    figure="smallest damage ratio (removed or rewired / RMSNorm) over the rows", kind="float",
    settings=[Setting(_SUBSET),
              Setting("zeroing γ and β at 4 random features instead (control: a small edit)", {"against": "random"},
                      expect=False)])
def rescaling_claim(seed, rms_instead, zeroed, *, against="remove+pre"):
    base = seed_baseline(seed)
    if against == "random":
        dims = torch.randperm(384, generator=torch.Generator().manual_seed(seed))[:4].tolist()
        changes = {"rms": rms_instead, "random": lambda ln: zeroed(ln, dims)}
    else:
        changes = {"rms": rms_instead, "remove": "remove", "pre": "pre"}
    runs = surgery_damage(base, changes)
    checks, ratio = rescaling_checks(runs, [k for k in changes if k != "rms"])
    return Outcome.of_checks(checks, ratio)


@claim_experiment(
    "C42", statement="A soft-cap of 50 on every attention logit leaves every sentence embedding within cosine 0.9999 "
                     "of the original (so do caps of 100 and 30); a cap of 20 already does not, nor one of 5, inside "
                     "the logits' range",
    figure="mean cosine of the capped model's embeddings to the original", kind="float",
    settings=[Setting(_SUBSET + ", cap 50"), Setting("cap 100", {"cap": 100.0}), Setting("cap 30", {"cap": 30.0}),
              Setting("cap 20 (where it stops: the smallest cosine falls below 0.9999)", {"cap": 20.0},
                      expect=False),
              Setting("cap 5 (where the notebook says the cap bends the model)", {"cap": 5.0}, expect=False)])
def softcap_claim(seed, *, cap=50.0):
    d = capped_damage(seed_baseline(seed), cap)
    return Outcome(softcap_harmless(d), float(d.cos.mean()), f"smallest cosine {float(d.cos.min()):.6f}")


@claim_experiment(
    "C90", statement="In each of blocks 2 to 5, [CLS] gets more than 5x the share of all attention (every head, every "
                     "real query) that even attention over the real tokens would give it: an attention sink",
    figure="smallest ratio (share of attention on [CLS] / even attention's share) over the blocks tested",
    kind="float",
    settings=[Setting(_SUBSET), Setting(_PARAGRAPHS, {"text": "paragraphs"}),
              Setting("random token ids between [CLS] and [SEP], 14 of them (the seed draws them)", {"text": "random"}),
              Setting("random token ids, 60 of them (a length setting: the share itself falls below 0.5 there)",
                      {"text": "random", "length": 60}),
              Setting("block 1 (control: the sink forms after it)", {"blocks": (1,)}, expect=False),
              Setting("the same architecture with random weights (control)", {"weights": "random"}, expect=False)])
def sink_claim(seed, attention_to_cls, *, text="sentences", length=14, blocks=SINK_BLOCKS, weights="trained"):
    model = load_minilm() if weights == "trained" else random_minilm(seed)
    batch = random_text(seed, length=length) if text == "random" else _run_on(seed, text, length).batch
    with torch.no_grad():
        _, hidden = model(batch.input_ids, batch.attention_mask, return_hidden=True)
    shares, uniform = attention_to_cls(model, hidden, batch.attention_mask)
    low = min(shares[b - 1] for b in blocks) / uniform
    holds = all(is_sink(shares[b - 1], uniform) for b in blocks)
    return Outcome(holds, low, f"uniform {uniform:.3f}; shares {[round(v, 2) for v in shares]}")


@claim_experiment(
    "C91", statement="The massive activation lives in the residual sums entering the LayerNorms (largest |value| above "
                     "100, at feature 99 of [CLS]), not in the stream between blocks (largest |value| below 15): a "
                     "Post-LN model normalizes it away",
    figure="largest |value| in the stream between blocks", kind="float",
    settings=[Setting(_SUBSET), Setting(_PARAGRAPHS, {"text": "paragraphs"}),
              Setting("random WordPieces, 14 tokens (the seed draws them)", {"text": "random"}),
              Setting("random WordPieces, 60 tokens", {"text": "random", "length": 60}),
              Setting("every block rewired to Pre-LN (control: then the spike rides in the stream)",
                      {"change": "pre"}, expect=False)])
def spike_claim(seed, *, change=None, text="sentences", length=14):
    base = _run_on(seed, text, length)
    s = spike_sites(base, stream_after(base, change))
    return Outcome.of_checks(spike_checks(s), s["stream"],
                             f"entering {s['entering']:.1f} at {s['where']}, feature {s['feature']}")


@claim_experiment(
    "C92", statement="Per-tensor int8 of the residual sum entering the first FFN's LayerNorm, measured on the same "
                     "ordinary features: holding the massive activation's one feature aside cuts their error more than "
                     "10x, holding the other outlier features aside gains less than 1.5x, and one scale per token cuts "
                     "it more than 5x with nothing held aside",
    figure="error with nothing held aside / error with the spike's feature held aside", kind="float",
    settings=[Setting(_SUBSET), Setting(_PARAGRAPHS, {"text": "paragraphs"}),
              Setting("random WordPieces, 14 tokens (the seed draws them)", {"text": "random"}),
              Setting("a random feature held aside instead of the spike's (control)", {"held": "random"},
                      expect=False),
              Setting("the normalized stream after block 1 instead (control: Post-LN's stream is mild)",
                      {"tensor": "stream"}, expect=False)])
def int8_claim(seed, int8_roundtrip, outlier_dims, *, held="spike", tensor="L1 FFN", text="sentences"):
    base = _run_on(seed, text, 14)
    outliers = outlier_set(base, outlier_dims)
    spike = spike_sites(base)["feature"]
    aside = None if held == "spike" else random_dims(outliers, 1, torch.Generator().manual_seed(seed))[0][0]
    x = (base.hidden[1] if tensor == "stream" else base.norm_in[tensor])[base.mask]
    table = int8_table(int8_roundtrip, x, spike, outliers, aside)
    checks, ratio = int8_checks(table)
    return Outcome.of_checks(checks, ratio, ", ".join(f"{v:.3f}" for v in table.values()))


@claim_experiment(
    "C93", statement="With the LayerNorms of all six blocks removed, or rewired to Pre-LN, the embeddings collapse: "
                     "unrelated sentences reach a mean cosine above 0.9, so 'pairs ranked right' no longer measures "
                     "quality",
    figure="mean cosine between unrelated sentences", kind="float",
    settings=[Setting(_SUBSET + ", removed"), Setting("rewired to Pre-LN", {"change": "pre"}),
              Setting("RMSNorm swap in all six (control)", {"change": "rms"}, expect=False),
              Setting("the trained model (control)", {"change": None}, expect=False)])
def collapse_claim(seed, rms_instead, *, change="remove"):
    base = seed_baseline(seed)
    if change is None:
        d = damage(base, base.embeddings)
    else:
        d = damage(base, intervened_embeddings(base, range(1, 7), rms_instead if change == "rms" else change))
    return Outcome(collapsed(d), collapse(d), f"ranked right {d.ranked:.0%}")


@claim_experiment(
    "C94", statement="With the LayerNorms of every block removed, the stream's median per-token norm grows after every "
                     "block, to more than 100x the trained model's",
    figure="median per-token norm after block 6 / the trained model's", kind="float",
    settings=[Setting(_SUBSET + ", removed"), Setting(_PARAGRAPHS + ", removed", {"text": "paragraphs"}),
              Setting("random WordPieces, 14 tokens, removed (the seed draws them)", {"text": "random"}),
              Setting("rewired to Pre-LN (control: it jumps once, then stays)", {"change": "pre"}, expect=False),
              Setting("the trained model (control)", {"change": None}, expect=False)])
def growth_claim(seed, *, change="remove", text="sentences"):
    base = _run_on(seed, text, 14)
    checks, medians = growth_checks(base, stream_after(base, change))
    trained = float(base.hidden[-1][base.mask].norm(dim=-1).median())
    return Outcome.of_checks(checks, medians[-1] / trained, f"medians {[round(m, 1) for m in medians]}")


@claim_experiment(
    "C95", statement="Switching off the spike's feature (γ and β of feature 99 set to 0) in the first FFN's LayerNorm "
                     "cuts [CLS]'s share of attention in block 2 more than 5x; the same edit at a random feature "
                     "does not",
    figure="share of attention on [CLS] in block 2, as trained / with the feature switched off", kind="float",
    settings=[Setting(_SUBSET),
              Setting("random token ids between [CLS] and [SEP] (the seed draws them)", {"text": "random"}),
              Setting("a random feature switched off instead (control; the seed draws it)", {"feature": "random"},
                      expect=False)])
def sink_cause_claim(seed, attention_to_cls, outlier_dims, *, text="sentences", feature="spike"):
    base = seed_baseline(seed)
    batch = base.batch if text == "sentences" else random_text(seed)
    spike = spike_sites(base)["feature"]
    dim = spike if feature == "spike" else random_dims(outlier_set(base, outlier_dims), 1,
                                                       torch.Generator().manual_seed(seed))[0][0]
    with torch.no_grad():
        _, hidden = base.model(batch.input_ids, batch.attention_mask, return_hidden=True)
    trained = attention_to_cls(base.model, hidden, batch.attention_mask)[0][1]
    off = sink_without(base.model, batch, attention_to_cls, dim)[1]
    return Outcome(sink_cut(trained, off), trained / off, f"feature {dim}: block 2 share {trained:.2f} -> {off:.2f}")


@claim_experiment(
    "C150", statement="The block-1 spike is set off by a position embedding, not by the token's identity: entering "
                      "block 1's FFN LayerNorm a value above 100 sits at position 0, and stays there with [CLS] moved "
                      "to position 3; with the position ids shifted by 1 it collapses (below 20), with the position "
                      "ids of indices 0 and 5 swapped it moves to index 5, and a later block builds its own (above 100 "
                      "at position 0 by block 3)",
    figure="largest |value| entering the FFN LayerNorm of the block tested, at the spike's place", kind="float",
    settings=[Setting(_SUBSET + ", block 1"),
              Setting("[CLS] moved to position 3, block 1 (the spike stays at position 0)", {"order": "moved"}),
              Setting(_PARAGRAPHS + ", [CLS] moved to position 3, block 1", {"order": "moved", "text": "paragraphs"}),
              Setting("position ids shifted by 1, block 3 (a later block builds its own)", {"offset": 1, "block": 3}),
              Setting("position ids shifted by 1, block 1 (control: the spike collapses)", {"offset": 1},
                      expect=False),
              Setting("position ids shifted by 2, block 1 (control)", {"offset": 2}, expect=False),
              Setting("the position ids of indices 0 and 5 swapped, block 1 (control: the spike moves to index 5, "
                      "with the position-0 embedding)", {"swap": (0, 5)}, expect=False)])
def spike_trigger_claim(seed, find_spike, *, order="trained", offset=0, block=1, text="sentences", swap=None):
    batch = _run_on(seed, text, 14).batch
    batch = cls_moved(batch) if order == "moved" else batch
    _, norm_in = rerun(load_minilm(), batch, offset, swap)
    value, position, feature = spike_of(find_spike, norm_in[f"L{block} FFN"], batch.attention_mask)
    return Outcome(first_position_spike(value, position), value, f"position {position}, feature {feature}")


@claim_experiment(
    "C151", statement="Moved to position 3, [CLS] still takes more than 2.5x its even share of attention in each of "
                      "blocks 3 to 5 (about 4x), while position 0, now a word, keeps block 2's sink (above 5x) and "
                      "also takes more than 2.5x in blocks 3 to 5: the sink follows the position in block 2, and in "
                      "blocks 3-5 it splits between position 0 and [CLS]; an ordinary word at position 3 gets less "
                      "than even attention (control)",
    figure="smallest ratio (share on position 3 / even share) over blocks 3-5", kind="float",
    settings=[Setting(_SUBSET + ", [CLS] moved to position 3"),
              Setting(_PARAGRAPHS + ", [CLS] moved to position 3", {"text": "paragraphs"}),
              Setting("the trained order: an ordinary word at position 3 (control)", {"order": "trained"},
                      expect=False)])
def moved_sink_claim(seed, *, order="moved", text="sentences"):
    batch = _run_on(seed, text, 14).batch
    batch = cls_moved(batch) if order == "moved" else batch
    model = load_minilm()
    hidden, _ = rerun(model, batch)
    at_0, uniform = attention_on(model, hidden, batch.attention_mask, 0)
    at_3, _ = attention_on(model, hidden, batch.attention_mask, 3)
    checks = moved_sink_checks(at_0, at_3, uniform)
    return Outcome.of_checks(checks, min(at_3[b - 1] for b in (3, 4, 5)) / uniform,
                             f"position 0 in block 2 {at_0[1] / uniform:.1f}x even")


@claim_experiment(
    "C152", statement="Zeroing γ and β at the spike's feature alone (99, in all 13 LayerNorms) does more than 60% of "
                      "the damage of zeroing them at all the outlier features (about 75%); at the feature the last "
                      "LayerNorm turns off (223, γ near 0 there) it does less than 20%",
    figure="share of the outliers' damage done by one feature", kind="float",
    settings=[Setting(_SUBSET + ", the spike's feature"),
              Setting("the loudest outlier, which the last LayerNorm turns off, instead (control)",
                      {"feature": "loudest"}, expect=False),
              Setting("a random feature instead (control; the seed draws it)", {"feature": "random"}, expect=False)])
def spike_feature_claim(seed, zeroed, outlier_dims, feature_loudness, *, feature="spike"):
    base = seed_baseline(seed)
    outliers = outlier_set(base, outlier_dims)
    loudness = feature_loudness(base.hidden, base.mask)
    dim = {"spike": lambda: spike_sites(base)["feature"],
           "loudest": lambda: max(outliers, key=lambda d: float(loudness[1:-1, d].mean())),
           "random": lambda: random_dims(outliers, 1, torch.Generator().manual_seed(seed))[0][0]}[feature]()
    share = feature_damage(base, zeroed, outliers, dim)
    return Outcome(carries_most(share), share, f"feature {dim} of {outliers}")


@claim_experiment(
    "C153", statement="On short sentences (about 11 tokens), one fixed σ per LayerNorm (its median over the tokens) "
                      "for every token but [CLS], which keeps its own, barely moves the embeddings in any one of "
                      "blocks 1 to 4 (mean cosine above 0.99), moves them more in block 5 or 6 alone (above 0.9), and "
                      "in all six keeps the mean cosine above 0.75 with at least 95% of couples ranked right and the "
                      "gap within 0.2; on held-out paragraphs of about 90 tokens it stops holding (block 5 alone "
                      "about 0.78, all six about 0.54), and the same fixed σ for [CLS] too collapses the embeddings "
                      "(control)",
    figure="mean cosine to the original embeddings, all six blocks", kind="float",
    settings=[Setting(_SUBSET + ", [CLS] keeps its own σ"),
              Setting(_PARAGRAPHS + ", [CLS] keeps its own σ (where it stops: block 5 alone and all six fall; "
                      "blocks 1-4 stay above 0.99)", {"text": "paragraphs"}, expect=False),
              Setting("the fixed σ for [CLS] too (control)", {"keep_first": False}, expect=False)])
def fixed_sigma_claim(seed, fixed_sigma, *, keep_first=True, text="sentences"):
    base = _run_on(seed, text, 14)
    runs = fixed_sigma_runs(base, fixed_sigma, keep_first)
    checks = sigma_checks(runs, damage(base, base.embeddings) if base.pairs is not None else None)
    six = runs["all six"]
    detail = (f"block 5 alone {float(runs['L5'].cos.mean()):.3f}" if base.pairs is None
              else f"gap {six.gap:.3f}, ranked {six.ranked:.0%}")
    return Outcome.of_checks(checks, float(six.cos.mean()), detail)


@claim_experiment(
    "C154", statement="In float64, the course's blocks loaded with all-MiniLM-L6-v2's weights match the library's "
                      "BertModel within 1e-12 at every hidden state: the float32 differences of C35 are round-off",
    figure="largest |ours - library| in float64 over the 7 hidden states (real tokens)", kind="roundoff",
    settings=[Setting(_SUBSET),
              Setting("the FFNs' GELU swapped for its tanh approximation (control)", {"gelu": "tanh"}, expect=False)])
def float64_claim(seed, *, gelu="exact"):
    base = seed_baseline(seed)
    with (tanh_gelu(base.model) if gelu == "tanh" else contextlib.nullcontext()):
        errors = float64_errors(base.model, base.batch)
    return Outcome(exact_in_float64(errors), max(errors))

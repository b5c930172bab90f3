"""Notebook 02 (BatchNorm and padding): padded batches, contaminated statistics, batch-mate coupling, train vs eval.

Token features are N(mean_k, std_k^2) per feature k with a different mean and spread for each feature, so padding
(zeros) visibly pulls every feature's statistics. Notebook 02 writes the statistics inline; these builders make the
batches and wire the panels.
"""
from __future__ import annotations

import math

import ipywidgets as widgets
import plotly.graph_objects as go
import torch
import torch.nn.functional as F
from torch import Tensor

from ..figures import color, live_figure, live_subplots
from ..norms import batch_norm, masked_mean_var
from ..panel import Panel, register_panel
from ..synthetic import padded_batch

__all__ = [
    "N_FEATURES", "FEATURE_MEAN", "FEATURE_STD", "BATCH_SIZE", "MAX_LEN",
    "lengths_for", "token_batch", "contaminated_stats", "predicted_contamination", "per_position_stats",
    "normalize", "COMPARED_NORMS", "coupling_batches", "sentence_outputs", "drifting_batches", "running_stats_figure",
    "padding_panel", "coupling_panel",
]

N_FEATURES = 8
FEATURE_MEAN = torch.linspace(-2.0, 2.0, N_FEATURES, dtype=torch.float64)  # feature k's true mean
FEATURE_STD = torch.linspace(0.5, 1.5, N_FEATURES, dtype=torch.float64)   # and its true standard deviation
BATCH_SIZE = 16
MAX_LEN = 64
COMPARED_NORMS = ("BatchNorm (padding included)", "BatchNorm (padding masked)", "LayerNorm")
SHORT_NAMES = ("BN, pads in", "BN, masked", "LayerNorm")  # COMPARED_NORMS in plot labels


def lengths_for(padding_share: float, spread: float, batch_size: int = BATCH_SIZE, max_len: int = MAX_LEN) -> Tensor:
    """Sequence lengths whose padded batch (batch_size, max_len) has the given share of padding.

    One sequence has the full max_len (it sets the padded length); the others are spread evenly around their mean m.
    spread in [0, 1] is the fraction of the widest spread this padding share allows (lengths from 1 or up to max_len):
    0 gives equal lengths, 1 the most varied. Raises ValueError, saying what to change, for impossible requests.
    """
    for name, v in (("padding share", padding_share), ("length spread", spread)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f"{name} must be a number, got {v!r}")
    if not 0.0 <= padding_share < 1.0:
        raise ValueError(f"padding share must be at least 0 and below 1 (a batch needs real tokens), "
                         f"got {padding_share}")
    if not 0.0 <= spread <= 1.0:
        raise ValueError(f"length spread must be between 0 and 1, got {spread}")
    others = batch_size - 1
    mean = ((1.0 - padding_share) * batch_size * max_len - max_len) / others
    if mean < 1.0:
        most = 1.0 - (max_len + others) / (batch_size * max_len)
        raise ValueError(f"{padding_share:.0%} padding would leave the {others} shorter sequences less than one token "
                         f"each: with {batch_size} sequences of up to {max_len} tokens the most is {most:.0%}. "
                         "Lower the padding share.")
    half_width = spread * min(mean - 1.0, max_len - mean)
    rest = torch.linspace(mean - half_width, mean + half_width, others, dtype=torch.float64)
    lengths = torch.cat([torch.tensor([float(max_len)], dtype=torch.float64), rest]).round().long()
    return lengths.clamp(1, max_len)


def token_batch(lengths, seed: int = 0, max_len: int | None = None, shift: float = 0.0,
                scale: float = 1.0) -> tuple[Tensor, Tensor]:
    """A padded batch of real tokens ~ N(shift + FEATURE_MEAN, (scale * FEATURE_STD)^2), zeros at pads (float64).

    Returns x (batch, max_len, N_FEATURES) and mask (batch, max_len), True at real tokens.
    """
    g = torch.Generator().manual_seed(seed)
    x, mask = padded_batch(lengths, N_FEATURES, g, mean=0.0, std=1.0, max_len=max_len)
    x = (x.double() * FEATURE_STD * scale + FEATURE_MEAN + shift).masked_fill(~mask[..., None], 0.0)
    return x, mask


def contaminated_stats(x: Tensor, mask: Tensor) -> dict[str, Tensor]:
    """Per-feature mean and biased variance over real tokens only ("true") and over every position ("padded")."""
    true_mean, true_var, _ = masked_mean_var(x, mask)
    padded_mean, padded_var, _ = masked_mean_var(x)
    return {"true_mean": true_mean, "true_var": true_var, "padded_mean": padded_mean, "padded_var": padded_var,
            "padding_share": 1.0 - mask.double().mean()}


def predicted_contamination(true_mean: Tensor, true_var: Tensor,
                            padding_share: float | Tensor) -> tuple[Tensor, Tensor]:
    """What zero-padding does to the statistics, share p of pads: mean (1-p)μ, variance (1-p)σ² + p(1-p)μ²."""
    p = padding_share
    return (1 - p) * true_mean, (1 - p) * true_var + p * (1 - p) * true_mean ** 2


def per_position_stats(x: Tensor, mask: Tensor) -> dict[str, Tensor]:
    """The chapter's per-position variant: statistics over the batch at each time step t, pads included.

    Returns pad_share (max_len,), mean_error (max_len,): mean over features of |padded mean_t - true mean|, where
    the true mean is the masked mean over the whole batch.
    """
    true_mean, _, _ = masked_mean_var(x, mask)
    pad_share = 1.0 - mask.double().mean(0)
    mean_t = x.mean(0)  # (max_len, d): pads count as zeros
    return {"pad_share": pad_share, "mean_error": (mean_t - true_mean).abs().mean(-1)}


def normalize(x: Tensor, mask: Tensor, kind: str) -> Tensor:
    """x: (batch, seq, d) normalized the `kind` way (training-mode batch statistics; no γ, β)."""
    if kind == COMPARED_NORMS[0]:
        return batch_norm(x)
    if kind == COMPARED_NORMS[1]:
        return batch_norm(x, mask)
    if kind == COMPARED_NORMS[2]:
        return F.layer_norm(x, x.shape[-1:])
    raise ValueError(f"kind must be one of {COMPARED_NORMS}, got {kind!r}")


SENTENCE_LEN = 12
MATE_LENGTHS = (14, 11, 13, 10, 12, 9, 13)


def coupling_batches(padded_len: int | None = None, mate_shift: float = 0.0, seed: int = 0) -> dict:
    """One sentence (row 0) in a batch with 7 mates, and the variants notebook 02 compares.

    reference: the mates are from the sentence's own distribution, padded to the longest (14 tokens).
    more_padding: the same 8 sequences padded to padded_len. other_mates: the mates' features shifted by mate_shift
    (another domain), same lengths and padding as the reference. Each value is (x, mask).
    """
    lengths = [SENTENCE_LEN, *MATE_LENGTHS]
    longest = max(lengths)
    if padded_len is None:
        padded_len = 4 * longest
    if not isinstance(padded_len, int) or padded_len < longest:
        raise ValueError(f"padded length must be a whole number of at least {longest} (the longest sequence), "
                         f"got {padded_len!r}")
    x, mask = token_batch(lengths, seed=seed)
    pad = padded_len - longest
    more = (torch.cat([x, x.new_zeros(x.shape[0], pad, x.shape[2])], 1),
            torch.cat([mask, mask.new_zeros(mask.shape[0], pad)], 1))
    mates = token_batch(lengths, seed=seed + 1, shift=mate_shift)
    other = (torch.cat([x[:1], mates[0][1:]]), mask)
    return {"reference": (x, mask), "more_padding": more, "other_mates": other}


def sentence_outputs(batches: dict, kind: str) -> dict[str, Tensor]:
    """The sentence's normalized real tokens (SENTENCE_LEN, d) in each batch of coupling_batches."""
    return {name: normalize(x, mask, kind)[0, :SENTENCE_LEN] for name, (x, mask) in batches.items()}


def _subplots(titles, title: str, height: int = 380, **look) -> go.FigureWidget:
    """One row of live subplots, one per title, with grouped bars."""
    return live_subplots(1, len(titles), title, height=height, subplot_titles=titles, **look).update_layout(
        barmode="group")


@register_panel()
def padding_panel() -> Panel:
    """Padding share and length spread -> per-feature mean and variance, true vs contaminated, and per position."""
    fig = _subplots(("per-feature mean", "per-feature variance", "per-position statistics (pads included)"),
                    "BatchNorm statistics over a padded batch (16 sequences, 64 positions, 8 features)")
    features = list(range(N_FEATURES))
    bars = {  # key of contaminated_stats -> its bars
        "true_mean": fig.add_bar(x=features, name="true (real tokens only)", marker_color=color(0),
                                 row=1, col=1).data[-1],
        "padded_mean": fig.add_bar(x=features, name="with padding included", marker_color=color(1),
                                   row=1, col=1).data[-1],
        "true_var": fig.add_bar(x=features, marker_color=color(0), showlegend=False, row=1, col=2).data[-1],
        "padded_var": fig.add_bar(x=features, marker_color=color(1), showlegend=False, row=1, col=2).data[-1],
    }
    lines = {  # key of per_position_stats -> its line
        "pad_share": fig.add_scatter(mode="lines", name="share of padding at position t", line=dict(color=color(3)),
                                     row=1, col=3).data[-1],
        "mean_error": fig.add_scatter(mode="lines", name="|error of the mean| at position t",
                                      line=dict(color=color(2)), row=1, col=3).data[-1],
    }
    fig.update_xaxes(title_text="feature k", row=1, col=1)
    fig.update_xaxes(title_text="feature k", row=1, col=2)
    fig.update_xaxes(title_text="position t (token index)", row=1, col=3)
    fig.update_yaxes(title_text="mean", row=1, col=1)
    fig.update_yaxes(title_text="variance", row=1, col=2)
    fig.update_yaxes(title_text="share / error (mean over features)", row=1, col=3)
    readout = widgets.HTML()
    controls = {
        "padding_share": widgets.FloatSlider(value=0.5, min=0.0, max=0.95, step=0.05, description="padding share",
                                             readout_format=".0%", style={"description_width": "initial"}),
        "spread": widgets.FloatSlider(value=0.5, min=0.0, max=1.0, step=0.1, description="length spread",
                                      readout_format=".0%", style={"description_width": "initial"}),
    }

    def update(padding_share, spread):
        lengths = lengths_for(padding_share, spread)
        x, mask = token_batch(lengths)
        s = contaminated_stats(x, mask)
        pos = per_position_stats(x, mask)
        with fig.batch_update():
            for key, bar in bars.items():
                bar.y = s[key].tolist()
            for key, line in lines.items():
                line.update(x=list(range(MAX_LEN)), y=pos[key].tolist())
        mean_err = float((s["padded_mean"] - s["true_mean"]).abs().max())
        var_ratio = s["padded_var"] / s["true_var"]
        readout.value = (f"Actual padding share {float(s['padding_share']):.1%} (lengths {int(lengths.min())} to "
                         f"{int(lengths.max())}). Each mean shrinks toward 0 by the factor 1 - p; the worst mean is "
                         f"off by <b>{mean_err:.2f}</b>; variances are off by factors {float(var_ratio.min()):.2f} "
                         f"to {float(var_ratio.max()):.2f}.")

    return Panel(controls, [readout, fig], update,
                 title="How padding contaminates BatchNorm's statistics")


@register_panel()
def coupling_panel() -> Panel:
    """Extra padding and the batch mates' shift -> how much one unchanged sentence's normalized output moves."""
    fig = _subplots(("largest change of the sentence's output", "feature 0 of the sentence, token by token"),
                    "The same sentence in a different batch", height=470, margin=dict(b=90), legend=dict(y=-0.3))
    labels = list(SHORT_NAMES)
    change_bars = {  # key of coupling_batches -> the bars of the largest change it causes
        "more_padding": fig.add_bar(x=labels, name="more padding only", marker_color=color(4),
                                    texttemplate="%{y:.2g}", textposition="outside", row=1, col=1).data[-1],
        "other_mates": fig.add_bar(x=labels, name="batch mates from another domain", marker_color=color(5),
                                   texttemplate="%{y:.2g}", textposition="outside", row=1, col=1).data[-1],
    }
    tokens = list(range(SENTENCE_LEN))
    sentence_lines = []  # per norm in COMPARED_NORMS: the (reference batch, changed batch) traces
    for j, label in enumerate(labels):
        line = dict(color=color((1, 0, 2)[j]), width=2)
        sentence_lines.append((
            fig.add_scatter(x=tokens, mode="lines", name=f"{label}: reference batch", line=line, legendgroup=label,
                            row=1, col=2).data[-1],
            fig.add_scatter(x=tokens, mode="lines", name=f"{label}: changed batch", line={**line, "dash": "dot"},
                            legendgroup=label, row=1, col=2).data[-1]))
    fig.update_xaxes(title_text="normalization", row=1, col=1)
    fig.update_yaxes(title_text="max |output change|", row=1, col=1)
    fig.update_xaxes(title_text="token of the sentence", row=1, col=2)
    fig.update_yaxes(title_text="normalized value", row=1, col=2)
    readout = widgets.HTML()
    longest = max(SENTENCE_LEN, *MATE_LENGTHS)
    natural = 1.0 - (SENTENCE_LEN + sum(MATE_LENGTHS)) / (8 * longest)
    controls = {
        "padding_share": widgets.FloatSlider(value=0.75, min=0.0, max=0.95, step=0.05, description="padding share",
                                             readout_format=".0%", style={"description_width": "initial"}),
        "mate_shift": widgets.FloatSlider(value=1.0, min=-4.0, max=4.0, step=0.5, description="mates' shift",
                                          style={"description_width": "initial"}),
        "change": widgets.ToggleButtons(options=["more padding", "other batch mates"], value="more padding",
                                        description="plot"),
    }

    def update(padding_share, mate_shift, change):
        if not isinstance(padding_share, (int, float)) or not 0 <= padding_share < 1:
            raise ValueError(f"padding share must be at least 0 and below 1, got {padding_share!r}")
        if padding_share < natural - 1e-9:
            raise ValueError(f"these 8 sequences already carry {natural:.0%} padding when padded to the longest "
                             f"({longest} tokens): extra padding can only raise the share. "
                             f"Pick at least {natural:.0%}.")
        n_real = SENTENCE_LEN + sum(MATE_LENGTHS)
        padded_len = max(longest, round(n_real / (8 * (1 - padding_share))))
        batches = coupling_batches(padded_len, mate_shift)
        name = "more_padding" if change == "more padding" else "other_mates"
        changes = {"more_padding": [], "other_mates": []}
        with fig.batch_update():
            for kind, (reference_line, changed_line) in zip(COMPARED_NORMS, sentence_lines):
                out = sentence_outputs(batches, kind)
                for key in changes:
                    changes[key].append(float((out[key] - out["reference"]).abs().max()))
                reference_line.y = out["reference"][:, 0].tolist()
                changed_line.y = out[name][:, 0].tolist()
            for key, bar in change_bars.items():
                bar.y = changes[key]
        share = 1 - n_real / (8 * padded_len)
        readout.value = ("Largest change of the sentence's output with more padding (share " + f"{share:.0%}" + "): "
                         + ", ".join(f"{k} <b>{v:.3g}</b>" for k, v in zip(COMPARED_NORMS, changes["more_padding"]))
                         + f"<br>With batch mates shifted by {mate_shift:+.1f}: "
                         + ", ".join(f"{k} <b>{v:.3g}</b>" for k, v in zip(COMPARED_NORMS, changes["other_mates"])))

    return Panel(controls, [readout, fig], update, title="One sentence, different batch mates")


def drifting_batches(steps: int, drift: float = 1.0, padding_share: float = 0.5, spread: float = 0.5, seed: int = 0):
    """`steps` training batches (x, mask) whose features all shift by `drift` over the run, as a layer's input does
    while the layers below it learn. Step s has shift drift * (s + 1) / steps, so the last batch sits at `drift`."""
    if not (isinstance(steps, int) and steps >= 1):
        raise ValueError(f"steps must be a positive int, got {steps!r}")
    lengths = lengths_for(padding_share, spread)
    for step in range(steps):
        yield token_batch(lengths, seed=seed + 1000 + step, shift=drift * (step + 1) / steps)


def running_stats_figure(current_mean: Tensor, running: dict[str, Tensor]) -> go.FigureWidget:
    """Grouped bars per feature: the current true mean of the layer's input and each module's running mean."""
    fig = live_figure("Running means after training vs the input's current mean", "feature k", "mean", height=360)
    features = list(range(len(current_mean)))
    fig.add_bar(x=features, y=current_mean.tolist(), name="current true mean (real tokens)", marker_color=color(0))
    for j, (name, values) in enumerate(running.items()):
        fig.add_bar(x=features, y=values.tolist(), name=name, marker_color=color(j + 1))
    fig.update_layout(barmode="group")
    return fig

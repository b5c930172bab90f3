"""Notebook 02 (BatchNorm and padding): padded batches, contaminated statistics, batch-mate coupling, statistics that
see the future, train vs eval.

Token features are N(mean_k, std_k^2) per feature k with a different mean and spread for each feature, so padding
(zeros) visibly pulls every feature's statistics. Notebook 02 writes the statistics inline; these builders make the
batches, wire the panels, and hold the computation of each claim cell, which the claim experiments at the end of this
module rerun over seeds and settings (course_utils.evidence).
"""
from __future__ import annotations

import copy
import math

import ipywidgets as widgets
import plotly.graph_objects as go
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..evidence import Outcome, Setting, claim_experiment
from ..figures import color, dash, live_figure, live_subplots, marker, static_figure
from ..norms import MaskedBatchNorm1d, batch_norm, masked_mean_var
from ..panel import Panel, register_panel
from ..synthetic import padded_batch

__all__ = [
    "N_FEATURES", "FEATURE_MEAN", "FEATURE_STD", "BATCH_SIZE", "MAX_LEN",
    "lengths_for", "token_batch", "contaminated_stats", "predicted_contamination", "per_position_stats",
    "normalize", "COMPARED_NORMS", "TIME_NORMS", "per_position_norm", "coupling_batches", "sentence_outputs",
    "drifting_batches", "running_stats_figure", "padding_panel", "coupling_panel",
    "padding_contamination", "position_padding", "coupling_changes", "padding_sweep", "future_leak",
    "generation_prefix", "generation_prefix_figure", "recover_last_token", "trained_modules", "train_vs_eval_gap",
    "train_vs_eval_gaps", "one_token_in_training", "lone_token_gaps", "running_var_estimate",
    "MEAN_OFF_BY", "LAST_POSITION_OFF_BY", "LAST_VS_FIRST", "MOVES_BY", "EXACT", "TRAIN_EVAL_FACTOR", "DRIFT_ON_TOP",
    "LEAKS_BY", "PREFIX_OFF_BY", "SHRINK_VISIBLE", "READ_BACK", "REFUSAL",
    "contamination_checks", "per_position_checks", "coupling_checks", "padding_mismatch", "train_eval_checks",
    "one_token_checks", "leak_checks", "prefix_checks", "running_var_checks", "lone_token_checks", "read_back",
    "CLEAN_NOISE_ABOVE", "SHRINK_FORMULA_WITHIN",
]

N_FEATURES = 8
FEATURE_MEAN = torch.linspace(-2.0, 2.0, N_FEATURES, dtype=torch.float64)  # feature k's true mean
FEATURE_STD = torch.linspace(0.5, 1.5, N_FEATURES, dtype=torch.float64)   # and its true standard deviation
BATCH_SIZE = 16
MAX_LEN = 64
COMPARED_NORMS = ("BatchNorm (padding included)", "BatchNorm (padding masked)", "LayerNorm")
SHORT_NAMES = ("BN, pads in", "BN, masked", "LayerNorm")  # COMPARED_NORMS in plot labels
PER_POSITION = "BatchNorm per position (masked)"
TIME_NORMS = (*COMPARED_NORMS[:2], PER_POSITION, COMPARED_NORMS[2])  # the norms section 3 compares over time


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


def per_position_norm(x: Tensor, mask: Tensor, eps: float = 1e-5) -> Tensor:
    """x: (batch, seq, d) normalized with statistics over the batch's real tokens at each position t separately."""
    w = mask.unsqueeze(-1).to(x.dtype)
    n = w.sum(0).clamp_min(1.0)                      # (seq, 1): real tokens at position t
    mean = (x * w).sum(0) / n
    var = (((x - mean) ** 2) * w).sum(0) / n
    return (x - mean) / torch.sqrt(var + eps)


def normalize(x: Tensor, mask: Tensor, kind: str) -> Tensor:
    """x: (batch, seq, d) normalized the `kind` way (training-mode batch statistics; no γ, β)."""
    if kind == COMPARED_NORMS[0]:
        return batch_norm(x)
    if kind == COMPARED_NORMS[1]:
        return batch_norm(x, mask)
    if kind == COMPARED_NORMS[2]:
        return F.layer_norm(x, x.shape[-1:])
    if kind == PER_POSITION:
        return per_position_norm(x, mask)
    raise ValueError(f"kind must be one of {TIME_NORMS}, got {kind!r}")


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


# Bar patterns, so bars side by side differ by more than colour (plotly's own pattern names)
_PATTERNS = ("/", ".", "x", "\\", "+")
_PADDED_BARS = dict(color=color(1), pattern_shape=_PATTERNS[0])


def _subplots(titles, title: str, height: int = 380, **look) -> go.FigureWidget:
    """One row of live subplots, one per title, with grouped bars."""
    return live_subplots(1, len(titles), title, height=height, subplot_titles=titles, **look).update_layout(
        barmode="group")


@register_panel()
def padding_panel() -> Panel:
    """Padding share and length spread -> per-feature mean and variance, true vs contaminated, and per position."""
    # Subplot titles of a few words: three side by side have about a third of the column each
    fig = _subplots(("mean per feature", "variance per feature", "per position, pads in"),
                    "BatchNorm's statistics over a padded batch (16 sequences, 64 positions, 8 features)",
                    horizontal_spacing=0.09)
    features = list(range(N_FEATURES))
    bars = {  # key of contaminated_stats -> its bars
        "true_mean": fig.add_bar(x=features, name="true (real tokens only)", marker_color=color(0),
                                 row=1, col=1).data[-1],
        "padded_mean": fig.add_bar(x=features, name="with padding included", marker=_PADDED_BARS,
                                   row=1, col=1).data[-1],
        "true_var": fig.add_bar(x=features, marker_color=color(0), showlegend=False, row=1, col=2).data[-1],
        "padded_var": fig.add_bar(x=features, marker=_PADDED_BARS, showlegend=False, row=1, col=2).data[-1],
    }
    lines = {  # key of per_position_stats -> its line
        "pad_share": fig.add_scatter(mode="lines", name="share of padding at position t", line=dict(color=color(3)),
                                     row=1, col=3).data[-1],
        "mean_error": fig.add_scatter(mode="lines", name="|error of the mean| at position t (mean over features)",
                                      line=dict(color=color(2), dash="dash"), row=1, col=3).data[-1],
    }
    fig.update_xaxes(title_text="feature k", row=1, col=1)
    fig.update_xaxes(title_text="feature k", row=1, col=2)
    fig.update_xaxes(title_text="position t (token index)", row=1, col=3)
    fig.update_yaxes(title_text="mean", row=1, col=1)
    fig.update_yaxes(title_text="variance", row=1, col=2)
    fig.update_yaxes(title_text="share, |error|", row=1, col=3)
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
    fig = _subplots(("largest change of its output", "feature 0, token by token"),
                    "The same sentence in a different batch", height=430, margin=dict(b=110),
                    legend=dict(traceorder="normal"))  # one flowing strip, not one block per legend group
    labels = list(SHORT_NAMES)
    change_bars = {  # key of coupling_batches -> the bars of the largest change it causes
        "more_padding": fig.add_bar(x=labels, name="more padding only", marker_color=color(4),
                                    texttemplate="%{y:.2g}", textposition="outside", row=1, col=1).data[-1],
        "other_mates": fig.add_bar(x=labels, name="batch mates from another domain",
                                   marker=dict(color=color(5), pattern_shape="/"),
                                   texttemplate="%{y:.2g}", textposition="outside", row=1, col=1).data[-1],
    }
    tokens = list(range(SENTENCE_LEN))
    sentence_lines = []  # per norm in COMPARED_NORMS: the (reference batch, changed batch) traces
    for j, label in enumerate(labels):
        line, dots = dict(color=color((1, 0, 2)[j]), width=2), dict(symbol=marker(j), size=7)
        sentence_lines.append((
            fig.add_scatter(x=tokens, mode="lines+markers", name=f"{label}: reference", line=line,
                            marker=dots, legendgroup=label, row=1, col=2).data[-1],
            fig.add_scatter(x=tokens, mode="lines+markers", name=f"{label}: changed",
                            line={**line, "dash": "dot"}, marker=dots, legendgroup=label, row=1, col=2).data[-1]))
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
                                        description="plot", layout=widgets.Layout(width="auto")),
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
                         + ", ".join(f"{k} <b>{v:.3g}</b>" for k, v in zip(SHORT_NAMES, changes["more_padding"]))
                         + f"<br>With batch mates shifted by {mate_shift:+.1f}: "
                         + ", ".join(f"{k} <b>{v:.3g}</b>" for k, v in zip(SHORT_NAMES, changes["other_mates"])))

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
        fig.add_bar(x=features, y=values.tolist(), name=name,
                    marker=dict(color=color(j + 1), pattern_shape=_PATTERNS[j % len(_PATTERNS)]))
    fig.update_layout(barmode="group")
    return fig


# ---- the computations behind notebook 02's claim cells (the notebook and the claim experiments both call these) ----

def padding_contamination(seed: int = 0, padding_share: float = 0.5, spread: float = 0.5) -> dict:
    """C09: a padded batch's pooled statistics vs the formula (1-p)μ, (1-p)σ² + p(1-p)μ²; the worst mean error."""
    x, mask = token_batch(lengths_for(padding_share, spread), seed=seed)
    s = contaminated_stats(x, mask)
    s["predicted_mean"], s["predicted_var"] = predicted_contamination(s["true_mean"], s["true_var"],
                                                                      s["padding_share"])
    s["formula_error"] = float(torch.maximum((s["padded_mean"] - s["predicted_mean"]).abs().max(),
                                             (s["padded_var"] - s["predicted_var"]).abs().max()))
    s["worst_mean_error"] = float((s["padded_mean"] - s["true_mean"]).abs().max())
    s["x"], s["mask"] = x, mask
    return s


def position_padding(seed: int = 0, padding_share: float = 0.5,
                     batch_size: int = BATCH_SIZE) -> dict[str, dict[str, Tensor]]:
    """C10: per-position statistics of a batch with equal and with the most varied lengths."""
    return {name: {**per_position_stats(*token_batch(lengths_for(padding_share, spread, batch_size), seed=seed)),
                   "batch_size": batch_size}
            for name, spread in (("equal lengths", 0.0), ("most varied lengths", 1.0))}


def coupling_changes(seed: int = 0, padded_len: int = 56, mate_shift: float = 1.0) -> dict[str, dict[str, float]]:
    """C11: per norm of COMPARED_NORMS, the largest change of the unchanged sentence's output in each changed batch."""
    batches = coupling_batches(padded_len, mate_shift, seed=seed)
    changes = {}
    for kind in COMPARED_NORMS:
        out = sentence_outputs(batches, kind)
        changes[kind] = {case: (out[case] - out["reference"]).abs().max().item()
                         for case in ("more_padding", "other_mates")}
    return changes


def padding_sweep(padded_lens=(17, 35, 69), seed: int = 0) -> dict[str, list[float]]:
    """The same eight sentences padded further: padding share, BatchNorm's and masked BatchNorm's largest move of the
    sentence, and how far BatchNorm's output is from what the contamination formula predicts for that share."""
    n_real = SENTENCE_LEN + sum(MATE_LENGTHS)
    out = {"share": [], "move": [], "masked_move": [], "formula_gap": []}
    for padded_len in padded_lens:
        batches = coupling_batches(padded_len, seed=seed)
        bn = sentence_outputs(batches, COMPARED_NORMS[0])
        masked = sentence_outputs(batches, COMPARED_NORMS[1])
        x, mask = batches["more_padding"]
        share = 1 - n_real / (x.shape[0] * padded_len)
        true_mean, true_var, _ = masked_mean_var(x, mask)
        mean, var = predicted_contamination(true_mean, true_var, share)
        predicted = (x[0, :SENTENCE_LEN] - mean) / torch.sqrt(var + 1e-5)
        out["share"].append(share)
        out["move"].append((bn["more_padding"] - bn["reference"]).abs().max().item())
        out["masked_move"].append((masked["more_padding"] - masked["reference"]).abs().max().item())
        out["formula_gap"].append((bn["more_padding"] - predicted).abs().max().item())
    return out


def _causal_batch(seed: int, mate_shift: float = 0.0) -> tuple[Tensor, Tensor]:
    """The reference batch of section 2: the 12-token sentence (row 0) and its 7 mates, padded to 14 (with mate_shift,
    the mates from another domain)."""
    batches = coupling_batches(seed=seed, mate_shift=mate_shift)
    return batches["other_mates" if mate_shift else "reference"]


def future_leak(seed: int = 0, changed: int = SENTENCE_LEN - 1) -> dict[str, float]:
    """C58: replace only token `changed` of the sentence (default its last) by a fresh token; per norm of TIME_NORMS,
    the largest change of the sentence's normalized output at position 0."""
    x, mask = _causal_batch(seed)
    if not 0 <= changed < SENTENCE_LEN:
        raise ValueError(f"changed must be a position of the sentence, 0 to {SENTENCE_LEN - 1}, got {changed!r}")
    other = x.clone()
    other[0, changed] = token_batch([1], seed=seed + 500)[0][0, 0]
    return {kind: (normalize(other, mask, kind)[0, 0] - normalize(x, mask, kind)[0, 0]).abs().max().item()
            for kind in TIME_NORMS}


def leak_by_batch_size(seed: int = 0, sizes=(1, 2, 4, 8)) -> dict[str, list]:
    """Why C58's move is small: with the first b sentences of the reference batch, replace the sentence's last token
    (as future_leak does) and measure masked BatchNorm's largest change at position 0. The pooled statistics average
    n_real tokens, so one token's share of them, and the move, falls like 1/n_real: move × n_real stays roughly flat."""
    x, mask = _causal_batch(seed)
    token = token_batch([1], seed=seed + 500)[0][0, 0]
    out = {"size": [], "n_real": [], "move": []}
    for b in sizes:
        if not (isinstance(b, int) and 1 <= b <= x.shape[0]):
            raise ValueError(f"batch sizes must be 1 to {x.shape[0]}, got {b!r}")
        xb, mb = x[:b], mask[:b]
        other = xb.clone()
        other[0, SENTENCE_LEN - 1] = token
        kind = COMPARED_NORMS[1]
        out["size"].append(b)
        out["n_real"].append(int(mb.sum()))
        out["move"].append((normalize(other, mb, kind)[0, 0] - normalize(xb, mb, kind)[0, 0]).abs().max().item())
    return out


def generation_prefix(seed: int = 0, mate_shift: float = 0.0) -> dict[str, list[float]]:
    """C59: per norm of TIME_NORMS and per prefix length t = 1 .. padded length, the largest difference between the
    sentence's output at position 0 when the batch holds only positions < t (as while generating) and when it holds
    the whole sequences (as in training)."""
    x, mask = _causal_batch(seed, mate_shift)
    out = {}
    for kind in TIME_NORMS:
        full = normalize(x, mask, kind)[0, 0]
        out[kind] = [(normalize(x[:, :t], mask[:, :t], kind)[0, 0] - full).abs().max().item()
                     for t in range(1, x.shape[1] + 1)]
    return out


def generation_prefix_figure(prefix: dict[str, list[float]]) -> go.Figure:
    """Lines per norm: how far position 0's output is from its training value, against the tokens generated so far."""
    fig = static_figure("Position 0's output depends on how far generation has got",
                        "tokens present in the batch (prefix length t)", "max |output at position 0 - training value|",
                        height=380)
    for j, (kind, diffs) in enumerate(prefix.items()):
        fig.add_scatter(x=list(range(1, len(diffs) + 1)), y=diffs, mode="lines+markers", name=kind,
                        line=dict(color=color(j), dash=dash(j)), marker=dict(symbol=marker(j), size=8))
    return fig


def recover_last_token(seed: int = 0, batch_size: int = 1, kind: str = COMPARED_NORMS[1]) -> dict[str, float]:
    """C61: read the sentence's last token back from what a causal model shows position T-2: the tokens 0..T-2 and
    their normalized values. Pooled statistics are μ = sum of every token / N and s = sqrt(σ² + eps), so two positions
    give s = (x_0 - x_1) / (y_0 - y_1), μ = x_0 - s y_0, and, with one sentence in the batch, x_{T-1} = T μ - Σ x_t."""
    lengths = [SENTENCE_LEN, *MATE_LENGTHS][:batch_size]
    if len(lengths) != batch_size:
        raise ValueError(f"batch_size must be 1 to {len(MATE_LENGTHS) + 1}, got {batch_size!r}")
    x, mask = token_batch(lengths, seed=seed)
    y = normalize(x, mask, kind)[0]
    seen = x[0, :SENTENCE_LEN - 1]
    s = (seen[0] - seen[1]) / (y[0] - y[1])
    mu = seen[0] - s * y[0]
    guess = SENTENCE_LEN * mu - seen.sum(0)
    return {"error": (guess - x[0, SENTENCE_LEN - 1]).abs().max().item(),
            "token_size": x[0, SENTENCE_LEN - 1].abs().max().item()}


def trained_modules(steps: int = 200, drift: float = 1.0, padding_share: float = 0.5,
                    seed: int = 0) -> dict[str, nn.Module]:
    """nn.BatchNorm1d and MaskedBatchNorm1d trained side by side on drifting_batches, and a LayerNorm (float64)."""
    torch_bn = nn.BatchNorm1d(N_FEATURES, affine=False, dtype=torch.float64)
    masked_bn = MaskedBatchNorm1d(N_FEATURES, affine=False, dtype=torch.float64)
    for x, mask in drifting_batches(steps, drift=drift, padding_share=padding_share, seed=seed):
        torch_bn(x.transpose(1, 2))   # training mode: normalizes with batch statistics, updates its running ones
        masked_bn(x, mask)
    return {"BatchNorm1d (pads included)": torch_bn, "masked BatchNorm": masked_bn,
            "LayerNorm": nn.LayerNorm(N_FEATURES, elementwise_affine=False, dtype=torch.float64)}


def _call(module: nn.Module, x: Tensor, mask: Tensor | None = None) -> Tensor:
    """module on x (batch, seq, d) or (n, d), whatever layout it takes."""
    if isinstance(module, nn.BatchNorm1d):
        return module(x.transpose(1, 2)).transpose(1, 2) if x.dim() == 3 else module(x)
    if isinstance(module, MaskedBatchNorm1d):
        return module(x, mask)
    return module(x)


def train_vs_eval_gap(module: nn.Module, x: Tensor, mask: Tensor) -> float:
    """Mean |output in training mode - output in eval mode| over the real tokens of one batch (module left as is)."""
    module = copy.deepcopy(module)      # a training-mode call would update the running statistics
    outputs = []
    for training in (True, False):
        module.train(training)
        outputs.append(_call(module, x, mask))
    return (outputs[0] - outputs[1])[mask].abs().mean().item()


def train_vs_eval_gaps(modules: dict[str, nn.Module], drift: float = 1.0, shares=(0.5, 0.2),
                       seed: int = 0) -> dict[tuple[str, float], float]:
    """C12: train_vs_eval_gap of each module on a fresh batch (seed + 7) at each padding share."""
    gaps = {}
    for share in shares:
        x, mask = token_batch(lengths_for(share, 0.5), seed=seed + 7, shift=drift)
        for name, module in modules.items():
            gaps[name, share] = train_vs_eval_gap(module, x, mask)
    return gaps


def ema_lag(drift: float = 1.0, steps: int = 200, momentum: float = 0.1) -> float:
    """How far an exponential average with this momentum lags behind an input rising linearly by `drift` over `steps`
    updates, once settled: slope × (1 - momentum) / momentum."""
    return drift / steps * (1 - momentum) / momentum


def masked_drift_gaps(drifts=(0.0, 4.0), seed: int = 0, padding_share: float = 0.5) -> dict[float, dict[str, float]]:
    """Control for C12's masked gap: per drift, masked BatchNorm trained on drifting_batches at that drift; its
    train-vs-eval gap on the 50%-padded test batch of train_vs_eval_gaps, and how far its running mean lags the current
    true mean (mean over features). At drift 0 what is left is sampling noise (the running averages of 200 batches vs
    one batch's statistics); the drift lag comes on top."""
    out = {}
    for drift in drifts:
        modules = trained_modules(drift=drift, padding_share=padding_share, seed=seed)
        name = list(modules)[1]
        gap = train_vs_eval_gaps({name: modules[name]}, drift=drift, shares=(0.5,), seed=seed)[name, 0.5]
        lag = (FEATURE_MEAN + drift - modules[name].running_mean).mean().item()
        out[drift] = {"gap": gap, "lag": lag}
    return out


def one_token_in_training(seed: int = 0, n_tokens: int = 1, drift: float = 1.0) -> dict:
    """C13: a batch of n_tokens real tokens (n_tokens, d) through nn.BatchNorm1d in training mode: PyTorch's error (or
    None), and what the batch statistics would have made of the tokens."""
    tokens = token_batch([n_tokens], seed=seed + 3, shift=drift)[0][0]
    bn = nn.BatchNorm1d(N_FEATURES, affine=False, dtype=torch.float64).train()
    try:
        bn(tokens)
        error = None
    except ValueError as err:
        error = str(err)
    mean, var = tokens.mean(0), tokens.var(0, unbiased=False)
    return {"tokens": tokens, "error": error, "would_be": (tokens - mean) / torch.sqrt(var + bn.eps)}


def _matched(module: nn.Module, x: Tensor, mask: Tensor) -> nn.Module:
    """A copy of a BatchNorm module whose running statistics are the batch's own (the ones training mode uses)."""
    module = copy.deepcopy(module)
    real = None if isinstance(module, nn.BatchNorm1d) else mask    # nn.BatchNorm1d pools the pads too
    mean, var, _ = masked_mean_var(x, real)
    module.running_mean.copy_(mean)
    module.running_var.copy_(var)
    return module


def lone_token_gaps(modules: dict[str, nn.Module], token: Tensor, drift: float = 1.0, seed: int = 0,
                    padding_share: float = 0.5) -> dict:
    """C14: the lone token (1, d) in eval mode vs the same module's output for it inside a training batch (seed + 11,
    padded like the training batches, the token at position 0 of sentence 0), per BatchNorm module: the largest
    difference alone, inside the batch in eval mode, and with running statistics set to the batch's (the control);
    and LayerNorm's output alone and in the batch."""
    x, mask = token_batch(lengths_for(padding_share, 0.5), seed=seed + 11, shift=drift)
    x[0, 0] = token[0]
    names = list(modules)
    out = {}
    for name in names[:2]:
        trained = modules[name]
        in_training = _call(copy.deepcopy(trained).train(), x, mask)[0, 0]
        evaluated, matched = copy.deepcopy(trained).eval(), _matched(trained, x, mask).eval()
        out[name] = {"alone": (_call(evaluated, token)[0] - in_training).abs().max().item(),
                     "in its batch, eval mode": (_call(evaluated, x, mask)[0, 0] - in_training).abs().max().item(),
                     "running statistics set to the batch's": (_call(matched, token)[0] - in_training).abs().max().item()}
    layer_norm = modules[names[2]]
    out["LayerNorm alone"], out["LayerNorm in a batch"] = layer_norm(token)[0], layer_norm(x)[0, 0]
    return out


def running_var_estimate(seed: int = 0, lengths=(5, 3, 2, 4)) -> dict:
    """C60: nn.BatchNorm1d (momentum 1, so the running statistics are this one batch's) on one padded batch: the
    running variance over the biased batch variance, n, and how far the eval output is from the training output."""
    x, _ = token_batch(list(lengths), seed=seed + 1)
    bn = nn.BatchNorm1d(N_FEATURES, affine=False, momentum=1.0, dtype=torch.float64)
    flat = x.reshape(-1, N_FEATURES)
    n = flat.shape[0]
    biased = flat.var(0, unbiased=False)
    train_out = bn(x.transpose(1, 2)).transpose(1, 2)
    eval_out = bn.eval()(x.transpose(1, 2)).transpose(1, 2)
    by_formula = (x - flat.mean(0)) / torch.sqrt(biased + bn.eps)
    big = train_out.abs() > 0.1   # the ratio of two outputs near 0 says nothing
    return {"n": n, "ratio": bn.running_var / biased,
            "train_formula_error": (train_out - by_formula).abs().max().item(),
            "eval_shrink": float(1 - (eval_out[big] / train_out[big]).mean()),
            "predicted_shrink": 1 - math.sqrt((n - 1) / n)}


# ---- the claim experiments (python -m course_utils.robustness --notebooks 02_batchnorm_and_padding) -----------------

# ---- what notebook 02 claims, written once: its claim cells and the claim experiments below judge with these ------

MEAN_OFF_BY = 0.5            # C09: padding pulls the worst feature's pooled mean this far or more
LAST_POSITION_OFF_BY = 0.8   # C10: the per-position mean at the last position is off by more than this ...
LAST_VS_FIRST = 3.0          # ... and by more than this many times its error at position 0
MOVES_BY = 0.5               # C11: a change of batch moves an unchanged sentence's output by more than this
EXACT = 1e-12                # "exactly" for float64 computations: nothing left but round-off
TRAIN_EVAL_FACTOR = 3.0      # C12: a test batch padded unlike the training batches has this many times the gap
DRIFT_ON_TOP = 2.0           # C12: at drift +4 masked BatchNorm's gap is this many times the no-drift one
CLEAN_NOISE_ABOVE = 0.01     # C14: a lone token in eval mode is off its training-batch output by more than this
SHRINK_FORMULA_WITHIN = 1e-3  # C60: the measured shrink is 1 - sqrt((n-1)/n) to this
LEAKS_BY = 1e-3              # C58: the future moves position 0 by more than this under pooled statistics
PREFIX_OFF_BY = 0.1          # C59: statistics over a prefix put position 0 this far from its training value
SHRINK_VISIBLE = 0.01        # C60: the eval output is this much smaller (1%) or more
READ_BACK = 1e-8             # C61: the last token read back to this (round-off)
REFUSAL = "Expected more than 1 value per channel when training"  # C13: PyTorch's error for a batch of one


def contamination_checks(s: dict) -> dict[str, bool]:
    """C09 on padding_contamination's result, each check by name."""
    return {"the pooled statistics are the formula's (to 1e-12)": s["formula_error"] < EXACT,
            f"the worst feature's mean is off by more than {MEAN_OFF_BY}": s["worst_mean_error"] > MEAN_OFF_BY}


def per_position_checks(pos: dict[str, dict[str, Tensor]]) -> dict[str, bool]:
    """C10 on position_padding's result, each check by name: only the longest sentence reaches the last position (in
    both batches), position 0 has no pads, and the per-position mean at the last position is far off."""
    varied = pos["most varied lengths"]
    batch = varied["batch_size"]
    err0, err_last = varied["mean_error"][0].item(), varied["mean_error"][-1].item()
    return {f"the last position is {batch - 1}/{batch} pads (the longest sentence alone)":
                all(abs(p["pad_share"][-1].item() - (batch - 1) / batch) < EXACT for p in pos.values()),
            "position 0 has no pads": varied["pad_share"][0].item() == 0,
            f"the mean there is off by more than {LAST_POSITION_OFF_BY} and {LAST_VS_FIRST:g}x position 0's":
                err_last > max(LAST_POSITION_OFF_BY, LAST_VS_FIRST * err0)}


def coupling_checks(changes: dict[str, dict[str, float]]) -> dict[str, bool]:
    """C11 on coupling_changes' result, each check by name."""
    bn, masked, ln = (changes[k] for k in COMPARED_NORMS)
    return {"BatchNorm moves with more padding": bn["more_padding"] > MOVES_BY,
            "BatchNorm moves with other batch mates": bn["other_mates"] > MOVES_BY,
            "masked BatchNorm ignores the padding exactly": masked["more_padding"] < EXACT,
            "masked BatchNorm moves with other batch mates": masked["other_mates"] > MOVES_BY,
            "LayerNorm moves in neither case": ln["more_padding"] < EXACT and ln["other_mates"] < EXACT}


def padding_mismatch(gaps: dict[tuple[str, float], float], name: str, test_share: float = 0.2) -> bool:
    """C12: is module `name`'s train-vs-eval gap on the test_share batch TRAIN_EVAL_FACTOR times its gap at 50%?"""
    return gaps[name, test_share] > TRAIN_EVAL_FACTOR * gaps[name, 0.5]


def train_eval_checks(gaps: dict[tuple[str, float], float], drift_gaps: dict[float, dict[str, float]],
                      test_share: float = 0.2) -> dict[str, bool]:
    """C12 on train_vs_eval_gaps of trained_modules and on masked_drift_gaps (drifts 0 and 4), each check by name."""
    bn, masked, ln = list(dict.fromkeys(name for name, _ in gaps))
    return {f"nn.BatchNorm1d: {TRAIN_EVAL_FACTOR:g}x the gap on the less padded batch":
                padding_mismatch(gaps, bn, test_share),
            f"masked BatchNorm: under 1/{TRAIN_EVAL_FACTOR:g} of that": gaps[masked, test_share] < gaps[bn, test_share]
            / TRAIN_EVAL_FACTOR,
            "LayerNorm: no gap": gaps[ln, 0.5] == 0 and gaps[ln, test_share] == 0,
            f"masked BatchNorm at drift +4: over {DRIFT_ON_TOP:g}x its gap without drift":
                drift_gaps[4.0]["gap"] > DRIFT_ON_TOP * drift_gaps[0.0]["gap"]}


def one_token_checks(r: dict) -> dict[str, bool]:
    """C13 on one_token_in_training's result (one token), each check by name."""
    return {"PyTorch refuses it in training mode": r["error"] is not None and REFUSAL in r["error"],
            "its own batch statistics would map it to 0": r["would_be"].abs().max().item() == 0}


def leak_checks(leak: dict[str, float]) -> dict[str, bool]:
    """C58 on future_leak's result, each check by name."""
    bn, masked, per_position, ln = (leak[k] for k in TIME_NORMS)
    return {"pooled BatchNorm, pads in: the future moves position 0": bn > LEAKS_BY,
            "pooled BatchNorm, masked: the future moves position 0": masked > LEAKS_BY,
            "per-position BatchNorm: it does not": per_position < EXACT,
            "LayerNorm: it does not": ln < EXACT}


def prefix_checks(prefix: dict[str, list[float]]) -> dict[str, bool]:
    """C59 on generation_prefix's result, each check by name."""
    pooled = TIME_NORMS[:2]
    return {f"pooled BatchNorm (both): more than {PREFIX_OFF_BY} off for some prefix":
                all(max(prefix[k]) > PREFIX_OFF_BY for k in pooled),
            "pooled BatchNorm (both): exact only with the whole batch":
                all(prefix[k][-1] < EXACT and min(prefix[k][:-1]) > 1e-6 for k in pooled),
            "per-position BatchNorm and LayerNorm: exact at every prefix":
                all(max(prefix[k]) < EXACT for k in TIME_NORMS[2:])}


def running_var_checks(r: dict) -> dict[str, bool]:
    """C60 on running_var_estimate's result, each check by name."""
    n = r["n"]
    return {"running_var is the unbiased variance, n/(n-1) times the biased": (r["ratio"] - n / (n - 1)).abs().max()
            .item() < EXACT,
            "training normalized with the biased variance": r["train_formula_error"] < EXACT,
            f"the eval output is more than {SHRINK_VISIBLE:.0%} smaller": r["eval_shrink"] > SHRINK_VISIBLE,
            "by 1 - sqrt((n-1)/n)": abs(r["eval_shrink"] - r["predicted_shrink"]) < SHRINK_FORMULA_WITHIN}


def lone_token_checks(gaps: dict, name: str) -> dict[str, bool]:
    """C14 on lone_token_gaps for module `name`, each check by name: alone in eval mode it is off its own training-batch
    output by more than round-off, by exactly what eval mode gives it inside that batch, and not at all once the running
    statistics are the batch's; LayerNorm gives it the same output alone and in a batch."""
    g = gaps[name]
    return {f"{name}: alone in eval mode, off its training-batch output by more than {CLEAN_NOISE_ABOVE}":
                g["alone"] > CLEAN_NOISE_ABOVE,
            "... by exactly what eval mode gives it inside that batch (being alone adds nothing)":
                abs(g["alone"] - g["in its batch, eval mode"]) < EXACT,
            "control: running statistics set to the batch's leave no gap":
                g["running statistics set to the batch's"] < EXACT,
            "LayerNorm: the same output alone and in a batch":
                torch.allclose(gaps["LayerNorm alone"], gaps["LayerNorm in a batch"], rtol=0, atol=EXACT)}


def read_back(r: dict) -> bool:
    """C61: was the last token read back to READ_BACK?"""
    return r["error"] < READ_BACK


# Figure kinds: the tokens are float32 draws widened to float64 (synthetic.padded_batch), and float32 draws differ in
# their last bits between PyTorch's CPU kernels, so a figure computed from them is a "float" one; C13 and C60 do not
# depend on the draws' last bits, C61 is a round-off size.
def _passed(checks: dict[str, bool]) -> str:
    return "checks " + "".join("1" if c else "0" for c in checks.values())


@claim_experiment("C09", statement="With a share p of zero pads, BatchNorm's pooled per-feature mean is exactly (1-p)μ "
                  "and its variance (1-p)σ² + p(1-p)μ², and the worst feature's mean is off by more than 0.5",
                  figure="worst per-feature mean error (pooled mean - true mean)", kind="float",
                  settings=[Setting("50% padding, spread 50%", {"padding_share": 0.5, "spread": 0.5}),
                            Setting("31% padding, most varied lengths", {"padding_share": 0.31, "spread": 1.0}),
                            Setting("75% padding, equal lengths", {"padding_share": 0.75, "spread": 0.0}),
                            Setting("20% padding (limit: the worst mean is off by only about 0.4)",
                                    {"padding_share": 0.2}, expect=False),
                            Setting("no padding (control: the pooled mean is the true mean)", {"padding_share": 0.0},
                                    expect=False)])
def c09_contamination(seed, *, padding_share=0.5, spread=0.5):
    s = padding_contamination(seed, padding_share, spread)
    return Outcome(holds=all(contamination_checks(s).values()), figure=s["worst_mean_error"],
                   detail=f"p {float(s['padding_share']):.2f}, formula off by {s['formula_error']:.1e}")


@claim_experiment("C10", statement="Per-position statistics: at the last of 64 positions only the longest sentence is "
                  "real ((B-1)/B pads: 15/16 in a batch of 16), and the per-position mean there is off by more than "
                  "0.8 and by more than three times its error at position 0, in batches of 16 and 32 (with 8 "
                  "sentences position 0's own error, from 8 values, can reach a third of it)",
                  figure="error of the per-position mean at the last position (mean over features), varied lengths",
                  kind="float",
                  settings=[Setting("50% padding", {"padding_share": 0.5}),
                            Setting("75% padding", {"padding_share": 0.75}),
                            Setting("batch of 32, 50% padding", {"padding_share": 0.5, "batch_size": 32}),
                            Setting("25% padding (limit: two varied sentences reach position 63, 14/16 pads)",
                                    {"padding_share": 0.25}, expect=False),
                            Setting("no padding (control: every position is real tokens, the error is sampling "
                                    "noise)", {"padding_share": 0.0}, expect=False)])
def c10_per_position(seed, *, padding_share=0.5, batch_size=BATCH_SIZE):
    pos = position_padding(seed, padding_share, batch_size)
    varied = pos["most varied lengths"]
    checks = per_position_checks(pos)
    return Outcome(holds=all(checks.values()), figure=varied["mean_error"][-1].item(),
                   detail=f"pads at the last position {varied['pad_share'][-1].item():.4f}, error at position 0 "
                          f"{varied['mean_error'][0].item():.2f}; {_passed(checks)}")


@claim_experiment("C11", statement="An unchanged sentence's output moves by more than 0.5 under BatchNorm with more "
                  "padding (padded to 28 or more) and with other batch mates; masked BatchNorm ignores the padding "
                  "exactly (< 1e-12) but moves by more than 0.5 with the batch mates; LayerNorm moves in neither case",
                  figure="BatchNorm's (padding included) largest change with more padding", kind="float",
                  settings=[Setting("padded to 56, mates shifted by +1", {"padded_len": 56, "mate_shift": 1.0}),
                            Setting("padded to 28, mates shifted by -1", {"padded_len": 28, "mate_shift": -1.0}),
                            Setting("padded to 112, mates shifted by +2", {"padded_len": 112, "mate_shift": 2.0}),
                            Setting("padded to 16 (limit: two more positions move it by under 0.5)",
                                    {"padded_len": 16, "mate_shift": 1.0}, expect=False)])
def c11_coupling(seed, *, padded_len=56, mate_shift=1.0):
    c = coupling_changes(seed, padded_len, mate_shift)
    bn, masked = (c[k] for k in COMPARED_NORMS[:2])
    return Outcome(holds=all(coupling_checks(c).values()), figure=bn["more_padding"],
                   detail=f"BatchNorm with mates {bn['other_mates']:.3g}; masked {masked['more_padding']:.2g} / "
                          f"{masked['other_mates']:.3g}")


@claim_experiment("C12", statement="After 200 drifting training batches at 50% padding, nn.BatchNorm1d's "
                  "train-vs-eval gap on a 20%-padded batch is over 3x its gap on a 50%-padded one; masked BatchNorm's "
                  "is under a third of nn.BatchNorm1d's; LayerNorm has none; masked BatchNorm's gap on the 50%-padded "
                  "batch is over twice as large at drift +4 as with no drift (the drift lag on top of sampling noise)",
                  figure="nn.BatchNorm1d's mean train-vs-eval gap on the test batch", kind="float",
                  settings=[Setting("test batch 20% padding", {"test_share": 0.2}),
                            Setting("test batch 10% padding", {"test_share": 0.1}),
                            Setting("trained without padding (control: the gap comes from the padding mismatch)",
                                    {"train_share": 0.0}, expect=False)])
def c12_train_vs_eval(seed, *, test_share=0.2, train_share=0.5):
    modules = trained_modules(padding_share=train_share, seed=seed)
    gaps = train_vs_eval_gaps(modules, shares=(0.5, test_share), seed=seed)
    bn, masked, ln = list(modules)
    lag = masked_drift_gaps(seed=seed)
    return Outcome(holds=all(train_eval_checks(gaps, lag, test_share).values()), figure=gaps[bn, test_share],
                   detail=f"at 50%: {gaps[bn, 0.5]:.3f}; masked {gaps[masked, test_share]:.3f}; masked at 50%, "
                          f"drift 0 {lag[0.0]['gap']:.3f}, drift 1 {gaps[masked, 0.5]:.3f}, drift 4 {lag[4.0]['gap']:.3f}")


_API_FACT = ("PyTorch's own check on the batch size, and (x - mean) / sqrt(0 + eps) = 0 for a single value: the same "
             "whatever the token")


@claim_experiment("C13", statement="nn.BatchNorm1d in training mode refuses a batch of one token (ValueError: Expected "
                  "more than 1 value per channel when training); its batch statistics would map every feature to 0",
                  figure="largest |output| the one token's own batch statistics would give", kind="exact",
                  settings=[Setting("one token", {"n_tokens": 1}, fixed=_API_FACT),
                            Setting("two tokens (control: training mode works)", {"n_tokens": 2}, expect=False,
                                    fixed=_API_FACT)])
def c13_one_token(seed, *, n_tokens=1):
    r = one_token_in_training(seed, n_tokens)
    return Outcome(holds=all(one_token_checks(r).values()), figure=r["would_be"].abs().max().item(),
                   detail=str(r["error"])[:60])


@claim_experiment("C14", statement="A lone token in eval mode (running statistics) gets an output more than 0.01 away "
                  "from the one the same BatchNorm module gave it inside a training batch, by exactly the gap eval mode "
                  "gives it inside that batch: being alone adds nothing once the statistics are frozen; with the "
                  "running statistics set to that batch's own the gap is 0 (control), and LayerNorm gives the token "
                  "exactly its in-batch output",
                  figure="largest |eval-mode output alone - training-batch output| of the module", kind="float",
                  settings=[Setting("nn.BatchNorm1d, 50% padding, drift +1 (the notebook)", {}),
                            Setting("masked BatchNorm, 50% padding, drift +1", {"module": 1}),
                            Setting("nn.BatchNorm1d, 30% padding, drift +1", {"padding_share": 0.3}),
                            Setting("nn.BatchNorm1d, 50% padding, no drift", {"drift": 0.0}),
                            Setting("masked BatchNorm, no padding, no drift", {"padding_share": 0.0, "drift": 0.0,
                                                                               "module": 1}),
                            Setting("running statistics set to the batch's (control: no gap)", {"matched": True},
                                    expect=False)])
def c14_lone_token(seed, *, padding_share=0.5, drift=1.0, module=0, matched=False):
    modules = trained_modules(drift=drift, padding_share=padding_share, seed=seed)
    token = one_token_in_training(seed, drift=drift)["tokens"]
    g = lone_token_gaps(modules, token, drift=drift, seed=seed, padding_share=padding_share)
    name = list(modules)[module]
    if matched:   # the control: judge the matched module's gap as the claim judges the lone token's
        g[name] = dict(g[name], alone=g[name]["running statistics set to the batch's"])
    checks = lone_token_checks(g, name)
    return Outcome(holds=all(checks.values()), figure=g[name]["alone"],
                   detail=f"{name}; {_passed(checks)}; in its batch in eval mode {g[name]['in its batch, eval mode']:.3f}")


@claim_experiment("C58", statement="Replacing only the sentence's last token moves its output at position 0 by more "
                  "than 1e-3 under BatchNorm pooled over (batch, time), padding included or masked; under BatchNorm "
                  "per position and LayerNorm by less than 1e-12",
                  figure="masked BatchNorm's largest change at position 0", kind="float",
                  settings=[Setting("last token (position 11) replaced", {"changed": SENTENCE_LEN - 1}),
                            Setting("token at position 6 replaced", {"changed": 6}),
                            Setting("token at position 0 replaced (control: every norm moves)", {"changed": 0},
                                    expect=False)])
def c58_future_leak(seed, *, changed=SENTENCE_LEN - 1):
    leak = future_leak(seed, changed)
    bn, masked, per_position, ln = (leak[k] for k in TIME_NORMS)
    return Outcome(holds=all(leak_checks(leak).values()), figure=masked,
                   detail=f"pads in {bn:.3g}, per position {per_position:.2g}, LayerNorm {ln:.2g}")


@claim_experiment("C59", statement="With statistics over only the first t positions (as causal batch statistics in "
                  "generation would be), BatchNorm pooled over time gives position 0 an output more than 0.1 from its "
                  "training value for some t, padding included or masked, and reaches it (< 1e-12) only with the whole "
                  "batch; per-position BatchNorm and LayerNorm give exactly the training value (< 1e-12) at every t",
                  figure="masked BatchNorm's largest difference over t", kind="float",
                  settings=[Setting("the 8-sentence batch of section 2"),
                            Setting("the 7 mates from another domain (+2)", {"mate_shift": 2.0})])
def c59_generation_prefix(seed, *, mate_shift=0.0):
    prefix = generation_prefix(seed, mate_shift)
    return Outcome(holds=all(prefix_checks(prefix).values()), figure=max(prefix[TIME_NORMS[1]]),
                   detail=f"pads in {max(prefix[TIME_NORMS[0]]):.3g}")


@claim_experiment("C60", statement="nn.BatchNorm1d normalizes with the biased batch variance but stores the unbiased "
                  "one (factor n/(n-1)) as running_var, so on a 20-position batch its eval output is more than 1% "
                  "smaller than its training output even with running statistics from that same batch; the shrink, "
                  "1 - sqrt((n-1)/n), depends on n alone, so every seed gives the same figure",
                  figure="eval output / training output, 1 minus (mean over outputs above 0.1)", kind="exact",
                  settings=[Setting("4 sequences padded to 5 (n = 20)", {"lengths": (5, 3, 2, 4)}),
                            Setting("3 sequences padded to 4 (n = 12)", {"lengths": (4, 2, 3)}),
                            Setting("16 sequences of 64 (n = 1024; limit: the gap is under 1%)",
                                    {"lengths": (64,) * 16}, expect=False)])
def c60_running_var(seed, *, lengths=(5, 3, 2, 4)):
    r = running_var_estimate(seed, lengths)
    # to 6 decimals: beyond them is only eps's share, which varies with the data by about 1e-7
    return Outcome(holds=all(running_var_checks(r).values()), figure=round(r["eval_shrink"], 6),
                   detail=f"n {r['n']}, predicted shrink {r['predicted_shrink']:.4f}")


@claim_experiment("C61", statement="With one sentence in the batch, its last token is read back to 1e-8 from what a "
                  "causal model shows position T-2 (tokens 0..T-2 and their BatchNorm outputs); with 8 sentences, or "
                  "under LayerNorm, the same arithmetic misses it",
                  figure="largest error of the recovered last token", kind="roundoff",
                  settings=[Setting("one sentence, masked BatchNorm", {"batch_size": 1}),
                            Setting("one sentence, BatchNorm with pads (none here)",
                                    {"batch_size": 1, "kind": COMPARED_NORMS[0]}),
                            Setting("2 sentences (limit: one batch mate hides the token)", {"batch_size": 2},
                                    expect=False),
                            Setting("8 sentences (limit: batch mates hide the token)", {"batch_size": 8},
                                    expect=False),
                            Setting("one sentence, LayerNorm (control)", {"batch_size": 1, "kind": COMPARED_NORMS[2]},
                                    expect=False)])
def c61_recover(seed, *, batch_size=1, kind=COMPARED_NORMS[1]):
    r = recover_last_token(seed, batch_size, kind)
    return Outcome(holds=read_back(r), figure=r["error"], detail=f"token size {r['token_size']:.2f}")

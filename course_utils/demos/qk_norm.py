"""Notebook 06 (QK-norm and soft-capping): attention maps under scaled queries and keys, the soft-cap curve and its
effect on next-token probabilities, the high-learning-rate training experiment and its rerun panel, two checkers.

`attention_probs` and `softcap_logits` are reference copies of the code notebook 06 writes inline (sections 1 and 2).
The attention-logit experiment follows Wortsman et al. 2023 (arXiv 2309.14322): a small model, a learning rate raised
until the attention logits grow, with and without QK-norm (Henry et al. 2020, arXiv 2010.04245) and soft-capping
(Gemma 2, arXiv 2408.00118).
"""
from __future__ import annotations

import math

import ipywidgets as widgets
import numpy as np
import plotly.graph_objects as go
import torch
import torch.nn.functional as F
from plotly.subplots import make_subplots
from torch import Tensor

from ..exercises import CheckReport, run_case
from ..figures import PALETTE, LiveFigure, color, live_figure
from ..panel import BackgroundRun, Panel, message_html, register_panel
from ..tasks import copy_task_batch
from ..training import History, train_copy_task
from ..transformer import TinyLM, softcap

__all__ = [
    "GEMMA2_ATTN_CAP", "GEMMA2_FINAL_CAP", "RECIPE", "CONDITIONS", "LAB_CONDITIONS",
    "probe_qk", "attention_probs", "row_entropy", "softmax_jacobian_norm", "attention_panel",
    "next_token_logits", "softcap_logits", "softcap_panel",
    "make_model", "logit_growth_figure", "live_callback", "draw_history", "attention_saturation", "qk_gain_bound",
    "TrainingLab", "training_panel", "check_softcap", "check_qk_norm_logits",
]

GEMMA2_ATTN_CAP = 50.0   # Gemma 2, arXiv 2408.00118: attention logits
GEMMA2_FINAL_CAP = 30.0  # ... and final (next-token) logits

# Notebook 06's training recipe: a small Pre-LN model at a learning rate high enough for attention logits to run away.
RECIPE = dict(vocab_size=16, d_model=64, n_layers=2, n_heads=2, n_tokens=8, batch_size=32, lr=0.1, warmup=20,
              betas=(0.9, 0.95), weight_decay=0.0)
CONDITIONS = {
    "no QK-norm": {},
    "QK-norm": {"qk_norm": "layer"},
    "soft-cap 50": {"attn_softcap": GEMMA2_ATTN_CAP},
}
# The rerun panel also offers RMSNorm on q and k (no centring, no bias), as OLMo 2 and Gemma 3 use.
LAB_CONDITIONS = {**CONDITIONS, "QK-RMSNorm": {"qk_norm": "rms"}}


# ---------------------------------------------------------------------------------------------- 1. attention maps
def probe_qk(n_tokens: int = 12, d_head: int = 16, seed: int = 0) -> tuple[Tensor, Tensor]:
    """Fixed random queries and keys, each (n_tokens, d_head) with N(0, 1) entries, in float64."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n_tokens, d_head, generator=g, dtype=torch.float64),
            torch.randn(n_tokens, d_head, generator=g, dtype=torch.float64))


def attention_probs(q: Tensor, k: Tensor, qk_norm: bool = False, gain: float = 1.0,
                    eps: float = 1e-6) -> tuple[Tensor, Tensor]:
    """Reference copy of notebook 06 section 1: softmax(q k^T / sqrt(d_head)), optionally with QK-norm.

    QK-norm here is RMSNorm over d_head with a shared scalar gain on q and k. q: (..., n_q, d_head),
    k: (..., n_k, d_head) -> (probs, logits), both (..., n_q, n_k).
    """
    if qk_norm:
        q = gain * q / q.pow(2).mean(-1, keepdim=True).add(eps).sqrt()
        k = gain * k / k.pow(2).mean(-1, keepdim=True).add(eps).sqrt()
    logits = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return logits.softmax(-1), logits


def row_entropy(p: Tensor) -> Tensor:
    """Entropy in nats of each row of a probability matrix (..., n) -> (...); 0 for one-hot, ln n for uniform."""
    return torch.special.entr(p).sum(-1)  # entr(p) = -p ln p, and 0 at p = 0


def softmax_jacobian_norm(p: Tensor) -> Tensor:
    """Frobenius norm of the softmax Jacobian diag(p) - p p^T for each row of p (..., n) -> (...).

    It is what a gradient passes through on its way from the attention weights back to the logits.
    """
    jac = torch.diag_embed(p) - p[..., :, None] * p[..., None, :]
    return jac.flatten(-2).norm(dim=-1)


def _positive_number(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{what} must be a number > 0, got {value!r}")
    return float(value)


@register_panel("06_qk_norm_and_softcapping")
def attention_panel(n_tokens: int = 12, d_head: int = 16) -> Panel:
    """Scale queries and keys; the attention map and its entropy, without and with QK-norm, side by side."""
    q0, k0 = probe_qk(n_tokens, d_head)
    max_entropy = math.log(n_tokens)
    grid = np.logspace(-2, 3, 61)  # the product s_q * s_k, precomputed: moving a slider only marks a point
    plain_curve = [float(row_entropy(attention_probs(s * q0, k0)[0]).mean()) for s in grid]

    heat = LiveFigure(make_subplots(rows=1, cols=2, horizontal_spacing=0.12,
                                         subplot_titles=("without QK-norm", "with QK-norm")))
    heat.update_layout(title="Attention weights: each row is one query, its weights over the keys sum to 1",
                       height=380, template="plotly_white", margin=dict(l=60, r=20, t=80, b=50))
    for col in (1, 2):
        heat.add_heatmap(z=np.zeros((n_tokens, n_tokens)), zmin=0.0, zmax=1.0, colorscale="Cividis",
                         showscale=col == 2, colorbar=dict(title="weight"), row=1, col=col,
                         hovertemplate="query %{y}, key %{x}: %{z:.3f}<extra></extra>")
        heat.update_xaxes(title_text="key position", row=1, col=col)
        heat.update_yaxes(title_text="query position", autorange="reversed", row=1, col=col)

    curve = live_figure("Attention entropy as queries and keys grow", "s_q · s_k (how much q and k are scaled)",
                        "mean entropy per query (nats)", log_x=True, height=360)
    curve.add_scatter(x=grid.tolist(), y=plain_curve, mode="lines", name="without QK-norm",
                      line=dict(color=color(1), width=3))
    curve.add_scatter(x=[grid[0], grid[-1]], y=[0, 0], mode="lines", name="with QK-norm (gain γ)",
                      line=dict(color=color(0), width=3))
    curve.add_scatter(x=[grid[0], grid[-1]], y=[max_entropy] * 2, mode="lines",
                      name=f"uniform attention: ln {n_tokens} = {max_entropy:.2f}",
                      line=dict(color="#999999", dash="dash"))
    curve.add_scatter(x=[1.0, 1.0], y=[0, 0], mode="markers", name="you are here",
                      marker=dict(size=12, color=[color(1), color(0)], symbol="circle-open-dot", line=dict(width=3)))
    curve.update_yaxes(range=[-0.05, max_entropy + 0.2])
    readout = widgets.HTML()
    controls = {
        "scale_q": widgets.FloatLogSlider(value=1.0, base=10, min=-1, max=1.5, step=0.05,
                                          description="query scale s_q"),
        "scale_k": widgets.FloatLogSlider(value=1.0, base=10, min=-1, max=1.5, step=0.05,
                                          description="key scale s_k"),
        "gain": widgets.FloatSlider(value=1.0, min=0.5, max=3.0, step=0.1, description="QK-norm gain γ"),
    }

    def update(scale_q, scale_k, gain):
        scale_q = _positive_number(scale_q, "the query scale s_q")
        scale_k = _positive_number(scale_k, "the key scale s_k")
        gain = _positive_number(gain, "the QK-norm gain γ")
        q, k = scale_q * q0, scale_k * k0
        p_plain, z_plain = attention_probs(q, k)
        p_norm, z_norm = attention_probs(q, k, qk_norm=True, gain=gain)
        h_plain, h_norm = float(row_entropy(p_plain).mean()), float(row_entropy(p_norm).mean())
        with heat.batch_update():
            heat.data[0].z = p_plain.numpy()
            heat.data[1].z = p_norm.numpy()
        with curve.batch_update():
            curve.data[1].y = [h_norm, h_norm]
            curve.data[3].update(x=[scale_q * scale_k] * 2, y=[h_plain, h_norm])
        rows = [(name, float(z.abs().max()), float(p.max(-1).values.mean()), h)
                for name, z, p, h in (("without QK-norm", z_plain, p_plain, h_plain),
                                      ("with QK-norm", z_norm, p_norm, h_norm))]
        cells = "".join(f"<tr><td>{n}</td><td>{z:.3g}</td><td>{w:.3f}</td><td>{h:.3f}</td></tr>" for n, z, w, h in rows)
        note = (" The softmax has saturated: almost every query puts nearly all its weight on one key."
                if rows[0][2] > 0.95 else "")
        readout.value = (f"<table><tr><th></th><th>largest |logit|</th><th>mean largest weight (one-hot = 1)</th>"
                         f"<th>mean entropy (uniform = {max_entropy:.2f})</th></tr>{cells}</table>"
                         f"Logits without QK-norm scale with s_q·s_k = {scale_q * scale_k:.3g}; with QK-norm they "
                         f"stay below √d_head·γ² = {math.sqrt(d_head) * gain ** 2:.3g}.{note}")

    return Panel(controls, [readout, heat, curve], update,
                 title="Scale the queries and keys: watch the attention map sharpen to one-hot")


# ------------------------------------------------------------------------------------------------- 2. soft-capping
def softcap_logits(x: Tensor, cap: float) -> Tensor:
    """Reference copy of notebook 06 section 2: cap * tanh(x / cap)."""
    return cap * torch.tanh(x / cap)


def next_token_logits(top_logit: float, vocab_size: int = 1000, seed: int = 0) -> Tensor:
    """A fixed, made-up next-token logit vector (vocab_size,), scaled so its largest entry is `top_logit`.

    A few candidate tokens stand out from a Gaussian background, as in a confident language model.
    """
    top_logit = _positive_number(top_logit, "the largest logit")
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(vocab_size, generator=g, dtype=torch.float64)
    z[:6] += torch.tensor([7.0, 6.0, 5.5, 4.5, 4.0, 3.5], dtype=torch.float64)
    return z * (top_logit / z.max())


@register_panel("06_qk_norm_and_softcapping")
def softcap_panel(top_k: int = 8) -> Panel:
    """Pick a cap and how large the logits are: the cap curve, and next-token probabilities before and after it."""
    xs = torch.linspace(-150.0, 150.0, 301, dtype=torch.float64)
    curve = live_figure("Soft-capping: cap · tanh(x / cap) against the raw logit x", "raw logit x",
                        "logit after the cap", height=400)
    curve.add_scatter(x=xs.tolist(), y=xs.tolist(), mode="lines", name="no cap (identity)",
                      line=dict(color="#999999", dash="dash"))
    for j, (cap, name) in enumerate(((GEMMA2_FINAL_CAP, "Gemma 2 final logits"),
                                     (GEMMA2_ATTN_CAP, "Gemma 2 attention logits"))):
        curve.add_scatter(x=xs.tolist(), y=softcap_logits(xs, cap).tolist(), mode="lines",
                          name=f"{name}: cap {cap:g}", line=dict(color=color(2 + j), width=1.5, dash="dot"))
    curve.add_scatter(x=xs.tolist(), mode="lines", name="your cap", line=dict(color=color(0), width=3))
    curve.add_scatter(mode="markers", name=f"the example's top {top_k} logits",
                      marker=dict(color=color(1), size=9, symbol="diamond"))
    curve.update_yaxes(range=[-110, 110])

    bars = live_figure(f"Next-token probabilities of the top {top_k} tokens", "token (ranked by raw logit)",
                       "probability", height=360)
    bars.add_bar(name="raw logits", marker_color=color(1))
    bars.add_bar(name="soft-capped logits", marker_color=color(0))
    bars.update_yaxes(range=[0, 1])
    readout = widgets.HTML()
    controls = {
        "cap": widgets.FloatSlider(value=GEMMA2_FINAL_CAP, min=2.0, max=100.0, step=1.0, description="cap"),
        "top_logit": widgets.FloatSlider(value=20.0, min=2.0, max=120.0, step=1.0, description="largest logit"),
    }

    def update(cap, top_logit):
        cap = _positive_number(cap, "the cap")
        z = next_token_logits(top_logit)
        capped = softcap_logits(z, cap)
        p, p_cap = z.softmax(-1), capped.softmax(-1)
        order = torch.argsort(z, descending=True)
        top = order[:top_k]
        labels = [f"#{i + 1}" for i in range(top_k)]
        with curve.batch_update():
            curve.data[3].update(y=softcap_logits(xs, cap).tolist(), name=f"your cap: {cap:g}")
            curve.data[4].update(x=z[top].tolist(), y=capped[top].tolist())
        with bars.batch_update():
            bars.data[0].update(x=labels, y=p[top].tolist())
            bars.data[1].update(x=labels, y=p_cap[top].tolist())
        same_order = bool(torch.equal(torch.argsort(capped, descending=True), order))
        kl = float((p * (p.clamp_min(1e-300).log() - p_cap.clamp_min(1e-300).log())).sum())
        readout.value = (f"Largest logit {float(z.max()):.1f} → {float(capped.max()):.2f} after the cap; "
                         f"top-1 probability {float(p.max()):.3f} → {float(p_cap.max()):.3f}; "
                         f"KL(raw ‖ capped) = {kl:.3g} nats. Ranking of all {len(z)} tokens unchanged: "
                         f"{'yes' if same_order else 'NO'} (tanh is increasing, so greedy decoding never changes).")

    return Panel(controls, [readout, curve, bars], update,
                 title="Soft-capping: pick a cap and a logit size")


# --------------------------------------------------------------------------------------- 3. training at a high lr
def make_model(condition: str, seed: int, cap: float = GEMMA2_ATTN_CAP, **recipe) -> TinyLM:
    """The recipe's TinyLM under one of LAB_CONDITIONS (a soft-cap condition uses `cap`)."""
    if condition not in LAB_CONDITIONS:
        raise ValueError(f"condition must be one of {tuple(LAB_CONDITIONS)}, got {condition!r}")
    r = {**RECIPE, **recipe}
    options = dict(LAB_CONDITIONS[condition])
    if "attn_softcap" in options:
        options["attn_softcap"] = _positive_number(cap, "the cap")
    return TinyLM(r["vocab_size"], d_model=r["d_model"], n_layers=r["n_layers"], n_heads=r["n_heads"],
                  max_len=2 * r["n_tokens"], seed=seed, **options)


def _run_style(condition: str, seed_index: int) -> dict:
    j = list(LAB_CONDITIONS).index(condition) if condition in LAB_CONDITIONS else 3
    return dict(color=PALETTE[[1, 0, 2, 3][j]], dash=["solid", "dash", "dot", "dashdot"][seed_index % 4])


def logit_growth_figure(runs: list[tuple[str, int]], title: str | None = None) -> go.FigureWidget:
    """Two panels, the largest attention logit (log scale) and the loss per step, one trace per (condition, seed)."""
    fig = LiveFigure(make_subplots(rows=1, cols=2, horizontal_spacing=0.1, subplot_titles=(
        "largest |attention logit| before any cap", "training loss")))
    fig.update_layout(title=title or "Training at a high learning rate: attention logits and loss, per step",
                      height=420, template="plotly_white", margin=dict(l=60, r=20, t=80, b=50),
                      legend=dict(orientation="h", y=-0.25))
    fig.update_xaxes(title_text="training step")
    fig.update_yaxes(title_text="largest |logit| (log scale)", type="log", row=1, col=1)
    fig.update_yaxes(title_text="cross-entropy on the copied half (nats)", row=1, col=2)
    for i, (condition, seed) in enumerate(runs):
        style = _run_style(condition, seed)
        for col in (1, 2):
            fig.add_scatter(mode="lines", name=f"{condition}, seed {seed}", legendgroup=f"{i}",
                            showlegend=col == 1, line=dict(color=style["color"], dash=style["dash"], width=2),
                            row=1, col=col)
    return fig


def live_callback(fig: go.FigureWidget, run_index: int, every: int = 25, on_step=None):
    """A train_copy_task callback that redraws run `run_index` of a logit_growth_figure every `every` steps."""
    def callback(step: int, history: History) -> None:
        if on_step is not None:
            on_step(step, history)
        if step % every == every - 1:
            draw_history(fig, run_index, history)
    return callback


def draw_history(fig: go.FigureWidget, run_index: int, history: History) -> None:
    """Put a whole History into run `run_index` of a logit_growth_figure."""
    logits = [v if 0 < v < math.inf else None for v in history.max_logit]
    with fig.batch_update():
        fig.data[2 * run_index].update(x=history.step, y=logits)
        fig.data[2 * run_index + 1].update(x=history.step, y=history.loss)


@torch.no_grad()
def attention_saturation(model: TinyLM, seed: int = 123, batch_size: int = 64, far: float = 100.0) -> dict[str, float]:
    """On a fresh copy-task batch, over all layers and heads: mean entropy (nats) and mean largest weight of the
    attention rows that see at least two keys (after any cap and the causal mask); the mean slope of the cap over the
    visible logits; and the share of visible logits with |logit| > `far` before the cap."""
    n_tokens = (model.max_len) // 2
    idx, _, _ = copy_task_batch(batch_size, n_tokens, model.tok_emb.num_embeddings,
                                generator=torch.Generator().manual_seed(seed))
    was_training = model.training
    model.eval()
    _, hidden = model(idx, return_hidden=True)
    entropies, weights, slopes, beyond = [], [], [], []
    for block, x in zip(model.blocks, hidden):
        attn = block.attn
        z, _ = attn.logits(block.norm1(x) if block.placement == "pre" else x)
        capped = softcap(z, attn.attn_softcap)
        t = z.shape[-1]
        future = torch.ones(t, t, dtype=torch.bool).triu(1)
        p = capped.masked_fill(future, float("-inf")).softmax(-1)[..., 1:, :]  # row 0 sees one key only
        entropies.append(row_entropy(p).mean())
        weights.append(p.max(-1).values.mean())
        slope = 1 - torch.tanh(z / attn.attn_softcap) ** 2 if attn.attn_softcap else torch.ones_like(z)
        slopes.append(slope.masked_select(~future).mean())
        beyond.append((z.abs() > far).masked_select(~future).float().mean())
    model.train(was_training)
    return {"entropy": float(torch.stack(entropies).mean()), "max_weight": float(torch.stack(weights).mean()),
            "cap_slope": float(torch.stack(slopes).mean()), "share_beyond": float(torch.stack(beyond).mean()),
            "uniform_entropy": math.log(2 * n_tokens)}


def qk_gain_bound(model: TinyLM) -> float:
    """Largest |attention logit| that QK-norm allows given the learned q/k norm weights and biases, over all blocks.

    With RMS- or LayerNorm on q and k, |q̂| <= sqrt(d) max|γ_q| + |β_q| and the same for k, so
    |q̂ · k̂| / sqrt(d) <= (sqrt(d) max|γ_q| + |β_q|)(sqrt(d) max|γ_k| + |β_k|) / sqrt(d).
    """
    bounds = []
    for block in model.blocks:
        attn = block.attn
        if attn.qk_norm is None:
            raise ValueError("this model has no QK-norm: its logits have no such bound")
        d = attn.d_head

        def size(norm):
            bias = getattr(norm, "bias", None)
            bias = 0.0 if bias is None else float(bias.detach().norm())
            return math.sqrt(d) * float(norm.weight.detach().abs().max()) + bias
        bounds.append(size(attn.q_norm) * size(attn.k_norm) / math.sqrt(d))
    return max(bounds)


SECONDS_PER_STEP = 0.02  # measured for RECIPE on the course's shared 2-core CPU; only used for the time estimate


class TrainingLab:
    """The rerun panel: pick a condition, learning rate, cap, steps and seed, press Train; each run adds a trace.

    `panel` checks the settings (and is what the benchmark times); training runs through a BackgroundRun with progress
    and Stop, or synchronously with run(background=False).
    """

    MAX_RUNS = 8

    def __init__(self):
        self.fig = logit_growth_figure([], title="Your runs: largest attention logit and loss per step")
        self.button = widgets.Button(description="Train", icon="play", button_style="primary")
        self.clear_button = widgets.Button(description="Clear runs", icon="trash")
        self.runner = BackgroundRun("training")
        self.estimate = widgets.HTML()
        self.results: list[dict] = []
        controls = {
            "condition": widgets.Dropdown(options=list(LAB_CONDITIONS), value="no QK-norm", description="condition"),
            "lr": widgets.FloatLogSlider(value=RECIPE["lr"], base=10, min=-3, max=-0.5, step=0.25,
                                         description="learning rate"),
            "cap": widgets.FloatSlider(value=GEMMA2_ATTN_CAP, min=1.0, max=100.0, step=1.0, description="cap"),
            "steps": widgets.IntSlider(value=100, min=20, max=600, step=20, description="steps"),
            "seed": widgets.IntSlider(value=0, min=0, max=20, description="seed"),
        }
        self.panel = Panel(controls, [self.estimate, widgets.HBox([self.button, self.clear_button]),
                                      self.runner.widget, self.fig], self._check,
                           title="Your own run: change one thing at a time")
        self.panel.lab = self
        self.button.on_click(lambda _b: self.run(background=True))
        self.clear_button.on_click(lambda _b: self.clear())

    def _check(self, condition, lr, cap, steps, seed) -> dict:
        if condition not in LAB_CONDITIONS:
            raise ValueError(f"condition must be one of {tuple(LAB_CONDITIONS)}, got {condition!r}")
        lr = _positive_number(lr, "the learning rate")
        if lr > 1.0:
            raise ValueError(f"a learning rate of {lr:g} is beyond what AdamW can use here: pick at most 1")
        cap = _positive_number(cap, "the cap")
        if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or not 1 <= steps <= 5000:
            raise ValueError(f"steps must be a whole number from 1 to 5000, got {steps!r}")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be a whole number >= 0, got {seed!r}")
        cap_note = "" if "attn_softcap" in LAB_CONDITIONS[condition] else " (the cap only matters for the soft-cap run)"
        self.estimate.value = (f"{condition}, lr {lr:.3g}, {steps} steps, seed {seed}{cap_note}: about "
                               f"{steps * SECONDS_PER_STEP:.0f} s on a 2-core CPU. Press Train.")
        return dict(condition=condition, lr=lr, cap=cap, steps=int(steps), seed=int(seed))

    def clear(self) -> None:
        """Remove every run's traces (not while one is training)."""
        if self.runner.running:
            self.estimate.value = message_html("A run is going: press Stop first.")
            return
        self.results.clear()
        self.fig.data = ()

    def run(self, background: bool = True) -> bool:
        """Train one run with the current settings, drawing live; False (with a message) if it cannot start."""
        try:
            settings = self._check(**self.panel.values())
        except ValueError as exc:
            self.estimate.value = message_html(str(exc))
            return False
        if self.runner.running:
            return self.runner.start(lambda *_: None)  # refused, with the runner's message
        if len(self.fig.data) // 2 >= self.MAX_RUNS:
            self.clear()
        capped = "attn_softcap" in LAB_CONDITIONS[settings["condition"]]
        label = f"{settings['condition']}" + (f" at {settings['cap']:g}" if capped else "") + f", lr {settings['lr']:.3g}"
        index = len(self.fig.data) // 2  # two traces per run; a failed run keeps its (empty) traces
        style = _run_style(settings["condition"], index)
        for col in (1, 2):
            self.fig.add_scatter(mode="lines", name=f"{label}, seed {settings['seed']}", legendgroup=str(index),
                                 showlegend=col == 1, line=dict(color=style["color"], dash=style["dash"]),
                                 row=1, col=col)

        def job(should_stop, progress):
            model = make_model(settings["condition"], settings["seed"], settings["cap"])
            steps = settings["steps"]

            def report(step, h):
                progress(step + 1, steps, f"step {step + 1}/{steps}, loss {h.loss[-1]:.3f}, "
                                          f"largest logit {h.max_logit[-1]:.3g}")
            history = train_copy_task(
                model, steps=steps, lr=settings["lr"], warmup=RECIPE["warmup"], batch_size=RECIPE["batch_size"],
                n_tokens=RECIPE["n_tokens"], vocab_size=RECIPE["vocab_size"], seed=settings["seed"],
                betas=RECIPE["betas"], weight_decay=RECIPE["weight_decay"],
                callback=live_callback(self.fig, index, every=20, on_step=report), should_stop=should_stop)
            draw_history(self.fig, index, history)
            return {**settings, "history": history, "model": model}

        started = self.runner.start(job, self.results.append, background=background)
        if not background and self.runner.error:
            self.estimate.value = message_html(f"The run failed: {self.runner.error}", "error")
        return started

    def _ipython_display_(self):
        from IPython.display import display
        display(self.panel.widget)


@register_panel("06_qk_norm_and_softcapping")
def training_panel() -> Panel:
    """The rerun panel's controls (the benchmark times the settings check; training starts only on Train)."""
    return TrainingLab().panel


# ------------------------------------------------------------------------------------------------------ checkers
def check_softcap(fn) -> CheckReport:
    """Check fn(x, cap) -> cap * tanh(x / cap), elementwise, against the course's softcap."""
    report = CheckReport("softcap")
    g = torch.Generator().manual_seed(6)
    x = torch.randn(4, 7, generator=g) * 40
    cases = [("logits around the cap, cap 30", x, 30.0, 1e-4, False),
             ("small logits, cap 50 (almost the identity)", torch.randn(10, generator=g), 50.0, 1e-5, False),
             ("huge logits (1e6), cap 50: no overflow, no nan", torch.tensor([-1e6, -60.0, 0.0, 60.0, 1e6]), 50.0,
              1e-4, False),
             ("a small cap, 2.5", x, 2.5, 1e-5, False),
             ("float64", x.double(), 30.0, 1e-10, False),
             ("gradients through autograd", x.double(), 30.0, 1e-8, True)]
    for name, inputs, cap, tol, grad in cases:
        report.cases.append(run_case(name, lambda t, cap=cap: fn(t, cap), lambda t, cap=cap: softcap(t, cap),
                                      [inputs], tol, grad))
    return report


def _qk_reference(q: Tensor, k: Tensor, weight_q: Tensor, weight_k: Tensor, eps: float) -> Tensor:
    d = q.shape[-1]
    return F.rms_norm(q, (d,), weight_q, eps) @ F.rms_norm(k, (d,), weight_k, eps).transpose(-2, -1) / math.sqrt(d)


def check_qk_norm_logits(fn) -> CheckReport:
    """Check fn(q, k, weight_q, weight_k, eps) -> RMSNorm(q) RMSNorm(k)^T / sqrt(d_head), normalizing over d_head."""
    report = CheckReport("QK-norm attention logits")
    g = torch.Generator().manual_seed(60)

    def gains(d, dtype=torch.float32):
        return [torch.rand(d, generator=g, dtype=dtype) + 0.5, torch.rand(d, generator=g, dtype=dtype) + 0.5]

    q, k = torch.randn(2, 3, 5, 8, generator=g), torch.randn(2, 3, 5, 8, generator=g)
    cases = [("one head, 4 tokens, d_head 8", [torch.randn(4, 8, generator=g), torch.randn(4, 8, generator=g),
                                               *gains(8)], 1e-6, 1e-5, False),
             ("(batch 2, heads 3, tokens 5, d_head 8)", [q, k, *gains(8)], 1e-6, 1e-5, False),
             ("3 queries, 6 keys", [torch.randn(3, 8, generator=g), torch.randn(6, 8, generator=g), *gains(8)],
              1e-6, 1e-5, False),
             ("q and k scaled by 1000: the logits must not change", [q * 1000, k * 1000, *gains(8)], 1e-6, 1e-4,
              False),
             ("tiny q and k (1e-4), eps = 1e-6 matters", [q * 1e-4, k * 1e-4, *gains(8)], 1e-6, 1e-4, False),
             ("float64", [q.double(), k.double(), *gains(8, torch.float64)], 1e-6, 1e-10, False),
             ("gradients through autograd", [q.double(), k.double(), *gains(8, torch.float64)], 1e-6, 1e-8, True)]
    for name, inputs, eps, tol, grad in cases:
        report.cases.append(run_case(name, lambda a, b, wq, wk, eps=eps: fn(a, b, wq, wk, eps),
                                      lambda a, b, wq, wk, eps=eps: _qk_reference(a, b, wq, wk, eps),
                                      inputs, tol, grad))
    return report

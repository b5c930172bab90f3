"""Notebook 06 (QK-norm and soft-capping): attention maps under scaled queries and keys, the soft-cap curve and its
effect on next-token probabilities, the high-learning-rate training experiment and its rerun panel.

The panels of sections 1 and 2 take the notebook's own `attention_probs` and `softcap_logits`; its checkers are in
course_utils.exercises.
The attention-logit experiment follows Wortsman et al. 2023 (arXiv 2309.14322): a small model, a learning rate raised
until the attention logits grow, with and without QK-norm (Henry et al. 2020, arXiv 2010.04245) and soft-capping
(Gemma 2, arXiv 2408.00118).
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable

import ipywidgets as widgets
import numpy as np
import plotly.graph_objects as go
import torch
from torch import Tensor

from ..figures import PALETTE, color, live_figure, live_subplots, log_axis_values
from ..norms import positive_number
from ..panel import Panel, TrainingDemo, message_html, register_panel
from ..synthetic import copy_task_batch
from ..training import History, seconds_per_step, train_copy_task
from ..transformer import TinyLM, softcap

__all__ = [
    "GEMMA2_ATTN_CAP", "GEMMA2_FINAL_CAP", "RECIPE", "CONDITIONS", "LAB_CONDITIONS",
    "probe_qk", "row_entropy", "softmax_jacobian_norm", "attention_panel", "next_token_logits", "softcap_panel",
    "make_model", "train_with_recipe", "logit_growth_figure", "live_callback", "draw_history", "attention_saturation",
    "qk_gain_bound", "TrainingLab", "training_panel",
]

GEMMA2_ATTN_CAP = 50.0   # Gemma 2, arXiv 2408.00118: attention logits
GEMMA2_FINAL_CAP = 30.0  # ... and final (next-token) logits

# Notebook 06's training recipe, for its runs and the lab's: a small Pre-LN model at a learning rate high enough for
# attention logits to run away.
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


def row_entropy(p: Tensor) -> Tensor:
    """Entropy in nats of each row of a probability matrix (..., n) -> (...); 0 for one-hot, ln n for uniform."""
    return torch.special.entr(p).sum(-1)  # entr(p) = -p ln p, and 0 at p = 0


def softmax_jacobian_norm(p: Tensor) -> Tensor:
    """Frobenius norm of the softmax Jacobian diag(p) - p p^T for each row of p (..., n) -> (...).

    It is what a gradient passes through on its way from the attention weights back to the logits.
    """
    jac = torch.diag_embed(p) - p[..., :, None] * p[..., None, :]
    return jac.flatten(-2).norm(dim=-1)


@register_panel()
def attention_panel(attention_probs: Callable[..., tuple[Tensor, Tensor]], n_tokens: int = 12,
                    d_head: int = 16) -> Panel:
    """Scale queries and keys; the attention map and its entropy, without and with QK-norm, side by side.

    attention_probs(q, k, qk_norm=False, gain=1.0) -> (probs, logits) is notebook 06's.
    """
    q0, k0 = probe_qk(n_tokens, d_head)
    max_entropy = math.log(n_tokens)
    grid = np.logspace(-2, 3, 61)  # the product s_q * s_k, precomputed: moving a slider only marks a point
    plain_curve = [float(row_entropy(attention_probs(s * q0, k0)[0]).mean()) for s in grid]

    heat = live_subplots(1, 2, "Attention weights: each row is one query, its weights over the keys sum to 1",
                         height=380, horizontal_spacing=0.12, subplot_titles=("without QK-norm", "with QK-norm"))
    maps = []  # the attention map without, then with QK-norm
    for col in (1, 2):
        maps.append(heat.add_heatmap(z=np.zeros((n_tokens, n_tokens)), zmin=0.0, zmax=1.0, colorscale="Cividis",
                                     showscale=col == 2, colorbar=dict(title="weight"), row=1, col=col,
                                     hovertemplate="query %{y}, key %{x}: %{z:.3f}<extra></extra>").data[-1])
        heat.update_xaxes(title_text="key position", row=1, col=col)
        heat.update_yaxes(title_text="query position", autorange="reversed", row=1, col=col)

    curve = live_figure("Attention entropy as queries and keys grow", "s_q · s_k (how much q and k are scaled)",
                        "mean entropy per query (nats)", log_x=True, height=360)
    curve.add_scatter(x=grid.tolist(), y=plain_curve, mode="lines", name="without QK-norm",
                      line=dict(color=color(1), width=3))
    normed_line = curve.add_scatter(x=[grid[0], grid[-1]], y=[0, 0], mode="lines", name="with QK-norm (gain γ)",
                                    line=dict(color=color(0), width=3)).data[-1]
    curve.add_scatter(x=[grid[0], grid[-1]], y=[max_entropy] * 2, mode="lines",
                      name=f"uniform attention: ln {n_tokens} = {max_entropy:.2f}",
                      line=dict(color="#999999", dash="dash"))
    here = curve.add_scatter(x=[1.0, 1.0], y=[0, 0], mode="markers", name="you are here",
                             marker=dict(size=12, color=[color(1), color(0)], symbol="circle-open-dot",
                                         line=dict(width=3))).data[-1]
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
        scale_q = positive_number(scale_q, "the query scale s_q")
        scale_k = positive_number(scale_k, "the key scale s_k")
        gain = positive_number(gain, "the QK-norm gain γ")
        q, k = scale_q * q0, scale_k * k0
        p_plain, z_plain = attention_probs(q, k)
        p_norm, z_norm = attention_probs(q, k, qk_norm=True, gain=gain)
        h_plain, h_norm = float(row_entropy(p_plain).mean()), float(row_entropy(p_norm).mean())
        with heat.batch_update():
            maps[0].z = p_plain.numpy()
            maps[1].z = p_norm.numpy()
        with curve.batch_update():
            normed_line.y = [h_norm, h_norm]
            here.update(x=[scale_q * scale_k] * 2, y=[h_plain, h_norm])
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
def next_token_logits(top_logit: float, vocab_size: int = 1000, seed: int = 0) -> Tensor:
    """A fixed, made-up next-token logit vector (vocab_size,), scaled so its largest entry is `top_logit`.

    A few candidate tokens stand out from a Gaussian background, as in a confident language model.
    """
    top_logit = positive_number(top_logit, "the largest logit")
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(vocab_size, generator=g, dtype=torch.float64)
    z[:6] += torch.tensor([7.0, 6.0, 5.5, 4.5, 4.0, 3.5], dtype=torch.float64)
    return z * (top_logit / z.max())


@register_panel()
def softcap_panel(softcap_logits: Callable[[Tensor, float], Tensor], top_k: int = 8) -> Panel:
    """Pick a cap and how large the logits are: the cap curve, and next-token probabilities before and after it.

    softcap_logits(x, cap) -> cap * tanh(x / cap) is notebook 06's.
    """
    xs = torch.linspace(-150.0, 150.0, 301, dtype=torch.float64)
    curve = live_figure("Soft-capping: cap · tanh(x / cap) against the raw logit x", "raw logit x",
                        "logit after the cap", height=400)
    curve.add_scatter(x=xs.tolist(), y=xs.tolist(), mode="lines", name="no cap (identity)",
                      line=dict(color="#999999", dash="dash"))
    for j, (cap, name) in enumerate(((GEMMA2_FINAL_CAP, "Gemma 2 final logits"),
                                     (GEMMA2_ATTN_CAP, "Gemma 2 attention logits"))):
        curve.add_scatter(x=xs.tolist(), y=softcap_logits(xs, cap).tolist(), mode="lines",
                          name=f"{name}: cap {cap:g}", line=dict(color=color(2 + j), width=1.5, dash="dot"))
    your_cap = curve.add_scatter(x=xs.tolist(), mode="lines", name="your cap",
                                 line=dict(color=color(0), width=3)).data[-1]
    top_points = curve.add_scatter(mode="markers", name=f"the example's top {top_k} logits",
                                   marker=dict(color=color(1), size=9, symbol="diamond")).data[-1]
    curve.update_yaxes(range=[-110, 110])

    bars = live_figure(f"Next-token probabilities of the top {top_k} tokens", "token (ranked by raw logit)",
                       "probability", height=360)
    raw_bars = bars.add_bar(name="raw logits", marker_color=color(1)).data[-1]
    capped_bars = bars.add_bar(name="soft-capped logits", marker_color=color(0)).data[-1]
    bars.update_yaxes(range=[0, 1])
    readout = widgets.HTML()
    controls = {
        "cap": widgets.FloatSlider(value=GEMMA2_FINAL_CAP, min=2.0, max=100.0, step=1.0, description="cap"),
        "top_logit": widgets.FloatSlider(value=20.0, min=2.0, max=120.0, step=1.0, description="largest logit"),
    }

    def update(cap, top_logit):
        cap = positive_number(cap, "the cap")
        z = next_token_logits(top_logit)
        capped = softcap_logits(z, cap)
        p, p_cap = z.softmax(-1), capped.softmax(-1)
        order = torch.argsort(z, descending=True)
        top = order[:top_k]
        labels = [f"#{i + 1}" for i in range(top_k)]
        with curve.batch_update():
            your_cap.update(y=softcap_logits(xs, cap).tolist(), name=f"your cap: {cap:g}")
            top_points.update(x=z[top].tolist(), y=capped[top].tolist())
        with bars.batch_update():
            raw_bars.update(x=labels, y=p[top].tolist())
            capped_bars.update(x=labels, y=p_cap[top].tolist())
        same_order = bool(torch.equal(torch.argsort(capped, descending=True), order))
        kl = float((p * (p.clamp_min(1e-300).log() - p_cap.clamp_min(1e-300).log())).sum())
        readout.value = (f"Largest logit {float(z.max()):.1f} → {float(capped.max()):.2f} after the cap; "
                         f"top-1 probability {float(p.max()):.3f} → {float(p_cap.max()):.3f}; "
                         f"KL(raw ‖ capped) = {kl:.3g} nats. Ranking of all {len(z)} tokens unchanged: "
                         f"{'yes' if same_order else 'NO'} (tanh is increasing, so greedy decoding never changes).")

    return Panel(controls, [readout, curve, bars], update,
                 title="Soft-capping: pick a cap and a logit size")


# --------------------------------------------------------------------------------------- 3. training at a high lr
def _check_condition(condition: str) -> str:
    if condition not in LAB_CONDITIONS:
        raise ValueError(f"condition must be one of {tuple(LAB_CONDITIONS)}, got {condition!r}")
    return condition


def make_model(condition: str, seed: int, cap: float = GEMMA2_ATTN_CAP, **recipe) -> TinyLM:
    """The recipe's TinyLM under one of LAB_CONDITIONS (a soft-cap condition uses `cap`)."""
    _check_condition(condition)
    r = {**RECIPE, **recipe}
    options = dict(LAB_CONDITIONS[condition])
    if "attn_softcap" in options:
        options["attn_softcap"] = positive_number(cap, "the cap")
    return TinyLM(r["vocab_size"], d_model=r["d_model"], n_layers=r["n_layers"], n_heads=r["n_heads"],
                  max_len=2 * r["n_tokens"], seed=seed, **options)


def train_with_recipe(model: TinyLM, seed: int, steps: int, lr: float = RECIPE["lr"], callback=None,
                      should_stop=None) -> History:
    """Train `model` on the recipe's copy task (its batch, warmup and AdamW betas, no weight decay) at `lr`."""
    return train_copy_task(model, steps=steps, lr=lr, warmup=RECIPE["warmup"], batch_size=RECIPE["batch_size"],
                           n_tokens=RECIPE["n_tokens"], vocab_size=RECIPE["vocab_size"], seed=seed,
                           betas=RECIPE["betas"], weight_decay=RECIPE["weight_decay"], callback=callback,
                           should_stop=should_stop)


def _run_style(condition: str, seed_index: int) -> dict:
    j = list(LAB_CONDITIONS).index(condition) if condition in LAB_CONDITIONS else 3
    return dict(color=PALETTE[[1, 0, 2, 3][j]], dash=["solid", "dash", "dot", "dashdot"][seed_index % 4])


def logit_growth_figure(runs: list[tuple[str, int]], title: str | None = None) -> go.FigureWidget:
    """Two panels, the largest attention logit (log scale) and the loss per step, one trace per (condition, seed)."""
    fig = live_subplots(1, 2, title or "Training at a high learning rate: attention logits and loss, per step",
                        height=420, horizontal_spacing=0.1,
                        subplot_titles=("largest |attention logit| before any cap", "training loss"))
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


def _run_traces(fig: go.FigureWidget, group: str) -> tuple:
    """The (largest logit, loss) traces of one run of a logit_growth_figure, found by the run's legend group."""
    return tuple(fig.select_traces(selector=dict(legendgroup=group)))


def _draw_run(fig: go.FigureWidget, traces: tuple, history: History) -> None:
    logits = log_axis_values(history.max_logit)
    logit_trace, loss_trace = traces
    with fig.batch_update():
        logit_trace.update(x=history.step, y=logits)
        loss_trace.update(x=history.step, y=history.loss)


def live_callback(fig: go.FigureWidget, run_index: int, every: int = 25):
    """A train_copy_task callback that redraws run `run_index` of a logit_growth_figure every `every` steps."""
    traces = _run_traces(fig, str(run_index))

    def callback(step: int, history: History) -> None:
        if step % every == every - 1:
            _draw_run(fig, traces, history)
    return callback


def draw_history(fig: go.FigureWidget, run_index: int, history: History) -> None:
    """Put a whole History into run `run_index` of a logit_growth_figure."""
    _draw_run(fig, _run_traces(fig, str(run_index)), history)


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
        attn, seen = block.attn, {}
        block(x, record=seen)  # rerun the block on its input to read what its attention saw, whatever the placement
        z, _ = attn.logits(seen["attn_in"])
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


@functools.lru_cache(maxsize=1)
def _recipe_step_seconds() -> float:
    """One training step of the recipe's model on this machine, measured once per kernel."""
    return seconds_per_step(make_model("no QK-norm", 0), batch_size=RECIPE["batch_size"], n_tokens=RECIPE["n_tokens"],
                            vocab_size=RECIPE["vocab_size"])


class TrainingLab(TrainingDemo):
    """The rerun panel: pick a condition, learning rate, cap, steps and seed, press Train; each run adds a trace.

    The lab is a Panel over its controls: changing one checks the settings (what the benchmark times); training runs
    through a BackgroundRun with progress and Stop, or synchronously with run(background=False). `runs` keeps every
    run drawn (its settings, history and model), `.result` the last.
    """

    MAX_RUNS = 8

    def __init__(self):
        self.fig = logit_growth_figure([], title="Your runs: largest attention logit and loss per step")
        self.clear_button = widgets.Button(description="Clear runs", icon="trash")
        self.runs: list[dict] = []
        self._traces: list[tuple] = []  # each drawn run's (logit, loss) traces; a failed run keeps its empty ones
        self._step_s = _recipe_step_seconds()
        controls = {
            "condition": widgets.Dropdown(options=list(LAB_CONDITIONS), value="no QK-norm", description="condition"),
            "lr": widgets.FloatLogSlider(value=RECIPE["lr"], base=10, min=-3, max=-0.5, step=0.25,
                                         description="learning rate"),
            "cap": widgets.FloatSlider(value=GEMMA2_ATTN_CAP, min=1.0, max=100.0, step=1.0, description="cap"),
            "steps": widgets.IntSlider(value=100, min=20, max=600, step=20, description="steps"),
            "seed": widgets.IntSlider(value=0, min=0, max=20, description="seed"),
        }
        super().__init__(controls, [self.fig], buttons=[self.clear_button],
                         title="Your own run: change one thing at a time")
        self.clear_button.on_click(lambda _b: self.clear())

    def settings(self, condition, lr, cap, steps, seed) -> dict:
        _check_condition(condition)
        lr = positive_number(lr, "the learning rate")
        if lr > 1.0:
            raise ValueError(f"a learning rate of {lr:g} is beyond what AdamW can use here: pick at most 1")
        cap = positive_number(cap, "the cap")
        if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or not 1 <= steps <= 5000:
            raise ValueError(f"steps must be a whole number from 1 to 5000, got {steps!r}")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be a whole number >= 0, got {seed!r}")
        return dict(condition=condition, lr=lr, cap=cap, steps=int(steps), seed=int(seed))

    def describe(self, settings: dict) -> str:
        condition, steps = settings["condition"], settings["steps"]
        cap_note = "" if "attn_softcap" in LAB_CONDITIONS[condition] else " (the cap only matters for the soft-cap run)"
        return (f"{condition}, lr {settings['lr']:.3g}, {steps} steps, seed {settings['seed']}{cap_note}: about "
                f"{steps * self._step_s:.0f} s on this machine. Press Train.")

    def clear(self) -> None:
        """Remove every run's traces (not while one is training)."""
        if self.runner.running:
            self.message.value = message_html("A run is going: press Stop first.")
            return
        self._forget_runs()

    def _forget_runs(self) -> None:
        self.runs.clear()
        self._traces.clear()
        self.result = None
        self.fig.data = ()

    def _add_run(self, settings: dict) -> tuple:
        """Two empty traces for a new run, styled by its condition and its place among the runs drawn."""
        capped = "attn_softcap" in LAB_CONDITIONS[settings["condition"]]
        label = settings["condition"] + (f" at {settings['cap']:g}" if capped else "") + f", lr {settings['lr']:.3g}"
        group = str(len(self._traces))
        style = _run_style(settings["condition"], len(self._traces))
        for col in (1, 2):
            self.fig.add_scatter(mode="lines", name=f"{label}, seed {settings['seed']}", legendgroup=group,
                                 showlegend=col == 1, line=dict(color=style["color"], dash=style["dash"]),
                                 row=1, col=col)
        self._traces.append(_run_traces(self.fig, group))
        return self._traces[-1]

    def train(self, settings: dict, should_stop, progress) -> dict:
        if len(self._traces) >= self.MAX_RUNS:
            self._forget_runs()
        traces = self._add_run(settings)
        model = make_model(settings["condition"], settings["seed"], settings["cap"])
        steps = settings["steps"]

        def callback(step, h):
            progress(step + 1, steps, f"step {step + 1}/{steps}, loss {h.loss[-1]:.3f}, "
                                      f"largest logit {h.max_logit[-1]:.3g}")
            if step % 20 == 19:
                _draw_run(self.fig, traces, h)
        history = train_with_recipe(model, settings["seed"], steps, settings["lr"], callback, should_stop)
        _draw_run(self.fig, traces, history)
        self.runs.append({**settings, "history": history, "model": model})
        return self.runs[-1]


@register_panel()
def training_panel() -> TrainingLab:
    """The rerun panel's controls (the benchmark times the settings check; training starts only on Train)."""
    return TrainingLab()

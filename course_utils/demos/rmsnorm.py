"""Notebook 05's widgets and figures: LayerNorm and RMSNorm side by side, the speed benchmark's charts, and the same
tiny language model trained with each norm.

The RMSNorm the learner reads is written in the notebook; the benchmark lives in course_utils.normbench.
"""
from __future__ import annotations

import math
import warnings

import ipywidgets as widgets
import plotly.graph_objects as go
import torch

from ..figures import PALETTE, color, live_figure
from ..normbench import CHAPTER_SAVING, PAPER_SAVING, BenchResult
from ..panel import BackgroundRun, Panel, message_html, register_panel
from ..training import History, train_copy_task
from ..transformer import TinyLM
from .layernorm import parse_features

__all__ = ["ln_vs_rms_panel", "bandwidth_figure", "saving_figure", "QUALITY", "train_both", "QualityDemo"]


@register_panel("05_rmsnorm")
def ln_vs_rms_panel() -> Panel:
    """Edit one token, scale it by a and shift it by b: LayerNorm's output ignores both, RMSNorm's ignores only a."""
    fig = live_figure("One token through LayerNorm and RMSNorm (γ = 1, β = 0)", "feature k", "value (unitless)",
                      height=360)
    fig.add_bar(name="input a·x + b", marker_color=color(0))
    fig.add_bar(name="LayerNorm", marker_color=color(1))
    fig.add_bar(name="RMSNorm", marker_color=color(2))
    fig.update_layout(bargap=0.2)
    readout = widgets.HTML()
    shown: dict = {}
    slider = dict(continuous_update=True, style={"description_width": "initial"})
    controls = {
        "features": widgets.Text(value="3, 4", description="features x =", continuous_update=True,
                                 style={"description_width": "initial"}),
        "scale": widgets.FloatSlider(value=1.0, min=0.1, max=5.0, step=0.1, description="scale a", **slider),
        "shift": widgets.FloatSlider(value=0.0, min=-10.0, max=10.0, step=0.5, description="shift b", **slider),
    }

    def update(features: str, scale: float, shift: float) -> None:
        raw = parse_features(features)
        if scale <= 0:
            raise ValueError(f"Use a scale a > 0 (got {scale}): a negative a flips both outputs' signs.")
        d = len(raw)
        x = torch.tensor(raw, dtype=torch.float64) * scale + shift
        ln = torch.nn.functional.layer_norm(x, (d,), eps=1e-5)
        rms = torch.nn.functional.rms_norm(x, (d,), eps=1e-5)
        reach = 5.0 * max(abs(v) for v in raw) + 10.0
        with fig.batch_update():
            if shown.get("d") != d:
                fig.data[0].x = fig.data[1].x = fig.data[2].x = list(range(1, d + 1))
                shown["d"] = d
            if shown.get("reach") != reach:
                fig.layout.yaxis.range = [-reach, reach]
                shown["reach"] = reach
            fig.data[0].y, fig.data[1].y, fig.data[2].y = x.tolist(), ln.tolist(), rms.tolist()
        mu, var = float(x.mean()), float(x.var(unbiased=False))
        rms_x = math.sqrt(float((x * x).mean()))
        note = ""
        if abs(mu) > 3 * math.sqrt(var):
            note = ("<br><i>|μ| is several σ: RMS² = σ² + μ² is mostly μ², so RMSNorm squashes every feature towards "
                    "the same value and the pattern between them almost disappears. LayerNorm removes μ first.</i>")
        readout.value = (f"μ = {mu:.4g} &nbsp; σ = {math.sqrt(var):.4g} &nbsp; RMS = {rms_x:.4g} &nbsp; "
                         f"(RMS² = σ² + μ² = {var + mu * mu:.4g})" + note)

    return Panel(controls, [readout, fig], update, title="Scale and shift one token: which norm notices?")


def _width_labels(result: BenchResult) -> list[str]:
    return [f"d={d} ({result.elements // d} rows)" for d in result.widths]


def bandwidth_figure(result: BenchResult) -> go.Figure:
    """Achieved GB/s of every variant at every width, the copy first: the bandwidth limit a norm works under."""
    fig = live_figure(f"Achieved bandwidth, {result.elements:,} float32 values in and out ({result.clock})",
                      "tensor shape (rows × d = same number of values)", "GB/s (bytes read + written per second)",
                      height=420, widget=False)
    labels = _width_labels(result)
    for i, v in enumerate(result.variants):
        if not result.has(v):
            continue
        fig.add_bar(x=labels, y=[result.gbps(v, d) for d in result.widths], name=v, marker_color=color(i),
                    marker_pattern_shape="/" if "by hand" in v else ("x" if "no γ" in v else ""))
    fig.update_layout(barmode="group", legend=dict(orientation="h", y=-0.3))
    return fig


def saving_figure(result: BenchResult) -> go.Figure:
    """Time saved by RMSNorm (median and interquartile range over repeats) for each comparison, beside the paper's
    GPU range and the chapter's 10-40%."""
    fig = live_figure("Time saved by RMSNorm over LayerNorm, 1 − t_RMS / t_LN", "tensor shape",
                      "time saved by RMSNorm (%)", height=420, widget=False)
    labels = _width_labels(result)
    fig.add_hrect(y0=100 * PAPER_SAVING[0], y1=100 * PAPER_SAVING[1], fillcolor=color(4), opacity=0.18,
                  line_width=0, annotation_text="Zhang & Sennrich 2019, GPU: 6.9-40.8%",
                  annotation_position="top left")
    fig.add_hline(y=100 * CHAPTER_SAVING[0], line_dash="dot", line_color=color(7),
                  annotation_text="chapter: 10-40%", annotation_position="bottom right")
    fig.add_hline(y=100 * CHAPTER_SAVING[1], line_dash="dot", line_color=color(7))
    fig.add_hline(y=0, line_color="#888", line_width=1)
    for i, (label, ln, rms, why) in enumerate(result.pairs()):
        q = [result.saving(ln, rms, d) for d in result.widths]
        fig.add_scatter(x=labels, y=[100 * m for _, m, _ in q], mode="markers+lines", name=f"{label} ({why})",
                        marker=dict(size=10, color=color(i)), line=dict(color=color(i), dash="dot"),
                        error_y=dict(type="data", symmetric=False, array=[100 * (hi - m) for _, m, hi in q],
                                     arrayminus=[100 * (m - lo) for lo, m, _ in q]))
    fig.update_layout(legend=dict(orientation="v", y=-0.3))
    return fig


# The quality run: a 1-layer TinyLM on the copy task; it learns the task in 160 steps, about 1.5 s of CPU per run.
QUALITY = dict(vocab_size=16, d_model=32, n_layers=1, n_heads=4, n_tokens=8, steps=160, lr=1e-2)


def train_both(seed: int = 0, steps: int = QUALITY["steps"], lr: float = QUALITY["lr"], callback=None,
               should_stop=None) -> dict[str, History]:
    """Train the same TinyLM (same initial weights, same batches) once with LayerNorm and once with RMSNorm.

    callback(norm, step, history) runs after every step; returns {"layer": History, "rms": History}.
    """
    histories = {}
    for norm in ("layer", "rms"):
        model = TinyLM(QUALITY["vocab_size"], d_model=QUALITY["d_model"], n_layers=QUALITY["n_layers"],
                       n_heads=QUALITY["n_heads"], norm=norm, seed=seed)
        hook = None if callback is None else (lambda step, h, norm=norm: callback(norm, step, h))
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Converting a tensor with requires_grad=True")
            histories[norm] = train_copy_task(model, steps=steps, lr=lr, n_tokens=QUALITY["n_tokens"],
                                              vocab_size=QUALITY["vocab_size"], seed=seed, callback=hook,
                                              should_stop=should_stop)
        if histories[norm].stopped:
            break
    return histories


class QualityDemo:
    """Seed, learning rate and steps; a Train button runs LayerNorm then RMSNorm in the background, drawing both loss
    curves live. `run(background=False)` trains in the calling thread (what the notebook's test run does)."""

    NAMES = {"layer": "LayerNorm", "rms": "RMSNorm"}

    def __init__(self):
        self.figure = live_figure("The same tiny LM trained with each norm (copy task)", "training step",
                                  "cross-entropy loss on the copied tokens (nats)", height=380)
        chance = math.log(QUALITY["vocab_size"] - 1)
        self.figure.add_scatter(name="chance: ln 15", x=[0, QUALITY["steps"]], y=[chance, chance], mode="lines",
                                line=dict(color=color(7), dash="dot"))
        for i, norm in enumerate(self.NAMES):
            self.figure.add_scatter(name=self.NAMES[norm], x=[], y=[], mode="lines", line=dict(color=PALETTE[i + 1]))
        style = {"description_width": "initial"}
        self.seed = widgets.IntSlider(value=0, min=0, max=9, description="seed", style=style)
        self.lr = widgets.FloatLogSlider(value=QUALITY["lr"], base=10, min=-3, max=math.log10(3e-2), step=0.1,
                                         description="learning rate", readout_format=".1e", style=style)
        self.steps = widgets.IntSlider(value=QUALITY["steps"], min=50, max=600, step=50, description="steps",
                                       style=style)
        self.button = widgets.Button(description="Train both", icon="play", button_style="primary")
        self.runner = BackgroundRun("training")
        self.summary = widgets.HTML()
        self.histories: dict[str, History] = {}
        self.button.on_click(lambda _b: self.run(background=True))
        self.widget = widgets.VBox([widgets.HBox([self.seed, self.lr, self.steps, self.button]), self.runner.widget,
                                    self.summary, self.figure])

    def _draw(self, norm: str, history: History) -> None:
        trace = self.figure.data[1 + list(self.NAMES).index(norm)]
        with self.figure.batch_update():
            trace.x, trace.y = history.step, history.loss

    def run(self, background: bool = True) -> dict[str, History]:
        """Train both models with the current controls; returns the histories (empty until a background run ends)."""
        if self.runner.running:  # keep the curves being drawn; say why nothing starts
            self.runner.status.value = message_html("A run is already going: press Stop first.")
            return {}
        seed, lr, steps = self.seed.value, self.lr.value, self.steps.value
        self.histories = {}
        with self.figure.batch_update():
            for trace in self.figure.data[1:]:
                trace.x, trace.y = [], []
            self.figure.data[0].x = [0, steps]

        def job(should_stop, progress):
            def callback(norm, step, history):
                done = step + 1 + (steps if norm == "rms" else 0)
                if step % 10 == 9 or step == steps - 1:
                    self._draw(norm, history)
                    progress(done, 2 * steps, f"{self.NAMES[norm]}: step {step + 1}, loss {history.loss[-1]:.3f}")
            return train_both(seed, steps, lr, callback, should_stop)

        def done(histories):
            self.histories = histories
            for norm, h in histories.items():
                self._draw(norm, h)
            self.summary.value = " &nbsp;|&nbsp; ".join(
                f"{self.NAMES[n]}: final loss {h.final('loss'):.3f}, accuracy {h.final('accuracy'):.3f}"
                for n, h in histories.items())

        self.runner.start(job, done, background=background)
        return self.histories

    def _ipython_display_(self):
        from IPython.display import display
        display(self.widget)

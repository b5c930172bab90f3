"""Notebook 05's widgets and figures: LayerNorm and RMSNorm side by side, the speed benchmark's charts, and the same
tiny language model trained with each norm.

The RMSNorm the learner reads is written in the notebook; the benchmark lives in course_utils.normbench.
"""
from __future__ import annotations

import math

import ipywidgets as widgets
import plotly.graph_objects as go
import torch

from ..figures import PALETTE, color, live_figure, static_figure
from ..normbench import CHAPTER_SAVING, PAPER_SAVING, BenchResult
from ..panel import Panel, TrainingDemo, parse_features, register_panel
from ..training import History, train_copy_task
from ..transformer import TinyLM

__all__ = ["ln_vs_rms_panel", "bandwidth_figure", "saving_figure", "QUALITY", "train_both", "QualityDemo",
           "quality_demo"]


@register_panel()
def ln_vs_rms_panel() -> Panel:
    """Edit one token, scale it by a and shift it by b: LayerNorm's output ignores both, RMSNorm's ignores only a."""
    fig = live_figure("One token through LayerNorm and RMSNorm (γ = 1, β = 0)", "feature k", "value (unitless)",
                      height=360)
    input_bars = fig.add_bar(name="input a·x + b", marker_color=color(0)).data[-1]
    ln_bars = fig.add_bar(name="LayerNorm", marker_color=color(1)).data[-1]
    rms_bars = fig.add_bar(name="RMSNorm", marker_color=color(2)).data[-1]
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
                input_bars.x = ln_bars.x = rms_bars.x = list(range(1, d + 1))
                shown["d"] = d
            if shown.get("reach") != reach:
                fig.layout.yaxis.range = [-reach, reach]
                shown["reach"] = reach
            input_bars.y, ln_bars.y, rms_bars.y = x.tolist(), ln.tolist(), rms.tolist()
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
    fig = static_figure(f"Achieved bandwidth, {result.elements:,} float32 values in and out ({result.clock})",
                        "tensor shape (rows × d = same number of values)", "GB/s (bytes read + written per second)",
                        height=420, legend=dict(y=-0.3))
    labels = _width_labels(result)
    for i, v in enumerate(result.variants):
        if not result.has(v):
            continue
        fig.add_bar(x=labels, y=[result.gbps(v, d) for d in result.widths], name=v, marker_color=color(i),
                    marker_pattern_shape="/" if "by hand" in v else ("x" if "no γ" in v else ""))
    fig.update_layout(barmode="group")
    return fig


def _percent_range(saving: tuple[float, float], decimals: int) -> str:
    """(0.069, 0.408) -> '6.9-40.8%'."""
    return f"{100 * saving[0]:.{decimals}f}-{100 * saving[1]:.{decimals}f}%"


def saving_figure(result: BenchResult) -> go.Figure:
    """Time saved by RMSNorm (median and interquartile range over repeats) for each comparison, beside the paper's
    GPU range and the chapter's (normbench.PAPER_SAVING, CHAPTER_SAVING)."""
    fig = static_figure("Time saved by RMSNorm over LayerNorm, 1 − t_RMS / t_LN", "tensor shape",
                        "time saved by RMSNorm (%)", height=420, legend=dict(orientation="v", y=-0.3))
    labels = _width_labels(result)
    fig.add_hrect(y0=100 * PAPER_SAVING[0], y1=100 * PAPER_SAVING[1], fillcolor=color(4), opacity=0.18,
                  line_width=0, annotation_text=f"Zhang & Sennrich 2019, GPU: {_percent_range(PAPER_SAVING, 1)}",
                  annotation_position="top left")
    fig.add_hline(y=100 * CHAPTER_SAVING[0], line_dash="dot", line_color=color(7),
                  annotation_text=f"chapter: {_percent_range(CHAPTER_SAVING, 0)}", annotation_position="bottom right")
    fig.add_hline(y=100 * CHAPTER_SAVING[1], line_dash="dot", line_color=color(7))
    fig.add_hline(y=0, line_color="#888", line_width=1)
    for i, (label, ln, rms, why) in enumerate(result.pairs()):
        q = [result.saving(ln, rms, d) for d in result.widths]
        fig.add_scatter(x=labels, y=[100 * m for _, m, _ in q], mode="markers+lines", name=f"{label} ({why})",
                        marker=dict(size=10, color=color(i)), line=dict(color=color(i), dash="dot"),
                        error_y=dict(type="data", symmetric=False, array=[100 * (hi - m) for _, m, hi in q],
                                     arrayminus=[100 * (m - lo) for lo, m, _ in q]))
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
        histories[norm] = train_copy_task(model, steps=steps, lr=lr, n_tokens=QUALITY["n_tokens"],
                                          vocab_size=QUALITY["vocab_size"], seed=seed, callback=hook,
                                          should_stop=should_stop)
        if histories[norm].stopped:
            break
    return histories


class QualityDemo(TrainingDemo):
    """Seed, learning rate and steps; a Train button runs LayerNorm then RMSNorm in the background, drawing both loss
    curves live. `run(background=False)` trains in the calling thread (what the notebook's test run does); a run's
    result is train_both's History of each norm."""

    NAMES = {"layer": "LayerNorm", "rms": "RMSNorm"}

    def __init__(self):
        self.figure = live_figure("The same tiny LM trained with each norm (copy task)", "training step",
                                  "cross-entropy loss on the copied tokens (nats)", height=380)
        chance = math.log(QUALITY["vocab_size"] - 1)
        self._chance = self.figure.add_scatter(name=f"chance: ln {QUALITY['vocab_size'] - 1}", x=[0, QUALITY["steps"]],
                                               y=[chance, chance], mode="lines",
                                               line=dict(color=color(7), dash="dot")).data[-1]
        self._curves = {norm: self.figure.add_scatter(name=name, x=[], y=[], mode="lines",
                                                      line=dict(color=PALETTE[i + 1])).data[-1]
                        for i, (norm, name) in enumerate(self.NAMES.items())}
        style = {"description_width": "initial"}
        self.seed = widgets.IntSlider(value=0, min=0, max=9, description="seed", style=style)
        self.lr = widgets.FloatLogSlider(value=QUALITY["lr"], base=10, min=-3, max=math.log10(3e-2), step=0.1,
                                         description="learning rate", readout_format=".1e", style=style)
        self.steps = widgets.IntSlider(value=QUALITY["steps"], min=50, max=600, step=50, description="steps",
                                       style=style)
        super().__init__({"seed": self.seed, "lr": self.lr, "steps": self.steps}, [self.figure], button="Train both")

    def _draw(self, norm: str, history: History) -> None:
        with self.figure.batch_update():
            self._curves[norm].x, self._curves[norm].y = history.step, history.loss

    def train(self, settings: dict, should_stop, progress) -> dict[str, History]:
        seed, lr, steps = settings["seed"], settings["lr"], settings["steps"]
        with self.figure.batch_update():
            for curve in self._curves.values():
                curve.x, curve.y = [], []
            self._chance.x = [0, steps]

        def callback(norm, step, history):
            done = step + 1 + (steps if norm == "rms" else 0)
            if step % 10 == 9 or step == steps - 1:
                self._draw(norm, history)
                progress(done, 2 * steps, f"{self.NAMES[norm]}: step {step + 1}, loss {history.loss[-1]:.3f}")
        histories = train_both(seed, steps, lr, callback, should_stop)
        for norm, h in histories.items():
            self._draw(norm, h)
        return histories

    def summarize(self, histories: dict[str, History]) -> str:
        return " &nbsp;|&nbsp; ".join(
            f"{self.NAMES[n]}: final loss {h.final('loss'):.3f}, accuracy {h.final('accuracy'):.3f}"
            for n, h in histories.items())


@register_panel()
def quality_demo() -> QualityDemo:
    """The quality run of notebook 05: the same tiny LM trained with LayerNorm and with RMSNorm."""
    return QualityDemo()

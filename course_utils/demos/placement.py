"""Notebook 04 (Pre-LN vs Post-LN): the placement diagram, measurements at initialization, the training race, and
the panels that show them. The lesson's own code (the update rules, the measurement, the assertions) is in the
notebook; this module holds the wiring, and the init panel takes the notebook's `measure_at_init`.
"""
from __future__ import annotations

import functools
import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import ipywidgets as widgets
import numpy as np
import plotly.graph_objects as go
import torch

from ..figures import color, live_figure, static_figure
from ..norms import positive_number
from ..panel import Panel, TrainingDemo, register_panel
from ..training import History, seconds_per_step, train_copy_task
from ..transformer import TinyLM

__all__ = ["MODEL", "TASK", "POS_STD", "INIT_DEPTHS", "build_model", "relative_updates", "init_measurements",
           "init_panel", "placement_diagram", "RunConfig", "RACE", "NO_FINAL_NORM", "verdict",
           "RaceResult", "race_figure", "run_race", "RacePanel", "race_panel"]

MODEL = dict(d_model=64, n_heads=4)
TASK = dict(n_tokens=8, vocab_size=16)
# Copying is attention by position; with TinyLM's N(0, 0.1²) position embeddings it takes hundreds of steps to
# start, with N(0, 1) a few dozen, which is what lets the race run in seconds.
POS_STD = 1.0
INIT_DEPTHS = (3, 6, 12, 24)
PLACEMENT_COLOR = {"Post-LN": color(1), "Pre-LN": color(0)}
RACE_DEFAULTS = dict(n_layers=4, lr=1e-2, warmup=50, steps=100, seeds=3)


def build_model(n_layers: int, placement: str, seed: int, final_norm: bool | None = None) -> TinyLM:
    """The course's TinyLM at notebook 04's size (d_model 64, 4 heads) for the copy task, with N(0, POS_STD²)
    position embeddings; the same seed gives the same weights for both placements."""
    model = TinyLM(TASK["vocab_size"], n_layers=n_layers, placement=placement, final_norm=final_norm,
                   max_len=2 * TASK["n_tokens"], seed=seed, **MODEL)
    with torch.no_grad():
        model.pos_emb.weight.normal_(0.0, POS_STD, generator=torch.Generator().manual_seed(10_000 + seed))
    return model


def relative_updates(hidden: Sequence[torch.Tensor]) -> list[float]:
    """How much each block changes the stream: mean over tokens of |x_{l+1} - x_l| / |x_l|, one value per block."""
    return [float(((b - a).norm(dim=-1) / a.norm(dim=-1)).mean()) for a, b in zip(hidden[:-1], hidden[1:])]


def init_measurements(measure_at_init: Callable[[int, str, int], dict], depths: Sequence[int] = INIT_DEPTHS,
                      inits: int = 3) -> dict[tuple[int, str], dict]:
    """Run measure_at_init(depth, placement, seed) for every depth, both placements and `inits` seeds; arrays of
    shape (inits, values)."""
    data = {}
    for depth in depths:
        for placement in ("post", "pre"):
            runs = [measure_at_init(depth, placement, seed) for seed in range(inits)]
            data[depth, placement] = {key: np.array([r[key] for r in runs]) for key in runs[0]}
    return data


_INIT_PLOTS = (("grad", "Gradient norm of the FFN weights at initialization", "layer l (1 = nearest the input)",
                "|dLoss/dW|, Frobenius norm"),
               ("rms", "Size of the residual stream", "after block l (0 = embeddings)", "RMS of x_l = |x_l| / sqrt(d)"),
               ("update", "How much each block changes the stream", "block l",
                "|x_l - x_(l-1)| / |x_(l-1)|, mean over tokens"))


@register_panel()
def init_panel(measure_at_init: Callable[[int, str, int], dict], depths: Sequence[int] = INIT_DEPTHS,
               inits: int = 3) -> Panel:
    """Depth slider -> three live figures (FFN gradient norms, stream size, relative update per layer), Post-LN
    against Pre-LN, averaged over `inits` initializations. Everything is measured here, when the panel is built, by
    notebook 04's measure_at_init(n_layers, placement, seed), so moving a control only redraws. The measurements
    are kept as `panel.data[(depth, placement)]`."""
    data = init_measurements(measure_at_init, depths, inits)
    fits = {}  # depth -> the least-squares line through Pre-LN's mean RMS², a + c·l
    for depth in depths:
        squared = data[depth, "pre"]["rms"].mean(0) ** 2
        fits[depth] = np.polyfit(np.arange(len(squared)), squared, 1)
    figures = {key: live_figure(title, x, y, height=340, width=None if key == "grad" else 480)
               for key, title, x, y in _INIT_PLOTS}
    for key in ("rms", "update"):  # narrow figures: keep the toolbar off the title
        figures[key].update_layout(modebar=dict(orientation="v"))
    lines = {(plot, placement): fig.add_scatter(x=[], y=[], mode="lines+markers", name=name,
                                                line=dict(color=PLACEMENT_COLOR[name])).data[-1]
             for plot, fig in figures.items() for placement, name in (("post", "Post-LN"), ("pre", "Pre-LN"))}
    fit_trace = figures["rms"].add_scatter(x=[], y=[], mode="lines", name="fit to Pre-LN",
                                           line=dict(color=color(7), dash="dot")).data[-1]

    def update(depth: int, weight: str, spread: bool) -> None:
        if (depth, "post") not in data:
            raise ValueError(f"depth {depth} was not measured; pick one of {sorted({d for d, _ in data})}")
        key = {"W1 (linear1)": "W1", "W2 (linear2)": "W2"}.get(weight, weight)
        if key not in ("W1", "W2"):
            raise ValueError(f"weight must be 'W1 (linear1)' or 'W2 (linear2)', got {weight!r}")
        for plot, fig in figures.items():
            with fig.batch_update():
                for placement in ("post", "pre"):
                    trace = lines[plot, placement]
                    values = data[depth, placement][key if plot == "grad" else plot]
                    start = 0 if plot == "rms" else 1
                    trace.x = list(range(start, start + values.shape[1]))
                    trace.y = values.mean(0).tolist()
                    trace.error_y = (dict(type="data", array=values.std(0).tolist(), visible=True) if spread
                                     else dict(visible=False))
                if plot == "grad":
                    fig.layout.title.text = (f"Gradient norm of each layer's FFN {key} at initialization, depth "
                                             f"{depth} (mean of {inits} inits)")
                if plot == "rms":
                    slope, intercept = fits[depth]
                    layers = np.arange(depth + 1)
                    fit_trace.x = layers.tolist()
                    fit_trace.y = np.sqrt(np.maximum(intercept + slope * layers, 0)).tolist()
                    fit_trace.name = f"sqrt({intercept:.2f} + {slope:.2f}·l), fit to Pre-LN"

    controls = {"depth": widgets.SelectionSlider(options=list(depths), value=depths[len(depths) // 2],
                                                 description="depth L"),
                "weight": widgets.ToggleButtons(options=["W2 (linear2)", "W1 (linear1)"], description="FFN weight"),
                "spread": widgets.Checkbox(value=False, description="show spread over inits (±1 std)")}
    outputs = [figures["grad"], widgets.HBox([figures["rms"], figures["update"]])]
    panel = Panel(controls, outputs, update, title="Post-LN vs Pre-LN at initialization")
    panel.data, panel.figures = data, figures
    return panel


def placement_diagram() -> go.Figure:
    """Where the norm sits: Post-LN has LN on the residual path itself, Pre-LN on the branch into the sublayer."""
    norm_fill, box_fill, main, side = color(4), "#DCEBF7", color(0), "#555"
    shapes, notes = [], []

    def text(x, y, label, size=15, **extra):
        notes.append(dict(x=x, y=y, text=label, showarrow=False, font=dict(size=size, **extra)))

    def box(x, y, label, fill):
        shapes.append(dict(type="rect", x0=x - 0.9, x1=x + 0.9, y0=y - 0.45, y1=y + 0.45, fillcolor=fill,
                           line=dict(color="#333")))
        text(x, y, label, 14)

    def plus(x, y):
        shapes.append(dict(type="circle", x0=x - 0.25, x1=x + 0.25, y0=y - 0.25, y1=y + 0.25, fillcolor="white",
                           line=dict(color="#333")))
        text(x, y, "+", 18)

    def line(x0, y0, x1, y1, on_path=False, head=False):
        if head:
            notes.append(dict(x=x1, y=y1, ax=x0, ay=y0, xref="x", yref="y", axref="x", ayref="y", text="",
                              showarrow=True, arrowhead=2, arrowsize=0.8 if on_path else 1.1,
                              arrowwidth=4 if on_path else 1.8,
                              arrowcolor=main if on_path else side))
        else:
            shapes.append(dict(type="line", x0=x0, y0=y0, x1=x1, y1=y1,
                               line=dict(color=main if on_path else side, width=4 if on_path else 1.8)))

    # Post-LN: x -> (+) -> LN -> x_{l+1}; the branch x -> sublayer -> (+).
    m, b = 1.5, 3.6
    line(m, 0.4, m, 3.25, on_path=True)
    plus(m, 3.5)
    line(m, 3.75, m, 4.35, on_path=True, head=True)
    box(m, 4.8, "<b>LN</b>", norm_fill)
    line(m, 5.25, m, 6.0, on_path=True, head=True)
    line(m, 1.0, b, 1.0)
    line(b, 1.0, b, 1.95, head=True)
    box(b, 2.4, "sublayer F", box_fill)
    line(b, 2.85, b, 3.5)
    line(b, 3.5, m + 0.25, 3.5, head=True)
    # Pre-LN: x -> (+) -> x_{l+1}; the branch x -> LN -> sublayer -> (+).
    m2, b2 = 6.0, 8.1
    line(m2, 0.4, m2, 4.45, on_path=True)
    plus(m2, 4.7)
    line(m2, 4.95, m2, 6.0, on_path=True, head=True)
    line(m2, 1.0, b2, 1.0)
    line(b2, 1.0, b2, 1.35, head=True)
    box(b2, 1.8, "<b>LN</b>", norm_fill)
    line(b2, 2.25, b2, 2.85, head=True)
    box(b2, 3.3, "sublayer F", box_fill)
    line(b2, 3.75, b2, 4.7)
    line(b2, 4.7, m2 + 0.25, 4.7, head=True)
    for x, name, rule, where in [(m, "Post-LN", "x<sub>l+1</sub> = LN(x<sub>l</sub> + F(x<sub>l</sub>))",
                                  "the norm sits ON the residual path"),
                                 (m2, "Pre-LN", "x<sub>l+1</sub> = x<sub>l</sub> + F(LN(x<sub>l</sub>))",
                                  "the norm sits on the branch; the path is a plain sum")]:
        text(x + 1.0, 7.4, f"<b>{name}</b>: {rule}")
        text(x + 1.0, 6.95, where, 13, color="#555")
        text(x, 0.15, "x<sub>l</sub>")
        text(x, 6.3, "x<sub>l+1</sub>")
    fig = static_figure("Where the norm sits on the residual path (F = attention or feed-forward)", "", "",
                        height=460)
    # Legend entries for what the colours mean (shapes have no legend of their own).
    fig.add_scatter(x=[None], y=[None], mode="lines", line=dict(color=main, width=4), name="residual path")
    fig.add_scatter(x=[None], y=[None], mode="markers", marker=dict(symbol="square", size=14, color=norm_fill),
                    name="normalization (LN)")
    fig.update_layout(shapes=shapes, annotations=notes)
    fig.update_xaxes(range=[0, 10], visible=False)
    fig.update_yaxes(range=[-0.2, 7.7], visible=False)
    return fig


@dataclass(frozen=True)
class RunConfig:
    """One line of the race: a label, the norm's placement, whether it gets the warmup, and the final norm."""
    label: str
    placement: str
    warmup: bool = False
    final_norm: bool | None = None


RACE = (RunConfig("Post-LN, no warmup", "post"), RunConfig("Post-LN + warmup", "post", warmup=True),
        RunConfig("Pre-LN, no warmup", "pre"))
NO_FINAL_NORM = (RunConfig("Pre-LN, no final norm", "pre", final_norm=False),)
RACE_COLOR = {"Post-LN, no warmup": color(1), "Post-LN + warmup": color(3), "Pre-LN, no warmup": color(0),
              "Pre-LN, no final norm": color(2)}


def verdict(history: History, vocab_size: int = TASK["vocab_size"]) -> str:
    """'learned' (accuracy over the last 20 steps >= 0.8), 'stuck at chance' (loss within 5% of ln(vocab - 1), the
    loss of a uniform guess over the payload tokens) or 'partial'."""
    if history.final("accuracy") >= 0.8:
        return "learned"
    if history.final("loss") >= 0.95 * math.log(vocab_size - 1):
        return "stuck at chance"
    return "partial"


@dataclass(repr=False)
class RaceResult:
    """Histories and trained models of a race, by config label, one entry per seed."""
    settings: dict
    histories: dict[str, list[History]] = field(default_factory=dict)
    models: dict[str, list[TinyLM]] = field(default_factory=dict)
    stopped: bool = False

    def __repr__(self) -> str:
        runs = "; ".join(f"{label}: {', '.join(verdict(h) for h in hs)}" for label, hs in self.histories.items())
        return f"RaceResult({self.settings}{', stopped' if self.stopped else ''}; {runs})"

    def verdicts(self) -> dict[str, list[str]]:
        """verdict() of every finished run, by label."""
        return {label: [verdict(h) for h in hs if not h.stopped] for label, hs in self.histories.items()}

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td>{html.escape(label)}</td>"
            + "".join(f"<td>{h.final('loss'):.3f} / {h.final('accuracy'):.2f} ({verdict(h)}"
                      f"{', stopped' if h.stopped else ''})</td>" for h in hs) + "</tr>"
            for label, hs in self.histories.items())
        seeds = max((len(hs) for hs in self.histories.values()), default=0)
        head = "".join(f"<th>seed {s}: loss / accuracy</th>" for s in range(seeds))
        note = "<p><i>Stopped before the end.</i></p>" if self.stopped else ""
        return (f"<table><tr><th>configuration</th>{head}</tr>{rows}</table>"
                f"<p>Final values are means over the last 20 steps; chance loss is "
                f"ln({TASK['vocab_size'] - 1}) = {math.log(TASK['vocab_size'] - 1):.2f}.</p>{note}")


def race_figure(configs: Sequence[RunConfig] = RACE, seeds: int = 3, steps: int = 150) -> go.FigureWidget:
    """An empty live loss figure: one line per (config, seed), one colour per config, the chance level dotted."""
    fig = live_figure("Training loss on the copy task, live", "step", "loss (cross-entropy, nats)", height=380)
    _reset_race_figure(fig, configs, seeds, steps)
    return fig


def _reset_race_figure(fig: go.FigureWidget, configs: Sequence[RunConfig], seeds: int,
                       steps: int) -> dict[tuple[str, int], go.Scatter]:
    """Draw the figure afresh, empty; returns the loss trace of each (config label, seed)."""
    chance = math.log(TASK["vocab_size"] - 1)
    traces = {}
    with fig.batch_update():
        fig.data = []
        for i, cfg in enumerate(configs):
            for s in range(seeds):
                traces[cfg.label, s] = fig.add_scatter(
                    x=[], y=[], mode="lines", name=cfg.label, legendgroup=cfg.label, showlegend=s == 0,
                    line=dict(color=RACE_COLOR.get(cfg.label, color(i + 2)), width=1.6),
                    hovertemplate=f"{cfg.label}, seed {s}<br>step %{{x}}: loss %{{y:.3f}}<extra></extra>").data[-1]
        fig.add_scatter(x=[0, steps], y=[chance, chance], mode="lines", name=f"chance, ln {TASK['vocab_size'] - 1}",
                        line=dict(color=color(7), dash="dot", width=1))
    return traces


def run_race(n_layers: int, lr: float, warmup: int, steps: int, seeds: int, *,
             configs: Sequence[RunConfig] = RACE, figure: go.FigureWidget | None = None, draw_every: int = 5,
             should_stop: Callable[[], bool] | None = None,
             progress: Callable[..., None] | None = None) -> RaceResult:
    """Train every config for `seeds` seeds on the copy task; draw the loss curves live in `figure` (every
    `draw_every` steps) and report progress(done, total, text). should_stop() ends the race cleanly."""
    if not (isinstance(n_layers, int) and n_layers >= 1 and isinstance(seeds, int) and seeds >= 1):
        raise ValueError(f"need n_layers >= 1 and seeds >= 1, got n_layers={n_layers!r}, seeds={seeds!r}")
    if not 0 <= warmup < steps:
        raise ValueError(f"the warmup ({warmup} steps) must be shorter than the run ({steps} steps)")
    settings = dict(n_layers=n_layers, lr=lr, warmup=warmup, steps=steps, seeds=seeds)
    result = RaceResult(settings)
    traces = _reset_race_figure(figure, configs, seeds, steps) if figure is not None else {}
    total, done = len(configs) * seeds * steps, 0
    for cfg in configs:
        for s in range(seeds):
            if should_stop is not None and should_stop():
                result.stopped = True
                return result
            model = build_model(n_layers, cfg.placement, seed=s, final_norm=cfg.final_norm)
            trace = traces.get((cfg.label, s))

            def callback(step, history, trace=trace, base=done, label=cfg.label, seed=s):
                last = step + 1 == steps
                if trace is not None and (step % draw_every == 0 or last):
                    with figure.batch_update():
                        trace.x, trace.y = history.step, history.loss
                if progress is not None and (step % draw_every == 0 or last):
                    progress(base + step + 1, total, f"{label}, seed {seed}: step {step + 1}/{steps}, "
                                                     f"loss {history.loss[-1]:.3f}")

            history = train_copy_task(model, steps=steps, lr=lr, warmup=warmup if cfg.warmup else 0, seed=s,
                                      batch_size=32, callback=callback, should_stop=should_stop, **TASK)
            if trace is not None:
                with figure.batch_update():
                    trace.x, trace.y = history.step, history.loss
            result.histories.setdefault(cfg.label, []).append(history)
            result.models.setdefault(cfg.label, []).append(model)
            done += steps
            if history.stopped:
                result.stopped = True
                return result
    return result


@functools.lru_cache(maxsize=1)
def _layer_step_seconds() -> float:
    """One training step of one block here, measured once per kernel: a 2-block model's step costs 3 such units (2
    blocks, and the embeddings with the head)."""
    return seconds_per_step(build_model(2, "pre", seed=0), batch_size=32, **TASK) / 3


class RacePanel(TrainingDemo):
    """Depth, learning rate, warmup, steps and seeds; Train runs the race in the background with a progress bar and
    a Stop button while the loss curves draw live. run(background=False) trains in the calling cell (for nbval)."""

    def __init__(self, configs: Sequence[RunConfig] = RACE, title: str = "Train it yourself", **defaults):
        unknown = set(defaults) - set(RACE_DEFAULTS)
        if unknown:
            raise ValueError(f"unknown setting(s) {sorted(unknown)}; use {sorted(RACE_DEFAULTS)}")
        d = {**RACE_DEFAULTS, **defaults}
        self.configs = tuple(configs)
        self.figure = race_figure(self.configs, d["seeds"], d["steps"])
        self._layer_step_s = _layer_step_seconds()
        controls = {
            "n_layers": widgets.IntSlider(value=d["n_layers"], min=1, max=12, description="depth L"),
            "lr": widgets.FloatLogSlider(value=d["lr"], base=10, min=-4, max=-1.5, step=0.125,
                                         description="learning rate", readout_format=".1e"),
            "warmup": widgets.IntSlider(value=d["warmup"], min=0, max=300, step=10, description="warmup steps"),
            "steps": widgets.IntSlider(value=d["steps"], min=20, max=400, step=10, description="steps"),
            "seeds": widgets.IntSlider(value=d["seeds"], min=1, max=5, description="seeds"),
        }
        super().__init__(controls, [self.figure], title=title)
        self.button.button_style, self.button.tooltip = "success", "train every configuration with these settings"

    def settings(self, n_layers: int, lr: float, warmup: int, steps: int, seeds: int) -> dict:
        positive_number(lr, "the learning rate")
        if n_layers < 1 or seeds < 1 or steps < 1:
            raise ValueError("depth, steps and seeds must each be at least 1")
        if not 0 <= warmup < steps:
            raise ValueError(f"The warmup ({warmup} steps) is as long as the whole run ({steps} steps), so the "
                             "warmed-up run would never reach the full learning rate. Lower the warmup or raise the "
                             "steps.")
        return dict(n_layers=n_layers, lr=lr, warmup=warmup, steps=steps, seeds=seeds)

    def describe(self, settings: dict) -> str:
        """What Train will do and about how long it takes."""
        n_layers, lr, warmup, steps, seeds = (settings[k] for k in ("n_layers", "lr", "warmup", "steps", "seeds"))
        runs = len(self.configs) * seeds
        seconds = runs * steps * (n_layers + 1) * self._layer_step_s
        uses_warmup = any(c.warmup for c in self.configs)
        text = (f"<b>Train</b> runs {len(self.configs)} configurations × {seeds} seed(s) = {runs} runs of {steps} "
                f"steps at depth {n_layers}, learning rate {lr:.1e}"
                + (f", warmup {warmup} steps (only where the label says so)" if uses_warmup else "")
                + f": about {seconds:.0f} s on this machine.")
        if uses_warmup and warmup == 0:
            text += " With warmup 0, 'Post-LN + warmup' is the same run as 'Post-LN, no warmup'."
        if seconds > 120:
            text += " That is a long run: the Stop button ends it at any time."
        return f"<div>{text}</div>"

    def train(self, settings: dict, should_stop, progress) -> RaceResult:
        return run_race(**settings, configs=self.configs, figure=self.figure, should_stop=should_stop,
                        progress=progress)

    def summarize(self, result: RaceResult) -> str:
        return result._repr_html_()


@register_panel()
def race_panel(configs: Sequence[RunConfig] = RACE, **defaults) -> RacePanel:
    """The race of notebook 04: Post-LN without and with warmup, Pre-LN without, at the settings given."""
    return RacePanel(configs, **defaults)

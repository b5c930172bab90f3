"""Notebook 00 (start here): the opening computation (48 blocks in float16), the picture of where the norms sit, and
the first live figure (move the input's shift and scale; LayerNorm's output stays put).

The deep stacks are the course's own `TinyLM` at its initialization (Xavier-uniform weights, the model notebooks 04-06
train), so every block runs `TransformerBlock.forward`; the stream after each block is its `return_hidden`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import types

import ipywidgets as widgets
import plotly.graph_objects as go
import torch
import torch.nn.functional as F

from ..evidence import Outcome, Setting, claim_experiment
from ..figures import color, dash, live_figure, log_axis_values, marker, static_figure
from ..norms import layer_norm
from ..panel import Panel, register_panel
from ..transformer import TinyLM

__all__ = ["FLOAT16_MAX", "HOOK_DEPTH", "HOOK_ARMS", "StackRun", "deep_stack", "hook_runs", "hook_table",
           "hook_figure", "block_diagram", "INVARIANCE_MOVES", "invariance_deviations", "first_slider_panel",
           "shifted_token", "PRE_LN_RMS_BELOW", "POST_LN_RMS_WITHIN", "INVARIANT_WITHIN", "hook_checks", "invariant",
           "ATTENTION_KINDS", "attention_race", "attention_checks", "SDPA_LATER_BY", "STREAM_AT_LIMIT"]

FLOAT16_MAX = float(torch.finfo(torch.float16).max)  # 65504: anything larger is inf in float16
HOOK_DEPTH = 48
HOOK_D_MODEL, HOOK_HEADS, HOOK_TOKENS, HOOK_VOCAB = 64, 4, 16, 32
# arm -> (norm, placement) of TinyLM; "no norm" keeps the pre-LN wiring with the norms replaced by the identity
HOOK_ARMS = {"no norm": ("none", "pre"), "Pre-LN": ("layer", "pre"), "Post-LN": ("layer", "post")}
TABLE_BLOCKS = (0, 6, 12, 24, 48)


@dataclass(frozen=True)
class StackRun:
    """One pass of tokens through a deep TinyLM at initialization: the stream after the embeddings (index 0) and after
    each block l (index l), and each block's largest attention score."""
    arm: str
    dtype: str
    rms: list[float]        # root mean square of the stream's entries
    largest: list[float]    # largest |entry| of the stream
    max_score: list[float]  # largest |q·k / sqrt(d_head)| inside block l (index l - 1), before any mask

    @property
    def all_finite(self) -> bool:
        return all(math.isfinite(v) for v in self.largest)

    @property
    def first_bad(self) -> int | None:
        """The first block whose output is not finite (1-based), None if every block's is."""
        return next((i for i, v in enumerate(self.largest) if not math.isfinite(v)), None)

    @property
    def growth_per_block(self) -> float:
        """The stream's RMS growth factor per block, over the whole stack: (rms_L / rms_0)^(1/L)."""
        return (self.rms[-1] / self.rms[0]) ** (1 / (len(self.rms) - 1))


ATTENTION_KINDS = ("course", "sdpa")  # the course's q @ k.T in the model's dtype, or F.scaled_dot_product_attention


def _sdpa_forward(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
    """MultiHeadAttention.forward with PyTorch's fused attention in place of the course's q @ k.T and softmax."""
    b, t, _ = x.shape
    q, k, v = (proj(x).view(b, t, self.n_heads, self.d_head).transpose(1, 2)
               for proj in (self.q_proj, self.k_proj, self.v_proj))
    # the record only: the scores SDPA works with, formed in float64 from its float16 inputs
    self.last_max_logit = (q.double() @ k.double().transpose(-2, -1) / math.sqrt(self.d_head)).abs().amax()
    out = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
    return self.out_proj(out.transpose(1, 2).reshape(b, t, self.d_model))


def deep_stack(arm: str = "no norm", depth: int = HOOK_DEPTH, *, dtype: torch.dtype = torch.float16, seed: int = 0,
               branch_scale: float = 1.0, attention: str = "course") -> StackRun:
    """16 random tokens through a `depth`-block TinyLM (d_model 64, 4 heads) at its seeded initialization, in `dtype`.

    branch_scale multiplies each block's two output projections (attention's out_proj, the FFN's linear2; their biases
    are 0), so every sublayer adds branch_scale times its usual output: the remedy of Fixup, SkipInit and ReZero.
    attention "sdpa" swaps every block's attention for F.scaled_dot_product_attention, same weights.
    """
    if arm not in HOOK_ARMS:
        raise ValueError(f"arm must be one of {tuple(HOOK_ARMS)}, got {arm!r}")
    if attention not in ATTENTION_KINDS:
        raise ValueError(f"attention must be one of {ATTENTION_KINDS}, got {attention!r}")
    norm, placement = HOOK_ARMS[arm]
    with torch.random.fork_rng():  # the layers' throwaway default init never moves the learner's random numbers
        model = TinyLM(HOOK_VOCAB, d_model=HOOK_D_MODEL, n_layers=depth, n_heads=HOOK_HEADS, norm=norm,
                       placement=placement, seed=seed)
    with torch.no_grad():
        for block in model.blocks:
            block.attn.out_proj.weight.mul_(branch_scale)
            block.ffn.linear2.weight.mul_(branch_scale)
    if attention == "sdpa":
        for block in model.blocks:
            block.attn.forward = types.MethodType(_sdpa_forward, block.attn)
    model.to(dtype)
    idx = torch.randint(0, HOOK_VOCAB, (1, HOOK_TOKENS), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        _, hidden = model(idx, return_hidden=True)
    wide = [h.double() for h in hidden]
    return StackRun(arm, str(dtype).removeprefix("torch.") + ("" if attention == "course" else ", SDPA"),
                    rms=[h.pow(2).mean().sqrt().item() for h in wide],
                    largest=[h.abs().max().item() for h in wide],
                    max_score=[b.attn.last_max_logit.double().item() for b in model.blocks])


def hook_runs(depth: int = HOOK_DEPTH, seed: int = 0, branch_scale: float = 1.0) -> dict[str, StackRun]:
    """The opening computation: the three arms in float16, and the unnormalized stack again in float64."""
    runs = {arm: deep_stack(arm, depth, seed=seed, branch_scale=branch_scale) for arm in HOOK_ARMS}
    runs["no norm, float64"] = deep_stack("no norm", depth, dtype=torch.float64, seed=seed, branch_scale=branch_scale)
    return runs


def _label(name: str, run: StackRun) -> str:
    """A run's name with its dtype, unless the name already says it ("no norm, float64")."""
    return name if run.dtype in name else f"{name} ({run.dtype})"


def hook_table(runs: dict[str, StackRun], blocks=TABLE_BLOCKS) -> str:
    """The stream's RMS after a few blocks, one line per run, and where the float16 run without a norm broke."""
    shown = [b for b in blocks if b < len(next(iter(runs.values())).rms)]
    lines = [f"{'RMS of the stream after block':32}" + "".join(f"{b:>10}" for b in shown)]
    for name, run in runs.items():
        lines.append(f"{_label(name, run):32}" + "".join(f"{run.rms[b]:>10.3g}" for b in shown))
    wide = runs.get("no norm, float64")
    if wide is not None:
        lines.append(f"no norm, float64: the RMS grows by a factor of about {wide.growth_per_block:.2f} per block")
    return "\n".join(lines)


def hook_figure(runs: dict[str, StackRun]) -> go.Figure:
    """The stream's RMS after every block, log scale, with float16's largest value and where float16 broke."""
    depth = len(runs["no norm"].rms) - 1
    fig = static_figure(f"{depth} blocks at initialization: the size of the residual stream", "block l",
                        "RMS of the stream after block l", log_y=True, height=400)
    blocks = list(range(depth + 1))
    # (colour, dash, marker) per run: the float64 rerun shares its float16 twin's colour and differs by its dash
    styles = {"no norm": (0, 0, 0), "no norm, float64": (0, 1, 0), "Pre-LN": (1, 2, 1), "Post-LN": (2, 3, 2)}
    for name, run in runs.items():
        c, d, m = styles[name]
        fig.add_scatter(x=blocks, y=log_axis_values(run.rms), name=_label(name, run), mode="lines+markers",
                        line=dict(color=color(c), dash=dash(d)), marker=dict(size=6, symbol=marker(m)))
    fig.add_hline(y=FLOAT16_MAX, line=dict(color="grey", dash="dot"))
    # annotations on a log axis take log10 of the value
    fig.add_annotation(x=depth, y=math.log10(FLOAT16_MAX), text="float16's largest value, 65504", showarrow=False,
                       xanchor="right", yanchor="bottom", font=dict(color="grey"))
    bad = runs["no norm"].first_bad
    if bad is not None:
        fig.add_vline(x=bad, line=dict(color=color(0), dash="dot"))
        fig.add_annotation(x=bad, y=math.log10(max(v for v in runs["no norm, float64"].rms if math.isfinite(v))),
                           text=f" float16 without a norm:<br> nan from block {bad} on", showarrow=False,
                           xanchor="left", yanchor="top", align="left", font=dict(color=color(0)))
    fig.update_yaxes(exponentformat="power")
    return fig


# ---- the picture: where the norms sit -------------------------------------------------------------------------------

_STREAM, _NORM, _SUB, _NOTE = "#000000", "#E69F00", "#56B4E9", "#555555"


def _box(fig: go.Figure, x: float, y: float, text: str, fill: str, w: float = 1.5, h: float = 0.5) -> None:
    fig.add_shape(type="rect", x0=x - w / 2, x1=x + w / 2, y0=y - h / 2, y1=y + h / 2, fillcolor=fill,
                  line=dict(color=_STREAM, width=1), layer="above")
    fig.add_annotation(x=x, y=y, text=text, showarrow=False, font=dict(size=14, color="black"))


def _plus(fig: go.Figure, x: float, y: float, r: float = 0.17) -> None:
    fig.add_shape(type="circle", x0=x - r, x1=x + r, y0=y - r * 1.6, y1=y + r * 1.6, fillcolor="white",
                  line=dict(color=_STREAM, width=1.5), layer="above")
    fig.add_annotation(x=x, y=y, text="<b>+</b>", showarrow=False, font=dict(size=15, color="black"))


def _line(fig: go.Figure, points: list[tuple[float, float]], width: float = 2, color_: str = _STREAM) -> None:
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        fig.add_shape(type="line", x0=x0, y0=y0, x1=x1, y1=y1, line=dict(color=color_, width=width), layer="below")


def _arrow(fig: go.Figure, x0: float, y0: float, x1: float, y1: float) -> None:
    fig.add_annotation(x=x1, y=y1, ax=x0, ay=y0, xref="x", yref="y", axref="x", ayref="y", text="",
                       showarrow=True, arrowhead=2, arrowsize=1.2, arrowwidth=1.5, arrowcolor=_STREAM)


def _note(fig: go.Figure, x: float, y: float, text: str) -> None:
    fig.add_annotation(x=x, y=y, text=text, showarrow=False, xanchor="left", align="left",
                       font=dict(size=13, color=_NOTE))


def _branch(fig: go.Figure, s: float, b: float, y0: float, y1: float, boxes: list[tuple[float, str, str]]) -> None:
    """A residual branch leaving the stream (at x = s) at y0, through `boxes` (y, text, fill) at x = b, back at y1."""
    _line(fig, [(s, y0), (b, y0), (b, y1)], width=1.5)
    for (y, text, fill), above in zip(boxes, [*boxes[1:], None]):
        _box(fig, b, y, text, fill)
        if above is not None:
            _arrow(fig, b, y + 0.25, b, above[0] - 0.25)
    _arrow(fig, b, y1, s + 0.19, y1)


def block_diagram() -> go.Figure:
    """Pre-LN and Post-LN side by side: the residual stream, the two sublayers, the norms and the final norm, each
    part labelled with the notebook that teaches it. Built from shapes and annotations; nothing is downloaded."""
    fig = static_figure("Where the norms sit: one block of each kind (a model stacks L of them)", "", "",
                        height=600, margin=dict(l=10, r=10, t=60, b=60))
    # Each column's heading on two lines, so it stays inside its half of the figure on a narrow screen too
    for s, b, title in ((1.2, 2.9, "<b>Pre-LN</b> (GPT-2, LLaMA)<br>x ← x + f(LN(x))"),
                        (6.5, 8.2, "<b>Post-LN</b> (the original Transformer, BERT)<br>x ← LN(x + f(x))")):
        fig.add_annotation(x=s - 1.1, y=9.05, text=title, showarrow=False, xanchor="left", align="left",
                           font=dict(size=16))
        _line(fig, [(s, 0.55), (s, 7.45)], width=3)
        _box(fig, s, 0.3, "embeddings x₀", "white", w=1.7)
        _box(fig, s, 8.0, "output layer → logits", "white", w=2.1)
        fig.add_shape(type="path", path=f"M {s - 0.8} 1.0 L {s - 0.95} 1.0 L {s - 0.95} 6.6 L {s - 0.8} 6.6",
                      line=dict(color=_NOTE, width=1))
        fig.add_annotation(x=s - 1.05, y=3.8, text="one block, × L", textangle=-90, showarrow=False,
                           font=dict(size=13, color=_NOTE))
        _arrow(fig, s, 7.45, s, 7.75)
        _note(fig, s + 0.15, 0.85, "residual stream: 01")
    # Pre-LN: each sublayer reads a normalized copy; the stream itself is only normalized once, at the end
    s, b = 1.2, 2.9
    _branch(fig, s, b, 1.2, 3.3, [(1.75, "LayerNorm", _NORM), (2.65, "attention", _SUB)])
    _plus(fig, s, 3.3)
    _branch(fig, s, b, 3.8, 5.9, [(4.35, "LayerNorm", _NORM), (5.25, "feed-forward", _SUB)])
    _plus(fig, s, 5.9)
    _box(fig, s, 7.05, "final LayerNorm", _NORM, w=1.7)
    _note(fig, b + 0.85, 1.75, "LayerNorm: 03<br>RMSNorm instead: 05<br>why not BatchNorm: 02")
    _note(fig, b + 0.85, 2.65, "QK-norm, soft-caps<br>inside attention: 06")
    _note(fig, b + 0.85, 4.35, "placement, warmup: 04")
    _note(fig, s + 1.0, 7.05, "the stream's only norm: 04")
    # Post-LN: the sum itself is normalized after every addition; the last block already ends on a norm
    s, b = 6.5, 8.2
    _branch(fig, s, b, 1.2, 2.7, [(1.95, "attention", _SUB)])
    _plus(fig, s, 2.7)
    _box(fig, s, 3.3, "LayerNorm", _NORM)
    _branch(fig, s, b, 3.9, 5.4, [(4.65, "feed-forward", _SUB)])
    _plus(fig, s, 5.4)
    _box(fig, s, 6.0, "LayerNorm", _NORM)
    _note(fig, s + 0.85, 3.3, "on the stream: 04")
    _note(fig, s + 0.85, 6.0, "on the stream: 04")
    _note(fig, s + 0.15, 7.05, "no final norm needed:<br>the last block ends on one")
    _note(fig, b + 0.85, 1.95, "QK-norm,<br>soft-caps: 06")
    for name, fill in (("residual stream x", _STREAM), ("norm (LayerNorm, or RMSNorm)", _NORM),
                       ("sublayer f (attention or feed-forward)", _SUB)):
        fig.add_scatter(x=[None], y=[None], mode="markers", name=name,
                        marker=dict(symbol="square", size=13, color=fill, line=dict(color=_STREAM, width=1)))
    fig.update_xaxes(visible=False, range=[0, 10.4], fixedrange=True)
    fig.update_yaxes(visible=False, range=[-0.1, 9.6], fixedrange=True)
    return fig


# ---- the first live figure ------------------------------------------------------------------------------------------

INVARIANCE_MOVES = ((5.0, 1.0), (-12.5, 3.0), (0.0, 0.2), (20.0, 10.0))  # (shift b, scale a) the notebook checks


def shifted_token(shift: float, scale: float, d: int = 16, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed random token x, then scale * x + shift; returns (the moved token, its LayerNorm)."""
    if scale <= 0:
        raise ValueError(f"scale must be > 0 (got {scale}): LayerNorm is invariant to positive scaling only; "
                         "a negative scale flips the sign of the output")
    x = torch.randn(d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    moved = scale * x + shift
    return moved, layer_norm(moved)


def invariance_deviations(moves=INVARIANCE_MOVES, seed: int = 0,
                          d: int = 16) -> dict[tuple[float, float], float]:
    """(shift, scale) -> the largest |LN(scale·x + shift) - LN(x)| over the token's d features."""
    _, reference = shifted_token(0.0, 1.0, d, seed=seed)
    return {(shift, scale): (shifted_token(shift, scale, d, seed=seed)[1] - reference).abs().max().item()
            for shift, scale in moves}


INVARIANT_WITHIN = 1e-3  # C77: "does not move": LayerNorm's output moves by less than this


def invariant(deviations: dict[tuple[float, float], float]) -> bool:
    """C77: did LayerNorm's output move by less than INVARIANT_WITHIN under every (shift, scale) move?"""
    return max(deviations.values()) < INVARIANT_WITHIN


@register_panel()
def first_slider_panel(d: int = 16) -> Panel:
    """Sliders for shift and scale driving two bar traces: the token as given, and after LayerNorm."""
    fig = live_figure("One token before and after LayerNorm", "feature index k", "value", height=340)
    moved_bars = fig.add_bar(name="input x (moved)", marker_color=color(0)).data[-1]
    normed_bars = fig.add_bar(name="LayerNorm(x)", marker=dict(color=color(1), pattern_shape="/")).data[-1]
    controls = {
        "shift": widgets.FloatSlider(value=0.0, min=-20.0, max=20.0, step=0.5, description="shift b"),
        "scale": widgets.FloatSlider(value=1.0, min=0.1, max=10.0, step=0.1, description="scale a"),
    }
    readout = widgets.HTML()

    def update(shift: float, scale: float) -> None:
        moved, normed = shifted_token(shift, scale, d)
        with fig.batch_update():
            moved_bars.x = normed_bars.x = list(range(d))
            moved_bars.y = moved.tolist()
            normed_bars.y = normed.tolist()
        readout.value = (f"input mean {moved.mean():.2f}, std {moved.std(unbiased=False):.2f} &nbsp;|&nbsp; "
                         f"output mean {normed.mean():.2f}, std {normed.std(unbiased=False):.2f}")

    return Panel(controls, [readout, fig], update, title="Move the sliders: the input moves, the output does not")


# ---- the claim experiments (python -m course_utils.robustness --notebooks 00_start_here) ----------------------------

PRE_LN_RMS_BELOW = 20.0      # C76: Pre-LN's stream is finite and its RMS stays below this
POST_LN_RMS_WITHIN = 0.01    # C76: Post-LN's stream RMS is within this of 1 after every block


def hook_checks(runs: dict[str, StackRun]) -> dict[str, bool]:
    """C76 on hook_runs' result, each check by name."""
    no_norm, pre, post = runs["no norm"], runs["Pre-LN"], runs["Post-LN"]
    k = no_norm.first_bad
    broke = not math.isfinite(no_norm.rms[-1]) and k is not None
    return {"no norm: float16 has lost the stream by the last block": broke,
            "... and the first non-finite value is an attention score, the stream below a tenth of 65504":
                broke and not math.isfinite(no_norm.max_score[k - 1]) and no_norm.largest[k - 1] < FLOAT16_MAX / 10,
            f"Pre-LN: finite, RMS below {PRE_LN_RMS_BELOW:g}": pre.all_finite and pre.rms[-1] < PRE_LN_RMS_BELOW,
            f"Post-LN: finite, RMS within {POST_LN_RMS_WITHIN} of 1 after every block":
                post.all_finite and max(abs(r - 1) for r in post.rms[1:]) < POST_LN_RMS_WITHIN}


@claim_experiment("C76", statement="Through 48 blocks of the course's TinyLM at initialization in float16, the stream "
                  "without normalization is no longer finite after the last block (the first non-finite value is an "
                  "attention score, while the stream entering that block is below a tenth of 65504); with a LayerNorm "
                  "per sublayer every block's output is finite, Pre-LN's stream RMS below 20 and Post-LN's within 0.01 "
                  "of 1",
                  figure="RMS of the unnormalized stream after the last block, float64 run (float32 weights: kind "
                  "float)", kind="float",
                  settings=[Setting("48 blocks (the notebook)", {"depth": 48}),
                            Setting("96 blocks", {"depth": 96}),
                            Setting("8 blocks (control: the stack without a norm stays finite too)", {"depth": 8},
                                    expect=False),
                            Setting("48 blocks, branch outputs x 0.1 (control: small branches need no norm)",
                                    {"depth": 48, "branch_scale": 0.1}, expect=False)])
def c76_float16_stack(seed, *, depth=HOOK_DEPTH, branch_scale=1.0):
    runs = hook_runs(depth, seed, branch_scale)
    pre, post = runs["Pre-LN"], runs["Post-LN"]
    checks = hook_checks(runs)
    return Outcome(holds=all(checks.values()), figure=runs["no norm, float64"].rms[-1],
                   detail=f"float16 without a norm: first non-finite block {runs['no norm'].first_bad}; Pre-LN RMS "
                          f"{pre.rms[-1]:.2f}, Post-LN off 1 by {max(abs(r - 1) for r in post.rms[1:]):.1e}")


@claim_experiment("C77", statement="LayerNorm's output for a random 16-feature (or 64-feature) token moves by less "
                  "than 1e-3 under each of the notebook's four shifts and positive scales (scales 0.2 to 10)",
                  figure="largest |LN(a·x + b) - LN(x)| over the moves and features", kind="exact",
                  settings=[Setting("the notebook's four (shift, scale) moves", {}),
                            Setting("the same moves, a 64-feature token", {"d": 64}),
                            Setting("scale 0.01 (limit: eps = 1e-5 is about a tenth of the variance)",
                                    {"moves": ((0.0, 0.01),)}, expect=False)])
def c77_invariance(seed, *, moves=INVARIANCE_MOVES, d=16):
    deviations = invariance_deviations(moves, seed, d)
    return Outcome(holds=invariant(deviations), figure=max(deviations.values()),
                   detail=", ".join(f"(b {b:g}, a {a:g}) {v:.1e}" for (b, a), v in deviations.items()))


# ---- C100: which overflows first depends on how attention computes its scores ----------------------------------------

SDPA_LATER_BY = 1.5              # C100: with SDPA the float16 stack lasts at least this many times as many blocks
STREAM_AT_LIMIT = FLOAT16_MAX / 4  # C100: with SDPA the stream entering the first bad block is above this


def attention_race(seed: int = 0, depth: int = HOOK_DEPTH, branch_scale: float = 1.0) -> dict[str, StackRun]:
    """The unnormalized float16 stack twice, same weights: the course's attention, and F.scaled_dot_product_attention."""
    return {kind: deep_stack("no norm", depth, seed=seed, branch_scale=branch_scale, attention=kind)
            for kind in ATTENTION_KINDS}


def attention_checks(race: dict[str, StackRun]) -> dict[str, bool]:
    """C100 on attention_race's result: the course's scores overflow first, SDPA's stream does, and much later."""
    ours, sdpa = race["course"], race["sdpa"]
    k, j = ours.first_bad, sdpa.first_bad
    return {"course's attention: a score is the first non-finite value, the stream below a tenth of 65504":
                k is not None and not math.isfinite(ours.max_score[k - 1]) and ours.largest[k - 1] < FLOAT16_MAX / 10,
            f"SDPA: finite at least {SDPA_LATER_BY:g} times as many blocks":
                k is not None and (j is None or j >= SDPA_LATER_BY * k),
            "SDPA: when it breaks, the stream itself is at float16's limit (above a quarter of 65504)":
                j is not None and sdpa.largest[j - 1] > STREAM_AT_LIMIT}


@claim_experiment("C100", statement="Through the 48-block TinyLM without a norm in float16, the course's attention (q·kᵀ "
                  "formed in float16) loses an attention score first, while the stream is below a tenth of 65504; with "
                  "F.scaled_dot_product_attention in its place (same weights) the stack stays finite at least 1.5 times "
                  "as many blocks and breaks only when the stream itself is above a quarter of 65504",
                  figure="first non-finite block with SDPA (the course's attention: about 11)", kind="exact",
                  settings=[Setting("48 blocks (the notebook)", {}),
                            Setting("96 blocks", {"depth": 96}),
                            Setting("8 blocks (control: neither overflows)", {"depth": 8}, expect=False),
                            Setting("branch outputs x 0.1 (control: small branches, nothing overflows)",
                                    {"branch_scale": 0.1}, expect=False)])
def c100_sdpa_overflow(seed, *, depth=HOOK_DEPTH, branch_scale=1.0):
    race = attention_race(seed, depth, branch_scale)
    checks = attention_checks(race)
    ours, sdpa = race["course"], race["sdpa"]
    return Outcome(holds=all(checks.values()), figure=float(sdpa.first_bad or 0),
                   detail=f"first non-finite block: course's attention {ours.first_bad}, SDPA {sdpa.first_bad}; stream "
                          f"entering it with SDPA {sdpa.largest[sdpa.first_bad - 1] if sdpa.first_bad else 'finite'}")

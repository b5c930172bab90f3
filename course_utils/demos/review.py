"""Notebook 07 (review): the chain-of-problems figure, a model-answer button per open question, and a picker that
brings any notebook's checkpoint quiz into this kernel so score_summary() can count it."""
from __future__ import annotations

import math
from dataclasses import dataclass

import ipywidgets as widgets
import plotly.graph_objects as go
import torch
import torch.nn.functional as F
from torch import nn

from ..course import NOTEBOOKS
from ..evidence import Outcome, Setting, claim_experiment
from ..figures import color, static_figure
from ..panel import Panel, register_panel
from ..quiz import load_quiz, parse_ref, quiz_names, reveal
from ..transformer import MultiHeadAttention, TinyLM

__all__ = ["Link", "CHAIN", "chain_figure", "reveal_button", "checkpoint_names", "checkpoint_picker",
           "quiz_statistics", "residual_sum", "parallel_vs_sequential", "order_blindness", "future_leak",
           "stream_growth", "compounding", "init_growth"]


@dataclass(frozen=True)
class Link:
    """One chapter in the chain: the problem it took on, its answer, and the problem that answer left for the next."""
    chapter: str
    idea: str
    problem: str
    solution: str
    leaves: str
    evidence: str


# Drawn from the chapter's own summary (seed 000, the closing paragraph of section 5) and its opening (section 1).
# Box texts carry <br> breaks so that at 12 px they fit their boxes in a figure down to about 900 px wide (the
# notebook's column on a 1366 x 768 laptop); 13 px would run over the box edges there.
CHAIN = (
    Link("2.1", "Attention",
         "Recurrence reads tokens one<br>at a time: a sequential<br>bottleneck, and long paths<br>"
         "between distant tokens",
         "Self-attention: every position<br>reads every other position<br>in one parallel step",
         "Attention treats its input<br>as a set: it cannot tell<br>one word order from another",
         "Checked in section 5: one causal attention call equals computing each position from its own prefix."),
    Link("2.2", "Positions",
         "Permutation invariance:<br>shuffle the tokens and the<br>outputs are only shuffled",
         "Positional schemes (learned,<br>sinusoidal, relative, rotary)<br>put the order back",
         "An order-aware attention<br>stack, but which shape and<br>objective suit generation?",
         "Checked in section 5: without positions, shuffled inputs give shuffled outputs; with them, they do not."),
    Link("2.3", "Decoder-only",
         "Architecture shape and<br>objective must match<br>generating text",
         "Decoder-only: masked self-<br>attention + FFN blocks, next-<br>token prediction everywhere",
         "Its strength comes from<br>depth, and a deep stack<br>does not train stably alone",
         "Checked in section 5: with the causal mask, a position's prediction never sees later tokens."),
    Link("2.4", "Normalization",
         "Deep-stack trainability: the<br>residual sum has no ceiling;<br>activations and gradients drift",
         "Per-token LayerNorm (not<br>BatchNorm), Pre-LN placement,<br>RMSNorm; QK-norm on logits",
         "Left: the feed-forward<br>sublayer (chapter 2.5), and<br>new failure modes at scale",
         "Notebooks 01 to 06; section 5 re-checks the stream's growth with and without normalization."),
)
ROWS = (("the problem", "problem", "#FBE3D6", color(1)), ("the chapter's answer", "solution", "#DCEBF7", color(0)),
        ("the problem it leaves for the next chapter", "leaves", "#F3E1EC", color(3)))


def chain_figure() -> go.Figure:
    """Chapters 2.1 to 2.4 as columns (problem -> solution -> what it leaves), each leftover feeding the next column."""
    shapes, notes = [], []
    width, height, gap = 20.5, 15.0, 25.0
    tops = {"problem": 84.0, "solution": 59.0, "leaves": 34.0}

    def arrow(x0, y0, x1, y1, colour="#444"):
        notes.append(dict(x=x1, y=y1, ax=x0, ay=y0, xref="x", yref="y", axref="x", ayref="y", text="",
                          showarrow=True, arrowhead=2, arrowsize=1.2, arrowwidth=2, arrowcolor=colour))

    fig = static_figure("The chain of problems: what each chapter of Part II solved, and what it left for the next",
                        "", "", height=580, margin=dict(l=10, r=10, b=50))
    hover_x, hover_y, hover_text = [], [], []
    for i, link in enumerate(CHAIN):
        centre = 13.0 + gap * i
        notes.append(dict(x=centre, y=95.5, text=f"<b>Chapter {link.chapter}: {link.idea}</b>", showarrow=False,
                          font=dict(size=16)))
        for label, key, fill, edge in ROWS:
            top = tops[key]
            shapes.append(dict(type="rect", x0=centre - width / 2, x1=centre + width / 2, y0=top - height, y1=top,
                               fillcolor=fill, line=dict(color=edge, width=2)))
            notes.append(dict(x=centre, y=top - height / 2, text=getattr(link, key), showarrow=False,
                              font=dict(size=12), align="center"))
            hover_x.append(centre)
            hover_y.append(top - height / 2)
            hover_text.append(f"<b>{link.chapter}, {label}</b><br>{getattr(link, key)}<br><i>{link.evidence}</i>")
        arrow(centre, tops["problem"] - height, centre, tops["solution"])
        arrow(centre, tops["solution"] - height, centre, tops["leaves"])
        if i + 1 < len(CHAIN):
            # The leftover problem of chapter i becomes the problem of chapter i + 1.
            arrow(centre + width / 2, tops["leaves"] - height / 2, centre + gap - width / 2,
                  tops["problem"] - height / 2, colour=color(3))
    notes.append(dict(x=50, y=9, showarrow=False, font=dict(size=13, color="#444"),
                      text="Each answer created or exposed the next problem. Hover over a box for where this "
                           "course checks it.<br>Source: the chapter's own summary (section 5, closing paragraph) "
                           "and its opening (section 1); chapters 2.1-2.3 are earlier chapters of the book."))
    fig.add_scatter(x=hover_x, y=hover_y, mode="markers", marker=dict(size=40, opacity=0), hoverinfo="text",
                    hovertext=hover_text, showlegend=False)
    for label, _key, fill, edge in ROWS:
        fig.add_scatter(x=[None], y=[None], mode="markers", name=label,
                        marker=dict(symbol="square", size=14, color=fill, line=dict(color=edge, width=2)))
    fig.add_scatter(x=[None], y=[None], mode="lines", line=dict(color=color(3), width=2),
                    name="leads to the next chapter's problem")
    fig.update_layout(shapes=shapes, annotations=notes)
    fig.update_xaxes(range=[0, 100], visible=False, fixedrange=True)
    fig.update_yaxes(range=[2, 100], visible=False, fixedrange=True)
    return fig


def reveal_button(ref: str) -> widgets.VBox:
    """A "Show model answer" toggle for one open item; the model answer and rubric appear only when pressed."""
    quiz_name, qid = parse_ref(ref)
    load_quiz(quiz_name).question(qid)  # an unknown reference fails here, when the notebook is written, not on click
    toggle = widgets.ToggleButton(value=False, description="Show model answer", icon="eye",
                                  tooltip=f"Reveal the model answer and rubric points for {ref}",
                                  layout=widgets.Layout(width="190px"))
    shown = widgets.HTMLMath()

    def on_toggle(change) -> None:
        toggle.description = "Hide model answer" if change["new"] else "Show model answer"
        shown.value = reveal(ref)._repr_html_() if change["new"] else ""

    toggle.observe(on_toggle, names="value")
    box = widgets.VBox([toggle, shown])
    box.toggle, box.shown = toggle, shown
    return box


def checkpoint_names() -> list[str]:
    """Every other notebook's checkpoint quiz (the quiz named after it in the course manifest), in course order."""
    return [nb.id for nb in NOTEBOOKS if nb.id != "07_review" and nb.id in nb.quizzes and nb.id in quiz_names()]


@register_panel()
def checkpoint_picker() -> Panel:
    """Pick a notebook's checkpoint quiz and answer it here; each quiz's widgets are built once and kept."""
    names = checkpoint_names()
    views: dict[str, widgets.Widget] = {}
    holder = widgets.VBox()
    controls = {"quiz": widgets.Dropdown(options=[(f"{n}: {load_quiz(n).title}", n) for n in names],
                                         value=names[0], description="Checkpoint:",
                                         layout=widgets.Layout(width="95%"), style={"description_width": "initial"})}

    def update(quiz: str) -> None:
        if quiz not in names:
            raise ValueError(f"There is no checkpoint quiz {quiz!r}. Pick one of: {', '.join(names)}.")
        if quiz not in views:
            views[quiz] = load_quiz(quiz).show()
        holder.children = (views[quiz],)

    note = widgets.HTML("<i>Answers you check here count in <code>score_summary()</code>, like every answer in "
                        "this notebook. Switching quizzes keeps what you entered.</i>")
    panel = Panel(controls, [note, holder], update, title="Retake a checkpoint quiz", columns=1)
    panel.views = views
    return panel


# ---- section 3 and section 5: the computations behind the claim cells (C28-C34, C88), shared with their experiments -

def quiz_statistics(x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    """Q5-Q7 from scratch: the mean and biased variance of x, the RMS of y, each checked against the statistics
    PyTorch's own kernels use (F.layer_norm, F.rms_norm, with eps = 0); raises AssertionError if one differs."""
    mu = x.mean()
    var = ((x - mu) ** 2).mean()  # divide by d, as LayerNorm does
    torch.testing.assert_close(F.layer_norm(x, x.shape, eps=0.0), (x - mu) / var.sqrt())
    rms = y.pow(2).mean().sqrt()
    torch.testing.assert_close(F.rms_norm(y, y.shape, eps=0.0), y / rms)
    return {"q5": mu.item(), "q6": var.item(), "q7": rms.item()}


def residual_sum(directions: str, *, n_blocks: int = 10, size: float = 2.0, d: int = 512, seed: int = 0) -> float:
    """|x_L| after n_blocks residual blocks x_{l+1} = x_l + F_l(x_l) from x_0 = 0, no normalization. Each F_l is an
    nn.Linear with zero weight and a bias of norm `size`, so it adds that vector whatever its input: one shared
    random direction ("aligned") or a fresh random direction per block ("independent"), drawn from `seed`."""
    if directions not in ("aligned", "independent"):
        raise ValueError(f"directions must be 'aligned' or 'independent', got {directions!r}")
    g = torch.Generator().manual_seed(seed)
    shared = torch.randn(d, generator=g, dtype=torch.float64)
    blocks = []
    for _ in range(n_blocks):
        v = shared if directions == "aligned" else torch.randn(d, generator=g, dtype=torch.float64)
        block = nn.Linear(d, d, dtype=torch.float64)
        with torch.no_grad():
            block.weight.zero_()
            block.bias.copy_(size * v / v.norm())
        blocks.append(block)
    stream = torch.zeros(d, dtype=torch.float64)
    with torch.no_grad():
        for block in blocks:
            stream = stream + block(stream)
    return stream.norm().item()


def _seeded(seed: int, make):
    """Build a module from torch's global RNG at `seed` without moving the caller's random numbers."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return make()


def parallel_vs_sequential(seed: int = 0, *, length: int = 10, d_model: int = 32,
                           recurrent: bool = True) -> dict[str, float]:
    """Attention: one causal call against each position computed from its own prefix (max difference). RNN: the
    true sequential run against a "parallel" shortcut that starts every step from h = 0 (max difference); with
    recurrent=False the RNN's recurrent weight is zeroed, so nothing flows from step to step (the control)."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randn(1, length, d_model, generator=g)
    attention = _seeded(seed, lambda: MultiHeadAttention(d_model, 4, causal=True))
    rnn = _seeded(seed + 1000, lambda: nn.RNNCell(d_model, d_model))
    with torch.no_grad():
        if not recurrent:
            rnn.weight_hh.zero_()
        all_at_once = attention(tokens)
        one_by_one = torch.cat([attention(tokens[:, :t + 1])[:, -1:] for t in range(length)], dim=1)
        h, sequential = torch.zeros(1, d_model), []
        for t in range(length):  # step t needs h from step t - 1
            h = rnn(tokens[:, t], h)
            sequential.append(h)
        shortcut = rnn(tokens[0], torch.zeros(length, d_model))  # every step at once, each from h = 0
    return {"attention": (all_at_once - one_by_one).abs().max().item(),
            "rnn": (torch.cat(sequential) - shortcut).abs().max().item()}


def order_blindness(seed: int = 0, *, d_model: int = 32, positions: bool = False, causal: bool = False) -> dict:
    """Three token vectors in two orders through one attention layer: how far the second run's outputs are from the
    first run's outputs permuted (0 means attention saw a set), and how many of the six outputs are distinct."""
    g = torch.Generator().manual_seed(seed)
    three = torch.randn(1, 3, d_model, generator=g)
    order = torch.tensor([2, 0, 1])
    pos = torch.randn(3, d_model, generator=g) if positions else torch.zeros(3, d_model)
    attention = _seeded(seed, lambda: MultiHeadAttention(d_model, 4, causal=causal))
    with torch.no_grad():
        first, second = attention(three + pos), attention(three[:, order] + pos)
    outputs = torch.cat([first[0], second[0]])
    distinct = sum(not any(torch.allclose(outputs[i], outputs[j], atol=1e-5) for j in range(i)) for i in range(6))
    return {"deviation": (second - first[:, order]).abs().max().item(), "distinct": distinct}


def future_leak(seed: int = 0, *, d_model: int = 32, causal: bool = True, change_from: int = 8) -> dict[str, float]:
    """A 2-block TinyLM on 12 tokens, then the same tokens with a different future from `change_from` on: how far
    the logits before and from that position move. causal=False lifts the mask in every block (the control)."""
    lm = TinyLM(vocab_size=16, d_model=d_model, n_layers=2, n_heads=4, seed=seed)
    for block in lm.blocks:
        block.attn.causal = causal
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(16, (1, 12), generator=g)
    changed = idx.clone()
    changed[0, change_from:] = (idx[0, change_from:] + 1) % 16
    with torch.no_grad():
        before, after = lm(idx), lm(changed)
    return {"past": (before[:, :change_from] - after[:, :change_from]).abs().max().item(),
            "future": (before[:, change_from:] - after[:, change_from:]).abs().max().item()}


def stream_growth(norm: str, placement: str, *, n_layers: int = 12, d_model: int = 32, seed: int = 0,
                  activation: str = "relu") -> tuple:
    """The residual stream's RMS after the embeddings and after the last block of a TinyLM at initialization."""
    model = TinyLM(16, d_model=d_model, n_layers=n_layers, n_heads=4, norm=norm, placement=placement,
                   activation=activation, seed=seed)
    batch = torch.randint(16, (4, 16), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        _, hidden = model(batch, return_hidden=True)
    return tuple(hidden[i].pow(2).mean().sqrt().item() for i in (0, -1))


def compounding(norm: str, *, seed: int = 0, short: int = 6, long: int = 12, d_model: int = 32,
                activation: str = "relu") -> dict[str, float]:
    """How the stream's growth at initialization scales with depth: the growth (RMS after the last block over RMS
    after the embeddings) of a `short` and a `long` Pre-LN-placed TinyLM, and log(long growth) / log(short growth).
    A constant factor per block (exponential growth) gives long / short = 2 for 12 against 6 blocks; growth like L
    or like √L gives ln 12 / ln 6 ≈ 1.39."""
    g_short, g_long = (end / start for start, end in
                       (stream_growth(norm, "pre", n_layers=n, seed=seed, d_model=d_model, activation=activation)
                        for n in (short, long)))
    return {"short": g_short, "long": g_long, "log_ratio": math.log(g_long) / math.log(g_short)}


def init_growth(init: str, *, n_layers: int = 12, d_model: int = 32, seed: int = 0, scaled: bool = True) -> float:
    """The growth of an unnormalized TinyLM's stream at initialization (RMS after the last block over RMS after the
    embeddings) under three initializations: "course" (TinyLM's own: Xavier-uniform matrices, N(0, 1) tokens),
    "torch" (PyTorch's nn.Linear and nn.Embedding defaults) or "gpt2" (every matrix and embedding N(0, 0.02²), the
    residual projections, attention's out_proj and the FFN's linear2, scaled by 1/√(2·n_layers) unless not scaled)."""
    if init not in ("course", "torch", "gpt2"):
        raise ValueError(f"init must be 'course', 'torch' or 'gpt2', got {init!r}")
    model = TinyLM(16, d_model=d_model, n_layers=n_layers, n_heads=4, norm="none", seed=seed)
    with torch.no_grad():
        if init == "torch":
            with torch.random.fork_rng():  # PyTorch's default init, seeded, without touching the caller's RNG state
                torch.manual_seed(seed)
                for module in model.modules():
                    if isinstance(module, (nn.Linear, nn.Embedding)):
                        module.reset_parameters()
        elif init == "gpt2":
            g = torch.Generator().manual_seed(seed)
            residual = 1 / math.sqrt(2 * n_layers) if scaled else 1.0
            for name, p in model.named_parameters():
                if p.dim() >= 2:  # embeddings and matrices; the biases stay 0
                    p.normal_(0.0, 0.02 * (residual if name.endswith(("out_proj.weight", "linear2.weight")) else 1),
                              generator=g)
        batch = torch.randint(16, (4, 16), generator=torch.Generator().manual_seed(seed))
        _, hidden = model(batch, return_hidden=True)
    start, end = (hidden[i].pow(2).mean().sqrt().item() for i in (0, -1))
    return end / start


# ---- What section 5's claim cells assert, written once: the cells and the claim experiments below both judge with
# these constants and functions, so a threshold cannot drift between the notebook and its rerun.
EQUAL_WITHIN = 1e-5       # "the same" in float32: round-off is about 1e-7 here, a real difference is far larger
DIFFERS_BY = 1e-2         # "different": a real change, a thousand times above round-off
ROOT_WITHIN = 0.1         # C88: independent contributions sum to within 10% of 2√n
RUNAWAY = 50.0            # C32: without normalization 12 blocks grow the stream more than 50-fold
PRE_LN_GROWTH = (1.5, 10.0)   # C32, C34: with Pre-LN it grows, but less than 10-fold
POST_LN_WITHIN = 0.01     # C33: a LayerNorm's output has RMS within 1% of 1
PER_BLOCK = (1.7, 2.4)    # C89: log(growth over 12) / log(growth over 6) near 2, a factor per block
NEAR_ONE = 1.5            # C140: with GPT-2-style init 12 unnormalized blocks grow the stream less than 1.5-fold


def same(diff: float) -> bool:
    """Two computations agree up to float32 round-off."""
    return diff < EQUAL_WITHIN


def differs(diff: float) -> bool:
    """Two computations really differ, far beyond round-off."""
    return diff > DIFFERS_BY


def near_root_sum(size: float, n_blocks: int = 10, magnitude: float = 2.0) -> bool:
    """C88: is |x_n| within ROOT_WITHIN of magnitude * √n, the sum of n nearly orthogonal contributions?"""
    return abs(size / (magnitude * math.sqrt(n_blocks)) - 1) < ROOT_WITHIN


def key_checks(computed: dict[str, float], quiz: str = "chapter_2_4") -> dict[str, bool]:
    """C28: for each computed value, by question id: is it the stored key, and does it grade as correct? And q7,
    rounded as its prompt asks, is the key itself."""
    chapter = load_quiz(quiz)
    checks = {f"{qid}: {value:.6g} is the key and grades correct":
              chapter.question(qid).is_key(value) and chapter.grade(qid, value).correct
              for qid, value in computed.items()}
    q7 = chapter.question("q7")
    checks[f"q7 rounded to {q7.decimals} decimals is the key"] = round(computed["q7"], q7.decimals) == q7.answer
    return checks


def bottleneck_checks(diff: dict[str, float]) -> dict[str, bool]:
    """C29 on parallel_vs_sequential's result: attention's one call is exact, the RNN's shortcut is not."""
    return {"one attention call = each position from its prefix": same(diff["attention"]),
            "the RNN's every-step-at-once shortcut misses the sequential run": differs(diff["rnn"])}


def order_checks(r: dict) -> dict[str, bool]:
    """C30 on order_blindness's result: the second order's outputs are the first's permuted, 3 distinct of 6."""
    return {"the same outputs, permuted": same(r["deviation"]), "3 distinct vectors of 6": r["distinct"] == 3}


def causal_checks(r: dict[str, float]) -> dict[str, bool]:
    """C31 on future_leak's result: the past's logits do not move, the future's do."""
    return {"logits before the change unmoved": same(r["past"]), "logits from the change on move": differs(r["future"])}


def runs_away(start: float, end: float) -> bool:
    """C32: did the stream's RMS grow more than RUNAWAY-fold?"""
    return end > RUNAWAY * start


def grows_slowly(start: float, end: float) -> bool:
    """C34: did the stream grow, but by less than 10-fold (PRE_LN_GROWTH)?"""
    low, high = PRE_LN_GROWTH
    return low * start < end < high * start


def depth_checks(plain: tuple, pre: tuple) -> dict[str, bool]:
    """C32 on stream_growth's (start, end) without normalization and with Pre-LN."""
    return {"no normalization: more than 50-fold": runs_away(*plain),
            "Pre-LN: less than 10-fold": pre[1] < PRE_LN_GROWTH[1] * pre[0]}


def normalized(rms: float) -> bool:
    """C33: is the stream's RMS within POST_LN_WITHIN of 1, as a LayerNorm's output is?"""
    return abs(rms - 1) < POST_LN_WITHIN


def stays_near_one(growth: float) -> bool:
    """C140: did the unnormalized stream grow less than NEAR_ONE-fold over the stack?"""
    return growth < NEAR_ONE


def compounds(r: dict[str, float]) -> bool:
    """C89 on compounding's result: does the log of the growth about double from 6 to 12 blocks?"""
    return PER_BLOCK[0] < r["log_ratio"] < PER_BLOCK[1]


CHAPTER_X, CHAPTER_Y = (1.0, 2.0, 3.0, 4.0), (3.0, 4.0)
_WIDTHS = [("d_model 16", {"d_model": 16}), ("d_model 64", {"d_model": 64}), ("d_model 128", {"d_model": 128}),
           ("GELU instead of ReLU", {"activation": "gelu"})]


@claim_experiment(
    "C28", statement="The quiz's calculations: μ = 2.5, σ² = 1.25 and RMS ≈ 3.54 are the statistics F.layer_norm and "
                     "F.rms_norm use, and ten blocks each adding a contribution of magnitude 2 in one shared direction "
                     "(the course's reading of q8) give |x| = 20, the stored key",
    figure="|x_10| for ten contributions of magnitude 2", kind="exact",
    settings=[Setting("aligned contributions, as q8 now says",
                      fixed="an answer-key check: each value is computed from its question's definition, and ten "
                            "aligned contributions of 2 are 20 at every seed"),
              Setting("independent directions (control: the key 20 does not apply)", {"directions": "independent"},
                      expect=False)])
def quiz_key_claim(seed, *, directions="aligned"):
    g = torch.Generator().manual_seed(seed)  # the seed shuffles the vectors' order, which the statistics ignore
    x = torch.tensor(CHAPTER_X, dtype=torch.float64)[torch.randperm(4, generator=g)]
    y = torch.tensor(CHAPTER_Y, dtype=torch.float64)[torch.randperm(2, generator=g)]
    computed = quiz_statistics(x, y)
    computed["q8"] = residual_sum(directions, seed=seed)
    return Outcome.of_checks(key_checks(computed), computed["q8"])


@claim_experiment(
    "C88", statement="Ten residual contributions of magnitude 2 in independent random directions (d = 512) sum to "
                     "about 2√10 ≈ 6.32 (within 10%), not 20: q8 needs its 'aligned' to have one answer; so do forty "
                     "(about 2√40) and d = 2048",
    figure="|x_n| for n contributions of magnitude 2", kind="exact",
    settings=[Setting("independent directions, d = 512"),
              Setting("d = 2048", {"d": 2048}), Setting("forty contributions (2√40 ≈ 12.6)", {"n_blocks": 40}),
              Setting("aligned contributions (control: 20)", {"directions": "aligned"}, expect=False)])
def independent_sum_claim(seed, *, directions="independent", d=512, n_blocks=10):
    size = residual_sum(directions, n_blocks=n_blocks, d=d, seed=seed)
    return Outcome(near_root_sum(size, n_blocks), size, f"|x_{n_blocks}| = {size:.3f}")


@claim_experiment(
    "C29", statement="One causal attention call equals computing each of 10 positions from its own prefix (within "
                     "1e-5), while the naive shortcut for a (nonlinear, tanh) RNN cell, every step at once, each "
                     "started from h = 0, differs from the sequential run by more than 1e-2; at 4 and 32 positions "
                     "and d_model 64 too",
    figure="largest difference between the RNN's sequential run and the shortcut", kind="float",
    settings=[Setting("an RNN cell as PyTorch initializes it"),
              Setting("4 positions", {"length": 4}), Setting("32 positions", {"length": 32}),
              Setting("d_model 64", {"d_model": 64}),
              Setting("recurrent weight zeroed (control: no step depends on the last)", {"recurrent": False},
                      expect=False)])
def bottleneck_claim(seed, *, recurrent=True, length=10, d_model=32):
    diff = parallel_vs_sequential(seed, length=length, d_model=d_model, recurrent=recurrent)
    return Outcome.of_checks(bottleneck_checks(diff), diff["rnn"],
                             f"attention {diff['attention']:.1e}, RNN {diff['rnn']:.3g}")


@claim_experiment(
    "C30", statement="Without positions or a causal mask, two orders of three tokens give the same outputs permuted "
                     "(within 1e-5): 3 distinct vectors of 6, at d_model 16 to 128",
    figure="largest deviation from 'the same outputs, permuted'", kind="roundoff",
    settings=[Setting("no positions, no mask"),
              Setting("d_model 16", {"d_model": 16}), Setting("d_model 128", {"d_model": 128}),
              Setting("learned position embeddings added (control)", {"positions": True}, expect=False),
              Setting("causal mask alone (control)", {"causal": True}, expect=False)])
def order_claim(seed, *, positions=False, causal=False, d_model=32):
    r = order_blindness(seed, d_model=d_model, positions=positions, causal=causal)
    return Outcome.of_checks(order_checks(r), r["deviation"], f"{r['distinct']} distinct of 6")


@claim_experiment(
    "C31", statement="With the causal mask, a different future from position 8 on leaves the logits at positions 0-7 "
                     "unchanged (within 1e-5) and moves those from 8 on by more than 1e-2; from position 4 on, and at "
                     "d_model 64, too",
    figure="largest change of the logits before the changed position", kind="roundoff",
    settings=[Setting("causal mask in every block"),
              Setting("a different future from position 4 on", {"change_from": 4}),
              Setting("d_model 64", {"d_model": 64}),
              Setting("mask lifted (control: the past sees the future)", {"causal": False}, expect=False)])
def causal_claim(seed, *, causal=True, change_from=8, d_model=32):
    r = future_leak(seed, d_model=d_model, causal=causal, change_from=change_from)
    return Outcome.of_checks(causal_checks(r), r["past"], f"future moved {r['future']:.3g}")


@claim_experiment(
    "C32", statement="At initialization a 12-block TinyLM without normalization lets its stream's RMS grow more than "
                     "50-fold; with Pre-LN it grows less than 10-fold; at d_model 16 to 128 and with GELU too",
    figure="growth of the stream's RMS without normalization", kind="float",
    settings=[Setting("12 blocks"), *(Setting(label, params) for label, params in _WIDTHS),
              Setting("4 blocks (control: a shallow stack does not run away)", {"n_layers": 4}, expect=False),
              Setting("2 blocks (control)", {"n_layers": 2}, expect=False)])
def depth_claim(seed, *, n_layers=12, d_model=32, activation="relu"):
    shape = dict(n_layers=n_layers, d_model=d_model, activation=activation, seed=seed)
    plain, pre = stream_growth("none", "pre", **shape), stream_growth("layer", "pre", **shape)
    return Outcome.of_checks(depth_checks(plain, pre), plain[1] / plain[0], f"Pre-LN {pre[1] / pre[0]:.3g}x")


@claim_experiment(
    "C33", statement="With Post-LN the stream after block 12 has RMS within 1% of 1 (a LayerNorm's output, by "
                     "construction): the stream is normalized after every addition, so 'never normalized' is "
                     "backwards",
    figure="the stream's RMS after block 12", kind="float",
    settings=[Setting("Post-LN", fixed="by construction: the stream after a Post-LN block is a LayerNorm's output, "
                                       "with γ = 1 and β = 0 at initialization"),
              Setting("Pre-LN (control: its stream is never normalized)", {"placement": "pre"}, expect=False)])
def post_stream_claim(seed, *, placement="post"):
    _, end = stream_growth("layer", placement, seed=seed)
    return Outcome(normalized(end), end)


@claim_experiment(
    "C34", statement="In a 12-block Pre-LN TinyLM at initialization the stream's RMS grows between 1.5 and 10-fold "
                     "from the embeddings to block 12 (at d_model 16 to 128, with GELU, and over 24 blocks too): the "
                     "residual path never passes through a norm",
    figure="growth of the Pre-LN stream's RMS", kind="float",
    settings=[Setting("Pre-LN"), *(Setting(label, params) for label, params in _WIDTHS),
              Setting("24 blocks", {"n_layers": 24}),
              Setting("Post-LN (control: the norm resets the stream)", {"placement": "post"}, expect=False)])
def pre_stream_claim(seed, *, placement="pre", n_layers=12, d_model=32, activation="relu"):
    start, end = stream_growth("layer", placement, n_layers=n_layers, d_model=d_model, activation=activation,
                               seed=seed)
    return Outcome(grows_slowly(start, end), end / start)


@claim_experiment(
    "C89", statement="Without normalization the 12-block stack's stream growth at initialization compounds: the log of "
                     "its growth is between 1.7 and 2.4 times the log of a 6-block stack's (a constant factor per block "
                     "gives 2; growth like L or √L gives about 1.39), at d_model 16 to 128 and with GELU too",
    figure="log(growth over 12 blocks) / log(growth over 6 blocks)", kind="float",
    settings=[Setting("no normalization"), *(Setting(label, params) for label, params in _WIDTHS),
              Setting("Pre-LN (control: its stream grows slowly, not by a factor per block)", {"norm": "layer"},
                      expect=False)])
def compounding_claim(seed, *, norm="none", d_model=32, activation="relu"):
    r = compounding(norm, seed=seed, d_model=d_model, activation=activation)
    return Outcome(compounds(r), r["log_ratio"], f"{r['short']:.3g}x over 6, {r['long']:.4g}x over 12")


@claim_experiment(
    "C140", statement="The runaway growth of C32 belongs to the initialization: with GPT-2-style init (every matrix "
                      "N(0, 0.02²), residual projections scaled by 1/√(2·n_layers)) a 12-block TinyLM without "
                      "normalization grows its stream less than 1.5-fold at initialization, at d_model 32 to 768 and "
                      "over 24 blocks; with the course's Xavier-uniform init it grows more than 50-fold",
    figure="growth of the unnormalized stream's RMS over the stack", kind="float",
    settings=[Setting("GPT-2-style init, d_model 32"), Setting("d_model 128", {"d_model": 128}),
              Setting("d_model 768 (GPT-2 small's width)", {"d_model": 768}), Setting("24 blocks", {"n_layers": 24}),
              Setting("the course's Xavier-uniform init (control: grows more than 50-fold, C32)", {"init": "course"},
                      expect=False),
              Setting("PyTorch's default init (limit: a few-fold)", {"init": "torch"}, expect=False),
              Setting("std 0.02 without the 1/√(2·n_layers) scaling, d_model 768 (limit)",
                      {"d_model": 768, "scaled": False}, expect=False)])
def init_growth_claim(seed, *, init="gpt2", d_model=32, n_layers=12, scaled=True):
    growth = init_growth(init, n_layers=n_layers, d_model=d_model, seed=seed, scaled=scaled)
    return Outcome(stays_near_one(growth), growth, f"{growth:.3g}x over {n_layers} blocks")

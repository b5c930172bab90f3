"""Notebook 07 (review): the chain-of-problems figure, a model-answer button per open question, and a picker that
brings any notebook's checkpoint quiz into this kernel so score_summary() can count it."""
from __future__ import annotations

from dataclasses import dataclass

import ipywidgets as widgets
import plotly.graph_objects as go

from ..course import NOTEBOOKS
from ..figures import color, static_figure
from ..panel import Panel, register_panel
from ..quiz import load_quiz, parse_ref, quiz_names, reveal

__all__ = ["Link", "CHAIN", "chain_figure", "reveal_button", "checkpoint_names", "checkpoint_picker"]


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
# Box texts carry <br> breaks so they fit their boxes in a figure down to about 800 px wide.
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
                        "", "", height=520, margin=dict(l=10, r=10, b=30),
                        legend=dict(y=-0.02, x=0.5, xanchor="center"))
    hover_x, hover_y, hover_text = [], [], []
    for i, link in enumerate(CHAIN):
        centre = 13.0 + gap * i
        notes.append(dict(x=centre, y=95.5, text=f"<b>Chapter {link.chapter}: {link.idea}</b>", showarrow=False,
                          font=dict(size=14)))
        for label, key, fill, edge in ROWS:
            top = tops[key]
            shapes.append(dict(type="rect", x0=centre - width / 2, x1=centre + width / 2, y0=top - height, y1=top,
                               fillcolor=fill, line=dict(color=edge, width=2)))
            notes.append(dict(x=centre, y=top - height / 2, text=getattr(link, key), showarrow=False,
                              font=dict(size=11), align="center"))
            hover_x.append(centre)
            hover_y.append(top - height / 2)
            hover_text.append(f"<b>{link.chapter}, {label}</b><br>{getattr(link, key)}<br><i>{link.evidence}</i>")
        arrow(centre, tops["problem"] - height, centre, tops["solution"])
        arrow(centre, tops["solution"] - height, centre, tops["leaves"])
        if i + 1 < len(CHAIN):
            # The leftover problem of chapter i becomes the problem of chapter i + 1.
            arrow(centre + width / 2, tops["leaves"] - height / 2, centre + gap - width / 2,
                  tops["problem"] - height / 2, colour=color(3))
    notes.append(dict(x=50, y=9, showarrow=False, font=dict(size=12, color="#444"),
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

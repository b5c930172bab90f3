"""The notebook side: `answer()` and `reveal()` in a cell, `score_summary()`, and the quiz widget (`Quiz.show()`)."""
from __future__ import annotations

import html
import os
import sys
from dataclasses import dataclass, replace
from typing import Any

from .files import load_quiz, parse_ref
from . import model
from .markup import _inline, markdown_html
from .model import Question, Quiz, Result, _fmt, _plain
from .source import answers_in_source

# Longest student id kept: the batch grader reads at most this much of a `setup(student=...)` literal.
MAX_STUDENT_CHARS = 200


@dataclass(frozen=True, repr=False)
class Reveal:
    """An open item's model answer and rubric points, shown on request."""
    ref: str
    prompt: str
    model_answer: str
    rubric: tuple[str, ...]

    def __repr__(self) -> str:
        points = "".join(f"\n  - {_plain(p)}" for p in self.rubric)
        return f"{self.ref}\nModel answer: {_plain(self.model_answer)}" + (
            f"\nA strong answer covers:{points}" if points else "")

    def _repr_html_(self) -> str:
        points = "".join(f"<li>{_inline(p)}</li>" for p in self.rubric)
        rubric = f"<div><b>A strong answer covers</b></div><ul>{points}</ul>" if points else ""
        return (f'<div style="border-left:4px solid #009E73;padding:4px 10px;margin:4px 0">'
                f"<div><b>{html.escape(self.ref)}: model answer</b></div>{markdown_html(self.model_answer)}"
                f"{rubric}</div>")


@dataclass(frozen=True)
class SummaryRow:
    """One quiz's line in score_summary(); `correct` and `score` are None for quizzes of open items only."""
    quiz: str
    title: str
    items: int
    answered: int
    correct: int | None
    score: float | None
    points: float | None


@dataclass(frozen=True, repr=False)
class ScoreSummary:
    """What this kernel session has answered, per quiz; displays as a table."""
    rows: tuple[SummaryRow, ...]

    def _cells(self) -> list[tuple[str, ...]]:
        return [(r.quiz, f"{r.answered}/{r.items}", "—" if r.correct is None else str(r.correct),
                 "—" if r.score is None else f"{_fmt(r.score)}/{_fmt(r.points)}") for r in self.rows]

    def __repr__(self) -> str:
        if not self.rows:
            return "No quiz answered yet in this session."
        head = ("quiz", "answered", "correct", "points")
        rows = [head, *self._cells()]
        widths = [max(len(row[i]) for row in rows) for i in range(4)]
        return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) for row in rows)

    def _repr_html_(self) -> str:
        if not self.rows:
            return "<p>No quiz answered yet in this session.</p>"
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in self._cells())
        return ("<table><thead><tr><th>quiz</th><th>answered</th><th>correct</th><th>points</th></tr></thead>"
                f"<tbody>{body}</tbody></table>")


_SESSION: dict[str, Result] = {}
_STUDENT: str | None = None


def set_student(student: str | None) -> None:
    """Use this student's numbers in parameterised items from now on (None: fall back to $JUPYTERHUB_USER)."""
    global _STUDENT
    if student is not None and (not isinstance(student, str) or not student.strip()
                                or len(student) > MAX_STUDENT_CHARS):
        raise ValueError(f"student must be a non-empty string of at most {MAX_STUDENT_CHARS} characters, "
                         f"e.g. your login; got {student!r:.60}")
    _STUDENT = student


def current_student() -> str | None:
    """Whose numbers this kernel's quizzes use: setup(student=...), else $JUPYTERHUB_USER, else None (the chapter's)."""
    return _STUDENT if _STUDENT is not None else os.environ.get("JUPYTERHUB_USER") or None


def _in_ipython() -> bool:
    ipython = sys.modules.get("IPython")
    return ipython is not None and ipython.get_ipython() is not None


def _current_cell() -> str | None:
    """The source of the notebook cell now running, or None outside IPython."""
    if not _in_ipython():
        return None
    history = sys.modules["IPython"].get_ipython().history_manager.input_hist_raw
    return history[-1] if history else None


def _batch_note(ref: str, cell: str | None) -> str:
    """A warning when the cell's answer to ref is code, which the batch grader (it never runs code) scores as 0."""
    if not cell:
        return ""
    found = [f for f in answers_in_source(cell)[0] if f.ref == ref]
    if not found or not found[-1].problem:
        return ""
    return (f"**Note:** if your instructor collects this notebook, the grader reads this cell without running it, "
            f"and your answer is code ({found[-1].problem}). Type the value itself, "
            f'`answer("{ref}", <the value>)`, so that it counts there too.')


def answer(ref: str, response: Any = ...) -> Result:
    """Grade a response to "<quiz>.<id>" with current_student()'s numbers, record it for score_summary() and return
    the Result (... = not yet: it shows the question)."""
    quiz_name, qid = parse_ref(ref)
    result = load_quiz(quiz_name).for_student(current_student()).grade(qid, response)
    note = _batch_note(result.ref, _current_cell())
    if note:
        result = replace(result, feedback=f"{result.feedback}\n\n{note}")
    if result.status != "unanswered":
        _SESSION[result.ref] = result
    # The returned Result is the cell's output in a notebook, shown once; a plain script has no such echo.
    if not _in_ipython() and not hasattr(sys, "ps1"):
        print(result)
    return result


def reveal(ref: str) -> Reveal:
    """Show an open item's model answer and rubric points (auto-scored items explain themselves through answer())."""
    quiz_name, qid = parse_ref(ref)
    quiz = load_quiz(quiz_name)
    q = quiz.question(qid)
    if quiz.keyless:
        return Reveal(ref=q.ref, prompt=q.prompt, rubric=(),
                      model_answer="The model answers are with your instructor: this copy of the course has no keys. "
                                   "Hand in this notebook to have your answers graded.")
    if q.scored:
        return Reveal(ref=q.ref, prompt=q.prompt, rubric=(),
                      model_answer=f'This item is auto-scored: `answer("{q.ref}", <your answer>)` shows its '
                                   "explanation once you have answered.")
    return Reveal(ref=q.ref, prompt=q.prompt, model_answer=q.model_answer, rubric=q.rubric)


def score_summary() -> ScoreSummary:
    """Per quiz answered in this kernel session: items answered, correct, and points (open items and keyless quizzes
    count answers only)."""
    rows = []
    for name in dict.fromkeys(ref.partition(".")[0] for ref in _SESSION):
        quiz = load_quiz(name)
        results = [r for ref, r in _SESSION.items() if ref.partition(".")[0] == name]
        scored = quiz.points > 0 and not quiz.keyless
        rows.append(SummaryRow(
            quiz=name, title=quiz.title, items=len(quiz.questions), answered=sum(r.answered for r in results),
            correct=sum(r.correct for r in results) if scored else None,
            score=sum(r.score for r in results) if scored else None, points=quiz.points if scored else None))
    return ScoreSummary(rows=tuple(rows))


# ------------------------------------------------------------------------------------------------------------ views

@dataclass
class ItemControls:
    """One item's widgets in Quiz.show(); `reveal` and the `model` box it fills exist for open items only."""
    input: Any
    check: Any
    feedback: Any
    reveal: Any = None
    model: Any = None


def build_view(quiz: Quiz):
    """The quiz, as given (a student's numbers already in it), as an ipywidgets VBox; `.controls[qid]` holds each
    item's widgets, `.score` the score line."""
    import ipywidgets as widgets

    score = widgets.HTML()
    latest: dict[str, Result] = {}

    def update_score() -> None:
        got = sum(r.score for r in latest.values())
        done = sum(r.answered for r in latest.values())
        points = f"Score: {_fmt(got)} / {_fmt(quiz.points)} points · " if quiz.points and not quiz.keyless else ""
        score.value = f"<b>{points}{done} of {len(quiz.questions)} answered</b>"

    def on_check(q: Question, controls: ItemControls) -> None:
        result = quiz.grade(q.id, controls.input.value)
        if result.status != "unanswered":
            latest[q.id] = _SESSION[result.ref] = result
        if quiz.keyless and result.status == "recorded":
            # With no key, the practice form can only say the answer is readable; the answer cell is handed in.
            given = f"({result.response})" if result.kind == "choice" else (result.response or "your answer")
            result = replace(result, feedback=f"Readable: {given}. This form is practice and is not collected: to "
                                              "hand this answer in, put it in its answer cell, "
                                              f'`answer("{result.ref}", ...)`.')
        # The widget shows the question above its input already.
        controls.feedback.value = replace(result, prompt="", choices=())._repr_html_()
        update_score()

    boxes, all_controls = [], {}
    for n, q in enumerate(quiz.questions, 1):
        prompt = widgets.HTMLMath(value=f"<b>{n}.</b> {markdown_html(q.prompt)}")
        parts = [prompt]
        if q.kind == "choice":
            parts.append(widgets.HTMLMath(value="".join(
                f"<p><b>({c.label})</b> {_inline(c.text)}</p>" for c in q.choices)))
            entry = widgets.ToggleButtons(options=[c.label for c in q.choices], value=None,
                                          description="Your choice:", style={"description_width": "initial"})
        elif q.kind == "numeric":
            entry = widgets.Text(placeholder="a number, e.g. 0.5, -3, 7/8 or 1e-5", description="Your answer:",
                                 style={"description_width": "initial"})
        else:
            entry = widgets.Textarea(placeholder="Write your answer here.", rows=4,
                                     layout=widgets.Layout(width="95%"))
        controls = ItemControls(input=entry, check=widgets.Button(
            description="Record" if q.kind == "open" else "Check", button_style="primary"),
            feedback=widgets.HTMLMath())
        controls.check.on_click(lambda _button, q=q, c=controls: on_check(q, c))
        row = [controls.check]
        if q.kind == "open":
            controls.reveal = widgets.Button(description="Show model answer")
            controls.model = widgets.HTMLMath()
            controls.reveal.on_click(
                lambda _button, q=q, c=controls: setattr(c.model, "value", reveal(q.ref)._repr_html_()))
            row.append(controls.reveal)
        parts += [entry, widgets.HBox(row), controls.feedback]
        if controls.model is not None:
            parts.append(controls.model)
        boxes.append(widgets.VBox(parts, layout=widgets.Layout(margin="0 0 12px 0")))
        all_controls[q.id] = controls
    update_score()
    heading = widgets.HTMLMath(f"<h3>{html.escape(quiz.title)}</h3>{markdown_html(quiz.about)}")
    view = widgets.VBox([heading, *boxes, score])
    view.controls = all_controls
    view.score = score
    return view


model._VIEW = (build_view, current_student)  # Quiz.show() builds its widgets here

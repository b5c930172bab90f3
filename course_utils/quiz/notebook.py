"""The notebook side: `answer()` and `reveal()` in a cell, `score_summary()`, and the quiz widget (`Quiz.show()`)."""
from __future__ import annotations

import html
import os
import re
import sys
from dataclasses import dataclass, replace
from typing import Any

from .files import load_quiz, parse_ref
from . import model
from .markup import _inline, markdown_html
from .formulas import _show
from .model import Question, Quiz, Result, _fmt, _plain
from .source import answers_in_source

# Longest student id kept: the batch grader reads at most this much of a `setup(student=...)` literal.
MAX_STUDENT_CHARS = 200


@dataclass(frozen=True, repr=False)
class Reveal:
    """An open item's model answer (what you would say aloud), its evidence (folded) and rubric, shown on request."""
    ref: str
    prompt: str
    model_answer: str
    rubric: tuple[str, ...]
    evidence: str = ""

    def __repr__(self) -> str:
        points = "".join(f"\n  - {_plain(p)}" for p in self.rubric)
        evidence = f"\nThe evidence: {_plain(self.evidence)}" if self.evidence else ""
        return f"{self.ref}\nModel answer: {_plain(self.model_answer)}" + evidence + (
            f"\nA strong answer covers:{points}" if points else "")

    def _repr_html_(self) -> str:
        points = "".join(f"<li>{_inline(p)}</li>" for p in self.rubric)
        rubric = f"<div><b>A strong answer covers</b></div><ul>{points}</ul>" if points else ""
        evidence = (f"<details><summary><b>The evidence</b> (where the course measured it, and the nuance)</summary>"
                    f"{markdown_html(self.evidence)}</details>" if self.evidence else "")
        return (f'<div style="border-left:4px solid #009E73;padding:4px 10px;margin:4px 0">'
                f"<div><b>{html.escape(self.ref)}: model answer</b></div>{markdown_html(self.model_answer)}"
                f"{evidence}{rubric}</div>")


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

    @property
    def total(self) -> SummaryRow | None:
        """The rows summed (None with fewer than two): items and answers of every quiz; correct answers and points of
        the scored ones (None when no quiz here is scored)."""
        if len(self.rows) < 2:
            return None
        scored = [r for r in self.rows if r.score is not None]
        return SummaryRow(quiz="total", title="", items=sum(r.items for r in self.rows),
                          answered=sum(r.answered for r in self.rows),
                          correct=sum(r.correct for r in scored) if scored else None,
                          score=sum(r.score for r in scored) if scored else None,
                          points=sum(r.points for r in scored) if scored else None)

    def _cells(self) -> list[tuple[str, ...]]:
        rows = [*self.rows, *([self.total] if self.total else [])]
        return [(r.quiz, f"{r.answered}/{r.items}", "—" if r.correct is None else str(r.correct),
                 "—" if r.score is None else f"{_fmt(r.score)}/{_fmt(r.points)}") for r in rows]

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


def numbers_line() -> str:
    """The line setup() prints when a student id is in effect: whose numbers the quizzes use and where that id came
    from. Saved with the notebook's output, it tells the batch grader which of a student's ids to grade with (the
    hub's `jupyter-ada` home folder holds the work of $JUPYTERHUB_USER `ada`); "" without an id."""
    student = current_student()
    if student is None:
        return ""
    source = "setup(student=...)" if _STUDENT is not None else "$JUPYTERHUB_USER"
    return (f"Quiz numbers: your own, drawn for {student!r} (from {source}). Keep this output when you hand the "
            "notebook in.")


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
    return Reveal(ref=q.ref, prompt=q.prompt, model_answer=q.model_answer, rubric=q.rubric, evidence=q.evidence)


def score_summary() -> ScoreSummary:
    """Per quiz answered in this kernel session: items answered, correct, and points (open items and keyless quizzes
    count answers only); a right answer given after the practice form showed it counts as neither correct nor points.
    With two quizzes or more the table ends with their total."""
    rows = []
    for name in dict.fromkeys(ref.partition(".")[0] for ref in _SESSION):
        quiz = load_quiz(name)
        results = [r for ref, r in _SESSION.items() if ref.partition(".")[0] == name]
        scored = quiz.points > 0 and not quiz.keyless
        rows.append(SummaryRow(
            quiz=name, title=quiz.title, items=len(quiz.questions), answered=sum(r.answered for r in results),
            correct=sum(r.correct and r.ref not in _SHOWN for r in results) if scored else None,
            score=sum(r.score for r in results) if scored else None, points=quiz.points if scored else None))
    return ScoreSummary(rows=tuple(rows))


# ------------------------------------------------------------------------------------------------------------ views

# What the widget is, said under its title: it is a practice form, and only answer cells are handed in.
PRACTICE_NOTE = ("Practice: what you enter here gets feedback at once and is not collected; a graded class hands in "
                 "the `answer()` cells.")
KEYLESS_NOTE = ("Not graded here: this form only checks that an answer is readable and is not collected. To hand an "
                "answer in, put it in its answer cell, `answer(...)`.")
# The refs whose answer a widget has shown in this kernel, so that a later right answer says so, in any view of it.
_SHOWN: set[str] = set()


@dataclass
class ItemControls:
    """One item's widgets in Quiz.show(). `reveal` fills `shown`: an open item's model answer at any time, a scored
    item's key and explanation after a wrong try (no such button in a keyless release); `chosen` names the pick."""
    input: Any
    check: Any
    feedback: Any
    reveal: Any = None
    shown: Any = None
    chosen: Any = None


def _key_text(q: Question) -> str:
    """The key as the quiz texts write it (`{answer}` in a hint renders the same way)."""
    if q.kind == "choice":
        return f"({q.answer})"
    return f"{q.answer:.{q.decimals}f}" if q.decimals is not None else _show(q.answer)


def _writes_number(text: str, number: str) -> bool:
    """Whether `number` stands on its own in text (3.54 in "rounds to 3.54", not in 13.54 or 3.541)."""
    return re.search(rf"(?<![\d.]){re.escape(number)}(?!\.?\d)", text) is not None


def _states_key(q: Question, text: str) -> bool:
    """Whether text gives q's key away: a choice's label or wording, or the key's number where the prompt does not
    already give that number (a hint may say "16 blocks" when the prompt asks about 16 blocks)."""
    if q.kind == "choice":
        key = next(c for c in q.choices if c.label == q.answer)
        return _key_text(q) in text or " ".join(key.text.split()).casefold() in " ".join(text.split()).casefold()
    return _writes_number(text, _key_text(q)) and not _writes_number(q.prompt, _key_text(q))


def _shown_as(result: Result) -> str:
    return f"({result.response})" if result.kind == "choice" else result.response or "your answer"


def _practice_view(q: Question, result: Result, keyless: bool = False) -> Result:
    """What the practice form shows of a graded try.

    A wrong try shows the verdict and the hint for the slip it fits, never the explanation: the retry must still be
    the learner's own work. A hint that writes the key out (fine in an answer cell, which shows the explanation
    anyway) is held back here. A right answer after the answer was shown says so and earns no points in this form.
    """
    if result.status == "wrong":
        feedback = result.feedback
        if _states_key(q, feedback.removeprefix(_shown_as(result))):  # the learner's own answer, echoed, is no leak
            feedback = f"{_shown_as(result)} is not the answer. Try again, or show the answer."
        return replace(result, feedback=feedback, explanation="")
    if result.status == "correct" and result.ref in _SHOWN:
        return replace(result, score=0.0, explanation="", feedback=f"{result.feedback.removesuffix('.')}, after the "
                                                                    "answer was shown: no points for it here.")
    if keyless and result.status == "recorded":
        # With no key, the practice form can only say the answer is readable; the answer cell is handed in.
        return replace(result, feedback=f"Readable: {_shown_as(result)}. This form is practice and is not collected: "
                                        "to hand this answer in, put it in its answer cell, "
                                        f'`answer("{result.ref}", ...)`.')
    return result


def _answer_html(q: Question) -> str:
    """A scored item's key and explanation, as "Show the answer" displays them."""
    if q.kind == "choice":
        key = next(c for c in q.choices if c.label == q.answer)
        given = f"<b>({html.escape(key.label)})</b> {_inline(key.text)}"
    else:
        given = f"<b>{html.escape(_key_text(q))}</b>"
    return (f'<div style="border-left:4px solid #009E73;padding:4px 10px;margin:4px 0">'
            f"<div><b>The answer:</b> {given}</div><div><b>Explanation.</b> {markdown_html(q.explanation)}</div>"
            "</div>")


def _entry(q: Question, widgets) -> Any:
    """The input of one item: a button per choice, a one-line box for a number, a text area for an open item."""
    if q.kind == "choice":
        return widgets.ToggleButtons(options=[c.label for c in q.choices], value=None, description="Your choice:",
                                     tooltip="Your choice", tooltips=[f"Choice ({c.label})" for c in q.choices],
                                     style={"description_width": "initial"})
    if q.kind == "numeric":
        # Wide enough, in em so that it grows with the font, for the whole placeholder and a typed fraction.
        return widgets.Text(placeholder="e.g. 0.5, -3, 7/8 or 1e-5", description="Your answer:",
                            tooltip="Your answer: one number", continuous_update=False,
                            style={"description_width": "initial"}, layout=widgets.Layout(width="24em"))
    return widgets.Textarea(placeholder="Write your answer here.", rows=4, tooltip="Your answer",
                            layout=widgets.Layout(width="95%"))


def _show_pick(q: Question, controls: ItemControls) -> None:
    """Mark the picked choice beyond ToggleButtons' faint shading: a check mark on it and a line naming it."""
    picked = controls.input.value
    controls.input.icons = ["check" if c.label == picked else "" for c in q.choices]
    text = next((c.text for c in q.choices if c.label == picked), None)
    controls.chosen.value = "" if text is None else f"You picked <b>({html.escape(picked)})</b> {_inline(text)}"
    controls.feedback.value = ""  # a verdict on the previous pick must not sit beside this one


def _item(n: int, q: Question, keyless: bool, widgets, text) -> tuple[ItemControls, Any]:
    """One item's controls, not yet wired, and the box that lays them out under its question."""
    parts = [text(f"<b>{n}.</b> {markdown_html(q.prompt)}")]
    if q.kind == "choice":
        parts.append(text("".join(f"<p><b>({c.label})</b> {_inline(c.text)}</p>" for c in q.choices)))
    verb = "Record" if q.kind == "open" else "Check"
    controls = ItemControls(input=_entry(q, widgets), feedback=text(), check=widgets.Button(
        description=verb, button_style="primary", tooltip=f"{verb} your answer"))
    if q.kind == "choice":
        controls.chosen = text()
    if not q.scored or not keyless:
        label = "Show model answer" if q.kind == "open" else "Show the answer"
        controls.reveal = widgets.Button(description=label, tooltip=label)
        controls.reveal.layout.display = None if q.kind == "open" else "none"  # scored: after a wrong try
        controls.shown = text()
    row = widgets.HBox([c for c in (controls.check, controls.reveal) if c is not None])
    parts += [c for c in (controls.input, controls.chosen, row, controls.feedback, controls.shown) if c is not None]
    return controls, widgets.VBox(parts, layout=widgets.Layout(margin="0 0 12px 0"))


def build_view(quiz: Quiz):
    """The quiz, as given (a student's numbers already in it), as an ipywidgets VBox; `.controls[qid]` holds each
    item's widgets, `.score` the score line."""
    # Loaded only when a quiz is shown: the batch grader imports this module and never shows one.
    import ipywidgets as widgets

    from ..figures import PageHelper

    def text(value: str = "") -> Any:
        # An unset tooltip reaches the page as title="null" on the widget's (empty) label.
        return widgets.HTMLMath(value=value, tooltip="")

    score = text()
    latest: dict[str, Result] = {}

    def update_score() -> None:
        got = sum(r.score for r in latest.values())
        done = sum(r.answered for r in latest.values())
        points = f"Score: {_fmt(got)} / {_fmt(quiz.points)} points · " if quiz.points and not quiz.keyless else ""
        shown = sum(q.ref in _SHOWN for q in quiz.questions if q.scored)
        note = f" · {shown} answer{'s' * (shown != 1)} shown (no points)" if shown else ""
        score.value = f"<b>{points}{done} of {len(quiz.questions)} answered{note}</b>"

    def on_check(q: Question, controls: ItemControls) -> None:
        result = quiz.grade(q.id, controls.input.value)
        shown = _practice_view(q, result, quiz.keyless)
        if result.status != "unanswered":
            latest[q.id] = _SESSION[result.ref] = replace(result, score=shown.score)
        # The widget shows the question above its input already.
        controls.feedback.value = replace(shown, prompt="", choices=())._repr_html_()
        if result.status == "wrong" and controls.reveal is not None:
            controls.reveal.layout.display = None
        update_score()

    def on_reveal(q: Question, controls: ItemControls) -> None:
        if q.scored:
            _SHOWN.add(q.ref)
            controls.shown.value = _answer_html(q)
            update_score()
        else:
            controls.shown.value = reveal(q.ref)._repr_html_()

    def on_number(q: Question, controls: ItemControls, change: dict) -> None:
        if change["new"].strip():  # clearing the box is not an answer
            on_check(q, controls)

    boxes, all_controls = [], {}
    for n, q in enumerate(quiz.questions, 1):
        controls, box = _item(n, q, quiz.keyless, widgets, text)
        controls.check.on_click(lambda _button, q=q, c=controls: on_check(q, c))
        if controls.reveal is not None:
            controls.reveal.on_click(lambda _button, q=q, c=controls: on_reveal(q, c))
        if q.kind == "choice":
            controls.input.observe(lambda _change, q=q, c=controls: _show_pick(q, c), names="value")
        if q.kind == "numeric":
            # ipywidgets 8 sends a Text's value on Enter or when the box loses focus (continuous_update=False), so
            # this checks on Enter-or-blur. Its Enter-only "submit" message is not used: it leaves the browser at
            # once, while value updates queue behind any unanswered one, so it can arrive before the last digits.
            controls.input.observe(lambda change, q=q, c=controls: on_number(q, c, change), names="value")
        boxes.append(box)
        all_controls[q.id] = controls
    update_score()
    note = KEYLESS_NOTE if quiz.keyless else PRACTICE_NOTE
    heading = text(f"<h3>{html.escape(quiz.title)}</h3><p><i>{_inline(note)}</i></p>{markdown_html(quiz.about)}")
    view = widgets.VBox([heading, *boxes, score, PageHelper()])
    view.add_class("course-widget")
    view.add_class("course-quiz")
    view.controls = all_controls
    view.score = score
    return view


model._VIEW = (build_view, current_student)  # Quiz.show() builds its widgets here

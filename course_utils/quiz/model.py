"""Quiz items and pure grading: the data classes read from quizzes/*.toml and the functions that grade one response.

Nothing here touches files, widgets or notebooks: `Quiz.grade(question_id, response)` is a pure function of the key
and the response, used alike by `answer()` in a notebook and by the batch grader.
"""
from __future__ import annotations

import math
import numbers
import re
import reprlib
import sys
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

KINDS = ("choice", "numeric", "open")
# Longer responses are refused before any parsing, so a pasted megabyte costs nothing.
MAX_RESPONSE_CHARS = {"choice": 2_000, "numeric": 200, "open": 20_000}
# A mistake's value matches within this relative tolerance unless its entry sets `tolerance`.
MISTAKE_REL_TOL = 5e-3
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_LABEL = re.compile(r"\(?([a-z])[).:]?")
_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 60
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 4



class QuizFormatError(ValueError):
    """A quiz file that does not follow the schema in quizzes/README.md."""


class UnknownQuizError(KeyError):
    """A quiz name or question id that does not exist; the message lists those that do."""

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True)
class Choice:
    """One answer choice; `feedback` says why it is wrong and is empty for the key."""
    label: str
    text: str
    feedback: str = ""


@dataclass(frozen=True)
class Mistake:
    """A wrong numeric value worth a targeted hint, e.g. the unbiased variance."""
    value: float
    feedback: str
    tolerance: float | None = None

    def matches(self, x: float) -> bool:
        """Whether x is this mistake (absolute `tolerance` if set, else MISTAKE_REL_TOL relative)."""
        if self.tolerance is not None:
            return abs(x - self.value) <= self.tolerance
        return math.isclose(x, self.value, rel_tol=MISTAKE_REL_TOL, abs_tol=1e-12)


@dataclass(frozen=True)
class Question:
    """One quiz item as read from its file; `answer` is the key (a choice label or a number, None for open items)."""
    quiz: str
    id: str
    kind: str
    prompt: str
    section: str
    points: float
    explanation: str = ""
    answer: str | float | None = None
    choices: tuple[Choice, ...] = ()
    tolerance: float | None = None
    rel_tolerance: float | None = None
    decimals: int | None = None
    mistakes: tuple[Mistake, ...] = ()
    model_answer: str = ""
    rubric: tuple[str, ...] = ()

    @property
    def ref(self) -> str:
        """The reference used by answer() and the gradebook, "<quiz>.<id>"."""
        return f"{self.quiz}.{self.id}"

    @property
    def scored(self) -> bool:
        """Open items are never auto-scored."""
        return self.kind != "open"

    @property
    def expected_form(self) -> str:
        """What a readable response looks like, for feedback on one that is not."""
        if self.kind == "choice":
            labels = ", ".join(f'"{c.label}"' for c in self.choices)
            return f"the letter of one choice as a string: one of {labels}"
        if self.kind == "numeric":
            places = f", rounded to {self.decimals} decimal places" if self.decimals is not None else ""
            return f"one number such as 0.5, -3, 7/8 or 1e-5{places}"
        return 'your answer as text in quotes, e.g. "Because ..."'

    def is_key(self, x: float) -> bool:
        """Whether the number x grades correct: within half a unit of the last decimal, or within the tolerances."""
        if self.decimals is not None:
            return abs(x - self.answer) <= 0.5 * 10.0 ** -self.decimals * (1 + 1e-9)
        return math.isclose(x, self.answer, rel_tol=self.rel_tolerance or 0.0, abs_tol=self.tolerance or 0.0)


@dataclass(frozen=True, repr=False)
class Result:
    """The outcome of grading one response; it displays (as text or HTML) as its feedback and explanation."""
    ref: str
    kind: str
    # "correct", "wrong", "unreadable" (not in the expected form), "unanswered" (None, "" or ...) or "recorded"
    # (an open item's text, never scored).
    status: str
    score: float
    points: float
    feedback: str
    explanation: str = ""
    response: str = ""  # how the grader read the response, e.g. "b" or "1.25"; the item analysis counts these

    @property
    def correct(self) -> bool:
        """True only for a response that matches the key."""
        return self.status == "correct"

    @property
    def answered(self) -> bool:
        """Whether the response was readable (right, wrong or recorded)."""
        return self.status in ("correct", "wrong", "recorded")

    def _headline(self) -> str:
        marks = {"correct": "✓ Correct", "wrong": "✗ Not quite", "unreadable": "? Could not read this answer",
                 "unanswered": "… Not answered yet", "recorded": "✎ Recorded"}
        scored = f" ({_fmt(self.score)}/{_fmt(self.points)})" if self.kind != "open" else ""
        return f"{marks[self.status]}{scored} · {self.ref}"

    def __repr__(self) -> str:
        lines = [self._headline(), self.feedback]
        if self.explanation:
            lines.append(f"Explanation: {self.explanation}")
        return "\n".join(_plain(line) for line in lines)

    def _repr_html_(self) -> str:
        # Blue and orange stay distinct under the common colour-vision deficiencies; the mark repeats the verdict.
        colour = {"correct": "#0072B2", "wrong": "#D55E00", "recorded": "#0072B2"}.get(self.status, "#777777")
        explanation = (f"<div><b>Explanation.</b> {markdown_html(self.explanation)}</div>"
                       if self.explanation else "")
        return (f'<div style="border-left:4px solid {colour};padding:4px 10px;margin:4px 0">'
                f'<div style="color:{colour};font-weight:bold">{html.escape(self._headline())}</div>'
                f"<div>{markdown_html(self.feedback)}</div>{explanation}</div>")



@dataclass(frozen=True)
class Quiz:
    """A named list of questions; grade() is pure, show() builds the widgets."""
    name: str
    title: str
    questions: tuple[Question, ...]
    about: str = ""
    _by_id: dict[str, Question] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_id", {q.id: q for q in self.questions})

    @property
    def ids(self) -> tuple[str, ...]:
        """Question ids in file order."""
        return tuple(q.id for q in self.questions)

    @property
    def points(self) -> float:
        """Total points of the auto-scored items."""
        return sum(q.points for q in self.questions if q.scored)

    def question(self, question_id: str) -> Question:
        """The question with this id; an unknown id raises UnknownQuizError naming the ids that exist."""
        try:
            return self._by_id[question_id]
        except (KeyError, TypeError):
            raise UnknownQuizError(f"quiz {self.name!r} has no question {question_id!r}; "
                                   f"its questions are {', '.join(self.ids)}") from None

    def grade(self, question_id: str, response: Any) -> Result:
        """Grade one response against the key; never raises for any response, has no side effects."""
        q = self.question(question_id)
        try:
            return _grade(q, response)
        except Exception:  # noqa: BLE001 - a response must never crash grading; this is the last line of defence
            return _result(q, "unreadable", f"This answer could not be read. Give {q.expected_form}.")

    def show(self):
        """Build the quiz as an ipywidgets VBox; `.controls[qid]` holds each item's widgets, `.score` the score line."""
        from .notebook import build_view  # widgets load only when a quiz is shown

        return build_view(self)



# ---------------------------------------------------------------------------------------------------------- grading

def _fmt(x: float) -> str:
    return f"{x:g}" if x == int(x) else f"{x:.4g}"


def _plain(text: str) -> str:
    """Undo the hard wrapping of quiz files for plain-text display, keeping paragraph breaks."""
    return re.sub(r"(?<!\n)\n(?!\n)", " ", text)


def _short(x: Any) -> str:
    """A repr cut to about 60 characters that never raises (a huge int or a broken __repr__ would)."""
    try:
        return _REPR.repr(x)
    except Exception:  # noqa: BLE001 - describing a response must not fail on a hostile one
        return f"a {type(x).__name__}"


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


def _result(q: Question, status: str, feedback: str, response: str = "") -> Result:
    # The explanation would give the key away, so it is shown only once the learner has committed to an answer.
    explanation = q.explanation if status in ("correct", "wrong") else ""
    score = q.points if status == "correct" else 0.0
    return Result(ref=q.ref, kind=q.kind, status=status, score=score, points=q.points, feedback=feedback,
                  explanation=explanation, response=response)


def _grade(q: Question, response: Any) -> Result:
    if response is None or response is Ellipsis or (isinstance(response, str) and not response.strip()):
        how = ("type your answer between the triple quotes of its answer cell and run it" if q.kind == "open"
               else f'in an answer cell, replace the `...` in `answer("{q.ref}", ...)`')
        return _result(q, "unanswered", f"Not answered yet. Give {q.expected_form}; {how}.")
    if isinstance(response, str) and len(response) > MAX_RESPONSE_CHARS[q.kind]:
        return _result(q, "unreadable", f"This answer is {len(response):,} characters long, more than the "
                                        f"{MAX_RESPONSE_CHARS[q.kind]:,} accepted here. Give {q.expected_form}.")
    if q.kind == "choice":
        return _grade_choice(q, response)
    if q.kind == "numeric":
        return _grade_numeric(q, response)
    if not isinstance(response, str):
        return _result(q, "unreadable", f"Give {q.expected_form}.")
    return _result(q, "recorded", "Recorded; open questions are not scored. Compare your answer with the model "
                                  f'answer: `reveal("{q.ref}")`.', response=response.strip()[:80])


def _grade_choice(q: Question, response: Any) -> Result:
    if not isinstance(response, str):
        return _result(q, "unreadable", f"Give {q.expected_form}; got {_short(response)}.")
    text = _norm(response)
    label = _LABEL.fullmatch(text)
    picked = next((c for c in q.choices if (label and c.label == label.group(1)) or _norm(c.text) == text), None)
    if picked is None:
        return _result(q, "unreadable", f"There is no choice {_short(response.strip())}. Give {q.expected_form}.")
    if picked.label == q.answer:
        return _result(q, "correct", f"({picked.label}) is right.", response=picked.label)
    return _result(q, "wrong", f"({picked.label}): {picked.feedback}", response=picked.label)


def _grade_numeric(q: Question, response: Any) -> Result:
    x = _read_number(response)
    if isinstance(x, str):
        return _result(q, "unreadable", f"{x} Give {q.expected_form}.")
    shown = f"{x:.10g}"
    if q.is_key(x):
        return _result(q, "correct", f"{shown} is right.", response=shown)
    mistake = next((m for m in q.mistakes if m.matches(x)), None)
    if mistake is not None:
        return _result(q, "wrong", f"{shown}: {mistake.feedback}", response=shown)
    if q.answer != 0 and q.is_key(-x):
        return _result(q, "wrong", f"{shown}: the size is right but the sign is not.", response=shown)
    if q.decimals is not None and isinstance(response, str) and _too_few_decimals(q, response, x):
        return _result(q, "wrong", f"{shown} is on the way, but give {q.decimals} decimal places.", response=shown)
    return _result(q, "wrong", f"{shown} is not the value asked for; check each step against the formula.",
                   response=shown)


def _too_few_decimals(q: Question, text: str, x: float) -> bool:
    """Whether the text has fewer decimals than asked and the key rounds to it."""
    places = len(text.strip().partition(".")[2]) if "." in text and "e" not in text.lower() else 0
    return places < q.decimals and round(q.answer, places) == x


def _read_number(response: Any) -> float | str:
    """The response as a finite float, or a sentence saying why it is not one."""
    torch, np = sys.modules.get("torch"), sys.modules.get("numpy")
    if torch is not None and isinstance(response, torch.Tensor):
        if response.numel() != 1:
            return f"That is a tensor of shape {tuple(response.shape)}, not one number."
        if response.is_complex() or response.dtype == torch.bool:
            return f"That is a {response.dtype} tensor, not a real number."
        response = response.detach().cpu().reshape(()).item()
    elif np is not None and isinstance(response, (np.ndarray, np.generic)):
        if np.size(response) != 1:
            return f"That is an array of shape {np.shape(response)}, not one number."
        response = np.asarray(response).reshape(()).item()
    if isinstance(response, bool):
        return f"{response} is not a number."
    if isinstance(response, str):
        return _parse_number_text(response)
    if isinstance(response, numbers.Real | Decimal):
        try:
            x = float(response)
        except OverflowError:
            return "That number is too large to grade."
        except ValueError:
            return "That is not a finite number."
    elif isinstance(response, numbers.Complex):
        return "That is a complex number; give a real one."
    elif isinstance(response, list | tuple | set | frozenset | dict):
        return f"That is a {type(response).__name__}, not one number."
    else:
        return f"That is a {type(response).__name__}, not a number."
    return _finite(x)


def _finite(x: float) -> float | str:
    if math.isnan(x):
        return "NaN is not a value that can be graded: look for a 0/0 or an empty mean in your computation."
    if math.isinf(x):
        return "An infinite value cannot be graded: look for a division by zero or an overflow."
    return x


def _parse_number_text(text: str) -> float | str:
    s = text.strip().replace("\u2212", "-")
    if "/" in s:
        num, _, den = (part.strip() for part in s.partition("/"))
        if _NUMBER.fullmatch(num) and _NUMBER.fullmatch(den):
            if float(den) == 0:
                return "That fraction divides by zero."
            return _finite(float(num) / float(den))
    elif _NUMBER.fullmatch(s):
        return _finite(float(s))
    elif _NUMBER.fullmatch(s.replace(",", ".", 1)):
        return f"Write the decimal separator as a point: {s.replace(',', '.', 1)}, not {s}."
    return f"{_short(text)} could not be read as a number."



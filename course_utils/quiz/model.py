"""Quiz items and pure grading: the data classes read from quizzes/*.toml and the functions that grade one response.

Nothing here touches files, widgets or notebooks: `Quiz.grade(question_id, response)` is a pure function of the key
and the response, used alike by `answer()` in a notebook and by the batch grader. A parameterised item's numbers are
drawn per student (`Quiz.for_student`) and its formulas evaluated by walking their `ast`, never by running them.
"""
from __future__ import annotations

import hashlib
import html
import itertools
import math
import numbers
import random
import re
import reprlib
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from functools import cached_property
from typing import Any

from .formulas import FormulaError, _show, evaluate, placeholders, render
from .markup import _inline, markdown_html

KINDS = ("choice", "numeric", "open")
# Longer responses are refused before any parsing, so a pasted megabyte costs nothing.
MAX_RESPONSE_CHARS = {"choice": 2_000, "numeric": 200, "open": 20_000}
# A mistake's value matches within this relative tolerance unless its entry sets `tolerance`.
MISTAKE_REL_TOL = 5e-3
# A student's numbers are re-drawn (deterministically) while they make a mistake collide with the key or with another
# mistake; after this many draws the item falls back to its defaults, which the loader has checked.
MAX_DRAWS = 64
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_LABEL = re.compile(r"\(?([a-z])[).:]?")
_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 60
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 4


# The notebook side registers its widget builder here (notebook.py), so this module never imports it back.
_VIEW: tuple[Callable, Callable] | None = None


def normal_id(student_id: str) -> str:
    """A student id as it seeds their numbers: spaces around it dropped, case folded."""
    return student_id.strip().casefold()


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
class Param:
    """One per-student number of a parameterised item: a value on the grid min, min + step, ... <= max."""
    name: str
    min: int | float
    max: int | float
    step: int | float
    default: int | float

    @property
    def size(self) -> int:
        """How many values the grid holds."""
        return int((Decimal(repr(self.max)) - Decimal(repr(self.min))) // Decimal(repr(self.step))) + 1

    def value(self, k: int) -> int | float:
        """The k-th grid value, computed in decimal so that 0.1 steps give 0.3, not 0.30000000000000004."""
        exact = Decimal(repr(self.min)) + k * Decimal(repr(self.step))
        integer = all(isinstance(v, int) for v in (self.min, self.step))
        return int(exact) if integer else float(exact)


@dataclass(frozen=True)
class Template:
    """A parameterised item as its file writes it: formulas over the parameters, and texts with placeholders.

    `mask` is set in a keyless release only: one bit per parameter tuple (row-major over the grids), set where the
    full quiz hands that tuple out. It lets the release draw a student's numbers exactly as the grader does without
    the key formulas that decide which draws collide.
    """
    params: tuple[Param, ...]
    prompt: str
    explanation: str = ""
    answer: str | None = None  # the key's formula; None in a keyless release
    mistakes: tuple[tuple[str, str, float | None], ...] = ()  # (value formula, feedback, tolerance)
    mask: bytes | None = None

    @property
    def names(self) -> tuple[str, ...]:
        """The parameter names, in file order."""
        return tuple(p.name for p in self.params)

    @property
    def defaults(self) -> tuple[int | float, ...]:
        """The chapter's own numbers, used without a student id."""
        return tuple(p.default for p in self.params)

    @property
    def grid_size(self) -> int:
        """How many parameter tuples the grids span."""
        return math.prod(p.size for p in self.params)

    def flat_index(self, indices: tuple[int, ...]) -> int:
        """The position of a tuple of grid indices in row-major order (the mask's bit order)."""
        flat = 0
        for p, k in zip(self.params, indices):
            flat = flat * p.size + k
        return flat

    @cached_property
    def text_formulas(self) -> tuple[str, ...]:
        """The `{=formula}` placeholders of the prompt, explanation and mistake feedback."""
        texts = [self.prompt, self.explanation, *(feedback for _, feedback, _ in self.mistakes)]
        return tuple(dict.fromkeys(f for text in texts for f in placeholders(text)[1]))


@dataclass(frozen=True)
class Question:
    """One quiz item as read from its file; `answer` is the key (a choice label or a number, None for open items).

    A parameterised item (`template` set) holds its formulas in `template` and, in the other fields, the item made
    concrete at `values`: the defaults as loaded, a student's numbers after `for_student`. In a keyless release
    `answer` is None for every item.
    """
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
    evidence: str = ""  # an open item's optional second layer: where the course measured it, the figures, the nuance
    rubric: tuple[str, ...] = ()
    template: Template | None = None
    values: tuple[tuple[str, int | float], ...] = ()
    student: str | None = None

    @property
    def ref(self) -> str:
        """The reference used by answer() and the gradebook, "<quiz>.<id>"."""
        return f"{self.quiz}.{self.id}"

    @property
    def scored(self) -> bool:
        """Open items are never auto-scored."""
        return self.kind != "open"

    @property
    def parameterised(self) -> bool:
        """Whether each student gets their own numbers."""
        return self.template is not None

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

    def with_values(self, values: Mapping[str, int | float], student: str | None = None) -> Question:
        """This item made concrete at `values`; raises FormulaError where a formula has no finite value there."""
        t = self.template
        env = {name: float(values[name]) for name in t.names}
        shown = {name: _show(values[name]) for name in t.names}
        key = None
        if t.answer is not None:
            key = evaluate(t.answer, env)
            if self.decimals is not None:
                key = round(key, self.decimals)
            shown["answer"] = f"{key:.{self.decimals}f}" if self.decimals is not None else _show(key)
        prompt = render(t.prompt, shown, env)
        if student is not None:
            listed = ", ".join(f"{name} = {shown[name]}" for name in t.names)
            prompt += f"\n\nYour numbers (student {student}): {listed}."
        mistakes = tuple(Mistake(value=evaluate(formula, env), feedback=render(feedback, shown, env), tolerance=tol)
                         for formula, feedback, tol in t.mistakes)
        return replace(self, prompt=prompt, explanation=render(t.explanation, shown, env), answer=key,
                       mistakes=mistakes, values=tuple((name, values[name]) for name in t.names), student=student)

    def collisions(self) -> list[str]:
        """Why this concrete item cannot be handed out: mistakes that grade as the key, or as each other."""
        if self.answer is None:
            return []
        found = [f"mistake {m.value:g} overlaps the key {self.answer:g}" for m in self.mistakes
                 if self.is_key(m.value) or m.matches(self.answer)]
        found += [f"mistakes {a.value:g} and {b.value:g} overlap" for a, b in itertools.combinations(self.mistakes, 2)
                  if a.matches(b.value) or b.matches(a.value)]
        return found

    def accepts(self, indices: tuple[int, ...]) -> bool:
        """Whether the parameter tuple at these grid indices is handed out: every formula finite, every hint distinct.

        Two mistakes may coincide at the chapter's own numbers (3.5 is both the mean and the RMS to one decimal);
        a student's numbers keep each hint distinct. A keyless release reads the decision from its mask.
        """
        t = self.template
        if t.mask is not None:
            flat = t.flat_index(indices)
            return bool(t.mask[flat >> 3] >> (flat & 7) & 1)
        env = {p.name: float(p.value(k)) for p, k in zip(t.params, indices)}
        try:
            for formula in t.text_formulas:
                evaluate(formula, env)
            key = evaluate(t.answer, env) if t.answer is not None else None
            if key is not None and self.decimals is not None:
                key = round(key, self.decimals)
            mistakes = tuple(Mistake(value=evaluate(formula, env), feedback="", tolerance=tol)
                             for formula, _, tol in t.mistakes)
        except FormulaError:
            return False
        return not replace(self, answer=key, mistakes=mistakes).collisions()

    def grid_mask(self) -> bytes:
        """One bit per parameter tuple, set where `accepts` hands it out: what a keyless release carries."""
        t = self.template
        bits = bytearray((t.grid_size + 7) // 8)
        for flat, indices in enumerate(itertools.product(*(range(p.size) for p in t.params))):
            if self.accepts(indices):
                bits[flat >> 3] |= 1 << (flat & 7)
        return bytes(bits)

    def for_student(self, student_id: str | None) -> Question:
        """This item with `student_id`'s numbers (None: the defaults); the same id always gets the same numbers."""
        if self.template is None:
            return self
        t = self.template
        chapter = self.with_values(dict(zip(t.names, t.defaults)))
        if student_id is None:
            return chapter
        # Ids are compared as people write them: "JNunez3 " on the roster and "jnunez3" on the hub are one student.
        seed = hashlib.sha256(f"{normal_id(student_id)}|{self.ref}".encode()).digest()
        rng = random.Random(int.from_bytes(seed, "big"))
        for _ in range(MAX_DRAWS):
            indices = tuple(rng.randrange(p.size) for p in t.params)
            if self.accepts(indices):
                mine = self.with_values({p.name: p.value(k) for p, k in zip(t.params, indices)}, student_id)
                return mine._with_chapter_hint(chapter.answer)
        return self.with_values(dict(zip(t.names, t.defaults)), student_id)

    def _with_chapter_hint(self, chapter_key: float | None) -> Question:
        """This student's item, with a hint for the key of the chapter's own numbers where it is a distinct value.

        A learner who ran the notebook without a student id saw, and answered, the chapter's numbers.
        """
        if chapter_key is None:
            return self
        hint = Mistake(value=chapter_key, feedback=(
            "That is the answer for the chapter's example numbers; yours are " +
            ", ".join(f"{name} = {_show(v)}" for name, v in self.values) + ". If the question showed you the "
            'chapter\'s numbers, the notebook had no student id: put `setup(seed=0, student="your login")` in its '
            "setup cell and answer again."))
        if self.is_key(chapter_key) or hint.matches(self.answer) or any(
                m.matches(chapter_key) or hint.matches(m.value) for m in self.mistakes):
            return self
        return replace(self, mistakes=(*self.mistakes, hint))


@dataclass(frozen=True, repr=False)
class Result:
    """The outcome of grading one response; it displays (as text or HTML) as its feedback and explanation.

    An unanswered Result also carries the question (`prompt`, and `choices` as (label, text) pairs), so that an
    answer cell run before it is answered shows the learner what it asks.
    """
    ref: str
    kind: str
    # "correct", "wrong", "unreadable" (not in the expected form), "unanswered" (None, "" or ...) or "recorded"
    # (an open item's text, or any answer to a keyless quiz: never scored here).
    status: str
    score: float
    points: float
    feedback: str
    explanation: str = ""
    response: str = ""  # how the grader read the response, e.g. "b" or "1.25"; the item analysis counts these
    prompt: str = ""
    choices: tuple[tuple[str, str], ...] = ()

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
        # Open items and recorded (keyless) answers are not scored, and their line must not hint otherwise.
        unscored = self.kind == "open" or self.status == "recorded"
        scored = "" if unscored else f" ({_fmt(self.score)}/{_fmt(self.points)})"
        return f"{marks[self.status]}{scored} · {self.ref}"

    def __repr__(self) -> str:
        lines = [self._headline()]
        if self.prompt:
            lines += [self.prompt, *(f"({label}) {text}" for label, text in self.choices)]
        lines.append(self.feedback)
        if self.explanation:
            lines.append(f"Explanation: {self.explanation}")
        return "\n".join(_plain(line) for line in lines)

    def _repr_html_(self) -> str:
        # Blue and orange stay distinct under the common colour-vision deficiencies; the mark repeats the verdict.
        colour = {"correct": "#0072B2", "wrong": "#D55E00", "recorded": "#0072B2"}.get(self.status, "#777777")
        question = ""
        if self.prompt:
            choices = "".join(f"<p><b>({html.escape(label)})</b> {_inline(text)}</p>" for label, text in self.choices)
            question = f"<div>{markdown_html(self.prompt)}{choices}</div>"
        explanation = (f"<div><b>Explanation.</b> {markdown_html(self.explanation)}</div>"
                       if self.explanation else "")
        return (f'<div style="border-left:4px solid {colour};padding:4px 10px;margin:4px 0">'
                f'<div style="color:{colour};font-weight:bold">{html.escape(self._headline())}</div>'
                f"{question}<div>{markdown_html(self.feedback)}</div>{explanation}</div>")


@dataclass(frozen=True)
class Quiz:
    """A named list of questions; grade() is pure, show() builds the widgets.

    `keyless` marks the student release's copy: no keys, and grade() only checks the form of a response. `student`
    is whose numbers the parameterised items carry (None: the chapter's own).
    """
    name: str
    title: str
    questions: tuple[Question, ...]
    about: str = ""
    keyless: bool = False
    student: str | None = None
    _by_id: dict[str, Question] = field(init=False, repr=False, compare=False)
    _students: dict[str, Quiz] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_id", {q.id: q for q in self.questions})
        object.__setattr__(self, "_students", {})

    @property
    def ids(self) -> tuple[str, ...]:
        """Question ids in file order."""
        return tuple(q.id for q in self.questions)

    @property
    def points(self) -> float:
        """Total points of the auto-scored items."""
        return sum(q.points for q in self.questions if q.scored)

    @property
    def parameterised(self) -> bool:
        """Whether any item gives each student their own numbers."""
        return any(q.parameterised for q in self.questions)

    def question(self, question_id: str) -> Question:
        """The question with this id; an unknown id raises UnknownQuizError naming the ids that exist."""
        try:
            return self._by_id[question_id]
        except (KeyError, TypeError):
            raise UnknownQuizError(f"quiz {self.name!r} has no question {question_id!r}; "
                                   f"its questions are {', '.join(self.ids)}") from None

    def for_student(self, student_id: str | None) -> Quiz:
        """This quiz with `student_id`'s numbers in its parameterised items (None: the defaults); else itself."""
        if not self.parameterised or student_id == self.student:
            return self
        key = "" if student_id is None else f"id:{student_id}"
        if key not in self._students:
            if len(self._students) > 4096:  # a grader walks a whole class through one Quiz; keep the memory bounded
                self._students.clear()
            self._students[key] = replace(self, questions=tuple(q.for_student(student_id) for q in self.questions),
                                          student=student_id)
        return self._students[key]

    def grade(self, question_id: str, response: Any) -> Result:
        """Grade one response against the key; never raises for any response, has no side effects."""
        q = self.question(question_id)
        try:
            return _grade(q, response, self.keyless)
        except Exception:  # noqa: BLE001 - a response must never crash grading; this is the last line of defence
            return _result(q, "unreadable", f"This answer could not be read. Give {q.expected_form}.")

    def show(self):
        """Build the quiz as an ipywidgets VBox; `.controls[qid]` holds each item's widgets, `.score` the score line.

        A quiz straight from load_quiz() shows the numbers of `current_student()`; one from for_student() its own.
        """
        if _VIEW is None:
            raise RuntimeError("the quiz widget comes with course_utils.quiz.notebook; import course_utils.quiz")
        build_view, current_student = _VIEW
        return build_view(self if self.student is not None else self.for_student(current_student()))


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
    question = {}
    if status == "unanswered":
        question = dict(prompt=q.prompt, choices=tuple((c.label, c.text) for c in q.choices))
    return Result(ref=q.ref, kind=q.kind, status=status, score=score, points=q.points, feedback=feedback,
                  explanation=explanation, response=response, **question)


def _grade(q: Question, response: Any, keyless: bool = False) -> Result:
    if response is None or response is Ellipsis or (isinstance(response, str) and not response.strip()):
        how = ("type your answer between the triple quotes of its answer cell and run it" if q.kind == "open"
               else f'in an answer cell, replace the `...` in `answer("{q.ref}", ...)`')
        return _result(q, "unanswered", f"To answer, give {q.expected_form}; {how}.")
    if isinstance(response, str) and len(response) > MAX_RESPONSE_CHARS[q.kind]:
        return _result(q, "unreadable", f"This answer is {len(response):,} characters long, more than the "
                                        f"{MAX_RESPONSE_CHARS[q.kind]:,} accepted here. Give {q.expected_form}.")
    if keyless:
        return _record(q, response)
    if q.kind == "choice":
        return _grade_choice(q, response)
    if q.kind == "numeric":
        return _grade_numeric(q, response)
    if not isinstance(response, str):
        return _result(q, "unreadable", f"Give {q.expected_form}.")
    return _result(q, "recorded", "Recorded; open questions are not scored. Compare your answer with the model "
                                  f'answer: `reveal("{q.ref}")`.', response=response.strip()[:80])


def _record(q: Question, response: Any) -> Result:
    """A keyless quiz's grading: check the response's form only, and say the same thing whatever its value."""
    if q.kind == "choice":
        picked = _pick(q, response)
        if isinstance(picked, Result):
            return picked
        shown = f"({picked.label})"
        read = picked.label
    elif q.kind == "numeric":
        x = _read_number(response)
        if isinstance(x, str):
            return _result(q, "unreadable", f"{x} Give {q.expected_form}.")
        shown = read = f"{x:.10g}"
    elif isinstance(response, str):
        return _result(q, "recorded", "Recorded. Your instructor reads this answer; hand in this notebook.",
                       response=response.strip()[:80])
    else:
        return _result(q, "unreadable", f"Give {q.expected_form}.")
    note = ""
    if q.parameterised and q.student is not None:
        note = f" (Your numbers, student {q.student}: " + ", ".join(f"{n} = {_show(v)}" for n, v in q.values) + ".)"
    if q.parameterised and q.student is None:
        # The grader will use this student's own numbers; these are the chapter's. Say so before it costs points.
        note = (' **No student id is set, so these are the chapter\'s example numbers, not yours.** Put the id your '
                'instructor gave you in the setup cell, `setup(seed=0, student="s0042")`, run it, then run this cell '
                "again and answer with the numbers it shows.")
    return _result(q, "recorded", f"Recorded: {shown}. Your instructor grades this answer; hand in this notebook."
                   + note, response=read)


def _pick(q: Question, response: Any) -> Choice | Result:
    """The choice a response names, or an "unreadable" Result saying what form is expected."""
    if not isinstance(response, str):
        return _result(q, "unreadable", f"Give {q.expected_form}; got {_short(response)}.")
    text = _norm(response)
    label = _LABEL.fullmatch(text)
    picked = next((c for c in q.choices if (label and c.label == label.group(1)) or _norm(c.text) == text), None)
    if picked is None:
        return _result(q, "unreadable", f"There is no choice {_short(response.strip())}. Give {q.expected_form}.")
    return picked


def _grade_choice(q: Question, response: Any) -> Result:
    picked = _pick(q, response)
    if isinstance(picked, Result):
        return picked
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
    # At the chapter's numbers two mistakes can give one value (3.5 is the mean of 3 and 4 and their RMS to one
    # decimal); the learner then reads every hint, told that the value fits each, none put first as the answer.
    hints = [m.feedback for m in q.mistakes if m.matches(x)]
    if len(hints) == 1:
        return _result(q, "wrong", f"{shown}: {hints[0]}", response=shown)
    if hints:
        readings = "\n\n".join(f"({i}) {h}" for i, h in enumerate(hints, 1))
        return _result(q, "wrong", f"{shown} can come from {_COUNT.get(len(hints), len(hints))} different slips at "
                                   f"these numbers; which one did you make?\n\n{readings}", response=shown)
    if q.answer != 0 and q.is_key(-x):
        return _result(q, "wrong", f"{shown}: the size is right but the sign is not.", response=shown)
    if q.decimals is not None and isinstance(response, str) and _too_few_decimals(q, response, x):
        return _result(q, "wrong", f"{shown} is on the way, but give {q.decimals} decimal places.", response=shown)
    return _result(q, "wrong", f"{shown} is not the value asked for; check each step against the formula.",
                   response=shown)


_COUNT = {2: "two", 3: "three", 4: "four"}


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

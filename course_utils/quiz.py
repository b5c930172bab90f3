"""Quizzes as data: load `quizzes/<name>.toml`, grade responses with pure functions, show results in a notebook.

`answer("chapter_2_4.q5", 2.5)` grades at once and returns a `Result` whose display is the feedback and explanation;
`load_quiz(name).show()` builds the widgets; `score_summary()` tallies what this kernel has answered. The file schema
is documented in quizzes/README.md; `python -m course_utils.grade` grades collected notebooks with the same keys.
"""
from __future__ import annotations

import html
import math
import numbers
import os
import re
import reprlib
import sys
import tomllib
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path
from typing import Any

__all__ = ["Choice", "Mistake", "Question", "Quiz", "Result", "Reveal", "ScoreSummary", "QuizFormatError",
           "UnknownQuizError", "quiz_dir", "quiz_names", "load_quiz", "parse_ref", "answer", "reveal",
           "score_summary", "markdown_html"]

KINDS = ("choice", "numeric", "open")
# Longer responses are refused before any parsing, so a pasted megabyte costs nothing.
MAX_RESPONSE_CHARS = {"choice": 2_000, "numeric": 200, "open": 20_000}
# A mistake's value matches within this relative tolerance unless its entry sets `tolerance`.
MISTAKE_REL_TOL = 5e-3
_NAME = re.compile(r"[A-Za-z0-9_]+")
_QID = re.compile(r"[a-z][a-z0-9_]*")
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
        return _build_view(self)


# ---------------------------------------------------------------------------------------------------------- loading

def quiz_dir() -> Path:
    """Where quiz files live: $COURSE_QUIZ_DIR, else quizzes/ at the repository root."""
    env = os.environ.get("COURSE_QUIZ_DIR")
    return Path(env) if env else Path(__file__).resolve().parent.parent / "quizzes"


def quiz_names() -> list[str]:
    """Names of the quizzes that exist, sorted."""
    folder = quiz_dir()
    return sorted(p.stem for p in folder.glob("*.toml")) if folder.is_dir() else []


_CACHE: dict[tuple[str, int, int], Quiz] = {}


def load_quiz(name: str) -> Quiz:
    """Read and validate quizzes/<name>.toml; an unknown name raises UnknownQuizError naming the quizzes that exist."""
    path = quiz_dir() / f"{name}.toml"
    if not isinstance(name, str) or not _NAME.fullmatch(name) or not path.is_file():
        raise UnknownQuizError(f"there is no quiz named {name!r} in {quiz_dir()}; "
                               f"the quizzes are {', '.join(quiz_names()) or '(none)'}")
    stat = path.stat()
    key = (str(path), stat.st_mtime_ns, stat.st_size)
    if key not in _CACHE:
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise QuizFormatError(f"{path}: not valid TOML: {e}") from e
        _CACHE[key] = _parse_quiz(name, data, path)
    return _CACHE[key]


def parse_ref(ref: str) -> tuple[str, str]:
    """Split "<quiz>.<id>" into its parts; a malformed reference raises UnknownQuizError."""
    if not isinstance(ref, str) or ref.count(".") != 1:
        raise UnknownQuizError(f"a question reference looks like \"chapter_2_4.q5\" (quiz name, a dot, question id), "
                               f"got {_short(ref)}; the quizzes are {', '.join(quiz_names())}")
    quiz, _, qid = ref.partition(".")
    return quiz, qid


_COMMON = {"id", "kind", "prompt", "section", "points", "explanation"}
_KEYS = {"choice": _COMMON | {"answer", "choices"},
         "numeric": _COMMON | {"answer", "tolerance", "rel_tolerance", "decimals", "mistakes"},
         "open": _COMMON | {"model_answer", "rubric"}}


def _parse_quiz(name: str, data: dict, path: Path) -> Quiz:
    """Turn a parsed TOML document into a Quiz, or raise QuizFormatError saying which field is wrong."""
    def fail(where: str, msg: str) -> QuizFormatError:
        return QuizFormatError(f"{path}: {where}: {msg} (schema: quizzes/README.md)")

    extra = set(data) - {"title", "about", "questions"}
    if extra:
        raise fail("top level", f"unknown keys {sorted(extra)}")
    title, about = data.get("title"), data.get("about", "")
    if not isinstance(title, str) or not title.strip():
        raise fail("top level", "`title` must be a non-empty string")
    if not isinstance(about, str):
        raise fail("top level", "`about` must be a string")
    raw = data.get("questions")
    if not isinstance(raw, list) or not raw:
        raise fail("top level", "`questions` must be a non-empty array of tables ([[questions]])")
    questions, seen = [], set()
    for i, item in enumerate(raw):
        where = f"questions[{i}]" + (f" ({item.get('id')})" if isinstance(item, dict) else "")
        if not isinstance(item, dict):
            raise fail(where, "must be a table")
        q = _parse_question(name, item, lambda msg: fail(where, msg))
        if q.id in seen:
            raise fail(where, f"duplicate id {q.id!r}")
        seen.add(q.id)
        questions.append(q)
    return Quiz(name=name, title=title.strip(), about=about.strip(), questions=tuple(questions))


def _text(item: dict, key: str, fail, required: bool = True) -> str:
    value = item.get(key, "")
    if not isinstance(value, str) or (required and not value.strip()):
        raise fail(f"`{key}` must be a non-empty string")
    return value.strip()


def _number(value: Any, what: str, fail, minimum: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise fail(f"`{what}` must be a finite number, got {value!r}")
    if minimum is not None and value < minimum:
        raise fail(f"`{what}` must be at least {minimum}, got {value!r}")
    return float(value)


def _parse_question(quiz: str, item: dict, fail) -> Question:
    """Validate one [[questions]] table against the schema of its kind."""
    kind = item.get("kind")
    if kind not in KINDS:
        raise fail(f"`kind` must be one of {KINDS}, got {kind!r}")
    extra = set(item) - _KEYS[kind]
    if extra:
        raise fail(f"unknown keys {sorted(extra)} for a {kind} item (allowed: {sorted(_KEYS[kind])})")
    qid = item.get("id")
    if not isinstance(qid, str) or not _QID.fullmatch(qid):
        raise fail(f"`id` must be lower-case letters, digits and _, starting with a letter; got {qid!r}")
    base = dict(quiz=quiz, id=qid, kind=kind, prompt=_text(item, "prompt", fail),
                section=_text(item, "section", fail), explanation=_text(item, "explanation", fail, kind != "open"))
    if kind == "open":
        if item.get("points", 0) != 0:
            raise fail("open items are never scored: leave out `points` or set it to 0")
        rubric = item.get("rubric")
        if not isinstance(rubric, list) or not rubric or not all(isinstance(r, str) and r.strip() for r in rubric):
            raise fail("`rubric` must be a non-empty array of non-empty strings")
        return Question(**base, points=0.0, model_answer=_text(item, "model_answer", fail),
                        rubric=tuple(r.strip() for r in rubric))
    points = _number(item.get("points"), "points", fail)
    if points <= 0:
        raise fail("`points` must be positive for a scored item")
    if kind == "choice":
        return _parse_choice(base, points, item, fail)
    return _parse_numeric(base, points, item, fail)


def _parse_choice(base: dict, points: float, item: dict, fail) -> Question:
    raw = item.get("choices")
    if not isinstance(raw, list) or not 2 <= len(raw) <= 8:
        raise fail("`choices` must be an array of 2 to 8 tables ([[questions.choices]])")
    key = item.get("answer")
    choices = []
    for c in raw:
        if not isinstance(c, dict) or set(c) - {"label", "text", "feedback"}:
            raise fail("each choice is a table with `label`, `text` and, for a wrong choice, `feedback`")
        label = c.get("label")
        if not isinstance(label, str) or not re.fullmatch(r"[a-z]", label):
            raise fail(f"a choice `label` must be one lower-case letter, got {label!r}")
        feedback = _text(c, "feedback", fail, required=label != key)
        if label == key and feedback:
            raise fail("the key's choice takes no `feedback`: the item's `explanation` is shown instead")
        choices.append(Choice(label=label, text=_text(c, "text", fail), feedback=feedback))
    labels = [c.label for c in choices]
    if len(set(labels)) != len(labels) or len({_norm(c.text) for c in choices}) != len(choices):
        raise fail("choice labels and texts must be unique")
    if key not in labels:
        raise fail(f"`answer` must be the label of one choice ({', '.join(labels)}), got {key!r}")
    return Question(**base, points=points, answer=key, choices=tuple(choices))


def _parse_numeric(base: dict, points: float, item: dict, fail) -> Question:
    key = _number(item.get("answer"), "answer", fail)
    decimals = item.get("decimals")
    tol = item.get("tolerance")
    rel = item.get("rel_tolerance")
    if decimals is not None:
        if isinstance(decimals, bool) or not isinstance(decimals, int) or not 0 <= decimals <= 12:
            raise fail("`decimals` must be an integer from 0 to 12")
        if tol is not None or rel is not None:
            raise fail("give either `decimals` or a tolerance, not both")
        if round(key, decimals) != key:
            raise fail(f"with `decimals = {decimals}` the `answer` must already be rounded, got {key}")
    elif tol is None and rel is None:
        raise fail("a numeric item needs `tolerance`, `rel_tolerance` or `decimals`")
    q = Question(**base, points=points, answer=key, decimals=decimals,
                 tolerance=None if tol is None else _number(tol, "tolerance", fail, 0.0),
                 rel_tolerance=None if rel is None else _number(rel, "rel_tolerance", fail, 0.0))
    mistakes = []
    for m in item.get("mistakes", []):
        if not isinstance(m, dict) or set(m) - {"value", "feedback", "tolerance"}:
            raise fail("each mistake is a table with `value`, `feedback` and optionally `tolerance`")
        mtol = m.get("tolerance")
        mistake = Mistake(value=_number(m.get("value"), "mistakes.value", fail), feedback=_text(m, "feedback", fail),
                          tolerance=None if mtol is None else _number(mtol, "mistakes.tolerance", fail, 0.0))
        if q.is_key(mistake.value) or mistake.matches(key):
            raise fail(f"mistake {mistake.value} overlaps the key {key}: narrow its `tolerance`")
        mistakes.append(mistake)
    return replace(q, mistakes=tuple(mistakes))


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


# -------------------------------------------------------------------------------------------------------- notebooks

_SESSION: dict[str, Result] = {}


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
    from .grade import answers_in_source  # grade imports this module, so the import waits until it is needed

    found = [f for f in answers_in_source(cell)[0] if f.ref == ref]
    if not found or not found[-1].problem:
        return ""
    return (f"**Note:** if your instructor collects this notebook, the grader reads this cell without running it, "
            f"and your answer is code ({found[-1].problem}). Type the value itself, "
            f'`answer("{ref}", <the value>)`, so that it counts there too.')


def answer(ref: str, response: Any = ...) -> Result:
    """Grade a response to "<quiz>.<id>", record it for score_summary() and return the Result (... = not yet)."""
    quiz_name, qid = parse_ref(ref)
    result = load_quiz(quiz_name).grade(qid, response)
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
    q = load_quiz(quiz_name).question(qid)
    if q.scored:
        return Reveal(ref=q.ref, prompt=q.prompt, rubric=(),
                      model_answer=f'This item is auto-scored: `answer("{q.ref}", <your answer>)` shows its '
                                   "explanation once you have answered.")
    return Reveal(ref=q.ref, prompt=q.prompt, model_answer=q.model_answer, rubric=q.rubric)


def score_summary() -> ScoreSummary:
    """Per quiz answered in this kernel session: items answered, correct, and points (open items are not scored)."""
    rows = []
    for name in dict.fromkeys(ref.partition(".")[0] for ref in _SESSION):
        quiz = load_quiz(name)
        results = [r for ref, r in _SESSION.items() if ref.partition(".")[0] == name]
        scored = quiz.points > 0
        rows.append(SummaryRow(
            quiz=name, title=quiz.title, items=len(quiz.questions), answered=sum(r.answered for r in results),
            correct=sum(r.correct for r in results) if scored else None,
            score=sum(r.score for r in results) if scored else None, points=quiz.points if scored else None))
    return ScoreSummary(rows=tuple(rows))


# ------------------------------------------------------------------------------------------------------------ views

_INLINE = re.compile(r"(\$\$.+?\$\$|\$[^$\n]+?\$|`[^`\n]+`)", re.S)
_LIST_ITEM = re.compile(r"\s*(?:[-*]|\d+\.)\s+")


def _inline(text: str) -> str:
    parts = _INLINE.split(text)
    out = []
    for i, part in enumerate(parts):
        if i % 2 and part.startswith("`"):
            out.append(f"<code>{html.escape(part[1:-1])}</code>")
        elif i % 2:
            out.append(html.escape(part, quote=False))  # LaTeX stays as text for MathJax to typeset
        else:
            s = html.escape(part, quote=False)
            s = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", s)
            out.append(re.sub(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])", r"<i>\1</i>", s))
    return "".join(out)


def markdown_html(text: str) -> str:
    """Render the Markdown subset quiz files use (paragraphs, lists, bold, italic, code) to HTML, keeping $LaTeX$."""
    blocks = []
    for block in re.split(r"\n\s*\n", text.strip()):
        lines = block.splitlines()
        if lines and all(_LIST_ITEM.match(line) for line in lines):
            tag = "ol" if lines[0].lstrip()[0].isdigit() else "ul"
            items = "".join(f"<li>{_inline(_LIST_ITEM.sub('', line, count=1))}</li>" for line in lines)
            blocks.append(f"<{tag}>{items}</{tag}>")
        elif block.strip():
            blocks.append(f"<p>{_inline(' '.join(line.strip() for line in lines))}</p>")
    return "".join(blocks)


@dataclass
class ItemControls:
    """One item's widgets in Quiz.show(); `reveal` and the `model` box it fills exist for open items only."""
    input: Any
    check: Any
    feedback: Any
    reveal: Any = None
    model: Any = None


def _build_view(quiz: Quiz):
    import ipywidgets as widgets

    score = widgets.HTML()
    latest: dict[str, Result] = {}

    def update_score() -> None:
        got = sum(r.score for r in latest.values())
        done = sum(r.answered for r in latest.values())
        points = f"Score: {_fmt(got)} / {_fmt(quiz.points)} points · " if quiz.points else ""
        score.value = f"<b>{points}{done} of {len(quiz.questions)} answered</b>"

    def on_check(q: Question, controls: ItemControls) -> None:
        result = quiz.grade(q.id, controls.input.value)
        if result.status != "unanswered":
            latest[q.id] = _SESSION[result.ref] = result
        controls.feedback.value = result._repr_html_()
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

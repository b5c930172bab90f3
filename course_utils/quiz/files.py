"""Quiz files and their schema: find quizzes/, read one TOML file, validate it into a `Quiz` (schema: quizzes/README.md)."""
from __future__ import annotations

import math
import os
import re
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..resources import course_folder
from .model import (KINDS, Choice, Mistake, Question, Quiz, QuizFormatError, UnknownQuizError, _norm, _short)

_NAME = re.compile(r"[A-Za-z0-9_]+")
_QID = re.compile(r"[a-z][a-z0-9_]*")


def quiz_dir() -> Path:
    """Where quiz files live: $COURSE_QUIZ_DIR, else the quizzes shipped with the package (course_utils.resources)."""
    env = os.environ.get("COURSE_QUIZ_DIR")
    return Path(env) if env else course_folder("quizzes")


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


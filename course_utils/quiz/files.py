"""Quiz files and their schema: find quizzes/, read a TOML file, validate it into a `Quiz` (quizzes/README.md)."""
from __future__ import annotations

import base64
import math
import os
import re
import tomllib
import zlib
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

from ..resources import course_folder
from .formulas import FORMULA_FUNCTIONS, FormulaError, compile_formula, evaluate, placeholders
from .model import (KINDS, Choice, Mistake, Param, Question, Quiz, QuizFormatError, Template, UnknownQuizError, _norm,
                    _short)

_NAME = re.compile(r"[A-Za-z0-9_]+")
_QID = re.compile(r"[a-z][a-z0-9_]*")


# Written at the top of a student release: a notebook run inside one reads that release's keyless quizzes/.
RELEASE_MARKER = ".course-release"
_RELEASES: dict[str, Path | None] = {}
_WARNED: set[Path] = set()


def release_around(folder: Path | None = None) -> Path | None:
    """The student release that holds `folder` (the working directory: a kernel's is its notebook's folder), found by
    the marker the release writes, looking up to four folders up; None outside one."""
    try:
        folder = (folder or Path.cwd()).resolve()
    except OSError:
        return None
    key = str(folder)
    if key not in _RELEASES:
        found = None
        for candidate in [folder, *folder.parents][:5]:
            if (candidate / RELEASE_MARKER).is_file() and (candidate / "quizzes").is_dir():
                found = candidate
                break
        _RELEASES[key] = found
    return _RELEASES[key]


def quiz_dir() -> Path:
    """Where quiz files live: $COURSE_QUIZ_DIR; else, inside a student release, that release's keyless quizzes (even
    where Python imported the full course: a hub image built from the course folder); else the quizzes shipped with
    the package (course_utils.resources)."""
    env = os.environ.get("COURSE_QUIZ_DIR")
    if env:
        return Path(env)
    release = release_around()
    shipped = course_folder("quizzes")
    if release is None:
        return shipped
    quizzes = release / "quizzes"
    if quizzes.resolve() != shipped.resolve() and release not in _WARNED:
        _WARNED.add(release)
        import warnings

        warnings.warn(f"This notebook is in the student release at {release}, but Python imported the course from "
                      f"{shipped.parent} (the full course, with the answer keys). The quizzes stay keyless: they "
                      f"are read from {quizzes}. To use the release's own package, run `pip install -e {release}` "
                      "in this environment.", stacklevel=2)
    return quizzes


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
        _CACHE[key] = read_quiz(path)
    return _CACHE[key]


def read_quiz(path: Path) -> Quiz:
    """Read and validate one quiz file wherever it is (its name is the file's stem), bypassing quiz_dir()."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise QuizFormatError(f"{path}: not valid TOML: {e}") from e
    return _parse_quiz(Path(path).stem, data, Path(path))


def parse_ref(ref: str) -> tuple[str, str]:
    """Split "<quiz>.<id>" into its parts; a malformed reference raises UnknownQuizError."""
    if not isinstance(ref, str) or ref.count(".") != 1:
        raise UnknownQuizError(f"a question reference looks like \"chapter_2_4.q5\" (quiz name, a dot, question id), "
                               f"got {_short(ref)}; the quizzes are {', '.join(quiz_names())}")
    quiz, _, qid = ref.partition(".")
    return quiz, qid


_COMMON = {"id", "kind", "prompt", "section", "points", "explanation"}
_KEYS = {"choice": _COMMON | {"answer", "choices"},
         "numeric": _COMMON | {"answer", "tolerance", "rel_tolerance", "decimals", "mistakes", "params", "grid_mask"},
         "open": _COMMON | {"model_answer", "evidence", "rubric"}}
# What a keyless quiz (`release = true`, the students' copy) may not carry: everything that tells a right answer.
KEY_FIELDS = ("answer", "explanation", "mistakes", "model_answer", "evidence", "rubric")
_PARAM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,30}")
MAX_PARAMS = 8
# Every parameter tuple of an item can be checked in a few seconds (the release does, to keep students' numbers).
MAX_GRID = 200_000


def _parse_quiz(name: str, data: dict, path: Path) -> Quiz:
    """Turn a parsed TOML document into a Quiz, or raise QuizFormatError saying which field is wrong."""
    def fail(where: str, msg: str) -> QuizFormatError:
        return QuizFormatError(f"{path}: {where}: {msg} (schema: quizzes/README.md)")

    extra = set(data) - {"title", "about", "release", "questions"}
    if extra:
        raise fail("top level", f"unknown keys {sorted(extra)}")
    title, about, keyless = data.get("title"), data.get("about", ""), data.get("release", False)
    if not isinstance(title, str) or not title.strip():
        raise fail("top level", "`title` must be a non-empty string")
    if not isinstance(about, str):
        raise fail("top level", "`about` must be a string")
    if not isinstance(keyless, bool):
        raise fail("top level", "`release` must be true or false")
    raw = data.get("questions")
    if not isinstance(raw, list) or not raw:
        raise fail("top level", "`questions` must be a non-empty array of tables ([[questions]])")
    questions, seen = [], set()
    for i, item in enumerate(raw):
        where = f"questions[{i}]" + (f" ({item.get('id')})" if isinstance(item, dict) else "")
        if not isinstance(item, dict):
            raise fail(where, "must be a table")
        q = _parse_question(name, item, lambda msg, where=where: fail(where, msg), keyless)
        if q.id in seen:
            raise fail(where, f"duplicate id {q.id!r}")
        seen.add(q.id)
        questions.append(q)
    return Quiz(name=name, title=title.strip(), about=about.strip(), questions=tuple(questions), keyless=keyless)


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


def _parse_question(quiz: str, item: dict, fail, keyless: bool) -> Question:
    """Validate one [[questions]] table against the schema of its kind."""
    kind = item.get("kind")
    if kind not in KINDS:
        raise fail(f"`kind` must be one of {KINDS}, got {kind!r}")
    extra = set(item) - _KEYS[kind]
    if extra:
        raise fail(f"unknown keys {sorted(extra)} for a {kind} item (allowed: {sorted(_KEYS[kind])})")
    keys = sorted(set(item) & set(KEY_FIELDS))
    if keyless and keys:
        raise fail(f"a keyless quiz (`release = true`) carries no {', '.join(f'`{k}`' for k in keys)}")
    qid = item.get("id")
    if not isinstance(qid, str) or not _QID.fullmatch(qid):
        raise fail(f"`id` must be lower-case letters, digits and _, starting with a letter; got {qid!r}")
    base = dict(quiz=quiz, id=qid, kind=kind, prompt=_text(item, "prompt", fail), section=_text(item, "section", fail),
                explanation=_text(item, "explanation", fail, kind != "open" and not keyless))
    if kind == "open":
        if item.get("points", 0) != 0:
            raise fail("open items are never scored: leave out `points` or set it to 0")
        if keyless:
            return Question(**base, points=0.0)
        rubric = item.get("rubric")
        if not isinstance(rubric, list) or not rubric or not all(isinstance(r, str) and r.strip() for r in rubric):
            raise fail("`rubric` must be a non-empty array of non-empty strings")
        return Question(**base, points=0.0, model_answer=_text(item, "model_answer", fail),
                        evidence=_text(item, "evidence", fail, required=False), rubric=tuple(r.strip() for r in rubric))
    points = _number(item.get("points"), "points", fail)
    if points <= 0:
        raise fail("`points` must be positive for a scored item")
    if kind == "choice":
        return _parse_choice(base, points, item, fail, keyless)
    return _parse_numeric(base, points, item, fail, keyless)


def _parse_choice(base: dict, points: float, item: dict, fail, keyless: bool) -> Question:
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
        if keyless and "feedback" in c:
            raise fail("a keyless quiz (`release = true`) carries no choice `feedback`")
        feedback = _text(c, "feedback", fail, required=label != key and not keyless)
        if label == key and feedback:
            raise fail("the key's choice takes no `feedback`: the item's `explanation` is shown instead")
        choices.append(Choice(label=label, text=_text(c, "text", fail), feedback=feedback))
    labels = [c.label for c in choices]
    if len(set(labels)) != len(labels) or len({_norm(c.text) for c in choices}) != len(choices):
        raise fail("choice labels and texts must be unique")
    if keyless:
        return Question(**base, points=points, choices=tuple(choices))
    if key not in labels:
        raise fail(f"`answer` must be the label of one choice ({', '.join(labels)}), got {key!r}")
    return Question(**base, points=points, answer=key, choices=tuple(choices))


def _parse_numeric(base: dict, points: float, item: dict, fail, keyless: bool) -> Question:
    decimals = item.get("decimals")
    tol = item.get("tolerance")
    rel = item.get("rel_tolerance")
    if decimals is not None:
        if isinstance(decimals, bool) or not isinstance(decimals, int) or not 0 <= decimals <= 12:
            raise fail("`decimals` must be an integer from 0 to 12")
        if tol is not None or rel is not None:
            raise fail("give either `decimals` or a tolerance, not both")
    elif tol is None and rel is None and not keyless:
        raise fail("a numeric item needs `tolerance`, `rel_tolerance` or `decimals`")
    q = Question(**base, points=points, decimals=decimals,
                 tolerance=None if tol is None else _number(tol, "tolerance", fail, 0.0),
                 rel_tolerance=None if rel is None else _number(rel, "rel_tolerance", fail, 0.0))
    if "params" in item:
        return _parse_parameterised(q, item, fail, keyless)
    if "grid_mask" in item:
        raise fail("`grid_mask` belongs to an item with `[questions.params]`")
    if keyless:
        return q
    key = _number(item.get("answer"), "answer", fail)
    if decimals is not None and round(key, decimals) != key:
        raise fail(f"with `decimals = {decimals}` the `answer` must already be rounded, got {key}")
    mistakes = []
    for m in _mistake_tables(item, fail):
        mtol = m.get("tolerance")
        mistakes.append(Mistake(value=_number(m.get("value"), "mistakes.value", fail),
                                feedback=_text(m, "feedback", fail),
                                tolerance=None if mtol is None else _number(mtol, "mistakes.tolerance", fail, 0.0)))
    q = replace(q, answer=key, mistakes=tuple(mistakes))
    _check_overlaps(q, fail)
    return q


def _mistake_tables(item: dict, fail) -> list[dict]:
    raw = item.get("mistakes", [])
    if not isinstance(raw, list) or not all(isinstance(m, dict) and not set(m) - {"value", "feedback", "tolerance"}
                                            for m in raw):
        raise fail("each mistake is a table with `value`, `feedback` and optionally `tolerance`")
    return raw


def _check_overlaps(q: Question, fail) -> None:
    for m in q.mistakes:
        if q.is_key(m.value) or m.matches(q.answer):
            raise fail(f"mistake {m.value:g} overlaps the key {q.answer:g}: narrow its `tolerance`"
                       + (" or change the parameters' defaults" if q.parameterised else ""))


def _parse_params(raw: Any, fail) -> tuple[Param, ...]:
    """Validate `[questions.params]`: each `name = { min, max, step, default }`, default on the grid."""
    if not isinstance(raw, dict) or not 1 <= len(raw) <= MAX_PARAMS:
        raise fail(f"`params` must be a table of 1 to {MAX_PARAMS} parameters, "
                   "each `name = { min = 1, max = 9, step = 1, default = 3 }`")
    params = []
    for name, spec in raw.items():
        where = f"params.{name}"
        if not _PARAM_NAME.fullmatch(name) or name == "answer" or name in FORMULA_FUNCTIONS:
            raise fail(f"`{where}`: a parameter name is letters, digits and _, not `answer` or a function name")
        if not isinstance(spec, dict) or set(spec) != {"min", "max", "step", "default"}:
            raise fail(f"`{where}` must be a table with exactly `min`, `max`, `step` and `default`")
        for k, v in spec.items():
            _number(v, f"{where}.{k}", fail)
        param = Param(name=name, **{k: spec[k] for k in ("min", "max", "step", "default")})
        if not param.step > 0 or not param.min <= param.default <= param.max:
            raise fail(f"`{where}`: need step > 0 and min <= default <= max")
        offset = (Decimal(repr(param.default)) - Decimal(repr(param.min))) / Decimal(repr(param.step))
        if offset != offset.to_integral_value():
            raise fail(f"`{where}`: the default {param.default} is not on the grid min + k * step")
        params.append(param)
    if math.prod(p.size for p in params) > MAX_GRID:
        raise fail(f"`params` span {math.prod(p.size for p in params):,} combinations; at most {MAX_GRID:,}")
    return tuple(params)


def _parse_parameterised(q: Question, item: dict, fail, keyless: bool) -> Question:
    """A numeric item with `[questions.params]`: formulas checked, then the item made concrete at the defaults."""
    params = _parse_params(item["params"], fail)
    names = frozenset(p.name for p in params)
    defaults = {p.name: p.default for p in params}

    def formula(value: Any, where: str) -> str:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = repr(_number(value, where, fail))
        if not isinstance(value, str):
            raise fail(f"`{where}` must be a formula string over the parameters, or a number")
        try:
            compile_formula(value, names)
            evaluate(value, defaults)
        except FormulaError as e:
            raise fail(f"`{where}`: {e}") from None
        return value.strip()

    def template_text(text: str, where: str) -> str:
        used, formulas = placeholders(text)
        if where == "prompt" and "answer" in used:
            raise fail("`prompt` may not use `{answer}`: it would show the key")
        for f in formulas:
            formula(f, f"{where}: {{={f}}}")
        return text

    answer = None if keyless else formula(item.get("answer"), "answer")
    mistakes = []
    for i, m in enumerate(_mistake_tables(item, fail)):
        mtol = m.get("tolerance")
        mistakes.append((formula(m.get("value"), f"mistakes[{i}].value"),
                         template_text(_text(m, "feedback", fail), f"mistakes[{i}].feedback"),
                         None if mtol is None else _number(mtol, "mistakes.tolerance", fail, 0.0)))
    mask = None
    if keyless:
        mask = _read_mask(item.get("grid_mask"), math.prod(p.size for p in params), fail)
    elif "grid_mask" in item:
        raise fail("`grid_mask` is written by the release into keyless quizzes only; the full quiz computes it")
    template = Template(params=params, prompt=template_text(q.prompt, "prompt"),
                        explanation=template_text(q.explanation, "explanation"), answer=answer,
                        mistakes=tuple(mistakes), mask=mask)
    try:
        concrete = replace(q, template=template).for_student(None)
    except FormulaError as e:
        raise fail(f"at the defaults: {e}") from None
    if not keyless:
        _check_overlaps(concrete, fail)
    return concrete


def mask_text(mask: bytes) -> str:
    """A grid mask as the `grid_mask` string of a keyless quiz file: base64 of the zlib-compressed bits."""
    return base64.b64encode(zlib.compress(mask, 9)).decode("ascii")


def _read_mask(text: Any, size: int, fail) -> bytes:
    """Decode `grid_mask` (see mask_text) and check it has one bit per parameter tuple."""
    if not isinstance(text, str):
        raise fail("a parameterised item of a keyless quiz needs `grid_mask` (the release writes it), so that "
                   "students draw the numbers the grader expects")
    try:
        mask = zlib.decompress(base64.b64decode(text, validate=True), bufsize=(size + 7) // 8)
    except (ValueError, zlib.error):
        raise fail("`grid_mask` is not valid base64 of zlib-compressed bits; rebuild the release") from None
    if len(mask) != (size + 7) // 8:
        raise fail(f"`grid_mask` holds {len(mask) * 8} bits for {size:,} parameter tuples; rebuild the release")
    return mask

"""An assignment: which notebooks and quizzes a class hands in, their points, the due date and the late policy.

An instructor describes it in a small TOML file (quizzes/assignments/whole_course.toml is a full example):

    title = "Normalization and stabilization (chapter 2.4)"
    due = 2026-12-15T23:59:00+01:00        # a TOML date-time with its offset
    [late]
    policy = "deduct"                      # "accept" (flag only), "deduct" or "reject" (late work scores 0)
    grace_minutes = 15
    deduct_per_day = 0.1                   # share of the score lost per started day late ("deduct")
    max_days = 7                           # later than this scores 0 ("deduct")
    unknown = "count"                      # an LMS "late" flag without a time: "count" it as unknown_days days
    unknown_days = 1                       # late, "zero" (score 0) or "flag" (no deduction; the row asks you to look)
    [[notebooks]]
    notebook = "07_review"
    quizzes = ["chapter_2_4", "07_review", "self_check", "interview"]
    [points]                               # optional: points per question, replacing the quiz file's
    "chapter_2_4.q5" = 2
    [manual]                               # optional: open questions graded by hand, and their points
    "self_check.s1" = 2

The grader grades exactly the scored questions of the listed quizzes, each answered in its own notebook, plus the
[manual] items from a file of hand-given scores. A malformed file raises AssignmentError naming the file and field.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import math
import re
import tomllib
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from .files import load_quiz
from .model import Question, Quiz, QuizFormatError, UnknownQuizError

__all__ = ["AssignmentError", "LatePolicy", "Part", "Assignment", "load_assignment", "ad_hoc_assignment"]

LATE_POLICIES = ("accept", "deduct", "reject")
UNKNOWN_LATENESS = ("count", "zero", "flag")
_STEM = re.compile(r"[A-Za-z0-9_]{1,100}")


class AssignmentError(ValueError):
    """An assignment file that cannot be used; the message names the file and the field."""


@dataclass(frozen=True)
class LatePolicy:
    """What happens to work handed in after the due date (plus the grace period)."""
    policy: str = "accept"
    grace_minutes: float = 0.0
    deduct_per_day: float = 0.0
    max_days: float | None = None
    unknown_days: float = 1.0
    unknown: str = "count"

    def days_late(self, due: dt.datetime | None, submitted: dt.datetime | None) -> float:
        """Days after due + grace (0 when on time or when either time is unknown)."""
        if due is None or submitted is None:
            return 0.0
        late = (submitted - due).total_seconds() - 60 * self.grace_minutes
        return max(late, 0.0) / 86400

    def factor(self, days_late: float, late_flag: bool) -> tuple[float, str]:
        """The share of the score kept, and a sentence saying why (empty when on time).

        An LMS download (Canvas's `_LATE_`) says that a file was late but not by how much. `unknown` says what then:
        "count" it as `unknown_days` days late, score it "zero", or "flag" it (kept whole, for the instructor to
        look up in the LMS: a minute and three weeks look alike in the download)."""
        if days_late <= 0 and not late_flag:
            return 1.0, ""
        days = math.ceil(days_late) if days_late > 0 else self.unknown_days
        rule = {"count": f"counted as {self.unknown_days:g} day(s) late", "zero": "scored 0, as the assignment says",
                "flag": "no deduction made: look the time up in the LMS"}[self.unknown]
        when = (f"{days_late:.2f} days late" if days_late > 0 else
                f"late, time unknown (the LMS marks it late but does not say by how much): {rule}")
        if self.policy == "accept":
            return 1.0, f"{when}; accepted without penalty"
        if days_late <= 0 and self.unknown == "flag":
            return 1.0, when
        if days_late <= 0 and self.unknown == "zero":
            return 0.0, when
        if self.policy == "reject" or (self.max_days is not None and days > self.max_days):
            return 0.0, f"{when}; late work scores 0"
        keep = max(0.0, 1.0 - self.deduct_per_day * days)
        return keep, f"{when}; {100 * (1 - keep):g}% deducted"


@dataclass(frozen=True)
class Part:
    """One notebook of the assignment and the quizzes answered in it."""
    notebook: str
    quizzes: tuple[str, ...]


@dataclass(frozen=True)
class Assignment:
    """Everything the grader needs to know about what was asked; `questions` are the auto-scored ones in order."""
    title: str
    parts: tuple[Part, ...]
    quizzes: dict[str, Quiz]
    due: dt.datetime | None = None
    late: LatePolicy = LatePolicy()
    points: dict[str, float] = field(default_factory=dict)
    manual: dict[str, float] = field(default_factory=dict)
    source: str = ""

    @cached_property
    def questions(self) -> list[Question]:
        """The auto-scored questions, notebook by notebook, in file order."""
        return [q for part in self.parts for name in part.quizzes for q in self.quizzes[name].questions if q.scored]

    @property
    def open_questions(self) -> list[Question]:
        """The open questions, graded by hand (only those in [manual] carry points)."""
        return [q for part in self.parts for name in part.quizzes for q in self.quizzes[name].questions
                if not q.scored]

    def points_of(self, ref: str) -> float:
        """The points a question is worth in this assignment."""
        if ref in self.manual:
            return self.manual[ref]
        return self.points.get(ref, self._by_ref[ref].points)

    @cached_property  # asked once per question per student: build the map once
    def _by_ref(self) -> dict[str, Question]:
        return {q.ref: q for quiz in self.quizzes.values() for q in quiz.questions}

    @property
    def max_points(self) -> float:
        return sum(self.points_of(q.ref) for q in self.questions) + sum(self.manual.values())

    @property
    def fingerprint(self) -> str:
        """A short hash of every key, explanation and point this assignment grades with, to tell two runs apart."""
        digest = hashlib.sha256(repr((sorted(self.points.items()), sorted(self.manual.items()), [
            (q.ref, q.kind, q.points, q.answer, q.tolerance, q.rel_tolerance, q.decimals,
             getattr(q, "template", None) and repr(q.template), [(c.label, c.feedback) for c in q.choices],
             [(m.value, m.feedback) for m in q.mistakes]) for name in sorted(self.quizzes)
            for q in self.quizzes[name].questions])).encode())
        return digest.hexdigest()[:12]

    def notebook_of(self, quiz: str) -> str | None:
        """The notebook in which a quiz is answered, or None if the quiz is not part of the assignment."""
        return next((p.notebook for p in self.parts if quiz in p.quizzes), None)


def _load_quizzes(names, fail) -> dict[str, Quiz]:
    quizzes = {}
    for name in names:
        try:
            quizzes[name] = load_quiz(name)
        except UnknownQuizError as e:
            raise fail(str(e)) from None
        if getattr(quizzes[name], "keyless", False):
            raise fail(f"quiz {name!r} has no keys: it is the student release's copy. Grade with the full course "
                       "(or set COURSE_QUIZ_DIR to the folder with the instructor's quiz files), from a folder "
                       "outside any student release")
    return quizzes


def course_notebooks() -> dict[str, str]:
    """quiz -> the notebook the course asks it in, from the course's own assignment file (quizzes/assignments/
    whole_course.toml lists every quiz of every notebook); empty where that file is missing or unreadable."""
    from .files import quiz_dir

    path = quiz_dir() / "assignments" / "whole_course.toml"
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return {}
    return {quiz: item["notebook"] for item in data.get("notebooks", []) if isinstance(item, dict)
            and isinstance(item.get("notebook"), str) for quiz in item.get("quizzes", []) if isinstance(quiz, str)}


def ad_hoc_assignment(quiz_names: list[str]) -> Assignment:
    """An assignment of the given quizzes, each answered where the course asks it (the --quiz option): the chapter's
    quiz, chapter_2_4, in 07_review with the other quizzes of 07; a quiz the course does not place, in the notebook
    of its own name."""
    def fail(msg: str) -> AssignmentError:
        return AssignmentError(f"--quiz: {msg}")
    quizzes = _load_quizzes(dict.fromkeys(quiz_names), fail)
    where = course_notebooks()
    parts: dict[str, list[str]] = {}
    for name in quizzes:
        parts.setdefault(where.get(name, name), []).append(name)
    return Assignment(title=", ".join(quizzes), parts=tuple(Part(n, tuple(q)) for n, q in parts.items()),
                      quizzes=quizzes, source="--quiz")


def _number(value, where: str, fail, minimum: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < minimum:
        raise fail(where, f"must be a number of at least {minimum:g}, got {value!r}")
    return float(value)


def load_assignment(path: str | Path) -> Assignment:
    """Read and check an assignment file; raises AssignmentError naming the file and the field at fault."""
    path = Path(path)

    def fail(where: str, msg: str) -> AssignmentError:
        return AssignmentError(f"{path}: {where}: {msg}")

    try:
        if not path.is_file():
            raise AssignmentError(f"{path}: no such file (an assignment file is TOML; example: "
                                  "quizzes/assignments/whole_course.toml)")
        if path.stat().st_size > 1_000_000:
            raise AssignmentError(f"{path}: over 1 MB; an assignment file is a few lines of TOML")
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise AssignmentError(f"{path}: not valid TOML: {e}") from None
    except OSError as e:
        raise AssignmentError(f"{path}: cannot be read: {e.strerror or e}") from None
    extra = set(data) - {"title", "due", "late", "notebooks", "points", "manual"}
    if extra:
        raise fail("top level", f"unknown keys {sorted(extra)} (allowed: title, due, late, notebooks, points, manual)")
    title = data.get("title")
    if not isinstance(title, str) or not title.strip():
        raise fail("title", "must be a non-empty string")
    due = data.get("due")
    if due is not None:
        if not isinstance(due, dt.datetime):
            raise fail("due", f"must be a TOML date-time such as 2026-12-15T23:59:00+01:00, got {due!r}")
        if due.tzinfo is None:
            raise fail("due", "needs a time-zone offset (e.g. 2026-12-15T23:59:00+01:00 or ...Z for UTC)")
    late = data.get("late", {})
    late_keys = {"policy", "grace_minutes", "deduct_per_day", "max_days", "unknown_days", "unknown"}
    if not isinstance(late, dict):
        raise fail("late", f"must be a table with {', '.join(sorted(late_keys))}")
    if set(late) - late_keys:
        raise fail("late", f"unknown keys {sorted(set(late) - late_keys)} (allowed: {', '.join(sorted(late_keys))})")
    policy = late.get("policy", "accept")
    if policy not in LATE_POLICIES:
        raise fail("late.policy", f"must be one of {', '.join(LATE_POLICIES)}, got {policy!r}")
    deduct = _number(late.get("deduct_per_day", 0.0), "late.deduct_per_day", fail)
    if deduct > 1:
        raise fail("late.deduct_per_day", f"is a share of the score, from 0 to 1; got {deduct}")
    if policy == "deduct" and deduct == 0:
        raise fail("late.deduct_per_day", 'policy "deduct" needs a deduct_per_day above 0')
    max_days = late.get("max_days")
    unknown = late.get("unknown", "count")
    if unknown not in UNKNOWN_LATENESS:
        raise fail("late.unknown", f"must be one of {', '.join(UNKNOWN_LATENESS)} (what an LMS \"late\" flag without "
                                   f"a time costs), got {unknown!r}")
    late_policy = LatePolicy(policy=policy, grace_minutes=_number(late.get("grace_minutes", 0), "late.grace_minutes",
                                                                  fail), deduct_per_day=deduct,
                             max_days=None if max_days is None else _number(max_days, "late.max_days", fail),
                             unknown_days=_number(late.get("unknown_days", 1), "late.unknown_days", fail),
                             unknown=unknown)
    raw = data.get("notebooks")
    if not isinstance(raw, list) or not raw:
        raise fail("notebooks", "must be a non-empty array of tables ([[notebooks]] with notebook and quizzes)")
    parts, owner = [], {}
    for i, item in enumerate(raw):
        where = f"notebooks[{i}]"
        if not isinstance(item, dict) or set(item) - {"notebook", "quizzes"}:
            raise fail(where, "must be a table with `notebook` and `quizzes`")
        stem, names = item.get("notebook"), item.get("quizzes")
        if not isinstance(stem, str) or not _STEM.fullmatch(stem):
            raise fail(f"{where}.notebook", f"must be a notebook's name without .ipynb, got {stem!r}")
        if stem in (p.notebook for p in parts):
            raise fail(f"{where}.notebook", f"{stem!r} is listed twice")
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise fail(f"{where}.quizzes", "must be a non-empty array of quiz names")
        for n in names:
            if n in owner:
                raise fail(f"{where}.quizzes", f"quiz {n!r} is already answered in notebook {owner[n]!r}")
            owner[n] = stem
        parts.append(Part(stem, tuple(names)))
    try:
        quizzes = _load_quizzes(owner, lambda msg: fail("notebooks", msg))
    except QuizFormatError as e:
        raise AssignmentError(f"{path}: a quiz it names is malformed: {e}") from None
    by_ref = {q.ref: q for quiz in quizzes.values() for q in quiz.questions}
    tables = {}
    for key in ("points", "manual"):
        table = data.get(key, {})
        if not isinstance(table, dict):
            raise fail(key, 'must be a table of "<quiz>.<id>" = points')
        for ref, value in table.items():
            if ref not in by_ref:
                raise fail(f"{key}.{ref}", "is not a question of the assignment's quizzes")
            if (key == "manual") == by_ref[ref].scored:
                raise fail(f"{key}.{ref}", "auto-scored questions go in [points], open ones in [manual]")
            _number(value, f"{key}.{ref}", fail)
        tables[key] = {ref: float(v) for ref, v in table.items()}
    return Assignment(title=title.strip(), parts=tuple(parts), quizzes=quizzes, due=due, late=late_policy,
                      points=tables["points"], manual=tables["manual"], source=str(path))

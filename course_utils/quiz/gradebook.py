"""Grading a class: a student's files -> one row per student -> the gradebook, LMS exports, feedback, manual grading.

`grade_class(entries, assignment, roster)` is pure apart from reading the entries; `write_outputs(...)` writes every
file into a fresh folder and swaps it in, so a crash never leaves half a gradebook and a rerun replaces the old
outputs whole (stale feedback files included).
"""
from __future__ import annotations

import csv
import datetime as dt
import hashlib
import math
import io
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .assignment import Assignment
from .model import Result, _plain, normal_id
from .source import CODE, Submission, read_notebook
from .students import Entry, Roster, Student, hub_names, printable

__all__ = ["StudentRow", "Problem", "PROBLEM_KINDS", "ManualScoresError", "grade_class", "load_manual_scores",
           "write_outputs", "STATUS_LIMIT", "OUTPUT_FILES"]

STATUS_LIMIT = 300   # characters of the status column; the full list is in the student's feedback file
# What reading one student's files may cost: files read, bytes read and seconds. A class's 9 notebooks with their
# outputs are far inside it; past it the rest of that student's files are not read, and their row says so.
STUDENT_FILES, STUDENT_BYTES, STUDENT_SECONDS = 60, 64 << 20, 10.0
FEEDBACK_LINES = 100  # notes and problems listed in one feedback file (the rest are counted)
OUTPUT_FILES = ("gradebook.csv", "canvas_import.csv", "moodle_import.csv", "item_analysis.csv",
                "manual_grading.csv", "not_graded.txt", "feedback")
_STEM_CLEAN = re.compile(r"[^a-z0-9]+")


@dataclass
class StudentRow:
    """Everything the gradebook says about one student."""
    student: Student
    files: list[str] = field(default_factory=list)              # the files graded, one per notebook
    results: dict[str, Result | None] = field(default_factory=dict)  # per auto-scored ref (None: notebook missing)
    scores: dict[str, float] = field(default_factory=dict)      # per ref, in the assignment's points, after lateness
    manual: dict[str, float | None] = field(default_factory=dict)  # hand-given points, after lateness
    manual_factor: dict[str, float] = field(default_factory=dict)  # the late policy's share for each open item
    comments: dict[str, str] = field(default_factory=dict)          # the hand grader's comment per open item
    open_answers: dict[str, str] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)              # not problems: superseded files, lateness
    days_late: float = 0.0
    late: bool = False
    submitted: bool = False

    @property
    def total(self) -> float:
        return sum(self.scores.values()) + sum(v for v in self.manual.values() if v is not None)

    @property
    def status(self) -> str:
        """"ok", or the problems joined by semicolons, the gravest first, capped at STATUS_LIMIT characters with a
        count of the rest."""
        if not self.problems:
            return "ok"
        shown, length = [], 0
        for p in sorted(self.problems, key=_severity):
            if length + len(p) + 2 > STATUS_LIMIT:
                break
            shown.append(p)
            length += len(p) + 2
        rest = len(self.problems) - len(shown)
        if not shown:
            return self.problems[0][:STATUS_LIMIT - 40] + f"… (+{rest - 1} more problems, see feedback)"
        return "; ".join(shown) + (f"; (+{rest} more problems, see feedback)" if rest else "")


# Each kind of problem a row can have, gravest first (the status column lists them in this order, so its cap never
# hides them behind a list of blanks), with how the grader's summary counts it.
PROBLEM_KINDS = {
    "no submission": "no submission",
    "not in roster": "not in the roster",
    "grader failed": "files the grader failed on",
    "claims another student": "a file that names another student",
    "over budget": "files past the budget per student, not looked at",
    "someone else's numbers": "someone else's numbers",
    "two files": "two files for one notebook",
    "missing notebook": "a notebook missing",
    "late, time unknown": "late work whose time is unknown",
    "unreadable file": "files not read",
    "partly read file": "files only partly read",
    "unreadable answer": "answers that could not be read",
    "answer is code": "answers written as code",
    "no answer cell": "answer cells deleted",
    "not answered": "questions left unanswered",
}
_RANK = {kind: i for i, kind in enumerate(PROBLEM_KINDS)}


class Problem(str):
    """One problem on a student's row: its text, as the status column and the feedback show it, and its `kind`."""

    kind: str

    def __new__(cls, kind: str, text: str) -> "Problem":
        if kind not in PROBLEM_KINDS:
            raise ValueError(f"unknown kind of problem {kind!r}; add it to PROBLEM_KINDS")
        problem = super().__new__(cls, text)
        problem.kind = kind
        return problem


def _severity(problem: Problem) -> int:
    return _RANK[problem.kind]


# --------------------------------------------------------------------------------------------------------- grading

def _notebook_named(entry: Entry, assignment: Assignment) -> str | None:
    """The notebook of the assignment a file's name points to, if any (the longest match)."""
    clean = _STEM_CLEAN.sub("_", entry.stem.casefold())
    named = [p.notebook for p in assignment.parts if _STEM_CLEAN.sub("_", p.notebook.casefold()) in clean]
    return max(named, key=len) if named else None


def _notebook_for(entry: Entry, sub: Submission, assignment: Assignment) -> str | None:
    """Which notebook of the assignment a file is: its course stamp, else its file name, else the quizzes it answers.

    A file stamped as a course notebook that is not in the assignment is none of them, whatever its name."""
    stems = [p.notebook for p in assignment.parts]
    stamped = sub.metadata.get("notebook")
    if stamped in stems:
        return stamped
    if stamped:
        return None
    named = _notebook_named(entry, assignment)
    if named is not None:
        return named
    owners = {assignment.notebook_of(f.ref.partition(".")[0]) for f in sub.answers} - {None}
    return owners.pop() if len(owners) == 1 else None


def _seed_for(student: Student, entry: Entry, sub: Submission, problems: list[Problem]) -> str | None:
    """The id a student's own numbers come from, among this student's own ids only.

    In order: the id the notebook printed its numbers were drawn for (setup()'s saved output) where it is one of
    theirs; setup(student=...) where it names them; the hub user their home folder or nbgrader submission belongs to
    (`jupyter-ada` -> `ada`); the roster's hub_user, login, or id. An id that names someone else is never used, and is
    reported."""
    hub = hub_names(entry.key) if entry.key and entry.layout.endswith(("folder", "nbgrader")) else []
    mine = student.identities | {normal_id(n) for n in hub}
    own = hub[-1] if hub else (student.hub_user or student.login or entry.key or student.student_id)
    claimed = sub.setup_student
    if claimed is not None and normal_id(claimed) not in mine:
        problems.append(Problem("someone else's numbers", f"{sub.name}: setup(student={printable(claimed, 40)!r}) "
                                "names someone else; graded with this student's own numbers"))
        claimed = None
    if sub.drawn_for is not None:
        drawn, source = sub.drawn_for
        if normal_id(drawn) in mine:
            return drawn
        if claimed is None:
            problems.append(Problem("someone else's numbers", f"{sub.name}: its quiz numbers were drawn for "
                                    f"{printable(drawn, 40)!r} (from {source}, as its saved output says), not one "
                                    f"of this student's ids; graded with this student's own numbers "
                                    f"({printable(claimed or own, 40)!r})"))
    return claimed or own


def _grade_student(student: Student, entries: list[Entry], assignment: Assignment) -> StudentRow:
    row = StudentRow(student=student, submitted=bool(entries))
    chosen: dict[str, tuple[Entry, Submission]] = {}

    def when(e: Entry) -> tuple:
        return (e.submitted or dt.datetime.min.replace(tzinfo=dt.timezone.utc), e.order)

    spent = _Spent()
    for entry in sorted(entries, key=lambda e: (when(e), e.display)):
        if entry.problem:
            row.problems.append(Problem("over budget", entry.problem))
            continue
        if entry.note:
            row.notes.append(f"{entry.display}: {entry.note}")
            if not entry.stem:
                continue
        over = spent.over()
        if over:
            row.problems.append(Problem("over budget", f"{entry.display} and any later file: not read, {over}"))
            break
        data = entry.read()
        spent.add(data)
        if isinstance(data, str):
            row.problems.append(Problem("unreadable file", f"{entry.display}: {data}"))
            continue
        sub = read_notebook(data, entry.display)
        del data
        if not sub.readable:
            row.problems.append(Problem("unreadable file", f"{entry.display}: {'; '.join(sub.problems)}"))
            continue
        notebook = _notebook_for(entry, sub, assignment)
        if notebook is None:
            # Another week's notebook, or a file of the student's own: worth a note, not a problem of this row.
            row.notes.append(f"{entry.display}: not one of this assignment's notebooks; not graded")
            continue
        named = _notebook_named(entry, assignment)
        if named is not None and named != notebook:
            row.notes.append(f"{entry.display} is named like {named} but holds notebook {notebook}; graded as "
                             f"{notebook}")
        if notebook in chosen:
            earlier = chosen[notebook][0]
            if when(earlier) == when(entry):
                row.problems.append(Problem("two files", f"two files for {notebook} with nothing to tell which came "
                                            f"later ({earlier.display}, {entry.display}); graded {entry.display}, "
                                            "check by hand"))
            else:
                row.notes.append(f"{earlier.display} was replaced by a later submission, {entry.display}")
        chosen[notebook] = (entry, sub)  # entries are sorted oldest first, so the latest wins
    for part in assignment.parts:
        if part.notebook not in chosen:
            if entries:
                row.problems.append(Problem("missing notebook", f"missing {part.notebook}"))
            for name in part.quizzes:
                for q in assignment.quizzes[name].questions:
                    if q.scored:
                        row.results[q.ref], row.scores[q.ref] = None, 0.0
            continue
        entry, sub = chosen[part.notebook]
        row.files.append(entry.display)
        row.problems.extend(Problem("partly read file", f"{entry.display}: {p}") for p in sub.problems)
        factor, late_note = _lateness(entry, assignment, row)
        if late_note:
            row.notes.append(f"{part.notebook}: {late_note}")
        _grade_part(row, part.quizzes, sub, assignment, _seed_for(student, entry, sub, row.problems), factor)
    for ref in assignment.manual:
        row.manual.setdefault(ref, None)
    return row


class _Spent:
    """What reading one student's files has cost so far, against the budget per student (STUDENT_FILES files,
    STUDENT_BYTES bytes, STUDENT_SECONDS seconds): one student's hundred big notebooks cost their row, not the class."""

    def __init__(self):
        self.files, self.bytes, self.start = 0, 0, time.monotonic()

    def add(self, data) -> None:
        self.files += 1
        self.bytes += len(data) if isinstance(data, bytes) else 0

    def over(self) -> str:
        if self.files >= STUDENT_FILES:
            return f"{STUDENT_FILES} files of this student were read already (the budget per student)"
        if self.bytes >= STUDENT_BYTES:
            return f"{STUDENT_BYTES >> 20} MB of this student's files were read already (the budget per student)"
        if time.monotonic() - self.start >= STUDENT_SECONDS:
            return f"reading this student's files took {STUDENT_SECONDS:g} s already (the budget per student)"
        return ""


def _lateness(entry: Entry, assignment: Assignment, row: StudentRow) -> tuple[float, str]:
    days = assignment.late.days_late(assignment.due, entry.submitted)
    if days > 0 or entry.late_flag:
        row.late = True
        row.days_late = max(row.days_late, days)
    if days <= 0 and entry.late_flag and assignment.late.unknown == "flag" and assignment.late.policy != "accept":
        row.problems.append(Problem("late, time unknown", f"{entry.display}: late, time unknown (the LMS does not "
                                    "say by how much); no deduction made: look it up and adjust by hand"))
    return assignment.late.factor(days, entry.late_flag)


def _grade_part(row: StudentRow, quiz_names: tuple[str, ...], sub: Submission, assignment: Assignment,
                seed: str | None, factor: float) -> None:
    by_ref: dict[str, list] = {}
    for found in sub.answers:
        by_ref.setdefault(found.ref, []).append(found)
    mine = {f"{name}.{q.id}" for name in quiz_names for q in assignment.quizzes[name].questions}
    extra = [ref for ref in by_ref if ref not in mine]
    if extra:
        shown = ", ".join(repr(printable(r, 60)) for r in extra[:3])
        row.notes.append(f"{sub.name}: {len(extra)} answer(s) not part of this notebook's quizzes, not graded "
                         f"({shown}{', ...' if len(extra) > 3 else ''})")
    for name in quiz_names:
        quiz = assignment.quizzes[name]
        concrete = quiz.for_student(seed)
        for q in concrete.questions:
            answers = by_ref.get(q.ref, [])
            if not answers:
                if q.scored:
                    row.problems.append(Problem("no answer cell", f"no answer cell for {q.ref}"))
                    row.results[q.ref] = Result(ref=q.ref, kind=q.kind, status="unanswered", score=0.0,
                                                points=q.points, feedback="No answer cell for this question was "
                                                "found in the notebook.")
                    row.scores[q.ref] = 0.0
                continue
            if len(answers) > 1:
                row.notes.append(f"{q.ref} answered {len(answers)} times (the last one is graded)")
            last = answers[-1]
            if last.problem:
                kind = "answer is code" if last.problem == CODE else "unreadable answer"
                row.problems.append(Problem(kind, f"{q.ref}: {last.problem}"))
                result = Result(ref=q.ref, kind=q.kind, status="unreadable", score=0.0, points=q.points,
                                feedback=f"The grader could not read this answer: {last.problem}. It reads answer "
                                         "cells without running them, so write the value itself, as a number or "
                                         "in quotes.")
            else:
                result = concrete.grade(q.id, last.value)
            if not q.scored:
                row.manual_factor[q.ref] = factor
                if result.status == "recorded":
                    row.open_answers[q.ref] = str(last.value)
                continue
            if result.status == "unanswered":
                row.problems.append(Problem("not answered", f"{q.ref} not answered"))
            elif result.status == "unreadable" and not last.problem:  # a literal this question cannot take ("abc")
                row.problems.append(Problem("unreadable answer", f"{q.ref}: {printable(repr(last.value), 40)} is not "
                                            f"an answer this {q.kind} question takes"))
            row.results[q.ref] = result
            row.scores[q.ref] = factor * (result.score / q.points) * assignment.points_of(q.ref)


def _stranger(entry: Entry, no_roster: bool, taken: set[str]) -> Student:
    """A student known only from the layout; two raw keys that print alike still get two ids (and two rows)."""
    key = printable(entry.key, 100)
    if key in taken:
        key = f"{key}-{hashlib.sha256(entry.key.encode('utf-8', 'surrogateescape')).hexdigest()[:8]}"
    taken.add(key)
    lms = entry.layout.endswith("lms")
    return Student(student_id=key, name=printable(entry.name_hint, 100), in_roster=no_roster,
                   login="" if lms else key, canvas_id=key if lms else "")


def _claims(groups: dict[str, tuple[Student, list[Entry]]], roster: Roster | None,
            strangers: dict[str, Student]) -> dict[str, list[Problem]]:
    """student_id -> a problem for each of their files whose path names another student of this class (an LMS file
    name, an nbgrader `submitted/<x>/`, a Moodle folder, below the layout's top level). The file stays its owner's:
    nothing below the top level decides whose a file is, so no file can replace a classmate's work."""
    found: dict[str, list[Problem]] = {}
    for owner, entries in groups.values():
        for entry in entries:
            if not entry.claim:
                continue
            named = (roster.find(entry.claim) if roster is not None else None) or strangers.get(entry.claim)
            if named is None or named.student_id == owner.student_id:
                continue
            found.setdefault(owner.student_id, []).append(Problem(
                "claims another student", f"{entry.display} is named as {printable(named.student_id, 60)}'s "
                f"({printable(entry.claim, 60)!r} in its path) but sits in this student's files: graded as this "
                f"student's, never as {printable(named.student_id, 60)}'s; check who wrote it"))
    return found


def grade_class(entries: list[Entry], assignment: Assignment, roster: Roster | None,
                progress: bool = False) -> tuple[list[StudentRow], list[str]]:
    """One row per student (roster order, then students found only in the submissions), and files nobody owns."""
    unowned: list[str] = []
    groups: dict[str, tuple[Student, list[Entry]]] = {}
    strangers: dict[str, Student] = {}  # raw layout key -> student, for students the roster does not know
    if roster is not None:
        for s in roster.students:
            groups[s.student_id] = (s, [])
    taken = set(groups)
    for entry in entries:
        if entry.key is None:
            unowned.append(f"{entry.display}: cannot tell whose file this is (put it in a folder named after the "
                           "student, or keep the LMS's file name)")
            continue
        student = roster.find(entry.key) if roster is not None else None
        if student is None and roster is not None and entry.layout.endswith("moodle"):
            student = roster.named(entry.name_hint)
        if student is None:
            student = strangers.get(entry.key) or _stranger(entry, roster is None, taken)
            strangers[entry.key] = student
        groups.setdefault(student.student_id, (student, []))[1].append(entry)
    claims = _claims(groups, roster, strangers)
    rows = []
    from tqdm import tqdm

    for student, mine in tqdm(groups.values(), desc="grading", unit="student", file=sys.stderr,
                              disable=not progress or len(groups) < 50):
        try:
            row = _grade_student(student, mine, assignment)
        except Exception as e:  # noqa: BLE001 - one student's files must never stop the class
            row = StudentRow(student=student, submitted=bool(mine))
            row.problems.append(Problem("grader failed", f"the grader failed on these files ({type(e).__name__}); not "
                                       "graded, grade by hand"))
            for q in assignment.questions:
                row.results[q.ref], row.scores[q.ref] = None, 0.0
        row.problems[:0] = claims.get(student.student_id, [])
        if not student.in_roster and roster is not None:
            row.problems.insert(0, Problem("not in roster", "not in the roster"))
        if not mine:
            row.problems.insert(0, Problem("no submission", "no submission"))
        rows.append(row)
    return rows, unowned


# --------------------------------------------------------------------------------------------------- manual scores

class ManualScoresError(ValueError):
    """A file of hand-given scores that cannot be merged; the message names the file, line and column."""


def load_manual_scores(path: str | Path, assignment: Assignment,
                       student_ids: set[str]) -> dict[tuple[str, str], tuple[float | None, str]]:
    """(student_id, question) -> (score, comment) from a filled-in manual_grading.csv; a blank score is None."""
    path = Path(path)
    try:
        raw = path.read_bytes()[:20 * 1024 * 1024]
        text = raw.decode("utf-8-sig")
    except (OSError, UnicodeDecodeError) as e:
        raise ManualScoresError(f"{path}: cannot be read as UTF-8 text ({e})") from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    need = {"student_id", "question", "score"}
    if not need <= set(reader.fieldnames or []):
        raise ManualScoresError(f"{path}: line 1: needs the columns student_id, question and score "
                                "(the manual_grading.csv the grader wrote, with the score column filled in)")
    scores = {}
    for line, row in enumerate(reader, start=2):
        sid, ref, value, comment = (row.get(k) or "" for k in ("student_id", "question", "score", "comment"))
        sid = sid.removeprefix("'")  # written with a leading ' where it started like a formula
        comment = comment.removeprefix("'").strip()[:2000]
        if not value.strip() and not comment:
            continue
        if ref not in assignment.manual:
            raise ManualScoresError(f"{path}: line {line}: column question: {ref!r} is not a [manual] item of the "
                                    f"assignment ({', '.join(assignment.manual) or 'none'})")
        if sid not in student_ids:
            raise ManualScoresError(f"{path}: line {line}: column student_id: {sid!r} is not a student of this batch")
        if not value.strip():
            scores[(sid, ref)] = (None, comment)
            continue
        try:
            score = float(value.replace(",", "."))
        except ValueError:
            raise ManualScoresError(f"{path}: line {line}: column score: {value!r} is not a number") from None
        if not math.isfinite(score) or not 0 <= score <= assignment.manual[ref]:
            raise ManualScoresError(f"{path}: line {line}: column score: {score:g} is outside 0 to "
                                    f"{assignment.manual[ref]:g} for {ref}")
        if (sid, ref) in scores:
            raise ManualScoresError(f"{path}: line {line}: {sid} / {ref} is scored twice")
        scores[(sid, ref)] = (score, comment)
    return scores


def merge_manual_scores(rows: list[StudentRow], scores: dict[tuple[str, str], tuple[float | None, str]],
                        assignment: Assignment) -> None:
    """Put hand-given scores (after the late policy of the notebook each item is in) and comments into the rows."""
    for row in rows:
        for ref in assignment.manual:
            score, comment = scores.get((row.student.student_id, ref), (None, ""))
            row.manual[ref] = None if score is None else score * row.manual_factor.get(ref, 1.0)
            if comment:
                row.comments[ref] = comment


# --------------------------------------------------------------------------------------------------------- writing

def _cell(value) -> str:
    """A CSV field no spreadsheet runs as a formula: text starting with = + - @ (or a tab or CR) gets a leading '.

    Numbers (scores, totals) are written as they are; they are never negative."""
    if not isinstance(value, str):
        return _num(value)
    return "'" + value if value[:1] in ("=", "+", "-", "@", "\t", "\r") else value


def _num(x: float) -> str:
    return f"{round(x, 4):g}"


def _csv(rows) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\r\n").writerows([[_cell(v) for v in row] for row in rows])
    return buffer.getvalue()


def _days(r: StudentRow) -> str:
    if r.days_late > 0:
        return f"{r.days_late:.2f}"
    return "unknown" if r.late else "0"


def gradebook_csv(rows: list[StudentRow], assignment: Assignment) -> str:
    refs = [q.ref for q in assignment.questions]
    manual = list(assignment.manual)
    out = [["student_id", "name", "login", "email", "status", "late", "days_late", "files", *refs,
            *(f"{r} (manual)" for r in manual), "total", "max", "percent"]]
    maximum = assignment.max_points
    for r in rows:
        s = r.student
        out.append([s.student_id, s.name, s.login, s.email, r.status, "yes" if r.late else "no",
                    _days(r), " | ".join(r.files), *(r.scores.get(ref, 0.0) for ref in refs),
                    *("" if r.manual.get(ref) is None else r.manual[ref] for ref in manual), r.total, maximum,
                    f"{100 * r.total / maximum:.1f}" if maximum else ""])
    return _csv(out)


def canvas_csv(rows: list[StudentRow], assignment: Assignment) -> str:
    """Canvas's gradebook import: Student, ID, SIS User ID, SIS Login ID, Section, then one assignment column."""
    column = assignment.title
    out = [["Student", "ID", "SIS User ID", "SIS Login ID", "Section", column],
           ["Points Possible", "", "", "", "", assignment.max_points]]
    for r in rows:
        s = r.student
        if not s.in_roster:
            continue  # the roster does not know them, so Canvas would not either; gradebook.csv flags the row
        out.append([s.name or s.student_id, s.canvas_id, s.student_id, s.login, s.section, r.total])
    return _csv(out)


def moodle_csv(rows: list[StudentRow], assignment: Assignment) -> str:
    """Moodle's "Import grades from CSV file": an identity column to map users by, a grade column, feedback."""
    out = [["Username", "ID number", "Email address", "Full name", assignment.title, "Feedback"]]
    for r in rows:
        s = r.student
        if not s.in_roster:
            continue  # Moodle could not match the row either; see gradebook.csv
        summary = f"{_num(r.total)} of {_num(assignment.max_points)} points"
        out.append([s.login, s.student_id, s.email, s.name, r.total,
                    summary if r.status == "ok" else f"{summary}; {r.status}"])
    return _csv(out)


def item_analysis_csv(rows: list[StudentRow], assignment: Assignment) -> str:
    """Per question over the students who handed in its notebook: share correct, responses, discrimination."""
    out = [["question", "kind", "points", "section", "students", "answered", "correct", "share_correct",
            "responses", "most_common_wrong", "discrimination"]]
    for q in assignment.questions:
        graded = [(r, r.results[q.ref]) for r in rows if r.results.get(q.ref) is not None]
        answered = [res for _, res in graded if res.answered]
        correct = sum(res.correct for _, res in graded)
        counts = Counter(res.response for res in answered)
        wrong = Counter(res.response for res in answered if not res.correct).most_common(1)
        if q.kind == "choice":
            responses = "; ".join(f"{c.label}={counts.get(c.label, 0)}" for c in q.choices)
        else:
            responses = "; ".join(f"{printable(v, 30)}={n}" for v, n in counts.most_common(5))
        item = [float(res.correct) for _, res in graded]
        rest = [r.total - r.scores.get(q.ref, 0.0) for r, _ in graded]
        try:
            discrimination = f"{statistics.correlation(item, rest):.3f}"
        except statistics.StatisticsError:
            discrimination = ""
        out.append([q.ref, q.kind, assignment.points_of(q.ref), q.section, str(len(graded)), str(len(answered)),
                    str(correct), f"{correct / len(graded):.3f}" if graded else "", responses,
                    f"{printable(wrong[0][0], 30)} ({wrong[0][1]})" if wrong else "", discrimination])
    return _csv(out)


def manual_grading_csv(rows: list[StudentRow], assignment: Assignment) -> str:
    """Every answer to a [manual] item, with the prompt and rubric beside it and a blank score to fill in.

    Open items the assignment gives no points stay out (each student's feedback file still shows them)."""
    out = [["student_id", "name", "question", "points", "score", "comment", "answer", "prompt", "rubric"]]
    for q in assignment.open_questions:
        if q.ref not in assignment.manual:
            continue
        rubric = " | ".join(_plain(p) for p in q.rubric)
        for r in rows:
            if q.ref not in r.open_answers:
                continue
            score = r.manual.get(q.ref)
            factor = r.manual_factor.get(q.ref, 1.0)
            given = "" if score is None else (score / factor if factor else "")  # as given, before lateness
            out.append([r.student.student_id, r.student.name, q.ref, assignment.manual[q.ref], given,
                        r.comments.get(q.ref, ""), r.open_answers[q.ref][:5000], _plain(q.prompt), rubric])
    return _csv(out)


def feedback_markdown(row: StudentRow, assignment: Assignment, keys: bool = True) -> str:
    """A student's feedback file; with keys=False each question shows only its score (no answer, no verdict, no
    explanation or hint: nothing a classmate who has not handed in yet could copy), for feedback sent while late work
    is still coming in. Notes and problems are listed up to FEEDBACK_LINES, each line capped."""
    s = row.student
    lines = [f"# Feedback: {s.name or s.student_id} ({s.student_id})", "", f"Assignment: {assignment.title}", "",
             f"Score: {_num(row.total)} / {_num(assignment.max_points)}", ""]
    if row.files:
        lines += ["Files graded:", *(f"- {f}" for f in row.files), ""]
    remarks = [*row.problems, *row.notes]
    if remarks:
        lines += ["Notes:", *(f"- {_line(p)}" for p in remarks[:FEEDBACK_LINES])]
        if len(remarks) > FEEDBACK_LINES:
            lines.append(f"- ... and {len(remarks) - FEEDBACK_LINES} more")
        lines.append("")
    for q in assignment.questions:
        res = row.results.get(q.ref)
        if res is None:
            lines += [f"## {q.ref}: notebook not handed in", ""]
            continue
        score = f"{_num(row.scores[q.ref])}/{_num(assignment.points_of(q.ref))}"
        if not keys:
            lines += [f"## {q.ref}: {score}" + ("" if res.answered else " (not answered)"), ""]
            continue
        lines += [f"## {q.ref} ({score}): {res.status}", ""]
        lines += [res.feedback, ""]
        if res.explanation:
            lines += [f"Explanation: {res.explanation}", ""]
    for q in assignment.open_questions:
        ref = q.ref
        if ref not in row.open_answers and ref not in assignment.manual:
            continue
        score = row.manual.get(ref)
        head = (f"{_num(score)}/{_num(assignment.manual[ref])}, graded by hand" if score is not None
                else "to be graded by hand" if ref in assignment.manual else "not scored")
        text = row.open_answers.get(ref, "(not answered)")
        lines += [f"## {ref} (open, {head})", "", text[:2000], ""]
        if row.comments.get(ref):
            lines += [f"Grader's comment: {row.comments[ref]}", ""]
    return "\n".join(lines)


def _line(text: str, limit: int = 500) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


# Names Windows will not create a file under, whatever the extension (con.md opens the console).
_RESERVED = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)), *(f"lpt{i}" for i in range(10))}


def _feedback_names(rows: list[StudentRow]) -> list[str]:
    """A distinct file name per student, the same on every file system (case and unsafe characters folded)."""
    names, used = [], set()
    for r in rows:
        sid = r.student.student_id
        stem = re.sub(r"[^A-Za-z0-9._-]+", "_", sid).strip("._")[:80] or "student"
        if stem.split(".")[0].casefold() in _RESERVED:  # Windows reserves the name whatever follows its first dot
            stem = f"student-{stem}"
        name = stem
        if name.casefold() in used or stem != sid:
            name = f"{stem}-{hashlib.sha256(sid.encode('utf-8', 'surrogateescape')).hexdigest()[:8]}"
        n = 1
        while name.casefold() in used:
            n += 1
            name = f"{stem}-{n}"
        used.add(name.casefold())
        names.append(f"{name}.md")
    return names


def _write(path: Path, data: bytes, sync: bool = True) -> None:
    with open(path, "wb") as f:
        f.write(data)
        if sync:  # the CSVs reach the disk before they are renamed into place; feedback files are many and small
            f.flush()
            os.fsync(f.fileno())


def write_outputs(out: Path, rows: list[StudentRow], assignment: Assignment, keys: bool = True,
                  not_graded: list[str] = ()) -> dict[str, Path]:
    """Write every output into a new folder inside `out`, then move each into place; returns what was written."""
    out.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(dir=out, prefix=".grading-"))
    try:
        texts = {"gradebook.csv": gradebook_csv(rows, assignment), "canvas_import.csv": canvas_csv(rows, assignment),
                 "moodle_import.csv": moodle_csv(rows, assignment),
                 "item_analysis.csv": item_analysis_csv(rows, assignment),
                 "manual_grading.csv": manual_grading_csv(rows, assignment)}
        texts["not_graded.txt"] = ("".join(f"{line}\n" for line in not_graded)
                                   or "Every file was matched to a student.\n")
        for name, text in texts.items():
            # UTF-8 with a byte-order mark: Excel then reads accents right; Canvas, Moodle and csv readers accept it.
            _write(stage / name, text.encode("utf-8-sig"))
        (stage / "feedback").mkdir()
        for row, name in zip(rows, _feedback_names(rows)):
            _write(stage / "feedback" / name, feedback_markdown(row, assignment, keys).encode("utf-8"), sync=False)
        for name in texts:
            os.replace(stage / name, out / name)
        old = out / "feedback"
        if old.is_symlink() or old.is_file():
            old.unlink()
        if old.exists():
            trash = stage / "old-feedback"
            os.replace(old, trash)
        os.replace(stage / "feedback", old)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return {name: out / name for name in OUTPUT_FILES}

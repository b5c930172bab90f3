"""A generated class of submissions, with the grading each one should get: data for grader tests and benchmarks.

    python -m course_utils.quiz.demo_class OUT --students 30 --layout canvas

`make_class` writes OUT/roster.csv, OUT/expected.csv and every student's filled-in copies of the course's real
notebooks in one of the layouts instructors actually get (LAYOUTS):

- canvas      OUT/submissions/núñezjosé_120982_5001554_01_why_normalize.ipynb (`_LATE_` after the name when late; a
              resubmission is a second file with a larger submission id, named `..._01_why_normalize-1.ipynb`)
- canvas_zip  the same files in OUT/submissions.zip
- nbgrader    OUT/submitted/jnunez3/whole_course/01_why_normalize.ipynb and .../timestamp.txt (latest file only)
- folders     OUT/home/jnunez3/notebooks/01_why_normalize.ipynb (JupyterHub homes; an earlier attempt sits in
              .ipynb_checkpoints/), late by modification time

Off a hub (the canvas layouts) learners write `setup(student="<login>", ...)` for their own numbers; every key comes
from `Quiz.for_student(login)` where it exists. `make_class` returns a `DemoClass` holding the EXPECTED grading per
student: what the generator put in (a right answer, a wrong one, a blank, code), never the grader's output, so a test
can hold the grader against it. `write_hostile` writes one submission of each hostile kind (HOSTILE_KINDS) with what
the grader should report for it.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import random
import re
import struct
import sys
import unicodedata
import zipfile
import zlib
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from fractions import Fraction
from pathlib import Path

from .files import load_quiz
from .model import Question, Quiz

__all__ = ["LAYOUTS", "HOSTILE_KINDS", "DUE", "ASSIGNMENT", "NOTEBOOK_DIR", "notebook_quizzes", "StudentExpectation",
           "DemoClass", "make_class", "write_hostile", "main"]

NOTEBOOK_DIR = Path(__file__).resolve().parents[2] / "notebooks"
LAYOUTS = ("canvas", "canvas_zip", "nbgrader", "folders")
# nbgrader's assignment folder; the grader's assignment file of the same name lists the course's quizzes.
ASSIGNMENT = "whole_course"
# The due date of quizzes/assignments/whole_course.toml (a test keeps them equal): late files are an hour to three
# days after it, past any grace period; every other file is two to seven days before it.
DUE = datetime(2026, 12, 15, 23, 59, 0, tzinfo=timezone.utc)
_REVIEW_QUIZZES = ("chapter_2_4", "07_review", "self_check", "interview")
# A blank answer as the course's notebooks write it: `...`, an empty (raw) triple-quoted string, "" or None.
_BLANK = re.compile(r"""answer\(\s*(["'])(?P<ref>[A-Za-z0-9_]+\.[A-Za-z0-9_]+)\1\s*,\s*"""
                    r"""(?P<blank>\.\.\.|r?\"\"\"\s*\"\"\"|r?'''\s*'''|""|''|None)\s*\)""")
_SLOT = re.compile(r"@@FILL(\d+)@@")
# The setup cell's call, where a learner off JupyterHub names themselves: setup(student="jdoe1", seed=0).
_SETUP = re.compile(r"(?<![\w.])setup\(")
SETUP_SLOT = "setup:student"
_NO_STUDENT = re.compile(r",\s*student=None\b|\bstudent=None,\s*")
_OPEN_TEXTS = (
    "Because the statistics are taken over each token's own features, padding elsewhere in the batch cannot move them.",
    "Pre-LN keeps an identity path through the residual stream, so gradients reach early layers without warmup.",
    "RMSNorm drops the mean: one reduction instead of two, and re-centering mattered little in practice.",
    "γ and β let the layer undo the normalization where that helps; without them every token has unit scale.",
    "QK-norm bounds the attention logits by bounding |q| and |k|; soft-capping only squashes what has already grown.",
    "The variance uses N, not N-1: the normalization is of this vector, not an estimate for a population.",
)
_FIRST = ("Ava", "Liam", "Olivia", "Noah", "Emma", "Ethan", "Mia", "Lucas", "Sofia", "Mateo", "Amelia", "Arjun",
          "Chloe", "Kenji", "Fatima", "Omar", "Grace", "Wei", "Hannah", "Diego", "Priya", "Samuel", "Leah", "Tomás",
          "Nina", "Jonas", "Aisha", "Marco", "Ingrid", "Yusuf", "Clara", "Daniel", "Mei", "Oscar", "Ruth", "Ivan")
_LAST = ("Smith", "Garcia", "Chen", "Patel", "Kim", "Johnson", "Nguyen", "Müller", "Rossi", "Kowalski", "Okafor",
         "Silva", "Brown", "Tanaka", "Haddad", "Larsen", "Dubois", "Ivanova", "Lopez", "Singh", "Walker", "Cohen",
         "Moreau", "Novak", "Mensah", "Ortiz", "Bauer", "Sato", "Ali", "Fischer", "Khan", "Reyes", "Meyer", "Park")
# Names that trip naive handling: non-ASCII letters, a comma (CSV quoting), apostrophe and hyphen.
_SPECIAL_NAMES = {2: ("José", "Núñez"), 4: ("Mary-Kate", "O'Neill, Jr."), 6: ("Zoë", "Łukasiewicz-Søren")}
# (profile, alternate forms, blanks, skips a notebook, resubmits, late) for the first students, so that even a small
# class holds every case; later students are drawn at random.
_FIXED = {0: ("perfect", False, False, False, False, False), 1: ("all_wrong", False, False, False, False, False),
          2: ("perfect", True, False, False, False, False), 3: ("mix", False, False, False, True, False),
          4: ("mix", True, False, False, False, True), 5: ("mix", False, False, True, False, False),
          6: ("mix", False, True, False, False, False), 7: ("absent", False, False, False, False, False)}


def notebook_quizzes(stem: str) -> tuple[str, ...]:
    """The quizzes a notebook's answer cells belong to: its own, and the chapter's four in 07_review."""
    return _REVIEW_QUIZZES if stem == "07_review" else (stem,)


@dataclass(frozen=True)
class StudentExpectation:
    """One student as generated, and the grading the generator expects for them.

    `scores`/`statuses` cover every question of the class's notebooks; a status is "correct", "wrong", "unanswered",
    "code" (an answer that is an expression, not a literal), "recorded" (an open item's text) or "missing" (the
    notebook was not submitted). Paths are relative to `DemoClass.submissions` (zip member names for canvas_zip).
    """
    student_id: str
    name: str
    login: str
    email: str
    canvas_id: int
    profile: str  # "perfect", "all_wrong", "mix" or "absent" (submitted nothing)
    alternate_forms: bool
    scores: dict[str, float]
    statuses: dict[str, str]
    total: float
    late: bool
    missing: tuple[str, ...]
    latest: dict[str, str]  # notebook stem -> the file that counts
    older: dict[str, str]  # notebook stem -> an earlier version that does not count (resubmission or checkpoint)
    submitted_at: dict[str, datetime]  # notebook stem -> when the latest file was submitted


@dataclass(frozen=True)
class DemoClass:
    """Where a generated class was written and what grading it should get."""
    out: Path
    layout: str
    roster: Path
    submissions: Path  # what to give the grader: a folder, or the zip for canvas_zip
    assignment: str
    notebooks: tuple[str, ...]
    due: datetime
    points: dict[str, float]  # every scored question's points, by reference
    max_total: float
    students: dict[str, StudentExpectation]  # by student id, in roster order
    files: int
    bytes: int

    def path(self, relative: str) -> Path:
        """A file of the class on disk (not for canvas_zip, whose files are zip members)."""
        return self.submissions / relative


# ------------------------------------------------------------------------------------------------------ notebooks

@dataclass(frozen=True)
class _Template:
    """A notebook dumped once with a token where each answer goes: filling it is a join, not a json.dumps."""
    parts: tuple[str, ...]  # text, slot, text, slot, ..., text
    slots: tuple[int, ...]
    refs: tuple[str, ...]  # slot -> question reference
    blanks: tuple[str, ...]  # slot -> the blank as the notebook wrote it

    def fill(self, literals: dict[str, str]) -> bytes:
        """The notebook's bytes with each slot's answer literal (Python source) in place; absent refs stay blank."""
        out = [self.parts[0]]
        for slot, text in zip(self.slots, self.parts[1:]):
            literal = literals.get(self.refs[slot], self.blanks[slot])
            out.append(json.dumps(literal, ensure_ascii=False)[1:-1])
            out.append(text)
        return "".join(out).encode("utf-8")


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _template(stem: str, quizzes: list[Quiz], small: bool) -> _Template:
    """Read a course notebook once; mark its blank answers, adding an answer cell for each question that has none."""
    nb = json.loads((NOTEBOOK_DIR / f"{stem}.ipynb").read_text(encoding="utf-8"))
    wanted = [q.ref for quiz in quizzes for q in quiz.questions]
    refs, blanks = [], []

    def mark(m: re.Match) -> str:
        if m["ref"] not in wanted:
            return m[0]
        refs.append(m["ref"])
        blanks.append(m["blank"])
        return f"{m[0][:m.start('blank') - m.start()]}@@FILL{len(refs) - 1}@@)"

    cells, last_answer = [], None
    for cell in nb["cells"]:
        cell = dict(cell)
        if cell.get("cell_type") == "code":
            source = cell.get("source", "")
            source = "".join(source) if isinstance(source, list) else source
            marked = _BLANK.sub(mark, source)
            answers = marked != source
            if not answers and small:
                continue
            if not small and SETUP_SLOT not in refs and _SETUP.search(marked):
                refs.append(SETUP_SLOT)
                blanks.append("")
                # The handed-out cell reads `setup(..., student=None)`: the learner's id takes the place of None.
                marked = _NO_STUDENT.sub("", marked, count=1)
                marked = _SETUP.sub(f"setup(@@FILL{len(refs) - 1}@@", marked, count=1)
            cell |= {"source": _lines(marked), "outputs": [], "execution_count": None}
            if answers:
                last_answer = len(cells)
        elif small:
            continue
        cells.append(cell)
    added = []
    for ref in wanted:
        if ref not in refs:
            refs.append(ref)
            blanks.append("...")
            added.append({"cell_type": "code", "execution_count": None, "id": "answer-" + ref.replace(".", "-"),
                          "metadata": {}, "outputs": [], "source": [f'answer("{ref}", @@FILL{len(refs) - 1}@@)']})
    at = len(cells) if last_answer is None else last_answer + 1
    cells[at:at] = added
    nb["cells"] = cells
    pieces = _SLOT.split(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return _Template(parts=tuple(pieces[0::2]), slots=tuple(int(s) for s in pieces[1::2]), refs=tuple(refs),
                     blanks=tuple(blanks))


# ------------------------------------------------------------------------------------------------------ answers

def _num(x: float) -> str:
    """A number as a learner would type it: 16, not 16.0."""
    if x == int(x) and abs(x) < 1e15:
        return str(int(x))
    return repr(float(f"{x:.12g}"))


def _half_width(q: Question) -> float:
    """How far from the key a response may be and still match, as the question declares it."""
    width = 0.5 * 10.0 ** -q.decimals if q.decimals is not None else 0.0
    return max(width, q.tolerance or 0.0, (q.rel_tolerance or 0.0) * abs(float(q.answer)))


def _near(q: Question, x: float) -> bool:
    """Whether x is well inside the key's tolerance (a hundredth of it), so it matches whatever rounding is done."""
    return abs(x - float(q.answer)) <= 0.01 * _half_width(q)


def _key_text(q: Question) -> str:
    """The key as a learner writes it: the fewest digits well inside the tolerance (336.6, not 336.59999999999997)."""
    key = float(q.answer)
    if key == int(key) and abs(key) < 1e15:
        return str(int(key))
    return next((t for t in (f"{key:.{p}g}" for p in range(1, 18)) if _near(q, float(t))), repr(key))


def _right_forms(q: Question) -> list[str]:
    """Other ways of writing the key, each well inside its tolerance: quoted, padded, a trailing zero, a fraction."""
    key, text = float(q.answer), _key_text(q)
    forms = [f'"{text}"', f'" {text} "']
    if "." in text and "e" not in text:
        forms.append(text + "0")
    if "e" in text:
        forms.append(text.replace("e", ".0E") if "." not in text else text.upper())
    frac = Fraction(key).limit_denominator(64)
    if frac.denominator > 1 and _near(q, float(frac)):
        forms += [f'"{frac.numerator}/{frac.denominator}"', f"{frac.numerator}/{frac.denominator}"]
    if key < 0:
        forms.append(f'"\u2212{text[1:]}"')
    return [f for f in forms if _near(q, _value(f))]


def _wrong_values(q: Question) -> list[float]:
    """The listed mistakes, and the key plus one (or more, where 1 is inside the tolerance): all clear of the key."""
    key, margin = float(q.answer), 3 * _half_width(q)
    wrong = [float(m.value) for m in q.mistakes if abs(float(m.value) - key) > margin]
    return wrong + [key + (1.0 if margin < 1.0 else math.ceil(margin) + 1.0)]


def _value(form: str) -> float:
    """The number a numeric form stands for, read here by hand so the check does not lean on the grader."""
    text = form.strip('"').strip().replace("\u2212", "-")
    num, _, den = text.partition("/")
    return float(Fraction(num) / Fraction(den)) if den else float(text)


def _choice_forms(label: str) -> list[str]:
    return [f'" {label.upper()} "', f'"({label})"', f'"{label})"', f'"{label.upper()}"']


def _literal(q: Question, status: str, alternate: bool, rng: random.Random) -> str | None:
    """The Python source of one response with the given outcome; None leaves the cell's blank as it is."""
    if status in ("unanswered", "missing"):
        return None
    if status == "code":
        return rng.choice(("z[0].item()", "mu", "round(var, 2)", "x.mean()"))
    if q.kind == "open":
        return 'r"""' + rng.choice(_OPEN_TEXTS) + '"""'
    use_alternate = alternate and rng.random() < 0.6
    if q.kind == "choice":
        label = q.answer if status == "correct" else rng.choice([c.label for c in q.choices if c.label != q.answer])
        return rng.choice(_choice_forms(label)) if use_alternate else f'"{label}"'
    if status == "correct":
        return rng.choice(_right_forms(q)) if use_alternate else _key_text(q)
    value = _num(rng.choice(_wrong_values(q)))
    return f'"{value}"' if use_alternate else value


def _statuses(questions: list[Question], profile: str, p_right: float, p_blank: float,
              rng: random.Random) -> dict[str, str]:
    out = {}
    for q in questions:
        roll = rng.random()
        if q.kind == "open":
            out[q.ref] = "unanswered" if profile == "mix" and roll < 2 * p_blank else "recorded"
        elif profile == "perfect":
            out[q.ref] = "correct"
        elif profile == "all_wrong":
            out[q.ref] = "wrong"
        elif roll < p_blank:
            out[q.ref] = "unanswered"
        elif roll < p_blank + 0.02:
            out[q.ref] = "code"
        else:
            out[q.ref] = "correct" if rng.random() < p_right else "wrong"
    return out


def _earlier(statuses: dict[str, str]) -> dict[str, str]:
    """A first attempt that differs from the final one in every scored answer."""
    flip = {"correct": "wrong", "wrong": "correct", "unanswered": "wrong", "code": "correct"}
    return {ref: flip.get(s, s) for ref, s in statuses.items()}


# ------------------------------------------------------------------------------------------------------ students

def _ascii(text: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFKD", text) if c.isascii() and c.isalpha()).lower()


@dataclass
class _Student:
    index: int
    first: str
    last: str
    profile: str
    alternate: bool
    p_right: float
    p_blank: float
    skips: tuple[str, ...]
    resubmits: tuple[str, ...]
    late: bool
    rng: random.Random

    @property
    def name(self) -> str:
        return f"{self.first} {self.last}"

    @property
    def student_id(self) -> str:
        return f"s{self.index + 1:04d}"

    @property
    def login(self) -> str:
        return f"{_ascii(self.first)[:1]}{_ascii(self.last)[:8]}{self.index + 1}"

    @property
    def canvas_name(self) -> str:
        """Canvas's file-name form of the sortable name: last name then first, lower case, letters and digits only."""
        return "".join(c for c in unicodedata.normalize("NFC", self.last + self.first).lower() if c.isalnum())


def _student(seed: int, index: int, stems: list[str]) -> _Student:
    """A student's profile, from the seed and their index alone: adding students never changes earlier ones."""
    rng = random.Random(f"demo-class/{seed}/{index}")
    first, last = _SPECIAL_NAMES.get(index) or (rng.choice(_FIRST), rng.choice(_LAST))
    if index == 9:
        # Two students with the same name: only the canvas id tells their files apart.
        first, last = _student(seed, 8, stems).first, _student(seed, 8, stems).last
    if index in _FIXED:
        profile, alternate, blanks, skip, resubmit, late = _FIXED[index]
    else:
        roll = rng.random()
        profile = "perfect" if roll < 0.03 else "all_wrong" if roll < 0.06 else "absent" if roll < 0.07 else "mix"
        alternate, blanks = rng.random() < 0.2, rng.random() < 0.15
        skip, resubmit, late = rng.random() < 0.05, rng.random() < 0.05, rng.random() < 0.05
        if profile != "mix":
            skip = resubmit = late = False
    skips = tuple(rng.sample(stems, min(len(stems) - 1, rng.choice((1, 1, 2))))) if skip and len(stems) > 1 else ()
    kept = [s for s in stems if s not in skips]
    resubmits = tuple(sorted(rng.sample(kept, min(len(kept), rng.choice((1, 2)))))) if resubmit and kept else ()
    return _Student(index=index, first=first, last=last, profile=profile, alternate=alternate,
                    p_right=rng.uniform(0.35, 0.9), p_blank=0.25 if blanks else 0.04, skips=skips,
                    resubmits=resubmits, late=late, rng=rng)


def _quizzes_for(base: dict[str, Quiz], login: str) -> dict[str, Quiz]:
    """Each quiz as this student gets it: parameterised keys via Quiz.for_student where the quiz has it."""
    out = {}
    for name, quiz in base.items():
        for_student = getattr(quiz, "for_student", None)
        out[name] = for_student(login) if for_student is not None else quiz
    return out


def _canvas_id(seed: int, index: int) -> int:
    return 100_000 + 7_919 * index + random.Random(f"canvas/{seed}/{index}").randrange(7_919)


# ------------------------------------------------------------------------------------------------------ layouts

@dataclass(frozen=True)
class _File:
    student: int
    stem: str
    when: datetime
    template: _Template
    literals: dict[str, str]
    final: bool  # the version that counts (False: a resubmission's first attempt)

    @property
    def data(self) -> bytes:
        return self.template.fill(self.literals)


def _stamp(when: datetime) -> str:
    """nbgrader's timestamp.txt format."""
    return when.strftime("%Y-%m-%d %H:%M:%S.%f UTC")


def _set_mtime(path: Path, when: datetime) -> None:
    ns = int(when.timestamp()) * 10**9 + when.microsecond * 1000
    os.utime(path, ns=(ns, ns))


def _write(path: Path, data: bytes, when: datetime) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    _set_mtime(path, when)


def _canvas_names(files: list[_File], students: list[_Student], seed: int) -> dict[int, str]:
    """Canvas file names; submission ids rise with submission time across the class, as Canvas's do."""
    order = sorted(range(len(files)), key=lambda i: (files[i].when, i))
    names = {}
    for rank, i in enumerate(order):
        f, s = files[i], students[files[i].student]
        late = "_LATE" if f.when > DUE else ""
        resubmitted = "-1" if f.final and f.stem in s.resubmits else ""
        submission = 5_000_000 + 37 * rank
        names[i] = f"{s.canvas_name}{late}_{_canvas_id(seed, s.index)}_{submission}_{f.stem}{resubmitted}.ipynb"
    return names


def _write_layout(out: Path, layout: str, files: list[_File], students: list[_Student],
                  seed: int) -> tuple[Path, dict[int, str], int]:
    """Write the files as the layout has them: the submissions root, each written file's path relative to it, bytes."""
    size = 0
    if layout in ("canvas", "canvas_zip"):
        rel = _canvas_names(files, students, seed)
        if layout == "canvas":
            root = out / "submissions"
            root.mkdir(parents=True, exist_ok=True)
            for i, f in enumerate(files):
                data = f.data
                _write(root / rel[i], data, f.when)
                size += len(data)
            return root, rel, size
        root = out / "submissions.zip"
        with zipfile.ZipFile(root, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as zf:
            for i in sorted(rel, key=rel.__getitem__):
                # Fixed metadata, so the same class gives the same bytes.
                info = zipfile.ZipInfo(rel[i], date_time=files[i].when.timetuple()[:6])
                info.compress_type, info.external_attr = zipfile.ZIP_DEFLATED, 0o644 << 16
                data = files[i].data
                zf.writestr(info, data, compresslevel=6)
                size += len(data)
        return root, rel, size
    rel: dict[int, str] = {}
    if layout == "nbgrader":
        # `nbgrader collect` keeps only a student's latest submission, stamped once per assignment.
        root = out / "submitted"
        latest: dict[int, datetime] = {}
        for i, f in enumerate(files):
            if not f.final:
                continue
            rel[i] = f"{students[f.student].login}/{ASSIGNMENT}/{f.stem}.ipynb"
            data = f.data
            _write(root / rel[i], data, f.when)
            size += len(data)
            latest[f.student] = max(latest.get(f.student, f.when), f.when)
        for student, when in latest.items():
            _write(root / students[student].login / ASSIGNMENT / "timestamp.txt", _stamp(when).encode(), when)
        return root, rel, size
    root = out / "home"
    for i, f in enumerate(files):
        login = students[f.student].login
        # JupyterHub keeps the last autosave beside the notebook; an earlier attempt lands there.
        rel[i] = (f"{login}/notebooks/{f.stem}.ipynb" if f.final
                  else f"{login}/notebooks/.ipynb_checkpoints/{f.stem}-checkpoint.ipynb")
        data = f.data
        _write(root / rel[i], data, f.when)
        size += len(data)
    return root, rel, size


# ------------------------------------------------------------------------------------------------------ the class

def make_class(out: Path, n_students: int, *, layout: str = "canvas", seed: int = 0,
               notebooks: list[str] | None = None, small: bool = False) -> DemoClass:
    """Write a roster and a class's filled-in notebooks under out in the given layout; return what grading to expect."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    stems = (list(notebooks) if notebooks is not None
             else sorted(p.stem for p in NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb")))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    quiz_names = {stem: list(notebook_quizzes(stem)) for stem in stems}
    all_names = [name for stem in stems for name in quiz_names[stem]]
    base = {name: load_quiz(name) for name in all_names}
    templates = {stem: _template(stem, [base[n] for n in quiz_names[stem]], small) for stem in stems}
    students = [_student(seed, i, stems) for i in range(n_students)]

    files: list[_File] = []
    plans = []
    for s in students:
        quizzes = _quizzes_for(base, s.login)
        statuses, literals_by_stem, earlier_by_stem = {}, {}, {}
        for stem in stems:
            questions = [q for name in quiz_names[stem] for q in quizzes[name].questions]
            final = _statuses(questions, s.profile, s.p_right, s.p_blank, s.rng)
            if s.profile == "absent" or stem in s.skips:
                final = {ref: "missing" for ref in final}
            statuses |= final
            literals_by_stem[stem] = {q.ref: _literal(q, final[q.ref], s.alternate, s.rng) for q in questions}
            if layout in ("canvas", "canvas_zip"):
                # Off JupyterHub a learner names themselves in the setup cell to get their own numbers.
                literals_by_stem[stem][SETUP_SLOT] = f'student="{s.login}", '
            if stem in s.resubmits:
                first = _earlier(final)
                earlier_by_stem[stem] = {q.ref: _literal(q, first[q.ref], s.alternate, s.rng) for q in questions}
                earlier_by_stem[stem][SETUP_SLOT] = literals_by_stem[stem].get(SETUP_SLOT)
        plans.append((s, quizzes, statuses))
        for stem in stems:
            if s.profile == "absent" or stem in s.skips:
                continue
            offset = timedelta(seconds=s.rng.randrange(3_600, 3 * 86_400)) if s.late else \
                -timedelta(seconds=s.rng.randrange(2 * 86_400, 7 * 86_400))
            when = (DUE + offset).replace(microsecond=s.rng.randrange(10**6))
            if stem in earlier_by_stem:
                files.append(_File(s.index, stem, when, templates[stem], _clean(earlier_by_stem[stem]), False))
                when += timedelta(seconds=s.rng.randrange(600, 86_400))
            files.append(_File(s.index, stem, when, templates[stem], _clean(literals_by_stem[stem]), True))

    root, rel, size = _write_layout(out, layout, files, students, seed)
    _write_roster(out / "roster.csv", students, seed)

    points = {q.ref: q.points for name in all_names for q in base[name].questions if q.scored}
    by_student: dict[int, list[tuple[int, _File]]] = {}
    for i, f in enumerate(files):
        by_student.setdefault(f.student, []).append((i, f))
    expected = {}
    for s, quizzes, statuses in plans:
        mine = by_student.get(s.index, [])
        scored = {q.ref: q for name in all_names for q in quizzes[name].questions}
        scores = {ref: (scored[ref].points if st == "correct" else 0.0) for ref, st in statuses.items()}
        expected[s.student_id] = StudentExpectation(
            student_id=s.student_id, name=s.name, login=s.login, email=f"{s.login}@students.example.edu",
            canvas_id=_canvas_id(seed, s.index), profile=s.profile, alternate_forms=s.alternate, scores=scores,
            statuses=statuses, total=sum(scores[ref] for ref in scores if scored[ref].scored), late=s.late,
            missing=tuple(stem for stem in stems if s.profile == "absent" or stem in s.skips),
            latest={f.stem: rel[i] for i, f in mine if f.final},
            older={f.stem: rel[i] for i, f in mine if not f.final and i in rel},
            submitted_at={f.stem: f.when for _, f in mine if f.final})
    _write_expected(out / "expected.csv", expected, sum(points.values()))
    return DemoClass(out=out, layout=layout, roster=out / "roster.csv", submissions=root, assignment=ASSIGNMENT,
                     notebooks=tuple(stems), due=DUE, points=points, max_total=sum(points.values()),
                     students=expected, files=len(rel), bytes=size)


def _clean(literals: dict[str, str | None]) -> dict[str, str]:
    return {ref: lit for ref, lit in literals.items() if lit is not None}


def _write_roster(path: Path, students: list[_Student], seed: int) -> None:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["student_id", "name", "login", "email", "canvas_id"])
    for s in students:
        writer.writerow([s.student_id, s.name, s.login, f"{s.login}@students.example.edu", _canvas_id(seed, s.index)])
    path.write_text(buf.getvalue(), encoding="utf-8")


def _write_expected(path: Path, expected: dict[str, StudentExpectation], max_total: float) -> None:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["student_id", "login", "profile", "expected_total", "max_total", "late", "missing"])
    for e in expected.values():
        writer.writerow([e.student_id, e.login, e.profile, f"{e.total:g}", f"{max_total:g}", int(e.late),
                         " ".join(e.missing)])
    path.write_text(buf.getvalue(), encoding="utf-8")


# ------------------------------------------------------------------------------------------------------ hostile

def _notebook(*sources: str) -> bytes:
    cells = [{"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {}, "outputs": [],
              "source": _lines(src)} for i, src in enumerate(sources)]
    nb = {"cells": cells, "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python",
                                                      "name": "python3"}}, "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(nb, indent=1, ensure_ascii=False).encode("utf-8")


_PLAIN = _notebook('answer("01_why_normalize.q1", 16)', 'answer("01_why_normalize.q3", "a")')
_STEM = "01_why_normalize"


def _h_fifo(folder: Path) -> dict[str, str]:
    name = f"fifo_11_11_{_STEM}.ipynb"
    os.mkfifo(folder / name)
    return {name: "not a regular file (a FIFO): skipped without opening it (a read would block), reported"}


def _h_symlink_dev_zero(folder: Path) -> dict[str, str]:
    name = f"devzero_12_12_{_STEM}.ipynb"
    os.symlink("/dev/zero", folder / name)
    return {name: "a symbolic link (to /dev/zero): not followed, never read, reported"}


def _h_symlink_other(folder: Path, victim: Path | None = None) -> dict[str, str]:
    out = {}
    if victim is None:
        victim = folder / f"victim_13_13_{_STEM}.ipynb"
        victim.write_bytes(_PLAIN)
        out[victim.name] = "an ordinary submission (another student's link points at it): graded once, normally"
    name = f"copycat_14_14_{_STEM}.ipynb"
    os.symlink(os.path.relpath(victim, folder), folder / name)
    return out | {name: "a symbolic link to another student's notebook: not followed, not graded as this student, "
                        "reported"}


def _h_name_not_utf8(folder: Path) -> dict[str, str]:
    raw = b"bad\xff_15_15_" + _STEM.encode() + b".ipynb"
    with open(os.path.join(os.fsencode(folder), raw), "wb") as f:
        f.write(_PLAIN)
    return {os.fsdecode(raw): "file name not valid UTF-8: read and graded, the name shown with the bad byte escaped "
                              "in every report and CSV, never a crash"}


_SPECIAL = ("=HYPERLINK(1)", "+SUM(1)", "-2+3", "@SUM(1)", 'say "hi"', "doe, jane", "tab\there", "cr\rhere",
            "lf\nhere")


def _h_name_specials(folder: Path) -> dict[str, str]:
    out = {}
    for i, prefix in enumerate(_SPECIAL):
        name = f"{prefix}_{16 + i}_{16 + i}_{_STEM}.ipynb"
        (folder / name).write_bytes(_PLAIN)
        out[name] = ("graded (an unknown student); the name shown with CR/LF/tab escaped and, in CSV, quoted and "
                     "never read as a formula (a leading =, +, -, @ is neutralised)")
    return out


def _h_magic_lines(folder: Path) -> dict[str, str]:
    name = f"magic_30_30_{_STEM}.ipynb"
    cell = 'answer("01_why_normalize.q1", 16)\n' + "\n" * 65_536 + "%timeit x.mean()\n!ls\n" * 500
    (folder / name).write_bytes(_notebook(cell))
    return {name: "read in well under a second: blank lines and %magic/!shell lines ignored, 01_why_normalize.q1 "
                  "graded correct"}


def _h_huge_cell(folder: Path) -> dict[str, str]:
    name = f"hugecell_31_31_{_STEM}.ipynb"
    (folder / name).write_bytes(_notebook('answer("01_why_normalize.q1", "' + "7" * 9_800_000 + '")'))
    return {name: "an answer cell of 9.8 MB: not parsed (over the cell limit), its answer reported as not read, "
                  "no slowdown"}


def _h_random_bytes(folder: Path) -> dict[str, str]:
    name = f"random_32_32_{_STEM}.ipynb"
    (folder / name).write_bytes(random.Random(32).randbytes(10_000_000))
    return {name: "10 MB of random bytes: reported unreadable (not UTF-8 / not JSON)"}


def _h_deep_json(folder: Path) -> dict[str, str]:
    name = f"deep_33_33_{_STEM}.ipynb"
    depth = 4_999_950
    (folder / name).write_bytes(b'{"nbformat": 4, "nbformat_minor": 5, "metadata": {"x": ' + b"[" * depth
                                + b"]" * depth + b'}, "cells": []}')
    return {name: "10 MB of valid but deeply nested JSON: reported unreadable (too deeply nested), no RecursionError "
                  "escapes"}


def _h_many_cells(folder: Path) -> dict[str, str]:
    name = f"manycells_34_34_{_STEM}.ipynb"
    cell = '{"cell_type":"code","source":"answer(\\"x.q1\\", 1)"}'
    (folder / name).write_bytes(('{"nbformat":4,"nbformat_minor":5,"metadata":{},"cells":['
                                 + ",".join([cell] * 200_000) + "]}").encode())
    return {name: "200,000 tiny cells each answering unknown quiz x: reading stops at the answer/time limit, "
                  "reported (too much to read, unknown question), bounded time and memory"}


def _h_odd_calls(folder: Path) -> dict[str, str]:
    name = f"oddcalls_35_35_{_STEM}.ipynb"
    (folder / name).write_bytes(_notebook(
        'kw = {"ref": "01_why_normalize.q1", "response": 16}\nanswer(**kw)',
        'answer("01_why_normalize.q1", x)',
        'answer("01_why_normalize.q2", 9**9**9)',
        'answer("01_why_normalize.q3", ' + "9" * 50_000 + ")"))
    return {name: "nothing evaluated: **kwargs reported as unpacking, a name as code, 9**9**9 never computed "
                  "(unreadable), a 50,000-digit int unreadable; all score 0, no hang"}


def _h_merged_names(folder: Path) -> dict[str, str]:
    out = {}
    for name in (f"a b_36_36_{_STEM}.ipynb", f"a_b_36_36_{_STEM}.ipynb"):
        (folder / name).write_bytes(_PLAIN)
        out[name] = ("one of two names a file-system-safe mapping would merge (same canvas id): each file reported "
                     "under its own name, neither one's feedback or output overwrites the other's")
    return out


def _h_nbformat3(folder: Path) -> dict[str, str]:
    name = f"nbformat3_37_37_{_STEM}.ipynb"
    nb = {"metadata": {"name": _STEM}, "nbformat": 3, "nbformat_minor": 0,
          "worksheets": [{"cells": [{"cell_type": "code", "input": 'answer("01_why_normalize.q1", 16)',
                                     "language": "python", "outputs": []}], "metadata": {}}]}
    (folder / name).write_text(json.dumps(nb, indent=1), encoding="utf-8")
    return {name: "nbformat 3: reported as the wrong notebook format (need 4), not graded"}


def _h_invalid_json(folder: Path) -> dict[str, str]:
    name = f"invalid_38_38_{_STEM}.ipynb"
    (folder / name).write_text('{"cells": [ this is not json', encoding="utf-8")
    return {name: "invalid JSON: reported with line and column, not graded"}


def _h_empty(folder: Path) -> dict[str, str]:
    name = f"empty_39_39_{_STEM}.ipynb"
    (folder / name).write_bytes(b"")
    return {name: "an empty file: reported (empty / invalid JSON), not graded"}


def _h_directory(folder: Path) -> dict[str, str]:
    name = f"dir_40_40_{_STEM}.ipynb"
    (folder / name).mkdir()
    return {name: "a directory named like a notebook: not read as a file, skipped or reported, never a crash"}


_MIB = 1 << 20
_CRC_ZEROS = {128 * _MIB: 0x80654151, 1024 * _MIB: 0x5B64C2B0}  # zlib.crc32 of that many zero bytes


def _deflated_zeros(mib: int) -> bytes:
    """Raw deflate of mib MiB of zeros, built from one compressed MiB: after a full flush every MiB compresses alike."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = c.compress(bytes(_MIB)) + c.flush(zlib.Z_FULL_FLUSH)
    return block * mib + c.flush()


def _zip_raw(members: list[tuple[str, bytes, int, int]]) -> bytes:
    """A zip of deflated members (name, data, crc, declared size) written by hand, so a size can lie."""
    body, central = bytearray(), bytearray()
    for name, data, crc, size in members:
        raw = name.encode()
        offset = len(body)
        fields = (20, 0, 8, 0, 0x5921, crc, len(data), size, len(raw), 0)
        body += struct.pack("<IHHHHHIIIHH", 0x04034B50, *fields) + raw + data
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, *fields, 0, 0, 0, 0o644 << 16, offset) + raw
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(members), len(members), len(central), len(body), 0)
    return bytes(body + central + end)


def _h_zip_bomb(folder: Path) -> dict[str, str]:
    name = "bombs_41_41_submissions.zip"
    liar, zeros = f"liar_42_42_{_STEM}.ipynb", f"zeros_43_43_{_STEM}.ipynb"
    (folder / name).write_bytes(_zip_raw([(liar, _deflated_zeros(128), _CRC_ZEROS[128 * _MIB], 1234),
                                          (zeros, _deflated_zeros(1024), _CRC_ZEROS[1024 * _MIB], 1024 * _MIB)]))
    return {f"{name}/{liar}": "declares 1,234 bytes but inflates to 128 MiB: inflating stops at the size cap, "
                              "reported (corrupt or over the limit), memory stays bounded",
            f"{name}/{zeros}": "1 GiB of zeros when inflated: refused by its declared size (over 10 MB), never "
                               "inflated"}


def _victim_ids(victim: Path | None) -> tuple[str, str]:
    """(LMS id, folder name) of the classmate a planted file names: the victim's, where its path says them."""
    from .students import _CANVAS

    m = _CANVAS.fullmatch(victim.name) if victim is not None else None
    if m:
        return m.group("uid"), m.group("uid")
    return "13", victim.parent.name if victim is not None else "victim"


def _h_planted_claim(folder: Path, victim: Path | None = None) -> dict[str, str]:
    uid, login = _victim_ids(victim)
    blank = _notebook('answer("01_why_normalize.q1", ...)')
    canvas = folder / "mallory" / f"x_{uid}_99999999_{_STEM}.ipynb"
    nbgrader = folder / "mallory" / "junk" / "submitted" / login / "x" / f"{_STEM}.ipynb"
    nbgrader.parent.mkdir(parents=True)
    canvas.write_bytes(blank)
    nbgrader.write_bytes(blank)
    (nbgrader.parent / "timestamp.txt").write_text("2030-01-01 00:00:00.000000 UTC", encoding="utf-8")
    return {f"mallory/{canvas.name}": "a blank notebook named as a classmate's LMS file, in the holder's own folder: "
                                      "graded as the holder's, reported on the holder's row; the classmate's row "
                                      "is untouched",
            f"mallory/junk/submitted/{login}/x/{_STEM}.ipynb": "an nbgrader path naming a classmate, with a late "
                                                               "timestamp.txt: the same; the timestamp dates nothing"}


def _h_huge_folder(folder: Path) -> dict[str, str]:
    lib = folder / "venvowner" / "venv" / "lib"
    lib.mkdir(parents=True)
    from .students import MAX_STUDENT_ENTRIES

    for i in range(MAX_STUDENT_ENTRIES + 1):  # one past the budget: 200,001 cost no more (the walk stops at it)
        os.close(os.open(lib / f"m{i}.py", os.O_CREAT | os.O_WRONLY, 0o644))
    return {"venvowner/": f"{MAX_STUDENT_ENTRIES + 1:,} files in one student's folder (a virtualenv): the walk "
                          "stops at that student's budget, their row says so, the rest of the class is graded in "
                          "full"}


def _h_big_zips(folder: Path) -> dict[str, str]:
    cell = '{"cell_type":"code","source":"answer(\\"x.q1\\", 1)"}'
    big = ('{"nbformat":4,"nbformat_minor":5,"metadata":{},"cells":[' + ",".join([cell] * 190_000) + "]}").encode()
    noise = random.Random(44).randbytes(15 << 20)
    out = {}
    for i in range(3):
        name = f"bigzips_44_{440 + i}_part{i}.zip"
        with zipfile.ZipFile(folder / name, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
            for j in range(30):
                zf.writestr(f"copy{j:02d}/{_STEM}.ipynb", big)
            zf.writestr("noise.bin", noise)
        out[name] = ("a 20 MB zip of thirty 9.5 MB notebooks, three of them from one student: reading stops at the "
                     "budget per student (files, bytes, seconds), their row says so, memory stays bounded")
    return out


HOSTILE_KINDS = {"fifo": _h_fifo, "symlink_dev_zero": _h_symlink_dev_zero, "symlink_other": _h_symlink_other,
                 "name_not_utf8": _h_name_not_utf8, "name_specials": _h_name_specials, "magic_lines": _h_magic_lines,
                 "huge_cell": _h_huge_cell, "random_bytes": _h_random_bytes, "deep_json": _h_deep_json,
                 "many_cells": _h_many_cells, "odd_calls": _h_odd_calls, "merged_names": _h_merged_names,
                 "nbformat3": _h_nbformat3, "invalid_json": _h_invalid_json, "empty": _h_empty,
                 "directory": _h_directory, "zip_bomb": _h_zip_bomb, "planted_claim": _h_planted_claim,
                 "huge_folder": _h_huge_folder, "big_zips": _h_big_zips}


def write_hostile(folder: Path, kinds: list[str] | None = None, *, victim: Path | None = None) -> dict[str, str]:
    """Write one submission of each hostile kind (all of HOSTILE_KINDS by default) into folder.

    Returns file name -> what the grader should report; a zip member is named "<zip>/<member>", and the name that is
    not UTF-8 is given as os.fsdecode gives it. `victim` is the notebook the symlink_other link points at (default:
    one written beside it).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for kind in kinds if kinds is not None else HOSTILE_KINDS:
        writer = HOSTILE_KINDS[kind]
        out |= writer(folder, victim) if kind in ("symlink_other", "planted_claim") else writer(folder)
    return out


# ------------------------------------------------------------------------------------------------------ command

def main(argv: list[str] | None = None) -> int:
    """Write a demo class and say what was written."""
    import time

    parser = argparse.ArgumentParser(prog="python -m course_utils.quiz.demo_class", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, metavar="OUT", help="folder to write the class into")
    parser.add_argument("--students", type=int, default=30, help="class size (default 30)")
    parser.add_argument("--layout", choices=LAYOUTS, default="canvas", help="how the files are laid out")
    parser.add_argument("--seed", type=int, default=0, help="the same seed writes the same bytes (default 0)")
    parser.add_argument("--small", action="store_true", help="notebooks of just the answer cells")
    parser.add_argument("--hostile", action="store_true", help="also write hostile submissions into OUT/hostile")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    demo = make_class(args.out, args.students, layout=args.layout, seed=args.seed, small=args.small)
    seconds = time.perf_counter() - start
    profiles = [e.profile for e in demo.students.values()]
    late = sum(e.late for e in demo.students.values())
    resubmitted = sum(bool(e.older) for e in demo.students.values())
    skipped = sum(bool(e.missing) and e.profile != "absent" for e in demo.students.values())
    print(f"wrote {args.students} students x {len(demo.notebooks)} notebooks: {demo.files} files, "
          f"{demo.bytes / 1e6:.1f} MB, in {seconds:.1f} s ({args.layout} layout, seed {args.seed})")
    print(f"  roster:      {demo.roster}")
    print(f"  submissions: {demo.submissions}")
    print(f"  expected:    {demo.out / 'expected.csv'} (expected total per student, out of {demo.max_total:g})")
    print(f"  profiles: {profiles.count('perfect')} perfect, {profiles.count('all_wrong')} all wrong, "
          f"{profiles.count('mix')} mixed, {profiles.count('absent')} submitted nothing; {skipped} skipped a notebook, "
          f"{resubmitted} resubmitted, {late} late (due {_stamp(DUE)})")
    if args.hostile:
        hostile = write_hostile(demo.out / "hostile")
        print(f"  hostile:     {demo.out / 'hostile'} ({len(hostile)} files of {len(HOSTILE_KINDS)} kinds)")
    print(f"grade it with:\n  python -m course_utils.grade {demo.submissions} --assignment "
          f"quizzes/assignments/{ASSIGNMENT}.toml --roster {demo.roster} --out {demo.out / 'graded'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

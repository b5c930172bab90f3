"""Reading answers from a notebook as data: every `answer("<quiz>.<id>", <literal>)` call, found with `ast`.

Nothing from a submission is executed, imported or evaluated. A response is accepted if `ast.literal_eval` reads it
(a number, a string, `...` meaning unanswered) or if it is plain arithmetic on number literals such as `7/8`;
anything else (a name, a call, an attribute) is "answer is code, not a literal" and scores 0.

Every cost is bounded before it is paid, so a hostile file costs at most a few seconds and a few hundred MB: the file
is capped at MAX_BYTES before parsing; only cells that mention `answer` are parsed, each up to MAX_CELL_CHARS and all
together up to MAX_PARSED_CHARS; at most MAX_ANSWERS calls are read; and reading stops at a deadline. No regular
expression here can backtrack on long input.
"""
from __future__ import annotations

import ast
import json
import operator
import re
import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["MAX_BYTES", "MAX_CELL_CHARS", "MAX_PARSED_CHARS", "MAX_ANSWERS", "MAX_CONTAINERS", "READ_SECONDS",
           "CODE", "Found", "Submission", "answers_in_source", "read_notebook"]

MAX_BYTES = 10 * 1024 * 1024
# An answer cell is a line or two; a cell this long is not parsed (its refs are still reported, unread).
MAX_CELL_CHARS = 100_000
# All parsed cells of one notebook together; the course's real notebooks parse under 20 kB.
MAX_PARSED_CHARS = 2_000_000
MAX_ANSWERS = 2_000
# Reading one notebook stops after this long, whatever it holds (a real one takes a few milliseconds).
READ_SECONDS = 2.0
# JSON objects and arrays in one file: each costs ~60 bytes once parsed, so 10 MB of `[{},{},...]` would take 240 MB.
# A full course notebook has a few thousand; one with saved plotly outputs a few tens of thousands.
MAX_CONTAINERS = 300_000
CODE = "answer is code, not a literal"
_MAX_ARITH_NODES = 64
# Bounded repetitions only: linear in the text, whatever it holds.
_REF_IN_TEXT = re.compile(r"""\banswer[ \t]{0,8}\([ \t]{0,8}(['"])([^'"\n]{1,100})\1""")
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.Pow: operator.pow}


@dataclass(frozen=True)
class Found:
    """One answer() call found in a submission: the question reference, the literal, or why it cannot be graded."""
    ref: str
    value: Any = None
    problem: str = ""


@dataclass
class Submission:
    """What was read from one notebook: its answers in notebook order, and problems that stop or mar grading.

    `metadata` is the notebook's `metadata["course"]` table where it is a dict of short strings (the release stamps
    the notebook's name and the student id there), else empty.
    """
    name: str
    readable: bool = True
    problems: list[str] = field(default_factory=list)
    answers: list[Found] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)
    setup_student: str | None = None  # the literal `student=` given to setup(...), if any
    # (id, where from) that setup() printed its quiz numbers were drawn for (NUMBERS_LINE), as the notebook last ran
    drawn_for: tuple[str, str] | None = None


class _NotLiteral(Exception):
    """A response node that is neither a literal nor plain arithmetic on number literals."""


def _arithmetic(node: ast.AST) -> float | complex:
    """Evaluate +, -, *, /, ** on number literals by walking the tree; nothing is compiled or executed."""
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        try:
            return float(node.value)
        except OverflowError:
            return float("inf")
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.UAdd | ast.USub):
        value = _arithmetic(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _arithmetic(node.left), _arithmetic(node.right)
        try:
            return _OPS[type(node.op)](left, right)
        except (ZeroDivisionError, OverflowError):
            # The grader then reports "NaN is not a value that can be graded", which names the likely cause.
            return float("nan")
    raise _NotLiteral


def _literal(node: ast.AST) -> Any:
    """The response an answer() call gives, read without running anything; raises _NotLiteral for code."""
    if sum(1 for _ in ast.walk(node)) > _MAX_ARITH_NODES:
        # A long literal (a list of a million numbers) is no answer to any question; do not build it.
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str | int | float)):
            raise _NotLiteral
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    return _arithmetic(node)


def _call_name(node: ast.AST) -> str | None:
    func = node.func if isinstance(node, ast.Call) else None
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _found(call: ast.Call) -> Found | str:
    """Read one answer(ref, response) call; a string is a problem with no question reference to attach it to."""
    keywords = {k.arg: k.value for k in call.keywords}
    if None in keywords or any(isinstance(a, ast.Starred) for a in call.args):
        return "an answer() call unpacks *args or **kwargs"
    args = [*call.args, *(keywords[k] for k in ("ref", "response") if k in keywords)]
    if not args or not isinstance(args[0], ast.Constant) or not isinstance(args[0].value, str):
        return "an answer() call has no question reference as a string literal"
    ref = args[0].value[:200]
    if len(args) != 2 or set(keywords) - {"ref", "response"}:
        return Found(ref, problem="answer() needs exactly a reference and a response")
    try:
        return Found(ref, value=_literal(args[1]))
    except (_NotLiteral, RecursionError, MemoryError):
        return Found(ref, problem=CODE)


def _blank_magics(source: str) -> str:
    """IPython magics and shell escapes are not Python: comment them out line by line (linear in the text)."""
    lines = source.split("\n")
    for i, line in enumerate(lines):
        if line.lstrip()[:1] in ("%", "!"):
            lines[i] = "#" + line
    return "\n".join(lines)


def _refs_in_text(source: str) -> list[str]:
    return [m.group(2) for m in _REF_IN_TEXT.finditer(source)]


def answers_in_source(source: str) -> tuple[list[Found], list[str]]:
    """Every answer() call in one code cell, in order, and problems not tied to a question (never raises)."""
    found, problems, _ = _read_cell(source)
    return found, problems


def _read_cell(source: str) -> tuple[list[Found], list[str], str | None]:
    """answers_in_source, plus the literal `student=` of a setup(...) call in the cell, if any."""
    if "answer" not in source and "setup" not in source:
        return [], [], None
    if len(source) > MAX_CELL_CHARS:
        refs = _refs_in_text(source[:MAX_CELL_CHARS])
        return ([Found(ref, problem=f"the cell with this answer is over {MAX_CELL_CHARS:,} characters, not read")
                 for ref in refs], [], None)
    try:
        tree = ast.parse(_blank_magics(source))
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        invalid = [Found(ref, problem="the cell with this answer is not valid Python") for ref in _refs_in_text(source)]
        return invalid, [], None
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and _call_name(n) in ("answer", "setup")]
    calls.sort(key=lambda n: (n.lineno, n.col_offset))
    found, problems, student = [], [], None
    for call in calls:
        if _call_name(call) == "setup":
            for k in call.keywords:
                if k.arg == "student" and isinstance(k.value, ast.Constant) and isinstance(k.value.value, str):
                    student = k.value.value[:200]
            continue
        item = _found(call)
        (problems if isinstance(item, str) else found).append(item)
    return found, problems, student


# What setup() prints when a student id is in effect (course_utils.quiz.notebook.numbers_line writes it): the grader
# reads it from the setup cell's saved output, to grade with the id the student's numbers were drawn from.
NUMBERS_LINE = re.compile(r"Quiz numbers: your own, drawn for (?P<id>'(?:[^'\\\n]|\\.){1,400}'|"
                          r"\"(?:[^\"\\\n]|\\.){1,400}\") \(from (?P<source>\$JUPYTERHUB_USER|setup\(student=\.\.\.\))\)")


def _drawn_for(cell: dict) -> tuple[str, str] | None:
    """The id and source in a setup cell's saved output (NUMBERS_LINE), reading at most a few outputs' first KB."""
    outputs = cell.get("outputs")
    for output in outputs[:5] if isinstance(outputs, list) else []:
        text = output.get("text") if isinstance(output, dict) else None
        if isinstance(text, list) and all(isinstance(t, str) for t in text[:20]):
            text = "".join(text[:20])
        m = NUMBERS_LINE.search(text[:2000]) if isinstance(text, str) else None
        if m:
            try:
                student = ast.literal_eval(m.group("id"))
            except (ValueError, SyntaxError):
                continue
            if isinstance(student, str) and student.strip():
                return student[:200], m.group("source")
    return None


def _short_metadata(nb: dict) -> dict[str, str]:
    meta = nb.get("metadata")
    course = meta.get("course") if isinstance(meta, dict) else None
    if not isinstance(course, dict):
        return {}
    return {k: v for k, v in list(course.items())[:20] if isinstance(k, str) and isinstance(v, str) and len(v) <= 200}


def read_notebook(data: bytes, name: str) -> Submission:
    """Read one notebook's bytes as data and collect its answers; every failure is a problem, never an exception."""
    sub = Submission(name=name)

    def unreadable(problem: str) -> Submission:
        sub.readable = False
        sub.problems.append(problem)
        return sub

    if len(data) > MAX_BYTES:
        return unreadable(f"file over {MAX_BYTES // (1024 * 1024)} MB, not read")
    if data.count(b"{") + data.count(b"[") > MAX_CONTAINERS:
        return unreadable(f"more than {MAX_CONTAINERS:,} JSON objects and arrays, far more than a notebook has; "
                          "not read")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        return unreadable(f"not UTF-8 text (bad byte at offset {e.start})")
    try:
        nb = json.loads(text)
    except json.JSONDecodeError as e:
        return unreadable(f"invalid JSON (line {e.lineno}, column {e.colno})")
    except (ValueError, RecursionError, MemoryError):
        return unreadable("invalid JSON")
    del text
    if isinstance(nb, dict) and nb.get("nbformat") not in (4, None):
        return unreadable(f"wrong nbformat: {str(nb.get('nbformat'))[:20]} (need 4: open and save it in "
                          "JupyterLab 3 or later)")
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        return unreadable("not a notebook (no list of cells)")
    if nb.get("nbformat") != 4:
        return unreadable("wrong nbformat: none (need 4)")
    sub.metadata = _short_metadata(nb)
    deadline = time.monotonic() + READ_SECONDS
    parsed = 0
    for i, cell in enumerate(nb["cells"]):
        if not isinstance(cell, dict):
            sub.problems.append(f"cell {i} is not a cell")
            continue
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        if isinstance(source, list) and all(isinstance(s, str) for s in source):
            source = "".join(source)
        if not isinstance(source, str):
            sub.problems.append(f"cell {i} has no text source")
            continue
        if "answer" not in source and "setup" not in source:
            continue
        parsed += min(len(source), MAX_CELL_CHARS)
        if parsed > MAX_PARSED_CHARS or len(sub.answers) > MAX_ANSWERS or time.monotonic() > deadline:
            sub.problems.append(f"too much to read: cells from cell {i} on were not read")
            break
        found, problems, student = _read_cell(source)
        sub.answers.extend(found)
        sub.problems.extend(problems)
        if student is not None:
            sub.setup_student = student
        if "setup" in source:
            sub.drawn_for = _drawn_for(cell) or sub.drawn_for
    return sub

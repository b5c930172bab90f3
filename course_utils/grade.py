"""Grade collected notebooks without running them: python -m course_utils.grade SUBMISSIONS... --out DIR.

Each submission is read as data. The grader finds every `answer("<quiz>.<id>", <literal>)` call in the code cells
with `ast`, takes the literal, and grades it against the key in quizzes/; it never executes, imports or evaluates
anything from a submission, and ignores stored outputs, so scores are always recomputed from the key. A response is
accepted if `ast.literal_eval` reads it (a number, a string, a list, `...` meaning unanswered) or if it is plain
arithmetic on number literals such as `7/8` or `-1.5`; anything else (a name, a call, an attribute) is reported as
"answer is code, not a literal" and scores 0.

Output in --out: gradebook.csv (a row per submission, a column per question, the total), item_analysis.csv (per
question: share correct, response counts, discrimination) and feedback/<submission>.md. CSV files are written
atomically: a crash never leaves a half-written gradebook.

A bad submission never stops the batch: invalid JSON, a notebook format other than 4, bytes that are not UTF-8, a file
over 10 MB, a missing or duplicated answer, or an answer that is code are reported in the status column.

Exit codes:
  0  every submission was read and graded without problems
  1  the gradebook was written, but some submissions had problems (see their status column)
  2  usage error: bad arguments, a path that does not exist, no notebooks found, an unknown quiz
  3  the output files could not be written
"""
from __future__ import annotations

import argparse
import ast
import csv
import io
import json
import operator
import os
import re
import statistics
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .quiz import Question, Quiz, Result, UnknownQuizError, load_quiz, quiz_names

__all__ = ["MAX_BYTES", "EXIT_OK", "EXIT_PROBLEMS", "EXIT_USAGE", "EXIT_OUTPUT", "Found", "Submission", "Graded",
           "answers_in_source", "read_submission", "grade_submission", "find_notebooks", "main"]

MAX_BYTES = 10 * 1024 * 1024
EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, EXIT_OUTPUT = 0, 1, 2, 3
# Batches smaller than this finish before a progress bar would tell anyone anything.
PROGRESS_MIN = 50
CODE = "answer is code, not a literal"
_MAX_ARITH_NODES = 64
_REF_IN_TEXT = re.compile(r"""\banswer\s*\(\s*(['"])([^'"\n]{1,100})\1""")
_MAGIC = re.compile(r"^\s*[%!]", re.M)
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
    """What was read from one file: its answers in notebook order, and problems that stop or mar grading."""
    name: str
    readable: bool = True
    problems: list[str] = field(default_factory=list)
    answers: list[Found] = field(default_factory=list)


@dataclass
class Graded:
    """A submission's results per scored question (None where it could not be read), its status and its open texts."""
    submission: Submission
    results: dict[str, Result | None]
    problems: list[str]
    open_answers: dict[str, str]

    @property
    def total(self) -> float:
        """Points earned, recomputed from the key."""
        return sum(r.score for r in self.results.values() if r is not None)

    @property
    def status(self) -> str:
        """Either "ok" or the problems, joined by semicolons."""
        return "; ".join(self.problems) or "ok"


# ---------------------------------------------------------------------------------------------------------- reading

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
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    if sum(1 for _ in ast.walk(node)) > _MAX_ARITH_NODES:
        raise _NotLiteral
    return _arithmetic(node)


def _is_answer_call(node: ast.AST) -> bool:
    func = node.func if isinstance(node, ast.Call) else None
    return (isinstance(func, ast.Name) and func.id == "answer") or (isinstance(func, ast.Attribute)
                                                                       and func.attr == "answer")


def _found(call: ast.Call) -> Found | str:
    """Read one answer(ref, response) call; a string is a problem with no question reference to attach it to."""
    keywords = {k.arg: k.value for k in call.keywords}
    if None in keywords or any(isinstance(a, ast.Starred) for a in call.args):
        return "an answer() call unpacks *args or **kwargs"
    args = [*call.args, *(keywords[k] for k in ("ref", "response") if k in keywords)]
    if not args or not isinstance(args[0], ast.Constant) or not isinstance(args[0].value, str):
        return "an answer() call has no question reference as a string literal"
    ref = args[0].value
    if len(args) != 2 or set(keywords) - {"ref", "response"}:
        return Found(ref, problem="answer() needs exactly a reference and a response")
    try:
        return Found(ref, value=_literal(args[1]))
    except (_NotLiteral, RecursionError, MemoryError):
        return Found(ref, problem=CODE)


def answers_in_source(source: str) -> tuple[list[Found], list[str]]:
    """Every answer() call in one code cell, in order, and problems not tied to a question (never raises)."""
    if "answer" not in source:
        return [], []
    # IPython magics and shell escapes are not Python; blank them out so the rest of the cell still parses.
    cleaned = _MAGIC.sub("#", source)
    try:
        tree = ast.parse(cleaned)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        refs = [m.group(2) for m in _REF_IN_TEXT.finditer(source)]
        return [Found(ref, problem="the cell with this answer is not valid Python") for ref in refs], []
    calls = sorted((n for n in ast.walk(tree) if _is_answer_call(n)), key=lambda n: (n.lineno, n.col_offset))
    found, problems = [], []
    for call in calls:
        item = _found(call)
        (problems if isinstance(item, str) else found).append(item)
    return found, problems


def read_submission(path: Path, name: str | None = None) -> Submission:
    """Read one notebook file as data and collect its answers; every failure becomes a problem, never an exception."""
    sub = Submission(name=name or str(path))

    def unreadable(problem: str) -> Submission:
        sub.readable = False
        sub.problems.append(problem)
        return sub

    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as e:
        return unreadable(f"could not read the file ({e.strerror or e})")
    if len(data) > MAX_BYTES:
        return unreadable(f"file over {MAX_BYTES // (1024 * 1024)} MB")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        return unreadable(f"not UTF-8 text (bad byte at offset {e.start})")
    try:
        nb = json.loads(text)
    except json.JSONDecodeError as e:
        return unreadable(f"invalid JSON (line {e.lineno}, column {e.colno})")
    except (ValueError, RecursionError):
        return unreadable("invalid JSON")
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        return unreadable("not a notebook (no list of cells)")
    if nb.get("nbformat") != 4:
        version = nb.get("nbformat")
        return unreadable(f"wrong nbformat: {str(version)[:20] if version is not None else 'none'} (need 4)")
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
        found, problems = answers_in_source(source)
        sub.answers.extend(found)
        sub.problems.extend(problems)
    return sub


# ---------------------------------------------------------------------------------------------------------- grading

def grade_submission(sub: Submission, quizzes: dict[str, Quiz], known: set[str] | None = None) -> Graded:
    """Grade a submission on the questions of `quizzes` (the last answer counts); refs outside `known` are problems."""
    questions = [q for quiz in quizzes.values() for q in quiz.questions]
    if not sub.readable:
        return Graded(sub, {q.ref: None for q in questions if q.scored}, list(sub.problems), {})
    problems = list(sub.problems)
    by_ref: dict[str, list[Found]] = {}
    for found in sub.answers:
        by_ref.setdefault(found.ref, []).append(found)
    known = set(quiz_names()) if known is None else known
    for ref in by_ref:
        quiz_name, _, qid = ref.partition(".")
        if quiz_name not in known or (quiz_name in quizzes and qid not in quizzes[quiz_name].ids):
            problems.append(f"unknown question {ref[:60]!r}")
    results: dict[str, Result | None] = {}
    open_answers: dict[str, str] = {}
    for q in questions:
        answers = by_ref.get(q.ref, [])
        if not answers:
            problems.append(f"missing answer for {q.ref}")
            results[q.ref] = Result(ref=q.ref, kind=q.kind, status="unanswered", score=0.0, points=q.points,
                                    feedback="No answer() call for this question was found in the notebook.")
            continue
        if len(answers) > 1:
            problems.append(f"{q.ref} answered {len(answers)} times (the last one is graded)")
        last = answers[-1]
        if last.problem:
            problems.append(f"{q.ref}: {last.problem}")
            result = Result(ref=q.ref, kind=q.kind, status="unreadable", score=0.0, points=q.points,
                            feedback=f"The grader could not read this answer: {last.problem}. It reads answer "
                                     "cells without running them, so write the value itself, as a number or in "
                                     "quotes.")
        else:
            result = quizzes[q.quiz].grade(q.id, last.value)
        if result.status == "recorded":
            open_answers[q.ref] = str(last.value)
        results[q.ref] = result
    return Graded(sub, {ref: r for ref, r in results.items() if r.kind != "open"}, problems, open_answers)


# ---------------------------------------------------------------------------------------------------------- writing

def _atomic_write(path: Path, text: str) -> None:
    """Write text to a temporary file beside path, then rename it over path, so readers never see half a file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _cell(text: str) -> str:
    # A spreadsheet would run a cell starting with = + - @ as a formula; a submission's file name must not do that.
    return "'" + text if text[:1] in ("=", "+", "-", "@") else text


def _num(x: float) -> str:
    return f"{x:g}"


def _csv(rows: Iterable[list[str]]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    return buffer.getvalue()


def gradebook_csv(graded: list[Graded], questions: list[Question]) -> str:
    """A row per submission: name, status, unanswered count, a score per question, total and maximum."""
    refs = [q.ref for q in questions]
    maximum = _num(sum(q.points for q in questions))
    rows = [["submission", "status", "unanswered", *refs, "total", "max"]]
    for g in graded:
        scores = [g.results.get(ref) for ref in refs]
        unanswered = sum(r is not None and r.status == "unanswered" for r in scores)
        rows.append([_cell(g.submission.name), _cell(g.status), str(unanswered if g.submission.readable else ""),
                     *("" if r is None else _num(r.score) for r in scores), _num(g.total), maximum])
    return _csv(rows)


def item_analysis_csv(graded: list[Graded], questions: list[Question]) -> str:
    """Per question over the readable submissions: answered, share correct, response counts, discrimination."""
    readable = [g for g in graded if g.submission.readable]
    rows = [["question", "kind", "points", "section", "submissions", "answered", "correct", "share_correct",
             "responses", "most_common_wrong", "discrimination"]]
    for q in questions:
        results = [g.results[q.ref] for g in readable]
        answered = [r for r in results if r.answered]
        correct = sum(r.correct for r in results)
        counts = Counter(r.response for r in answered)
        wrong = Counter(r.response for r in answered if not r.correct).most_common(1)
        if q.kind == "choice":
            responses = "; ".join(f"{c.label}={counts.get(c.label, 0)}" for c in q.choices)
        else:
            responses = "; ".join(f"{value}={n}" for value, n in counts.most_common(5))
        # Discrimination: does the item separate strong from weak submissions? The correlation of its score with the
        # rest of the total; blank when either is constant.
        item = [r.score for r in results]
        rest = [g.total - r.score for g, r in zip(readable, results)]
        try:
            discrimination = f"{statistics.correlation(item, rest):.3f}"
        except statistics.StatisticsError:
            discrimination = ""
        rows.append([q.ref, q.kind, _num(q.points), q.section, str(len(results)), str(len(answered)), str(correct),
                     f"{correct / len(results):.3f}" if results else "", responses,
                     f"{wrong[0][0]} ({wrong[0][1]})" if wrong else "", discrimination])
    return _csv(rows)


def feedback_markdown(g: Graded, questions: list[Question]) -> str:
    """The feedback file for one submission: status, then each question's verdict, feedback and explanation."""
    lines = [f"# Feedback: {g.submission.name}", "", f"Status: {g.status}", ""]
    if g.submission.readable:
        points = sum(q.points for q in questions)
        lines += [f"Score: {_num(g.total)} / {_num(points)}", ""]
        for q in questions:
            r = g.results[q.ref]
            lines += [f"## {q.ref} ({_num(r.score)}/{_num(r.points)}): {r.status}", "", r.feedback, ""]
            if r.explanation:
                lines += [f"Explanation: {r.explanation}", ""]
    for ref, text in g.open_answers.items():
        lines += [f"## {ref} (open, not scored)", "", text[:2000], "",
                  f'Compare with the model answer: reveal("{ref}").', ""]
    return "\n".join(lines)


def _feedback_names(graded: list[Graded]) -> list[str]:
    """A distinct, safe file name per submission."""
    names, seen = [], Counter()
    for g in graded:
        stem = re.sub(r"[^A-Za-z0-9._-]+", "_", re.sub(r"\.ipynb$", "", g.submission.name).replace("/", "__"))
        stem = stem.strip("._")[:150] or "submission"
        seen[stem] += 1
        names.append(f"{stem}.md" if seen[stem] == 1 else f"{stem}-{seen[stem]}.md")
    return names


# ------------------------------------------------------------------------------------------------------ command line

def find_notebooks(paths: Iterable[str | Path]) -> list[tuple[Path, str]]:
    """(path, name) of each .ipynb given or found in a given folder (recursively, skipping hidden folders), once."""
    found, seen = [], set()
    for p in map(Path, paths):
        if p.is_dir():
            candidates = []
            for root, dirs, files in os.walk(p):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                candidates += [Path(root) / f for f in sorted(files) if f.endswith(".ipynb")]
            # Named folder/relative/path.ipynb: unique within the batch and recognisable in the gradebook.
            named = [(c, (Path(p.resolve().name) / c.relative_to(p)).as_posix()) for c in candidates]
        elif p.exists():
            named = [(p, str(p))]
        else:
            raise FileNotFoundError(p)
        for c, name in named:
            key = c.absolute()
            if key not in seen:
                seen.add(key)
                found.append((c, name))
    return found


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m course_utils.grade",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=__doc__.split("\n\n", 1)[1].split("\nExit codes:")[0],
        epilog="Exit codes:" + __doc__.split("Exit codes:")[1]
        + "\nExample: python -m course_utils.grade submissions/ --out grading-output --quiz chapter_2_4")
    parser.add_argument("submissions", nargs="+", metavar="SUBMISSION",
                        help="notebook files (.ipynb) and folders searched recursively for them")
    parser.add_argument("--out", required=True, type=Path, metavar="DIR",
                        help="folder for gradebook.csv, item_analysis.csv and feedback/ (created if missing)")
    parser.add_argument("--quiz", action="append", metavar="NAME",
                        help="grade the questions of this quiz (repeatable); default: every quiz that any "
                             "submission answers. Quizzes: " + ", ".join(quiz_names()))
    parser.add_argument("--no-progress", action="store_true",
                        help=f"no progress bar (one is shown on stderr for {PROGRESS_MIN} or more submissions)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the batch grader; returns the exit code documented in the module docstring."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return EXIT_OK if e.code == 0 else EXIT_USAGE
    try:
        paths = find_notebooks(args.submissions)
    except FileNotFoundError as e:
        print(f"error: no such file or folder: {e.args[0]}", file=sys.stderr)
        return EXIT_USAGE
    if not paths:
        print("error: no .ipynb files found in " + ", ".join(args.submissions), file=sys.stderr)
        return EXIT_USAGE
    try:
        chosen = {name: load_quiz(name) for name in args.quiz or []}
    except UnknownQuizError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE

    from tqdm import tqdm

    show = len(paths) >= PROGRESS_MIN and not args.no_progress
    subs = [read_submission(path, name)
            for path, name in tqdm(paths, desc="grading", unit="nb", file=sys.stderr, disable=not show)]
    known = set(quiz_names())
    if not args.quiz:
        referenced = {f.ref.partition(".")[0] for s in subs for f in s.answers}
        chosen = {name: load_quiz(name) for name in sorted(referenced & known)}
    questions = [q for quiz in chosen.values() for q in quiz.questions if q.scored]
    graded = [grade_submission(s, chosen, known) for s in subs]

    try:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "feedback").mkdir(exist_ok=True)
        for g, name in zip(graded, _feedback_names(graded)):
            # One file per learner, rewritten whole on every run; only the CSVs need the atomic rename.
            (args.out / "feedback" / name).write_text(feedback_markdown(g, questions), encoding="utf-8")
        _atomic_write(args.out / "item_analysis.csv", item_analysis_csv(graded, questions))
        _atomic_write(args.out / "gradebook.csv", gradebook_csv(graded, questions))
    except OSError as e:
        print(f"error: could not write to {args.out}: {e}", file=sys.stderr)
        return EXIT_OUTPUT
    bad = sum(g.status != "ok" for g in graded)
    print(f"Graded {len(graded)} submission(s) on {len(questions)} question(s) from "
          f"{', '.join(chosen) or 'no quiz'}: {len(graded) - bad} ok, {bad} with problems. "
          f"Wrote {args.out / 'gradebook.csv'}, item_analysis.csv and feedback/.")
    return EXIT_PROBLEMS if bad else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())

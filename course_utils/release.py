"""Write the course students receive: python -m course_utils.release OUT [--force].

The release holds the notebooks (outputs stripped, cells tagged `instructor` dropped), the `course_utils` package,
`data/`, `pyproject.toml`, `environment.yml`, a short student README, and `quizzes/` rewritten *keyless*: every
`answer`, `explanation`, choice `feedback`, `mistakes`, `model_answer` and `rubric` removed, `release = true` set, and
a `grid_mask` added to each parameterised item so that a student draws the same numbers the grader expects. In the
release, `answer()` records a response and says it will be graded; the keys stay with the instructor.

OUT must be outside the course folder. A non-empty OUT is refused unless --force is given; --force replaces what
the release writes there (notebooks/, course_utils/, data/, quizzes/, the three top-level files) and keeps the rest.

Exit codes:
  0  the release was written
  1  it could not be written (a file error; the message says which)
  2  usage error: bad arguments, OUT inside the course folder, OUT not empty without --force, a broken quiz file
"""
from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .quiz.files import KEY_FIELDS, RELEASE_MARKER, mask_text, read_quiz
from .quiz.model import QuizFormatError

ROOT = Path(__file__).resolve().parent.parent
INSTRUCTOR_TAG = "instructor"
TOP_FILES = ("pyproject.toml", "environment.yml")
_SKIP = {"__pycache__", ".ipynb_checkpoints", ".pytest_cache", ".hypothesis"}
# Grading with the keys: `.answer`, `.mistakes`, ... on a quiz item, or grade() on a loaded quiz.
_READS_KEYS = re.compile(r"\.(answer|explanation|mistakes|model_answer|rubric|feedback|is_key)\b|\.grade\(")

STUDENT_README = """\
# Normalization and stabilization in Transformers: the course

An interactive Jupyter course on chapter 2.4 of the LLM book. Work through `notebooks/` in order, starting with
`00_start_here.ipynb`.

## Install

    conda env create -f environment.yml && conda activate norm-course     # or: pip install -e .
    jupyter lab

## Quizzes

Each question has an answer cell, `answer("<quiz>.<id>", ...)`. Replace the `...` with your answer (a number, or
the letter of a choice in quotes) and run the cell: it records your answer and checks its form. This copy of the
course carries no answer keys; your instructor grades the notebooks you hand in.

Four questions of notebook 07 (the chapter's calculations, `chapter_2_4.q5` to `q8`) give each student their own
numbers, drawn from their student id. On JupyterHub your login is used. Elsewhere, put the id your instructor gives
you into notebook 07's first code cell, `setup(seed=0, student="s0042")`, run it, and then run each answer cell to
see your numbers. Without an id you see the chapter's example numbers, which are not yours, and the answer cell says
so. Every other question is the same for everyone.

The quiz widget after the answer cells is a practice form: what you give there is not collected. Hand in the notebooks
as they are after you have answered, without renaming them.
"""


def _troubleshooting(source: Path) -> str:
    """The course README's Troubleshooting table, which the notebooks point learners to."""
    readme = source / "README.md"
    text = readme.read_text(encoding="utf-8") if readme.is_file() else ""
    match = re.search(r"^## Troubleshooting\n.*?(?=^## |\Z)", text, re.S | re.M)
    return "\n" + match.group(0).rstrip() + "\n" if match else ""


class UsageError(Exception):
    """A problem with the command line or with OUT; reported with exit code 2."""


# ------------------------------------------------------------------------------------------------------- TOML writer
# tomllib reads TOML but does not write it. This writes the subset quiz files use: strings, numbers, booleans,
# arrays of those, tables and arrays of tables; tests/test_release.py round-trips it through tomllib.

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r", "\b": "\\b", "\f": "\\f"}


def _key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else _basic_string(key)


def _basic_string(text: str) -> str:
    out = []
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _string(text: str) -> str:
    """A literal string (''' for several lines) where it can hold the text as written, else a basic one."""
    controls = any((ord(ch) < 0x20 and ch not in "\t\n") or ord(ch) == 0x7F for ch in text)
    if not controls and "\r" not in text:
        if "\n" not in text and "'" not in text:
            return f"'{text}'"
        # A newline right after the opening ''' would be dropped, and a trailing ' would merge with the closing one.
        if "'''" not in text and not text.startswith("\n") and not text.endswith("'"):
            return f"'''{text}'''"
    return _basic_string(text)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return repr(value) if math.isfinite(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + " }" if value else "{}"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def _is_table_array(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _is_inline(value: Any) -> bool:
    """A small table of plain values, such as a parameter `{ min = 1, max = 9, step = 1, default = 3 }`."""
    return isinstance(value, dict) and all(not isinstance(v, dict | list) for v in value.values())


def _table(table: dict, path: tuple[str, ...], lines: list[str]) -> None:
    """Append a table's key/value lines, then its sub-tables and arrays of tables, under `path`."""
    nested = []
    for key, value in table.items():
        if _is_table_array(value) or (isinstance(value, dict) and not _is_inline(value)):
            nested.append((key, value))
        else:
            lines.append(f"{_key(key)} = {_value(value)}")
    for key, value in nested:
        inner = (*path, _key(key))
        if isinstance(value, dict):
            lines += ["", f"[{'.'.join(inner)}]"]
            _table(value, inner, lines)
        else:
            for item in value:
                lines += ["", f"[[{'.'.join(inner)}]]"]
                _table(item, inner, lines)


def toml_dumps(data: dict, header: str = "") -> str:
    """A TOML document for `data` (the subset above), with `header` as comment lines at the top."""
    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    _table(data, (), lines)
    return "\n".join(lines).lstrip("\n") + "\n"


# ------------------------------------------------------------------------------------------------- keyless quizzes

def keyless(path: Path) -> str:
    """The students' copy of one quiz file, as TOML text: no keys, `release = true`, grid masks for parameters."""
    quiz = read_quiz(path)  # validates the full file first: a broken quiz never ships
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    out: dict[str, Any] = {"title": data["title"]}
    if data.get("about"):
        out["about"] = data["about"]
    out["release"] = True
    questions = []
    for item in data["questions"]:
        item = {k: v for k, v in item.items() if k not in (*KEY_FIELDS, "tolerance", "rel_tolerance")}
        if "choices" in item:
            item["choices"] = [{k: v for k, v in c.items() if k != "feedback"} for c in item["choices"]]
        q = quiz.question(item["id"])
        if q.parameterised:
            item["grid_mask"] = mask_text(q.grid_mask())
        questions.append(item)
    out["questions"] = questions
    header = (f"The students' copy of quizzes/{path.name}, written by `python -m course_utils.release`: it holds no\n"
              "answer keys. Edit the course's own file, not this one. Schema: quizzes/README.md.")
    return toml_dumps(out, header)


# ------------------------------------------------------------------------------------------------------- notebooks

def student_notebook(nb: dict) -> tuple[dict, int, list[int]]:
    """A notebook as handed out: outputs and counts cleared, `instructor` cells dropped.

    Returns the notebook, the number of cells dropped, and the (new) indices of code cells that still read quiz keys,
    which would fail in the release.
    """
    cells, dropped, reads_keys = [], 0, []
    for cell in nb.get("cells", []):
        if INSTRUCTOR_TAG in cell.get("metadata", {}).get("tags", []):
            dropped += 1
            continue
        cell = dict(cell)
        if cell.get("cell_type") == "code":
            cell["outputs"], cell["execution_count"] = [], None
            source = cell.get("source", "")
            if _READS_KEYS.search(source if isinstance(source, str) else "".join(source)):
                reads_keys.append(len(cells))
        cells.append(cell)
    metadata = {k: v for k, v in nb.get("metadata", {}).items() if k != "widgets"}
    return {**nb, "cells": cells, "metadata": metadata}, dropped, reads_keys


# --------------------------------------------------------------------------------------------------------- release

@dataclass
class Summary:
    """What a release wrote, for the command's report."""
    out: Path
    notebooks: list[str] = field(default_factory=list)
    dropped_cells: int = 0
    package_files: int = 0
    data_files: int = 0
    quizzes: list[str] = field(default_factory=list)
    parameterised: int = 0
    other_files: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"Wrote the student release to {self.out}:",
                 f"  notebooks/      {len(self.notebooks)} notebooks, outputs stripped, "
                 f"{self.dropped_cells} `{INSTRUCTOR_TAG}` cells dropped",
                 f"  course_utils/   {self.package_files} files",
                 f"  data/           {self.data_files} files",
                 f"  quizzes/        {len(self.quizzes)} quizzes rewritten keyless "
                 f"({self.parameterised} items with per-student numbers)"
                 + (f", and {', '.join(self.other_files)}" if self.other_files else ""),
                 f"  {', '.join(TOP_FILES)}, README.md (for students)"]
        lines += [f"WARNING: {w}" for w in self.warnings]
        return "\n".join(lines)


def _copy_tree(src: Path, dst: Path) -> int:
    """Copy a folder without caches and compiled files; returns the number of files copied."""
    shutil.copytree(src, dst, ignore=lambda _dir, names: [n for n in names if n in _SKIP or n.endswith(".pyc")
                                                          or n.endswith(".egg-info")])
    return sum(1 for p in dst.rglob("*") if p.is_file())


def _prepare(out: Path, force: bool, source: Path) -> None:
    """Check OUT and clear what the release will write there; raises UsageError."""
    if out.resolve().is_relative_to(source.resolve()):
        raise UsageError(f"OUT ({out}) is inside the course folder {source}; write the release somewhere else")
    if out.exists() and not out.is_dir():
        raise UsageError(f"OUT ({out}) is a file, not a folder")
    if out.exists() and any(out.iterdir()):
        if not force:
            raise UsageError(f"OUT ({out}) is not empty; pass --force to replace the release written there")
        for name in ("notebooks", "course_utils", "data", "quizzes", *TOP_FILES, "README.md"):
            target = out / name
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            elif target.exists() or target.is_symlink():
                target.unlink()
    out.mkdir(parents=True, exist_ok=True)


def build_release(out: Path, force: bool = False, source: Path = ROOT) -> Summary:
    """Write the student release of the course folder `source` into `out`; raises UsageError or OSError."""
    out = Path(out)
    _prepare(out, force, source)
    summary = Summary(out=out)
    (out / "notebooks").mkdir()
    for path in sorted((source / "notebooks").iterdir()):
        if path.name in _SKIP:
            continue
        if path.is_dir():
            _copy_tree(path, out / "notebooks" / path.name)
            continue
        if path.suffix != ".ipynb":
            shutil.copy2(path, out / "notebooks")
            continue
        nb, dropped, reads_keys = student_notebook(json.loads(path.read_text(encoding="utf-8")))
        (out / "notebooks" / path.name).write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n",
                                                   encoding="utf-8")
        summary.notebooks.append(path.name)
        summary.dropped_cells += dropped
        if reads_keys:
            summary.warnings.append(f"{path.name}: code cells {reads_keys} read quiz keys and will fail in the "
                                    f"release; tag them `{INSTRUCTOR_TAG}` to drop them")
    summary.package_files = _copy_tree(source / "course_utils", out / "course_utils")
    summary.data_files = _copy_tree(source / "data", out / "data")
    for name in TOP_FILES:
        shutil.copy2(source / name, out / name)
    (out / "README.md").write_text(STUDENT_README + _troubleshooting(source), encoding="utf-8")
    quizzes = out / "quizzes"
    quizzes.mkdir()
    for path in sorted((source / "quizzes").glob("*.toml")):
        try:
            text = keyless(path)
        except QuizFormatError as e:
            raise UsageError(f"a quiz file is broken, nothing should ship until it is fixed: {e}") from None
        (quizzes / path.name).write_text(text, encoding="utf-8")
        summary.quizzes.append(path.stem)
        summary.parameterised += sum(q.parameterised for q in read_quiz(quizzes / path.name).questions)
    if (source / "quizzes" / "README.md").is_file():
        shutil.copy2(source / "quizzes" / "README.md", quizzes / "README.md")
        summary.other_files.append("README.md")
    if (source / "quizzes" / "assignments").is_dir():
        _copy_tree(source / "quizzes" / "assignments", quizzes / "assignments")
        summary.other_files.append("assignments/")
    (out / RELEASE_MARKER).write_text(
        "This folder is the student release of the course (python -m course_utils.release).\n"
        "A notebook run from inside it reads the keyless quizzes/ beside this file, whichever course_utils Python\n"
        "imports: a hub image with the full course installed still gives students no keys.\n", encoding="utf-8")
    return summary


def main(argv: list[str] | None = None) -> int:
    """The command line; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m course_utils.release",
                                     description="Write the course students receive (no answer keys) into OUT.")
    parser.add_argument("out", metavar="OUT", type=Path, help="folder to write, outside the course folder")
    parser.add_argument("--force", action="store_true", help="replace the release already in a non-empty OUT")
    args = parser.parse_args(argv)
    try:
        summary = build_release(args.out, force=args.force)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"error: could not write the release: {e}", file=sys.stderr)
        return 1
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())

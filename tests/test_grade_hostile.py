"""No submission can stop, slow, spoof or leak into the batch: every hostile kind found so far, graded beside good ones.

The grader runs as a command in a subprocess with a time limit, so a kind that blocked it (a FIFO, a device) would
fail this test instead of hanging the suite. Each kind sits in a class with two good students, whose rows must come
out exactly as they would alone.
"""
import csv
import io
import json
import os
import subprocess
import sys
import zipfile

import pytest

from course_utils.quiz import cli, gradebook, load_quiz
from course_utils.quiz.cli import main

QUIZ = load_quiz("01_why_normalize")
FULL = f"{sum(q.points for q in QUIZ.questions):g}"  # what a perfect 01 scores
ASSIGNMENT = '''title = "Hostile"
[[notebooks]]
notebook = "01_why_normalize"
quizzes = ["01_why_normalize"]
'''


def cells(*sources: str, metadata=None) -> bytes:
    body = [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": s}
            for s in sources]
    return json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": metadata or {}, "cells": body}).encode()


GOOD = cells(*(f'answer("{q.ref}", {q.answer!r})' for q in QUIZ.questions))
SECRET = "the secret reasoning of the good student"
GOOD_WITH_TEXT = cells(*(f'answer("{q.ref}", {q.answer!r})' for q in QUIZ.questions), f"# {SECRET}")


def run(folder, out, *extra, timeout=120):
    (folder.parent / "a.toml").write_text(ASSIGNMENT, encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "course_utils.grade", os.fsencode(folder), "--assignment",
                           str(folder.parent / "a.toml"), "--out", str(out), "--no-progress", *extra],
                          capture_output=True, timeout=timeout, check=False)
    assert done.returncode in (cli.EXIT_OK, cli.EXIT_PROBLEMS), done.stderr.decode("utf-8", "replace")
    raw = (out / "gradebook.csv").read_bytes()
    text = raw.decode("utf-8-sig")  # always valid UTF-8, whatever the file names were
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    return done, rows, text


def put(folder, relative: str | bytes, data: bytes) -> bytes:
    path = os.path.join(os.fsencode(folder), os.fsencode(relative))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return path


def good_class(folder):
    put(folder, "ada/01_why_normalize.ipynb", GOOD_WITH_TEXT)
    put(folder, "bob/01_why_normalize.ipynb", GOOD)


def check_good_rows(rows):
    by_id = {r["student_id"]: r for r in rows}
    for student in ("ada", "bob"):
        assert by_id[student]["total"] == FULL and by_id[student]["status"] == "ok", by_id[student]


def _zip_bomb() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("eve/01_why_normalize.ipynb", b"\0" * 200_000_000)
    return buffer.getvalue()


def _lying_zip() -> bytes:
    """A member whose header declares a small size but that inflates to 100 MB."""
    data = bytearray(_zip_bomb())
    # The local and central headers store the uncompressed size at fixed offsets; shrink both to 1,000 bytes.
    for signature, offset in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        i = data.find(signature)
        data[i + offset:i + offset + 4] = (1000).to_bytes(4, "little")
    return bytes(data)


def _zip_of(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buffer.getvalue()


# kind -> (how to make it in a class folder, what eve's row must say)
KINDS = {
    "fifo": (lambda f: os.mkfifo(os.path.join(f, "eve", "01_why_normalize.ipynb")), "not a regular file (a FIFO)"),
    "link-to-device": (lambda f: os.symlink("/dev/zero", os.path.join(f, "eve", "01_why_normalize.ipynb")),
                       "a link, not followed"),
    "link-to-classmate": (lambda f: os.symlink(os.path.join(f, "ada", "01_why_normalize.ipynb"),
                                               os.path.join(f, "eve", "01_why_normalize.ipynb")),
                          "a link, not followed"),
    "random-bytes": (lambda f: put(f, "eve/01_why_normalize.ipynb", os.urandom(10 * 1024 * 1024)), "not UTF-8"),
    "over-10-mb": (lambda f: put(f, "eve/01_why_normalize.ipynb", b" " * (10 * 1024 * 1024 + 1)), "over 10 MB"),
    "deep-json": (lambda f: put(f, "eve/01_why_normalize.ipynb", b"[" * 5_000_000 + b"]" * 5_000_000),
                  "JSON objects and arrays"),
    "blank-lines-and-magics": (lambda f: put(f, "eve/01_why_normalize.ipynb", cells(
        "\n" * 64_000 + "%time x\n!ls\n" * 2000 + 'answer("01_why_normalize.q1", 16)')), "no answer cell for"),
    "huge-answer-cell": (lambda f: put(f, "eve/01_why_normalize.ipynb", cells(
        'answer("01_why_normalize.q1", "' + "a" * 9_800_000 + '")')), "over 100,000 characters"),
    "many-answer-cells": (lambda f: put(f, "eve/01_why_normalize.ipynb", cells(
        *['answer("01_why_normalize.q1", 16)'] * 80_000)), "too much to read"),
    "code-answers": (lambda f: put(f, "eve/01_why_normalize.ipynb", cells(
        'answer("01_why_normalize.q1", **kw)', 'answer("01_why_normalize.q2", x)',
        'answer("01_why_normalize.q3", 9**9**9)', 'answer("01_why_normalize.q1", ' + "9" * 5000 + ")")),
        "01_why_normalize.q2: answer is code"),
    "nbformat-3": (lambda f: put(f, "eve/01_why_normalize.ipynb", b'{"nbformat": 3, "cells": []}'),
                   "wrong nbformat: 3"),
    "empty-file": (lambda f: put(f, "eve/01_why_normalize.ipynb", b""), "invalid JSON"),
    # A folder is searched, not opened; with nothing in it eve handed nothing in (a roster would list her).
    "folder-named-ipynb": (lambda f: os.makedirs(os.path.join(f, "eve", "01_why_normalize.ipynb")), None),
    # A path that names a classmate below the top level (nbgrader's submitted/<x>/): a claim, never an owner.
    "plants-a-classmates-file": (lambda f: put(f, "eve/junk/submitted/ada/x/01_why_normalize.ipynb", cells(
        'answer("01_why_normalize.q1", ...)')), "never as ada's"),
    # Three zips of 25 notebooks each: reading stops at the budget per student.
    "many-zipped-notebooks": (lambda f: [put(f, f"eve/part{i}.zip", _zip_of({f"c{j}/01_why_normalize.ipynb": GOOD
                                                                          for j in range(25)})) for i in range(3)],
                              "budget per student"),
    "someone-elses-numbers": (lambda f: put(f, "eve/01_why_normalize.ipynb", cells(
        'setup(seed=0, student="ada")', *(f'answer("{q.ref}", {q.answer!r})' for q in QUIZ.questions))),
        "names someone else"),
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_each_hostile_kind_is_reported_in_its_row_and_the_class_is_graded_right(tmp_path, kind):
    folder = tmp_path / "class"
    good_class(folder)
    os.makedirs(folder / "eve", exist_ok=True)
    make, expected = KINDS[kind]
    make(str(folder))
    _, rows, text = run(folder, tmp_path / "out")
    check_good_rows(rows)
    if expected is None:
        assert [r["student_id"] for r in rows] == ["ada", "bob"]
        return
    eve = next(r for r in rows if r["student_id"] == "eve")
    assert expected in eve["status"] or expected in (tmp_path / "out" / "feedback" / "eve.md").read_text(), eve
    assert SECRET not in (tmp_path / "out" / "feedback" / "eve.md").read_text(encoding="utf-8")
    assert len(eve["status"]) <= gradebook.STATUS_LIMIT + 60


@pytest.mark.parametrize("member", [_zip_bomb, _lying_zip], ids=["zip-bomb", "lying-zip-header"])
def test_a_zip_bomb_is_not_inflated(tmp_path, member):
    folder = tmp_path / "class"
    good_class(folder)
    (folder / "download.zip").write_bytes(member())
    _, rows, _ = run(folder, tmp_path / "out")
    check_good_rows(rows)
    eve = next(r for r in rows if r["student_id"] == "eve")
    assert "inflates to over 10 MB" in eve["status"] or "could not be unzipped" in eve["status"], eve


NAMES = [b"bad\xff\xfename", "cr\rlf\nname", "tab\tname", 'quo"te', "com,ma", "=HYPERLINK(1)", "+1", "-1+2",
         "@SUM(A1)", "a b", "a_b", "A_B"]


def test_any_file_or_folder_name_gives_a_readable_row_and_its_own_feedback(tmp_path):
    folder = tmp_path / "class"
    for name in NAMES:
        put(folder, os.fsencode(name) + b"/01_why_normalize.ipynb", GOOD)
    put(folder, "=cmd|' /C calc'!A0_7_7_01_why_normalize.ipynb".encode(), GOOD)  # a formula as an LMS file name
    _, rows, text = run(folder, tmp_path / "out")
    assert len(rows) == len(NAMES) + 1 and all(r["total"] == FULL for r in rows)
    for row in rows:
        for value in row.values():
            assert value[:1] not in ("=", "+", "-", "@", "\t", "\r")
            assert "\r" not in value and "\n" not in value
    assert r"bad\xff\xfename" in text and r"cr\rlf\nname" in text
    feedback = list((tmp_path / "out" / "feedback").iterdir())
    assert len(feedback) == len(rows) == len({p.name.casefold() for p in feedback})


def test_the_status_column_is_capped_and_counts_what_it_left_out(tmp_path):
    folder = tmp_path / "class"
    many = json.loads(cells(*(f'answer("{q.ref}", x{i})' for i, q in enumerate(QUIZ.questions))))
    many["cells"] += list(range(400))  # 400 "cell N is not a cell" problems
    put(folder, "eve/01_why_normalize.ipynb", json.dumps(many).encode())
    _, rows, _ = run(folder, tmp_path / "out")
    (eve,) = rows
    assert len(eve["status"]) <= gradebook.STATUS_LIMIT + 60 and "more problems, see feedback" in eve["status"]


def test_a_failure_nobody_foresaw_is_reported_in_that_row_and_the_batch_goes_on(tmp_path, monkeypatch):
    folder = tmp_path / "class"
    good_class(folder)
    put(folder, "eve/01_why_normalize.ipynb", GOOD)
    real = gradebook.read_notebook

    def fragile(data, name):
        if "eve" in name:
            raise MemoryError("an unforeseen failure")
        return real(data, name)

    monkeypatch.setattr(gradebook, "read_notebook", fragile)
    (tmp_path / "a.toml").write_text(ASSIGNMENT, encoding="utf-8")
    code = main([str(folder), "--assignment", str(tmp_path / "a.toml"), "--out", str(tmp_path / "out"),
                 "--no-progress"])
    assert code == cli.EXIT_PROBLEMS
    with open(tmp_path / "out" / "gradebook.csv", newline="", encoding="utf-8-sig") as f:
        rows = list(csv.DictReader(f))
    check_good_rows(rows)
    eve = next(r for r in rows if r["student_id"] == "eve")
    assert "the grader failed on these files (MemoryError)" in eve["status"]


def test_a_whole_hostile_class_finishes_quickly(tmp_path):
    """Every kind at once, each as its own student, next to the good students: one run, bounded time."""
    folder = tmp_path / "class"
    good_class(folder)
    for i, (make, _) in enumerate(KINDS.values()):
        (folder / "eve").mkdir()
        make(str(folder))
        os.replace(folder / "eve", folder / f"eve{i:02d}")
    _, rows, _ = run(folder, tmp_path / "out", timeout=120)
    check_good_rows(rows)
    assert len(rows) == 2 + sum(expected is not None for _, expected in KINDS.values())


def test_a_link_to_a_zip_is_reported_and_not_followed(tmp_path):
    folder = tmp_path / "class"
    good_class(folder)
    elsewhere = io.BytesIO()
    with zipfile.ZipFile(elsewhere, "w") as zf:
        zf.writestr("eve/01_why_normalize.ipynb", GOOD)
    (tmp_path / "elsewhere.zip").write_bytes(elsewhere.getvalue())
    os.symlink(tmp_path / "elsewhere.zip", folder / "download.zip")
    _, rows, _ = run(folder, tmp_path / "out")
    check_good_rows(rows)
    assert [r["student_id"] for r in rows] == ["ada", "bob"]  # eve's notebook, behind the link, is never read
    listed = (tmp_path / "out" / "not_graded.txt").read_text(encoding="utf-8")
    assert "download.zip: a link, not followed" in listed

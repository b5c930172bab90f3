"""The batch grader reads submissions as data, never runs them, survives bad files and writes its CSVs atomically."""
import csv
import importlib.util
import json
import os
import subprocess
import sys

import nbformat
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from conftest import ROOT
from course_utils import grade
from course_utils.grade import answers_in_source, main, read_submission
from course_utils.quiz import load_quiz

CHAPTER = load_quiz("chapter_2_4")
KEYS = {q.id: q.answer for q in CHAPTER.questions}
WRONG = {q.id: (next(c.label for c in q.choices if c.label != q.answer) if q.kind == "choice" else q.mistakes[0].value)
         for q in CHAPTER.questions}


def notebook(answers: dict[str, object] | None = None, extra: list[str] = (), outputs=None) -> str:
    """A submission's JSON: a markdown cell, some lesson code, then one answer cell per chapter question."""
    answers = KEYS if answers is None else answers
    cells = [new_markdown_cell("# Review"), new_code_cell("import torch\nx = torch.tensor([1.0, 2.0, 3.0, 4.0])")]
    for qid, value in answers.items():
        if isinstance(value, str) and value.startswith("CODE:"):
            source = value.removeprefix("CODE:")
        else:
            source = "..." if value is ... else repr(value)
        cell = new_code_cell(f'answer("chapter_2_4.{qid}", {source})')
        if outputs:
            cell.outputs = [new_output("execute_result", data={"text/plain": outputs}, execution_count=1)]
        cells.append(cell)
    cells += [new_code_cell(src) for src in extra]
    return nbformat.writes(new_notebook(cells=cells))


def run(tmp_path, files: dict[str, str | bytes], *options: str) -> tuple[int, list[dict], dict[str, dict]]:
    """Write the files, grade the folder, and return the exit code, gradebook rows and item analysis by question."""
    folder = tmp_path / "class"
    folder.mkdir(exist_ok=True)
    for name, content in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    out = tmp_path / "out"
    code = main([str(folder), "--out", str(out), "--no-progress", *options])
    with open(out / "gradebook.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    with open(out / "item_analysis.csv", newline="", encoding="utf-8") as f:
        items = {r["question"]: r for r in csv.DictReader(f)}
    return code, rows, items


def by_name(rows):
    return {r["submission"].removeprefix("class/"): r for r in rows}


# -------------------------------------------------------------------------------------------------- grading a class

def test_a_clean_class_is_graded_from_the_key(tmp_path):
    mixed = {**KEYS, "q1": WRONG["q1"], "q7": "3.5355"}
    code, rows, items = run(tmp_path, {"ada.ipynb": notebook(), "bob.ipynb": notebook(WRONG),
                                       "cy.ipynb": notebook(mixed)})
    assert code == grade.EXIT_OK
    rows = by_name(rows)
    assert [rows[n]["total"] for n in ("ada.ipynb", "bob.ipynb", "cy.ipynb")] == ["8", "0", "7"]
    assert all(r["status"] == "ok" and r["max"] == "8" for r in rows.values())
    assert list(rows["ada.ipynb"])[3:11] == [f"chapter_2_4.q{i}" for i in range(1, 9)]
    assert items["chapter_2_4.q1"]["share_correct"] == "0.333" and items["chapter_2_4.q2"]["share_correct"] == "0.667"
    assert items["chapter_2_4.q1"]["responses"] == "a=2; b=1; c=0; d=0"
    assert items["chapter_2_4.q1"]["most_common_wrong"] == "a (2)"
    assert float(items["chapter_2_4.q2"]["discrimination"]) > 0.9
    feedback = (tmp_path / "out" / "feedback" / "class__bob.md").read_text(encoding="utf-8")
    assert "Score: 0 / 8" in feedback and "That is the sum of the features" in feedback


def test_literal_forms_the_notebook_accepts_are_read_the_same_way(tmp_path):
    answers = {"q1": "CODE:' B '", "q2": "CODE:response='d'", "q3": "a", "q4": "c", "q5": "CODE:5/2",
               "q6": "5/4", "q7": "CODE:-(-3.54)", "q8": "CODE:2*10"}
    extra = ["%timeit x.mean()\n!ls\nr = answer('chapter_2_4.q4', 'c')"]
    code, rows, _ = run(tmp_path, {"ada.ipynb": notebook(answers, extra)})
    (row,) = rows
    assert row["total"] == "8" and "answered 2 times" in row["status"] and code == grade.EXIT_PROBLEMS


def test_stored_outputs_and_metadata_never_count(tmp_path):
    nb = json.loads(notebook(WRONG, outputs="✓ Correct (1/1)"))
    nb["metadata"]["score"] = 8
    code, rows, _ = run(tmp_path, {"liar.ipynb": json.dumps(nb)})
    assert rows[0]["total"] == "0" and code == grade.EXIT_OK


def test_unanswered_items_score_zero_and_are_counted(tmp_path):
    code, rows, items = run(tmp_path, {"ada.ipynb": notebook({**KEYS, "q2": ..., "q3": ...})})
    assert (rows[0]["total"], rows[0]["unanswered"], rows[0]["status"], code) == ("6", "2", "ok", grade.EXIT_OK)
    assert items["chapter_2_4.q2"]["answered"] == "0"


@pytest.mark.parametrize("payload", [
    '__import__("os").system("touch {s}")',
    'open("{s}", "w").write("x")',
    '(lambda: open("{s}", "w"))()',
    '[open("{s}", "w") for _ in range(1)]',
    'f"{{open(\'{s}\', \'w\')}}"',
    '(x := open("{s}", "w"))',
    'eval(\'open("{s}", "w")\')',
    'exec(\'open("{s}", "w")\')',
    '__import__("pathlib").Path("{s}").touch()',
    '2 ** open("{s}", "w").write("1")',
])
def test_code_in_an_answer_cell_is_never_run(tmp_path, payload):
    sentinel = tmp_path / "SENTINEL"
    hostile = {**KEYS, "q5": "CODE:" + payload.format(s=sentinel)}
    extra = [f'import os\nos.system("touch {sentinel}")', f'answer("chapter_2_4.q9", open("{sentinel}", "w"))']
    code, rows, _ = run(tmp_path, {"mallory.ipynb": notebook(hostile, extra)})
    assert not sentinel.exists()
    (row,) = rows
    assert "chapter_2_4.q5: answer is code, not a literal" in row["status"]
    assert row["chapter_2_4.q5"] == "0" and row["total"] == "7" and code == grade.EXIT_PROBLEMS


def test_the_grader_imports_nothing_a_submission_names(tmp_path):
    before = set(sys.modules)
    run(tmp_path, {"a.ipynb": notebook(extra=["import antigravity, this\nfrom course_utils import training"])})
    assert {"antigravity", "this"}.isdisjoint(set(sys.modules) - before)


# ----------------------------------------------------------------------------------------------- bad submissions

def _bad_files() -> dict[str, str | bytes]:
    nb3 = json.loads(notebook())
    nb3["nbformat"] = 3
    missing = {k: v for k, v in KEYS.items() if k != "q4"}
    listy = json.loads(notebook())
    listy["cells"][2]["source"] = ['answer("chapter_2_4.q1",', ' "b")']
    return {
        "good.ipynb": notebook(),
        "json.ipynb": '{"cells": [',
        "nbformat3.ipynb": json.dumps(nb3),
        "missing.ipynb": notebook(missing),
        "twice.ipynb": notebook(extra=['answer("chapter_2_4.q1", "a")']),
        "code.ipynb": notebook({**KEYS, "q6": "CODE:x.var(correction=0)"}),
        "latin1.ipynb": notebook().replace("Review", "Révision").encode("latin-1"),
        "huge.ipynb": b" " * (grade.MAX_BYTES + 1),
        "empty.ipynb": b"",
        "list.ipynb": "[1, 2, 3]",
        "nocells.ipynb": '{"nbformat": 4, "cells": {"a": 1}}',
        "syntax.ipynb": notebook(extra=['answer("chapter_2_4.q2", "d"']),
        "unknown.ipynb": notebook(extra=['answer("chapter_9.q1", 1)', 'answer("chapter_2_4.q99", 1)']),
        "listsource.ipynb": json.dumps(listy),
        "deep.ipynb": "[" * 100_000 + "]" * 100_000,
        "sub/folder/nested.ipynb": notebook(),
    }


def test_a_bad_submission_never_stops_the_batch(tmp_path):
    code, rows, items = run(tmp_path, _bad_files())
    assert code == grade.EXIT_PROBLEMS
    rows = by_name(rows)
    expect = {
        "good.ipynb": "ok", "json.ipynb": "invalid JSON", "nbformat3.ipynb": "wrong nbformat: 3 (need 4)",
        "missing.ipynb": "missing answer for chapter_2_4.q4", "twice.ipynb": "chapter_2_4.q1 answered 2 times",
        "code.ipynb": "chapter_2_4.q6: answer is code, not a literal", "latin1.ipynb": "not UTF-8",
        "huge.ipynb": "file over 10 MB", "empty.ipynb": "invalid JSON", "list.ipynb": "not a notebook",
        "nocells.ipynb": "not a notebook", "syntax.ipynb": "chapter_2_4.q2: the cell with this answer is not valid",
        "unknown.ipynb": "unknown question 'chapter_9.q1'", "listsource.ipynb": "ok", "deep.ipynb": "JSON",
        "sub/folder/nested.ipynb": "ok",
    }
    assert set(rows) == set(expect)
    for name, status in expect.items():
        assert status in rows[name]["status"], name
    assert "chapter_2_4.q99" in rows["unknown.ipynb"]["status"]
    totals = {name: rows[name]["total"] for name in rows}
    assert totals["good.ipynb"] == totals["sub/folder/nested.ipynb"] == totals["listsource.ipynb"] == "8"
    assert totals["missing.ipynb"] == totals["code.ipynb"] == "7" and totals["twice.ipynb"] == "7"
    assert rows["json.ipynb"]["chapter_2_4.q1"] == "" and totals["json.ipynb"] == "0"
    # Unreadable files are left out of the item analysis instead of counting as wrong answers.
    readable = sum(r["chapter_2_4.q1"] != "" for r in rows.values())
    assert items["chapter_2_4.q1"]["submissions"] == str(readable)
    assert len(list((tmp_path / "out" / "feedback").iterdir())) == len(expect)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=2000) | st.text(max_size=2000).map(str.encode))
def test_any_bytes_are_read_without_raising(tmp_path, data):
    path = tmp_path / "any.ipynb"
    path.write_bytes(data)
    sub = read_submission(path)
    assert sub.readable or sub.problems


@settings(max_examples=200, deadline=None)
@given(source=st.text(max_size=300) | st.builds(lambda a, b: f'answer({a!r}, {b})', st.text(max_size=20),
                                                  st.text(max_size=40)))
def test_any_cell_source_is_parsed_without_raising(source):
    found, problems = answers_in_source(source)
    assert all(isinstance(f.ref, str) for f in found) and all(isinstance(p, str) for p in problems)


@pytest.mark.parametrize("source,value", [
    ('answer("q.x", 2.5)', 2.5), ('answer("q.x", -1.342)', -1.342), ('answer("q.x", "5/4")', "5/4"),
    ('answer("q.x", 5/4)', 1.25), ('answer("q.x", 2**0.5)', 2 ** 0.5), ('answer("q.x", ...)', ...),
    ('answer("q.x", [1, 2])', [1, 2]), ('answer("q.x", None)', None), ('answer(ref="q.x", response="b")', "b"),
    ('course.answer("q.x", "b")', "b"), ('answer("q.x", 1/0)', "nan"), ('answer("q.x", 10**10**10)', "inf-or-nan"),
])
def test_literals_and_plain_arithmetic_are_read(source, value):
    (found,), problems = answers_in_source(source)
    assert not found.problem and not problems
    if value == "nan":
        assert found.value != found.value
    elif value == "inf-or-nan":
        assert found.value in (float("inf"),) or found.value != found.value
    else:
        assert found.value == value


@pytest.mark.parametrize("source", [
    'answer("q.x", x)', 'answer("q.x", x.mean())', 'answer("q.x", round(3.5, 1))', 'answer("q.x", *args)',
    'answer("q.x", [1] * 10**9)', 'answer("q.x", 1 if x else 2)', 'answer("q.x", "a" + "b")',
    'answer("q.x", ' + "+".join(["1"] * 100) + ")",
])
def test_anything_else_is_code(source):
    found, problems = answers_in_source(source)
    assert [f.problem for f in found] == [grade.CODE] or (not found and "unpacks" in problems[0])


# ------------------------------------------------------------------------------------------ options and exit codes

def test_quiz_option_selects_the_columns(tmp_path):
    extra = ['answer("05_rmsnorm.q1", "b")', 'answer("05_rmsnorm.q2", 0.849)']
    code, rows, _ = run(tmp_path, {"a.ipynb": notebook(extra=extra)}, "--quiz", "05_rmsnorm")
    (row,) = rows
    assert [k for k in row if "." in k and k != "submission"] == [f"05_rmsnorm.q{i}" for i in range(1, 5)]
    assert row["total"] == "2" and row["max"] == "4" and "missing answer for 05_rmsnorm.q3" in row["status"]
    assert code == grade.EXIT_PROBLEMS


def test_by_default_every_quiz_answered_is_graded(tmp_path):
    extra = ['answer("05_rmsnorm.q1", "b")', 'answer("self_check.s1", "The sum grows.")']
    code, rows, _ = run(tmp_path, {"a.ipynb": notebook(extra=extra)})
    columns = [k for k in rows[0] if "." in k and k != "submission"]
    assert columns[:4] == [f"05_rmsnorm.q{i}" for i in range(1, 5)] and columns[4] == "chapter_2_4.q1"
    assert not any(c.startswith("self_check") for c in columns)  # open items are never scored
    feedback = (tmp_path / "out" / "feedback" / "class__a.md").read_text(encoding="utf-8")
    assert "The sum grows." in feedback and "not scored" in feedback


def test_usage_errors_exit_2(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    (tmp_path / "a.ipynb").write_text(notebook(), encoding="utf-8")
    assert main([]) == grade.EXIT_USAGE
    assert main([str(tmp_path / "nope"), "--out", str(tmp_path / "o")]) == grade.EXIT_USAGE
    assert main([str(empty), "--out", str(tmp_path / "o")]) == grade.EXIT_USAGE
    assert main([str(tmp_path / "a.ipynb"), "--out", str(tmp_path / "o"), "--quiz", "nope"]) == grade.EXIT_USAGE
    assert "chapter_2_4" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_unwritable_output_exits_3(tmp_path):
    (tmp_path / "a.ipynb").write_text(notebook(), encoding="utf-8")
    (tmp_path / "o").write_text("a file, not a folder", encoding="utf-8")
    assert main([str(tmp_path / "a.ipynb"), "--out", str(tmp_path / "o")]) == grade.EXIT_OUTPUT


def test_help_explains_the_exit_codes(capsys):
    assert main(["--help"]) == grade.EXIT_OK
    text = capsys.readouterr().out
    for phrase in ("Exit codes", "0  every submission", "1  the gradebook", "2  usage error", "3  the output",
                   "never executes", "gradebook.csv", "item_analysis.csv", "--quiz", "10 MB"):
        assert phrase in text


def test_python_dash_m_runs_the_grader(tmp_path):
    (tmp_path / "a.ipynb").write_text(notebook(), encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "course_utils.grade", str(tmp_path / "a.ipynb"), "--out",
                           str(tmp_path / "o")], capture_output=True, text=True, cwd=tmp_path, check=False)
    assert done.returncode == 0 and "1 ok" in done.stdout and (tmp_path / "o" / "gradebook.csv").exists()


def test_progress_bar_on_large_batches_only(tmp_path, capsys):
    files = {f"s{i:02d}.ipynb": notebook() for i in range(grade.PROGRESS_MIN)}
    run(tmp_path, files)
    assert capsys.readouterr().err == ""  # --no-progress
    assert main([str(tmp_path / "class"), "--out", str(tmp_path / "o")]) == grade.EXIT_OK
    assert f"{grade.PROGRESS_MIN}/{grade.PROGRESS_MIN}" in capsys.readouterr().err
    assert main([str(tmp_path / "class" / "s00.ipynb"), "--out", str(tmp_path / "o")]) == grade.EXIT_OK
    assert capsys.readouterr().err == ""


def test_a_file_name_cannot_become_a_spreadsheet_formula(tmp_path, monkeypatch):
    (tmp_path / "=HYPERLINK(1).ipynb").write_text(notebook(), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert main(["=HYPERLINK(1).ipynb", "--out", "o"]) == grade.EXIT_OK
    assert (tmp_path / "o" / "gradebook.csv").read_text(encoding="utf-8").splitlines()[1].startswith("'=HYPERLINK")


def test_feedback_files_are_distinct_for_same_named_submissions(tmp_path):
    files = {"a/x.ipynb": notebook(), "b/x.ipynb": notebook(WRONG), "a__x.ipynb": notebook()}
    run(tmp_path, files)
    assert len(list((tmp_path / "out" / "feedback").iterdir())) == 3


# ---------------------------------------------------------------------------------------------------- atomic writes

def test_a_crash_while_writing_leaves_the_old_gradebook_whole(tmp_path, monkeypatch):
    (tmp_path / "a.ipynb").write_text(notebook(), encoding="utf-8")
    out = tmp_path / "o"
    out.mkdir()
    for name in ("gradebook.csv", "item_analysis.csv"):
        (out / name).write_text(f"old {name}\n", encoding="utf-8")

    def crash(fd):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", crash)
    assert main([str(tmp_path / "a.ipynb"), "--out", str(out)]) == grade.EXIT_OUTPUT
    for name in ("gradebook.csv", "item_analysis.csv"):
        assert (out / name).read_text(encoding="utf-8") == f"old {name}\n"
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


def test_atomic_write_replaces_whole_or_not_at_all(tmp_path, monkeypatch):
    target = tmp_path / "gradebook.csv"
    target.write_text("old", encoding="utf-8")
    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        grade._atomic_write(target, "new" * 1000)
    assert target.read_text(encoding="utf-8") == "old" and list(tmp_path.iterdir()) == [target]
    monkeypatch.undo()
    grade._atomic_write(target, "new")
    assert target.read_text(encoding="utf-8") == "new"


# ------------------------------------------------------------------------------------------------------- benchmark

def test_the_benchmark_runs_on_a_small_batch(capsys):
    spec = importlib.util.spec_from_file_location("bench_grading", ROOT / "benchmarks" / "bench_grading.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--n", "40", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "40 generated notebooks" in out and "ms per submission" in out

"""The batch grader: students, not files; exactly the assignment's questions; LMS exports; outputs replaced whole."""
import csv
import io
import json
import os
import subprocess
import sys
import zipfile

import pytest

from conftest import ROOT
from course_utils.quiz import cli, load_quiz
from course_utils.quiz.cli import main

QUIZ = {stem: load_quiz(stem) for stem in ("01_why_normalize", "03_layernorm")}
POINTS = {stem: sum(q.points for q in quiz.questions) for stem, quiz in QUIZ.items()}


def pts(x: float) -> str:
    """A score as the gradebook writes it."""
    return f"{round(x, 4):g}"


FULL, P01, P03 = pts(sum(POINTS.values())), pts(POINTS["01_why_normalize"]), pts(POINTS["03_layernorm"])
ASSIGNMENT = '''title = "Norms, part 1"
due = 2026-12-15T23:59:00Z
[late]
policy = "deduct"
grace_minutes = 10
deduct_per_day = 0.25
max_days = 3
[[notebooks]]
notebook = "01_why_normalize"
quizzes = ["01_why_normalize"]
[[notebooks]]
notebook = "03_layernorm"
quizzes = ["03_layernorm"]
'''
ROSTER = ('student_id,name,login,email,canvas_id,section\n'
          's1,"Smith, Jane",jsmith,jane@uni.edu,101,A\n'
          's2,José Núñez,jnunez,jose@uni.edu,102,A\n'
          's3,Never Submitted,nsub,never@uni.edu,103,B\n')


def key(q):
    return q.answer


def wrong(q):
    return next(c.label for c in q.choices if c.label != q.answer) if q.kind == "choice" else q.answer + 1


def notebook(stem: str, pick=key, extra: tuple[str, ...] = (), stamp: bool = True, outputs: str = "") -> str:
    cells = [{"cell_type": "markdown", "metadata": {}, "source": "# Lesson"}]
    for q in QUIZ[stem].questions:
        value = pick(q)
        cell = {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
                "source": f'answer("{q.ref}", {"..." if value is ... else repr(value)})'}
        if outputs:
            cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": outputs}]
        cells.append(cell)
    cells += [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": s}
              for s in extra]
    meta = {"course": {"notebook": stem}} if stamp else {}
    return json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": meta, "cells": cells})


def write(folder, files: dict) -> None:
    for name, content in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))


def grade(tmp_path, files: dict | None = None, *options, roster: str | None = ROSTER, assignment: str = ASSIGNMENT,
          target=None):
    """Write the files and course files, run the grader, return (exit code, gradebook rows by student id)."""
    sub = tmp_path / "submissions"
    sub.mkdir(exist_ok=True)
    write(sub, files or {})
    (tmp_path / "assignment.toml").write_text(assignment, encoding="utf-8")
    args = [str(target or sub), "--assignment", str(tmp_path / "assignment.toml"), "--out", str(tmp_path / "out"),
            "--no-progress", *options]
    if roster is not None:
        (tmp_path / "roster.csv").write_text(roster, encoding="utf-8")
        args += ["--roster", str(tmp_path / "roster.csv")]
    code = main(args)
    return code, read_rows(tmp_path / "out" / "gradebook.csv")


def read_rows(path, key="student_id"):
    with open(path, newline="", encoding="utf-8-sig") as f:
        return {r[key]: r for r in csv.DictReader(f)} if key else list(csv.DictReader(f))


def canvas(name, uid, sid, stem, late=False, resubmit=0):
    return f"{name}{'_LATE' if late else ''}_{uid}_{sid}_{stem}{f'-{resubmit}' if resubmit else ''}.ipynb"


# ----------------------------------------------------------------------------------------------- students, not files

def test_an_lms_download_gives_one_row_per_student_with_totals_over_every_notebook(tmp_path):
    files = {canvas("smithjane", 101, 5001, "01_why_normalize"): notebook("01_why_normalize"),
             canvas("smithjane", 101, 5002, "03_layernorm"): notebook("03_layernorm"),
             canvas("nunezjose", 102, 5003, "01_why_normalize"): notebook("01_why_normalize", wrong)}
    code, rows = grade(tmp_path, files)
    assert list(rows) == ["s1", "s2", "s3"]  # roster order; the student who handed in nothing has a row too
    assert rows["s1"]["total"] == FULL and rows["s1"]["max"] == FULL and rows["s1"]["status"] == "ok"
    assert rows["s1"]["percent"] == "100.0" and rows["s1"]["name"] == "Smith, Jane"
    assert rows["s2"]["total"] == "0" and "missing 03_layernorm" in rows["s2"]["status"]
    assert rows["s3"]["status"] == "no submission" and rows["s3"]["total"] == "0"
    assert code == cli.EXIT_PROBLEMS
    columns = list(rows["s1"])
    assert [c for c in columns if "." in c and "@" not in c] == [q.ref for s in QUIZ for q in QUIZ[s].questions]


def test_the_latest_resubmission_counts_and_lateness_is_deducted(tmp_path):
    files = {canvas("smithjane", 101, 5001, "01_why_normalize"): notebook("01_why_normalize", wrong),
             canvas("smithjane", 101, 5007, "01_why_normalize", late=True, resubmit=1): notebook("01_why_normalize"),
             canvas("smithjane", 101, 5002, "03_layernorm"): notebook("03_layernorm")}
    _, rows = grade(tmp_path, files)
    row = rows["s1"]
    # The LMS marks the resubmission late without a time: one day, 25% off that notebook's points.
    assert row["late"] == "yes" and row["total"] == pts(0.75 * POINTS["01_why_normalize"] + POINTS["03_layernorm"])
    feedback = (tmp_path / "out" / "feedback" / "s1.md").read_text(encoding="utf-8")
    assert "was replaced by a later submission" in feedback and "25% deducted" in feedback


@pytest.mark.parametrize("stamp,hours_late,total,late", [
    ("2026-12-15 20:00:00.000000 UTC", 0, 1.0, "no"),
    ("2026-12-16 00:05:00.000000 UTC", 0, 1.0, "no"),       # inside the 10-minute grace period
    ("2026-12-16 05:00:00.000000 UTC", 5, 0.75, "yes"),     # a started day: 25% off both notebooks
    ("2026-12-18 01:00:00.000000 UTC", 49, 0.25, "yes"),    # three started days: 75% off
    ("2026-12-20 00:00:00.000000 UTC", 96, 0.0, "yes"),     # past max_days: late work scores 0
])
def test_nbgrader_timestamps_decide_lateness(tmp_path, stamp, hours_late, total, late):
    files = {f"submitted/jsmith/ps1/{stem}.ipynb": notebook(stem) for stem in QUIZ}
    files["submitted/jsmith/ps1/timestamp.txt"] = stamp
    _, rows = grade(tmp_path, files)
    assert (rows["s1"]["total"], rows["s1"]["late"]) == (pts(total * sum(POINTS.values())), late)


def test_home_folders_and_a_zip_of_an_lms_download_are_recognised(tmp_path):
    home = {f"jupyter-jsmith/course/notebooks/{stem}.ipynb": notebook(stem) for stem in QUIZ}
    home["jnunez/01_why_normalize.ipynb"] = notebook("01_why_normalize")
    _, rows = grade(tmp_path, home)
    assert rows["s1"]["total"] == FULL and rows["s2"]["total"] == P01

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for stem in QUIZ:
            zf.writestr(canvas("nunezjose", 102, 7000, stem), notebook(stem))
    (tmp_path / "download.zip").write_bytes(buffer.getvalue())
    (tmp_path / "zip").mkdir()
    _, rows = grade(tmp_path / "zip", target=tmp_path / "download.zip")
    assert rows["s2"]["total"] == FULL and rows["s1"]["status"] == "no submission"


def test_without_a_roster_students_come_from_the_layout(tmp_path):
    files = {canvas("smithjane", 101, 1, stem): notebook(stem) for stem in QUIZ}
    files["ada/01_why_normalize.ipynb"] = notebook("01_why_normalize")
    files["loose.ipynb"] = notebook("01_why_normalize")
    code, rows = grade(tmp_path, files, roster=None)
    assert set(rows) == {"101", "ada"} and rows["101"]["total"] == FULL and rows["101"]["name"] == "smithjane"
    assert code == cli.EXIT_PROBLEMS  # loose.ipynb belongs to nobody, and says so


def test_the_lms_gradebook_export_works_as_a_roster_as_it_is(tmp_path):
    canvas_export = ('Student,ID,SIS User ID,SIS Login ID,Section,Norms (123)\n'
                     '    Points Possible,,,,,6\n'
                     '"Smith, Jane",101,s1,jsmith,A,\n'
                     '"Student, Test",999,,,A,\n')
    files = {canvas("smithjane", 101, 1, stem): notebook(stem) for stem in QUIZ}
    _, rows = grade(tmp_path, files, roster=canvas_export)
    assert list(rows) == ["s1"] and rows["s1"]["total"] == FULL and rows["s1"]["login"] == "jsmith"
    no_sis = canvas_export.replace(",s1,", ",,")  # a course with no SIS: Canvas's own ID names the student
    _, rows = grade(tmp_path, files, roster=no_sis)
    assert rows["101"]["total"] == FULL and rows["101"]["name"] == "Smith, Jane"
    moodle_export = "First name,Last name,ID number,Email address\nJane,Smith,s1,jane@uni.edu\n"
    files = {f"jane@uni.edu/{stem}.ipynb": notebook(stem) for stem in QUIZ}
    _, rows = grade(tmp_path, files, roster=moodle_export)
    assert rows["s1"]["name"] == "Jane Smith" and rows["s1"]["total"] == FULL


def test_a_renamed_file_is_recognised_by_its_course_stamp_or_its_name(tmp_path):
    files = {"jsmith/Copy of lesson (1).ipynb": notebook("01_why_normalize"),
             "jsmith/my_03_LayerNorm work-2.ipynb": notebook("03_layernorm", stamp=False)}
    _, rows = grade(tmp_path, files)
    assert rows["s1"]["total"] == FULL


# ------------------------------------------------------------------------------------- exactly the assignment's questions

def test_answers_outside_the_notebooks_quizzes_are_reported_never_graded(tmp_path):
    cheat = notebook("01_why_normalize", extra=('answer("05_rmsnorm.q1", "b")', 'answer("03_layernorm.q1", "a")'))
    files = {"jsmith/01_why_normalize.ipynb": cheat, "jnunez/01_why_normalize.ipynb": notebook("01_why_normalize")}
    _, rows = grade(tmp_path, files)
    assert rows["s1"]["total"] == rows["s2"]["total"] == P01
    assert not any("05_rmsnorm" in c for c in rows["s1"])
    feedback = (tmp_path / "out" / "feedback" / "s1.md").read_text(encoding="utf-8")
    assert "2 answer(s) not part of this notebook's quizzes, not graded" in feedback


def test_stored_outputs_and_metadata_never_count(tmp_path):
    liar = json.loads(notebook("01_why_normalize", wrong, outputs="✓ Correct (1/1)"))
    liar["metadata"]["score"] = 3
    _, rows = grade(tmp_path, {"jsmith/01_why_normalize.ipynb": json.dumps(liar)})
    assert rows["s1"]["total"] == "0"


def test_without_an_assignment_the_grader_asks_for_one(tmp_path, capsys):
    write(tmp_path / "c", {"jsmith/01_why_normalize.ipynb": notebook("01_why_normalize")})
    assert main([str(tmp_path / "c"), "--out", str(tmp_path / "o")]) == cli.EXIT_USAGE
    assert "--assignment" in capsys.readouterr().err and not (tmp_path / "o").exists()
    assert main([str(tmp_path / "c"), "--out", str(tmp_path / "o"), "--quiz", "01_why_normalize"]) == cli.EXIT_OK
    assert read_rows(tmp_path / "o" / "gradebook.csv")["jsmith"]["total"] == P01


@pytest.mark.parametrize("text,where", [
    ("title = 'x'\n", "notebooks"),
    ('title = "x"\ndue = "tomorrow"\n[[notebooks]]\nnotebook = "01_why_normalize"\nquizzes = ["01_why_normalize"]\n',
     "due"),
    ('title = "x"\ndue = 2026-12-15T23:59:00\n[[notebooks]]\nnotebook = "a"\nquizzes = ["01_why_normalize"]\n',
     "time-zone"),
    ('title = "x"\n[[notebooks]]\nnotebook = "a"\nquizzes = ["nope"]\n', "no quiz named 'nope'"),
    ('title = "x"\n[late]\npolicy = "maybe"\n[[notebooks]]\nnotebook = "a"\nquizzes = ["01_why_normalize"]\n',
     "late.policy"),
    ('title = "x"\n[[notebooks]]\nnotebook = "a"\nquizzes = ["01_why_normalize"]\n[points]\n"01_why_normalize.q9" = 1\n',
     "points.01_why_normalize.q9"),
    ('title = "x"\n[[notebooks]]\nnotebook = "a"\nquizzes = ["01_why_normalize"]\n[[notebooks]]\nnotebook = "b"\n'
     'quizzes = ["01_why_normalize"]\n', "already answered in notebook 'a'"),
    ('title = "x"\ntypo = 1\n', "unknown keys ['typo']"),
    ("title = [", "not valid TOML"),
])
def test_a_malformed_assignment_file_is_exit_4_naming_file_and_field(tmp_path, capsys, text, where):
    (tmp_path / "a.toml").write_text(text, encoding="utf-8")
    write(tmp_path / "c", {"jsmith/x.ipynb": notebook("01_why_normalize")})
    assert main([str(tmp_path / "c"), "--assignment", str(tmp_path / "a.toml"), "--out", str(tmp_path / "o")]) == 4
    err = capsys.readouterr().err
    assert str(tmp_path / "a.toml") in err and where in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("roster,where", [
    ("name,login\nJane,jsmith\n", "needs a `student_id` column"),
    ("student_id,login\ns1,jsmith\ns2,jsmith\n", "line 3: 'jsmith' already names student 's1'"),
    ("student_id,login\ns1,jsmith\ns1,other\n", "line 3: student_id 's1' appears twice"),
    ("student_id,name\n,Jane\n", "line 2: no id for this student"),
])
def test_a_malformed_roster_is_exit_4(tmp_path, capsys, roster, where):
    code, _ = grade_quietly(tmp_path, roster)
    assert code == cli.EXIT_COURSE_FILE and where in capsys.readouterr().err


def grade_quietly(tmp_path, roster):
    try:
        return grade(tmp_path, {"jsmith/01_why_normalize.ipynb": notebook("01_why_normalize")}, roster=roster)
    except FileNotFoundError:
        return cli.EXIT_COURSE_FILE, None


# ------------------------------------------------------------------------------------------------------ exports

def test_canvas_and_moodle_imports_follow_their_formats(tmp_path):
    files = {f"jsmith/{stem}.ipynb": notebook(stem) for stem in QUIZ}
    grade(tmp_path, files)
    out = tmp_path / "out"
    lines = read_rows(out / "canvas_import.csv", key=None)
    assert list(lines[0]) == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Norms, part 1"]
    assert lines[0]["Student"] == "Points Possible" and lines[0]["Norms, part 1"] == FULL
    assert lines[1] == {"Student": "Smith, Jane", "ID": "101", "SIS User ID": "s1", "SIS Login ID": "jsmith",
                        "Section": "A", "Norms, part 1": FULL}
    moodle = read_rows(out / "moodle_import.csv", key="Email address")
    assert moodle["jane@uni.edu"]["Norms, part 1"] == FULL
    assert moodle["never@uni.edu"]["Feedback"] == f"0 of {FULL} points; no submission"
    assert moodle["jane@uni.edu"]["Feedback"] == f"{FULL} of {FULL} points"
    assert (out / "canvas_import.csv").read_bytes().startswith(b"\xef\xbb\xbf")  # Excel reads the accents right


def with_hand_graded_item(answer_literal: str) -> tuple[str, str]:
    """The assignment plus notebook 07's self_check quiz, s1 worth 2 points by hand; a 07 answering s1."""
    assignment = ASSIGNMENT.replace('quizzes = ["03_layernorm"]', 'quizzes = ["03_layernorm"]\n[[notebooks]]\n'
                                    'notebook = "07_review"\nquizzes = ["self_check"]') + '[manual]\n"self_check.s1" = 2\n'
    review = json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {"course": {"notebook": "07_review"}},
                         "cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                                    "source": f'answer("self_check.s1", {answer_literal})'}]})
    return assignment, review


def test_open_answers_go_to_a_manual_grading_file_and_hand_scores_merge_back(tmp_path, capsys):
    assignment, review = with_hand_graded_item('r"""The sum grows with depth."""')
    files = {"jsmith/07_review.ipynb": review, "jnunez/07_review.ipynb": review.replace("grows", "=shrinks")}
    _, rows = grade(tmp_path, files, assignment=assignment)
    assert rows["s1"]["self_check.s1 (manual)"] == "" and rows["s1"]["max"] == pts(sum(POINTS.values()) + 2)
    manual = read_rows(tmp_path / "out" / "manual_grading.csv", key=None)
    assert [(m["student_id"], m["question"], m["points"]) for m in manual] == [("s1", "self_check.s1", "2"),
                                                                               ("s2", "self_check.s1", "2")]
    assert "The sum grows with depth." in manual[0]["answer"] and manual[0]["rubric"]
    assert manual[1]["answer"].startswith("The sum =shrinks")

    manual[0]["score"], manual[1]["score"] = "2", "0.5"
    scored = tmp_path / "scored.csv"
    with open(scored, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(manual[0]))
        writer.writeheader()
        writer.writerows(manual)
    _, rows = grade(tmp_path, {}, "--manual-scores", str(scored), assignment=assignment)
    assert rows["s1"]["self_check.s1 (manual)"] == "2" and rows["s2"]["self_check.s1 (manual)"] == "0.5"
    assert rows["s1"]["total"] == "2"

    manual[1]["score"] = "3"
    with open(scored, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(manual[0]))
        writer.writeheader()
        writer.writerows(manual)
    code, _ = grade(tmp_path, {}, "--manual-scores", str(scored), assignment=assignment)
    assert code == cli.EXIT_COURSE_FILE and "line 3: column score: 3 is outside 0 to 2" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- outputs, exit codes

def test_a_rerun_replaces_the_outputs_whole_stale_feedback_included(tmp_path):
    grade(tmp_path, {"jsmith/01_why_normalize.ipynb": notebook("01_why_normalize")}, roster=None)
    assert sorted(p.name for p in (tmp_path / "out" / "feedback").iterdir()) == ["jsmith.md"]
    os.remove(tmp_path / "submissions" / "jsmith" / "01_why_normalize.ipynb")
    grade(tmp_path, {"ada/01_why_normalize.ipynb": notebook("01_why_normalize")}, roster=None)
    assert sorted(p.name for p in (tmp_path / "out" / "feedback").iterdir()) == ["ada.md"]
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]


def test_a_crash_while_writing_leaves_the_old_outputs_whole(tmp_path, monkeypatch):
    grade(tmp_path, {"jsmith/01_why_normalize.ipynb": notebook("01_why_normalize")})
    before = {p.name: p.read_bytes() for p in (tmp_path / "out").glob("*.csv")}
    from course_utils.quiz import gradebook

    def crash(*args):
        raise OSError("disk full")

    monkeypatch.setattr(gradebook, "feedback_markdown", crash)
    code, _ = grade(tmp_path, {"jsmith/03_layernorm.ipynb": notebook("03_layernorm")})
    assert code == cli.EXIT_OUTPUT
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").glob("*.csv")} == before
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]


def test_unwritable_output_exits_3(tmp_path):
    write(tmp_path / "c", {"ada/01_why_normalize.ipynb": notebook("01_why_normalize")})
    (tmp_path / "out").write_text("a file, not a folder", encoding="utf-8")
    code = main([str(tmp_path / "c"), "--quiz", "01_why_normalize", "--out", str(tmp_path / "out"), "--no-progress"])
    assert code == cli.EXIT_OUTPUT


def test_help_explains_the_exit_codes(capsys):
    assert main(["--help"]) == cli.EXIT_OK
    text = capsys.readouterr().out
    for phrase in ("Exit codes", "0  every student", "1  the outputs", "2  usage error", "3  the output",
                   "4  a course file", "never executes", "canvas_import.csv", "--roster", "--assignment", "10 MB"):
        assert phrase in text


def test_python_dash_m_and_the_console_script_run_the_grader(tmp_path):
    write(tmp_path / "c", {"ada/01_why_normalize.ipynb": notebook("01_why_normalize")})
    done = subprocess.run([sys.executable, "-m", "course_utils.grade", str(tmp_path / "c"), "--quiz",
                           "01_why_normalize", "--out", str(tmp_path / "o")], capture_output=True, text=True,
                          cwd=tmp_path, check=False)
    assert done.returncode == 0 and "1 ok" in done.stdout, done.stderr
    assert read_rows(tmp_path / "o" / "gradebook.csv")["ada"]["total"] == P01


def test_progress_bar_on_large_classes_only(tmp_path, capsys):
    files = {f"s{i:02d}/01_why_normalize.ipynb": notebook("01_why_normalize") for i in range(cli.PROGRESS_MIN)}
    write(tmp_path / "c", files)
    args = [str(tmp_path / "c"), "--quiz", "01_why_normalize", "--out", str(tmp_path / "o")]
    assert main(args + ["--no-progress"]) == cli.EXIT_OK and capsys.readouterr().err == ""
    assert main(args) == cli.EXIT_OK
    assert f"{cli.PROGRESS_MIN}/{cli.PROGRESS_MIN}" in capsys.readouterr().err


@pytest.mark.parametrize("edit,where", [
    (lambda text: text.replace('answer = "a"', 'answer = "z"', 1), "questions[2] (q3): `feedback` must be"),  # the key moved: choice a lacks feedback
    (lambda text: text.replace("tolerance = 1e-9", "tolerence = 1e-9", 1), "unknown keys ['tolerence']"),
    (lambda text: text + "\n[[questions]\n", "not valid TOML"),
])
def test_a_malformed_key_file_is_exit_4_naming_file_and_field(tmp_path, monkeypatch, capsys, edit, where):
    keys = tmp_path / "keys"
    keys.mkdir()
    for quiz in (ROOT / "quizzes").glob("*.toml"):
        (keys / quiz.name).write_text(quiz.read_text(encoding="utf-8"), encoding="utf-8")
    broken = keys / "01_why_normalize.toml"
    broken.write_text(edit(broken.read_text(encoding="utf-8")), encoding="utf-8")
    monkeypatch.setenv("COURSE_QUIZ_DIR", str(keys))
    write(tmp_path / "c", {"ada/01_why_normalize.ipynb": notebook("01_why_normalize")})
    for how in (["--quiz", "01_why_normalize"], ["--assignment", str(ROOT / "quizzes/assignments/whole_course.toml")]):
        assert main([str(tmp_path / "c"), *how, "--out", str(tmp_path / "o")]) == cli.EXIT_COURSE_FILE
        err = capsys.readouterr().err
        assert str(broken) in err and where in err, err


# ------------------------------------------------------------------------------------- what instructors ran into

def test_a_zip_a_student_handed_in_inside_the_lms_zip_is_theirs(tmp_path):
    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w") as zf:
        for stem in QUIZ:
            zf.writestr(f"work/{stem}.ipynb", notebook(stem))
    outer = io.BytesIO()
    with zipfile.ZipFile(outer, "w") as zf:
        zf.writestr(canvas("nunezjose", 102, 7001, "notebooks.zip").replace(".ipynb", ""), inner.getvalue())
    (tmp_path / "download.zip").write_bytes(outer.getvalue())
    (tmp_path / "zip").mkdir()
    _, rows = grade(tmp_path / "zip", target=tmp_path / "download.zip")
    assert rows["s2"]["total"] == FULL and rows["s2"]["status"] == "ok"
    # The same inner zip saved loose in a folder, with its LMS name: still whose it says.
    loose = tmp_path / "loose"
    write(loose, {canvas("smithjane", 101, 7002, "notebooks.zip").replace(".ipynb", ""): inner.getvalue()})
    _, rows = grade(tmp_path, target=loose)
    assert rows["s1"]["total"] == FULL


def test_two_files_for_one_notebook_with_nothing_to_order_them_are_a_problem(tmp_path):
    files = {"submitted/jsmith/ps1/01_why_normalize.ipynb": notebook("01_why_normalize"),
             "submitted/jsmith/ps1/01_why_normalize (1).ipynb": notebook("01_why_normalize", wrong)}
    files["submitted/jsmith/ps1/timestamp.txt"] = "2026-12-15 20:00:00.000000 UTC"
    _, rows = grade(tmp_path, files)
    assert "two files for 01_why_normalize with nothing to tell which came later" in rows["s1"]["status"]


def test_a_file_in_the_wrong_slot_is_graded_as_what_it_holds_and_says_so(tmp_path):
    files = {"jsmith/03_layernorm.ipynb": notebook("01_why_normalize")}  # notebook 01, saved under 03's name
    _, rows = grade(tmp_path, files)
    assert rows["s1"]["01_why_normalize.q1"] == "1" and "missing 03_layernorm" in rows["s1"]["status"]
    feedback = (tmp_path / "out" / "feedback" / "s1.md").read_text(encoding="utf-8")
    assert "03_layernorm.ipynb is named like 03_layernorm but holds notebook 01_why_normalize" in feedback


def test_another_weeks_notebooks_are_noted_not_problems(tmp_path):
    week = ASSIGNMENT.split("[[notebooks]]")[0] + '[[notebooks]]\nnotebook = "01_why_normalize"\nquizzes = ["01_why_normalize"]\n'
    files = {"jsmith/01_why_normalize.ipynb": notebook("01_why_normalize"),
             "jsmith/03_layernorm.ipynb": notebook("03_layernorm")}
    code, rows = grade(tmp_path, files, roster=None, assignment=week)
    assert rows["jsmith"]["status"] == "ok" and rows["jsmith"]["total"] == P01 and code == cli.EXIT_OK
    feedback = (tmp_path / "out" / "feedback" / "jsmith.md").read_text(encoding="utf-8")
    assert "03_layernorm.ipynb: not one of this assignment's notebooks; not graded" in feedback


@pytest.mark.parametrize("claimed,flagged", [("jsmith", False), ("JSmith ", False), ("jane@uni.edu", False),
                                            ("jnunez", True)])
def test_setup_student_is_compared_as_people_write_ids(tmp_path, claimed, flagged):
    files = {"jsmith/01_why_normalize.ipynb": notebook("01_why_normalize", extra=(f'setup(student="{claimed}")',))}
    _, rows = grade(tmp_path, files)
    assert ("names someone else" in rows["s1"]["status"]) == flagged
    if flagged:
        assert rows["s1"]["status"].startswith("jsmith/01_why_normalize.ipynb: setup(student='jnunez') names someone")


def test_hand_scores_keep_their_comments_follow_the_late_policy_and_are_never_overwritten(tmp_path, capsys):
    assignment, review = with_hand_graded_item('"The sum grows."')
    files = {"submitted/jsmith/ps1/07_review.ipynb": review, "submitted/jnunez/ps1/07_review.ipynb": review,
             "submitted/jnunez/ps1/timestamp.txt": "2026-12-16 05:00:00.000000 UTC"}  # a started day late
    grade(tmp_path, files, assignment=assignment)
    manual = tmp_path / "out" / "manual_grading.csv"
    rows = read_rows(manual, key=None)
    for r in rows:
        r["score"], r["comment"] = "2", "Names the growth; add why it hurts training."
    with open(manual, "w", newline="", encoding="utf-8") as f:  # filled in place, as a TA would
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    code, _ = grade(tmp_path, {}, assignment=assignment)
    assert code == cli.EXIT_USAGE and "--manual-scores" in capsys.readouterr().err  # nothing overwritten
    assert read_rows(manual, key=None)[0]["score"] == "2"
    _, rows = grade(tmp_path, {}, "--manual-scores", str(manual), assignment=assignment)
    assert rows["s1"]["self_check.s1 (manual)"] == "2" and rows["s2"]["self_check.s1 (manual)"] == "1.5"
    assert "Grader's comment: Names the growth" in (tmp_path / "out" / "feedback" / "s2.md").read_text()
    assert read_rows(manual, key=None)[1]["score"] == "2"  # written back as given, before the late deduction


def test_students_the_roster_does_not_know_stay_out_of_the_lms_files(tmp_path):
    files = {canvas("strangerx", 999, 1, "01_why_normalize"): notebook("01_why_normalize")}
    _, rows = grade(tmp_path, files)
    assert rows["999"]["status"].startswith("not in the roster")
    assert "999" not in (tmp_path / "out" / "canvas_import.csv").read_text(encoding="utf-8-sig")
    assert "999" not in (tmp_path / "out" / "moodle_import.csv").read_text(encoding="utf-8-sig")


def test_feedback_without_explanations_gives_no_key_away(tmp_path):
    files = {"jsmith/01_why_normalize.ipynb": notebook("01_why_normalize", wrong)}
    grade(tmp_path, files, "--no-explanations")
    text = (tmp_path / "out" / "feedback" / "s1.md").read_text(encoding="utf-8")
    # Only each question's score: not the answer, not right or wrong in words, nothing a late classmate could copy.
    assert "Your answer" not in text and "wrong" not in text and "correct" not in text
    for q in QUIZ["01_why_normalize"].questions:
        assert f"## {q.ref}: 0/{q.points:g}" in text and repr(wrong(q)) not in text
        assert q.explanation.splitlines()[0] not in text
        assert not any(c.feedback and c.feedback.splitlines()[0] in text for c in q.choices)
        assert not any(m.feedback.splitlines()[0] in text for m in q.mistakes)


@pytest.mark.parametrize("unknown_days,share", [(1, 0.75), (3, 0.25), (4, 0.0)])
def test_an_lms_late_flag_counts_as_unknown_days(tmp_path, unknown_days, share):
    total = pts(share * sum(POINTS.values()))
    assignment = ASSIGNMENT.replace("max_days = 3", f"max_days = 3\nunknown_days = {unknown_days}")
    files = {canvas("smithjane", 101, 9, stem, late=True): notebook(stem) for stem in QUIZ}
    _, rows = grade(tmp_path, files, assignment=assignment)
    assert (rows["s1"]["total"], rows["s1"]["late"], rows["s1"]["days_late"]) == (total, "yes", "unknown")


def test_a_typo_in_the_late_table_names_the_key(tmp_path, capsys):
    (tmp_path / "a.toml").write_text(ASSIGNMENT.replace("grace_minutes", "grace_minuets"), encoding="utf-8")
    write(tmp_path / "c", {"jsmith/01_why_normalize.ipynb": notebook("01_why_normalize")})
    code = main([str(tmp_path / "c"), "--assignment", str(tmp_path / "a.toml"), "--out", str(tmp_path / "o")])
    assert code == cli.EXIT_COURSE_FILE and "late: unknown keys ['grace_minuets']" in capsys.readouterr().err


def test_files_nobody_owns_are_listed_in_not_graded_txt(tmp_path):
    code, _ = grade(tmp_path, {"loose.ipynb": notebook("01_why_normalize"),
                               "jsmith/01_why_normalize.ipynb": notebook("01_why_normalize")}, roster=None)
    listed = (tmp_path / "out" / "not_graded.txt").read_text(encoding="utf-8")
    assert code == cli.EXIT_PROBLEMS and "loose.ipynb: cannot tell whose file this is" in listed


def test_every_problem_has_a_kind_and_the_status_lists_the_gravest_first():
    """Problems carry their kind (gradebook.PROBLEM_KINDS), so ordering and the summary never parse the text."""
    from course_utils.quiz.gradebook import PROBLEM_KINDS, Problem, StudentRow
    from course_utils.quiz.students import Student

    row = StudentRow(student=Student(student_id="s1"))
    row.problems += [Problem("not answered", "03_layernorm.q1 not answered"),
                     Problem("missing notebook", "missing 04_pre_vs_post_ln"),
                     Problem("no submission", "no submission")]
    assert row.status == "no submission; missing 04_pre_vs_post_ln; 03_layernorm.q1 not answered"
    assert list(PROBLEM_KINDS)[0] == "no submission" and list(PROBLEM_KINDS)[-1] == "not answered"
    with pytest.raises(ValueError, match="unknown kind of problem"):
        Problem("a typo", "text")
    # The wording does not decide the kind: a "not answered" text filed as a missing notebook sorts as one.
    row.problems = [Problem("not answered", "missing 01"), Problem("missing notebook", "q1 not answered")]
    assert row.status == "q1 not answered; missing 01"

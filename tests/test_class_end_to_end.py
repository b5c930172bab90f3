"""A generated class, graded end to end in every layout instructors get, matches what each student put in.

The expectations come from what the generator wrote into each notebook (course_utils.quiz.demo_class), never from
the grader. The late policy of quizzes/assignments/whole_course.toml (10% per started day after 15 minutes' grace,
0 after a week; an LMS's late flag without a time flagged, not deducted) is applied here by hand.
"""
import csv
import math
from datetime import timedelta

import pytest

from conftest import ROOT
from course_utils.quiz import cli
from course_utils.quiz.cli import main
from course_utils.quiz.demo_class import make_class, notebook_quizzes

ASSIGNMENT = ROOT / "quizzes" / "assignments" / "whole_course.toml"
GRACE, PER_DAY, MAX_DAYS = timedelta(minutes=15), 0.1, 7


def kept(layout: str, when, due) -> float:
    """The share of a notebook's score the late policy keeps, computed from the policy's words."""
    if layout.startswith("canvas"):
        # The LMS marks the file late without saying when: the assignment's `unknown = "flag"` deducts nothing and
        # asks the instructor to look the time up (the row says so, checked below).
        return 1.0
    else:
        days = max(0, math.ceil((when - due - GRACE) / timedelta(days=1)))
    return 0.0 if days > MAX_DAYS else 1 - PER_DAY * days


def graded(tmp_path, layout, n=12, *options):
    demo = make_class(tmp_path / "demo", n, layout=layout, seed=3)
    out = tmp_path / "out"
    code = main([str(demo.submissions), "--assignment", str(ASSIGNMENT), "--roster", str(demo.roster), "--out",
                 str(out), "--no-progress", *options])
    with open(out / "gradebook.csv", newline="", encoding="utf-8-sig") as f:
        rows = {r["student_id"]: r for r in csv.DictReader(f)}
    return demo, code, rows


@pytest.mark.parametrize("layout,options", [("canvas", ()), ("canvas_zip", ()), ("nbgrader", ()),
                                            ("folders", ("--file-times",))])
def test_every_student_gets_exactly_the_score_their_answers_earn(tmp_path, layout, options):
    demo, code, rows = graded(tmp_path, layout, 12, *options)
    assert code == cli.EXIT_PROBLEMS  # the class has blanks, a skipped notebook and a student who handed in nothing
    assert list(rows) == list(demo.students)  # one row per student, in roster order
    for sid, expect in demo.students.items():
        row = rows[sid]
        for ref, points in expect.scores.items():
            if ref not in row:
                continue  # open items: graded by hand
            stem = next(s for s in demo.notebooks if ref.split(".")[0] in notebook_quizzes(s))
            # nbgrader stamps the whole assignment once, with the time of the latest notebook handed in.
            when = (max(expect.submitted_at.values()) if layout == "nbgrader" and expect.submitted_at
                    else expect.submitted_at.get(stem))
            factor = kept(layout, when, demo.due) if when is not None else 1.0
            assert float(row[ref]) == pytest.approx(points * factor), (sid, ref, expect.statuses[ref])
        assert (row["late"] == "yes") == expect.late, sid
        if layout.startswith("canvas"):
            assert ("late, time unknown" in row["status"]) == expect.late, (sid, row["status"])
        for stem in expect.missing:
            assert f"missing {stem}" in row["status"] or expect.profile == "absent", sid
        if expect.profile == "absent":
            assert row["status"] == "no submission" and row["total"] == "0"


def test_keys_in_every_answer_cell_give_full_marks_and_wrong_answers_give_zero(tmp_path):
    demo, _, rows = graded(tmp_path, "canvas", 3)
    perfect = [s for s, e in demo.students.items() if e.profile == "perfect"]
    wrong = [s for s, e in demo.students.items() if e.profile == "all_wrong"]
    assert perfect and wrong
    for sid in perfect:
        # Every scored question of every notebook, answered in the handed-out cells: 100%.
        # (the maximum also counts the open items graded by hand, which no key can answer)
        assert rows[sid]["status"] == "ok" and float(rows[sid]["total"]) == demo.max_total
        assert rows[sid]["percent"] == f"{100 * demo.max_total / float(rows[sid]['max']):.1f}"
    for sid in wrong:
        assert rows[sid]["total"] == "0" and rows[sid]["status"] == "ok"

"""Grade a class without running its notebooks: python -m course_utils.grade SUBMISSIONS... --assignment FILE --out DIR

The grader reads every notebook as data: it finds each `answer("<quiz>.<id>", <literal>)` cell with `ast`, takes the
literal, and grades it against the key in the quiz files. It never executes, imports or evaluates a submission, and
ignores stored outputs, so every score is recomputed from the key.

It recognises who submitted what, from the top level of each folder or zip given: an LMS download (Canvas-style
`name_userid_submissionid_file.ipynb`, `_LATE_`, `-1` resubmissions; Moodle's folder per student), a zip of one,
nbgrader's submitted/<student>/<assignment>/, JupyterHub home folders or one folder per student. Nothing deeper
names an owner: a file planted under a classmate's name is reported on its holder's row. --roster maps any of these
to a student id and name, and gives every enrolled student a row. One row per student: a column per question, the
total over every notebook of the assignment, the latest submission of each notebook, the late flag, and a status
naming what is missing. Each student's numbers in the per-student questions are those their notebook was run with
(setup() prints the id; TLJH's jupyter-<user> homes are understood), never a classmate's.

Output in --out (replaced whole on every run): gradebook.csv, canvas_import.csv (Canvas's gradebook import),
moodle_import.csv (Moodle's CSV grade import), item_analysis.csv, manual_grading.csv (the open answers, to score by
hand and merge back with --manual-scores), not_graded.txt (files no student could be found for) and
feedback/<student>.md.

No submission can stop the batch: links are not followed, FIFOs and devices not opened, files over 10 MB not read,
reading one notebook is bounded in time and memory, each student's files are bounded too (files and folders looked
at, files and bytes read, seconds), and anything unforeseen is reported in that student's row.

Exit codes:
  0  every student's files were read and graded without problems
  1  the outputs were written, but some rows have problems (see their status column), or some files were not
     looked at (a student past their budget; the summary names them)
  2  usage error: bad arguments, a path that does not exist, no notebooks found, no assignment given
  3  the output files could not be written
  4  a course file is malformed: the assignment, a quiz file, the roster or the manual scores (the message names
     the file and the field)
"""
from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from .assignment import Assignment, AssignmentError, ad_hoc_assignment, load_assignment
from .files import quiz_dir, quiz_names
from .gradebook import (PROBLEM_KINDS, ManualScoresError, grade_class, load_manual_scores, merge_manual_scores,
                        write_outputs)
from .model import QuizFormatError
from .students import RosterError, discover, load_roster, printable

__all__ = ["EXIT_OK", "EXIT_PROBLEMS", "EXIT_USAGE", "EXIT_OUTPUT", "EXIT_COURSE_FILE", "PROGRESS_MIN", "main"]

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, EXIT_OUTPUT, EXIT_COURSE_FILE = 0, 1, 2, 3, 4
PROGRESS_MIN = 50  # students; smaller batches finish before a progress bar would tell anyone anything
EXAMPLE = ("python -m course_utils.grade submissions.zip --assignment quizzes/assignments/whole_course.toml "
           "--roster roster.csv --out grading-output")


def _parser() -> argparse.ArgumentParser:
    doc = __doc__
    parser = argparse.ArgumentParser(
        prog="python -m course_utils.grade", formatter_class=argparse.RawDescriptionHelpFormatter,
        description=doc.split("\n\n", 1)[1].split("\nExit codes:")[0],
        epilog="Exit codes:" + doc.split("Exit codes:")[1] + f"\nExample:\n  {EXAMPLE}")
    parser.add_argument("submissions", nargs="+", metavar="SUBMISSION",
                        help="folders (searched recursively), .zip files and .ipynb files")
    parser.add_argument("--assignment", type=Path, metavar="FILE",
                        help="the assignment file: which notebooks and quizzes, points, due date, late policy "
                             "(example: quizzes/assignments/whole_course.toml)")
    parser.add_argument("--quiz", action="append", metavar="NAME",
                        help="instead of --assignment: grade this quiz, answered in the notebook where the course "
                             "asks it (chapter_2_4 in 07_review), else the notebook of the same name (repeatable). "
                             "Quizzes: " + ", ".join(quiz_names()))
    parser.add_argument("--roster", type=Path, metavar="CSV",
                        help="class list: student_id, and optionally name, login, email, canvas_id, section, aliases")
    parser.add_argument("--manual-scores", type=Path, metavar="CSV",
                        help="manual_grading.csv with its score column filled in, merged into the gradebook")
    parser.add_argument("--out", required=True, type=Path, metavar="DIR",
                        help="folder for the gradebook, exports and feedback/ (created if missing)")
    parser.add_argument("--file-times", action="store_true",
                        help="date a notebook that has no nbgrader timestamp.txt by its modification time (home "
                             "folders copied with their times kept, e.g. rsync -a); off by default, since a plain "
                             "copy sets every time to now")
    parser.add_argument("--no-explanations", action="store_true",
                        help="feedback files say only right or wrong per question, with no explanation or hint that "
                             "gives a key away: for feedback sent while late work is still accepted")
    parser.add_argument("--no-progress", action="store_true",
                        help=f"no progress bar (one is shown on stderr for {PROGRESS_MIN} or more students)")
    return parser


_SINGLE = ("--out", "--assignment", "--roster", "--manual-scores")


def _options_given(argv: list[str]) -> str:
    """Why the command line cannot be trusted, or "": an option that takes one value given twice. A shell glob over
    students' folders (`grade submissions/*`) expands to their names, and one named `--out=...` would otherwise
    silently redirect the outputs (argparse keeps the last)."""
    seen: dict[str, str] = {}
    for arg in argv:
        if arg == "--":
            break
        option = arg.split("=", 1)[0]
        if option in _SINGLE:
            if option in seen:
                return (f"{option} is given twice ({seen[option]!r} and {arg!r}). If a file or folder name starts "
                        f"with '-', name it with its folder (./{arg}) or put the submissions after `--`.")
            seen[option] = arg
    return ""


def _has_hand_scores(path: Path) -> bool:
    """Whether a manual_grading.csv from an earlier run has any score or comment filled in."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            return any((row.get("score") or "").strip() or (row.get("comment") or "").strip()
                       for row in csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error):
        return False


def _load(args) -> Assignment:
    if args.assignment is not None and args.quiz:
        raise SystemExit("give --assignment or --quiz, not both")
    if args.assignment is not None:
        return load_assignment(args.assignment)
    if args.quiz:
        return ad_hoc_assignment(args.quiz)
    raise SystemExit("say what to grade: --assignment FILE (example: quizzes/assignments/whole_course.toml) or "
                     "--quiz NAME. Without one the grader would have to guess from the submissions, and one "
                     "student could then change what the whole class is graded on.")


def main(argv: list[str] | None = None) -> int:
    """Run the batch grader; returns the exit code documented in the module docstring."""
    parser = _parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    given = _options_given(argv)
    if given:
        print(f"error: {given}", file=sys.stderr)
        return EXIT_USAGE
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return EXIT_OK if e.code == 0 else EXIT_USAGE
    try:
        assignment = _load(args)
        roster = load_roster(args.roster) if args.roster is not None else None
    except SystemExit as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except (AssignmentError, QuizFormatError, RosterError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_COURSE_FILE
    previous = args.out / "manual_grading.csv"
    if args.manual_scores is None and _has_hand_scores(previous):
        print(f"error: {previous} holds hand-given scores or comments, and this run would replace it. Pass it back "
              f"with --manual-scores {previous} (or move it away) to keep them.", file=sys.stderr)
        return EXIT_USAGE
    keep_open: list = []
    try:
        try:
            entries, unlisted = discover(args.submissions, keep_open, file_times=args.file_times)
        except FileNotFoundError as e:
            print(f"error: no such file or folder: {e.args[0]}", file=sys.stderr)
            return EXIT_USAGE
        if not entries and roster is None:
            print("error: no .ipynb files found in " + ", ".join(args.submissions), file=sys.stderr)
            return EXIT_USAGE
        rows, unowned = grade_class(entries, assignment, roster, progress=not args.no_progress)
    finally:
        for zf in keep_open:
            zf.close()
    if args.manual_scores is not None:
        try:
            scores = load_manual_scores(args.manual_scores, assignment, {r.student.student_id for r in rows})
        except ManualScoresError as e:
            print(f"error: {e}", file=sys.stderr)
            return EXIT_COURSE_FILE
        merge_manual_scores(rows, scores, assignment)
    try:
        write_outputs(args.out, rows, assignment, keys=not args.no_explanations, not_graded=unowned + unlisted)
    except OSError as e:
        print(f"error: could not write to {args.out}: {e}", file=sys.stderr)
        return EXIT_OUTPUT
    _summary(rows, unowned + unlisted, assignment, args.out, len(entries), file_times=args.file_times)
    return EXIT_PROBLEMS if unowned or unlisted or any(r.problems for r in rows) else EXIT_OK


def _summary(rows, unowned, assignment: Assignment, out: Path, n_files: int, file_times: bool = False) -> None:
    bad = [r for r in rows if r.problems]
    due = f"; due {assignment.due:%Y-%m-%d %H:%M %Z}" if assignment.due else ""
    print(f"Assignment: {assignment.title}: {len(assignment.parts)} notebook(s), {len(assignment.questions)} "
          f"auto-graded question(s), {assignment.max_points:g} points{due}")
    print(f"Keys: {quiz_dir()}, fingerprint {assignment.fingerprint} (the same keys give the same fingerprint)")
    late = [r.student.student_id for r in rows if r.late]
    print(f"Students: {len(rows)} ({sum(r.submitted for r in rows)} handed something in), {n_files} file(s) read; "
          f"{len(rows) - len(bad)} ok, {len(bad)} with problems, {len(late)} late"
          + (f" ({', '.join(late[:5])}{', ...' if len(late) > 5 else ''})" if late else ""))
    for kind, label in PROBLEM_KINDS.items():
        count = sum(any(p.kind == kind for p in r.problems) for r in rows)
        if count:
            print(f"  {count:4d} with {label}")
    for kind, what in (("claims another student", "holds a file named as another student's (graded as the "
                        "holder's only)"), ("over budget", "was not read in full (past the budget per student)")):
        named = [r.student.student_id for r in rows if any(p.kind == kind for p in r.problems)]
        if named:
            print(f"  {what}: {', '.join(printable(n, 40) for n in named[:10])}{', ...' if len(named) > 10 else ''}")
    if file_times:
        print("  dates: notebooks without nbgrader's timestamp.txt are dated by their modification time, which a "
              "student can set (touch -d): check any lateness that matters against the hub's or the LMS's records")
    for line in unowned[:5]:
        print(f"  not graded: {line}")
    if unowned:
        print(f"  {len(unowned)} file(s) or folder(s) not graded in all: listed in not_graded.txt")
    if assignment.manual:
        to_give = sum(ref in r.open_answers and r.manual.get(ref) is None for r in rows for ref in assignment.manual)
        print(f"Hand grading: {len(assignment.manual)} open question(s) worth points; {to_give} answer(s) still to "
              "score" + (" in manual_grading.csv (merge with --manual-scores)" if to_give else ""))
    print(f"Wrote {out}/: gradebook.csv, canvas_import.csv, moodle_import.csv, item_analysis.csv, "
          f"manual_grading.csv, not_graded.txt, feedback/ ({len(rows)} files)")


if __name__ == "__main__":
    sys.exit(main())

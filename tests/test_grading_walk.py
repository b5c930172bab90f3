"""The README's grading walk, run as an instructor would: every command it shows, in order, prints what it shows.

Each ```bash block between <!-- grading-walk --> and <!-- /grading-walk --> is run in a fresh folder (with the
course's quizzes/ beside it, as in the course folder), and its output is matched against the ```text block after it:
line by line, where a line `...` stands for any number of lines and a line ending in ` …` for any line with that
beginning. The one step a person does by hand, scoring the open answers in a spreadsheet, is done here in code.
"""
import csv
import os
import re
import subprocess
import sys

from conftest import ROOT

WALK = re.search(r"<!-- grading-walk -->(.*?)<!-- /grading-walk -->", (ROOT / "README.md").read_text(), re.S)


def steps() -> list[tuple[str, list[str]]]:
    assert WALK, "README.md must hold the grading walk between <!-- grading-walk --> markers"
    pairs = re.findall(r"```bash\n(.*?)```\n```text\n(.*?)```", WALK.group(1), re.S)
    assert len(pairs) >= 4, "the walk shows each command with what it prints"
    return [(command.strip(), shown.rstrip("\n").splitlines()) for command, shown in pairs]


def matches(shown: list[str], printed: list[str]) -> bool:
    """Whether the printed lines fit the shown ones (`...` = any lines, a trailing ` …` = any ending)."""
    if not shown:
        return not printed
    head, rest = shown[0], shown[1:]
    if head == "...":
        return any(matches(rest, printed[i:]) for i in range(len(printed) + 1))
    if not printed:
        return False
    fits = printed[0].startswith(head[:-1]) if head.endswith(" …") else printed[0].rstrip() == head
    return fits and matches(rest, printed[1:])


def score_by_hand(folder) -> None:
    """What a TA does in a spreadsheet: a score for every open answer, saved as scores.csv."""
    with open(folder / "grading-output" / "manual_grading.csv", newline="", encoding="utf-8-sig") as f:
        rows = list(csv.DictReader(f))
    assert rows and all(r["score"] == "" and r["prompt"] and r["rubric"] for r in rows)
    for r in rows:
        r["score"] = r["points"] if "normaliz" in r["answer"].lower() else "0"
    with open(folder / "scores.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def test_the_readme_grading_walk_prints_what_it_shows(tmp_path):
    os.symlink(ROOT / "quizzes", tmp_path / "quizzes")
    for command, shown in steps():
        assert command.startswith("python -m "), command
        if "--manual-scores scores.csv" in command:
            score_by_hand(tmp_path)
        done = subprocess.run([sys.executable, *command.split()[1:]], cwd=tmp_path, capture_output=True, text=True,
                              timeout=300, check=False)
        assert done.returncode in (0, 1), (command, done.stderr)
        printed = done.stdout.rstrip("\n").splitlines()
        assert matches(shown, printed), f"{command}\nREADME shows:\n" + "\n".join(shown) + "\nit printed:\n" + \
            done.stdout
    # What the walk leaves is what an instructor uploads.
    out = tmp_path / "grading-output"
    with open(out / "gradebook.csv", newline="", encoding="utf-8-sig") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 30 and all(r["status"] != "" for r in rows)
    assert any(float(r["self_check.s1 (manual)"] or 0) == 1 for r in rows)
    assert (tmp_path / "student-release" / "notebooks" / "07_review.ipynb").is_file()


def test_the_matcher_can_fail():
    assert matches(["a", "...", "z"], ["a", "b", "c", "z"]) and matches(["took …"], ["took 3 s"])
    assert not matches(["a", "z"], ["a", "b"]) and not matches(["a"], ["a", "extra"])
    assert not matches(["took …"], ["took"]) and not matches(["x", "..."], [])

"""The student release: no key anywhere in it, keyless quizzes that record answers without judging them, the same
per-student numbers the grader uses, and a TOML writer that round-trips through tomllib."""
import json
import math
import re
import tomllib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ROOT
from course_utils import release
from course_utils.quiz import QuizFormatError, answer, load_quiz, quiz_names, reveal, score_summary
from course_utils.quiz import notebook as quiz_notebook
from course_utils.quiz.files import read_quiz

FULL_QUIZZES = sorted((ROOT / "quizzes").glob("*.toml"))


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    """One release of the course, built once for the module."""
    folder = tmp_path_factory.mktemp("release")
    assert release.main([str(folder), "--force"]) == 0
    return folder


@pytest.fixture
def released(out, monkeypatch):
    """Quizzes read from the release, no student id, an empty session."""
    monkeypatch.setenv("COURSE_QUIZ_DIR", str(out / "quizzes"))
    monkeypatch.setattr(quiz_notebook, "_SESSION", {})
    monkeypatch.setattr(quiz_notebook, "_STUDENT", None)
    monkeypatch.delenv("JUPYTERHUB_USER", raising=False)
    return out


def _key_bearing(data: dict) -> set[str]:
    """Every string of a full quiz file that tells a right answer, 12 characters or longer."""
    found = []
    for q in data["questions"]:
        found += [q.get("explanation"), q.get("model_answer"), q.get("evidence"), *q.get("rubric", [])]
        found += [q["answer"]] if isinstance(q.get("answer"), str) and q.get("kind") == "numeric" else []
        found += [c.get("feedback") for c in q.get("choices", [])]
        found += [m.get("feedback") for m in q.get("mistakes", [])]
        found += [m["value"] for m in q.get("mistakes", []) if isinstance(m.get("value"), str)]
    return {" ".join(s.split()) for s in found if isinstance(s, str) and len(s.strip()) >= 12}


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    return [s for v in value for s in _strings(v)] if isinstance(value, list) else []


def _texts(folder):
    """Each file of the release as the text a reader sees: cell sources of notebooks, strings of TOML files too."""
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        text = path.read_bytes().decode("utf-8", errors="ignore")
        if path.suffix == ".ipynb":
            text = "\n".join("".join(c["source"]) for c in json.loads(text)["cells"])
        elif path.suffix == ".toml":
            text += "\n".join(_strings(tomllib.loads(text)))
        yield path, " ".join(text.split())


# --------------------------------------------------------------------------------------------------- what ships

def test_no_key_explanation_feedback_mistake_or_model_answer_is_in_the_release(out):
    secrets = set().union(*(_key_bearing(tomllib.loads(p.read_text(encoding="utf-8"))) for p in FULL_QUIZZES))
    assert len(secrets) > 100  # the search covers the real quizzes
    leaks = [(path.relative_to(out), s[:60]) for path, text in _texts(out) for s in secrets if s in text]
    assert not leaks, f"key-bearing text in the release: {leaks[:10]}"


def test_the_release_holds_the_course_and_nothing_else(out):
    top = {p.name for p in out.iterdir()}
    assert top == {"notebooks", "course_utils", "data", "quizzes", "pyproject.toml", "environment.yml", "README.md",
                   ".course-release"}
    assert not [p for p in out.rglob("*") if p.name in ("__pycache__", "tests", "benchmarks", ".git", "CLAIMS.md")
                or p.suffix == ".pyc"]
    assert sorted(p.name for p in (out / "notebooks").glob("*.ipynb")) == sorted(
        p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
    assert (out / "course_utils" / "quiz" / "model.py").is_file() and (out / "quizzes" / "README.md").is_file()
    assert "no answer keys" in (out / "README.md").read_text(encoding="utf-8")


def test_notebooks_ship_without_outputs(out):
    for path in (out / "notebooks").glob("*.ipynb"):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        assert all(c["outputs"] == [] and c["execution_count"] is None for c in cells if c["cell_type"] == "code")


def test_instructor_cells_are_dropped_and_key_readers_reported():
    nb = {"cells": [{"cell_type": "code", "source": "x = 1", "metadata": {}, "outputs": [1], "execution_count": 3},
                    {"cell_type": "code", "source": "q.answer", "metadata": {"tags": ["instructor"]}, "outputs": []},
                    {"cell_type": "code", "source": ["quiz.grade(q.id, ", "1)"], "metadata": {}, "outputs": []}],
          "metadata": {"course": {"notebook": "07_review"}}}
    handed_out, dropped, reads_keys = release.student_notebook(nb)
    assert dropped == 1 and reads_keys == [1] and len(handed_out["cells"]) == 2
    assert handed_out["cells"][0]["outputs"] == [] and handed_out["metadata"]["course"] == {"notebook": "07_review"}


# ---------------------------------------------------------------------------------------------- keyless quizzes

def test_the_released_quizzes_load_and_are_keyless(released):
    assert quiz_names() == sorted(p.stem for p in FULL_QUIZZES)
    for name in quiz_names():
        quiz = load_quiz(name)
        assert quiz.keyless and quiz.title == read_quiz(ROOT / "quizzes" / f"{name}.toml").title
        for q in quiz.questions:
            assert q.answer is None and not q.explanation and not q.mistakes and not q.model_answer and not q.evidence
            assert not q.rubric and not any(c.feedback for c in q.choices)


@pytest.mark.parametrize("field", ["answer = 'b'", "explanation = 'why'", "model_answer = 'm'", "evidence = 'e'"])
def test_a_keyless_quiz_that_carries_a_key_is_refused(tmp_path, monkeypatch, field):
    (tmp_path / "leaky.toml").write_text(
        "title = 'x'\nrelease = true\n[[questions]]\nid = 'q1'\nkind = 'open'\nprompt = 'p'\nsection = 's'\n"
        f"{field}\n", encoding="utf-8")
    monkeypatch.setenv("COURSE_QUIZ_DIR", str(tmp_path))
    with pytest.raises(QuizFormatError, match="keyless"):
        load_quiz("leaky")


def _without(text: str, shown: str) -> str:
    """The text with its echo of the response taken out (the answer cell's "Recorded", the widget's "Readable")."""
    return text.replace(f"Recorded: {shown}.", "Recorded: <response>.").replace(f"Readable: {shown}.",
                                                                              "Readable: <response>.")


@pytest.mark.parametrize("qid,right,wrong,shown", [
    ("q1", "b", "a", ("(b)", "(a)")),
    ("q5", 2.5, 10, ("2.5", "10")),
    ("q7", "3.54", "3.5", ("3.54", "3.5")),
])
def test_answer_records_without_revealing_correctness(released, capsys, qid, right, wrong, shown):
    key, lure = answer(f"chapter_2_4.{qid}", right), answer(f"chapter_2_4.{qid}", wrong)
    assert key.status == lure.status == "recorded" and key.score == lure.score == 0 and not key.explanation
    assert "hand in this notebook" in key.feedback
    assert _without(repr(key), shown[0]) == _without(repr(lure), shown[1])
    assert _without(key._repr_html_(), shown[0]) == _without(lure._repr_html_(), shown[1])
    unreadable = answer(f"chapter_2_4.{qid}", "not an answer")
    assert unreadable.status == "unreadable" and "Give" in unreadable.feedback


def test_reveal_and_score_summary_give_nothing_away(released, capsys):
    answer("chapter_2_4.q1", "b")
    answer("self_check.s1", "Normalization bounds the residual sum.")
    assert "with your instructor" in repr(reveal("self_check.s1"))
    rows = {r.quiz: r for r in score_summary().rows}
    assert rows["chapter_2_4"].answered == 1 and rows["chapter_2_4"].correct is None
    assert rows["chapter_2_4"].score is None and "—" in repr(score_summary())


def test_the_widget_records_without_revealing_correctness(released):
    view = load_quiz("chapter_2_4").show()
    q1 = view.controls["q1"]
    q1.input.value = "b"
    q1.check.click()
    key = q1.feedback.value
    q1.input.value = "a"
    q1.check.click()
    assert "Recorded" in key and "not collected" in key and _without(key, "(b)") == _without(q1.feedback.value, "(a)")
    assert "points" not in view.score.value and "1 of 8 answered" in view.score.value


def test_students_draw_the_numbers_the_grader_expects(released):
    """The release's grid masks reproduce the full quiz's draws, re-draws included, for every student."""
    full, keyless = read_quiz(ROOT / "quizzes" / "chapter_2_4.toml"), load_quiz("chapter_2_4")
    for i in range(2_000):
        sid = f"student{i:04d}"
        mine, graded = keyless.for_student(sid), full.for_student(sid)
        for q in mine.questions:
            if q.parameterised:
                assert q.values == graded.question(q.id).values and q.prompt == graded.question(q.id).prompt, sid


def test_parameterised_prompts_show_the_students_numbers(released, monkeypatch):
    monkeypatch.setenv("JUPYTERHUB_USER", "jdoe")
    shown = answer("chapter_2_4.q5", ...)
    assert "x = (2, 5, 2, 11)" in shown.prompt and "Your numbers (student jdoe)" in repr(shown)
    assert "(2, 5, 2, 11)" in load_quiz("chapter_2_4").show().children[5].children[0].value


# ------------------------------------------------------------------------------------------------- the command

def test_a_non_empty_out_is_refused_without_force(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine", encoding="utf-8")
    assert release.main([str(tmp_path)]) == 2
    assert "--force" in capsys.readouterr().err


def test_out_inside_the_course_folder_is_refused(capsys):
    assert release.main([str(ROOT / "release-out")]) == 2
    assert "inside the course folder" in capsys.readouterr().err and not (ROOT / "release-out").exists()


def test_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as stop:
        release.main([])
    assert stop.value.code == 2


def test_force_replaces_the_release_and_keeps_other_files(out, tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine", encoding="utf-8")
    (tmp_path / "quizzes").mkdir()
    (tmp_path / "quizzes" / "stale.toml").write_text("title = 'old'", encoding="utf-8")
    assert release.main([str(tmp_path), "--force"]) == 0
    assert "Wrote the student release" in capsys.readouterr().out
    assert (tmp_path / "notes.txt").read_text(encoding="utf-8") == "mine"
    assert not (tmp_path / "quizzes" / "stale.toml").exists()


# ------------------------------------------------------------------------------------------------- TOML writer

@pytest.mark.parametrize("path", FULL_QUIZZES, ids=lambda p: p.name)
def test_every_quiz_file_round_trips_through_the_writer(path):
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    assert tomllib.loads(release.toml_dumps(data)) == data


def test_the_writer_handles_awkward_values():
    data = {"title": "it's", "quotes": "'''", "end": "ends with '", "lead": "\nstarts with a newline",
            "back": r"\frac{1}{d} \\ done", "ctrl": "a\u0000b\u001fc\u007f", "tab": "a\tb", "cr": "a\r\nb",
            "uni": "µ σ² — 🙂", "ints": [1, -2, 0], "floats": [1e-9, -0.5, 2.0, 1e300], "flags": [True, False],
            "nested": [[1, 2], ["a"]], "empty": [], "key with space": 1, "inline": {"min": 1, "max": 9.5},
            "table": {"sub": {"x": 1}, "rows": [{"a": 1}, {"a": 2, "b": [{"c": "d"}]}]}}
    assert tomllib.loads(release.toml_dumps(data)) == data
    assert math.isinf(tomllib.loads(release.toml_dumps({"x": float("inf")}))["x"])
    assert release.toml_dumps({"p": "x = 1"}).startswith("p = 'x = 1'")  # literal strings where they are safe


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=8), st.text() | st.integers() | st.floats(allow_nan=False)
                       | st.booleans() | st.lists(st.text(max_size=5), max_size=3), max_size=5))
def test_the_writer_round_trips_any_strings_and_numbers(data):
    assert tomllib.loads(release.toml_dumps(data)) == data


def test_keyless_files_keep_the_full_files_text_as_written(out):
    text = (out / "quizzes" / "chapter_2_4.toml").read_text(encoding="utf-8")
    assert text.startswith("# The students' copy") and "release = true" in text
    assert re.search(r"prompt = '''For a single token's activation vector \$x = \(\{x1\}", text)


def test_a_release_notebook_stays_keyless_beside_the_full_course(out):
    """A hub image built from the course folder has the full course (keys and all) importable; a notebook of the
    release run there, in its own folder as a kernel is, still reads the release's keyless quizzes and says why.
    The control: the same code run from outside the release judges the answer with the full keys."""
    import subprocess
    import sys

    code = ("import warnings, course_utils\n"
            "from course_utils.quiz import answer, load_quiz\n"
            "with warnings.catch_warnings(record=True) as caught:\n"
            "    warnings.simplefilter('always')\n"
            "    quiz = load_quiz('01_why_normalize')\n"
            "q = quiz.questions[0]\n"
            "r = answer(q.ref, 'a' if q.kind == 'choice' else 1.0)\n"
            "print('FILE', course_utils.__file__)\n"
            "print('RESULT', quiz.keyless, r.status, bool(r.explanation))\n"
            "print('WARN', ' '.join(str(w.message) for w in caught))\n")
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("COURSE_QUIZ_DIR", "JUPYTERHUB_USER")}
    env["PYTHONPATH"] = str(ROOT)  # the full course first on the path, as an image that installed it has it
    def run(cwd):
        done = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=120, check=True)
        said = dict(line.split(" ", 1) for line in done.stdout.splitlines() if line[:4] in ("FILE", "RESU", "WARN"))
        return [said["FILE"], said["RESULT"], said["WARN"]]

    inside, outside = run(out / "notebooks"), run(out.parent)
    assert inside[0].startswith(str(ROOT)) and outside[0].startswith(str(ROOT))  # the full course was imported
    assert inside[1] == "True recorded False", inside
    assert "student release" in inside[2] and "stay keyless" in inside[2], inside
    assert outside[1].split()[0] == "False" and outside[1].split()[1] in ("correct", "wrong"), outside

"""Per-student numbers: formulas are evaluated safely, the defaults are the chapter's, and every student's item is
well-posed: a finite, correctly rounded key, and known mistakes that grade wrong with their own hint."""
import math
import re

import pytest
import torch

from conftest import ROOT
import course_utils
from course_utils.quiz import QuizFormatError, answer, load_quiz
from course_utils.quiz import notebook as quiz_notebook
from course_utils.quiz.formulas import FormulaError, compile_formula, evaluate

IDS = [f"student{i:04d}" for i in range(2_000)]
CHAPTER = load_quiz("chapter_2_4")
PARAMETERISED = [q for q in CHAPTER.questions if q.parameterised]


@pytest.fixture(autouse=True)
def _no_student(monkeypatch):
    monkeypatch.setattr(quiz_notebook, "_SESSION", {})
    monkeypatch.setattr(quiz_notebook, "_STUDENT", None)
    monkeypatch.delenv("JUPYTERHUB_USER", raising=False)


@pytest.fixture(scope="module")
def students():
    """The chapter quiz as each of 2,000 students gets it."""
    return {sid: CHAPTER.for_student(sid) for sid in IDS}


def _vector(q):
    return torch.tensor([float(v) for _, v in q.values], dtype=torch.float64)


# --------------------------------------------------------------------------------------------------- safe formulas

def _quiz_with(answer_formula="x1 + 1", prompt="What is x1 + 1 for x1 = {x1}?", mistake=None):
    mistakes = f"\n[[questions.mistakes]]\nvalue = {mistake!r}\nfeedback = 'no'\n" if mistake else ""
    return ("title = 'x'\n[[questions]]\nid = 'q1'\nkind = 'numeric'\nsection = 's'\npoints = 1\n"
            f"prompt = {prompt!r}\nexplanation = 'e'\ntolerance = 1e-9\nanswer = {answer_formula!r}\n"
            "[questions.params]\nx1 = { min = 1, max = 9, step = 1, default = 3 }\n" + mistakes)


HOSTILE = ["__import__('os')", "__import__('os').system('true')", "x1.__class__", "x1.__class__.__bases__",
           "9**9**9", "lambda: 1", "(lambda: 1)()", "open('/etc/passwd')", "eval('1')", "[x1][0]", "{x1: 1}",
           "x1 if x1 else 2", "'a' * 3", "x1 // 2", "x1 % 2", "x1 < 2", "x1 and 2", "x2", "sqrt(x1, key=1)",
           "sqrt(*[x1])", "round(x1, x1)", "math.sqrt(x1)", "10**1000", "1e999", "1/0", "sqrt(-x1)", "(-8)**(1/3)",
           "f'{x1}'", "x1 + ", "(" * 300 + "x1" + ")" * 300, "+".join(["x1"] * 200), "x1; import os",
           "x1 := 2", "[i for i in ()]", "sum(x1)", "True", "1j"]


@pytest.mark.parametrize("formula", HOSTILE)
def test_hostile_answer_formulas_are_refused_at_load_naming_file_and_field(tmp_path, monkeypatch, formula):
    (tmp_path / "hostile.toml").write_text(_quiz_with(answer_formula=formula), encoding="utf-8")
    monkeypatch.setenv("COURSE_QUIZ_DIR", str(tmp_path))
    with pytest.raises(QuizFormatError, match=r"hostile\.toml.*`answer`"):
        load_quiz("hostile")  # refused before it is evaluated: 9**9**9 would never finish


@pytest.mark.parametrize("where", ["prompt", "mistake"])
def test_hostile_formulas_in_texts_and_mistakes_are_refused(tmp_path, monkeypatch, where):
    hostile = "__import__('os')"
    text = (_quiz_with(prompt=f"What is {{={hostile}}}?") if where == "prompt"
            else _quiz_with(mistake=hostile))
    (tmp_path / "hostile.toml").write_text(text, encoding="utf-8")
    monkeypatch.setenv("COURSE_QUIZ_DIR", str(tmp_path))
    with pytest.raises(QuizFormatError, match="prompt" if where == "prompt" else r"mistakes\[0\]\.value"):
        load_quiz("hostile")


def test_the_prompt_may_not_show_the_key(tmp_path, monkeypatch):
    (tmp_path / "leak.toml").write_text(_quiz_with(prompt="Is it {answer}?"), encoding="utf-8")
    monkeypatch.setenv("COURSE_QUIZ_DIR", str(tmp_path))
    with pytest.raises(QuizFormatError, match="answer"):
        load_quiz("leak")


@pytest.mark.parametrize("params,message", [
    ("x1 = { min = 1, max = 9, step = 1 }", "exactly"),
    ("x1 = { min = 1, max = 9, step = 0, default = 3 }", "step > 0"),
    ("x1 = { min = 1, max = 9, step = 2, default = 4 }", "grid"),
    ("x1 = { min = 1, max = 9, step = 1, default = 12 }", "min <= default <= max"),
    ("sqrt = { min = 1, max = 9, step = 1, default = 3 }", "function name"),
    ("x1 = { min = 0, max = 1e6, step = 1e-3, default = 3 }", "at most"),
])
def test_bad_parameters_are_refused(tmp_path, monkeypatch, params, message):
    text = _quiz_with().replace("x1 = { min = 1, max = 9, step = 1, default = 3 }", params)
    (tmp_path / "bad.toml").write_text(text, encoding="utf-8")
    monkeypatch.setenv("COURSE_QUIZ_DIR", str(tmp_path))
    with pytest.raises(QuizFormatError, match=message):
        load_quiz("bad")


def test_a_mistake_that_is_the_key_at_the_defaults_is_refused(tmp_path, monkeypatch):
    (tmp_path / "overlap.toml").write_text(_quiz_with(mistake="2 * x1 - 2"), encoding="utf-8")  # 4 at x1 = 3
    monkeypatch.setenv("COURSE_QUIZ_DIR", str(tmp_path))
    with pytest.raises(QuizFormatError, match="overlaps the key"):
        load_quiz("overlap")


def test_formulas_evaluate_the_arithmetic_they_allow():
    values = {"a": 3.0, "b": 4.0}
    assert evaluate("sqrt((a**2 + b**2) / 2)", values) == math.sqrt(12.5)
    assert evaluate("mean(a, b) - -min(a, b) + max(a, b) * abs(-a)", values) == 3.5 + 3 + 12
    assert evaluate("round(a / b, 1)", values) == 0.8
    with pytest.raises(FormulaError, match="exponent"):
        evaluate("a ** 1001", values)
    with pytest.raises(FormulaError, match="unknown name"):
        compile_formula("c", frozenset(values))


# ----------------------------------------------------------------------------------------- the chapter's numbers

def test_the_defaults_are_the_chapters_numbers():
    """A learner without a student id sees the chapter's own example: x = (1, 2, 3, 4), (3, 4), 10 blocks of 2."""
    x = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    y = torch.tensor([3.0, 4.0], dtype=torch.float64)
    expected = {"q5": x.mean().item(), "q6": x.var(correction=0).item(), "q7": round(y.pow(2).mean().sqrt().item(), 2),
                "q8": 10 * 2}
    for qid, value in expected.items():
        q = CHAPTER.question(qid)
        assert q.answer == pytest.approx(value, abs=1e-12) and CHAPTER.grade(qid, value).correct
        assert CHAPTER.for_student(None).question(qid) == q and q.student is None
    assert "$x = (1, 2, 3, 4)$" in CHAPTER.question("q5").prompt and "$x = (3, 4)$" in CHAPTER.question("q7").prompt
    assert "10 stacked residual blocks" in CHAPTER.question("q8").prompt
    assert "Your numbers" not in CHAPTER.question("q5").prompt


def test_non_parameterised_quizzes_return_themselves():
    quiz = load_quiz("03_layernorm")
    assert not any(q.parameterised for q in quiz.questions) and quiz.for_student("jdoe") is quiz


# ----------------------------------------------------------------------------------------- 2,000 students' numbers

@pytest.mark.parametrize("qid", [q.id for q in PARAMETERISED])
def test_every_students_key_is_finite_rounded_and_grades_right(students, qid):
    template = CHAPTER.question(qid).template
    for sid, quiz in students.items():
        q = quiz.question(qid)
        assert math.isfinite(q.answer) and q.student == sid, sid
        exact = evaluate(template.answer, dict(q.values))
        if q.decimals is not None:
            assert q.answer == round(exact, q.decimals), sid
        assert quiz.grade(qid, q.answer).correct and quiz.grade(qid, exact).correct, sid
        assert f"Your numbers (student {sid}): " in q.prompt, sid


@pytest.mark.parametrize("qid", [q.id for q in PARAMETERISED])
def test_each_mistake_grades_wrong_with_its_own_hint_for_every_student(students, qid):
    for sid, quiz in students.items():
        q = quiz.question(qid)
        assert not q.collisions(), (sid, q.collisions())
        for m in q.mistakes:
            result = quiz.grade(qid, m.value)
            assert result.status == "wrong" and result.feedback == f"{m.value:.10g}: {m.feedback}", (sid, m)


@pytest.mark.parametrize("qid", [q.id for q in PARAMETERISED])
def test_most_students_get_numbers_of_their_own(students, qid):
    drawn = [quiz.question(qid).values for quiz in students.values()]
    assert len(set(drawn)) > 0.9 * len(drawn)
    assert drawn.count(CHAPTER.question(qid).values) < 0.01 * len(drawn)  # hardly anyone falls back to the defaults


def test_answering_the_chapters_numbers_says_why_it_is_wrong(students):
    """A learner who ran the notebook without an id answered the chapter's numbers; the grader tells them so."""
    hinted = 0
    for sid, quiz in list(students.items())[:200]:
        for q in PARAMETERISED:
            result = quiz.grade(q.id, q.answer)
            hinted += "chapter's example numbers" in result.feedback
            assert result.status == "wrong" or quiz.question(q.id).is_key(q.answer), sid
    assert hinted > 0.9 * 200 * len(PARAMETERISED)


def test_the_same_id_always_gets_the_same_numbers():
    fresh = load_quiz("chapter_2_4")
    for sid in IDS[:200]:
        assert fresh.for_student(sid) == CHAPTER.for_student(sid)
    # Pinned: a change to the draw would grade collected notebooks against numbers their students never saw.
    assert CHAPTER.for_student("jdoe").question("q5").values == (("x1", 2), ("x2", 5), ("x3", 2), ("x4", 11))
    assert CHAPTER.for_student("jdoe").question("q7").values == (("x1", 3.6), ("x2", 6.5))


def test_plausible_wrong_answers_grade_wrong_for_every_student(students):
    """Computed with torch from the student's own numbers, not from the quiz's formulas."""
    for sid, quiz in students.items():
        x = _vector(quiz.question("q5"))
        assert quiz.grade("q5", x.mean().item()).correct, sid
        assert quiz.grade("q5", x.sum().item()).status == "wrong", sid
        v = _vector(quiz.question("q6"))
        assert quiz.grade("q6", v.var(correction=0).item()).correct, sid
        unbiased = quiz.grade("q6", v.var().item())
        assert unbiased.status == "wrong" and "unbiased" in unbiased.feedback, sid
        assert quiz.grade("q6", v.std(correction=0).item()).status == "wrong", sid
        y = _vector(quiz.question("q7"))
        rms = y.pow(2).mean().sqrt().item()
        assert quiz.grade("q7", rms).correct and quiz.grade("q7", f"{rms:.2f}").correct, sid
        assert quiz.grade("q7", y.norm().item()).status == "wrong", sid
        assert quiz.grade("q7", f"{rms:.1f}").status == "wrong", sid
        params = dict(quiz.question("q8").values)
        blocks, m = params["L"], params["m"]
        assert quiz.grade("q8", blocks * m).correct, sid
        assert quiz.grade("q8", m ** blocks).status == "wrong", sid  # the chapter's 2^10, with the student's m and L
        assert quiz.grade("q8", m * math.sqrt(blocks)).status == "wrong", sid


# ------------------------------------------------------------------------------------------- where the id comes from

def test_the_student_comes_from_setup_then_jupyterhub_then_nobody(monkeypatch, capsys):
    assert quiz_notebook.current_student() is None
    monkeypatch.setenv("JUPYTERHUB_USER", "hubuser")
    assert quiz_notebook.current_student() == "hubuser"
    course_utils.setup(seed=0, student="jdoe")
    assert quiz_notebook.current_student() == "jdoe"
    shown = answer("chapter_2_4.q5", ...)
    assert "Your numbers (student jdoe): x1 = 2, x2 = 5, x3 = 2, x4 = 11." in repr(shown)
    key = CHAPTER.for_student("jdoe").question("q5").answer
    assert answer("chapter_2_4.q5", key).correct and not answer("chapter_2_4.q5", 2.5).correct
    course_utils.setup(seed=0)
    assert quiz_notebook.current_student() == "hubuser"


@pytest.mark.parametrize("bad", ["", "   ", "x" * 201, 42])
def test_a_bad_student_id_is_refused(bad):
    with pytest.raises(ValueError, match="student"):
        course_utils.setup(seed=0, student=bad)


def test_the_widget_shows_and_grades_the_students_numbers(monkeypatch):
    monkeypatch.setenv("JUPYTERHUB_USER", "jdoe")
    mine = CHAPTER.for_student("jdoe")
    view = load_quiz("chapter_2_4").show()
    assert "x = (2, 5, 2, 11)" in view.children[5].children[0].value
    q5 = view.controls["q5"]
    q5.input.value = repr(mine.question("q5").answer)
    q5.check.click()
    assert "Correct" in q5.feedback.value


def test_the_schemas_example_is_a_valid_item(tmp_path, monkeypatch):
    """The `[questions.params]` example in quizzes/README.md loads as written."""
    readme = (ROOT / "quizzes" / "README.md").read_text(encoding="utf-8")
    example = re.search(r"```toml\n(.*?)```", readme, re.S).group(1)
    (tmp_path / "example.toml").write_text("title = 'x'\n[[questions]]\nid = 'q1'\nkind = 'numeric'\nsection = 's'\n"
                                           f"points = 1\ntolerance = 1e-9\n{example}", encoding="utf-8")
    monkeypatch.setenv("COURSE_QUIZ_DIR", str(tmp_path))
    q = load_quiz("example").question("q1")
    assert q.parameterised and q.answer == 1 + 4 + 2.5 ** 2 and "(1, 2, 2.5)" in q.prompt

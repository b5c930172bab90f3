"""Quiz files follow the schema, every key grades correct and every distractor wrong, grading never raises."""
import json
import math
import re
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from conftest import ROOT
from course_utils.quiz import notebook as quiz_notebook
from course_utils.quiz import (QuizFormatError, Result, UnknownQuizError, answer, load_quiz, markdown_html,
                               quiz_names, reveal, score_summary)
from course_utils.quiz.files import read_quiz
from course_utils.quiz.markup import _inline

NOTEBOOKS = ["00_start_here", "01_why_normalize", "02_batchnorm_and_padding", "03_layernorm", "04_pre_vs_post_ln",
             "05_rmsnorm", "06_qk_norm_and_softcapping", "07_review", "08_real_model"]
ALL_QUIZZES = ["chapter_2_4", "self_check", "interview", *NOTEBOOKS]
QUESTIONS = [q for name in ALL_QUIZZES for q in load_quiz(name).questions]
SCORED = [q for q in QUESTIONS if q.scored]
CHOICES = [(q, c) for q in QUESTIONS if q.kind == "choice" for c in q.choices if c.label != q.answer]
MISTAKES = [(q, m) for q in QUESTIONS for m in q.mistakes]


@pytest.fixture(autouse=True)
def _fresh_session(monkeypatch):
    """No answers recorded and no student id: every test sees the chapter's own numbers."""
    monkeypatch.setattr(quiz_notebook, "_SESSION", {})
    monkeypatch.setattr(quiz_notebook, "_SHOWN", set())
    monkeypatch.setattr(quiz_notebook, "_STUDENT", None)
    monkeypatch.delenv("JUPYTERHUB_USER", raising=False)


# ------------------------------------------------------------------------------------------------------- the files

def test_every_quiz_the_course_needs_exists_and_nothing_else():
    assert sorted(quiz_names()) == sorted(ALL_QUIZZES)


def test_chapter_quiz_matches_the_chapter():
    q = load_quiz("chapter_2_4")
    assert q.ids == tuple(f"q{i}" for i in range(1, 9))
    assert [x.kind for x in q.questions] == ["choice"] * 4 + ["numeric"] * 4
    assert all(len(x.choices) == 4 for x in q.questions[:4])
    assert [x.answer for x in q.questions[4:]] == [2.5, 1.25, 3.54, 20]
    assert q.question("q7").decimals == 2
    assert q.question("q1").prompt == ("Why is BatchNorm a poor fit for Transformers processing variable-length "
                                       "sequences?")


def test_the_correct_choice_is_not_always_in_the_same_place():
    keys = [q.answer for q in QUESTIONS if q.kind == "choice"]
    assert len(set(keys)) >= 3 and max(keys.count(k) for k in set(keys)) < 0.5 * len(keys)


def _visible_length(text):
    return len(re.sub(r"\\[a-zA-Z]+|[{}$_^`]", "", text))


def test_the_correct_choice_is_not_given_away_by_its_length():
    """Test-wise learners pick the longest option; the key should be the longest in at most a third of the items."""
    items = [q for q in QUESTIONS if q.kind == "choice"]
    longest = sum(max(q.choices, key=lambda c: _visible_length(c.text)).label == q.answer for q in items)
    assert longest <= len(items) / 3


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_checkpoints_are_short_and_point_at_their_notebook(name):
    q = load_quiz(name)
    assert 2 <= len(q.questions) <= 4
    assert all(x.section.startswith(f"{name} § ") and x.scored for x in q.questions)


@pytest.mark.parametrize("name,prefix,count", [("self_check", "s", 7), ("interview", "i", 5)])
def test_open_questions_have_model_answers_and_rubrics(name, prefix, count):
    q = load_quiz(name)
    assert q.ids == tuple(f"{prefix}{i}" for i in range(1, count + 1))
    assert all(x.kind == "open" and x.points == 0 and len(x.model_answer) > 200 and len(x.rubric) >= 3
               for x in q.questions)
    assert q.points == 0


def test_every_section_names_a_course_notebook():
    assert all(q.section.split(" § ")[0] in NOTEBOOKS and len(q.section.split(" § ")) == 2 for q in QUESTIONS)


def _headings(path):
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    lines = [line for c in cells if c["cell_type"] == "markdown" for line in "".join(c["source"]).splitlines()]
    return {re.sub(r"^#+\s*(\d+\.\s*)?", "", line).strip() for line in lines if line.startswith("#")}


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_sections_exist_in_the_notebooks_written_so_far(name):
    path = ROOT / "notebooks" / f"{name}.ipynb"
    if not path.exists():
        pytest.skip(f"{path.name} is not written yet")
    missing = {q.section for q in QUESTIONS if q.section.startswith(f"{name} § ")} - {
        f"{name} § {h}" for h in _headings(path)}
    assert not missing, f"quiz items point at headings {name} does not have; fix the `section` fields: {missing}"


def test_the_chapters_two_errors_are_corrected_not_repeated():
    """Xiong et al. find Post-LN's large gradients near the output; Post-LN normalizes the stream, Pre-LN never does."""
    check, interview = load_quiz("self_check"), load_quiz("interview")
    assert "near the output" in check.question("s5").model_answer
    assert "near the output" in interview.question("i2").model_answer
    gradients = load_quiz("04_pre_vs_post_ln").question("q4")
    assert next(c for c in gradients.choices if c.label == gradients.answer).text.startswith("Near the output")
    assert "In Post-LN the stream passes through a LayerNorm after every addition" in check.question("s4").model_answer
    placement = load_quiz("chapter_2_4").question("q3")
    backwards = next(c for c in placement.choices if c.text.startswith("Pre-LN normalizes the residual"))
    assert "backwards" in backwards.feedback


@pytest.mark.parametrize("bad,message", [
    ("title = 'x'\n", "questions"),
    ("title = 'x'\n[[questions]]\nid = 'q1'\nkind = 'essay'\n", "kind"),
    ("title = 'x'\ncolour = 1\n[[questions]]\nid='q1'\n", "unknown keys"),
    ("title = 'x'\n[[questions]]\nid = 'q1'\nkind = 'numeric'\nprompt = 'p'\nsection = 's'\npoints = 1\n"
     "explanation = 'e'\nanswer = 2.5\ntolerence = 0.1\n", "tolerence"),
    ("title = 'x'\n[[questions]]\nid = 'q1'\nkind = 'numeric'\nprompt = 'p'\nsection = 's'\npoints = 1\n"
     "explanation = 'e'\nanswer = 2.5\n", "tolerance"),
    ("title = 'x'\n[[questions]]\nid = 'q1'\nkind = 'numeric'\nprompt = 'p'\nsection = 's'\npoints = 1\n"
     "explanation = 'e'\nanswer = 3.5355\ndecimals = 2\n", "rounded"),
    ("title = 'x'\n[[questions]]\nid = 'q1'\nkind = 'numeric'\nprompt = 'p'\nsection = 's'\npoints = 1\n"
     "explanation = 'e'\nanswer = 2.5\ntolerance = 0.1\n[[questions.mistakes]]\nvalue = 2.55\nfeedback = 'f'\n",
     "overlaps"),
    ("title = 'x'\n[[questions]]\nid = 'q1'\nkind = 'choice'\nprompt = 'p'\nsection = 's'\npoints = 1\n"
     "explanation = 'e'\nanswer = 'a'\n[[questions.choices]]\nlabel = 'a'\ntext = 'A'\n"
     "[[questions.choices]]\nlabel = 'b'\ntext = 'B'\n", "feedback"),
    ("title = 'x'\n[[questions]]\nid = 'q1'\nkind = 'choice'\nprompt = 'p'\nsection = 's'\npoints = 1\n"
     "explanation = 'e'\nanswer = 'c'\n[[questions.choices]]\nlabel = 'a'\ntext = 'A'\nfeedback = 'no'\n"
     "[[questions.choices]]\nlabel = 'b'\ntext = 'B'\nfeedback = 'no'\n", "answer"),
    ("title = 'x'\n[[questions]]\nid = 'q1'\nkind = 'open'\nprompt = 'p'\nsection = 's'\npoints = 2\n"
     "model_answer = 'm'\nrubric = ['r']\n", "never scored"),
    ("title = 'x'\n[[questions]]\nid = 'q1'\nkind = 'open'\nprompt = 'p'\nsection = 's'\nmodel_answer = 'm'\n"
     "rubric = ['r']\n[[questions]]\nid = 'q1'\nkind = 'open'\nprompt = 'p'\nsection = 's'\n"
     "model_answer = 'm'\nrubric = ['r']\n", "duplicate"),
    ("title = 'x'\n[[questions]]\nid = 'Q 1'\nkind = 'open'\n", "id"),
    ("title = [oops", "TOML"),
])
def test_malformed_files_are_refused_naming_the_problem(tmp_path, monkeypatch, bad, message):
    (tmp_path / "broken.toml").write_text(bad, encoding="utf-8")
    monkeypatch.setenv("COURSE_QUIZ_DIR", str(tmp_path))
    with pytest.raises(QuizFormatError, match=message):
        load_quiz("broken")


# ---------------------------------------------------------------------------------------------------- keys and lures

@pytest.mark.parametrize("q", SCORED, ids=lambda q: q.ref)
def test_the_key_grades_correct(q):
    result = load_quiz(q.quiz).grade(q.id, q.answer)
    assert result.correct and result.score == q.points and result.explanation == q.explanation


@pytest.mark.parametrize("q,choice", CHOICES, ids=lambda x: getattr(x, "ref", getattr(x, "label", "")))
def test_every_distractor_grades_wrong_and_says_why(q, choice):
    result = load_quiz(q.quiz).grade(q.id, choice.label)
    assert result.status == "wrong" and result.score == 0
    assert choice.feedback in result.feedback and len(choice.feedback) > 40


@pytest.mark.parametrize("q,mistake", MISTAKES, ids=lambda x: getattr(x, "ref", str(getattr(x, "value", ""))))
def test_every_known_mistake_grades_wrong_with_its_hint(q, mistake):
    result = load_quiz(q.quiz).grade(q.id, mistake.value)
    assert result.status == "wrong" and mistake.feedback in result.feedback


@pytest.mark.parametrize("response", ["b", "B", " b ", "(b)", "b)", "b.",
                                      " its statistics are pooled over the batch, so padding leaks in, and training "
                                      "and inference  use different statistics. "])
def test_choice_labels_are_read_leniently(response):
    assert load_quiz("chapter_2_4").grade("q1", response).correct


@pytest.mark.parametrize("qid,response", [
    ("q5", 2.5), ("q5", "2.5"), ("q5", " 2.50 "), ("q5", "5/2"), ("q5", "2.5e0"), ("q5", "25e-1"), ("q5", "+2.5"),
    ("q5", np.float32(2.5)), ("q5", np.float64(2.5)), ("q5", np.array(2.5)), ("q5", np.array([2.5])),
    ("q5", torch.tensor(2.5)), ("q5", torch.tensor([2.5])), ("q5", torch.tensor(2.5, requires_grad=True)),
    ("q5", torch.tensor([1.0, 2.0, 3.0, 4.0]).mean()), ("q5", Fraction(5, 2)), ("q5", Decimal("2.5")),
    ("q6", "5/4"), ("q6", " 5 / 4 "), ("q6", "1.25e0"), ("q6", 1.25),
    ("q6", torch.tensor([1.0, 2, 3, 4]).var(correction=0)),
    ("q7", "3.54"), ("q7", "3.540"), ("q7", 3.5355339), ("q7", math.sqrt(12.5)), ("q7", np.sqrt(12.5)),
    ("q7", torch.tensor(12.5).sqrt()), ("q7", torch.tensor([3.0, 4.0]).pow(2).mean().sqrt()),
    ("q8", 20), ("q8", "20"), ("q8", "20.0"), ("q8", np.int64(20)), ("q8", torch.tensor(20)), ("q8", 20.0),
])
def test_equivalent_forms_of_a_numeric_key_grade_correct(qid, response):
    assert load_quiz("chapter_2_4").grade(qid, response).correct


@pytest.mark.parametrize("qid,response", [
    ("q7", "3.53"), ("q7", "3.55"), ("q7", "3.5"), ("q7", 3.5), ("q5", "-2.5"), ("q6", 5 / 3), ("q8", 21),
    ("q5", "2.5000001"),
])
def test_near_misses_grade_wrong(qid, response):
    assert load_quiz("chapter_2_4").grade(qid, response).status == "wrong"


def test_sign_and_rounding_hints():
    quiz = load_quiz("03_layernorm")
    assert "sign" in quiz.grade("q1", 1.342).feedback
    assert "3 decimal places" in quiz.grade("q1", "-1.34").feedback


_TINY_KEY = """title = "tiny"
[[questions]]
id = "q2"
kind = "numeric"
section = "s"
points = 1
prompt = "What eps does the model's LayerNorm use?"
answer = 1e-12
rel_tolerance = 1e-6
explanation = "BERT's eps."
"""


def test_relative_tolerance_for_tiny_keys(tmp_path):
    (tmp_path / "tiny.toml").write_text(_TINY_KEY, encoding="utf-8")
    quiz = read_quiz(tmp_path / "tiny.toml")
    assert quiz.grade("q2", "1e-12").correct and quiz.grade("q2", 1e-12).correct
    assert quiz.grade("q2", 1e-11).status == "wrong" and quiz.grade("q2", 0).status == "wrong"


# ------------------------------------------------------------------------------------------------ nothing ever raises

class _Hostile:
    def __repr__(self):
        raise RuntimeError("repr")

    def __eq__(self, other):
        raise RuntimeError("eq")

    __hash__ = object.__hash__


UNREADABLE = [None, "", "   ", ..., "x" * 1_000_000, "e", "Z", ["a"], [2.5], (2.5,), {"a": 1}, {2.5},
              float("nan"), float("inf"), -float("inf"), "nan", "inf", "1e999", "1/0", "0/0", "2,5", "two",
              True, False, 10 ** 10000, 1 + 2j, b"2.5", object(), _Hostile(), torch.tensor([1.0, 2.0]),
              torch.tensor(float("nan")), torch.tensor(True), torch.tensor(1 + 1j), torch.empty(0),
              np.array([]), np.array([1, 2]), np.float64("nan"), np.bool_(True), np.datetime64("2024-01-01"),
              Decimal("NaN"), Decimal("sNaN"), Decimal("1e999999"), "5/4/3", "--2", "1e", ".", "\u0000", "🙂",
              torch.tensor(2.5, device="meta")]


@pytest.mark.parametrize("response", UNREADABLE, ids=lambda r: type(r).__name__)
def test_odd_responses_never_raise_and_never_score(response):
    for q in [*load_quiz("chapter_2_4").questions, load_quiz("self_check").questions[0]]:
        result = load_quiz(q.quiz).grade(q.id, response)
        assert isinstance(result, Result) and result.score == 0 and not result.correct, q.ref
        assert result.feedback and isinstance(result.feedback, str) and len(result.feedback) < 600, q.ref


@pytest.mark.parametrize("response", [None, "x" * 1_000_000, "two", [2.5], float("nan"), torch.tensor([1.0, 2.0])],
                         ids=repr)
def test_unreadable_feedback_says_what_form_is_expected(response):
    result = load_quiz("chapter_2_4").grade("q5", response)
    assert result.status in ("unreadable", "unanswered") and "such as" in result.feedback
    assert result.explanation == ""  # the explanation would give the key away


def test_unknown_choice_lists_the_labels():
    result = load_quiz("chapter_2_4").grade("q1", "e")
    assert result.status == "unreadable" and '"a", "b", "c", "d"' in result.feedback


_ANYTHING = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text() | st.binary(max_size=20)
    | st.complex_numbers() | st.fractions() | st.decimals() | st.just(...)
    | st.from_regex(r"\s*[+-]?\d{0,3}(\.\d{0,4})?([eE][+-]?\d{1,4})?(\s*/\s*\d{0,3})?\s*", fullmatch=True)
    | hnp.arrays(hnp.scalar_dtypes(), hnp.array_shapes(min_dims=0, max_dims=2, max_side=3)),
    lambda children: st.lists(children, max_size=3) | st.tuples(children) | st.dictionaries(st.text(max_size=3),
                                                                                             children, max_size=2),
    max_leaves=5)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(q=st.sampled_from(QUESTIONS), response=_ANYTHING)
def test_grade_never_raises_for_any_response(q, response):
    result = load_quiz(q.quiz).grade(q.id, response)
    assert result.status in ("correct", "wrong", "unreadable", "unanswered", "recorded")
    assert isinstance(result.correct, bool) and 0 <= result.score <= result.points and result.feedback


@settings(max_examples=200, deadline=None)
@given(x=st.floats(allow_nan=False, allow_infinity=False, min_value=-1e6, max_value=1e6))
def test_numeric_grading_agrees_for_number_and_text(x):
    quiz = load_quiz("chapter_2_4")
    for qid in ("q5", "q7"):
        assert quiz.grade(qid, x).status == quiz.grade(qid, repr(x)).status


@settings(max_examples=200, deadline=None)
@given(num=st.integers(-10_000, 10_000), den=st.integers(1, 10_000))
def test_fractions_as_text_grade_like_their_value(num, den):
    quiz = load_quiz("chapter_2_4")
    assert quiz.grade("q6", f"{num}/{den}").correct == quiz.grade("q6", num / den).correct == (num * 4 == den * 5)


def test_unknown_quiz_or_question_names_what_exists():
    with pytest.raises(UnknownQuizError, match="chapter_2_4.*self_check"):
        load_quiz("chapter_9")
    with pytest.raises(UnknownQuizError, match="q1, q2, q3, q4, q5, q6, q7, q8"):
        load_quiz("chapter_2_4").grade("q9", 1)
    with pytest.raises(UnknownQuizError, match="chapter_2_4"):
        answer("chapter_2_4", 1)
    with pytest.raises(UnknownQuizError):
        load_quiz("../quizzes/chapter_2_4")


def test_grading_is_pure():
    quiz = load_quiz("chapter_2_4")
    first = quiz.grade("q5", "2.5")
    assert quiz.grade("q5", "2.5") == first and quiz_notebook._SESSION == {}


# ------------------------------------------------------------------------------------------------------- notebooks

def test_answer_shows_the_feedback_once_and_records_it(capsys):
    result = answer("chapter_2_4.q5", 2.5)
    out = capsys.readouterr().out
    assert out.count("Correct") == 1 and "10/4" in out
    assert result.correct and "chapter_2_4.q5" in repr(result)
    html = result._repr_html_()
    assert "Explanation" in html and "$\\mu = (1+2+3+4)/4" in html
    assert quiz_notebook._SESSION["chapter_2_4.q5"] is result


def test_answer_with_ellipsis_is_a_gentle_prompt(capsys):
    result = answer("chapter_2_4.q6", ...)
    assert result.status == "unanswered" and result.score == 0 and "Not answered yet" in capsys.readouterr().out
    assert quiz_notebook._SESSION == {}


def test_an_unanswered_cell_shows_its_question_above_how_to_answer(capsys):
    q = load_quiz("chapter_2_4").question("q4")
    result = answer(q.ref, ...)
    text = repr(result)
    assert text.index(_plain_text(q.prompt)) < text.index("To answer, give the letter of one choice")
    assert all(f"({c.label}) {_plain_text(c.text)}" in text for c in q.choices)
    html = result._repr_html_()
    assert markdown_html(q.prompt) in html and "<p><b>(b)</b> The learned scale $\\gamma$" in html
    assert html.index("<b>(d)</b>") < html.index("To answer")
    assert answer("chapter_2_4.q5", "2.5").prompt == ""  # once answered, the feedback takes its place


def _plain_text(text):
    return re.sub(r"(?<!\n)\n(?!\n)", " ", text)


def test_open_answers_are_recorded_never_scored_and_revealed_on_request(capsys):
    result = answer("self_check.s1", "Normalization bounds the residual sum.")
    assert result.status == "recorded" and result.score == 0 and result.explanation == ""
    assert "Model answer" not in capsys.readouterr().out
    shown = reveal("self_check.s1")
    assert load_quiz("self_check").question("s1").rubric[0] in repr(shown)
    assert "<li>" in shown._repr_html_()
    assert "auto-scored" in repr(reveal("chapter_2_4.q1"))


def test_score_summary_tallies_the_session(capsys):
    answer("chapter_2_4.q1", "b")
    answer("chapter_2_4.q2", "a")
    answer("chapter_2_4.q2", "d")  # the latest attempt counts
    answer("05_rmsnorm.q2", "0.849")
    answer("interview.i1", "Padding.")
    summary = score_summary()
    rows = {r.quiz: r for r in summary.rows}
    assert (rows["chapter_2_4"].answered, rows["chapter_2_4"].correct, rows["chapter_2_4"].score) == (2, 2, 2)
    assert rows["chapter_2_4"].points == 8 and rows["05_rmsnorm"].correct == 1
    assert rows["interview"].correct is None and rows["interview"].answered == 1
    assert "2/8" in repr(summary) and "<table>" in summary._repr_html_()
    total = summary.total  # the scored quizzes' points summed; answers of every quiz
    assert total.answered == sum(r.answered for r in summary.rows) and total.score == 2 + rows["05_rmsnorm"].score
    assert total.points == 8 + rows["05_rmsnorm"].points and total.correct == 3
    assert repr(summary).splitlines()[-1].startswith("total") and "<td>total</td>" in summary._repr_html_()


def test_a_right_answer_after_the_answer_was_shown_is_not_counted_correct():
    view = load_quiz("chapter_2_4").show()
    q1 = view.controls["q1"]
    q1.input.value = "a"
    q1.check.click()  # wrong: the form offers to show the answer
    q1.reveal.click()
    q1.input.value = "b"
    q1.check.click()
    (row,) = score_summary().rows
    assert (row.answered, row.correct, row.score) == (1, 0, 0) and score_summary().total is None


def test_markdown_keeps_latex_and_escapes_html():
    out = markdown_html("A *b* **c** `d<e` $x_{l+1} < \\sqrt{2}$\n\n- one\n- two <script>")
    assert "<i>b</i>" in out and "<b>c</b>" in out and "<code>d&lt;e</code>" in out
    assert "$x_{l+1} &lt; \\sqrt{2}$" in out and "<ul><li>one</li>" in out and "<script>" not in out


def test_widgets_grade_on_click_and_keep_a_running_score():
    view = load_quiz("chapter_2_4").show()
    q1, q5, q7 = view.controls["q1"], view.controls["q5"], view.controls["q7"]
    assert "0 / 8 points" in view.score.value
    q1.check.click()
    assert "Not answered yet" in q1.feedback.value and "BatchNorm" not in q1.feedback.value  # asked just above
    q1.input.value = "b"
    q1.check.click()
    assert "Correct" in q1.feedback.value and "Explanation" in q1.feedback.value
    q5.input.value = " 5/2 "
    q5.check.click()
    q7.input.value = "12.5"
    q7.check.click()
    assert "mean of the squares" in q7.feedback.value and "Explanation" not in q7.feedback.value
    assert "2 / 8 points" in view.score.value and "3 of 8 answered" in view.score.value
    assert set(quiz_notebook._SESSION) == {"chapter_2_4.q1", "chapter_2_4.q5", "chapter_2_4.q7"}


def _off_by(q):
    """Plausible wrong answers to a scored item, as a learner would give them: every other choice (the neighbouring
    letters included), or the key off by a factor, with its sign flipped, or off by one; each known mistake too."""
    if q.kind == "choice":
        return [c.label for c in q.choices if c.label != q.answer]
    values = [q.answer * f for f in (2, 10, 0.5, 0.1, -1)] + [q.answer + 1, q.answer - 1]
    return [f"{x:.10g}" for x in [*values, *(m.value for m in q.mistakes)] if not q.is_key(x)]


def _key_in(q, text):
    """Whether the text names q's key: a choice's "(b)" or its wording; a number's digits on their own that the
    prompt does not already give (so "1.25" in "sqrt{1.25}", not "2.5" in "12.5")."""
    if q.kind == "choice":
        key = next(c for c in q.choices if c.label == q.answer)
        return f"({q.answer})" in text or _inline(key.text) in text
    key = f"{q.answer:.{q.decimals}f}" if q.decimals is not None else f"{q.answer:g}"
    alone = re.compile(rf"(?<![\d.]){re.escape(key)}(?!\.?\d)")
    return bool(alone.search(text)) and not alone.search(q.prompt)


SHOWN_QUIZZES = [(name, student) for name in ALL_QUIZZES for student in (None, "s0042")
                 if student is None or load_quiz(name).parameterised]


@pytest.mark.parametrize("name,student", SHOWN_QUIZZES)
def test_a_wrong_try_in_the_widget_gives_neither_the_explanation_nor_the_key(name, student, monkeypatch):
    if student:
        monkeypatch.setenv("JUPYTERHUB_USER", student)
    quiz = load_quiz(name).for_student(student)
    view = quiz.show()
    tried = 0
    for q in (q for q in quiz.questions if q.scored):
        controls = view.controls[q.id]
        for response in _off_by(q):
            controls.input.value = response
            controls.check.click()
            shown = controls.feedback.value
            assert "Not quite" in shown, (q.ref, response, shown)
            assert markdown_html(q.explanation) not in shown and "Explanation" not in shown, (q.ref, response)
            echo = f"({response})" if q.kind == "choice" else response
            body = shown.split("</div>", 1)[1].replace(f"<p>{echo}", "<p>", 1)  # the hint, less headline and echo
            assert not _key_in(q, body), (q.ref, response, shown)
            assert controls.shown.value == "" and controls.reveal.layout.display is None, q.ref
            tried += 1
    assert tried >= 2 * len([q for q in quiz.questions if q.scored])


_KEY_IN_HINT = """title = "rounding"
[[questions]]
id = "q1"
kind = "numeric"
section = "s"
points = 1
prompt = "What is RMS(3, 4), to two decimal places?"
answer = 3.54
decimals = 2
explanation = "sqrt(12.5) = 3.5355..."

[[questions.mistakes]]
value = 3.53
tolerance = 0.004
feedback = "Close: 3.5355 rounds to 3.54."

[[questions.mistakes]]
value = 12.5
feedback = "That is the mean of the squares."
"""


def test_a_hint_that_writes_the_key_out_is_held_back_in_the_widget_only(tmp_path):
    """A hint may give the key away ("rounds to 3.54"): fine in an answer cell, which shows the explanation after
    any answer, but not in the practice form, whose retry would then be free. (The course's own quizzes have no such
    hint now; the form must stay safe for an instructor's.)"""
    (tmp_path / "rounding.toml").write_text(_KEY_IN_HINT, encoding="utf-8")
    quiz = read_quiz(tmp_path / "rounding.toml")
    cell = quiz.grade("q1", "3.53")
    assert cell.status == "wrong" and "3.54" in cell.feedback
    q1 = quiz.show().controls["q1"]
    q1.input.value = "3.53"
    assert "Not quite" in q1.feedback.value and "3.54" not in q1.feedback.value
    assert "Try again, or show the answer" in q1.feedback.value
    q1.input.value = "12.5"  # a hint that does not give the key away is shown
    assert "mean of the squares" in q1.feedback.value


def test_show_the_answer_comes_after_a_wrong_try_and_is_recorded():
    view = load_quiz("chapter_2_4").show()
    q = load_quiz("chapter_2_4").question("q2")
    q2 = view.controls["q2"]
    assert q2.reveal.layout.display == "none"  # nothing to show before a try
    q2.input.value = "a"
    q2.check.click()
    assert q2.reveal.layout.display is None and q2.shown.value == ""
    q2.reveal.click()
    assert f"({q.answer})" in q2.shown.value and markdown_html(q.explanation) in q2.shown.value
    assert quiz_notebook._SHOWN == {"chapter_2_4.q2"} and "1 answer shown" in view.score.value
    q2.input.value = q.answer
    q2.check.click()
    assert "Correct" in q2.feedback.value and "after the answer was shown" in q2.feedback.value
    assert "0 / 8 points" in view.score.value and quiz_notebook._SESSION["chapter_2_4.q2"].score == 0
    again = load_quiz("chapter_2_4").show()  # the cell run again: the answer was still shown in this kernel
    again.controls["q2"].input.value = q.answer
    again.controls["q2"].check.click()
    assert "after the answer was shown" in again.controls["q2"].feedback.value
    q5 = view.controls["q5"]
    q5.input.value = "2"
    q5.reveal.click()
    assert "<b>2.5</b>" in q5.shown.value


def test_enter_in_the_number_box_checks_the_answer():
    view = load_quiz("chapter_2_4").show()
    q5 = view.controls["q5"]
    assert q5.input.continuous_update is False  # its value reaches the kernel on Enter (or leaving the box) only
    q5.input.value = "2.5"  # as Enter sends it: no click
    assert "Correct" in q5.feedback.value and "1 of 8 answered" in view.score.value
    q5.input.value = ""
    assert "Correct" in q5.feedback.value  # clearing the box is not a try
    q5.input.value = "3"
    assert "Not quite" in q5.feedback.value


def test_the_picked_choice_is_named_and_ticked():
    view = load_quiz("chapter_2_4").show()
    q = load_quiz("chapter_2_4").question("q4")
    q4 = view.controls["q4"]
    assert q4.chosen.value == "" and not any(q4.input.icons)
    q4.input.value = "b"
    assert "You picked <b>(b)</b>" in q4.chosen.value and _inline(q.choices[1].text) in q4.chosen.value
    assert list(q4.input.icons) == ["check" if c.label == "b" else "" for c in q.choices]
    q4.check.click()
    q4.input.value = "c"
    assert q4.feedback.value == "" and "(c)" in q4.chosen.value  # no verdict on b left beside the pick c


def _keyless(name, tmp_path, monkeypatch):
    from course_utils.release import keyless

    (tmp_path / f"{name}.toml").write_text(keyless(ROOT / "quizzes" / f"{name}.toml"), encoding="utf-8")
    monkeypatch.setenv("COURSE_QUIZ_DIR", str(tmp_path))
    return load_quiz(name)


def test_the_form_says_it_is_practice_and_in_the_release_that_it_is_not_graded(tmp_path, monkeypatch):
    full = load_quiz("chapter_2_4").show().children[0].value
    assert "Practice" in full and "not collected" in full and "<code>answer()</code>" in full
    quiz = _keyless("chapter_2_4", tmp_path, monkeypatch)
    assert quiz.keyless
    view = quiz.show()
    heading = view.children[0].value
    assert "Not graded here" in heading and "answer cell" in heading and "Practice" not in heading
    q5 = view.controls["q5"]
    assert q5.reveal is None  # no key, nothing to show
    q5.input.value = "2.5"
    assert "Readable: 2.5" in q5.feedback.value and "not collected" in q5.feedback.value


def test_the_widgets_labels_fit():
    view = load_quiz("chapter_2_4").show()
    box = view.controls["q5"].input
    assert len(box.placeholder) <= 26 and box.layout.width == "24em"  # 26 characters of about 0.55 em each
    assert all(c.input.style.description_width == "initial" and c.input.tooltip
               for c in view.controls.values())


def test_open_items_in_widgets_reveal_the_model_answer_only_on_request():
    view = load_quiz("interview").show()
    i2 = view.controls["i2"]
    i2.input.value = "Pre-LN keeps the identity path."
    i2.check.click()
    assert "Recorded" in i2.feedback.value and i2.shown.value == ""
    i2.reveal.click()
    assert "Xiong" in i2.shown.value and "<li>" in i2.shown.value


@pytest.mark.parametrize("name", ALL_QUIZZES)
def test_every_quiz_builds_its_widgets(name):
    quiz = load_quiz(name)
    view = quiz.show()
    assert set(view.controls) == set(quiz.ids) and quiz.title in view.children[0].value
    assert "course-widget" in view._dom_classes  # the page helper keeps JupyterLab's shortcuts off inside it
    assert all(c.feedback.value == "" and c.shown.value == "" and
               (c.reveal.layout.display == "none") == q.scored for q, c in zip(quiz.questions, view.controls.values()))


@pytest.fixture
def ipython_shell():
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    shell = InteractiveShell.instance(config=config)
    yield shell
    InteractiveShell.clear_instance()


def test_in_ipython_the_result_is_the_cells_output_shown_once(ipython_shell, capsys):
    ipython_shell.run_cell('from course_utils.quiz import answer\nanswer("chapter_2_4.q5", 2.5)', store_history=True)
    assert capsys.readouterr().out.count("Correct") == 1


def test_in_ipython_an_answer_written_as_code_gets_a_warning(ipython_shell, capsys):
    ipython_shell.run_cell('from course_utils.quiz import answer\nmu = 2.5\nr = answer("chapter_2_4.q5", mu)',
                           store_history=True)
    ipython_shell.run_cell('s = answer("chapter_2_4.q6", 1.25)', store_history=True)
    assert ipython_shell.user_ns["r"].correct and "without running it" in ipython_shell.user_ns["r"].feedback
    assert "without running it" not in ipython_shell.user_ns["s"].feedback

"""Notebook 07: a filled-in copy gets the expected score from the batch grader and from the kernel, its prompts match
the quiz files, and its figure, model-answer buttons and checkpoint picker work (their latency: course_utils.bench)."""
import csv
import re
import shutil
import subprocess
import sys
from fractions import Fraction

import nbformat
import pytest

from conftest import ROOT
from course_utils.quiz import notebook as quiz_module
from course_utils.demos import review as demo
from course_utils.figures import color
from course_utils.panel import PANELS
from course_utils.quiz import UnknownQuizError, answer, load_quiz, reveal, score_summary

NOTEBOOK = ROOT / "notebooks" / "07_review.ipynb"
QUIZZES = ("chapter_2_4", "07_review", "self_check", "interview")
# The template of an answer cell: `...` for scored items, an empty raw triple-quoted string for open ones.
TEMPLATE = re.compile(r'answer\("(?P<ref>[\w.]+)", (?P<response>\.\.\.|r"""\s*""")\)')
# The setup cell as handed out: no student id, so the chapter's numbers until the learner names themselves.
SETUP = "setup(seed=0, threads=1, student=None)"
# The folder the filled-in copy is graded in: without an id in its setup cell, the grader uses this student's numbers.
LEARNER = "learner"
CALCULATIONS = [f"chapter_2_4.q{i}" for i in range(5, 9)]  # the items with per-student numbers


def scored(student: str | None) -> list:
    """Every scored item of the notebook, with this student's numbers (None: the chapter's)."""
    return [q for name in QUIZZES for q in load_quiz(name).for_student(student).questions if q.scored]


def mixed(student: str) -> dict[str, tuple[str, int]]:
    """A learner's answers as typed into the cells, and the points each should earn: some right, some wrong, in the
    forms learners use (a bracketed letter, a fraction as text, arithmetic, a rounded number, a known mistake), the
    calculations worked out with this student's numbers."""
    chapter = load_quiz("chapter_2_4").for_student(student)
    q5, q6, q7, q8 = (chapter.question(ref.partition(".")[2]) for ref in CALCULATIONS)
    mean = Fraction(q5.answer).limit_denominator(4)  # four whole numbers: a mean in quarters
    assert mean == q5.answer and mean.denominator > 1, f"{student}'s Q5 key {q5.answer} is not a fraction to type"
    (unbiased,) = [m.value for m in q6.mistakes if "unbiased variance" in m.feedback]  # torch.var's default
    blocks = dict(q8.values)
    return {
        "chapter_2_4.q1": ('"b"', 1), "chapter_2_4.q2": ('"a"', 0), "chapter_2_4.q3": ('"(a)"', 1),
        "chapter_2_4.q4": ('"b"', 0), "chapter_2_4.q5": (f'"{mean}"', 1), "chapter_2_4.q6": (f"{unbiased:.4f}", 0),
        "chapter_2_4.q7": (f"{q7.answer:.{q7.decimals}f}", 1),
        "chapter_2_4.q8": (f"{blocks['L']} * {blocks['m']:g}", 1),
        "07_review.q4": ('"c"', 1), "07_review.q3": ("6", 0), "07_review.q5": ('"a"', 0), "07_review.q6": ('"(b)"', 1),
    }


SCORED = scored(None)
MIXED = mixed(LEARNER)
OPEN = {"self_check.s1": 'r"""The residual sum grows with depth, like $\\sqrt{L}$ or $L$."""',
        "interview.i2": '"Post-LN: x = LN(x + F(x)); Pre-LN: x = x + F(LN(x))."'}


def template_cells() -> dict[str, int]:
    """Question reference -> index of its answer cell in the committed notebook."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    found: dict[str, list[int]] = {}
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            for m in TEMPLATE.finditer(cell.source):
                found.setdefault(m["ref"], []).append(i)
    assert all(len(v) == 1 for v in found.values()), {k: v for k, v in found.items() if len(v) > 1}
    return {ref: cells[0] for ref, cells in found.items()}


def filled_copy(path, responses: dict[str, str], student: str | None = None):
    """Write a copy of the notebook with the given responses (Python source) typed into their answer cells, and
    `student` (if given) in its setup cell."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    if student is not None:
        setup = next(c for c in nb.cells if c.cell_type == "code")
        assert SETUP in setup.source
        setup.source = setup.source.replace(SETUP, f'setup(seed=0, threads=1, student="{student}")')
    cells = template_cells()
    for ref, source in responses.items():
        cell = nb.cells[cells[ref]]
        cell.source = TEMPLATE.sub(lambda m: f'answer("{ref}", {source})' if m["ref"] == ref else m[0], cell.source)
    nbformat.write(nb, path)
    return nb


ASSIGNMENT = """title = "Review"
[[notebooks]]
notebook = "07_review"
quizzes = ["chapter_2_4", "07_review", "self_check", "interview"]
"""


def grade(tmp_path, **notebooks):
    """Grade each student's notebook (student name -> path) with the command-line grader, as a class would be.

    Returns the exit code, the gradebook rows by student and the feedback texts by student."""
    folder, out = tmp_path / "class", tmp_path / "grading"
    for student, path in notebooks.items():
        (folder / student).mkdir(parents=True)
        shutil.copy(path, folder / student / "07_review.ipynb")
    (tmp_path / "review.toml").write_text(ASSIGNMENT, encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "course_utils.grade", str(folder), "--assignment",
                           str(tmp_path / "review.toml"), "--out", str(out), "--no-progress"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode in (0, 1), done.stderr
    with open(out / "gradebook.csv", newline="", encoding="utf-8-sig") as f:
        rows = {r["student_id"]: r for r in csv.DictReader(f)}
    feedback = {p.stem: p.read_text(encoding="utf-8") for p in (out / "feedback").glob("*.md")}
    return done.returncode, rows, feedback


@pytest.fixture
def fresh_session(monkeypatch):
    monkeypatch.setattr(quiz_module, "_SESSION", {})


# ------------------------------------------------------------------------------------------------- the answer cells

def test_every_question_has_one_answer_cell_in_template_form():
    expected = {q.ref for name in QUIZZES for q in load_quiz(name).questions}
    assert set(template_cells()) == expected


def test_the_committed_notebook_grades_as_unanswered(tmp_path):
    code, rows, _ = grade(tmp_path, blank=NOTEBOOK)
    row = rows["blank"]
    assert code == 1 and row["total"] == "0" and row["max"] == "12"
    assert row["status"].startswith("chapter_2_4.q1 not answered") and "no answer cell" not in row["status"]


def test_a_filled_in_copy_gets_the_expected_score(tmp_path):
    path = tmp_path / "learner.ipynb"
    filled_copy(path, {**{ref: src for ref, (src, _) in MIXED.items()}, **OPEN})
    code, rows, feedback = grade(tmp_path, **{LEARNER: path})
    row = rows[LEARNER]
    assert code == 0 and row["status"] == "ok"
    assert {q.ref: float(row[q.ref]) for q in SCORED} == {ref: points for ref, (_, points) in MIXED.items()}
    assert float(row["total"]) == 7 and float(row["max"]) == 12
    text = feedback[LEARNER]
    assert "The residual sum grows with depth" in text and "Pre-LN: x = x + F(LN(x))" in text  # open answers kept
    assert "unbiased variance" in text  # the targeted feedback for the known mistake in q6


def test_a_copy_with_every_key_gets_full_marks(tmp_path):
    path = tmp_path / "keys.ipynb"
    filled_copy(path, {q.ref: repr(q.answer) for q in scored("keys")})
    code, rows, _ = grade(tmp_path, keys=path, blank=NOTEBOOK)
    full, empty = rows["keys"], rows["blank"]
    assert full["status"] == "ok"
    assert float(full["total"]) == float(full["max"]) == sum(q.points for q in SCORED) == 12
    assert all(full[q.ref] == "1" for q in SCORED) and empty["total"] == "0"


def _differ(student: str, other: str | None) -> bool:
    """Whether no calculation of `other`'s (None: the chapter's) has a key that is also `student`'s key."""
    mine, theirs = (load_quiz("chapter_2_4").for_student(s) for s in (student, other))
    return not any(mine.question(ref[len("chapter_2_4."):]).is_key(theirs.question(ref[len("chapter_2_4."):]).answer)
                   for ref in CALCULATIONS)


def test_a_setup_cell_naming_someone_else_is_graded_with_the_students_own_numbers(tmp_path):
    assert [q.ref for q in SCORED if q.parameterised] == CALCULATIONS
    assert _differ("other", "keys"), "pick another folder name: 'other' draws one of 'keys''s keys"
    path = tmp_path / "keys.ipynb"
    filled_copy(path, {q.ref: repr(q.answer) for q in scored("keys")}, student="keys")
    code, rows, _ = grade(tmp_path, keys=path, other=path)  # the same copy, handed in by "keys" and by "other"
    own, copied = rows["keys"], rows["other"]
    assert own["status"] == "ok" and float(own["total"]) == 12  # the setup cell names the student who hands it in
    assert "setup(student='keys') names someone else" in copied["status"]
    assert {q.ref: copied[q.ref] for q in SCORED} == {q.ref: "0" if q.ref in CALCULATIONS else "1" for q in SCORED}
    assert float(copied["total"]) == 12 - len(CALCULATIONS)


def test_the_chapters_numbers_score_nothing_for_a_student_with_numbers_of_their_own(tmp_path):
    assert _differ(LEARNER, None), f"pick another folder name: {LEARNER!r} draws one of the chapter's keys"
    path = tmp_path / "chapter.ipynb"
    filled_copy(path, {q.ref: repr(q.answer) for q in SCORED})  # the keys for the chapter's numbers, no student id
    code, rows, feedback = grade(tmp_path, **{LEARNER: path})
    row = rows[LEARNER]
    assert {q.ref: row[q.ref] for q in SCORED} == {q.ref: "0" if q.ref in CALCULATIONS else "1" for q in SCORED}
    assert float(row["total"]) == 12 - len(CALCULATIONS)
    assert "the chapter's example numbers" in feedback[LEARNER]  # the hint that says why


def test_instant_feedback_in_the_kernel_agrees_with_the_grader(tmp_path, fresh_session, monkeypatch):
    monkeypatch.setattr(quiz_module, "_STUDENT", LEARNER)  # as setup(student=LEARNER) would; the grader uses the folder
    path = tmp_path / "learner.ipynb"
    nb = filled_copy(path, {**{ref: src for ref, (src, _) in MIXED.items()}, **OPEN})
    for i in template_cells().values():  # run the filled answer cells, as the learner would
        exec(compile(nb.cells[i].source, f"cell {i}", "exec"), {"answer": answer})
    rows = {r.quiz: r for r in score_summary().rows}
    assert set(rows) == set(QUIZZES)
    for name in ("chapter_2_4", "07_review"):
        assert rows[name].score == sum(p for ref, (_, p) in MIXED.items() if ref.startswith(f"{name}."))
    assert rows["chapter_2_4"].score == 5 and rows["07_review"].score == 2
    assert rows["self_check"].answered == 1 and rows["interview"].answered == 1 and rows["interview"].score is None


# --------------------------------------------------------------------------------------------------- the notebook

def _plain(text: str) -> str:
    return " ".join(text.split())


def test_the_prompts_in_the_notebook_are_the_quiz_files_prompts():
    """The markdown prompts are copied from quizzes/; after editing a quiz file, copy the prompt into the notebook."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    markdown = _plain("\n".join(c.source for c in nb.cells if c.cell_type == "markdown"))
    stale = [q.ref for name in QUIZZES for q in load_quiz(name).questions
             if _plain(q.prompt) not in markdown or any(_plain(c.text) not in markdown for c in q.choices)]
    assert not stale, f"07_review.ipynb shows outdated prompts or choices for {stale}"


def test_the_review_names_the_corrections_and_the_papers():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    markdown = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "Corrections to the chapter" in markdown and "near the **output**" in markdown
    for arxiv in ("1607.06450", "2002.04745", "1910.07467", "2010.04245", "2408.00118", "2503.19786"):
        assert f"arXiv {arxiv}" in markdown
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "score_summary()" in code and 'load_quiz("chapter_2_4").show()' in code


# ---------------------------------------------------------------------------------------------------- the builders

@pytest.mark.parametrize("name", ["self_check", "interview"])
def test_every_model_answer_is_short_enough_to_say_and_has_its_evidence(name):
    """Two layers per open item: a spoken answer of at most 160 words first, then the evidence, folded under it."""
    for q in load_quiz(name).questions:
        assert len(q.model_answer.split()) <= 160, (q.ref, len(q.model_answer.split()))
        assert len(q.evidence.split()) >= 40 and "notebook" in q.evidence.lower(), q.ref
        shown = reveal(q.ref)._repr_html_()
        assert shown.index("<details><summary><b>The evidence</b>") > shown.index("model answer</b>"), q.ref
        assert "The evidence:" in repr(reveal(q.ref))


def test_the_answers_name_the_causal_leak_and_the_debate_and_scope_the_growth():
    """Issue 26: S2 and I1 name the causal leak notebook 02 measured; S1 calls covariate shift debated; the growth
    statement says it depends on the initialization."""
    check, interview = load_quiz("self_check"), load_quiz("interview")
    for q in (check.question("s2"), interview.question("i1")):
        assert "later tokens" in q.model_answer and "C58" in q.evidence, q.ref
    s1 = check.question("s1")
    assert "debated" in s1.model_answer and "Santurkar" in s1.model_answer
    assert "initialization" in s1.model_answer and "C140" in s1.evidence


def test_chain_figure_links_four_chapters_problem_to_solution_to_the_next_problem():
    fig = demo.chain_figure()
    assert fig.layout.title.text and "chain of problems" in fig.layout.title.text
    headers = [a.text for a in fig.layout.annotations if a.text.startswith("<b>Chapter")]
    assert headers == [f"<b>Chapter {c}: {link.idea}</b>" for c, link in zip(("2.1", "2.2", "2.3", "2.4"), demo.CHAIN)]
    assert sum(s.type == "rect" for s in fig.layout.shapes) == 12
    links = [a for a in fig.layout.annotations if a.showarrow and a.arrowcolor == color(3)]
    assert len(links) == 3 and all(a.ax < a.x and a.ay < a.y for a in links)  # leftover -> next chapter's problem
    assert "permutation" in demo.CHAIN[1].problem.lower() and "trainability" in demo.CHAIN[3].problem
    assert any("section 5" in a.text for a in fig.layout.annotations)  # says which summary it draws on
    assert {t.name for t in fig.data if t.showlegend is not False} >= {"the problem", "the chapter's answer"}


def test_reveal_button_shows_the_model_answer_only_on_request():
    box = demo.reveal_button("interview.i2")
    assert box.shown.value == ""
    box.toggle.value = True
    assert "near the output" in box.shown.value and "A strong answer covers" in box.shown.value
    box.toggle.value = False
    assert box.shown.value == "" and box.toggle.description == "Show model answer"
    with pytest.raises(UnknownQuizError):
        demo.reveal_button("self_check.s99")


def test_checkpoint_picker_covers_every_other_checkpoint_and_keeps_each_view(fresh_session):
    assert PANELS["checkpoint_picker"][0] == "07_review"  # so tests/test_panel.py sweeps it
    panel = demo.checkpoint_picker()
    assert demo.checkpoint_names() == [f.stem for f in sorted((ROOT / "quizzes").glob("0*.toml"))
                                       if f.stem != "07_review"]
    panel.set(quiz="03_layernorm")
    view = panel.views["03_layernorm"]
    assert panel.outputs[1].children == (view,)
    panel.set(quiz="05_rmsnorm")
    panel.set(quiz="03_layernorm")
    assert panel.outputs[1].children[0] is view  # kept, with whatever the learner typed
    q = load_quiz("03_layernorm").questions[0]
    view.controls[q.id].input.value = q.answer if q.kind == "choice" else str(q.answer)
    view.controls[q.id].check.click()
    (row,) = score_summary().rows
    assert row.quiz == "03_layernorm" and row.score == q.points  # answers here count in the summary


def test_picker_refuses_an_unknown_quiz_with_a_message():
    panel = demo.checkpoint_picker()
    with pytest.raises(ValueError, match="There is no checkpoint quiz 'nope'. Pick one of"):
        panel.update(quiz="nope")
    panel.values = lambda: {"quiz": "nope"}  # a value the dropdown cannot hold, as if a stale setting came back
    assert panel.refresh() is False and "There is no checkpoint quiz" in panel.message.value


@pytest.mark.parametrize("name", ["chapter_2_4", "self_check", "07_review"])
def test_the_notebooks_quiz_widgets_score_right_answers_and_reveal_model_answers(name, fresh_session):
    quiz = load_quiz(name)
    view = quiz.show()

    def check(q):
        controls = view.controls[q.id]
        controls.input.value = (q.answer if q.kind == "choice" else str(q.answer) if q.kind == "numeric"
                                else "My answer.")
        controls.check.click()

    for q in quiz.questions:
        check(q)
    assert f"{quiz.points:g} / {quiz.points:g}" in view.score.value or quiz.points == 0
    for button in [demo.reveal_button(q.ref) for q in quiz.questions if not q.scored]:
        button.toggle.value = True
        assert button.shown.value, button


# ---- the claim computations of sections 3 and 5 (C28-C34, C88, C89): each test can fail, each has a control -------

def test_quiz_statistics_are_the_chapter_keys_and_what_pytorch_uses():
    import torch
    got = demo.quiz_statistics(torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64),
                               torch.tensor([3.0, 4.0], dtype=torch.float64))
    assert got == pytest.approx({"q5": 2.5, "q6": 1.25, "q7": 12.5 ** 0.5})


def test_the_two_readings_of_q8():
    assert demo.residual_sum("aligned", seed=3) == pytest.approx(20.0, abs=1e-9)
    independent = [demo.residual_sum("independent", seed=s) for s in range(4)]
    assert all(abs(v / (2 * 10 ** 0.5) - 1) < 0.1 for v in independent)
    chapter = load_quiz("chapter_2_4")
    assert chapter.grade("q8", 20).correct
    reading = chapter.grade("q8", "6.32")  # 2√10: the independent reading, told which reading it is
    assert not reading.correct and "independent random" in reading.feedback
    assert "same direction" in chapter.question("q8").prompt  # the course's addition, in the prompt
    with pytest.raises(ValueError, match="aligned"):
        demo.residual_sum("sideways")


def test_each_chain_check_fails_in_its_control():
    diff, control = demo.parallel_vs_sequential(1), demo.parallel_vs_sequential(1, recurrent=False)
    assert diff["attention"] < 1e-5 and diff["rnn"] > 1e-2 and control["rnn"] < 1e-5
    assert demo.order_blindness(1)["distinct"] == 3
    assert demo.order_blindness(1, positions=True)["deviation"] > 1e-3
    assert demo.order_blindness(1, causal=True)["deviation"] > 1e-3
    assert demo.future_leak(1)["past"] < 1e-5 < 1e-2 < demo.future_leak(1, causal=False)["past"]
    start, end = demo.stream_growth("layer", "post", n_layers=3, seed=1)
    assert abs(end - 1) < 0.01 and demo.stream_growth("layer", "pre", n_layers=3, seed=1)[1] > 1.2 * start


def test_the_runaway_growth_belongs_to_the_initialization():
    """C140: GPT-2-style init keeps 12 unnormalized blocks near 1x; the course's Xavier init runs away; bad input."""
    gpt2, course = demo.init_growth("gpt2", seed=1), demo.init_growth("course", seed=1)
    assert demo.stays_near_one(gpt2) and abs(gpt2 - 1) < 0.05
    assert not demo.stays_near_one(course) and course > 50  # control
    assert 1.5 < demo.init_growth("torch", seed=1) < 10  # PyTorch's default: a few-fold
    with pytest.raises(ValueError, match="init must be"):
        demo.init_growth("xavier")


def test_growth_without_a_norm_compounds_and_pre_ln_does_not():
    plain, pre = demo.compounding("none", seed=1), demo.compounding("layer", seed=1)
    assert 1.7 < plain["log_ratio"] < 2.4 and plain["long"] > 50
    assert pre["log_ratio"] < 1.7  # the control: slow growth gives about ln 12 / ln 6, not 2


def test_a_value_that_fits_two_mistakes_names_both_and_ranks_neither():
    """3.5 for RMS(3, 4) is the plain mean and the RMS rounded to one decimal: the learner reads both."""
    feedback = load_quiz("chapter_2_4").grade("q7", 3.5).feedback
    assert "two different slips" in feedback and "rounded to one decimal" in feedback and "plain mean" in feedback
    assert "(1)" in feedback and "(2)" in feedback
    single = load_quiz("chapter_2_4").grade("q7", 12.5).feedback  # the mean of the squares alone: one hint, no list
    assert "mean of the squares" in single and "(1)" not in single


def test_the_chain_checks_leave_the_learners_random_numbers_alone():
    import torch
    torch.manual_seed(5)
    before = torch.get_rng_state()
    demo.parallel_vs_sequential(0)
    demo.order_blindness(0)
    assert torch.equal(torch.get_rng_state(), before)


def test_every_claim_cell_prints_its_robustness_report():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    for cell in nb.cells:
        for tag in cell.metadata.get("tags", []):
            if tag.startswith("claim-"):
                assert f'quote("{tag[6:]}")' in cell.source or "quote(claim)" in cell.source, tag


def test_the_claim_checks_pass_the_notebooks_runs_and_fail_plausible_wrong_ones():
    """Each check the claim cells and their experiments share: passes the real computation, fails a plausible slip."""
    diff = demo.parallel_vs_sequential(2)
    assert all(demo.bottleneck_checks(diff).values())
    assert not all(demo.bottleneck_checks(demo.parallel_vs_sequential(2, recurrent=False)).values())
    assert not all(demo.bottleneck_checks({"attention": 3e-4, "rnn": 0.5}).values())  # attention off by a bug
    assert all(demo.order_checks(demo.order_blindness(2)).values())
    assert not all(demo.order_checks({"deviation": 0.0, "distinct": 6}).values())  # permuted but all distinct
    assert all(demo.causal_checks(demo.future_leak(2)).values())
    assert not all(demo.causal_checks(demo.future_leak(2, causal=False)).values())
    assert demo.near_root_sum(2 * 10 ** 0.5) and not demo.near_root_sum(20.0)
    assert demo.near_root_sum(2 * 40 ** 0.5, n_blocks=40) and not demo.near_root_sum(2 * 10 ** 0.5, n_blocks=40)


def test_the_stream_checks_tell_growth_apart():
    assert demo.runs_away(1.0, 51.0) and not demo.runs_away(1.0, 12.0)  # 12 blocks adding a constant: not a runaway
    assert demo.grows_slowly(1.0, 3.0) and not demo.grows_slowly(1.0, 1.0) and not demo.grows_slowly(1.0, 12.0)
    assert demo.normalized(0.99999) and not demo.normalized(3.0)
    assert all(demo.depth_checks((1.0, 300.0), (1.0, 3.0)).values())
    assert not all(demo.depth_checks((1.0, 300.0), (1.0, 300.0)).values())  # Pre-LN running away too fails
    assert demo.compounds({"log_ratio": 2.0}) and not demo.compounds({"log_ratio": 1.39})  # like L: not compounding
    shape = dict(d_model=16, activation="gelu", seed=1)
    assert demo.runs_away(*demo.stream_growth("none", "pre", **shape))
    assert demo.grows_slowly(*demo.stream_growth("layer", "pre", **shape))


def test_the_key_checks_catch_a_wrong_key():
    import torch
    computed = demo.quiz_statistics(torch.tensor(demo.CHAPTER_X, dtype=torch.float64),
                                    torch.tensor(demo.CHAPTER_Y, dtype=torch.float64))
    computed["q8"] = demo.residual_sum("aligned")
    assert all(demo.key_checks(computed).values())
    unbiased = {**computed, "q6": 5 / 3}  # torch.var's default, d - 1
    assert not all(demo.key_checks(unbiased).values())
    assert not all(demo.key_checks({**computed, "q8": demo.residual_sum("independent")}).values())

"""Every question a notebook hands out has one answer cell the batch grader can read, under a copy of its prompt, and
every notebook carries the stamp that tells the grader which notebook a renamed file is, and only cells the student
release drops read the keys."""
import ast
import json
import re

import nbformat
import pytest

from conftest import ROOT
from course_utils.quiz import load_quiz
from course_utils.release import INSTRUCTOR_TAG, student_notebook

# Which quizzes each notebook hands out. Notebook 07 holds the chapter's quiz, its own checkpoint and the open items.
QUIZZES = {
    "00_start_here": ("00_start_here",),
    "01_why_normalize": ("01_why_normalize",),
    "02_batchnorm_and_padding": ("02_batchnorm_and_padding",),
    "03_layernorm": ("03_layernorm",),
    "04_pre_vs_post_ln": ("04_pre_vs_post_ln",),
    "05_rmsnorm": ("05_rmsnorm",),
    "06_qk_norm_and_softcapping": ("06_qk_norm_and_softcapping",),
    "07_review": ("chapter_2_4", "07_review", "self_check", "interview"),
    "08_real_model": ("08_real_model",),
}
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
# The comment an answer cell carries, so the learner knows what form of answer is read.
HINT = {"choice": '  # your answer: the letter of one choice, in quotes, e.g. "a"',
        "numeric": '  # your answer: a number, e.g. 0.5 or "7/8"'}
# Reading a key: an item's `.answer`, `is_key(...)`, or grade() on a loaded quiz. The answer("<ref>", ...) call is not.
READS_KEY = re.compile(r"\.answer\b|\bis_key\(|\.grade\(")


def _plain(text: str) -> str:
    return " ".join(text.split())


def _questions(stem: str) -> dict:
    """Question reference -> Question, for every quiz the notebook hands out, in quiz and file order."""
    return {q.ref: q for name in QUIZZES[stem] for q in load_quiz(name).questions}


def _answer_calls(source: str) -> list[ast.Call]:
    """The answer("<ref>", <response>) calls in one code cell, read as the grader reads them: without running it."""
    if "answer" not in source:
        return []
    tree = ast.parse(source)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
             and n.func.id == "answer" and n.args and isinstance(n.args[0], ast.Constant)
             and isinstance(n.args[0].value, str)]
    return sorted(calls, key=lambda n: (n.lineno, n.col_offset))


def _answer_cells(nb) -> dict[str, list[int]]:
    """Question reference -> indices of the code cells that answer it."""
    found: dict[str, list[int]] = {}
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            for call in _answer_calls(cell.source):
                found.setdefault(call.args[0].value, []).append(i)
    return found


def _is_template(call: ast.Call, kind: str) -> bool:
    """Unanswered as handed out: `...` for a scored item, an empty string for an open one."""
    if len(call.args) != 2 or call.keywords or not isinstance(call.args[1], ast.Constant):
        return False
    response = call.args[1].value
    return response is Ellipsis if kind != "open" else isinstance(response, str) and not response.strip()


def test_the_map_covers_every_notebook():
    assert sorted(QUIZZES) == [p.stem for p in NOTEBOOKS]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_carries_its_course_stamp(path):
    nb = nbformat.read(path, as_version=4)
    assert nb.metadata.get("course", {}).get("notebook") == path.stem, (
        f'{path.name}: metadata must hold "course": {{"notebook": "{path.stem}"}}')


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_question_has_exactly_one_answer_cell(path):
    nb = nbformat.read(path, as_version=4)
    found, questions = _answer_cells(nb), _questions(path.stem)
    missing = [ref for ref in questions if ref not in found]
    repeated = {ref: cells for ref, cells in found.items() if len(cells) > 1}
    assert not missing, f"{path.name}: no answer cell for {missing}"
    assert not repeated, f"{path.name}: more than one answer cell for {repeated}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_answer_cell_names_a_question_the_notebook_does_not_hand_out(path):
    nb = nbformat.read(path, as_version=4)
    questions = _questions(path.stem)
    elsewhere = {ref for stem in QUIZZES if stem != path.stem for ref in _questions(stem)}
    stray = [ref for ref in _answer_cells(nb) if ref not in questions]
    assert not [r for r in stray if r in elsewhere], (
        f"{path.name}: answer cells for another notebook's questions: {[r for r in stray if r in elsewhere]}")
    assert not stray, f"{path.name}: answer cells for questions no notebook hands out: {stray}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_answer_cells_are_unanswered_templates_in_quiz_order(path):
    nb = nbformat.read(path, as_version=4)
    found, questions = _answer_cells(nb), _questions(path.stem)
    for ref, q in questions.items():
        (i,) = found[ref]
        (call,) = [c for c in _answer_calls(nb.cells[i].source) if c.args[0].value == ref]
        assert _is_template(call, q.kind), f"{path.name}: cell {i} is not handed out unanswered: {ref}"
        if q.kind in HINT:
            line = f'answer("{ref}", ...){HINT[q.kind]}'
            assert line in nb.cells[i].source.splitlines(), f"{path.name}: cell {i} should read {line!r}"
    for name in QUIZZES[path.stem]:
        order = [found[q.ref][0] for q in load_quiz(name).questions]
        assert order == sorted(order), f"{path.name}: the answer cells of {name} are not in the quiz file's order"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_each_answer_cell_follows_its_question_text(path):
    """The markdown cell above an answer cell copies the prompt and choices from quizzes/; after editing a quiz file,
    copy the new text into the notebook."""
    nb = nbformat.read(path, as_version=4)
    found = _answer_cells(nb)
    stale = []
    for ref, q in _questions(path.stem).items():
        (i,) = found[ref]
        above = next((c for c in reversed(nb.cells[:i]) if c.cell_type == "markdown"), None)
        text = _plain(above.source) if above else ""
        if _plain(q.prompt) not in text or any(_plain(c.text) not in text for c in q.choices):
            stale.append(ref)
    assert not stale, f"{path.name}: the question text above these answer cells differs from quizzes/: {stale}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_quiz_widgets_come_after_the_answer_cells(path):
    """The widget is a practice form; the answer cells, which the grader collects, come first."""
    nb = nbformat.read(path, as_version=4)
    found = _answer_cells(nb)
    for name in QUIZZES[path.stem]:
        shows = f'load_quiz("{name}").show()'
        widgets = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and shows in c.source]
        last_answer = max(found[q.ref][0] for q in load_quiz(name).questions)
        assert all(i > last_answer for i in widgets), f"{path.name}: the {name} widget comes before its answer cells"


@pytest.mark.parametrize("source, reads", [
    ('q = chapter.question("q5")\nprint(q.answer)', True), ('assert q.is_key(value)', True),
    ('slip = chapter.grade("q6", 1.6667)', True), ('answer("chapter_2_4.q5", 2.5)', False),
    ("from course_utils.quiz import answer, load_quiz", False), ('load_quiz("chapter_2_4").show()', False),
])
def test_the_key_reader_check_tells_key_reads_from_answer_cells(source, reads):
    assert bool(READS_KEY.search(source)) == reads


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_only_instructor_cells_read_the_keys(path):
    """The student release drops the cells tagged `instructor` and carries no keys, so a code cell that reads one
    must be tagged. An instructor cell is code, or the markdown that introduces the instructor code cell right after
    it; never an answer cell, which the release must keep."""
    cells = nbformat.read(path, as_version=4).cells
    tagged = [i for i, c in enumerate(cells) if INSTRUCTOR_TAG in c.metadata.get("tags", [])]
    for i in tagged:
        cell = cells[i]
        if cell.cell_type == "markdown":
            assert i + 1 in tagged and cells[i + 1].cell_type == "code", (
                f"{path.name}: cell {i} is instructor markdown without an instructor code cell after it")
        else:
            assert cell.cell_type == "code", f"{path.name}: cell {i} is a {cell.cell_type} cell tagged instructor"
            assert not _answer_calls(cell.source), f"{path.name}: cell {i} is an answer cell tagged instructor"
    readers = [i for i, c in enumerate(cells)
               if c.cell_type == "code" and i not in tagged and READS_KEY.search(c.source)]
    assert not readers, f"{path.name}: code cells {readers} read quiz keys; tag them {INSTRUCTOR_TAG!r}"
    _, _, flagged = student_notebook(json.loads(path.read_text(encoding="utf-8")))
    assert not flagged, f"{path.name}: the release reports cells {flagged} (of its copy) reading quiz keys"

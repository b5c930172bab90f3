"""Build first, then see: in the notebooks listed here, every exercise (a code cell tagged `exercise`, a stub that
raises NotImplementedError) comes before any cell that shows its answer, its checker runs right after it, and the worked
answer (tagged `solution`) follows, folded (`jupyter.source_hidden`). The reading table in the README is the one
`python -m course_utils.reading` computes."""
import ast
import re

import nbformat
import pytest

from conftest import ROOT
from course_utils import reading

BUILD_FIRST = ["00_start_here", "01_why_normalize", "02_batchnorm_and_padding", "03_layernorm",
               "04_pre_vs_post_ln", "05_rmsnorm", "06_qk_norm_and_softcapping", "07_review", "08_real_model"]
WITH_EXERCISES = [nb for nb in BUILD_FIRST if nb not in ("00_start_here", "07_review")]
MAIN_LINE_WORDS = 3_600  # 24 minutes of prose at reading.WORDS_PER_MINUTE; with the cells' runs, a 20-30 minute path


def _cells(nb_id):
    return nbformat.read(ROOT / "notebooks" / f"{nb_id}.ipynb", as_version=4).cells


def _defined(source: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:  # an answer cell's `...` template parses; a magic would not
        return set()
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}


def _taught(name: str) -> str:
    return name[3:] if name.startswith("my_") else name


def _tags(cell) -> list[str]:
    return cell.metadata.get("tags", [])


@pytest.mark.parametrize("nb_id", WITH_EXERCISES)
def test_the_notebook_has_exercises(nb_id):
    assert any("exercise" in _tags(c) for c in _cells(nb_id)), f"{nb_id}: no cell tagged exercise"


@pytest.mark.parametrize("nb_id", BUILD_FIRST)
def test_each_exercise_comes_before_its_answer_and_is_checked_at_once(nb_id):
    cells = _cells(nb_id)
    for i, cell in enumerate(cells):
        if "exercise" not in _tags(cell):
            continue
        stubs = _defined(cell.source)
        assert stubs and "NotImplementedError" in cell.source, f"{nb_id} cell {i}: an exercise is a stub to fill in"
        taught = {_taught(s) for s in stubs}
        for j, earlier in enumerate(cells[:i]):
            if earlier.cell_type == "code":
                shown = {_taught(d) for d in _defined(earlier.source)} & taught
                assert not shown, f"{nb_id}: cell {j} defines {shown} before the exercise in cell {i} asks for it"
        after = [c for c in cells[i + 1:i + 4] if c.cell_type == "code"]
        assert after and any(re.search(r"\bcheck_\w+\(", c.source) for c in after), (
            f"{nb_id} cell {i}: no checker runs right after the exercise")


@pytest.mark.parametrize("nb_id", BUILD_FIRST)
def test_worked_answers_are_folded_and_follow_an_exercise(nb_id):
    cells = _cells(nb_id)
    seen_exercise = set()
    for i, cell in enumerate(cells):
        if "exercise" in _tags(cell):
            seen_exercise |= {_taught(s) for s in _defined(cell.source)}
        if "solution" in _tags(cell):
            assert cell.metadata.get("jupyter", {}).get("source_hidden"), f"{nb_id} cell {i}: a worked answer is folded"
            assert {_taught(d) for d in _defined(cell.source)} & seen_exercise, (
                f"{nb_id} cell {i}: a worked answer follows the exercise it answers")


@pytest.mark.parametrize("nb_id", BUILD_FIRST)
def test_the_main_line_is_a_20_to_30_minute_path(nb_id):
    r = reading.reading(ROOT / "notebooks" / f"{nb_id}.ipynb")
    assert r.main_words <= MAIN_LINE_WORDS, (
        f"{nb_id}: {r.main_words:,} words on the main line ({r.minutes:.0f} min of prose); fold evidence and "
        f"deep-dives (a collapsed heading or <details>) until it is at most {MAIN_LINE_WORDS:,}")


def test_the_fold_rules_count_what_they_say(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Title\n\nOne two three."),
                nbformat.v4.new_markdown_cell("Four $x^2 + y$ five.\n\n<details><summary>Why</summary>\n\nsix seven"
                                              "\n\n</details>"),
                nbformat.v4.new_markdown_cell("## Deep-dive (optional)\n\neight", metadata={reading.COLLAPSED: True}),
                nbformat.v4.new_markdown_cell("nine ten"), nbformat.v4.new_code_cell("x = 1"),
                nbformat.v4.new_code_cell("y = 2", metadata={"jupyter": {"source_hidden": True}}),
                nbformat.v4.new_markdown_cell("## Back on the main line\n\neleven")]
    path = tmp_path / "99_t.ipynb"
    nbformat.write(nb, path)
    r = reading.reading(path)
    # main (16): Title, One two three, Four, the math, five, Deep-dive optional eight (the heading is shown), Back on the
    # main line eleven; folded (5): Why six seven, nine ten
    assert (r.main_words, r.folded_words, r.main_code_cells, r.folded_code_cells) == (16, 5, 0, 2)


def test_the_readme_shows_the_reading_table_as_measured():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert reading.table(markdown=True) in readme, (
        "README's reading-length table is stale: paste `python -m course_utils.reading --readme`")

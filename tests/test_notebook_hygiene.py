"""Notebooks are committed clean (no outputs, no execution counts, a python3 kernel) and keep the house skeleton."""
import json

import nbformat
import pytest

from conftest import ROOT

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
SKELETON = ["What you will learn", "Prerequisites", "Run time", "Summary", "What comes next"]


def test_there_are_notebooks():
    assert (ROOT / "notebooks" / "00_start_here.ipynb") in NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_committed_clean(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    dirty = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and (c.outputs or c.execution_count)]
    assert not dirty, f"{path.name}: cells {dirty} have outputs or execution counts; clear them before committing"
    spec = nb.metadata.get("kernelspec", {})
    assert spec.get("name") == "python3" and spec.get("language") == "python", f"{path.name}: kernelspec {spec}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_follows_the_house_skeleton(path):
    nb = nbformat.read(path, as_version=4)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# "), "first cell: an H1 title"
    missing = [s for s in SKELETON if s not in text]
    assert not missing, f"{path.name} lacks {missing}"
    first_code = next(c for c in nb.cells if c.cell_type == "code")
    assert "setup(" in first_code.source, f"{path.name}: the first code cell must call course_utils.setup(seed=...)"
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "load_quiz(" in code, f"{path.name}: no checkpoint quiz"


def test_clean_check_catches_a_dirty_notebook(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1", execution_count=3)])
    nb.metadata["kernelspec"] = {"name": "python3", "language": "python", "display_name": "Python 3"}
    path = tmp_path / "dirty.ipynb"
    path.write_text(json.dumps(nb))
    with pytest.raises(AssertionError, match="outputs or execution counts"):
        test_notebook_is_committed_clean(path)

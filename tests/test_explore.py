"""Explore, then continue: every notebook run top to bottom with a learner's exploring after each cell
(course_utils.explore: every control moved across its range and left at the far end, Train pressed at those settings,
pressed twice, stopped), on PyTorch's portable kernels (ATEN_CPU_CAPABILITY=default, what a CPU without AVX-512 or an
ARM laptop runs). Every later cell must still run and still prove what it says."""
import nbformat
import pytest

from conftest import ROOT
from course_utils.panel import PANELS
from course_utils.robustness import load_experiments

load_experiments()  # imports every demos module, so PANELS knows every notebook's panels

NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
CELL_TIMEOUT = 900  # a cell of 04 trains for minutes on a loaded 2-core machine; a hang still ends
PORTABLE = {"ATEN_CPU_CAPABILITY": "default"}
EXPLORE = ("from course_utils.explore import explore as _explore\n"
           "for _line in _explore():\n"
           "    print('explored:', _line)")


def explored(path):
    """The notebook with an exploring cell after each of its code cells (the explorer finds the panels built)."""
    nb = nbformat.read(path, as_version=4)
    cells = []
    for cell in nb.cells:
        cells.append(cell)
        if cell.cell_type == "code":
            cells.append(nbformat.v4.new_code_cell(EXPLORE, metadata={"tags": ["explore"]}))
    nb.cells = cells
    return nb


def test_an_exploring_cell_follows_every_code_cell():
    nb = explored(NOTEBOOKS[0])
    original = nbformat.read(NOTEBOOKS[0], as_version=4)
    codes = sum(c.cell_type == "code" for c in original.cells)
    assert sum("explore" in c.metadata.get("tags", []) for c in nb.cells) == codes
    for before, after in zip(nb.cells, nb.cells[1:]):
        if before.cell_type == "code" and "explore" not in before.metadata.get("tags", []):
            assert "explore" in after.metadata.get("tags", [])


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_notebook_still_proves_its_claims_after_a_learner_explores(path, monkeypatch):
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    for name, value in PORTABLE.items():
        monkeypatch.setenv(name, value)  # the kernel inherits it: set before torch loads there
    nb = explored(path)
    client = NotebookClient(nb, timeout=CELL_TIMEOUT, resources={"metadata": {"path": str(path.parent)}},
                            store_widget_state=False, kernel_name="python3")
    try:
        client.execute()
    except CellExecutionError as exc:
        explored_lines = [o.get("text", "") for c in nb.cells if "explore" in c.metadata.get("tags", [])
                          for o in c.get("outputs", []) if o.get("output_type") == "stream"]
        pytest.fail(f"{path.name} failed after a learner explored its panels:\n{exc}\n\nwhat was explored before "
                    f"it:\n{''.join(explored_lines)[-3000:]}", pytrace=False)
    moved = [o.get("text", "") for c in nb.cells if "explore" in c.metadata.get("tags", [])
             for o in c.get("outputs", []) if o.get("output_type") == "stream"]
    if any(notebook == path.stem for notebook, _factory in PANELS.values()):
        assert moved, f"{path.name} has registered panels, but the explorer found none to explore"

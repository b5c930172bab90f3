"""Lecture mode: every notebook carries slide metadata and builds into an offline reveal.js deck
(python -m course_utils.deck, nbconvert's SlidesExporter underneath; tests/test_deck.py runs one in the browser)."""
import nbformat
import pytest

from conftest import ROOT
from course_utils import deck
from course_utils.slides import apply_slide_metadata, slide_type_for

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_cell_has_slide_metadata_by_the_rules(path):
    nb = nbformat.read(path, as_version=4)
    missing = [i for i, c in enumerate(nb.cells) if "slide_type" not in c.metadata.get("slideshow", {})]
    assert not missing, f"{path.name}: cells {missing[:5]} lack slide metadata; run python -m course_utils.slides"
    assert apply_slide_metadata(nb) == 0, f"{path.name}: run python -m course_utils.slides {path}"
    assert nb.cells[0].metadata["slideshow"]["slide_type"] == "slide"


@pytest.fixture(scope="module")
def decks(tmp_path_factory):
    """Every notebook's deck from its committed cells (no outputs, so no run), by one command."""
    folder = tmp_path_factory.mktemp("slides")
    assert deck.main([*map(str, NOTEBOOKS), "--out", str(folder), "--no-execute"]) == 0
    return folder


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_nbconvert_builds_the_deck(path, decks):
    html = (decks / f"{path.stem}.slides.html").read_text(encoding="utf-8")
    n_slides = sum(slide_type_for(c) == "slide" for c in nbformat.read(path, as_version=4).cells)
    assert html.count("<section") >= n_slides >= 3
    assert "Reveal.initialize" in html and "unpkg.com/reveal" not in html


def test_rules_keep_hand_made_choices():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Title"),
                                         nbformat.v4.new_code_cell("x = 1", metadata={"slideshow": {"slide_type":
                                                                                                   "skip"}}),
                                         nbformat.v4.new_markdown_cell("### Detail")])
    assert apply_slide_metadata(nb) == 2
    assert [c.metadata["slideshow"]["slide_type"] for c in nb.cells] == ["slide", "skip", "subslide"]

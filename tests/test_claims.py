"""The claims ledger: every claim CLAIMS.md lists is tested by a tagged notebook cell that asserts it, and every
tagged claim cell is in the ledger."""
import re

import nbformat
import pytest

from conftest import ROOT
from course_utils.robustness import ledger_rows

VERDICTS = {"holds", "holds with a caveat", "does not hold here"}


def _ledger():
    return [(r.claim, r.text, r.notebook, r.verdict, r.measured) for r in ledger_rows()]


def _tagged_cells():
    cells = {}
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for i, cell in enumerate(nbformat.read(path, as_version=4).cells):
            for tag in cell.metadata.get("tags", []):
                if tag.startswith("claim-"):
                    cells.setdefault(tag[len("claim-"):], []).append((path.stem, i, cell))
    return cells


def test_the_ledger_has_claims():
    rows = _ledger()
    assert len(rows) >= 15
    assert len({r[0] for r in rows}) == len(rows), "claim ids must be unique"


@pytest.mark.parametrize("cid, claim, notebook, verdict, figure", _ledger(), ids=lambda v: v if
                         isinstance(v, str) and re.fullmatch(r"C\d\d", v) else "")
def test_each_claim_is_asserted_in_the_cell_the_ledger_names(cid, claim, notebook, verdict, figure):
    assert verdict in VERDICTS, f"{cid}: verdict {verdict!r} must be one of {sorted(VERDICTS)}"
    assert claim and figure, f"{cid}: the claim and the measured figure must be filled in"
    places = _tagged_cells().get(cid, [])
    assert len(places) == 1, f"{cid}: expected one cell tagged claim-{cid}, found {places}"
    where, index, cell = places[0]
    assert where == notebook, f"{cid}: the ledger names {notebook}, the tagged cell is in {where}"
    assert cell.cell_type == "code" and re.search(r"\bassert\b|assert_close", cell.source), \
        f"{cid}: cell {index} of {notebook} must assert the claim"


def test_every_tagged_claim_cell_is_in_the_ledger():
    listed = {r[0] for r in _ledger()}
    orphans = sorted(set(_tagged_cells()) - listed)
    assert not orphans, f"cells tagged for claims missing from CLAIMS.md: {orphans}"

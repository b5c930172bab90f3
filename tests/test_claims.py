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
                         isinstance(v, str) and re.fullmatch(r"C\d{2,3}", v) else "")
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


def _names_used(source: str) -> set[str]:
    """Every name and attribute a cell's code uses (`demo.drift_checks(...)` gives demo and drift_checks)."""
    import ast

    tree = ast.parse(source)
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | \
        {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}


def _one_source_cases():
    from course_utils.robustness import load_experiments
    experiments = load_experiments()
    cells = _tagged_cells()
    return [(cid, experiments[cid], cells[cid][0]) for cid in sorted(experiments) if len(cells.get(cid, [])) == 1]


def _judges(fn) -> bool:
    """Does a function compare anything (a check, a verdict), rather than only compute?"""
    import ast
    import inspect
    import textwrap

    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return False
    return any(isinstance(n, ast.Compare) for n in ast.walk(tree))


def _asserted_numbers(source: str) -> set[float]:
    """The numbers a cell's assert statements compare against (0 and 1 aside)."""
    import ast

    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assert):
            for n in ast.walk(node.test):
                if isinstance(n, ast.Constant) and isinstance(n.value, (int, float)) and not isinstance(n.value, bool):
                    found.add(float(n.value))
    return found - {0.0, 1.0}


def _experiment_numbers(experiment) -> set[float]:
    """The numbers the experiment's own code and its module's constants compare against."""
    import ast
    import inspect
    import sys
    import textwrap

    module = sys.modules[experiment.function.__module__]
    found = {float(v) for k, v in vars(module).items() if k.isupper() and isinstance(v, (int, float))
             and not isinstance(v, bool)}
    tree = ast.parse(textwrap.dedent(inspect.getsource(experiment.function)))
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            found |= {float(n.value) for n in ast.walk(node) if isinstance(n, ast.Constant)
                      and isinstance(n.value, (int, float)) and not isinstance(n.value, bool)}
    return found - {0.0, 1.0}


@pytest.mark.parametrize("cid, experiment, place", _one_source_cases(), ids=lambda v: v if isinstance(v, str) else "")
def test_each_claim_cell_and_its_experiment_share_one_source(cid, experiment, place):
    """The claim cell calls the registered experiment, or a judging function of its notebook's demos module that the
    experiment also reaches (evidence.reached), and types none of the experiment's thresholds again: each is written
    once."""
    import sys

    from course_utils import evidence as ev

    notebook, index, cell = place
    module = experiment.function.__module__
    shared = {name.rsplit(".", 1)[-1] for name in ev.reached(experiment)
              if name.startswith(module + ".") and "." not in name[len(module) + 1:]}
    judging = {n for n in shared if _judges(getattr(sys.modules[module], n, None))} | {experiment.function.__name__}
    used = _names_used(cell.source) & judging
    assert used, (f"{cid}: the claim cell ({notebook}, cell {index}) calls no check that its experiment "
                  f"{experiment.function.__name__} also runs (of {sorted(judging)}): the claim is judged twice")
    twice = _asserted_numbers(cell.source) & _experiment_numbers(experiment)
    assert not twice, (f"{cid}: the claim cell ({notebook}, cell {index}) types the threshold(s) {sorted(twice)} "
                       f"that {module} also holds: use the module's constant or its check")

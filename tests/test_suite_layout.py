"""The suite's own layout: each notebook executed once (by the browser test where it runs, else by nbval), and a slow
list that names real tests."""
import os
import re
import subprocess
import sys

import pytest

from conftest import NO_BROWSER, ROOT, SLOW, SLOW_FIXTURES, browser_missing

NOTEBOOK = "notebooks/00_start_here.ipynb"
BROWSER_ITEM = "tests/test_browser.py::test_notebook_in_a_real_browser[00_start_here]"


def _collect(*args: str, no_browser: bool = False) -> list[str]:
    """What `pytest --collect-only -q` lists, the report lines included, in a fresh process."""
    env = {k: v for k, v in os.environ.items() if k != NO_BROWSER}
    if no_browser:
        env[NO_BROWSER] = "1"
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout.splitlines()


def _nbval_items(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith(f"{NOTEBOOK}::")]


@pytest.mark.parametrize("args, no_browser", [(("tests/test_browser.py", NOTEBOOK), True),
                                              (("tests/test_browser.py", NOTEBOOK, "-m", "not browser"), False)],
                         ids=["no-browser", "browser-deselected"])
def test_nbval_executes_the_notebooks_when_the_browser_test_does_not_run(args, no_browser):
    lines = _collect(*args, no_browser=no_browser)
    assert BROWSER_ITEM not in lines and _nbval_items(lines), lines
    assert any(line.startswith("notebooks executed by: nbval (1;") for line in lines), lines


@pytest.mark.skipif(bool(browser_missing()), reason=f"no browser test here: {browser_missing()}")
def test_the_browser_test_alone_executes_the_notebooks_where_it_runs():
    lines = _collect("tests/test_browser.py", NOTEBOOK)
    assert BROWSER_ITEM in lines and not _nbval_items(lines), lines
    assert "notebooks executed by: browser test (9; nbval's run of them deselected)" in lines


def test_pytest_on_the_notebooks_folder_runs_nbval():
    assert _nbval_items(_collect(NOTEBOOK))


def test_the_slow_lists_name_tests_and_fixtures_that_exist():
    for entry in SLOW | SLOW_FIXTURES:
        file, name = entry.split("::")
        source = (ROOT / "tests" / file).read_text(encoding="utf-8")
        assert re.search(rf"^def {re.escape(name.split('[')[0])}\(", source, re.M), f"tests/conftest.py names {entry}"

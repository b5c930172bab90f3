"""Shared test settings: course_utils.setup() for the run, a reseed per test, repository paths, the markers, and
which runner executes the notebooks (the browser test where it runs, else nbval; never both)."""
import importlib.util
import os
import shutil
from pathlib import Path

import pytest
import torch

import course_utils

ROOT = Path(__file__).resolve().parent.parent
TOL = {torch.float32: 1e-5, torch.float64: 1e-10}
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
NO_BROWSER = "COURSE_NO_BROWSER"  # set (to anything) to leave the notebooks to nbval on a machine with chromium
BROWSER_TEST = "test_browser.py"
# Unit tests that take over ~1.5 s each on the 2-core course machine (pytest --durations): left out of the fast loop,
# `pytest -n 2 -m "not browser and not notebooks and not slow"`. A file name with a test name covers all parameters.
SLOW = {
    "test_deck.py::test_a_run_ends_with_snapshots_of_what_the_widgets_show_then",  # starts a kernel, 2-12 s
    "test_deck.py::test_a_failing_cell_is_named_with_its_error",  # starts a kernel, 2-12 s
    "test_grading_walk.py::test_the_readme_grading_walk_prints_what_it_shows",  # every grading command, ~10 s
    "test_panel.py::test_every_registered_panel_refreshes_over_its_whole_sweep[init_panel]",  # measures 24 models
    "test_release.py::test_force_replaces_the_release_and_keeps_other_files",  # a second whole release, ~6 s
    "test_release.py::test_students_draw_the_numbers_the_grader_expects",  # 2,000 students' draws, ~4 s
    "test_slides.py::test_nbconvert_builds_the_deck",  # one nbconvert run for the nine decks, ~10 s
    # a fresh pytest process each (nbval, playwright and torch imported: ~6 s of CPU)
    "test_suite_layout.py::test_nbval_executes_the_notebooks_when_the_browser_test_does_not_run",
    "test_suite_layout.py::test_the_browser_test_alone_executes_the_notebooks_where_it_runs",
    "test_suite_layout.py::test_pytest_on_the_notebooks_folder_runs_nbval",
    # hostile input at full size: 10 MB files, zip bombs, a whole hostile class (bounded time is the point)
    "test_source.py::test_ten_megabytes_of_any_json_cost_bounded_memory_and_time",
    "test_source.py::test_many_answer_cells_stop_at_the_budget",
    "test_grade_hostile.py::test_a_zip_bomb_is_not_inflated",
    "test_grade_hostile.py::test_a_whole_hostile_class_finishes_quickly",
    "test_grade_hostile.py::test_each_hostile_kind_is_reported_in_its_row_and_the_class_is_graded_right",  # 15 kinds
    "test_demo_class.py::test_filled_notebooks_are_nbformat_4",  # nbformat's schema validation, every notebook
    "test_demo_class.py::test_the_grading_benchmark_runs_on_a_small_class",  # the benchmark script, a subprocess
    "test_packaging.py::test_a_plain_wheel_carries_the_quizzes_and_data_as_package_data",  # builds a wheel
    "test_panel.py::test_every_registered_panel_refreshes_over_its_whole_sweep[intervention_panel]",  # MiniLM
    "test_evidence.py::test_seed_zero_reproduces_its_report",  # one run of every claim experiment, trainings too
    "test_evidence.py::test_seed_zero_reproduces_its_report_on_portable_kernels",  # all of them again, a subprocess
    "test_explore.py::test_the_notebook_still_proves_its_claims_after_a_learner_explores",  # a whole notebook each
}
# Module fixtures that cost over ~3 s once: every test of that file that uses one is slow with it.
SLOW_FIXTURES = {
    "test_release.py::out",  # the whole student release, ~7 s (every quiz's per-student grid masks)
    "test_minilm.py::base",  # MiniLM loaded and run on the sentence pairs, ~4 s
    "test_demos_real_model.py::base",  # the same (cached when test_minilm.py ran first)
    "test_params.py::students",  # 2,000 students' numbers drawn and graded, ~3 s
}


def browser_missing() -> str | None:
    """Why the browser test cannot run here, or None when it can."""
    if os.environ.get(NO_BROWSER):
        return f"${NO_BROWSER} is set"
    if not Path(CHROMIUM).exists():
        return ("Chromium is not installed. Install it with `sudo apt-get install -y chromium` (Debian/Ubuntu); "
                ".ci/run does this on CI")
    if importlib.util.find_spec("playwright") is None:
        return "playwright is not installed: pip install -e '.[test]' brings it"
    return None


@pytest.fixture(autouse=True, scope="session")
def _course_setup():
    """The notebooks' own first call, for the whole run: seeds, one torch thread, no student id (the chapter's
    numbers; the quiz tests set their own student where they need one)."""
    course_utils.setup()


@pytest.fixture(autouse=True)
def _seed():
    """Each test starts from the same torch seed, whatever ran before it."""
    torch.manual_seed(0)


def _notebook(item) -> str | None:
    """The notebook an item executes, by stem: an nbval cell's file, or the browser test's parameter."""
    if item.path.suffix == ".ipynb":
        return item.path.stem
    if item.path.name == BROWSER_TEST and hasattr(item, "callspec"):
        return item.callspec.params["path"].stem
    return None


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config, items):
    """Mark every item before -m and -k select; then a notebook whose browser test is still selected is not also
    executed by nbval (the browser test runs every cell too, and fails on the same errors and timeouts)."""
    for item in items:
        if item.path.name == BROWSER_TEST:
            item.add_marker(pytest.mark.browser)
        elif item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.notebooks)
        elif {f"{item.path.name}::{name}" for name in (item.name, getattr(item, "originalname", item.name),
                                                        *getattr(item, "fixturenames", ()))} & (SLOW | SLOW_FIXTURES):
            item.add_marker(pytest.mark.slow)
    yield
    in_browser = {_notebook(item) for item in items if item.path.name == BROWSER_TEST}
    twice = [item for item in items if item.path.suffix == ".ipynb" and item.path.stem in in_browser]
    if twice:
        config.hook.pytest_deselected(items=twice)
        items[:] = [item for item in items if not (item.path.suffix == ".ipynb" and item.path.stem in in_browser)]


def pytest_report_header(config):
    """Which CPU kernels PyTorch runs here (the explore test and the portable seed-0 rerun also run the portable ones)."""
    return f"torch {torch.__version__}, CPU kernels: {torch.backends.cpu.get_cpu_capability()}"


def pytest_report_collectionfinish(config, items):
    """One line saying which runner executes the notebooks in this run (shown after collection, also with -q)."""
    browser = sorted({_notebook(item) for item in items if item.path.name == BROWSER_TEST})
    nbval = sorted({item.path.stem for item in items if item.path.suffix == ".ipynb"})
    if not browser and not nbval:
        return None
    if not nbval:
        return f"notebooks executed by: browser test ({len(browser)}; nbval's run of them deselected)"
    why = browser_missing() or "the browser test is not selected"
    if not browser:
        return f"notebooks executed by: nbval ({len(nbval)}; no browser test: {why})"
    return f"notebooks executed by: browser test ({len(browser)}), nbval ({len(nbval)}: {', '.join(nbval)})"

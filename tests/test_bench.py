"""The benchmark report (course_utils.bench) reads the course manifest: which panels, notebooks, quizzes and targets."""
import pytest

from course_utils import bench, course
from course_utils.panel import PANELS


def test_every_manifest_demos_module_is_loaded():
    loaded = bench.load_panels()
    assert {notebook for notebook, _ in loaded.values()} == {nb.id for nb in course.NOTEBOOKS if nb.demos}
    assert loaded is PANELS


def test_the_quiz_widgets_timed_are_the_ones_notebook_07_shows():
    rows = bench.time_quiz_widgets(repeats=1)
    labels = {r["panel"] for r in rows}
    assert labels == {"quiz 07_review: Check", "quiz chapter_2_4: Check", "quiz self_check: model answer",
                      "quiz interview: model answer"}
    assert all(r["notebook"] == "07_review" and r["target_ms"] == course.notebook("07_review").handler_ms
               for r in rows)


def test_an_unknown_notebook_is_refused_before_anything_is_timed(capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--only", "notebooks", "--notebooks", "09_extra"])
    assert exit_info.value.code == 2
    assert "no notebook '09_extra' in the course manifest" in capsys.readouterr().err
    with pytest.raises(ValueError, match="09_extra"):
        bench.time_notebooks(["09_extra"])


def test_the_report_shows_each_notebooks_budget_from_the_manifest():
    rows = [{"notebook": nb.id, "seconds": 1.0, "budget_s": nb.budget_s, "error": "", "ok": True}
            for nb in course.NOTEBOOKS]
    text = bench.render([], rows, None, None)
    assert "| 04_pre_vs_post_ln | 1.0 | 90 | yes |" in text and "Whole course: 9 s" in text

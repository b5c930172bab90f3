"""The widget layer: panels never raise on a change, every registered panel sweeps its range, runs can be stopped."""
import threading
import time

import ipywidgets as widgets
import pytest

from course_utils.bench import load_panels
from course_utils.panel import BackgroundRun, Panel

PANELS = load_panels()


def _panel(update):
    return Panel({"n": widgets.IntSlider(value=1, min=0, max=4)}, [], update)


def test_a_value_error_becomes_a_message_and_nothing_raises():
    def update(n):
        if n == 0:
            raise ValueError("n must be at least 1: move the slider right")
    panel = _panel(update)
    panel.controls["n"].value = 0  # as a learner's drag would
    assert "move the slider right" in panel.message.value and panel.last_error and panel.last_error_expected
    panel.controls["n"].value = 2
    assert panel.message.value == "" and panel.last_error is None


def test_an_unexpected_error_is_shown_not_raised(capsys):
    def update(n):
        return 1 / (n - 3)
    panel = _panel(update)
    panel.controls["n"].value = 3
    assert "ZeroDivisionError" in panel.message.value and not panel.last_error_expected
    assert "ZeroDivisionError" in capsys.readouterr().err  # the traceback goes to the log for the curious


def test_set_updates_once_and_names_unknown_controls():
    calls = []
    panel = Panel({"a": widgets.IntSlider(value=1), "b": widgets.IntSlider(value=1)}, [],
                  lambda a, b: calls.append((a, b)))
    calls.clear()
    assert panel.set(a=3, b=4)
    assert calls == [(3, 4)]
    with pytest.raises(ValueError, match="unknown control"):
        panel.set(c=1)


def test_sweep_covers_each_control_range():
    panel = Panel({"x": widgets.FloatSlider(value=1.0, min=0.0, max=2.0),
                   "kind": widgets.Dropdown(options=[("A", "a"), ("B", "b")], value="a"),
                   "on": widgets.Checkbox(value=False)}, [], lambda x, kind, on: None)
    settings = panel.sweep(points=3)
    assert {s["x"] for s in settings} == {0.0, 1.0, 2.0}
    assert {s["kind"] for s in settings} == {"a", "b"} and {s["on"] for s in settings} == {False, True}


def test_background_run_reports_progress_and_stops_cleanly():
    run = BackgroundRun("Train")
    finished = threading.Event()

    def job(should_stop, progress):
        for step in range(10_000):
            if should_stop():
                return step
            progress(step, 10_000, f"step {step}")
            time.sleep(0.001)
        return 10_000

    results = []
    assert run.start(job, on_done=lambda r: (results.append(r), finished.set()))
    time.sleep(0.05)
    assert run.running and not run.start(job)  # a second start is refused with a message
    assert "already" in run.status.value
    run.stop()
    run.join(timeout=5)
    assert not run.running and results and results[0] < 10_000
    assert "stopped" in run.status.value and run.progress.value > 0


def test_background_run_shows_a_failing_job():
    run = BackgroundRun()
    run.start(lambda should_stop, progress: 1 / 0, background=False)
    assert "ZeroDivisionError" in run.error and "failed" in run.status.value


@pytest.mark.parametrize("name", sorted(PANELS))
def test_every_registered_panel_refreshes_over_its_whole_sweep(name):
    """Each setting either draws, or is refused with a ValueError message meant for the learner; never a crash."""
    notebook, factory = PANELS[name]
    panel = factory()
    crashes, refused = [], 0
    for values in panel.sweep():
        if not panel.set(**values):
            if panel.last_error_expected:
                refused += 1
                assert len(panel.last_error) > 15 and panel.message.value, f"{name}: a refusal must explain itself"
            else:
                crashes.append((values, panel.last_error))
    assert not crashes, f"{notebook}/{name}: {crashes[:3]}"
    assert refused < len(panel.sweep()), f"{notebook}/{name}: every setting of the sweep was refused"

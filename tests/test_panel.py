"""The widget layer: panels never raise on a change, every registered panel sweeps its range, runs can be stopped."""
import threading
import time

import ipywidgets as widgets
import pytest

from course_utils.bench import load_panels
from course_utils.panel import BackgroundRun, Panel, TrainingDemo, build_panel, message_html

PANELS = load_panels()
# Narrower than "draws, or refuses with a message": the notebooks whose panels draw every setting of their sweep, and
# what another notebook's refusals must be about.
DRAW_EVERY_SETTING = {"03_layernorm", "05_rmsnorm", "06_qk_norm_and_softcapping", "07_review"}
REFUSALS_ABOUT = {"04_pre_vs_post_ln": "warmup"}
# The course's four training widgets, each a TrainingDemo with the base class's run() contract, by notebook.
TRAINING_DEMOS = {"covariate_shift_demo": "01_why_normalize", "race_panel": "04_pre_vs_post_ln",
                  "quality_demo": "05_rmsnorm", "training_panel": "06_qk_norm_and_softcapping"}


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
    assert "Traceback" not in capsys.readouterr().err  # no traceback in the learner's output
    assert "1 / (n - 3)" in panel.last_traceback  # kept for whoever debugs the course
    panel.controls["n"].value = 4
    assert panel.last_error is None and "ZeroDivisionError" in panel.last_traceback  # the last bug stays readable


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
    assert "already" in run.notice.value
    time.sleep(0.05)  # progress reports keep coming: the refusal must stay readable, not flash for an instant
    assert "already" in run.notice.value and "step" in run.status.value
    run.stop()
    run.join(timeout=5)
    assert not run.running and results and results[0] < 10_000
    assert "stopped" in run.status.value and run.progress.value > 0 and run.notice.value == ""


def test_background_run_shows_a_failing_job():
    run = BackgroundRun()
    run.start(lambda should_stop, progress: 1 / 0, background=False)
    assert "ZeroDivisionError" in run.error and "failed" in run.status.value


class _Counter(TrainingDemo):
    """A fake training demo: counts to n, one step per millisecond, or fails at once."""

    def __init__(self, fail: bool = False):
        self.fail, self.trained = fail, []
        super().__init__({"n": widgets.IntSlider(value=5, min=0, max=100_000)}, [widgets.HTML()])

    def settings(self, n):
        if n == 0:
            raise ValueError("n must be at least 1: move the slider right")
        return {"n": n}

    def describe(self, settings):
        return f"counts to {settings['n']}"

    def train(self, settings, should_stop, progress):
        self.trained.append(settings["n"])
        if self.fail:
            raise RuntimeError("the fake job broke")
        for step in range(settings["n"]):
            if should_stop():
                return step
            progress(step + 1, settings["n"], f"step {step + 1}")
            time.sleep(0.001)
        return settings["n"]

    def summarize(self, result):
        return f"counted to {result}"


def test_training_demo_trains_in_the_calling_cell_and_returns_the_result():
    demo = _Counter()
    assert "counts to 5" in demo.plan.value
    assert demo.run(background=False) == 5 and demo.result == 5 == demo.checked_result()
    assert demo.summary.value == "counted to 5" and demo.runner.progress.value == 5
    assert "done" in demo.runner.status.value and demo.message.value == ""


def test_training_demo_is_a_panel_the_benchmark_can_sweep():
    demo = _Counter()
    assert demo.set(n=7) and "counts to 7" in demo.plan.value
    assert {s["n"] for s in demo.sweep(points=3)} >= {0, 50_000, 100_000}
    assert not demo.trained  # moving a control checks the settings; only Train trains


def test_training_demo_shows_a_bad_setting_and_trains_nothing():
    demo = _Counter()
    assert not demo.set(n=0)
    assert "move the slider right" in demo.message.value and demo.last_error_expected
    assert demo.run(background=False) is None and not demo.start(background=True)
    assert not demo.trained and demo.result is None and not demo.runner.running
    with pytest.raises(RuntimeError, match="a setting was refused .*move the slider right"):
        demo.checked_result()


def test_a_run_that_cannot_start_leaves_no_stale_result():
    demo = _Counter()
    assert demo.run(background=False) == 5
    demo.set(n=0)
    assert demo.run(background=False) is None and demo.result is None  # .result is always the last run's


def test_training_demo_background_run_reports_progress_refuses_a_second_and_stops():
    demo = _Counter()
    demo.set(n=100_000)
    assert demo.run(background=True) is None
    deadline = time.time() + 10
    while demo.runner.progress.value < 3 and time.time() < deadline:
        time.sleep(0.01)
    assert demo.runner.running and demo.runner.progress.max == 100_000
    assert not demo.start(background=True) and demo.run(background=False) is None  # refused while one is going
    assert "already going" in demo.runner.notice.value and demo.trained == [100_000]
    demo.runner.stop()
    demo.runner.join(timeout=10)
    assert not demo.runner.running and 3 <= demo.result < 100_000
    assert "stopped" in demo.runner.status.value and demo.summary.value == f"counted to {demo.result}"


def test_training_demo_shows_a_failing_job_and_raises_nothing():
    demo = _Counter(fail=True)
    assert demo.run(background=False) is None and demo.result is None and demo.summary.value == ""
    assert "RuntimeError: the fake job broke" in demo.message.value and "failed" in demo.runner.status.value
    with pytest.raises(RuntimeError, match="it failed .*the fake job broke"):
        demo.checked_result()
    assert demo.run(background=True) is None
    demo.runner.join(timeout=10)
    assert "the fake job broke" in demo.runner.status.value and demo.trained == [5, 5]


def test_the_default_run_is_the_notebooks_whatever_a_learner_does_after():
    demo = _Counter()
    demo.set(n=9)  # moved before the cell that trains the default: run_default still trains at the built settings
    assert demo.run_default() == 5 and demo.default() == 5 and demo.trained == [5]
    assert demo.controls["n"].value == 9  # the learner's setting is left where they put it
    demo.set(n=3)
    demo.button.click()  # a learner's run, in the background
    demo.runner.join(timeout=10)
    assert demo.result == 3 and demo.default() == 5  # theirs is .result; the notebook's is unchanged
    demo.set(n=100_000)
    demo.button.click()  # still going when the notebook asks for its default again
    assert demo.run_default() == 5 and not demo.runner.running and demo.trained[-1] == 5


def test_a_panel_without_a_default_run_says_how_to_get_one():
    demo = _Counter()
    with pytest.raises(RuntimeError, match="rerun the cell that built it"):
        demo.default()
    failing = _Counter(fail=True)
    with pytest.raises(RuntimeError, match="the fake job broke"):
        failing.run_default()
    assert failing.default_result is None


def test_the_explorer_moves_every_control_leaves_it_at_the_far_end_and_presses_train():
    from course_utils import explore

    explore.explore()  # the panels earlier tests left alive are explored and set aside first
    demo = _Counter()
    demo.run_default()
    lines = [line for line in explore.explore() if "_Counter" in line]
    assert len(lines) == 1 and "trained and stopped" in lines[0]
    assert demo.controls["n"].value == 100_000  # left at the top of its range
    assert demo.result is not None and demo.result < 100_000 and demo.default() == 5  # the learner's stopped run
    assert not demo.runner.running and "already going" not in demo.runner.notice.value  # cleared when it ended
    assert not [line for line in explore.explore() if "_Counter" in line]  # each panel once


@pytest.mark.parametrize("name", sorted(TRAINING_DEMOS))
def test_every_training_widget_is_a_registered_training_demo_that_shows_a_failed_run(name):
    """One contract: run(background=False) returns the result, or None with the reason in the panel; never raises."""
    assert PANELS[name][0] == TRAINING_DEMOS[name]
    demo = build_panel(name)
    assert isinstance(demo, TrainingDemo) and demo.result is None
    with pytest.raises(RuntimeError, match="nothing has been trained yet"):
        demo.checked_result()

    def broken(settings, should_stop, progress):
        raise RuntimeError("the job broke")
    demo.train = broken
    assert demo.run(background=False) is None and demo.result is None
    assert "the job broke" in demo.message.value and "failed" in demo.runner.status.value
    with pytest.raises(RuntimeError, match="it failed .*the job broke"):
        demo.checked_result()


@pytest.mark.parametrize("name", sorted(PANELS))
def test_every_registered_panel_refreshes_over_its_whole_sweep(name):
    """The defaults draw; each setting draws, or is refused with a ValueError message meant for the learner, never a
    crash; back at the defaults the message clears."""
    notebook, _ = PANELS[name]
    panel, where = build_panel(name), f"{notebook}/{name}"
    assert panel.last_error is None, f"{where}: the default settings do not draw: {panel.last_error}"
    settings, refused = panel.sweep(), 0
    for values in settings:
        if panel.set(**values):
            continue
        refused += 1
        assert panel.last_error_expected, f"{where} crashed at {values}: {panel.last_error}"
        assert notebook not in DRAW_EVERY_SETTING, f"{where} refused {values}: {panel.last_error}"
        assert REFUSALS_ABOUT.get(notebook, "") in panel.last_error, f"{where} refused {values}: {panel.last_error}"
        assert len(panel.last_error) > 15 and panel.message.value == message_html(panel.last_error), \
            f"{where} refused {values} without showing a clear message: {panel.last_error!r}"
    assert refused < len(settings), f"{where}: every setting of the sweep was refused"
    assert panel.set(**settings[0]) and panel.message.value == "", f"{where} at its defaults again: {panel.last_error}"


def test_a_short_choice_is_buttons_and_a_long_one_a_dropdown():
    from course_utils.panel import choice
    short = choice([("Pre-LN", "pre"), ("Post-LN", "post")], description="placement")
    assert isinstance(short, widgets.ToggleButtons) and short.value == "pre"
    long_list = choice([f"option {i}" for i in range(6)], value="option 2")
    assert isinstance(long_list, widgets.Dropdown) and long_list.value == "option 2"
    long_labels = choice(["a label far too long to sit on a button", "b"])
    assert isinstance(long_labels, widgets.Dropdown)


def test_every_control_and_widget_has_a_full_label_and_no_null_title():
    slider = widgets.FloatSlider(description="learning rate (peak)")
    plain = widgets.IntSlider(description="n")
    panel = Panel({"lr": slider, "n": plain}, [widgets.HTML("figure goes here")], lambda lr, n: None)
    assert slider.style.description_width == "initial" and slider.tooltip == "learning rate (peak)"
    # the longer label widens the slider instead of squeezing its track
    assert int(slider.layout.width.rstrip("px")) > int(plain.layout.width.rstrip("px"))

    def tooltips(widget):
        yield getattr(widget, "tooltip", "")
        for child in getattr(widget, "children", ()):
            yield from tooltips(child)
    assert None not in list(tooltips(panel.widget))


def test_panels_stack_or_sit_side_by_side_and_carry_their_page_helper():
    for layout in ("stack", "side"):
        panel = Panel({"n": widgets.IntSlider()}, [widgets.HTML("out")], lambda n: None, layout=layout)
        assert {"course-widget", "course-panel"} <= set(panel.widget._dom_classes)
        helper = panel.widget.children[-1]  # keeps the keyboard in the panel and re-fits its figures (figures.py)
        assert type(helper).__name__ == "PageHelper" and "data-lm-suppress-shortcuts" in helper._esm
    side = Panel({"n": widgets.IntSlider()}, [widgets.HTML("out")], lambda n: None, layout="side")
    row = side.widget.children[0]
    assert isinstance(row, widgets.HBox) and side.controls["n"] in row.children[0].children
    with pytest.raises(ValueError, match="stack.*side"):
        Panel({}, [], lambda: None, layout="grid")

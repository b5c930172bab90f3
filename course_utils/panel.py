"""Widget wiring shared by every notebook: a control Panel, a BackgroundRun with progress and a Stop button, and
TrainingDemo, the two together around a training job (controls, Train, live figures, a summary).

Data flow: controls (ipywidgets) -> Panel.refresh -> update(**values) (a plain function) -> figures.
A change never raises into the learner's face: an error becomes a message in the panel's message area.
Panels register themselves so the benchmark (python -m course_utils.bench) can time every handler without a browser.
"""
from __future__ import annotations

import html
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Iterable

import ipywidgets as widgets

from .course import lesson_parameters
from .figures import PageHelper

__all__ = ["Panel", "BackgroundRun", "TrainingDemo", "register_panel", "build_panel", "lesson_parameters", "PANELS",
           "message_html", "parse_features", "choice", "full_label", "SHORT_CHOICES"]

# name -> (notebook, factory); filled by @register_panel in the demo modules.
PANELS: dict[str, tuple[str, Callable[[], "Panel"]]] = {}
# Every Panel made in this process, oldest first (weak: a panel the notebook dropped is gone): course_utils.explore
# finds the panels a cell just built here, to do with them what a learner would.
LIVE: list[weakref.ref] = []


def register_panel(name: str | None = None):
    """Decorator for a factory returning a Panel, so the benchmark and the tests can build and time it.

    The panel belongs to the notebook whose demos module defines it (the course manifest, course_utils/course.py
    says which); a factory outside a manifest's demos module is refused at import. The factory's parameters without a
    default are lesson functions, named as the notebook names them; `build_panel` fills them in from the notebook.
    """
    from .course import notebook_of_module

    def wrap(factory):
        notebook = notebook_of_module(factory.__module__)
        key = name or factory.__name__
        if key in PANELS and PANELS[key][1] is not factory:
            raise ValueError(f"two panels are registered as {key!r}: give one of them another name")
        PANELS[key] = (notebook, factory)
        return factory
    return wrap


def build_panel(name: str):
    """Build a registered panel, handing its factory the lesson functions it asks for from its own notebook."""
    from .course import lesson_functions

    notebook, factory = PANELS[name]
    needed = lesson_parameters(factory)
    if not needed:
        return factory()
    lessons = lesson_functions(notebook)
    missing = [n for n in needed if n not in lessons]
    if missing:
        raise ValueError(f"panel {name!r} needs {missing}, which notebook {notebook} does not define in a cell "
                         "tagged 'lesson'")
    return factory(**{n: lessons[n] for n in needed})


def message_html(text: str, kind: str = "warning") -> str:
    """A short coloured message for a panel's message area (kind: "warning", "error" or "info")."""
    colour = {"warning": "#8a5a00", "error": "#b00020", "info": "#1f4e79"}.get(kind, "#333")
    return f'<div style="color:{colour};padding:4px 0">{html.escape(text)}</div>'


# A choice between at most this many options, each at most _SHORT_LABEL characters, is a row of buttons: every
# option in sight, one click, no menu to open (a dropdown hides the options and its ArrowDown fights the notebook).
SHORT_CHOICES = 4
_SHORT_LABEL = 24


def choice(options, value=None, description: str = "", **kwargs) -> widgets.ValueWidget:
    """A control for one of `options` (labels, or (label, value) pairs): ToggleButtons for a short list, a Dropdown
    otherwise; `value` defaults to the first option's value."""
    options = list(options)
    labels = [o[0] if isinstance(o, tuple) else str(o) for o in options]
    if value is None:
        value = options[0][1] if isinstance(options[0], tuple) else options[0]
    short = len(options) <= SHORT_CHOICES and all(len(label) <= _SHORT_LABEL for label in labels)
    kind = widgets.ToggleButtons if short else widgets.Dropdown
    control = kind(options=options, value=value, description=description, **kwargs)
    if short:  # buttons as wide as their labels, and a row as wide as its buttons (else they wrap under the label)
        control.style.button_width = "auto"
        control.layout.width = "auto"
    return control


def full_label(control: widgets.Widget) -> widgets.Widget:
    """Make a control's label readable in full: its description gets the width of its text (ipywidgets cuts it at
    80 px with an ellipsis), and its tooltip is the description (with no tooltip, the page shows title="null")."""
    description = getattr(control, "description", "")
    if description and hasattr(control, "style") and "description_width" in control.style.keys:
        control.style.description_width = "initial"
    if getattr(control, "tooltip", "missing") is None:
        control.tooltip = description
    if isinstance(control, widgets.Dropdown) and any(len(label) > 24 for label in control._options_labels):
        control.layout.width = "auto"  # as wide as its longest option: a cut option cannot be read once chosen
    if isinstance(control, (widgets.IntSlider, widgets.FloatSlider, widgets.FloatLogSlider)) and description:
        # The track keeps its length when the label grows: the slider's box grows instead of squeezing it.
        control.layout.width = f"{max(320, 200 + 8 * len(description))}px"
    return control


def _no_null_titles(widget: widgets.Widget) -> None:
    """Give every widget in the tree a tooltip (its description, or none shown): ipywidgets writes a missing one into
    the page as the literal title "null", which a mouse-over shows."""
    if getattr(widget, "tooltip", "missing") is None:
        widget.tooltip = getattr(widget, "description", "") or ""
    for child in getattr(widget, "children", ()):
        _no_null_titles(child)


class Panel:
    """Controls that drive `update(**values)`; update redraws the outputs (FigureWidgets, HTML) it closes over.

    `update` may raise ValueError with a message for the learner (shown as a warning); any other exception is shown
    as an error with its type, and the previous figures stay as they were.
    layout="stack" puts the controls above the outputs; layout="side" puts them in a column left of the outputs,
    which keeps a tall figure and the controls that drive it on one laptop screen.
    """

    def __init__(self, controls: dict[str, widgets.ValueWidget], outputs: Iterable[widgets.Widget],
                 update: Callable[..., object], title: str | None = None, columns: int = 3,
                 layout: str = "stack"):
        if layout not in ("stack", "side"):
            raise ValueError(f"layout is 'stack' or 'side', not {layout!r}")
        LIVE[:] = [ref for ref in LIVE if ref() is not None]
        LIVE.append(weakref.ref(self))
        self.controls = dict(controls)
        self.outputs = list(outputs)
        self.update = update
        self.message = widgets.HTML()
        self.last_error: str | None = None
        self.last_error_expected = True  # False when the last error was not a ValueError: a bug, not a bad setting
        self.last_traceback: str | None = None  # that bug's traceback, for whoever debugs the course
        for control in self.controls.values():
            full_label(control)
        header = [widgets.HTML(f"<b>{html.escape(title)}</b>")] if title else []
        if layout == "stack":
            wrap = widgets.Layout(flex_flow="row wrap")
            rows = [widgets.HBox(list(self.controls.values())[i:i + columns], layout=wrap)
                    for i in range(0, len(self.controls), columns)]
            body = [*rows, self.message, *self.outputs]
        else:
            side = widgets.VBox([*self.controls.values(), self.message],
                                layout=widgets.Layout(flex="0 0 auto", max_width="40%", margin="0 12px 0 0"))
            main = widgets.VBox(self.outputs, layout=widgets.Layout(flex="1 1 auto", min_width="0"))
            body = [widgets.HBox([side, main], layout=widgets.Layout(width="100%", align_items="flex-start"))]
        self.widget = widgets.VBox([*header, *body])
        self.widget.children += (PageHelper(self.widget),)
        self.widget.add_class("course-widget")
        self.widget.add_class("course-panel")
        _no_null_titles(self.widget)
        for control in self.controls.values():
            control.observe(self._on_change, names="value")
        self.refresh()

    def values(self) -> dict:
        """The current value of every control, by name."""
        return {name: control.value for name, control in self.controls.items()}

    def _on_change(self, _change) -> None:
        self.refresh()

    def refresh(self) -> bool:
        """Run update with the current values; show any problem in the message area. True when it succeeded."""
        try:
            self.update(**self.values())
        except ValueError as exc:
            self.last_error, self.last_error_expected = str(exc), True
            self.message.value = message_html(f"{exc}")
            return False
        except Exception as exc:  # a widget change must never raise into the notebook
            self.last_error, self.last_error_expected = f"{type(exc).__name__}: {exc}", False
            self.message.value = message_html(
                f"Something went wrong ({type(exc).__name__}: {exc}). Move the control back, or rerun the cell "
                "that built this panel.", "error")
            self.last_traceback = traceback.format_exc()
            return False
        self.last_error = None
        self.message.value = ""
        return True

    def set(self, **values) -> bool:
        """Set several controls at once (one update, not one per control); returns refresh()'s result."""
        unknown = set(values) - set(self.controls)
        if unknown:
            raise ValueError(f"unknown control(s) {sorted(unknown)}; this panel has {sorted(self.controls)}")
        with self._quiet():
            for name, value in values.items():
                self.controls[name].value = value
        return self.refresh()

    def _quiet(self):
        panel = self

        class _Quiet:
            def __enter__(self):
                for c in panel.controls.values():
                    c.unobserve(panel._on_change, names="value")

            def __exit__(self, *exc):
                for c in panel.controls.values():
                    c.observe(panel._on_change, names="value")
        return _Quiet()

    def sweep(self, points: int = 5) -> list[dict]:
        """Control settings over each control's default range, one control moved at a time from the defaults."""
        defaults = self.values()
        settings = [defaults]
        for name, control in self.controls.items():
            for value in _range_of(control, points):
                settings.append({**defaults, name: value})
        return settings

    def _ipython_display_(self):
        from IPython.display import display
        display(self.widget)


def _range_of(control: widgets.ValueWidget, points: int) -> list:
    """Representative values of a control: evenly spaced for sliders, every option for choices, both for booleans."""
    if isinstance(control, widgets.FloatLogSlider):
        lo, hi = control.min, control.max
        return [control.base ** (lo + (hi - lo) * i / (points - 1)) for i in range(points)]
    if isinstance(control, (widgets.IntSlider, widgets.FloatSlider, widgets.BoundedIntText,
                            widgets.BoundedFloatText)):
        lo, hi = control.min, control.max
        values = [lo + (hi - lo) * i / (points - 1) for i in range(points)]
        return [int(round(v)) for v in values] if isinstance(control.value, int) else values
    if isinstance(control, (widgets.Checkbox, widgets.ToggleButton)):
        return [False, True]
    options = getattr(control, "options", None)
    if options is not None:
        return [o[1] if isinstance(o, tuple) else o for o in options]
    return [control.value]


class BackgroundRun:
    """Run a long job in a thread with a progress bar and a Stop button, so the notebook never freezes silently.

    job(should_stop, progress) does the work; it calls progress(done, total, text) and checks should_stop().
    """

    def __init__(self, label: str = "Run"):
        self.stop_button = widgets.Button(description="Stop", icon="stop", disabled=True, button_style="danger")
        self.progress = widgets.IntProgress(value=0, min=0, max=1, description=label)
        self.status = widgets.HTML()
        self.notice = widgets.HTML()  # a refusal; progress reports overwrite the status, never this
        self.widget = widgets.HBox([self.progress, self.stop_button, self.status, self.notice])
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str | None = None
        self.stop_button.on_click(lambda _b: self.stop())

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def busy(self) -> bool:
        """True, and a message saying so, while a run is going: a second one must wait for Stop."""
        if self.running:
            self.notice.value = message_html("A run is already going: wait for it to end, or press Stop first.")
            return True
        return False

    def stop(self) -> None:
        """Ask the running job to end at its next check."""
        self._stop.set()
        self.status.value = message_html("stopping...", "info")

    def report(self, done: int, total: int, text: str = "") -> None:
        """Progress callback handed to the job."""
        self.progress.max = max(total, 1)
        self.progress.value = min(done, self.progress.max)
        self.status.value = html.escape(text)

    def start(self, job: Callable[[Callable[[], bool], Callable[..., None]], object],
              on_done: Callable[[object], None] | None = None, background: bool = True) -> bool:
        """Start job; False (and a message) if one is already running. background=False runs it in this thread."""
        if self.busy():
            return False
        self._stop.clear()
        self.error = None

        def target():
            self.stop_button.disabled = False
            started = time.perf_counter()
            try:
                result = job(self._stop.is_set, self.report)
                if on_done is not None:
                    on_done(result)
                verb = "stopped" if self._stop.is_set() else "done"
                self.status.value = message_html(f"{verb} in {time.perf_counter() - started:.1f} s", "info")
            except Exception as exc:  # shown, never raised: the thread has no notebook cell to raise into
                self.error = f"{type(exc).__name__}: {exc}"
                self.status.value = message_html(f"The run failed: {self.error}", "error")
            finally:
                self.stop_button.disabled = True
                self.notice.value = ""

        if background:
            self._thread = threading.Thread(target=target, daemon=True)
            self._thread.start()
        else:
            target()
        return True

    def join(self, timeout: float | None = None) -> None:
        """Wait for a background run to end (tests and notebooks under nbval use this)."""
        if self._thread is not None:
            self._thread.join(timeout)



class TrainingDemo(Panel):
    """A Panel that trains: controls checked by `settings`, a Train button, a BackgroundRun, live figures, a summary.

    A demo supplies `train(settings, should_stop, progress) -> result`, which draws into its figures as it goes; it may
    also supply `settings(**values)` (raise ValueError for a bad setting: shown as a message, nothing trains),
    `describe(settings)` (what Train will do, shown above the button) and `summarize(result)` (shown under the figures).
    A failing job is shown, never raised: `run()` returns the result or None, `.result` keeps the last run's, and
    `checked_result()` says why there is none. The control checks are what the benchmark times: training needs Train.
    """

    def __init__(self, controls: dict[str, widgets.ValueWidget], figures: Iterable[widgets.Widget], *,
                 button: str = "Train", buttons: Iterable[widgets.Button] = (), title: str | None = None,
                 columns: int = 3, layout: str = "stack"):
        self.button = widgets.Button(description=button, icon="play", button_style="primary")
        self.runner = BackgroundRun("training")
        self.plan = widgets.HTML()
        self.summary = widgets.HTML()
        self.result = None  # the last run's, whoever started it: a learner's press replaces it
        self.default_result = None  # the run at the settings the panel was built with (run_default): nothing else
        self.button.on_click(lambda _button: self.run(background=True))
        super().__init__(controls, [self.plan, widgets.HBox([self.button, *buttons]), self.runner.widget, *figures,
                                    self.summary], self._check, title=title, columns=columns, layout=layout)
        self.built_with = self.values()  # the notebook's settings: what run_default trains, whatever the controls say

    def settings(self, **values) -> dict:
        """The job's settings from the control values; a bad one raises ValueError with a message for the learner."""
        return values

    def describe(self, settings: dict) -> str:
        """What Train will do with these settings (HTML)."""
        return ""

    def train(self, settings: dict, should_stop: Callable[[], bool], progress: Callable[..., None]):
        """The job: train with `settings`, drawing live; end early when should_stop(), report progress(done, total)."""
        raise NotImplementedError

    def summarize(self, result) -> str:
        """The summary (HTML) of a run that ended, stopped or not."""
        return ""

    def _check(self, **values) -> None:
        self.plan.value = self.describe(self.settings(**values))

    def start(self, background: bool = True) -> bool:
        """Start a run with the current settings; False when one is going or a setting is bad (each says why)."""
        if self.runner.busy():
            return False
        self.result = None  # a run that cannot start has no result either: .result is always the last run's
        self.summary.value = ""
        if not self.refresh():
            return False
        settings = self.settings(**self.values())
        started = self.runner.start(lambda should_stop, progress: self.train(settings, should_stop, progress),
                                    self._finish, background=background)
        if not background and self.runner.error:
            self.message.value = message_html(f"The run failed: {self.runner.error}", "error")
        return started

    def _finish(self, result) -> None:
        self.result = result
        self.summary.value = self.summarize(result)

    def run(self, background: bool = True):
        """Train: background=False trains here and returns the result (None when it could not start or failed, with
        the reason shown in the panel); in the background it returns None at once and the result lands in `.result`.
        It never raises."""
        return self.result if self.start(background) and not background else None

    def run_default(self):
        """Train at the settings the panel was built with, here (not in the background), and keep the result as
        `default_result`, which no control and no press of Train changes: the run a notebook's claim cells read.
        A learner's run still going is stopped first. Returns the result, or raises RuntimeError saying why not."""
        if self.runner.running:
            self.runner.stop()
            self.runner.join()
        current = self.values()
        self.set(**self.built_with)  # the figures and the plan show the run being made
        try:
            result = self.run(background=False)
        finally:
            self.set(**current)  # the learner's settings back, and the plan that says what Train would do with them
        if result is None:
            self.checked_result()  # raises, saying why
        self.default_result = result
        return result

    def default(self):
        """The run at the notebook's settings (run_default), for a claim cell; a RuntimeError says why there is none."""
        if self.default_result is None:
            raise RuntimeError("This training panel has no default run yet: rerun the cell that built it (it calls "
                               "run_default()).")
        return self.default_result

    def checked_result(self):
        """The last run's result, for the notebook cell that uses it; without one, a RuntimeError that says why."""
        if self.result is not None:
            return self.result
        if self.runner.running:
            why = "it is still training: wait for it to end, or press Stop"
        elif self.last_error:
            why = f"a setting was refused ({self.last_error})"
        elif self.runner.error:
            why = f"it failed ({self.runner.error})"
        else:
            why = "nothing has been trained yet"
        raise RuntimeError(f"The training panel has no result: {why}. Its message is shown in the panel; fix the "
                           "problem and rerun the cell that trains it.")


# ---- a learner's typed numbers, for a Text control -----------------------------------------------------------------

MAX_FEATURES = 32
_NUMBER = r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$"


def parse_features(text: str) -> list[float]:
    """'1, 2, 3, 4' -> [1.0, 2.0, 3.0, 4.0]; commas or spaces separate; a ValueError says what is wrong."""
    import re  # only this parser needs it

    parts = [p for p in re.split(r"[,\s;]+", text.strip()) if p]
    if not parts:
        raise ValueError("Type the token's features as numbers separated by commas, for example 1, 2, 3, 4.")
    bad = [p for p in parts if not re.match(_NUMBER, p)]
    if bad:
        raise ValueError(f"'{bad[0]}' is not a number. Type the features as numbers separated by commas, "
                         "for example 1, 2, 3, 4.")
    if len(parts) > MAX_FEATURES:
        raise ValueError(f"{len(parts)} features is more than this figure shows ({MAX_FEATURES}); delete some.")
    values = [float(p) for p in parts]
    if any(not abs(v) <= 1e6 for v in values):  # also refuses inf, which a long exponent like 1e999 parses to
        raise ValueError("Keep every feature between -1e6 and 1e6.")
    return values

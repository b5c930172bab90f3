"""Widget wiring shared by every notebook: a control Panel and a BackgroundRun with progress and a Stop button.

Data flow: controls (ipywidgets) -> Panel.refresh -> update(**values) (a plain function) -> figures.
A change never raises into the learner's face: an error becomes a message in the panel's message area.
Panels register themselves so the benchmark (python -m course_utils.bench) can time every handler without a browser.
"""
from __future__ import annotations

import html
import threading
import time
import traceback
from collections.abc import Callable, Iterable

import ipywidgets as widgets

__all__ = ["Panel", "BackgroundRun", "register_panel", "PANELS", "message_html"]

# name -> (notebook, factory); filled by @register_panel in the demo modules.
PANELS: dict[str, tuple[str, Callable[[], "Panel"]]] = {}


def register_panel(notebook: str, name: str | None = None):
    """Decorator for a zero-argument factory returning a Panel, so the benchmark can build and time it."""
    def wrap(factory):
        PANELS[name or factory.__name__] = (notebook, factory)
        return factory
    return wrap


def message_html(text: str, kind: str = "warning") -> str:
    """A short coloured message for a panel's message area (kind: "warning", "error" or "info")."""
    colour = {"warning": "#8a5a00", "error": "#b00020", "info": "#1f4e79"}.get(kind, "#333")
    return f'<div style="color:{colour};padding:4px 0">{html.escape(text)}</div>'


class Panel:
    """Controls that drive `update(**values)`; update redraws the outputs (FigureWidgets, HTML) it closes over.

    `update` may raise ValueError with a message for the learner (shown as a warning); any other exception is shown
    as an error with its type, and the previous figures stay as they were.
    """

    def __init__(self, controls: dict[str, widgets.ValueWidget], outputs: Iterable[widgets.Widget],
                 update: Callable[..., object], title: str | None = None, columns: int = 3):
        self.controls = dict(controls)
        self.outputs = list(outputs)
        self.update = update
        self.message = widgets.HTML()
        self.last_error: str | None = None
        self.last_error_expected = True  # False when the last error was not a ValueError: a bug, not a bad setting
        rows = [widgets.HBox(list(self.controls.values())[i:i + columns])
                for i in range(0, len(self.controls), columns)]
        header = [widgets.HTML(f"<b>{html.escape(title)}</b>")] if title else []
        self.widget = widgets.VBox([*header, *rows, self.message, *self.outputs])
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
            traceback.print_exc()
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
        self.widget = widgets.HBox([self.progress, self.stop_button, self.status])
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str | None = None
        self.stop_button.on_click(lambda _b: self.stop())

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

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
        if self.running:
            self.status.value = message_html("A run is already going: press Stop first.")
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


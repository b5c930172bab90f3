"""Benchmark what a learner waits for in the browser: from an input on a panel's control to its figures redrawn.

    python benchmarks/bench_browser.py                             # every notebook, 10 events per control
    python benchmarks/bench_browser.py --notebooks 04,08 --repeats 20

JupyterLab and headless Chromium start as the browser test starts them (tests/browser_support.py), but with
JupyterLab's default notebook windowing, as a learner has it (--windowing none renders every cell, as the browser test
does, and makes each redraw's layout work larger). Each notebook is opened and run top to bottom; then every course
panel (DOM class `course-panel`) that has figures gets --repeats input events on each of its sliders, toggle buttons
and dropdowns: ArrowRight on the focused slider handle (ArrowLeft once it reaches its end), a click on the next toggle
button, the next option of a dropdown. An event's latency is measured in the page (performance.now()): from the event
to the last change of the panel's figures (a MutationObserver on them), taken at the next animation frame, once the
kernel has answered (busy, then idle) and the figures have been still for 150 ms; "to kernel" is the part until the
kernel reports busy with it. In the kernel, for the same events, "in kernel" times its whole handling of a control's
message (the widget machinery, the handler, the figure updates it sends) and "handler" the panel's `Panel.refresh`
alone. A choice goes back to where it was before the next control is timed (a control may be usable only at some
settings of another). Training panels are not timed: their controls set the next run, and only Train redraws. The
table (median and max per panel, target 100 ms for both) is printed and written to benchmarks/BROWSER.md with the
machine, the date and the load; the exit code is 1 when a panel misses.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the JupyterLab and Chromium start-up the browser test uses

from browser_support import (jupyter_lab, launch_chromium, open_notebook, run_all_and_wait,  # noqa: E402
                             shut_down_kernels, until)

NOTEBOOKS = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))
TARGET_MS = 100.0
QUIET_MS = 150  # the figures are redrawn when they have not changed for this long after the kernel went idle
EVENT_TIMEOUT_MS = 5_000
CONTROLS = {"slider": ".widget-slider .noUi-handle", "toggle buttons": ".widget-toggle-buttons",
            "dropdown": ".widget-dropdown select"}

# Run in the notebook's kernel once it has run: every Panel gets a DOM class naming it; its refresh is timed (the
# handler), and so is the kernel's whole handling of each message from one of its controls (the widget machinery,
# the handler and the figure updates it sends).
KERNEL_SETUP = """
def _course_bench_setup():
    import gc, json, time
    from course_utils.panel import Panel, TrainingDemo
    times = {"handler": {}, "message": {}}

    def timed(kind, key, run):
        def timed_run(*args):
            started = time.perf_counter()
            try:
                return run(*args)
            finally:
                which = key(*args)
                if which is not None:
                    times[kind].setdefault(which, []).append((time.perf_counter() - started) * 1e3)
        return timed_run

    panels, comm_panel = {}, {}
    for i, panel in enumerate(o for o in gc.get_objects() if isinstance(o, Panel)):
        panel.widget.add_class(f"bench-panel-{i}")
        panel.refresh = timed("handler", lambda i=i: i, panel.refresh)
        panels[i] = isinstance(panel, TrainingDemo)
        comm_panel.update({c.comm.comm_id: i for c in panel.controls.values() if c.comm is not None})
    kernel = get_ipython().kernel
    kernel.shell_handlers["comm_msg"] = timed(
        "message", lambda stream, ident, msg: comm_panel.get(msg["content"].get("comm_id")),
        kernel.shell_handlers["comm_msg"])
    print("COURSE_BENCH", json.dumps(panels))
    return times
_course_bench_times = _course_bench_setup()
"""
KERNEL_TIMES = ('import json; print("COURSE_BENCH", json.dumps(_course_bench_times)); '
                '[t.clear() for t in _course_bench_times.values()]')

# Run code in the open notebook's kernel, outside any cell; returns what it printed (or the error). What the kernel
# code reports is the line it starts with COURSE_BENCH (a thread of the notebook's may print too).
EXECUTE_JS = """async code => {
    const kernel = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
    const future = kernel.requestExecute({code, silent: false, store_history: false});
    let out = '';
    future.onIOPub = msg => {
        if (msg.header.msg_type === 'stream') out += msg.content.text;
        if (msg.header.msg_type === 'error') out += `ERROR ${msg.content.ename}: ${msg.content.evalue}`;
    };
    await future.done;
    return out;
}"""

# window.__bench.arm(panel) before an input, window.__bench.wait() after it: the latency, or why there is none.
TIMER_JS = """([quietMs, timeoutMs]) => {
    if (window.__bench) return;
    const kernel = () => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
    let state = null;
    kernel().statusChanged.connect((_k, status) => {
        if (!state || state.t0 === null) return;
        if (status === 'busy' && state.busy === null) state.busy = performance.now();
        if (status === 'idle' && state.busy !== null) state.idle = performance.now();
    });
    const start = e => { if (state && state.t0 === null && state.panel.contains(e.target)) state.t0 = e.timeStamp; };
    for (const type of ['keydown', 'pointerdown', 'input', 'change']) document.addEventListener(type, start, true);
    window.__bench = {
        arm(panel) {
            if (state) state.observer.disconnect();
            state = {panel, t0: null, busy: null, idle: null, last: null, painted: null, armed: performance.now()};
            state.observer = new MutationObserver(() => {
                if (state.t0 === null) return;
                const mark = state.last = performance.now();
                requestAnimationFrame(() => { if (state.last === mark) state.painted = performance.now(); });
            });
            for (const plot of panel.querySelectorAll('.js-plotly-plot'))
                state.observer.observe(plot, {subtree: true, childList: true, attributes: true, characterData: true});
        },
        wait() {
            return new Promise(resolve => {
                const poll = () => {
                    const now = performance.now(), s = state;
                    if (s.idle !== null && now - Math.max(s.idle, s.last || 0) > quietMs) {
                        if (s.last === null) return resolve({why: 'the figures did not change'});
                        return resolve({ms: (s.painted || s.last) - s.t0, kernel: s.busy - s.t0});
                    }
                    if (now - s.armed > timeoutMs) return resolve({why: s.t0 === null
                        ? 'no input event reached the panel'
                        : s.busy !== null ? 'the kernel did not go idle' : 'the kernel never got the change'});
                    setTimeout(poll, 10);
                };
                poll();
            });
        },
    };
}"""


# Whether a control can take an input: enabled, and with somewhere to go (two options, a range).
USABLE_JS = """(c, kind) => {
    if (kind === 'slider') return !c.closest('.noUi-target').hasAttribute('disabled')
        && +c.getAttribute('aria-valuemax') > +c.getAttribute('aria-valuemin');
    if (kind === 'dropdown') return !c.disabled && c.options.length > 1;
    return Array.from(c.querySelectorAll('.widget-toggle-button')).filter(b => !b.disabled).length > 1;
}"""
# The course panels on the page: classes, title, how many figures, and the titles of those drawn with no data.
PANELS_JS = """() => Array.from(document.querySelectorAll('.course-panel')).map(p => {
    const title = e => ((e.querySelector('b, .gtitle') || {}).textContent || '(untitled)').trim();
    const plots = Array.from(p.querySelectorAll('.js-plotly-plot'));
    return [p.className, title(p), plots.length, plots.filter(f => !(f.data && f.data.length)).map(title)];
})"""


@dataclass
class PanelTiming:
    """One panel's events: browser latencies and handler times in ms, the controls moved, and what went wrong."""
    notebook: str
    panel: str
    controls: int = 0
    browser_ms: list[float] = field(default_factory=list)
    to_kernel_ms: list[float] = field(default_factory=list)  # from the input to the kernel starting on it
    message_ms: list[float] = field(default_factory=list)  # the kernel's handling of a control's message
    handler_ms: list[float] = field(default_factory=list)
    misses: list[str] = field(default_factory=list)
    skipped: str = ""

    @property
    def ok(self) -> bool:
        """Every event measured, and the slowest under the target (so the median is too)."""
        return bool(self.browser_ms) and not self.misses and max(self.browser_ms) <= TARGET_MS


def parse_notebooks(text: str | None) -> list[str]:
    """'04,08' (prefixes or whole stems) as notebook stems in course order; ValueError naming one that matches none."""
    if not text:
        return NOTEBOOKS
    chosen = []
    for piece in (p.strip() for p in text.split(",") if p.strip()):
        matches = [n for n in NOTEBOOKS if n == piece or n.startswith(f"{piece}_")]
        if not matches:
            raise ValueError(f"no notebook {piece!r} in notebooks/; choose from {', '.join(NOTEBOOKS)}")
        chosen += [m for m in matches if m not in chosen]
    return sorted(chosen)


def _cell(values: list[float], how, digits: int = 0) -> str:
    return f"{how(values):.{digits}f}" if values else "-"


def render(rows: list[PanelTiming], about: dict) -> str:
    """The report as Markdown: the machine and load, one row per timed panel, what missed the target and why."""
    timed = [r for r in rows if not r.skipped]
    lines = ["# Browser latency: input to redrawn figure", "",
             f"Measured by `python benchmarks/bench_browser.py` on {about['date']}: {about['machine']}; "
             f"Chromium {about['chromium']}, JupyterLab {about['jupyterlab']} (notebook windowing "
             f"{about['windowing']}); load average {about['load_start']} at "
             f"the start, {about['load_end']} at the end. {about['repeats']} input events per control.", "",
             "| notebook | panel | controls | events | median ms | max ms | to kernel median ms | in kernel median ms "
             "| handler median ms | handler max ms | under 100 ms |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in timed:
        lines.append(f"| {r.notebook} | {r.panel} | {r.controls} | {len(r.browser_ms)} | "
                     f"{_cell(r.browser_ms, statistics.median)} | {_cell(r.browser_ms, max)} | "
                     f"{_cell(r.to_kernel_ms, statistics.median)} | {_cell(r.message_ms, statistics.median, 1)} | "
                     f"{_cell(r.handler_ms, statistics.median, 1)} | {_cell(r.handler_ms, max, 1)} | "
                     f"{'yes' if r.ok else 'NO'} |")
    missed = [r for r in timed if not r.ok]
    lines += ["", "Every panel under 100 ms, median and max." if timed and not missed else
              f"Over 100 ms (median or max) or not measured: {', '.join(f'{r.notebook} {r.panel}' for r in missed)}."]
    lines += [f"- {r.notebook} {r.panel}: {miss}" for r in timed for miss in dict.fromkeys(r.misses)]
    skipped = [r for r in rows if r.skipped]
    if skipped:
        lines += ["", "Not timed:"] + [f"- {r.notebook} {r.panel}: {r.skipped}" for r in skipped]
    return "\n".join(lines)


# The index of a control's chosen toggle button or option, and the next one that can be chosen.
CHOICE_JS = """(c, kind) => {
    const items = Array.from(kind === 'dropdown' ? c.options : c.querySelectorAll('.widget-toggle-button'));
    const at = kind === 'dropdown' ? c.selectedIndex : items.findIndex(b => b.classList.contains('mod-active'));
    const next = [...items.keys()].map(i => (at + 1 + i) % items.length).find(i => !items[i].disabled && i !== at);
    return [at, next];
}"""


def _choose(control, kind: str, index: int) -> None:
    if kind == "toggle buttons":
        control.locator(".widget-toggle-button").nth(index).click(timeout=EVENT_TIMEOUT_MS)
    else:
        control.select_option(index=index, timeout=EVENT_TIMEOUT_MS)


def _step(page, kind: str, control) -> None:
    """One input on a control: a slider moves one step (back at its end), buttons and dropdowns take the next."""
    if kind != "slider":
        _choose(control, kind, control.evaluate(CHOICE_JS, kind)[1])
        return
    now, low, high, was_left = control.evaluate(  # right to the end, then left to the start, and so on
        "h => [+h.getAttribute('aria-valuenow'), +h.getAttribute('aria-valuemin'), "
        "+h.getAttribute('aria-valuemax'), h.dataset.benchLeft === '1']")
    left = (was_left or now >= high) and now > low
    control.evaluate(f"h => {{ h.dataset.benchLeft = '{int(left)}'; }}")
    control.focus()
    page.keyboard.press("ArrowLeft" if left else "ArrowRight")


def _time_control(page, timing: PanelTiming, panel, kind: str, control, repeats: int) -> None:
    """repeats inputs on one control, each timed to the redraw; a choice goes back to where it was (another control
    of the panel may be usable only there)."""
    from playwright.sync_api import Error as PlaywrightError

    control.scroll_into_view_if_needed()
    start = control.evaluate(CHOICE_JS, kind)[0] if kind != "slider" else None
    for _ in range(repeats):
        if not control.evaluate(USABLE_JS, kind):
            timing.misses.append(f"{kind}: disabled by the setting it was moved to")
            return
        panel.evaluate("p => window.__bench.arm(p)")
        try:
            _step(page, kind, control)
        except PlaywrightError as exc:  # reported in the table; the other controls are still timed
            timing.misses.append(f"{kind}: could not be used ({str(exc).splitlines()[0]})")
            return
        result = page.evaluate("() => window.__bench.wait()")
        if "ms" in result:
            timing.browser_ms.append(result["ms"])
            timing.to_kernel_ms.append(result["kernel"])
        else:
            timing.misses.append(f"{kind}: {result['why']}")
    if start is not None and control.evaluate(CHOICE_JS, kind)[0] != start:
        panel.evaluate("p => window.__bench.arm(p)")
        _choose(control, kind, start)
        page.evaluate("() => window.__bench.wait()")


def _time_panel(page, timing: PanelTiming, panel, repeats: int) -> None:
    """Time each usable control of the panel's own (not those of a quiz inside it)."""
    for kind, selector in CONTROLS.items():
        for control in panel.locator(selector).all():
            if not control.evaluate("(c, p) => c.closest('.course-panel') === p && !c.closest('.course-quiz')",
                                    panel.element_handle()):
                continue
            if control.evaluate(USABLE_JS, kind):
                timing.controls += 1
                _time_control(page, timing, panel, kind, control, repeats)


def _kernel_report(page, code: str) -> dict | None:
    """Run code in the notebook's kernel; the JSON it printed after COURSE_BENCH, or None (and why, on stderr)."""
    out = page.evaluate(EXECUTE_JS, code)
    line = next((line for line in out.splitlines() if line.startswith("COURSE_BENCH ")), None)
    if line is None:
        print(f"the kernel did not report: {out[-500:]}", file=sys.stderr)
        return None
    return json.loads(line.split(" ", 1)[1])


def time_notebook(page, lab, name: str, repeats: int) -> list[PanelTiming]:
    """Open and run one notebook, then time every panel's controls; one PanelTiming per course panel."""
    open_notebook(page, lab, f"{name}.ipynb")
    prompts, stopped = run_all_and_wait(page, f"{name}.ipynb", timeout_s=300, cell_timeout_s=300)
    if stopped or any("*" in p or not p.strip("[]: ") for p in prompts):
        return [PanelTiming(name, "(whole notebook)", skipped=f"the notebook did not run: {stopped or prompts}")]
    until(lambda: "Loading widget" not in " ".join(page.locator(".jp-OutputArea-output").all_inner_texts()), 15)
    page.evaluate(TIMER_JS, [QUIET_MS, EVENT_TIMEOUT_MS])
    out = _kernel_report(page, KERNEL_SETUP)
    if out is None:
        return [PanelTiming(name, "(whole notebook)", skipped="could not time the handlers in the kernel")]
    training = {int(k): v for k, v in out.items()}
    until(lambda: all("bench-panel-" in p[0] for p in page.evaluate(PANELS_JS)), 10)  # the kernel's classes arrive
    rows = []
    for classes, title, n_plots, blank in page.evaluate(PANELS_JS):
        key = next((int(c.rsplit("-", 1)[1]) for c in classes.split() if c.startswith("bench-panel-")), None)
        timing = PanelTiming(name, title)
        rows.append(timing)
        if key is None or training.get(key):
            timing.skipped = ("a training panel: its controls set the next run, and only Train redraws"
                              if key is not None else "not a course_utils Panel")
            continue
        if not n_plots:
            timing.skipped = "no figure to redraw"
            continue
        timing.misses += [f"figure '{t}' has no data on the page, so its updates cannot show" for t in blank]
        panel = page.locator(f".bench-panel-{key}")
        _time_panel(page, timing, panel, repeats)
        kernel = _kernel_report(page, KERNEL_TIMES) or {"handler": {}, "message": {}}
        timing.handler_ms, timing.message_ms = kernel["handler"].get(str(key), []), kernel["message"].get(str(key), [])
        if not timing.controls:
            timing.skipped = "no slider, toggle buttons or dropdown"
    return rows


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    return (f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores ({cpu}), "
            f"Python {platform.python_version()}")


WINDOWING = ("contentVisibility", "defer", "full", "none")


def _windowing(mode: str | None) -> dict:
    return {} if mode is None else {"notebook-extension/tracker": {"windowingMode": mode}}


def _default_windowing() -> str:
    """JupyterLab's default notebook windowing mode, from its settings schema (the benchmark leaves it as it is)."""
    import jupyterlab
    from jupyterlab.commands import get_app_dir

    schema = Path(get_app_dir()) / "schemas" / "@jupyterlab" / "notebook-extension" / "tracker.json"
    try:
        return json.loads(schema.read_text())["properties"]["windowingMode"]["default"]
    except (OSError, KeyError, ValueError):
        return f"unknown (JupyterLab {jupyterlab.__version__})"


def run(notebooks: list[str], repeats: int, windowing: str | None = None) -> tuple[list[PanelTiming], dict]:
    """Time every notebook's panels in one JupyterLab and one Chromium, a fresh page and kernel per notebook."""
    import jupyterlab
    from playwright.sync_api import sync_playwright

    about = {"date": datetime.date.today().isoformat(), "machine": _machine(), "jupyterlab": jupyterlab.__version__,
             "windowing": windowing or _default_windowing(), "load_start": _load(), "repeats": repeats}
    rows: list[PanelTiming] = []
    with (tempfile.TemporaryDirectory() as home, jupyter_lab(Path(home), _windowing(windowing)) as lab,
          sync_playwright() as p):
        browser = launch_chromium(p)
        about["chromium"] = browser.version
        for name in notebooks:
            started = time.time()
            context = browser.new_context(viewport={"width": 1366, "height": 768})
            try:
                rows += time_notebook(context.new_page(), lab, name, repeats)
            finally:
                context.close()
                shut_down_kernels(lab)
            print(f"{name}: {time.time() - started:.0f} s", file=sys.stderr, flush=True)
        browser.close()
    about["load_end"] = _load()
    return rows, about


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/bench_browser.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--notebooks", help="comma-separated notebooks, by number or stem (default: all): 04,08")
    parser.add_argument("--repeats", type=int, default=10, help="input events per control (default 10)")
    parser.add_argument("--windowing", choices=WINDOWING,
                        help="JupyterLab's notebook windowing mode (default: JupyterLab's own default, as a learner "
                             "has it); the browser test uses none")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "BROWSER.md", help="where to write the table")
    args = parser.parse_args(argv)
    try:
        notebooks = parse_notebooks(args.notebooks)
    except ValueError as exc:
        parser.error(str(exc))
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, not {args.repeats}")
    rows, about = run(notebooks, args.repeats, args.windowing)
    text = render(rows, about)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n", encoding="utf-8")
    return 0 if all(r.ok for r in rows if not r.skipped) else 1


if __name__ == "__main__":
    sys.exit(main())

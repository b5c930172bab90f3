"""JupyterLab in headless Chromium, as the browser test (tests/test_browser.py) and the browser benchmark
(benchmarks/bench_browser.py) both drive it: a server on 127.0.0.1 with a random token serving a copy of notebooks/,
Debian's chromium launched through playwright (never `playwright install`), a notebook opened and run to the end.

Nothing here imports pytest: a failure to start raises RuntimeError, which the test's fixture turns into a failure.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]
# anywidget 0.11 gives a widget's module 2 s to load, then logs this (as an unhandled rejection, so only when no message
# was waiting for it) even when the module loads later and the view draws. On a busy machine plotly's 5 MB module can
# take longer, and anywidget would then drop every update sent to that figure; the course's PageHelper holds those
# updates until the module has loaded (tests/test_late_module.py proves it with the module delayed). The tests check
# what a timeout could still cost directly (every figure drawn with its data, a slider moving its plot), so the
# message alone is a warning in the test report, not a failure.
ANYWIDGET_TIMEOUT = "[anywidget] Failed to initialize model."

# No news or update checks (they would try the network), no autosave.
LAB_SETTINGS = {"apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
                "docmanager-extension/plugin": {"autosave": False}}
# The browser test renders every cell (no windowing), so what it checks off screen is in the page; a learner's
# JupyterLab (and so the latency benchmark) keeps its default, "contentVisibility", which skips off-screen cells.
EVERY_CELL = {"notebook-extension/tracker": {"windowingMode": "none"}}


@dataclass(frozen=True)
class Lab:
    """A running JupyterLab: its address and token, and the folder its notebooks/ copy lives in."""
    base: str
    token: str
    home: Path

    def url(self, notebook: str) -> str:
        return f"{self.base}/lab/tree/notebooks/{notebook}?reset&token={self.token}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_settings(folder: Path, settings: dict) -> None:
    for plugin, values in settings.items():
        package, name = plugin.split("/")
        target = folder / "@jupyterlab" / package
        target.mkdir(parents=True, exist_ok=True)
        (target / f"{name}.jupyterlab-settings").write_text(json.dumps(values))


def _wait_until_up(proc: subprocess.Popen, lab: Lab, log: Path, timeout_s: float = 60) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            urllib.request.urlopen(f"{lab.base}/api/status?token={lab.token}", timeout=2).close()
            return
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited: {log.read_text()[-2000:]}") from None
            time.sleep(0.5)
    raise RuntimeError(f"JupyterLab did not start in {timeout_s:g} s: {log.read_text()[-2000:]}")


@contextmanager
def jupyter_lab(home: Path, settings: dict | None = None) -> Iterator[Lab]:
    """JupyterLab serving a copy of notebooks/ under home (so nothing the browser runs or autosaves touches the
    committed notebooks), its settings and workspaces in home too. window.jupyterapp is exposed so callers read the
    notebook model (outputs by type, as nbval sees them) and the kernel's status."""
    shutil.copytree(ROOT / "notebooks", home / "root" / "notebooks")
    _write_settings(home / "settings", {**LAB_SETTINGS, **(settings or {})})
    lab = Lab(f"http://127.0.0.1:{_free_port()}", secrets.token_hex(16), home)
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(home / "config"), JUPYTER_RUNTIME_DIR=str(home / "runtime"),
               JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"), JUPYTERLAB_SETTINGS_DIR=str(home / "settings"))
    log_path = home / "lab.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--ServerApp.port={lab.base.rsplit(':', 1)[1]}",
             "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={lab.token}",
             f"--ServerApp.root_dir={home / 'root'}", "--ServerApp.port_retries=0", "--allow-root",
             "--LabApp.extension_manager=readonly", "--LabApp.news_url=",
             "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate", "--LabApp.expose_app_in_browser=True"],
            env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            _wait_until_up(proc, lab, log_path)
            yield lab
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()


def launch_chromium(playwright):
    """The system's chromium, headless, with no network of its own (no updates, sync or component downloads)."""
    return playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)


def until(condition: Callable[[], object], timeout_s: float) -> bool:
    """Poll condition() every 0.1 s until it holds (True) or timeout_s passes (False): no fixed sleeps to wait out."""
    deadline = time.time() + timeout_s
    while True:
        if condition():
            return True
        if time.time() > deadline:
            return False
        time.sleep(0.1)


def _menu(page, menu: str, item: str) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{menu}$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{re.escape(item)}$")).first.click()


def _accept_kernel_dialog(page) -> None:
    """JupyterLab may ask which kernel to start: take the notebook's own (python3)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    try:
        page.wait_for_selector(".jp-Dialog .jp-mod-accept", timeout=5_000)
    except PlaywrightTimeout:
        return
    page.locator(".jp-Dialog .jp-mod-accept").click()


def open_notebook(page, lab: Lab, name: str, unfold: bool = True) -> list[dict]:
    """Open notebooks/name in a fresh workspace and wait for its kernel to be idle. Returns each cell's fold state as
    JupyterLab opened it (hidden under a collapsed heading, code hidden, a collapsed heading); with unfold, then opens
    every fold (collapsed sections, hidden worked answers), so the checks that follow see every cell's output."""
    page.goto(lab.url(name), wait_until="domcontentloaded")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    _accept_kernel_dialog(page)
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=60_000)
    folds = fold_state(page, name)
    if unfold:
        page.evaluate("""async () => {
            await window.jupyterapp.commands.execute('notebook:expand-all-headings');
            await window.jupyterapp.commands.execute('notebook:show-all-cell-code');
        }""")
        assert until(lambda: not any(f["hidden"] or f["code_hidden"] for f in fold_state(page, name)), 10), (
            f"{name}: JupyterLab did not open every fold")
    return folds


def fold_state(page, name: str) -> list[dict]:
    """Each cell of the open notebook as JupyterLab shows it: hidden (under a collapsed heading), its code hidden, a
    collapsed heading."""
    state = page.evaluate("""name => {
        const panel = Array.from(window.jupyterapp.shell.widgets('main'))
            .find(w => w.context && w.context.path.endsWith(name));
        if (!panel) return null;
        return panel.content.widgets.map(w => ({hidden: w.isHidden, code_hidden: !!w.inputHidden,
                                                collapsed: w.headingCollapsed === true}));
    }""", name)
    if state is None:
        raise RuntimeError(f"{name}: JupyterLab's notebook panel is not reachable (window.jupyterapp)")
    return state


def code_cells(page, name: str) -> list[dict]:
    """Each code cell of the open notebook, from JupyterLab's model: its execution count and its error outputs."""
    cells = page.evaluate("""name => {
        const panel = Array.from(window.jupyterapp.shell.widgets('main'))
            .find(w => w.context && w.context.path.endsWith(name));
        if (!panel) return null;
        const model = panel.content.model;
        return Array.from({length: model.cells.length}, (_, i) => model.cells.get(i).toJSON())
            .filter(c => c.cell_type === 'code')
            .map(c => ({count: c.execution_count, errors: c.outputs.filter(o => o.output_type === 'error')
                .map(o => `${o.ename}: ${o.evalue}`)}));
    }""", name)
    if cells is None:
        raise RuntimeError(f"{name}: JupyterLab's notebook model is not reachable (window.jupyterapp)")
    return cells


def run_all_and_wait(page, name: str, timeout_s: float, cell_timeout_s: float) -> tuple[list[str], str]:
    """Run every cell; wait until no cell is pending, an error stops the run, the notebook runs past timeout_s, or
    one cell runs past cell_timeout_s (nbval's --nbval-cell-timeout). Returns the input prompts' texts, and why it
    stopped waiting early ("" when the run finished)."""
    _menu(page, "Run", "Run All Cells")
    _accept_kernel_dialog(page)
    started = time.time()
    running, running_since = -1, started
    prompts: list[str] = []
    while time.time() < started + timeout_s:
        time.sleep(0.25)
        # textContent, not innerText: a cell that JupyterLab's default windowing skips off screen has no innerText
        prompts = page.locator(".jp-CodeCell .jp-InputPrompt").evaluate_all("els => els.map(e => e.textContent)")
        pending = [i for i, p in enumerate(prompts) if "*" in p]
        busy = page.locator(".jp-Notebook-ExecutionIndicator[data-status='busy']").count()
        if prompts and not pending and all(re.search(r"\d", p) for p in prompts) and not busy:
            return prompts, ""
        if prompts and not pending and any(c["errors"] for c in code_cells(page, name)):
            return prompts, ""  # an error stopped the run; the caller reports it
        if pending and pending[0] != running:  # cells run in order: the first pending one is the running one
            running, running_since = pending[0], time.time()
        if pending and time.time() - running_since > cell_timeout_s:
            return prompts, f"code cell {running} ran past the {cell_timeout_s:g} s cell timeout"
    return prompts, f"the notebook ran past {timeout_s:g} s"


def shut_down_kernels(lab: Lab) -> None:
    """Stop the kernels the notebooks started, so the next notebook does not share the machine with idle ones."""
    headers = {"Authorization": f"token {lab.token}"}
    with urllib.request.urlopen(urllib.request.Request(f"{lab.base}/api/kernels", headers=headers), timeout=10) as r:
        kernels = json.load(r)
    for kernel in kernels:
        urllib.request.urlopen(urllib.request.Request(f"{lab.base}/api/kernels/{kernel['id']}", headers=headers,
                                                      method="DELETE"), timeout=30).close()

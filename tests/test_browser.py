"""End to end in a real browser: JupyterLab on 127.0.0.1 with a token, every notebook opened in headless Chromium, all
cells run, widgets and plots rendered, a slider moved, a quiz checked; a screenshot per notebook in test-artifacts/.

Where this test runs it is the run's only execution of the notebooks (tests/conftest.py deselects nbval's), so it
fails as nbval would: on any error output, on any cell left unrun, and on a cell running past nbval's cell timeout.
Needs Debian's chromium (`apt-get install -y chromium`; .ci/run installs it) and the playwright package (test extra).
Never run `playwright install`: the test drives the system browser. COURSE_NO_BROWSER=1 skips it (nbval runs instead).
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
import pytest

from conftest import CHROMIUM, ROOT, browser_missing

if browser_missing():
    pytest.skip(f"The browser tests are skipped, nbval executes the notebooks: {browser_missing()}.",
                allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[test]' brings playwright")

ARTIFACTS = ROOT / "test-artifacts"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]
# Console messages that come from JupyterLab itself running offline, not from the course.
BENIGN_CONSOLE = [r"Failed to load resource", r"net::ERR_", r"favicon", r"lsp", r"language server",
                  r"jupyterlab_pygments", r"404 \(Not Found\)", r"/api/.*news", r"announcements"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server on 127.0.0.1 with a random token, serving a copy of notebooks/ (so nothing the browser runs
    or autosaves touches the committed notebooks), its settings and workspaces in a temporary folder."""
    home = tmp_path_factory.mktemp("lab")
    shutil.copytree(ROOT / "notebooks", home / "root" / "notebooks")
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(home / "config"), JUPYTER_RUNTIME_DIR=str(home / "runtime"),
               JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"), JUPYTERLAB_SETTINGS_DIR=str(home / "settings"))
    # No news or update checks (they would try the network), no autosave, every cell rendered (no windowing),
    # and the notebook's own kernel started without asking. window.jupyterapp is exposed so the test reads the
    # notebook model's outputs (errors by output type, as nbval sees them, not by the text they show).
    for plugin, values in {"apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
                           "docmanager-extension/plugin": {"autosave": False},
                           "notebook-extension/tracker": {"windowingMode": "none"}}.items():
        folder, name = plugin.split("/")
        target = home / "settings" / "@jupyterlab" / folder
        target.mkdir(parents=True, exist_ok=True)
        (target / f"{name}.jupyterlab-settings").write_text(json.dumps(values))
    log = open(home / "lab.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--ServerApp.port={port}",
         "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={home / 'root'}",
         "--ServerApp.port_retries=0", "--allow-root", "--LabApp.extension_manager=readonly", "--LabApp.news_url=",
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate", "--LabApp.expose_app_in_browser=True"],
        env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
            break
        except OSError:
            if proc.poll() is not None:
                pytest.fail(f"JupyterLab exited: {(home / 'lab.log').read_text()[-2000:]}")
            time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail(f"JupyterLab did not start in 60 s: {(home / 'lab.log').read_text()[-2000:]}")
    yield base, token
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        yield chromium
        chromium.close()


def _menu(page, menu: str, item: str) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{menu}$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{re.escape(item)}$")).first.click()


def _accept_kernel_dialog(page) -> None:
    """JupyterLab may ask which kernel to start: take the notebook's own (python3)."""
    try:
        page.wait_for_selector(".jp-Dialog .jp-mod-accept", timeout=5_000)
    except sync_api.TimeoutError:
        return
    page.locator(".jp-Dialog .jp-mod-accept").click()


def _shut_down_kernels(base: str, token: str) -> None:
    """Stop the kernels the notebooks started, so the next notebook does not share the machine with idle ones."""
    headers = {"Authorization": f"token {token}"}
    with urllib.request.urlopen(urllib.request.Request(f"{base}/api/kernels", headers=headers), timeout=10) as r:
        kernels = json.load(r)
    for kernel in kernels:
        urllib.request.urlopen(urllib.request.Request(f"{base}/api/kernels/{kernel['id']}", headers=headers,
                                                      method="DELETE"), timeout=30).close()


def _code_cells(page, name: str) -> list[dict]:
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
    assert cells is not None, f"{name}: JupyterLab's notebook model is not reachable (window.jupyterapp)"
    return cells


def _until(condition, timeout_s: float) -> bool:
    """Poll condition() every 0.1 s until it holds (True) or timeout_s passes (False): no fixed sleeps to wait out."""
    deadline = time.time() + timeout_s
    while True:
        if condition():
            return True
        if time.time() > deadline:
            return False
        time.sleep(0.1)


def _titles(page) -> list[str]:
    return page.evaluate("""() => Array.from(document.querySelectorAll('.js-plotly-plot'))
        .map(p => (p.querySelector('.gtitle') || {}).textContent || '')""")


def _run_all_and_wait(page, name: str, timeout_s: float, cell_timeout_s: float) -> tuple[list[str], str]:
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
        prompts = page.locator(".jp-CodeCell .jp-InputPrompt").all_inner_texts()
        pending = [i for i, p in enumerate(prompts) if "*" in p]
        busy = page.locator(".jp-Notebook-ExecutionIndicator[data-status='busy']").count()
        if prompts and not pending and all(re.search(r"\d", p) for p in prompts) and not busy:
            return prompts, ""
        if prompts and not pending and any(c["errors"] for c in _code_cells(page, name)):
            return prompts, ""  # an error stopped the run; the caller reports it
        if pending and pending[0] != running:  # cells run in order: the first pending one is the running one
            running, running_since = pending[0], time.time()
        if pending and time.time() - running_since > cell_timeout_s:
            return prompts, f"code cell {running} ran past the {cell_timeout_s:g} s cell timeout"
    return prompts, f"the notebook ran past {timeout_s:g} s"


def _plots_state(page) -> str:
    """A fingerprint of every plotly plot on the page: the geometry of its drawn traces."""
    return page.evaluate("""() => Array.from(document.querySelectorAll('.js-plotly-plot'))
        .map(p => Array.from(p.querySelectorAll('.trace path, .trace rect, .point path, .hm image, .plot path'))
            .map(e => (e.getAttribute('d') || '') + (e.getAttribute('href') || '') + (e.getAttribute('x') || '')
                      + (e.getAttribute('height') || '')).join('|')).join('#')""")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_in_a_real_browser(lab, browser, path, request):
    base, token = lab
    ARTIFACTS.mkdir(exist_ok=True)
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    console_errors: list[str] = []
    page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: console_errors.append(f"pageerror: {e}"))
    try:
        page.goto(f"{base}/lab/tree/notebooks/{path.name}?reset&token={token}", wait_until="domcontentloaded")
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
        _accept_kernel_dialog(page)
        page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=60_000)
        n_code = page.locator(".jp-Notebook .jp-CodeCell").count()
        cell_timeout = float(request.config.getoption("nbval_cell_timeout"))
        prompts, stopped = _run_all_and_wait(page, path.name, timeout_s=300, cell_timeout_s=cell_timeout)
        assert not stopped, f"{path.name}: {stopped}; prompts: {prompts}"
        cells = _code_cells(page, path.name)
        errors = [(i, c["errors"][0]) for i, c in enumerate(cells) if c["errors"]]
        tracebacks = page.locator(".jp-OutputArea-output").filter(has_text="Traceback").all_inner_texts()
        assert not errors, f"{path.name}: code cell {errors[0][0]} failed: {errors[0][1]}\n" \
            + "\n".join(t[-1500:] for t in tracebacks[:1])
        assert not tracebacks, f"{path.name}: a cell printed a traceback:\n{tracebacks[0][-1500:]}"
        unrun = [i for i, c in enumerate(cells) if c["count"] is None]
        assert len(prompts) == n_code == len(cells) and not unrun and all(re.search(r"\d", p) for p in prompts), \
            f"{path.name}: not every cell ran (code cells {unrun} did not): {prompts}"

        # Widgets rendered as widgets (not as text, not as an error), and plotly figures drawn.
        _until(lambda: "Loading widget..." not in " ".join(page.locator(".jp-OutputArea-output").all_inner_texts())
               and all(t.strip() for t in _titles(page)), timeout_s=15)  # then the checks below say what is wrong
        outputs = " ".join(page.locator(".jp-OutputArea-output").all_inner_texts())
        for bad in ("Error displaying widget", "Loading widget...", "FigureWidget({", "Panel(controls"):
            assert bad not in outputs, f"{path.name}: a widget did not render ({bad!r})"
        assert page.locator(".jupyter-widgets").count() > 0, f"{path.name}: no widget area rendered"
        plots = page.locator(".js-plotly-plot")
        titles = _titles(page)
        blank = [i for i, t in enumerate(titles) if not t.strip()]
        for i in blank:
            plots.nth(i).screenshot(path=str(ARTIFACTS / f"{path.stem}-blank-plot-{i}.png"))
        assert not blank, f"{path.name}: plotly figures {blank} of {len(titles)} drew blank (no title, no data)"
        sliders = page.locator(".widget-slider .noUi-handle, .widget-slider input[type=range]")
        if sliders.count():
            assert plots.count() > 0, f"{path.name}: sliders but no plotly plot rendered"
            settled = [_plots_state(page)]  # plots still drawing would look like a slider's effect: wait them out

            def still():
                time.sleep(0.3)
                settled.append(_plots_state(page))
                return settled[-1] == settled[-2]

            _until(still, timeout_s=10)
            before = settled[-1]
            changed = False
            for i in range(min(sliders.count(), 4)):  # some sliders sit at their maximum; try a few
                handle = sliders.nth(i)
                handle.scroll_into_view_if_needed()
                handle.focus()
                for key in ("ArrowRight", "ArrowLeft"):  # right first; a slider already at its maximum goes left
                    for _ in range(3 if key == "ArrowRight" else 6):
                        page.keyboard.press(key)
                    if _until(lambda: _plots_state(page) != before, timeout_s=3):
                        changed = True
                        break
                if changed:
                    break
            assert changed, f"{path.name}: moving a slider did not change any plot"

        # A quiz Check button gives feedback.
        check = page.locator("button", has_text=re.compile(r"^\s*Check\s*$"))
        if check.count():
            quiz = check.first.locator("xpath=ancestor::div[contains(@class,'widget-vbox')][1]")
            options = quiz.locator(".widget-radio-box input, .widget-toggle-button, input[type=number], "
                                   ".widget-text input")
            if options.count():
                first = options.first
                if first.get_attribute("type") in ("number", "text"):
                    first.fill("1")
                else:
                    first.click()
            check.first.scroll_into_view_if_needed()
            check.first.click()
            feedback = re.compile(r"[Cc]orrect|[Nn]ot quite|[Ii]ncorrect|expected|[Ww]rong|[Tt]ry")
            _until(lambda: feedback.search(quiz.inner_text()), timeout_s=5)
            text = quiz.inner_text()
            assert feedback.search(text), \
                f"{path.name}: pressing Check showed no feedback: {text[:300]}"

        page.screenshot(path=str(ARTIFACTS / f"{path.stem}.png"), full_page=True)
        serious = [m for m in console_errors if not any(re.search(b, m, re.I) for b in BENIGN_CONSOLE)]
        assert not serious, f"{path.name}: browser console errors: {serious[:5]}"
    except Exception:
        page.screenshot(path=str(ARTIFACTS / f"{path.stem}-failure.png"), full_page=True)
        raise
    finally:
        context.close()
        _shut_down_kernels(base, token)

"""End to end in a real browser: JupyterLab on 127.0.0.1 with a token, every notebook opened in headless Chromium, all
cells run, widgets and plots rendered, a slider moved, a quiz checked; a screenshot per notebook in test-artifacts/.

Needs Debian's chromium (`apt-get install -y chromium`; .ci/run installs it) and the playwright package (test extra).
Never run `playwright install`: the test drives the system browser.
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
from pathlib import Path

import pytest

from conftest import ROOT

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
if not Path(CHROMIUM).exists():
    pytest.skip("Chromium is not installed, so the browser tests are skipped. Install it with "
                "`sudo apt-get install -y chromium` (Debian/Ubuntu); .ci/run does this on CI.", allow_module_level=True)
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
    # and the notebook's own kernel started without asking.
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
         "--ServerApp.port_retries=0", "--allow-root", "--LabApp.extension_manager=readonly", "--LabApp.news_url=", "--LabApp.check_for_updates_class="
         "jupyterlab.NeverCheckForUpdate"],
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


def _run_all_and_wait(page, timeout_s: float) -> list[str]:
    """Run every cell; wait until no cell is pending. Returns the input prompts' texts."""
    _menu(page, "Run", "Run All Cells")
    _accept_kernel_dialog(page)
    deadline = time.time() + timeout_s
    prompts: list[str] = []
    while time.time() < deadline:
        time.sleep(1.0)
        prompts = page.locator(".jp-CodeCell .jp-InputPrompt").all_inner_texts()
        busy = page.locator(".jp-Notebook-ExecutionIndicator[data-status='busy']").count()
        if prompts and not any("*" in p for p in prompts) and all(re.search(r"\d", p) for p in prompts) \
                and not busy:
            return prompts
        if prompts and not any("*" in p for p in prompts) and page.locator(".jp-OutputArea-output") \
                .filter(has_text="Traceback").count():
            return prompts  # an error stopped the run; the caller reports it
    return prompts


def _plots_state(page) -> str:
    """A fingerprint of every plotly plot on the page: the geometry of its drawn traces."""
    return page.evaluate("""() => Array.from(document.querySelectorAll('.js-plotly-plot'))
        .map(p => Array.from(p.querySelectorAll('.trace path, .trace rect, .point path, .hm image, .plot path'))
            .map(e => (e.getAttribute('d') || '') + (e.getAttribute('href') || '') + (e.getAttribute('x') || '')
                      + (e.getAttribute('height') || '')).join('|')).join('#')""")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_in_a_real_browser(lab, browser, path):
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
        prompts = _run_all_and_wait(page, timeout_s=300)
        tracebacks = page.locator(".jp-OutputArea-output").filter(has_text="Traceback").all_inner_texts()
        assert not tracebacks, f"{path.name}: a cell failed:\n{tracebacks[0][-1500:]}"
        assert len(prompts) == n_code and all(re.search(r"\d", p) for p in prompts), \
            f"{path.name}: not every cell ran: {prompts}"

        # Widgets rendered as widgets (not as text, not as an error), and plotly figures drawn.
        page.wait_for_timeout(1500)
        outputs = " ".join(page.locator(".jp-OutputArea-output").all_inner_texts())
        for bad in ("Error displaying widget", "Loading widget...", "FigureWidget({", "Panel(controls"):
            assert bad not in outputs, f"{path.name}: a widget did not render ({bad!r})"
        assert page.locator(".jupyter-widgets").count() > 0, f"{path.name}: no widget area rendered"
        plots = page.locator(".js-plotly-plot")
        titles = page.evaluate("""() => Array.from(document.querySelectorAll('.js-plotly-plot'))
            .map(p => (p.querySelector('.gtitle') || {}).textContent || '')""")
        blank = [i for i, t in enumerate(titles) if not t.strip()]
        for i in blank:
            plots.nth(i).screenshot(path=str(ARTIFACTS / f"{path.stem}-blank-plot-{i}.png"))
        assert not blank, f"{path.name}: plotly figures {blank} of {len(titles)} drew blank (no title, no data)"
        sliders = page.locator(".widget-slider .noUi-handle, .widget-slider input[type=range]")
        if sliders.count():
            assert plots.count() > 0, f"{path.name}: sliders but no plotly plot rendered"
            before = _plots_state(page)
            changed = False
            for i in range(min(sliders.count(), 4)):  # some sliders sit at their maximum; try a few
                handle = sliders.nth(i)
                handle.scroll_into_view_if_needed()
                handle.focus()
                for key in ("ArrowRight", "ArrowLeft"):  # right first; a slider already at its maximum goes left
                    for _ in range(3 if key == "ArrowRight" else 6):
                        page.keyboard.press(key)
                    page.wait_for_timeout(1500)
                    if _plots_state(page) != before:
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
            page.wait_for_timeout(1500)
            text = quiz.inner_text()
            assert re.search(r"[Cc]orrect|[Nn]ot quite|[Ii]ncorrect|expected|[Ww]rong|[Tt]ry", text), \
                f"{path.name}: pressing Check showed no feedback: {text[:300]}"

        page.screenshot(path=str(ARTIFACTS / f"{path.stem}.png"), full_page=True)
        serious = [m for m in console_errors if not any(re.search(b, m, re.I) for b in BENIGN_CONSOLE)]
        assert not serious, f"{path.name}: browser console errors: {serious[:5]}"
    except Exception:
        page.screenshot(path=str(ARTIFACTS / f"{path.stem}-failure.png"), full_page=True)
        raise
    finally:
        context.close()

"""Present a notebook live in front of a class: its widgets and figures, no code, one slide at a time, offline.

python -m course_utils.present notebooks/04_pre_vs_post_ln.ipynb [--port N] [--no-browser]

Starts Voilà on 127.0.0.1 with the course's template (course_utils/assets/voila/templates/course-present). Voilà runs
the notebook in a fresh kernel when the page opens and shows its outputs with the code stripped; the template turns
the page into slides by the notebooks' slide metadata (course_utils/slides.py), with PageDown/PageUp/Space/arrow keys
and on-screen buttons, and keeps every request on this machine.

Why this route. jupyterlab-rise shows every course panel as raw text (jupyterlab-contrib/rise#119). Voilà's own
`reveal` template renders the widgets, but reveal.js lays every slide out at a fixed 960x700 and scales it to the
window, so a live figure is drawn for 960 px whatever the screen; its style sheets come from a CDN, so offline the
deck is unstyled (tried at 1366x768: the content shifted left out of view, reveal's "Resume presentation" overlay
showing). The course template extends Voilà's `lab` template instead, which draws widgets and figures as the
notebook does, at the page's own width, and adds a small pager of its own (static/present.js): the cells of the
other slides fold to no height, so nothing is scaled and nothing needs a redraw when its slide comes up, and a
focused widget keeps its keys. Checked in Chromium by tests/test_present.py.
"""
from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

__all__ = ["TEMPLATE", "voila_command", "voila_environment", "main"]

TEMPLATE = "course-present"
ASSETS = Path(__file__).resolve().parent / "assets"  # holds voila/templates/<TEMPLATE>, found through JUPYTER_PATH
HOST = "127.0.0.1"
DEFAULT_PORT = 8866  # Voilà's own default
KEYS = ("PageDown, Space or ArrowRight: next (a slide taller than the screen scrolls first); PageUp or ArrowLeft: "
        "back; Home/End: first/last. Keys go to a widget while it has focus (a slider's arrows move the slider); "
        "Esc or a click beside it gives them back to the slides.")


def voila_environment(base: dict | None = None) -> dict:
    """The environment Voilà runs in: the course's template folder first on JUPYTER_PATH, so --template finds it."""
    env = dict(os.environ if base is None else base)
    env["JUPYTER_PATH"] = os.pathsep.join(p for p in (str(ASSETS), env.get("JUPYTER_PATH", "")) if p)
    return env


def voila_command(notebook: Path, port: int, open_browser: bool) -> list[str]:
    """Voilà on HOST:port with the course template, on that port or not at all (so the printed URL is the right
    one), tracebacks shown (the lecturer sees what went wrong), the light theme."""
    command = [sys.executable, "-m", "voila", str(notebook), f"--template={TEMPLATE}", "--theme=light",
               f"--port={port}", f"--Voila.ip={HOST}", "--Voila.port_retries=0", "--show_tracebacks=True"]
    return command + ([] if open_browser else ["--no-browser"])


def _port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _port(asked: int | None) -> tuple[int | None, str]:
    """The port to serve on and a note for the user; None with the reason when the asked-for port is taken."""
    if asked is not None:
        if not 0 < asked < 65536:
            return None, f"--port {asked} is not a port number (1-65535)."
        if not _port_is_free(asked):
            return None, f"port {asked} on {HOST} is in use (another presenter?): pick another with --port."
        return asked, ""
    if _port_is_free(DEFAULT_PORT):
        return DEFAULT_PORT, ""
    port = _free_port()
    return port, f"(port {DEFAULT_PORT} is in use, so port {port})"


def _notebook_problem(path: Path) -> str:
    """Why path cannot be presented, or "" when it can."""
    if path.suffix != ".ipynb":
        return f"{path} is not a notebook (.ipynb); for example notebooks/04_pre_vs_post_ln.ipynb"
    if not path.is_file():
        return f"{path} does not exist; the course's notebooks are in notebooks/"
    return ""


def _serve(command: list[str], env: dict) -> int:
    """Run Voilà until it stops. Ctrl+C reaches Voilà as well and stops it; a SIGTERM sent to this process is passed
    on, so stopping the presenter never leaves a server (and its kernel) running."""
    server = subprocess.Popen(command, env=env)
    signal.signal(signal.SIGTERM, lambda signum, frame: server.terminate())
    try:
        return server.wait()
    except KeyboardInterrupt:
        server.terminate()
        server.wait(timeout=30)
        print("Stopped.")
        return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_utils.present", description=__doc__.split("\n\n")[0])
    parser.add_argument("notebook", type=Path, help="the notebook to present, e.g. notebooks/04_pre_vs_post_ln.ipynb")
    parser.add_argument("--port", type=int, help=f"the port on {HOST} (default {DEFAULT_PORT}, or a free one)")
    parser.add_argument("--no-browser", action="store_true", help="print the address, do not open a browser")
    args = parser.parse_args(argv)
    problem = _notebook_problem(args.notebook)
    port, note = _port(args.port)
    if problem or port is None:
        print(f"course_utils.present: {problem or note}", file=sys.stderr)
        return 2
    print(f"Presenting {args.notebook.name} at http://{HOST}:{port}/ {note}".rstrip(), flush=True)
    print("The page runs the notebook in a fresh kernel when it opens; the first slide shows when every cell has run.")
    print(f"Keys: {KEYS}")
    print("Stop with Ctrl+C here.", flush=True)
    return _serve(voila_command(args.notebook.resolve(), port, not args.no_browser), voila_environment())


if __name__ == "__main__":
    sys.exit(main())

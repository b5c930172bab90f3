"""Where the course's shipped files are: quizzes/ and data/, as package data or in the course folder.

A wheel (`pip install .`, the `course-grade` script) carries them inside the package as `course_utils._quizzes` and
`course_utils._data` (pyproject.toml maps the top-level folders there), read with importlib.resources. An editable
install (`pip install -e .`) and a plain checkout read the top-level folders themselves.
"""
from __future__ import annotations

import importlib.resources
from pathlib import Path

__all__ = ["course_folder"]

_ROOT = Path(__file__).resolve().parent.parent
_PACKAGES = {"quizzes": "course_utils._quizzes", "data": "course_utils._data"}


def course_folder(name: str) -> Path:
    """The folder `quizzes` or `data`: the installed package data if there is any, else the course folder's own."""
    try:
        shipped = importlib.resources.files(_PACKAGES[name])
    except ModuleNotFoundError:
        shipped = None
    if shipped is not None and isinstance(shipped, Path) and shipped.is_dir():
        return shipped
    return _ROOT / name

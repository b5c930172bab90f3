"""Where the course's shipped files are: quizzes/ and data/, as package data or in the course folder.

A wheel (`pip install .`, the `course-grade` script) carries them inside the package as `course_utils._quizzes` and
`course_utils._data` (pyproject.toml maps the top-level folders there), found with importlib. An editable
install (`pip install -e .`) and a plain checkout read the top-level folders themselves.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

__all__ = ["course_folder"]

_ROOT = Path(__file__).resolve().parent.parent
_PACKAGES = {"quizzes": "course_utils._quizzes", "data": "course_utils._data"}


def course_folder(name: str) -> Path:
    """The folder `quizzes` or `data`: the installed package data if there is any, else the course folder's own."""
    try:
        # The shipped folders hold no __init__.py: namespace packages, whose files() is not a plain Path, so ask for
        # the folder the import system found.
        spec = importlib.util.find_spec(_PACKAGES[name])
    except ModuleNotFoundError:
        spec = None
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        if Path(location).is_dir():
            return Path(location)
    return _ROOT / name

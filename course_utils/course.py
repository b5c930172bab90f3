"""The course manifest: each notebook, the demos module that serves it, its quizzes and its run-time budget.

One entry per notebook. The benchmark, the tests, the review notebook and the README's course map read it, and
`register_panel` finds a panel's notebook here from the module that defines it, so no notebook id is typed twice.
Adding a notebook is one entry here plus its files: notebooks/NN_topic.ipynb, quizzes/NN_topic.toml and, if it has
panels, course_utils/demos/<demos>.py.
"""
from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

__all__ = ["Notebook", "NOTEBOOKS", "notebook", "notebook_ids", "notebook_of_module", "lesson_sources",
           "lesson_functions", "lesson_parameters", "NOTEBOOK_DIR", "LESSON_TAG"]

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"
LESSON_TAG = "lesson"  # a code cell with this tag defines a function the notebook teaches and hands to its panels


@dataclass(frozen=True)
class Notebook:
    """One notebook: `id` is its file stem, `demos` the module in course_utils.demos holding its panels (None when it
    has none), `quizzes` the quiz files its answer cells use, `budget_s` its top-to-bottom run time on a 2-core CPU
    and `handler_ms` the median latency its widget handlers must stay under (python -m course_utils.bench)."""
    id: str
    demos: str | None
    quizzes: tuple[str, ...]
    budget_s: int
    handler_ms: int = 50

    @property
    def path(self) -> Path:
        return NOTEBOOK_DIR / f"{self.id}.ipynb"

    @property
    def demos_module(self) -> str | None:
        return None if self.demos is None else f"course_utils.demos.{self.demos}"


NOTEBOOKS: tuple[Notebook, ...] = (
    Notebook("00_start_here", "start_here", ("00_start_here",), 30),
    Notebook("01_why_normalize", "why_normalize", ("01_why_normalize",), 30),
    Notebook("02_batchnorm_and_padding", "batchnorm", ("02_batchnorm_and_padding",), 30),
    Notebook("03_layernorm", "layernorm", ("03_layernorm",), 30),
    Notebook("04_pre_vs_post_ln", "placement", ("04_pre_vs_post_ln",), 90),
    Notebook("05_rmsnorm", "rmsnorm", ("05_rmsnorm",), 60),
    Notebook("06_qk_norm_and_softcapping", "qk_norm", ("06_qk_norm_and_softcapping",), 60),
    Notebook("07_review", "review", ("07_review", "chapter_2_4", "self_check", "interview"), 30),
    Notebook("08_real_model", "real_model", ("08_real_model",), 60, handler_ms=100),  # a real 6-layer model
)
_BY_ID = {nb.id: nb for nb in NOTEBOOKS}


def notebook_ids() -> list[str]:
    """Every notebook id, in course order."""
    return [nb.id for nb in NOTEBOOKS]


def notebook(notebook_id: str) -> Notebook:
    """The manifest entry of one notebook; a ValueError naming the known ids if there is none."""
    try:
        return _BY_ID[notebook_id]
    except (KeyError, TypeError):
        raise ValueError(f"no notebook {notebook_id!r} in the course manifest (course_utils/course.py); "
                         f"known: {', '.join(_BY_ID)}") from None


def notebook_of_module(module: str) -> str:
    """The id of the notebook whose demos module is `module` (e.g. "course_utils.demos.placement")."""
    for nb in NOTEBOOKS:
        if nb.demos_module == module:
            return nb.id
    raise ValueError(f"{module} is no notebook's demos module in the course manifest (course_utils/course.py): "
                     "add the notebook's entry, or register the panel from its own demos module")


def lesson_sources(path: Path) -> list[str]:
    """The sources of a notebook file's code cells tagged `lesson`, in order."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in cells
            if c["cell_type"] == "code" and LESSON_TAG in c.get("metadata", {}).get("tags", [])]


def lesson_functions(notebook_id: str) -> dict[str, object]:
    """The functions a notebook teaches, by name: its `lesson`-tagged code cells run in a fresh namespace.

    For the benchmark and the tests, which build a notebook's panels with the notebook's own code; a lesson cell only
    imports and defines, so running it has no effect beyond the names it binds. Read once per version of the file.
    """
    path = notebook(notebook_id).path
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: lesson functions are read from the course folder's notebooks/")
    stat = path.stat()
    return dict(_run_lessons(notebook_id, path, stat.st_mtime_ns, stat.st_size))


@lru_cache(maxsize=32)
def _run_lessons(notebook_id: str, path: Path, _mtime_ns: int, _size: int) -> dict[str, object]:
    namespace: dict[str, object] = {"__name__": f"lesson_{notebook_id}"}
    defined: list[str] = []
    for source in lesson_sources(path):
        tree = ast.parse(source, filename=f"{path.name} (lesson cell)")
        defined += [node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))]
        exec(compile(tree, f"{path.name} (lesson cell)", "exec"), namespace)
    return {name: namespace[name] for name in defined}


def lesson_parameters(function) -> list[str]:
    """The lesson functions a panel factory or claim experiment asks for: its parameters without a default, by name."""
    import inspect

    return [p.name for p in inspect.signature(function).parameters.values()
            if p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]

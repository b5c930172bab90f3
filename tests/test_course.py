"""The course manifest (course_utils/course.py) against the files it names, and the import layers of course_utils."""
from __future__ import annotations

import ast
import importlib
import json
import re
import sys

import pytest

from conftest import ROOT
from course_utils import course
from course_utils.panel import PANELS, register_panel
from course_utils.resources import course_folder

PACKAGE = ROOT / "course_utils"


def test_the_manifest_lists_every_notebook_in_course_order():
    files = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))
    assert course.notebook_ids() == files


@pytest.mark.parametrize("entry", course.NOTEBOOKS, ids=lambda e: e.id)
def test_each_entry_names_files_that_exist(entry):
    nb = json.loads(entry.path.read_text(encoding="utf-8"))
    assert nb["metadata"]["course"]["notebook"] == entry.id
    for quiz in entry.quizzes:
        assert (course_folder("quizzes") / f"{quiz}.toml").is_file(), f"{entry.id}: no quizzes/{quiz}.toml"
    assert entry.id in entry.quizzes, f"{entry.id}: its checkpoint quiz must be named after it"
    assert 0 < entry.budget_s <= 300


@pytest.mark.parametrize("entry", [e for e in course.NOTEBOOKS if e.demos], ids=lambda e: e.id)
def test_each_demos_module_registers_panels_for_its_own_notebook_only(entry):
    module = importlib.import_module(entry.demos_module)
    mine = {name for name, (notebook, factory) in PANELS.items() if factory.__module__ == module.__name__}
    assert mine, f"{entry.demos_module} registers no panel"
    assert {PANELS[name][0] for name in mine} == {entry.id}


def test_a_panel_outside_a_manifest_demos_module_is_refused_and_a_misspelt_id_is_named():
    def stray():
        return None

    stray.__module__ = "course_utils.demos.placemnt"
    with pytest.raises(ValueError, match="course_utils.demos.placemnt is no notebook's demos module"):
        register_panel()(stray)
    assert "stray" not in PANELS
    with pytest.raises(ValueError, match="known: 00_start_here"):
        course.notebook("09_new")


def test_lesson_functions_run_only_tagged_cells(tmp_path, monkeypatch):
    cells = [{"cell_type": "code", "metadata": {"tags": ["lesson"]}, "source": ["import math\n", "def f(x):\n",
                                                                                 "    return math.sqrt(x)\n"]},
             {"cell_type": "code", "metadata": {}, "source": "raise SystemExit('an untagged cell ran')"},
             {"cell_type": "code", "metadata": {"tags": ["lesson"]}, "source": "def g(x):\n    return f(x) + 1\n"}]
    (tmp_path / "00_start_here.ipynb").write_text(json.dumps({"cells": cells}), encoding="utf-8")
    monkeypatch.setattr(course, "NOTEBOOK_DIR", tmp_path)
    lessons = course.lesson_functions("00_start_here")
    assert sorted(lessons) == ["f", "g"] and lessons["g"](9.0) == 4.0


def test_the_readme_course_map_follows_the_manifest():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (\d\d) \| \[`(\w+)`\]\(notebooks/(\w+)\.ipynb\)", readme, re.M)
    assert [r[1] for r in rows] == course.notebook_ids()
    assert all(num == stem[:2] and stem == link for num, stem, link in rows)


# ---- import layers ------------------------------------------------------------------------------------------------

def _module_name(path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """course_utils module -> the course_utils modules it imports anywhere in its code (lazy imports included)."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[:len(anchor) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            found |= {t for t in targets if t in modules and t != name}
        graph[name] = found
    return graph


def test_course_utils_has_no_import_cycle():
    graph = _imports()
    state: dict[str, int] = {}

    def visit(node, path):
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = path[path.index(nxt):] + [nxt] if nxt in path else [node, nxt]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])


# Above the demos, like the notebooks: the benchmark builds and times what the notebooks show.
TOP = {"course_utils.bench"}


def test_no_demos_module_imports_another_and_nothing_below_imports_demos():
    graph = _imports()
    for module, targets in graph.items():
        demos = {t for t in targets if t.startswith("course_utils.demos.")}
        if module.startswith("course_utils.demos."):
            assert not demos, f"{module} imports {sorted(demos)}: a demos module uses only the layers below it"
        elif module not in TOP:
            assert not demos, f"{module} imports {sorted(demos)}: only notebooks and the benchmark import demos"


def test_the_import_check_sees_a_demos_to_demos_import(tmp_path, monkeypatch):
    """The control: the checker is not blind to the import it forbids."""
    fake = tmp_path / "course_utils" / "demos"
    fake.mkdir(parents=True)
    (tmp_path / "course_utils" / "__init__.py").write_text("")
    (fake / "__init__.py").write_text("")
    (fake / "a.py").write_text("from .b import thing\n")
    (fake / "b.py").write_text("def thing():\n    from . import a\n")
    this = sys.modules[__name__]
    monkeypatch.setattr(this, "ROOT", tmp_path)
    monkeypatch.setattr(this, "PACKAGE", tmp_path / "course_utils")
    assert _imports()["course_utils.demos.a"] == {"course_utils.demos.b"}
    with pytest.raises(pytest.fail.Exception, match="import cycle"):
        test_course_utils_has_no_import_cycle()
    with pytest.raises(AssertionError, match="course_utils.demos.a imports \\['course_utils.demos.b'\\]"):
        test_no_demos_module_imports_another_and_nothing_below_imports_demos()


def _readme_layers() -> dict[str, int]:
    """The layer the README's table gives each course_utils module (`quiz/` and `demos/<module>.py` cover packages)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("## How the course is built", 1)[1].split("\n## ", 1)[0]
    layers = {}
    for layer, cell in re.findall(r"^\| (\d) \| (.+?) \|", block, re.M):
        for name in re.findall(r"`([\w/<>.]+)`", cell):
            layers[name] = int(layer)
    return layers


def _layer_of(module: str, layers: dict[str, int]) -> int:
    rel = module.removeprefix("course_utils").lstrip(".")
    if rel.startswith("quiz"):
        return layers["quiz/"]
    if rel.startswith("demos"):
        return layers["demos/<module>.py"]
    return layers["__init__.py" if not rel else f"{rel}.py"]


def test_the_readme_describes_every_module():
    layers = _readme_layers()
    for m in _imports():
        try:
            _layer_of(m, layers)
        except KeyError:
            pytest.fail(f"README's 'How the course is built' gives no layer for {m}")


def test_every_module_imports_only_from_the_layers_below_it():
    """The README's layer table is the rule: each import goes down a layer (the quiz package also inside itself)."""
    layers = _readme_layers()
    for module, targets in _imports().items():
        mine = _layer_of(module, layers)
        for target in targets:
            if module.startswith("course_utils.quiz") and target.startswith("course_utils.quiz"):
                continue
            theirs = _layer_of(target, layers)
            assert theirs < mine, (f"{module} (layer {mine}) imports {target} (layer {theirs}): move one of them, or "
                                   "give the README's table a reason")


def test_the_layer_check_sees_an_upward_import(monkeypatch):
    """The control: norms importing panel (layer 0 -> 1) fails the check."""
    monkeypatch.setattr(sys.modules[__name__], "_imports", lambda: {"course_utils.norms": {"course_utils.panel"}})
    with pytest.raises(AssertionError, match="course_utils.norms \\(layer 0\\) imports course_utils.panel"):
        test_every_module_imports_only_from_the_layers_below_it()


def test_lesson_functions_are_read_again_when_the_notebook_changes(tmp_path, monkeypatch):
    path = tmp_path / "00_start_here.ipynb"
    monkeypatch.setattr(course, "NOTEBOOK_DIR", tmp_path)

    def write(value):
        cell = {"cell_type": "code", "metadata": {"tags": ["lesson"]}, "source": f"def f():\n    return {value}\n"}
        path.write_text(json.dumps({"cells": [cell]}), encoding="utf-8")

    write(1)
    first = course.lesson_functions("00_start_here")["f"]
    assert course.lesson_functions("00_start_here")["f"] is first  # read once
    write(22)  # another size, so a coarse file clock cannot hide the change
    assert course.lesson_functions("00_start_here")["f"]() == 22

"""Lecture decks and reading pages that show every figure of a run and work with no network.

python -m course_utils.deck notebooks/04_pre_vs_post_ln.ipynb [more.ipynb ...] --out decks/
       [--to slides|html|notebook] [--no-execute] [--code] [--timeout SECONDS]

Each notebook runs in a fresh kernel in its own folder, as in JupyterLab. At the end the same kernel hands back a
snapshot of every widget it displayed (course_utils.snapshot: the figures as plotly JSON, the controls as text),
and those replace the widget outputs, whose live state no file can keep; plain plotly outputs become drawn
figures. Then:
  --to slides    (default) NAME.slides.html, a reveal.js deck from the cells' slide metadata (course_utils.slides),
                 code hidden unless --code
  --to html      NAME.html, a reading page of the whole notebook, code included
  --to notebook  NAME.ipynb, the executed notebook with the snapshots as outputs and no widget state (hundreds of
                 KB, where nbconvert --execute writes 10-26 MB of widget code)
Decks and pages inline reveal.js, MathJax 3 (both vendored in course_utils/assets/) and plotly.js, so the one HTML
file opens anywhere. --no-execute keeps the outputs the notebook has (a widget shows the snapshot install() left
beside it, if any).
"""
from __future__ import annotations

import argparse
import functools
import re
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from .snapshot import PLOTLY_MIME, WIDGET_MIME, responsive, snapshot_html

__all__ = ["FORMATS", "DeckError", "read_notebook", "execute", "widget_ids", "static_outputs", "export", "build",
           "main"]

FORMATS = {"slides": ".slides.html", "html": ".html", "notebook": ".ipynb"}
SNAPSHOTS_MIME = "application/x.course-snapshots+json"
CELL_TIMEOUT = 600  # seconds, nbval's cell timeout in pyproject.toml
_ASSETS = Path(__file__).resolve().parent / "assets"
_TEMPLATES = _ASSETS / "deck"
_INSTALL = '__import__("course_utils.snapshot").snapshot.install()'
_PROBE = ('__import__("IPython.display").display.display({{{mime!r}: '
          '__import__("course_utils.snapshot").snapshot.bundles({ids!r})}}, raw=True)')
NO_SNAPSHOT = ("A live widget: it shows only while its kernel runs. Rerun the cell, or build this page with "
               "python -m course_utils.deck (without --no-execute) to see a snapshot of it.")


class DeckError(Exception):
    """A problem with a notebook (the caller names it) or with --out, said in one line, never as a traceback."""


def read_notebook(path: Path) -> nbformat.NotebookNode:
    """The notebook at path, or DeckError saying why there is none."""
    if not path.is_file():
        raise DeckError("no such notebook" + (" (it is a folder)" if path.is_dir() else ""))
    try:
        return nbformat.read(path, as_version=4)
    except Exception as exc:  # nbformat raises JSON, schema and encoding errors of many types
        raise DeckError(f"not a readable notebook ({type(exc).__name__}: {exc})") from None


def _cell_name(index: int, cell) -> str:
    first = cell.source.strip().split("\n", 1)[0]
    return f"cell {index} ({first[:60]}{'...' if len(first) > 60 else ''})"


def _run_hidden(client, nb, source: str) -> list:
    """Run source in the notebook's kernel as a cell the notebook does not keep; its outputs."""
    from nbclient.exceptions import CellExecutionError

    cell = nbformat.v4.new_code_cell(source)
    nb.cells.append(cell)
    try:
        client.execute_cell(cell, len(nb.cells) - 1, store_history=False)
    except CellExecutionError as exc:
        raise DeckError(f"the kernel cannot take snapshots with course_utils.snapshot ({exc.ename}: {exc.evalue}): "
                        "run the deck in the course's environment") from None
    finally:
        nb.cells.pop()
    return cell.outputs


def widget_ids(nb) -> list[str]:
    """The model id of every widget output, in notebook order."""
    return [output.data[WIDGET_MIME]["model_id"] for cell in nb.cells if cell.cell_type == "code"
            for output in cell.outputs if WIDGET_MIME in output.get("data", {})]


def _run_cells(client, nb, timeout: int) -> None:
    """Every cell of nb in order, as JupyterLab's Run All would; DeckError names the first that fails."""
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    count = 0  # the notebook's own execution counts: the hidden cells take none
    for index, cell in enumerate(nb.cells):
        count += cell.cell_type == "code"
        try:
            client.execute_cell(cell, index, execution_count=count)
        except CellExecutionError as exc:
            raise DeckError(f"{_cell_name(index, cell)} failed: {exc.ename}: {exc.evalue}") from None
        except CellTimeoutError:
            raise DeckError(f"{_cell_name(index, cell)} ran past the {timeout} s cell timeout (--timeout sets "
                            "it)") from None
        except DeadKernelError:
            raise DeckError(f"the kernel died in {_cell_name(index, cell)}") from None


def execute(nb, folder: Path, timeout: int = CELL_TIMEOUT) -> dict[str, dict]:
    """Run every cell of nb in place (cwd = folder, no widget state kept); the snapshots of its widgets by model id,
    taken by the same kernel after the last cell."""
    from jupyter_client.kernelspec import NoSuchKernel
    from nbclient import NotebookClient

    client = NotebookClient(nb, timeout=timeout, resources={"metadata": {"path": str(folder)}},
                            store_widget_state=False)
    try:
        with client.setup_kernel():
            _run_hidden(client, nb, _INSTALL)
            _run_cells(client, nb, timeout)
            outputs = _run_hidden(client, nb, _PROBE.format(mime=SNAPSHOTS_MIME, ids=widget_ids(nb)))
    except (NoSuchKernel, RuntimeError, TimeoutError) as exc:  # nbclient's ways of saying no kernel started
        raise DeckError(f"no kernel ran the notebook ({type(exc).__name__}: {exc})") from None
    found = [o.data[SNAPSHOTS_MIME] for o in outputs if SNAPSHOTS_MIME in o.get("data", {})]
    if not found:
        raise DeckError("the kernel sent no snapshots back (did the last cell shut it down?)")
    return found[0]


def _is_snapshot(data: dict) -> bool:
    return data.get("text/html", "").startswith('<div class="course-snapshot">')


def _static_widget(data: dict, snapshots: dict[str, dict]) -> dict:
    """A widget output's data without the widget: the run's snapshot, else the one install() left beside it, else
    a note."""
    found = snapshots.get(data[WIDGET_MIME].get("model_id"))
    if found is not None:
        return found
    rest = {mime: value for mime, value in data.items() if mime != WIDGET_MIME}
    if _is_snapshot(rest):
        return rest
    return {"text/plain": NO_SNAPSHOT, "text/html": f"<p><i>{NO_SNAPSHOT}</i></p>"}


def static_outputs(nb, snapshots: dict[str, dict]) -> int:
    """Replace nb's widget outputs with snapshots and give every plotly output a drawn figure, in place; drops the
    widget state. Returns how many outputs changed."""
    changed = 0
    for cell in nb.cells:
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            data = output.get("data", {})
            if WIDGET_MIME in data:
                output.data = nbformat.from_dict(_static_widget(data, snapshots))
            elif PLOTLY_MIME in data and not _is_snapshot(data):
                spec = responsive(data[PLOTLY_MIME])
                output.data = nbformat.from_dict({**data, PLOTLY_MIME: spec,
                                                  "text/html": snapshot_html([("figure", spec)])})
            else:
                continue
            changed += 1
    nb.metadata.pop("widgets", None)
    return changed


def _script(text: str) -> str:
    """JavaScript safe inside <script>...</script>: a literal "</script" would end the element early."""
    return re.sub(r"</(script)", r"<\\/\1", text, flags=re.IGNORECASE)


@functools.cache
def _inlined() -> dict[str, str]:
    """The files a deck or page inlines: plotly.js from the plotly package, the rest from course_utils/assets."""
    from plotly.offline import get_plotlyjs

    def read(name: str) -> str:
        return (_ASSETS / name).read_text(encoding="utf-8")

    return {"plotly_js": _script(get_plotlyjs()), "mathjax_js": _script(read("mathjax/es5/tex-svg-full.js")),
            "reveal_js": _script(read("reveal/dist/reveal.js")),
            "notes_js": _script(read("reveal/plugin/notes/notes.js")),
            "reveal_css": read("reveal/dist/reveal.css"),
            # the theme's web font would be fetched; the deck uses JupyterLab's system fonts instead
            "theme_css": re.sub(r"@import url\([^)]*\);", "", read("reveal/dist/theme/white.css"))}


def export(nb, to: str, name: str, code: bool = False) -> str:
    """nb as a deck ("slides"), a reading page ("html") or a notebook ("notebook"), as text."""
    if to == "notebook":
        return nbformat.writes(nb)
    from nbconvert import HTMLExporter, SlidesExporter

    if to == "slides":
        exporter = SlidesExporter(template_file=str(_TEMPLATES / "slides.html.j2"), exclude_input=not code,
                                  exclude_input_prompt=True, exclude_output_prompt=True)
    else:
        exporter = HTMLExporter(template_name="lab", template_file=str(_TEMPLATES / "page.html.j2"))
    body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": name}, "course": _inlined()})
    return body


def _writable(out: Path) -> None:
    """Make --out, or raise DeckError saying why it cannot take files."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        raise DeckError(f"--out {out}: cannot write there ({exc.strerror or exc})") from None


def build(path: Path, out: Path, to: str = "slides", run: bool = True, code: bool = False,
          timeout: int = CELL_TIMEOUT) -> Path:
    """Build one notebook's deck, page or notebook into out; the file written."""
    target = out / (path.stem + FORMATS[to])
    if target.resolve() == path.resolve():
        raise DeckError("--out would overwrite the notebook itself; choose another folder")
    nb = read_notebook(path)
    _writable(out)
    snapshots = execute(nb, path.parent, timeout) if run else {}
    static_outputs(nb, snapshots)
    text = export(nb, to, path.stem, code)
    try:
        target.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise DeckError(f"cannot write {target} ({exc.strerror or exc})") from None
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_utils.deck", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True, help="the folder the files go to (made if missing)")
    parser.add_argument("--to", choices=list(FORMATS), default="slides")
    parser.add_argument("--no-execute", dest="run", action="store_false",
                        help="keep the notebook's own outputs instead of running it")
    parser.add_argument("--code", action="store_true", help="show the code cells in a deck (a page always does)")
    parser.add_argument("--timeout", type=int, default=CELL_TIMEOUT, help="seconds one cell may run (default 600)")
    args = parser.parse_args(argv)
    if args.timeout <= 0:
        parser.error(f"--timeout must be a positive number of seconds, not {args.timeout}")
    try:
        _writable(args.out)
    except DeckError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    failed = 0
    for path in args.notebooks:
        start = time.perf_counter()
        try:
            target = build(path, args.out, args.to, args.run, args.code, args.timeout)
        except DeckError as exc:
            print(f"error: {path}: {exc}", file=sys.stderr)
            failed += 1
            continue
        size = target.stat().st_size / 1e6
        print(f"wrote {target} ({size:.1f} MB, {time.perf_counter() - start:.0f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

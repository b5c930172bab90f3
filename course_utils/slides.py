"""Lecture mode: give every notebook cell slide metadata so `jupyter nbconvert --to slides` builds a clean deck.

python -m course_utils.slides notebooks/*.ipynb   (re)writes the metadata in place; --check only reports.
Rules: a markdown cell that opens with an H1 or H2 starts a new slide, one with an H3 a sub-slide; every other cell
continues the slide it follows. Cells a lecturer never shows (pure setup or checks) can be marked "skip" by hand,
and the rules keep that choice.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

__all__ = ["slide_type_for", "apply_slide_metadata", "main"]

KEEP = {"skip", "notes", "fragment"}  # choices made by hand that the rules must not undo


def slide_type_for(cell) -> str:
    """The slide type the rules give a cell."""
    if cell.cell_type == "markdown":
        first = cell.source.lstrip().split("\n", 1)[0]
        if first.startswith(("# ", "## ")):
            return "slide"
        if first.startswith("### "):
            return "subslide"
    return "-"


def apply_slide_metadata(nb) -> int:
    """Set metadata.slideshow.slide_type on every cell; returns how many cells changed."""
    changed = 0
    for cell in nb.cells:
        current = cell.metadata.get("slideshow", {}).get("slide_type")
        wanted = current if current in KEEP else slide_type_for(cell)
        if current != wanted:
            cell.metadata["slideshow"] = {"slide_type": wanted}
            changed += 1
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_utils.slides", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--check", action="store_true", help="report notebooks that need changes; write nothing")
    args = parser.parse_args(argv)
    stale = []
    for path in args.notebooks:
        nb = nbformat.read(path, as_version=4)
        if apply_slide_metadata(nb):
            stale.append(path)
            if not args.check:
                nbformat.write(nb, path)
    verb = "need slide metadata" if args.check else "updated"
    print(f"{len(stale)} notebook(s) {verb}" + "".join(f"\n  {p}" for p in stale))
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())

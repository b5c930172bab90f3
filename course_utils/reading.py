"""How much a learner reads in each notebook: words on the main line, and words folded away (optional deep-dives,
worked answers, evidence), for the README's reading-length table.

What is folded: a markdown heading cell with `jp-MarkdownHeadingCollapsed` in its metadata (JupyterLab opens the
notebook with that section collapsed) folds every cell after it up to the next heading of the same or a higher level;
text inside `<details>` in a markdown cell is folded; a code cell with `jupyter.source_hidden` (a worked answer) is
folded code. A math span ($...$ or $$...$$) counts as one word. `python -m course_utils.reading` prints the table;
`--markdown` prints it as the README has it, `--readme` writes it there.
"""
from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat

from .course import NOTEBOOK_DIR

__all__ = ["Reading", "reading", "table", "readme_with_table", "WORDS_PER_MINUTE", "COLLAPSED"]

WORDS_PER_MINUTE = 150  # technical prose with formulas, read to be understood
COLLAPSED = "jp-MarkdownHeadingCollapsed"  # JupyterLab 4's metadata key for a collapsed heading
_MATH = re.compile(r"\$\$.+?\$\$|\$[^$\n]+?\$", re.S)
_DETAILS = re.compile(r"<details>.*?</details>", re.S | re.I)
_TAG = re.compile(r"<[^>]+>")
_WORD = re.compile(r"[^\W_]+(?:['’-][^\W_]+)*")
_HEADING = re.compile(r"^(#{1,6})\s")


@dataclass(frozen=True)
class Reading:
    """One notebook's reading load."""
    notebook: str
    main_words: int
    folded_words: int
    main_code_cells: int
    folded_code_cells: int

    @property
    def minutes(self) -> float:
        """Minutes to read the main line's prose."""
        return self.main_words / WORDS_PER_MINUTE


def words(text: str) -> int:
    """Words in markdown text: a math span counts as one, HTML tags as none."""
    text, n_math = _MATH.subn(" ", text)
    return len(_WORD.findall(_TAG.sub(" ", text))) + n_math


def heading_level(cell) -> int:
    """The level of a markdown cell's first-line heading (1-6), or 0."""
    m = _HEADING.match(cell.source) if cell.cell_type == "markdown" else None
    return len(m.group(1)) if m else 0


def folded_cells(nb) -> list[bool]:
    """For each cell, whether it sits in a section that opens collapsed (the collapsed heading itself is shown)."""
    out, fold_level = [], 0
    for cell in nb.cells:
        level = heading_level(cell)
        if fold_level and level and level <= fold_level:
            fold_level = 0
        out.append(bool(fold_level))
        if not fold_level and level and cell.metadata.get(COLLAPSED):
            fold_level = level
    return out


def reading(path: Path) -> Reading:
    """The reading load of one notebook file."""
    nb = nbformat.read(path, as_version=4)
    main = folded = main_code = folded_code = 0
    for cell, in_fold in zip(nb.cells, folded_cells(nb)):
        if cell.cell_type == "markdown":
            inner = sum(words(d) for d in _DETAILS.findall(cell.source))
            total = words(cell.source)
            if in_fold:
                folded += total
            else:
                main, folded = main + total - inner, folded + inner
        elif cell.cell_type == "code":
            hidden = in_fold or cell.metadata.get("jupyter", {}).get("source_hidden", False)
            folded_code, main_code = folded_code + hidden, main_code + (not hidden)
    return Reading(path.stem, main, folded, main_code, folded_code)


def table(paths: list[Path] | None = None, markdown: bool = False) -> str:
    """The reading-length table of the given notebooks (default: all of them)."""
    rows = [reading(p) for p in (paths or sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb")))]
    if markdown:
        lines = ["| Notebook | Words on the main line | Words folded | Main-line reading (min) | Code cells, main / "
                 "folded |", "|---|---:|---:|---:|---:|"]
        lines += [f"| `{r.notebook}` | {r.main_words:,} | {r.folded_words:,} | {r.minutes:.0f} | "
                  f"{r.main_code_cells} / {r.folded_code_cells} |" for r in rows]
        return "\n".join(lines)
    lines = [f"{'notebook':28s} {'main':>6s} {'folded':>7s} {'min':>4s} {'code main/folded':>17s}"]
    lines += [f"{r.notebook:28s} {r.main_words:6d} {r.folded_words:7d} {r.minutes:4.0f} "
              f"{r.main_code_cells:>10d} / {r.folded_code_cells}" for r in rows]
    return "\n".join(lines)


_BLOCK = re.compile(r"(<!-- reading-table -->\n).*?(<!-- /reading-table -->)", re.S)


def readme_with_table(text: str) -> str:
    """The README's text with its reading-table block holding the table as measured now."""
    if not _BLOCK.search(text):
        raise ValueError("README.md has no <!-- reading-table --> ... <!-- /reading-table --> block")
    return _BLOCK.sub(lambda m: m.group(1) + table(markdown=True) + "\n" + m.group(2), text)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_utils.reading", description=__doc__.split("\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="notebook files (default: every course notebook)")
    parser.add_argument("--markdown", action="store_true", help="print the table as the README has it")
    parser.add_argument("--readme", action="store_true", help="write the table into README.md")
    args = parser.parse_args(argv)
    if args.readme:
        readme = NOTEBOOK_DIR.parent / "README.md"
        readme.write_text(readme_with_table(readme.read_text(encoding="utf-8")), encoding="utf-8")
        print(f"wrote the reading table into {readme}")
        return 0
    print(table(args.notebooks or None, markdown=args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())

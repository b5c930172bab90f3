"""The Markdown subset quiz files use (paragraphs, lists, bold, italic, code), rendered to HTML with $LaTeX$ kept."""
from __future__ import annotations

import html
import re

__all__ = ["markdown_html"]

_INLINE = re.compile(r"(\$\$.+?\$\$|\$[^$\n]+?\$|`[^`\n]+`)", re.S)
_LIST_ITEM = re.compile(r"\s*(?:[-*]|\d+\.)\s+")


def _inline(text: str) -> str:
    parts = _INLINE.split(text)
    out = []
    for i, part in enumerate(parts):
        if i % 2 and part.startswith("`"):
            out.append(f"<code>{html.escape(part[1:-1])}</code>")
        elif i % 2:
            out.append(html.escape(part, quote=False))  # LaTeX stays as text for MathJax to typeset
        else:
            s = html.escape(part, quote=False)
            s = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", s)
            out.append(re.sub(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])", r"<i>\1</i>", s))
    return "".join(out)


def markdown_html(text: str) -> str:
    """Render the Markdown subset quiz files use (paragraphs, lists, bold, italic, code) to HTML, keeping $LaTeX$."""
    blocks = []
    for block in re.split(r"\n\s*\n", text.strip()):
        lines = block.splitlines()
        if lines and all(_LIST_ITEM.match(line) for line in lines):
            tag = "ol" if lines[0].lstrip()[0].isdigit() else "ul"
            items = "".join(f"<li>{_inline(_LIST_ITEM.sub('', line, count=1))}</li>" for line in lines)
            blocks.append(f"<{tag}>{items}</{tag}>")
        elif block.strip():
            blocks.append(f"<p>{_inline(' '.join(line.strip() for line in lines))}</p>")
    return "".join(blocks)

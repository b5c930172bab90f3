"""Benchmark plotly.js alone: how long one `Plotly.update` of a course-shaped figure takes in headless Chromium.

    python benchmarks/bench_plotly.py                  # 30 updates per figure and variant, 5 of them warm-up
    python benchmarks/bench_plotly.py --updates 60

The browser benchmark (bench_browser.py) times a whole interaction in JupyterLab; this one takes the kernel, the
widgets and JupyterLab away and times only what plotly.js does in the browser when a live figure's data changes: a
page holding nothing but plotly.js (the plotly package's own copy, inlined, so no network) draws each figure once,
then `Plotly.update` gives it new y values, and the time runs to the next animation frame. Figures are built with the
course's own `course_utils.figures` (fonts, margins, automargin, legend), at 1100 px, the width of a laptop's column:

- one plot of 32 bars (the shape of 00's and 03's panels);
- three subplots of three 50-point lines each (02's and 06's panels).

Each comes in two variants, timed in alternating rounds so the machine's load falls on both alike: the course's axes
(`ticklabeloverflow="allow"`) and plotly's default (`"hide past div"`, which measures every tick label on each redraw
to hide those past the figure's edge). The table (median and max per figure and variant, and the ratio of medians
from the same run) is printed and written to benchmarks/PLOTLY.md with the machine, the date and the load.
"""
from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
from pathlib import Path

import numpy as np
import plotly
import plotly.graph_objects as go
from plotly.offline import get_plotlyjs_version

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the Chromium start-up the browser test uses

from bench_browser import _load, _machine  # noqa: E402 - the same machine and load lines
from browser_support import launch_chromium  # noqa: E402

from course_utils import figures  # noqa: E402

PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
WIDTH = 1100
WARMUP = 5
VARIANTS = {"course axes": "allow", "plotly default": "hide past div"}

# Draw once, then `updates` times: new y values for every trace, timed to the next animation frame.
TIME_JS = """async ([spec, updates]) => {
    const gd = document.getElementById('plot');
    Plotly.purge(gd);
    await Plotly.newPlot(gd, spec.data, spec.layout);
    const times = [];
    for (let i = 0; i < updates; i++) {
        const ys = spec.data.map(t => t.y.map(v => v * (1 + 0.3 * Math.sin(i + v))));
        const started = performance.now();
        await Plotly.update(gd, {y: ys}, {}, spec.data.map((_, k) => k));
        await new Promise(done => requestAnimationFrame(() => setTimeout(done, 0)));
        times.push(performance.now() - started);
    }
    return times;
}"""


def bars() -> go.Figure:
    fig = figures.static_figure("One token's features", "feature", "value", width=WIDTH)
    fig.add_bar(y=np.random.default_rng(0).normal(size=32).tolist(), name="input")
    return fig


def subplots() -> go.Figure:
    fig = figures.static_subplots(1, 3, "Three views of one batch", width=WIDTH,
                                  subplot_titles=["first", "second", "third"])
    rng = np.random.default_rng(1)
    for col in (1, 2, 3):
        for k in range(3):
            fig.add_scatter(y=rng.normal(size=50).tolist(), name=f"line {k + 1}", row=1, col=col,
                            line=dict(dash=figures.dash(k)), showlegend=col == 1)
    return fig


FIGURES = {"one plot, 32 bars": bars, "three subplots, 3 lines of 50 points each": subplots}


def spec(build, overflow: str) -> dict:
    fig = build()
    fig.update_xaxes(ticklabeloverflow=overflow)
    fig.update_yaxes(ticklabeloverflow=overflow)
    return json.loads(fig.to_json())


def run(updates: int, rounds: int) -> dict[tuple[str, str], list[float]]:
    """Per (figure, variant): the update times after the warm-up, pooled over alternating rounds."""
    from playwright.sync_api import sync_playwright

    times: dict[tuple[str, str], list[float]] = {}
    with sync_playwright() as p:
        browser = launch_chromium(p)
        page = browser.new_page(viewport={"width": 1366, "height": 768})
        page.set_content(f"<div id='plot'></div><script>{PLOTLY_JS.read_text(encoding='utf-8')}</script>")
        for _ in range(rounds):
            for name, build in FIGURES.items():
                for variant, overflow in VARIANTS.items():
                    measured = page.evaluate(TIME_JS, [spec(build, overflow), updates + WARMUP])
                    times.setdefault((name, variant), []).extend(measured[WARMUP:])
        browser.close()
    return times


def render(times: dict[tuple[str, str], list[float]], about: dict) -> str:
    lines = ["# plotly.js alone: one `Plotly.update` of a course-shaped figure", "",
             f"Measured by `python benchmarks/bench_plotly.py` on {about['date']}: {about['machine']}; plotly.js "
             f"{about['plotly']} in Chromium {about['chromium']} (headless, no GPU), figures {WIDTH} px wide; "
             f"load average {about['load_start']} at the start, {about['load_end']} at the end. {about['updates']} "
             f"updates per figure and variant in each of {about['rounds']} alternating rounds, after {WARMUP} warm-up "
             "updates.", "",
             "| figure | axes | updates | median ms | max ms | median / course axes |",
             "|---|---|---:|---:|---:|---:|"]
    for name in FIGURES:
        base = statistics.median(times[(name, "course axes")])
        for variant in VARIANTS:
            t = times[(name, variant)]
            lines.append(f"| {name} | {variant} | {len(t)} | {statistics.median(t):.1f} | {max(t):.1f} | "
                         f"{statistics.median(t) / base:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/bench_plotly.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--updates", type=int, default=30, help="timed updates per figure, variant and round")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "PLOTLY.md", help="where to write the table")
    args = parser.parse_args(argv)
    if args.updates < 1 or args.rounds < 1:
        parser.error(f"--updates and --rounds must each be at least 1, not {args.updates} and {args.rounds}")
    from playwright.sync_api import sync_playwright  # the test extra; a clear ImportError without it

    about = {"date": datetime.date.today().isoformat(), "plotly": get_plotlyjs_version(), "load_start": _load(),
             "updates": args.updates, "rounds": args.rounds, "machine": _machine()}
    with sync_playwright() as p:
        browser = launch_chromium(p)
        about["chromium"] = browser.version
        browser.close()
    times = run(args.updates, args.rounds)
    about["load_end"] = _load()
    text = render(times, about)
    print(text)
    args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""benchmarks/bench_plotly.py: its table from given times, its refusals, and one short real run in Chromium."""
from __future__ import annotations

import sys

import pytest

from conftest import ROOT, browser_missing

sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_plotly  # noqa: E402

ABOUT = {"date": "2026-12-02", "machine": "Linux x86_64, 2 cores", "plotly": "3.1.0", "chromium": "156",
         "load_start": "0.50 0.40 0.30", "load_end": "1.00 0.80 0.60", "updates": 3, "rounds": 1}


def test_the_table_gives_each_variants_median_max_and_ratio_to_the_course_axes():
    times = {(name, variant): [10.0, 20.0, 30.0] if variant == "course axes" else [20.0, 40.0, 90.0]
             for name in bench_plotly.FIGURES for variant in bench_plotly.VARIANTS}
    text = bench_plotly.render(times, ABOUT)
    assert "| one plot, 32 bars | course axes | 3 | 20.0 | 30.0 | 1.00 |" in text
    assert "| one plot, 32 bars | plotly default | 3 | 40.0 | 90.0 | 2.00 |" in text
    assert "load average 0.50 0.40 0.30 at the start, 1.00 0.80 0.60 at the end" in text


def test_the_figures_differ_only_in_the_axes_tick_label_overflow():
    for build in bench_plotly.FIGURES.values():
        course, default = (bench_plotly.spec(build, o) for o in bench_plotly.VARIANTS.values())
        axes = [k for k in course["layout"] if k.startswith(("xaxis", "yaxis"))]
        assert axes and {course["layout"][a]["ticklabeloverflow"] for a in axes} == {"allow"}
        assert {default["layout"][a]["ticklabeloverflow"] for a in axes} == {"hide past div"}
        for a in axes:
            course["layout"][a].pop("ticklabeloverflow"), default["layout"][a].pop("ticklabeloverflow")
        assert course == default


@pytest.mark.parametrize("args", [["--updates", "0"], ["--rounds", "0"]])
def test_no_updates_or_rounds_is_refused_before_anything_starts(capsys, args):
    with pytest.raises(SystemExit) as stop:
        bench_plotly.main(args)
    assert stop.value.code == 2 and "at least 1" in capsys.readouterr().err


@pytest.mark.browser
@pytest.mark.skipif(browser_missing() is not None, reason=f"the browser tests are skipped: {browser_missing()}")
def test_a_short_run_times_every_figure_and_variant_in_chromium(tmp_path):
    out = tmp_path / "PLOTLY.md"
    assert bench_plotly.main(["--updates", "2", "--rounds", "1", "--out", str(out)]) == 0
    rows = [line for line in out.read_text().splitlines() if line.startswith("| ") and "ms" not in line]
    assert len(rows) == len(bench_plotly.FIGURES) * len(bench_plotly.VARIANTS), out.read_text()
    for row in rows:
        updates, median, most = (float(c) for c in row.strip("|").split("|")[2:5])
        assert updates == 2 and 0 < median <= most, row

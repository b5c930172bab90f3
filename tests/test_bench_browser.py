"""The browser benchmark (benchmarks/bench_browser.py): its notebook choice and its table, without a browser; and one
short run in JupyterLab and Chromium where they are installed."""
import importlib.util
import subprocess
import sys

import pytest

from conftest import ROOT, browser_missing

SCRIPT = ROOT / "benchmarks" / "bench_browser.py"
_spec = importlib.util.spec_from_file_location("bench_browser", SCRIPT)
bench_browser = sys.modules["bench_browser"] = importlib.util.module_from_spec(_spec)  # dataclasses look it up
_spec.loader.exec_module(bench_browser)
ABOUT = {"date": "2026-12-01", "machine": "Linux x86_64, 2 cores", "chromium": "156", "jupyterlab": "4.6.6",
         "windowing": "contentVisibility", "load_start": "0.50 0.40 0.30", "load_end": "1.00 0.80 0.60", "repeats": 10}


def test_notebooks_are_chosen_by_number_or_stem_in_course_order():
    assert bench_browser.parse_notebooks("08,04") == ["04_pre_vs_post_ln", "08_real_model"]
    assert bench_browser.parse_notebooks("03_layernorm, 03") == ["03_layernorm"]
    assert bench_browser.parse_notebooks(None) == bench_browser.NOTEBOOKS
    with pytest.raises(ValueError, match="no notebook '09'"):
        bench_browser.parse_notebooks("04,09")


def test_an_unknown_notebook_or_no_repeats_is_refused_before_anything_starts(capsys):
    for argv, said in ((["--notebooks", "4"], "no notebook '4'"), (["--repeats", "0"], "at least 1")):
        with pytest.raises(SystemExit) as exit_info:
            bench_browser.main(argv)
        assert exit_info.value.code == 2
        assert said in capsys.readouterr().err


def test_the_table_gives_each_panels_median_and_max_and_names_what_misses():
    fast = bench_browser.PanelTiming("03_layernorm", "Edit one token", controls=2, browser_ms=[40, 60, 50],
                                     to_kernel_ms=[9, 11, 10], message_ms=[6, 8],
                                     handler_ms=[3, 5])
    slow = bench_browser.PanelTiming("08_real_model", "Change the LayerNorms", controls=1, browser_ms=[80, 90, 150],
                                     to_kernel_ms=[20, 30, 40], message_ms=[70, 130], handler_ms=[60, 120],
                                     misses=["slider: the figures did not change"] * 2)
    training = bench_browser.PanelTiming("04_pre_vs_post_ln", "Race", skipped="a training panel")
    text = bench_browser.render([fast, slow, training], ABOUT)
    assert "| 03_layernorm | Edit one token | 2 | 3 | 50 | 60 | 10 | 7.0 | 4.0 | 5.0 | yes |" in text
    assert "| 08_real_model | Change the LayerNorms | 1 | 3 | 90 | 150 | 30 | 100.0 | 90.0 | 120.0 | NO |" in text
    assert "Over 100 ms (median or max) or not measured: 08_real_model Change the LayerNorms." in text
    assert text.count("slider: the figures did not change") == 1
    assert "Not timed:\n- 04_pre_vs_post_ln Race: a training panel" in text and "| 04_pre_vs_post_ln" not in text
    assert "load average 0.50 0.40 0.30 at the start, 1.00 0.80 0.60 at the end. 10 input events" in text


def test_a_panel_with_no_measured_event_misses_the_target():
    silent = bench_browser.PanelTiming("00_start_here", "Move the sliders", controls=2,
                                       misses=["slider: the figures did not change"])
    assert not silent.ok
    assert not bench_browser.PanelTiming("00_start_here", "Move the sliders", controls=2, browser_ms=[30],
                                         misses=["slider: the figures did not change"]).ok
    assert "| 00_start_here | Move the sliders | 2 | 0 | - | - | - | - | - | - | NO |" in bench_browser.render([silent],
                                                                                                  ABOUT)
    assert "Every panel under 100 ms" not in bench_browser.render([silent], ABOUT)
    assert "Every panel under 100 ms, median and max." in bench_browser.render(
        [bench_browser.PanelTiming("00_start_here", "Move the sliders", controls=2, browser_ms=[30])], ABOUT)


@pytest.mark.browser
@pytest.mark.skipif(bool(browser_missing()), reason=f"no browser here: {browser_missing()}")
def test_the_benchmark_times_a_small_notebook_in_the_browser(tmp_path):
    out = tmp_path / "BROWSER.md"
    done = subprocess.run([sys.executable, str(SCRIPT), "--notebooks", "00", "--repeats", "2", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1), done.stderr[-2000:]
    row = next((line for line in out.read_text().splitlines() if line.startswith("| 00_start_here |")), None)
    assert row is not None, out.read_text()
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert int(cells[2]) >= 1 and int(cells[3]) == 2 * int(cells[2]), row  # every event of every control measured
    median, most, to_kernel, in_kernel, handler = (float(c) for c in cells[4:9])
    assert 0 < to_kernel < median <= most and 0 < handler <= in_kernel, row

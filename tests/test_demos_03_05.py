"""Notebooks 03 and 05: the token panels, the pitfall formulas, the norm benchmark and the quality demo."""
import math
import statistics
import time

import pytest
import torch
import torch.nn.functional as F

from course_utils import normbench
from course_utils.demos import layernorm as ln_demo
from course_utils.demos import rmsnorm as rms_demo
from course_utils.panel import PANELS

TINY = dict(widths=(64, 256), repeats=3, number=1, warmup=1, elements=2 ** 12)


# ---- notebook 03: formulas and the token panel ----------------------------------------------------------------

@pytest.mark.parametrize("d", [1, 2, 5, 64])
def test_correct_formula_matches_pytorch(d):
    x = torch.randn(d, dtype=torch.float64) * 3 + 1
    got = ln_demo.normalize_token(x, 1e-5, "correct")
    torch.testing.assert_close(got["x_hat"], F.layer_norm(x, (d,), eps=1e-5))
    torch.testing.assert_close(got["mu"], x.mean())
    torch.testing.assert_close(got["var"], x.var(unbiased=False))


@pytest.mark.parametrize("d", [2, 4, 100])
def test_pitfall_formulas_are_the_pitfalls(d):
    x = torch.randn(d, dtype=torch.float64)
    unbiased = ln_demo.normalize_token(x, 0.0 + 1e-300, "unbiased")["x_hat"]
    torch.testing.assert_close(unbiased, F.layer_norm(x, (d,), eps=1e-300) * math.sqrt((d - 1) / d))
    small = x * 1e-3
    on_std = ln_demo.normalize_token(small, 1e-5, "eps_on_std")["x_hat"]
    torch.testing.assert_close(on_std, (small - small.mean()) / (small.var(unbiased=False).sqrt() + 1e-5))
    assert (on_std - F.layer_norm(small, (d,), eps=1e-5)).abs().max() > 0.1


def test_unknown_formula_and_one_feature_unbiased_are_refused():
    with pytest.raises(ValueError, match="formula"):
        ln_demo.normalize_token(torch.ones(3, dtype=torch.float64), formula="nope")
    with pytest.raises(ValueError, match="d - 1 = 0"):
        ln_demo.normalize_token(torch.ones(1, dtype=torch.float64), formula="unbiased")


@pytest.mark.parametrize("text, expected", [("1, 2, 3, 4", [1, 2, 3, 4]), ("  -1.5e1 2;3 ", [-15, 2, 3]),
                                            ("1,,2", [1, 2]), ("7", [7])])
def test_parse_features_accepts(text, expected):
    assert ln_demo.parse_features(text) == expected


@pytest.mark.parametrize("text, message", [("", "Type"), ("1, two", "'two' is not a number"), ("nan", "not a number"),
                                           ("1e7", "between"), (",".join(["1"] * 33), "more than")])
def test_parse_features_refuses_with_a_reason(text, message):
    with pytest.raises(ValueError, match=message):
        ln_demo.parse_features(text)


def _timed_sweep(panel):
    times = []
    for setting in panel.sweep():
        start = time.perf_counter()
        ok = panel.set(**setting)
        times.append(time.perf_counter() - start)
        assert ok, (setting, panel.last_error)
    return statistics.median(times)


@pytest.mark.parametrize("name", ["token_panel", "ln_vs_rms_panel"])
def test_registered_panels_sweep_without_error_and_fast(name):
    notebook, factory = PANELS[name]
    assert notebook in ("03_layernorm", "05_rmsnorm")
    panel = factory()
    assert panel.refresh() and panel.last_error is None
    assert _timed_sweep(panel) < 0.05


def test_token_panel_shows_the_steps_and_the_reference():
    panel = ln_demo.token_panel()
    readout, fig = panel.outputs
    assert "μ = 2.5" in readout.value and "σ² = 1.25" in readout.value and "matches F.layer_norm" in readout.value
    assert panel.set(scale=2.0, shift=5.0)
    torch.testing.assert_close(torch.tensor(fig.data[3].y), F.layer_norm(torch.tensor([1.0, 2, 3, 4]), (4,)),
                               atol=1e-4, rtol=0)
    assert panel.set(scale=1.0, shift=0.0, formula="unbiased")
    assert "differs from F.layer_norm" in readout.value
    assert panel.set(formula="correct", features="3, 3, 3")
    assert "σ² = 0" in readout.value


@pytest.mark.parametrize("setting", [dict(features="1, x"), dict(features=""), dict(features="5", formula="unbiased"),
                                     dict(features="1e9")])
def test_token_panel_nonsense_shows_a_message(setting):
    panel = ln_demo.token_panel()
    before = panel.outputs[1].data[0].y
    assert panel.set(**setting) is False
    assert panel.last_error and panel.message.value
    assert panel.outputs[1].data[0].y == before  # the figure keeps its last good state
    assert panel.set(features="1, 2, 3, 4", formula="correct") and not panel.message.value


def test_ln_vs_rms_panel_refuses_nonsense_and_explains_a_large_mean():
    panel = rms_demo.ln_vs_rms_panel()
    assert panel.set(features="oops") is False and "not a number" in panel.last_error
    with pytest.raises(ValueError, match="a > 0"):
        panel.update(features="3, 4", scale=-1.0, shift=0.0)
    assert panel.set(features="3, 4, -1, 2", shift=10.0)
    readout, fig = panel.outputs
    assert "squashes" in readout.value
    ln, rms = torch.tensor(fig.data[1].y), torch.tensor(fig.data[2].y)
    assert ln.std() > 0.9 and rms.std() < 0.2


def test_static_figures_have_titles_and_axis_labels():
    figs = [ln_demo.pitfall_figure([2, 4], [0.3, 0.1], [1e-6, 1e-6], [1e-3, 1.0], [2.0, 1e-6], [0.1, 0.1]),
            ln_demo.invariance_figure([1e-3, 1.0], [0.5, 1e-7], 1e-5)]
    for fig in figs:
        assert fig.layout.title.text
        assert all(ax.title.text for ax in (fig.layout.xaxis, fig.layout.yaxis))


# ---- notebook 05: the benchmark -------------------------------------------------------------------------------

def test_hand_written_norms_match_pytorch():
    x, w, b = torch.randn(5, 32), torch.rand(32) + 0.5, torch.randn(32)
    torch.testing.assert_close(normbench.layer_norm_by_hand(x, w, b), F.layer_norm(x, (32,), w, b, 1e-5))
    torch.testing.assert_close(normbench.rms_norm_by_hand(x, w), F.rms_norm(x, (32,), w, 1e-5))


def test_every_default_variant_computes_what_its_name_says():
    x, w, b = torch.randn(4, 16), torch.rand(16) + 0.5, torch.randn(16)
    for v in normbench.default_variants():
        y = v.fn(x, w, b)
        if v.family == "copy":
            want = x
        elif v.family == "layer":
            want = F.layer_norm(x, (16,), *((None, None) if "no γ" in v.name else (w, b)), 1e-5)
        else:
            want = F.rms_norm(x, (16,), None if "no γ" in v.name else w, 1e-5)
        torch.testing.assert_close(y, want, msg=v.name)


def test_run_records_every_variant_and_restores_threads():
    torch.set_num_threads(2)
    result = normbench.run(**TINY, threads=1)
    assert torch.get_num_threads() == 2
    assert result.clock == "thread CPU time" and result.threads == 1
    for v in result.variants:
        for d in TINY["widths"]:
            assert len(result.times[(v, d)]) == TINY["repeats"] == len(result.wall[(v, d)])
            assert result.median_s(v, d) > 0 and result.gbps(v, d) > 0
    q1, median, q3 = result.saving("LayerNorm by hand", "RMSNorm by hand", 64)
    assert q1 <= median <= q3
    assert [p[0] for p in result.pairs()] == ["PyTorch ops", "PyTorch ops, no γ/β", "by hand"]
    table = result.table()
    assert "copy (x.clone())" in table and "Time saved by RMSNorm" in table and "6.9%" in table
    assert len(result.records()) == len(result.variants) * len(TINY["widths"])


def test_saving_is_computed_repeat_by_repeat():
    result = normbench.BenchResult((8,), 64, 1, 3, 1, ["a", "b"])
    result.times = {("a", 8): [1.0, 2.0, 4.0], ("b", 8): [0.5, 2.0, 1.0]}
    assert result.saving("a", "b", 8) == pytest.approx((0.25, 0.5, 0.625))


def test_a_failing_variant_is_reported_and_the_rest_timed():
    def broken(x, w, b):
        raise RuntimeError("no compiler here")
    variants = normbench.default_variants()[:2] + [normbench.Variant("broken", "rms", "compiled", broken)]
    result = normbench.run(**TINY, variants=variants)
    assert "no compiler here" in result.failed["broken"] and not result.has("broken")
    assert result.has("F.layer_norm") and "broken: not timed" in result.table()


@pytest.mark.parametrize("kwargs", [dict(widths=(3,)), dict(widths=()), dict(repeats=0), dict(number=0)])
def test_run_refuses_bad_settings(kwargs):
    with pytest.raises(ValueError):
        normbench.run(**{**TINY, **kwargs})


def test_settings_and_command_line(monkeypatch, capsys):
    assert normbench.settings(False)["widths"] == normbench.WIDTHS
    assert normbench.settings(True)["widths"] == normbench.LONG_WIDTHS
    assert all(normbench.ELEMENTS % d == 0 for d in normbench.LONG_WIDTHS)
    monkeypatch.setattr(normbench, "settings", lambda long=False: dict(TINY, widths=(64,), repeats=2))
    normbench.main(["--long", "--no-compile"])
    out = capsys.readouterr().out
    assert "median of 2 repeats" in out and "LayerNorm by hand" in out and "[1/1] d = 64 done" in out
    assert "compiled" not in out
    assert "Time saved by RMSNorm" in normbench.report()


def test_benchmark_figures():
    result = normbench.run(**TINY)
    bw, saving = rms_demo.bandwidth_figure(result), rms_demo.saving_figure(result)
    assert len(bw.data) == len(result.variants) and bw.layout.barmode == "group"
    assert len(saving.data) == len(result.pairs())
    for fig in (bw, saving):
        assert fig.layout.title.text and fig.layout.xaxis.title.text and fig.layout.yaxis.title.text


def test_keep_freed_memory_answers_a_bool():
    assert isinstance(normbench.keep_freed_memory(), bool)


# ---- notebook 05: the quality demo ----------------------------------------------------------------------------

def test_train_both_uses_the_same_start_and_stops_on_request():
    seen = []
    histories = rms_demo.train_both(seed=3, steps=4, callback=lambda norm, step, h: seen.append((norm, step)))
    assert set(histories) == {"layer", "rms"} and all(len(h.loss) == 4 for h in histories.values())
    assert seen[:4] == [("layer", s) for s in range(4)] and seen[4:] == [("rms", s) for s in range(4)]
    first = {n: h.loss[0] for n, h in histories.items()}
    assert abs(first["layer"] - first["rms"]) < 0.5  # same weights, same batch, only the norm differs
    stopped = rms_demo.train_both(steps=50, should_stop=lambda: True)
    assert list(stopped) == ["layer"] and stopped["layer"].stopped


def test_quality_demo_trains_synchronously_and_refuses_a_second_run():
    demo = rms_demo.QualityDemo()
    demo.steps.value = 50
    histories = demo.run(background=False)
    assert set(histories) == {"layer", "rms"}
    assert len(demo.figure.data[1].y) == 50 == len(demo.figure.data[2].y)
    assert "final loss" in demo.summary.value
    assert demo.run(background=True) == {}  # the background run starts and returns at once
    assert demo.run(background=True) == {} and "already going" in demo.runner.status.value
    demo.runner.stop()
    demo.runner.join(30)
    assert not demo.runner.running and demo.runner.error is None

"""Notebook 05's demos (course_utils.demos.rmsnorm): LayerNorm against RMSNorm, the benchmark's figures, the quality
run."""
import pytest
import torch

from course_utils import normbench
from course_utils.demos import rmsnorm as rms_demo

TINY = dict(widths=(64, 256), repeats=3, number=1, warmup=1, elements=2 ** 12)


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


def test_benchmark_figures():
    result = normbench.run(normbench.lesson_variants(), **TINY)
    bw, saving = rms_demo.bandwidth_figure(result), rms_demo.saving_figure(result)
    assert len(bw.data) == len(result.variants) and bw.layout.barmode == "group"
    assert len(saving.data) == len(result.pairs())
    notes = [a.text for a in saving.layout.annotations]
    assert any("GPU: 6.9-40.8%" in n for n in notes) and any("chapter: 10-40%" in n for n in notes)
    for fig in (bw, saving):
        assert fig.layout.title.text and fig.layout.xaxis.title.text and fig.layout.yaxis.title.text


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
    demo = rms_demo.quality_demo()
    demo.steps.value = 50
    histories = demo.run(background=False)
    assert set(histories) == {"layer", "rms"} and demo.result is histories
    assert len(demo.figure.data[1].y) == 50 == len(demo.figure.data[2].y)
    assert "final loss" in demo.summary.value
    assert demo.run(background=True) is None and demo.runner.running  # the background run starts, returns at once
    assert not demo.start(background=True) and "already going" in demo.runner.status.value
    demo.runner.stop()
    demo.runner.join(30)
    assert not demo.runner.running and demo.runner.error is None

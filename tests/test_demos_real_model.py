"""Notebook 08's panels and figures (course_utils.demos.real_model), built with the notebook's own functions."""
import pytest
import torch

from course_utils import minilm
from course_utils.course import lesson_functions
from course_utils.demos import real_model as demo
from course_utils.panel import build_panel

LESSONS = lesson_functions("08_real_model")


@pytest.fixture(scope="module")
def base():
    with torch.no_grad():
        yield minilm.baseline()


def test_figures_build(base):
    dims = demo.outlier_set(base, LESSONS["outlier_dims"])
    logits = LESSONS["attention_logits"](base.model, base.hidden, base.mask)
    figures = [demo.norm_statistics_figure(base), demo.stream_norm_figure(base), demo.gamma_beta_figure(base, dims),
               demo.outlier_figure(LESSONS["feature_loudness"](base.hidden, base.mask)),
               demo.attention_logit_figure(logits), demo.damage_figure({("L1", "rms"): 0.99}, ["L1"], ["rms"])]
    for fig in figures:
        assert fig.layout.title.text and fig.data


def test_inspector_shows_the_last_token_past_a_short_sentence():
    panel = build_panel("layernorm_inspector_panel")
    assert panel.set(sentence=5, token=13)
    readout = panel.outputs[0].value
    assert "[SEP]" in readout and "has only 10 tokens" in readout
    assert panel.set(token=0) and "has only" not in panel.outputs[0].value
    with pytest.raises(ValueError, match="start at 0"):
        panel.update(norm="L1 FFN", sentence=0, token=-1)
    with pytest.raises(ValueError, match="LayerNorms"):  # a dropdown cannot send this; the handler still refuses
        panel.update(norm="L9 FFN", sentence=0, token=0)


def test_intervention_panel_shows_the_damage():
    panel = build_panel("intervention_panel")
    assert panel.set(layer=0, sublayers="both", intervention="remove")
    cos = panel.outputs[1].data[0].y
    assert max(cos) < 0.5
    assert panel.set(layer=6, intervention="rms")
    assert min(panel.outputs[1].data[0].y) > 0.98
    with pytest.raises(ValueError, match="choose a block"):
        panel.update(layer=9, sublayers="both", intervention="rms")
    with pytest.raises(ValueError, match="intervention"):
        panel.update(layer=1, sublayers="both", intervention="shout")
    with pytest.raises(ValueError, match="sublayers"):
        panel.update(layer=1, sublayers="middle", intervention="zero")


def test_the_panels_zero_the_outliers_with_the_notebooks_zeroed():
    panel = build_panel("intervention_panel")
    assert panel.set(layer=0, sublayers="both", intervention="zero")
    base = minilm.baseline()
    dims = demo.outlier_set(base, LESSONS["outlier_dims"])
    zeroed = LESSONS["zeroed"]
    want = minilm.damage(base, minilm.intervened_embeddings(base, range(1, 7), lambda ln: zeroed(ln, dims)))
    assert list(panel.outputs[1].data[0].y) == want.cos.tolist()
    assert f"{float(want.cos.mean()):.4f}" in panel.outputs[0].value

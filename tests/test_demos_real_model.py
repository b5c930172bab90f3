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


@pytest.fixture(scope="module")
def interventions():
    """One intervention panel for the tests that only set it: building one runs all 84 settings."""
    return build_panel("intervention_panel")


def test_figures_build(base):
    dims = demo.outlier_set(base, LESSONS["outlier_dims"])
    logits = LESSONS["attention_logits"](base.model, base.hidden, base.mask)
    figures = [demo.norm_statistics_figure(base), demo.stream_norm_figure(base), demo.gamma_beta_figure(base, dims),
               demo.outlier_figure(LESSONS["feature_loudness"](base.hidden, base.mask)),
               demo.attention_logit_figure(logits), demo.damage_figure({("L1", "rms"): 0.99}, ["L1"], ["rms"])]
    for fig in figures:
        assert fig.layout.title.text and fig.data


def test_inspector_draws_lines_over_the_features_and_sends_gamma_beta_only_for_a_new_norm():
    panel = build_panel("layernorm_inspector_panel")
    fig = panel.outputs[1]
    assert not any(t.type == "bar" for t in fig.data)  # 384 bars would be one pixel each
    sent = []
    fig.observe(lambda change: sent.append(change["new"]), names="_py2js_update")
    assert panel.set(token=3)
    styled = [m["style_traces"] for m in sent if m]
    assert len(styled) == 1 and 5 not in styled[0] and 6 not in styled[0]  # the norm is the same: γ, β stay
    assert panel.set(norm="L2 attention")
    assert 5 in [m["style_traces"] for m in sent if m][-1]
    ln = minilm.layer_norms(minilm.baseline().model)["L2 attention"]
    assert list(fig.data[5].y) == ln.weight.tolist()
    assert fig.data[4].text[0] == f" feature {int(fig.data[0].y.index(max(fig.data[0].y, key=abs)))} "


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


def test_intervention_panel_shows_the_damage(interventions):
    assert interventions.set(layer=0, sublayers="both", intervention="remove")
    cos = interventions.outputs[1].data[0].y
    assert max(cos) < 0.5
    assert interventions.set(layer=6, intervention="rms")
    assert min(interventions.outputs[1].data[0].y) > 0.98
    with pytest.raises(ValueError, match="choose a block"):
        interventions.update(layer=9, sublayers="both", intervention="rms")
    with pytest.raises(ValueError, match="intervention"):
        interventions.update(layer=1, sublayers="both", intervention="shout")
    with pytest.raises(ValueError, match="sublayers"):
        interventions.update(layer=1, sublayers="middle", intervention="zero")


def test_the_panels_zero_the_outliers_with_the_notebooks_zeroed(interventions):
    assert interventions.set(layer=0, sublayers="both", intervention="zero")
    base = minilm.baseline()
    dims = demo.outlier_set(base, LESSONS["outlier_dims"])
    zeroed = LESSONS["zeroed"]
    want = minilm.damage(base, minilm.intervened_embeddings(base, range(1, 7), lambda ln: zeroed(ln, dims)))
    assert list(interventions.outputs[1].data[0].y) == want.cos.tolist()
    assert f"{float(want.cos.mean()):.4f}" in interventions.outputs[0].value


def test_intervention_panel_flags_a_collapse_instead_of_reading_the_ranking(interventions):
    assert interventions.set(layer=0, sublayers="both", intervention="remove")
    readout = interventions.outputs[0].value
    assert "Collapsed" in readout and "unrelated sentences' mean cosine" in readout
    assert interventions.set(layer=0, intervention="rms")
    readout = interventions.outputs[0].value
    assert "Collapsed" not in readout and "pairs ranked right 100% → <b>100%</b>" in readout


def test_intervention_panel_computes_every_setting_once_when_built(monkeypatch):
    calls = []

    def counted(*args, **kwargs):
        calls.append(args[1:])
        return minilm.intervened_embeddings(*args, **kwargs)
    monkeypatch.setattr(demo, "intervened_embeddings", counted)
    panel = build_panel("intervention_panel")
    settings = 7 * len(minilm.NORM_SITES) * len(demo.INTERVENTIONS)  # L1-L6 and all six, each site, each change
    assert len(calls) == settings
    for layer in (3, 4, 3, 0):
        assert panel.set(layer=layer, sublayers="ffn", intervention="pre")
    assert len(calls) == settings  # a change only looks its result up: nothing reruns the model


def test_intervention_panel_redraws_only_what_moves(interventions):
    fig = interventions.outputs[1]
    assert interventions.set(layer=1, sublayers="both", intervention="rms")
    sent = []

    def record(change):
        sent.append(change["new"])
    fig.observe(record, names="_py2js_update")
    assert interventions.set(layer=2, sublayers="both", intervention="remove")
    fig.unobserve(record, names="_py2js_update")
    messages = [m for m in sent if m]
    assert len(messages) == 1  # one batch, one message
    assert set(messages[0]["style_data"]) == {"y"} and not messages[0]["layout_data"]
    assert messages[0]["style_traces"] == [0, 2, 3]  # the bars and the two kinds of pairs; the y = x line stays


def test_seeds_run_on_held_out_sets_and_random_text():
    full = minilm.load_sentences()
    assert demo.sentence_set(0).sentences == full.sentences
    held = demo.sentence_set(3)
    assert len(held.similar) == len(held.unrelated) == 10
    assert not set(held.sentences) & set(full.sentences)  # new text, not a re-measurement of the course's
    assert demo.sentence_set(3).similar == held.similar and demo.sentence_set(2).similar != held.similar
    with pytest.raises(ValueError, match="held-out"):
        demo.sentence_set(6)
    text = demo.random_text(1, n=3, length=5)
    assert text.input_ids.shape == (3, 7) and text.tokens[0][0] == "[CLS]" and text.tokens[0][-1] == "[SEP]"


def test_stream_after_and_the_spike(base):
    assert demo.stream_after(base) is base.hidden
    rewired = demo.stream_after(base, "pre")
    assert len(rewired) == 7 and torch.equal(rewired[0], base.hidden[0])
    with pytest.raises(ValueError, match="change"):
        demo.stream_after(base, "sideways")
    spike = demo.spike_sites(base)
    assert (spike["position"], spike["feature"]) == (0, 99) and spike["entering"] > 10 * spike["stream"]


def test_int8_error_and_the_sink_lesson(base):
    roundtrip = LESSONS["int8_roundtrip"]
    x = torch.randn(50, 16)
    assert (roundtrip(x) - x).abs().max() <= x.abs().max() / 127 / 2 + 1e-6  # at most half a step
    per_token = roundtrip(x, per_token=True)
    assert ((per_token - x).abs() <= x.abs().amax(-1, keepdim=True) / 127 / 2 + 1e-6).all()
    x[:, 3] *= 1000
    ordinary = [d for d in range(16) if d != 3]
    assert demo.int8_error(roundtrip, x, (), ordinary) > 10 * demo.int8_error(roundtrip, x, [3], ordinary)
    assert demo.int8_error(roundtrip, x, [3]) == demo.int8_error(roundtrip, x, [3], ordinary)
    with pytest.raises(ValueError, match="held aside"):
        demo.int8_error(roundtrip, x, [3], [3, 4])
    spiky = torch.randn(50, 16)
    spiky[0, 3] = 1000.0                             # one value on one token: a per-token scale isolates it
    table = demo.int8_table(roundtrip, spiky, 3, [3, 5])
    checks, ratio = demo.int8_checks(table)
    assert all(checks.values()) and ratio > 10
    assert not all(demo.int8_checks(demo.int8_table(roundtrip, spiky, 3, [3, 5], held=7))[0].values())
    shares, uniform = LESSONS["attention_to_cls"](base.model, base.hidden, base.mask)
    assert len(shares) == 6 and all(0 < s < 1 for s in shares) and 0 < uniform < 0.2


def test_attention_to_cls_matches_the_librarys_attention_probabilities(base):
    bert = minilm.load_reference()[0].auto_model
    chosen = bert.config._attn_implementation
    bert.config._attn_implementation = "eager"  # the only one that returns its probabilities; restored below
    try:
        with torch.no_grad():
            out = bert(input_ids=base.batch.input_ids, attention_mask=base.mask.long(), output_attentions=True)
    finally:
        bert.config._attn_implementation = chosen
    want = [float(a[..., 0].permute(1, 0, 2)[:, base.mask].mean()) for a in out.attentions]  # real queries only
    shares, uniform = LESSONS["attention_to_cls"](base.model, base.hidden, base.mask)
    assert shares == pytest.approx(want, abs=1e-5)
    assert uniform == pytest.approx(float((1 / base.mask.sum(1).float()).repeat_interleave(base.mask.sum(1)).mean()))


def test_switching_a_feature_off_removes_the_sink_and_restores_the_model(base):
    attention_to_cls = LESSONS["attention_to_cls"]
    ln = minilm.layer_norms(base.model)["L1 FFN"]
    before = ln.weight.clone(), ln.bias.clone()
    shares, _ = attention_to_cls(base.model, base.hidden, base.mask)
    off = demo.sink_without(base.model, base.batch, attention_to_cls, 99)
    assert shares[1] > 5 * off[1]
    assert torch.equal(ln.weight, before[0]) and torch.equal(ln.bias, before[1])   # restored
    values = demo.value_norms(base.model, base.hidden, base.mask, blocks=(3,))
    assert values[3][0] < values[3][1]


def test_the_intervention_panel_grades_the_collapse_warning(interventions):
    assert interventions.set(layer=0, sublayers="both", intervention="remove")
    assert "Collapsed" in interventions.outputs[0].value
    assert interventions.set(layer=3, sublayers="both", intervention="pre")
    assert "Partly collapsed" in interventions.outputs[0].value
    assert interventions.set(layer=4, sublayers="both", intervention="rms")
    assert "ollapsed" not in interventions.outputs[0].value


def test_the_claim_checks_pass_the_model_and_fail_plausible_wrong_inputs(base):
    """The checks the claim cells and their experiments share: true of the trained model, false where they must be."""
    spike = demo.spike_sites(base)
    assert all(demo.spike_checks(spike).values())
    assert not all(demo.spike_checks(demo.spike_sites(base, demo.stream_after(base, "pre"))).values())
    assert not all(demo.spike_checks({**spike, "feature": 98}).values())  # a spike on another feature is not the claim
    assert demo.centered(demo.centering_ratio(base)) and not demo.centered(demo.centering_ratio(base, "feature"))
    assert demo.is_sink(0.6, 0.09) and not demo.is_sink(0.3, 0.09)
    assert demo.sink_cut(0.59, 0.05) and not demo.sink_cut(0.59, 0.2)
    clean = minilm.damage(base, base.embeddings)
    assert demo.softcap_harmless(clean) and not demo.softcap_harmless(demo.capped_damage(base, 5.0))
    assert not demo.collapsed(clean)


def test_rebuild_checks_fail_a_rebuild_off_by_more_than_round_off(base):
    good = demo.RebuildCheck([3e-6] * 7, 0.9999999, None, [], [], None)
    assert good.holds and all(demo.rebuild_checks(good).values())
    off = demo.RebuildCheck([3e-6] * 6 + [4e-3], 0.9999999, None, [], [], None)  # one block off: the tanh GELU
    assert not off.holds and demo.rebuild_checks(off)["every sentence embedding's cosine at least 0.9999"]


def test_random_text_baselines_have_the_spike_and_no_pairs():
    text = demo.text_baseline(1)
    assert text.pairs is None and text.hidden[0].shape[:2] == (20, 16)
    assert demo.spike_sites(text)["feature"] == 99
    with pytest.raises(ValueError, match="text"):
        demo._run_on(0, "poems", 14)


def test_held_out_paragraphs_are_long_and_have_the_spike():
    paragraphs = demo.paragraph_baseline()
    lengths = paragraphs.mask.sum(1)
    assert paragraphs.pairs is None and len(lengths) == 4 and bool((lengths >= 88).all() and (lengths <= 102).all())
    assert demo.spike_sites(paragraphs)["feature"] == 99


def test_cls_moved_and_position_ids_shifted(base):
    moved = demo.cls_moved(base.batch)
    assert moved.tokens[0][3] == "[CLS]" and moved.tokens[0][:3] == base.batch.tokens[0][1:4]
    assert moved.tokens[0][4:] == base.batch.tokens[0][4:] and torch.equal(moved.attention_mask, base.mask)
    hidden, norm_in = demo.rerun(base.model, base.batch)  # offset 0: the model as it runs
    torch.testing.assert_close(hidden[-1], base.hidden[-1])
    torch.testing.assert_close(norm_in["L1 FFN"], base.norm_in["L1 FFN"])
    shifted, _ = demo.rerun(base.model, base.batch, offset=1)
    assert not torch.allclose(shifted[1], base.hidden[1])
    _, swapped = demo.rerun(base.model, base.batch, swap=(0, 5))  # position ids of indices 0 and 5 exchanged
    assert demo.spike_of(LESSONS["find_spike"], swapped["L1 FFN"], base.mask)[1:] == (5, 99)  # the spike follows
    with pytest.raises(ValueError, match="real tokens"):
        demo.cls_moved(demo.random_text(0, n=2, length=1), to=3)


def test_attention_on_key_0_is_the_notebooks_attention_to_cls(base):
    shares, uniform = LESSONS["attention_to_cls"](base.model, base.hidden, base.mask)
    on_0, even = demo.attention_on(base.model, base.hidden, base.mask, 0)
    assert on_0 == pytest.approx(shares) and even == pytest.approx(uniform)


def test_the_judges_of_the_new_claims():
    assert demo.first_position_spike(224.0, 0) and not demo.first_position_spike(224.0, 3)
    assert not demo.first_position_spike(12.0, 0)
    assert demo.carries_most(0.75) and not demo.carries_most(0.08)
    assert demo.exact_in_float64([1e-15] * 7) and not demo.exact_in_float64([1e-15] * 6 + [1e-6])
    checks = demo.moved_sink_checks([0.3, 0.6, 0.4, 0.4, 0.4, 0.3], [0.1, 0.1, 0.35, 0.35, 0.35, 0.2], 0.09)
    assert all(checks.values())
    assert not all(demo.moved_sink_checks([0.3, 0.6, 0.4, 0.4, 0.4, 0.3], [0.1, 0.1, 0.35, 0.2, 0.35, 0.2], 0.09)
                   .values())  # 0.2 is not above 2.5x of 0.09
    assert not all(demo.moved_sink_checks([0.3, 0.6, 0.2, 0.4, 0.4, 0.3], [0.1, 0.1, 0.35, 0.35, 0.35, 0.2], 0.09)
                   .values())  # position 0 must keep more than 2.5x in blocks 3-5 too (the sink splits)


def test_sigma_checks_on_text_without_pairs_reads_the_cosines_only(base):
    one = lambda c: minilm.Damage(torch.full((4,), c), float("nan"), float("nan"), torch.empty(0), torch.empty(0))
    runs = {**{f"L{i}": one(0.995) for i in range(1, 5)}, "L5": one(0.95), "L6": one(0.97), "all six": one(0.8)}
    assert set(demo.sigma_checks(runs, None)) == {"blocks 1-4, each alone: mean cosine above 0.99",
                                                  "block 5 or 6 alone: mean cosine above 0.9",
                                                  "all six: mean cosine above 0.75"}
    assert all(demo.sigma_checks(runs, None).values())
    assert not all(demo.sigma_checks({**runs, "L5": one(0.78), "all six": one(0.54)}, None).values())


def test_fixed_sigma_keeps_cls_and_is_layernorm_when_sigma_is_each_tokens_own(base):
    ln = minilm.layer_norms(base.model)["L1 FFN"]
    x = base.norm_in["L1 FFN"][:2]
    own = LESSONS["fixed_sigma"](ln, 1.0, keep_first=True)(x)
    torch.testing.assert_close(own[:, 0], ln(x)[:, 0], rtol=1e-5, atol=1e-5)  # [CLS] keeps its own sigma
    sigma = float(x[0, 1].std(unbiased=False))
    torch.testing.assert_close(LESSONS["fixed_sigma"](ln, sigma, keep_first=False)(x)[0, 1], ln(x)[0, 1],
                               rtol=1e-4, atol=1e-4)
    assert set(demo.median_sigmas(base)) == set(minilm.layer_norms(base.model))


def test_find_spike_lesson_finds_feature_99_at_position_0(base):
    assert LESSONS["find_spike"](base.norm_in["L1 FFN"], base.mask) == (0, 99)
    assert demo.spike_of(LESSONS["find_spike"], base.norm_in["L1 FFN"], base.mask)[0] > demo.SPIKE_ABOVE

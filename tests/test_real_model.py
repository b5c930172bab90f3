"""all-MiniLM-L6-v2 in the course's blocks: offline loading, reproduction of the library (per-layer hidden states
within 1e-4 absolute in float32, sentence-embedding cosine >= 0.9999), the interventions, the checker and the panels."""
import math
import os
import socket

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_utils import real_model as rm
from course_utils.demos import real_model as demo
from course_utils.panel import PANELS
from course_utils.transformer import TransformerBlock

HIDDEN_ATOL = 1e-4      # float32, per hidden state, at real tokens
EMBEDDING_COS = 0.9999  # against SentenceTransformer.encode


@pytest.fixture(scope="module")
def base():
    with torch.no_grad():
        yield rm.baseline()


ATTEMPTS = []  # every connection tried while the library loads and runs


@pytest.fixture(scope="module")
def no_network():
    """Refuse (and record) any attempt to open a connection, so a library that swallows the error is still caught."""
    original = socket.socket.connect

    def refuse(self, address, *args):
        ATTEMPTS.append(address)
        raise OSError(f"network access refused in tests: {address}")

    socket.socket.connect = refuse
    yield
    socket.socket.connect = original


@pytest.fixture(scope="module")
def reference(base, no_network):
    with torch.no_grad():
        return rm.reference_outputs(base.pairs.sentences, base.batch)


def test_reference_loads_offline(reference):
    assert os.environ["HF_HUB_OFFLINE"] == "1" and os.environ["TRANSFORMERS_OFFLINE"] == "1"
    assert not ATTEMPTS, f"the model tried to reach the network: {ATTEMPTS}"


def test_every_hidden_state_matches_the_library(base, reference):
    ref_hidden, _ = reference
    assert len(base.hidden) == len(ref_hidden) == 7
    for i, (ours, theirs) in enumerate(zip(base.hidden, ref_hidden)):
        err = float((ours - theirs)[base.mask].abs().max())
        assert err <= HIDDEN_ATOL, f"hidden state {i}: max abs error {err:.2e}"


def test_sentence_embeddings_match_encode(base, reference):
    _, ref_embeddings = reference
    cos = (base.embeddings * ref_embeddings).sum(-1)
    assert float(cos.min()) >= EMBEDDING_COS
    torch.testing.assert_close(base.embeddings.norm(dim=-1), torch.ones(len(cos)))


def test_the_reproduction_check_can_fail(base, reference):
    """The tanh GELU differs from BERT's exact GELU by < 1e-3; the per-layer check must still see it."""
    ref_hidden, _ = reference
    model = base.model
    exact = [b.ffn.activation for b in model.blocks]
    try:
        for b in model.blocks:
            b.ffn.activation = nn.GELU(approximate="tanh")
        with torch.no_grad():
            _, hidden = model(base.batch.input_ids, base.mask, return_hidden=True)
    finally:
        for b, act in zip(model.blocks, exact):
            b.ffn.activation = act
    assert max(float((a - b)[base.mask].abs().max()) for a, b in zip(hidden, ref_hidden)) > HIDDEN_ATOL


def test_tokenizer_matches_the_library(base, reference):
    st = rm.load_reference()
    features = st[0].tokenizer(base.pairs.sentences, padding=True, truncation=True, max_length=256,
                               return_tensors="pt")
    assert torch.equal(features["input_ids"], base.batch.input_ids)
    assert torch.equal(features["attention_mask"].bool(), base.mask)
    assert st.max_seq_length == rm.CONFIG["max_seq_length"]


def test_bert_gelu_is_the_exact_one(reference):
    act = rm.load_reference()[0].auto_model.encoder.layer[0].intermediate.intermediate_act_fn
    x = torch.linspace(-6, 6, 101)
    torch.testing.assert_close(act(x), nn.GELU()(x), rtol=0, atol=1e-6)


def test_weight_map_uses_every_tensor_once():
    from safetensors.torch import load_file

    state = load_file(str(rm.model_dir() / "model.safetensors"))
    used = {theirs.format(i=i) for theirs in rm.WEIGHT_MAP.values()
            for i in (range(rm.CONFIG["n_layers"]) if "{i}" in theirs else [None])}
    unused = set(state) - used
    assert used <= set(state)
    assert all(k.startswith("pooler.") or k.endswith("position_ids") for k in unused), unused
    model = rm.load_minilm()
    assert len(used) == sum(1 for _ in model.parameters())
    assert not any(p.requires_grad for p in model.parameters()) and not model.training


def test_load_is_cached():
    assert rm.load_minilm() is rm.load_minilm() and rm.baseline() is rm.baseline()


def test_tokenize_pads_and_masks():
    batch = rm.tokenize(["a", "a much longer sentence than the first one"])
    assert batch.tokens[0] == ["[CLS]", "a", "[SEP]"]
    assert batch.attention_mask.sum(1).tolist() == [3, len(batch.tokens[1])]
    assert (batch.input_ids[0, 3:] == 0).all()
    for bad in ("just a string", [], [1, 2]):
        with pytest.raises(ValueError):
            rm.tokenize(bad)


def test_mean_pool_ignores_padding():
    x = torch.randn(2, 5, 3)
    mask = torch.tensor([[True, True, False, False, False], [True] * 5])
    loud = x.clone()
    loud[0, 2:] = 1e6
    torch.testing.assert_close(rm.mean_pool(loud, mask), torch.stack([x[0, :2].mean(0), x[1].mean(0)]))
    torch.testing.assert_close(rm.sentence_embedding(loud, mask).norm(dim=-1), torch.ones(2))


def test_separation_scores_pairs():
    pairs = rm.SentencePairs(similar=[("a", "b"), ("c", "d")], unrelated=[("a", "d"), ("c", "b")])
    e = torch.tensor([[1.0, 0.0], [1.0, 0.1], [0.0, 1.0], [0.1, 1.0]])
    gap, ranked = rm.separation(e, pairs)
    assert ranked == 1.0 and gap > 0.8
    gap, ranked = rm.separation(e[[0, 2, 3, 1]], pairs)  # now a~d and c~b: unrelated pairs score higher
    assert ranked == 0.0 and gap < 0


def test_sentence_file_has_pairs_over_one_set(base):
    pairs = base.pairs
    assert len(pairs.similar) >= 8 and len(pairs.unrelated) >= 8
    assert set(pairs.sentences) == {s for p in pairs.similar for s in p}  # unrelated pairs reuse the same sentences
    with pytest.raises(FileNotFoundError):
        rm.load_sentences("/nonexistent/sentences.json")


def test_block_forward_placements_match_the_course_blocks(base):
    block, x, mask = base.model.blocks[1], base.hidden[1], base.mask
    with torch.no_grad():
        torch.testing.assert_close(rm.block_forward(block, x, mask), block(x, mask))
        pre = TransformerBlock(384, 12, 1536, placement="pre", activation="gelu", eps=1e-12, causal=False)
        pre.load_state_dict(block.state_dict())
        torch.testing.assert_close(rm.block_forward(block, x, mask, pre1=True, pre2=True), pre(x, mask))


def test_no_recentering_is_rms_norm_with_gamma_and_beta(base):
    ln = base.model.blocks[0].norm2
    x = base.norm_in["L1 FFN"]
    want = F.rms_norm(x, (384,), ln.weight, ln.eps) + ln.bias
    torch.testing.assert_close(rm.no_recentering(ln)(x), want)
    centred = x - x.mean(-1, keepdim=True)  # on centred input it is LayerNorm
    torch.testing.assert_close(rm.no_recentering(ln)(centred), ln(centred), rtol=1e-4, atol=1e-4)


def test_zero_dims_zeroes_those_outputs_only(base):
    ln = base.model.blocks[0].norm1
    x = base.norm_in["L1 attention"]
    out = rm.zero_dims(ln, [3, 7])(x)
    assert (out[..., [3, 7]] == 0).all()
    keep = [d for d in range(384) if d not in (3, 7)]
    torch.testing.assert_close(out[..., keep], ln(x)[..., keep])
    assert float(ln.weight[3]) != 0  # the model itself is untouched


def test_outlier_dims_are_few_and_shared(base):
    loud, odd = rm.outlier_dims(base)
    assert 1 <= len(set(loud) | set(odd)) <= 8 and set(loud) & set(odd)


def test_interventions_do_what_they_say(base):
    with torch.no_grad():
        same = rm.intervened_embeddings(base, [3], "pre", "attention")
        assert float(rm.damage(base, same).cos.mean()) < 0.99
        rms = rm.damage(base, rm.intervened_embeddings(base, [2], "rms", "both"))
        removed = rm.damage(base, rm.intervened_embeddings(base, [2], "remove", "both"))
    assert float(rms.cos.min()) > 0.98 and rms.ranked == 1.0
    assert float(removed.cos.mean()) < float(rms.cos.mean()) - 0.05
    for bad in [dict(layers=[], intervention="rms"), dict(layers=[7], intervention="rms"),
                dict(layers=[1], intervention="shout"), dict(layers=[1], intervention="zero"),
                dict(layers=[1], intervention="rms", sublayers="middle")]:
        with pytest.raises(ValueError):
            rm.intervened_embeddings(base, **bad)


def test_attention_logits_cover_real_pairs_only(base):
    logits = rm.attention_logits(base)
    n_pairs = int((base.mask.sum(1) ** 2).sum())
    assert len(logits) == 6 and all(s.shape == (12, n_pairs) for s in logits)
    assert all(math.isfinite(float(s.abs().max())) for s in logits)


def test_check_mean_pool_grades():
    def unfinished(x, mask):
        raise NotImplementedError

    def padded(x, mask):
        return x.mean(1)

    def right(x, mask):
        w = mask.unsqueeze(-1).to(x.dtype)
        return (x * w).sum(1) / w.sum(1)

    assert rm.check_mean_pool(right).passed
    report = rm.check_mean_pool(padded)
    assert not report.passed and "padding" in report.first_failure.detail
    assert "not implemented" in rm.check_mean_pool(unfinished).first_failure.detail
    assert not rm.check_mean_pool(lambda x, mask: "nope").passed


def test_figures_build(base):
    dims = demo.outlier_set(base)
    figures = [demo.norm_statistics_figure(base), demo.stream_norm_figure(base), demo.gamma_beta_figure(base, dims),
               demo.outlier_figure(base), demo.attention_logit_figure(rm.attention_logits(base)),
               demo.damage_figure({("L1", "rms"): 0.99}, ["L1"], ["rms"])]
    for fig in figures:
        assert fig.layout.title.text and fig.data


@pytest.mark.parametrize("name", [n for n, (nb, _) in PANELS.items() if nb == "08_real_model"])
def test_panel_sweeps_without_raising(name):
    panel = PANELS[name][1]()
    for values in panel.sweep(points=3):
        ok = panel.set(**values)
        assert ok or panel.last_error and "Something went wrong" not in panel.message.value, (values, panel.last_error)


def test_both_panels_are_registered():
    assert {"layernorm_inspector_panel", "intervention_panel"} <= {n for n, (nb, _) in PANELS.items()
                                                                   if nb == "08_real_model"}


def test_inspector_shows_the_last_token_past_a_short_sentence():
    panel = demo.layernorm_inspector_panel()
    assert panel.set(sentence=5, token=13)
    readout = panel.outputs[0].value
    assert "[SEP]" in readout and "has only 10 tokens" in readout
    assert panel.set(token=0) and "has only" not in panel.outputs[0].value
    with pytest.raises(ValueError, match="start at 0"):
        panel.update(norm="L1 FFN", sentence=0, token=-1)
    with pytest.raises(ValueError, match="LayerNorms"):  # a dropdown cannot send this; the handler still refuses
        panel.update(norm="L9 FFN", sentence=0, token=0)


def test_intervention_panel_shows_the_damage():
    panel = demo.intervention_panel()
    assert panel.set(layer=0, sublayers="both", intervention="remove")
    cos = panel.outputs[1].data[0].y
    assert max(cos) < 0.5
    assert panel.set(layer=6, intervention="rms")
    assert min(panel.outputs[1].data[0].y) > 0.98
    with pytest.raises(ValueError, match="choose a block"):
        panel.update(layer=9, sublayers="both", intervention="rms")
    with pytest.raises(ValueError, match="intervention"):
        panel.update(layer=1, sublayers="both", intervention="shout")

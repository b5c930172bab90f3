"""all-MiniLM-L6-v2 in the course's blocks (course_utils.minilm): offline loading, reproduction of the library
(per-layer hidden states within 1e-4 absolute in float32, sentence-embedding cosine >= 0.9999), the interventions.
Notebook 08's own functions (rms_instead, zeroed, outlier_dims, attention_logits) are checked in test_lessons.py."""
import os
import socket

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_utils import minilm
from course_utils.exercises import check_mean_pool
from course_utils.panel import PANELS
from course_utils.transformer import TransformerBlock

HIDDEN_ATOL = 1e-4      # float32, per hidden state, at real tokens
EMBEDDING_COS = 0.9999  # against SentenceTransformer.encode


@pytest.fixture(scope="module")
def base():
    with torch.no_grad():
        yield minilm.baseline()


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
        return minilm.reference_outputs(base.pairs.sentences, base.batch)


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
    st = minilm.load_reference()
    features = st[0].tokenizer(base.pairs.sentences, padding=True, truncation=True, max_length=256,
                               return_tensors="pt")
    assert torch.equal(features["input_ids"], base.batch.input_ids)
    assert torch.equal(features["attention_mask"].bool(), base.mask)
    assert st.max_seq_length == minilm.CONFIG["max_seq_length"]


def test_bert_gelu_is_the_exact_one(reference):
    act = minilm.load_reference()[0].auto_model.encoder.layer[0].intermediate.intermediate_act_fn
    x = torch.linspace(-6, 6, 101)
    torch.testing.assert_close(act(x), nn.GELU()(x), rtol=0, atol=1e-6)


def test_weight_map_uses_every_tensor_once():
    from safetensors.torch import load_file

    state = load_file(str(minilm.model_dir() / "model.safetensors"))
    used = {theirs.format(i=i) for theirs in minilm.WEIGHT_MAP.values()
            for i in (range(minilm.CONFIG["n_layers"]) if "{i}" in theirs else [None])}
    unused = set(state) - used
    assert used <= set(state)
    assert all(k.startswith("pooler.") or k.endswith("position_ids") for k in unused), unused
    model = minilm.load_minilm()
    assert len(used) == sum(1 for _ in model.parameters())
    assert not any(p.requires_grad for p in model.parameters()) and not model.training


def test_load_is_cached():
    assert minilm.load_minilm() is minilm.load_minilm() and minilm.baseline() is minilm.baseline()


def test_tokenize_pads_and_masks():
    batch = minilm.tokenize(["a", "a much longer sentence than the first one"])
    assert batch.tokens[0] == ["[CLS]", "a", "[SEP]"]
    assert batch.attention_mask.sum(1).tolist() == [3, len(batch.tokens[1])]
    assert (batch.input_ids[0, 3:] == 0).all()
    for bad in ("just a string", [], [1, 2]):
        with pytest.raises(ValueError):
            minilm.tokenize(bad)


def test_mean_pool_ignores_padding():
    x = torch.randn(2, 5, 3)
    mask = torch.tensor([[True, True, False, False, False], [True] * 5])
    loud = x.clone()
    loud[0, 2:] = 1e6
    torch.testing.assert_close(minilm.mean_pool(loud, mask), torch.stack([x[0, :2].mean(0), x[1].mean(0)]))
    torch.testing.assert_close(minilm.sentence_embedding(loud, mask).norm(dim=-1), torch.ones(2))


def test_separation_scores_pairs():
    pairs = minilm.SentencePairs(similar=[("a", "b"), ("c", "d")], unrelated=[("a", "d"), ("c", "b")])
    e = torch.tensor([[1.0, 0.0], [1.0, 0.1], [0.0, 1.0], [0.1, 1.0]])
    gap, ranked = minilm.separation(e, pairs)
    assert ranked == 1.0 and gap > 0.8
    gap, ranked = minilm.separation(e[[0, 2, 3, 1]], pairs)  # now a~d and c~b: unrelated pairs score higher
    assert ranked == 0.0 and gap < 0


def test_sentence_file_has_pairs_over_one_set(base):
    pairs = base.pairs
    assert len(pairs.similar) >= 8 and len(pairs.unrelated) >= 8
    assert set(pairs.sentences) == {s for p in pairs.similar for s in p}  # unrelated pairs reuse the same sentences
    with pytest.raises(FileNotFoundError):
        minilm.load_sentences("/nonexistent/sentences.json")


def test_norm_inputs_are_the_residual_sums_of_the_post_ln_blocks(base):
    x, mask = base.hidden[0], base.mask
    for i, block in enumerate(base.model.blocks, start=1):
        with torch.no_grad():
            a = x + block.attn(x, mask)
            f = block.norm1(a) + block.ffn(block.norm1(a))
        torch.testing.assert_close(base.norm_in[f"L{i} attention"], a, rtol=0, atol=0)
        torch.testing.assert_close(base.norm_in[f"L{i} FFN"], f, rtol=0, atol=0)
        x = base.hidden[i]


def test_pre_ln_rewiring_is_the_course_pre_ln_block(base):
    block, x, mask = base.model.blocks[1], base.hidden[1], base.mask
    with torch.no_grad():
        pre = TransformerBlock(384, 12, 1536, placement="pre", activation="gelu", eps=1e-12, causal=False)
        pre.load_state_dict(block.state_dict())
        torch.testing.assert_close(block(x, mask, placement="pre"), pre(x, mask))
        h = x + block.attn(block.norm1(x), mask)  # attention rewired, the FFN left Post-LN
        torch.testing.assert_close(block(x, mask, placement=("pre", "post")), block.norm2(h + block.ffn(h)))


@pytest.mark.parametrize("sublayers, placement", [("attention", ("pre", "post")), ("ffn", ("post", "pre")),
                                                  ("both", ("pre", "pre"))])
def test_pre_intervention_is_the_block_run_with_pre_placement(base, sublayers, placement):
    with torch.no_grad():
        x = base.model.blocks[2](base.hidden[2], base.mask, placement=placement)
        for block in base.model.blocks[3:]:
            x = block(x, base.mask)
        want = minilm.sentence_embedding(x, base.mask)
        got = minilm.intervened_embeddings(base, [3], "pre", sublayers)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def _rms(ln):
    """An RMSNorm replacement for a LayerNorm, as an intervention hands it over (the notebook's is rms_instead)."""
    return lambda x: F.rms_norm(x, (x.shape[-1],), ln.weight, ln.eps) + ln.bias


def test_every_intervention_runs_through_the_block_forward(base, monkeypatch):
    calls = []
    forward = TransformerBlock.forward

    def counted(self, *args, **kwargs):
        calls.append(set(kwargs))
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(TransformerBlock, "forward", counted)
    with torch.no_grad():
        for intervention in (*minilm.REWIRINGS, _rms):
            for sublayers in minilm.NORM_SITES:
                calls.clear()
                minilm.intervened_embeddings(base, [5], intervention, sublayers)
                assert len(calls) == 2, (intervention, sublayers)  # blocks 5 and 6; 1 to 4 are the baseline's
                assert calls[0] and not calls[1], (intervention, sublayers, calls)  # only block 5 is edited
        calls.clear()
        minilm.norm_inputs(base.model, base.batch)
    assert len(calls) == len(base.model.blocks) and all(c == {"record"} for c in calls)


def test_a_replacement_reaches_only_the_norms_chosen(base):
    block, x, mask = base.model.blocks[3], base.hidden[3], base.mask

    def halved(ln):
        return lambda h: 0.5 * ln(h)

    with torch.no_grad():
        want = block(x, mask, norm2=halved(block.norm2))
        for later in base.model.blocks[4:]:
            want = later(want, mask)
        got = minilm.intervened_embeddings(base, [4], halved, "ffn")
    torch.testing.assert_close(got, minilm.sentence_embedding(want, mask), rtol=0, atol=0)


def test_interventions_do_what_they_say(base):
    with torch.no_grad():
        same = minilm.intervened_embeddings(base, [3], "pre", "attention")
        assert float(minilm.damage(base, same).cos.mean()) < 0.99
        rms = minilm.damage(base, minilm.intervened_embeddings(base, [2], _rms, "both"))
        removed = minilm.damage(base, minilm.intervened_embeddings(base, [2], "remove", "both"))
    assert float(rms.cos.min()) > 0.98 and rms.ranked == 1.0
    assert float(removed.cos.mean()) < float(rms.cos.mean()) - 0.05
    for bad in [dict(layers=[], intervention="remove"), dict(layers=[7], intervention="remove"),
                dict(layers=[1], intervention="shout"), dict(layers=[1], intervention="rms"),
                dict(layers=[1], intervention=_rms, sublayers="middle")]:
        with pytest.raises(ValueError):
            minilm.intervened_embeddings(base, **bad)


def test_a_soft_capped_minilm_is_built_through_its_blocks():
    small = dict(vocab_size=20, d_model=8, n_heads=2, d_ff=16, n_layers=2, max_position=8)
    torch.manual_seed(0)
    plain = minilm.MiniLM(**small)
    capped = minilm.MiniLM(**small, attn_softcap=0.5)
    capped.load_state_dict(plain.state_dict())
    assert [b.attn.attn_softcap for b in capped.blocks] == [0.5, 0.5]
    assert all(b.attn.attn_softcap is None for b in plain.blocks)
    ids, mask = torch.randint(0, 20, (2, 6)), torch.ones(2, 6, dtype=torch.bool)
    with torch.no_grad():
        assert not torch.allclose(capped(ids, mask), plain(ids, mask))
    with pytest.raises(ValueError, match="attn_softcap"):
        minilm.MiniLM(**small, attn_softcap=0.0)


def test_check_mean_pool_grades():
    def unfinished(x, mask):
        raise NotImplementedError

    def padded(x, mask):
        return x.mean(1)

    def right(x, mask):
        w = mask.unsqueeze(-1).to(x.dtype)
        return (x * w).sum(1) / w.sum(1)

    assert check_mean_pool(right).passed
    report = check_mean_pool(padded)
    assert not report.passed and "padding" in report.first_failure.detail
    assert "not implemented" in check_mean_pool(unfinished).first_failure.detail
    assert not check_mean_pool(lambda x, mask: "nope").passed


def test_both_panels_are_registered():
    """tests/test_panel.py sweeps every registered panel; latency: course_utils.bench."""
    assert {"layernorm_inspector_panel", "intervention_panel"} <= {n for n, (nb, _) in PANELS.items()
                                                                   if nb == "08_real_model"}


def test_the_held_out_text_is_new_and_shaped_like_the_courses():
    sets, paragraphs = minilm.load_heldout()
    course = set(minilm.load_sentences().sentences)
    assert len(sets) == 5 and len(paragraphs) == 4
    for pairs in sets:
        assert len(pairs.similar) == len(pairs.unrelated) == 10 and len(pairs.sentences) == 20
        assert not set(pairs.sentences) & course
    with pytest.raises(FileNotFoundError, match="heldout"):
        minilm.load_heldout("/nonexistent/heldout_sentences.json")

"""The course's Transformer block against torch.nn.TransformerEncoderLayer, QK-norm and soft-caps against their
formulas, and the tiny LM's seeded initialisation."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from conftest import TOL
from course_utils.transformer import TinyLM, TransformerBlock, softcap


def _torch_layer(block: TransformerBlock, norm: str, placement: str) -> nn.TransformerEncoderLayer:
    """PyTorch's encoder layer with the block's weights; its norms swapped to match `norm`."""
    d, heads = block.attn.d_model, block.attn.n_heads
    layer = nn.TransformerEncoderLayer(d, heads, block.ffn.linear1.out_features, dropout=0.0, batch_first=True,
                                       norm_first=placement == "pre")
    if norm == "rms":
        layer.norm1, layer.norm2 = nn.RMSNorm(d), nn.RMSNorm(d)
    elif norm == "none":
        layer.norm1, layer.norm2 = nn.Identity(), nn.Identity()
    layer = layer.to(next(block.parameters()).dtype)
    a = block.attn
    with torch.no_grad():
        layer.self_attn.in_proj_weight.copy_(torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]))
        layer.self_attn.in_proj_bias.copy_(torch.cat([a.q_proj.bias, a.k_proj.bias, a.v_proj.bias]))
        layer.self_attn.out_proj.load_state_dict(a.out_proj.state_dict())
        layer.linear1.load_state_dict(block.ffn.linear1.state_dict())
        layer.linear2.load_state_dict(block.ffn.linear2.state_dict())
        if norm != "none":
            layer.norm1.load_state_dict(block.norm1.state_dict())
            layer.norm2.load_state_dict(block.norm2.state_dict())
    return layer


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("norm", ["layer", "rms", "none"])
@pytest.mark.parametrize("placement", ["pre", "post"])
@pytest.mark.parametrize("causal", [True, False])
def test_block_matches_torch_encoder_layer(dtype, norm, placement, causal):
    block = TransformerBlock(16, 4, 32, norm=norm, placement=placement, causal=causal,
                             eps=None if norm == "rms" else 1e-5).to(dtype)
    with torch.no_grad():
        for p in block.parameters():
            p.add_(torch.randn_like(p) * 0.1)  # non-trivial gains and biases
    layer = _torch_layer(block, norm, placement)
    x = torch.randn(3, 6, 16, dtype=dtype)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    mask = nn.Transformer.generate_square_subsequent_mask(6, dtype=dtype) if causal else None
    out_a, out_b = block(xa), layer(xb, src_mask=mask, is_causal=causal)
    tol = TOL[dtype]
    torch.testing.assert_close(out_a, out_b, atol=tol, rtol=tol)
    probe = torch.randn(out_a.shape, dtype=dtype)
    (out_a * probe).sum().backward()
    (out_b * probe).sum().backward()
    torch.testing.assert_close(xa.grad, xb.grad, atol=tol, rtol=tol)
    torch.testing.assert_close(block.ffn.linear1.weight.grad, layer.linear1.weight.grad, atol=tol, rtol=tol)
    torch.testing.assert_close(torch.cat([block.attn.q_proj.weight.grad, block.attn.k_proj.weight.grad,
                                          block.attn.v_proj.weight.grad]),
                               layer.self_attn.in_proj_weight.grad, atol=tol, rtol=tol)


def _attention_by_hand(block, x, qk_norm, cap):
    a = block.attn
    b, t, d = x.shape
    h, dh = a.n_heads, a.d_head
    q = (x @ a.q_proj.weight.T + a.q_proj.bias).view(b, t, h, dh).transpose(1, 2)
    k = (x @ a.k_proj.weight.T + a.k_proj.bias).view(b, t, h, dh).transpose(1, 2)
    v = (x @ a.v_proj.weight.T + a.v_proj.bias).view(b, t, h, dh).transpose(1, 2)
    if qk_norm:
        q = F.rms_norm(q, (dh,), a.q_norm.weight, a.q_norm.eps)
        k = F.rms_norm(k, (dh,), a.k_norm.weight, a.k_norm.eps)
    s = q @ k.transpose(-1, -2) / math.sqrt(dh)
    if cap is not None:
        s = cap * torch.tanh(s / cap)
    s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    out = (s.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
    return out @ a.out_proj.weight.T + a.out_proj.bias


@pytest.mark.parametrize("qk_norm, cap", [(True, None), (False, 5.0), ("rms", 2.0)])
def test_qk_norm_and_attention_softcap_follow_their_formulas(qk_norm, cap):
    block = TransformerBlock(16, 2, norm="none", qk_norm=qk_norm, attn_softcap=cap).double()
    if qk_norm:
        with torch.no_grad():
            block.attn.q_norm.weight.uniform_(0.5, 2.0)
    x = torch.randn(2, 5, 16, dtype=torch.float64) * 4
    torch.testing.assert_close(block.attn(x), _attention_by_hand(block, x, qk_norm, cap), atol=1e-10, rtol=1e-10)


def test_softcap_bounds_and_is_near_identity_for_small_values():
    x = torch.linspace(-1000, 1000, 101, dtype=torch.float64)
    assert softcap(x, 30.0).abs().max() <= 30.0
    assert softcap(torch.tensor([40.0]), 30.0) < 30.0
    small = torch.linspace(-0.3, 0.3, 7, dtype=torch.float64)
    torch.testing.assert_close(softcap(small, 30.0), small, atol=1e-4, rtol=0)
    assert softcap(x, None) is x


def test_qk_norm_bounds_attention_logits_whatever_the_input_scale():
    block = TransformerBlock(16, 2, qk_norm=True)
    for scale in (1.0, 1e3):
        block.attn(torch.randn(1, 8, 16) * scale)
        bound = math.sqrt(block.attn.d_head) * float(block.attn.q_norm.weight.detach().abs().max() ** 2)
        assert float(block.attn.last_max_logit) <= bound + 1e-4


def test_tiny_lm_is_seeded_and_deterministic():
    torch.manual_seed(123)
    a = TinyLM(16, 32, 2, 4, seed=5)
    torch.manual_seed(999)  # the global RNG must not matter
    b = TinyLM(16, 32, 2, 4, seed=5)
    c = TinyLM(16, 32, 2, 4, seed=6)
    for (name, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.equal(pa, pb), name
    assert not torch.equal(a.blocks[0].attn.q_proj.weight, c.blocks[0].attn.q_proj.weight)
    idx = torch.randint(0, 16, (2, 10))
    assert torch.equal(a(idx), b(idx))


@pytest.mark.parametrize("placement, norm, expect_final", [("pre", "layer", True), ("post", "layer", False),
                                                           ("pre", "rms", True), ("pre", "none", False)])
def test_final_norm_default_and_hidden_states(placement, norm, expect_final):
    model = TinyLM(16, 32, 3, 4, placement=placement, norm=norm)
    assert isinstance(model.final_norm, nn.Identity) != expect_final
    logits, hidden = model(torch.randint(0, 16, (2, 7)), return_hidden=True)
    assert logits.shape == (2, 7, 16) and len(hidden) == 4 and hidden[-1].shape == (2, 7, 32)


def test_final_softcap_bounds_logits_and_gradients_flow():
    model = TinyLM(16, 32, 2, 4, final_softcap=3.0)
    with torch.no_grad():
        model.head.weight.mul_(100)
    logits = model(torch.randint(0, 16, (2, 6)))
    assert logits.abs().max() <= 3.0
    logits.sum().backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad and p is not model.pos_emb.weight
               or p is model.pos_emb.weight)
    assert math.isfinite(model.max_attention_logit())


def test_causal_attention_does_not_look_ahead():
    model = TinyLM(16, 32, 2, 4)
    idx = torch.randint(0, 16, (1, 8))
    changed = idx.clone()
    changed[0, -1] = (idx[0, -1] + 1) % 16
    torch.testing.assert_close(model(idx)[:, :-1], model(changed)[:, :-1])


@pytest.mark.parametrize("kwargs, match", [
    (dict(norm="batch"), "norm"), (dict(placement="middle"), "placement"), (dict(qk_norm="l2"), "qk_norm"),
    (dict(attn_softcap=0.0), "attn_softcap"), (dict(attn_softcap=float("inf")), "attn_softcap"),
    (dict(activation="tanh"), "activation"), (dict(n_heads=3), "divisible"), (dict(eps=0.0), "eps"),
])
def test_block_rejects_wrong_arguments(kwargs, match):
    args = dict(d_model=16, n_heads=4) | kwargs
    with pytest.raises(ValueError, match=match):
        TransformerBlock(**args)


@pytest.mark.parametrize("call, match", [
    (lambda: TinyLM(16, final_softcap=-1.0), "final_softcap"),
    (lambda: TinyLM(1), "vocab_size"),
    (lambda: TinyLM(16, max_len=4)(torch.zeros(1, 5, dtype=torch.long)), "max_len"),
    (lambda: TinyLM(16)(torch.zeros(5, dtype=torch.long)), "idx"),
    (lambda: TransformerBlock(16, 4)(torch.randn(2, 3, 8)), "x must be"),
    (lambda: TransformerBlock(16, 4)(torch.randn(2, 3, 16), torch.ones(2, 4, dtype=torch.bool)), "key_padding_mask"),
])
def test_model_rejects_wrong_inputs(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def _perturbed_block(placement: str, norm: str = "layer") -> TransformerBlock:
    block = TransformerBlock(16, 4, 32, norm=norm, placement=placement).double()
    with torch.no_grad():
        for p in block.parameters():
            p.add_(torch.randn_like(p) * 0.1)  # non-trivial gains and biases, so a misplaced norm shows
    return block


def _sublayer_by_hand(x, sublayer, norm, placement):
    return x + sublayer(norm(x)) if placement == "pre" else norm(x + sublayer(x))


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_default_call_is_the_textbook_formula_bit_for_bit(placement):
    block, x = _perturbed_block(placement), torch.randn(2, 5, 16, dtype=torch.float64)
    if placement == "pre":
        h = x + block.attn(block.norm1(x))
        want = h + block.ffn(block.norm2(h))
    else:
        h = block.norm1(x + block.attn(x))
        want = block.norm2(h + block.ffn(h))
    torch.testing.assert_close(block(x), want, rtol=0, atol=0)


@pytest.mark.parametrize("own", ["pre", "post"])
@pytest.mark.parametrize("override", ["pre", "post", ("pre", "post"), ("post", "pre"), ["pre", "pre"]])
def test_placement_override_matches_a_hand_written_forward(own, override):
    block, x = _perturbed_block(own), torch.randn(2, 5, 16, dtype=torch.float64)
    mask = torch.tensor([[True] * 5, [True, True, True, False, False]])
    p_attn, p_ffn = (override, override) if isinstance(override, str) else override
    h = _sublayer_by_hand(x, lambda h: block.attn(h, mask), block.norm1, p_attn)
    want = _sublayer_by_hand(h, block.ffn, block.norm2, p_ffn)
    torch.testing.assert_close(block(x, mask, placement=override), want, rtol=0, atol=0)
    assert block.placement == own  # the override lasts one call


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_norm_override_replaces_that_norm_for_one_call(placement):
    block, x = _perturbed_block(placement), torch.randn(2, 5, 16, dtype=torch.float64)
    halve, rms = (lambda t: 0.5 * t), nn.RMSNorm(16, eps=1e-6).double()
    h = _sublayer_by_hand(x, block.attn, halve, placement)
    want = _sublayer_by_hand(h, block.ffn, rms, placement)
    torch.testing.assert_close(block(x, norm1=halve, norm2=rms), want, rtol=0, atol=0)
    h = _sublayer_by_hand(x, block.attn, block.norm1, placement)
    torch.testing.assert_close(block(x, norm2=halve), _sublayer_by_hand(h, block.ffn, halve, placement))
    torch.testing.assert_close(block(x), _sublayer_by_hand(h, block.ffn, block.norm2, placement))


@pytest.mark.parametrize("placement", ["pre", "post", ("post", "pre")])
def test_record_holds_what_each_norm_and_sublayer_sees(placement):
    block, x = _perturbed_block("post", norm="rms"), torch.randn(2, 5, 16, dtype=torch.float64)
    p_attn, p_ffn = (placement, placement) if isinstance(placement, str) else placement
    if p_attn == "pre":
        want = {"norm1_in": x, "attn_in": block.norm1(x)}
        h = x + block.attn(want["attn_in"])
    else:
        want = {"attn_in": x, "norm1_in": x + block.attn(x)}
        h = block.norm1(want["norm1_in"])
    if p_ffn == "pre":
        want |= {"norm2_in": h, "ffn_in": block.norm2(h)}
        out = h + block.ffn(want["ffn_in"])
    else:
        want |= {"ffn_in": h, "norm2_in": h + block.ffn(h)}
        out = block.norm2(want["norm2_in"])
    record = {"earlier": 1}
    torch.testing.assert_close(block(x, placement=placement, record=record), out, rtol=0, atol=0)
    assert record.pop("earlier") == 1 and set(record) == set(want)
    for name, value in want.items():
        torch.testing.assert_close(record[name], value, rtol=0, atol=0, msg=name)


@pytest.mark.parametrize("kwargs, match", [
    (dict(placement="middle"), "placement"), (dict(placement=("pre",)), "placement"),
    (dict(placement=("pre", "side")), "placement"), (dict(placement=3), "placement"),
    (dict(record=[]), "record"),
])
def test_block_forward_rejects_wrong_options(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TransformerBlock(16, 4)(torch.randn(2, 3, 16), **kwargs)


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_residual_scale_scales_the_skip_path_and_defaults_to_the_plain_block(placement):
    torch.manual_seed(0)
    plain = TransformerBlock(16, 4, placement=placement)
    scaled = TransformerBlock(16, 4, placement=placement, residual_scale=1.7)
    scaled.load_state_dict(plain.state_dict())
    assert plain.residual_scale == 1.0
    x = torch.randn(2, 5, 16)
    if placement == "post":  # DeepNorm: x = LN(alpha x + F(x)) for both sublayers
        h = plain.norm1(1.7 * x + plain.attn(x))
        expected = plain.norm2(1.7 * h + plain.ffn(h))
    else:
        h = 1.7 * x + plain.attn(plain.norm1(x))
        expected = 1.7 * h + plain.ffn(plain.norm2(h))
    torch.testing.assert_close(scaled(x), expected)
    one = TransformerBlock(16, 4, placement=placement, residual_scale=1)
    one.load_state_dict(plain.state_dict())
    assert torch.equal(one(x), plain(x))  # 1 is the plain block, bit for bit
    for bad in (0, -1.0, float("nan"), True):
        with pytest.raises(ValueError, match="residual_scale"):
            TransformerBlock(16, 4, residual_scale=bad)


def test_tiny_lm_passes_residual_scale_to_every_block():
    model = TinyLM(16, d_model=16, n_layers=3, n_heads=2, residual_scale=2.0)
    assert [b.residual_scale for b in model.blocks] == [2.0] * 3
    assert [b.residual_scale for b in TinyLM(16, d_model=16, n_layers=2, n_heads=2).blocks] == [1.0, 1.0]

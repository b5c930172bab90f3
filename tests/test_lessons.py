"""The functions the notebooks teach (their `lesson` cells), checked against PyTorch or the maths, and the rules around
them: a lesson cell only imports and defines, and a panel asks for lessons by their notebook names (the import rules
are in test_course.py)."""
import ast
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from course_utils import minilm, residual
from course_utils.bench import load_panels
from course_utils.course import NOTEBOOKS, lesson_functions, lesson_parameters, lesson_sources, notebook
from course_utils.panel import build_panel
from course_utils.transformer import TransformerBlock, softcap

LESSONS = {
    "01_why_normalize": {"residual_stack"},
    "03_layernorm": {"layer_norm", "layer_norm_unbiased", "layer_norm_eps_on_std", "layer_norm_jacobian"},
    "04_pre_vs_post_ln": {"measure_at_init"},
    "05_rmsnorm": {"rms_norm", "layer_norm"},
    "06_qk_norm_and_softcapping": {"attention_probs", "softcap_logits"},
    "08_real_model": {"feature_loudness", "far", "outlier_dims", "zeroed", "rms_instead", "attention_logits",
                      "attention_to_cls", "int8_roundtrip", "fixed_sigma", "find_spike"},
}


# ---- the rules ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("notebook_id", [nb.id for nb in NOTEBOOKS])
def test_each_notebook_teaches_the_lessons_listed_here(notebook_id):
    assert set(lesson_functions(notebook_id)) == LESSONS.get(notebook_id, set())


@pytest.mark.parametrize("notebook_id", sorted(LESSONS))
def test_a_lesson_cell_only_imports_and_defines(notebook_id):
    for source in lesson_sources(notebook(notebook_id).path):
        for node in ast.parse(source).body:
            assert isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)), (
                notebook_id, ast.unparse(node)[:80])


def test_panels_ask_for_lessons_by_their_notebook_names():
    asked = {}
    for name, (notebook_id, factory) in load_panels().items():
        needed = lesson_parameters(factory)
        assert set(needed) <= LESSONS.get(notebook_id, set()), (name, needed)
        asked.update(dict.fromkeys(needed, notebook_id))
    assert asked  # at least the panels of 01, 03, 04 and 06 take the notebook's own code


@pytest.mark.parametrize("name", sorted(n for n, (nb, f) in load_panels().items()
                                        if lesson_parameters(f) and nb != "04_pre_vs_post_ln"))
def test_a_panel_built_with_its_notebooks_lessons_refreshes_cleanly(name):
    panel = build_panel(name)  # 04's init panel measures 24 models when built; test_demos_placement builds a small one
    assert panel.last_error is None, panel.last_error
    settings = panel.sweep()
    for values in (settings[0], settings[-1]):
        assert panel.set(**values), (values, panel.last_error)


# ---- notebook 01 ----------------------------------------------------------------------------------------------------

residual_stack = lesson_functions("01_why_normalize")["residual_stack"]


def test_residual_stack_reproduces_the_chapter_quiz():
    layers = residual.make_sublayers("fixed size", "aligned", depth=10)
    xs = residual_stack(torch.zeros(residual.D_MODEL, dtype=torch.float64), layers, 2.0)
    assert xs.shape == (11, residual.D_MODEL)
    assert xs.norm(dim=-1).tolist() == pytest.approx([2.0 * l for l in range(11)], abs=1e-12)


def test_residual_stack_placements_match_their_equations():
    layers = residual.make_sublayers("amplifies its input", "independent", depth=3, seed=5)
    x0 = torch.randn(2, residual.D_MODEL, dtype=torch.float64)
    d = (residual.D_MODEL,)
    x = x0
    for f in layers:
        x = F.layer_norm(x + 0.5 * f(x), d)
    torch.testing.assert_close(residual_stack(x0, layers, 0.5, "Post-LN")[-1], x)
    x = x0
    for f in layers:
        x = x + 0.5 * f(F.layer_norm(x, d))
    torch.testing.assert_close(residual_stack(x0, layers, 0.5, "Pre-LN")[-1], x)
    x = x0
    for f in layers:
        x = 0.5 * f(x)
    torch.testing.assert_close(residual_stack(x0, layers, 0.5, residual=False)[-1], x)
    with pytest.raises(ValueError, match="norm"):
        residual_stack(x0, layers, 0.5, "BatchNorm")


# ---- notebooks 03 and 05 --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("d", [2, 12, 64])
def test_layer_norm_jacobian_is_autograds(d):
    """Notebook 03's closed form (I - 11^T/d - x^ x^T/d)/sigma, against autograd of PyTorch's LayerNorm."""
    jacobian = lesson_functions("03_layernorm")["layer_norm_jacobian"]
    x = torch.randn(d, generator=torch.Generator().manual_seed(d), dtype=torch.float64) * 3 + 1
    expected = torch.autograd.functional.jacobian(lambda v: F.layer_norm(v, (d,), eps=0.0), x)
    torch.testing.assert_close(jacobian(x), expected)


@pytest.mark.parametrize("notebook_id", ["03_layernorm", "05_rmsnorm"])
def test_layer_norm_matches_pytorch_forward_and_backward(notebook_id):
    layer_norm = lesson_functions(notebook_id)["layer_norm"]
    x, w, b = torch.randn(5, 7, 32, dtype=torch.float64), torch.rand(32, dtype=torch.float64) + 0.5, torch.randn(32)
    torch.testing.assert_close(layer_norm(x), F.layer_norm(x, (32,)))
    inputs = [t.double().requires_grad_() for t in (x, w, b)]
    copies = [t.detach().clone().requires_grad_() for t in inputs]
    torch.testing.assert_close(layer_norm(*inputs, eps=1e-3), F.layer_norm(copies[0], (32,), *copies[1:], 1e-3))
    layer_norm(*inputs, eps=1e-3).sum().backward()
    F.layer_norm(copies[0], (32,), *copies[1:], 1e-3).sum().backward()
    for a, c in zip(inputs, copies):
        torch.testing.assert_close(a.grad, c.grad)


@pytest.mark.parametrize("d", [2, 4, 100])
def test_layer_norm_pitfalls_are_the_formulas_they_name(d):
    lessons = lesson_functions("03_layernorm")
    unbiased, eps_on_std = lessons["layer_norm_unbiased"], lessons["layer_norm_eps_on_std"]
    x = torch.randn(6, d, dtype=torch.float64)
    mu, var = x.mean(-1, keepdim=True), ((x - x.mean(-1, keepdim=True)) ** 2).mean(-1, keepdim=True)
    torch.testing.assert_close(unbiased(x, eps=1e-3), (x - mu) / (var * d / (d - 1) + 1e-3).sqrt())
    torch.testing.assert_close(unbiased(x, eps=0.0), F.layer_norm(x, (d,), eps=0.0) * math.sqrt((d - 1) / d))
    torch.testing.assert_close(eps_on_std(x, eps=1e-3), (x - mu) / (var.sqrt() + 1e-3))
    small = x * 1e-3  # a spread near √ε: where ε on σ goes wrong
    assert (eps_on_std(small) - F.layer_norm(small, (d,))).abs().max() > 0.1


def test_rms_norm_matches_pytorch_forward_and_backward():
    rms_norm = lesson_functions("05_rmsnorm")["rms_norm"]
    x, w = torch.randn(5, 32, requires_grad=True), (torch.rand(32) + 0.5).requires_grad_()
    x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    torch.testing.assert_close(rms_norm(x), F.rms_norm(x, (32,), None, 1e-5))
    y, want = rms_norm(x, w, 1e-5), F.rms_norm(x2, (32,), w2, 1e-5)
    torch.testing.assert_close(y, want)
    y.sum().backward()
    want.sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(w.grad, w2.grad)


# ---- notebook 04 ----------------------------------------------------------------------------------------------------

def test_measure_at_init_shapes_and_the_stream_size():
    measure_at_init = lesson_functions("04_pre_vs_post_ln")["measure_at_init"]
    post = measure_at_init(4, "post", seed=0)
    pre = measure_at_init(4, "pre", seed=0)
    for m in (post, pre):
        assert [len(m[k]) for k in ("W1", "W2", "rms", "update")] == [4, 4, 5, 4]
        assert all(math.isfinite(v) and v > 0 for v in m["W1"] + m["W2"])
    np.testing.assert_allclose(post["rms"][1:], 1.0, atol=1e-3)  # Post-LN ends every block on a LayerNorm
    assert all(b > a for a, b in zip(pre["rms"], pre["rms"][1:]))  # Pre-LN's stream only grows at init
    assert post["rms"][0] == pre["rms"][0]  # same embeddings


# ---- notebook 06 ----------------------------------------------------------------------------------------------------

def test_attention_probs_is_softmax_of_scaled_dot_products_and_qk_norm_is_rms_norm():
    attention_probs = lesson_functions("06_qk_norm_and_softcapping")["attention_probs"]
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(5, 16, generator=g, dtype=torch.float64), torch.randn(7, 16, generator=g, dtype=torch.float64)
    probs, logits = attention_probs(q, k)
    torch.testing.assert_close(logits, q @ k.T / 4.0)
    torch.testing.assert_close(probs, torch.softmax(q @ k.T / 4.0, -1))
    qn, kn = (2.0 * F.rms_norm(t, (16,), eps=1e-6) for t in (q, k))
    torch.testing.assert_close(attention_probs(q, k, qk_norm=True, gain=2.0)[1], qn @ kn.T / 4.0)
    _, z = attention_probs(3 * q, 0.5 * k)
    torch.testing.assert_close(z, 1.5 * logits)  # logits scale with the product of the scales ...
    p1, zn1 = attention_probs(q, k, qk_norm=True, gain=2.0)
    p2, zn2 = attention_probs(50 * q, 0.1 * k, qk_norm=True, gain=2.0)
    torch.testing.assert_close(p1, p2, atol=1e-4, rtol=0)  # ... and QK-norm removes them (eps weighs at scale 0.1)
    assert zn2.abs().max() <= math.sqrt(16) * 2.0 ** 2


def test_softcap_logits_is_cap_tanh():
    softcap_logits = lesson_functions("06_qk_norm_and_softcapping")["softcap_logits"]
    x = torch.linspace(-500, 500, 1001, dtype=torch.float64)
    torch.testing.assert_close(softcap_logits(x, 30.0), 30.0 * torch.tanh(x / 30.0))
    torch.testing.assert_close(softcap_logits(x, 50.0), softcap(x, 50.0))


# ---- notebook 08 ----------------------------------------------------------------------------------------------------

def _lesson_08(name: str):
    return lesson_functions("08_real_model")[name]


def _layer_norms(d: int, n: int, seed: int) -> dict[str, torch.nn.LayerNorm]:
    """n of PyTorch's own LayerNorms with random γ and β, by name as minilm.layer_norms gives a model's."""
    g = torch.Generator().manual_seed(seed)
    norms = {}
    for i in range(n):
        ln = torch.nn.LayerNorm(d, eps=1e-6).requires_grad_(False)
        ln.weight.copy_(torch.rand(d, generator=g) + 0.5)
        ln.bias.copy_(0.1 * torch.randn(d, generator=g))
        norms[f"norm {i}"] = ln
    return norms


def test_rms_instead_is_rms_norm_plus_beta_and_layer_norm_on_centred_input():
    rms_instead = _lesson_08("rms_instead")
    ln = _layer_norms(32, 1, seed=80)["norm 0"]
    x = 3.0 * torch.randn(4, 7, 32, generator=torch.Generator().manual_seed(80)) + 1.0
    torch.testing.assert_close(rms_instead(ln)(x), F.rms_norm(x, (32,), ln.weight, ln.eps) + ln.bias)
    centred = x - x.mean(-1, keepdim=True)  # RMSNorm equals LayerNorm where the mean is already zero
    torch.testing.assert_close(rms_instead(ln)(centred), ln(centred))


@pytest.mark.parametrize("parts", [("gamma", "beta"), ("gamma",), ("beta",)])
def test_zeroed_sets_gamma_and_or_beta_to_zero_at_those_features_only(parts):
    ln = _layer_norms(32, 1, seed=81)["norm 0"]
    x = 2.0 * torch.randn(5, 32, generator=torch.Generator().manual_seed(81)) + 0.5
    dims, keep = [3, 17], [d for d in range(32) if d not in (3, 17)]
    out, full = _lesson_08("zeroed")(ln, dims, parts)(x), ln(x)
    torch.testing.assert_close(out[:, keep], full[:, keep])
    x_hat = F.layer_norm(x, (32,), eps=ln.eps)
    scaled = torch.zeros(5, 2) if "gamma" in parts else ln.weight[dims] * x_hat[:, dims]
    shift = torch.zeros(2) if "beta" in parts else ln.bias[dims]
    torch.testing.assert_close(out[:, dims], scaled + shift)
    assert float(ln.weight[3]) != 0 and float(ln.bias[3]) != 0  # the LayerNorm itself is untouched


def test_feature_loudness_is_mean_abs_over_real_tokens_over_the_median_feature():
    g = torch.Generator().manual_seed(82)
    mask = torch.tensor([[True, True, True, False], [True, True, False, False]])
    hidden = [torch.randn(2, 4, 9, generator=g, dtype=torch.float64) for _ in range(3)]
    hidden[1][~mask] = 1e6  # padding must not count
    got = _lesson_08("feature_loudness")(hidden, mask)
    assert got.shape == (3, 9)
    for state, h in zip(got, hidden):
        mean_abs = np.abs(np.concatenate([h[0, :3].numpy(), h[1, :2].numpy()])).mean(0)  # the 5 real tokens
        np.testing.assert_allclose(state.numpy(), mean_abs / np.median(mean_abs), rtol=1e-12)


def test_far_flags_entries_beyond_z_standard_deviations_of_their_row():
    far = _lesson_08("far")
    p = torch.randn(3, 40, generator=torch.Generator().manual_seed(83), dtype=torch.float64)
    p[0, 5], p[2, 30] = 12.0, -12.0
    z = (p.numpy() - p.numpy().mean(1, keepdims=True)) / p.numpy().std(1, ddof=1, keepdims=True)
    np.testing.assert_array_equal(far(p).numpy(), np.abs(z) > 3)
    np.testing.assert_array_equal(far(p, z=1.0).numpy(), np.abs(z) > 1)
    assert far(p)[0, 5] and far(p)[2, 30]


def test_outlier_dims_finds_planted_outliers_in_the_stream_and_in_gamma_beta():
    d, g = 31, torch.Generator().manual_seed(84)
    mask = torch.ones(2, 5, dtype=torch.bool)
    mask[1, 3:] = False
    hidden = [torch.randn(2, 5, d, generator=g) for _ in range(5)]
    for h in hidden[:3]:  # loud in 3 of the 5 states: at least half
        h[..., 7] *= 20
    hidden[0][..., 11] *= 20  # loud in 1 of 5: not an outlier
    norms = _layer_norms(d, 4, seed=85)
    first, second = list(norms.values())[:2]
    first.weight[20] = second.weight[20] = 10.0  # odd γ in 2 of the 4 LayerNorms: half counts
    first.bias[25] = 5.0  # odd β in 1 of 4: not an outlier
    assert _lesson_08("outlier_dims")(hidden, mask, norms) == ([7], [20])


@pytest.mark.slow
def test_minilm_has_a_few_outlier_dims_seen_both_ways():
    base = minilm.baseline()
    loud, odd = _lesson_08("outlier_dims")(base.hidden, base.mask, minilm.layer_norms(base.model))
    assert 1 <= len(set(loud) | set(odd)) <= 8 and set(loud) & set(odd)


def test_attention_logits_are_scaled_dot_products_at_real_pairs_only():
    model = torch.nn.Module()
    model.blocks = torch.nn.ModuleList(TransformerBlock(8, 2, 16, placement="post", causal=False) for _ in range(2))
    mask = torch.tensor([[True, True, True], [True, True, False]])
    g = torch.Generator().manual_seed(86)
    hidden = [torch.randn(2, 3, 8, generator=g) for _ in range(3)]  # the last is the output: no block reads it
    with torch.no_grad():
        got = _lesson_08("attention_logits")(model, hidden, mask)
        assert len(got) == 2
        for block, x, logits in zip(model.blocks, hidden, got):
            want = []
            for row, n in enumerate(mask.sum(1).tolist()):  # each sentence's real tokens, query by key
                q = block.attn.q_proj(x[row, :n]).view(n, 2, 4)
                k = block.attn.k_proj(x[row, :n]).view(n, 2, 4)
                want.append(torch.einsum("ihd,jhd->hij", q, k).reshape(2, n * n) / math.sqrt(4))
            torch.testing.assert_close(logits, torch.cat(want, dim=1))

"""Notebook 02's demos (course_utils.demos.batchnorm): padding, batch mates, train and eval, one token."""
import math

import pytest
import torch
from torch import nn

from course_utils.demos import batchnorm as bn_demo
from course_utils.norms import masked_mean_var
from course_utils.panel import PANELS

WARNING = "#8a5a00"  # colour of a ValueError message in a Panel (an unexpected exception shows in red)


def test_the_panels_are_registered_for_notebook_02():
    """tests/test_panel.py sweeps every registered panel; these must be among them."""
    assert {PANELS[name][0] for name in ("padding_panel", "coupling_panel")} == {"02_batchnorm_and_padding"}


def test_panels_show_a_message_for_nonsense_instead_of_raising():
    padding = bn_demo.padding_panel()
    assert padding.set(padding_share=0.95) is False
    assert "92%" in padding.last_error and WARNING in padding.message.value
    coupling = bn_demo.coupling_panel()
    assert coupling.set(padding_share=0.0) is False
    assert "at least" in coupling.last_error


@pytest.mark.parametrize("share", [0.0, 0.1, 0.31, 0.5, 0.66, 0.83, 0.9])
@pytest.mark.parametrize("spread", [0.0, 0.5, 1.0])
def test_lengths_for_gives_the_requested_padding_share(share, spread):
    lengths = bn_demo.lengths_for(share, spread)
    assert lengths.shape == (bn_demo.BATCH_SIZE,) and int(lengths.max()) == bn_demo.MAX_LEN
    assert int(lengths.min()) >= 1
    actual = 1 - lengths.sum().item() / (bn_demo.BATCH_SIZE * bn_demo.MAX_LEN)
    assert actual == pytest.approx(share, abs=0.01)
    if spread == 0.0:
        assert len(set(lengths[1:].tolist())) == 1


@pytest.mark.parametrize("share,spread", [(0.95, 0.5), (1.0, 0.0), (-0.1, 0.0), (0.5, 1.5), (math.nan, 0.0)])
def test_lengths_for_rejects_impossible_batches(share, spread):
    with pytest.raises(ValueError):
        bn_demo.lengths_for(share, spread)


def test_contamination_formula_is_exact():
    for share, spread, seed in [(0.2, 0.3, 0), (0.5, 1.0, 1), (0.8, 0.0, 2)]:
        x, mask = bn_demo.token_batch(bn_demo.lengths_for(share, spread), seed=seed)
        s = bn_demo.contaminated_stats(x, mask)
        mean, var = bn_demo.predicted_contamination(s["true_mean"], s["true_var"], s["padding_share"])
        torch.testing.assert_close(s["padded_mean"], mean)
        torch.testing.assert_close(s["padded_var"], var)


def test_padded_batchnorm_is_pytorchs_batchnorm1d():
    x, mask = bn_demo.token_batch(bn_demo.lengths_for(0.4, 0.5), seed=3)
    ours = bn_demo.normalize(x, mask, bn_demo.COMPARED_NORMS[0])
    theirs = nn.BatchNorm1d(bn_demo.N_FEATURES, affine=False, dtype=torch.float64)(x.transpose(1, 2)).transpose(1, 2)
    torch.testing.assert_close(ours, theirs)
    masked = bn_demo.normalize(x, mask, bn_demo.COMPARED_NORMS[1])
    mean, var, _ = masked_mean_var(x, mask)
    torch.testing.assert_close(masked[mask], ((x - mean) / torch.sqrt(var + 1e-5))[mask])
    with pytest.raises(ValueError):
        bn_demo.normalize(x, mask, "GroupNorm")


def test_coupling_batches_isolate_padding_from_batch_mates():
    batches = bn_demo.coupling_batches(padded_len=40, mate_shift=2.0)
    x, mask = batches["reference"]
    more_x, more_mask = batches["more_padding"]
    assert more_x.shape[1] == 40 and torch.equal(more_x[:, :x.shape[1]], x) and not more_x[:, x.shape[1]:].any()
    assert torch.equal(batches["other_mates"][0][0], x[0])
    outputs = {kind: bn_demo.sentence_outputs(batches, kind) for kind in bn_demo.COMPARED_NORMS}
    bn, masked, ln = (outputs[k] for k in bn_demo.COMPARED_NORMS)
    assert (bn["more_padding"] - bn["reference"]).abs().max() > 0.5
    torch.testing.assert_close(masked["more_padding"], masked["reference"])
    assert (masked["other_mates"] - masked["reference"]).abs().max() > 0.5
    torch.testing.assert_close(ln["other_mates"], ln["reference"])
    with pytest.raises(ValueError):
        bn_demo.coupling_batches(padded_len=5)


def test_per_position_stats_and_drifting_batches():
    pos = bn_demo.per_position_stats(*bn_demo.token_batch(bn_demo.lengths_for(0.5, 1.0)))
    assert pos["pad_share"][0] == 0 and pos["pad_share"][-1].item() == pytest.approx(15 / 16)
    batches = list(bn_demo.drifting_batches(4, drift=2.0))
    means = [masked_mean_var(x, m)[0].mean().item() for x, m in batches]
    assert len(batches) == 4 and means[-1] - means[0] == pytest.approx(1.5, abs=0.3)
    with pytest.raises(ValueError):
        next(bn_demo.drifting_batches(0))


def test_per_position_norm_uses_only_the_real_tokens_at_each_position():
    x, mask = bn_demo.token_batch([6, 3, 5, 2], seed=4)
    x[~mask] = 1e3  # loud pads must not count
    ours = bn_demo.per_position_norm(x, mask)
    for t in range(x.shape[1]):
        real = x[mask[:, t], t]
        want = (real - real.mean(0)) / torch.sqrt(real.var(0, unbiased=False) + 1e-5)
        torch.testing.assert_close(ours[mask[:, t], t], want)
    assert bn_demo.normalize(x, mask, bn_demo.PER_POSITION).equal(ours)


def test_the_panels_tell_their_conditions_apart_without_colour():
    padding = bn_demo.padding_panel().outputs[1]
    bars = [t for t in padding.data if t.type == "bar"]
    assert {t.marker.pattern.shape for t in bars} == {None, "/"}
    assert len({t.line.dash for t in padding.data if t.type == "scatter"}) == 2
    coupling = bn_demo.coupling_panel().outputs[1]
    assert len({t.marker.pattern.shape for t in coupling.data if t.type == "bar"}) == 2
    lines = [t for t in coupling.data if t.type == "scatter"]
    assert len({(t.line.dash, t.marker.symbol) for t in lines}) == len(lines) == 6


def test_the_future_reaches_position_zero_only_through_pooled_statistics():
    leak = bn_demo.future_leak(seed=2)
    pooled, masked, per_position, ln = (leak[k] for k in bn_demo.TIME_NORMS)
    assert pooled > 1e-3 and masked > 1e-3 and per_position == 0 and ln == 0
    assert min(bn_demo.future_leak(seed=2, changed=0).values()) > 0.5  # the token itself changed: all move
    with pytest.raises(ValueError):
        bn_demo.future_leak(changed=bn_demo.SENTENCE_LEN)
    prefix = bn_demo.generation_prefix(seed=2)
    assert all(len(v) == 14 and v[-1] == 0 for v in prefix.values())  # the whole batch is the training batch
    assert max(prefix[bn_demo.PER_POSITION]) < 1e-12 and max(prefix[bn_demo.COMPARED_NORMS[1]]) > 0.1
    fig = bn_demo.generation_prefix_figure(prefix)
    assert len(fig.data) == 4 and fig.layout.xaxis.title.text and fig.layout.yaxis.title.text


def test_one_sentence_gives_its_last_token_away_and_eight_do_not():
    assert bn_demo.recover_last_token(seed=3)["error"] < 1e-10
    assert bn_demo.recover_last_token(seed=3, batch_size=8)["error"] > 0.5
    assert bn_demo.recover_last_token(seed=3, kind="LayerNorm")["error"] > 0.5
    with pytest.raises(ValueError):
        bn_demo.recover_last_token(batch_size=9)


def test_padding_sweep_matches_the_formula_and_the_mask_removes_it():
    sweep = bn_demo.padding_sweep((20, 40))
    assert max(sweep["formula_gap"]) < 1e-12 and max(sweep["masked_move"]) < 1e-12
    assert 0 < sweep["move"][0] < sweep["move"][1] and sweep["share"][0] < sweep["share"][1]


def test_running_var_is_the_unbiased_estimate():
    r = bn_demo.running_var_estimate(seed=1, lengths=(3, 2))
    assert r["n"] == 6
    torch.testing.assert_close(r["ratio"], torch.full((bn_demo.N_FEATURES,), 6 / 5, dtype=torch.float64))
    assert r["eval_shrink"] == pytest.approx(r["predicted_shrink"], abs=1e-3)


def test_trained_modules_and_their_gaps():
    modules = bn_demo.trained_modules(steps=5, seed=1)
    before = {k: v.clone() for k, v in modules["masked BatchNorm"].state_dict().items()}
    gaps = bn_demo.train_vs_eval_gaps(modules, seed=1)
    after = modules["masked BatchNorm"].state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # measuring never moves the running statistics
    assert gaps["LayerNorm", 0.5] == 0 and gaps["BatchNorm1d (pads included)", 0.2] > 0
    one = bn_demo.one_token_in_training(seed=1)
    assert "Expected more than 1 value" in one["error"] and bn_demo.one_token_in_training(n_tokens=2)["error"] is None
    g = bn_demo.lone_token_gaps(modules, one["tokens"], seed=1)
    torch.testing.assert_close(g["LayerNorm alone"], g["LayerNorm in a batch"])


def test_masked_drift_gaps_and_the_ema_lag():
    assert bn_demo.ema_lag(1.0, steps=200, momentum=0.1) == pytest.approx(0.045)
    r = bn_demo.masked_drift_gaps(drifts=(0.0, 4.0), seed=1)
    assert set(r) == {0.0, 4.0} and all(set(v) == {"gap", "lag"} for v in r.values())
    assert abs(r[0.0]["lag"]) < 0.05 and r[4.0]["lag"] > 0.1    # no drift, no lag; drift +4 lags
    assert r[4.0]["gap"] > r[0.0]["gap"] > 0


def test_leak_by_batch_size():
    r = bn_demo.leak_by_batch_size(seed=1, sizes=(1, 8))
    assert r["size"] == [1, 8] and r["n_real"][0] == bn_demo.SENTENCE_LEN
    assert r["move"][0] > r["move"][1] > 0
    with pytest.raises(ValueError):
        bn_demo.leak_by_batch_size(sizes=(0,))


# ---- the checks notebook 02's claim cells and its claim experiments share: each must fail on a plausible wrong input

def test_the_padding_checks_fail_without_padding_or_with_a_wrong_formula():
    s = bn_demo.padding_contamination(0, 0.5, 0.5)
    assert all(bn_demo.contamination_checks(s).values())
    assert not bn_demo.contamination_checks(bn_demo.padding_contamination(0, 0.0))["the worst feature's mean is off "
                                                                                   "by more than 0.5"]
    assert not bn_demo.contamination_checks({**s, "formula_error": 1e-3})["the pooled statistics are the formula's "
                                                                        "(to 1e-12)"]
    assert all(bn_demo.per_position_checks(bn_demo.position_padding(0, 0.5)).values())
    assert all(bn_demo.per_position_checks(bn_demo.position_padding(0, 0.5, batch_size=32)).values())
    assert not all(bn_demo.per_position_checks(bn_demo.position_padding(0, 0.25)).values())  # two reach the end
    assert not all(bn_demo.per_position_checks(bn_demo.position_padding(0, 0.0)).values())   # no padding at all


def test_the_coupling_checks_fail_when_the_mask_is_left_out():
    changes = bn_demo.coupling_changes(0, 56, 1.0)
    assert all(bn_demo.coupling_checks(changes).values())
    unmasked = {**changes, bn_demo.COMPARED_NORMS[1]: changes[bn_demo.COMPARED_NORMS[0]]}  # "masked" = pads counted
    assert not bn_demo.coupling_checks(unmasked)["masked BatchNorm ignores the padding exactly"]
    assert not bn_demo.coupling_checks(bn_demo.coupling_changes(0, 16, 1.0))["BatchNorm moves with more padding"]


def test_the_train_and_eval_checks_fail_for_modules_trained_without_padding():
    drift_gaps = bn_demo.masked_drift_gaps(seed=0)
    padded = bn_demo.train_vs_eval_gaps(bn_demo.trained_modules(seed=0), seed=0)
    assert all(bn_demo.train_eval_checks(padded, drift_gaps).values())
    clean = bn_demo.train_vs_eval_gaps(bn_demo.trained_modules(padding_share=0.0, seed=0), seed=0)
    assert not bn_demo.train_eval_checks(clean, drift_gaps)["nn.BatchNorm1d: 3x the gap on the less padded batch"]
    no_lag = {0.0: drift_gaps[0.0], 4.0: drift_gaps[0.0]}  # a module that did not lag behind the drift
    assert not list(bn_demo.train_eval_checks(padded, no_lag).values())[-1]


def test_the_one_token_and_lone_token_checks_fail_on_their_controls():
    assert all(bn_demo.one_token_checks(bn_demo.one_token_in_training(0, 1)).values())
    assert not any(bn_demo.one_token_checks(bn_demo.one_token_in_training(0, 2)).values())
    modules = bn_demo.trained_modules(drift=1.0, padding_share=0.5, seed=0)
    token = bn_demo.one_token_in_training(0, drift=1.0)["tokens"]
    gaps = bn_demo.lone_token_gaps(modules, token, drift=1.0)
    torch_name, masked_name = list(modules)[:2]
    for name in (torch_name, masked_name):  # the same module: alone in eval mode = in its batch in eval mode
        assert all(bn_demo.lone_token_checks(gaps, name).values())
        g = gaps[name]
        assert g["alone"] == pytest.approx(g["in its batch, eval mode"], abs=1e-12)
    matched = dict(gaps, **{torch_name: dict(gaps[torch_name], alone=0.0)})  # running statistics that match the batch
    assert not all(bn_demo.lone_token_checks(matched, torch_name).values())
    assert not bn_demo.c14_lone_token(0, matched=True).holds and bn_demo.c14_lone_token(0).holds


def test_the_lone_token_gap_is_the_running_statistics_against_the_batch():
    """Set the running statistics to the training batch's own and the eval output is the training output, for both
    modules (nn.BatchNorm1d's pooled pads included)."""
    modules = bn_demo.trained_modules(drift=1.0, padding_share=0.5, seed=1)
    token = bn_demo.one_token_in_training(1, drift=1.0)["tokens"]
    gaps = bn_demo.lone_token_gaps(modules, token, drift=1.0, seed=1)
    for name in list(modules)[:2]:
        assert gaps[name]["running statistics set to the batch's"] < 1e-12 < 0.01 < gaps[name]["alone"]

def test_the_time_checks_fail_where_the_future_is_not_seen():
    assert all(bn_demo.leak_checks(bn_demo.future_leak(0)).values())
    control = bn_demo.future_leak(0, changed=0)  # the token at position 0 itself: every norm moves
    assert not bn_demo.leak_checks(control)["LayerNorm: it does not"]
    prefix = bn_demo.generation_prefix(0)
    assert all(bn_demo.prefix_checks(prefix).values())
    early = {k: [0.0] * len(v) for k, v in prefix.items()}  # statistics that never depended on the prefix
    assert not all(bn_demo.prefix_checks(early).values())
    assert all(bn_demo.running_var_checks(bn_demo.running_var_estimate(0)).values())
    assert not all(bn_demo.running_var_checks(bn_demo.running_var_estimate(0, (64,) * 16)).values())
    assert bn_demo.read_back(bn_demo.recover_last_token(0, 1))
    assert not bn_demo.read_back(bn_demo.recover_last_token(0, 8))

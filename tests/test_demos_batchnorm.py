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

"""Notebook 06's demo module: attention under scaled q and k, soft-capping, the training lab."""
import math

import pytest
import torch

from course_utils.demos import qk_norm as demo
from course_utils.panel import PANELS, build_panel
from course_utils.training import History

OURS = sorted(name for name, (notebook, _) in PANELS.items() if notebook == "06_qk_norm_and_softcapping")


def test_the_notebook_registers_its_three_panels():
    """tests/test_panel.py sweeps every registered panel (these draw every setting); latency: course_utils.bench."""
    assert OURS == ["attention_panel", "softcap_panel", "training_panel"]


@pytest.mark.parametrize("name, nonsense, words", [
    ("attention_panel", {"scale_q": -1.0, "scale_k": 1.0, "gain": 1.0}, "query scale"),
    ("attention_panel", {"scale_q": 1.0, "scale_k": float("nan"), "gain": 1.0}, "key scale"),
    ("softcap_panel", {"cap": 0.0, "top_logit": 20.0}, "cap"),
    ("training_panel", {"condition": "no QK-norm", "lr": 5.0, "cap": 50.0, "steps": 100, "seed": 0}, "learning rate"),
    ("training_panel", {"condition": "dropout", "lr": 0.1, "cap": 50.0, "steps": 100, "seed": 0}, "condition"),
])
def test_nonsense_shows_a_message_and_does_not_raise(name, nonsense, words):
    panel = build_panel(name)
    panel.values = lambda: nonsense  # as if the controls held these values
    assert panel.refresh() is False
    assert words in panel.message.value and panel.last_error


def test_saturated_softmax_is_one_hot_with_a_vanishing_jacobian():
    q, k = demo.probe_qk()
    p_soft = (q @ k.T / math.sqrt(q.shape[-1])).softmax(-1)
    p_hard = (10 * q @ (10 * k).T / math.sqrt(q.shape[-1])).softmax(-1)
    assert float(demo.row_entropy(p_hard).mean()) < 0.05 < float(demo.row_entropy(p_soft).mean())
    assert float(demo.softmax_jacobian_norm(p_hard).mean()) < 0.05 * float(demo.softmax_jacobian_norm(p_soft).mean())


def test_softmax_jacobian_norm_matches_autograd():
    z = torch.randn(5, dtype=torch.float64)
    jac = torch.autograd.functional.jacobian(lambda t: t.softmax(-1), z)
    torch.testing.assert_close(demo.softmax_jacobian_norm(z.softmax(-1)), jac.norm())


def test_entropy_is_zero_for_one_hot_and_log_n_for_uniform():
    torch.testing.assert_close(demo.row_entropy(torch.eye(4)), torch.zeros(4))
    torch.testing.assert_close(demo.row_entropy(torch.full((4,), 0.25)), torch.tensor(math.log(4)))


def test_next_token_logits():
    z = demo.next_token_logits(42.0)
    assert z.shape == (1000,) and math.isclose(float(z.max()), 42.0)
    with pytest.raises(ValueError):
        demo.next_token_logits(-1.0)


def test_make_model_builds_each_condition():
    plain, normed, capped, rms = (demo.make_model(c, seed=0, cap=7.0) for c in demo.LAB_CONDITIONS)
    assert plain.blocks[0].attn.qk_norm is None and plain.blocks[0].attn.attn_softcap is None
    assert normed.blocks[0].attn.qk_norm == "layer" and rms.blocks[0].attn.qk_norm == "rms"
    assert capped.blocks[0].attn.attn_softcap == 7.0
    with pytest.raises(ValueError, match="condition"):
        demo.make_model("dropout", seed=0)


def test_qk_gain_bound_holds_even_with_large_weights():
    model = demo.make_model("QK-norm", seed=3)
    with torch.no_grad():
        for block in model.blocks:
            block.attn.q_proj.weight.mul_(100)
            block.attn.q_norm.weight.uniform_(-3, 3)
            block.attn.k_norm.bias.normal_()
    idx = torch.randint(1, 16, (4, 16), generator=torch.Generator().manual_seed(0))
    model(idx)
    assert model.max_attention_logit() <= demo.qk_gain_bound(model)
    with pytest.raises(ValueError, match="no QK-norm"):
        demo.qk_gain_bound(demo.make_model("no QK-norm", seed=0))


def test_attention_saturation_of_an_untrained_model_is_in_range():
    a = demo.attention_saturation(demo.make_model("soft-cap 50", seed=0))
    assert 0 < a["entropy"] < a["uniform_entropy"] and 0 < a["max_weight"] <= 1
    assert 0.9 < a["cap_slope"] <= 1 and a["share_beyond"] == 0  # small logits at initialization: the cap is ~identity


def test_live_callback_redraws_every_few_steps():
    fig = demo.logit_growth_figure([("no QK-norm", 0), ("QK-norm", 1)])
    assert len(fig.data) == 4
    h = History()
    callback = demo.live_callback(fig, 1, every=5)
    for step in range(7):
        h.step.append(step), h.loss.append(3.0), h.max_logit.append(10.0 ** step)
        callback(step, h)
    assert len(fig.data[2].x) == 5 and len(fig.data[3].y) == 5 and not fig.data[0].x


def test_training_lab_trains_synchronously_keeps_every_run_and_draws():
    lab = demo.TrainingLab()
    assert lab.set(condition="QK-norm", steps=20, seed=1) and "s on this machine" in lab.plan.value
    result = lab.run(background=False)
    assert result is lab.result is lab.runs[-1]
    assert len(result["history"].loss) == 20 and result["condition"] == "QK-norm"
    assert len(lab.fig.data) == 2 and len(lab.fig.data[0].y) == 20
    assert "done" in lab.runner.status.value
    assert lab.set(condition="no QK-norm") and lab.run(background=False) is lab.runs[-1]
    assert [r["condition"] for r in lab.runs] == ["QK-norm", "no QK-norm"] and len(lab.fig.data) == 4
    lab.clear()
    assert not lab.fig.data and not lab.runs and lab.result is None


def test_training_lab_tells_runs_apart_by_label_and_conditions_by_more_than_colour():
    lab = demo.TrainingLab()
    for condition in ("QK-norm", "QK-norm", "no QK-norm"):
        assert lab.set(condition=condition, steps=2, seed=0) and lab.run(background=False)
    names = [t.name for t in lab.fig.data if t.showlegend]
    assert names == ["QK-norm, lr 0.1, seed 0", "QK-norm, lr 0.1, seed 0 (run 2)", "no QK-norm, lr 0.1, seed 0"]
    symbols = [t.marker.symbol for t in lab.fig.data if t.showlegend]
    dashes = [t.line.dash for t in lab.fig.data if t.showlegend]
    assert symbols[0] == symbols[1] != symbols[2] and len(set(dashes)) == 3  # condition: marker; run: dash


def test_training_lab_background_run_can_be_stopped():
    lab = demo.TrainingLab()
    lab.set(steps=1000)
    assert lab.run(background=True) is None and lab.runner.running
    assert not lab.start(background=True)  # a second run is refused while one is going
    lab.runner.stop()
    lab.runner.join(timeout=30)
    assert not lab.runner.running
    history = lab.result["history"]
    assert history.stopped and len(history.loss) < 1000


def test_the_notebook_and_the_lab_train_the_same_recipe():
    """Notebook 06 builds its runs with make_model and train_with_recipe; the lab at the recipe's lr trains the same."""
    lab = demo.TrainingLab()
    assert lab.set(condition="soft-cap 50", steps=20, seed=2)
    by_hand = demo.train_with_recipe(demo.make_model("soft-cap 50", 2), 2, 20)
    assert lab.run(background=False)["history"].loss == by_hand.loss


def test_scaling_table_scales_logits_by_s_squared_and_saturates():
    from course_utils.course import lesson_functions
    attention_probs = lesson_functions("06_qk_norm_and_softcapping")["attention_probs"]
    rows = demo.scaling_table(attention_probs, *demo.probe_qk(seed=3))
    assert all(demo.saturation_checks(rows, at=8).values())
    assert not demo.saturation_checks(rows, at=1)["one-hot rows"]  # at s = 1 the softmax is soft
    assert demo.qk_norm_map_is_scale_free(rows)


def test_softcap_checks_accept_tanh_and_reject_a_hard_clip():
    x = demo.softcap_grid(seed=1)
    assert x.shape[0] > 6001 and bool((x.diff() > 0).all()) and float(x.abs().max()) == 300
    good = demo.softcap_checks(lambda t, cap: cap * torch.tanh(t / cap), x, 30.0)
    clip = demo.softcap_checks(lambda t, cap: t.clamp(-cap, cap), x, 30.0)
    assert good["holds"] and math.isclose(good["slope_0"], 1.0)
    assert not clip["holds"] and not clip["increasing"] and not clip["bounded"]


def test_run_summary_and_the_outcome_tests():
    h = History(step=list(range(30)), loss=[2.7] * 30, max_logit=[4.0] + [5e4] * 29)
    s = demo.run_summary(h, checkpoints=(20,))
    assert s["first_logit"] == 4.0 and s["peak_logit"] == 5e4 and math.isclose(s["final@20"], 2.7)
    assert demo.ran_away(s) and not demo.learned(s) and not demo.qk_norm_bounded(s, 32)
    ok = demo.run_summary(History(step=list(range(30)), loss=[0.05] * 30, max_logit=[4.0] * 15 + [20.0] * 15))
    assert demo.learned(ok) and demo.qk_norm_bounded(ok, 32) and not demo.ran_away(ok)
    assert not demo.qk_norm_bounded(demo.run_summary(History(loss=[0.05] * 30, max_logit=[4.0] * 30)), 32)


def test_under_the_cap_holds_needs_every_part():
    summary = {"first_logit": 4.0, "peak_logit": 1e5, "best": 2.0}
    blur = {"growth": 20.0, "share_beyond": 0.95, "cap_slope": 0.01, "entropy": 1.5, "max_weight": 0.4,
            "uniform_entropy": math.log(16)}
    one_hot = {**blur, "entropy": 0.01, "max_weight": 0.99}
    learned = ({**summary, "peak_logit": 30.0, "best": 0.01}, {**blur, "share_beyond": 0.0, "cap_slope": 1.0})
    runs = {"no QK-norm": (summary, one_hot), "QK-norm": learned, "soft-cap 50": (summary, blur)}
    assert demo.under_the_cap_holds(runs)
    assert not demo.under_the_cap_holds(runs, capped="QK-norm")
    assert not demo.under_the_cap_holds({**runs, "no QK-norm": (summary, blur)})  # the plain model must be one-hot
    assert not demo.under_the_cap_holds({**runs, "QK-norm": (learned[0], {**learned[1], "growth": 2.0})})


def test_final_logit_checks_on_made_up_runs():
    def run(loss, logit, log_z, mean_logit=0.5, climb=True):
        z = [log_z * (k + 1) / 30 for k in range(30)] if climb else [log_z] * 30
        return {"loss": [loss] * 30, "max_logit": [logit] * 30, "log_z": z, "max_log_z": z,
                "mean_logit": [mean_logit] * 30, "margin": [x / 2 for x in z]}
    runs = {"no cap": run(0.001, 40.0, 25.0), "final cap 30": run(0.001, 29.0, 20.0), "z-loss 1e-4": run(0.001, 20.0, 5.0)}
    assert all(demo.final_logit_checks(runs).values())
    assert not demo.final_logit_checks({**runs, "no cap": run(0.001, 20.0, 15.0)})["final logits pass 30"]
    assert not demo.final_logit_checks({**runs, "z-loss 1e-4": run(0.001, 20.0, 20.0)})["z-loss holds log Z down"]
    assert not demo.final_logit_checks({**runs, "no cap": run(2.0, 40.0, 25.0)})["learned, no divergence"]
    assert not demo.final_logit_checks({**runs, "no cap": run(0.001, 40.0, 25.0, climb=False)})["log Z climbs"]
    # a shift of every logit (the mean logit far from 0) is the other mechanism, the one z-loss was made for
    assert not demo.final_logit_checks({**runs, "no cap": run(0.001, 40.0, 25.0, mean_logit=-20.0)})[
        "a margin, not a shift"]


def test_train_output_logits_records_every_step_and_z_loss_changes_the_run():
    from course_utils.transformer import TinyLM
    def model():
        return TinyLM(16, d_model=32, n_layers=1, n_heads=2, max_len=16, seed=0, qk_norm="layer", final_softcap=30.0)
    plain = demo.train_output_logits(model(), seed=0, steps=5, lr=0.1)
    z = demo.train_output_logits(model(), seed=0, steps=5, lr=0.1, z_loss=1.0)
    assert all(len(v) == 5 for v in plain.values()) and max(plain["max_logit"]) < 30
    assert {"mean_logit", "margin"} <= set(plain) and min(plain["margin"]) >= 0
    assert plain["loss"][0] == z["loss"][0] and plain["loss"][-1] != z["loss"][-1]


def test_the_stored_sweep_has_what_the_notebook_prints():
    sweep = demo.load_sweep()
    assert {"command", "run_at", "machine", "seconds", "steps", "points"} <= set(sweep)
    assert "write_sweep" in sweep["command"] and sweep["steps"] == demo.SWEEP_STEPS
    assert f"final@{demo.SANE_STEPS}" in sweep["points"][0]  # the control is rerun live against its stored point
    table = demo.sweep_table(sweep)
    assert set(table) == set(demo.SWEEP_CONDITIONS)
    assert all(set(by_lr) == set(demo.SWEEP_LRS) for by_lr in table.values())
    assert demo.sweep_lookup(sweep, "no QK-norm", demo.SANE_LR, 0)["seed"] == 0
    with pytest.raises(KeyError):
        demo.sweep_lookup(sweep, "no QK-norm", 0.5, 0)
    assert len(demo.sweep_figure(sweep).data) == 2 * len(table) + 2  # chance, and the line that means "trained"


def test_softcap_stops_being_strictly_increasing_in_float64_at_a_small_cap():
    x = demo.softcap_grid(seed=2)
    tanh_cap = lambda t, cap: cap * torch.tanh(t / cap)
    assert demo.softcap_checks(tanh_cap, x, 100.0)["holds"]
    edge = demo.softcap_checks(tanh_cap, x, demo.SOFTCAP_EDGE_CAP)
    assert edge["bounded"] and not edge["increasing"]  # neighbouring logits tie
    assert not demo.softcap_checks(tanh_cap, x, 10.0)["bounded"]  # tanh rounds to 1: the cap is reached


def test_the_control_and_sweep_outcomes_reject_plausible_wrong_runs():
    assert demo.learns_at_sane_lr(0.05, 40.0)
    assert not demo.learns_at_sane_lr(0.5, 40.0)  # not trained
    assert not demo.learns_at_sane_lr(0.05, 2e4)  # trained, but its logits ran away
    sweep = demo.load_sweep()
    seeds = sorted({p["seed"] for p in sweep["points"]})
    trained = {lr: [c for c in demo.sweep_table(sweep)
                    if all(demo.trained_at_end(demo.sweep_lookup(sweep, c, lr, s)) for s in seeds)]
               for lr in demo.SWEEP_LRS}
    assert trained == {lr: list(c) for lr, c in demo.SWEEP_TRAINED.items()}
    assert set(demo.SWEEP_TRAINED) == set(demo.SWEEP_LRS) and demo.CAP_MARGIN_LR in demo.SWEEP_LRS


def test_the_softcap_panel_says_what_happened_to_the_ranking():
    """At a cap small against the logits tanh ties neighbours in float64 (never swaps them): the panel says so and
    no longer says the order is unchanged; at Gemma 2's cap the order is kept."""
    z = demo.next_token_logits(20.0)
    assert "unchanged: yes" in demo.ranking_note(z, 30.0 * torch.tanh(z / 30.0), 30.0)
    big = demo.next_token_logits(120.0)
    note = demo.ranking_note(big, 2.0 * torch.tanh(big / 2.0), 2.0)
    assert "unchanged" not in note and "tie" in note and "No pair is swapped" in note
    assert "swapped" in demo.ranking_note(torch.tensor([3.0, 2.0, 1.0]), torch.tensor([1.0, 2.0, 0.5]), 1.0)
    panel = demo.softcap_panel(lambda x, cap: cap * torch.tanh(x / cap))
    panel.set(cap=2.0, top_logit=120.0)
    assert "tie" in panel.outputs[0].value and "unchanged: yes" not in panel.outputs[0].value


def test_the_variants_c130_and_c131_build_the_models_they_name():
    rms = demo.make_model("QK-RMSNorm", 0)
    alone = demo.make_model("QK-norm, no residual norms", 0)
    assert rms.blocks[0].attn.qk_norm == "rms" and alone.blocks[0].attn.qk_norm == "layer"
    assert isinstance(alone.final_norm, torch.nn.Identity) and alone.blocks[0].norm_kind == "none"
    assert not isinstance(rms.final_norm, torch.nn.Identity)
    assert set(demo.LAB_CONDITIONS) < set(demo.MODEL_CONDITIONS)  # the lab offers only what it did before


def test_the_judges_of_c130_and_c131_can_fail():
    assert demo.near_trained({"final": 0.29}) and not demo.near_trained({"final": 0.31})
    assert demo.broke({"best": 5.2, "final": 58.0})
    assert not demo.broke({"best": 0.02, "final": 0.07})   # the control: it learns
    assert not demo.broke({"best": 2.5, "final": 58.0})    # it got below chance on the way: it did learn something
    assert not demo.broke({"best": 2.9, "final": 2.9})     # stuck at chance is not diverged
    diverged, stuck, learned = {"best": 8.0}, {"best": 2.5}, {"best": 0.01}
    assert demo.needs_residual_norms(diverged, learned)
    assert not demo.needs_residual_norms(stuck, learned)    # at chance is not above it
    assert not demo.needs_residual_norms(learned, learned)  # the control: it learns without the norms
    assert not demo.needs_residual_norms(diverged, stuck)   # and the model with the norms must learn


def test_a_live_figure_is_saved_with_its_data(tmp_path):
    """live_display's second showing replaces the first output in place, so the saved snapshot holds the traces."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(
        "from course_utils import setup\nsetup(0)\nfrom course_utils.demos import qk_norm as demo\n"
        "fig = demo.logit_growth_figure([('no QK-norm', 0)])\nshow = demo.live_display(fig)\n"
        "fig.data[0].update(x=[0, 1, 2], y=[1.0, 10.0, 100.0])\nshow()")]
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3").execute(cwd=str(tmp_path))
    figures = [o for o in nb.cells[0].outputs if "application/vnd.plotly.v1+json" in o.get("data", {})]
    assert len(figures) == 1, nb.cells[0].outputs
    traces = figures[0]["data"]["application/vnd.plotly.v1+json"]["data"]
    assert list(traces[0]["x"]) == [0, 1, 2]
    assert '"x":[0,1,2]' in figures[0]["data"]["text/html"].replace(" ", "")

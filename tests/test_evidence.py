"""The robustness harness: claim experiments are registered with their settings and controls, their committed reports
are current and agree with the notebooks, and CLAIMS.md says what the reports say."""
import json
import math

import pytest

from conftest import ROOT
from course_utils import evidence as ev
from course_utils import robustness as rb

HARNESSED = ("00_", "01_", "02_", "03_", "04_", "05_", "06_", "07_", "08_")  # every notebook: issues 14 and 15


@pytest.fixture
def sandbox(monkeypatch, tmp_path):
    """An empty registry and report folder, so a test's fake experiments touch nothing real."""
    monkeypatch.setattr(ev, "EXPERIMENTS", {})
    monkeypatch.setattr(rb, "EXPERIMENTS", ev.EXPERIMENTS)
    monkeypatch.setattr(ev, "REPORT_DIR", tmp_path)
    monkeypatch.setattr(rb, "REPORT_DIR", tmp_path)
    return tmp_path


def _register(claim="C98", settings=None, body=None):
    def experiment(seed, *, a=1):
        if body:
            return body(seed, a)
        return ev.Outcome(holds=seed % 2 == 0 or a > 1, figure=seed * a, detail="fake")
    experiment.__module__ = "course_utils.demos.start_here"  # a demos module of the manifest
    experiment.__qualname__ = f"experiment_{claim}"
    settings = settings or [ev.Setting("a = 1", {"a": 1}), ev.Setting("a = 2 (control)", {"a": 2}, expect=False)]
    ev.claim_experiment(claim, statement="fake claim", figure="seed times a", settings=settings)(experiment)
    return ev.EXPERIMENTS[claim]


def test_a_report_counts_the_runs_that_agree_with_what_is_stated(sandbox):
    exp = _register()
    report = rb.run_claim(exp, seeds=range(4))
    # a = 1 holds at even seeds (2 of 4 agree); a = 2 holds everywhere, but is stated not to (0 of 4 agree)
    assert rb.agreement(report) == (2, 8)
    assert [r["figure"] for r in report["settings"][1]["runs"]] == [0, 2, 4, 6]
    assert report["notebook"] == "00_start_here" and report["fingerprint"] == ev.fingerprint(exp)


def test_a_run_that_raises_is_recorded_as_disagreeing_and_the_others_still_run(sandbox):
    def body(seed, a):
        if seed == 1:
            raise RuntimeError("diverged")
        return ev.Outcome(True, 1.0)
    exp = _register(settings=[ev.Setting("only")], body=body)
    report = rb.run_claim(exp, seeds=range(3))
    runs = report["settings"][0]["runs"]
    assert [r["holds"] for r in runs] == [True, False, True]
    assert "RuntimeError: diverged" in runs[1]["detail"] and math.isnan(runs[1]["figure"])


def test_registration_refuses_what_it_could_not_run(sandbox):
    with pytest.raises(TypeError, match="takes `seed`"):
        ev.claim_experiment("C97", statement="s", figure="f")(lambda x: None)
    with pytest.raises(TypeError, match="no parameter"):
        _register("C96", settings=[ev.Setting("typo", {"b": 2})])
    _register("C95")
    with pytest.raises(ValueError, match="already has an experiment"):
        def other(seed):
            return ev.Outcome(True, 0)
        other.__module__ = "course_utils.demos.start_here"
        ev.claim_experiment("C95", statement="s", figure="f")(other)

    def outside(seed):
        return ev.Outcome(True, 0)
    with pytest.raises(ValueError, match="manifest"):
        ev.claim_experiment("C94", statement="s", figure="f")(outside)  # defined in a test module, no notebook


def test_an_experiment_must_return_an_outcome(sandbox):
    exp = _register(body=lambda seed, a: 0.5)
    with pytest.raises(TypeError, match="must return an Outcome"):
        exp.run(0, exp.settings[0])


def test_the_fingerprint_changes_with_the_settings(sandbox):
    before = ev.fingerprint(_register("C93"))
    ev.EXPERIMENTS.clear()
    after = ev.fingerprint(_register("C93", settings=[ev.Setting("a = 3", {"a": 3})]))
    assert before != after


def test_quote_reads_the_report_and_says_how_to_make_a_missing_one(sandbox):
    exp = _register()
    assert "python -m course_utils.robustness --claims C98" in ev.quote("C98")
    rb.write_report(rb.run_claim(exp, seeds=range(4)))
    text = ev.quote("C98")
    assert text.startswith("C98: fake claim\n") and "a = 1: the claim holds at 2 of 4 seeds" in text
    assert "a = 2 (control): the claim fails here, as the notebook says it should, at 0 of 4 seeds" in text
    assert "2 of 8 runs agree" in text


def test_the_ledger_sentence_is_rewritten_not_appended_twice(sandbox):
    report = rb.run_claim(_register(), seeds=range(2))
    table = "| C98 | a claim | `00_start_here` | holds | figure 1 |\n| C01 | other | `01_why_normalize` | holds | 2 |\n"
    once = rb.update_ledger(table, {"C98": report})
    assert once.count("Robustness:") == 1 and "1 of 4 runs agree" in once and once.splitlines()[1].endswith("2 |")
    assert rb.update_ledger(once, {"C98": report}) == once
    report["settings"][1]["runs"][0]["holds"] = False  # a rerun that now agrees once more
    assert "2 of 4 runs agree" in rb.update_ledger(once, {"C98": report})


def test_the_command_refuses_an_unknown_claim(capsys):
    with pytest.raises(SystemExit) as stop:
        rb.main(["--claims", "C00", "--dry-run"])
    assert stop.value.code == 2 and "no experiment registered for C00" in capsys.readouterr().err


# ---- the real reports ----------------------------------------------------------------------------------------------

def _ledger_rows():
    return {row.claim: (row.notebook, row.line) for row in rb.ledger_rows()}


EXPERIMENTS = rb.load_experiments()
HARNESSED_CLAIMS = sorted(cid for cid, (nb, _) in _ledger_rows().items() if nb.startswith(HARNESSED))


def test_every_claim_of_the_harnessed_notebooks_has_an_experiment():
    missing = [cid for cid in HARNESSED_CLAIMS if cid not in EXPERIMENTS]
    assert not missing, f"no @claim_experiment for {missing} (see course_utils/evidence.py)"
    rows = _ledger_rows()
    for cid, exp in EXPERIMENTS.items():
        assert cid in rows, f"{cid} has an experiment but no CLAIMS.md row"
        assert rows[cid][0] == exp.notebook, f"{cid}: the ledger names {rows[cid][0]}, the experiment {exp.notebook}"


@pytest.mark.parametrize("cid", sorted(EXPERIMENTS))
def test_each_report_is_current_agrees_and_is_what_the_ledger_says(cid):
    exp = EXPERIMENTS[cid]
    report = ev.load_report(cid)
    assert report is not None, f"{cid}: no report; run python -m course_utils.robustness --claims {cid}"
    assert report["fingerprint"] == ev.fingerprint(exp), \
        f"{cid}: the experiment changed since its report; rerun python -m course_utils.robustness --claims {cid}"
    assert len(report["seeds"]) >= 6, f"{cid}: fewer than six seeds (the notebook's and five others)"
    against = [(s["label"], r["seed"], r["detail"]) for s in report["settings"] for r in s["runs"]
               if r["holds"] != s["expect"]]
    assert not against, f"{cid}: runs that disagree with what the notebook states: {against}"
    line = _ledger_rows()[cid][1]
    assert rb.ledger_sentence(report) in line, \
        f"{cid}: CLAIMS.md's robustness sentence is not the report's; run python -m course_utils.robustness --summary"


def test_the_summary_lists_every_report():
    text = (ROOT / "benchmarks" / "ROBUSTNESS.md").read_text(encoding="utf-8")
    assert text == rb.summary_markdown(EXPERIMENTS), "run python -m course_utils.robustness --summary"


@pytest.mark.parametrize("cid", sorted(EXPERIMENTS))
def test_seed_zero_reproduces_its_report(cid):
    """The committed figures are what the code computes now: seed 0 of the first setting, rerun."""
    from course_utils import setup

    exp = EXPERIMENTS[cid]
    report = ev.load_report(cid)
    if report is None or 0 not in report["seeds"]:
        pytest.skip("no report with seed 0")
    setup(0)
    out = exp.run(0, exp.settings[0])
    recorded = report["settings"][0]["runs"][report["seeds"].index(0)]
    assert out.holds == recorded["holds"]
    if exp.timed:  # a time differs from run to run; the verdict must not
        return
    assert out.figure == pytest.approx(recorded["figure"], rel=1e-6, abs=1e-12, nan_ok=True)


def test_reports_are_plain_json():
    for path in sorted((ROOT / "data" / "robustness").glob("C*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        assert data["claim"] == path.stem

"""The norm speed benchmark (course_utils.normbench)."""
import pytest
import torch
import torch.nn.functional as F

from course_utils import normbench

TINY = dict(widths=(64, 256), repeats=3, number=1, warmup=1, elements=2 ** 12)


def test_every_default_variant_computes_what_its_name_says():
    x, w, b = torch.randn(4, 16), torch.rand(16) + 0.5, torch.randn(16)
    for v in normbench.lesson_variants():
        y = v.fn(x, w, b)
        if v.family == "copy":
            want = x
        elif v.family == "layer":
            want = F.layer_norm(x, (16,), *((None, None) if "no γ" in v.name else (w, b)), 1e-5)
        else:
            want = F.rms_norm(x, (16,), None if "no γ" in v.name else w, 1e-5)
        torch.testing.assert_close(y, want, msg=v.name)


def test_run_records_every_variant_at_the_thread_count_it_finds():
    threads = torch.get_num_threads()
    result = normbench.run(normbench.lesson_variants(), **TINY)
    assert torch.get_num_threads() == threads  # only course_utils.setup sets it
    assert result.threads == threads and result.clock == ("thread CPU time" if threads == 1 else "wall clock")
    for v in result.variants:
        for d in TINY["widths"]:
            assert len(result.times[(v, d)]) == TINY["repeats"] == len(result.wall[(v, d)])
            assert result.median_s(v, d) > 0 and result.gbps(v, d) > 0
    q1, median, q3 = result.saving("LayerNorm by hand", "RMSNorm by hand", 64)
    assert q1 <= median <= q3
    assert [p[0] for p in result.pairs()] == ["PyTorch ops", "PyTorch ops, no γ/β", "by hand"]
    table = result.table()
    assert "copy (x.clone())" in table and "Time saved by RMSNorm" in table and "6.9%" in table
    assert len(result.records()) == len(result.variants) * len(TINY["widths"])


def test_saving_is_computed_repeat_by_repeat():
    result = normbench.BenchResult((8,), 64, 1, 3, 1, ["a", "b"])
    result.times = {("a", 8): [1.0, 2.0, 4.0], ("b", 8): [0.5, 2.0, 1.0]}
    assert result.saving("a", "b", 8) == pytest.approx((0.25, 0.5, 0.625))


def test_a_failing_variant_is_reported_and_the_rest_timed():
    def broken(x, w, b):
        raise RuntimeError("no compiler here")
    variants = normbench.lesson_variants()[:2] + [normbench.Variant("broken", "rms", "compiled", broken)]
    result = normbench.run(variants, **TINY)
    assert "no compiler here" in result.failed["broken"] and not result.has("broken")
    assert result.has("F.layer_norm") and "broken: not timed" in result.table()


@pytest.mark.parametrize("kwargs", [dict(widths=(3,)), dict(widths=()), dict(repeats=0), dict(number=0)])
def test_run_refuses_bad_settings(kwargs):
    with pytest.raises(ValueError):
        normbench.run(normbench.lesson_variants(), **{**TINY, **kwargs})


def test_settings_and_command_line(monkeypatch, capsys):
    assert normbench.settings(False)["widths"] == normbench.WIDTHS
    assert normbench.settings(True)["widths"] == normbench.LONG_WIDTHS
    assert all(normbench.ELEMENTS % d == 0 for d in normbench.LONG_WIDTHS)
    monkeypatch.setattr(normbench, "settings", lambda long=False: dict(TINY, widths=(64,), repeats=2))
    normbench.main(["--long", "--no-compile"])
    out = capsys.readouterr().out
    assert "median of 2 repeats" in out and "LayerNorm by hand" in out and "[1/1] d = 64 done" in out
    assert "compiled" not in out
    assert "Time saved by RMSNorm" in normbench.report()


def test_keep_freed_memory_answers_a_bool():
    assert isinstance(normbench.keep_freed_memory(), bool)

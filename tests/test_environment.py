"""check_environment says plainly whether widgets will render, and what fixes it when they will not."""
import importlib.metadata

import course_utils
from course_utils import check_environment, setup


def test_this_environment_is_ready():
    report = check_environment()
    assert report.ok, report.text()
    assert report["versions"]["torch"].startswith("2.13.0")
    assert "ready" in report._repr_html_()


def test_a_missing_anywidget_is_reported_with_the_fix(monkeypatch):
    real = importlib.metadata.version

    def fake(dist):
        if dist in ("anywidget", "jupyterlab_widgets"):
            raise importlib.metadata.PackageNotFoundError(dist)
        return real(dist)
    monkeypatch.setattr(importlib.metadata, "version", fake)
    report = check_environment()
    assert not report.ok
    text = report.text()
    assert "anywidget is not installed" in text and "jupyterlab_widgets is not installed" in text
    assert course_utils.FIX in text


def test_setup_makes_runs_repeat():
    import torch
    setup(3)
    a = torch.randn(4)
    g = setup(3)
    assert torch.equal(a, torch.randn(4))
    assert torch.equal(torch.randn(2, generator=g), torch.randn(2, generator=torch.Generator().manual_seed(3)))

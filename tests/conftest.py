"""Shared test settings: deterministic torch, repository paths."""
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
TOL = {torch.float32: 1e-5, torch.float64: 1e-10}


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)

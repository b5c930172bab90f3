"""Shared test settings: deterministic torch, repository paths."""
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
TOL = {torch.float32: 1e-5, torch.float64: 1e-10}


@pytest.fixture(autouse=True, scope="session")
def _one_thread_for_the_run():
    """One torch thread, module-scoped fixtures included: tiny models run far faster single-threaded, above all on a
    busy machine. The thread count is given back when the run ends."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _seed_and_one_thread():
    """Seeded, and back to one thread (a test may change the count on purpose)."""
    torch.manual_seed(0)
    torch.set_num_threads(1)

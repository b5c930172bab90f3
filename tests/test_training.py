"""The training loop's helpers (course_utils.training)."""
import torch

from course_utils.training import seconds_per_step
from course_utils.transformer import TinyLM


def test_seconds_per_step_times_a_copy_and_leaves_the_model_untouched():
    model = TinyLM(16, d_model=16, n_layers=1, n_heads=2, max_len=8, seed=0)
    before = {name: value.clone() for name, value in model.state_dict().items()}
    seconds = seconds_per_step(model, batch_size=4, n_tokens=4, vocab_size=16)
    assert 0 < seconds < 5
    assert all(torch.equal(before[name], value) for name, value in model.state_dict().items())


def test_train_copy_task_takes_radam_and_refuses_an_unknown_optimizer():
    import pytest

    from course_utils.training import train_copy_task

    def run(**kw):
        model = TinyLM(16, d_model=16, n_layers=1, n_heads=2, max_len=8, seed=0)
        return train_copy_task(model, steps=3, batch_size=4, n_tokens=4, **kw).loss

    assert run() == run(optimizer="adamw")  # AdamW stays the default
    assert run(optimizer="radam") != run()
    with pytest.raises(ValueError, match="optimizer"):
        run(optimizer="sgd")

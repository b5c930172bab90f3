"""A small training loop for the course's language models; it knows nothing of widgets, a callback does."""
from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from .synthetic import copy_task_batch

__all__ = ["History", "train_copy_task", "warmup_lr", "masked_loss_and_accuracy", "seconds_per_step", "OPTIMIZERS"]

# AdamW is the course's optimizer; RAdam (Liu et al. 2019, arXiv 1908.03265) corrects the variance of Adam's adaptive
# learning rate in the first steps, one of the accounts of why warmup helps (notebook 04).
OPTIMIZERS = {"adamw": torch.optim.AdamW, "radam": torch.optim.RAdam}


@dataclass
class History:
    """Per-step records of one training run."""
    step: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    accuracy: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    grad_norm: list[float] = field(default_factory=list)
    max_logit: list[float] = field(default_factory=list)
    stopped: bool = False

    def final(self, key: str = "loss", last: int = 20) -> float:
        """Mean of the last `last` records of a series (smooths the noise of single steps)."""
        values = getattr(self, key)[-last:]
        return sum(values) / len(values) if values else float("nan")


def warmup_lr(step: int, lr: float, warmup: int) -> float:
    """Linear warmup from lr / warmup to lr over `warmup` steps, then constant."""
    return lr if warmup <= 0 else lr * min(1.0, (step + 1) / warmup)


def masked_loss_and_accuracy(logits, targets, loss_mask):
    """Cross-entropy and accuracy over the positions where loss_mask is True."""
    picked = logits[loss_mask]
    loss = F.cross_entropy(picked, targets[loss_mask])
    accuracy = (picked.argmax(-1) == targets[loss_mask]).float().mean()
    return loss, accuracy


def train_copy_task(model: torch.nn.Module, steps: int = 300, lr: float = 3e-3, warmup: int = 0,
                    batch_size: int = 32, n_tokens: int = 12, vocab_size: int = 16, seed: int = 0,
                    betas: tuple[float, float] = (0.9, 0.98), weight_decay: float = 0.0,
                    callback: Callable[[int, History], None] | None = None,
                    should_stop: Callable[[], bool] | None = None, optimizer: str = "adamw") -> History:
    """Train `model` on the copy task with AdamW (or `optimizer`, a key of OPTIMIZERS) and linear warmup; the data
    stream is fixed by `seed`.

    callback(step, history) runs after every step; should_stop() ends the run early (history.stopped is then True).
    """
    if steps < 1 or not (lr > 0 and math.isfinite(lr)) or warmup < 0:
        raise ValueError(f"need steps >= 1, a finite lr > 0 and warmup >= 0; got steps={steps}, lr={lr}, "
                         f"warmup={warmup}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {sorted(OPTIMIZERS)}, got {optimizer!r}")
    g = torch.Generator().manual_seed(seed)
    opt = OPTIMIZERS[optimizer](model.parameters(), lr=lr, betas=betas, weight_decay=weight_decay)
    history = History()
    model.train()
    for step in range(steps):
        if should_stop is not None and should_stop():
            history.stopped = True
            break
        for group in opt.param_groups:
            group["lr"] = warmup_lr(step, lr, warmup)
        idx, targets, loss_mask = copy_task_batch(batch_size, n_tokens, vocab_size, generator=g)
        loss, accuracy = masked_loss_and_accuracy(model(idx), targets, loss_mask)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in model.parameters() if p.grad is not None))
        opt.step()
        history.step.append(step)
        history.loss.append(loss.item())
        history.accuracy.append(accuracy.item())
        history.lr.append(opt.param_groups[0]["lr"])
        history.grad_norm.append(float(grad_norm))
        max_logit = getattr(model, "max_attention_logit", None)
        history.max_logit.append(max_logit() if max_logit else float("nan"))
        if callback is not None:
            callback(step, history)
    return history


def seconds_per_step(model: torch.nn.Module, repeats: int = 3, **task) -> float:
    """Median wall time here of one train_copy_task step (its `task` settings) of a copy of `model`."""
    stamps = [time.perf_counter()]
    train_copy_task(copy.deepcopy(model), steps=repeats, callback=lambda _step, _h: stamps.append(time.perf_counter()),
                    **task)
    gaps = sorted(b - a for a, b in zip(stamps, stamps[1:]))
    return gaps[len(gaps) // 2]

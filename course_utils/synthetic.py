"""Synthetic data the course trains and measures on: the copy task and padded variable-length batches."""
from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["SEP", "copy_task_batch", "padded_batch"]

SEP = 0  # separator token of the copy task; payload tokens are 1 .. vocab_size - 1


def copy_task_batch(batch_size: int, n_tokens: int = 12, vocab_size: int = 16,
                    generator: torch.Generator | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """A causal copy task: n_tokens random tokens, SEP, the same tokens again; only the copy is scored.

    Returns idx (batch, 2n), targets (batch, 2n) and loss_mask (batch, 2n), True where the target is a copied token.
    A model that has not learned to copy sits at loss ln(vocab_size - 1).
    """
    if batch_size < 1 or n_tokens < 1 or vocab_size < 3:
        raise ValueError(f"need batch_size >= 1, n_tokens >= 1, vocab_size >= 3; got {batch_size}, {n_tokens}, "
                         f"{vocab_size}")
    payload = torch.randint(1, vocab_size, (batch_size, n_tokens), generator=generator)
    seq = torch.cat([payload, torch.full((batch_size, 1), SEP), payload], dim=1)
    idx, targets = seq[:, :-1], seq[:, 1:]
    loss_mask = torch.zeros_like(targets, dtype=torch.bool)
    loss_mask[:, n_tokens:] = True
    return idx, targets, loss_mask


def padded_batch(lengths: Tensor | list[int], d_model: int, generator: torch.Generator | None = None,
                 mean: float | Tensor = 1.0, std: float | Tensor = 1.0, pad_value: float = 0.0,
                 max_len: int | None = None) -> tuple[Tensor, Tensor]:
    """Token features N(mean, std²) for sequences of the given lengths, right-padded with pad_value.

    Returns x (batch, max_len, d_model) and mask (batch, max_len), True at real tokens.
    """
    lengths = torch.as_tensor(lengths, dtype=torch.long)
    if lengths.dim() != 1 or len(lengths) == 0 or int(lengths.min()) < 1:
        raise ValueError(f"lengths must be a non-empty list of positive ints, got {lengths.tolist()}")
    t = int(lengths.max()) if max_len is None else max_len
    if t < int(lengths.max()):
        raise ValueError(f"max_len={max_len} is shorter than the longest sequence ({int(lengths.max())})")
    mask = torch.arange(t)[None, :] < lengths[:, None]
    x = torch.randn(len(lengths), t, d_model, generator=generator) * std + mean
    return x.masked_fill(~mask[..., None], pad_value), mask

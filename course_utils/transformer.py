"""The course's Transformer block and tiny decoder-only language model.

One block covers every variant the chapter discusses: norm in {"layer", "rms", "none"}, placement in {"pre", "post"},
optional QK-norm (Henry et al. 2020, arXiv 2010.04245) and soft-capping of attention and final logits
(Gemma 2, arXiv 2408.00118). Notebooks 04, 05 and 06 train it; notebook 08 loads real BERT-style weights into it.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

from .norms import NORM_KINDS, make_norm, positive_number

__all__ = ["softcap", "MultiHeadAttention", "FeedForward", "TransformerBlock", "TinyLM", "PLACEMENTS"]

PLACEMENTS = ("pre", "post")
ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU}


def softcap(x: Tensor, cap: float | None) -> Tensor:
    """cap * tanh(x / cap): close to x for |x| << cap, never beyond ±cap; None leaves x alone."""
    return x if cap is None else cap * torch.tanh(x / cap)


def _check_cap(cap: float | None, name: str) -> float | None:
    return positive_number(cap, name, note=" (Gemma 2 uses 50 and 30)", allow_none=True)


def _residual(x: Tensor, sublayer: Callable[[Tensor], Tensor], norm: Callable[[Tensor], Tensor], placement: str,
              record: dict | None, names: tuple[str, str], residual_scale: float = 1.0) -> Tensor:
    """One residual sublayer with its norm placed "pre", a·x + sublayer(norm(x)), or "post", norm(a·x + sublayer(x)),
    a = residual_scale (1: the plain residual, computed without a multiplication; DeepNorm's alpha otherwise);
    `record` (if a dict) gets the norm's and the sublayer's inputs under `names`."""
    skip = x if residual_scale == 1 else residual_scale * x
    if placement == "pre":
        normed = norm(x)
        seen, out = (x, normed), skip + sublayer(normed)
    else:
        summed = skip + sublayer(x)
        seen, out = (summed, x), norm(summed)
    if record is not None:
        record.update(zip(names, seen))
    return out


class MultiHeadAttention(nn.Module):
    """Multi-head self-attention with separate q, k, v projections (BERT's layout) and optional QK-norm and soft-cap.

    After each forward, `last_max_logit` holds the largest |attention logit| before any cap (a detached 0-d tensor).
    """

    def __init__(self, d_model: int, n_heads: int, *, qk_norm: str | bool | None = None,
                 attn_softcap: float | None = None, causal: bool = True, bias: bool = True, eps: float = 1e-5):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        if qk_norm is True:
            qk_norm = "rms"
        if qk_norm not in (None, False, "layer", "rms"):
            raise ValueError(f"qk_norm must be None, True, 'layer' or 'rms', got {qk_norm!r}")
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.causal, self.attn_softcap = causal, _check_cap(attn_softcap, "attn_softcap")
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.qk_norm = qk_norm or None
        self.q_norm = make_norm(qk_norm, self.d_head, eps) if qk_norm else nn.Identity()
        self.k_norm = make_norm(qk_norm, self.d_head, eps) if qk_norm else nn.Identity()
        self.last_max_logit: Tensor | None = None

    def logits(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Attention logits (batch, heads, seq, seq) before cap or masks, and the values (batch, heads, seq, d_head)."""
        b, t, _ = x.shape
        q, k, v = (proj(x).view(b, t, self.n_heads, self.d_head).transpose(1, 2)
                   for proj in (self.q_proj, self.k_proj, self.v_proj))
        q, k = self.q_norm(q), self.k_norm(k)
        return q @ k.transpose(-2, -1) / math.sqrt(self.d_head), v

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """x: (batch, seq, d_model); key_padding_mask: (batch, seq), True at real tokens."""
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must be (batch, seq, {self.d_model}), got shape {tuple(x.shape)}")
        b, t, _ = x.shape
        scores, v = self.logits(x)
        self.last_max_logit = scores.detach().abs().amax()
        scores = softcap(scores, self.attn_softcap)
        if self.causal:
            future = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        if key_padding_mask is not None:
            if tuple(key_padding_mask.shape) != (b, t):
                raise ValueError(f"key_padding_mask must have shape {(b, t)}, got {tuple(key_padding_mask.shape)}")
            scores = scores.masked_fill(~key_padding_mask[:, None, None, :], float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v
        return self.out_proj(out.transpose(1, 2).reshape(b, t, self.d_model))


class FeedForward(nn.Module):
    """Position-wise feed-forward: linear1 -> activation -> linear2 (PyTorch's TransformerEncoderLayer names)."""

    def __init__(self, d_model: int, d_ff: int, activation: str = "relu", bias: bool = True):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {tuple(ACTIVATIONS)}, got {activation!r}")
        self.linear1 = nn.Linear(d_model, d_ff, bias=bias)
        self.activation = ACTIVATIONS[activation]()
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear2(self.activation(self.linear1(x)))


class TransformerBlock(nn.Module):
    """One block, attention then feed-forward, each wrapped in a residual with the norm placed "pre" or "post".

    pre:  x = x + attn(norm1(x));  x = x + ffn(norm2(x))      (GPT-2, LLaMA)
    post: x = norm1(x + attn(x));  x = norm2(x + ffn(x))      (the original Transformer, BERT)

    residual_scale (alpha) multiplies the skip path, x -> alpha·x, in both sublayers: Post-LN with alpha > 1 is
    DeepNorm's forward (Wang et al. 2022, arXiv 2203.00555). The default 1 leaves the block exactly as above.
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int | None = None, *, norm: str = "layer",
                 placement: str = "pre", qk_norm: str | bool | None = None, attn_softcap: float | None = None,
                 activation: str = "relu", eps: float = 1e-5, causal: bool = True, bias: bool = True,
                 residual_scale: float = 1.0):
        super().__init__()
        if norm not in NORM_KINDS:
            raise ValueError(f"norm must be one of {NORM_KINDS}, got {norm!r}")
        if placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {PLACEMENTS}, got {placement!r}")
        if not (isinstance(d_model, int) and d_model > 0 and isinstance(n_heads, int) and n_heads > 0):
            raise ValueError(f"d_model and n_heads must be positive ints, got d_model={d_model!r}, n_heads={n_heads!r}")
        self.norm_kind, self.placement = norm, placement
        self.residual_scale = positive_number(residual_scale, "residual_scale")
        self.attn = MultiHeadAttention(d_model, n_heads, qk_norm=qk_norm, attn_softcap=attn_softcap,
                                       causal=causal, bias=bias, eps=eps)
        self.ffn = FeedForward(d_model, d_ff or 4 * d_model, activation, bias)
        self.norm1 = make_norm(norm, d_model, eps)
        self.norm2 = make_norm(norm, d_model, eps)

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None, *, norm1: Callable | None = None,
                norm2: Callable | None = None, placement: str | tuple[str, str] | None = None,
                record: dict | None = None) -> Tensor:
        """x: (batch, seq, d_model) -> (batch, seq, d_model). For this call only: norm1/norm2 replace a norm (any
        callable); placement replaces the block's, one for both sublayers or a pair (attention, FFN); a dict `record`
        receives what each norm and sublayer sees: "norm1_in", "attn_in", "norm2_in", "ffn_in"."""
        if x.dim() != 3 or x.shape[-1] != self.attn.d_model:
            raise ValueError(f"x must be (batch, seq, {self.attn.d_model}), got shape {tuple(x.shape)}")
        if record is not None and not isinstance(record, dict):
            raise ValueError(f"record must be None or a dict to fill, got {type(record).__name__}")
        attn_placement, ffn_placement = self._placements(placement)
        x = _residual(x, lambda h: self.attn(h, key_padding_mask), self.norm1 if norm1 is None else norm1,
                      attn_placement, record, ("norm1_in", "attn_in"), self.residual_scale)
        return _residual(x, self.ffn, self.norm2 if norm2 is None else norm2, ffn_placement, record,
                         ("norm2_in", "ffn_in"), self.residual_scale)

    def _placements(self, placement: str | tuple[str, str] | None) -> tuple[str, str]:
        """The (attention, FFN) placements of one call: the block's own, one for both, or a pair."""
        chosen = self.placement if placement is None else placement
        pair = (chosen, chosen) if isinstance(chosen, str) else chosen
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2 and all(p in PLACEMENTS for p in pair)):
            raise ValueError(f"placement must be one of {PLACEMENTS} or a pair of them (attention, FFN), "
                             f"got {placement!r}")
        return tuple(pair)


class TinyLM(nn.Module):
    """A tiny decoder-only language model: token + learned position embeddings, n_layers blocks, optional final norm,
    a linear head, and optional soft-capping of the final logits. forward(idx: (batch, seq)) -> (batch, seq, vocab).

    Initialisation is seeded and independent of the global RNG: the same seed gives the same weights.
    """

    def __init__(self, vocab_size: int, d_model: int = 64, n_layers: int = 2, n_heads: int = 4,
                 d_ff: int | None = None, max_len: int = 128, *, norm: str = "layer", placement: str = "pre",
                 final_norm: bool | None = None, qk_norm: str | bool | None = None,
                 attn_softcap: float | None = None, final_softcap: float | None = None, activation: str = "relu",
                 eps: float = 1e-5, residual_scale: float = 1.0, seed: int = 0):
        super().__init__()
        if not (isinstance(vocab_size, int) and vocab_size > 1):
            raise ValueError(f"vocab_size must be an int > 1, got {vocab_size!r}")
        if not (isinstance(n_layers, int) and n_layers >= 0):
            raise ValueError(f"n_layers must be an int >= 0, got {n_layers!r}")
        self.final_softcap = _check_cap(final_softcap, "final_softcap")
        self.max_len = max_len
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList(
            TransformerBlock(d_model, n_heads, d_ff, norm=norm, placement=placement, qk_norm=qk_norm,
                             attn_softcap=attn_softcap, activation=activation, eps=eps,
                             residual_scale=residual_scale)
            for _ in range(n_layers))
        if final_norm is None:  # Pre-LN leaves the stream unnormalized, so it needs one; Post-LN ends on a norm already
            final_norm = placement == "pre" and norm != "none"
        self.final_norm = make_norm(norm if norm != "none" else "layer", d_model, eps) if final_norm else nn.Identity()
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.reset_parameters(seed)

    @torch.no_grad()
    def reset_parameters(self, seed: int = 0) -> None:
        """Xavier-uniform matrices, zero biases, unit norm gains, N(0, 1) token and N(0, 0.1²) position embeddings."""
        g = torch.Generator().manual_seed(seed)
        for name, p in self.named_parameters():
            if name.startswith("tok_emb"):
                p.normal_(0.0, 1.0, generator=g)
            elif name.startswith("pos_emb"):
                p.normal_(0.0, 0.1, generator=g)
            elif p.dim() >= 2:
                nn.init.xavier_uniform_(p, generator=g)
            elif "norm" in name and name.endswith("weight"):
                p.fill_(1.0)
            else:
                p.zero_()

    def forward(self, idx: Tensor, return_hidden: bool = False):
        """idx: (batch, seq) token ids -> logits (batch, seq, vocab); with return_hidden also the residual stream
        after the embeddings and after every block, a list of n_layers + 1 tensors (batch, seq, d_model)."""
        if idx.dim() != 2:
            raise ValueError(f"idx must be (batch, seq) token ids, got shape {tuple(idx.shape)}")
        t = idx.shape[1]
        if t > self.max_len:
            raise ValueError(f"sequence length {t} exceeds max_len={self.max_len}")
        x = self.tok_emb(idx) + self.pos_emb(torch.arange(t, device=idx.device))
        hidden = [x]
        for block in self.blocks:
            x = block(x)
            hidden.append(x)
        logits = softcap(self.head(self.final_norm(x)), self.final_softcap)
        return (logits, hidden) if return_hidden else logits

    def max_attention_logit(self) -> float:
        """The largest |attention logit| (before any cap) over all blocks in the last forward pass."""
        values = [b.attn.last_max_logit for b in self.blocks if b.attn.last_max_logit is not None]
        return float(torch.stack(values).max()) if values else float("nan")

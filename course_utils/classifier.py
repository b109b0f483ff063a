"""An encoder-only classifier built from the course's blocks (backs notebook 08).

BERT keeps the Transformer's encoder and drops the decoder: a classifier needs one label
per sequence, not a sequence out. The encoder turns the tokens into contextual vectors
``(B, L, D)``; a **pooling** step reduces them to one vector per sequence ``(B, D)``; a
linear layer turns that into one score (logit) per class ``(B, C)``. Two poolings:

* ``"cls"``: the vector at position 0, where every sequence holds the ``[CLS]`` token. It
  has no meaning of its own, so its vector is whatever the encoder puts there: attention
  lets it gather what the classifier needs from the other positions (BERT's choice).
* ``"mean"``: the mean over the **real** positions (:func:`masked_mean_pool`); padding
  must count neither in the sum nor in the number of positions, else a review's
  representation would depend on how long the longest review of its batch was.

Also here: :func:`gelu` (BERT's feed-forward non-linearity, exact form), the order-blind
baselines :class:`BagOfWords` (linear, or with a hidden layer), the training recipe :data:`CLASSIFIER_RECIPE`,
:func:`fit_classifier`, :func:`classifier_accuracy` and the shipped checkpoint
(:func:`load_pretrained_classifier`).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._validate import check_nonempty, check_rank, check_tensor
from .attention import padding_mask
from .embeddings import TokenEmbedding
from .encoder import Encoder
from .positional import PositionalEncoding

CHECKPOINT = Path(__file__).resolve().parent / "pretrained" / "review_classifier.pt"
FORMAT = 1


def gelu(x: Tensor) -> Tensor:
    r"""Gaussian error linear unit, exact form: ``x * Phi(x) = x / 2 * (1 + erf(x / sqrt(2)))``.

    ``Phi`` is the standard normal's cumulative distribution. Same numbers as
    ``F.gelu(x)`` (not the tanh approximation, ``approximate="tanh"``). Any shape and
    floating dtype; the result has ``x``'s.
    """
    check_tensor("x", x)
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def masked_mean_pool(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``x (B, L, D)`` over the positions where ``mask (B, L)`` is ``True`` -> ``(B, D)``.

    ``mask`` is boolean, ``True`` = a real token (padding: ``False``), anywhere in the row;
    ``padding_mask``'s ``(B, 1, L)`` is accepted too. Every row needs at least one real token.
    """
    check_rank("x", x, 3, "(B, L, D)")
    check_tensor("mask", mask)
    if mask.dim() == 3 and mask.size(1) == 1:
        mask = mask[:, 0]  # (B, L) from padding_mask's (B, 1, L)
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must have dtype torch.bool (True = real token), got {mask.dtype}")
    if tuple(mask.shape) != tuple(x.shape[:2]):
        raise ValueError(f"mask must have shape (B, L) = {tuple(x.shape[:2])}, got {tuple(mask.shape)}")
    if not bool(mask.any(dim=1).all()):
        raise ValueError("every row of mask needs at least one True (a real token) to average over")
    weights = mask.unsqueeze(-1).to(x.dtype)  # (B, L, 1): 1 on real tokens, 0 on padding
    return (x * weights).sum(dim=1) / weights.sum(dim=1)  # (B, D)


class TransformerClassifier(nn.Module):
    """Token ids ``(B, L)`` -> one logit per class ``(B, num_classes)``.

    ``embedding`` (:class:`TokenEmbedding`) and ``positional_encoding`` feed an ``encoder``
    (:class:`Encoder`, self-attention masked with ``padding_mask(tokens, pad_id)``); the
    output is pooled (``pooling="cls"``: position 0, which holds ``[CLS]``; ``"mean"``:
    :func:`masked_mean_pool` over the non-pad tokens) and ``classifier`` (``nn.Linear(D,
    num_classes)``) gives the logits: raw scores, no softmax (``F.cross_entropy`` applies
    ``log_softmax`` itself). ``activation`` is the feed-forward's (``"gelu"`` as in BERT,
    or ``"relu"``).
    """

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        d_model: int = 64,
        num_heads: int = 4,
        num_layers: int = 2,
        d_ff: int = 128,
        dropout: float = 0.0,
        max_len: int = 64,
        norm_first: bool = False,
        activation: str = "gelu",
        pooling: str = "cls",
        pad_id: int = 0,
    ):
        super().__init__()
        if pooling not in ("cls", "mean"):
            raise ValueError(f"pooling must be 'cls' or 'mean', got {pooling!r}")
        self.pooling = pooling
        self.pad_id = pad_id
        self.embedding = TokenEmbedding(vocab_size, d_model)
        self.positional_encoding = PositionalEncoding(d_model, max_len, dropout)
        self.encoder = Encoder(num_layers, d_model, num_heads, d_ff, dropout, norm_first, activation)
        self.classifier = nn.Linear(d_model, num_classes)

    def forward(self, tokens: Tensor) -> Tensor:
        check_rank("tokens", tokens, 2, "(B, L) of token ids")
        check_nonempty("tokens", tokens, 1, "L")  # no [CLS], nothing to pool
        mask = padding_mask(tokens, self.pad_id)  # (B, 1, L): every query may look at every real token
        h = self.encoder(self.positional_encoding(self.embedding(tokens)), mask)  # (B, L, D)
        pooled = h[:, 0] if self.pooling == "cls" else masked_mean_pool(h, mask[:, 0])  # (B, D)
        return self.classifier(pooled)  # (B, num_classes)


class BagOfWords(nn.Module):
    """The order-blind baselines: the mean of the token embeddings, then a classifier.

    The mean runs over every non-pad token, ``[CLS]`` included (as :func:`masked_mean_pool`
    with ``tokens != pad_id``). It sees which words occur and how often, never in which
    order. ``d_hidden=0``: one linear layer on the mean (a linear function of the word
    counts, divided by the length); ``d_hidden > 0``: a hidden layer of that width with
    ReLU first, so it can compute non-linear functions of the counts (an XOR among them),
    still blind to the order. ``forward(tokens (B, L)) -> (B, num_classes)``.
    """

    def __init__(self, vocab_size: int, num_classes: int, d_model: int = 64, pad_id: int = 0, d_hidden: int = 0):
        super().__init__()
        if not isinstance(d_hidden, int) or d_hidden < 0:
            raise ValueError(f"d_hidden must be an int >= 0 (0: a linear classifier), got {d_hidden!r}")
        self.pad_id = pad_id
        self.embedding = nn.Embedding(vocab_size, d_model)
        hidden = [nn.Linear(d_model, d_hidden), nn.ReLU()] if d_hidden else []
        self.classifier = nn.Sequential(*hidden, nn.Linear(d_hidden or d_model, num_classes))

    def forward(self, tokens: Tensor) -> Tensor:
        check_rank("tokens", tokens, 2, "(B, L) of token ids")
        return self.classifier(masked_mean_pool(self.embedding(tokens), tokens != self.pad_id))  # (B, C)


# ---------------------------------------------------------------- BERT's layer
# Hugging Face's BertLayer is the course's post-norm EncoderLayer with GELU, under other
# names: our parameter <- theirs.
BERT_LAYER_NAMES = {
    "self_attn.w_q": "attention.self.query",
    "self_attn.w_k": "attention.self.key",
    "self_attn.w_v": "attention.self.value",
    "self_attn.w_o": "attention.output.dense",
    "norm1": "attention.output.LayerNorm",
    "feed_forward.linear1": "intermediate.dense",
    "feed_forward.linear2": "output.dense",
    "norm2": "output.LayerNorm",
}


def copy_bert_layer(layer: nn.Module, bert_layer: nn.Module) -> None:
    """Copy a ``transformers`` ``BertLayer``'s weights into the course's ``EncoderLayer``
    (``norm_first=False``, ``activation="gelu"``, same ``d_model``, heads and ``d_ff``)."""
    theirs = bert_layer.state_dict()
    ours = {
        f"{name}.{kind}": theirs[f"{bert_name}.{kind}"]
        for name, bert_name in BERT_LAYER_NAMES.items()
        for kind in ("weight", "bias")
    }
    layer.load_state_dict(ours)


def bert_attention_mask(mask: Tensor) -> Tensor:
    """The course's boolean mask ``(B, 1, L)`` (``True`` = may attend) as BERT's additive
    float mask ``(B, 1, 1, L)``: 0 where attending is allowed, a huge negative number where not."""
    blocked = torch.finfo(torch.float32).min
    return torch.zeros(mask.shape, dtype=torch.float32, device=mask.device).masked_fill(~mask, blocked).unsqueeze(1)  # (B, 1, 1, L)


# ---------------------------------------------------------------- training
CLASSIFIER_RECIPE: dict[str, dict[str, Any]] = {
    "model": dict(d_model=32, num_heads=4, num_layers=2, d_ff=64, dropout=0.0, max_len=16, norm_first=False,
                  activation="gelu", pooling="cls"),
    "fit": dict(steps=1500, batch_size=64, lr=3e-3, warmup=100, seed=0),
}


def classifier_accuracy(model: nn.Module, tokens: Tensor, labels: Tensor, batch_size: int = 1000) -> float:
    """Fraction of rows whose largest logit is the label (eval mode; the mode is restored)."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            right = sum(
                int((model(tokens[s:s + batch_size]).argmax(dim=-1) == labels[s:s + batch_size]).sum())
                for s in range(0, len(labels), batch_size)
            )
    finally:
        model.train(was_training)
    return right / len(labels)


def fit_classifier(
    model: nn.Module,
    train: tuple[Tensor, Tensor],
    valid: tuple[Tensor, Tensor] | None = None,
    steps: int = 1500,
    batch_size: int = 64,
    lr: float = 3e-3,
    warmup: int = 100,
    seed: int = 0,
    eval_every: int = 250,
) -> dict[str, list[float]]:
    """Train with Adam and cross-entropy on ``train = (tokens (N, L), labels (N,))``.

    The rate rises linearly for ``warmup`` steps, then decays linearly to 0 at ``steps``.
    Batches are drawn by reshuffling with a generator seeded by ``seed`` (the initial
    weights are the caller's: seed before building the model). Returns the history:
    ``train_loss`` (every step), ``eval_steps`` and ``val_accuracy`` (every ``eval_every``
    steps and at the end, when ``valid`` is given) and ``seconds`` (training time).
    """
    tokens, labels = train
    pad_id = getattr(model, "pad_id", 0)
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda k: min((k + 1) / warmup, max(0.0, (steps - k) / max(1, steps - warmup)))
    )
    history: dict[str, list[float]] = {"train_loss": [], "eval_steps": [], "val_accuracy": [], "seconds": []}
    order = torch.randperm(len(labels), generator=generator)
    position = 0
    seconds = 0.0
    model.train()
    for step in range(1, steps + 1):
        start = time.perf_counter()
        if position + batch_size > len(labels):
            order, position = torch.randperm(len(labels), generator=generator), 0
        rows = order[position:position + batch_size]
        position += batch_size
        batch = tokens[rows]  # (B, L)
        batch = batch[:, : int((batch != pad_id).sum(dim=1).max())]  # drop the all-padding columns (padding is at the end)
        loss = F.cross_entropy(model(batch), labels[rows])  # logits (B, C): cross_entropy does the softmax
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        seconds += time.perf_counter() - start
        history["train_loss"].append(loss.item())
        if valid is not None and (step % eval_every == 0 or step == steps):
            history["eval_steps"].append(step)
            history["val_accuracy"].append(classifier_accuracy(model, *valid))
            model.train()
    history["seconds"].append(seconds)
    return history


# ---------------------------------------------------------------- the shipped checkpoint
def load_pretrained_classifier(path: str | Path | None = None) -> tuple[TransformerClassifier, dict[str, Any]]:
    """``(model in eval mode, meta)`` from the checkpoint trained with :data:`CLASSIFIER_RECIPE`.

    The file ships with the package. Instructors rewrite it from a repository checkout with
    ``python benchmarks/classifier.py --write``; the error message names only what a student
    (Colab, or the package without the repository) can do.
    """
    path = CHECKPOINT if path is None else Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"no classifier checkpoint at {path}. It ships with the course package: reinstall the "
            "package to get it back, or set TRAIN = True in notebook 08 to train the classifier there instead"
        )
    state = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError(f"{path} is not a format-{FORMAT} review classifier checkpoint")
    model = TransformerClassifier(**state["config"])
    model.load_state_dict(state["state_dict"])
    return model.eval(), state["meta"]


def save_classifier(model: TransformerClassifier, config: dict[str, Any], meta: dict[str, Any],
                    path: str | Path | None = None) -> Path:
    """Write the checkpoint :func:`load_pretrained_classifier` reads (float32 weights, a plain dict)."""
    path = CHECKPOINT if path is None else Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"format": FORMAT, "config": config, "state_dict": model.state_dict(), "meta": meta}, path)
    return path


__all__ = [
    "gelu",
    "masked_mean_pool",
    "TransformerClassifier",
    "BagOfWords",
    "CLASSIFIER_RECIPE",
    "classifier_accuracy",
    "fit_classifier",
    "load_pretrained_classifier",
    "save_classifier",
    "copy_bert_layer",
    "bert_attention_mask",
]

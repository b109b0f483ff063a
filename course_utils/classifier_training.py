"""Training notebook 08's review classifier, its baselines, and its checkpoint.

* :class:`BagOfWords`: the order-blind baselines the notebook trains beside the Transformer
  (linear, or with a hidden layer).
* :data:`CLASSIFIER_RECIPE`, :func:`fit_classifier` (Adam, warm-up then linear decay,
  cross-entropy), :func:`classifier_accuracy`.
* :func:`load_pretrained_classifier` / :func:`save_classifier`: the shipped checkpoint
  ``course_utils/pretrained/review_classifier.pt`` (``benchmarks/classifier.py --write``
  writes it).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._validate import check_rank
from .classifier import TransformerClassifier, masked_mean_pool
from .modes import eval_mode

CHECKPOINT = Path(__file__).resolve().parent / "pretrained" / "review_classifier.pt"
FORMAT = 1


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


# ---------------------------------------------------------------- training
CLASSIFIER_RECIPE: dict[str, dict[str, Any]] = {
    "model": dict(d_model=32, num_heads=4, num_layers=2, d_ff=64, dropout=0.0, max_len=16, norm_first=False,
                  activation="gelu", pooling="cls"),
    "fit": dict(steps=1500, batch_size=64, lr=3e-3, warmup=100, seed=0),
}


def classifier_accuracy(model: nn.Module, tokens: Tensor, labels: Tensor, batch_size: int = 1000) -> float:
    """Fraction of rows whose largest logit is the label (eval mode; the mode is restored)."""
    with eval_mode(model), torch.no_grad():
        right = sum(
            int((model(tokens[s:s + batch_size]).argmax(dim=-1) == labels[s:s + batch_size]).sum())
            for s in range(0, len(labels), batch_size)
        )
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
        # drop the all-padding columns (padding is at the end)
        batch = batch[:, : int((batch != pad_id).sum(dim=1).max())]
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
    "BagOfWords",
    "CLASSIFIER_RECIPE",
    "classifier_accuracy",
    "fit_classifier",
    "load_pretrained_classifier",
    "save_classifier",
]

"""Toy movie reviews: the sentiment task of notebook 08 (an encoder-only classifier).

A review is one or two short clauses about a film, generated from a tiny grammar::

    "the plot was not good"                          -> negative
    "the music was dull but the cast was brilliant"  -> positive
    "the ending is not very boring and the film is fun"  -> positive

A clause is ``the NOUN VERB [not] [very|really] ADJECTIVE``; its polarity is the
adjective's, flipped by ``not``. A review is

* one clause: the label is that clause's polarity;
* ``clause but clause``, the two of opposite polarity: the label is the second's (what
  comes after "but" is what the writer means);
* ``clause and clause``, both of the same polarity: the label is that polarity.

So the label is always the polarity of the **last** clause. This needs the order of the
words: "the plot was good but the cast was not good" and "the plot was not good but the
cast was good" hold the same words with opposite labels, and even for one clause the
label is the adjective's polarity XOR the presence of "not", which no linear function of
the word counts can compute. A bag-of-words model (the mean of the word embeddings, then
a linear layer) therefore falls well short, while a small Transformer encoder learns the
rule (notebook 08 shows both).

Generated data (deterministic)
------------------------------
:func:`generate_reviews` draws with ``random.Random(seed)`` and only ``rng.random()`` (the
one method whose sequence Python promises to keep), so the same seed gives the same reviews
on every Python, offline. Kinds are drawn with probabilities 1/3 each, nouns, verbs and
adjectives uniformly, ``not`` with probability 1/2, an intensifier with probability 1/3,
polarities with probability 1/2: the labels are balanced. The splits (sizes in
:data:`SPLIT_SIZES`) are disjoint as texts: training is drawn first, then validation and
test from reviews not drawn before (so most one-clause reviews, of which there are only
864, land in training).

Ids
---
``<pad>`` = 0, ``[CLS]`` = 1, then the words of :data:`WORDS`. :func:`encode` puts
``[CLS]`` first (the position a ``[CLS]``-pooling classifier reads); :func:`collate_reviews`
pads a batch at the end with ``<pad>``. Labels: 0 = negative, 1 = positive.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from functools import lru_cache

import torch
from torch import Tensor

NOUNS = ("film", "plot", "acting", "music", "ending", "cast")
VERBS = ("was", "is")
POSITIVE = ("good", "great", "fun", "brilliant", "moving", "clever")
NEGATIVE = ("bad", "boring", "dull", "awful", "weak", "silly")
INTENSIFIERS = ("very", "really")
CONNECTIVES = ("but", "and")
WORDS = ("the", *NOUNS, *VERBS, "not", *INTENSIFIERS, *POSITIVE, *NEGATIVE, *CONNECTIVES)

PAD_ID = 0
CLS_ID = 1
ITOS = ("<pad>", "[CLS]", *WORDS)
STOI = {token: i for i, token in enumerate(ITOS)}
LABELS = ("negative", "positive")
KINDS = ("one clause", "but", "and")
MAX_LEN = 1 + 2 * 6 + 1  # [CLS], two clauses of at most 6 words, the connective

SEED = 8
SPLIT_SIZES = {"train": 20_000, "valid": 1_000, "test": 2_000}


def _pick(rng: random.Random, options: Sequence[str]) -> str:
    return options[min(int(rng.random() * len(options)), len(options) - 1)]


def _clause(rng: random.Random, polarity: int) -> str:
    """A clause of the given polarity (1 positive, 0 negative)."""
    negated = rng.random() < 0.5
    adjectives = POSITIVE if polarity != negated else NEGATIVE  # "not" flips the adjective's polarity
    words = ["the", _pick(rng, NOUNS), _pick(rng, VERBS)]
    if negated:
        words.append("not")
    if rng.random() < 1 / 3:
        words.append(_pick(rng, INTENSIFIERS))
    words.append(_pick(rng, adjectives))
    return " ".join(words)


def draw_review(rng: random.Random) -> tuple[str, int]:
    """One ``(text, label)``; the label is the polarity of the last clause."""
    kind = _pick(rng, KINDS)
    label = int(rng.random() < 0.5)
    if kind == "one clause":
        return _clause(rng, label), label
    first = 1 - label if kind == "but" else label
    return f"{_clause(rng, first)} {kind} {_clause(rng, label)}", label


def review_kind(text: str) -> str:
    """``"one clause"``, ``"but"`` or ``"and"``."""
    words = text.split()
    return next((k for k in CONNECTIVES if k in words), "one clause")


def clause_polarity(clause: str) -> int:
    """1 (positive) or 0 (negative): the adjective's polarity, flipped by ``not``."""
    words = clause.split()
    return int((words[-1] in POSITIVE) != ("not" in words))


def label_of(text: str) -> int:
    """The rule that made every label: the polarity of the last clause."""
    words = text.split()
    cut = max((i for i, w in enumerate(words) if w in CONNECTIVES), default=-1)
    return clause_polarity(" ".join(words[cut + 1:]))


@lru_cache(maxsize=4)
def generate_reviews(seed: int = SEED) -> dict[str, tuple[tuple[str, int], ...]]:
    """``{split: ((text, label), ...)}`` for the splits of :data:`SPLIT_SIZES`, disjoint as texts."""
    rng = random.Random(seed)
    seen: set[str] = set()
    splits = {}
    for name, size in SPLIT_SIZES.items():
        pairs = []
        while len(pairs) < size:
            text, label = draw_review(rng)
            if text not in seen:
                seen.add(text)
                pairs.append((text, label))
        splits[name] = tuple(pairs)
    return splits


def load_reviews(name: str, seed: int = SEED) -> list[tuple[str, int]]:
    """One split: ``"train"``, ``"valid"`` or ``"test"``, as ``(text, label)`` pairs."""
    if name not in SPLIT_SIZES:
        raise ValueError(f"name must be one of {sorted(SPLIT_SIZES)}, got {name!r}")
    return list(generate_reviews(seed)[name])


def encode(text: str) -> list[int]:
    """``[CLS]`` then the ids of the words; an unknown word raises ``ValueError``."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    ids = [CLS_ID]
    for position, word in enumerate(text.split()):
        if word not in STOI or STOI[word] in (PAD_ID, CLS_ID):
            raise ValueError(f"word {word!r} at position {position} of {text!r} is not in the vocabulary {WORDS}")
        ids.append(STOI[word])
    return ids


def decode(ids: Sequence[int] | Tensor) -> list[str]:
    """The tokens of ``ids`` (``[CLS]`` and ``<pad>`` included, one string each)."""
    return [ITOS[int(i)] for i in ids]


def collate_reviews(pairs: Sequence[tuple[str, int]]) -> tuple[Tensor, Tensor]:
    """``(tokens (B, L), labels (B,))``: ``[CLS]`` + words, padded at the end with ``PAD_ID``."""
    if len(pairs) == 0:
        raise ValueError("cannot collate an empty list of reviews")
    encoded = [encode(text) for text, _ in pairs]
    L = max(len(ids) for ids in encoded)
    tokens = torch.full((len(pairs), L), PAD_ID, dtype=torch.long)  # (B, L)
    for row, ids in enumerate(encoded):
        tokens[row, : len(ids)] = torch.tensor(ids)
    labels = torch.tensor([label for _, label in pairs], dtype=torch.long)  # (B,)
    return tokens, labels


__all__ = [
    "PAD_ID", "CLS_ID", "ITOS", "STOI", "LABELS", "KINDS", "WORDS", "MAX_LEN",
    "generate_reviews", "load_reviews", "label_of", "review_kind", "clause_polarity",
    "encode", "decode", "collate_reviews",
]

"""Numbers to words: the toy translation task of notebook 07 (training the Transformer).

The source is a number written with digits, read **character by character**; the target is
the same number in English **words**::

    "1,234.50"  ->  "one thousand two hundred thirty four point five zero"
    "-0.5"      ->  "minus zero point five"

Numbers (what :func:`number_to_words` accepts)
----------------------------------------------
* an optional leading ``-``;
* an integer part of 1 to 9 digits, ``|integer part| < 10^9``, without leading zeros
  (``0`` itself is fine), written either plainly (``1234567``) or with correctly grouped
  thousands separators (``1,234,567``: a first group of 1-3 digits, then groups of exactly
  3);
* an optional decimal part: ``.`` then 1 to 3 digits, read digit by digit after "point"
  (``.50`` -> "point five zero"; trailing zeros are kept and read).

The integer part is read in American English without "and" and without hyphens:
"one hundred one", "twenty one", "one million two thousand", "zero". Anything else
raises a ``ValueError`` that says what is wrong and where.

Generated data (deterministic)
------------------------------
:func:`generate_splits` draws numbers with ``random.Random(seed)``, using only
``rng.random()`` (the one method whose sequence Python promises to keep across versions),
so the same seed gives the same bytes on every Python. A number is drawn as follows:
the integer part's number of digits uniformly from 1 to 9 (so ``7`` and ``123,456,789``
are equally likely kinds), then the integer uniformly among those with that many digits; a decimal part with
probability 1/2, of 1, 2 or 3 digits (uniformly); a minus sign with probability 1/5
(never on a number that is zero); thousands separators with probability 1/2 when the
integer part has 4 digits or more.

Splits (sizes in :data:`SPLIT_SIZES`) are disjoint **as numbers**: two sources that
differ only in their separators (``1234`` and ``1,234``, same words) count as the same
number, so no number of the validation, test or unseen split appears in training in any
spelling. Training is drawn first (deduplicated), then validation and test from numbers
not drawn before; so all the tiny numbers (there are only 19 one-digit integers) land in
training, and the test set leans slightly towards longer numbers than the raw draw.

The ``unseen`` split: generalisation to a held-out range
--------------------------------------------------------
Every number whose integer part lies in ``500,000 .. 599,999`` (either sign, any
decimals, either spelling: :func:`in_held_out_range`) is removed from train, valid and
test, and the ``unseen`` split consists only of such numbers. So the model never sees a
6-digit number starting with 5. It has seen every piece it needs: "five hundred" at the
start of 3- and 9-digit numbers, and the exact pattern "five hundred ... thousand" inside
7- to 9-digit numbers (``1,523,000`` is in range for training). What is new is *where* the
5 sits: the first character of a 6-digit source. This is learnable, yet no training pair
can have been memorised for it. (Holding out whole magnitudes instead, say every number
above a million, would be dishonest: the model would have to produce the word "million"
without ever having seen it.) Every word of every split is in the target vocabulary, and
every vocabulary word occurs in the training targets.

Lengths (for the model's ``max_len`` and the decoding budget)
-------------------------------------------------------------
Source: at most :data:`MAX_SOURCE_CHARS` = 16 characters (``-999,999,999.999``); the
source ids carry **no** ``<bos>``/``<eos>`` (the encoder needs neither, and attention maps
then have one column per character). Target: at most :data:`MAX_TARGET_WORDS` = 19 words
(``-777,777,777.777``), so at most 21 ids with ``<bos>`` and ``<eos>``, and 20 positions
in the shifted decoder input ``tgt_in``; greedy decoding needs ``max_len=20`` new tokens
(19 words + ``<eos>``).

Files
-----
The splits are shipped in the repository as ``data/numbers_{train,valid,test,unseen}.tsv``
(``source<TAB>target``, UTF-8, ``\\n`` line ends), for reading by eye.
:func:`load_split` reads them when the repository's ``data/`` folder is there, and
otherwise (a pip-installed package, as in Colab) regenerates them in memory (about a
second, once per process); ``tests/test_data.py`` checks that both give the same bytes.
To rewrite the files::

    python -m course_utils.data --write data/
    python -m course_utils.data --check data/   # exit status 1 if they differ
"""

from __future__ import annotations

import argparse
import functools
import random
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import Dataset

from ._validate import is_int
from .model import make_src_mask, make_tgt_mask

# ----------------------------------------------------------------------------- constants

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIALS = (PAD, BOS, EOS, UNK)  # ids 0, 1, 2, 3 in every vocabulary
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3

SOURCE_CHARS = tuple("0123456789") + (",", ".", "-")

_ONES = (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
    "nineteen",
)  # fmt: skip
_TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
_SCALES = ("", "thousand", "million")  # one per group of 3 digits, from the right

# Every word number_to_words can produce, in a fixed order (so the ids never depend on data).
TARGET_WORDS = ("minus", "point", *_ONES, *_TENS[2:], "hundred", "thousand", "million")

MAX_INT_DIGITS = 9  # |integer part| < 10**9
MAX_DECIMALS = 3
MAX_SOURCE_CHARS = 16  # "-999,999,999.999"
# "-777,777,777.777": minus, 3 x "seven hundred seventy seven", million, thousand, point, 3 digits
MAX_TARGET_WORDS = 19

HELD_OUT_RANGE = (500_000, 599_999)  # |integer part| in this range -> only in the unseen split

SEED = 0
SPLITS = ("train", "valid", "test", "unseen")
SPLIT_SIZES = {"train": 30_000, "valid": 1_000, "test": 3_000, "unseen": 1_000}

# Sampling probabilities (module docstring).
P_DECIMAL = 0.5
P_NEGATIVE = 0.2
P_SEPARATORS = 0.5

DATA_DIR = Path(__file__).resolve().parent.parent / "data"  # the repository's data/ folder


# ----------------------------------------------------------------------- number_to_words


def _parse(text: str) -> tuple[bool, str, str]:
    """Validate ``text``; return ``(negative, integer digits without separators, decimals)``."""
    if not isinstance(text, str):
        raise TypeError(f"number must be a str such as '1,234.5', got {type(text).__name__}")
    if text == "":
        raise ValueError("cannot read an empty string as a number")
    allowed = set(SOURCE_CHARS)
    for position, char in enumerate(text):
        if char not in allowed:
            raise ValueError(
                f"character {char!r} at position {position} of {text!r} is not allowed: "
                f"a number may only use the digits 0-9, ',', '.' and a leading '-'"
            )
    for position, char in enumerate(text):
        if char == "-" and position != 0:
            raise ValueError(
                f"'-' at position {position} of {text!r}: a minus sign may only appear once, "
                "as the first character"
            )
    negative = text.startswith("-")
    body = text[1:] if negative else text
    if body.count(".") > 1:
        second = text.index(".", text.index(".") + 1)
        raise ValueError(f"second '.' at position {second} of {text!r}: a number has at most one")
    integer, _, decimals = body.partition(".")
    if integer == "":
        raise ValueError(
            f"{text!r} has no integer part: write at least one digit before the '.' (e.g. '0.5')"
        )
    if "." in body and decimals == "":
        raise ValueError(f"{text!r} ends with '.': write the decimals after it or drop the '.'")
    if "," in decimals:
        raise ValueError(f"{text!r} has a ',' after the '.': separators belong to the integer part")
    if len(decimals) > MAX_DECIMALS:
        raise ValueError(
            f"{text!r} has {len(decimals)} decimal digits: at most {MAX_DECIMALS} are supported"
        )
    if "," in integer:
        groups = integer.split(",")
        if not (1 <= len(groups[0]) <= 3) or any(len(g) != 3 for g in groups[1:]):
            raise ValueError(
                f"malformed thousands separators in {text!r}: groups are "
                f"{[g for g in groups]}, expected a first group of 1-3 digits then groups of "
                "exactly 3 (e.g. '1,234,567')"
            )
        integer = "".join(groups)
    if len(integer) > 1 and integer[0] == "0":
        raise ValueError(f"{text!r} has a leading zero in its integer part: write it without")
    if len(integer) > MAX_INT_DIGITS:
        raise ValueError(
            f"integer part of {text!r} is out of the supported range: |integer part| must be "
            f"< 10^{MAX_INT_DIGITS} (at most {MAX_INT_DIGITS} digits, up to 999,999,999)"
        )
    return negative, integer, decimals


def _below_thousand(n: int) -> list[str]:
    """Words for ``1 <= n <= 999``: "one hundred one", "twenty one", "seventeen"."""
    words = []
    hundreds, rest = divmod(n, 100)
    if hundreds:
        words += [_ONES[hundreds], "hundred"]
    if rest >= 20:
        tens, ones = divmod(rest, 10)
        words.append(_TENS[tens])
        if ones:
            words.append(_ONES[ones])
    elif rest:
        words.append(_ONES[rest])
    return words


def integer_to_words(n: int) -> str:
    """Words for an integer ``0 <= n < 10^9`` (American English, no "and", no hyphens)."""
    if not is_int(n) or not 0 <= n < 10**MAX_INT_DIGITS:
        raise ValueError(f"n must be an int with 0 <= n < 10^{MAX_INT_DIGITS}, got {n!r}")
    if n == 0:
        return "zero"
    words: list[str] = []
    for scale in reversed(range(len(_SCALES))):  # millions, thousands, units
        group = n // 1000**scale % 1000
        if group:  # zero groups are silent: 1,000,005 -> "one million five"
            words += _below_thousand(group)
            if _SCALES[scale]:
                words.append(_SCALES[scale])
    return " ".join(words)


def number_to_words(text: str) -> str:
    """Read a number written with digits in English words.

    ``"1,234.50" -> "one thousand two hundred thirty four point five zero"``,
    ``"-0.5" -> "minus zero point five"``, ``"1000002" -> "one million two"``.

    Accepts an optional leading ``-``, an integer part with ``|integer part| < 10^9``
    (no leading zeros), with or without correctly grouped thousands separators, and an
    optional ``.`` followed by 1-3 digits (read digit by digit). Raises ``ValueError``
    with the reason (the offending character and its position, the malformed groups,
    the value and the supported range, ...) otherwise; ``TypeError`` for a non-str.
    """
    negative, integer, decimals = _parse(text)
    words = ["minus"] if negative else []
    words.append(integer_to_words(int(integer)))
    if decimals:
        words.append("point")
        words += [_ONES[int(d)] for d in decimals]
    return " ".join(words)


def in_held_out_range(source: str) -> bool:
    """True when the integer part of ``source`` lies in :data:`HELD_OUT_RANGE` (either sign)."""
    _, integer, _ = _parse(source)
    return HELD_OUT_RANGE[0] <= int(integer) <= HELD_OUT_RANGE[1]


def number_key(source: str) -> str:
    """The number itself, whatever its spelling: ``"-1,234.50" -> "-1234.50"``.

    Splits are disjoint on this key, so ``1234`` and ``1,234`` never sit in two splits.
    """
    return source.replace(",", "")


# ------------------------------------------------------------------------ generation


def _below(rng: random.Random, n: int) -> int:
    """Uniform int in ``[0, n)`` from ``rng.random()`` alone (stable across Python versions).

    ``min`` guards against the product rounding up to ``n`` (``random()`` is below 1).
    """
    return min(int(rng.random() * n), n - 1)


def _group_thousands(integer: str) -> str:
    head = len(integer) % 3 or 3
    groups = [integer[:head]] + [integer[i : i + 3] for i in range(head, len(integer), 3)]
    return ",".join(groups)


def _draw_integer(rng: random.Random) -> str:
    """1-9 digits, the count uniform; no leading zero (a 1-digit number may be 0)."""
    num_digits = 1 + _below(rng, MAX_INT_DIGITS)
    if num_digits == 1:
        return str(_below(rng, 10))
    low = 10 ** (num_digits - 1)  # uniform over the num_digits-digit integers
    return str(low + _below(rng, 9 * low))


def _draw_held_out_integer(rng: random.Random) -> str:
    low, high = HELD_OUT_RANGE
    return str(low + _below(rng, high - low + 1))


def _dress(rng: random.Random, integer: str) -> str:
    """Add the decimals, the sign and the separators to an integer part, at random."""
    decimals = ""
    if rng.random() < P_DECIMAL:
        num_decimals = 1 + _below(rng, MAX_DECIMALS)
        decimals = str(_below(rng, 10**num_decimals)).zfill(num_decimals)  # each digit uniform
    is_zero = int(integer) == 0 and (decimals == "" or int(decimals) == 0)
    negative = rng.random() < P_NEGATIVE and not is_zero  # no "-0" or "-0.00"
    if len(integer) >= 4 and rng.random() < P_SEPARATORS:
        integer = _group_thousands(integer)
    return ("-" if negative else "") + integer + ("." + decimals if decimals else "")


def _draw_unique(
    rng: random.Random, count: int, draw_integer, seen: set[str], held_out: bool
) -> list[tuple[str, str]]:
    """``count`` new pairs whose number key is not in ``seen`` (which is updated)."""
    low, high = HELD_OUT_RANGE
    pairs = []
    while len(pairs) < count:
        integer = draw_integer(rng)
        if (low <= int(integer) <= high) != held_out:
            continue  # held-out numbers only in the unseen split, and only they
        source = _dress(rng, integer)
        key = number_key(source)
        if key in seen:
            continue
        seen.add(key)
        pairs.append((source, number_to_words(source)))
    return pairs


def generate_splits(
    seed: int = SEED, sizes: dict[str, int] | None = None
) -> dict[str, list[tuple[str, str]]]:
    """All four splits as ``{name: [(source, target), ...]}``, drawn from ``random.Random(seed)``.

    Training is drawn first, then validation, test and unseen (module docstring);
    the splits are disjoint as numbers. Same seed and sizes, same result on every run.
    """
    sizes = dict(SPLIT_SIZES if sizes is None else sizes)
    if set(sizes) != set(SPLITS):
        raise ValueError(f"sizes must have exactly the keys {SPLITS}, got {sorted(sizes)}")
    rng = random.Random(seed)
    seen: set[str] = set()
    splits = {}
    for name in SPLITS:
        held_out = name == "unseen"
        draw = _draw_held_out_integer if held_out else _draw_integer
        splits[name] = _draw_unique(rng, sizes[name], draw, seen, held_out)
    return splits


@functools.lru_cache(maxsize=4)
def _generated(seed: int) -> dict[str, tuple[tuple[str, str], ...]]:
    return {name: tuple(pairs) for name, pairs in generate_splits(seed).items()}


# ------------------------------------------------------------------------------ files


def split_path(name: str, data_dir: str | Path = DATA_DIR) -> Path:
    _check_split_name(name)
    return Path(data_dir) / f"numbers_{name}.tsv"


def _check_split_name(name: str) -> None:
    if name not in SPLITS:
        raise ValueError(f"unknown split {name!r}; the splits are {', '.join(SPLITS)}")


def format_tsv(pairs: Iterable[tuple[str, str]]) -> str:
    """``source<TAB>target`` lines, each ending with ``\\n``."""
    return "".join(f"{source}\t{target}\n" for source, target in pairs)


def read_tsv(path: str | Path) -> list[tuple[str, str]]:
    """Read a ``source<TAB>target`` file; a malformed line raises ``ValueError`` naming it."""
    pairs = []
    with open(path, encoding="utf-8", newline="") as f:
        for line_number, line in enumerate(f, start=1):
            fields = line.rstrip("\n").split("\t")
            if len(fields) != 2 or not all(fields):
                raise ValueError(
                    f"{path}:{line_number}: expected 'source<TAB>target', got {line!r}"
                )
            pairs.append((fields[0], fields[1]))
    return pairs


def write_splits(data_dir: str | Path, seed: int = SEED) -> list[Path]:
    """Write the four generated splits to ``data_dir`` (created if needed); return the paths."""
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, pairs in _generated(seed).items():
        path = split_path(name, data_dir)
        path.write_bytes(format_tsv(pairs).encode("utf-8"))
        paths.append(path)
    return paths


def load_split(name: str, data_dir: str | Path | None = None) -> list[tuple[str, str]]:
    """The pairs ``(source, target)`` of split ``name`` ("train", "valid", "test", "unseen").

    ``data_dir=None``: read ``data/numbers_<name>.tsv`` from the repository when it is
    there, else (a pip-installed package, as in Colab) regenerate the split in memory;
    both give the same pairs. With ``data_dir`` given, read from there (the file must exist).
    """
    _check_split_name(name)
    if data_dir is not None:
        return read_tsv(split_path(name, data_dir))
    path = split_path(name)
    if path.is_file():
        return read_tsv(path)
    return list(_generated(SEED)[name])


# ------------------------------------------------------------------------ vocabularies


class Vocab:
    """Token <-> id mapping: ``<pad>`` = 0, ``<bos>`` = 1, ``<eos>`` = 2, ``<unk>`` = 3, then
    ``tokens`` in the order given.

    ``split="chars"`` tokenises a string into characters (the source side), ``"words"``
    into whitespace-separated words (the target side); :meth:`decode` joins with ``""``
    or ``" "`` accordingly.
    """

    def __init__(self, tokens: Sequence[str], split: str = "words", name: str = "vocabulary"):
        if split not in ("chars", "words"):
            raise ValueError(f"split must be 'chars' or 'words', got {split!r}")
        tokens = list(tokens)
        duplicates = {t for t in tokens if tokens.count(t) > 1} | (set(tokens) & set(SPECIALS))
        if duplicates:
            raise ValueError(f"tokens must be unique and not special, got {sorted(duplicates)}")
        self.split = split
        self.name = name
        self.itos: list[str] = [*SPECIALS, *tokens]
        self.stoi: dict[str, int] = {t: i for i, t in enumerate(self.itos)}
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = PAD_ID, BOS_ID, EOS_ID, UNK_ID

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, token: str) -> bool:
        return token in self.stoi

    def __repr__(self) -> str:
        return f"Vocab({self.name}, {len(self)} tokens, split={self.split!r})"

    @property
    def special_ids(self) -> frozenset[int]:
        return frozenset((self.pad_id, self.bos_id, self.eos_id, self.unk_id))

    def tokenize(self, text: str) -> list[str]:
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        return list(text) if self.split == "chars" else text.split()

    def encode(self, text: str, add_bos_eos: bool = False, allow_unk: bool = False) -> list[int]:
        """Token ids of ``text``, with ``<bos>`` first and ``<eos>`` last if ``add_bos_eos``.

        A token outside the vocabulary raises ``ValueError`` naming it and its position,
        unless ``allow_unk`` (then it becomes ``<unk>``).
        """
        ids = []
        for position, token in enumerate(self.tokenize(text)):
            index = self.stoi.get(token)
            if index is None or index in self.special_ids:  # "<pad>" in text is not a pad
                if not allow_unk:
                    unit = "character" if self.split == "chars" else "word"
                    raise ValueError(
                        f"{unit} {token!r} at position {position} of {text!r} is not in the "
                        f"{self.name}; it has {', '.join(map(repr, self.itos[len(SPECIALS):]))}"
                    )
                index = self.unk_id
            ids.append(index)
        return [self.bos_id, *ids, self.eos_id] if add_bos_eos else ids

    def decode(self, ids: Sequence[int] | Tensor, strip_special: bool = True) -> str:
        """Text of ``ids`` (a list or a 1-D tensor).

        ``strip_special=True`` reads a model's output: it drops ``<bos>`` and ``<pad>`` and
        stops at the first ``<eos>`` (``<unk>`` is kept, visibly). ``False`` shows every id.
        """
        if isinstance(ids, Tensor):
            if ids.dim() != 1:
                raise ValueError(f"ids must be a 1-D tensor (L,), got shape {tuple(ids.shape)}")
            ids = ids.tolist()
        tokens = []
        for index in ids:
            index = int(index)
            if not 0 <= index < len(self):
                raise ValueError(
                    f"id {index} is out of range for the {self.name} (size {len(self)})"
                )
            if strip_special:
                if index == self.eos_id:
                    break
                if index in (self.pad_id, self.bos_id):
                    continue
            tokens.append(self.itos[index])
        return ("" if self.split == "chars" else " ").join(tokens)


def source_vocab() -> Vocab:
    """Characters: 17 ids (4 specials, the digits, ``,``, ``.``, ``-``)."""
    return Vocab(SOURCE_CHARS, split="chars", name="source vocabulary")


def target_vocab() -> Vocab:
    """Words: 37 ids (4 specials, every word :func:`number_to_words` can produce)."""
    return Vocab(TARGET_WORDS, split="words", name="target vocabulary")


# ------------------------------------------------------------------------ torch side


class NumberWordsDataset(Dataset):
    """``(src_ids, tgt_ids)`` LongTensor pairs, encoded once up front.

    ``src_ids (L_src,)``: the characters, no ``<bos>``/``<eos>``. ``tgt_ids (L_tgt,)``:
    ``<bos>``, the words, ``<eos>``. ``pairs`` keeps the texts.
    """

    def __init__(self, pairs: Sequence[tuple[str, str]], src_vocab: Vocab, tgt_vocab: Vocab):
        self.pairs = list(pairs)
        self.src_vocab, self.tgt_vocab = src_vocab, tgt_vocab
        self.items = [
            (
                torch.tensor(src_vocab.encode(source), dtype=torch.long),
                torch.tensor(tgt_vocab.encode(target, add_bos_eos=True), dtype=torch.long),
            )
            for source, target in self.pairs
        ]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        return self.items[index]


@dataclass
class Batch:
    """A padded batch for teacher forcing (all masks ``torch.bool``, ``True`` = may attend).

    * ``src (B, L_src)``, ``src_mask (B, 1, L_src)``: ``make_src_mask(src, pad_id)``.
    * ``tgt (B, L_tgt)``: unshifted, ``<bos> w1 ... wn <eos> <pad>...``.
    * ``tgt_in = tgt[:, :-1]`` ``(B, L_tgt - 1)``: what the decoder reads;
      ``tgt_out = tgt[:, 1:]`` ``(B, L_tgt - 1)``: what it must predict at each position
      (position ``t`` of ``tgt_in`` sees tokens ``0..t`` and predicts ``tgt_out[:, t]``).
    * ``tgt_mask (B, L_tgt - 1, L_tgt - 1)``: ``make_tgt_mask(tgt_in, pad_id)``, causal and
      not padding.
    * ``num_tokens``: the number of non-pad targets in ``tgt_out`` (to average a loss over).
    """

    src: Tensor
    tgt: Tensor
    tgt_in: Tensor
    tgt_out: Tensor
    src_mask: Tensor
    tgt_mask: Tensor
    num_tokens: int

    def to(self, device: torch.device | str) -> Batch:
        tensors = {k: v.to(device) for k, v in vars(self).items() if isinstance(v, Tensor)}
        return Batch(**tensors, num_tokens=self.num_tokens)


def collate(batch: Sequence[tuple[Tensor, Tensor]], pad_id: int = PAD_ID) -> Batch:
    """Pad ``(src_ids, tgt_ids)`` pairs into a :class:`Batch` (a ``DataLoader``'s ``collate_fn``).

    Every ``tgt_ids`` must hold at least 2 ids (``<bos>`` and ``<eos>``).
    """
    if len(batch) == 0:
        raise ValueError("cannot collate an empty batch")
    srcs, tgts = zip(*batch)
    if min(len(t) for t in tgts) < 2:
        raise ValueError("every target needs at least <bos> and <eos> (2 ids) to be shifted")
    src = pad_sequence(list(srcs), batch_first=True, padding_value=pad_id)  # (B, L_src)
    tgt = pad_sequence(list(tgts), batch_first=True, padding_value=pad_id)  # (B, L_tgt)
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]  # (B, L_tgt - 1) each
    return Batch(
        src=src,
        tgt=tgt,
        tgt_in=tgt_in,
        tgt_out=tgt_out,
        src_mask=make_src_mask(src, pad_id),  # (B, 1, L_src)
        tgt_mask=make_tgt_mask(tgt_in, pad_id),  # (B, L_tgt - 1, L_tgt - 1)
        num_tokens=int((tgt_out != pad_id).sum()),
    )


# ------------------------------------------------------------------------------ script


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m course_utils.data",
        description="Write or check the generated numbers-to-words splits (notebook 07).",
    )
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", metavar="DIR", help="write numbers_<split>.tsv into DIR")
    group.add_argument("--check", metavar="DIR", help="exit 1 unless DIR holds the same bytes")
    args = parser.parse_args(argv)
    if args.write:
        for path in write_splits(args.write):
            print(f"wrote {path} ({path.stat().st_size:,} bytes)")
        return 0
    stale = []
    for name, pairs in _generated(SEED).items():
        path = split_path(name, args.check)
        if not path.is_file() or path.read_bytes() != format_tsv(pairs).encode("utf-8"):
            stale.append(str(path))
    for path in stale:
        print(f"differs from the generator: {path}")
    if not stale:
        print(f"{args.check}: all {len(SPLITS)} splits match the generator")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = [
    "BOS_ID",
    "EOS_ID",
    "HELD_OUT_RANGE",
    "MAX_SOURCE_CHARS",
    "MAX_TARGET_WORDS",
    "PAD_ID",
    "SOURCE_CHARS",
    "SPLITS",
    "SPLIT_SIZES",
    "TARGET_WORDS",
    "UNK_ID",
    "Batch",
    "NumberWordsDataset",
    "Vocab",
    "collate",
    "format_tsv",
    "generate_splits",
    "in_held_out_range",
    "integer_to_words",
    "load_split",
    "number_key",
    "number_to_words",
    "read_tsv",
    "source_vocab",
    "split_path",
    "target_vocab",
    "write_splits",
]

"""Notebook 11: byte-level BPE, trained on the corpus, then GPT-2's own tokenizer.

The reference for the notebook's tokenization exercises, in plain Python (no torch):

* **Bytes, not characters.** Text is encoded as UTF-8 and every one of the 256 byte values is
  a token of its own (ids 0-255 of a vocabulary that :func:`train_bpe` trains), so any string
  can be encoded: there is no unknown token.
* **Pre-tokenization** (:func:`pretokenize`): GPT-2's regular expression :data:`GPT2_PATTERN`
  cuts the text into words, numbers, punctuation runs and whitespace, each word keeping the
  space before it (``" world"``). BPE merges only inside one such piece, never across two,
  so ``"dog."`` and ``"dog!"`` share the token ``"dog"``. Special tokens (``"<|endoftext|>"``)
  are cut out first (:func:`split_special_tokens`): they are never split and never trained on.
* **Training** (:func:`train_bpe`): start from the 256 byte tokens; count every adjacent pair
  inside every piece (:func:`count_pairs`), weighted by how often the piece occurs; make the
  most frequent pair a new token; replace it everywhere (:func:`merge_pair`); repeat until the
  vocabulary has ``vocab_size`` tokens, special tokens included. **Tie-break (the course
  contract):** among the most frequent pairs, the pair of byte strings that is greatest in
  Python's order ``(vocab[a], vocab[b])`` wins (CS336's convention), so two correct trainers
  learn the same merges. The counts are updated incrementally: after a merge only the pieces
  that contained the pair are recounted (their old pairs subtracted, their new ones added),
  not every piece of the text; 1,000 merges of tiny Shakespeare take about 4 s on one thread
  (``benchmarks/bpe_speed.py``).
* **Encoding** (:class:`BPETokenizer`): each piece starts as its bytes; the adjacent pair with
  the lowest *rank* (the earliest learned merge) is merged everywhere in the piece, then the
  next, until no learned pair is left: merges apply in the order they were learned, not in
  order of frequency in the text being encoded. **Decoding** joins the tokens' bytes and
  decodes them once, with ``errors="replace"``: a token may hold half of a multi-byte
  character, so decoding token by token would break characters that span two tokens, and
  an id sequence that is not valid UTF-8 gives ``"\\ufffd"`` instead of an exception.
  The notebook's two exercises are these as functions, :func:`bpe_encode` and :func:`bpe_decode`.
* **GPT-2's files** (:func:`load_gpt2_tokenizer`): ``gpt2_vocab.json`` and ``gpt2_merges.txt``
  (provenance in ``data/README.md``; the package ships them gzipped in ``texts/`` for Colab)
  write every byte string with :func:`bytes_to_unicode`'s table; once converted back to bytes
  they are a vocabulary and a merge list like the ones :func:`train_bpe` makes, and
  :class:`BPETokenizer` gives exactly the ids of Hugging Face's ``GPT2TokenizerFast``
  (``tests/test_tokenizer.py``).

GPT-2's pattern needs the Unicode classes ``\\p{L}`` (letters) and ``\\p{N}`` (numbers), which
Python's ``re`` does not have, so this module uses the ``regex`` package, as GPT-2's own
``encoder.py`` does. It is a dependency of the course package without a version bound: it is
preinstalled wherever ``transformers`` is (Colab), since ``transformers`` requires it. (``re``
has no exact equivalent: ``[^\\W\\d_]``, the usual stand-in for letters, also matches number
characters such as ``"½"`` and ``"²"``, which GPT-2 counts as ``\\p{N}``.)

Command line, for the shipped copies of GPT-2's files (as ``course_utils.stories`` does for
the Shakespeare text)::

    python -m course_utils.tokenizer --write data/   # re-pack texts/*.gz from data/
    python -m course_utils.tokenizer --check data/   # exit status 1 if a copy differs
"""

from __future__ import annotations

import argparse
import functools
import gzip
import hashlib
import json
import operator
import sys
from collections import Counter, defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from pathlib import Path

import regex

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
PACKED_DIR = Path(__file__).resolve().parent / "texts"
GPT2_VOCAB_FILE = "gpt2_vocab.json"
GPT2_MERGES_FILE = "gpt2_merges.txt"
GPT2_SHA256 = {
    GPT2_VOCAB_FILE: "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
    GPT2_MERGES_FILE: "ac33235097fe06d4a8fff0feac994644809e6eb6ab70669e1e9fd40ae032428e",
}
ENDOFTEXT = "<|endoftext|>"

#: GPT-2's pre-tokenization pattern (``encoder.py`` of openai/gpt-2), tried left to right at
#: each position: English contractions; an optional space and a run of letters; of numbers;
#: of other non-space characters; whitespace not followed by a non-space (so the last space
#: of a run stays with the next word); any other whitespace.
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
_GPT2_REGEX = regex.compile(GPT2_PATTERN)

_Pair = tuple  # (a, b): two adjacent tokens (ids while training, byte strings while encoding)


# ------------------------------------------------------------------ argument checks


def _check_text(where: str, text: object, name: str = "text") -> None:
    if not isinstance(text, str):
        raise TypeError(
            f"{where}: {name} must be a str, got {type(text).__name__}"
            + (" (decode bytes first: data.decode('utf-8'))" if isinstance(text, (bytes, bytearray)) else "")
        )


def _check_special_tokens(where: str, special_tokens: object) -> list[str]:
    """A list of distinct, non-empty strings (duplicates dropped, order kept)."""
    if isinstance(special_tokens, str) or not isinstance(special_tokens, Iterable):
        raise TypeError(
            f"{where}: special_tokens must be a list of str such as ['<|endoftext|>'], "
            f"got {type(special_tokens).__name__} {special_tokens!r}"
        )
    tokens = list(special_tokens)
    for token in tokens:
        if not isinstance(token, str) or not token:
            raise (TypeError if not isinstance(token, str) else ValueError)(
                f"{where}: every special token must be a non-empty str, got {token!r} in special_tokens={tokens!r}"
            )
    return list(dict.fromkeys(tokens))


# ------------------------------------------------------------------ pre-tokenization


def pretokenize(text: str) -> list[str]:
    """GPT-2's pre-tokenization: ``"Hello  world!"`` -> ``["Hello", " ", " world", "!"]``.
    The pieces concatenate back to ``text``; special tokens are not treated specially here
    (see :func:`split_special_tokens`)."""
    _check_text("pretokenize", text)
    return _GPT2_REGEX.findall(text)


@functools.lru_cache(maxsize=64)
def _special_regex(special_tokens: tuple[str, ...]):
    # longest first, so that a special token that starts another one never cuts it short
    alternatives = sorted(special_tokens, key=len, reverse=True)
    return regex.compile("(" + "|".join(regex.escape(t) for t in alternatives) + ")")


def split_special_tokens(text: str, special_tokens: Sequence[str]) -> list[str]:
    """``text`` cut around every occurrence of a special token, the special tokens kept:
    ``"a<|endoftext|>b"`` -> ``["a", "<|endoftext|>", "b"]`` (empty pieces dropped). Where two
    special tokens could match at the same place, the longer one wins."""
    _check_text("split_special_tokens", text)
    specials = _check_special_tokens("split_special_tokens", special_tokens)
    if not specials:
        return [text] if text else []
    return [piece for piece in _special_regex(tuple(specials)).split(text) if piece]


# ------------------------------------------------------------------ training


def count_pairs(words: Mapping[Sequence[int], int]) -> Counter:
    """``{piece (token ids): how often it occurs}`` -> ``Counter({(a, b): count})``: every
    adjacent pair inside every piece, counted as often as the piece occurs. Pairs never span
    two pieces. Overlapping pairs all count: ``(7, 7, 7)`` holds ``(7, 7)`` twice."""
    if not isinstance(words, Mapping):
        raise TypeError(
            f"count_pairs: words must be a dict {{piece (tuple of ids): count}}, got {type(words).__name__}"
        )
    counts: Counter = Counter()
    for word, freq in words.items():
        for pair in zip(word, word[1:]):
            counts[pair] += freq
    return counts


def merge_pair(ids: Sequence[Hashable], pair: _Pair, new_id: Hashable) -> list:
    """Every occurrence of ``pair`` in ``ids`` replaced by ``new_id``, scanning left to right
    without overlaps: ``merge_pair([7, 7, 7], (7, 7), 9) == [9, 7]``. Works on ids and on
    byte strings alike."""
    if not (isinstance(pair, Sequence) and len(pair) == 2):
        raise ValueError(f"merge_pair: pair must be two tokens (a, b), got {pair!r}")
    a, b = pair
    out = []
    i, n = 0, len(ids)
    while i < n:
        if i + 1 < n and ids[i] == a and ids[i + 1] == b:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def train_bpe(
    text: str, vocab_size: int, special_tokens: Sequence[str] = ()
) -> tuple[dict[int, bytes], list[tuple[bytes, bytes]]]:
    """Train a byte-level BPE on ``text``; returns ``(vocab, merges)``.

    ``vocab``: ``{id: bytes}`` with ids 0-255 the single bytes, 256... the merged tokens in the
    order they were learned, then the special tokens (their UTF-8 bytes), ``vocab_size`` ids
    in all (fewer only when the text runs out of pairs). ``merges``: the learned merges as
    pairs of byte strings, in order (merge ``i`` made id ``256 + i``).

    The text is cut around the special tokens, which are never trained on, and each part is
    pre-tokenized with :data:`GPT2_PATTERN`; pairs are counted inside pieces only. Ties
    between the most frequent pairs go to the greatest ``(vocab[a], vocab[b])``.
    """
    _check_text("train_bpe", text)
    specials = _check_special_tokens("train_bpe", special_tokens)
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int):
        raise TypeError(f"train_bpe: vocab_size must be an int, got {type(vocab_size).__name__} {vocab_size!r}")
    smallest = 256 + len(specials)
    if vocab_size < smallest:
        raise ValueError(
            f"train_bpe: vocab_size={vocab_size} is smaller than the 256 byte tokens plus "
            f"{len(specials)} special token(s); expected vocab_size >= {smallest}"
        )

    piece_counts: Counter = Counter()
    for chunk in split_special_tokens(text, specials):
        if chunk not in specials:
            piece_counts.update(_GPT2_REGEX.findall(chunk))
    words = [list(piece.encode("utf-8")) for piece in piece_counts]  # each piece as token ids
    freqs = list(piece_counts.values())

    vocab = {i: bytes([i]) for i in range(256)}
    pair_counts = count_pairs(dict(zip(map(tuple, words), freqs)))
    where: defaultdict[_Pair, set[int]] = defaultdict(set)  # pair -> pieces that hold it (or did)
    for index, word in enumerate(words):
        for pair in zip(word, word[1:]):
            where[pair].add(index)

    merges: list[tuple[bytes, bytes]] = []
    for new_id in range(256, vocab_size - len(specials)):
        if not pair_counts:
            break  # every piece is a single token: nothing left to merge
        top = max(pair_counts.values())
        best = max((p for p, c in pair_counts.items() if c == top), key=lambda p: (vocab[p[0]], vocab[p[1]]))
        for index in where.pop(best):
            word = words[index]
            merged = merge_pair(word, best, new_id)
            if len(merged) == len(word):
                continue  # an older merge already took this piece's occurrences
            freq = freqs[index]
            for pair in zip(word, word[1:]):  # only this piece's pairs change
                pair_counts[pair] -= freq
                if not pair_counts[pair]:
                    del pair_counts[pair]
            for pair in zip(merged, merged[1:]):
                pair_counts[pair] += freq
                where[pair].add(index)
            words[index] = merged
        vocab[new_id] = vocab[best[0]] + vocab[best[1]]
        merges.append((vocab[best[0]], vocab[best[1]]))
    for token in specials:
        vocab[len(vocab)] = token.encode("utf-8")
    return vocab, merges


# ------------------------------------------------------------------ encoding and decoding


class BPETokenizer:
    """A byte-level BPE tokenizer from a vocabulary and a merge list.

    ``BPETokenizer(vocab, merges, special_tokens=())``: ``vocab`` ``{id: bytes}`` must hold
    every single byte; ``merges`` are pairs of byte strings in learned order (rank 0 first),
    each pair and its concatenation in ``vocab``; every special token's UTF-8 bytes must be in
    ``vocab`` too. ``encode(text) -> list[int]``, ``decode(ids) -> str``. ``encode`` remembers
    each pre-token's ids in ``cache`` (up to ``cache_size`` entries; 0 turns it off). The results of
    :func:`train_bpe` and :func:`load_gpt2_vocab_and_merges` fit as they are.

    A piece costs time quadratic in its length, as in GPT-2's own ``encoder.py`` (one pass over
    the piece per merge applied): ordinary words are a few bytes, but a run of 8,000 random
    letters without a space took 1.6 s of CPU with GPT-2's merges (2,000 letters: 0.16 s).
    """

    def __init__(
        self,
        vocab: Mapping[int, bytes],
        merges: Sequence[tuple[bytes, bytes]],
        special_tokens: Sequence[str] = (),
    ):
        if not isinstance(vocab, Mapping):
            raise TypeError(f"BPETokenizer: vocab must be a dict {{id: bytes}}, got {type(vocab).__name__}")
        self.vocab: dict[int, bytes] = {}
        for token_id, piece in vocab.items():
            if isinstance(token_id, bool) or not isinstance(token_id, int) or not isinstance(piece, bytes):
                raise TypeError(
                    f"BPETokenizer: vocab must map int ids to bytes, got {token_id!r}: {piece!r}"
                )
            self.vocab[token_id] = piece
        self.ids: dict[bytes, int] = {}
        for token_id in sorted(self.vocab):  # the lowest id wins if two ids share their bytes
            self.ids.setdefault(self.vocab[token_id], token_id)
        missing = [b for b in range(256) if bytes([b]) not in self.ids]
        if missing:
            raise ValueError(
                f"BPETokenizer: vocab lacks {len(missing)} of the 256 single bytes "
                f"(first {missing[:5]}); a byte-level vocabulary needs every byte as a token"
            )
        self.merges: list[tuple[bytes, bytes]] = [tuple(pair) for pair in merges]
        for rank, (a, b) in enumerate(self.merges):
            unknown = [t for t in (a, b, a + b) if t not in self.ids]
            if unknown:
                raise ValueError(f"BPETokenizer: merges[{rank}] = {(a, b)!r}: {unknown[0]!r} is not in vocab")
        self.ranks: dict[tuple[bytes, bytes], int] = {}
        for rank, pair in enumerate(self.merges):
            self.ranks.setdefault(pair, rank)
        self.special_tokens: dict[str, int] = {}
        for token in _check_special_tokens("BPETokenizer", special_tokens):
            if token.encode("utf-8") not in self.ids:
                raise ValueError(f"BPETokenizer: the special token {token!r} is not in vocab")
            self.special_tokens[token] = self.ids[token.encode("utf-8")]
        self.cache: dict[str, list[int]] = {}  # pre-token -> its ids, filled by encode
        # at most this many entries (0: no cache): a long text of unique pieces cannot grow it forever
        self.cache_size = 100_000

    def __len__(self) -> int:
        return len(self.vocab)

    def __repr__(self) -> str:
        return (f"BPETokenizer({len(self.vocab)} tokens, {len(self.merges)} merges, "
                f"special tokens {list(self.special_tokens)})")

    def _encode_piece(self, piece: str) -> list[int]:
        """One pre-token: its bytes, then the lowest-ranked adjacent pair merged, repeatedly."""
        ids = self.cache.get(piece)
        if ids is not None:
            return ids
        parts = [bytes([b]) for b in piece.encode("utf-8")]
        ranks = self.ranks
        while len(parts) > 1:
            best = min(zip(parts, parts[1:]), key=lambda p: ranks.get(p, len(ranks)))
            if best not in ranks:
                break
            parts = merge_pair(parts, best, best[0] + best[1])
        ids = [self.ids[p] for p in parts]
        if len(self.cache) < self.cache_size:
            self.cache[piece] = ids
        return ids

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``: special tokens as their own ids, the rest pre-tokenized and
        merged piece by piece in learned order."""
        _check_text("encode", text)
        out: list[int] = []
        for chunk in split_special_tokens(text, list(self.special_tokens)):
            special = self.special_tokens.get(chunk)
            if special is not None:
                out.append(special)
                continue
            for piece in _GPT2_REGEX.findall(chunk):
                out.extend(self._encode_piece(piece))
        return out

    def decode(self, ids: Iterable[int]) -> str:
        """The text of ``ids``: :func:`bpe_decode` with this vocabulary."""
        return bpe_decode(ids, self.vocab)


def bpe_encode(text: str, vocab: Mapping[int, bytes], merges: Sequence[tuple[bytes, bytes]],
               special_tokens: Sequence[str] = ()) -> list[int]:
    """Notebook 11's encoding exercise as one function: ``BPETokenizer(vocab, merges,
    special_tokens).encode(text)`` (build the tokenizer once to encode many texts)."""
    return BPETokenizer(vocab, merges, special_tokens).encode(text)


def bpe_decode(ids: Iterable[int], vocab: Mapping[int, bytes]) -> str:
    """The text of ``ids`` (ints, or anything ``operator.index`` accepts, such as a 1-D
    tensor's elements) under ``vocab`` ``{id: bytes}``: the tokens' bytes joined, then decoded
    once with ``errors="replace"`` (invalid or cut UTF-8 becomes ``"\\ufffd"``)."""
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
        raise TypeError(f"decode: ids must be a sequence of int token ids, got {type(ids).__name__}")
    if not isinstance(vocab, Mapping):
        raise TypeError(f"decode: vocab must be a dict {{id: bytes}}, got {type(vocab).__name__}")
    parts = []
    for position, token in enumerate(ids):
        try:
            token_id = operator.index(token)
        except TypeError:
            raise TypeError(
                f"decode: ids[{position}] is {type(token).__name__} {token!r}; expected an int token id"
            ) from None
        piece = vocab.get(token_id)
        if piece is None:
            raise ValueError(
                f"decode: ids[{position}] = {token_id} is not in the vocabulary; expected an id "
                f"from {min(vocab, default=0)} to {max(vocab, default=-1)} ({len(vocab)} tokens)"
            )
        parts.append(piece)
    return b"".join(parts).decode("utf-8", errors="replace")


# ------------------------------------------------------------------ GPT-2's files


@functools.lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's table from the 256 byte values to 256 printable characters.

    GPT-2's files store every token as text, and a token is a byte string that need not be
    valid UTF-8 (half of ``"é"``), nor printable (a newline, a space). So each byte gets a
    stand-in character: the 188 bytes that are printable Latin-1 characters (``"!"``-``"~"``,
    ``"¡"``-``"¬"``, ``"®"``-``"ÿ"``) stand for themselves, and the other 68 (control bytes,
    the space, ``0x7f``-``0xa0``, ``0xad``) are given the characters 256, 257, ... in byte
    order: the space (byte 32, the 33rd of them) becomes ``"Ġ"`` (U+0120) and the newline
    ``"Ċ"`` (U+010A), which is why GPT-2's merges read ``"Ġ t"``. The table is one-to-one, so
    a token's text converts back to its bytes with the inverse table.
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in printable]
    table = {b: chr(b) for b in printable}
    table.update({b: chr(256 + n) for n, b in enumerate(others)})
    return table


def _unicode_to_bytes(token: str, where: str) -> bytes:
    decoder = _unicode_decoder()
    try:
        return bytes(decoder[ch] for ch in token)
    except KeyError as error:
        raise ValueError(
            f"{where}: {token!r} has the character {error.args[0]!r}, which is not in GPT-2's "
            "byte-to-unicode table (bytes_to_unicode())"
        ) from None


@functools.lru_cache(maxsize=1)
def _unicode_decoder() -> dict[str, int]:
    return {ch: b for b, ch in bytes_to_unicode().items()}


def parse_gpt2_vocab(text: str) -> dict[int, bytes]:
    """The text of a GPT-2 ``vocab.json`` (``{token text: id}``) -> ``{id: bytes}``."""
    _check_text("parse_gpt2_vocab", text)
    table = json.loads(text)
    if not isinstance(table, dict):
        raise ValueError(f"parse_gpt2_vocab: expected a JSON object {{token: id}}, got a {type(table).__name__}")
    vocab = {}
    for token, token_id in table.items():
        if isinstance(token_id, bool) or not isinstance(token_id, int):
            raise ValueError(f"parse_gpt2_vocab: the id of {token!r} is {token_id!r}; expected an int")
        vocab[token_id] = _unicode_to_bytes(token, "parse_gpt2_vocab")
    return vocab


def parse_gpt2_merges(text: str) -> list[tuple[bytes, bytes]]:
    """The text of a GPT-2 ``merges.txt`` -> ``[(bytes, bytes), ...]`` in rank order.

    One merge a line, two tokens separated by one space (``"Ġ t"``); a first line starting
    with ``#version`` is a header and skipped (Hugging Face's files have one, this course's
    copy does not), as is the empty string after the last newline. Any other line that is not
    two tokens of GPT-2's table raises ``ValueError`` naming its line number (from 1).
    """
    _check_text("parse_gpt2_merges", text)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    merges = []
    for number, line in enumerate(lines, start=1):
        line = line.removesuffix("\r")
        if number == 1 and line.startswith("#version"):
            continue
        parts = line.split(" ")
        if len(parts) != 2 or not all(parts):
            raise ValueError(
                f"parse_gpt2_merges: line {number} is {line!r}; expected two tokens separated by one space, like 'Ġ t'"
            )
        where = f"parse_gpt2_merges: line {number}"
        merges.append((_unicode_to_bytes(parts[0], where), _unicode_to_bytes(parts[1], where)))
    return merges


def read_gpt2_file(name: str, data_dir: str | Path | None = None) -> str:
    """``data/<name>`` when the repository is there, else the package's gzipped copy."""
    path = Path(DATA_DIR if data_dir is None else data_dir) / name
    if path.is_file():
        return path.read_text(encoding="utf-8")
    if data_dir is not None:
        raise FileNotFoundError(f"no {name} in {data_dir}")
    return gzip.decompress((PACKED_DIR / (name + ".gz")).read_bytes()).decode("utf-8")


def load_gpt2_vocab_and_merges(
    data_dir: str | Path | None = None,
) -> tuple[dict[int, bytes], list[tuple[bytes, bytes]]]:
    """GPT-2's vocabulary (50,257 tokens, ``<|endoftext|>`` = 50256) and its 50,000 merges, as
    :func:`train_bpe` returns them: from ``data/`` when the repository is there, else from
    the package's copy; with ``data_dir``, that folder's two files (they must exist)."""
    vocab = parse_gpt2_vocab(read_gpt2_file(GPT2_VOCAB_FILE, data_dir))
    merges = parse_gpt2_merges(read_gpt2_file(GPT2_MERGES_FILE, data_dir))
    return vocab, merges


def load_gpt2_tokenizer(data_dir: str | Path | None = None) -> BPETokenizer:
    """GPT-2's tokenizer as a :class:`BPETokenizer`, with ``<|endoftext|>`` as special token."""
    vocab, merges = load_gpt2_vocab_and_merges(data_dir)
    return BPETokenizer(vocab, merges, special_tokens=[ENDOFTEXT])


# ------------------------------------------------------------------ the shipped copies


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Pack or check the package's copies of GPT-2's vocab and merges.")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", metavar="DIR", help="re-pack texts/*.gz from DIR's files")
    group.add_argument("--check", metavar="DIR", help="exit status 1 if a packed copy or DIR's file differs")
    args = parser.parse_args(argv)
    same = True
    for name, digest in GPT2_SHA256.items():
        packed = PACKED_DIR / (name + ".gz")
        if args.write:
            packed.write_bytes(gzip.compress((Path(args.write) / name).read_bytes(), compresslevel=9, mtime=0))
            print(f"wrote {packed} ({packed.stat().st_size:,} bytes)")
            continue
        plain = hashlib.sha256(read_gpt2_file(name, args.check).encode("utf-8")).hexdigest()
        copy = hashlib.sha256(gzip.decompress(packed.read_bytes())).hexdigest()
        ok = plain == copy == digest
        same &= ok
        print(f"{name}: {'the sha256 of data/README.md' if ok else 'differs'} (file and packed copy)")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())

"""The texts of notebook 09: tiny Shakespeare (the corpus it trains on) and the fables.

**Tiny Shakespeare** (:func:`load_shakespeare`): 1,115,394 characters of Shakespeare's plays
(public domain; the selection char-rnn made, as nanoGPT's ``shakespeare_char`` uses it;
provenance in ``data/README.md``). ``data/tinyshakespeare.txt`` holds it in the repository;
the package ships the same bytes gzipped (``course_utils/texts/tinyshakespeare.txt.gz``, for a
pip-installed package, as in Colab), and :func:`load_shakespeare` reads the first it finds.
``tests/test_gpt.py`` checks that both hold the same text, whose SHA-256 is :data:`SHAKESPEARE_SHA256`.

**The fables** (:func:`load_text`): a small, regular corpus the tests train on in seconds.
A few thousand short stories in plain English, generated from templates with a fixed
seed, so the course may ship and redistribute them (they were written for the course by
this program)::

    Once upon a time, there was a little fox who lived in a quiet forest. Every morning
    the fox went to the river to look for berries. One day the fox met a sad owl.
    "Why are you sad?" asked the fox. "I lost my red hat," said the owl. ...

Each story has the same shape (a hero, a place, a friend with a problem, a search, an
ending), with its words drawn at random: enough regularity for a character-level model
to learn spelling, punctuation and the shape of a story in a minute of CPU time, and
enough variety that it cannot simply memorise one text.

The text is drawn with ``random.Random(seed)`` using only ``rng.random()`` (the one
method whose sequence Python promises to keep across versions), so the same seed gives
the same bytes everywhere. ``data/fables.txt`` holds it in the repository;
:func:`load_text` reads that file when it is there, and otherwise (a pip-installed
package, as in Colab) generates the same text in memory. ``tests/test_gpt.py`` checks
that both agree::

    python -m course_utils.stories --write data/   # rewrite data/fables.txt and the gzipped Shakespeare
    python -m course_utils.stories --check data/   # exit status 1 if either differs
"""

from __future__ import annotations

import argparse
import functools
import gzip
import hashlib
import random
import sys
from collections.abc import Sequence
from pathlib import Path

SEED = 0
NUM_STORIES = 500
DATA_DIR = Path(__file__).resolve().parent.parent / "data"
FILE_NAME = "fables.txt"
SHAKESPEARE_FILE = "tinyshakespeare.txt"
SHAKESPEARE_PACKED = Path(__file__).resolve().parent / "texts" / (SHAKESPEARE_FILE + ".gz")
SHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"

_HEROES = ["fox", "rabbit", "bear", "mouse", "duck", "cat", "dog", "hedgehog", "squirrel", "turtle", "goat", "pig"]
_FRIENDS = ["owl", "frog", "deer", "bee", "crow", "lamb", "badger", "snail", "horse", "hen", "wolf", "otter"]
_SIZES = ["little", "small", "young", "old", "clever", "brave", "shy", "busy"]
_PLACES = [
    ("in a quiet forest", "the river"),
    ("in a green valley", "the old mill"),
    ("in a small village", "the market"),
    ("in a sunny meadow", "the big hill"),
    ("in a snowy wood", "the frozen lake"),
    ("on a busy farm", "the orchard"),
    ("on a rocky island", "the beach"),
]
_FOODS = ["berries", "apples", "nuts", "carrots", "seeds", "mushrooms", "honey", "clover"]
_MOODS = ["sad", "worried", "tired", "lonely", "upset"]
_COLOURS = ["red", "blue", "yellow", "green", "silver", "little", "old", "warm"]
_LOST = ["hat", "scarf", "key", "basket", "kite", "bell", "book", "boots", "map", "lamp"]
_HIDING = [
    "under an old tree",
    "behind a big rock",
    "in a bush of roses",
    "at the bottom of the well",
    "on the roof of the barn",
    "next to the bridge",
    "in a hole in the ground",
    "inside a hollow log",
]
_SEARCH = [
    "So the {h} and the {f} looked for the {o} together.",
    "So the {h} and the {f} went to look for the {o}.",
    "The {h} said, \"Do not worry. I will help you find it.\"",
    "The {h} thought for a moment and said, \"Let us look for it together.\"",
]
_FIND = [
    "They looked everywhere, and at last they found it {w}.",
    "They searched all day, and in the evening they found it {w}.",
    "After a long walk, the {f} saw it {w}.",
    "The {h} looked {w} and there it was.",
]
_ENDINGS = [
    "The {f} was happy again, and the two became good friends.",
    "The {f} thanked the {h}, and they shared the {food} for dinner.",
    "From that day on, the {h} and the {f} played together every morning.",
    "The {f} smiled and gave the {h} a big hug.",
    "That night the {h} went home tired but happy.",
]
_MORALS = [
    "A friend in need is a friend indeed.",
    "It is good to help others.",
    "Two can do more than one.",
    "Kindness is never wasted.",
    "",
    "",
]


def _pick(rng: random.Random, items: Sequence[str]) -> str:
    return items[min(int(rng.random() * len(items)), len(items) - 1)]


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def story(rng: random.Random) -> str:
    """One fable of a few sentences, its words drawn with ``rng.random()``."""
    hero, friend = _pick(rng, _HEROES), _pick(rng, _FRIENDS)
    size, (home, spot) = _pick(rng, _SIZES), _PLACES[min(int(rng.random() * len(_PLACES)), len(_PLACES) - 1)]
    food, mood = _pick(rng, _FOODS), _pick(rng, _MOODS)
    colour, lost, where = _pick(rng, _COLOURS), _pick(rng, _LOST), _pick(rng, _HIDING)
    sentences = [
        f"Once upon a time, there was {_article(size)} {size} {hero} who lived {home}.",
        f"Every morning the {hero} went to {spot} to look for {food}.",
        f"One day the {hero} met {_article(mood)} {mood} {friend}.",
        f"\"Why are you {mood}?\" asked the {hero}.",
        f"\"I lost my {colour} {lost},\" said the {friend}.",
        _pick(rng, _SEARCH).format(h=hero, f=friend, o=lost),
        _pick(rng, _FIND).format(h=hero, f=friend, w=where),
        _pick(rng, _ENDINGS).format(h=hero, f=friend, food=food),
    ]
    moral = _pick(rng, _MORALS)
    if moral:
        sentences.append(moral)
    return " ".join(sentences) + " The end."


def generate_text(seed: int = SEED, num_stories: int = NUM_STORIES) -> str:
    """``num_stories`` fables, one per line (``\\n`` line ends, a final newline)."""
    rng = random.Random(seed)
    return "".join(story(rng) + "\n" for _ in range(num_stories))


@functools.lru_cache(maxsize=4)
def _generated(seed: int) -> str:
    return generate_text(seed)


def load_text(data_dir: str | Path | None = None) -> str:
    """The fables: ``data/fables.txt`` when the repository is there, else generated (same text)."""
    path = Path(DATA_DIR if data_dir is None else data_dir) / FILE_NAME
    if path.is_file():
        return path.read_text(encoding="utf-8")
    if data_dir is not None:
        raise FileNotFoundError(f"no {FILE_NAME} in {data_dir}")
    return _generated(SEED)


def load_shakespeare(data_dir: str | Path | None = None) -> str:
    """Tiny Shakespeare: ``data/tinyshakespeare.txt`` when the repository is there, else the
    package's gzipped copy (the same text). With ``data_dir``, that folder's file (it must exist)."""
    path = Path(DATA_DIR if data_dir is None else data_dir) / SHAKESPEARE_FILE
    if path.is_file():
        return path.read_text(encoding="utf-8")
    if data_dir is not None:
        raise FileNotFoundError(f"no {SHAKESPEARE_FILE} in {data_dir}")
    return _unpacked()


@functools.lru_cache(maxsize=1)
def _unpacked() -> str:
    return gzip.decompress(SHAKESPEARE_PACKED.read_bytes()).decode("utf-8")


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", metavar="DIR", help=f"write DIR/{FILE_NAME}")
    group.add_argument("--check", metavar="DIR", help=f"exit status 1 if DIR/{FILE_NAME} differs")
    args = parser.parse_args(argv)
    text = generate_text()
    if args.write:
        path = Path(args.write) / FILE_NAME
        path.write_text(text, encoding="utf-8", newline="\n")
        print(f"wrote {path} ({len(text):,} characters)")
        plain = (Path(args.write) / SHAKESPEARE_FILE).read_bytes()
        SHAKESPEARE_PACKED.write_bytes(gzip.compress(plain, compresslevel=9, mtime=0))
        print(f"wrote {SHAKESPEARE_PACKED} ({SHAKESPEARE_PACKED.stat().st_size:,} bytes) from {SHAKESPEARE_FILE}")
        return 0
    path = Path(args.check) / FILE_NAME
    same = path.is_file() and path.read_text(encoding="utf-8") == text
    print(f"{path}: {'up to date' if same else 'differs from the generator'}")
    packed = sha256(_unpacked()) == SHAKESPEARE_SHA256 == sha256(load_shakespeare(args.check))
    print(f"{SHAKESPEARE_PACKED.name}: {'the same text' if packed else 'differs'} as {SHAKESPEARE_FILE} (sha256)")
    return 0 if same and packed else 1


if __name__ == "__main__":
    sys.exit(main())

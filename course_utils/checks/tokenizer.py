"""Checkers for notebook 11's exercises (byte-level BPE): ``count_pairs``, ``merge_pair``,
``train_bpe``, ``bpe_encode`` and ``bpe_decode`` (references in :mod:`course_utils.tokenizer`).

Each draws small random texts (a few syllables, spaces, punctuation, accents, emoji, the special
token ``<|endoftext|>``) and fixed cases that tell the catalogued mistakes apart on every draw
(an overlapping run ``a a a``, ties between pairs, a piece whose learned order differs from its
pair frequencies, a character cut between two tokens). A wrong answer is compared with the
reference run *with* each mistake (a table of variants of one plain trainer and one plain
encoder below) and, for the training loop, replayed on the reference's pieces: a merge that was
not a most frequent pair there (after the student's own earlier merges) means the pair counts
differ; only when every merge was one are equal counts at the first merge that differs a tie
broken another way; a training loop that calls the student's own ``count_pairs`` or ``merge_pair``
(by name) is first blamed on the helper when that fails its own check. Every call of the student's code
runs under a time limit of its own (:data:`CALL_LIMIT_S`), so an endless merge loop ends the
check with a message saying which call did not finish. Each exercise's mistakes are one table
(:mod:`.catalogue`), in the order tried: ``COUNT``, ``MERGE``, ``TRAIN``, ``ENCODE``, ``DECODE``.
tests/test_checks_tokenizer.py pins each name on 20 seeds.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import torch

from .._validate import names_used
from ..tokenizer import (
    ENDOFTEXT,
    BPETokenizer,
    bpe_decode,
    bytes_to_unicode,
    count_pairs,
    merge_pair,
    pretokenize,
    split_special_tokens,
    train_bpe,
)
from ._core import (
    Failure,
    StudentError,
    call_student_within,
    checker,
    fail,
    raised,
    randint,
    register_hints,
    require_function,
)
from .catalogue import Catalogue, Entry, Output, Probe, Raises, Reference, literal

__all__ = ["check_count_pairs", "check_merge_pair", "check_train_bpe", "check_bpe_encode", "check_bpe_decode"]

CALL_LIMIT_S = 10.0  # seconds one call of the student's code may take on these small inputs

_SYLLABLES = ["the", "th", "e", "a", "an", "at", "ta", "aa", "aaa", "é", "ée", "🚀", "no", "on", "o", "n", "ab"]
_GLUE = [" ", " ", " ", "  ", ", ", ". ", "!", "\n", " 12", "'s "]


def _text(words: int, special: bool = True) -> str:
    """A random text of ``words`` syllable groups, the special token once or twice if asked."""
    parts = []
    for _ in range(words):
        parts.append("".join(_SYLLABLES[randint(0, len(_SYLLABLES) - 1)] for _ in range(randint(1, 3))))
        parts.append(_GLUE[randint(0, len(_GLUE) - 1)])
        if special and randint(0, 14) == 0:
            parts.append(ENDOFTEXT)
    return "".join(parts)


def _show(x: Any, limit: int = 12) -> str:
    items = list(x)
    return repr(items[:limit])[:-1] + (", ...]" if len(items) > limit else "]")


def _passed(fn: Any, detail: str) -> str:
    """The [OK] detail, saying so when ``fn`` is the course's reference (imported from course_utils)."""
    if str(getattr(fn, "__module__", "")).startswith("course_utils.") and not isinstance(fn, type):
        return f"{detail}; this is the course's reference from course_utils, not your own code"
    return detail


def _type(x: Any) -> str:
    """The name of ``x``'s type, with its module where that is not Python's own (numpy.ndarray)."""
    module = type(x).__module__
    return type(x).__name__ if module == "builtins" else f"{module.split('.')[0]}.{type(x).__name__}"


def _got(x: Any) -> str:
    """What a function returned, for a 'wrong return' message: its type, or None with the likely reason."""
    return "None (did you forget `return`?)" if x is None else _type(x)


def _run(fn: Callable[..., Any], *args: Any, name: str, what: str, mistake: str = "time limit", why: str = "") -> Any:
    return call_student_within(
        CALL_LIMIT_S, fn, *args, context=f"calling {name}({what})", tensors=False,
        on_timeout=(f"your {name}({what}) did not finish within {CALL_LIMIT_S:g} s, on an input this small: "
                    + (why or "look for a loop that never ends (a while loop whose condition never changes).")),
        mistake=mistake)


_CARRIED = Entry(
    "state carried over between calls", "a call keeps state for the next (a mutable default, a global, a shared dict)",
    Output(lambda c: c.again() != c.first, "again"),
    "your {name} gives another result when called again on the same input: it keeps state between calls (a mutable "
    "default argument such as counts={{}} or vocab={{...}}, a global, or a module-level dict changed without .copy()). "
    "Build every dict or list afresh inside the function.\n    {case}")


def _fail_carried_over(first: Any, again: Callable[[], Any], name: str, case: str) -> None:
    """A second call on the same input that gives another result: state kept between calls."""
    if _CARRIED.detect.test(SimpleNamespace(first=first, again=again)):
        fail(_CARRIED.say(name=name, case=case), mistake=_CARRIED.name)


def _made(table: Catalogue, c: Any) -> list:
    """Every candidate of ``table``'s Reference entries on the case ``c``, in table order, without their messages."""
    return [make for entry in table.of(Reference) for _, make in entry.detect.build(c)]


# ---------------------------------------------------------------- count_pairs
def _counted(pairs_of: Callable[[tuple], Any], weighted: bool = True) -> Reference:
    """count_pairs with a mistake in which pairs one piece holds (``pairs_of``) or in its weight."""
    def build(c: Any) -> list:
        counts: Counter = Counter()
        for word, freq in c.words.items():
            for pair in pairs_of(word):
                counts[pair] += freq if weighted else 1
        return [({}, dict(counts))]
    return Reference(build)


def _across(c: Any) -> list:
    """The pieces glued into one sequence, each as often as it occurs."""
    flat = [t for word, freq in c.words.items() for _ in range(freq) for t in word]
    return [({}, dict(Counter(zip(flat, flat[1:]))))]


def _no_overlap(word: tuple) -> Any:
    i = 0
    while i < len(word) - 1:
        yield word[i], word[i + 1]
        i += 2 if word[i] == word[i + 1] else 1  # a run a a a counted as one (a, a)


def _first_bad_item(got: Mapping) -> dict | None:
    """The first (key, value) of ``got`` that is no (pair, int count), and which half is wrong."""
    for key, value in got.items():
        if not (isinstance(key, tuple) and len(key) == 2):
            return dict(bad="key", key=key)
        if isinstance(value, bool) or not isinstance(value, int):
            return dict(bad="value", key=key, value=value)
    return None


def _bad(half: str) -> Output:
    return Output(lambda got: (found := _first_bad_item(got)) is not None and found["bad"] == half and found, "return")


def _counts_differ(c: Any) -> dict:
    wrong = sorted((p for p in set(c.got) | set(c.expected) if c.got.get(p) != c.expected.get(p)), key=repr)
    return dict(n=len(wrong), pair=wrong[0], mine=c.got.get(wrong[0], 0), theirs=c.expected.get(wrong[0], 0))


def _pieces_never_adjacent(c: Any) -> dict | None:
    """Pairs no piece holds, each a piece's last token and a piece's first: counted across two pieces."""
    extra = [p for p in c.got if p not in c.expected]
    ends, starts = {w[-1] for w in c.words if w}, {w[0] for w in c.words if w}
    return dict(extra=extra) if extra and all(p[0] in ends and p[1] in starts for p in extra) else None


_COUNTED = "\n    {inputs}\n    you: {got!r}\n    expected: {expected!r}"
_ACROSS = ("you count pairs across two pieces too (the last token of one piece with the first of the next). Pieces "
           "are separate: count inside each piece only, `for pair in zip(word, word[1:])`.")

COUNT = Catalogue("count_pairs", "11", [
    Entry("time limit", None, Probe("call_student_within")),
    Entry("wrong return", None, Output(lambda got: not isinstance(got, Mapping) and dict(type=_got(got)),
                                       "return"),
          "{what} should return a dict (or Counter) {{(a, b): count}}, got {type}."),
    Entry("wrong return", None, _bad("key"), "{what}'s keys should be pairs (a, b) of adjacent tokens, got the key "
          "{key!r}."),
    Entry("wrong return", None, _bad("value"), "{what}'s counts should be ints, got {value!r} for {key!r}."),
    Entry("pairs as bytes", "count_pairs keys a pair as byte strings (bytes([a]), bytes([b])): a merged id (256 or "
          "more) is no byte", Raises(r"range\(0, 256\)", (ValueError,), "raised"),
          "your code raised {raised}\n    The pieces hold token ids, and a merged token's id is 256 or more, which "
          "bytes([id]) cannot hold. Key the counts by the ids themselves: counts[(a, b)] += freq for a, b in "
          "zip(word, word[1:]).\n    {case}"),
    Entry("words read as one list of ids",
          "count_pairs(ids) written for one list of ids (minbpe's get_stats), given the dict of pieces: ids[1:] raises",
          Raises(r"unhashable type: 'slice'", (TypeError,), "raised"),
          "your code raised {raised}\n    words is a dict {{piece (a tuple of ids): count}}, not a list of ids: "
          "slicing it (words[1:]) asks the dict for a key. Count inside each piece, times its count: for word, freq "
          "in words.items(): for pair in zip(word, word[1:]): counts[pair] += freq.\n    {case}"),
    Entry("input modified in place", None, Output(lambda c: c.words != c.before, "input"),
          "count_pairs changed its input `words`; read it, do not modify it (the training loop still needs it)."),
    _CARRIED,
    Entry("pair reversed", "merging looks for (pair[1], pair[0]), or counting counts (b, a), instead of the pair",
          _counted(lambda word: zip(word[1:], word)),
          "your pairs are reversed, (b, a) for a token a followed by b (zip(word[1:], word)?): count (word[i], "
          "word[i + 1]), `zip(word, word[1:])`." + _COUNTED),
    Entry("across pre-token boundaries",
          "pairs counted, or merges made, across two pieces of GPT-2's pre-tokenization", Reference(_across),
          _ACROSS + _COUNTED),
    Entry("wrap-around pair counted",
          "pair counting pairs a piece's last token with its first ((w[i - 1], w[i]) from i = 0)",
          # i = 0 pairs the last token with the first: (word[-1], word[0])
          _counted(lambda word: ((word[i - 1], word[i]) for i in range(len(word)))),
          "you count a pair made of a piece's last and first tokens ((word[i - 1], word[i]) for i in range(len(word))? "
          "At i = 0, word[-1] is the piece's last token; a one-token piece is paired with itself): a piece of n tokens "
          "has n - 1 pairs, `zip(word, word[1:])`." + _COUNTED),
    Entry("piece counts ignored", "each distinct piece counted once, not as often as it occurs in the text",
          _counted(lambda word: zip(word, word[1:]), weighted=False),
          "each piece is counted once, but `words` maps each piece to how often it occurs in the text: add `freq`, "
          "not 1, for each pair (`counts[pair] += freq`)." + _COUNTED),
    Entry("overlapping pairs counted once", "a run a a a counts the pair (a, a) once instead of twice",
          _counted(_no_overlap),
          "a run like (7, 7, 7) holds the pair (7, 7) twice, at positions 0 and 1 (overlapping); count every "
          "position, `zip(word, word[1:])`, without skipping after a match." + _COUNTED),
    Entry("pair counted once per piece", "a pair that occurs twice in one piece is counted once (a set of its pairs)",
          _counted(lambda word: set(zip(word, word[1:]))),
          "a pair that occurs twice in one piece is counted once (a set of the piece's pairs?): count it at every "
          "position where it occurs." + _COUNTED),
    Entry("every other pair skipped", "pairs counted at positions 0-1, 2-3, ... only (zip(w[::2], w[1::2]))",
          _counted(lambda word: zip(word[::2], word[1::2])),
          "you count the pairs at positions 0-1, 2-3, ... only (zip(word[::2], word[1::2])?): the pair at 1-2 is a "
          "pair too. Count every adjacent pair, `zip(word, word[1:])`." + _COUNTED),
    Entry("last pair skipped", "the last pair of each piece not counted (range(len(w) - 2))",
          _counted(lambda word: ((word[i], word[i + 1]) for i in range(len(word) - 2))),
          "the last pair of each piece is missing (range(len(word) - 2)?): a piece of n tokens has n - 1 pairs, at "
          "i = 0 ... n - 2, so the range is range(len(word) - 1)." + _COUNTED),
    Entry("nothing counted", "count_pairs returns no pairs for pieces that hold some (a loop that never adds)",
          Output(lambda c: not c.got and bool(c.expected), "extra"),
          "your count_pairs returned no pairs, but these pieces hold {n} distinct pairs: nothing was counted (a "
          "loop that never runs, a Counter never added to, or the counts kept in another variable?). For each "
          "piece and its count: for pair in zip(word, word[1:]): counts[pair] += freq.\n    {case}"),
    Entry("pairs of pieces counted",
          "count_pairs pairs whole pieces (zip over the dict's keys, minbpe's get_stats on words), not their tokens",
          Output(lambda c: (k := next((p for p in c.got if isinstance(p[0], tuple)), None)) and dict(key=k), "extra"),
          "your keys are pairs of whole pieces, such as {key!r} (zip(words, list(words)[1:])?, minbpe's get_stats run "
          "on the dict): `words` maps each piece to how often it occurs, and the pairs are the adjacent tokens inside "
          "each piece. Iterate words.items() and zip each piece with itself shifted: for word, freq in words.items(): "
          "for pair in zip(word, word[1:]): counts[pair] += freq.\n    {case}"),
    Entry("across pre-token boundaries", None, Output(_pieces_never_adjacent, "extra"),
          _ACROSS + "\n    {case}\n    pairs no piece holds: {extra!r}"),
    Entry("values differ", None, Output(_counts_differ, "values"),
          "the counts differ for {n} pair(s), e.g. {pair!r}: you {mine}, expected {theirs}.\n    {case}"),
])


def _as_counts(got: Any, what: str) -> dict:
    COUNT.detect("return", got, what=what)
    return {key: value for key, value in got.items() if value}  # a zero left in a Counter after subtracting is no pair


def _count_cases() -> list[dict[tuple, int]]:
    a, b, c, d = (randint(0, 9), randint(10, 19), randint(20, 29), randint(256, 300))
    fixed = {(a, a, a): randint(2, 4), (b, c): 1, (c, b, b, d): randint(2, 5), (d,): 3, (a, b, a, b): 1}
    cases = [fixed]
    for _ in range(3):
        alphabet = [a, b, c, d]
        words: dict[tuple, int] = {}
        for _ in range(randint(3, 8)):
            words[tuple(alphabet[randint(0, 3)] for _ in range(randint(1, 7)))] = randint(1, 6)
        cases.append(words)
    return cases + [{}]


@checker("count_pairs")
def check_count_pairs(count_pairs_fn):
    require_function(count_pairs_fn, "count_pairs")
    for words in _count_cases():
        before = copy.deepcopy(words)
        try:
            got = _run(count_pairs_fn, words, name="count_pairs", what=f"{len(words)} pieces")
        except StudentError as err:  # bytes([id]) with an id of 256 or more
            COUNT.detect_raised(err.exc, "raised", raised=raised(err.exc), case=f"words = {before!r}")
            raise
        got = _as_counts(got, "count_pairs")
        COUNT.detect("input", SimpleNamespace(words=words, before=before))
        expected = dict(count_pairs(words))
        if got == expected:
            continue
        case = f"words = {words!r}"
        _fail_carried_over(got, lambda: _as_counts(_run(count_pairs_fn, copy.deepcopy(words), name="count_pairs",
                                                        what=f"{len(words)} pieces"), "count_pairs"),
                           "count_pairs", case)
        for name, message, variant in COUNT.candidates(SimpleNamespace(words=words), inputs=case, got=got,
                                                       expected=expected):
            if got == variant:
                fail(message, mistake=name)
        c = SimpleNamespace(words=words, got=got, expected=expected)
        COUNT.detect("extra", c, case=case, n=len(expected))
        COUNT.detect("values", c, case=case)
    return _passed(count_pairs_fn, "pieces with repeats, overlapping runs and counts above 1")


register_hints("count_pairs", [
    "Loop over `words.items()`: each item is a piece (a tuple of ids) and how often it occurs.",
    "`zip(word, word[1:])` gives every adjacent pair of one piece, overlapping ones included.",
    "counts = Counter() (or a dict with .get(pair, 0)); for each pair of each piece, counts[pair] += freq.",
])


# ---------------------------------------------------------------- merge_pair
def _merge_cases() -> list[tuple[list, tuple, int]]:
    a, b, x = randint(0, 9), randint(10, 19), randint(20, 29)
    new = randint(256, 400)
    cases = [([a, a, a], (a, a), new), ([x, a, b, x, a, b], (a, b), new), ([a, b], (a, b), new),
             ([b, a], (a, b), new), ([], (a, b), new), ([a], (a, b), new), ([a, a, a, a, a], (a, a), new),
             ([b, a, b, a, b], (b, a), new), ([a, x, a, b, a], (a, b), new),  # pair[0] before another token
             ([10 + a, b, a, b, b, b * 10 + 1], (a, b), new)]  # ids that collide as text: '1a b' holds 'a b'
    for _ in range(3):
        ids = [(a, b, x)[randint(0, 2)] for _ in range(randint(5, 16))]
        i = randint(0, len(ids) - 2)
        cases.append((ids, (ids[i], ids[i + 1]), new))
    return cases


_TUPLED = range(10, 13)  # the random cases go in as tuples: train_bpe hands merge_pair its pieces (tuples)


def _given(ids: list, k: int) -> list | tuple:
    """Case ``k``'s ids as merge_pair receives them: a list, or a tuple as train_bpe hands a piece."""
    return tuple(ids) if k in _TUPLED else list(ids)


def _show_given(given: list | tuple) -> str:
    return f"({_show(given)[1:-1]})" if isinstance(given, tuple) else _show(given)


def _why_not_a_list(got: Any) -> str:
    if got is None:  # said by _got
        return ""
    if not inspect.isgenerator(got):
        return " Build a Python list (out = [], out.append(...)) and return it."
    if got.gi_code.co_name == "<genexpr>":  # return (x for x in ...): round brackets make a generator
        return (" You return a generator expression, (... for ... in ...), which is a generator, not a list: use "
                "square brackets, [... for ... in ...], or list(...).")
    return " You used `yield`, which makes a generator: append to a list and return it."


def _overlapping(ids: list, pair: tuple) -> bool:
    a, b = pair
    return a == b and any(ids[i:i + 3] == [a, a, a] for i in range(len(ids) - 2))


def _merged(make: Callable[[list, tuple, Any], list]) -> Reference:
    """merge_pair with a mistake: ``make(ids, pair, new_id)`` on the case."""
    return Reference(lambda c: [({}, make(c.ids, c.pair, c.new_id))])


def _first_only(ids: list, pair: tuple, new_id: Any) -> list:
    for i in range(len(ids) - 1):
        if (ids[i], ids[i + 1]) == pair:
            return [*ids[:i], new_id, *ids[i + 2:]]
    return list(ids)


def _backwards(ids: list, pair: tuple, new_id: Any) -> list:
    out, i = [], len(ids) - 1
    while i >= 0:
        if i > 0 and (ids[i - 1], ids[i]) == pair:
            out.insert(0, new_id)
            i -= 2
        else:
            out.insert(0, ids[i])
            i -= 1
    return out


def _second_kept(ids: list, pair: tuple, new_id: Any) -> list:
    out = []
    for i in range(len(ids)):  # the bug: a step of 1, not 2, after a merge
        out.append(new_id if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair else ids[i])
    return out


def _head_only(ids: list, pair: tuple, new_id: Any) -> list:
    out, i = [], 0  # merged wherever ids[i] == a, whatever follows
    while i < len(ids):
        out.append(new_id if i + 1 < len(ids) and ids[i] == pair[0] else ids[i])
        i += 2 if out[-1] == new_id else 1
    return out


def _as_text(ids: list, pair: tuple, new_id: Any) -> list:
    a, b = pair
    return [int(x) for x in " ".join(map(str, ids)).replace(f"{a} {b}", str(new_id)).split()]  # '11 2' holds '1 2'


def _as_padded_text(ids: list, pair: tuple, new_id: Any) -> list:
    text, (a, b) = f" {' '.join(map(str, ids))} ", pair  # ' 6 6 ' eats the space the next ' 6 6 ' starts with
    return [int(x) for x in text.replace(f" {a} {b} ", f" {new_id} ").split()]


def _last_dropped(ids: list, pair: tuple, new_id: Any) -> list:
    merged = merge_pair(ids, pair, new_id)
    return merged if merged[-1:] == [new_id] else merged[:-1]  # new_id is no input id: the last pair was merged


_AS_BYTES = ("you merge in bytes (bytes(ids).replace(bytes(pair), ...)?): a byte holds 0 to 255, and every merged id "
             "is 256 or more (bytes([new_id]) raises, new_id % 256 gives another token's id). Work on the list of ids: "
             "walk it, (ids[i], ids[i + 1]) == pair.")
_CASE = "\n    {inputs}"

MERGE = Catalogue("merge_pair", "11", [
    Entry("time limit", None, Probe("call_student_within")),
    Entry("ids merged as bytes", "merging replaces the pair in bytes(ids): no byte holds a merged id (256 or more)",
          Raises(r"range\(0, 256\)", (ValueError,), "raised"),
          "your code raised {raised}\n    " + _AS_BYTES + "\n    merge_pair({ids}, {pair}, {new_id})"),
    Entry("tuple input not handled", "merge_pair fails on a tuple of ids, as train_bpe hands it a piece (ids.copy(), "
          "item assignment)",
          # ids.copy(), .append(); ids[i] = ..., del ids[i]; ids[:i] + [new_id]
          Raises(r"'tuple' object (has no attribute|does not support item|doesn't support item)|concatenate tuple",
                 (AttributeError, TypeError), "raised"),
          "your code raised {raised}\n    train_bpe hands merge_pair each piece as a tuple (the keys of `words` are "
          "tuples), and a tuple has no .copy(), .append() or item assignment (ids[i:i + 2] = ...), and does not add "
          "to a list (ids[:i] + [new_id]). Build a new list: out = [], append to it while you walk ids, return it."
          "\n    merge_pair({ids}, {pair}, {new_id})"),
    Entry("empty ids not handled", "merge_pair raises on an empty list of ids (out = [ids[0]] read first)",
          Output(lambda empty: empty, "empty"),
          "your code raised {raised}\n    on an empty list of ids: merge_pair([], pair, new_id) should return [] "
          "(start from out = [], or return [] when not ids).\n    merge_pair({ids}, {pair}, {new_id})"),
    Entry("input modified in place", None, Output(lambda c: c.given != c.ids, "input"),
          "merge_pair changed the list it was given ({ids} became {given}); build and return a new list: the caller "
          "may still need the old one (your training loop builds the new pieces from the old ones, and a trainer that "
          "updates its counts subtracts the old pieces' pairs)."),
    Entry("input returned as is",
          "merge_pair returns the caller's own list object (return ids where nothing merges), not a new list",
          Output(lambda aliased: aliased and aliased[0], "alias"),
          "merge_pair({ids}, {pair}, {new_id}) returned the very list object it was given, not a new one (`return "
          "ids` where the pair does not occur?): the caller's list and your result are then one list, and changing "
          "one changes the other. Return a new list in every case: list(ids), or the `out` you build where the pair "
          "occurs."),
    Entry("wrong return", None, Output(lambda got: not isinstance(got, (list, tuple)) and dict(
        type=_got(got), why=_why_not_a_list(got)), "return"),
          "merge_pair should return a Python list of int ids, got {type} (for merge_pair({ids}, {pair}, {new_id}))."
          "{why}"),
    # bytes(ids).replace(bytes(pair), bytes([new_id % 256])): a byte holds no id from 256 on
    Entry("ids merged as bytes", None, _merged(lambda ids, pair, new_id: [
        new_id % 256 if t == new_id else t for t in merge_pair(ids, pair, new_id)]), _AS_BYTES + _CASE),
    Entry("only the first occurrence merged", "only the first occurrence of the pair is merged, not every one",
          _merged(_first_only),
          "only the first occurrence of the pair is replaced; every occurrence must be: keep scanning to the end of "
          "the list after a merge." + _CASE),
    Entry("ids joined as a string", "merging replaces the pair in the ids written out as text: '11 2' holds '1 2'",
          _merged(_as_text),
          "you replace the pair in the ids written out as text (' '.join(map(str, ids)).replace(...)?): ids of "
          "several digits collide as text, '11 2' holds '1 2', so [11, 2] with the pair (1, 2) gives a number that is "
          "no id. Compare the ids themselves: walk the list, (ids[i], ids[i + 1]) == pair." + _CASE),
    Entry("ids joined as a string", None, _merged(_as_padded_text),
          "you replace the pair in the ids written out as text with spaces around them (' a b ' -> ' new '?): one "
          "replacement eats the space the next one starts with, so in a run 6 6 6 6 every other pair is skipped. "
          "Compare the ids themselves: walk the list, (ids[i], ids[i + 1]) == pair." + _CASE),
    Entry("pair never matched",
          "merging merges nothing, ids come back unchanged (e.g. ids[i:i + 2] == pair, a list against a tuple)",
          # nothing merged anywhere; on lists only (ids[i:i + 2] == pair); on tuples only (== list(pair))
          Reference(lambda c: [({}, list(c.ids) if c.tupled in when else merge_pair(c.ids, c.pair, c.new_id))
                               for when in ((False, True), (False,), (True,))]),
          "nothing was merged (your result equals ids): the test for the pair never holds, or the merged list is not "
          "what you return; e.g. ids[i:i + 2] == pair compares a list with a tuple, which are never equal: compare "
          "(ids[i], ids[i + 1]) == pair, or list(pair)." + _CASE),
    Entry("pair reversed", None, _merged(lambda ids, pair, new_id: merge_pair(ids, pair[::-1], new_id)),
          "you merge (pair[1], pair[0]), the pair read backwards: merge where ids[i] == pair[0] and ids[i + 1] == "
          "pair[1]." + _CASE),
    Entry("merged right to left", "the pair is merged scanning from the right: a a a becomes [a, new], not [new, a]",
          _merged(_backwards),
          "you scan from the right: in a run a a a the pair (a, a) then merges at the end, [a, new]; the merge scans "
          "left to right, [new, a]." + _CASE),
    Entry("second token of the pair kept",
          "after a merge the scan moves on by one, not two: the pair's second token is read again",
          _merged(_second_kept),
          "after a merge the scan moves on by one position instead of two, so the pair's second token is read again "
          "(kept, or merged once more): i += 2 after writing new_id." + _CASE),
    Entry("last token dropped", "merging loses the last token when it is not part of a merge (while i < len(ids) - 1)",
          _merged(_last_dropped),
          "the last token is lost when it is not merged (while i < len(ids) - 1?): loop to the end, while i < "
          "len(ids), and test i + 1 < len(ids) before reading ids[i + 1]." + _CASE),
    Entry("pair compared wrongly",
          "merging compares the tokens with the wrong halves of the pair (pair[0] twice, or only pair[0])",
          _merged(lambda ids, pair, new_id: merge_pair(ids, (pair[0], pair[0]), new_id)),
          "you compare the tokens with the wrong halves of the pair (pair[0] twice, or only ids[i] == pair[0]): merge "
          "where ids[i] == pair[0] and ids[i + 1] == pair[1]." + _CASE),
    Entry("pair compared wrongly", None, _merged(_head_only),
          "you test only ids[i] == pair[0]: the next token must be pair[1] too, ids[i] == pair[0] and ids[i + 1] == "
          "pair[1]." + _CASE),
    Entry("overlapping pairs merged twice", "in a run a a a both overlapping (a, a) are merged, not the first only",
          Output(lambda wrong: all(_overlapping(i, p) for i, p, *_ in wrong), "overlap"),
          "the pair is merged twice in an overlapping run: in a a a the pair (a, a) occurs at positions 0 and 1, but "
          "once the first two tokens are merged the second pair no longer exists. Scan left to right and, after a "
          "merge, skip both tokens (i += 2).\n    {case}"),
    Entry("values differ", None, Output(lambda wrong: True, "values"), "{case}."),
])


@checker("merge_pair")
def check_merge_pair(merge_pair_fn):
    require_function(merge_pair_fn, "merge_pair")
    results, aliased = [], []
    for k, (ids, pair, new_id) in enumerate(_merge_cases()):
        given = _given(ids, k)
        fields = dict(ids=_show_given(given), pair=pair, new_id=new_id)
        try:
            got = _run(merge_pair_fn, given, pair, new_id, name="merge_pair",
                       what=f"{_show_given(given)}, {pair}, {new_id}")
        except StudentError as err:  # bytes([new_id]) with new_id >= 256; ids.copy() on a tuple
            if isinstance(given, tuple) and any(r[3] != merge_pair(*r[:3]) for r in results):
                break  # wrong on lists already: that is named first, from the lists' results
            MERGE.detect_raised(err.exc, "raised", raised=raised(err.exc), **fields)
            MERGE.detect("empty", not ids, raised=raised(err.exc), **fields)
            raise
        MERGE.detect("input", SimpleNamespace(given=list(given), ids=ids), **{**fields, "given": _show(given)})
        MERGE.detect("return", got, **fields)
        results.append((ids, pair, new_id, list(got), isinstance(given, tuple)))
        if got is given and isinstance(given, list):  # the caller's own list handed back: named once values are right
            aliased.append(fields)
    wrong = [r for r in results if r[3] != merge_pair(r[0], r[1], r[2])]
    if not wrong:
        MERGE.detect("alias", aliased)
        return _passed(merge_pair_fn, f"{len(results)} lists and tuples, overlapping runs and empty ones included")
    ids, pair, new_id, got, tupled = wrong[0]
    case = (f"merge_pair({_show_given(tuple(ids) if tupled else ids)}, {pair}, {new_id}) returned {_show(got)}, "
            f"expected {_show(merge_pair(ids, pair, new_id))}")
    variants = [_made(MERGE, SimpleNamespace(ids=i, pair=p, new_id=n, tupled=t)) for i, p, n, _, t in results]
    for index, (name, message, _) in enumerate(MERGE.candidates(SimpleNamespace(ids=ids, pair=pair, new_id=new_id,
                                                                                tupled=tupled), inputs=case)):
        if all(r[3] == v[index] for r, v in zip(results, variants)):
            fail(message, mistake=name)
    MERGE.detect("overlap", wrong, case=case)
    MERGE.detect("values", wrong, case=case)


register_hints("merge_pair", [
    "Walk through `ids` with an index i and build a new list `out`.",
    "At each i: if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair, append new_id and move i by 2; otherwise "
    "append ids[i] and move i by 1.",
    "A while loop, not a for loop: the step is 2 after a merge. merge_pair([7, 7, 7], (7, 7), 9) == [9, 7].",
])


# ---------------------------------------------------------------- train_bpe: one plain trainer and its variants
# GPT-2's pattern written for Python's re (no \p{L}), two ways: [^\W\d_] drops '_' and cuts '²' and '½' another way;
# \w also keeps '_', digits and '²' inside a word ('x_1', 'ab12', 'x²' one piece each)
_RE_PATTERNS = {"re": r"'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?[^\s\w]+|\s+(?!\S)|\s+",
                "re \\w": r"'s|'t|'re|'ve|'m|'ll|'d| ?\w+| ?\d+| ?[^\s\w]+|\s+(?!\S)|\s+",
                "own \\w": r"\s?\w+|\s?[^\w\s]+|\s+"}  # a pattern of one's own (trial s10_11)


def _split_unescaped(text: str, specials: Sequence[str], kept: bool) -> list[str]:
    """The text cut by re.split on the special tokens joined without re.escape: the '|' of '<|endoftext|>' is an
    alternation, so the cuts fall at every '<', 'endoftext' and '>', whose text is ``kept`` (a group) or dropped."""
    if not specials:
        return [text]
    pattern = "|".join(specials)
    return [c for c in re.split(f"({pattern})" if kept else pattern, text) if c]


def _pieces(text: str, specials: Sequence[str], split: str = "gpt2", specials_out: bool | str = True,
            unescaped: str = "") -> list[bytes]:
    """The pieces a trainer counts; ``specials_out`` a string: each special token replaced by it in the text;
    ``unescaped`` ("kept", "dropped"): the text cut with the special tokens as an unescaped regular expression."""
    if unescaped:
        chunks = [c for c in _split_unescaped(text, specials, unescaped == "kept") if c not in specials]
    elif isinstance(specials_out, str):
        for token in specials:
            text = text.replace(token, specials_out)
        chunks = [text]
    else:
        chunks = split_special_tokens(text, specials) if specials_out else [text]
        chunks = [c for c in chunks if c not in specials] if specials_out else chunks
    if split == "none":
        return [c.encode() for c in chunks]
    if split == "whitespace":
        return [w.encode() for c in chunks for w in c.split()]
    if split == "collapsed":  # " ".join(text.split()): runs of spaces and newlines become one space
        chunks = [" ".join(c.split()) for c in chunks]
    if split in _RE_PATTERNS:
        return [p.encode() for c in chunks for p in re.findall(_RE_PATTERNS[split], c)]
    return [p.encode() for c in chunks for p in pretokenize(c)]


def _prepared(text: str, text_as: str) -> str:
    """The text as a mistake changes it before any work: stripped, lowercased, or normalised ("NFC", "NFKC")."""
    if text_as in ("strip", "lower"):
        return getattr(text, text_as)()
    return unicodedata.normalize(text_as, text) if text_as else text


_NORMALISED = ("the text was normalised (unicodedata.normalize, NFC or NFKC) before {what}; BPE works on the "
               "bytes as given: 'cafe\\u0301' (an e, then a combining accent of 2 bytes) is not 'café', 'ﬁ' "
               "stays one character, '²' is not '2'. Leave the text as it is.")


def _best(vocab: dict, counts: dict, tie: str) -> tuple:
    """The pair to merge: the most frequent, ties broken the contract's way (``"bytes"``) or
    another catalogued way."""
    if tie == "first":
        return max(counts, key=counts.get)  # the first counted of the most frequent
    top = max(counts.values())
    tied = [p for p in counts if counts[p] == top]
    if tie == "ids":
        return max(tied)
    if tie == "joined":  # the two byte strings joined: (b"a", b"bz") beats (b"ab", b"a")
        return max(tied, key=lambda p: vocab[p[0]] + vocab[p[1]])
    if tie == "text":  # decoded: every cut character is the same '\ufffd', so the first counted wins among those
        return max(tied, key=lambda p: tuple(vocab[x].decode("utf-8", errors="replace") for x in p))
    key = lambda p: (vocab[p[0]], vocab[p[1]])  # noqa: E731
    return min(tied, key=key) if tie == "smallest" else max(tied, key=key)


def _piece_pairs(word: list, counting: str) -> list[tuple]:
    """The pairs of one piece, every one (``"all"``), each once (``"set"``) or overlaps skipped (``"no overlap"``)."""
    pairs = list(zip(word, word[1:]))
    if counting == "set":
        return list(dict.fromkeys(pairs))
    if counting == "no overlap":  # a pair of equal tokens skips the next position: a a a counts (a, a) once
        kept, i = [], 0
        while i < len(pairs):
            kept.append(pairs[i])
            i += 2 if word[i] == word[i + 1] else 1
        return kept
    return pairs


def _plain_train(text: str, vocab_size: int, specials: Sequence[str], split: str = "gpt2",
                 specials_out: bool | str = True, weighted: bool = True, tie: str = "bytes", apply: bool = True,
                 counting: str = "all", text_as: str = "", cut_at: int | None = None,
                 unescaped: str = "") -> list[tuple[bytes, bytes]]:
    """The textbook trainer (a full recount per merge), with the variants the mistakes need (``text_as``:
    "strip" or a Unicode normal form applied to the text first; ``cut_at=1``: the text cut at the first special
    token only, the others trained on)."""
    text = _prepared(text, text_as)
    # each distinct piece once with its count, in the order of first occurrence (the order pairs are first counted
    # in, which tie="first" reads); merging keeps distinct pieces distinct
    words = Counter(tuple(p) for p in _pieces(text, specials[:cut_at], split, specials_out, unescaped)
                    if len(p) > 1)  # 1 byte: no pair
    if not weighted:
        words = Counter(dict.fromkeys(words, 1))
    vocab = {i: bytes([i]) for i in range(256)}
    merges = []
    for new_id in range(256, vocab_size - len(specials)):
        counts: dict = {}
        for word, freq in words.items():
            for pair in zip(word, word[1:]) if counting == "all" else _piece_pairs(list(word), counting):
                counts[pair] = counts.get(pair, 0) + freq
        if not counts:
            break
        best = _best(vocab, counts, tie)
        if apply:
            words = Counter({(tuple(merge_pair(w, best, new_id)) if best[0] in w else w): f for w, f in words.items()})
        vocab[new_id] = vocab[best[0]] + vocab[best[1]]
        merges.append((vocab[best[0]], vocab[best[1]]))
    return merges


_PRETOKENIZER = ("your pre-tokenizer cuts the text otherwise than GPT-2's pattern (a pattern for Python's re, with "
                 "\\w or [^\\W\\d_] for \\p{L}: '_' is lost or joins a word, 'x_1', 'ab12' and 'x²' become one "
                 "piece, '²' and '½' are cut another way): use pretokenize(...), GPT-2's pattern with the regex "
                 "package's \\p{L} and \\p{N}.")
_OWN_PATTERN = ("your pre-tokenizer is a pattern of your own (such as \\s?\\w+|\\s?[^\\w\\s]+|\\s+), not "
                "GPT-2's, and it cuts otherwise: \"'s\" becomes \"'\" and 's', a newline joins the next word, a run "
                "of spaces stays whole, digits and '_' join a word. Use pretokenize(...), GPT-2's pattern.")
_PATTERN_SAID = {"re": _PRETOKENIZER, "re \\w": _PRETOKENIZER, "own \\w": _OWN_PATTERN}
_SPANS = ("spans two of GPT-2's pieces of this text: pretokenize(...) never puts those bytes in one piece, "
          "so your pieces are cut otherwise than GPT-2's pattern (a pattern of your own, \\w for letters, no "
          "pre-tokenization?). Cut each part of the text with pretokenize(...) and keep every token inside a piece.")


def _spanning(text: str, pieces: list[bytes], tokens: Sequence[bytes]) -> bytes | None:
    """The first of ``tokens`` (byte strings) that the text's bytes hold but no piece does: it spans two pieces."""
    data = text.encode()
    return next((t for t in tokens if len(t) > 1 and t in data and not any(t in p for p in pieces)), None)


def _boundary_crossed(text: str, specials: Sequence[str], tokens: list[bytes]) -> bytes | None:
    """Where ``tokens`` join back to ``text``, the first token that crosses a boundary of GPT-2's pieces."""
    if b"".join(tokens) != text.encode():
        return None
    cuts, at = set(), 0
    for chunk in split_special_tokens(text, specials):
        for piece in [chunk] if chunk in specials else pretokenize(chunk):
            at += len(piece.encode())
            cuts.add(at)
    at = 0
    for token in tokens:
        if any(at < cut < at + len(token) for cut in cuts):
            return token
        at += len(token)
    return None


_UNESCAPED = ("you cut the text at the special tokens with a regular expression of them joined without re.escape "
              "(re.split('|'.join(special_tokens), text)?): the '|' in '<|endoftext|>' is an alternation, so the "
              "pattern matches '<', 'endoftext' and '>' wherever they are, and never the token as a whole. Escape each "
              "token, '|'.join(map(re.escape, special_tokens)), or use split_special_tokens(text, special_tokens).")

def _counts_before(text: str, specials: Sequence[str], merges: list) -> Counter:
    """Pair counts (of byte strings) of the reference's pieces after ``merges``."""
    vocab = {i: bytes([i]) for i in range(256)}
    for a, b in merges:
        vocab[len(vocab)] = a + b
    tok = BPETokenizer(vocab, merges)
    counts: Counter = Counter()
    for piece in _pieces(text, specials):
        parts = [vocab[i] for i in tok.encode(piece.decode())]
        counts.update(zip(parts, parts[1:]))
    return counts


def _train_cases() -> list[tuple[str, int, list[str]]]:
    text = _text(randint(25, 40))
    return [
        ("ab cd ef", 256 + 1, []),  # three ties of count 1: (b"e", b"f") is the greatest pair
        ("xa xb ya yb " * randint(2, 3) + "zz", 256 + 3, []),  # ties between pairs of merged tokens
        (text, 256 + randint(10, 20) + 1, [ENDOFTEXT]),
        (_text(randint(25, 40), special=False), 256 + randint(10, 20), []),
    ]


def _train_variants_differ() -> list[tuple[str, int, list[str]]]:
    """Fixed texts on which each variant's merges differ from the reference's."""
    return [
        ("b a b a b a b" + ENDOFTEXT + "|||||> <|", 256 + 4 + 1, [ENDOFTEXT]),  # across; the specials' characters
        ("the cat the hat the mat a a a a a a" + " ta" * 3, 256 + 8, []),  # spaces; weights (a repeated piece)
        ("ab ab ab cd cd cd", 256 + 3, []),
        ("aaza az abzb bbbz zzab zazz", 256 + 6, []),  # (b'a', b'bz') against (b'ab', b'a'): joined bytes
        ("🚀🔥 🚀🔥 😀😁 😀😁 é è é è", 256 + 5, []),  # ties among cut characters: joined bytes, decoded text
        # the special token replaced by a space or deleted: ' cd' or 'ab.ab' and 'dab' are pieces
        ("ab." + ENDOFTEXT + "ab cd" + ENDOFTEXT + "ab", 256 + 3 + 1, [ENDOFTEXT]),
        # ' \n' (ids 32 10) merged first: as text '32 10' is in ' e' ('32 101'); collapsed spaces lose ' \n'
        ("a \n \n ed " * 3 + "aaaa abab abab", 256 + 4, []),  # and counts per piece: aaaa, abab
        # text stripped: (b'\n', b'\n') at the ends is learned; text normalised: the bytes of 'e\u0301', 'ﬁ', '²'
        ("\n\n\n\nab\n\n\n\nab cafe\u0301 cafe\u0301 cafe\u0301 ﬁne x² x²\n\n\n\n", 256 + 6, []),
        ("THE THE the", 256 + 1, []),  # capitals: (b'T', b'H') learned, lowercased (b't', b'h')
        # two special tokens: cut at the first only, '<|pad|>' gives the pair (b'|', b'>') first; given as a tuple
        ("ab<|pad|>ab" + ENDOFTEXT + "cd<|pad|> cd", 256 + 3 + 2, (ENDOFTEXT, "<|pad|>")),
        # a pattern of Python's re: '_', letters next to digits, '²' ([^\W\d_] and \w each learn other merges)
        ("x_1. x_1. ab12. ab12. x². x². a_b.", 256 + 5, []),
        # the special token as an unescaped regular expression: cut at every '<' and '>', which are kept or dropped
        ("<<a>> <<a>> x" + ENDOFTEXT + "x", 256 + 3 + 1, [ENDOFTEXT]),
        # special tokens not in sorted order (trial s13_11: sorted(set(...)) passed where every case was sorted)
        ("ab<|pad|>ab" + ENDOFTEXT + "cd", 256 + 2 + 2, ["<|pad|>", ENDOFTEXT]),
        ("ab<|sep|>cd<|pad|>ab" + ENDOFTEXT + "cd", 256 + 2 + 3, ["<|sep|>", ENDOFTEXT, "<|pad|>"]),
    ]


_SORTED = ("merges are kept in the order they were learned: a merge's place in the list is its rank, which "
           "encoding follows (the earliest learned pair is merged first); sorting loses it.")

_TUPLE = ("any sequence of str names the special tokens, a tuple as well as a list; split_special_tokens(text, "
          "special_tokens) and `chunk in special_tokens` take both.")


def _train_case(text: str, vocab_size: int, specials: list[str]) -> str:
    more = "..." if len(text) > 60 else ""
    return f"train_bpe({text[:60]!r}{more}, vocab_size={vocab_size}, special_tokens={specials})"


def _not_most_frequent(text: str, specials: list[str], got: list, expected: list) -> tuple | None:
    """The first of the student's merges (from the first that differs from ``expected``) that is not a most
    frequent pair of the reference's pieces with the student's earlier merges applied:
    ``(j, pair, its count, a most frequent pair, its count)``; None if every one is."""
    k = next((i for i in range(min(len(got), len(expected))) if got[i] != expected[i]), len(got))
    for j in range(k, len(got)):
        try:
            own = _counts_before(text, specials, got[:j])
        except (KeyError, ValueError):  # merges that do not build on each other: no state to recount
            return None
        top = max(own.values(), default=0)
        if own.get(got[j], 0) < top:
            return j, got[j], own.get(got[j], 0), max(p for p in own if own[p] == top), top
    return None


_FROM_CHARACTERS = ("you start each piece from its characters (tuple(piece), or ord(ch) for ch in piece?). Byte-level "
                    "BPE starts from the piece's UTF-8 bytes, tuple(piece.encode('utf-8')): an accent is 2 bytes, an "
                    "emoji 4, each a token of its own until a merge joins them.")


def _character_unit(text: str, merges: list) -> tuple[int, bytes, str] | None:
    """``(merge index, part, what it is)`` for the first merge whose part is a character of several bytes that no
    earlier merge built, or a character's Latin-1 byte (ord(ch) as its byte) that the text's UTF-8 lacks."""
    known, data = {bytes([b]) for b in range(256)}, text.encode("utf-8")
    for j, (a, b) in enumerate(merges):
        for part in (a, b):
            try:
                char = part.decode("utf-8") if part not in known else ""
            except UnicodeDecodeError:
                char = ""
            if len(char) == 1:
                return j, part, f"the character {char!r} ({len(part)} bytes) that no earlier merge made"
            if len(part) == 1 and part[0] >= 0x80 and part not in data and part.decode("latin-1") in text:
                return j, part, f"the character {part.decode('latin-1')!r} as one byte, its ord(), not its UTF-8 bytes"
        known.add(a + b)
    return None


def _re_encoded(text: str, merges: list) -> tuple[int, tuple] | None:
    """``(merge index, pair)`` of the first merge whose token is not in the text's UTF-8 bytes but is in those of the
    text read back as Latin-1 and encoded again (mojibake: every learned token is a run of the bytes it trained on)."""
    data = text.encode("utf-8")
    twice = data.decode("latin-1").encode("utf-8")
    return next(((j, (a, b)) for j, (a, b) in enumerate(merges) if a + b not in data and a + b in twice), None)


def _training(**options: Any) -> Reference:
    """The plain trainer with ``options`` on the case: a zero-argument callable, called only when compared."""
    fields = dict(what="training") if "text_as" in options and options["text_as"] not in ("strip", "lower") else {}
    return Reference(lambda c: [(fields, lambda: _plain_train(*c.case, **options))])


def _returned(got: Any) -> str:
    """What is wrong with train_bpe's return value ('' when it is (vocab, merges) of the right types)."""
    if not (isinstance(got, (tuple, list)) and len(got) == 2):
        return "pair"
    vocab, merges = got
    if not isinstance(vocab, Mapping) or not all(isinstance(k, int) and isinstance(v, bytes) for k, v in vocab.items()):
        return "vocab"
    merges = list(merges) if isinstance(merges, (list, tuple)) else merges
    if not isinstance(merges, list) or not all(isinstance(m, (tuple, list)) and len(m) == 2 for m in merges):
        return "merges"
    if merges and not all(isinstance(x, bytes) for m in merges for x in m):
        return "merge ids"
    return ""


def _code_point(c: Any) -> dict | None:
    """A KeyError on a character's code point (vocab[ord(ch)] of an emoji): pieces of characters."""
    key = c.exc.args[0] if isinstance(c.exc, KeyError) and c.exc.args else None
    if isinstance(key, int) and 256 <= key < 0x110000 and chr(key) in c.text:
        return dict(key=key, char=chr(key))
    return None


def _character_key(c: Any) -> dict | None:
    """A KeyError on one character of the text (vocab[ch], pieces of str): pieces of characters, not ids."""
    key = c.exc.args[0] if isinstance(c.exc, KeyError) and c.exc.args else None
    return dict(key=key) if isinstance(key, str) and len(key) == 1 and key in c.text else None


def _made_up_id(c: Any) -> dict | None:
    """A KeyError on an id no token has, whose digits hold a merged token's id: ids merged as text."""
    key = c.exc.args[0] if isinstance(c.exc, KeyError) and c.exc.args else None
    if isinstance(key, int) and not isinstance(key, bool) and key >= c.vocab_size and any(
            str(key).startswith(str(i)) or str(key).endswith(str(i)) for i in range(256, c.vocab_size)):
        return dict(key=key)
    return None


def _found(found: tuple) -> dict:
    return dict(zip(("j", "pair", "n", "top", "n_top"), found))


def _ran_out(exc: BaseException) -> bool:
    """What a loop raises that picks a best pair among none: max() of nothing (ValueError), the first of an
    empty most_common() or sorted list (IndexError), next() of nothing, or the student's own "no pairs"."""
    return (isinstance(exc, (ValueError, IndexError, StopIteration)) and not isinstance(exc, UnicodeError)
            and (not isinstance(exc, ValueError) or "empty" in str(exc) or "pair" in str(exc).lower()))


_TIE_KEY = "key=lambda p: (counts[p], vocab[p[0]], vocab[p[1]])"

TRAIN = Catalogue("train_bpe", "11", [
    Entry("time limit", None, Probe("call_student_within")),
    Entry("no stop when pairs run out",
          "the training loop does not stop when no pair is left to merge (it hangs)", Probe("call_student_within")),
    Entry("values differ", None, Output(lambda exc: isinstance(exc, NotImplementedError), "helper"),
          "your train_bpe calls your {name}, which is not written yet (it raises NotImplementedError): write {name} "
          "first (check_{name}({name})), or use the reference meanwhile: from course_utils import {name}."),
    Entry("values differ", None, Output(lambda exc: True, "helper"),
          "your train_bpe calls your {name}, which raises on its own check: {raised}\n    Fix {name} first "
          "(check_{name}({name}))."),
    Entry("characters instead of bytes", "encoding starts a piece from its characters, not one token per UTF-8 byte",
          Output(_code_point, "code point"),
          "your code raised {raised}\n    {key} is ord({char!r}), a character's code point, not an id: "
          + _FROM_CHARACTERS + "\n    {case}"),
    Entry("characters instead of bytes", None, Output(_character_key, "code point"),
          "your code raised {raised}\n    {key!r} is a character of the text (a str), not a token id: your pieces hold "
          "characters. " + _FROM_CHARACTERS[0].upper() + _FROM_CHARACTERS[1:] + "\n    {case}"),
    Entry("ids joined as a string", None, Output(_made_up_id, "raised"),
          "your code raised {raised}\n    No token has the id {key}: your merges made it. If merge_pair replaces the "
          "pair in the ids written out as text (' '.join(map(str, ids)).replace(...)), ids of several digits collide: "
          "for example '32 101' holds '32 10', and merging (32, 10) into 256 gives '2561'. Compare the ids "
          "themselves: (ids[i], ids[i + 1]) == pair."),
    Entry("no stop when pairs run out", None,
          Output(lambda c: _ran_out(c.exc) and c.n < c.n_merges, "raised"),
          "your code raised {raised}\n    This text has no pair left after {n} merges, before the vocabulary reaches "
          "vocab_size: stop the loop when count_pairs returns nothing (if not counts: break).\n    {case}"),
    Entry("wrong return", None, Output(lambda got: _returned(got) == "pair" and dict(
        type=_got(got), length=f" of length {len(got)}" if isinstance(got, (tuple, list)) else ""), "return"),
          "train_bpe should return (vocab, merges), got {type}{length}."),
    Entry("wrong return", None, Output(lambda got: _returned(got) == "vocab", "return"),
          "train_bpe's vocab should be a dict {{id (int): token (bytes)}}, such as {{104: b'h', 256: b'th'}}."),
    Entry("wrong return", None, Output(lambda got: _returned(got) == "merges", "return"),
          "train_bpe's merges should be a list of pairs, such as [(b't', b'h'), ...]."),
    Entry("wrong return", None, Output(lambda got: _returned(got) == "merge ids" and dict(first=list(got[1])[0]),
                                       "return"),
          "train_bpe's merges should be pairs of byte strings (vocab[a], vocab[b]), such as (b't', b'h'), not ids or "
          "text: got {first!r} first."),
    dataclasses.replace(_CARRIED, meaning=None),  # declared by count_pairs' table
    Entry("special tokens given as a tuple ignored",
          "special_tokens ignored unless a list (a tuple names them as well)",
          Output(lambda c: isinstance(c.specials, tuple) and c.merges == train_bpe(c.text, c.vocab_size)[1], "tuple"),
          "special_tokens given as a tuple were ignored (isinstance(special_tokens, list)?): " + literal(_TUPLE)
          + "\n    {case}"),
    Entry("merges sorted",
          "the merges put in sorted order (sorted(merges)): the learned order, which encoding follows, lost",
          Output(lambda c: c.got != c.expected and c.got == sorted(c.expected), "count"),
          "your merges are the right ones in sorted order (sorted(merges)?): " + _SORTED + " Return them as learned."
          "\n    {case}"),
    Entry("wrong number of merges",
          "vocab_size misread: more or fewer merges than vocab_size - 256 - len(special_tokens)",
          Output(lambda c: c.got != c.expected and c.expected == c.got[:len(c.expected)]
                 and len(c.expected) == c.n_expected, "count"),
          "you learned {n_got} merges, expected {n_expected}: vocab_size counts every token, the 256 bytes and the "
          "{n_specials} special token(s) included, so the loop makes vocab_size - 256 - len(special_tokens) merges."
          "\n    {case}"),
    Entry("wrong number of merges", None,
          Output(lambda c: len(c.expected) == c.n_expected and c.one_short(), "count"),
          "you learned {n_got} merges, expected {n_expected}: one merge too few (vocab_size - 257, or range(257, "
          "...)?). vocab_size counts every token: the 256 bytes, one per merge, and the {n_specials} special "
          "token(s), so the loop makes vocab_size - 256 - len(special_tokens) merges: for new_id in range(256, "
          "vocab_size - len(special_tokens)).\n    {case}"),
    Entry("stopped while pairs remained", "training stops at a minimum count (a pair occurring once is still merged)",
          Output(lambda c: c.stopped_everywhere(), "count"),
          "you learned {n_got} merges, expected {n_ref}: you stopped while pairs remained (a minimum count, `if "
          "counts[best] < 2: break`?); a pair that occurs once is still merged: stop only when no pair is left or the "
          "vocabulary has vocab_size tokens.\n    {case}"),
    Entry("wrong number of merges", None, Output(lambda c: not c.got and c.expected, "count"),
          "your merges are empty, expected {n_ref}: no merge was learned (a half-written train_bpe, a loop that never "
          "runs, or merges never appended?). Loop for new_id in range(256, vocab_size - len(special_tokens)): count "
          "the pairs, stop if none is left, merge the most frequent in every piece and append it to merges."
          "\n    {case}"),
    Entry("wrong number of merges", None, Output(lambda c: c.got == c.expected[:len(c.got)], "count"),
          "you learned {n_got} merges, expected {n_ref}: vocab_size counts every token; stop when the vocabulary has "
          "vocab_size tokens, special tokens included (or when no pair is left).\n    {case}"),
    Entry("across pre-token boundaries", None, _training(split="none"),
          "your merges cross the pieces of GPT-2's pre-tokenization: cut each part of the text with pretokenize(...) "
          "and count pairs inside each piece only, never across two.{inputs}"),
    Entry("leading space dropped",
          "the pieces lose the space before each word (text.split() instead of GPT-2's pattern)",
          _training(split="whitespace"),
          "your pieces lose their spaces (text.split()?): GPT-2's pieces keep the space before a word (' world'), so "
          "merges such as (b' ', b'w') exist; use pretokenize(...).{inputs}"),
    Entry("special tokens trained on", "the special tokens' characters are trained on instead of cut out first",
          _training(specials_out=False),
          "the special tokens' characters were trained on: cut them out first with split_special_tokens(text, "
          "special_tokens) and skip the special pieces.{inputs}"),
    Entry("special tokens replaced by a space",
          "training replaces each special token by a space instead of splitting at it", _training(specials_out=" "),
          "each special token is replaced by a space (text.replace(token, ' ')?): the space then joins the next word "
          "('Hello' becomes ' Hello') and makes pairs the text does not hold. Split the text at the special tokens "
          "(split_special_tokens) and train on the parts.{inputs}"),
    Entry("documents glued together", "training deletes the special tokens, gluing the texts on both sides into one",
          _training(specials_out=""),
          "the special tokens are deleted from the text (text.replace(token, '')?), which glues the texts on both "
          "sides together ('ab<|endoftext|>cd' becomes 'abcd', one piece). Split the text at the special tokens "
          "(split_special_tokens) and train on the parts.{inputs}"),
    Entry("whitespace collapsed", "training collapses runs of spaces and newlines (' '.join(text.split())) first",
          _training(split="collapsed"),
          "runs of spaces and newlines become one space (' '.join(text.split())?): the pieces GPT-2's pattern makes "
          "of '  ' or '\\n' are lost. Pre-tokenize the text as it is, pretokenize(part).{inputs}"),
    Entry("piece counts ignored", None, _training(weighted=False),
          "each distinct piece counts once: weight its pairs by how often the piece occurs in the text.{inputs}"),
    Entry("pair counted once per piece", None, _training(counting="set"),
          "your pair counts count a pair once per piece (a set of the piece's pairs?): a pair that occurs twice in "
          "one piece counts twice, `for pair in zip(word, word[1:])`.{inputs}"),
    Entry("overlapping pairs counted once", None, _training(counting="no overlap"),
          "your pair counts skip overlapping pairs: a run a a a holds the pair (a, a) twice, at positions 0 and 1; "
          "count every position, `zip(word, word[1:])`.{inputs}"),
    Entry("merge not applied", "training records each merge but does not rewrite the pieces with it",
          _training(apply=False),
          "each merge is recorded but the pieces are not rewritten: after picking the best pair, replace it in every "
          "piece (merge_pair with the new id), so that the next count sees the merged token.{inputs}"),
    Entry("ties broken differently",
          "ties between the most frequent pairs not given to the greatest pair of byte strings", _training(tie="ids"),
          "ties are broken by comparing the token ids (a, b); the exercise compares their byte strings: max(..., "
          f"{_TIE_KEY})." + "{inputs}"),
    Entry("ties broken differently", None, _training(tie="first"),
          "ties go to the pair counted first (max(counts, key=counts.get)); the exercise gives them to the greatest "
          f"pair of byte strings: {_TIE_KEY}." + "{inputs}"),
    Entry("ties broken differently", None, _training(tie="joined"),
          "ties are broken by the two byte strings joined (vocab[a] + vocab[b]); the exercise compares the pair: "
          "first byte strings, then second ones. They differ when the first token of one pair is a prefix of the "
          "other's: (b'ab', b'a') beats (b'a', b'bz') as a pair, but b'aba' < b'abz' joined. Use max(..., "
          f"{_TIE_KEY})." + "{inputs}"),
    Entry("ties broken differently", None, _training(tie="text"),
          "ties are broken by the tokens decoded to text; the exercise compares their byte strings. A token holding "
          "part of a character (the first bytes of an emoji) decodes to '\ufffd' like every other part, so those ties "
          f"are left to chance: compare bytes, {_TIE_KEY}." + "{inputs}"),
    Entry("ties broken differently", None, _training(tie="smallest"),
          "ties go to the smallest pair of byte strings; the exercise gives them to the greatest: max(..., "
          f"{_TIE_KEY})." + "{inputs}"),
    Entry("text stripped", "training strips the text first: the spaces and newlines at its ends are not trained on",
          _training(text_as="strip"),
          "the text was stripped first (text.strip()?): the spaces and newlines at its ends are text too, and their "
          "pairs ((b'\\n', b'\\n')) are counted and merged. Train on the text as it is.{inputs}"),
    *[Entry("text normalised",
            "the text normalised (unicodedata.normalize, NFC or NFKC): BPE works on the bytes as given",
            _training(text_as=form), _NORMALISED + "{inputs}") for form in ("NFC", "NFKC")],
    Entry("only the first special token cut",
          "the text is cut at special_tokens[0] only: the others are trained on, or encoded as ordinary text",
          _training(cut_at=1),
          "the text is cut at the first special token only (text.split(special_tokens[0])?): the characters of the "
          "others ('<|pad|>') were trained on. Cut it at every one: split_special_tokens(text, special_tokens), and "
          "skip the special pieces.{inputs}"),
    *[Entry("pre-tokenizer differs",
            "a pattern of Python's re instead of pretokenize: '_' dropped or in words, '²' cut",
            _training(split=split), literal(_PATTERN_SAID[split]) + "{inputs}")
      for split in _RE_PATTERNS],
    *[Entry("special tokens not escaped",
            "special tokens cut by re.split('|'.join(...)) without re.escape: '|' alternates",
            _training(unescaped=how), literal(_UNESCAPED) + "{inputs}")
      for how in ("kept", "dropped")],
    Entry("text lowercased",
          "training lowercases the text first (text.lower()): capitals are other bytes, learned as given",
          _training(text_as="lower"),
          "the text was lowercased first (text.lower()?): BPE works on the bytes as given, 'THE' and 'the' are other "
          "bytes, and GPT-2's vocabulary holds both. Train on the text as it is.{inputs}"),
    Entry("pre-tokenizer differs", None, Output(lambda c: c.spans and dict(token=c.spans, j=c.merges.index(
        next(m for m in c.merges if m[0] + m[1] == c.spans))), "pieces"),
          "your merge {j} makes {token!r}, which " + _SPANS + "\n    {case}"),
    Entry("wrong number of merges", None, Output(lambda c: c.k is None, "first difference"),
          "you learned {n_got} merges, expected {n_ref}.\n    {case}"),
    Entry("text re-encoded", "training runs on the text's UTF-8 read back as Latin-1 and encoded again (mojibake "
          "bytes), not on text.encode('utf-8')",
          Output(lambda c: c.recoded and dict(j=c.recoded[0], pair=c.recoded[1]), "characters"),
          "your merge {j}, {pair!r}, is not in the text's UTF-8 bytes, but is in the bytes of the text read back as "
          "Latin-1 and encoded again (text.encode('utf-8').decode('latin-1')?): é is b'\\xc3\\xa9', and 'Ã©' encoded "
          "again b'\\xc3\\x83\\xc2\\xa9'. Train on each piece's bytes, piece.encode('utf-8'), encoded once.\n    "
          "{inputs}"),
    Entry("characters instead of bytes", None,
          Output(lambda c: c.unit and dict(j=c.unit[0], pair=c.merges[c.unit[0]], part=c.unit[1], what=c.unit[2]),
                 "characters"),
          "your merge {j}, {pair!r}, joins {part!r}, which is {what}: " + _FROM_CHARACTERS + "\n    {inputs}"),
    Entry("counts not updated after a merge", "training merges a pair no piece holds any more (counts not redone)",
          Output(lambda c: c.found and c.found[2] == 0 and _found(c.found), "recount"),
          "at your merge {j} you merged {pair!r}, which no piece holds any more at that point (after your own "
          "merges), while {top!r} occurs {n_top} times: your pair counts are not updated after a merge (counted once "
          "before the loop?). Recount (count_pairs) or update the counts after each merge.\n    {case}"),
    Entry("values differ", None, Output(lambda c: c.found and _found(c.found), "recount"),
          "your pair counts differ from the text's: at your merge {j} you merged {pair!r}, which occurs {n} times "
          "inside the pieces at that point (after your own merges), while {top!r} occurs {n_top} times. Count every "
          "adjacent pair of every piece, times the piece's count: a set of pairs per piece, skipped overlapping "
          "pairs, pieces cut another way or counts not redone after a merge all change them.\n    {case}"),
    Entry("ties broken differently", None, Output(lambda c: c.tie, "recount"),
          "{where}; both pairs occur {n_ref} times at that point: a tie. Among the most frequent pairs the greatest "
          f"pair of byte strings wins: max(..., {_TIE_KEY}).\n    " + "{case}"),
    Entry("values differ", None, Output(lambda c: True, "recount"),
          "{where}; at that point {mine!r} occurs {n_mine} times inside the pieces and {ref!r} {n_ref} times.\n    "
          "{case}"),
    Entry("special tokens not added", "the special tokens are missing from the trained vocabulary",
          Output(lambda c: (missing := [t for t in c.specials if t.encode() not in c.vocab.values()])
                 and dict(token=missing[0]), "vocab"),
          "the special token {token!r} is not in your vocab: add it after the merges, as its UTF-8 bytes "
          "(vocab[len(vocab)] = token.encode('utf-8')).\n    {case}"),
    Entry("values differ", None, Output(lambda c: any(c.vocab.get(i) != c.expected[i] for i in range(256)), "vocab"),
          "your vocab's ids 0-255 should be the single bytes, vocab[i] == bytes([i]).\n    {case}"),
    Entry("merged ids not from 256", "the merged tokens' ids do not run 256, 257, ... (a gap or another start)",
          Output(lambda c: c.same_tokens and c.merges and c.ids.get(c.first) != 256 and all(
              c.ids[t.encode()] > c.ids.get(a + b, -1) for t in c.specials for a, b in c.merges), "vocab"),
          "your first merged token {first!r} has the id {first_id}; the first merged token must get id 256, the first "
          "free id after the 256 single bytes (0-255), and merge k the id 256 + k, with no gap.\n    {case}"),
    Entry("special token ids after a gap",
          "special tokens given the ids below vocab_size, not straight after the last merge",
          Output(lambda c: c.same_tokens and c.special_ids == list(range(c.vocab_size - len(c.specials),
                                                                         c.vocab_size)), "vocab"),
          "your special tokens have the last ids below vocab_size, {below} onward; this text ran out of pairs after "
          "{n_merges} merges, so that leaves a gap of ids no token has. The special tokens' ids continue straight "
          "after the last merge: vocab[len(vocab)] = token.encode('utf-8'), ids {after} onward here.\n    {case}"),
    Entry("special tokens reordered",
          "the special tokens take the ids after the merges in another order than the one given",
          Output(lambda c: c.same_tokens and sorted(c.special_ids) == list(range(c.after, c.after + len(c.specials)))
                 and c.special_ids != sorted(c.special_ids), "vocab"),
          "your special tokens {specials} have the ids {special_ids}: they take their ids in the order given, "
          "special_tokens[0] gets the first id after the merges ({after}), special_tokens[1] the next, and so on "
          "(sorted(...), set(...) or reversed(...) changes the order): for token in special_tokens: vocab[len(vocab)] "
          "= token.encode('utf-8').\n    {case}"),
    Entry("wrong special token ids", "the special tokens are not the vocabulary's last ids, after the merged tokens",
          Output(lambda c: c.same_tokens, "vocab"),
          "the special tokens should come last, after the merged tokens (ids {after} onward); yours have the ids "
          "{special_ids}.\n    {case}"),
    Entry("state carried over between calls", None, Output(lambda c: not c.wrong, "vocab"),
          "your vocab holds ids no token of this training has (vocab[{i}] is {token!r}, after the last one, {last}): "
          "left over from an earlier call? A vocab shared between calls (a global base dict without .copy(), a "
          "mutable default argument) keeps them: build it afresh in each call, {{i: bytes([i]) for i in range(256)}}."
          "\n    {case}"),
    Entry("values differ", None, Output(lambda c: True, "vocab"),
          "vocab[{i}] is {token!r}, expected {expected_token!r}: merge k makes id 256 + k, whose bytes are the pair's "
          "two byte strings joined.\n    {case}"),
    Entry("no stop when pairs run out", None, Output(lambda c: c.merges != c.expected, "run out"),
          "{case} learned {merges!r}, expected {expected!r}: when no pair is left (every piece is one token), stop: "
          "there is nothing more to merge."),
])


def _as_training(got: Any) -> tuple[dict, list]:
    TRAIN.detect("return", got)
    vocab, merges = got
    return dict(vocab), [tuple(m) for m in merges]


def _diagnose_merges(text: str, vocab_size: int, specials: list[str], got: list, expected: list,
                     others: Sequence[tuple[str, int, list[str]]] = (),
                     theirs: Callable[[str, int, list[str]], list | None] = lambda *case: None) -> None:
    """Name the mistake behind ``got`` (the student's merges on this case). Where several variants give
    ``got``, the student's merges on the ``others`` cases (``theirs``, None if unknown) pick one."""
    case = _train_case(text, vocab_size, specials)

    def stopped_early(text: str, specials: list[str], got: list | None, expected: list) -> bool:
        """Stopped short where the most frequent pair left occurs once (None, the student's code failing: no)."""
        return (got is not None and len(got) < len(expected) and got == expected[:len(got)]
                and max(_counts_before(text, specials, got).values(), default=0) == 1)

    # a minimum count stops where the best pair occurs once, on every text; one merge too few stops anywhere
    def stopped_everywhere() -> bool:
        return stopped_early(text, specials, got, expected) and all(
            stopped_early(t, s, m, e) or m == e
            for t, v, s in others for m, e in [(theirs(t, v, s), train_bpe(t, v, s)[1])])

    def one_short_everywhere() -> bool:  # vocab_size - 257: the last merge missing on every text that reaches it
        return got == expected[:-1] and all((m := theirs(t, v, s)) is not None and m in (e, e[:-1])
                                            for t, v, s in others for e in [train_bpe(t, v, s)[1]])

    TRAIN.detect("count", SimpleNamespace(got=got, expected=expected, n_expected=vocab_size - 256 - len(specials),
                                          stopped_everywhere=stopped_everywhere, one_short=one_short_everywhere),
                 n_got=len(got), n_expected=vocab_size - 256 - len(specials), n_specials=len(specials),
                 n_ref=len(expected), case=case)
    named = TRAIN.candidates(SimpleNamespace(case=(text, vocab_size, specials)), inputs="\n    " + case)
    matches = [v for v, (_, _, make) in enumerate(named) if got == make()]
    for other in others:
        if not matches:
            break
        merges = theirs(*other)
        if merges is None:
            continue
        made = _made(TRAIN, SimpleNamespace(case=other))
        kept = [v for v in matches if merges == made[v]()]
        # several names: the other texts pick one; one name: it must hold there too (a variant that
        # gives the student's merges on one text by chance is not their mistake)
        matches = kept if len({named[v][0] for v in matches}) < 2 else (kept or matches)
    if matches:
        name, message, _ = named[matches[0]]
        fail(message, mistake=name)
    # a merged token that spans two of GPT-2's pieces: here, or on another text
    for other, merges in [((text, vocab_size, specials), got), *((o, None) for o in others)]:
        merges = merges if merges is not None else theirs(*other) or []
        spans = _spanning(other[0], _pieces(other[0], other[2]), [a + b for a, b in merges])
        TRAIN.detect("pieces", SimpleNamespace(spans=spans, merges=merges), case=_train_case(*other))
    k = next((i for i in range(min(len(got), len(expected))) if got[i] != expected[i]), None)
    TRAIN.detect("first difference", SimpleNamespace(k=k), n_got=len(got), n_ref=len(expected), case=case)
    # merges that start from characters: here, or on another text (where the first merges differ for another reason)
    for other, merges in [((text, vocab_size, specials), got), *((o, None) for o in others)]:
        merges = merges if merges is not None else theirs(*other)
        TRAIN.detect("characters", SimpleNamespace(unit=merges and _character_unit(other[0], merges), merges=merges,
                                                   recoded=merges and _re_encoded(other[0], merges)),
                     inputs=_train_case(*other))
    counts = _counts_before(text, specials, expected[:k])
    mine, ref = got[k], expected[k]
    # a tie only if each of the student's merges was a most frequent pair of the pieces as their own merges left them,
    # here and in the other cases
    found = _not_most_frequent(text, specials, got, expected)
    for other in others if found is None and counts.get(mine, 0) == counts[ref] else ():
        merges = theirs(*other)
        found = merges and _not_most_frequent(other[0], other[2], merges, train_bpe(*other)[1])
        if found:
            case = _train_case(*other)
            break
    TRAIN.detect("recount", SimpleNamespace(found=found, tie=counts.get(mine, 0) == counts[ref]), case=case,
                 where=f"merge {k} (the first that differs): you merged {mine!r}, expected {ref!r}", mine=mine,
                 ref=ref, n_mine=counts.get(mine, 0), n_ref=counts[ref])


def _check_vocab(vocab: dict, merges: list, specials: list[str], case: str, vocab_size: int) -> None:
    expected = {i: bytes([i]) for i in range(256)}
    for a, b in merges:
        expected[len(expected)] = a + b
    for token in specials:
        expected[len(expected)] = token.encode()
    if vocab == expected:
        return
    ids = {v: k for k, v in vocab.items()}
    wrong = [i for i in expected if vocab.get(i) != expected[i]]
    i = wrong[0] if wrong else max(set(vocab) - set(expected))  # else: every token right, and more ids
    first = merges[0][0] + merges[0][1] if merges else None
    special_ids = [ids.get(t.encode()) for t in specials]
    c = SimpleNamespace(vocab=vocab, expected=expected, specials=specials, merges=merges, ids=ids, first=first,
                        same_tokens=sorted(vocab.values()) == sorted(expected.values()),  # the right tokens, other ids
                        special_ids=special_ids, vocab_size=vocab_size, wrong=wrong,
                        after=len(expected) - len(specials))
    TRAIN.detect("vocab", c, case=case, first=first, first_id=ids.get(first), below=vocab_size - len(specials),
                 n_merges=len(merges), after=c.after, special_ids=special_ids, specials=specials, i=i,
                 token=vocab.get(i, "no such id"), last=len(expected) - 1, expected_token=expected.get(i))


def _their_merges(train_bpe_fn: Callable[..., Any], text: str, vocab_size: int, specials: list[str]) -> list | None:
    """The student's merges on another case, or None where their code fails on it."""
    try:
        return _as_training(_run(train_bpe_fn, text, vocab_size, specials, name="train_bpe", what=text[:30]))[1]
    except StudentError as err:
        TRAIN.detect("code point", SimpleNamespace(exc=err.exc, text=text), raised=raised(err.exc),
                     case=_train_case(text, vocab_size, specials))
        return None
    except Failure:
        return None


def _fail_helper(train_bpe_fn: Callable[..., Any]) -> None:
    """Blame the student's own count_pairs or merge_pair, where their train_bpe calls one that fails its check."""
    names = names_used(train_bpe_fn)  # the names it and the functions defined in it read
    helpers = getattr(train_bpe_fn, "__globals__", {})
    for name, check in (("count_pairs", check_count_pairs), ("merge_pair", check_merge_pair)):
        helper = helpers.get(name) if name in names else None
        if not callable(helper) or str(getattr(helper, "__module__", "")).startswith("course_utils."):
            continue
        try:
            with torch.random.fork_rng(devices=[]):
                check.__wrapped__(helper)  # the check's body: no verdict shown
        except Failure as err:  # named as the helper's own check names it (COUNT's or MERGE's table)
            fail(f"your train_bpe calls your {name}, which fails its own check: {err.message}\n    Fix {name} first "
                 f"(check_{name}({name})); the merges follow from it.", mistake=err.mistake)
        except StudentError as err:
            TRAIN.detect("helper", err.exc, name=name, raised=raised(err.exc))


def _train(train_bpe_fn: Callable[..., Any], text: str, vocab_size: int, specials: list[str],
           **limit: str) -> tuple[dict, list]:
    """The student's (vocab, merges), an error of theirs named where it can be."""
    try:
        return _as_training(_run(train_bpe_fn, text, vocab_size, specials, name="train_bpe",
                                 what=f"{text[:30]!r}..., {vocab_size}, {specials}", **limit))
    except StudentError as err:
        _fail_helper(train_bpe_fn)
        fields = dict(raised=raised(err.exc), case=_train_case(text, vocab_size, specials))
        TRAIN.detect("code point", SimpleNamespace(exc=err.exc, text=text), **fields)
        n = len(train_bpe(text, vocab_size, specials)[1])
        TRAIN.detect("raised", SimpleNamespace(exc=err.exc, vocab_size=vocab_size, n=n,
                                               n_merges=vocab_size - 256 - len(specials)), n=n, **fields)
        raise


@checker("train_bpe")
def check_train_bpe(train_bpe_fn):
    require_function(train_bpe_fn, "train_bpe")
    cases = _train_cases() + _train_variants_differ()
    for text, vocab_size, specials in cases:
        vocab, merges = _train(train_bpe_fn, text, vocab_size, specials)
        expected = train_bpe(text, vocab_size, specials)
        again = lambda: _train(train_bpe_fn, text, vocab_size, specials)  # noqa: E731
        if (vocab, merges) != expected:
            _fail_carried_over((vocab, merges), again, "train_bpe", _train_case(text, vocab_size, list(specials)))
        expected = expected[1]
        if merges != expected:
            _fail_helper(train_bpe_fn)
            TRAIN.detect("tuple", SimpleNamespace(specials=specials, merges=merges, text=text, vocab_size=vocab_size),
                         case=_train_case(text, vocab_size, specials))
            _diagnose_merges(text, vocab_size, list(specials), merges, expected, cases,
                             lambda *other: _their_merges(train_bpe_fn, *other))
        _check_vocab(vocab, merges, list(specials), _train_case(text, vocab_size, list(specials)), vocab_size)
    # a text that runs out of pairs before vocab_size: the loop must stop, the special token's id follows the merges
    text, specials = "ab " * randint(2, 4) + ENDOFTEXT, [ENDOFTEXT]
    vocab, merges = _train(train_bpe_fn, text, 400, specials, mistake="no stop when pairs run out",
                           why="this text has only 2 merges to learn before every piece is one token; stop the loop "
                               "when no pair is left (if not counts: break).")
    expected = train_bpe(text, 400, specials)[1]
    if merges != expected:
        _fail_helper(train_bpe_fn)
        TRAIN.detect("run out", SimpleNamespace(merges=merges, expected=expected),
                     case=_train_case(text, 400, specials), merges=merges, expected=expected)
    _check_vocab(vocab, merges, specials, _train_case(text, 400, specials), 400)
    return _passed(train_bpe_fn, f"{len(cases) + 1} texts with ties, repeated pieces, accents, emoji and special "
                   "tokens")


register_hints("train_bpe", [
    "Cut the text around the special tokens (split_special_tokens), drop the special pieces, pre-tokenize the rest "
    "(pretokenize) and count the pieces: words = Counter of tuple(piece.encode('utf-8')).",
    "Start from vocab = {i: bytes([i]) for i in range(256)}. Loop for new_id in range(256, vocab_size - "
    "len(special_tokens)): counts = count_pairs(words); stop if it is empty; pick the best pair; merge it in every "
    "piece with merge_pair; record vocab[new_id] and the merge as (vocab[a], vocab[b]).",
    "The best pair: max(counts, key=lambda p: (counts[p], vocab[p[0]], vocab[p[1]])). After the loop, add each special "
    "token: vocab[len(vocab)] = token.encode('utf-8').",
])


# ---------------------------------------------------------------- bpe_encode: one plain encoder and its variants
def _plain_encode(text: str, vocab: dict, merges: list, specials: Sequence[str], order: str = "rank",
                  split: str = "gpt2", specials_out: bool = True, byte_ids: bool = False,
                  hard_coded: bool | str = False, longest_first: bool = True, text_as: str = "",
                  computed_ids: bool = False, unescaped: str = "", cut_at: int | None = None) -> list[int]:
    if hard_coded:  # '<|endoftext|>' special whatever the argument says, or where it names none (a default)
        specials = list(specials or [ENDOFTEXT]) if hard_coded == "default" else [ENDOFTEXT]
    specials = list(specials)[:cut_at]  # cut_at=1: the text cut at special_tokens[0] only
    merges, order = (sorted(merges), "rank") if order == "sorted" else (merges, order)  # the learned order lost
    if computed_ids:  # each token's id computed: a byte's value, 256 + the rank of the merge that made it
        made = {a + b: 256 + r for r, (a, b) in reversed(list(enumerate(merges)))}
        special_bytes = {t.encode() for t in specials}
        tokens = [vocab[i] for i in _plain_encode(text, vocab, merges, specials)]
        return [{v: k for k, v in vocab.items()}[t] if t in special_bytes else t[0] if len(t) == 1 else made[t]
                for t in tokens]
    text = _prepared(text, text_as)
    ids_of = {v: k for k, v in sorted(vocab.items(), reverse=True)}
    ranks = {tuple(m): r for r, m in reversed(list(enumerate(merges)))}
    if split == "lines":  # each line on its own, the id of b'\n' between two lines
        lines = [_plain_encode(line, vocab, merges, specials, order=order) for line in text.split("\n")]
        return [i for k, line in enumerate(lines) for i in ([ids_of[b"\n"]] if k else []) + line]
    out: list[int] = []
    chunks = split_special_tokens(text, specials) if specials_out else [text]
    if specials_out and specials and not longest_first:  # a regular expression of the tokens in the order given
        chunks = [c for c in re.split("(" + "|".join(map(re.escape, specials)) + ")", text) if c]
    if unescaped:  # the special tokens as a regular expression without re.escape
        chunks = _split_unescaped(text, specials, unescaped == "kept")
    for chunk in chunks:
        if specials_out and chunk in specials:
            out.append(ids_of[chunk.encode()])
            continue
        if split == "none":
            pieces = [chunk]
        elif split == "whitespace":
            pieces = chunk.split()
        elif split in _RE_PATTERNS:
            pieces = re.findall(_RE_PATTERNS[split], chunk)
        else:
            pieces = pretokenize(chunk)
        for piece in pieces:
            parts = [bytes([b]) for b in piece.encode()]
            if order == "longest":  # WordPiece's habit: the longest token of the vocabulary, left to right
                data, parts = piece.encode(), []
                while data:
                    j = next(j for j in range(len(data), 0, -1) if data[:j] in ids_of)
                    parts.append(data[:j])
                    data = data[j:]
            if order == "one pass":  # one left-to-right pass, merging any learned pair met, never repeated
                merged, i = [], 0
                while i < len(parts):
                    if i + 1 < len(parts) and (parts[i], parts[i + 1]) in ranks:
                        merged.append(parts[i] + parts[i + 1])
                        i += 2
                    else:
                        merged.append(parts[i])
                        i += 1
                parts = merged
            while order not in ("longest", "one pass") and len(parts) > 1:
                pairs = [p for p in zip(parts, parts[1:])
                         if (p[0] + p[1] in ids_of if order == "in vocab" else p in ranks)]
                if not pairs:
                    break
                if order == "in vocab":  # any pair whose joined bytes are a token, the lowest id first
                    best = min(pairs, key=lambda p: ids_of[p[0] + p[1]])
                elif order in ("rank", "once"):
                    best = min(pairs, key=ranks.get)
                elif order == "latest":
                    best = max(pairs, key=ranks.get)
                elif order == "id as text":  # the joined token's id, compared as a string: '1000' < '999'
                    best = min(pairs, key=lambda p: str(ids_of[p[0] + p[1]]))
                elif order == "frequency":
                    best = max(pairs, key=lambda p: (pairs.count(p), -ranks[p]))
                elif order == "frequency first":  # Counter(pairs).most_common(1): a tie goes to the leftmost pair
                    best = max(pairs, key=pairs.count)
                else:  # "leftmost": the first learned pair found, left to right (merged there only, or everywhere)
                    best = pairs[0]
                if order == "once":  # the best pair merged, no loop repeating it
                    parts = merge_pair(parts, best, best[0] + best[1])
                    break
                if order == "leftmost once":
                    i = next(i for i in range(len(parts) - 1) if (parts[i], parts[i + 1]) in ranks)
                    parts = [*parts[:i], parts[i] + parts[i + 1], *parts[i + 2:]]
                    continue
                parts = merge_pair(parts, best, best[0] + best[1])
            out.extend(p[0] if byte_ids and len(p) == 1 else ids_of[p] for p in parts)
    return out


def _permuted(vocab: dict) -> dict:
    """``vocab`` with the 256 byte tokens' ids shuffled (as in GPT-2's files)."""
    order = torch.randperm(256).tolist()
    out = {order[i]: vocab[i] for i in range(256)}
    out.update({i: v for i, v in vocab.items() if i >= 256})
    return out


def _encode_cases() -> list[tuple[str, dict, list, list[str]]]:
    corpus = _text(randint(40, 60))
    vocab, merges = train_bpe(corpus, 256 + randint(20, 35) + 1, [ENDOFTEXT])
    shuffled = _permuted(vocab)
    # learned order against frequency and text order: bc was learned first, ab occurs more often
    # x! is a merge no piece of GPT-2's pattern holds (a letter, then punctuation): only code that merges across
    # pieces makes it
    small = {i: bytes([i]) for i in range(256)} | {256: b"bc", 257: b"ab", 258: b"abab", 259: b" a", 260: b"x!"}
    small_merges = [(b"b", b"c"), (b"a", b"b"), (b"ab", b"ab"), (b" ", b"a"), (b"x", b"!")]
    # sorted(small_merges) puts (a, b) before (b, c), the ids follow the merges: ranks from sorted merges give [ab, c]
    # on 'abc', ids compared as text the learned [a, bc]
    # two cases for the merge order alone: the latest merge first gives [a, bc] on 'abc' (the learned order
    # [ab, c]); the longest vocabulary match gives [abc, d] on 'abcd' (the learned order [ab, cd]). Ids follow the
    # merges, so an encoder that ranks a pair by its joined token's id (tiktoken's way) passes both
    two = {i: bytes([i]) for i in range(256)} | {256: b"ab", 257: b"bc"}
    freq = {i: bytes([i]) for i in range(256)} | {256: b"aa", 257: b"ab", 258: b"ba"}
    four = {i: bytes([i]) for i in range(256)} | {256: b"cd", 257: b"ab", 258: b"bc", 259: b"abc"}
    # ids of three and four digits that follow the merges: ids compared as text put '1000' (ab) before '999' (bc)
    wide = {i: bytes([i]) for i in range(256)} | {999: b"bc", 1000: b"ab"}
    # abc is a token, but (a, bc) no merge: merging any pair whose bytes are a token gives [abc], the merges [a, bc]
    made = {i: bytes([i]) for i in range(256)} | {256: b"bc", 257: b"ab", 258: b"abc"}
    return [
        # tried first: only the frequency order gives [a, ab, ab] (ab occurs twice, without a tie), every other order
        # of the catalogue [aa, b, ab] or [aa, ba, b]
        ("aabab", freq, [(b"a", b"a"), (b"a", b"b"), (b"b", b"a")], []),
        ("abc", two, [(b"a", b"b"), (b"b", b"c")], []),
        ("abcd", four, [(b"c", b"d"), (b"a", b"b"), (b"b", b"c"), (b"a", b"bc")], []),
        ("abc", wide, [(b"b", b"c"), (b"a", b"b")], []),
        ("abc", made, [(b"b", b"c"), (b"a", b"b"), (b"ab", b"c")], []),
        # 'ï' (two bytes) is in no merge: it stays two byte tokens
        ("abcabab abab x!ab naïve", small, small_merges, []),
        (_text(randint(10, 20)) + ENDOFTEXT + " the  end", vocab, merges, [ENDOFTEXT]),
        (_text(randint(10, 20)) + " " + ENDOFTEXT + "an", shuffled, merges, [ENDOFTEXT]),
        (" a" * 3 + "  ab " + ENDOFTEXT, small | {261: ENDOFTEXT.encode()}, small_merges, [ENDOFTEXT]),
        # two special tokens, one inside the other, given shortest first: the longer wins where both match
        ("ab" + ENDOFTEXT * 2 + " ab" + ENDOFTEXT, small | {261: ENDOFTEXT.encode(), 262: 2 * ENDOFTEXT.encode()},
         small_merges, [ENDOFTEXT, 2 * ENDOFTEXT]),
        # '<' and '>' outside the special token, in learned merges: an unescaped regular expression of the special
        # tokens cuts the text at each of them ('|' alternates), where the merges make '<<' and '<|' tokens
        ("a <<b>> <|" + ENDOFTEXT, small | {261: ENDOFTEXT.encode(), 262: b"<<", 263: b"<|"},
         [*small_merges, (b"<", b"<"), (b"<", b"|")], [ENDOFTEXT]),
        # special_tokens given as a tuple (any sequence of str), not a list
        ("ab" + ENDOFTEXT + " ab", small | {261: ENDOFTEXT.encode()}, small_merges, (ENDOFTEXT,)),
        # no special tokens asked for: '<|endoftext|>' (in the vocabulary) is ordinary text here
        (_text(randint(4, 8), special=False) + ENDOFTEXT + "the end", vocab, merges, []),
        # what Python's re and Unicode normalisation change: '_', '²', '½', 'ﬁ', an accent as a combining character
        (_text(randint(2, 5), special=False) + "snake_case(x_1) x² ½ ﬁne cafe\u0301", vocab, merges, []),
        # runs of newlines: GPT-2's pieces '\n\n' (a blank line, one token), then '\n' before 'b'
        ("a\n\n\nb end.\n\n", {i: bytes([i]) for i in range(256)} | {256: b"\n\n"}, [(b"\n", b"\n")], []),
        # two special tokens that do not overlap: cut at special_tokens[0] only, '<|endoftext|>' stays text
        ("ab<|pad|> ab" + ENDOFTEXT + "ab", small | {261: b"<|pad|>", 262: ENDOFTEXT.encode()}, small_merges,
         ["<|pad|>", ENDOFTEXT]),
    ]


def _encoded(case: tuple, options: dict) -> list[int] | None:
    """The plain encoder with a mistake (``options``) on ``case``, or None where it cannot run on it."""
    text, vocab, merges, specials = case
    try:
        return _plain_encode(text, vocab, merges, specials, **options)
    except KeyError:
        return None


def _encoding(fields: dict | None = None, **options: Any) -> Reference:
    """The plain encoder with ``options``: a zero-argument callable on the case, called only when compared."""
    return Reference(lambda c: [(fields or {}, lambda: _encoded(c.case, options))])


def _cache_kept(c: Any) -> dict | None:
    """One text under several vocabularies and merges, the same ids for all where they differ."""
    same = [k for k in range(len(c.cases)) if c.cases[k][0] == c.text]
    if len({tuple(c.results[k][1]) for k in same}) == 1 < len({tuple(c.results[k][2]) for k in same}):
        inputs, you, expected = c.results[same[-1]]
        return dict(text=c.text, n=len(same), inputs=inputs, you=_show(you), expected=_show(expected), k=same[0],
                    utf8=list(c.text.encode()))
    return None


def _printable_key(exc: BaseException) -> dict | None:
    """A KeyError on a str of GPT-2's printable table holding a stand-in character ('Ġ' for b' '): the table's
    characters used as tokens."""
    key = exc.args[0] if isinstance(exc, KeyError) and exc.args else None
    table = bytes_to_unicode()
    stand_ins = {ch for b, ch in table.items() if ch != chr(b)}
    if isinstance(key, str) and key and set(key) <= set(table.values()) and set(key) & stand_ins:
        return dict(key=key)
    return None


def _first_multibyte_key(exc: BaseException) -> dict | None:
    """A KeyError on the bytes of one character of several bytes: the piece was cut into characters."""
    key = exc.args[0] if isinstance(exc, KeyError) and exc.args else None
    try:
        char = key.decode("utf-8") if isinstance(key, bytes) and len(key) > 1 else ""
    except UnicodeDecodeError:
        char = ""
    return dict(key=key, char=char, n=len(key)) if len(char) == 1 else None


def _specials_lost(c: Any) -> dict | None:
    """Special tokens of the text missing from the decoded ids, which are the text without them."""
    lost = [t for t in c.specials if t in c.text and t not in c.back]
    return dict(token=lost[0]) if lost and c.back == re.sub("|".join(map(re.escape, lost)), "", c.text) else None


def _not_int_ids(got: Any) -> dict | None:
    """What is wrong with ``got`` as a list of int ids: its type, or the first item that is no int (its index)."""
    if not isinstance(got, (list, tuple)):
        return dict(type=_got(got), holding="")
    k = next((k for k, i in enumerate(got) if isinstance(i, bool) or not isinstance(i, int)), None)
    return None if k is None else dict(type=type(got).__name__,
                                       holding=f" whose item {k} is {_type(got[k])} ({got[k]!r:.40})")


def _special_id_guessed(c: Any) -> dict | None:
    """Every wrong result differs from the expected ids only where a special token's id belongs: its id was worked
    out (len(vocab) - 1, a fixed number), not looked up."""
    found = None
    for k in c.wrong:
        (_, got, expected), (_, vocab, _, specials) = c.results[k], c.cases[k]
        ids = {v: i for i, v in vocab.items()}
        special_ids = {ids.get(t.encode()): t for t in specials}
        differ = [j for j in range(len(got)) if got[j] != expected[j]] if len(got) == len(expected) else [None]
        if not differ or any(j is None or expected[j] not in special_ids for j in differ):
            return None
        j = differ[0]
        found = found or dict(token=special_ids[expected[j]], mine=got[j], theirs=expected[j], case=c.results[k][0],
                              guess=" (len(vocab) - 1, the last id?)" if got[j] == len(vocab) - 1 else "")
    return found


_LOWEST_RANK = "at each step the adjacent pair with the lowest rank (its index in merges)"

ENCODE = Catalogue("bpe_encode", "11", [
    Entry("time limit", None, Probe("call_student_within")),
    Entry("characters instead of bytes", None,
          Output(_first_multibyte_key, "raised"),
          "your code raised {raised}\n    {key!r} is the character {char!r}, {n} bytes, which no merge joins: you "
          "start each piece from its characters ([c.encode() for c in piece]?). Start from the piece's UTF-8 bytes, "
          "one token per byte, [bytes([b]) for b in piece.encode('utf-8')]: a character of 2-4 bytes is 2-4 tokens "
          "until merges join them.\n    {case}"),
    Entry("printable table used as tokens",
          "GPT-2's printable characters (bytes_to_unicode, 'Ġ' for a space) used as tokens instead of raw bytes",
          Output(_printable_key, "raised"),
          "your code raised {raised}\n    {key!r} is a character of GPT-2's printable table (bytes_to_unicode: "
          "'Ġ' stands for a space): vocab maps ids to raw bytes; the printable table is only for reading the files. "
          "Start each piece from its bytes, [bytes([b]) for b in piece.encode('utf-8')], and look tokens up by "
          "their bytes, {{token: id for id, token in vocab.items()}}.\n    {case}"),
    Entry("pair with no rank compared",
          "encoding ranks pairs by rank.get(p) with no default: None compared with an int",
          Output(lambda exc: isinstance(exc, TypeError) and re.search(
              r"'<' not supported between instances of '(int|NoneType)' and '(int|NoneType)'", str(exc)), "raised"),
          "your code raised {raised}\n    A pair that is no merge has no rank, and rank.get(p) gives None for it, "
          "which min() cannot compare with an int. Give such a pair an infinite rank, min(pairs, key=lambda p: "
          "rank.get(p, float('inf'))), and stop when the best pair has no rank (if best not in rank: break)."
          "\n    {case}"),
    Entry("input modified in place", None, Output(lambda c: c.given != c.before, "input"),
          "your bpe_encode changed its argument `{name}` in place (merges.sort(), .append, .pop, vocab[...] = ...?): "
          "the caller's {name} is not the same after the call, and a later call with it gives other ids. Read the "
          "arguments, do not modify them: build your own lookups from them (rank = {{pair: r for r, pair in "
          "enumerate(merges)}}; a merge's rank is its place in the learned order, which sorting loses).\n    {case}"),
    Entry("wrong return", None, Output(_not_int_ids, "return"),
          "bpe_encode should return a Python list of int ids, got {type}{holding}.\n    {case}"),
    Entry("merges ignored", "encoding applies no learned merge: the ids are the text's UTF-8 bytes",
          Output(lambda c: (found := _cache_kept(c)) and c.results[found["k"]][1] == list(c.text.encode())
                 and found, "cache"),
          "your ids for {text!r} are its UTF-8 bytes, {utf8}, under {n} vocabularies whose merges join some of them: "
          "no merge was applied. Apply the learned merges to each piece: start from its single bytes and merge the "
          "adjacent pair of lowest rank (its index in merges) until none is in merges, then look each token's id up "
          "in vocab.\n    {inputs}\n    you: {you}\n    expected: {expected}"),
    Entry("cache kept between calls",
          "encoding caches a piece's ids between calls keyed by the piece alone, not the merges",
          Output(_cache_kept, "cache"),
          "you return the same ids for {text!r} under {n} different vocabularies and merges: a cache kept between "
          "calls and keyed by the piece alone (a global dict, or lru_cache on a function of the piece only) gives back "
          "ids of other merges. Key it by the piece and the merges, or keep it inside one call.\n    {inputs}\n    "
          "you: {you}\n    expected: {expected}"),
    Entry("special token id not looked up",
          "encoding gives a special token an id worked out (len(vocab) - 1, a fixed number), not its id in vocab",
          Output(_special_id_guessed, "special id"),
          "your id for the special token {token!r} is {mine}{guess}, but the vocabulary gives it {theirs}: look the "
          "token's bytes up in the vocabulary, ids_of[token.encode('utf-8')] with ids_of = {{token: id for id, token "
          "in vocab.items()}}, rather than computing the id; the vocabulary may put it anywhere.\n    {case}"),
    Entry("special tokens given as a tuple ignored", None,
          Output(lambda c: all(isinstance(c.cases[k][3], tuple)
                               and c.results[k][1] == _encoded(c.cases[k], dict(specials_out=False)) for k in c.wrong),
                 "tuple"),
          "special_tokens given as a tuple were ignored (isinstance(special_tokens, list)?): " + literal(_TUPLE)
          + "\n    {case}\n    you: {you}\n    expected: {expected}"),
    *[Entry("merges in frequency order",
            "encoding merges the most frequent pair of the piece first, not the earliest learned",
            _encoding(order=order),
            "you apply the pair that is most frequent in the piece (Counter(...).most_common?); merges apply in the "
            f"order they were learned: {_LOWEST_RANK} goes first, however often it occurs here." + "{shown}")
      for order in ("frequency", "frequency first")],
    Entry("merges in reverse order", "encoding merges the latest learned pair first (highest rank), not the earliest",
          _encoding(order="latest"),
          "you apply the latest learned merge first (the highest rank, max(...)); merges apply in the order they were "
          f"learned: {_LOWEST_RANK} goes first, min(pairs, key=lambda p: rank.get(p, float('inf')))." + "{shown}"),
    Entry("longest vocabulary match",
          "encoding cuts each piece into the longest vocabulary tokens (WordPiece), not by replaying merges",
          _encoding(order="longest"),
          "you cut the piece into the longest tokens of the vocabulary from the left (WordPiece's way); BPE replays "
          f"the merges instead: {_LOWEST_RANK} is merged, which can give other tokens than the longest match."
          "{shown}"),
    Entry("merges in one pass",
          "encoding makes one left-to-right pass of merges instead of repeating until none applies",
          _encoding(order="one pass"),
          "you make one left-to-right pass, merging each learned pair you meet, and stop: BPE repeats until no learned "
          "pair is left, and at each step merges the adjacent pair with the lowest rank (its index in merges), so "
          "merged tokens can merge again (ab + ab -> abab).{shown}"),
    Entry("merges applied once",
          "encoding merges the best pair of each piece once, with no loop repeating until no pair has a rank",
          _encoding(order="once"),
          "you merge the best pair of each piece once and stop (a half-written loop?): BPE repeats, merging the "
          "adjacent pair of lowest rank, until no adjacent pair has a rank: while len(parts) > 1: best = "
          "min(pairs, key=lambda p: rank.get(p, float('inf'))); if best not in rank: break; merge it.{shown}"),
    *[Entry("merges in text order", "encoding merges the leftmost known pair first, not the earliest learned",
            _encoding(order=order),
            "you merge the first known pair from the left; merges apply in the order they were learned: "
            f"{_LOWEST_RANK}." + "{shown}")
      for order in ("leftmost", "leftmost once")],
    Entry("merges sorted", None, _encoding(order="sorted"),
          "your ranks follow the merges in sorted order (rank from sorted(merges)?): " + _SORTED + " Rank each merge "
          "by its index in merges as given, rank = {{pair: r for r, pair in enumerate(merges)}}.{shown}"),
    Entry("ids compared as strings", "encoding ranks pairs by their joined token's id as text: '1000' < '999'",
          _encoding(order="id as text"),
          "you pick the pair whose joined token has the lowest id compared as text (str(id)?): as strings '1000' < "
          "'999', so once ids have four digits the order is wrong (GPT-2's ids go to 50,256). Rank each pair by its "
          "index in merges, min(pairs, key=lambda p: rank.get(p, float('inf'))), or compare the ids as numbers."
          "{shown}"),
    Entry("special tokens split", "a special token is encoded as ordinary text instead of as its own id",
          _encoding(specials_out=False),
          "the special token was encoded as ordinary text (split into pieces); cut the text around the special tokens "
          "first (split_special_tokens) and give each one its own id.{shown}"),
    Entry("special tokens hard-coded",
          "encoding treats '<|endoftext|>' as special whatever the special_tokens argument says",
          _encoding(hard_coded=True),
          "you treat '<|endoftext|>' as the one special token whatever the special_tokens argument says (a hard-coded "
          "['<|endoftext|>']?): the special tokens are the ones the argument names. With special_tokens=() "
          "'<|endoftext|>' is ordinary text, encoded as its pieces; with ['<|endoftext|>', "
          "'<|endoftext|><|endoftext|>'] the longer one is a token of its own. Cut the text at the tokens of the "
          "argument, split_special_tokens(text, special_tokens).{shown}"),
    Entry("special token not passed treated as special",
          "encoding treats '<|endoftext|>' as special when special_tokens names none (a default of its own)",
          _encoding(hard_coded="default"),
          "you treat '<|endoftext|>' as special when special_tokens is empty (special_tokens or ['<|endoftext|>']?): "
          "only the tokens the special_tokens argument names are special; with special_tokens=[] the text "
          "'<|endoftext|>' is ordinary text, encoded as its pieces like any other. Cut the text at the argument's "
          "tokens only, split_special_tokens(text, special_tokens).{shown}"),
    Entry("special tokens matched shortest first",
          "of two overlapping special tokens the shorter is matched, not the longer", _encoding(longest_first=False),
          "where two special tokens overlap ('<|endoftext|>' and '<|endoftext|><|endoftext|>'), the longer must win; "
          "you matched them in the order given (a regular expression tries its alternatives left to right). Sort them "
          "longest first, sorted(special_tokens, key=len, reverse=True), or cut the text with "
          "split_special_tokens(text, special_tokens).{shown}"),
    Entry("only the first special token cut", None, _encoding(cut_at=1),
          "you cut the text at the first special token only (text.split(special_tokens[0])?): the others "
          "('<|pad|>') were encoded as ordinary text. Cut it at every one, split_special_tokens(text, special_tokens), "
          "and give each special piece its own id.{shown}"),
    Entry("across pre-token boundaries", None, _encoding(split="none"),
          "merges cross pieces: pre-tokenize each part of the text (pretokenize) and encode each piece on its own, as "
          "the merges were learned.{shown}"),
    Entry("leading space dropped", None, _encoding(split="whitespace"),
          "the spaces are lost (text.split()?): GPT-2's pieces keep the space before a word (' world'); use "
          "pretokenize(...), whose pieces join back to the text.{shown}"),
    Entry("text encoded line by line", "encoding splits the text at '\\n' and puts the newline's id between lines",
          _encoding(split="lines"),
          "you encode the text line by line (text.split('\\n'), the id of '\\n' between two lines): GPT-2's pieces "
          "hold runs of newlines, and a blank line '\\n\\n' is one token of its vocabulary (628). Encode the whole "
          "text: pretokenize(...) keeps the newlines in its pieces.{shown}"),
    Entry("byte values as ids", "a single byte's value used as its id instead of looking the id up in the vocabulary",
          _encoding(byte_ids=True),
          "a single byte's id is not its value: look every token's id up in the vocabulary (GPT-2's vocabulary gives "
          "b'!' the id 0).{shown}"),
    Entry("byte values as ids", None, _encoding(computed_ids=True),
          "you compute each token's id (a byte's value, 256 + the rank of the merge that made it) instead of looking "
          "it up in the vocabulary: the ids are vocab's, which need not follow that rule (GPT-2's vocabulary gives "
          "b'!' the id 0). Build ids_of = {{token: id for id, token in vocab.items()}} once and look every token up: "
          "ids_of[token].{shown}"),
    *[Entry("pre-tokenizer differs", None, _encoding(split=split), literal(_PATTERN_SAID[split]) + "{shown}")
      for split in _RE_PATTERNS],
    *[Entry("special tokens not escaped", None, _encoding(unescaped=how), literal(_UNESCAPED) + "{shown}")
      for how in ("kept", "dropped")],
    *[Entry("text normalised", None, _encoding(dict(what="encoding"), text_as=form), _NORMALISED + "{shown}")
      for form in ("NFC", "NFKC")],
    Entry("merges not checked", "encoding merges any pair whose joined bytes are a token, not only the learned merges",
          _encoding(order="in vocab"),
          "you merge any adjacent pair whose joined bytes are a token of the vocabulary; only the learned merges may "
          "apply (a token can be in the vocabulary as another merge's result): keep the pairs that are in merges, the "
          "lowest rank first, min(pairs, key=lambda p: rank.get(p, float('inf'))).{shown}"),
    Entry("values differ", None, Output(lambda c: (unknown := [i for i in c.got if i not in c.vocab])
                                        and dict(unknown=unknown[0]), "unknown"),
          "your ids include {unknown}, which is not in the vocabulary.\n    {case}"),
    Entry("unknown token as id 0", "encoding gives a token that is not in the vocabulary the id 0 (ids_of.get(t, 0))",
          Output(lambda c: (n := c.got.count(0) - c.expected.count(0)) > 0 and dict(n=n), "unknown"),
          "your ids hold the id 0 {n} more time(s) than expected: a token that is not in the vocabulary was given 0 "
          "(ids_of.get(token, 0)?). Every token you make must be in the vocabulary; one that is not comes from merging "
          "a pair that is no merge: stop when the best adjacent pair has no rank (if best not in rank: break), and "
          "look ids up with ids_of[token], which raises on a token it does not hold.\n    {case}"),
    Entry("special tokens dropped",
          "decoding skips the special tokens (skip_special_tokens), or encoding loses them (re.split without a group)",
          Output(_specials_lost, "decoded"),
          "the special token {token!r} is missing from your ids (they decode to the text without it): re.split "
          "without a group around the pattern drops what it cuts at, and text.replace(token, '') removes it. Give each "
          "special token its own id: split_special_tokens(text, special_tokens) keeps them as pieces.\n    {case}"),
    Entry("leading space dropped", None,
          Output(lambda c: c.back != c.text and c.back.replace(" ", "") == c.text.replace(" ", ""), "decoded"),
          "your ids decode to {back!r}: spaces are lost. GPT-2's pieces keep the space before a word (' world'); "
          "encode each piece of pretokenize(...) as it is, without stripping it.\n    {case}"),
    Entry("pre-tokenizer differs", None,  # a pattern of Python's re: [^\W\d_] matches no '_'
          Output(lambda c: c.back != c.text and "_" in c.text and "_" not in c.back, "decoded"),
          "your ids decode to {back!r}: the '_' are lost. " + literal(_PRETOKENIZER) + "\n    {case}"),
    Entry("values differ", None, Output(lambda c: c.back != c.text, "decoded"),
          "your ids decode to {back!r}, not the text: every byte of the text must be in exactly one token."
          "\n    {case}"),
    Entry("pre-tokenizer differs", None,
          Output(lambda c: (token := _boundary_crossed(c.text, c.specials, c.tokens)) and dict(token=token),
                 "decoded"),
          "your token {token!r} " + _SPANS + "\n    {case}"),
    Entry("values differ", None, Output(lambda c: True, "decoded"),
          "your ids decode back to the text but differ from position {k}: you {you}, expected {expected}."
          "\n    {case}"),
])


@checker("bpe_encode")
def check_bpe_encode(bpe_encode_fn):
    require_function(bpe_encode_fn, "bpe_encode")
    cases = _encode_cases()
    results = []
    for text, vocab, merges, specials in cases:
        case = f"bpe_encode({text[:50]!r}{'...' if len(text) > 50 else ''}, vocab, merges, {specials})"
        given = {"vocab": dict(vocab), "merges": list(merges),
                 "special_tokens": specials if isinstance(specials, tuple) else list(specials)}
        try:
            got = _run(bpe_encode_fn, text, *given.values(), name="bpe_encode",
                       what=f"{text[:30]!r}..., vocab, merges, {specials}")
        except StudentError as err:
            ENCODE.detect("raised", err.exc, raised=raised(err.exc), case=case)
            raise
        for name, before in (("vocab", vocab), ("merges", list(merges)), ("special_tokens", specials)):
            # the caller's own list or dict, changed (merges.sort()?)
            ENCODE.detect("input", SimpleNamespace(given=given[name], before=before), name=name, case=case)
        ENCODE.detect("return", got, case=case)
        results.append((case, list(got), BPETokenizer(vocab, merges, specials).encode(text)))
    wrong = [k for k, (_, got, expected) in enumerate(results) if got != expected]
    if not wrong:
        return _passed(bpe_encode_fn, f"{len(cases)} texts, learned order against frequency, special tokens, byte ids "
                       "shuffled as in GPT-2's vocabulary")
    # one text ('abc') under several vocabularies: the same ids for all where they differ is a cache keyed by the
    # text or piece alone, kept between calls
    for text in {cases[k][0] for k in wrong}:
        ENCODE.detect("cache", SimpleNamespace(text=text, cases=cases, results=results))
    ENCODE.detect("special id", SimpleNamespace(cases=cases, results=results, wrong=wrong))
    case, got, expected = results[wrong[0]]
    ENCODE.detect("tuple", SimpleNamespace(cases=cases, results=results, wrong=wrong), case=case, you=_show(got),
                  expected=_show(expected))
    k = next((i for i in range(min(len(got), len(expected))) if got[i] != expected[i]), min(len(got), len(expected)))
    at = f" (from position {k}, the first that differs)" if k else ""
    shown = f"\n    {case}\n    you{at}: {_show(got[k:])}\n    expected: {_show(expected[k:])}"
    variants = [_made(ENCODE, SimpleNamespace(case=c)) for c in cases]
    named = ENCODE.candidates(SimpleNamespace(case=cases[wrong[0]]), shown=shown)
    # a variant that gives every result names the mistake; else the first that gives the first wrong one
    for v, (name, message, make) in enumerate(named):
        if make() == got and all(variants[i][v]() in (None, results[i][1]) for i in range(len(cases))):
            fail(message, mistake=name)
    # else the first that gives the first wrong one and is not ruled out by a text the student encodes right
    right = [i for i in range(len(cases)) if i not in wrong]
    for v, (name, message, make) in enumerate(named):
        if make() == got and all(variants[i][v]() in (None, results[i][1]) for i in right):
            fail(message, mistake=name)
    text, vocab = cases[wrong[0]][:2]
    ENCODE.detect("unknown", SimpleNamespace(got=got, vocab=vocab, expected=expected), case=case)
    back = bpe_decode(got, vocab)
    ENCODE.detect("decoded", SimpleNamespace(back=back, text=text, specials=cases[wrong[0]][3],
                                             tokens=[vocab[i] for i in got]), back=back[:60],
                  case=case, k=k,
                  you=_show(got[k:k + 6]), expected=_show(expected[k:k + 6]))


register_hints("bpe_encode", [
    "Build two lookups once: ids_of = {token_bytes: id for id, token_bytes in vocab.items()} and "
    "rank = {pair: index for index, pair in enumerate(merges)}.",
    "Cut the text around the special tokens (split_special_tokens): a special piece is one id. Pre-tokenize the "
    "rest (pretokenize); encode each piece on its own, starting from its single bytes [bytes([b]) for b in "
    "piece.encode()].",
    "In a piece, repeat: among the adjacent pairs, take the one with the lowest rank (min(..., key=lambda p: "
    "rank.get(p, float('inf')))); stop if none is in rank; else merge it everywhere (merge_pair(parts, pair, pair[0] + "
    "pair[1])). Then map each part to its id with ids_of.",
])


# ---------------------------------------------------------------- bpe_decode
_SPECIAL_BYTES = {ENDOFTEXT.encode()}


def _cleaned_up(text: str) -> str:
    """Hugging Face's clean_up_tokenization: the space before punctuation and contractions removed."""
    for before in (" .", " ?", " !", " ,", " ' ", " n't", " 'm", " 's", " 've", " 're"):
        text = text.replace(before, before[1:])
    return text


def _around(got: str, expected: str, width: int = 50) -> str:
    """The two strings around their first difference, cut with '…' where they go on."""
    k = next((i for i, (x, y) in enumerate(zip(got, expected)) if x != y), min(len(got), len(expected)))
    start = max(0, k - width // 2)

    def cut(x: str) -> str:
        return ("…" if start else "") + repr(x[start:start + width]) + ("…" if len(x) > start + width else "")

    return f"first difference at character {k}:\n    you:      {cut(got)}\n    expected: {cut(expected)}"


def _decoded(make: Callable[[list, dict], str]) -> Reference:
    """bpe_decode with a mistake: ``make(ids, vocab)``, called only when compared (it may raise)."""
    return Reference(lambda c: [({}, lambda: make(c.ids, c.vocab))])


def _per_token(errors: str) -> Callable[[list, dict], str]:
    return lambda ids, vocab: "".join(vocab[i].decode("utf-8", errors=errors) for i in ids)


def _joined(errors: str, encoding: str = "utf-8") -> Callable[[list, dict], str]:
    return lambda ids, vocab: b"".join(vocab[i] for i in ids).decode(encoding, errors=errors)


def _valid_utf8(ids: list, vocab: dict) -> bool:
    try:
        b"".join(vocab[i] for i in ids).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


_AROUND = "\n    {inputs}\n    {around}"
_STRIPS = (("strip", "start or end"), ("lstrip", "start"), ("rstrip", "end"))

DECODE = Catalogue("bpe_decode", "11", [
    Entry("time limit", None, Probe("call_student_within")),
    Entry("invalid bytes raise", "decoding invalid UTF-8 raises instead of giving '\\ufffd' (errors='replace')",
          Output(lambda c: isinstance(c.exc, UnicodeDecodeError) and not _valid_utf8(c.ids, c.vocab), "raised"),
          "your code raised {raised}\n    These bytes are not valid UTF-8 (a model can produce any ids): decode with "
          "errors='replace', which shows '\\ufffd' where they break.\n    {case}"),
    Entry("decoded token by token", "each token decoded on its own: a character split between two tokens breaks",
          Output(lambda c: isinstance(c.exc, UnicodeDecodeError), "raised"),
          "your code raised {raised}\n    Together the bytes are valid UTF-8: you decode each token on its own, and a "
          "character split between two tokens breaks. Join the bytes first (b''.join), then decode once.\n    {case}"),
    Entry("wrong return", None, Output(lambda got: isinstance(got, (bytes, bytearray)), "return"),
          "bpe_decode should return a str, got bytes: decode them (.decode('utf-8', errors='replace')).\n    {case}"),
    Entry("wrong return", None, Output(lambda got: not isinstance(got, str) and dict(type=_got(got)),
                                       "return"),
          "bpe_decode should return a str, got {type}.\n    {case}"),
    Entry("nothing decoded",
          "bpe_decode returns '' for ids that hold text (a stub, or the text built but not returned)",
          Output(lambda results: all(got == "" for _, got, expected, *_ in results if expected), "empty"),
          "your bpe_decode returned '' for every list of ids that holds text: nothing was decoded (a stub, or the "
          "text built but not returned?). Look each id's bytes up in vocab, join them (b''.join), decode once: "
          ".decode('utf-8', errors='replace').\n    {case}"),
    Entry("bytes written as text",
          "each token's bytes turned into text with str() (\"b'...'\" in the result) instead of decoded",
          Output(lambda results: any(isinstance(got, str) and ("b'" in got or 'b"' in got) and "b'" not in expected
                                     for _, got, expected, *_ in results if got != expected), "empty"),
          "your text holds Python's notation for bytes (b'...'): str() of a bytes object writes how it looks, not "
          "what it says. Join the tokens' bytes, b''.join(vocab[i] for i in ids), and decode them once: "
          ".decode('utf-8', errors='replace').\n    {case}"),
    Entry("decoded token by token", None, _decoded(_per_token("replace")),
          "you decode each token on its own: a character whose UTF-8 bytes are split between two tokens (é is "
          "b'\\xc3\\xa9') then breaks. Join all the tokens' bytes first (b''.join(...)), then decode once." + _AROUND),
    Entry("invalid bytes dropped", "invalid UTF-8 silently dropped (errors='ignore') instead of shown as '\\ufffd'",
          _decoded(_joined("ignore")),
          "invalid UTF-8 is dropped (errors='ignore'): a model can produce such ids, and the text should show where, "
          "with '\\ufffd': decode with errors='replace'." + _AROUND),
    Entry("decoded token by token", None, _decoded(_per_token("ignore")),
          "you decode each token on its own (dropping what does not decode): a character split between two tokens is "
          "lost. Join all the bytes first, then decode once with errors='replace'." + _AROUND),
    Entry("byte values as ids", None,
          _decoded(lambda ids, vocab: bytes(ids).decode("utf-8", errors="replace")),
          "you turned ids into bytes directly (bytes(ids)?): an id is not a byte value; look each id up in vocab."
          + _AROUND),
    Entry("not decoded as UTF-8", "decoding uses another encoding than UTF-8 (latin-1)",
          _decoded(lambda ids, vocab: b"".join(vocab[i] for i in ids).decode("latin-1")),
          "the bytes are decoded with another encoding than UTF-8 (latin-1?): é is the two bytes b'\\xc3\\xa9' in "
          "UTF-8; .decode('utf-8', errors='replace') on all the bytes joined." + _AROUND),
    Entry("invalid bytes escaped",
          "invalid UTF-8 written as escapes or surrogates instead of '\\ufffd' (errors='replace')",
          _decoded(_joined("backslashreplace")),
          "invalid UTF-8 is written as escapes ('\\x80', errors='backslashreplace'); the exercise shows it as one "
          "'\\ufffd' per break, as a model's output shows: errors='replace'." + _AROUND),
    Entry("whitespace stripped",
          "decoding strips the spaces or newlines at the text's ends (.strip(), .lstrip(), .rstrip())",
          Reference(lambda c: [(dict(strip=strip, where=where),
                                lambda strip=strip: getattr(bpe_decode(c.ids, c.vocab), strip)())
                               for strip, where in _STRIPS]),
          "the spaces or newlines at the {where} are gone (.{strip}()?): decoding gives back every byte of the "
          "tokens, spaces included, so that decode(encode(text)) == text." + _AROUND),
    Entry("tokens joined with spaces",
          "decoding puts a space between the tokens (' '.join) instead of joining their bytes",
          _decoded(lambda ids, vocab: " ".join(vocab[i].decode("utf-8", errors="replace") for i in ids)),
          "you put a space between the tokens (' '.join(...)?): the spaces of the text are inside the tokens already "
          "(' world'); join the tokens' bytes with nothing between them, b''.join(...), then decode once." + _AROUND),
    Entry("tokens joined with spaces", None,
          _decoded(lambda ids, vocab: b" ".join(vocab[i] for i in ids).decode("utf-8", errors="replace")),
          "you put a space between the tokens (b' '.join(...)?): the spaces of the text are inside the tokens "
          "already (' world'); join with nothing between them, b''.join(...)." + _AROUND),
    Entry("invalid bytes escaped", None, _decoded(_joined("surrogateescape")),
          "invalid UTF-8 is kept as lone surrogates (errors='surrogateescape'): such a string cannot be printed or "
          "written as UTF-8; show each break as '\\ufffd', errors='replace'." + _AROUND),
    Entry("ids as characters",
          "decoding turns each id into a character (chr(id)) instead of looking its bytes up in vocab",
          _decoded(lambda ids, vocab: "".join(chr(i) for i in ids)),
          "you turn each id into a character (chr(id)?): an id is neither a character nor a byte; look each id up in "
          "vocab (vocab[id] is a byte string), join the bytes, decode them once as UTF-8." + _AROUND),
    Entry("text normalised", None,
          Reference(lambda c: [(dict(what="decoding"),
                                lambda form=form: unicodedata.normalize(form, bpe_decode(c.ids, c.vocab)))
                               for form in ("NFC", "NFKC")]),
          _NORMALISED + _AROUND),
    Entry("spaces before punctuation removed",
          "decoding drops the space before '.', ',', \"'s\" (clean_up_tokenization)",
          _decoded(lambda ids, vocab: _cleaned_up(bpe_decode(ids, vocab))),
          "the space before punctuation, 's or n't is gone (' .' became '.', \" 's\" \"'s\": Hugging Face's "
          "clean_up_tokenization_spaces?): decoding gives back every byte of the tokens, spaces included, so that "
          "decode(encode(text)) == text." + _AROUND),
    Entry("special tokens dropped", None,
          _decoded(lambda ids, vocab: b"".join(vocab[i] for i in ids if vocab[i] not in _SPECIAL_BYTES).decode(
              "utf-8", errors="replace")),
          "the special token is missing (skipped, as Hugging Face's skip_special_tokens=True does): bpe_decode gives "
          "back every token, the special ones as their text ('<|endoftext|>')." + _AROUND),
    Entry("values differ", None, Output(lambda c: True, "values"), "{case}: {around}"),
    Entry("unknown ids dropped",
          "decoding gives a text for an id outside the vocabulary (vocab.get(i, b'')), not an error",
          Output(lambda got: dict(got=repr(got)), "unknown"),
          "an id that is not in the vocabulary gave {got} instead of an error (vocab.get(i, b'')?): a wrong id (from "
          "another tokenizer, or a bug) then goes unnoticed. Look each id up with vocab[i], which raises KeyError, or "
          "raise ValueError naming the id.\n    {case}"),
])


def _decode_cases() -> list[tuple[list, dict, str]]:
    corpus = _text(randint(30, 50))
    vocab, merges = train_bpe(corpus, 256 + randint(15, 30) + 1, [ENDOFTEXT])
    tok = BPETokenizer(vocab, merges, [ENDOFTEXT])
    shuffled = _permuted(vocab)
    ids_in = {v: k for k, v in shuffled.items()}
    text = _text(randint(8, 15))
    split_char = list("é🚀".encode())  # a character cut across tokens: every byte its own token
    # the ids below 256 first: code that takes ids for byte values passes these two and is named on the third
    return [
        (split_char, vocab, "'é🚀' one byte per token"),
        ([0x80, *list(b"ok"), 0xF0, 0x9F], vocab, "invalid UTF-8: a lone continuation byte, then a cut emoji"),
        ([ids_in[bytes([b])] for b in "aé 🚀".encode()], shuffled, "byte ids shuffled, as in GPT-2's vocabulary"),
        (tok.encode(text), vocab, "a text's ids"),
        (tok.encode(text + " it 's do n't , ok . no !"), vocab, "spaces before punctuation"),
        (tok.encode(text + " ﬁne cafe\u0301 x² ½"), vocab, "a text with 'ﬁ', '²', an accent as a combining character"),
        (tok.encode(text + ENDOFTEXT + "é"), vocab, "a special token"),
        (tok.encode(" \n" + text + "  "), vocab, "spaces at both ends"),
        ([], vocab, "no ids"),
    ]


@checker("bpe_decode")
def check_bpe_decode(bpe_decode_fn):
    require_function(bpe_decode_fn, "bpe_decode")
    cases = _decode_cases()
    results = []
    for ids, vocab, label in cases:
        case = f"bpe_decode({_show(ids)}, vocab) ({label})"
        try:
            got = _run(bpe_decode_fn, list(ids), dict(vocab), name="bpe_decode", what=f"{_show(ids, 6)}, vocab")
        except StudentError as err:
            DECODE.detect("raised", SimpleNamespace(exc=err.exc, ids=ids, vocab=vocab), raised=raised(err.exc),
                          case=case)
            if any(r[1] != r[2] for r in results):
                break  # a wrong result before the error: named below (bytes(ids) raises only on ids above 255)
            raise
        DECODE.detect("return", got, case=case)
        results.append((case, got, bpe_decode(ids, vocab), ids, vocab))
    wrong = [r for r in results if r[1] != r[2]]
    if not wrong:
        _fail_unknown_id_kept(bpe_decode_fn, cases[0][1])
        return _passed(bpe_decode_fn, f"{len(cases)} id lists: characters cut across tokens, invalid UTF-8, a special "
                       "token, shuffled byte ids")
    DECODE.detect("empty", results, case=wrong[0][0])
    results = [(case, got, expected, [_value(make) for make in _made(DECODE, SimpleNamespace(ids=ids, vocab=vocab))])
               for case, got, expected, ids, vocab in results]
    case, got, expected, values = next(r for r in results if r[1] != r[2])
    variants = DECODE.candidates(SimpleNamespace(ids=[], vocab={}), inputs=case, around=_around(got, expected))
    # a variant that gives every result names the mistake (chr(id) and latin-1 agree on byte ids); else the first
    # that gives the first wrong one
    for v, (name, message, _) in enumerate(variants):
        if values[v] == got and all(r[3][v] in (None, r[1]) for r in results):
            fail(message, mistake=name)
    for v, (name, message, _) in enumerate(variants):
        if values[v] == got:
            fail(message, mistake=name)
    DECODE.detect("values", None, case=case, around=_around(got, expected))


def _fail_unknown_id_kept(bpe_decode_fn: Callable[..., Any], vocab: dict) -> None:
    """An id outside ``vocab`` must raise (the contract: ValueError; vocab[i]'s KeyError is as good), not vanish."""
    ids = [ord("o"), ord("k"), max(vocab) + 1]
    case = f"bpe_decode({ids}, vocab) (the last id is not in the vocabulary)"
    try:
        got = _run(bpe_decode_fn, ids, dict(vocab), name="bpe_decode", what=f"{ids}, vocab")
    except StudentError as err:
        if isinstance(err.exc, (LookupError, ValueError)):
            return
        raise
    DECODE.detect("unknown", got, case=case)


def _value(variant: Callable[[], str]) -> str | None:
    """A variant's string, or None where it cannot run on these ids."""
    try:
        return variant()
    except (KeyError, ValueError):
        return None


register_hints("bpe_decode", [
    "Each id's token is vocab[id], a byte string; the text is all of them joined.",
    "Join first, decode once: b''.join(vocab[i] for i in ids). A character may be split across two tokens.",
    "Then .decode('utf-8', errors='replace'): bytes that are not valid UTF-8 become '\\ufffd' instead of an error.",
])


CATALOGUES = (COUNT, MERGE, TRAIN, ENCODE, DECODE)
MISTAKES: dict[str, list[str]] = {table.exercise: table.names() for table in CATALOGUES}  # generated

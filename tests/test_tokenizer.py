"""Tests for course_utils.tokenizer (notebook 11): byte-level BPE training against a slow
trainer written here (a full recount per merge), the contract's tie-break, encoding and
decoding (round trips, cut UTF-8), GPT-2's shipped files, exact ids of Hugging Face's
GPT2TokenizerFast built offline from the same files, and the errors for bad input."""

from __future__ import annotations

import gzip
import hashlib
import random
import re
import time

import pytest
import torch

from course_utils import tokenizer as T
from course_utils.stories import load_shakespeare
from course_utils.tokenizer import (
    ENDOFTEXT,
    BPETokenizer,
    bytes_to_unicode,
    load_gpt2_tokenizer,
    merge_pair,
    parse_gpt2_merges,
    pretokenize,
    train_bpe,
)

# code, numbers, emoji (one with a zero-width joiner), accents (composed and combining),
# repeated spaces, tabs, blank lines, contractions, CJK, and the special token in the middle
HARD_STRINGS = [
    "",
    " ",
    "   ",
    "Hello, world!",
    "  leading and trailing spaces   ",
    "naïve café, déjà vu, Ångström, cafe\u0301 (combining accent)",
    "emoji: 🚀🔥 👩‍💻 and flags 🇫🇷",
    "def f(x):\n    return x ** 2  # squared\n\n\tprint(f(3))\n",
    "numbers 3.14159, 1,000,000 and 2024-11-28; ½ ² ٣",
    "I'm sure they'll say it's what we've done, HE'S DONE",
    "汉字とかな、한국어",
    f"before{ENDOFTEXT}after",
    f"two {ENDOFTEXT}{ENDOFTEXT} in a row, then {ENDOFTEXT}  spaces",
    "<|endoftext| almost special, <|end",
    "\r\n windows \r\n line ends \x00 and a NUL",
]

PARITY_TEXT = (
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\n"
    "def train(model, steps=1_000, lr=3e-4):\n"
    "    for step in range(steps):   # the loop\n"
    "        loss = model(x)[0].mean() ** 2\n"
    "\tif step % 100 == 0: print(f'{step:>5d} {loss:.3f}')\n"
    "Numbers: 3.14159, 1,234,567.89, 2024-11-28, 0xFF, 1e-10, ½ and ²\n"
    "Emoji: 🚀 🔥🔥 👩‍💻 🇫🇷 😀!\n"
    "Accents: naïve café, déjà vu, Ångström, São Paulo, Zürich, cafe\u0301\n"
    "Repeated     spaces,\t\ttabs,   \n\n\n   and trailing spaces   \n"
    f"They'll say it's done.{ENDOFTEXT}A new document begins  {ENDOFTEXT}\n"
    "汉字 かな 한국어 Ελληνικά русский"
)


# ------------------------------------------------------------------ a slow trainer to compare


def slow_train(text: str, vocab_size: int, special_tokens: list[str]):
    """BPE as the textbook writes it: every occurrence of every piece kept, all pairs counted
    again before each merge, merged with a loop written here, the contract's tie-break."""
    parts = re.split("|".join(map(re.escape, special_tokens)), text) if special_tokens else [text]
    words = [list(piece.encode("utf-8")) for part in parts for piece in pretokenize(part)]
    vocab = {i: bytes([i]) for i in range(256)}
    merges = []
    for new_id in range(256, vocab_size - len(special_tokens)):
        counts = {}
        for word in words:
            for pair in zip(word, word[1:]):
                counts[pair] = counts.get(pair, 0) + 1
        if not counts:
            break
        best = max(counts, key=lambda p: (counts[p], vocab[p[0]], vocab[p[1]]))
        for index, word in enumerate(words):
            out, i = [], 0
            while i < len(word):
                if tuple(word[i:i + 2]) == best:
                    out.append(new_id)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            words[index] = out
        vocab[new_id] = vocab[best[0]] + vocab[best[1]]
        merges.append((vocab[best[0]], vocab[best[1]]))
    return merges


SMALL_TEXT = (
    load_shakespeare()[:6000]
    + f"{ENDOFTEXT}aaaa aaa aa a {ENDOFTEXT}  naïve café 🚀🚀 1234 12 1 'll 'll\n\n\n"
)


@pytest.fixture(scope="module")
def trained():
    vocab, merges = train_bpe(SMALL_TEXT, 256 + 200 + 1, special_tokens=[ENDOFTEXT])
    return vocab, merges, BPETokenizer(vocab, merges, special_tokens=[ENDOFTEXT])


def test_the_trainer_learns_the_slow_trainers_merges(trained):
    vocab, merges, _ = trained
    assert merges == slow_train(SMALL_TEXT, 256 + 200 + 1, [ENDOFTEXT])
    assert len(merges) == 200 and len(vocab) == 457
    # ids: bytes, then the merges in order, then the special token
    assert all(vocab[i] == bytes([i]) for i in range(256))
    assert all(vocab[256 + i] == a + b for i, (a, b) in enumerate(merges))
    assert vocab[456] == ENDOFTEXT.encode()
    # the special token was never trained on: no merge holds any of its characters' pairs
    assert not any(b"|" in a + b for a, b in merges)


@pytest.mark.parametrize("text", [
    "aaaaaaa aaaa aa aaa",          # overlapping pairs: aaa holds (a, a) twice, merged once
    "ab cd ef gh ab cd",            # ties everywhere
    "the cat sat on the mat. The hat! the\n\nthe  the",
    "🚀🚀🚀 é é é ½½",              # multi-byte characters
])
def test_the_trainer_matches_the_slow_trainer_to_the_last_pair(text):
    merges = train_bpe(text, 400)[1]
    assert merges == slow_train(text, 400, [])
    assert len(merges) < 400 - 256  # the text ran out of pairs: training stopped early


def test_ties_go_to_the_greatest_pair_of_byte_strings():
    # every pair occurs once: (b"e", b"f") is the greatest of (a,b), (" ",c), (c,d), (" ",e), (e,f)
    assert train_bpe("ab cd ef", 257)[1] == [(b"e", b"f")]
    # the count decides first: (" ", "a") twice beats (b"z", b"z") once
    assert train_bpe(" a a zz", 257)[1] == [(b" ", b"a")]
    # the first byte strings equal, the second decides
    assert train_bpe("xa xb", 257)[1] == [(b"x", b"b")]


def test_merges_never_cross_pre_tokens():
    # pieces "b", " a", " b", ...: (b"b", b" ") occurs 3 times across pieces and would win
    # the four-way tie of count 3; inside pieces only (" ", "b") and (" ", "a") exist
    assert train_bpe("b a b a b a b", 400)[1] == [(b" ", b"b"), (b" ", b"a")]
    merges = train_bpe(load_shakespeare()[:3000], 400)[1]
    assert all(b" " not in (a + b).lstrip(b" ") for a, b in merges)


def test_merge_pair_left_to_right_without_overlaps():
    assert merge_pair([7, 7, 7], (7, 7), 9) == [9, 7]
    assert merge_pair([7, 7, 7, 7], (7, 7), 9) == [9, 9]
    assert merge_pair([1, 2, 3, 1, 2], (1, 2), 9) == [9, 3, 9]
    assert merge_pair([b"a", b"b"], (b"a", b"b"), b"ab") == [b"ab"]
    assert merge_pair([], (1, 2), 9) == []


def test_count_pairs_counts_inside_pieces_with_their_frequency():
    assert T.count_pairs({(1, 2, 1, 2): 3, (2, 1): 1, (5,): 10}) == {(1, 2): 6, (2, 1): 4}


# ------------------------------------------------------------------ encoding and decoding


def ordered_encode(text: str, vocab, merges) -> list[int]:
    """Every merge applied in learned order to every piece, one after the other (slow)."""
    id_of = {token: token_id for token_id, token in vocab.items()}
    pairs = [(id_of[a], id_of[b]) for a, b in merges]
    ids = []
    for part in re.split(f"({re.escape(ENDOFTEXT)})", text):
        if part == ENDOFTEXT:
            ids.append(max(vocab))
            continue
        for piece in pretokenize(part):
            word = list(piece.encode("utf-8"))
            for rank, pair in enumerate(pairs):
                word = merge_pair(word, pair, 256 + rank)
            ids.extend(word)
    return ids


def test_encoding_applies_merges_in_learned_order(trained):
    vocab, merges, tok = trained
    text = load_shakespeare()[6000:7000] + HARD_STRINGS[5] + HARD_STRINGS[12]
    assert tok.encode(text) == ordered_encode(text, vocab, merges)


@pytest.mark.parametrize("text", HARD_STRINGS)
def test_round_trip(trained, gpt2, text):
    for tok in (trained[2], gpt2):
        ids = tok.encode(text)
        assert all(isinstance(i, int) for i in ids)
        assert tok.decode(ids) == text
    assert gpt2.decode(torch.tensor(gpt2.encode(text), dtype=torch.long)) == text


def test_special_tokens_are_never_split(trained, gpt2):
    _, _, tok = trained
    assert tok.encode(f"a{ENDOFTEXT}b") == [ord("a"), 456, ord("b")]
    assert gpt2.encode(f"{ENDOFTEXT}{ENDOFTEXT}") == [50256, 50256]
    assert 50256 not in gpt2.encode("<|endoftext|"), "a near miss is ordinary text"


def test_cut_and_invalid_utf8_decode_with_replacement(trained, gpt2):
    _, _, tok = trained
    e_acute = list("é".encode())  # [0xc3, 0xa9], two byte tokens
    assert tok.decode(e_acute) == "é"
    assert tok.decode(e_acute[:1]) == "\ufffd"
    assert tok.decode([ord("a"), 0xff, ord("b")]) == "a\ufffdb"
    assert tok.decode([0xa9, 0xc3]) == "\ufffd\ufffd"
    # GPT-2 splits an emoji into tokens that are not characters on their own: decoding the
    # tokens one by one breaks it, decoding the whole sequence does not
    ids = gpt2.encode("🚀")
    assert len(ids) > 1 and gpt2.decode(ids) == "🚀"
    assert "".join(gpt2.decode([i]) for i in ids) != "🚀"
    assert gpt2.decode(ids[:-1]).endswith("\ufffd")


# ------------------------------------------------------------------ GPT-2's files


@pytest.fixture(scope="module")
def gpt2():
    return load_gpt2_tokenizer()


def test_gpt2_files_are_shipped_and_equal_the_data_files(monkeypatch, tmp_path):
    for name, digest in T.GPT2_SHA256.items():
        plain = (T.DATA_DIR / name).read_bytes()
        packed = T.PACKED_DIR / (name + ".gz")
        assert hashlib.sha256(plain).hexdigest() == digest
        assert gzip.decompress(packed.read_bytes()) == plain
        assert packed.stat().st_size < 400_000
    assert "Modified MIT License" in (T.PACKED_DIR / "gpt2_LICENSE.txt").read_text(encoding="utf-8")
    from_data = T.load_gpt2_vocab_and_merges()
    # as in a pip-installed package (Colab): no data/ folder, the gzipped copies
    monkeypatch.setattr(T, "DATA_DIR", tmp_path / "absent")
    assert T.load_gpt2_vocab_and_merges() == from_data
    with pytest.raises(FileNotFoundError, match="gpt2_vocab.json"):
        T.load_gpt2_vocab_and_merges(tmp_path)


def test_gpt2_vocabulary_is_bytes_then_merges_then_endoftext(gpt2):
    assert len(gpt2) == 50257 and len(gpt2.merges) == 50000
    assert gpt2.special_tokens == {ENDOFTEXT: 50256}
    assert gpt2.merges[0] == (b" ", b"t") and gpt2.vocab[256] == b" t"
    assert all(gpt2.vocab[256 + i] == a + b for i, (a, b) in enumerate(gpt2.merges))
    assert sorted(gpt2.vocab[i] for i in range(256)) == [bytes([b]) for b in range(256)]


def test_bytes_to_unicode_is_one_to_one_and_printable():
    table = bytes_to_unicode()
    assert sorted(table) == list(range(256)) and len(set(table.values())) == 256
    assert all(ch.isprintable() and not ch.isspace() for ch in table.values())
    assert table[ord(" ")] == "Ġ" and table[ord("\n")] == "Ċ" and table[ord("A")] == "A"


@pytest.fixture(scope="module")
def hf_gpt2(tmp_path_factory):
    """Hugging Face's GPT2TokenizerFast from the shipped files, offline."""
    transformers = pytest.importorskip("transformers")
    folder = tmp_path_factory.mktemp("hf_gpt2")
    (folder / "vocab.json").write_bytes((T.DATA_DIR / T.GPT2_VOCAB_FILE).read_bytes())
    # Hugging Face skips a merges file's first line (its "#version" header): give it one
    merges = (T.DATA_DIR / T.GPT2_MERGES_FILE).read_text(encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n" + merges, encoding="utf-8")
    return transformers.GPT2TokenizerFast.from_pretrained(folder)


def test_ids_equal_hugging_faces_gpt2_tokenizer(gpt2, hf_gpt2):
    ours = gpt2.encode(PARITY_TEXT)
    assert ours == hf_gpt2(PARITY_TEXT)["input_ids"]
    assert ours.count(50256) == 2 and len(ours) > 200
    for text in HARD_STRINGS:
        assert gpt2.encode(text) == hf_gpt2(text)["input_ids"], text
    # our parser reads the file with the header too
    merges = (T.DATA_DIR / T.GPT2_MERGES_FILE).read_text(encoding="utf-8")
    assert parse_gpt2_merges("#version: 0.2\n" + merges) == gpt2.merges


# letters, digits and number signs, combining marks, emoji, CJK, and Unicode's odd spaces
# (no-break, ideographic, line separator, NEL, zero-width), where two regex engines could differ
FUZZ_POOL = list(
    "aZé ñ1٣½²'sdlltvremS \t\n\r\x0b\x0c\u00a0\u1680\u2000\u2009\u200b\u2028\u2029\u202f\u205f"
    "\u3000\u0085\u0301\u0300\u200d🚀👩汉字かな한ｱ.,;!?-_/\\\"()[]{}<>|#@$%^&*~`+="
) + [ENDOFTEXT, "'re", "'ve", "'M", " 's", "  ", "\r\n"]


def test_ids_equal_hugging_faces_on_random_strings(gpt2, hf_gpt2):
    rng = random.Random(0)
    for _ in range(500):
        text = "".join(rng.choice(FUZZ_POOL) for _ in range(rng.randint(1, 30)))
        ids = gpt2.encode(text)
        assert ids == hf_gpt2(text)["input_ids"], text
        assert gpt2.decode(ids) == text


# ------------------------------------------------------------------ bad input


def _bad_input_cases():
    vocab = {i: bytes([i]) for i in range(256)}
    tok = BPETokenizer(vocab, [])
    return [
        (lambda: train_bpe(b"some text", 300), TypeError, r"train_bpe: text must be a str, got bytes"),
        (lambda: train_bpe(None, 300), TypeError, r"text must be a str, got NoneType"),
        (lambda: train_bpe("abc", 255), ValueError, r"vocab_size=255 .* expected vocab_size >= 256"),
        (lambda: train_bpe("abc", 256, special_tokens=[ENDOFTEXT]), ValueError,
         r"vocab_size=256 .* 1 special token.* expected vocab_size >= 257"),
        (lambda: train_bpe("abc", 300.0), TypeError, r"vocab_size must be an int, got float 300.0"),
        (lambda: train_bpe("abc", 300, special_tokens=ENDOFTEXT), TypeError,
         r"special_tokens must be a list of str .* got str"),
        (lambda: train_bpe("abc", 300, special_tokens=[""]), ValueError, r"non-empty str, got ''"),
        (lambda: tok.encode(123), TypeError, r"encode: text must be a str, got int"),
        (lambda: tok.encode(b"abc"), TypeError, r"got bytes \(decode bytes first"),
        (lambda: tok.decode([5, 300]), ValueError, r"ids\[1\] = 300 is not in the vocabulary; expected an id from 0 to 255"),  # noqa: E501
        (lambda: tok.decode([-1]), ValueError, r"ids\[0\] = -1 is not in the vocabulary"),
        (lambda: tok.decode([1, "a"]), TypeError, r"ids\[1\] is str 'a'; expected an int token id"),
        (lambda: tok.decode([1.0]), TypeError, r"ids\[0\] is float 1.0"),
        (lambda: tok.decode("abc"), TypeError, r"ids must be a sequence of int token ids, got str"),
        (lambda: parse_gpt2_merges("Ġ t\nh e x\n"), ValueError, r"line 2 is 'h e x'; expected two tokens"),
        (lambda: parse_gpt2_merges("#version: 0.2\nĠ t\n\nh e"), ValueError, r"line 3 is ''"),
        (lambda: parse_gpt2_merges("Ġ t\nhe\n"), ValueError, r"line 2 is 'he'"),
        (lambda: parse_gpt2_merges("Ġ t\nh  e\n"), ValueError, r"line 2 is 'h  e'"),
        (lambda: parse_gpt2_merges("a\u4e00 b"), ValueError, r"line 1: 'a\u4e00' has the character '\u4e00'"),
        (lambda: BPETokenizer({i: bytes([i]) for i in range(255)}, []), ValueError, r"lacks 1 of the 256 single bytes"),
        (lambda: BPETokenizer(vocab, [(b"a", b"b")]), ValueError, r"merges\[0\] = \(b'a', b'b'\): b'ab' is not in vocab"),  # noqa: E501
        (lambda: BPETokenizer(vocab, [], special_tokens=[ENDOFTEXT]), ValueError, r"special token '<\|endoftext\|>' is not in vocab"),  # noqa: E501
        # notebook 11's exercises as functions
        (lambda: T.bpe_encode(["abc"], vocab, []), TypeError, r"encode: text must be a str, got list"),
        (lambda: T.bpe_decode([3, 256], vocab), ValueError, r"ids\[1\] = 256 is not in the vocabulary; expected an id from 0 to 255"),  # noqa: E501
        (lambda: T.bpe_decode([3], list(vocab.values())), TypeError, r"vocab must be a dict \{id: bytes\}, got list"),
        (lambda: T.count_pairs([(1, 2)]), TypeError, r"count_pairs: words must be a dict .* got list"),
        (lambda: merge_pair([1, 2], (1, 2, 3), 9), ValueError, r"pair must be two tokens \(a, b\), got \(1, 2, 3\)"),
    ]


@pytest.mark.parametrize("index", range(len(_bad_input_cases())))
def test_bad_input_gets_a_clear_error(index):
    call, error, message = _bad_input_cases()[index]
    with pytest.raises(error, match=message):
        call()


# --- notebook 11's stand-ins (course_utils.student_functions.StandIns) ------------------------------------
WORDS = {(1, 2, 1, 2): 2, (2, 1): 1}


@pytest.fixture
def stand_ins(monkeypatch):
    """A StandIns over the reference tokenizer, in a pretend Jupyter cell 5 (``cell[0]`` to move on)."""
    from course_utils import student_functions as S

    cell = [5]
    monkeypatch.setattr(S, "_cell_number", lambda: cell[0])
    return S.StandIns(T), cell


def test_stand_ins_fall_back_on_a_stub_saying_so_once_per_cell(stand_ins, capsys):
    ins, cell = stand_ins

    def count_pairs(words):
        raise NotImplementedError("count_pairs is not written yet")

    assert ins.whose("count_pairs") == "yours"
    assert ins.call(count_pairs, WORDS) == ins.call(count_pairs, WORDS) == T.count_pairs(WORDS)
    cell[0] = 6
    ins.call(count_pairs, WORDS)
    notice = "(your count_pairs is not written yet: this cell uses the reference instead)\n"
    assert capsys.readouterr().out == notice * 2  # cells 5 and 6, once each
    assert ins.whose("count_pairs") == "the reference's"
    assert ins.whose("count_pairs", "counts") == "the reference's counts"


def test_stand_ins_fall_back_on_a_failed_check_until_the_function_is_rewritten(stand_ins, capsys):
    from course_utils.checks import check_count_pairs

    ins, _ = stand_ins
    check = ins.remember(check_count_pairs)

    def count_pairs(words):  # the mistake of counting each piece once, not by its count
        return {pair: 1 for word in words for pair in zip(word, word[1:])}

    assert check(count_pairs).status not in ("passed", "not implemented")
    capsys.readouterr()
    assert ins.call(count_pairs, WORDS) == T.count_pairs(WORDS)
    assert capsys.readouterr().out == "(your count_pairs failed its check: this cell uses the reference instead)\n"

    def count_pairs(words):  # rewritten, not checked again: used again
        return {"mine": 1}

    assert ins.call(count_pairs, WORDS) == {"mine": 1} and capsys.readouterr().out == ""
    assert ins.whose("count_pairs") == "the reference's"  # the earlier cell's stand-in is still said


def test_cpu_seconds_counts_cpu_not_waiting_and_runs_a_slow_call_once():
    import course_utils.student_functions as S

    calls = []
    assert S.cpu_seconds(lambda: (calls.append(1), time.sleep(0.02)), at_least=0, repeats=2) < 0.015  # wall: 0.02
    assert len(calls) == 2  # one call per run with at_least=0, the best of 2 runs
    calls.clear()
    busy = S.cpu_seconds(lambda: (calls.append(1), sum(range(20_000))), at_least=0.01)
    assert 0 < busy < 0.01 and len(calls) > 3  # short calls repeated until 0.01 s of CPU, three times
    calls.clear()
    S.cpu_seconds(lambda: calls.append(1), at_least=0, once=0)  # "slow" (>= once): timed once, not run again
    assert len(calls) == 1
    for kwargs, arg in (({"at_least": "1"}, "at_least"), ({"repeats": 0}, "repeats"), ({"once": -1}, "once")):
        with pytest.raises(TypeError, match=arg):
            S.cpu_seconds(print, **kwargs)
    with pytest.raises(TypeError, match="fn"):
        S.cpu_seconds(3)


def test_stand_ins_too_slow_marks_the_reference(stand_ins, capsys):
    ins, _ = stand_ins
    assert not ins.too_slow("train_bpe", "took 0.1 s", 10, "training with the reference", "fast enough")
    assert capsys.readouterr().out == "" and ins.whose("train_bpe", "250 merges") == "your 250 merges"
    assert ins.too_slow("train_bpe", "took 2.0 s for 1 merge", 500, "training with the reference", "slow")
    assert capsys.readouterr().out == ("your train_bpe took 2.0 s for 1 merge, so the full run would take about "
                                       "500 s: training with the reference (slow).\n")
    assert ins.whose("train_bpe", "250 merges") == "the reference's 250 merges"
    assert not ins.too_slow("train_bpe", "took 2.0 s", 500, "again", "said once")  # the reference stands in already
    assert ins.slow == {"train_bpe"}
    assert ins.too_slow("bpe_encode", "took 0.5 s", 40)  # what it does instead, and why, from the helper's table
    assert capsys.readouterr().out.startswith("your bpe_encode took 0.5 s, so the full run would take about 40 s: "
                                              "these cells use the reference encoder for GPT-2's merges")
    assert ins.slow == {"train_bpe", "bpe_encode"}


@pytest.mark.parametrize("bad, argument", [
    (lambda S: S.StandIns(None), "reference"),
    (lambda S: S.StandIns(T).remember(3), "checks"),
    (lambda S: S.StandIns(T).call("count_pairs", WORDS), "fn"),
    (lambda S: S.StandIns(T).too_slow("train_bpe", "took 1 s", "100", "x", "y"), "expected"),
    (lambda S: S.StandIns(T).too_slow("count_pairs", "took 1 s", 100), "instead"),  # no default for this name
    (lambda S: S.StandIns(T).whose("train_bpe", 250), "noun"),
])
def test_stand_ins_bad_input_gets_a_type_error_naming_the_argument(bad, argument):
    from course_utils import student_functions as S

    with pytest.raises(TypeError, match=rf"^{argument} must"):
        bad(S)

"""Tests for course_utils.data (notebook 07): number_to_words, the generated splits and the
shipped files, the vocabularies, the dataset and the collate function."""

from __future__ import annotations

import pytest
import torch

from course_utils import causal_mask
from course_utils import data as d

ROOT_DATA = d.DATA_DIR


@pytest.fixture(scope="module")
def splits() -> dict[str, list[tuple[str, str]]]:
    # generated once per process (the cache load_split's fallback uses too)
    return {name: list(pairs) for name, pairs in d._generated(d.SEED).items()}


# ------------------------------------------------------------------ number_to_words

HAND_CHECKED = {
    "0": "zero",
    "7": "seven",
    "13": "thirteen",
    "20": "twenty",
    "21": "twenty one",
    "100": "one hundred",
    "101": "one hundred one",
    "110": "one hundred ten",
    "999": "nine hundred ninety nine",
    "1000": "one thousand",
    "1,000": "one thousand",
    "1001": "one thousand one",
    "10000": "ten thousand",
    "100000": "one hundred thousand",
    "1,000,000": "one million",
    "1000000": "one million",
    "1,002,000": "one million two thousand",
    "1,000,005": "one million five",
    "40,019": "forty thousand nineteen",
    "1,234.50": "one thousand two hundred thirty four point five zero",
    "-0.5": "minus zero point five",
    "0.007": "zero point zero zero seven",
    "-12": "minus twelve",
    "999,999,999": (
        "nine hundred ninety nine million nine hundred ninety nine thousand "
        "nine hundred ninety nine"
    ),
    "-777,777,777.777": (
        "minus seven hundred seventy seven million seven hundred seventy seven thousand "
        "seven hundred seventy seven point seven seven seven"
    ),
}


@pytest.mark.parametrize("text, words", HAND_CHECKED.items())
def test_number_to_words_hand_checked(text, words):
    assert d.number_to_words(text) == words


def test_integer_to_words_matches_every_tens_and_teens():
    assert [d.integer_to_words(n) for n in (11, 15, 19, 30, 45, 58, 60, 72, 80, 99)] == [
        "eleven", "fifteen", "nineteen", "thirty", "forty five", "fifty eight", "sixty",
        "seventy two", "eighty", "ninety nine",
    ]  # fmt: skip


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty"),
        ("12a4", "'a' at position 2"),
        ("1 000", "' ' at position 1"),
        ("--5", "'-' at position 1"),
        ("5-", "'-' at position 1"),
        ("1,23,4", "malformed thousands separators"),
        ("1234,567", "malformed thousands separators"),
        (",123", "malformed thousands separators"),
        ("1,,234", "malformed thousands separators"),
        ("123,", "malformed thousands separators"),
        ("1.2.3", "second '.' at position 3"),
        (".5", "no integer part"),
        ("-", "no integer part"),
        ("5.", "ends with '.'"),
        ("1.234,5", "after the '.'"),
        ("1.2345", "4 decimal digits"),
        ("007", "leading zero"),
        ("0,123", "leading zero"),
        ("1,000,000,000", "10^9"),
        ("-1234567890", "10^9"),
    ],
)
def test_number_to_words_rejects_bad_input(text, message):
    with pytest.raises(ValueError, match=message.replace(".", r"\.").replace("^", r"\^")):
        d.number_to_words(text)


def test_number_to_words_out_of_range_names_value_and_range():
    with pytest.raises(ValueError) as info:
        d.number_to_words("1,000,000,000")
    assert "'1,000,000,000'" in str(info.value) and "999,999,999" in str(info.value)


def test_number_to_words_rejects_non_str():
    with pytest.raises(TypeError, match="str"):
        d.number_to_words(1234)


def test_max_target_words_is_the_longest_possible():
    # The longest reading: a minus, three groups of 4 words, 2 scales, point, 3 digits.
    assert len(d.number_to_words("-777,777,777.777").split()) == d.MAX_TARGET_WORDS == 19
    assert len("-999,999,999.999") == d.MAX_SOURCE_CHARS == 16
    # any group "a hundred b c" (b >= 2, c >= 1) is 4 words, the most a group can take
    assert len(d.number_to_words("-121,121,121.121").split()) == d.MAX_TARGET_WORDS
    assert len(d.number_to_words("-111,111,111.111").split()) == d.MAX_TARGET_WORDS - 3  # "eleven"


# ----------------------------------------------------------------------------- splits


def test_split_sizes(splits):
    assert {name: len(pairs) for name, pairs in splits.items()} == d.SPLIT_SIZES


def test_splits_are_disjoint_as_numbers(splits):
    keys = {name: {d.number_key(s) for s, _ in pairs} for name, pairs in splits.items()}
    for name, pairs in splits.items():
        assert len(keys[name]) == len(pairs), f"duplicate numbers inside {name}"
    names = list(splits)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert not keys[a] & keys[b], f"{a} and {b} share numbers"


def test_unseen_split_is_really_unseen(splits):
    assert all(d.in_held_out_range(s) for s, _ in splits["unseen"])
    for name in ("train", "valid", "test"):
        assert not any(d.in_held_out_range(s) for s, _ in splits[name]), name
    # no 6-digit training number starts with a 5 ("five hundred ... thousand" first)...
    def integer_digits(source):
        return d.number_key(source).lstrip("-").split(".")[0]

    train_integers = [integer_digits(s) for s, _ in splits["train"]]
    assert not any(len(i) == 6 and i[0] == "5" for i in train_integers)
    assert all(t.removeprefix("minus ").startswith("five hundred") for _, t in splits["unseen"])
    # ...yet "five hundred <tens/ones> thousand" occurs inside 7-9 digit training numbers
    assert any(
        len(integer_digits(s)) >= 7 and integer_digits(s)[-6] == "5" and "million five hundred" in t
        for s, t in splits["train"]
    )
    # the unseen split varies in the same ways as the others
    sources = [s for s, _ in splits["unseen"]]
    assert any("," in s for s in sources) and any("," not in s for s in sources)
    assert any(s.startswith("-") for s in sources) and any("." in s for s in sources)


def test_every_target_word_is_in_the_vocab_and_every_word_is_trained(splits):
    tv, sv = d.target_vocab(), d.source_vocab()
    for name, pairs in splits.items():
        words = {w for _, t in pairs for w in t.split()}
        chars = {c for s, _ in pairs for c in s}
        assert words <= set(tv.itos[4:]), (name, words - set(tv.itos))
        assert chars <= set(sv.itos[4:]), (name, chars - set(sv.itos))
        if name == "train":  # the model sees every word and character in training
            assert words == set(d.TARGET_WORDS) and chars == set(d.SOURCE_CHARS)
    source, target = splits["unseen"][0]
    assert tv.decode(tv.encode(target)) == target and sv.decode(sv.encode(source)) == source


def test_targets_are_the_readings_and_lengths_within_bounds(splits):
    for pairs in splits.values():
        for source, target in pairs:
            assert len(source) <= d.MAX_SOURCE_CHARS
            assert len(target.split()) <= d.MAX_TARGET_WORDS
    # spot-check the stored targets against the function (all of valid)
    assert all(d.number_to_words(s) == t for s, t in splits["valid"])


def test_distribution_covers_magnitudes_signs_decimals_separators(splits):
    train = [s for s, _ in splits["train"]]
    lengths = {len(d.number_key(s).lstrip("-").split(".")[0]) for s in train}
    assert lengths == set(range(1, 10))
    frac = lambda pred: sum(map(pred, train)) / len(train)
    assert 0.15 < frac(lambda s: s.startswith("-")) < 0.25
    assert 0.4 < frac(lambda s: "." in s) < 0.6
    big = [s for s in train if len(d.number_key(s).lstrip("-").split(".")[0]) >= 4]
    assert 0.4 < sum("," in s for s in big) / len(big) < 0.6
    assert not any("," in s for s in train if len(d.number_key(s).lstrip("-").split(".")[0]) < 4)
    assert "-0" not in train and not any(s.startswith("-0") and set(s) <= set("-0.") for s in train)


def test_generation_is_deterministic_and_seed_dependent(splits):
    # (test_shipped_files_equal_regenerated_bytes compares with another process's output)
    small = {"train": 500, "valid": 20, "test": 20, "unseen": 20}
    first = d.generate_splits(sizes=small)
    assert first == d.generate_splits(sizes=small)
    assert first["train"] == splits["train"][:500]  # train is drawn first: a prefix
    assert d.generate_splits(seed=1, sizes=small)["train"] != first["train"]
    with pytest.raises(ValueError, match="keys"):
        d.generate_splits(sizes={"train": 5})


# ---------------------------------------------------------------------- shipped files


@pytest.mark.parametrize("name", d.SPLITS)
def test_shipped_files_equal_regenerated_bytes(name, splits):
    path = d.split_path(name)
    assert path.is_file(), f"{path} is missing: run `python -m course_utils.data --write data/`"
    assert path.read_bytes() == d.format_tsv(splits[name]).encode("utf-8")


def test_shipped_files_are_small():
    assert sum(d.split_path(name).stat().st_size for name in d.SPLITS) < 3 * 2**20


def test_load_split_reads_files_and_falls_back_to_generating(tmp_path, monkeypatch, splits):
    assert d.load_split("test") == splits["test"]
    d.write_splits(tmp_path)
    assert d.load_split("unseen", data_dir=tmp_path) == splits["unseen"]
    # as in a pip-installed package: no data/ folder beside the package
    monkeypatch.setattr(d, "DATA_DIR", tmp_path / "absent")
    assert d.load_split("valid") == splits["valid"]
    with pytest.raises(ValueError, match="unknown split 'validation'"):
        d.load_split("validation")
    with pytest.raises(FileNotFoundError):
        d.load_split("train", data_dir=tmp_path / "absent")


def test_read_tsv_rejects_malformed_lines(tmp_path):
    path = tmp_path / "bad.tsv"
    path.write_text("1\tone\n2 two\n", encoding="utf-8")
    with pytest.raises(ValueError, match="bad.tsv:2"):
        d.read_tsv(path)


def test_script_check_detects_a_changed_file(tmp_path, capsys):
    d.write_splits(tmp_path)
    assert d.main(["--check", str(tmp_path)]) == 0
    path = d.split_path("valid", tmp_path)
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n", 1))
    assert d.main(["--check", str(tmp_path)]) == 1
    assert "numbers_valid.tsv" in capsys.readouterr().out


# ----------------------------------------------------------------------- vocabularies


def test_vocab_layout_and_round_trip():
    sv, tv = d.source_vocab(), d.target_vocab()
    assert len(sv) == 17 and len(tv) == 37
    for v in (sv, tv):
        assert v.itos[:4] == ["<pad>", "<bos>", "<eos>", "<unk>"]
        assert (v.pad_id, v.bos_id, v.eos_id, v.unk_id) == (0, 1, 2, 3)
    ids = sv.encode("-1,234.50")
    assert len(ids) == 9 and min(ids) >= 4 and sv.decode(ids) == "-1,234.50"
    words = "minus one thousand two hundred thirty four point five zero"
    ids = tv.encode(words, add_bos_eos=True)
    assert ids[0] == tv.bos_id and ids[-1] == tv.eos_id and len(ids) == 12
    assert tv.decode(ids) == words
    assert tv.decode(torch.tensor(ids + [0, 0])) == words


def test_decode_stops_at_eos_and_can_show_specials():
    tv = d.target_vocab()
    seven, eight = tv.stoi["seven"], tv.stoi["eight"]
    ids = [tv.bos_id, seven, tv.eos_id, eight, tv.pad_id]
    assert tv.decode(ids) == "seven"
    assert tv.decode(ids, strip_special=False) == "<bos> seven <eos> eight <pad>"
    assert tv.decode([seven, tv.unk_id]) == "seven <unk>"
    with pytest.raises(ValueError, match="out of range"):
        tv.decode([37])
    with pytest.raises(ValueError, match="1-D"):
        tv.decode(torch.tensor([[seven]]))


def test_encode_errors_name_the_token_and_position():
    sv, tv = d.source_vocab(), d.target_vocab()
    with pytest.raises(ValueError, match=r"character 'x' at position 2 of '12x'"):
        sv.encode("12x")
    with pytest.raises(ValueError, match=r"word 'eleventy' at position 1"):
        tv.encode("one eleventy")
    with pytest.raises(ValueError, match="<pad>"):
        tv.encode("one <pad>")  # a special spelled in text is not a token
    assert tv.encode("one eleventy", allow_unk=True) == [tv.stoi["one"], tv.unk_id]
    with pytest.raises(ValueError, match="unique"):
        d.Vocab(["a", "a"])


# ---------------------------------------------------------------- dataset and collate


def _toy_batch():
    pairs = [("7", "seven"), ("-1,234.5", d.number_to_words("-1,234.5")), ("40", "forty")]
    ds = d.NumberWordsDataset(pairs, d.source_vocab(), d.target_vocab())
    return pairs, ds, d.collate([ds[i] for i in range(len(ds))])


def test_dataset_items():
    pairs, ds, _ = _toy_batch()
    src, tgt = ds[1]
    assert src.dtype == tgt.dtype == torch.long
    assert src.tolist() == ds.src_vocab.encode("-1,234.5")  # no <bos>/<eos> on the source
    assert tgt[0].item() == d.BOS_ID and tgt[-1].item() == d.EOS_ID
    assert len(tgt) == len(pairs[1][1].split()) + 2 and len(ds) == 3


def test_collate_shapes_padding_and_shift():
    pairs, ds, batch = _toy_batch()
    L_src = max(len(s) for s, _ in pairs)  # 8
    L_tgt = max(len(t.split()) for _, t in pairs) + 2  # 11 words + 2
    assert batch.src.shape == (3, L_src) and batch.tgt.shape == (3, L_tgt)
    assert batch.tgt_in.shape == batch.tgt_out.shape == (3, L_tgt - 1)
    assert batch.src[0].tolist() == ds[0][0].tolist() + [0] * (L_src - 1)
    assert batch.tgt[2].tolist() == ds[2][1].tolist() + [0] * (L_tgt - 3)
    assert torch.equal(batch.tgt_in, batch.tgt[:, :-1])
    assert torch.equal(batch.tgt_out, batch.tgt[:, 1:])
    assert (batch.tgt_in[:, 0] == d.BOS_ID).all()
    # the longest target loses only its <eos> from tgt_in; the others keep it
    assert (batch.tgt_out == d.EOS_ID).sum() == 3 and (batch.tgt_in == d.EOS_ID).sum() == 2
    assert batch.num_tokens == sum(len(t.split()) + 1 for _, t in pairs)


def test_collate_masks_polarity():
    _, _, batch = _toy_batch()
    assert batch.src_mask.dtype == batch.tgt_mask.dtype == torch.bool
    assert batch.src_mask.shape == (3, 1, batch.src.size(1))
    assert batch.src_mask[0, 0].tolist() == [True] + [False] * (batch.src.size(1) - 1)
    assert torch.equal(batch.src_mask[:, 0], batch.src != 0)  # True = real token, may attend
    L = batch.tgt_in.size(1)
    assert batch.tgt_mask.shape == (3, L, L)
    expected = causal_mask(L) & (batch.tgt_in != 0)[:, None, :]  # (B, L, L)
    assert torch.equal(batch.tgt_mask, expected)
    # "seven": tgt_in = <bos> seven <eos> <pad>...: query 2 sees keys 0..2, never key 3+
    assert batch.tgt_mask[0, 2].tolist() == [True, True, True] + [False] * (L - 3)
    assert batch.tgt_mask[0, 0].tolist() == [True] + [False] * (L - 1)  # no peeking ahead


def test_collate_errors_and_to():
    with pytest.raises(ValueError, match="empty"):
        d.collate([])
    with pytest.raises(ValueError, match="<bos> and <eos>"):
        d.collate([(torch.tensor([4]), torch.tensor([1]))])
    _, _, batch = _toy_batch()
    moved = batch.to("cpu")
    assert torch.equal(moved.tgt_mask, batch.tgt_mask) and moved.num_tokens == batch.num_tokens

"""Tests for notebook 08's reference code: the reviews data (course_utils/reviews.py), the
classifier (course_utils/classifier.py), its parity with BERT's layer, the shipped
checkpoint and the benchmark script."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from course_utils import EncoderLayer, TransformerClassifier, gelu, masked_mean_pool, padding_mask, reviews
from course_utils.bert_weights import bert_attention_mask, copy_bert_layer
from course_utils.classifier_training import (
    CHECKPOINT,
    BagOfWords,
    classifier_accuracy,
    fit_classifier,
    load_pretrained_classifier,
)


# ---------------------------------------------------------------- data
def test_reviews_are_deterministic_disjoint_and_labelled_by_the_rule():
    splits = reviews.generate_reviews()
    assert {k: len(v) for k, v in splits.items()} == reviews.SPLIT_SIZES
    texts = [{t for t, _ in pairs} for pairs in splits.values()]
    assert sum(map(len, texts)) == len(set().union(*texts)), "splits overlap (or hold duplicates)"
    for pairs in splits.values():
        assert all(reviews.label_of(t) == label for t, label in pairs)
        assert 0.45 < sum(label for _, label in pairs) / len(pairs) < 0.55  # balanced
    # the same seed gives the same reviews (a fresh generation, not the cached one)
    again = reviews.generate_reviews.__wrapped__(reviews.SEED)
    assert again["test"][:50] == splits["test"][:50]
    assert reviews.generate_reviews.__wrapped__(reviews.SEED + 1)["test"][:50] != splits["test"][:50]


@pytest.mark.parametrize(
    "text, label",
    [
        ("the plot was good", 1),
        ("the plot was not good", 0),
        ("the plot was not very bad", 1),
        ("the plot was good but the cast was not good", 0),
        ("the plot was not good but the cast was good", 1),  # same words, opposite label
        ("the film is dull and the music is really weak", 0),
    ],
)
def test_label_of(text, label):
    assert reviews.label_of(text) == label


def test_encode_and_collate():
    ids = reviews.encode("the plot was good")
    assert ids[0] == reviews.CLS_ID and reviews.decode(ids) == ["[CLS]", "the", "plot", "was", "good"]
    tokens, labels = reviews.collate_reviews([("the plot was good", 1), ("the plot was not good but the cast was good", 1)])  # noqa: E501
    assert tokens.shape == (2, 11) and labels.tolist() == [1, 1]
    assert tokens[0, 5:].eq(reviews.PAD_ID).all() and tokens[:, 0].eq(reviews.CLS_ID).all()
    with pytest.raises(ValueError, match="'terrible' at position 3"):
        reviews.encode("the plot was terrible")
    with pytest.raises(ValueError, match="name must be one of"):
        reviews.load_reviews("training")


# ---------------------------------------------------------------- the pieces
def test_gelu_is_torchs_exact_gelu():
    x = torch.cat([torch.linspace(-100, 100, 401), torch.randn(100)])
    assert torch.allclose(gelu(x), F.gelu(x), atol=1e-6)
    assert gelu(x.double()).dtype == torch.float64


def test_masked_mean_pool_skips_padding_anywhere_and_takes_padding_masks():
    x = torch.randn(3, 5, 4)
    mask = torch.tensor([[1, 1, 1, 1, 1], [0, 1, 0, 1, 0], [1, 0, 0, 0, 0]], dtype=torch.bool)
    expected = torch.stack([x[0].mean(0), x[1, [1, 3]].mean(0), x[2, 0]])
    assert torch.allclose(masked_mean_pool(x, mask), expected, atol=1e-6)
    tokens = torch.tensor([[5, 6, 0], [7, 0, 0]])
    assert torch.allclose(masked_mean_pool(x[:2, :3], padding_mask(tokens, 0)), masked_mean_pool(x[:2, :3], tokens != 0))  # noqa: E501


@pytest.mark.parametrize(
    "x, mask, error, words",
    [
        (torch.randn(2, 3), torch.ones(2, 3, dtype=torch.bool), ValueError, "x must have 3 dimensions"),
        (torch.randn(2, 3, 4), torch.ones(2, 3), TypeError, "torch.bool"),
        (torch.randn(2, 3, 4), torch.ones(3, 2, dtype=torch.bool), ValueError, r"mask must have shape \(B, L\)"),
        (torch.randn(2, 3, 4), torch.tensor([[True] * 3, [False] * 3]), ValueError, "at least one True"),
    ],
)
def test_masked_mean_pool_rejects_bad_input(x, mask, error, words):
    with pytest.raises(error, match=words):
        masked_mean_pool(x, mask)


@pytest.mark.parametrize("pooling", ["cls", "mean"])
@pytest.mark.parametrize("norm_first", [False, True])
def test_classifier_ignores_padding(pooling, norm_first):
    """The same review gives the same logits alone and padded inside a longer batch."""
    torch.manual_seed(0)
    model = TransformerClassifier(len(reviews.ITOS), 2, d_model=16, num_heads=2, num_layers=2, d_ff=24,
                                  norm_first=norm_first, pooling=pooling).eval()
    short, long = "the plot was good", "the plot was not good but the cast was very good"
    batch, _ = reviews.collate_reviews([(short, 1), (long, 1)])  # (2, L): the short one padded
    alone, _ = reviews.collate_reviews([(short, 1)])  # (1, 5): no padding
    with torch.no_grad():
        assert torch.allclose(model(batch)[0], model(alone)[0], atol=1e-5)
        assert model(batch).shape == (2, 2)


def test_classifier_cls_reads_position_0_and_rejects_bad_settings():
    torch.manual_seed(0)
    model = TransformerClassifier(12, 3, d_model=8, num_heads=2, num_layers=1, d_ff=16).eval()
    tokens = torch.tensor([[1, 5, 6, 7], [1, 8, 0, 0]])
    with torch.no_grad():
        h = model.encoder(model.positional_encoding(model.embedding(tokens)), padding_mask(tokens, 0))
        assert torch.allclose(model(tokens), model.classifier(h[:, 0]), atol=1e-6)
    with pytest.raises(ValueError, match="pooling must be 'cls' or 'mean'"):
        TransformerClassifier(12, 3, pooling="max")
    with pytest.raises(ValueError, match="tokens must have 2 dimensions"):
        model(tokens[0])
    for pooling in ("cls", "mean"):  # an empty sequence: the course's own error, not an IndexError from h[:, 0]
        model.pooling = pooling
        with pytest.raises(ValueError, match=r"tokens must hold at least one position \(L >= 1\), got shape \(2, 0\)"):
            model(tokens[:, :0])


@pytest.mark.parametrize("d_hidden", [0, 16])  # the linear bag of words and the order-blind MLP
def test_bag_of_words_cannot_see_word_order(d_hidden):
    torch.manual_seed(0)
    bow = BagOfWords(len(reviews.ITOS), 2, d_model=8, d_hidden=d_hidden)
    a, _ = reviews.collate_reviews([("the plot was good but the cast was not good", 0)])
    b, _ = reviews.collate_reviews([("the plot was not good but the cast was good", 1)])
    with torch.no_grad():
        assert torch.allclose(bow(a), bow(b), atol=1e-6)  # same words, opposite labels: one answer for both


def test_bag_of_words_means_every_non_pad_token_cls_included():
    torch.manual_seed(0)
    tokens, _ = reviews.collate_reviews(reviews.load_reviews("train")[:4])  # (4, L), padded at the end
    for d_hidden, layers in ((0, 1), (16, 3)):
        bow = BagOfWords(len(reviews.ITOS), 2, d_model=8, d_hidden=d_hidden)
        assert len(bow.classifier) == layers  # linear: one layer; MLP: Linear, ReLU, Linear
        embedded = bow.embedding(tokens)  # (4, L, 8)
        with torch.no_grad():
            assert torch.allclose(bow(tokens), bow.classifier(masked_mean_pool(embedded, tokens != 0)), atol=1e-6)
            without_cls = masked_mean_pool(embedded, (tokens != 0) & (tokens != reviews.CLS_ID))
            assert not torch.allclose(bow(tokens), bow.classifier(without_cls), atol=1e-4)
    for bad in (-1, 2.0):
        with pytest.raises(ValueError, match="d_hidden must be an int >= 0"):
            BagOfWords(12, 2, d_hidden=bad)


def test_fit_classifier_learns_on_a_small_slice():
    torch.manual_seed(0)
    model = TransformerClassifier(len(reviews.ITOS), 2, d_model=16, num_heads=2, num_layers=1, d_ff=24)
    train = reviews.collate_reviews(reviews.load_reviews("train")[:256])
    history = fit_classifier(model, train, train, steps=30, batch_size=32, lr=3e-3, warmup=5, eval_every=15)
    assert len(history["train_loss"]) == 30 and history["eval_steps"] == [15, 30]
    assert sum(history["train_loss"][-5:]) < sum(history["train_loss"][:5])
    assert model.training  # fit leaves the model in training mode; accuracy restores the mode
    classifier_accuracy(model, *train)
    assert model.training


# ---------------------------------------------------------------- BERT
def test_encoder_layer_with_gelu_equals_berts_layer():
    transformers = pytest.importorskip("transformers", reason="transformers not installed (pip install transformers)")
    from transformers.models.bert.modeling_bert import BertLayer

    torch.manual_seed(0)
    B, L, D, H, d_ff = 3, 7, 12, 3, 20
    config = transformers.BertConfig(hidden_size=D, num_attention_heads=H, intermediate_size=d_ff, hidden_act="gelu",
                                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, layer_norm_eps=1e-5)
    config._attn_implementation = "eager"  # the plain softmax(QK^T / sqrt(d_k)) V, built offline from the config
    bert = BertLayer(config).eval()
    with torch.no_grad():  # random norms, so that a mix-up of the two shows
        for name, p in bert.named_parameters():
            if "LayerNorm" in name:
                p.copy_(torch.randn_like(p) * 0.5 + (1.0 if name.endswith("weight") else 0.0))
    ours = EncoderLayer(D, H, d_ff, activation="gelu").eval()
    copy_bert_layer(ours, bert)
    x = torch.randn(B, L, D)
    tokens = torch.tensor([[5] * L, [5] * 4 + [0] * 3, [5] * 2 + [0] * 5])
    mask = padding_mask(tokens, 0)  # (B, 1, L)
    with torch.no_grad():
        for m in (None, mask):
            theirs = bert(x, attention_mask=None if m is None else bert_attention_mask(m))
            theirs = theirs[0] if isinstance(theirs, tuple) else theirs
            assert torch.allclose(ours(x, m), theirs, atol=1e-5)


# ---------------------------------------------------------------- checkpoint and benchmark
def test_checkpoint_is_small_loads_and_classifies():
    assert CHECKPOINT.stat().st_size < 200_000
    model, meta = load_pretrained_classifier()
    test = reviews.collate_reviews(reviews.load_reviews("test"))
    assert classifier_accuracy(model, *test) >= 0.99
    assert meta["results"]["bag of words"]["test_accuracy"] < 0.75  # the baseline falls well short
    with pytest.raises(FileNotFoundError, match="no classifier checkpoint") as missing:
        load_pretrained_classifier(CHECKPOINT.with_name("missing.pt"))
    # a student has no benchmarks/ folder (Colab): the message names what they can do
    assert "benchmarks" not in str(missing.value) and "TRAIN = True" in str(missing.value)


def test_benchmark_runs_end_to_end(capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    threads = torch.get_num_threads()
    sys.modules.pop("classifier", None)
    try:
        bench = importlib.import_module("classifier")
        assert bench.main(["--threads", "1", "--steps", "3", "--eval-every", "3", "--only", "recipe", "bag of words", "order-blind MLP",  # noqa: E501
                           "--seeds", "0", "1"]) == 0
    finally:
        torch.set_num_threads(threads)
        sys.modules.pop("classifier", None)
    out = capsys.readouterr().out
    assert "| recipe | 0 |" in out and "| bag of words | 1 |" in out and "| order-blind MLP | 0 |" in out
    assert "Over 2 seed(s) (0 1): min-max (median)" in out and "| machine | |" in out
    summary = out[out.index("Over 2 seed(s)"):]
    assert all(f"| {name} | " in summary for name in ("recipe", "bag of words", "order-blind MLP"))


def test_bert_attention_mask_stays_on_the_mask_device():
    # the meta device stands in for a GPU: a mask built without device= would land on the CPU
    got = bert_attention_mask(torch.ones(2, 1, 5, dtype=torch.bool, device="meta"))
    assert got.device.type == "meta" and got.shape == (2, 1, 1, 5)

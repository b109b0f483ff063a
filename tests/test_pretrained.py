"""Tests for course_utils.translator_checkpoint (notebook 07): the shipped checkpoint loads, is small,
matches the data's vocabularies and the recipe's model, and still translates."""

from __future__ import annotations

import pytest
import torch

from course_utils import Transformer, count_parameters
from course_utils import translator_checkpoint as P
from course_utils.data import load_split, number_to_words, source_vocab, target_vocab
from course_utils.translator_training import RECIPE, evaluate, predict

MAX_BYTES = 5 * 2**20  # it ships inside the pip package


@pytest.fixture(scope="module")
def loaded():
    return P.load_pretrained()


def test_checkpoint_is_package_data_and_small():
    assert P.CHECKPOINT.is_file()
    assert P.CHECKPOINT.parent.name == "pretrained" and P.CHECKPOINT.parent.parent.name == "course_utils"
    assert 0 < P.CHECKPOINT.stat().st_size < MAX_BYTES


def test_loads_the_recipe_model_in_eval_mode(loaded):
    model, src_vocab, tgt_vocab = loaded
    assert isinstance(model, Transformer)
    assert not model.training
    assert src_vocab.itos == source_vocab().itos and tgt_vocab.itos == target_vocab().itos
    reference = Transformer(len(src_vocab), len(tgt_vocab), **RECIPE["model"])
    assert count_parameters(model) == count_parameters(reference)
    assert {k: v.shape for k, v in model.state_dict().items()} == {
        k: v.shape for k, v in reference.state_dict().items()
    }
    assert all(p.dtype == torch.float32 and p.device.type == "cpu" for p in model.parameters())
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_info_and_history_describe_the_run():
    info = P.pretrained_info()
    assert info["recipe"] == {k: dict(v) for k, v in RECIPE.items()}, "retrain: RECIPE changed"
    assert info["seed"] == RECIPE["fit"]["seed"] and info["threads"] == P.THREADS
    assert info["test_exact_match"] >= 0.99
    history = P.pretrained_history()
    assert history.steps == RECIPE["fit"]["steps"] == len(history["train_loss"])
    assert len(history.eval_steps) == len(history["val_accuracy"]) >= 1
    assert history.eval_steps[-1] == history.steps
    assert history["train_loss"][-1] < history["train_loss"][0] / 10


def test_translates_a_test_slice(loaded):
    model = loaded[0]
    result = evaluate(model, load_split("test")[:500])
    assert result["n"] == 500
    assert result["exact_match"] >= 0.99, result


def test_predict_with_the_pretrained_model(loaded):
    model = loaded[0]
    for text in ("1,234.5", "-40,019"):
        assert predict(model, text) == number_to_words(text)


def test_device_argument_and_missing_file(tmp_path):
    model, _, _ = P.load_pretrained(device="cpu")
    assert next(model.parameters()).device.type == "cpu"
    with pytest.raises(FileNotFoundError, match="--write"):
        P.load_pretrained(path=tmp_path / "absent.pt")


def test_rejects_a_checkpoint_with_other_vocabularies(tmp_path):
    state = torch.load(P.CHECKPOINT, map_location="cpu", weights_only=True)
    state["vocab"]["target"] = state["vocab"]["target"][:-1]
    path = tmp_path / "other.pt"
    torch.save(state, path)
    with pytest.raises(ValueError, match="target vocabulary differs"):
        P.load_pretrained(path=path)

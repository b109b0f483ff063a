"""hint() finds an exercise under either spelling of its name."""

from __future__ import annotations

import re

import pytest

from course_utils.checks import _core, hint


def snake_case(name: str) -> str:
    """``MultiHeadAttention`` -> ``multi_head_attention``; snake-case names are unchanged."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


CLASSES = sorted(name for name in _core.HINTS if name[0].isupper())


def test_there_are_classes_to_spell_both_ways():
    assert {"MultiHeadAttention", "EncoderLayer", "Transformer"} <= set(CLASSES)


@pytest.mark.parametrize("name", CLASSES)
def test_a_class_is_found_by_its_snake_case_name(name, capsys, monkeypatch):
    monkeypatch.setattr(_core, "_HINT_LEVEL", {})
    hint(name, 1)
    by_class = capsys.readouterr().out
    hint(snake_case(name), 1)
    by_snake = capsys.readouterr().out
    assert by_class.startswith(f"Hint 1/{len(_core.HINTS[name])} for {name}: ")
    assert by_snake == by_class


def test_both_spellings_share_one_hint_level(capsys, monkeypatch):
    monkeypatch.setattr(_core, "_HINT_LEVEL", {})
    hint("multi_head_attention")
    hint("MultiHeadAttention")
    out = capsys.readouterr().out
    assert "Hint 1/" in out and "Hint 2/" in out


def test_a_snake_case_exercise_is_found_by_its_camel_case_spelling(capsys):
    hint("CausalMask", 1)
    assert capsys.readouterr().out.startswith("Hint 1/")


def test_the_last_hint_says_the_reference_shows_in_a_graded_copy(capsys):
    n = len(_core.HINTS["causal_mask"])
    hint("causal_mask", n)
    out = capsys.readouterr().out
    assert "from course_utils import causal_mask" in out and "used the reference" in out


def test_a_name_like_no_exercise_still_gets_the_list(capsys):
    hint("multi_head")
    assert "No hints for 'multi_head'" in capsys.readouterr().out


def test_a_method_finds_its_class_hints(capsys, monkeypatch):
    # trial s3_08: notebook 08 lists the exercise as `TransformerClassifier.forward`
    from course_utils import TransformerClassifier

    monkeypatch.setattr(_core, "_HINT_LEVEL", {})
    hint("TransformerClassifier", 1)
    by_class = capsys.readouterr().out
    hint("TransformerClassifier.forward", 1)
    assert capsys.readouterr().out == by_class
    hint(TransformerClassifier.forward, 1)  # the method itself: its __qualname__
    assert capsys.readouterr().out == by_class
    assert by_class.startswith("Hint 1/")


def test_a_function_defined_inside_another_is_found_by_its_own_name(capsys):
    def gelu(x):  # __qualname__ "test_....<locals>.gelu"
        return x

    hint(gelu, 1)
    assert capsys.readouterr().out.startswith("Hint 1/")

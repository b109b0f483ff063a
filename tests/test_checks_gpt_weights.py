"""Tests for notebook 09's GPT-2 loader checker (course_utils/checks/gpt_weights.py).

Each wrong loader is one a student writes (a table of cases: one loader, one mistake each);
the checker must name the mistake on 20 draws. Correct loaders written in other styles
(a converted state dict through load_state_dict, nanoGPT's loop, .data assignments) pass,
with and without `transformers` (without it the checkpoint comes from a course GPT).
"""

from __future__ import annotations

import sys

import pytest
import torch
from checker_asserts import SEEDS, STABLE, assert_family, assert_mistake, assert_not_implemented, assert_passes
from torch import nn

import course_utils
from course_utils.checks import check_load_gpt2_weights

pytest.importorskip("transformers", reason="the Hugging Face side of the check needs transformers")


def loader(transpose=True, order=("q", "k", "v"), biases=True, norms=True, wpe="all", grad=False, prefix="transformer.",
           split=True, swap_norms=False, skip_c_proj=False):
    """The notebook's loader (copy_ under no_grad), with one switch per mistake."""

    def load_gpt2_weights(model, state_dict):
        sd = state_dict
        D = model.token_embedding.weight.size(1)
        t = (lambda w: w.t()) if transpose else (lambda w: w)
        context = torch.enable_grad() if grad else torch.no_grad()
        with context:
            model.token_embedding.weight.copy_(sd[prefix + "wte.weight"])
            table = sd[prefix + "wpe.weight"]
            if wpe == "all":
                model.position_embedding.weight.copy_(table)
            elif wpe == "to max_len":  # nanoGPT's crop: keep the rows that fit
                model.position_embedding.weight.copy_(table[: model.max_len])
            elif wpe == "first half":
                n = model.max_len // 2
                model.position_embedding.weight[:n].copy_(table[:n])
            for i, block in enumerate(model.blocks):
                p = f"{prefix}h.{i}."
                attn, ff = block.self_attn, block.feed_forward
                w, b = sd[p + "attn.c_attn.weight"], sd[p + "attn.c_attn.bias"]  # (D, 3D), (3D,)
                parts = dict(zip("qkv", w.split(D, dim=1))), dict(zip("qkv", b.split(D)))
                if split == "interleaved":  # every third column: w[:, 0::3], w[:, 1::3], w[:, 2::3]
                    parts = dict(zip("qkv", (w[:, i::3] for i in range(3)))), dict(zip("qkv", (b[i::3] for i in range(3))))  # noqa: E501
                elif split == "reshape (D, D, 3)":  # the same columns, by a reshape with the 3 last
                    parts = dict(zip("qkv", w.reshape(D, D, 3).unbind(-1))), dict(zip("qkv", b.reshape(D, 3).unbind(-1)))  # noqa: E501
                pairs = [(getattr(attn, f"w_{name}"), parts[0][letter], parts[1][letter])
                         for name, letter in zip("qkv", order)]
                if not split:
                    pairs = [(attn.w_q, w, b)]
                if not skip_c_proj:
                    pairs.append((attn.w_o, sd[p + "attn.c_proj.weight"], sd[p + "attn.c_proj.bias"]))
                pairs += [(ff.linear1, sd[p + "mlp.c_fc.weight"], sd[p + "mlp.c_fc.bias"]),
                          (ff.linear2, sd[p + "mlp.c_proj.weight"], sd[p + "mlp.c_proj.bias"])]
                for linear, weight, bias in pairs:
                    linear.weight.copy_(t(weight))
                    if biases:
                        linear.bias.copy_(bias)
                if norms:
                    first, second = ("ln_2", "ln_1") if swap_norms else ("ln_1", "ln_2")
                    for norm, name in ((block.norm1, first), (block.norm2, second)):
                        norm.weight.copy_(sd[p + name + ".weight"])
                        norm.bias.copy_(sd[p + name + ".bias"])
            if norms:
                model.norm.weight.copy_(sd[prefix + "ln_f.weight"])
                model.norm.bias.copy_(sd[prefix + "ln_f.bias"])

    return load_gpt2_weights


def wrong_split(how):
    """The notebook's loader with c_attn split another way (trial r09): `q, k, v = ...` unpacked, as students write."""
    splits = {
        "rows": lambda w, b, D: (w.split(D, dim=0), b.split(D)),  # (D, 3D) along its D rows: one piece
        "transposed first": lambda w, b, D: (w.t().split(D, dim=1), b.split(D)),  # (3D, D) along its D columns
        "chunk rows": lambda w, b, D: (w.chunk(3, dim=0), b.chunk(3)),  # three pieces of D/3 rows
        "pieces of 3": lambda w, b, D: (w.split(3, dim=1)[:3], b.split(3)[:3]),  # the width for the number
        "bias along dim 1": lambda w, b, D: (w.split(D, dim=1), b.split(D, dim=1)),  # a (3D,) bias has no dim 1
    }

    def load_gpt2_weights(model, state_dict):
        D = model.token_embedding.weight.size(1)
        with torch.no_grad():
            model.token_embedding.weight.copy_(state_dict["transformer.wte.weight"])
            model.position_embedding.weight.copy_(state_dict["transformer.wpe.weight"])
            for i, block in enumerate(model.blocks):
                p, attn = f"transformer.h.{i}.", block.self_attn
                weights, biases = splits[how](state_dict[p + "attn.c_attn.weight"], state_dict[p + "attn.c_attn.bias"], D)  # noqa: E501
                w_q, w_k, w_v = weights
                b_q, b_k, b_v = biases
                for linear, w, b in ((attn.w_q, w_q, b_q), (attn.w_k, w_k, b_k), (attn.w_v, w_v, b_v)):
                    linear.weight.copy_(w.t())
                    linear.bias.copy_(b)
        loader()(model, state_dict)  # the rest, as the notebook's loader does it

    return load_gpt2_weights


def converted(state_dict, transpose=True):
    """GPT-2's state dict under the course's names (the conversion students write for load_state_dict)."""
    sd = {k.removeprefix("transformer."): v for k, v in state_dict.items()}
    D = sd["wte.weight"].size(1)
    out = {"token_embedding.weight": sd["wte.weight"], "position_embedding.weight": sd["wpe.weight"],
           "norm.weight": sd["ln_f.weight"], "norm.bias": sd["ln_f.bias"], "lm_head.weight": sd["wte.weight"]}
    i = 0
    while f"h.{i}.ln_1.weight" in sd:
        p, q = f"h.{i}.", f"blocks.{i}."
        for name, w, b in zip(("w_q", "w_k", "w_v"), sd[p + "attn.c_attn.weight"].split(D, 1),
                              sd[p + "attn.c_attn.bias"].split(D)):
            out[q + f"self_attn.{name}.weight"], out[q + f"self_attn.{name}.bias"] = (w.t() if transpose else w), b
        for theirs, ours in (("attn.c_proj", "self_attn.w_o"), ("mlp.c_fc", "feed_forward.linear1"),
                             ("mlp.c_proj", "feed_forward.linear2")):
            w = sd[p + theirs + ".weight"]
            out[q + ours + ".weight"], out[q + ours + ".bias"] = (w.t() if transpose else w), sd[p + theirs + ".bias"]
        for theirs, ours in (("ln_1", "norm1"), ("ln_2", "norm2")):
            out[q + ours + ".weight"], out[q + ours + ".bias"] = sd[p + theirs + ".weight"], sd[p + theirs + ".bias"]
        i += 1
    return out


def through_load_state_dict(model, state_dict):  # right: load_state_dict copies into the existing Parameters
    model.load_state_dict(converted(state_dict))


def through_load_state_dict_not_strict(model, state_dict):  # right: the tied head's key left out
    ours = converted(state_dict)
    del ours["lm_head.weight"]
    missing, unexpected = model.load_state_dict(ours, strict=False)
    assert missing == ["lm_head.weight"] and not unexpected


def nanogpt_style(model, state_dict):  # right: nanoGPT's from_pretrained loop, keys renamed on the way
    sd = model.state_dict()
    for key, value in converted(state_dict).items():
        with torch.no_grad():
            sd[key].copy_(value)


def through_data(model, state_dict):  # right: .data keeps the Parameter objects (and the tie)
    for key, value in converted(state_dict).items():
        if key != "lm_head.weight":
            model.get_parameter(key).data = value.clone()


def untied_by_parameters(model, state_dict):  # new Parameters for both: right values, two tensors
    for key, value in converted(state_dict).items():
        module_name, _, attr = key.rpartition(".")
        setattr(model.get_submodule(module_name), attr, nn.Parameter(value.clone()))


def untied_by_assign(model, state_dict):
    ours = {k: v.clone() for k, v in converted(state_dict).items()}
    model.load_state_dict(ours, assign=True)


def not_transposed_by_data(model, state_dict):
    for key, value in converted(state_dict, transpose=False).items():
        if key != "lm_head.weight":
            model.get_parameter(key).data = value.clone()


def pops_the_head(model, state_dict):  # "tied: not needed", taken out of the caller's dict
    state_dict.pop("lm_head.weight")
    loader()(model, state_dict)


def returns_a_new_model(model, state_dict):
    new = course_utils.GPT(model.vocab_size, model.d_model, model.blocks[0].self_attn.num_heads, len(model.blocks),
                           model.blocks[0].feed_forward.d_ff, 0.0, model.max_len)
    loader()(new, state_dict)
    return new


MISTAKES = [
    ("no transpose (copy_)", loader(transpose=False), "Conv1D weight not transposed", ("w.t()",)),
    ("no transpose (.data)", not_transposed_by_data, "Conv1D weight not transposed", ("(in, out)", "w.t()")),
    ("k, q, v", loader(order=("k", "q", "v")), "c_attn split in the wrong order", ("[q | k | v]",)),
    ("q, v, k", loader(order=("q", "v", "k")), "c_attn split in the wrong order", ("[q | k | v]",)),
    ("c_attn whole", loader(split=False), "c_attn not split", ("split",)),
    ("c_attn interleaved", loader(split="interleaved"), "c_attn split interleaved", ("0::3", "[q | k | v]")),
    ("c_attn as (D, D, 3)", loader(split="reshape (D, D, 3)"), "c_attn split interleaved", ("(D, D, 3)", "split(D")),
    ("new Parameters", untied_by_parameters, "head untied by loading", ("copy_", "same tensor")),
    ("assign=True", untied_by_assign, "head untied by loading", ("assign=True",)),
    ("wpe cropped to max_len", loader(wpe="to max_len"), "position table cut",
     ("max_len=", "copy_ raises when the shapes differ", "ValueError")),
    ("wpe half", loader(wpe="first half"), "position table cut", ("whole table",)),
    ("wpe forgotten", loader(wpe="none"), "position table not copied", ("transformer.wpe.weight",)),
    ("biases forgotten", loader(biases=False), "biases not copied", ("bias",)),
    ("norms forgotten", loader(norms=False), "norms not copied", ("ln_1", "ln_f")),
    ("norms swapped", loader(swap_norms=True), "norms swapped", ("ln_1", "norm1")),
    ("c_proj forgotten", loader(skip_c_proj=True), "parameter not copied", ("self_attn.w_o.weight", "attn.c_proj")),
    ("no torch.no_grad()", loader(grad=True), "copy_ without no_grad", ("torch.no_grad()",)),
    ("keys without prefix", loader(prefix=""), "wrong key name", ("'transformer.wte.weight'",)),
    ("pop from the caller's dict", pops_the_head, "input modified in place", ("no pop",)),
    ("returns a new model", returns_a_new_model, "nothing copied", ("in place",)),
    *((f"c_attn split: {how}", wrong_split(how), "c_attn split wrongly", ("qkv.split(D, dim=-1)",))
      for how in ("rows", "transposed first", "chunk rows", "pieces of 3", "bias along dim 1")),
]


@pytest.mark.parametrize("student", [course_utils.load_gpt2_weights, loader(), through_load_state_dict,
                                     through_load_state_dict_not_strict, nanogpt_style, through_data],
                         ids=["reference", "notebook", "load_state_dict", "not strict", "nanoGPT", ".data"])
def test_correct_loaders_pass(student):
    assert_passes(check_load_gpt2_weights, student, repeat=5)


@pytest.mark.parametrize("label, student, mistake, words", MISTAKES, ids=[m[0] for m in MISTAKES])
def test_each_mistake_is_named_on_20_draws(label, student, mistake, words):
    assert_family([(label, check_load_gpt2_weights, student, mistake, words)])


def test_the_verdict_says_what_it_compared_with(monkeypatch):
    ok = check_load_gpt2_weights(course_utils.load_gpt2_weights)
    assert ok.passed and "Hugging Face's GPT2LMHeadModel of a random GPT2Config" in ok.feedback
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers now raises ImportError
    without = check_load_gpt2_weights(course_utils.load_gpt2_weights)
    assert without.passed and "transformers is not installed" in without.feedback
    assert without.feedback.count("\n") == 0  # one line
    assert_mistake(check_load_gpt2_weights, loader(order=("k", "q", "v")), "c_attn split in the wrong order",
                   repeat=SEEDS[:STABLE])
    assert_mistake(check_load_gpt2_weights, loader(transpose=False), "Conv1D weight not transposed", repeat=3)


def test_stub_and_wrong_arguments():
    def stub(model, state_dict):
        raise NotImplementedError()

    assert_not_implemented(check_load_gpt2_weights, stub)
    wrong = check_load_gpt2_weights(course_utils.GPT)
    assert not wrong.passed and wrong.mistake == "not a function"


def test_the_reference_refuses_a_model_of_other_sizes():
    source = course_utils.GPT(20, 12, 3, 2, 24, 0.0, 10)
    from course_utils.gpt_weights import gpt2_state_dict

    state = gpt2_state_dict(source)
    model = course_utils.GPT(20, 12, 3, 2, 24, 0.0, 8)
    before = model.token_embedding.weight.detach().clone()
    with pytest.raises(ValueError, match=r"position_embedding.weight has shape \(8, 12\) in the model but \(10, 12\)"):
        course_utils.load_gpt2_weights(model, state)
    assert torch.equal(model.token_embedding.weight, before)  # nothing copied before the refusal

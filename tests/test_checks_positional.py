"""Tests for the notebook 03 checkers (course_utils/checks/positional.py).

Every catalogued mistake is written as a small, real student implementation; the checker
must fail it, say why in plain words and name the mistake. Correct implementations
written in other ways must pass. Each verdict is repeated on fresh random inputs.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from checker_asserts import STABLE, assert_mistake, assert_passes
from torch import nn

import course_utils
from course_utils.checks import (
    check_positional_encoding,
    check_sinusoidal_positional_encoding,
    check_token_embedding,
    hint,
)
from course_utils.checks._core import HINTS
from course_utils.checks.positional import _table


# ---------------------------------------------------------------- sinusoidal_positional_encoding
def pe_pow(max_len, d_model):
    pos = torch.arange(max_len).float().unsqueeze(1)
    div = torch.pow(10000, torch.arange(0, d_model, 2).float() / d_model)
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(pos / div)
    pe[:, 1::2] = torch.cos(pos / div)
    return pe


def pe_loop(max_len, d_model):
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    for pos in range(max_len):
        for i in range(0, d_model, 2):
            angle = pos / 10000 ** (i / d_model)
            pe[pos, i] = math.sin(angle)
            pe[pos, i + 1] = math.cos(angle)
    return pe


def pe_stack(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float32)[:, None]
    inv = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
    angle = pos * inv
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1)


def pe_loop32(max_len, d_model):
    return pe_loop(max_len, d_model).float()  # a float64 loop, stored in the contract's float32


@pytest.mark.parametrize("fn", [course_utils.sinusoidal_positional_encoding, pe_pow, pe_loop32, pe_stack])
def test_sinusoidal_correct_variants_pass(fn):
    assert_passes(check_sinusoidal_positional_encoding, fn)


def pe_swapped(max_len, d_model):
    pos = torch.arange(max_len).float().unsqueeze(1)
    div = torch.pow(10000, torch.arange(0, d_model, 2).float() / d_model)
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.cos(pos / div)
    pe[:, 1::2] = torch.sin(pos / div)
    return pe


def pe_concatenated(max_len, d_model):
    pos = torch.arange(max_len).float().unsqueeze(1)
    div = torch.pow(10000, torch.arange(0, d_model, 2).float() / d_model)
    return torch.cat([torch.sin(pos / div), torch.cos(pos / div)], dim=1)


def pe_exponent_pair_index(max_len, d_model):
    pos = torch.arange(max_len).float().unsqueeze(1)
    div = torch.pow(10000, torch.arange(d_model // 2).float() / d_model)
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(pos / div)
    pe[:, 1::2] = torch.cos(pos / div)
    return pe


def pe_exponent_column(max_len, d_model):
    pe = torch.zeros(max_len, d_model)
    for pos in range(max_len):
        for j in range(d_model):
            angle = pos / 10000 ** (j / d_model)
            pe[pos, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    return pe


def pe_exponent_double_column(max_len, d_model):
    pe = torch.zeros(max_len, d_model)
    for pos in range(max_len):
        for j in range(d_model):
            angle = pos / 10000 ** (2 * j / d_model)
            pe[pos, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    return pe


def pe_from_one(max_len, d_model):
    pos = torch.arange(1, max_len + 1).float().unsqueeze(1)
    div = torch.pow(10000, torch.arange(0, d_model, 2).float() / d_model)
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(pos / div)
    pe[:, 1::2] = torch.cos(pos / div)
    return pe


def pe_variant(layout="sin even", exponent="2i", start=0, base=10000.0):
    """A student's table with the given conventions (the defaults are the paper's)."""

    def table(max_len, d_model):
        half = d_model // 2
        pos = torch.arange(start, start + max_len).double().unsqueeze(1)  # (max_len, 1)
        out = torch.zeros(max_len, d_model, dtype=torch.float64)
        for j in range(d_model):
            pair = j // 2 if layout.endswith("even") else j % half
            e = {"2i": 2 * pair, "i": pair, "j": j, "2j": 2 * j}[exponent]
            angle = pos[:, 0] / base ** (e / d_model)
            first = j % 2 == 0 if layout.endswith("even") else j < half
            use_sin = first == layout.startswith("sin")
            out[:, j] = torch.sin(angle) if use_sin else torch.cos(angle)
        return out.float()

    return table


# (the words every diagnosis of one part says, catalogue name) per convention
PARTS = {
    ("layout", "cos even"): ("sin and cos are swapped", "sin and cos swapped"),
    ("layout", "sin | cos"): ("all sines sit in the first half", "sin and cos concatenated"),
    ("layout", "cos | sin"): ("all cosines sit in the first half", "sin and cos concatenated"),
    ("exponent", "i"): ("the exponent is i/d_model", "exponent i/d_model"),
    ("exponent", "j"): ("each column's own index j", "exponent j/d_model"),
    ("exponent", "2j"): ("counts every column twice", "exponent 2j/d_model"),
    ("start", 1): ("positions start at 1", "positions start at 1"),
}
FAMILY = [
    dict(layout=layout, exponent=exponent, start=start)
    for layout in ("sin even", "cos even", "sin | cos", "cos | sin")
    for exponent in ("2i", "i", "j", "2j")
    for start in (0, 1)
][1:]  # all but the paper's


@pytest.mark.parametrize("conventions", FAMILY, ids=lambda c: ",".join(f"{v}" for v in c.values()))
def test_every_table_convention_and_combination_is_named(conventions):
    parts = [PARTS[k, v] for k, v in conventions.items() if (k, v) in PARTS]
    words = [w for w, _ in parts]
    assert_mistake(check_sinusoidal_positional_encoding, pe_variant(**conventions), parts[0][1], *words)


def test_other_frequencies_say_which_columns_are_right():
    # an uncatalogued base, 3000 instead of 10000: columns 0 and 1 (frequency 10000^0 = 1) are still right
    assert_mistake(
        check_sinusoidal_positional_encoding, pe_variant(base=3000.0), "values differ",
        # "columns 0-1 are right, ..." or, when the last column's tiny frequency is within tolerance on a
        # short table, "columns 0-1, 15 are right, ..." (seed 2425680612)
        "columns 0-1", "are right, columns 2-", "check the frequency", repeat=STABLE,
    )


# ---- blind trial t0203: frequency slips and a float16 table, each named on 20 draws
def pe_positive_exponent(max_len, d_model):  # the trial's: multiplies by 10000^(2i/d) in float32
    pos = torch.arange(max_len)[:, None].float()
    w = 10000 ** (torch.arange(0, d_model, 2) / d_model)
    return torch.stack([torch.sin(pos * w), torch.cos(pos * w)], -1).flatten(1)


def pe_positive_exponent_exp(max_len, d_model):  # the exp form without its minus sign, filled by slices
    pos = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
    div = torch.exp(torch.arange(0, d_model, 2).float() * (math.log(10000.0) / d_model))
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * div), torch.cos(pos * div)
    return pe


def pe_exponent_floored(max_len, d_model):  # the trial's: an integer exponent 2i // d_model = 0
    pos = torch.arange(max_len)[:, None]
    angle = torch.div(pos, 10000 ** (torch.arange(0, d_model, 2) // d_model), rounding_mode="floor").float()
    return torch.stack([torch.sin(angle), torch.cos(angle)], -1).flatten(1)


def pe_angle_floored(max_len, d_model):  # position // frequency on float tensors
    pos = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
    angle = pos // 10000 ** (torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
    return torch.stack([torch.sin(angle), torch.cos(angle)], -1).flatten(1)


def pe_half(max_len, d_model):
    return pe_pow(max_len, d_model).half()


@pytest.mark.parametrize("fn, mistake, words", [
    (pe_positive_exponent, "positive exponent", ["pos * 10000^(2i/d_model)", "instead of dividing it"]),
    (pe_positive_exponent_exp, "positive exponent", ["mind the minus sign"]),
    (pe_variant(base=1000.0), "wrong base", ["the base 1,000 instead of 10000"]),
    (pe_variant(base=100000.0), "wrong base", ["the base 100,000 instead of 10000"]),
    (pe_exponent_floored, "integer division", ["2i // d_model is 0 for every pair", "Divide exactly"]),
    (pe_angle_floored, "integer division", ["rounds each angle down"]),
    (pe_half, "wrong dtype", ["rounded to torch.float16", "leave out the .half()"]),
], ids=["pow", "exp", "base 1000", "base 100000", "exponent floored", "angle floored", "half"])
def test_sinusoidal_trial_t0203_mistakes_are_named_on_20_seeds(fn, mistake, words):
    assert_mistake(check_sinusoidal_positional_encoding, fn, mistake, *words, repeat=STABLE)


def pe_transposed(max_len, d_model):
    return pe_pow(max_len, d_model).T


def pe_integer(max_len, d_model):
    pe = torch.zeros(max_len, d_model, dtype=torch.long)
    pe[:, 1::2] = 1  # cos(0) for every position: never got to the angles
    return pe


@pytest.mark.parametrize(
    "fn, mistake, words",
    [
        (pe_swapped, "sin and cos swapped", ["even columns (0, 2, 4, ...) hold sin"]),
        (pe_concatenated, "sin and cos concatenated", ["interleaves"]),
        (pe_exponent_pair_index, "exponent i/d_model", ["2i/d_model"]),
        (pe_exponent_column, "exponent j/d_model", ["different frequencies"]),
        (pe_exponent_double_column, "exponent 2j/d_model", ["counts every column twice"]),
        (pe_from_one, "positions start at 1", ["start at 0"]),
        (pe_transposed, "table transposed", ["(d_model, max_len)"]),
        (pe_integer, "not floating point", ["torch.int64", "floating point"]),
    ],
)
def test_sinusoidal_mistakes_are_named(fn, mistake, words):
    assert_mistake(check_sinusoidal_positional_encoding, fn, mistake, *words)


def test_sinusoidal_stub_error_and_weird_returns():
    def stub(max_len, d_model):
        raise NotImplementedError()

    r = check_sinusoidal_positional_encoding(stub)
    assert not r.passed and "not implemented yet" in r.feedback

    def crashes(max_len, d_model):
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2] = torch.sin(torch.arange(max_len))
        return pe

    for seed in (None, 322295107):  # that seed once drew max_len == d_model / 2, where the fill broadcasts
        r = check_sinusoidal_positional_encoding(crashes, seed=seed)
        assert not r.passed and r.status == "error" and "RuntimeError" in r.feedback
    assert "pe[:, 0::2] = torch.sin(torch.arange(max_len))" in r.feedback

    for weird in (lambda m, d: None, lambda m, d: pe_pow(m, d).numpy(), lambda m, d: (pe_pow(m, d),), lambda m, d: "pe"):  # noqa: E501
        r = check_sinusoidal_positional_encoding(weird)
        assert r.passed is False and r.feedback.startswith("[X]")


def test_local_table_matches_reference():
    ref = course_utils.sinusoidal_positional_encoding(50, 14).double()
    assert torch.allclose(_table(50, 14), ref, atol=1e-4)


# ---------------------------------------------------------------- PositionalEncoding
def make_pe(bug=None):
    """A student's PositionalEncoding, correct unless ``bug`` names a mistake."""

    class StudentPE(nn.Module):
        def __init__(self, d_model, max_len=5000, dropout=0.0):
            super().__init__()
            self.max_len = max_len
            self.p = dropout
            self.dropout = nn.Dropout(0.1 if bug == "hard-coded dropout p" else dropout)
            make = {"wrong table": pe_swapped, "wrong frequencies": pe_variant(base=1000.0)}.get(bug, pe_pow)
            table = make(5000 if bug == "wrong pe shape" else max_len, d_model)
            if bug in ("float64 pe", "float64 pe not converted", "pe re-cast in forward"):
                table = table.double()
            if bug == "sequence-first slice (silent)":
                table = table.unsqueeze(1)  # (max_len, 1, D), the layout of PyTorch's tutorial
            if bug == "pe is a Parameter":
                self.pe = nn.Parameter(table, requires_grad=False)
            elif bug == "Parameter as buffer":  # trial C's W23: the table function returned a Parameter
                self.register_buffer("pe", nn.Parameter(table))
            elif bug == "pe not a buffer":
                self.pe = table
            elif bug == "pe not persistent":
                self.register_buffer("pe", table, persistent=False)
            elif bug == "missing pe":
                self.register_buffer("encoding", table)
            else:
                self.register_buffer("pe", table)

        def forward(self, x):
            L = x.size(1)
            if L > self.max_len and bug not in ("no length check", "no length check (silent)"):
                raise ValueError("sequence too long" if bug == "vague error" else f"L = {L} > max_len = {self.max_len}")
            if L == self.max_len and bug == "L == max_len refused":  # trial C's W12: `>=`
                raise ValueError(f"L = {L} >= max_len = {self.max_len}")
            if bug == "no length check (silent)" and L > self.max_len:
                return x + course_utils.sinusoidal_positional_encoding(L, x.size(-1))
            pe = getattr(self, "pe", None)
            if bug == "float64 pe":  # allowed: converted to x's dtype, so the output stays float32
                pe = pe.to(x.dtype)
            if bug == "pe re-cast in forward":  # allowed: the buffer re-cast, its values kept
                self.pe = pe = pe.to(x.dtype)
            if bug == "pe moved to the CPU":  # trial I: right on the CPU, a device clash on a GPU
                pe = pe.to("cpu")
            if bug == "pe moved to x's device":  # allowed: a no-op once the module is moved
                pe = pe.to(x.device)
            if bug == "pe.float()":  # trial C's W21: a .half() module then returns float32
                pe = pe.float()
            if bug == "pe not sliced":
                return self.dropout(x + self.pe)
            if bug == "multiplied instead of added":
                return self.dropout(x * pe[:L])
            if bug == "dropout before adding":
                return self.dropout(x) + pe[:L]
            if bug == "dropout on the table only":  # trial t0203
                return x + self.dropout(pe[:L])
            if bug == "one row of pe added":  # trial t0203: pe[L], not pe[:L]
                return self.dropout(x + pe[L])
            if bug == "dropout missing":
                return x + pe[:L]
            if bug == "x scaled by sqrt(d_model)":
                return self.dropout(x * math.sqrt(x.size(-1)) + pe[:L])
            if bug == "sum scaled by sqrt(d_model)":
                return self.dropout((x + pe[:L]) * math.sqrt(x.size(-1)))
            if (bug or "").startswith("sequence-first slice"):
                return self.dropout(x + pe[: x.size(0)])
            if bug == "dropout ignores eval mode":
                return F.dropout(x + pe[:L], p=self.p)
            if bug == "keep mask rand < p" and self.training:  # right scale, but keeps a share p, not 1 - p
                return (x + pe[:L]) * (torch.rand_like(x) < self.p) / (1 - self.p)
            if bug == "input modified in place":
                x += pe[:L]
                return self.dropout(x)
            if bug == "pe scaled in place":  # the buffer itself changes at every call
                self.pe.mul_(1.5)
            if bug == "missing pe":
                return self.dropout(x + self.encoding[:L])
            if bug == "table rebuilt in forward":  # the text says the table is computed once
                return self.dropout(x + course_utils.sinusoidal_positional_encoding(L, x.size(-1)).to(x.dtype))
            if bug == "x detached":
                return self.dropout(x.detach() + pe[:L])
            return self.dropout(x + pe[:L])

    return StudentPE


class BatchedBufferPE(nn.Module):
    """(1, max_len, D) buffer, a Python-loop table, pe[:, :L]."""

    def __init__(self, d_model, max_len=5000, dropout=0.0):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        self.register_buffer("pe", pe_loop(max_len, d_model).float().unsqueeze(0))

    def forward(self, x):
        if x.shape[1] > self.pe.shape[1]:
            raise ValueError(f"sequence of length {x.shape[1]} is longer than max_len {self.pe.shape[1]}")
        return self.dropout(x + self.pe[:, : x.shape[1]])


@pytest.mark.parametrize("cls", [course_utils.PositionalEncoding, make_pe(), make_pe("float64 pe"),
                                 make_pe("pe re-cast in forward"), make_pe("pe moved to x's device")])
def test_positional_encoding_correct_variants_pass(cls):
    assert_passes(check_positional_encoding, cls)


@pytest.mark.parametrize(
    "bug, mistake, words",
    [
        ("pe is a Parameter", "pe is a Parameter", ["nn.Parameter", "register_buffer"]),
        ("pe not a buffer", "pe not a buffer", ["plain tensor attribute", "state_dict"]),
        ("pe not persistent", "pe not persistent", ["persistent=False"]),
        ("missing pe", "missing pe", ["buffer named `pe`"]),
        ("wrong pe shape", "wrong pe shape", ["(5000,"]),
        ("wrong table", "wrong table", ["sin and cos swapped", "sinusoidal_positional_encoding"]),
        ("pe not sliced", "pe not sliced", ["pe[:L]", "line"]),
        ("multiplied instead of added", "multiplied instead of added", ["multiplied"]),
        ("dropout before adding", "dropout before adding", ["before adding"]),
        ("dropout on the table only", "dropout on the table only", ["x + dropout(pe[:L])", "dropout(x + pe[:L])"]),
        ("one row of pe added", "one row of pe added", ["was added to every position", "pe[:L] (with the colon)"]),
        ("dropout missing", "dropout missing", ["no dropout was applied"]),
        ("hard-coded dropout p", "hard-coded dropout p", ["p = 0.1", "instead of the dropout argument"]),
        ("x scaled by sqrt(d_model)", "scaled by sqrt(d_model)", ["x is multiplied by sqrt(d_model)", "TokenEmbedding"]),  # noqa: E501
        ("sum scaled by sqrt(d_model)", "scaled by sqrt(d_model)", ["the sum x + pe[:L] is multiplied"]),
        ("sequence-first slice", "sequence-first slice", ["pe[:x.size(0)]", "batch first", "pe[:x.size(1)]", "line"]),
        ("sequence-first slice (silent)", "sequence-first slice", ["row b of the table", "pe[:x.size(1)]"]),
        ("wrong frequencies", "wrong table", ["columns 0-1 are right, columns 2-", "sinusoidal_positional_encoding"]),
        ("dropout ignores eval mode", "dropout ignores eval mode", ["eval mode"]),
        ("no length check", "no length check", ["RuntimeError", "ValueError", "max_len"]),
        ("no length check (silent)", "no length check", ["returned a result instead of raising"]),
        ("input modified in place", "input modified in place", ["`x` in place"]),
        ("pe scaled in place", "parameters modified in place", ["changed `pe` in place", "self.pe[:L]"]),
        ("x detached", "gradient blocked", ["does not require grad", ".detach()"]),
        ("float64 pe not converted", "dtype not preserved", ["returns torch.float64 instead of torch.float32"]),
        ("vague error", "error message without values", ["'sequence too long'", "names both numbers"]),
        ("L == max_len refused", "length check off by one", ["L = max_len", "not `>=`"]),
        ("Parameter as buffer", "pe is a Parameter", ["holds an nn.Parameter", "register_buffer('pe', table)"]),
        ("pe.float()", "dtype not preserved", ["returns torch.float32 instead of torch.float16", ".float()"]),
        ("pe moved to the CPU", "wrong device", [".cpu()", "x + self.pe[:L]"]),
        ("table rebuilt in forward", "table rebuilt in forward", ["computes the table again", "self.pe[:L]"]),
        ("keep mask rand < p", "wrong dropout rate", ["of the entries, where dropout=0.3 zeroes about 30%", ">= p"]),
    ],
)
def test_positional_encoding_mistakes_are_named(bug, mistake, words):
    # the families added last: 20 draws each
    new = ("hard-coded", "sqrt", "sequence-first", "frequencies", "rebuilt", "table only", "one row", "keep mask")
    assert_mistake(check_positional_encoding, make_pe(bug), mistake, *words,
                   repeat=STABLE if any(w in bug for w in new) else 3)


def pe_float64(max_len, d_model):
    return pe_pow(max_len, d_model).double()  # trial C's W08: right values, float64


def test_batched_pe_buffer_is_named():
    # trial C's W11: a (1, max_len, D) buffer; the contract's state_dict holds (max_len, D)
    assert_mistake(check_positional_encoding, BatchedBufferPE, "wrong pe shape", "(1,", "An extra axis is not needed")


def pe_parameter(max_len, d_model):
    return nn.Parameter(pe_pow(max_len, d_model))  # trial C's W11 of the table


def test_table_returned_as_parameter_is_named():
    assert_mistake(check_sinusoidal_positional_encoding, pe_parameter, "pe is a Parameter", "returns an nn.Parameter")


def test_float64_table_is_named():
    assert_mistake(check_sinusoidal_positional_encoding, pe_float64, "wrong dtype", "dtype torch.float64",
                   "float32", "mat1 and mat2")


def test_positional_encoding_stub_and_instance():
    class Stub(nn.Module):
        def __init__(self, d_model, max_len=5000, dropout=0.0):
            super().__init__()
            raise NotImplementedError()

    r = check_positional_encoding(Stub)
    assert not r.passed and "not implemented yet" in r.feedback
    r = check_positional_encoding(course_utils.PositionalEncoding(8))
    assert not r.passed and r.mistake == "not a class"

    class ReturnsTuple(course_utils.PositionalEncoding):
        def forward(self, x):
            return (super().forward(x),)

    r = check_positional_encoding(ReturnsTuple)
    assert not r.passed and "should be a torch.Tensor" in r.feedback


# ---------------------------------------------------------------- TokenEmbedding
def make_embedding(scale):
    class StudentEmbedding(nn.Module):
        def __init__(self, vocab_size, d_model):
            super().__init__()
            self.d_model = d_model
            self.embedding = nn.Embedding(vocab_size, d_model)

        def forward(self, tokens):
            return scale(self.embedding(tokens), self.d_model)

    return StudentEmbedding


class FunctionalEmbedding(nn.Module):
    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.scale = torch.tensor(float(d_model)).sqrt()

    def forward(self, tokens):
        return F.embedding(tokens, self.embedding.weight) * self.scale


class ScaledTwice(make_embedding(lambda e, d: e * math.sqrt(d))):
    """Issue 22: the weights multiplied by sqrt(d_model) in __init__ and the output again in forward."""

    def __init__(self, vocab_size, d_model):
        super().__init__(vocab_size, d_model)
        with torch.no_grad():
            self.embedding.weight.mul_(math.sqrt(d_model))


class SmallInit(make_embedding(lambda e, d: e * math.sqrt(d))):
    """Right: a smaller initialisation (normal with std d_model^-0.5, as tensor2tensor), scaled once."""

    def __init__(self, vocab_size, d_model):
        super().__init__(vocab_size, d_model)
        nn.init.normal_(self.embedding.weight, std=d_model**-0.5)


class DataLookup(make_embedding(None)):
    def forward(self, tokens):
        return self.embedding.weight.data[tokens] * math.sqrt(self.d_model)  # right values, no gradient


@pytest.mark.parametrize(
    "cls",
    [
        course_utils.TokenEmbedding,
        make_embedding(lambda e, d: e * math.sqrt(d)),
        make_embedding(lambda e, d: e * d**0.5),
        make_embedding(lambda e, d: e / (1 / math.sqrt(d))),
        FunctionalEmbedding,
        SmallInit,
    ],
)
def test_token_embedding_correct_variants_pass(cls):
    assert_passes(check_token_embedding, cls)


class SparseEmbeddingW08(nn.Module):
    """Trial C's W08: Adam then refuses the sparse gradients."""

    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model, sparse=True)
        self.d_model = d_model

    def forward(self, tokens):
        return self.embedding(tokens) * math.sqrt(self.d_model)


class ScaledInPlaceG(make_embedding(None)):
    """Trial G: the weights scaled in place at each call (the second call looked like `* d_model`)."""

    def forward(self, tokens):
        with torch.no_grad():
            self.embedding.weight.mul_(math.sqrt(self.d_model))
        return self.embedding(tokens)


def test_token_embedding_scaled_twice_is_named_on_20_seeds():
    assert_mistake(check_token_embedding, ScaledTwice, "embeddings scaled twice", "__init__ also multiplies",
                   "Scale once", repeat=STABLE)


class NamedWrong(nn.Module):
    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, d_model)

    def forward(self, tokens):
        return self.emb(tokens)


class SwappedSizes(nn.Module):
    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.embedding = nn.Embedding(d_model, vocab_size)

    def forward(self, tokens):
        return self.embedding(tokens)


@pytest.mark.parametrize(
    "cls, mistake, words",
    [
        (make_embedding(lambda e, d: e), "embeddings not scaled", ["not scaled", "sqrt(d_model)"]),
        (make_embedding(lambda e, d: e * d), "scaled by d_model", ["multiplied by d_model"]),
        (make_embedding(lambda e, d: e / math.sqrt(d)), "divided by sqrt(d_model)", ["divided by sqrt(d_model)"]),
        (NamedWrong, "missing embedding", ["submodule `embedding`"]),
        (SwappedSizes, "wrong embedding size", ["nn.Embedding(vocab_size, d_model)"]),
        (make_embedding(lambda e, d: (e * math.sqrt(d)).detach()), "gradient blocked", ["does not require grad"]),
        (DataLookup, "gradient blocked", ["does not require grad", ".data"]),
        # trial C's W15: float64 out of a float32 model; and a float32 cast in a float16 one
        (make_embedding(lambda e, d: e.double() * math.sqrt(d)), "dtype not preserved", ["torch.float64 instead of"]),
        (make_embedding(lambda e, d: e.float() * math.sqrt(d)), "dtype not preserved",
         ["torch.float32 instead of torch.float16"]),
        (SparseEmbeddingW08, "sparse embedding", ["sparse=True", "Adam"]),
        (ScaledInPlaceG, "parameters modified in place", ["changed `embedding.weight` in place",
                                                          "self.embedding(tokens) * math.sqrt(self.d_model)"]),
    ],
)
def test_token_embedding_mistakes_are_named(cls, mistake, words):
    assert_mistake(check_token_embedding, cls, mistake, *words)


class VocabScaled(nn.Module):  # trial t0203: the square root of the vocabulary size
    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.vocab_size = vocab_size
        self.embedding = nn.Embedding(vocab_size, d_model)

    def forward(self, tokens):
        return self.embedding(tokens) * math.sqrt(self.vocab_size)


@pytest.mark.parametrize("cls, mistake, words", [
    (make_embedding(lambda e, d: e * int(math.sqrt(d))), "integer square root", ["int(math.sqrt(d_model))",
                                                                                 "cuts off the fraction"]),
    (make_embedding(lambda e, d: e * math.isqrt(d)), "integer square root", ["int(math.sqrt(d_model))"]),
    (VocabScaled, "scaled by sqrt(vocab_size)", ["sqrt(vocab_size)", "instead of sqrt(d_model)"]),
], ids=["int(math.sqrt)", "math.isqrt", "sqrt(vocab_size)"])
def test_token_embedding_trial_t0203_mistakes_are_named_on_20_seeds(cls, mistake, words):
    assert_mistake(check_token_embedding, cls, mistake, *words, repeat=STABLE)


def test_token_embedding_stub_and_weird_return():
    class Stub(nn.Module):
        def __init__(self, vocab_size, d_model):
            super().__init__()
            self.embedding = nn.Embedding(vocab_size, d_model)

        def forward(self, tokens):
            raise NotImplementedError()

    r = check_token_embedding(Stub)
    assert not r.passed and "not implemented yet" in r.feedback

    class ReturnsNone(Stub):
        def forward(self, tokens):
            self.embedding(tokens)

    r = check_token_embedding(ReturnsNone)
    assert not r.passed and "NoneType" in r.feedback


def test_hints_registered(capsys):
    for name in ("sinusoidal_positional_encoding", "PositionalEncoding", "TokenEmbedding"):
        assert 2 <= len(HINTS[name]) <= 4
        hint(name, 2)
        assert f"Hint 2/{len(HINTS[name])} for {name}" in capsys.readouterr().out


# ---------------------------------------------------------------- blind trial t0203: its correct variants pass
def pe_outer(max_len, d_model):  # torch.outer, slices filled into torch.empty
    angle = torch.outer(torch.arange(max_len).float(), 1 / 10000 ** (torch.arange(d_model // 2) * 2 / d_model))
    pe = torch.empty(max_len, d_model)
    pe[:, ::2], pe[:, 1::2] = angle.sin(), angle.cos()
    return pe


def pe_stack_float64(max_len, d_model):  # computed in float64, returned as float32
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    w = torch.pow(10000.0, -torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    return torch.stack((torch.sin(pos * w), torch.cos(pos * w)), dim=-1).reshape(max_len, d_model).float()


class NarrowPE(course_utils.PositionalEncoding):
    """pe.narrow, torch.add and a message in other words; F.dropout with self.training."""

    def forward(self, x):
        L = x.size(1)
        if L > self.pe.size(0):
            raise ValueError(f"L = {L} > max_len = {self.pe.size(0)}")
        return F.dropout(torch.add(x, self.pe.narrow(0, 0, L)), self.dropout.p, self.training)


class IndexEmbedding(nn.Module):
    """weight[tokens] scaled by a tensor's sqrt, out of place."""

    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.d_model = d_model
        self.embedding = nn.Embedding(vocab_size, d_model)

    def forward(self, tokens):
        return self.embedding.weight[tokens].mul(torch.tensor(float(self.d_model)).sqrt())


class InPlaceScaledOutput(IndexEmbedding):
    """The looked-up vectors (a new tensor) scaled in place: the weights stay as they are."""

    def forward(self, tokens):
        e = self.embedding(tokens)
        e.mul_(math.sqrt(self.d_model))
        return e


@pytest.mark.parametrize("check, student", [
    (check_sinusoidal_positional_encoding, pe_outer), (check_sinusoidal_positional_encoding, pe_stack_float64),
    (check_positional_encoding, NarrowPE), (check_token_embedding, IndexEmbedding),
    (check_token_embedding, InPlaceScaledOutput),
], ids=["table: outer", "table: float64 then float()", "PE: narrow + F.dropout", "embedding: weight[tokens]",
        "embedding: mul_ on the output"])
def test_trial_t0203_correct_variants_pass(check, student):
    assert_passes(check, student)


# ---------------------------------------------------------------- trial r0305 (second blind trial of 03)
def _exp_form_table(log_of_base):
    """The exp form exp(-2i * log_of_base / d_model) of the frequencies, interleaved sin/cos."""

    def table(max_len, d_model):
        freq = torch.exp(-torch.arange(0, d_model, 2).float() * log_of_base / d_model)  # (d_model/2,)
        angle = torch.arange(max_len).float()[:, None] * freq  # (max_len, d_model/2)
        return torch.stack([angle.sin(), angle.cos()], -1).flatten(1)

    return table


class AssignsRegisterBuffer(course_utils.PositionalEncoding):
    def __init__(self, d_model, max_len=5000, dropout=0.0):
        super().__init__(d_model, max_len, dropout)
        self.pe = self.register_buffer("pe", course_utils.sinusoidal_positional_encoding(max_len, d_model))


class LengthFromLastAxis(course_utils.PositionalEncoding):
    def forward(self, x):
        L = x.size(-1)
        if L > self.max_len:
            raise ValueError(f"L={L} > max_len={self.max_len}")
        return self.dropout(x + self.pe[:L])


class RowsFromOne(course_utils.PositionalEncoding):
    def forward(self, x):
        L = x.size(1)
        if L > self.max_len:
            raise ValueError(f"L={L} > max_len={self.max_len}")
        return self.dropout(x + self.pe[1:L + 1])


def _embedding_with(**options):
    class OptionEmbedding(course_utils.TokenEmbedding):
        def __init__(self, vocab_size, d_model):
            super().__init__(vocab_size, d_model)
            self.embedding = nn.Embedding(vocab_size, d_model, **options)

    return OptionEmbedding


@pytest.mark.parametrize("check, student, mistake, words", [
    (check_sinusoidal_positional_encoding, _exp_form_table(1.0), "ln 10000 forgotten",
     ["exp(-2i / d_model)", "math.log(10000.0)"]),
    (check_sinusoidal_positional_encoding, _exp_form_table(math.log10(10000)), "log10 instead of ln",
     ["log10(10000) = 4", "natural log"]),
    (check_positional_encoding, AssignsRegisterBuffer, "register_buffer result assigned",
     ["register_buffer returns None", "without assigning"]),
    (check_positional_encoding, LengthFromLastAxis, "length from the wrong axis", ["x.size(-1)", "x.size(1)"]),
    (check_positional_encoding, RowsFromOne, "positions start at 1", ["pe[1:L+1]", "pe[:L]"]),
    (check_token_embedding, _embedding_with(padding_idx=0), "padding_idx set",
     ["padding_idx=0", "never trains", "plain nn.Embedding(vocab_size, d_model)"]),
    (check_token_embedding, _embedding_with(max_norm=1.0), "max_norm set", ["max_norm=1", "in place"]),
], ids=["exp(-2i/d)", "log10", "self.pe = register_buffer", "x.size(-1)", "pe[1:L+1]", "padding_idx", "max_norm"])
def test_trial_r0305_mistakes_named_on_20_seeds(check, student, mistake, words):
    assert_mistake(check, student, mistake, *words, repeat=STABLE)


# ---------------------------------------------------------------- trial q0305 (third blind trial of 03)
class OneHotFloatEmbedding(course_utils.TokenEmbedding):
    """The one-hot product §7 teaches, cast with .float(): breaks once the module is float16."""

    def forward(self, tokens):
        one_hot = F.one_hot(tokens, self.embedding.num_embeddings).float()  # (B, L, V)
        return one_hot @ self.embedding.weight * math.sqrt(self.d_model)  # (B, L, D)


class OneHotWeightDtypeEmbedding(course_utils.TokenEmbedding):
    """The same product in the weight's dtype, as the exercise text says: right."""

    def forward(self, tokens):
        one_hot = F.one_hot(tokens, self.embedding.num_embeddings).to(self.embedding.weight.dtype)  # (B, L, V)
        return one_hot @ self.embedding.weight * math.sqrt(self.d_model)  # (B, L, D)


def test_trial_q0305_one_hot_in_weight_dtype_passes():
    assert_passes(check_token_embedding, OneHotWeightDtypeEmbedding)


def test_trial_q0305_one_hot_float_names_the_weight_dtype_on_20_seeds():
    # the input is integer token ids: "the input's dtype" would be wrong advice
    assert_mistake(check_token_embedding, OneHotFloatEmbedding, "dtype not preserved", "torch.float16",
                   "the weight's dtype (.to(self.embedding.weight.dtype))", repeat=STABLE)
    r = check_token_embedding(OneHotFloatEmbedding, seed=1)
    assert "the input's dtype" not in r.feedback, r.feedback


def pe_rounded_angles(max_len, d_model):  # trial q0305: pos * omega rounded with .round()
    pos = torch.arange(max_len).unsqueeze(1).float()  # (max_len, 1)
    omega = 10000 ** (-torch.arange(0, d_model, 2).float() / d_model)  # (d_model/2,)
    angle = (pos * omega).round()  # (max_len, d_model/2)
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2], pe[:, 1::2] = angle.sin(), angle.cos()
    return pe


def test_trial_q0305_rounded_angles_are_named_on_20_seeds():
    assert_mistake(check_sinusoidal_positional_encoding, pe_rounded_angles, "angles rounded", ".round()",
                   "leave the rounding out", repeat=STABLE)


# ---------------------------------------------------------------- blind trial s3_03 (this session's 03 trial)
def _s3_table(angle_of):  # the tester's layout (sin even, cos odd) around a slipped angle
    def table(max_len, d_model):
        pos = torch.arange(max_len, dtype=torch.float32)[:, None]  # (max_len, 1)
        two_i = torch.arange(0, d_model, 2, dtype=torch.float32)  # (d_model/2,)
        angle = angle_of(pos, two_i, max_len, d_model)  # (max_len, d_model/2)
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(angle), torch.cos(angle)
        return pe
    return table


def _paper(pos, two_i, max_len, d_model):
    return pos * 10000 ** (-two_i / d_model)


def pe_sin_in_every_column(max_len, d_model):
    pe = _s3_table(_paper)(max_len, d_model)
    pe[:, 1::2] = pe[:, 0::2]
    return pe


def pe_float16_angles(max_len, d_model):  # the angles computed in float16, the table float32
    pos = torch.arange(max_len).half()[:, None]  # (max_len, 1)
    w = (10000 ** (-torch.arange(0, d_model, 2).float() / d_model)).half()  # (d_model/2,)
    angle = (pos * w).float()  # (max_len, d_model/2)
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2], pe[:, 1::2] = angle.sin(), angle.cos()
    return pe


S3_TABLES = [
    ("frequencies reversed", _s3_table(lambda p, t, M, d: _paper(p, t, M, d).flip(1)), ["pair 0 turns slowest"]),
    ("d_model hard-coded", _s3_table(lambda p, t, M, d: p * 10000 ** (-t / 512)), ["divides by 512"]),
    ("linear frequencies", _s3_table(lambda p, t, M, d: p * (1 - t / d)), ["equal steps", "geometric"]),
    ("exponent reaches 1", _s3_table(lambda p, t, M, d: p * 10000 ** (-torch.linspace(0, 1, d // 2))),
     ["torch.linspace(0, 1, d_model // 2)", "torch.arange(0, d_model, 2) / d_model"]),
    ("positions divided by max_len", _s3_table(lambda p, t, M, d: _paper(p / M, t, M, d)), ["pos / max_len"]),
    ("angles in degrees", _s3_table(lambda p, t, M, d: torch.deg2rad(_paper(p, t, M, d))), ["already in radians"]),
    ("sin in every column", pe_sin_in_every_column, ["pe[:, 1::2] = torch.cos(angle)"]),
    ("low precision", pe_float16_angles, ["float16 or bfloat16", "dtype=torch.float32"]),
]


@pytest.mark.parametrize("mistake, fn, words", S3_TABLES, ids=[m for m, _, _ in S3_TABLES])
def test_trial_s3_03_table_mistakes_named_on_20_seeds(mistake, fn, words):
    assert_mistake(check_sinusoidal_positional_encoding, fn, mistake, *words, repeat=STABLE)


def test_columns_report_counts_whole_pairs_in_good_grammar():
    from course_utils.checks.positional import _columns_report

    table = course_utils.sinusoidal_positional_encoding(10, 8)  # (10, 8)
    wrong = table.clone()
    wrong[:, 2:] += 1  # pairs 1-3 wrong
    assert _columns_report(wrong, table).startswith("columns 0-1 are right, columns 2-7 are not")
    wrong = table.clone()
    wrong[:, 1:] += 1  # column 0 right alone: no whole pair
    assert _columns_report(wrong, table).startswith("no sin/cos pair of columns is right")
    wrong = course_utils.sinusoidal_positional_encoding(10, 4)
    wrong[:, 2:] += 1
    assert _columns_report(wrong, course_utils.sinusoidal_positional_encoding(10, 4)).startswith(
        "columns 0-1 are right, columns 2-3 are not")
    wrong = torch.zeros(3, 2)
    assert _columns_report(torch.zeros(3, 2), wrong).startswith("columns 0-1 are right")


class PETableArgumentsSwapped(course_utils.PositionalEncoding):
    def __init__(self, d_model, max_len=5000, dropout=0.0):
        super().__init__(d_model, max_len, dropout)
        self.pe = course_utils.sinusoidal_positional_encoding(d_model, max_len)  # (d_model, max_len): swapped


class PELastRowEverywhere(course_utils.PositionalEncoding):
    def forward(self, x):
        L = x.size(1)
        if L > self.pe.size(0):
            raise ValueError(f"sequence length L = {L} is longer than max_len = {self.pe.size(0)}")
        return self.dropout(x + self.pe[L - 1])


class PEFirstBatchItemOnly(course_utils.PositionalEncoding):
    def forward(self, x):
        L = x.size(1)
        if L > self.pe.size(0):
            raise ValueError(f"sequence length L = {L} is longer than max_len = {self.pe.size(0)}")
        out = x.clone()
        out[0] = out[0] + self.pe[:L]
        return self.dropout(out)


class PEBatchMean(course_utils.PositionalEncoding):
    def forward(self, x):
        return super().forward(x).mean(0, keepdim=True).expand_as(x)


class TokenEmbeddingSqrtL(course_utils.TokenEmbedding):
    def forward(self, tokens):
        return self.embedding(tokens) * math.sqrt(tokens.size(1))


class TokenEmbeddingTimes8(course_utils.TokenEmbedding):  # sqrt(64), d_k's habit
    def forward(self, tokens):
        return self.embedding(tokens) * 8.0


@pytest.mark.parametrize("check, student, mistake, words", [
    (check_positional_encoding, PETableArgumentsSwapped, "table arguments swapped",
     ["the two arguments are swapped", "sinusoidal_positional_encoding(max_len, d_model)"]),
    (check_positional_encoding, PELastRowEverywhere, "one row of pe added", ["pe[L - 1]", "pe[:L]"]),
    (check_positional_encoding, PEFirstBatchItemOnly, "encoding added to one batch item", ["only batch item 0"]),
    (check_positional_encoding, PEBatchMean, "batch mixed", ["mean over the batch"]),
    (check_token_embedding, TokenEmbeddingSqrtL, "scaled by sqrt(L)", ["sequence length", "self.d_model"]),
    (check_token_embedding, TokenEmbeddingTimes8, "wrong scale factor", ["the same number, 8,", "math.sqrt(self.d_model)"]),  # noqa: E501
], ids=["pe (d_model, max_len)", "pe[L-1]", "batch item 0 only", "batch mean", "sqrt(L)", "times 8"])
def test_trial_s3_03_mistakes_named_on_20_seeds(check, student, mistake, words):
    assert_mistake(check, student, mistake, *words, repeat=STABLE)


def test_times_8_named_where_the_draw_once_had_d_model_8():
    # seed 1362871798 drew d_model = 8, where a hard-coded 8 is exactly "times d_model" (CI-like full run found it)
    assert_mistake(check_token_embedding, TokenEmbeddingTimes8, "wrong scale factor", "the same number, 8,",
                   repeat=(1362871798, *range(7000, 7060)))

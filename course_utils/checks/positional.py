"""Checkers for notebook 03 (positions and embeddings): ``sinusoidal_positional_encoding``,
``PositionalEncoding``, ``TokenEmbedding``.

Sizes are random and all different (``max_len != d_model``, ``B != L != D``); a wrong result
is compared with the reference computed with each catalogued mistake and the first match is
named (``CheckResult.mistake``). Every combination of sin/cos layout, exponent and first
position is a table mistake (``_table_mistakes``); any other wrong table is reported with the
columns that are right. Tables are compared with ``atol=1e-4``: correct float32 tables
computed in other ways differ by a few ``1e-5``, every catalogued mistake by far more.
"""

from __future__ import annotations

import copy
import functools
import math
import re
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import torch
from torch import Tensor, nn

from ..embeddings import TokenEmbedding
from ..positional import sinusoidal_positional_encoding
from ._core import (
    Failure,
    Mistake,
    StudentError,
    call_student,
    check_dtype_follows,
    check_module_device,
    check_state_unchanged,
    check_unchanged,
    checker,
    describe_shape,
    dropout_scale,
    expect_close,
    fail,
    fail_eval_dropout,
    fail_fixed_p,
    gradient_probe,
    matches,
    module_state,
    raised,
    randint,
    register_hints,
    require_module_class,
)
from ._pairing import build_student
from .catalogue import DEVICE_PROBE, DTYPE_PROBE, GRADIENT_PROBE, Catalogue, Entry, Output, Probe, Reference

__all__ = ["check_sinusoidal_positional_encoding", "check_positional_encoding", "check_token_embedding"]

_ATOL = 1e-4


# ---------------------------------------------------------------- sinusoidal table
# Where sin and cos go: interleaved (the paper: sin in even columns) or in two halves.
_LAYOUTS = {
    "sin even": ("sin", "cos", False),
    "cos even": ("cos", "sin", False),
    "sin | cos": ("sin", "cos", True),
    "cos | sin": ("cos", "sin", True),
}


def _table(
    max_len: int, d_model: int, *, start: int = 0, exponent: str = "2i", layout: str = "sin even"
) -> Tensor:
    """The table in float64, with mistakes (the defaults give the paper's). ``exponent`` is the
    numerator in ``10000^(. / d_model)``: ``"2i"`` (right; ``i`` = pair index), ``"i"``, ``"j"``
    (column index) or ``"2j"``; ``layout``, a key of ``_LAYOUTS`` (in halves, column c is pair c)."""
    first, second, halves = _LAYOUTS[layout]
    pos = torch.arange(start, start + max_len, dtype=torch.float64).unsqueeze(1)  # (max_len, 1)
    j = torch.arange(d_model, dtype=torch.float64)  # (d_model,) column index
    i = j % (d_model // 2) if halves else torch.div(j, 2, rounding_mode="floor")  # (d_model,) pair index
    e = {"2i": 2 * i, "i": i, "j": j, "2j": 2 * j}[exponent] / d_model  # (d_model,)
    angle = pos / 10000.0**e  # (max_len, d_model)
    in_first = (j < d_model // 2) if halves else (j % 2 == 0)  # (d_model,)
    return torch.where(in_first, getattr(torch, first)(angle), getattr(torch, second)(angle))


_INTERLEAVED = "the paper interleaves them: column 2i is sin and column 2i+1 is cos of the same angle."
_LAYOUT_WORDS = {
    "cos even": ("sin and cos swapped",
                 "sin and cos are swapped: even columns (0, 2, 4, ...) hold sin, odd columns cos."),
    "sin | cos": ("sin and cos concatenated",
                  f"all sines sit in the first half and all cosines in the second; {_INTERLEAVED}"),
    "cos | sin": ("sin and cos concatenated",
                  f"all cosines sit in the first half and all sines in the second; {_INTERLEAVED}"),
}
_EXPONENT_WORDS = {
    "i": ("exponent i/d_model", "the frequencies are off: the exponent is i/d_model with i the pair index; it "
          "should be 2i/d_model, i.e. the even column index 2i over d_model."),
    "j": ("exponent j/d_model", "the exponent uses each column's own index j, 10000^(j/d_model), so the sin "
          "and the cos of a pair get different frequencies; both columns 2i and 2i+1 use 10000^(2i/d_model)."),
    "2j": ("exponent 2j/d_model", "the exponent is 2j/d_model with j the column index, which counts every "
           "column twice: for columns 2i and 2i+1 it should be 2i/d_model (the even column index over d_model)."),
}
_FROM_ONE = ("positions start at 1", "positions start at 1; they start at 0 (row 0 is sin(0) = 0 and cos(0) = 1).")


_LAYOUT_MEANINGS = {
    "sin and cos swapped": "sin and cos exchanged in the table",
    "sin and cos concatenated": "sines and cosines in two halves instead of interleaved",
    "exponent i/d_model": "frequency exponent i/d_model instead of 2i/d_model",
    "exponent j/d_model": "frequency exponent from each column's own index",
    "exponent 2j/d_model": "frequency exponent 2j/d_model with j the column index",
    "positions start at 1": "positions counted from 1 instead of 0",
}


def _table_entries() -> list[Entry]:
    """Every combination of a layout, an exponent and a first position but the paper's, one
    mistake first: the name is the first part's, the message says every part."""
    out: list[tuple[int, str, str, dict[str, Any]]] = []
    for layout in _LAYOUTS:
        for exponent in ("2i", "i", "j", "2j"):
            for start in (0, 1):
                parts = [w for w in (_LAYOUT_WORDS.get(layout), _EXPONENT_WORDS.get(exponent),
                                     _FROM_ONE if start else None) if w is not None]
                if parts:
                    out.append((len(parts), parts[0][0], " Also, ".join(words for _, words in parts),
                                dict(start=start, exponent=exponent, layout=layout)))
    declared: set[str] = set()
    entries = []
    for _, name, words, settings in sorted(out, key=lambda member: member[0]):  # single mistakes first
        meaning = _LAYOUT_MEANINGS.get(name) if name not in declared else None
        declared.add(name)
        entries.append(Entry(name, meaning, Reference(
            lambda c, settings=settings: [({}, functools.partial(_table, c.M, c.D, **settings))], "table"), words))
    return entries


def _table_mistakes(max_len: int, d_model: int) -> list[Mistake]:
    """The tables of the layout, exponent and first-position mistakes (to name a student's `pe`)."""
    every = SINUSOID.candidates(SimpleNamespace(M=max_len, D=d_model, got=None), "table", M=max_len, D=d_model,
                                D_2=d_model - 2)
    return [m for m in every if m[0] in _LAYOUT_MEANINGS]


def _interleaved(angle: Tensor) -> Tensor:
    """(max_len, d_model/2) angles -> the (max_len, d_model) table, sin in even columns."""
    return torch.stack((angle.sin(), angle.cos()), dim=-1).flatten(1)


_CONDITIONED = 50.0  # radians: larger angles computed in float32 are off by more than the tolerance


def _conditioned(c: Any, angle: Callable[[Tensor, Tensor], Tensor], rounded: bool = False) -> list:
    """A table whose angles come from a slip in pos / 10000^(2i/d_model) (layout and first position
    right): ``angle(pos (max_len, 1), two_i (d_model/2,))``. An angle pos * 10000^(2i/d_model) grows
    to ~1e5, where a float32 table is off by far more than the tolerance from these float64 ones, so
    entries of angle over ``_CONDITIONED`` take the student's own value: the rest must match."""
    def make() -> Tensor | None:
        got = c.got
        if not isinstance(got, Tensor) or tuple(got.shape) != (c.M, c.D) or not got.is_floating_point():
            return None
        pos = torch.arange(c.M, dtype=torch.float64).unsqueeze(1)  # (max_len, 1)
        two_i = torch.arange(0, c.D, 2, dtype=torch.float64)  # (d_model/2,)
        a = angle(pos, two_i)  # (max_len, d_model/2)
        well = a.abs() < _CONDITIONED  # (max_len, d_model/2)
        if rounded:  # an angle within float32's error of a half rounds either way: got's own value there
            well = well & ~(((a - a.floor()) - 0.5).abs() < 1e-4)
            a = a.round()
        well = well.repeat_interleave(2, dim=1)  # (max_len, d_model)
        return torch.where(well, _interleaved(a), got.detach().double())
    return [({}, make)]


def _right_angle(pos: Tensor, two_i: Tensor, d_model: int) -> Tensor:
    return pos / 10000.0 ** (two_i / d_model)  # (max_len, d_model/2)


_INTEGER = ("the angles come from an integer division: {how}. Divide exactly: pos / 10000 ** (two_i / d_model) with "
            "float tensors (torch.arange(..., dtype=torch.float32)), no // and no rounding_mode='floor'.")
_EXP_FORM = ("the frequencies are exp(-2i{times} / d_model): in the exp form the exponent needs the natural log of the "
             "base, exp(-2i * math.log(10000.0) / d_model) = 10000^(-2i/d_model){tail}")


def _sin_everywhere(c: Any) -> list:
    pos = torch.arange(c.M, dtype=torch.float64).unsqueeze(1)  # (max_len, 1)
    right = _right_angle(pos, torch.arange(0, c.D, 2, dtype=torch.float64), c.D)  # (max_len, d_model/2)
    return [({}, lambda: torch.stack((right.sin(), right.sin()), dim=-1).flatten(1))]


def _ranges(columns: list[int]) -> str:
    """``[0, 1, 2, 5, 7, 8]`` -> ``"0-2, 5, 7-8"``."""
    spans: list[list[int]] = []
    for c in columns:
        if spans and c == spans[-1][1] + 1:
            spans[-1][1] = c
        else:
            spans.append([c, c])
    return ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in spans)


def _columns_report(table: Tensor, expected: Tensor, atol: float = _ATOL) -> str:
    """Which columns of a (max_len, d_model) table are right, in words: whole sin/cos pairs
    only (a lone column near 0 or 1 agrees by chance, as the cos of a pair that barely turns)."""
    right = ((table.double() - expected.double()).abs().amax(dim=0) <= atol).tolist()  # (d_model,)
    pair_ok = [right[j] and right[j + 1] for j in range(0, len(right) - 1, 2)]  # (d_model/2,)
    right = [pair_ok[j // 2] if j // 2 < len(pair_ok) else False for j in range(len(right))]
    good, bad = ([j for j, ok in enumerate(right) if ok == want] for want in (True, False))

    def columns(js: list[int]) -> str:
        return f"column {js[0]} is" if len(js) == 1 else f"columns {_ranges(js)} are"

    head = f"{columns(good)} right, {columns(bad)} not" if good else "no sin/cos pair of columns is right"
    return (f"{head} (column 2i is sin(pos / 10000^(2i/d_model)), column 2i+1 the cos of the same angle, pos = 0, "
            "1, ...): check the frequency and the function of the wrong ones")


def _half_computed(got: Tensor, expected: Tensor) -> dict[str, Any] | None:
    """A float32 table a little off everywhere it is off (at most ~0.1, far less than any wrong
    formula, far more than float32's rounding): part of it was computed in float16 or bfloat16."""
    diff = (got.detach().double() - expected.double()).abs()  # (max_len, d_model)
    worst = float(diff.max())
    if not (worst < 0.15 and float(diff.mean()) < 0.02):
        return None
    r, col = divmod(int(diff.argmax()), diff.size(1))
    return dict(worst=f"{worst:.2g}", r=r, col=col)


def _name_table_mistake(table: Tensor, max_len: int, d_model: int) -> str | None:
    for name, _diag, candidate in _table_mistakes(max_len, d_model):
        if matches(table, candidate(), atol=_ATOL):
            return name
    return None


SINUSOID = Catalogue("sinusoidal_positional_encoding", "03", [
    Entry("pe is a Parameter", None, Output(lambda got: isinstance(got, nn.Parameter), "result"),
          "sinusoidal_positional_encoding({case}) returns an nn.Parameter: the table is fixed, never trained, so "
          "return a plain tensor; PositionalEncoding then stores it as a buffer (a Parameter registered there would "
          "still track gradients)."),
    Entry("not floating point", "the table is not a floating-point tensor",
          Output(lambda got: isinstance(got, Tensor) and not got.is_floating_point() and dict(dtype=got.dtype),
                 "result"),
          "the table ({case}) has dtype {dtype}; it should be floating point (build it with float positions, e.g. "
          "torch.arange(max_len, dtype=torch.float32))."),
    # the table is the paper's with these mistakes (layout, exponent, first position: single ones first)
    *_table_entries(),
    # a slip in the frequencies (stage "table" too; the case holds the student's table)
    Entry("positive exponent",
          "angles pos * 10000^(2i/d_model): the frequency multiplies the position instead of dividing it",
          Reference(lambda c: _conditioned(c, lambda pos, two_i: pos * 10000.0 ** (two_i / c.D)), "table"),
          "the angles are pos * 10000^(2i/d_model): the frequency multiplies the position instead of dividing it, so "
          "the pairs turn faster and faster instead of slower. The angle is pos / 10000^(2i/d_model), i.e. pos * "
          "10000^(-2i/d_model) (mind the minus sign in the exp(-2i ln(10000) / d_model) form)."),
    Entry("integer division", None,
          Reference(lambda c: _conditioned(c, lambda pos, two_i: pos.expand(c.M, c.D // 2)), "table"),
          _INTEGER.format(how="the exponent 2i // d_model is 0 for every pair, so every pair turns at frequency 1 like "
                              "pair 0")),
    Entry("integer division", None,
          Reference(lambda c: _conditioned(c, lambda pos, two_i: torch.floor(_right_angle(pos, two_i, c.D))), "table"),
          _INTEGER.format(how="pos // 10000^(2i/d_model) rounds each angle down to a whole number")),
    Entry("angles rounded", "the angles pos / 10000^(2i/d_model) rounded to whole numbers (.round())",
          Reference(lambda c: _conditioned(c, lambda pos, two_i: _right_angle(pos, two_i, c.D), rounded=True), "table"),
          "the angles are rounded to whole numbers (.round()), so the slow pairs stand still and then jump by a whole "
          "radian. Take sin and cos of the exact angle pos / 10000^(2i/d_model): leave the rounding out."),
    Entry("ln 10000 forgotten", "exp(-2i/d_model) frequencies: the natural log of 10000 left out of the exp form",
          Reference(lambda c: _conditioned(c, lambda pos, two_i: pos * torch.exp(-two_i / c.D)), "table"),
          _EXP_FORM.format(times="", tail=", so without the factor ln(10000) = 9.21 the pairs turn almost as fast as "
                           "pair 0 (the base becomes e = 2.718 instead of 10000).")),
    Entry("log10 instead of ln", "exp(-2i log10(10000) / d_model): the base-10 log where the exp form needs ln",
          Reference(lambda c: _conditioned(c, lambda pos, two_i: pos * torch.exp(-two_i * 4.0 / c.D)), "table"),
          _EXP_FORM.format(times=" * log10(10000)", tail=f": math.log10(10000) = 4 is not ln(10000) = "
                           f"{math.log(10000.0):.2f} (the base becomes e^4 = 54.6 instead of 10000). Use math.log, the "
                           "natural log.")),
    *[Entry("wrong base", "the frequencies use another base than 10000 (e.g. 1000)" if base == 1000 else None,
            Reference(lambda c, base=base: _conditioned(c, lambda pos, two_i: pos / float(base) ** (two_i / c.D)),
                      "table"),
            f"the frequencies use the base {base:,} instead of 10000: the angle is pos / 10000^(2i/d_model) (the "
            "paper's base; a different one changes every pair but the first).")
      for base in (1000, 100000)],  # base 100 is the exponent i/d_model, named above
    Entry("frequencies reversed", "the sinusoid's pairs turn slowest first (the frequency order flipped)",
          Reference(lambda c: _conditioned(c, lambda pos, two_i: _right_angle(pos, two_i, c.D).flip(1)), "table"),
          "the pairs' frequencies run the wrong way: pair 0 turns slowest and the last pair fastest. Pair i (columns "
          "2i and 2i+1) turns at 1 / 10000^(2i/d_model): pair 0 fastest (angle = pos), each next pair slower."),
    Entry("d_model hard-coded", "the sinusoid's exponent divides by 512 (the paper's d_model) instead of the d_model "
          "argument", Reference(lambda c: _conditioned(c, lambda pos, two_i: _right_angle(pos, two_i, 512)), "table"),
          "the exponent divides by 512, the paper's d_model, not by this table's d_model = {D}: the angle is pos / "
          "10000^(2i/d_model) with the d_model argument."),
    Entry("linear frequencies", "the sinusoid's frequencies fall linearly (1 - 2i/d_model) instead of geometrically",
          Reference(lambda c: _conditioned(c, lambda pos, two_i: pos * (1 - two_i / c.D)), "table"),
          "the frequencies fall in equal steps (1 - 2i/d_model, a straight line) instead of by the same factor from "
          "pair to pair: the angle is pos / 10000^(2i/d_model), frequencies from 1 down to about 1/10000 on a "
          "geometric scale."),
    Entry("exponent reaches 1", "the sinusoid's exponents from linspace(0, 1) instead of 2i/d_model (which stops short "
          "of 1)", Reference(lambda c: _conditioned(c, lambda pos, two_i: pos / 10000.0 ** torch.linspace(
              0, 1, c.D // 2, dtype=torch.float64)), "table"),
          "the exponents run from 0 to exactly 1 (torch.linspace(0, 1, d_model // 2)), so the last pair turns at "
          "1/10000; they are 2i/d_model = 0, 2/{D}, ..., {D_2}/{D}, which stop one step short of 1: torch.arange(0, "
          "d_model, 2) / d_model."),
    Entry("positions divided by max_len", "the sinusoid's positions normalised by the table length",
          Reference(lambda c: _conditioned(c, lambda pos, two_i: _right_angle(pos, two_i, c.D) / c.M), "table"),
          "the positions are divided by max_len (pos / max_len, from 0 to almost 1): the angle uses the position "
          "itself, pos / 10000^(2i/d_model), so that a token's encoding does not depend on how long the table is."),
    Entry("angles in degrees", "the sinusoid's angles converted from degrees to radians (times pi/180)",
          Reference(lambda c: _conditioned(c, lambda pos, two_i: _right_angle(pos, two_i, c.D) * math.pi / 180),
                    "table"),
          "the angles are converted from degrees to radians (times pi/180, torch.deg2rad or math.radians): pos / "
          "10000^(2i/d_model) is already in radians, the unit torch.sin and torch.cos take."),
    Entry("sin in every column", "the sinusoid's odd columns hold sin instead of cos",
          Reference(_sin_everywhere, "table"),
          "the odd columns hold sin too: column 2i+1 is the cos of the same angle as column 2i, pe[:, 1::2] = "
          "torch.cos(angle)."),
    Entry("table transposed", "the table is (d_model, max_len)",
          Reference(lambda c: [({}, sinusoidal_positional_encoding(c.M, c.D).T)], "table"),
          "your table has shape (d_model, max_len) = ({D}, {M}), the transpose of (max_len, d_model): rows are "
          "positions, columns are features."),
    # no candidate matches (stage "values": got, expected, atol)
    Entry("low precision", "values off by float16/bfloat16 rounding: part of the computation ran in low precision",
          Output(lambda v: _half_computed(v.got, v.expected), "values"),
          "the table ({case}) is close to the right one but off by up to {worst} (row {r}, column {col}), far less "
          "than a wrong formula would give and far more than float32's rounding (about 1e-6): part of the computation "
          "ran in low precision (float16 or bfloat16: a .half(), dtype=torch.float16 in an arange, or autocast), and "
          "the angles, up to max_len radians, lost digits before sin and cos. Compute positions, frequencies and "
          "angles in float32: torch.arange(max_len, dtype=torch.float32)."),
    Entry("values differ", None, Output(lambda v: dict(report=_columns_report(v.got, v.expected, v.atol)), "values"),
          "the table ({case}) has the right shape, but {report}."),
    # right values (stage "dtype": the table)
    Entry("wrong dtype", None, Output(lambda v: v.got.dtype in (torch.float16, torch.bfloat16) and dict(
              dtype=v.got.dtype, off=f"{float((v.got.double() - v.expected.double()).abs().max()):.1g}"), "dtype"),
          "the table ({case}) has the right values, rounded to {dtype}: its dtype is {dtype}, off from the float32 "
          "table by up to {off}. The exercise's table is float32 (torch's default dtype): leave out the .half() (or "
          ".to(...)); a model run in half precision converts the buffer itself with model.half()."),
    Entry("wrong dtype", None, Output(lambda v: v.got.dtype != torch.float32 and dict(dtype=v.got.dtype), "dtype"),
          "the table ({case}) has the right values but dtype {dtype}; the exercise's table is float32 (torch's default "
          "dtype). A float64 table stored as `pe` makes PositionalEncoding return float64, and the next nn.Linear then "
          "fails with 'mat1 and mat2 must have the same dtype'. Build it with torch.arange(max_len, "
          "dtype=torch.float32) (or .float() at the end)."),
])


@checker("sinusoidal_positional_encoding")
def check_sinusoidal_positional_encoding(fn: Callable[..., Any]) -> str:
    for _ in range(3):
        while True:
            max_len, d_model = randint(7, 40), 2 * randint(3, 12)
            # max_len = d_model or d_model // 2 would let a wrongly shaped column fill broadcast; at d_model = 10
            # exponents from linspace(0, 1) give exactly the base 100,000's table (4/(d - 2) = 5/d)
            if max_len not in (d_model, d_model // 2) and d_model != 10:
                break
        case = f"max_len={max_len}, d_model={d_model}"
        got = call_student(fn, max_len, d_model, context=f"calling sinusoidal_positional_encoding({case})")
        SINUSOID.detect("result", got, case=case)
        expected = sinusoidal_positional_encoding(max_len, d_model)  # (max_len, d_model) float32
        c = SimpleNamespace(M=max_len, D=d_model, got=got)
        mistakes = SINUSOID.candidates(c, "table", M=max_len, D=d_model, D_2=d_model - 2)
        # values first (a wrong table is named even in float64 or float16), then the dtype: float32
        low = isinstance(got, Tensor) and got.dtype in (torch.float16, torch.bfloat16)
        atol = 1e-2 if low else _ATOL  # float16 keeps ~3 significant digits, bfloat16 ~2
        values = SimpleNamespace(got=got, expected=expected, atol=atol)
        try:
            expect_close("the table", got, expected, mistakes, case=case, atol=atol)
        except Failure as f:
            if f.mistake != "values differ":
                raise
            SINUSOID.detect("values", values, case=case)
        SINUSOID.detect("dtype", values, case=case)
    return "3 random (max_len, d_model) tables"


# ---------------------------------------------------------------- PositionalEncoding
_SIZES = re.compile(r"tensor a \((\d+)\) must match the size of tensor b \((\d+)\)")


def _sizes(e: Any) -> tuple[int, ...] | None:
    """The two sizes of torch's broadcasting error, if that is what ``e.exc`` is."""
    found = _SIZES.search(str(e.exc))
    return tuple(map(int, found.groups())) if found else None


def _broadcast_error(e: Any) -> bool:
    return isinstance(e.exc, RuntimeError) and "must match the size" in str(e.exc)


def _swapped_table(b: Any) -> bool:
    """``pe`` is sinusoidal_positional_encoding(d_model, max_len): the two arguments swapped."""
    return tuple(b.pe.shape) == (b.D, b.M) and matches(
        b.pe.detach().double(), sinusoidal_positional_encoding(b.D, b.M).double(), atol=_ATOL)


def _dropped_share(d: Any) -> dict[str, str] | None:
    """The share of entries dropped, when it is far from p: on (8, max_len, d_model) entries a correct
    dropout's share is within 0.2 of p by more than 10 standard deviations, while a keep mask drawn
    as rand < p drops 1 - p (0.7 at p = 0.3)."""
    if not isinstance(d.got, Tensor) or d.got.shape != d.x.shape:
        return None
    zeroed = float((d.got == 0).double().mean())
    return dict(zeroed=f"{zeroed:.0%}", share=f"{d.p:.0%}") if abs(zeroed - d.p) > 0.2 else None


def _shifted(x0: Tensor, rows: Callable[[], Tensor | None]) -> Callable[[], Tensor | None]:
    def make() -> Tensor | None:
        added = rows()
        return None if added is None else x0 + added
    return make


_SCALED = ("{what} multiplied by sqrt(d_model) inside PositionalEncoding. That scaling belongs to TokenEmbedding, "
           "which already returns embeddings times sqrt(d_model); PositionalEncoding only adds the table: "
           "dropout(x + pe[:L]).")
_TO_SUM = "The paper applies it to the sum"

POSENC = Catalogue("PositionalEncoding", "03", [
    Entry("not a class", None, Probe("require_module_class")),
    # the buffer (stage "buffer": the module; "buffer shape": its pe)
    Entry("pe is a Parameter", "the positional table is a learned nn.Parameter instead of a buffer",
          Output(lambda m: "pe" in dict(m.named_parameters()), "buffer"),
          "`pe` is an nn.Parameter, so it is listed in parameters() and an optimizer would train it. The encoding is "
          "fixed: store it with self.register_buffer('pe', table)."),
    Entry("register_buffer result assigned", "self.pe = self.register_buffer(...): register_buffer returns None",
          Output(lambda m: "pe" in m._buffers and m._buffers["pe"] is None, "buffer"),
          "`pe` is registered as a buffer but holds None: register_buffer returns None, so self.pe = "
          "self.register_buffer('pe', table) first stores the table and then overwrites it with None. Call it without "
          "assigning: self.register_buffer('pe', table) alone creates self.pe."),
    Entry("pe not a buffer", "the positional table is a plain attribute, not a registered buffer",
          Output(lambda m: "pe" not in dict(m.named_buffers()) and isinstance(getattr(m, "pe", None), Tensor),
                 "buffer"),
          "`self.pe` is a plain tensor attribute: it is missing from state_dict (not saved with the model) and "
          ".to(device) does not move it. Register it with self.register_buffer('pe', table)."),
    Entry("missing pe", "PositionalEncoding has no pe table",
          Output(lambda m: "pe" not in dict(m.named_buffers()), "buffer"),
          "PositionalEncoding needs a buffer named `pe` holding the table: self.register_buffer('pe', table) in "
          "__init__."),
    Entry("pe not persistent", "the positional buffer is not saved in the state_dict",
          Output(lambda m: "pe" not in m.state_dict(), "buffer"),
          "`pe` was registered with persistent=False, so it is missing from state_dict; use "
          "self.register_buffer('pe', table) (persistent is the default)."),
    Entry("pe is a Parameter", None, Output(lambda m: isinstance(m.pe, nn.Parameter), "buffer"),
          "`pe` is registered as a buffer but holds an nn.Parameter (did sinusoidal_positional_encoding return one?): "
          "it still tracks gradients. Register the plain table: self.register_buffer('pe', table)."),
    Entry("table arguments swapped",
          "sinusoidal_positional_encoding(d_model, max_len): the table's two arguments swapped",
          Output(_swapped_table, "buffer shape"),
          "`pe` has shape {shape}; for max_len={M}, d_model={D} it should be (max_len, d_model) = ({M}, {D}). It is "
          "the table sinusoidal_positional_encoding({D}, {M}): the two arguments are swapped (a table of {D} "
          "positions, {M} features wide, not its transpose). The function takes (max_len, d_model): "
          "sinusoidal_positional_encoding(max_len, d_model)."),
    Entry("wrong pe shape", "the pe table has the wrong shape", Output(lambda b: True, "buffer shape"),
          "`pe` has shape {shape}; for max_len={M}, d_model={D} it should be (max_len, d_model) = ({M}, {D})."),
    # forward raised (stage "forward raised": the exception and the case)
    Entry("length check off by one", "L == max_len is refused although the table has max_len rows",
          Output(lambda e: isinstance(e.exc, ValueError) and e.L == e.M, "forward raised"),
          "your forward raised ValueError for L = max_len = {M} ({case}): {said}. A sequence as long as the table fits "
          "(it uses every row): raise only when L > max_len (check `L > self.max_len`, not `>=`)."),
    Entry("length from the wrong axis", "L read as x.size(-1) (d_model) instead of x.size(1)",
          Output(lambda e: isinstance(e.exc, ValueError) and e.L < e.M < e.D, "forward raised"),
          "your forward raised ValueError for L = {L} < max_len = {M}: {wrong_axis}"),
    Entry("length from the wrong axis", None,
          Output(lambda e: _broadcast_error(e) and _sizes(e) == (e.L, e.D), "forward raised"),
          "adding the encoding to x failed: {wrong_axis}"),
    Entry("sequence-first slice", "pe[:x.size(0)] on batch-first input",
          Output(lambda e: _broadcast_error(e) and e.B in (_sizes(e) or ()), "forward raised"),
          "{failed}The table was sliced with the batch size B = {B}: pe[:x.size(0)] is the sequence-first convention "
          "(x of shape (L, B, D), as in PyTorch's tutorial). This course is batch first, x is (B, L, D): slice with "
          "the length, pe[:x.size(1)]."),
    Entry("pe not sliced", "the whole table is added instead of its first L rows",
          Output(_broadcast_error, "forward raised"),
          "{failed}x has L = {L} positions, the table max_len = {M} rows: add only the first L rows, pe[:L]."),
    Entry("input modified in place", None, Probe("check_unchanged")),
    Entry("parameters modified in place", None, Probe("check_state_unchanged")),
    # the output is x + pe[:L] with one of these mistakes (in this order; the case: x0, the table, L, M)
    Entry("multiplied instead of added", "the table multiplies x instead of being added",
          Reference(lambda c: [({}, c.x0 * c.table[:c.L])]),
          "x was multiplied by the encoding; the encoding is added: x + pe[:L]."),
    Entry("scaled by sqrt(d_model)", None, Reference(lambda c: [
        (dict(what="x is"), c.x0 * math.sqrt(c.D) + c.table[:c.L]),
        (dict(what="the sum x + pe[:L] is"), (c.x0 + c.table[:c.L]) * math.sqrt(c.D)),
        (dict(what="the table is"), c.x0 + c.table[:c.L] * math.sqrt(c.D))]), _SCALED),
    Entry("sequence-first slice", None, Reference(lambda c: [({}, _shifted(c.x0, lambda: c.table[:c.B].unsqueeze(1)))]),
          "row b of the table was added to every position of batch item b: pe[:x.size(0)] slices with the batch size "
          "(B = {B}), the sequence-first convention of PyTorch's tutorial (x of shape (L, B, D), pe of shape (max_len, "
          "1, D)). This course is batch first, x is (B, L, D): add pe[:x.size(1)], the first L rows, to every batch "
          "item."),
    Entry("one row of pe added", "pe[L] or pe[L - 1] (one row) added to every position instead of the rows pe[:L]",
          Reference(lambda c: [({}, _shifted(c.x0, lambda: c.table[c.L] if c.L < c.M else None))]),
          "row L = {L} of the table was added to every position: pe[L] (or pe[x.size(1)]) indexes the single row L. "
          "Slice the first L rows, pe[:L] (with the colon), one row per position."),
    Entry("one row of pe added", None, Reference(lambda c: [({}, _shifted(c.x0, lambda: c.table[c.L - 1]))]),
          "row L - 1 = {L_1} of the table, the last position's, was added to every position: pe[L - 1] (or "
          "pe[:L][-1]) is one row. Slice the first L rows, pe[:L], one row per position."),
    Entry("encoding added to one batch item", "the positional encoding added to batch item 0 only",
          Reference(lambda c: [({}, lambda: torch.cat((c.x0[:1] + c.table[:c.L], c.x0[1:])))]),
          "only batch item 0 got the encoding; the other sequences came out unchanged (out[0] += pe[:L]). Every "
          "sequence needs it: x + pe[:L] broadcasts the (L, D) rows over the batch axis by itself."),
    Entry("batch mixed", "the output averages (or sums) over the batch: sequences are not independent",
          Reference(lambda c: [({}, lambda: (c.x0 + c.table[:c.L]).mean(0, keepdim=True).expand_as(c.x0))]),
          "every sequence's output is the mean over the batch (a .mean(0) or a sum over dim 0): the sequences are "
          "independent, each one gets its own x + pe[:L]; nothing mixes batch items."),
    Entry("positions start at 1", None,
          Reference(lambda c: [({}, _shifted(c.x0, lambda: c.table[1:c.L + 1] if c.L < c.M else None))]),
          "rows 1 to L of the table were added, pe[1:L+1]: positions count from 0, so the first token gets row 0 (sin "
          "0 = 0, cos 0 = 1). Add the first L rows: pe[:L]."),
    Entry("wrong table", "a table of the right shape with other values",
          Reference(lambda c: [] if matches(c.student_table, c.table, atol=_ATOL)
                    else [({}, c.x0 + c.student_table[:c.L])]),
          "your forward adds `pe` correctly, but the table stored in `pe` is not the sinusoidal encoding{which} Fix "
          "sinusoidal_positional_encoding first (or build pe with the reference `from course_utils import "
          "sinusoidal_positional_encoding`)."),
    *GRADIENT_PROBE,
    Entry("wrong pe shape", None, Output(lambda b: tuple(b.pe.shape) != (b.M, b.D), "pe shape"),
          "`pe` has shape {shape}; for max_len={M}, d_model={D} it should be (max_len, d_model) = ({M}, {D}), the "
          "exercise's shape (its state_dict is loaded into other models). An extra axis is not needed: pe[:L] "
          "broadcasts over the batch by itself."),
    Entry("table rebuilt in forward", "forward computes the positional table again instead of adding the `pe` buffer",
          Reference(lambda c: [({}, c.x + c.table[:c.L])], "loaded table"),
          "forward ignores the buffer `pe` and computes the table again at every call (sinusoidal_positional_encoding"
          "(...) inside forward). The table is computed once, in __init__, and stored with register_buffer('pe', "
          "table); forward only adds its first L rows: return self.dropout(x + self.pe[:L]). A model that loads a "
          "state_dict (notebooks 06 and 07) then uses the loaded `pe`."),
    DTYPE_PROBE,
    DEVICE_PROBE,
    # dropout, in training mode with p = 0.3, then 0.6 (stage "dropout": the output, the sum x + pe, p)
    Entry("dropout missing", None, Output(lambda d: matches(d.got, d.y, atol=_ATOL), "no dropout"),
          "no dropout was applied ({case}): construct nn.Dropout(dropout) in __init__ and apply it to x + pe[:L] in "
          "forward."),
    Entry("hard-coded dropout p", None, Probe("fail_fixed_p")),
    Entry("dropout before adding", "positional dropout applied to x before adding the table",
          Output(lambda d: dropout_scale(d.got - d.pe, d.x, atol=_ATOL) is not None, "dropout"),
          "dropout was applied to x before adding the encoding ({case}); the paper applies it to the sum: "
          "dropout(x + pe[:L])."),
    Entry("dropout on the table only", "positional dropout applied to pe[:L] alone, x + dropout(pe[:L])",
          Output(lambda d: dropout_scale(d.got - d.x, d.pe.expand_as(d.x), atol=_ATOL) is not None, "dropout"),
          "dropout was applied to the table only, x + dropout(pe[:L]) ({case}): the word vectors x are never dropped. "
          "The paper applies it to the sum of both: dropout(x + pe[:L])."),
    Entry("values differ", None, Output(lambda d: True, "dropout"),
          "in {case}, every entry should be either 0 (dropped) or (x + pe)/(1 - p) (kept); yours are not. Return "
          "dropout(x + pe[:L])."),
    Entry("wrong dropout rate", None, Output(_dropped_share, "dropout rate"),
          "in {case}: your dropout zeroes {zeroed} of the entries, where dropout={p} zeroes about {share}; the kept "
          "ones are scaled by 1 / (1 - p) as they should be. A hand-written mask keeps each entry with probability 1 - "
          "p, torch.rand_like(x) >= p (rand_like(x) < p keeps a share p: at p = 0.5 the two look the same). "
          "nn.Dropout(dropout) does this for you."),
    Entry("dropout ignores eval mode", None, Probe("fail_eval_dropout")),
    # longer than the table (stage "too long": the exception raised, None if none)
    Entry("error message without values", None,
          Output(lambda t: isinstance(t.exc, ValueError)
                 and not all(re.search(rf"(?<!\d){n}(?!\d)", str(t.exc)) for n in (t.L, t.M)), "too long"),
          "{longer} ValueError says {said}: the exercise asks for a message that names both numbers, e.g. "
          "f\"sequence length L = {{L}} is longer than max_len = {{self.max_len}}\", so the caller sees what to "
          "change."),
    Entry("no length check", "no error when L exceeds max_len",
          Output(lambda t: t.exc is not None and not isinstance(t.exc, ValueError), "too long"),
          "{longer} forward raised {raised}\n    Check the length first and raise a ValueError that names L and "
          "max_len."),
    Entry("no length check", None, Output(lambda t: t.exc is None, "too long"),
          "{longer} forward returned a result instead of raising: check the length and raise a ValueError that names "
          "L and max_len."),
])


def _check_pe_buffer(module: nn.Module, max_len: int, d_model: int) -> Tensor:
    """``pe`` must be a persistent buffer (saved, moved by ``.to``, never trained)."""
    POSENC.detect("buffer", module)
    pe = module.state_dict()["pe"]
    if pe.numel() != max_len * d_model or pe.size(-1) != d_model:
        POSENC.detect("buffer shape", SimpleNamespace(pe=pe, M=max_len, D=d_model), shape=describe_shape(pe),
                      M=max_len, D=d_model)
    return pe.detach().reshape(max_len, d_model)


def _forward(module: nn.Module, x: Tensor, case: str, max_len: int) -> Any:
    """``module(x)``, with the usual length and slicing errors named."""
    try:
        return call_student(module, x, context=f"running forward ({case})")
    except StudentError as err:
        exc, (B, L) = err.exc, x.shape[:2]
        D = x.size(-1)
        wrong_axis = (f"the length was read from the last axis, x.size(-1) = d_model = {D}, not from the sequence "
                      f"axis: x is (B, L, D), so L = x.size(1) = {L} ({case}). Your code raised {raised(exc)}\n    "
                      "Slice the table with L = x.size(1): pe[:L].")
        POSENC.detect("forward raised", SimpleNamespace(exc=exc, B=B, L=L, D=D, M=max_len), case=case, M=max_len, L=L,
                      B=B, said=str(exc).strip()[:120], wrong_axis=wrong_axis,
                      failed=f"adding the encoding to x failed ({case}): your code raised {raised(exc)}\n    ")
        raise


def _check_dropout(cls: Any, D: int, M: int, p: float, table: Tensor) -> None:
    """Dropout acts on x + pe[:L], with the given p, and only in training mode."""
    B, L = randint(2, 4), randint(8, M)
    x = torch.randn(B, L, D)
    y = x + table[:L]  # (B, L, D)
    dropped = call_student(cls, D, M, p, context=f"constructing PositionalEncoding({D}, {M}, dropout={p})")
    dropped.train()
    case = f"training mode, dropout={p}, x of shape ({B}, {L}, {D})"
    with torch.no_grad():
        got = _forward(dropped, x.clone(), case, M)
    if not isinstance(got, Tensor) or got.shape != y.shape:
        fail(f"output ({case}) should be a tensor of shape {describe_shape(y)}, got {describe_shape(got)}.")
    scale = dropout_scale(got, y, atol=_ATOL)
    if scale is None or abs(scale * (1 - p) - 1) > 1e-3:
        dropped = SimpleNamespace(got=got, y=y, x=x, pe=table[:L], p=p)
        POSENC.detect("no dropout", dropped, case=case)
        if scale is not None:
            fail_fixed_p(scale, p, "x + pe[:L]", case)
        POSENC.detect("dropout", dropped, case=case)
    many = torch.randn(8, M, D)  # enough entries to count the share dropped
    case_many = f"training mode, dropout={p}, x of shape (8, {M}, {D})"
    with torch.no_grad():
        got_many = _forward(dropped, many.clone(), case_many, M)
    POSENC.detect("dropout rate", SimpleNamespace(got=got_many, x=many, p=p), case=case_many, p=p)
    dropped.eval()
    case = f"eval mode, dropout={p}, x of shape ({B}, {L}, {D})"
    with torch.no_grad():
        got = _forward(dropped, x.clone(), case, M)
    if not matches(got, y, atol=_ATOL) and dropout_scale(got, y, atol=_ATOL) is not None:
        fail_eval_dropout("the output", case)
    expect_close("output", got, y, case=case, atol=_ATOL)


def _check_pe_used(module: nn.Module, table: Tensor, D: int, M: int) -> None:
    """forward adds the buffer built once in __init__: another table loaded into `pe` (as
    load_state_dict does) must change the output; a table rebuilt in every call would not."""
    probe = copy.deepcopy(module)
    with torch.no_grad():
        probe.pe.add_(torch.randn(M, D).to(probe.pe.dtype))  # (M, D)
    L = randint(2, M)
    x = torch.randn(2, L, D)
    case = f"x of shape (2, {L}, {D}), max_len={M}, another table loaded into `pe`"
    with torch.no_grad():
        got = _forward(probe, x.clone(), case, M)
    rebuilt = POSENC.candidates(SimpleNamespace(x=x, table=table, L=L), "loaded table")
    expect_close("output", got, x + probe.pe[:L].to(x.dtype), rebuilt, case=case, atol=_ATOL)


@checker("PositionalEncoding")
def check_positional_encoding(cls: Any) -> str:
    require_module_class(cls, "PositionalEncoding")
    while True:  # B, each L and D all different
        D, M = 2 * randint(3, 12), 2 * randint(8, 20)  # M even too: a table built (d_model, max_len) still builds
        lengths = [randint(2, M // 2), randint(M // 2 + 1, M - 1), M]
        if D not in lengths:
            break
    module = build_student(cls, "PositionalEncoding", (D, M), {}, f"d_model={D}, max_len={M}")  # eval mode
    student_table = _check_pe_buffer(module, M, D)  # (M, D)
    table = sinusoidal_positional_encoding(M, D)  # (M, D)
    state = module_state(module)

    for L in lengths:
        B = next(b for b in iter(lambda: randint(2, 5), None) if b not in (L, D))
        x = torch.randn(B, L, D)
        x0 = x.clone()
        case = f"x of shape ({B}, {L}, {D}), max_len={M}"
        with torch.no_grad():
            got = _forward(module, x, case, M)
        check_unchanged(["x"], [x], [x0], case)
        check_state_unchanged(module, state, case, "Add the table without changing it: return self.dropout(x + "
                              "self.pe[:L]).")
        expected = x0 + table[:L]  # (B, L, D)

        name = _name_table_mistake(student_table, M, D)
        which = f" ({name})." if name else f": {_columns_report(student_table, table)}."
        c = SimpleNamespace(x0=x0, table=table, student_table=student_table, B=B, L=L, M=M, D=D)
        mistakes = POSENC.candidates(c, B=B, L=L, L_1=L - 1, which=which)
        expect_close("output", got, expected, mistakes, case=case, atol=_ATOL)
    gradient_probe(module, lambda x: x + table[: x.size(1)], dict(x=x0), what="PositionalEncoding", case=case)
    pe = module.state_dict()["pe"]  # the right numbers, checked last: the buffer's own shape
    POSENC.detect("pe shape", SimpleNamespace(pe=pe, M=M, D=D), shape=describe_shape(pe), M=M, D=D)
    _check_pe_used(module, table, D, M)

    # the dtype rule: float32 in, float32 out (a float64 `pe` is fine when forward converts it to
    # x's dtype); float16 in with a .half() module, float16 out (no .float() on the table)
    x = torch.randn(2, lengths[0], D)
    check_dtype_follows(lambda: call_student(cls, D, M, context="constructing PositionalEncoding"),
                        lambda m, dt: _forward(m, x.to(dt), f"x in {dt}", M), "PositionalEncoding",
                        f"x of shape (2, {lengths[0]}, {D}), max_len={M}")
    check_module_device(module, (x,), "your PositionalEncoding", f"x of shape (2, {lengths[0]}, {D}), max_len={M}",
                        "slice the buffer, which .to(device) moves with the module: x + self.pe[:L]")

    for p in (0.3, 0.6):  # two values: a hard-coded p differs from one (the kept scale 1 / (1 - p) tells)
        _check_dropout(cls, D, M, p, table)

    # longer than the table: a clear ValueError
    L = M + randint(1, 5)
    longer = f"for a sequence longer than the table (L = {L} > max_len = {M}) your"
    exc: BaseException | None = None
    try:
        with torch.no_grad():
            module(torch.randn(2, L, D))
    except Exception as err:  # noqa: BLE001 - the student's exception, reported as a diagnosis
        exc = err
    POSENC.detect("too long", SimpleNamespace(exc=exc, L=L, M=M), longer=longer, said=repr(str(exc)),
                  raised=raised(exc) if exc is not None else "")
    return "pe is a buffer; L < max_len and L = max_len; dropout in train and eval mode; L > max_len raises"




# ---------------------------------------------------------------- TokenEmbedding
_PLAIN = "The exercise asks for a plain nn.Embedding(vocab_size, d_model), with no other argument."


def _scaled_lookup(factor: Callable[[Any], float]) -> Reference:
    return Reference(lambda c: [({}, c.lookup * factor(c))])


def _constant_scale(c: Any) -> list:
    """The looked-up vectors times one number other than sqrt(d_model) (a hard-coded 8, ...):
    the factor found, named against sqrt(d_model)."""
    got, lookup = c.got, c.lookup
    if not (isinstance(got, Tensor) and got.shape == lookup.shape and got.is_floating_point()):
        return []
    factor = float((got.detach().double() * lookup.double()).sum() / lookup.double().pow(2).sum())
    return [(dict(factor=f"{factor or 0:.4g}", root4=f"{math.sqrt(c.D):.4g}"), lookup * factor)]


TOKEN = Catalogue("TokenEmbedding", "03", [
    Entry("not a class", None, Probe("require_module_class")),
    # the submodule (stage "embedding": getattr(module, "embedding") and the sizes)
    Entry("missing embedding", "TokenEmbedding has no embedding submodule",
          Output(lambda m: not isinstance(m.e, nn.Embedding)
                 and dict(yours=f"; yours is {type(m.e).__name__}." if m.e is not None else "."), "embedding"),
          "TokenEmbedding needs a submodule `embedding` that is nn.Embedding(vocab_size, d_model){yours}"),
    Entry("wrong embedding size", "the embedding table has the wrong size",
          Output(lambda m: (m.e.num_embeddings, m.e.embedding_dim) != (m.V, m.D)
                 and dict(n=m.e.num_embeddings, d=m.e.embedding_dim), "embedding"),
          "`embedding` should be nn.Embedding(vocab_size, d_model) = nn.Embedding({V}, {D}), got nn.Embedding({n}, "
          "{d})."),
    Entry("sparse embedding", "nn.Embedding(..., sparse=True): Adam refuses its sparse gradients",
          Output(lambda m: m.e.sparse, "embedding"),
          "`embedding` is built with sparse=True: its gradient is then a sparse tensor, which torch.optim.Adam (the "
          "optimiser of notebooks 06 and 07) refuses. Use the default dense nn.Embedding(vocab_size, d_model)."),
    Entry("padding_idx set", "nn.Embedding(..., padding_idx=...): that row starts at zero and never trains",
          Output(lambda m: m.e.padding_idx is not None and dict(idx=m.e.padding_idx), "embedding"),
          "`embedding` is built with padding_idx={idx}: row {idx} then starts at zero and never trains (it gets no "
          "gradient), whatever that token is. " + _PLAIN + " Padding is handled by the attention masks (notebook 04), "
          "not by the embedding."),
    Entry("max_norm set", "nn.Embedding(..., max_norm=...): lookups renormalise the weight in place",
          Output(lambda m: m.e.max_norm is not None and dict(norm=f"{m.e.max_norm:g}"), "embedding"),
          "`embedding` is built with max_norm={norm}: every lookup then rescales the looked-up rows of the weight in "
          "place to norm at most {norm}, so the weights change at each forward call and the vectors' sizes are capped "
          "(the paper caps nothing). " + _PLAIN),
    Entry("input modified in place", None, Probe("check_unchanged")),
    Entry("parameters modified in place", None, Probe("check_state_unchanged")),
    # the output is the looked-up vectors scaled by another number than sqrt(d_model) (in this order)
    Entry("embeddings not scaled", "token embeddings not multiplied by sqrt(d_model)", _scaled_lookup(lambda c: 1),
          "the embeddings are not scaled: multiply them by sqrt(d_model) in forward (weights scaled once in __init__ "
          "do not count: the check, like training, sets the weights itself)."),
    Entry("scaled by d_model", "embeddings scaled by d_model instead of sqrt(d_model)", _scaled_lookup(lambda c: c.D),
          "the embeddings are multiplied by d_model; multiply by its square root, sqrt(d_model)."),
    Entry("divided by sqrt(d_model)", "embeddings divided by sqrt(d_model) instead of multiplied",
          _scaled_lookup(lambda c: 1 / math.sqrt(c.D)),
          "the embeddings are divided by sqrt(d_model); multiply by it instead."),
    Entry("integer square root", "embeddings scaled by int(math.sqrt(d_model)) instead of sqrt(d_model)",
          _scaled_lookup(lambda c: math.isqrt(c.D)),
          "the embeddings are multiplied by int(math.sqrt(d_model)) = {isqrt} instead of sqrt({D}) = {root}: int() "
          "(or math.isqrt) cuts off the fraction. Multiply by math.sqrt(self.d_model) itself."),
    Entry("scaled by sqrt(vocab_size)", "embeddings scaled by sqrt(vocab_size) instead of sqrt(d_model)",
          _scaled_lookup(lambda c: math.sqrt(c.V)),
          "the embeddings are multiplied by sqrt(vocab_size) = sqrt({V}) instead of sqrt(d_model) = sqrt({D}): the "
          "scale is the square root of the vectors' width, d_model."),
    Entry("scaled by sqrt(L)", "embeddings scaled by the square root of the sequence length instead of sqrt(d_model)",
          _scaled_lookup(lambda c: math.sqrt(c.L)),
          "the embeddings are multiplied by sqrt(L) = sqrt({L}), the square root of the sequence length "
          "(tokens.size(1) or tokens.size(-1)), instead of sqrt(d_model) = sqrt({D}): the scale is the square root of "
          "the vectors' width, self.d_model, the same for every sequence."),
    Entry("wrong scale factor", "embeddings scaled by a constant other than sqrt(d_model) (a hard-coded number)",
          Reference(_constant_scale),
          "every embedding is multiplied by the same number, {factor}, instead of sqrt(d_model) = sqrt({D}) = {root4} "
          "(a hard-coded number fits only one d_model): multiply by math.sqrt(self.d_model), with the d_model the "
          "module was built with."),
    *GRADIENT_PROBE,
    DTYPE_PROBE,
    Entry("embeddings scaled twice", "sqrt(d_model) applied twice (on top of TokenEmbedding's own scaling, or to the "
          "weights in __init__ and to the output in forward)", Output(lambda f: 0.7 < f.ratio < 1.4, "fresh"),
          "forward is right, but __init__ also multiplies the embedding weights by sqrt(d_model): with d_model={D} a "
          "fresh TokenEmbedding's weights have std {std}, about sqrt({D}) = {root}, where nn.Embedding starts at 1, so "
          "a new model's embeddings come out d_model times larger instead of sqrt(d_model) (the check sets the weights "
          "itself, as loading a state_dict does, so only a fresh model shows it). Scale once: leave nn.Embedding's "
          "weights as they are and multiply in forward, self.embedding(tokens) * math.sqrt(self.d_model)."),
])


@checker("TokenEmbedding")
def check_token_embedding(cls: Any) -> str:
    require_module_class(cls, "TokenEmbedding")
    while True:
        V, D, B, L = randint(11, 40), randint(5, 24), randint(2, 4), randint(5, 10)
        # none a square: int(math.sqrt(D)) would equal sqrt(D), sqrt(V) or sqrt(L) equal D or int(sqrt(D));
        # D not 8: a hard-coded 8 (sqrt(64), d_k's habit) would then be "times d_model" (seed 1362871798)
        if len({V, D, B, L}) == 4 and all(math.isqrt(n) ** 2 != n for n in (V, D, L)) and D != 8:
            break
    module = build_student(cls, "TokenEmbedding", (V, D), {}, f"vocab_size={V}, d_model={D}")  # eval mode
    emb = getattr(module, "embedding", None)
    TOKEN.detect("embedding", SimpleNamespace(e=emb, V=V, D=D), V=V, D=D)
    ref = TokenEmbedding(V, D).eval()
    with torch.no_grad():
        emb.weight.copy_(torch.randn(V, D))  # random, not the default init
        ref.embedding.weight.copy_(emb.weight)
    weight, state = emb.weight.detach().clone(), module_state(module)  # weight: (V, D)
    for _ in range(2):
        tokens = torch.randint(0, V, (B, L))
        tokens[0, 0], tokens[-1, -1] = 0, V - 1  # both ends of the vocabulary
        tokens0 = tokens.clone()
        case = f"tokens of shape ({B}, {L}), vocab_size={V}, d_model={D}"
        with torch.no_grad():
            got = call_student(module, tokens, context=f"running forward ({case})")
            expected = ref(tokens0)  # (B, L, D)
        check_unchanged(["tokens"], [tokens], [tokens0], case)
        # before the values: weights scaled in place by sqrt(D) at each call look like "* D" at the second
        check_state_unchanged(module, state, case, "Leave the weights alone and scale the looked-up vectors: return "
                              "self.embedding(tokens) * math.sqrt(self.d_model).")
        lookup = weight[tokens0]  # (B, L, D)
        mistakes = TOKEN.candidates(SimpleNamespace(lookup=lookup, got=got, V=V, D=D, L=L), V=V, D=D, L=L,
                                    isqrt=math.isqrt(D), root=f"{math.sqrt(D):.4f}")
        expect_close("output", got, expected, mistakes, case=case)
    gradient_probe(module, ref, dict(tokens=tokens0), [("embedding.weight", emb.weight, ref.embedding.weight)],
                   what="TokenEmbedding", case=case)
    check_dtype_follows(lambda: call_student(cls, V, D, context="constructing TokenEmbedding"),
                        lambda m, dt: call_student(m, tokens0, context=f"running forward with a {dt} module"),
                        "TokenEmbedding", f"tokens of shape ({B}, {L})",
                        follow="the weight's dtype (.to(self.embedding.weight.dtype)), as the input is integer token ids")  # noqa: E501
    # as built (build_student randomises the weights): nn.Embedding starts at N(0, 1), weights already
    # times sqrt(D) show as a std near sqrt(D) >= 2.2
    fresh = call_student(cls, V, D, context=f"constructing TokenEmbedding({V}, {D})")
    init_std = float(fresh.embedding.weight.detach().double().std())
    TOKEN.detect("fresh", SimpleNamespace(ratio=init_std / math.sqrt(D)), D=D, std=f"{init_std:.2f}",
                 root=f"{math.sqrt(D):.2f}")
    return "random embedding weights, 2 batches of token ids"


CATALOGUES = (SINUSOID, POSENC, TOKEN)
MISTAKES: dict[str, list[str]] = {table.exercise: table.names() for table in CATALOGUES}  # generated


# ---------------------------------------------------------------- hints
register_hints(
    "sinusoidal_positional_encoding",
    [
        "Build a column of positions 0, 1, ..., max_len-1 with shape (max_len, 1), in float: "
        "torch.arange(max_len, dtype=torch.float32).unsqueeze(1); and a row of the even column indices "
        "2i = 0, 2, 4, ..., d_model-2: torch.arange(0, d_model, 2).",
        "The angle for position pos and pair i is pos / 10000^(2i/d_model); broadcasting the column "
        "against the row gives all angles at once, shape (max_len, d_model/2).",
        "Start from a zero table pe of shape (max_len, d_model) and fill it with slices: the even columns "
        "(pe[:, 0::2]) get the sin of the angles, the odd columns the cos of the same angles.",
    ],
)
register_hints(
    "PositionalEncoding",
    [
        "In __init__, compute the table once with sinusoidal_positional_encoding(max_len, d_model) "
        "and keep the dropout as nn.Dropout(dropout).",
        "The table is never trained but must be saved in state_dict and follow .to(device): store it "
        "with self.register_buffer('pe', table), not as nn.Parameter or a plain attribute. The call "
        "itself creates self.pe (it returns None: do not assign its result).",
        "In forward, x is (B, L, D), so L = x.size(1) (not x.size(-1), which is d_model): raise a "
        "ValueError if L > max_len, then add the table's first L rows (an (L, D) slice broadcasts over "
        "the batch) and apply the dropout to the sum, not to the table alone.",
    ],
)
register_hints(
    "TokenEmbedding",
    [
        "In __init__, create self.embedding = nn.Embedding(vocab_size, d_model), with no other argument "
        "(no padding_idx, no max_norm), and remember d_model.",
        "In forward, self.embedding(tokens) turns the (B, L) ids into (B, L, d_model) vectors.",
        "The paper (section 3.4) multiplies the looked-up vectors by sqrt(d_model): one "
        "multiplication of the (B, L, d_model) result, after the lookup.",
    ],
)

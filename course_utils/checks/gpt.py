"""Checkers for notebook 09 (a decoder-only language model): ``GPTBlock``, ``GPT``,
``next_token_probs`` and ``generate``.

``GPTBlock`` and ``GPT`` are built with awkward random sizes, in eval mode, with random
parameters copied by name into the reference (:mod:`course_utils.gpt`); a wrong output is
compared with the reference computed with each catalogued mistake. ``GPTBlock`` is first
put through a leak test (change the input at one position: no earlier output may move) and
last compared in float64, where GPT-2's tanh-GELU and the exact GELU are told apart for
sure. ``next_token_probs`` is compared for several temperatures, ``top_k`` and ``top_p``.
``generate`` runs on a model whose draws are determined (``top_k=1``), then 4,000 draws
under fixed seeds are compared with the distribution; a forward pre-hook watches the mode,
the grad mode and the context length.

Each exercise's mistakes are one table (:mod:`.catalogue`): ``BLOCK``, ``GPT_TABLE``, ``NTP``,
``GENERATE``, in the order the check tries them; ``MISTAKES`` lists their names, and
tests/test_checks_gpt.py pins each one.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..attention import causal_mask
from ..generation import next_token_probs
from ..gpt import GPT, GPTBlock
from ._blocks import (
    P_PROBE,
    P_RATE,
    Block,
    Spy,
    check_dropout,
    check_dropout_modes,
    check_dropout_rate,
    check_part_dropout,
    dropout_mistakes,
    run_block,
    sublayer_dropout_rates,
    swapped,
    zeros,
)
from ._core import (
    Failure,
    StudentError,
    allclose,
    call_student,
    check_input_device,
    check_module_device,
    check_state_unchanged,
    check_unchanged,
    checker,
    describe_shape,
    drawn_once,
    equal,
    expect_close,
    fail,
    gradient_probe,
    isnan,
    matches,
    module_copy,
    module_state,
    raised,
    randint,
    register_hints,
    require_distinct_roles,
    require_function,
    require_module_class,
    require_no_grad,
    student_line,
)
from ._pairing import build_student, copy_parameters, match_parameters, named, randomise_parameters, structure_failure
from .catalogue import DEVICE_PROBE, GRADIENT_PROBE, Catalogue, Entry, Output, Probe, Raises, Reference, literal
from .decoder import trailing_padding, tuple_return

__all__ = ["check_gpt_block", "check_gpt", "check_next_token_probs", "check_generate"]


def _dims() -> tuple[int, int, int, int, int]:
    """``B, H, d_k, L, d_ff`` with ``B, L, D = H*d_k, d_ff`` all different."""
    while True:
        B, H, d_k, L, d_ff = randint(2, 4), randint(2, 3), randint(3, 5), randint(5, 8), randint(10, 24)
        if len({B, L, H * d_k, d_ff}) == 4:
            return B, H, d_k, L, d_ff


# ---------------------------------------------------------------- GPTBlock
_BLOCK_PARTS = {
    "norm1": "LayerNorm(d_model), before the self-attention",
    "self_attn": "MultiHeadAttention(d_model, num_heads, dropout)",
    "norm2": "LayerNorm(d_model), before the feed-forward",
    "feed_forward": 'FeedForward(d_model, d_ff, dropout, activation="gelu_tanh")',
}
_BLOCK = Block("GPTBlock", ("self", "ff"), word={"self": "the masked self-attention", "ff": "the feed-forward"},
               short={"self": "self-attention", "ff": "feed-forward"},
               attn={"self": ("in", "in", "self_attn", "causal&mask")}, lost={})
_EXACT_GELU = (
    "the feed-forward uses the exact GELU (`nn.GELU()` or `F.gelu(x)`); GPT-2 uses its tanh approximation: "
    '`FeedForward(d_model, d_ff, dropout, activation="gelu_tanh")`, i.e. `nn.GELU(approximate="tanh")`. '
    "The two differ by up to 5e-4, enough to break parity with GPT-2"
)


def _block_variant(ref: GPTBlock, x: Tensor, mask: Tensor | None, mutation: dict[str, Any] | None = None) -> Tensor:
    """The pre-norm block computed with the reference's submodules (:func:`._blocks.run_block`),
    attending with ``causal_mask(L) & mask``, optionally with one mutation."""
    causal = causal_mask(x.size(1), device=x.device)
    masks = {"causal&mask": causal if mask is None else causal & mask, "mask": mask, "causal": causal,
             "causal|mask": causal if mask is None else causal | mask}
    return run_block(ref, _BLOCK, x, None, masks, True, mutation)


def _activation(act: Callable[[Tensor], Tensor]) -> Callable[[GPTBlock], dict[str, Any]]:
    """The mutation: the feed-forward with ``act`` in place of GPT-2's tanh-GELU."""
    return lambda ref: {"ff": lambda h: ref.feed_forward.linear2(act(ref.feed_forward.linear1(h)))}


def _mutated(mutation: dict[str, Any] | Callable[[GPTBlock], dict[str, Any]], masked: bool = False) -> Reference:
    """One candidate: the block of case ``c`` (``ref``, ``x``, ``mask``) with ``mutation`` (or
    ``mutation(ref)``); ``masked``: only when a mask is given."""
    def build(c: Any) -> list:
        if masked and c.mask is None:
            return []
        return [({}, lambda: _block_variant(c.ref, c.x, c.mask, mutation(c.ref) if callable(mutation) else mutation))]
    return Reference(build, "values")


def _parallel_block(c: Any) -> list:
    """GPT-J's parallel block: both sub-layers read ``x``, ``x + attn(norm1(x)) + ff(norm2(x))``."""
    def run() -> Tensor:
        causal = causal_mask(c.x.size(1), device=c.x.device)
        h = c.ref.norm1(c.x)  # (B, L, D)
        attended = c.ref.self_attn(h, h, h, causal if c.mask is None else causal & c.mask)[0]  # (B, L, D)
        return c.x + attended + c.ref.feed_forward(c.ref.norm2(c.x))
    return [({}, run)]


def _conv1d_habit(c: Any) -> bool:
    """A matrix-product shape error on a line that multiplies by a ``.weight`` as it is (no
    ``.T``, ``.t()``, ``.transpose``, ``.mT``): GPT-2's Conv1D habit on ``nn.Linear`` weights."""
    error, code = str(c.exc), c.line.replace(" ", "")
    return isinstance(c.exc, RuntimeError) and ("cannot be multiplied" in error or "size of tensor a" in error) \
        and "@" in code and ".weight" in code \
        and not any(t in code for t in (".weight.T", ".weight.t()", ".weight.transpose", ".weight.mT"))


_BROADCAST = ("doesn't match the broadcast shape", "refers to a single memory location")
_FORM = "`x = x + sublayer(norm(x))`"
_IN_PLACE = "mask combined in place"

# the forward's errors that have a known cause, in GPTBlock's and GPT's checks alike (stage "raised")
_FORWARD_RAISED = [
    Entry("Conv1D layout",
          "x @ linear.weight on an nn.Linear weight (GPT-2's Conv1D stores (in, out); Linear (out, in))",
          Output(_conv1d_habit, "raised"),
          "your forward multiplies by a layer's weight as GPT-2's Conv1D stores it ({case}): {raised}. GPT-2's Conv1D "
          "keeps its weight as (in, out), so `x @ weight + bias` is right there; `nn.Linear` keeps (out, in), so `x @ "
          "linear.weight` multiplies by the transpose. Call the layer, `linear(x)`, or write `x @ linear.weight.T + "
          "linear.bias` (`F.linear(x, weight, bias)`)."),
    Entry(_IN_PLACE, "masks combined in place (mask &= causal): fails on a mask that broadcasts, or changes the "
          "caller's mask",
          Output(lambda c: isinstance(c.exc, RuntimeError) and any(b in str(c.exc) for b in _BROADCAST)
                 and ("&=" in c.line or "and_(" in c.line), "raised"),
          "your forward combines the masks in place ({case}): {raised}. `a &= b` writes into `a`, which must already "
          "have the result's full shape (B, L, L): the padding mask (B, 1, L) and the causal mask (L, L) are smaller, "
          "and an .expand()ed view shares memory between entries. And on the caller's mask it would change the "
          "caller's tensor, which every block gets. Combine into a new tensor: `mask = causal & mask`."),
]
_FORWARD = Catalogue("a GPT forward", "09", _FORWARD_RAISED)  # not an exercise: GPTBlock's and GPT's tables hold them

BLOCK = Catalogue("GPTBlock", "09", [
    Entry("not a class", None, Probe("require_module_class")),
    Entry("not a class", None, Probe("build_student")),
    *(Entry(name, None, Probe("structure_failure"))
      for name in ("wrong parameter shape", "missing submodule", "unexpected parameters")),
    Entry("modules shared", None, Probe("require_distinct_roles")),
    # one case, without a mask and with a padding mask (B, 1, L)
    *_FORWARD_RAISED,
    Entry("attention output not unpacked", "MultiHeadAttention's (output, weights) pair used as a tensor",
          Output(lambda c: _pair_not_unpacked(c.model, c.args, c.expected, c.err), "unpacked"),
          "your GPTBlock raised {raised} ({case}): self.self_attn returns a pair, (output, weights), and your code "
          "used the pair where the output belongs. Keep the output, `[0]`: `x = x + "
          "self.dropout1(self.self_attn(h, h, h, mask)[0])`. (With the output taken, your block gives the right "
          "numbers.)"),
    Entry("input modified in place", None, Probe("check_unchanged")),
    Entry("parameters modified in place", None, Probe("check_state_unchanged")),
    Entry("wrong return", None, Probe("tuple_return")),
    Entry("dropout ignores eval mode", None, Probe("check_dropout")),
    # the leak test (no mask): change the input at one position, no earlier output may move
    Entry("upper triangle", None, Output(lambda c: c.leak is not None and not c.later_moved, "leak"),
          "{said}, and (the last position aside) no change moved an output after it: your mask is the upper triangle "
          "(`triu`, `causal_mask(L).T` or `~causal_mask(L)`), so each position sees the later ones and not the "
          "earlier. The causal mask is the lower triangle, True on and below the diagonal: `causal_mask(L)` (or "
          "`torch.ones(L, L, dtype=torch.bool).tril()`), combined with `mask` by & when one is given."),
    Entry("future leaking", "a position sees later positions (causal mask missing or wrong)",
          Output(lambda c: c.leak is not None, "leak"),
          "{said}. A GPT block must be causal by itself: attend with `causal_mask(L)` (True on and below the "
          "diagonal), combined with `mask` by & when one is given."),
    # the wrong output is the reference run with one of these mistakes (in this order)
    Entry("padding mask replaces causal", "the padding mask used instead of the causal one",
          _mutated({"attn": {"self": ("in", "in", "self_attn", "mask")}}, masked=True),
          "when a mask is given, your block uses it instead of the causal mask, so every position sees the later ones "
          "(the future leaks). Combine them: `causal_mask(L) & mask`."),
    Entry("mask ignored", None, _mutated({"attn": {"self": ("in", "in", "self_attn", "causal")}}, masked=True),
          "the `mask` argument has no effect: the block must attend with `causal_mask(L) & mask`, so that padding is "
          "blocked too."),
    Entry("| instead of &", "causal and padding masks combined with | instead of &",
          _mutated({"attn": {"self": ("in", "in", "self_attn", "causal|mask")}}, masked=True),
          "the causal mask and `mask` are combined with | (or): a key is allowed if it is in the past OR real, so "
          "with a mask every real later token leaks in. It must be both: `causal_mask(L) & mask`."),
    Entry("post-norm", "the GPT block normalises after the residual add",
          _mutated({"place": {"self": "post", "ff": "post"}}),
          "your block normalises after the residual addition (post-norm, `norm(x + sublayer(x))`); a GPT block is "
          f"pre-norm: {_FORM}, the residual stream itself is never normalised."),
    Entry("missing residual", "a residual connection is missing", _mutated({"residual": {"self": None, "ff": None}}),
          f"there are no residual connections: {_FORM}."),
    Entry("missing residual", None, _mutated({"residual": {"self": None}}),
          f"there is no residual connection around the self-attention: {_FORM}."),
    Entry("missing residual", None, _mutated({"residual": {"ff": None}}),
          f"there is no residual connection around the feed-forward: {_FORM}."),
    Entry("residual stream normalised", "the residual stream itself is normalised (x = norm(x))",
          _mutated({"place": {"self": "stream", "ff": "stream"}}),
          "the residual stream itself is normalised (`h = norm1(x); x = h + self_attn(h, ...)`): the residual adds "
          f"the input as it came, {_FORM}, so x keeps flowing unnormalised."),
    # half of it (trial r09): one sub-layer pre-norm, the other adds its result to the normed x
    Entry("residual stream normalised", None, _mutated({"place": {"self": "stream"}}),
          "the residual stream is normalised before the self-attention (`x = norm1(x); x = x + self_attn(x, ...)`), "
          "so the residual adds the normed x: normalise only the sub-layer's input, `h = norm1(x); x = x + "
          f"self_attn(h, h, h, mask)[0]`, as the feed-forward does: {_FORM}."),
    Entry("residual stream normalised", None, _mutated({"place": {"ff": "stream"}}),
          "the residual stream is normalised before the feed-forward (`x = norm2(x); x = x + feed_forward(x)`), so "
          "the residual adds the normed x: normalise only the sub-layer's input, `x = x + feed_forward(norm2(x))`, "
          f"as the self-attention does: {_FORM}."),
    Entry("norm missing", "a sub-layer's norm is missing", _mutated({"place": {"self": "none"}}),
          "the self-attention reads x itself, not normalised: pre-norm normalises each sub-layer's input, `h = "
          f"norm1(x); x = x + self_attn(h, h, h, mask)[0]`: {_FORM}."),
    Entry("norm missing", None, _mutated({"place": {"ff": "none"}}),
          "the feed-forward reads x itself, not normalised (norm2 is never used): pre-norm normalises each "
          f"sub-layer's input, `x = x + feed_forward(norm2(x))`: {_FORM}."),
    Entry("norms swapped", "two norms exchanged", _mutated({"norm_of": (1, 0)}),
          "norm1 and norm2 are swapped: norm1 goes before the self-attention, norm2 before the feed-forward."),
    Entry("same norm twice", "one norm used for two sub-layers", _mutated({"norm_of": (0, 0)}),
          "norm1 is used before both sub-layers and norm2 never, so the self-attention and the feed-forward both "
          "read norm1(x): the feed-forward reads its own norm, `x = x + feed_forward(norm2(x))` (each norm learns "
          "its own scale)."),
    Entry("same norm twice", None, _mutated({"norm_of": (1, 1)}),
          "norm2 is used before both sub-layers and norm1 never, so the self-attention and the feed-forward both "
          "read norm2(x): the self-attention reads its own norm, `x = x + self_attn(norm1(x), ...)` (each norm "
          "learns its own scale)."),
    Entry("keys and values not normalised", "pre-norm self-attention with normalised queries but raw keys and values",
          _mutated({"attn": {"self": ("in", "x", "self_attn", "causal&mask")}}),
          "the self-attention normalises only its queries: the keys and values are the un-normalised x. In pre-norm "
          "the sub-layer's whole input is normalised once, `h = norm1(x)`, and the self-attention reads h three "
          "times: `self_attn(h, h, h, mask)`."),
    *(Entry("extra norm at the layer end",
            None if i else "a pre-norm layer normalises its output once more after the last sub-layer",
            _mutated({"end": i}),
            f"the block ends with an extra norm ({norm}(x) after the feed-forward's residual): a pre-norm block "
            f"returns the un-normalised stream, {_FORM} for each sub-layer and nothing after it; the one final norm "
            "belongs to the model (GPT's self.norm, after the last block).")
      for i, norm in enumerate(("norm1", "norm2"))),
    Entry("ReLU instead of GELU", "ReLU where GELU is asked for", _mutated(_activation(F.relu)),
          "the feed-forward uses ReLU; GPT-2 uses GELU (its tanh approximation): `FeedForward(d_model, d_ff, "
          'dropout, activation="gelu_tanh")`.'),
    Entry("exact GELU", "exact GELU instead of GPT-2's tanh approximation", _mutated(_activation(F.gelu)),
          _EXACT_GELU + "."),
    Entry("parallel block",
          "the feed-forward reads the block's input x, not the stream after the attention (GPT-J's block)",
          Reference(_parallel_block, "values"),
          "the feed-forward reads the block's input x, not the residual stream after the self-attention: `x + "
          "attn(norm1(x)) + ff(norm2(x))` is the parallel block of GPT-J and PaLM. GPT-2's sub-layers run one after "
          "the other: first `x = x + attn(norm1(x))`, then `x = x + ff(norm2(x))` on that new x."),
    *GRADIENT_PROBE,
    # float64, where the exact GELU and the tanh-GELU are told apart for sure
    Entry("exact GELU", None, Output(lambda c: c.exact and not c.right, "float64"),
          _EXACT_GELU + " (seen in float64, where the two are told apart for sure)"),
    # dropout with p = 1 (generated: where the sub-layer dropout goes wrong), each part on its own, then 0 < p < 1
    *(Entry(name, None, Reference(lambda c, m=m: [({}, lambda: run_block(c.ref, _BLOCK, c.x, None, c.masks, True, m,
                                                                        drop=zeros))], "dropout"), literal(text))
      for name, text, m in dropout_mistakes(_BLOCK, True)),
    *(Entry(name, None, Probe("check_dropout_modes")) for name in ("dropout ignores eval mode", "NaN",
                                                                   "hard-coded dropout p")),
    *(Entry(name, None, Probe("check_part_dropout")) for name in ("dropout not passed on", "wrong submodule")),
    *(Entry(name, None, Probe("sublayer_dropout_rates")) for name in (
        "dropout on the sub-layer input", "wrong dropout", "dropout applied twice", "wrong dropout rate")),
    DEVICE_PROBE,
    # last, a caller's full (B, L, L) mask: combined in place, it would be changed for every later block
    Entry(_IN_PLACE, None,
          Output(lambda c: not equal(c.mask, c.original) and equal(c.mask, c.original & c.causal), "caller mask"),
          "your forward combines the masks in place ({case}): after the call the caller's mask is `mask & "
          "causal_mask(L)`. `mask &= causal` (or `mask.logical_and_(...)`) writes into the tensor the caller passed, "
          "and GPT passes that same mask to every block, so the caller's tensor changes under it (a padding mask "
          "reused for the next batch, or for generation, now blocks the future too). Combine into a new tensor: "
          "`mask = causal & mask`."),
])


def _leak_test(model: nn.Module, x: Tensor, base: Tensor) -> None:
    """Change the input at one position ``j``: outputs before ``j`` (``base``: for ``x``) must not
    move at all. A mask that faces the future (``triu``, ``~causal``) is told apart from none at
    all: there the later outputs never move either."""
    B, L, D = x.shape
    leak, later_moved = None, False
    for j in range(1, L):
        changed = x.clone()
        changed[:, j] = torch.randn(B, D)
        out = call_student(model, changed, context="running forward (no mask)")
        if not isinstance(out, Tensor) or out.shape != base.shape:
            return
        moved = (out[:, :j] - base[:, :j]).abs().amax(dim=(0, 2))  # (j,)
        # the last output is left out: under ~causal_mask its row allows no key at all, and what
        # attention does with an empty row (uniform weights, NaN) is no sign of anything
        later_moved |= bool(((out[:, j + 1:-1] - base[:, j + 1:-1]).abs() > 1e-6).any())
        if leak is None and bool((moved > 1e-6).any()):
            i = int(torch.nonzero(moved > 1e-6)[0])
            leak = (j, i, float(moved[i]))
    said = "" if leak is None else (f"the future leaks: changing the input at position {leak[0]} changed the output "
                                    f"at position {leak[1]} (by {leak[2]:.3g}), which comes before it")
    BLOCK.detect("leak", SimpleNamespace(leak=leak, later_moved=later_moved), said=said)


def _forward(model: nn.Module, args: tuple[Tensor, ...], case: str) -> Any:
    """The student's forward; masks combined in place (``mask &= causal``) raise a broadcast
    error there, named here rather than shown raw (and GPT-2's Conv1D habit)."""
    try:
        return call_student(model, *args, context=f"running forward ({case})")
    except StudentError as err:
        _FORWARD.detect("raised", SimpleNamespace(exc=err.exc, line=student_line(err.exc) or ""), case=case,
                        raised=raised(err.exc, inline=True))
        raise


class _OutputOnly(nn.Module):
    """Stands in for an attention in :func:`_pair_not_unpacked`: the output alone, not ``(output, weights)``."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        out = self.inner(*args, **kwargs)
        return out[0] if isinstance(out, (tuple, list)) and len(out) == 2 else out


def _pair_not_unpacked(model: nn.Module, args: tuple[Tensor, ...], expected: Tensor, err: StudentError) -> bool:
    """After the student's forward raised: with every attention returning its output alone, a run that gives
    ``expected`` means the code used the pair ``(output, weights)`` as the output (``[0]`` forgotten)."""
    names = [n for n, m in model.named_children() if "Attention" in type(m).__name__]
    if not isinstance(err.exc, TypeError) or "tuple" not in str(err.exc) or not names:
        return False
    with swapped(model, {n: _OutputOnly(getattr(model, n)) for n in names}), torch.no_grad():
        try:
            got = model(*(a.clone() for a in args))
        except Exception:  # noqa: BLE001 - no verdict: the original error is reported
            return False
    return isinstance(got, Tensor) and matches(got, expected, atol=1e-4)


def _run_block_case(model: nn.Module, ref: GPTBlock, x: Tensor, mask: Tensor | None, case: str) -> None:
    """One case; without a mask the leak test runs first (before the values, which would only say
    "differ" for a missing causal mask)."""
    args = (x,) if mask is None else (x, mask)
    originals, state = tuple(a.clone() for a in args), module_state(model)
    with torch.no_grad():
        expected = ref(x, mask)  # (B, L, D)
        try:
            got = _forward(model, args, case)
        except StudentError as err:
            BLOCK.detect("unpacked", SimpleNamespace(model=model, args=originals, expected=expected, err=err),
                         case=case, raised=raised(err.exc, inline=True))
            raise
        check_unchanged(["x", "mask"], args, originals, case)
        check_state_unchanged(model, state, case)
        tuple_return(got, "GPTBlock")
        check_dropout(lambda: call_student(model, *originals, context=f"running forward ({case})"), got, expected)
        if mask is None and isinstance(got, Tensor) and got.shape == x.shape:
            _leak_test(model, originals[0], got)
        mistakes = BLOCK.candidates(SimpleNamespace(ref=ref, x=originals[0], mask=mask), "values")
        expect_close("output", got, expected, mistakes, atol=1e-5, case=case)


def _exact_gelu_probe(model: nn.Module, ref: GPTBlock, B: int, L: int, D: int) -> None:
    """The exact GELU differs from GPT-2's tanh-GELU by up to 5e-4, which a whole block in float32
    can hide within tolerance on some draws; in float64 the two are far apart compared with the
    rounding. Any outcome but a match with the exact GELU (an error, a float32 tensor created
    inside) adds nothing: the float32 cases already decided."""
    try:
        model.double()
        ref.double()
        x = 2 * torch.randn(B, L, D, dtype=torch.float64)
        with torch.no_grad():
            got, expected, exact = model(x), ref(x), _block_variant(ref, x, None, _activation(F.gelu)(ref))
    except Exception:  # noqa: BLE001 - the probe only adds a diagnosis
        return
    finally:
        model.float()
        ref.float()
    BLOCK.detect("float64", SimpleNamespace(exact=matches(got, exact, atol=1e-9, rtol=1e-7),
                                            right=matches(got, expected, atol=1e-9, rtol=1e-7)))


def _caller_mask(model: nn.Module, B: int, L: int, D: int) -> None:
    """A caller's full mask (B, L, L), which a block may not change (item 6 of issue 24: ``mask &=
    causal`` runs on it without the broadcast error a (B, 1, L) mask gives, and changes it). A
    forward that cannot take this mask is not judged here."""
    mask = trailing_padding(B, L).expand(B, L, L).clone()  # (B, L, L)
    original, case = mask.clone(), f"x ({B}, {L}, {D}), a full mask ({B}, {L}, {L})"
    try:
        with torch.no_grad():
            call_student(model, torch.randn(B, L, D), mask, context=f"running forward ({case})")
    except StudentError:
        return
    BLOCK.detect("caller mask", SimpleNamespace(mask=mask, original=original, causal=causal_mask(L)), case=case)
    check_unchanged(["mask"], [mask], [original], case)


@checker("GPTBlock")
def check_gpt_block(cls: Any) -> str:
    require_module_class(cls, "GPTBlock")
    B, H, d_k, L, d_ff = _dims()
    D = H * d_k
    model = build_student(cls, "GPTBlock", (D, H, d_ff), dict(dropout=0.1), f"d_model={D}, num_heads={H}, "
                          f"d_ff={d_ff}, dropout=0.1")
    ref = GPTBlock(D, H, d_ff).eval()
    pairs, missing, unexpected, wrong_shape = match_parameters(model, ref)
    structure_failure("GPTBlock", model, missing, unexpected, wrong_shape, _BLOCK_PARTS)
    require_distinct_roles(model, ref, "GPTBlock")  # self.norm2 = self.norm1
    copy_parameters(pairs)
    x, first = torch.randn(B, L, D), f"x ({B}, {L}, {D}), no mask"
    _run_block_case(model, ref, x, None, first)
    mask = trailing_padding(B, L)  # (B, 1, L)
    case = f"x ({B}, {L}, {D}), padding mask ({B}, 1, {L})"
    _run_block_case(model, ref, torch.randn(B, L, D), mask, case)
    gradient_probe(model, ref, dict(x=torch.randn(B, L, D), mask=mask), named(model, pairs), what="GPTBlock", case=case)
    _exact_gelu_probe(model, ref, B, L, D)
    _block_dropout(cls, B, L, D, H, d_ff)
    # all right so far: the first case again, on 'meta' (a plain tensor attribute clashes), else watched
    check_module_device(model, (x,), "your GPTBlock", first, "build the causal mask on the input's device: "
                        "causal_mask(L, device=x.device) (or torch.ones(L, L, dtype=torch.bool, device=x.device)"
                        ".tril(), or a buffer registered in __init__, which .to(device) moves)")
    _caller_mask(model, B, L, D)
    # the notebook stores this line (nbval): change it together with solutions/09
    return "causal by itself, pre-norm, GELU (tanh), residuals, with and without a padding mask, random weights"


def _block_dropout(cls: Any, B: int, L: int, D: int, H: int, d_ff: int) -> None:
    """Dropout with p = 1 (see :mod:`._blocks`): the block's own dropout must zero each sub-layer's
    output before the residual add, and nothing else; each sub-module on its own must drop like the
    reference's (the block passes ``dropout`` on). Then 0 < p < 1: each output dropped once, with p."""
    build = lambda p: build_student(cls, "GPTBlock", (D, H, d_ff), dict(dropout=p),  # noqa: E731
                                    f"d_model={D}, num_heads={H}, d_ff={d_ff}, dropout={p:g}")
    model, ref = build(P_PROBE), GPTBlock(D, H, d_ff, P_PROBE).eval()
    copy_parameters(match_parameters(model, ref)[0])
    x, causal = torch.randn(B, L, D), causal_mask(L)  # (B, L, D), (L, L)
    run = lambda m: call_student(m, x.clone(), context="running forward (dropout)")  # noqa: E731
    c = SimpleNamespace(ref=ref, x=x, masks={"causal&mask": causal})
    check_dropout_modes(model, ref, run, "GPTBlock", lambda: BLOCK.candidates(c, "dropout"),
                        quiet=("self_attn", "feed_forward"), atol=1e-5)
    with torch.no_grad():
        y = ref.norm1(x)  # (B, L, D): a typical sub-layer input
    parts = {"self_attn": (y, y, y, causal), "feed_forward": (y,)}
    # a part that is only a container of the parameters (an nn.Module without forward) is not run on its own
    try:
        check_part_dropout(model, ref, {n: a for n, a in parts.items() if _runnable(getattr(model, n, None))},
                           "GPTBlock")
    except Failure as failure:
        if failure.mistake == "dropout not passed on" and "`feed_forward`" in failure.message:
            # a GPT-2 habit: its MLP has one dropout, after c_proj; the course's FeedForward drops its hidden layer too
            raise Failure(failure.message + " (GPT-2's own MLP drops once, after `c_proj`, and nowhere inside; the "
                          "course's FeedForward also drops its hidden layer, as the original Transformer's does, and "
                          "this exercise's block uses it with the block's dropout.)", failure.mistake) from None
        raise
    sublayer_dropout_rates(build(P_RATE), run, x, _BLOCK)


def _runnable(part: Any) -> bool:
    return isinstance(part, nn.Module) and type(part).forward is not nn.Module.forward


# ---------------------------------------------------------------- GPT
_GPT_PARTS = {
    "token_embedding": "nn.Embedding(vocab_size, d_model)",
    "position_embedding": "nn.Embedding(max_len, d_model), learned positions",
    "blocks": "nn.ModuleList of num_layers GPTBlock",
    "norm": "LayerNorm(d_model), the final norm",
}


def _gpt_variant(ref: GPT, tokens: Tensor, mask: Tensor | None, *, positions: int | None = 0, scale: bool = False,
                 final_norm: bool = True, output: str = "logits", pass_mask: bool = True,
                 blocks: str = "chained", head: str = "linear") -> Tensor:
    L = tokens.size(1)
    x = ref.token_embedding(tokens) * (math.sqrt(ref.d_model) if scale else 1.0)  # (B, L, D)
    if positions is not None:  # None: no positions; else the first position's number
        x = x + ref.position_embedding(torch.arange(L) + positions)
    h = x
    for block in ref.blocks:
        block = ref.blocks[0] if blocks == "first only" else block
        h = block(x if blocks == "unchained" else h, mask if pass_mask else None)
    h = ref.norm(h) if final_norm else h  # (B, L, D)
    logits = ref.lm_head(h) if head == "linear" else h @ ref.lm_head.weight  # (B, L, V); "Conv1D": needs V == D
    return {"logits": logits, "probs": logits.softmax(-1), "log_probs": logits.log_softmax(-1)}[output]


def _gpt_run(**settings: Any) -> Callable[[Any], list]:
    """One candidate: the reference GPT of case ``c`` (``ref``, ``tokens``, ``mask``) with these settings."""
    return lambda c: [({}, lambda: _gpt_variant(c.ref, c.tokens, c.mask, **settings))]


def _tying(c: Any) -> SimpleNamespace:
    """What the tie looks like: ``judged`` False when there is nothing to judge here (no
    token_embedding: structure_failure names it; no lm_head, the logits from the embedding matrix:
    the values decide)."""
    emb, head = getattr(c.model, "token_embedding", None), getattr(c.model, "lm_head", None)
    judged = isinstance(emb, nn.Embedding) and head is not None
    weight = getattr(head, "weight", None)
    return SimpleNamespace(judged=judged, head=head, weight=weight, emb=emb,
                           untied=judged and weight is not (emb.weight if judged else None))


def _transposed(t: Any) -> bool:
    w, e = t.weight, t.emb.weight
    return isinstance(w, Tensor) and w.shape == e.shape[::-1] and equal(w, e.t())


def _copied(t: Any) -> bool:
    w, e = t.weight, t.emb.weight
    return isinstance(w, Tensor) and w.shape == e.shape and equal(w, e)


_RESIDUAL = ("self_attn.w_o.weight", "feed_forward.linear2.weight")  # the projections into the residual stream
_HOW = ("Initialise every weight matrix with `nn.init.normal_(p, std=0.02)` (before tying), as GPT-2 does; GPT-2 "
        "draws its residual projections (`w_o`, `linear2`) with `std=0.02 / math.sqrt(2 * num_layers)`, which is "
        "accepted too.")


def _init_facts(model: nn.Module, ref: GPT) -> SimpleNamespace | None:
    """The notebook's initialisation, on the freshly built model: every weight matrix ~ N(0, 0.02^2)
    (the pooled standard deviation within 15 %, each matrix within a factor 2: tiny matrices vary),
    norm scales left at one. GPT-2's own (its paper, section 2.3; nanoGPT, Hugging Face) draws the
    residual projections ``w_o`` and ``linear2`` with ``0.02 / sqrt(2 * num_layers)``: when those
    matrices together are nearer that, they are measured against it. Biases are not checked (the
    notebook leaves them as built). None: no weight matrix to judge."""
    s_params = dict(model.named_parameters(remove_duplicate=False))
    found = [(n, s_params.get(n, s_params.get(n.replace(".embedding.weight", ".weight")))) for n, _ in
             ref.named_parameters()]
    matrices = [(n, p.detach().float()) for n, p in found if p is not None and p.dim() >= 2]
    residual = [w for n, w in matrices if n.endswith(_RESIDUAL)]
    target = dict.fromkeys((n for n, _ in matrices), 0.02)  # each matrix's intended standard deviation
    if residual:  # nearer (in ratio) GPT-2's scaled std than 0.02: measured as if drawn with 0.02
        std, scaled = float(torch.cat([w.flatten() for w in residual]).std()), 0.02 / math.sqrt(2 * len(ref.blocks))
        if abs(math.log(max(std, 1e-12) / scaled)) < abs(math.log(max(std, 1e-12) / 0.02)):
            target.update((n, scaled) for n in target if n.endswith(_RESIDUAL))
            matrices = [(n, w * (0.02 / target[n])) for n, w in matrices]
    scales = [(n, p.detach().float()) for n, p in found if p is not None and p.dim() < 2 and not n.endswith("bias")]
    if not matrices:
        return None
    stds = {name: float(w.std()) for name, w in matrices}
    pooled = float(torch.cat([w.flatten() for _, w in matrices]).std())
    name = max(stds, key=lambda n: abs(math.log(max(stds[n], 1e-12) / 0.02)))
    xavier = {n: math.sqrt(2 / (w.size(0) + w.size(1))) for n, w in matrices}  # its standard deviation
    return SimpleNamespace(
        stds=stds, pooled=pooled, name=name, matrices=matrices, xavier=xavier, target=target, scales=scales,
        off=not all(0.01 < std < 0.04 for std in stds.values()) or abs(pooled - 0.02) > 0.003)


def _default_embedding(c: Any) -> dict[str, str] | None:
    for emb in ("token_embedding.weight", "position_embedding.weight"):
        # wide bounds: a small position table's N(0, 1) strays beyond 20 % on some draws
        if 0.6 < c.stds.get(emb, 0.0) < 1.6:
            return dict(emb=emb, std=f"{c.stds[emb]:.3g}")
    return None


def _xavier(c: Any) -> dict[str, str] | None:
    if not (all(0.7 < c.stds[n] / c.xavier[n] < 1.4 for n in c.stds)
            and abs(float(torch.cat([w.flatten() / c.xavier[n] for n, w in c.matrices]).std()) - 1) < 0.1):
        return None
    return dict(name=c.name, std=f"{c.stds[c.name]:.3g}", xavier=f"{c.xavier[c.name]:.3g}")


def _wrong_std(c: Any) -> dict[str, str]:
    residual = {c.target[n] for n in c.target if n.endswith(_RESIDUAL)}
    return dict(name=c.name, std=f"{c.stds[c.name] * c.target[c.name] / 0.02:.3g}", pooled=f"{c.pooled:.3g}",
                rescaled="" if 0.02 in residual else ", GPT-2's scaled residual projections counted as 0.02",
                target=f"{c.target[c.name]:.3g}")


def _scales_changed(c: Any) -> dict[str, str] | None:
    for name, w in c.scales:
        if not equal(w, torch.ones_like(w)):
            return dict(name=name, mean=f"{float(w.mean()):.3g}")
    return None


def _refused(c: Any) -> bool:
    """A sequence of exactly ``max_len`` tokens refused by the student's own ``raise`` or ``assert``."""
    return isinstance(c.exc, (ValueError, AssertionError)) or bool(re.search(r"\b(raise|assert)\b", c.line))


_TOO_LONG = ("check the length first: `if tokens.size(1) > self.max_len: raise ValueError(f\"... L = {{L}} > max_len "
             "= {{self.max_len}}\")`")

GPT_TABLE = Catalogue("GPT", "09", [
    Entry("not a class", None, Probe("require_module_class")),
    Entry("not a class", None, Output(lambda model: not isinstance(model, nn.Module), "built"),
          "GPT(...) should build an nn.Module; got {type}."),
    # the output layer tied to the token embedding (stage "tying")
    Entry("output bias", "the output layer has a bias",
          Output(lambda t: t.judged and getattr(t.head, "bias", None) is not None, "tying"),
          "lm_head has a bias; GPT-2's output layer has none (and a tied layer shares only the matrix): "
          "`nn.Linear(d_model, vocab_size, bias=False)`."),
    Entry("tied but transposed", "the output layer holds the token embedding transposed, (D, V) instead of (V, D)",
          Output(lambda t: t.untied and _transposed(t) and dict(shape=describe_shape(t.weight)), "tying"),
          "lm_head.weight is the token embedding transposed, {shape} = (D, V): `nn.Linear(d_model, vocab_size)` "
          "stores its weight as (out, in) = ({V}, {D}), the embedding table's own shape, so the table fits as it is: "
          "`self.lm_head.weight = self.token_embedding.weight` (no `.t()`; GPT-2's Conv1D layers store (in, out), but "
          "its head is tied untransposed too)."),
    Entry("tied by copying", "the embedding is copied, not shared", Output(lambda t: t.untied and _copied(t), "tying"),
          "lm_head.weight is a copy of token_embedding.weight, not the same tensor: the two start equal but are "
          "separate parameters (2 x V x D numbers), and the first optimizer step makes them differ. Share the "
          "Parameter itself: `self.lm_head.weight = self.token_embedding.weight`."),
    Entry("not tied", "the output layer does not share the token embedding",
          Output(lambda t: t.untied and dict(shape=describe_shape(t.weight)), "tying"),
          "lm_head is not tied to the token embedding: it has its own weight matrix ({shape}). Share the Parameter: "
          "`self.lm_head.weight = self.token_embedding.weight` (one ({V}, {D}) matrix serves both, saving {saved} "
          "parameters here)."),
    # the blocks (stage "blocks")
    Entry("missing submodule", None,
          Output(lambda b: not isinstance(b.blocks, nn.ModuleList) and dict(
              got="no attribute `blocks`" if b.blocks is None else f"`blocks` is a {type(b.blocks).__name__}"),
                 "blocks"),
          "your GPT has {got}: keep the blocks in `self.blocks = nn.ModuleList([...])`."),
    Entry("wrong number of blocks", "another number of blocks than num_layers",
          Output(lambda b: len(b.blocks) != b.N and dict(n=len(b.blocks)), "blocks"),
          "GPT(num_layers={N}) built {n} blocks; it should build num_layers of them."),
    Entry("blocks sharing one module", "blocks share one module",
          Output(lambda b: len({id(m) for m in b.blocks}) < len(b.blocks), "blocks"),
          "your blocks are one and the same module used several times (they share their weights): build a new "
          "GPTBlock for each, `nn.ModuleList(GPTBlock(...) for _ in range(num_layers))`."),
    *(Entry(name, None, Probe("structure_failure"))
      for name in ("wrong parameter shape", "missing submodule", "unexpected parameters")),
    Entry("modules shared", None, Probe("require_distinct_roles")),
    # the initialisation, on the freshly built model (stage "init")
    Entry("wrong initialisation", "normal initialisation with another std than the one asked for",
          Output(lambda c: c.off and all(0.6 < std < 1.6 for std in c.stds.values()) and 0.8 < c.pooled < 1.25
                 and dict(pooled=f"{c.pooled:.3g}"), "init"),  # nn.Linear's default is < 0.3
          "every weight matrix has standard deviation about 1 (all together: {pooled}), the N(0, 1) of "
          "nn.init.normal_(p) called without std= (nn.Embedding's default too, but nn.Linear's is smaller): " + _HOW),
    Entry("initialisation missing",
          "GPT's weight matrices keep PyTorch's default initialisation instead of normal(0, 0.02)",
          Output(lambda c: c.off and _default_embedding(c), "init"),
          "the weights keep PyTorch's default initialisation (`{emb}` has standard deviation {std}, nn.Embedding's "
          "N(0, 1)): " + _HOW),
    Entry("Xavier initialisation", "Xavier where GPT asks for normal(0, 0.02)",
          Output(lambda c: c.off and _xavier(c), "init"),
          "your weights follow Xavier's initialisation (`{name}` has standard deviation {std}, Xavier's sqrt(2 / "
          "(fan_in + fan_out)) = {xavier}); the notebook asks for GPT-2's: " + _HOW),
    Entry("wrong initialisation", None, Output(lambda c: c.off and _wrong_std(c), "init"),
          "`{name}` has standard deviation {std} after construction (all weight matrices together{rescaled}: "
          "{pooled}); it should be {target}. " + _HOW),
    Entry("norm scales initialised", "the initialisation also overwrites the LayerNorm scales (they must stay 1)",
          Output(_scales_changed, "init"),
          "`{name}` (a LayerNorm scale) is not all ones after construction (mean {mean}): the normal(0, 0.02) "
          "initialisation is for the weight matrices only (p.dim() >= 2); a norm scale near 0 would switch its layer "
          "off. Leave the norms as LayerNorm builds them."),
    # three cases: L, max_len and a padding mask
    *_FORWARD_RAISED,
    Entry("length check off by one", None,
          Output(_refused, "refused"),
          "a sequence of exactly max_len = {max_len} tokens ({case}) is refused: {raised}. The position table has "
          "max_len rows, positions 0 .. {last}, so a sequence of exactly max_len tokens is allowed (generation feeds "
          "the model the last max_len tokens); refuse only L > max_len: `if tokens.size(1) > self.max_len: raise "
          "ValueError(...)` (`>`, not `>=`)."),
    Entry("parameters modified in place", None, Probe("check_state_unchanged")),
    Entry("wrong return", None,
          Output(lambda got: isinstance(got, (tuple, list)) and dict(
              type=type(got).__name__, shapes=", ".join(describe_shape(t) for t in got[:3])), "return"),
          "GPT should return one tensor, the logits (B, L, V) = ({B}, {L}, {V}); yours returned a {type} ({shapes}). "
          "Return the logits alone (the loss is computed outside the model)."),
    Entry("dropout ignores eval mode", None, Probe("check_dropout")),
    # the wrong logits are the reference run with one of these mistakes (in this order)
    Entry("no position embedding", "no position embedding added", Reference(_gpt_run(positions=None), "values"),
          "the position embeddings are never added, so the model cannot tell positions apart: `x = "
          "token_embedding(tokens) + position_embedding(torch.arange(L, device=tokens.device))`."),
    Entry("positions start at 1", None, Reference(_gpt_run(positions=1), "values"),
          "the positions are numbered from 1; they start at 0: `position_embedding(torch.arange(L, "
          "device=tokens.device))` (and so fit max_len exactly)."),
    Entry("positions offset by 2", "positions counted from 2 (OPT's offset) instead of 0",
          Reference(_gpt_run(positions=2), "values"),
          "the positions are numbered from 2, OPT's habit (OPT's table has max_len + 2 rows for that offset); this "
          "table has max_len rows and GPT-2 counts from 0: `position_embedding(torch.arange(L, "
          "device=tokens.device))`."),
    Entry("embeddings scaled", "embeddings scaled where the contract does not scale them",
          Reference(_gpt_run(scale=True), "values"),
          "the token embeddings are multiplied by sqrt(d_model), as the encoder-decoder Transformer's TokenEmbedding "
          "does; GPT-2 adds the plain embedding to the position embedding, unscaled."),
    Entry("missing final norm", "no final norm where the contract has one (pre-norm)",
          Reference(_gpt_run(final_norm=False), "values"),
          "the final LayerNorm is missing: pre-norm blocks never normalise the residual stream, so the model applies "
          "`self.norm` once after the last block, before `lm_head`."),
    Entry("returns probabilities", "probabilities (softmax) returned instead of logits",
          Reference(_gpt_run(output="probs"), "values"),
          "the model returns probabilities (a softmax over the vocabulary); it returns logits, the raw scores: the "
          "loss (cross_entropy) and the sampling apply the softmax themselves."),
    Entry("returns log-probabilities", "log-probabilities (log_softmax) returned instead of logits",
          Reference(_gpt_run(output="log_probs"), "values"),
          "the model returns log-probabilities (log_softmax); it returns the raw logits from lm_head."),
    Entry("one layer applied repeatedly", "the first layer applied num_layers times",
          Reference(_gpt_run(blocks="first only"), "values"),
          "the first block is applied num_layers times; loop over self.blocks so each is used once."),
    Entry("layer outputs not chained", "every layer reads the stack's input instead of the previous output",
          Reference(_gpt_run(blocks="unchained"), "values"),
          "every block gets the embeddings as input, so only the last block's output is kept: feed each block's "
          "output to the next (`x = block(x, mask)`)."),
    Entry("Conv1D layout", None,  # V == D: x @ lm_head.weight runs, wrong
          Reference(lambda c: _gpt_run(head="Conv1D")(c) if c.ref.lm_head.weight.size(0) == c.ref.lm_head.weight.size(1)
                    else [], "values"),
          "your head multiplies by `lm_head.weight` as GPT-2's Conv1D stores it, (in, out); `nn.Linear` keeps (out, "
          "in) = (vocab_size, d_model), so `x @ lm_head.weight` multiplies by the transpose (it ran only because "
          "vocab_size equals d_model here). Call the layer, `self.lm_head(x)`, or write `x @ "
          "self.lm_head.weight.T`."),
    Entry("mask not passed on", "the mask is not passed on to the attention or layers",
          Reference(lambda c: _gpt_run(pass_mask=False)(c) if c.mask is not None else [], "values"),
          "the `mask` argument is not passed on to the blocks: call `block(x, mask)`."),
    *GRADIENT_PROBE,
    # dropout with p = 1 (the blocks in eval mode): only the embedding dropout acts (stage "dropout")
    Entry("embedding dropout missing", "no dropout on the sum of the token and position embeddings",
          Reference(lambda c: [({}, lambda: c.quiet(c.emb + c.pos))], "dropout"),
          "no dropout is applied to the embeddings in training mode: x = self.dropout(token_embedding(tokens) + "
          "position_embedding(positions)), with self.dropout = nn.Dropout(dropout)."),
    Entry("dropout before adding", None,
          Reference(lambda c: [({}, lambda: c.quiet(c.pos.expand_as(c.emb)))], "dropout"),
          "the dropout is applied to the token embeddings before the position embeddings are added; it goes on their "
          "sum: x = self.dropout(token_embedding(tokens) + position_embedding(positions))."),
    Entry("dropout after the final norm",
          "a dropout between the model's final norm and its output layer (GPT-2 has none)",
          Reference(lambda c: [({}, lambda: torch.zeros_like(c.quiet(c.emb + c.pos)))], "dropout"),
          # dropout = 1 - 1e-12 zeroes it all
          "the final norm's output (or the logits) goes through a dropout: GPT-2 drops only the embeddings' sum and, "
          "inside each block, each sub-layer's output; the final norm feeds the output layer as it is: "
          "`self.lm_head(self.norm(x))`."),
    *(Entry(name, None, Probe("check_dropout_modes")) for name in ("dropout ignores eval mode", "NaN",
                                                                   "hard-coded dropout p")),
    *(Entry(name, None, Probe("check_dropout_rate")) for name in ("wrong dropout", "dropout applied twice",
                                                                  "wrong dropout rate")),
    Entry("dropout not passed on", None,
          Output(lambda c: isinstance(c.got, Tensor) and not matches(c.got, c.expected) and matches(c.got, c.without),
                 "blocks dropout"),
          f"your GPT's blocks apply no dropout in training mode (blocks[0] on its own, dropout={P_PROBE:g}): the "
          "model's dropout is not passed on to them. Build them with it: GPTBlock(d_model, num_heads, d_ff, dropout)."),
    # a sequence longer than max_len must be a ValueError (stage "too long")
    Entry("wrong error type", None, Output(lambda c: isinstance(c.exc, AssertionError), "too long"),
          "a sequence longer than max_len ({case}) stops at an `assert` (nanoGPT's habit): an assert raises "
          "AssertionError, which says nothing about the input, and `python -O` removes it altogether. Raise the error "
          f"a bad argument gets: {_TOO_LONG}."),
    Entry("max_len not checked", "a sequence longer than max_len gets no ValueError (a deep IndexError, or none)",
          Output(lambda c: c.exc is not None, "too long"),
          "a sequence longer than max_len ({case}) gets {raised} from deep inside (the position table has only max_len "
          f"rows), not a clear error: {_TOO_LONG}."),
    Entry("max_len not checked", None, Output(lambda c: c.exc is None, "too long"),
          "a sequence longer than max_len ({case}) runs without an error, although the model has learned no position "
          f"beyond max_len: {_TOO_LONG}."),
    DEVICE_PROBE,
])


def _build_gpt(cls: Any, V: int, D: int, H: int, N: int, d_ff: int, p: float, max_len: int) -> nn.Module:
    shown = f"vocab_size={V}, d_model={D}, num_heads={H}, num_layers={N}, d_ff={d_ff}, dropout={p:g}, max_len={max_len}"
    model = call_student(cls, V, D, H, N, d_ff, p, max_len, context=f"constructing GPT({shown})")
    GPT_TABLE.detect("built", model, type=type(model).__name__)
    return model.eval()


@checker("GPT")
def check_gpt(cls: Any) -> str:
    require_module_class(cls, "GPT")
    B, H, d_k, L, d_ff = _dims()
    D, V, N, max_len = H * d_k, randint(11, 19), randint(2, 3), L + randint(2, 4)
    model = _build_gpt(cls, V, D, H, N, d_ff, 0.1, max_len)
    GPT_TABLE.detect("tying", _tying(SimpleNamespace(model=model)), V=V, D=D, saved=f"{V * D:,}")
    GPT_TABLE.detect("blocks", SimpleNamespace(blocks=getattr(model, "blocks", None), N=N), N=N)
    ref = GPT(V, D, H, N, d_ff, 0.0, max_len).eval()
    pairs, missing, unexpected, wrong_shape = match_parameters(model, ref)
    structure_failure("GPT", model, missing, unexpected, wrong_shape, _GPT_PARTS)
    require_distinct_roles(model, ref, "GPT")  # self.norm = self.blocks[-1].norm2; the tie is the reference's too
    init = _init_facts(model, ref)
    if init is not None:
        GPT_TABLE.detect("init", init)
    randomise_parameters(model)
    copy_parameters(pairs)
    for length, masked in ((L, False), (max_len, False), (L, True)):
        tokens = torch.randint(0, V, (B, length))  # (B, L)
        mask = trailing_padding(B, length) if masked else None  # (B, 1, L)
        args = (tokens,) if mask is None else (tokens, mask)
        case = f"tokens ({B}, {length})" + (f", padding mask ({B}, 1, {length})" if masked else ", no mask")
        state = module_state(model)
        with torch.no_grad():
            expected = ref(tokens, mask)  # (B, L, V)
            try:
                got = _forward(model, args, case)
            except StudentError as err:
                if length == max_len:  # the shorter case ran: a guard of the student's own refuses L == max_len
                    GPT_TABLE.detect("refused", SimpleNamespace(exc=err.exc, line=student_line(err.exc) or ""),
                                     max_len=max_len, last=max_len - 1, case=case, raised=raised(err.exc, inline=True))
                raise
            check_state_unchanged(model, state, case)
            GPT_TABLE.detect("return", got, B=B, L=length, V=V)
            check_dropout(lambda: call_student(model, *args, context=f"running forward ({case})"), got, expected)
            mistakes = GPT_TABLE.candidates(SimpleNamespace(ref=ref, tokens=tokens, mask=mask), "values")
            expect_close("logits", got, expected, mistakes, case=case)
    gradient_probe(model, ref, dict(tokens=tokens, mask=mask), named(model, pairs), what="GPT", case=case)
    _gpt_dropout(cls, V, D, H, N, d_ff, max_len, B, L)
    _too_long(model, V, B, max_len)
    tokens, case = torch.randint(0, V, (B, L)), f"tokens ({B}, {L}), no mask"  # all right: a CPU tensor watched
    check_module_device(model.eval(), (tokens,), "your GPT", case, "build the positions on the tokens' device: "
                        "torch.arange(L, device=tokens.device)")
    # the notebook stores this line (nbval): change it together with solutions/09
    return "tied output layer, learned positions, final norm, logits (B, L, V), with and without a mask"


def _too_long(model: nn.Module, V: int, B: int, max_len: int) -> None:
    """``L = max_len + 1`` must be a ``ValueError`` (the notebook asks for it): the model has no
    position beyond ``max_len``, and generation relies on the error to crop its context."""
    tokens, case = torch.randint(0, V, (B, max_len + 1)), f"tokens ({B}, {max_len + 1}), max_len={max_len}"
    exc = None
    try:
        with torch.no_grad():
            call_student(model, tokens, context=f"running forward ({case})")
    except StudentError as err:
        if isinstance(err.exc, ValueError):
            return
        exc = err.exc
    GPT_TABLE.detect("too long", SimpleNamespace(exc=exc), case=case,
                     raised="" if exc is None else raised(exc, inline=True))


def _gpt_pair(cls: Any, V: int, D: int, H: int, N: int, d_ff: int, p: float, max_len: int) -> tuple[nn.Module, GPT]:
    """The student's GPT built with dropout ``p`` (eval mode, random parameters) and the reference
    holding the same parameters."""
    model = _build_gpt(cls, V, D, H, N, d_ff, p, max_len)
    randomise_parameters(model)
    ref = GPT(V, D, H, N, d_ff, p, max_len).eval()
    copy_parameters(match_parameters(model, ref)[0])
    return model, ref


def _gpt_dropout(cls: Any, V: int, D: int, H: int, N: int, d_ff: int, max_len: int, B: int, L: int) -> None:
    """Dropout with p = 1 (see :mod:`._blocks`). With the blocks in eval mode only the embedding
    dropout acts: it zeroes ``token_embedding(tokens) + position_embedding(positions)`` as a whole.
    Then 0 < p < 1 (the blocks, final norm and head stubbed out): that sum dropped once, with p.
    Last, the first block on its own must drop like the reference's (dropout passed on)."""
    tokens, positions = torch.randint(0, V, (B, L)), torch.arange(L)  # (B, L), (L,)
    run = lambda m: call_student(m, tokens, context="running forward (dropout)")  # noqa: E731
    model, ref = _gpt_pair(cls, V, D, H, N, d_ff, P_PROBE, max_len)

    def quiet_blocks(x: Tensor) -> Tensor:
        ref.blocks.eval()
        for block in ref.blocks:
            x = block(x)
        return ref.lm_head(ref.norm(x))  # (B, L, V)

    emb, pos = ref.token_embedding(tokens), ref.position_embedding(positions)  # (B, L, D), (L, D)
    c = SimpleNamespace(quiet=quiet_blocks, emb=emb, pos=pos)
    check_dropout_modes(model, ref, run, "GPT", lambda: GPT_TABLE.candidates(c, "dropout"), quiet=("blocks",),
                        atol=1e-5)
    # 0 < p < 1 (p = 1 cannot tell one dropout from two); Spy(False) is an identity that takes the mask too
    rated, rated_ref = _gpt_pair(cls, V, D, H, N, d_ff, P_RATE, max_len)
    with torch.no_grad():
        kept = rated_ref.token_embedding(tokens) + rated_ref.position_embedding(positions)  # (B, L, D)
    stubs = {"blocks": nn.ModuleList(Spy(False) for _ in range(N)), "norm": nn.Identity(), "lm_head": nn.Identity()}
    stubs = {n: s for n, s in stubs.items() if isinstance(getattr(rated, n, None), nn.Module)}  # no lm_head: F.linear
    check_dropout_rate(rated, run, stubs, kept, "GPT", "the embeddings' sum")
    blocks = getattr(model, "blocks", None)
    if not isinstance(blocks, nn.ModuleList) or len(blocks) == 0 or not isinstance(blocks[0], nn.Module):
        return
    x = torch.randn(B, L, D)
    try:
        blocks[0].train()
        ref.blocks[0].train()
        with torch.no_grad():
            got = call_student(blocks[0], x, context="running your GPT's blocks[0] (dropout)")
            expected, without = ref.blocks[0](x), ref.blocks[0].eval()(x)
    finally:
        model.eval()
        ref.eval()
    GPT_TABLE.detect("blocks dropout", SimpleNamespace(got=got, expected=expected, without=without))


# ---------------------------------------------------------------- next_token_probs
def _probs_variant(logits: Tensor, temperature: float, top_k: int | None, top_p: float | None, *,
                   temp: str = "ok", k_shift: int = 0, k_largest: bool = True, renorm: bool = True,
                   zero_logit: bool = False, p_mode: str = "ok", p_order: str = "after k", dim: int = -1) -> Tensor:
    """The reference's distribution computed with one mistake (``dim``: the last softmax's axis)."""
    top_p = None if p_mode == "ignored" else top_p
    if temp in ("after softmax", "softmax twice"):
        probs = logits.softmax(-1) / temperature
        return probs if temp == "after softmax" else probs.softmax(-1)
    scaled = logits / {"ok": temperature, "ignored": 1.0, "multiplied": 1 / temperature, "twice": temperature ** 2}[temp]  # noqa: E501
    keep = torch.ones_like(scaled, dtype=torch.bool)
    if top_k is not None and (top_k < logits.size(-1) or k_shift):
        k = min(top_k + k_shift, scaled.size(-1))
        kth = scaled.topk(max(k, 1), dim=-1, largest=k_largest).values[..., -1:]  # (..., 1)
        keep &= (scaled >= kth if k_largest else scaled <= kth) & (k >= 1)
    if top_p is not None and top_p < 1:
        allowed = torch.ones_like(keep) if p_order == "before k" else keep
        probs = (logits if p_mode == "before temperature" else scaled).masked_fill(~allowed, -math.inf).softmax(-1)
        if p_mode == "unsorted":
            keep &= probs.cumsum(-1) - probs < top_p
        else:
            sp, order = probs.sort(dim=-1, descending=True)
            cum = sp.cumsum(-1)
            keep_sorted = (cum < top_p) if p_mode.startswith("strict") else (cum - sp < top_p)
            keep_sorted[..., 0] |= p_mode == "strict, top kept"  # the nucleus never empty: still one short
            if p_mode == "one long":  # the token after the crossing one kept too
                keep_sorted[..., 1:] |= keep_sorted[..., :-1].clone()
            keep &= {"gather": lambda: keep_sorted.gather(-1, order), "sorted order": lambda: keep_sorted}.get(
                p_mode, lambda: keep_sorted.scatter(-1, order, keep_sorted))()
    if zero_logit:
        return scaled.masked_fill(~keep, 0.0).softmax(-1)
    return scaled.softmax(-1) * keep if not renorm else scaled.masked_fill(~keep, -math.inf).softmax(dim)


def _probs_run(**settings: Any) -> Callable[[Any], list]:
    """One candidate: the reference distribution of case ``c`` computed with these settings
    (:func:`_probs_variant`)."""
    return lambda c: [({}, lambda: _probs_variant(c.logits, c.T, c.k, c.p, **settings))]


def _when(test: Callable[[Any], bool], build: Callable[[Any], list]) -> Callable[[Any], list]:
    """``build``'s candidates on the cases where ``test`` holds (a mistake that cannot show elsewhere)."""
    return lambda c: build(c) if test(c) else []


def _tempered(c: Any) -> bool:
    return c.T != 1


def _top_k(c: Any) -> bool:
    return c.k is not None


def _top_p(c: Any) -> bool:
    return c.p is not None


def _k_short(c: Any) -> list:
    return [(dict(n=c.k - 1, s="s" if c.k - 1 != 1 else ""), _probs_run(k_shift=-1)(c)[0][1])]


def _crash_facts(err: StudentError, logits: Tensor) -> SimpleNamespace:
    """An IndexError or a shape RuntimeError on logits other than one row of (B, V): code that
    indexes axis 1 (nanoGPT's ``v[:, [-1]]``, Hugging Face's ``scatter(1, ...)``) or keeps the
    k-th value as ``(B,)`` (``top_logits[:, -1]``, right for one row only)."""
    exc, line = err.exc, (student_line(err.exc) or "").replace(" ", "")
    shape_error = isinstance(exc, IndexError) or (isinstance(exc, RuntimeError) and any(
        w in str(exc) for w in ("size of tensor", "out of bounds", "out of range", "shape", "dimension")))
    sizes = re.search(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\)", str(exc))
    # (B, V) against (B,): one value per row lined up with the vocabulary axis
    per_row = logits.dim() == 2 and sizes is not None and {int(sizes[1]), int(sizes[2])} == set(logits.shape)
    fixes = ["`v[..., [-1]]` or `v[..., -1:]` for nanoGPT's `v[:, [-1]]`" if re.search(r"\[:,\[-1\]\]", line) else
             "", "`scatter(-1, ...)` for `scatter(1, ...)`" if re.search(r"(scatter|gather)_?\(1,|dim=1", line) else ""]
    fixes = [f for f in fixes if f]
    return SimpleNamespace(crash=shape_error and not (logits.dim() == 2 and logits.size(0) == 1), line=line,
                           per_row=per_row, fixes=f" ({'; '.join(fixes)})" if fixes else "")


def _empty_nucleus(c: Any) -> bool:
    """NaN exactly in the rows where the most likely token alone reaches top_p."""
    if c.p is None or not (isinstance(c.got, Tensor) and c.got.shape == c.expected.shape and bool(isnan(c.got).any())):
        return False
    nan_rows = isnan(c.got).any(dim=-1)  # (...,)
    empty = next_token_probs(c.logits, c.T, c.k).amax(dim=-1) >= c.p  # rows whose top token alone reaches p
    return bool(nan_rows.any()) and equal(nan_rows, empty)


def _softmax_axis(c: Any) -> dict[str, Any] | None:
    """The last softmax over another axis than the vocabulary. Removed logits (-inf) give NaN
    where a whole line of that axis was removed, so NaN counts as equal to NaN here."""
    got, logits = c.got, c.logits
    if (not isinstance(got, Tensor) or got.shape != logits.shape or not got.is_floating_point()
            or got.device.type != "cpu"):
        return None
    for dim in range(logits.dim() - 1):
        wrong = _probs_variant(logits, c.T, c.k, c.p, dim=dim).double()  # (..., V)
        if bool(allclose(got.detach().double(), wrong, atol=1e-6, rtol=1e-4, equal_nan=True)):
            nan = (" The NaN come from it: a token removed (-inf) in every row along that axis leaves softmax "
                   "nothing but -inf." if bool(isnan(wrong).any()) else "")
            return dict(dim=dim, shape=describe_shape(logits), nan=nan)
    return None


_TOP_P_CROSSING = ("the nucleus is the smallest set of most likely tokens whose total is >= p, so that token is kept "
                   "(remove a token only when the tokens before it already add up to p).")

NTP = Catalogue("next_token_probs", "09", [
    Entry("not a function", None, Probe("require_function")),
    # the call raised a shape error on logits other than one row (B, V) (stage "crash")
    Entry("k-th value without its axis",
          "the k-th largest logit taken as (B,) (top_logits[:, -1]): right for one row only",
          Output(lambda c: c.crash and bool(re.search(r"\[:,-1\]", c.line) or c.per_row), "crash"),
          "your next_token_probs fails ({case}): {shown}. `top_logits[:, -1]` takes the k-th largest logit as shape "
          "(B,), without its axis: against logits (B, V) it lines up with the vocabulary axis, so it is right for one "
          "row only (B = 1) and an error or wrong numbers otherwise. Keep the axis and index the last one: `kth = "
          "top_logits[..., -1:]`, shape (..., 1), which works for (V,), (B, V) and (B, L, V)."),
    Entry("2-D logits only",
          "next_token_probs indexes axis 1 (scatter(1, ...), v[:, [-1]]): fails on (V,) or (B, L, V)",
          Output(lambda c: c.crash and dict(fixes=c.fixes), "crash"),
          "your next_token_probs fails ({case}): {shown}. It works on 2-D logits (B, V) only: it indexes axis 1, which "
          "is the vocabulary only there. The notebook calls it on one row (V,) and generation may pass (B, L, V): "
          "index the last axis, `dim=-1` and `[..., -1:]`{fixes}."),
    Entry("input modified in place", None, Probe("check_unchanged")),
    # item 6 of issue 24: a result on another device than the logits (a meta result, .cpu(), .to("meta"))
    Entry("wrong device", None,
          Output(lambda c: isinstance(c.got, Tensor) and c.got.device != c.logits.device
                 and dict(device=c.got.device, where=c.logits.device), "device"),
          "your next_token_probs returned probabilities on the {device} device for logits on {where} ({case}): the "
          "result must stay where the logits are (on a GPU in Colab, generation then samples from it and appends to "
          "the tokens there). Leave out the move (.to(...), .cpu()), and create any tensor you need on the logits' "
          "device (device=logits.device, or torch.full_like, torch.zeros_like)."),
    # a wrong result (stage "nan": NaN rows; "axis": the softmax's axis; "values": the reference run with
    # each mistake, in this order; "show": the mistakes _good_logits makes visible)
    Entry("top-p drops the crossing token", "top-p drops the token that crosses p", Output(_empty_nucleus, "nan"),
          "probabilities ({case}) are NaN exactly in the rows where the most likely token alone has probability >= "
          "top_p: your nucleus is empty there, because it stops before the token that crosses p. That token belongs "
          "to the nucleus (remove a token only when the tokens before it already add up to p), so at least one "
          "token is always kept."),
    Entry("softmax not over the vocabulary",
          "the next-token softmax runs over another axis than the vocabulary (dim=-1)", Output(_softmax_axis, "axis"),
          "probabilities ({case}): the softmax runs over dim={dim} of the logits {shape}, not over the vocabulary, "
          "so the probabilities do not sum to 1 along the last axis. Each distribution over the next token lies "
          "along the last axis whatever the leading dims: softmax(..., dim=-1) (dim=1 is the vocabulary only for "
          "2-D logits).{nan}"),
    Entry("temperature after softmax", "temperature applied after the softmax",
          Reference(_when(_tempered, _probs_run(temp="after softmax")), ("values", "show")),
          "the temperature divides the probabilities after the softmax; it divides the logits before it: "
          "`softmax(logits / temperature)`."),
    Entry("temperature after softmax", None,
          Reference(_when(_tempered, _probs_run(temp="softmax twice")), ("values", "show")),
          "the temperature is applied to the probabilities and then a second softmax; divide the logits by the "
          "temperature, then apply one softmax."),
    Entry("temperature ignored", "temperature has no effect",
          Reference(_when(_tempered, _probs_run(temp="ignored")), ("values", "show")),
          "the temperature has no effect: divide the logits by it before the softmax."),
    Entry("temperature multiplied", "logits multiplied by the temperature instead of divided",
          Reference(_when(_tempered, _probs_run(temp="multiplied")), ("values", "show")),
          "the logits are multiplied by the temperature; divide them: a temperature below 1 must sharpen the "
          "distribution, above 1 flatten it."),
    Entry("temperature applied twice", "the logits divided by the temperature twice (logits / T / T, or by T ** 2)",
          Reference(_when(_tempered, _probs_run(temp="twice")), ("values", "show")),
          "the logits are divided by the temperature twice (`logits / T / T`, or by `T ** 2`): divide them once, "
          "`softmax(logits / temperature)`, and only there (not again in `generate` before calling "
          "next_token_probs)."),
    Entry("top-k keeps k+1", "top-k keeps one token too many",
          Reference(_when(_top_k, lambda c: [(dict(n=c.k + 1), _probs_run(k_shift=1)(c)[0][1])]), ("values", "show")),
          "top_k={k} kept {n} tokens: keep exactly the k largest logits (logits.topk(k).values[..., -1:] is the k-th "
          "largest; remove what is below it)."),
    Entry("top-k keeps k-1", "top-k keeps one token too few", Reference(_when(_top_k, _k_short), ("values", "show")),
          "top_k={k} kept only {n} token{s}: the k-th largest logit must be kept too (remove logits < the k-th "
          "largest, not <=)."),
    Entry("top-k keeps the smallest", "top-k keeps the smallest logits",
          Reference(_when(_top_k, _probs_run(k_largest=False)), ("values", "show")),
          "top-k keeps the k *smallest* logits; keep the k largest."),
    Entry("not renormalised", "the kept probabilities do not sum to 1",
          Reference(_when(lambda c: _top_k(c) or _top_p(c), _probs_run(renorm=False)), ("values", "show")),
          "the removed tokens get probability 0, but the kept ones are not renormalised, so the row sums to less "
          "than 1: set the removed logits to -inf (or the most negative float) before the softmax."),
    Entry("removed set to zero logit", "removed tokens set to logit 0 instead of -inf",
          Reference(_when(lambda c: _top_k(c) or _top_p(c), _probs_run(zero_logit=True)), ("values", "show")),
          "the removed tokens' logits are set to 0, which leaves them a probability exp(0) / sum > 0; set them to "
          "-inf (or the most negative float) so the softmax gives them exactly 0."),
    Entry("top_p ignored", "top_p has no effect", Reference(_when(_top_p, _probs_run(p_mode="ignored")),
                                                          ("values", "show")),
          "top_p={p} has no effect: keep only the smallest set of most likely tokens whose probabilities add up to "
          "at least top_p (sort, cumsum, remove a token once the tokens before it reach top_p), then renormalise."),
    Entry("top-p drops the crossing token", None,
          Reference(_when(_top_p, _probs_run(p_mode="strict")), ("values", "show")),
          "top_p={p} stops before the token whose cumulative probability crosses p; " + _TOP_P_CROSSING),
    Entry("top-p drops the crossing token", None,
          Reference(_when(_top_p, _probs_run(p_mode="strict, top kept")), ("values", "show")),
          "top_p={p} stops before the token whose cumulative probability crosses p (except where the most likely "
          "token alone reaches p); " + _TOP_P_CROSSING),
    Entry("top-p unsorted", "top-p without sorting the probabilities",
          Reference(_when(_top_p, _probs_run(p_mode="unsorted")), ("values", "show")),
          "top-p adds up the probabilities in vocabulary order; sort them from the most to the least likely first "
          "(`sort(descending=True)`), then map the decision back to the vocabulary order."),
    Entry("top-p not mapped back", "top-p's sorted decision applied in vocabulary order, or mapped back with gather",
          Reference(_when(_top_p, _probs_run(p_mode="sorted order")), ("values", "show")),
          "top-p decides in sorted order, and that decision is applied to the logits as if it were in vocabulary "
          "order: the i-th most likely token's verdict lands on token i. Map it back with the sort's indices: "
          "`remove = remove_sorted.scatter(-1, order, remove_sorted)`."),
    Entry("top-p not mapped back", None, Reference(_when(_top_p, _probs_run(p_mode="gather")), ("values", "show")),
          "top-p maps its sorted decision back with `gather(-1, order)`, which applies the sort's permutation a "
          "second time instead of undoing it: `remove_sorted.gather(-1, order)[v]` is the verdict of sorted position "
          "`order[v]`, not of token v. Undo it with scatter: `remove_sorted.scatter(-1, order, remove_sorted)` (or "
          "`torch.empty_like(remove_sorted).scatter_(-1, order, remove_sorted)`)."),
    Entry("top-p keeps one token too many", "top-p keeps the token after the one that crosses p",
          Reference(_when(_top_p, _probs_run(p_mode="one long")), ("values", "show")),
          "top_p={p} keeps the token after the one whose cumulative probability crosses p: the nucleus is the "
          "smallest set of most likely tokens whose total is >= p, so remove a token as soon as the tokens before it "
          "add up to p (`cumsum - probs >= top_p`; or, Hugging Face's way, `cumsum > top_p` shifted right by one, "
          "not by two)."),
    Entry("top-p before temperature", "top-p computed before the temperature",
          Reference(_when(lambda c: _top_p(c) and _tempered(c), _probs_run(p_mode="before temperature")),
                    ("values", "show")),
          "the nucleus is chosen from the probabilities *before* the temperature; apply the temperature first, then "
          "top-k and top-p on the tempered distribution."),
    Entry("top-p before top-k", "top-p applied before top-k",
          Reference(_when(lambda c: _top_p(c) and _top_k(c), _probs_run(p_order="before k")), ("values", "show")),
          "top-p is computed on the full distribution; apply it after top-k, to the distribution of the k tokens "
          "that are left (renormalised)."),
    Entry("log-probabilities", "log-probabilities returned instead of probabilities",
          Reference(lambda c: [({}, lambda: c.expected.clamp_min(1e-45).log())], "values"),
          "the result looks like log-probabilities; return the probabilities themselves (rows that sum to 1)."),
    # extreme settings (stage "robust"), after the values
    Entry("top_k not clamped", "top_k above the vocabulary size raises instead of keeping every token",
          Raises(r"out of range", (RuntimeError,), stage="top_k"),
          "your next_token_probs raised {type} ({case}): {first}. topk cannot take more than V values; a top_k above "
          "the vocabulary size keeps every token: k = min(top_k, logits.size(-1))."),
    Entry("not numerically stable", "a softmax or temperature formula that overflows or turns NaN on extreme logits",
          Output(lambda c: isinstance(c.got, Tensor) and c.got.shape == c.expected.shape and bool(isnan(c.got).any()),
                 "robust"),
          "your probabilities are NaN ({case}): exp of a large scaled logit overflows, or probabilities raised to 1 / "
          "temperature underflow to 0 / 0. Divide the logits by the temperature and use softmax, which subtracts the "
          "largest logit first."),
    Entry("wrong device", None, Probe("check_input_device")),
])


def _good_logits(shape: tuple[int, ...], T: float, k: int | None, p: float | None) -> Tensor:
    """Random logits ``(..., V)`` without near-ties (a tie would make top-k keep more than k), no
    cumulative probability near ``p``, on which the catalogued mistakes show (:func:`_all_mistakes_show`;
    a few tries suffice)."""
    for _ in range(500):
        logits = 2.5 * torch.randn(*shape)  # (..., V)
        if bool((logits.sort(dim=-1).values.diff(dim=-1) < 1e-3).any()):
            continue
        if p is not None:
            cum = next_token_probs(logits, T, k).sort(dim=-1, descending=True).values.cumsum(-1)  # (..., V)
            if bool(((cum - p).abs() < 0.02).any()):
                continue
        if _all_mistakes_show(logits, T, k, p):
            break
    return logits


def _all_mistakes_show(logits: Tensor, T: float, k: int | None, p: float | None) -> bool:
    """The mistakes this setting is there to catch give results that differ clearly from the
    right one, and every mistake that shows differs from the others (so the diagnosis names the
    right one). With both filters, only "top-p before top-k" is required: with a small nucleus,
    top-k with k - 1 or k + 1 gives the right answer, and the top-k settings catch those."""
    expected = next_token_probs(logits, T, k, p).double()  # (..., V)
    case = SimpleNamespace(logits=logits, T=T, k=k, p=p)
    shown = [(name, value) for name, _, candidate in NTP.candidates(case, "show", k=k, p=p)
             if not bool(isnan(value := candidate()).any())]
    if not shown:
        return True
    # every comparison at once (this runs for hundreds of draws per check): matches(a, b) for a, b in
    # (M, M) and against the expected, |a - b| <= atol + rtol * |b| elementwise, as allclose; every
    # candidate has the logits' shape (_probs_variant works elementwise and along the last axis)
    values = torch.stack([v.double() for _, v in shown])  # (M, ..., V)
    close_expected = ((values - expected).abs() <= 1e-3 + 1e-2 * expected.abs()).flatten(1).all(-1)  # (M,)
    close = ((values[:, None] - values[None]).abs() <= 1e-3 + 1e-2 * values[None].abs()).flatten(2).all(-1)  # (M, M)
    seen: list[int] = []
    for i, (name, _) in enumerate(shown):
        if bool(close_expected[i]):
            if k is None or p is None or name == "top-p before top-k":
                return False
            continue
        if any(shown[j][0] != name and bool(close[i, j]) for j in seen):
            return False
        seen.append(i)
    return True


@checker("next_token_probs")
def check_next_token_probs(fn: Callable[..., Any]) -> str:
    require_function(fn, "next_token_probs")
    V = randint(9, 15)
    # (T, top_k, top_p, rank): 2-D logits (B, V) first; then (V,), as the notebook calls it, and (B, L, V)
    settings = [(1.0, None, None, 2), (0.6, None, None, 2), (1.7, None, None, 2), (1.0, randint(2, 4), None, 2),
                (0.8, randint(3, 5), None, 3), (1.0, None, 0.7, 2), (1.4, None, 0.8, 2), (0.9, randint(4, 6), 0.75, 2),
                (1.0, randint(2, 4), None, 1), (1.2, None, 0.75, 1), (1.0, None, 0.8, 3), (0.9, randint(3, 5), 0.8, 1)]
    for T, k, p, rank in settings:
        shape = {1: (V,), 2: (randint(2, 4), V), 3: (2, randint(2, 3), V)}[rank]
        logits = _good_logits(shape, T, k, p)
        original = logits.clone()
        kwargs = {a: b for a, b in (("temperature", T), ("top_k", k), ("top_p", p))
                  if b is not None and (a, b) != ("temperature", 1.0)}
        case = f"logits {describe_shape(logits)}, " + (", ".join(f"{a}={b}" for a, b in kwargs.items()) or "defaults")
        try:
            got = call_student(fn, logits, context=f"calling next_token_probs ({case})", **kwargs)
        except StudentError as err:
            NTP.detect("crash", _crash_facts(err, original), case=case, shown=raised(err.exc, inline=True))
            raise
        check_unchanged(["logits"], [logits], [original], case)
        expected = next_token_probs(original, T, k, p)
        c = SimpleNamespace(logits=original, T=T, k=k, p=p, got=got, expected=expected)
        NTP.detect("device", c, case=case)
        NTP.detect("nan", c, case=case)
        if not matches(got, expected, atol=1e-6, rtol=1e-4):
            NTP.detect("axis", c, case=case)
        expect_close("probabilities", got, expected, NTP.candidates(c, "values", k=k, p=p), atol=1e-6, rtol=1e-4,
                     case=case)
    _probs_robustness(fn, V)
    return "temperature, top-k, top-p and both together, several temperatures, any leading dims"


def _probs_robustness(fn: Callable[..., Any], V: int) -> None:
    """Large logits at a low temperature (exp overflows unless the max is subtracted: softmax does),
    flat logits at a tiny temperature (p ** (1 / T) underflows to 0 / 0), and top_k > V (keep all);
    last, the result on the logits' device (the 'meta' device standing in for a GPU)."""
    big = torch.zeros(2, V)
    big[:, 0], big[:, 1] = 100.0, 99.0  # (2, V)
    for logits, kwargs, what in (
        (big, dict(temperature=0.5), "logits (100, 99, 0, ...) at temperature=0.5"),
        (torch.zeros(2, V), dict(temperature=0.01), "flat logits at temperature=0.01"),
        (torch.randn(2, V), dict(top_k=V + 3), f"top_k={V + 3} > V={V}"),
    ):
        case = f"logits ({2}, {V}), {what}"
        expected = next_token_probs(logits, **kwargs)
        try:
            got = call_student(fn, logits.clone(), context=f"calling next_token_probs ({case})", **kwargs)
        except StudentError as err:
            if "top_k" in kwargs:
                NTP.detect_raised(err.exc, "top_k", case=case, type=type(err.exc).__name__,
                                  first=(str(err.exc).strip().splitlines() or [""])[0])
            raise
        NTP.detect("robust", SimpleNamespace(got=got, expected=expected), case=case)
        expect_close("probabilities", got, expected, [], atol=1e-6, rtol=1e-4, case=case)
    # all right so far: the right result's device (item 6: a result moved with .cpu(), a mask built without device=)
    logits, kwargs = torch.randn(2, V), dict(temperature=0.8, top_k=3, top_p=0.9)
    check_input_device(lambda: fn(logits.to("meta"), **kwargs), lambda: fn(logits.clone(), **kwargs),
                       "your next_token_probs", f"logits ({2}, {V}), temperature=0.8, top_k=3, top_p=0.9",
                       "create any tensor you need on the logits' device (device=logits.device, or torch.full_like, "
                       "torch.zeros_like), and return the probabilities where the logits are")


# ---------------------------------------------------------------- generate
_GENERATE_T = 0.5  # the temperature of the distribution test


class _ProbeError(RuntimeError):
    """Raised by the checker inside the model, to see whether generate restores the mode."""


class _Watch:
    """A forward pre-hook recording, at every model call: train mode, grad mode, input length;
    with ``fail_at``, the model raises at that call."""

    def __init__(self, model: nn.Module, fail_at: int | None = None):
        self.calls: list[tuple[bool, bool, int]] = []
        self.fail_at = fail_at
        self.handle = model.register_forward_pre_hook(self.hook)

    def hook(self, module: nn.Module, args: tuple[Any, ...]) -> None:
        tokens = args[0] if args else None
        length = tokens.size(1) if isinstance(tokens, Tensor) and tokens.dim() == 2 else -1
        self.calls.append((module.training, torch.is_grad_enabled(), length))
        if len(self.calls) == self.fail_at:
            raise _ProbeError(f"the checker's model failed on purpose at step {self.fail_at}")


def _greedy(model: GPT, tokens: Tensor, steps: int, *, crop: str = "end", position: int = -1) -> Tensor:
    """What generate gives with ``top_k=1`` (the argmax at every step), optionally with a crop or
    position mistake."""
    out = tokens
    with torch.no_grad():
        for _ in range(steps):
            context = {"end": out[:, -model.max_len:], "start": out[:, : model.max_len],
                       "one short": out[:, -(model.max_len - 1):]}[crop]
            out = torch.cat([out, model(context)[:, position].argmax(-1, keepdim=True)], dim=1)  # (B, T + 1)
    return out


def _generate_call(fn: Callable[..., Any], model: GPT, tokens: Tensor, steps: int, case: str,
                   **kwargs: Any) -> tuple[Any, _Watch]:
    watch = _Watch(model)
    try:
        got = call_student(fn, model, tokens, steps, context=f"calling generate ({case})", **kwargs)
    except StudentError as err:
        GENERATE.detect_raised(err.exc, "call", max_len=model.max_len, case=case)
        raise
    finally:
        watch.handle.remove()
    return got, watch


def _check_watch(watch: _Watch, model: GPT, was_training: bool, case: str) -> None:
    GENERATE.detect("training", watch, case=case)
    require_no_grad([grad for _, grad, _ in watch.calls], "generation", "generate", case)
    GENERATE.detect("mode", SimpleNamespace(now=model.training, before=was_training), case=case,
                    now="train" if model.training else "eval", before="train" if was_training else "eval")


def _restored_after_error(fn: Callable[..., Any], model: GPT, tokens: Tensor, steps: int) -> None:
    """The model comes in train mode and raises at its second call: the caller's mode must still
    come back (try/finally), as with greedy_decode in notebook 06."""
    model.train()
    watch = _Watch(model, fail_at=2)
    try:
        call_student(fn, model, tokens.clone(), steps, context="calling generate (the model raises at step 2)")
    except StudentError:
        pass
    finally:
        watch.handle.remove()
        left = {m.training for m in model.modules()}
        model.eval()
    GENERATE.detect("after error", SimpleNamespace(calls=len(watch.calls), left=left))


def _greedy_run(**settings: Any) -> Reference:
    """One candidate: the greedy tokens of case ``c`` (``model``, ``tokens``, ``steps``) with a crop or position
    mistake."""
    return Reference(lambda c: [({}, lambda: _greedy(c.model, c.tokens, c.steps, **settings))], "values")


def _gap(freq: Tensor, dist: Tensor) -> float:
    """The total variation between the draws' frequencies and a distribution."""
    return 0.5 * float((freq - dist).abs().sum())


GENERATE = Catalogue("generate", "09", [
    Entry("not a function", None, Probe("require_function")),
    # 1. top_k=1: every draw is the argmax, whatever the sampling method, in train and eval mode
    Entry("context not cropped", "the context is not cropped to max_len", Raises("max_len", (ValueError,), "call"),
          "generate fed the model more than its max_len = {max_len} tokens ({case}): the model has no position "
          "embedding beyond that. Feed it only the last max_len tokens: model(out[:, -model.max_len:])."),
    Entry("input modified in place", None, Probe("check_unchanged")),
    Entry("sampling in training mode", "generation runs with the model in training mode",
          Output(lambda watch: any(training for training, _, _ in watch.calls), "training"),
          "the model ran in training mode while sampling ({case}), so dropout changed its predictions: call "
          "`model.eval()` before the loop (and `model.train(was_training)` after it)."),
    Entry("gradients tracked", None, Probe("require_no_grad")),
    Entry("mode not restored", "the caller's train/eval mode is not restored",
          Output(lambda c: c.now != c.before, "mode"),
          "generate left the model in {now} mode, although it was in {before} mode before ({case}): remember "
          "model.training at the start and restore it at the end (model.train(was_training))."),
    Entry("prompt dropped", "the prompt is not part of the output",
          Output(lambda c: isinstance(c.got, Tensor) and c.got.shape == (c.B, c.steps)
                 and equal(c.got, c.expected[:, c.L0:]), "prompt"),
          "generate returned only the new tokens; return the prompt followed by them, (B, L0 + max_new_tokens) = "
          "{shape}."),
    Entry("top_k not passed on", "generate does not pass top_k on to next_token_probs (left out or in another "
          "position)",
          Output(lambda c: isinstance(c.again, Tensor) and c.again.shape == c.got.shape
                 and not equal(c.again.long(), c.got.long()), "top_k"),
          "with top_k=1 ({case}) every draw is the most likely token, so two calls must give the same tokens; yours "
          "differ: top_k does not reach next_token_probs (left out, or its arguments in another order). Pass them on "
          "by name: next_token_probs(logits, temperature=temperature, top_k=top_k, top_p=top_p)."),
    # the wrong tokens are the greedy run with one of these mistakes (in this order)
    Entry("max_len off by one", "max_len one too small", _greedy_run(crop="one short"),
          "when the sequence is longer than max_len, generate feeds the model only its last max_len - 1 tokens; the "
          "model reads max_len: `out[:, -model.max_len:]`."),
    Entry("context cropped from the start", "the context keeps the first max_len tokens, not the last",
          _greedy_run(crop="start"),
          "when the sequence is longer than max_len, generate feeds the model its *first* max_len tokens; feed it the "
          "last ones, `out[:, -model.max_len:]`, which end with the newest token."),
    Entry("reads the first position", "the next token is read from the first position's logits, not the last",
          _greedy_run(position=0),
          "the next token is drawn from the logits of the first position; use the last one, `logits[:, -1]`, the "
          "prediction that follows the newest token."),
    Entry("context not cropped", None,
          Output(lambda c: bool(c.calls) and max(length for _, _, length in c.calls) > c.max_len, "crop"),
          "the model was fed more than max_len tokens."),
    # 1b. top_p tiny: the nucleus is the most likely token alone, so the draws are the argmax again
    Entry("top_p not passed on", "generate does not pass top_p on to next_token_probs",
          Output(lambda c: isinstance(c.got, Tensor) and c.got.shape == c.expected.shape
                 and not equal(c.got.long(), c.expected), "top_p"),
          "with top_p=1e-06 ({case}) only the most likely token is left to draw, so generate must give the greedy "
          "tokens; yours differ: pass top_p on, next_token_probs(logits, temperature, top_k, top_p)."),
    # 2. the distribution of the first new token: 4,000 draws under fixed seeds (stage "draws")
    Entry("wrong shape", None,
          Output(lambda c: not (isinstance(c.got, Tensor) and c.got.shape == (c.n, c.L0 + 1))
                 and dict(shape=describe_shape(c.got)), "draws"),
          "generate returned {shape} for a prompt ({n}, {L0}) and one new token; expected ({n}, {L1})."),
    Entry("wrong shape", None,
          Output(lambda c: not bool(((c.drawn >= 0) & (c.drawn < c.V)).all()), "vocabulary"),
          "generate produced token ids outside the vocabulary."),
    Entry("greedy instead of sampling", "argmax instead of sampling",
          Output(lambda c: bool((c.drawn == c.drawn[0]).all()), "vocabulary"),
          "all draws gave the same token: generate takes the argmax instead of sampling. Draw from the distribution: "
          "torch.multinomial(probs, 1, generator=generator)."),
    # the draws nearer a catalogued mistake's distribution than the right one: the nearest (stage "distribution")
    Entry("temperature ignored", "temperature has no effect",
          Reference(lambda c: [({}, c.logits.softmax(-1))], "distribution"),
          "with temperature={T} the draws follow the distribution at temperature 1: pass the temperature on to "
          "next_token_probs."),
    Entry("temperature applied twice", None,
          Reference(lambda c: [({}, next_token_probs(c.logits, c.T * c.T))], "distribution"),
          "with temperature={T} the draws follow the distribution at temperature {T2} = {T}²: the temperature is "
          "applied twice (the logits divided by it before next_token_probs, which divides again). Divide once: pass "
          "the raw logits and the temperature to next_token_probs."),
    Entry("softmax before next_token_probs",
          "generate passes probabilities (a softmax) to next_token_probs, which expects logits",
          Reference(lambda c: [({}, next_token_probs(c.logits.softmax(-1), c.T))], "distribution"),
          "with temperature={T} the draws follow next_token_probs(softmax(logits), temperature={T}): generate hands "
          "next_token_probs probabilities where it expects logits, and next_token_probs applies its own softmax on "
          "top, which flattens the distribution towards uniform. Pass the model's raw last-position logits: "
          "next_token_probs(model(context)[:, -1], temperature, top_k, top_p)."),
    Entry("values differ", None, Output(lambda c: c.tv > 0.05 and dict(tv=f"{c.tv:.2f}"), "frequencies"),
          "the frequencies of {n} draws differ from next_token_probs(logits, temperature={T}) by a total variation of "
          "{tv} (a correct sampler gives less than 0.05): sample with torch.multinomial(next_token_probs(...), 1, "
          "generator=generator)."),
    Entry("generator ignored", "the generator argument is not used",
          Output(lambda c: isinstance(c.first, Tensor) and not equal(c.first, c.got), "generator"),
          "two calls with generators seeded alike gave different tokens: the `generator` argument is not used. Pass "
          "it to the sampling: `torch.multinomial(probs, 1, generator=generator)`."),
    Entry("mode not restored", None, Output(lambda c: c.calls >= 2 and c.left != {True}, "after error"),
          "the tokens are right, but when the model raises an error during generation (the checker made it fail at "
          "step 2, the model in train mode), generate leaves it in eval mode: restore the mode in a `finally:` block "
          "(try: ... finally: model.train(was_training)), so that a failed generation does not silently switch off "
          "dropout for the rest of training."),
    Entry("wrong device", None, Probe("check_input_device")),
])


def _generate_setup() -> tuple[GPT, Tensor, int, int, Tensor, Tensor]:
    """``(model, tokens (B, L0), steps, max_len, logits (V,), target (V,))``: a model whose next-token
    distribution at ``T`` clearly differs from ``T = 1`` and from greedy, and on whose prompt the
    crop and position mistakes each give other tokens."""
    V, L0, steps = randint(6, 9), randint(3, 4), randint(4, 6)
    max_len = L0 + 2  # so that the prompt plus the new tokens do not fit: the context must be cropped
    while True:
        model = GPT(V, d_model=12, num_heads=2, num_layers=2, d_ff=20, dropout=0.5, max_len=max_len)
        randomise_parameters(model)
        tokens = torch.randint(0, V, (3, L0))  # (B, L0)
        with torch.no_grad():
            logits = model.eval()(tokens[:1])[0, -1]  # (V,)
        target = next_token_probs(logits, _GENERATE_T)  # (V,)
        if 0.5 * float((target - logits.softmax(-1)).abs().sum()) < 0.15 or float(target.max()) > 0.8:
            continue
        outs = [_greedy(model, tokens, steps, **kw)  # (B, L0 + steps) each
                for kw in (dict(), dict(crop="start"), dict(crop="one short"), dict(position=0))]
        if not any(equal(a, b) for i, a in enumerate(outs) for b in outs[i + 1:]):
            # the right tokens, cropping from the start or one short, and reading the first position differ
            return model, tokens, steps, max_len, logits, target


@checker("generate")
def check_generate(fn: Callable[..., Any]) -> str:
    require_function(fn, "generate")
    # shared with the checks that start from the same random state; the student gets copies
    model, tokens, steps, max_len, logits, target = drawn_once(_generate_setup)
    model, tokens, original = module_copy(model), tokens.clone(), tokens.clone()
    V, L0, T, n = model.vocab_size, tokens.size(1), _GENERATE_T, 4000

    # 1. top_k=1: every draw is the argmax, whatever the sampling method
    case = f"prompt {describe_shape(tokens)}, max_new_tokens={steps}, top_k=1, max_len={max_len}"
    for was_training in (True, False):
        model.train(was_training)
        got, watch = _generate_call(fn, model, tokens, steps, case, top_k=1)
        check_unchanged(["tokens"], [tokens], [original], case)
        _check_watch(watch, model, was_training, case)
    model.eval()
    expected = _greedy(model, original, steps)  # (B, L0 + steps)
    GENERATE.detect("prompt", SimpleNamespace(got=got, expected=expected, B=tokens.size(0), steps=steps, L0=L0),
                    shape=describe_shape(expected))
    if isinstance(got, Tensor) and got.shape == expected.shape and not equal(got.long(), expected):
        torch.manual_seed(4321)  # another global random state: with top_k=1 the tokens must not depend on it
        again, _ = _generate_call(fn, model, original.clone(), steps, case, top_k=1)
        model.eval()
        GENERATE.detect("top_k", SimpleNamespace(again=again, got=got), case=case)
    if isinstance(got, Tensor) and got.dtype != expected.dtype and not got.is_floating_point():
        got = got.long()
    mistakes = GENERATE.candidates(SimpleNamespace(model=model, tokens=original, steps=steps), "values")
    expect_close("tokens", got, expected, mistakes, case=case)
    GENERATE.detect("crop", SimpleNamespace(calls=watch.calls, max_len=max_len))

    # 1b. top_p tiny: the nucleus is the most likely token alone, so the draws are the argmax again
    case = f"prompt {describe_shape(tokens)}, max_new_tokens={steps}, top_p=1e-06, max_len={max_len}"
    got, watch = _generate_call(fn, model, original.clone(), steps, case, top_p=1e-6)
    GENERATE.detect("top_p", SimpleNamespace(got=got, expected=expected), case=case)
    # 1c. max_new_tokens=0: the prompt back, and the mode restored on that path too
    model.train()
    case = f"prompt {describe_shape(tokens)}, max_new_tokens=0, model in train mode"
    got, watch = _generate_call(fn, model, original.clone(), 0, case)
    _check_watch(watch, model, True, case)
    model.eval()
    # 2. the distribution of the first new token: 4,000 draws under fixed seeds
    prompt = original[:1].expand(n, L0).contiguous()  # (n, L0): one prompt, n draws
    case = f"{n} draws of one token, temperature={T}"
    draws = []
    for attempt in range(2):
        torch.manual_seed(1234 + attempt)  # the global generator differs between the two calls
        generator = torch.Generator().manual_seed(5678)
        draws.append(_generate_call(fn, model, prompt, 1, case, temperature=T, generator=generator)[0])
    first, got = draws
    GENERATE.detect("draws", SimpleNamespace(got=got, n=n, L0=L0), n=n, L0=L0, L1=L0 + 1)
    drawn = got[:, -1].long()
    GENERATE.detect("vocabulary", SimpleNamespace(drawn=drawn, V=V))
    freq = torch.bincount(drawn, minlength=V).float() / n  # (V,)
    tv = _gap(freq, target)
    if tv > 0.05:
        known = GENERATE.candidates(SimpleNamespace(logits=logits, T=T), "distribution", T=T, T2=f"{T * T:g}")
        gaps = [_gap(freq, dist) for _, _, dist in known]
        best = min(range(len(known)), key=gaps.__getitem__)
        if gaps[best] < tv:  # nearer a catalogued mistake's distribution than the right one: the nearest
            fail(known[best][1], mistake=known[best][0])
    GENERATE.detect("frequencies", SimpleNamespace(tv=tv), n=n, T=T)
    GENERATE.detect("generator", SimpleNamespace(first=first, got=got))
    _restored_after_error(fn, model, original, steps)
    # all right so far: once more, with a tensor built without device= (or moved with .cpu()) watched
    check_input_device(None, lambda: fn(model, original.clone(), steps, top_k=1), "your generate",
                       f"prompt {describe_shape(original)}, max_new_tokens={steps}, top_k=1", "keep the new token on "
                       "the prompt's device: a tensor you create for the draw needs device= (Gumbel noise: "
                       "`torch.rand(probs.shape, generator=generator, device=probs.device)`, the generator on that "
                       "device too); torch.cat([tokens, torch.multinomial(probs, 1, generator=generator)], dim=1) "
                       "stays there; a tensor built from .item() values, or moved with .cpu(), needs "
                       ".to(tokens.device)")
    return "eval mode restored, no gradients, context cropped to max_len, last position, draws follow the distribution"


CATALOGUES = (BLOCK, GPT_TABLE, NTP, GENERATE)
MISTAKES: dict[str, list[str]] = {table.exercise: table.names() for table in CATALOGUES}  # generated


# ---------------------------------------------------------------- hints
register_hints("GPTBlock", [
    "It is an encoder layer in pre-norm with a causal mask: x = x + attention(norm1(x)), then "
    "x = x + feed_forward(norm2(x)).",
    "Build the mask inside forward: causal = causal_mask(x.size(1), device=x.device); when a `mask` is "
    "given, combine them: causal & mask.",
    'The feed-forward is FeedForward(d_model, d_ff, dropout, activation="gelu_tanh"); MultiHeadAttention '
    "returns (output, weights): keep [0].",
])
register_hints("GPT", [
    "Follow the formula above the exercise from left to right: what does each token get added to it "
    "before the blocks, and what comes after the last block? The positions count from 0.",
    "forward: x = token_embedding(tokens) + position_embedding(positions) with positions = "
    "torch.arange(L, device=tokens.device); dropout; every block; the final norm; lm_head.",
    "Tie the output layer by sharing the Parameter itself: self.lm_head = nn.Linear(d_model, vocab_size, "
    "bias=False), then self.lm_head.weight = self.token_embedding.weight (no copy, no clone).",
    "Return the logits (B, L, V), not probabilities; pass `mask` on to every block.",
])
register_hints("next_token_probs", [
    "Divide the logits by the temperature first; everything else works on those scaled logits.",
    "top-k: kth = scaled.topk(min(top_k, V), dim=-1).values[..., -1:] (a top_k above V keeps everything); "
    "remove what is below it with masked_fill(scaled < kth, float('-inf')).",
    "top-p: sort the probabilities in descending order, take cumsum; remove a token when the tokens "
    "before it (cumsum - its own prob) already reach top_p; scatter the decision back with the sort "
    "indices; finally softmax over the scaled logits with the removed ones at -inf.",
])
register_hints("generate", [
    "Remember was_training = model.training, call model.eval(), and loop under torch.no_grad() inside "
    "try: ...; finally: model.train(was_training), so the mode comes back even after an error.",
    "Each step: logits = model(out[:, -model.max_len:])[:, -1]; probs = next_token_probs(logits, "
    "temperature, top_k, top_p).",
    "Draw with torch.multinomial(probs, 1, generator=generator) (B, 1) and append it: "
    "out = torch.cat([out, next_token], dim=1).",
])

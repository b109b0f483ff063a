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
the grad mode and the context length. The mistake names are those of ``_mistakes.MISTAKES``;
tests/test_checks_gpt.py pins each one.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Callable
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
    Mistake,
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


def _activation(ref: GPTBlock, act: Callable[[Tensor], Tensor]) -> dict[str, Any]:
    """The mutation: the feed-forward with ``act`` in place of GPT-2's tanh-GELU."""
    ff = ref.feed_forward
    return {"ff": lambda h: ff.linear2(act(ff.linear1(h)))}


def _block_mistakes(ref: GPTBlock, x: Tensor, mask: Tensor | None) -> list[Mistake]:
    form = "`x = x + sublayer(norm(x))`"
    masked = [
        ("padding mask replaces causal", "when a mask is given, your block uses it instead of the causal mask, so "
         "every position sees the later ones (the future leaks). Combine them: `causal_mask(L) & mask`.", "mask"),
        ("mask ignored", "the `mask` argument has no effect: the block must attend with `causal_mask(L) & mask`, so "
         "that padding is blocked too.", "causal"),
        ("| instead of &", "the causal mask and `mask` are combined with | (or): a key is allowed if it is in the "
         "past OR real, so with a mask every real later token leaks in. It must be both: `causal_mask(L) & mask`.",
         "causal|mask"),
    ]
    table = [(name, text, {"attn": {"self": ("in", "in", "self_attn", given)}})
             for name, text, given in (masked if mask is not None else [])]
    table += [
        ("post-norm", "your block normalises after the residual addition (post-norm, `norm(x + sublayer(x))`); a "
         f"GPT block is pre-norm: {form}, the residual stream itself is never normalised.",
         {"place": {"self": "post", "ff": "post"}}),
        ("missing residual", f"there are no residual connections: {form}.", {"residual": {"self": None, "ff": None}}),
        ("missing residual", f"there is no residual connection around the self-attention: {form}.",
         {"residual": {"self": None}}),
        ("missing residual", f"there is no residual connection around the feed-forward: {form}.",
         {"residual": {"ff": None}}),
        ("residual stream normalised", "the residual stream itself is normalised (`h = norm1(x); x = h + "
         f"self_attn(h, ...)`): the residual adds the input as it came, {form}, so x keeps flowing unnormalised.",
         {"place": {"self": "stream", "ff": "stream"}}),
        # half of it (trial r09): one sub-layer pre-norm, the other adds its result to the normed x
        ("residual stream normalised", "the residual stream is normalised before the self-attention (`x = "
         "norm1(x); x = x + self_attn(x, ...)`), so the residual adds the normed x: normalise only the "
         f"sub-layer's input, `h = norm1(x); x = x + self_attn(h, h, h, mask)[0]`, as the feed-forward does: {form}.",
         {"place": {"self": "stream"}}),
        ("residual stream normalised", "the residual stream is normalised before the feed-forward (`x = norm2(x); "
         "x = x + feed_forward(x)`), so the residual adds the normed x: normalise only the sub-layer's input, "
         f"`x = x + feed_forward(norm2(x))`, as the self-attention does: {form}.", {"place": {"ff": "stream"}}),
        ("norm missing", "the self-attention reads x itself, not normalised: pre-norm normalises each sub-layer's "
         f"input, `h = norm1(x); x = x + self_attn(h, h, h, mask)[0]`: {form}.", {"place": {"self": "none"}}),
        ("norm missing", "the feed-forward reads x itself, not normalised (norm2 is never used): pre-norm normalises "
         f"each sub-layer's input, `x = x + feed_forward(norm2(x))`: {form}.", {"place": {"ff": "none"}}),
        ("norms swapped", "norm1 and norm2 are swapped: norm1 goes before the self-attention, norm2 before the "
         "feed-forward.", {"norm_of": (1, 0)}),
        ("same norm twice", "norm1 is used before both sub-layers and norm2 never, so the self-attention and the "
         "feed-forward both read norm1(x): the feed-forward reads its own norm, `x = x + feed_forward(norm2(x))` "
         "(each norm learns its own scale).", {"norm_of": (0, 0)}),
        ("same norm twice", "norm2 is used before both sub-layers and norm1 never, so the self-attention and the "
         "feed-forward both read norm2(x): the self-attention reads its own norm, `x = x + self_attn(norm1(x), "
         "...)` (each norm learns its own scale).", {"norm_of": (1, 1)}),
        ("keys and values not normalised", "the self-attention normalises only its queries: the keys and values "
         "are the un-normalised x. In pre-norm the sub-layer's whole input is normalised once, `h = norm1(x)`, and "
         "the self-attention reads h three times: `self_attn(h, h, h, mask)`.",
         {"attn": {"self": ("in", "x", "self_attn", "causal&mask")}}),
        *(("extra norm at the layer end", f"the block ends with an extra norm ({norm}(x) after the feed-forward's "
           f"residual): a pre-norm block returns the un-normalised stream, {form} for each sub-layer and nothing "
           "after it; the one final norm belongs to the model (GPT's self.norm, after the last block).", {"end": i})
          for i, norm in enumerate(("norm1", "norm2"))),
        ("ReLU instead of GELU", "the feed-forward uses ReLU; GPT-2 uses GELU (its tanh approximation): "
         '`FeedForward(d_model, d_ff, dropout, activation="gelu_tanh")`.', _activation(ref, F.relu)),
        ("exact GELU", _EXACT_GELU + ".", _activation(ref, F.gelu)),
    ]
    return [(name, text, lambda mut=mut: _block_variant(ref, x, mask, mut)) for name, text, mut in table]


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
    if leak is None:
        return
    j, i, by = leak
    said = (f"the future leaks: changing the input at position {j} changed the output at position {i} (by {by:.3g}), "
            "which comes before it")
    if not later_moved:
        fail(f"{said}, and (the last position aside) no change moved an output after it: your mask is the upper "
             "triangle (`triu`, "
             "`causal_mask(L).T` or `~causal_mask(L)`), so each position sees the later ones and not the earlier. "
             "The causal mask is the lower triangle, True on and below the diagonal: `causal_mask(L)` (or "
             "`torch.ones(L, L, dtype=torch.bool).tril()`), combined with `mask` by & when one is given.",
             mistake="upper triangle")
    fail(f"{said}. A GPT block must be causal by itself: attend with `causal_mask(L)` (True on and below the "
         "diagonal), combined with `mask` by & when one is given.", mistake="future leaking")


def _forward(model: nn.Module, args: tuple[Tensor, ...], case: str) -> Any:
    """The student's forward; masks combined in place (``mask &= causal``) raise a broadcast
    error there, named here rather than shown raw."""
    try:
        return call_student(model, *args, context=f"running forward ({case})")
    except StudentError as err:
        line = student_line(err.exc) or ""
        broadcast = ("doesn't match the broadcast shape", "refers to a single memory location")
        if isinstance(err.exc, RuntimeError) and _conv1d_habit(str(err.exc), line):
            fail(f"your forward multiplies by a layer's weight as GPT-2's Conv1D stores it ({case}): "
                 f"{raised(err.exc, inline=True)}. GPT-2's Conv1D keeps its weight as (in, out), so `x @ weight + "
                 "bias` is right there; `nn.Linear` keeps (out, in), so `x @ linear.weight` multiplies by the "
                 "transpose. Call the layer, `linear(x)`, or write `x @ linear.weight.T + linear.bias` "
                 "(`F.linear(x, weight, bias)`).", mistake="Conv1D layout")
        if (isinstance(err.exc, RuntimeError) and any(b in str(err.exc) for b in broadcast)
                and ("&=" in line or "and_(" in line)):
            fail(f"your forward combines the masks in place ({case}): {raised(err.exc, inline=True)}. `a &= b` "
                 "writes into `a`, which must already have the result's full shape (B, L, L): the padding mask "
                 "(B, 1, L) and the causal mask (L, L) are smaller, and an .expand()ed view shares memory between "
                 "entries. And on the caller's mask it would change the caller's tensor, which every block gets. "
                 "Combine into a new tensor: `mask = causal & mask`.", mistake="mask combined in place")
        raise


def _conv1d_habit(error: str, line: str) -> bool:
    """A matrix-product shape error on a line that multiplies by a ``.weight`` as it is (no
    ``.T``, ``.t()``, ``.transpose``, ``.mT``): GPT-2's Conv1D habit on ``nn.Linear`` weights."""
    code = line.replace(" ", "")
    return ("cannot be multiplied" in error or "size of tensor a" in error) and "@" in code and ".weight" in code \
        and not any(t in code for t in (".weight.T", ".weight.t()", ".weight.transpose", ".weight.mT"))


class _OutputOnly(nn.Module):
    """Stands in for an attention in :func:`_pair_not_unpacked`: the output alone, not ``(output, weights)``."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        out = self.inner(*args, **kwargs)
        return out[0] if isinstance(out, (tuple, list)) and len(out) == 2 else out


def _pair_not_unpacked(model: nn.Module, args: tuple[Tensor, ...], expected: Tensor, err: StudentError,
                       case: str) -> None:
    """After the student's forward raised: with every attention returning its output alone, a run that gives
    ``expected`` means the code used the pair ``(output, weights)`` as the output (``[0]`` forgotten)."""
    names = [n for n, m in model.named_children() if "Attention" in type(m).__name__]
    if not isinstance(err.exc, TypeError) or "tuple" not in str(err.exc) or not names:
        return
    with swapped(model, {n: _OutputOnly(getattr(model, n)) for n in names}), torch.no_grad():
        try:
            got = model(*(a.clone() for a in args))
        except Exception:  # noqa: BLE001 - no verdict: the original error is reported
            return
    if isinstance(got, Tensor) and matches(got, expected, atol=1e-4):
        fail(f"your GPTBlock raised {raised(err.exc, inline=True)} ({case}): self.self_attn returns a pair, "
             "(output, weights), and your code used the pair where the output belongs. Keep the output, `[0]`: "
             "`x = x + self.dropout1(self.self_attn(h, h, h, mask)[0])`. (With the output taken, your block gives "
             "the right numbers.)", mistake="attention output not unpacked")


def _parallel_block(ref: GPTBlock, x: Tensor, mask: Tensor | None) -> Tensor:
    """GPT-J's parallel block: both sub-layers read ``x``, ``x + attn(norm1(x)) + ff(norm2(x))``."""
    causal = causal_mask(x.size(1), device=x.device)
    h = ref.norm1(x)  # (B, L, D)
    attended = ref.self_attn(h, h, h, causal if mask is None else causal & mask)[0]  # (B, L, D)
    return x + attended + ref.feed_forward(ref.norm2(x))


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
            _pair_not_unpacked(model, originals, expected, err, case)
            raise
        check_unchanged(["x", "mask"], args, originals, case)
        check_state_unchanged(model, state, case)
        tuple_return(got, "GPTBlock")
        check_dropout(lambda: call_student(model, *originals, context=f"running forward ({case})"), got, expected)
        if mask is None and isinstance(got, Tensor) and got.shape == x.shape:
            _leak_test(model, originals[0], got)
        parallel = ("parallel block", "the feed-forward reads the block's input x, not the residual stream after "
                    "the self-attention: `x + attn(norm1(x)) + ff(norm2(x))` is the parallel block of GPT-J and "
                    "PaLM. GPT-2's sub-layers run one after the other: first `x = x + attn(norm1(x))`, then "
                    "`x = x + ff(norm2(x))` on that new x.", lambda: _parallel_block(ref, originals[0], mask))
        expect_close("output", got, expected, [*_block_mistakes(ref, originals[0], mask), parallel], atol=1e-5,
                     case=case)


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
            got, expected, exact = model(x), ref(x), _block_variant(ref, x, None, _activation(ref, F.gelu))
    except Exception:  # noqa: BLE001 - the probe only adds a diagnosis
        return
    finally:
        model.float()
        ref.float()
    if matches(got, exact, atol=1e-9, rtol=1e-7) and not matches(got, expected, atol=1e-9, rtol=1e-7):
        fail(_EXACT_GELU + " (seen in float64, where the two are told apart for sure)", mistake="exact GELU")


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
                        "causal_mask(L, device=x.device) (or torch.ones(L, L, dtype=torch.bool, device=x.device).tril(), "  # noqa: E501
                        "or a buffer registered in __init__, which .to(device) moves)")
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
    check_dropout_modes(
        model, ref, run, "GPTBlock",
        lambda: [
            (name, text, lambda m=m: run_block(ref, _BLOCK, x, None, {"causal&mask": causal}, True, m, drop=zeros))
            for name, text, m in dropout_mistakes(_BLOCK, True)
        ],
        quiet=("self_attn", "feed_forward"), atol=1e-5,
    )  # fmt: skip
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


def _gpt_mistakes(ref: GPT, tokens: Tensor, mask: Tensor | None) -> list[Mistake]:
    table: list[tuple[str, str, dict[str, Any]]] = [
        ("no position embedding", "the position embeddings are never added, so the model cannot tell positions "
         "apart: `x = token_embedding(tokens) + position_embedding(torch.arange(L, device=tokens.device))`.",
         dict(positions=None)),
        ("positions start at 1", "the positions are numbered from 1; they start at 0: "
         "`position_embedding(torch.arange(L, device=tokens.device))` (and so fit max_len exactly).",
         dict(positions=1)),
        ("positions offset by 2", "the positions are numbered from 2, OPT's habit (OPT's table has max_len + 2 "
         "rows for that offset); this table has max_len rows and GPT-2 counts from 0: "
         "`position_embedding(torch.arange(L, device=tokens.device))`.", dict(positions=2)),
        ("embeddings scaled", "the token embeddings are multiplied by sqrt(d_model), as the encoder-decoder "
         "Transformer's TokenEmbedding does; GPT-2 adds the plain embedding to the position embedding, unscaled.",
         dict(scale=True)),
        ("missing final norm", "the final LayerNorm is missing: pre-norm blocks never normalise the residual "
         "stream, so the model applies `self.norm` once after the last block, before `lm_head`.", dict(final_norm=False)),  # noqa: E501
        ("returns probabilities", "the model returns probabilities (a softmax over the vocabulary); it returns "
         "logits, the raw scores: the loss (cross_entropy) and the sampling apply the softmax themselves.",
         dict(output="probs")),
        ("returns log-probabilities", "the model returns log-probabilities (log_softmax); it returns the raw "
         "logits from lm_head.", dict(output="log_probs")),
        ("one layer applied repeatedly", "the first block is applied num_layers times; loop over self.blocks so "
         "each is used once.", dict(blocks="first only")),
        ("layer outputs not chained", "every block gets the embeddings as input, so only the last block's output "
         "is kept: feed each block's output to the next (`x = block(x, mask)`).", dict(blocks="unchained")),
    ]
    if ref.lm_head.weight.size(0) == ref.lm_head.weight.size(1):  # V == D: x @ lm_head.weight runs, wrong
        table.append(("Conv1D layout", "your head multiplies by `lm_head.weight` as GPT-2's Conv1D stores it, (in, "
                      "out); `nn.Linear` keeps (out, in) = (vocab_size, d_model), so `x @ lm_head.weight` multiplies "
                      "by the transpose (it ran only because vocab_size equals d_model here). Call the layer, "
                      "`self.lm_head(x)`, or write `x @ self.lm_head.weight.T`.", dict(head="Conv1D")))
    if mask is not None:
        table.append(("mask not passed on", "the `mask` argument is not passed on to the blocks: call "
                      "`block(x, mask)`.", dict(pass_mask=False)))
    return [(name, text, lambda kw=kw: _gpt_variant(ref, tokens, mask, **kw)) for name, text, kw in table]


def _check_tying(model: nn.Module, V: int, D: int) -> None:
    emb, head = getattr(model, "token_embedding", None), getattr(model, "lm_head", None)
    # no token_embedding: structure_failure names it; no lm_head (logits from the embedding matrix): the values decide
    if not isinstance(emb, nn.Embedding) or head is None:
        return
    weight = getattr(head, "weight", None)
    if getattr(head, "bias", None) is not None:
        fail("lm_head has a bias; GPT-2's output layer has none (and a tied layer shares only the matrix): "
             "`nn.Linear(d_model, vocab_size, bias=False)`.", mistake="output bias")
    if weight is emb.weight:
        return
    if isinstance(weight, Tensor) and weight.shape == emb.weight.shape[::-1] and equal(weight, emb.weight.t()):
        fail(f"lm_head.weight is the token embedding transposed, {describe_shape(weight)} = (D, V): `nn.Linear("
             f"d_model, vocab_size)` stores its weight as (out, in) = ({V}, {D}), the embedding table's own shape, "
             "so the table fits as it is: `self.lm_head.weight = self.token_embedding.weight` (no `.t()`; GPT-2's "
             "Conv1D layers store (in, out), but its head is tied untransposed too).", mistake="tied but transposed")
    if isinstance(weight, Tensor) and weight.shape == emb.weight.shape and equal(weight, emb.weight):
        fail("lm_head.weight is a copy of token_embedding.weight, not the same tensor: the two start equal but are "
             "separate parameters (2 x V x D numbers), and the first optimizer step makes them differ. Share the "
             "Parameter itself: `self.lm_head.weight = self.token_embedding.weight`.", mistake="tied by copying")
    fail(f"lm_head is not tied to the token embedding: it has its own weight matrix ({describe_shape(weight)}). "
         f"Share the Parameter: `self.lm_head.weight = self.token_embedding.weight` (one ({V}, {D}) matrix serves "
         f"both, saving {V * D:,} parameters here).", mistake="not tied")


def _check_blocks(model: nn.Module, N: int) -> None:
    blocks = getattr(model, "blocks", None)
    if not isinstance(blocks, nn.ModuleList):
        got = "no attribute `blocks`" if blocks is None else f"`blocks` is a {type(blocks).__name__}"
        fail(f"your GPT has {got}: keep the blocks in `self.blocks = nn.ModuleList([...])`.",
             mistake="missing submodule")
    if len(blocks) != N:
        fail(f"GPT(num_layers={N}) built {len(blocks)} blocks; it should build num_layers of them.",
             mistake="wrong number of blocks")
    if len({id(b) for b in blocks}) < len(blocks):
        fail("your blocks are one and the same module used several times (they share their weights): build a new "
             "GPTBlock for each, `nn.ModuleList(GPTBlock(...) for _ in range(num_layers))`.",
             mistake="blocks sharing one module")


_RESIDUAL = ("self_attn.w_o.weight", "feed_forward.linear2.weight")  # the projections into the residual stream


def _check_init(model: nn.Module, ref: GPT) -> None:
    """The notebook's initialisation, on the freshly built model: every weight matrix ~ N(0, 0.02^2)
    (the pooled standard deviation within 15 %, each matrix within a factor 2: tiny matrices vary),
    norm scales left at one. GPT-2's own (its paper, section 2.3; nanoGPT, Hugging Face) draws the
    residual projections ``w_o`` and ``linear2`` with ``0.02 / sqrt(2 * num_layers)``: when those
    matrices together are nearer that, they are measured against it. Biases are not checked (the
    notebook leaves them as built)."""
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
        return
    stds = {name: float(w.std()) for name, w in matrices}
    pooled = float(torch.cat([w.flatten() for _, w in matrices]).std())
    how = ("Initialise every weight matrix with `nn.init.normal_(p, std=0.02)` (before tying), as GPT-2 does; "
           "GPT-2 draws its residual projections (`w_o`, `linear2`) with `std=0.02 / math.sqrt(2 * num_layers)`, "
           "which is accepted too.")
    if not all(0.01 < std < 0.04 for std in stds.values()) or abs(pooled - 0.02) > 0.003:
        name = max(stds, key=lambda n: abs(math.log(max(stds[n], 1e-12) / 0.02)))
        if all(0.6 < std < 1.6 for std in stds.values()) and 0.8 < pooled < 1.25:  # nn.Linear's default is < 0.3
            fail(f"every weight matrix has standard deviation about 1 (all together: {pooled:.3g}), the N(0, 1) of "
                 "nn.init.normal_(p) called without std= (nn.Embedding's default too, but nn.Linear's is smaller): "
                 f"{how}", mistake="wrong initialisation")
        for emb in ("token_embedding.weight", "position_embedding.weight"):
            # wide bounds: a small position table's N(0, 1) strays beyond 20 % on some draws
            if 0.6 < stds.get(emb, 0.0) < 1.6:
                fail(f"the weights keep PyTorch's default initialisation (`{emb}` has standard deviation "
                     f"{stds[emb]:.3g}, nn.Embedding's N(0, 1)): {how}", mistake="initialisation missing")
        xavier = {n: math.sqrt(2 / (w.size(0) + w.size(1))) for n, w in matrices}  # its standard deviation
        if (all(0.7 < stds[n] / xavier[n] < 1.4 for n in stds)
                and abs(float(torch.cat([w.flatten() / xavier[n] for n, w in matrices]).std()) - 1) < 0.1):
            fail(f"your weights follow Xavier's initialisation (`{name}` has standard deviation {stds[name]:.3g}, "
                 f"Xavier's sqrt(2 / (fan_in + fan_out)) = {xavier[name]:.3g}); the notebook asks for GPT-2's: {how}",
                 mistake="Xavier initialisation")
        rescaled = ", GPT-2's scaled residual projections counted as 0.02" if 0.02 not in {target[n] for n in
                                                                                         target if n.endswith(_RESIDUAL)} else ""  # noqa: E501
        fail(f"`{name}` has standard deviation {stds[name] * target[name] / 0.02:.3g} after construction (all "
             f"weight matrices together{rescaled}: {pooled:.3g}); it should be {target[name]:.3g}. {how}",
             mistake="wrong initialisation")
    for name, w in scales:
        if not equal(w, torch.ones_like(w)):
            fail(f"`{name}` (a LayerNorm scale) is not all ones after construction (mean {float(w.mean()):.3g}): "
                 "the normal(0, 0.02) initialisation is for the weight matrices only (p.dim() >= 2); a norm "
                 "scale near 0 would switch its layer off. Leave the norms as LayerNorm builds them.",
                 mistake="norm scales initialised")


def _build_gpt(cls: Any, V: int, D: int, H: int, N: int, d_ff: int, p: float, max_len: int) -> nn.Module:
    shown = f"vocab_size={V}, d_model={D}, num_heads={H}, num_layers={N}, d_ff={d_ff}, dropout={p:g}, max_len={max_len}"
    model = call_student(cls, V, D, H, N, d_ff, p, max_len, context=f"constructing GPT({shown})")
    if not isinstance(model, nn.Module):
        fail(f"GPT(...) should build an nn.Module; got {type(model).__name__}.", mistake="not a class")
    return model.eval()


@checker("GPT")
def check_gpt(cls: Any) -> str:
    require_module_class(cls, "GPT")
    B, H, d_k, L, d_ff = _dims()
    D, V, N, max_len = H * d_k, randint(11, 19), randint(2, 3), L + randint(2, 4)
    model = _build_gpt(cls, V, D, H, N, d_ff, 0.1, max_len)
    _check_tying(model, V, D)
    _check_blocks(model, N)
    ref = GPT(V, D, H, N, d_ff, 0.0, max_len).eval()
    pairs, missing, unexpected, wrong_shape = match_parameters(model, ref)
    structure_failure("GPT", model, missing, unexpected, wrong_shape, _GPT_PARTS)
    require_distinct_roles(model, ref, "GPT")  # self.norm = self.blocks[-1].norm2; the tie is the reference's too
    _check_init(model, ref)
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
                    _max_len_refused(err, case, max_len)
                raise
            check_state_unchanged(model, state, case)
            if isinstance(got, (tuple, list)):
                fail(f"GPT should return one tensor, the logits (B, L, V) = ({B}, {length}, {V}); yours returned a "
                     f"{type(got).__name__} ({', '.join(describe_shape(t) for t in got[:3])}). Return the logits "
                     "alone (the loss is computed outside the model).", mistake="wrong return")
            check_dropout(lambda: call_student(model, *args, context=f"running forward ({case})"), got, expected)
            expect_close("logits", got, expected, _gpt_mistakes(ref, tokens, mask), case=case)
    gradient_probe(model, ref, dict(tokens=tokens, mask=mask), named(model, pairs), what="GPT", case=case)
    _gpt_dropout(cls, V, D, H, N, d_ff, max_len, B, L)
    _too_long(model, V, B, max_len)
    tokens, case = torch.randint(0, V, (B, L)), f"tokens ({B}, {L}), no mask"  # all right: a CPU tensor watched
    check_module_device(model.eval(), (tokens,), "your GPT", case, "build the positions on the tokens' device: "
                        "torch.arange(L, device=tokens.device)")
    # the notebook stores this line (nbval): change it together with solutions/09
    return "tied output layer, learned positions, final norm, logits (B, L, V), with and without a mask"


def _max_len_refused(err: StudentError, case: str, max_len: int) -> None:
    """A sequence of exactly ``max_len`` tokens refused by the student's own ``raise`` or
    ``assert`` (``L >= max_len``: off by one), after the shorter case ran."""
    line = student_line(err.exc) or ""
    if isinstance(err.exc, (ValueError, AssertionError)) or re.search(r"\b(raise|assert)\b", line):
        fail(f"a sequence of exactly max_len = {max_len} tokens ({case}) is refused: {raised(err.exc, inline=True)}. "
             f"The position table has max_len rows, positions 0 .. {max_len - 1}, so a sequence of exactly max_len "
             "tokens is allowed (generation feeds the model the last max_len tokens); refuse only L > max_len: "
             "`if tokens.size(1) > self.max_len: raise ValueError(...)` (`>`, not `>=`).",
             mistake="length check off by one")


def _too_long(model: nn.Module, V: int, B: int, max_len: int) -> None:
    """``L = max_len + 1`` must be a ``ValueError`` (the notebook asks for it): the model has no
    position beyond ``max_len``, and generation relies on the error to crop its context."""
    tokens, case = torch.randint(0, V, (B, max_len + 1)), f"tokens ({B}, {max_len + 1}), max_len={max_len}"
    how = ("check the length first: `if tokens.size(1) > self.max_len: raise ValueError(f\"... L = {L} > max_len "
           "= {self.max_len}\")`")
    try:
        with torch.no_grad():
            call_student(model, tokens, context=f"running forward ({case})")
    except StudentError as err:
        if isinstance(err.exc, ValueError):
            return
        if isinstance(err.exc, AssertionError):
            fail(f"a sequence longer than max_len ({case}) stops at an `assert` (nanoGPT's habit): an assert "
                 "raises AssertionError, which says nothing about the input, and `python -O` removes it "
                 f"altogether. Raise the error a bad argument gets: {how}.", mistake="wrong error type")
        fail(f"a sequence longer than max_len ({case}) gets {raised(err.exc, inline=True)} from deep inside "
             f"(the position table has only max_len rows), not a clear error: {how}.", mistake="max_len not checked")
    fail(f"a sequence longer than max_len ({case}) runs without an error, although the model has learned no "
         f"position beyond max_len: {how}.", mistake="max_len not checked")


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
    check_dropout_modes(
        model, ref, run, "GPT",
        lambda: [
            ("embedding dropout missing", "no dropout is applied to the embeddings in training mode: x = "
             "self.dropout(token_embedding(tokens) + position_embedding(positions)), with self.dropout = "
             "nn.Dropout(dropout).", lambda: quiet_blocks(emb + pos)),
            ("dropout before adding", "the dropout is applied to the token embeddings before the position "
             "embeddings are added; it goes on their sum: x = self.dropout(token_embedding(tokens) + "
             "position_embedding(positions)).", lambda: quiet_blocks(pos.expand_as(emb))),
            ("dropout after the final norm", "the final norm's output (or the logits) goes through a dropout: "
             "GPT-2 drops only the embeddings' sum and, inside each block, each sub-layer's output; the final "
             "norm feeds the output layer as it is: `self.lm_head(self.norm(x))`.",
             lambda: torch.zeros_like(quiet_blocks(emb + pos))),  # dropout = 1 - 1e-12 zeroes it all
        ],
        quiet=("blocks",), atol=1e-5,
    )  # fmt: skip
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
    if isinstance(got, Tensor) and not matches(got, expected) and matches(got, without):
        fail(f"your GPT's blocks apply no dropout in training mode (blocks[0] on its own, dropout={P_PROBE:g}): the "
             "model's dropout is not passed on to them. Build them with it: GPTBlock(d_model, num_heads, d_ff, "
             "dropout).", mistake="dropout not passed on")


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


def _probs_mistakes(logits: Tensor, T: float, k: int | None, p: float | None) -> list[Mistake]:
    table: list[tuple[str, str, dict[str, Any]]] = []
    if T != 1:
        table += [
            ("temperature after softmax", "the temperature divides the probabilities after the softmax; it divides "
             "the logits before it: `softmax(logits / temperature)`.", dict(temp="after softmax")),
            ("temperature after softmax", "the temperature is applied to the probabilities and then a second "
             "softmax; divide the logits by the temperature, then apply one softmax.", dict(temp="softmax twice")),
            ("temperature ignored", "the temperature has no effect: divide the logits by it before the softmax.",
             dict(temp="ignored")),
            ("temperature multiplied", "the logits are multiplied by the temperature; divide them: a temperature "
             "below 1 must sharpen the distribution, above 1 flatten it.", dict(temp="multiplied")),
            ("temperature applied twice", "the logits are divided by the temperature twice (`logits / T / T`, or "
             "by `T ** 2`): divide them once, `softmax(logits / temperature)`, and only there (not again in "
             "`generate` before calling next_token_probs).", dict(temp="twice")),
        ]
    if k is not None:
        table += [
            ("top-k keeps k+1", f"top_k={k} kept {k + 1} tokens: keep exactly the k largest logits "
             "(logits.topk(k).values[..., -1:] is the k-th largest; remove what is below it).", dict(k_shift=1)),
            ("top-k keeps k-1", f"top_k={k} kept only {k - 1} token{'s' if k - 1 != 1 else ''}: the k-th largest "
             "logit must be kept too (remove logits < the k-th largest, not <=).", dict(k_shift=-1)),
            ("top-k keeps the smallest", "top-k keeps the k *smallest* logits; keep the k largest.",
             dict(k_largest=False)),
        ]
    if k is not None or p is not None:
        table += [
            ("not renormalised", "the removed tokens get probability 0, but the kept ones are not renormalised, so "
             "the row sums to less than 1: set the removed logits to -inf (or the most negative float) before the "
             "softmax.", dict(renorm=False)),
            ("removed set to zero logit", "the removed tokens' logits are set to 0, which leaves them a probability "
             "exp(0) / sum > 0; set them to -inf (or the most negative float) so the softmax gives them exactly 0.",
             dict(zero_logit=True)),
        ]
    if p is not None:
        table += [
            ("top_p ignored", f"top_p={p} has no effect: keep only the smallest set of most likely tokens whose "
             "probabilities add up to at least top_p (sort, cumsum, remove a token once the tokens before it reach "
             "top_p), then renormalise.", dict(p_mode="ignored")),
            ("top-p drops the crossing token", f"top_p={p} stops before the token whose cumulative probability "
             "crosses p; the nucleus is the smallest set of most likely tokens whose total is >= p, so that token is "
             "kept (remove a token only when the tokens before it already add up to p).", dict(p_mode="strict")),
            ("top-p drops the crossing token", f"top_p={p} stops before the token whose cumulative probability "
             "crosses p (except where the most likely token alone reaches p); the nucleus is the smallest set of "
             "most likely tokens whose total is >= p, so that token is kept (remove a token only when the tokens "
             "before it already add up to p).", dict(p_mode="strict, top kept")),
            ("top-p unsorted", "top-p adds up the probabilities in vocabulary order; sort them from the most to the "
             "least likely first (`sort(descending=True)`), then map the decision back to the vocabulary order.",
             dict(p_mode="unsorted")),
            ("top-p not mapped back", "top-p decides in sorted order, and that decision is applied to the logits "
             "as if it were in vocabulary order: the i-th most likely token's verdict lands on token i. Map it back "
             "with the sort's indices: `remove = remove_sorted.scatter(-1, order, remove_sorted)`.",
             dict(p_mode="sorted order")),
            ("top-p not mapped back", "top-p maps its sorted decision back with `gather(-1, order)`, which applies "
             "the sort's permutation a second time instead of undoing it: `remove_sorted.gather(-1, order)[v]` is "
             "the verdict of sorted position `order[v]`, not of token v. Undo it with scatter: "
             "`remove_sorted.scatter(-1, order, remove_sorted)` (or `torch.empty_like(remove_sorted).scatter_(-1, "
             "order, remove_sorted)`).", dict(p_mode="gather")),
            ("top-p keeps one token too many", f"top_p={p} keeps the token after the one whose cumulative "
             "probability crosses p: the nucleus is the smallest set of most likely tokens whose total is >= p, "
             "so remove a token as soon as the tokens before it add up to p (`cumsum - probs >= top_p`; or, "
             "Hugging Face's way, `cumsum > top_p` shifted right by one, not by two).", dict(p_mode="one long")),
        ]
        if T != 1:
            table.append(("top-p before temperature", "the nucleus is chosen from the probabilities *before* the "
                          "temperature; apply the temperature first, then top-k and top-p on the tempered "
                          "distribution.", dict(p_mode="before temperature")))
        if k is not None:
            table.append(("top-p before top-k", "top-p is computed on the full distribution; apply it after top-k, "
                          "to the distribution of the k tokens that are left (renormalised).",
                          dict(p_order="before k")))
    return [(name, text, lambda kw=kw: _probs_variant(logits, T, k, p, **kw)) for name, text, kw in table]


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
    shown = [(name, value) for name, _, candidate in _probs_mistakes(logits, T, k, p)
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
            _shape_crash(err, original, case)
            raise
        check_unchanged(["logits"], [logits], [original], case)
        expected = next_token_probs(original, T, k, p)
        mistakes = _probs_mistakes(original, T, k, p)
        mistakes.append(("log-probabilities", "the result looks like log-probabilities; return the probabilities "
                         "themselves (rows that sum to 1).", lambda e=expected: e.clamp_min(1e-45).log()))
        if p is not None and isinstance(got, Tensor) and got.shape == expected.shape and bool(isnan(got).any()):
            nan_rows = isnan(got).any(dim=-1)  # (...,)
            empty = next_token_probs(original, T, k).amax(dim=-1) >= p  # rows whose top token alone reaches p
            if bool(nan_rows.any()) and equal(nan_rows, empty):
                fail(f"probabilities ({case}) are NaN exactly in the rows where the most likely token alone has "
                     f"probability >= top_p: your nucleus is empty there, because it stops before the token that "
                     "crosses p. That token belongs to the nucleus (remove a token only when the tokens before it "
                     "already add up to p), so at least one token is always kept.",
                     mistake="top-p drops the crossing token")
        if not matches(got, expected, atol=1e-6, rtol=1e-4):
            _softmax_axis(got, original, T, k, p, case)
        expect_close("probabilities", got, expected, mistakes, atol=1e-6, rtol=1e-4, case=case)
    _probs_robustness(fn, V)
    return "temperature, top-k, top-p and both together, several temperatures, any leading dims"


def _shape_crash(err: StudentError, logits: Tensor, case: str) -> None:
    """An IndexError or a shape RuntimeError on logits other than one row of (B, V): code that
    indexes axis 1 (nanoGPT's ``v[:, [-1]]``, Hugging Face's ``scatter(1, ...)``) or keeps the
    k-th value as ``(B,)`` (``top_logits[:, -1]``, right for one row only) named."""
    exc, line = err.exc, (student_line(err.exc) or "").replace(" ", "")
    shape_error = isinstance(exc, IndexError) or (isinstance(exc, RuntimeError) and any(
        w in str(exc) for w in ("size of tensor", "out of bounds", "out of range", "shape", "dimension")))
    if not shape_error or (logits.dim() == 2 and logits.size(0) == 1):
        return
    shown = f"{raised(exc, inline=True)}"
    sizes = re.search(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\)", str(exc))
    # (B, V) against (B,): one value per row lined up with the vocabulary axis
    per_row = logits.dim() == 2 and sizes is not None and {int(sizes[1]), int(sizes[2])} == set(logits.shape)
    if re.search(r"\[:,-1\]", line) or per_row:
        fail(f"your next_token_probs fails ({case}): {shown}. `top_logits[:, -1]` takes the k-th largest logit as "
             "shape (B,), without its axis: against logits (B, V) it lines up with the vocabulary axis, so it is "
             "right for one row only (B = 1) and an error or wrong numbers otherwise. Keep the axis and index the "
             "last one: `kth = top_logits[..., -1:]`, shape (..., 1), which works for (V,), (B, V) and (B, L, V).",
             mistake="k-th value without its axis")
    fixes = ["`v[..., [-1]]` or `v[..., -1:]` for nanoGPT's `v[:, [-1]]`" if re.search(r"\[:,\[-1\]\]", line) else
             "", "`scatter(-1, ...)` for `scatter(1, ...)`" if re.search(r"(scatter|gather)_?\(1,|dim=1", line) else ""]
    fixes = [f for f in fixes if f]
    fail(f"your next_token_probs fails ({case}): {shown}. It works on 2-D logits (B, V) only: it indexes axis 1, "
         "which is the vocabulary only there. The notebook calls it on one row (V,) and generation may pass (B, L, "
         "V): index the last axis, `dim=-1` and `[..., -1:]`" + (f" ({'; '.join(fixes)})" if fixes else "") + ".",
         mistake="2-D logits only")


def _softmax_axis(got: Any, logits: Tensor, T: float, k: int | None, p: float | None, case: str) -> None:
    """The last softmax over another axis than the vocabulary. Removed logits (-inf) give NaN
    where a whole line of that axis was removed, so NaN counts as equal to NaN here."""
    if (not isinstance(got, Tensor) or got.shape != logits.shape or not got.is_floating_point()
            or got.device.type != "cpu"):
        return
    for dim in range(logits.dim() - 1):
        wrong = _probs_variant(logits, T, k, p, dim=dim).double()  # (..., V)
        if bool(allclose(got.detach().double(), wrong, atol=1e-6, rtol=1e-4, equal_nan=True)):
            nan = (" The NaN come from it: a token removed (-inf) in every row along that axis leaves softmax "
                   "nothing but -inf." if bool(isnan(wrong).any()) else "")
            fail(f"probabilities ({case}): the softmax runs over dim={dim} of the logits {describe_shape(logits)}, "
                 "not over the vocabulary, so the probabilities do not sum to 1 along the last axis. Each "
                 "distribution over the next token lies along the last axis whatever the leading dims: "
                 f"softmax(..., dim=-1) (dim=1 is the vocabulary only for 2-D logits).{nan}",
                 mistake="softmax not over the vocabulary")


def _probs_robustness(fn: Callable[..., Any], V: int) -> None:
    """Large logits at a low temperature (exp overflows unless the max is subtracted: softmax does),
    flat logits at a tiny temperature (p ** (1 / T) underflows to 0 / 0), and top_k > V (keep all)."""
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
            if "top_k" in kwargs and isinstance(err.exc, RuntimeError) and "out of range" in str(err.exc):
                fail(f"your next_token_probs raised {type(err.exc).__name__} ({case}): "
                     f"{str(err.exc).strip().splitlines()[0]}. topk cannot take more than V values; a top_k above "
                     "the vocabulary size keeps every token: k = min(top_k, logits.size(-1)).",
                     mistake="top_k not clamped")
            raise
        if isinstance(got, Tensor) and got.shape == expected.shape and bool(isnan(got).any()):
            fail(f"your probabilities are NaN ({case}): exp of a large scaled logit overflows, or probabilities "
                 "raised to 1 / temperature underflow to 0 / 0. Divide the logits by the temperature and use "
                 "softmax, which subtracts the largest logit first.", mistake="not numerically stable")
        expect_close("probabilities", got, expected, [], atol=1e-6, rtol=1e-4, case=case)


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
        if isinstance(err.exc, ValueError) and "max_len" in str(err.exc):
            fail(f"generate fed the model more than its max_len = {model.max_len} tokens ({case}): the model has no "
                 "position embedding beyond that. Feed it only the last max_len tokens: "
                 "model(out[:, -model.max_len:]).", mistake="context not cropped")
        raise
    finally:
        watch.handle.remove()
    return got, watch


def _check_watch(watch: _Watch, model: GPT, was_training: bool, case: str) -> None:
    if any(training for training, _, _ in watch.calls):
        fail(f"the model ran in training mode while sampling ({case}), so dropout changed its predictions: call "
             "`model.eval()` before the loop (and `model.train(was_training)` after it).",
             mistake="sampling in training mode")
    require_no_grad([grad for _, grad, _ in watch.calls], "generation", "generate", case)
    if model.training != was_training:
        fail(f"generate left the model in {'train' if model.training else 'eval'} mode, although it was in "
             f"{'train' if was_training else 'eval'} mode before ({case}): remember model.training at the start "
             "and restore it at the end (model.train(was_training)).", mistake="mode not restored")


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
    if len(watch.calls) >= 2 and left != {True}:
        fail("the tokens are right, but when the model raises an error during generation (the checker made it fail "
             "at step 2, the model in train mode), generate leaves it in eval mode: restore the mode in a `finally:` "
             "block (try: ... finally: model.train(was_training)), so that a failed generation does not silently "
             "switch off dropout for the rest of training.", mistake="mode not restored")


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
    model, tokens, original = copy.deepcopy(model), tokens.clone(), tokens.clone()
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
    if isinstance(got, Tensor) and got.shape == (tokens.size(0), steps) and equal(got, expected[:, L0:]):
        fail("generate returned only the new tokens; return the prompt followed by them, "
             f"(B, L0 + max_new_tokens) = {describe_shape(expected)}.", mistake="prompt dropped")
    if isinstance(got, Tensor) and got.shape == expected.shape and not equal(got.long(), expected):
        torch.manual_seed(4321)  # another global random state: with top_k=1 the tokens must not depend on it
        again, _ = _generate_call(fn, model, original.clone(), steps, case, top_k=1)
        model.eval()
        if isinstance(again, Tensor) and again.shape == got.shape and not equal(again.long(), got.long()):
            fail(f"with top_k=1 ({case}) every draw is the most likely token, so two calls must give the same "
                 "tokens; yours differ: top_k does not reach next_token_probs (left out, or its arguments in "
                 "another order). Pass them on by name: next_token_probs(logits, temperature=temperature, "
                 "top_k=top_k, top_p=top_p).", mistake="top_k not passed on")
    mistakes: list[Mistake] = [
        ("max_len off by one", "when the sequence is longer than max_len, generate feeds the model only its last "
         "max_len - 1 tokens; the model reads max_len: `out[:, -model.max_len:]`.",
         lambda: _greedy(model, original, steps, crop="one short")),
        ("context cropped from the start", "when the sequence is longer than max_len, generate feeds the model its "
         "*first* max_len tokens; feed it the last ones, `out[:, -model.max_len:]`, which end with the newest token.",
         lambda: _greedy(model, original, steps, crop="start")),
        ("reads the first position", "the next token is drawn from the logits of the first position; use the last "
         "one, `logits[:, -1]`, the prediction that follows the newest token.",
         lambda: _greedy(model, original, steps, position=0)),
    ]
    if isinstance(got, Tensor) and got.dtype != expected.dtype and not got.is_floating_point():
        got = got.long()
    expect_close("tokens", got, expected, mistakes, case=case)
    if watch.calls and max(length for _, _, length in watch.calls) > max_len:
        fail("the model was fed more than max_len tokens.", mistake="context not cropped")

    # 1b. top_p tiny: the nucleus is the most likely token alone, so the draws are the argmax again
    case = f"prompt {describe_shape(tokens)}, max_new_tokens={steps}, top_p=1e-06, max_len={max_len}"
    got, watch = _generate_call(fn, model, original.clone(), steps, case, top_p=1e-6)
    if isinstance(got, Tensor) and got.shape == expected.shape and not equal(got.long(), expected):
        fail(f"with top_p=1e-06 ({case}) only the most likely token is left to draw, so generate must give the "
             "greedy tokens; yours differ: pass top_p on, next_token_probs(logits, temperature, top_k, top_p).",
             mistake="top_p not passed on")
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
    if not (isinstance(got, Tensor) and got.shape == (n, L0 + 1)):
        fail(f"generate returned {describe_shape(got)} for a prompt ({n}, {L0}) and one new token; "
             f"expected ({n}, {L0 + 1}).", mistake="wrong shape")
    drawn = got[:, -1].long()
    if not ((drawn >= 0) & (drawn < V)).all():
        fail("generate produced token ids outside the vocabulary.", mistake="wrong shape")
    freq = torch.bincount(drawn, minlength=V).float() / n  # (V,)
    tv = 0.5 * float((freq - target).abs().sum())
    if bool((drawn == drawn[0]).all()):
        fail("all draws gave the same token: generate takes the argmax instead of sampling. Draw from the "
             "distribution: torch.multinomial(probs, 1, generator=generator).", mistake="greedy instead of sampling")
    if tv > 0.05:
        known = [  # (name, diagnosis, the distribution the draws follow with that mistake)
            ("temperature ignored", f"with temperature={T} the draws follow the distribution at temperature 1: pass "
             "the temperature on to next_token_probs.", logits.softmax(-1)),
            ("temperature applied twice", f"with temperature={T} the draws follow the distribution at temperature "
             f"{T * T:g} = {T}²: the temperature is applied twice (the logits divided by it before "
             "next_token_probs, which divides again). Divide once: pass the raw logits and the temperature to "
             "next_token_probs.", next_token_probs(logits, T * T)),
            ("softmax before next_token_probs", f"with temperature={T} the draws follow "
             f"next_token_probs(softmax(logits), temperature={T}): generate hands next_token_probs probabilities "
             "where it expects logits, and next_token_probs applies its own softmax on top, which flattens the "
             "distribution towards uniform. Pass the model's raw last-position logits: "
             "next_token_probs(model(context)[:, -1], temperature, top_k, top_p).",
             next_token_probs(logits.softmax(-1), T)),
        ]
        gaps = [0.5 * float((freq - dist).abs().sum()) for _, _, dist in known]
        best = min(range(len(known)), key=gaps.__getitem__)
        if gaps[best] < tv:  # nearer a catalogued mistake's distribution than the right one: the nearest
            fail(known[best][1], mistake=known[best][0])
        fail(f"the frequencies of {n} draws differ from next_token_probs(logits, temperature={T}) by a total "
             f"variation of {tv:.2f} (a correct sampler gives less than 0.05): sample with "
             "torch.multinomial(next_token_probs(...), 1, generator=generator).", mistake="values differ")
    if isinstance(first, Tensor) and not equal(first, got):
        fail("two calls with generators seeded alike gave different tokens: the `generator` argument is not "
             "used. Pass it to the sampling: `torch.multinomial(probs, 1, generator=generator)`.",
             mistake="generator ignored")
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

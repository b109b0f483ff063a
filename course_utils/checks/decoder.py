"""Checkers for notebook 05 (the decoder): ``DecoderLayer`` and ``Decoder``.

Each checker builds the student's class itself with awkward random sizes (``B``, ``L_tgt``, ``L_src``, ``D``,
``d_ff`` all different), in eval mode, for both ``norm_first`` values, with random parameters copied by name into
the reference. Inputs: no masks; a causal + padding ``tgt_mask`` ``(B, L_tgt, L_tgt)`` with a source-padding
``memory_mask`` ``(B, 1, L_src)``; a plain causal ``(L_tgt, L_tgt)`` mask; and ``L_src == L_tgt`` (where swapped
masks or cross-attention inputs run without an error). A wrong output is compared with the reference computed with
each catalogued mistake (the generated families of :mod:`._blocks`, named after the masks as
``"tgt_mask not passed"``, ``"memory_mask not passed"``, plus ``"own causal mask"``); the first match is named.
Code that raises only because ``L_src != L_tgt`` runs again with equal lengths to name the mistake behind it.
Each exercise's mistakes are one table, in the order tried: ``DL`` (DecoderLayer) and ``DEC`` (Decoder).
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import torch
from torch import Tensor, nn

from ..attention import causal_mask
from ..decoder import Decoder, DecoderLayer
from ._blocks import (
    ATTENTION_PROBES,
    COURSE_PARTS_PROBE,
    DROPOUT_MODES_PROBE,
    EVAL_DROPOUT_PROBE,
    LOAD_REFERENCE_PROBE,
    MEANINGS,
    P_PROBE,
    PART_DROPOUT_PROBE,
    STACK_PROBES,
    VERIFY_PART_PROBE,
    Block,
    Stack,
    attention_error,
    block_entries,
    branch_dropout_probe,
    build_stack,
    check_dropout,
    check_stack_dropout,
    course_parts,
    declared,
    dropout_entries,
    layer_dropout,
    layer_stage,
    reference,
    remembered,
    run_block,
    run_stack,
    stack_dropout_entries,
    stack_entries,
    unused_final_norm,
    verify_part,
    weights_used,
)
from ._core import (
    Mistake,
    StudentError,
    call_student,
    check_state_unchanged,
    check_unchanged,
    checker,
    describe_shape,
    expect_close,
    fail,
    gradient_probe,
    matches,
    module_state,
    raised,
    randint,
    register_hints,
    require_distinct_roles,
    require_module_class,
)
from ._pairing import build_student, load_reference
from .catalogue import GRADIENT_PROBE, Catalogue, Entry, Output, Probe, Reference
from .encoder import CATALOGUES as ENCODER_TABLES

__all__ = ["check_decoder_layer", "check_decoder"]

# the reference's output and the catalogued mistakes for inputs (x, memory, tgt_mask, memory_mask)
Outputs = Callable[..., tuple[Tensor, list[Mistake]]]


# ---------------------------------------------------------------- helpers shared with checks/model.py and gpt.py
def trailing_padding(B: int, L: int) -> Tensor:
    """``(B, 1, L)`` bool, ``True`` = real token: each row's real tokens come first; at least
    one row is full and at least one is padded (so lengths differ per example)."""
    lengths = torch.randint(max(1, L // 2), L + 1, (B,))  # (B,)
    full = randint(0, B - 1)
    lengths[full] = L
    lengths[(full + 1) % B] = randint(max(1, L // 2), L - 1)
    return (torch.arange(L) < lengths[:, None]).unsqueeze(1)  # (B, 1, L)


def tuple_return(got: Any, what: str) -> None:
    """A layer or a stack returns one tensor: the fix named after what the tuple holds (an
    attention's ``(B, H, L_q, L_k)`` weights: the pair of a MultiHeadAttention call)."""
    if isinstance(got, (tuple, list)):
        inner = ", ".join(describe_shape(t) for t in got[:3])
        if not what.endswith(("Layer", "Block")):  # a stack calls no attention itself
            fix = (f"return the last layer's output alone, `return x` (after self.norm when there is one): your {what} "
                   "calls its layers, never a MultiHeadAttention, so there is no pair to keep")
        elif any(isinstance(t, Tensor) and t.dim() == 4 for t in got):
            fix = ("the (B, H, L_q, L_k) in it is an attention's weights: MultiHeadAttention returns (output, "
                   "weights); keep only the output, [0], and return the layer's x alone")
        else:
            fix = "return the output tensor alone, `return x`, not a pair"
        fail(f"{what} should return one tensor (B, L_tgt, D); yours returned a {type(got).__name__} ({inner}): {fix}.",
             mistake="wrong return")


def _sizes() -> tuple[int, int, int, int, int, int]:
    """``B, L_tgt, L_src, D, H, d_ff`` with ``B, L_tgt, L_src, D = H * d_k, d_ff`` all different."""
    while True:
        B, H, d_k = randint(2, 4), randint(2, 3), randint(3, 5)
        L_tgt, L_src, d_ff = randint(4, 7), randint(4, 8), randint(8, 20)
        if len({B, L_tgt, L_src, H * d_k, d_ff}) == 5:
            return B, L_tgt, L_src, H * d_k, H, d_ff


def _masks(B: int, L_tgt: int, L_src: int, kind: str) -> tuple[Tensor | None, Tensor | None, str]:
    if kind == "none":
        return None, None, "no masks"
    memory_mask = trailing_padding(B, L_src)  # (B, 1, L_src)
    if kind == "causal":
        return causal_mask(L_tgt), memory_mask, f"tgt_mask causal ({L_tgt}, {L_tgt}), memory_mask ({B}, 1, {L_src})"
    tgt_mask = trailing_padding(B, L_tgt) & causal_mask(L_tgt)  # (B, L_tgt, L_tgt)
    return tgt_mask, memory_mask, f"tgt_mask causal + padding ({B}, {L_tgt}, {L_tgt}), memory_mask padding ({B}, 1, {L_src})"  # noqa: E501


def _call(model: Callable[..., Any], x: Tensor, memory: Tensor, tgt_mask: Tensor | None, memory_mask: Tensor | None,
          context: str = "running forward (dropout)") -> Any:
    if tgt_mask is None and memory_mask is None:
        return call_student(model, x, memory, context=context)  # the masks' defaults must work
    return call_student(model, x, memory, tgt_mask, memory_mask, context=context)


def _clones(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(a.clone() if isinstance(a, Tensor) else a for a in args)


def _run_case(model: nn.Module, what: str, args: tuple[Any, ...], case: str, outputs: Outputs,
              probe: Callable[[StudentError], None] | None, full: bool) -> None:
    """One forward on ``args`` (x, memory, tgt_mask, memory_mask): compare with the reference,
    name a catalogued mistake, or probe an error (``full``: also a second call, for dropout
    left on in eval mode)."""
    originals = _clones(args)
    state, context = module_state(model), f"running forward ({case})"
    with torch.no_grad():
        expected, mistakes = outputs(*originals)  # (B, L_tgt, D)
        try:
            got = _call(model, *args, context=context)
        except StudentError as err:
            if not isinstance(err.exc, NotImplementedError):
                attention_error(err.exc, what, case)
                weights_used(model, ("self_attn", "cross_attn"), lambda m: _call(m, *_clones(originals), context=context),  # noqa: E501
                             expected, what, err.exc, case)
            if probe is not None and not isinstance(err.exc, NotImplementedError):
                probe(err)
            raise
        check_unchanged(["x", "memory", "tgt_mask", "memory_mask"], args, originals, case)
        check_state_unchanged(model, state, case)
        tuple_return(got, what)
        if full:
            check_dropout(lambda: _call(model, *originals, context=context), got, expected)
        expect_close("output", got, expected, mistakes, case=case)


def _run_mask_cases(model: nn.Module, what: str, settings: str, sizes: tuple[int, ...], outputs: Outputs,
                    table: Catalogue, full: bool = True) -> None:
    """:func:`_run_case` without masks, with padding and with causal + padding masks
    (``L_tgt != L_src``), then with equal lengths, where swapped masks or swapped
    cross-attention inputs run without an error. ``settings`` starts every case's text."""
    B, L_tgt, L_src, D = sizes[:4]
    for kind in ("none", "padded", "causal"):
        tgt_mask, memory_mask, words = _masks(B, L_tgt, L_src, kind)
        case = f"{settings}, x ({B}, {L_tgt}, {D}), memory ({B}, {L_src}, {D}), {words}"
        probe = _length_probe(model, what, (B, L_tgt, D), kind != "none", outputs, case, table)
        args = (torch.randn(B, L_tgt, D), torch.randn(B, L_src, D), tgt_mask, memory_mask)
        _run_case(model, what, args, case, outputs, probe, full)
    tgt_mask, memory_mask, words = _masks(B, L_tgt, L_tgt, "padded")
    args = (torch.randn(B, L_tgt, D), torch.randn(B, L_tgt, D), tgt_mask, memory_mask)
    _run_case(model, what, args, f"{settings}, L_src = L_tgt = {L_tgt}, {words}", outputs, None, full)


def _gradient_case(model: nn.Module, ref: nn.Module, params: list[tuple[str, Tensor, Tensor]], what: str,
                   settings: str, sizes: tuple[int, ...]) -> None:
    """The gradient probe on a padded case (causal + padding: no query sees no key)."""
    B, L_tgt, L_src, D = sizes[:4]
    tgt_mask, memory_mask, words = _masks(B, L_tgt, L_src, "padded")
    inputs = dict(x=torch.randn(B, L_tgt, D), memory=torch.randn(B, L_src, D), tgt_mask=tgt_mask, memory_mask=memory_mask)  # noqa: E501
    gradient_probe(model, ref, inputs, params, what=what, case=f"{settings}, {words}")


def _length_probe(model: nn.Module, what: str, shape: tuple[int, int, int], masked: bool, outputs: Outputs,
                  case: str, table: Catalogue) -> Callable[[StudentError], None]:
    """When the student's code raised with ``L_src != L_tgt``, run it with ``L_src == L_tgt``:
    the right output there is ``table``'s stage ``"lengths"``; a match with a catalogued
    mistake names what caused the error."""
    B, L, D = shape

    def probe(err: StudentError) -> None:
        x, memory = torch.randn(shape), torch.randn(shape)
        tgt_mask, memory_mask, _ = _masks(B, L, L, "padded" if masked else "none")
        try:
            with torch.no_grad():
                got = _call(model, x, memory, tgt_mask, memory_mask, context="probing")
                expected, mistakes = outputs(x, memory, tgt_mask, memory_mask)
        except Exception:  # noqa: BLE001 - the probe only adds a diagnosis; the original error is reported
            return
        if not isinstance(got, Tensor):
            return
        head = (f"your {what} raised {raised(err.exc, inline=True)} ({case}). The check then tried it with "
                "L_src == L_tgt: there it runs without an error, ")
        table.detect("lengths", SimpleNamespace(got=got, expected=expected), head=head)
        for name, diagnosis, candidate in mistakes:
            try:
                value = candidate() if callable(candidate) else candidate
            except Exception:  # noqa: BLE001 - a mistake that cannot be computed is not this one
                continue
            if isinstance(value, Tensor) and matches(got, value):
                fail(head + f"and its output shows the cause: {diagnosis}", mistake=name)

    return probe


# ---------------------------------------------------------------- DecoderLayer
_LAYER_PARTS = {
    "self_attn": "MultiHeadAttention(d_model, num_heads, dropout), the masked self-attention",
    "cross_attn": "MultiHeadAttention(d_model, num_heads, dropout), the cross-attention",
    "feed_forward": "FeedForward(d_model, d_ff, dropout)",
    **{f"norm{i}": "LayerNorm(d_model)" for i in (1, 2, 3)},
}
_BLOCK = Block(
    "DecoderLayer",
    ("self", "cross", "ff"),
    word={"self": "the masked self-attention", "cross": "the cross-attention", "ff": "the feed-forward"},
    short={"self": "self-attention", "cross": "cross-attention", "ff": "feed-forward"},
    attn={"self": ("in", "in", "self_attn", "tgt_mask"), "cross": ("in", "memory", "cross_attn", "memory_mask")},
    lost={
        "self": "the self-attention ignores tgt_mask, so every position sees the future (and padding) target "
        "tokens. Pass tgt_mask to self_attn.",
        "cross": "the cross-attention ignores memory_mask, so target positions attend to source padding. Pass "
        "memory_mask to cross_attn.",
    },
    names={("sub-layer reads the layer input", "ff"): "feed-forward on the layer input"},  # as in EncoderLayer
)
_OWN_CAUSAL = ("with tgt_mask=None your layer still masks the future: it builds its own causal mask. Use the "
               "tgt_mask it is given (None = attend everywhere); the caller builds the causal mask.")  # trial C's W16
_CROSS_CAUSAL = ("the cross-attention also gets a causal mask: the causal mask hides future *target* tokens, and only "
                 "the masked self-attention reads target tokens; every target position may read the whole source "
                 "sentence, so the cross-attention gets memory_mask alone: cross_attn(h, memory, memory, memory_mask).")
_MEANINGS = {  # this module's own names (those of the generated families: ._blocks.MEANINGS)
    "own causal mask": "a decoder layer or stack builds its own causal mask instead of using tgt_mask",
    "fails when lengths differ": "the code fails when L_src differs from L_tgt",
    "causal mask on the cross-attention": "the causal mask also reaches the decoder's cross-attention",
}
_MASKS = ("tgt_mask", "memory_mask")


def _layer_with(attn: dict[str, tuple[str, str, str, str]], when: Callable[[Any], bool]) -> Reference:
    """The case's reference layer with these attention inputs, on the cases where ``when(case)``
    (the case's ``masks`` hold "causal", "cross causal" and "memory_mask & cross causal" too)."""
    return Reference(lambda c: [({}, lambda: run_block(c.ref, _BLOCK, c.x, c.memory, c.masks, c.norm_first,
                                                       {"attn": attn}))] if when(c) else [], "values")


_LENGTHS = Entry("fails when lengths differ", None, Output(lambda p: matches(p.got, p.expected), "lengths"),
                 "{head}and the right output: it only works when source and target have the same length. Queries "
                 "(and the output) have the target's length L_tgt; keys and values come from `memory`, of length "
                 "L_src; tgt_mask is (L_tgt, L_tgt), memory_mask (.., L_src).")
# after the generated names: where the inputs run (the cause of a failure with L_src != L_tgt named from the tables)
_RUN_PROBES = [*ATTENTION_PROBES, _LENGTHS, Entry("input modified in place", None, Probe("check_unchanged")),
               Entry("parameters modified in place", None, Probe("check_state_unchanged")),
               Entry("wrong return", None, Probe("tuple_return")), *EVAL_DROPOUT_PROBE]

DL = Catalogue("DecoderLayer", "05", declared([
    Entry("not a class", None, Probe("require_module_class")),
    Entry("not a class", None, Probe("build_student")),
    *COURSE_PARTS_PROBE,
    Entry("modules shared", None, Probe("require_distinct_roles")),
    *LOAD_REFERENCE_PROBE,
    *_RUN_PROBES,
    # the output is the reference's with one mistake: the layer's own causal mask (only when tgt_mask is None), the
    # generated families (._blocks) for each norm_first and masks given, the causal mask on the cross-attention
    Entry("own causal mask", None, _layer_with({"self": ("in", "in", "self_attn", "causal")},
                                               lambda c: "tgt_mask" not in c.present), _OWN_CAUSAL),
    *block_entries(_BLOCK, _MASKS),
    Entry("causal mask on the cross-attention", None,
          _layer_with({"cross": ("in", "memory", "cross_attn", "cross causal")}, lambda c: True), _CROSS_CAUSAL),
    Entry("causal mask on the cross-attention", None,
          _layer_with({"cross": ("in", "memory", "cross_attn", "memory_mask & cross causal")},
                      lambda c: "memory_mask" in c.present), _CROSS_CAUSAL),
    *GRADIENT_PROBE,
    # dropout = P_PROBE in training mode: where the sub-layers' dropout goes; then 0 < p < 1
    *DROPOUT_MODES_PROBE,
    *dropout_entries(_BLOCK),
    *PART_DROPOUT_PROBE,
    *branch_dropout_probe(memory=True),
], ENCODER_TABLES, {**MEANINGS, **_MEANINGS}))


def _layer_outputs(ref: DecoderLayer, norm_first: bool) -> Outputs:
    def outputs(x: Tensor, memory: Tensor, tgt_mask: Tensor | None, memory_mask: Tensor | None) -> tuple[Tensor, list]:
        L_tgt, L_src = x.size(1), memory.size(1)
        rect = causal_mask(max(L_tgt, L_src))[:L_tgt, :L_src]  # (L_tgt, L_src): the causal mask cut to the source
        masks = {"tgt_mask": tgt_mask, "memory_mask": memory_mask, "causal": causal_mask(L_tgt), "cross causal": rect,
                 "memory_mask & cross causal": None if memory_mask is None else memory_mask & rect}
        present = frozenset(k for k in _MASKS if masks[k] is not None)
        case = SimpleNamespace(ref=ref, x=x, memory=memory, masks=masks, norm_first=norm_first, present=present,
                               drop=None)
        outputs = remembered([("", "", lambda: ref(x, memory, tgt_mask, memory_mask))]  # the reference first
                             + DL.candidates(case, "values"), "DecoderLayer", ref, x, memory, tgt_mask, memory_mask,
                             norm_first)
        return outputs[0][2](), outputs[1:]

    return outputs


def _build_layer(cls: Any, D: int, H: int, d_ff: int, p: float, norm_first: bool) -> nn.Module:
    shown = f"d_model={D}, num_heads={H}, d_ff={d_ff}, dropout={p}, norm_first={norm_first}"
    model = build_student(cls, "DecoderLayer", (D, H, d_ff), dict(dropout=p, norm_first=norm_first), shown)
    course_parts(model, "DecoderLayer")
    return model


def _layer_values(cls: Any, B: int, L_tgt: int, L_src: int, D: int, H: int, d_ff: int, norm_first: bool,
                  full: bool = True) -> None:
    """Eval mode: the reference's output in every mask case (else a generated structural
    mistake is named); ``full``: also the steps that cannot name one (shared roles, dropout
    left on in eval mode, the gradient probe)."""
    model = _build_layer(cls, D, H, d_ff, 0.1, norm_first)
    ref = reference(DecoderLayer, D, H, d_ff, 0.0, norm_first).eval()
    if full:
        require_distinct_roles(model, ref, "DecoderLayer")  # self.cross_attn = self.self_attn, ...
    params = load_reference(model, ref, "DecoderLayer", _LAYER_PARTS)
    sizes = (B, L_tgt, L_src, D)
    _run_mask_cases(model, "DecoderLayer", f"norm_first={norm_first}", sizes, _layer_outputs(ref, norm_first), DL,
                    full)
    if full:
        _gradient_case(model, ref, params, "DecoderLayer", f"norm_first={norm_first}", sizes)


def _layer_dropout(cls: Any, B: int, L_tgt: int, L_src: int, D: int, H: int, d_ff: int, norm_first: bool) -> None:
    def draw() -> tuple[Tensor, Tensor, dict[str, Tensor | None]]:
        x, memory = torch.randn(B, L_tgt, D), torch.randn(B, L_src, D)
        tgt_mask, memory_mask, _ = _masks(B, L_tgt, L_src, "padded")
        return x, memory, {"tgt_mask": tgt_mask, "memory_mask": memory_mask}

    layer_dropout(_BLOCK, lambda p: _build_layer(cls, D, H, d_ff, p, norm_first),
                  lambda p: reference(DecoderLayer, D, H, d_ff, p, norm_first), _LAYER_PARTS, draw,
                  lambda m, x, memory, masks: _call(m, x.clone(), memory.clone(), *masks.values()), norm_first, DL,
                  atol=1e-5)


@checker("DecoderLayer")
def check_decoder_layer(cls: Any) -> str:
    require_module_class(cls, "DecoderLayer")
    sizes = _sizes()
    for norm_first in (False, True):
        _layer_values(cls, *sizes, norm_first=norm_first)
    for norm_first in (False, True):  # after both settings' structure: the probe assumes it is right
        _layer_dropout(cls, *sizes, norm_first=norm_first)
    return "post-norm and pre-norm, with and without causal + padding masks, L_tgt != L_src, random weights"


_check_layer_stage = layer_stage("DecoderLayer", _sizes, _layer_values, _layer_dropout)


# ---------------------------------------------------------------- Decoder
_DECODER_PARTS = {"layers": "nn.ModuleList of num_layers DecoderLayer", "norm": "LayerNorm(d_model), only when norm_first=True"}  # noqa: E501
_STACK = Stack("Decoder", "DecoderLayer", ("tgt_mask", "memory_mask"), "x = layer(x, memory, tgt_mask, memory_mask)")
_OWN_CAUSAL_HEAD = {True: "with tgt_mask=None your Decoder still masks the future: it builds its own causal mask",
                    False: "your Decoder replaces the tgt_mask it is given with its own causal mask"}

DEC = Catalogue("Decoder", "05", declared([
    Entry("not a class", None, Probe("require_module_class")),
    *STACK_PROBES,
    *VERIFY_PART_PROBE,
    *_RUN_PROBES,
    # the output is the reference stack's with one generated mistake (._blocks), for each norm_first and masks
    # given, or with the stack's own causal mask in place of tgt_mask
    *stack_entries(_STACK, memory=True),
    Entry("own causal mask", None, Reference(lambda c: [({}, lambda: run_stack(
        c.ref, c.x, c.memory, c.with_causal, {"masks": ("causal", "memory_mask")}))], "values"),  # trial C's W13
          "{head}: pass tgt_mask on as it is (None = no mask); the caller builds it, causal and padding together."),
    Entry("unused final norm", None, Probe("unused_final_norm")),
    *GRADIENT_PROBE,
    *DROPOUT_MODES_PROBE,
    *stack_dropout_entries(),
], (*ENCODER_TABLES, DL), {**MEANINGS, **_MEANINGS}))


def _decoder_outputs(ref: Decoder, model: nn.Module, norm_first: bool) -> Outputs:
    def outputs(x: Tensor, memory: Tensor, tgt_mask: Tensor | None, memory_mask: Tensor | None) -> tuple[Tensor, list]:
        masks = {"tgt_mask": tgt_mask, "memory_mask": memory_mask}
        case = SimpleNamespace(ref=ref, x=x, memory=memory, masks=masks, norm_first=norm_first,
                               with_causal={**masks, "causal": causal_mask(x.size(1))},  # (L_tgt, L_tgt)
                               present=frozenset(k for k, v in masks.items() if v is not None),
                               own_norm=getattr(model, "norm", None), D=x.size(-1))
        return ref(x, memory, tgt_mask, memory_mask), DEC.candidates(case, "values",
                                                                     head=_OWN_CAUSAL_HEAD[tgt_mask is None])

    return outputs


def _verify_layers(model: nn.Module, ref: Decoder, sizes: tuple[int, ...]) -> None:
    """The student's own DecoderLayer class, layer by layer, against the reference's layer with
    the same parameters (without masks, then with causal + padding masks): a wrong layer is
    named as the cause before the Decoder's own output is judged."""
    B, L_tgt, L_src, D = sizes[:4]
    x, memory = torch.randn(B, L_tgt, D), torch.randn(B, L_src, D)
    for kind in ("none", "padded"):
        tgt_mask, memory_mask, _ = _masks(B, L_tgt, L_src, kind)
        for i, (layer, ref_layer) in enumerate(zip(model.layers, ref.layers)):
            verify_part(f"layers[{i}]", layer, ref_layer, (x, memory, tgt_mask, memory_mask), "Decoder",
                        "check_decoder_layer")


@checker("Decoder")
def check_decoder(cls: Any) -> str:
    require_module_class(cls, "Decoder")
    sizes = _sizes()
    B, L_tgt, L_src, D, H, d_ff = sizes
    N = randint(2, 3)
    for norm_first in (False, True):
        model, ref, params = build_stack(cls, _STACK, Decoder, (N, D, H, d_ff), 0.1, norm_first, _DECODER_PARTS)
        nf = f"norm_first={norm_first}, num_layers={N}"
        _verify_layers(model, ref, sizes)
        _run_mask_cases(model, "Decoder", nf, sizes, _decoder_outputs(ref, model, norm_first), DEC)
        unused_final_norm(model, norm_first, "Decoder")
        _gradient_case(model, ref, params, "Decoder", nf, sizes)
    model, ref, _ = build_stack(cls, _STACK, Decoder, (N, D, H, d_ff), P_PROBE, True, _DECODER_PARTS)
    x, memory = torch.randn(B, L_tgt, D), torch.randn(B, L_src, D)
    tgt_mask, memory_mask, _ = _masks(B, L_tgt, L_src, "padded")
    check_stack_dropout(model, ref, _STACK, lambda m, h: _call(m, h, memory.clone(), tgt_mask, memory_mask), x, DEC,
                        atol=1e-5)
    return "post-norm and pre-norm, 2-3 independent layers, with and without masks, random weights"


CATALOGUES = (DL, DEC)
MISTAKES: dict[str, list[str]] = {table.exercise: table.names() for table in CATALOGUES}  # generated


# ---------------------------------------------------------------- hints
register_hints("DecoderLayer", [
    "It is notebook 04's encoder layer with one more sub-layer in the middle: the same residual + "
    "layer-norm wrapping around each of three sub-layers (self_attn, cross_attn, feed_forward), each with "
    "its own norm. Which one reads `memory`, and which mask does each attention get?",
    "The order is: masked self-attention on x, then cross-attention, then the feed-forward. "
    "Post-norm (norm_first=False): x = norm_i(x + sublayer(x)); pre-norm: x = x + sublayer(norm_i(x)).",
    "Cross-attention: the queries come from the decoder's x, the keys and values from the "
    "encoder output `memory`. tgt_mask goes to the self-attention, memory_mask to the "
    "cross-attention. MultiHeadAttention returns (output, weights): keep the output.",
    "In pre-norm, normalise only x before each sub-layer (not memory), and add the sub-layer's "
    "output to the un-normalised x.",
])
register_hints("Decoder", [
    "Put your Encoder next to it: what extra input does every DecoderLayer take, and is it the same for every "
    "layer or does it change from one to the next? Which masks does each layer get?",
    "In forward, loop over self.layers and feed each layer's output to the next; every layer "
    "gets the same memory, tgt_mask and memory_mask.",
    "Create self.norm = LayerNorm(d_model) if norm_first else None, and at the end return "
    "self.norm(x) when there is one, x otherwise.",
])

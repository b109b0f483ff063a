"""Checkers for notebook 05 (the decoder): ``DecoderLayer`` and ``Decoder``.

Each checker builds the student's class itself with awkward random sizes (``B``,
``L_tgt``, ``L_src``, ``D`` and ``d_ff`` all different), in eval mode, for both
``norm_first`` values. Every learnable parameter is set to random values (LayerNorm's
ones and zeros would hide a norm used in the wrong place) and copied by name into the
reference (:class:`course_utils.DecoderLayer` / :class:`course_utils.Decoder`), so the
two must give the same numbers. Inputs: no masks; a causal + padding ``tgt_mask``
``(B, L_tgt, L_tgt)`` with a source-padding ``memory_mask`` ``(B, 1, L_src)`` that differs
per example; a plain causal ``(L_tgt, L_tgt)`` mask; and one case with ``L_src == L_tgt``
(where swapped masks or swapped cross-attention inputs run without an error). A wrong
output is compared with the reference computed *with each catalogued mistake*; the first
match is named. When the student's code raises only because ``L_src != L_tgt``, it is run
again with equal lengths to name the mistake behind the error.

Dropout is probed with ``dropout=P_PROBE`` (just below 1) as for the encoder (:mod:`._blocks`).

Catalogue (``CheckResult.mistake``):

* both: ``"not a class"``, ``"missing submodule"`` (a contract submodule is absent or
  renamed), ``"unexpected parameters"``, ``"wrong parameter shape"``, ``"wrong return"``
  (a tuple instead of one tensor), ``"dropout ignores eval mode"``, ``"hard-coded dropout p"``,
  ``"input modified in place"``, ``"fails when lengths differ"``.
* ``DecoderLayer``: the generated families of :mod:`._blocks` (the encoder's, plus
  ``"cross-attention queries from memory"``, ``"cross-attention ignores memory"``,
  ``"memory normalised"``, ``"masks swapped"`` (also one mask given to both attentions),
  ``"tgt_mask not passed"``, ``"memory_mask not passed"``, ``"masks not passed"``,
  ``"module reused"`` (``self_attn`` as the cross-attention or the other way round),
  ``"sub-layer reads the layer input"`` (the cross-attention's queries from ``x``; the
  feed-forward's is ``"feed-forward on the layer input"``, as in ``EncoderLayer``)),
  ``"dropout not passed on"``.
* ``Decoder``: ``"missing layers"``, ``"layers not registered"``, ``"wrong container"``,
  ``"wrong number of layers"``, ``"layers shared"``, ``"norm_first not passed on"``,
  ``"missing final norm"`` (pre-norm), ``"final norm in post-norm"``, ``"unused final
  norm"``, ``"final norm inside the loop"``, ``"masks not passed on"``, ``"masks
  swapped"``, ``"memory not passed to every layer"`` (also each layer's output fed to the
  next as memory), ``"one layer applied repeatedly"``, ``"only the first layer applied"``,
  ``"layer outputs not chained"``, ``"layers not applied"``, ``"dropout missing"``,
  ``"dropout on the input"``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from ..attention import causal_mask
from ..decoder import Decoder, DecoderLayer
from ._blocks import (
    INPUT_DROPOUT,
    P_PROBE,
    P_RATE,
    Block,
    Stack,
    check_dropout,
    check_dropout_modes,
    check_part_dropout,
    sublayer_dropout_rates,
    dropout_mistakes,
    once,
    remembered,
    run_block,
    run_stack,
    stack_mistakes,
    stack_structure,
    structural_mistakes,
    unused_final_norm,
    zeros,
)
from ._pairing import build_student, load_reference
from ._core import (
    Mistake,
    StudentError,
    call_student,
    check_unchanged,
    checker,
    describe_shape,
    expect_close,
    fail,
    gradient_probe,
    matches,
    raised,
    randint,
    register_hints,
    require_distinct_roles,
    require_module_class,
)

__all__ = ["check_decoder_layer", "check_decoder"]


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
    if isinstance(got, (tuple, list)):
        inner = ", ".join(describe_shape(t) for t in got[:3])
        fail(
            f"{what} should return one tensor (B, L_tgt, D); yours returned a {type(got).__name__} "
            f"({inner}). MultiHeadAttention returns (output, weights): keep only the output, [0].",
            mistake="wrong return",
        )


def _dims() -> tuple[int, int, int, int, int, int]:
    """``B, H, d_k, L_tgt, L_src, d_ff`` with ``B, L_tgt, L_src, D = H*d_k, d_ff`` all different."""
    while True:
        B, H, d_k = randint(2, 4), randint(2, 3), randint(3, 5)
        L_tgt, L_src, d_ff = randint(4, 7), randint(4, 8), randint(8, 20)
        sizes = [B, L_tgt, L_src, H * d_k, d_ff]
        if len(set(sizes)) == len(sizes):
            return B, H, d_k, L_tgt, L_src, d_ff


def _masks(B: int, L_tgt: int, L_src: int, kind: str) -> tuple[Tensor | None, Tensor | None, str]:
    if kind == "none":
        return None, None, "no masks"
    memory_mask = trailing_padding(B, L_src)  # (B, 1, L_src)
    if kind == "causal":
        return causal_mask(L_tgt), memory_mask, f"tgt_mask causal ({L_tgt}, {L_tgt}), memory_mask ({B}, 1, {L_src})"
    tgt_mask = trailing_padding(B, L_tgt) & causal_mask(L_tgt)  # (B, L_tgt, L_tgt)
    return tgt_mask, memory_mask, (
        f"tgt_mask causal + padding ({B}, {L_tgt}, {L_tgt}), memory_mask padding ({B}, 1, {L_src})"
    )


def _call(model: Callable[..., Any], x: Tensor, memory: Tensor, tgt_mask: Tensor | None, memory_mask: Tensor | None, context: str) -> Any:
    if tgt_mask is None and memory_mask is None:
        return call_student(model, x, memory, context=context)  # the masks' defaults must work
    return call_student(model, x, memory, tgt_mask, memory_mask, context=context)


def _run_case(
    model: nn.Module,
    what: str,
    x: Tensor,
    memory: Tensor,
    tgt_mask: Tensor | None,
    memory_mask: Tensor | None,
    case: str,
    expected_fn: Callable[..., Tensor],
    mistakes_fn: Callable[..., list[Mistake]],
    probe: Callable[[StudentError], None] | None,
    full: bool = True,
) -> None:
    """One forward: compare with the reference, name a catalogued mistake, or probe an error
    (``full``: also a second call, for dropout left on in eval mode)."""
    args = (x, memory, tgt_mask, memory_mask)
    names = ["x", "memory", "tgt_mask", "memory_mask"]
    originals = tuple(a.clone() if isinstance(a, Tensor) else a for a in args)
    context = f"running forward ({case})"
    with torch.no_grad():
        expected = expected_fn(*originals)  # (B, L_tgt, D)
        try:
            got = _call(model, *args, context=context)
        except StudentError as err:
            if probe is not None and not isinstance(err.exc, NotImplementedError):
                probe(err)
            raise
        check_unchanged(names, args, originals, case)
        tuple_return(got, what)
        if full:
            check_dropout(lambda: _call(model, *originals, context=context), got, expected)
        expect_close("output", got, expected, mistakes_fn(*originals), case=case)


def _run_mask_cases(
    model: nn.Module,
    what: str,
    settings: str,
    B: int,
    L_tgt: int,
    L_src: int,
    D: int,
    expected_fn: Callable[..., Tensor],
    mistakes_fn: Callable[..., list[Mistake]],
    full: bool = True,
) -> None:
    """:func:`_run_case` without masks, with padding and with causal + padding masks
    (``L_tgt != L_src``), then with equal lengths, where swapped masks or swapped
    cross-attention inputs run without an error. ``settings`` starts every case's text."""
    for kind in ("none", "padded", "causal"):
        tgt_mask, memory_mask, words = _masks(B, L_tgt, L_src, kind)
        case = f"{settings}, x ({B}, {L_tgt}, {D}), memory ({B}, {L_src}, {D}), {words}"
        probe = _length_probe(model, what, B, L_tgt, D, kind != "none", expected_fn, mistakes_fn, case)
        x, memory = torch.randn(B, L_tgt, D), torch.randn(B, L_src, D)
        _run_case(model, what, x, memory, tgt_mask, memory_mask, case, expected_fn, mistakes_fn, probe, full)
    tgt_mask, memory_mask, words = _masks(B, L_tgt, L_tgt, "padded")
    case = f"{settings}, L_src = L_tgt = {L_tgt}, {words}"
    x, memory = torch.randn(B, L_tgt, D), torch.randn(B, L_tgt, D)
    _run_case(model, what, x, memory, tgt_mask, memory_mask, case, expected_fn, mistakes_fn, None, full)


def _gradient_case(model: nn.Module, ref: nn.Module, params: list[tuple[str, Tensor, Tensor]], what: str,
                   settings: str, B: int, L_tgt: int, L_src: int, D: int) -> None:
    """The gradient probe on a padded case (causal + padding: no query sees no key)."""
    tgt_mask, memory_mask, words = _masks(B, L_tgt, L_src, "padded")
    inputs = dict(x=torch.randn(B, L_tgt, D), memory=torch.randn(B, L_src, D), tgt_mask=tgt_mask, memory_mask=memory_mask)
    gradient_probe(model, ref, inputs, params, what=what, case=f"{settings}, {words}")


def _length_probe(
    model: nn.Module,
    what: str,
    B: int,
    L: int,
    D: int,
    masked: bool,
    expected_fn: Callable[..., Tensor],
    mistakes_fn: Callable[..., list[Mistake]],
    case: str,
) -> Callable[[StudentError], None]:
    """When the student's code raised with ``L_src != L_tgt``, run it with ``L_src == L_tgt``:
    a match with a catalogued mistake names what caused the error."""

    def probe(err: StudentError) -> None:
        x, memory = torch.randn(B, L, D), torch.randn(B, L, D)
        tgt_mask, memory_mask, _ = _masks(B, L, L, "padded" if masked else "none")
        try:
            with torch.no_grad():
                got = _call(model, x, memory, tgt_mask, memory_mask, context="probing")
                expected = expected_fn(x, memory, tgt_mask, memory_mask)
        except Exception:  # noqa: BLE001 - the probe only adds a diagnosis; the original error is reported
            return
        if not isinstance(got, Tensor):
            return
        head = (
            f"your {what} raised {raised(err.exc, inline=True)} ({case}). The check then tried it with "
            "L_src == L_tgt: there it runs without an error, "
        )
        if matches(got, expected):
            fail(
                head + "and the right output: it only works when source and target have the same "
                "length. Queries (and the output) have the target's length L_tgt; keys and values "
                "come from `memory`, of length L_src; tgt_mask is (L_tgt, L_tgt), memory_mask (.., L_src).",
                mistake="fails when lengths differ",
            )
        for name, diagnosis, candidate in mistakes_fn(x, memory, tgt_mask, memory_mask):
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
    "norm1": "LayerNorm(d_model)",
    "norm2": "LayerNorm(d_model)",
    "norm3": "LayerNorm(d_model)",
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


def _layer_functions(ref: DecoderLayer, norm_first: bool) -> tuple[Callable[..., Tensor], Callable[..., list[Mistake]]]:
    def expected(x: Tensor, memory: Tensor, tgt_mask: Tensor | None, memory_mask: Tensor | None) -> Tensor:
        return once(lambda: ref(x, memory, tgt_mask, memory_mask), "DecoderLayer", ref, x, memory, tgt_mask, memory_mask)

    def mistakes(x: Tensor, memory: Tensor, tgt_mask: Tensor | None, memory_mask: Tensor | None) -> list[Mistake]:
        masks = {"tgt_mask": tgt_mask, "memory_mask": memory_mask, "causal": causal_mask(x.size(1))}
        present = {k for k in ("tgt_mask", "memory_mask") if masks[k] is not None}
        own = [] if tgt_mask is not None else [(  # trial C's W16: tgt_mask=None replaced by a causal mask
            "own causal mask", "with tgt_mask=None your layer still masks the future: it builds its own causal "
            "mask. Use the tgt_mask it is given (None = attend everywhere); the caller builds the causal mask.",
            {"attn": {"self": ("in", "in", "self_attn", "causal")}})]
        return remembered([
            (name, text, lambda mut=mut: run_block(ref, _BLOCK, x, memory, masks, norm_first, mut))
            for name, text, mut in own + structural_mistakes(_BLOCK, norm_first, present)  # own: no mask only
        ], "DecoderLayer", ref, x, memory, tgt_mask, memory_mask, norm_first)

    return expected, mistakes


def _layer_dropout(cls: Any, B: int, L_tgt: int, L_src: int, D: int, H: int, d_ff: int, norm_first: bool) -> None:
    """Dropout with p = P_PROBE, as for the EncoderLayer (see :func:`check_dropout_modes`)."""
    shown = f"d_model={D}, num_heads={H}, d_ff={d_ff}, dropout={P_PROBE}, norm_first={norm_first}"
    model = build_student(cls, "DecoderLayer", (D, H, d_ff), dict(dropout=P_PROBE, norm_first=norm_first), shown)
    ref = DecoderLayer(D, H, d_ff, P_PROBE, norm_first)
    load_reference(model, ref, "DecoderLayer", _LAYER_PARTS)
    x, memory = torch.randn(B, L_tgt, D), torch.randn(B, L_src, D)
    tgt_mask, memory_mask, _ = _masks(B, L_tgt, L_src, "padded")
    masks = {"tgt_mask": tgt_mask, "memory_mask": memory_mask}
    check_dropout_modes(
        model, ref, lambda m: _call(m, x.clone(), memory.clone(), tgt_mask, memory_mask, "running forward (dropout)"),
        "DecoderLayer",
        lambda: remembered([
            (name, text, lambda mut=mut: run_block(ref, _BLOCK, x, memory, masks, norm_first, mut, drop=zeros))
            for name, text, mut in dropout_mistakes(_BLOCK, norm_first)
        ], "DecoderLayer dropout", ref, x, memory, tgt_mask, memory_mask, norm_first),
        eval_name="dropout ignores eval mode", quiet=("self_attn", "cross_attn", "feed_forward"), atol=1e-5,
        setting=f"norm_first={norm_first}, ", inputs=(x, memory, tgt_mask, memory_mask),
    )  # fmt: skip
    if not norm_first:  # the sub-modules are built the same way in both settings
        with torch.no_grad():
            y = ref.norm1(x)  # (B, L_tgt, D): a typical sub-layer input
        parts = {"self_attn": (y, y, y, tgt_mask), "cross_attn": (y, memory, memory, memory_mask), "feed_forward": (y,)}
        check_part_dropout(model, ref, parts, "DecoderLayer")
    shown = shown.replace(f"dropout={P_PROBE:g}", f"dropout={P_RATE:g}")
    model = build_student(cls, "DecoderLayer", (D, H, d_ff), dict(dropout=P_RATE, norm_first=norm_first), shown)
    sublayer_dropout_rates(
        model, lambda m: _call(m, x, memory, tgt_mask, memory_mask, "running forward (dropout)"), x,
        {"self_attn": True, "cross_attn": True, "feed_forward": False}, ("norm1", "norm2", "norm3"), _BLOCK, "DecoderLayer",
    )  # fmt: skip


def _layer_values(cls: Any, B: int, H: int, L_tgt: int, L_src: int, D: int, d_ff: int, norm_first: bool,
                  full: bool = True) -> None:
    """Eval mode: the reference's output in every mask case (else a generated structural
    mistake is named); ``full``: also the steps that cannot name one (shared roles, dropout
    left on in eval mode, the gradient probe)."""
    shown = f"d_model={D}, num_heads={H}, d_ff={d_ff}, dropout=0.1, norm_first={norm_first}"
    model = build_student(cls, "DecoderLayer", (D, H, d_ff), dict(dropout=0.1, norm_first=norm_first), shown)
    ref = DecoderLayer(D, H, d_ff, 0.0, norm_first).eval()
    if full:
        require_distinct_roles(model, ref, "DecoderLayer")  # self.cross_attn = self.self_attn, ...
    params = load_reference(model, ref, "DecoderLayer", _LAYER_PARTS)
    expected, mistakes = _layer_functions(ref, norm_first)
    _run_mask_cases(model, "DecoderLayer", f"norm_first={norm_first}", B, L_tgt, L_src, D, expected, mistakes, full)
    if full:
        _gradient_case(model, ref, params, "DecoderLayer", f"norm_first={norm_first}", B, L_tgt, L_src, D)


@checker("DecoderLayer")
def check_decoder_layer(cls: Any) -> str:
    require_module_class(cls, "DecoderLayer")
    B, H, d_k, L_tgt, L_src, d_ff = _dims()
    for norm_first in (False, True):
        _layer_values(cls, B, H, L_tgt, L_src, H * d_k, d_ff, norm_first)
    for norm_first in (False, True):  # after both settings' structure: the probe assumes it is right
        _layer_dropout(cls, B, L_tgt, L_src, H * d_k, H, d_ff, norm_first)
    return "post-norm and pre-norm, with and without causal + padding masks, L_tgt != L_src, random weights"


@checker("DecoderLayer")
def _check_layer_stage(cls: Any, stage: str, norm_first: bool) -> str:
    """One step of check_decoder_layer, for one ``norm_first``, on a draw of its own (as
    :func:`.encoder._check_layer_stage`). Private: a check cell runs the whole check."""
    require_module_class(cls, "DecoderLayer")
    B, H, d_k, L_tgt, L_src, d_ff = _dims()
    if stage == "values":
        _layer_values(cls, B, H, L_tgt, L_src, H * d_k, d_ff, norm_first, full=False)
    else:
        _layer_dropout(cls, B, L_tgt, L_src, H * d_k, H, d_ff, norm_first)
    return f"the {stage} step"


# ---------------------------------------------------------------- Decoder
_DECODER_PARTS = {
    "layers": "nn.ModuleList of num_layers DecoderLayer",
    "norm": "LayerNorm(d_model), only when norm_first=True",
}
_STACK = Stack("Decoder", "DecoderLayer", ("tgt_mask", "memory_mask"), "x = layer(x, memory, tgt_mask, memory_mask)")


def _decoder_functions(
    ref: Decoder, model: nn.Module, norm_first: bool
) -> tuple[Callable[..., Tensor], Callable[..., list[Mistake]]]:
    def expected(x: Tensor, memory: Tensor, tgt_mask: Tensor | None, memory_mask: Tensor | None) -> Tensor:
        return ref(x, memory, tgt_mask, memory_mask)

    def mistakes(x: Tensor, memory: Tensor, tgt_mask: Tensor | None, memory_mask: Tensor | None) -> list[Mistake]:
        masks = {"tgt_mask": tgt_mask, "memory_mask": memory_mask}
        present = {k for k, v in masks.items() if v is not None}
        own = getattr(model, "norm", None)
        with_causal = {**masks, "causal": causal_mask(x.size(1))}  # (L_tgt, L_tgt), only where a mutation names it
        causal = [(  # trial C's W13: the stack overrides tgt_mask
            "own causal mask", "your Decoder replaces the tgt_mask it is given with its own causal mask: pass "
            "tgt_mask on as it is (None = no mask); the caller builds it, causal and padding together.",
            {"masks": ("causal", "memory_mask")})]
        return [
            (name, text, lambda mut=mut: run_stack(ref, x, memory, with_causal if "masks" in mut else masks, mut))
            for name, text, mut in stack_mistakes(_STACK, norm_first, present, own, x.size(-1), True) + causal
        ]

    return expected, mistakes


def _build_decoder(
    cls: Any, N: int, D: int, H: int, d_ff: int, p: float, norm_first: bool
) -> tuple[nn.Module, Decoder, list[tuple[str, Tensor, Tensor]]]:
    """The student's Decoder, the reference with its parameters, and the named pairs."""
    shown = f"num_layers={N}, d_model={D}, num_heads={H}, d_ff={d_ff}, dropout={p:g}, norm_first={norm_first}"
    model = build_student(cls, "Decoder", (N, D, H, d_ff), dict(dropout=p, norm_first=norm_first), shown)
    stack_structure(model, N, norm_first, _STACK)
    ref = Decoder(N, D, H, d_ff, p, norm_first).eval()
    params = load_reference(model, ref, "Decoder", _DECODER_PARTS, optional_extra=() if norm_first else ("norm.",))
    return model, ref, params


@checker("Decoder")
def check_decoder(cls: Any) -> str:
    require_module_class(cls, "Decoder")
    B, H, d_k, L_tgt, L_src, d_ff = _dims()
    D = H * d_k
    N = randint(2, 3)
    for norm_first in (False, True):
        model, ref, params = _build_decoder(cls, N, D, H, d_ff, 0.1, norm_first)
        expected, mistakes = _decoder_functions(ref, model, norm_first)
        nf = f"norm_first={norm_first}, num_layers={N}"
        _run_mask_cases(model, "Decoder", nf, B, L_tgt, L_src, D, expected, mistakes)
        unused_final_norm(model, norm_first, "Decoder")
        _gradient_case(model, ref, params, "Decoder", nf, B, L_tgt, L_src, D)

    # dropout, pre-norm: with p = P_PROBE every layer's sub-layers vanish, so the stack is its final norm
    model, ref, _ = _build_decoder(cls, N, D, H, d_ff, P_PROBE, True)
    x, memory = torch.randn(B, L_tgt, D), torch.randn(B, L_src, D)
    tgt_mask, memory_mask, _ = _masks(B, L_tgt, L_src, "padded")
    with torch.no_grad():
        no_drop = ref.eval()(x, memory, tgt_mask, memory_mask)  # (B, L_tgt, D)
    check_dropout_modes(
        model, ref, lambda m: _call(m, x.clone(), memory.clone(), tgt_mask, memory_mask, "running forward (dropout)"),
        "Decoder",
        lambda: [("dropout missing", "no dropout is applied in training mode: pass dropout on to every "
                  "DecoderLayer, DecoderLayer(d_model, num_heads, d_ff, dropout, norm_first).", no_drop),
                 ("dropout on the input", INPUT_DROPOUT.format("Decoder"),
                  lambda: ref(torch.zeros_like(x), memory, tgt_mask, memory_mask))],
        setting="norm_first=True, ",
        eval_name="dropout ignores eval mode", atol=1e-5,
    )  # fmt: skip
    return "post-norm and pre-norm, 2-3 independent layers, with and without masks, random weights"


# ---------------------------------------------------------------- hints
register_hints(
    "DecoderLayer",
    [
        "Start from your EncoderLayer: same residual + layer-norm pattern, with one more sub-layer "
        "in the middle, so three sub-layers (self_attn, cross_attn, feed_forward) and three norms.",
        "The order is: masked self-attention on x, then cross-attention, then the feed-forward. "
        "Post-norm (norm_first=False): x = norm_i(x + sublayer(x)); pre-norm: x = x + sublayer(norm_i(x)).",
        "Cross-attention: the queries come from the decoder's x, the keys and values from the "
        "encoder output `memory`. tgt_mask goes to the self-attention, memory_mask to the "
        "cross-attention. MultiHeadAttention returns (output, weights): keep the output.",
        "In pre-norm, normalise only x before each sub-layer (not memory), and add the sub-layer's "
        "output to the un-normalised x.",
    ],
)
register_hints(
    "Decoder",
    [
        "Same structure as your Encoder: a stack of independent DecoderLayers in an nn.ModuleList "
        "(a new DecoderLayer(...) for each layer), plus a final norm only when norm_first=True.",
        "In forward, loop over self.layers and feed each layer's output to the next; every layer "
        "gets the same memory, tgt_mask and memory_mask.",
        "Create self.norm = LayerNorm(d_model) if norm_first else None, and at the end return "
        "self.norm(x) when there is one, x otherwise.",
    ],
)

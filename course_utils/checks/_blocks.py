"""One generator of residual-block mistakes for the encoder and decoder checkers.

A residual block (``EncoderLayer``: self-attention, feed-forward; ``DecoderLayer``:
self-attention, cross-attention, feed-forward) is a list of sub-layers, each wrapped as
``norm(x + dropout(f(x)))`` (post-norm) or ``x + dropout(f(norm(x)))`` (pre-norm).
:func:`run_block` computes such a block from the reference layer's own sub-modules with
any combination of deliberate changes (a *mutation*: a dict of the knobs below), and
:func:`structural_mistakes` / :func:`dropout_mistakes` generate the catalogue of
mutations, each with its name and plain-words diagnosis, from a :class:`Block` spec. The
checkers compare a wrong output with every generated mutation and name the first match.

Knobs of a mutation (absent = correct):

``order``      the sub-layers' order; ``norm_of``: which norm (0-based) each *position* uses
``skip``       a sub-layer left out (or a tuple of them)
``end``        a norm (0-based) applied once more to the layer's output (pre-norm's extra norm)
``place``      {kind: "post" | "pre" | "branch" | "stream" | "none"}: where its norm goes
               (``branch``: ``x + norm(f(x))``; ``stream``: ``x = norm(x); x = x + f(x)``)
``residual``   {kind: None | "input" | j}: no residual, the layer's input added back, or
               the stream after the first ``j`` sub-layers (an earlier stream than the last)
``source``     {kind: "input" | "raw"}: the sub-layer reads the layer's input, or the
               previous sub-layer's raw output, instead of the stream
``attn``       {kind: (query, key/value, module, mask)}: an attention's inputs
               (``"in"``, ``"x"`` the layer input, ``"memory"``, ``"normed memory"``; a
               ``(key, value)`` pair when they differ), the module that computes it and the mask it gets
``drop``       {kind: None | "sum" | "in"}: where the sub-layer's dropout goes (none, on
               the residual sum, on the sub-layer's input instead of its output)
``ff``         a function computed in place of ``ref.feed_forward`` (another activation)

With ``drop=zeros`` every dropout zeroes its input, as at ``p =`` :data:`P_PROBE`, so a dropout
placement gives deterministic numbers: the checkers' training-mode probe.

The checkers' tables (:mod:`.catalogue`) hold the generated members as entries, setting by
setting (``norm_first``, the masks given) in the order tried: :func:`block_entries`,
:func:`dropout_entries`, :func:`stack_entries`, :func:`stack_dropout_entries`; the names this
module's shared probes report are listed by the ``*_PROBE(S)`` entry lists, and
:data:`MEANINGS` declares them all (:func:`declared`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import torch
from torch import Tensor, nn

from ._core import (
    StudentError,
    call_student,
    checker,
    describe_shape,
    drawn_once,
    dropout_scale,
    equal,
    expect_close,
    fail,
    isnan,
    matches,
    raised,
    require_module_class,
    student_line,
)
from ._pairing import build_student, load_reference
from .catalogue import Catalogue, Entry, Probe, Reference, literal

Mutation = dict[str, Any]


@dataclass(frozen=True)
class Block:
    """What the generator needs to know about one kind of layer. ``kinds``: the sub-layers in
    their right order. ``word``: each one in a sentence ("the feed-forward"); ``short``: as an
    adjective ("feed-forward block"). ``attn``: each attention's (query, key/value, module,
    mask). ``lost``: what a lost mask means. ``names``: catalogue names kept from before the
    generator, ``{family or (family, kind): name}``."""

    what: str
    kinds: tuple[str, ...]
    word: dict[str, str]
    short: dict[str, str]
    attn: dict[str, tuple[str, str, str, str | None]]
    lost: dict[str, str]
    names: dict[Any, str] = field(default_factory=dict)

    def name(self, family: str, kind: str | None = None) -> str:
        return self.names.get((family, kind), self.names.get(family, family))

    def norm(self, i: int) -> str:
        return f"norm{i + 1}"

    @property
    def parts(self) -> dict[str, bool]:
        """The sub-layers' module names -> whether it returns ``(output, weights)``."""
        return {**{self.attn[k][2]: True for k in self.kinds if k != "ff"}, "feed_forward": False}

    @property
    def part_word(self) -> dict[str, str]:
        return {"feed_forward": self.word.get("ff", "the feed-forward"), **{a[2]: self.word[k] for k, a in self.attn.items()}}  # noqa: E501


# ---------------------------------------------------------------- the block, computed
def run_block(ref: nn.Module, spec: Block, x: Tensor, memory: Tensor | None, masks: dict[str, Tensor | None],
              norm_first: bool, mutation: Mutation | None = None,
              drop: Callable[[Tensor], Tensor] | None = None) -> Tensor:
    """``ref``'s block on ``x`` (``(B, L, D)``) with ``mutation`` applied; ``masks`` maps
    the names used in ``spec.attn`` to tensors. ``drop`` is the sub-layers' dropout
    (default: none, as in eval mode; :func:`zeros` is dropout at :data:`P_PROBE`)."""
    m = mutation or {}
    kinds = spec.kinds
    order = m.get("order", kinds)
    norms = [getattr(ref, spec.norm(i)) for i in range(len(kinds))]
    norm_of = m.get("norm_of") or tuple(kinds.index(k) for k in order)
    place = {k: m.get("place", {}).get(k, "pre" if norm_first else "post") for k in kinds}
    drop_at = {k: m.get("drop", {}).get(k, "out") for k in kinds}
    drop = drop or (lambda t: t)

    skipped = m.get("skip", ())
    skipped = (skipped,) if isinstance(skipped, str) else skipped
    h = raw = x  # (B, L, D): the stream, and the last sub-layer's own output
    streams = [x]  # the stream after each sub-layer: streams[j] after the first j
    for pos, k in enumerate(order):
        if k in skipped:
            continue
        norm = norms[norm_of[pos]]
        src = {"stream": h, "input": x, "raw": raw}[m.get("source", {}).get(k, "stream")]
        if place[k] == "stream":
            h = src = norm(h)
        inp = norm(src) if place[k] == "pre" else src
        if drop_at[k] == "in":
            inp = drop(inp)
        if k == "ff":
            out = m.get("ff", ref.feed_forward)(inp)  # (B, L, D)
        else:
            q, kv, module, mask = m.get("attn", {}).get(k, spec.attn[k])
            key, val = kv if isinstance(kv, tuple) else (kv, kv)  # a pair: keys and values from different tensors
            value = {"in": inp, "x": x, "memory": memory}
            if "normed memory" in (key, val):
                value["normed memory"] = norm(memory)
            given = masks.get(mask.lstrip("~")) if mask else None
            given = ~given if given is not None and mask.startswith("~") else given  # "~mask": inverted
            out = getattr(ref, module)(value[q], value[key], value[val], given)[0]
        if place[k] == "branch":
            out = norm(out)
        if drop_at[k] == "out":
            out = drop(out)
        residual = m.get("residual", {}).get(k, "stream")
        base = streams[residual] if isinstance(residual, int) else {"stream": h, "input": x}.get(residual)
        total = out if residual is None else base + out  # (B, L, D)
        if drop_at[k] == "sum":
            total = drop(total)
        h, raw = (norm(total) if place[k] == "post" else total), out
        if drop_at[k] == "after":  # dropout(norm(x + sublayer(x))): the normalised stream dropped
            h = drop(h)
        streams.append(h)
    return h if "end" not in m else norms[m["end"]](h)


# ---------------------------------------------------------------- outputs shared between checks
# A wrong layer is compared with every catalogued mistake, each a forward of the reference. Checks
# whose reference and inputs have the same numbers (a test's many students on one seed) compute each
# candidate once: the key is the content itself, so a verdict never depends on what ran before.
_OUTPUTS: dict[tuple, dict[int, Any]] = {}
_OUTPUTS_KEPT = 256


def _content(state: tuple[Any, ...]) -> tuple:
    parts: list[Any] = []
    for s in state:
        for m in s.modules() if isinstance(s, nn.Module) else ():  # its numbers and plain settings (norm_first, ...)
            parts += [*m._parameters.values(), *m._buffers.values()]
            parts.append(tuple((k, v) for k, v in vars(m).items() if k[0] != "_" and isinstance(v, (int, float, str))))
        if not isinstance(s, nn.Module):
            parts.append(s)
    return tuple((t.shape, t.dtype, t.detach().cpu().numpy().tobytes()) if isinstance(t, Tensor) else t for t in parts)


def _value(box: dict[int, Any], i: int, candidate: Any) -> Any:
    if i not in box:
        try:
            box[i] = candidate() if callable(candidate) else candidate
        except Exception:  # noqa: BLE001 - a mistake that cannot be computed (the callers skip None)
            box[i] = None
    return box[i]


def remembered(mistakes: list[tuple[str, str, Any]], *state: Any) -> list[tuple[str, str, Any]]:
    """``mistakes`` whose candidates are computed once per content of ``state`` (everything
    they depend on: modules, tensors, plain values)."""
    key = _content(state)
    box = _OUTPUTS[key] = _OUTPUTS.pop(key, {})  # the most recently used last: evicted last
    while len(_OUTPUTS) > _OUTPUTS_KEPT:
        del _OUTPUTS[next(iter(_OUTPUTS))]
    return [(name, text, functools.partial(_value, box, i, c)) for i, (name, text, c) in enumerate(mistakes)]


def once(compute: Callable[[], Any], *state: Any) -> Any:
    """``compute()``, computed once per content of ``state`` (see :func:`remembered`)."""
    return remembered([("", "", compute)], once, *state)[0][2]()  # `once` in the key: a box of its own


def reference(cls: type, *args: Any, **kwargs: Any) -> nn.Module:
    """``cls(*args, **kwargs)``, shared by the checks that build it from the same random state (as
    :func:`~._core.drawn_once`, which leaves the random state as if built): every check
    overwrites its parameters with the student's (:func:`load_reference`) and sets its mode."""
    return drawn_once(_built, cls=cls, args=args, keywords=tuple(sorted(kwargs.items())))


def _built(cls: type, args: tuple[Any, ...], keywords: tuple[tuple[str, Any], ...]) -> nn.Module:
    return cls(*args, **dict(keywords))


# ---------------------------------------------------------------- the catalogue, generated
def _form(norm_first: bool) -> str:
    return "x = x + sublayer(norm(x))" if norm_first else "x = norm(x + sublayer(x))"


def _stream_words(norm_first: bool, before: str = "") -> str:
    """The diagnosis of ``x = norm(x); x = x + sublayer(x)`` in the branch that made it."""
    where = f" before {before}" if before else ""
    if norm_first:
        return (f"the residual stream itself was normalised{where} (x = norm(x); x = x + sublayer(x)): only the "
                "sub-layer's input is normalised, x = x + sublayer(norm(x)), so x keeps flowing unnormalised.")
    return (f"in post-norm (norm_first=False) your layer normalises x{where} first and adds the sub-layer's result "
            "to the normalised x (h = norm(x); x = h + sublayer(h)): post-norm adds first and normalises the sum, "
            "x = norm(x + sublayer(x)).")


def _norm_words(spec: Block, norm_of: tuple[int, ...], order: tuple[str, ...]) -> str:
    return ", ".join(f"{spec.norm(i)} for {spec.word[k]}" for i, k in zip(norm_of, order))


def mask_misuses(right: dict[str, str], present: set[str]) -> list[tuple[dict[str, str | None], str, list[str]]]:
    """Every other assignment of the ``present`` masks (or none) to the slots of ``right``
    (``{slot: mask name}``): ``(got, head, lost)``; ``head`` is ``""`` unless a mask reaches
    a wrong slot, ``lost`` the slots that lost theirs."""
    out = []
    for combo in itertools.product([*sorted(present), None], repeat=len(right)):
        got = dict(zip(right, combo))
        lost = [k for k in right if got[k] is None and right[k] in present]
        if got == right or all(got[k] in (right[k], None) for k in right) and not lost:
            continue
        head = ""
        if any(got[k] not in (right[k], None) for k in right):
            swap = sorted(map(str, got.values())) == sorted(map(str, right.values()))
            head = "the masks are swapped" if swap else "a mask reaches the wrong place"
        out.append((got, head, lost))
    return out


def _mask_mistakes(spec: Block, present: set[str]) -> list[tuple[str, str, Mutation]]:
    attns = [k for k in spec.kinds if k != "ff"]
    right = {k: spec.attn[k][3] for k in attns}
    out = []
    for got, head, lost in mask_misuses(right, present):
        if head:
            said = "; ".join(f"{spec.word[k]} gets {got[k] or 'no mask'}" for k in attns)
            want = " and ".join(f"{right[k]} to {spec.word[k]}" for k in attns)
            name, text = "masks swapped", f"{head} ({said}): pass {want}."
        elif len(lost) == 1:
            name, text = spec.name(f"{right[lost[0]]} not passed"), spec.lost[lost[0]]
        else:
            want = " and ".join(f"{right[k]} to {spec.word[k]}" for k in attns)
            name, text = "masks not passed", f"neither mask has any effect: pass {want}."
        out.append((name, text, {"attn": {k: (*spec.attn[k][:3], got[k]) for k in attns}}))
    for k in attns:
        if right[k] in present:
            out.append(("inverted mask", f"{spec.word[k]} gets the inverted {right[k]} (~{right[k]}): in this course "
                        f"True = may attend, so pass {right[k]} as it is.",
                        {"attn": {k: (*spec.attn[k][:3], "~" + right[k])}}))
    if len(attns) > 1 and all(right[k] in present for k in attns):  # PyTorch's polarity for every mask
        inverted = ", ".join(f"~{right[k]}" for k in attns)
        kept = " and ".join(right[k] for k in attns)
        out.append(("inverted mask", f"every mask is inverted ({inverted}), PyTorch's polarity (in nn.Transformer "
                    f"and nn.MultiheadAttention True = blocked): in this course True = may attend, so pass {kept} "
                    "as they are.", {"attn": {k: (*spec.attn[k][:3], "~" + right[k]) for k in attns}}))
    return out


_CATALOGUES: dict[tuple[str, bool, frozenset[str]], list[tuple[str, str, Mutation]]] = {}


def structural_mistakes(spec: Block, norm_first: bool, present: set[str]) -> list[tuple[str, str, Mutation]]:
    """``(name, diagnosis, mutation)`` for every generated structural mistake of ``spec``'s
    block, in the order they are tried (the first match is reported). ``present``: the
    names of the masks given in this case. Made once per arguments: do not change it."""
    key = (repr(spec), norm_first, frozenset(present))
    if key not in _CATALOGUES:
        _CATALOGUES[key] = _structural_mistakes(spec, norm_first, present)
    return _CATALOGUES[key]


def _structural_mistakes(spec: Block, norm_first: bool, present: set[str]) -> list[tuple[str, str, Mutation]]:
    kinds, W, S = spec.kinds, spec.word, spec.short
    form = _form(norm_first)
    n = len(kinds)
    out: list[tuple[str, str, Mutation]] = _mask_mistakes(spec, present)
    if "cross" in kinds:
        q, kv, module, mask = spec.attn["cross"]
        for attn, name, text in (
            (("memory", "in"), "cross-attention queries from memory",
             "the cross-attention takes its queries from `memory` and its keys and values from `x`; it "
             "is the other way round: every target position (a query) looks at the source, so call "
             "cross_attn(x, memory, memory, memory_mask)."),
            (("in", "in"), "cross-attention ignores memory",
             "the cross-attention never looks at `memory`: its keys and values come from `x`, which "
             "makes it a second self-attention. Keys and values must come from the encoder output, `memory`."),
            (("in", "x"), "cross-attention ignores memory",
             "the cross-attention never looks at `memory`: its keys and values come from the layer's "
             "input x. Keys and values must come from the encoder output, `memory`."),
            (("in", ("memory", "in")), "cross-attention value from x",
             "the cross-attention takes its keys from `memory` but its values from `x`: the weights say which "
             "source tokens each target position looks at, and the values must be those tokens' vectors, so "
             "call cross_attn(x, memory, memory, memory_mask)."),
            (("in", ("in", "memory")), "cross-attention key from x",
             "the cross-attention takes its keys from `x` but its values from `memory`: the keys must come from "
             "the same tokens as the values, the encoder output, so call cross_attn(x, memory, memory, "
             "memory_mask)."),
            (("in", "normed memory"), "memory normalised",
             "the encoder output `memory` goes through the layer's norm before the cross-attention: "
             + ("normalise only the decoder's stream x (in pre-norm the encoder already ends with its own "
                "final norm): cross_attn(norm2(x), memory, memory, memory_mask)." if norm_first else
                "in post-norm the cross-attention reads x and memory as they are (memory already comes out of "
                "the encoder's last norm) and norm2 normalises the sum afterwards: x = norm2(x + "
                "cross_attn(x, memory, memory, memory_mask)).")),
        ):
            out.append((name, text, {"attn": {"cross": (*attn, module, mask)}}))
        for k, other in (("cross", "self"), ("self", "cross")):
            q, kv, _, mask = spec.attn[k]
            out.append(("module reused", f"{W[k]} is computed with self.{other}_attn, the module of {W[other]}: "
                        f"each attention sub-layer has its own weights, self.{k}_attn for {W[k]}.",
                        {"attn": {k: (q, kv, f"{other}_attn", mask)}}))
    for k in (k for k in kinds if norm_first and k != "ff" and spec.attn[k][:2] == ("in", "in")):
        out.append(("keys and values not normalised", f"{W[k]} normalises only its queries: the keys and values "
                    "are the un-normalised x. In pre-norm the sub-layer's whole input is normalised once, "
                    f"h = norm(x), and {W[k]} reads h three times: self_attn(h, h, h, mask).",
                    {"attn": {k: ("in", "x", *spec.attn[k][2:])}}))
        out.append(("query not normalised", f"{W[k]} normalises its keys and values but not its queries: "
                    "self_attn(x, h, h) reads the query from the un-normalised x. In pre-norm the sub-layer's "
                    f"whole input is normalised once, h = norm(x), and {W[k]} reads h three times: "
                    "self_attn(h, h, h, mask).", {"attn": {k: ("x", "in", *spec.attn[k][2:])}}))
    other = "post-norm" if norm_first else "pre-norm"
    out.append(("norm_first ignored", f"with norm_first={norm_first} your layer computes the {other} "
                f"version. norm_first=False is post-norm, x = norm(x + sublayer(x)); norm_first=True is "
                "pre-norm, x = x + sublayer(norm(x)). Branch on self.norm_first.",
                {"place": {k: "post" if norm_first else "pre" for k in kinds}}))
    if norm_first:
        for i in range(n):
            out.append(("extra norm at the layer end", f"the layer ends with an extra norm ({spec.norm(i)}(x) after "
                        "the last sub-layer): in pre-norm a layer returns the un-normalised stream, x = x + "
                        "sublayer(norm(x)) for each sub-layer and nothing after it; the one final norm belongs to "
                        f"the stack ({spec.what.removesuffix('Layer')}'s self.norm), after its last layer.", {"end": i}))  # noqa: E501
    out.append(("residual stream normalised", f"{_stream_words(norm_first)}", {"place": {k: "stream" for k in kinds}}))
    out.append(("norm on the branch", f"the norms sit on the sub-layers' outputs, x = x + norm(sublayer(x)); "
                f"they belong {'on the sub-layer input' if norm_first else 'after the residual add'}: {form}.",
                {"place": {k: "branch" for k in kinds}}))
    none_all = "neither sub-layer has" if n == 2 else "none of the sub-layers has"
    out.append(("missing residual", f"there are no residual connections: {none_all} a residual "
                f"connection; each one adds its input back, {form}.", {"residual": {k: None for k in kinds}}))
    for i, k in enumerate(kinds):
        prev = kinds[i - 1] if i else None
        out.append(("missing residual", f"{W[k]} sub-layer has no residual connection: add its input "
                    f"back around {W[k]}, {form}.", {"residual": {k: None}}))
        wrong = {"pre": "post", "post": "pre"}[("pre" if norm_first else "post")]
        for place, name, text in (
            (wrong, "pre- and post-norm mixed", f"{W[k]} sub-layer is {wrong}-norm while the layer is "
             f"built with norm_first={norm_first}: every sub-layer follows {form}."),
            ("branch", "norm on the branch", f"the norm of {W[k]} sits on its output, x + norm(sublayer(x)); "
             f"it belongs {'on the sub-layer input' if norm_first else 'after the residual add'}: {form}."),
            ("stream", "residual stream normalised", _stream_words(norm_first, W[k])),
            ("none", "norm missing", f"{W[k]}'s input is not normalised, or its result: {form}, with "
             f"{spec.norm(i)} for {W[k]}."),
        ):
            out.append((spec.name(name, k), text, {"place": {k: place}}))
        if prev is not None:
            out += [
                (spec.name("residual from the layer input", k), f"{W[k]} adds its result to the layer's "
                 f"input x instead of the {S[prev]} block's output: the residual is the stream after "
                 f"{W[prev]}.", {"residual": {k: "input"}}),
                (spec.name("sub-layer reads the layer input", k), f"{W[k]} reads the layer's input x (its "
                 f"original input) instead of the output of the {S[prev]} block: one sub-layer after the "
                 f"other, {form}.", {"source": {k: "input"}}),
                (spec.name("sub-layer reads a raw output", k), f"{W[k]} reads the raw output of {W[prev]}, "
                 f"without its residual{'' if norm_first else ' and norm'}: {form}, one sub-layer after "
                 "the other.", {"source": {k: "raw"}}),
            ]
        for j in range(1, i):  # an earlier stream than the previous block's output
            out.append(("residual from an earlier sub-layer", f"{W[k]} adds its result to the stream after "
                        f"{W[kinds[j - 1]]} instead of the {S[prev]} block's output: the residual is the stream "
                        f"{W[k]} reads, the one after {W[prev]}, {form}.", {"residual": {k: j}}))
        rest = " and ".join(W[j] for j in kinds if j != k)
        out.append((spec.name("sub-layer skipped", k), f"the {S[k]} result is never used: the output "
                    f"only contains {rest}. Feed each block's output on to the next.", {"skip": k}))
    if n > 2:  # GPT-J's parallel block: every sub-layer reads the layer input (pre-norm: their outputs summed)
        later = " and ".join(W[k] for k in kinds[1:])
        if norm_first:
            calls = " + ".join(f"{spec.attn[k][2] if k != 'ff' else 'feed_forward'}({spec.norm(i)}(x)"
                               f"{', ...' if k != 'ff' else ''})" for i, k in enumerate(kinds))
            how = f"the sub-layers run in parallel, each on the layer's input x (x + {calls}, GPT-J's parallel block)"
        else:
            how = f"{later} read the layer's input x, as if the sub-layers ran in parallel"
        out.append(("sub-layers in parallel", f"{how}: here they run one after the other, each reading the stream "
                    f"the one before it left, {form}: {', then '.join(W[k] for k in kinds)}.",
                    {"source": {k: "input" for k in kinds[1:]}}))
    for size in range(2, n):  # a partly written layer: only one sub-layer (or a few) done
        for gone in itertools.combinations(kinds, size):
            rest = " and ".join(W[j] for j in kinds if j not in gone)
            out.append(("sub-layer skipped", f"the {' and '.join(S[j] for j in gone)} results are never used: "
                        f"the output only contains {rest}. Every sub-layer's output feeds the next, {form}, "
                        f"{', then '.join(W[j] for j in kinds)}.", {"skip": gone}))
    natural = tuple(range(n))
    for order in itertools.permutations(kinds):
        if order != kinds:
            i = next(i for i, (a, b) in enumerate(zip(order, kinds)) if a != b)
            text = (f"{W[order[i]]} runs before {W[kinds[i]]}; the order is "
                    f"{', then '.join(W[k] for k in kinds)}.")
            for norm_of in dict.fromkeys((tuple(kinds.index(k) for k in order), natural)):
                out.append(("sub-layers in wrong order", text, {"order": order, "norm_of": norm_of}))
    for norm_of in itertools.product(natural, repeat=n):
        if norm_of == natural:
            continue
        used = _norm_words(spec, norm_of, kinds)
        moved = [i for i in natural if norm_of[i] != i]
        if len(set(norm_of)) < n:
            name, text = "same norm twice", f"the same norm is used for two sub-layers ({used}): "
        elif len(moved) == 2:
            i, j = moved
            name, text = spec.name("norms swapped"), f"{spec.norm(i)} and {spec.norm(j)} are swapped ({used}): "
        else:
            name, text = "norms in wrong order", f"the layer norms are mixed up ({used}): "
        right = ", ".join(f"{spec.norm(i)} with {W[k]}" for i, k in enumerate(kinds))
        out.append((name, text + f"use {right} (each learns its own scale).", {"norm_of": norm_of}))
    return out


def dropout_mistakes(spec: Block, norm_first: bool) -> list[tuple[str, str, Mutation]]:
    """Where a block's sub-layer dropout can go wrong, for :func:`run_block` with ``drop=zeros``."""
    W, kinds = spec.word, spec.kinds
    right = "x + dropout(sublayer(norm(x)))" if norm_first else "norm(x + dropout(sublayer(x)))"
    wrong_sum = "dropout(x + sublayer(norm(x)))" if norm_first else "norm(dropout(x + sublayer(x)))"
    out: list[tuple[str, str, Mutation]] = [
        ("dropout missing", "no dropout is applied to the sub-layers' outputs: apply nn.Dropout(dropout) "
         f"to each sub-layer's output before adding it to the residual, {right}.", {"drop": dict.fromkeys(kinds)}),
    ]
    for k in kinds:
        out.append(("dropout missing", f"no dropout is applied to {W[k]}'s output: every sub-layer's "
                    f"output goes through dropout before the residual add, {right}.", {"drop": {k: None}}))
    for where, name, text in (
        ("sum", "dropout on the residual stream", f"dropout reaches the residual stream x itself ({wrong_sum}, "
         f"or x = dropout(x) before a sub-layer); it goes on the sub-layer's output only: {right}."),
        ("in", "dropout on the sub-layer input", f"dropout is applied to the sub-layer's input instead of its "
         f"output; it goes on the output, before the residual add: {right}."),
    ):
        out.append((name, text, {"drop": dict.fromkeys(kinds, where)}))
        out += [(name, text, {"drop": {k: where}}) for k in kinds]
    if not norm_first:  # in pre-norm nothing follows the add: that is the residual stream's case above
        text = ("dropout is applied after the layer norm, to the whole normalised stream (dropout(norm(x + "
                f"sublayer(x)))), instead of to the sub-layer's output before the add: {right}.")
        # the last sub-layer only: after an earlier one the next sub-layer's input, the residual stream, is dropped
        out += [("dropout after the norm", text, {"drop": drop}) for drop in (dict.fromkeys(kinds, "after"),
                                                                              {kinds[-1]: "after"})]
    return out


def catalogue(spec: Block, present: set[str]) -> list[tuple[bool, str, str, Mutation]]:
    """Every generated mistake of ``spec``'s block, ``(norm_first, name, diagnosis,
    mutation)``, with all of ``present``'s masks given: for tests (the tables hold them as entries)."""
    return [(nf, *member) for nf in (False, True) for member in structural_mistakes(spec, nf, present) +
            dropout_mistakes(spec, nf)]


# ---------------------------------------------------------------- the generated families as table entries
def _subsets(masks: tuple[str, ...]) -> list[frozenset[str]]:
    """Every set of the ``masks`` a case can give (none first, all last)."""
    return [frozenset(c) for r in range(len(masks) + 1) for c in itertools.combinations(masks, r)]


def _on_case(norm_first: bool, present: frozenset[str] | None, make: Callable[[Any], Any]) -> Callable[[Any], list]:
    """A :class:`Reference` build that gives ``make(case)`` on the cases of this ``norm_first``
    with exactly the ``present`` masks given (``None``: whatever masks), no candidate on others."""
    def build(c: Any) -> list:
        if c.norm_first != norm_first or (present is not None and c.present != present):
            return []
        return [({}, lambda: make(c))]
    return build


def mutation_entry(spec: Block, name: str, text: str, mutation: Mutation, norm_first: bool,
                   present: frozenset[str] | None, stage: str) -> Entry:
    """One member of a residual block's generated families: the case's reference (``c.ref``) run
    by :func:`run_block` with ``mutation`` on ``c.x``, ``c.memory``, ``c.masks`` (dropout
    ``c.drop``: ``None`` in eval mode, :func:`zeros` at :data:`P_PROBE`)."""
    return Entry(name, None, Reference(_on_case(norm_first, present, lambda c: run_block(
        c.ref, spec, c.x, c.memory, c.masks, norm_first, mutation, drop=c.drop)), stage), literal(text))


def block_entries(spec: Block, masks: tuple[str, ...]) -> list[Entry]:
    """:func:`structural_mistakes` as entries of stage ``"values"``: for each setting (``norm_first``,
    which of ``masks`` are given) its members in the order tried, each tried on that setting only."""
    return [mutation_entry(spec, name, text, mut, nf, present, "values") for nf in (False, True)
            for present in _subsets(masks) for name, text, mut in structural_mistakes(spec, nf, set(present))]


def dropout_entries(spec: Block) -> list[Entry]:
    """:func:`dropout_mistakes` of both settings as entries of stage ``"dropout"`` (any masks)."""
    return [mutation_entry(spec, name, text, mut, nf, None, "dropout")
            for nf in (False, True) for name, text, mut in dropout_mistakes(spec, nf)]


def stack_entries(spec: Stack, memory: bool) -> list[Entry]:
    """:func:`stack_mistakes` as entries of stage ``"values"``, setting by setting as
    :func:`block_entries` (``memory``: the layers take one): the case's reference stack
    (``c.ref``) run by :func:`run_stack` on ``c.x``, ``c.memory`` and ``c.masks`` (``c.with_causal``
    for a mutation that names the masks); a final norm in post-norm is the student's own
    ``c.own_norm`` (when it is a module), then a plain one of width ``c.D``."""
    def make(mut: Mutation) -> Callable[[Any], Any]:
        def run(c: Any) -> Tensor:
            final = {_OWN_NORM: c.own_norm, _PLAIN_NORM: nn.LayerNorm(c.D, elementwise_affine=False)}
            m = {**mut, "final": final[mut["final"]]} if mut.get("final") in final else mut
            return run_stack(c.ref, c.x, c.memory, c.with_causal if "masks" in m else c.masks, m)
        return run

    out = []
    for nf in (False, True):
        for present in _subsets(spec.masks):
            for name, text, mut in _stack_members(spec, nf, set(present), memory):
                build = _on_case(nf, present, make(mut))
                if mut.get("final") == _OWN_NORM:  # only when the student's stack has a norm module
                    build = _own_norm_only(build)
                out.append(Entry(name, None, Reference(build, "values"), literal(text)))
    return out


def _own_norm_only(build: Callable[[Any], list]) -> Callable[[Any], list]:
    return lambda c: build(c) if isinstance(c.own_norm, nn.Module) else []


def declared(entries: Iterable[Entry], before: Iterable[Catalogue] = (),
             meanings: dict[str, str] | None = None) -> list[Entry]:
    """``entries`` with the meaning of :data:`MEANINGS` (or ``meanings``) on the first entry of
    each name that no table of ``before`` (an earlier exercise's) declares."""
    meanings = MEANINGS if meanings is None else meanings
    seen = {entry.name: entry.meaning for table in before for entry in table.entries if entry.meaning is not None}
    out = []
    for entry in entries:
        if entry.name in seen and entry.meaning == seen[entry.name]:  # an entry shared with an earlier table
            entry = dataclasses.replace(entry, meaning=None)
        elif entry.meaning is None and entry.name in meanings and entry.name not in seen:
            entry = dataclasses.replace(entry, meaning=meanings[entry.name])
        seen.setdefault(entry.name, entry.meaning)
        out.append(entry)
    return out


# the names this module's shared probes report, in the order a layer's or a stack's check runs them
def _probes(probe: str, *names: str) -> list[Entry]:
    return [Entry(name, None, Probe(probe)) for name in names]


COURSE_PARTS_PROBE = _probes("course_parts", "PyTorch MultiheadAttention", "wrong activation")
ATTENTION_PROBES = (_probes("attention_error", "PyTorch attention keyword", "mask head axis added",
                            "attention output not unpacked") + _probes("weights_used", "attention weights used"))
VERIFY_PART_PROBE = [*_probes("verify_part", "wrong submodule"), *ATTENTION_PROBES[:3]]
EVAL_DROPOUT_PROBE = _probes("check_dropout", "dropout ignores eval mode")
DROPOUT_MODES_PROBE = _probes("check_dropout_modes", "dropout ignores eval mode", "NaN", "hard-coded dropout p")
PART_DROPOUT_PROBE = _probes("check_part_dropout", "hard-coded dropout p", "dropout not passed on", "wrong submodule")
DROPOUT_RATE_PROBE = _probes("check_dropout_rate", "wrong dropout", "dropout applied twice", "hard-coded dropout p",
                             "wrong dropout rate")
LOAD_REFERENCE_PROBE = _probes("load_reference", "wrong parameter shape", "missing submodule", "unexpected parameters")
STACK_PROBES = [
    *_probes("build_stack", "not a class", "layer arguments swapped"),
    *_probes("stack_structure", "missing layers", "layers not registered", "wrong container", "wrong number of layers",
             "layers shared", "modules shared", "norm_first not passed on"),
    Entry("missing final norm", "no final norm where the contract has one (pre-norm)", Probe("stack_structure")),
    *COURSE_PARTS_PROBE,
    *LOAD_REFERENCE_PROBE,
]


def branch_dropout_probe(memory: bool) -> list[Entry]:
    """The names :func:`sublayer_dropout_rates` reports (``memory``: the layer reads one)."""
    return [*_probes("branch_input_dropout", *(["dropout on the memory"] if memory else []),
                     "dropout on the sub-layer input"), *DROPOUT_RATE_PROBE]


def stack_dropout_entries() -> list[Entry]:
    """A pre-norm stack at :data:`P_PROBE` in training mode (:func:`check_stack_dropout`; the case:
    ``no_drop``, the reference's eval output, and ``on_zeros``, the reference run on zeros)."""
    return [
        Entry("dropout missing", None, Reference(lambda c: [({}, c.no_drop)], "dropout"),
              "no dropout is applied in training mode: pass dropout on to every {layer}, {layer}(d_model, num_heads, "
              "d_ff, dropout, norm_first)."),
        Entry("dropout on the input", None, Reference(lambda c: [({}, c.on_zeros)], "dropout"),
              "your {what} applies dropout to its input x: the stack has no dropout of its own (the Transformer drops "
              "after adding the positional table, and every layer drops its sub-layers' outputs). Remove it."),
    ]


MEANINGS: dict[str, str] = {  # the names of the generated families and of the probes above, from the tables
    "PyTorch MultiheadAttention": "PyTorch's nn.MultiheadAttention in place of the course's MultiHeadAttention",
    "unexpected parameters": "learnable parameters the reference does not have",
    "PyTorch attention keyword": "an attention called with nn.MultiheadAttention's keywords (attn_mask=, "
    "key_padding_mask=)",
    "mask head axis added": "a layer unsqueezes its mask to (B, 1, L_q, L_k) before MultiHeadAttention, which adds "
    "the head axis itself",
    "attention output not unpacked": "MultiHeadAttention's (output, weights) pair used as a tensor",
    "attention weights used": "a layer takes the attention's weights ([1]) where it needs the output ([0])",
    "norm_first ignored": "the layer computes the other norm placement than norm_first asks for",
    "residual stream normalised": "the residual stream itself is normalised (x = norm(x))",
    "norm on the branch": "the norm sits on the sub-layer's output, x + norm(f(x))",
    "missing residual": "a residual connection is missing",
    "pre- and post-norm mixed": "one sub-layer pre-norm, another post-norm",
    "norm missing": "a sub-layer's norm is missing",
    "feed-forward on the layer input": "the feed-forward reads the layer's input (the attention result is lost)",
    "residual from the layer input": "a residual adds the layer's input instead of the stream",
    "sub-layer reads a raw output": "a sub-layer reads the previous sub-layer's raw output",
    "sub-layer skipped": "a sub-layer's result is never used",
    "sub-layers in wrong order": "the sub-layers run in another order",
    "same norm twice": "one norm used for two sub-layers",
    "norms swapped": "two norms exchanged",
    "mask not passed on": "the mask is not passed on to the attention or layers",
    "keys and values not normalised": "pre-norm self-attention with normalised queries but raw keys and values",
    "query not normalised": "pre-norm self-attention with normalised keys and values but the raw x as query",
    "extra norm at the layer end": "a pre-norm layer normalises its output once more after the last sub-layer",
    "dropout on the residual stream": "dropout reaches the residual stream, not only the sub-layer output",
    "dropout on the sub-layer input": "dropout on a sub-layer's input (query, key, value, norm input)",
    "dropout after the norm": "post-norm dropout(norm(x + sublayer(x))): the normalised stream dropped",
    "dropout not passed on": "a sub-module is built without the layer's dropout",
    "wrong dropout": "with 0 < p < 1, the entries are not each 0 or scaled by 1 / (1 - p): not one dropout",
    "dropout applied twice": "dropout applied two or more times to the same tensor",
    "wrong dropout rate": "a hand-written dropout zeroes another fraction than p",
    "layer arguments swapped": "a stack builds its layers with d_ff where num_heads goes (positional arguments out "
    "of order)",
    "missing layers": "the stack has no `layers`",
    "layers not registered": "layers kept in a Python list, not an nn.ModuleList",
    "wrong container": "layers kept in another container than nn.ModuleList",
    "wrong number of layers": "another number of layers than num_layers",
    "layers shared": "the same layer object or parameters used at several positions",
    "norm_first not passed on": "the stack's norm_first does not reach its layers",
    "final norm in post-norm": "a final norm applied with norm_first=False",
    "layer outputs not chained": "every layer reads the stack's input instead of the previous output",
    "only the first layer applied": "only the first layer is applied",
    "one layer applied repeatedly": "the first layer applied num_layers times",
    "layers in reverse order": "a stack runs its layers last to first",
    "layers not applied": "the layers are never applied",
    "final norm inside the loop": "the final norm applied after every layer",
    "final norm before the layers": "a pre-norm stack's final norm applied to its input, before the first layer",
    "unused final norm": "a final norm built but unused in post-norm",
    "dropout on the input": "a stack applies dropout to its own input",
    "cross-attention queries from memory": "cross-attention queries from memory, keys and values from x",
    "cross-attention ignores memory": "cross-attention keys and values not from memory",
    "cross-attention value from x": "cross-attention keys from memory but values from x",
    "cross-attention key from x": "cross-attention values from memory but keys from x",
    "memory normalised": "the encoder output goes through the decoder layer's norm",
    "module reused": "one attention module used for two roles",
    "sub-layer reads the layer input": "a sub-layer reads the layer's input instead of the stream",
    "residual from an earlier sub-layer": "a sub-layer's residual adds an older stream (h1), not the previous "
    "block's output",
    "sub-layers in parallel": "the sub-layers all read the layer input and their outputs are summed (GPT-J's "
    "parallel block)",
    "norms in wrong order": "the norms are assigned to the sub-layers in another order",
    "masks swapped": "masks passed to the wrong attentions or arguments",
    "tgt_mask not passed": "tgt_mask not passed on",
    "memory_mask not passed": "memory_mask not passed on",
    "masks not passed": "neither mask passed on",
    "dropout on the memory": "dropout applied to the encoder's output before the decoder reads it",
    "memory not passed to every layer": "later layers get another memory than the encoder output",
    "masks not passed on": "the decoder's masks are not passed on to its layers",
}


# ---------------------------------------------------------------- dropout probes (p close to 1)
# Every dropout that uses the given p zeroes its input (it keeps an entry with probability
# 1e-12), so training mode is deterministic. Not p = 1: a correct hand-written dropout,
# mask * x / (1 - p), divides by zero there (NaN, or ZeroDivisionError); here 1 - p is
# tiny but not 0, and a dropped entry is 0 * finite = 0.
P_PROBE = 0.999999999999


def zeros(t: Tensor) -> Tensor:
    """Dropout at :data:`P_PROBE`: every entry dropped."""
    return torch.zeros_like(t)


def check_dropout(call: Callable[[], Any], got: Any, expected: Tensor | None = None) -> None:
    """Two calls on the same input in eval mode must agree (``got`` is the first, ``call()``
    makes the second; skipped when ``got`` equals ``expected``), else dropout ignores eval mode."""
    if not isinstance(got, Tensor) or (expected is not None and matches(got, expected)):
        return
    again = call()
    if isinstance(again, Tensor) and again.shape == got.shape and not equal(again, got):
        fail("the same input gave two different outputs in eval mode: some dropout still runs after "
             "model.eval(). Use nn.Dropout modules (they switch off in eval mode), or pass "
             "training=self.training to F.dropout (its default, training=True, keeps it on in eval mode).",
             mistake="dropout ignores eval mode")


def _train(module: nn.Module, quiet: tuple[str, ...]) -> None:
    """Training mode, except the sub-modules named in ``quiet`` (their own dropout off)."""
    module.train()
    for name in quiet:
        part = getattr(module, name, None)
        if isinstance(part, nn.Module):
            part.eval()


def _first(out: Any) -> Any:
    return out[0] if isinstance(out, (tuple, list)) and len(out) > 0 else out


def _two_calls(run: Any, module: nn.Module, what: str, case: str) -> tuple[Any, bool]:
    """The output of a first call, and whether a second one gave exactly the same."""
    with torch.no_grad():
        a, b = _first(run(module)), _first(run(module))
    if not (isinstance(a, Tensor) and isinstance(b, Tensor) and a.shape == b.shape):
        return a, True
    if a.is_floating_point() and isnan(a).any():
        fail(f"your {what} gives NaN ({case}) where every dropout should give zeros. Use nn.Dropout(dropout), "
             "or F.dropout(h, self.p, training=self.training).", mistake="NaN")
    return a, bool(equal(a, b))


def _train_twice(run: Any, module: nn.Module, what: str, case: str) -> Any:
    got, same = _two_calls(run, module, what, case)
    if not same:
        fail(f"with dropout={P_PROBE} in training mode every dropout that uses the given p zeroes its "
             f"input, so two calls give the same output; your {what} gave two different ones ({case}): some "
             "dropout uses a fixed p (nn.Dropout(0.1), F.dropout(h, 0.1)) instead of the `dropout` argument. "
             "Store the argument and use it: nn.Dropout(dropout).", mistake="hard-coded dropout p")
    return got


def check_dropout_modes(model: nn.Module, ref: nn.Module, run: Any, what: str, train_mistakes: Any,
                        eval_name: str = "dropout ignores eval mode", quiet: tuple[str, ...] = (), atol: float = 1e-4,
                        setting: str = "", inputs: tuple[Any, ...] = ()) -> None:
    """``model`` and ``ref`` built with ``dropout = P_PROBE`` and the same parameters; ``run(module)``
    calls one on fixed inputs (``inputs``: then ``ref``'s outputs are :func:`remembered`). Eval mode
    must give ``ref``'s eval output (two calls alike); training mode (``quiet`` sub-modules in eval)
    its deterministic training output, else ``train_mistakes()`` (computed with ``ref`` in that
    state) names where the dropout went wrong. ``setting`` starts every case's text."""

    def outputs() -> tuple[Any, Any, Any]:
        with torch.no_grad():
            expected_eval = _first(run(ref.eval()))
            _train(ref, quiet)
            return expected_eval, _first(run(ref)), _first(run(ref.train()))

    expected_eval, expected_train, full = once(outputs, what, ref, quiet, *inputs) if inputs else outputs()
    eval_text = (f"in eval mode your {what} still applies dropout (with dropout={P_PROBE} it zeroes the sub-layers): "
                 "use nn.Dropout modules, which model.eval() switches off, or F.dropout(h, p, training=self.training).")
    try:
        case = f"{setting}eval mode, dropout={P_PROBE}"
        got, same = _two_calls(run, model.eval(), what, case)
        if not same:
            fail(f"in eval mode your {what} gives a different output every call ({case}): dropout is still "
                 "active. Use nn.Dropout modules (or F.dropout(..., training=self.training)) so that "
                 "model.eval() switches them off.", mistake=eval_name)
        expect_close("output", got, expected_eval, [(eval_name, eval_text, expected_train), (eval_name, eval_text, full)],  # noqa: E501
                     case=case, atol=atol)
        _train(model, quiet)
        _train(ref, quiet)
        case = f"{setting}training mode, dropout={P_PROBE}"
        if quiet:
            case += f" ({', '.join(quiet)} in eval mode, so only your {what}'s own dropout acts)"
        got = _train_twice(run, model, what, case)
        with torch.no_grad():
            expect_close("output", got, expected_train, train_mistakes(), case=case, atol=atol)
    finally:
        model.eval()
        ref.eval()


def check_part_dropout(model: nn.Module, ref: nn.Module, args: dict[str, tuple[Tensor, ...]], what: str) -> None:
    """Each sub-module in ``args`` (built by the layer with ``dropout = P_PROBE``), in training
    mode on its own, must drop like the reference's: the layer passes ``dropout`` on."""
    for name, part_args in args.items():
        part, rp = getattr(model, name), getattr(ref, name)
        case = f"`{name}` on its own in training mode, dropout={P_PROBE}"
        try:
            part.train()
            rp.train()
            context = f"running your {what}'s `{name}`"
            got = _train_twice(lambda m: call_student(m, *part_args, context=context), part, what, case)
            with torch.no_grad():
                expected = _first(rp(*part_args))
                without = _first(rp.eval()(*part_args))
        finally:
            part.eval()
            rp.eval()
        if matches(got, expected, atol=1e-4):
            continue
        if matches(got, without, atol=1e-4):
            built = "FeedForward(d_model, d_ff" if name == "feed_forward" else "MultiHeadAttention(d_model, num_heads"
            fail(f"your {what}'s `{name}` applies no dropout in training mode ({case}): the layer's dropout is "
                 f"not passed on to it. Build it with the layer's dropout: {built}, dropout).",
                 mistake="dropout not passed on")
        fail(f"your {what}'s `{name}` ({type(part).__name__}) does not drop like course_utils."
             f"{type(rp).__name__} ({case}, got {describe_shape(got)}): check its dropout on its own first.",
             mistake="wrong submodule")


# ---------------------------------------------------------------- errors with a known cause
# nn.MultiheadAttention's keywords: a PyTorch habit that the course's MultiHeadAttention refuses
_TORCH_ATTENTION_KEYWORDS = ("attn_mask", "key_padding_mask", "need_weights", "is_causal", "average_attn_weights")


def fail_on_keyword(exc: BaseException, keywords: tuple[str, ...], say: Callable[[str], str], mistake: str) -> None:
    """Fail with ``say(keyword)`` and the student's line, as ``mistake``, when ``exc`` is the TypeError of
    a call given one of ``keywords`` that the callee does not take (PyTorch's habits); else nothing."""
    used = next((k for k in keywords if f"unexpected keyword argument '{k}'" in str(exc)), None)
    if isinstance(exc, TypeError) and used is not None:
        line = student_line(exc)
        fail(say(used) + (f"\n    at {line}" if line else ""), mistake=mistake)


def torch_keyword(exc: BaseException, what: str, case: str) -> None:
    """Fail ("PyTorch attention keyword") when ``exc`` is the TypeError of an attention
    called with one of nn.MultiheadAttention's keywords (``attn_mask=``); else nothing."""
    fail_on_keyword(exc, _TORCH_ATTENTION_KEYWORDS, lambda used: (
        f"your {what} calls an attention with `{used}=` ({case}), a keyword of PyTorch's nn.MultiheadAttention, "
        "where True means *blocked*. The course's MultiHeadAttention has the signature forward(query, key, value, "
        "mask=None), with True = may attend: pass the mask as it is, self.self_attn(x, x, x, mask)."),
        "PyTorch attention keyword")


def attention_error(exc: BaseException, what: str, case: str) -> None:
    """Fail when ``exc`` has a known attention cause: one of nn.MultiheadAttention's keywords
    (:func:`torch_keyword`), or the ``(output, weights)`` pair used as a tensor (``"attention
    output not unpacked"``: dropout(), ``+`` or a norm given a tuple); else nothing."""
    torch_keyword(exc, what, case)
    added = re.search(r"mask of shape \((\d+), 1, (\d+), (\d+)\) cannot be broadcast", str(exc))
    if isinstance(exc, ValueError) and added:  # the Annotated Transformer's mask.unsqueeze(1)
        line = student_line(exc)
        fail(f"your {what} raised ValueError ({case}): {str(exc).strip().splitlines()[0]}"
             + (f"\n    at {line}" if line else "")
             + f"\n    The mask got a head axis, ({added[1]}, 1, {added[2]}, {added[3]}): MultiHeadAttention adds the "
             "head axis itself, so pass the mask as your layer received it, (B, L_q, L_k) or (B, 1, L_k), without "
             ".unsqueeze(1) (the Annotated Transformer's habit, whose attention does not add it).",
             mistake="mask head axis added")
    if isinstance(exc, (TypeError, AttributeError)) and "tuple" in str(exc):
        line = student_line(exc)
        fail(f"your {what} raised {type(exc).__name__} ({case}): {str(exc).strip().splitlines()[0]}"
             + (f"\n    at {line}" if line else "")
             + "\n    MultiHeadAttention returns a pair (output, weights): take the output, "
             "`self.self_attn(x, x, x, mask)[0]`, before the dropout and the residual add.",
             mistake="attention output not unpacked")


# activations other than the paper's ReLU that a FeedForward may hold as its `activation`
_OTHER_ACTIVATIONS = (nn.GELU, nn.SiLU, nn.Tanh, nn.Sigmoid, nn.ELU, nn.LeakyReLU, nn.Mish)


def course_parts(model: nn.Module, what: str) -> None:
    """A layer (or a stack of them) built from the course's parts: PyTorch's
    nn.MultiheadAttention in place of course_utils' MultiHeadAttention is named (its
    parameters and call differ), and so is a FeedForward built with another activation
    than ReLU (``activation='gelu'``: BERT's and GPT's, not the paper's)."""
    for name, m in model.named_modules():
        if isinstance(m, nn.MultiheadAttention):
            fail(f"your {what}'s `{name}` is PyTorch's nn.MultiheadAttention. The course's layers use the "
                 "MultiHeadAttention you wrote in notebook 02, as course_utils gives it: `from course_utils import "
                 "MultiHeadAttention`, MultiHeadAttention(d_model, num_heads, dropout), batch first, called as "
                 "self_attn(query, key, value, mask) with True = may attend; the check copies its parameters "
                 "(w_q, w_k, w_v, w_o) by name.", mistake="PyTorch MultiheadAttention")
        act = getattr(m, "activation", None)
        if name.rsplit(".", 1)[-1] == "feed_forward" and isinstance(act, _OTHER_ACTIVATIONS):
            fail(f"your {what}'s `{name}` uses {type(act).__name__} between its two linear layers (built with "
                 "activation='gelu'?): the paper's (and this exercise's) feed-forward uses ReLU, the default: "
                 "FeedForward(d_model, d_ff, dropout). GELU belongs to BERT (notebook 08) and GPT (notebook 09).",
                 mistake="wrong activation")


def verify_part(path: str, part: nn.Module, ref_part: nn.Module, args: tuple[Any, ...], what: str, check: str,
                atol: float = 1e-4) -> None:
    """A sub-module of the student's own class must give the reference's numbers on its own
    (same parameters), so that a bug in it is not blamed on the layer or stack using it;
    ``check`` is the checker that tests that class ("fix it first")."""
    if type(part) is type(ref_part):
        return
    kind = type(ref_part).__name__
    context = f"running your {what}'s `{path}` ({type(part).__name__}) on its own"
    with torch.no_grad():
        expected = ref_part(*args)
        try:
            got = call_student(part, *args, context=context)
        except StudentError as err:
            attention_error(err.exc, f"{type(part).__name__} (your {what}'s `{path}`)", context)
            raise
    if isinstance(expected, tuple):  # attention: compare the output, not the weights
        expected = expected[0]
        got = got[0] if isinstance(got, (tuple, list)) and len(got) > 0 else got
    if not matches(got, expected, atol=atol):
        fail(f"your {what}'s `{path}` is your own class {type(part).__name__}, and it does not give the "
             f"same numbers as course_utils.{kind} with the same parameters: your {type(part).__name__} may be the "
             f"cause. Run {check}({type(part).__name__}) first and fix what it reports, or build the {what} from "
             f"the reference: `from course_utils import {kind}`.", mistake="wrong submodule")


class _OutputTwice(nn.Module):
    """Stands in for an attention in :func:`weights_used`: ``(output, output)``, so that code
    taking the weights (``[1]``) gets the output."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        out = self.inner(*args, **kwargs)
        return (out[0], out[0]) if isinstance(out, (tuple, list)) and len(out) == 2 else out


def weights_used(model: nn.Module, names: Any, run: Callable[[nn.Module], Any], expected: Tensor, what: str,
                 exc: BaseException, case: str) -> None:
    """After ``run(model)`` raised ``exc``: with every attention in ``names`` returning its
    output in both places of its pair, a run that gives ``expected`` means the code took the
    attention weights (``[1]``, ``(B, H, L_q, L_k)``) for the output. Else nothing."""
    parts = {n: getattr(model, n, None) for n in names}
    if not all(isinstance(p, nn.Module) for p in parts.values()):
        return
    with swapped(model, {n: _OutputTwice(p) for n, p in parts.items()}), torch.no_grad():
        try:
            got = _first(run(model))
        except Exception:  # noqa: BLE001 - no verdict: the original error is reported
            return
    if isinstance(got, Tensor) and isinstance(expected, Tensor) and matches(got, expected, atol=1e-4):
        fail(f"your {what} raised {raised(exc, inline=True)} ({case}): it takes an attention's weights, `...[1]` "
             "of shape (B, H, L_q, L_k), where it needs the output, `[0]` of shape (B, L_q, D). MultiHeadAttention "
             "returns the pair (output, weights): self.self_attn(x, x, x, mask)[0]. (With the weights replaced "
             "by the output your layer gives the right numbers.)", mistake="attention weights used")


# ---------------------------------------------------------------- the layer checks' shared steps
def layer_dropout(spec: Block, build: Callable[[float], nn.Module], make_ref: Callable[[float], nn.Module],
                  parts: dict[str, str], draw: Callable[[], tuple[Tensor, Tensor | None, dict[str, Tensor | None]]],
                  forward: Callable[..., Any], norm_first: bool, table: Catalogue, atol: float = 1e-4) -> None:
    """A residual block's dropout. ``build(p)``: the student's layer with random parameters,
    ``make_ref(p)``: the reference; ``draw()``: ``x``, ``memory``, ``masks``; ``forward(m, x,
    memory, masks)`` runs a layer. At ``p = P_PROBE``: eval mode as the reference, training
    mode with the sub-modules' own dropout off zeroes each sub-layer's output and nothing
    else (else an entry of ``table``'s stage ``"dropout"`` is named, :func:`dropout_entries`),
    and in post-norm each sub-module drops on its own like the reference's (dropout passed
    on). At ``p = P_RATE``: one dropout of that rate on each sub-layer's output, none inside a
    branch."""
    model, ref = build(P_PROBE), make_ref(P_PROBE)
    load_reference(model, ref, spec.what, parts)
    x, memory, masks = draw()
    attns = [k for k in spec.kinds if k != "ff"]

    def run(m: nn.Module) -> Any:
        return forward(m, x, memory, masks)

    def mistakes() -> list[tuple[str, str, Any]]:
        case = SimpleNamespace(ref=ref, x=x, memory=memory, masks=masks, norm_first=norm_first, drop=zeros)
        return remembered(table.candidates(case, "dropout"), spec.what, ref, x, memory, *masks.values(), norm_first)

    check_dropout_modes(model, ref, run, spec.what, mistakes, quiet=tuple(spec.parts), atol=atol,
                        setting=f"norm_first={norm_first}, ", inputs=(x, memory, *masks.values()))
    if not norm_first:  # the sub-modules are built the same way in both settings
        with torch.no_grad():
            y = ref.norm1(x)  # (B, L, D): a typical sub-layer input
        kv = {k: y if spec.attn[k][1] == "in" else memory for k in attns}
        args = {spec.attn[k][2]: (y, kv[k], kv[k], masks[spec.attn[k][3]]) for k in attns}
        check_part_dropout(model, ref, {**args, "feed_forward": (y,)}, spec.what)
    sublayer_dropout_rates(build(P_RATE), run, x, spec)


def layer_stage(exercise: str, sizes: Callable[[], tuple[int, ...]], values: Callable[..., None],
                dropout: Callable[..., None]) -> Callable[..., Any]:
    """A private checker that runs one step of a layer's check for one ``norm_first`` on a
    draw of its own: the tests run every generated mistake on 20 draws with the step that
    names it, ``"values"`` (eval mode, only what can name a structural mistake:
    ``values(..., full=False)``) or ``"dropout"``. A check cell runs the whole check."""

    @checker(exercise)
    def _check_layer_stage(cls: Any, stage: str, norm_first: bool) -> str:
        require_module_class(cls, exercise)
        step = {"values": functools.partial(values, full=False), "dropout": dropout}[stage]
        step(cls, *sizes(), norm_first=norm_first)
        return f"the {stage} step"

    return _check_layer_stage


def check_stack_dropout(model: nn.Module, ref: nn.Module, spec: "Stack", run: Callable[[nn.Module, Tensor], Any],
                        x: Tensor, table: Catalogue, atol: float = 1e-4) -> None:
    """A stack built in pre-norm with ``dropout = P_PROBE``: every layer's sub-layers vanish,
    so the stack is its final norm. ``run(module, x)`` runs one on ``x`` (the other inputs fixed);
    a wrong training output is named from ``table``'s entries of stage ``"dropout"``
    (:func:`stack_dropout_entries`)."""
    with torch.no_grad():
        no_drop = run(ref.eval(), x)  # (B, L, D)
    case = SimpleNamespace(no_drop=no_drop, on_zeros=lambda: run(ref, torch.zeros_like(x)))
    check_dropout_modes(model, ref, lambda m: run(m, x.clone()), spec.what,
                        lambda: table.candidates(case, "dropout", what=spec.what, layer=spec.layer),
                        setting="norm_first=True, ", atol=atol)


# ---------------------------------------------------------------- stacks: Encoder, Decoder
@dataclass(frozen=True)
class Stack:
    """A stack of layers: ``what`` ("Encoder") of ``layer`` ("EncoderLayer"); ``masks``
    the mask arguments of ``layer(x, [memory,] *masks)``; ``names`` as in :class:`Block`."""

    what: str
    layer: str
    masks: tuple[str, ...]
    call: str
    names: dict[Any, str] = field(default_factory=dict)

    def name(self, family: str) -> str:
        return self.names.get(family, family)


def run_stack(ref: nn.Module, x: Tensor, memory: Tensor | None, masks: dict[str, Tensor | None],
              mutation: Mutation | None = None) -> Tensor:
    """``ref`` (an Encoder or Decoder) on ``x`` with ``mutation``: ``layers`` ("first only",
    "first repeated", "last only", "none", "reversed"), ``masks`` (the names passed to every layer;
    ``"masks first only"``: True, or the names of the masks that only the first layer gets), ``memory`` ("previous output": each
    layer's output is the next one's memory; "none"; "normed": through the final norm),
    ``final`` (None, "inside" the loop, "before" it, or a norm module in post-norm), ``flip``
    (the layers' norm_first flipped)."""  # noqa: E501
    m = mutation or {}
    layers = list(ref.layers)
    seq = {"first only": layers[:1], "first repeated": layers[:1] * len(layers), "last only": layers[-1:], "none": [],
           "reversed": layers[::-1]}
    seq = seq.get(m.get("layers", ""), layers)
    names = list(m.get("masks", masks))  # the mask each layer argument gets (None: no mask)
    args = [masks.get(k) if k else None for k in names]
    first_only = m.get("masks first only", ())  # True, or the masks that later layers do not get
    flip = m.get("flip", False)
    for layer in layers:
        layer.norm_first ^= flip
    try:
        h = ref.norm(x) if m.get("final") == "before" else x  # (B, L, D)
        for i, layer in enumerate(seq):
            given = [None if i and (first_only is True or k in first_only) else a for k, a in zip(names, args)]
            if memory is None:
                h = layer(h, *given)  # (B, L, D)
            else:
                mem = {"previous output": memory if i == 0 else h, "none": h}.get(m.get("memory", ""), memory)
                mem = ref.norm(memory) if m.get("memory") == "normed" else mem
                h = layer(h, mem, *given)  # (B, L_tgt, D)
            if m.get("final") == "inside":
                h = ref.norm(h)
    finally:
        for layer in layers:
            layer.norm_first ^= flip
    final = m.get("final", "ref")
    if final == "ref":
        return ref.norm(h) if ref.norm is not None else h
    return h if final in (None, "inside", "before") else final(h)


_OWN_NORM, _PLAIN_NORM = "the student's norm", "a plain norm"  # a post-norm stack's final norm, named


def stack_mistakes(spec: Stack, norm_first: bool, present: set[str], own_norm: Any, D: int,
                   memory: bool) -> list[tuple[str, str, Mutation]]:
    """``(name, diagnosis, mutation)`` for every generated mistake of a stack; ``own_norm``
    is the student's ``norm`` (tried as a final norm in post-norm), ``memory`` whether the
    layers take one."""
    final = {_OWN_NORM: own_norm, _PLAIN_NORM: nn.LayerNorm(D, elementwise_affine=False)}
    return [(name, text, {**mut, "final": final[mut["final"]]} if mut.get("final") in final else mut)
            for name, text, mut in _stack_members(spec, norm_first, present, memory)
            if mut.get("final") != _OWN_NORM or isinstance(own_norm, nn.Module)]


def _stack_members(spec: Stack, norm_first: bool, present: set[str], memory: bool) -> list[tuple[str, str, Mutation]]:
    """:func:`stack_mistakes` with a post-norm final norm named (``_OWN_NORM``, ``_PLAIN_NORM``)."""
    right = dict(zip(spec.masks, spec.masks))
    check = f"check_{spec.layer.lower().replace('layer', '_layer')}"
    out: list[tuple[str, str, Mutation]] = []
    for got, head, lost in mask_misuses(right, present):
        masks = tuple(got[k] for k in spec.masks)
        if head:
            said = ", ".join(f"{got[k] or 'None'} as {k}" for k in spec.masks)
            text = f"{head}: the layers get {said}; call {spec.call}, in that order."
            out.append(("masks swapped", text, {"masks": masks}))
        else:
            which = " and ".join(lost)
            out.append((spec.name("masks not passed on"), f"{which} {'has no effect: it is' if len(lost) == 1 else 'are'} "  # noqa: E501
                        f"not passed on to the layers: call {spec.call}. (If your {spec.what} does pass it, run "
                        f"{check} on your {spec.layer}.)", {"masks": masks}))
    if norm_first:
        out += [
            ("missing final norm", "the final layer norm is missing: with norm_first=True the output must go "
             "through the final norm after the last layer (in pre-norm the residual stream itself is never "
             "normalised): return self.norm(x).", {"final": None}),
            ("final norm inside the loop", "the final norm is applied after every layer; apply it once, after "
             "the loop.", {"final": "inside"}),
            ("final norm before the layers", "the final norm is applied to the input, before the loop: in pre-norm "
             "each layer normalises its own sub-layers' inputs, and the stack's one final norm comes after the last "
             "layer: for layer in self.layers: ...; then return self.norm(x).", {"final": "before"}),
            ("norm_first not passed on", f"your layers compute post-norm although the {spec.what} was built with "
             f"norm_first=True: pass norm_first on to every {spec.layer}.", {"flip": True}),
        ]
    else:
        text = ("a final norm is applied although norm_first=False: in post-norm every layer already ends with a "
                "norm, so the final norm exists only when norm_first=True.")
        out += [("final norm in post-norm", text, {"final": norm}) for norm in (_OWN_NORM, _PLAIN_NORM)]
    if present:
        which = " and ".join(k for k in spec.masks if k in present)
        out.append((spec.name("masks not passed on"), f"only the first layer gets {which}: every later layer runs "
                    f"without {'it' if len(present) == 1 else 'them'}. Pass the masks to every layer: {spec.call}.",
                    {"masks first only": True}))
        if len(present) > 1:  # one mask only to the first layer, the other to every layer
            out += [(spec.name("masks not passed on"), f"only the first layer gets {k}: every later layer runs without "
                     f"it. Pass the masks to every layer: {spec.call}.", {"masks first only": (k,)})
                    for k in spec.masks if k in present]
    if memory and norm_first:
        out.append(("memory normalised", "the encoder output `memory` goes through the decoder's final norm before "
                    "the layers read it: the final norm belongs after the last layer, on x only; memory goes to "
                    "every layer as it is (the encoder has already normalised it).", {"memory": "normed"}))
    if memory:
        out += [
            ("memory not passed to every layer", "only the first layer sees the encoder output: every later layer "
             "gets the previous layer's output as memory. Pass the same `memory` to every layer.",
             {"memory": "previous output"}),
            ("memory not passed to every layer", "no layer sees the encoder output: they get the decoder's own x "
             "as memory. Pass `memory` to every layer.", {"memory": "none"}),
        ]
    return out + [
        ("layer outputs not chained", "every layer reads the stack's input, so only the last layer's "
         f"result comes out: each layer must read the previous one's output, {spec.call}.", {"layers": "last only"}),
        ("only the first layer applied", "only the first layer is applied: loop over all of self.layers.",
         {"layers": "first only"}),
        ("one layer applied repeatedly", "the first layer is applied num_layers times: use each layer "
         f"once, for layer in self.layers: {spec.call}.", {"layers": "first repeated"}),
        ("layers in reverse order", "the layers run in reverse order (reversed(self.layers), or self.layers[::-1]): "
         f"the stack's input goes through layer 0 first, then layer 1, ...: for layer in self.layers: {spec.call}.",
         {"layers": "reversed"}),
        ("layers not applied", "the layers are never applied (or their results are thrown away): for layer in "
         f"self.layers: {spec.call}.", {"layers": "none"}),
    ]


def build_stack(cls: Any, spec: Stack, ref_cls: type, sizes: tuple[int, int, int, int], p: float, norm_first: bool,
                parts: dict[str, str]) -> tuple[nn.Module, nn.Module, list[tuple[str, Tensor, Tensor]]]:
    """The student's stack ``cls(num_layers, d_model, num_heads, d_ff)`` with random parameters,
    its structure checked (:func:`stack_structure`), the reference with its parameters, the pairs."""
    shown = ", ".join(f"{n}={v}" for n, v in zip(("num_layers", "d_model", "num_heads", "d_ff"), sizes))
    try:
        model = build_student(cls, spec.what, sizes, dict(dropout=p, norm_first=norm_first),
                              f"{shown}, dropout={p}, norm_first={norm_first}")
    except StudentError as err:
        _layer_arguments_swapped(err.exc, spec, sizes)
        raise
    stack_structure(model, sizes[0], norm_first, spec)
    course_parts(model, spec.what)
    ref = reference(ref_cls, *sizes, p, norm_first).eval()
    return model, ref, load_reference(model, ref, spec.what, parts, () if norm_first else ("norm.",))


def _layer_arguments_swapped(exc: BaseException, spec: Stack, sizes: tuple[int, int, int, int]) -> None:
    """A stack that builds its layers as ``Layer(d_model, d_ff, num_heads, ...)``: the
    attention then refuses ``num_heads = d_ff`` (the sizes make ``d_model % d_ff != 0``)."""
    D, H, d_ff = sizes[1:]
    if isinstance(exc, ValueError) and re.search(rf"num_heads = {d_ff}(?!\d)", str(exc)) and d_ff != H:
        layer = spec.layer
        fail(f"building {spec.what}(num_layers={sizes[0]}, d_model={D}, num_heads={H}, d_ff={d_ff}, ...) raised "
             f"ValueError: {str(exc).strip().splitlines()[0]}\n    The attention got num_heads = {d_ff}, the value "
             f"of d_ff: your {spec.what} passes d_ff where num_heads goes when it builds each {layer}. {layer} takes "
             f"(d_model, num_heads, d_ff, dropout, norm_first) in that order; keywords make "
             f"the call safe: {layer}(d_model=d_model, num_heads=num_heads, d_ff=d_ff, dropout=dropout, "
             "norm_first=norm_first).", mistake="layer arguments swapped")


def stack_structure(model: nn.Module, num_layers: int, norm_first: bool, spec: Stack) -> nn.ModuleList:
    """The contract's ``layers: nn.ModuleList`` of ``num_layers`` independent layers, and a
    final ``norm`` when ``norm_first``."""
    what, layer_cls = spec.what, spec.layer
    layers = getattr(model, "layers", None)
    if layers is None:
        fail(f"your {what} has no `layers`: keep the stack in self.layers = nn.ModuleList([...]) with one "
             f"{layer_cls} per layer.", mistake="missing layers")
    if isinstance(layers, (list, tuple)):
        fail(f"`layers` is a plain Python {type(layers).__name__}, so PyTorch does not register the layers: "
             "their parameters are not in model.parameters() (never trained), and neither .to(device) nor "
             ".eval() reaches them. Wrap it: self.layers = nn.ModuleList([...]).", mistake="layers not registered")
    if not isinstance(layers, nn.ModuleList):
        why = ""
        if isinstance(layers, nn.Sequential):
            why = (" Looping over an nn.Sequential would run, but calling it, self.layers(x), hands each layer "
                   "only x and never the mask; the exercise keeps the layers in a ModuleList that forward loops over.")
        fail(f"`layers` should be an nn.ModuleList (the exercise asks for `layers: nn.ModuleList`), got "
             f"{type(layers).__name__}.{why}", mistake="wrong container")
    if len(layers) != num_layers:
        fail(f"{what}(num_layers={num_layers}, ...) has {len(layers)} layer{'' if len(layers) == 1 else 's'} in "
             f"`layers`, expected {num_layers}.",
             mistake="wrong number of layers")
    if len({id(layer) for layer in layers}) < len(layers):
        fail(f"the same {layer_cls} object appears several times in `layers` (e.g. [layer] * {num_layers}, or "
             "appending one layer in a loop), so all layers share one set of weights. Build a new "
             f"{layer_cls} for every position: nn.ModuleList([{layer_cls}(...) for _ in range(num_layers)]).",
             mistake="layers shared")
    owner: dict[int, tuple[int, str]] = {}
    for i, layer in enumerate(layers):
        for name, p in layer.named_parameters():
            j, other = owner.setdefault(p.data_ptr(), (i, name))
            if j != i:
                fail(f"layers {j} and {i} share a parameter (`layers.{j}.{other}` is `layers.{i}.{name}`): every "
                     f"layer needs its own sub-modules. Construct them inside {layer_cls} (or deep-copy whole "
                     "layers), not once outside and passed in.", mistake="layers shared")
    final = getattr(model, "norm", None)
    for name, p in final.named_parameters() if isinstance(final, nn.Module) else ():
        if p.data_ptr() in owner:  # self.norm = self.layers[-1].norm2: one LayerNorm in two roles
            j, other = owner[p.data_ptr()]
            fail(f"the final norm shares its weights with layer {j}'s `{other.rsplit('.', 1)[0]}` (`norm.{name}` is "
                 f"`layers.{j}.{other}`), e.g. self.norm = self.layers[-1].{other.rsplit('.', 1)[0]}: the two roles "
                 "cannot learn different scales, and the model has fewer parameters than it should. Build a "
                 "separate final norm: self.norm = LayerNorm(d_model).", mistake="modules shared")
    for i, layer in enumerate(layers):
        flag = getattr(layer, "norm_first", None)
        if isinstance(flag, bool) and flag != norm_first:
            fail(f"{what}(..., norm_first={norm_first}) built layers with norm_first={flag} (layer {i}): pass "
                 f"norm_first on to every {layer_cls}.", mistake="norm_first not passed on")
    if norm_first and not isinstance(getattr(model, "norm", None), nn.Module):
        fail("the final layer norm is missing: with norm_first=True the stack needs a final LayerNorm, self.norm, "
             "applied after the last layer: in pre-norm the residual stream itself is never normalised.",
             mistake="missing final norm")
    return layers


def unused_final_norm(model: nn.Module, norm_first: bool, what: str) -> None:
    norm = getattr(model, "norm", None)
    if not norm_first and isinstance(norm, nn.Module) and any(True for _ in norm.parameters()):
        fail(f"your {what} creates a final norm also for norm_first=False, where it is never used: its "
             "parameters still count (and would be saved and 'trained'). Create it only for pre-norm: "
             "self.norm = LayerNorm(d_model) if norm_first else None.", mistake="unused final norm")


# ---------------------------------------------------------------- dropout probe with 0 < p < 1
P_RATE = 0.25  # p = 1 cannot tell one dropout from two; 1/4 also tells a mask kept with p from one kept with 1 - p


@contextlib.contextmanager
def swapped(model: nn.Module, stubs: dict[str, nn.Module]) -> Iterator[None]:
    """``model`` with its sub-modules named in ``stubs`` replaced by them; afterwards the
    originals are back and ``model`` is in eval mode."""
    saved = {n: getattr(model, n) for n in stubs}
    try:
        for n, stub in stubs.items():
            setattr(model, n, stub)
        yield
    finally:
        for n, module in saved.items():
            setattr(model, n, module)
        model.eval()


class Constant(nn.Module):
    """Stands in for a sub-layer in :func:`check_dropout_rate`: ``value`` everywhere, shaped
    like its first input (``width`` features if given); ``pair``: returns ``(output,
    weights)`` as an attention does."""

    def __init__(self, value: float, pair: bool = False, width: int | None = None):
        super().__init__()
        self.value, self.pair, self.width = value, pair, width

    def forward(self, x: Tensor, *args: Any, **kwargs: Any) -> Any:
        out = torch.full((*x.shape[:-1], self.width or x.shape[-1]), self.value, dtype=x.dtype)  # (..., width)
        return (out, torch.zeros(out.shape[:-1])) if self.pair else out


class FirstFeatures(nn.Module):
    """Stands in for a linear layer: the first ``width`` features of its input."""

    def __init__(self, width: int):
        super().__init__()
        self.width = width

    def forward(self, x: Tensor) -> Tensor:
        return x[..., : self.width]


def check_dropout_rate(model: nn.Module, run: Callable[[nn.Module], Any], stubs: dict[str, nn.Module], kept: Tensor,
                       what: str, where: str, p: float = P_RATE) -> None:
    """Dropout with ``0 < p < 1`` acts exactly once, with ``p``, on ``where``.

    ``model`` was built with ``dropout = p``; its sub-modules named in ``stubs`` are swapped
    for the stubs (:class:`Constant` sub-layers, ``nn.Identity`` norms) so that ``run(model)``
    gives ``kept`` in eval mode, and in training mode ``kept`` after one dropout: every entry
    0 or ``kept / (1 - p)``, about a fraction ``p`` of them 0. Dropout applied twice scales by
    ``1 / (1 - p)^2``, a wrong ``p`` by something else; a hand-written ``mask * h / (1 - p)``
    passes (nothing here depends on how the random numbers are drawn). When the stubs are not
    reached (eval output not ``kept``, or the code raised with them), there is no verdict."""
    with swapped(model, stubs), torch.no_grad():
        try:
            if not matches(run(model.eval()), kept):
                return  # the code does not go through these names: the other probes judge it
            got = run(model.train())
        except StudentError:
            return
    case = f"training mode, dropout={p:g}, the sub-modules replaced by constants"
    s = dropout_scale(got, kept)
    if s is None:
        fail(f"{where} does not look like one dropout with p={p:g} ({case}): every entry should be 0 or "
             f"scaled by 1 / (1 - p) = {1 / (1 - p):.4g}. Apply nn.Dropout(dropout) once there.",
             mistake="wrong dropout")
    for times in (2, 3):
        if abs(s * (1 - p) ** times - 1) < 1e-3:
            fail(f"dropout is applied {times} times to {where} ({case}): the entries that survive are scaled "
                 f"by {s:.4g} = 1 / (1 - p)^{times} instead of 1 / (1 - p) = {1 / (1 - p):.4g}, and more of them "
                 "are zeroed. Apply the dropout once.", mistake="dropout applied twice")
    if abs(s * (1 - p) - 1) > 1e-3:
        fail(f"the dropout on {where} scales the entries it keeps by {s:.4g}, which is dropout with "
             f"p = {1 - 1 / s:.3g}, not the dropout={p:g} your {what} was built with ({case}). Use the `dropout` "
             "argument, once: nn.Dropout(dropout).", mistake="hard-coded dropout p")
    zeroed = float((got == 0).double().mean())
    # the mistake this names is a keep mask of the wrong polarity (1 - p zeroed): call it so only
    # past the midpoint between p and 1 - p. Two dropouts in a row zero 1 - (1 - p)^2 = 44% at
    # p = 1/4, which a 0.2 margin named "wrong dropout rate" on 1 draw in about 200 (the residual
    # stream dropped after a sub-layer's own dropout, named later by its own entry).
    if abs(zeroed - p) > max(0.2, abs(0.5 - p)):
        fail(f"the dropout on {where} zeroes {zeroed:.0%} of the entries, expected about p = {p:.0%} ({case}): "
             "a hand-written mask keeps an entry with probability 1 - p, (torch.rand_like(h) >= p), and "
             "divides the kept ones by 1 - p.", mistake="wrong dropout rate")


def sublayer_dropout_rates(model: nn.Module, run: Callable[[nn.Module], Any], x: Tensor, spec: Block,
                           p: float = P_RATE) -> None:
    """:func:`check_dropout_rate` for each sub-layer of a residual block ``model`` (built with
    ``dropout = p``): that sub-layer a constant 2, the others 0, the norms identities, so
    that ``run(model) - x`` is 2 in eval mode, in either norm order, and one dropout of 2 in
    training mode; before that, :func:`branch_input_dropout`."""
    norms = [spec.norm(i) for i in range(len(spec.kinds))]
    branch_input_dropout(model, run, norms, spec, p)
    for live in spec.parts:
        stubs: dict[str, nn.Module] = {n: Constant(2.0 if n == live else 0.0, pair) for n, pair in spec.parts.items()}
        stubs.update({n: nn.Identity() for n in norms})

        def delta(m: nn.Module) -> Any:
            out = _first(run(m))
            return out - x if isinstance(out, Tensor) and out.shape == x.shape else out

        check_dropout_rate(model, delta, stubs, torch.full_like(x, 2.0), spec.what, f"{spec.part_word[live]}'s output", p)  # noqa: E501


# ---------------------------------------------------------------- extra dropout inside a branch
class Spy(nn.Module):
    """Stands in for a sub-layer (``zeros``: returns zeros shaped like its first input, as a
    pair when ``pair``) or a norm (returns its input) in :func:`branch_input_dropout`, and
    notes the tensors it was called with (``seen``: one ``{argument: tensor}`` per call)."""

    ARGS = ("query", "key", "value")

    def __init__(self, zeros: bool, pair: bool = False):
        super().__init__()
        self.zeros, self.pair, self.seen = zeros, pair, []

    def forward(self, x: Tensor, *args: Any, **kwargs: Any) -> Any:
        named = dict(zip(self.ARGS if self.pair else ("input",), (x, *args)))
        named.update(kwargs)
        floats = {k: v for k, v in named.items() if isinstance(v, Tensor) and v.is_floating_point()}
        self.seen.append({k: v.detach().clone() for k, v in floats.items()})
        if not self.zeros:
            return x
        out = torch.zeros_like(x)  # (..., D)
        return (out, torch.zeros(out.shape[:-1])) if self.pair else out


def branch_input_dropout(model: nn.Module, run: Callable[[nn.Module], Any], norms: list[str], spec: Block,
                         p: float = P_RATE) -> None:
    """No dropout inside a sub-layer's branch: with every sub-layer a :class:`Spy` that
    returns zeros (so the stream stays ``x``) and every norm a :class:`Spy` identity, the
    tensors each one receives must be the same in training mode (``model`` built with
    ``0 < p < 1``; two training calls) as in eval mode. Dropout on an attention's query,
    key or value, on ``memory``, on a norm's input or on the normalised input is named
    even though the layer's own output dropout would zero that branch at ``p`` close to 1.
    No verdict when the spies are not reached or the code raises with them."""
    # norms first: a norm's input lies upstream of its sub-layer's, so the first difference is the cause
    spies = {n: Spy(False) for n in norms} | {n: Spy(True, pair) for n, pair in spec.parts.items()}
    with swapped(model, spies), torch.no_grad():
        try:
            run(model.eval())
            calls = {n: list(s.seen) for n, s in spies.items()}
            for _ in range(2):  # two draws: an extra dropout that keeps every entry once is no excuse
                for s in spies.values():
                    s.seen.clear()
                run(model.train())
                _compare_branch_inputs(spies, calls, spec, p)
        except StudentError:
            return


def _compare_branch_inputs(spies: dict[str, Spy], calls: dict[str, list[dict[str, Tensor]]], spec: Block,
                           p: float) -> None:
    what, word = spec.what, spec.part_word
    from_memory = {spec.attn[k][2] for k in spec.attn if spec.attn[k][1] == "memory"}
    case = f"training mode, dropout={p:g}, the sub-layers replaced by zeros and the norms by identities"
    for n, spy in spies.items():
        if len(spy.seen) != len(calls[n]):
            continue  # called another number of times than in eval mode: the other probes judge it
        for before, now in zip(calls[n], spy.seen):
            for arg, t in now.items():
                t0 = before.get(arg)
                if t0 is None or t0.shape != t.shape or equal(t0, t):
                    continue
                if n in from_memory and arg in ("key", "value"):
                    fail(f"your {what} applies dropout to `memory` before {word[n]} reads it ({case}: its {arg} "
                         "differs from eval mode). The encoder output goes in unchanged; dropout belongs only on "
                         "each sub-layer's output, before the residual add.", mistake="dropout on the memory")
                where = f"the {arg} of {word[n]}" if n in word else f"the input of {n}"
                fail(f"your {what} applies dropout to {where} ({case}: it differs from eval mode): dropout "
                     "belongs only on each sub-layer's output, before the residual add (post-norm "
                     "norm(x + dropout(sublayer(x))), pre-norm x + dropout(sublayer(norm(x)))). Remove the extra "
                     "dropout.", mistake="dropout on the sub-layer input")
